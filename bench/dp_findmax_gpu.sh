#!/usr/bin/env bash
# Data parallelism on the two-GPU machine (nvidia-h200-x2), part two: micro-batches in the
# offload engines on the GPU, and the largest model each engine trains on two ranks.
#
#   check    every offload engine with 4 micro-batches per rank at N = 2 against megatron-lm
#            --zero-stage 2 (the order they reproduce bit for bit on the CPU backend) and
#            against N = 1 at the same global batch, strict fp32, to 1e-5 relative; then the
#            cost of the accumulation at l32 (zero-offload, stronghold -w 15, N = 2: one
#            micro-batch of 4 per rank against four of 2, global batch 8 against 16)
#   findmax  case 1's find-max (configs/case1.json: h2048 b4, window 4) with --ranks 2 under
#            the V100 budgets per rank (32 GiB of GPU, 90 GiB of host each: a --cpu-mem-limit
#            is the machine's, so 180G), and megatron-lm --zero-stage 3 beside it; then the
#            plan's bound for the whole machine (--dry-run: arithmetic only)
#
# On the device machine, from the repository root, with .deps carried:
#   PHASE=check|findmax|all bash bench/dp_findmax_gpu.sh "$OUT"
# FM_PARTS (default "s0 s3 zo zi l2l sh bound": megatron-lm stages 0 and 3, the offload
# engines, the bound) picks the find-max parts; each finds its largest layer count.
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
phase=${PHASE:-all}

if [ "$phase" != findmax ]; then
    echo "== micro-batches: 4 per rank at N = 2 vs megatron-lm --zero-stage 2, strict fp32"
    small=(-l 6 -h 512 --heads 8 --seq 256 --vocab 8192 --math fp32 --iters 12 --log-interval 6
           --lr 1e-3 --lr-warmup-fraction 0.001 --lr-decay-iters 1000)
    run acc_ref 2 "${small[@]}" -b 2 --global-batch 16 --zero-stage 2
    run acc_n1 1 "${small[@]}" -b 4 --global-batch 16 --zero-stage 2
    run acc_l2l 2 "${small[@]}" -b 2 --global-batch 16 -m l2l
    run acc_zo 2 "${small[@]}" -b 2 --global-batch 16 -m zero-offload
    run acc_zi 2 "${small[@]}" -b 2 --global-batch 16 -m zero-infinity
    run acc_sh1 2 "${small[@]}" -b 2 --global-batch 16 -m stronghold -w 1
    run acc_sh2 2 "${small[@]}" -b 2 --global-batch 16 -m stronghold -w 2
    python3 - "$out" <<'EOF'
import glob, json, sys
out = sys.argv[1]
def losses(tag):
    files = glob.glob(f"{out}/res_{tag}/*.json")
    return [i["loss"] for i in json.load(open(files[0]))["iterations"]] if files else []
ref = losses("acc_ref")
for tag in ("acc_n1", "acc_l2l", "acc_zo", "acc_zi", "acc_sh1", "acc_sh2"):
    l = losses(tag)
    ok = len(l) == len(ref) == 12
    worst = max(abs(a - b) / abs(a) for a, b in zip(ref, l)) if ok else float("nan")
    print(f"{tag} vs megatron-lm ZeRO-2 N=2 (4 micro-batches, fp32 math, 12 its): largest relative "
          f"loss difference {worst:.3g} ({'ok' if ok and worst <= 1e-5 else 'FAIL'}, limit 1e-5)")
EOF
    echo "== the cost of accumulating: l32 h2048, N = 2: 1 micro-batch of 4 per rank vs 4 of 2 (global batch 8 vs 16)"
    big=(-l 32 -h 2048 --iters 8 --log-interval 8)
    run acc_zo_m1 2 "${big[@]}" -b 4 -m zero-offload
    run acc_zo_m2 2 "${big[@]}" -b 2 --global-batch 16 -m zero-offload
    run acc_sh_m1 2 "${big[@]}" -b 4 -m stronghold -w 15
    run acc_sh_m2 2 "${big[@]}" -b 2 --global-batch 16 -m stronghold -w 15
    for tag in acc_zo_m1 acc_zo_m2 acc_sh_m1 acc_sh_m2; do
        echo "$tag: $(grep -h -E 'samples/s|h2d GB' "$out/$tag.txt" | tail -n 2 | tr '\n' ' ')"
    done
fi

if [ "$phase" != check ]; then
    # what aebench --find-max needs on the PATH to start each probe as a 2-rank job
    command -v mpiexec >/dev/null || { echo "no mpiexec on the PATH"; exit 1; }
    v100=(--gpu-mem-limit 32G --cpu-mem-limit 180G)
    for part in ${FM_PARTS:-s0 s3 zo zi l2l sh bound}; do
        case $part in
        s0) args=(-m megatron-lm) ;;
        s3) args=(-m megatron-lm --zero-stage 3) ;;
        zo) args=(-m zero-offload) ;;
        zi) args=(-m zero-infinity) ;;
        l2l) args=(-m l2l) ;;
        sh) args=(-m stronghold) ;;
        bound)
            echo "== the plan's bound on this whole machine (2 ranks, default budgets; arithmetic only)"
            for e in megatron-lm l2l zero-offload zero-infinity stronghold; do
                timeout 120 ./aebench --device cuda --find-max --dry-run -m "$e" -h 2048 -b 4 --ranks 2 \
                    --results "$out/fm_bound" >"$out/fm_bound_$e.txt" 2>&1
                echo "$e: $(grep -h -E "budgets|plan fits" "$out/fm_bound_$e.txt" | tr '\n' ' ')"
            done
            timeout 120 ./aebench --device cuda --find-max --dry-run -m megatron-lm --zero-stage 3 -h 2048 \
                -b 4 --ranks 2 --results "$out/fm_bound" >"$out/fm_bound_zero3.txt" 2>&1
            echo "megatron-lm zero-3: $(grep -h "plan fits" "$out/fm_bound_zero3.txt")"
            continue ;;
        *) echo "unknown part $part"; continue ;;
        esac
        # case 1's shape and window (configs/case1.json), each probe a 2-rank job
        echo "== find-max $part on 2 ranks (V100 budgets per rank)"
        win=(); [ "$part" = sh ] && win=(-w 4) # (the window is stronghold's: refused for the others)
        timeout 560 ./aebench --device cuda --find-max "${args[@]}" -h 2048 --heads 16 --seq 1024 -b 4 "${win[@]}" \
            --ranks 2 "${v100[@]}" --results "$out/fm_$part" >"$out/fm_$part.txt" 2>&1
        echo "exit $?: $(grep -h -E "^try|find-max result" "$out/fm_$part.txt" | tr '\n' ' ')"
    done
fi
echo "total: $(( $(date +%s) - t0 )) s"
