"""Table 2 and the comparison with the seeds, from hand-made metrics files."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from repens.report.uci import compare_with_seeds, paired_differences, read_seeds, write_uci_tables

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "workflow" / "resources" / "table2_seeds.csv"


def metrics_file(path: Path, dataset: str, method: str, rmse: list[float], nll: list[float]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    splits = [{"split": k, "rmse": r, "nll": n} for k, (r, n) in enumerate(zip(rmse, nll))]
    out = path / "metrics.json"
    out.write_text(json.dumps({"job": {"dataset": dataset, "method": method, "scale": "quick"}, "splits": splits}))
    return out


def test_seed_reference_is_complete_and_cited():
    text = SEEDS.read_text()
    assert "Pearce" in text and "Table 1" in text and "Wild" in text and "poster" in text
    rows = read_seeds(SEEDS)
    for source, methods, datasets in (
        ("pearce2020_t1", {"de", "anchored"}, 9),
        ("wild2023_poster", {"de", "dle", "drle"}, 8),
        ("pearce2020_t2", {"anchored", "relu-gp"}, 9),
        ("pearce2020_t3", {"relu-gp"}, 9),
    ):
        got = [r for r in rows if r["source"] == source]
        assert {r["method"] for r in got} == methods and len(got) == len(methods) * datasets
    # like for like: only Pearce's anchored ensemble (beside our anchored ensemble as Eq. 11 and as
    # their code train it) and its ReLU GP (beside our anchored ensemble)
    like = [r for r in rows if r["like_for_like"]]
    assert {(r["method"], r["ours"]) for r in like} == {("anchored", "anchored;anchored-code"), ("relu-gp", "anchored")}
    assert all(r["what"] for r in rows)
    assert not any(r["like_for_like"] for r in rows if r["source"] == "wild2023_poster" or r["method"] == "de")


def test_a_seed_value_set_beside_several_of_our_methods_gives_a_row_each():
    records = [
        {"dataset": "wine", "method": m, "rmse": v, "nll": 1.0}
        for m, vs in (("anchored", (0.70, 0.72)), ("anchored-code", (0.62, 0.64)))
        for v in vs
    ]
    seeds = [
        {
            "source": "s",
            "dataset": "wine",
            "method": "anchored",
            "metric": "rmse",
            "mean": 0.63,
            "se": 0.01,
            "ours": "anchored;anchored-code",
        }
    ]
    rows = compare_with_seeds(records, seeds)
    assert [(r["method"], r["seed_method"]) for r in rows] == [("anchored", "anchored"), ("anchored-code", "anchored")]
    assert [round(r["ours_mean"], 10) for r in rows] == [0.71, 0.63]
    assert [r["within_error_bars"] for r in rows] == [0, 1]  # 0.71 +- 0.01 and 0.63 +- 0.01 against 0.63 +- 0.01


def test_compare_with_seeds_flags_non_overlap():
    records = [{"dataset": "wine", "method": "anchored", "rmse": v, "nll": n} for v, n in ((0.6, 1.0), (0.7, 1.2))]
    seeds = [
        {"source": "s", "dataset": "wine", "method": "anchored", "metric": "nll", "mean": 0.95, "se": 0.01},
        {"source": "s", "dataset": "wine", "method": "anchored", "metric": "rmse", "mean": 0.63, "se": 0.01},
        {"source": "p", "dataset": "wine", "method": "anchored", "metric": "nll_inferred", "mean": 5.0, "se": 1.0},
        {"source": "s", "dataset": "yacht", "method": "de", "metric": "nll", "mean": 1.0, "se": 0.1},
    ]
    out = compare_with_seeds(records, seeds)
    nll, rmse, inferred, absent = out
    assert nll["ours_mean"] == pytest.approx(1.1) and nll["ours_se"] == pytest.approx(0.1)
    assert nll["diff"] == pytest.approx(0.15) and nll["within_error_bars"] == 0  # 0.15 > 0.1 + 0.01
    assert nll["z"] == pytest.approx(0.15 / math.hypot(0.1, 0.01))
    assert rmse["within_error_bars"] == 1  # |0.65 - 0.63| < 0.05 + 0.01
    assert inferred["ours_mean"] == pytest.approx(1.1)  # the poster's metric set beside our NLL
    assert absent["ours_splits"] == 0 and absent["within_error_bars"] == ""  # no value: no verdict


def test_the_seeds_printed_precision_counts_as_error(tmp_path):
    """A seed printed 0.07 +- 0.00 only says the value lies in [0.065, 0.075]."""
    seeds_file = tmp_path / "seeds.csv"
    seeds_file.write_text("# test\nsource,dataset,method,metric,mean,se\np,kin8nm,anchored,rmse,0.07,0.00\n")
    (seed,) = read_seeds(seeds_file)
    assert seed["rounding"] == pytest.approx(0.005)
    near = [{"dataset": "kin8nm", "method": "anchored", "rmse": v} for v in (0.0680, 0.0686)]
    far = [{"dataset": "kin8nm", "method": "anchored", "rmse": v} for v in (0.0600, 0.0602)]
    assert compare_with_seeds(near, [seed])[0]["within_error_bars"] == 1
    assert compare_with_seeds(far, [seed])[0]["within_error_bars"] == 0


def test_a_seed_row_is_set_beside_the_method_it_names_in_ours():
    records = [{"dataset": "wine", "method": "anchored", "rmse": 0.6, "nll": 1.0}]
    seeds = [
        {
            "source": "g",
            "dataset": "wine",
            "method": "relu-gp",
            "metric": "nll",
            "mean": 0.92,
            "se": 0.01,
            "ours": "anchored",
            "like_for_like": 1,
        }
    ]
    (row,) = compare_with_seeds(records, seeds)
    assert row["method"] == "anchored" and row["seed_method"] == "relu-gp" and row["ours_mean"] == 1.0


def test_paired_differences_against_de_pair_the_splits():
    """Split k of a method minus split k of DE: the datasets' split-to-split spread cancels."""
    de = [
        {"dataset": "wine", "method": "de", "split": k, "rmse": r, "nll": 1.0, "repulsion_ratio_mean": 0.0}
        for k, r in enumerate((0.5, 0.9, 0.7))
    ]
    # a constant 0.01 above DE on every split, each split's level far apart: a clear difference
    svgd = [
        {
            **r,
            "method": "svgd",
            "rmse": r["rmse"] + 0.01,
            "nll": 1.0 + 0.1 * r["split"] - 0.1,
            "repulsion_ratio_mean": 1e-5,
        }
        for r in de
    ]
    # split 2 missing: only the common splits are paired
    fsvgd = [{**r, "method": "fsvgd", "rmse": r["rmse"] + d} for r, d in zip(de[:2], (0.02, -0.02))]
    out = {(r["method"], r["metric"]): r for r in paired_differences(de + svgd + fsvgd)}
    assert set(out) == {("svgd", "rmse"), ("svgd", "nll"), ("fsvgd", "rmse"), ("fsvgd", "nll")}
    rmse = out["svgd", "rmse"]
    assert rmse["diff_mean"] == pytest.approx(0.01) and rmse["diff_se"] == pytest.approx(0.0, abs=1e-12)
    assert rmse["differs"] == 1 and rmse["splits"] == 3 and rmse["repulsion_ratio_mean"] == pytest.approx(1e-5)
    nll = out["svgd", "nll"]  # diffs -0.1, 0, 0.1: mean 0, s.e. 0.1 / sqrt(3)
    assert nll["diff_mean"] == pytest.approx(0.0, abs=1e-12) and nll["diff_se"] == pytest.approx(0.1 / math.sqrt(3))
    assert nll["differs"] == 0
    far = out["fsvgd", "rmse"]  # diffs +0.02, -0.02 on the two common splits
    assert far["splits"] == 2 and far["diff_mean"] == pytest.approx(0.0, abs=1e-12)
    assert far["diff_se"] == pytest.approx(0.02) and far["differs"] == 0
    # a second DE seed pairs with nothing of the method's seed: split k of seed 43 is not split k of seed 42
    de43 = [{**r, "seed": 43, "rmse": 100.0} for r in de]
    tagged = [{**r, "seed": 42} for r in de + svgd]
    (again,) = [r for r in paired_differences(tagged + de43) if r["method"] == "svgd" and r["metric"] == "rmse"]
    assert again["splits"] == 3 and again["diff_mean"] == pytest.approx(0.01)


