# --calibrate and --predict on the CPU backend, sourced by tests/run.sh (PASSED, FAILED,
# FAILURES): the machine file has every field, a fresh one is kept, a broken one is a one-line
# error (exit 2), predictions grow with the layers and are never below the busiest resource,
# and each modelled engine's prediction lands near its measured step.

PR_WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-predict.XXXXXX")
PR_BIN=$(realpath "$AEBENCH")
PR_SHAPE=(--device cpu -l 4 -h 128 --heads 4 --seq 64 -b 2 --vocab 1000 --threads 2)
pr_pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
# pr_compare MACHINE_RESULTS ARGS...: "predicted measured error%" of one configuration (its
# prediction from the machine file there, then the faster of two runs of 8 iterations)
pr_compare() {
    local res=$1 pred meas
    shift
    pred=$(cd "$PR_WORK" && "$PR_BIN" --predict "$@" --results "$res" 2>/dev/null | awk '/^predict / {print $3; exit}')
    # (twice, the faster kept: on a shared machine noise only ever slows a run)
    meas=$(for rep in 1 2; do
        (cd "$PR_WORK" && timeout 300 "$PR_BIN" "$@" --iters 8 --results runs 2>/dev/null) | awk '/done:/ {print $3; exit}'
    done | sort -g | head -n 1)
    awk -v p="${pred:-0}" -v m="${meas:-0}" 'BEGIN { e = (m <= 0 || p <= 0) ? 999 : (p > m ? p - m : m - p) / m * 100
                                                   printf "%s %s %.1f\n", p, m, e }'
}
pr_fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }
# pr_accuracy LABEL FACTOR MACHINE_RESULTS BASE_ARGS_VAR CONFIG...: each CONFIG (its own
# arguments, then the array BASE_ARGS_VAR's) predicted and measured; passes when every
# prediction is within FACTOR times its measured step either way, and says every figure.
# FACTOR is wide on purpose: this is a test of the model's arithmetic (a unit, a term left
# out), not of its accuracy, and must pass on a 2-core machine busy with other work — the
# calibration and the runs may see different loads.  The accuracy is measured on the GPU
# machines by bench/predict_gpu.sh (docs/predict.md has the figures).
# PR_RECALIBRATE=1: on a miss, calibrate once more (a new machine file) and measure again —
# one calibration taken while the 2-core machine is busy misprices every piece after it.
pr_accuracy() {
    local label=$1 factor=$2 res=$3 run pred meas err worst summary attempt ratio within
    local -n base_args=$4
    local -a cfg
    shift 4
    for attempt in 1 2; do
        worst=0 summary="" within=yes
        for run in "$@"; do
            read -r -a cfg <<<"$run"
            read -r pred meas err <<<"$(pr_compare "$res" "${cfg[@]}" "${base_args[@]}")"
            summary="$summary $run $pred/$meas (${err}%);"
            worst=$(awk -v a="$worst" -v b="$err" 'BEGIN { print (b > a ? b : a) }')
            ratio=$(awk -v p="${pred:-0}" -v m="${meas:-0}" 'BEGIN { print (p > 0 && m > 0) ? p / m : 0 }')
            awk -v r="$ratio" -v f="$factor" 'BEGIN { exit !(r > 0 && r <= f && r >= 1 / f) }' || within=no
        done
        if [ "$within" = yes ]; then
            pr_pass "$label, each within ${factor}x (worst ${worst}%):$summary$([ "$attempt" = 2 ] && echo " (after a second calibration)")"
            return
        fi
        [ "${PR_RECALIBRATE:-0}" = 1 ] && [ "$attempt" = 1 ] || break
        echo "     (a prediction not within ${factor}x:$summary calibrating again)"
        mkdir -p "$PR_WORK/$res.first" && mv "$PR_WORK/$res"/machine_*.json "$PR_WORK/$res.first/"
        (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate "${base_args[@]}" --results "$res" >/dev/null 2>&1)
    done
    pr_fail "$label" "a prediction not within ${factor}x of its step:$summary"
}

# pr_rows RES SHAPE "ARGS" ...: the "predict ..." line of each prediction, the array SHAPE's
# options then its ARGS (split on spaces: they override SHAPE's), from the machine file under
# $PR_WORK/RES
pr_rows() {
    local res=$1 a
    local -n shape_=$2
    local -a aa
    shift 2
    for a in "$@"; do
        read -r -a aa <<<"$a"
        (cd "$PR_WORK" && "$PR_BIN" --predict "${shape_[@]}" "${aa[@]}" --results "$res" 2>&1) | grep "^predict "
    done
}
# pr_with_rate DIR FILE KEY VALUE: a copy of the machine file FILE in $PR_WORK/DIR with KEY set to
# VALUE in every rates object (the file's own and each world's).
pr_with_rate() {
    mkdir -p "$PR_WORK/$1"
    python3 - "$2" "$PR_WORK/$1" "$3" "$4" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
for r in [d["rates"]] + [e["rates"] for e in d.get("collectives", []) if "rates" in e]:
    r[sys.argv[3]] = float(sys.argv[4])
json.dump(d, open(os.path.join(sys.argv[2], os.path.basename(sys.argv[1])), "w"))
PY
}
# pr_flat DIR FILE: a copy of the machine file FILE in $PR_WORK/DIR whose host-memory users do
# not slow each other (every rate beside others, its own and each world's, equal to the rate
# alone; nor the compute the host Adam): the checks that isolate one rate (the 2-rank share, the bf16 update, --dpu's place)
# then see that rate alone, whatever the walk puts side by side; the contention is checked on
# its own (host memory's load, below, and test_runtime's predict tests).  Two upward copies at
# once move twice one's: a micro-batch's landing is not charged to the link (pred_add_earlier).
pr_flat() {
    mkdir -p "$PR_WORK/$1"
    python3 - "$2" "$PR_WORK/$1" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
def flat(r):
    for a, bs in (("h2d_gbs", ("busy_h2d_gbs", "both_h2d_gbs", "adam_h2d_gbs")),
                  ("d2h_gbs", ("busy_d2h_gbs", "both_d2h_gbs", "adam_d2h_gbs")),
                  ("host_adam_ms_per_mparam", ("busy_host_adam_ms_per_mparam", "host_adam_h2d_ms_per_mparam",
                                               "host_adam_d2h_ms_per_mparam"))):
        for b in bs:
            if a in r: r[b] = r[a]
    if "host_adam_under_compute" in r: r["host_adam_under_compute"] = 1.0
    if "h2d_gbs" in r: r["up2_h2d_gbs"] = 2 * r["h2d_gbs"]
flat(d["rates"])
for e in d.get("collectives", []):
    if "rates" in e: flat(e["rates"])
json.dump(d, open(os.path.join(sys.argv[2], os.path.basename(sys.argv[1])), "w"))
PY
}
# Python that reads pr_rows' lines on stdin: rows, ms(row), busy(row, resource) (0: none)
PR_PY='import re, sys
rows = sys.stdin.read().splitlines()
def ms(r):
    m = re.search(r"([0-9.]+) ms/it", r)
    return float(m.group(1)) if m else None
def busy(r, what):
    m = re.search(what + r" ([0-9.]+)", r)
    return float(m.group(1)) if m else 0.0
'

(cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate "${PR_SHAPE[@]}" --results res >cal1.out 2>&1)
rc=$?
PR_FILE=$(ls "$PR_WORK"/res/machine_*.json 2>/dev/null | head -n 1)
check=$(python3 - "${PR_FILE:-none}" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"unreadable: {e}")
rates = ["h2d_gbs", "d2h_gbs", "both_h2d_gbs", "both_d2h_gbs", "host_adam_ms_per_mparam", "host_threads",
         "host_copy_gbs", "gpu_bytes", "host_bytes", "busy_h2d_gbs", "busy_d2h_gbs", "busy_host_adam_ms_per_mparam",
         "adam_h2d_gbs", "adam_d2h_gbs", "host_adam_h2d_ms_per_mparam", "host_adam_d2h_ms_per_mparam",
         "up2_h2d_gbs", "measured"]
comp = ["embed_fwd_ms", "layer_fwd_ms", "layer_bwd_ms", "head_ms", "embed_bwd_ms", "gpu_adam_ms_per_mparam",
        "step_l2_ms", "step_deep_ms", "layer_scale", "rest_scale", "measured", "layer_recompute_selective_ms",
        "layer_bwd_none_ms"]
bad = [k for k in rates if not d.get("rates", {}).get(k, 0) > 0]
e = d.get("compute", [])
if len(e) != 1:
    sys.exit(f"{len(e)} compute entries")
e = e[0]
bad += [k for k in comp if not e.get(k, 0) > 0]
# (--tp T's split layer, a rank's share, for each T of 2, 4, 8 that divides the 4 heads and the
# padded vocabulary)
tp = {x.get("t"): x for x in e.get("tp", [])}
if sorted(tp) != [2, 4] or not all(x.get(k, 0) > 0 for x in tp.values() for k in ("layer_fwd_ms", "layer_bwd_ms", "layer_bwd_none_ms")):
    bad.append(f"tp {e.get('tp')}")
if (e["hidden"], e["heads"], e["seq"], e["batch"], e["vocab"], e["math"], e["dtype"]) != (128, 4, 64, 2, 1000, "fp32", "fp32"):
    bad.append("shape")
# (the per-layer slope over l2 to l8: l8 fits this shape, so the deep step is l8, not the l4
# kept only where l8 does not fit)
if e.get("step_deep_layers") != 8:
    bad.append(f"step_deep_layers {e.get('step_deep_layers')}")
# (no order between the measured times is asserted: the deep step longer than l2's, a backward
# longer than a forward, selective's recompute shorter than a forward all hold on a quiet machine,
# but a test beside another make test on 2 cores measured them out of order: issue 47's
# side-by-side runs.  What is checked is that every piece was measured and recorded.)
print("ok" if not bad else f"bad: {bad}")
EOF
)
if [ $rc -eq 0 ] && [ "$check" = ok ] && grep -q "^calibrate: wrote " "$PR_WORK/cal1.out"; then
    pr_pass "--calibrate writes the machine file: rates, and the shape's entry with the engine's step at l2 and l8"
else
    pr_fail "--calibrate" "exit $rc: $check $(tail -n 3 "$PR_WORK/cal1.out")"
fi

