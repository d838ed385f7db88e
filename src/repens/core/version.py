"""The package's version (pyproject.toml's), for the provenance of every result."""

__version__ = "0.1.0"
