#!/usr/bin/env bash
# The artifact evaluation in one go (make ae), or its figures alone (make figures).
#
#   scripts/run_ae.sh              run cases 1-6, then extract and draw each
#   scripts/run_ae.sh --figures    only extract and draw, from what results/ holds
#
# Shapes are chosen for the machine: with a CUDA build and a GPU that nvidia-smi sees, the
# paper's (configs/caseN.json: h2048, 16 heads, s1024, b4, windows 15 and 2-14); otherwise
# the CPU-sized run lists (configs/small/caseN.json, about a minute each on two cores).
# Environment:
#   AE_CONFIGS   a directory of caseN.json to use instead
#   AE_FLAGS     options added to every case, e.g. "--gpu-mem-limit 32G --cpu-mem-limit 90G"
#                to emulate the paper's V100 machine (they override the configs)
#   AE_RESULTS   where logs, JSON and CSVs go (default results); PNGs go to plots/
#   AE_CASES     which cases to run (default "1 2 3 4 5 6"; e.g. "1 3" to split a long evaluation:
#                cases 2 and 3 read case 1's find-max results); all six are drawn
# Case 6 (gemini) runs on 2 ranks (--ranks 2): it needs an MPI build, and on a GPU machine two
# GPUs; without them it is skipped and said so, and its recovery-probability figure is still
# drawn (it needs no run).
# Runs are resumed (--resume): run it again after an interruption.  A case that cannot run
# (e.g. an engine that does not exist yet) is reported and the others go on; the exit code
# is non-zero if any case or figure failed.
set -euo pipefail
cd "$(dirname "$0")/.."

figures_only=0
case "${1:-}" in
--figures) figures_only=1 ;;
"") ;;
*) echo "usage: $0 [--figures]" >&2; exit 2 ;;
esac
RESULTS=${AE_RESULTS:-results}
read -r -a CASES <<<"${AE_CASES:-1 2 3 4 5 6}"
read -r -a FLAGS <<<"${AE_FLAGS:-}"

if [ -n "${AE_CONFIGS:-}" ]; then
    CONFIGS=$AE_CONFIGS
elif nvidia-smi -L >/dev/null 2>&1 && nm ./aebench 2>/dev/null | grep -q cublas; then
    CONFIGS=configs
else
    CONFIGS=configs/small
fi
# What the extract scripts filter on: stronghold's window in cases 2 and 4, the layer count
# of case 5 — read from the configs so the two always agree.
json_default() { # FILE KEY: the value of "KEY" in the file's defaults (first match)
    grep -o "\"$2\": *[0-9]*" "$1" | head -n 1 | grep -o '[0-9]*$'
}
W=$(json_default "$CONFIGS/case4.json" window)
L5=$(json_default "$CONFIGS/case5.json" layers)

failed=()
if [ "$figures_only" = 0 ]; then
    [ -x ./aebench ] || { echo "$0: build aebench first (make)" >&2; exit 1; }
    echo "== artifact evaluation with $CONFIGS/ into $RESULTS/${AE_FLAGS:+ (flags: $AE_FLAGS)}"
    for n in "${CASES[@]}"; do
        if [ "$n" = 6 ]; then
            why=""
            ./aebench --version | grep -q "ranks: mpi" || why="this build has no MPI (make deps; make)"
            if [ -z "$why" ] && [ "$CONFIGS" = configs ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
                why="it needs 2 GPUs"
            fi
            if [ -n "$why" ]; then
                echo "== case 6 skipped: $why"
                continue
            fi
        fi
        echo "== case $n: $CONFIGS/case$n.json"
        rc=0
        ./aebench --config "$CONFIGS/case$n.json" --results "$RESULTS" --resume "${FLAGS[@]}" || rc=$?
        # 3: some run did not fit, which is a result (case 1 finds exactly that); 1 and 2 are not.
        if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then failed+=("case $n (exit $rc)"); fi
    done
fi
for n in 1 2 3 4 5 6; do
    args=(-r "$RESULTS")
    case $n in
    2 | 4) args+=(-w "$W") ;;
    5) args+=(-l "$L5") ;;
    esac
    if [ "$n" = 6 ] && ! ls "$RESULTS"/log_gemini_*.txt >/dev/null 2>&1; then
        # no gemini runs: the recovery probabilities alone (the extract writes them first)
        bash scripts/case6_extract.sh "${args[@]}" >/dev/null 2>&1 || true
        if bash -c 'source scripts/ae_lib.sh; ae_draw 6_recovery "$1/case6_recovery.csv" plots/case6_recovery.png' _ "$RESULTS"; then
            continue
        fi
        failed+=("figure 6 (recovery)")
    elif bash "scripts/case${n}_extract.sh" "${args[@]}" && bash "scripts/case${n}_draw.sh" "$RESULTS/case$n.csv" "plots/case$n.png"; then
        :
    else
        failed+=("figure $n")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== not done: ${failed[*]}" >&2
    exit 1
fi
echo "== done: $RESULTS/case1-6.csv, plots/case1-6.png (and case6_recovery)"
