"""The claim scorecard (repens.report.claims): the verdict rule, claims end to end on
small result tables in the real formats, and the CLI."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import torch

from repens.cli import main
from repens.report import claim_list, evidence
from repens.report import claims as cl
from repens.report.claims import Estimate, combine, compare
from repens.summaries import convergence as conv

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "workflow" / "resources"


def est(value, se, n=5, scale="paper", label="x"):
    return Estimate(label, value, se, n, scale, source="results/t.csv")


def compare2(a, relation, b, **kw):
    """The rule's mechanics at a fixed half-width of 2 s.e. (the default, Student's t at each
    estimate's degrees of freedom, is tested apart below)."""
    return compare(a, relation, b, k=2.0, **kw)


# --------------------------------------------------------------------------- the verdict rule


def test_overlapping_error_bars_are_inconclusive():
    # [0.8, 1.2] and [0.9, 1.3] overlap at mean +- 2 s.e.
    assert compare2(est(1.0, 0.1), ">", est(1.1, 0.1)).verdict == "inconclusive"
    assert compare2(est(1.0, 0.1), "<", est(1.1, 0.1)).verdict == "inconclusive"
    # intervals that only touch ([1.25, 1.75] and [0.75, 1.25]) count as overlapping
    assert compare2(est(1.5, 0.125), ">", est(1.0, 0.125)).verdict == "inconclusive"
    # a difference of 3 s.e. each way is significant for one s.e. but not at the 2-s.e. rule
    assert compare2(est(1.3, 0.1), ">", est(1.0, 0.1)).verdict == "inconclusive"


def test_disjoint_intervals_reproduce_or_contradict_by_sign():
    a, b = est(2.0, 0.1), est(1.0, 0.1)  # [1.8, 2.2] vs [0.8, 1.2]
    assert compare2(a, ">", b).verdict == "reproduced"
    assert compare2(a, "<", b).verdict == "contradicted"
    assert compare2(b, "<", a).verdict == "reproduced"
    assert compare2(b, ">", a).verdict == "contradicted"
    # wider error bars turn the same means inconclusive
    assert compare2(est(2.0, 0.3), ">", est(1.0, 0.3)).verdict == "inconclusive"
    # k sets the half-width: at k = 1 a 3-s.e. difference is disjoint
    assert compare(est(1.3, 0.1), ">", est(1.0, 0.1), k=1.0).verdict == "reproduced"


def test_agreement_is_equivalence_within_the_margin():
    """An agreement (~) is two one-sided tests: the interval (a - b) +- 2 sqrt(se_a^2 + se_b^2)
    wholly within +-margin: reproduced; wholly outside: contradicted; else inconclusive."""
    # wide error bars around a true difference of zero: inconclusive, never "agree"
    wide = compare2(est(1.0, 0.5), "~", est(1.0, 0.5), margin=0.1)
    assert wide.verdict == "inconclusive"
    assert wide.detectable == pytest.approx(2 * math.sqrt(0.5)) and wide.undetectable
    assert "error bars wider than the margin" in wide.text()
    # a tight interval inside the margin: reproduced, though the 2-s.e. intervals of a and b are disjoint
    tight = compare2(est(1.0, 0.01), "~", est(1.05, 0.01), margin=0.1)
    assert tight.verdict == "reproduced" and tight.difference == pytest.approx(-0.05)
    assert tight.detectable == pytest.approx(2 * math.sqrt(2) * 0.01) and not tight.undetectable
    assert "(a-b -0.05 ± 0.028, margin ±0.1): reproduced" in tight.text()
    # a tight interval outside the margin, either side: contradicted
    assert compare2(est(1.0, 0.01), "~", est(1.3, 0.01), margin=0.1).verdict == "contradicted"
    assert compare2(est(1.3, 0.01), "~", est(1.0, 0.01), margin=0.1).verdict == "contradicted"
    # an interval across the margin: inconclusive (overlapping intervals no longer "agree")
    assert compare2(est(1.0, 0.03), "~", est(1.1, 0.03), margin=0.1).verdict == "inconclusive"
    # the margin is required for an agreement
    with pytest.raises(ValueError, match="margin"):
        compare2(est(1.0, 0.1), "~", est(1.0, 0.1))
    with pytest.raises(ValueError, match="relation"):
        compare2(est(1, 0.1), "!=", est(1, 0.1))


def test_not_worse_is_one_sided_equivalence():
    # a <= b: the interval of a - b wholly below +margin (default 0): reproduced
    assert compare2(est(0.5, 0.1), "<=", est(1.0, 0.1)).verdict == "reproduced"
    # a little above b within the error bars: inconclusive (no longer reproduced by overlap)
    assert compare2(est(1.1, 0.1), "<=", est(1.0, 0.1)).verdict == "inconclusive"
    assert compare2(est(1.1, 0.1), "<=", est(1.0, 0.1), margin=0.5).verdict == "reproduced"
    assert compare2(est(2.0, 0.1), "<=", est(1.0, 0.1)).verdict == "contradicted"
    assert compare2(est(0.5, 0.1), ">=", est(1.0, 0.1)).verdict == "contradicted"
    assert compare2(est(0.9, 0.1), ">=", est(1.0, 0.1)).verdict == "inconclusive"
    assert compare2(est(1.5, 0.1), ">=", est(1.0, 0.1)).verdict == "reproduced"
    # one-sided: reproducible at any error bars (by a clear margin), so never "too wide"
    below = compare2(est(0.5, 0.3), "<=", est(1.0, 0.01))
    assert below.verdict == "inconclusive" and not below.undetectable
    assert "(a-b -0.5 ± 0.6, margin +0)" in below.text()


def test_every_agreement_claim_states_its_margin():
    """The agreement claims give their margin and its reason (shown in the scorecard)."""
    agreements = {
        "anchored-matches-pearce",
        "anchored-eq11-matches-pearce",
        "anchored-approaches-gp",
        "regression-function-gap",
        "fmnist-hyperde-md",
        "langevin-no-difference",
        "gaussian-fit",
    }
    by_id = {c.id: c for c in cl.CLAIMS + cl.DIAGNOSTICS}
    for claim_id in agreements:
        assert by_id[claim_id].margin, claim_id
    # each check runs its comparisons with a margin (here, on absent tables: not run)
    for claim_id in agreements:
        for c in by_id[claim_id].check(cl.Evidence({})):
            assert c.margin is not None, (claim_id, c.text())


def test_detectable_difference_per_claim():
    ran = [
        compare2(est(1.0, 0.01), "~", est(1.0, 0.01), margin=0.1),
        compare2(est(1.0, 0.1), "~", est(1.0, 0.1), margin=0.1),
    ]
    text = cl.detectable_summary(ran)
    assert text.startswith("0.028-0.28") and "above the margin on 1 of 2 comparisons" in text
    # an ordering's detectable difference is what its rule needs: 2 (se_a + se_b)
    assert compare2(est(2.0, 0.1), ">", est(1.0, 0.2)).detectable == pytest.approx(0.6)
    assert cl.detectable_summary([compare2(est(2.0, 0.1, scale="quick"), ">", est(1.0, 0.1))]) == ""


def test_the_intervals_half_width_is_students_t_at_the_estimates_degrees_of_freedom():
    from repens.results.statistics import quantile, welch_dof

    # two-sided 95% points of Student's t (any printed table) and of the normal
    for dof, t in ((1, 12.706), (2, 4.303), (4, 2.776), (19, 2.093), (math.inf, 1.960)):
        assert quantile(dof) == pytest.approx(t, abs=5e-4)
    assert est(1.0, 0.1, n=2).k() == pytest.approx(12.706, abs=5e-4)
    assert Estimate("paper", 1.0, 0.1, 0, cl.PUBLISHED).k() == pytest.approx(1.960, abs=5e-4)
    assert Estimate.constant("1", 1.0).dof == math.inf
    # Welch-Satterthwaite: equal errors and n give 2 (n - 1); an error of infinite degrees of
    # freedom leaves the other's; both infinite: infinite
    assert welch_dof(0.1, 4, 0.1, 4) == pytest.approx(8)
    assert welch_dof(0.1, 4, 0.3, math.inf) == pytest.approx(4 * (0.01 + 0.09) ** 2 / 0.01**2)
    assert welch_dof(0.1, math.inf, 0.2, math.inf) == math.inf
    # two seeds each: a 5-s.e. gap that the 2-s.e. rule called decided is not decided
    a, b = est(1.5, 0.05, n=2), est(1.0, 0.05, n=2)
    assert compare2(a, ">", b).verdict == "reproduced" and compare(a, ">", b).verdict == "inconclusive"
    assert compare(a, ">", b).detectable == pytest.approx(2 * 12.706 * 0.05, rel=1e-4)
    # an agreement reads t at Welch's degrees of freedom: 2 + 2 seeds -> 2
    agree = compare(est(1.0, 0.01, n=2), "~", est(1.0, 0.01, n=2), margin=0.1)
    assert agree.detectable == pytest.approx(4.303 * math.sqrt(2) * 0.01, rel=1e-3)


@pytest.mark.parametrize("n", [2, 3, 5, 20])
def test_the_rules_interval_covers_a_normal_mean_95_percent_of_the_time_at_every_n(n):
    """mean +- k s.e. over n normal draws covers the true mean with probability COVERAGE;
    20,000 trials: the coverage's s.e. is sqrt(0.95 * 0.05 / 20000) = 0.0015, and 4 s.e. of
    it (0.006) is the tolerance. The fixed 2 s.e. covers only about 70% at n = 2 (t_1)."""
    g = torch.Generator().manual_seed(100 + n)
    x = torch.randn(20_000, n, generator=g, dtype=torch.float64) * 3.0 + 7.0
    mean, se = x.mean(1), x.std(1) / math.sqrt(n)
    covered = float(((mean - 7.0).abs() <= est(0.0, 1.0, n=n).k() * se).double().mean())
    assert abs(covered - cl.COVERAGE) < 0.006
    if n == 2:
        fixed = float(((mean - 7.0).abs() <= 2 * se).double().mean())
        assert abs(fixed - 0.705) < 0.006


def by_verdict(rows, verdict: str) -> list[str]:
    return [r["id"] for r in rows if r["verdict"] == verdict]


