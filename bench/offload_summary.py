#!/usr/bin/env python3
"""Table of bench/offload_gpu.sh's runs, each beside its bounds.

Reads OUT/results/*.json (aebench run records), OUT/bandwidth.txt (build/bench/host_adam) and
OUT/disk.txt (build/bench/disk_bw), all measured in the same call, and prints a markdown
table.  From the last iteration of each run:

  C  compute-stream busy ms       H  bytes to the GPU / host->gpu bandwidth
  D  bytes from the GPU / gpu->host bandwidth
  A  host-Adam params * 28 B / host in-place update bandwidth (read p, g, m, v; write p, m, v;
     in bf16 also the 2 B working copy it writes: 30 B)
  K  disk bytes read / disk read rate + bytes written / disk write rate
  M  all host-memory traffic of the step / host update bandwidth: the CPU Adam's 28 B per
     param plus every byte the PCIe and disk DMA read from or write to host memory (they
     share the DRAM: with --dpu the Adam runs while the copies stream)

roofline = max(C, H, D, A, K, M): what no schedule can beat.  The schedule bound is what the
engine's own dependencies allow at those rates, the one each engine is held to (15%):

  stronghold          as zero-infinity with clipping (the streamed layers' host Adam waits
                      for the global norm); max(C, H, D, A, K) without
  l2l                 max(C + H + D, A)     (copies are synchronous with compute by design;
                                             the host Adam overlaps)
  zero-offload        max(C, D) + max(A, H) (backward streams grads out; the CPU Adam over
                                             everything and the tile-wise copy back follow it)
  zero-offload --dpu  max(C, D, A, H)       (the update overlaps the next step)
  zero-infinity       max(C, H, D, 3/4 C + max(A, K))  with clipping the update waits for
                                             the backward (3/4 of compute: recompute and
                                             backward) and overlaps only the next forward
  (any engine with --clip-grad 0: max of the terms; every schedule bound is at least M)

Where OUT holds runs in both dtypes (offload_gpu.sh with DTYPE=bf16 after the TF32 call), a
second table sets each bf16 run beside its TF32 twin (same engine, size, budget): ms, speed-up
and each one's ms / roofline.

Usage: offload_summary.py OUT
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stronghold_summary import bandwidths  # noqa: E402  (same ceilings file format)


def disk_rates(path):
    """Best write and read GB/s of build/bench/disk_bw's output."""
    try:
        text = open(path).read()
    except OSError:
        return None, None
    w = [float(x) for x in re.findall(r"write\D{0,40}?([\d.]+)\s*GB/s", text)]
    r = [float(x) for x in re.findall(r"read\D{0,40}?([\d.]+)\s*GB/s", text)]
    return (max(w) if w else None), (max(r) if r else None)


def gib(x):
    return x / 2**30


def terms(last, bw, disk_w, disk_r, bf16=False):
    adam_bytes = 30 if bf16 else 28
    busy = last.get("busy_ms") or {}
    t = {"C": busy.get("compute", 0.0)}
    t["H"] = last.get("bytes_h2d", 0) / (bw["h2d"] * 1e9) * 1e3 if bw.get("h2d") else 0.0
    t["D"] = last.get("bytes_d2h", 0) / (bw["d2h"] * 1e9) * 1e3 if bw.get("d2h") else 0.0
    t["A"] = last.get("host_adam_params", 0) * adam_bytes / (bw["update"] * 1e9) * 1e3 if bw.get("update") else 0.0
    k = 0.0
    if disk_r and last.get("bytes_disk_read"):
        k += last["bytes_disk_read"] / (disk_r * 1e9) * 1e3
    if disk_w and last.get("bytes_disk_write"):
        k += last["bytes_disk_write"] / (disk_w * 1e9) * 1e3
    t["K"] = k
    host_bytes = (last.get("host_adam_params", 0) * adam_bytes + last.get("bytes_h2d", 0) + last.get("bytes_d2h", 0)
                  + last.get("bytes_disk_read", 0) + last.get("bytes_disk_write", 0))
    t["M"] = host_bytes / (bw["update"] * 1e9) * 1e3 if bw.get("update") else 0.0
    return t


