# Shared helpers: config cross-checks, the job shells' environment, paths, job specs.
#
# The package is imported from this checkout's src/ (first on sys.path), so the
# workflow also runs where repens is not pip-installed (for example a snakemake-only
# environment with --use-conda); job shells get the same src/ through PYTHONPATH.

import ast
import hashlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from repens.pipeline.config import (
    ConfigError,
    check_config,
    check_data_folders,
    check_schema,
    experiment_seeds,
    report_datasets,
    method_groups,
    paper_rows,
    resolve_hmc_job,
    resolve_job,
)
from repens.core.variants import (
    VariantError,
    dataset_methods,
    expand_variants,
    variant_methods,
)
from repens.core.jobkey import RUNTIME_FIELDS, attempts_log_path
from repens.report.results_page import published_runs, tree_runs

# The config is checked once, before any job runs, each mistake in one line naming the
# key: numbers spelled as YAML 1.1 or --config leave them (1e-3, seeds=[1,2]) are read as
# numbers; the schema checks types and keys and fills the defaults (one pass); check_config
# checks what a schema cannot see (references between sections, options a method's rule
# ignores, what each experiment can run, every resolved job); named data folders exist.
SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
try:
    check_schema(config, yaml.safe_load(SCHEMA.read_text()), fill_defaults=True)
except ConfigError as err:
    raise WorkflowError(f"config key {err}") from None
try:
    expand_variants(
        config
    )  # a variant's methods written out as methods (repens.core.variants)
    check_config(config)
    check_data_folders(config)
except (ConfigError, VariantError) as err:
    raise WorkflowError(f"config key {err}") from None

# Job shells run `python -m repens` from this checkout (PYTHONPATH is src/).
# Without --use-conda, `python` is the interpreter that runs Snakemake (a bare
# `python` on PATH may be another one); with it, the `python` of envs/repens.yaml.
# This is a shell prefix and not a param, because where the interpreter lives is
# no reason to rerun a job.
_PREFIX = f"set -euo pipefail; export PYTHONPATH={shlex.quote(SRC)}; "
if DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method:
    _PREFIX += f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"; '
shell.prefix(_PREFIX)

NAME = "[a-z0-9]+(-[a-z0-9]+)*"


wildcard_constraints:
    method=NAME,
    target=NAME,
    dataset=NAME,
    seed=r"\d+",


def experiment_methods(experiment):
    """The experiment's methods in config order (the order of panels and table rows)."""
    return list(config["experiments"][experiment]["methods"])


def experiment_datasets(experiment):
    return list(config["experiments"][experiment]["datasets"])


def run_files(experiment, dataset, filename, seeds=None):
    """``results/<experiment>/<dataset>/<method>/seed<seed>/<filename>`` of every run.

    Methods in config order, then seeds (default: the experiment's seeds).
    """
    seeds = experiment_seeds(config, experiment) if seeds is None else seeds
    return [
        path
        for method in dataset_methods(config, experiment, dataset)
        for seed in seeds
        if in_reference(
            path := f"results/{experiment}/{dataset}/{method}/seed{seed}/{filename}"
        )
    ]


def first_seed_files(experiment, dataset, filename):
    """One file per method, from the experiment's first seed (the panels of a figure)."""
    seeds = experiment_seeds(config, experiment)[:1]
    return run_files(experiment, dataset, filename, seeds=seeds)


def job_spec(experiment):
    """Params function of ``experiment``'s training rule: the job as JSON, for ``--spec``.

    The job (repens.pipeline.config.resolve_job) comes from the wildcards ``dataset`` (or
    ``target``), ``method`` and ``seed``, without the fields that do not change a result
    (repens.core.jobkey.RUNTIME_FIELDS: logging and checkpoint cadence, where the data live).
    As a param, the spec makes Snakemake rerun exactly the jobs whose settings or scale
    changed; the runtime fields go to ``--runtime`` (job_runtime), untracked.
    """

    def spec(wildcards):
        job = _resolved_job(experiment, wildcards)
        return json.dumps(
            {k: v for k, v in job.items() if k not in RUNTIME_FIELDS}, sort_keys=True
        )

    return spec


