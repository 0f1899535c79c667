"""The bench scripts' common reading of one run's results: bench_run TAG (bench/deps_env.sh)
leaves its log and JSON under OUT/res_TAG/; the newest JSON is the run's record (a job that
relaunched leaves one a launch).  Imported by the scripts' table code:
    sys.path.insert(0, "bench"); from bench_json import load_run
"""
import glob
import json
import os


def load_run(out, tag):
    """The record of run TAG under OUT (a dict), or None where it wrote none."""
    files = sorted(glob.glob(os.path.join(out, "res_" + tag, "log_*.json")))
    return json.load(open(files[-1])) if files else None


def clock_of(run):
    """The run's SM clock beside its steps, "1740 MHz @ 686 W" (rank 0's GPU, the JSON's
    gpu_clock: medians of the busy samples), or "-" where it has none (not a CUDA run, no NVML,
    an older record)."""
    c = (run or {}).get("gpu_clock") or {}
    if not c.get("sampled"):
        return "-"
    return f"{c['sm_mhz_median']:.0f} MHz @ {c['power_w_median']:.0f} W"