def test_diagnostics_are_apart_from_the_claims():
    """Checks of our own runs are diagnostics: not in CLAIMS, never in the claims' headline."""
    claim_ids = {c.id for c in cl.CLAIMS}
    # anchored-eq11 checks the method's description against numbers made by their code: ours
    assert {d.id for d in cl.DIAGNOSTICS} == {"drle-repulsion-acts", "anchored-eq11-matches-pearce"}
    assert not claim_ids & {d.id for d in cl.DIAGNOSTICS}
    assert all(d.diagnostic for d in cl.DIAGNOSTICS) and not any(c.diagnostic for c in cl.CLAIMS)
    rows = [
        {"id": "a", "verdict": "reproduced", "kind": "claim"},
        {"id": "b", "verdict": "contradicted", "kind": "claim"},
        {"id": "d", "verdict": "contradicted", "kind": "diagnostic"},
    ]
    assert cl.headline(rows) == "2 claims: 1 reproduced, 1 contradicted, 0 inconclusive, 0 too few seeds, 0 not run"
    md = cl.scorecard_markdown(
        [{**r, "claim": "w", "reading": "r", "source": "s", "figures": "f", "source_verdict": "n/a"} for r in rows], {}
    )
    claims_part, diag_part = md.split("## Diagnostics", 1)
    assert "2 claims: 1 reproduced, 1 contradicted" in claims_part and "**d**" not in claims_part
    assert "**d**" in diag_part.split("## Verdict rule")[0]


def test_quick_scale_and_missing_files_are_not_run_single_seeds_too_few():
    quick = compare(est(2.0, 0.1, scale="quick"), ">", est(1.0, 0.1, scale="quick"))
    assert quick.verdict == "not run" and "quick scale" in quick.reason
    # even when the figures would be decisive, one side at quick scale is not run
    assert compare(est(2.0, 0.1), ">", est(1.0, 0.1, scale="quick")).verdict == "not run"
    missing = compare(Estimate.absent("a", "results/table1.csv: missing"), ">", est(1.0, 0.1))
    assert missing.verdict == "not run" and missing.reason == "results/table1.csv: missing"
    one_seed = compare(est(2.0, math.nan, n=1), ">", est(1.0, math.nan, n=1))
    assert one_seed.verdict == cl.TOO_FEW_SEEDS and "1 seed(s), no standard error" in one_seed.reason
    # its point estimate is kept, with no interval: the figures draw it, the text says so
    assert one_seed.difference == 1.0 and math.isnan(one_seed.detectable)
    assert one_seed.text().endswith("(a-b +1, no s.e.): too few seeds")
    # one seed against a printed value: too few seeds as well
    printed = Estimate("paper", 1.0, 0.1, 0, cl.PUBLISHED)
    assert compare(est(2.0, math.nan, n=1), ">", printed).verdict == cl.TOO_FEW_SEEDS
    # one seed beside something absent, at another scale or unknown: not run, whatever the seeds
    for other in (Estimate.absent("b", "no row"), est(1.0, 0.1, scale="quick"), est(1.0, 0.1, scale=None)):
        mixed = compare(est(2.0, math.nan, n=1), ">", other)
        assert mixed.verdict == "not run" and math.isnan(mixed.difference), other
    # two seeds whose error is not a number are not a seed count problem: not run
    assert compare(est(2.0, math.nan, n=2), ">", est(1.0, 0.1)).verdict == "not run"
    # a seedless quantity at quick scale is a scale problem first
    assert compare(est(2.0, math.nan, n=1, scale="quick"), ">", est(1.0, 0.1)).verdict == "not run"
    unknown = compare(est(2.0, 0.1, scale=None), ">", est(1.0, 0.1))
    assert unknown.verdict == "not run" and "unknown scale" in unknown.reason
    # published values (their printed error, no seeds) and exact constants are usable
    published = Estimate("paper", 1.0, 0.1, 0, cl.PUBLISHED)
    assert compare(est(2.0, 0.1), ">", published).verdict == "reproduced"
    assert compare(est(0.5, 0.1), "<", Estimate.constant("1", 1.0)).verdict == "reproduced"
    assert compare(est(0.5, 0.1), "<", Estimate("paper", 1.0, math.nan, 0, cl.PUBLISHED)).verdict == "not run"


def test_combine():
    r, c, i, n = (
        compare(*args)
        for args in [
            (est(2, 0.1), ">", est(1, 0.1)),
            (est(1, 0.1), ">", est(2, 0.1)),
            (est(1, 0.1), ">", est(1, 0.1)),
            (est(2, 0.1, scale="quick"), ">", est(1, 0.1)),
        ]
    )
    assert [r.verdict, c.verdict, i.verdict, n.verdict] == ["reproduced", "contradicted", "inconclusive", "not run"]
    assert combine([r, r]) == "reproduced"
    assert combine([r, i]) == "inconclusive"
    assert combine([r, i, n]) == "not run"
    assert combine([r, i, n, c]) == "contradicted"  # a paper-scale contradiction stands
    assert combine([]) == "not run"
    f = compare(est(2, math.nan, n=1), ">", est(1, 0.1))
    assert f.verdict == cl.TOO_FEW_SEEDS
    assert combine([r, i, f]) == cl.TOO_FEW_SEEDS  # more seeds could still decide it
    assert combine([r, f, n]) == "not run"  # a missing run says more than a missing seed
    assert combine([f, c]) == "contradicted"


def test_summary_names_each_kind_of_unscored_comparison():
    r = compare(est(2, 0.1), ">", est(1, 0.1))
    f = compare(est(2, math.nan, n=1), ">", est(1, 0.1))
    n = compare(Estimate.absent("a", "results/t.csv: no x row"), ">", est(1, 0.1))
    assert cl.summary([f, f]) == "results/t.csv: x from 1 seed(s), no standard error"
    assert cl.summary([r, f]).startswith("1 of 2 comparisons too few seeds (results/t.csv: x from 1 seed(s)")
    assert cl.summary([r, f]).endswith("; 1 reproduced")
    both = cl.summary([f, n])
    assert both.startswith("2 of 2 comparisons without a verdict: 1 too few seeds, 1 not run (results/t.csv"), both


def test_registry():
    ids = [c.id for c in cl.CLAIMS]
    assert len(ids) >= 12 and len(set(ids)) == len(ids)
    for claim in cl.CLAIMS:
        assert claim.words and claim.reading and claim.source
        assert set(claim.files) <= set(cl.FILES), claim.id
        assert claim.reference in (None, "table1", "pearce", "wild")


# --------------------------------------------------------------------------- claims end to end


def _write_csv(path: Path, rows: list[dict], scale: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)), restval="")
        writer.writeheader()
        writer.writerows(rows)
    if scale is not None:  # the provenance sidecar every table command writes
        Path(str(path) + ".provenance.json").write_text(
            json.dumps({"table": str(path), "provenance": {"scale": scale}, "inputs": []})
        )
    return path


def _table1(path: Path, scale: str, accuracy: dict[str, tuple[float, float]], n: int = 5) -> Path:
    """results/table1.csv as repens.report.image writes it (tables.csv_rows)."""
    rows = [
        {
            "block": "fashionmnist",
            "method": m,
            "label": m,
            "extra": 0,
            "accuracy_mean": mean,
            "accuracy_se": se,
            "accuracy_n": n,
            "accuracy_best": 0,
        }
        for m, (mean, se) in accuracy.items()
    ]
    return _write_csv(path, rows, scale)


def _fmnist(ev, limit: bool = False):
    """fmnist-improve-accuracy (a fixed-budget claim); ``limit``: the same check as a claim
    about the methods' limit, which the convergence gate applies to."""
    from dataclasses import replace

    claim = next(c for c in cl.CLAIMS if c.id == "fmnist-improve-accuracy")
    results = cl.evaluate(ev, [replace(claim, limit=limit)])
    return results[0]


ACCURACY = {
    "de": (91.1, 0.02),
    "svgd": (91.05, 0.03),
    "kde-wgd": (91.3, 0.02),
    "sge-wgd": (91.3, 0.02),
    "ssge-wgd": (91.22, 0.02),
    "kde-fwgd": (91.25, 0.01),
    "sge-fwgd": (91.2, 0.01),
    "ssge-fwgd": (91.24, 0.02),
}


def test_table1_claim_end_to_end(tmp_path):
    files = {
        "table1": _table1(tmp_path / "table1.csv", "paper", ACCURACY),
        "table1_paper": RESOURCES / "table1_paper.csv",
    }
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == "reproduced" and len(result.comparisons) == 12
    # the same check on the paper's own Table 1: its printed ± is the population sd over 5,
    # so its s.e. is 2.5 times that (DE 0.013 -> 0.0325), read at t_4 = 2.776 and widened by the
    # printed rounding 0.0005: DE 91.122 is [91.031, 91.213], SVGD 91.134 [90.967, 91.301];
    # even sge-WGD, the highest, 91.312 +- 0.040 ([91.200, 91.424]) overlaps DE's: at 95% the
    # paper's own five seeds decide none of the twelve orderings
    assert result.source_verdict == "inconclusive"
    assert {c.verdict for c in result.source_comparisons} == {"inconclusive"}
    sge_vs_de = next(
        c for c in result.source_comparisons if c.a.label.startswith("sge-wgd") and c.b.label == "de accuracy (%)"
    )
    assert sge_vs_de.a.interval()[0] == pytest.approx(91.312 - 2.7764451 * 0.040 - 0.0005, abs=1e-6)
    assert sge_vs_de.b.interval()[1] == pytest.approx(91.122 + 2.7764451 * 0.0325 + 0.0005, abs=1e-6)
    assert "sge-wgd accuracy (%) 91.312 ± 0.04, n=5 > svgd accuracy (%) 91.134 ± 0.06, n=5: inconclusive" in cl.summary(
        result.source_comparisons
    )
    # one method's accuracy within 2 s.e. of SVGD's: inconclusive
    close = {**ACCURACY, "sge-fwgd": (91.12, 0.01)}
    files["table1"] = _table1(tmp_path / "close" / "table1.csv", "paper", close)
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == "inconclusive"
    assert "sge-fwgd accuracy (%) 91.12 ± 0.01, n=5 > svgd accuracy (%) 91.05 ± 0.03, n=5: inconclusive" in cl.summary(
        result.comparisons
    )
    # below DE beyond the error bars: contradicted
    files["table1"] = _table1(tmp_path / "low" / "table1.csv", "paper", {**ACCURACY, "sge-fwgd": (90.0, 0.01)})
    assert _fmnist(cl.Evidence(files)).verdict == "contradicted"


