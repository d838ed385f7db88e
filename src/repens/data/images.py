"""Image data sets of Table 1: FashionMNIST (in-distribution) / MNIST (OOD) and
CIFAR-10 (in-distribution) / SVHN test split (OOD).

:func:`prepare` makes a data set's original files present and verified under ``root``
(laid out like a torchvision root), in this order and touching the network only in
the last step:

1. the extracted files are already there: nothing to do;
2. the archive is in ``root``: its MD5 is checked, then it is extracted;
3. the archive is in ``mirror`` (a folder laid out the same way, e.g. a read-only
   shared copy): it is verified, copied into ``root`` and extracted there;
4. it is downloaded (torchvision's ``download_url``, MD5 checked).

If a file is still missing, :class:`DataUnavailableError` lists every missing file
with its MD5, where to put it and where to get it.

:func:`load_split` then reads the original formats (IDX for the MNIST family,
CIFAR's pickled python batches, SVHN's MATLAB ``.mat``) into ``uint8`` images
(N, C, H, W) and ``int64`` labels. :func:`save_arrays` / :func:`load_arrays` keep
them as one ``.npz`` per data set, the file training jobs read.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = [
    "RemoteFile",
    "ImageDataset",
    "IMAGE_DATASETS",
    "DataUnavailableError",
    "prepare",
    "load_split",
    "save_arrays",
    "load_arrays",
    "read_idx",
    "read_cifar_batches",
    "read_svhn_mat",
]


class DataUnavailableError(FileNotFoundError):
    """Files of a data set are missing (or corrupt) and could not be downloaded."""


@dataclass(frozen=True)
class RemoteFile:
    """One original file: its name, MD5, folder under the root, and download URLs."""

    filename: str
    md5: str
    folder: str
    urls: tuple[str, ...]
    extracted: tuple[str, ...]  # paths (under the root) that exist once it is extracted


def _mnist_files(folder: str, mirrors: tuple[str, ...], resources: list[tuple[str, str]]) -> tuple[RemoteFile, ...]:
    return tuple(
        RemoteFile(name, md5, f"{folder}/raw", tuple(m + name for m in mirrors),
                   (f"{folder}/raw/{name.removesuffix('.gz')}",))
        for name, md5 in resources
    )


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's MNIST format, optionally gzipped) as a numpy array."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    dtype_code, ndim = data[2], data[3]
    if dtype_code != 0x08:
        raise ValueError(f"{path}: IDX type 0x{dtype_code:02x} is not unsigned bytes")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {body.size} values")
    return body.reshape(shape)


def _read_mnist(folder: str) -> Callable[[Path, str], tuple[np.ndarray, np.ndarray]]:
    def read(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
        prefix = "train" if split == "train" else "t10k"
        raw = root / folder / "raw"
        images = read_idx(raw / f"{prefix}-images-idx3-ubyte")
        labels = read_idx(raw / f"{prefix}-labels-idx1-ubyte")
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{raw}: {images.shape[0]} images but {labels.shape[0]} labels ({split})")
        return images[:, None, :, :].copy(), labels.astype(np.int64)

    return read


CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_BATCHES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}


def read_cifar_batches(folder: Path, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's python batches (pickled dicts with ``data`` (N, 3072) uint8, ``labels``)."""
    images, labels = [], []
    for name in names:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f, encoding="latin1")
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise ValueError(f"{folder / name}: data of shape {data.shape}, expected (N, 3072)")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch["labels"], dtype=np.int64))
    return np.concatenate(images), np.concatenate(labels)


