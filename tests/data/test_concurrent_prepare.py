"""Runs sharing one data folder: every file is written under a temporary name of its
own and renamed into place, and preparation holds an ``fcntl.flock`` on a lock file in
the folder (``.<dataset>.lock`` for the original files and ``<dataset>.npz``,
``.<name>.lock`` in the UCI root), so runs preparing the same data at once
all succeed and leave one valid copy; a lock left by a dead process does not block;
and a valid prepared file is never rewritten (Snakemake deletes a failed job's outputs,
so a run that fails or rewrites can take another run's good file with it).

Each run is a separate Python process going through ``repens.cli.main`` (what rule
``prepare_images`` / ``download_uci`` run), on a small fake mirror: tiny FashionMNIST
archives (the registry patched to their MD5s in the child) or a tiny UCI dataset. The
children slow down ``os.replace`` (a slow shared filesystem), which makes runs that
share a temporary name collide every time instead of now and then.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from repens.cli import main
from repens.data import images
from repens.data.images import load_arrays

SRC = Path(__file__).resolve().parents[2] / "src"
FOLDER = "FashionMNIST/raw"

#: one run in a child process: patch the registry to the fake archives, slow down
#: os.replace, wait for the start signal (a file), then run the CLI
RUNNER = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
from repens.data import images
from repens.cli import main
if args.get("registry"):
    files = tuple(images.RemoteFile(name, md5, folder, ("http://unreachable.invalid/",),
                                    (f"{folder}/{name[:-3]}",), (raw_md5,))
                  for name, md5, folder, raw_md5 in args["registry"])
    old = images.IMAGE_DATASETS["fashionmnist"]
    images.IMAGE_DATASETS["fashionmnist"] = images.ImageDataset("fashionmnist", files, old.splits, old.reader)
if args.get("slow"):
    real_replace = os.replace
    def slow_replace(src, dst, **kw):
        time.sleep(args["slow"])
        return real_replace(src, dst, **kw)
    os.replace = slow_replace
if args.get("go"):
    while not os.path.exists(args["go"]):
        time.sleep(0.01)
if args.get("api"):  # the library call instead of the CLI
    import logging
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    written = images.prepare_arrays(**args["api"])
    print("written" if written else "untouched", flush=True)
    sys.exit(0)
sys.exit(main(args["argv"]))
"""

HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"pid %d on the test" % os.getpid())
print("locked", flush=True)
time.sleep(300)
"""


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _fake_mirror(mirror: Path, n_train: int = 300, n_test: int = 100):
    """Tiny FashionMNIST archives under ``mirror``; returns the registry rows (archive,
    its MD5, folder, extracted MD5) and the arrays the .npz must hold."""
    rng = np.random.default_rng(0)
    raw = mirror / FOLDER
    raw.mkdir(parents=True)
    registry, expected = [], {}
    for prefix, split, n in (("train", "train", n_train), ("t10k", "test", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        expected[split] = (x[:, None], y.astype(np.int64))
        for kind, array in (("images-idx3", x), ("labels-idx1", y)):
            data = _idx(array)
            packed = gzip.compress(data, mtime=0)
            name = f"{prefix}-{kind}-ubyte.gz"
            (raw / name).write_bytes(packed)
            registry.append((name, hashlib.md5(packed).hexdigest(), FOLDER, hashlib.md5(data).hexdigest()))
    return registry, expected


def _start(args: dict, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, json.dumps(args)], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def _prepare_argv(root: Path, mirror: Path, out: Path) -> list[str]:
    return [
        "prepare-images",
        "--dataset",
        "fashionmnist",
        "--root",
        str(root),
        "--mirror",
        str(mirror),
        "--offline",
        "--out",
        str(out),
    ]


def _assert_npz(out: Path, expected: dict) -> None:
    for split, (x, y) in expected.items():
        got_x, got_y = load_arrays(out, split)
        np.testing.assert_array_equal(got_x, x)
        np.testing.assert_array_equal(got_y, y)


def _leftovers(folder: Path) -> list[str]:
    """Temporary files (or staging folders) anything left under ``folder``."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if ".tmp" in p.name or p.name.endswith((".part", ".extract"))
    )


def _wait_all(procs: list[subprocess.Popen], timeout: float = 240) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