def test_quick_scale_table_and_missing_table_are_not_run(tmp_path):
    files = {"table1": _table1(tmp_path / "table1.csv", "quick", ACCURACY)}
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == "not run"
    assert cl.summary(result.comparisons) == f"{tmp_path / 'table1.csv'}: quick scale"
    # no sidecar: the scale is unknown, not assumed
    (tmp_path / "table1.csv.provenance.json").unlink()
    assert _fmnist(cl.Evidence(files)).verdict == "not run"
    # a table that is not there
    result = _fmnist(cl.Evidence({"table1": tmp_path / "absent.csv"}))
    assert result.verdict == "not run" and cl.summary(result.comparisons) == f"{tmp_path / 'absent.csv'}: missing"
    # a method the run did not configure
    partial = {k: v for k, v in ACCURACY.items() if k != "ssge-fwgd"}
    files = {"table1": _table1(tmp_path / "p" / "table1.csv", "paper", partial)}
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == "not run" and "no rows for ssge-fwgd (fashionmnist)" in cl.summary(result.comparisons)
    # too few seeds for a standard error
    files = {
        "table1": _table1(
            tmp_path / "one" / "table1.csv", "paper", {k: (v[0], math.nan) for k, v in ACCURACY.items()}, n=1
        )
    }
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == cl.TOO_FEW_SEEDS and "1 seed(s)" in cl.summary(result.comparisons)


def _toy(path: Path, scale: str, ratios: dict[str, list[float]]) -> Path:
    """results/toy/distance_to_hmc.csv, one row per method and seed (a scale column)."""
    rows = [
        {"method": m, "label": m, "seed": 38 + i, "scale": scale, "gap_sd_epistemic_ratio": r, "w2_gap": 0.1}
        for m, values in ratios.items()
        for i, r in enumerate(values)
    ]
    return _write_csv(path, rows)


def test_toy_claims_are_not_scored_against_an_unconverged_hmc_reference(tmp_path):
    """A paper-scale distance table whose HMC reference is not converged (hmc_converged 0,
    repens.report.toy) scores nothing: the claim is not run, saying why; a converged one
    (1), or a table from before the column existed, is scored."""
    claim = next(c for c in cl.CLAIMS if c.id == "regression-weight-gap")
    weight = {m: [0.20, 0.25, 0.30, 0.22, 0.28] for m in cl.WEIGHT_SPACE}
    rows = list(csv.DictReader(_toy(tmp_path / "a.csv", "paper", weight).open()))
    (result,) = cl.evaluate(cl.Evidence({"toy": tmp_path / "a.csv"}), [claim])
    assert result.verdict == "reproduced"  # no column: a table from before it existed
    converged = _write_csv(tmp_path / "1.csv", [{**r, "hmc_converged": "1"} for r in rows])
    (result,) = cl.evaluate(cl.Evidence({"toy": converged}), [claim])
    assert result.verdict == "reproduced"
    # one seed's reference (seed 40) not converged: every method measured against it is not scored
    one_bad = _write_csv(tmp_path / "0.csv", [{**r, "hmc_converged": "0" if r["seed"] == "40" else "1"} for r in rows])
    (result,) = cl.evaluate(cl.Evidence({"toy": one_bad}), [claim])
    assert result.verdict == "not run" and "HMC reference not converged" in cl.summary(result.comparisons)


def test_toy_claim_over_seeds(tmp_path):
    claim = next(c for c in cl.CLAIMS if c.id == "regression-weight-gap")
    weight = {m: [0.20, 0.25, 0.30, 0.22, 0.28] for m in cl.WEIGHT_SPACE}
    ev = cl.Evidence({"toy": _toy(tmp_path / "a.csv", "paper", weight)})
    (result,) = cl.evaluate(ev, [claim])
    assert result.verdict == "reproduced" and result.source_verdict == ""  # a figure only
    first = result.comparisons[0]
    assert first.a.n == 5 and first.a.value == pytest.approx(0.25)
    # one weight-space method as uncertain as HMC, within its error bars: inconclusive
    weight["svgd"] = [0.6, 1.4, 0.9, 1.2, 0.8]
    (result,) = cl.evaluate(cl.Evidence({"toy": _toy(tmp_path / "b.csv", "paper", weight)}), [claim])
    assert result.verdict == "inconclusive"
    # one seed per method (the toys' default): too few seeds
    one = {m: [0.2] for m in cl.WEIGHT_SPACE}
    (result,) = cl.evaluate(cl.Evidence({"toy": _toy(tmp_path / "c.csv", "paper", one)}), [claim])
    assert result.verdict == cl.TOO_FEW_SEEDS and "1 seed(s)" in cl.summary(result.comparisons)
    # aggregated columns (<metric>_mean/_se/_n) are read as they are
    rows = [
        {
            "method": m,
            "scale": "paper",
            "gap_sd_epistemic_ratio_mean": 0.3,
            "gap_sd_epistemic_ratio_se": 0.05,
            "gap_sd_epistemic_ratio_n": 5,
        }
        for m in cl.WEIGHT_SPACE
    ]
    (result,) = cl.evaluate(cl.Evidence({"toy": _write_csv(tmp_path / "d.csv", rows)}), [claim])
    assert result.verdict == "reproduced"


def test_synthetic_claim_against_the_noise_floor(tmp_path, monkeypatch):
    claim = next(c for c in cl.CLAIMS if c.id == "gaussian-fit")
    calls = []
    monkeypatch.setattr(evidence, "noise_floor_se", lambda target, n, metric: calls.append((target, n)) or 0.003)

    def table(scale, seeds, energy):
        rows = [
            {"target": "gaussian", "method": m, "seed": s, "scale": scale, "n": 100, "energy_distance": e}
            for m, e in energy.items()
            for s in seeds
        ]
        rows.append(
            {"target": "gaussian", "method": "iid", "seed": "", "scale": scale, "n": 100, "energy_distance": 0.03}
        )
        return _write_csv(tmp_path / f"{scale}{len(seeds)}.csv", rows)

    energy = {"sge-wgd": 0.01, "ssge-wgd": 0.02, "svgd": 0.03}
    # one seed (the config's): too few seeds, and the noise floor's error is not even computed
    (result,) = cl.evaluate(cl.Evidence({"synthetic": table("paper", [42], energy)}), [claim])
    assert result.verdict == cl.TOO_FEW_SEEDS and calls == []
    # per-seed values that vary: mean +- s.e. over seeds against the floor 0.03 +- 0.003
    rows = [
        {"target": "gaussian", "method": m, "seed": s, "scale": "paper", "n": 100, "energy_distance": e + d}
        for m, e in {**energy, "svgd": 0.08}.items()
        for s, d in zip((1, 2, 3), (-0.001, 0.0, 0.001))
    ]
    rows.append(
        {"target": "gaussian", "method": "iid", "seed": "", "scale": "paper", "n": 100, "energy_distance": 0.03}
    )
    (result,) = cl.evaluate(cl.Evidence({"synthetic": _write_csv(tmp_path / "s.csv", rows)}), [claim])
    assert [c.verdict for c in result.comparisons] == ["reproduced", "reproduced", "contradicted"]
    assert result.verdict == "contradicted" and calls == [("gaussian", 100)]  # computed once


# --------------------------------------------------------------------------- the CLI


def test_cli_writes_csv_and_markdown(tmp_path):
    table1 = _table1(tmp_path / "results" / "table1.csv", "quick", ACCURACY)
    out_csv, out_md, out_html = tmp_path / "claims.csv", tmp_path / "claims.md", tmp_path / "claims.html"
    rc = main(
        [
            "claims",
            "--out-csv",
            str(out_csv),
            "--out-md",
            str(out_md),
            "--out-html",
            str(out_html),
            "--labels",
            json.dumps({"sge-wgd": "sge-WGD"}),
            "--table1",
            str(table1),
            "--synthetic",
            str(tmp_path / "absent.csv"),
            "--uci",
            str(tmp_path / "no_table2.csv"),
            "--table1-paper",
            str(RESOURCES / "table1_paper.csv"),
            "--uci-seeds",
            str(RESOURCES / "table2_seeds.csv"),
        ]
    )
    assert rc == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == len(cl.CLAIMS) >= 12
    # a quick table, the others absent; a claim that cannot be tested says so whatever its data,
    # and one that the paper's own printed values contradict is false on them, run or not
    false_on_paper = ["cifar-repulsive-beat-svgd", "table1-improve-over-de", "anchored-approaches-gp"]
    assert by_verdict(rows, "false on the paper's own numbers") == false_on_paper
    assert {r["verdict"] for r in rows if r["id"] not in ["langevin-no-difference", *false_on_paper]} == {"not run"}
    assert {r["runs_verdict"] for r in rows} == {"not run"}
    assert by_verdict(rows, "not testable") == ["langevin-no-difference"]
    by_id = {r["id"]: r for r in rows}
    assert by_id["fmnist-improve-accuracy"]["figures"] == f"{table1}: quick scale"
    assert "no_table2.csv: missing" in by_id["anchored-matches-pearce"]["figures"]
    # the paper's own numbers are checked all the same
    assert by_id["fmnist-improve-accuracy"]["source_verdict"] == "inconclusive"
    assert by_id["gaussian-fit"]["source_verdict"] == "n/a"
    md = out_md.read_text()
    assert md.startswith("# Claim scorecard")
    assert (
        "| # | claim | source | scored at | figures | detectable | verdict | on the paper's numbers "
        "| under another protocol |" in md
    )
    assert md.count("| **not run** |") == len(cl.CLAIMS) + len(cl.DIAGNOSTICS) - 4 and "## Verdict rule" in md
    assert md.count("| **not testable** |") == 1
    # each beside its family-wise reading (the paper's printed values' contradictions)
    assert md.count("| **false on the paper's own numbers** (on the paper's printed values, family-wise: ") == 3
    # the headline counts the papers' claims only; the diagnostics have their own CSV and section
    n = len(cl.CLAIMS)
    assert re.search(
        rf"{n} claims: 0 reproduced, 0 contradicted, 0 inconclusive, 0 too few seeds, {n - 4} not run, "
        r"3 false on the paper's own numbers \([0-3] of them family-wise\), 1 not testable",
        md,
    )
    assert {r["familywise_holds"] for r in rows if r["verdict"] == "false on the paper's own numbers"} <= {"yes", "no"}
    diag = list(csv.DictReader(cl.diagnostics_path(out_csv).open()))
    assert [r["id"] for r in diag] == [d.id for d in cl.DIAGNOSTICS] and {r["kind"] for r in diag} == {"diagnostic"}
    assert "drle-repulsion-acts" not in by_id and {r["kind"] for r in rows} == {"claim"}
    assert "## Diagnostics" in md and "Diagnostics" in out_html.read_text()
    assert by_id["anchored-matches-pearce"]["margin"].startswith("RMSE ±5% of Pearce's value")
    assert "mean ± t s.e." in md and "12.7 at n = 2" in md
    assert "<table" in out_html.read_text() and (tmp_path / "claims.csv.provenance.json").is_file()
    # the HTML wraps its long text so the verdicts are on screen; verdicts in bold, no Markdown
    page = out_html.read_text()
    css = page.split("<style", 1)[1].split("</style>", 1)[0]
    assert "width: 100%" in css and "white-space: normal" in css and "word-wrap: break-word" in css
    assert "max-width" in css and "**" not in page
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    verdict_col = re.findall(r'class="col_heading level0 (col\d+)" >verdict<', head)[0]
    assert re.search(rf"#T_repens_row0_{verdict_col}[^{{]*\{{\s*font-weight: bold", css)
    # each contradiction's family-wise reading beside the verdict (here: the paper's printed values')
    import html

    assert ">family-wise<" in head and "on the paper's printed values, family-wise: " in html.unescape(page)


