#!/usr/bin/env bash
# Case 3 (paper Fig. 8a): every engine at the baseline's largest size (megatron-lm's, from
# case 1; l32 in the paper): iteration time and samples/s.
#   scripts/case3_extract.sh [-r RESULTS_DIR] [-o OUT_DIR] [-l LAYERS]   -> OUT_DIR/case3.csv
# LAYERS defaults to megatron-lm's find-max result (32 if there is none).
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "[-l LAYERS]" case3.csv "$@"
base=$(ae_findmax "$RESULTS" | awk -F, '$1 == "megatron-lm"')
if [ -z "$LAYERS" ]; then LAYERS=$(cut -d, -f2 <<<"${base:-megatron-lm,32}"); fi
H=$(cut -d, -f8 <<<"$base")
B=$(cut -d, -f9 <<<"$base")
rows=$(ae_runs "$RESULTS" | awk -F, -v L="$LAYERS" -v H="$H" -v B="$B" '$2 == L && (H == "" || $3 == H) && (B == "" || $4 == B)')
[ -n "$rows" ] || { echo "$0: no finished runs at l$LAYERS in $RESULTS (run case 3 first)" >&2; exit 1; }
{
    echo "method,layers,window,parameters_b,iter_ms,samples_per_s"
    # One row per method: its newest run at L.
    awk -F, '{ row[$1] = sprintf("%s,%s,%s,%.3f,%s,%s", $1, $2, $5, $6 / 1e9, $7, $8); e[$1] = $9 }
             END { for (m in row) print e[m] "\t" row[m] }' <<<"$rows" | sort -n | cut -f2
} | ae_write_csv
