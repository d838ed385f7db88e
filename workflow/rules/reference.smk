# The reference tree (config `reference`, default reference/): the small files of every
# paper-scale run, committed. With `from_reference: true` every per-job result that a
# table, figure or the scorecard reads is copied from there instead of trained, and the
# aggregates list only the runs the tree holds (common.smk, run_files):
#   snakemake -c2 rebuild --config scale=paper from_reference=true
# builds every table, figure and claims.md of the paper-scale runs, training nothing.

# every experiment the tree holds runs of (all of them, outside reference mode), then the scorecard
REBUILD_OUTPUTS = [
    *(SYNTHETIC_OUTPUTS if reference_holds("synthetic") else []),
    *toy_outputs_held(),
    *(IMAGE_OUTPUTS if reference_holds("image") else []),
    *(UCI_OUTPUTS if reference_holds("uci") else []),
    *CLAIMS_OUTPUTS,
    *(
        [
            f"results/claims_{variant}.{ext}"
            for variant in config["experiments"]["image"].get("claims_variants") or []
            for ext in ("md", "csv")
        ]
        if reference_holds("image")
        else []
    ),
]


localrules:
    rebuild,


rule rebuild:
    input:
        REBUILD_OUTPUTS,


if FROM_REFERENCE:

    localrules:
        restore_result,

    rule restore_result:
        input:
            f"{REFERENCE}/{{experiment}}/{{dataset}}/{{method}}/seed{{seed}}/{{file}}",
        output:
            "results/{experiment}/{dataset}/{method}/seed{seed}/{file}",
        log:
            "logs/restore/{experiment}/{dataset}/{method}/seed{seed}/{file}.log",
        wildcard_constraints:
            experiment="synthetic|toy|uci|image",
            file=r"particles\.npz|predictions\.npz|metrics\.json|diagnostics\.json",
        params:
            spec=restored_spec,
            reference=REFERENCE,
        shell:
            "python -m repens restore-result --reference {params.reference:q} --spec {params.spec:q}"
            " {input:q} {output:q} > {log:q} 2>&1"

    ruleorder: restore_result > train_synthetic
    ruleorder: restore_result > sample_hmc > train_toy
    ruleorder: restore_result > train_uci
    ruleorder: restore_result > train_image
