/*
 * rerun.c — aebench --rerun FILE.json (rerun.h): the record read (no link followed, at most
 * CLI_JSON_MAX_BYTES), its settings made a command line, the differences said, and that
 * command line handed back to main, which runs it as if typed (a --ranks N record starts its
 * job; under mpirun every rank does the same and rank 0 speaks).
 */
#include "rerun.h"

#include "cli.h"
#include "provenance.h"
#include "report.h"
#include "run.h"
#include "strv.h"
#include "../engines/runtime/comm.h"
#include "../kernels/gpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

/* What a rerun keeps of the record. */
typedef struct record {
    const char *path;
    cJSON *root;
    const cJSON *settings;
    const cJSON *build; /* NULL: the record says nothing of its build */
    const engine_vtbl *eng;
    const char *version, *device, *backend, *fingerprint, *status;
    int world;
} record;

/* Only these may be given beside --rerun: where the results go, and where the run runs. */
static const char *const rerun_and_overrides[] = {"rerun", "results", "device", "hosts", NULL};
static const char *const rerun_only[] = {"rerun", NULL};

/* A string member of o ("" when absent or not a string, so that messages can name it). */
static const char *text_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : "";
}

/* The record at path, checked to be an aebench run record with its settings: 0, or -1 with
 * one line in err. */
static int read_record(const char *path, record *rec, char *err, size_t errlen)
{
    memset(rec, 0, sizeof *rec);
    rec->path = path;
    /* (its own file, never what a link points at: O_NOFOLLOW; a FIFO cannot block the open) */
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP ? cli_fail(err, errlen, "--rerun %s: a symbolic link (not followed: name the record "
                                         "itself)", path)
                              : cli_fail(err, errlen, "--rerun %s: %s", path, strerror(errno));
    long long size = 0;
    char *text = report_read_fd_max(fd, CLI_JSON_MAX_BYTES, &size);
    if (!text) {
        const int e = errno;
        if (e == EFBIG)
            return cli_fail(err, errlen, "--rerun %s: %lld bytes, more than a run record has (at most %d read)", path,
                            size, (int)CLI_JSON_MAX_BYTES);
        return e == EINVAL ? cli_fail(err, errlen, "--rerun %s: not a regular file (a run's log_*.json was expected)", path)
                           : cli_fail(err, errlen, "--rerun %s: %s", path, strerror(e));
    }
    rec->root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(rec->root))
        return cli_fail(err, errlen, "--rerun %s: not a JSON object (a run's log_*.json was expected)", path);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(rec->root, "config");
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(rec->root, "world");
    rec->settings = cJSON_GetObjectItemCaseSensitive(rec->root, "settings");
    rec->version = text_of(rec->root, "aebench_version");
    rec->fingerprint = text_of(cfg, "fingerprint");
    rec->backend = text_of(cfg, "backend");
    rec->device = text_of(rec->root, "device");
    rec->status = text_of(rec->root, "status");
    if (!rec->version[0] || !cJSON_IsObject(cfg) || !rec->fingerprint[0] || !cJSON_IsNumber(world) ||
        !text_of(rec->root, "method")[0])
        return cli_fail(err, errlen, "--rerun %s: not an aebench run record (no aebench_version, method, world or "
                        "config.fingerprint)", path);
    if (!cli_is_fingerprint(rec->fingerprint, strlen(rec->fingerprint)))
        return cli_fail(err, errlen, "--rerun %s: config.fingerprint '%.40s' is not 16 hex digits (what aebench "
                        "writes)", path, rec->fingerprint);
    if (!cJSON_IsObject(rec->settings))
        return cli_fail(err, errlen, "--rerun %s: the record holds no settings (an aebench before --rerun wrote it, "
                        "or its settings could not be had): it cannot be rerun", path);
    rec->world = world->valueint;
    if (rec->world < 1) return cli_fail(err, errlen, "--rerun %s: world %d: not a run's", path, rec->world);
    if (strcmp(rec->backend, "cpu") != 0 && strcmp(rec->backend, "cuda") != 0)
        return cli_fail(err, errlen, "--rerun %s: config.backend '%s' is neither cpu nor cuda", path, rec->backend);
    rec->eng = engine_find(text_of(rec->root, "method"));
    if (!rec->eng)
        return cli_fail(err, errlen, "--rerun %s: its engine '%s' is not one this aebench has", path,
                        text_of(rec->root, "method"));
    const cJSON *build = cJSON_GetObjectItemCaseSensitive(rec->root, "build");
    rec->build = cJSON_IsObject(build) ? build : NULL;
    return 0;
}

