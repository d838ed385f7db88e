"""The library's examples (examples/*.py, shown in docs/library.md) run as a user runs them,
at a tiny size, and print their result; each stays under 25 lines of code."""

from __future__ import annotations

import ast
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIT = r"RMSE [\d.]+ on the data's range; spread [\d.]+ there, [\d.]+ in the gap$"
#: examples/<file> -> its tiny command line (after the script) and what its result line says
TINY = {
    "fmnist_cnn_fwgd.py": (["{fmnist}", "3", "2"], r"kde-fWGD, 2 CNNs, 3 steps: test accuracy (0|1)\.\d{3}$"),
    "regression_sge_wgd.py": (["5", "3"], "sge-WGD, 3 networks, 5 steps: " + FIT),
    "regression_drle.py": (["5", "3"], "DRLE, 3 networks, 5 steps: " + FIT),
}


def code_lines(path: Path) -> int:
    """Lines of code: not blank, not a comment, not the module's docstring."""
    source = path.read_text()
    tree = ast.parse(source)
    doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
    skip = set(range(doc.lineno, doc.end_lineno + 1)) if doc is not None else set()
    return sum(
        1
        for number, line in enumerate(source.splitlines(), 1)
        if number not in skip and line.strip() and not line.strip().startswith("#")
    )


def write_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as a gzipped IDX file, the format of LeCun's MNIST and of FashionMNIST."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


@pytest.fixture
def fmnist(tmp_path) -> Path:
    """A FashionMNIST ``raw`` folder of 64 training and 32 test images (random pixels)."""
    rng = np.random.default_rng(0)
    for prefix, rows in (("train", 64), ("t10k", 32)):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (rows, 28, 28)))
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, rows))
    return tmp_path


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(TINY)


@pytest.mark.parametrize("name", sorted(TINY))
def test_an_example_is_short(name):
    assert code_lines(EXAMPLES / name) < 25, name


@pytest.mark.parametrize("name", sorted(TINY))
def test_an_example_runs_and_prints_its_result(name, fmnist):
    args, result = TINY[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *(a.format(fmnist=fmnist) for a in args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(result, proc.stdout.strip().splitlines()[-1]), proc.stdout


def test_the_code_line_count_leaves_out_the_docstring_comments_and_blank_lines(tmp_path):
    script = tmp_path / "s.py"
    script.write_text('"""Doc.\n\nMore.\n"""\n\n# a comment\nimport sys\n\nprint(sys.argv)  # trailing\n')
    assert code_lines(script) == 2
