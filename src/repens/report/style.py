"""The seaborn look shared by the report figures, applied locally (never globally).

:func:`figure_style` is a context manager combining seaborn's ``axes_style`` and
``plotting_context``: the rcParams it sets are restored on exit, so importing or
calling a report function never changes the caller's matplotlib state. Figures
are built on explicit :class:`matplotlib.figure.Figure` / ``Axes`` objects (no
pyplot) inside the context and saved inside it too (some rcParams are read at
draw time).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import seaborn as sns

__all__ = ["STYLE", "CONTEXT", "FONT_SCALE", "PALETTE", "VERDICT_COLOURS", "figure_style"]

#: seaborn axes style, plotting context and font scale of every report figure.
STYLE = "ticks"
CONTEXT = "paper"
FONT_SCALE = 1.1

#: Colours from seaborn's "deep" palette: particles / predictive (blue), exact target
#: samples (red, the paper's marginal colour), predictive mean, truth and data.
_DEEP = sns.color_palette("deep")
PALETTE: dict[str, tuple[float, float, float]] = {
    "particles": _DEEP[0],
    "exact": _DEEP[3],
    "band": _DEEP[0],
    "mean": sns.dark_palette(_DEEP[0], 3)[1],
    "truth": (0.2, 0.2, 0.2),
    "data": (0.0, 0.0, 0.0),
}

#: One colour per verdict of the claim scorecard (the evidence figures, their legend).
VERDICT_COLOURS: dict[str, tuple[float, float, float]] = {
    "reproduced": _DEEP[2],
    "contradicted": _DEEP[3],
    "inconclusive": _DEEP[1],
    "too few seeds": _DEEP[4],
    "not run": (0.55, 0.55, 0.55),
}


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    """Apply the report theme (seaborn ``ticks`` style, ``paper`` context) for the block."""
    with sns.axes_style(STYLE), sns.plotting_context(CONTEXT, font_scale=FONT_SCALE):
        yield
