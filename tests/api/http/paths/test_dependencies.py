"""The routes' shared dependencies run on the event loop."""

import inspect

import pytest

from embedgate.api.http.paths import get_gateway, request_timeout


@pytest.mark.parametrize("dependency", [get_gateway, request_timeout])
def test_dependencies_are_coroutines(dependency):
    # FastAPI runs a plain function dependency in its thread pool: a thread hop per request.
    assert inspect.iscoroutinefunction(dependency)
