#!/usr/bin/env bash
# Issue 30 part 4 on one GPU: how much of a step the launches cost, from GPT-2 small down to a
# toy, and what CUDA graphs win there.  megatron-lm in bf16 (full recompute, one rank) at each
# SHAPES entry, each VARIANTS entry (a label and aebench flags, ";"-separated) interleaved REPS
# times unprofiled, then the first variant once profiled (--profile runs no graphs): the step
# time, the profiled ops' device time and the compute stream's gaps (what graphs can remove),
# and the loss at the last step (the same at every variant).
#   bash bench/launch_gpu.sh "$OUT"
#   VARIANTS="eager=--graphs off;graphs=--graphs on" bash bench/launch_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin launch
[ -x ./aebench ] && [ -z "${REBUILD:-}" ] || bench_cuda_build aebench
IFS=';' read -r -a variants <<<"${VARIANTS:-eager=}"
shapes=${SHAPES:-"l32h2048:-l 32 -h 2048 --heads 16 --seq 1024 -b 4
l12h768:-l 12 -h 768 --heads 12 --seq 1024 -b 4
l8h512:-l 8 -h 512 --heads 8 --seq 256 -b 8
l4h256:-l 4 -h 256 --heads 4 --seq 128 -b 4"}
labels=()
while IFS=: read -r sname sargs; do
    [ -n "$sname" ] || continue
    for rep in $(seq "${REPS:-2}"); do
        for v in "${variants[@]}"; do
            vname=${v%%=*} vargs=${v#*=}
            shape=(--device cuda $sargs --dtype bf16 --iters ${ITERS:-20} --log-interval 10)
            bench_run "${sname}_${vname}_$rep" -m megatron-lm $vargs
        done
    done
    v=${variants[0]}
    vname=${v%%=*}
    shape=(--device cuda $sargs --dtype bf16 --iters ${ITERS:-20} --log-interval 10)
    bench_run "${sname}_${vname}_profile" -m megatron-lm --graphs off --profile
    for v in "${variants[@]}"; do labels+=("$sname ${v%%=*}"); done
done <<<"$shapes"
python3 - "$out" "${REPS:-2}" "${labels[@]}" <<'PY' | tee "$out/table.md"
import sys
sys.path.insert(0, "bench")
from bench_json import clock_of, load_run
out, reps, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| shape | variant | step ms (each run) | SM clock | loss at the last step | profiled step ms | ops' device ms | compute gaps ms | ops a step |")
print("|---|---|---|---|---|---|---|---|---|")
for lab in labels:
    s, v = lab.split(" ")
    runs = [r for r in (load_run(out, f"{s}_{v}_{k}") for k in range(1, reps + 1)) if r]
    ms = ", ".join(f"{r['summary']['median_ms']:.2f}" for r in runs) or "failed"
    loss = runs[0]["iterations"][-1]["loss"] if runs and runs[0].get("iterations") else float("nan")
    p = load_run(out, f"{s}_{v}_profile")
    pr = (p or {}).get("profile") or {}
    busy = sum(o["ms_per_step"] for o in pr.get("ops", []))
    calls = sum(o["calls_per_step"] for o in pr.get("ops", []))
    gaps = pr["streams"][0]["gaps_ms_per_step"] if pr.get("streams") else float("nan")
    print(f"| {s} | {v} | {ms} | {clock_of(runs[0] if runs else None)} | {loss:.6f} | {pr.get('step_ms', float('nan')):.2f} | {busy:.2f} | {gaps:.2f} | {calls:.0f} |")
PY
echo "total: $(($(date +%s) - t0)) s"
