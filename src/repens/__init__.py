"""repens: repulsive deep ensembles, their relatives, and the pipeline that reproduces them.

Submodules are imported on demand; ``repens.pipeline.config`` works without torch.
"""

__version__ = "0.1.0"