def test_table2_vs_seeds_html_is_wide_and_human_named(tmp_path):
    """The comparison with the seeds a person reads: one row per (dataset, our method, seed
    value), RMSE and NLL each with the seed's value, ours, Δ / s.e. and the overlap side by
    side under human names; the CSV stays long with its machine names."""
    import html

    inputs = [
        metrics_file(tmp_path / "a", "yacht", "de", [1.0, 3.0], [2.0, 2.5]),
        metrics_file(tmp_path / "b", "yacht", "anchored", [0.5, 0.7], [1.0, 1.5]),
    ]
    out = tmp_path / "out"
    write_uci_tables(
        inputs,
        ["yacht"],
        ["de", "anchored"],
        {"de": "Deep ensemble", "anchored": "Anchored ensemble"},
        SEEDS,
        out / "t.tex",
        out / "t.csv",
        None,
        out / "vs.csv",
        out_seeds_html=out / "vs.html",
    )
    page = html.unescape((out / "vs.html").read_text())
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    for raw in ("ours_mean", "seed_se", "within_error_bars", "like_for_like", "ours_splits", "pearce2020_t1"):
        assert raw not in page, raw
    for name in (">RMSE<", ">NLL<", ">seed paper<", ">ours<", ">Δ / s.e.<", ">within error bars<", ">like for like<"):
        assert name in head, name
    # yacht: DE beside Pearce's DE (NLL) and Wild's poster DE; anchored beside Pearce's anchored and ReLU GP
    assert body.count("<tr") == 4
    assert ">Pearce et al. 2020: anchored ensemble (Table 1; App. C Table 2)<" in body
    assert "Wild et al. 2023 (poster): deep ensemble (poster table; metric unnamed, read as NLL)" in body
    # anchored NLL 1.25 ± 0.25 against Pearce's 0.37 ± 0.08: one row holds seed, ours, z and overlap
    z = (1.25 - 0.37) / math.hypot(0.25, 0.08)
    assert ">0.37 ± 0.08</td>" in body and ">1.25 ± 0.25<" in body and f">+{z:.1f}<" in body
    note = page.split("<small>", 1)[1].split("</small>", 1)[0]
    assert "Scale: quick" in note and "not a reproduction" in note and "Δ / s.e. = (ours − seed)" in note
    vs = list(csv.DictReader((out / "vs.csv").open()))
    assert {"ours_mean", "seed_source", "z", "within_error_bars"} <= set(vs[0])