def test_uci_claims_on_table2(tmp_path):
    """Table 2 as repens.report.uci writes it (block = dataset, <metric>_mean/_se/_n over
    splits) beside the transcribed seed values."""
    seeds = {
        (r["dataset"], r["method"], r["metric"]): (float(r["mean"]), float(r["se"]))
        for r in csv.DictReader(ln for ln in (RESOURCES / "table2_seeds.csv").open() if not ln.startswith("#"))
        if r["source"].startswith("pearce2020") and r["method"] == "anchored"
    }
    rows = []
    for ds in cl.UCI_DATASETS:
        # their code's anchoring one s.e. off their numbers; Eq. 11's 10 s.e. off on boston
        for method, off in (("anchored-code", 1.0), ("anchored", 10.0 if ds == "boston" else 1.0)):
            row = {"block": ds, "method": method, "label": method, "extra": 0}
            for metric in ("rmse", "nll"):
                mean, se = seeds[(ds, "anchored", metric)]
                row.update(
                    {f"{metric}_mean": mean + off * max(se, 0.01), f"{metric}_se": max(se, 0.01), f"{metric}_n": 20}
                )
            rows.append(row)
        for method in ("drle", "drle-burnin"):
            rows.append(
                {
                    "block": ds,
                    "method": method,
                    "label": "DRLE",
                    "extra": 0,
                    "repulsion_ratio_mean_mean": 0.3,
                    "repulsion_ratio_mean_se": 0.01,
                    "repulsion_ratio_mean_n": 20,
                }
            )
    files = {"uci": _write_csv(tmp_path / "table2_uci.csv", rows, "paper"), "uci_seeds": RESOURCES / "table2_seeds.csv"}
    by_id = {r.claim.id: r for r in cl.evaluate(cl.Evidence(files), cl.CLAIMS + cl.DIAGNOSTICS)}
    match = by_id["anchored-matches-pearce"]  # read from the anchored-code rows
    # one s.e. off: within the margin (5% RMSE, 0.05 nats) where the error bars can show it (6 cells);
    # on the other 12 the error bars (Pearce's own among them) are wider than the margin: inconclusive
    assert match.verdict == "inconclusive" and len(match.comparisons) == 18
    verdicts = {c.a.label: c.verdict for c in match.comparisons}
    assert sorted(k for k, v in verdicts.items() if v == "reproduced") == [
        "anchored-code NLL (kin8nm)",
        "anchored-code NLL (power)",
        "anchored-code NLL (protein)",
        "anchored-code NLL (wine)",
        "anchored-code RMSE (power)",
        "anchored-code RMSE (protein)",
    ]
    assert all(c.undetectable for c in match.comparisons if c.verdict == "inconclusive")
    assert "above the margin on 12 of 18 comparisons" in cl.detectable_summary(match.comparisons)
    assert match.source_verdict == ""  # matching the paper's numbers: no check on them alone
    eq11 = by_id["anchored-eq11-matches-pearce"]  # read from the anchored rows
    assert eq11.verdict == "contradicted"
    assert [c.verdict for c in eq11.comparisons].count("contradicted") == 2  # boston RMSE and NLL
    assert by_id["drle-repulsion-acts"].verdict == "reproduced"
    # DLE (our runs started from a deep ensemble) and DE are not in this table: not run, naming the rows;
    # the claim itself is not testable (its comparisons are still made and shown)
    assert by_id["langevin-no-difference"].verdict == "not testable"
    assert cl.combine(by_id["langevin-no-difference"].comparisons) == "not run"
    assert (
        "table2_uci.csv: no rows for dle-burnin, de (kin8nm, concrete, energy, naval, power, protein, wine, yacht)"
        in cl.summary(by_id["langevin-no-difference"].comparisons)
    )
    # the poster's own numbers differ beyond 2 s.e. (kin8nm DLE 13.25 +- 4.3 vs DE 0.33 +- 0.1)
    assert by_id["langevin-no-difference"].source_verdict == "contradicted"
    # the same table at quick scale
    files["uci"] = _write_csv(tmp_path / "quick" / "table2_uci.csv", rows, "quick")
    assert {
        combine(r.comparisons)
        for r in cl.evaluate(cl.Evidence(files), cl.CLAIMS + cl.DIAGNOSTICS)
        if "uci" in r.claim.files and not r.claim.untestable
    } == {"not run"}


def test_the_papers_ratio_errors_are_no_standard_errors_and_say_so_without_machine_paths(tmp_path, monkeypatch):
    """The paper's printed ± of H_o/H_t and MD_o/MD_t is no s.e. (utils/generate_results.py):
    a claim on the ratios alone is not run on the paper's numbers, and its reason names the
    transcription relative to the checkout, however the path was given."""
    monkeypatch.chdir(ROOT)
    files = {
        "table1": _table1(tmp_path / "table1.csv", "paper", ACCURACY),
        "table1_paper": (RESOURCES / "table1_paper.csv").resolve(),
    }
    claim = next(c for c in cl.CLAIMS if c.id == "fmnist-function-diversity")
    result = cl.evaluate(cl.Evidence(files), [claim])[0]
    assert result.source_verdict == "not run"
    reasons = {c.reason for c in result.source_comparisons}
    assert any(
        r.startswith("workflow/resources/table1_paper.csv: the paper's ± of H_o/H_t is no standard error")
        for r in reasons
    ), reasons
    assert not any(str(ROOT) in r for r in reasons)
    # the metrics themselves: the printed ± times 5 / sqrt(4)
    paper = cl.PaperEvidence("table1", files)
    assert paper.table1("fashionmnist", "de", "accuracy").se == pytest.approx(0.013 * 2.5)


def test_a_claim_over_two_datasets_names_the_dataset_in_each_label_and_a_one_dataset_claim_does_not():
    """table1-improve-over-de compares the same methods on FashionMNIST and CIFAR-10: its
    labels name the data set, so the paper's CIFAR-10 numbers do not read as FashionMNIST's;
    the FashionMNIST claims keep the plain labels."""
    paper = cl.PaperEvidence("table1", {"table1_paper": RESOURCES / "table1_paper.csv"})
    both = claim_list._table1_improve_over_de(paper)
    labels = [c.a.label for c in both]
    assert len(set(labels)) == len(labels) == 24, labels
    assert sum(label.endswith("(FashionMNIST)") for label in labels) == 12
    assert sum(label.endswith("(CIFAR10)") for label in labels) == 12
    # the paper's CIFAR-10 ssge-fWGD accuracy, named as such beside its value
    cifar = next(c for c in both if c.a.label == "ssge-fwgd accuracy (%) (CIFAR10)")
    fmnist = next(c for c in both if c.a.label == "ssge-fwgd accuracy (%) (FashionMNIST)")
    assert cifar.a.value < 88 < fmnist.a.value
    assert all("(" not in c.a.label.removesuffix("accuracy (%)") for c in claim_list._fmnist_improve(paper))


def test_printed_values_count_their_rounding():
    # Pearce prints naval's RMSE as 0.00 +- 0.00: "below 0.005", not exactly 0
    printed = Estimate("Pearce", 0.0, 0.0, 0, cl.PUBLISHED, rounding=evidence._rounding("0.00", "0.00"))
    # a printed error of unknown n: the normal quantile 1.96, on an error of at least the rounding
    assert printed.interval() == pytest.approx((-0.005 * 2.959964, 0.005 * 2.959964))
    assert compare(est(0.0012, 0.0001), "~", printed, margin=0.02).verdict == "reproduced"
    # a margin finer than the printed digits cannot be shown: inconclusive
    close = compare(est(0.0012, 0.0001), "~", printed, margin=0.005)
    assert close.verdict == "inconclusive" and close.undetectable
    assert compare(est(0.03, 0.001), "~", printed, margin=0.005).verdict == "contradicted"
    assert evidence._rounding("91.122", "0.013") == pytest.approx(0.0005) and evidence._rounding("13", "") == 0.5


# --------------------------------------------------------------------------- the real writers


def _metrics_json(path: Path, job: dict, body: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"job": job, **body}))
    return str(path)


