#include "cli.h"
#include "hostfile.h"
#include "report.h"
#include "strv.h"
#include "../engines/runtime/watchdog.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

typedef enum opt_id {
    OPT_METHOD, OPT_LAYERS, OPT_HIDDEN, OPT_BATCH, OPT_WINDOW, OPT_HEADS, OPT_SEQ, OPT_VOCAB,
    OPT_ITERS, OPT_LOG_INTERVAL, OPT_SEED, OPT_RESULTS, OPT_DEVICE, OPT_CONFIG, OPT_DTYPE,
    OPT_GPU_MEM, OPT_CPU_MEM, OPT_DRY_RUN, OPT_DATA, OPT_NO_CKPT, OPT_RECOMPUTE, OPT_GRAPHS, OPT_LR, OPT_MIN_LR,
    OPT_DECAY_ITERS, OPT_WARMUP, OPT_WEIGHT_DECAY, OPT_CLIP, OPT_THREADS, OPT_MATH, OPT_FIND_MAX,
    OPT_RESUME, OPT_DPU, OPT_OFFLOAD, OPT_NVME_DIR, OPT_RANKS, OPT_GLOBAL_BATCH, OPT_ZERO_STAGE, OPT_SAVE_PARAMS, OPT_FAIL_AT, OPT_FAIL_RANK,
    OPT_GEMINI_MODE, OPT_GEMINI_REPLICAS, OPT_GEMINI_PLACEMENT, OPT_GEMINI_TRANSPORT, OPT_GEMINI_STORE, OPT_GEMINI_JOB,
    OPT_GEMINI_RECOVER, OPT_FAIL_KIND, OPT_FAIL_PHASE, OPT_CKPT_DIR, OPT_CKPT_EVERY, OPT_GEMINI_CKPT_FROM, OPT_GEMINI_EVERY,
    OPT_CLIP_SPECULATE, OPT_PLACEMENT, OPT_CALIBRATE, OPT_PREDICT, OPT_MACHINE, OPT_HANG_TIMEOUT,
    OPT_SEARCH, OPT_LARGEST, OPT_MIN_SAMPLES, OPT_TOP, OPT_OUT, OPT_VERIFY, OPT_HOSTS, OPT_PROFILE,
    OPT_HELP, OPT_VERSION,
    OPT_COUNT
} opt_id;

typedef enum arg_kind { ARG_NONE, ARG_INT, ARG_NUM, ARG_TEXT } arg_kind;

typedef struct opt_spec {
    opt_id id;
    const char *name;
    char short_name; /* 0: long only */
    arg_kind kind;   /* ARG_NONE: a flag (true/false in a config) */
    const char *arg; /* for --help */
    const char *help;
} opt_spec;

static const opt_spec specs[] = {
    {OPT_METHOD, "method", 'm', ARG_TEXT, "NAME", "engine to run, or 'all' (default megatron-lm)"},
    {OPT_LAYERS, "layers", 'l', ARG_INT, "L", "transformer layers (default 16)"},
    {OPT_HIDDEN, "hidden", 'h', ARG_INT, "H", "hidden size (default 2048)"},
    {OPT_BATCH, "batch", 'b', ARG_INT, "B", "micro-batch size per rank (default 4)"},
    {OPT_WINDOW, "window", 'w', ARG_TEXT, "W|auto", "GPU window of windowed engines (default auto; not with -m all)"},
    {OPT_HEADS, "heads", 0, ARG_INT, "N", "attention heads (default 16)"},
    {OPT_SEQ, "seq", 0, ARG_INT, "T", "sequence length (default 1024)"},
    {OPT_VOCAB, "vocab", 0, ARG_INT, "V", "vocabulary size, 2 or more, padded to a multiple of 128 (default 50257)"},
    {OPT_ITERS, "iters", 0, ARG_INT, "N", "training iterations (default 50)"},
    {OPT_LOG_INTERVAL, "log-interval", 0, ARG_INT, "N", "iterations per log line (default 10)"},
    {OPT_SEED, "seed", 0, ARG_INT, "S", "seed of initialisation and synthetic data (default 1234)"},
    {OPT_RESULTS, "results", 0, ARG_TEXT, "DIR", "where logs and JSON go (default results)"},
    {OPT_DEVICE, "device", 0, ARG_TEXT, "cpu|cuda", "compute backend (default cuda if usable)"},
    {OPT_CONFIG, "config", 0, ARG_TEXT, "FILE.json", "read options, or a run list (a case), from JSON"},
    {OPT_DTYPE, "dtype", 0, ARG_TEXT, "fp32|bf16", "activations and working weights (default fp32; bf16 emulated on the CPU backend)"},
    {OPT_MATH, "math", 0, ARG_TEXT, "tf32|fp32", "GPU matmuls on TF32 tensor cores, or strict fp32 (default tf32)"},
    {OPT_GPU_MEM, "gpu-mem-limit", 0, ARG_TEXT, "SIZE", "GPU memory budget, e.g. 32G (default: free memory)"},
    {OPT_CPU_MEM, "cpu-mem-limit", 0, ARG_TEXT, "SIZE", "host memory budget, e.g. 90G (default: 90% of available memory)"},
    {OPT_DRY_RUN, "dry-run", 0, ARG_NONE, NULL, "print the memory plan and parameter count, allocate nothing"},
    {OPT_DATA, "data", 0, ARG_TEXT, "FILE", "train on little-endian uint16 tokens (default: synthetic corpus)"},
    {OPT_RECOMPUTE, "recompute", 0, ARG_TEXT, "full|selective|none",
     "what the backward recomputes (default full: each layer from its input, the artifact's; selective: the "
     "LayerNorms, attention and GELU, keeping the GEMM outputs; none: keeps every activation)"},
    {OPT_NO_CKPT, "no-ckpt", 0, ARG_NONE, NULL, "--recompute none (the older name)"},
    {OPT_GRAPHS, "graphs", 0, ARG_TEXT, "auto|on|off",
     "replay each step's forward and backward as CUDA graphs, captured at the second step (default auto: "
     "on for megatron-lm on one rank on the GPU, unless --profile; on: an error where it cannot)"},
    {OPT_LR, "lr", 0, ARG_NUM, "X", "peak learning rate (default 1.5e-4)"},
    {OPT_MIN_LR, "min-lr", 0, ARG_NUM, "X", "final learning rate of the cosine decay (default 1e-5)"},
    {OPT_DECAY_ITERS, "lr-decay-iters", 0, ARG_INT, "N", "cosine decay length (default 320000)"},
    {OPT_WARMUP, "lr-warmup-fraction", 0, ARG_NUM, "F", "warm-up fraction of the decay (default 0.01)"},
    {OPT_WEIGHT_DECAY, "weight-decay", 0, ARG_NUM, "X", "AdamW weight decay (default 0.01)"},
    {OPT_CLIP, "clip-grad", 0, ARG_NUM, "X", "global-norm clipping, 0 disables (default 1.0)"},
    {OPT_DPU, "dpu", 0, ARG_NONE, NULL, "zero-offload: delayed parameter update (step i's CPU Adam overlaps step i+1)"},
    {OPT_OFFLOAD, "offload", 0, ARG_TEXT, "cpu|nvme", "zero-infinity, stronghold: optimizer state in host memory or on disk (default cpu)"},
    {OPT_NVME_DIR, "nvme-dir", 0, ARG_TEXT, "DIR", "--offload nvme: where the private swap directory goes (default: the results directory)"},
    {OPT_THREADS, "threads", 0, ARG_INT, "N", "CPU threads, 0 = all cores (default 0)"},
    {OPT_RANKS, "ranks", 0, ARG_INT, "N", "data-parallel ranks on this machine: starts mpiexec -n N itself (default 1; under mpirun: the world size)"},
    {OPT_PROFILE, "profile", 0, ARG_NONE, NULL, "time every kernel-set op of every step (an event pair around each; the host waits at each step's end): where the step goes, op family by family, with TFLOP/s and GB/s, in the log, stdout and JSON"},
    {OPT_HOSTS, "hosts", 0, ARG_TEXT, "FILE", "--ranks N on the machines mpiexec's hostfile FILE lists (MPICH host:S, Open MPI host slots=S; the first must be this one, where rank 0 runs): passed to mpiexec, and -m all, --find-max, --search and the plans split each machine's memory by its ranks"},
    {OPT_GLOBAL_BATCH, "global-batch", 0, ARG_INT, "G", "samples per optimizer step over all ranks, as Megatron's (default B x ranks); G/(B x ranks) micro-batches each"},
    {OPT_SAVE_PARAMS, "save-params", 0, ARG_TEXT, "FILE", "after training, write every parameter (fp32, little-endian, the canonical [embed | layer 0 | ...] layout) to FILE"},
    {OPT_FAIL_AT, "fail-at", 0, ARG_INT, "I", "fault injection: rank --fail-rank kills itself (SIGKILL) at the start of iteration I"},
    {OPT_FAIL_RANK, "fail-rank", 0, ARG_TEXT, "R[,R...]", "the rank(s) that --fail-at kills, at once (default 0)"},
    {OPT_FAIL_PHASE, "fail-phase", 0, ARG_TEXT, "forward|backward|checkpoint", "with --fail-at: where in iteration I the rank dies: its start, its backward's (megatron-lm, gemini), its checkpoint's middle (gemini) (default forward)"},
    {OPT_FAIL_KIND, "fail-kind", 0, ARG_TEXT, "software|hardware|stop", "with --fail-at: what it does: kill the process, or (hardware) its machine too: --ranks deletes its in-memory checkpoints before relaunching, or (stop) stop it (SIGSTOP: a hung rank, for the watchdogs) (default software)"},
    {OPT_ZERO_STAGE, "zero-stage", 0, ARG_INT, "0-3", "megatron-lm on N ranks: 0 DDP, 1 sharded Adam state, 2 + sharded grads, 3 + sharded params (default 0)"},
    {OPT_GEMINI_MODE, "gemini-mode", 0, ARG_TEXT, "none|naive|interleave", "gemini: no checkpoint; every iteration's right after its step; or sent during the next step in the idle spans of its collectives (default interleave)"},
    {OPT_GEMINI_REPLICAS, "gemini-replicas", 0, ARG_INT, "M", "gemini: copies of each rank's checkpoint, its own and M-1 peers' (default 2, or 1 on one rank)"},
    {OPT_GEMINI_PLACEMENT, "gemini-placement", 0, ARG_TEXT, "group|ring", "gemini: ranks in groups of M holding the group's checkpoints, or rank r holding r-1 ... r-M+1 (default group)"},
    {OPT_GEMINI_TRANSPORT, "gemini-transport", 0, ARG_TEXT, "auto|sendrecv|read", "gemini: how a peer's shard reaches the rank that keeps it: read by that rank's copy engines (CUDA IPC; MPI one-sided on the CPU backend), sent by NCCL kernels (MPI send/recv), or read where every rank is on one machine and can (default auto)"},
    {OPT_GEMINI_STORE, "gemini-store", 0, ARG_TEXT, "DIR", "gemini: the memory file system the checkpoints live in (default /dev/shm)"},
    {OPT_GEMINI_JOB, "gemini-job", 0, ARG_TEXT, "ID", "gemini: the job's id, which names its store (default: made at start)"},
    {OPT_GEMINI_RECOVER, "gemini-recover", 0, ARG_NONE, NULL, "gemini: restore job --gemini-job from its store (the newest version every rank has) and go on"},
    {OPT_CKPT_DIR, "ckpt-dir", 0, ARG_TEXT, "DIR", "gemini: also a persistent checkpoint on disk there (O_DIRECT), what recovery falls back to when every copy of a shard is lost"},
    {OPT_CLIP_SPECULATE, "clip-speculate", 0, ARG_TEXT, "N|auto", "stronghold with clipping: the top N streamed layers updated as their grads arrive, redone exactly when the norm clips (auto: as many as host memory holds the undo copies of; 0: wait for the norm)"},
    {OPT_PLACEMENT, "placement", 0, ARG_TEXT, "bottom|spread|auto", "stronghold: its resident layers at the bottom of the model (the paper's window) or spread between the streamed ones, which hides the forward's copies (default auto: -w auto takes the faster, -w W bottom)"},
    {OPT_GEMINI_CKPT_FROM, "gemini-ckpt-from", 0, ARG_INT, "I", "gemini: checkpoint from iteration I on, train the ones before without (the artifact's comparison; default 1)"},
    {OPT_CKPT_EVERY, "ckpt-every", 0, ARG_INT, "K", "gemini --ckpt-dir: every K iterations (default 10; only with --ckpt-dir)"},
    {OPT_GEMINI_EVERY, "gemini-every", 0, ARG_TEXT, "K|auto", "gemini: an in-memory checkpoint every K iterations (auto: the fewest that keep the checkpoints' exposed time under 1% of the step, chosen from interleave's measurements; default 1)"},
    {OPT_FIND_MAX, "find-max", 0, ARG_NONE, NULL, "find the largest layer count that trains (bisection over child runs)"},
    {OPT_RESUME, "resume", 0, ARG_NONE, NULL, "sweeps: skip runs whose JSON in the results directory says ok"},
    {OPT_CALIBRATE, "calibrate", 0, ARG_NONE, NULL, "measure this machine for --predict at the given shape, math and dtype into results/machine_HOST_DEVICE.json (or --machine FILE)"},
    {OPT_PREDICT, "predict", 0, ARG_NONE, NULL, "print each engine's predicted ms/iteration, its breakdown and plan from the machine file, train nothing"},
    {OPT_MACHINE, "machine", 0, ARG_TEXT, "FILE", "the machine file --calibrate writes and --predict reads (default results/machine_HOST_DEVICE.json)"},
    {OPT_SEARCH, "search", 0, ARG_NONE, NULL, "every configuration of every engine (window, placement, ZeRO stage, --dpu, --offload, --clip-speculate, micro-batch, checkpointing) planned against the budgets and predicted from the machine file; prints the fastest with the command that runs each (what you give is fixed, the rest searched)"},
    {OPT_LARGEST, "largest", 0, ARG_NONE, NULL, "--search: the largest -l that any configuration trains in the budgets, and the fastest there"},
    {OPT_MIN_SAMPLES, "min-samples-per-s", 0, ARG_NUM, "X", "--search --largest: the largest -l that still trains at X samples/s (predicted)"},
    {OPT_TOP, "top", 0, ARG_INT, "K", "--search: how many configurations to print (default 5)"},
    {OPT_OUT, "out", 0, ARG_TEXT, "FILE", "--search: write the fastest as a config that --config FILE runs"},
    {OPT_VERIFY, "verify", 0, ARG_INT, "K", "--search: train the top K and K random feasible configurations and print predicted against measured"},
    {OPT_HANG_TIMEOUT, "hang-timeout", 0, ARG_TEXT, "S|auto", "every rank ends the job (exit 4) after S seconds (1 or more) without progress, naming where it waits and the rank that stopped; auto: 600 s while setting up, then max(30 s, 10 median steps); the --ranks supervisor ends a job none of whose ranks gets past MPI's start-up in S (auto: 120 s); 0: never (default auto)"},
    {OPT_HELP, "help", 0, ARG_NONE, NULL, "this text"},
    {OPT_VERSION, "version", 0, ARG_NONE, NULL, "print the version"},
};

