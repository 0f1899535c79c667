#include "machine.h"

#include "bisect.h"
#include "bound.h"

#include "report.h"
#include "run.h"
#include "data.h"
#include "../engines/runtime/ckpt_store.h"
#include "../engines/runtime/collectives.h"
#include "../engines/runtime/comm.h"
#include "../engines/runtime/cpu_adam.h"
#include "../engines/runtime/disk_tier.h"
#include "../engines/runtime/predict.h"
#include "../kernels/host_pages.h"
#include "../engines/runtime/membudget.h"
#include "../engines/runtime/timer.h"
#include "../kernels/model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the file ------------------------------------------------------------------------------
 * { "aebench_machine": 1, "host": ..., "device": ..., "backend": "cuda"|"cpu",
 *   "rates": { "h2d_gbs", "d2h_gbs", "both_h2d_gbs", "both_d2h_gbs", "host_adam_ms_per_mparam",
 *              "host_adam_bf16_ms_per_mparam" (optional: the update writing the bf16 copy too),
 *              "host_threads", "host_copy_gbs", "gpu_bytes", "host_bytes",
 *              "busy_h2d_gbs", "busy_d2h_gbs", "busy_host_adam_ms_per_mparam", "measured" },
 *   "compute": [ { "hidden", "heads", "seq", "batch", "vocab", "math", "dtype", "measured",
 *                  "embed_fwd_ms", "layer_fwd_ms", "layer_bwd_ms", "head_ms", "embed_bwd_ms",
 *                  "gpu_adam_ms_per_mparam", "layer_recompute_selective_ms" (optional: files
 *                  from before --recompute selective) }, ... ],
 *   "disks": [ { "dir", "read_gbs", "write_gbs", "measured" }, ... ] (--offload nvme's tier),
 *   "checkpoint_dirs": [ { "dir", "home_gbs", "write_ms", "write_gbs", "measured" }, ... ]
 *                      (--ckpt-dir's persistent checkpoint: the state's checksums and copy
 *                      home, then its file),
 *   "collectives": [ { "world", "all_reduce_ms", "all_reduce_gbs", "reduce_scatter_ms",
 *                      "reduce_scatter_gbs", "all_gather_ms", "all_gather_gbs",
 *                      "compute_under_collectives", "rates": { as above, one rank's with
 *                      every rank at work }, "checkpoint_dir": { as checkpoint_dirs[], every
 *                      rank writing }, "measured" }, ... ] (--calibrate under mpirun) }
 * "measured" is the Unix time of the measurement. */

/* The rates a prediction reads, the machine's memory last (the file also records
 * both_h2d_gbs, both_d2h_gbs: each way while the other runs, which the load model's
 * full-load rates superseded).  A world entry's "rates" have all but the memory (RANK_RATES:
 * one rank's, with every rank at work). */
static const char *const RATE_FIELDS[] = {"h2d_gbs", "d2h_gbs", "host_adam_ms_per_mparam", "host_threads",
                                          "host_copy_gbs", "busy_h2d_gbs", "busy_d2h_gbs",
                                          "busy_host_adam_ms_per_mparam", "gpu_bytes", "host_bytes"};
enum { NRATE_FIELDS = sizeof RATE_FIELDS / sizeof RATE_FIELDS[0], RANK_RATES = NRATE_FIELDS - 2 };
static const char *const COMPUTE_FIELDS[] = {"embed_fwd_ms", "layer_fwd_ms", "layer_bwd_ms", "head_ms",
                                             "embed_bwd_ms", "gpu_adam_ms_per_mparam", "layer_scale",
                                             "rest_scale"};
enum { NCOMPUTE_FIELDS = sizeof COMPUTE_FIELDS / sizeof COMPUTE_FIELDS[0] };

/* The math mode of an entry: the CPU backend has no TF32 (its runs' JSON says fp32), a CUDA
 * one the run's --math.  `backend` is the machine file's ("cpu" or "cuda"). */
static const char *math_of_backend(const engine_config *c, const char *backend)
{
    return strcmp(backend, "cpu") == 0 ? "fp32" : c->tf32 ? "tf32" : "fp32";
}
static const char *math_of(const engine_config *c)
{
    return math_of_backend(c, c->device == DEVICE_CPU ? "cpu" : "cuda");
}
static const char *dtype_of(const engine_config *c) { return c->bf16 ? "bf16" : "fp32"; }

/* A short name for a device description: its first word group up to a comma or
 * parenthesis, letters and digits only. */
static void short_name(char *out, size_t len, const char *desc)
{
    size_t o = 0;
    for (const char *p = desc; *p && *p != ',' && *p != '(' && o + 1 < len; p++) {
        const char c = *p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) out[o++] = c;
        else if ((c == ' ' || c == '-' || c == '_') && o > 0 && out[o - 1] != '-') out[o++] = '-';
    }
    while (o > 0 && out[o - 1] == '-') o--;
    out[o] = '\0';
    if (o == 0) snprintf(out, len, "device");
}

int machine_default_path(char *out, size_t len, const char *results_dir, const gpt_backend *be)
{
    char host[64] = "host", desc[320] = "", dev[64];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    char hs[64];
    short_name(hs, sizeof hs, host);
    be->ops->describe(be, desc, sizeof desc);
    short_name(dev, sizeof dev, desc);
    const int n = snprintf(out, len, "%s/machine_%s_%s.json", results_dir, hs, dev);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static cJSON *read_json(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "machine file %s: not a regular file (the JSON file --calibrate writes was expected)",
                 path);
        return NULL;
    }
    long long size = 0;
    char *text = report_read_text_max(path, CLI_JSON_MAX_BYTES, &size);
    if (!text && errno == EFBIG) {
        snprintf(err, errlen, "machine file %s: %lld bytes, above the limit of %d (1 MiB) for a machine file", path,
                 size, CLI_JSON_MAX_BYTES);
        return NULL;
    }
    if (!text) {
        snprintf(err, errlen, "machine file %s: %s (make one with --calibrate)", path, strerror(errno));
        return NULL;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "machine file %s: not a JSON object", path);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The bounds of every measured value (ms, GB/s, bytes, ratios, threads): far beyond any machine
 * either way, and near enough that no prediction's sums and products of them overflow (a
 * value of 1e308 made one "inf ms/it"). */
#define FIELD_MIN 1e-9
#define FIELD_MAX 1e18

/* A positive number field within the bounds above, or -1 with err set. */
static int field(const cJSON *o, const char *where, const char *name, const char *path, double *out,
                 char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
        snprintf(err, errlen, "machine file %s: %s.%s is %s", path, where, name,
                 v ? "not a positive number" : "missing");
        return -1;
    }
    if (v->valuedouble < FIELD_MIN || v->valuedouble > FIELD_MAX) {
        snprintf(err, errlen, "machine file %s: %s.%s is %g, outside what any machine measures (%g to %g)", path,
                 where, name, v->valuedouble, FIELD_MIN, FIELD_MAX);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int same_entry(const cJSON *e, const engine_config *c, const char *backend)
{
    const gpt_shape *sh = &c->shape;
    const cJSON *math = cJSON_GetObjectItemCaseSensitive(e, "math"),
                *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const char *keys[] = {"hidden", "heads", "seq", "batch", "vocab"};
    const int want[] = {sh->hidden, sh->heads, sh->seq, sh->batch, sh->vocab};
    for (int i = 0; i < 5; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, keys[i]);
        if (!cJSON_IsNumber(v) || v->valueint != want[i]) return 0;
    }
    return cJSON_IsString(math) && strcmp(math->valuestring, math_of_backend(c, backend)) == 0 && cJSON_IsString(dtype) &&
           strcmp(dtype->valuestring, dtype_of(c)) == 0;
}

/* The machine file's backend ("cpu" or "cuda"; a file without one counts as cuda). */
static const char *backend_of(const cJSON *root)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "backend");
    return cJSON_IsString(b) && strcmp(b->valuestring, "cpu") == 0 ? "cpu" : "cuda";
}

static const cJSON *find_entry(const cJSON *root, const engine_config *c)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "compute"), *e;
    cJSON_ArrayForEach(e, list)
        if (same_entry(e, c, backend_of(root))) return e;
    return NULL;
}

/* A bf16 run's host Adam rate in rates (the optional host_adam_bf16_ms_per_mparam) into *out;
 * left as it is for fp32 runs and where the field is missing.  -1 with err set when it is
 * there but not a positive number. */
static int bf16_rate_of(const cJSON *rates, const char *path, const engine_config *cfg, double *out, char *err,
                        size_t errlen)
{
    if (!cfg->bf16 || !cJSON_GetObjectItemCaseSensitive(rates, "host_adam_bf16_ms_per_mparam")) return 0;
    return field(rates, "rates", "host_adam_bf16_ms_per_mparam", path, out, err, errlen);
}

/* The first n of RATE_FIELDS from the rates object o (the file's own, or a world entry's) into
 * out.  0, or -1 with err set. */
static int rates_from(const cJSON *o, const char *where, int n, const char *path, machine_rates *out, char *err,
                      size_t errlen)
{
    double v[NRATE_FIELDS];
    for (int i = 0; i < n; i++)
        if (field(o, where, RATE_FIELDS[i], path, &v[i], err, errlen)) return -1;
    out->h2d_gbs = v[0], out->d2h_gbs = v[1];
    out->host_adam_ms_per_mparam = v[2], out->host_threads = (int)v[3], out->host_copy_gbs = v[4];
    out->busy_h2d_gbs = v[5], out->busy_d2h_gbs = v[6], out->busy_host_adam_ms_per_mparam = v[7];
    if (n == NRATE_FIELDS) out->gpu_bytes = v[8], out->host_bytes = v[9];
    return 0;
}

