"""One check of a result file against the job it claims to be.

Every training result (``metrics.json``, ``predictions.npz``, ``particles.npz``, an HMC
run's ``diagnostics.json``) stores the spec of the job that made it (a ``job`` entry; in
an ``.npz`` a ``job`` array holding JSON). A result enters this project's tables from
outside its own training in four ways: a result pack (``import-results``), a final
record (``<checkpoint>.final``, restored instead of training again), the reference tree
(``restore_result``, the rebuild's copy) and the files a summary is given. Each goes
through :func:`check_result`:

* the stored spec's key (:func:`repens.core.jobkey.job_key`) equals the key of the job
  the file is taken for (where that job is known);
* every number of a JSON result outside its ``job`` and ``provenance`` is finite;
* a job's key appears once among the files of one table (``seen``).

A failure is a :class:`ResultMismatch` (a :class:`repens.core.errors.DataFileError`):
one line naming the file and what differs. This module imports nothing of the project
but :mod:`repens.core` (numpy only to read an ``.npz``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from repens.core.errors import DataFileError
from repens.core.jobkey import RUNTIME_FIELDS, job_key

__all__ = ["RESULT_FILES", "ResultMismatch", "stored_spec", "spec_difference", "check_result", "nonfinite"]

#: the per-job result files that store their job's spec
RESULT_FILES = ("metrics.json", "particles.npz", "predictions.npz", "diagnostics.json")
#: entries of a JSON result that are not results (no finiteness check)
_NOT_NUMBERS = ("job", "provenance")


class ResultMismatch(DataFileError):
    """A result file that is not the job it is taken for (another spec, a non-finite
    number, a run counted twice); the message is ``<path>: <what differs>``."""


def _load(path: Path) -> Any:
    if path.suffix == ".npz":
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                return {"job": str(data["job"])} if "job" in data.files else {}
        except Exception as err:  # noqa: BLE001 - a truncated or corrupt archive: one line
            raise DataFileError(path, f"not a readable .npz result ({type(err).__name__}: {err})") from None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        raise DataFileError(path, f"not a readable JSON result ({type(err).__name__}: {err})") from None


def stored_spec(path: Path | str, data: Any = None) -> dict[str, Any]:
    """The job spec ``path`` stores (``data``: its content, already read); a
    :class:`ResultMismatch` when it stores none."""
    path = Path(path)
    data = _load(path) if data is None else data
    job = data.get("job") if isinstance(data, Mapping) else None
    if isinstance(job, str | bytes):
        try:
            job = json.loads(job)
        except ValueError:
            job = None
    if not isinstance(job, Mapping):
        raise ResultMismatch(path, "stores no job spec (its 'job' entry is missing or not an object)")
    return dict(job)


def spec_difference(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    """The settings where ``stored`` differs from ``wanted`` (runtime fields aside), as
    ``steps 200, not 100; lr ...`` (the first three)."""
    keys = sorted((set(stored) | set(wanted)) - RUNTIME_FIELDS, key=str)
    diffs = [
        f"{k} {json.dumps(stored.get(k), default=str)}, not {json.dumps(wanted.get(k), default=str)}"
        for k in keys
        if stored.get(k) != wanted.get(k)
    ]
    return "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")


def nonfinite(data: Any, where: str = "") -> str | None:
    """Where ``data`` (a JSON result, less its ``job`` and ``provenance``) holds a number
    that is not finite (``metrics.accuracy``), else None."""
    if isinstance(data, float):
        return None if math.isfinite(data) else where or "its value"
    if isinstance(data, Mapping):
        for k, v in data.items():
            if not where and k in _NOT_NUMBERS:
                continue
            found = nonfinite(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    elif isinstance(data, list | tuple):
        for i, v in enumerate(data):
            found = nonfinite(v, f"{where}[{i}]")
            if found:
                return found
    return None


def check_result(
    path: Path | str,
    spec: Mapping[str, Any] | None = None,
    *,
    data: Any = None,
    seen: MutableMapping[str, Path] | None = None,
) -> str:
    """Check the result file ``path`` against the job ``spec`` it is taken for (``None``:
    any job) and return its job's key. ``data``: its content, already read; ``seen``: the
    keys of the other files of the same table (key -> file; this one's is added).

    Raises:
        ResultMismatch: the stored spec is another job's (the settings that differ named),
            a number is not finite, or ``seen`` holds the same job already.
        DataFileError: the file is unreadable.
    """
    path = Path(path)
    data = _load(path) if data is None else data
    stored = stored_spec(path, data)
    key = job_key(stored)
    if spec is not None and key != job_key(spec):
        raise ResultMismatch(
            path, f"holds the result of another job than the one it is taken for: {spec_difference(stored, spec)}"
        )
    where = nonfinite(data) if path.suffix == ".json" else None
    if where:
        raise ResultMismatch(path, f"{where} is not a finite number; a result must not reach a table with it")
    if seen is not None:
        if key in seen:
            raise ResultMismatch(path, f"the same job as {seen[key]} (key {key[:12]}..): one run counted twice")
        seen[key] = path
    return key
