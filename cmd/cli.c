#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

typedef enum opt_id {
    OPT_METHOD, OPT_LAYERS, OPT_HIDDEN, OPT_BATCH, OPT_WINDOW, OPT_HEADS, OPT_SEQ, OPT_VOCAB,
    OPT_ITERS, OPT_LOG_INTERVAL, OPT_SEED, OPT_RESULTS, OPT_DEVICE, OPT_CONFIG, OPT_DTYPE,
    OPT_GPU_MEM, OPT_CPU_MEM, OPT_DRY_RUN, OPT_DATA, OPT_NO_CKPT, OPT_LR, OPT_MIN_LR,
    OPT_DECAY_ITERS, OPT_WARMUP, OPT_WEIGHT_DECAY, OPT_CLIP, OPT_THREADS, OPT_MATH, OPT_HELP,
    OPT_VERSION,
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
    {OPT_WINDOW, "window", 'w', ARG_TEXT, "W|auto", "GPU window of windowed engines (default auto)"},
    {OPT_HEADS, "heads", 0, ARG_INT, "N", "attention heads (default 16)"},
    {OPT_SEQ, "seq", 0, ARG_INT, "T", "sequence length (default 1024)"},
    {OPT_VOCAB, "vocab", 0, ARG_INT, "V", "vocabulary size, padded to a multiple of 128 (default 50257)"},
    {OPT_ITERS, "iters", 0, ARG_INT, "N", "training iterations (default 50)"},
    {OPT_LOG_INTERVAL, "log-interval", 0, ARG_INT, "N", "iterations per log line (default 10)"},
    {OPT_SEED, "seed", 0, ARG_INT, "S", "seed of initialisation and synthetic data (default 1234)"},
    {OPT_RESULTS, "results", 0, ARG_TEXT, "DIR", "where logs and JSON go (default results)"},
    {OPT_DEVICE, "device", 0, ARG_TEXT, "cpu|cuda", "compute backend (default cuda if usable)"},
    {OPT_CONFIG, "config", 0, ARG_TEXT, "FILE.json", "read options from a JSON object"},
    {OPT_DTYPE, "dtype", 0, ARG_TEXT, "fp32|bf16", "storage type on the GPU (default fp32)"},
    {OPT_MATH, "math", 0, ARG_TEXT, "tf32|fp32", "GPU matmuls on TF32 tensor cores, or strict fp32 (default tf32)"},
    {OPT_GPU_MEM, "gpu-mem-limit", 0, ARG_TEXT, "SIZE", "GPU memory budget, e.g. 32G (default: free memory)"},
    {OPT_CPU_MEM, "cpu-mem-limit", 0, ARG_TEXT, "SIZE", "host memory budget, e.g. 90G (default: available memory)"},
    {OPT_DRY_RUN, "dry-run", 0, ARG_NONE, NULL, "print the memory plan and parameter count, allocate nothing"},
    {OPT_DATA, "data", 0, ARG_TEXT, "FILE", "train on little-endian uint16 tokens (default: synthetic corpus)"},
    {OPT_NO_CKPT, "no-ckpt", 0, ARG_NONE, NULL, "keep every layer's activations (no checkpointing)"},
    {OPT_LR, "lr", 0, ARG_NUM, "X", "peak learning rate (default 1.5e-4)"},
    {OPT_MIN_LR, "min-lr", 0, ARG_NUM, "X", "final learning rate of the cosine decay (default 1e-5)"},
    {OPT_DECAY_ITERS, "lr-decay-iters", 0, ARG_INT, "N", "cosine decay length (default 320000)"},
    {OPT_WARMUP, "lr-warmup-fraction", 0, ARG_NUM, "F", "warm-up fraction of the decay (default 0.01)"},
    {OPT_WEIGHT_DECAY, "weight-decay", 0, ARG_NUM, "X", "AdamW weight decay (default 0.01)"},
    {OPT_CLIP, "clip-grad", 0, ARG_NUM, "X", "global-norm clipping, 0 disables (default 1.0)"},
    {OPT_THREADS, "threads", 0, ARG_INT, "N", "CPU threads, 0 = all cores (default 0)"},
    {OPT_HELP, "help", 0, ARG_NONE, NULL, "this text"},
    {OPT_VERSION, "version", 0, ARG_NONE, NULL, "print the version"},
};

enum { NSPECS = (int)(sizeof specs / sizeof specs[0]) };