def job_runtime(experiment, **extra):
    """Params function of ``experiment``'s training rule: the job's RUNTIME_FIELDS (and
    ``extra``), as JSON for ``--runtime``. It reads ``output``, which keeps it out of
    Snakemake's rerun triggers: changing how a job logs or checkpoints, or where its data
    live, never retrains it."""

    def runtime(wildcards, output):
        job = _resolved_job(experiment, wildcards)
        fields = {k: v for k, v in job.items() if k in RUNTIME_FIELDS}
        return json.dumps({**fields, **extra}, sort_keys=True)

    return runtime


def attempts_log(log):
    """Params function: the file that keeps every attempt's log of a job whose ``log:`` is
    the pattern ``log`` (Snakemake deletes that one before each attempt; ``--attempts``
    appends to this one). It reads ``output``: untracked, never a reason to rerun."""

    def attempts(wildcards, output):
        return str(attempts_log_path(log.format(**dict(wildcards.items()))))

    return attempts


def _resolved_job(experiment, wildcards):
    dataset = wildcards.get("dataset") or wildcards.get("target")
    return resolve_job(
        config, experiment, dataset, wildcards.method, int(wildcards.seed)
    )


def hmc_spec(experiment):
    """Params function of ``experiment``'s HMC rule: the reference job as JSON."""

    def spec(wildcards):
        job = resolve_hmc_job(
            config, experiment, wildcards.dataset, int(wildcards.seed)
        )
        return json.dumps(job, sort_keys=True)

    return spec


def restored_spec(wildcards):
    """The job a run of the tree is taken for (its training or HMC rule's spec): the
    copy is refused unless the run stores it (repens restore-result)."""
    if wildcards.method == "hmc":
        return hmc_spec(wildcards.experiment)(wildcards)
    return job_spec(wildcards.experiment)(wildcards)


def method_labels():
    """Display names of every method (and of the HMC reference), as JSON for the plots."""
    labels = {
        name: entry.get("label", name) for name, entry in config["methods"].items()
    }
    return json.dumps({**labels, "hmc": "HMC"}, sort_keys=True)


def paper_rows_json():
    """Each method's paper_row (the paper's row it is set beside), as JSON for Table 1."""
    return json.dumps(paper_rows(config), sort_keys=True)


def protocol_groups_json():
    """Table 1's blocks, as JSON: each image method -> its protocol, the paper's first
    (experiments.image.paper_protocol: the variant whose numbers the paper printed), then
    Appendix G.4's text (the experiment's own methods), then the other variants, controls
    that are never ranked (repens.report.image.protocol_blocks)."""
    image = config["experiments"]["image"]
    paper = image.get("paper_protocol")
    variants = image.get("variants") or {}
    # method -> its variant (repens.core.variants names the methods a variant makes)
    made = {
        name: variant for name, (_, variant) in variant_methods(config, "image").items()
    }
    groups = {}
    for method in experiment_methods("image"):
        variant = made.get(method)
        if variant is None:
            groups[method] = "Appendix G.4's text"
        elif variant == paper:
            groups[method] = (
                f"{variants[paper].get('label', paper)} (the paper's numbers)"
            )
        else:
            groups[method] = "controls (other settings)"
    order = [g for g in groups.values() if g.endswith("(the paper's numbers)")]
    ranked = sorted(
        groups, key=lambda m: (groups[m] not in order, groups[m].startswith("controls"))
    )
    return json.dumps({m: groups[m] for m in ranked})


def method_groups_json():
    """The method groups the claims compare (repens.pipeline.config.method_groups), as JSON."""
    return json.dumps(dataclasses.asdict(method_groups(config)))


