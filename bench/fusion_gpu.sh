#!/usr/bin/env bash
# Issue 30, part 3 on one GPU: the residual after the MLP's output projection in that GEMM's
# epilogue (gpt_matmul_forward_residual), A/B in one call: test_cuda (its checks of the new op
# against the CPU, and every engine's), then megatron-lm l32 h2048 b4 s1024 in bf16 and TF32
# with AEBENCH_RESIDUAL_EPILOGUE on and off (each twice, interleaved, and once profiled).
#   bash bench/fusion_gpu.sh "$OUT"
# PARTS (default "test step"), REPS (2).
set -uo pipefail
dest=${1:-bench/results/latest}
parts=" ${PARTS:-test step} "
source bench/deps_env.sh
bench_begin fusion
make -j16 CUDA=1 MPI=0 aebench build/tests/test_cuda >"$out/build.txt" 2>&1 ||
    { tail -n 30 "$out/build.txt"; exit 1; }
if [[ $parts == *" test "* ]]; then
    timeout 420 ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $? at $(($(date +%s) - t0)) s"
    grep -E '^\[  (PASSED|FAILED)|FAILED' "$out/test_cuda.txt" | head -n 20
    grep -E 'matmul_forward_residual' "$out/test_cuda.txt" | head -n 12
    cp "$out/test_cuda.txt" "$dest/"
fi
if [[ $parts == *" step "* ]]; then
    shape=(--device cuda -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters 6 --log-interval 6)
    for dt in bf16 tf32; do
        args=(--math tf32)
        [ "$dt" = bf16 ] && args=(--dtype bf16)
        for rep in $(seq "${REPS:-2}"); do
            for epi in on off; do
                AEBENCH_RESIDUAL_EPILOGUE=$epi bench_run "megatron_${dt}_${epi}_$rep" -m megatron-lm "${args[@]}"
            done
        done
        for epi in on off; do
            AEBENCH_RESIDUAL_EPILOGUE=$epi bench_run "megatron_${dt}_${epi}_profile" -m megatron-lm "${args[@]}" --profile
        done
    done
    python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
sys.path.insert(0, "bench")
from bench_json import load_run
def load(tag):
    return load_run(out, tag)
print("| dtype | residual epilogue | step ms (each run) | loss at the last step | profiled: matmul_residual_forward + residual_forward ms | matmul_forward ms |")
print("|---|---|---|---|---|---|")
for dt in ("bf16", "tf32"):
    for epi in ("on", "off"):
        runs = [load(f"megatron_{dt}_{epi}_{r}") for r in range(1, 10)]
        runs = [r for r in runs if r]
        ms = ", ".join(f"{r['summary']['median_ms']:.1f}" for r in runs)
        loss = runs[0]["iterations"][-1]["loss"] if runs and runs[0].get("iterations") else float("nan")
        p = load(f"megatron_{dt}_{epi}_profile")
        fam = {o["op"]: o["ms_per_step"] for o in p["profile"]["ops"]} if p and "profile" in p else {}
        print(f"| {dt} | {epi} | {ms} | {loss:.6f} | {fam.get('matmul_residual_forward', 0) + fam.get('residual_forward', 0):.3f} | {fam.get('matmul_forward', 0):.3f} |")
PY
    echo "steps: $(($(date +%s) - t0)) s"
fi
