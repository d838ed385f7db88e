"""Planning a run never imports torch.

Snakemake reads the Snakefile and every rule file on each invocation (a dry run, each
job's own start under a cluster executor, ``--lint``); importing torch there costs
about a second of CPU each time. Every module of this package the workflow imports must
therefore be torch-free at import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

_FROM = re.compile(r"^\s*from\s+(repens(?:\.\w+)*)\s+import\b", re.M)
_IMPORT = re.compile(r"^\s*import\s+(repens(?:\.\w+)*)\b", re.M)


def workflow_files() -> list[Path]:
    return [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]


def workflow_modules() -> list[str]:
    """Every ``repens`` module the Snakefile and the rule files import (at load or inside
    their functions)."""
    found: set[str] = set()
    for path in workflow_files():
        text = path.read_text()
        found.update(_FROM.findall(text))
        found.update(_IMPORT.findall(text))
    return sorted(found)


def loaded_after_import(modules: list[str]) -> set[str]:
    """The names in ``sys.modules`` of a fresh interpreter after importing ``modules``."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print('\\n'.join(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_the_workflow_imports_modules_of_the_package():
    modules = workflow_modules()
    assert "repens.pipeline.config" in modules and "repens.pipeline.checks" in modules, modules
    assert "repens.data.uci_files" in modules, modules  # the UCI names the rules use


def test_planning_imports_no_torch():
    modules = workflow_modules()
    loaded = loaded_after_import(modules)
    assert "repens.pipeline.config" in loaded  # the imports ran
    assert "torch" not in loaded, f"importing {', '.join(modules)} imports torch"


_DRY_RUN = """
import atexit, sys
atexit.register(lambda: print("MODULES", *sorted(m for m in sys.modules if m.split(".")[0] == "torch"),
                              file=sys.stderr))
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_a_dry_run_of_everything_imports_no_torch(tmp_path):
    """Planning every target at the paper's scale (the functions the rules call while the
    DAG is built included) leaves torch unimported."""
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _DRY_RUN,
            "-s",
            str(ROOT / "Snakefile"),
            "-d",
            str(tmp_path),
            "-n",
            "all",
            "results/table2_uci.tex",
            "--quiet",
            "rules",
            "--config",
            "scale=paper",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("MODULES")]
    assert line == "MODULES", line[:300]
