#!/usr/bin/env bash
# Case 1 (paper Fig. 6a): the largest trainable model of every engine, from the --find-max
# results (results/findmax_*.txt, their "find-max result:" line).
#   scripts/case1_extract.sh [-r RESULTS_DIR] [-o OUT_DIR]   -> OUT_DIR/case1.csv
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "" case1.csv "$@"
rows=$(ae_findmax "$RESULTS")
[ -n "$rows" ] || { echo "$0: no find-max results in $RESULTS (run: aebench --config configs/case1.json)" >&2; exit 1; }
{
    echo "method,max_layers,parameters,parameters_b,next_layers,stopped_by,short_bytes,hidden,batch"
    printf '%s\n' "$rows"
} | ae_write_csv
