"""The reference tree's kept tables, the rebuild check and the results page."""

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from repens.core.variants import expand_variants
from repens.pipeline.config import paper_seeds
from repens.report import results_page
from repens.report.answers import VERDICT_ORDER
from repens.report.claims import DIFFERS, FALSE_ON_PAPER
from repens.report.results_page import check, inventory, publish, write_page

ROOT = Path(__file__).resolve().parents[2]


def _write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _table1_vs_paper(path: Path, n: int = 1) -> None:
    rows = []
    for method, label in (("de", "Deep ensemble"), ("svgd", "SVGD")):
        for metric, ours, paper, se in (("AUROC(H)", 0.961, 0.958, 0.001), ("Accuracy (%)", 91.0, 91.122, 0.013)):
            rows.append(
                {
                    "dataset": "fashionmnist",
                    "method": method,
                    "label": label,
                    "metric": metric,
                    "ours_mean": ours,
                    "ours_se": "nan" if n == 1 else 0.002,
                    "ours_seeds": n,
                    "paper_mean": paper,
                    "paper_error": se,
                    "paper_se": se * 2.5,
                    "difference": ours - paper,
                    "difference_in_errors": (ours - paper) / (se * 2.5),
                    "error_basis": "the paper's only: one seed of ours, its spread not measured yet",
                }
            )
    _write_csv(path, rows)


