#!/usr/bin/env python3
"""The floor of a megatron-lm step, from what the same GPU measured: every layer GEMM at the time
cuBLASLt's best algorithm takes on its shape alone (bench/lt_probe.cu's table), AdamW at the
memory rate the step's own gradient zeroing reached (or --hbm-gbs: a rate measured elsewhere on
the same GPU, for steps that zero too little to measure it; never above AdamW's own time), and every
other op family as --profile measured it.  Says how far each part is from its floor and what
the step, its MFU and its ratio to a reference (torch.compile) would be at the floor: what the
kernel set can gain by GEMMs and the update alone, and what must come from the rest.

  python3 bench/step_floor.py PROFILE_JSON LT_PROBE_TXT [--compile-ms MS] [--peak TFLOPS] [--hbm-gbs GBS]

PROFILE_JSON: an `aebench -m megatron-lm --profile` run's JSON (its config gives the shape,
the dtype and --recompute); LT_PROBE_TXT: bench/lt_probe's table from the same machine.
"""
import argparse
import json
import sys

GEMMS = ("qkv", "proj", "fc", "fcproj")
GEMM_FAMILIES = ("matmul_forward", "matmul_gelu_forward", "matmul_backward", "matmul_gelu_backward")


def probe_table(path, math):
    """{(direction, product): best ms} for one math ('bf16' or 'tf32')"""
    best, shape = {}, {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] != math:
            continue
        direction, _, product = cells[1].partition(" ")
        try:
            best[(direction, product)] = float(cells[4].split()[0])
            shape[(direction, product)] = tuple(int(x) for x in cells[2].split())
        except ValueError:
            continue
    return best, shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile_json")
    ap.add_argument("lt_probe")
    ap.add_argument("--compile-ms", type=float, default=0, help="the reference's step (ms), e.g. torch.compile's")
    ap.add_argument("--peak", type=float, default=0, help="dense TFLOP/s of the card (default: 989 bf16, 494 TF32)")
    ap.add_argument("--hbm-gbs", type=float, default=0, help="GPU memory rate (GB/s) for AdamW's floor, measured elsewhere on the same card")
    a = ap.parse_args()
    d = json.load(open(a.profile_json))
    c, pr = d["config"], d.get("profile")
    if not pr:
        sys.exit(f"{a.profile_json}: no profile (run with --profile)")
    math = "bf16" if c["dtype"] == "bf16" else "tf32"
    peak = a.peak or (989.0 if math == "bf16" else 494.0)
    best, shape = probe_table(a.lt_probe, math)
    need = [(x, g) for x in ("fwd", "dinp", "dw") for g in GEMMS]
    missing = [f"{x} {g}" for x, g in need if (x, g) not in best]
    if missing:
        sys.exit(f"{a.lt_probe}: no {math} row for {', '.join(missing)}")
    # the probe's forward shapes (m n k: out features, tokens, in features) must be this run's
    C, N = c["hidden"], c["batch"] * c["seq"]
    want = {"qkv": (3 * C, N, C), "proj": (C, N, C), "fc": (4 * C, N, C), "fcproj": (C, N, 4 * C)}
    wrong = [f"fwd {g} {shape[('fwd', g)]} (want {want[g]})" for g in GEMMS if shape[("fwd", g)] != want[g]]
    if wrong:
        sys.exit(f"{a.lt_probe}: probed other shapes than the run's: {'; '.join(wrong)}")
    L = c["layers"]
    forwards = 2 if c["recompute"] == "full" else 1  # full reruns each layer's forward
    layer = forwards * sum(best[("fwd", g)] for g in GEMMS) + sum(best[(x, g)] for x in ("dinp", "dw") for g in GEMMS)
    chunks = c["batch"]  # the head: the logits of one sequence at a time, or all at once
    head = sum(min(best.get((x, "logits x4"), 1e9), chunks * best.get((x, "logits"), 1e9)) for x in ("fwd", "dinp", "dw"))
    ops = {o["op"]: o for o in pr["ops"]}
    ms = lambda f: ops[f]["ms_per_step"] if f in ops else 0.0
    gemm_measured = sum(ms(f) for f in GEMM_FAMILIES)
    gemm_floor = L * layer + head
    # AdamW: fp32 grad read, master, m, v read and written, the bf16 working copy written
    per_param = 4 + 3 * 8 + (2 if math == "bf16" else 0)
    memset = ops.get("memset", {})
    rate = memset["bytes_per_step"] / (memset["ms_per_step"] * 1e-3) if memset.get("ms_per_step") else 0
    basis = "the zeroing's"
    if a.hbm_gbs:
        rate, basis = a.hbm_gbs * 1e9, "the given"
    adam_floor = min(ms("adamw"), d["parameters"] * per_param / rate * 1e3) if rate else ms("adamw")
    rest = {f: ms(f) for f in ops if f not in GEMM_FAMILIES and f != "adamw"}
    gaps = pr["streams"][0]["gaps_ms_per_step"]  # the compute stream's, as the profile measured them
    step = d["summary"]["median_ms"]
    flop_step = d["summary"]["model_tflops"] * step * 1e-3  # model TFLOP per step
    floor = gemm_floor + adam_floor + sum(rest.values()) + gaps
    at_floor = floor * step / pr["step_ms"]  # the profile's own slowdown taken out
    print(f"megatron-lm l{L} h{c['hidden']} b{c['batch']} s{c['seq']} {math}, --recompute {c['recompute']}: "
          f"{step:.1f} ms (the run's median), {pr['step_ms']:.1f} the profiled steps' mean")
    print()
    print("| part | measured ms/step | floor ms/step | basis |")
    print("|---|---|---|---|")
    print(f"| layer and head GEMMs | {gemm_measured:.1f} | {gemm_floor:.1f} | cuBLASLt's best on each shape alone "
          f"({forwards} forward{'s' if forwards > 1 else ''} a layer), {gemm_floor / gemm_measured:.0%} of measured |")
    print(f"| adamw | {ms('adamw'):.1f} | {adam_floor:.1f} | {per_param} B per parameter at {basis} "
          f"{rate / 1e9:.0f} GB/s (at most as measured) |")
    for f, v in sorted(rest.items(), key=lambda kv: -kv[1]):
        if v >= 0.05:
            print(f"| {f} | {v:.1f} | {v:.1f} | as measured |")
    print(f"| gaps (launches, host waits) | {gaps:.1f} | {gaps:.1f} | as measured |")
    print()
    mfu = lambda t: 100 * flop_step / (t * 1e-3) / peak
    print(f"step at the floor of GEMMs and AdamW alone: {at_floor:.1f} ms (measured {step:.1f}), MFU {mfu(at_floor):.1f}% "
          f"(measured {mfu(step):.1f}% of {peak:.0f})")
    if a.compile_ms:
        print(f"against the reference's {a.compile_ms:.1f} ms: {a.compile_ms / step:.2f}x measured, "
              f"{a.compile_ms / at_floor:.2f}x at that floor; 1.25x needs {a.compile_ms / 1.25:.1f} ms, "
              f"{at_floor - a.compile_ms / 1.25:.1f} ms less than that floor from the other parts")
    for target in (45.0, 55.0):
        t = flop_step / (target / 100 * peak) * 1e3
        print(f"MFU {target:.0f}% needs {t:.1f} ms a step")


if __name__ == "__main__":
    main()
