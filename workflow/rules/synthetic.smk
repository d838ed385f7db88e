# Appendix G.1: particles sampling a 2-D Gaussian (Figure 2) and Neal's funnel
# (Figure F.1), and a table of how well each method matches the target moments.

# aggregate rules copy their outputs to results/last_good/ (repens.last_good)
from repens.last_good import shell as keep_last_good

SYNTHETIC_OUTPUTS = [
    "results/synthetic/metrics.csv",
    "results/synthetic/metrics.tex",
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
        spec=job_spec("synthetic"),
    shell:
        "python -m repens --threads {threads} train --spec {params.spec:q} --out {output.particles:q} > {log:q} 2>&1"


rule summarize_synthetic:
    input:
        [
            run_files("synthetic", ds, "particles.npz")
            for ds in experiment_datasets("synthetic")
        ],
    output:
        csv=report(
            "results/synthetic/metrics.csv",
            caption="../report/synthetic_metrics.rst",
            category="Synthetic sampling",
        ),
        tex="results/synthetic/metrics.tex",
    log:
        "logs/synthetic/summarize_synthetic.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens synthetic-table --labels {params.labels:q}"
            " --out-csv {output.csv:q} --out-tex {output.tex:q} {input:q} > {log:q} 2>&1"
        )


rule plot_gaussian:
    input:
        first_seed_files("synthetic", "gaussian", "particles.npz"),
    output:
        png=report(
            "results/figures/fig2_gaussian.png",
            caption="../report/fig2_gaussian.rst",
            category="Synthetic sampling",
        ),
        pdf="results/figures/fig2_gaussian.pdf",
    log:
        "logs/synthetic/plot_gaussian.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens synthetic-figure --target gaussian --labels {params.labels:q}"
            " --out-png {output.png:q} --out-pdf {output.pdf:q} {input:q} > {log:q} 2>&1"
        )


rule plot_funnel:
    input:
        first_seed_files("synthetic", "funnel", "particles.npz"),
    output:
        png=report(
            "results/figures/figF1_funnel.png",
            caption="../report/figF1_funnel.rst",
            category="Synthetic sampling",
        ),
        pdf="results/figures/figF1_funnel.pdf",
    log:
        "logs/synthetic/plot_funnel.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens synthetic-figure --target funnel --labels {params.labels:q}"
            " --out-png {output.png:q} --out-pdf {output.pdf:q} {input:q} > {log:q} 2>&1"
        )
