#!/usr/bin/env bash
# --predict against measured runs on one GPU (issue 16, part 3), in one call: calibrate the
# machine at h2048 heads16 s1024 b4 (TF32, and bf16 for megatron-lm), then for each run the
# prediction and the measured median ms/iteration, side by side: megatron-lm l16 and l32 (TF32,
# bf16); case 3 at l32 (every engine, stronghold -w 15); case 5 (stronghold l32, windows 2, 8,
# 14); case 4 (stronghold -w 15 at l16, 48, 64).  The machine file comes back too.
#   bash bench/predict_gpu.sh "$OUT"        ITERS (default 6)
# RANKS=N (the N-GPU machines: nvidia-h100-x2, nvidia-h200-x2): built with MPI and NCCL
# (bench/dp_env.sh), calibrated on one rank and then at N ranks (the collectives), and every
# engine at l32 on N ranks (megatron-lm at ZeRO stages 0 and 3, stronghold -w 15 and -w auto),
# and gemini's three modes at case 6's shape (l16, global batch 32); no -w auto check.
# CASE2=1 (one GPU): case 2's runs instead, each baseline at its largest size under the V100
# budgets and stronghold -w auto there.
# RUNS="run; run; ..." (one GPU): those runs instead (each "engine options"), e.g. the slower
# engines at b 1, 2 and 4 in TF32 and bf16; the machine is calibrated at every micro-batch of a
# global batch of 4 (b 1, 2, 4) in both dtypes, so any -b of those and either dtype predicts.
# SHAPE="-h 4096 --heads 32" (one GPU, with RUNS): the width the machine is calibrated at and
# every run trains at (default -h 2048); CAL_GB=N: calibrated at every micro-batch of a global
# batch of N (default 4); CAL_DTYPES="bf16": calibrated in those only (default "tf32 bf16").
# The measured figure is the run's steady median (its JSON's steady_median_ms: the engine's own
# warm-up steps left out, as --search --verify measures), and its median over all steps beside.
set -uo pipefail
dest=${1:-bench/results/latest}
ranks=${RANKS:-1}
if [ "$ranks" -gt 1 ]; then
    source bench/dp_env.sh # (builds aebench with MPI and NCCL; sets $out, $t0)
else
    out=$(mktemp -d /tmp/aebench-predict.XXXXXX)
    source bench/deps_env.sh
fi
mkdir -p "$dest"
finish() {
    tar czf "$dest/bench.tgz" -C "$out" . 2>/dev/null
    cp "$out"/table.md "$out"/res/machine_*.json "$dest"/ 2>/dev/null
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ "$ranks" -le 1 ]; then
    t0=$(date +%s)
    make -j16 CUDA=1 MPI=0 aebench >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
fi
read -r -a width <<<"${SHAPE:--h 2048}"
shape=(--device cuda "${width[@]}" -b 4)
[ -n "${RUNS:-}" ] && shape=(--device cuda "${width[@]}") # (RUNS: each run gives its -b)
# (every micro-batch of a global batch of CAL_GB in one call: b 1, 2, 4 of 4)
cal=(--device cuda "${width[@]}" -b "${CAL_GB:-4}" --global-batch "${CAL_GB:-4}")
cal_dtypes=${CAL_DTYPES:-tf32 bf16}
[ "$ranks" -gt 1 ] && cal_dtypes=tf32
: >"$out/calibrate.txt"
for dt in $cal_dtypes; do
    dtype=()
    [ "$dt" = bf16 ] && dtype=(--dtype bf16)
    ./aebench --calibrate "${cal[@]}" "${dtype[@]}" --results "$out/res" | tee -a "$out/calibrate.txt"
done
if [ "$ranks" -gt 1 ]; then
    ./aebench --calibrate --ranks "$ranks" "${shape[@]}" --results "$out/res" | tee -a "$out/calibrate.txt"
    shape+=(--ranks "$ranks")
fi
echo "calibrated: $(( $(date +%s) - t0 )) s"
[ "$ranks" -gt 1 ] && runs=("megatron-lm -l 32 --zero-stage 0" "megatron-lm -l 32 --zero-stage 3" "zero-offload -l 32"
      "l2l -l 32" "zero-infinity -l 32" "stronghold -l 32 -w 15" "stronghold -l 32 -w auto"
      "gemini -l 16 --global-batch 32 --gemini-mode none --iters 10" "gemini -l 16 --global-batch 32 --gemini-mode naive --iters 10"
      "gemini -l 16 --global-batch 32 --gemini-mode interleave --iters 10") || runs=("megatron-lm -l 16" "megatron-lm -l 32" "megatron-lm -l 16 --dtype bf16" "megatron-lm -l 32 --dtype bf16"
      "l2l -l 32" "zero-offload -l 32" "zero-infinity -l 32" "stronghold -l 32 -w 15"
      "stronghold -l 32 -w 2" "stronghold -l 32 -w 8" "stronghold -l 32 -w 14"
      "stronghold -l 16 -w 15" "stronghold -l 48 -w 15" "stronghold -l 64 -w 15" "stronghold -l 80 -w 15"
      "stronghold -l 92 -w 15")
# CASE2=1: instead, case 2 under the V100 budgets: each baseline at its largest size (the plan
# bound of --find-max --dry-run, as bench/offload_gpu.sh finds it) and stronghold -w auto there
if [ -n "${CASE2:-}" ]; then
    budget="--gpu-mem-limit 32G --cpu-mem-limit 90G"
    runs=()
    for e in megatron-lm l2l zero-offload zero-infinity; do
        l=$(./aebench --device cuda -h 2048 -b 4 -m $e --find-max --dry-run $budget --results "$out/probes" 2>&1 |
            grep -oE 'fits up to l[0-9]+' | grep -oE '[0-9]+$' | tail -n 1)
        [ -n "$l" ] || continue
        runs+=("$e -l $l $budget")
        printf '%s\n' "${runs[@]}" | grep -q "^stronghold -l $l " || runs+=("stronghold -l $l -w auto $budget")
    done
    WAUTO_LAYERS=" " # (no -w auto check)
