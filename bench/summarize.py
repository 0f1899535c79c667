#!/usr/bin/env python3
"""Table of a bench/megatron_gpu.sh run: aebench's JSON results beside PyTorch's lines.

MFU uses the dense peak of the GPU for the math used (spec sheets; H100 SXM: fp32 66.9,
TF32 494.7, bf16 989.4 TFLOP/s; H200 the same compute) on the model FLOPs
6 P B T + 12 L B T^2 C (no recompute counted)."""
import glob
import json
import os
import sys

PEAK = {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12}


def flops(L, h, s, b, V=50304):
    P = V * h + s * h + L * (12 * h * h + 13 * h) + 2 * h
    return 6 * P * b * s + 12 * L * b * s * s * h


def main(out):
    rows = {}
    for path in glob.glob(os.path.join(out, "results", "*.json")):
        j = json.load(open(path))
        c = j["config"]
        key = (c["layers"], c.get("math", "fp32") if c["dtype"] == "fp32" else "bf16")
        s = j.get("summary", {})
        rows.setdefault(key, {})["aebench"] = {
            "ms": s.get("median_ms"), "sps": s.get("samples_per_second"),
            "peak": j["memory"]["gpu"]["peak_bytes"], "status": j["status"]}
    for line in open(os.path.join(out, "pytorch.jsonl")):
        if not line.strip():
            continue
        p = json.loads(line)
        rows.setdefault((p["layers"], p["math"]), {})["pytorch"] = {
            "ms": p["ms"], "sps": p["samples_per_s"], "peak": p["peak_bytes"], "status": "ok"}
    dev = open(os.path.join(out, "device.txt")).read().strip().replace("\n", ", ")
    print(f"megatron-lm vs PyTorch eager, h2048 b4 s1024, {dev}\n")
    print("| layers | math | aebench ms/it | PyTorch ms/it | speed-up | aebench samples/s | "
          "PyTorch samples/s | aebench TFLOP/s | MFU | PyTorch MFU | aebench peak GiB | "
          "PyTorch peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (L, math) in sorted(rows):
        r = rows[(L, math)]
        a, p = r.get("aebench"), r.get("pytorch")
        f = flops(L, 2048, 1024, 4)
        am = a["ms"] if a and a["ms"] else None
        pm = p["ms"] if p else None
        cell = lambda v, fmt: (fmt % v) if v is not None else "-"
        print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            L, math, cell(am, "%.1f"), cell(pm, "%.1f"),
            cell(pm / am if am and pm else None, "%.2fx"),
            cell(a["sps"] if a else None, "%.2f"), cell(p["sps"] if p else None, "%.2f"),
            cell(f / (am * 1e-3) / 1e12 if am else None, "%.1f"),
            cell(f / (am * 1e-3) / PEAK[math] * 100 if am else None, "%.1f%%"),
            cell(f / (pm * 1e-3) / PEAK[math] * 100 if pm else None, "%.1f%%"),
            cell(a["peak"] / 2**30 if a else None, "%.2f"),
            cell(p["peak"] / 2**30 if p else None, "%.2f")))

    # The per-op profiles (short separate runs with --profile), when present: the table the
    # run printed on stdout.
    for tag in ("bf16_profile", "tf32_profile"):
        path = os.path.join(out, "aebench_l16_%s.txt" % tag)
        if not os.path.exists(path):
            continue
        lines = open(path).read().splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("  profile (")), None)
        if start is None:
            continue
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
        print("\nl16 %s, %s:\n```" % (tag.split("_")[0], lines[start].strip()))
        print("\n".join(lines[start + 1:end]))
        print("```")

if __name__ == "__main__":
    main(sys.argv[1])