def schedule_bound(method, cfg, t):
    C, H, D, A, K, M = t["C"], t["H"], t["D"], t["A"], t["K"], t["M"]
    if cfg.get("clip_grad", 1.0) <= 0:
        return max(C, H, D, A, K, M)
    if method == "l2l":
        return max(C + H + D, A, M)
    if method == "zero-offload":
        if cfg.get("dpu"):
            return max(C, D, A, H, M)
        return max(max(C, D) + max(A, H), M)
    if method in ("zero-infinity", "stronghold"):
        return max(C, H, D, 0.75 * C + max(A, K), M)
    return None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest"
    bw = bandwidths(os.path.join(out, "bandwidth.txt"))
    disk_w, disk_r = disk_rates(os.path.join(out, "disk.txt"))
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "results", "*.json"))):
        try:
            j = json.load(open(path))
        except (OSError, ValueError):
            continue
        if "method" in j and "config" in j:
            runs.append(j)
    dev = os.path.join(out, "device.txt")
    print("# offload engines on %s" % (open(dev).readline().strip() if os.path.exists(dev) else "?"))
    print()
    print("Measured in the same call: host->gpu %.1f GB/s, gpu->host %.1f GB/s, host in-place update "
          "%.1f GB/s, CPU Adam %.1f GB/s, disk write %s GB/s, read %s GB/s." % (
              bw.get("h2d", 0), bw.get("d2h", 0), bw.get("update", 0), bw.get("adam", 0),
              "%.2f" % disk_w if disk_w else "?", "%.2f" % disk_r if disk_r else "?"))
    print()
    def budget_key(j):
        """Runs under an emulated budget compare with megatron-lm under the same budget."""
        gl = j["memory"]["gpu"]["limit_bytes"]
        return (j["config"]["layers"], round(gib(gl)) if gl < 60 * 2**30 else "native",
                j["config"].get("dtype", "fp32"))

    base = {}
    for j in runs:
        if j["method"] == "megatron-lm" and j["status"] == "ok":
            base[budget_key(j)] = j["summary"]["median_ms"]
    print("| run | B params | status | ms/it | samples/s | TFLOP/s | vs megatron | GPU peak/plan GiB "
          "| host peak/plan GiB | disk peak/plan GiB | busy C/H2D/D2H/Adam/disk ms | roofline | schedule "
          "bound | ms / bound |")
    print("|" + "---|" * 14)
    twins = {}  # (name without dtype) -> {dtype: (ms, roofline)}
    largest = {}  # (name without size or dtype, dtype) -> (layers, samples/s, B params) of its largest run
    for j in runs:
        c = j["config"]
        mem = j["memory"]
        gl, hl = mem["gpu"]["limit_bytes"], mem["host"]["limit_bytes"]
        name = "%s l%d" % (j["method"], c["layers"])
        if j["method"] == "stronghold":
            name += " w%s" % c["window"]
        if c.get("dpu"):
            name += " --dpu"
        if c.get("offload") == "nvme":
            name += " nvme"
        if c.get("clip_grad", 1) <= 0:
            name += " clip 0"
        if gl < 60 * 2**30:
            name += " (%.0fG/%.0fG)" % (gib(gl), gib(hl))
        dt = c.get("dtype", "fp32")
        plain = name
        if dt != "fp32":
            name += " " + dt
        P = j.get("parameters", 0) / 1e9
        if j["status"] != "ok":
            print("| %s | %.2f | %s: %s |%s" % (name, P, j["status"], j.get("message", "")[:90], " |" * 11))
            continue
        s = j["summary"]
        med = s["median_ms"]
        key = budget_key(j)
        vs = "%.2fx" % (base[key] / med) if key in base and j["method"] != "megatron-lm" else ""

        def pp(m):
            if m not in mem:
                return ""
            return "%.2f / %.2f" % (gib(mem[m]["peak_bytes"]), gib(mem[m]["planned_bytes"]))
        last = j["iterations"][-1]
        roof = sched = ratio = busy = ""
        if last.get("busy_ms"):
            t = terms(last, bw, disk_w, disk_r, dt == "bf16")
            b = last["busy_ms"]
            busy = "%.0f / %.0f / %.0f / %.0f / %.0f" % (b["compute"], b["h2d"], b["d2h"], b["host_adam"],
                                                       b.get("disk", 0))
            roof = "%.0f" % max(t.values())
            twins.setdefault(plain, {})[dt] = (med, max(t.values()))
            sb = schedule_bound(j["method"], c, t)
            if sb:
                sched = "%.0f" % sb
                ratio = "%.2f" % (med / sb)
        print("| %s | %.2f | ok | %.1f | %.2f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, P, med, s["samples_per_second"], s["model_tflops"], vs, pp("gpu"), pp("host"),
            pp("disk"), busy, roof, sched, ratio))
        if not last.get("busy_ms"):
            twins.setdefault(plain, {})[dt] = (med, None)
        kind = plain.replace(" l%d" % c["layers"], "", 1)  # (the run without its size)
        if (kind, dt) not in largest or c["layers"] > largest[(kind, dt)][0]:
            largest[(kind, dt)] = (c["layers"], s["samples_per_second"], P)
    pairs = [(n, d) for n, d in sorted(twins.items()) if "fp32" in d and "bf16" in d]
    if pairs:
        print()
        print("bf16 against TF32 (same engine, size and budget; roofline from each run's own bytes):")
        print()
        print("| run | TF32 ms | bf16 ms | bf16 speed-up | TF32 ms / roofline | bf16 ms / roofline |")
        print("|---|---|---|---|---|---|")
        for n, d in pairs:
            (mf, rf), (mb, rb) = d["fp32"], d["bf16"]
            print("| %s | %.1f | %.1f | %.2fx | %s | %s |" % (n, mf, mb, mf / mb, "%.2f" % (mf / rf) if rf else "",
                                                          "%.2f" % (mb / rb) if rb else ""))
    # Under a budget bf16 fits another size (its host working copy, its activations): each
    # dtype's largest run of an engine, and what it trains per second (samples, and parameters
    # times samples: a bigger model per sample counts).
    kinds = sorted({k for k, _ in largest if (k, "fp32") in largest and (k, "bf16") in largest
                    and largest[(k, "fp32")][0] != largest[(k, "bf16")][0]})
    if kinds:
        print()
        print("bf16 against TF32, each at the largest size it was run at:")
        print()
        print("| run | TF32 size, samples/s | bf16 size, samples/s | bf16 / TF32 samples/s | bf16 / TF32 B params x samples/s |")
        print("|---|---|---|---|---|")
        for k in kinds:
            (lf, sf, pf), (lb, sb, pb) = largest[(k, "fp32")], largest[(k, "bf16")]
            print("| %s | l%d, %.2f | l%d, %.2f | %.2fx | %.2fx |" % (k, lf, sf, lb, sb, sb / sf, sb * pb / (sf * pf)))


if __name__ == "__main__":
    main()
