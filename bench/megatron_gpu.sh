#!/usr/bin/env bash
# One go on the GPU machine: build aebench with CUDA, check every CUDA op and a 20-iteration
# training run against the CPU backend, then time megatron-lm at l16 and l32 (h2048 b4
# s1024; TF32 and strict fp32) beside the PyTorch eager reference (bench/pytorch_gpt.py,
# TF32, fp32, bf16 autocast) measured in the same call, and print the table.
#
# On the device machine, from the repository root, with .deps carried (see
# ../shared/tools/device-deps.sh; cmocka is needed too):
#   bash bench/megatron_gpu.sh "$OUT"
set -uo pipefail
out=${1:-bench/results/latest}
mkdir -p "$out"
for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
export CPATH=$PWD/.deps/root/usr/include
export LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
date -u +%Y-%m-%dT%H:%MZ >>"$out/device.txt"
make -j16 CUDA=1 MPI=0 aebench build/tests/test_cuda >"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
grep -E "warning" "$out/build.txt" | head -n 20

echo "== correctness: CUDA vs CPU backend"
./build/tests/test_cuda 2>&1 | tee "$out/test_cuda.txt" | grep -E "cuda_vs_cpu|loss|PASSED|FAILED|rel"

echo "== timing"
: >"$out/pytorch.jsonl"
for layers in 16 32; do
    for math in tf32 fp32; do
        profile=0
        [ "$layers" = 16 ] && [ "$math" = tf32 ] && profile=1
        AEBENCH_PROFILE_OPS=$profile ./aebench -m megatron-lm --device cuda -l "$layers" -h 2048 -b 4 \
            --iters 12 --log-interval 12 --math "$math" --results "$out/results" \
            >"$out/aebench_l${layers}_${math}.txt" 2>&1
        tail -n 3 "$out/aebench_l${layers}_${math}.txt"
        python3 bench/pytorch_gpt.py --layers "$layers" --math "$math" --iters 12 >>"$out/pytorch.jsonl" 2>"$out/pytorch_err.txt" ||
            tail -n 5 "$out/pytorch_err.txt"
    done
done
python3 bench/pytorch_gpt.py --layers 16 --math bf16 --iters 12 >>"$out/pytorch.jsonl" 2>>"$out/pytorch_err.txt"
python3 bench/pytorch_gpt.py --layers 32 --math bf16 --iters 12 >>"$out/pytorch.jsonl" 2>>"$out/pytorch_err.txt"
python3 bench/summarize.py "$out" | tee "$out/table.md"