/* Whether e, an entry of a per-directory list, is dir's (dir "": no entry is). */
static int entry_of_dir(const cJSON *e, const char *dir)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "dir");
    return dir[0] && cJSON_IsString(d) && strcmp(d->valuestring, dir) == 0;
}

/* A persistent checkpoint directory's entry (checkpoint_dirs[], or a world entry's
 * checkpoint_dir) into out.  0, or -1 with err set. */
static int ckpt_dir_from(const cJSON *e, const char *where, const char *path, machine_rates *out, char *err,
                         size_t errlen)
{
    return field(e, where, "home_gbs", path, &out->ckpt_home_gbs, err, errlen) ||
                   field(e, where, "write_ms", path, &out->ckpt_write_ms, err, errlen) ||
                   field(e, where, "write_gbs", path, &out->ckpt_write_gbs, err, errlen)
               ? -1
               : 0;
}

/* The file's format version is this aebench's: another format's fields could mean other things,
 * and read as this one's they would predict nonsense without a word.  0, or -1 with err set. */
static int version_refused(const cJSON *root, const char *path, char *err, size_t errlen)
{
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "aebench_machine");
    if (cJSON_IsNumber(version) && version->valuedouble == MACHINE_FORMAT) return 0;
    char found[64] = "missing";
    if (cJSON_IsNumber(version)) snprintf(found, sizeof found, "%g", version->valuedouble);
    else if (version) snprintf(found, sizeof found, "not a number");
    snprintf(err, errlen, "machine file %s: format version (aebench_machine) %s, but this aebench reads version %d",
             path, found, MACHINE_FORMAT);
    return -1;
}

