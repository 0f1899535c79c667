#!/usr/bin/env bash
# Case 4 (paper Figs. 7a and 8b): stronghold's iteration time against the number of layers,
# at one window (as the artifact's grep over *stronghold*ws-15*), with --predict's time for
# each run where a machine file of the runs' backend is in the results directory.
#   scripts/case4_extract.sh [-r RESULTS_DIR] [-o OUT_DIR] [-w WINDOW]   -> OUT_DIR/case4.csv
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "[-w WINDOW]" case4.csv "$@"
WINDOW=${WINDOW:-15}
rows=$(ae_runs "$RESULTS" | awk -F, -v W="$WINDOW" '$1 == "stronghold" && $5 == W')
[ -n "$rows" ] || { echo "$0: no finished stronghold runs with window $WINDOW in $RESULTS (run case 4 first)" >&2; exit 1; }
{
    echo "layers,parameters_b,iter_ms,samples_per_s,predicted_ms"
    while IFS=, read -r method L H B W params ms sps ep; do
        pred=$(ae_predicted "$RESULTS" "$(ae_json "$RESULTS" "$method" "$L" "$H" "$B" "$W" "$ep")")
        printf "%s,%.3f,%s,%s,%s\n" "$L" "$(awk -v p="$params" 'BEGIN { print p / 1e9 }')" "$ms" "$sps" "$pred"
    done <<<"$rows" | sort -t, -k1,1n
} | ae_write_csv
