/*
 * The sweep driver: -m all, run-list configs and --find-max (see sweep.h).
 *
 * Three phases, so that bad input never leaves half a sweep behind:
 *   build     one item per run: its child command line (the run's options, then the
 *             command line's, which therefore override), parsed here with cli_parse — any
 *             error is reported with where it came from, exit 2, before anything runs;
 *   resolve   layers-from (a find-max result), duplicates, --resume (a finished JSON) —
 *             through --dry-run children where the CPU preset or the backend matter;
 *   run       each item as a child process (find-max items bisect with children of their
 *             own), a progress line with an ETA before each, a summary table at the end.
 */
#include "sweep.h"

#include "report.h"
#include "run.h"
#include "strv.h"

#include "../engines/runtime/timer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum item_status {
    ST_PENDING, ST_OK, ST_OOM, ST_ERROR, ST_CRASHED, ST_SKIPPED, ST_DUPLICATE, ST_DRY
} item_status;

typedef struct item {
    char **argv;            /* argv[0] = "aebench", then options; NULL-terminated */
    int argc;
    char where[48];         /* "config F: runs[3]" for messages, "" for -m all */
    run_config run_cfg;          /* argv parsed */
    int find_max;
    char layers_from[64];
    char desc[160];
    double cost;            /* for the ETA: model FLOPs of the whole run */
    item_status st;
    char signal[32];
    int dup_of;
    int exit_code;
    run_outcome o;          /* a training run's JSON (or a find-max's largest run) */
    findmax_result fm;
    char log[PATH_MAX];
    double seconds;
    char **stale;           /* --resume: an earlier try's files of this run that did not finish
                               (its JSON, then its log), removed as the run starts again */
    int nstale;
} item;

typedef struct sweep {
    const run_config *run_cfg;
    char exe[PATH_MAX];
    char title[PATH_MAX + 64];
    item *items;
    int n;
} sweep;

static void sweep_free(sweep *s)
{
    for (int i = 0; i < s->n; i++) {
        strv_free(&s->items[i].argv, &s->items[i].argc);
        strv_free(&s->items[i].stale, &s->items[i].nstale);
    }
    free(s->items);
}

static item *add_item(sweep *s)
{
    item *grown = realloc(s->items, sizeof *grown * (size_t)(s->n + 1));
    if (!grown) return NULL;
    s->items = grown;
    item *it = &s->items[s->n++];
    memset(it, 0, sizeof *it);
    return it;
}

