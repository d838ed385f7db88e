# Appendix G.1: particles sampling a 2-D Gaussian (Figure 2) and Neal's funnel
# (Figure F.1), and a table of how well each method matches the target moments.
#
# Each aggregate rule runs two steps: the pipeline step (repens.summaries.synthetic)
# computes the numbers from the runs and writes them to a file (the sample quality and
# the exact-iid noise floor: results/synthetic/sample_quality.json, which the claim
# scorecard reads too; a figure's exact samples and log-density grid), then the report
# (python -m repens.report) formats and draws from that file alone.

# aggregate rules copy their outputs to results/last_good/ (repens.pipeline.last_good)
from repens.pipeline.last_good import shell as keep_last_good

SYNTHETIC_CATEGORY = "1. Synthetic targets (Appendix G.1)"

# Each figure (its file name: the paper's numbering): its target and its report label;
# one rule (plot_synthetic_figure) draws them all.
SYNTHETIC_FIGURE_SPECS = {
    "fig2_gaussian": {"target": "gaussian", "label": "Figure 2 (2-D Gaussian)"},
    "figF1_funnel": {"target": "funnel", "label": "Figure F.1 (Neal's funnel)"},
}

SYNTHETIC_OUTPUTS = [
    "results/synthetic/metrics.csv",
    "results/synthetic/metrics.tex",
    "results/synthetic/metrics.html",
    *(
        f"results/figures/{figure}.{ext}"
        for figure in SYNTHETIC_FIGURE_SPECS
        for ext in ("png", "pdf")
    ),
]


localrules:
    summarize_synthetic,
    plot_synthetic_figure,


rule train_synthetic:
    output:
        particles="results/synthetic/{target}/{method}/seed{seed}/particles.npz",
    log:
        "logs/synthetic/{target}/{method}/seed{seed}.log",
    benchmark:
        "results/synthetic/{target}/{method}/seed{seed}/benchmark.tsv"
    conda:
        "../../envs/repens.yaml"
    threads: 1
    resources:
        mem_mb=grows_with_attempt(2000),
        runtime=grows_with_attempt(30),
    params:
        attempts=attempts_log("logs/synthetic/{target}/{method}/seed{seed}.log"),
        spec=job_spec("synthetic"),
        runtime=job_runtime("synthetic"),
    shell:
        "python -m repens --threads {threads} --attempts {params.attempts:q} train --spec {params.spec:q} --runtime {params.runtime:q} --out {output.particles:q} > {log:q} 2>&1"


rule summarize_synthetic:
    input:
        [
            run_files("synthetic", ds, "particles.npz")
            for ds in experiment_datasets("synthetic")
        ],
    output:
        summary="results/synthetic/sample_quality.json",
        csv="results/synthetic/metrics.csv",
        tex="results/synthetic/metrics.tex",
        html=report(
            "results/synthetic/metrics.html",
            caption="../report/synthetic_metrics.rst",
            category=SYNTHETIC_CATEGORY,
            subcategory="Tables",
            labels={"output": "Sample quality (beyond the paper)", "format": "HTML"},
        ),
    log:
        "logs/synthetic/summarize_synthetic.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens.summaries.synthetic metrics --out {output.summary:q} {input:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} synthetic-table --summary {output.summary:q}"
            " --out-csv {output.csv:q} --out-tex {output.tex:q} --out-html {output.html:q}"
            " {input:q} >> {log:q} 2>&1"
        )


rule plot_synthetic_figure:
    input:
        marked_where_built(
            "plot_synthetic_figure",
            lambda wildcards: first_seed_files(
                "synthetic",
                SYNTHETIC_FIGURE_SPECS[wildcards.figure]["target"],
                "particles.npz",
            ),
        ),
    output:
        png=report(
            "results/figures/{figure}.png",
            caption="../report/synthetic_figure.rst",
            category=SYNTHETIC_CATEGORY,
            subcategory="Figures",
            labels=lambda wildcards: {
                "output": SYNTHETIC_FIGURE_SPECS[wildcards.figure]["label"],
                "format": "PNG",
            },
        ),
        pdf="results/figures/{figure}.pdf",
        data="results/synthetic/{figure}.npz",
    log:
        "logs/synthetic/plot_{figure}.log",
    wildcard_constraints:
        figure="|".join(SYNTHETIC_FIGURE_SPECS),
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
        target=lambda wildcards: SYNTHETIC_FIGURE_SPECS[wildcards.figure]["target"],
    shell:
        keep_last_good(
            "python -m repens.summaries.synthetic figure-data --target {params.target} --out {output.data:q}"
            " {input:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} synthetic-figure --target {params.target}"
            " --data {output.data:q} --out-png {output.png:q} --out-pdf {output.pdf:q} {input:q} >> {log:q} 2>&1"
        )