enum { NSPECS = (int)(sizeof specs / sizeof specs[0]) };
/* (run_config.given holds a bit per option) */
_Static_assert(OPT_COUNT <= 128, "run_config.given has 128 bits");

static const opt_spec *spec_by_name(const char *name)
{
    for (int i = 0; i < NSPECS; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

int cli_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    /* One line, whatever the input it quotes holds (a newline in a config's string) */
    for (char *c = err; errlen && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return -1;
}

/* An option that takes one of some words: the value of the word given into *out; else
 * "OPT: 'x' is not a, b or c" (the words in the table's order).  0, or what cli_fail returns. */
typedef struct choice {
    const char *word;
    int value;
} choice;
static int choose(const char *opt, const char *value, const choice *words, int n, int *out, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (strcmp(value, words[i].word) == 0) {
            *out = words[i].value;
            return 0;
        }
    char list[200] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 words[i].word);
    return cli_fail(err, errlen, "%s: '%s' is not %s", opt, value, list);
}
/* In apply(): out_ = the value of the word `value` names among the {word, value} pairs given,
 * or return -1 from apply with the error set. */
#define CHOOSE(out_, ...)                                                                                           \
    do {                                                                                                           \
        static const choice words_[] = {__VA_ARGS__};                                                              \
        int v_ = 0;                                                                                                \
        if (choose(opt, value, words_, (int)(sizeof words_ / sizeof words_[0]), &v_, err, errlen)) return -1;      \
        (out_) = v_;                                                                                               \
    } while (0)

/* A path option's value into dst: "empty <what> name" when it is empty (what NULL: empty is
 * allowed), "path too long" when it does not fit.  0, or what cli_fail returns. */
static int set_path(char *dst, size_t len, const char *value, const char *what, const char *opt, char *err,
                    size_t errlen)
{
    if (what && !*value) return cli_fail(err, errlen, "%s: empty %s name", opt, what);
    if (snprintf(dst, len, "%s", value) >= (int)len) return cli_fail(err, errlen, "%s: path too long", opt);
    return 0;
}

/* A whole-string integer in [lo, hi]: 0; -1 when it is not an integer, -2 when it is one
 * outside the range (or too large for 64 bits). */
static int parse_int(const char *text, long long lo, long long hi, long long *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (*end != '\0' || end == text) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    if (errno) return -1;
    *out = v;
    return 0;
}

/* The largest value an integer option takes.  The model's dimensions are bounded far above any
 * model (2^20 layers, a hidden size of 2^20, ...) so that no int arithmetic on them (layers + 1
 * blocks, heads x head size, ...) can wrap, and the byte counts are 64-bit; a vocabulary's
 * padding to a multiple of 128 still fits an int; CPU threads beyond what any host has only
 * make the OpenMP runtime fail; iterations leave room for one more. */
enum { MAX_THREADS = 1024, MIN_VOCAB = 2, MAX_VOCAB = 2147483647 - 127, MAX_DIM = 1 << 20, MAX_SEQ = 1 << 24,
       MAX_ITERS = 1000000000 };

static long long int_max_of(int id)
{
    switch (id) {
    case OPT_THREADS: return MAX_THREADS;
    case OPT_VOCAB: return MAX_VOCAB;
    case OPT_LAYERS: case OPT_HIDDEN: case OPT_HEADS: case OPT_BATCH: return MAX_DIM;
    case OPT_SEQ: return MAX_SEQ;
    case OPT_ITERS: case OPT_LOG_INTERVAL: case OPT_DECAY_ITERS: case OPT_FAIL_AT: case OPT_CKPT_EVERY:
    case OPT_GEMINI_CKPT_FROM: return MAX_ITERS;
    default: return 2147483647LL;
    }
}

/* A whole number in [lo, hi], or "auto" (*out = auto_value); -1 when it is neither. */
static int parse_int_or_auto(const char *text, long long lo, long long hi, int auto_value, int *out)
{
    long long v = 0;
    if (strcmp(text, "auto") == 0) {
        *out = auto_value;
        return 0;
    }
    if (parse_int(text, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

static int parse_num(const char *text, double *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (errno || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static void set_defaults(run_config *rc)
{
    memset(rc, 0, sizeof *rc);
    snprintf(rc->method, sizeof rc->method, "megatron-lm");
    /* The artifact's defaults (ENGINES.md). */
    rc->eng.shape = (gpt_shape){
        .layers = 16, .hidden = 2048, .heads = 16, .seq = 1024, .batch = 4, .vocab = 50257,
    };
    rc->eng.window = 0;
    rc->eng.recompute = GPT_RECOMPUTE_FULL;
    rc->eng.optim = gpt_optim_default();
    rc->eng.seed = 1234;
    rc->eng.device = DEVICE_CPU;
    rc->eng.tf32 = 1;
    rc->eng.gemini_mode = GEMINI_INTERLEAVE;
    rc->eng.gemini_replicas = 0; /* min(2, ranks) */
    rc->eng.gemini_placement = GEMINI_GROUP;
    snprintf(rc->eng.gemini_store, sizeof rc->eng.gemini_store, "/dev/shm");
    rc->eng.ckpt_every = 10;
    rc->eng.gemini_every = 1;
    rc->eng.gemini_ckpt_from = 1;
    rc->eng.clip_speculate = -1;
    rc->iters = 50;
    rc->hang_timeout_s = -1; /* auto */
    rc->log_interval = 10;
    rc->search_top = 5;
    snprintf(rc->results_dir, sizeof rc->results_dir, "results");
}

/* --recompute M and --no-ckpt (the older name of --recompute none) given in one place (the
 * command line, or one object of a config): whichever came last would win, so two that
 * disagree are refused.  (A config's value overridden by the command line is not a clash.) */
typedef struct recompute_seen {
    int recompute, no_ckpt; /* given here */
    int none;               /* --recompute's value is none */
    int no_ckpt_flag;       /* --no-ckpt's value (false in a config: --recompute full) */
    char value[16];
} recompute_seen;

static void note_recompute(recompute_seen *seen, const opt_spec *sp, const char *value, int flag)
{
    if (sp->id == OPT_RECOMPUTE) {
        seen->recompute = 1;
        seen->none = strcmp(value, "none") == 0;
        snprintf(seen->value, sizeof seen->value, "%.15s", value);
    } else if (sp->id == OPT_NO_CKPT) {
        seen->no_ckpt = 1;
        seen->no_ckpt_flag = flag;
    }
}

static int recompute_clash(const recompute_seen *seen, const char *where, char *err, size_t errlen)
{
    if (!seen->recompute || !seen->no_ckpt || seen->none == seen->no_ckpt_flag) return 0;
    return cli_fail(err, errlen, "%s%s--recompute %s and --no-ckpt%s contradict each other (--no-ckpt is --recompute "
                    "none): give one", where, where[0] ? ": " : "", seen->value, seen->no_ckpt_flag ? "" : " false");
}

/* Apply one option whose value is text (from argv, or converted from JSON).
 * flag_value: for ARG_NONE options, 1 to set and 0 to clear.  label names the option in
 * messages: NULL for the command line ("--layers"), else where it came from in a config
 * ("config F: runs[3].layers"). */
static int apply(run_config *rc, const opt_spec *sp, const char *value, int flag_value,
                 const char *label, char *err, size_t errlen)
{
    char opt[PATH_MAX + 128];
    if (label) snprintf(opt, sizeof opt, "%s", label);
    else snprintf(opt, sizeof opt, "--%s", sp->name);
    long long iv = 0;
    double dv = 0;
    size_t bytes = 0;
    if (sp->kind == ARG_INT) {
        long long lo = (sp->id == OPT_SEED || sp->id == OPT_THREADS || sp->id == OPT_ZERO_STAGE ||
                        sp->id == OPT_FAIL_RANK) ? 0 : 1;
        /* (a vocabulary of one token has nothing to predict: its loss is 0 whatever the weights) */
        if (sp->id == OPT_VOCAB) lo = MIN_VOCAB;
        const long long hi = int_max_of(sp->id);
        const int bad = parse_int(value, lo, hi, &iv);
        if (bad == -2)
            return cli_fail(err, errlen, "%s: %s is out of range: an integer from %lld to %lld%s", opt, value, lo, hi,
                            sp->id == OPT_THREADS ? " (CPU threads; 0: all cores)"
                            : sp->id == OPT_VOCAB ? " (two tokens or more to predict; at most what its padding to a "
                                                    "multiple of 128 leaves in an int)" : "");
        if (bad)
            return cli_fail(err, errlen, "%s: '%s' is not %s integer", opt,
                        value ? value : "", lo ? "a positive" : "a non-negative");
    } else if (sp->kind == ARG_NUM) {
        if (parse_num(value, &dv))
            return cli_fail(err, errlen, "%s: '%s' is not a number", opt,
                        value ? value : "");
    }
    rc->given[sp->id / 64] |= 1ULL << (sp->id % 64);
    engine_config *e = &rc->eng;
    switch (sp->id) {
    case OPT_METHOD:
        if (strcmp(value, "all") != 0 && !engine_find(value)) {
            char names[256] = "";
            for (int i = 0; i < engine_count(); i++) {
                strncat(names, engine_at(i)->name, sizeof names - strlen(names) - 1);
                strncat(names, ", ", sizeof names - strlen(names) - 1);
            }
            return cli_fail(err, errlen, "%s%sunknown method '%s' (known: %sall)", label ? label : "",
                        label ? ": " : "", value, names);
        }
        snprintf(rc->method, sizeof rc->method, "%s", value);
        break;
    case OPT_LAYERS: e->shape.layers = (int)iv; break;
    case OPT_HIDDEN: e->shape.hidden = (int)iv; break;
    case OPT_BATCH: e->shape.batch = (int)iv; break;
    case OPT_HEADS: e->shape.heads = (int)iv; break;
    case OPT_SEQ: e->shape.seq = (int)iv; break;
    case OPT_VOCAB: e->shape.vocab = (int)iv; break;
    case OPT_WINDOW:
        if (parse_int_or_auto(value, 1, 1000000, 0, &e->window))
            return cli_fail(err, errlen, "%s: '%s' is neither a positive integer nor 'auto'", opt, value);
        break;
    case OPT_ITERS: rc->iters = (int)iv; break;
    case OPT_LOG_INTERVAL: rc->log_interval = (int)iv; break;
    case OPT_SEED: e->seed = (uint64_t)iv; break;
    case OPT_THREADS: e->threads = (int)iv; break;
    case OPT_RANKS: rc->ranks = (int)iv; break;
    case OPT_GLOBAL_BATCH: e->global_batch = (int)iv; break;
    case OPT_FAIL_AT: rc->fail_at = (int)iv; break;
    case OPT_FAIL_RANK: {
        unsigned long long mask = 0;
        const char *q = value;
        for (;;) {
            char *end = NULL;
            errno = 0;
            long r = strtol(q, &end, 10);
            if (end == q || errno || r < 0 || r > 63 || (*end != ',' && *end != '\0'))
                return cli_fail(err, errlen, "%s: '%s' is not a rank or a list of ranks (0-63, e.g. 1,2)", opt, value);
            mask |= 1ull << r;
            if (*end == '\0') break;
            q = end + 1;
        }
        rc->fail_ranks = mask;
        snprintf(rc->fail_ranks_text, sizeof rc->fail_ranks_text, "%.63s", value);
        break;
    }
    case OPT_FAIL_PHASE:
        CHOOSE(rc->fail_phase, {"forward", FAULT_FORWARD}, {"backward", FAULT_BACKWARD}, {"checkpoint", FAULT_CHECKPOINT});
        break;
    case OPT_FAIL_KIND:
        CHOOSE(rc->fail_kind, {"software", FAIL_SOFTWARE}, {"hardware", FAIL_HARDWARE}, {"stop", FAIL_STOP});
        break;
    case OPT_SAVE_PARAMS:
        if (set_path(rc->save_params, sizeof rc->save_params, value, "file", opt, err, errlen)) return -1;
        break;
    case OPT_GEMINI_MODE:
        CHOOSE(e->gemini_mode, {"none", GEMINI_NONE}, {"naive", GEMINI_NAIVE}, {"interleave", GEMINI_INTERLEAVE});
        break;
    case OPT_GEMINI_REPLICAS: e->gemini_replicas = (int)iv; break;
    case OPT_GEMINI_PLACEMENT:
        CHOOSE(e->gemini_placement, {"group", GEMINI_GROUP}, {"ring", GEMINI_RING});
        break;
    case OPT_GEMINI_TRANSPORT:
        CHOOSE(e->gemini_transport, {"auto", GEMINI_PEER_AUTO}, {"sendrecv", GEMINI_PEER_SENDRECV},
               {"read", GEMINI_PEER_READ});
        break;
    case OPT_GEMINI_STORE:
        if (set_path(e->gemini_store, sizeof e->gemini_store, value, "directory", opt, err, errlen)) return -1;
        break;
    case OPT_GEMINI_JOB:
        if (!*value || strlen(value) >= sizeof e->gemini_job || strspn(value,
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != strlen(value))
            return cli_fail(err, errlen, "%s: '%s' is not a job id (letters, digits, _ and -, at most %zu)",
                            opt, value, sizeof e->gemini_job - 1);
        snprintf(e->gemini_job, sizeof e->gemini_job, "%s", value);
        break;
    case OPT_GEMINI_RECOVER: e->gemini_recover = flag_value; break;
    case OPT_CKPT_DIR:
        if (set_path(e->ckpt_dir, sizeof e->ckpt_dir, value, "directory", opt, err, errlen)) return -1;
        break;
    case OPT_CKPT_EVERY: e->ckpt_every = (int)iv; break;
    case OPT_GEMINI_EVERY:
        if (parse_int_or_auto(value, 1, MAX_ITERS, -1, &e->gemini_every))
            return cli_fail(err, errlen, "%s: '%s' is neither an interval (1 or more iterations) nor 'auto'", opt, value);
        break;
    case OPT_CLIP_SPECULATE:
        if (parse_int_or_auto(value, 0, 1000000, -1, &e->clip_speculate))
            return cli_fail(err, errlen, "%s: '%s' is neither a layer count (0 or more) nor 'auto'", opt, value);
        break;
    case OPT_PLACEMENT:
        CHOOSE(e->placement, {"bottom", PLACE_BOTTOM}, {"spread", PLACE_SPREAD}, {"auto", PLACE_AUTO});
        break;
    case OPT_GEMINI_CKPT_FROM:
        if (iv < 1) return cli_fail(err, errlen, "%s: '%s' is not an iteration (1 or more)", opt, value);
        e->gemini_ckpt_from = (int)iv;
        break;
    case OPT_ZERO_STAGE:
        if (iv > 3) return cli_fail(err, errlen, "%s: '%s' is not a ZeRO stage (0, 1, 2 or 3)", opt, value);
        e->zero_stage = (int)iv;
        break;
    case OPT_RESULTS:
        if (set_path(rc->results_dir, sizeof rc->results_dir, value, "directory", opt, err, errlen)) return -1;
        break;
    case OPT_DATA:
        if (set_path(rc->data_path, sizeof rc->data_path, value, NULL, opt, err, errlen)) return -1;
        break;
    case OPT_DEVICE:
        CHOOSE(e->device, {"cpu", DEVICE_CPU}, {"cuda", DEVICE_CUDA});
        rc->device_given = 1;
        break;
    case OPT_DTYPE:
        CHOOSE(e->bf16, {"fp32", 0}, {"bf16", 1});
        break;
    case OPT_MATH:
        CHOOSE(e->tf32, {"tf32", 1}, {"fp32", 0});
        break;
    case OPT_GPU_MEM:
    case OPT_CPU_MEM:
        if (parse_bytes(value, &bytes))
            return cli_fail(err, errlen, "%s: '%s' is not a size (e.g. 32G, 512M, 1073741824)",
                        opt, value);
        if (sp->id == OPT_GPU_MEM) rc->gpu_mem_limit = bytes;
        else rc->cpu_mem_limit = bytes;
        break;
    case OPT_DPU: e->dpu = flag_value; break;
    case OPT_OFFLOAD:
        CHOOSE(e->offload, {"cpu", OFFLOAD_CPU}, {"nvme", OFFLOAD_NVME});
        break;
    case OPT_NVME_DIR:
        if (set_path(e->nvme_dir, sizeof e->nvme_dir, value, "directory", opt, err, errlen)) return -1;
        break;
    case OPT_DRY_RUN: rc->dry_run = flag_value; break;
    case OPT_FIND_MAX: rc->find_max = flag_value; break;
    case OPT_RESUME: rc->resume = flag_value; break;
    case OPT_CALIBRATE: rc->calibrate = flag_value; break;
    case OPT_PROFILE: rc->profile = flag_value; break;
    case OPT_HANG_TIMEOUT:
        if (watchdog_parse_timeout(value, &rc->hang_timeout_s))
            return cli_fail(err, errlen, "%s: '%s' is neither seconds (0 or more, 0: never) nor 'auto'", opt, value);
        /* The watchdog looks once per tick and gives a lower rank a grace of seconds, so a
         * limit under a second would not be kept; and the messages print whole seconds */
        if (rc->hang_timeout_s > 0 && rc->hang_timeout_s < 1)
            return cli_fail(err, errlen, "%s: %s s is below 1 s, the least the watchdogs keep (0: never)", opt, value);
        break;
    case OPT_PREDICT: rc->predict = flag_value; break;
    case OPT_SEARCH: rc->search = flag_value; break;
    case OPT_LARGEST: rc->search_largest = flag_value; break;
    case OPT_MIN_SAMPLES:
        if (dv <= 0) return cli_fail(err, errlen, "%s: must be positive (samples per second)", opt);
        rc->min_samples_per_s = dv;
        break;
    case OPT_TOP: rc->search_top = (int)iv; break;
    case OPT_VERIFY:
        if (iv > 1000) return cli_fail(err, errlen, "%s: %lld is out of range: at most 1000 trained", opt, iv);
        rc->search_verify = (int)iv;
        break;
    case OPT_OUT:
        if (set_path(rc->search_out, sizeof rc->search_out, value, "file", opt, err, errlen)) return -1;
        break;
    case OPT_MACHINE:
        if (set_path(rc->machine_path, sizeof rc->machine_path, value, "file", opt, err, errlen)) return -1;
        break;
    case OPT_HOSTS:
        if (set_path(rc->hosts_path, sizeof rc->hosts_path, value, "file", opt, err, errlen)) return -1;
        break;
    case OPT_NO_CKPT: e->recompute = flag_value ? GPT_RECOMPUTE_NONE : GPT_RECOMPUTE_FULL; break;
    case OPT_GRAPHS:
        CHOOSE(e->graphs, {"auto", GRAPHS_AUTO}, {"on", GRAPHS_ON}, {"off", GRAPHS_OFF});
        break;
    case OPT_RECOMPUTE:
        CHOOSE(e->recompute, {"full", GPT_RECOMPUTE_FULL}, {"selective", GPT_RECOMPUTE_SELECTIVE},
               {"none", GPT_RECOMPUTE_NONE});
        break;
    case OPT_LR:
        if (dv <= 0) return cli_fail(err, errlen, "%s: must be positive", opt);
        e->optim.lr = dv;
        break;
    case OPT_MIN_LR:
        if (dv < 0) return cli_fail(err, errlen, "%s: must not be negative", opt);
        e->optim.min_lr = dv;
        break;
    case OPT_DECAY_ITERS: e->optim.decay_iters = (int)iv; break;
    case OPT_WARMUP:
        if (dv < 0 || dv > 1) return cli_fail(err, errlen, "%s: must be in [0, 1]", opt);
        e->optim.warmup_fraction = dv;
        break;
    case OPT_WEIGHT_DECAY:
        if (dv < 0) return cli_fail(err, errlen, "%s: must not be negative", opt);
        e->optim.weight_decay = dv;
        break;
    case OPT_CLIP:
        if (dv < 0) return cli_fail(err, errlen, "%s: must not be negative", opt);
        e->optim.clip = dv;
        break;
    case OPT_CONFIG:
    case OPT_HELP:
    case OPT_VERSION:
    case OPT_COUNT:
        break;
    }
    return 0;
}

/* The whole file parsed as JSON; NULL with err set. */
/* The first key given twice in one object of the tree (cJSON keeps both; which one an option
 * took would be an accident), or NULL; *where is that object's key ("" the top level). */
static const char *duplicate_key(const cJSON *obj, const char **where)
{
    for (const cJSON *a = obj->child; a; a = a->next) {
        if (cJSON_IsObject(obj) && a->string)
            for (const cJSON *b = a->next; b; b = b->next)
                if (b->string && strcmp(a->string, b->string) == 0) {
                    *where = obj->string ? obj->string : "";
                    return a->string;
                }
        if (cJSON_IsObject(a) || cJSON_IsArray(a)) {
            const char *d = duplicate_key(a, where);
            if (d) return d;
        }
    }
    return NULL;
}

static cJSON *read_json(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return cli_fail(err, errlen, "config %s: not a regular file (a JSON file was expected)", path), NULL;
    long long size = 0;
    char *text = report_read_text_max(path, CLI_JSON_MAX_BYTES, &size);
    if (!text && errno == EFBIG)
        return cli_fail(err, errlen, "config %s: %lld bytes, above the limit of %d (1 MiB) for a config", path, size,
                        CLI_JSON_MAX_BYTES), NULL;
    if (!text) return cli_fail(err, errlen, "cannot read config %s: %s", path, strerror(errno)), NULL;
    const char *where_err = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &where_err, 1);
    if (!root) {
        size_t at = where_err ? (size_t)(where_err - text) : 0;
        cli_fail(err, errlen, "config %s: malformed JSON near byte %zu", path, at);
    }
    free(text);
    const char *where = "", *dup = root ? duplicate_key(root, &where) : NULL;
    if (dup) {
        cli_fail(err, errlen, "config %s: key \"%s\" given twice%s%s", path, dup, where[0] ? " in " : "", where);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static const char *json_type_name(const cJSON *item)
{
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    if (cJSON_IsNull(item)) return "null";
    return "an invalid value";
}

/* The options of --search itself (typed by hand; never handed on to a run). */
static int search_only(opt_id id)
{
    return id == OPT_SEARCH || id == OPT_LARGEST || id == OPT_MIN_SAMPLES || id == OPT_TOP || id == OPT_OUT ||
           id == OPT_VERIFY;
}

/* Options a config may set: every option but those that only make sense typed by hand. */
static const opt_spec *config_spec(const char *key)
{
    const opt_spec *sp = spec_by_name(key);
    if (!sp || sp->id == OPT_CONFIG || sp->id == OPT_HELP || sp->id == OPT_VERSION ||
        sp->id == OPT_RESUME || sp->id == OPT_CALIBRATE || sp->id == OPT_PREDICT || search_only(sp->id))
        return NULL;
    return sp;
}

/* Check one scalar JSON value against the type of option sp and turn it into the text that
 * apply() takes.  Types are strict (a layer count is a JSON integer, not "32"); the only
 * options that take a number or a string are the window (15 or "auto"), --clip-speculate
 * (4 or "auto") and the memory limits (bytes or "32G"). */
static int json_value(const cJSON *item, const opt_spec *sp, const char *label, char *value,
                      size_t vlen, int *flag, char *err, size_t errlen)
{
    const int text_or_number = sp->id == OPT_WINDOW || sp->id == OPT_CLIP_SPECULATE || sp->id == OPT_GPU_MEM ||
                               sp->id == OPT_CPU_MEM;
    *flag = 1;
    value[0] = '\0';
    const char *want = NULL;
    switch (sp->kind) {
    case ARG_NONE:
        if (cJSON_IsBool(item)) {
            *flag = cJSON_IsTrue(item);
            return 0;
        }
        want = "true or false";
        break;
    case ARG_INT:
        if (cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble) &&
            fabs(item->valuedouble) < 9.0e15) {
            snprintf(value, vlen, "%lld", (long long)item->valuedouble);
            return 0;
        }
        want = "an integer";
        break;
    case ARG_NUM:
        if (cJSON_IsNumber(item)) {
            snprintf(value, vlen, "%.17g", item->valuedouble);
            return 0;
        }
        want = "a number";
        break;
    case ARG_TEXT:
        if (cJSON_IsString(item)) {
            if (snprintf(value, vlen, "%s", item->valuestring) >= (int)vlen)
                return cli_fail(err, errlen, "%s: value too long", label);
            return 0;
        }
        if (text_or_number && cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble) &&
            item->valuedouble >= 0 && item->valuedouble < 9.0e15) {
            snprintf(value, vlen, "%lld", (long long)item->valuedouble);
            return 0;
        }
        want = text_or_number ? "a string or a non-negative integer" : "a string";
        break;
    }
    return cli_fail(err, errlen, "%s: wrong type (want %s, got %s)", label, want, json_type_name(item));
}

/* A plain config: an object of options, applied to rc. */
static int load_options(run_config *rc, const cJSON *root, const char *path, char *err,
                        size_t errlen)
{
    recompute_seen seen = {0};
    for (const cJSON *item = root->child; item; item = item->next) {
        char label[PATH_MAX + 128];
        snprintf(label, sizeof label, "config %s: %s", path, item->string);
        const opt_spec *sp = config_spec(item->string);
        if (!sp) return cli_fail(err, errlen, "%s: unknown key (see aebench --help)", label);
        /* A child run gets the plain config too; --find-max in it would make every child a
         * sweep again.  In a run list the sweep driver takes it out of the children's options. */
        if (sp->id == OPT_FIND_MAX)
            return cli_fail(err, errlen, "%s: only in a run list's defaults or runs", label);
        char value[PATH_MAX];
        int flag;
        if (json_value(item, sp, label, value, sizeof value, &flag, err, errlen)) return -1;
        if (apply(rc, sp, value, flag, label, err, errlen)) return -1;
        note_recompute(&seen, sp, value, flag);
    }
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s", path);
    return recompute_clash(&seen, where, err, errlen);
}

/* A config with "runs" (or "defaults") is a run list, run by the sweep driver. */
static int is_runlist(const cJSON *root)
{
    return cJSON_GetObjectItemCaseSensitive(root, "runs") ||
           cJSON_GetObjectItemCaseSensitive(root, "defaults");
}

static int load_config(run_config *rc, const char *path, char *err, size_t errlen)
{
    cJSON *root = read_json(path, err, errlen);
    if (!root) return -1;
    int rc_ = 0;
    if (!cJSON_IsObject(root))
        rc_ = cli_fail(err, errlen, "config %s: the top level must be a JSON object (of options, or a "
                                "run list with \"defaults\" and \"runs\")", path);
    else if (is_runlist(root))
        rc->config_runs = 1; /* checked in full by cli_load_runlist before anything runs */
    else
        rc_ = load_options(rc, root, path, err, errlen);
    cJSON_Delete(root);
    return rc_;
}

/* ---- run lists -------------------------------------------------------------------------- */

#define RUNLIST_MAX 10000 /* expansions beyond this are surely a mistake */

/* "layers-from": an engine name, "self" (the run's own engine) or "all" (every other
 * engine): each must be registered. */
static int check_layers_from(const cJSON *item, const char *label, char *err, size_t errlen)
{
    if (!cJSON_IsString(item))
        return cli_fail(err, errlen, "%s: wrong type (want an engine name, \"self\" or \"all\", got %s)",
                    label, json_type_name(item));
    if (strcmp(item->valuestring, "all") != 0 && strcmp(item->valuestring, "self") != 0 &&
        !engine_find(item->valuestring))
        return cli_fail(err, errlen, "%s: unknown method '%s'", label, item->valuestring);
    return 0;
}

/* Every key of one "defaults" or "runs[i]" object: known, of the right type, a valid value
 * (checked by applying it to a scratch config).  An array value is a list to sweep over. */
static int check_run_object(const cJSON *obj, const char *path, const char *prefix, char *err,
                            size_t errlen)
{
    if (!cJSON_IsObject(obj))
        return cli_fail(err, errlen, "config %s: %s: wrong type (want an object of options, got %s)",
                    path, prefix, json_type_name(obj));
    run_config scratch;
    set_defaults(&scratch);
    recompute_seen seen = {0};
    for (const cJSON *item = obj->child; item; item = item->next) {
        char label[PATH_MAX + 256];
        snprintf(label, sizeof label, "config %s: %s.%s", path, prefix, item->string);
        const int from = strcmp(item->string, "layers-from") == 0;
        const opt_spec *sp = from ? NULL : config_spec(item->string);
        if (!from && !sp)
            return cli_fail(err, errlen, "%s: unknown key (see aebench --help)", label);
        if (from && cJSON_GetObjectItemCaseSensitive(obj, "layers"))
            return cli_fail(err, errlen, "%s: give layers or layers-from, not both", label);
        const cJSON *first = item, *one = item;
        int count = 1;
        if (cJSON_IsArray(item)) {
            count = cJSON_GetArraySize(item);
            if (count == 0) return cli_fail(err, errlen, "%s: empty list", label);
            first = item->child;
        }
        one = first;
        for (int i = 0; i < count; i++, one = one->next) {
            char elabel[PATH_MAX + 300];
            if (cJSON_IsArray(item)) snprintf(elabel, sizeof elabel, "%s[%d]", label, i);
            else snprintf(elabel, sizeof elabel, "%s", label);
            if (from) {
                if (check_layers_from(one, elabel, err, errlen)) return -1;
                continue;
            }
            char value[PATH_MAX];
            int flag;
            if (json_value(one, sp, elabel, value, sizeof value, &flag, err, errlen)) return -1;
            if (apply(&scratch, sp, value, flag, elabel, err, errlen)) return -1;
            /* (a list's elements become runs of their own, whose command lines are checked whole) */
            if (!cJSON_IsArray(item)) note_recompute(&seen, sp, value, flag);
        }
    }
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where, "config %s: %s", path, prefix);
    return recompute_clash(&seen, where, err, errlen);
}

/* One fully expanded run (no arrays, method not "all") into a cli_run. */
static int emit_run(cli_runlist *out, const cJSON *obj, const char *where, char *err,
                    size_t errlen)
{
    if (out->n >= RUNLIST_MAX)
        return cli_fail(err, errlen, "%s: more than %d runs after expansion", where, RUNLIST_MAX);
    cli_run *grown = realloc(out->runs, sizeof *grown * (size_t)(out->n + 1));
    if (!grown) return cli_fail(err, errlen, "out of memory");
    out->runs = grown;
    cli_run *r = &out->runs[out->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->where, sizeof r->where, "%s", where);
    for (const cJSON *item = obj->child; item; item = item->next) {
        if (strcmp(item->string, "layers-from") == 0) {
            snprintf(r->layers_from, sizeof r->layers_from, "%s", item->valuestring);
            continue;
        }
        const opt_spec *sp = config_spec(item->string);
        char value[PATH_MAX], opt[80];
        int flag;
        if (!sp || json_value(item, sp, where, value, sizeof value, &flag, err, errlen)) return -1;
        if (sp->id == OPT_FIND_MAX) {
            r->find_max = flag;
            continue;
        }
        /* Method names were checked against the registry, so they fit. */
        if (sp->id == OPT_METHOD) snprintf(r->method, sizeof r->method, "%.63s", value);
        /* Defaults and run are merged already, so a false flag is simply left out. */
        if (sp->kind == ARG_NONE && !flag) continue;
        snprintf(opt, sizeof opt, "--%s", sp->name);
        if (strv_push(&r->args, &r->nargs, opt)) return cli_fail(err, errlen, "out of memory");
        if (sp->kind != ARG_NONE && strv_push(&r->args, &r->nargs, value))
            return cli_fail(err, errlen, "out of memory");
    }
    return 0;
}

/* Expand a merged run: first "method" (a list, or "all": every registered engine), then any
 * other list (cartesian product, in key order), then "layers-from": "all" (every engine
 * other than the run's own).  obj is consumed. */
static int expand_run(cli_runlist *out, cJSON *obj, const char *path, const char *where,
                      char *err, size_t errlen)
{
    cJSON *method = cJSON_GetObjectItemCaseSensitive(obj, "method");
    cJSON *list = NULL;
    if (method && cJSON_IsString(method) && strcmp(method->valuestring, "all") == 0) {
        list = cJSON_CreateArray();
        for (int i = 0; list && i < engine_count(); i++)
            if (engine_in_all(engine_at(i))) cJSON_AddItemToArray(list, cJSON_CreateString(engine_at(i)->name));
        cJSON_ReplaceItemInObjectCaseSensitive(obj, "method", list);
    } else if (method && cJSON_IsArray(method)) {
        list = method;
    }
    if (!list) {
        for (cJSON *item = obj->child; item; item = item->next)
            if (cJSON_IsArray(item)) {
                list = item;
                break;
            }
    }
    cJSON *from = cJSON_GetObjectItemCaseSensitive(obj, "layers-from");
    if (!list && from && strcmp(from->valuestring, "all") == 0) {
        const engine_vtbl *own = engine_find(cJSON_GetObjectItemCaseSensitive(obj, "method")->valuestring);
        list = cJSON_CreateArray();
        for (int i = 0; list && i < engine_count(); i++)
            if (engine_at(i) != own && engine_in_all(engine_at(i)))
                cJSON_AddItemToArray(list, cJSON_CreateString(engine_at(i)->name));
        if (list && cJSON_GetArraySize(list) == 0) {
            cJSON_Delete(list);
            cJSON_Delete(obj);
            return cli_fail(err, errlen, "config %s: %s.layers-from: 'all' names no engine other than the "
                                     "run's own", path, where);
        }
        cJSON_ReplaceItemInObjectCaseSensitive(obj, "layers-from", list);
    }
    if (!list && from && strcmp(from->valuestring, "self") == 0)
        cJSON_ReplaceItemInObjectCaseSensitive(
            obj, "layers-from", cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(obj, "method")->valuestring));
    if (!list) {
        int rc_ = emit_run(out, obj, where, err, errlen);
        cJSON_Delete(obj);
        return rc_;
    }
    const char *key = list->string;
    for (const cJSON *el = list->child; el; el = el->next) {
        cJSON *copy = cJSON_Duplicate(obj, 1);
        cJSON *val = copy ? cJSON_Duplicate(el, 1) : NULL;
        if (!val) {
            cJSON_Delete(copy);
            cJSON_Delete(obj);
            return cli_fail(err, errlen, "out of memory");
        }
        cJSON_ReplaceItemInObjectCaseSensitive(copy, key, val);
        if (expand_run(out, copy, path, where, err, errlen)) {
            cJSON_Delete(obj);
            return -1;
        }
    }
    cJSON_Delete(obj);
    return 0;
}

void cli_runlist_free(cli_runlist *l)
{
    for (int i = 0; i < l->n; i++) strv_free(&l->runs[i].args, &l->runs[i].nargs);
    free(l->runs);
    memset(l, 0, sizeof *l);
}

int cli_load_runlist(const char *path, cli_runlist *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *root = read_json(path, err, errlen);
    if (!root) return -1;
    int rc_ = -1;
    const cJSON *defaults = NULL, *runs = NULL;
    if (!cJSON_IsObject(root)) {
        cli_fail(err, errlen, "config %s: the top level must be a JSON object", path);
        goto out;
    }
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "description") == 0) {
            if (!cJSON_IsString(item)) {
                cli_fail(err, errlen, "config %s: description: wrong type (want a string, got %s)", path,
                     json_type_name(item));
                goto out;
            }
            snprintf(out->description, sizeof out->description, "%s", item->valuestring);
        } else if (strcmp(item->string, "defaults") == 0) {
            defaults = item;
        } else if (strcmp(item->string, "runs") == 0) {
            runs = item;
        } else {
            cli_fail(err, errlen, "config %s: %s: unknown key (a run list has description, defaults "
                              "and runs)", path, item->string);
            goto out;
        }
    }
    if (!runs) {
        cli_fail(err, errlen, "config %s: runs: missing key (a run list needs an array of runs)", path);
        goto out;
    }
    if (!cJSON_IsArray(runs) || cJSON_GetArraySize(runs) == 0) {
        cli_fail(err, errlen, "config %s: runs: wrong type (want a non-empty array of objects, got %s)",
             path, cJSON_IsArray(runs) ? "an empty array" : json_type_name(runs));
        goto out;
    }
    if (defaults && check_run_object(defaults, path, "defaults", err, errlen)) goto out;
    int i = 0;
    for (const cJSON *run = runs->child; run; run = run->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "runs[%d]", i);
        if (check_run_object(run, path, where, err, errlen)) goto out;
    }
    /* Merge each run over the defaults (the run's keys win; layers and layers-from replace
     * each other), then expand its lists. */
    i = 0;
    for (const cJSON *run = runs->child; run; run = run->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "runs[%d]", i);
        cJSON *merged = defaults ? cJSON_Duplicate(defaults, 1) : cJSON_CreateObject();
        if (!merged) {
            cli_fail(err, errlen, "out of memory");
            goto out;
        }
        for (const cJSON *item = run->child; item; item = item->next) {
            if (strcmp(item->string, "layers") == 0) cJSON_DeleteItemFromObjectCaseSensitive(merged, "layers-from");
            if (strcmp(item->string, "layers-from") == 0) cJSON_DeleteItemFromObjectCaseSensitive(merged, "layers");
            cJSON_DeleteItemFromObjectCaseSensitive(merged, item->string);
            cJSON_AddItemToObject(merged, item->string, cJSON_Duplicate(item, 1));
        }
        if (!cJSON_GetObjectItemCaseSensitive(merged, "method")) {
            cJSON_Delete(merged);
            cli_fail(err, errlen, "config %s: %s.method: missing key (give it in the run or in defaults)",
                 path, where);
            goto out;
        }
        if (expand_run(out, merged, path, where, err, errlen)) goto out;
    }
    rc_ = 0;
