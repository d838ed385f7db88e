"""Image data sets of Table 1: FashionMNIST (in-distribution) / MNIST (OOD) and
CIFAR-10 (in-distribution) / SVHN test split (OOD).

:func:`prepare` makes a data set's original files present and verified under ``root``
(laid out like a torchvision root), in this order and touching the network only in
the last step:

1. the extracted files are already there and their MD5s are the known ones (those of
   the files the verified archives extract to): nothing to do;
2. the archive is in ``root``: its MD5 is checked, then it is extracted (again, over
   extracted files whose MD5 is wrong);
3. the archive is in ``mirror`` (a folder laid out the same way, e.g. a read-only
   shared copy): it is verified, copied into ``root`` and extracted there; or the
   mirror holds the extracted files themselves, verified by their MD5s, and they
   are copied;
4. it is downloaded (the URLs torchvision uses; MD5 checked before the file is renamed
   into place).

Runs may share ``root`` (two Snakemake runs whose ``image_data`` is one folder, say):
:func:`prepare` holds an exclusive lock on ``root/.<name>.lock`` (:func:`data_lock`) while
it checks and writes, :func:`save_arrays` one on ``.<stem>.lock`` beside the ``.npz`` (the
same file for ``<root>/<name>.npz``), :func:`prepare_arrays` that lock across both steps;
a run that finds the lock taken logs one line and waits. Every file is written under a
temporary name of its own process in the same folder and renamed into place
(:func:`atomic_file`), so no run sees, renames or removes another's half-written file; and
a file already there and verified is left as it is (a prepared ``.npz`` whose arrays
equal those of the verified originals is not rewritten: same inode, same modification
time, nothing for Snakemake to find newer or to remove).

So a root holding only extracted files needs no archive as long as they are intact;
a corrupt extracted file is never read. If a file is still missing or corrupt,
:class:`DataUnavailableError` lists every such file with its MD5, where to put it and
where to get it, on one line. A ``mirror`` folder that does not exist is an error.

The readers raise :class:`repens.data.errors.DataFileError` (one line: the file and
what is wrong with it) for files that are not in the expected format.

:func:`load_split` then reads the original formats (IDX for the MNIST family,
CIFAR's pickled python batches, SVHN's MATLAB ``.mat``) into ``uint8`` images
(N, C, H, W) and ``int64`` labels. :func:`save_arrays` / :func:`load_arrays` keep
them as one ``.npz`` per data set, the file training jobs read.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import logging
import math
import os
import pickle
import secrets
import shutil
import socket
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from repens.core.atomic import save_npz_atomic
from repens.data.errors import DataError, DataFileError

log = logging.getLogger("repens.data")

__all__ = [
    "RemoteFile",
    "ImageDataset",
    "IMAGE_DATASETS",
    "DataUnavailableError",
    "DataFileError",
    "prepare",
    "prepare_arrays",
    "load_split",
    "save_arrays",
    "load_arrays",
    "read_idx",
    "read_cifar_batches",
    "read_svhn_mat",
    "data_lock",
    "DataLock",
    "atomic_file",
]


class DataUnavailableError(DataError, FileNotFoundError):
    """Files of a data set are missing (or corrupt) and could not be downloaded; or a
    folder or file named by the configuration does not exist. The message is one line."""


#: errors that mean a lock cannot be had in this folder (read-only, another user's lock
#: file, a filesystem without flock): the run goes on without it
_NO_LOCK_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
)


class DataLock:
    """A held :func:`data_lock` (``held`` is false where the folder could not be locked)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self._fd = path, fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def remove(self) -> None:
        """Delete the lock file while still holding it (a run that takes it after this
        sees that its file is gone and locks a new one: see :func:`data_lock`)."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)


#: the locks this process holds, by real path (a nested data_lock on one of them is a no-op)
_HELD: dict[str, DataLock] = {}
#: the locks a filesystem refused (warned about once)
_WARNED: set[str] = set()


def _open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:  # another user's lock file: flock needs no write access
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _holder(fd: int) -> str:
    """Who holds the lock open at ``fd``, as the holder wrote it (it writes just after
    taking the lock: a moment's wait for it)."""
    for _ in range(5):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(0.02)
    return "holder unknown"


def _acquire(path: Path, what: str) -> int:
    """The descriptor of ``path`` once this process holds its flock (see :func:`data_lock`)."""
    waited = False
    for attempt in range(4):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = _open_lock(path)
        except FileNotFoundError:
            if attempt < 3:  # the folder was removed meanwhile (a failed run cleaning up)
                continue
            raise
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not waited:
                    log.info("waiting for %s: another run (%s) is preparing %s in this folder", path, _holder(fd), what)
                    waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)  # the holder removed the file: lock the one at path now
    raise OSError(errno.ENOENT, f"{path} keeps disappearing")


