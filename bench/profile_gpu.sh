#!/usr/bin/env bash
# Where a step goes, from Nsight Systems where the GPU machine has it (issues 30 and 33), one
# call, h2048 b4 s1024:
#   megatron-lm l32 bf16 (4 iterations): the kernel summary (cuda_gpu_kern_sum), each kernel's
#     total time, calls, average;
#   stronghold l32 -w 15, the artifact's clip 1.0 (every step clips; 4 iterations): the GPU
#     trace (cuda_gpu_trace: every kernel and copy with its start, duration and stream) and the
#     OS runtime summary, to see where the forward waits after the host updates.
# Reports go under OUT as CSV (gzip); bench/profile_summary.py turns them into tables.
#   bash bench/profile_gpu.sh "$OUT"
set -uo pipefail
out=${1:-bench/results/latest}
mkdir -p "$out"
source bench/deps_env.sh
machine_info | tee "$out/device.txt"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
    /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -n 1)
echo "nsys: ${nsys:-none}"
make -j16 CUDA=1 MPI=0 aebench >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
[ -n "$nsys" ] || exit 0
"$nsys" --version | tee -a "$out/device.txt"
prof() { # tag, aebench arguments
    local tag=$1
    shift
    "$nsys" profile --trace=cuda,osrt --sample=none --cpuctxsw=none --force-overwrite=true \
        -o "$out/$tag" ./aebench --device cuda -h 2048 -b 4 --log-interval 1 --results "$out/res_$tag" "$@" \
        >"$out/$tag.txt" 2>&1
    echo "-- $tag (exit $?): $(grep -hE '^  (done|bound)' "$out/$tag.txt" | tr '\n' ' ')"
}
prof mlm_bf16 -m megatron-lm -l 32 --dtype bf16 --iters 4
prof sh_clip -m stronghold -l 32 -w 15 --iters 4 --clip-grad 1.0
"$nsys" stats --report cuda_gpu_kern_sum --format csv -o "$out/mlm_bf16" "$out/mlm_bf16.nsys-rep" >/dev/null 2>&1
"$nsys" stats --report cuda_gpu_trace --format csv -o "$out/sh_clip" "$out/sh_clip.nsys-rep" >/dev/null 2>&1
"$nsys" stats --report osrt_sum --format csv -o "$out/sh_clip" "$out/sh_clip.nsys-rep" >/dev/null 2>&1
rm -f "$out"/*.nsys-rep "$out"/*.sqlite
gzip -f "$out"/*.csv 2>/dev/null
ls -la "$out"
