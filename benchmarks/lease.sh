#!/usr/bin/env bash
# One GPU lease in one call: the Table 1 benchmark first (its output goes into docs/gpu.md with
# the date and device), the measurements a lease still owes, then production jobs until the
# deadline. Run on the device from the repository root, with data/jobs.json and data/raw
# carried (docs/gpu.md, "A GPU node without Snakemake"):
#
#   bash benchmarks/lease.sh SECONDS [repens lease options: --only GLOB --parallel K ...]
#
# SECONDS: the whole call's budget; the jobs get what the measurements leave.
# What comes back under $OUT: bench.txt, profile.txt, results.tar.gz*, logs.tar.gz.
#
# Each measurement has a time limit in seconds; 0 skips it:
#   BENCH_SECONDS (80)   every method one job at a time, fp32: seed-steps/s, TFLOP/s, the block
#   STACK_SECONDS (60)   four stacks of five seeds one at a time, then side by side in one process
#   TF32_SECONDS (0)     DE and kde-fWGD with TF32 matmuls (measured; docs/gpu.md)
#   RESNET_SECONDS (40)  CIFAR-10's ResNet32 step, DE and kde-fWGD, fp32
#   PROFILE_SECONDS (0)  the top kernels of a replayed ssge-fWGD step
#   SOLVE_SECONDS (20)   the profile's two top costs, float64 LU inverse and the median, each
#                        against a candidate (benchmarks/bench_solve_median.py)
#   TRIAL_SECONDS (150)  MODE=auto or side only: the lease's first jobs side by side for 600 steps
#                        (benchmarks/side_trial.py)
# MODE: how the jobs run. processes: a process each. side: side by side in one process
# (--side-by-side ${SIDE:-9} --parallel 1 after the options given; --stack-seeds among them
# stacks each method's seeds), where the trial passed. auto (the default): side by side where
# the trial passed and the stacks ran at least SIDE_MIN (1.15) times faster side by side;
# in processes otherwise.
set -u
start=$(date +%s)
total=${1:?usage: lease.sh SECONDS [lease options]}
shift
out=${OUT:?OUT: the folder whose files come back}
export PYTHONPATH=src PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1  # a fatal signal prints every thread's Python stack
mode=${MODE:-auto}

part() { # SECONDS COMMAND...: the command, echoed, under a time limit; nothing for 0 seconds
    local seconds=$1
    shift
    [ "$seconds" -gt 0 ] || return 0
    echo "\$ $*"
    timeout "$seconds" "$@"
}

bench=(python benchmarks/bench_table1.py --device cuda)
{
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    git log -1 --format='code at %h' 2>/dev/null || true
    part "${BENCH_SECONDS:-80}" "${bench[@]}" --rounds 1 --steps 100
    part "${STACK_SECONDS:-60}" "${bench[@]}" --rounds 1 --steps 50 --sets 5 --no-flops \
        --methods de kde-wgd ssge-fwgd drle --side-by-side
    part "${TF32_SECONDS:-0}" "${bench[@]}" --rounds 1 --steps 100 --no-flops --methods de kde-fwgd --tf32
    part "${RESNET_SECONDS:-40}" "${bench[@]}" --config resnet32 --methods de kde-fwgd --rounds 1 --steps 20
    part "${SOLVE_SECONDS:-20}" python benchmarks/bench_solve_median.py --device cuda
} >"$out/bench.txt" 2>&1
part "${PROFILE_SECONDS:-0}" "${bench[@]}" --profile ssge-fwgd >"$out/profile.txt" 2>&1

trial=skipped
if [ "$mode" != processes ]; then
    python -m repens run-jobs data/jobs.json --prepare-only >/dev/null 2>&1
    if part "${TRIAL_SECONDS:-150}" python benchmarks/side_trial.py data/jobs.json --jobs "${SIDE:-9}" --steps 600 \
        --timeout "$(( ${TRIAL_SECONDS:-150} - 10 ))" >>"$out/bench.txt" 2>&1 && [ "${TRIAL_SECONDS:-150}" -gt 0 ]; then
        trial=ok
    else
        trial=failed
    fi
fi
if [ "$mode" = auto ]; then
    ratio=$(sed -n 's/^side by side: .*, \([0-9.]*\)x the same steps.*/\1/p' "$out/bench.txt")
    mode=processes
    if [ "$trial" = ok ] && [ -n "$ratio" ] && python -c "import sys; sys.exit(float('$ratio') < float('${SIDE_MIN:-1.15}'))"; then
        mode=side
    fi
    echo "lease: side by side measured ${ratio:-no ratio}x one at a time, its trial $trial: $mode"
elif [ "$mode" = side ] && [ "$trial" != ok ]; then
    echo "lease: the side-by-side trial $trial: processes"
    mode=processes
fi
side=()
[ "$mode" = side ] && side=(--side-by-side "${SIDE:-9}" --parallel 1)
left=$((total - ($(date +%s) - start)))
echo "lease: $left s left of $total"
python -m repens lease data/jobs.json --until "$left" --out "$out" "$@" "${side[@]}"