def test_publish_then_check_agree_and_catch_a_changed_cell(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    _table1_vs_paper(results / "table1_vs_paper.csv")
    (results / "table1_vs_paper.csv.provenance.json").write_text("{}")
    (results / "figures").mkdir()
    (results / "figures" / "fig2_gaussian.png").write_bytes(b"png")
    (results / "unrelated.csv").write_text("a\n1\n")
    copied = publish(results, reference)
    kept = reference / "results"
    assert {p.relative_to(kept).as_posix() for p in copied} == {
        "table1_vs_paper.csv",
        "table1_vs_paper.csv.provenance.json",
        "figures/fig2_gaussian.png",
        "runs.json",
    }
    assert check(results, reference) == []

    # a change within the tolerance is the same number; beyond it, a difference naming the cell
    text = (results / "table1_vs_paper.csv").read_text()
    (results / "table1_vs_paper.csv").write_text(text.replace("0.961", repr(0.961 * (1 + results_page.RTOL / 10))))
    assert check(results, reference) == []
    (results / "table1_vs_paper.csv").write_text(text.replace("0.961", "0.962"))
    problems = check(results, reference)
    assert len(problems) == 2 and all("ours_mean" in p and "line" in p for p in problems)


def test_check_names_missing_tables_rows_and_nan_mismatches(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    _write_csv(
        results / "toy" / "distance_to_hmc.csv", [{"method": "de", "w_mean": "nan"}, {"method": "svgd", "w_mean": 1.0}]
    )
    publish(results, reference)
    _write_csv(results / "toy" / "distance_to_hmc.csv", [{"method": "de", "w_mean": 0.5}])
    assert check(results, reference) == ["toy/distance_to_hmc.csv: 3 rows kept, 2 built"]
    _write_csv(
        results / "toy" / "distance_to_hmc.csv", [{"method": "de", "w_mean": 0.5}, {"method": "svgd", "w_mean": 1.0}]
    )
    assert check(results, reference) == ["toy/distance_to_hmc.csv: line 2, w_mean: kept 'nan', built '0.5'"]
    (results / "toy" / "distance_to_hmc.csv").unlink()
    assert "not built" in check(results, reference)[0]
    assert "no tables kept" in check(results, tmp_path / "empty")[0]


def test_publish_replaces_what_was_kept_and_refuses_an_empty_rebuild(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    _write_csv(results / "synthetic" / "metrics.csv", [{"a": 1}])
    _write_csv(results / "table1.csv", [{"a": 1}])
    publish(results, reference)
    (results / "table1.csv").unlink()
    # a rebuild that failed part way drops nothing kept: refused, the kept files as they were
    with pytest.raises(FileExistsError, match=r"lacks 1 file\(s\) kept in .*\(table1.csv\): did the rebuild fail"):
        publish(results, reference)
    assert (reference / "results" / "table1.csv").exists()
    from repens.cli import main

    argv = ["reference", "publish", "--results", str(results), "--reference", str(reference)]
    assert main(argv) == 2 and (reference / "results" / "table1.csv").exists()  # one line, exit 2
    publish(results, reference, allow_drop=True)
    assert not (reference / "results" / "table1.csv").exists()
    assert (reference / "results" / "synthetic" / "metrics.csv").exists()
    with pytest.raises(FileNotFoundError, match="none of the tables"):
        publish(tmp_path / "nothing", reference)
    assert (reference / "results" / "synthetic" / "metrics.csv").exists()  # kept as it was


def _job(reference: Path, rel: str, torch: str = "2.14.1", cpu_s: float = 3600.0, device: str = "cpu") -> None:
    path = reference / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    prov = {"torch": torch, "cpu": "Some CPU", "device": device, "git_commit": "abcdef0123"}
    path.write_text(json.dumps({"provenance": prov}))
    (path.parent / "benchmark.tsv").write_text(f"s\tcpu_time\n180.0\t{cpu_s}\n")


def test_inventory_counts_runs_against_the_paper_grid():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp)
        _job(reference, "image/fashionmnist/de/seed38/metrics.json")
        _job(reference, "image/fashionmnist/svgd/seed38/metrics.json", cpu_s=7200.0, device="cpu (x86_64)")
        _job(reference, "image/fashionmnist/kde-wgd/seed38/metrics.json", cpu_s=150.0, device="Some GPU")
        rows = {(r["experiment"], r["dataset"]): r for r in inventory(reference, config, paper_seeds(config))}
    image = config["experiments"]["image"]
    fm = rows[("image", "fashionmnist")]
    assert fm["runs"] == 3 and fm["grid"] == len(image["methods"]) * len(config["seeds"])
    assert fm["methods"] == ["de", "kde-wgd", "svgd"] and fm["seeds"] == [38]
    assert fm["cpu_hours"] == pytest.approx(3.0) and fm["torch"] == ["2.14.1"] and fm["commits"] == ["abcdef0"]
    # a GPU run: its wall time in GPU-hours (not its host's CPU time), its GPU as the machine
    assert fm["gpu_hours"] == pytest.approx(180.0 / 3600) and fm["cpu"] == ["Some CPU", "Some GPU"]
    assert rows[("image", "cifar10")]["runs"] == 0 and "GPU" in rows[("image", "cifar10")]["why"]
    toy = rows[("toy", "regression")]
    assert toy["grid"] == (len(config["experiments"]["toy"]["methods"]) + 1) * len(
        config["experiments"]["toy"]["seeds"]
    )


def test_page_shows_each_cell_beside_the_paper_and_what_is_not_run(tmp_path):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    reference = tmp_path / "reference"
    _job(reference, "image/fashionmnist/de/seed38/metrics.json")
    _table1_vs_paper(reference / "results" / "table1_vs_paper.csv")
    (reference / "results" / "claims.md").write_text("# Claim scorecard\n\n2 claims: ...\n\n## Verdict rule\n")
    out = tmp_path / "docs" / "results.md"
    text = write_page(reference, config, paper_seeds(config), out)
    assert out.read_text() == text
    assert "| fashionmnist | Deep ensemble | 1 | 0.961 vs 0.958 ± 0.003 (+1.2) |" in text
    assert "by the paper's alone where we have one seed (its spread not measured yet)" in text
    assert "(../reference/results/table1_vs_paper.csv)" in text
    assert "image / cifar10: " in text and "needs a GPU" in text
    assert "### Verdict rule" in text  # the scorecard's headings sit below the page's
    assert "Figures 1 and 3" in text and "Not run at the paper's settings yet" in text
    assert write_page(reference, config, paper_seeds(config), out) == text  # the same tree, the same page


def _campaign():
    spec = importlib.util.spec_from_file_location("campaign", ROOT / "workflow" / "scripts" / "campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_campaign_queues_follow_the_paper_results_order():
    campaign = _campaign()
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    expand_variants(config)  # as the campaign reads it: de-code-protocol is a variant's method
    image = campaign.build_queue(ROOT, "image")
    methods = config["experiments"]["image"]["methods"]
    table = (ROOT / "workflow" / "resources" / "table1_paper.csv").read_text()
    in_paper = {line.split(",")[1] for line in table.splitlines()[1:] if line.startswith("fashionmnist,")}
    paper = [m for m in methods if m in in_paper]
    protocol = [f"{m}-code-protocol" for m in paper]  # the block the claims are scored on
    others = [m for m in methods if m not in in_paper and m not in protocol]
    assert len(paper) == 10 and {"anchored", "dle", "drle", "de-code-wgd-lr"} <= set(others)
    assert set(protocol) <= set(methods) and config["experiments"]["image"]["paper_protocol"] == "code-protocol"
    labels = [label for label, _ in image]
    seed38 = [f"image fashionmnist {m} seed 38" for m in (*protocol, *paper, *others)]
    assert labels[: len(methods)] == seed38
    # then every further seed of the scored block, before any further seed of the text's rows
    later = [f"image fashionmnist {m} seed {s}" for s in config["seeds"][1:] for m in protocol]
    assert labels[len(methods) : len(methods) + len(later)] == later
    assert labels[len(methods) + len(later)] == f"image fashionmnist {paper[0]} seed 39"
    assert len(image) == len(set(labels)) == len(methods) * len(config["seeds"])
    assert image[0][1] == ("image/fashionmnist/de-code-protocol/seed38/metrics.json",)
    toy = campaign.build_queue(ROOT, "toy")
    assert toy[0] == ("toy regression hmc seed 42", ("toy/regression/hmc/seed42/predictions.npz",))
    assert toy[10][0] == "toy regression de" and len(toy[10][1]) == 5
    assert campaign.log_of("toy/regression/de/seed42/predictions.npz") == Path("logs/toy/regression/de/seed42.log")


def test_campaign_items_run_on_the_threads_asked_for_every_training_rule():
    import argparse
    import re

    campaign = _campaign()
    rules = ROOT / "workflow" / "rules"
    threaded = set()
    for smk in rules.glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t].*\n|\n)*)", smk.read_text(), re.M):
            if re.search(r"^\s+threads:", body, re.M):
                threaded.add(name)
    assert threaded == set(campaign.TRAINING_RULES)
    args = argparse.Namespace(
        workdir=str(ROOT), reference="reference", lane=["image"], threads=2, nice=10, config=["a=b"], collect=False
    )
    cmd = campaign.Campaign(args).command(["results/x.json"])
    assert cmd[:6] == ["nice", "-n", "10", "snakemake", "results/x.json", "-c2"]
    assert cmd[cmd.index("--config") + 1 : cmd.index("--set-threads")] == ["scale=paper", "a=b"]
    assert cmd[cmd.index("--set-threads") + 1 :] == [f"{r}=2" for r in campaign.TRAINING_RULES]


