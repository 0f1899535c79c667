#!/usr/bin/env bash
# What the driver tells the processes it starts, under Open MPI (the GPU machines' MPI; CI and
# `make test` have MPICH): built with CUDA, Open MPI and NCCL (bench/dp_env.sh), every check on
# the CPU backend, so one GPU is enough.  Each line of table.md is one check, "ok" or "FAIL":
#   - a --ranks 2 job: its ranks get the notes directory on their command line (--job-notes),
#     rank 0's report lines reach the supervisor through a file there (Open MPI closes every
#     other inherited descriptor), and the record says started_by --ranks;
#   - -m all --ranks 2: each child run is a supervisor started with --report-fd, relaying its
#     ranks' lines up the sweep's pipe: every engine's record found;
#   - --rerun of the --ranks record: a --ranks 2 job again, bit for bit, rerun_of naming it;
#   - gemini --ranks 2 killed at iteration 3: relaunched with --relaunch-of, recovered;
#   - a run typed by hand under a forged AEBENCH_JOB_NOTES, AEBENCH_REPORT_FD and
#     AEBENCH_RERUN_OF: started by the command line, no rerun_of, nothing in the forged directory.
#   bash bench/openmpi_launch_gpu.sh "$OUT"
# Measured with Open MPI 4.1.6: bench/results/2026-11-29g-h200-openmpi-launch (the gemini line
# failed there in MPI_Win_create), then bench/results/2026-11-29k-h200x2-openmpi-launch (all ok:
# gemini sends its chunks where the MPI makes no window, and says why).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny=(--device cpu -l 2 -h 64 --heads 4 --seq 32 -b 2 --vocab 512 --threads 1)
cd "$out" || exit 1
bin=$OLDPWD/aebench
check() { # name condition-status detail
    local name=$1 status=$2 detail=$3
    if [ "$status" -eq 0 ]; then echo "| ok | $name | $detail |"; else echo "| FAIL | $name | $detail |"; fi | tee -a table.md
}
field() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }
echo "| | check | detail |" >table.md
echo "|---|---|---|" >>table.md

timeout 300 "$bin" "${tiny[@]}" --iters 3 --ranks 2 --results ranks >ranks.out 2>ranks.err
rc=$?
rec=$(ls ranks/log_*.json 2>/dev/null | head -n 1)
by=$(field "$rec" "d['started_by'], d['world']")
[ "$rc" -eq 0 ] && [ "$by" = "('--ranks', 2)" ] && grep -q "log_" ranks.out
check "--ranks 2: started_by --ranks, world 2, the log named" $? "exit $rc, $by, $(tail -n 1 ranks.err)"

timeout 600 "$bin" -m all "${tiny[@]}" --iters 2 --ranks 2 --results all >all.out 2>all.err
rc=$?
n=$(ls all/log_*.json 2>/dev/null | wc -l)
runs=$(grep -oE "^summary: -m all \| [0-9]+ runs" all.out | grep -oE "[0-9]+" | tail -n 1)
[ "$rc" -eq 0 ] && [ -n "$runs" ] && [ "$n" -eq "$runs" ] && [ "$(grep -c "^\[[0-9]*/$runs\] .*: ok |" all.out)" -eq "$runs" ]
check "-m all --ranks 2: every run's record and result line (children with --report-fd)" $? "exit $rc, $n records of ${runs:-?} runs"

timeout 300 "$bin" --rerun "$PWD/$rec" --results again >again.out 2>again.err
rc=$?
again=$(ls again/log_*.json 2>/dev/null | head -n 1)
same=$(python3 - "$rec" "$again" <<'PY' 2>/dev/null
import json, sys, os
a, b = (json.load(open(p)) for p in sys.argv[1:3])
la = [(i["loss"], i["grad_norm"]) for i in a["iterations"]]
lb = [(i["loss"], i["grad_norm"]) for i in b["iterations"]]
print(la == lb and b.get("rerun_of", {}).get("path") == os.path.realpath(sys.argv[1]) and b["world"] == 2)
PY
)
[ "$rc" -eq 0 ] && [ "$same" = True ]
check "--rerun of the --ranks record: bit for bit, world 2, rerun_of names it (--rerun-of)" $? "exit $rc, $same"

mkdir -p store
timeout 300 "$bin" -m gemini --gemini-mode naive "${tiny[@]}" --iters 6 --ranks 2 --gemini-store "$PWD/store" --fail-at 3 --fail-rank 1 \
    --results gemini >gemini.out 2>gemini.err
rc=$?
grec=$(ls -t gemini/log_*.json 2>/dev/null | head -n 1)
rcv=$(field "$grec" "d['recovery']['failed_at_iteration'], 'killed itself' in d['recovery']['previous_job']")
[ "$rc" -eq 0 ] && [ "$rcv" = "(3, True)" ]
check "gemini --ranks 2 killed at 3: relaunched (--relaunch-of), recovered" $? "exit $rc, recovery $rcv, $(grep -c relaunching gemini.err) relaunch"

mkdir -p forged && chmod 700 forged
AEBENCH_JOB_NOTES=$PWD/forged AEBENCH_REPORT_FD=1 AEBENCH_RERUN_OF="0123456789abcdef /forged.json" \
    timeout 300 "$bin" "${tiny[@]}" --iters 2 --results byhand >byhand.out 2>byhand.err
rc=$?
hrec=$(ls byhand/log_*.json 2>/dev/null | head -n 1)
h=$(field "$hrec" "d['started_by'], 'rerun_of' in d")
[ "$rc" -eq 0 ] && [ "$h" = "('the command line', False)" ] && [ -z "$(ls -A forged)" ] && ! grep -q "^json \|^log " byhand.out
check "by hand under a forged environment: nothing of it in the record, no notes, no report lines" $? "exit $rc, $h"
cat table.md
mkdir -p "$dest" && cp table.md "$dest"/
