"""Writing result files so that a reader (or a killed job's rerun) never sees half of one.

Every writer serialises in memory, writes the bytes to a temporary file beside the
target and renames it over the target. A write that fails (disk full, permissions,
a missing or read-only folder) removes the temporary file, leaves any previous
target untouched and raises :class:`WriteError`, whose message is one line:
``cannot write <path>: <reason>`` (``python -m repens`` prints just that line).

A checkpoint (:func:`torch_save_atomic`) carries the SHA-256 of its bytes as the comment
of its zip archive (``repens-sha256:<64 hex>``): the file stays an ordinary ``torch.load``
archive, and :func:`verify_torch_file` tells an intact checkpoint from a damaged one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
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
    "ChecksumError",
    "verify_torch_file",
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


#: the signature of the zip archive's end record (22 bytes long when it has no comment)
_ZIP_END = b"PK\x05\x06"
_ZIP_END_SIZE = 22
#: a checkpoint's zip comment: this tag and the hex SHA-256 of the archive as written
#: without the comment (its comment length 0)
CHECKSUM_TAG = b"repens-sha256:"
_TRAILER_SIZE = len(CHECKSUM_TAG) + 64


class ChecksumError(ValueError):
    """A checkpoint's bytes differ from the checksum it carries (or the trailer is damaged)."""


def torch_save_atomic(obj: Any, path: Path | str) -> None:
    """``torch.save(obj, path)``, atomically, with the SHA-256 of the archive in its zip
    comment (see :func:`verify_torch_file`)."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with buffer.getbuffer() as view:
        bare = (
            len(view) >= _ZIP_END_SIZE
            and view[-_ZIP_END_SIZE : -_ZIP_END_SIZE + 4] == _ZIP_END
            and view[-2:] == b"\x00\x00"
        )
        digest = hashlib.sha256(view).hexdigest() if bare else None
    if digest is not None:  # replace the comment length 0 by that of the checksum, then the checksum
        buffer.seek(-2, io.SEEK_END)
        buffer.write(struct.pack("<H", _TRAILER_SIZE) + CHECKSUM_TAG + digest.encode("ascii"))
    write_bytes_atomic(path, buffer.getbuffer())


def _hash_file(f: Any, length: int) -> Any:
    """SHA-256 of the first ``length`` bytes of the open file ``f`` (read in chunks)."""
    sha = hashlib.sha256()
    f.seek(0)
    left = length
    while left > 0:
        chunk = f.read(min(_CHUNK * 16, left))
        if not chunk:
            break
        sha.update(chunk)
        left -= len(chunk)
    return sha


def verify_torch_file(path: Path | str) -> bool:
    """Check a file written by :func:`torch_save_atomic` against its checksum: ``True``
    when it carries one and matches. A file without one (written before checkpoints
    carried it) has the CRC-32 of each archive member checked instead: ``False``.
    Raises :class:`ChecksumError` (one-line message) on a mismatch, a damaged trailer or
    a member whose CRC-32 differs, ``OSError`` when it cannot be read."""
    import zipfile

    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - _ZIP_END_SIZE - _TRAILER_SIZE))
        tail = f.read()
        if CHECKSUM_TAG in tail:
            end = len(tail) - _TRAILER_SIZE - _ZIP_END_SIZE
            if (
                end < 0
                or tail[end : end + 4] != _ZIP_END
                or tail[-_TRAILER_SIZE - 2 : -_TRAILER_SIZE] != struct.pack("<H", _TRAILER_SIZE)
                or not tail[-_TRAILER_SIZE:].startswith(CHECKSUM_TAG)
            ):
                raise ChecksumError("its checksum trailer is damaged")
            recorded = tail[-64:].decode("ascii", errors="replace")
            sha = _hash_file(f, size - _TRAILER_SIZE - 2)
            sha.update(b"\x00\x00")  # the comment length it was hashed with
            actual = sha.hexdigest()
            if actual != recorded:
                raise ChecksumError(f"SHA-256 {actual[:12]}.. differs from the recorded {recorded[:12]}..")
            return True
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as err:
        raise ChecksumError(f"not an intact archive ({' '.join(str(err).split())})") from None
    if bad is not None:
        raise ChecksumError(f"archive member {bad} fails its CRC-32")
    return False


def save_figure_atomic(fig: Any, path: Path | str, **savefig_options: Any) -> None:
    """``fig.savefig(path, **savefig_options)``, atomically (format from ``path``'s suffix
    unless ``format`` is given)."""
    path = Path(path)
    options = {"format": path.suffix.lstrip(".") or None, **savefig_options}
    buffer = io.BytesIO()
    fig.savefig(buffer, **options)
    write_bytes_atomic(path, buffer.getbuffer())
