"""Table 1's cells of the variant rows (the code-protocol block and the controls) beside the
paper's: ours (mean ± s.e. over n seeds) / the paper's / (ours - paper) in the paper's s.e.
(its printed ± x 2.5; n/a for the ratios, printed without one), as a Markdown table, from
``reference/results/table1_vs_paper.csv``.

    python workflow/scripts/table1_cells.py [--table reference/results/table1_vs_paper.csv]
"""

from __future__ import annotations

import argparse

import pandas as pd

METRICS = {
    "Accuracy (%)": "Accuracy (%)",
    "NLL (code: -log mean p)": "NLL (code)",
    "ECE (code: 30 bins)": "ECE (30 bins)",
    "AUROC(H)": "AUROC(H)",
    "AUROC(MD) (code: mean sd)": "AUROC(MD) (code)",
    "H_o/H_t": "H_o/H_t",
    "MD_o/MD_t (code: mean sd)": "MD_o/MD_t (code)",
}


def cells(table: pd.DataFrame) -> list[str]:
    table = table[(table.dataset == "fashionmnist") & table.method.str.contains("-code-|-wgd-lr")]
    lines = ["| method | n | " + " | ".join(METRICS.values()) + " |", "|" + " --- |" * (len(METRICS) + 2)]
    for method, rows in table.groupby("method", sort=False):
        rows = rows.drop_duplicates("metric").set_index("metric")
        out = []
        for metric in METRICS:
            r = rows.loc[metric]
            fmt = "{:.2f}" if metric == "Accuracy (%)" else "{:.3f}"
            ours = fmt.format(r.ours_mean) + (f" ± {fmt.format(r.ours_se)}" if pd.notna(r.ours_se) else "")
            if pd.isna(r.paper_mean):
                out.append(ours)
                continue
            z = f"{r.difference / r.paper_se:+.1f}" if pd.notna(r.paper_se) and r.paper_se > 0 else "n/a"
            out.append(f"{ours} / {fmt.format(r.paper_mean)} / {z}")
        lines.append(f"| {method} | {int(rows.ours_seeds.iloc[0])} | " + " | ".join(out) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default="reference/results/table1_vs_paper.csv")
    print("\n".join(cells(pd.read_csv(parser.parse_args().table))))


if __name__ == "__main__":
    main()
