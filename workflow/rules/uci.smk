# UCI regression (Table 2): every regression-capable method on the standard splits of
# Hernandez-Lobato & Adams (2015). One training job per (dataset, method, seed) runs
# all splits of the dataset (results/uci/<dataset>/<method>/seed<seed>/split<K>.json,
# reused on a rerun), so 165 splits x 12 methods are 108 jobs, not 1980.

# aggregate rules copy their outputs to results/last_good/ (repens.pipeline.last_good)
from repens.pipeline.last_good import shell as keep_last_good


include: "uci_common.smk"


UCI_OUTPUTS = [
    "results/table2_uci.tex",
    "results/table2_uci.csv",
    "results/table2_uci.html",
    "results/table2_vs_seeds.csv",
    "results/table2_vs_seeds.html",
    "results/table2_vs_de.csv",
    "results/table2_vs_de.html",
    "results/table2_uci.md",
    "results/table2_vs_seeds.md",
]

# At the paper's scale `all` builds Table 2 too, and the scorecard waits for it (its UCI
# claims); at quick scale it is built on demand (snakemake results/table2_uci.tex).
TABLE2_IN_ALL = config["scale"] == "paper"


localrules:
    download_uci,
    summarize_uci,


rule download_uci:
    output:
        uci_download_target(),
    log:
        "logs/uci/download_{folder}.log",
    wildcard_constraints:
        folder="[A-Za-z0-9-]+",
    conda:
        "../../envs/repens.yaml"
    params:
        root=lambda wildcards, output: Path(output[0]).parents[2],
    shell:
        "python -m repens uci-download --root {params.root:q} --name {wildcards.folder:q} > {log:q} 2>&1"


rule train_uci:
    input:
        data=uci_data_file,
    output:
        metrics="results/uci/{dataset}/{method}/seed{seed}/metrics.json",
    log:
        "logs/uci/{dataset}/{method}/seed{seed}.log",
    benchmark:
        "results/uci/{dataset}/{method}/seed{seed}/benchmark.tsv"
    conda:
        "../../envs/repens.yaml"
    threads: 1
    resources:
        mem_mb=grows_with_attempt(2000),
        runtime=grows_with_attempt(240),
    params:
        attempts=attempts_log("logs/uci/{dataset}/{method}/seed{seed}.log"),
        spec=job_spec("uci"),
        runtime=uci_runtime(),
    shell:
        "python -m repens --threads {threads} --attempts {params.attempts:q} train --spec {params.spec:q} --runtime {params.runtime:q} --out {output.metrics:q} > {log:q} 2>&1"


rule summarize_uci:
    input:
        metrics=uci_metrics(),
        seeds=UCI_SEEDS,
    output:
        tex="results/table2_uci.tex",
        csv="results/table2_uci.csv",
        html=report(
            "results/table2_uci.html",
            caption="../report/table2_uci.rst",
            category=UCI_CATEGORY,
            subcategory="Tables",
            labels={"output": "Table 2", "format": "HTML"},
        ),
        seeds="results/table2_vs_seeds.csv",
        seeds_html=report(
            "results/table2_vs_seeds.html",
            caption="../report/table2_vs_seeds.rst",
            category=UCI_CATEGORY,
            subcategory="Tables",
            labels={
                "output": "Table 2 beside the seed papers' values",
                "format": "HTML",
            },
        ),
        md="results/table2_uci.md",
        seeds_md="results/table2_vs_seeds.md",
        vs_de="results/table2_vs_de.csv",
        vs_de_html=report(
            "results/table2_vs_de.html",
            caption="../report/table2_vs_de.rst",
            category=UCI_CATEGORY,
            subcategory="Tables",
            labels={
                "output": "Table 2: each method minus the deep ensemble",
                "format": "HTML",
            },
        ),
    log:
        "logs/uci/summarize_uci.log",
    conda:
        "../../envs/repens.yaml"
    params:
        scale=config["scale"],
        labels=method_labels(),
        datasets=experiment_datasets("uci"),
        methods=experiment_methods("uci"),
    shell:
        keep_last_good(
            "python -m repens uci-table --labels {params.labels:q}"
            " --datasets {params.datasets} --methods {params.methods}"
            " --seeds {input.seeds:q} --out-tex {output.tex:q} --out-csv {output.csv:q}"
            " --out-html {output.html:q} --out-seeds {output.seeds:q}"
            " --out-seeds-html {output.seeds_html:q} --out-vs-de {output.vs_de:q}"
            " --out-vs-de-html {output.vs_de_html:q} --out-md {output.md:q}"
            " --out-seeds-md {output.seeds_md:q} {input.metrics:q} > {log:q} 2>&1"
        )
