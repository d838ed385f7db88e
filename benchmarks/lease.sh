#!/usr/bin/env bash
# One GPU lease in one call: the Table 1 benchmark first (its output goes into docs/gpu.md with
# the date and device), a profile of one replayed step, then production jobs until the deadline.
# Run on the device from the repository root, with data/jobs.json and data/raw carried
# (docs/gpu.md, "A GPU node without Snakemake"):
#
#   bash benchmarks/lease.sh SECONDS [repens lease options: --only GLOB --parallel K ...]
#
# SECONDS: the whole call's budget; the lease gets what the benchmark and profile leave.
# What comes back under $OUT: bench.txt, profile.txt, results.tar.gz*, logs.tar.gz.
#
# The benchmark also times four stacks side by side in one process (a thread and a CUDA stream
# each); where that beats them one at a time by SIDE_MIN (default 1.15x), the lease runs its
# jobs that way too: --stack-seeds --side-by-side ${SIDE:-9} --parallel 1 after the options
# given (the last --parallel counts). MODE=processes or MODE=side decides without measuring.
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
} >"$out/bench.txt" 2>&1
timeout "${PROFILE_SECONDS:-30}" python benchmarks/bench_table1.py --device cuda --profile ssge-fwgd >"$out/profile.txt" 2>&1
mode=${MODE:-auto}
if [ "$mode" = auto ]; then
    ratio=$(sed -n 's/^side by side: .*, \([0-9.]*\)x the same steps.*/\1/p' "$out/bench.txt")
    mode=processes
    if [ -n "$ratio" ] && python -c "import sys; sys.exit(float('$ratio') < float('${SIDE_MIN:-1.15}'))"; then
        mode=side
    fi
    echo "lease: side by side measured ${ratio:-no ratio}x one at a time: $mode"
fi
side=()
[ "$mode" = side ] && side=(--stack-seeds --side-by-side "${SIDE:-9}" --parallel 1)
left=$((total - ($(date +%s) - start)))
echo "lease: $left s left of $total"
python -m repens lease data/jobs.json --until "$left" --out "$out" "$@" "${side[@]}"
