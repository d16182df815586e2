"""A model's routes, as its Router resolves text of each task: the default route first, each
route the whole stack its texts go through; what cannot be served so is refused."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import ROUTE_TASKS
from embedgate.converters.library.routes import describe, routes


@pytest.fixture(scope="module")
def modules():
    from sentence_transformers.base.modules import Dense, Normalize, Router

    def dense():
        return Dense(4, 4)

    return Router, dense, Normalize


def names(route) -> list[str]:
    return [type(module).__name__ for module in route.modules]


def test_a_model_without_a_router_is_one_route_for_every_task(modules):
    _, dense, normalize = modules
    (route,) = routes([dense(), normalize()])
    assert route.name == "" and route.tasks == ROUTE_TASKS and route.task is None
    assert names(route) == ["Dense", "Normalize"]


def test_query_and_document_routes_each_with_the_modules_around_the_router(modules):
    router_class, dense, normalize = modules
    query, document = dense(), dense()
    router = router_class.for_query_document(query_modules=[query], document_modules=[document])
    before, after = dense(), normalize()
    found = routes([before, router, after])
    assert [(route.name, route.tasks) for route in found] == [("document", ("default", "document")), ("query", ("query",))]
    assert found[0].modules == (before, document, after) and found[1].modules == (before, query, after)
    assert found[0].task is None and found[1].task == "query"
    assert describe(found) == "document (default, document), query (query)"


def test_without_a_default_route_a_text_must_name_its_task(modules):
    router_class, dense, _ = modules
    router = router_class.for_query_document(
        query_modules=[dense()], document_modules=[dense()], default_route=None, allow_empty_key=False
    )
    assert [route.tasks for route in routes([router])] == [("query",), ("document",)]


def test_route_mappings_are_followed_and_a_route_no_text_takes_is_left_out(modules):
    # As the library resolves them: "document" matches no mapping and names no route, so
    # encode_document fails there (and the gateway refuses that task); "pictures" takes no text.
    router_class, dense, _ = modules
    router = router_class(
        {"short": [dense()], "long": [dense()], "pictures": [dense()]},
        default_route="long",
        route_mappings={("query", "text"): "short", (None, "image"): "pictures"},
    )
    assert [(route.name, route.tasks) for route in routes([router])] == [
        ("long", ("default",)), ("short", ("query",))
    ]


def test_routers_within_routes_or_side_by_side_are_refused(modules):
    router_class, dense, _ = modules
    inner = router_class.for_query_document(query_modules=[dense()], document_modules=[dense()])
    nested = router_class.for_query_document(query_modules=[inner], document_modules=[dense()])
    with pytest.raises(UnsupportedModelError, match="holds another Router"):
        routes([nested])
    with pytest.raises(UnsupportedModelError, match="2 Routers"):
        routes([inner, router_class.for_query_document(query_modules=[dense()], document_modules=[dense()])])