def test_runs_preparing_one_folder_at_once_all_succeed(tmp_path):
    """Three runs started at the same instant into one image_data folder (what two
    Snakemake runs sharing image_data do) all exit 0 and leave one valid .npz, the
    extracted files, and no temporary file; the runs that waited say so."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    data, go = tmp_path / "image_data", tmp_path / "go"
    out = data / "fashionmnist.npz"
    args = {"registry": registry, "slow": 0.15, "go": str(go), "argv": _prepare_argv(data, tmp_path / "mirror", out)}
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    procs = [_start(args, log) for log in logs]
    time.sleep(1.0)  # let the children import before they start together
    go.touch()
    codes = _wait_all(procs)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0, 0], "\n---\n".join(texts)
    _assert_npz(out, expected)
    for name, _, folder, raw_md5 in registry:
        extracted = data / folder / name[:-3]
        assert hashlib.md5(extracted.read_bytes()).hexdigest() == raw_md5
    assert _leftovers(data) == []
    waiting = [line for t in texts for line in t.splitlines() if "waiting for" in line]
    assert waiting, "\n---\n".join(texts)
    assert all(f"waiting for {data / '.fashionmnist.lock'}: another run (" in line for line in waiting), waiting


def test_prepare_arrays_holds_one_lock_throughout(tmp_path):
    """prepare_arrays (prepare, then save_arrays, under one hold of the dataset's lock):
    of two runs started at once, one writes and the other waits once (one line), then
    finds the .npz valid and leaves it untouched."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    data, go = tmp_path / "image_data", tmp_path / "go"
    out = data / "fashionmnist.npz"
    args = {
        "registry": registry,
        "slow": 0.15,
        "go": str(go),
        "api": {
            "name": "fashionmnist",
            "root": str(data),
            "out": str(out),
            "mirror": str(tmp_path / "mirror"),
            "download": False,
        },
    }
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    procs = [_start(args, log) for log in logs]
    time.sleep(1.0)
    go.touch()
    codes = _wait_all(procs)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n---\n".join(texts)
    _assert_npz(out, expected)
    assert sorted(t.splitlines()[-1] for t in texts) == ["untouched", "written"], texts
    waiting = [line for t in texts for line in t.splitlines() if "waiting for" in line]
    assert len(waiting) == 1 and f"waiting for {data / '.fashionmnist.lock'}: another run (" in waiting[0]
    assert sorted(p.name for p in data.iterdir()) == [".fashionmnist.lock", "FashionMNIST", "fashionmnist.npz"]


def _uci_mirror(root: Path, rows: int = 30, n_splits: int = 3) -> Path:
    rng = np.random.default_rng(0)
    folder = root / "tiny" / "data"
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", rng.normal(size=(rows, 3)))
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    for f, v in (("n_splits.txt", n_splits), ("n_hidden.txt", 8), ("n_epochs.txt", 2)):
        (folder / f).write_text(f"{v}\n")
    for k in range(n_splits):
        perm = rng.permutation(rows)
        np.savetxt(folder / f"index_train_{k}.txt", perm[5:], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[:5], fmt="%d")
    return folder


def test_uci_downloads_into_one_root_at_once_all_succeed(tmp_path):
    """Two uci-download runs (rule download_uci) fetching one dataset into one root at
    the same instant both exit 0, with every file identical to the mirror's."""
    source = _uci_mirror(tmp_path / "mirror")
    root, go = tmp_path / "uci", tmp_path / "go"
    args = {
        "slow": 0.1,
        "go": str(go),
        "argv": ["uci-download", "--root", str(root), "--name", "tiny", "--url", (tmp_path / "mirror").as_uri()],
    }
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    procs = [_start(args, log) for log in logs]
    time.sleep(1.0)
    go.touch()
    codes = _wait_all(procs)
    assert codes == [0, 0], "\n---\n".join(log.read_text() for log in logs)
    copy = root / "tiny" / "data"
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in source.iterdir())
    for path in source.iterdir():
        assert (copy / path.name).read_bytes() == path.read_bytes()
    assert _leftovers(root) == []


def test_a_complete_uci_folder_is_only_read(tmp_path, monkeypatch):
    """uci-download into a root already holding every file of the dataset (a shared,
    read-only copy, say) fetches nothing and writes nothing, not even a lock file."""
    from repens.data.uci import download_dataset

    _uci_mirror(tmp_path / "root")
    monkeypatch.setattr(images, "_open_lock", lambda path: pytest.fail(f"{path} opened"))
    before = sorted(p.name for p in (tmp_path / "root").rglob("*"))
    assert (
        download_dataset(tmp_path / "root", "tiny", base_url="http://unreachable.invalid")
        == tmp_path / "root" / "tiny" / "data"
    )
    assert sorted(p.name for p in (tmp_path / "root").rglob("*")) == before


