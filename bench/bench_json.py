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
