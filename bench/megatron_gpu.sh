#!/usr/bin/env bash
# One go on the GPU machine: build aebench with CUDA, check every CUDA op and 20-iteration
# training runs against the CPU backend (fp32, TF32, bf16), then time megatron-lm at l16
# and l32 (h2048 b4 s1024; TF32, strict fp32 and --dtype bf16) beside the PyTorch eager
# reference (bench/pytorch_gpt.py: TF32, fp32, bf16 autocast) measured in the same call,
# take the per-op profile (--profile) of l16 in bf16 and TF32 in separate short runs (the
# profiler records two events per op and waits at each step's end, so its runs are never the
# timed ones), and print the table.
#
# On the device machine, from the repository root, with .deps carried (see
# ../shared/tools/device-deps.sh; cmocka is needed too):
#   bash bench/megatron_gpu.sh "$OUT"
# Everything lands in a work folder; what comes back through $OUT (at most 8 files) is
# table.md, the test log, and bench.tgz with every log and JSON.
# QUICK=1: l16 only, bf16 and TF32 only (a check of a kernel change in ~3 minutes).
set -uo pipefail
dest=${1:-bench/results/latest}
out=$(mktemp -d /tmp/aebench-bench.XXXXXX)
mkdir -p "$dest"
source bench/deps_env.sh
finish() {
    tar czf "$dest/bench.tgz" -C "$out" . 2>/dev/null
    cp "$out"/table.md "$out"/test_cuda.txt "$dest"/ 2>/dev/null
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
date -u +%Y-%m-%dT%H:%MZ >>"$out/device.txt"
t0=$(date +%s)
bench_cuda_build aebench build/tests/test_cuda
grep -E "warning" "$out/build.txt" | head -n 20
echo "build: $(( $(date +%s) - t0 )) s"

echo "== correctness: CUDA vs CPU backend"
./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
echo "test_cuda exit $?"
grep -E "engine megatron|PASSED|FAILED|rel_err [0-9.e+-]+ over" "$out/test_cuda.txt"
# the largest error of each math mode
for m in fp32 tf32 bf16; do
    grep -E "^cuda_vs_cpu .* math=$m " "$out/test_cuda.txt" | sort -t= -k3 -g | tail -n 1
done

echo "== timing"
: >"$out/pytorch.jsonl"
run_aebench() { # layers mode(tf32|fp32|bf16) tag [profile]
    local args=(--math tf32)
    [ "$2" = fp32 ] && args=(--math fp32)
    [ "$2" = bf16 ] && args=(--dtype bf16)
    local iters=12 res="$out/results"
    [ "${4:-0}" = 1 ] && iters=4 && res="$out/profile_results"
    local prof=()
    [ "${4:-0}" = 1 ] && prof=(--profile)
    ./aebench -m megatron-lm --device cuda -l "$1" -h 2048 -b 4 \
        --iters "$iters" --log-interval "$iters" "${args[@]}" "${prof[@]}" --results "$res" \
        >"$out/aebench_l$1_$3.txt" 2>&1
    echo "aebench l$1 $3: $(grep -E 'done:|error|Error' "$out/aebench_l$1_$3.txt" | head -n 2)"
}
layer_list="16 32" math_list="bf16 tf32 fp32"
[ "${QUICK:-0}" = 1 ] && layer_list="16" math_list="bf16 tf32"
for layers in $layer_list; do
    for math in $math_list; do
        run_aebench "$layers" "$math" "$math"
        python3 bench/pytorch_gpt.py --layers "$layers" --math "$math" --iters 12 >>"$out/pytorch.jsonl" 2>"$out/pytorch_err.txt" ||
            tail -n 5 "$out/pytorch_err.txt"
        tail -n 1 "$out/pytorch.jsonl"
    done
done
run_aebench 16 bf16 bf16_profile 1
run_aebench 16 tf32 tf32_profile 1
python3 bench/summarize.py "$out" | tee "$out/table.md"
echo "total: $(( $(date +%s) - t0 )) s"
