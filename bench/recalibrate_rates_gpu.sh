#!/usr/bin/env bash
# The copy and host Adam rates of a machine file measured again at a model's -l (the host Adam
# swept over that model's shard), its compute entries kept (fresh: under 7 days), one rank and
# then RANKS ranks: the file an earlier call's runs can be predicted again from
# (bench/verify_from_logs.py) with only the region changed.  On nvidia-h200-x2, about 3 minutes:
#   FILE=bench/results/.../machine_vm_NVIDIA-H200.json SHAPE="-h 4096 --heads 32 --dtype bf16 --global-batch 8 -l 48" \
#       bash bench/recalibrate_rates_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh # (builds aebench with MPI and NCCL into a fresh $out)
mkdir -p "$out/res"
cp "$FILE" "$out/res/"
read -r -a shape <<<"--device cuda $SHAPE"
./aebench --calibrate "${shape[@]}" --results "$out/res" 2>&1 | tee "$out/calibrate.txt" | grep -vE "is fresh: kept"
./aebench --calibrate --ranks "${RANKS:-2}" "${shape[@]}" --results "$out/res" 2>&1 | tee -a "$out/calibrate.txt" | tail -n 3
cp "$out"/res/machine_*.json "$out/calibrate.txt" "$dest"/
