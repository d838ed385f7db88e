# Checks made once the jobs are planned and before the first one starts (a real run;
# `snakemake -n` skips them): the cost of the planned Table 1 jobs on a machine without
# a GPU, and whether the data every planned data job needs can be had. A run that
# would fail on missing data stops here with the fix, not hours later in a log.

from repens.data.availability import (
    lacking_image_data,
    lacking_message,
    lacking_uci_data,
    offline,
)
from repens.cost import image_cost_notice

STEP_SECONDS = Path(workflow.basedir) / "workflow" / "resources" / "step_seconds.yaml"


def _planned(rule_name):
    """The jobs of ``rule_name`` this run will start."""
    dag = workflow.dag
    if dag is None:
        return []
    return [job for job in dag.needrun_jobs() if job.rule.name == rule_name]


def _rerun_command():
    targets = " ".join(shlex.quote(t) for t in workflow.dag_settings.targets)
    return f"snakemake -c{workflow.resource_settings.cores or 1} {targets}".rstrip()


def _has_gpu():
    if config["device"] != "auto":
        return config["device"] == "cuda"
    import torch

    return torch.cuda.is_available()


def preflight():
    """The cost notice, then the data check (raises WorkflowError before any job)."""
    image_jobs = _planned("train_image")
    if image_jobs and not _has_gpu():
        notice = image_cost_notice(
            [json.loads(job.params.spec) for job in image_jobs],
            yaml.safe_load(STEP_SECONDS.read_text()),
            workflow.resource_settings.cores or 1,
            config["scale"],
        )
        if notice:
            print(notice, file=sys.stderr)
    image_sets = sorted({job.wildcards.dataset for job in _planned("prepare_images")})
    download = config_flag("image_data_download")
    lacking = lacking_image_data(
        image_sets, config["image_data"], config["image_data_mirror"], download
    )
    why = (
        "image_data_download is false"
        if not download
        else "their URLs do not answer from here"
        + (" ($REPENS_OFFLINE is set)" if offline() else "")
    )
    messages = []
    if lacking:
        messages.append(
            lacking_message(
                lacking,
                _rerun_command(),
                "image_data_mirror",
                why,
                "Targets that need no image data run without them, e.g. "
                "snakemake -c2 results/figures/fig2_gaussian.png results/figures/fig1_regression.png",
            )
        )
    uci_folders = {job.wildcards.folder for job in _planned("download_uci")}
    uci_sets = sorted(
        name for name, folder in UCI_FOLDERS.items() if folder in uci_folders
    )
    lacking = lacking_uci_data(uci_sets, UCI_ROOT)
    if lacking:
        messages.append(
            lacking_message(
                lacking,
                _rerun_command(),
                "uci_data",
                "their URLs do not answer from here",
            )
        )
    if messages:
        raise WorkflowError("\n".join(messages))


onstart:
    preflight()