@contextmanager
def data_lock(path: Path | str, what: str) -> Iterator[DataLock]:
    """Hold an exclusive ``fcntl.flock`` on ``path`` (created, with its folder, if need
    be) for the ``with`` block; ``what`` names what is prepared under it, for the one
    line logged while waiting for another process that holds it::

        waiting for <path>: another run (pid <pid> on <host>) is preparing <what> in this folder

    Nested in a block of this process holding the same lock, it just runs the block
    (flocks of one process on two opens of one file would wait for each other).

    The kernel drops a flock when its process ends, however it ends: a lock file left by
    a dead run holds back nobody. After taking the lock the file is checked to still be
    the one at ``path`` (a holder may have removed it: :meth:`DataLock.remove`), else
    the new one is locked. The holder's pid and host are written into the file for the
    waiting line.

    Where the folder cannot be locked (read-only, or a filesystem without flock) the
    block runs unlocked: the atomic writes still keep every file whole; a read-only
    folder is logged at debug level, a filesystem refusing flock with a warning.
    """
    path = Path(os.path.abspath(path))
    key = os.path.realpath(path)
    if key in _HELD:  # this process holds it already (an outer block): no second flock
        yield _HELD[key]
        return
    fd: int | None
    try:
        fd = _acquire(path, what)
    except OSError as err:
        if err.errno not in _NO_LOCK_ERRNOS:
            raise
        if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
            log.debug("cannot lock %s (%s): going on without the lock", path, err.strerror)
        elif key not in _WARNED:  # once per lock and process
            _WARNED.add(key)
            log.warning(
                "cannot lock %s (%s): going on without the lock; runs preparing %s in this "
                "folder at the same time are not held back",
                path,
                err.strerror,
                what,
            )
        fd = None
    try:
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
            except OSError:  # opened read-only: a waiting line names no holder
                pass
        _HELD[key] = DataLock(path, fd)
        yield _HELD[key]
    finally:
        _HELD.pop(key, None)
        if fd is not None:
            os.close(fd)  # releases the flock


