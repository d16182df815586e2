"""The package's layers, as the architecture page draws them, kept true by reading the
imports: each layer of the gateway imports only itself and the layers below it (not its
siblings of the same rank), no module imports another in a circle, and between the three
packages only their contracts cross: the gateway uses the converters' spec and repository,
the converters the gateway's torch-free preprocessing, the benchmark the gateway's public
pieces."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "embedgate.api"

# Top to bottom. A module's layer is the longest prefix listed here.
LAYERS = [
    ("__main__",),
    ("cli",),
    ("ray_serve", "workers"),
    ("http",),
    ("gateway",),
    ("jobs",),
    ("models",),
    ("compute",),
    ("compute.preprocess", "triton"),
    ("telemetry", "errors", "settings", "collector", "__init__"),
    ("key_names",),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "api").with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / "api").rglob("*.py")}


def imports(name: str, path: Path) -> set[str]:
    """The api modules ``name`` imports (relative imports resolved), at any depth."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith(PACKAGE + "."):
                target = node.module[len(PACKAGE) + 1 :]
            else:
                continue
            candidates = [f"{target}.{alias.name}" if target else alias.name for alias in node.names]
            known = modules()
            resolved = [c for c in candidates if c in known]
            found.update(resolved or ([target] if target in known else []))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1 :])
    found.discard(name)
    return found


def layer(name: str) -> int:
    best, rank = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"api/{name.replace('.', '/')}.py is in no layer: add it to LAYERS"
    return rank


GRAPH = {name: imports(name, path) for name, path in modules().items()}


def test_each_layer_imports_only_itself_and_the_layers_below():
    upward = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if name != "__init__" and layer(target) < layer(name)
    ]
    assert upward == []


def group(name: str) -> str:
    """The entry of LAYERS that ``name`` belongs to (its layer may hold several)."""
    return max((p for p in LAYERS[layer(name)] if name == p or name.startswith(p + ".")), key=len)


def test_siblings_of_one_layer_do_not_import_each_other():
    sideways = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if name != "__init__" and layer(target) == layer(name) and group(target) != group(name)
    ]
    assert sideways == []


def absolute_imports(folder: str, package: str) -> dict[str, set[str]]:
    """File (relative to the root) -> the modules of ``package`` it imports by name."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name == package or name.startswith(package + "."):
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(name[len(package) + 1 :])
    return found


def crossing(folder: str, package: str, allowed: tuple[str, ...]) -> list[str]:
    return [
        f"{path} -> {package}.{name}"
        for path, names in sorted(absolute_imports(folder, package).items())
        for name in sorted(names)
        if not any(name == prefix or name.startswith(prefix + ".") for prefix in allowed)
    ]


def test_the_gateway_takes_only_the_converters_contract():
    # The spec (conversion job, metadata.json) and the repository code both sides publish
    # and read with; conversions themselves run in a subprocess (python -m embedgate.converters).
    assert crossing("api", "embedgate.converters", ("spec", "repository")) == []


def test_the_converters_take_only_the_gateways_torch_free_preprocessing():
    # The CLIP parity check runs the gateway's own preprocessing, and the GPU parity check
    # loads a graph as the GPU instances do (triton.torch_graphs): what is checked is what serves.
    assert crossing("converters", "embedgate.api", ("compute.preprocess", "triton.torch_graphs")) == []


def test_the_benchmark_takes_only_the_gateways_public_pieces():
    # triton.torch_graphs: a GPU instance's forward, timed as the instance runs it.
    assert crossing(
        "bench", "embedgate.api", ("settings", "models.names", "compute.preprocess", "triton.torch_graphs")
    ) == []


def test_only_the_command_line_starts_the_benchmark():
    users = {path for path, names in absolute_imports("api", "embedgate.bench").items()}
    assert users <= {"api/cli/main.py"}
    assert absolute_imports("converters", "embedgate.bench") == {}


def test_no_module_imports_another_in_a_circle():
    cycles, state = [], {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for target in sorted(GRAPH.get(name, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_domain_errors_carry_no_http_status():
    import importlib

    from embedgate.api.errors import EmbedgateError

    for name in modules():
        # __main__ would run the command line; the backend model runs inside Triton only.
        if name not in ("__main__", "triton.python_backend_model"):
            importlib.import_module(f"{PACKAGE}.{name}" if name != "__init__" else PACKAGE)
    seen, todo = [], [EmbedgateError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    assert len(seen) > 20
    assert [cls.__name__ for cls in seen if {"status", "headers"} & set(vars(cls))] == []


def test_no_module_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in list((ROOT / "api").rglob("*.py")) + list((ROOT / "converters").rglob("*.py")) + list((ROOT / "bench").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 400
    }
    assert long == {}