def test_a_lock_held_by_a_process_that_dies_does_not_block(tmp_path):
    """A run waits (one log line naming the lock and its holder) while another process
    holds the folder's lock, goes on once that process is killed (the kernel drops a
    dead process's flock), and the lock file the dead process left behind holds back
    no later run."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    data = tmp_path / "image_data"
    data.mkdir()
    lock = data / ".fashionmnist.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        out = data / "fashionmnist.npz"
        args = {"registry": registry, "argv": _prepare_argv(data, tmp_path / "mirror", out)}
        run = _start(args, tmp_path / "run.log")
        deadline = time.monotonic() + 60
        while f"waiting for {lock}" not in (tmp_path / "run.log").read_text():
            assert run.poll() is None, f"the run did not wait for the lock:\n{(tmp_path / 'run.log').read_text()}"
            assert time.monotonic() < deadline, "no waiting line within 60 s"
            time.sleep(0.1)
        assert f"another run (pid {holder.pid} on the test)" in (tmp_path / "run.log").read_text()
        time.sleep(0.5)
        assert run.poll() is None  # still held back
        assert not out.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert run.wait(timeout=120) == 0, (tmp_path / "run.log").read_text()
    _assert_npz(out, expected)
    assert lock.exists()  # the dead process's lock file stays, and is no obstacle:
    again = _start(args, tmp_path / "again.log")
    assert again.wait(timeout=120) == 0, (tmp_path / "again.log").read_text()
    assert "waiting for" not in (tmp_path / "again.log").read_text()


def _patch_registry(monkeypatch, registry) -> None:
    files = tuple(
        images.RemoteFile(name, md5, folder, ("http://unreachable.invalid/",), (f"{folder}/{name[:-3]}",), (raw_md5,))
        for name, md5, folder, raw_md5 in registry
    )
    old = images.IMAGE_DATASETS["fashionmnist"]
    monkeypatch.setitem(
        images.IMAGE_DATASETS, "fashionmnist", images.ImageDataset("fashionmnist", files, old.splits, old.reader)
    )


def test_a_valid_prepared_file_is_left_untouched(tmp_path, monkeypatch, capsys):
    """A second prepare-images finds the .npz valid (its arrays equal those of the
    MD5-verified originals) and exits 0 without writing it: same inode, same mtime."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    _patch_registry(monkeypatch, registry)
    data = tmp_path / "image_data"
    out = data / "fashionmnist.npz"
    argv = _prepare_argv(data, tmp_path / "mirror", out)
    assert main(argv) == 0
    before = out.stat()
    time.sleep(0.05)
    capsys.readouterr()
    assert main(argv) == 0  # (main logs to stderr)
    after = out.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert f"{out} already holds the verified fashionmnist arrays: left untouched" in capsys.readouterr().err
    _assert_npz(out, expected)


@pytest.mark.parametrize("damage", ["truncated", "other arrays"])
def test_a_damaged_prepared_file_is_replaced(tmp_path, monkeypatch, damage):
    """An .npz that is not the verified arrays (cut short, or another data set's) is
    rewritten, atomically."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    _patch_registry(monkeypatch, registry)
    data = tmp_path / "image_data"
    out = data / "fashionmnist.npz"
    argv = _prepare_argv(data, tmp_path / "mirror", out)
    assert main(argv) == 0
    if damage == "truncated":
        out.write_bytes(out.read_bytes()[:500])
    else:
        np.savez(
            out,
            x_train=np.zeros((2, 1, 28, 28), np.uint8),
            y_train=np.zeros(2, np.int64),
            x_test=np.zeros((1, 1, 28, 28), np.uint8),
            y_test=np.zeros(1, np.int64),
        )
    assert main(argv) == 0
    _assert_npz(out, expected)
    assert _leftovers(data) == []


def test_written_files_honour_the_umask(tmp_path, monkeypatch):
    """Files renamed into a shared folder get the mode an ordinary write gets (0666 less
    the umask), not a temporary file's private 0600."""
    registry, _ = _fake_mirror(tmp_path / "mirror")
    _patch_registry(monkeypatch, registry)
    data = tmp_path / "image_data"
    old = os.umask(0o022)
    try:
        assert main(_prepare_argv(data, tmp_path / "mirror", data / "fashionmnist.npz")) == 0
    finally:
        os.umask(old)
    for name, _, folder, _ in registry:
        for path in (data / folder / name, data / folder / name[:-3]):
            assert path.stat().st_mode & 0o777 == 0o644, path


def test_a_prepared_folder_is_only_read(tmp_path, monkeypatch, capsys):
    """Where the original files and the .npz are in place and verified, a run writes
    nothing there, not even a lock file (a read-only shared data folder works)."""
    registry, expected = _fake_mirror(tmp_path / "mirror")
    _patch_registry(monkeypatch, registry)
    data = tmp_path / "image_data"
    argv = _prepare_argv(data, tmp_path / "mirror", data / "fashionmnist.npz")
    assert main(argv) == 0
    (data / ".fashionmnist.lock").unlink()
    monkeypatch.setattr(images, "_open_lock", lambda path: pytest.fail(f"{path} opened"))
    monkeypatch.setattr(images, "atomic_file", lambda dest: pytest.fail(f"{dest} written"))
    assert main(argv) == 0
    assert (
        main(
            [
                "prepare-images",
                "--dataset",
                "fashionmnist",
                "--root",
                str(data),
                "--offline",
                "--out",
                str(data / "fashionmnist.npz"),
            ]
        )
        == 0
    )
    assert images.prepare_arrays("fashionmnist", data, data / "fashionmnist.npz") is False
    assert not (data / ".fashionmnist.lock").exists()
    _assert_npz(data / "fashionmnist.npz", expected)


