/*
 * --find-max: the largest layer count of one engine and shape that trains under the
 * budgets (--gpu-mem-limit / --cpu-mem-limit, default the free memory a child sees).
 *
 * 1. A --dry-run child resolves the run (backend, CPU preset, budgets) as a real child
 *    would see it — the parent opens no backend of its own.
 * 2. The engine's plan, which the driver checks before allocating, bounds the answer: the
 *    largest L whose plan fits both budgets (plans grow with L), found by doubling then
 *    bisecting on pure arithmetic.
 * 3. Child runs of 2 iterations under the same budgets confirm it: the bound first (the
 *    usual case: plans are held to within 10% of the measured peaks), then, if it fails,
 *    bisection below it, assuming what fails at L fails at L + 1.
 * The result says which memory stopped the next size and by how much: from the plan when
 * the bound trained, else from the failed child's OOM record.
 */
#include "sweep.h"

#include "bisect.h"
#include "report.h"
#include "run.h"
#include "strv.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FINDMAX_LAYERS_CAP 1000000

typedef struct fm_ctx {
    const char *exe;
    char *const *argv;
    int argc;
    run_config run_cfg;           /* the run, with the shape the probe resolved */
    const engine_vtbl *eng;
    size_t budget_gpu, budget_host;
    size_t budget_disk;      /* --offload nvme: free bytes under --nvme-dir; 0: no disk tier */
    char backend[8];
    char probes_dir[PATH_MAX];
    FILE *log;
    /* every child tried, for the log and JSON */
    struct tried {
        int layers;
        char status[48];
        run_outcome o;
        char log[PATH_MAX];
    } *tried;
    int ntried;
    /* the log's first lines (the run, the plan bound), said before the log exists */
    char first_lines[4][512];
    int nfirst;
} fm_ctx;