/* The record's settings split: what the rerun gives (run), and the options of other engines
 * that a sweep handed to every run, which did nothing in this one (left_out: the fingerprint
 * holds them, but the run would refuse them as options its engine does not have); without
 * what was given beside --rerun (asked), which replaces it.  The options that name one job's
 * state (OPTION_ONE_JOB: a checkpoint store's id, its recovery) go: a job's store is gone with
 * it, and a rerun is the whole job again (its --fail-at included). */
static int split_settings(const record *rec, const run_config *asked, cJSON **run, cJSON **left_out, char *err,
                          size_t errlen)
{
    *run = cJSON_CreateObject();
    *left_out = cJSON_CreateObject();
    if (!*run || !*left_out) return cli_fail(err, errlen, "out of memory");
    for (const cJSON *item = rec->settings->child; item; item = item->next) {
        if (!item->string) continue;
        if (cli_option_one_job(item->string)) continue;
        /* (what was given beside --rerun replaces the record's) */
        if (cli_given(asked, item->string)) continue;
        cJSON *to = cli_option_taken_by(item->string, rec->eng) ? *run : *left_out;
        cJSON *copy = cJSON_Duplicate(item, 1);
        if (!copy || !cJSON_AddItemToObject(to, item->string, copy)) {
            cJSON_Delete(copy);
            return cli_fail(err, errlen, "out of memory");
        }
    }
    return 0;
}

/* The rerun's command line into *out (argv0, the settings, the engine and device where they
 * left them to the defaults and no --device was given beside --rerun, what was), and into *fp the same with the
 * options left out, what the record's fingerprint was made of. */
static int rerun_argv(const record *rec, int argc, char **argv, int device_given, const cJSON *run,
                      const cJSON *left_out, char ***out, int *nout, char ***fp, int *nfp, char *err, size_t errlen)
{
    char **tokens = NULL, **extra = NULL, **given = NULL;
    int nt = 0, ne = 0, ng = 0, bad = 0;
    if (provenance_config_args(run, &tokens, &nt, err, errlen) || provenance_config_args(left_out, &extra, &ne, err, errlen))
        bad = 1;
    else if (cli_args_without(argv + 1, argc - 1, rerun_only, &given, &ng) != 0)
        bad = cli_fail(err, errlen, "out of memory");
    if (!bad) {
        bad = strv_push(out, nout, argv[0]) || strv_push_all(out, nout, tokens, nt);
        if (!bad && !cJSON_GetObjectItemCaseSensitive(run, "method"))
            bad = strv_push(out, nout, "--method") || strv_push(out, nout, rec->eng->name);
        if (!bad && !cJSON_GetObjectItemCaseSensitive(run, "device") && !device_given)
            bad = strv_push(out, nout, "--device") || strv_push(out, nout, rec->backend);
        bad = bad || strv_push_all(out, nout, given, ng) || strv_push_all(fp, nfp, *out, *nout) ||
              strv_push_all(fp, nfp, extra, ne);
        if (bad) cli_fail(err, errlen, "out of memory");
    }
    strv_free(&tokens, &nt);
    strv_free(&extra, &ne);
    strv_free(&given, &ng);
    return bad ? -1 : 0;
}

/* The settings as this build parses them, into run_cfg (what the record's run had, its CPU
 * preset included): 0, or -1 with err. */
