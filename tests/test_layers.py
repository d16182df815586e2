"""The package's layers, as the architecture page draws them, kept true by reading every
module's imports (absolute, relative at any depth, and ``from package import module``):

- between the top-level packages, only what the architecture allows crosses: the gateway
  (``api``) and the converters share the contract (``contract``) and neither imports the
  other; the code that runs inside Triton (``python_backend``) imports nothing of
  embedgate; the benchmark takes the gateway's public pieces; only the command line
  starts the benchmark;
- inside the gateway, each layer imports only itself and the layers below it (not its
  siblings of the same rank);
- no module imports another in a circle, anywhere.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# package -> its folder (pyproject.toml's package-dir)
FOLDERS = {"api": "api", "bench": "bench", "contract": "contract", "converters": "converters",
           "python_backend": "python_backend"}

# The gateway's layers, top to bottom. A module's layer is the longest prefix listed here.
LAYERS = [
    ("api.__main__",),
    ("api.cli",),
    ("api.ray_serve", "api.workers"),
    # TEI's gRPC API: a face over the HTTP face's keys and TEI's shapes, given to the app by
    # whoever serves it (the HTTP app imports nothing of it).
    ("api.grpc",),
    ("api.http",),
    ("api.gateway",),
    ("api.jobs",),
    ("api.endpoints",),
    ("api.models",),
    ("api.compute.service",),
    ("api.compute.bulk_lane",),
    ("api.compute.dispatch", "api.compute.document_chunks"),
    ("api.compute.engine",),
    ("api.compute.cache", "api.compute.tokens", "api.compute.images", "api.compute.backend"),
    ("api.compute.scheduling",),
    ("api.compute.requests",),
    ("api.compute",),
    ("api.triton",),
    ("api.telemetry", "api.errors", "api.settings", "api.collector", "api"),
    ("api.key_names",),
]

# What each package may import of the others (prefixes of module names).
ALLOWED = {
    "api": ("contract",),
    "converters": ("contract", "python_backend.torch_graphs"),
    "contract": (),
    "python_backend": (),
    # python_backend.torch_graphs: a GPU instance's forward, timed as the instance runs it.
    # api.compute.requests.chunking: a chunked request's chunks, cut here to send them as inputs.
    # api.grpc.stubs: TEI's gRPC interface, which the benchmark loads as a client does.
    "bench": ("contract", "converters.weights", "converters.triton_config", "converters.library.gpu",
              "python_backend.torch_graphs", "api.settings", "api.models.names", "api.compute.requests.chunking",
              "api.grpc.stubs"),
}


def module_name(path: Path) -> str:
    for package, folder in FOLDERS.items():
        base = ROOT / folder
        if path.is_relative_to(base):
            parts = (package, *path.relative_to(base).with_suffix("").parts)
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


MODULES = {
    module_name(path): path
    for folder in FOLDERS.values()
    for path in (ROOT / folder).rglob("*.py")
    if "__pycache__" not in path.parts
}


def _resolve(target: str, names: list[str]) -> set[str]:
    """The modules ``from target import names`` reaches: each name that is a module, else
    the module ``target`` itself."""
    reached = {f"{target}.{name}" for name in names if f"{target}.{name}" in MODULES}
    if len(reached) < len(names) and target in MODULES:
        reached.add(target)
    return reached


def _typing_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes under ``if TYPE_CHECKING:`` (imported for annotations, never run)."""
    return {
        inner
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }


