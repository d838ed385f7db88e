"""How long a GPU job should take, from the runs of its method already in the reference tree.

A lease has minutes; a job started that cannot finish before the deadline is SIGTERMed,
checkpoints on a machine that is then given back, and its work is lost. ``export-jobs``
writes each job's ``expected_s`` (the longest GPU run of the same experiment, data set and
method in ``reference/``: Snakemake's ``benchmark.tsv`` seconds, every call of it summed,
with the jobs that shared the GPU with it) and ``expected_jobs`` (how many jobs shared the
GPU then, read from the logs' timestamps), and ``run-jobs`` starts a job only where that
time, scaled to the jobs that will share the GPU now (:func:`scaled_seconds`), times a
margin, less the part its log says is done, fits before the deadline.

Standard library only: :mod:`repens.pipeline.kit` runs where nothing else is installed.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

#: a progress line of :mod:`repens.training.train`: ``step 12500/50000``
STEP_LINE = re.compile(r"INFO step (\d+)/(\d+)")
#: the line :mod:`repens.pipeline.kit` writes into a job's log at the start of each call
CALL_HEADER = "== repens run-jobs "
#: the timestamp that opens a log line of :mod:`repens.training`
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
#: from this many jobs on, jobs sharing one GPU split a fixed total: on an H200, two
#: single-seed FashionMNIST jobs ran at about 1,080 steps/s together and seven at about
#: 950 (docs/gpu.md), while a job alone ran at less than two jobs' total
SATURATING_JOBS = 2
#: a call of a job: the line that opens it (one process: a seed stack writes the same
#: line into each seed's log) and the seconds of its first and last timestamped lines
Call = tuple[str, float, float]


def calls(text: str) -> list[Call]:
    """The calls of a job in its log ``text`` (each opens with :data:`CALL_HEADER`), with
    the seconds (from the epoch, the log's clock) of their first and last timestamped lines;
    a call without two such lines is left out."""
    out: list[Call] = []
    header, first, last = None, None, None
    for line in [*text.splitlines(), CALL_HEADER]:
        if line.startswith(CALL_HEADER):
            if header is not None and first is not None and last is not None and last > first:
                out.append((header, first, last))
            header, first, last = line, None, None
        elif header is not None and (m := STAMP.match(line)):
            t = (dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S") - dt.datetime(1970, 1, 1)).total_seconds()
            t += int(m[2]) / 1000
            first, last = (t if first is None else first), t
    return out


def mean_jobs(own: list[Call], every: set[Call]) -> float | None:
    """How many jobs ran at a time, on average over the time of ``own`` (a job's calls),
    itself included: the overlap of ``every`` call of the same machine's jobs (``own``
    among them, a stack's calls once) with ``own``, over ``own``'s length; None without
    length."""
    length = sum(end - start for _, start, end in own)
    if length <= 0:
        return None
    shared = sum(max(0.0, min(end, e) - max(start, s)) for _, start, end in own for _, s, e in every)
    return shared / length


def scaled_seconds(seconds: float, then_jobs: float | None, now_jobs: int) -> float:
    """``seconds`` measured with ``then_jobs`` jobs sharing the GPU, for ``now_jobs`` sharing
    it: the jobs split a fixed total from :data:`SATURATING_JOBS` on, and below it a job is
    taken to run no faster than with that many (conservative: alone it ran faster); as
    measured when ``then_jobs`` is unknown."""
    if then_jobs is None:
        return seconds
    return seconds * max(now_jobs, SATURATING_JOBS) / max(then_jobs, SATURATING_JOBS)


def _log(reference: Path, result: Path) -> Path:
    """The log of the job whose result is ``reference/<exp>/<dataset>/<method>/seed<N>/<file>``."""
    return reference / "logs" / result.parent.relative_to(reference).with_suffix(".log")


def _gpu_calls(reference: Path, dataset_dir: Path) -> dict[Path, list[Call]]:
    """The calls of each GPU run of every method of ``dataset_dir`` (a folder of the
    reference tree), by result file."""
    from repens.report.results_page import run_gpu, run_provenance

    out: dict[Path, list[Call]] = {}
    for result in sorted(dataset_dir.glob("*/seed*/*.json")):
        log = _log(reference, result)
        if run_gpu(run_provenance(result)) is not None and log.is_file():
            out[result] = calls(log.read_text(errors="replace"))
    return out


def expected_seconds(
    job_id: str, reference: Path, gpu_calls: dict[Path, dict[Path, list[Call]]] | None = None
) -> tuple[float, float | None, str] | None:
    """(seconds, jobs, where from) for the job whose first output is ``job_id``
    (``results/<experiment>/<dataset>/<method>/seed<N>/<file>``): the longest of the GPU runs
    of the same method in ``reference`` (every seed there), and how many jobs shared the GPU
    with it on average (:func:`mean_jobs`, over the GPU runs of the same data set; None when
    its log has no timed call); None when it holds none. The runs are read as the results
    page reads them (:mod:`repens.report.results_page`; only the login machine that exports
    the jobs reads them). ``gpu_calls`` keeps the calls of a data set's GPU logs between
    calls (by data set folder), so that many jobs read each data set's logs once."""
    from repens.report.results_page import run_benchmark, run_gpu, run_provenance

    parts = Path(job_id).parts
    if len(parts) < 6 or parts[0] != "results" or not parts[-2].startswith("seed"):
        return None
    method_dir = reference.joinpath(*parts[1:-2])
    runs: list[tuple[float, str, Path]] = []
    for result in sorted(method_dir.glob(f"seed*/{parts[-1]}")):
        gpu, seconds = run_gpu(run_provenance(result)), run_benchmark(result).get("s")
        if gpu is not None and seconds is not None:
            runs.append((seconds, gpu, result))
    if not runs:
        return None
    seconds, _, longest = max(runs, key=lambda run: run[0])
    cache = {} if gpu_calls is None else gpu_calls
    if method_dir.parent not in cache:
        cache[method_dir.parent] = _gpu_calls(reference, method_dir.parent)
    by_run = cache[method_dir.parent]
    jobs = mean_jobs(by_run.get(longest, []), {c for cs in by_run.values() for c in cs})
    devices = ", ".join(sorted({d for _, d, _ in runs}))
    among = f", {jobs:.1f} jobs at a time" if jobs is not None else ""
    return seconds, jobs, f"the longest of {len(runs)} run(s) on {devices} in {method_dir}{among}"


def held(job_id: str, reference: Path) -> bool:
    """Whether ``reference`` holds the result ``job_id`` names (``results/X`` as ``reference/X``)."""
    parts = Path(job_id).parts
    return len(parts) > 1 and parts[0] == "results" and reference.joinpath(*parts[1:]).is_file()


def add_expected(jobs: list[dict[str, Any]], reference: Path) -> int:
    """Set ``expected_s``, ``expected_jobs`` (where known) and ``expected_from`` of each job
    of ``jobs`` that ``reference`` holds GPU runs of its method for; the number of jobs
    given one."""
    count, gpu_calls = 0, {}
    for job in jobs:
        found = expected_seconds(job["id"], reference, gpu_calls)
        if found is not None:
            seconds, shared, job["expected_from"] = found
            job["expected_s"] = round(seconds, 1)
            if shared is not None:
                job["expected_jobs"] = round(shared, 2)
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
