#!/usr/bin/env bash
# Issue 30, part 2 on one GPU: the tensor-core attention's tile configurations timed one by
# one on the l32 model's shape (bench/attn_sweep.cu: every kernel of
# kernels/cuda/cuda_attention_tc.cuh, checked against the first configuration and against
# itself), test_cuda's attention checks against the CPU, and megatron-lm l32 bf16 / TF32
# steps with the configuration the backend uses.
#   bash bench/attn_gpu.sh "$OUT"
# PARTS (default "sweep test step"; "ncu" adds Nsight Compute on the sweep's first configurations,
# "wgmma" bench/attn_wgmma.cu: the wgmma kernels against the mma.sync ones, "tf32"
# bench/attn_wgmma_tf32.cu: the TF32 wgmma kernels and their variants against mma.sync), SHAPE (attn_sweep's B T C NH, default the model's).
set -uo pipefail
dest=${1:-bench/results/latest}
parts=" ${PARTS:-sweep test step} "
source bench/deps_env.sh
bench_begin attn
if [[ $parts == *" sweep "* ]]; then
    nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels bench/attn_sweep.cu -o "$out/attn_sweep" \
        >"$out/sweep_build.txt" 2>&1 || { tail -n 30 "$out/sweep_build.txt"; exit 1; }
    # shellcheck disable=SC2086
    timeout 300 "$out/attn_sweep" ${SHAPE:-} | tee "$out/table.md"
    echo "sweep: $(($(date +%s) - t0)) s"
fi
# run_hopper NAME TABLE: bench/NAME.cu built for sm_90a and run on SHAPE, its table kept
run_hopper() {
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels "bench/$1.cu" \
        -o "$out/$1" >"$out/$1_build.txt" 2>&1 || { tail -n 30 "$out/$1_build.txt"; return 1; }
    # shellcheck disable=SC2086
    timeout 120 "$out/$1" ${SHAPE:-} | tee "$out/$2"
    echo "$1: exit ${PIPESTATUS[0]} at $(($(date +%s) - t0)) s"
    cp "$out/$2" "$dest/" 2>/dev/null
}
# the wgmma kernels against the backend's mma.sync ones
[[ $parts == *" wgmma "* ]] && run_hopper attn_wgmma wgmma.md
# the TF32 wgmma experiment against the backend's mma.sync TF32 kernels
[[ $parts == *" tf32 "* ]] && run_hopper attn_wgmma_tf32 wgmma_tf32.md
if [[ $parts == *" ncu "* ]]; then
    # where each kernel's time goes: the first launch of each (the sweep's first configuration)
    # NCU_PROGRAM=attn_wgmma profiles the wgmma kernels (its first configuration) instead
    prog=${NCU_PROGRAM:-attn_sweep}
    [ -x "$out/$prog" ] || nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels \
        -lineinfo "bench/$prog.cu" -o "$out/$prog" >"$out/ncu_build.txt" 2>&1
    ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    if [ -z "$ncu_bin" ]; then
        echo "ncu: not on this machine"
    else
        for k in ${NCU_KERNELS:-flash_forward_tc flash_backward_dq_tc flash_backward_dkv_tc}; do
            timeout 240 "$ncu_bin" --kernel-name "$k" --launch-skip 0 --launch-count 1 \
                --section SpeedOfLight --section ComputeWorkloadAnalysis \
                --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
                --section LaunchStats --section InstructionStats "$out/$prog" \
                >"$out/ncu_$k.txt" 2>&1
            echo "ncu $k: exit $?"
            grep -E "Duration|Throughput|Pipe|Stall|Issue|Warp Cycles|Achieved Occupancy|Registers|Executed Ipc|Bank" \
                "$out/ncu_$k.txt" | head -n 60
            cp "$out/ncu_$k.txt" "$dest/"
        done
    fi
    echo "ncu: $(($(date +%s) - t0)) s"
fi
[[ $parts == *" test "* || $parts == *" step "* ]] && bench_cuda_build
[[ $parts == *" test "* ]] && bench_test_cuda
if [[ $parts == *" step "* ]]; then
    shape=(--device cuda -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters 6 --log-interval 6)
    # (the step with the mma.sync attention instead of wgmma's, the same bits, was measured in
    # bench/results/2026-11-27b-h100-wgmma; aebench has no switch for it since issue 48:
    # test_cuda compares the two, "wgmma" above times them kernel by kernel)
    bench_run megatron_bf16 -m megatron-lm --dtype bf16
    bench_run megatron_bf16_profile -m megatron-lm --dtype bf16 --profile
    bench_run megatron_tf32 -m megatron-lm --math tf32
    bench_run megatron_tf32_profile -m megatron-lm --math tf32 --profile
    grep -hE "attention|step" "$out"/megatron_*_profile.txt | head -n 30
    echo "steps: $(($(date +%s) - t0)) s"
fi
