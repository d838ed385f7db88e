"""Metrics of trained ensembles and distances between samples."""
