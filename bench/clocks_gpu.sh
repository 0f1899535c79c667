#!/usr/bin/env bash
# The GPU's SM clock, power and temperature while a step runs: whether the step's GEMMs run at
# the clock cuBLASLt's probes alone ran at (bench/lt_probe.cu: short bursts), or lower (power
# or thermal limits under a sustained step).  nvidia-smi samples every 100 ms beside
# megatron-lm l32 bf16 (12 iterations), then the table: each sample's clock, power, temperature
# and the throttle reasons, and their medians over the run.
#   bash bench/clocks_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin clocks
bench_cuda_build aebench
shape=(--device cuda -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters 12 --log-interval 12)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 100 >"$out/samples.csv" 2>"$out/smi_err.txt" &
smi=$!
sleep 1
bench_run megatron_bf16 -m megatron-lm --dtype bf16
sleep 1
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/table.md"
import csv, os, statistics, sys
out = sys.argv[1]
rows = [r for r in csv.reader(open(os.path.join(out, "samples.csv"))) if len(r) >= 7]
busy = [r for r in rows if float(r[3]) > 150]  # watts: the samples while the step ran
print(f"samples: {len(rows)}, of them under load (> 150 W): {len(busy)}")
if busy:
    med = lambda k: statistics.median(float(r[k]) for r in busy)
    print(f"| SM MHz median | SM MHz min | max SM MHz | power W median | power limit W | temperature C median |")
    print("|---|---|---|---|---|---|")
    print(f"| {med(1):.0f} | {min(float(r[1]) for r in busy):.0f} | {busy[0][2].strip()} | {med(3):.0f} | {busy[0][4].strip()} | {med(5):.0f} |")
    reasons = sorted({r[6].strip() for r in busy})
    print("throttle reasons seen under load: " + ", ".join(reasons))
PY
