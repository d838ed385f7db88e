"""A synthetic job's particles file (``particles.npz``: ``particles`` (n, 2), ``initial``,
``job``) as the summaries and the reports read it, and the metrics the summary computes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repens.core.errors import DataFileError
from repens.results.files import RecordedJob
from repens.results.files import read_npz as _read_npz

__all__ = ["LABELS", "METRIC_KEYS", "Run", "read_npz", "load_run"]

#: Fallback display labels of the method keys, used only for a method that neither the
#: ``labels`` argument (the workflow passes ``config.yaml``'s labels, as to every report)
#: nor the job spec names; an unknown key shows as itself.
LABELS: dict[str, str] = {
    "de": "Deep ensemble",
    "svgd": "SVGD",
    "fsvgd": "f-SVGD",
    "kde-wgd": "kde-WGD",
    "sge-wgd": "sge-WGD",
    "ssge-wgd": "ssge-WGD",
    "kde-fwgd": "kde-fWGD",
    "sge-fwgd": "sge-fWGD",
    "ssge-fwgd": "ssge-fWGD",
    "anchored": "Anchored ensemble",
    "dle": "DLE",
    "drle": "DRLE",
}

METRIC_KEYS: tuple[str, ...] = (
    "mean_error",
    "cov_rel_err_xx",
    "cov_xy_err",
    "cov_rel_err_yy",
    "max_cov_rel_err",
    "energy_distance",
)

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Run:
    """One training job's result file."""

    path: Path
    particles: np.ndarray
    initial: np.ndarray | None
    job: RecordedJob

    @property
    def target(self) -> str:
        return str(self.job.dataset)

    @property
    def method(self) -> str:
        return "?" if self.job.method is None else str(self.job.method)

    @property
    def label(self) -> str:
        return str(self.job.label or LABELS.get(self.method, self.method))

    @property
    def scale(self) -> str:
        return "?" if self.job.scale is None else str(self.job.scale)


def read_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` result file (no pickles); a missing, truncated or corrupt
    file raises an error whose one-line message names it (:mod:`repens.results.files`)."""
    return _read_npz(path, what)


def load_run(path: Path | str) -> Run:
    """Read a synthetic result file and check its format.

    Args:
        path: ``.npz`` written by ``run_synthetic``.

    Returns:
        The parsed :class:`Run`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not an ``.npz`` with ``particles`` (n, 2) and a JSON
            ``job`` naming its ``dataset``; the message names the file.
    """
    path = Path(path)
    arrays = read_npz(path, "result")
    missing = [key for key in ("particles", "job") if key not in arrays]
    if missing:
        raise DataFileError(
            path,
            f"missing array(s) {missing}; has {sorted(arrays)} "
            "(expected the output of 'repens train' for a synthetic job)",
        )
    particles = np.asarray(arrays["particles"], dtype=np.float64)
    if particles.ndim != 2 or particles.shape[1] != 2 or particles.shape[0] < 2:
        raise DataFileError(path, f"'particles' must have shape (n >= 2, 2), got {particles.shape}")
    try:
        job = json.loads(str(arrays["job"][()]))
    except (json.JSONDecodeError, TypeError, IndexError) as err:
        raise DataFileError(path, f"'job' is not a JSON job spec ({err})") from err
    recorded = RecordedJob.read(job, path, "a synthetic job's particles file", ("dataset",))
    initial = arrays.get("initial")
    return Run(path, particles, None if initial is None else np.asarray(initial, dtype=np.float64), recorded)
