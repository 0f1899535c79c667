#!/usr/bin/env bash
# Issue 33 on one GPU: the offload engines with the artifact's clip (--clip-grad 1.0, which
# binds in every step of the synthetic data) beside the bound of the clipped schedule the run
# prints (cmd/bound.h), and start-up with default flags, today's code against OLD_TREE's (a
# `git archive` of the commit before, built in a copy), h2048 b4 TF32.  Parts (PARTS, a comma
# list; default all but largest):
#   startup  stronghold l100 -w 15, default flags, 3 iterations: old and new (setup line, time
#            to the first step, host memory in the plan and at its peak, the bound)
#   l32      stronghold l32 -w 15 with clip 1.0 / 0 / 1000 (never binds), 8 iterations
#   l64      stronghold l64 -w auto under the V100 budgets (32G GPU, 90G host): clip 1.0 / 0
#   others   l2l and zero-infinity l32, clip 1.0 / 0
#   case2    (not in the default) case 2's sizes under the V100 budgets, clip 1.0: l2l l119,
#            zero-infinity l116, stronghold l119 and its own largest (CASE2_LARGEST, 144)
#   largest  --search --largest --offload cpu under the V100 budgets (calibrated here at
#            b 1, 2, 4) and its pick trained 3 iterations: the size it answers trains
# AB=1: the l32, l64 and others parts with OLD_TREE's binary too (tags old_*), one after the
# other on the same machine.
#   git archive -o .deps/old_tree.tar COMMIT    # here, before the call
#   PARTS=startup,l32,l64 bash bench/clip_bound_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
parts=${PARTS:-startup,l32,l64,others}
has() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
out=$(mktemp -d /tmp/aebench-clip.XXXXXX)
mkdir -p "$dest"
source bench/deps_env.sh
finish() {
    tar czf "$dest/bench.tgz" -C "$out" --exclude='*.bin' . 2>/dev/null
    cp "$out"/table.md "$dest"/ 2>/dev/null
}
trap finish EXIT
machine_info | tee "$out/device.txt"
t0=$(date +%s)
bench_cuda_build aebench
OLD_TREE=${OLD_TREE:-.deps/old_tree.tar}
old=/tmp/aebench-old-tree
if { has startup || [ -n "${AB:-}" ]; } && [ -f "$OLD_TREE" ] && [ ! -x "$old/aebench" ]; then
    mkdir -p "$old" && tar -xf "$OLD_TREE" -C "$old"
    (cd "$old" && make -j16 CUDA=1 MPI=0 aebench >"$out/build_old.txt" 2>&1) || { tail -n 20 "$out/build_old.txt"; exit 1; }
fi
echo "builds: $(($(date +%s) - t0)) s"

run() { # tag binary aebench-arguments...
    local tag=$1 bin=$2
    shift 2
    SECONDS=0
    timeout 300 "$bin" --device cuda -h 2048 -b 4 --log-interval 1 --results "$out/res_$tag" "$@" >"$out/$tag.txt" 2>&1
    local rc=$?
    echo "$SECONDS" >"$out/res_$tag.wall_s" 2>/dev/null
    echo "-- $tag (exit $rc, ${SECONDS} s): $(grep -hE '^  (setup|done|bound|clip-grad)|clip-speculate: [0-9]+ of|OUT OF|FAILED' "$out/$tag.txt" |
        sed 's/^  //' | tr '\n' ' ' | cut -c1-600)"
}
if has startup; then
    [ -x "$old/aebench" ] && run startup_old "$old/aebench" -m stronghold -l 100 -w 15 --iters 3
    run startup_new ./aebench -m stronghold -l 100 -w 15 --iters 3
