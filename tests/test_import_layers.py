"""The package's modules import only down their layers, and no import cycle joins them.

``src/repens`` is made of layer subpackages (data and models below the methods, the methods
below training, training below the experiments; job types and keys below training; the
pipeline's modules and the command line above the experiments; the reports read files
only, and the summaries never import a report: both read the results contract).
:data:`LAYERS` gives each subpackage (or top-level module) its layer; a module may import
(at any depth: inside a function too, dynamic imports included) only modules of its own
layer or below. The
reports import nothing above :data:`REPORT_MAY_IMPORT` besides themselves. An edge that
still runs the wrong way is listed, with why, in :data:`KNOWN_EXCEPTIONS`; a cycle among
module-level imports in :data:`KNOWN_CYCLES`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "repens"

#: subpackage (every module under it) or module (``repens.`` left off) -> layer
LAYERS: dict[str, int] = {
    # 0: plumbing that imports nothing else of the package: errors, atomic writes, the
    # registry of names, environment variables, job keys, the version
    "core": 0,
    # 1: data sets, job types, the rules' options, provenance; the results contract (what
    # the result files hold and how they are read: the summaries and the reports read it)
    "data": 1,
    "jobs": 1,
    "results": 1,
    # 2: networks, particles, targets, posteriors and their kernels and scores; metrics
    "models": 2,
    "evaluation": 2,
    # 3: the methods' steps
    "methods": 3,
    # 4: training and sampling
    "training": 4,
    # 5: the experiments
    "experiments": 5,
    # 6: the reports (read files only; see REPORT_MAY_IMPORT)
    "report": 6,
    # 7: summaries and convergence verdicts of finished runs (they read the results contract)
    "summaries": 7,
    # 8: the workflow's side and the command line
    "pipeline": 8,
    "cli": 8,
    "__main__": 8,
    # 9: the library's front door (repens/__init__.py), each name imported on first use
    "": 9,
}

#: the reports import only modules of these layers, and each other
REPORT_MAY_IMPORT = 1


def is_summary(module: str) -> bool:
    return module == "summaries" or module.startswith("summaries.")


#: (importer, imported) -> why the wrong-way edge is still there
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

#: module-level import cycles still there: each pair imports the other at load
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    """``repens/report/claims.py`` -> ``report.claims``; ``repens/__init__.py`` -> ``""``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of the package a dotted name (``repens.x.y``, ``repens`` left off) is."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in known else None


def imports(path: Path, known: dict[str, Path], top_level_only: bool = False) -> Iterator[str]:
    """The package's modules ``path`` imports (``repens`` left off): at any depth, dynamic
    imports included (:func:`imported_names`), or only those run at import
    (``top_level_only``: statements of the module body, not inside a function, a class or an
    ``if TYPE_CHECKING``)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for target in imported_names(tree, package, top_level_only):
        if target == "repens" or target.startswith("repens."):
            found = _resolve(target.removeprefix("repens").lstrip("."), known)
            if found is not None and found != here:
                yield found


def imported_names(tree: ast.Module, package: str, top_level_only: bool = False) -> Iterator[str]:
    """The dotted names a module imports: its ``import`` statements (relative ones resolved
    against ``package``, ``repens`` left off), and, at any depth, its dynamic imports: a call
    of ``import_module`` or ``__import__`` on a string (of an f-string, its literal start),
    and a ``"module:function"`` string naming what is imported later."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
                module = "repens" + ("." + module if module else "")
            else:
                module = node.module or ""
            # `from repens import registry` imports the module repens.core.registry
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif not top_level_only:
            yield from _dynamic_import(node)


_TARGET = re.compile(r"(repens(?:\.\w+)+):\w+")


