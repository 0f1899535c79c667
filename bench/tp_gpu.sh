#!/usr/bin/env bash
# megatron-lm's tensor parallelism (--tp, --sequence-parallel) and --grad-reduce-dtype on the
# two-GPU machine (issues 49 and 50), in one call:
#  1. correctness on the GPU, l8 h1024 heads 16 s512 b2 (--global-batch 16), against one rank:
#     --tp 2, --tp 2 --sequence-parallel (fp32 math), --tp 2 bf16: the relative loss and
#     gradient-norm differences per iteration (only the split sums' order differs) and each
#     rank's peak against its plan; DDP 2 bf16 with --grad-reduce-dtype bf16 against fp32 (step
#     1's loss equal, the collectives' bytes);
#  2. the layouts at l32 h2048 heads 16 b4 bf16, global batch 32: one GPU, DDP 2 (ZeRO-0 and
#     ZeRO-3), DDP 2 with bf16 reduction, --tp 2, --tp 2 --sequence-parallel, --pp 2 (8
#     micro-batches), and stronghold / zero-infinity on one GPU: samples/s, TFLOP/s, peak
#     against plan (table.md);
#  3. a model one H200 cannot hold but two can: l48 h4096 heads 32 (9.7 B parameters) bf16 b2,
#     --tp 2 --sequence-parallel and --pp 2 against stronghold on one GPU;
#  4. the anchor: Megatron-Core 0.19.0's GPT (bench/mcore_gpu.py, megatron/core carried in
#     .deps/mcore: `git archive core_v0.19.0 megatron/core` of NVIDIA/Megatron-LM) at each of
#     the layouts of 2, beside them in the same call, and aebench/Megatron-Core per layout.
# On a one-GPU machine only the one-GPU rows and anchors run (the script's check there).
# Usage on the device machine, .deps carried: dest=DIR bash bench/tp_gpu.sh
# PARTS (default "check big huge huge_tp2"; huge_rest: the 9.7 B model's DP2 ZeRO-3, zero-infinity
# and stronghold rows, predicted from a calibration in the same call) picks which of 1, 2 + 4, 3 + 4 run (huge_tp2: the 9.7 B
# model's --tp 2 without sequence parallelism and its anchor; sp and huge_sp: only the
# --tp 2 --sequence-parallel row and its anchor, of 2 and of 3): one call each where a
# call's time limit cannot hold all three.
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/dp_env.sh

# near TAG_A TAG_B: per-iteration relative differences of loss and grad norm, rank 0's peak vs plan
near() {
    python3 - "$out/res_$1" "$out/res_$2" "$1" "$2" <<'PY' | tee -a "$out/table.md"
import glob, json, sys
def load(d):
    j = json.load(open(sorted(glob.glob(d + "/*.json"))[-1]))
    return [(i["loss"], i["grad_norm"], i.get("bytes_collectives", 0)) for i in j["iterations"]], j["memory"]
(a, _), (b, mb) = load(sys.argv[1]), load(sys.argv[2])
dl = max(abs(x[0] - y[0]) / abs(x[0]) for x, y in zip(a, b))
dg = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, b))
ranks = mb.get("per_rank", [])
planned = all(r["gpu_peak_bytes"] == r["gpu_planned_bytes"] for r in ranks) if ranks else mb["gpu"]["peak_bytes"] == mb["gpu"]["planned_bytes"]
print(f"| {sys.argv[4]} vs {sys.argv[3]} | losses within {dl:.2e} | grad norms within {dg:.2e} | step 1 loss equal: "
      f"{a[0][0] == b[0][0]} | bytes {b[1][2]:.0f} vs {a[1][2]:.0f} | peaks = plans: {planned} |")
PY
}

gpus=$(nvidia-smi -L | grep -c '^GPU')
parts=" ${PARTS:-check big huge huge_tp2} "
want() { [[ $parts == *" $1 "* ]]; }
# anchor TAG NP ARGS...: Megatron-Core's GPT at that layout, under torchrun (bench/mcore_gpu.py);
# its JSON line in $out/anchor_TAG.json
anchor() {
    local tag=$1 np=$2
    shift 2
    PYTHONPATH=$PWD/.deps/mcore${PYTHONPATH:+:$PYTHONPATH} timeout 900 python3 -m torch.distributed.run --standalone \
        --nproc_per_node "$np" bench/mcore_gpu.py --tag "$tag" "$@" >"$out/anchor_$tag.txt" 2>&1
    grep '^{"anchor"' "$out/anchor_$tag.txt" | tail -n 1 | tee "$out/anchor_$tag.json"
    [ -s "$out/anchor_$tag.json" ] || tail -n 15 "$out/anchor_$tag.txt"
}

