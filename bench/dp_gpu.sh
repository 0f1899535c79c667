#!/usr/bin/env bash
# Data parallelism on the two-GPU machine (nvidia-h200-x2), in one go: build aebench with
# CUDA, Open MPI and NCCL; check that 2 ranks agree with 1 rank at twice the micro-batch in
# strict fp32 (DDP and ZeRO-3); then time megatron-lm --zero-stage 0-3 at N = 1 and N = 2
# (l32 h2048 b4 s1024 TF32) beside PyTorch on one GPU and PyTorch DDP on two (torchrun),
# measured in the same call, and print the table (bench/dp_summary.py).
#
# On the device machine, from the repository root, with .deps carried:
#   bash bench/dp_gpu.sh "$OUT"
# PHASE=probe: only build and the correctness check (a few minutes); SKIP_CHECK=1 skips the
# check; NET=sockets puts NCCL on its socket transport (bench/dp_env.sh), the two GPUs as two
# machines on a network; PROBE=1 first measures the collectives at 2 ranks (--calibrate).
# LAYERS (default 32), ITERS (default 12), STAGES (default "0 1 2 3"); MEGATRON=0 skips the
# megatron-lm runs and PyTorch, OFFLOAD=0 the offload engines (l2l, stronghold -w auto and
# -w 15 at N = 1 and 2, beside the host's measured bandwidth and CPU Adam rate); NS (default
# "1 2"; "1 2 4" on the four-GPU machine, with PyTorch DDP at each N > 1) the rank counts; OFFLOAD_ENGINES (default "zo zi l2l sh_auto sh_w15"); TEST_CUDA=1 runs build/tests/test_cuda first (needs cmocka in .deps).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh

if [ -z "${SKIP_CHECK:-}" ]; then # (SKIP_CHECK=1: straight to the timing)
echo "== correctness: 2 ranks vs 1 rank at twice the micro-batch, strict fp32, 20 iterations"
small=(-l 4 -h 512 --heads 8 --seq 256 --vocab 8192 --math fp32 --iters 20 --log-interval 10
       --lr 1e-3 --lr-warmup-fraction 0.001 --lr-decay-iters 1000)
run check_n1 1 "${small[@]}" -b 8
for st in 0 3; do run "check_n2_s$st" 2 "${small[@]}" -b 4 --zero-stage "$st"; done
python3 - "$out" <<'EOF'
import glob, json, sys
out = sys.argv[1]
def losses(tag):
    return [i["loss"] for i in json.load(open(glob.glob(f"{out}/res_{tag}/*.json")[0]))["iterations"]]
ref = losses("check_n1")
for st in (0, 3):
    l = losses(f"check_n2_s{st}")
    worst = max(abs(a - b) / abs(a) for a, b in zip(ref, l))
    print(f"N=2 stage {st} vs N=1 (fp32 math, 20 its): largest relative loss difference {worst:.3g}"
          f" ({'ok' if worst <= 1e-5 and len(l) == len(ref) == 20 else 'FAIL'}, limit 1e-5)")
EOF
fi
if [ "${TEST_CUDA:-0}" = 1 ]; then
    # every CUDA op and every engine on one GPU against the CPU backend
    make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" build/tests/test_cuda >>"$out/build.txt" 2>&1 &&
        ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$out/test_cuda.txt" | tr '\n' ' ')"
    cp "$out/test_cuda.txt" "$dest/" 2>/dev/null
fi
[ "${PHASE:-all}" = probe ] && exit 0

if [ -n "${PROBE:-}" ]; then
    # the collectives' own rates at 2 ranks (aebench --calibrate under mpirun): what the
    # network between the ranks carries, measured before the runs it bounds
    run probe 2 --calibrate -l 2 -h 2048 -b 4
    grep -hE "all-reduce|reduce-scatter|all-gather|collective" "$out/probe.txt" | head -n 8
fi
echo "== timing: l${LAYERS:-32} h2048 b4 s1024 TF32"
big=(-l "${LAYERS:-32}" -h 2048 -b 4 --iters "${ITERS:-12}" --log-interval "${ITERS:-12}")
: >"$out/pytorch.jsonl"
[ "${MEGATRON:-1}" = 1 ] && { python3 bench/pytorch_gpt.py --layers "${LAYERS:-32}" --math tf32 --iters "${ITERS:-12}" >>"$out/pytorch.jsonl" 2>"$out/pytorch_err.txt" || tail -n 5 "$out/pytorch_err.txt"; }
tail -n 1 "$out/pytorch.jsonl"
for n in ${NS:-1 2}; do
    [ "$n" -gt 1 ] && [ "${MEGATRON:-1}" = 1 ] || continue
    python3 -m torch.distributed.run --standalone --nproc_per_node "$n" bench/pytorch_gpt.py --layers "${LAYERS:-32}" \
        --math tf32 --iters "${ITERS:-12}" >>"$out/pytorch.jsonl" 2>"$out/pytorch_ddp_err.txt" || tail -n 5 "$out/pytorch_ddp_err.txt"
    tail -n 1 "$out/pytorch.jsonl"
done
if [ "${MEGATRON:-1}" = 1 ]; then
for st in ${STAGES:-0 1 2 3}; do
    for n in ${NS:-1 2}; do run "n${n}_s$st" "$n" "${big[@]}" --zero-stage "$st"; done
done
fi
if [ "${OFFLOAD:-1}" = 1 ]; then
    # Two ranks share the host: each gets half the cores for its host Adam.
    cores=$(nproc)
    make -j16 CUDA=1 MPI=0 build/bench/host_adam >>"$out/build.txt" 2>&1 &&
        ./build/bench/host_adam --gib 4 --threads "$cores" >"$out/host_adam.txt" 2>&1
    tail -n 6 "$out/host_adam.txt"
    for n in ${NS:-1 2}; do
        th=$((cores / n))
        for e in ${OFFLOAD_ENGINES:-zo zi l2l sh_auto sh_w15}; do
            case $e in
            zo) run "n${n}_zo" "$n" "${big[@]}" -m zero-offload --threads "$th" ;;
            zi) run "n${n}_zi" "$n" "${big[@]}" -m zero-infinity --threads "$th" ;;
            l2l) run "n${n}_l2l" "$n" "${big[@]}" -m l2l --threads "$th" ;;
            sh_auto) run "n${n}_sh_auto" "$n" "${big[@]}" -m stronghold -w auto --threads "$th" ;;
            sh_w15) run "n${n}_sh_w15" "$n" "${big[@]}" -m stronghold -w 15 --threads "$th" ;;
            esac
        done
    done
fi
python3 bench/dp_summary.py "$out" | tee "$out/table.md"
echo "total: $(( $(date +%s) - t0 )) s"
