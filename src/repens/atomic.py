"""Writing result files so that a reader (or a killed job's rerun) never sees half of one.

Every writer serialises in memory, writes the bytes to a temporary file beside the
target and renames it over the target. A write that fails (disk full, permissions,
a missing or read-only folder) removes the temporary file, leaves any previous
target untouched and raises :class:`WriteError`, whose message is one line:
``cannot write <path>: <reason>`` (``python -m repens`` prints just that line).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "WriteError",
    "write_bytes_atomic",
    "write_text_atomic",
    "write_json_atomic",
    "save_npz_atomic",
    "torch_save_atomic",
    "save_figure_atomic",
]

_CHUNK = 1 << 20


class WriteError(OSError):
    """A file could not be written; ``str(err)`` is ``cannot write <path>: <reason>``."""

    def __init__(self, path: Path | str, reason: str, errno_: int | None = None) -> None:
        super().__init__(errno_, reason)
        self.path = str(path)
        self.reason = " ".join(str(reason).split())  # one line

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


def _write_chunk(f: Any, chunk: bytes | memoryview) -> None:
    """The low-level write (a seam for tests that simulate a full disk)."""
    f.write(chunk)


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (parents created)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            view = memoryview(data)
            for i in range(0, len(view), _CHUNK):
                _write_chunk(f, view[i : i + _CHUNK])
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise WriteError(path, _reason(err), getattr(err, "errno", None)) from err


def write_text_atomic(path: Path | str, text: str) -> None:
    """``text`` (UTF-8) to ``path``, atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path | str, obj: Any, **dumps_options: Any) -> None:
    """``obj`` as JSON (``json.dumps`` with ``dumps_options``, then a newline), atomically."""
    write_text_atomic(path, json.dumps(obj, **dumps_options) + "\n")


def save_npz_atomic(path: Path | str, **arrays: Any) -> None:
    """``np.savez(path, **arrays)``, atomically (no ``.npz`` is appended to ``path``)."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes_atomic(path, buffer.getbuffer())


def torch_save_atomic(obj: Any, path: Path | str) -> None:
    """``torch.save(obj, path)``, atomically."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes_atomic(path, buffer.getbuffer())


def save_figure_atomic(fig: Any, path: Path | str, **savefig_options: Any) -> None:
    """``fig.savefig(path, **savefig_options)``, atomically (format from ``path``'s suffix
    unless ``format`` is given)."""
    path = Path(path)
    options = {"format": path.suffix.lstrip(".") or None, **savefig_options}
    buffer = io.BytesIO()
    fig.savefig(buffer, **options)
    write_bytes_atomic(path, buffer.getbuffer())
