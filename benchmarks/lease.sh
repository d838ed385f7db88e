#!/usr/bin/env bash
# One GPU lease in one call: the Table 1 benchmark first (its output goes into docs/gpu.md with
# the date and device), a profile of one replayed step, then production jobs until the deadline.
# Run on the device from the repository root, with data/jobs.json and data/raw carried
# (docs/gpu.md, "A GPU node without Snakemake"):
#
#   bash benchmarks/lease.sh SECONDS [repens lease options: --only GLOB --parallel K ...]
#
# SECONDS: the whole call's budget; the lease gets what the benchmark and profile leave.
# What comes back under $OUT: bench.txt, profile.txt, results.tar.gz*, logs.tar.gz. bench.txt
# also times DE and kde-fWGD with TF32 matmuls and CIFAR-10's ResNet32 step.
#
# The benchmark also times four stacks side by side in one process (a thread and a CUDA stream
# each). The jobs run in processes (MODE=processes, the default: side by side, the first
# production call lost its jobs to failed captures, docs/gpu.md). MODE=side runs them side by
# side: --side-by-side ${SIDE:-9} --parallel 1 after the options given (the last --parallel
# counts; --stack-seeds among the options stacks each method's seeds); MODE=auto does so where
# the benchmark measured side by side at least SIDE_MIN (default 1.15x) faster.
set -u
start=$(date +%s)
total=${1:?usage: lease.sh SECONDS [lease options]}
shift
out=${OUT:?OUT: the folder whose files come back}
export PYTHONPATH=src PYTHONUNBUFFERED=1
{
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    git log -1 --format='code at %h' 2>/dev/null || true
    echo '$ python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 100'
    timeout "${BENCH_SECONDS:-80}" python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 100
    echo '$ python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 50 --sets 5 --no-flops --methods de kde-wgd ssge-fwgd drle --side-by-side'
    timeout "${STACK_SECONDS:-60}" python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 50 --sets 5 \
        --no-flops --methods de kde-wgd ssge-fwgd drle --side-by-side
    echo '$ python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 100 --no-flops --methods de kde-fwgd --tf32'
    timeout "${TF32_SECONDS:-30}" python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 100 --no-flops \
        --methods de kde-fwgd --tf32
    echo '$ python benchmarks/bench_table1.py --device cuda --config resnet32 --methods de kde-fwgd --rounds 1 --steps 20'
    timeout "${RESNET_SECONDS:-40}" python benchmarks/bench_table1.py --device cuda --config resnet32 \
        --methods de kde-fwgd --rounds 1 --steps 20
} >"$out/bench.txt" 2>&1
# PROFILE_SECONDS=0 skips the profile (a lease that has one from the same code)
if [ "${PROFILE_SECONDS:-30}" -gt 0 ]; then
    timeout "$PROFILE_SECONDS" python benchmarks/bench_table1.py --device cuda --profile ssge-fwgd >"$out/profile.txt" 2>&1
fi
mode=${MODE:-processes}
if [ "$mode" = auto ]; then
    ratio=$(sed -n 's/^side by side: .*, \([0-9.]*\)x the same steps.*/\1/p' "$out/bench.txt")
    mode=processes
    if [ -n "$ratio" ] && python -c "import sys; sys.exit(float('$ratio') < float('${SIDE_MIN:-1.15}'))"; then
        mode=side
    fi
    echo "lease: side by side measured ${ratio:-no ratio}x one at a time: $mode"
fi
side=()
[ "$mode" = side ] && side=(--side-by-side "${SIDE:-9}" --parallel 1)
left=$((total - ($(date +%s) - start)))
echo "lease: $left s left of $total"
python -m repens lease data/jobs.json --until "$left" --out "$out" "$@" "${side[@]}"
