#!/usr/bin/env python3
"""Replay a --search --verify result against today's model, without a GPU.

    bench/replay_predict.py SEARCH_JSON MACHINE_FILE [SEARCH_JSON MACHINE_FILE ...]

Each SEARCH_JSON is what `aebench --search --verify K` wrote on a GPU machine (bench/search_gpu.sh
keeps them under bench/results/*/search_json/), MACHINE_FILE the machine file that search
predicted from.  Every configuration it trained is predicted again by this tree's ./aebench
(`--predict --machine FILE --device cpu`: the file's rates, no device needed) and set beside its
measured time: the error then and now, Kendall's tau over the trained set (cmd/search.c's
tau-b), how many are within 10%, and the pick among them (the fastest predicted) against the
fastest measured.  A model change is checked against what was measured before it, and the GPU
calls that follow confirm it on fresh runs (the set was drawn by the old model).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AEBENCH = os.environ.get("AEBENCH", os.path.join(ROOT, "aebench"))
# the run's own options that --predict does not take or that name the GPU machine's paths
DROP_WITH_VALUE = {"--results", "--iters", "--log-interval", "--device", "--nvme-dir", "--ckpt-dir", "--machine"}


def kendall(a, b):
    conc = disc = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ta += 1
            elif db == 0:
                tb += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    den = ((conc + disc + ta) * (conc + disc + tb)) ** 0.5
    return (conc - disc) / den if den else 0.0


def predict(command, machine, results):
    words = command.split()[1:]  # (drop "aebench")
    args, i = [], 0
    while i < len(words):
        if words[i] in DROP_WITH_VALUE:
            i += 2
            continue
        args.append(words[i])
        i += 1
    cmd = [AEBENCH, "--predict", "--machine", machine, "--device", "cpu", "--results", results] + args
    out = subprocess.run(cmd, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("predict "):
            return float(line.split()[2])
    raise SystemExit(f"replay: no prediction from {' '.join(cmd)}:\n{out.stdout}{out.stderr}")


def replay(search_json, machine, results):
    d = json.load(open(search_json))
    configs = {c["rank"]: c for c in d["configs"]}
    rows = []
    for v in d.get("verify", []):
        if not v.get("measured_ms"):
            continue
        c = configs[v["rank"]]
        rows.append((v["rank"], v.get("picked", "random" if v["random"] else "top"), c["command"].split(" -m ")[1], v["predicted_ms"],
                     predict(c["command"], machine, results), v["measured_ms"]))
    print(f"\n### {os.path.relpath(search_json, ROOT)} (machine {os.path.basename(machine)})\n")
    print("| rank | configuration | measured ms | predicted then | error then | predicted now | error now |")
    print("|---|---|---|---|---|---|---|")
    for rank, rnd, what, old, new, meas in rows:
        print(f"| #{rank}{'' if rnd == 'top' else f' ({rnd})'} | {what} | {meas:.1f} | {old:.1f} | {(old / meas - 1) * 100:+.1f}% "
              f"| {new:.1f} | {(new / meas - 1) * 100:+.1f}% |")
    meas = [r[5] for r in rows]
    best = min(meas)
    for label, col in (("then", 3), ("now", 4)):
        pred = [r[col] for r in rows]
        errs = [(p / m - 1) * 100 for p, m in zip(pred, meas)]
        pick = min(range(len(rows)), key=lambda i: pred[i])
        print(f"\n{label}: tau {kendall(pred, meas):.2f}; errors {min(errs):+.1f}% to {max(errs):+.1f}%, "
              f"{sum(abs(e) <= 10 for e in errs)} of {len(errs)} within 10%; pick among the trained #{rows[pick][0]} "
              f"lost {(meas[pick] / best - 1) * 100:.1f}% to the fastest measured", end="")
    print()
    search_again(d, machine, results, {r[2]: r[5] for r in rows})


def search_again(d, machine, results, measured):
    """The search itself again from the same file: its new top five, with what each measured
    where it was trained (the pick of a changed model may be one the GPU call did not run)."""
    s = d["search"]
    cmd = [AEBENCH, "--search", "--machine", machine, "--device", "cpu", "--results", results, "--top", "5",
           "-l", str(s["layers"]), "-h", str(s["hidden"]), "--heads", str(s["heads"]), "--seq", str(s["seq"]),
           "--vocab", str(s["vocab"]), "--dtype", s["dtype"], "--global-batch", str(s["global_batch"])]
    if s.get("world", 1) > 1:
        cmd += ["--ranks", str(s["world"])]
    out = subprocess.run(cmd, capture_output=True, text=True)
    top = [l.split() for l in out.stdout.splitlines() if l.strip()[:1].isdigit() and " -m " in l]
    if not top:
        raise SystemExit(f"replay: no search from {' '.join(cmd)}:\n{out.stdout}{out.stderr}")
    best = min(measured.values())
    print("\nthe search again, its top five now:\n")
    print("| # | configuration | predicted ms | measured ms |")
    print("|---|---|---|---|")
    for w in top:
        line = " ".join(w)
        what = line.split(" -m ", 1)[1]
        meas = measured.get(what)
        shown = f"{meas:.1f} ({(meas / best - 1) * 100:+.1f}% of the fastest trained)" if meas else "not trained"
        print(f"| {w[0]} | {what} | {float(w[1]):.1f} | {shown} |")


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory(prefix="aebench-replay.") as results:
        for i in range(0, len(argv), 2):
            replay(os.path.abspath(argv[i]), os.path.abspath(argv[i + 1]), results)


if __name__ == "__main__":
    main(sys.argv[1:])
