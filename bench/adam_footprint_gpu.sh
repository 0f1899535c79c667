#!/usr/bin/env bash
# Does the host Adam's rate on two ranks depend on how much host memory the ranks' state spans?
# (Same machine, same jobs: zero-offload's host Adam ran 0.47 ms per M parameters a rank at l32
# and 0.33 at l48; zero-infinity 0.41 and 0.32.)  build/bench/adam_jobs as two processes at once,
# 16 threads each, over a region of l32's shard (858 M parameters) and of l48's (4,930 M), jobs of
# l32's and l48's layer shards (25 M, 101 M).  On nvidia-h200-x2 (about 2 minutes):
#   bash bench/adam_footprint_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
mkdir -p "$dest"
source bench/deps_env.sh
make -j16 CUDA=1 build/bench/adam_jobs >"$dest/build.txt" 2>&1 || { tail -n 20 "$dest/build.txt"; exit 1; }
half=$(($(nproc) / 2))
for total in 858 4930; do
    # (both allocated and zeroed before the start: about 18 B a parameter, 5-10 GB/s each)
    start=$(($(date +%s) + 5 + total / 200))
    echo "## two processes at once, $half threads each, a region of $total M parameters each"
    ./build/bench/adam_jobs --threads "$half" --total-m "$total" --sizes-m 25,101 --start "$start" >"$dest/a_$total.txt" 2>&1 &
    ./build/bench/adam_jobs --threads "$half" --total-m "$total" --sizes-m 25,101 --start "$start" >"$dest/b_$total.txt" 2>&1
    wait
    cat "$dest/a_$total.txt" "$dest/b_$total.txt"
done | tee "$dest/adam_footprint.md"
