#!/usr/bin/env bash
# Case 4 (paper Figs. 7a and 8b): stronghold's iteration time against the number of layers,
# at one window (as the artifact's grep over *stronghold*ws-15*).
#   scripts/case4_extract.sh [-r RESULTS_DIR] [-o OUT_DIR] [-w WINDOW]   -> OUT_DIR/case4.csv
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "[-w WINDOW]" case4.csv "$@"
WINDOW=${WINDOW:-15}
rows=$(ae_runs "$RESULTS" | awk -F, -v W="$WINDOW" '$1 == "stronghold" && $5 == W')
[ -n "$rows" ] || { echo "$0: no finished stronghold runs with window $WINDOW in $RESULTS (run case 4 first)" >&2; exit 1; }
{
    echo "layers,parameters_b,iter_ms,samples_per_s"
    awk -F, '{ printf "%s,%.3f,%s,%s\n", $2, $6 / 1e9, $7, $8 }' <<<"$rows" | sort -t, -k1,1n
} | ae_write_csv
