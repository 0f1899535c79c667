#!/usr/bin/env python3
"""A seeded fuzz campaign of aebench's inputs with an exact-ending oracle (issues 29, 47), run
by tests/run.sh.

Every input is built to have one known ending, and says which:
  - valid inputs, drawn from a grammar of valid values for each option (the constraints of
    aebench --help and cmd/cli.c, cmd/aebench.c, the engines' checks): a --dry-run, a
    --predict with the machine file --calibrate wrote here, a --search, a config or run list,
    or a tiny real run (one to three iterations of a one-to-three-layer model).  They must
    end 0; a dry run or a prediction writes nothing; a real run leaves its log and its JSON,
    which parses and says "status": "ok".
  - a valid input plus exactly one fault from a catalogue (FAULTS), each entry with its ending:
    a bad value of an option's type or range, an unknown flag, a missing value, a stray
    argument, a contradictory pair, an option given to an engine that does not use it, a
    config, run-list or machine-file mutation whose outcome is known, an out-of-budget size
    (exit 3).  Bad input: exit 2 with exactly one line on stderr that names the option or the
    problem (a token, matched loosely), and nothing written.
  - a few costly ones, always run: --ranks 2 jobs (ok: 0; a rank killed by --fail-at: 4;
    refused by the ranks: 2), a signal to a run after it started (128+n, JSON "interrupted";
    or 0 and "ok" when it had finished), links that a second user (nobody) planted at the
    paths aebench writes in a shared results directory (their targets unchanged), a full
    disk (no half-written results, no stdout naming a file that is not there).
Random values (edges, huge numbers, unicode, format strings) stay within each class.
Every input also holds: it ends within TIMEOUT_S, never by a signal (but the one sent) or a
sanitizer report (run it with the ASan/UBSan build), and what stdout names as written exists.
The grammar is checked against aebench --help: an option --help lists that the grammar does
not cover is a failure (drift), so a new option cannot be forgotten.
Entries marked `# issue 47` expect behaviour fixed in issue 47.

The last line is the figure: inputs by class, endings as expected / not, crashes.

Usage: tests/fuzz.py BIN [--seed S] [--inputs N] [--jobs J] [--keep DIR] [--mpi-bin MPIBIN]
  BIN      the binary under test (the ASan/UBSan build: ./aebench-asan)
  MPIBIN   a build with MPI for the --ranks inputs (default ./aebench beside BIN's directory;
           when it cannot run ranks, those inputs are failures that say why)
Exit status: 0 when every input ended as expected, 1 otherwise (the first failures are
printed with the input that caused them, enough to rerun it by hand).
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 60
SHAPE = {"-l": "1", "-h": "32", "--heads": "2", "--seq": "8", "--vocab": "64", "-b": "1"}
TINY = ["--device", "cpu", "-l", "1", "-h", "32", "--heads", "2", "--seq", "8", "--vocab", "64", "-b", "1",
        "--threads", "1"]
# The engines the inputs draw a method from are the registry's (aebench --list-engines, in its
# order: Campaign.engines), so that a new engine is fuzzed without being named here; fewer than
# MIN_ENGINES (the engines there are now) is a failure (drift), not a campaign over nothing.
MIN_ENGINES = 6
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# Values of each class that stay in it: odd but valid text for integers and numbers
WEIRD_TEXT = ["\u00e9\u00e8", "%s%n%x", "a" * 5000, "-", "--", "-l", "0,,1", "../../etc", "\u2603 x", "\x7f"]
BAD_INTS = ["", "abc", "1.5", "0x10", "1e3", "4 ", "4k", "99999999999999999999999", "9223372036854775808",
            "--", "%n"]
BAD_NUMS = ["", "abc", "nan", "inf", "-inf", "1e400", "-1e400", "1,5", "1e", "%s"]
BAD_SIZES = ["", "0", "-1G", "G", "1Z", "100%", "1e400", "0.5", "18446744073709551616G", "1KiBB", "nan"]


def edge_int(rnd, lo, hi):
    """An integer in [lo, hi] as text: an edge, or random; sometimes with a '+' or leading zeros
    (strtoll's base 10 takes them)."""
    v = rnd.choice([lo, hi, lo + 1 if lo < hi else lo, (lo + hi) // 2, rnd.randint(lo, hi)])
    text = str(v)
    r = rnd.random()
    if r < 0.05 and v >= 0:
        text = "+" + text
    elif r < 0.08 and v >= 0:
        text = "00" + text
    return text


def edge_num(rnd, lo, hi):
    """A finite number in [lo, hi] as text, in one of strtod's spellings."""
    v = rnd.choice([lo, hi, rnd.uniform(lo, hi), rnd.uniform(lo, hi)])
    return rnd.choice([repr(v), "%.3e" % v, "%g" % v, "%.17g" % v]) if lo <= float("%g" % v) <= hi else repr(v)


class Ctx:
    """One input under construction: its random stream, its directory, the run's shape and
    method, and what it is (dry, real, predict, search)."""

    def __init__(self, camp, rnd, workdir, mode):
        self.camp, self.rnd, self.workdir, self.mode = camp, rnd, workdir, mode
        self.method = None
        self.layers, self.iters = 1, 1
        self.real = mode == "real"

    def path(self, name):
        return os.path.join(self.workdir, name)

    def mkdir(self, name):
        os.makedirs(self.path(name), exist_ok=True)
        return name


# ---- the grammar: every option --help lists, its valid values and its faults ------------------
# Each option: (valid, bad).  valid(c) gives the option's value text for the input c (None: the
# option does not apply to c's method or mode; True: a switch); bad: the values of its type or
# range that are refused, with the option's name in the message.
def _v_window(c):
    if c.method != "stronghold":
        return None
    return c.rnd.choice(["auto", edge_int(c.rnd, 1, c.layers)])


def _v_gemini(f):
    return lambda c: f(c) if c.method == "gemini" else None


def _v_store(c):
    return c.mkdir("shm")


def _v_job(c):
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
    return "".join(c.rnd.choice(alphabet) for _ in range(c.rnd.randint(1, 40)))


def _v_gemini_every(c):
    # (auto only with interleave, the default mode: the mode is not given with it)
    return c.rnd.choice(["auto", edge_int(c.rnd, 1, c.iters)]) if c.method == "gemini" else None


def _v_offload(c):
    if c.method in ("zero-infinity", "stronghold") and c.rnd.random() < 0.5:
        return "nvme"
    return "cpu" if c.method != "all" else None


def _v_results(c):
    return c.rnd.choice(["r", "r\u00e9sultats", "r %s%n", "a/b/c", "./r", "r" * 200])


GRAMMAR = {
    "method": (None, ["", "bogus", "ALL", "megatron", "l2l ", "\u00e9"]),  # (chosen by the input)
    "layers": (None, BAD_INTS + ["0", "-1", "1048577"]),
    "hidden": (None, BAD_INTS + ["0", "-1", "1048577"]),
    "batch": (None, BAD_INTS + ["0", "-1", "1048577"]),
    "heads": (None, BAD_INTS + ["0", "-1", "1048577"]),
    "seq": (None, BAD_INTS + ["0", "-1", "16777217"]),
    "vocab": (None, BAD_INTS + ["0", "-1", "2147483521"]),
    "window": (_v_window, ["0", "-1", "1000001", "", "x", "1.5"]),
    "iters": (None, BAD_INTS + ["0", "-1", "1000000001"]),
    "log-interval": (lambda c: edge_int(c.rnd, 1, 100), BAD_INTS + ["0", "-1"]),
    "seed": (lambda c: edge_int(c.rnd, 0, 2147483647), BAD_INTS + ["-1", "2147483648"]),
    "results": (None, [""]),
    "device": (None, ["", "gpu", "CPU", "cuda0"] + WEIRD_TEXT[:3]),
    "config": (None, []),  # (the config inputs)
    "dtype": (lambda c: c.rnd.choice(["fp32", "bf16"]) if c.method != "gemini" else "fp32",
              ["", "fp16", "bf16 ", "FP32"]),
    "math": (lambda c: c.rnd.choice(["tf32", "fp32"]), ["", "fp64", "tf"]),
    "gpu-mem-limit": (lambda c: c.rnd.choice(["512M", "1G", "1073741824", "2GiB", "4096MB", "1t", "1.5G"]),
                      BAD_SIZES),
    "cpu-mem-limit": (lambda c: c.rnd.choice(["512M", "1G", "1073741824", "2GiB", "4096MB", "1.5G"]), BAD_SIZES),
    "dry-run": (None, []),
    "setup-notice": (lambda c: edge_int(c.rnd, 0, 100000), BAD_INTS + ["-1", "8G"]),
    "data": (lambda c: c.camp.tokens if c.real else None, []),
    "recompute": (lambda c: c.rnd.choice(["full", "selective", "none"]), ["", "all", "Full", "partial"]),
    "no-ckpt": (lambda c: True, []),
    "graphs": (lambda c: c.rnd.choice(["auto", "off"]), ["", "yes", "1", "ON"]),
    "lr": (lambda c: edge_num(c.rnd, 1e-5, 1.0), BAD_NUMS + ["0", "-1"]),  # (not below the default min-lr)
    "min-lr": (lambda c: edge_num(c.rnd, 0.0, 1e-6), BAD_NUMS + ["-1"]),
    "lr-decay-iters": (lambda c: edge_int(c.rnd, 1, 1000000), BAD_INTS + ["0"]),
    "lr-warmup-fraction": (lambda c: edge_num(c.rnd, 0.0, 1.0), BAD_NUMS + ["1.5", "-0.1"]),
    "weight-decay": (lambda c: edge_num(c.rnd, 0.0, 1.0), BAD_NUMS + ["-1"]),
    "clip-grad": (lambda c: edge_num(c.rnd, 0.0, 10.0), BAD_NUMS + ["-1"]),
    "dpu": (lambda c: True if c.method == "zero-offload" else None, []),
    "offload": (_v_offload, ["", "disk", "gpu"]),
    "nvme-dir": (None, [""]),  # (with --offload nvme: _extra)
    "threads": (None, BAD_INTS + ["-1", "1025"]),
    "ranks": (None, BAD_INTS + ["0", "-1"]),  # (the --ranks inputs)
    "profile": (lambda c: True if c.real else None, []),
    "hosts": (None, []),  # (a fault: without --ranks)
    "global-batch": (None, BAD_INTS + ["0", "-1"]),  # (_extra: a multiple of the batch)
    "save-params": (lambda c: "params.bin" if c.real else None, [""]),
    "fail-at": (None, BAD_INTS + ["0", "-1", "1000000001"]),
    "fail-rank": (None, ["", "x", "-1", "64", "1,,2", "1,", "0 "]),
    "fail-phase": (None, ["", "middle", "Forward"]),
    "fail-kind": (None, ["", "soft", "Hardware"]),
    "zero-stage": (lambda c: c.rnd.choice(["0", "1", "2", "3"]) if c.method == "megatron-lm" else None,
                   BAD_INTS + ["4", "-1"]),
    "pp": (lambda c: "1" if c.method == "megatron-lm" else None, BAD_INTS + ["0", "-1", "4097"]),
    "pp-layers": (None, ["", "0", "1,,2", "a", "-1,2", "1,2,"]),
    "tp": (lambda c: "1" if c.method == "megatron-lm" else None, BAD_INTS + ["0", "-1", "4097"]),
    "sequence-parallel": (None, []),  # (a flag: with --tp T > 1 only)
    "grad-reduce-dtype": (lambda c: "fp32" if c.method == "megatron-lm" else None, ["", "fp16", "BF16"]),
    "gemini-mode": (_v_gemini(lambda c: c.rnd.choice(["none", "naive", "interleave"])), ["", "eager"]),
    "gemini-replicas": (_v_gemini(lambda c: "1"), BAD_INTS + ["0", "-1"]),
    "gemini-placement": (_v_gemini(lambda c: c.rnd.choice(["group", "ring"])), ["", "tree"]),
    "gemini-transport": (_v_gemini(lambda c: c.rnd.choice(["auto", "sendrecv", "read"])), ["", "nccl"]),
    "gemini-store": (_v_gemini(_v_store), [""]),
    "gemini-job": (_v_gemini(_v_job), ["", "a b", "x/y", "%s", "a" * 200, "\u00e9"]),
    "gemini-recover": (None, []),  # (needs a store: not fuzzed as valid)
    "ckpt-dir": (_v_gemini(lambda c: c.mkdir("ckpt")), [""]),
    "clip-speculate": (lambda c: c.rnd.choice(["auto", edge_int(c.rnd, 0, 1000000)])
                       if c.method in ("l2l", "stronghold", "zero-infinity") else None, ["-1", "x", "", "1000001"]),
    "placement": (lambda c: c.rnd.choice(["bottom", "spread", "auto"]) if c.method == "stronghold" else None,
                  ["", "top", "Spread"]),
    "gemini-ckpt-from": (_v_gemini(lambda c: edge_int(c.rnd, 1, c.iters)), BAD_INTS + ["0", "-1"]),
    "ckpt-every": (None, BAD_INTS + ["0", "-1"]),  # (_extra: with --ckpt-dir)
    "gemini-every": (_v_gemini_every, ["0", "-1", "", "x", "1.5"]),
    "gemini-every-share": (_v_gemini(lambda c: c.rnd.choice(["0.01", "0.5", "1"])), BAD_NUMS + ["0", "-1", "1.5"]),
    "gemini-fill": (_v_gemini(lambda c: c.rnd.choice(["0.001", "0.9", "1"])), BAD_NUMS + ["0", "-1", "1.5"]),
    # (not below 10^4 elements: a bucket per few elements makes a real run crawl)
    "reduce-bucket-size": (lambda c: str(c.rnd.choice([10000, 100000, 50000000, c.rnd.randint(10000, 10 ** 8)]))
                           if c.method == "zero-offload" else None, BAD_INTS + ["0", "-1", "1099511627777"]),
    "find-max": (None, []),  # (with --predict: the predict inputs)
    "resume": (lambda c: True if c.real else None, []),
    "calibrate": (None, []),  # (the campaign's start calibrates; a fault: with --predict)
    "predict": (None, []),  # (the predict inputs)
    "machine": (None, [""]),
    "search": (None, []),  # (the search inputs)
    "largest": (None, []),
    "min-samples-per-s": (None, BAD_NUMS + ["0", "-1"]),
    "top": (None, BAD_INTS + ["0", "-1"]),
    "out": (None, [""]),
    "verify": (None, BAD_INTS + ["0", "-1", "1001"]),
    "hang-timeout": (lambda c: c.rnd.choice(["auto", "0", edge_num(c.rnd, 1.0, 604800.0)]),
                     ["", "x", "-1", "nan", "inf", "604801", "1e9"]),
    "list-engines": (None, []),  # (a valid misc input)
    "help": (None, []),
    "version": (None, []),
    "rerun": (None, ["", "missing.json"]),  # (a record's rerun: tests/test_rerun.sh)
    # (the --ranks supervisor's account for a relaunch; a run that restores nothing records none)
    "relaunch-of": (lambda c: "%.3f %.6f %d job j ran 1 s, then rank 1 died; relaunch 1" % (
        c.rnd.uniform(0.0, 1000.0), c.rnd.uniform(0.0, 2e9), c.rnd.randint(0, 100)),
                    ["", "x", "1 2", "1 2 3", "1 2 3 ", "-1 2 3 n", "1 -2 3 n", "1 2 -3 n", "nan 2 0 n", "1  2 0 n",
                     "1 2 0 a\nb", "1e9 2 0 n"]),
    # (the --ranks supervisor's private directory for its ranks: one not there is a rank on
    # another machine, which leaves no notes; one there must be a private directory of ours)
    "job-notes": (lambda c: "/nonexistent-aebench-fuzz/notes.%d" % c.rnd.randint(0, 1 << 30),
                  ["", "notes", "/tmp", "/etc/hostname", "/" + "x" * 5000]),
    # (a sweep's pipe to its child run: none is open in a fuzzed run, and stdio is never one)
    "report-fd": (None, ["", "x", "-1", "0", "1", "2", "5", "999", "1e3"]),
    # (the record --rerun runs again)
    "rerun-of": (lambda c: "%016x /nonexistent-aebench-fuzz/log_%d.json" % (c.rnd.getrandbits(64), c.rnd.randint(0, 99)),
                 ["", "x", "0123456789abcdef", "0123456789abcdef rel.json", "0123456789ABCDEF /a.json",
                  "0123456789abcdef  /a.json", "0123456789abcdef /a\nb", "0123456789abcdef0 /a.json"]),
}
# options whose valid values only make sense in a real or a --ranks run, or that sweep: not
# given to a dry run (a dry run carries --profile; --resume and -m all sweep)
SHORT = {"-m": "method", "-l": "layers", "-h": "hidden", "-b": "batch", "-w": "window"}
# options a run-list or plain config may not hold (typed by hand)
NOT_IN_CONFIG = {"config", "help", "version", "list-engines", "resume", "calibrate", "predict", "search", "largest",
                 "min-samples-per-s", "top", "out", "verify", "rerun", "relaunch-of", "job-notes",
                 "rerun-of", "report-fd"}


class Expect:
    """An input's ending: the exit codes it may end with (one, but where the input can
    legitimately end two ways), the token its one stderr line must hold for exit 2 (a tuple:
    any of them), and what must exist afterwards."""

    def __init__(self, codes, token=None, outputs=None, issue47=False, check=None):
        self.codes = (codes,) if isinstance(codes, int) else tuple(codes)
        self.token = (token,) if isinstance(token, str) else token
        self.outputs = outputs  # "none": nothing written; "run": log + JSON ok in results; "search"
        self.issue47 = issue47
        self.check = check      # f(workdir, code, stdout) -> None or what is wrong


class Campaign:
    def __init__(self, binary, mpi_bin, seed, root, drift_only=False):
        self.bin = binary
        self.help_options = self._help_options()
        self.engines = self._engines()
        if drift_only:
            return
        self.mpi_bin = mpi_bin
        self.seed = seed
        self.root = root
        self.fixtures = os.path.join(root, "fixtures")
        os.makedirs(self.fixtures)
        self.tokens = os.path.join(self.fixtures, "tokens.bin")
        with open(self.tokens, "wb") as out:
            out.write(bytes([0, 0, 1, 0]) * 1024)  # (uint16 tokens 0 and 1: any vocabulary takes them)
        self.odd = os.path.join(self.fixtures, "odd.bin")
        with open(self.odd, "wb") as out:
            out.write(b"\x01\x02\x03")
        self.machine_path, self.base_machine = self._calibrate()

    def _calibrate(self):
        out = os.path.join(self.fixtures, "cal")
        subprocess.run([self.bin, "--calibrate"] + TINY + ["--results", out], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300, check=False)
        files = [os.path.join(out, n) for n in os.listdir(out) if n.startswith("machine_")] if os.path.isdir(out) else []
        if not files:
            raise SystemExit("fuzz: --calibrate wrote no machine file to start from")
        with open(files[0]) as f:
            return files[0], json.load(f)

    def _engines(self):
        """The engines -m takes, as the registry lists them (aebench --list-engines); [] when it
        fails (drift says so)."""
        p = subprocess.run([self.bin, "--list-engines"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           check=False)
        return p.stdout.decode("utf-8", "replace").split() if p.returncode == 0 else []

    def _help_options(self):
        p = subprocess.run([self.bin, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                           check=False)
        text = p.stdout.decode("utf-8", "replace")
        return re.findall(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)", text, re.M)

    # ---- valid inputs ------------------------------------------------------------------------
    def shape(self, c):
        """The model's shape options: tiny for a real run (or what the machine file knows), any
        addressable one for a dry run."""
        rnd = c.rnd
        # (gemini's dry run checks that its store has room for the checkpoints: a small model)
        if c.mode in ("real", "predict", "search") or c.method == "gemini":
            c.layers = rnd.randint(1, 3)
            if c.mode in ("predict", "search"):
                return ["--device", "cpu", "-l", str(c.layers), "-h", "32", "--heads", "2", "--seq", "8",
                        "--vocab", "64", "-b", "1", "--threads", "1"]
            heads = rnd.choice([1, 2, 4])
            hidden = heads * rnd.choice([4, 8, 16])
            return ["--device", "cpu", "-l", str(c.layers), "-h", str(hidden), "--heads", str(heads),
                    "--seq", rnd.choice(["4", "8", "16"]), "--vocab", edge_int(rnd, 2, 300),
                    "-b", rnd.choice(["1", "2"]), "--threads", "1"]
        c.layers = rnd.choice([1, 2, rnd.randint(1, 64), rnd.randint(1, 2048)])
        heads = rnd.choice([1, 2, 4, 16, rnd.randint(1, 64)])
        hidden = heads * rnd.choice([1, 8, 64, rnd.randint(1, 128)])
        return ["--device", "cpu", "-l", edge_int(rnd, c.layers, c.layers), "-h", str(hidden),
                "--heads", str(heads), "--seq", str(rnd.choice([1, 8, 1024, rnd.randint(1, 4096)])),
                "--vocab", edge_int(rnd, 2, 200000), "-b", str(rnd.choice([1, 2, rnd.randint(1, 64)])),
                "--threads", rnd.choice(["1", "0", "2"])]

    def options(self, c, count, exclude=()):
        """count random options valid for c's method and mode (each at most once)."""
        names = [n for n, (valid, _) in GRAMMAR.items() if valid and n not in exclude]
        c.rnd.shuffle(names)
        args, given = [], set()
        for name in names:
            if len(given) >= count:
                break
            if name == "no-ckpt" and "recompute" in given or name == "recompute" and "no-ckpt" in given:
                continue  # (--recompute full --no-ckpt contradict: a fault)
            if name == "min-lr" and "lr" in given:
                continue
            if name == "profile" and c.mode != "real":
                continue
            value = GRAMMAR[name][0](c)
            if value is None:
                continue
            given.add(name)
            args += ["--" + name] + ([] if value is True else [value])
        args += self._extra(c, given)
        if "--gemini-every" in args and args[args.index("--gemini-every") + 1] == "auto" and "--gemini-mode" in args:
            args[args.index("--gemini-mode") + 1] = "interleave"  # (auto measures interleave's steps)
        return args

    def _extra(self, c, given):
        """The options that go only with another: --nvme-dir with --offload nvme, --ckpt-every
        with --ckpt-dir; a --global-batch a multiple of the batch."""
        args, rnd = [], c.rnd
        if "offload" in given and "nvme" in given and rnd.random() < 0.7:
            args += ["--nvme-dir", c.mkdir("nvme")]
        if "ckpt-dir" in given and rnd.random() < 0.7:
            args += ["--ckpt-every", edge_int(rnd, 1, c.iters)]
        if rnd.random() < 0.15:
            args += ["--global-batch", "G"]  # (resolved by valid_argv against the batch)
        return args

    def valid_argv(self, c, mode=None):
        """A valid command line for c (mode: c.mode)."""
        rnd = c.rnd
        mode = mode or c.mode
        c.mode, c.real = mode, mode == "real"
        if c.method is None:
            c.method = rnd.choice(self.engines + (["all"] if mode == "dry" else []))
        args = self.shape(c)
        c.iters = rnd.randint(1, 3) if mode == "real" else int(edge_int(rnd, 1, 1000000000))
        args += ["-m", c.method, "--iters", str(c.iters)]
        if mode == "dry":
            args.append("--dry-run")
        elif mode == "real":
            args += ["--results", "r", "--cpu-mem-limit", "1G"]
        elif mode == "predict":
            args += ["--predict", "--machine", self.machine_path]
        if c.method == "gemini":
            args += ["--gemini-store", c.mkdir("shm")]  # (not /dev/shm: everything stays in the input's directory)
        count = rnd.randint(0, 8 if mode == "dry" else 4)
        if c.method == "all":
            opts = []
        else:
            # (a prediction looks up the machine file's entry of the calibrated dtype and math)
            exclude = ("gemini-store",) + (("data", "save-params", "resume") if mode != "real" else ()) + \
                (("dtype", "math") if mode == "predict" else ())
            opts = self.options(c, count, exclude=exclude)
        if "G" in opts:
            batch = int(args[args.index("-b") + 1])
            opts[opts.index("G")] = str(batch * rnd.randint(1, 3))
        return args + opts

    def results_of(self, args):
        return args[len(args) - 1 - args[::-1].index("--results") + 1] if "--results" in args else "results"

    def valid_input(self, rnd, workdir):
        r = rnd.random()
        # (a real run or a search costs several dry runs: fewer of them)
        mode = "dry" if r < 0.64 else "predict" if r < 0.80 else "real" if r < 0.90 else "search" if r < 0.94 else "misc"
        c = Ctx(self, rnd, workdir, mode)
        if mode == "misc":
            return rnd.choice([["--help"], ["--version"], ["--list-engines"], ["--version"],
                               TINY + ["--predict", "--find-max", "--machine", self.machine_path],
                               TINY + ["--dry-run", "--find-max"]]), "valid/misc", Expect(0, outputs="none")
        if mode == "search":
            return self.search_argv(c), "valid/search", Expect(0, outputs="search")
        args = self.valid_argv(c)
        if mode == "real":
            if c.rnd.random() < 0.3:
                args += ["--results", c.rnd.choice(["r\u00e9sultats", "r %s%n", "a/b/c", "./r", "r" * 200])]
            return args, "valid/real", Expect(0, outputs="run")
        return args, "valid/" + mode, Expect(0, outputs="none")

    def search_argv(self, c):
        rnd = c.rnd
        c.mode = "search"
        args = self.shape(c) + ["--search", "--machine", self.machine_path, "--results", "r"]
        if rnd.random() < 0.5:
            args += ["-m", rnd.choice(self.engines)]
        if rnd.random() < 0.5:
            args += ["--top", edge_int(rnd, 1, 50)]
        if rnd.random() < 0.3:
            args += ["--out", rnd.choice(["best.json", "o %s.json", "\u00e9.json"])]
        if rnd.random() < 0.2 and not getattr(c, "no_largest", False):
            # (--largest alone ends 1 here today: "no configuration is predicted" at the
            # largest size it found; with --min-samples-per-s it ends 0)
            # (a low threshold bisects over a thousand sizes: seconds)
            args += ["--largest", "--min-samples-per-s", edge_num(rnd, 8.0, 30.0), "--cpu-mem-limit", "64M",
                     "--gpu-mem-limit", "64M"]
        return args

    # ---- one fault ---------------------------------------------------------------------------
    def fault_input(self, rnd, workdir):
        costly = rnd.random() < 0.3  # (a real run's or a search's fault, or a dry run's)
        name, base, fn, expect = rnd.choice([f for f in FAULTS if (f[1] in ("real", "search")) == costly])
        c = Ctx(self, rnd, workdir, base)
        args = fn(self, c)
        return args, "fault/" + name, expect

    def bad_value_input(self, rnd, workdir):
        """A valid input with one option's value of the wrong type or range."""
        name = rnd.choice([n for n, (_, bad) in GRAMMAR.items() if bad])
        c = Ctx(self, rnd, workdir, "dry")
        args = self.valid_argv(c)
        return args + ["--" + name, rnd.choice(GRAMMAR[name][1])], "fault/bad-value", Expect(2, token=name)

    # ---- configs, run lists, machine files -----------------------------------------------------
    def config_doc(self, c):
        """A valid plain config (tiny, dry): the options of a valid command line as JSON."""
        c.method = c.rnd.choice(self.engines)
        doc = {"method": c.method, "layers": 2, "hidden": 64, "heads": 4, "seq": 16, "batch": 2, "vocab": 128,
               "device": "cpu", "iters": 1}
        c.layers, c.iters = 2, 1
        if c.method == "stronghold":
            doc["window"] = c.rnd.choice([1, 2, "auto"])
        return doc

    def config_input(self, rnd, workdir):
        c = Ctx(self, rnd, workdir, "dry")
        doc = self.config_doc(c)
        how = rnd.choice(["valid", "valid", "type", "huge", "unknown", "duplicate", "truncate", "garbage", "nest",
                          "not-object", "typed-by-hand"])
        token = ("config",)
        keys = list(doc)
        text = json.dumps(doc)
        if how == "valid":
            for _ in range(rnd.randint(0, 4)):
                name = rnd.choice([n for n, (v, _) in GRAMMAR.items() if v and n not in NOT_IN_CONFIG])
                value = GRAMMAR[name][0](c)
                if value is None or name in ("no-ckpt", "recompute", "lr", "min-lr", "profile", "data",
                                             "save-params", "resume", "clip-speculate", "window"):
                    continue
                kind = _config_kind(name)
                doc[name] = True if value is True else int(value) if kind == "int" else float(value) if kind == "num" else value
            text = json.dumps(doc)
        elif how in ("type", "huge"):
            key = rnd.choice(keys)
            if how == "type":
                wrong = {"method": [None, True, 1, [], {}, "", "bogus"], "device": [None, False, 0, [], "", "gpu"]}
                value = rnd.choice(wrong.get(key, [None, True, "", "x", [], {}, [1, 2], {"a": 1}, -1, 0, 1.5,
                                                   1e308, "1e400", "\u0000x", "%s%n"]))
            else:
                value = rnd.choice([2 ** 31 - 1, 2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 64, 10 ** 300, 1e308,
                                    -1e308, 5e-324, 0.0, -0.0, 123456789.123])
                if key in ("method", "device"):
                    value = rnd.choice([2 ** 64, 1e308])
            doc[key] = value
            text = json.dumps(doc)
            token = (key,)
        elif how == "unknown":
            key = rnd.choice(["bogus", "Layers", "layer", "", "\u00e9", "%s", "dry_run", "l"])
            text = text[:-1] + ", " + json.dumps(key) + ": 1}"
            token = ("unknown",)
        elif how == "duplicate":
            key = rnd.choice(keys)
            text = text[:-1] + ", " + json.dumps(key) + ": " + json.dumps(doc[key]) + "}"
            token = ("twice",)
        elif how == "truncate":
            text = text[:rnd.randrange(len(text))]
        elif how == "garbage":
            pos = rnd.randrange(1, len(text) - 1)
            while text[pos - 1] == " " and text[pos] == " ":
                pos += 1
            text = text[:pos] + rnd.choice(["\x00", "\xff", "}", "{", "\"", "\\", ",,", "NaN", "Infinity", "1e99999"]) + text[pos:]
        elif how == "nest":
            depth = rnd.choice([2, 50, 999, 1001, 5000])
            text = text[:-1] + ', "layers": ' + "[" * depth + "]" * depth + "}"
            token = ("config",)
        elif how == "not-object":
            text = rnd.choice(["[]", "1", "\"x\"", "null", "[{}]", ""])
        elif how == "typed-by-hand":
            key = rnd.choice(sorted(NOT_IN_CONFIG - {"config"}) + ["find-max"])
            text = text[:-1] + ", " + json.dumps(key) + ": true}"
            token = (key,)
        path = os.path.join(workdir, "in.json")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        args = ["--config", "in.json", "--dry-run"]
        if how == "valid":
            return args, "config/valid", Expect(0, outputs="none")
        return args, "config/" + how, Expect(2, token=token)

    def runlist_input(self, rnd, workdir):
        method = rnd.choice(self.engines)
        doc = {"description": rnd.choice(["x", "\u00e9 %s%n", ""]),
               "defaults": {"method": method, "layers": 1, "hidden": 32, "heads": 2, "seq": 8, "batch": 1,
                            "vocab": 64, "iters": 1, "device": "cpu", "threads": 1},
               "runs": [{"seed": [1, 2]}] if method != "stronghold" else [{"window": [1]}]}
        how = rnd.choice(["valid", "unknown", "type", "empty-list", "layers-and-from", "truncate", "duplicate",
                          "runs-type", "bad-from"])
        token = ("config",)
        if how == "unknown":
            doc["runs"][0]["bogus"] = 1
            token = ("unknown",)
        elif how == "type":
            key = rnd.choice(["layers", "hidden", "iters", "vocab"])
            doc["defaults"][key] = rnd.choice(["x", None, [], 1.5, -1, 2 ** 40])
            token = (key,)
        elif how == "empty-list":
            doc["runs"][0]["seed"] = []
            token = ("empty",)
        elif how == "layers-and-from":
            doc["runs"][0]["layers-from"] = "self"
            doc["runs"][0]["layers"] = 1
            token = ("layers-from",)
        elif how == "runs-type":
            doc["runs"] = rnd.choice([[1], ["x"], [[]], [None]])
            token = ("runs",)
        elif how == "bad-from":
            doc["runs"][0]["layers-from"] = rnd.choice(["bogus", "", "ALL"])
            token = ("layers-from",)
        text = json.dumps(doc)
        if how == "truncate":
            text = text[:rnd.randrange(len(text))]
        elif how == "duplicate":
            text = text[:-1] + ', "runs": []}'
            token = ("twice",)
        with open(os.path.join(workdir, "runs.json"), "w", encoding="utf-8") as f:
            f.write(text)
        args = ["--config", "runs.json", "--dry-run"]
        if how == "valid":
            return args, "runlist/valid", Expect(0, outputs="none")
        return args, "runlist/" + how, Expect(2, token=token)

    def machine_input(self, rnd, workdir):
        doc = json.loads(json.dumps(self.base_machine))
        how = rnd.choice(["rate", "compute", "no-rates", "no-entry", "truncate", "not-object", "version"])
        token = ("machine",)
        if how == "rate":
            key = rnd.choice(["h2d_gbs", "d2h_gbs", "host_adam_ms_per_mparam", "host_threads", "host_copy_gbs",
                              "busy_h2d_gbs", "busy_d2h_gbs", "busy_host_adam_ms_per_mparam", "gpu_bytes",
                              "host_bytes"])
            if rnd.random() < 0.2:
                del doc["rates"][key]
            else:
                doc["rates"][key] = rnd.choice([0, -1, -1e308, "1", None, [], {}, False, "\u00e9"])
            token = (key,)
        elif how == "compute":
            key = rnd.choice(["embed_fwd_ms", "layer_fwd_ms", "layer_bwd_ms", "head_ms", "embed_bwd_ms",
                              "gpu_adam_ms_per_mparam", "layer_scale", "rest_scale"])
            for entry in doc["compute"]:
                entry[key] = rnd.choice([0, -1, "1", None, [], True])
            token = (key,)
        elif how == "no-rates":
            if rnd.random() < 0.5:
                del doc["rates"]
            else:
                doc["rates"] = rnd.choice([None, [], 1, "x"])
            token = ("rates",)
        elif how == "no-entry":
            doc["compute"] = rnd.choice([[], None, [{}], "x"])
            token = ("entry",)
        elif how == "version":
            doc["aebench_machine"] = rnd.choice([99, 2, 0, -1, 1000000])  # issue 47: an unknown format version
            token = ("aebench_machine", "version", "format")
        text = json.dumps(doc)
        if how == "truncate":
            text = text[:rnd.randrange(len(text))]
        elif how == "not-object":
            text = rnd.choice(["[]", "1", "null", ""])
        with open(os.path.join(workdir, "machine.json"), "w", encoding="utf-8") as f:
            f.write(text)
        c = Ctx(self, rnd, workdir, "predict")
        args = self.shape(c) + ["--predict", "--machine", "machine.json", "-m", rnd.choice(self.engines + ["all"])]
        return args, "machine/" + how, Expect(2, token=token, issue47=how == "version")

    # ---- one input -------------------------------------------------------------------------
    def make(self, index, workdir):
        rnd = random.Random(self.seed * 1000003 + index)
        r = rnd.random()
        if r < 0.30:
            return self.valid_input(rnd, workdir)
        if r < 0.55:
            return self.fault_input(rnd, workdir)
        if r < 0.72:
            return self.bad_value_input(rnd, workdir)
        if r < 0.84:
            return self.config_input(rnd, workdir)
        if r < 0.90:
            return self.runlist_input(rnd, workdir)
        return self.machine_input(rnd, workdir)

    def one(self, index):
        workdir = os.path.join(self.root, "w%d" % index)
        os.makedirs(workdir)
        args, kind, expect = self.make(index, workdir)
        result = run_one(self.bin, args, workdir, expect)
        bad, crash, code, err, took = result
        if not bad:
            shutil.rmtree(workdir, ignore_errors=True)
        return index, kind, code, bad, crash, args, err[-600:], took, expect.issue47


def _config_kind(name):
    ints = {"layers", "hidden", "batch", "heads", "seq", "vocab", "iters", "log-interval", "seed", "lr-decay-iters",
            "threads", "ranks", "global-batch", "fail-at", "zero-stage", "pp", "tp", "gemini-replicas", "gemini-ckpt-from",
            "ckpt-every", "top", "verify", "setup-notice", "reduce-bucket-size"}
    nums = {"lr", "min-lr", "lr-warmup-fraction", "weight-decay", "clip-grad", "min-samples-per-s", "gemini-every-share",
            "gemini-fill"}
    return "int" if name in ints else "num" if name in nums else "text"


# ---- the fault catalogue ------------------------------------------------------------------------
# (name, base, args(camp, ctx), ending).  base: the valid input the fault is added to ("dry",
# "real", "predict", "search"); the args are that input's with the fault.
def _with(base, method=None, *extra):
    def make(camp, c):
        c.method = method
        c.no_largest = True
        if base == "search":
            return camp.search_argv(c) + list(extra)
        return camp.valid_argv(c, base) + list(extra)
    return make


def _strip(argv, *flags):
    """argv without the given flags, each with its value (every flag here takes one)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        else:
            out.append(a)
    return out


def _with_none_of(base, method, drop, *extra):
    """_with, the base's own drop flags (and their values) taken out first: a fault that is one
    only without them (the valid grammar may have drawn one)."""
    def make(camp, c):
        c.method = method
        c.no_largest = True
        return _strip(camp.valid_argv(c, base), *drop) + list(extra)
    return make


def _fn(base, method, f):
    """A fault whose args depend on the input: f(camp, c) gives them after the base's."""
    def make(camp, c):
        c.method = method
        c.no_largest = True
        head = camp.search_argv(c) if base == "search" else camp.valid_argv(c, base)
        return head + f(camp, c)
    return make


def _big_config(camp, c):
    # a config far over any size limit, sparse: a valid start, then 200 MB of holes
    path = c.path("big.json")
    with open(path, "wb") as f:
        f.write(b'{"layers": 1, "description": "')
        f.truncate(200 * 1024 * 1024)
    return ["--config", "big.json"]


def _unknown_flag(camp, c):
    longs = [n for n in GRAMMAR]
    while True:
        name = "".join(c.rnd.choice("abcdefghijklmnopqrstuvwxyz-") for _ in range(c.rnd.randint(1, 12))).strip("-")
        if name and not any(n.startswith(name) for n in longs):
            return ["--" + name]


def _missing_value(camp, c):
    name = c.rnd.choice([n for n, (_, bad) in GRAMMAR.items() if bad and n not in ("method",)])
    return ["--" + name]


FAULTS = [
    # unknown flags, a missing value, a stray argument, an ambiguous prefix
    ("unknown-flag", "dry", _fn("dry", None, _unknown_flag), Expect(2, token="unknown")),
    ("unknown-short", "dry", _with("dry", None, "-z"), Expect(2, token=("-z", "unknown"))),
    ("missing-value", "dry", _fn("dry", None, _missing_value), Expect(2, token="needs a value")),
    ("missing-value-short", "dry", _with("dry", None, "-l"), Expect(2, token=("-l", "needs a value"))),
    ("stray-argument", "dry", _fn("dry", None, lambda camp, c: [c.rnd.choice(["stray", "-", "\u00e9", "%s"])]),
     Expect(2, token="unexpected")),
    ("ambiguous-prefix", "dry", _with("dry", None, "--gemini", "1"), Expect(2, token="gemini")),
    # contradictory pairs and options an engine does not use
    ("window-over-layers", "dry", _fn("dry", "stronghold", lambda camp, c: ["-w", str(c.layers + 1)]),
     Expect(2, token="window")),
    ("min-lr-over-lr", "dry", _with("dry", None, "--lr", "1e-4", "--min-lr", "1e-3"), Expect(2, token="min-lr")),
    ("heads-not-dividing", "dry", _with("dry", None, "-h", "32", "--heads", "3"), Expect(2, token="divisible")),
    ("nvme-dir-without-nvme", "dry", _with("dry", "megatron-lm", "--nvme-dir", "."), Expect(2, token="nvme-dir")),
    ("search-option-alone", "dry",
     _fn("dry", None, lambda camp, c: c.rnd.choice([["--top", "3"], ["--out", "o.json"], ["--verify", "1"],
                                                    ["--largest"]])),
     Expect(2, token="search")),
    ("min-samples-without-largest", "search", _with("search", None, "--min-samples-per-s", "5"),
     Expect(2, token="min-samples")),
    ("profile-with-predict", "predict", _with("predict", None, "--profile"), Expect(2, token="profile")),
    ("profile-graphs-on", "real", _with("real", "megatron-lm", "--profile", "--graphs", "on"), Expect(2, token="graphs")),
    ("graphs-on-cpu", "real", _with("real", None, "--graphs", "on"), Expect(2, token="graphs")),
    ("search-dry-run", "search", _with("search", None, "--dry-run"), Expect(2, token="search")),
    ("calibrate-predict", "predict", _with("predict", None, "--calibrate"), Expect(2, token="calibrate")),
    ("search-runlist", "search", _fn("search", None, lambda camp, c: [
        "--config", _write(c, "rl.json", '{"runs": [{"layers": 1}]}')]), Expect(2, token="run list")),
    ("window-not-stronghold", "dry", _with("dry", "megatron-lm", "-w", "1"), Expect(2, token="window")),
    ("dpu-not-zero-offload", "dry", _with("dry", "l2l", "--dpu"), Expect(2, token="dpu")),
    ("clip-speculate-megatron", "dry", _with("dry", "megatron-lm", "--clip-speculate", "1"),
     Expect(2, token="clip-speculate")),
    ("placement-not-stronghold", "dry", _with("dry", "zero-offload", "--placement", "spread"),
     Expect(2, token="placement")),
    ("offload-nvme-megatron", "dry", _with("dry", "megatron-lm", "--offload", "nvme"), Expect(2, token="offload")),
    ("zero-stage-l2l", "dry", _with("dry", "l2l", "--zero-stage", "2"), Expect(2, token="zero-stage")),
    ("bf16-gemini", "dry", _with("dry", "gemini", "--dtype", "bf16"), Expect(2, token="bf16")),
    ("gemini-option-elsewhere", "dry", _fn("dry", "stronghold", lambda camp, c: c.rnd.choice([
        ["--gemini-mode", "naive"], ["--gemini-job", "j"], ["--gemini-recover"], ["--ckpt-every", "1"],
        ["--gemini-every", "1"], ["--gemini-replicas", "1"]])), Expect(2, token=("gemini", "ckpt"))),
    ("gemini-replicas-over-ranks", "dry", _with("dry", "gemini", "--gemini-replicas", "2"),
     Expect(2, token="gemini-replicas")),
    ("gemini-every-auto-naive", "dry", _with("dry", "gemini", "--gemini-mode", "naive", "--gemini-every", "auto"),
     Expect(2, token="gemini-every")),
    ("gemini-store-missing", "dry", _with("dry", "gemini", "--gemini-store", "no/such/dir",
           "--gemini-mode", "interleave"),
     Expect(2, token="gemini-store")),
    ("ckpt-dir-missing", "dry", _with("dry", "gemini", "--ckpt-dir", "no/such/dir"), Expect(2, token="ckpt-dir")),
    ("fail-at-over-iters", "real", _fn("real", None, lambda camp, c: ["--fail-at", str(c.iters + 1)]),
     Expect(2, token="fail-at")),
    ("fail-rank-one-rank", "real", _with("real", None, "--fail-at", "1", "--fail-rank", "1"),
     Expect(2, token="fail-rank")),
    ("fail-phase-checkpoint-megatron", "real",
     _with("real", "megatron-lm", "--fail-at", "1", "--fail-phase", "checkpoint"), Expect(2, token="checkpoint")),
    ("global-batch-not-multiple", "dry", _with("dry", None, "-b", "2", "--global-batch", "3"),
     Expect(2, token="global-batch")),
    ("device-cuda", "dry", _with("dry", None, "--device", "cuda"), Expect(2, token="cuda")),
    ("vocab-one", "dry", _with("dry", None, "--vocab", "1"), Expect(2, token="vocab")),
    ("hosts-without-ranks", "dry", _fn("dry", None, lambda camp, c: ["--hosts", _write(c, "hosts", "localhost:2\n")]),
     Expect(2, token="hosts")),
    ("too-large-to-address", "dry", _with("dry", "megatron-lm", "-l", "1048576", "-h", "1048576", "--heads", "1"),
     Expect(2, token="too large")),
    # files that are not what they should be
    ("config-missing", "dry", _with("dry", None, "--config", "no/such.json"), Expect(2, token="config")),
    ("config-directory", "dry", _with("dry", None, "--config", "."), Expect(2, token="config")),
    ("config-fifo", "dry", _fn("dry", None, lambda camp, c: ["--config", _fifo(c)]), Expect(2, token="config")),
    ("data-missing", "real", _with("real", None, "--data", "no/such.bin"), Expect(2, token="no/such.bin")),
    ("data-odd-size", "real", _fn("real", None, lambda camp, c: ["--data", camp.odd]), Expect(2, token="odd")),
    ("data-directory", "real", _with("real", None, "--data", "."), Expect(2, token=("data", "."))),
    ("machine-missing-predict", "predict", _with("predict", None, "--machine", "no/such.json"),
     Expect(2, token="machine")),
    ("machine-directory-predict", "predict", _with("predict", None, "--machine", "."), Expect(2, token="machine")),
    ("machine-not-calibrated-shape", "predict", _with("predict", None, "--seq", "16"), Expect(2, token="entry")),
    ("out-is-directory", "search", _fn("search", None, lambda camp, c: ["--out", c.mkdir("odir")]),
     Expect(2, token="out")),
    ("out-dir-missing", "search", _with("search", None, "--out", "no/such/o.json"), Expect(2, token="out")),
    ("results-is-file", "real", _fn("real", None, lambda camp, c: ["--results", _write(c, "afile", "x")]),
     Expect(2, token="afile")),
    # out of budget: exit 3
    ("host-budget-1K", "real", _with("real", None, "--cpu-mem-limit", "1K"), Expect(3)),
    ("gpu-budget-1K", "real", _with("real", None, "--gpu-mem-limit", "1K"), Expect(3)),
    # issue 47: options accepted without effect, refused; each on a real run (a training run)
    ("all-with-window", "real", _with("real", "all", "-w", "1"), Expect(2, token="window", issue47=True)),  # issue 47
    ("fail-kind-without-fail-at", "real", _fn("real", None, lambda camp, c: ["--fail-kind", c.rnd.choice(
        ["software", "hardware", "stop"])]), Expect(2, token="fail-kind", issue47=True)),  # issue 47
    ("fail-phase-without-fail-at", "real", _fn("real", None, lambda camp, c: ["--fail-phase", c.rnd.choice(
        ["forward", "backward", "checkpoint"])]), Expect(2, token="fail-phase", issue47=True)),  # issue 47
    ("fail-rank-without-fail-at", "real", _with("real", None, "--fail-rank", "0"),
     Expect(2, token="fail-rank", issue47=True)),  # issue 47
    ("machine-missing-training", "real", _with("real", None, "--machine", "no/such/machine.json"),
     Expect(2, token="machine", issue47=True)),  # issue 47
    ("gemini-every-over-iters", "real", _fn("real", "gemini", lambda camp, c: [
        "--gemini-every", str(c.iters + c.rnd.randint(1, 1000))]), Expect(2, token="gemini-every", issue47=True)),  # issue 47
    ("gemini-ckpt-from-over-iters", "real", _fn("real", "gemini", lambda camp, c: [
        "--gemini-ckpt-from", str(c.iters + c.rnd.randint(1, 1000))]),
     Expect(2, token="gemini-ckpt-from", issue47=True)),  # issue 47
    ("ckpt-every-without-ckpt-dir", "real", _with_none_of("real", "gemini", ("--ckpt-dir", "--ckpt-every"), "--ckpt-every", "1"),
     Expect(2, token="ckpt-every", issue47=True)),  # issue 47
    ("recompute-full-no-ckpt", "real", _with("real", None, "--recompute", "full", "--no-ckpt"),
     Expect(2, token=("no-ckpt", "recompute"), issue47=True)),  # issue 47
    ("hang-timeout-below-1s", "real", _fn("real", None, lambda camp, c: [
        "--hang-timeout", c.rnd.choice(["0.5", "0.001", "0.999", "1e-9", "5e-1"])]),
     Expect(2, token="hang-timeout", issue47=True)),  # issue 47
    ("search-out-unwritable", "search", _with("search", None, "--out", "/proc/x.json"),
     Expect(2, token="out", issue47=True)),  # issue 47
    ("config-over-size-limit", "dry", _fn("dry", None, _big_config),
     Expect(2, token=("large", "size", "limit", "MiB", "bytes"), issue47=True)),  # issue 47
    ("search-nothing-fits", "search", _with("search", None, "--cpu-mem-limit", "1K", "--gpu-mem-limit", "1K"),
     Expect(3, issue47=True)),  # issue 47: exit 3, as --find-max
]


def _write(c, name, text):
    with open(c.path(name), "w", encoding="utf-8") as f:
        f.write(text)
    return name


def _fifo(c):
    os.mkfifo(c.path("fifo"))
    return "fifo"


# ---- running an input and judging its ending ---------------------------------------------------
def sanitizer_env():
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:exitcode=99",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98")
    return env


def default_signals():
    """In the child: SIGINT and SIGQUIT as by default (a shell's background job ignores them,
    and the child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def snapshot(top):
    """Every path under top (links not followed), with its kind and size."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p)
                seen[os.path.relpath(p, top)] = (stat.S_IFMT(st.st_mode), st.st_size)
            except OSError:
                pass
    return seen


NAMED = re.compile(r"^\s*(?:log|json):\s+(.*\S)\s*$|^search: wrote (.*\S)\s*$|the fastest written to (.*\S) \(aebench", re.M)


def named_files(stdout):
    return [next(g for g in m.groups() if g) for m in NAMED.finditer(stdout)]


def check_run_outputs(workdir, results, stdout):
    """A real run ended 0: its log and JSON in the results directory, the JSON parses and says
    ok.  None, or what is wrong."""
    rdir = os.path.join(workdir, results)
    names = os.listdir(rdir) if os.path.isdir(rdir) else []
    logs = [n for n in names if n.startswith("log_") and n.endswith(".txt")]
    jsons = [n for n in names if n.startswith("log_") and n.endswith(".json")]
    if not logs or not jsons:
        return "exit 0 but %s has %d logs and %d JSONs (want both)" % (results, len(logs), len(jsons))
    for n in jsons:
        try:
            with open(os.path.join(rdir, n), encoding="utf-8") as f:
                status = json.load(f).get("status")
        except (OSError, ValueError, AttributeError) as e:
            return "JSON %s does not parse: %s" % (n, e)
        if status != "ok":
            return "exit 0 but JSON %s says status %r" % (n, status)
    return None


def judge(code, out, err, workdir, before, expect, args):
    """(what is wrong or None, whether it is a crash)."""
    if code == "timeout":
        return "did not end within %d s" % TIMEOUT_S, True
    if "Sanitizer" in err or "runtime error:" in err or "LeakSanitizer" in err:
        return "sanitizer report", True
    if code < 0:
        return "killed by signal %d" % -code, True
    if code not in expect.codes:
        return "exit %d (want %s)" % (code, " or ".join(map(str, expect.codes))), False
    for name in named_files(out):
        if not os.path.lexists(os.path.join(workdir, name)):
            return "stdout names %s, which does not exist" % name, False
    after = snapshot(workdir)
    written = sorted(set(after) - set(before))
    if code == 2:
        lines = [l for l in err.splitlines() if l.strip()]
        if len(lines) != 1:
            return "exit 2 with %d lines on stderr (want 1)" % len(lines), False
        if expect.token and not any(t.lower() in lines[0].lower() for t in expect.token):
            return "exit 2, but its line names none of %s" % (expect.token,), False
        if written:
            return "exit 2 but wrote %s" % written[:5], False
    if code == 0 and expect.outputs == "none" and written:
        return "exit 0 (writes nothing) but wrote %s" % written[:5], False
    if code == 0 and expect.outputs == "run":
        bad = check_run_outputs(workdir, _results_arg(args), out)
        if bad:
            return bad, False
    if code == 0 and expect.outputs == "search":
        if not any(n.startswith("search: wrote") for n in out.splitlines()):
            return "a search ended 0 without writing its JSON", False
    if expect.check:
        bad = expect.check(workdir, code, out)
        if bad:
            return bad, False
    return None, False


def _results_arg(args):
    return args[len(args) - 1 - args[::-1].index("--results") + 1] if "--results" in args else "results"


def run_one(binary, args, workdir, expect, timeout=TIMEOUT_S):
    before = snapshot(workdir)
    t0 = time.time()
    try:
        p = subprocess.run([binary] + args, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=sanitizer_env(), check=False,
                           preexec_fn=default_signals)
        code, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        code, out, err = "timeout", (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
    took = time.time() - t0
    bad, crash = judge(code, out, err, workdir, before, expect, args)
    return bad, crash, code, err, took


# ---- the costly inputs: ranks, signals, a shared directory, a full disk ------------------------
def special_inputs(camp, without_mpi=None):
    """[(kind, function(workdir) -> (bad, crash, code, err, args, issue47))]: always run, once.
    without_mpi: why the build under test has no MPI on purpose (then the --ranks inputs are
    "not run" with that reason; otherwise a build or launcher missing is their failure)."""
    out = []
    mpi = camp.mpi_bin
    why_no_mpi = None
    try:
        v = subprocess.run([mpi, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                           check=False).stdout.decode("utf-8", "replace")
        if "ranks: mpi" not in v:
            why_no_mpi = "%s was built without MPI (%s)" % (mpi, v.strip())
        elif not shutil.which("mpiexec"):
            why_no_mpi = "mpiexec is not on the PATH"
    except OSError as e:
        why_no_mpi = "%s cannot run: %s" % (mpi, e)

    def ranks(args, expect):
        def go(workdir):
            if without_mpi:
                return "not run: " + without_mpi, False, None, "", args, expect.issue47
            if why_no_mpi:
                return "not run: " + why_no_mpi, False, None, "", args, expect.issue47
            bad, crash, code, err, _ = run_one(mpi, args, workdir, expect, timeout=120)
            return bad, crash, code, err, args, expect.issue47
        return go

    base = TINY + ["--ranks", "2", "--iters", "2", "--results", "r"]
    out.append(("ranks/ok", ranks(base, Expect(0, outputs="run"))))
    out.append(("ranks/ok-gemini", ranks(base + ["-m", "gemini", "--gemini-store", "."], Expect(0, outputs="run"))))
    out.append(("ranks/fail-at", ranks(base + ["--fail-at", "2", "--fail-rank", "1"], Expect(4))))
    out.append(("ranks/refused-by-probe", ranks(base + ["-m", "gemini", "--gemini-replicas", "3"],
                                                Expect(2, token="gemini-replicas"))))
    # (the data is opened by the ranks: the supervisor refuses nothing before it starts them)
    out.append(("ranks/refused-by-ranks", ranks(base + ["--data", camp.odd], Expect(2, token="odd"))))
    for sig in (signal.SIGINT, signal.SIGTERM):
        out.append(("signal/" + sig.name, lambda workdir, sig=sig: signal_input(camp.bin, workdir, sig)))
    for mode in (0o1777, 0o777):
        out.append(("shared/links-%o" % mode, lambda workdir, mode=mode: shared_input(camp.bin, workdir, mode)))
    out.append(("shared/ranks-log-replaced", lambda workdir: shared_ranks_input(mpi, without_mpi or why_no_mpi, workdir)))
    for free in (0, 1024, 4096, 8192):
        out.append(("disk/full-%d" % free, lambda workdir, free=free: disk_input(camp.bin, workdir, free)))
    return out


def _wait_for(pred, proc, limit=TIMEOUT_S):
    """Wait until pred() or the process ended (no timing in the verdict: the limit only bounds a
    run that neither starts nor ends)."""
    t0 = time.time()
    while not pred():
        if proc.poll() is not None or time.time() - t0 > limit:
            return False
        time.sleep(0.02)
    return True


def _log_has_iteration(rdir):
    for n in os.listdir(rdir) if os.path.isdir(rdir) else []:
        if n.endswith(".txt"):
            try:
                with open(os.path.join(rdir, n), "rb") as f:
                    if b"iteration" in f.read(1 << 20):
                        return True
            except OSError:
                pass
    return False


def _jsons(rdir):
    """{name: the JSON's status, or '(does not parse)'} of the run JSONs in rdir."""
    got = {}
    for n in os.listdir(rdir) if os.path.isdir(rdir) else []:
        if n.startswith("log_") and n.endswith(".json") and not os.path.islink(os.path.join(rdir, n)):
            try:
                with open(os.path.join(rdir, n), encoding="utf-8") as f:
                    got[n] = json.load(f).get("status")
            except (OSError, ValueError, AttributeError):
                got[n] = "(does not parse)"
    return got


def signal_input(binary, workdir, sig):
    """A run signalled after its first iteration's line: exit 128+sig and its JSON "interrupted"
    (issue 47); or, had it finished first, exit 0 and "ok"."""
    args = TINY + ["--iters", "100000", "--log-interval", "1", "--results", "r"]
    rdir = os.path.join(workdir, "r")
    p = subprocess.Popen([binary] + args, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=sanitizer_env(), preexec_fn=default_signals)
    try:
        started = _wait_for(lambda: _log_has_iteration(rdir), p)
        if p.poll() is None:
            p.send_signal(sig)
        _, err = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return "did not end within %d s of %s" % (TIMEOUT_S, sig.name), True, "timeout", "", args, True
    err = err.decode("utf-8", "replace")
    code = p.returncode
    if "Sanitizer" in err or "runtime error:" in err:
        return "sanitizer report", True, code, err, args, True
    statuses = _jsons(rdir)
    if not started:
        return "ended (exit %s) before its log had an iteration" % code, code < 0, code, err, args, True
    if code == 0:
        bad = None if statuses and all(s == "ok" for s in statuses.values()) else "exit 0 after %s, JSON %s" % (sig.name, statuses)
    elif code in (128 + sig, -sig):  # (ended by the signal itself, re-raised: a shell's 128+n too)
        bad = None if statuses and all(s == "interrupted" for s in statuses.values()) else \
            "exit %d after %s, but its JSON says %s (want interrupted)" % (code, sig.name, statuses)
    else:
        bad = "exit %s after %s (want %d, or 0 had it finished)" % (code, sig.name, 128 + sig)
    return bad, code < 0 and code != -sig, code, err, args, True  # issue 47: "interrupted"


def _planted_names(method, epochs):
    names = []
    for e in epochs:
        date = time.strftime("%Y-%m-%d", time.localtime(e))
        stem = "log_%s_l-1_h-32_bs-1_ws-auto_%s.%d" % (method, date, e)
        for clash in ["", "-1", "-2", "-3"]:
            names += [stem + clash + ".txt", stem + clash + ".json"]
    return names


def _as_nobody(argv):
    """argv run as the user nobody; None, or why it could not be."""
    if not shutil.which("setpriv"):
        return "setpriv is not on the PATH (util-linux): no second user"
    p = subprocess.run(NOBODY + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
    return None if p.returncode == 0 else "as nobody, %s failed: %s" % (argv[:3], p.stdout.decode("utf-8", "replace")[-300:])


def _targets(workdir):
    """Root-only files outside the shared directory, for the planted links to point at."""
    tdir = os.path.join(workdir, "private")
    os.makedirs(tdir)
    os.chmod(tdir, 0o700)
    os.chmod(workdir, 0o755)  # (nobody passes through to the shared directory)
    paths = []
    for i in range(2):
        t = os.path.join(tdir, "target%d" % i)
        with open(t, "w") as f:
            f.write("root's file %d\n" % i)
        os.chmod(t, 0o600)
        paths.append(t)
    return paths


def _targets_changed(paths):
    changed = []
    for i, t in enumerate(paths):
        try:
            with open(t) as f:
                if f.read() != "root's file %d\n" % i:
                    changed.append(t)
        except OSError:
            changed.append(t + " (gone)")
    return changed


def shared_input(binary, workdir, mode):
    """A results directory of mode 1777 or 0777; nobody plants links at the log and JSON names
    of the next seconds' runs, to root-only files: a run there never writes through them."""
    args = TINY + ["--iters", "1", "--results", "shared"]
    shared = os.path.join(workdir, "shared")
    os.makedirs(shared)
    os.chmod(shared, mode)
    targets = _targets(workdir)
    now = int(time.time())
    names = _planted_names("megatron-lm", range(now - 1, now + 30))
    script = "import os,sys\nfor i, n in enumerate(sys.argv[4:]): os.symlink(sys.argv[2 + i % 2], os.path.join(sys.argv[1], n))\n"
    why = _as_nobody([sys.executable, "-c", script, shared] + targets + names)
    if why:
        return "not run: " + why, False, None, "", args, False
    bad, crash, code, err, _ = run_one(binary, args, workdir, Expect((0, 1, 2)))
    changed = _targets_changed(targets)
    if changed and not crash:
        bad = "wrote through a planted link to %s" % changed
    return bad, crash, code, err, args, False


def shared_ranks_input(mpi, why_no_mpi, workdir):
    """Issue 47's finding 1: a --ranks job in a directory nobody can write; nobody replaces its
    log with a link to a root-only file; then SIGINT to the supervisor: it appends its ERROR
    line, never through the link; exit 130."""
    args = TINY + ["--ranks", "2", "--iters", "100000", "--log-interval", "1", "--results", "shared"]
    if why_no_mpi:
        return "not run: " + why_no_mpi, False, None, "", args, True
    shared = os.path.join(workdir, "shared")
    os.makedirs(shared)
    os.chmod(shared, 0o777)
    targets = _targets(workdir)
    p = subprocess.Popen([mpi] + args, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=sanitizer_env(), preexec_fn=default_signals)
    try:
        started = _wait_for(lambda: _log_has_iteration(shared), p, limit=120)
        why = None
        if started:
            logs = [n for n in os.listdir(shared) if n.endswith(".txt")]
            script = ("import os,sys\nfor n in sys.argv[3:]:\n p=os.path.join(sys.argv[1], n); os.rename(p, p + '.moved');"
                      " os.symlink(sys.argv[2], p)\n")
            why = _as_nobody([sys.executable, "-c", script, shared, targets[0]] + logs)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return "did not end within 120 s of SIGINT", True, "timeout", "", args, True
    err = err.decode("utf-8", "replace")
    code = p.returncode
    if not started:
        return "the job ended (exit %s) before its log had an iteration" % code, False, code, err, args, True
    if why:
        return "not run: " + why, False, code, err, args, True
    changed = _targets_changed(targets)
    if changed:
        return "the supervisor wrote through the planted link to %s" % changed, False, code, err, args, True
    if code == 0:  # (it had finished before the signal: legitimate, and nothing was written through the link)
        return None, False, code, err, args, True
    if code not in (130, -signal.SIGINT):
        return "exit %s after SIGINT (want 130)" % code, code < 0 and code != -signal.SIGINT, code, err, args, True
    return None, False, code, err, args, True


def disk_input(binary, workdir, free):
    """A results directory on a 16 KiB tmpfs with `free` bytes left: the run either ends 0 with
    its log and JSON whole, or fails (1 or 3) leaving no empty or unparsable file, and stdout
    names no file that is not there."""
    args = TINY + ["--iters", "1", "--results", "full/r"]
    full = os.path.join(workdir, "full")
    os.makedirs(full)
    if not shutil.which("mount"):
        return "not run: mount is not on the PATH: no full disk", False, None, "", args, True
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16K", "tmpfs", full], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60, check=False)
    if m.returncode != 0:
        return "not run: cannot mount a 16 KiB tmpfs: %s" % m.stdout.decode("utf-8", "replace").strip(), False, None, "", \
            args, True
    try:
        st = os.statvfs(full)
        fill = st.f_bavail * st.f_frsize - free
        if fill > 0:
            with open(os.path.join(full, "filler"), "wb") as f:
                try:
                    f.write(b"\0" * fill)
                    f.flush()
                except OSError:
                    pass

        def check(wd, code, out):
            rdir = os.path.join(full, "r")
            for n in os.listdir(rdir) if os.path.isdir(rdir) else []:
                pth = os.path.join(rdir, n)
                if os.path.isfile(pth) and os.path.getsize(pth) == 0:
                    return "exit %d left an empty %s" % (code, n)
            statuses = _jsons(rdir)
            if any(s in ("(does not parse)", "running") for s in statuses.values()):
                return "exit %d left a JSON whose status is %s" % (code, statuses)
            if code == 0:
                return check_run_outputs(wd, "full/r", out)
            return None
        bad, crash, code, err, _ = run_one(binary, args, workdir, Expect((0, 1, 3), check=check))
        return bad, crash, code, err, args, True  # issue 47: disk full
    finally:
        subprocess.run(["umount", full], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)


def drift(camp):
    """The grammar covers every option aebench --help lists, and no other; and the engines it
    draws from (--list-engines) are at least MIN_ENGINES."""
    if len(camp.engines) < MIN_ENGINES:
        return "aebench --list-engines listed %d engines (%s), want at least %d" % (
            len(camp.engines), " ".join(camp.engines), MIN_ENGINES)
    helped = set(camp.help_options)
    if not helped:
        return "aebench --help listed no options"
    missing = sorted(helped - set(GRAMMAR))
    stale = sorted(set(GRAMMAR) - helped)
    if missing or stale:
        return "the fuzz grammar (tests/fuzz.py GRAMMAR) misses %s%s" % (
            ", ".join("--" + m for m in missing) or "nothing",
            "; has options --help does not list: " + ", ".join("--" + s for s in stale) if stale else "")
    return None


def _show(text, limit=100):
    """An argument or a message as printed: quoted when it needs it, long ones cut."""
    cut = text if len(text) <= limit else text[:limit] + "...(%d chars)" % len(text)
    return repr(cut) if (" " in cut and limit == 100) or not cut else cut


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--inputs", type=int, default=1500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="a directory to keep the failing inputs' work directories in")
    ap.add_argument("--without-mpi", metavar="WHY", help="the build has no MPI on purpose: the --ranks inputs are "
                    "not run, for this reason")
    ap.add_argument("--drift-only", action="store_true", help="only check the grammar against --help")
    ap.add_argument("--times", action="store_true", help="print the seconds each kind of input took")
    ap.add_argument("--mpi-bin", help="a build with MPI for the --ranks inputs (default: aebench beside BIN)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="aebench-fuzz.", dir=os.environ.get("TMPDIR", "/tmp"))
    os.chmod(root, 0o755)  # (the second user's planted links: it passes through to the shared directories)
    t0 = time.time()
    binary = os.path.realpath(a.bin)
    mpi_bin = os.path.realpath(a.mpi_bin or os.path.join(os.path.dirname(binary), "aebench"))
    camp = Campaign(binary, mpi_bin, a.seed, root, drift_only=a.drift_only)
    if a.drift_only:
        shutil.rmtree(root, ignore_errors=True)
        bad = drift(camp)
        print("fuzz grammar: %s" % (bad or "covers the %d options aebench --help lists" % len(camp.help_options)))
        return 1 if bad else 0
    classes, expected, failures, crashes, issue47_failed, shown_kinds, seconds = {}, 0, [], 0, [], {}, {}

    def tally(index, kind, code, bad, crash, args, err, issue47):
        nonlocal expected, crashes
        top = kind.split("/")[0]
        classes[top] = classes.get(top, 0) + 1
        crashes += 1 if crash else 0
        if not bad:
            expected += 1
            return
        failures.append(index)
        if issue47:
            issue47_failed.append(kind)
        shown_kinds[kind] = shown_kinds.get(kind, 0) + 1
        if shown_kinds[kind] == 1 and len(shown_kinds) <= 30:  # (the first of each kind)
            print("FAIL fuzz input %s (%s%s): %s\n  args: %s\n  stderr: %s" %
                  (index, kind, ", issue 47" if issue47 else "", bad, " ".join(_show(x) for x in args),
                   _show(err.strip(), 800).replace("\n", "\n          ")))

    bad = drift(camp)
    tally("drift", "drift/help", None, bad, False, [binary, "--help"], "", False)
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for index, kind, code, bad, crash, args, err, took, issue47 in pool.map(camp.one, range(a.inputs)):
            tally(index, kind, code, bad, crash, args, err, issue47)
            seconds[kind] = seconds.get(kind, 0.0) + took
    # (the costly ones one at a time: each one's processes alone with their deadline)
    not_run = []
    for i, (kind, go) in enumerate(special_inputs(camp, a.without_mpi)):
        t_special = time.time()
        workdir = os.path.join(root, "s%d" % i)
        os.makedirs(workdir)
        try:
            bad, crash, code, err, args, issue47 = go(workdir)
        except (OSError, subprocess.SubprocessError) as e:
            bad, crash, code, err, args, issue47 = "could not run: %s" % e, False, None, "", [], False
        if bad and bad.startswith("not run: ") and a.without_mpi and bad == "not run: " + a.without_mpi:
            not_run.append(kind)
            continue
        tally("s%d" % i, kind, code, bad, crash, args, err, issue47)
        seconds[kind] = seconds.get(kind, 0.0) + time.time() - t_special
        if not bad:
            shutil.rmtree(workdir, ignore_errors=True)
    if a.times:
        for kind, took in sorted(seconds.items(), key=lambda kv: -kv[1])[:25]:
            print("fuzz: %6.1f s  %s" % (took, kind))
    if a.keep and failures:
        shutil.copytree(root, a.keep, dirs_exist_ok=True, symlinks=True)
    shutil.rmtree(root, ignore_errors=True)
    others = sorted(k for k in shown_kinds if k not in issue47_failed)
    if others:
        print("fuzz: endings not as expected: %s" % ", ".join("%s x%d" % (k, shown_kinds[k]) for k in others))
    if issue47_failed:
        print("fuzz: endings that issue 47's fixes change, not met: %s" %
              ", ".join("%s x%d" % (k, issue47_failed.count(k)) for k in sorted(set(issue47_failed))))
    total = expected + len(failures)
    print("fuzz campaign (seed %d): %d inputs (%s) in %.0f s; endings as expected %d, not %d; crashes %d%s" %
          (a.seed, total, ", ".join("%s %d" % kv for kv in sorted(classes.items())), time.time() - t0, expected,
           len(failures), crashes, "; not run %d (%s)" % (len(not_run), a.without_mpi) if not_run else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