def test_publish_lists_the_runs_the_tables_rest_on_and_check_sees_them_change(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    _write_csv(results / "table1.csv", [{"a": 1}])
    for seed in (38, 39):
        _job(reference, f"image/fashionmnist/de/seed{seed}/metrics.json")
    built = results / "image/fashionmnist/de/seed38/metrics.json"
    built.parent.mkdir(parents=True)
    built.write_bytes((reference / "image/fashionmnist/de/seed38/metrics.json").read_bytes())
    publish(results, reference)  # seed 39 is in the tree but the rebuild did not read it
    runs = results_page.published_runs(reference)
    assert list(runs) == ["image/fashionmnist/de/seed38/metrics.json"]
    assert results_page.tree_runs(reference) == [f"image/fashionmnist/de/seed{s}/metrics.json" for s in (38, 39)]
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert [r["runs"] for r in inventory(reference, cfg, paper_seeds(cfg)) if r["dataset"] == "fashionmnist"] == [1]
    assert check(results, reference) == []
    _job(reference, "image/fashionmnist/de/seed38/metrics.json", torch="other")
    assert check(results, reference) == [
        "image/fashionmnist/de/seed38/metrics.json: changed since the kept tables were built from it (its SHA-256 "
        f"is not the one in {reference / 'results' / 'runs.json'})"
    ]


def test_readme_headline_matches_the_published_scorecard():
    """The README's first screen states the scorecard's verdict counts; they are those of
    the published claims.csv (so a publish that changes them must update the README)."""
    import collections
    import csv
    import re

    rows = list(csv.DictReader((ROOT / "reference" / "results" / "claims.csv").open()))
    counts = collections.Counter(r["verdict"] for r in rows)
    head = " ".join((ROOT / "README.md").read_text().splitlines()[:30])
    m = re.search(
        r"(\d+) of (\d+) claims reproduced, (\d+)\s+contradicted, (\d+)\s+inconclusive, (\d+)\s+with too few\s+seeds,"
        r"\s+(\d+)\s+not run",
        head,
    )
    assert m, "README's first 30 lines must state the scorecard's verdict counts"
    stated = tuple(int(g) for g in m.groups())
    assert stated == (
        counts["reproduced"],
        len(rows),
        counts["contradicted"],
        counts["inconclusive"],
        counts["too few seeds"],
        counts["not run"],
    ), (stated, dict(counts))
    # and how many of the contradiction-class claims hold family-wise (the scorecard's familywise_holds)
    family = re.search(
        r"of the (\d+) claims contradicted, differing or false on the paper's numbers, (\d+) hold\s+family-wise, "
        r"and of the (\d+) contradicted, (\d+)\.",
        head,
    )
    assert family, "README's first 30 lines must state how many contradictions hold family-wise"
    judged = [r for r in rows if r["familywise_holds"]]
    contradicted = [r for r in judged if r["verdict"] == "contradicted"]
    assert tuple(int(g) for g in family.groups()) == (
        len(judged),
        sum(r["familywise_holds"] == "yes" for r in judged),
        len(contradicted),
        sum(r["familywise_holds"] == "yes" for r in contradicted),
    )


def test_page_shows_a_kept_markdown_table_and_links_only_kept_sidecars(tmp_path):
    """A table kept with its Markdown form is shown as that form (not re-rendered from the
    CSV); a provenance link appears only where the sidecar is kept."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    reference = tmp_path / "reference"
    kept = reference / "results"
    _job(reference, "uci/boston/de/seed42/metrics.json")
    _write_csv(kept / "table2_uci.csv", [{"block": "boston", "method": "de", "rmse_mean": 2.6, "rmse_se": 0.2}])
    (kept / "table2_uci.md").write_text("**Table 2**\n\n| | RMSE |\n| --- | ---: |\n| Boston DE | 2.6±0.2 |\n")
    (kept / "table2_uci.csv.provenance.json").write_text("{}")
    _write_csv(kept / "table2_vs_de.csv", [{"dataset": "boston", "method": "svgd", "diff_mean": 0.1}])
    text = write_page(reference, config, paper_seeds(config), tmp_path / "docs" / "results.md")
    assert "| Boston DE | 2.6±0.2 |" in text and "| boston | de | 2.600 |" not in text
    assert "(provenance: [`table2_uci.csv.provenance.json`]" in text
    assert "Also kept: [`table2_vs_de.csv`](../reference/results/table2_vs_de.csv)" in text
    assert "table2_vs_de.csv.provenance.json" not in text


def test_the_committed_results_page_links_only_to_files_that_exist():
    import re

    page = ROOT / "docs" / "results.md"
    targets = re.findall(r"\]\(([^)#]+)\)", page.read_text())
    assert targets
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, missing


def test_page_shows_which_table_rows_converged(tmp_path):
    """The kept convergence.csv's row verdicts: Table 1 row by row (with the runs failing
    their own test and, for an unconverged row, why), Table 2 counted per data set."""
    from repens.summaries.convergence import CONVERGENCE_COLUMNS

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    reference = tmp_path / "reference"
    _job(reference, "image/fashionmnist/de/seed38/metrics.json")

    def run(experiment, dataset, method, seed, own, row, why=""):
        values = (experiment, dataset, method, seed, own, "r", "", row, why)
        return dict(zip(CONVERGENCE_COLUMNS, values, strict=True))

    _write_csv(
        reference / "results" / "convergence.csv",
        [
            run("image", "fashionmnist", "de", 38, "False", "True", "monitor_nll mean drift ... <= tol"),
            run("image", "fashionmnist", "de", 39, "True", "True", "monitor_nll mean drift ... <= tol"),
            run("image", "fashionmnist", "fsvgd", 38, "False", "False", "seed38: late degradation: x; y"),
            run("uci", "boston", "de", 42, "True", "True", "1 run(s) converged"),
            run("uci", "boston", "dle", 42, "False", "False", "seed42: under-fit"),
        ],
    )
    text = write_page(reference, config, paper_seeds(config), tmp_path / "docs" / "results.md")
    assert "| fashionmnist | de | 2 | converged | seed 38 |  |" in text
    assert "| fashionmnist | fsvgd | 1 | **not converged** | seed 38 | seed38: late degradation: x |" in text
    assert "| boston | 1 / 2 | dle |" in text


def test_a_shown_table_whose_columns_need_words_gets_its_note_after_its_link(tmp_path):
    kept = tmp_path / "reference" / "results"
    _write_csv(kept / "table1_repulsion.csv", [{"method": "svgd", "runs": 1, "mean": 3e-8}])
    _table1_vs_paper(kept / "table1_vs_paper.csv")
    section = next(s for s in results_page.SECTIONS if s.experiment == "image")
    lines = results_page._section_lines(section, kept, Path("../reference/results"))
    repulsion = next(line for line in lines if line.startswith("Table: [`table1_repulsion.csv`]"))
    assert repulsion.endswith(": " + results_page.TABLE_NOTES["table1_repulsion.csv"])
    other = next(line for line in lines if line.startswith("Table: [`table1_vs_paper.csv`]"))
    assert other == "Table: [`table1_vs_paper.csv`](../reference/results/table1_vs_paper.csv)"  # no note, no sidecar
    assert set(results_page.TABLE_NOTES) <= {rel for s in results_page.SECTIONS for rel in s.tables}


def test_a_scorecard_at_a_variants_settings_is_published_and_shown_before_the_main_one(tmp_path):
    """``claims_<variant>.md`` / ``.csv`` (config claims_variants) are kept by publish and
    shown as a section of their own ahead of the claim scorecard, without a second verdict rule."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    results, reference = tmp_path / "results", tmp_path / "reference"
    _job(reference, "image/fashionmnist/de/seed38/metrics.json")
    _table1_vs_paper(results / "table1_vs_paper.csv")
    (results / "claims.md").write_text("# Claim scorecard\n\n1 claim: 1 reproduced.\n\n## Verdict rule\n\nThe rule.\n")
    variant = (
        "# Claim scorecard: Table 1's claims at the variant v\n\n1 claim: 1 not run.\n\n## Verdict rule\n\nAgain.\n"
    )
    (results / "claims_v.md").write_text(variant)
    _write_csv(results / "claims_v.csv", [{"claim": "c", "verdict": "not run"}])
    kept = [p.name for p in publish(results, reference)]
    assert {"claims_v.md", "claims_v.csv"} <= set(kept)
    text = write_page(reference, config, paper_seeds(config), tmp_path / "docs" / "results.md")
    at_variant = text.index("## Claim scorecard: Table 1's claims at the variant v")
    assert at_variant < text.index("## Claim scorecard\n") and "1 claim: 1 not run." in text
    assert text.count("### Verdict rule") == 1 and "Again." not in text
    assert not check(results, reference)


