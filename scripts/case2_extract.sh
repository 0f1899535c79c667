#!/usr/bin/env bash
# Case 2 (paper Fig. 7a): stronghold at each baseline's largest size (case 1), beside the
# baseline there: samples/s of both and the speed-up.
#   scripts/case2_extract.sh [-r RESULTS_DIR] [-o OUT_DIR] [-w WINDOW]   -> OUT_DIR/case2.csv
# WINDOW is stronghold's (default 15, the paper's).
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "[-w WINDOW]" case2.csv "$@"
WINDOW=${WINDOW:-15}
maxes=$(ae_findmax "$RESULTS" | awk -F, '$1 != "stronghold" && $2 > 0')
[ -n "$maxes" ] || { echo "$0: no baseline find-max results in $RESULTS (run case 1 first)" >&2; exit 1; }
runs=$(ae_runs "$RESULTS")
{
    echo "baseline,layers,parameters_b,baseline_samples_per_s,stronghold_samples_per_s,speedup"
    # For each baseline (method, L, H, B): its own run at L (any window) and stronghold's at
    # L with the window; the newest of each.
    awk -F, -v W="$WINDOW" '
        NR == FNR { base[$1] = $2 FS $8 FS $9; pb[$1] = $4; order[++n] = $1; next }
        { key = $2 FS $3 FS $4 }
        $1 == "stronghold" && $5 == W { sh[key] = $8 }
        $1 != "stronghold" && ($1 in base) && key == base[$1] { bl[$1] = $8 }
        END {
            for (i = 1; i <= n; i++) {
                m = order[i]; split(base[m], k, FS)
                s = sh[base[m]]; b = bl[m]
                printf "%s,%s,%s,%s,%s,%s\n", m, k[1], pb[m], b, s, (b != "" && s != "" && b > 0) ? sprintf("%.3f", s / b) : ""
            }
        }' <(printf '%s\n' "$maxes") <(printf '%s\n' "$runs")
} | ae_write_csv