@contextmanager
def atomic_file(dest: Path | str) -> Iterator[tuple[BinaryIO, Path]]:
    """A new file ``(f, temporary path)`` beside ``dest``, under a name of this process's
    own (``.<name>.<pid>-<random>.tmp``: concurrent writers never share one, on one host
    or several), created with the mode an ordinary write gets (0666 less the umask); when
    the block ends without an error it is renamed over ``dest`` (``os.replace``, atomic
    within a folder), otherwise removed."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            yield f, tmp
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _copy_file(src: Path, dest: Path) -> None:
    """``src`` to ``dest`` through :func:`atomic_file`."""
    with atomic_file(dest) as (out, _), open(src, "rb") as inp:
        shutil.copyfileobj(inp, out, 1 << 20)


@dataclass(frozen=True)
class RemoteFile:
    """One original file: its name, MD5, folder under the root, and download URLs."""

    filename: str
    md5: str
    folder: str
    urls: tuple[str, ...]
    extracted: tuple[str, ...]  # paths (under the root) that exist once it is extracted
    #: MD5s of the ``extracted`` files (same order); empty: unknown, only their existence is checked
    extracted_md5: tuple[str, ...] = ()


def _mnist_files(
    folder: str, mirrors: tuple[str, ...], resources: list[tuple[str, str, str]]
) -> tuple[RemoteFile, ...]:
    return tuple(
        RemoteFile(
            name,
            md5,
            f"{folder}/raw",
            tuple(m + name for m in mirrors),
            (f"{folder}/raw/{name.removesuffix('.gz')}",),
            (raw_md5,),
        )
        for name, md5, raw_md5 in resources
    )


def _missing(path: Path) -> DataUnavailableError:
    return DataUnavailableError(f"{path} does not exist")


def _check_labels(path: Path, labels: np.ndarray, num_classes: int = 10) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataFileError(path, f"labels outside 0..{num_classes - 1} (min {labels.min()}, max {labels.max()})")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's MNIST format, optionally gzipped) as a numpy array.

    Raises:
        DataFileError: the file is not a complete unsigned-byte IDX file.
        DataUnavailableError: it does not exist.
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise _missing(path) from None
    except (OSError, EOFError, zlib.error) as err:
        raise DataFileError(path, f"cannot be read ({type(err).__name__}: {err})") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataFileError(path, "not an IDX file (bad magic number)")
    dtype_code, ndim = data[2], data[3]
    if dtype_code != 0x08:
        raise DataFileError(path, f"IDX type 0x{dtype_code:02x} is not unsigned bytes")
    if len(data) < 4 + 4 * ndim:
        raise DataFileError(path, f"IDX header cut short ({len(data)} bytes for {ndim} dimensions)")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(shape):
        raise DataFileError(path, f"header says {shape} but holds {body.size} values (truncated or corrupt)")
    return body.reshape(shape)


def _read_mnist(folder: str) -> Callable[[Path, str], tuple[np.ndarray, np.ndarray]]:
    def read(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
        prefix = "train" if split == "train" else "t10k"
        raw = root / folder / "raw"
        image_file, label_file = raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"
        images, labels = read_idx(image_file), read_idx(label_file)
        if images.ndim != 3:
            raise DataFileError(image_file, f"images of shape {images.shape}, expected (N, H, W)")
        if labels.ndim != 1:
            raise DataFileError(label_file, f"labels of shape {labels.shape}, expected (N,)")
        if images.shape[0] != labels.shape[0]:
            raise DataFileError(
                label_file, f"{labels.shape[0]} labels but {image_file.name} holds {images.shape[0]} images"
            )
        labels = labels.astype(np.int64)
        _check_labels(label_file, labels)
        return images[:, None, :, :].copy(), labels

    return read


CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_BATCHES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}


def read_cifar_batches(folder: Path, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's python batches (pickled dicts with ``data`` (N, 3072) uint8, ``labels``)."""
    images, labels = [], []
    for name in names:
        path = folder / name
        try:
            with open(path, "rb") as f:
                batch = pickle.load(f, encoding="latin1")
            data = np.asarray(batch["data"], dtype=np.uint8)
            batch_labels = np.asarray(batch["labels"], dtype=np.int64)
        except FileNotFoundError:
            raise _missing(path) from None
        except Exception as err:  # noqa: BLE001 - whatever the unpickling fails with, the file is bad
            raise DataFileError(path, f"not a CIFAR-10 python batch ({type(err).__name__}: {err})") from err
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DataFileError(path, f"data of shape {data.shape}, expected (N, 3072)")
        if batch_labels.shape != (data.shape[0],):
            raise DataFileError(path, f"{batch_labels.size} labels for {data.shape[0]} images")
        _check_labels(path, batch_labels)
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(batch_labels)
    return np.concatenate(images), np.concatenate(labels)