def test_claims_variants_must_name_variants():
    from repens.pipeline.config import ConfigError, check_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = "paper"
    config["experiments"]["image"]["claims_variants"] = ["code-protocol", "nope"]
    expand_variants(config)
    with pytest.raises(ConfigError, match=r"experiments\.image\.claims_variants\[1\]: 'nope' is not one of"):
        check_config(config)


def test_the_paper_protocol_must_name_a_variant():
    from repens.pipeline.config import ConfigError, check_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = "paper"
    assert config["experiments"]["image"]["paper_protocol"] == "code-protocol"
    config["experiments"]["image"]["paper_protocol"] = "code-protocl"
    expand_variants(config)
    with pytest.raises(ConfigError, match=r"experiments\.image\.paper_protocol: 'code-protocl' is not one of"):
        check_config(config)


def test_page_leads_with_what_held_why_table1_differs_and_what_the_repulsion_does(tmp_path):
    """The first sections answer: the scorecard by verdict class (every claim once, in its
    class, with the protocol it was scored at), then Table 1's two protocols beside the
    paper, then the repulsion's size and controls; provenance and detailed tables after."""
    import csv

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    text = write_page(ROOT / "reference", config, paper_seeds(config), tmp_path / "docs" / "results.md")
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads[:4] == [
        "## What held",
        "## Why Table 1 differs from the paper",
        "## What the repulsion does",
        "## How this page is made",
    ], heads
    held = text.split("## What held", 1)[1].split("\n## ", 1)[0]
    rows = [
        r for r in csv.DictReader((ROOT / "reference" / "results" / "claims.csv").open()) if r["kind"] != "diagnostic"
    ]
    claims = [r for r in sorted(rows, key=lambda r: VERDICT_ORDER.index(r["verdict"]))]
    group, seen = "", []
    for line in held.splitlines():
        if line.startswith("**"):
            group = line[2:].split(" (", 1)[0].lower()
        elif line.startswith("- "):
            seen.append((group, line))
    assert len(seen) == len(claims)
    for (group, line), row in zip(seen, claims):
        assert group == row["verdict"], (line, row["verdict"])
        assert (row.get("title") or row["claim"]) in line
        family = f" · {row['familywise']}" if row.get("familywise") else ""
        assert line.endswith(f"· *{row['protocol'].split(' (')[0]}*{family}"), line
        assert bool(family) == (row["verdict"] in ("contradicted", FALSE_ON_PAPER, DIFFERS)), line
    why = text.split("## Why Table 1 differs from the paper", 1)[1].split("\n## ", 1)[0]
    protocols = why.split("A control of the protocol", 1)[0]
    assert protocols.count("\n| ") == 2 + 10  # header, rule, the paper's ten FashionMNIST rows


