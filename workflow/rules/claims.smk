# The claim scorecard (beyond the paper): each claim of Sec. 4 of the paper (and the
# anchored / Langevin claims of the seed papers) checked on the result tables, with the
# figures it rests on and a verdict (repens.report.claims). It reads tables only.
#
# Its inputs are the tables of `rule all` (synthetic, toys, Table 1; Table 2 at the
# paper's scale), so it never makes `all` train more. At quick scale Table 2 (UCI) is not
# in `all`: the scorecard reads it if it is there (a param, not an input, so asking for
# the scorecard never trains UCI); its content hash is a param too, so a new Table 2
# reruns the scorecard. Without it, the UCI claims
# say "not run". With claims_build_table1: false, Table 1 is read the same way (a
# paper-scale scorecard on a machine without a GPU).
#
# Whether the runs behind each Table 1 / Table 2 row converged (repens.summaries.converged, from
# each run's metrics.json and training log) is results/convergence.csv, written by the
# cheap localrule check_convergence (the step repens.summaries.convergence) over the runs
# present after those tables are built;
# the scorecard reads it (a comparison resting on an unconverged run is inconclusive).
# A rebuild from the reference tree restores no logs: the check reads them in the tree
# (reference/logs/..., the path each run's provenance names, under the tree).
#
# The evidence of each claim as a picture: summarize_claims also writes one row per
# comparison (results/claims_comparisons.csv); plot_claim_evidence draws one forest plot
# per claim and diagnostic from it alone (repens.report.claim_figures), and
# write_claims_page makes claims.html from the scorecard's CSVs and those figures.
#
# The scorecard (repens.report.claims) is split by concern: the verdict rule
# (repens.report.verdicts), reading the tables (repens.report.evidence), the claims
# themselves (repens.report.claim_list) and the scorecard's files (repens.report.claims).

# aggregate rules copy their outputs to results/last_good/ (repens.pipeline.last_good)
from repens.pipeline.last_good import shell as keep_last_good

# Table 1's claims once more for each variant of the image experiment (config.yaml:
# experiments.image.variants; repens.core.variants), each method m read as m-<variant>:
# e.g. the scorecard at the authors' code's initialisation. On demand, not in `all`:
# `snakemake results/claims_code-protocol.md`.
IMAGE_VARIANTS = list(config["experiments"]["image"].get("variants") or {})

CLAIMS_OUTPUTS = [
    "results/claims.csv",
    "results/claims_diagnostics.csv",
    "results/claims_comparisons.csv",
    "results/claims.md",
    "results/figures/claims",
    "results/claims.html",
    "results/figures/table1_training.png",
    "results/figures/table1_repulsion.png",
    "results/table1_repulsion.csv",
]

CLAIMS_CATEGORY = "5. Claim scorecard (beyond the paper)"

CLAIMS_UCI_TABLE = "results/table2_uci.csv"
CLAIMS_TABLE1 = "results/table1.csv"
CLAIMS_BUILD_TABLE1 = config_flag("claims_build_table1")
CLAIMS_SYNTHETIC = "results/synthetic/metrics.csv"
CLAIMS_SYNTHETIC_SUMMARY = "results/synthetic/sample_quality.json"
CLAIMS_TOY = "results/toy/distance_to_hmc.csv"
CLAIMS_CONVERGENCE = "results/convergence.csv"


localrules:
    summarize_claims,
    summarize_variant_claims,
    check_convergence,
    plot_claim_evidence,
    write_claims_page,
    plot_training_curves,


rule check_convergence:
    input:
        # the tables whose runs it checks are built first (Table 2: only from the tree)
        table1=claims_input("image", CLAIMS_TABLE1) if CLAIMS_BUILD_TABLE1 else [],
        uci_table=(
            claims_input("uci", CLAIMS_UCI_TABLE)
            if FROM_REFERENCE or TABLE2_IN_ALL
            else []
        ),
    output:
        CLAIMS_CONVERGENCE,
    log:
        "logs/claims/check_convergence.log",
    conda:
        "../../envs/repens.yaml"
    params:
        log_root=f"--log-root {REFERENCE}" if FROM_REFERENCE else "",
        uci_state=lambda wildcards: file_state(CLAIMS_UCI_TABLE),
        table1_state=lambda wildcards: file_state(CLAIMS_TABLE1),
    shell:
        "python -m repens.summaries.convergence convergence --results results {params.log_root}"
        " --out {output:q} > {log:q} 2>&1"


# Table 1's training curves beside the verdicts, and the repulsion diagnostic of the
# repulsive rules: the runs' logs that convergence.csv names.
rule plot_training_curves:
    input:
        CLAIMS_CONVERGENCE,
    output:
        curves=report(
            "results/figures/table1_training.png",
            caption="../report/table1_training.rst",
            category=CLAIMS_CATEGORY,
            subcategory="Convergence",
            labels={"output": "Table 1 training curves", "format": "PNG"},
        ),
        repulsion=report(
            "results/figures/table1_repulsion.png",
            caption="../report/table1_repulsion.rst",
            category=CLAIMS_CATEGORY,
            subcategory="Convergence",
            labels={"output": "Table 1 repulsion diagnostic", "format": "PNG"},
        ),
        repulsion_csv="results/table1_repulsion.csv",
    log:
        "logs/claims/plot_training_curves.log",
    conda:
        "../../envs/repens.yaml"
    shell:
        "python -m repens training-curves --convergence {input:q} --out {output.curves:q}"
        " --repulsion-png {output.repulsion:q} --repulsion-csv {output.repulsion_csv:q} > {log:q} 2>&1"


