#!/usr/bin/env bash
# Issue 30's table of each offload engine before and after the kernel work, in one call: every
# engine at l32 h2048 heads16 s1024 b4 (full recompute, clip 1.0 as the artifact), in bf16 and
# TF32, with this session's kernels (the default) and without them (
# AEBENCH_ATTENTION=mma AEBENCH_RESIDUAL_EPILOGUE=off: the mma.sync attention and the residual
# as its own pass), before/after interleaved per engine; the losses must agree bit for
# bit between the two (the wgmma attention is mma.sync's bit for bit; the residual epilogue is
# not, so with it the losses agree to the rounding of one add: the table says which).
#   bash bench/offload_ab_gpu.sh "$OUT"        ENGINES, DTYPES ("bf16 tf32"); DEVICE=cpu SHAPE="..."
# rehearses it on the CPU backend.
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin offload_ab
[ "${DEVICE:-cuda}" = cuda ] && bench_cuda_build aebench
read -r -a shape <<<"--device ${DEVICE:-cuda} ${SHAPE:--l 32 -h 2048 --heads 16 --seq 1024 -b 4} --iters 6 --log-interval 6"
for dt in ${DTYPES:-bf16 tf32}; do
    args=(--math tf32)
    [ "$dt" = bf16 ] && args=(--dtype bf16)
    for e in ${ENGINES:-megatron-lm l2l zero-offload zero-infinity stronghold}; do
        w=()
        [ "$e" = stronghold ] && w=(-w 15)
        AEBENCH_ATTENTION=mma AEBENCH_RESIDUAL_EPILOGUE=off bench_run "${e}_${dt}_before" -m "$e" "${w[@]}" "${args[@]}"
        bench_run "${e}_${dt}_after" -m "$e" "${w[@]}" "${args[@]}"
    done
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import os, sys
out = sys.argv[1]
sys.path.insert(0, "bench")
from bench_json import load_run
print(open(os.path.join(out, "device.txt")).read().splitlines()[0])
print()
print("| dtype | engine | before ms | after ms | after / before | losses |")
print("|---|---|---|---|---|---|")
for dt in ("bf16", "tf32"):
    for e in ("megatron-lm", "l2l", "zero-offload", "zero-infinity", "stronghold"):
        b, a = load_run(out, f"{e}_{dt}_before"), load_run(out, f"{e}_{dt}_after")
        if not b or not a or b.get("status") != "ok" or a.get("status") != "ok":
            if b or a:
                print(f"| {dt} | {e} | {b and b.get('status')} | {a and a.get('status')} | | |")
            continue
        bm, am = b["summary"]["median_ms"], a["summary"]["median_ms"]
        lb = [i["loss"] for i in b["iterations"]]
        la = [i["loss"] for i in a["iterations"]]
        same = "equal" if lb == la else "max rel. %.1e" % max(abs(x - y) / abs(x) for x, y in zip(lb, la))
        print(f"| {dt} | {e} | {bm:.1f} | {am:.1f} | {am / bm:.3f} | {same} |")
PY
echo "offload A/B: $(($(date +%s) - t0)) s"
