#!/usr/bin/env bash
# Case 2 (paper Fig. 7a): stronghold at each baseline's largest size (case 1), beside the
# baseline there: samples/s of both and the speed-up, and what --predict says of both where
# a machine file of the runs' backend is in the results.
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
    echo "baseline,layers,parameters_b,baseline_samples_per_s,stronghold_samples_per_s,speedup,predicted_baseline_samples_per_s,predicted_stronghold_samples_per_s"
    # For each baseline (method, L, H, B): its own run at L (any window) and stronghold's at
    # L with the window; the newest of each (and each run's window and epoch, for --predict).
    awk -F, -v W="$WINDOW" '
        NR == FNR { base[$1] = $2 FS $8 FS $9; pb[$1] = $4; order[++n] = $1; next }
        { key = $2 FS $3 FS $4 }
        $1 == "stronghold" && $5 == W { sh[key] = $8; sh_ep[key] = $9 }
        $1 != "stronghold" && ($1 in base) && key == base[$1] { bl[$1] = $8; bl_w[$1] = $5; bl_ep[$1] = $9 }
        END {
            for (i = 1; i <= n; i++) {
                m = order[i]; split(base[m], k, FS)
                s = sh[base[m]]; b = bl[m]
                printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", m, k[1], pb[m], b, s,
                       (b != "" && s != "" && b > 0) ? sprintf("%.3f", s / b) : "", k[2], k[3], bl_w[m], bl_ep[m], sh_ep[base[m]]
            }
        }' <(printf '%s\n' "$maxes") <(printf '%s\n' "$runs") |
    # --predict's samples/s for both runs (empty where no machine file of their backend is in
    # the results): batch * 1000 / predicted ms
    while IFS=, read -r m L pb b s speedup H B bw bep sep; do
        pb_ms="" ps_ms=""
        [ -n "$bep" ] && pb_ms=$(ae_predicted "$RESULTS" "$(ae_json "$RESULTS" "$m" "$L" "$H" "$B" "$bw" "$bep")")
        [ -n "$sep" ] && ps_ms=$(ae_predicted "$RESULTS" "$(ae_json "$RESULTS" stronghold "$L" "$H" "$B" "$WINDOW" "$sep")")
        sps() { [ -n "$1" ] && awk -v b="$B" -v ms="$1" 'BEGIN { printf "%.3f", b * 1000 / ms }'; }
        echo "$m,$L,$pb,$b,$s,$speedup,$(sps "$pb_ms"),$(sps "$ps_ms")"
    done
} | ae_write_csv
