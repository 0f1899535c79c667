#!/usr/bin/env bash
# megatron-lm --pp on the two- or four-GPU machine (issue 49), in one call (NGPU=2, default, or 4):
#  1. correctness on the GPU: l8 h1024, -b 2 --global-batch 16, fp32 math and bf16, the
#     pipeline against its reference, losses, grad norms and final parameters bit for bit:
#     NGPU=2: --pp 2 (NCCL point-to-point) against one rank (8 micro-batches);
#     NGPU=4: --pp 2 on 4 GPUs (2 pipelines, each stage's gradients all-reduced over its 2
#     ranks) against DDP on 2 (4 micro-batches a rank);
#  2. a first timing of the layouts at l32 h2048 heads 16 b4 bf16 (global batch 16 x NGPU):
#     one GPU, then NGPU=2: --pp 2; NGPU=4: DDP 4, --pp 2 x 2, --pp 4.
# Usage on the device machine, .deps carried: [NGPU=4] dest=DIR bash bench/pp_gpu.sh
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
ngpu=${NGPU:-2}
source bench/dp_env.sh
small=(-m megatron-lm -l 8 -h 1024 --heads 16 --seq 512 -b 2 --global-batch 16 --iters 6 --log-interval 2)
if [ "$ngpu" = 4 ]; then ref=ddp2 ref_np=2 pp=pp2x2 what="--pp 2 on 4 GPUs vs DDP on 2, 4 micro-batches a rank"
else ref=one ref_np=1 pp=pp2 what="--pp 2 vs one rank, 8 micro-batches"; fi
for math in "--math fp32" "--dtype bf16"; do
    tag=$(echo "$math" | tr -d ' -')
    run "${ref}_$tag" "$ref_np" "${small[@]}" $math --save-params "$out/${ref}_$tag.params"
    run "${pp}_$tag" "$ngpu" "${small[@]}" $math --pp 2 --save-params "$out/${pp}_$tag.params"
    python3 - "$out/res_${ref}_$tag" "$out/res_${pp}_$tag" "$out/${ref}_$tag.params" "$out/${pp}_$tag.params" "$tag" "$what" <<'PY' | tee -a "$out/table.md"
import glob, json, sys, filecmp
def its(d):
    j = json.load(open(sorted(glob.glob(d + "/*.json"))[-1]))
    return [(i["loss"], i["grad_norm"]) for i in j["iterations"]], j["memory"]["gpu"]
a, ga = its(sys.argv[1]); b, gb = its(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
params = filecmp.cmp(sys.argv[3], sys.argv[4], shallow=False)
print(f"| {sys.argv[5]} | {sys.argv[6]} | {same}/{len(a)} iterations bitwise (loss, grad norm) | final parameters {'equal' if params else 'DIFFER'} | rank 0 peak {gb['peak_bytes']} = plan {gb['planned_bytes']}: {gb['peak_bytes'] == gb['planned_bytes']} |")
PY
done
big=(-m megatron-lm -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --global-batch $((16 * ngpu)) --dtype bf16 --iters 12 --log-interval 6)
run one_big 1 "${big[@]}"
if [ "$ngpu" = 4 ]; then
    run ddp4_big 4 "${big[@]}"
    run pp2x2_big 4 "${big[@]}" --pp 2
    run pp4_big 4 "${big[@]}" --pp 4
    layouts=(one_big ddp4_big pp2x2_big pp4_big)
else
    run pp2_big 2 "${big[@]}" --pp 2
    layouts=(one_big pp2_big)
fi
for t in "${layouts[@]}"; do
    echo "| $t | $(grep -E '^  done:' "$out/$t.txt" | head -n 1) |" | tee -a "$out/table.md"
done
