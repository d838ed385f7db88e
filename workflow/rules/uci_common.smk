# Helpers of workflow/rules/uci.smk (Table 2): the data root, job specs, inputs.

import os

from repens.data.uci import UCI_FOLDERS, content_pinned

# Data root: --config uci_data=DIR, else $REPENS_UCI_DATA, else data/uci (downloaded).
UCI_ROOT = config.get("uci_data") or os.environ.get("REPENS_UCI_DATA") or "data/uci"

# the transcribed seed values, read from this checkout whatever the working directory
UCI_SEEDS = str(Path(workflow.basedir) / "workflow" / "resources" / "table2_seeds.csv")

UCI_CATEGORY = "4. UCI regression (Table 2)"


def uci_data_file(wildcards):
    """data.txt of the job's dataset under the configured root; ancient() where the job
    checks the files' SHA-256 (repens.data.uci.content_pinned), so a copy of the data
    with new timestamps does not retrain the table."""
    folder = UCI_FOLDERS[wildcards.dataset]
    path = f"{UCI_ROOT}/{folder}/data/data.txt"
    return ancient(path) if content_pinned(folder) else path


def uci_download_target():
    """The output pattern of download_uci: <root>/<folder>/data/data.txt."""
    return f"{UCI_ROOT}/{{folder}}/data/data.txt"


def uci_spec(wildcards):
    """The resolved job (repens.config.resolve_job) plus the data root, as JSON."""
    job = json.loads(job_spec("uci")(wildcards))
    job["uci_data"] = UCI_ROOT
    return json.dumps(job, sort_keys=True)


def uci_metrics():
    """metrics.json of every (dataset, method) of the first seed, in table order."""
    seed = experiment_seeds(config, "uci")[0]
    return [
        path
        for dataset in experiment_datasets("uci")
        for method in experiment_methods("uci")
        if in_reference(
            path := f"results/uci/{dataset}/{method}/seed{seed}/metrics.json"
        )
    ]
