/*
 * machine_file.c — the machine file: its JSON read and checked for a prediction
 * (machine_load), its default name, and the pieces --calibrate writes it with
 * (machine_file.h).  Its own file because what the file holds and how strictly it is read
 * (every field bounded, the format's version checked) is one question, apart from how the
 * rates in it are measured (calibrate*.c) and what --predict makes of them (machine.c).
 */
#include "machine.h"
#include "machine_file.h"

#include "exit_codes.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the file ------------------------------------------------------------------------------
 * { "aebench_machine": 1, "host": ..., "device": ..., "backend": "cuda"|"cpu",
 *   "rates": { "h2d_gbs", "d2h_gbs", "both_h2d_gbs", "both_d2h_gbs", "host_adam_ms_per_mparam",
 *              "host_adam_bf16_ms_per_mparam" (optional: the update writing the bf16 copy too),
 *              "host_threads", "host_copy_gbs", "gpu_bytes", "host_bytes",
 *              "busy_h2d_gbs", "busy_d2h_gbs", "busy_host_adam_ms_per_mparam",
 *              "adam_h2d_gbs", "adam_d2h_gbs", "host_adam_h2d_ms_per_mparam",
 *              "host_adam_d2h_ms_per_mparam" (the pairs: PAIR_FIELDS), "host_adam_region_mparams"
 *              (the parameters the host Adam was swept over: a run's shard, on a GPU machine;
 *              optional: files from before it), "host_adam_block_ms_per_mparam" and
 *              "host_adam_bf16_block_ms_per_mparam" (the update on one block timed again and
 *              again, as files from before the region measured it: a record, not read),
 *              "host_adam_under_compute" (the host Adam beside a layer's backward over alone, at
 *              least 1; optional: files from before it), "up2_h2d_gbs" (two host-to-GPU
 *              copies at once on two copy engines, together; optional: files from before it),
 *              "samples_ms" (a record, not read: { "copy_bytes", "host_adam_mparams",
 *              "busy_copies": each call's work, "repetition_ms": how long a repetition ran at
 *              least, and for each rate its
 *              repetitions' ms a call (the host Adam alone and beside the compute: a
 *              repetition's busy ms), every rank's: [[rank 0's], ...] }),
 *              "measured" },
 *   "compute": [ { "hidden", "heads", "seq", "batch", "vocab", "math", "dtype", "measured",
 *                  "embed_fwd_ms", "layer_fwd_ms", "layer_bwd_ms", "head_ms", "embed_bwd_ms",
 *                  "gpu_adam_ms_per_mparam", "layer_recompute_selective_ms" (optional: files
 *                  from before --recompute selective), "layer_bwd_none_ms" (optional: files
 *                  from before it), "tp" (optional: [ { "t", "layer_fwd_ms", "layer_bwd_ms",
 *                  "layer_bwd_none_ms" (optional) }, ... ], the layer split over T ranks, a
 *                  rank's share) }, ... ],
 *   "disks": [ { "dir", "read_gbs", "write_gbs", "measured" }, ... ] (--offload nvme's tier),
 *   "checkpoint_dirs": [ { "dir", "home_gbs", "write_ms", "write_gbs", "measured" }, ... ]
 *                      (--ckpt-dir's persistent checkpoint: the state's checksums and copy home,
 *                      then its file),
 *   "collectives": [ { "world", "all_reduce_ms", "all_reduce_gbs", "reduce_scatter_ms",
 *                      "reduce_scatter_gbs", "all_gather_ms", "all_gather_gbs",
 *                      "compute_under_collectives", "compute_under_sharded_collectives",
 *                      "all_reduce_under_compute", "reduce_scatter_under_compute",
 *                      "all_gather_under_compute", "compute_under_two_collective_streams",
 *                      "compute_beside_at": [ { "batch", the three compute_under_* at that
 *                      micro-batch }, ... ] (optional: files from before them), "rates":
 *                      { as above, one rank's with every rank at work }, "checkpoint_dir": { as
 *                      checkpoint_dirs[], every rank writing }, "measured" }, ... ] (--calibrate
 *                      under mpirun) }
 * "measured" is the Unix time of the measurement. */

/* The rates a prediction reads, the machine's memory last.  A world entry's "rates" have all
 * but the memory (RANK_RATES: one rank's, with every rank at work). */
static const char *const RATE_FIELDS[] = {"h2d_gbs", "d2h_gbs", "host_adam_ms_per_mparam", "host_threads",
                                          "host_copy_gbs", "busy_h2d_gbs", "busy_d2h_gbs",
                                          "busy_host_adam_ms_per_mparam", "gpu_bytes", "host_bytes"};
enum { NRATE_FIELDS = sizeof RATE_FIELDS / sizeof RATE_FIELDS[0], RANK_RATES = NRATE_FIELDS - 2 };
/* Two host-memory users at once (predict.h's pred_contended_ms): optional in a file (older ones
 * have none: a prediction then takes each pair halfway between alone and all three), but a
 * fresh file without them is calibrated again (machine_file_has_every_rate). */
static const char *const PAIR_FIELDS[] = {"both_h2d_gbs", "both_d2h_gbs", "adam_h2d_gbs", "adam_d2h_gbs",
                                          "host_adam_h2d_ms_per_mparam", "host_adam_d2h_ms_per_mparam"};
enum { NPAIR_FIELDS = sizeof PAIR_FIELDS / sizeof PAIR_FIELDS[0] };
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
const char *machine_file_math_of(const engine_config *c)
{
    return math_of_backend(c, c->device == DEVICE_CPU ? "cpu" : "cuda");
}
const char *machine_file_dtype_of(const engine_config *c) { return c->bf16 ? "bf16" : "fp32"; }

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

cJSON *machine_file_read_json(const char *path, char *err, size_t errlen)
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

/* A field as field() reads it, and at least at_least (0: any positive number). */
static int field_at_least(const cJSON *o, const char *where, const char *name, const char *path, double *out,
                          double at_least, char *err, size_t errlen)
{
    if (field(o, where, name, path, out, err, errlen)) return -1;
    if (*out >= at_least) return 0;
    snprintf(err, errlen, "machine file %s: %s.%s is %g (at least %g)", path, where, name, *out, at_least);
    return -1;
}

/* An optional field (a file from before it was measured has none): absent, 0 and *out as it
 * was; present, as field_at_least reads it. */
static int optional_field(const cJSON *o, const char *where, const char *name, const char *path, double *out,
                          double at_least, char *err, size_t errlen)
{
    if (!cJSON_GetObjectItemCaseSensitive(o, name)) return 0;
    return field_at_least(o, where, name, path, out, at_least, err, errlen);
}

int machine_file_same_entry(const cJSON *e, const engine_config *c, const char *backend)
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
           strcmp(dtype->valuestring, machine_file_dtype_of(c)) == 0;
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
        if (machine_file_same_entry(e, c, backend_of(root))) return e;
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
    /* the pairs, each 0 where o has none (never another object's: a world entry's rates are
     * all measured with every rank at work, or not at all) */
    double pair[NPAIR_FIELDS] = {0};
    for (int i = 0; i < NPAIR_FIELDS; i++)
        if (optional_field(o, where, PAIR_FIELDS[i], path, &pair[i], 0, err, errlen)) return -1;
    out->both_h2d_gbs = pair[0], out->both_d2h_gbs = pair[1], out->adam_h2d_gbs = pair[2], out->adam_d2h_gbs = pair[3];
    out->host_adam_h2d_ms_per_mparam = pair[4], out->host_adam_d2h_ms_per_mparam = pair[5];
    out->host_adam_region_mparams = 0, out->host_adam_under_compute = 0, out->up2_h2d_gbs = 0; /* (this object's own, or none) */
    return optional_field(o, where, "host_adam_region_mparams", path, &out->host_adam_region_mparams, 0, err, errlen) ||
           optional_field(o, where, "up2_h2d_gbs", path, &out->up2_h2d_gbs, 0, err, errlen) ||
           optional_field(o, where, "host_adam_under_compute", path, &out->host_adam_under_compute, 1, err, errlen);
}

/* Whether e, an entry of a per-directory list, is dir's (dir "": no entry is). */
int machine_file_entry_of_dir(const cJSON *e, const char *dir)
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
int machine_file_version_refused(const cJSON *root, const char *path, char *err, size_t errlen)
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
    cJSON *root = machine_file_read_json(path, err, errlen);
    if (!root) return EXIT_BAD_INPUT;
    int status = EXIT_BAD_INPUT;
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(root, "rates");
    const cJSON *entry = find_entry(root, cfg);
    double w[NCOMPUTE_FIELDS];
    if (machine_file_version_refused(root, path, err, errlen)) goto out;
    if (!cJSON_IsObject(rates)) {
        snprintf(err, errlen, "machine file %s: rates is missing", path);
        goto out;
    }
    out->gpu_backend = strcmp(backend_of(root), "cuda") == 0;
    if (rates_from(rates, "rates", NRATE_FIELDS, path, out, err, errlen)) goto out;
    if (!entry) {
        snprintf(err, errlen, "machine file %s has no entry for h%d heads%d s%d b%d vocab%d %s %s (calibrate "
                 "that shape: aebench --calibrate with the same options)", path, cfg->shape.hidden, cfg->shape.heads,
                 cfg->shape.seq, cfg->shape.batch, cfg->shape.vocab, math_of_backend(cfg, backend_of(root)),
                 machine_file_dtype_of(cfg));
        status = MACHINE_NO_ENTRY;
        goto out;
    }
    for (int i = 0; i < NCOMPUTE_FIELDS; i++)
        if (field(entry, "compute[]", COMPUTE_FIELDS[i], path, &w[i], err, errlen)) goto out;
    if (optional_field(entry, "compute[]", "layer_recompute_selective_ms", path, &out->layer_recompute_selective_ms, 0,
                       err, errlen) ||
        optional_field(entry, "compute[]", "layer_bwd_none_ms", path, &out->layer_bwd_none_ms, 0, err, errlen))
        goto out;
    /* --tp T's split layer at every T the entry has (files from before: none), not only the
     * run's: --search loads one entry per micro-batch and predicts every T from it */
    const cJSON *tps = cJSON_GetObjectItemCaseSensitive(entry, "tp"), *te;
    cJSON_ArrayForEach(te, tps) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(te, "t");
        if (!cJSON_IsNumber(t) || t->valueint < 2 || machine_tp_split(out, t->valueint)) continue;
        if (out->ntp_split == MACHINE_TP_SPLITS) {
            snprintf(err, errlen, "machine file %s: more than %d tensor-parallel widths in one compute[] entry's tp",
                     path, MACHINE_TP_SPLITS);
            goto out;
        }
        struct machine_tp_split *sp = &out->tp_split[out->ntp_split];
        sp->t = t->valueint;
        if (field(te, "compute[].tp[]", "layer_fwd_ms", path, &sp->layer_fwd_ms, err, errlen) ||
            field(te, "compute[].tp[]", "layer_bwd_ms", path, &sp->layer_bwd_ms, err, errlen) ||
            optional_field(te, "compute[].tp[]", "layer_bwd_none_ms", path, &sp->layer_bwd_none_ms, 0, err, errlen))
            goto out;
        out->ntp_split++;
    }
    /* the persistent checkpoint at the run's --ckpt-dir, when calibrated there (else 0):
     * one rank's here; on N ranks the world's entry below, measured with every rank writing */
    const cJSON *cdirs = cJSON_GetObjectItemCaseSensitive(root, "checkpoint_dirs"), *cd;
    cJSON_ArrayForEach(cd, cdirs)
        if (machine_file_entry_of_dir(cd, cfg->ckpt_dir) &&
            ckpt_dir_from(cd, "checkpoint_dirs[]", path, out, err, errlen))
            goto out;
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
        if (optional_field(ce, "collectives[]", "compute_under_collectives", path, &out->compute_under_coll, 1, err,
                           errlen) ||
            optional_field(ce, "collectives[]", "compute_under_sharded_collectives", path, &out->compute_under_shard, 1,
                           err, errlen) ||
            optional_field(ce, "collectives[]", "all_reduce_under_compute", path, &out->ar_under_compute, 1, err,
                           errlen) ||
            optional_field(ce, "collectives[]", "reduce_scatter_under_compute", path, &out->rs_under_compute, 1, err,
                           errlen) ||
            optional_field(ce, "collectives[]", "all_gather_under_compute", path, &out->ag_under_compute, 1, err,
                           errlen) ||
            optional_field(ce, "collectives[]", "compute_under_two_collective_streams", path, &out->compute_under_two,
                           1, err, errlen))
            goto out;
        /* the same at the run's micro-batch, where measured there (a smaller backward loses
         * more to the collectives' kernels) */
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(ce, "compute_beside_at"), *be_;
        cJSON_ArrayForEach(be_, at) {
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(be_, "batch");
            if (!cJSON_IsNumber(b) || b->valueint != cfg->shape.batch) continue;
            if (field_at_least(be_, "collectives[].compute_beside_at[]", "compute_under_collectives", path,
                               &out->compute_under_coll, 1, err, errlen) ||
                field_at_least(be_, "collectives[].compute_beside_at[]", "compute_under_sharded_collectives", path,
                               &out->compute_under_shard, 1, err, errlen) ||
                field_at_least(be_, "collectives[].compute_beside_at[]", "compute_under_two_collective_streams", path,
                               &out->compute_under_two, 1, err, errlen))
                goto out;
        }
        const cJSON *shared = cJSON_GetObjectItemCaseSensitive(ce, "rates");
        if (shared) {
            if (rates_from(shared, "collectives[].rates", RANK_RATES, path, out, err, errlen)) goto out;
            out->rates_world = world;
            bf16_adam = 0; /* (the world's own, or none: not the single rank's beside its rates) */
            if (bf16_rate_of(shared, path, cfg, &bf16_adam, err, errlen)) goto out;
        }
        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(ce, "checkpoint_dir");
        if (ck && machine_file_entry_of_dir(ck, cfg->ckpt_dir)) {
            if (ckpt_dir_from(ck, "collectives[].checkpoint_dir", path, out, err, errlen)) goto out;
            out->ckpt_world = world;
        }
    }
    /* the disk tier at the run's --nvme-dir, when calibrated there (else 0) */
    const cJSON *disks = cJSON_GetObjectItemCaseSensitive(root, "disks"), *de;
    cJSON_ArrayForEach(de, disks) {
        if (cfg->offload != OFFLOAD_NVME || !machine_file_entry_of_dir(de, cfg->nvme_dir)) continue;
        if (field(de, "disks[]", "read_gbs", path, &out->disk_read_gbs, err, errlen) ||
            field(de, "disks[]", "write_gbs", path, &out->disk_write_gbs, err, errlen))
            goto out;
    }
    /* bf16: the update also writes the working copy; its rate alone, and the rate under load
     * scaled alike (older files, without it: as fp32) */
    if (bf16_adam > 0) {
        const double f = bf16_adam / out->host_adam_ms_per_mparam;
        out->busy_host_adam_ms_per_mparam *= f;
        out->host_adam_h2d_ms_per_mparam *= f, out->host_adam_d2h_ms_per_mparam *= f;
        out->host_adam_ms_per_mparam = bf16_adam;
    }
    /* the pieces as measured, and megatron-lm's step against them (measure_step) */
    out->embed_fwd_ms = w[0], out->layer_fwd_ms = w[1], out->layer_bwd_ms = w[2];
    out->head_ms = w[3], out->embed_bwd_ms = w[4], out->gpu_adam_ms_per_mparam = w[5];
    out->layer_scale = w[6], out->rest_scale = w[7];
    status = 0;
out:
    cJSON_Delete(root);
    return status;
}

/* Write root to path (through a temporary file: report_write_text). */
int machine_file_write(cJSON *root, const char *path)
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

/* root's array `name`, made (in place of anything else there) when it is not one. */
cJSON *machine_file_array_in(cJSON *root, const char *name)
{
    cJSON *list = cJSON_GetObjectItemCaseSensitive(root, name);
    if (cJSON_IsArray(list)) return list;
    cJSON_DeleteItemFromObjectCaseSensitive(root, name);
    return cJSON_AddArrayToObject(root, name);
}

/* Every rate of RATE_FIELDS there (a file from before a rate was added is measured anew). */
int machine_file_has_every_rate(const cJSON *rates)
{
    for (int i = 0; i < NRATE_FIELDS; i++)
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rates, RATE_FIELDS[i]))) return 0;
    for (int i = 0; i < NPAIR_FIELDS; i++)
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rates, PAIR_FIELDS[i]))) return 0;
    /* (and the host Adam beside the compute: a file from before it is calibrated again) */
    return cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rates, "host_adam_under_compute"));
}

