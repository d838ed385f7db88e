"""The toy experiments' contract: the data sets, the distance summary's columns, and what
is said of one prediction file (:class:`ToyRun`, written by :mod:`repens.summaries.toy` as a
JSON record and read back by the reports)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repens.core import registry

__all__ = [
    "DATASETS",
    "NEAR_RADIUS",
    "COLUMNS",
    "REGRESSION_COLUMNS",
    "CLASSIFICATION_COLUMNS",
    "ToyRun",
    "run_record",
    "run_from_record",
]

DATASETS = registry.datasets_of("toy")

#: Classification grid points within this Euclidean distance of a training point are "near".
NEAR_RADIUS = 2.0

#: Columns of the distance CSV, in order (one row per method; NaN where a dataset is absent).
REGRESSION_COLUMNS = [
    "w2_data",
    "w2_gap",
    "w2_outside",
    "gap_sd",
    "hmc_gap_sd",
    "gap_sd_ratio",
    "gap_sd_epistemic",
    "hmc_gap_sd_epistemic",
    "gap_sd_epistemic_ratio",
]
CLASSIFICATION_COLUMNS = [
    "kl_near",
    "kl_far",
    "entropy_near",
    "entropy_far",
    "hmc_entropy_near",
    "hmc_entropy_far",
]
COLUMNS = (
    ["method", "label", "seed", "scale"]
    + REGRESSION_COLUMNS
    + CLASSIFICATION_COLUMNS
    + ["regression_source", "classification_source", "hmc_converged"]
)


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class ToyRun:
    """What the reports say of one prediction file (a method's job or the HMC reference)."""

    path: str
    dataset: str  # "regression" | "classification"
    method: str  # config key or "hmc"
    label: str
    job: dict[str, Any]
    seed: Any
    scale: str
    #: an HMC reference: converged at the paper-scale thresholds; None for a method's file
    converged: bool | None = None
    #: number of stored functions (regression); 0 when the file does not tell
    members: int = 0
    #: classification: the side of the test grid and the number of classes (else 0)
    n_grid: int = 0
    n_classes: int = 0

    @property
    def is_hmc(self) -> bool:
        return self.method == "hmc"


def run_record(p: Any) -> dict[str, Any]:
    """A prediction file's :class:`ToyRun` fields as a JSON-ready dict (``p``: a
    :class:`repens.summaries.toy.ToyPredictions`)."""
    grid = {}
    if getattr(p, "probs_test", None) is not None:
        grid = {"n_grid": math.isqrt(p.x_test.shape[0]), "n_classes": int(p.probs_test.shape[1])}
    return {
        "path": str(p.path),
        "dataset": p.dataset,
        "method": p.method,
        "label": p.label,
        "job": p.job,
        "seed": p.seed,
        "scale": p.scale,
        "converged": p.converged,
        "members": int(p.members),
        **grid,
    }


def run_from_record(record: Mapping[str, Any]) -> ToyRun:
    """The :class:`ToyRun` of a :func:`run_record` dict."""
    return ToyRun(**{key: record[key] for key in record if key in ToyRun.__dataclass_fields__})
