#!/usr/bin/env bash
# megatron-lm --pp with data parallelism beside it on the four-GPU machine (issue 49): --pp 2 on
# 4 GPUs (2 pipelines) against DDP on 2 GPUs with the same global batch, bit for bit, fp32
# math and bf16; then a first timing of the layouts on 4 GPUs at l32 h2048 bf16 (global batch
# 64, -b 4): DDP 4, --pp 2 x 2, --pp 4.
# Usage on the device machine, .deps carried: dest=DIR bash bench/pp_dp_gpu.sh
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/dp_env.sh
small=(-m megatron-lm -l 8 -h 1024 --heads 16 --seq 512 -b 2 --global-batch 16 --iters 6 --log-interval 2)
for math in "--math fp32" "--dtype bf16"; do
    tag=$(echo "$math" | tr -d ' -')
    run "ddp2_$tag" 2 "${small[@]}" $math --save-params "$out/ddp2_$tag.params"
    run "pp2x2_$tag" 4 "${small[@]}" $math --pp 2 --save-params "$out/pp2x2_$tag.params"
    python3 - "$out/res_ddp2_$tag" "$out/res_pp2x2_$tag" "$out/ddp2_$tag.params" "$out/pp2x2_$tag.params" "$tag" <<'PY' | tee -a "$out/table.md"
import glob, json, sys, filecmp
def its(d):
    j = json.load(open(sorted(glob.glob(d + "/*.json"))[-1]))
    return [(i["loss"], i["grad_norm"]) for i in j["iterations"]], j["memory"]["gpu"]
a, ga = its(sys.argv[1]); b, gb = its(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
params = filecmp.cmp(sys.argv[3], sys.argv[4], shallow=False)
print(f"| {sys.argv[5]} | --pp 2 on 4 GPUs vs DDP on 2, 4 micro-batches | {same}/{len(a)} iterations bitwise (loss, grad norm) | final parameters {'equal' if params else 'DIFFER'} | rank 0 peak {gb['peak_bytes']} = plan {gb['planned_bytes']}: {gb['peak_bytes'] == gb['planned_bytes']} |")
PY
done
big=(-m megatron-lm -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --global-batch 64 --dtype bf16 --iters 12 --log-interval 6)
run one_big 1 "${big[@]}"
run ddp4_big 4 "${big[@]}"
run pp2x2_big 4 "${big[@]}" --pp 2
run pp4_big 4 "${big[@]}" --pp 4
for t in one_big ddp4_big pp2x2_big pp4_big; do
    echo "| $t | $(grep -E '^  done:' "$out/$t.txt" | head -n 1) |" | tee -a "$out/table.md"
done
