"""The layers of the code, read from its import statements.

``fairseq_plugins`` is glue that calls ``nmt_specdec``, never the reverse; the
two backends (``nmt_specdec/decoding/backends/torch`` and ``.../onnxruntime``)
never import each other; and no module imports itself through others. The
graph is read from the source with ``ast``, so every import counts: at module
level, inside functions, under ``TYPE_CHECKING``.
Only modules of the two packages are nodes; an import of a name defined in a
package's ``__init__`` is an edge to that package.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nmt_specdec", "fairseq_plugins")
PLUGIN = "fairseq_plugins"
BACKENDS = ("nmt_specdec.decoding.backends.torch", "nmt_specdec.decoding.backends.onnxruntime")

Graph = Dict[str, Set[str]]


def _module_files() -> Dict[str, Path]:
    """Dotted module name -> file, for every module of the two packages."""
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name an import statement in ``tree`` asks for (relative
    imports resolved against ``module``); ``from a import b`` yields ``a.b``,
    which is module ``a.b`` if there is one, else a name defined in ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # A package's own name is its first anchor; a module's is its parent.
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            yield from (base if alias.name == "*" else f"{base}.{alias.name}"
                        for alias in node.names)


def _resolve(name: str, modules: Set[str]) -> str | None:
    """The module ``name`` lands in: itself, else its longest module prefix."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def build_graph() -> Graph:
    """Module -> the modules of the two packages it imports (itself excluded)."""
    files = _module_files()
    modules = set(files)
    graph: Graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = (_resolve(name, modules) for name in
                   _imported_names(tree, module, path.name == "__init__.py"))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: Graph) -> List[Set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def backend_crossings(graph: Graph) -> Set[Tuple[str, str]]:
    """(importer, imported) pairs where one backend imports the other."""
    return {(module, target) for module, targets in graph.items() for target in targets
            for mine, other in (BACKENDS, BACKENDS[::-1])
            if _in(module, mine) and _in(target, other)}


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_graph_sees_every_kind_of_import(graph: Graph) -> None:
    """Sanity: relative, function-level and package-level imports are all read."""
    assert "nmt_specdec.decoding.backends.base" in graph["nmt_specdec.decoding.backends"]
    # The ONNX Runtime backend's create() imports its session inside the function.
    assert "nmt_specdec.decoding.backends.onnxruntime.session" in graph[
        "nmt_specdec.decoding.backends.onnxruntime"]
    assert "nmt_specdec.checkpoints" in graph["fairseq_plugins.checkpoint_safety"]
    tree = ast.parse("from . import a\nfrom .b import c\nfrom .. import d\n")
    assert list(_imported_names(tree, "p.q.m", False)) == ["p.q.a", "p.q.b.c", "p.d"]
    assert list(_imported_names(tree, "p.q", True)) == ["p.q.a", "p.q.b.c", "p.d"]


def test_nmt_specdec_never_imports_the_plugin(graph: Graph) -> None:
    importers = sorted(module for module, targets in graph.items()
                       if _in(module, "nmt_specdec") and any(_in(t, PLUGIN) for t in targets))
    assert importers == []


def test_no_backend_imports_another(graph: Graph) -> None:
    assert sorted(backend_crossings(graph)) == []


def test_no_import_cycle(graph: Graph) -> None:
    assert [sorted(c) for c in cycles(graph)] == []


def test_cycle_finder_finds_a_cycle() -> None:
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(toy) == [{"a", "b", "c"}]


# The layers, lowest first: a module imports only modules of its own layer or below.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("nmt_specdec.errors", "nmt_specdec.logs", "nmt_specdec.arguments", "nmt_specdec.hashing",
     "nmt_specdec.cpu_flags"),
    ("nmt_specdec.checkpoint_safety", "nmt_specdec.load_errors", "nmt_specdec.export",
     "nmt_specdec.shipping", "nmt_specdec.raw_text", "nmt_specdec.data",
     "nmt_specdec.model_shards", "nmt_specdec.shipped_models"),
    ("nmt_specdec.checkpoints",),
    ("nmt_specdec.model",),
    ("nmt_specdec.decoding.decision",),
    ("nmt_specdec.decoding",),
    ("nmt_specdec.decoding.loops",),
    ("nmt_specdec.decoding.generator",),
    ("nmt_specdec.decoding.build",),
    ("nmt_specdec.evaluation", "nmt_specdec.translate"),
    ("nmt_specdec.workflows", "nmt_specdec"),
    (PLUGIN,),
)


def layer_of(module: str) -> int:
    """The layer of ``module``: that of its longest declared prefix."""
    found = [(len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
             if _in(module, prefix)]
    assert found, f"{module} is in no layer: add it to LAYERS"
    return max(found)[1]


def upward_arrows(graph: Graph) -> List[Tuple[str, str]]:
    return sorted((module, target) for module, targets in graph.items() for target in targets
                  if layer_of(target) > layer_of(module))


def test_no_module_imports_a_layer_above_its_own(graph: Graph) -> None:
    assert upward_arrows(graph) == []


def test_the_layer_rule_sees_an_upward_arrow() -> None:
    toy = {"nmt_specdec.model.draft_head": {"nmt_specdec.decoding.passes.layers"},
           "nmt_specdec.decoding.generator": {"nmt_specdec.model.draft_head"}}
    assert upward_arrows(toy) == [("nmt_specdec.model.draft_head",
                                   "nmt_specdec.decoding.passes.layers")]