static void fm_log(fm_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fm_log(fm_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    if (!c->log) return;
    va_start(ap, fmt);
    vfprintf(c->log, fmt, ap);
    va_end(ap);
    fputc('\n', c->log);
}

/* Does the plan at L layers fit?  If not, which memory is short and by how much. */
static int plan_fits(const fm_ctx *c, int layers, const char **memory, double *short_by)
{
    engine_config ec = c->run_cfg.eng;
    ec.shape.layers = layers;
    if (!cli_shape_addressable(&ec.shape, NULL, NULL)) { /* beyond what validate() lets a run address */
        *memory = "GPU";
        *short_by = 0;
        return 0;
    }
    engine_plan plan;
    ec.gpu_budget = c->budget_gpu;
    ec.host_budget = c->budget_host;
    c->eng->plan(&ec, &plan);
    if (plan.gpu_bytes > c->budget_gpu) {
        *memory = "GPU";
        *short_by = (double)plan.gpu_bytes - (double)c->budget_gpu;
        return 0;
    }
    if (plan.host_bytes > c->budget_host) {
        *memory = "host";
        *short_by = (double)plan.host_bytes - (double)c->budget_host;
        return 0;
    }
    if (c->budget_disk && plan.disk_bytes > c->budget_disk) {
        *memory = "disk";
        *short_by = (double)plan.disk_bytes - (double)c->budget_disk;
        return 0;
    }
    return 1;
}

/* plan_fits as bisect_largest asks it (ctx: the fm_ctx) */
static int plan_fits_at(int layers, void *ctx)
{
    const char *memory;
    double short_by;
    return plan_fits(ctx, layers, &memory, &short_by);
}

/* One child run of 2 iterations at L layers; returns 1 when it trained. */
static int try_layers(fm_ctx *c, int layers, char *err, size_t errlen)
{
    char **argv = NULL;
    int n = 0;
    char L[32], g[32], h[32];
    snprintf(L, sizeof L, "%d", layers);
    snprintf(g, sizeof g, "%zu", c->budget_gpu);
    /* --cpu-mem-limit is the machine's, which a job of N ranks splits among them (run.c):
     * the probe's per-rank host budget times N gives each rank that budget again. */
    const size_t ranks = c->run_cfg.ranks > 1 ? (size_t)c->run_cfg.ranks : 1;
    snprintf(h, sizeof h, "%zu", c->budget_host > SIZE_MAX / ranks ? c->budget_host : c->budget_host * ranks);
    /* Later options win: the run's own, then the probe's size, 2 iterations, budgets fixed
     * to what the plan bound used (not re-measured by each child), logs aside. */
    char **own = NULL;
    int nown = 0;
    /* (the run's options but those that name an iteration: the probe has 2) */
    const char *iteration_options[CLI_OPTIONS_MAX + 1];
    cli_iteration_options(iteration_options, CLI_OPTIONS_MAX + 1);
    int bad = c->argc < 1 || cli_args_without(c->argv + 1, c->argc - 1, iteration_options, &own, &nown) != 0;
    bad = bad || strv_push(&argv, &n, c->argv[0]) || strv_push_all(&argv, &n, own, nown);
    strv_free(&own, &nown);
    bad = bad || strv_push(&argv, &n, "--layers") ||
              strv_push(&argv, &n, L) || strv_push(&argv, &n, "--iters") || strv_push(&argv, &n, "2") ||
              strv_push(&argv, &n, "--log-interval") || strv_push(&argv, &n, "1") ||
              strv_push(&argv, &n, "--results") || strv_push(&argv, &n, c->probes_dir);
    if (!bad && c->budget_gpu != SIZE_MAX)
        bad = strv_push(&argv, &n, "--gpu-mem-limit") || strv_push(&argv, &n, g);
    if (!bad && c->budget_host != SIZE_MAX)
        bad = strv_push(&argv, &n, "--cpu-mem-limit") || strv_push(&argv, &n, h);
    if (bad) {
        strv_free(&argv, &n);
        return cli_fail(err, errlen, "out of memory"), -1;
    }
    struct tried *grown = realloc(c->tried, sizeof *grown * (size_t)(c->ntried + 1));
    if (!grown) {
        strv_free(&argv, &n);
        return cli_fail(err, errlen, "out of memory"), -1;
    }
    c->tried = grown;
    struct tried *t = &c->tried[c->ntried++];
    memset(t, 0, sizeof *t);
    t->layers = layers;
    child_result cr;
    int status = child_run(c->exe, argv, CHILD_QUIET, &cr, err, errlen);
    strv_free(&argv, &n);
    if (status) return -1;
    snprintf(t->log, sizeof t->log, "%s", cr.log);
    if (cr.json[0]) run_outcome_read(cr.json, &t->o);
    if (!cr.exited) {
        char sig[32];
        child_signal_name(cr.signal, sig, sizeof sig);
        snprintf(t->status, sizeof t->status, "crashed(%s)", sig);
    } else if (t->o.have) {
        snprintf(t->status, sizeof t->status, "%s", t->o.status);
    } else {
        snprintf(t->status, sizeof t->status, cr.exit_code == 0 ? "error" : cr.exit_code == 3 ? "oom" : "error");
    }
    char line[1024] = "";
    if (strcmp(t->status, "ok") == 0) {
        snprintf(line, sizeof line, "%.1f ms/it", t->o.median_ms);
    } else if (t->o.have) {
        snprintf(line, sizeof line, "%s", t->o.message);
    } else {
        snprintf(line, sizeof line, "exit %d, no JSON", cr.exit_code);
    }
    fm_log(c, "try l%d: %s | %s | log %s", layers, t->status, line, t->log[0] ? t->log : "-");
    return strcmp(t->status, "ok") == 0;
}

/* results/findmax_{method}_l-{L}_h-{H}_bs-{B}_ws-{W}_{date}.{epoch}.txt: the log files'
 * fields, so the artifact's awk field numbers read these too. */
static FILE *create_findmax_log(fm_ctx *c, int layers, findmax_result *out, char *err, size_t errlen)
{
    char window[16], name[512];
    if (c->run_cfg.eng.window) snprintf(window, sizeof window, "%d", c->run_cfg.eng.window);
    else snprintf(window, sizeof window, "auto");
    const gpt_shape *sh = &c->run_cfg.eng.shape;
    snprintf(name, sizeof name, "findmax_%s_l-%d_h-%d_bs-%d_ws-%s", c->eng->name, layers, sh->hidden, sh->batch,
             window);
    return report_create_log_named(c->run_cfg.results_dir, name, out->log, sizeof out->log, out->json,
                                   sizeof out->json, err, errlen);
}

static int write_findmax_json(const fm_ctx *c, const findmax_result *r)
{
    const gpt_shape *sh = &c->run_cfg.eng.shape;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "kind", "find-max");
    cJSON_AddStringToObject(root, "status", r->status == EXIT_RUN_OK ? "ok" : r->status == EXIT_RUN_OOM ? "oom" : "error");
    cJSON_AddStringToObject(root, "method", c->eng->name);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "hidden", sh->hidden);
    cJSON_AddNumberToObject(cfg, "heads", sh->heads);
    cJSON_AddNumberToObject(cfg, "seq", sh->seq);
    cJSON_AddNumberToObject(cfg, "batch", sh->batch);
    cJSON_AddNumberToObject(cfg, "vocab", sh->vocab);
    cJSON_AddNumberToObject(cfg, "window", c->run_cfg.eng.window);
    cJSON_AddStringToObject(cfg, "backend", c->backend);
    report_json_recompute(cfg, c->run_cfg.eng.recompute);
    cJSON_AddStringToObject(cfg, "dtype", c->run_cfg.eng.bf16 ? "bf16" : "fp32");
    /* The options as given (0: not given, the free memory), to match later lookups. */
    cJSON_AddNumberToObject(cfg, "gpu_mem_limit_option", (double)c->run_cfg.gpu_mem_limit);
    cJSON_AddNumberToObject(cfg, "cpu_mem_limit_option", (double)c->run_cfg.cpu_mem_limit);
    cJSON *b = cJSON_AddObjectToObject(root, "budgets");
    cJSON_AddNumberToObject(b, "gpu_bytes", (double)c->budget_gpu);
    cJSON_AddNumberToObject(b, "host_bytes", (double)c->budget_host);
    cJSON_AddNumberToObject(root, "plan_max_layers", r->plan_max);
    cJSON_AddNumberToObject(root, "max_layers", r->max_layers);
    cJSON_AddNumberToObject(root, "parameters", r->params);
    cJSON_AddNumberToObject(root, "parameters_billions", r->params / 1e9);
    cJSON *next = cJSON_AddObjectToObject(root, "next");
    cJSON_AddNumberToObject(next, "layers", r->next_layers);
    cJSON_AddStringToObject(next, "memory", r->next_memory);
    cJSON_AddNumberToObject(next, "short_bytes", r->next_short);
    cJSON_AddStringToObject(next, "reason", r->reason);
    if (r->best.have) {
        cJSON *best = cJSON_AddObjectToObject(root, "largest_run");
        cJSON_AddStringToObject(best, "log", r->best.log);
        cJSON_AddNumberToObject(best, "median_ms", r->best.median_ms);
        cJSON_AddNumberToObject(best, "samples_per_second", r->best.samples_per_s);
        cJSON_AddNumberToObject(best, "model_tflops", r->best.model_tflops);
        cJSON_AddNumberToObject(best, "peak_gpu_bytes", r->best.peak_gpu);
        cJSON_AddNumberToObject(best, "peak_host_bytes", r->best.peak_host);
    }
    cJSON *tries = cJSON_AddArrayToObject(root, "tries");
    for (int i = 0; i < c->ntried; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "layers", c->tried[i].layers);
        cJSON_AddStringToObject(t, "status", c->tried[i].status);
        cJSON_AddStringToObject(t, "log", c->tried[i].log);
        cJSON_AddItemToArray(tries, t);
    }
    cJSON_AddStringToObject(root, "log", r->log);
    char *text = report_json_text(root);
    cJSON_Delete(root);
    if (!text) return -1;
    const int status = report_write_text(r->json, text);
    const int e = errno;
    cJSON_free(text);
    errno = e;
    return status;
}

