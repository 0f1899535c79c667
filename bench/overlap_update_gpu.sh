#!/usr/bin/env bash
# Issue 30 on one GPU: megatron-lm's AdamW on its own stream beside the next step's forward
# (the default) against the same binary with AEBENCH_OVERLAP_UPDATE=off (AdamW on the compute
# stream after the norm, as before), l32 h2048 heads16 s1024 b4, clip 1.0:
#  1. test_cuda (every op and engine against the CPU; megatron-lm's losses and parameters);
#  2. bf16 and TF32 under full recompute, bf16 under selective: on / off / on / off, one after
#     the other on the same machine, and the losses of on and off compared (the same bits);
#  3. a profile of the bf16 full step with the overlap (the update stream's busy time);
#  4. PyTorch (bench/pytorch_gpt.py) torch.compile at the same settings, in the same call.
#   bash bench/overlap_update_gpu.sh "$OUT"
# LAYERS (32), TORCH (1), DEVICE=cpu SHAPE="..." (the script's own test on the CPU backend).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_workdir overlap
machine_info | tee "$out/device.txt"
t0=$(date +%s)
if [ "${DEVICE:-cuda}" = cuda ]; then
    make -j16 CUDA=1 MPI=0 aebench build/tests/test_cuda >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
    timeout 300 ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$out/test_cuda.txt" | tr '\n' ' ')"
fi
echo "build and test_cuda: $(($(date +%s) - t0)) s"

L=${LAYERS:-32}
read -r -a shape <<<"--device ${DEVICE:-cuda} ${SHAPE:--l $L -h 2048 --heads 16 --seq 1024 -b 4} --iters 8 --log-interval 8"
for cfg in "bf16 full" "tf32 full" "bf16 selective"; do
    read -r dt m <<<"$cfg"
    args=(--math tf32)
    [ "$dt" = bf16 ] && args=(--dtype bf16)
    for rep in 1 2; do
        bench_run "${dt}_${m}_on$rep" -m megatron-lm "${args[@]}" --recompute "$m"
        AEBENCH_OVERLAP_UPDATE=off bench_run "${dt}_${m}_off$rep" -m megatron-lm "${args[@]}" --recompute "$m"
    done
done
bench_run bf16_full_profile -m megatron-lm --dtype bf16 --profile
if [ "${TORCH:-1}" = 1 ] && [ "${DEVICE:-cuda}" = cuda ]; then
    for cfg in "bf16 full" "tf32 full" "bf16 selective"; do
        read -r dt m <<<"$cfg"
        timeout 300 python3 bench/pytorch_gpt.py --layers "$L" --math "$dt" --recompute "$m" --compile --iters 12 \
            >>"$out/pytorch.jsonl" 2>>"$out/pytorch_err.txt" || echo "pytorch $dt $m failed: $(tail -n 2 "$out/pytorch_err.txt")"
    done
fi

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
def load(tag):
    f = sorted(glob.glob(os.path.join(out, "res_" + tag, "log_*.json")))
    return json.load(open(f[-1])) if f else None
torch = [json.loads(l) for l in open(os.path.join(out, "pytorch.jsonl"))] if os.path.exists(os.path.join(out, "pytorch.jsonl")) else []
PEAK = {"bf16": 989.0, "tf32": 494.0}
print(open(os.path.join(out, "device.txt")).read().splitlines()[0])
print()
print("| dtype | recompute | update beside the forward ms (2 runs) | update after the norm ms (2 runs) | saved | MFU on / off | same losses | torch.compile ms | vs compile (on) |")
print("|---|---|---|---|---|---|---|---|---|")
for dt, m in (("bf16", "full"), ("tf32", "full"), ("bf16", "selective")):
    on = [load(f"{dt}_{m}_on{r}") for r in (1, 2)]
    off = [load(f"{dt}_{m}_off{r}") for r in (1, 2)]
    if not all(on + off) or any(d.get("status") != "ok" for d in on + off):
        print(f"| {dt} | {m} | failed | | | | | | |"); continue
    ms_on = [d["summary"]["median_ms"] for d in on]
    ms_off = [d["summary"]["median_ms"] for d in off]
    same = all([i["loss"] for i in a["iterations"]] == [i["loss"] for i in on[0]["iterations"]] for a in on + off)
    a, b = statistics.mean(ms_on), statistics.mean(ms_off)
    tf = lambda d: d["summary"]["model_tflops"]
    t = [x for x in torch if x["math"] == dt and x.get("recompute") == m and x["impl"] == "pytorch-compile" and "ms" in x]
    c = t[-1]["ms"] if t else float("nan")
    print(f"| {dt} | {m} | {ms_on[0]:.1f} / {ms_on[1]:.1f} | {ms_off[0]:.1f} / {ms_off[1]:.1f} | {b - a:.1f} ms ({100 * (b - a) / b:.1f}%) | "
          f"{100 * tf(on[0]) / PEAK[dt]:.1f}% / {100 * tf(off[0]) / PEAK[dt]:.1f}% | {'yes' if same else 'NO'} | {c:.1f} | {c / a:.2f}x |")
p = load("bf16_full_profile")
if p and "profile" in p:
    pr = p["profile"]
    print()
    print(f"profile, bf16 full with the overlap: {pr['step_ms']:.1f} ms a step; streams: " +
          "; ".join(f"stream {s['stream']} {s['ops_per_step']:.0f} ops, busy {s['busy_ms_per_step']:.1f} ms, gaps {s['gaps_ms_per_step']:.1f} ms" for s in pr["streams"]))
    for o in sorted(pr["ops"], key=lambda o: -o["ms_per_step"])[:8]:
        print(f"  {o['op']}: {o['ms_per_step']:.2f} ms/step, {o['calls_per_step']:.0f} calls")
PY
echo "total: $(($(date +%s) - t0)) s"
