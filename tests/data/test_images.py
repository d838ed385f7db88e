"""Loaders on tiny files written in the real on-disk formats, the offline
prepare/verify logic, and (when present) the real FashionMNIST/MNIST archives."""

import gzip
import hashlib
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from repens.data import images
from repens.data.images import DataUnavailableError, load_arrays, load_split, prepare, read_idx, save_arrays

SHARED = Path(os.environ.get("REPENS_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(root: Path, folder: str, n_train=6, n_test=4, gz=False):
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            path = raw / f"{prefix}-{kind}-ubyte"
            data = _idx_bytes(arr)
            if gz:
                with gzip.open(str(path) + ".gz", "wb") as f:
                    f.write(data)
            else:
                path.write_bytes(data)
        out[prefix] = (x, y)
    return out


def test_idx_reader_roundtrip(tmp_path):
    written = _write_mnist(tmp_path, "FashionMNIST")
    x, y = load_split("fashionmnist", "train", tmp_path)
    assert x.shape == (6, 1, 28, 28) and x.dtype == np.uint8
    np.testing.assert_array_equal(x[:, 0], written["train"][0])
    np.testing.assert_array_equal(y, written["train"][1].astype(np.int64))
    x, y = load_split("fashionmnist", "test", tmp_path)
    assert x.shape[0] == 4


def test_idx_rejects_bad_magic_and_truncation(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + b"\x00\x00\x00")
    with pytest.raises(ValueError, match="magic"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + b"\x00\x00")
    with pytest.raises(ValueError, match="holds 2"):
        read_idx(short)


def test_cifar_pickle_batches(tmp_path):
    folder = tmp_path / images.CIFAR_FOLDER
    folder.mkdir()
    rng = np.random.default_rng(1)
    expected = []
    for name in images.CIFAR_BATCHES["train"] + images.CIFAR_BATCHES["test"]:
        data = rng.integers(0, 256, size=(3, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=3)]
        with open(folder / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": data, "filenames": ["a", "b", "c"]}, f)
        expected.append((data, labels))
    x, y = load_split("cifar10", "train", tmp_path)
    assert x.shape == (15, 3, 32, 32)
    # channel-major rows: first 1024 bytes are the red plane
    np.testing.assert_array_equal(x[0, 0].reshape(-1), expected[0][0][0, :1024])
    np.testing.assert_array_equal(y[:3], expected[0][1])
    x, y = load_split("cifar10", "test", tmp_path)
    assert x.shape == (3, 3, 32, 32)


def test_svhn_mat(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(2)
    X = rng.integers(0, 256, size=(32, 32, 3, 5), dtype=np.uint8)
    y = np.array([[10], [1], [2], [9], [10]], dtype=np.uint8)
    savemat(tmp_path / "test_32x32.mat", {"X": X, "y": y})
    x, labels = load_split("svhn", "test", tmp_path)
    assert x.shape == (5, 3, 32, 32)
    np.testing.assert_array_equal(labels, [0, 1, 2, 9, 0])  # "10" is the digit 0
    np.testing.assert_array_equal(x[3, 1], X[:, :, 1, 3])
    with pytest.raises(ValueError, match="no split 'train'"):
        load_split("svhn", "train", tmp_path)


def test_missing_files_offline_lists_them(tmp_path, monkeypatch):
    def no_network(file, folder):
        raise OSError("network unreachable")

    monkeypatch.setattr(images, "_download", no_network)
    with pytest.raises(DataUnavailableError) as err:
        prepare("cifar10", tmp_path / "data")
    msg = str(err.value)
    assert "cifar-10-python.tar.gz" in msg and "c58f30108f718f92721af3b95e74349a" in msg
    assert "network unreachable" in msg
    with pytest.raises(DataUnavailableError, match="t10k-labels-idx1-ubyte.gz"):
        prepare("mnist", tmp_path / "data")


def test_mirror_with_wrong_md5_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_download", lambda f, d: (_ for _ in ()).throw(OSError("offline")))
    mirror = tmp_path / "mirror"
    _write_mnist(mirror, "MNIST", gz=True)  # right names, wrong content
    with pytest.raises(DataUnavailableError, match="wrong MD5"):
        prepare("mnist", tmp_path / "data", mirror=mirror)
    assert not (tmp_path / "data" / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


def _registry_of(monkeypatch, root: Path, name: str = "mnist", folder: str = "MNIST", archives: Path | None = None):
    """Patch the registry's entry ``name`` to the tiny files under ``root``: the archives'
    MD5s (from ``archives``, else dummy) and the extracted files' MD5s."""
    raw = root / folder / "raw"
    files = []
    for extracted in sorted(p for p in raw.iterdir() if p.name.endswith("ubyte")):
        archive = (archives or raw) / (extracted.name + ".gz")
        archive_md5 = hashlib.md5(archive.read_bytes()).hexdigest() if archive.exists() else "0" * 32
        files.append(
            images.RemoteFile(
                extracted.name + ".gz",
                archive_md5,
                f"{folder}/raw",
                ("http://x/",),
                (f"{folder}/raw/{extracted.name}",),
                (hashlib.md5(extracted.read_bytes()).hexdigest(),),
            )
        )
    patched = dict(
        images.IMAGE_DATASETS,
        **{name: images.ImageDataset(name, tuple(files), ("train", "test"), images._read_mnist(folder))},
    )
    monkeypatch.setattr(images, "IMAGE_DATASETS", patched)


def test_extracted_files_need_no_archive(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_download", lambda f, d: pytest.fail("network touched"))
    _write_mnist(tmp_path, "MNIST")
    _registry_of(monkeypatch, tmp_path)  # their MD5s are the known ones
    prepare("mnist", tmp_path)  # nothing to do
    save_arrays("mnist", tmp_path, tmp_path / "mnist.npz")
    x, y = load_arrays(tmp_path / "mnist.npz", "test")
    assert x.shape == (4, 1, 28, 28) and y.dtype == np.int64


def test_verified_archive_is_extracted(tmp_path, monkeypatch):
    """An archive whose MD5 matches the registry is extracted (registry patched to tiny files)."""
    monkeypatch.setattr(images, "_download", lambda f, d: pytest.fail("network touched"))
    mirror = tmp_path / "mirror"
    _write_mnist(mirror, "MNIST", gz=True)
    raw = mirror / "MNIST" / "raw"
    files = tuple(
        images.RemoteFile(
            p.name, hashlib.md5(p.read_bytes()).hexdigest(), "MNIST/raw", ("http://x/",), (f"MNIST/raw/{p.name[:-3]}",)
        )
        for p in sorted(raw.glob("*.gz"))
    )
    patched = dict(
        images.IMAGE_DATASETS, mnist=images.ImageDataset("mnist", files, ("train", "test"), images._read_mnist("MNIST"))
    )
    monkeypatch.setattr(images, "IMAGE_DATASETS", patched)
    prepare("mnist", tmp_path / "data", mirror=mirror)
    x, _ = load_split("mnist", "train", tmp_path / "data")
    assert x.shape == (6, 1, 28, 28)


@pytest.mark.skipif(not (SHARED / "FashionMNIST" / "raw").exists(), reason="no shared copy of FashionMNIST")
def test_real_fashionmnist_from_mirror(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_download", lambda f, d: pytest.fail("network touched"))
    prepare("fashionmnist", tmp_path, mirror=SHARED)
    x, y = load_split("fashionmnist", "test", tmp_path)
    assert x.shape == (10000, 1, 28, 28)
    assert np.bincount(y).tolist() == [1000] * 10
    # the archives were copied, never extracted in the mirror
    assert not (SHARED / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").exists()
    shutil.rmtree(tmp_path / "FashionMNIST")