int machine_load(const char *path, const engine_config *cfg, machine_rates *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *root = read_json(path, err, errlen);
    if (!root) return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT;
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(root, "rates");
    const cJSON *entry = find_entry(root, cfg);
    double w[NCOMPUTE_FIELDS];
    if (version_refused(root, path, err, errlen)) goto out;
    if (!cJSON_IsObject(rates)) {
        snprintf(err, errlen, "machine file %s: rates is missing", path);
        goto out;
    }
    if (rates_from(rates, "rates", NRATE_FIELDS, path, out, err, errlen)) goto out;
    if (!entry) {
        snprintf(err, errlen, "machine file %s has no entry for h%d heads%d s%d b%d vocab%d %s %s (calibrate "
                 "that shape: aebench --calibrate with the same options)", path, cfg->shape.hidden, cfg->shape.heads,
                 cfg->shape.seq, cfg->shape.batch, cfg->shape.vocab, math_of_backend(cfg, backend_of(root)),
                 dtype_of(cfg));
        rc = MACHINE_NO_ENTRY;
        goto out;
    }
    for (int i = 0; i < NCOMPUTE_FIELDS; i++)
        if (field(entry, "compute[]", COMPUTE_FIELDS[i], path, &w[i], err, errlen)) goto out;
    if (cJSON_GetObjectItemCaseSensitive(entry, "layer_recompute_selective_ms") &&
        field(entry, "compute[]", "layer_recompute_selective_ms", path, &out->layer_recompute_selective_ms, err,
              errlen))
        goto out;
    /* the persistent checkpoint at the run's --ckpt-dir, when calibrated there (else 0):
     * one rank's here; on N ranks the world's entry below, measured with every rank writing */
    const cJSON *cdirs = cJSON_GetObjectItemCaseSensitive(root, "checkpoint_dirs"), *cd;
    cJSON_ArrayForEach(cd, cdirs)
        if (entry_of_dir(cd, cfg->ckpt_dir) && ckpt_dir_from(cd, "checkpoint_dirs[]", path, out, err, errlen)) goto out;
    /* the collectives at the run's world, when calibrated (else coll_world stays 0) */
    const int world = engine_world(cfg);
    double bf16_adam = 0; /* (the rates' own, or the world's where those are taken) */
    if (bf16_rate_of(rates, path, cfg, &bf16_adam, err, errlen)) goto out;
    const cJSON *colls = cJSON_GetObjectItemCaseSensitive(root, "collectives"), *ce;
    cJSON_ArrayForEach(ce, colls) {
        const cJSON *w_ = cJSON_GetObjectItemCaseSensitive(ce, "world");
        if (world < 2 || !cJSON_IsNumber(w_) || w_->valueint != world) continue;
        static const char *const names[] = {"all_reduce_ms", "all_reduce_gbs", "reduce_scatter_ms",
                                            "reduce_scatter_gbs", "all_gather_ms", "all_gather_gbs"};
        double c[6];
        for (int i = 0; i < 6; i++)
            if (field(ce, "collectives[]", names[i], path, &c[i], err, errlen)) goto out;
        out->coll_world = world;
        out->ar_ms = c[0], out->ar_gbs = c[1], out->rs_ms = c[2], out->rs_gbs = c[3], out->ag_ms = c[4];
        out->ag_gbs = c[5];
        /* optional (files from before they were measured): the compute beside collectives,
         * and each rank's copy and host Adam rates with every rank at work */
        if (cJSON_GetObjectItemCaseSensitive(ce, "compute_under_collectives")) {
            if (field(ce, "collectives[]", "compute_under_collectives", path, &out->compute_under_coll, err, errlen))
                goto out;
            if (out->compute_under_coll < 1) {
                snprintf(err, errlen, "machine file %s: collectives[].compute_under_collectives is %g (at least 1)",
                         path, out->compute_under_coll);
                goto out;
            }
        }
        const cJSON *shared = cJSON_GetObjectItemCaseSensitive(ce, "rates");
        if (shared) {
            if (rates_from(shared, "collectives[].rates", RANK_RATES, path, out, err, errlen)) goto out;
            out->rates_world = world;
            bf16_adam = 0; /* (the world's own, or none: not the single rank's beside its rates) */
            if (bf16_rate_of(shared, path, cfg, &bf16_adam, err, errlen)) goto out;
        }
        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(ce, "checkpoint_dir");
        if (ck && entry_of_dir(ck, cfg->ckpt_dir)) {
            if (ckpt_dir_from(ck, "collectives[].checkpoint_dir", path, out, err, errlen)) goto out;
            out->ckpt_world = world;
        }
    }
    /* the disk tier at the run's --nvme-dir, when calibrated there (else 0) */
    const cJSON *disks = cJSON_GetObjectItemCaseSensitive(root, "disks"), *de;
    cJSON_ArrayForEach(de, disks) {
        if (cfg->offload != OFFLOAD_NVME || !entry_of_dir(de, cfg->nvme_dir)) continue;
        if (field(de, "disks[]", "read_gbs", path, &out->disk_read_gbs, err, errlen) ||
            field(de, "disks[]", "write_gbs", path, &out->disk_write_gbs, err, errlen))
            goto out;
    }
    /* bf16: the update also writes the working copy; its rate alone, and the rate under load
     * scaled alike (older files, without it: as fp32) */
    if (bf16_adam > 0) {
        out->busy_host_adam_ms_per_mparam *= bf16_adam / out->host_adam_ms_per_mparam;
        out->host_adam_ms_per_mparam = bf16_adam;
    }
    /* the pieces as measured, and megatron-lm's step against them (measure_step) */
    out->embed_fwd_ms = w[0], out->layer_fwd_ms = w[1], out->layer_bwd_ms = w[2];
    out->head_ms = w[3], out->embed_bwd_ms = w[4], out->gpu_adam_ms_per_mparam = w[5];
    out->layer_scale = w[6], out->rest_scale = w[7];
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* Write root to path (through a temporary file: report_write_text). */
static int write_file(cJSON *root, const char *path)
{
    char *text = report_json_text(root);
    if (!text || report_write_text(path, text) != 0) {
        if (text && errno == ENOSPC) fprintf(stderr, "aebench: --calibrate: disk full writing %s\n", path);
        else fprintf(stderr, "aebench: --calibrate: cannot write %s: %s\n", path, text ? strerror(errno) : "out of memory");
        cJSON_free(text);
        return EXIT_RUN_ERROR;
    }
    cJSON_free(text);
    printf("calibrate: wrote %s\n", path);
    return 0;
}

/* ---- measuring ----------------------------------------------------------------------------- */

enum { REPS = 5 };

/* REPS calls of run(ctx) (after one untimed warm-up) into t; *bad set when a call fails. */
typedef int (*timed_fn)(void *ctx);
static void timed_reps(timed_fn run, void *ctx, int *bad, double t[REPS])
{
    *bad |= run(ctx) != 0;
    for (int r = 0; r < REPS && !*bad; r++) {
        const double t0 = wall_ms();
        *bad |= run(ctx) != 0;
        t[r] = wall_ms() - t0;
    }
}

/* The median ms of REPS calls: the GPU's pieces, which repeat to the microsecond. */
static double median_ms(timed_fn run, void *ctx, int *bad)
{
    double t[REPS];
    timed_reps(run, ctx, bad, t);
    return *bad ? 0 : median_of(t, REPS);
}

/* t = latency + bytes / rate from two timed sizes (ms for small and large bytes): the rate
 * (GB/s) from the slope, the latency (ms, at least 1 us) from the small one; without a
 * positive slope, the large size's rate and no latency to speak of. */
static void fit_latency_rate(double small, double large, double small_ms, double large_ms, double *lat_ms,
                             double *gbs)
{
    const double slope = (large_ms - small_ms) / (large - small); /* ms per byte */
    *gbs = slope > 0 ? 1.0 / (slope * 1e6) : large / (large_ms * 1e6);
    *lat_ms = small_ms - small / (*gbs * 1e6);
    if (*lat_ms < 1e-3) *lat_ms = 1e-3;
}

static double min_of(const double *t, int n)
{
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* The host's rates (copies, host Adam) on a GPU machine: the fastest of REPS calls, as the
 * noise of a shared machine only ever slows a call (two calibrations of one H200 gave the host
 * Adam 0.178 and 0.216 ms per million parameters by their medians, while the runs after both
 * ran at the first).  On the CPU backend the median: there compute, copies and the host Adam
 * share the same few cores in a run, and their typical rate describes it (its predictions
 * came out 13-23% short with the fastest). */
static double host_rate_of(const double *t, int gpu) { return gpu ? min_of(t, REPS) : median_of(t, REPS); }
static double host_ms(timed_fn run, void *ctx, int *bad, int gpu)
{
    double t[REPS];
    timed_reps(run, ctx, bad, t);
    return *bad ? 0 : host_rate_of(t, gpu);
}

/* What `issue` puts on stream s, until s has done it. */
typedef void (*issue_fn)(void *ctx);
typedef struct on_stream {
    gpt_stream *s;
    issue_fn issue;
    void *ctx;
} on_stream;
static int run_on_stream(void *p)
{
    const on_stream *o = p;
    o->issue(o->ctx);
    return gpt_stream_sync(o->s);
}
static double time_ms(gpt_stream *s, issue_fn issue, void *ctx, int *bad)
{
    on_stream o = {s, issue, ctx};
    return median_ms(run_on_stream, &o, bad);
}

/* Layers timed in turn, each with its own weights and gradients, so that a layer's time
 * includes fetching its weights from memory as in a model of many layers (on the CPU backend
 * one layer timed alone stays in cache). */
enum { LAYER_COPIES = 4 };

typedef struct compute_ctx {
    gpt_stream *s;
    const gpt_shape *sh;
    void *lp, *ep, *x_in, *x_out, *dres, *acts_base, *scratch_base, *head_base;
    float *lg, *eg, *lm, *lv, *master, *norm_out;
    int32_t *tokens, *targets;
    gpt_layer_acts acts;
    gpt_layer_scratch scratch;
    gpt_head_acts head;
    size_t PL;
    gpt_optim optim;
} compute_ctx;

static void run_embed_fwd(void *p)
{
    compute_ctx *c = p;
    gpt_embed_forward(c->s, c->sh, c->ep, c->tokens, c->x_in);
}
static const void *layer_params(const compute_ctx *c, int k)
{
    return (const char *)c->lp + (size_t)k * gpt_act_bytes(c->PL, gpt_stream_dtype(c->s));
}
static void run_layer_fwd(void *p)
{
    compute_ctx *c = p;
    for (int k = 0; k < LAYER_COPIES; k++)
        gpt_layer_forward(c->s, c->sh, layer_params(c, k), c->x_in, c->x_out, &c->acts);
}
/* A layer's backward with recompute, and what a step does per layer besides: its gradients
 * zeroed and their squared norm taken. */
static void run_layer_bwd(void *p)
{
    compute_ctx *c = p;
    for (int k = 0; k < LAYER_COPIES; k++) {
        float *g = c->lg + (size_t)k * c->PL;
        gpt_stream_memset_zero(c->s, g, c->PL * sizeof(float));
        /* (c->acts carved whole: their backward recomputes in full) */
        gpt_layer_backward(c->s, c->sh, layer_params(c, k), g, c->x_in, c->dres, &c->acts, &c->scratch,
                           GPT_GRAD_ACCUMULATE);
        gpt_norm_squared(c->s, c->norm_out, g, c->PL);
    }
}
/* --recompute selective's recompute of a layer, alone (what its backward adds to none's). */
static void run_layer_recompute_selective(void *p)
{
    compute_ctx *c = p;
    for (int k = 0; k < LAYER_COPIES; k++)
        gpt_layer_recompute(c->s, c->sh, layer_params(c, k), c->x_in, &c->acts, GPT_RECOMPUTE_SELECTIVE);
}
static void run_head(void *p)
{
    compute_ctx *c = p;
    gpt_stream_memset_zero(c->s, c->eg, gpt_embed_layout_of(c->sh).total * sizeof(float));
    gpt_head_forward(c->s, c->sh, c->ep, c->eg, c->x_out, c->targets, &c->head);
    gpt_head_backward(c->s, c->sh, c->ep, c->eg, c->x_out, &c->head, c->dres);
}
static void run_embed_bwd(void *p)
{
    compute_ctx *c = p;
    gpt_embed_backward(c->s, c->sh, c->eg, c->dres, c->tokens);
    gpt_norm_squared(c->s, c->norm_out, c->eg, gpt_embed_layout_of(c->sh).total);
}
static void run_adam(void *p)
{
    compute_ctx *c = p;
    gpt_block_adamw(c->s, c->master, c->lg, c->lm, c->lv, c->PL, c->PL / 2, &c->optim, 1e-4f, 1, 1.0f);
}

/* The buffers of one micro-batch's pieces at rc's shape, on the backend (zeros everywhere:
 * the times do not depend on the values, and zeros keep the CPU free of denormals), and a
 * stream to time them on.  0, or EXIT_RUN_ERROR said on stderr (compute_ctx_close either way). */
enum { COMPUTE_BUFS = 16 };
typedef struct compute_bufs {
    compute_ctx c;
    void **ptr[COMPUTE_BUFS]; /* where each allocation's pointer is (in c) */
    int n;                    /* how many were tried */
} compute_bufs;
static int compute_ctx_open(const run_config *rc, gpt_backend *be, compute_bufs *b)
{
    const gpt_shape *sh = &rc->eng.shape;
    const gpt_dtype dt = rc->eng.bf16 ? GPT_BF16 : GPT_F32;
    const size_t N = (size_t)sh->batch * sh->seq, C = (size_t)sh->hidden;
    memset(b, 0, sizeof *b);
    compute_ctx *c = &b->c;
    c->sh = sh;
    c->PL = gpt_layer_layout_of(sh).total;
    c->optim = gpt_optim_default();
    const size_t PE = gpt_embed_layout_of(sh).total;
    const struct { void **p; size_t bytes; } bufs[COMPUTE_BUFS] = {
        {&c->lp, LAYER_COPIES * gpt_act_bytes(c->PL, dt)}, {&c->ep, gpt_act_bytes(PE, dt)}, {&c->x_in, gpt_act_bytes(N * C, dt)},
        {&c->x_out, gpt_act_bytes(N * C, dt)}, {&c->dres, gpt_act_bytes(N * C, dt)},
        {&c->acts_base, gpt_layer_acts_bytes(sh, dt)}, {&c->scratch_base, gpt_layer_scratch_bytes(sh, dt)},
        {&c->head_base, gpt_head_acts_bytes(sh, dt)}, {(void **)&c->lg, LAYER_COPIES * c->PL * sizeof(float)},
        {(void **)&c->norm_out, sizeof(float)},
        {(void **)&c->eg, PE * sizeof(float)}, {(void **)&c->lm, c->PL * sizeof(float)},
        {(void **)&c->lv, c->PL * sizeof(float)}, {(void **)&c->master, c->PL * sizeof(float)},
        {(void **)&c->tokens, N * sizeof(int32_t)}, {(void **)&c->targets, N * sizeof(int32_t)},
    };
    if (be->ops->stream_create(be, &c->s)) {
        fprintf(stderr, "aebench: --calibrate: cannot create a stream\n");
        return EXIT_RUN_ERROR;
    }
    int rc_ = 0;
    for (b->n = 0; b->n < COMPUTE_BUFS && !rc_; b->n++) {
        b->ptr[b->n] = bufs[b->n].p;
        rc_ = be->ops->dev_alloc(be, bufs[b->n].p, bufs[b->n].bytes);
        if (!rc_) rc_ = gpt_stream_memset_zero(c->s, *bufs[b->n].p, bufs[b->n].bytes);
    }
    if (rc_) {
        fprintf(stderr, "aebench: --calibrate: the shape's buffers do not fit on the device (%s)\n",
                rc_ == GPT_ERR_OOM ? "out of memory" : "backend error");
        return EXIT_RUN_ERROR;
    }
    gpt_layer_acts_carve_as(&c->acts, c->acts_base, sh, dt);
    gpt_layer_scratch_carve_as(&c->scratch, c->scratch_base, sh, dt);
    gpt_head_acts_carve_as(&c->head, c->head_base, sh, dt);
    return 0;
}
static void compute_ctx_close(gpt_backend *be, compute_bufs *b)
{
    for (int i = b->n - 1; i >= 0; i--)
        if (*b->ptr[i]) be->ops->dev_free(be, *b->ptr[i]);
    if (b->c.s) be->ops->stream_destroy(b->c.s);
}

/* One micro-batch's pieces at rc's shape. */
static int measure_compute(const run_config *rc, gpt_backend *be, cJSON *entry)
{
    compute_bufs b;
    int bad = 0;
    if (compute_ctx_open(rc, be, &b) == 0) {
        compute_ctx *c = &b.c;
        const struct { const char *name; issue_fn fn; } parts[] = {
            {"embed_fwd_ms", run_embed_fwd}, {"layer_fwd_ms", run_layer_fwd}, {"layer_bwd_ms", run_layer_bwd},
            {"head_ms", run_head}, {"embed_bwd_ms", run_embed_bwd},
            {"layer_recompute_selective_ms", run_layer_recompute_selective},
        };
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            const int per_layer = parts[i].fn == run_layer_fwd || parts[i].fn == run_layer_bwd ||
                                  parts[i].fn == run_layer_recompute_selective;
            cJSON_AddNumberToObject(entry, parts[i].name,
                                    time_ms(c->s, parts[i].fn, c, &bad) / (per_layer ? LAYER_COPIES : 1));
        }
        cJSON_AddNumberToObject(entry, "gpu_adam_ms_per_mparam", time_ms(c->s, run_adam, c, &bad) / (c->PL / 1e6));
        if (bad) fprintf(stderr, "aebench: --calibrate: a timed op failed on the backend\n");
    } else {
        bad = 1;
    }
    compute_ctx_close(be, &b);
    return bad ? EXIT_RUN_ERROR : 0;
}

/* The median step (ms, the first left out) of megatron-lm with `layers` layers at rc's shape,
 * through the engine itself: what the pieces above miss (the step's own ops and waits). */
static int measure_step(const run_config *rc, gpt_backend *be, int layers, double *ms)
{
    enum { STEPS = 9 };
    engine_config cfg = rc->eng;
    cfg.shape.layers = layers;
    cfg.micro_batches = 1;
    cfg.world = cfg.local_world = 1;
    cfg.zero_stage = 0;
    dev_arena gpu;
    mem_budget host;
    size_t free_b = 0, total_b = 0;
    if (be->ops->dev_mem_info(be, &free_b, &total_b) != 0) return EXIT_RUN_ERROR;
    dev_arena_init(&gpu, be, free_b);
    mem_budget_init(&host, "host", SIZE_MAX);
    data_source data;
    const gpt_shape *sh = &cfg.shape;
    data_open_synthetic(&data, sh->vocab, sh->batch, sh->seq, cfg.seed);
    const size_t N = (size_t)sh->batch * sh->seq;
    int32_t *tokens = malloc(N * sizeof *tokens), *targets = malloc(N * sizeof *targets);
    engine_env env = {.cfg = &cfg, .be = be, .gpu = &gpu, .host = &host, .rank = 0, .world = 1};
    void *state = NULL;
    int rc_ = !tokens || !targets ? GPT_ERR_OOM : engine_megatron_lm.init(&env, &state);
    double t[STEPS];
    for (int it = 1; !rc_ && it <= STEPS; it++) {
        data_batch(&data, it, tokens, targets);
        step_result r;
        memset(&r, 0, sizeof r);
        const double t0 = wall_ms();
        rc_ = engine_megatron_lm.step(state, it, tokens, targets, &r);
        t[it - 1] = wall_ms() - t0;
    }
    if (state) engine_megatron_lm.free(state);
    free(tokens);
    free(targets);
    data_close(&data);
    if (rc_) {
        fprintf(stderr, "aebench: --calibrate: megatron-lm at l%d %s\n", layers,
                rc_ == GPT_ERR_OOM ? "does not fit" : "failed");
        return EXIT_RUN_ERROR;
    }
    *ms = median_of(t + 1, STEPS - 1); /* (the first step carries one-time costs) */
    return 0;
}

/* One direction of pinned copies on its stream, or both at once (the streams NULL where not). */
typedef struct copy_ctx {
    gpt_stream *h2d, *d2h;
    void *d_in, *h_in, *h_out, *d_out;
    size_t bytes;
} copy_ctx;
static int run_copies(void *p)
{
    const copy_ctx *c = p;
    return (c->h2d && gpt_memcpy_h2d(c->h2d, c->d_in, c->h_in, c->bytes)) ||
           (c->d2h && gpt_memcpy_d2h(c->d2h, c->h_out, c->d_out, c->bytes)) || (c->h2d && gpt_stream_sync(c->h2d)) ||
           (c->d2h && gpt_stream_sync(c->d2h));
}

/* The host Adam pool on one block, and a host copy of its size. */
typedef struct host_ctx {
    cpu_adam *pool;
    cpu_adam_job job;
} host_ctx;
static int run_host_adam(void *p)
{
    const host_ctx *h = p;
    return cpu_adam_run(h->pool, &h->job);
}
static int run_host_copy(void *p)
{
    const host_ctx *h = p;
    memcpy((void *)h->job.grads, h->job.params, h->job.n * sizeof(float));
    return 0;
}

/* The offload engines' steady state: both copy directions and the host Adam at once, all
 * three drawing on host memory's bandwidth (on the H100 machine each is about 1.4x slower
 * than alone, which is what predictions from the separate rates missed).  `copies` goes
 * in flight on its two streams, `reps` host Adam runs meanwhile; the Adam's wall time and
 * each direction's (events) give the rates under load (of REPS rounds, as host_ms). */
static int measure_busy(gpt_backend *be, const copy_ctx *c, const host_ctx *h, int copies, int reps, int gpu,
                        double *h2d_gbs, double *d2h_gbs, double *adam_ms_per_mparam)
{
    gpt_event *ev[4] = {NULL, NULL, NULL, NULL};
    int bad = 0;
    for (int i = 0; i < 4; i++) bad |= gpt_event_create(be, &ev[i]) != 0;
    double in[REPS], out[REPS], adam[REPS];
    for (int r = 0; r < REPS && !bad; r++) {
        bad |= gpt_event_record(ev[0], c->h2d) || gpt_event_record(ev[1], c->d2h);
        for (int k = 0; k < copies && !bad; k++)
            bad |= gpt_memcpy_h2d(c->h2d, c->d_in, c->h_in, c->bytes) || gpt_memcpy_d2h(c->d2h, c->h_out, c->d_out, c->bytes);
        bad |= gpt_event_record(ev[2], c->h2d) || gpt_event_record(ev[3], c->d2h);
        const double t0 = wall_ms();
        for (int k = 0; k < reps && !bad; k++) bad |= run_host_adam((void *)h) != 0;
        adam[r] = (wall_ms() - t0) / reps;
        float ms_in = 0, ms_out = 0;
        bad |= gpt_stream_sync(c->h2d) || gpt_stream_sync(c->d2h) || gpt_event_elapsed_ms(&ms_in, ev[0], ev[2]) ||
               gpt_event_elapsed_ms(&ms_out, ev[1], ev[3]);
        in[r] = ms_in, out[r] = ms_out;
    }
    for (int i = 0; i < 4; i++) gpt_event_destroy(ev[i]);
    if (bad) return -1;
    *h2d_gbs = (double)copies * c->bytes / (host_rate_of(in, gpu) * 1e6);
    *d2h_gbs = (double)copies * c->bytes / (host_rate_of(out, gpu) * 1e6);
    *adam_ms_per_mparam = host_rate_of(adam, gpu) / (h->job.n / 1e6);
    return 0;
}

/* Every rank of the job here before the next measurement (none: nothing to wait for); 1 if
 * the barrier failed. */
static int in_step(const comm_world *ranks)
{
    return ranks && comm_barrier(ranks) != 0;
}

/* Whether any rank of the job failed so far (`bad`: this one): every rank calls it at the
 * same point, so that either all go on to the barriers and collectives that follow or none
 * does (one rank out of memory would otherwise leave the others waiting for it). */
static int any_failed(const comm_world *ranks, int bad)
{
    if (!ranks) return bad;
    int any = 1;
    return comm_max_int(ranks, bad != 0, &any) != 0 || any;
}

/* Pinned copies each way, and both ways at once on two streams; the host Adam pool with the
 * run's threads; host copies; and all of them at once (measure_busy).  With `ranks` (not
 * NULL), every rank of the job measures at once, each its own GPU's copies and its own pool,
 * in step (a barrier before each measurement): the rates one rank gets while the others
 * share the machine's host memory and cores. */
static int measure_rates(const run_config *rc, gpt_backend *be, cJSON *rates, const comm_world *ranks)
{
    const int gpu = rc->eng.device == DEVICE_CUDA;
    const size_t bytes = (size_t)(gpu ? 256 : 32) << 20;
    /* the host Adam on a block of a layer's size (64 M parameters, 1 GiB of p, g, m, v: out of
     * every cache, as a streamed layer is); 16 M on the CPU backend */
    const size_t n = (size_t)(gpu ? 64 : 16) << 20;
    void *h1 = NULL, *h2 = NULL, *d1 = NULL, *d2 = NULL;
    float *p = NULL, *g = NULL, *m = NULL, *v = NULL;
    uint16_t *w = NULL;
    gpt_stream *s1 = NULL, *s2 = NULL;
    cpu_adam *pool = NULL;
    int bad = be->ops->stream_create(be, &s1) || be->ops->stream_create(be, &s2) ||
              gpt_host_alloc_pinned(be, &h1, bytes) || gpt_host_alloc_pinned(be, &h2, bytes) ||
              be->ops->dev_alloc(be, &d1, bytes) || be->ops->dev_alloc(be, &d2, bytes) ||
              host_pages_alloc_zeroed((void **)&p, n * sizeof *p) || host_pages_alloc_zeroed((void **)&g, n * sizeof *g) ||
              host_pages_alloc_zeroed((void **)&m, n * sizeof *m) || host_pages_alloc_zeroed((void **)&v, n * sizeof *v) ||
              host_pages_alloc_zeroed((void **)&w, n * sizeof *w) ||
              cpu_adam_create(&pool, rc->eng.threads);
    bad = any_failed(ranks, bad);
    double h2d = 0, d2h = 0, both = 0, adam = 0, adam_bf16 = 0, copy = 0, busy_h2d = 0, busy_d2h = 0, busy_adam = 0;
    if (!bad) {
        copy_ctx in = {s1, NULL, d1, h1, NULL, NULL, bytes}, out = {NULL, s1, NULL, NULL, h2, d2, bytes};
        copy_ctx both_ways = {s1, s2, d1, h1, h2, d2, bytes};
        /* each way moves `bytes` in its time; both ways at once, each way moves `bytes` too */
        bad |= in_step(ranks);
        const double both_ms = host_ms(run_copies, &both_ways, &bad, gpu);
        bad |= in_step(ranks);
        h2d = bytes / (host_ms(run_copies, &in, &bad, gpu) * 1e6);
        bad |= in_step(ranks);
        d2h = bytes / (host_ms(run_copies, &out, &bad, gpu) * 1e6);
        both = bytes / (both_ms * 1e6);
        host_ctx h = {pool, {.params = p, .grads = g, .m = m, .v = v, .n = n, .n_decay = n / 2,
                             .optim = gpt_optim_default(), .lr = 1e-4f, .t = 1, .grad_scale = 1.0f}};
        bad |= in_step(ranks);
        const double adam_ms = host_ms(run_host_adam, &h, &bad, gpu);
        adam = adam_ms / (n / 1e6);
        /* the bf16 engines' update: the same, writing the bf16 working copy too (30 B per
         * parameter, not 28) */
        if (w) {
            host_ctx hw = h;
            hw.job.params_bf16 = w;
            bad |= in_step(ranks);
            adam_bf16 = host_ms(run_host_adam, &hw, &bad, gpu) / (n / 1e6);
        }
        bad |= in_step(ranks);
        copy = n * sizeof *p / (host_ms(run_host_copy, &h, &bad, gpu) * 1e6);
        /* as many copies each way as three Adam runs take alone, so the two overlap */
        enum { BUSY_ADAM_RUNS = 3 };
        const int copies = both_ms > 0 ? (int)(BUSY_ADAM_RUNS * adam_ms / both_ms + 0.5) : 1;
        bad |= in_step(ranks);
        if (!bad)
            bad |= measure_busy(be, &both_ways, &h, copies > 0 ? copies : 1, BUSY_ADAM_RUNS, gpu, &busy_h2d,
                                &busy_d2h, &busy_adam) != 0;
    }
    const int threads = pool ? cpu_adam_threads(pool) : 0;
    if (pool) cpu_adam_destroy(pool);
    free(p);
    free(g);
    free(m);
    free(v);
    free(w);
    if (d2) be->ops->dev_free(be, d2);
    if (d1) be->ops->dev_free(be, d1);
    if (h2) gpt_host_free_pinned(be, h2);
    if (h1) gpt_host_free_pinned(be, h1);
    if (s2) be->ops->stream_destroy(s2);
    if (s1) be->ops->stream_destroy(s1);
    if (bad) {
        fprintf(stderr, "aebench: --calibrate: the copy and host Adam measurement failed\n");
        return EXIT_RUN_ERROR;
    }
    cJSON_AddNumberToObject(rates, "h2d_gbs", h2d);
    cJSON_AddNumberToObject(rates, "d2h_gbs", d2h);
    cJSON_AddNumberToObject(rates, "both_h2d_gbs", both);
    cJSON_AddNumberToObject(rates, "both_d2h_gbs", both);
    cJSON_AddNumberToObject(rates, "host_adam_ms_per_mparam", adam);
    cJSON_AddNumberToObject(rates, "host_adam_bf16_ms_per_mparam", adam_bf16);
    cJSON_AddNumberToObject(rates, "host_threads", threads);
    cJSON_AddNumberToObject(rates, "busy_h2d_gbs", busy_h2d);
    cJSON_AddNumberToObject(rates, "busy_d2h_gbs", busy_d2h);
    cJSON_AddNumberToObject(rates, "busy_host_adam_ms_per_mparam", busy_adam);
    cJSON_AddNumberToObject(rates, "host_copy_gbs", copy);
    /* the memory a run could plan with: the device's free memory and 90% of the host's
     * available memory (the run's defaults, run_resolve_budgets) */
    size_t gfree = 0, gtotal = 0, havail = 0;
    if (be->ops->dev_mem_info(be, &gfree, &gtotal) != 0 || gpt_host_mem_info(&havail, NULL) != 0) {
        fprintf(stderr, "aebench: --calibrate: cannot read the free memory\n");
        return EXIT_RUN_ERROR;
    }
    cJSON_AddNumberToObject(rates, "gpu_bytes", (double)gfree);
    cJSON_AddNumberToObject(rates, "host_bytes", (double)(havail / 10 * 9));
    return 0;
}

/* ---- the disk tier (--offload nvme) ----------------------------------------------------- */

/* One pass over `bytes` at `off` of the tier in pieces, several in flight (as the engines'
 * jobs queue theirs), writing or reading. */
typedef struct disk_ctx {
    disk_tier *t;
    uint64_t off;
    char *buf;
    size_t bytes, piece;
    int write;
} disk_ctx;
static int run_disk(void *p)
{
    const disk_ctx *d = p;
    uint64_t ticket = 0;
    int rc = GPT_OK;
    for (size_t at = 0; !rc && at < d->bytes; at += d->piece)
        rc = d->write ? disk_tier_write(d->t, d->off + at, d->buf + at, d->piece, NULL, &ticket)
                      : disk_tier_read(d->t, d->off + at, d->buf + at, d->piece, &ticket);
    return rc ? rc : disk_tier_wait(d->t, ticket);
}

/* The disk tier at --nvme-dir, each way: a block the size of a large layer's m and v (1 GiB;
 * 64 MiB on the CPU backend) in 8 MiB requests, into entry. */
static int measure_disk(const run_config *rc, gpt_backend *be, cJSON *entry)
{
    (void)be; /* (the tier's I/O threads read and write host memory) */
    const int gpu = rc->eng.device == DEVICE_CUDA;
    const size_t bytes = (size_t)(gpu ? 1024 : 64) << 20, piece = (size_t)8 << 20;
    disk_tier *t = NULL;
    char *buf = NULL;
    uint64_t off = 0;
    int bad = disk_tier_open(&t, rc->eng.nvme_dir, NULL, 0) != 0 ||
              disk_tier_reserve(t, bytes, "--calibrate's disk block", &off) != 0 ||
              host_pages_alloc_zeroed((void **)&buf, bytes) != 0;
    double wr = 0, rd = 0;
    if (!bad) {
        disk_ctx w = {t, off, buf, bytes, piece, 1}, r = {t, off, buf, bytes, piece, 0};
        wr = bytes / (host_ms(run_disk, &w, &bad, gpu) * 1e6);
        rd = bytes / (host_ms(run_disk, &r, &bad, gpu) * 1e6);
    }
    free(buf);
    disk_tier_close(t);
    if (bad) {
        fprintf(stderr, "aebench: --calibrate: the disk tier at --nvme-dir %s could not be measured\n", rc->eng.nvme_dir);
        return EXIT_RUN_ERROR;
    }
    cJSON_AddStringToObject(entry, "dir", rc->eng.nvme_dir);
    cJSON_AddNumberToObject(entry, "read_gbs", rd);
    cJSON_AddNumberToObject(entry, "write_gbs", wr);
    return 0;
}

/* The persistent checkpoint (--ckpt-dir) as an engine writes it: ckpt_file_write of a state
 * block (header, data, checksums, each synced: O_DIRECT), timed, then the file removed. */
typedef struct ckpt_write_ctx {
    const private_dir *dir;
    const float *data;
    size_t floats, chunk;
} ckpt_write_ctx;
static int run_ckpt_write(void *p)
{
    const ckpt_write_ctx *c = p;
    return ckpt_file_write(c->dir, 0, 0, 0, 1, 1, c->data, c->floats, c->chunk);
}
/* What the persistent checkpoint does first (but after a naive checkpoint, which did it): the
 * state's checksums on the device and its copy home, on one stream. */
typedef struct ckpt_home_ctx {
    gpt_stream *s;
    uint64_t *sums;
    const float *dev;
    void *host;
    size_t floats, chunk;
} ckpt_home_ctx;
static int run_ckpt_home(void *p)
{
    const ckpt_home_ctx *c = p;
    const gpt_float_span part = {c->dev, c->floats};
    gpt_checksum_chunks(c->s, c->sums, &part, 1, c->chunk);
    return gpt_memcpy_d2h(c->s, c->host, c->dev, c->floats * sizeof(float)) || gpt_stream_sync(c->s);
}
static int measure_ckpt_home(const run_config *rc, gpt_backend *be, size_t bytes, size_t chunk, double *gbs)
{
    const int gpu = rc->eng.device == DEVICE_CUDA;
    gpt_stream *s = NULL;
    float *dev = NULL;
    uint64_t *sums = NULL;
    void *host = NULL;
    const size_t floats = bytes / sizeof(float), nchunks = (floats + chunk - 1) / chunk;
    int bad = be->ops->stream_create(be, &s) || be->ops->dev_alloc(be, (void **)&dev, bytes) ||
              be->ops->dev_alloc(be, (void **)&sums, nchunks * sizeof(uint64_t)) ||
              gpt_host_alloc_pinned(be, &host, bytes) || gpt_stream_memset_zero(s, dev, bytes);
    if (!bad) {
        ckpt_home_ctx c = {s, sums, dev, host, floats, chunk};
        *gbs = bytes / (host_ms(run_ckpt_home, &c, &bad, gpu) * 1e6);
    }
    if (host) gpt_host_free_pinned(be, host);
    if (sums) be->ops->dev_free(be, sums);
    if (dev) be->ops->dev_free(be, dev);
    if (s) be->ops->stream_destroy(s);
    return bad;
}

/* With `ranks` (not NULL), every rank of the job measures at once, in step, each writing its
 * own file: what one rank gets while the others write to the machine's disk too. */
static int measure_ckpt_dir_ranks(const run_config *rc, gpt_backend *be, cJSON *entry, const comm_world *ranks)
{
    /* two sizes, so that the fixed cost (open, three syncs) and the rate come apart:
     * t = latency + bytes / rate.  The large one 4 GiB on a GPU machine and the median of
     * the writes after a first: the rate a checkpoint of several GB sustains.  (1 GiB and
     * the fastest of five measured 3.1-3.7 GB/s per rank on the H100 machines' virtual disk,
     * whose cache takes such bursts, while the run's 5.5 GB per rank went at 1.2: 2026-11-25.) */
    const int gpu = rc->eng.device == DEVICE_CUDA;
    const size_t large = (size_t)(gpu ? 4096 : 64) << 20, small = large / 16;
    char job[64];
    ckpt_job_id(job, sizeof job, 'c');
    float *data = NULL;
    private_dir dir;
    private_dir_init(&dir);
    char why[1200] = "";
    int bad = any_failed(ranks, host_pages_alloc_zeroed((void **)&data, large) != 0 ||
                                    ckpt_dir_open(&dir, rc->eng.ckpt_dir, job, 0, why, sizeof why) != 0);
    if (why[0]) fprintf(stderr, "aebench: --calibrate: --ckpt-dir: %s\n", why);
    double wr = 0, lat = 0, home = 0;
    if (!bad) {
        /* (chunks of 64 MiB, as the engine's; zeros: the time does not depend on the values) */
        const size_t chunk = ((size_t)64 << 20) / sizeof(float);
        ckpt_write_ctx cs = {&dir, data, small / sizeof(float), chunk},
                       cl = {&dir, data, large / sizeof(float), chunk};
        bad |= in_step(ranks);
        const double a = median_ms(run_ckpt_write, &cs, &bad);
        bad |= in_step(ranks);
        const double b = median_ms(run_ckpt_write, &cl, &bad);
        fit_latency_rate((double)small, (double)large, a, b, &lat, &wr);
        ckpt_file_remove(&dir, 0);
        bad |= in_step(ranks);
        bad |= measure_ckpt_home(rc, be, large, chunk, &home);
    }
    if (dir.fd >= 0) ckpt_file_remove(&dir, 0); /* (a rank that failed before its writes) */
    free(data);
    if (bad) {
        fprintf(stderr, "aebench: --calibrate: the persistent checkpoint at --ckpt-dir %s could not be measured\n",
                rc->eng.ckpt_dir);
        return EXIT_RUN_ERROR;
    }
    cJSON_AddStringToObject(entry, "dir", rc->eng.ckpt_dir);
    cJSON_AddNumberToObject(entry, "write_ms", lat);
    cJSON_AddNumberToObject(entry, "write_gbs", wr);
    cJSON_AddNumberToObject(entry, "home_gbs", home);
    if (!ranks || ranks->rank == 0)
        printf("calibrate: the persistent checkpoint at %s%s: the state home (checksums, copy) at %.2f GB/s, then "
               "written in %.2f ms + %.2f GB/s\n", rc->eng.ckpt_dir, ranks ? ", every rank at once, each" : "", home,
               lat, wr);
    return 0;
}
static int measure_ckpt_dir(const run_config *rc, gpt_backend *be, cJSON *entry)
{
    return measure_ckpt_dir_ranks(rc, be, entry, NULL);
}

/* Whether --calibrate measures the persistent checkpoint at --ckpt-dir: given, and the run's
 * engine writes one there (engine_vtbl.persistent_ckpt; -m all: none). */
static int calibrates_ckpt_dir(const run_config *rc)
{
    const engine_vtbl *eng = rc->eng.ckpt_dir[0] ? engine_find(rc->method) : NULL;
    return eng && eng->persistent_ckpt;
}

/* root's array `name`, made (in place of anything else there) when it is not one. */
static cJSON *array_in(cJSON *root, const char *name)
{
    cJSON *list = cJSON_GetObjectItemCaseSensitive(root, name);
    if (cJSON_IsArray(list)) return list;
    cJSON_DeleteItemFromObjectCaseSensitive(root, name);
    return cJSON_AddArrayToObject(root, name);
}

/* Every rate of RATE_FIELDS there (a file from before a rate was added is measured anew). */
static int has_every_rate(const cJSON *rates)
{
    for (int i = 0; i < NRATE_FIELDS; i++)
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rates, RATE_FIELDS[i]))) return 0;
    return 1;
}

