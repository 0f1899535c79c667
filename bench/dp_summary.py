#!/usr/bin/env python3
"""The table of bench/dp_gpu.sh: megatron-lm --zero-stage 0-3 at N = 1 and 2 ranks against
PyTorch (one GPU) and PyTorch DDP (two), from one call's results folder.

Usage: dp_summary.py OUT   (OUT holds res_n{1,2}_s{stage}/*.json and pytorch.jsonl)
"""
import glob
import json
import statistics
import sys


def load(out, tag):
    files = glob.glob(f"{out}/res_{tag}/*.json")
    if not files:
        return None
    j = json.load(open(files[0]))
    return j if j.get("status") == "ok" else None


def main():
    out = sys.argv[1]
    try:
        torch = [json.loads(l) for l in open(f"{out}/pytorch.jsonl") if l.strip()]
    except OSError:
        torch = []
    pt1 = next((t for t in torch if t.get("world", 1) == 1), None)
    ddps = {t.get("world"): t for t in torch if t.get("world", 1) > 1}
    gib = 1024 ** 3
    print("| engine | N | ms/it | samples/s | vs N=1 | vs PyTorch | GPU peak / plan per rank (GiB) "
          "| collectives busy ms/it | GB/it handed to collectives |")
    print("|---|---|---|---|---|---|---|---|---|")
    if pt1:
        print(f"| PyTorch eager | 1 | {pt1['ms']:.1f} | {pt1['samples_per_s']:.2f} | | | "
              f"{pt1['peak_bytes'] / gib:.2f} | | |")
    for w, ddp in sorted(ddps.items()):
        r = ddp["samples_per_s"] / pt1["samples_per_s"] if pt1 else float("nan")
        print(f"| PyTorch DDP | {w} | {ddp['ms']:.1f} | {ddp['samples_per_s']:.2f} | {r:.2f}x | | "
              f"{ddp['peak_bytes'] / gib:.2f} | | |")
    for st in range(4):
        if not glob.glob(f"{out}/res_n*_s{st}"):
            continue
        base = load(out, f"n1_s{st}")
        for n in (1, 2, 4, 8):
            if not glob.glob(f"{out}/res_n{n}_s{st}"):
                continue
            j = load(out, f"n{n}_s{st}")
            if not j:
                print(f"| megatron-lm ZeRO-{st} | {n} | failed | | | | | | |")
                continue
            s = j["summary"]
            g = j["memory"]["gpu"]
            its = j["iterations"][1:] or j["iterations"]
            busy = [i.get("collectives_busy_ms", 0) for i in its]
            gb = [i.get("bytes_collectives", 0) / 1e9 for i in its]
            scale = f"{s['samples_per_second'] / base['summary']['samples_per_second']:.2f}x" if base else ""
            ref = ddps.get(n) if n > 1 else pt1
            vs = f"{s['samples_per_second'] / ref['samples_per_s']:.2f}x" if ref else ""
            print(f"| megatron-lm ZeRO-{st} | {n} | {s['median_ms']:.1f} | {s['samples_per_second']:.2f} "
                  f"| {scale} | {vs} | {g['peak_bytes'] / gib:.2f} / {g['planned_bytes'] / gib:.2f} "
                  f"| {statistics.median(busy):.1f} | {statistics.median(gb):.2f} |")
    offload_table(out)


def offload_table(out):
    """The offload engines at N = 1 and 2: speed, memory, host Adam and collective time."""
    rows = []
    for name, label in (("zo", "zero-offload"), ("zi", "zero-infinity"), ("l2l", "l2l"), ("sh_auto", "stronghold -w auto"), ("sh_w15", "stronghold -w 15")):
        base = load(out, f"n1_{name}")
        for n in (1, 2, 4, 8):
            j = load(out, f"n{n}_{name}")
            if not j:
                if glob.glob(f"{out}/res_n{n}_{name}"):
                    rows.append(f"| {label} | {n} | failed | | | | | | |")
                continue
            s = j["summary"]
            its = j["iterations"][1:] or j["iterations"]
            busy = lambda k: statistics.median(i.get("busy_ms", {}).get(k, 0) for i in its)
            comm = statistics.median(i.get("collectives_busy_ms", 0) for i in its)
            scale = f"{s['samples_per_second'] / base['summary']['samples_per_second']:.2f}x" if base else ""
            rows.append(f"| {label} | {n} | {s['median_ms']:.1f} | {s['samples_per_second']:.2f} | {scale} "
                        f"| {j['memory']['gpu']['peak_bytes'] / 1024 ** 3:.2f} | {j['memory']['host']['peak_bytes'] / 1024 ** 3:.1f} "
                        f"| {busy('compute'):.0f} / {busy('h2d'):.0f} / {busy('d2h'):.0f} / {busy('host_adam'):.0f} "
                        f"| {comm:.1f} |")
    if rows:
        print()
        print("| engine | N | ms/it | samples/s | vs N=1 | GPU peak GiB per rank | host peak GiB per rank "
              "| busy ms compute / h2d / d2h / host Adam (rank 0) | collectives busy ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))


if __name__ == "__main__":
    main()
