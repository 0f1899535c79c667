#!/usr/bin/env python3
"""A seeded fuzz campaign of aebench's inputs (issue 29), run by tests/run.sh.

Each input is one aebench process on the CPU backend: a command line (every flag, with valid,
boundary and random values), an options config or a run list (a valid one mutated: truncated,
types swapped, keys duplicated, nesting deepened, numbers huge), or a machine file for
--predict (the one --calibrate wrote here, mutated the same ways).  Almost every input is a
--dry-run or --predict; a few are tiny real runs (one iteration of a one-layer model, where
only options that cannot make the run large are fuzzed).

Invariants, for every input:
  - it ends (within TIMEOUT_S) with exit 0, 2 or 3: never a signal, never a sanitizer report
    (run it with the ASan/UBSan build: FUZZ_BIN=./aebench-asan);
  - exit 2 (bad input) prints exactly one line on stderr and writes nothing.
The last line is the figure: inputs tried by kind, outcomes, crashes (must be 0).

Usage: tests/fuzz.py BIN [--seed S] [--inputs N] [--jobs J] [--keep DIR]
Exit status: 0 when every invariant held, 1 otherwise (the first failures are printed with the
input that caused them, enough to rerun it by hand).
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 60
TINY = ["--device", "cpu", "-l", "1", "-h", "32", "--heads", "2", "--seq", "8", "--vocab", "64", "-b", "1",
        "--threads", "1"]
METHODS = ["megatron-lm", "l2l", "zero-offload", "zero-infinity", "stronghold", "gemini", "all"]

INT_EDGES = ["0", "1", "2", "-1", "3", "7", "127", "128", "129", "1024", "65535", "65536", "2147483520",
             "2147483521", "2147483647", "2147483648", "-2147483648", "4294967296", "9223372036854775807",
             "9223372036854775808", "99999999999999999999999", "1e3", "0x10", "010", " 4", "4 ", "+4", "", "4k"]
NUM_EDGES = ["0", "1", "-1", "1e-300", "1e300", "1e400", "-1e400", "nan", "inf", "-inf", "0.5", "1e-5",
             "3.4e38", "2.2e-308", "abc", "", "1,5", "0x1p3"]
SIZE_EDGES = ["0", "1", "1K", "1M", "512M", "1G", "32G", "16E", "17E", "9999999999G", "-1G", "1.5G", "G",
              "1Z", "", "100%", "1g", "18446744073709551615", "18446744073709551616"]
STRINGS = ["", "x", "auto", "none", "full", "selective", "all", "cpu", "cuda", "fp32", "bf16", "tf32", "nvme", "sendrecv",
           "read", "ring", "group", "spread", "bottom", "stop", "hardware", "software", "checkpoint",
           "backward", "forward", "\u00e9\u00e8", "a" * 5000, "../../etc", "-", "--", "-l", "%s%n%x",
           "0,1,2", "0,,1", "63", "64", "1,64", "-1"]

# flag: kind of value (None: a switch)
FLAGS = {
    "-m": "method", "-l": "int", "-h": "int", "-b": "int", "-w": "window", "--heads": "int", "--seq": "int",
    "--vocab": "int", "--iters": "int", "--log-interval": "int", "--seed": "int", "--results": "outpath",
    "--device": "str", "--config": "path", "--dtype": "str", "--math": "str", "--gpu-mem-limit": "size",
    "--cpu-mem-limit": "size", "--data": "path", "--no-ckpt": None, "--recompute": "str", "--lr": "num", "--min-lr": "num",
    "--lr-decay-iters": "int", "--lr-warmup-fraction": "num", "--weight-decay": "num", "--clip-grad": "num",
    "--dpu": None, "--offload": "str", "--nvme-dir": "outpath", "--threads": "int", "--global-batch": "int",
    "--save-params": "outpath", "--fail-at": "int", "--fail-rank": "str", "--fail-phase": "str",
    "--fail-kind": "str", "--zero-stage": "int", "--gemini-mode": "str", "--gemini-replicas": "int",
    "--gemini-placement": "str", "--gemini-transport": "str", "--gemini-store": "outpath", "--gemini-job": "str",
    "--gemini-recover": None, "--ckpt-dir": "outpath", "--clip-speculate": "window", "--placement": "str",
    "--gemini-ckpt-from": "int", "--ckpt-every": "int", "--gemini-every": "window", "--find-max": None, "--resume": None,
    "--hang-timeout": "num", "--machine": "path", "--predict": None, "--bogus": None, "-z": "int",
    "--profile": None, "--hosts": "path",
}
# never fuzzed: --ranks (starts mpiexec: the rank tests cover it), --calibrate (measures for
# seconds), --help/--version (no input)
SAFE_REAL = ["--lr", "--min-lr", "--lr-decay-iters", "--lr-warmup-fraction", "--weight-decay", "--clip-grad",
             "--seed", "--log-interval", "--dtype", "--math", "--no-ckpt", "--recompute", "--dpu", "--clip-speculate",
             "--placement", "--fail-phase", "--fail-kind", "--hang-timeout", "--gpu-mem-limit", "-m", "--save-params",
             "--results", "--data", "--resume", "--profile"]


class Campaign:
    def __init__(self, binary, seed, root):
        self.bin = binary
        self.seed = seed
        self.root = root
        self.fixtures = os.path.join(root, "fixtures")
        os.makedirs(self.fixtures)
        self.paths = self._make_paths()
        self.base_config = {"method": "stronghold", "layers": 2, "hidden": 64, "heads": 4, "seq": 16,
                            "batch": 2, "vocab": 128, "device": "cpu", "iters": 1, "window": 1}
        self.base_runlist = json.load(open(os.path.join(os.path.dirname(__file__), "..", "configs", "case5.json")))
        self.base_machine = self._calibrate()

    def _make_paths(self):
        f = self.fixtures
        tokens = os.path.join(f, "tokens.bin")
        with open(tokens, "wb") as out:
            out.write(bytes(range(256)) * 64)
        odd = os.path.join(f, "odd.bin")
        with open(odd, "wb") as out:
            out.write(b"\x01\x02\x03")
        os.mkfifo(os.path.join(f, "fifo"))
        os.symlink(os.path.join(f, "nothing-here"), os.path.join(f, "dangling"))
        os.symlink("/dev/null", os.path.join(f, "to-devnull"))
        os.makedirs(os.path.join(f, "dir"))
        with open(os.path.join(f, "empty.json"), "w"):
            pass
        # what inputs are read from: anything, system files included
        self.in_paths = [tokens, odd, os.path.join(f, "fifo"), os.path.join(f, "dangling"), os.path.join(f, "dir"),
                         os.path.join(f, "empty.json"), "/nonexistent/x", "/proc", "/proc/self/status", "/dev/null",
                         "/dev/zero", "", "rel/dir/file", "a" * 4000, "results", "."]
        # where outputs go: only under the campaign's directory (as root, a wrong output path
        # could otherwise replace a system file: a link to /dev/null stands in for one), or
        # /proc (nothing can be made there)
        return [os.path.join(f, "fifo"), os.path.join(f, "dangling"), os.path.join(f, "to-devnull"),
                os.path.join(f, "dir"), os.path.join(f, "empty.json"), tokens, os.path.join(f, "absent", "x"),
                "/proc", "/proc/self", "", "rel/dir/file", "a" * 4000, os.path.join(f, "c" * 300, "x"), "results", "."]

    def _calibrate(self):
        out = os.path.join(self.fixtures, "cal")
        subprocess.run([self.bin, "--calibrate"] + TINY + ["--results", out], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300, check=False)
        files = [os.path.join(out, n) for n in os.listdir(out) if n.startswith("machine_")] if os.path.isdir(out) else []
        if not files:
            raise SystemExit("fuzz: --calibrate wrote no machine file to start from")
        return json.load(open(files[0]))

    # ---- values ----------------------------------------------------------------------------
    def value(self, rnd, kind):
        if kind == "int":
            return rnd.choice(INT_EDGES) if rnd.random() < 0.7 else str(rnd.randint(-10, 5000))
        if kind == "num":
            return rnd.choice(NUM_EDGES) if rnd.random() < 0.7 else repr(rnd.uniform(-10, 10))
        if kind == "size":
            return rnd.choice(SIZE_EDGES)
        if kind == "path":
            return rnd.choice(self.in_paths)
        if kind == "outpath":
            return rnd.choice(self.paths)
        if kind == "method":
            return rnd.choice(METHODS + ["", "bogus"])
        if kind == "window":
            return rnd.choice(["auto", "0", "1", "2", "64", "-1", "1000001", "", "x"])
        return rnd.choice(STRINGS)

    def argv(self, rnd):
        # (--dry-run first: a flag later whose value is missing would take it as its value, and
        # a real --find-max of the default model would run for minutes)
        args = list(TINY) + ["--dry-run"]
        for _ in range(rnd.randint(1, 6)):
            flag = rnd.choice(list(FLAGS))
            kind = FLAGS[flag]
            args.append(flag)
            if kind is not None and rnd.random() < 0.97:  # (sometimes the value is missing)
                args.append(self.value(rnd, kind))
        if rnd.random() < 0.05:
            args.append(rnd.choice(["stray", "--", "-"]))
        return args

    def real_argv(self, rnd):
        args = list(TINY) + ["--iters", "1", "--cpu-mem-limit", "512M"]
        for _ in range(rnd.randint(1, 3)):
            flag = rnd.choice(SAFE_REAL)
            kind = FLAGS[flag]
            args.append(flag)
            if kind is not None:
                v = self.value(rnd, kind)
                args.append("l2l" if flag == "-m" and v == "all" else v)  # (a sweep of five: too long)
        return args

    # ---- JSON mutations --------------------------------------------------------------------
    def mutate_json(self, rnd, doc):
        """A document (text) derived from doc: one or more of the mutations."""
        doc = json.loads(json.dumps(doc))
        how = rnd.choice(["types", "types", "huge", "duplicate", "nest", "truncate", "garbage", "remove", "wide"])
        if how in ("types", "huge", "remove"):
            paths = list(_leaves(doc))
            for _ in range(rnd.randint(1, 3)):
                if not paths:
                    break
                parent, key = rnd.choice(paths)
                if how == "remove":
                    try:
                        del parent[key]
                    except (KeyError, IndexError, TypeError):
                        pass
                    paths = list(_leaves(doc))
                    continue
                parent[key] = rnd.choice(
                    [None, True, False, "", "x", [], {}, [1, 2], {"a": 1}, -1, 0, 1.5, 2 ** 31, 2 ** 63, 2 ** 64,
                     -2 ** 63, 1e308, -1e308, 10 ** 30, "1e400", "\u0000x"] if how == "types" else
                    [2 ** 31 - 1, 2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 64, 10 ** 300, 1e308, -1e308, 5e-324,
                     0.0, -0.0, 123456789.123])
        text = json.dumps(doc)
        if how == "duplicate" and isinstance(doc, dict) and doc:
            key = rnd.choice(list(doc))
            text = text[:-1] + ", " + json.dumps(key) + ": " + json.dumps(rnd.choice([1, "x", [2]])) + "}"
        elif how == "nest":
            depth = rnd.choice([50, 500, 999, 1001, 5000])
            inner = "[" * depth + "]" * depth
            text = text[:-1] + (", " if len(doc) else "") + '"layers": ' + inner + "}" if isinstance(doc, dict) else inner
        elif how == "truncate" and text:
            text = text[:rnd.randrange(len(text))]
        elif how == "garbage":
            pos = rnd.randrange(len(text) + 1)
            text = text[:pos] + rnd.choice(["\x00", "\xff", "}", "{", "\"", "\\", ",,", "NaN", "Infinity", "1e99999"]) + text[pos:]
        elif how == "wide" and isinstance(doc, dict):
            key = rnd.choice(["layers", "hidden", "window", "iters", "seq"])
            arr = list(range(1, rnd.choice([10, 200, 3000])))
            text = json.dumps(dict(doc, **{key: arr, "batch": arr[:50]}))
        return text, how

    def config_input(self, rnd, workdir):
        runlist = rnd.random() < 0.4
        text, how = self.mutate_json(rnd, self.base_runlist if runlist else self.base_config)
        path = os.path.join(workdir, "in.json")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        args = ["--config", path, "--device", "cpu", "--dry-run"]
        return args, ("runlist/" if runlist else "config/") + how

    def machine_input(self, rnd, workdir):
        text, how = self.mutate_json(rnd, self.base_machine)
        path = os.path.join(workdir, "machine.json")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        return TINY + ["--predict", "--machine", path] + (["-m", rnd.choice(METHODS)] if rnd.random() < 0.5 else []), \
            "machine/" + how

    # ---- one input -------------------------------------------------------------------------
    def one(self, index):
        rnd = random.Random(self.seed * 1000003 + index)
        workdir = os.path.join(self.root, "w%d" % index)
        os.makedirs(workdir)
        r = rnd.random()
        if r < 0.55:
            args, kind = self.argv(rnd), "argv"
        elif r < 0.80:
            args, kind = self.config_input(rnd, workdir)
        elif r < 0.95:
            args, kind = self.machine_input(rnd, workdir)
        else:
            args, kind = self.real_argv(rnd), "real run"
        before = set(os.listdir(workdir))
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:exitcode=99",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98")
        env.pop("AEBENCH_REPORT_FD", None)
        t0 = time.time()
        try:
            p = subprocess.run([self.bin] + args, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=TIMEOUT_S, env=env, check=False)
            code, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            code, err = "timeout", (e.stderr or b"").decode("utf-8", "replace")
        took = time.time() - t0
        bad = None
        if code == "timeout":
            bad = "did not end within %d s" % TIMEOUT_S
        elif code < 0:
            bad = "killed by signal %d" % -code
        elif "Sanitizer" in err or "runtime error:" in err:
            bad = "sanitizer report"
        elif code not in (0, 2, 3):
            bad = "exit %d (want 0, 2 or 3)" % code
        elif code == 2:
            lines = [l for l in err.splitlines() if l.strip()]
            written = sorted(set(os.listdir(workdir)) - before)
            if len(lines) != 1:
                bad = "exit 2 with %d lines on stderr (want 1)" % len(lines)
            elif written:
                bad = "exit 2 but wrote %s" % written
        if not bad:
            shutil.rmtree(workdir, ignore_errors=True)
        return index, kind, code, bad, args, err[-600:], took


def _show(text, limit=100):
    """An argument or a message as printed: quoted when it needs it, long ones cut."""
    cut = text if len(text) <= limit else text[:limit] + "...(%d chars)" % len(text)
    return repr(cut) if (" " in cut and limit == 100) or not cut else cut


def _leaves(doc, parent=None, key=None):
    """(parent, key) of every value in doc, containers included."""
    if parent is not None:
        yield parent, key
    if isinstance(doc, dict):
        for k in list(doc):
            yield from _leaves(doc[k], doc, k)
    elif isinstance(doc, list):
        for i in range(len(doc)):
            yield from _leaves(doc[i], doc, i)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--inputs", type=int, default=1500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="a directory to keep the failing inputs' work directories in")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="aebench-fuzz.", dir=os.environ.get("TMPDIR", "/tmp"))
    t0 = time.time()
    camp = Campaign(os.path.realpath(a.bin), a.seed, root)
    kinds, outcomes, failures, slowest = {}, {}, [], 0.0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for index, kind, code, bad, args, err, took in pool.map(camp.one, range(a.inputs)):
            top = kind.split("/")[0]
            kinds[top] = kinds.get(top, 0) + 1
            outcomes[str(code)] = outcomes.get(str(code), 0) + 1
            slowest = max(slowest, took)
            if bad:
                failures.append((index, kind, bad, args, err))
                if len(failures) <= 10:
                    print("FAIL fuzz input %d (%s): %s\n  args: %s\n  stderr: %s" %
                          (index, kind, bad, " ".join(_show(x) for x in args),
                           _show(err.strip(), 800).replace("\n", "\n          ")))
    if a.keep and failures:
        shutil.copytree(root, a.keep, dirs_exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    figure = ("fuzz campaign (seed %d): %d inputs (%s) in %.0f s; exits %s; slowest %.1f s; failures %d" %
              (a.seed, a.inputs, ", ".join("%s %d" % kv for kv in sorted(kinds.items())), time.time() - t0,
               ", ".join("%s: %d" % kv for kv in sorted(outcomes.items())), slowest, len(failures)))
    print(figure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
