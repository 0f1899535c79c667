#!/usr/bin/env bash
# stronghold's resident layers at the bottom or spread between the streamed ones (issue 14,
# part 2: "within 10% of the roofline at l64 under the V100 budgets"), on one GPU, in one call:
#  1. test_cuda's offload-engine tests (AEBENCH_CUDA_TESTS="*offload*"): --placement spread equals
#     megatron-lm on the GPU bit for bit, in TF32 and bf16, with and without clipping;
#  2. the host's bandwidths (build/bench/host_adam) for the roofline bound;
#  3. h2048 b4 TF32, --placement bottom against spread in the same binary, at l32 -w 15 and at
#     l64 -w auto under --gpu-mem-limit 32G --cpu-mem-limit 90G, each with clip 0 (the host
#     Adam under the backward), clip C (clipping on, a clip that does not bind: updated ahead
#     of the norm; the log's "redone" count says whether it bound) and the default clip 1.0
#     (binds every step of this data: waits for the norm); then -w auto with --placement auto
#     at l64 clip 0 and clip C (the rule's choice).
# Each run beside its roofline bound (bench/stronghold_summary.py).
#   bash bench/placement_gpu.sh "$OUT"        CLIP (default 1000: 50 binds in the first steps
#                                             at l64), ITERS (default 8), AHEAD_ONLY=1 (clip 0
#                                             and clip C only), SKIP_TEST_CUDA=1
set -uo pipefail
out=${1:-bench/results/latest}
mkdir -p "$out"
source bench/deps_env.sh
machine_info | tee "$out/device.txt"
t0=$(date +%s)
bench_cuda_build aebench bench-tools build/tests/test_cuda
echo "build: $(( $(date +%s) - t0 )) s"
if [ -z "${SKIP_TEST_CUDA:-}" ]; then
    AEBENCH_CUDA_TESTS="*offload*" ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$out/test_cuda.txt" | tr '\n' ' ')"
    grep -E "placement|FAIL" "$out/test_cuda.txt" | head -n 12
fi
./build/bench/host_adam --gib 4 >"$out/bandwidth.txt" 2>&1
res="$out/results"
C=${CLIP:-1000}
run() { # name, then aebench arguments
    local name=$1; shift
    ./aebench --device cuda -m stronghold -h 2048 -b 4 --results "$res" "$@" >"$out/run_$name.txt" 2>&1
    echo "-- $name (exit $?): $(grep -hE 'done:|placement:|model predicts|clip-speculate: [0-9]+ steps|OUT OF|FAILED' "$out/run_$name.txt" | tr '\n' ' ' | cut -c1-400)"
}
v100=(-l 64 -w auto --gpu-mem-limit 32G --cpu-mem-limit 90G --iters "${ITERS:-8}" --log-interval 1)
l32=(-l 32 -w 15 --iters "${ITERS:-8}" --log-interval 1)
for p in bottom spread; do
    run "l64_${p}_noclip" "${v100[@]}" --placement $p --clip-grad 0
    run "l64_${p}_ahead" "${v100[@]}" --placement $p --clip-grad "$C"
    run "l32_${p}_noclip" "${l32[@]}" --placement $p --clip-grad 0
    run "l32_${p}_ahead" "${l32[@]}" --placement $p --clip-grad "$C"
done
for p in bottom spread; do
    [ -n "${AHEAD_ONLY:-}" ] && break
    run "l64_${p}_clip1" "${v100[@]}" --placement $p --clip-grad 1.0
    run "l32_${p}_clip1" "${l32[@]}" --placement $p --clip-grad 1.0
done
run l64_auto_noclip "${v100[@]}" --clip-grad 0
run l64_auto_ahead "${v100[@]}" --clip-grad "$C"
python3 bench/stronghold_summary.py "$out" | tee "$out/table.md"
echo "total: $(( $(date +%s) - t0 )) s"