static int parse_settings(const record *rec, char **fp, int nfp, run_config *run_cfg, char *err, size_t errlen)
{
    /* (only what a config holds: a record whose settings name --help or an unknown option is
     * refused here, not acted on) */
    char why[600];
    cJSON *check = cli_args_config(fp + 1, nfp - 1, why, sizeof why);
    if (!check) return cli_fail(err, errlen, "--rerun %s: its settings: %s", rec->path, why);
    cJSON_Delete(check);
    if (cli_parse(nfp, fp, run_cfg, why, sizeof why) != CLI_RUN)
        return cli_fail(err, errlen, "--rerun %s: its settings do not make a run here: %s", rec->path, why);
    /* (a record is one training run of its engine: settings edited into a sweep, a search or
     * a prediction are not what it records) */
    if (engine_find(run_cfg->method) != rec->eng || run_cfg->find_max || run_cfg->config_runs || run_cfg->dry_run || run_cfg->calibrate ||
        run_cfg->predict || run_cfg->search)
        return cli_fail(err, errlen, "--rerun %s: its settings are not one training run of its engine %s", rec->path,
                        rec->eng->name);
    if (run_cfg->eng.device == DEVICE_CPU) cli_apply_cpu_preset(run_cfg);
    return 0;
}

/* One "differs" line when the record's and this build's values are not the same. */
static int differs(const char *what, const char *theirs, const char *ours)
{
    if (strcmp(theirs, ours) == 0) return 0;
    printf("  differs: %s: the record's %s | here %s\n", what, theirs[0] ? theirs : "(not said)", ours);
    return 1;
}

/* The words of a that b lacks, space-separated, into out. */
static void words_missing(const char *a, const char *b, char *out, size_t len)
{
    out[0] = '\0';
    size_t used = 0;
    for (const char *w = a; *w;) {
        while (*w == ' ') w++;
        const size_t n = strcspn(w, " ");
        if (!n) break;
        int found = 0;
        for (const char *v = b; *v && !found;) {
            while (*v == ' ') v++;
            const size_t m = strcspn(v, " ");
            found = m == n && strncmp(v, w, n) == 0;
            v += m;
        }
        if (!found && used + n + 2 < len) used += (size_t)snprintf(out + used, len - used, "%s%.*s", used ? " " : "", (int)n, w);
        w += n;
    }
}

/* This machine's device for the run (the backend run_cfg names; rank 0's GPU). */
static void device_here(const run_config *run_cfg, char *buf, size_t len)
{
    char name[256];
    if (run_cfg->eng.device == DEVICE_CPU) snprintf(buf, len, "cpu");
    else if (gpt_cuda_device_name(0, name, (int)sizeof name) == GPT_OK) snprintf(buf, len, "%s", name);
    else snprintf(buf, len, "no CUDA device (%s; --device cpu beside --rerun runs it on the CPU backend)",
                  gpt_cuda_device_count() > 0 ? "none usable" : "none here, or this build has no CUDA");
}

/* A --ranks job of the record spread over several machines (--hosts): its plan says how many
 * of its ranks one machine had.  1 when said, else 0. */
static int say_machines(const record *rec, const run_config *run_cfg)
{
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec->root, "plan"), "per_machine");
    const cJSON *local = cJSON_GetObjectItemCaseSensitive(pm, "ranks");
    if (!cJSON_IsNumber(local) || local->valueint <= 0 || local->valueint >= rec->world) return 0;
    printf("  differs: machines: the record's job had %d of its %d ranks on a machine | here %s\n", local->valueint,
           rec->world, run_cfg->hosts_path[0] ? "the machines of --hosts" : "all on this one (--hosts FILE spreads them)");
    return 1;
}