fi
bins=(new ./aebench)
[ -n "${AB:-}" ] && [ -x "$old/aebench" ] && bins=(old "$old/aebench" new ./aebench)
for ((b = 0; b < ${#bins[@]}; b += 2)); do
    v=${bins[b]} bin=${bins[b + 1]}
    p=""
    [ "$v" = old ] && p=old_
    if has l32; then
        for c in 1.0 0 1000; do run "${p}l32_clip$c" "$bin" -m stronghold -l 32 -w 15 --iters 8 --clip-grad $c; done
    fi
    if has l64; then
        for c in 1.0 0; do
            run "${p}l64_clip$c" "$bin" -m stronghold -l 64 -w auto --gpu-mem-limit 32G --cpu-mem-limit 90G --iters 6 --clip-grad $c
        done
    fi
    if has others; then
        for e in l2l zero-infinity; do
            for c in 1.0 0; do run "${p}${e}_clip$c" "$bin" -m $e -l 32 --iters 6 --clip-grad $c; done
        done
    fi
    if has case2; then
        # case 2's sizes under the V100 budgets with the artifact's clip: the baselines' largest
        # (l2l l119, where the paper compares) and stronghold there and at its own largest
        # (CASE2_LARGEST, default 144: --predict --find-max's answer on the H100s)
        for e in "l2l 119" "zero-infinity 116" "stronghold 119" "stronghold ${CASE2_LARGEST:-144}"; do
            read -r en el <<<"$e"
            w=()
            [ "$en" = stronghold ] && w=(-w auto)
            run "${p}case2_${en}_l$el" "$bin" -m "$en" -l "$el" "${w[@]}" --gpu-mem-limit 32G --cpu-mem-limit 90G --iters 4 \
                --clip-grad 1.0
        done
    fi
done
if has largest; then
    for b in 1 2 4; do
        ./aebench --calibrate --device cuda -h 2048 --global-batch 4 -b $b --results "$out/cal" >>"$out/calibrate.txt" 2>&1
    done
    ./aebench --search --largest --device cuda -h 2048 --global-batch 4 --gpu-mem-limit 32G --cpu-mem-limit 90G \
        --offload cpu --results "$out/cal" --top 1 >"$out/largest.txt" 2>&1
    grep -E "^search: (the largest|largest)" "$out/largest.txt"
    cmd=$(grep -E "^ +1 +[0-9]" "$out/largest.txt" | grep -oE "aebench .*" | head -n 1)
    if [ -n "$cmd" ]; then
        read -r -a c <<<"${cmd#aebench }"
        echo "largest pick: $cmd"
        run largest_pick ./aebench "${c[@]}" --iters 3
    fi
fi
echo "total: $(($(date +%s) - t0)) s"
# the table: each run's median, its bounds, the clip, speculation, setup and host memory
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
print("| run | median ms | roofline ms | clipped bound ms | ms / bound | clip | clipped steps | setup s | pinned GiB | s per pinned GiB | wall s | host plan GiB | host peak GiB | speculation |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for res in sorted(glob.glob(os.path.join(out, "res_*"))):
    if not os.path.isdir(res): continue
    f = sorted(glob.glob(os.path.join(res, "*.json")))
    if not f: continue
    d = json.load(open(f[-1])); s = d.get("summary", {}); st = d.get("setup", {}); m = d.get("memory", {}).get("host", {})
    tag = os.path.basename(res)[4:]
    w = res + ".wall_s"
    wall = open(w).read().strip() if os.path.exists(w) else ""
    spec = next((n.split("--clip-speculate: ")[1][:90] for n in d.get("engine_notes", []) if "--clip-speculate: " in n and " of " in n), "")
    g = lambda k, f="%.1f": (f % s[k]) if k in s else "-"
    pg = st.get("pinned_host_bytes", 0) / 2**30; ps = st.get("pinned_host_ms", 0) / 1e3
    print(f"| {tag} | {g('median_ms')} | {g('roofline_ms')} | {g('clipped_bound_ms')} | {g('ms_over_bound', '%.2f')} | "
          f"{s.get('clip_grad', '-')} | {s.get('clipped_steps', '-')}/{s.get('iterations_run', '-')} | {st.get('total_ms', 0) / 1e3:.1f} | "
          f"{pg:.1f} | {ps / pg if pg else 0:.3f} | {wall} | {m.get('planned_bytes', 0) / 2**30:.1f} | {m.get('peak_bytes', 0) / 2**30:.1f} | {spec} |")
PY