out:
    cJSON_Delete(root);
    if (rc_) cli_runlist_free(out);
    return rc_;
}

/* getopt_long's tables from the option specs: long option i returns 1000 + i; a short
 * option returns its letter and always takes a value.  The leading ':' of shortopts makes a
 * missing argument come back as ':'.  shortopts must hold 2 * NSPECS + 2 chars. */
static void getopt_tables(struct option longopts[NSPECS + 1], char *shortopts)
{
    size_t sl = 0;
    shortopts[sl++] = ':';
    for (int i = 0; i < NSPECS; i++) {
        longopts[i] = (struct option){specs[i].name,
                                      specs[i].kind == ARG_NONE ? no_argument : required_argument,
                                      NULL, 1000 + i};
        if (specs[i].short_name) {
            shortopts[sl++] = specs[i].short_name;
            shortopts[sl++] = ':';
        }
    }
    longopts[NSPECS] = (struct option){0, 0, 0, 0};
    shortopts[sl] = '\0';
}

/* argv[1..]'s options into *out, but those `drop` says (by spec, with ctx). */
static int args_kept(int argc, char **argv, int (*drop)(const opt_spec *sp, const void *ctx), const void *ctx,
                     char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    struct option longopts[NSPECS + 1];
    char shortopts[2 * NSPECS + 2];
    getopt_tables(longopts, shortopts);
    opterr = 0;
    optind = 1;
    int c, start = 1;
    /* cli_parse accepted argv, so every token belongs to an option (no permutation), and
     * every short option takes a value: tokens [start, optind) are one option. */
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const opt_spec *sp = NULL;
        if (c >= 1000 && c < 1000 + NSPECS) sp = &specs[c - 1000];
        else
            for (int i = 0; i < NSPECS; i++)
                if (specs[i].short_name && specs[i].short_name == c) sp = &specs[i];
        const int dropped = !sp || drop(sp, ctx);
        for (int t = start; !dropped && t < optind; t++)
            if (strv_push(out, nout, argv[t])) {
                optind = 1;
                return -1;
            }
        start = optind;
    }
    optind = 1;
    return 0;
}

