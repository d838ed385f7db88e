"""Errors about data files (:mod:`repens.core.errors`, re-exported here for the data loaders)."""

from __future__ import annotations

from repens.core.errors import DataError, DataFileError, one_line

__all__ = ["DataError", "DataFileError", "one_line"]
