/* The list of engines that `-m` accepts, in the order `-m all` runs them (and, in the test
 * binaries, the test engines after them). */
#include "engine.h"
#include "runtime/timer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int engine_fail(const engine_env *env, int rc, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "aebench: %s\n", line);
    if (env->why && env->why_len && !env->why[0]) snprintf(env->why, env->why_len, "%s", line);
    return rc;
}

/* One printf-style line handed to a sink (an engine's note, a report line); none: nothing. */
static void line_to(void (*sink)(void *ctx, const char *line), void *ctx, const char *fmt, va_list ap)
{
    if (!sink) return;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    sink(ctx, line);
}

void engine_note(const engine_env *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    line_to(env->note, env->note_ctx, fmt, ap);
    va_end(ap);
}

void engine_report_line(const engine_report *rep, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    line_to(rep->line, rep->line_ctx, fmt, ap);
    va_end(ap);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double engine_median(const double *v, int n)
{
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return v[n / 2]; /* (out of memory: a value from the middle, unsorted) */
    memcpy(sorted, v, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    const double m = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    free(sorted);
    return m;
}

void engine_init_embed(const engine_env *env, float *p, const gpt_shape *sh, uint64_t seed)
{
    const double t0 = wall_ms();
    gpt_init_embed(p, sh, seed);
    if (env->init_ms) *env->init_ms += wall_ms() - t0;
}

void engine_init_layer(const engine_env *env, float *p, const gpt_shape *sh, int layer, uint64_t seed)
{
    const double t0 = wall_ms();
    gpt_init_layer(p, sh, layer, seed);
    if (env->init_ms) *env->init_ms += wall_ms() - t0;
}

int engine_config_refused(const engine_vtbl *eng, const engine_config *cfg, char *err, size_t errlen)
{
    if (cfg->bf16 && !eng->supports_bf16) {
        snprintf(err, errlen, "%s does not implement --dtype bf16 (use --dtype fp32)", eng->name);
        return -1;
    }
    /* (without `given`: the options whose value asks for something, given or not) */
    if (engine_option_refused(eng, cfg, NULL, NULL, err, errlen)) return -1;
    if (engine_world(cfg) > 1 && !(eng->options & ENGINE_OPT_RANKS)) {
        snprintf(err, errlen, "%s runs on one rank so far (got %d ranks)", eng->name, cfg->world);
        return -1;
    }
    if (engine_micro_batches(cfg) > 1 && !(eng->options & ENGINE_OPT_ACCUM)) {
        snprintf(err, errlen, "%s takes one micro-batch per step so far (--global-batch %d asks for %d)",
                 eng->name, cfg->global_batch, cfg->micro_batches);
        return -1;
    }
    return eng->check ? eng->check(cfg, err, errlen) : 0;
}

int engine_init_check(const engine_vtbl *eng, const engine_env *env)
{
    char err[512];
    if (engine_config_refused(eng, env->cfg, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        return GPT_ERR_INVALID;
    }
    if (env->world != engine_world(env->cfg)) {
        fprintf(stderr, "aebench: %s: the configuration says %d ranks, MPI %d\n", eng->name,
                engine_world(env->cfg), env->world);
        return GPT_ERR_INVALID;
    }
    const gpt_dtype want = env->cfg->bf16 ? GPT_BF16 : GPT_F32;
    if (env->be->dtype != want) {
        fprintf(stderr, "aebench: %s: --dtype %s needs a backend of that type (got %s)\n", eng->name,
                gpt_dtype_name(want), gpt_dtype_name(env->be->dtype));
        return GPT_ERR_INVALID;
    }
    return GPT_OK;
}

void engine_step_outcome(step_result *out, const float *host_losses, int N,
                         const float *host_norms, int nblocks)
{
    out->loss = gpt_mean_loss(host_losses, N);
    out->grad_norm = gpt_combine_norms(host_norms, nblocks);
    out->skipped = !isfinite(out->grad_norm);
}

/* The test-only engines (tests/engine_*.c): compiled into the test binaries alone (the Makefile
 * builds this file with -DAEBENCH_TEST_ENGINES for them), never into the shipped ./aebench.  One
 * line each, X(its engine_vtbl), above the list's end: it declares the engine and registers it
 * after the shipped ones, so that adding one touches its file and that line. */
#ifdef AEBENCH_TEST_ENGINES
#define AEBENCH_TEST_ENGINES_LIST(X) \
    X(engine_test_twin) \
    /* (end of the test engines) */
#else
#define AEBENCH_TEST_ENGINES_LIST(X)
#endif
#define TEST_ENGINE_DECLARED(e) extern const engine_vtbl e;
#define TEST_ENGINE_ENTRY(e) &e,
AEBENCH_TEST_ENGINES_LIST(TEST_ENGINE_DECLARED)

static const engine_vtbl *const engines[] = {
    &engine_megatron_lm,
    &engine_l2l,
    &engine_zero_offload,
    &engine_zero_infinity,
    &engine_stronghold,
    &engine_gemini,
    AEBENCH_TEST_ENGINES_LIST(TEST_ENGINE_ENTRY)
};

int engine_count(void)
{
    return (int)(sizeof engines / sizeof engines[0]);
}

const engine_vtbl *engine_at(int i)
{
    return (i >= 0 && i < engine_count()) ? engines[i] : NULL;
}

const engine_vtbl *engine_find(const char *name)
{
    for (int i = 0; i < engine_count(); i++) {
        if (strcmp(engines[i]->name, name) == 0) return engines[i];
        if (engines[i]->alias && strcmp(engines[i]->alias, name) == 0) return engines[i];
    }
    return NULL;
}

/* ---- the engines' options -------------------------------------------------------------------- */

/* The options several engines take: each engine that takes one names it in its `takes`.  (Their
 * slots are those they had in the one table before the engines had tables of their own, so
 * that results keep their fingerprints.) */
static const option_decl shared_options[] = {
    {.name = "window", .short_name = 'w', .kind = ARG_TEXT_OR_INT, .arg = "W|auto", .set = SET_INT_OR_AUTO,
     OPTION_FIELD(window), .lo = 1, .hi = 1000000, .auto_value = 0, .what = "a positive integer", .dflt = "auto",
     .scope = SCOPE_RESULT, .slot = 7, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN,
     .lacks = "has no window of layers", OPTION_INERT(0),
     .help = "its GPU window of W layers (default auto; not with -m all)"},
    {.name = "offload", .kind = ARG_TEXT, .arg = "cpu|nvme", .set = SET_WORDS, OPTION_FIELD(offload),
     OPTION_WORDS({"cpu", OFFLOAD_CPU}, {"nvme", OFFLOAD_NVME}), .dflt = "cpu", .scope = SCOPE_RESULT, .slot = 22,
     .use = OPTION_CFG | OPTION_KID, .flags = OPTION_LAYOUT, .refusal = REFUSED_ALWAYS, .lacks = "keeps nothing on disk",
     OPTION_INERT(OFFLOAD_CPU), OPTION_SEARCH(OFFLOAD_CPU, OFFLOAD_NVME), .search_when = SEARCH_WITH_DISK,
     .help = "optimizer state in host memory or on disk (default cpu)"},
    {.name = "nvme-dir", .kind = ARG_TEXT, .arg = "DIR", .set = SET_PATH, OPTION_FIELD(nvme_dir),
     .what = "directory", .scope = SCOPE_RESULT, .slot = 23, .use = OPTION_CFG | OPTION_KID,
     .refusal = REFUSED_NEVER,
     .help = "with --offload nvme: where the private swap directory goes (default: the results directory)"},
    {.name = "clip-speculate", .kind = ARG_TEXT_OR_INT, .arg = "N|auto", .set = SET_INT_OR_AUTO,
     OPTION_FIELD(clip_speculate), .lo = 0, .hi = 1000000, .auto_value = -1, .what = "a layer count (0 or more)",
     .dflt = "auto", .scope = SCOPE_RESULT, .slot = 50, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN,
     .lacks = "updates no layer before the step's norm is known", OPTION_SEARCH(-1, 0),
     .search_when = SEARCH_WITH_CLIPPING,
     .help = "with clipping: the top N streamed layers updated as their grads arrive, redone exactly when the "
             "norm clips (auto: as many as host memory holds the undo copies of; 0: wait for the norm)"},
};

const option_decl *engine_shared_options(int *n)
{
    *n = (int)(sizeof shared_options / sizeof shared_options[0]);
    return shared_options;
}

int engine_option_count(void)
{
    int n = (int)(sizeof shared_options / sizeof shared_options[0]);
    for (int e = 0; e < engine_count(); e++) n += engines[e]->n_own_options;
    return n;
}

const option_decl *engine_option_at(int i, const engine_vtbl **owner)
{
    if (owner) *owner = NULL;
    if (i < 0) return NULL;
    for (int e = 0; e < engine_count(); e++) {
        if (i < engines[e]->n_own_options) {
            if (owner) *owner = engines[e];
            return &engines[e]->own_options[i];
        }
        i -= engines[e]->n_own_options;
    }
    return i < (int)(sizeof shared_options / sizeof shared_options[0]) ? &shared_options[i] : NULL;
}

const option_decl *engine_option_named(const char *name)
{
    for (int i = 0; i < engine_option_count(); i++) {
        const option_decl *d = engine_option_at(i, NULL);
        if (strcmp(d->name, name) == 0) return d;
    }
    return NULL;
}

int engine_steady_from(const engine_vtbl *eng, const engine_config *cfg)
{
    const int from = eng->steady_from ? eng->steady_from(cfg) : 2;
    return from > 1 ? from : 1;
}

int engine_takes_option(const engine_vtbl *eng, const char *name)
{
    for (int i = 0; i < eng->n_own_options; i++)
        if (strcmp(eng->own_options[i].name, name) == 0) return 1;
    for (const char *const *t = eng->takes; t && *t; t++)
        if (strcmp(*t, name) == 0) return 1;
    return 0;
}

/* The registry's engines that `has` says yes to (ctx its argument), as "a, b and c" (with 's
 * after each name when possessive). */
static void engine_names(int (*has)(const engine_vtbl *e, const void *ctx), const void *ctx, int possessive,
                         char *buf, size_t len)
{
    int n = 0, k = 0;
    for (int e = 0; e < engine_count(); e++) n += has(engines[e], ctx);
    if (len) buf[0] = '\0';
    for (int e = 0; e < engine_count(); e++) {
        if (!has(engines[e], ctx)) continue;
        const size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s%s", k == 0 ? "" : k == n - 1 ? " and " : ", ", engines[e]->name,
                 possessive ? "'s" : "");
        k++;
    }
}

static int takes_named(const engine_vtbl *e, const void *name) { return engine_takes_option(e, name); }

void engine_option_takers(const char *name, int possessive, char *buf, size_t len)
{
    engine_names(takes_named, name, possessive, buf, len);
}

static int has_bit(const engine_vtbl *e, const void *bit) { return (e->options & *(const unsigned *)bit) != 0; }

void engine_names_with(unsigned bit, char *buf, size_t len)
{
    engine_names(has_bit, &bit, 0, buf, len);
}

static int holds_int(const option_decl *d)
{
    return d->set == SET_INT || d->set == SET_INT_OR_AUTO || d->set == SET_WORDS || d->set == SET_FLAG;
}

long long engine_option_value(const option_decl *d, const engine_config *cfg)
{
    if (!holds_int(d)) return 0;
    const char *field = (const char *)cfg + d->offset;
    if (d->size == sizeof(int)) {
        int v;
        memcpy(&v, field, sizeof v);
        return v;
    }
    long long v;
    memcpy(&v, field, sizeof v);
    return v;
}

void engine_option_store(const option_decl *d, engine_config *cfg, long long v)
{
    if (!holds_int(d)) return;
    char *field = (char *)cfg + d->offset;
    if (d->size == sizeof(int)) {
        const int i = (int)v;
        memcpy(field, &i, sizeof i);
    } else {
        memcpy(field, &v, sizeof v);
    }
}

void engine_option_value_text(const option_decl *d, long long v, char *buf, size_t len)
{
    for (int i = 0; d->set == SET_WORDS && i < d->nwords; i++)
        if (d->words[i].value == v) {
            snprintf(buf, len, "%s", d->words[i].word);
            return;
        }
    if (d->set == SET_INT_OR_AUTO && v == d->auto_value) snprintf(buf, len, "auto");
    else snprintf(buf, len, "%lld", v);
}

static int inert(const option_decl *d, const engine_config *cfg)
{
    const long long v = engine_option_value(d, cfg);
    for (int i = 0; i < d->ninert; i++)
        if (d->inert[i] == v) return 1;
    return 0;
}

int engine_option_refused(const engine_vtbl *eng, const engine_config *cfg,
                          int (*given)(const void *ctx, const char *name), const void *ctx, char *err,
                          size_t errlen)
{
    for (int i = 0; i < engine_option_count(); i++) {
        const option_decl *d = engine_option_at(i, NULL);
        if (d->refusal == REFUSED_NEVER || engine_takes_option(eng, d->name)) continue;
        const int asks = d->refusal == REFUSED_ALWAYS ? !inert(d, cfg)
                                                      : given && given(ctx, d->name) && (d->ninert == 0 || !inert(d, cfg));
        if (!asks) continue;
        char owners[256], value[64] = "";
        engine_option_takers(d->name, 1, owners, sizeof owners);
        const char *lacks = d->lacks ? d->lacks : "does not take it";
        if (d->refusal == REFUSED_ALWAYS) {
            /* (about the configuration, whoever gave it: a sweep says it leaving the engine out) */
            snprintf(err, errlen, "%s %s (--%s is %s)", eng->name, lacks, d->name, owners);
            return -1;
        }
        /* (about what was typed: the value where only some values ask for something) */
        if (d->ninert > 0 && d->set != SET_FLAG) {
            value[0] = ' ';
            engine_option_value_text(d, engine_option_value(d, cfg), value + 1, sizeof value - 1);
        }
        char dash[8] = "";
        if (d->short_name) snprintf(dash, sizeof dash, "-%c/", d->short_name);
        snprintf(err, errlen, "%s--%s%s: %s %s (%s option)", dash, d->name, value, eng->name, lacks, owners);
        return -1;
    }
    return 0;
}
