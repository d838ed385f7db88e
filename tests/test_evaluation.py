"""Table 1 metrics on cases computed by hand."""

import math

import numpy as np
import pytest
import torch

from repens.evaluation.predictive import (
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


def test_aupr_by_hand():
    from repens.evaluation.predictive import ood_aupr

    # ranked by score: 0.8 (OOD), 0.4 (test), 0.35 (OOD), 0.1 (test): precision at the two
    # recalls 1/2 and 1 is 1 and 2/3 -> AP = 1/2 * 1 + 1/2 * 2/3 = 5/6
    assert ood_aupr(torch.tensor([0.1, 0.4]), torch.tensor([0.35, 0.8])) == pytest.approx(5 / 6)
    assert ood_aupr([0.0, 0.1], [0.5, 0.6]) == pytest.approx(1.0)
    # all scores tied: precision is the OOD fraction everywhere
    assert ood_aupr([1.0, 1.0, 1.0], [1.0]) == pytest.approx(0.25)


def test_fpr_at_95_tpr_by_hand():
    from repens.evaluation.predictive import fpr_at_tpr

    # 20 OOD scores 1..20, test scores 0.5, 1.5, 2.5, 3.5: flagging 19 of 20 OOD (95 %) needs
    # threshold 2, which flags the test inputs 2.5 and 3.5 -> FPR 1/2
    ood = np.arange(1.0, 21.0)
    assert fpr_at_tpr([0.5, 1.5, 2.5, 3.5], ood) == pytest.approx(0.5)
    # separable -> 0; every test input above every OOD input -> 1
    assert fpr_at_tpr([0.0, 0.1], [0.5, 0.6]) == 0.0
    assert fpr_at_tpr([5.0, 6.0], [0.5, 0.6]) == 1.0


def test_brier_by_hand():
    from repens.evaluation.predictive import brier_score

    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.2, 0.8]])
    labels = torch.tensor([0, 0, 0])
    # 0, 0.25 + 0.25, 0.64 + 0.64 -> mean 1.78 / 3
    assert brier_score(probs, labels) == pytest.approx(1.78 / 3)
    assert brier_score(torch.tensor([[0.0, 1.0]]), torch.tensor([0])) == pytest.approx(2.0)


def test_mutual_information_by_hand():
    from repens.evaluation.predictive import mutual_information

    # two certain members that disagree: H(mean) = log 2, members' entropies 0 -> MI = log 2;
    # agreeing members: MI 0 whatever their entropy
    probs = torch.tensor([[[1.0, 0.0], [0.7, 0.3]], [[0.0, 1.0], [0.7, 0.3]]])
    torch.testing.assert_close(mutual_information(probs), torch.tensor([math.log(2), 0.0]))


def test_classification_metrics_new_keys():
    test = torch.tensor([[[0.9, 0.1], [0.8, 0.2]], [[0.9, 0.1], [0.8, 0.2]]])  # agree
    ood = torch.tensor([[[1.0, 0.0], [0.6, 0.4]], [[0.0, 1.0], [0.4, 0.6]]])  # disagree
    tp, tmd = ensemble_summary(test)
    op, omd = ensemble_summary(ood)
    from repens.evaluation.predictive import mutual_information

    m = classification_metrics(
        tp, tmd, torch.tensor([0, 1]), op, omd, mutual_information(test), mutual_information(ood)
    )
    assert m["aupr_md"] == 1.0 and m["fpr95_md"] == 0.0 and m["auroc_mi"] == 1.0
    assert m["brier"] == pytest.approx((0.02 + 0.64 + 0.64) / 2)
    assert m["mi_test"] == pytest.approx(0.0, abs=1e-7) and m["mi_ood"] > 0
    assert "mi_test" not in classification_metrics(tp, tmd, torch.tensor([0, 1]), op, omd)


def test_code_metrics_follow_the_released_definitions():
    """nll_code is -log of the mean true-class probability (<= the mean NLL, Jensen);
    member_std is the members' unbiased sd averaged over classes."""
    from repens.evaluation.predictive import member_std, nll_of_mean

    probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], dtype=torch.float64)
    labels = torch.tensor([0, 1, 1])
    assert nll_of_mean(probs, labels) == pytest.approx(-math.log((0.9 + 0.8 + 0.4) / 3))
    assert (
        nll_of_mean(probs, labels) < classification_metrics(probs, torch.ones(3), labels, probs, torch.ones(3))["nll"]
    )
    members = torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]], [[0.1, 0.9]]], dtype=torch.float64)
    assert float(member_std(members)) == pytest.approx(0.4)  # sd of (0.9, 0.5, 0.1) with n - 1
    tp, tmd = ensemble_summary(members)
    m = classification_metrics(
        tp, tmd, torch.tensor([0]), tp, tmd, test_std=member_std(members), ood_std=2 * member_std(members)
    )
    assert m["md_ratio_code"] == pytest.approx(2.0)
    assert {"nll_code", "ece_code", "auroc_md_code"} <= m.keys()