/* What differs between the record and this machine, build and parse of its settings. */
static void say_differences(const record *rec, const run_config *run_cfg, const char *fingerprint, const char *left_out)
{
    build_info here;
    provenance_build(&here);
    printf("aebench: rerun of %s: %s, %d rank%s, status %s, fingerprint %s\n", rec->path, rec->eng->name, rec->world,
           rec->world == 1 ? "" : "s", rec->status[0] ? rec->status : "(not said)", rec->fingerprint);
    int n = differs("aebench version", rec->version, AEBENCH_VERSION);
    n += differs("commit", text_of(rec->build, "commit"), here.commit);
    char only_theirs[2048], only_ours[2048];
    const char *config = text_of(rec->build, "config");
    if (strcmp(config, here.config) != 0) {
        words_missing(config, here.config, only_theirs, sizeof only_theirs);
        words_missing(here.config, config, only_ours, sizeof only_ours);
        printf("  differs: build config: the record's has %s | here %s\n", only_theirs[0] ? only_theirs : "(nothing else)",
               only_ours[0] ? only_ours : "(nothing else)");
        n++;
    }
    /* the device by its name: the record's description adds what the backend chose ("(sm_90,
     * 132 SMs, ...)", "(2 threads)") */
    char dev[300], theirs[300];
    device_here(run_cfg, dev, sizeof dev);
    snprintf(theirs, sizeof theirs, "%s", rec->device);
    theirs[strcspn(theirs, "(")] = '\0';
    for (size_t k = strlen(theirs); k > 0 && theirs[k - 1] == ' '; k--) theirs[k - 1] = '\0';
    if (strcmp(theirs, dev) != 0) {
        printf("  differs: device: the record's %s | here %s\n", rec->device[0] ? rec->device : "(not said)", dev);
        n++;
    }
    n += differs("MPI", text_of(rec->build, "mpi"), here.mpi);
    n += differs("NCCL", text_of(rec->build, "nccl"), here.nccl);
    n += differs("CUDA runtime", text_of(rec->build, "cuda_runtime"), here.cuda_runtime);
    n += differs("CUDA driver", text_of(rec->build, "cuda_driver"), here.cuda_driver);
    n += differs("CPU", text_of(rec->build, "cpu"), here.cpu);
    if (strcmp(rec->fingerprint, fingerprint) != 0) {
        printf("  differs: fingerprint: the record's %s | its settings here %s: %s\n", rec->fingerprint, fingerprint,
               cli_given(run_cfg, "device") && strcmp(run_cfg->eng.device == DEVICE_CPU ? "cpu" : "cuda", rec->backend) != 0
                   ? "another --device"
                   : "the defaults changed between the two builds (the same settings make another run here)");
        n++;
    }
    n += say_machines(rec, run_cfg);
    if (left_out && left_out[0])
        printf("  left out: %s (not %s's options: its sweep gave them to every run, and they did nothing in this one)\n",
               left_out, rec->eng->name);
    if (!n) printf("  the same build, commit, device, libraries and fingerprint\n");
}

/* A record of N ranks reruns on N ranks: a --ranks N record starts its own job (or runs under
 * an mpirun of N); one of plain mpirun only under the same mpirun.  0, or -1 with err. */
static int world_refused(const record *rec, const run_config *run_cfg, int launched, char *err, size_t errlen)
{
    const int ranks = run_cfg->ranks > 0 ? run_cfg->ranks : 1;
    if (rec->world > 1 && ranks == 1 && launched != rec->world)
        return cli_fail(err, errlen, "--rerun %s: a job of %d ranks started by mpirun: rerun it the same way (mpirun -n %d "
                        "aebench --rerun %s)", rec->path, rec->world, rec->world, rec->path);
    if (rec->world != ranks && !(rec->world > 1 && ranks == 1))
        return cli_fail(err, errlen, "--rerun %s: its settings say --ranks %d, but the record's job had %d ranks", rec->path,
                        ranks, rec->world);
    if (launched > 1 && launched != rec->world)
        return cli_fail(err, errlen, "--rerun %s: a run of %d rank%s, here under an mpirun of %d: %s", rec->path,
                        rec->world, rec->world == 1 ? "" : "s", launched,
                        ranks > 1 ? "without mpirun it starts its ranks itself (--ranks)" : "run it without mpirun");
    return 0;
}