def toy_hmc(dataset):
    """The HMC reference of the experiment's first seed."""
    seed = experiment_seeds(config, "toy")[0]
    return f"results/toy/{dataset}/hmc/seed{seed}/predictions.npz"


def toy_hmc_references(dataset):
    """The HMC reference of every seed of the experiment (the distance table's); none for a
    data set whose method runs the reference tree does not hold yet (:func:`toy_held`).
    """
    if not toy_held(dataset):
        return []
    return [
        path
        for seed in experiment_seeds(config, "toy")
        if in_reference(path := f"results/toy/{dataset}/hmc/seed{seed}/predictions.npz")
    ]


def toy_held(dataset):
    """Whether a toy data set's figure and distances are built: always, unless results come
    from the reference tree and it holds no method run of the data set (its HMC references,
    which the campaign runs first, make neither alone)."""
    return reference_holds(f"toy/{dataset}")


def toy_panels(dataset):
    """HMC first, then the methods in config order (the paper's panel order)."""
    return [toy_hmc(dataset), *first_seed_files("toy", dataset, "predictions.npz")]


def config_flag(key):
    """A yes/no setting of the config: a YAML boolean, or the string "true" / "false" that
    --config passes (the schema allows both)."""
    return str(config[key]).lower() == "true"


# The reference tree: the committed small files of every paper-scale run, laid out as
# results/ (reference/<experiment>/<dataset>/<method>/seed<seed>/...). With from_reference
# true, the per-job results the tables and figures read are copied from it
# (workflow/rules/reference.smk) and only the runs it holds are listed: nothing trains.
# from_reference: published restricts them to the runs the kept tables were built from
# (reference/results/runs.json: what CI rebuilds and compares).
REFERENCE = config["reference"]
FROM_REFERENCE = str(config["from_reference"]).lower() in ("true", "published")
if str(config["from_reference"]).lower() == "published":
    REFERENCE_RUNS = published_runs(REFERENCE)
    if REFERENCE_RUNS is None:
        raise WorkflowError(
            f"config key from_reference: published needs {REFERENCE}/results/runs.json"
            " (python -m repens reference publish)"
        )
    REFERENCE_RUNS = set(REFERENCE_RUNS)
else:
    REFERENCE_RUNS = set(tree_runs(REFERENCE)) if FROM_REFERENCE else None


def toy_outputs_held():
    """The toy outputs a rebuild from the reference tree makes (TOY_FIGURES, TOY_TABLES:
    toy.smk): the figure of each data set whose method runs the tree holds, and the
    distance table if it holds any."""
    figures = [
        path
        for dataset, paths in TOY_FIGURES.items()
        if toy_held(dataset)
        for path in paths
    ]
    return [*figures, *TOY_TABLES] if figures else []


def reference_holds(prefix):
    """Whether the tables of an experiment (``prefix``: ``uci``, or ``toy/regression``, one
    of its data sets) are built: always, unless results come from the reference tree and
    it holds no run below ``prefix`` other than an HMC reference (which alone makes no
    table)."""
    return not FROM_REFERENCE or any(
        run.startswith(f"{prefix}/") and "/hmc/" not in run for run in REFERENCE_RUNS
    )


def claims_input(experiment, table):
    """A table the scorecard builds first; from the reference tree, only where the tree
    holds runs of its experiment (the claims of the others say "not run")."""
    return table if reference_holds(experiment) else []


def in_reference(path):
    """Whether a run's result file (``results/<rest>``) takes part: always, unless results
    come from the reference tree and it does not hold this one."""
    return (
        not FROM_REFERENCE or Path(*Path(path).parts[1:]).as_posix() in REFERENCE_RUNS
    )


