#!/usr/bin/env bash
# The host Adam's rate against the size of the region each rank's state spans, on the two-H200
# machine (issue 49): at l48 the offload engines' updates over 4.4-4.9 G parameters a rank ran
# 0.32-0.33 ms per M, where --calibrate's sweep over 1,678 M (its region capped by MemAvailable)
# said 0.393 with the bf16 copy and 0.316 without, and its one 64 M block 0.355 and 0.308.
# build/bench/adam_jobs as two processes at once (16 threads each), 101 M jobs, over regions of
# 403 to 4,930 M parameters, with and without the bf16 copy; then the largest region's first
# 858 M alone (is it the region allocated or the part swept that sets the rate?).  MemAvailable
# is sampled every 2 s throughout (the calibration sized its region by it).  About 2-3 minutes:
#   bash bench/adam_region_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
mkdir -p "$dest"
source bench/deps_env.sh
{
    grep -E "MemTotal|MemFree|MemAvailable|AnonHugePages|Shmem:|HugePages_Total|Mlocked" /proc/meminfo
    cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
    lscpu | grep -iE "numa|socket|model name"
    df -h /tmp /dev/shm
} >"$dest/host.txt" 2>&1
cat "$dest/host.txt"
make -j16 build/bench/adam_jobs >"$dest/build.txt" 2>&1 || { tail -n 20 "$dest/build.txt"; exit 1; }
(while sleep 2; do echo "$(date +%s) $(grep MemAvailable /proc/meminfo)"; done) >"$dest/meminfo.txt" &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
half=$(($(nproc) / 2))
# two processes at once over the same options: their tables, one after the other
pair() {
    local total=$1
    shift
    local start=$(($(date +%s) + 5 + total / 150))
    ./build/bench/adam_jobs --threads "$half" --total-m "$total" --sizes-m 101 --start "$start" "$@" >"$dest/a.txt" 2>&1 &
    ./build/bench/adam_jobs --threads "$half" --total-m "$total" --sizes-m 101 --start "$start" "$@" >"$dest/b.txt" 2>&1
    wait
    cat "$dest/a.txt" "$dest/b.txt"
}
for total in 403 858 1677 3400 4930; do
    pair "$total"
    pair "$total" --fp32
done | tee "$dest/adam_region.md"
{
    pair 4930 --sweep-m 858
    pair 4930 --sweep-m 858 --fp32
} | tee -a "$dest/adam_region.md"
rm -f "$dest/a.txt" "$dest/b.txt"
