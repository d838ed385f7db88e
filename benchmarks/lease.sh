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
    echo '$ python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 50 --sets 5 --no-flops --methods de kde-wgd ssge-fwgd drle'
    timeout "${STACK_SECONDS:-40}" python benchmarks/bench_table1.py --device cuda --rounds 1 --steps 50 --sets 5 \
        --no-flops --methods de kde-wgd ssge-fwgd drle
} >"$out/bench.txt" 2>&1
timeout "${PROFILE_SECONDS:-30}" python benchmarks/bench_table1.py --device cuda --profile ssge-fwgd >"$out/profile.txt" 2>&1
left=$((total - ($(date +%s) - start)))
echo "lease: $left s left of $total"
python -m repens lease data/jobs.json --until "$left" --out "$out" "$@"