typedef struct child_drop {
    int config, method;
} child_drop;
static int drop_for_child(const opt_spec *sp, const void *ctx)
{
    const child_drop *d = ctx;
    return (d->config && sp->id == OPT_CONFIG) || sp->id == OPT_RESUME || sp->id == OPT_FIND_MAX ||
           search_only(sp->id) || (d->method && sp->id == OPT_METHOD);
}

int cli_child_args(int argc, char **argv, int drop_config, int drop_method, char ***out, int *nout)
{
    const child_drop d = {drop_config, drop_method};
    return args_kept(argc, argv, drop_for_child, &d, out, nout);
}

static int drop_named(const opt_spec *sp, const void *ctx)
{
    for (const char *const *n = ctx; *n; n++)
        if (strcmp(sp->name, *n) == 0) return 1;
    return 0;
}

int cli_args_without(char *const *args, int nargs, const char *const *names, char ***out, int *nout)
{
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    if (!argv) return -1;
    argv[0] = "aebench";
    for (int i = 0; i < nargs; i++) argv[i + 1] = args[i];
    const int rc = args_kept(nargs + 1, argv, drop_named, names, out, nout);
    free(argv);
    return rc;
}

int cli_shape_addressable(const gpt_shape *sh, double *params, double *rows)
{
    /* (what index arithmetic, int rows and size_t bytes, can address) */
    const double R = (double)sh->batch * sh->seq;
    const double P = (double)sh->vocab_padded * sh->hidden + (double)sh->seq * sh->hidden +
                     (double)sh->layers * (12.0 * sh->hidden * sh->hidden + 13.0 * sh->hidden);
    if (params) *params = P;
    if (rows) *rows = R;
    return !(R * 4.0 * sh->hidden > 2147483647.0 || R * sh->vocab_padded > 1.0e15 || P * 16.0 > 1.0e18);
}