def _read_cifar(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    return read_cifar_batches(root / CIFAR_FOLDER, CIFAR_BATCHES[split])


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """SVHN's cropped-digits ``.mat`` (``X`` (32, 32, 3, N), ``y`` (N, 1), digit 0 stored as 10)."""
    from scipy.io import loadmat

    path = Path(path)
    try:
        mat = loadmat(path)
        x = np.asarray(mat["X"], dtype=np.uint8)
        y = np.asarray(mat["y"], dtype=np.int64).reshape(-1)
    except FileNotFoundError:
        raise _missing(path) from None
    except Exception as err:  # noqa: BLE001 - whatever scipy fails with, the file is bad
        raise DataFileError(path, f"not an SVHN .mat file ({type(err).__name__}: {err})") from err
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise DataFileError(path, f"X of shape {x.shape}, expected (32, 32, 3, N)")
    x = x.transpose(3, 2, 0, 1).copy()
    if x.shape[0] != y.shape[0]:
        raise DataFileError(path, f"{x.shape[0]} images but {y.shape[0]} labels")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise DataFileError(path, f"labels outside 1..10 (min {y.min()}, max {y.max()})")
    return x, y % 10


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
    # the third column: MD5 of the extracted (gunzipped) file, computed from the verified archives
    fmnist = [
        ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
        ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe", "9018921c3c673c538a1fc5bad174d6f9"),
        ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79", "8181f5470baa50b63fa0f6fddb340f0a"),
        ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310", "15d484375f8d13e6eb1aabb0c3f46965"),
    ]
    mnist = [
        ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", "6bbc9ace898e44ae57da46a324031adb"),
        ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", "a25bea736e30d166cdddb491f175f624"),
        ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", "2646ac647ad5339dbf082846283269ea"),
        ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", "27ae3e4e09519cfbb04c329615203637"),
    ]
    # extracted batches: torchvision's CIFAR10.train_list / test_list
    cifar_batch_md5 = {
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
    }
    batches = [b for names in CIFAR_BATCHES.values() for b in names]
    cifar = RemoteFile(
        "cifar-10-python.tar.gz",
        "c58f30108f718f92721af3b95e74349a",
        ".",
        ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        tuple(f"{CIFAR_FOLDER}/{b}" for b in batches),
        tuple(cifar_batch_md5[b] for b in batches),
    )
    svhn = RemoteFile(
        "test_32x32.mat",
        "eb5a983be6a315427106f1b164d9cef3",
        ".",
        ("http://ufldl.stanford.edu/housenumbers/test_32x32.mat",),
        ("test_32x32.mat",),
        ("eb5a983be6a315427106f1b164d9cef3",),
    )
    return {
        "fashionmnist": ImageDataset(
            "fashionmnist",
            _mnist_files("FashionMNIST", fmnist_mirror, fmnist),
            ("train", "test"),
            _read_mnist("FashionMNIST"),
        ),
        "mnist": ImageDataset(
            "mnist", _mnist_files("MNIST", mnist_mirrors, mnist), ("train", "test"), _read_mnist("MNIST")
        ),
        "cifar10": ImageDataset("cifar10", (cifar,), ("train", "test"), _read_cifar),
        "svhn": ImageDataset("svhn", (svhn,), ("test",), _read_svhn),
    }


#: data sets by config name
IMAGE_DATASETS: dict[str, ImageDataset] = _registry()


def _md5(path: Path, chunk: int = 1 << 20) -> str:
    """The file's MD5 (hex), read in 1 MiB chunks: the check torchvision's
    ``calculate_md5`` makes, without torchvision (a GPU node may not have it)."""
    import hashlib

    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _extract_data(tar, dest: Path, archive: Path) -> None:  # noqa: ANN001 (a tarfile.TarFile)
    """The archive's regular files and folders under ``dest``: ``extractall`` with the
    ``data`` filter where Python has it (3.11.4 on), else the same by hand (a member with an
    absolute name or a ``..`` part is refused, naming it; links and special files are left
    out, as the files kept after extraction are the regular ones)."""
    import tarfile

    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    for member in tar.getmembers():
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts:
            raise ValueError(f"{archive}: member {member.name!r} would be written outside the extraction folder")
        if member.isdir():
            (dest / name).mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(dest / name, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)


def _extract(archive: Path, file: RemoteFile, root: Path) -> None:
    """Extract ``archive`` into ``root / file.folder``, each file through a temporary
    name of this process's own and a rename (a tar into a staging folder of its own)."""
    if archive.suffix == ".mat":
        return
    target = root / file.folder
    if archive.name.endswith(".tar.gz"):
        import tarfile
        import tempfile

        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{archive.name}.{os.getpid()}-", suffix=".extract", dir=target))
        try:
            with tarfile.open(archive) as tar:
                _extract_data(tar, staging, archive)
            for path in sorted(staging.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    dest = target / path.relative_to(staging)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    elif archive.suffix == ".gz":
        with atomic_file(target / archive.name.removesuffix(".gz")) as (dst, _), gzip.open(archive, "rb") as src:
            shutil.copyfileobj(src, dst, 1 << 20)


def _fetch(url: str, dest: Path, md5: str | None, timeout: float = 60.0) -> None:
    """Download ``url`` to ``dest``: into a temporary file of its own beside ``dest``
    (:func:`atomic_file`: concurrent downloads never share one), MD5-checked, then
    renamed into place."""
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "repens"})
    with atomic_file(dest) as (out, tmp), urllib.request.urlopen(request, timeout=timeout) as response:
        shutil.copyfileobj(response, out, 1 << 20)
        out.flush()
        if md5 is not None and (got := _md5(tmp)) != md5:
            raise OSError(f"MD5 {got}, expected {md5}")


