#!/usr/bin/env python3
"""Each run's busy times, predicted against measured: where a prediction's error comes from.

    bench/busy_from_logs.py MACHINE_FILE RESULTS_DIR [RESULTS_DIR ...]

Every run JSON under the RESULTS_DIRs that finished (status ok) and recorded its busy times
(summary.per_rank_busy_ms: every rank's median, the first step left out; a one-rank run: its
iterations' busy_ms) is predicted again by
this tree's ./aebench from MACHINE_FILE: the run's own options (its "settings": what was given)
with --predict --device cpu --machine (the file's rates, no device needed).  For each run it
prints the predicted step against the measured one (the engine's steady-state median), then
per resource (compute, h2d, d2h, the host Adam, collectives) the predicted busy time against
rank 0's over the engine's steady steps (from steady_from_iteration on, as the measured step's
median)
and each rank's as the summary recorded it (per_rank_busy_ms; logs from before it took the
steady steps: every step after the first).  A step predicted right from wrong busy times is two errors that
cancel; this shows which.
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AEBENCH = os.environ.get("AEBENCH", os.path.join(ROOT, "aebench"))
# the run's own options that --predict does not take or that name the GPU machine's paths
DROP = {"results", "iters", "log-interval", "device", "machine", "nvme-dir", "ckpt-dir", "resume"}
# the prediction line's busy figures and the JSON's keys for them
RESOURCES = (("compute", "compute"), ("h2d", "h2d"), ("d2h", "d2h"), ("host adam", "host_adam"),
             ("collectives", "collectives"))


def options_of(run):
    """The run's given options as a command line."""
    out = []
    for key, value in run.get("settings", {}).items():
        if key in DROP or value is False:
            continue
        out.append("--" + key)
        if value is not True:
            out.append(str(value))
    return out


def median(values):
    """statistics.median, None of none."""
    v = list(values)
    return statistics.median(v) if v else None


def steady_from(run):
    """The run's first steady iteration: its summary's, but 8 for zero-offload --dpu logs that
    say 7 (written before the rule left out its second delayed step, which waits for no update
    and is short)."""
    s = run.get("summary", {})
    first = s.get("steady_from_iteration", 2)
    return 8 if first == 7 and run.get("method") == "zero-offload" and run.get("config", {}).get("dpu") else first


def steady_busy(run):
    """The median step and rank 0's median busy times over the engine's steady steps (logs from
    before per_rank_busy_ms took the steady steps have every step after the first there, --dpu's
    undelayed warm-up among them)."""
    its = [it for it in run.get("iterations", []) if it["iteration"] >= steady_from(run)]
    out = {"step": median(it["ms"] for it in its)}
    for _, key in RESOURCES:
        m = median(it.get("collectives_busy_ms", 0) if key == "collectives" else it["busy_ms"].get(key, 0)
                   for it in its if "busy_ms" in it)
        if m is not None:
            out[key] = m
    return out


def predicted(machine, opts):
    """(step ms, {resource: busy ms}) of this tree's prediction, or None with why."""
    p = subprocess.run([AEBENCH, "--predict", "--device", "cpu", "--machine", machine] + opts,
                       capture_output=True, text=True)
    rows = [l for l in p.stdout.splitlines() if l.startswith("predict ")]
    if p.returncode != 0 or not rows:
        return None, (p.stdout + p.stderr).strip().splitlines()[-1:] or ["exit %d" % p.returncode]
    parts = rows[0].split("|")
    busy = {}
    for name, key in RESOURCES:
        m = re.search(r"(?<![a-z])%s ([0-9.]+)" % name, parts[3] if len(parts) > 3 else "")
        if m:
            busy[key] = float(m.group(1))
    return (float(rows[0].split()[2]), busy), None


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    machine, dirs = argv[1], argv[2:]
    shown = 0
    for f in sorted(f for d in dirs for f in glob.glob(os.path.join(d, "log_*.json"))):
        run = json.load(open(f))
        s = run.get("summary", {})
        # (one rank's run records no per_rank_busy_ms: its iterations' busy times are rank 0's)
        ranks = s.get("per_rank_busy_ms") or []
        if run.get("status") != "ok" or not (ranks or any("busy_ms" in it for it in run.get("iterations", []))):
            continue
        opts = options_of(run)
        got, why = predicted(machine, opts)
        label = " ".join(o for o in opts if o not in ("--device",))
        if got is None:
            print("%s: not predicted (%s)" % (label, why[0]))
            continue
        step, busy = got
        steady = steady_busy(run)
        measured = steady["step"] or s.get("median_ms")
        print("\n%s (steady from iteration %d)\n" % (label, steady_from(run)))
        print("| | predicted ms | rank 0, steady steps |" + "".join(" rank %d, recorded |" % r["rank"] for r in ranks))
        print("|---|---|---|" + "---|" * len(ranks))
        print("| step | %.1f | %s (%+.1f%%) |" % (step, "%.1f" % measured, 100 * (step / measured - 1)) +
              " |" * len(ranks))
        for _, key in RESOURCES:
            print("| %s | %.1f | %s |" % (key, busy.get(key, 0), "%.1f" % steady[key] if key in steady else "-") +
                  "".join(" %.1f |" % r.get(key, 0) for r in ranks))
        shown += 1
    print("\n%d run(s) with their busy times" % shown)
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