static int shape_given(const run_config *run_cfg)
{
    static const char *const keys[] = {"layers", "hidden", "heads", "seq", "batch", "vocab"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (cli_given(run_cfg, keys[i])) return 1;
    return 0;
}

static void window_text(const run_config *run_cfg, char *buf, size_t len)
{
    if (run_cfg->eng.window) snprintf(buf, len, "%d", run_cfg->eng.window);
    else snprintf(buf, len, "auto");
}

/* Parse the item's command line as its child will; fill run_cfg, desc and cost. */
static int check_item(item *it, char *err, size_t errlen)
{
    char perr[1024];
    cli_outcome out = cli_parse(it->argc, it->argv, &it->run_cfg, perr, sizeof perr);
    if (out != CLI_RUN) {
        snprintf(err, errlen, "%s%s%s", it->where, it->where[0] ? ": " : "",
                 out == CLI_DONE ? "--help and --version are not run options" : perr);
        return -1;
    }
    const engine_vtbl *eng = engine_find(it->run_cfg.method);
    if (!eng) {
        snprintf(err, errlen, "%s%sone method per run, not '%s'", it->where, it->where[0] ? ": " : "",
                 it->run_cfg.method);
        return -1;
    }
    char eerr[512];
    /* (at the world the run will have: --ranks N) */
    engine_config at_world = it->run_cfg.eng;
    if (it->run_cfg.ranks > 1) at_world.world = it->run_cfg.ranks;
    at_world.local_world = 0; /* (which ranks share a machine is the child's to learn from MPI) */
    if (engine_config_refused(eng, &at_world, eerr, sizeof eerr)) {
        /* Refused before anything runs, like any other bad option of the list. */
        snprintf(err, errlen, "%s%s%s", it->where, it->where[0] ? ": " : "", eerr);
        return -1;
    }
    const gpt_shape *sh = &it->run_cfg.eng.shape;
    char w[16];
    window_text(&it->run_cfg, w, sizeof w);
    if (it->find_max && (shape_given(&it->run_cfg) || it->run_cfg.eng.device == DEVICE_CUDA))
        snprintf(it->desc, sizeof it->desc, "%s find-max h%d b%d w%s", eng->name, sh->hidden, sh->batch, w);
    else if (shape_given(&it->run_cfg) || it->run_cfg.eng.device == DEVICE_CUDA)
        snprintf(it->desc, sizeof it->desc, "%s l%d h%d b%d w%s", eng->name, sh->layers, sh->hidden,
                 sh->batch, w);
    else /* the child picks its backend, and on the CPU the preset shape */
        snprintf(it->desc, sizeof it->desc, "%s default shape w%s%s", eng->name, w,
                 it->find_max ? " find-max" : "");
    it->cost = gpt_model_flops(sh) * (it->find_max ? 8 : it->run_cfg.iters);
    return 0;
}

/* A --dry-run child: how this run resolves (backend, preset shape, budgets). */
static int probe_item(const sweep *s, const item *it, child_result *pr, char *err, size_t errlen)
{
    char **argv = NULL;
    int n = 0;
    if (strv_push_all(&argv, &n, it->argv, it->argc) || strv_push(&argv, &n, "--dry-run")) {
        strv_free(&argv, &n);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int status = child_run(s->exe, argv, CHILD_QUIET_OUT, pr, err, errlen);
    strv_free(&argv, &n);
    if (status) return -1;
    if (!pr->exited || pr->exit_code != 0 || !pr->probed) {
        snprintf(err, errlen, "%s%sits dry run failed (exit %d)", it->where, it->where[0] ? ": " : "",
                 pr->exited ? pr->exit_code : 128 + pr->signal);
        return -1;
    }
    return 0;
}

/* layers-from: the layer count of an earlier --find-max of that engine at this shape. */
static int resolve_layers_from(const sweep *s, item *it, char *err, size_t errlen)
{
    child_result pr;
    if (probe_item(s, it, &pr, err, errlen)) return -1;
    const engine_vtbl *from = engine_find(it->layers_from);
    const int shape5[5] = {pr.shape[1], pr.shape[2], pr.shape[3], pr.shape[4], pr.shape[5]};
    findmax_result fm;
    if (findmax_lookup(it->run_cfg.results_dir, from->name, shape5, -1, pr.backend, it->run_cfg.gpu_mem_limit,
                       it->run_cfg.cpu_mem_limit, &fm) != 0) {
        snprintf(err, errlen, "%s.layers-from: no --find-max result for %s at h%d heads%d s%d b%d vocab%d "
                              "(%s, these memory limits) in %.1000s: run case 1 (or --find-max -m %s) first",
                 it->where, from->name, shape5[0], shape5[1], shape5[2], shape5[3], shape5[4],
                 pr.backend, it->run_cfg.results_dir, from->name);
        return -1;
    }
    if (fm.max_layers < 1) {
        snprintf(err, errlen, "%s.layers-from: %s trained at no size (%.1000s)", it->where, from->name, fm.json);
        return -1;
    }
    char L[32];
    snprintf(L, sizeof L, "%d", fm.max_layers);
    if (strv_push(&it->argv, &it->argc, "--layers") || strv_push(&it->argv, &it->argc, L)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return check_item(it, err, errlen);
}

/* A file of an earlier try of a run, to remove: a regular file of ours (not a link, nor
 * another user's), taken by path. */
static int own_regular_file(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

/* --resume: the record at json_path says this run did not finish ("interrupted": stopped by a
 * signal; "running": killed outright).  Its JSON and its log (the JSON's own "log", beside it)
 * go on it->stale, to be removed when the run starts again: one run, one record.  Only files
 * of ours and no link, and not while a run still writes them (it holds a lock on its log). */
static void note_stale(item *it, const char *json_path, const run_outcome *o)
{
    char log[PATH_MAX];
    const size_t n = strlen(json_path);
    if (n < 5 || n >= sizeof log || strcmp(o->log, json_path) == 0) return;
    memcpy(log, json_path, n - 5);
    snprintf(log + n - 5, sizeof log - (n - 5), ".txt");
    if (strcmp(o->log, log) != 0 || !own_regular_file(json_path) || !own_regular_file(log)) return;
    const int fd = open(log, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    const int free_now = flock(fd, LOCK_EX | LOCK_NB) == 0; /* (no run holds it: LOCK_SH while it runs) */
    if (close(fd) != 0 || !free_now) return;
    if (strv_push(&it->stale, &it->nstale, json_path) || strv_push(&it->stale, &it->nstale, log))
        fprintf(stderr, "aebench: out of memory: %s stays\n", json_path);
}

/* As the run starts again: its unfinished earlier try's files go (a link is not followed:
 * a name that is one now is removed itself, its target untouched). */
static void remove_stale(item *it)
{
    for (int i = 0; i < it->nstale; i++)
        if (own_regular_file(it->stale[i]) && unlink(it->stale[i]) != 0 && errno != ENOENT)
            fprintf(stderr, "aebench: cannot remove %s (an earlier try of this run): %s\n", it->stale[i],
                    strerror(errno));
    strv_free(&it->stale, &it->nstale);
}

/* --resume: the newest JSON in the results directory that says ok for this method, shape,
 * window, iterations, backend, dtype and checkpointing; the records of this run's tries
 * that did not finish (the same, and its options' fingerprint) go on it->stale. */
static int find_done(item *it, const child_result *pr, run_outcome *found)
{
    DIR *d = opendir(it->run_cfg.results_dir);
    if (!d) return -1;
    const engine_vtbl *eng = engine_find(it->run_cfg.method);
    char w[16], fingerprint[24];
    window_text(&it->run_cfg, w, sizeof w);
    snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)cli_fingerprint(&it->run_cfg));
    struct dirent *de;
    struct timespec newest = {0, 0};
    int have = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "log_", 4) != 0 || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", it->run_cfg.results_dir, de->d_name) >= (int)sizeof path) continue;
        run_outcome o;
        struct stat st;
        if (stat(path, &st) != 0 || run_outcome_read(path, &o) != 0) continue;
        const int same_run = strcmp(o.method, eng->name) == 0 &&
                    o.layers == pr->shape[0] && o.hidden == pr->shape[1] && o.heads == pr->shape[2] &&
                    o.seq == pr->shape[3] && o.batch == pr->shape[4] && o.vocab == pr->shape[5] &&
                    strcmp(o.window, w) == 0 && o.iters == it->run_cfg.iters &&
                    strcmp(o.backend, pr->backend) == 0 && o.recompute == it->run_cfg.eng.recompute &&
                    strcmp(o.dtype, it->run_cfg.eng.bf16 ? "bf16" : "fp32") == 0 &&
                    (o.world ? o.world : 1) == (it->run_cfg.ranks > 1 ? it->run_cfg.ranks : 1) &&
                    (!o.fingerprint[0] || strcmp(o.fingerprint, fingerprint) == 0);
        const int match = same_run && strcmp(o.status, "ok") == 0;
        if (same_run && o.fingerprint[0] && (strcmp(o.status, "interrupted") == 0 || strcmp(o.status, "running") == 0))
            note_stale(it, path, &o);
        if (match && (!have || st.st_mtim.tv_sec > newest.tv_sec ||
                      (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec))) {
            have = 1;
            newest = st.st_mtim;
            *found = o;
        }
    }
    closedir(d);
    return have ? 0 : -1;
}

static int resolve_resume(const sweep *s, item *it, char *err, size_t errlen)
{
    child_result pr;
    if (probe_item(s, it, &pr, err, errlen)) return -1;
    if (it->find_max) {
        const int shape5[5] = {pr.shape[1], pr.shape[2], pr.shape[3], pr.shape[4], pr.shape[5]};
        if (findmax_lookup(it->run_cfg.results_dir, engine_find(it->run_cfg.method)->name, shape5, it->run_cfg.eng.window,
                           pr.backend, it->run_cfg.gpu_mem_limit, it->run_cfg.cpu_mem_limit, &it->fm) == 0) {
            it->st = ST_SKIPPED;
            it->o = it->fm.best;
            snprintf(it->log, sizeof it->log, "%s", it->fm.log);
        }
        return 0;
    }
    if (find_done(it, &pr, &it->o) == 0) {
        /* (done: a try that did not finish before the one that did is the record's history) */
        strv_free(&it->stale, &it->nstale);
        it->st = ST_SKIPPED;
        snprintf(it->log, sizeof it->log, "%s", it->o.log);
    }
    return 0;
}

static void hms(double seconds, char *buf, size_t len)
{
    long t = (long)(seconds + 0.5);
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

static const char *status_text(const item *it, char *buf, size_t len)
{
    switch (it->st) {
    case ST_OK: return "ok";
    case ST_OOM: return "oom";
    case ST_ERROR: return "error";
    case ST_CRASHED: snprintf(buf, len, "crashed(%s)", it->signal); return buf;
    case ST_SKIPPED: return "ok (resumed)";
    case ST_DUPLICATE: snprintf(buf, len, "= #%d", it->dup_of + 1); return buf;
    case ST_DRY: return "dry run";
    case ST_PENDING: break;
    }
    return "not run";
}

static void run_training(const sweep *s, item *it, char *err, size_t errlen)
{
    child_result cr;
    remove_stale(it);
    if (child_run(s->exe, it->argv, CHILD_SHOW, &cr, err, errlen)) {
        it->st = ST_ERROR;
        fprintf(stderr, "aebench: %s\n", err);
        return;
    }
    it->exit_code = cr.exited ? cr.exit_code : -1;
    snprintf(it->log, sizeof it->log, "%s", cr.log);
    /* (a run whose record a full disk cut removes its log: the summary names no missing file) */
    if (it->log[0] && access(it->log, F_OK) != 0) it->log[0] = '\0';
    if (cr.json[0]) run_outcome_read(cr.json, &it->o);
    if (!cr.exited) {
        it->st = ST_CRASHED;
        child_signal_name(cr.signal, it->signal, sizeof it->signal);
    } else if (s->run_cfg->dry_run) {
        it->st = cr.exit_code == 0 ? ST_DRY : ST_ERROR;
    } else if (it->o.have) {
        /* The JSON is the record; the exit code agrees with it unless writing it failed. */
        it->st = strcmp(it->o.status, "ok") == 0 ? (cr.exit_code == 0 ? ST_OK : ST_ERROR)
                 : strcmp(it->o.status, "oom") == 0 ? ST_OOM : ST_ERROR;
    } else {
        it->st = cr.exit_code == EXIT_RUN_OOM ? ST_OOM : ST_ERROR;
    }
}

static void run_findmax(const sweep *s, item *it, char *err, size_t errlen)
{
    if (findmax_run(s->exe, it->argv, it->argc, &it->run_cfg, &it->fm, err, errlen)) {
        fprintf(stderr, "aebench: %s%s%s\n", it->where, it->where[0] ? ": " : "", err);
        it->st = ST_ERROR;
        return;
    }
    if (s->run_cfg->dry_run) {
        it->st = ST_DRY;
        return;
    }
    it->o = it->fm.best;
    snprintf(it->log, sizeof it->log, "%s", it->fm.log);
    it->st = it->fm.status == EXIT_RUN_OK ? ST_OK : it->fm.status == EXIT_RUN_OOM ? ST_OOM : ST_ERROR;
}

static void print_summary(const sweep *s, double seconds)
{
    char t[32];
    hms(seconds, t, sizeof t);
    printf("\nsummary: %s | %d run%s | %s\n", s->title, s->n, s->n == 1 ? "" : "s", t);
    printf("%3s  %-14s %-26s %-18s %10s %10s %9s %11s %11s  %s\n", "#", "engine", "run", "status",
           "ms/iter", "samples/s", "TFLOP/s", "peak GPU", "peak host", "log");
    for (int i = 0; i < s->n; i++) {
        const item *it = &s->items[i];
        const item *src = it->st == ST_DUPLICATE ? &s->items[it->dup_of] : it;
        const run_outcome *o = &src->o;
        char stbuf[48], run[64], ms[24] = "-", sps[24] = "-", tf[24] = "-", g[24] = "-", h[24] = "-";
        const char *st = status_text(it, stbuf, sizeof stbuf);
        const engine_vtbl *eng = engine_find(it->run_cfg.method);
        if (it->find_max && (src->st == ST_OK || src->st == ST_SKIPPED || src->st == ST_OOM))
            snprintf(run, sizeof run, "max l%d h%d b%d", src->fm.max_layers, it->run_cfg.eng.shape.hidden,
                     it->run_cfg.eng.shape.batch);
        else if (o->have)
            snprintf(run, sizeof run, "l%d h%d b%d w%s", o->layers, o->hidden, o->batch, o->window);
        else
            snprintf(run, sizeof run, "%.63s", strchr(it->desc, ' ') ? strchr(it->desc, ' ') + 1 : it->desc);
        if (o->have && strcmp(o->status, "ok") == 0) {
            snprintf(ms, sizeof ms, "%.1f", o->median_ms);
            snprintf(sps, sizeof sps, "%.3f", o->samples_per_s);
            snprintf(tf, sizeof tf, "%.3f", o->model_tflops);
        }
        if (o->have) {
            format_bytes(o->peak_gpu, g, sizeof g);
            format_bytes(o->peak_host, h, sizeof h);
        }
        printf("%3d  %-14s %-26s %-18s %10s %10s %9s %11s %11s  %s\n", i + 1, eng ? eng->name : "?", run,
               st, ms, sps, tf, g, h, src->log[0] ? src->log : "-");
        if (it->find_max && src->st != ST_PENDING && src->st != ST_ERROR && src->st != ST_DRY) {
            char sb[32];
            format_bytes(src->fm.next_short, sb, sizeof sb);
            printf("     find-max: largest l%d = %.3f B parameters; l%d stopped by %s%s%s\n",
                   src->fm.max_layers, src->fm.params / 1e9, src->fm.next_layers,
                   src->fm.next_memory[0] ? src->fm.next_memory : "an error",
                   src->fm.next_memory[0] ? " memory, short by " : "", src->fm.next_memory[0] ? sb : "");
        }
    }
    printf("exit codes: 0 all ok | 3 some out of memory, none failed | 1 some failed or crashed\n");
    fflush(stdout);
}

/* ---- building the items ------------------------------------------------------------------ */

static int build_items(sweep *s, int argc, char **argv, char *err, size_t errlen)
{
    const run_config *run_cfg = s->run_cfg;
    char **base = NULL;
    int nbase = 0;
    int status = -1;
    if (run_cfg->config_runs) {
        if (cli_given(run_cfg, "method") && strcmp(run_cfg->method, "all") == 0) {
            snprintf(err, errlen, "-m all with a run list: the runs name their methods (\"method\": \"all\")");
            return -1;
        }
        cli_runlist list;
        if (cli_load_runlist(run_cfg->config_path, &list, err, errlen)) return -1;
        if (cli_child_args(argc, argv, 1, 0, &base, &nbase)) {
            cli_runlist_free(&list);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        snprintf(s->title, sizeof s->title, "config %.3800s%s%s", run_cfg->config_path,
                 list.description[0] ? ": " : "", list.description);
        for (int i = 0; i < list.n; i++) {
            const cli_run *r = &list.runs[i];
            item *it = add_item(s);
            if (!it || strv_push(&it->argv, &it->argc, "aebench") ||
                strv_push_all(&it->argv, &it->argc, r->args, r->nargs) ||
                strv_push_all(&it->argv, &it->argc, base, nbase)) {
                snprintf(err, errlen, "out of memory");
                cli_runlist_free(&list);
                goto out;
            }
            /* The file name is added when a message is printed (item_error). */
            snprintf(it->where, sizeof it->where, "%s", r->where);
            it->find_max = r->find_max || run_cfg->find_max;
            /* A layer count on the command line overrides layers-from like any other key. */
            if (!cli_given(run_cfg, "layers")) snprintf(it->layers_from, sizeof it->layers_from, "%s", r->layers_from);
        }
        cli_runlist_free(&list);
    } else {
        const int all = strcmp(run_cfg->method, "all") == 0;
        if (cli_child_args(argc, argv, 0, all, &base, &nbase)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        snprintf(s->title, sizeof s->title, "%s%s", all ? "-m all" : run_cfg->method, run_cfg->find_max ? " --find-max" : "");
        for (int i = 0; i < engine_count(); i++) {
            const engine_vtbl *eng = engine_at(i);
            if (!all && engine_find(run_cfg->method) != eng) continue;
            if (all && !engine_in_all(eng)) continue;
            char why[512];
            /* (checked at the world each child run will have: --ranks N) */
            engine_config at_world = run_cfg->eng;
            if (run_cfg->ranks > 1) at_world.world = run_cfg->ranks;
            at_world.local_world = 0;
            if (all && engine_config_refused(eng, &at_world, why, sizeof why)) {
                /* -m all with an option only some engines have (--dpu, --offload nvme,
                 * --dtype bf16): the others are left out, and said so. */
                printf("aebench: -m all: leaving out %s: %s\n", eng->name, why);
                continue;
            }
            item *it = add_item(s);
            if (!it || strv_push(&it->argv, &it->argc, "aebench") ||
                strv_push_all(&it->argv, &it->argc, base, nbase) ||
                (all && (strv_push(&it->argv, &it->argc, "--method") ||
                         strv_push(&it->argv, &it->argc, eng->name)))) {
                snprintf(err, errlen, "out of memory");
                goto out;
            }
            it->find_max = run_cfg->find_max;
        }
    }
    status = 0;
out:
    strv_free(&base, &nbase);
    return status;
}

/* The error prefix of an item: "config F: runs[3]". */
static int item_error(const sweep *s, const item *it, const char *msg)
{
    if (s->run_cfg->config_runs && strncmp(msg, "config ", 7) != 0)
        fprintf(stderr, "aebench: config %s: %s\n", s->run_cfg->config_path, msg);
    else
        fprintf(stderr, "aebench: %s\n", msg);
    (void)it;
    return EXIT_BAD_INPUT;
}

static int same_argv(const item *a, const item *b)
{
    if (a->argc != b->argc || a->find_max != b->find_max) return 0;
    for (int i = 0; i < a->argc; i++)
        if (strcmp(a->argv[i], b->argv[i]) != 0) return 0;
    return 1;
}

/* One sweep at a time in a results directory.  The lock (flock) is held through a descriptor
 * that every run the sweep starts inherits (no close-on-exec, on purpose: mpiexec and its ranks
 * too), so it is free only when the sweep and every process of its runs have ended, however
 * they ended: a --resume started meanwhile says so and waits instead of running a run twice.
 * The descriptor, or -1 with err set. */
static int lock_results(const char *dir, char *err, size_t errlen)
{
    char path[4200];
    if (report_make_dirs(dir, err, errlen)) return -1;
    snprintf(path, sizeof path, "%.4096s/.aebench-sweep.lock", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the sweep lock %.1000s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = "";
        const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        fprintf(stderr, "aebench: %s is in use by another sweep or a run it started (the sweep was pid %s); "
                        "waiting until they end\n", dir, holder[0] ? holder : "?");
        while (flock(fd, LOCK_EX) != 0) {
            if (errno == EINTR) continue;
            snprintf(err, errlen, "cannot lock %.1000s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    char pid[32];
    const int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        if (errno == ENOSPC) {
            /* a full disk: every run's record would fail, one after the other; said once, before
             * any starts (the lock file stays, as after every sweep: a waiter may hold it open) */
            snprintf(err, errlen, "disk full writing %.1000s", path);
            close(fd);
            return -1;
        }
        fprintf(stderr, "aebench: cannot write %s: %s\n", path, strerror(errno));
    }
    return fd;
}

int sweep_main(int argc, char **argv, const run_config *run_cfg)
{
    char err[2048];
    if (run_cfg->report_fd > 0) {
        /* A child of a sweep is one run; a sweep inside it would fork without end.  (child.c
         * gives every child --report-fd: the pipe its result lines come back through,
         * report_to_parent; it sets nothing about the run.) */
        fprintf(stderr, "aebench: a child run of a sweep cannot start a sweep (-m all, a run list, --find-max)\n");
        return EXIT_BAD_INPUT;
    }
    sweep s;
    memset(&s, 0, sizeof s);
    s.run_cfg = run_cfg;
    if (child_self_exe(s.exe, sizeof s.exe, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        return EXIT_RUN_ERROR;
    }
    int code = EXIT_BAD_INPUT, lock_fd = -1;
    if (build_items(&s, argc, argv, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        goto done;
    }
    /* Build: every run parses, before any starts. */
    for (int i = 0; i < s.n; i++)
        if (check_item(&s.items[i], err, sizeof err)) {
            code = item_error(&s, &s.items[i], err);
            goto done;
        }
    /* Resolve: layers-from (bad input: before anything is written), duplicates, --resume. */
    for (int i = 0; i < s.n; i++) {
        item *it = &s.items[i];
        if (it->layers_from[0] && resolve_layers_from(&s, it, err, sizeof err)) {
            code = item_error(&s, it, err);
            goto done;
        }
    }
    /* A --find-max whose configuration its runs would refuse (what only a run resolves: the
     * ranks, the global batch) is bad input of the whole command: its dry run says why, in one
     * line, and nothing is written. */
    for (int i = 0; i < s.n; i++) {
        item *it = &s.items[i];
        child_result pr;
        if (!it->find_max || probe_item(&s, it, &pr, err, sizeof err) == 0) continue;
        if (pr.exited && pr.exit_code == EXIT_BAD_INPUT) goto done; /* (the child said why) */
        code = item_error(&s, it, err);
        goto done;
    }
    /* A results directory that cannot be made or take files is bad input, as it is to one run
     * (run_outputs_refused): said in one line before any run starts. */
    if (!run_cfg->dry_run && run_outputs_refused(run_cfg, 1, err, sizeof err) != 0) {
        fprintf(stderr, "aebench: %s\n", err);
        code = EXIT_BAD_INPUT;
        goto done;
    }
    if (!run_cfg->dry_run && (lock_fd = lock_results(run_cfg->results_dir, err, sizeof err)) < 0) {
        fprintf(stderr, "aebench: %s\n", err);
        code = EXIT_RUN_ERROR;
        goto done;
    }
    for (int i = 0; i < s.n; i++)
        for (int j = 0; j < i && s.items[i].st == ST_PENDING; j++)
            if (s.items[j].st != ST_DUPLICATE && same_argv(&s.items[i], &s.items[j])) {
                s.items[i].st = ST_DUPLICATE;
                s.items[i].dup_of = j;
            }
    if (run_cfg->resume && !run_cfg->dry_run)
        for (int i = 0; i < s.n; i++)
            if (s.items[i].st == ST_PENDING && resolve_resume(&s, &s.items[i], err, sizeof err)) {
                code = item_error(&s, &s.items[i], err);
                goto done;
            }

    /* Run. */
    double total_cost = 0, done_cost = 0;
    for (int i = 0; i < s.n; i++)
        if (s.items[i].st == ST_PENDING) total_cost += s.items[i].cost;
    const double t0 = wall_ms();
    printf("aebench sweep: %s | %d run%s\n", s.title, s.n, s.n == 1 ? "" : "s");
    for (int i = 0; i < s.n; i++) {
        item *it = &s.items[i];
        char el[32], eta[32] = "--:--:--", st[48];
        const double elapsed = (wall_ms() - t0) / 1000.0;
        hms(elapsed, el, sizeof el);
        /* Time so far per unit of model FLOPs, times what is left: runs of different sizes
         * (case 4's 16...92 layers) then get a fair share each. */
        if (done_cost > 0) hms(elapsed / done_cost * (total_cost - done_cost), eta, sizeof eta);
        if (it->st != ST_PENDING) {
            printf("[%d/%d] %s | %s | %s\n", i + 1, s.n, it->desc, status_text(it, st, sizeof st),
                   it->st == ST_SKIPPED ? it->log : "");
            continue;
        }
        printf("[%d/%d] %s | elapsed %s | ETA %s\n", i + 1, s.n, it->desc, el, eta);
        fflush(stdout);
        const double ts = wall_ms();
        if (it->find_max) run_findmax(&s, it, err, sizeof err);
        else run_training(&s, it, err, sizeof err);
        it->seconds = (wall_ms() - ts) / 1000.0;
        done_cost += it->cost;
        printf("[%d/%d] %s: %s", i + 1, s.n, it->desc, status_text(it, st, sizeof st));
        if (it->o.have && strcmp(it->o.status, "ok") == 0)
            printf(" | %.1f ms/it | %.3f samples/s", it->o.median_ms, it->o.samples_per_s);
        printf(" | %.1f s\n", it->seconds);
        fflush(stdout);
    }
    if (!run_cfg->dry_run) print_summary(&s, (wall_ms() - t0) / 1000.0);

    /* The worst outcome: a failure or crash over out-of-memory over ok. */
    code = EXIT_RUN_OK;
    for (int i = 0; i < s.n; i++) {
        const item_status st = s.items[i].st;
        if (st == ST_ERROR || st == ST_CRASHED) code = EXIT_RUN_ERROR;
        else if (st == ST_OOM && code == EXIT_RUN_OK) code = EXIT_RUN_OOM;
    }
done:
    if (lock_fd >= 0) close(lock_fd);
    sweep_free(&s);
    return code;
}
