"""Writing result files so that a reader (or a killed job's rerun) never sees half of one:
write to a temporary file beside the target, then rename it over the target."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["write_text_atomic", "write_json_atomic"]


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path | str, obj: Any, **dumps_options: Any) -> None:
    """``obj`` as JSON (``json.dumps`` with ``dumps_options``, then a newline), atomically."""
    write_text_atomic(path, json.dumps(obj, **dumps_options) + "\n")