fi
: >"$out/rows.txt"
[ -n "${ONLY_WAUTO:-}" ] && runs=() # (ONLY_WAUTO=1: the -w auto check alone)
if [ -n "${RUNS:-}" ]; then
    IFS=';' read -r -a runs <<<"$RUNS"
    WAUTO_LAYERS=${WAUTO_LAYERS:-" "}
fi
[ "$ranks" -gt 1 ] && [ -z "${WAUTO_LAYERS:-}" ] && WAUTO_LAYERS=" " # (no -w auto check on N ranks)
for r in "${runs[@]}"; do
    read -r m rest <<<"$r"
    p=$(./aebench --predict -m $m $rest "${shape[@]}" --results "$out/res" 2>&1 | grep "^predict " | head -n 1)
    SECONDS=0
    # (the run's own arguments last: a gemini run's --iters wins over the default)
    timeout 240 ./aebench -m $m "${shape[@]}" --iters "${ITERS:-6}" --log-interval "${ITERS:-6}" $rest \
        --results "$out/runs" >"$out/run.txt" 2>&1
    meas=$(awk '/done:/ {print $3; exit}' "$out/run.txt")
    # the run's steady median (the engine's warm-up left out), and its peak GPU and host bytes
    # (its budgets' accounting), as --predict prints a plan
    peak=$(python3 - "$out/runs" <<'PY'
import glob, json, os, sys
f = max(glob.glob(os.path.join(sys.argv[1], "*.json")), key=os.path.getmtime)
j = json.load(open(f)); m = j["memory"]; s = j.get("summary", {})
st = s.get("steady_median_ms")
print((f"steady {st:.1f} ms from it {s.get('steady_from_iteration')} | " if st else "") +
      f"peak GPU {m['gpu']['peak_bytes'] / 2**30:.3g} GiB, host {m['host']['peak_bytes'] / 2**30:.3g} GiB")
PY
)
    echo "$r | $p | measured ${meas:-failed} ms ($SECONDS s) | $peak" | tee -a "$out/rows.txt"
done
python3 - "$out/rows.txt" <<'PY' | tee "$out/table.md"
import re, statistics, sys
print("| run | predicted ms | bound | measured ms (steady) | all steps ms | error | planned GPU, host GiB | measured peak GPU, host GiB |")
print("|---|---|---|---|---|---|---|---|")
errs = []
for line in open(sys.argv[1]):
    run = line.split("|")[0].strip()
    p = re.search(r"([0-9.]+) ms/it", line); b = re.search(r"bound: ([a-z ]+) \|", line)
    m = re.search(r"measured ([0-9.]+) ms", line)
    st = re.search(r"steady ([0-9.]+) ms", line)
    allm = m.group(1) if m else ""
    if st: m = st
    pl = re.search(r"plan GPU ([0-9.]+) GiB, host ([0-9.]+) GiB", line)
    pk = re.search(r"peak GPU ([0-9.]+) GiB, host ([0-9.]+) GiB", line)
    mem = (f"{pl.group(1)}, {pl.group(2)}" if pl else "", f"{pk.group(1)}, {pk.group(2)}" if pk else "")
    if not p or not m:
        print(f"| {run} | {p.group(1) if p else 'none'} | | {m.group(1) if m else 'failed'} | {allm} | | {mem[0]} | {mem[1]} |"); continue
    e = (float(p.group(1)) - float(m.group(1))) / float(m.group(1)); errs.append(abs(e))
    print(f"| {run} | {float(p.group(1)):.1f} | {b.group(1) if b else ''} | {float(m.group(1)):.1f} | {allm} | {100 * e:+.1f}% | {mem[0]} | {mem[1]} |")
if errs:
    print(f"\nmedian |error| {100 * statistics.median(errs):.1f}%, worst {100 * max(errs):.1f}% over {len(errs)} runs")
PY
# -w auto with the machine file (issue 16: within 3% of the best window measured), under a
# 32 GiB GPU budget (the V100's), at WAUTO_LAYERS (default 32; at 48 not every layer fits):
# the windows by hand, then auto.
machine=$(ls "$out"/res/machine_*.json | head -n 1)
for wl in ${WAUTO_LAYERS:-32}; do
budget=(-l "$wl" --gpu-mem-limit 32G)
{
    echo "| stronghold l$wl, 32G GPU | ms/it | layout |"
    echo "|---|---|---|"
    for w in ${WAUTO_WINDOWS:-8 12 16 20 24} auto; do
        timeout 240 ./aebench -m stronghold -w $w "${budget[@]}" "${shape[@]}" --machine "$machine" --iters "${ITERS:-6}" \
            --log-interval "${ITERS:-6}" --results "$out/wauto" >"$out/wauto_$w.txt" 2>&1
        layout=$(grep -oE "window [0-9]+ resident \+ [0-9]+ slots|[0-9]+ resident layers, [0-9]+ slots|model predicts [0-9.]+ ms with [0-9]+ resident \+ [0-9]+ slots" "$out/wauto_$w.txt" | tail -n 1)
        echo "| -w $w | $(awk '/done:/ {print $3; exit}' "$out/wauto_$w.txt") | $layout |"
    done
} | tee "$out/wauto_l$wl.md"
cat "$out/wauto_l$wl.md" >>"$out/table.md"
done
echo "total: $(( $(date +%s) - t0 )) s"