def imports(name: str, *, typing: bool = True) -> set[str]:
    """Every module of the packages that ``name`` imports, at any depth of its code (those
    imported for annotations only too, unless not ``typing``)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    skipped = set() if typing else _typing_only(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level <= len(package), f"{name}: a relative import climbs above its package"
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("embedgate."):
                target = node.module[len("embedgate."):]
            else:
                continue
            reached = _resolve(target, [alias.name for alias in node.names])
            assert reached, f"{name}: imports {target}, which is no module of the packages"
            found |= reached
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("embedgate."):
                    found.add(alias.name[len("embedgate."):])
    found.discard(name)
    return found


@functools.cache
def graph(*, typing: bool = True) -> dict[str, set[str]]:
    """Each module's imports (``typing=False``: what runs; a cycle through imports made for
    annotations only is none). Read at the first test that asks, not as the file is
    collected: every test process collects it, one runs it."""
    return {name: imports(name, typing=typing) for name in MODULES}


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_import_reader_resolves_every_form():
    # ``from ..x import y`` climbing out of a subpackage, ``from embedgate.api import X``
    # (a name, not a module: the package itself), and ``from .pkg import module``.
    assert "api.compute.requests.asks" in graph()["api.compute.requests.kinds.base"]
    assert "api.errors" in graph()["api.compute.requests.kinds.base"]
    assert "api" in graph()["api.http.tei.info"]
    assert "api.compute.scheduling.tenants" in graph()["api.compute.scheduling.rates"]


def test_packages_import_only_what_the_architecture_allows():
    crossing = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        for target in targets
        if top(target) != top(name)
        and not any(target == p or target.startswith(p + ".") for p in ALLOWED[top(name)])
        and not (top(target) == "bench" and name == "api.cli.main")
    ]
    assert crossing == []


def test_only_the_command_line_starts_the_benchmark():
    users = {name for name, targets in graph().items() if top(name) != "bench" and any(top(t) == "bench" for t in targets)}
    assert users <= {"api.cli.main"}


def test_the_code_that_runs_inside_triton_imports_nothing_of_embedgate():
    # It runs in the stub's Python, where embedgate is not installed: its siblings are
    # imported by their plain names, from beside model.py.
    for name, path in MODULES.items():
        if top(name) == "python_backend":
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    assert not node.level and not node.module.startswith("embedgate"), (name, node.module)
                elif isinstance(node, ast.Import):
                    assert not any(alias.name.startswith("embedgate") for alias in node.names), name


def layer(name: str) -> int:
    best, rank = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"{name} is in no layer: add it to LAYERS"
    return rank


def group(name: str) -> str:
    """The entry of LAYERS that ``name`` belongs to (its layer may hold several)."""
    return max((p for p in LAYERS[layer(name)] if name == p or name.startswith(p + ".")), key=len)


def gateway_graph() -> dict[str, set[str]]:
    return {name: {t for t in targets if top(t) == "api"} for name, targets in graph().items() if top(name) == "api"}


def test_each_layer_imports_only_itself_and_the_layers_below():
    upward = [
        f"{name} -> {target}"
        for name, targets in gateway_graph().items()
        for target in targets
        if name != "api" and layer(target) < layer(name)
    ]
    assert upward == []


def test_siblings_of_one_layer_do_not_import_each_other():
    sideways = [
        f"{name} -> {target}"
        for name, targets in gateway_graph().items()
        for target in targets
        if name != "api" and layer(target) == layer(name) and group(target) != group(name)
    ]
    assert sideways == []


def test_no_module_imports_another_in_a_circle():
    cycles, state = [], {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph(typing=False).get(name, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[name] = "done"

    for name in sorted(graph(typing=False)):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_domain_errors_carry_no_http_status():
    from embedgate.api.errors import EmbedgateError

    for name in MODULES:
        # __main__ would run the command line.
        if top(name) == "api" and name != "api.__main__":
            importlib.import_module(f"embedgate.{name}")
    seen, todo = [], [EmbedgateError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    assert len(seen) > 20
    assert [cls.__name__ for cls in seen if {"status", "headers"} & set(vars(cls))] == []


def generated(path: Path) -> bool:
    """Written by a tool at build time (TEI's gRPC stubs, by protoc), not by hand."""
    return path.is_relative_to(ROOT / "api" / "grpc" / "stubs") and path.name != "__init__.py"


def test_no_module_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in MODULES.values()
        if not generated(path) and (n := len(path.read_text().splitlines())) > 400
    }
    assert long == {}
