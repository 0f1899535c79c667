#!/usr/bin/env bash
# Issue 49's search targets on fresh runs, in one call on nvidia-h200-x2 (about 10 minutes):
# the l32 h2048 bf16 search (bench/search_gpu.sh, VERIFY 5, 10 iterations a configuration),
# then bench/settle_gpu.sh with that search's own machine file in the time left: stronghold's
# host Adam on two ranks against one, and with fewer pool threads than the rank's share of the
# cores (does the pool lose to the rank's other busy threads: its host thread waiting on the
# GPU, NCCL's proxy?).  PART=l48: the l48 h4096 heads 32 search instead (ITERS 6), alone.
# CONFIGS: settle's configurations instead (its format); RECAL=1: then the search's machine
# file's copy and host Adam rates measured again (bench/recalibrate_rates_gpu.sh, into
# $dest/recal): the calibration and the training each twice on one machine.
#   bash bench/confirm49_gpu.sh "$OUT"       (from the repository root, .deps carried)
set -uo pipefail
dest=${1:-bench/results/latest}
deadline=$(($(date +%s) + ${BUDGET_S:-580}))
export NCCL_NVLS_ENABLE=0
if [ "${PART:-l32}" = l48 ]; then
    RANKS=2 SHAPE="--device cuda -h 4096 --heads 32 --dtype bf16" VERIFY=${VERIFY:-5} ITERS=${ITERS:-6} SKIP_LARGEST=1 \
        SEARCH_DEADLINE=$((deadline - 30)) \
        timeout $((deadline - $(date +%s))) bash bench/search_gpu.sh "$dest/l48" "l48 -l 48"
    exit
fi
RANKS=2 SHAPE="--device cuda -h 2048 --dtype bf16" VERIFY=${VERIFY:-5} ITERS=${ITERS:-10} SKIP_LARGEST=1 \
    SEARCH_TIMEOUT=${SEARCH_TIMEOUT:-330} timeout $((deadline - $(date +%s) - 120)) \
    bash bench/search_gpu.sh "$dest/l32" "l32 -l 32"
machine=$(ls "$dest"/l32/machine_*.json 2>/dev/null | head -n 1)
left=$((deadline - $(date +%s)))
echo "== settle with ${machine:-no machine file}: ${left} s left"
[ -n "$machine" ] && [ "$left" -gt 60 ] || exit 0
MACHINE=$machine ITERS=12 CONFIGS="${CONFIGS:-sh13_1 1 -m stronghold -w 13;sh13_2 2 -m stronghold -w 13;sh13_2t14 2 -m stronghold -w 13 --threads 14;sh13_2t12 2 -m stronghold -w 13 --threads 12}" \
    timeout "$left" bash bench/settle_gpu.sh "$dest/settle"
left=$((deadline - $(date +%s)))
[ "${RECAL:-0}" = 1 ] && [ "$left" -gt 60 ] || exit 0
echo "== the rates again: ${left} s left"
FILE=$machine SHAPE="-h 2048 --dtype bf16 --global-batch 8 -l 32" timeout "$left" bash bench/recalibrate_rates_gpu.sh "$dest/recal"