def test_a_control_of_the_protocol_is_shown_beside_the_row_it_changes():
    """A code-protocol row trained again with one setting changed (f-SVGD on logits) gets a
    table of its own under the protocols: its accuracy against the paper's row, and the
    compared row's difference from it, paired by seed over the seeds both have, with an s.e.
    from two seeds in common on."""
    import pandas as pd

    from repens.report.answers import protocol_lines

    def row(method: str, accuracies: dict[int, float]) -> dict:
        paper, error = 89.884, 0.037 * 2.5
        mean = sum(accuracies.values()) / len(accuracies)
        return {
            "dataset": "fashionmnist",
            "method": method,
            "metric": "Accuracy (%)",
            "ours_mean": mean,
            "ours_seeds": len(accuracies),
            "ours_se": 0.3 if len(accuracies) > 1 else float("nan"),
            "paper_mean": paper,
            "difference_in_errors": (mean - paper) / error,
        }

    def page(accuracies: dict[str, dict[int, float]]) -> str:
        vs_paper = pd.DataFrame([row(m, a) for m, a in accuracies.items()])
        runs = pd.DataFrame(
            [
                {"dataset": "fashionmnist", "method": m, "seed": seed, "accuracy": acc}
                for m, a in accuracies.items()
                for seed, acc in a.items()
            ]
        )
        return "\n".join(protocol_lines(vs_paper, "code-protocol", runs))

    accuracies = {"fsvgd": {38: 85.5, 39: 85.7}, "fsvgd-code-protocol": {38: 83.8, 39: 84.0, 40: 83.9}}
    assert "A control of the protocol" not in page(accuracies)
    accuracies["fsvgd-code-logits"] = {38: 89.7, 39: 89.8, 41: 89.9}
    line = next(line for line in page(accuracies).splitlines() if line.startswith("| fsvgd-code-logits |"))
    assert "| 89.8 (3; -0.9) |" in line  # its accuracy, and its difference from the paper's row in errors
    # seeds 38 and 39 in common: differences -5.9 and -5.8, mean -5.85, sd 0.0707, s.e. 0.05
    assert line.endswith("| fsvgd-code-protocol 83.90 (3): -5.85 ± 0.05, paired over 2 seeds |"), line
    accuracies["fsvgd-code-logits"] = {38: 89.7, 41: 89.9}
    assert "fsvgd-code-protocol 83.90 (3): -5.90 (fewer than two seeds in common: no s.e.) |" in page(accuracies)
    accuracies["fsvgd-code-logits"] = {41: 89.9}
    assert "fsvgd-code-protocol 83.90 (3): -6.00 (a single seed: no s.e.) |" in page(accuracies)
    # seeds 38 and 39 both differ by -5.9 (counted in test images): no spread, no interval
    accuracies["fsvgd-code-logits"] = {38: 89.7, 39: 89.9}
    line = next(line for line in page(accuracies).splitlines() if line.startswith("| fsvgd-code-logits |"))
    assert line.endswith(
        "| fsvgd-code-protocol 83.90 (3): -5.90 in each of the 2 seeds in common (no spread: no interval) |"
    ), line


