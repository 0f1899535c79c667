#!/usr/bin/env bash
# --calibrate with its l2/l8 steps timed at the settled (power-capped) clock, against steps
# measured in the same call (issue 49's power-cap bias): calibrate bf16 h2048 (each micro-batch
# of a global batch of 8, then the collectives at two ranks), train each configuration below,
# and print --predict of each beside its steady-state median.  On nvidia-h200-x2, from the
# repository root, with .deps carried:
#   bash bench/settle_gpu.sh "$OUT"
# ITERS (default 20); MACHINE=FILE (a machine file carried along): no calibration, that file's
# predictions; CONFIGS="tag np options;..." other configurations (at l32 b4 bf16 h2048);
# SEARCH_MACHINES="FILE SHAPE...;..." afterwards, the search of each (2 ranks, global batch 8)
# timed three times from that machine file (issue 49: under a second).
set -uo pipefail
dest=${1:-bench/results/latest}
ITERS=${ITERS:-20}
source bench/dp_env.sh # (builds; defines out, run)
read -r -a shape <<<"${SHAPE:---device cuda -h 2048 --heads 16 --seq 1024 --dtype bf16} -l ${LAYERS:-32}"
if [ -n "${MACHINE:-}" ]; then
    machine=$MACHINE
else
    mkdir -p "$out/cal"
    t_cal=$(date +%s)
    ./aebench --calibrate "${shape[@]}" --global-batch 8 --results "$out/cal" >"$out/cal.txt" 2>&1 &&
        ./aebench --calibrate --ranks 2 "${shape[@]}" --global-batch 8 --results "$out/cal" >>"$out/cal.txt" 2>&1 ||
        { tail -n 5 "$out/cal.txt"; exit 1; }
    machine=$(ls "$out"/cal/machine_*.json | head -n 1)
    cp "$machine" "$dest/machine_bf16_settled.json"
    echo "calibrated in $(( $(date +%s) - t_cal )) s"
fi
configs=(
    "mfull 1 -m megatron-lm"
    "mnone 1 -m megatron-lm --recompute none"
    "mfull2 2 -m megatron-lm"
    "mnone2 2 -m megatron-lm --recompute none"
    "sh29none2 2 -m stronghold -w 29 --recompute none"
    "sh16_2 2 -m stronghold -w 16"
)
[ -n "${CONFIGS:-}" ] && IFS=';' read -r -a configs <<<"$CONFIGS"

for c in "${configs[@]}"; do
    read -r tag np opts <<<"$c"
    read -r -a o <<<"$opts"
    run "$tag" "$np" "${shape[@]}" -b 4 --iters "$ITERS" --log-interval "$ITERS" "${o[@]}"
    ranks=(); [ "$np" -gt 1 ] && ranks=(--ranks "$np")
    ./aebench --predict --machine "$machine" "${shape[@]}" -b 4 "${o[@]}" "${ranks[@]}" >"$out/pred_$tag.txt" 2>&1
done
python3 - "$out" "${configs[@]}" <<'EOF' | tee "$out/table.md"
import glob, json, re, statistics, sys
out = sys.argv[1]
# each resource's busy ms per step, predicted (--predict's breakdown) / measured (the steady
# steps' median): which one the model has wrong, where the step time is off
kinds = (("compute", "compute"), ("h2d", "h2d"), ("d2h", "d2h"), ("host adam", "host_adam"), ("collectives", None))
# and every rank's host Adam (summary.per_rank_busy_ms): a job in step waits for the slowest
print("| configuration | ranks | predicted ms | measured ms | error | " +
      " | ".join(f"{k} busy ms: predicted / measured" for k, _ in kinds) + " | host adam ms per rank | step beyond the slowest's |")
print("|---|---|---|---|---|" + "---|" * (len(kinds) + 2))
for c in sys.argv[2:]:
    tag, np, opts = c.split(" ", 2)
    f = glob.glob(f"{out}/res_{tag}/*.json")
    d = json.load(open(f[0])) if f else None
    meas = d["summary"]["steady_median_ms"] if d else None
    its = d["iterations"][d["summary"]["steady_from_iteration"] - 1:] if d else []
    def measured(key):
        if not its: return 0
        if key is None: return statistics.median(i.get("collectives_busy_ms", 0) for i in its)
        return statistics.median(i.get("busy_ms", {}).get(key, 0) for i in its)
    text = next((l for l in open(f"{out}/pred_{tag}.txt") if l.startswith("predict ")), "")
    m = re.search(r"predict \S+ +([0-9.]+) ms/it", text)
    pred = float(m[1]) if m else None
    err = f"{100 * (pred / meas - 1):+.1f}%" if pred and meas else "-"
    cells = []
    for name, key in kinds:
        p = re.search(name + r" ([0-9.]+)", text.split("|")[3]) if text.count("|") >= 3 else None
        cells.append(f"{p[1] if p else '-'} / {measured(key):.1f}")
    per_rank = [r["host_adam"] for r in d["summary"].get("per_rank_busy_ms", [])] if d else []
    cells.append(" / ".join(f"{x:.1f}" for x in per_rank) or "-")
    cells.append(f"{meas - max(per_rank):.1f}" if per_rank and meas and max(per_rank) > 0 else "-")
    print(f"| {opts} | {np} | {pred} | {meas and round(meas, 1)} | {err} | " + " | ".join(cells) + " |")
EOF
cp "$out/table.md" "$dest/settle_table.md"
if [ -n "${SEARCH_MACHINES:-}" ]; then
    IFS=';' read -r -a searches <<<"$SEARCH_MACHINES"
    for sm in "${searches[@]}"; do
        read -r -a w <<<"$sm"
        for rep in 1 2 3; do
            ./aebench --search --machine "${w[0]}" "${w[@]:1}" --ranks 2 --global-batch 8 --top 1 \
                --results "$out/search" 2>&1 | grep -E "^search: [0-9]+ configurations in" | sed "s|^|${w[*]:1}: |"
        done
    done | tee "$dest/search_time.txt"
fi
echo "total: $(( $(date +%s) - t0 )) s"
