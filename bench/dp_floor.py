#!/usr/bin/env python3
"""The floor of a two-rank data-parallel step (issue 50), computed from what was measured:
the one-rank step of the same call, the bytes each rank's collectives moved (the run's JSON),
and the machine file's rates at two ranks (--calibrate: each collective alone, and how much a
layer's backward slows with all-reduces beside it, compute_under_collectives = f).

A two-rank step is the one-rank step, less the update a ZeRO stage shards, plus
  - the compute lost beside the collectives: while they run (at least bytes / rate, their
    time alone) the compute runs at 1/f of its speed, so it loses D (1 - 1/f);
  - what cannot hide: the embedding's reduction after the last backward (and at ZeRO-3 the
    embedding's gather before the first forward), at its rate alone.
No schedule can beat it without moving fewer bytes or slowing the compute less beside them.

Usage: dp_floor.py RESULTS_DIR   (runs.jsonl and machine_tf32.json / machine_bf16.json in it)
"""
import json
import statistics
import sys

VOCAB, HIDDEN, SEQ = 50304, 2048, 1024  # the padded vocabulary the runs used (GPT-2's, to 128)


def main():
    d = sys.argv[1]
    runs = [json.loads(x) for x in open(f"{d}/runs.jsonl")]
    ok = [r for r in runs if "steady_median_ms" in r and r["tag"].startswith("l")]
    print("| model, math | stage | one rank ms | floor ms (x one rank) | measured ms (x) | measured over floor |"
          " compute lost beside the collectives: floor / measured ms | exposed ms: floor / measured |")
    print("|---|---|---|---|---|---|---|---|")
    for layers, dt in sorted({(int(r["tag"].split("_")[0][1:]), r["tag"].split("_")[1]) for r in ok}):
        m = json.load(open(f"{d}/machine_{dt}.json"))
        c = next(x for x in m["collectives"] if x["world"] == 2)
        f = c["compute_under_collectives"]
        one = [r for r in ok if r["tag"].startswith(f"l{layers}_{dt}_n1_")]
        t1 = statistics.median(r["steady_median_ms"] for r in one)
        opt1 = statistics.median(r["optimizer_ms"] for r in one)
        embed_bytes = (VOCAB + SEQ) * HIDDEN * 4.0  # the embedding block's fp32 gradient
        for stage in (0, 3):
            two = [r for r in ok if r["tag"].startswith(f"l{layers}_{dt}_n2s{stage}_")]
            if not two:
                continue
            t2 = statistics.median(r["steady_median_ms"] for r in two)
            moved = statistics.median(r["bytes_collectives"] for r in two)
            busy = statistics.median(r["collectives_busy_ms"] for r in two)
            exposed = statistics.median(r["collectives_exposed_ms"] for r in two)
            if stage == 0:
                alone = moved / (c["all_reduce_gbs"] * 1e6)
                tail = embed_bytes / (c["all_reduce_gbs"] * 1e6)
                saved = 0.0
            else:
                # half the bytes counted are the fp32 reduce-scatters, half the gathers (two of
                # the working weights a step: bf16 2 bytes, TF32 4) -- split by the step's makeup
                w = 2.0 if dt == "bf16" else 4.0
                rs_share = 4.0 / (4.0 + 2 * w)
                alone = moved * rs_share / (c["reduce_scatter_gbs"] * 1e6) + moved * (1 - rs_share) / (c["all_gather_gbs"] * 1e6)
                tail = embed_bytes / (c["reduce_scatter_gbs"] * 1e6) + embed_bytes * w / 4 / (c["all_gather_gbs"] * 1e6)
                saved = opt1 / 2  # each rank updates half
            lost = alone * (1 - 1 / f)
            floor = t1 - saved + lost + tail
            print(f"| l{layers} h2048, {dt} | {stage} | {t1:.1f} | {floor:.1f} ({2 * t1 / floor:.3f}x) | "
                  f"{t2:.1f} ({2 * t1 / t2:.3f}x) | {100 * (t2 / floor - 1):+.1f}% | "
                  f"{lost:.1f} (f {f:.3f}, {alone:.1f} ms alone) / {busy * (1 - 1 / f):.1f} ({busy:.1f} ms busy) | "
                  f"{tail:.1f} / {exposed:.1f} |")


if __name__ == "__main__":
    main()