int cli_resolve_hosts(run_config *rc, char *err, size_t errlen)
{
    if (!rc->hosts_path[0]) return 0;
    if (rc->ranks < 2)
        return cli_fail(err, errlen, "--hosts %s goes with --ranks N (N > 1): the ranks it starts on those machines",
                        rc->hosts_path);
    host_list *h = malloc(sizeof *h);
    if (!h) return cli_fail(err, errlen, "out of memory");
    int rc_ = host_list_read(rc->hosts_path, h, err, errlen);
    if (!rc_ && !host_is_this_machine(h->name[0]))
        rc_ = cli_fail(err, errlen, "--hosts %s: its first machine, %s, is where mpiexec starts rank 0, whose results "
                       "and reports this process reads here: list this machine first", rc->hosts_path, h->name[0]);
    if (!rc_) rc->ranks_per_machine = host_list_ranks_per_machine(h, rc->ranks, NULL);
    free(h);
    return rc_;
}

int cli_ranks_per_machine(const run_config *rc)
{
    if (rc->ranks_per_machine > 0) return rc->ranks_per_machine;
    return rc->ranks > 1 ? rc->ranks : 1;
}

static int validate(run_config *rc, char *err, size_t errlen)
{
    gpt_shape *sh = &rc->eng.shape;
    if (sh->hidden % sh->heads != 0)
        return cli_fail(err, errlen, "hidden size %d is not divisible by the number of heads %d",
                    sh->hidden, sh->heads);
    if (rc->log_interval > rc->iters) rc->log_interval = rc->iters;
    if (rc->eng.window > sh->layers)
        return cli_fail(err, errlen, "window %d is larger than the number of layers %d",
                    rc->eng.window, sh->layers);
    if (rc->eng.optim.min_lr > rc->eng.optim.lr)
        return cli_fail(err, errlen, "min-lr %g is above lr %g", rc->eng.optim.min_lr,
                    rc->eng.optim.lr);
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    double P, rows;
    if (!cli_shape_addressable(sh, &P, &rows))
        return cli_fail(err, errlen, "model or batch too large to address (%.3g parameters, %.3g rows)",
                    P, rows);
    if (rc->eng.nvme_dir[0] && rc->eng.offload != OFFLOAD_NVME && !rc->search)
        return cli_fail(err, errlen, "--nvme-dir is only used with --offload nvme (or --search, which tries it)");
    for (int i = 0; !rc->search && i < NSPECS; i++)
        if (search_only(specs[i].id) && specs[i].id != OPT_SEARCH && cli_given(rc, specs[i].name))
            return cli_fail(err, errlen, "--%s goes with --search", specs[i].name);
    if (rc->min_samples_per_s > 0 && !rc->search_largest)
        return cli_fail(err, errlen, "--min-samples-per-s goes with --search --largest (the largest model that "
                        "trains that fast)");
    /* (with --dry-run it is only carried: a sweep's and --find-max's checks of a run are dry
     * runs of its own arguments) */
    if (rc->profile && (rc->predict || rc->calibrate || rc->search))
        return cli_fail(err, errlen, "--profile times the steps a run trains: not with --%s",
                        rc->predict ? "predict" : rc->calibrate ? "calibrate" : "search");
    if (rc->profile && rc->eng.graphs == GRAPHS_ON)
        return cli_fail(err, errlen, "--graphs on: --profile times each op with events of its own, which a graph's "
                        "replay would not record (--graphs auto turns them off under --profile)");
    /* Options that would be taken and then do nothing (issue 47): refused, not a label or a no-op.
     * (-m all -w W: but for a dry run, which names no file and plans each engine as it would
     * run, and --search, which leaves the engines without a window out, saying so; --search's
     * own probe is such a dry run) */
    if (strcmp(rc->method, "all") == 0 && cli_given(rc, "window") && rc->eng.window > 0 && !rc->dry_run &&
        !rc->search)
        return cli_fail(err, errlen, "-w/--window %d with -m all: only stronghold has a window of layers, and the other "
                        "engines' files would be named ws-%d (run -m stronghold -w %d, or -m all without -w)",
                        rc->eng.window, rc->eng.window, rc->eng.window);
    static const char *const fail_opts[] = {"fail-rank", "fail-phase", "fail-kind"};
    for (size_t i = 0; i < sizeof fail_opts / sizeof fail_opts[0]; i++)
        if (cli_given(rc, fail_opts[i]) && rc->fail_at <= 0)
            return cli_fail(err, errlen, "--%s goes with --fail-at I (the iteration at which the fault happens)",
                            fail_opts[i]);
    if (cli_given(rc, "ckpt-every") && !rc->eng.ckpt_dir[0])
        return cli_fail(err, errlen, "--ckpt-every %d goes with --ckpt-dir DIR (where the persistent checkpoints go)",
                        rc->eng.ckpt_every);
    /* (not in a child run of a sweep or --find-max, which report to it: --find-max's probes train
     * 2 iterations of the run's options, whose --iters the find-max itself was checked with) */
    const int reporting_child = getenv("AEBENCH_REPORT_FD") != NULL;
    if (cli_given(rc, "gemini-ckpt-from") && rc->eng.gemini_ckpt_from > rc->iters && !reporting_child)
        return cli_fail(err, errlen, "--gemini-ckpt-from %d: the run has only %d iterations (--iters)",
                        rc->eng.gemini_ckpt_from, rc->iters);
    if (cli_given(rc, "gemini-every") && rc->eng.gemini_every > rc->iters && !reporting_child)
        return cli_fail(err, errlen, "--gemini-every %d: the run has only %d iterations (--iters)",
                        rc->eng.gemini_every, rc->iters);
    if (rc->machine_path[0] && !rc->calibrate) {
        /* (read by --predict, --search, and a training run's -w auto; --calibrate makes it) */
        struct stat st;
        const int fd = open(rc->machine_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        const int e = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EISDIR;
        if (fd >= 0) close(fd);
        if (e == EISDIR)
            return cli_fail(err, errlen, "machine file %s: not a regular file (the JSON file --calibrate writes was "
                            "expected)", rc->machine_path);
        if (e) return cli_fail(err, errlen, "machine file %s: %s (make one with --calibrate)", rc->machine_path, strerror(e));
    }
    if (rc->search && (rc->predict || rc->calibrate || rc->find_max || rc->dry_run || rc->resume))
        return cli_fail(err, errlen, "--search plans and predicts by itself: not with --%s",
                        rc->predict ? "predict" : rc->calibrate ? "calibrate" : rc->find_max ? "find-max"
                        : rc->dry_run ? "dry-run" : "resume");
    return 0;
}

struct cJSON *cli_args_config(char *const *args, int nargs, char *err, size_t errlen)
{
    cJSON *out = cJSON_CreateObject();
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    if (!out || !argv) {
        cJSON_Delete(out);
        free(argv);
        return cli_fail(err, errlen, "out of memory"), NULL;
    }
    argv[0] = "aebench";
    for (int i = 0; i < nargs; i++) argv[i + 1] = args[i];
    struct option longopts[NSPECS + 1];
    char shortopts[2 * NSPECS + 2];
    getopt_tables(longopts, shortopts);
    opterr = 0;
    optind = 1;
    int c, failed = 0;
    /* Two passes, as cli_parse: a config first, then the command line over it. */
    for (int pass = 0; pass < 2 && !failed; pass++) {
        optind = 1;
        while (!failed && (c = getopt_long(nargs + 1, argv, shortopts, longopts, NULL)) != -1) {
            const opt_spec *sp = NULL;
            if (c >= 1000 && c < 1000 + NSPECS) sp = &specs[c - 1000];
            else
                for (int i = 0; i < NSPECS; i++)
                    if (specs[i].short_name && specs[i].short_name == c) sp = &specs[i];
            if (!sp) {
                failed = cli_fail(err, errlen, "option '%s' is not one a config can hold", argv[optind - 1]);
                break;
            }
            if ((pass == 0) != (sp->id == OPT_CONFIG)) continue;
            if (sp->id == OPT_CONFIG) {
                cJSON *cfg = read_json(optarg, err, errlen);
                if (!cfg) {
                    failed = -1;
                    break;
                }
                if (!cJSON_IsObject(cfg) || cJSON_GetObjectItemCaseSensitive(cfg, "runs")) {
                    cJSON_Delete(cfg);
                    failed = cli_fail(err, errlen, "config %s: a run list is not one run's config", optarg);
                    break;
                }
                for (cJSON *item = cfg->child; item; item = item->next)
                    if (item->string && config_spec(item->string))
                        cJSON_AddItemToObject(out, item->string, cJSON_Duplicate(item, 1));
                cJSON_Delete(cfg);
                continue;
            }
            if (!config_spec(sp->name)) {
                failed = cli_fail(err, errlen, "--%s is typed by hand, not kept in a config", sp->name);
                break;
            }
            cJSON *v = NULL;
            if (sp->kind == ARG_NONE) v = cJSON_CreateTrue();
            else if (sp->kind == ARG_INT || sp->kind == ARG_NUM) v = cJSON_CreateNumber(strtod(optarg, NULL));
            else v = cJSON_CreateString(optarg);
            cJSON_DeleteItemFromObjectCaseSensitive(out, sp->name);
            if (!v || !cJSON_AddItemToObject(out, sp->name, v)) failed = cli_fail(err, errlen, "out of memory");
        }
    }
    free(argv);
    optind = 1;
    if (failed) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

cli_outcome cli_parse(int argc, char **argv, run_config *rc, char *err, size_t errlen)
{
    set_defaults(rc);
    struct option longopts[NSPECS + 1];
    char shortopts[2 * NSPECS + 2];
    getopt_tables(longopts, shortopts);

    /* Pass 1: --help, --version, --config (the config applies before other flags). */
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (c == '?') {
            if (optopt) return cli_fail(err, errlen, "unknown option '-%c'", optopt), CLI_ERROR;
            return cli_fail(err, errlen, "unknown option '%s'", argv[optind - 1]), CLI_ERROR;
        }
        if (c == ':') return cli_fail(err, errlen, "option '%s' needs a value", argv[optind - 1]), CLI_ERROR;
        if (c == 1000 + OPT_HELP) {
            cli_usage(stdout);
            return CLI_DONE;
        }
        if (c == 1000 + OPT_VERSION) {
            /* and what this build can do (tests ask whether it runs ranks) */
            printf("aebench %s (backends: cpu%s; ranks: %s)\n", AEBENCH_VERSION,
#ifdef AEBENCH_HAVE_CUDA
                   ", cuda",
#else
                   "",
#endif
#ifdef AEBENCH_HAVE_MPI
                   "mpi"
#else
                   "none, built without MPI"
#endif
            );
            return CLI_DONE;
        }
        if (c == 1000 + OPT_CONFIG)
            snprintf(rc->config_path, sizeof rc->config_path, "%s", optarg);
    }
    if (optind < argc) return cli_fail(err, errlen, "unexpected argument '%s'", argv[optind]), CLI_ERROR;
    if (rc->config_path[0] && load_config(rc, rc->config_path, err, errlen)) return CLI_ERROR;

    /* Pass 2: every other option, overriding the config. */
    recompute_seen seen = {0};
    optind = 1;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const opt_spec *sp = NULL;
        if (c >= 1000) {
            sp = &specs[c - 1000];
        } else {
            for (int i = 0; i < NSPECS; i++)
                if (specs[i].short_name == c) sp = &specs[i];
        }
        if (!sp || sp->id == OPT_CONFIG) continue;
        if (apply(rc, sp, optarg, 1, NULL, err, errlen)) return CLI_ERROR;
        note_recompute(&seen, sp, optarg, 1);
    }
    if (recompute_clash(&seen, "", err, errlen)) return CLI_ERROR;
    /* A run list's runs are checked one by one by the sweep driver (with their own shapes). */
    if (rc->config_runs) {
        rc->eng.shape.vocab_padded = gpt_pad_vocab(rc->eng.shape.vocab);
        return CLI_RUN;
    }
    return validate(rc, err, errlen) ? CLI_ERROR : CLI_RUN;
}

