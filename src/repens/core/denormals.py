"""Denormal floats flushed to zero on the CPU, for every repens process.

A float32 below 1.2e-38 in magnitude (a denormal) is computed in microcode on x86 CPUs,
tens to hundreds of times slower than a normal number. Training produces them: weights
that only the prior's decay pulls on (the first layer's weights of the always-blank
FashionMNIST border pixels) shrink geometrically, and after 40,000 steps 4.3 % of a
hyper-deep ensemble's weights and 4.2 % of Adam's first moments were denormal. Every
product with them then runs slowly: one 512 x 4096 x 512 GEMM with denormal operands took
2,275 ms against 11.4 ms, and that hyper-DE job's step ran at 2.1 steps/s against 14.4
with them flushed (``docs/engine.md``, "Denormals"). Flushing (FTZ: results that would be
denormal are 0; DAZ: denormal inputs are read as 0) changes only values below 1.2e-38.

The flags live in each thread's MXCSR register, and a new thread copies its creator's:
set before torch starts its worker threads (its first parallel operation), they hold in
every thread; set later, only in the calling one. :func:`flush_denormals` is the first
thing the command line does for a command that trains or samples (:func:`repens.cli._start`).
"""

from __future__ import annotations

__all__ = ["flush_denormals"]


def flush_denormals() -> bool:
    """Flush denormal floats to zero on the CPU (FTZ and DAZ) in this thread and in the
    threads it creates from now on. Returns False where the CPU cannot (torch's
    ``set_flush_denormal``: x86 with SSE3, and ARM)."""
    import torch

    return bool(torch.set_flush_denormal(True))