/* 1. How a child resolves this run: a --dry-run child's shape, budgets and backend into c
 * (run_cfg: the run as given).  0, or -1 with err set. */
static int resolve_as_child(fm_ctx *c, const run_config *run_cfg, char *err, size_t errlen)
{
    char **pargv = NULL;
    int pn = 0;
    if (strv_push_all(&pargv, &pn, c->argv, c->argc) || strv_push(&pargv, &pn, "--dry-run")) {
        strv_free(&pargv, &pn);
        return cli_fail(err, errlen, "out of memory");
    }
    child_result probe;
    int status = child_run(c->exe, pargv, CHILD_QUIET_OUT, &probe, err, errlen);
    strv_free(&pargv, &pn);
    if (status) return -1;
    if (!probe.exited || probe.exit_code != 0 || !probe.probed)
        return cli_fail(err, errlen, "find-max: the dry run of %s failed (see above)", c->eng->name);
    gpt_shape *sh = &c->run_cfg.eng.shape;
    sh->hidden = probe.shape[1];
    sh->heads = probe.shape[2];
    sh->seq = probe.shape[3];
    sh->batch = probe.shape[4];
    sh->vocab = probe.shape[5];
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    /* The plan of one rank of the job (--ranks N: the probe's budgets are per rank, and a
     * sharded engine's plan shrinks with the world). */
    const int world = run_cfg->ranks > 1 ? run_cfg->ranks : 1;
    if (cli_resolve_ranks(&c->run_cfg, world, cli_ranks_per_machine(run_cfg), err, errlen)) return -1;
    c->budget_gpu = probe.budget_gpu;
    c->budget_host = probe.budget_host;
    c->budget_disk = probe.budget_disk;
    snprintf(c->backend, sizeof c->backend, "%s", probe.backend);
    if (snprintf(c->probes_dir, sizeof c->probes_dir, "%s/probes", run_cfg->results_dir) >= (int)sizeof c->probes_dir)
        return cli_fail(err, errlen, "results path too long");
    return 0;
}

