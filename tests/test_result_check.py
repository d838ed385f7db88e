"""A result enters a table only as the job it claims to be (repens.core.results): the
reference tree's runs at a rebuild (restore-result, with runs.json's SHA-256), final
records (tests/test_integrity.py), packs (tests/test_kit.py) and the summaries
(tests/report/test_image_report.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repens import cli
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(yaml.safe_load((ROOT / "config.yaml").read_text()), scale="paper")


def _run(tree: Path, method: str, seed: int, accuracy: float = 0.9) -> Path:
    path = tree / "image" / "fashionmnist" / method / f"seed{seed}" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    job = resolve_job(CONFIG, "image", "fashionmnist", method, seed)
    path.write_text(json.dumps({"job": job, "metrics": {"accuracy": accuracy, "nll": 0.3}}))
    return path


def _publish(tree: Path, runs: list[Path]) -> None:
    listed = {p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in runs}
    (tree / "results").mkdir(exist_ok=True)
    (tree / "results" / "runs.json").write_text(json.dumps(listed))


def _restore(tree: Path, source: Path, out: Path, method: str, seed: int, capsys) -> tuple[int, str]:
    spec = json.dumps(resolve_job(CONFIG, "image", "fashionmnist", method, seed))
    rc = cli.main(["restore-result", "--reference", str(tree), "--spec", spec, str(source), str(out)])
    return rc, capsys.readouterr().err.strip()


def test_a_run_of_the_tree_is_restored_for_its_own_job(tmp_path, capsys):
    tree = tmp_path / "reference"
    run = _run(tree, "svgd", 40)
    _publish(tree, [run])
    out = tmp_path / "results" / "metrics.json"
    assert _restore(tree, run, out, "svgd", 40, capsys) == (0, "")
    assert out.read_bytes() == run.read_bytes()


def test_a_run_copied_over_another_in_the_tree_is_refused_naming_the_file(tmp_path, capsys):
    tree = tmp_path / "reference"
    de, svgd = _run(tree, "de", 38), _run(tree, "svgd", 40)
    svgd.write_bytes(de.read_bytes())  # DE seed 38 over SVGD seed 40, runs.json not listing it
    out = tmp_path / "results" / "metrics.json"
    rc, err = _restore(tree, svgd, out, "svgd", 40, capsys)
    assert rc == 2 and not out.exists()
    assert err.startswith(f"error: {svgd}: holds the result of another job") and "\n" not in err
    assert 'method "de", not "svgd"' in err and "seed 38, not 40" in err


def test_a_run_that_differs_from_runs_json_is_refused_at_the_rebuild(tmp_path, capsys):
    tree = tmp_path / "reference"
    run = _run(tree, "svgd", 40)
    _publish(tree, [run])
    run.write_text(run.read_text().replace('"accuracy": 0.9', '"accuracy": 0.95'))
    out = tmp_path / "results" / "metrics.json"
    rc, err = _restore(tree, run, out, "svgd", 40, capsys)
    assert rc == 2 and not out.exists()
    assert err.startswith(f"error: {run}: changed since the kept tables were built") and "runs.json" in err


def test_a_non_finite_run_in_the_tree_is_refused_naming_the_file(tmp_path, capsys):
    tree = tmp_path / "reference"
    run = _run(tree, "svgd", 40, accuracy=float("nan"))
    out = tmp_path / "results" / "metrics.json"
    rc, err = _restore(tree, run, out, "svgd", 40, capsys)
    assert rc == 2 and not out.exists()
    assert err == f"error: {run}: metrics.accuracy is not a finite number; a result must not reach a table with it"


@pytest.mark.slow  # Snakemake in a subprocess: several seconds
def test_a_rebuild_from_a_tree_with_a_run_copied_over_another_stops_naming_it(tmp_path):
    tree, work = tmp_path / "reference", tmp_path / "work"
    de, svgd = _run(tree, "de", 38), _run(tree, "svgd", 40)
    svgd.write_bytes(de.read_bytes())
    work.mkdir()
    (work / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    target = "results/image/fashionmnist/svgd/seed40/metrics.json"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), "-c1", target]
        + ["--config", "scale=paper", "from_reference=true", f"reference={tree}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode != 0 and not (work / target).exists()
    log = (work / "logs/restore/image/fashionmnist/svgd/seed40/metrics.json.log").read_text()
    assert re.search(rf"error: {re.escape(str(svgd))}: holds the result of another job", log), log
