"""repens.summaries.converged: verdicts on hand-made histories and on committed reference runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from repens.summaries import converged as cv

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference"

TOTAL = 50000
EVERY = 2500


def _curve(kind: str, n: int = TOTAL // EVERY) -> list[float]:
    """train / monitor NLL over n logged points: flat, steep, degrading."""
    out = []
    for i in range(1, n + 1):
        t = i / n
        wiggle = 0.002 * (-1) ** i
        if kind == "flat":
            out.append(0.30 + 0.2 * math.exp(-30 * t) + wiggle)
        elif kind == "steep":
            out.append(1.0 - 0.6 * t + wiggle)
        elif kind == "degrade":
            out.append(0.30 + wiggle if t < 0.6 else 0.30 + 1.0 * (t - 0.6) + wiggle)
        else:
            raise ValueError(kind)
    return out


def _image_log(path: Path, kind: str) -> None:
    lines = ['2026-01-01 00:00:00,000 repens.image INFO job {"method": "x"}']
    nll = _curve(kind)
    for i, v in enumerate(nll, start=1):
        acc = 0.9 - 0.2 * (v - 0.3)
        lines.append(
            f"2026-01-01 00:00:{i:02d},000 repens.train INFO step {i * EVERY}/{TOTAL}  9.8 steps/s  ETA 0s  "
            f"train_nll={v - 0.1:.4g} train_acc={acc + 0.05:.3g} monitor_nll={v:.4g} monitor_acc={acc:.3g}"
        )
    path.write_text("\n".join(lines) + "\n")


def _image_run(tmp_path: Path, kind: str | None) -> Path:
    run = tmp_path / "results" / "image" / "fashionmnist" / "m" / "seed1"
    run.mkdir(parents=True)
    rel = "logs/image/fashionmnist/m/seed1.log"
    (run / "metrics.json").write_text(
        json.dumps({"job": {"method": "m"}, "metrics": {"nll": 0.3}, "provenance": {"log": rel}})
    )
    if kind is not None:
        log = tmp_path / rel
        log.parent.mkdir(parents=True)
        _image_log(log, kind)
    return run / "metrics.json"


def test_flat_history_converged(tmp_path):
    v = cv.check_image_run(_image_run(tmp_path, "flat"))
    assert v.converged is True, v.reason
    assert "monitor_nll" in v.reason and "seed1.log" in v.reason


def test_steep_history_not_converged(tmp_path):
    v = cv.check_image_run(_image_run(tmp_path, "steep"))
    assert v.converged is False
    assert "monitor_nll" in v.reason and "drift" in v.reason


def test_late_degradation_not_converged(tmp_path):
    v = cv.check_image_run(_image_run(tmp_path, "degrade"))
    assert v.converged is False
    assert "late degradation" in v.reason


def test_missing_history_unknown(tmp_path):
    v = cv.check_image_run(_image_run(tmp_path, None))
    assert v.converged is None
    assert "no history" in v.reason and "not found" in v.reason
    assert cv.check_image_run(tmp_path / "nowhere" / "metrics.json").converged is None


def test_history_in_metrics_preferred(tmp_path):
    path = _image_run(tmp_path, "steep")  # the log says steep, metrics.json's own history is flat
    data = json.loads(path.read_text())
    data["history"] = [
        {"step": (i + 1) * EVERY, "total": TOTAL, "train_nll": v - 0.1, "monitor_nll": v, "monitor_acc": 0.9}
        for i, v in enumerate(_curve("flat"))
    ]
    path.write_text(json.dumps(data))
    v = cv.check_image_run(path)
    assert v.converged is True and "history in metrics.json" in v.reason


def test_too_few_points_unknown():
    s = cv.Series("monitor_nll", (25000, 50000), (0.4, 0.3), 50000)
    assert cv.stability(s)["ok"] is None


def test_unfinished_history_unknown():
    s = cv.Series("monitor_nll", (1000, 2000, 3000, 4000), (0.4, 0.4, 0.4, 0.4), 50000)
    assert cv.stability(s)["ok"] is None


def test_stability_noise_gate():
    # a drift of 2 % buried in +-5 % noise is not resolved: stable
    vals = tuple(0.3 + 0.015 * (-1) ** i - 0.0003 * i for i in range(20))
    s = cv.Series("x", tuple(range(2500, 50001, 2500)), vals, 50000)
    assert cv.stability(s)["ok"] is True


def _uci_run(
    tmp_path: Path, method: str, final: float, slope: float = 0.0, noise_std: float = 0.25, n_train: int = 455
) -> Path:
    run = tmp_path / "results" / "uci" / "boston" / method / "seed42"
    run.mkdir(parents=True)
    rel = f"logs/uci/boston/{method}/seed42.log"
    (run / "metrics.json").write_text(
        json.dumps(
            {
                "job": {"method": method, "noise_std": noise_std},
                "splits": [{"split": k, "n_train": n_train} for k in range(3)],
                "provenance": {"log": rel},
            }
        )
    )
    log = tmp_path / rel
    log.parent.mkdir(parents=True)
    total, every = 24000, 1200
    lines = []
    for i in range(1, total // every + 1):
        v = final + slope * (total - i * every) / total
        lines.append(
            f"x repens.train INFO step {i * every}/{total}  263.5 steps/s  ETA 0s  train_rmse_std_units_mean={v:.4g}"
        )
    log.write_text("\n".join(lines) + "\n")
    return run / "metrics.json"


def test_uci_fit_and_stability(tmp_path):
    de = _uci_run(tmp_path, "de", 0.15)
    assert cv.check_uci_run(de).converged is True
    good = cv.check_uci_run(_uci_run(tmp_path, "svgd", 0.14))
    assert good.converged is True and "bound" in good.reason
    under = cv.check_uci_run(_uci_run(tmp_path, "dle", 0.47))
    assert under.converged is False and "under-fit" in under.reason
    falling = cv.check_uci_run(_uci_run(tmp_path, "fsvgd", 0.10, slope=0.5))
    assert falling.converged is False and "drift" in falling.reason


def test_a_burn_in_is_not_judged_only_the_run_after_it(tmp_path):
    """A deep-ensemble burn-in still falling at its end, then the rule's run, flat and fitted:
    converged, judged on the run after the burn-in (two segments, the first one left out)."""
    de = _uci_run(tmp_path, "de", 0.15)
    run = _uci_run(tmp_path, "dle-burnin", 0.15)
    log = tmp_path / "logs/uci/boston/dle-burnin/seed42.log"
    falling = [
        f"x repens.train INFO step {i * 1200}/12000  263.5 steps/s  ETA 0s  "
        f"train_rmse_std_units_mean={0.15 + 0.5 * (10 - i) / 10 + 0.01:.4g}"
        for i in range(1, 11)
    ]
    sampler = [line.replace("/24000", "/12000") for line in log.read_text().splitlines()[:10]]
    log.write_text(
        "\n".join(
            [
                "x repens.fitting INFO burn-in: 12000 of 24000 steps as a deep ensemble (adam, lr 0.05), then langevin",
                *falling,
                "x repens.fitting INFO step size: curvature 1e+12 at the burned-in particles",
                *sampler,
            ]
        )
        + "\n"
    )
    segments = cv.parse_log(log)
    assert [s["burn_in"] for s in segments] == [True, False]
    verdict = cv.check_uci_run(run)
    assert verdict.converged is True and "burn-in, not judged" in verdict.reason
    # the same lines without the burn-in marker: the falling segment is judged and fails
    log.write_text("\n".join([*falling, *sampler]) + "\n")
    assert cv.check_uci_run(run).converged is False
    assert cv.check_uci_run(de).converged is True


def test_uci_without_de_is_unknown(tmp_path):
    v = cv.check_uci_run(_uci_run(tmp_path, "svgd", 0.14))
    assert v.converged is None and "DE" in v.reason


def test_uci_fit_bound():
    # likelihood term: sqrt(r_ref^2 + sigma^2 (1 + 2 sqrt(2/n)))
    assert cv.uci_fit_bound(0.245, 0.245, 455) == pytest.approx(math.sqrt(0.245**2 * (2 + 2 * math.sqrt(2 / 455))))
    # tiny sigma: the RMS resolution term
    assert cv.uci_fit_bound(0.02, 3e-4, 691) == pytest.approx(0.02 * (1 + 2 / math.sqrt(2 * 691)))


def test_hmc_reference_delegates(tmp_path):
    from repens.training.hmc import CONVERGED_ESS_MIN, CONVERGED_RHAT_MAX

    good = tmp_path / "good" / "diagnostics.json"
    bad = tmp_path / "bad" / "diagnostics.json"
    for p, rhat, ess in ((good, CONVERGED_RHAT_MAX - 0.005, CONVERGED_ESS_MIN + 10), (bad, 1.2, 30.0)):
        p.parent.mkdir()
        p.write_text(
            json.dumps(
                {
                    "job": {"scale": "paper"},
                    "settings": {"chains": 4},
                    "diagnostics": {"rhat_max": rhat, "ess_min": ess},
                }
            )
        )
    assert cv.check_hmc_reference(good).converged is True
    v = cv.check_hmc_reference(bad)
    assert v.converged is False and "R-hat" in v.reason
    empty = tmp_path / "diagnostics.json"
    empty.write_text("{}")
    assert cv.check_hmc_reference(empty).converged is None


@pytest.mark.skipif(
    not (REFERENCE / "image" / "fashionmnist" / "fsvgd" / "seed38" / "metrics.json").exists(),
    reason="no committed image reference",
)
def test_reference_image_runs():
    v = cv.check_image_run(REFERENCE / "image" / "fashionmnist" / "fsvgd" / "seed38" / "metrics.json")
    assert v.converged is not None and v.reason
    assert v.converged is False and "late degradation" in v.reason  # train_nll 0.16 -> 0.61
    de = cv.check_image_run(REFERENCE / "image" / "fashionmnist" / "de" / "seed38" / "metrics.json")
    assert de.converged is not None and de.reason


@pytest.mark.skipif(
    not (REFERENCE / "uci" / "boston" / "dle" / "seed42" / "metrics.json").exists(), reason="no committed UCI reference"
)
def test_reference_uci_runs():
    v = cv.check_uci_run(REFERENCE / "uci" / "boston" / "dle" / "seed42" / "metrics.json")
    assert v.converged is False and "under-fit" in v.reason
    de = cv.check_uci_run(REFERENCE / "uci" / "boston" / "de" / "seed42" / "metrics.json")
    assert de.converged is not None and de.reason


def test_check_tree_covers_reference():
    if not REFERENCE.is_dir():
        pytest.skip("no reference tree")
    rows = cv.check_tree(REFERENCE)
    assert rows and all(isinstance(v, cv.Verdict) and v.reason for _, v in rows)


def _toy_tree(tmp_path: Path, nll: list[float], rhat: float | None) -> Path:
    run = tmp_path / "results" / "toy" / "regression" / "svgd" / "seed1"
    run.mkdir(parents=True)
    (run / "predictions.npz").write_bytes(b"")
    log = tmp_path / "logs" / "toy" / "regression" / "svgd" / "seed1.log"
    log.parent.mkdir(parents=True)
    total = 100 * len(nll)
    log.write_text(
        "\n".join(
            f"x repens.train INFO step {100 * (i + 1)}/{total}  1 steps/s  ETA 0s  train_nll={v:.4g}"
            for i, v in enumerate(nll)
        )
        + "\n"
    )
    if rhat is not None:
        hmc = tmp_path / "results" / "toy" / "regression" / "hmc" / "seed1"
        hmc.mkdir(parents=True)
        (hmc / "diagnostics.json").write_text(
            json.dumps(
                {"job": {"scale": "paper"}, "settings": {}, "diagnostics": {"rhat_max": rhat, "ess_min": 1000.0}}
            )
        )
    return run / "predictions.npz"


def test_toy_run_needs_both_sides(tmp_path):
    flat = [0.5 + 0.5 * math.exp(-i) + 0.001 * (-1) ** i for i in range(20)]
    assert cv.check_toy_run(_toy_tree(tmp_path / "a", flat, 1.001)).converged is True
    v = cv.check_toy_run(_toy_tree(tmp_path / "b", flat, 1.2))
    assert v.converged is False and "HMC reference" in v.reason
    assert cv.check_toy_run(_toy_tree(tmp_path / "c", flat, None)).converged is None
    steep = [2.0 - 0.05 * i for i in range(20)]
    assert cv.check_toy_run(_toy_tree(tmp_path / "d", steep, 1.001)).converged is False
    hmc_dir = tmp_path / "a" / "results" / "toy" / "regression" / "hmc" / "seed1"
    assert cv.check_run(hmc_dir).kind == "hmc"


def test_uci_rel_tol_from_recorded_se(tmp_path):
    path = _uci_run(tmp_path, "svgd", 0.14)
    data = json.loads(path.read_text())
    data.update(rmse_mean=3.0, rmse_se=0.15)
    path.write_text(json.dumps(data))
    tol, text = cv.uci_rel_tol(path)
    assert tol == pytest.approx(0.1) and "boston" in text
    # a 3 % drift per last fifth passes at boston's 10 % but fails at the 1 % default
    _uci_run(tmp_path, "de", 0.15)
    drifting = _uci_run(tmp_path, "kde-wgd", 0.14, slope=0.0042 * 5)
    assert cv.check_uci_run(drifting).converged is True
    assert cv.check_uci_run(drifting, rel_tol=cv.REL_TOL).converged is False


# ---------------------------------------------------------------- calibration (statistical tests)
STEPS = tuple(range(EVERY, TOTAL + 1, EVERY))  # the image runs' logging: 20 points


def _settled(rng, level: float, sd: float, drift_per_window: float = 0.0) -> cv.Series:
    """A settled series (white noise about ``level``) as the image runs log it, plus a
    linear drift of ``drift_per_window`` per last 20 % of the steps."""
    import numpy as np

    values = level + sd * rng.standard_normal(len(STEPS)) + drift_per_window * np.asarray(STEPS) / (0.2 * TOTAL)
    return cv.Series("x", STEPS, tuple(float(v) for v in values), TOTAL)


def _rate(flags: list[bool]) -> tuple[float, float]:
    """Observed rate and 3 binomial standard errors of a 5 % rate over as many trials."""
    return sum(flags) / len(flags), 3 * math.sqrt(0.05 * 0.95 / len(flags))


def test_stability_false_alarm_rate_on_settled_series_is_at_most_5_percent():
    # the drift test is a two-sided 5 % test: a settled series is called moving at most
    # that often (a fixed threshold of 2 s.e. with the noise estimated from 7 degrees of
    # freedom called 7 % of them moving, outside this bound)
    import numpy as np

    rng = np.random.default_rng(20261126)
    flags = [cv.stability(_settled(rng, 0.33, 0.01), rel_tol=0)["ok"] is False for _ in range(6000)]
    rate, three_se = _rate(flags)
    assert rate <= 0.05 + three_se, rate
    fixed = [cv.stability(_settled(rng, 0.33, 0.01), rel_tol=0, k_se=2.0)["ok"] is False for _ in range(6000)]
    assert _rate(fixed)[0] > 0.05 + three_se  # the bound above can fail


def _row(rng, n: int, drift_per_window: float = 0.0) -> list[tuple[str, cv.Verdict]]:
    runs = []
    for i in range(n):
        nll = cv.stability(_settled(rng, 0.33, 0.01, drift_per_window), rel_tol=0)
        acc = cv.stability(_settled(rng, 0.89, 0.005), rel_tol=0)
        ok = nll["ok"] and acc["ok"]
        details = {"monitor_nll_stability": nll, "monitor_acc_stability": acc, "train_nll_degradation": {"ok": True}}
        runs.append((f"seed{i}", cv.Verdict(ok, "", "image", (), details)))
    return runs


def test_a_row_of_settled_runs_is_called_unconverged_at_most_5_percent_of_the_time():
    # judged run by run, a row of 5 settled runs (2 series each) would be unconverged
    # whenever any of its 10 tests fires; pooled, the row's mean is tested once per series
    import numpy as np

    rng = np.random.default_rng(7)
    rows = [_row(rng, 5) for _ in range(1500)]
    by_row = [cv.row_verdict(r).converged is False for r in rows]
    any_run = [any(v.converged is False for _, v in r) for r in rows]
    rate, three_se = _rate(by_row)
    assert rate <= 0.05 + three_se, rate
    assert _rate(any_run)[0] > 0.05 + three_se  # what the pooled verdict is for


def test_a_row_whose_runs_all_drift_is_called_unconverged():
    import numpy as np

    rng = np.random.default_rng(11)
    # each run's drift se is about 1.3 x its noise sd (0.01); 0.02 per run is 1.5 s.e. alone
    flags = [cv.row_verdict(_row(rng, 5, drift_per_window=0.02)).converged is False for _ in range(300)]
    assert sum(flags) / len(flags) > 0.8


def test_a_late_degradation_in_one_run_fails_the_row():
    import numpy as np

    rng = np.random.default_rng(3)
    runs = _row(rng, 3)
    label, v = runs[1]
    runs[1] = (
        label,
        cv.Verdict(False, "", "image", (), {**v.details, "train_nll_degradation": {"ok": False, "text": "rose"}}),
    )
    row = cv.row_verdict(runs)
    assert row.converged is False and "seed1: late degradation" in row.reason


def test_a_row_with_an_unknown_run_is_unknown_and_other_rows_need_every_run():
    import numpy as np

    rng = np.random.default_rng(5)
    runs = _row(rng, 3)
    runs.append(("seed9", cv.Verdict(None, "no log", "image")))
    assert cv.row_verdict(runs).converged is None
    uci = [("seed1", cv.Verdict(True, "ok", "uci")), ("seed2", cv.Verdict(False, "under-fit", "uci"))]
    assert cv.row_verdict(uci).converged is False and "seed2: under-fit" in cv.row_verdict(uci).reason


def test_a_sampler_whose_fit_rises_from_its_deep_ensemble_start_is_not_degraded(tmp_path):
    """A run at the deep ensemble's fit (0.14) for its first half, then spreading to 0.17 and
    flat: for a Langevin rule that is sampling, not degradation (no such test); for a rule
    that maximises, the same series is a late degradation."""
    _uci_run(tmp_path, "de", 0.15)
    for method, rule in (("drle-burnin", "langevin"), ("svgd", "svgd")):
        path = _uci_run(tmp_path, method, 0.17)
        record = json.loads(path.read_text())
        record["job"]["rule"] = rule
        path.write_text(json.dumps(record))
        log = tmp_path / f"logs/uci/boston/{method}/seed42.log"
        values = [0.14] * 10 + [0.17] * 10
        log.write_text(
            "".join(
                f"x repens.train INFO step {(i + 1) * 1200}/24000  263.5 steps/s  ETA 0s  "
                f"train_rmse_std_units_mean={v:.4g}\n"
                for i, v in enumerate(values)
            )
        )
        verdict = cv.check_uci_run(path)
        if rule == "langevin":
            assert verdict.converged is True and "late degradation" not in verdict.reason, verdict.reason
        else:
            assert verdict.converged is False and "late degradation" in verdict.reason, verdict.reason


def test_a_burned_in_sampler_is_fitted_against_its_own_burn_in_not_a_full_budget_deep_ensemble(tmp_path):
    """Tiny noise (the RMS-resolution bound, about 7 % at n = 455): DE trained for the whole
    budget reaches 0.100; the sampler's own deep-ensemble burn-in (half the budget) reached
    0.145 and the sampler sits at 0.150 after it. Against DE it would read as under-fit;
    against its own start, the reference its design gives it, it fits."""
    _uci_run(tmp_path, "de", 0.10, noise_std=3e-4)
    run = _uci_run(tmp_path, "dle-burnin", 0.15, noise_std=3e-4)
    log = tmp_path / "logs/uci/boston/dle-burnin/seed42.log"
    burn = [
        f"x repens.train INFO step {i * 1200}/12000  263.5 steps/s  ETA 0s  train_rmse_std_units_mean=0.145"
        for i in range(1, 11)
    ]
    sampler = [line.replace("/24000", "/12000") for line in log.read_text().splitlines()[:10]]
    marker = "x repens.fitting INFO burn-in: 12000 of 24000 steps as a deep ensemble (adam, lr 0.05), then langevin"
    log.write_text("\n".join([marker, *burn, *sampler]) + "\n")
    verdict = cv.check_uci_run(run)
    assert verdict.converged is True and "its own burn-in's 0.145" in verdict.reason, verdict.reason
    log.write_text("\n".join(sampler) + "\n")  # no burn-in in its log: against DE, beyond its bound
    verdict = cv.check_uci_run(run)
    assert verdict.converged is not True and "> bound" in verdict.reason and "DE 0.1" in verdict.reason


def test_a_regularised_fit_beyond_the_rms_resolution_is_not_called_under_fit(tmp_path):
    """Tiny noise (yacht's): the bound is DE's fit plus the RMS's resolution (about 7 %); an
    ensemble with a prior at 1.2x DE's fit is not judged on fit (stable, so not 'under-fit');
    at boston's noise (0.25) the same check still calls a fit far beyond the bound under-fit."""
    _uci_run(tmp_path / "tiny", "de", 0.10, noise_std=3e-4)
    regularised = cv.check_uci_run(_uci_run(tmp_path / "tiny", "anchored", 0.12, noise_std=3e-4))
    assert regularised.converged is None and "fit not judged" in regularised.reason, regularised.reason
    assert "under-fit" not in regularised.reason
    _uci_run(tmp_path / "noisy", "de", 0.15)
    under = cv.check_uci_run(_uci_run(tmp_path / "noisy", "dle", 0.47))
    assert under.converged is False and "under-fit" in under.reason


def _step_line(step: int, nll: float) -> str:
    return (
        f"2026-01-01 00:00:00,000 repens.train INFO step {step}/{TOTAL}  9.8 steps/s  ETA 0s  "
        f"train_nll={nll:.4g} train_acc=0.9 monitor_nll={nll + 0.1:.4g} monitor_acc=0.88"
    )


def _resumed_line(step: int) -> str:
    return f"2026-01-01 01:00:00,000 repens.train INFO resumed from x.ckpt at step {step}/{TOTAL}"


def test_a_resumed_run_is_judged_on_every_attempt_where_its_attempts_log_is_kept(tmp_path):
    # fits to 0.1 by step 10,000, degrades to 0.8 by step 25,000, then flat: the last attempt
    # (resumed at 27,000) sees only the flat part
    steps = range(EVERY, TOTAL + 1, EVERY)
    nll = {s: 0.5 - 0.4 * s / 10000 if s <= 10000 else min(0.8, 0.1 + 0.7 * (s - 10000) / 15000) for s in steps}
    nll = {s: v + 0.002 * (-1) ** (s // EVERY) for s, v in nll.items()}
    metrics = _image_run(tmp_path, None)
    log = tmp_path / "logs/image/fashionmnist/m/seed1.log"
    log.parent.mkdir(parents=True)
    job = '2026-01-01 00:00:00,000 repens.image INFO job {"method": "m"}'
    last = [job, _resumed_line(27000)] + [_step_line(s, v) for s, v in nll.items() if s > 27000]
    log.write_text("\n".join(last) + "\n")
    alone = cv.check_image_run(metrics)
    assert alone.converged is True and "log resumed at step 27000" in alone.reason, alone.reason

    first = [job] + [_step_line(s, v) for s, v in nll.items() if s <= 27500]  # logged past its checkpoint
    (log.parent / "seed1.attempts.log").write_text("\n".join(first + last) + "\n")
    whole = cv.check_image_run(metrics)
    assert whole.converged is False and "late degradation" in whole.reason, whole.reason
    assert "seed1.attempts.log" in whole.reason and "log resumed" not in whole.reason


def test_the_last_run_takes_over_repeated_steps_from_its_resume_and_skips_a_search_before_it():
    search = {"total": 10000, "points": [(5000, {"a": 1.0}), (10000, {"a": 0.5})], "resumed_at": None}
    first = {"total": TOTAL, "points": [(s, {"a": float(s)}) for s in (2500, 5000, 7500)], "resumed_at": None}
    resumed = {"total": TOTAL, "points": [(s, {"a": -float(s)}) for s in (7500, 10000)], "resumed_at": 6000}
    run = cv.last_run([search, first, resumed])
    assert [p[0] for p in run["points"]] == [2500, 5000, 7500, 10000]
    assert run["points"][2][1]["a"] == -7500.0  # the resumed attempt's own value at the repeated step
    assert run["resumed_at"] is None  # its history starts at the run's beginning
    assert cv.last_run([search, resumed])["resumed_at"] == 6000  # the attempts before it are lost
    assert cv.last_run([first, search])["points"] == search["points"]
