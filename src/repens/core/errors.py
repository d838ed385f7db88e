"""Errors about data and result files, each with a one-line message that names the file.

:class:`DataError` is the common base: ``repens.cli.main`` catches it for every
command and prints ``error: <message>`` as one line (no traceback).

* :class:`DataFileError` (a ``ValueError``): a file exists but is malformed, e.g.
  ``data/fashionmnist.npz: not a readable .npz (truncated or corrupt: ...)``;
* ``repens.data.images.DataUnavailableError`` and ``repens.data.uci.UCIDataError``
  (``FileNotFoundError``\\ s): files or folders that are missing.

This module imports nothing of the project, so the reports (which must not import
:mod:`repens.data`) and the data loaders raise the same classes;
:mod:`repens.data.errors` re-exports them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DataError", "DataFileError", "one_line"]


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


class DataError(Exception):
    """Base of every data error; its message is one line naming the file or folder."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class DataFileError(DataError, ValueError):
    """``path`` exists but is malformed; the message is ``<path>: <problem>``."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = one_line(problem)
        super().__init__(f"{path}: {self.problem}")

    def __reduce__(self):  # picklable despite the two-argument constructor
        return (type(self), (self.path, self.problem))
