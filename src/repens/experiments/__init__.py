"""One runner per experiment: a resolved job spec in, a results file out.

Runners are looked up by the job's ``experiment`` key in :data:`RUNNERS`; later
experiments (BNN toys, images, UCI) add an entry here and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable

from repens.experiments.image import run_image
from repens.experiments.synthetic import run_synthetic
from repens.experiments.toy import run_toy
from repens.experiments.uci import run_uci

#: ``runner(job, out, checkpoint, **runtime)``: ``job`` is the experiment's
#: :class:`repens.jobs.job.Job` (or its spec, which the runner reads with ``from_spec``);
#: runtime keywords (``inputs``, ``device``) come from the command line and are passed
#: only when given.
Runner = Callable[..., None]

RUNNERS: dict[str, Runner] = {"synthetic": run_synthetic, "toy": run_toy, "image": run_image}
RUNNERS["uci"] = run_uci

__all__ = ["RUNNERS", "Runner"]
