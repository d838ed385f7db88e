"""How long a GPU job should take, from the runs of its method already in the reference tree.

A lease has minutes; a job started that cannot finish before the deadline is SIGTERMed,
checkpoints on a machine that is then given back, and its work is lost. ``export-jobs``
writes each job's ``expected_s`` (the longest GPU run of the same experiment, data set and
method in ``reference/``: Snakemake's ``benchmark.tsv`` seconds, every call of it summed,
with the jobs that shared the GPU with it) and ``run-jobs`` starts a job only where that
time, times a margin, less the part its log says is done, fits before the deadline.

Standard library only: :mod:`repens.pipeline.kit` runs where nothing else is installed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: a progress line of :mod:`repens.training.train`: ``step 12500/50000``
STEP_LINE = re.compile(r"INFO step (\d+)/(\d+)")


def expected_seconds(job_id: str, reference: Path) -> tuple[float, str] | None:
    """(seconds, where from) for the job whose first output is ``job_id``
    (``results/<experiment>/<dataset>/<method>/seed<N>/<file>``): the longest of the GPU runs
    of the same method in ``reference`` (every seed there); None when it holds none. The
    runs are read as the results page reads them (:mod:`repens.report.results_page`; only
    the login machine that exports the jobs reads them)."""
    from repens.report.results_page import run_benchmark, run_gpu, run_provenance

    parts = Path(job_id).parts
    if len(parts) < 6 or parts[0] != "results" or not parts[-2].startswith("seed"):
        return None
    method_dir = reference.joinpath(*parts[1:-2])
    runs: list[tuple[float, str]] = []
    for result in sorted(method_dir.glob(f"seed*/{parts[-1]}")):
        gpu, seconds = run_gpu(run_provenance(result)), run_benchmark(result).get("s")
        if gpu is not None and seconds is not None:
            runs.append((seconds, gpu))
    if not runs:
        return None
    devices = ", ".join(sorted({d for _, d in runs}))
    return max(s for s, _ in runs), f"the longest of {len(runs)} run(s) on {devices} in {method_dir}"


def held(job_id: str, reference: Path) -> bool:
    """Whether ``reference`` holds the result ``job_id`` names (``results/X`` as ``reference/X``)."""
    parts = Path(job_id).parts
    return len(parts) > 1 and parts[0] == "results" and reference.joinpath(*parts[1:]).is_file()


def add_expected(jobs: list[dict[str, Any]], reference: Path) -> int:
    """Set ``expected_s`` and ``expected_from`` of each job of ``jobs`` that ``reference``
    holds GPU runs of its method for; the number of jobs given one."""
    count = 0
    for job in jobs:
        found = expected_seconds(job["id"], reference)
        if found is not None:
            job["expected_s"], job["expected_from"] = round(found[0], 1), found[1]
            count += 1
    return count


def by_seed_longest_first(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``jobs`` seed by seed (the lowest first, so that a lease completes seeds rather than
    spreading over them), within a seed the longest expected first (what fills the end of a
    deadline is then the short jobs), else in their order. Jobs without a seed go last."""

    def key(item: tuple[int, dict[str, Any]]) -> tuple[float, float, int]:
        index, job = item
        seed = str((job.get("wildcards") or {}).get("seed", ""))
        return (int(seed) if seed.isdigit() else float("inf"), -float(job.get("expected_s") or 0.0), index)

    return [job for _, job in sorted(enumerate(jobs), key=key)]


def done_fraction(log: Path | None, steps: int | None) -> float:
    """The part of a job's ``steps`` its log says is done (its last ``step k/steps`` line: a
    resumed job restarts at its checkpoint, written at that step or later); 0 without one."""
    if log is None or not steps:
        return 0.0
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0.0
    done = [int(m[1]) for m in STEP_LINE.finditer(text) if int(m[2]) == steps]
    return min(1.0, done[-1] / steps) if done else 0.0


def remaining_seconds(job: dict[str, Any], steps: int | None, directory: Path) -> float | None:
    """``expected_s`` of ``job`` (of ``steps`` steps, its spec's) less the part its log (under
    ``directory``) says is done; None when the job has no expectation."""
    expected = job.get("expected_s")
    if expected is None:
        return None
    log = directory / job["log"] if job.get("log") else None
    return float(expected) * (1.0 - done_fraction(log, steps))
