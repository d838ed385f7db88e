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

Reported beside them (``metrics.json`` and the Table 1 CSV, not the paper's LaTeX columns),
as torch-uncertainty and uncertainty-baselines do by default:

* AUPR(H), AUPR(MD): area under the precision-recall curve of the same detection, OOD
  positive ("AUPR-Out"; scikit-learn's ``average_precision_score``, the step-wise area);
* FPR95(H), FPR95(MD): the fraction of test inputs flagged as OOD at the smallest
  threshold that flags 95 % of the OOD inputs (scikit-learn's ``roc_curve``);
* Brier score on the test set: ``mean_x sum_c (p(c|x) - [c = y])^2`` (0 best, 2 worst);
* mutual information ``I(y; w | x) = H[p(y|x)] - 1/n sum_i H[p(y|x, w_i)]`` (the
  epistemic part of the predictive entropy), mean on test and on OOD inputs, their ratio
  and the AUROC of detecting OOD by it.

Reported beside them as ``*_code``, three of Table 1's metrics (NLL, ECE, MD) as the authors' released code
computes them (``training/training_mnist_hyper.py`` of ratschlab/repulsive_ensembles),
where it departs from the paper's text:

* ``nll_code``: ``-log(mean_x p(y|x))``, the log of the test-set *mean* probability of the
  true class, where the usual NLL is the mean of the logs (``nll``). By Jensen's
  inequality ``nll_code <= nll``;
* ``ece_code``: ECE with 30 bins (``uncertainty_metrics.numpy.ece(..., num_bins=30)``);
* ``md_ratio_code``, ``auroc_md_code``: the model disagreement as the members' standard
  deviation (``n - 1`` in the denominator) of ``p(y|x, w)``, averaged over the classes,
  where ``md`` is the square root of the class-averaged variance (Eq. 23).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ensemble_summary",
    "entropy",
    "accuracy",
    "mean_nll",
    "expected_calibration_error",
    "ood_auroc",
    "ood_aupr",
    "fpr_at_tpr",
    "brier_score",
    "mutual_information",
    "classification_metrics",
    "ECE_BINS",
    "CODE_ECE_BINS",
    "member_std",
    "nll_of_mean",
]

ECE_BINS = 15
CODE_ECE_BINS = 30


def ensemble_summary(member_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Predictive probabilities (N, C) and model disagreement MD (N,) of member
    probabilities (n, N, C) (Eq. 23, with E_y uniform over the C classes)."""
    mean = member_probs.mean(0)
    md2 = (member_probs - mean).pow(2).mean(0).mean(-1)
    return mean, md2.sqrt()


def member_std(member_probs: Tensor) -> Tensor:
    """The released code's model disagreement, (N,): the members' standard deviation
    (``n - 1`` in the denominator) of ``p(y|x, w)``, averaged over the classes."""
    if member_probs.shape[0] < 2:  # one member: no spread (the n - 1 sd is undefined)
        return member_probs.new_zeros(member_probs.shape[1:-1])
    return member_probs.std(0).mean(-1)


def entropy(probs: Tensor) -> Tensor:
    """Predictive entropy (nats), Eq. 21, per row of (N, C) probabilities."""
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


def accuracy(probs: Tensor, labels: Tensor) -> float:
    return float((probs.argmax(-1) == labels).double().mean())


def _true_class(probs: Tensor, labels: Tensor) -> Tensor:
    """``p(y|x)`` of each input's true label, (N,), from (N, C) probabilities."""
    return probs.gather(-1, labels.long().view(-1, 1)).squeeze(-1)


def mean_nll(probs: Tensor, labels: Tensor) -> float:
    """Mean ``-log p(y|x)`` of the true labels (probabilities floored at 1e-12)."""
    return float(-_true_class(probs, labels).double().clamp_min(1e-12).log().mean())


def nll_of_mean(probs: Tensor, labels: Tensor) -> float:
    """``-log`` of the mean probability of the true labels: the released code's "NLL"
    (``-torch.log((y * p).max(1)[0].mean(0))``), not the mean NLL."""
    return float(-_true_class(probs, labels).double().mean().log())


def expected_calibration_error(probs: Tensor, labels: Tensor, bins: int = ECE_BINS) -> float:
    """Top-label ECE with ``bins`` equal-width confidence bins (torchmetrics, L1 norm)."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    return float(
        multiclass_calibration_error(probs.float(), labels.long(), num_classes=probs.shape[-1], n_bins=bins, norm="l1")
    )


def ood_auroc(score_in: Tensor | np.ndarray, score_out: Tensor | np.ndarray) -> float:
    """Area under the ROC curve separating OOD (positive) from test inputs by ``score``."""
    from sklearn.metrics import roc_auc_score

    labels, scores = _labelled(score_in, score_out)
    return float(roc_auc_score(labels, scores))


def _labelled(score_in: Tensor | np.ndarray, score_out: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s_in, s_out = np.asarray(score_in, dtype=np.float64), np.asarray(score_out, dtype=np.float64)
    return np.concatenate([np.zeros(s_in.size), np.ones(s_out.size)]), np.concatenate([s_in, s_out])


def ood_aupr(score_in: Tensor | np.ndarray, score_out: Tensor | np.ndarray) -> float:
    """Area under the precision-recall curve of detecting OOD (positive) inputs by
    ``score`` (scikit-learn's ``average_precision_score``)."""
    from sklearn.metrics import average_precision_score

    labels, scores = _labelled(score_in, score_out)
    return float(average_precision_score(labels, scores))


def fpr_at_tpr(score_in: Tensor | np.ndarray, score_out: Tensor | np.ndarray, tpr: float = 0.95) -> float:
    """False-positive rate (test inputs flagged as OOD) at the first ROC point whose
    true-positive rate (OOD inputs flagged) reaches ``tpr`` (scikit-learn's ``roc_curve``)."""
    from sklearn.metrics import roc_curve

    labels, scores = _labelled(score_in, score_out)
    fpr, tprs, _ = roc_curve(labels, scores, drop_intermediate=False)
    return float(fpr[int(np.searchsorted(tprs, tpr - 1e-12, side="left"))])


def brier_score(probs: Tensor, labels: Tensor) -> float:
    """Multi-class Brier score ``mean_x sum_c (p(c|x) - [c = y])^2``."""
    onehot = torch.nn.functional.one_hot(labels.long(), probs.shape[-1]).to(torch.float64)
    return float((probs.double() - onehot).pow(2).sum(-1).mean())


def mutual_information(member_probs: Tensor) -> Tensor:
    """Mutual information between label and particle (nats), per input, of member
    probabilities (n, N, C): entropy of the mean minus the members' mean entropy (>= 0)."""
    return (entropy(member_probs.mean(0)) - entropy(member_probs).mean(0)).clamp_min(0.0)


def classification_metrics(
    test_probs: Tensor,
    test_md: Tensor,
    test_labels: Tensor,
    ood_probs: Tensor,
    ood_md: Tensor,
    test_mi: Tensor | None = None,
    ood_mi: Tensor | None = None,
    test_std: Tensor | None = None,
    ood_std: Tensor | None = None,
) -> dict[str, float]:
    """Every Table 1 metric (accuracy as a fraction), the raw means behind the ratios, and
    AUPR, FPR95, Brier score, (given the per-input mutual information) its means, and
    the ``*_code`` metrics (the MD ones given the members' :func:`member_std`)."""
    h_test, h_ood = entropy(test_probs), entropy(ood_probs)
    extra: dict[str, float] = {}
    if test_std is not None and ood_std is not None:
        extra["md_ratio_code"] = float(ood_std.mean() / test_std.mean())
        extra["auroc_md_code"] = ood_auroc(test_std, ood_std)
    if test_mi is not None and ood_mi is not None:
        extra |= {
            "mi_test": float(test_mi.mean()),
            "mi_ood": float(ood_mi.mean()),
            "mi_ratio": float(ood_mi.mean() / test_mi.mean()) if float(test_mi.mean()) > 0 else float("nan"),
            "auroc_mi": ood_auroc(test_mi, ood_mi),
        }
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
        "aupr_entropy": ood_aupr(h_test, h_ood),
        "aupr_md": ood_aupr(test_md, ood_md),
        "fpr95_entropy": fpr_at_tpr(h_test, h_ood),
        "fpr95_md": fpr_at_tpr(test_md, ood_md),
        "brier": brier_score(test_probs, test_labels),
        "nll_code": nll_of_mean(test_probs, test_labels),
        "ece_code": expected_calibration_error(test_probs, test_labels, CODE_ECE_BINS),
        **extra,
    }