@pytest.mark.parametrize("failure", ["read-only folder", "no flock on this filesystem"])
def test_a_folder_that_cannot_be_locked_is_prepared_unlocked(tmp_path, monkeypatch, capsys, failure):
    """A folder where the lock file cannot be made (read-only: EROFS) or a filesystem
    refusing flock (some NFS mounts: ENOLCK) does not stop a run: it goes on without the
    lock, the latter with one warning line."""
    import errno

    registry, expected = _fake_mirror(tmp_path / "mirror")
    _patch_registry(monkeypatch, registry)
    data = tmp_path / "image_data"
    out = data / "fashionmnist.npz"
    if failure == "read-only folder":

        def refuse(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        monkeypatch.setattr(images, "_open_lock", refuse)
    else:

        def no_flock(fd, op):
            raise OSError(errno.ENOLCK, "No locks available")

        monkeypatch.setattr(images.fcntl, "flock", no_flock)
    assert main(_prepare_argv(data, tmp_path / "mirror", out)) == 0
    err = capsys.readouterr().err
    _assert_npz(out, expected)
    warnings = [line for line in err.splitlines() if "cannot lock" in line]
    if failure == "read-only folder":
        assert warnings == [] and not (data / ".fashionmnist.lock").exists()
    else:
        assert len(warnings) == 1 and "No locks available): going on without the lock" in warnings[0]


def test_a_tar_archive_is_extracted_through_a_staging_folder_of_its_own(tmp_path, monkeypatch):
    """CIFAR-10's tar.gz is unpacked into a staging folder of the run's own, each file
    renamed into place: the batches are there, verified, and nothing else is left."""
    import io
    import pickle
    import tarfile

    rng = np.random.default_rng(3)
    batches = {}
    for name in images.CIFAR_BATCHES["train"] + images.CIFAR_BATCHES["test"]:
        batch = {"labels": [int(v) for v in rng.integers(0, 10, 2)], "data": rng.integers(0, 256, (2, 3072), np.uint8)}
        batches[name] = pickle.dumps(batch)
    archive = tmp_path / "mirror" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        for name, blob in batches.items():
            info = tarfile.TarInfo(f"{images.CIFAR_FOLDER}/{name}")
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, io.BytesIO(blob))
    names = list(batches)
    cifar = images.RemoteFile(
        archive.name,
        hashlib.md5(archive.read_bytes()).hexdigest(),
        ".",
        ("http://x.invalid/",),
        tuple(f"{images.CIFAR_FOLDER}/{n}" for n in names),
        tuple(hashlib.md5(batches[n]).hexdigest() for n in names),
    )
    old = images.IMAGE_DATASETS["cifar10"]
    monkeypatch.setitem(
        images.IMAGE_DATASETS, "cifar10", images.ImageDataset("cifar10", (cifar,), old.splits, old.reader)
    )
    data = tmp_path / "image_data"
    assert images.prepare_arrays("cifar10", data, data / "cifar10.npz", mirror=tmp_path / "mirror", download=False)
    assert sorted(p.name for p in (data / images.CIFAR_FOLDER).iterdir()) == sorted(names)
    assert sorted(p.name for p in data.iterdir()) == sorted(
        [".cifar10.lock", archive.name, images.CIFAR_FOLDER, "cifar10.npz"]
    )
    assert load_arrays(data / "cifar10.npz", "train")[0].shape == (10, 3, 32, 32)


def test_a_tar_is_extracted_by_hand_where_python_has_no_data_filter(tmp_path, monkeypatch):
    """Python 3.11.0-3.11.3 has no ``tarfile.data_filter``: the regular files come out the
    same, and a member that would land outside the folder is refused, naming it."""
    import io
    import tarfile

    from repens.data.images import _extract_data

    def archive(name: str) -> Path:
        path = tmp_path / f"{name.replace('/', '_')}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            data = b"pixels"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return path

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    good = archive("batches/data_1")
    with tarfile.open(good) as tar:
        _extract_data(tar, tmp_path / "out", good)
    assert (tmp_path / "out/batches/data_1").read_bytes() == b"pixels"
    bad = archive("../escape")
    with tarfile.open(bad) as tar, pytest.raises(ValueError, match="member '../escape' would be written outside"):
        _extract_data(tar, tmp_path / "out2", bad)
    assert not (tmp_path / "escape").exists()
