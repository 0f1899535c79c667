#!/usr/bin/env python3
"""The tables of bench/dp_scaling_gpu.sh, from its scratch directory (res_<tag>/ and
pytorch.jsonl), and the record of its runs that bench/dp_floor.py reads.

  dp_scaling_summary.py OUT               one rank against two (ZeRO-0 and ZeRO-3 with graphs,
                                          ZeRO-0 without), each the median over the rounds of the
                                          run's steady-state median, beside PyTorch on one GPU and
                                          DDP on two from the same call
  dp_scaling_summary.py OUT --ctas        the ctas part: each NCCL_MAX_CTAS and stage against the
                                          one-rank step
  dp_scaling_summary.py OUT --jsonl FILE  each run's steady-state figures, a JSON line each, to FILE
"""
import glob
import json
import re
import statistics
import sys


def records(out):
    """Each run of the call that ended ok: its tag (the res_<tag> folder) and steady-state figures."""
    rows = []
    for path in sorted(glob.glob(f"{out}/res_*_r*/*.json")):
        d = json.load(open(path))
        if d.get("status") != "ok":
            continue
        s = d["summary"]
        its = d["iterations"][s["steady_from_iteration"] - 1:]
        med = lambda k: round(statistics.median(i.get(k, 0) for i in its), 2)
        clock = d.get("gpu_clock", {})
        rows.append({"tag": re.search(r"res_(.+?)/", path)[1], "world": d["world"],
                     "steady_median_ms": round(s["steady_median_ms"], 2),
                     "samples_per_second": round(s["samples_per_second"], 3),
                     "forward_ms": med("forward_ms"), "backward_ms": med("backward_ms"),
                     "optimizer_ms": med("optimizer_ms"), "collectives_busy_ms": med("collectives_busy_ms"),
                     "collectives_exposed_ms": med("collectives_exposed_ms"),
                     "bytes_collectives": med("bytes_collectives"), "sm_mhz_median": clock.get("sm_mhz_median"),
                     "power_cap_share": round(clock.get("power_cap_share", 0), 3),
                     "graphs_note": next((n for n in d.get("engine_notes", []) if n.startswith("graphs")), None),
                     "gpu_peak_over_plan": d["memory"]["gpu"].get("peak_over_plan")})
    return rows


def by_tag(rows, prefix):
    """{tag less its round: [record, ...]} of the runs whose tag starts with prefix."""
    got = {}
    for r in rows:
        if r["tag"].startswith(prefix):
            got.setdefault(re.sub(r"_r\d+$", "", r["tag"][len(prefix):]), []).append(r)
    return got


def med(runs, key):
    return statistics.median(r[key] for r in runs) if runs else None


def scaling_table(out, rows):
    torch = {}
    for line in open(f"{out}/pytorch.jsonl") if glob.glob(f"{out}/pytorch.jsonl") else []:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if "ms" in t:
            torch[(t["layers"], t["math"], t.get("world", 1))] = t
    got = by_tag([r for r in rows if re.match(r"l\d+_", r["tag"])], "")
    print("| model | math | 1 rank ms (samples/s) | 2 ranks ZeRO-0 ms, samples/s, x1 rank, exposed ms "
          "| ZeRO-3 | ZeRO-0 graphs off | PyTorch 1 GPU samples/s | DDP 2 GPUs samples/s, x1 GPU |")
    print("|---|---|---|---|---|---|---|---|")
    for layers, dt in sorted({(int(t.split("_")[0][1:]), t.split("_")[1]) for t in got}):
        runs = lambda variant: got.get(f"l{layers}_{dt}_{variant}", [])
        one = med(runs("n1"), "samples_per_second")

        def cell(variant):
            rs = runs(variant)
            if not rs:
                return "-"
            ms, sps, ex = med(rs, "steady_median_ms"), med(rs, "samples_per_second"), med(rs, "collectives_exposed_ms")
            rounds = "/".join(f"{r['steady_median_ms']:.1f}" for r in rs)
            return f"{ms:.1f} ({rounds}), {sps:.2f}" + (f", {sps / one:.3f}x" if one else "") + f", {ex:.1f}"
        t1, t2 = torch.get((layers, dt, 1)), torch.get((layers, dt, 2))
        ddp = (f"{t2['samples_per_s']:.2f}" + (f", {t2['samples_per_s'] / t1['samples_per_s']:.3f}x" if t1 else "")
               if t2 else "-")
        print(f"| l{layers} h2048 | {dt} | {med(runs('n1'), 'steady_median_ms') or 0:.1f} ({one or 0:.2f}) | "
              f"{cell('n2s0')} | {cell('n2s3')} | {cell('n2s0nog')} | {t1['samples_per_s'] if t1 else '-'} | {ddp} |")


def ctas_table(rows):
    got = by_tag(rows, "ctas_")
    one = med(got.get("n1", []), "steady_median_ms") or 0
    print(f"| NCCL_MAX_CTAS, stage | ms (rounds) | x one rank ({one:.1f} ms) | exposed ms | backward ms |")
    print("|---|---|---|---|---|")
    for tag, rs in got.items():
        ms = med(rs, "steady_median_ms")
        rounds = "/".join(f"{r['steady_median_ms']:.1f}" for r in rs)
        x = 2 * one / ms if tag != "n1" and ms else 1
        print(f"| {tag} | {ms:.1f} ({rounds}) | {x:.3f} | {med(rs, 'collectives_exposed_ms'):.1f} | "
              f"{med(rs, 'backward_ms'):.1f} |")


def main():
    out, rest = sys.argv[1], sys.argv[2:]
    rows = records(out)
    if rest[:1] == ["--jsonl"]:
        with open(rest[1], "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    elif rest[:1] == ["--ctas"]:
        ctas_table(rows)
    else:
        scaling_table(out, rows)


if __name__ == "__main__":
    main()
