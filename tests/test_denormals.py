"""Denormal floats are flushed to zero in every thread of a repens process
(repens.core.denormals, called first by the command line)."""

import subprocess
import sys

import pytest
import torch

# In a fresh process: a parallel elementwise product over 2 threads of values that are
# denormal both as inputs and as results. Flushed (DAZ/FTZ) in every thread, the products
# are all 0; where a thread keeps denormals they are 1.5 x 2^-130, not 0.
PROBE = """
import sys, torch
{setup}
torch.set_num_threads(2)
# the denormal 2^-130 (about 7e-40) written as its bits: a float conversion would flush it
x = torch.full((1 << 22,), 1 << 19, dtype=torch.int32).view(torch.float32)
y = x * 1.5
print(int((y != 0).sum()))
"""

START = """
from repens.cli import _parser, _start
_start(_parser().parse_args(["--threads", "2", "train", "--spec", "{}", "--out", "x.json"]))
"""


def _probe(setup: str) -> int:
    """How many of the products kept a denormal value (not flushed to 0)."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_the_command_line_flushes_denormals_in_every_thread():
    if torch.set_flush_denormal(False) is False:
        pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal)")
    assert _probe("") == 1 << 22  # the control: torch keeps denormals by default
    assert _probe(START) == 0
    assert _probe(START.replace('"train", "--spec", "{}", "--out", "x.json"', '"where", "t.csv"')) == 1 << 22
    # set after the threads exist, only the calling thread flushes: why _start sets it first
    late = "torch.set_num_threads(2); (torch.ones(1 << 22) * 2).sum(); torch.set_flush_denormal(True)"
    assert 0 < _probe(late) < 1 << 22  # the worker's share kept, the main thread's flushed
