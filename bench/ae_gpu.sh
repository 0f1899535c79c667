#!/usr/bin/env bash
# The artifact's cases on the GPU machine, a few at a time (each device command has 10
# minutes): build, then `aebench --config configs/caseN.json --resume` for the cases given,
# into RESULTS, with FLAGS added to every run.  The CSVs and figures are drawn afterwards
# where gnuplot is (AE_RESULTS=RESULTS make figures).
#
#   bash bench/ae_gpu.sh RESULTS "CASES" [FLAGS...]
#   e.g. bash bench/ae_gpu.sh ae-gpu/results "1 3" --iters 6 --log-interval 6 \
#            --gpu-mem-limit 32G --cpu-mem-limit 90G
# With .deps carried (cJSON); RESULTS may hold earlier cases' results (carried back).
set -uo pipefail
results=$1
cases=$2
shift 2
mkdir -p "$results"
source bench/deps_env.sh
make -j16 CUDA=1 MPI=0 aebench >"$results/../build.txt" 2>&1 || { tail -n 30 "$results/../build.txt"; exit 1; }
machine_info >"$results/../device.txt"
for n in $cases; do
    echo "== case $n ($(date -u +%H:%M:%S))"
    ./aebench --config "configs/case$n.json" --results "$results" --resume "$@" 2>&1 |
        grep -vE '^\s+iter ' | tail -n 25
done