def file_state(*paths):
    """SHA-256 of the files (``absent`` for those not there): a param that changes when
    a file a rule reads outside the DAG changes (summarize_claims' Table 2)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode())
        digest.update(Path(path).read_bytes() if Path(path).is_file() else b"absent")
    return digest.hexdigest()[:16]


def image_data_file(dataset):
    return f"{config['image_data']}/{dataset}.npz"


def image_md5s(dataset):
    """MD5s of the data set's original files (repens.data.images): the data it holds."""
    from repens.data.images import IMAGE_DATASETS

    dataset = IMAGE_DATASETS.get(dataset)
    return ",".join(file.md5 for file in dataset.files) if dataset else ""


def image_ood(dataset):
    """The OOD data set of an in-distribution data set (its ``ood`` setting)."""
    return config["experiments"]["image"]["datasets"][dataset]["ood"]


def image_metrics():
    """metrics.json of every run the table shows (report_datasets x methods x seeds)."""
    return [
        path
        for ds in report_datasets(config, "image")
        for path in run_files("image", ds, "metrics.json")
    ]


# Cluster resources. A rule declares what one job needs; cluster specifics (GPU,
# partition, account, warning signal) live in profiles/slurm/config.yaml.

# What a GPU job takes of one GPU, in percent (resource `gpu_share`, like SLURM's
# `gres: "mps:<percent>"`): a whole GPU by default. Local runs say what one GPU holds
# with `--resources gpu_share=100` and how much a job takes with `--set-resources
# train_image:gpu_share=<100/k>` (k jobs per GPU). SLURM ignores it: there a job's
# GPU (or shard, or MPS share) is its `gpu` / `gres` in the profile.
GPU_SHARE = 100


def grows_with_attempt(first):
    """A resource (``mem_mb``, ``runtime`` in minutes) of ``first`` on the first attempt
    and ``first * attempt`` on retries, so a job killed for memory or time (or
    preempted) gets more on its next submission (profiles/slurm: ``retries``)."""

    def value(wildcards, attempt):
        return first * attempt

    return value


def check_profile():
    """Stop with a clear message on profile mistakes, before any job is submitted.

    Call once, after every rule is defined (end of the Snakefile). Checks
    ``set-resources`` / ``set-threads`` (profiles/slurm or the command line) name only
    rules of this workflow; that no rule asks for a GPU both ways (``gpu`` and
    ``gres``) and every ``gres`` reads ``name[:type][:count]``; and, where SLURM's
    ``sinfo`` is at hand (a cluster's login node), that every partition named exists
    and every GPU request (``gpu: N`` or ``gres: "gpu:N"``) names a
    partition whose nodes have GPUs.
    """
    settings = workflow.resource_settings
    named = set(settings.overwrite_resources) | set(settings.overwrite_threads)
    known = {rule.name for rule in workflow.rules}
    unknown = sorted(named - known)
    if unknown:
        raise WorkflowError(
            f"set-resources/set-threads name rules this workflow does not have: "
            f"{', '.join(unknown)}. Rules: {', '.join(sorted(known))}. Fix or remove "
            "those entries in the profile (profiles/slurm/config.yaml) or on the "
            "command line."
        )
    check_gpu_forms(settings)
    if "SLURM_JOB_ID" not in os.environ and shutil.which("sinfo"):
        check_gpu_partitions(settings)
    if slurm_resources(settings) and not shutil.which("sbatch"):
        print(
            "No SLURM here (no sbatch on PATH): the plan is what the slurm profile would "
            "submit; submitting it needs a SLURM login node.",
            file=sys.stderr,
        )


def slurm_resources(settings):
    """Whether the resources name SLURM's (``slurm_partition`` & co.: the slurm profile
    is in use; Snakemake tells a Snakefile nothing of its executor when it loads)."""
    named = [
        str(arg).split("=", 1)[0]
        for arg in getattr(settings.default_resources, "args", None) or []
    ]
    for resources in settings.overwrite_resources.values():
        named += list(resources)
    return any(name.startswith("slurm_") for name in named)