def test_table2_files(tmp_path):
    inputs = [
        metrics_file(tmp_path / "a", "yacht", "de", [1.0, 3.0], [2.0, 2.5]),
        metrics_file(tmp_path / "b", "yacht", "anchored", [0.5, 0.7], [1.0, 1.5]),
        metrics_file(tmp_path / "c", "wine", "de", [0.6, 0.7], [1.0, 1.2]),
    ]
    outs = {k: tmp_path / "out" / f"t.{k}" for k in ("tex", "csv", "html")}
    seeds_out = tmp_path / "out" / "vs.csv"
    write_uci_tables(
        inputs,
        ["wine", "yacht"],
        ["de", "anchored"],
        {"de": "Deep ensemble"},
        SEEDS,
        outs["tex"],
        outs["csv"],
        outs["html"],
        seeds_out,
        out_seeds_html=tmp_path / "out" / "vs.html",
        out_vs_de=tmp_path / "out" / "vs_de.csv",
        out_vs_de_html=tmp_path / "out" / "vs_de.html",
    )
    tex = outs["tex"].read_text()
    assert r"\toprule" in tex and "Deep ensemble" in tex and tex.index("Wine") < tex.index("Yacht")
    assert r"\textbf{0.600$\pm$0.100}" in tex  # yacht: anchored has the lower RMSE
    rows = list(csv.DictReader(outs["csv"].open()))
    assert [(r["block"], r["method"]) for r in rows] == [("wine", "de"), ("yacht", "de"), ("yacht", "anchored")]
    assert float(rows[1]["rmse_mean"]) == pytest.approx(2.0) and float(rows[1]["rmse_se"]) == pytest.approx(1.0)
    page = outs["html"].read_text()
    assert ">Yacht<" in page and ">0.600±0.100<" in page and "font-weight: bold" in page
    assert not (tmp_path / "out" / "t.png").exists()  # Table 2 has no PNG (PNG only for Table 1)
    # every seed value with our runs beside it, with its source (paper and table)
    assert (
        "Pearce et al. 2020: anchored ensemble (Table 1; App. C Table 2)" in (tmp_path / "out" / "vs.html").read_text()
    )
    vs = list(csv.DictReader(seeds_out.open()))
    yacht_anchored = [r for r in vs if r["dataset"] == "yacht" and r["method"] == "anchored" and r["metric"] == "nll"]
    assert float(yacht_anchored[0]["ours_mean"]) == pytest.approx(1.25)
    assert float(yacht_anchored[0]["seed_mean"]) == pytest.approx(0.37)
    vs_de = list(csv.DictReader((tmp_path / "out" / "vs_de.csv").open()))
    # yacht anchored minus DE, split by split: RMSE -0.5 and -2.3, NLL -1.0 and -1.0
    assert [(r["dataset"], r["method"], r["metric"]) for r in vs_de] == [
        ("yacht", "anchored", "rmse"),
        ("yacht", "anchored", "nll"),
    ]
    assert float(vs_de[0]["diff_mean"]) == pytest.approx(-1.4) and float(vs_de[0]["diff_se"]) == pytest.approx(0.9)
    assert vs_de[1]["differs"] == "1" and vs_de[0]["differs"] == "0" and vs_de[0]["label"] == "anchored"
    assert "split by split" in (tmp_path / "out" / "vs_de.html").read_text()