if [ "$gpus" -ge 2 ] && want check; then
small=(-m megatron-lm -l 8 -h 1024 --heads 16 --seq 512 -b 2 --global-batch 16 --iters 8 --log-interval 4)
run one_fp32 1 "${small[@]}" --math fp32
run tp2_fp32 2 "${small[@]}" --math fp32 --tp 2
run tp2sp_fp32 2 "${small[@]}" --math fp32 --tp 2 --sequence-parallel
near one_fp32 tp2_fp32
near one_fp32 tp2sp_fp32
run one_bf16 1 "${small[@]}" --dtype bf16
run tp2_bf16 2 "${small[@]}" --dtype bf16 --tp 2
near one_bf16 tp2_bf16
run ddp2_bf16 2 "${small[@]}" --dtype bf16
run ddp2_bf16r 2 "${small[@]}" --dtype bf16 --grad-reduce-dtype bf16
near ddp2_bf16 ddp2_bf16r
fi

big=(-l 32 -h 2048 --heads 16 --seq 1024 -b 4 --global-batch 32 --dtype bf16 --iters 16 --log-interval 8)
if want big; then
run big_one 1 -m megatron-lm "${big[@]}"
run big_stronghold 1 -m stronghold "${big[@]}" -w auto
run big_zinf 1 -m zero-infinity "${big[@]}"
mc=(-l 32 -H 2048 --heads 16 --seq 1024 -b 4 --global-batch 32 --recompute full --iters 8 --warmup 3)
anchor big_one 1 "${mc[@]}"
if [ "$gpus" -ge 2 ]; then
    run big_ddp2 2 -m megatron-lm "${big[@]}"
    run big_ddp2_bf16r 2 -m megatron-lm "${big[@]}" --grad-reduce-dtype bf16
    run big_zero3 2 -m megatron-lm "${big[@]}" --zero-stage 3
    run big_tp2 2 -m megatron-lm "${big[@]}" --tp 2
    run big_tp2sp 2 -m megatron-lm "${big[@]}" --tp 2 --sequence-parallel
    run big_pp2 2 -m megatron-lm "${big[@]}" --pp 2
    anchor big_ddp2 2 "${mc[@]}"
    anchor big_tp2 2 "${mc[@]}" --tp 2
    anchor big_tp2sp 2 "${mc[@]}" --tp 2 --sequence-parallel
    anchor big_pp2 2 "${mc[@]}" --pp 2
fi
fi
if [ "$gpus" -ge 2 ] && want sp; then
    run big_tp2sp 2 -m megatron-lm "${big[@]}" --tp 2 --sequence-parallel
    anchor big_tp2sp 2 -l 32 -H 2048 --heads 16 --seq 1024 -b 4 --global-batch 32 --recompute full --iters 8 --warmup 3 \
        --tp 2 --sequence-parallel
fi
# the 9.7 B model, aebench's runs and Megatron-Core's (parts huge and huge_tp2)
huge=(-l 48 -h 4096 --heads 32 --seq 1024 -b 2 --global-batch 16 --dtype bf16 --iters 6 --log-interval 3)
mh=(-l 48 -H 4096 --heads 32 --seq 1024 -b 2 --global-batch 16 --recompute full --iters 4 --warmup 2)
if [ "$gpus" -ge 2 ] && want huge; then
    run huge_tp2sp 2 -m megatron-lm "${huge[@]}" --tp 2 --sequence-parallel
    run huge_pp2 2 -m megatron-lm "${huge[@]}" --pp 2
    run huge_stronghold 1 -m stronghold "${huge[@]}" -w auto
    anchor huge_tp2sp 2 "${mh[@]}" --tp 2 --sequence-parallel
    anchor huge_pp2 2 "${mh[@]}" --pp 2
fi
# (Megatron-Core's own torch LayerNorm refuses --sequence-parallel without Transformer Engine or
# Apex, which the machine has not; bench/mcore_gpu.py gives it a torch LayerNorm marked as Apex
# marks its own.  Its TP2 without sequence parallelism beside aebench's: the 9.7 B model's
# other tensor-parallel anchor.)
if [ "$gpus" -ge 2 ] && want huge_sp; then
    run huge_tp2sp 2 -m megatron-lm "${huge[@]}" --tp 2 --sequence-parallel
    anchor huge_tp2sp 2 "${mh[@]}" --tp 2 --sequence-parallel
fi
if [ "$gpus" -ge 2 ] && want huge_tp2; then
    run huge_tp2 2 -m megatron-lm "${huge[@]}" --tp 2
    anchor huge_tp2 2 "${mh[@]}" --tp 2