int cli_given(const run_config *rc, const char *long_name)
{
    const opt_spec *sp = spec_by_name(long_name);
    return sp && (rc->given[sp->id / 64] >> (sp->id % 64) & 1ULL);
}

const char *cli_cpu_preset_text(void)
{
    return "-l 4 -h 128 --heads 4 --seq 128 -b 4 --vocab 4096, lr 1e-3 warming up over 10 iterations";
}

int cli_apply_cpu_preset(run_config *rc)
{
    static const char *const shape_opts[] = {"layers", "hidden", "heads", "seq", "batch", "vocab"};
    for (size_t i = 0; i < sizeof shape_opts / sizeof shape_opts[0]; i++)
        if (cli_given(rc, shape_opts[i])) return 0;
    gpt_shape *sh = &rc->eng.shape;
    *sh = (gpt_shape){.layers = 4, .hidden = 128, .heads = 4, .seq = 128, .batch = 4, .vocab = 4096};
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    /* The artifact's schedule warms up over 3200 iterations, so a 50-iteration run would
     * barely move; the preset trains quickly enough for the loss to fall visibly. */
    gpt_optim *o = &rc->eng.optim;
    if (!cli_given(rc, "lr")) o->lr = 1e-3;
    if (!cli_given(rc, "min-lr")) o->min_lr = 1e-4;
    if (!cli_given(rc, "lr-decay-iters")) o->decay_iters = 1000;
    if (rc->eng.window > sh->layers) rc->eng.window = sh->layers;
    rc->cpu_preset = 1;
    return 1;
}