/* Whether argv may ask --rerun (getopt takes a long option by any unambiguous prefix, and
 * every one starts "--rer"; so does --rerun-of, which the parse then tells apart). */
static int may_ask_rerun(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--rer", 5) == 0) return 1;
    return 0;
}

int rerun_prepare(int argc, char **argv, rerun_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!may_ask_rerun(argc, argv)) return RERUN_NONE;
    run_config *run_cfg = calloc(2, sizeof *run_cfg);
    if (!run_cfg) return RERUN_NONE; /* (main's own parse, in less memory, then says what it can) */
    char err[2048];
    int code = RERUN_NONE;
    /* (a bad command line is main's to name, once, on rank 0: as if --rerun were not there) */
    const cli_outcome asked = cli_parse(argc, argv, run_cfg, err, sizeof err);
    if (asked == CLI_DONE) code = 0;
    if (asked != CLI_RUN || !run_cfg->rerun_path[0]) {
        free(run_cfg);
        return code;
    }
    int rank = 0;
    const int launched = comm_launched_world(&rank);
    record rec;
    memset(&rec, 0, sizeof rec);
    cJSON *run = NULL, *left_out = NULL;
    char **fp = NULL, **others = NULL, *left_line = NULL;
    int nfp = 0, nothers = 0;
    code = EXIT_BAD_INPUT;
    err[0] = '\0';
    if (cli_args_without(argv + 1, argc - 1, rerun_and_overrides, &others, &nothers) != 0) {
        cli_fail(err, sizeof err, "out of memory");
    } else if (nothers > 0) {
        cli_fail(err, sizeof err, "--rerun runs what its record says: %s cannot be given beside it (only --results, "
                 "--device and --hosts)", others[0]);
    } else if (read_record(run_cfg->rerun_path, &rec, err, sizeof err) == 0 &&
               split_settings(&rec, run_cfg, &run, &left_out, err, sizeof err) == 0 &&
               rerun_argv(&rec, argc, argv, cli_given(run_cfg, "device"), run, left_out, &plan->argv, &plan->argc, &fp,
                          &nfp, err, sizeof err) == 0 &&
               parse_settings(&rec, fp, nfp, &run_cfg[1], err, sizeof err) == 0 &&
               world_refused(&rec, &run_cfg[1], launched, err, sizeof err) == 0 &&
               (left_line = provenance_config_line(left_out, err, sizeof err)) != NULL) {
        char fingerprint[24], *path = realpath(rec.path, NULL), *line = provenance_args_line(plan->argv + 1, plan->argc - 1);
        snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)cli_fingerprint(&run_cfg[1]));
        char *source = malloc(strlen(rec.fingerprint) + strlen(path ? path : rec.path) + 2);
        if (!line || !source) {
            cli_fail(err, sizeof err, "out of memory");
        } else {
            /* (the run's record names the record it reruns: --rerun-of, after the line said, as
             * --ranks hands it on to the ranks) */
            sprintf(source, "%s %s", rec.fingerprint, path ? path : rec.path);
            if (strv_push(&plan->argv, &plan->argc, "--rerun-of") || strv_push(&plan->argv, &plan->argc, source)) {
                cli_fail(err, sizeof err, "out of memory");
            } else {
                if (rank == 0) {
                    say_differences(&rec, &run_cfg[1], fingerprint, left_line);
                    printf("aebench: rerunning: aebench %s\n", line);
                    fflush(stdout);
                }
                code = RERUN_READY;
            }
        }
        free(source);
        free(line);
        free(path);
    }
    if (code != RERUN_READY) {
        if (rank == 0) fprintf(stderr, "aebench: %s\n", err);
        rerun_plan_free(plan);
    }
    free(left_line);
    strv_free(&fp, &nfp);
    strv_free(&others, &nothers);
    cJSON_Delete(run);
    cJSON_Delete(left_out);
    cJSON_Delete(rec.root);
    free(run_cfg);
    return code;
}

void rerun_plan_free(rerun_plan *plan)
{
    strv_free(&plan->argv, &plan->argc);
}
