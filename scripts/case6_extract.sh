#!/usr/bin/env bash
# Case 6 (the Gemini artifact's Figures 7, 8 and 9): gemini's steps without and with
# checkpoints per mode, and the recovery probability of the two placements.
#   scripts/case6_extract.sh [-r RESULTS_DIR] [-o OUT_DIR]
#     -> OUT_DIR/case6.csv           one row per mode (the newest gemini run of each):
#        mode,no_ckpt_ms,no_ckpt_sd,ckpt_ms,ckpt_sd,slowdown,ckpt_gb,ckpt_time_ms,exposed_ms,idle_ms,
#        every,lost_iterations,paired_x
#        no_ckpt_*: the steps after the warm-up and before --gemini-ckpt-from; ckpt_*: the
#        steps from it on, less interleave's measuring steps (the artifact skips two there
#        too), with --gemini-every K those between checkpoints too (the interval's overhead
#        per step); ckpt_gb, ckpt_time_ms, exposed_ms, idle_ms: medians over the checkpoints;
#        every: the interval at the end (auto's choice; 0 for none), lost_iterations: the
#        iterations a failure loses, expected, with it; paired_x: the step's overhead at that
#        interval from each checkpoint's cost against the clean steps beside it (the run's
#        "a checkpoint adds" line: robust where the step drifts between the two phases; 0:
#        none could be paired)
#     -> OUT_DIR/case6_steps.csv     every step (the artifact's results.json step_times):
#        mode,iteration,phase,iter_ms,ckpt_gb,ckpt_ms,exposed_ms,idle_ms
#     -> OUT_DIR/case6_recovery.csv  the probability that every shard survives k of N
#        machines failing, group vs ring, m = 2 and 3 (build/case6_recovery, exact counts,
#        and the paper's union-bound formula for m = 2, k = 3)
# The gemini runs must log every iteration (--log-interval 1, as configs/case6.json does).
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
ae_options "" case6.csv "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
STEPS=$OUTDIR/case6_steps.csv
RECOVERY=$OUTDIR/case6_recovery.csv

# The recovery probabilities need no run: the program counts them.
prog=$root/build/case6_recovery
if [ ! -x "$prog" ] || [ "$prog" -ot "$root/scripts/case6_recovery.c" ]; then
    make -s -C "$root" build/case6_recovery >/dev/null || { echo "$0: cannot build build/case6_recovery" >&2; exit 1; }
fi
tmp=$(mktemp "$RECOVERY.XXXXXX")
if "$prog" --csv >"$tmp"; then mv "$tmp" "$RECOVERY"; else rm -f "$tmp"; exit 1; fi
echo "$0: wrote $RECOVERY ($(($(wc -l <"$RECOVERY") - 1)) rows)"

