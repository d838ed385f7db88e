# Appendix G.2 / G.3: BNN posteriors on the 1-D regression and 2-D classification
# toys (Figures 1 and 3) and how far each method's predictive is from HMC's.
#
# Each aggregate rule runs two steps: the pipeline step (repens.summaries.toy) computes
# the numbers from the prediction files and writes them to a file (the distances to HMC:
# results/toy/distances.json; a figure's predictive moments or entropies), then the
# report (python -m repens.report) formats and draws from that file alone.

# aggregate rules copy their outputs to results/last_good/ (repens.pipeline.last_good)
from repens.pipeline.last_good import shell as keep_last_good

# Each figure (its file name: the paper's numbering): its dataset and its report label;
# one rule (plot_toy_figure) draws them all.
TOY_FIGURE_SPECS = {
    "fig1_regression": {"dataset": "regression", "label": "Figure 1 (1-D regression)"},
    "fig3_classification": {
        "dataset": "classification",
        "label": "Figure 3 (2-D classification)",
    },
}
TOY_FIGURES = {
    spec["dataset"]: [f"results/figures/{figure}.png", f"results/figures/{figure}.pdf"]
    for figure, spec in TOY_FIGURE_SPECS.items()
}
TOY_TABLES = [
    "results/toy/distance_to_hmc.csv",
    "results/toy/distance_to_hmc.tex",
    "results/toy/distance_to_hmc.html",
]
TOY_OUTPUTS = [*(path for paths in TOY_FIGURES.values() for path in paths), *TOY_TABLES]


TOY_CATEGORY = "2. BNN toys against HMC (Appendix G.2, G.3)"


ruleorder: sample_hmc > train_toy


localrules:
    plot_toy_figure,
    summarize_toy,


rule train_toy:
    output:
        predictions="results/toy/{dataset}/{method}/seed{seed}/predictions.npz",
    log:
        "logs/toy/{dataset}/{method}/seed{seed}.log",
    benchmark:
        "results/toy/{dataset}/{method}/seed{seed}/benchmark.tsv"
    conda:
        "../../envs/repens.yaml"
    threads: 1
    resources:
        mem_mb=grows_with_attempt(2000),
        runtime=grows_with_attempt(120),
    params:
        attempts=attempts_log("logs/toy/{dataset}/{method}/seed{seed}.log"),
        spec=job_spec("toy"),
        runtime=job_runtime("toy"),
    shell:
        "python -m repens --threads {threads} --attempts {params.attempts:q} train --spec {params.spec:q} --runtime {params.runtime:q} --out {output.predictions:q} > {log:q} 2>&1"


rule sample_hmc:
    output:
        predictions="results/toy/{dataset}/hmc/seed{seed}/predictions.npz",
        diagnostics="results/toy/{dataset}/hmc/seed{seed}/diagnostics.json",
    log:
        "logs/toy/{dataset}/hmc/seed{seed}.log",
    benchmark:
        "results/toy/{dataset}/hmc/seed{seed}/benchmark.tsv"
    conda:
        "../../envs/repens.yaml"
    threads: 1
    resources:
        mem_mb=grows_with_attempt(4000),
        runtime=grows_with_attempt(240),
    params:
        attempts=attempts_log("logs/toy/{dataset}/hmc/seed{seed}.log"),
        spec=hmc_spec("toy"),
    shell:
        "python -m repens --threads {threads} --attempts {params.attempts:q} hmc --spec {params.spec:q} --out {output.predictions:q} > {log:q} 2>&1"


rule plot_toy_figure:
    input:
        marked_where_built(
            "plot_toy_figure",
            lambda wildcards: toy_panels(
                TOY_FIGURE_SPECS[wildcards.figure]["dataset"]
            ),
        ),
    output:
        png=report(
            "results/figures/{figure}.png",
            caption="../report/toy_figure.rst",
            category=TOY_CATEGORY,
            subcategory="Figures",
            labels=lambda wildcards: {
                "output": TOY_FIGURE_SPECS[wildcards.figure]["label"],
                "format": "PNG",
            },
        ),
        pdf="results/figures/{figure}.pdf",
        data="results/toy/{figure}.npz",
    log:
        "logs/toy/plot_{figure}.log",
    wildcard_constraints:
        figure="|".join(TOY_FIGURE_SPECS),
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
        dataset=lambda wildcards: TOY_FIGURE_SPECS[wildcards.figure]["dataset"],
    shell:
        keep_last_good(
            "python -m repens.summaries.toy figure-data --dataset {params.dataset} --out {output.data:q}"
            " {input:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} toy-figure --dataset {params.dataset}"
            " --data {output.data:q} --out-png {output.png:q} --out-pdf {output.pdf:q} >> {log:q} 2>&1"
        )


rule summarize_toy:
    input:
        regression_hmc=toy_hmc_references("regression"),
        regression=run_files("toy", "regression", "predictions.npz"),
        classification_hmc=toy_hmc_references("classification"),
        classification=run_files("toy", "classification", "predictions.npz"),
    output:
        summary="results/toy/distances.json",
        csv="results/toy/distance_to_hmc.csv",
        tex="results/toy/distance_to_hmc.tex",
        html=report(
            "results/toy/distance_to_hmc.html",
            caption="../report/toy_distance_to_hmc.rst",
            category=TOY_CATEGORY,
            subcategory="Tables",
            labels={"output": "Distance to HMC (beyond the paper)", "format": "HTML"},
        ),
    log:
        "logs/toy/summarize_toy.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
    shell:
        keep_last_good(
            "python -m repens.summaries.toy distances --out {output.summary:q}"
            " --regression-hmc {input.regression_hmc:q} --regression {input.regression:q}"
            " --classification-hmc {input.classification_hmc:q}"
            " --classification {input.classification:q} > {log:q} 2>&1"
            " && python -m repens.report --labels {params.labels:q} toy-table --summary {output.summary:q}"
            " --out-csv {output.csv:q} --out-tex {output.tex:q} --out-html {output.html:q}"
            " {input.regression_hmc:q} {input.regression:q} {input.classification_hmc:q}"
            " {input.classification:q} >> {log:q} 2>&1"
        )
