"""Metrics of an ensemble classifier on test and out-of-distribution (OOD) inputs (Table 1).

The ensemble's predictive is the Bayesian model average ``p(y|x) = 1/n sum_i p(y|x, w_i)``.
Reported, as in Sec. 5 and Appendix B of D'Angelo & Fortuin (2021):

* accuracy, mean NLL ``-log p(y|x)`` and ECE (15 equal-width bins of the top-label
  confidence, L1; torchmetrics) on the test set;
* ``H_o/H_t``: mean predictive entropy (Eq. 21) on OOD over test inputs;
* ``MD_o/MD_t``: the same for the model disagreement, ``MD(x) = sqrt(MD^2(x))`` with
  ``MD^2(x)`` of Eq. 23: the members' variance of ``p(y|x, w)`` averaged over the classes;
* AUROC(H), AUROC(MD): OOD detection (OOD is the positive class, larger score = more
  OOD; scikit-learn's ``roc_auc_score``).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

__all__ = [
    "ensemble_summary",
    "entropy",
    "accuracy",
    "mean_nll",
    "expected_calibration_error",
    "ood_auroc",
    "classification_metrics",
    "ECE_BINS",
]

ECE_BINS = 15


def ensemble_summary(member_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Predictive probabilities (N, C) and model disagreement MD (N,) of member
    probabilities (n, N, C) (Eq. 23, with E_y uniform over the C classes)."""
    mean = member_probs.mean(0)
    md2 = (member_probs - mean).pow(2).mean(0).mean(-1)
    return mean, md2.sqrt()


def entropy(probs: Tensor) -> Tensor:
    """Predictive entropy (nats), Eq. 21, per row of (N, C) probabilities."""
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


def accuracy(probs: Tensor, labels: Tensor) -> float:
    return float((probs.argmax(-1) == labels).double().mean())


def mean_nll(probs: Tensor, labels: Tensor) -> float:
    """Mean ``-log p(y|x)`` of the true labels (probabilities floored at 1e-12)."""
    p = probs.gather(-1, labels.long().view(-1, 1)).squeeze(-1)
    return float(-p.double().clamp_min(1e-12).log().mean())


def expected_calibration_error(probs: Tensor, labels: Tensor, bins: int = ECE_BINS) -> float:
    """Top-label ECE with ``bins`` equal-width confidence bins (torchmetrics, L1 norm)."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    return float(multiclass_calibration_error(probs.float(), labels.long(), num_classes=probs.shape[-1],
                                              n_bins=bins, norm="l1"))


def ood_auroc(score_in: Tensor | np.ndarray, score_out: Tensor | np.ndarray) -> float:
    """Area under the ROC curve separating OOD (positive) from test inputs by ``score``."""
    from sklearn.metrics import roc_auc_score

    s_in, s_out = np.asarray(score_in, dtype=np.float64), np.asarray(score_out, dtype=np.float64)
    labels = np.concatenate([np.zeros(s_in.size), np.ones(s_out.size)])
    return float(roc_auc_score(labels, np.concatenate([s_in, s_out])))


def classification_metrics(test_probs: Tensor, test_md: Tensor, test_labels: Tensor,
                           ood_probs: Tensor, ood_md: Tensor) -> dict[str, float]:
    """Every Table 1 metric (accuracy as a fraction) plus the raw means behind the ratios."""
    h_test, h_ood = entropy(test_probs), entropy(ood_probs)
    return {
        "accuracy": accuracy(test_probs, test_labels),
        "nll": mean_nll(test_probs, test_labels),
        "ece": expected_calibration_error(test_probs, test_labels),
        "entropy_ratio": float(h_ood.mean() / h_test.mean()),
        "md_ratio": float(ood_md.mean() / test_md.mean()),
        "auroc_entropy": ood_auroc(h_test, h_ood),
        "auroc_md": ood_auroc(test_md, ood_md),
        "entropy_test": float(h_test.mean()),
        "entropy_ood": float(h_ood.mean()),
        "md_test": float(test_md.mean()),
        "md_ood": float(ood_md.mean()),
    }