static int fresh(const cJSON *o, time_t now)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "measured");
    return cJSON_IsNumber(t) && now - (time_t)t->valuedouble < (time_t)MACHINE_FRESH_DAYS * 86400;
}

/* The entry for directory `dir` in root's array `list`: kept when fresh, else measured
 * (`measure` fills a new entry, which replaces the old one; *measured set). */
typedef int (*dir_measure_fn)(const run_config *rc, gpt_backend *be, cJSON *entry);
static int calibrate_dir(cJSON *root, const char *list, const char *what, const char *dir, dir_measure_fn measure,
                         const run_config *rc, gpt_backend *be, time_t now, int *measured)
{
    cJSON *entries = array_in(root, list);
    int where = -1, i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, entries) {
        if (entry_of_dir(d, dir)) where = i;
        i++;
    }
    if (where >= 0 && fresh(cJSON_GetArrayItem(entries, where), now)) {
        printf("calibrate: %s at %s is fresh: kept\n", what, dir);
        return 0;
    }
    printf("calibrate: %s at %s ...\n", what, dir);
    fflush(stdout);
    cJSON *entry = cJSON_CreateObject();
    if (!entry) return EXIT_RUN_ERROR;
    cJSON_AddNumberToObject(entry, "measured", (double)now);
    const int code = measure(rc, be, entry);
    if (code) {
        cJSON_Delete(entry);
        return code;
    }
    if (where >= 0) cJSON_DeleteItemFromArray(entries, where);
    cJSON_AddItemToArray(entries, entry);
    *measured = 1;
    return 0;
}

