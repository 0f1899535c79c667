#!/usr/bin/env python3
"""Table of bench/stronghold_gpu.sh's runs, each beside its roofline bound.

Reads OUT/results/*.json (aebench run records) and OUT/bandwidth.txt (build/bench/host_adam
measured in the same call) and prints a markdown table:

  bound = max(GPU compute busy time, bytes to the GPU / host->gpu bandwidth,
              bytes from the GPU / gpu->host bandwidth, host-Adam bytes / host bandwidth)

with host-Adam bytes = 28 B per parameter updated (read param, grad, m, v; write param, m,
v) and host bandwidth the best "update" rate (read + write in place, the access pattern of
Adam) of the same run.  The compute time is the engine's own measured compute-stream busy
time of the last iteration.  Usage: stronghold_summary.py OUT
"""
import glob
import json
import os
import re
import sys


def bandwidths(path):
    bw = {}
    try:
        text = open(path).read()
    except OSError:
        return bw
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", text, re.M)
    if rows:
        bw["triad"] = max(float(r[2]) for r in rows)
        bw["update"] = max(float(r[3]) for r in rows)
    adam = re.findall(r"^\s+(avx512|avx2|scalar)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", text, re.M)
    if adam:
        bw["adam"] = max(float(a[3]) for a in adam)
    m = re.search(r"host->gpu\s+([\d.]+)", text)
    if m:
        bw["h2d"] = float(m.group(1))
    m = re.search(r"gpu->host\s+([\d.]+)", text)
    if m:
        bw["d2h"] = float(m.group(1))
    return bw


def gib(x):
    return x / 2**30


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest"
    bw = bandwidths(os.path.join(out, "bandwidth.txt"))
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "results", "*.json"))):
        try:
            j = json.load(open(path))
        except (OSError, ValueError):
            continue
        if "method" not in j or "config" not in j:
            continue
        runs.append(j)
    print("# stronghold on %s" % open(os.path.join(out, "device.txt")).readline().strip()
          if os.path.exists(os.path.join(out, "device.txt")) else "# stronghold")
    print()
    if bw:
        print("Measured in the same call: host->gpu %.1f GB/s, gpu->host %.1f GB/s, host memory "
              "triad %.1f GB/s, in-place update %.1f GB/s, CPU Adam %.1f GB/s (%.0f%% of update)."
              % (bw.get("h2d", 0), bw.get("d2h", 0), bw.get("triad", 0), bw.get("update", 0),
                 bw.get("adam", 0), 100 * bw.get("adam", 0) / bw["update"] if bw.get("update") else 0))
        print()
    base = {}
    for j in runs:
        if j["method"] == "megatron-lm" and j["status"] == "ok":
            base[j["config"]["layers"]] = j["summary"]["median_ms"]
    print("| run | status | ms/it | samples/s | vs megatron | TFLOP/s | GPU peak / plan GiB | host peak GiB "
          "| busy ms: compute / h2d / d2h / host Adam | bound ms | ms / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for j in runs:
        c = j["config"]
        gl = j["memory"]["gpu"]["limit_bytes"]
        hl = j["memory"]["host"]["limit_bytes"]
        name = "%s l%d w%s" % (j["method"], c["layers"], c["window"])
        if c.get("clip_grad", 1) <= 0:
            name += " clip 0"
        elif c.get("clip_grad", 1) != 1:
            name += " clip %g" % c["clip_grad"]
        if j["method"] == "stronghold" and c.get("clip_grad", 1) > 0 and "clip_speculate" in c:
            name += " speculate %s" % ("auto" if c["clip_speculate"] < 0 else c["clip_speculate"])
        if c.get("placement", "auto") != "auto":
            name += " " + c["placement"]
        if gl < 100 * 2**30 and j["method"] != "megatron-lm" and gl < 60 * 2**30:
            name += " (GPU %.0fG, host %.0fG)" % (gib(gl), gib(hl))
        if j["status"] != "ok":
            print("| %s | %s: %s | | | | | | | | | |" % (name, j["status"], j.get("message", "")[:80]))
            continue
        s = j["summary"]
        med = s["median_ms"]
        ratio = ("%.2fx" % (base[c["layers"]] / med)) if c["layers"] in base and j["method"] != "megatron-lm" else ""
        mem = j["memory"]
        last = j["iterations"][-1]
        busy = last.get("busy_ms")
        bound = ""
        over = ""
        busy_txt = ""
        if busy:
            busy_txt = "%.0f / %.0f / %.0f / %.0f" % (busy["compute"], busy["h2d"], busy["d2h"], busy["host_adam"])
            terms = [busy["compute"]]
            if bw.get("h2d"):
                terms.append(last["bytes_h2d"] / (bw["h2d"] * 1e9) * 1e3)
            if bw.get("d2h"):
                terms.append(last["bytes_d2h"] / (bw["d2h"] * 1e9) * 1e3)
            if bw.get("update"):
                terms.append(last["host_adam_params"] * 28 / (bw["update"] * 1e9) * 1e3)
            b = max(terms)
            bound = "%.0f" % b
            over = "%.2f" % (med / b)
        print("| %s | ok | %.1f | %.2f | %s | %.1f | %.2f / %.2f | %.2f | %s | %s | %s |" % (
            name, med, s["samples_per_second"], ratio, s["model_tflops"],
            gib(mem["gpu"]["peak_bytes"]), gib(mem["gpu"]["planned_bytes"]),
            gib(mem["host"]["peak_bytes"]), busy_txt, bound, over))


if __name__ == "__main__":
    main()