def _static(resource):
    """The value of a resource set as a constant (None if unset or computed per job)."""
    value = getattr(resource, "raw", resource)
    if isinstance(value, str):
        try:  # profile and command-line values arrive as Python literals ("'gpu'")
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value if value.isidentifier() else None  # bare word, or expression
    return value if isinstance(value, (int, str)) else None


GRES_FORM = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.]+)?(:\d+[TGM]?)?$")

# GRES that give a job a GPU or a part of one: a whole GPU, a SLURM shard of one
# (`gres: "shard:1"`, SLURM >= 22.05 with shards configured), a CUDA MPS share
# (`gres: "mps:25"`, percent of one GPU's MPS).
GPU_GRES = ("gpu", "shard", "mps")


def gres_names(gres):
    """The GRES names of a ``gres`` string (``"gpu:a100:1,shard:2"`` -> gpu, shard) or
    of sinfo's %G column (``"gpu:4(S:0,1),shard:32"``; ``"(null)"``: none)."""
    return {m for m in re.findall(r"(?:^|,)\s*([A-Za-z_][A-Za-z0-9_]*)", str(gres))}


def gpu_gres(resources):
    """The GPU-type GRES names (:data:`GPU_GRES`) a rule's ``gres`` asks for."""
    gres = _static(resources.get("gres")) or ""
    return sorted(gres_names(gres) & set(GPU_GRES))


def gpu_request(resources):
    """How a rule's resources ask for GPUs: ``"gpu"`` (``gpu: N``, sbatch --gpus),
    ``"gres"`` (``gres: "gpu:N"``, ``"shard:N"`` or ``"mps:N"``, sbatch --gres),
    ``"both"``, or None."""
    gpus = _static(resources.get("gpu")) or _static(resources.get("gpus"))
    by_gres = bool(gpu_gres(resources))
    if gpus and by_gres:
        return "both"
    return "gpu" if gpus else "gres" if by_gres else None


def check_gpu_forms(settings):
    """`gpu` and `gres` are two spellings of one request: one per rule, gres well formed."""
    for name, resources in settings.overwrite_resources.items():
        who = f"rule {name}"
        if gpu_request(resources) == "both":
            raise WorkflowError(
                f"{who} asks for a GPU twice, as `gpu` and as `gres`; keep one "
                f'(`gpu: 1` for sbatch --gpus=1, or `gres: "gpu:1"` for sbatch '
                f'--gres=gpu:1, or a share of one, `gres: "shard:1"`) in '
                f"profiles/slurm/config.yaml."
            )
        gres = _static(resources.get("gres"))
        if gres is not None and not all(
            GRES_FORM.match(part.strip()) for part in str(gres).split(",")
        ):
            raise WorkflowError(
                f"{who}, gres {gres!r}, is not name[:type][:count] (e.g. "
                f'"gpu:1" or "gpu:a100:1"); fix it in profiles/slurm/config.yaml.'
            )


