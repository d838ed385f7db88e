# Appendix G.4 / G.5: Table 1, ensembles on FashionMNIST (OOD: MNIST) and CIFAR-10
# (OOD: SVHN), one training job per dataset x method x seed.

# aggregate rules copy their outputs to results/last_good/ (repens.pipeline.last_good)
from repens.pipeline.last_good import shell as keep_last_good

IMAGE_OUTPUTS = [
    "results/table1.tex",
    "results/table1.png",
    "results/table1.csv",
    "results/table1.html",
    "results/table1_vs_paper.csv",
    "results/table1_vs_paper.html",
]

IMAGE_CATEGORY = "3. Image classification (Table 1)"


localrules:
    prepare_images,
    summarize_image,


# Compute nodes often have no internet: the download runs where Snakemake runs.
# The output depends on the data only: `md5s` (the registry's checksums) is a param, so
# new checksums remake it; where the files come from (mirror, download) is not: those
# params read `output`, which keeps them out of Snakemake's rerun triggers, so changing
# or dropping image_data_mirror never reruns this rule or the trainings after it.
# A failure prints the log's error line to the terminal (it names the fix).
rule prepare_images:
    output:
        f"{config['image_data']}/{{dataset}}.npz",
    log:
        "logs/data/{dataset}.log",
    conda:
        "../../envs/repens.yaml"
    params:
        md5s=lambda wc: image_md5s(wc.dataset),
        root=lambda wc, output: Path(output[0]).parent,
        mirror=lambda wc, output: (
            f"--mirror {shlex.quote(config['image_data_mirror'])}"
            if config["image_data_mirror"]
            else ""
        ),
        offline=lambda wc, output: (
            "" if config_flag("image_data_download") else "--offline"
        ),
    shell:
        "python -m repens prepare-images --dataset {wildcards.dataset} --root {params.root:q}"
        " {params.mirror} {params.offline} --out {output:q} > {log:q} 2>&1"
        " || {{ status=$?; tail -n 3 {log:q} >&2; exit $status; }}"


rule train_image:
    input:
        train=lambda wc: image_data_file(wc.dataset),
        ood=lambda wc: image_data_file(image_ood(wc.dataset)),
    output:
        metrics="results/image/{dataset}/{method}/seed{seed}/metrics.json",
        predictions="results/image/{dataset}/{method}/seed{seed}/predictions.npz",
    log:
        "logs/image/{dataset}/{method}/seed{seed}.log",
    benchmark:
        "results/image/{dataset}/{method}/seed{seed}/benchmark.tsv"
    conda:
        "../../envs/repens.yaml"
    threads: 1
    resources:
        mem_mb=grows_with_attempt(6000),
        # minutes; paper-scale ResNet32 jobs are the long ones (hours on a GPU)
        runtime=grows_with_attempt(60 if config["scale"] == "quick" else 1440),
        # percent of one GPU a job takes (GPU_SHARE in common.smk). Local runs on one
        # GPU cap it: `--resources gpu_share=100` runs one job at a time, adding
        # `--set-resources train_image:gpu_share=25` four. A scheduling resource only:
        # it is not in the job's spec, so sharing a GPU never changes a job's settings.
        gpu_share=GPU_SHARE,
    params:
        attempts=attempts_log("logs/image/{dataset}/{method}/seed{seed}.log"),
        spec=job_spec("image"),
        runtime=job_runtime("image"),
        device=config["device"],
    shell:
        "python -m repens --threads {threads} --attempts {params.attempts:q} train --spec {params.spec:q} --runtime {params.runtime:q}"
        " --input train={input.train:q} --input ood={input.ood:q} --device {params.device}"
        " --out {output.metrics:q} > {log:q} 2>&1"


rule summarize_image:
    input:
        metrics=image_metrics(),
        reference=f"{workflow.basedir}/workflow/resources/table1_paper.csv",
    output:
        tex="results/table1.tex",
        png=report(
            "results/table1.png",
            caption="../report/table1.rst",
            category=IMAGE_CATEGORY,
            subcategory="Tables",
            labels={"output": "Table 1", "format": "PNG"},
        ),
        csv="results/table1.csv",
        html=report(
            "results/table1.html",
            caption="../report/table1.rst",
            category=IMAGE_CATEGORY,
            subcategory="Tables",
            labels={"output": "Table 1", "format": "HTML"},
        ),
        # each run's metrics, written beside csv by the same command (repens.report.image.runs_path)
        runs="results/table1_runs.csv",
        vs_paper="results/table1_vs_paper.csv",
        vs_paper_html=report(
            "results/table1_vs_paper.html",
            caption="../report/table1_vs_paper.rst",
            category=IMAGE_CATEGORY,
            subcategory="Tables",
            labels={"output": "Table 1 beside the paper's values", "format": "HTML"},
        ),
    log:
        "logs/image/summarize_image.log",
    conda:
        "../../envs/repens.yaml"
    params:
        labels=method_labels(),
        datasets=",".join(report_datasets(config, "image")),
        methods=",".join(experiment_methods("image")),
        paper_rows=paper_rows_json(),
        # blocks by protocol; bold only among a block's converged rows (their logs: the
        # reference tree's in a rebuild)
        groups=protocol_groups_json(),
        log_root=f"--log-root {REFERENCE}" if FROM_REFERENCE else "",
    shell:
        keep_last_good(
            "python -m repens image-table --reference {input.reference:q}"
            " --labels {params.labels:q} --paper-rows {params.paper_rows:q}"
            " --groups {params.groups:q} {params.log_root}"
            " --datasets {params.datasets} --methods {params.methods}"
            " --out-tex {output.tex:q} --out-png {output.png:q} --out-csv {output.csv:q}"
            " --out-html {output.html:q} --out-vs-paper {output.vs_paper:q}"
            " --out-vs-paper-html {output.vs_paper_html:q} {input.metrics:q} > {log:q} 2>&1"
        )