/* The run and its budgets, said now on stdout and kept as the log's first line (the log is
 * named by the answer, so it is written last). */
static void announce(fm_ctx *c, int plan_max)
{
    const gpt_shape *sh = &c->run_cfg.eng.shape;
    char gb[32], hb[32];
    format_bytes((double)c->budget_gpu, gb, sizeof gb);
    format_bytes((double)c->budget_host, hb, sizeof hb);
    printf("find-max %s | h%d heads%d s%d b%d vocab%d | %s backend | budgets: GPU %s, host %s\n",
           c->eng->name, sh->hidden, sh->heads, sh->seq, sh->batch, sh->vocab, c->backend, gb, hb);
    if (plan_max) printf("  the plan fits up to l%d\n", plan_max);
    snprintf(c->first_lines[c->nfirst++], sizeof c->first_lines[0],
             "aebench find-max: method %s, h%d heads%d s%d b%d vocab%d, window %d, %s backend, "
             "budgets GPU %s (%zu bytes) | host %s (%zu bytes)",
             c->eng->name, sh->hidden, sh->heads, sh->seq, sh->batch, sh->vocab, c->run_cfg.eng.window,
             c->backend, gb, c->budget_gpu, hb, c->budget_host);
}

/* 3. Child runs: the bound, then bisection below it, over [lmin, plan_max].  The largest that
 * trained into *max (0: none) and, when the bound did not train, the smallest that failed into
 * *failed_at.  0, or -1 with err set (a child could not be run). */
