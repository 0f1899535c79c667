#!/usr/bin/env bash
# One go on the GPU machine for the stronghold engine (issue 4): build, check stronghold
# against the CPU reference on the GPU (test_cuda), measure the machine's bandwidths
# (build/bench/host_adam: host memory triad, CPU Adam, pinned PCIe), then time at h2048 b4:
#   megatron-lm l32; stronghold l32 -w auto and -w 15; the window sweep 2..14 at l32;
#   stronghold l64 under --gpu-mem-limit 32G --cpu-mem-limit 90G (the paper's machine);
#   l100, and the largest l whose plan fits this host natively;
# and print a table with each run's roofline bound (bench/stronghold_summary.py).
#
# On the device machine, from the repository root, with .deps carried:
#   bash bench/stronghold_gpu.sh "$OUT" [parts]
# parts: a comma list of check,bw,l32,sweep,l64,noclip,l100,max (default: all of them).
set -uo pipefail
out=${1:-bench/results/latest}
parts=${2:-check,bw,l32,sweep,l64,noclip,l100,max}
mkdir -p "$out"
source bench/deps_env.sh
has() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }

machine_info | tee "$out/device.txt"
targets="aebench build/tests/test_cuda"
grep -q "^bench-tools:" Makefile && targets="$targets bench-tools"
make -j16 CUDA=1 MPI=0 $targets >"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
grep -E "warning" "$out/build.txt" | head -n 20

if has check; then
    echo "== correctness: stronghold on the GPU vs megatron-lm on the CPU backend"
    ./build/tests/test_cuda 2>&1 | tee "$out/test_cuda.txt" | grep -E "cuda_vs_cpu engine|PASSED|FAILED|OK|ERROR" | head -n 30
fi
if has bw && [ -x build/bench/host_adam ]; then
    echo "== bandwidths"
    ./build/bench/host_adam --gib 4 2>&1 | tee "$out/bandwidth.txt"
fi

res="$out/results"
run() { # name, then aebench arguments
    local name=$1; shift
    ./aebench --device cuda -h 2048 -b 4 --results "$res" "$@" >"$out/run_$name.txt" 2>&1
    echo "-- $name (exit $?): $(grep -E 'stronghold -w|done:|OUT OF|FAILED' "$out/run_$name.txt" | tr '\n' ' ' | cut -c1-400)"
}
if has l32; then
    echo "== l32"
    run l32_megatron -m megatron-lm -l 32 --iters 8 --log-interval 8
    run l32_auto -m stronghold -l 32 --iters 8 --log-interval 8
    run l32_w15 -m stronghold -l 32 -w 15 --iters 8 --log-interval 8
fi
if has sweep; then
    echo "== window sweep l32"
    for w in 2 4 6 8 10 12 14; do run "l32_w$w" -m stronghold -l 32 -w "$w" --iters 5 --log-interval 5; done
fi
if has l64; then
    echo "== l64 on the paper's machine (32G GPU, 90G host)"
    run l64_v100 -m stronghold -l 64 --gpu-mem-limit 32G --cpu-mem-limit 90G --iters 6 --log-interval 6
fi
if has noclip; then
    echo "== without clipping (--clip-grad 0): host Adam under the backward, the paper's schedule"
    run l32_w15_noclip -m stronghold -l 32 -w 15 --clip-grad 0 --iters 8 --log-interval 8
    run l64_v100_noclip -m stronghold -l 64 --gpu-mem-limit 32G --cpu-mem-limit 90G --clip-grad 0 --iters 6 --log-interval 6
fi
if has l100; then
    echo "== l100"
    run l100_auto -m stronghold -l 100 --iters 6 --log-interval 6
fi
if has max; then
    echo "== the largest l this host holds"
    ./aebench --device cuda -m stronghold -h 2048 -b 4 --find-max --dry-run --results "$res/probes" >"$out/findmax_plan.txt" 2>&1
    tail -n 3 "$out/findmax_plan.txt"
    lmax=$(grep -oE 'fits up to l[0-9]+' "$out/findmax_plan.txt" | grep -oE '[0-9]+$' | tail -n 1)
    [ -n "$lmax" ] && run "l${lmax}_max" -m stronghold -l "$lmax" --iters 4 --log-interval 4
fi
python3 bench/stronghold_summary.py "$out" | tee "$out/table.md"