# where megatron-lm at l8 does not fit the GPU (here --gpu-mem-limit between l4's plan and
# l8's), the slope comes from l2 and l4, said in one line, and the file says so
lim=$("$PR_BIN" --dry-run -m megatron-lm "${PR_SHAPE[@]}" 2>&1 | grep -o "plan: GPU [^(]*([0-9]* bytes" | grep -o "[0-9]* bytes" | cut -d" " -f1)
lim8=$("$PR_BIN" --dry-run -m megatron-lm "${PR_SHAPE[@]}" -l 8 2>&1 | grep -o "plan: GPU [^(]*([0-9]* bytes" | grep -o "[0-9]* bytes" | cut -d" " -f1)
mkdir -p "$PR_WORK/res_l4"
(cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate "${PR_SHAPE[@]}" --gpu-mem-limit $(((${lim:-0} + ${lim8:-0}) / 2)) \
    --results res_l4 >cal_l4.out 2>&1)
rc=$?
deep=$(python3 -c 'import glob, json; print(json.load(open(glob.glob("'"$PR_WORK"'/res_l4/machine_*.json")[0]))["compute"][0]["step_deep_layers"])' 2>&1)
if [ $rc -eq 0 ] && [ -n "$lim" ] && [ -n "$lim8" ] && [ "$lim" -lt "$lim8" ] && [ "$deep" = 4 ] &&
    grep -q "^calibrate: megatron-lm at l8 does not fit the GPU: the per-layer slope from l4" "$PR_WORK/cal_l4.out"; then
    pr_pass "--calibrate where l8 does not fit the GPU (--gpu-mem-limit between l4's plan and l8's): the slope from l2 and l4, said"
else
    pr_fail "--calibrate's l4 fallback" "exit $rc, plans $lim/$lim8, deep $deep: $(tail -n 3 "$PR_WORK/cal_l4.out")"
fi

# a fresh file is kept, not measured again
before=$(md5sum <"${PR_FILE:-/dev/null}")
(cd "$PR_WORK" && timeout 120 "$PR_BIN" --calibrate "${PR_SHAPE[@]}" --results res >cal2.out 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'fresh' "$PR_WORK/cal2.out")" -eq 2 ] && [ "$(md5sum <"$PR_FILE")" = "$before" ]; then
    pr_pass "--calibrate again: the rates and the entry are fresh and kept (the file is unchanged)"
else
    pr_fail "--calibrate again" "exit $rc: $(cat "$PR_WORK/cal2.out")"
fi
# ... but not rates whose host Adam swept a region more than 2x off this run's (the rate depends
# on it: calibrate_host_region_params): a copy of the file saying 3x is measured again, its
# compute entry kept; the region written back is this run's (the file records the rate on one
# block timed again and again beside it)
mkdir -p "$PR_WORK/res_region"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); r = d["rates"]
ok = r.get("host_adam_region_mparams", 0) > 0 and r.get("host_adam_block_ms_per_mparam", 0) > 0 and \
     r.get("host_adam_bf16_block_ms_per_mparam", 0) > 0
r["host_adam_region_mparams"] = 3 * r.get("host_adam_region_mparams", 1)
json.dump(d, open(sys.argv[2], "w"))
sys.exit(0 if ok else 1)' "$PR_FILE" "$PR_WORK/res_region/$(basename "$PR_FILE")"
rc=$?
(cd "$PR_WORK" && timeout 120 "$PR_BIN" --calibrate "${PR_SHAPE[@]}" --results res_region >cal_region.out 2>&1) || rc=$?
if [ $rc -eq 0 ] && grep -q "copies, host Adam, host memory" "$PR_WORK/cal_region.out" &&
    [ "$(grep -c 'fresh' "$PR_WORK/cal_region.out")" -eq 1 ] &&
    python3 -c 'import json, sys
a = json.load(open(sys.argv[1]))["rates"]["host_adam_region_mparams"]
b = json.load(open(sys.argv[2]))["rates"]["host_adam_region_mparams"]
sys.exit(0 if a == b else 1)' "$PR_FILE" "$PR_WORK/res_region/$(basename "$PR_FILE")"; then
    pr_pass "--calibrate again where the file's host Adam swept a region 3x this run's: the rates measured again, the entry kept (the one block's rates recorded beside)"
else
    pr_fail "--calibrate over another region" "exit $rc: $(cat "$PR_WORK/cal_region.out")"
fi

