"""Reading the training jobs' result files, for the summaries and the reports.

Every reader of a result file (``metrics.json``, ``predictions.npz``, ``particles.npz``,
an HMC run's ``diagnostics.json``) goes through :func:`read_npz` or :func:`read_json`:
a file that is truncated, corrupt (an ``.npz`` member that fails its CRC-32, a
``BadZipFile``, JSON that does not parse) or lacks what the table needs raises
:class:`repens.core.errors.DataFileError` (a ``ValueError``), whose message is one line
naming the file; ``python -m repens`` prints it as ``error: <path>: ...`` and exits 2. A
missing file raises :class:`ResultFileMissing` (a ``FileNotFoundError``), also one line.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from repens.core.errors import DataError, DataFileError, one_line

__all__ = ["ResultFileMissing", "RecordedJob", "read_npz", "read_json", "shown_path"]


class ResultFileMissing(DataError, FileNotFoundError):
    """A result file a table or figure reads is not there; the message names it."""


@dataclass(frozen=True)
class RecordedJob:
    """The job a result file records (its ``job`` object) as the reports read it: typed
    fields, ``None`` where the file does not say (files of any version are read; a job's
    full settings are :class:`repens.jobs.job.Job`, which the reports do not need)."""

    dataset: str | None = None
    method: str | None = None
    seed: int | None = None
    scale: str | None = None
    #: the method's display name, where the job or the config gives one
    label: str | None = None
    particles: int | None = None
    steps: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    bandwidth: float | str | None = None

    @classmethod
    def read(cls, job: Any, path: Path | str, what: str, required: Sequence[str] = ()) -> RecordedJob:
        """``job`` (a file's ``job`` object) holding the keys ``required``; else a
        :class:`DataFileError` naming ``path``: ``what`` says which file it should be."""
        if not isinstance(job, Mapping) or any(key not in job for key in required):
            raise DataFileError(path, f"not {what} (its 'job' has no {', '.join(required)})")
        return cls(**{f.name: job.get(f.name) for f in fields(cls)})


def _reason(err: BaseException) -> str:
    return one_line(f"{type(err).__name__}: {err}")[:300]


def read_npz(path: Path | str, what: str) -> dict[str, Any]:
    """All arrays of the ``.npz`` result file ``path`` (no pickles); every member is read
    in full, so one that fails its CRC-32 is found here."""
    import numpy as np

    path = Path(path)
    if not path.exists():
        raise ResultFileMissing(f"{path}: no such {what} file")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        raise DataFileError(path, f"not a readable .npz {what} file (truncated or corrupt: {_reason(err)})") from None


def read_json(path: Path | str, what: str, required: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object of the result file ``path``, holding the keys ``required``."""
    path = Path(path)
    if not path.exists():
        raise ResultFileMissing(f"{path}: no such {what} file")
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DataFileError(path, f"not a readable JSON {what} file (truncated or corrupt: {_reason(err)})") from None
    if not isinstance(data, dict):
        raise DataFileError(path, f"holds a JSON {type(data).__name__}, not the JSON object of a result file")
    missing = [key for key in required if key not in data]
    if missing:
        raise DataFileError(path, f"no {', '.join(map(repr, missing))} in this {what} file (has {sorted(data)[:12]})")
    return data


def shown_path(path: Path | str) -> str:
    """A file as the scorecard names it: relative to the working directory when under it
    (the checkout), so the scorecard does not depend on where the checkout lies."""
    path = Path(path)
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix() if path.is_absolute() else path.as_posix()
    except ValueError:
        return path.as_posix()