def test_scorecard_reads_the_tables_the_pipeline_writes(tmp_path):
    """Table 1 and Table 2 made by their own commands (image-table, uci-table, with the
    provenance sidecars) from metrics.json files at paper scale: the scorecard reads their
    columns and scale, and gives verdicts."""
    res = tmp_path / "results"
    image = []
    for i, (method, acc) in enumerate(
        (
            ("de", 0.90),
            ("svgd", 0.905),
            ("kde-wgd", 0.95),
            ("sge-wgd", 0.96),
            ("ssge-wgd", 0.95),
            ("kde-fwgd", 0.95),
            ("sge-fwgd", 0.95),
            ("ssge-fwgd", 0.95),
        )
    ):
        # each method's own seed noise, so the seeds' differences between methods vary (all
        # equal differences have no spread to read: inconclusive)
        for seed, noise in ((38, -0.001), (39, 0.0), (40, 0.001 * (1 + 0.1 * i))):
            job = {
                "experiment": "image",
                "dataset": "fashionmnist",
                "method": method,
                "seed": seed,
                "scale": "paper",
                "particles": 50,
                "steps": 50000,
            }
            metrics = {
                "accuracy": acc + noise,
                "auroc_entropy": 0.9,
                "auroc_md": 0.95,
                "entropy_ratio": 6.0,
                "md_ratio": 6.0,
                "ece": 0.01,
                "nll": 0.13,
            }
            image.append(
                _metrics_json(
                    res / "image" / "fashionmnist" / method / f"seed{seed}" / "metrics.json", job, {"metrics": metrics}
                )
            )
    methods = "de,svgd,kde-wgd,sge-wgd,ssge-wgd,kde-fwgd,sge-fwgd,ssge-fwgd"
    assert (
        main(
            [
                "image-table",
                "--reference",
                str(RESOURCES / "table1_paper.csv"),
                "--datasets",
                "fashionmnist",
                "--methods",
                methods,
                "--out-tex",
                str(res / "table1.tex"),
                "--out-png",
                str(res / "table1.png"),
                "--out-csv",
                str(res / "table1.csv"),
                "--out-vs-paper",
                str(res / "table1_vs_paper.csv"),
                *image,
            ]
        )
        == 0
    )
    uci = []
    for ds in ("yacht", "energy"):
        for method, ratio in (("de", 0.0), ("dle-burnin", 0.0), ("drle-burnin", 0.01)):
            job = {"experiment": "uci", "dataset": ds, "method": method, "seed": 42, "scale": "paper"}
            splits = [
                {
                    "split": k,
                    "rmse": 0.5 + 0.01 * k,
                    "nll": 1.0 + 0.01 * k,
                    "nll_mixture": 1.1,
                    "repulsion_ratio_mean": ratio + 0.001 * k,
                }
                for k in range(4)
            ]
            uci.append(_metrics_json(res / "uci" / ds / method / "seed42" / "metrics.json", job, {"splits": splits}))
    assert (
        main(
            [
                "uci-table",
                "--datasets",
                "yacht",
                "energy",
                "--methods",
                "de",
                "dle-burnin",
                "drle-burnin",
                "--seeds",
                str(RESOURCES / "table2_seeds.csv"),
                "--out-tex",
                str(res / "table2_uci.tex"),
                "--out-csv",
                str(res / "table2_uci.csv"),
                "--out-seeds",
                str(res / "table2_vs_seeds.csv"),
                *uci,
            ]
        )
        == 0
    )

    out_csv, out_md = tmp_path / "claims.csv", tmp_path / "claims.md"
    assert (
        main(
            [
                "claims",
                "--out-csv",
                str(out_csv),
                "--out-md",
                str(out_md),
                "--table1",
                str(res / "table1.csv"),
                "--uci",
                str(res / "table2_uci.csv"),
                "--uci-seeds",
                str(RESOURCES / "table2_seeds.csv"),
                "--table1-paper",
                str(RESOURCES / "table1_paper.csv"),
            ]
        )
        == 0
    )
    by_id = {r["id"]: r for r in csv.DictReader(out_csv.open())}
    by_id.update({r["id"]: r for r in csv.DictReader(cl.diagnostics_path(out_csv).open())})
    # accuracy (in %, as the table writes it): every WGD/fWGD > DE and SVGD beyond 2 s.e.
    assert by_id["fmnist-improve-accuracy"]["verdict"] == "reproduced", by_id["fmnist-improve-accuracy"]
    # kde-WGD's seeds 94.9, 95.0, 95.12: mean 95.007, sd 0.110, s.e. 0.064
    assert "kde-wgd accuracy (%) 95.007 ± 0.064, n=3" in by_id["fmnist-improve-accuracy"]["comparisons"]
    # sge-WGD 96% against 95%: best (hyper-DE and f-SVGD are not in this run: not run)
    assert by_id["fmnist-sge-best-accuracy"]["verdict"] == "not run"
    assert "table1.csv: no rows for fsvgd, hyper-de (fashionmnist))" in by_id["fmnist-sge-best-accuracy"]["figures"]
    # the same AUROC(MD) and AUROC(H) for all, s.e. 0: 0.95 > 0.9
    assert by_id["fmnist-md-beats-entropy"]["verdict"] == "not run"  # f-SVGD and hyper-DE missing
    # identical NLL of DE, DLE and DRLE on the poster's datasets present; the others missing
    nodiff = by_id["langevin-no-difference"]
    assert nodiff["verdict"] == "not testable" and int(nodiff["n_reproduced"]) == 4  # yacht, energy x DLE, DRLE
    reason, _, figures = nodiff["figures"].partition(". 12 of 16")
    assert reason.startswith("not testable: the poster's table does not say what its metric is")
    assert figures.startswith(" comparisons not run (") and figures.endswith("; 4 reproduced")
    assert (
        "no rows for dle-burnin, de, drle-burnin (kin8nm, concrete, naval, power, protein, wine)" in nodiff["figures"]
    )
    # DRLE's repulsion 0.0115 +- 0.0006 (4 splits) is below the 0.05 of "negligible" beyond
    # its error bars: contradicted, though 6 of the poster's datasets (and DRLE from the prior) are not in this run
    assert by_id["drle-repulsion-acts"]["n_contradicted"] == "2" and by_id["drle-repulsion-acts"]["n_not_run"] == "14"
    assert by_id["drle-repulsion-acts"]["verdict"] == "contradicted"
    assert (
        "drle-burnin ||repulsion||/||drift|| (yacht) 0.0115 ± 0.00065, n=4 > 0.05 (negligible): contradicted"
        in by_id["drle-repulsion-acts"]["comparisons"]
    )


# --------------------------------------------------------------------------- convergence