int machine_calibrate(const run_config *rc, gpt_backend *be, const char *path)
{
    const time_t now = time(NULL);
    char err[600] = "";
    cJSON *root = NULL;
    if (access(path, F_OK) == 0) {
        root = read_json(path, err, sizeof err);
        if (root && version_refused(root, path, err, sizeof err)) {
            cJSON_Delete(root);
            root = NULL;
        }
        if (!root) {
            fprintf(stderr, "aebench: %s (move it away to calibrate anew)\n", err);
            return EXIT_BAD_INPUT;
        }
    } else {
        root = cJSON_CreateObject();
    }
    char desc[320] = "", host[64] = "";
    be->ops->describe(be, desc, sizeof desc);
    if (gethostname(host, sizeof host) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    cJSON_DeleteItemFromObjectCaseSensitive(root, "aebench_machine");
    cJSON_AddNumberToObject(root, "aebench_machine", MACHINE_FORMAT);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "host");
    cJSON_AddStringToObject(root, "host", host);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "device");
    cJSON_AddStringToObject(root, "device", desc);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "backend");
    cJSON_AddStringToObject(root, "backend", rc->eng.device == DEVICE_CUDA ? "cuda" : "cpu");
    int code = 0, measured = 0;
    const cJSON *rates_old = cJSON_GetObjectItemCaseSensitive(root, "rates");
    if (rates_old && fresh(rates_old, now) && has_every_rate(rates_old)) {
        printf("calibrate: the machine's rates in %s are fresh (under %d days): kept\n", path, MACHINE_FRESH_DAYS);
    } else {
        cJSON *rates = cJSON_CreateObject();
        printf("calibrate: copies, host Adam, host memory ...\n");
        fflush(stdout);
        code = measure_rates(rc, be, rates, NULL);
        measured = 1;
        cJSON_AddNumberToObject(rates, "measured", (double)now);
        cJSON_DeleteItemFromObjectCaseSensitive(root, "rates");
        cJSON_AddItemToObject(root, "rates", rates);
    }
    cJSON *list = array_in(root, "compute");
    const gpt_shape *sh = &rc->eng.shape;
    int at = 0, found = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if (same_entry(e, &rc->eng, rc->eng.device == DEVICE_CPU ? "cpu" : "cuda")) found = at;
        at++;
    }
    if (!code && found >= 0 && fresh(cJSON_GetArrayItem(list, found), now)) {
        printf("calibrate: the entry for h%d heads%d s%d b%d vocab%d %s %s is fresh: kept\n", sh->hidden,
               sh->heads, sh->seq, sh->batch, sh->vocab, math_of(&rc->eng), dtype_of(&rc->eng));
    } else if (!code) {
        printf("calibrate: one layer, the embedding, the head and AdamW at h%d heads%d s%d b%d vocab%d %s %s ...\n",
               sh->hidden, sh->heads, sh->seq, sh->batch, sh->vocab, math_of(&rc->eng), dtype_of(&rc->eng));
        fflush(stdout);
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddNumberToObject(entry, "hidden", sh->hidden);
        cJSON_AddNumberToObject(entry, "heads", sh->heads);
        cJSON_AddNumberToObject(entry, "seq", sh->seq);
        cJSON_AddNumberToObject(entry, "batch", sh->batch);
        cJSON_AddNumberToObject(entry, "vocab", sh->vocab);
        cJSON_AddStringToObject(entry, "math", math_of(&rc->eng));
        cJSON_AddStringToObject(entry, "dtype", dtype_of(&rc->eng));
        cJSON_AddNumberToObject(entry, "measured", (double)now);
        code = measure_compute(rc, be, entry);
        measured = 1;
        /* l2 and l4 in turn, twice, the faster of each kept: a drift of the machine between
         * the two would otherwise go into the per-layer slope */
        double t2 = 0, t4 = 0;
        for (int rep = 0; rep < 2 && !code; rep++) {
            double a = 0, b = 0;
            if (!code) code = measure_step(rc, be, 2, &a);
            if (!code) code = measure_step(rc, be, 4, &b);
            if (!code) {
                t2 = rep == 0 || a < t2 ? a : t2;
                t4 = rep == 0 || b < t4 ? b : t4;
            }
        }
        if (!code) {
            /* the pieces against the engine's step, per layer (t4 - t2 over two layers) and for
             * the rest: the scales --predict applies to the pieces */
            const double num = cJSON_GetObjectItemCaseSensitive(entry, "layer_fwd_ms")->valuedouble +
                               cJSON_GetObjectItemCaseSensitive(entry, "layer_bwd_ms")->valuedouble,
                         adam = cJSON_GetObjectItemCaseSensitive(entry, "gpu_adam_ms_per_mparam")->valuedouble;
            const double PL = (double)gpt_layer_layout_of(sh).total, PE = (double)gpt_embed_layout_of(sh).total;
            const double per_layer = num + adam * PL / 1e6;
            const double rest = cJSON_GetObjectItemCaseSensitive(entry, "embed_fwd_ms")->valuedouble +
                                cJSON_GetObjectItemCaseSensitive(entry, "head_ms")->valuedouble +
                                cJSON_GetObjectItemCaseSensitive(entry, "embed_bwd_ms")->valuedouble + adam * PE / 1e6;
            const double layer_step = (t4 - t2) / 2, rest_step = t2 - 2 * layer_step;
            cJSON_AddNumberToObject(entry, "step_l2_ms", t2);
            cJSON_AddNumberToObject(entry, "step_l4_ms", t4);
            cJSON_AddNumberToObject(entry, "layer_scale", layer_step > 0 ? layer_step / per_layer : 1.0);
            cJSON_AddNumberToObject(entry, "rest_scale", rest_step > 0 ? rest_step / rest : 1.0);
        }
        if (!code) {
            if (found >= 0) cJSON_DeleteItemFromArray(list, found);
            cJSON_AddItemToArray(list, entry);
        } else {
            cJSON_Delete(entry);
        }
    }
    /* --offload nvme: the disk tier at --nvme-dir; --ckpt-dir of an engine that writes its
     * persistent checkpoint there (an entry per directory) */
    if (!code && rc->eng.offload == OFFLOAD_NVME)
        code = calibrate_dir(root, "disks", "the disk tier", rc->eng.nvme_dir, measure_disk, rc, be, now, &measured);
    if (!code && calibrates_ckpt_dir(rc))
        code = calibrate_dir(root, "checkpoint_dirs", "the persistent checkpoint", rc->eng.ckpt_dir, measure_ckpt_dir,
                             rc, be, now, &measured);
    if (!code && !measured) printf("calibrate: nothing to measure: %s kept as it is\n", path);
    if (!code && measured) code = write_file(root, path);
    cJSON_Delete(root);
    return code;
}

