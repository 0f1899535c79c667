#!/usr/bin/env bash
# A hung rank on two GPUs (issue 28), in one call on the two-GPU machine:
#  1. megatron-lm ZeRO-3 (l8 h2048 b4 s1024, TF32), 2 ranks under mpirun: rank 1 stopped
#     (SIGSTOP) from outside at about iteration 10, in the middle of its step's all-gathers;
#     the default --hang-timeout (auto): how long until the job ended, exit code, the line;
#  2. gemini (interleave, read transport, l4) under --ranks 2: rank 1 stops itself in the
#     middle of iteration 20's checkpoint (--fail-phase checkpoint --fail-kind stop); its peer's
#     watchdog ends the job, the supervisor relaunches it, and it recovers: time to detect,
#     time to recover, and the final parameters against an uninterrupted run (bit for bit);
#  3. beside them, PyTorch DDP (bench/pytorch_gpt.py under torchrun, the same l8 shape, its
#     default NCCL watchdog): rank 1 stopped the same way, and how long until the job ends (or
#     that it had not by the end of the call).
# On the device machine, from the repository root, with .deps carried:
#   bash bench/faults_gpu.sh "$OUT"
# DEADLINE_S (default 560): when, from the start, the call stops waiting for PyTorch.
# PARTS (default "zero3 gemini ddp"): which of the three to run.
set -uo pipefail
start_s=$(date +%s)
dest=${1:-bench/results/latest}
source bench/dp_env.sh
store=/dev/shm
[ "$(df -BG --output=avail /dev/shm | tail -n 1 | tr -dc 0-9)" -ge 40 ] || store=/tmp
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# rank_pid VAR VALUE: the pid of the process whose environment has VAR=VALUE (a rank)
rank_pid() { local p; for p in $(pgrep -f "$2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "$1" && { echo "$p"; return; }; done; }
# wait_iter LOG N: until the log (or output) names iteration N (at most 300 s)
wait_iter() { for _ in $(seq 3000); do grep -qE "iter(ation)? +$2/" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

table="$out/table.md"
progress() { echo "$(date +%T) +$(( $(date +%s) - start_s )) s: $*" | tee -a "$dest/progress.txt"; cp "$table" "$dest/" 2>/dev/null; }
params=$(mktemp -d /tmp/aebench-params.XXXXXX) # (GBs: not in what comes back)
{
    echo "| run | what stopped | stopped at | ended after | exit | the line that ended it |"
    echo "|---|---|---|---|---|---|"
} >"$table"

has() { case " ${PARTS:-zero3 gemini ddp} " in *" $1 "*) return 0 ;; esac; return 1; }
# ---- 1. megatron-lm ZeRO-3: rank 1 stopped from outside --------------------------------------
if has zero3; then
M=(--device cuda -l 8 -h 2048 --heads 16 --seq 1024 -b 4 --iters 200 --log-interval 1 --zero-stage 3)
progress "built; megatron-lm"
(timeout 150 "${MPI[@]}" -np 2 ./aebench "${M[@]}" --results "$out/res_m" >"$out/m.txt" 2>&1; echo $? >"$out/m.rc") &
job=$!
wait_iter "$out/m.txt" 10
victim=$(rank_pid OMPI_COMM_WORLD_RANK=1 "aebench --device cuda -l 8")
kill -STOP "$victim"
t_stop=$(now)
wait "$job"
took=$(since "$t_stop")
line=$(grep -h "no progress" "$out/m.txt" | head -n 1 | sed 's/^aebench: //')
step=$(grep -h "elapsed time per iteration" "$out"/res_m/*.txt | sed -n 's/.*iteration (ms): *\([0-9.]*\).*/\1/p' | sort -g | sed -n '5p')
echo "| megatron-lm ZeRO-3 l8, 2 ranks, mpirun (step ${step:-?} ms) | rank 1, SIGSTOP from outside | iteration 10 | $took s | $(cat "$out/m.rc") | $line |" >>"$table"
sleep 2

fi

# ---- 2. gemini: rank 1 stops in the middle of a checkpoint; relaunched, recovered ------------
if has gemini; then
G=(--device cuda -l 4 -h 2048 --heads 16 --seq 1024 -b 4 --iters 40 --log-interval 1 -m gemini
   --gemini-mode interleave --gemini-transport read --gemini-store "$store")
progress "gemini, uninterrupted"
timeout 120 ./aebench "${G[@]}" --ranks 2 --results "$out/res_g0" --save-params "$params/g0" >"$out/g0.txt" 2>&1
progress "gemini uninterrupted: exit $?; gemini, rank 1 stopped"
t0=$(now)
timeout 200 ./aebench "${G[@]}" --ranks 2 --fail-at 20 --fail-rank 1 --fail-phase checkpoint --fail-kind stop \
    --results "$out/res_g1" --save-params "$params/g1" >"$out/g1.txt" 2>&1
grc=$?
took=$(since "$t0")
line=$(grep -h "no progress" "$out/g1.txt" | head -n 1 | sed 's/^aebench: //')
back=$(grep -h "^recovery: back at iteration" "$out"/res_g1/*.txt | tail -n 1)
same=$(cmp -s "$params/g0" "$params/g1" && echo "bit for bit" || echo "DIFFER")
rm -rf "$params"
echo "| gemini l4 interleave/read, --ranks 2 (whole job $took s) | rank 1, SIGSTOP in iteration 20's checkpoint | iteration 20 | see the line | $grc | $line; then relaunched and recovered: $back; final parameters vs uninterrupted: $same |" >>"$table"

fi

# ---- 3. PyTorch DDP, its default watchdog: rank 1 stopped the same way ------------------------
if has ddp; then
progress "PyTorch DDP"
left=$(( ${DEADLINE_S:-560} - ($(date +%s) - start_s) ))
[ "$left" -gt 60 ] || left=60
(timeout "$left" torchrun --nproc_per_node 2 bench/pytorch_gpt.py \
    --layers 8 --iters 100000 >"$out/ddp.txt" 2>&1; echo $? >"$out/ddp.rc") &
job=$!
sleep 45 # (model built, NCCL up, steps running)
victim=$(rank_pid RANK=1 "pytorch_gpt.py")
if [ -n "$victim" ]; then
    kill -STOP "$victim"
    t_stop=$(now)
    wait "$job"
    took=$(since "$t_stop")
    rc=$(cat "$out/ddp.rc")
    if [ "$rc" = 124 ]; then ended="not ended after $took s (the call's deadline)"; else ended="$took s"; fi
    echo "| PyTorch $(python3 -c 'import torch; print(torch.__version__)') DDP l8, torchrun, default NCCL timeout | rank 1, SIGSTOP from outside | ~45 s in | $ended | $rc | $(grep -h -m1 -i "watchdog\|timeout\|timed out" "$out/ddp.txt" | cut -c1-200) |" >>"$table"
    kill -CONT "$victim" 2>/dev/null
    pkill -9 -f pytorch_gpt.py
else
    echo "| PyTorch DDP | (rank 1 not found) | | | | $(tail -c 300 "$out/ddp.txt") |" >>"$table"
    wait "$job"
fi
fi
progress "done"
cat "$table"
tail -n 5 "$out/m.txt" "$out/g1.txt" "$out/ddp.txt" >"$dest/tails.txt" 2>&1