def _download(file: RemoteFile, folder: Path) -> None:
    errors = []
    for url in file.urls:
        try:
            _fetch(url, folder / file.filename, file.md5)
            return
        except Exception as err:  # noqa: BLE001 - try the next mirror, report all at the end
            errors.append(f"{url}: {err}")
    raise OSError("; ".join(errors))


def _check_name(name: str) -> ImageDataset:
    if name not in IMAGE_DATASETS:
        raise ValueError(f"unknown image data set {name!r}; known: {sorted(IMAGE_DATASETS)}")
    return IMAGE_DATASETS[name]


def _extracted_problems(file: RemoteFile, root: Path) -> list[str]:
    """What is wrong with ``file``'s extracted files under ``root`` (empty: all there and,
    where their MD5s are known, verified)."""
    problems = []
    md5s = file.extracted_md5 or (None,) * len(file.extracted)
    for rel, md5 in zip(file.extracted, md5s):
        path = root / rel
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif md5 is not None and _md5(path) != md5:
            problems.append(f"{path} has the wrong MD5 (expected {md5}; corrupt or a different file)")
    return problems


def _copy_extracted_from_mirror(file: RemoteFile, root: Path, mirror: Path) -> bool:
    """Copy ``file``'s extracted files from ``mirror`` when they are all there and verified."""
    if _extracted_problems(file, mirror):
        return False
    for rel in file.extracted:
        _copy_file(mirror / rel, root / rel)
    return True


def prepare(name: str, root: Path | str, mirror: Path | str | None = None, download: bool = True) -> None:
    """Make ``name``'s files present and verified under ``root`` (see module docstring),
    holding the lock ``root/.<name>.lock`` meanwhile (:func:`data_lock`) unless they
    are all there and verified already.

    Raises:
        DataUnavailableError: ``mirror`` does not exist; or (one line) every file still
            missing or corrupt, with its MD5 and URL.
    """
    dataset, root = _check_name(name), Path(root)
    if mirror is not None and not Path(mirror).is_dir():
        raise DataUnavailableError(f"image_data_mirror (--mirror) folder {mirror} does not exist")
    if _all_verified(dataset, root):  # nothing to write: no lock (the folder may be read-only)
        return
    with data_lock(root / f".{name}.lock", name):
        _prepare_locked(dataset, root, mirror, download)


