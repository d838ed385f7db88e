"""The reports only read and draw: no module of repens.report imports what computes.

Imports are read with ``ast`` (the modules are not imported), at any depth of the module
(a function's own imports count too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "src" / "repens" / "report"
#: what a report must not import: torch and the modules that compute
FORBIDDEN = (
    "torch",
    "repens.models.targets",
    "repens.evaluation.metrics",
    "repens.evaluation.distances",
    "repens.data",
    "repens.summaries",
    "repens.summaries.converged",
    "repens.experiments",
    "repens.training.train",
    "repens.training.fitting",
)


def _imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import (this test reads absolute ones)")
    return names


def _forbidden(names: list[str]) -> list[str]:
    return sorted({n for n in names for bad in FORBIDDEN if n == bad or n.startswith(bad + ".")})


@pytest.mark.parametrize("path", sorted(REPORT.rglob("*.py")), ids=lambda p: p.relative_to(REPORT).as_posix())
def test_report_module_imports_nothing_that_computes(path):
    assert _forbidden(_imported(path)) == [], (
        f"{path.relative_to(REPORT.parents[2])} imports {_forbidden(_imported(path))}"
    )


def test_the_check_finds_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import numpy\n\ndef f():\n    from repens.evaluation.metrics import mean_error\n    import torch.nn\n"
    )
    assert _forbidden(_imported(module)) == [
        "repens.evaluation.metrics",
        "repens.evaluation.metrics.mean_error",
        "torch.nn",
    ]
    module.write_text("from repens import data\nfrom repens.core.errors import DataFileError\n")
    assert _forbidden(_imported(module)) == ["repens.data"]