# every engine that -m all runs (how long it took is said, not judged: the machine may be busy):
# as many as the registry has (tests/engine_list.sh), each once
# shellcheck source=tests/engine_list.sh
source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
registry_engines "$PR_BIN" || pr_fail "the registry's engines (predict)" "$REG_WHY"
PR_NE=${#REG_IN_ALL[@]}
(cd "$PR_WORK" && timeout 60 "$PR_BIN" --predict -m all "${PR_SHAPE[@]}" --results res >all.out 2>&1)
rc=$?
took=$(sed -n 's/^predicted in \([0-9.]*\) ms$/\1/p' "$PR_WORK/all.out")
predicted=$(sed -n 's/^predict \([a-z0-9-]*\) .*/\1/p' "$PR_WORK/all.out" | sort)
if [ $rc -eq 0 ] && [ "$PR_NE" -ge "$REG_MIN_IN_ALL" ] && [ "$(grep -c '^predict ' "$PR_WORK/all.out")" -eq "$PR_NE" ] &&
    [ "$predicted" = "$(printf '%s\n' "${REG_IN_ALL[@]}" | sort)" ] && [ -n "$took" ] &&
    ! grep -q "not modelled" "$PR_WORK/all.out"; then
    pr_pass "--predict -m all: $PR_NE engines modelled, each with its breakdown and plan, in $took ms"
else
    pr_fail "--predict -m all" "exit $rc, want -m all's $PR_NE (${REG_IN_ALL[*]}): $(cat "$PR_WORK/all.out")"
fi
# (each engine -m all runs, stronghold with -w 2, then two other recompute modes)
pr_runs=()
for e in "${REG_IN_ALL[@]}"; do
    if [ "$e" = stronghold ]; then pr_runs+=("-m stronghold -w 2"); else pr_runs+=("-m $e"); fi
done
PR_RECALIBRATE=1 pr_accuracy "predicted/measured ms on the CPU backend" 5 res PR_SHAPE "${pr_runs[@]}" \
    "-m megatron-lm --recompute selective" "-m stronghold -w 2 --recompute none"
# the recompute modes in the model: none below selective below full, every engine.  (On a copy
# of the file whose pieces are in that order, as a quiet machine measures them: a layer's
# backward without recompute 0.9 of a forward below the one with it, selective's recompute a
# tenth of a forward.  Calibrated on a busy 2-core machine, the three once came out in another
# order, and the model then predicts that order, as it should.)
mkdir -p "$PR_WORK/resorder"
python3 - "$PR_FILE" "$PR_WORK/resorder" <<'EOF2'
import json, os, sys
d = json.load(open(sys.argv[1]))
for e in d["compute"]:
    e["layer_bwd_none_ms"] = e["layer_bwd_ms"] - 0.9 * e["layer_fwd_ms"]
    e["layer_recompute_selective_ms"] = 0.1 * e["layer_fwd_ms"]
json.dump(d, open(os.path.join(sys.argv[2], os.path.basename(sys.argv[1])), "w"))
EOF2
order=$(for m in full selective none; do
    (cd "$PR_WORK" && "$PR_BIN" --predict -m all "${PR_SHAPE[@]}" -l 8 --recompute "$m" --results resorder 2>/dev/null) |
        sed -n "s/^predict \([a-z0-9-]*\) *\([0-9.]*\) ms\/it.*/$m \1 \2/p"
done | python3 -c '
import sys
t = {}
for line in sys.stdin:
    m, e, ms = line.split()
    t.setdefault(e, {})[m] = float(ms)
bad = [f"{e} {v}" for e, v in t.items() if len(v) != 3 or not v["none"] < v["selective"] < v["full"]]
print("ok" if len(t) == int(sys.argv[1]) >= int(sys.argv[2]) and not bad else f"{len(t)} engines of {sys.argv[1]}; out of order: {bad}")' "$PR_NE" "$REG_MIN_IN_ALL")
if [ "$order" = ok ]; then
    pr_pass "--predict: every engine at l8 predicted fastest with --recompute none, then selective, then full"
else
    pr_fail "--predict by --recompute" "$order"
fi
# --recompute none's backward is its own calibrated piece (layer_bwd_none_ms, scaled to the step
# as the others): megatron-lm at l8 none grows by 8 x layer_scale x what it grows by, and a file
# without it (from before) prices it as the backward with recompute less a forward
mkdir -p "$PR_WORK/none_a" "$PR_WORK/none_b" "$PR_WORK/none_old" "$PR_WORK/none_diff"
none_check=$(python3 - "${PR_FILE:-none}" "$PR_WORK" <<'EOF2'
import json, os, sys
d = json.load(open(sys.argv[1]))
e = d["compute"][0]
x = e["layer_bwd_ms"]
name = os.path.basename(sys.argv[1])
for sub, v in (("none_a", x), ("none_b", 2 * x), ("none_old", None), ("none_diff", e["layer_bwd_ms"] - e["layer_fwd_ms"])):
    c = json.loads(json.dumps(d))
    if v is None: del c["compute"][0]["layer_bwd_none_ms"]
    else: c["compute"][0]["layer_bwd_none_ms"] = v
    json.dump(c, open(os.path.join(sys.argv[2], sub, name), "w"))
print(x * e["layer_scale"] * 8)
EOF2
)
none_ms() {
    (cd "$PR_WORK" && "$PR_BIN" --predict -m megatron-lm "${PR_SHAPE[@]}" -l 8 --recompute none --results "$1" 2>/dev/null) |
        sed -n 's/^predict megatron-lm *\([0-9.]*\) ms\/it.*/\1/p'
}
na=$(none_ms none_a) nb=$(none_ms none_b) nold=$(none_ms none_old) ndiff=$(none_ms none_diff)
if awk -v a="${na:-0}" -v b="${nb:-0}" -v o="${nold:-0}" -v d="${ndiff:-0}" -v w="${none_check:-0}" \
    'BEGIN { exit !(a > 0 && w > 0 && (b - a) > 0.98 * w && (b - a) < 1.02 * w && o > 0 && (o - d) < 0.001 * d && (d - o) < 0.001 * d) }'; then
    pr_pass "--predict --recompute none: the calibrated backward without recompute prices it (l8: +$(awk -v a="$na" -v b="$nb" 'BEGIN{printf "%.2f", b - a}') ms for ${none_check} ms more over 8 layers; a file without it as before, $nold ms)"
else
    pr_fail "--predict --recompute none's backward" "1x $na, 2x $nb (want +$none_check), without $nold, as bwd - fwd $ndiff"
fi
# micro-batches (l2l, zero-infinity, stronghold): three take about three times one, and from the second on
# each layer's sum so far comes up before its grads go home (more than three times the copies
# up); measured on this machine: 2.92x, 3.00x and 2.95x the step, predicted 2.98x, 2.99x and 2.88x.
# (On the flat copy of the file: what a copy costs beside the others depends on what the walk
# puts beside it, and a file calibrated on a busy machine once made three micro-batches' copies
# up cost 2.85x one's.)
pr_flat resmbflat "$PR_FILE"
for e in l2l zero-infinity "stronghold -w 2"; do
    mb=$(pr_rows resmbflat PR_SHAPE "-m $e -l 16 --global-batch 2" "-m $e -l 16 --global-batch 6" | python3 -c "$PR_PY"'
ok = len(rows) == 2 and 2.5 < ms(rows[1]) / ms(rows[0]) < 3.5 and busy(rows[1], "h2d") > 3 * busy(rows[0], "h2d")
print("ok" if ok else "bad: " + " / ".join(rows))')
    if [ "$mb" = ok ]; then
        pr_pass "$e with 3 micro-batches: about 3x the step of one, the sums so far copied up"
    else
        pr_fail "$e micro-batch prediction" "$mb"
    fi
done

# monotone in layers, and never below the busiest resource
mono=$(for L in 2 4 8 16; do
    (cd "$PR_WORK" && "$PR_BIN" --predict -m all "${PR_SHAPE[@]}" -l "$L" --results res 2>/dev/null)
done | python3 -c '
import re, sys
by = {}
ok = True
for line in sys.stdin:
    m = re.match(r"predict (\S+)\s+([0-9.]+) ms/it .*bound: [a-z ]+ \|(.*)\| plan", line)
    if not m: continue
    ms = float(m.group(2)); busy = [float(x) for x in re.findall(r"([0-9.]+)", m.group(3))]
    if busy and ms + 1e-6 < max(busy): ok = False
    by.setdefault(m.group(1), []).append(ms)
ok = ok and len(by) == int(sys.argv[1]) >= int(sys.argv[2]) and all(len(v) == 4 and all(a < b for a, b in zip(v, v[1:])) for v in by.values())
print("ok" if ok else f"bad (want {sys.argv[1]} engines) {by}")' "$PR_NE" "$REG_MIN_IN_ALL")
if [ "$mono" = ok ]; then
    pr_pass "predictions grow with the layers (l2, 4, 8, 16) and are never below the busiest resource"
else
    pr_fail "predictions monotone" "$mono"
fi


# Host memory's load: the machine with its copies and host Adam made 50 times slower (so
# that they matter beside the compute), its rates under load equal to those alone (A), four
# times slower under load (B), and four times slower alone too (C).  An offload engine's
# prediction settles strictly between A and C (its copies and host Adam overlap part of the
# step, not all of it); megatron-lm, with no host traffic, is the same in all three.
load=$(python3 - "$PR_FILE" "$PR_WORK" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); r = d["rates"]
for k in ("h2d_gbs", "d2h_gbs"): r[k] /= 50
r["host_adam_ms_per_mparam"] *= 50
# (each user's rate beside one other, and beside both: the same in each variant)
pairs = [("h2d_gbs", "busy_h2d_gbs", 1), ("d2h_gbs", "busy_d2h_gbs", 1),
         ("host_adam_ms_per_mparam", "busy_host_adam_ms_per_mparam", 0),
         ("h2d_gbs", "both_h2d_gbs", 1), ("h2d_gbs", "adam_h2d_gbs", 1), ("d2h_gbs", "both_d2h_gbs", 1),
         ("d2h_gbs", "adam_d2h_gbs", 1), ("host_adam_ms_per_mparam", "host_adam_h2d_ms_per_mparam", 0),
         ("host_adam_ms_per_mparam", "host_adam_d2h_ms_per_mparam", 0)]
for tag, busy, alone in (("A", 1, 1), ("B", 4, 1), ("C", 4, 4)):
    for a, b, is_rate in pairs:
        r[b] = r[a] / busy if is_rate else r[a] * busy
    d["rates"] = dict(r)
    for a, b, is_rate in pairs:
        d["rates"][a] = r[a] / alone if is_rate else r[a] * alone
    json.dump(d, open(f"{sys.argv[2]}/load_{tag}.json", "w"))
    for a, b, is_rate in pairs: r[b] = r[a]
EOF
for t in A B C; do
    for m in l2l zero-offload megatron-lm; do
        "$PR_BIN" --predict -m $m "${PR_SHAPE[@]}" -l 8 --machine "$PR_WORK/load_$t.json" 2>&1 |
            sed -n "s/^predict \([a-z0-9-]*\) *\([0-9.]*\) ms\/it.*/$t \1 \2/p"
    done
done | python3 -c '
import sys
p = {}
for line in sys.stdin:
    t, m, ms = line.split(); p[(t, m)] = float(ms)
ok = len(p) == 9 and all(p[("A", m)] < p[("B", m)] < p[("C", m)] for m in ("l2l", "zero-offload")) and \
     p[("A", "megatron-lm")] == p[("B", "megatron-lm")] == p[("C", "megatron-lm")]
print("ok" if ok else f"bad {p}")')
if [ "$load" = ok ]; then
    pr_pass "host memory under load: offload predictions settle between the rates alone and under full load; megatron-lm unchanged"
else
    pr_fail "host memory load" "$load"
fi
# -w auto with the machine file beside the run: the JSON names it, the window comes from the
# model, and the training is still megatron-lm's, bit for bit
(cd "$PR_WORK" && "$PR_BIN" -m stronghold -w auto --gpu-mem-limit 10M "${PR_SHAPE[@]}" --iters 4 --results res >wa.out 2>&1)
rc=$?
(cd "$PR_WORK" && "$PR_BIN" -m megatron-lm "${PR_SHAPE[@]}" --iters 4 --results base >wb.out 2>&1)
same=$(python3 - "$PR_WORK/res" "$PR_WORK/base" <<'EOF'
import glob, json, os, sys
a = [json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[1], "log_stronghold_*.json"))]
b = [json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[2], "log_*.json"))]
if len(a) != 1 or len(b) != 1: sys.exit("runs missing")
ok = a[0]["config"].get("machine_file", "").endswith(".json") and \
     [i["loss"] for i in a[0]["iterations"]] == [i["loss"] for i in b[0]["iterations"]]
print("ok" if ok else f"bad: {a[0]['config'].get('machine_file')}")
EOF
)
if [ $rc -eq 0 ] && [ "$same" = ok ] && grep -q "stronghold -w auto: " "$PR_WORK/wa.out"; then
    pr_pass "-w auto beside a machine file: sized with the model (the JSON names the file), losses = megatron-lm's bit for bit"
else
    pr_fail "-w auto with a machine file" "exit $rc: $same $(tail -n 3 "$PR_WORK/wa.out")"
fi

# N ranks: without the collectives calibrated at that world the prediction says so; with them
# (--calibrate --ranks 2, under mpiexec), megatron-lm's stages are modelled and near their steps
if needs_mpi "--calibrate and --predict at 2 ranks" "$PR_BIN"; then
    PR1=(--device cpu -l 4 -h 128 --heads 4 --seq 64 -b 2 --vocab 1000 --threads 1)
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate "${PR1[@]}" --results res1 >c1.out 2>&1)
    out=$(cd "$PR_WORK" && "$PR_BIN" --predict --ranks 2 "${PR1[@]}" --results res1 2>&1)
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate --ranks 2 "${PR1[@]}" --results res1 >c2.out 2>&1)
    rc=$?
    if grep -q "not modelled yet: no collectives calibrated at 2 ranks" <<<"$out" && [ $rc -eq 0 ] &&
        [ "$(grep -c 'among 2 ranks' "$PR_WORK/c2.out")" -eq 3 ]; then
        pr_pass "--predict --ranks 2 asks for the collectives; --calibrate --ranks 2 measures all-reduce, reduce-scatter, all-gather"
    else
        pr_fail "collectives calibration" "exit $rc: $out $(tail -n 3 "$PR_WORK/c2.out")"
    fi
    # (20x, and no second calibration, which would be one rank's and drop the collectives: two
    # ranks polling in MPI on two cores that other work shares run 5-30 times slower at times)
    pr_accuracy "megatron-lm on 2 ranks, predicted/measured ms" 20 res1 PR1 \
        "--ranks 2 --zero-stage 0" "--ranks 2 --zero-stage 3" "--ranks 2 --pp 2 --global-batch 8" "--ranks 2 --tp 2"
    # --pp: the 1F1B walk's bubble, (P - 1) micro-batches' worth of idle stage, is paid once a
    # step: more micro-batches, less of a step per micro-batch; --tp and --sequence-parallel
    # modelled (their collectives' busy time beside the split layer's compute)
    # (and --tp 2's layer as --calibrate timed it split: a copy of the file where that takes 10x
    # makes the compute of --tp 2's step longer, and leaves one rank's alone)
    mkdir -p "$PR_WORK/res1tp"
    python3 - "$(ls "$PR_WORK"/res1/machine_*.json | head -n 1)" "$PR_WORK/res1tp" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
for e in d["compute"]:
    for x in e.get("tp", []):
        x["layer_fwd_ms"] *= 10; x["layer_bwd_ms"] *= 10
