"""Tables and figures built from the training jobs' result files.

Submodules are imported on demand (``repens.report.synthetic``: Figure 2,
Figure F.1 and the synthetic metrics table).
"""
