"""Saving the report figures: PNG and PDF written atomically, the PDF without a creation date."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repens.core.atomic import save_figure_atomic

__all__ = ["save_figure", "save_png_pdf"]


def save_figure(fig, path: Path | str, fmt: str, **kwargs: Any) -> None:
    """``fig`` written atomically to ``path`` in format ``fmt`` (``savefig`` keywords pass on)."""
    save_figure_atomic(fig, Path(path), format=fmt, **kwargs)


def save_png_pdf(fig, out_png: Path | str, out_pdf: Path | str) -> None:
    """The figure as a 150 dpi PNG and a PDF without a creation date, both written atomically."""
    save_figure(fig, Path(out_png), "png", dpi=150)
    save_figure(fig, Path(out_pdf), "pdf", metadata={"CreationDate": None})
