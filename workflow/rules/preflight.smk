# Checks that stop a bad setting before any job starts, each in one line naming it
# (repens.pipeline.checks).
#
# At load, after the rules are defined, in dry runs too: the YAML of config.yaml and of
# every --configfile (a key written twice; a syntax error is Snakemake's to report,
# before this runs), the method labels (mathtext the figures can draw), the environment
# variables the package reads, and the folders the rules write into (`results` or `logs`
# a regular file). The config's values, the sampler's
# included, are checked in common.smk (schema, repens.pipeline.config.check_config).
#
# Once the jobs are planned and before the first one starts (a real run; `snakemake -n`
# skips them): the cluster's clients where a cluster executor runs the jobs, the memory
# of every planned training and sampling job, the cost of the planned Table 1 jobs on a
# machine without a GPU, and whether the data every planned data job needs can be had.
# A run that would fail on a setting or missing data stops here with the fix, not hours
# later in a log.

from repens.pipeline.checks import (
    LARGEST_GPU_BYTES,
    CheckError,
    check_config_files,
    check_environment,
    check_labels,
    check_memory,
    check_output_folders,
    literal_folder,
    machine_memory_bytes,
    memory_estimate,
    missing_cluster_clients,
)
from repens.pipeline.config import hmc_setting_source, setting_source
from repens.data.availability import (
    lacking_image_data,
    lacking_message,
    lacking_uci_data,
    offline,
)
from repens.pipeline.cost import image_cost_notice

STEP_SECONDS = Path(workflow.basedir) / "workflow" / "resources" / "step_seconds.yaml"


def _written_folders():
    """``results``, ``logs`` and the folder of every rule's outputs, logs and benchmarks
    before its first wildcard."""
    folders = {"results", "logs"}
    for each in workflow.rules:
        for item in [
            *each.output,
            *each.log,
            *([each.benchmark] if each.benchmark else []),
        ]:
            folders.add(literal_folder(str(item)))
    return {folder for folder in folders if folder}


try:
    check_config_files(workflow.configfiles)
    check_labels(config)
    check_environment(config=config)
    check_output_folders(_written_folders())
except CheckError as err:
    raise WorkflowError(str(err)) from None


def _planned(rule_name):
    """The jobs of ``rule_name`` this run will start."""
    dag = workflow.dag
    if dag is None:
        return []
    return [job for job in dag.needrun_jobs() if job.rule.name == rule_name]


def _rerun_command():
    targets = " ".join(shlex.quote(t) for t in workflow.dag_settings.targets)
    return f"snakemake -c{workflow.resource_settings.cores or 1} {targets}".rstrip()


# Planning imports no torch (tests/test_planning_imports.py): these checks run only from
# onstart (a real run, never `snakemake -n`), and import torch only when a planned image
# job may train on this machine's GPU (device auto, a local run): whether one is there is
# torch's answer, the one the job itself will get.
def _has_gpu():
    if config["device"] != "auto":
        return config["device"] == "cuda"
    import torch

    return torch.cuda.is_available()


#: the rules whose jobs train or sample (their memory is checked before the run)
MEMORY_RULES = (
    "train_synthetic",
    "train_toy",
    "train_uci",
    "train_image",
    "sample_hmc",
)


def _on_gpu(job):
    """Whether a planned image job trains on a GPU: config ``device``, else (auto) a GPU
    here (local runs) or one the job asks of the cluster (its ``gpu`` / ``gres``)."""
    if job.rule.name != "train_image" or config["device"] == "cpu":
        return False
    if config["device"] == "cuda":
        return True
    return _has_gpu() if workflow.local_exec else gpu_request(job.resources) is not None


def _gpu_memory():
    """Bytes of GPU memory of this machine's first GPU (None: no GPU here)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory


def check_planned_memory():
    """Each planned training or sampling job fits in what it can have (repens.pipeline.checks.
    memory_estimate): on this machine (a local run) its memory; under a cluster executor
    its ``mem_mb`` at the last attempt (rules grow it with the attempt, so
    ``mem_mb x (retries + 1)``); on a GPU that GPU's memory too (a cluster's GPU is not
    known before the job starts: the largest there is, repens.pipeline.checks.LARGEST_GPU_BYTES).
    """
    jobs = sorted(
        (job for name in MEMORY_RULES for job in _planned(name)),
        key=lambda job: str(job.output[0]),
    )
    if not jobs:
        return
    problems = []
    machine = machine_memory_bytes() if workflow.local_exec else None
    attempts = (workflow.execution_settings.retries or 0) + 1
    gpu = None
    for job in jobs:
        spec = json.loads(job.params.spec)
        on_gpu = _on_gpu(job)
        if on_gpu and workflow.local_exec and gpu is None:
            gpu = _gpu_memory()
        if workflow.local_exec:
            limit, what = machine, "this machine's memory"
        else:
            mem_mb = job.resources.get("mem_mb")
            if not isinstance(mem_mb, (int, float)):
                continue
            limit = mem_mb * attempts * 2**20
            what = f"mem_mb {mem_mb} x {attempts} attempt(s) (rule {job.rule.name}'s resources)"
        if spec.get("method") == "hmc":
            knob = ", ".join(
                f"hmc.{key} ({hmc_setting_source(config, spec['experiment'], spec['dataset'], key)})"
                for key in ("chains", "samples")
            )
        else:
            keys = ["particles"] + (["batch_size"] if spec.get("batch_size") else [])
            knob = ", ".join(
                f"{key} {spec[key]} ({setting_source(config, spec['experiment'], spec['dataset'], spec['method'], key)})"
                for key in keys
            )
        try:
            check_memory(
                f"job {job.rule.name} {job.output[0]}",
                memory_estimate(spec),
                limit,
                what,
                knob,
                device_limit=gpu if workflow.local_exec else LARGEST_GPU_BYTES,
                on_gpu=on_gpu,
                device_what=(
                    "this machine's GPU"
                    if workflow.local_exec
                    else "the largest GPU there is (NVIDIA B200)"
                ),
            )
        except CheckError as err:
            problems.append(str(err))
    if problems:
        more = len(problems) - 1
        also = f" ({more} more planned job(s) would not fit either)" if more else ""
        raise CheckError(problems[0] + also)


def preflight():
    """The cluster's clients, the memory of the planned jobs, the cost notice, then the
    data check (raises WorkflowError before any job)."""
    executor = workflow.executor_plugin.name if workflow.executor_plugin else None
    missing = missing_cluster_clients(executor)
    if missing:
        raise WorkflowError(missing)
    try:
        check_planned_memory()
    except CheckError as err:
        raise WorkflowError(str(err)) from None
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
