"""Plumbing every layer may use: errors, atomic writes, the registry of names, the
environment variables read, job keys. Imports nothing else of the package."""
