#!/usr/bin/env python3
"""A --search --verify cut short (a GPU call's time limit) as the table it would have printed.

    bench/verify_from_logs.py SEARCH_OUTPUT RESULTS_DIR MACHINE_FILE [TRAINED_JSON]

SEARCH_OUTPUT is what the search printed (its "verify N/M: #rank (picked) command" lines),
RESULTS_DIR the directory its runs wrote their JSONs to (matched to those lines in the order
they were written), MACHINE_FILE the file the search predicted from.  Each run that finished
is predicted again by this tree's ./aebench (bench/replay_predict.py's --predict: the same
model as the search's where the tree is the one that ran) and set beside its measured time, the
median over the engine's steady steps (busy_from_logs.steady_from: a zero-offload --dpu log
from before its steady state began at 8 is taken from 8; its median where the run was shorter
than its warm-up); then
Kendall's tau, how many are within 10%, and the pick against the fastest measured.  With
TRAINED_JSON, the trained runs (rank, picked, command, measured_ms) are written there, which
bench/results keeps instead of the runs' logs.
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import busy_from_logs  # noqa: E402
import replay_predict  # noqa: E402

# (a run whose --iters --verify raised says so after its command)
LINE = re.compile(r"verify \d+/\d+: #(\d+)(?: \((\w+)\))? (aebench .*?)(?: \(--iters \d+: [^)]*\))?$")


def trained(search_output, results_dir):
    lines = [LINE.match(l.rstrip("\n")) for l in open(search_output)]
    lines = [m for m in lines if m]
    logs = sorted(glob.glob(os.path.join(results_dir, "log_*.json")), key=os.path.getmtime)
    rows = []
    for m, f in zip(lines, logs):
        d = json.load(open(f))
        s = d.get("summary", {})
        meas = busy_from_logs.steady_busy(d)["step"] or s.get("median_ms")
        if d.get("status") != "ok" or not meas:
            continue
        rows.append({"rank": int(m.group(1)), "picked": m.group(2) or "top",
                     "command": re.sub(r"--results \S+ ", "", m.group(3)), "measured_ms": meas})
    return rows


def main():
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    rows = trained(sys.argv[1], sys.argv[2])
    if len(sys.argv) == 5:
        json.dump(rows, open(sys.argv[4], "w"), indent=1)
    print("| rank (picked) | configuration | predicted ms | measured ms | error |\n|---|---|---|---|---|")
    pred = []
    for r in rows:
        p = replay_predict.predict(r["command"], sys.argv[3], "/tmp/aebench-verify-from-logs")
        pred.append(p)
        print(f"| #{r['rank']} ({r['picked']}) | {r['command'].split(' -m ', 1)[1]} | {p:.1f} | {r['measured_ms']:.1f} | "
              f"{(p / r['measured_ms'] - 1) * 100:+.1f}% |")
    meas = [r["measured_ms"] for r in rows]
    if len(rows) < 2:
        return
    err = [(p / m - 1) * 100 for p, m in zip(pred, meas)]
    best = min(range(len(rows)), key=lambda i: meas[i])
    print(f"\ntrained {len(rows)}; Kendall's tau {replay_predict.kendall(pred, meas):.3f}; within 10%: "
          f"{sum(abs(e) <= 10 for e in err)} of {len(rows)}; errors {min(err):+.1f}% to {max(err):+.1f}%; the pick "
          f"(#{rows[0]['rank']}) measured {meas[0]:.1f} ms, the fastest #{rows[best]['rank']} {meas[best]:.1f}: the pick "
          f"lost {(meas[0] / meas[best] - 1) * 100:.1f}%")


if __name__ == "__main__":
    main()
