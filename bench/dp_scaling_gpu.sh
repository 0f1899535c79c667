#!/usr/bin/env bash
# Issue 50 on the two-GPU machine (nvidia-h200-x2): data parallelism at twice the speed, with
# CUDA graphs on several ranks.  One call, from the repository root, with .deps carried:
#   PARTS="check hang l32" bash bench/dp_scaling_gpu.sh "$OUT"
# Parts (default "check hang l32"; the build is kept between calls on a warm machine):
#   check  2 ranks, megatron-lm l4 h512: --graphs on against --graphs off at ZeRO-0 and -1
#          (fp32 math), and in bf16 with fp32 and bf16 gradient reduction: every iteration's
#          loss, grad norm and collective bytes the same bits; the run's note says graphs are on
#   hang   2 ranks, graphs on, rank 1 stopped (--fail-kind stop) at the start of iteration 10's
#          backward: rank 0 hangs inside a replayed all-reduce, and its watchdog line names it
#   cal    the machine files (--calibrate, one rank then two) in TF32 and bf16, into DEST
#   ctas   l32 bf16 on two ranks with NCCL's thread blocks capped (NCCL_MAX_CTAS: CTAS, default
#          "default 1 2 4 8 16") and with bf16 reduction: what the reductions cost the compute
#   lNN    megatron-lm lNN h2048 b4 s1024 (one micro-batch of 4 per rank): one rank, two ranks
#          at ZeRO-0 and ZeRO-3 (and ZeRO-0 with --graphs off), in bf16 and TF32, in ROUNDS
#          interleaved rounds (default 2), beside PyTorch on one GPU and DDP on two (torchrun)
#          at the same shape in the same call; the table: bench/dp_scaling_summary.py.
# ITERS (default 20) iterations a run; the steady-state median is the engine's own rule.
set -uo pipefail
dest=${1:-bench/results/latest}
PARTS=${PARTS:-check hang l32}
ITERS=${ITERS:-20}
ROUNDS=${ROUNDS:-2}
source bench/dp_env.sh # (builds; defines out, MPI, run)
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

