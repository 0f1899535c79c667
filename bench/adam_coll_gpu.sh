#!/usr/bin/env bash
# Issue 49's last l48 errors, measured apart in one call on nvidia-h200-x2 (about 5 minutes):
#  1. the host Adam pool on update jobs of 16, 25, 64 and 101 M parameters (build/bench/adam_jobs,
#     one region swept job after job, as the offload engines' host state is): one process with
#     every core, then two at once with half each (two ranks of the machine).  Is there a cost
#     per job, or a rate that differs with the job's size?
#  2. --calibrate at l32 h2048 and at l48's h4096 heads 32 (bf16, b 1, 2, 4, 8), then --ranks 2:
#     each collective's time beside a layer's backward (the mirror of the compute's beside the
#     collectives), into machine files that bench/replay_predict.py replays the last searches
#     with (bench/results/2026-11-30b-h200x2-collectives-beside-compute/call1: run at 0ac9a53,
#     128 MiB collectives and a per-job Adam cost since taken out).
#   bash bench/adam_coll_gpu.sh "$OUT"       (from the repository root, .deps carried)
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh # (aebench with MPI and NCCL, $out, $nccl_home)
make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" build/bench/adam_jobs >>"$out/build.txt" 2>&1 ||
    { tail -n 20 "$out/build.txt"; exit 1; }
cores=$(nproc)
lscpu | grep -iE "numa|socket" | tee "$out/numa.txt"
{
    echo "## adam_jobs: one process, $cores threads"
    ./build/bench/adam_jobs --threads "$cores" --total-m 808
    echo
    echo "## adam_jobs: two processes at once, $((cores / 2)) threads each"
    start=$(($(date +%s) + 20)) # (both allocated and zeroed by then: about 15 GB each)
    ./build/bench/adam_jobs --threads $((cores / 2)) --total-m 808 --start $start >"$out/adam_a.txt" 2>&1 &
    ./build/bench/adam_jobs --threads $((cores / 2)) --total-m 808 --start $start >"$out/adam_b.txt" 2>&1
    wait
    cat "$out/adam_a.txt"
    echo
    cat "$out/adam_b.txt"
    echo
    echo "## the calibration's own block: 64 M and its quarter, two at once"
    start=$(($(date +%s) + 5))
    ./build/bench/adam_jobs --threads $((cores / 2)) --total-m 64 --sizes-m 16,64 --start $start >"$out/adam_c.txt" 2>&1 &
    ./build/bench/adam_jobs --threads $((cores / 2)) --total-m 64 --sizes-m 16,64 --start $start >"$out/adam_d.txt" 2>&1
    wait
    cat "$out/adam_c.txt" "$out/adam_d.txt"
} 2>&1 | tee "$out/adam_jobs.md"
for shape in "l32 --device cuda -h 2048 --dtype bf16" "l48 --device cuda -h 4096 --heads 32 --dtype bf16"; do
    read -r name opts <<<"$shape"
    read -r -a o <<<"$opts --global-batch 8"
    SECONDS=0
    ./aebench --calibrate "${o[@]}" --results "$out/cal_$name" >"$out/cal_$name.txt" 2>&1 &&
        ./aebench --calibrate --ranks 2 "${o[@]}" -b 4 --results "$out/cal_$name" >>"$out/cal_$name.txt" 2>&1
    echo "== calibrate $name: exit $? in ${SECONDS} s"
    grep -E "among 2 ranks|beside it|every rank at once|slope|per layer" "$out/cal_$name.txt" | cut -c1-250
    mkdir -p "$dest/$name" && cp "$out"/cal_$name/machine_*.json "$dest/$name/" 2>/dev/null
done
cp "$out/adam_jobs.md" "$dest/"