def _convergence(path: Path, rows: list[tuple[str, str, str, str, str]]) -> Path:
    """results/convergence.csv: (experiment, dataset, method, converged, reason) per run."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=conv.CONVERGENCE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for experiment, dataset, method, converged, reason in rows:
            writer.writerow(
                {
                    "experiment": experiment,
                    "dataset": dataset,
                    "method": method,
                    "seed": "38",
                    "converged": converged,
                    "reason": reason,
                    "log": "",
                }
            )
    return path


def test_an_unconverged_run_makes_any_comparison_inconclusive():
    ok = est(2.0, 0.1)
    stuck = Estimate(
        "x",
        1.0,
        0.1,
        5,
        "paper",
        "results/t.csv",
        converged=False,
        convergence="image/d/m/seed38: monitor_nll drift +0.126 (+24.4%) per last 20%",
    )
    # would be reproduced, and (the other way) contradicted: inconclusive, saying why
    for relation in (">", "<"):
        c = compare(ok, relation, stuck)
        assert c.verdict == "inconclusive" and c.reason.startswith("not converged: image/d/m/seed38: monitor_nll")
        assert c.text().endswith(
            "inconclusive (not converged: image/d/m/seed38: monitor_nll drift +0.126 (+24.4%) per last 20%)"
        )
        assert "[not converged]" in c.text()
    # on either side, and for an agreement too (would be contradicted: 1 apart, margin 0.1)
    assert compare(stuck, "~", est(2.0, 0.01), margin=0.1).verdict == "inconclusive"
    assert compare(est(1.0, 0.01), "~", replace_converged(est(1.0, 0.01), False), margin=0.1).verdict == "inconclusive"
    # a quantity that is missing still makes it "not run"
    assert compare(stuck, ">", Estimate.absent("y", "no row")).verdict == "not run"
    # unknown convergence is shown but does not block
    unknown = Estimate(
        "x",
        1.0,
        0.1,
        5,
        "paper",
        "results/t.csv",
        converged=None,
        convergence="no convergence check of the image/d/m runs",
    )
    c = compare(ok, ">", unknown)
    assert c.verdict == "reproduced" and "[convergence unknown]" in c.text()
    assert compare(ok, "<", unknown).verdict == "contradicted"
    # converged: nothing shown
    assert "[" not in compare(ok, ">", replace_converged(est(1.0, 0.1), True)).text()


def replace_converged(e: Estimate, converged):
    from dataclasses import replace

    return replace(e, converged=converged, convergence="r")


def test_an_unconverged_run_gates_a_limit_claim_and_is_a_caveat_of_a_fixed_budget_one(tmp_path):
    files = {
        "table1": _table1(tmp_path / "table1.csv", "paper", ACCURACY),
        "table1_paper": RESOURCES / "table1_paper.csv",
    }
    all_ok = [("image", "fashionmnist", m, "True", "stable") for m in ACCURACY]
    files["convergence"] = _convergence(tmp_path / "ok.csv", all_ok)
    assert _fmnist(cl.Evidence(files)).verdict == "reproduced"
    # one run not converged: reproduced becomes inconclusive; the paper's own numbers unaffected
    bad = [
        r
        if r[2] != "sge-fwgd"
        else (
            "image",
            "fashionmnist",
            "sge-fwgd",
            "False",
            "monitor_nll drift +0.126 (+24.4%) per last 20%; monitor_acc ok [from log x]",
        )
        for r in all_ok
    ]
    files["convergence"] = _convergence(tmp_path / "bad.csv", bad)
    # a fixed-budget claim (every claim of the scorecard): scored as run, the run named as a caveat
    as_run = _fmnist(cl.Evidence(files))
    assert as_run.verdict == "reproduced"
    caveats = [c for c in as_run.comparisons if c.caveat]
    assert len(caveats) == 2 and not any(c.reason for c in as_run.comparisons)
    assert "[caveat, not converged: image/fashionmnist/sge-fwgd/seed38: monitor_nll drift" in caveats[0].text()
    assert "not converged: image/fashionmnist/sge-fwgd/seed38" in cl.summary(as_run.comparisons)
    # a claim about the methods' limit: inconclusive
    result = _fmnist(cl.Evidence(files), limit=True)
    assert result.verdict == "inconclusive" and result.source_verdict == "inconclusive"
    stuck = [c for c in result.comparisons if c.reason]
    assert len(stuck) == 2 and all(c.verdict == "inconclusive" for c in stuck)  # sge-fWGD against DE and SVGD
    assert not any(c.reason for c in result.source_comparisons)
    assert stuck[0].reason == (
        "not converged: image/fashionmnist/sge-fwgd/seed38: monitor_nll drift +0.126 (+24.4%) per last 20%"
    )
    assert cl.Evidence(files).table1("fashionmnist", "sge-fwgd", "accuracy").converged is False
    # would be contradicted (below DE beyond the error bars): inconclusive
    files["table1"] = _table1(tmp_path / "low" / "table1.csv", "paper", {**ACCURACY, "sge-fwgd": (90.0, 0.01)})
    assert _fmnist(cl.Evidence(files), limit=True).verdict == "inconclusive"
    assert _fmnist(cl.Evidence(files)).verdict == "contradicted"
    # unknown (an empty cell, or no row for the runs) does not block
    unknown = [r if r[2] != "sge-fwgd" else ("image", "fashionmnist", "sge-fwgd", "", "log not found") for r in all_ok]
    files["convergence"] = _convergence(tmp_path / "unknown.csv", unknown)
    assert _fmnist(cl.Evidence(files)).verdict == "contradicted"
    files["convergence"] = _convergence(tmp_path / "none.csv", [])
    assert _fmnist(cl.Evidence(files)).verdict == "contradicted"
    files["table1"] = _table1(tmp_path / "table1.csv", "paper", ACCURACY)
    result = _fmnist(cl.Evidence(files))
    assert result.verdict == "reproduced" and "[convergence unknown]" in cl.summary(result.comparisons, limit=20)


def test_convergence_table_from_runs_and_their_logs(tmp_path):
    """write_convergence: one row per Table 1 / Table 2 run present, the log read under
    --log-root (a rebuild from the reference tree) when the provenance names one."""
    ref = ROOT / "reference"
    run = ref / "image" / "fashionmnist" / "fsvgd" / "seed38" / "metrics.json"
    if not run.is_file():
        pytest.skip("no reference run")
    results = tmp_path / "results"
    dest = results / "image" / "fashionmnist" / "fsvgd" / "seed38"
    dest.mkdir(parents=True)
    (dest / "metrics.json").write_bytes(run.read_bytes())
    rows = conv.write_convergence(tmp_path / "convergence.csv", results)  # no log beside: unknown
    assert [(r["method"], r["converged"]) for r in rows] == [("fsvgd", "")]
    assert (
        main(
            [
                "claims",
                "--out-csv",
                str(tmp_path / "c.csv"),
                "--out-md",
                str(tmp_path / "c.md"),
                "--convergence",
                str(tmp_path / "convergence.csv"),
            ]
        )
        == 0
    )
    assert (
        conv.main(
            [
                "convergence",
                "--out",
                str(tmp_path / "convergence.csv"),
                "--results",
                str(results),
                "--log-root",
                str(ref),
            ]
        )
        == 0
    )
    rows = list(csv.DictReader((tmp_path / "convergence.csv").open()))
    assert [(r["experiment"], r["dataset"], r["method"], r["seed"], r["converged"]) for r in rows] == [
        ("image", "fashionmnist", "fsvgd", "38", "False")
    ]
    assert rows[0]["log"].endswith("logs/image/fashionmnist/fsvgd/seed38.log")


def test_summary_names_the_unconverged_runs():
    stuck = Estimate(
        "s",
        1.0,
        0.1,
        5,
        "paper",
        "results/t.csv",
        converged=False,
        convergence="uci/kin8nm/dle/seed42: under-fit: train RMSE 0.7253 > bound 0.2698",
    )
    comparisons = [compare(est(2.0, 0.1), ">", stuck), compare(est(2.0, 0.1), ">", Estimate.absent("y", "F: missing"))]
    assert cl.combine(comparisons) == "not run"
    text = cl.summary(comparisons)
    # the not-run reasons are the missing quantities' only; the unconverged run is named apart
    assert text == (
        "1 of 2 comparisons not run (F: missing); 1 inconclusive (1 of them not converged); "
        "not converged: uci/kin8nm/dle/seed42 (under-fit: train RMSE 0.7253 > bound 0.2698)"
    )
    many = [compare(est(2.0, 0.1), ">", est(1.0, 0.1))] * 5 + [
        compare(est(2.0, 0.1), "<", est(1.0, 0.1)),
        comparisons[0],
    ]
    assert cl.combine(many) == "contradicted"
    assert cl.summary(many).endswith(
        "not converged: uci/kin8nm/dle/seed42 (under-fit: train RMSE 0.7253 > bound 0.2698)"
    )


# --------------------------------------------------------------------------- method groups


def test_default_groups_are_the_repository_configs():
    """The groups the scorecard falls back on are those repens.pipeline.config derives from config.yaml."""
    import dataclasses

    import yaml

    from repens.pipeline.config import method_groups
    from repens.report.evidence import DEFAULT_GROUPS

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    assert dataclasses.asdict(method_groups(config)) == {k: v for k, v in DEFAULT_GROUPS.items()}


def test_a_method_added_to_the_config_joins_the_claims_of_its_group(tmp_path):
    """A new WGD variant in config.yaml's methods is compared by every claim on WGD, through the
    groups the workflow passes (--groups), without editing the claims."""
    import dataclasses

    import yaml

    from repens.pipeline.config import method_groups

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    config["methods"]["mmd-wgd"] = {"rule": "wgd", "estimator": "kde", "bandwidth": 2.0, "label": "new WGD"}
    groups = json.loads(json.dumps(dataclasses.asdict(method_groups(config))))  # as the rule passes them
    assert "mmd-wgd" in groups["wgd"] and "mmd-wgd" in groups["weight_space"]
    by_id = {r.claim.id: r for r in cl.evaluate(cl.Evidence({}, groups=groups))}
    labels = " ".join(c.a.text() + c.b.text() for c in by_id["fmnist-improve-accuracy"].comparisons)
    assert "mmd-wgd" in labels
    default = {r.claim.id: r for r in cl.evaluate(cl.Evidence({}))}
    assert len(by_id["fmnist-improve-accuracy"].comparisons) == len(default["fmnist-improve-accuracy"].comparisons) + 2
    with pytest.raises(ValueError, match="unknown group"):
        cl.Evidence({}, groups={"wgdd": ["x"]})


def test_a_variants_scorecard_reads_the_variants_rows_and_only_table1s_claims(tmp_path):
    """At the variant code-init each method m is read as m-code-init: the rows of the main
    methods (here all below DE: contradicted there) do not enter; a method the variant does
    not run makes its comparisons not run."""
    low = {m: (mean - 5.0, se) for m, (mean, se) in ACCURACY.items() if m != "de"}
    rows = {"de": ACCURACY["de"], **low, **{f"{m}-code-init": v for m, v in ACCURACY.items()}}
    files = {
        "table1": _table1(tmp_path / "table1.csv", "paper", rows),
        "table1_paper": RESOURCES / "table1_paper.csv",
    }
    assert _fmnist(cl.Evidence(files)).verdict == "contradicted"
    variant = _fmnist(cl.Evidence(files, variant="code-init"))
    assert variant.verdict == "reproduced" and len(variant.comparisons) == 12
    labels = {c.a.label for c in variant.comparisons} | {c.b.label for c in variant.comparisons}
    assert all("code-init" in label for label in labels), labels
    del rows["svgd-code-init"]
    files["table1"] = _table1(tmp_path / "partial" / "table1.csv", "paper", rows)
    assert _fmnist(cl.Evidence(files, variant="code-init")).verdict == "not run"
    out = cl.write_scorecard(files, tmp_path / "v.csv", tmp_path / "v.md", variant="code-init")
    assert out and all("table1" in next(c for c in cl.CLAIMS if c.id == r["id"]).files for r in out)
    text = (tmp_path / "v.md").read_text()
    assert text.startswith("# Claim scorecard: Table 1's claims at the variant code-init\n\n")
    assert "read as the variant's method m-code-init" in text


def test_table1_claim_reads_the_row_verdict_where_the_table_records_one(tmp_path):
    # the row's pooled verdict (row_converged) decides, not the per-run one
    files = {
        "table1": _table1(tmp_path / "table1.csv", "paper", ACCURACY),
        "table1_paper": RESOURCES / "table1_paper.csv",
    }
    rows = [("image", "fashionmnist", m, "True", "stable") for m in ACCURACY]
    path = _convergence(tmp_path / "rows.csv", rows)
    table = list(csv.DictReader(path.open()))
    for r in table:
        failed_run = r["method"] == "sge-fwgd"
        r["converged"] = "False" if failed_run else "True"  # one seed's own test fired...
        r["row_converged"], r["row_reason"] = "True", "monitor_nll mean drift over 5 run(s) -0.001 <= tol"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=conv.CONVERGENCE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    files["convergence"] = path
    assert _fmnist(cl.Evidence(files)).verdict == "reproduced"  # ...but the row's mean has settled
    for r in table:
        if r["method"] == "sge-fwgd":
            r["row_converged"], r["row_reason"] = "False", "monitor_nll mean drift over 5 run(s) -0.05 > tol; x"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=conv.CONVERGENCE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    result = _fmnist(cl.Evidence(files), limit=True)
    assert result.verdict == "inconclusive"
    assert [c.reason for c in result.comparisons if c.reason][0] == (
        "not converged: image/fashionmnist/sge-fwgd: monitor_nll mean drift over 5 run(s) -0.05 > tol"
    )
    assert [c.caveat for c in _fmnist(cl.Evidence(files)).comparisons if c.caveat][0] == (
        "not converged: image/fashionmnist/sge-fwgd: monitor_nll mean drift over 5 run(s) -0.05 > tol"
    )


def _hand_made_claim(ours: tuple[float, float], printed: tuple[float, float], **extra) -> cl.Claim:
    """A claim "a > b" whose check reads our runs' two means (``ours``, 5 seeds, s.e. 0.01)
    or, on the paper's evidence, its two printed values (``printed``, error 0.01)."""

    def check(ev):
        if isinstance(ev, cl.PaperEvidence):
            a, b = (Estimate(f"printed {x}", x, 0.01, 0, cl.PUBLISHED) for x in printed)
        else:
            a, b = (est(x, 0.01, n=5) for x in ours)
        return [compare(a, ">", b)]

    return cl.Claim("hand-made", "Table 9", "a beats b", "a > b", ("table1",), check, reference="table1_paper", **extra)


@pytest.mark.parametrize(
    ("ours", "printed", "verdict", "runs"),
    [
        ((1.0, 0.5), (1.0, 0.5), "reproduced", "reproduced"),  # holds on both
        ((1.0, 0.5), (0.5, 1.0), "false on the paper's own numbers", "reproduced"),  # our runs hold it; its table not
        ((0.5, 1.0), (0.5, 1.0), "false on the paper's own numbers", "contradicted"),
        ((0.5, 1.0), (1.0, 0.5), "contradicted", "contradicted"),  # a failed reproduction
        ((1.0, 0.5), (1.0, 0.99), "reproduced", "reproduced"),  # inconclusive on its table: ours decide
    ],
)
def test_a_claim_its_own_paper_contradicts_is_false_on_its_numbers_whatever_our_runs(
    tmp_path, ours, printed, verdict, runs
):
    claim = _hand_made_claim(ours, printed)
    (result,) = cl.evaluate(cl.Evidence({}), [claim])
    assert result.verdict == verdict and cl.combine(result.comparisons) == runs
    (row,) = cl.scorecard_rows([result], {"table1": tmp_path / "t.csv"})
    assert row["verdict"] == verdict and row["runs_verdict"] == runs
    if verdict == cl.FALSE_ON_PAPER:
        assert row["figures"].startswith("false on the paper's own numbers: the same check on its printed values")
        assert f"our runs: {runs}." in row["figures"]
    # a single comparison, decided by 0.5 at s.e. 0.01: its contradiction holds family-wise too
    family = " (1 of them family-wise)" if verdict in ("contradicted", cl.FALSE_ON_PAPER) else ""
    assert row["familywise_holds"] == ("yes" if family else "")
    assert cl.headline([row]) == "1 claims: " + ", ".join(
        f"{int(v == verdict)} {v}" + (family if v == verdict else "")
        for v in cl.VERDICTS + ((verdict,) if verdict not in cl.VERDICTS else ())
    )
    # a claim that cannot be tested stays so, whatever its paper's numbers
    (untestable,) = cl.evaluate(cl.Evidence({}), [_hand_made_claim(ours, printed, untestable="no metric")])
    assert untestable.verdict == cl.NOT_TESTABLE


