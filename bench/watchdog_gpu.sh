#!/usr/bin/env bash
# No false alarm from the watchdog (issue 28) on the GPU: every engine at l2 and at its largest
# size of case 1 (h2048 heads 16 s1024 b4, TF32, under the paper's V100 budgets --gpu-mem-limit
# 32G --cpu-mem-limit 90G: the sizes bench/dp_findmax_gpu.sh found at N = 1), with the default
# --hang-timeout (auto: 600 s while setting up and until two steps are measured, then
# max(30 s, 10 x the median step)), and zero-infinity --offload nvme (a step that is merely slow:
# the disk tier).  Each run prints its JSON's watchdog record: the limit in force at the end and
# the closest call (the largest idle time the watchdog saw, against the limit then, and where).
# A run passes when it ends ok with no "no progress" line.
#
# And (part hang, two GPUs) what the watchdog names when a rank of megatron-lm ZeRO-3 is stopped
# from outside in the middle of its all-gathers: the NCCL operation its peer is stuck in.
#
# On the two-GPU machine (nvidia-h100-x2; the single-rank runs use the first GPU), from the
# repository root, with .deps carried (bench/dp_env.sh builds with Open MPI and NCCL):
#   bash bench/watchdog_gpu.sh "$OUT" [parts]
# parts: a comma list of hang,small,megatron,offload,stronghold,infinity,l2l,nvme (default all;
# each large part is about a minute; split them over calls of at most 10 minutes: the table
# in $OUT grows).  ITERS (default 12): iterations per run.
set -uo pipefail
dest=${1:-bench/results/latest}
parts=${2:-hang,small,megatron,offload,stronghold,infinity,l2l,nvme}
ITERS=${ITERS:-12}
has() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
source bench/dp_env.sh # (sets out, a scratch directory, builds, defines MPI)
mkdir -p "$out/results"
table="$dest/table.md"
[ -f "$table" ] || {
    echo "| engine | layers | parameters | setup s | median ms/it | slowest ms/it | limit at the end s | closest call: idle s of limit s (where) | alarm | exit |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$table"

# run NAME LAYERS ARGS...: one run, its row
run() {
    local name=$1 layers=$2
    shift 2
    local res="$out/results/$name" rc
    mkdir -p "$res"
    CUDA_VISIBLE_DEVICES=0 timeout 560 ./aebench --device cuda -l "$layers" -h 2048 --heads 16 --seq 1024 -b 4 --iters "$ITERS" \
        --log-interval 1 --gpu-mem-limit 32G --cpu-mem-limit 90G --results "$res" "$@" >"$res/out.txt" 2>&1
    rc=$?
    local alarm=no
    grep -q "no progress for" "$res/out.txt" && alarm=YES
    cp "$res/out.txt" "$dest/$name.txt"
    python3 - "$res" "$name" "$layers" "$rc" "$alarm" <<'EOF' | tee -a "$table"
import glob, json, statistics, sys
res, name, layers, rc, alarm = sys.argv[1:]
files = glob.glob(res + "/*.json")
if not files:
    print(f"| {name} | {layers} | | | | | | (no JSON) | {alarm} | {rc} |")
    sys.exit()
d = json.load(open(files[0]))
its = [i["ms"] for i in d.get("iterations", [])]
w = d.get("watchdog", {})
setup = d.get("setup", {})
setup_s = setup.get("total_ms", setup.get("ms", 0)) / 1e3 if isinstance(setup, dict) else 0
close = (f"{w.get('closest_idle_s', 0):.1f} of {w.get('closest_limit_s', 0):.0f} "
         f"({100 * w.get('closest_idle_s', 0) / max(w.get('closest_limit_s', 1), 1e-9):.1f}%, "
         f"{w.get('closest_phase', '?')} of iteration {w.get('closest_iteration', '?')})")
print(f"| {name} | {layers} | {d.get('parameters', 0) / 1e9:.3f} B | {setup_s:.1f} | "
      f"{d.get('summary', {}).get('median_ms', 0):.0f} | {max(its) if its else 0:.0f} | {w.get('limit_s', 0):.0f} | "
      f"{close} | {alarm} | {rc} ({d.get('status')}) |")
EOF
}

if has hang; then
    # rank 1 stopped from outside at iteration 10 of a ZeRO-3 run (its all-gathers): rank 0's line
    M=(--device cuda -l 8 -h 2048 --heads 16 --seq 1024 -b 4 --iters 200 --log-interval 1 --zero-stage 3)
    (timeout 150 "${MPI[@]}" -np 2 ./aebench "${M[@]}" --results "$out/res_hang" >"$dest/hang.txt" 2>&1
     echo $? >"$dest/hang.rc") &
    job=$!
    for _ in $(seq 3000); do grep -qE "iter +10/" "$dest/hang.txt" 2>/dev/null && break; sleep 0.1; done
    victim=""
    for p in $(pgrep -f "aebench --device cuda -l 8"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
    done
    t_stop=$(date +%s.%N)
    [ -n "$victim" ] && kill -STOP "$victim"
    wait "$job"
    echo "hang: rank 1 (pid ${victim:-not found}) stopped at iteration 10; the job ended after $(awk -v a="$t_stop" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, exit $(cat "$dest/hang.rc")" | tee "$dest/hang_summary.txt"
    grep -h "no progress" "$dest/hang.txt" | head -n 1 | tee -a "$dest/hang_summary.txt"
fi

if has small; then
    for m in megatron-lm zero-offload zero-infinity l2l stronghold; do run "$m-l2" 2 -m "$m"; done
fi
has megatron && run megatron-lm-l36 36 -m megatron-lm
has offload && run zero-offload-l117 117 -m zero-offload
has stronghold && run stronghold-l118-w4 118 -m stronghold -w 4
has infinity && run zero-infinity-l117 117 -m zero-infinity
has l2l && run l2l-l119 119 -m l2l
if has nvme; then
    mkdir -p /tmp/aebench-nvme && run zero-infinity-nvme-l32 32 -m zero-infinity --offload nvme --nvme-dir /tmp/aebench-nvme
    rm -rf /tmp/aebench-nvme
fi
cat "$table"
