"""The route a request's task takes; a task without one is refused naming the routes."""

from __future__ import annotations

import pytest

from embedgate.api.compute.requests.routes import EVERY_TASK, Route, route_for
from embedgate.api.errors import UnknownRoute

DOCUMENT = Route("document", ("default", "document"), None, "m", "1")
QUERY = Route("query", ("query",), None, "m", "2")


def test_a_task_takes_its_route_and_no_task_the_default():
    assert route_for([DOCUMENT, QUERY], "query", "m") is QUERY
    assert route_for([DOCUMENT, QUERY], "document", "m") is DOCUMENT
    assert route_for([DOCUMENT, QUERY], None, "m") is DOCUMENT


def test_a_model_without_routes_takes_every_task_through_its_one():
    only = Route("", EVERY_TASK, None, "m")
    assert all(route_for([only], task, "m") is only for task in (None, "query", "document"))


def test_a_task_without_a_route_is_refused_naming_the_routes():
    with pytest.raises(UnknownRoute, match="no route for a task; its routes: 'query' .task 'query'.") as refused:
        route_for([QUERY], None, "m")
    assert refused.value.code == "unknown_route"
    with pytest.raises(UnknownRoute, match="no route for task 'document'"):
        route_for([QUERY], "document", "m")


def test_every_route_has_rows_of_its_own_in_the_cache():
    assert len({Route("", EVERY_TASK, None, "m").serial for _ in range(3)}) == 3