def gpu_partitions():
    """``{partition: GRES names of its nodes}`` from ``sinfo`` (e.g. gpu, shard);
    None if no cluster answers."""
    try:
        out = subprocess.run(
            ["sinfo", "--noheader", "--format=%R|%G"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    partitions = {}
    for line in out.stdout.split():
        name, _, gres = line.partition("|")
        partitions.setdefault(name, set()).update(gres_names(gres))
    return partitions


def check_gpu_partitions(settings):
    """Every partition named exists; every GPU request is on a partition with GPUs
    (a shard or MPS request: with that GRES)."""
    defaults = settings.default_resources or {}
    default_partition = _static(defaults.get("slurm_partition"))
    wanted = [("default-resources", default_partition, None, [])]
    for name, resources in settings.overwrite_resources.items():
        partition = _static(resources.get("slurm_partition")) or default_partition
        wanted.append(
            (f"rule {name}", partition, gpu_request(resources), gpu_gres(resources))
        )
    wanted = [w for w in wanted if w[1] is not None]  # None: the cluster's default
    if not wanted:
        return
    partitions = gpu_partitions()
    if partitions is None:
        print(
            "note: no SLURM cluster answered `sinfo`; partitions not checked",
            file=sys.stderr,
        )
        return
    for who, partition, gpu, kinds in wanted:
        if partition not in partitions:
            place = "default-resources" if who == "default-resources" else who[5:]
            raise WorkflowError(
                f"{who} asks for partition {partition!r}, which this cluster does "
                f"not have (sinfo lists: {', '.join(sorted(partitions))}). Set "
                f"slurm_partition of {place} in profiles/slurm/config.yaml to one of them."
            )
        if gpu and "gpu" not in partitions[partition]:
            with_gpus = sorted(p for p, has in partitions.items() if "gpu" in has)
            name = who[5:]
            raise WorkflowError(
                f"{who} asks for a GPU on partition {partition!r}, whose nodes have "
                f"no GPUs (sinfo lists no "
                f"gpu GRES there). Set slurm_partition of {name} in "
                f"profiles/slurm/config.yaml to a GPU partition "
                f"({', '.join(with_gpus) or 'none found'}), or remove its `{'gres' if gpu == 'gres' else 'gpu'}`."
            )
        for kind in kinds:
            if kind != "gpu" and kind not in partitions[partition]:
                having = sorted(p for p, has in partitions.items() if kind in has)
                raise WorkflowError(
                    f"{who} asks for a GPU {kind} (gres {kind}) on partition "
                    f"{partition!r}, whose nodes have no {kind} GRES (sinfo lists: "
                    f"{', '.join(sorted(partitions[partition])) or 'none'}). Use a "
                    f"partition with {kind}s ({', '.join(having) or 'none found'}) or "
                    f"a whole GPU (`gpu: 1`) in profiles/slurm/config.yaml."
                )


# The report after a partial run. `snakemake --report report.html` stops at the first
# output marked report(...) that a job of its targets has not built. In a run that only
# builds the report (--report on the command line, without --report-after-run, which
# reports after running the jobs and marks outputs as usual), partial_report() (end of the
# Snakefile) unmarks every marked output that is not there, so the report shows what was
# built; the report's main page (workflow/report/workflow.rst) lists the marked outputs of
# the report's targets that are missing, each with the command that builds it.


def report_only():
    """Whether this Snakemake run only builds the report: ``--report`` on the command
    line (the report options are not visible to the Snakefile otherwise), without
    ``--report-after-run``."""
    argv = sys.argv[1:]
    asked = any(arg == "--report" or arg.startswith("--report=") for arg in argv)
    return asked and "--report-after-run" not in argv


_REPEATED = {"-s", "--snakefile", "-d", "--directory", "--profile"}
_CONFIG_OPTIONS = {"--configfile", "--configfiles", "--config", "-C"}


def _build_options():
    """The options of this command line that a command building an output repeats (its
    Snakefile, working directory, profile and config), ``--config`` last: it takes every
    word after it, so targets come before it."""
    argv, kept, config_items, i = sys.argv[1:], [], [], 0
    while i < len(argv):
        name, eq, _ = argv[i].partition("=")
        if name in _REPEATED | _CONFIG_OPTIONS:
            words = [argv[i]]
            if not eq:  # the values follow: one, or every word up to the next option
                while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    words.append(argv[i + 1])
                    i += 1
                    if name in _REPEATED:
                        break
            (config_items if name in ("--config", "-C") else kept).extend(words)
        i += 1
    return kept + config_items


class MissingReportOutputs:
    """The outputs marked report(...) that are not built, among the jobs of the report's
    targets, in the order of the rules; what the report's main page lists. Worked out
    once, when the page is rendered (the report's jobs are known then). Each entry is a
    dict of path, output, format, category, rule, inputs (of its job), inputs_built and
    command."""

    def __init__(self, unmarked):
        self.unmarked = unmarked  # path -> (rule name, its ReportObject)
        self._entries = None

    def entries(self):
        if self._entries is None:
            jobs = workflow.dag.jobs if workflow.dag else []
            in_dag = {str(f): job for job in jobs for f in job.output}
            options = " ".join(shlex.quote(w) for w in _build_options())
            self._entries = []
            order = {each.name: i for i, each in enumerate(workflow.rules)}
            unmarked = sorted(
                self.unmarked.items(),
                key=lambda entry: order.get(entry[1][0], len(order)),
            )
            for path, (rule, obj) in unmarked:
                job = in_dag.get(path)
                if job is None:
                    continue
                labels = obj.labels if isinstance(obj.labels, dict) else {}
                inputs = [str(f) for f in job.input]
                self._entries.append(
                    {
                        "path": path,
                        "output": labels.get("output", path),
                        "format": labels.get("format", Path(path).suffix[1:].upper()),
                        "category": obj.category or "",
                        "rule": rule,
                        "inputs": len(inputs),
                        "inputs_built": sum(Path(f).exists() for f in inputs),
                        "command": f"snakemake {shlex.quote(path)} {options}".rstrip(),
                    }
                )
            for entry in self._entries:
                print(
                    f"report: not built, listed on the report's main page: "
                    f"{entry['path']} ({entry['command']})",
                    file=sys.stderr,
                )
        return self._entries

    def __iter__(self):
        return iter(self.entries())

    def __len__(self):
        return len(self.entries())


# What a report-only run left unmarked: path -> (rule name, its ReportObject). The
# outputs without wildcards are known when the Snakefile ends (partial_report); a
# wildcard rule's are known job by job (marked_where_built), as the DAG is built.
_UNMARKED = {}


def marked_where_built(rule_name, inputs):
    """The input function of rule ``rule_name``, whose output marked report(...) has
    wildcards (one rule drawing several figures); it returns ``inputs(wildcards)`` and, in a
    report-only run, the job's marked output stays marked only where it is built.

    A job's output files copy their rule's flags when Snakemake makes the job, right
    after it calls the job's input functions (snakemake.jobs.Job: expand_input, then
    expand_output); so the rule's report flag, set or taken off here for these wildcards,
    is what this job's outputs copy. A missing one joins the main page's list."""

    def function(wildcards):
        if report_only():
            for item in workflow.get_rule(rule_name).output:
                report_obj = _WILDCARD_MARKED.get((rule_name, str(item)))
                if report_obj is None:
                    continue
                path = item.apply_wildcards(dict(wildcards.items()))
                if Path(path).exists():
                    item.flags["report"] = report_obj
                else:
                    item.flags.pop("report", None)
                    _UNMARKED[str(path)] = (rule_name, report_obj)
        return inputs(wildcards)

    return function


# (rule name, output pattern) -> ReportObject of each marked output with wildcards
_WILDCARD_MARKED = {}


def partial_report():
    """In a report-only run, unmark the marked outputs that are not there (see above) and
    give the report's main page their list (config key ``report_missing``, read by
    workflow/report/workflow.rst). Call once, after every rule is defined. A rule whose
    marked output has wildcards takes its input from marked_where_built."""
    if not report_only():
        return
    for each in workflow.rules:
        for item in each.output:
            if not item.is_flagged("report"):
                continue
            if "{" in str(item):
                if not any(
                    getattr(f, "__qualname__", "").startswith("marked_where_built.")
                    for f in each.input
                ):
                    raise WorkflowError(
                        f"the output {item} of rule {each.name} is marked report(...) and has wildcards, "
                        "so the rule's input must be marked_where_built(...) (workflow/rules/common.smk)"
                    )
                _WILDCARD_MARKED[(each.name, str(item))] = item.flags["report"]
            elif not Path(item).exists():
                _UNMARKED[str(item)] = (each.name, item.flags.pop("report"))
    config["report_missing"] = MissingReportOutputs(_UNMARKED)
