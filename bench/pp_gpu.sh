#!/usr/bin/env bash
# megatron-lm --pp on the two-GPU machine (issue 49): the pipeline against one rank with the
# same micro-batches, in one call.
#  1. correctness on the GPU: l8 h1024, --global-batch 16 -b 2 (8 micro-batches), fp32 math and
#     bf16: one rank, then --pp 2 on two GPUs (NCCL point-to-point): losses, grad norms and the
#     final parameters compared bit for bit;
#  2. a first timing (no target yet): l32 h2048 heads 16 b4 bf16, --global-batch 32 (8
#     micro-batches), one GPU against --pp 2, samples/s and the peak per rank.
# Usage on the device machine, .deps carried: dest=DIR bash bench/pp_gpu.sh
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/dp_env.sh
small=(-m megatron-lm -l 8 -h 1024 --heads 16 --seq 512 -b 2 --global-batch 16 --iters 6 --log-interval 2)
for math in "--math fp32" "--dtype bf16"; do
    tag=$(echo "$math" | tr -d ' -')
    run "one_$tag" 1 "${small[@]}" $math --save-params "$out/one_$tag.params"
    run "pp2_$tag" 2 "${small[@]}" $math --pp 2 --save-params "$out/pp2_$tag.params"
    python3 - "$out/res_one_$tag" "$out/res_pp2_$tag" "$out/one_$tag.params" "$out/pp2_$tag.params" "$tag" <<'PY' | tee -a "$out/table.md"
import glob, json, sys, filecmp
def its(d):
    j = json.load(open(sorted(glob.glob(d + "/*.json"))[-1]))
    return [(i["loss"], i["grad_norm"]) for i in j["iterations"]], j["memory"]["gpu"]
a, ga = its(sys.argv[1]); b, gb = its(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
params = filecmp.cmp(sys.argv[3], sys.argv[4], shallow=False)
print(f"| {sys.argv[5]} | --pp 2 vs one rank, 8 micro-batches | {same}/{len(a)} iterations bitwise (loss, grad norm) | final parameters {'equal' if params else 'DIFFER'} | rank 0 peak {gb['peak_bytes']} = plan {gb['planned_bytes']}: {gb['peak_bytes'] == gb['planned_bytes']} |")
PY
done
big=(-m megatron-lm -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --global-batch 32 --dtype bf16 --iters 12 --log-interval 6)
run one_big 1 "${big[@]}"
run pp2_big 2 "${big[@]}" --pp 2
for t in one_big pp2_big; do
    echo "| $t | $(grep -E '^  done:' "$out/$t.txt" | head -n 1) |" | tee -a "$out/table.md"
    grep -E '^\[Rank' "$out/res_$t"/*.txt 2>/dev/null | head -n 2 | tee -a "$out/table.md"
done