static int try_children(fm_ctx *c, int lmin, int plan_max, int *max, int *failed_at, char *err, size_t errlen)
{
    const char *mem = NULL;
    double short_by = 0;
    if (plan_max) {
        plan_fits(c, plan_max + 1, &mem, &short_by);
        snprintf(c->first_lines[c->nfirst++], sizeof c->first_lines[0],
                 "plan bound: l%d fits; l%d does not (%s short by %.0f bytes)", plan_max,
                 plan_max + 1, mem, short_by);
        const int trained = try_layers(c, plan_max, err, errlen);
        if (trained < 0) return -1;
        if (trained) {
            *max = plan_max;
        } else {
            int lo = lmin - 1, hi = plan_max;
            while (hi - lo > 1) {
                int mid = lo + (hi - lo) / 2;
                int ok = try_layers(c, mid, err, errlen);
                if (ok < 0) return -1;
                if (ok) lo = mid;
                else hi = mid;
            }
            *max = lo >= lmin ? lo : 0;
            *failed_at = hi;
        }
    } else {
        plan_fits(c, lmin, &mem, &short_by);
        snprintf(c->first_lines[c->nfirst++], sizeof c->first_lines[0],
                 "plan bound: not even l%d fits (%s short by %.0f bytes)", lmin, mem, short_by);
    }
    return 0;
}

/* The answer into out: the largest size, what stopped the next one (its plan, or the failed
 * child's OOM record), the largest run's figures, and the status. */
static void explain_next(const fm_ctx *c, int lmin, int max, int failed_at, findmax_result *out)
{
    const char *mem = NULL;
    double short_by = 0;
    out->max_layers = max;
    out->next_layers = max ? max + 1 : lmin;
    if (!failed_at) {
        plan_fits(c, out->next_layers, &mem, &short_by);
        snprintf(out->next_memory, sizeof out->next_memory, "%s", mem);
        out->next_short = short_by;
        char s[32];
        format_bytes(short_by, s, sizeof s);
        snprintf(out->reason, sizeof out->reason, "l%d: its plan needs %s more %s memory than the budget",
                 out->next_layers, s, mem);
    } else {
        const struct tried *t = NULL;
        for (int i = 0; i < c->ntried; i++)
            if (c->tried[i].layers == failed_at) t = &c->tried[i];
        if (t && t->o.have && strcmp(t->o.status, "oom") == 0) {
            snprintf(out->next_memory, sizeof out->next_memory, "%s", t->o.oom_memory);
            out->next_short = t->o.oom_in_use + t->o.oom_requested - t->o.oom_limit;
            snprintf(out->reason, sizeof out->reason, "l%d: %.480s", failed_at, t->o.message);
        } else {
            snprintf(out->reason, sizeof out->reason, "l%d: %s%s%.440s", failed_at, t ? t->status : "failed",
                     t && t->o.have ? ": " : "", t && t->o.have ? t->o.message : "");
        }
    }
    for (int i = 0; i < c->ntried; i++)
        if (c->tried[i].layers == max && strcmp(c->tried[i].status, "ok") == 0) out->best = c->tried[i].o;
    if (max) {
        gpt_shape at = c->run_cfg.eng.shape;
        at.layers = max;
        out->params = (double)gpt_param_count(&at);
    }
    out->status = max ? EXIT_RUN_OK : (out->next_memory[0] ? EXIT_RUN_OOM : EXIT_RUN_ERROR);
}

/* The log and JSON, once the answer (and so the file name) is known: both whole, or neither
 * (out->status EXIT_RUN_ERROR then).  0, or -1 with err set when the log cannot be created. */