def test_a_paired_difference_is_the_mean_of_the_seeds_differences_with_its_standard_error():
    from repens.report.answers import paired_difference

    a, b = {1: 3.0, 2: 5.0, 3: 4.0, 9: 7.0}, {1: 1.0, 2: 2.0, 3: 3.0, 4: 0.0}
    mean, se, k = paired_difference(a, b)  # differences 2, 3, 1 over the seeds in common
    assert (mean, k) == (2.0, 3) and se == pytest.approx(1.0 / 3**0.5)
    assert paired_difference({1: 1.0, 2: 2.0}, {2: 1.0}) is None


def test_the_repulsions_size_is_given_per_protocol_over_the_papers_rows_only(tmp_path):
    """A control (another setting, another row name) never enters a protocol's range: here
    the controls hold both extremes and what would be the G.4 rows' only after-Adam value."""
    import pandas as pd

    from repens.report.answers import _repulsion_size_lines

    vs_paper = pd.DataFrame(
        [
            {"method": m, "paper_method": p, "label": label}
            for m, p, label in (
                ("svgd", "svgd", "SVGD"),
                ("kde-wgd", "kde-wgd", "kde-WGD"),
                ("svgd-code-protocol", "svgd", "SVGD (authors' code)"),
                ("kde-wgd-code-protocol", "kde-wgd", "kde-WGD (authors' code)"),
                ("svgd-code-num-train", "svgd", "SVGD (authors' code, repulsion x N)"),
                ("svgd-code-logits", "svgd", "SVGD (authors' code, on logits)"),
                ("drle", None, "DRLE"),
            )
        ]
    )
    rows = [
        ("svgd", "before Adam", 3e-8),
        ("kde-wgd", "before Adam", 8e-10),
        ("svgd-code-protocol", "before Adam", 1.5e-6),
        ("svgd-code-protocol", "after Adam's scaling", 1e-5),
        ("kde-wgd-code-protocol", "before Adam", 8e-7),
        ("kde-wgd-code-protocol", "after Adam's scaling", 5e-2),
        ("svgd-code-num-train", "before Adam", 1e-2),
        ("svgd-code-num-train", "after Adam's scaling", 9e-1),
        ("svgd-code-logits", "after Adam's scaling", 2.1e-5),
        ("drle", "before Adam", 1e-20),
    ]
    csv_path = tmp_path / "table1_repulsion.csv"
    pd.DataFrame(rows, columns=["method", "ratio", "mean"]).to_csv(csv_path, index=False)
    text = _repulsion_size_lines(csv_path, vs_paper, "code-protocol", Path("r"))[0]
    assert "before Adam 8.0e-07 (kde-WGD) to 1.5e-06 (SVGD) over 2 rules at the authors' code's protocol" in text
    assert "after Adam's scaling 1.0e-05 (SVGD) to 5.0e-02 (kde-WGD) over 2 rules at the authors' code's" in text
    assert "before Adam 8.0e-10 (kde-WGD) to 3.0e-08 (SVGD) over 2 rules at G.4's text" in text
    assert "after Adam's scaling not logged by the runs at G.4's text" in text
    assert not any(v in text for v in ("1.0e-02", "9.0e-01", "2.1e-05", "1.0e-20"))
    assert _repulsion_size_lines(tmp_path / "absent.csv", vs_paper, "code-protocol", Path("r")) == []


