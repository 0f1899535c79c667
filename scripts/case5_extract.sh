#!/usr/bin/env bash
# Case 5 (paper Fig. 9): stronghold at one layer count with windows of every size, with
# --predict's time for each run where a machine file of the runs' backend is in the results
# directory.
#   scripts/case5_extract.sh [-r RESULTS_DIR] [-o OUT_DIR] [-l LAYERS]   -> OUT_DIR/case5.csv
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "[-l LAYERS]" case5.csv "$@"
LAYERS=${LAYERS:-32}
rows=$(ae_runs "$RESULTS" | awk -F, -v L="$LAYERS" '$1 == "stronghold" && $2 == L && $5 != "auto"')
[ -n "$rows" ] || { echo "$0: no finished stronghold runs at l$LAYERS in $RESULTS (run case 5 first)" >&2; exit 1; }
{
    echo "window,iter_ms,samples_per_s,predicted_ms"
    while IFS=, read -r method L H B W params ms sps ep; do
        pred=$(ae_predicted "$RESULTS" "$(ae_json "$RESULTS" "$method" "$L" "$H" "$B" "$W" "$ep")")
        printf "%s,%s,%s,%s\n" "$W" "$ms" "$sps" "$pred"
    done <<<"$rows" | sort -t, -k1,1n
} | ae_write_csv
