"""The cost of planned Table 1 jobs on CPU cores, said before a big run starts.

workflow/rules/preflight.smk passes the planned ``train_image`` jobs' specs and the step
times of workflow/resources/step_seconds.yaml (measured on this project's CPU machines).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from repens.jobs.job import ImageJob

__all__ = ["duration", "image_cpu_seconds", "image_cost_notice"]


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit of which there are at least two (min at least)."""
    if not math.isfinite(seconds):
        return "unknown time"
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size or unit == "min":
            return f"{seconds / size:,.1f} {unit}"
    raise AssertionError


def image_cpu_seconds(spec: ImageJob | Mapping[str, Any], step_seconds: Mapping[str, Mapping[str, float]]) -> float:
    """One image job's CPU seconds (the job, or its spec): its steps (plus hyper-DE's L2
    search) at the measured step time of its data set and scale (NaN where none was measured).

    The search trains its ``search_trials`` candidates at once, as one stack, for
    ``search_steps`` steps (repens.experiments.image.l2_search), so it costs
    ``search_steps`` steps of a stack of ``search_trials`` members: here
    ``search_steps x search_trials / particles`` steps at the rate of the job's own stack
    (a step's cost taken as proportional to the members; ``python -m repens budget``
    times the search stack itself)."""
    job = ImageJob.of(spec)
    rate = step_seconds.get(job.dataset, {}).get(job.scale)
    steps = job.steps
    if job.l2_search:
        steps += (job.search_steps or job.steps) * job.search_trials / job.particles
    return float(rate) * steps if rate is not None else math.nan


def image_cost_notice(
    specs: Iterable[ImageJob | Mapping[str, Any]],
    step_seconds: Mapping[str, Mapping[str, float]],
    cores: int,
    scale: str,
    min_seconds: float = 4 * 3600,
) -> str | None:
    """What the planned image jobs (the jobs, or their specs) cost on ``cores`` CPU cores;
    None when there are none, or at quick scale when they total under ``min_seconds``.

    Raises:
        repens.jobs.job.SpecError: a spec is not an image job's.
    """
    per_dataset: dict[str, list[float]] = {}
    for job in map(ImageJob.of, specs):
        per_dataset.setdefault(job.dataset, []).append(image_cpu_seconds(job, step_seconds))
    total = sum(sum(v) for v in per_dataset.values())
    if not per_dataset or (scale != "paper" and total < min_seconds):
        return None
    parts = [f"{name}: {len(v)} jobs, about {duration(sum(v))} of CPU" for name, v in per_dataset.items()]
    jobs = sum(len(v) for v in per_dataset.values())
    return (
        f"NOTE: this run is about to start {jobs} Table 1 training jobs at scale={scale} on a machine "
        f"without a GPU ({'; '.join(parts)}; step times of workflow/resources/step_seconds.yaml). "
        f"On {cores} core(s) that is about {duration(total / max(cores, 1))} of wall time. The paper's "
        "settings are meant for GPUs (docs/cluster.md, docs/gpu.md); Ctrl-C stops it "
        "(checkpoints keep the progress), or run at scale=quick."
    )