def test_scorecard_counts_every_verdict_class_in_the_page_order():
    from repens.report.claims import CLAIM_VERDICTS

    assert sorted(VERDICT_ORDER) == sorted(CLAIM_VERDICTS)


def test_readme_table1_sentence_matches_the_published_table():
    """The README's sentence on Table 1 (how many of the paper's FashionMNIST accuracy rows
    each protocol lands within 3 and within 6 of the paper's errors, and how far G.4's text
    falls short) is that of the published table1_vs_paper.csv, so a publish that moves a
    row across a line must update it."""
    import re

    import pandas as pd

    table = pd.read_csv(ROOT / "reference" / "results" / "table1_vs_paper.csv")
    acc = table[(table.dataset == "fashionmnist") & (table.metric == "Accuracy (%)") & table.paper_mean.notna()]
    by = acc.set_index("method")
    base = [m for m in by.index if f"{m}-code-protocol" in by.index]
    code = by.loc[[f"{m}-code-protocol" for m in base], "difference_in_errors"].abs()
    text = by.loc[base, "difference_in_errors"].abs()
    short = by.loc[base, "paper_mean"] - by.loc[base, "ours_mean"]
    words = {"none": 0, "one": 1, "two": 2, "three": 3}
    head = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(
        r"in accuracy, (\d+) of the paper's (\d+) rows are within 3 of its errors at the code's protocol "
        r"\((\d+) within 6[;,][^)]*\), (\w+) at G\.4's text, where every row falls ([\d.]+)-([\d.]+) points short",
        head,
    )
    assert m, "README must state how many of Table 1's accuracy rows land within 3 and 6 of the paper's errors"
    assert (int(m[1]), int(m[2]), int(m[3])) == (int((code <= 3).sum()), len(base), int((code <= 6).sum()))
    assert words.get(m[4], -1) == int((text <= 3).sum())
    assert (m[5], m[6]) == (f"{short.min():.1f}", f"{short.max():.1f}")


