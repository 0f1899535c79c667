#!/usr/bin/env bash
# Issue 30, part 5 on one GPU: --recompute full | selective | none.  In one call:
#  1. megatron-lm l32 h2048 heads16 s1024 b4 in bf16 and TF32 under each mode, beside the
#     PyTorch reference (bench/pytorch_gpt.py) in eager and torch.compile at the same
#     recompute (selective there: torch.utils.checkpoint's policy saving every GEMM's output);
#     step ms, model TFLOP/s and MFU (of 989 bf16 / 494 TF32 dense TFLOP/s on an H100 SXM;
#     the device line says which card ran), peak GPU memory;
#  2. each offload engine at l32 TF32 (the artifact's math and clip) under full and selective;
#  3. the same losses: each mode's losses against full's, from the JSON (TF32: bit for bit; bf16:
#     full's forward GELU is cuBLASLt's epilogue, selective's its own op, so there the losses
#     agree to the bf16 bound, not the bit; with the epilogues off they agree bit for bit, which
#     test_cuda's test_recompute_modes_on_gpu checks: aebench has no switch for them, issue 48).
#   bash bench/recompute_gpu.sh "$OUT"
# LAYERS (32), DTYPES ("bf16 tf32"), TORCH (1: also PyTorch; 0: aebench only), TORCH_EAGER (1; 0: torch.compile only),
# ENGINES (the offload engines);
# WINDOW (stronghold's, 15); DEVICE=cpu SHAPE="..." runs the same on the CPU backend (how the script itself is tested).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin recompute
[ "${DEVICE:-cuda}" = cuda ] && bench_cuda_build aebench
echo "build: $(($(date +%s) - t0)) s"

L=${LAYERS:-32}
read -r -a shape <<<"--device ${DEVICE:-cuda} ${SHAPE:--l $L -h 2048 --heads 16 --seq 1024 -b 4} --iters 8 --log-interval 8"
for dt in ${DTYPES:-bf16 tf32}; do
    args=(--math tf32)
    [ "$dt" = bf16 ] && args=(--dtype bf16)
    for m in full selective none; do
        bench_run "megatron_${dt}_${m}" -m megatron-lm "${args[@]}" --recompute "$m"
        if [ "${TORCH:-1}" = 1 ]; then
            impls=("" --compile)
            [ "${TORCH_EAGER:-1}" = 0 ] && impls=(--compile)
            for c in "${impls[@]}"; do
                timeout 400 python3 bench/pytorch_gpt.py --layers "$L" --math "$dt" --recompute "$m" $c --iters 12 \
                    >>"$out/pytorch.jsonl" 2>>"$out/pytorch_err.txt" || echo "pytorch $dt $m $c failed: $(tail -n 2 "$out/pytorch_err.txt")"
            done
        fi
    done
done
for e in ${ENGINES:-l2l zero-offload zero-infinity stronghold}; do
    w=()
    [ "$e" = stronghold ] && w=(-w "${WINDOW:-15}")
    for m in full selective; do bench_run "${e}_${m}" -m "$e" "${w[@]}" --recompute "$m"; done
done

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
PEAK = {"bf16": 989.0, "tf32": 494.0}
sys.path.insert(0, "bench")
from bench_json import clock_of, load_run
def load(tag):
    return load_run(out, tag)
torch = [json.loads(l) for l in open(os.path.join(out, "pytorch.jsonl"))] if os.path.exists(os.path.join(out, "pytorch.jsonl")) else []
def torch_ms(dt, m, impl):
    r = [t for t in torch if t["math"] == dt and t.get("recompute") == m and t["impl"] == impl]
    return r[-1]["ms"] if r and "ms" in r[-1] else float("nan")
print(open(os.path.join(out, "device.txt")).read().splitlines()[0])
print()
print("| dtype | recompute | aebench ms | SM clock | model TFLOP/s | MFU | GPU peak GiB | PyTorch eager ms | torch.compile ms | vs eager | vs compile |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for dt in ("bf16", "tf32"):
    for m in ("full", "selective", "none"):
        d = load(f"megatron_{dt}_{m}")
        if not d or d.get("status") != "ok":
            print(f"| {dt} | {m} | {d and d.get('status')} | | | | | | | | |"); continue
        s = d["summary"]
        ms, tf = s["median_ms"], s["model_tflops"]
        peak = d["memory"]["gpu"]["peak_bytes"]
        e, c = torch_ms(dt, m, "pytorch"), torch_ms(dt, m, "pytorch-compile")
        print(f"| {dt} | {m} | {ms:.1f} | {clock_of(d)} | {tf:.1f} | {100 * tf / PEAK[dt]:.1f}% | {peak / 2**30:.1f} | {e:.1f} | {c:.1f} | {e / ms:.2f}x | {c / ms:.2f}x |")
print()
print("Losses against full's: whether they are equal bit for bit (TF32 must be), and the largest relative difference")
print()
print("| dtype | recompute | losses equal | max rel. diff |")
print("|---|---|---|---|")
for dt in ("bf16", "tf32"):
    fd = load(f"megatron_{dt}_full")
    for m in ("selective", "none"):
        dd = load(f"megatron_{dt}_{m}")
        eq = fd and dd and [i["loss"] for i in fd["iterations"]] == [i["loss"] for i in dd["iterations"]]
        rel = max((abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(fd["iterations"], dd["iterations"])), default=float("nan")) if fd and dd else float("nan")
        print(f"| {dt} | {m} | {'yes' if eq else 'no'} | {rel:.2e} |")
print()
print("| engine (l32 TF32, clip 1.0) | full ms | selective ms | selective / full |")
print("|---|---|---|---|")
for e in ("l2l", "zero-offload", "zero-infinity", "stronghold"):
    f, s = load(f"{e}_full"), load(f"{e}_selective")
    fm = f["summary"]["median_ms"] if f and f.get("status") == "ok" else float("nan")
    sm = s["summary"]["median_ms"] if s and s.get("status") == "ok" else float("nan")
    print(f"| {e}{' -w 15' if e == 'stronghold' else ''} | {fm:.1f} | {sm:.1f} | {sm / fm:.3f} |")
PY
echo "total: $(($(date +%s) - t0)) s"
