#!/usr/bin/env bash
# One go on the GPU machine for the offload engines (issue 5): build, check every engine on
# the GPU against megatron-lm on the CPU backend (test_cuda), measure the machine's ceilings
# in the same call (pinned PCIe, host memory, CPU Adam: build/bench/host_adam; the disk:
# build/bench/disk_bw), then time at h2048 b4 s1024 (TF32):
#   case3   all five engines at l32 (the artifact's case 3)
#   v100    each baseline at its largest size under --gpu-mem-limit 32G --cpu-mem-limit 90G
#           (the paper's machine), and stronghold at that size (case 2, emulated)
#   native  the same on this machine's own memory (case 2, native)
#   nvme    zero-infinity --offload nvme, and stronghold --offload nvme, beside the disk rate
# and print each run beside its bound (bench/offload_summary.py).  The largest sizes come from
# `aebench --find-max --dry-run` (the plan bound, which the runs then confirm by training).
#
# On the device machine, from the repository root, with .deps carried:
#   bash bench/offload_gpu.sh "$OUT" [parts]
# parts: a comma list of build,check,bw,case3,v100,native,nvme (default: all; native also as
# nativeA and nativeB, its two halves).  Each part
# fits the 10-minute limit of one device command; the build is kept between calls.
# AEBENCH_DEVICE=cpu with AEBENCH_SHAPE="-h 32 --heads 2 --seq 16 --vocab 200" and small
# layer counts (L32=4 ...) rehearses the script on a machine without a GPU.
# DTYPE=bf16: every run and every largest size in bf16 (issue 14: each engine bf16 against
# TF32 at l32 and at its largest size): run it after the TF32 one into the same OUT, and the
# table puts each bf16 run beside its TF32 twin.
set -uo pipefail
out=${1:-bench/results/latest}
parts=${2:-build,check,bw,case3,v100,native,nvme}
device=${AEBENCH_DEVICE:-cuda}
shape=${AEBENCH_SHAPE:--h 2048}
L32=${L32:-32}
NVME_L=${NVME_L:-16}
ITERS=${ITERS:-6}
mkdir -p "$out"
has() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }

if [ "$device" = cuda ]; then
    source bench/deps_env.sh
    [ -f "$out/device.txt" ] || { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        lscpu | grep -E "Model name|^CPU\(s\)"; free -g | head -2; df -h . | tail -1
        date -u +%Y-%m-%dT%H:%MZ; } | tee "$out/device.txt"
    cuda=1
else
    cuda=0
fi
if has build || [ ! -x aebench ]; then
    make -j16 CUDA=$cuda MPI=0 aebench bench-tools $([ $cuda = 1 ] && echo build/tests/test_cuda) \
        >"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
    grep -E "warning" "$out/build.txt" | head -n 20
fi

if has check && [ $cuda = 1 ]; then
    echo "== correctness: every engine on the GPU vs megatron-lm on the CPU backend (fp32 math)"
    ./build/tests/test_cuda 2>&1 | tee "$out/test_cuda.txt" |
        grep -E "engine|PASSED|FAILED|ERROR" | head -n 40
fi
# Where the disk tier's files go: the results directory's file system (the machine's disk).
nvme_dir="$out/results"
mkdir -p "$nvme_dir"
if has bw; then
    echo "== ceilings"
    ./build/bench/host_adam --gib 4 2>&1 | tee "$out/bandwidth.txt"
    ./build/bench/disk_bw "$nvme_dir" 8 2>&1 | tee "$out/disk.txt"
fi

res="$out/results"
dtype=(--dtype "${DTYPE:-fp32}")
# bf16 runs go into the same OUT as the TF32 ones (their table sets them side by side): their
# logs are named with a _bf16 suffix
sfx=$([ "${DTYPE:-fp32}" = fp32 ] || echo "_$DTYPE")
run() { # name, then aebench arguments
    local name=$1$sfx; shift
    ./aebench --device "$device" $shape -b 4 "${dtype[@]}" --results "$res" "$@" >"$out/run_$name.txt" 2>&1
    echo "-- $name (exit $?): $(grep -E 'plan:|done:|OUT OF|FAILED|ERROR' "$out/run_$name.txt" | tr '\n' ' ' | cut -c1-300)"
}
# largest ENGINE [budget flags...]: the largest layer count whose plan fits (find-max's bound)
largest() {
    local eng=$1; shift
    ./aebench --device "$device" $shape -b 4 "${dtype[@]}" -m "$eng" --find-max --dry-run --results "$res/probes" "$@" 2>&1 |
        grep -oE 'fits up to l[0-9]+' | grep -oE '[0-9]+$' | tail -n 1
}

if has case3; then
    echo "== case 3: every engine at l$L32"
    for m in megatron-lm l2l zero-offload zero-infinity stronghold; do
        run "case3_$m" -m "$m" -l "$L32" --iters "$ITERS" --log-interval "$ITERS"
    done
    run "case3_zero-offload_dpu" -m zero-offload --dpu -l "$L32" --iters $((ITERS + 6)) --log-interval $((ITERS + 6))
fi
case2() { # tag, engines (comma list), then budget flags
    local tag=$1 engines=$2; shift 2
    echo "== case 2 ($tag): each baseline at its largest size, and stronghold there"
    for m in ${engines//,/ }; do
        local l
        l=$(largest "$m" "$@")
        echo "   $m: largest l$l"
        [ -n "$l" ] || continue
        run "case2_${tag}_$m" -m "$m" -l "$l" "$@" --iters "$CASE2_ITERS" --log-interval "$CASE2_ITERS"
        # stronghold once per size (zero-offload and zero-infinity often share theirs)
        [ -f "$out/run_case2_${tag}_stronghold_l$l$sfx.txt" ] ||
            run "case2_${tag}_stronghold_l$l" -m stronghold -l "$l" "$@" --iters "$CASE2_ITERS" --log-interval "$CASE2_ITERS"
    done
}
CASE2_ITERS=${CASE2_ITERS:-4}
baselines=megatron-lm,l2l,zero-offload,zero-infinity
has v100 && case2 v100 "$baselines" --gpu-mem-limit 32G --cpu-mem-limit 90G
has native && case2 native "$baselines"
# the native sizes in two halves, each within one device command's 10 minutes
has nativeA && case2 native megatron-lm,l2l
has nativeB && case2 native zero-offload,zero-infinity
if has nvme; then
    echo "== disk tier: zero-infinity and stronghold with --offload nvme at l$NVME_L"
    run "nvme_zero-infinity" -m zero-infinity --offload nvme --nvme-dir "$nvme_dir" -l "$NVME_L" --iters 3 --log-interval 3
    run "nvme_stronghold" -m stronghold -w 2 --offload nvme --nvme-dir "$nvme_dir" -l "$NVME_L" --iters 3 --log-interval 3
    echo "   left under $nvme_dir: $(find "$nvme_dir" -maxdepth 1 -name 'aebench-swap-*' | wc -l) swap directories"
fi
python3 bench/offload_summary.py "$out" | tee "$out/table.md"