static int write_record(fm_ctx *c, int max, findmax_result *out, char *err, size_t errlen)
{
    char lerr[512];
    c->log = create_findmax_log(c, max, out, lerr, sizeof lerr);
    if (!c->log) {
        fprintf(stderr, "aebench: %s\n", lerr);
        return cli_fail(err, errlen, "%s", lerr);
    }
    for (int i = 0; i < c->nfirst; i++) fprintf(c->log, "%s\n", c->first_lines[i]);
    for (int i = 0; i < c->ntried; i++)
        fprintf(c->log, "try l%d: %s | log %s\n", c->tried[i].layers, c->tried[i].status,
                c->tried[i].log[0] ? c->tried[i].log : "-");
    char line[512];
    if (max) {
        fmt_params_line(line, sizeof line, (uint64_t)out->params);
        fprintf(c->log, "%s\n", line);
        fmt_tflops_line(line, sizeof line, out->best.effective_tflops, (uint64_t)out->params);
        fprintf(c->log, "%s\n", line);
    }
    char sb[32];
    format_bytes(out->next_short, sb, sizeof sb);
    /* One line with every answer, " | "-separated, for scripts/case1_extract.sh. */
    fm_log(c, "find-max result: method %s | layers %d | parameters %.0f | %.3f B | next l%d | "
              "stopped by %s | short by %.0f bytes (%s)",
           c->eng->name, max, out->params, out->params / 1e9, out->next_layers,
           out->next_memory[0] ? out->next_memory : "error", out->next_short, sb);
    fm_log(c, "next size: %s", out->reason);
    /* (a write the stream kept shows at its close: the log is checked whole there) */
    const int log_bad = ferror(c->log), closed = fclose(c->log);
    const int log_errno = errno;
    c->log = NULL;
    const int json_bad = log_bad || closed != 0 ? 0 : write_findmax_json(c, out);
    if (log_bad || closed != 0 || json_bad) {
        /* a full disk: the record is whole or not there, and nothing names what is not */
        const int e = json_bad ? (errno ? errno : EIO) : closed != 0 && log_errno ? log_errno : EIO;
        fprintf(stderr, "aebench: %s writing %s (the find-max's log and JSON are not kept)\n",
                e == ENOSPC ? "disk full" : strerror(e), json_bad ? out->json : out->log);
        unlink(out->log);
        unlink(out->json);
        out->log[0] = out->json[0] = '\0';
        out->status = EXIT_RUN_ERROR;
    } else {
        printf("  find-max log:  %s\n  find-max json: %s\n", out->log, out->json);
    }
    return 0;
}

int findmax_run(const char *exe, char *const argv[], int argc, const run_config *run_cfg,
                findmax_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    fm_ctx c;
    memset(&c, 0, sizeof c);
    c.exe = exe;
    c.argv = argv;
    c.argc = argc;
    c.run_cfg = *run_cfg;
    c.eng = engine_find(run_cfg->method);
    if (!c.eng) return cli_fail(err, errlen, "find-max needs one method (-m NAME)");

    /* 1. How a child resolves this run. */
    if (resolve_as_child(&c, run_cfg, err, errlen)) return -1;

    /* 2. The plan bound, over [lmin, cap]: a windowed run needs at least its window. */
    const int lmin = run_cfg->eng.window > 1 ? run_cfg->eng.window : 1;
    const int plan_max = bisect_largest(lmin, FINDMAX_LAYERS_CAP, plan_fits_at, &c);
    out->plan_max = plan_max;
    announce(&c, plan_max);
    if (run_cfg->dry_run) {
        if (!plan_max) {
            const char *mem = NULL;
            double short_by = 0;
            plan_fits(&c, lmin, &mem, &short_by);
            printf("  not even l%d fits the plan: %s short by %.0f bytes\n", lmin, mem, short_by);
        }
        out->status = plan_max ? EXIT_RUN_OK : EXIT_RUN_OOM;
        out->max_layers = plan_max;
        return 0;
    }

    /* 3. Child runs: the bound, then bisection below it. */
    int max = 0, failed_at = 0;
    if (try_children(&c, lmin, plan_max, &max, &failed_at, err, errlen)) {
        free(c.tried);
        return -1;
    }
    /* What stopped the next size. */
    explain_next(&c, lmin, max, failed_at, out);
    /* The log and JSON. */
    const int status = write_record(&c, max, out, err, errlen);
    free(c.tried);
    return status;
}

