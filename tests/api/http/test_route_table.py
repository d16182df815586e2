"""The route table: each route that hands its body to an endpoint is one declaration, from
which FastAPI's operation and the fast path are both made. The fast path finds each declared
route where the application's router does, with the router's own key check and, where the
path names the model, the same resolver FastAPI calls."""

from __future__ import annotations

from starlette.routing import Match

from embedgate.api.http.app import create_app
from embedgate.api.http.auth import require_api_key
from embedgate.api.http.fast_path import FastPath, _endpoint_routers, _Table
from embedgate.api.http.paths import tei
from embedgate.api.http.route_table import EndpointRouter
from embedgate.api.settings import Settings


def app_and_table():
    app = create_app(Settings())
    return app, _Table(_endpoint_routers(app.routes))


def concrete(path: str) -> str:
    """A path the route's pattern takes: a model's name where it names one."""
    return path.replace("{model:path}", "org/loaded")


async def routed(app, path: str):
    """The route the application's own router picks for a POST to ``path``."""
    scope = {"type": "http", "method": "POST", "path": path, "root_path": "", "headers": [], "query_string": b"",
             "app": app}

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        pass

    try:
        await app.router(scope, receive, send)
    except Exception:  # noqa: BLE001 - no gateway: the route was chosen before it was asked for
        pass
    return scope.get("route")


async def test_every_route_that_runs_a_model_is_found_where_the_application_routes_it():
    app, table = app_and_table()
    declared = [(d, r) for router in _endpoint_routers(app.routes) for d, r in router.endpoint_routes if d.runs_model]
    assert len(declared) == 19  # /infer, /rerank twice, /predict, Cohere's two, /v1/embeddings, TEI's six twice
    for declaration, route in declared:
        path = concrete(route.path)
        entry, _ = table.match(path)
        assert entry.route is route is await routed(app, path), path
        assert entry.declared is declaration and entry.check is require_api_key


def test_teis_routes_find_their_model_with_the_resolver_fastapi_calls():
    app, table = app_and_table()
    entry, params = table.match("/tei/org/loaded/embed")
    assert entry.declared.model_of is tei.named_model and params == {"model": "org/loaded"}
    assert table.match("/tei/embed")[0].declared.model_of is tei.default_model
    dependencies = {dependant.call for dependant in entry.route.dependant.dependencies}
    assert tei.named_model in dependencies


def test_routes_that_run_no_model_and_other_routes_are_left_to_the_application():
    _, table = app_and_table()
    for path in ("/tei/org/loaded/tokenize", "/tei/decode", "/tei/org/loaded", "/tei", "/infer_image", "/v1/files"):
        assert table.match(path) is None, path


def test_every_route_of_an_endpoint_router_runs_its_key_check():
    app = create_app(Settings(api_keys=["k"]))
    routers = list(_endpoint_routers(app.routes))
    teis = [router for router in routers if router is tei.router or router is tei.named_router]
    assert teis[0] is tei.router and teis[1] is tei.named_router and len(teis) == 2
    for router in routers:
        assert isinstance(router, EndpointRouter)
        for route in router.routes:
            assert router.check in {dependant.call for dependant in route.dependant.dependencies}, route.path
    assert any(middleware.cls is FastPath for middleware in app.user_middleware)
