#!/usr/bin/env bash
# What slows the forward of an interleaved gemini step (l16 h2048, global batch 32, 2 GPUs):
# interleave under the knobs AEBENCH_GEMINI_CTAS (NCCL thread blocks of the checkpoint's
# communicator) and AEBENCH_GEMINI_FILL (share of each idle span the plan fills), one run each,
# 30 iterations (checkpoints from 15).  (The runs in bench/results/2026-11-24-h200x2-gemini/ab
# also varied AEBENCH_GEMINI_VERIFY_THREADS, the host checksums' threads; the checksums are on
# the GPU since, and the middle field of a variant is ignored.)
#   bash bench/gemini_ab_gpu.sh "$OUT"      VARIANTS="ctas:vt:fill ..." to choose
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
shape=(-m gemini -l 16 -h 2048 -b 4 --global-batch 32 --iters 30 --gemini-ckpt-from 15 --log-interval 1 --ranks 2 --device cuda)
echo "| NCCL CTAs | verify threads | fill | without ms | with ms | slowdown | forward ms | backward ms |" | tee "$out/table.md"
echo "|---|---|---|---|---|---|---|---|" | tee -a "$out/table.md"
for v in ${VARIANTS:-0:32:0.9 4:32:0.9 4:4:0.9 4:8:0.9 4:4:0.5 2:2:0.5}; do
    IFS=: read -r c t f <<<"$v"
    tag="il_${c}_${t}_${f}"
    AEBENCH_GEMINI_CTAS=$c AEBENCH_GEMINI_VERIFY_THREADS=$t AEBENCH_GEMINI_FILL=$f timeout 200 ./aebench "${shape[@]}" \
        --gemini-mode interleave --results "$out/$tag" >"$out/$tag.txt" 2>&1
    python3 - "$out/$tag" "$c" "$t" "$f" <<'PY' | tee -a "$out/table.md"
import glob, json, statistics, sys
f = glob.glob(sys.argv[1] + "/*.json")
if not f:
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | failed | | | | |"); sys.exit()
d = json.load(open(f[0])); g = d["gemini"]
st = [i for i in d["iterations"] if i.get("phase") == "checkpoint"]
fw = statistics.mean(i["forward_ms"] for i in st); bw = statistics.mean(i["backward_ms"] for i in st)
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {g['no_checkpoint_ms']:.1f} | {g['checkpoint_ms']:.1f} | "
      f"{g['slowdown']:.3f} | {fw:.1f} | {bw:.1f} |")
PY
done