int findmax_lookup(const char *dir, const char *method, const int shape5[5], int window, const char *backend,
                   size_t gpu_limit_opt, size_t cpu_limit_opt, findmax_result *out)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    struct timespec newest = {0, 0};
    int found = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "findmax_", 8) != 0 || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (stat(path, &st) != 0) continue;
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char text[1 << 16];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        cJSON *root = cJSON_Parse(text);
        if (!root) continue;
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "method");
        const cJSON *be = cJSON_GetObjectItemCaseSensitive(cfg, "backend");
        const cJSON *st_ = cJSON_GetObjectItemCaseSensitive(root, "status");
#define NUM(o, k) (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, k)) ? cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble : -1)
        int match = cJSON_IsString(m) && strcmp(m->valuestring, method) == 0 && cJSON_IsString(be) &&
                    strcmp(be->valuestring, backend) == 0 && cJSON_IsString(st_) &&
                    strcmp(st_->valuestring, "error") != 0 && NUM(cfg, "hidden") == shape5[0] &&
                    NUM(cfg, "heads") == shape5[1] && NUM(cfg, "seq") == shape5[2] &&
                    NUM(cfg, "batch") == shape5[3] && NUM(cfg, "vocab") == shape5[4] &&
                    (window < 0 || NUM(cfg, "window") == window) &&
                    NUM(cfg, "gpu_mem_limit_option") == (double)gpu_limit_opt &&
                    NUM(cfg, "cpu_mem_limit_option") == (double)cpu_limit_opt;
        if (match && (!found || st.st_mtim.tv_sec > newest.tv_sec ||
                      (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec))) {
            found = 1;
            newest = st.st_mtim;
            memset(out, 0, sizeof *out);
            out->status = strcmp(st_->valuestring, "ok") == 0 ? EXIT_RUN_OK : EXIT_RUN_OOM;
            out->max_layers = (int)NUM(root, "max_layers");
            out->plan_max = (int)NUM(root, "plan_max_layers");
            out->params = NUM(root, "parameters");
            const cJSON *next = cJSON_GetObjectItemCaseSensitive(root, "next");
            out->next_layers = (int)NUM(next, "layers");
            out->next_short = NUM(next, "short_bytes");
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(next, "memory");
            const cJSON *rs = cJSON_GetObjectItemCaseSensitive(next, "reason");
            snprintf(out->next_memory, sizeof out->next_memory, "%s", cJSON_IsString(nm) ? nm->valuestring : "");
            snprintf(out->reason, sizeof out->reason, "%s", cJSON_IsString(rs) ? rs->valuestring : "");
            const cJSON *best = cJSON_GetObjectItemCaseSensitive(root, "largest_run");
            if (best) {
                out->best.have = 1;
                snprintf(out->best.status, sizeof out->best.status, "ok");
                out->best.median_ms = NUM(best, "median_ms");
                out->best.samples_per_s = NUM(best, "samples_per_second");
                out->best.model_tflops = NUM(best, "model_tflops");
                out->best.peak_gpu = NUM(best, "peak_gpu_bytes");
                out->best.peak_host = NUM(best, "peak_host_bytes");
            }
            snprintf(out->json, sizeof out->json, "%s", path);
            const cJSON *lg = cJSON_GetObjectItemCaseSensitive(root, "log");
            snprintf(out->log, sizeof out->log, "%s", cJSON_IsString(lg) ? lg->valuestring : "");
        }
#undef NUM
        cJSON_Delete(root);
    }
    if (closedir(d) != 0) return -1;
    return found ? 0 : -1;
}
