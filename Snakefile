"""repens: reproduce "Repulsive Deep Ensembles are Bayesian" (D'Angelo & Fortuin 2021).

    snakemake -c2                        # quick scale on a CPU (config.yaml: scale)
    snakemake -c2 all --config scale=paper   # Appendix G settings, Table 2 included
    snakemake --profile slurm            # the same paper-scale grid on a SLURM cluster

One experiment per file under workflow/rules/. To add one: write
workflow/rules/<experiment>.smk (its training rule and its aggregate localrules,
plus a list of its final outputs), include it below and add that list to `all`.
"""

import sys

from snakemake.utils import min_version

min_version("8.0")

sys.path.insert(0, f"{workflow.basedir}/src")
from snakemake.exceptions import WorkflowError

from repens.pipeline.checks import CheckError, check_config_files

# a YAML mistake in config.yaml (syntax, a key written twice): one line naming file:line:column
try:
    check_config_files(["config.yaml"])
except CheckError as err:
    raise WorkflowError(str(err)) from None


configfile: "config.yaml"


# `snakemake --report report.html`: this page, then every figure and table marked
# with report() in the rule files (categories, labels and captions: workflow/report/);
# after a partial run, those built, and this page lists the others (partial_report()).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/synthetic.smk"
include: "workflow/rules/toy.smk"
include: "workflow/rules/uci.smk"
include: "workflow/rules/image.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/reference.smk"
include: "workflow/rules/preflight.smk"


localrules:
    all,


rule all:
    default_target: True
    input:
        SYNTHETIC_OUTPUTS,
        TOY_OUTPUTS,
        IMAGE_OUTPUTS,
        UCI_OUTPUTS if TABLE2_IN_ALL else [],
        CLAIMS_OUTPUTS,


# Profile mistakes (profiles/slurm) stop the run here, once every rule is defined.
check_profile()
# `snakemake --report report.html` after a partial run: the report shows what was built
# and its main page lists what was not, with the command that builds each (common.smk).
partial_report()
