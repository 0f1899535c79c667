#!/usr/bin/env bash
# The GPU's SM clock and power while work runs: is a step's GEMM rate (600-660 TFLOP/s in a bf16
# l32 step) below what cuBLASLt reaches alone (730-850, bench/lt_probe.cu: short bursts on
# constant operands) because the GPU holds a lower clock under a sustained load?
# nvidia-smi samples every 100 ms beside four phases, one after another:
#   probe_constant, probe_random: lt_probe --sustain (the bf16 fc product back to back, on
#     constant operands, then on random ones);
#   step_bf16, step_tf32: megatron-lm l32 h2048 b4 (30 and 15 iterations).
# Then one row a phase: its busy samples (above 200 W, from 1 s after it began: nvidia-smi's
# power reading trails by about a second; a step's setup reads 100-130 W), their SM clock
# (median, min), power, the share of them with the software power cap among the clock-event
# reasons (bit 0x4), and the phase's own rate.
#   bash bench/clocks_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin clocks
bench_cuda_build aebench
nvcc -O2 -arch=sm_90 bench/lt_probe.cu -lcublasLt -o "$out/lt_probe" >"$out/probe_build.txt" 2>&1 ||
    { tail -n 20 "$out/probe_build.txt"; exit 1; }
shape=(--device cuda -l 32 -h 2048 --heads 16 --seq 1024 -b 4)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 100 >"$out/samples.csv" 2>"$out/smi_err.txt" &
smi=$!
# phase NAME COMMAND...: its start and end (epoch seconds) into phases.txt
phase() {
    local name=$1 t
    shift
    t=$(date +%s.%N)
    "$@"
    echo "$name $t $(date +%s.%N)" >>"$out/phases.txt"
    sleep 2 # the power reading falls back before the next phase
}
sleep 1
phase probe_both timeout 120 "$out/lt_probe" --sustain 5 >"$out/probe.txt" 2>&1
phase step_bf16 bench_run megatron_bf16 -m megatron-lm --dtype bf16 --iters 30 --log-interval 30
phase step_tf32 bench_run megatron_tf32 -m megatron-lm --iters 15 --log-interval 15
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/table.md"
import csv, datetime, os, re, statistics, sys
out = sys.argv[1]
def epoch(stamp):  # nvidia-smi's local time, as `date` gives it on the same machine
    return datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
rows = []
for r in csv.reader(open(os.path.join(out, "samples.csv"))):
    try:
        rows.append((epoch(r[0]), float(r[1]), float(r[3]), float(r[4]), int(r[6].strip(), 16)))
    except (ValueError, IndexError):
        pass
phases = {}
for line in open(os.path.join(out, "phases.txt")):
    name, t0, t1 = line.split()
    phases[name] = (float(t0), float(t1))
# the probe's two runs: each one's start (epoch) and its batches' times since then
probe, starts = {"constant": [], "random": []}, {}
for line in open(os.path.join(out, "probe.txt")):
    m = re.match(r"sustain (\w+) ([\d.]+) ([\d.]+)", line)
    if m:
        probe[m.group(1)].append((float(m.group(2)), float(m.group(3))))
    m = re.match(r"sustain_start (\w+) ([\d.]+)", line)
    if m:
        starts[m.group(1)] = float(m.group(2))
spans, rates = [], {}
for k in ("constant", "random"):
    if probe[k] and k in starts:
        spans.append(("probe_" + k, starts[k], starts[k] + probe[k][-1][0]))
        late = [v for t, v in probe[k] if t >= probe[k][-1][0] - 2.0]
        rates["probe_" + k] = (f"fc GEMM {probe[k][0][1]:.0f} TFLOP/s in the first 40, "
                               f"{statistics.median(late):.0f} over the last 2 s")
for name in ("step_bf16", "step_tf32"):
    if name in phases:
        spans.append((name, *phases[name]))
        txt = os.path.join(out, "megatron_" + name[5:] + ".txt")
        m = re.search(r"median ([\d.]+) ms/it", open(txt).read()) if os.path.exists(txt) else None
        rates[name] = f"{m.group(1)} ms a step" if m else "(no done line)"
print(f"samples: {len(rows)} (every 100 ms); power limit {rows[0][3] if rows else 0:.0f} W; the SM clock's maximum is samples.csv's third column")
print()
print("| phase | busy samples | SM MHz median | SM MHz min | power W median | software power cap in | rate |")
print("|---|---|---|---|---|---|---|")
for name, a, b in spans:
    # busy: above 200 W (a step's setup, with the GPU waiting on the host, reads 100-130 W)
    s = [r for r in rows if a + 1.0 <= r[0] <= b and r[2] > 200.0]
    if not s:
        print(f"| {name} | 0 | | | | | {rates.get(name, '')} |")
        continue
    capped = sum(1 for r in s if r[4] & 0x4)
    print(f"| {name} | {len(s)} | {statistics.median(r[1] for r in s):.0f} | {min(r[1] for r in s):.0f} | "
          f"{statistics.median(r[2] for r in s):.0f} | {capped} of {len(s)} | {rates.get(name, '')} |")
PY
cp "$out/table.md" "$out/samples.csv" "$out/phases.txt" "$out/probe.txt" "$dest/" 2>/dev/null
