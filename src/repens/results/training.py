"""The progress fields of the training logs that the training-curve summary reads and its
figures draw (:mod:`repens.summaries.training_curves`, :mod:`repens.report.training_figures`)."""

from __future__ import annotations

__all__ = ["CURVES", "REPULSION"]

#: the progress fields drawn (the training loop's names) and their legend labels
CURVES = {"train_nll": "training NLL", "monitor_nll": "held-out NLL"}
#: the repulsion diagnostic's progress fields and their labels: the ratio in the space the rule
#: works in, and the same in weight space after Adam's per-coordinate scaling
#: (``repulsion_adam``, :func:`repens.methods.updates.adam_preconditioner`; logs written before it have none)
REPULSION = {"repulsion": "before Adam", "repulsion_adam": "after Adam's scaling"}
