"""Failed writes (read-only folder, full disk) end with one line naming the path and
leave neither a partial file nor a temporary one; the previous file stays intact."""

import errno
import json
import os

import numpy as np
import pytest
import torch

from repens.core import atomic
from repens.core.atomic import (
    WriteError,
    save_npz_atomic,
    torch_save_atomic,
    write_json_atomic,
    write_text_atomic,
)

WRITERS = {
    "text": lambda p: write_text_atomic(p, "x" * 3_000_000),
    "json": lambda p: write_json_atomic(p, {"a": "x" * 3_000_000}),
    "npz": lambda p: save_npz_atomic(p, a=np.zeros(500_000)),
    "torch": lambda p: torch_save_atomic({"a": torch.zeros(500_000, dtype=torch.float64)}, p),
}


def _disk_full_after_one_chunk(monkeypatch):
    calls = {"n": 0}
    real = atomic._write_chunk

    def write(f, chunk):
        calls["n"] += 1
        if calls["n"] > 1:  # the first chunk lands: a partial temporary file exists
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(f, chunk)

    monkeypatch.setattr(atomic, "_write_chunk", write)


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_disk_full_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch, kind):
    target = tmp_path / "out" / "result.bin"
    target.parent.mkdir()
    target.write_text("previous")
    _disk_full_after_one_chunk(monkeypatch)
    with pytest.raises(WriteError) as err:
        WRITERS[kind](target)
    assert str(err.value) == f"cannot write {target}: {os.strerror(errno.ENOSPC)}"
    assert isinstance(err.value, OSError) and err.value.errno == errno.ENOSPC
    assert [p.name for p in target.parent.iterdir()] == ["result.bin"]
    assert target.read_text() == "previous"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_read_only_folder(tmp_path, kind):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(WriteError) as err:
            WRITERS[kind](folder / "result.bin")
        message = str(err.value)
        assert message.startswith(f"cannot write {folder / 'result.bin'}: ") and "\n" not in message
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_success_replaces_the_target(tmp_path):
    target = tmp_path / "a" / "b.json"
    write_json_atomic(target, {"x": 1})
    write_json_atomic(target, {"x": 2})
    assert json.loads(target.read_text()) == {"x": 2}
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]
    save_npz_atomic(tmp_path / "c.npz", a=np.arange(3))
    assert np.load(tmp_path / "c.npz")["a"].tolist() == [0, 1, 2]


def test_cli_prints_one_line_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    """A training job whose result cannot be written: one line on stderr, no traceback."""
    from repens import cli

    _disk_full_after_one_chunk(monkeypatch)
    monkeypatch.setattr(atomic, "_CHUNK", 64)
    job = {
        "experiment": "synthetic",
        "dataset": "gaussian",
        "method": "svgd",
        "rule": "svgd",
        "seed": 0,
        "particles": 10,
        "init_std": 1.0,
        "steps": 2,
        "lr": 0.05,
    }
    out = tmp_path / "particles.npz"
    code = cli.main(["train", "--spec", json.dumps(job), "--out", str(out)])
    assert code != 0
    err = capsys.readouterr().err
    # the first write is the final step's checkpoint (<out>.ckpt), then the result: either is named
    lines = [line for line in err.splitlines() if line.startswith(f"error: cannot write {out}")]
    assert len(lines) == 1 and lines[0].endswith(f": {os.strerror(errno.ENOSPC)}"), err
    assert lines[0] in (f"error: cannot write {p}: {os.strerror(errno.ENOSPC)}" for p in (out, f"{out}.ckpt"))
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_unwritable_place_is_named(tmp_path, kind):
    """A folder that cannot be made (a file is in the way): works as root too."""
    (tmp_path / "blocker").write_text("a file")
    target = tmp_path / "blocker" / "sub" / "result.bin"
    with pytest.raises(WriteError) as err:
        WRITERS[kind](target)
    assert str(err.value).startswith(f"cannot write {target}: ") and "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]
