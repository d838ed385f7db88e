"""Table 1 metrics on cases computed by hand."""

import math

import pytest
import torch

from repens.evaluation import (
    accuracy,
    classification_metrics,
    ensemble_summary,
    entropy,
    expected_calibration_error,
    mean_nll,
    ood_auroc,
)


def test_model_disagreement_two_members():
    # member 1 says class 0, member 2 class 1 (certain): mean (0.5, 0.5); each member
    # deviates by 0.5 in both classes -> MD^2 = 0.25, MD = 0.5. Agreeing members: MD 0.
    probs = torch.tensor([[[1.0, 0.0], [0.7, 0.3]], [[0.0, 1.0], [0.7, 0.3]]])
    mean, md = ensemble_summary(probs)
    torch.testing.assert_close(mean, torch.tensor([[0.5, 0.5], [0.7, 0.3]]))
    torch.testing.assert_close(md, torch.tensor([0.5, 0.0]))
    # unequal: p1 = (0.9, 0.1), p2 = (0.5, 0.5): mean 0.7, deviations 0.2 -> MD^2 = 0.04
    _, md = ensemble_summary(torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]]))
    assert float(md) == pytest.approx(0.2)


def test_entropy_accuracy_nll():
    probs = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])
    torch.testing.assert_close(entropy(probs)[:2], torch.tensor([math.log(2), 0.0]))
    labels = torch.tensor([0, 0, 0])
    assert accuracy(probs, labels) == pytest.approx(2 / 3)  # argmax ties go to class 0
    assert mean_nll(probs, labels) == pytest.approx((math.log(2) + 0 - math.log(0.2)) / 3)


def test_ece_by_hand():
    # confidences 0.9, 0.9, 0.6, 0.6 (bins (0.867,0.933] and (0.533,0.6]);
    # bin A: acc 1/2 vs conf 0.9 -> |0.5-0.9| * 2/4 = 0.2; bin B: acc 1 vs 0.6 -> 0.4 * 2/4 = 0.2
    probs = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.4, 0.6], [0.4, 0.6]])
    labels = torch.tensor([0, 1, 1, 1])
    assert expected_calibration_error(probs, labels) == pytest.approx(0.4, abs=1e-6)
    # perfectly calibrated within each bin -> 0
    probs = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    assert expected_calibration_error(probs, torch.tensor([0, 1])) == pytest.approx(0.0, abs=1e-6)


def test_auroc_by_hand():
    # OOD scores above test scores in 3 of the 4 pairs
    assert ood_auroc(torch.tensor([0.1, 0.4]), torch.tensor([0.35, 0.8])) == pytest.approx(0.75)
    assert ood_auroc([0.0, 0.1], [0.5, 0.6]) == pytest.approx(1.0)


def test_classification_metrics_ratios():
    test = torch.tensor([[[0.9, 0.1]], [[0.9, 0.1]]])  # members agree, confident
    ood = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # disagree
    tp, tmd = ensemble_summary(test)
    op, omd = ensemble_summary(ood)
    m = classification_metrics(tp, tmd + 0.1, torch.tensor([0]), op, omd)
    h_test = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert m["entropy_ratio"] == pytest.approx(math.log(2) / h_test)
    assert m["md_ratio"] == pytest.approx(0.5 / 0.1)
    assert m["auroc_entropy"] == 1.0 and m["accuracy"] == 1.0