if has check; then
    echo "== graphs on 2 ranks: the same bits as without"
    small=(-l 4 -h 512 --heads 8 --seq 256 --vocab 8192 -b 4 --iters 8 --log-interval 8 --lr 1e-3
           --lr-warmup-fraction 0.001 --lr-decay-iters 1000)
    pairs=""
    for v in "s0:--math fp32 --zero-stage 0" "s1:--math fp32 --zero-stage 1" "bf16:--dtype bf16" \
             "bf16r:--dtype bf16 --grad-reduce-dtype bf16" "s0m4:--math fp32 --global-batch 32"; do
        tag=${v%%:*}
        # shellcheck disable=SC2086 # (the options are words)
        for g in off on; do run "check_${tag}_$g" 2 "${small[@]}" ${v#*:} --graphs "$g"; done
        pairs+=" $tag"
    done
    python3 - "$out" $pairs <<'EOF' | tee "$out/check.txt"
import glob, json, sys
out, tags = sys.argv[1], sys.argv[2:]
def run(tag):
    f = glob.glob(f"{out}/res_{tag}/*.json")
    return json.load(open(f[0])) if f else None
for t in tags:
    off, on = run(f"check_{t}_off"), run(f"check_{t}_on")
    if not off or not on:
        print(f"{t}: FAIL (a run made no JSON)")
        continue
    keys = ("loss", "grad_norm", "bytes_collectives")
    same = all(a[k] == b[k] for a, b in zip(off["iterations"], on["iterations"]) for k in keys)
    n = len(on["iterations"])
    note = [x for x in on.get("engine_notes", []) if x.startswith("graphs")]
    ok = same and n == len(off["iterations"]) == 8 and note and note[0].startswith("graphs: on")
    print(f"{t}: graphs on = off over {n} iterations (loss, grad norm, collective bytes): "
          f"{'same bits' if same else 'DIFFERENT'}; note: {note[0] if note else 'none'} -> {'ok' if ok else 'FAIL'}")
EOF
fi

if has hang; then
    echo "== a rank stopped while its peer replays an all-reduce"
    H=(--device cuda -l 8 -h 2048 --heads 16 --seq 1024 -b 4 --iters 40 --log-interval 1 --zero-stage 0
       --graphs on --hang-timeout 20 --fail-at 10 --fail-rank 1 --fail-kind stop --fail-phase backward)
    t_hang=$(date +%s)
    timeout 120 "${MPI[@]}" -np 2 ./aebench "${H[@]}" --results "$out/res_hang" >"$out/hang.txt" 2>&1
    echo "hang: exit $? after $(( $(date +%s) - t_hang )) s" | tee "$out/hang_summary.txt"
    grep -h "no progress" "$out/hang.txt" | head -n 2 | tee -a "$out/hang_summary.txt"
    pkill -9 -f "aebench --device cuda -l 8" 2>/dev/null
fi

if has cal; then
    # the machine files --predict reads for these runs: one per math, each micro-batch of a
    # global batch of 8 on one rank, then the collectives and rates at two ranks
    for dt in tf32 bf16; do
        dto=(); [ "$dt" = bf16 ] && dto=(--dtype bf16)
        mkdir -p "$out/cal_$dt"
        ./aebench --calibrate --device cuda -h 2048 --heads 16 --seq 1024 "${dto[@]}" --global-batch 8 \
            --results "$out/cal_$dt" >"$out/cal_$dt.txt" 2>&1 &&
            ./aebench --calibrate --ranks 2 --device cuda -h 2048 --heads 16 --seq 1024 "${dto[@]}" -b 4 --global-batch 8 \
                --results "$out/cal_$dt" >>"$out/cal_$dt.txt" 2>&1
        echo "calibrate $dt: exit $? $(ls "$out/cal_$dt")"
        for f in "$out/cal_$dt"/machine_*.json; do cp "$f" "$dest/machine_$dt.json"; done
    done
fi

if has ctas; then
    # What the all-reduces beside the backward cost the compute: NCCL's thread blocks capped
    # (NCCL_MAX_CTAS, this experiment's only: the product would set a measured cap in code),
    # and bf16 reduction (half the bytes), at l32 bf16, two ranks, in CTAS_ROUNDS rounds.
    base=("${MPI[@]}")
    for r in $(seq "${CTAS_ROUNDS:-1}"); do
        run "ctas_n1_r$r" 1 -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters "$ITERS" --dtype bf16
        for c in ${CTAS:-default 1 2 4 8 16}; do
            MPI=("${base[@]}")
            if [ "$c" != default ]; then export NCCL_MAX_CTAS=$c; MPI+=(-x NCCL_MAX_CTAS); else unset NCCL_MAX_CTAS; fi
            for st in 0 3; do
                run "ctas_${c}_s${st}_r$r" 2 -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters "$ITERS" --dtype bf16 --zero-stage "$st"
            done
            [ "$c" = default ] && run "ctas_${c}_s0bf16r_r$r" 2 -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters "$ITERS" \
                --dtype bf16 --zero-stage 0 --grad-reduce-dtype bf16
        done
        unset NCCL_MAX_CTAS
        MPI=("${base[@]}")
    done
    python3 bench/dp_scaling_summary.py "$out" --ctas | tee "$out/ctas.md"
fi

for part in $PARTS; do
    case $part in l[0-9]*) ;; *) continue ;; esac
    L=${part#l}
    echo "== timing: l$L h2048 b4 s1024, one rank against two, $ROUNDS rounds"
    big=(-l "$L" -h 2048 --heads 16 --seq 1024 -b 4 --iters "$ITERS" --log-interval "$ITERS")
    for r in $(seq "$ROUNDS"); do
        for dt in bf16 tf32; do
            dto=(); [ "$dt" = bf16 ] && dto=(--dtype bf16)
            run "l${L}_${dt}_n1_r$r" 1 "${big[@]}" "${dto[@]}"
            run "l${L}_${dt}_n2s0_r$r" 2 "${big[@]}" "${dto[@]}" --zero-stage 0
            run "l${L}_${dt}_n2s3_r$r" 2 "${big[@]}" "${dto[@]}" --zero-stage 3
            [ "$dt" = bf16 ] && run "l${L}_${dt}_n2s0nog_r$r" 2 "${big[@]}" "${dto[@]}" --zero-stage 0 --graphs off
        done
    done
    for dt in bf16 tf32; do
        python3 bench/pytorch_gpt.py --layers "$L" --math "$dt" --iters "$ITERS" >>"$out/pytorch.jsonl" \
            2>"$out/pytorch_err.txt" || tail -n 3 "$out/pytorch_err.txt"
        python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/pytorch_gpt.py --layers "$L" \
            --math "$dt" --iters "$ITERS" >>"$out/pytorch.jsonl" 2>"$out/pytorch_ddp_err.txt" ||
            tail -n 3 "$out/pytorch_ddp_err.txt"
    done
    tail -n 4 "$out/pytorch.jsonl"
done
python3 bench/dp_scaling_summary.py "$out" | tee "$out/table.md"
python3 bench/dp_scaling_summary.py "$out" --jsonl "$out/runs.jsonl"
cp "$out"/check.txt "$out"/ctas.md "$out"/runs.jsonl "$out"/hang_summary.txt "$out"/hang.txt "$out"/pytorch.jsonl "$dest"/ 2>/dev/null
echo "total: $(( $(date +%s) - t0 )) s"