/* ---- the collectives (under mpirun) --------------------------------------------------------- */

/* One collective of n floats (kind 0 all-reduce, 1 reduce-scatter, 2 all-gather) on g's
 * stream, until it is done; every rank calls it the same way. */
typedef struct coll_ctx {
    coll_group *g;
    float *buf;
    size_t n;
    int kind;
} coll_ctx;
static int run_collective(void *p)
{
    const coll_ctx *c = p;
    const int world = coll_world(c->g), r = coll_rank(c->g);
    const size_t part = c->n / world;
    const int rc = c->kind == 0   ? coll_all_reduce_sum(c->g, c->buf, c->n)
                   : c->kind == 1 ? coll_reduce_scatter_sum(c->g, c->buf + (size_t)r * part, c->buf, part)
                                  : coll_all_gather(c->g, c->buf, c->buf + (size_t)r * part, part * sizeof(float));
    return rc ? rc : gpt_stream_sync(coll_stream(c->g));
}

/* A layer's backward (LAYER_COPIES of them, as measure_compute times it) with all-reduces of
 * `coll->n` floats running beside it on the collectives' stream the whole time, against the
 * same backward alone: how much the collectives' kernels (SMs and memory bandwidth taken
 * from the compute) slow a data-parallel step's compute.  Every rank runs it in step.  The
 * ratio, at least 1; 0 on failure. */
