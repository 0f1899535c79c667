#!/usr/bin/env bash
# A change against the code before it, on one GPU, in one call: builds this tree and the base
# tree (carried as .deps/base.tgz, made here by `git archive BASE | gzip >.deps/base.tgz`),
# then runs every line of RUNS (aebench arguments after the shape h2048 b4) with each build in
# turn, ROUNDS times (base, new, base, new, ...: drift hits both alike), and prints the median
# ms/iteration of each build's runs, their ratio, and whether the losses agree.
#   bash bench/ab_commits_gpu.sh "$OUT"      RUNS=$'-m zero-offload -l 32 --dpu\n...' ROUNDS (2) ITERS (8)
# Also the bandwidth table of build/bench/host_adam (this tree's) when HOST_ADAM=1.
set -uo pipefail
dest=${1:-bench/results/latest}
mkdir -p "$dest"
source bench/deps_env.sh
out=$(mktemp -d /tmp/aebench-ab.XXXXXX)
base=$out/base
mkdir -p "$base" && tar xzf .deps/base.tgz -C "$base" || { echo "no .deps/base.tgz"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
make -j16 CUDA=1 MPI=0 aebench $([ -n "${HOST_ADAM:-}" ] && echo bench-tools) >"$out/build_new.txt" 2>&1 ||
    { tail -n 30 "$out/build_new.txt"; exit 1; }
(cd "$base" && make -j16 CUDA=1 MPI=0 aebench >"$out/build_base.txt" 2>&1) ||
    { tail -n 30 "$out/build_base.txt"; exit 1; }
echo "built both in $(( $(date +%s) - t0 )) s"
[ -n "${HOST_ADAM:-}" ] && ./build/bench/host_adam --gib 4 2>&1 | tee "$out/host_adam.txt" | tail -n 14
RUNS=${RUNS:-"-m zero-offload -l 32 --dpu"}
rounds=${ROUNDS:-2}
: >"$out/rows.txt"
while IFS= read -r r; do
    [ -z "$r" ] && continue
    read -r -a args <<<"$r"
    for k in $(seq "$rounds"); do
        for which in base new; do
            bin=./aebench
            [ $which = base ] && bin=$base/aebench
            log="$out/${which}_$(echo "$r" | tr -c 'a-z0-9\n' '_')_$k.txt"
            timeout 200 "$bin" --device cuda -h 2048 -b 4 "${args[@]}" --iters "${ITERS:-8}" \
                --log-interval "${ITERS:-8}" --results "$out/res_$which" >"$log" 2>&1
            echo "$r|$which|$(awk '/done:/ {print $3; exit}' "$log")|$(grep -oE 'loss [0-9.]+ -> [0-9.]+' "$log" | tail -n 1)" >>"$out/rows.txt"
        done
    done
done <<<"$RUNS"
python3 - "$out/rows.txt" <<'PY' | tee "$out/table.md"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    run, which, ms, loss = line.rstrip("\n").split("|")
    d = rows.setdefault(run, {"base": [], "new": [], "loss": {}})
    if ms:
        d[which].append(float(ms))
    d["loss"].setdefault(which, set()).add(loss)
print("| run | base ms (each) | new ms (each) | new / base | losses equal |")
print("|---|---|---|---|---|")
for run, d in rows.items():
    b, n = d["base"], d["new"]
    ratio = "%.3f" % (statistics.median(n) / statistics.median(b)) if b and n else "failed"
    eq = "yes" if d["loss"].get("base") == d["loss"].get("new") and len(d["loss"].get("new", ())) == 1 else "NO"
    print("| %s | %s | %s | %s | %s |" % (run, " ".join("%.1f" % x for x in b), " ".join("%.1f" % x for x in n), ratio, eq))
PY
cp "$out"/table.md "$dest"/ 2>/dev/null
[ -f "$out/host_adam.txt" ] && cp "$out/host_adam.txt" "$dest"/
tar czf "$dest/ab.tgz" -C "$out" --exclude=base . 2>/dev/null
