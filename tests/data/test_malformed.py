"""Malformed and missing data files: every one gives one line naming the file
and what is wrong, never a raw traceback; extracted image files are verified."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repens.cli import main
from repens.data import images, uci
from repens.data.errors import DataError, DataFileError
from repens.data.images import DataUnavailableError, load_arrays, load_split, prepare
from repens.data.uci import UCIDataError, check_dataset, dataset_info, download_dataset

SRC = Path(__file__).resolve().parents[2] / "src"
SHARED = Path(os.environ.get("REPENS_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def _one_line_naming(err: BaseException, path: Path | str) -> str:
    msg = str(err)
    assert "\n" not in msg, msg
    assert str(path) in msg, (str(path), msg)
    return msg


# ------------------------------------------------------------------ prepared .npz
def _npz(path: Path, n: int = 5) -> Path:
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8),
        y_train=np.arange(n) % 10,
        x_test=rng.integers(0, 256, (3, 1, 28, 28), dtype=np.uint8),
        y_test=np.arange(3),
    )
    return path


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "crc"])
def test_corrupt_npz_is_one_line_naming_it(tmp_path, damage):
    path = _npz(tmp_path / "fashionmnist.npz")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"not a zip file at all\n" * 10)
    else:  # a flipped byte inside a member: the zip's CRC check fails on reading
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0xFF
        path.write_bytes(bytes(flipped))
    with pytest.raises(DataFileError) as err:
        load_arrays(path, "train")
    msg = _one_line_naming(err.value, path)
    assert "prepare-images" in msg


def test_npz_missing_split_or_wrong_arrays(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, x_test=np.zeros((2, 1, 4, 4), np.uint8), y_test=np.zeros(2, np.int64))
    with pytest.raises(DataFileError, match=r"no split 'train' \(has \['test'\]\)") as err:
        load_arrays(path, "train")
    _one_line_naming(err.value, path)
    np.savez(path, x_test=np.zeros((2, 1, 4, 4), np.float32), y_test=np.zeros(2, np.int64))
    with pytest.raises(DataFileError, match="x_test is float32"):
        load_arrays(path, "test")
    np.savez(path, x_test=np.zeros((2, 1, 4, 4), np.uint8), y_test=np.zeros(3, np.int64))
    with pytest.raises(DataFileError, match=r"y_test is int64 \(3,\)"):
        load_arrays(path, "test")
    with pytest.raises(DataUnavailableError, match="does not exist") as err:
        load_arrays(tmp_path / "absent.npz", "test")
    _one_line_naming(err.value, tmp_path / "absent.npz")


# ------------------------------------------------------------------ original image files
def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _tiny_mnist(root: Path, archives: Path | None = None) -> dict[str, bytes]:
    """Tiny extracted MNIST files under root (and their .gz archives under ``archives``)."""
    rng = np.random.default_rng(0)
    contents = {}
    for prefix, n in (("train", 6), ("t10k", 4)):
        contents[f"{prefix}-images-idx3-ubyte"] = _idx(rng.integers(0, 256, (n, 28, 28)))
        contents[f"{prefix}-labels-idx1-ubyte"] = _idx(rng.integers(0, 10, n))
    for where, packed in ((root, False), (archives, True)):
        if where is None:
            continue
        raw = where / "MNIST" / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for name, data in contents.items():
            if packed:
                (raw / (name + ".gz")).write_bytes(gzip.compress(data, mtime=0))
            else:
                (raw / name).write_bytes(data)
    return contents


def _patch_registry(monkeypatch, contents: dict[str, bytes]) -> None:
    """The 'mnist' entry with the MD5s of the tiny files (archives: of their gzip, mtime 0)."""
    files = tuple(
        images.RemoteFile(
            name + ".gz",
            hashlib.md5(gzip.compress(data, mtime=0)).hexdigest(),
            "MNIST/raw",
            ("http://unreachable.invalid/",),
            (f"MNIST/raw/{name}",),
            (hashlib.md5(data).hexdigest(),),
        )
        for name, data in contents.items()
    )
    patched = dict(
        images.IMAGE_DATASETS, mnist=images.ImageDataset("mnist", files, ("train", "test"), images._read_mnist("MNIST"))
    )
    monkeypatch.setattr(images, "IMAGE_DATASETS", patched)
    monkeypatch.setattr(images, "_download", lambda f, d: (_ for _ in ()).throw(OSError("offline")))


def _flip_bit(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_flipped_bit_in_extracted_file_without_archive_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "data"
    _patch_registry(monkeypatch, _tiny_mnist(root))
    prepare("mnist", root, download=False)  # intact extracted files: no archive needed
    target = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    _flip_bit(target)
    with pytest.raises(DataUnavailableError) as err:
        prepare("mnist", root, download=False)
    msg = _one_line_naming(err.value, target)
    assert "wrong MD5" in msg
    with pytest.raises(DataUnavailableError):  # and the CLI path never writes the .npz
        prepare("mnist", root, download=True)


def test_flipped_bit_in_extracted_file_is_re_extracted_from_the_archive(tmp_path, monkeypatch):
    root, mirror = tmp_path / "data", tmp_path / "mirror"
    contents = _tiny_mnist(root, archives=mirror)
    _patch_registry(monkeypatch, contents)
    target = root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    _flip_bit(target, offset=10)
    prepare("mnist", root, mirror=mirror, download=False)
    assert target.read_bytes() == contents[target.name]
    # the archive is now in the root: a second flip is repaired without the mirror
    _flip_bit(target, offset=10)
    prepare("mnist", root, download=False)
    assert target.read_bytes() == contents[target.name]


def test_mirror_of_extracted_files_is_verified_and_copied(tmp_path, monkeypatch):
    root, mirror = tmp_path / "data", tmp_path / "mirror"
    contents = _tiny_mnist(mirror)  # a mirror holding only extracted files
    _patch_registry(monkeypatch, contents)
    prepare("mnist", root, mirror=mirror, download=False)
    assert (root / "MNIST" / "raw" / "train-images-idx3-ubyte").read_bytes() == contents["train-images-idx3-ubyte"]
    shutil.rmtree(root)
    _flip_bit(mirror / "MNIST" / "raw" / "train-images-idx3-ubyte")
    with pytest.raises(DataUnavailableError, match="missing or corrupt"):
        prepare("mnist", root, mirror=mirror, download=False)
    assert not (root / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


def test_missing_mirror_folder_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_download", lambda f, d: pytest.fail("network touched"))
    with pytest.raises(DataUnavailableError, match=r"image_data_mirror \(--mirror\) folder .* does not exist") as err:
        prepare("mnist", tmp_path / "data", mirror=tmp_path / "no-such-mirror")
    _one_line_naming(err.value, tmp_path / "no-such-mirror")


def test_missing_files_message_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_download", lambda f, d: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(DataUnavailableError) as err:
        prepare("mnist", tmp_path / "data")
    msg = _one_line_naming(err.value, tmp_path / "data" / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz")
    assert "4 file(s)" in msg


def test_malformed_original_files_name_the_file(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    good_images = _idx(np.zeros((3, 28, 28)))
    (raw / "train-images-idx3-ubyte").write_bytes(good_images[:-5])  # truncated
    (raw / "train-labels-idx1-ubyte").write_bytes(_idx(np.zeros(3)))
    with pytest.raises(DataFileError, match="truncated") as err:
        load_split("mnist", "train", tmp_path)
    _one_line_naming(err.value, raw / "train-images-idx3-ubyte")
    (raw / "train-images-idx3-ubyte").write_bytes(good_images)
    (raw / "train-labels-idx1-ubyte").write_bytes(_idx(np.array([1, 2, 12])))
    with pytest.raises(DataFileError, match=r"labels outside 0\.\.9") as err:
        load_split("mnist", "train", tmp_path)
    _one_line_naming(err.value, raw / "train-labels-idx1-ubyte")
    gz = tmp_path / "x-idx1-ubyte.gz"
    gz.write_bytes(gzip.compress(_idx(np.zeros(100)))[:-12])  # a gzip cut short
    with pytest.raises(DataFileError, match="cannot be read") as err:
        images.read_idx(gz)
    _one_line_naming(err.value, gz)
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_split("mnist", "test", tmp_path)


def test_malformed_cifar_and_svhn_name_the_file(tmp_path):
    folder = tmp_path / images.CIFAR_FOLDER
    folder.mkdir()
    (folder / "test_batch").write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [1, 2]})[:-9])
    with pytest.raises(DataFileError, match="not a CIFAR-10 python batch") as err:
        load_split("cifar10", "test", tmp_path)
    _one_line_naming(err.value, folder / "test_batch")
    (folder / "test_batch").write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [1]}))
    with pytest.raises(DataFileError, match="1 labels for 2 images"):
        load_split("cifar10", "test", tmp_path)
    (tmp_path / "test_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file, but then nothing")
    with pytest.raises(DataFileError, match="not an SVHN .mat file") as err:
        load_split("svhn", "test", tmp_path)
    _one_line_naming(err.value, tmp_path / "test_32x32.mat")


@pytest.mark.skipif(not (SHARED / "MNIST" / "raw").is_dir(), reason="no shared copy of MNIST")
def test_real_extracted_mnist_md5s_and_a_flipped_bit(tmp_path, monkeypatch):
    """The recorded MD5s of the extracted files are those of the real archives' contents."""
    monkeypatch.setattr(images, "_download", lambda f, d: pytest.fail("network touched"))
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for gz in (SHARED / "MNIST" / "raw").glob("*.gz"):
        with gzip.open(gz, "rb") as src, open(raw / gz.name[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst)
    prepare("mnist", tmp_path, download=False)  # only extracted files, all verified
    _flip_bit(raw / "t10k-images-idx3-ubyte", offset=5000)
    with pytest.raises(DataUnavailableError, match="t10k-images-idx3-ubyte has the wrong MD5"):
        prepare("mnist", tmp_path, download=False)
    prepare("mnist", tmp_path, mirror=SHARED, download=False)  # repaired from the verified archive
    x, _ = load_split("mnist", "test", tmp_path)
    assert x.shape == (10000, 1, 28, 28)


# ------------------------------------------------------------------ UCI files
def _uci(root: Path, name: str = "tiny", rows: int = 12, n_splits: int = 2) -> Path:
    rng = np.random.default_rng(0)
    folder = root / name / "data"
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", rng.normal(size=(rows, 3)))
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    for f, v in (("n_splits.txt", n_splits), ("n_hidden.txt", 8), ("n_epochs.txt", 2)):
        (folder / f).write_text(f"{v}\n")
    for k in range(n_splits):
        perm = rng.permutation(rows)
        np.savetxt(folder / f"index_train_{k}.txt", perm[3:], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[:3], fmt="%d")
    return folder


def _damage_data(folder: Path, how: str) -> None:
    path = folder / "data.txt"
    text = path.read_text()
    if how == "cut mid-line":  # a partial download: the last number still parses
        path.write_text(text[: len(text) - 20])
    elif how == "short row":
        path.write_text(text + "1.0 2.0\n")
    elif how == "NA":
        lines = text.splitlines()
        words = lines[4].split()
        words[1] = "NA"
        lines[4] = " ".join(words)
        path.write_text("\n".join(lines) + "\n")
    elif how == "nan":
        path.write_text(text.replace(text.split()[7], "nan", 1))
    elif how == "empty":
        path.write_text("")


@pytest.mark.parametrize(
    "how, message",
    [
        ("cut mid-line", r"ends inside line 12, without a newline \(cut short\?"),
        ("short row", r"line 13 has 2 values, the lines before 3"),
        ("NA", r"line 5: 'NA' is not a number"),
        ("nan", r"line 3: 'nan' is not a finite number"),
        ("empty", "holds no rows"),
    ],
)
def test_malformed_data_txt(tmp_path, how, message):
    folder = _uci(tmp_path)
    _damage_data(folder, how)
    with pytest.raises(DataFileError, match=message) as err:
        uci.load_split(tmp_path, "tiny", 0)
    _one_line_naming(err.value, folder / "data.txt")


@pytest.mark.parametrize("text", ["garbage\n", "", "2.5\n", "0\n", "-3\n", "2 3\n", "<html>404</html>\n"])
def test_n_splits_not_a_positive_integer(tmp_path, text):
    folder = _uci(tmp_path)
    (folder / "n_splits.txt").write_text(text)
    with pytest.raises(DataFileError, match="expected one positive integer") as err:
        check_dataset(tmp_path, "tiny")
    _one_line_naming(err.value, folder / "n_splits.txt")


def test_n_hidden_garbage(tmp_path):
    folder = _uci(tmp_path)
    (folder / "n_hidden.txt").write_text("fifty\n")
    with pytest.raises(DataFileError, match="got 'fifty'") as err:
        dataset_info(tmp_path, "tiny")
    _one_line_naming(err.value, folder / "n_hidden.txt")


@pytest.mark.parametrize(
    "file, text, message",
    [
        ("index_train_1.txt", "0\n1\n99\n", r"has indices outside \[0, 12\) \(e\.g\. 99\); data\.txt has 12 rows"),
        ("index_train_1.txt", "0\n-1\n", r"outside \[0, 12\) \(e\.g\. -1\)"),
        ("index_test_1.txt", "0\n1.5\n", r"value 2 \('1\.5'\) is not an integer index"),
        ("index_test_1.txt", "0\nNA\n", r"value 2 \('NA'\) is not an integer index"),
        ("index_test_1.txt", "", "holds no indices"),
        ("index_test_1.txt", "0\n1\n1", r"ends inside line 3, without a newline"),
        ("index_features.txt", "0\n3\n", r"outside \[0, 3\) \(e\.g\. 3\); data\.txt has 3 columns"),
        ("index_target.txt", "1\n2\n", "expected one column index, got 2"),
    ],
)
def test_malformed_index_files(tmp_path, file, text, message):
    folder = _uci(tmp_path)
    (folder / file).write_text(text)
    with pytest.raises(DataFileError, match=message) as err:
        uci.load_split(tmp_path, "tiny", 1)
    _one_line_naming(err.value, folder / file)


def test_missing_uci_root_says_so(tmp_path):
    root = tmp_path / "no-such-root"
    missing = r"UCI data folder .* \(uci_data / \$REPENS_UCI_DATA\) does not exist"
    with pytest.raises(UCIDataError, match=missing) as err:
        check_dataset(root, "tiny")
    _one_line_naming(err.value, root)
    # a download into a missing root that fails says the root is missing, and leaves nothing behind
    with pytest.raises(UCIDataError, match="does not exist, and fetching 'tiny' into it") as err:
        download_dataset(root, "tiny", base_url=(tmp_path / "no-mirror").as_uri())
    _one_line_naming(err.value, root)
    assert not root.exists()
    with pytest.raises(UCIDataError, match="could not fetch"):  # an existing root keeps no empty folders either
        download_dataset(tmp_path, "tiny", base_url=(tmp_path / "no-mirror").as_uri())
    assert not (tmp_path / "tiny").exists()


def test_data_errors_are_value_or_file_not_found_errors():
    assert issubclass(DataFileError, ValueError) and issubclass(DataFileError, DataError)
    assert issubclass(UCIDataError, FileNotFoundError) and issubclass(UCIDataError, DataError)
    assert issubclass(DataUnavailableError, FileNotFoundError) and issubclass(DataUnavailableError, DataError)
    err = DataFileError("/a/b.txt", "line 1\nis bad")
    assert str(err) == "/a/b.txt: line 1 is bad"
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


# ------------------------------------------------------------------ the command line
def test_main_prints_one_line_and_returns_2(tmp_path, capsys):
    folder = _uci(tmp_path)
    (folder / "n_splits.txt").write_text("garbage\n")
    log = tmp_path / "logs" / "x.log"
    code = main(
        [
            "--log",
            str(log),
            "uci-download",
            "--root",
            str(tmp_path),
            "--name",
            "tiny",
            "--url",
            (tmp_path / "nowhere").as_uri(),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [f"error: {folder / 'n_splits.txt'}: expected one positive integer, got 'garbage'"]
    assert log.read_text().splitlines()[-1] == lines[0]


def _repens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "repens", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _assert_one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert not [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("error: ", "20"))]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def _config() -> dict:
    import yaml

    cfg = yaml.safe_load((SRC.parent / "config.yaml").read_text())
    cfg["scale"] = "quick"
    return cfg


def test_cli_train_on_a_truncated_npz(tmp_path):
    """An image training job (what rule train_image runs) whose prepared .npz is cut short."""
    from repens.pipeline.config import resolve_job

    job = resolve_job(_config(), "image", "fashionmnist", "de", 1)
    job.update(particles=2, steps=2, hidden=[4], batch_size=4)
    train, ood = _npz(tmp_path / "fashionmnist.npz"), _npz(tmp_path / "mnist.npz")
    train.write_bytes(train.read_bytes()[:300])
    out = tmp_path / "r" / "metrics.json"
    proc = _repens(
        "train",
        "--spec",
        json.dumps(job),
        "--out",
        str(out),
        "--input",
        f"train={train}",
        "--input",
        f"ood={ood}",
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    _assert_one_error_line(proc, f"error: {train}: not a readable .npz (truncated or corrupt")
    assert not out.exists()


def test_cli_prepare_images_with_a_missing_mirror(tmp_path):
    proc = _repens(
        "prepare-images",
        "--dataset",
        "mnist",
        "--root",
        str(tmp_path / "data"),
        "--mirror",
        str(tmp_path / "no-mirror"),
        "--offline",
        "--out",
        str(tmp_path / "mnist.npz"),
        cwd=tmp_path,
    )
    _assert_one_error_line(proc, str(tmp_path / "no-mirror"), "does not exist")
    assert not (tmp_path / "mnist.npz").exists()


def test_cli_uci_train_on_data_with_na(tmp_path, monkeypatch):
    """A UCI training job (what rule train_uci runs) on a data.txt holding NA."""
    from repens.pipeline.config import resolve_job

    job = resolve_job(_config(), "uci", "boston", "de", 1)
    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in: the NA is found, not a checksum
    folder = _uci(tmp_path, name=uci.UCI_FOLDERS["boston"], rows=30)
    _damage_data(folder, "NA")
    job.update(steps=2, splits=1, uci_data=str(tmp_path))
    proc = _repens("train", "--spec", json.dumps(job), "--out", str(tmp_path / "r" / "metrics.json"), cwd=tmp_path)
    _assert_one_error_line(proc, str(folder / "data.txt"), "line 5: 'NA' is not a number")
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_fetch_checks_md5_before_the_file_appears(tmp_path):
    """A download lands under its final name only with the right MD5; a wrong one leaves
    nothing behind, not even its temporary file (file:// URLs take urllib's own path)."""
    import hashlib

    src = tmp_path / "src.bin"
    src.write_bytes(b"archive bytes")
    good = hashlib.md5(b"archive bytes").hexdigest()
    dest = tmp_path / "root" / "raw" / "a.gz"
    with pytest.raises(OSError, match="MD5"):
        images._fetch(src.as_uri(), dest, "0" * 32)
    assert not dest.parent.exists() or list(dest.parent.iterdir()) == []
    images._fetch(src.as_uri(), dest, good)
    assert dest.read_bytes() == b"archive bytes"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["a.gz"]
