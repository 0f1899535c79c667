#!/usr/bin/env bash
# Issue 30, part 1 on one GPU: where a step goes, op family by family (aebench --profile),
# for megatron-lm l32 h2048 b4 s1024 in bf16 and TF32 (full activation checkpointing, the
# issue's configuration) and for each offload engine at l32 TF32 with the artifact's clip,
# beside the same runs unprofiled (their step time is the one to quote: the profile's events
# and its wait at each step's end slow a step a little), and cuBLASLt's best algorithm for
# each GEMM shape of the layer (bench/lt_probe.cu), so that each GEMM family's TFLOP/s can be
# read against what the library reaches on that shape alone.
#   bash bench/profile_gpu.sh "$OUT"
# ENGINES (default "megatron-lm l2l zero-offload zero-infinity stronghold"), LAYERS (32).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin profile
bench_cuda_build aebench
nvcc -O2 -arch=sm_90 bench/lt_probe.cu -lcublasLt -o "$out/lt_probe" >"$out/lt_build.txt" 2>&1 &&
    (timeout 120 "$out/lt_probe" >"$out/lt_probe.txt" 2>&1 || echo "lt_probe failed: $(tail -n 2 "$out/lt_probe.txt")")
echo "builds and lt_probe: $(($(date +%s) - t0)) s"

L=${LAYERS:-32}
shape=(--device cuda -l "$L" -h 2048 --heads 16 --seq 1024 -b 4 --iters 6 --log-interval 6)
for dt in bf16 tf32; do
    args=(--math tf32)
    [ "$dt" = bf16 ] && args=(--dtype bf16)
    bench_run "megatron_${dt}" -m megatron-lm "${args[@]}"
    bench_run "megatron_${dt}_profile" -m megatron-lm "${args[@]}" --profile
done
for e in ${ENGINES:-l2l zero-offload zero-infinity stronghold}; do
    [ "$e" = megatron-lm ] && continue
    w=()
    [ "$e" = stronghold ] && w=(-w 15)
    bench_run "$e" -m "$e" "${w[@]}"
    bench_run "${e}_profile" -m "$e" "${w[@]}" --profile
done

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
sys.path.insert(0, "bench")
from bench_json import load_run
def load(tag):
    return load_run(out, tag)
print("| run | step ms (unprofiled) | step ms (profiled) | ops' device ms | stream 1 gaps ms | top families (ms/step, TFLOP/s) |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(out, "res_*_profile"))):
    tag = os.path.basename(f)[4:-8]
    p, n = load(tag + "_profile"), load(tag)
    if not p or "profile" not in p:
        print(f"| {tag} | failed | | | | |"); continue
    pr = p["profile"]
    ops = sorted(pr["ops"], key=lambda o: -o["ms_per_step"])
    busy = sum(o["ms_per_step"] for o in ops)
    top = "; ".join(f"{o['op']} {o['ms_per_step']:.1f}" + (f" ({o['flops_per_step'] / o['ms_per_step'] / 1e9:.0f})" if o["flops_per_step"] else "")
                    for o in ops[:6])
    gaps = pr["streams"][0]["gaps_ms_per_step"] if pr.get("streams") else float("nan")
    print(f"| {tag} | {n['summary']['median_ms'] if n else float('nan'):.1f} | {pr['step_ms']:.1f} | {busy:.1f} | {gaps:.1f} | {top} |")
print()
for f in sorted(glob.glob(os.path.join(out, "res_*_profile"))):
    tag = os.path.basename(f)[4:-8]
    p = load(tag + "_profile")
    if not p or "profile" not in p: continue
    pr = p["profile"]
    print(f"\n{tag}: {pr['steps']} steps, {pr['step_ms']:.1f} ms each\n")
    print("| op | calls/step | ms/step | of step | TFLOP/s | GB/s |")
    print("|---|---|---|---|---|---|")
    for o in sorted(pr["ops"], key=lambda o: -o["ms_per_step"]):
        ms = o["ms_per_step"]
        tf = o["flops_per_step"] / (ms * 1e-3) / 1e12 if ms > 0 and o["flops_per_step"] else 0
        gb = o["bytes_per_step"] / (ms * 1e-3) / 1e9 if ms > 0 and o["bytes_per_step"] else 0
        print(f"| {o['op']} | {o['calls_per_step']:.1f} | {ms:.2f} | {100 * ms / pr['step_ms']:.1f}% | {tf:.1f} | {gb:.1f} |")
PY
echo "cuBLASLt on the layer's shapes (heuristic's first choice against the best):"
tail -n 40 "$out/lt_probe.txt" 2>/dev/null | tee -a "$out/table.md"
echo "total: $(($(date +%s) - t0)) s"