void cli_usage(FILE *out)
{
    fprintf(out,
            "usage: aebench [-m METHOD] [-l L] [-h H] [-b B] [-w W|auto] [options]\n"
            "\n"
            "Trains a Megatron GPT with one GPU-memory offloading strategy and writes\n"
            "results/log_METHOD_l-L_h-H_bs-B_ws-W_DATE.EPOCH.txt (the artifact's line formats)\n"
            "and a .json summary beside it.\n\n"
            "methods:\n");
    /* those -m all runs, then all, then the others */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < engine_count(); i++) {
            const engine_vtbl *e = engine_at(i);
            if (engine_in_all(e) != (pass == 0)) continue;
            fprintf(out, "  %-14s %s%s%s%s\n", e->name, e->description, e->alias ? " (alias " : "",
                    e->alias ? e->alias : "", e->alias ? ")" : "");
        }
        if (pass == 0) fprintf(out, "  %-14s %s\n", "all", "every method above, each run in its own child process");
    }
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < NSPECS; i++) {
        char lhs[64];
        if (specs[i].short_name)
            snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", specs[i].short_name, specs[i].name,
                     specs[i].arg ? " " : "", specs[i].arg ? specs[i].arg : "");
        else
            snprintf(lhs, sizeof lhs, "    --%s%s%s", specs[i].name, specs[i].arg ? " " : "",
                     specs[i].arg ? specs[i].arg : "");
        fprintf(out, "  %-34s %s\n", lhs, specs[i].help);
    }
    fprintf(out,
            "\nWithout a GPU, and with no model shape given, the CPU backend uses a small preset:\n"
            "  %s\n"
            "A config file is a JSON object whose keys are the long option names; flags on the\n"
            "command line override it.  A config with \"runs\" is a run list (configs/caseN.json):\n"
            "  {\"description\": \"...\", \"defaults\": {OPTIONS}, \"runs\": [{OPTIONS}, ...]}\n"
            "each run's keys over the defaults, then the command line over both; a list value\n"
            "([2, 4, 6]) runs once per element, \"method\": \"all\" once per engine,\n"
            "\"find-max\": true runs --find-max, \"layers-from\": ENGINE|self|all takes the layers\n"
            "from an earlier --find-max result.  Sweeps (-m all, run lists, --find-max) run every\n"
            "run as a child process and end with a summary; --resume skips runs already ok.\n"
            "Exit codes: 0 ok; 1 error (a sweep: some run failed or crashed); 2 bad input, nothing\n"
            "written; 3 out of memory (a sweep: some run did not fit, none failed); 4 a rank was\n"
            "lost or hung (its peers' watchdogs or the supervisor ended the job; mpiexec's own codes\n"
            "are mapped to it); 128+n: stopped by signal n (SIGINT 130, SIGTERM 143).\n",
            cli_cpu_preset_text());
}