def _two_protocol_claim(ours: tuple[float, float] | None, other: tuple[float, float]) -> cl.Claim:
    """A Table 1 claim "a > b" whose check reads the code-protocol block's two means (``ours``;
    None: one seed, too few seeds; "absent": no row, not run) or, on the G.4 block's evidence
    (no variant), ``other``; the paper prints nothing that decides it."""

    def check(ev):
        if isinstance(ev, cl.PaperEvidence):
            a, b = (Estimate(f"printed {x}", x, 1.0, 0, cl.PUBLISHED) for x in (1.0, 0.5))
            return [compare(a, ">", b)]
        if ev.variant:
            if ours is None:
                return [compare(est(1.0, math.nan, n=1), ">", est(0.5, math.nan, n=1))]
            if ours == "absent":
                return [compare(Estimate.absent("a", "no a row"), ">", est(0.5, 0.01))]
            return [compare(est(ours[0], 0.01), ">", est(ours[1], 0.01))]
        return [compare(est(other[0], 0.01), ">", est(other[1], 0.01))]

    return cl.Claim("two-protocols", "Table 1", "a beats b", "a > b", ("table1",), check, reference="table1_paper")


@pytest.mark.parametrize(
    ("ours", "other", "verdict", "other_verdict"),
    [
        (None, (0.5, 1.0), "differs under another protocol", "contradicted"),  # one seed where the paper measured
        ("absent", (0.5, 1.0), "differs under another protocol", "contradicted"),  # not run there
        (None, (1.0, 0.5), "too few seeds", "reproduced"),  # holds elsewhere: still undecided at the paper's
        ("absent", (1.0, 0.5), "not run", "reproduced"),
        ((1.0, 0.5), (0.5, 1.0), "reproduced", "contradicted"),  # the paper's protocol decides
        ((0.5, 1.0), (1.0, 0.5), "contradicted", "reproduced"),
    ],
)
def test_table1_claims_are_scored_at_the_papers_protocol_with_the_other_beside(ours, other, verdict, other_verdict):
    code, g4 = cl.Evidence({}, variant="code-protocol", code_metrics=True), cl.Evidence({})
    (result,) = cl.evaluate(code, [_two_protocol_claim(ours, other)], "the authors' code", ("G.4's text", g4))
    assert (result.verdict, result.other_verdict) == (verdict, other_verdict)
    assert result.protocol == "the authors' code" and result.other_protocol == "G.4's text"
    (row,) = cl.scorecard_rows([result], {})
    assert row["protocol"] == "the authors' code" and row["other_protocol"] == f"G.4's text: {other_verdict}"
    if verdict == cl.DIFFERS:
        assert row["figures"].startswith("differs under another protocol: under G.4's text the check is contradicted")
        why = "no a row" if ours == "absent" else "no standard error"
        assert "at the authors' code: " in row["figures"] and why in row["figures"]
    # a claim that does not read Table 1 keeps its own protocol and has no other
    (toy,) = cl.evaluate(code, [c for c in cl.CLAIMS if c.id == "funnel-best"], "the authors' code", ("x", g4))
    assert toy.protocol.startswith("the paper's text") and toy.other_protocol == ""


def test_the_code_protocol_reads_the_codes_metric_columns_where_the_table_has_them(tmp_path):
    row = {"block": "fashionmnist", "method": "de-code-protocol", "label": "DE", "extra": 0}
    for metric, value in (("nll", 0.26), ("nll_code", 0.13), ("accuracy", 91.2), ("md_ratio", 5.0)):
        row.update({f"{metric}_mean": value, f"{metric}_se": 0.01, f"{metric}_n": 5})
    table = _write_csv(tmp_path / "table1.csv", [row], "paper")
    code = cl.Evidence({"table1": table}, variant="code-protocol", code_metrics=True)
    assert code.table1("fashionmnist", "de", "nll").value == 0.13  # the code's NLL, -log mean p
    assert code.table1("fashionmnist", "de", "nll").label.endswith("(code's)")
    assert code.table1("fashionmnist", "de", "accuracy").value == 91.2  # defined alike
    assert code.table1("fashionmnist", "de", "md_ratio").value == 5.0  # no md_ratio_code column here: as is
    ours = cl.Evidence({"table1": table}, variant="code-protocol")
    assert ours.table1("fashionmnist", "de", "nll").value == 0.26


def test_the_figure_3_paragraph_is_scored_sentence_by_sentence(tmp_path):
    """The weight-space methods below HMC's entropy far from the data, f-SVGD above it: the
    weight-space sentence is reproduced, the f-SVGD one contradicted, each on its own (one
    claim over both sentences was contradicted as a whole)."""
    rows = []
    for m in (*cl.WEIGHT_SPACE, "fsvgd", *cl.FWGD):
        far = 0.49 if m == "fsvgd" else 0.2 if m in cl.WEIGHT_SPACE else 0.8
        row = {"method": m}
        for metric, value in (("entropy_far", far), ("hmc_entropy_far", 0.39), ("entropy_near", 0.3)):
            row.update({f"{metric}_mean": value, f"{metric}_se": 0.01, f"{metric}_n": 5})
        rows.append(row)
    files = {"toy": _write_csv(tmp_path / "distance_to_hmc.csv", rows, "paper")}
    by_id = {r.claim.id: r for r in cl.evaluate(cl.Evidence(files))}
    assert by_id["classification-weight-overconfident"].verdict == "reproduced"
    assert len(by_id["classification-weight-overconfident"].comparisons) == len(cl.WEIGHT_SPACE)
    assert by_id["classification-fsvgd-overconfident"].verdict == "contradicted"
    assert by_id["classification-fwgd-near-far"].verdict == "reproduced"
    assert by_id["classification-fwgd-closer-far"].verdict == "not run"  # no KL column here
    assert {c.protocol for c in cl.CLAIMS if "toy" in c.files} == {claim_list.TEXT}


def _seeded(values, label="x"):
    """A mean over seeds 38, 39, ... with its per-seed values (a toy's or synthetic target's)."""
    mean, se, n = evidence._mean_se(values)
    return Estimate(label, mean, se, n, "paper", per_seed=tuple((str(38 + i), v) for i, v in enumerate(values)))


def test_runs_of_the_same_seeds_are_compared_paired():
    """A seed effect shared by both methods (large) hides a small, consistent difference from
    two intervals side by side; the paired test sees it."""
    shared = [0.0, 0.3, -0.2, 0.5, -0.4]
    a = _seeded([s + 0.05 + e for s, e in zip(shared, (0.001, -0.002, 0.002, 0.0, -0.001))])
    b = _seeded(shared)
    paired = compare(a, ">", b)
    assert paired.verdict == "reproduced" and paired.paired == 5
    assert paired.difference == pytest.approx(0.05, abs=1e-3) and paired.detectable < 0.01
    assert "paired over 5 seeds" in paired.text()
    unpaired = compare(replace_seeds(a, ()), ">", b)
    assert unpaired.verdict == "inconclusive" and unpaired.paired == 0
    assert compare(b, ">", a).verdict == "contradicted"
    # seeds that differ, or a printed value: unpaired
    assert compare(replace_seeds(a, tuple((str(int(s) + 2), v) for s, v in a.per_seed)), ">", b).paired == 0
    assert compare(a, ">", Estimate("paper", 0.0, 0.01, 0, cl.PUBLISHED)).paired == 0
    # an agreement reads the paired interval against its margin
    assert compare(a, "~", b, margin=0.1).verdict == "reproduced"
    assert compare(a, "~", b, margin=0.01).verdict == "contradicted"


def replace_seeds(e, per_seed):
    from dataclasses import replace

    return replace(e, per_seed=per_seed)


def test_the_paired_test_errs_at_its_stated_rate():
    """No true difference, a strong shared seed effect, n = 5: the paired ordering is reproduced
    (a false positive) in 2.5 % of draws, one tail of the 95 % interval. 8,000 draws: the rate's
    s.e. is 0.17 %; the bounds are 4 s.e."""
    import random

    rng = random.Random(7)
    hits = 0
    draws = 8000
    for _ in range(draws):
        shared = [rng.gauss(0, 5) for _ in range(5)]
        a = _seeded([s + rng.gauss(0, 1) for s in shared])
        b = _seeded([s + rng.gauss(0, 1) for s in shared])
        hits += compare(a, ">", b).verdict == "reproduced"
    rate, se = hits / draws, math.sqrt(0.025 * 0.975 / draws)
    assert abs(rate - 0.025) < 4 * se, rate


def test_seeds_that_all_differ_by_the_same_count_of_test_images_decide_nothing():
    """Accuracy is counted in test images (0.01 points on 10,000): two seeds whose differences
    are both -0.21 points have a sample spread of zero, and the paired interval would be a
    point that contradicts a claim at any coverage. Such a comparison is inconclusive, says
    why, and cannot make a claim's contradiction hold family-wise; so is an unpaired one
    whose cell's seeds all gave one value. An exact constant (s.e. 0 by definition) is still
    judged."""
    from repens.report.verdicts import ZERO_SPREAD, familywise

    sge = _seeded([91.07, 91.28], "sge")
    fwgd = _seeded([91.28, 91.49], "fwgd")
    c = compare(sge, ">", fwgd)
    assert c.paired == 2 and c.verdict == "inconclusive" and c.reason.startswith(ZERO_SPREAD)
    assert c.difference == pytest.approx(-0.21) and "all -0.21" in c.text()
    assert familywise([c]) == (0, 0, 1, pytest.approx(0.95))
    # differences -0.21 and -0.20: an interval again, -0.205 ± 12.7 x 0.005 = ± 0.064
    d = compare(sge, ">", _seeded([91.28, 91.48], "fwgd"))
    assert d.verdict == "contradicted" and d.detectable == pytest.approx(0.0635, rel=1e-2)
    flat = replace_seeds(_seeded([91.2, 91.2], "flat"), ())
    e = compare(flat, ">", replace_seeds(_seeded([91.0, 91.1], "other"), ()))
    assert flat.se == 0 and e.verdict == "inconclusive" and "its 2 seeds all give 91.2" in e.reason
    assert compare(_seeded([2.1, 2.2]), ">", Estimate.constant("1 (HMC's)", 1.0)).verdict == "reproduced"


