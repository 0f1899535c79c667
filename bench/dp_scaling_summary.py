#!/usr/bin/env python3
"""The table of bench/dp_scaling_gpu.sh: for each model size and math, one rank against two
(ZeRO-0 and ZeRO-3 with graphs, ZeRO-0 without), each the median over the rounds of the run's
steady-state median step, beside PyTorch on one GPU and DDP on two from the same call.

Usage: dp_scaling_summary.py OUT   (OUT: the call's scratch directory: res_<tag>/, pytorch.jsonl)
"""
import glob
import json
import re
import statistics
import sys


def runs(out):
    """{(layers, dtype, variant): [summary, ...]} over the rounds."""
    got = {}
    for path in sorted(glob.glob(f"{out}/res_l*_r*/*.json")):
        m = re.search(r"res_l(\d+)_(bf16|tf32)_(\w+?)_r\d+/", path)
        if not m:
            continue
        d = json.load(open(path))
        if d.get("status") != "ok":
            continue
        got.setdefault((int(m[1]), m[2], m[3]), []).append(d["summary"])
    return got


def main():
    out = sys.argv[1]
    got = runs(out)
    torch = {}
    for line in open(f"{out}/pytorch.jsonl") if glob.glob(f"{out}/pytorch.jsonl") else []:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if "ms" in t:
            torch[(t["layers"], t["math"], t.get("world", 1))] = t
    print("| model | math | 1 rank ms (samples/s) | 2 ranks ZeRO-0 ms, samples/s, x1 rank, exposed ms "
          "| ZeRO-3 | ZeRO-0 graphs off | PyTorch 1 GPU samples/s | DDP 2 GPUs samples/s, x1 GPU |")
    print("|---|---|---|---|---|---|---|---|")
    for layers, dt in sorted({(k[0], k[1]) for k in got}):
        def med(variant, key):
            s = got.get((layers, dt, variant), [])
            return statistics.median(x[key] for x in s) if s else None
        one = med("n1", "samples_per_second")

        def cell(variant):
            ms, sps = med(variant, "steady_median_ms"), med(variant, "samples_per_second")
            if ms is None:
                return "-"
            ex = med(variant, "collectives_exposed_median_ms")
            rounds = "/".join(f"{x['steady_median_ms']:.1f}" for x in got[(layers, dt, variant)])
            return (f"{ms:.1f} ({rounds}), {sps:.2f}" + (f", {sps / one:.3f}x" if one else "") +
                    (f", {ex:.1f}" if ex is not None else ""))
        t1, t2 = torch.get((layers, dt, 1)), torch.get((layers, dt, 2))
        ddp = (f"{t2['samples_per_s']:.2f}" + (f", {t2['samples_per_s'] / t1['samples_per_s']:.3f}x" if t1 else "")
               if t2 else "-")
        print(f"| l{layers} h2048 | {dt} | {med('n1', 'steady_median_ms') or 0:.1f} ({one or 0:.2f}) | {cell('n2s0')} | "
              f"{cell('n2s3')} | {cell('n2s0nog')} | {t1['samples_per_s'] if t1 else '-'} | {ddp} |")


if __name__ == "__main__":
    main()