rule summarize_claims:
    input:
        synthetic=claims_input("synthetic", CLAIMS_SYNTHETIC),
        # the noise floor's spread over its draws (repens.report.claims.synthetic_summary_path)
        synthetic_summary=claims_input("synthetic", CLAIMS_SYNTHETIC_SUMMARY),
        toy=claims_input("toy", CLAIMS_TOY),
        table1=claims_input("image", CLAIMS_TABLE1) if CLAIMS_BUILD_TABLE1 else [],
        table1_paper=f"{workflow.basedir}/workflow/resources/table1_paper.csv",
        uci_seeds=UCI_SEEDS,
        # built before the scorecard where `all` builds it (paper scale) or where it costs
        # nothing (from the reference tree)
        uci_table=(
            claims_input("uci", CLAIMS_UCI_TABLE)
            if FROM_REFERENCE or TABLE2_IN_ALL
            else []
        ),
        convergence=CLAIMS_CONVERGENCE,
    output:
        csv="results/claims.csv",
        # written beside csv by the same command (repens.report.claims.diagnostics_path)
        diagnostics="results/claims_diagnostics.csv",
        # one row per comparison, beside csv (repens.report.claims.comparisons_path)
        comparisons="results/claims_comparisons.csv",
        md="results/claims.md",
    log:
        "logs/claims/summarize_claims.log",
    conda:
        "../../envs/repens.yaml"
    params:
        synthetic=lambda wildcards: CLAIMS_SYNTHETIC,
        toy=lambda wildcards: CLAIMS_TOY,
        uci=lambda wildcards: CLAIMS_UCI_TABLE,
        uci_state=lambda wildcards: file_state(
            CLAIMS_UCI_TABLE, f"{CLAIMS_UCI_TABLE}.provenance.json"
        ),
        table1=lambda wildcards: CLAIMS_TABLE1,
        table1_state=lambda wildcards: (
            "built"
            if CLAIMS_BUILD_TABLE1
            else file_state(CLAIMS_TABLE1, f"{CLAIMS_TABLE1}.provenance.json")
        ),
        labels=method_labels(),
        groups=method_groups_json(),
        # Table 1's claims at the protocol that produced the paper's numbers (config.yaml)
        protocol=(
            f"--paper-protocol {config['experiments']['image']['paper_protocol']}"
            if config["experiments"]["image"].get("paper_protocol")
            else ""
        ),
    shell:
        keep_last_good(
            "python -m repens claims --labels {params.labels:q} --groups {params.groups:q} {params.protocol}"
            " --synthetic {params.synthetic:q} --toy {params.toy:q} --table1 {params.table1:q}"
            " --uci {params.uci:q} --table1-paper {input.table1_paper:q} --uci-seeds {input.uci_seeds:q}"
            " --convergence {input.convergence:q}"
            " --out-csv {output.csv:q} --out-md {output.md:q} > {log:q} 2>&1"
        )


rule summarize_variant_claims:
    input:
        table1=claims_input("image", CLAIMS_TABLE1) if CLAIMS_BUILD_TABLE1 else [],
        table1_paper=f"{workflow.basedir}/workflow/resources/table1_paper.csv",
        convergence=CLAIMS_CONVERGENCE,
    output:
        csv="results/claims_{variant}.csv",
        # written beside csv by the same command (empty: no diagnostics)
        diagnostics="results/claims_{variant}_diagnostics.csv",
        comparisons="results/claims_{variant}_comparisons.csv",
        md="results/claims_{variant}.md",
        html="results/claims_{variant}.html",
    log:
        "logs/claims/summarize_claims_{variant}.log",
    wildcard_constraints:
        variant="|".join(IMAGE_VARIANTS) or "(?!)",
    conda:
        "../../envs/repens.yaml"
    params:
        table1=lambda wildcards: CLAIMS_TABLE1,
        table1_state=lambda wildcards: (
            "built"
            if CLAIMS_BUILD_TABLE1
            else file_state(CLAIMS_TABLE1, f"{CLAIMS_TABLE1}.provenance.json")
        ),
        labels=method_labels(),
        groups=method_groups_json(),
    shell:
        keep_last_good(
            "python -m repens claims --variant {wildcards.variant} --labels {params.labels:q}"
            " --groups {params.groups:q} --table1 {params.table1:q}"
            " --table1-paper {input.table1_paper:q} --convergence {input.convergence:q}"
            " --out-csv {output.csv:q} --out-md {output.md:q} --out-html {output.html:q}"
            " > {log:q} 2>&1"
        )


rule plot_claim_evidence:
    input:
        "results/claims_comparisons.csv",
    output:
        report(
            directory("results/figures/claims"),
            patterns=["{name}.png"],
            caption="../report/claim_evidence.rst",
            category=CLAIMS_CATEGORY,
            subcategory="Evidence",
            labels={"output": "Evidence: {name}", "format": "PNG"},
        ),
    log:
        "logs/claims/plot_claim_evidence.log",
    conda:
        "../../envs/repens.yaml"
    shell:
        "python -m repens claim-figures --comparisons {input:q} --out-dir {output:q} > {log:q} 2>&1"


# The HTML is written after the figures (it embeds each as a base64 <img>, a self-contained
# page), from files only: the scorecard's CSVs and the figures.
rule write_claims_page:
    input:
        csv="results/claims.csv",
        diagnostics="results/claims_diagnostics.csv",
        figures="results/figures/claims",
    output:
        report(
            "results/claims.html",
            caption="../report/claims.rst",
            category=CLAIMS_CATEGORY,
            subcategory="Tables",
            labels={"output": "Claim scorecard", "format": "HTML"},
        ),
    log:
        "logs/claims/write_claims_page.log",
    conda:
        "../../envs/repens.yaml"
    shell:
        keep_last_good(
            "python -m repens claims-page --claims {input.csv:q} --figures {input.figures:q}"
            " --out {output:q} > {log:q} 2>&1"
        )