def _read_cifar(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    return read_cifar_batches(root / CIFAR_FOLDER, CIFAR_BATCHES[split])


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """SVHN's cropped-digits ``.mat`` (``X`` (32, 32, 3, N), ``y`` (N, 1), digit 0 stored as 10)."""
    from scipy.io import loadmat

    mat = loadmat(path)
    x = np.asarray(mat["X"], dtype=np.uint8).transpose(3, 2, 0, 1).copy()
    y = np.asarray(mat["y"], dtype=np.int64).reshape(-1) % 10
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{path}: {x.shape[0]} images but {y.shape[0]} labels")
    return x, y


def _read_svhn(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    return read_svhn_mat(root / f"{split}_32x32.mat")


@dataclass(frozen=True)
class ImageDataset:
    name: str
    files: tuple[RemoteFile, ...]
    splits: tuple[str, ...]
    reader: Callable[[Path, str], tuple[np.ndarray, np.ndarray]]
    num_classes: int = 10


def _registry() -> dict[str, ImageDataset]:
    fmnist_mirror = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    mnist_mirrors = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
    # MD5s as in torchvision.datasets (FashionMNIST/MNIST.resources, CIFAR10.tgz_md5, SVHN.split_list)
    fmnist = [
        ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
        ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
        ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
    ]
    mnist = [
        ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
        ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
        ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
    ]
    cifar = RemoteFile(
        "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", ".",
        ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        tuple(f"{CIFAR_FOLDER}/{b}" for names in CIFAR_BATCHES.values() for b in names),
    )
    svhn = RemoteFile("test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3", ".",
                      ("http://ufldl.stanford.edu/housenumbers/test_32x32.mat",), ("test_32x32.mat",))
    return {
        "fashionmnist": ImageDataset("fashionmnist", _mnist_files("FashionMNIST", fmnist_mirror, fmnist),
                                     ("train", "test"), _read_mnist("FashionMNIST")),
        "mnist": ImageDataset("mnist", _mnist_files("MNIST", mnist_mirrors, mnist), ("train", "test"),
                              _read_mnist("MNIST")),
        "cifar10": ImageDataset("cifar10", (cifar,), ("train", "test"), _read_cifar),
        "svhn": ImageDataset("svhn", (svhn,), ("test",), _read_svhn),
    }


#: data sets by config name
IMAGE_DATASETS: dict[str, ImageDataset] = _registry()


def _md5(path: Path) -> str:
    from torchvision.datasets.utils import calculate_md5

    return calculate_md5(str(path))


def _extract(archive: Path, file: RemoteFile, root: Path) -> None:
    if archive.suffix == ".mat":
        return
    target = root / file.folder
    if archive.name.endswith(".tar.gz"):
        import tarfile

        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
    elif archive.suffix == ".gz":
        out = target / archive.name.removesuffix(".gz")
        tmp = out.with_name(out.name + ".tmp")
        with gzip.open(archive, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, out)


def _download(file: RemoteFile, folder: Path) -> None:
    from torchvision.datasets.utils import download_url

    errors = []
    for url in file.urls:
        try:
            download_url(url, str(folder), file.filename, file.md5)
            return
        except Exception as err:  # noqa: BLE001 - try the next mirror, report all at the end
            errors.append(f"{url}: {err}")
    raise OSError("; ".join(errors))


def _check_name(name: str) -> ImageDataset:
    if name not in IMAGE_DATASETS:
        raise ValueError(f"unknown image data set {name!r}; known: {sorted(IMAGE_DATASETS)}")
    return IMAGE_DATASETS[name]


def prepare(name: str, root: Path | str, mirror: Path | str | None = None, download: bool = True) -> None:
    """Make ``name``'s files present and verified under ``root`` (see module docstring).

    Raises:
        DataUnavailableError: listing every file still missing, with MD5 and URL.
    """
    dataset, root = _check_name(name), Path(root)
    missing = []
    for file in dataset.files:
        if all((root / p).exists() for p in file.extracted):
            continue
        folder = root / file.folder
        archive = folder / file.filename
        problems = []
        if archive.exists() and _md5(archive) != file.md5:
            problems.append(f"{archive} has the wrong MD5 (corrupt or a different file)")
            archive.rename(archive.with_name(archive.name + ".corrupt"))
        if not archive.exists() and mirror is not None:
            candidate = Path(mirror) / file.folder / file.filename
            if candidate.exists():
                if _md5(candidate) != file.md5:
                    problems.append(f"the mirror copy {candidate} has the wrong MD5")
                else:
                    folder.mkdir(parents=True, exist_ok=True)
                    tmp = archive.with_name(archive.name + ".tmp")
                    shutil.copyfile(candidate, tmp)
                    os.replace(tmp, archive)
        if not archive.exists() and download:
            folder.mkdir(parents=True, exist_ok=True)
            try:
                _download(file, folder)
            except OSError as err:
                problems.append(f"download failed ({err})")
        if archive.exists() and _md5(archive) == file.md5:
            _extract(archive, file, root)
            continue
        missing.append((file, archive, "; ".join(problems)))
    if missing:
        lines = [f"data set {name!r}: {len(missing)} file(s) missing under {root}:"]
        for file, archive, problem in missing:
            lines.append(f"  {archive}  (md5 {file.md5}; from {file.urls[0]})" + (f": {problem}" if problem else ""))
        lines.append(
            "Put these files there (or in a mirror folder laid out the same way and pass it as "
            "image_data_mirror / --mirror), or run where the URLs are reachable."
        )
        raise DataUnavailableError("\n".join(lines))


def load_split(name: str, split: str, root: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, C, H, W) uint8 and labels (N,) int64 of one split, from the original files."""
    dataset = _check_name(name)
    if split not in dataset.splits:
        raise ValueError(f"data set {name!r} has no split {split!r}; it has {list(dataset.splits)}")
    x, y = dataset.reader(Path(root), split)
    if y.min() < 0 or y.max() >= dataset.num_classes:
        raise ValueError(f"{name} {split}: labels outside 0..{dataset.num_classes - 1}")
    return x, y


def save_arrays(name: str, root: Path | str, out: Path | str) -> None:
    """All splits of ``name`` into one ``.npz`` (``x_<split>``, ``y_<split>``), written atomically."""
    dataset, out = _check_name(name), Path(out)
    arrays = {}
    for split in dataset.splits:
        arrays[f"x_{split}"], arrays[f"y_{split}"] = load_split(name, split, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, out)


def load_arrays(path: Path | str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split from a file written by :func:`save_arrays`."""
    with np.load(path) as data:
        if f"x_{split}" not in data:
            raise ValueError(f"{path}: no split {split!r} (has {sorted(k[2:] for k in data if k.startswith('x_'))})")
        return data[f"x_{split}"], data[f"y_{split}"]