# Every step of the newest finished gemini log of each mode.
steps=$(
    for f in "$RESULTS"/log_gemini_*.txt; do
        [ -e "$f" ] || continue
        awk '
            FNR == 1 { ep = FILENAME; sub(/\.txt$/, "", ep); sub(/^.*\./, "", ep); mode = ""; it = 0 }
            function flush() { if (it > 0) { printf "%s,%s,%d,%s,%s,%s,%s,%s,%s\n", ep, mode, it, ph, ms, gb, cms, expo, idle; it = 0 } }
            /^gemini \| mode: / {
                split($0, a, " [|] "); mode = a[2]; sub(/^mode: /, "", mode)
                from = a[3]; sub(/^.*: /, "", from); warm = a[4]; sub(/^.*: /, "", warm); from += 0; warm += 0
                # --gemini-every K > 1 or auto: the steps between checkpoints (no checkpoint line)
                # are the interval'"'"'s too (older logs have no "every": 1)
                every = 1; if (a[5] ~ /^every: /) { every = a[5]; sub(/^every: /, "", every) }
            }
            /^ iteration / {
                flush()
                split($0, a, "|"); split(a[1], b, "/"); it = b[1]; sub(/^ *iteration */, "", it); it += 0
                split(a[2], c, ":"); ms = c[2]; gsub(/ /, "", ms)
                ph = it <= warm ? "warmup" : (it < from ? "no_checkpoint" : (mode == "none" || every != "1" ? "checkpoint" : "?"))
                gb = cms = expo = idle = ""
            }
            /^checkpoint \(rank 0/ && it > 0 {
                n = split($0, a, " [|] ")
                for (i = 2; i <= n; i++) {
                    split(a[i], kv, ": ")
                    if (kv[1] == "GB") gb = kv[2]; else if (kv[1] == "ms") cms = kv[2]
                    else if (kv[1] == "exposed ms") expo = kv[2]; else if (kv[1] == "collectives'"'"' idle ms") idle = kv[2]
                    else if (kv[1] == "phase") ph = kv[2]
                }
            }
            /^OUT OF MEMORY|^ERROR:/ { bad = 1 }
            END { flush() }
        ' "$f"
    done | awk -F, '$2 != "" && $5 != "?"' | sort -t, -k1,1n -k3,3n |
        awk -F, '{ row[++n] = $0; mode[n] = $2; ep[n] = $1; if ($1 + 0 > newest[$2] + 0) newest[$2] = $1 }
                 END { split("none naive interleave", order, " ")
                       for (k = 1; k <= 3; k++)
                           for (i = 1; i <= n; i++)
                               if (mode[i] == order[k] && ep[i] == newest[order[k]]) { r = row[i]; sub(/^[^,]*,/, "", r); print r } }'
)
[ -n "$steps" ] || { echo "$0: no gemini runs with per-iteration lines in $RESULTS (run case 6 first)" >&2; exit 1; }
tmp=$(mktemp "$STEPS.XXXXXX")
{ echo "mode,iteration,phase,iter_ms,ckpt_gb,ckpt_ms,exposed_ms,idle_ms"; echo "$steps"; } >"$tmp" && mv "$tmp" "$STEPS"
echo "$0: wrote $STEPS ($(echo "$steps" | wc -l) rows)"

# Each mode's interval at the end of its newest run (auto's choice), the iterations a failure
# then loses, and the overhead at that interval from a checkpoint's cost paired with the clean
# steps beside it (0: not paired), from the run's closing gemini lines: "mode,epoch,every,lost,x"
intervals=$(
    for f in "$RESULTS"/log_gemini_*.txt; do
        [ -e "$f" ] || continue
        awk '
            FNR == 1 { ep = FILENAME; sub(/\.txt$/, "", ep); sub(/^.*\./, "", ep); paired = 0 }
            /^gemini \| mode: / { split($0, a, " [|] "); mode = a[2]; sub(/^mode: /, "", mode) }
            /^gemini: a checkpoint every / { every = $5; lost = $NF }
            /^gemini: a checkpoint adds / { paired = $NF; sub(/x$/, "", paired) }
            END { if (mode != "" && every != "") printf "%s,%s,%s,%s,%s\n", mode, ep, every, lost, paired }
        ' "$f"
    done
)

{
    echo "mode,no_ckpt_ms,no_ckpt_sd,ckpt_ms,ckpt_sd,slowdown,ckpt_gb,ckpt_time_ms,exposed_ms,idle_ms,every,lost_iterations,paired_x"
    awk -F, -v intervals="$intervals" '
        function median(list,    v, k, i, j, t) {
            k = split(list, v, " ")
            for (i = 2; i <= k; i++) for (j = i; j > 1 && v[j] + 0 < v[j - 1] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            return k == 0 ? "" : (k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2)
        }
        BEGIN { n = split(intervals, line, "\n")
                for (i = 1; i <= n; i++) if (split(line[i], f, ",") == 5 && f[2] + 0 >= iep[f[1]] + 0) {
                    iep[f[1]] = f[2]; every[f[1]] = f[3]; lost[f[1]] = f[4]; px[f[1]] = f[5] } }
        { m = $1; if (!(m in seen)) { seen[m] = 1; order[++nm] = m } }
        $3 == "no_checkpoint" { n0[m]++; s0[m] += $4; q0[m] += $4 * $4 }
        $3 == "checkpoint" { n1[m]++; s1[m] += $4; q1[m] += $4 * $4
                             if ($5 != "") { gb[m] = gb[m] " " $5; ck[m] = ck[m] " " $6; ex[m] = ex[m] " " $7; id[m] = id[m] " " $8 } }
        END {
            for (i = 1; i <= nm; i++) {
                m = order[i]
                if (!n0[m] || !n1[m]) continue
                a = s0[m] / n0[m]; b = s1[m] / n1[m]
                sa = n0[m] > 1 ? sqrt((q0[m] - s0[m] * s0[m] / n0[m]) / (n0[m] - 1)) : 0
                sb = n1[m] > 1 ? sqrt((q1[m] - s1[m] * s1[m] / n1[m]) / (n1[m] - 1)) : 0
                printf "%s,%.2f,%.2f,%.2f,%.2f,%.4f,%s,%s,%s,%s,%s,%s,%s\n", m, a, sa, b, sb, b / a,
                       gb[m] == "" ? 0 : median(gb[m]), ck[m] == "" ? 0 : median(ck[m]),
                       ex[m] == "" ? 0 : median(ex[m]), id[m] == "" ? 0 : median(id[m]),
                       m in every ? every[m] : (m == "none" ? 0 : 1), m in lost ? lost[m] : 0, m in px ? px[m] : 0
            }
        }' <<<"$steps"
} | ae_write_csv