int cli_resolve_ranks(run_config *rc, int world, int local_world, char *err, size_t errlen)
{
    engine_config *e = &rc->eng;
    e->world = world;
    e->local_world = local_world;
    const int per_step = e->shape.batch * world;
    const int G = e->global_batch ? e->global_batch : per_step;
    if (G % per_step != 0)
        return cli_fail(err, errlen, "--global-batch %d is not a multiple of batch x ranks = %d x %d",
                        G, e->shape.batch, world);
    e->micro_batches = G / per_step;
    return 0;
}

/* FNV-1a over bytes. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t cli_fingerprint(const run_config *rc)
{
    enum { MAX_OPTS = 64 };
    static const char *const ignored[] = {"results", "log-interval", "dry-run", "save-params", "threads",
                                          "gemini-job", "gemini-recover", "gemini-store", "hang-timeout"};
    uint64_t hashes[MAX_OPTS], h = 0xcbf29ce484222325ULL;
    const char *names[MAX_OPTS];
    const int n = cli_option_hashes(rc, hashes, names, MAX_OPTS);
    for (int i = 0; i < n; i++) {
        int skip = 0;
        for (size_t k = 0; k < sizeof ignored / sizeof ignored[0]; k++) skip |= strcmp(names[i], ignored[k]) == 0;
        /* (--graphs at its default leaves the fingerprints of results made before it as they were) */
        skip |= strcmp(names[i], "graphs") == 0 && rc->eng.graphs == GRAPHS_AUTO;
        if (skip) continue;
        h = fnv1a(h, names[i], strlen(names[i]));
        h = fnv1a(h, &hashes[i], sizeof hashes[i]);
    }
    return h;
}

int cli_option_hashes(const run_config *rc, uint64_t *hashes, const char **names, int max)
{
    const engine_config *e = &rc->eng;
    /* Every parsed value that a rank acts on, under the name of the option that sets it
     * (strings by their text, numbers by their bytes). */
    const struct { const char *name; const void *p; size_t n; } fields[] = {
        {"method", rc->method, strlen(rc->method)},
        {"layers", &e->shape.layers, sizeof e->shape.layers},
        {"hidden", &e->shape.hidden, sizeof e->shape.hidden},
        {"heads", &e->shape.heads, sizeof e->shape.heads},
        {"seq", &e->shape.seq, sizeof e->shape.seq},
        {"batch", &e->shape.batch, sizeof e->shape.batch},
        {"vocab", &e->shape.vocab, sizeof e->shape.vocab},
        {"window", &e->window, sizeof e->window},
        {"recompute", &e->recompute, sizeof e->recompute},
        {"graphs", &e->graphs, sizeof e->graphs},
        {"lr", &e->optim.lr, sizeof e->optim.lr},
        {"min-lr", &e->optim.min_lr, sizeof e->optim.min_lr},
        {"lr-decay-iters", &e->optim.decay_iters, sizeof e->optim.decay_iters},
        {"lr-warmup-fraction", &e->optim.warmup_fraction, sizeof e->optim.warmup_fraction},
        {"weight-decay", &e->optim.weight_decay, sizeof e->optim.weight_decay},
        {"clip-grad", &e->optim.clip, sizeof e->optim.clip},
        {"seed", &e->seed, sizeof e->seed},
        {"device", &e->device, sizeof e->device},
        {"dtype", &e->bf16, sizeof e->bf16},
        {"math", &e->tf32, sizeof e->tf32},
        {"threads", &e->threads, sizeof e->threads},
        {"dpu", &e->dpu, sizeof e->dpu},
        {"offload", &e->offload, sizeof e->offload},
        {"nvme-dir", e->nvme_dir, strlen(e->nvme_dir)},
        {"global-batch", &e->global_batch, sizeof e->global_batch},
        {"zero-stage", &e->zero_stage, sizeof e->zero_stage},
        {"iters", &rc->iters, sizeof rc->iters},
        {"log-interval", &rc->log_interval, sizeof rc->log_interval},
        {"results", rc->results_dir, strlen(rc->results_dir)},
        {"data", rc->data_path, strlen(rc->data_path)},
        {"gpu-mem-limit", &rc->gpu_mem_limit, sizeof rc->gpu_mem_limit},
        {"cpu-mem-limit", &rc->cpu_mem_limit, sizeof rc->cpu_mem_limit},
        {"dry-run", &rc->dry_run, sizeof rc->dry_run},
        {"save-params", rc->save_params, strlen(rc->save_params)},
        {"fail-at", &rc->fail_at, sizeof rc->fail_at},
        {"fail-rank", &rc->fail_ranks, sizeof rc->fail_ranks},
        {"fail-kind", &rc->fail_kind, sizeof rc->fail_kind},
        {"fail-phase", &rc->fail_phase, sizeof rc->fail_phase},
        {"hang-timeout", &rc->hang_timeout_s, sizeof rc->hang_timeout_s},
        {"gemini-mode", &e->gemini_mode, sizeof e->gemini_mode},
        {"gemini-replicas", &e->gemini_replicas, sizeof e->gemini_replicas},
        {"gemini-placement", &e->gemini_placement, sizeof e->gemini_placement},
        {"gemini-transport", &e->gemini_transport, sizeof e->gemini_transport},
        {"gemini-store", e->gemini_store, strlen(e->gemini_store)},
        {"gemini-job", e->gemini_job, strlen(e->gemini_job)},
        {"gemini-recover", &e->gemini_recover, sizeof e->gemini_recover},
        {"ckpt-dir", e->ckpt_dir, strlen(e->ckpt_dir)},
        {"ckpt-every", &e->ckpt_every, sizeof e->ckpt_every},
        {"gemini-ckpt-from", &e->gemini_ckpt_from, sizeof e->gemini_ckpt_from},
        {"gemini-every", &e->gemini_every, sizeof e->gemini_every},
        {"clip-speculate", &e->clip_speculate, sizeof e->clip_speculate},
        {"placement", &e->placement, sizeof e->placement},
    };
    int n = (int)(sizeof fields / sizeof fields[0]);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) {
        hashes[i] = fnv1a(0xcbf29ce484222325ULL, fields[i].p, fields[i].n);
        names[i] = fields[i].name;
    }
    return n;
}
