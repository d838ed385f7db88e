# Helpers of workflow/rules/uci.smk (Table 2): the data root, job specs, inputs.

import os

from repens.data.uci_files import UCI_FOLDERS, content_pinned

# Data root: --config uci_data=DIR, else $REPENS_UCI_DATA, else data/uci (downloaded).
UCI_ROOT = config.get("uci_data") or os.environ.get("REPENS_UCI_DATA") or "data/uci"

# The DAG names the data by a fixed handle in the working directory, a symlink to the
# root: another root holding the same files (each job checks their SHA-256) changes no
# job's input files, so pointing uci_data elsewhere retrains nothing. The handle is
# pointed at the root each time the workflow loads.
UCI_HANDLE = "data/.roots/uci"


def point_handle(handle, root):
    """Make ``handle`` a symlink to the absolute path of ``root`` (created if missing)."""
    link, target = Path(handle), Path(os.path.abspath(root))
    target.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    if link.exists() and not link.is_symlink():
        raise WorkflowError(
            f"{link} is not a symlink: it is the handle of the data root ({root}); move it away"
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    fresh = link.with_name(f"{link.name}.{os.getpid()}")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(target, target_is_directory=True)
    os.replace(fresh, link)


point_handle(UCI_HANDLE, UCI_ROOT)

# the transcribed seed values, read from this checkout whatever the working directory
UCI_SEEDS = str(Path(workflow.basedir) / "workflow" / "resources" / "table2_seeds.csv")

UCI_CATEGORY = "4. UCI regression (Table 2)"


def uci_data_file(wildcards):
    """data.txt of the job's dataset under the root's handle; ancient() where the job
    checks the files' SHA-256 (repens.data.uci_files.content_pinned), so a copy of the data
    with new timestamps does not retrain the table."""
    folder = UCI_FOLDERS[wildcards.dataset]
    path = f"{UCI_HANDLE}/{folder}/data/data.txt"
    return ancient(path) if content_pinned(folder) else path


def uci_download_target():
    """The output pattern of download_uci: <handle>/<folder>/data/data.txt (the file
    lands under the root the handle points to)."""
    return f"{UCI_HANDLE}/{{folder}}/data/data.txt"


def uci_runtime():
    """``--runtime`` of a UCI job: job_runtime plus the data root (untracked: a copy of the
    data elsewhere never retrains the table; the job checks the files' SHA-256)."""
    return job_runtime("uci", uci_data=UCI_ROOT)


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