def test_the_paired_test_on_counted_accuracies_errs_at_most_at_its_stated_rate():
    """No true difference between two methods; accuracies counted in test images (one step of
    the grid), a shared seed effect of 5 steps and each method's own noise of 1 step; n = 2. Equal differences
    (about one draw in five) would decide with a zero-width interval, a false ordering in
    about 6 % of draws beside the t interval's own 2.5 %; with them inconclusive, the ordering
    is reproduced in at most 2.5 % of draws. 4,000 draws: the rate's s.e. at 2.5 % is
    0.25 %; the bound is 4 s.e. above it."""
    import random

    rng = random.Random(11)
    hits, draws = 0, 4000
    for _ in range(draws):
        shared = [rng.gauss(0, 5) for _ in range(2)]
        a = _seeded([9100 + round(s + rng.gauss(0, 1)) for s in shared])
        b = _seeded([9100 + round(s + rng.gauss(0, 1)) for s in shared])
        hits += compare(a, ">", b).verdict == "reproduced"
    rate = hits / draws
    assert rate < 0.025 + 4 * math.sqrt(0.025 * 0.975 / draws), rate


def test_a_contradiction_is_read_again_at_its_claims_family_wise_level():
    """sge-WGD below SVGD over seeds 38-40 at the code's protocol (differences -0.21, -0.10,
    -0.20) is contradicted at 95 %; as one of a claim's 12 comparisons it does not hold at
    1 - 0.05/12 (t at 2 degrees of freedom: 4.30 -> 15.4 s.e.; it is 4.8), as a claim's only comparison
    it does; a difference of many s.e. holds at 12. The threshold is the paired interval's own,
    recomputed here from scipy's t."""
    from scipy import stats

    from repens.report.verdicts import familywise, familywise_words

    svgd = [91.30, 91.15, 91.28]
    sge = _seeded([x + d for x, d in zip(svgd, (-0.21, -0.10, -0.20))], "sge")
    c = compare(sge, ">", _seeded(svgd, "svgd"))
    assert c.verdict == "contradicted" and c.paired == 3
    other = compare(_seeded([1.0, 2.0, 3.0]), ">", _seeded([0.9, 2.1, 3.0]))
    assert other.verdict == "inconclusive"
    family = [c] + [other] * 11
    assert familywise(family) == (1, 0, 12, pytest.approx(1 - 0.05 / 12))
    assert familywise_words(familywise(family)) == (
        "family-wise: does not hold (0 of 1 contradiction at 99.58% intervals, Bonferroni over 12 comparisons)"
    )
    assert familywise([c])[:3] == (1, 1, 1)
    # the same threshold from scipy: |mean d| against t(1 - 0.025/m, n - 1) s.e.(d)
    d = [-0.21, -0.10, -0.20]
    mean = sum(d) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 2 / 3)
    for m in (1, 2, 3, 12):
        holds = abs(mean) > stats.t.ppf(1 - 0.025 / m, 2) * se
        assert familywise([c] + [other] * (m - 1))[1] == int(holds), m
    strong = compare(_seeded([0.0, 0.1, 0.2]), ">", _seeded([1.0, 1.1, 1.21]))
    assert familywise([strong] + [other] * 11)[:2] == (1, 1)
    assert familywise([other] * 3)[:2] == (0, 0) and familywise_words(familywise([other] * 3)) == ""


def test_family_wise_contradictions_of_a_true_claim_are_rare():
    """A claim of 12 paired orderings a > b, each at the boundary of holding (no true difference),
    n = 5, a shared seed effect: it is contradicted (some comparison's 95 % interval wholly below 0)
    in about 1 - 0.975^12 = 26 % of draws, family-wise in about 1 - (1 - 0.025/12)^12 = 2.5 %.
    4,000 draws; the bounds are 4 s.e. of each rate."""
    import random

    from repens.report.verdicts import familywise

    rng = random.Random(11)
    draws, raw, held = 4000, 0, 0
    for _ in range(draws):
        family = []
        for _ in range(12):
            shared = [rng.gauss(0, 5) for _ in range(5)]
            family.append(
                compare(
                    _seeded([s + rng.gauss(0, 1) for s in shared]), ">", _seeded([s + rng.gauss(0, 1) for s in shared])
                )
            )
        contradicted, holding, _, _ = familywise(family)
        raw += combine(family) == "contradicted"
        held += holding > 0
    for hits, p in ((raw, 1 - 0.975**12), (held, 1 - (1 - 0.025 / 12) ** 12)):
        rate, se = hits / draws, math.sqrt(p * (1 - p) / draws)
        assert abs(rate - p) < 4 * se, (rate, p)


def test_the_scorecard_reads_each_contradiction_family_wise():
    """The headline counts the contradiction-class claims that hold family-wise; the Markdown
    table shows the reading beside the verdict; a claim without a contradiction has none."""
    rows = [
        {"id": "a", "verdict": "contradicted", "kind": "claim", "familywise_holds": "no", "familywise": "fw: no"},
        {"id": "b", "verdict": "contradicted", "kind": "claim", "familywise_holds": "yes", "familywise": "fw: yes"},
        {"id": "c", "verdict": "reproduced", "kind": "claim", "familywise_holds": "", "familywise": ""},
    ]
    assert cl.headline(rows) == (
        "3 claims: 1 reproduced, 2 contradicted (1 of them family-wise), 0 inconclusive, 0 too few seeds, 0 not run"
    )
    md = cl.scorecard_markdown(
        [{**r, "claim": "w", "reading": "r", "source": "s", "figures": "f", "source_verdict": "n/a"} for r in rows], {}
    )
    assert "| **contradicted** (fw: no) |" in md and "| **reproduced** |" in md


def test_an_agreement_its_error_bars_cannot_reach_says_at_which_n_it_would_be_decided():
    """Margin 0.1, difference 0.02: at n = 5 with a per-run sd of 0.5 the interval's half-width
    (2.31 x sqrt(2 x 0.25 / 5) = 0.73) is far above the margin; the n that brings it within the
    room left (0.08) is found by the same t-interval; a printed error of 0.1 alone is wider
    than the margin at any n; a difference outside the margin is not called decidable."""
    sd, n = 0.5, 5
    a = Estimate("a", 1.02, sd / math.sqrt(n), n, "paper")
    b = Estimate("b", 1.0, sd / math.sqrt(n), n, "paper")
    c = compare(a, "~", b, margin=0.1)
    assert c.verdict == "inconclusive" and c.undetectable
    need = c.n_to_decide()
    # the smallest n whose interval t_{n-1} sqrt(2 sd^2 / n) fits in margin - |difference|
    fits = [m for m in range(6, 5000) if cl.quantile(m - 1) * math.sqrt(2 * sd**2 / m) <= 0.1 - 0.02]
    assert need == fits[0]
    assert f"cannot be decided at n = 5: about n = {fits[0]} would decide it" in c.text()
    wider = compare(a, "~", Estimate("paper", 1.0, 0.1, 0, cl.PUBLISHED), margin=0.1)
    assert math.isinf(wider.n_to_decide()) and "nor at any n" in wider.text()
    outside = compare(Estimate("a", 1.2, 0.3, 5, "paper"), "~", b, margin=0.1)
    assert outside.undetectable and outside.n_to_decide() is None
    assert "the difference lies outside the margin" in outside.text()
    summary = cl.detectable_summary([c, wider, outside])
    assert "above the margin on 3 of 3 comparisons: those cannot be decided at n = 5" in summary
    assert f"about n = {fits[0]} would decide 1" in summary and "no n would decide 1" in summary
    # within reach: no such statement
    assert compare(a, "~", b, margin=2.0).n_to_decide() is None


def test_table1_cells_of_the_same_seeds_are_compared_paired(tmp_path):
    """Table 1 with its runs file beside it: two rows whose seeds share a large seed effect are
    compared on the seeds' differences; a cell that is not the mean of its runs (a ratio of
    means, say) is compared unpaired; without the runs file, unpaired as before."""
    shared = [0.0, 0.6, -0.4, 1.0, -0.8]
    runs, rows = [], []
    for method, offset in (("sge-wgd", 0.1), ("de", 0.0)):
        # a small noise of each method's own on top of the shared seed effect
        values = [90 + s + offset + 0.001 * i * (1 + 10 * offset) for i, s in enumerate(shared)]
        runs += [
            {"dataset": "fashionmnist", "method": method, "seed": 38 + i, "accuracy": v} for i, v in enumerate(values)
        ]
        mean, se, n = evidence._mean_se(values)
        rows.append(
            {
                "block": "fashionmnist",
                "method": method,
                "label": method,
                "extra": 0,
                "accuracy_mean": mean,
                "accuracy_se": se,
                "accuracy_n": n,
                "md_ratio_mean": 5.0 + offset,
                "md_ratio_se": 0.5,
                "md_ratio_n": 5,
            }
        )
        runs[-5:] = [{**r, "md_ratio": 4.0 + offset} for r in runs[-5:]]  # not the cell's 5.0: a ratio of means
    table = _write_csv(tmp_path / "table1.csv", rows, "paper")
    ev = cl.Evidence({"table1": table})
    assert (
        compare(
            ev.table1("fashionmnist", "sge-wgd", "accuracy"), ">", ev.table1("fashionmnist", "de", "accuracy")
        ).verdict
        == "inconclusive"
    )
    _write_csv(tmp_path / "table1_runs.csv", runs)
    ev = cl.Evidence({"table1": table})
    a, b = ev.table1("fashionmnist", "sge-wgd", "accuracy"), ev.table1("fashionmnist", "de", "accuracy")
    paired = compare(a, ">", b)
    assert paired.paired == 5 and paired.verdict == "reproduced"
    assert paired.difference == pytest.approx(0.102)
    ratio = compare(ev.table1("fashionmnist", "sge-wgd", "md_ratio"), ">", ev.table1("fashionmnist", "de", "md_ratio"))
    assert ratio.paired == 0