def _all_verified(dataset: ImageDataset, root: Path) -> bool:
    return all(not _extracted_problems(file, root) for file in dataset.files)


def _prepare_locked(dataset: ImageDataset, root: Path, mirror: Path | str | None, download: bool) -> None:
    name = dataset.name
    missing = []
    for file in dataset.files:
        bad_extracted = _extracted_problems(file, root)
        if not bad_extracted:
            continue
        folder = root / file.folder
        archive = folder / file.filename
        problems = [p for p in bad_extracted if "wrong MD5" in p and not p.startswith(f"{archive} ")]
        if archive.exists() and _md5(archive) != file.md5:
            problems.append(f"{archive} has the wrong MD5 (corrupt or a different file)")
            archive.rename(archive.with_name(archive.name + ".corrupt"))
        if not archive.exists() and mirror is not None:
            candidate = Path(mirror) / file.folder / file.filename
            if candidate.exists():
                if _md5(candidate) != file.md5:
                    problems.append(f"the mirror copy {candidate} has the wrong MD5")
                else:
                    _copy_file(candidate, archive)
            elif _copy_extracted_from_mirror(file, root, Path(mirror)):
                log.info("%s: copied the verified extracted files from %s", file.filename, mirror)
                continue
        if not archive.exists() and download:
            folder.mkdir(parents=True, exist_ok=True)
            try:
                _download(file, folder)
            except OSError as err:
                problems.append(f"download failed ({err})")
        if archive.exists() and _md5(archive) == file.md5:
            if bad_extracted:
                log.info("%s: extracting (%s)", archive, "; ".join(bad_extracted))
            _extract(archive, file, root)
            after = _extracted_problems(file, root)
            if not after:
                continue
            problems += [f"extracted from the verified {archive}: {p}" for p in after]
        missing.append((file, archive, "; ".join(problems)))
    if missing:
        items = [
            f"[{i}] {archive} (md5 {file.md5}; from {file.urls[0]})" + (f": {problem}" if problem else "")
            for i, (file, archive, problem) in enumerate(missing, 1)
        ]
        raise DataUnavailableError(
            f"data set {name!r}: {len(missing)} file(s) missing or corrupt under {root}: {' '.join(items)}. "
            "Put these files there (or in a mirror folder laid out the same way and pass it as "
            "image_data_mirror / --mirror), or run where the URLs are reachable."
        )


def load_split(name: str, split: str, root: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, C, H, W) uint8 and labels (N,) int64 of one split, from the original files.

    Raises:
        DataFileError: a file is malformed (the message names it).
        DataUnavailableError: a file is missing.
    """
    dataset = _check_name(name)
    if split not in dataset.splits:
        raise ValueError(f"data set {name!r} has no split {split!r}; it has {list(dataset.splits)}")
    x, y = dataset.reader(Path(root), split)
    if y.size and (y.min() < 0 or y.max() >= dataset.num_classes):
        raise DataFileError(root, f"{name} {split}: labels outside 0..{dataset.num_classes - 1}")
    return x, y


def _same_arrays(path: Path, arrays: dict[str, np.ndarray]) -> str | None:
    """``None`` when the ``.npz`` at ``path`` holds exactly ``arrays`` (names, dtypes,
    shapes, values), else what differs."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                return "not an .npz"
            if sorted(data.files) != sorted(arrays):
                return f"holds {sorted(data.files)}, not {sorted(arrays)}"
            for key, expected in arrays.items():
                got = data[key]
                if got.dtype != expected.dtype or got.shape != expected.shape or not np.array_equal(got, expected):
                    return f"its {key} differs from the verified originals"
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        return f"unreadable ({type(err).__name__}: {' '.join(str(err).split())})"
    return None


def _arrays(name: str, root: Path | str) -> dict[str, np.ndarray]:
    return {
        f"{kind}_{split}": array
        for split in _check_name(name).splits
        for kind, array in zip("xy", load_split(name, split, root))
    }


