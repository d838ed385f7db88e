"""Table 1's training curves from the logs that convergence.csv names (repens.summaries.training_curves)."""

import csv

import pytest

from repens import cli
from repens.report.training_figures import plot_repulsion, plot_training_curves
from repens.summaries.training_curves import repulsion_ratios, summarize_repulsion, training_curves


def main(argv):
    """The workflow's command: ``python -m repens training-curves ...``."""
    return cli.main(["training-curves", *argv])


LINE = "2026-11-26 10:00:00,000 repens.train INFO step {k}/{n}  300 steps/s  train_nll={t} monitor_nll={m}"


def _log(path, *lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _convergence(path, runs):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["experiment", "dataset", "method", "seed", "converged", "log", "row_converged"])
        writer.writeheader()
        writer.writerows(runs)


@pytest.fixture
def tree(tmp_path):
    search = [LINE.format(k=k, n=10000, t=9.0, m=9.0) for k in (5000, 10000)]  # hyper-DE's search: not the run
    run = [LINE.format(k=k, n=50000, t=0.3 - k / 1e6, m=0.4) for k in (2500, 5000, 7500)]
    resumed = [
        "2026-11-26 11:00:00,000 repens.train INFO resumed from x.ckpt at step 5000/50000",
        LINE.format(k=7500, n=50000, t=0.1, m=0.35),  # the resumed run's step 7500 replaces the lost one
        LINE.format(k=10000, n=50000, t=0.2, m=float("nan")),
    ]
    _log(tmp_path / "logs" / "a.log", *search, *run, *resumed)
    _log(tmp_path / "logs" / "b.log", LINE.format(k=2500, n=50000, t=0.5, m=0.6))
    base = {"experiment": "image", "dataset": "fashionmnist", "converged": "True"}
    logs = tmp_path / "logs"
    _convergence(
        tmp_path / "convergence.csv",
        [
            {**base, "method": "hyper-de", "seed": "38", "log": str(logs / "a.log"), "row_converged": "True"},
            {**base, "method": "fsvgd", "seed": "38", "log": str(logs / "b.log"), "row_converged": "False"},
            {**base, "method": "fsvgd", "seed": "39", "log": str(logs / "gone.log"), "row_converged": "False"},
            {**base, "experiment": "uci", "method": "de", "seed": "42", "log": str(logs / "b.log")},
        ],
    )
    return tmp_path


def test_the_run_of_each_log_its_resumed_steps_replacing_the_lost_ones(tree):
    curves = training_curves(tree / "convergence.csv")
    hyper = curves[(curves["method"] == "hyper-de") & (curves["curve"] == "training NLL")]
    assert list(hyper["step"]) == [2500, 5000, 7500, 10000]  # the search's steps left out
    assert list(hyper["value"]) == pytest.approx([0.2975, 0.295, 0.1, 0.2])
    held_out = curves[(curves["method"] == "hyper-de") & (curves["curve"] == "held-out NLL")]
    assert list(held_out["step"]) == [2500, 5000, 7500]  # a NaN is not drawn
    assert set(curves["method"]) == {"hyper-de", "fsvgd"}  # the UCI run is not Table 1's
    assert set(curves.loc[curves["method"] == "fsvgd", "seed"]) == {38}  # a missing log is skipped
    assert not curves.loc[curves["method"] == "fsvgd", "row_converged"].any()
    assert curves.loc[curves["method"] == "hyper-de", "row_converged"].all()


def test_the_figure_is_written_with_runs_and_without(tree, capsys):
    out = tree / "curves.png"
    assert main(["--convergence", str(tree / "convergence.csv"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "2 runs of 2 methods" in capsys.readouterr().out
    empty = training_curves(tree / "convergence.csv", dataset="cifar10")
    assert empty.empty
    plot_training_curves(empty, tree / "empty.png")
    assert (tree / "empty.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


REPULSIVE = LINE + " repulsion={r}"
ADAM = REPULSIVE + " repulsion_adam={a}"


@pytest.fixture
def repulsive(tmp_path):
    logs = tmp_path / "logs"
    _log(
        logs / "s38.log", *[REPULSIVE.format(k=k, n=50000, t=0.3, m=0.4, r=r) for k, r in ((2500, 1e-9), (5000, 3e-9))]
    )
    _log(
        logs / "s39.log",
        *[ADAM.format(k=k, n=50000, t=0.3, m=0.4, r=r, a=a) for k, r, a in ((2500, 2e-8, 0.05), (5000, 4e-8, 0.07))],
    )
    _log(logs / "old.log", LINE.format(k=2500, n=50000, t=0.3, m=0.4))  # written before the diagnostic
    _log(logs / "de.log", LINE.format(k=2500, n=50000, t=0.3, m=0.4))  # no repulsion term
    base = {"experiment": "image", "dataset": "fashionmnist", "converged": "True", "row_converged": "True"}
    _convergence(
        tmp_path / "convergence.csv",
        [
            {**base, "method": "svgd", "seed": "38", "log": str(logs / "s38.log")},
            {**base, "method": "svgd", "seed": "39", "log": str(logs / "s39.log")},
            {**base, "method": "svgd", "seed": "40", "log": str(logs / "old.log")},
            {**base, "method": "de", "seed": "38", "log": str(logs / "de.log")},
        ],
    )
    return tmp_path


def test_the_repulsion_diagnostic_is_read_and_summarised_per_method(repulsive):
    ratios = repulsion_ratios(repulsive / "convergence.csv")
    assert set(ratios["method"]) == {"svgd"} and set(ratios["seed"]) == {38, 39}  # DE and the old log log none
    table = summarize_repulsion(ratios)
    assert list(zip(table["method"], table["ratio"])) == [("svgd", "before Adam"), ("svgd", "after Adam's scaling")]
    adam = table.set_index("ratio").loc["after Adam's scaling"]  # seed 39 alone logged it
    assert adam["runs"] == 1 and adam["seeds"] == "39" and adam["mean"] == pytest.approx(0.06)
    summary = table.set_index("ratio").loc["before Adam"]
    assert summary["runs"] == 2 and summary["seeds"] == "38 39" and summary["points"] == 2
    assert summary["mean"] == pytest.approx((2e-9 + 3e-8) / 2)  # the mean over runs of each run's mean
    assert summary["min"] == pytest.approx(1e-9) and summary["max"] == pytest.approx(4e-8)
    assert summary["last"] == pytest.approx((3e-9 + 4e-8) / 2)
    assert summarize_repulsion(ratios.iloc[0:0]).empty


def test_the_repulsion_figure_and_csv_are_written_with_runs_and_without(repulsive, capsys):
    png, table = repulsive / "repulsion.png", repulsive / "repulsion.csv"
    args = ["--convergence", str(repulsive / "convergence.csv"), "--out", str(repulsive / "curves.png")]
    assert main([*args, "--repulsion-png", str(png), "--repulsion-csv", str(table)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table.read_text().splitlines()[1].startswith("svgd,before Adam,2,38 39,")
    assert "repulsion diagnostic: 2 runs of 1 methods" in capsys.readouterr().out
    plot_repulsion(repulsion_ratios(repulsive / "convergence.csv", dataset="cifar10"), repulsive / "empty.png")
    assert (repulsive / "empty.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