static double measure_compute_under_coll(const run_config *rc, gpt_backend *be, const coll_ctx *coll,
                                         double ar_ms_each, const comm_world *comm)
{
    compute_bufs b;
    int bad = compute_ctx_open(rc, be, &b) != 0;
    double alone = 0, t[REPS];
    if (!bad) alone = time_ms(b.c.s, run_layer_bwd, &b.c, &bad);
    /* enough all-reduces queued to outlast the backward, slowed as it is (twice its time);
     * every rank must queue as many (the most any rank wants), or none if one cannot */
    bad = any_failed(comm, bad);
    const int want = ar_ms_each > 0 ? (int)(2 * alone / ar_ms_each) + 2 : 2;
    int k_coll = want;
    if (!bad && comm_max_int(comm, want, &k_coll) != 0) bad = 1;
    for (int r = 0; r < REPS && !bad; r++) {
        bad |= gpt_stream_sync(coll_stream(coll->g)) != 0;
        for (int k = 0; k < k_coll && !bad; k++)
            bad |= coll_all_reduce_sum(coll->g, coll->buf, coll->n) != 0;
        const double t0 = wall_ms();
        run_layer_bwd(&b.c);
        bad |= gpt_stream_sync(b.c.s) != 0;
        t[r] = wall_ms() - t0;
        bad |= gpt_stream_sync(coll_stream(coll->g)) != 0;
    }
    compute_ctx_close(be, &b);
    if (bad || alone <= 0) return 0;
    const double with = median_of(t, REPS);
    return with > alone ? with / alone : 1.0;
}