def _dynamic_import(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("import_module", "__import__"):
            prefix = _literal_start(node.args[0])
            if prefix:
                yield prefix.rstrip(".")
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        match = _TARGET.fullmatch(node.value)
        if match:
            yield match[1]


def _literal_start(arg: ast.AST) -> str:
    """A string constant, or the literal parts an f-string starts with."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        start = []
        for part in arg.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            start.append(part.value)
        return "".join(start)
    return ""


def layer(module: str) -> int:
    name = module
    while True:
        if name in LAYERS:
            return LAYERS[name]
        if "." not in name:
            raise KeyError(module)
        name = name.rsplit(".", 1)[0]


def is_report(module: str) -> bool:
    return module == "report" or module.startswith("report.")


def wrong_edges() -> dict[tuple[str, str], str]:
    known = modules()
    found = {}
    for name, path in known.items():
        for target in imports(path, known):
            if is_report(name) and not is_report(target) and layer(target) > REPORT_MAY_IMPORT:
                found[(name, target)] = f"a report imports layer {layer(target)} (> {REPORT_MAY_IMPORT})"
            elif is_summary(name) and is_report(target):
                found[(name, target)] = "a summary imports a report (both read the results contract, repens.results)"
            elif layer(target) > layer(name):
                found[(name, target)] = f"layer {layer(name)} imports layer {layer(target)}"
    return found


def test_every_module_has_a_layer():
    missing = []
    for name in modules():
        try:
            layer(name)
        except KeyError:
            missing.append(name)
    assert not missing, f"give these modules a layer in LAYERS: {missing}"


def test_imports_run_down_the_layers():
    found = wrong_edges()
    new = {edge: why for edge, why in found.items() if edge not in KNOWN_EXCEPTIONS}
    assert not new, "imports that run up the layers:\n" + "\n".join(f"{a} -> {b}: {w}" for (a, b), w in new.items())


def test_known_exceptions_are_still_needed():
    found = wrong_edges()
    stale = sorted(set(KNOWN_EXCEPTIONS) - set(found))
    assert not stale, f"these edges are gone or now allowed: drop them from KNOWN_EXCEPTIONS: {stale}"


def cycles() -> list[list[str]]:
    """The strongly connected components (more than one module) of the module-level imports."""
    known = modules()
    graph = {name: sorted(set(imports(path, known, top_level_only=True))) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    new = [c for c in cycles() if frozenset(c) not in KNOWN_CYCLES]
    assert not new, f"module-level import cycles: {new}"


@pytest.mark.parametrize("edge", sorted(KNOWN_EXCEPTIONS))
def test_known_exceptions_are_declared_modules(edge):
    known = modules()
    assert all(name in known for name in edge), edge


def test_the_scan_sees_imports_inside_functions():
    known = modules()
    assert "core.jobkey" in set(imports(PACKAGE / "jobs" / "provenance.py", known))  # imported in a function
    assert "core.jobkey" not in set(imports(PACKAGE / "jobs" / "provenance.py", known, top_level_only=True))
    assert "core.registry" in set(imports(PACKAGE / "jobs" / "job.py", known))  # `from repens.core import registry`


def test_the_scan_sees_dynamic_imports():
    source = (
        "import importlib\n"
        "def f(name):\n"
        "    importlib.import_module('repens.training.train')\n"
        "    importlib.import_module(f'repens.experiments.{name}')\n"
        "    __import__('repens.pipeline.kit')\n"
        "    return 'repens.report.claims:main', 'a:b', f'{name}.x'\n"
    )
    found = set(imported_names(ast.parse(source), "core"))
    assert {"repens.training.train", "repens.experiments", "repens.pipeline.kit", "repens.report.claims"} <= found
    assert "a" not in found
    # the methods find a rule's module by its name: an import of their own layer
    assert "methods.rules" in set(imports(PACKAGE / "methods" / "rule.py", modules()))
    # the front door imports each of its names on first use, from the layers below it
    assert {"methods.rules.svgd", "models.wrap"} <= set(imports(PACKAGE / "__init__.py", modules()))