def _left_untouched(name: str, out: Path, arrays: dict[str, np.ndarray], say_why: bool = False) -> bool:
    """Whether ``out`` already holds exactly ``arrays`` (then logged: left untouched)."""
    if not out.is_file():
        return False
    problem = _same_arrays(out, arrays)
    if problem is None:
        log.info("%s already holds the verified %s arrays: left untouched", out, name)
        return True
    if say_why:
        log.info("%s: replacing it (%s)", out, problem)
    return False


def save_arrays(name: str, root: Path | str, out: Path | str) -> bool:
    """All splits of ``name`` into one ``.npz`` (``x_<split>``, ``y_<split>``), written
    atomically, holding the lock ``.<stem>.lock`` beside it (:func:`data_lock`; for
    ``<root>/<name>.npz`` the one :func:`prepare` takes).

    An ``.npz`` already there that holds exactly these arrays (those of the verified
    originals under ``root``) is left untouched (same inode and modification time; and
    no lock is taken, so a read-only folder holding it is fine). Returns whether the
    file was written.
    """
    out = Path(out)
    arrays = _arrays(name, root)
    if _left_untouched(name, out, arrays):
        return False
    with data_lock(out.with_name(f".{out.stem}.lock"), name):
        if _left_untouched(name, out, arrays, say_why=True):  # another run wrote it meanwhile
            return False
        save_npz_atomic(out, **arrays)
    return True


def prepare_arrays(
    name: str, root: Path | str, out: Path | str, mirror: Path | str | None = None, download: bool = True
) -> bool:
    """:func:`prepare` then :func:`save_arrays` (what ``repens prepare-images`` does), both
    under one hold of the lock ``root/.<name>.lock``: a run sharing ``root`` waits once,
    then finds everything in place. Where the original files and ``out`` are already
    in place and verified nothing is written, not even the lock file. Returns whether
    ``out`` was written."""
    dataset, root, out = _check_name(name), Path(root), Path(out)
    if mirror is not None and not Path(mirror).is_dir():
        raise DataUnavailableError(f"image_data_mirror (--mirror) folder {mirror} does not exist")
    if _all_verified(dataset, root) and _left_untouched(name, out, _arrays(name, root)):
        return False
    with data_lock(root / f".{name}.lock", name):
        prepare(name, root, mirror, download)
        return save_arrays(name, root, out)


def load_arrays(path: Path | str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split from a file written by :func:`save_arrays`: images (N, C, H, W) uint8,
    labels (N,) int64.

    Raises:
        DataFileError: the file is truncated, corrupt, lacks the split, or holds arrays
            of the wrong type or shape (the message names it and says to rerun
            ``prepare-images``).
        DataUnavailableError: the file does not exist.
    """
    path = Path(path)
    rerun = "delete it and run 'repens prepare-images' again"
    if not path.is_file():
        raise DataUnavailableError(f"{path} does not exist (it is written by 'repens prepare-images')")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise DataFileError(path, f"a single .npy array, not the .npz of prepare-images; {rerun}")
            splits = sorted(k[2:] for k in data.files if k.startswith("x_"))
            if f"x_{split}" not in data.files or f"y_{split}" not in data.files:
                raise DataFileError(path, f"no split {split!r} (has {splits}); {rerun}")
            x, y = data[f"x_{split}"], data[f"y_{split}"]
    except DataError:
        raise
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        raise DataFileError(
            path, f"not a readable .npz (truncated or corrupt: {type(err).__name__}: {err}); {rerun}"
        ) from err
    if x.dtype != np.uint8 or x.ndim != 4:
        raise DataFileError(path, f"x_{split} is {x.dtype} {x.shape}, expected uint8 (N, C, H, W); {rerun}")
    if y.dtype.kind not in "iu" or y.shape != (x.shape[0],):
        raise DataFileError(path, f"y_{split} is {y.dtype} {y.shape}, expected integer ({x.shape[0]},); {rerun}")
    return x, y.astype(np.int64, copy=False)
