"""TF32 against fp32 on one GPU: does TF32 move a Table 1 cell by more than the seed spread?

Reads the lease's check runs (``reference/checks/tf32``: DE and kde-fWGD at the authors' code's
protocol, seed 38, once with ``matmul_precision: high`` (TF32 matmuls) and once with
``highest`` (fp32), side by side on the same GPU from the same commit), and the reference
tree's runs of the same methods at that protocol. For each metric it prints:

- ``tf32 - fp32``: the one setting that differs;
- ``fp32 - earlier``: the same seed and spec at fp32 from an earlier commit or another device
  (the float path alone, where the reference tree holds that seed);
- ``seed s.d.``: the standard deviation over the reference tree's seeds of the same method.

    python benchmarks/tf32_check.py [--checks reference/checks/tf32] [--reference reference]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

METRICS = ["accuracy", "nll_code", "ece_code", "auroc_md_code", "md_ratio_code"]
METHODS = ["de", "kde-fwgd"]
SEED = 38


def metrics(path: Path) -> dict[str, float]:
    return json.loads(path.read_text())["metrics"]


def rows(checks: Path, reference: Path) -> pd.DataFrame:
    out = []
    for method in METHODS:
        folder = checks / "image/fashionmnist"
        run = {p: metrics(folder / f"{method}-code-{p}/seed{SEED}/metrics.json") for p in ("tf32", "fp32")}
        seeds = sorted((reference / f"image/fashionmnist/{method}-code-protocol").glob("seed*/metrics.json"))
        spread = pd.DataFrame([metrics(p) for p in seeds])
        earlier = next((metrics(p) for p in seeds if p.parent.name == f"seed{SEED}"), None)
        for name in METRICS:
            out.append(
                {
                    "method": method,
                    "metric": name,
                    "fp32": run["fp32"][name],
                    "tf32": run["tf32"][name],
                    "tf32 - fp32": run["tf32"][name] - run["fp32"][name],
                    "fp32 - earlier": run["fp32"][name] - earlier[name] if earlier else float("nan"),
                    "seed s.d.": spread[name].std(ddof=1) if len(spread) > 1 else float("nan"),
                    "seeds": len(spread),
                }
            )
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=Path, default=Path("reference/checks/tf32"))
    parser.add_argument("--reference", type=Path, default=Path("reference"))
    args = parser.parse_args()
    table = rows(args.checks, args.reference)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()