static const opt_spec *spec_by_name(const char *name)
{
    for (int i = 0; i < NSPECS; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A whole-string integer in [lo, hi]. */
static int parse_int(const char *text, long long lo, long long hi, long long *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
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
    rc->eng.ckpt = 1;
    rc->eng.optim = gpt_optim_default();
    rc->eng.seed = 1234;
    rc->eng.device = DEVICE_CPU;
    rc->eng.tf32 = 1;
    rc->iters = 50;
    rc->log_interval = 10;
    snprintf(rc->results_dir, sizeof rc->results_dir, "results");
}

/* Apply one option whose value is text (from argv, or converted from JSON).
 * flag_value: for ARG_NONE options, 1 to set and 0 to clear. */
static int apply(run_config *rc, const opt_spec *sp, const char *value, int flag_value,
                 const char *config_path, char *err, size_t errlen)
{
    /* Messages name the option as the user wrote it: "--layers" or "config F: layers". */
    char where[PATH_MAX + 16], opt[PATH_MAX + 64];
    if (config_path) snprintf(where, sizeof where, "config %s: ", config_path);
    else where[0] = '\0';
    snprintf(opt, sizeof opt, "%s%s%s", where, config_path ? "" : "--", sp->name);
    long long iv = 0;
    double dv = 0;
    size_t bytes = 0;
    if (sp->kind == ARG_INT) {
        long long lo = (sp->id == OPT_SEED || sp->id == OPT_THREADS) ? 0 : 1;
        if (parse_int(value, lo, 2147483647LL, &iv))
            return fail(err, errlen, "%s: '%s' is not %s integer", opt,
                        value ? value : "", lo ? "a positive" : "a non-negative");
    } else if (sp->kind == ARG_NUM) {
        if (parse_num(value, &dv))
            return fail(err, errlen, "%s: '%s' is not a number", opt,
                        value ? value : "");
    }
    rc->given |= 1ULL << sp->id;
    engine_config *e = &rc->eng;
    switch (sp->id) {
    case OPT_METHOD:
        if (strcmp(value, "all") != 0 && !engine_find(value)) {
            char names[256] = "";
            for (int i = 0; i < engine_count(); i++) {
                strncat(names, engine_at(i)->name, sizeof names - strlen(names) - 1);
                strncat(names, ", ", sizeof names - strlen(names) - 1);
            }
            return fail(err, errlen, "%sunknown method '%s' (known: %sall)", where, value, names);
        }
        snprintf(rc->method, sizeof rc->method, "%s", value);
        break;
    case OPT_LAYERS: e->shape.layers = (int)iv; break;
    case OPT_HIDDEN: e->shape.hidden = (int)iv; break;
    case OPT_BATCH: e->shape.batch = (int)iv; break;
    case OPT_HEADS: e->shape.heads = (int)iv; break;
    case OPT_SEQ: e->shape.seq = (int)iv; break;
    case OPT_VOCAB:
        if (iv < 2) return fail(err, errlen, "%s: must be at least 2", opt);
        e->shape.vocab = (int)iv;
        break;
    case OPT_WINDOW:
        if (strcmp(value, "auto") == 0) {
            e->window = 0;
        } else if (parse_int(value, 1, 1000000, &iv)) {
            return fail(err, errlen, "%s: '%s' is neither a positive integer nor 'auto'",
                        opt, value);
        } else {
            e->window = (int)iv;
        }
        break;
    case OPT_ITERS: rc->iters = (int)iv; break;
    case OPT_LOG_INTERVAL: rc->log_interval = (int)iv; break;
    case OPT_SEED: e->seed = (uint64_t)iv; break;
    case OPT_THREADS: e->threads = (int)iv; break;
    case OPT_RESULTS:
        if (!*value) return fail(err, errlen, "%s: empty directory name", opt);
        if (snprintf(rc->results_dir, sizeof rc->results_dir, "%s", value) >= (int)sizeof rc->results_dir)
            return fail(err, errlen, "%s: path too long", opt);
        break;
    case OPT_DATA:
        if (snprintf(rc->data_path, sizeof rc->data_path, "%s", value) >= (int)sizeof rc->data_path)
            return fail(err, errlen, "%s: path too long", opt);
        break;
    case OPT_DEVICE:
        if (strcmp(value, "cpu") == 0) e->device = DEVICE_CPU;
        else if (strcmp(value, "cuda") == 0) e->device = DEVICE_CUDA;
        else return fail(err, errlen, "%s: '%s' is not cpu or cuda", opt, value);
        rc->device_given = 1;
        break;
    case OPT_DTYPE:
        if (strcmp(value, "fp32") == 0) e->bf16 = 0;
        else if (strcmp(value, "bf16") == 0) e->bf16 = 1;
        else return fail(err, errlen, "%s: '%s' is not fp32 or bf16", opt, value);
        break;
    case OPT_MATH:
        if (strcmp(value, "tf32") == 0) e->tf32 = 1;
        else if (strcmp(value, "fp32") == 0) e->tf32 = 0;
        else return fail(err, errlen, "%s: '%s' is not tf32 or fp32", opt, value);
        break;
    case OPT_GPU_MEM:
    case OPT_CPU_MEM:
        if (parse_bytes(value, &bytes))
            return fail(err, errlen, "%s: '%s' is not a size (e.g. 32G, 512M, 1073741824)",
                        opt, value);
        if (sp->id == OPT_GPU_MEM) rc->gpu_mem_limit = bytes;
        else rc->cpu_mem_limit = bytes;
        break;
    case OPT_DRY_RUN: rc->dry_run = flag_value; break;
    case OPT_NO_CKPT: e->ckpt = !flag_value; break;
    case OPT_LR:
        if (dv <= 0) return fail(err, errlen, "%s: must be positive", opt);
        e->optim.lr = dv;
        break;
    case OPT_MIN_LR:
        if (dv < 0) return fail(err, errlen, "%s: must not be negative", opt);
        e->optim.min_lr = dv;
        break;
    case OPT_DECAY_ITERS: e->optim.decay_iters = (int)iv; break;
    case OPT_WARMUP:
        if (dv < 0 || dv > 1) return fail(err, errlen, "%s: must be in [0, 1]", opt);
        e->optim.warmup_fraction = dv;
        break;
    case OPT_WEIGHT_DECAY:
        if (dv < 0) return fail(err, errlen, "%s: must not be negative", opt);
        e->optim.weight_decay = dv;
        break;
    case OPT_CLIP:
        if (dv < 0) return fail(err, errlen, "%s: must not be negative", opt);
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

static int load_config(run_config *rc, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "cannot read config %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = realloc(text, cap);
            if (!grown) {
                free(text);
                fclose(f);
                return fail(err, errlen, "config %s: out of memory", path);
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(text);
        return fail(err, errlen, "cannot read config %s", path);
    }
    text[len] = '\0';
    const char *where_err = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &where_err, 1);
    if (!root) {
        size_t at = where_err ? (size_t)(where_err - text) : 0;
        free(text);
        return fail(err, errlen, "config %s: malformed JSON near byte %zu", path, at);
    }
    free(text);
    int rc_ = 0;
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s: ", path);
    if (!cJSON_IsObject(root)) {
        rc_ = fail(err, errlen, "%sthe top level must be a JSON object of options", where);
        goto out;
    }
    for (cJSON *item = root->child; item; item = item->next) {
        const opt_spec *sp = spec_by_name(item->string);
        if (!sp || sp->id == OPT_CONFIG || sp->id == OPT_HELP || sp->id == OPT_VERSION) {
            rc_ = fail(err, errlen, "%sunknown key '%s'", where, item->string);
            goto out;
        }
        char value[PATH_MAX];
        int flag = 1;
        if (sp->kind == ARG_NONE) {
            if (!cJSON_IsBool(item)) {
                rc_ = fail(err, errlen, "%skey '%s' must be true or false", where, sp->name);
                goto out;
            }
            flag = cJSON_IsTrue(item);
            value[0] = '\0';
        } else if (cJSON_IsString(item)) {
            if (sp->kind != ARG_TEXT && !*item->valuestring) {
                rc_ = fail(err, errlen, "%skey '%s' is empty", where, sp->name);
                goto out;
            }
            snprintf(value, sizeof value, "%s", item->valuestring);
        } else if (cJSON_IsNumber(item)) {
            double d = item->valuedouble;
            if (sp->kind == ARG_INT && d == floor(d) && fabs(d) < 9.0e15)
                snprintf(value, sizeof value, "%lld", (long long)d);
            else
                snprintf(value, sizeof value, "%.17g", d);
        } else {
            rc_ = fail(err, errlen, "%skey '%s' has the wrong type (want %s)", where, sp->name,
                       sp->kind == ARG_TEXT ? "a string" : "a number");
            goto out;
        }
        if (apply(rc, sp, value, flag, path, err, errlen)) {
            rc_ = -1;
            goto out;
        }
    }
out:
    cJSON_Delete(root);
    return rc_;
}

static int validate(run_config *rc, char *err, size_t errlen)
{
    gpt_shape *sh = &rc->eng.shape;
    if (sh->hidden % sh->heads != 0)
        return fail(err, errlen, "hidden size %d is not divisible by the number of heads %d",
                    sh->hidden, sh->heads);
    if (rc->log_interval > rc->iters) rc->log_interval = rc->iters;
    if (rc->eng.window > sh->layers)
        return fail(err, errlen, "window %d is larger than the number of layers %d",
                    rc->eng.window, sh->layers);
    if (rc->eng.optim.min_lr > rc->eng.optim.lr)
        return fail(err, errlen, "min-lr %g is above lr %g", rc->eng.optim.min_lr,
                    rc->eng.optim.lr);
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    /* Sizes must stay within what index arithmetic (int rows, size_t bytes) can address. */
    double rows = (double)sh->batch * sh->seq;
    double P = (double)sh->vocab_padded * sh->hidden + (double)sh->seq * sh->hidden +
               (double)sh->layers * (12.0 * sh->hidden * sh->hidden + 13.0 * sh->hidden);
    if (rows * 4.0 * sh->hidden > 2147483647.0 || rows * sh->vocab_padded > 1.0e15 ||
        P * 16.0 > 1.0e18)
        return fail(err, errlen, "model or batch too large to address (%.3g parameters, %.3g rows)",
                    P, rows);
    if (rc->eng.bf16 && rc->eng.device == DEVICE_CPU && rc->device_given)
        return fail(err, errlen, "--dtype bf16 needs --device cuda (the CPU backend is fp32)");
    return 0;
}

cli_outcome cli_parse(int argc, char **argv, run_config *rc, char *err, size_t errlen)
{
    set_defaults(rc);
    struct option longopts[NSPECS + 1];
    char shortopts[64] = ":"; /* leading ':' : missing arguments are reported as ':' */
    size_t sl = 1;
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

    /* Pass 1: --help, --version, --config (the config applies before other flags). */
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (c == '?') {
            if (optopt) return fail(err, errlen, "unknown option '-%c'", optopt), CLI_ERROR;
            return fail(err, errlen, "unknown option '%s'", argv[optind - 1]), CLI_ERROR;
        }
        if (c == ':') return fail(err, errlen, "option '%s' needs a value", argv[optind - 1]), CLI_ERROR;
        if (c == 1000 + OPT_HELP) {
            cli_usage(stdout);
            return CLI_DONE;
        }
        if (c == 1000 + OPT_VERSION) {
            printf("aebench %s\n", AEBENCH_VERSION);
            return CLI_DONE;
        }
        if (c == 1000 + OPT_CONFIG)
            snprintf(rc->config_path, sizeof rc->config_path, "%s", optarg);
    }
    if (optind < argc) return fail(err, errlen, "unexpected argument '%s'", argv[optind]), CLI_ERROR;
    if (rc->config_path[0] && load_config(rc, rc->config_path, err, errlen)) return CLI_ERROR;

    /* Pass 2: every other option, overriding the config. */
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
    }
    return validate(rc, err, errlen) ? CLI_ERROR : CLI_RUN;
}

int cli_given(const run_config *rc, const char *long_name)
{
    const opt_spec *sp = spec_by_name(long_name);
    return sp && (rc->given >> sp->id & 1ULL);
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
    for (int i = 0; i < engine_count(); i++) {
        const engine_vtbl *e = engine_at(i);
        fprintf(out, "  %-14s %s%s%s%s\n", e->name, e->description, e->alias ? " (alias " : "",
                e->alias ? e->alias : "", e->alias ? ")" : "");
    }
    fprintf(out, "  %-14s %s\n\noptions:\n", "all", "every method above in turn");
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
            "Config files are JSON objects whose keys are the long option names; flags on the\n"
            "command line override them.  Exit codes: 0 ok, 1 error, 2 bad input, 3 out of memory.\n",
            cli_cpu_preset_text());
}