json.dump(d, open(os.path.join(sys.argv[2], os.path.basename(sys.argv[1])), "w"))
PY
    mp=$( (pr_rows res1 PR1 "--ranks 2 --pp 2 --global-batch 4" "--ranks 2 --pp 2 --global-batch 16" "--ranks 2 --tp 2" \
           "--ranks 2 --tp 2 --sequence-parallel" "--ranks 2"; pr_rows res1tp PR1 "--ranks 2 --tp 2" "--ranks 2") |
         python3 -c "$PR_PY"'
ok = len(rows) == 7 and ms(rows[4]) == ms(rows[6]) and 0 < ms(rows[1]) / 8 < ms(rows[0]) / 2 and ms(rows[1]) > ms(rows[0]) and \
     all(busy(r, "collectives") > 0 for r in rows[2:4]) and busy(rows[5], "compute") > 2 * busy(rows[2], "compute")
print("ok" if ok else "bad: " + " / ".join(rows))')
    if [ "$mp" = ok ]; then
        pr_pass "--pp 2 is modelled with its bubble (per micro-batch shorter at M 8 than at M 2), --tp 2 and --sequence-parallel with their collectives, --tp 2's layer as calibrated split"
    else
        pr_fail "model-parallel predictions" "$mp"
    fi
    # ZeRO-2 and 3 over the copies of --tp 2 (4 ranks: --calibrate --ranks 4 adds that world's
    # collectives): modelled like the others, and at l16 each stage plans less GPU memory a
    # rank than the one before (ZeRO-2: the gradients' shards and two slots; ZeRO-3: the
    # params' shards and two gathered layers)
    # (into a copy of the file: the checks below read the 2-rank calibration as it was)
    mkdir -p "$PR_WORK/res1z" && cp "$PR_WORK"/res1/machine_*.json "$PR_WORK/res1z/"
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate --ranks 4 "${PR1[@]}" --results res1z >c4.out 2>&1)
    zt=$(pr_rows res1z PR1 "--ranks 4 --tp 2 -l 16 --global-batch 8 --zero-stage 0" "--ranks 4 --tp 2 -l 16 --global-batch 8 --zero-stage 1" \
             "--ranks 4 --tp 2 -l 16 --global-batch 8 --zero-stage 2" "--ranks 4 --tp 2 -l 16 --global-batch 8 --zero-stage 3" |
         python3 -c "$PR_PY"'
def gpu(r):
    m = re.search(r"plan GPU ([0-9.]+) (KiB|MiB|GiB)", r)
    return float(m.group(1)) * {"KiB": 1, "MiB": 1024, "GiB": 1024 ** 2}[m.group(2)] if m else 0
ok = len(rows) == 4 and all(ms(r) > 0 and busy(r, "collectives") > 0 for r in rows) and \
     gpu(rows[0]) > gpu(rows[1]) > gpu(rows[2]) > gpu(rows[3]) > 0
print("ok" if ok else "bad: " + " / ".join(rows))')
    if [ "$zt" = ok ]; then
        pr_pass "--tp 2 with ZeRO 0-3 over its 2 copies (4 ranks) is modelled, each stage planning less GPU memory than the one before"
    else
        pr_fail "--tp with ZeRO-2/3 predictions" "$zt $(tail -n 2 "$PR_WORK/c4.out")"
    fi
    # The calibration at 2 ranks also measured, with both ranks at once, each rank's copy and
    # host Adam rates and what the collectives slow the compute beside them by.  Variants of
    # the file: without them (older files), with the compute beside collectives x1, x2, x0.5, and
    # beside reduce-scatters and all-gathers x2 (all-reduces x1).
    F1=$(ls "$PR_WORK"/res1/machine_*.json | head -n 1)
    mkdir -p "$PR_WORK/res1old" "$PR_WORK/res1f1" "$PR_WORK/res1f2" "$PR_WORK/res1bad" "$PR_WORK/res1s2" "$PR_WORK/res1bf" \
        "$PR_WORK/res1copies" "$PR_WORK/res1gpu" "$PR_WORK/res1g2" "$PR_WORK/res1gbad" "$PR_WORK/res1two" \
        "$PR_WORK/res1at2" "$PR_WORK/res1at3" "$PR_WORK/res1atbad" "$PR_WORK/res1free" "$PR_WORK/res1link"
    python3 - "$F1" "$PR_WORK" <<'PY'
import copy, json, os, sys
d = json.load(open(sys.argv[1]))
# The variants that test the model's arithmetic (res1f1, res1f2, res1bad) get fixed rates, a
# quiet 2-core machine's with collectives well under the backward's compute: what they check
# (collectives hidden under the compute, sends beside it) must not depend on what a
# calibration on a busy machine measured: every time the walk reads, the last layer's backward
# without recompute and selective's recompute too (left as calibrated, a slow machine's last
# layer made the compute bound ZeRO-3's step in res1copies below).
QUIET_COMPUTE = dict(embed_fwd_ms=0.0122, layer_fwd_ms=4.30, layer_bwd_ms=4.57, head_ms=3.37, embed_bwd_ms=0.0549,
                     layer_bwd_none_ms=3.40, layer_recompute_selective_ms=1.25,
                     gpu_adam_ms_per_mparam=3.02, step_l2_ms=22.5, step_deep_ms=77.7, layer_scale=2.92, rest_scale=1)
QUIET_RATES = dict(h2d_gbs=5.1, d2h_gbs=5.1, both_h2d_gbs=4.2, both_d2h_gbs=4.2, host_adam_ms_per_mparam=1.61,
                   host_adam_bf16_ms_per_mparam=1.75, busy_h2d_gbs=2.9, busy_d2h_gbs=3.4,
                   busy_host_adam_ms_per_mparam=3.0, host_copy_gbs=8.2, adam_h2d_gbs=3.6, adam_d2h_gbs=3.9,
                   host_adam_h2d_ms_per_mparam=2.1, host_adam_d2h_ms_per_mparam=2.0, host_adam_under_compute=1.0,
                   up2_h2d_gbs=10.2)
QUIET_COLL = dict(all_reduce_ms=0.5, all_reduce_gbs=10.0, reduce_scatter_ms=0.5, reduce_scatter_gbs=10.0,
                  all_gather_ms=0.5, all_gather_gbs=10.0, all_reduce_under_compute=1.0,
                  reduce_scatter_under_compute=1.0, all_gather_under_compute=1.0)
def variant(name, change, quiet=True):
    v = copy.deepcopy(d)
    if quiet:
        v["compute"][0].update(QUIET_COMPUTE)
        v["rates"].update(QUIET_RATES)
    for e in v["collectives"]:
        if e["world"] == 2:
            if quiet:
                e.update(QUIET_COLL)
                e["rates"].update(QUIET_RATES)
                # (the factors at the run's micro-batch and beside two streams only where a
                # variant sets them: they would override its factors)
                e.pop("compute_beside_at", None)
                e.pop("compute_under_two_collective_streams", None)
            change(e)
    json.dump(v, open(os.path.join(sys.argv[2], name, os.path.basename(sys.argv[1])), "w"))
def old(e):
    e.pop("rates"); e.pop("compute_under_collectives"); e.pop("compute_under_sharded_collectives")
    e.pop("compute_beside_at"); e.pop("compute_under_two_collective_streams")
    for k in ("all_reduce", "reduce_scatter", "all_gather"): e.pop(k + "_under_compute")
variant("res1old", old, quiet=False)
variant("res1f1", lambda e: e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0))
variant("res1f2", lambda e: e.update(compute_under_collectives=2.0, compute_under_sharded_collectives=1.0))
variant("res1s2", lambda e: e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=2.0))
variant("res1bad", lambda e: e.update(compute_under_collectives=0.5))
# the collectives slowed by the compute beside them: gathers and reduce-scatters x2, all-reduces
# as alone (res1g2); a factor below 1 refused (res1gbad)
variant("res1g2", lambda e: e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0,
                                     reduce_scatter_under_compute=2.0, all_gather_under_compute=2.0))
variant("res1gbad", lambda e: e.update(all_gather_under_compute=0.9))
# the compute beside two collective streams at once x2, beside one as alone (res1two); the
# factors at micro-batch 2 (the run's: res1at2) and at 3 only (res1at3), all-reduces x2 there;
# one below 1 there refused (res1atbad)
ONE = dict(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0)
variant("res1two", lambda e: e.update(ONE, compute_under_two_collective_streams=2.0))
AT = lambda b, cu: [dict(batch=b, compute_under_collectives=cu, compute_under_sharded_collectives=1.0,
                         compute_under_two_collective_streams=1.0)]
variant("res1at2", lambda e: e.update(ONE, compute_beside_at=AT(2, 2.0)))
variant("res1at3", lambda e: e.update(ONE, compute_beside_at=AT(3, 2.0)))
variant("res1atbad", lambda e: e.update(ONE, compute_beside_at=AT(2, 0.5)))
# res1f1 with collectives slow enough that their stream bounds the offload engines' steps
# and copies slow enough to matter beside them (the compute a tenth of the quiet machine's)
def slow_copies(r, up2):
    for k in ("h2d_gbs", "d2h_gbs", "both_h2d_gbs", "both_d2h_gbs", "busy_h2d_gbs", "busy_d2h_gbs", "adam_h2d_gbs",
              "adam_d2h_gbs"):
        r[k] = 0.5
    r["up2_h2d_gbs"] = up2
def slow(e):
    e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0, all_gather_gbs=0.5,
             reduce_scatter_gbs=0.5, all_reduce_gbs=0.5)
    slow_copies(e["rates"], 1.0)
variant("res1copies", slow)
sl = os.path.join(sys.argv[2], "res1copies", os.path.basename(sys.argv[1]))
v = json.load(open(sl))
v["compute"][0].update({k: x / 10 for k, x in QUIET_COMPUTE.items() if k.endswith("_ms") or k.endswith("mparam")})
json.dump(v, open(sl, "w"))
# res1copies with its one-rank copies as slow as its two-rank ones: a second upward copy engine
# adding a whole copy's bandwidth (res1free: up2 twice h2d), or none (res1link: one link)
for name, up2 in (("res1free", 1.0), ("res1link", 0.5)):
    slow_copies(v["rates"], up2)
    json.dump(v, open(os.path.join(sys.argv[2], name, os.path.basename(sys.argv[1])), "w"))
