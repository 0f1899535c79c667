#!/usr/bin/env bash
# Does the one-GPU offload engines' prediction error grow with the micro-batches?  (2026-11-30k:
# at l48 h4096 bf16 -b 2, global batch 16 (8 micro-batches), zero-infinity and stronghold were
# predicted 12-15% short, both in their host-to-GPU copies; each micro-batch after the first
# brings every streamed layer's gradient sum up.)  One call: calibrate one rank at -l 48 -b 2,
# then each configuration of RUNS ("tag global-batch engine options", ;-separated) trained
# 6 iterations, and its step and busy times against the prediction from that file
# (bench/busy_from_logs.py): table.md.  Needs about 170 GB of host memory (nvidia-h200-x2).
#   dest=DIR bash bench/offload_mb_gpu.sh      (from the repository root, .deps carried)
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/deps_env.sh
bench_begin offload-mb
bench_cuda_build aebench
echo "build: $(($(date +%s) - t0)) s"
model=(-l 48 -h 4096 --heads 32 --seq 1024 -b 2 --dtype bf16)
./aebench --calibrate --device cuda "${model[@]}" --global-batch 2 --results "$out/cal" >"$out/calibrate.txt" 2>&1 ||
    { tail -n 5 "$out/calibrate.txt"; exit 1; }
machine=$(ls "$out"/cal/machine_*.json | head -n 1)
echo "calibrated: $(($(date +%s) - t0)) s"
shape=(--device cuda "${model[@]}" --iters ${ITERS:-6} --log-interval 3)
IFS=';' read -r -a runs <<<"${RUNS:-zi1 2 -m zero-infinity;zi2 4 -m zero-infinity;zi8 16 -m zero-infinity;sh1 2 -m stronghold -w auto;sh8 16 -m stronghold -w auto}"
for r in "${runs[@]}"; do
    read -r tag gb opts <<<"$r"
    read -r -a o <<<"$opts"
    bench_run "$tag" --global-batch "$gb" "${o[@]}"
    echo "$tag done at $(($(date +%s) - t0)) s"
done
# (each run's step and busy times against --predict from the machine file: busy_from_logs.py)
python3 bench/busy_from_logs.py "$machine" "$out"/res_* >"$out/table.md" 2>&1
cp "$out/calibrate.txt" "$machine" "$dest"/
cat "$out/table.md"