def test_claims_doc_counts_match_the_published_tree():
    """docs/claims.md's paragraph on the committed reference tree states the scorecard's
    verdict counts and how many runs and rows converged; they are those of the published
    claims.csv and convergence.csv, so a publish that moves one must update the paragraph."""
    import re

    import pandas as pd

    from repens.report.claims import DIFFERS, FALSE_ON_PAPER, NOT_TESTABLE, TOO_FEW_SEEDS

    claims = pd.read_csv(ROOT / "reference" / "results" / "claims.csv")
    runs = pd.read_csv(ROOT / "reference" / "results" / "convergence.csv")
    text = " ".join((ROOT / "docs" / "claims.md").read_text().split())
    m = re.search(
        r"(\d+) claims: (\d+) reproduced, (\d+) contradicted \((\d+) of them family-wise\), (\d+) inconclusive, "
        r"(\d+) too few seeds, (\d+) not run, (\d+) differ under another protocol, (\d+) false on the paper's own "
        r"numbers \((\d+) family-wise\), (\d+) not testable",
        text,
    )
    assert m, "docs/claims.md must state the reference tree's verdict counts"
    v = claims.verdict.value_counts()
    holds = claims[claims.familywise_holds == "yes"].verdict.value_counts()
    assert tuple(int(g) for g in m.groups()) == (
        len(claims),
        v.get("reproduced", 0),
        v.get("contradicted", 0),
        holds.get("contradicted", 0),
        v.get("inconclusive", 0),
        v.get(TOO_FEW_SEEDS, 0),
        v.get("not run", 0),
        v.get(DIFFERS, 0),
        v.get(FALSE_ON_PAPER, 0),
        holds.get(FALSE_ON_PAPER, 0),
        v.get(NOT_TESTABLE, 0),
    )
    m = re.search(
        r"Of its (\d+) Table 1 / Table 2 runs \([^)]*\), (\d+) converged, (\d+) did not and (\d+) are not judged "
        r"\(.*?\), and of its (\d+) rows (\d+) converged, (\d+) did not and (\d+) are not judged",
        text,
    )
    assert m, "docs/claims.md must state how many of the tree's runs and rows converged"

    def split(flags: pd.Series) -> tuple[int, int, int, int]:
        flags = flags.map({True: "y", False: "n", "True": "y", "False": "n"})
        return len(flags), int((flags == "y").sum()), int((flags == "n").sum()), int(flags.isna().sum())

    rows = runs.drop_duplicates(["experiment", "dataset", "method"])
    assert tuple(int(g) for g in m.groups()) == split(runs.converged) + split(rows.row_converged)


def test_publish_keeps_a_table_rebuilt_equal_from_the_same_inputs_and_replaces_one_that_changed(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    table, sidecar = results / "table1_vs_paper.csv", results / "table1_vs_paper.csv.provenance.json"
    _table1_vs_paper(table)
    inputs = {"inputs": [{"path": "results/image/x/metrics.json"}], "provenance": {"cpu": "Intel", "git_commit": "a"}}
    sidecar.write_text(json.dumps(inputs))
    publish(results, reference)
    kept = reference / "results" / "table1_vs_paper.csv"
    first = kept.read_bytes()

    # another CPU: the last digits of one cell and the sidecar's own provenance block move
    text = table.read_text()
    table.write_text(text.replace("0.961", repr(0.961 * (1 + results_page.RTOL / 10))))
    sidecar.write_text(json.dumps({**inputs, "provenance": {"cpu": "AMD", "git_commit": "b"}}))
    publish(results, reference)
    assert kept.read_bytes() == first
    assert json.loads((reference / "results" / sidecar.name).read_text())["provenance"]["cpu"] == "Intel"
    assert check(results, reference) == []

    # the same cells from other inputs (a run added): the new table and sidecar replace the kept ones
    sidecar.write_text(json.dumps({"inputs": [*inputs["inputs"], {"path": "y"}], "provenance": {"cpu": "AMD"}}))
    publish(results, reference)
    assert kept.read_bytes() == table.read_bytes() != first
    assert json.loads((reference / "results" / sidecar.name).read_text())["provenance"]["cpu"] == "AMD"

    # the same inputs, a cell beyond the tolerance (a code change): replaced
    table.write_text(text.replace("0.961", "0.962"))
    publish(results, reference)
    assert "0.962" in kept.read_text()
