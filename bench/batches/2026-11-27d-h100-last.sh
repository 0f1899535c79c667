#!/usr/bin/env bash
# The session's last device call (600 s left): test_cuda on the tree, the update A/B
# (AEBENCH_UPDATE overlap | inline, bf16 and TF32, one run each and one profiled), then
# torch.compile at bf16 full recompute beside it, each under a deadline so that what is done
# comes back.   bash bench/batches/2026-11-27d-h100-last.sh "$OUT"
# (AEBENCH_UPDATE is gone: the update overlap it measured was reverted after, 6000465.)
set -uo pipefail
dest=${1:?an output folder}
source bench/deps_env.sh
SECONDS=0
make -j16 CUDA=1 MPI=0 aebench build/tests/test_cuda >"$dest/build.txt" 2>&1 || { tail -n 20 "$dest/build.txt"; exit 1; }
echo "build: $SECONDS s"
timeout 200 ./build/tests/test_cuda >"$dest/test_cuda.txt" 2>&1
echo "test_cuda exit $? at $SECONDS s"
grep -E '^\[  (PASSED|FAILED)|FAILED' "$dest/test_cuda.txt" | head -n 20
PARTS=step REPS=1 AB_VAR=AEBENCH_UPDATE AB_VALUES="overlap inline" AB_NAME=update \
    AB_OPS="adamw,matmul_forward+matmul_gelu_forward,attention_forward" \
    timeout 260 bash bench/env_ab_gpu.sh "$dest/update"
echo "A/B done at $SECONDS s"
left=$((500 - SECONDS))
[ "$left" -gt 60 ] && timeout "$left" python3 bench/pytorch_gpt.py --layers 32 --math bf16 --recompute full --compile --iters 12 \
    >"$dest/pytorch.jsonl" 2>"$dest/pytorch_err.txt"
echo "pytorch exit $? at $SECONDS s: $(cat "$dest/pytorch.jsonl" 2>/dev/null | tail -n 1)"
