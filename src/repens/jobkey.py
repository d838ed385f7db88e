"""Which settings made a checkpoint: the key of a job spec, and setting aside stale state.

Every checkpoint and reusable intermediate result (training checkpoints, the hyper-DE
L2 search, finished UCI splits, HMC chains) stores :func:`job_key` of the job that made
it. A rerun under other settings does not resume from it: :func:`set_aside` renames it
to ``<name>.stale`` and logs one line saying so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

__all__ = ["RUNTIME_FIELDS", "job_key", "set_aside", "load_keyed_json"]

#: spec fields that do not change results: display name, logging and checkpoint cadence,
#: where the UCI data live
RUNTIME_FIELDS = frozenset({"label", "log_every", "checkpoint_seconds", "uci_data"})


def job_key(job: Mapping[str, Any], *extra: Any) -> str:
    """SHA-256 (hex) of the canonical JSON (``sort_keys``) of ``job`` without
    :data:`RUNTIME_FIELDS`, and of ``extra`` (e.g. a split index) if given."""
    spec = {k: v for k, v in job.items() if k not in RUNTIME_FIELDS}
    payload = spec if not extra else {"job": spec, "extra": list(extra)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _short(key: Any) -> str:
    return "none" if not key else f"{str(key)[:8]}.."


def set_aside(path: Path, made: Any, wanted: str, log: logging.Logger, then: str = "starting from step 0",
              what: str = "checkpoint") -> Path:
    """Rename ``path`` (made under key ``made``) to ``<name>.stale`` and log one line."""
    stale = path.with_name(path.name + ".stale")
    os.replace(path, stale)
    log.warning("%s %s was made under other settings (key %s != %s); set aside as %s, %s",
                what, path, _short(made), _short(wanted), stale.name, then)
    return stale


def load_keyed_json(path: Path, key: str, log: logging.Logger, then: str, what: str,
                    required: tuple[str, ...] = ()) -> dict | None:
    """The JSON object at ``path`` if it was made under ``key`` (and holds ``required``);
    ``None`` if there is none, and an unreadable or stale file is set aside (one log line)."""
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = None
    if isinstance(saved, dict) and saved.get("key") == key and all(k in saved for k in required):
        return saved
    set_aside(path, saved.get("key") if isinstance(saved, dict) else None, key, log, then=then, what=what)
    return None


def load_keyed_checkpoint(path: Path, key: str, log: logging.Logger, then: str = "starting from step 0") -> dict | None:
    """The ``torch.save``d dict at ``path`` if it was made under ``key`` (its ``"key"`` entry);
    ``None`` if there is none, and an unreadable or stale checkpoint is set aside
    (``<name>.stale``, one log line ending in ``then``) instead of resumed."""
    if not path.exists():
        return None
    import torch  # only the training and sampling processes read checkpoints

    try:
        saved = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - a corrupt checkpoint only costs a rerun
        stale = path.with_name(path.name + ".stale")
        os.replace(path, stale)
        log.warning("checkpoint %s is unreadable (%s); set aside as %s, %s",
                    path, " ".join(str(err).split()), stale.name, then)
        return None
    made = saved.get("key") if isinstance(saved, dict) else None
    if made != key:
        set_aside(path, made, key, log, then=then)
        return None
    return saved