fi
# (part huge_rest) the 9.7 B model's other rows: DP2 ZeRO-3 and zero-infinity on one GPU, with
# stronghold on one GPU again; each predicted from a machine file calibrated in the same call
# (one rank and two, at -l 48 -b 2), beside what it measured: huge_rest.md
if [ "$gpus" -ge 2 ] && want huge_rest; then
    cal=(-h 4096 --heads 32 --seq 1024 -b 2 --global-batch 16 --dtype bf16 -l 48)
    ./aebench --calibrate --device cuda "${cal[@]}" --results "$out/cal" >"$out/calibrate.txt" 2>&1 &&
        ./aebench --calibrate --device cuda --ranks 2 "${cal[@]}" --results "$out/cal" >>"$out/calibrate.txt" 2>&1 ||
        tail -n 5 "$out/calibrate.txt"
    grep -E "every rank at once|wrote" "$out/calibrate.txt"
    rows=("huge_zero3 2 -m megatron-lm --zero-stage 3" "huge_zinf 1 -m zero-infinity" "huge_stronghold 1 -m stronghold -w auto")
    for r in "${rows[@]}"; do
        read -r tag np eng <<<"$r"
        read -r -a e <<<"$eng"
        run "$tag" "$np" "${e[@]}" "${huge[@]}"
    done
    machine=$(ls "$out"/cal/machine_*.json 2>/dev/null | head -n 1)
    {
        echo "| layout | measured ms/step | samples/s | GPU peak = plan | predicted ms (error) |"
        echo "|---|---|---|---|---|"
        for r in "${rows[@]}"; do
            read -r tag np eng <<<"$r"
            read -r -a e <<<"$eng"
            ranks=()
            [ "$np" -gt 1 ] && ranks=(--ranks "$np")
            pred=$([ -n "$machine" ] && ./aebench --predict --device cpu --machine "$machine" --vocab 50257 "${e[@]}" \
                "${huge[@]}" "${ranks[@]}" 2>&1 | grep -oE "^predict +[a-z-]+ +[0-9.]+" | awk '{print $3}')
            python3 - "$out/res_$tag" "${pred:-}" "$tag" <<'PY'
import glob, json, sys
d, pred, tag = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    j = json.load(open(sorted(glob.glob(d + "/*.json"))[-1]))
except (ValueError, IndexError, OSError) as e:
    print(f"| {tag} | no result ({e}) | | | |"); sys.exit()
s, m = j.get("summary", {}), j["memory"]
ms = s.get("steady_median_ms") or s.get("median_ms")
ranks = m.get("per_rank") or [{"gpu_peak_bytes": m["gpu"]["peak_bytes"], "gpu_planned_bytes": m["gpu"]["planned_bytes"]}]
peak = " / ".join(f"{r['gpu_peak_bytes'] / 2**30:.1f}" for r in ranks)
eq = all(r["gpu_peak_bytes"] == r["gpu_planned_bytes"] for r in ranks)
err = f"{pred} ({(float(pred) / ms - 1) * 100:+.1f}%)" if pred and ms else "-"
print(f"| {tag} | {ms:.1f} | {s.get('samples_per_second', 0):.2f} | {peak} GiB, {'yes' if eq else 'NO'} | {err} |")
PY
        done
    } | tee "$out/huge_rest.md"
    cp "$out/huge_rest.md" "$out/calibrate.txt" "$machine" "$dest"/ 2>/dev/null
fi
for t in big_one big_ddp2 big_ddp2_bf16r big_zero3 big_tp2 big_tp2sp big_pp2 big_stronghold big_zinf huge_tp2sp \
    huge_tp2 huge_pp2 huge_stronghold huge_zero3 huge_zinf; do
    [ -e "$out/$t.txt" ] || continue
    echo "| $t | $(grep -E '^  done:|OUT OF|^ERROR' "$out/$t.txt" | head -n 1) |" | tee -a "$out/table.md"
done
# aebench against the anchor, layout by layout: both steady medians per global batch
python3 - "$out" <<'PY' | tee -a "$out/table.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
print("\n| layout | aebench ms/step | Megatron-Core ms/step | aebench / Megatron-Core speed |\n|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(out, "anchor_*.json"))):
    tag = os.path.basename(f)[len("anchor_"):-len(".json")]
    try:
        mc = json.load(open(f))
        j = json.load(open(sorted(glob.glob(os.path.join(out, "res_" + tag, "*.json")))[-1]))
    except (ValueError, IndexError, OSError) as e:
        print(f"| {tag} | ? | ? | missing: {e} |")
        continue
    its = [i["ms"] for i in j["iterations"]][3:] or [i["ms"] for i in j["iterations"]]
    ms = j.get("summary", {}).get("steady_median_ms") or statistics.median(its)
    print(f"| {tag} | {ms:.1f} | {mc['median_ms']:.1f} | {mc['median_ms'] / ms:.3f}x |")
PY