int machine_calibrate_collectives(const run_config *rc, gpt_backend *be, const char *path, const comm_world *comm)
{
    const int rank = comm->rank, world = comm->world;
    /* two sizes, so that latency and rate come apart: t = latency + bytes / rate */
    const size_t small = (size_t)world << 18, large = (size_t)world << (rc->eng.device == DEVICE_CPU ? 21 : 24);
    coll_group *g = NULL;
    float *buf = NULL;
    int bad = coll_open(&g, be, rank, world) || be->ops->dev_alloc(be, (void **)&buf, large * sizeof(float));
    if (!bad) bad = gpt_stream_memset_zero(coll_stream(g), buf, large * sizeof(float)) != 0;
    bad = any_failed(comm, bad);
    double lat[3] = {0}, gbs[3] = {0}, ar_large_ms = 0;
    for (int k = 0; k < 3 && !bad; k++) {
        coll_ctx cs = {g, buf, small, k}, cl = {g, buf, large, k};
        const double a = median_ms(run_collective, &cs, &bad), b = median_ms(run_collective, &cl, &bad);
        fit_latency_rate((double)small * sizeof(float), (double)large * sizeof(float), a, b, &lat[k], &gbs[k]);
        if (k == 0) ar_large_ms = b;
    }
    /* what the collectives cost the compute beside them, and the copy and host Adam rates
     * with every rank of the job at work at once */
    const coll_ctx all_reduce = {g, buf, large, 0};
    const double under = any_failed(comm, bad) ? 0 : measure_compute_under_coll(rc, be, &all_reduce, ar_large_ms, comm);
    if (buf) be->ops->dev_free(be, buf);
    coll_close(g);
    cJSON *shared = cJSON_CreateObject();
    if (any_failed(comm, !shared || under <= 0) || measure_rates(rc, be, shared, comm) != 0) {
        if (rank == 0) fprintf(stderr, "aebench: --calibrate: the collectives failed\n");
        cJSON_Delete(shared);
        return EXIT_RUN_ERROR;
    }
    /* --ckpt-dir: the persistent checkpoint with every rank writing at once (two H100s writing
     * to one disk got 0.94 GB/s each where one alone got 2.8) */
    cJSON *ckpt = NULL;
    if (calibrates_ckpt_dir(rc)) {
        ckpt = cJSON_CreateObject();
        if (any_failed(comm, !ckpt) || measure_ckpt_dir_ranks(rc, be, ckpt, comm) != 0) {
            cJSON_Delete(shared);
            cJSON_Delete(ckpt);
            return EXIT_RUN_ERROR;
        }
    }
    if (rank != 0) {
        cJSON_Delete(shared);
        cJSON_Delete(ckpt);
        return 0;
    }
    char err[600] = "";
    const int existed = access(path, F_OK) == 0;
    cJSON *root = existed ? read_json(path, err, sizeof err) : cJSON_CreateObject();
    if (root && existed && version_refused(root, path, err, sizeof err)) {
        cJSON_Delete(root);
        root = NULL;
    }
    if (root && !existed) cJSON_AddNumberToObject(root, "aebench_machine", MACHINE_FORMAT);
    if (!root) {
        fprintf(stderr, "aebench: %s\n", err);
        cJSON_Delete(shared);
        cJSON_Delete(ckpt);
        return EXIT_BAD_INPUT;
    }
    cJSON *list = array_in(root, "collectives");
    int at = 0, found = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *w_ = cJSON_GetObjectItemCaseSensitive(e, "world");
        if (cJSON_IsNumber(w_) && w_->valueint == world) found = at;
        at++;
    }
    if (found >= 0) cJSON_DeleteItemFromArray(list, found);
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(entry, "world", world);
    static const char *const names[] = {"all_reduce", "reduce_scatter", "all_gather"};
    for (int k = 0; k < 3; k++) {
        char key[40];
        snprintf(key, sizeof key, "%s_ms", names[k]);
        cJSON_AddNumberToObject(entry, key, lat[k]);
        snprintf(key, sizeof key, "%s_gbs", names[k]);
        cJSON_AddNumberToObject(entry, key, gbs[k]);
        printf("calibrate: %s among %d ranks: %.3f ms + %.2f GB/s\n", names[k], world, lat[k], gbs[k]);
    }
    cJSON_AddNumberToObject(entry, "compute_under_collectives", under);
    printf("calibrate: a layer's backward with all-reduces beside it: %.3fx its time alone\n", under);
    /* (the memory a run could plan with is the single-rank entry's) */
    cJSON_DeleteItemFromObject(shared, "gpu_bytes");
    cJSON_DeleteItemFromObject(shared, "host_bytes");
    cJSON_AddItemToObject(entry, "rates", shared);
    if (ckpt) {
        /* (one directory per world entry: the one calibrated last) */
        cJSON_AddNumberToObject(ckpt, "measured", (double)time(NULL));
        cJSON_AddItemToObject(entry, "checkpoint_dir", ckpt);
    }
    printf("calibrate: every rank at once, each: host->gpu %.1f GB/s, gpu->host %.1f GB/s, host Adam %.3f ms per M "
           "params (%d threads)\n", cJSON_GetObjectItem(shared, "h2d_gbs")->valuedouble,
           cJSON_GetObjectItem(shared, "d2h_gbs")->valuedouble,
           cJSON_GetObjectItem(shared, "host_adam_ms_per_mparam")->valuedouble,
           cJSON_GetObjectItem(shared, "host_threads")->valueint);
    cJSON_AddNumberToObject(entry, "measured", (double)time(NULL));
    cJSON_AddItemToArray(list, entry);
    const int code = write_file(root, path);
    cJSON_Delete(root);
    return code;
}

/* ---- predicting ------------------------------------------------------------------------------ */

static const char *const BUSY_NAMES[BUSY_KINDS] = {"compute", "h2d", "d2h", "host adam", "disk", "collectives"};

/* An engine's plan against the budgets at n layers (bisect_largest's test). */
typedef struct plan_test {
    const engine_vtbl *eng;
    engine_config cfg; /* with the budgets */
} plan_test;
static int plan_fits_at(int layers, void *ctx)
{
    plan_test *t = ctx;
    t->cfg.shape.layers = layers;
    engine_plan plan = {0};
    t->eng->plan(&t->cfg, &plan);
    return plan.gpu_bytes <= t->cfg.gpu_budget && plan.host_bytes <= t->cfg.host_budget;
}

/* --find-max --predict: the largest layer count whose plan fits the budgets (the plans are
 * monotone in the layers), and the prediction there. */
static int largest_fitting(const engine_vtbl *eng, const engine_config *base, size_t gpu_budget, size_t host_budget)
{
    plan_test t = {eng, *base};
    t.cfg.gpu_budget = gpu_budget;
    t.cfg.host_budget = host_budget;
    return bisect_largest(1, 1 << 20, plan_fits_at, &t);
}

/* pred_walk_fn of an engine's predict function (ctx: its vtbl) */
static void walk_engine(const engine_config *cfg, const machine_rates *m, const void *ctx, engine_prediction *out)
{
    ((const engine_vtbl *)ctx)->predict(cfg, m, out);
}

void machine_budgets(const run_config *rc, const machine_rates *m, int local, int shared_device, size_t *gpu,
                     size_t *host)
{
    const size_t n = local > 1 ? (size_t)local : 1;
    *gpu = rc->gpu_mem_limit ? rc->gpu_mem_limit : (size_t)m->gpu_bytes / (shared_device ? n : 1);
    *host = (rc->cpu_mem_limit ? rc->cpu_mem_limit : (size_t)m->host_bytes) / n;
}

int machine_predict(const run_config *rc, const machine_rates *m, size_t gpu_budget, size_t host_budget)
{
    const engine_vtbl *only = strcmp(rc->method, "all") == 0 ? NULL : engine_find(rc->method);
    const double t0 = wall_ms();
    int any = 0;
    for (int i = 0; i < engine_count(); i++) {
        const engine_vtbl *eng = engine_at(i);
        if (only ? eng != only : eng->not_in_all) continue;
        /* (the budgets the engines' plans see, as a run's do: -w auto sizes its window under
         * the GPU's, --clip-speculate auto its second copies under the host's) */
        engine_config cfg = rc->eng;
        cfg.gpu_budget = gpu_budget;
        cfg.host_budget = host_budget;
        if (rc->find_max) {
            cfg.shape.layers = largest_fitting(eng, &rc->eng, gpu_budget, host_budget);
            if (cfg.shape.layers == 0) {
                printf("predict %-14s not even one layer fits\n", eng->name);
                continue;
            }
            printf("find-max %-13s l%d (%.3f B parameters) fits, l%d does not\n", eng->name, cfg.shape.layers,
                   (double)gpt_param_count(&cfg.shape) / 1e9, cfg.shape.layers + 1);
        }
        engine_prediction p;
        memset(&p, 0, sizeof p);
        if (eng->predict) pred_settle(&cfg, m, walk_engine, eng, &p);
        engine_plan plan = {0};
        eng->plan(&cfg, &plan);
        char g[32], h[32];
        format_bytes((double)plan.gpu_bytes, g, sizeof g);
        format_bytes((double)plan.host_bytes, h, sizeof h);
        const int fits = plan.gpu_bytes <= gpu_budget && plan.host_bytes <= host_budget;
        if (!p.modelled) {
            printf("predict %-14s not modelled yet%s%s | plan GPU %s, host %s: %s\n", eng->name, p.why[0] ? ": " : "",
                   p.why, g, h, fits ? "fits" : "does not fit");
            continue;
        }
        if (!isfinite(p.ms) || !(p.ms > 0)) {
            /* (the fields' bounds keep this from happening; a prediction is never printed as inf) */
            fprintf(stderr, "aebench: machine file: %s's prediction from its values is %g ms/it, not a time\n",
                    eng->name, p.ms);
            return EXIT_BAD_INPUT;
        }
        any = 1;
        const int B = rc->eng.shape.batch * engine_micro_batches(&rc->eng) * engine_world(&rc->eng);
        printf("predict %-14s %8.1f ms/it | %7.2f samples/s | bound: %s |", eng->name, p.ms, B * 1000.0 / p.ms,
               BUSY_NAMES[p.bound]);
        for (int k = 0; k < BUSY_KINDS; k++)
            if (p.busy_ms[k] > 0) printf(" %s %.1f", BUSY_NAMES[k], p.busy_ms[k]);
        /* the step's bounds from those busy times (bound.h), as a run prints them */
        printf(" | roofline %.1f", bound_roofline_ms(p.busy_ms));
        if (bound_has_schedule(eng, &cfg))
            printf(" | %s %.1f", bound_schedule_name(eng, &cfg), bound_schedule_ms(eng, &cfg, p.busy_ms));
        printf(" | plan GPU %s, host %s: %s\n", g, h, fits ? "fits" : "does not fit");
    }
    printf("predicted in %.1f ms\n", wall_ms() - t0);
    return any || only ? 0 : EXIT_RUN_ERROR;
}
