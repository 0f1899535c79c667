/* The list of engines that `-m` accepts, in the order `-m all` runs them. */
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

void engine_note(const engine_env *env, const char *fmt, ...)
{
    if (!env->note) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    env->note(env->note_ctx, line);
}

void engine_report_line(const engine_report *rep, const char *fmt, ...)
{
    if (!rep->line) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    rep->line(rep->line_ctx, line);
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
    if (cfg->dpu && !(eng->options & ENGINE_OPT_DPU)) {
        snprintf(err, errlen, "%s has no delayed parameter update (--dpu is zero-offload's)", eng->name);
        return -1;
    }
    if (cfg->placement != PLACE_AUTO && !eng->uses_window) {
        snprintf(err, errlen, "%s has no resident layers to place (--placement is stronghold's)", eng->name);
        return -1;
    }
    if (cfg->offload == OFFLOAD_NVME && !(eng->options & ENGINE_OPT_OFFLOAD_NVME)) {
        snprintf(err, errlen, "%s keeps nothing on disk (--offload nvme is for zero-infinity and stronghold)",
                 eng->name);
        return -1;
    }
    if (engine_world(cfg) > 1 && !(eng->options & ENGINE_OPT_RANKS)) {
        snprintf(err, errlen, "%s runs on one rank so far (got %d ranks)", eng->name, cfg->world);
        return -1;
    }
    if (engine_micro_batches(cfg) > 1 && !(eng->options & ENGINE_OPT_ACCUM)) {
        snprintf(err, errlen, "%s takes one micro-batch per step so far (--global-batch %d asks for %d)",
                 eng->name, cfg->global_batch, cfg->micro_batches);
        return -1;
    }
    if (cfg->zero_stage != 0 && !(eng->options & ENGINE_OPT_ZERO_STAGES)) {
        snprintf(err, errlen, "--zero-stage is megatron-lm's (%s shards as its system does)", eng->name);
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

static const engine_vtbl *const engines[] = {
    &engine_megatron_lm,
    &engine_l2l,
    &engine_zero_offload,
    &engine_zero_infinity,
    &engine_stronghold,
    &engine_gemini,
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
