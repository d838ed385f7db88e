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

SYNTHETIC_OUTPUTS = [
    "results/synthetic/metrics.csv",
    "results/synthetic/metrics.tex",
    "results/synthetic/metrics.html",
    "results/figures/fig2_gaussian.png",
    "results/figures/fig2_gaussian.pdf",
    "results/figures/figF1_funnel.png",
    "results/figures/figF1_funnel.pdf",
]


localrules:
    summarize_synthetic,
    plot_gaussian,
    plot_funnel,


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


rule plot_gaussian:
    input:
        first_seed_files("synthetic", "gaussian", "particles.npz"),
    output:
        png=report(
            "results/figures/fig2_gaussian.png",
            caption="../report/fig2_gaussian.rst",
            category=SYNTHETIC_CATEGORY,
            subcategory="Figures",
            labels={"output": "Figure 2 (2-D Gaussian)", "format": "PNG"},
        ),
        pdf="results/figures/fig2_gaussian.pdf",
        data="results/synthetic/gaussian_figure.npz",
    log:
        "logs/synthetic/plot_gaussian.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens.summaries.synthetic figure-data --target gaussian --out {output.data:q}"
            " {input:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} synthetic-figure --target gaussian"
            " --data {output.data:q} --out-png {output.png:q} --out-pdf {output.pdf:q} {input:q} >> {log:q} 2>&1"
        )


rule plot_funnel:
    input:
        first_seed_files("synthetic", "funnel", "particles.npz"),
    output:
        png=report(
            "results/figures/figF1_funnel.png",
            caption="../report/figF1_funnel.rst",
            category=SYNTHETIC_CATEGORY,
            subcategory="Figures",
            labels={"output": "Figure F.1 (Neal's funnel)", "format": "PNG"},
        ),
        pdf="results/figures/figF1_funnel.pdf",
        data="results/synthetic/funnel_figure.npz",
    log:
        "logs/synthetic/plot_funnel.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens.summaries.synthetic figure-data --target funnel --out {output.data:q}"
            " {input:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} synthetic-figure --target funnel"
            " --data {output.data:q} --out-png {output.png:q} --out-pdf {output.pdf:q} {input:q} >> {log:q} 2>&1"
        )