# res1f1 with a bf16 entry timed as the fp32 one: what differs is only what the collectives move
variant("res1bf", lambda e: e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0))
bf = json.load(open(os.path.join(sys.argv[2], "res1bf", os.path.basename(sys.argv[1]))))
bf["compute"].append(dict(bf["compute"][0], dtype="bf16"))
json.dump(bf, open(os.path.join(sys.argv[2], "res1bf", os.path.basename(sys.argv[1])), "w"))
# res1f1 as a GPU machine's file: its ranks talk by NCCL, whose communicators the plans reserve
variant("res1gpu", lambda e: e.update(compute_under_collectives=1.0, compute_under_sharded_collectives=1.0))
g = json.load(open(os.path.join(sys.argv[2], "res1gpu", os.path.basename(sys.argv[1]))))
g["backend"] = "cuda"
json.dump(g, open(os.path.join(sys.argv[2], "res1gpu", os.path.basename(sys.argv[1])), "w"))
PY
    w2=$(python3 -c 'import json, sys; e = [e for e in json.load(open(sys.argv[1]))["collectives"] if e["world"] == 2][0]
at = e["compute_beside_at"]
print(e["compute_under_collectives"] >= 1 and e["compute_under_sharded_collectives"] >= 1 and
      e["compute_under_two_collective_streams"] >= 1 and [a["batch"] for a in at] == [2] and
      all(at[0][k] == e[k] for k in ("compute_under_collectives", "compute_under_sharded_collectives",
                                     "compute_under_two_collective_streams")) and
      all(e[k + "_under_compute"] >= 1 for k in ("all_reduce", "reduce_scatter", "all_gather")), e["rates"]["host_threads"],
      e["rates"]["host_adam_ms_per_mparam"] > 0,
      e["rates"]["busy_host_adam_ms_per_mparam"] > 0)' "$F1" 2>&1)
    if [ "$w2" = "True 1 True True" ] && grep -q "every rank at once, each: " "$PR_WORK/c2.out" &&
        grep -q "b2: a layer's backward with all-reduces beside it: .*; with reduce-scatters and all-gathers: .*; with a layer's all-gathers and its reduce-scatters on two streams at once: " "$PR_WORK/c2.out" &&
        [ "$(grep -c "among 2 ranks: .*; beside a layer's backward [0-9.]*x its time alone" "$PR_WORK/c2.out")" -eq 3 ]; then
        pr_pass "--calibrate --ranks 2 also measures the compute beside all-reduces, beside reduce-scatters and all-gathers, beside both of ZeRO-3's streams at once (at each micro-batch: -b 2 here), each collective beside the compute, and each rank's rates with both at work"
    else
        pr_fail "2-rank rates and compute under collectives" "$w2 $(tail -n 3 "$PR_WORK/c2.out")"
    fi
    # each host rate is recorded with its repetitions (samples_ms: every rank's), and is what
    # they give: one rank's the median (CPU backend); 2 ranks' the median of each repetition's
    # slowest rank
    smp=$(python3 - "$F1" <<'PY' 2>&1
import json, statistics, sys
d = json.load(open(sys.argv[1]))
def check(r, world):
    s = r["samples_ms"]
    bad = [k for k, v in s.items() if isinstance(v, list) and (len(v) != world or any(len(x) != 5 for x in v))]
    def ms(name):
        return statistics.median(max(x[i] for x in s[name]) for i in range(5))
    pairs = [("host_adam_ms_per_mparam", ms("host_adam") / s["host_adam_mparams"]),
             ("host_adam_bf16_ms_per_mparam", ms("host_adam_bf16") / s["host_adam_mparams"]),
             ("h2d_gbs", s["copy_bytes"] / (ms("h2d") * 1e6)),
             ("d2h_gbs", s["copy_bytes"] / (ms("d2h") * 1e6)),
             ("up2_h2d_gbs", 2 * s["copy_bytes"] / (ms("up2") * 1e6)),
             ("busy_h2d_gbs", s["busy_copies"] * s["copy_bytes"] / (ms("busy_h2d") * 1e6)),
             ("host_adam_d2h_ms_per_mparam", ms("beside_d2h_host_adam") / s["host_adam_mparams"]),
             ("host_adam_under_compute", max(1.0, ms("host_adam_beside_compute") / ms("host_adam_alone")))]
    bad += [f"{k} {r[k]} against {v}" for k, v in pairs if abs(r[k] - v) > 1e-9 * abs(v)]
    return bad
e = [e for e in d["collectives"] if e["world"] == 2][0]
bad = check(d["rates"], 1) + check(e["rates"], 2)
print("ok" if not bad else f"bad: {bad}")
PY
)
    if [ "$smp" = ok ]; then
        pr_pass "--calibrate records every host rate's repetitions, every rank's, and each rate is what they give"
    else
        pr_fail "the rates' samples" "$smp"
    fi
    # the offload engines on 2 ranks: their collectives are busy; each rank's host Adam (its
    # own thread: --threads 1) updates half of what one rank does, at the rate one rank gets
    # with both at work (older files: the single rank's rate; at l400, so that the rounded busy
    # times show the ratio, and the host is loaded too little to move the rates; stronghold
    # -w 2 keeps 2 layers resident and streams the rest)
    r21=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); e = [e for e in d["collectives"] if e["world"] == 2][0]
print(e["rates"]["host_adam_ms_per_mparam"] / d["rates"]["host_adam_ms_per_mparam"])' "$F1")
    # (every offloading engine, from the registry: tests/engine_list.sh)
    pr_offload=()
    for e in "${REG_OFFLOAD[@]}"; do
        if [ "$e" = stronghold ]; then pr_offload+=("stronghold -w 2 --clip-speculate 0"); else pr_offload+=("$e"); fi
    done
    pr_flat res1flat "$F1"
    pr_flat res1oldflat "$(ls "$PR_WORK"/res1old/machine_*.json | head -n 1)"
    for e in "${pr_offload[@]}"; do
        zo=$( (pr_rows res1oldflat PR1 "-m $e -l 400" "-m $e --ranks 2 -l 400"; pr_rows res1flat PR1 "-m $e --ranks 2 -l 400") |
             R21=$r21 python3 -c "$PR_PY"'
import os
want = 0.5 * float(os.environ["R21"])
ok = len(rows) == 3 and busy(rows[1], "collectives") > 0 and busy(rows[0], "collectives") == 0 and \
     abs(busy(rows[1], "host adam") / busy(rows[0], "host adam") - 0.5) < 0.05 and \
     abs(busy(rows[2], "host adam") / busy(rows[0], "host adam") - want) < 0.05 * want
print("ok" if ok else "bad (want %.3f): " % want + " / ".join(rows))')
        if [ "$zo" = ok ]; then
            pr_pass "$e --ranks 2 is modelled: its collectives on their stream, half the host Adam per rank, at the 2-rank rate ($r21 x)"
        else
            pr_fail "$e on 2 ranks" "$zo"
        fi
    done
    # compute beside collectives: with the compute twice as slow there, megatron-lm's step on 2
    # ranks grows by about the collectives' busy time (they run beside its backward); a value
    # below 1 is a one-line error
    cu=$(pr_rows res1f1 PR1 "-m megatron-lm --ranks 2 -l 16" && pr_rows res1f2 PR1 "-m megatron-lm --ranks 2 -l 16")
    cu_ok=$(python3 -c "$PR_PY"'
ok = len(rows) == 2 and busy(rows[0], "collectives") > 0 and \
     abs(ms(rows[1]) - ms(rows[0]) - busy(rows[0], "collectives")) <= 0.1 * busy(rows[0], "collectives") + 0.2
print("ok" if ok else "bad")' <<<"$cu")
    # pr_refused RES TEXT: --predict on 2 ranks with the machine file in RES exits 2 naming TEXT
    # (else what it said)
    pr_refused() {
        local said rc
        said=$(cd "$PR_WORK" && "$PR_BIN" --predict -m megatron-lm --ranks 2 "${PR1[@]}" --results "$1" 2>&1)
        rc=$?
        [ $rc -eq 2 ] && grep -q "$2" <<<"$said" || echo "exit $rc: $said"
    }
    bad=$(pr_refused res1bad "compute_under_collectives is 0.5 (at least 1)")
    if [ "$cu_ok" = ok ] && [ -z "$bad" ]; then
        pr_pass "compute beside collectives (x2): megatron-lm on 2 ranks slower by about its collectives' time; below 1 refused"
    else
        pr_fail "compute under collectives" "$cu / $bad"
    fi
    # beside reduce-scatters and all-gathers: ZeRO-3's collectives are all of that kind, so its
    # step moves with that factor alone (x2: by about its collectives beside the compute) and not
    # with the all-reduces'; ZeRO-0's all-reduces the other way round
    cs=$(for r in res1f1 res1f2 res1s2; do pr_rows $r PR1 "-m megatron-lm --ranks 2 -l 16 --zero-stage 3" \
             "-m megatron-lm --ranks 2 -l 16"; done | python3 -c "$PR_PY"'
z3 = [ms(r) for r in rows[0::2]]; z0 = [ms(r) for r in rows[1::2]]; coll = busy(rows[0], "collectives")
ok = len(rows) == 6 and coll > 0 and abs(z3[1] - z3[0]) <= 0.002 * z3[0] + 0.05 and \
     0.3 * coll <= z3[2] - z3[0] <= 1.1 * coll + 0.2 and abs(z0[2] - z0[0]) <= 0.002 * z0[0] + 0.05 and z0[1] > z0[0]
print("ok" if ok else "bad: ZeRO-3 %s, ZeRO-0 %s, collectives %.2f" % (z3, z0, coll))')
    if [ "$cs" = ok ]; then
        pr_pass "compute beside reduce-scatters and all-gathers: ZeRO-3 on 2 ranks priced by that factor alone, ZeRO-0 by the all-reduces'"
    else
        pr_fail "compute under sharded collectives" "$cs"
    fi
    # the collectives beside the compute, each kind by its factor and the share of it the compute
    # runs beside: with gathers and reduce-scatters x2, ZeRO-3's (beside its forward and
    # backward) take longer by most of that; ZeRO-0's all-reduces (x1) not at all; ZeRO-1's
    # gather after the update runs alone, so its collectives stay as they were (one share for
    # every kind slowed it too, and put ZeRO-1/2 up to 10% long on two H200s)
    cg=$(for r in res1f1 res1g2; do pr_rows $r PR1 "-m megatron-lm --ranks 2 -l 16 --zero-stage 3" \
             "-m megatron-lm --ranks 2 -l 16" "-m megatron-lm --ranks 2 -l 16 --zero-stage 1"; done | python3 -c "$PR_PY"'
c = [busy(r, "collectives") for r in rows]
ok = len(rows) == 6 and c[0] > 0 and 1.5 * c[0] <= c[3] <= 2.0 * c[0] + 0.1 and abs(c[4] - c[1]) <= 0.002 * c[1] + 0.05 and \
     abs(c[5] - c[2]) <= 0.002 * c[2] + 0.05
print("ok" if ok else "bad: collectives %s" % c)')
    gbad=$(pr_refused res1gbad "all_gather_under_compute is 0.9 (at least 1)")
    if [ "$cg" = ok ] && [ -z "$gbad" ]; then
        pr_pass "collectives beside the compute (gathers, reduce-scatters x2): ZeRO-3's slowed, ZeRO-0's all-reduces and ZeRO-1's gather after the update not; below 1 refused"
    else
        pr_fail "collectives under compute" "$cg / $gbad"
    fi
    # the compute beside two collective streams at once (x2, beside one x1): ZeRO-3's
    # gathers and reduce-scatters run together beside its backward, so its step grows (by
    # that shared time at most: no more than either stream's busy time); ZeRO-2's gathers run
    # after its update, alone, and ZeRO-0 has one stream: both as they were
    ct=$(for r in res1f1 res1two; do pr_rows $r PR1 "-m megatron-lm --ranks 2 -l 16 --zero-stage 3" \
             "-m megatron-lm --ranks 2 -l 16 --zero-stage 2" "-m megatron-lm --ranks 2 -l 16"; done | python3 -c "$PR_PY"'
t = [ms(r) for r in rows]; coll = busy(rows[0], "collectives")
ok = len(rows) == 6 and t[0] * 1.005 < t[3] <= t[0] + coll / 2 + 0.2 and abs(t[4] - t[1]) <= 0.002 * t[1] + 0.05 and \
     abs(t[5] - t[2]) <= 0.002 * t[2] + 0.05
print("ok" if ok else "bad: ms %s, ZeRO-3 collectives %.2f" % (t, coll))')
    # the factors at the run's micro-batch over the entry's: at -b 2 res1at2 prices as res1f2
    # (all-reduces x2), res1at3 (only micro-batch 3's) as res1f1
    ca=$(for r in res1f1 res1f2 res1at2 res1at3; do pr_rows $r PR1 "-m megatron-lm --ranks 2 -l 16"; done |
             python3 -c "$PR_PY"'
t = [ms(r) for r in rows]
ok = len(rows) == 4 and t[1] > 1.01 * t[0] and abs(t[2] - t[1]) <= 0.002 * t[1] and abs(t[3] - t[0]) <= 0.002 * t[0]
print("ok" if ok else "bad: ms %s" % t)')
    abad=$(pr_refused res1atbad "compute_beside_at\[\]\.compute_under_collectives is 0.5 (at least 1)")
    if [ "$ct" = ok ] && [ "$ca" = ok ] && [ -z "$abad" ]; then
        pr_pass "compute beside two collective streams (x2): ZeRO-3 on 2 ranks slower, ZeRO-2 and ZeRO-0 not; the factors at the run's micro-batch over the entry's, a factor below 1 there refused"
    else
        pr_fail "compute beside two streams, factors per micro-batch" "$ct / $ca / $abad"
    fi
    # what megatron-lm's collectives move: ZeRO-1's all-gather after the update (its collectives
    # less ZeRO-0's) moves the working weights, half the bytes in bf16; ZeRO-0's all-reduces the
    # fp32 gradient, half with --grad-reduce-dtype bf16; each collective's latency (the file's
    # 0.5 ms, one per block: L + 1) stays.  (Priced at 4 bytes a parameter, bf16 ZeRO-2 was
    # predicted +15.1% on two H200s.)
    bw=$(pr_rows res1bf PR1 "-m megatron-lm --ranks 2 -l 400 --zero-stage 0" "-m megatron-lm --ranks 2 -l 400 --zero-stage 1" \
            "-m megatron-lm --ranks 2 -l 400 --zero-stage 0 --dtype bf16" "-m megatron-lm --ranks 2 -l 400 --zero-stage 1 --dtype bf16" \
            "-m megatron-lm --ranks 2 -l 400 --zero-stage 0 --dtype bf16 --grad-reduce-dtype bf16" | python3 -c "$PR_PY"'
c = [busy(r, "collectives") for r in rows]
lat = 401 * 0.5
ok = len(rows) == 5 and c[1] - c[0] - lat > 10 and abs((c[3] - c[2] - lat) / (c[1] - c[0] - lat) - 0.5) < 0.02 and \
     abs(c[2] - c[0]) < 0.01 * c[0] and abs((c[4] - lat) / (c[2] - lat) - 0.5) < 0.02
print("ok" if ok else "bad: collectives %s" % c)')
    if [ "$bw" = ok ]; then
        pr_pass "megatron-lm on 2 ranks: bf16 gathers priced at 2 bytes a parameter, the fp32 gradient's reductions at 4 (--grad-reduce-dtype bf16: 2)"
    else
        pr_fail "bytes a collective moves" "$bw"
    fi
    # NCCL's own GPU memory: a GPU machine's plans on 2 ranks keep 1 GiB per communicator the
    # engine opens (megatron-lm 2, its pipeline 3, the offload engines 1) beyond the same
    # machine's plans on the CPU backend (MPI: none); on one rank none (a stronghold -w auto
    # whose window filled the arena failed its first all-gather on two H200s)
    cases=("megatron-lm --ranks 2 --zero-stage 0:2" "megatron-lm --ranks 2 --pp 2:3" "stronghold --ranks 2 -w 2:1"
           "zero-infinity --ranks 2:1" "megatron-lm --ranks 1:0")
    nr=""
    for c in "${cases[@]}"; do
        want=${c##*:}
        cpu=$(pr_rows res1f1 PR1 "-m ${c%:*} --math fp32" | grep -o "plan GPU [0-9.]* [KMG]i*B")
        gpu=$(pr_rows res1gpu PR1 "-m ${c%:*} --math fp32" | grep -o "plan GPU [0-9.]* [KMG]i*B")
        nr+=$(python3 -c '
import sys
def mib(t):
    v, u = t.split()[2:4]
    return float(v) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[u]
cpu, gpu, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
ok = cpu and gpu and abs(mib(gpu) - mib(cpu) - 1024 * want) <= 0.01 * mib(gpu) + 0.5
print("" if ok else "[%s: cpu %r gpu %r, want +%d GiB] " % (sys.argv[4], cpu, gpu, want))' "$cpu" "$gpu" "$want" "${c%:*}")
    done
    if [ -z "$nr" ]; then
        pr_pass "plans keep NCCL's memory on a GPU machine's ranks: 1 GiB per communicator (megatron-lm 2, --pp 2 3, offload engines 1, one rank none)"
    else
        pr_fail "NCCL's reserve in the plans" "$nr"
    fi
    # the region a GPU machine's host Adam was swept over against the model's shard: more than
    # 2x off either way, --predict and --search say so in one line (and the search's JSON); at
    # the shard, or on the CPU backend's file (one block timed), they do not.  (The CPU
    # calibration's one 16 M block is far above this model's shard: res1gpu is off.)
    shard=$(cd "$PR_WORK" && "$PR_BIN" --predict "${PR1[@]}" --math fp32 -m megatron-lm --ranks 2 --results res1gpu 2>&1 |
        sed -n "s/^predict: note: .*this model's shard is \([0-9.]*\) M: .*/\1/p")
    gpu_file=$(ls "$PR_WORK"/res1gpu/machine_*.json | head -n 1)
    pr_with_rate res1reg "$gpu_file" host_adam_region_mparams "${shard:-0}"
    pr_with_rate res1regs "$gpu_file" host_adam_region_mparams "$(awk -v s="${shard:-0}" 'BEGIN { print s / 3 }')"
    notes=""
    for res in res1gpu res1reg res1regs res1f1; do
        n=$(cd "$PR_WORK" && "$PR_BIN" --predict "${PR1[@]}" --math fp32 -m megatron-lm --ranks 2 --results "$res" 2>&1 |
            grep -c "^predict: note: the machine file's host Adam rate was swept over ")
        s=$(cd "$PR_WORK" && "$PR_BIN" --search "${PR1[@]}" --math fp32 -m megatron-lm --ranks 2 --results "$res" 2>&1 |
            grep -c "^search: note: the machine file's host Adam rate was swept over ")
        j=$(python3 -c 'import glob, json, sys
f = sorted(glob.glob(sys.argv[1] + "/search_*.json"))[-1]
print(int("calibration_note" in json.load(open(f))["search"]))' "$PR_WORK/$res" 2>/dev/null)
        notes+="$res:$n$s$j "
    done
    if [ -n "$shard" ] && [ "$notes" = "res1gpu:111 res1reg:000 res1regs:111 res1f1:000 " ]; then
        pr_pass "a GPU machine's host Adam swept over a region more than 2x off the model's shard ($shard M a rank): --predict and --search say so (and the search's JSON); at the shard, or on the CPU backend, not"
    else
        pr_fail "the calibrated region against the shard" "shard '$shard', notes $notes"
    fi
    # micro-batches after the first bring each layer's sum so far up on the collectives' stream,
    # behind its reduce-scatter, on N ranks (layer_work_add_earlier): with the collectives
    # bounding the step, two micro-batches take longer than twice one by a good part of those
    # copies (the h2d busy time two add beyond twice one's), which hold that stream; walked
    # beside it, as before, they took less than twice one (the engines' errors on two H200s at
    # 4 micro-batches: -9..-16% so)
    for e in l2l "stronghold -w 1 --clip-speculate 0" zero-infinity; do
        lr=$(pr_rows res1copies PR1 "-m $e --ranks 2 -l 16 --global-batch 4" "-m $e --ranks 2 -l 16 --global-batch 8" |
             python3 -c "$PR_PY"'
one, two = (rows + ["", ""])[:2]
landing = busy(two, "h2d") - 2 * busy(one, "h2d")
bound = "bound: collectives" in one and "bound: collectives" in two
ok = len(rows) == 2 and bound and landing > 0 and ms(two) - 2 * ms(one) >= 0.3 * landing
print("ok" if ok else "bad: %s ms against twice %s, landings %.1f ms (%s)" % (ms(two), ms(one), landing, rows))')
        if [ "$lr" = ok ]; then
            pr_pass "$e on 2 ranks, 2 micro-batches: each layer's sum so far comes up on the collectives' stream, after its reduce-scatter"
        else
            pr_fail "$e micro-batch landing on the collectives' stream" "$lr"
        fi
    done
    # one rank: the sum so far comes up on another copy engine than the fetches; where two
    # upward copies at once move no more than one (up2_h2d_gbs = h2d_gbs: one link), its time is
    # the link's too, and with the copies bounding the step (res1link against res1free, every
    # copy rate alike) two micro-batches take longer than where a second engine adds a whole
    # copy's bandwidth (up2 twice h2d), with the same copies' busy time; one micro-batch has no
    # landing, and is the same (l2l: its steps are the link's busy time either way, each fetch
    # waiting for the one layer slot: not shorter)
    for e in l2l "stronghold -w 1 --clip-speculate 0" zero-infinity; do
        ll=$( (pr_rows res1free PR1 "-m $e -l 16 --global-batch 2" "-m $e -l 16 --global-batch 4"
               pr_rows res1link PR1 "-m $e -l 16 --global-batch 2" "-m $e -l 16 --global-batch 4") |
             LONGER=$([ "$e" = l2l ] && echo 1.0 || echo 1.02) python3 -c "$PR_PY"'
import os
free1, free2, link1, link2 = (rows + [""] * 4)[:4]
ok = len(rows) == 4 and ms(link1) == ms(free1) and ms(link2) >= float(os.environ["LONGER"]) * ms(free2) and \
     abs(busy(link2, "h2d") - busy(free2, "h2d")) <= 0.2 and busy(free2, "h2d") > 0
print("ok" if ok else "bad: " + " / ".join(rows))')
        if [ "$ll" = ok ]; then
            pr_pass "$e on one rank, 2 micro-batches: each layer's sum so far takes the upward link's time beside the fetches where a second copy engine adds no bandwidth (up2_h2d_gbs), not where it does"
        else
            pr_fail "$e micro-batch landing on one link" "$ll"
        fi
    done
    # ZeRO-3's gathers and reduce-scatters run on two streams at once: with the collectives
    # bounding the step, it is shorter than their summed time (which bounds nothing), and at least
    # half of it (the busier stream's); the printed roofline counts that half
    z3=$(pr_rows res1copies PR1 "-m megatron-lm --ranks 2 --zero-stage 3 -l 16 --global-batch 8" | python3 -c "$PR_PY"'
import re
r = (rows + [""])[0]
coll = busy(r, "collectives")
roof = float(re.search(r"roofline ([0-9.]+)", r).group(1)) if "roofline" in r else 0
ok = len(rows) == 1 and "bound: collectives" in r and 0.5 * coll <= ms(r) < 0.99 * coll and roof >= 0.5 * coll - 0.1 and roof < coll
print("ok" if ok else "bad: %s" % rows)')
    if [ "$z3" = ok ]; then
        pr_pass "megatron-lm ZeRO-3 on 2 ranks, collectives bounding: its two streams' summed time is not a bound, the busier one's is"
    else
        pr_fail "ZeRO-3's two collective streams" "$z3"
    fi
fi

# --offload nvme: --calibrate with it measures the disk tier at --nvme-dir (an entry per
# directory); zero-infinity and stronghold are then modelled with their disk traffic, and a
# directory not calibrated is named
mkdir -p "$PR_WORK/nvme"
(cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate -m zero-infinity "${PR_SHAPE[@]}" --offload nvme --nvme-dir "$PR_WORK/nvme" \
    --results res >nv.out 2>&1)
rc=$?
nv=$(pr_rows res PR_SHAPE "-m zero-infinity --offload nvme --nvme-dir $PR_WORK/nvme" \
         "-m stronghold -w 1 --offload nvme --nvme-dir $PR_WORK/nvme" "-m zero-infinity --offload nvme --nvme-dir $PR_WORK")
if [ $rc -eq 0 ] && python3 - "$PR_WORK/res" "$PR_WORK/nvme" "$nv" <<'PY'
import glob, json, re, sys
d = json.load(open(glob.glob(sys.argv[1] + "/machine_*.json")[0]))
disks = [e for e in d.get("disks", []) if e.get("dir") == sys.argv[2]]
rows = sys.argv[3].splitlines()
ok = len(disks) == 1 and disks[0]["read_gbs"] > 0 and disks[0]["write_gbs"] > 0 and len(rows) == 3 and \
     all(re.search(r"disk ([0-9.]+)", r) and float(re.search(r"disk ([0-9.]+)", r).group(1)) > 0 for r in rows[:2]) and \
     "not modelled yet: no disk calibrated at --nvme-dir" in rows[2]
sys.exit(0 if ok else 1)
PY
then
    pr_pass "--calibrate --offload nvme measures the disk tier at --nvme-dir; zero-infinity and stronghold on disk modelled; another directory named"
else
    pr_fail "nvme calibration and prediction" "exit $rc: $(tail -n 2 "$PR_WORK/nv.out") / $nv"
fi

# bf16: --calibrate measures the host Adam that also writes the bf16 working copy, and a bf16
# run's host Adam is costed at that rate (a copy of the file where it is 3x the fp32 rate: the
# bf16 prediction's host Adam 3x the fp32 one's, at l400 where the host is loaded too little to
# move the rates); a file without it (older) costs it as fp32
(cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate "${PR_SHAPE[@]}" --dtype bf16 --results res >calbf.out 2>&1)
rc=$?
mkdir -p "$PR_WORK/resbf3" "$PR_WORK/resbf0"
python3 - "$PR_FILE" "$PR_WORK" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
r = d["rates"]
ok = r.get("host_adam_bf16_ms_per_mparam", 0) > 0
r["host_adam_bf16_ms_per_mparam"] = 3 * r["host_adam_ms_per_mparam"]
json.dump(d, open(os.path.join(sys.argv[2], "resbf3", os.path.basename(sys.argv[1])), "w"))
del r["host_adam_bf16_ms_per_mparam"]
json.dump(d, open(os.path.join(sys.argv[2], "resbf0", os.path.basename(sys.argv[1])), "w"))
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || rc=1
pr_flat resbf3 "$(ls "$PR_WORK"/resbf3/machine_*.json | head -n 1)"
pr_flat resbf0 "$(ls "$PR_WORK"/resbf0/machine_*.json | head -n 1)"
bf=$( (pr_rows resbf3 PR_SHAPE "-m zero-offload -l 400" "-m zero-offload -l 400 --dtype bf16"
       pr_rows resbf0 PR_SHAPE "-m zero-offload -l 400 --dtype bf16") | python3 -c "$PR_PY"'
a = [busy(r, "host adam") for r in rows]
ok = len(rows) == 3 and a[0] > 0 and abs(a[1] / a[0] - 3) < 0.15 and abs(a[2] / a[0] - 1) < 0.05
print("ok" if ok else "bad: " + " / ".join(rows))')
if [ $rc -eq 0 ] && [ "$bf" = ok ]; then
    pr_pass "bf16: the host Adam writing the working copy calibrated, and a bf16 run costed at its rate (older files: as fp32)"
else
    pr_fail "bf16 host Adam rate" "exit $rc: $bf $(tail -n 2 "$PR_WORK/calbf.out")"
fi

# zero-offload --dpu: the same host Adam, under the next step instead of after the backward:
# never slower than without
pr_flat resflat "$PR_FILE"
dpu=$(pr_rows resflat PR_SHAPE "-m zero-offload -l 64" "-m zero-offload --dpu -l 64" | python3 -c "$PR_PY"'
adam = [busy(r, "host adam") for r in rows]
ok = len(rows) == 2 and ms(rows[1]) <= ms(rows[0]) and abs(adam[1] - adam[0]) <= 0.1 * adam[0] + 0.1
print("ok" if ok else "bad: " + " / ".join(rows))')
if [ "$dpu" = ok ]; then
    pr_pass "zero-offload --dpu is modelled: the same host Adam, under the next step, never slower"
else
    pr_fail "zero-offload --dpu prediction" "$dpu"
fi

# the host Adam beside the GPU's compute (host_adam_under_compute, calibrated): x2 in a copy of
# the flat file slows zero-offload's update, with and without --dpu, by the share of it the
# compute runs beside: at most 2x, and more than 1.05x where the compute bounds the step (these
# do: the update is small); megatron-lm, with no host Adam, is unchanged.  (Which of the two
# the compute runs beside more depends on the calibrated times.)  And --calibrate wrote the
# factor, at least 1.
pr_with_rate resunder2 "$(ls "$PR_WORK"/resflat/machine_*.json | head -n 1)" host_adam_under_compute 2.0
under=$( (pr_rows resflat PR_SHAPE "-m zero-offload -l 64" "-m zero-offload --dpu -l 64" "-m megatron-lm -l 8"
    pr_rows resunder2 PR_SHAPE "-m zero-offload -l 64" "-m zero-offload --dpu -l 64" "-m megatron-lm -l 8") |
    python3 -c "$PR_PY"'
import json
a = [busy(r, "host adam") for r in rows]
w = json.load(open(sys.argv[1]))["rates"].get("host_adam_under_compute", 0)
ok = (len(rows) == 6 and w >= 1 and all(x > 0 for x in a[:2] + a[3:5]) and ms(rows[2]) == ms(rows[5])
      and all(a[j] <= a[j + 3] <= 2 * a[j] + 0.2 for j in (0, 1)) and max(a[3] / a[0], a[4] / a[1]) > 1.05)
print("ok" if ok else "bad: file %s; " % w + " / ".join(rows))' "$PR_FILE")
if [ "$under" = ok ]; then
    pr_pass "the host Adam beside the compute: calibrated (at least 1), and x2 slows zero-offload's update (with and without --dpu) by the share the compute runs beside, megatron-lm unchanged"
else
    pr_fail "host Adam beside the compute" "$under"
fi

# gemini on 2 ranks (same file, the compute beside collectives twice as slow): none is
# megatron-lm ZeRO-3's step; naive adds the slower of its copies home (m = 2 shards of master,
# m, v per rank, at the calibrated device-to-host rate) and its sends to the peer (at the
# all-gather's rate), which run after the step, beside no compute; interleave hides them in a
# step longer than they are, but its sends slow the compute beside them (by at most their
# time, at x2: less than naive costs); a persistent checkpoint needs its directory calibrated
if needs_mpi "gemini predictions at 2 ranks" "$PR_BIN"; then
    g2=("${PR1[@]}" --ranks 2 -l 400)
    gm=$(pr_rows res1f2 g2 "-m megatron-lm --zero-stage 3" "-m gemini --gemini-mode none" "-m gemini --gemini-mode naive" \
                 "-m gemini --gemini-mode interleave" "-m gemini --ckpt-dir /tmp" \
                 "-m gemini --gemini-mode naive --gemini-every 4" | python3 -c "$PR_PY"'
t = [ms(r) for r in rows]
d2h = [busy(r, "d2h") for r in rows]
net = [busy(r, "collectives") for r in rows]
sends = net[3] - net[1]
# naive waits for the slower of its copies home and its sends over the network; every 4
# iterations, a quarter of that per step
ok = len(rows) == 6 and t[0] == t[1] and d2h[1] == 0 and d2h[2] > 0 and net[2] > net[1] and \
     abs(t[2] - t[1] - max(d2h[2], net[2] - net[1])) <= 0.2 and sends > 0 and \
     0 < t[3] - t[1] <= sends + 0.3 and t[3] < t[2] and \
     "not modelled yet: no checkpoint directory calibrated at --ckpt-dir /tmp" in rows[4] and \
     abs((t[5] - t[1]) - (t[2] - t[1]) / 4) <= 0.2
print("ok" if ok else "bad: " + " / ".join(rows))')
    if [ "$gm" = ok ]; then
        pr_pass "gemini --ranks 2: none = ZeRO-3's step, naive adds its copies home or its sends (every 4 iterations: a quarter of it), interleave hides them but for the compute they slow; --ckpt-dir needs its directory calibrated"
    else
        pr_fail "gemini predictions" "$gm"
    fi
    # the persistent checkpoint (--ckpt-dir, every K): --calibrate -m gemini --ckpt-dir DIR
    # measures the state's checksums and copy home and the file's write at DIR (an entry per
    # directory); the prediction is the mean iteration: none's step plus (home + write) / K,
    # naive's without the home part (its copy is there); a 2-rank run's checkpoints took what
    # the model says within 10x (a check of the arithmetic: on two shared cores, busy with
    # other work, the syncs and checksums vary several times over)
    mkdir -p "$PR_WORK/ckpt"
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate -m gemini --ckpt-dir "$PR_WORK/ckpt" "${PR1[@]}" \
        --results res1 >ck.out 2>&1)
    rc=$?
    # (then --calibrate --ranks 2 -m gemini --ckpt-dir measures both ranks writing at once, which
    # a 2-rank prediction takes: a copy of the file whose 2-rank entry says a 1 MB/s disk
    # predicts the step seconds longer)
    g3=("${PR1[@]}" --ranks 2 -l 16)
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" --calibrate --ranks 2 -m gemini --ckpt-dir "$PR_WORK/ckpt" "${PR1[@]}" \
        --results res1 >ck2.out 2>&1) || rc=1
    grep -q "every rank at once, each: the state home" "$PR_WORK/ck2.out" || rc=1
    mkdir -p "$PR_WORK/res1slow"
    python3 - "$(ls "$PR_WORK"/res1/machine_*.json | head -n 1)" "$PR_WORK/res1slow" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
for e in d["collectives"]:
    if "checkpoint_dir" in e:
        e["checkpoint_dir"]["write_gbs"] = 0.001
json.dump(d, open(os.path.join(sys.argv[2], os.path.basename(sys.argv[1])), "w"))
PY
    slow=$(pr_rows res1slow g3 "-m gemini --gemini-mode none --ckpt-dir $PR_WORK/ckpt --ckpt-every 2")
    ck=$(pr_rows res1 g3 "-m gemini --gemini-mode none" "-m gemini --gemini-mode none --ckpt-dir $PR_WORK/ckpt --ckpt-every 2" \
                 "-m gemini --gemini-mode none --ckpt-dir $PR_WORK/ckpt --ckpt-every 4" \
                 "-m gemini --gemini-mode naive" "-m gemini --gemini-mode naive --ckpt-dir $PR_WORK/ckpt --ckpt-every 2")
    (cd "$PR_WORK" && timeout 300 "$PR_BIN" -m gemini --gemini-mode none --ckpt-dir "$PR_WORK/ckpt" --ckpt-every 2 \
        "${g3[@]}" --iters 6 --results ckrun >ckrun.out 2>&1)
    krc=$?
    ck_ok=$(CK_DIR="$PR_WORK/ckpt" CK_RES="$PR_WORK/res1" CK_RUN="$PR_WORK/ckrun" python3 -c "$PR_PY"'
import glob, json, os
d = json.load(open(glob.glob(os.environ["CK_RES"] + "/machine_*.json")[0]))
e = [x for x in d.get("checkpoint_dirs", []) if x.get("dir") == os.environ["CK_DIR"]]
w = [c["checkpoint_dir"] for c in d.get("collectives", []) if c["world"] == 2 and "checkpoint_dir" in c]
t = [ms(r) for r in rows]
run = [json.load(open(f)) for f in glob.glob(os.environ["CK_RUN"] + "/*.json")]
took = [i["checkpoint"]["ms"] for r in run for i in r["iterations"] if "checkpoint" in i]
per = 2 * (t[1] - t[0])  # one checkpoint, as predicted
ok = len(e) == 1 and all(e[0][k] > 0 for k in ("home_gbs", "write_ms", "write_gbs")) and len(rows) == 6 and \
     len(w) == 1 and w[0]["dir"] == os.environ["CK_DIR"] and all(w[0][k] > 0 for k in ("home_gbs", "write_ms", "write_gbs")) and \
     ms(rows[5]) > t[1] + 1000 and \
     t[1] > t[0] and abs((t[1] - t[0]) - 2 * (t[2] - t[0])) <= 0.2 and busy(rows[1], "disk") > 0 and \
     0 < t[4] - t[3] < t[1] - t[0] and len(took) == 3 and per / 10 <= sum(took) / len(took) <= 10 * per
print("ok" if ok else "bad: %s %s took %s / " % (e, w, took) + " / ".join(rows))' <<<"$ck"$'\n'"$slow" 2>&1)
    if [ $rc -eq 0 ] && [ $krc -eq 0 ] && [ "$ck_ok" = ok ]; then
        pr_pass "gemini --ckpt-dir: the directory calibrated (one rank, then both writing), each checkpoint's home and write over K (K = 2 twice K = 4), naive without the home part, near a run's"
    else
        pr_fail "gemini --ckpt-dir prediction" "exit $rc/$krc: $ck_ok $(tail -n 2 "$PR_WORK/ck.out") $(tail -n 2 "$PR_WORK/ckrun.out")"
    fi
fi

# broken machine files: one line naming the problem, exit 2
pr_bad() { # what pattern file
    local out rc
    out=$(cd "$PR_WORK" && "$PR_BIN" --predict "${PR_SHAPE[@]}" --machine "$3" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "$2" <<<"$out"; then pr_pass "$1"
    else pr_fail "$1" "exit $rc: $out"
    fi
}
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); del d['rates']['d2h_gbs']; json.dump(d, open(sys.argv[2], 'w'))" \
    "$PR_FILE" "$PR_WORK/missing.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['compute'][0]['layer_fwd_ms'] = 'fast'; json.dump(d, open(sys.argv[2], 'w'))" \
    "$PR_FILE" "$PR_WORK/malformed.json"
printf '{"rates": ' >"$PR_WORK/cut.json"
pr_bad "--machine with a field missing" "rates.d2h_gbs is missing" "$PR_WORK/missing.json"
pr_bad "--machine with a field that is not a number" "compute\[\].layer_fwd_ms is not a positive number" "$PR_WORK/malformed.json"
pr_bad "--machine that is not JSON" "not a JSON object" "$PR_WORK/cut.json"
# (a pair rate is optional, older files have none, but one that is there is checked as any rate)
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['rates']['host_adam_h2d_ms_per_mparam'] = -1; json.dump(d, open(sys.argv[2], 'w'))" \
    "$PR_FILE" "$PR_WORK/bad_pair.json"
pr_bad "--machine with a pair rate that is not a positive number" "rates.host_adam_h2d_ms_per_mparam is not a positive number" "$PR_WORK/bad_pair.json"
pr_bad "--machine that is not there" "No such file or directory" "$PR_WORK/none.json"
# (issue 47: a value that overflowed a prediction printed "inf ms/it", exit 0; another format
# version loaded silently; a file of any size was read whole)
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['compute'][0]['layer_fwd_ms'] = 1e308; json.dump(d, open(sys.argv[2], 'w'))" \
    "$PR_FILE" "$PR_WORK/huge_value.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['aebench_machine'] = 99; json.dump(d, open(sys.argv[2], 'w'))" \
    "$PR_FILE" "$PR_WORK/v99.json"
truncate -s 200M "$PR_WORK/huge.json"
pr_bad "--machine with a value that overflows a prediction" "compute\[\].layer_fwd_ms is 1e+308, outside what any machine measures (1e-09 to 1e+18)" "$PR_WORK/huge_value.json"
pr_bad "--machine of another format version" "format version (aebench_machine) 99, but this aebench reads version 1" "$PR_WORK/v99.json"
pr_bad "--machine of 200 MB" "209715200 bytes, above the limit of 1048576 (1 MiB) for a machine file" "$PR_WORK/huge.json"
rm -f "$PR_WORK/huge.json"
# --machine on a training run: read there (stronghold -w auto sizes its window by it), so one
# with no entry for the run's shape is refused as --predict refuses it, before anything is written
out=$(cd "$PR_WORK" && "$PR_BIN" "${PR_SHAPE[@]}" -h 256 --iters 1 --machine "$PR_FILE" --results "$PR_WORK/notrun" 2>&1)
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "has no entry for h256 heads4 s64 b2 vocab1000 fp32 fp32" <<<"$out" &&
    [ ! -e "$PR_WORK/notrun" ]; then
    pr_pass "--machine on a training run without an entry for its shape: exit 2, one line, nothing written"
else
    pr_fail "--machine on a training run without an entry" "exit $rc: $out"
fi
out=$(cd "$PR_WORK" && "$PR_BIN" --predict "${PR_SHAPE[@]}" -h 256 --machine "$PR_FILE" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "has no entry for h256 heads4 s64 b2 vocab1000 fp32 fp32" <<<"$out"; then
    pr_pass "--predict for a shape the machine file has no entry for says which, exit 2"
else
    pr_fail "--predict without an entry" "exit $rc: $out"
fi
rm -rf "$PR_WORK"
