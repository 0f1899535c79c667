/*
 * provenance.c — how a result was made (provenance.h).
 *
 * The one file that asks the libraries their versions: MPI's and NCCL's directly (their
 * headers are on this file's include path exactly when the build links them, as for
 * engines/runtime/collectives.c), CUDA's through the kernel set's seam (kernels/gpt.h), so
 * that cmd/ calls no CUDA.  The Makefile gives this object alone the commit and the build
 * configuration (-D), so a new commit recompiles this file and nothing else.
 */
#include "provenance.h"

#include "cli.h"
#include "strv.h"
#include "../kernels/gpt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AEBENCH_HAVE_MPI
#include <mpi.h>
#endif
#if defined(AEBENCH_HAVE_CUDA) && defined(AEBENCH_HAVE_MPI)
#define PROVENANCE_HAVE_NCCL 1
#include <nccl.h>
#endif

#ifndef AEBENCH_COMMIT
#define AEBENCH_COMMIT "unknown"
#endif
#ifndef AEBENCH_BUILD_CONFIG
#define AEBENCH_BUILD_CONFIG "unknown (not built by the Makefile)"
#endif

/* ---- the build ----------------------------------------------------------------------------- */

/* The CPU's model name from /proc/cpuinfo ("unknown" where there is none). */
static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
        if (n > 0) snprintf(buf, len, "%.*s", (int)n, v);
        break;
    }
    if (fclose(f) != 0) snprintf(buf, len, "unknown");
}

/* CUDA's 1000 x major + 10 x minor as "major.minor". */
static void cuda_version_text(char *buf, size_t len, int v)
{
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

void provenance_build(build_info *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->commit, sizeof b->commit, "%s", AEBENCH_COMMIT);
    b->config = AEBENCH_BUILD_CONFIG;
    snprintf(b->mpi, sizeof b->mpi, "none");
#ifdef AEBENCH_HAVE_MPI
    {
        /* (callable before MPI_Init; MPICH's text is several lines, its first names it) */
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int n = 0;
        if (MPI_Get_library_version(v, &n) == MPI_SUCCESS && n > 0) {
            v[n < (int)sizeof v ? n : (int)sizeof v - 1] = '\0';
            /* its first line, each run of blanks one space ("MPICH Version:\t4.0.2") */
            v[strcspn(v, "\r\n")] = '\0';
            size_t k = 0;
            for (const char *c = v; *c && k + 1 < sizeof b->mpi; c++)
                if (*c != ' ' && *c != '\t') b->mpi[k++] = *c;
                else if (k > 0 && b->mpi[k - 1] != ' ') b->mpi[k++] = ' ';
            while (k > 0 && b->mpi[k - 1] == ' ') k--;
            b->mpi[k] = '\0';
        } else {
            snprintf(b->mpi, sizeof b->mpi, "unknown");
        }
    }
#endif
    snprintf(b->nccl, sizeof b->nccl, "none");
#ifdef PROVENANCE_HAVE_NCCL
    {
        /* (NCCL 2.9 on: 10000 x major + 100 x minor + patch; before: 1000 x major + 100 x minor) */
        int v = 0;
        if (ncclGetVersion(&v) == ncclSuccess && v > 0) {
            const int big = v >= 20900;
            snprintf(b->nccl, sizeof b->nccl, "%d.%d.%d", big ? v / 10000 : v / 1000,
                     big ? (v % 10000) / 100 : (v % 1000) / 100, v % 100);
        } else {
            snprintf(b->nccl, sizeof b->nccl, "unknown");
        }
    }
#endif
    int runtime = 0, driver = 0;
    if (gpt_cuda_versions(&runtime, &driver) == GPT_OK) {
        cuda_version_text(b->cuda_runtime, sizeof b->cuda_runtime, runtime);
        if (driver > 0) cuda_version_text(b->cuda_driver, sizeof b->cuda_driver, driver);
        else snprintf(b->cuda_driver, sizeof b->cuda_driver, "none");
    } else {
        snprintf(b->cuda_runtime, sizeof b->cuda_runtime, "none");
        snprintf(b->cuda_driver, sizeof b->cuda_driver, "none");
    }
    cpu_model(b->cpu, sizeof b->cpu);
}

cJSON *provenance_build_json(const build_info *b)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const struct {
        const char *key, *value;
    } fields[] = {{"commit", b->commit},        {"config", b->config},           {"mpi", b->mpi},
                  {"nccl", b->nccl},            {"cuda_runtime", b->cuda_runtime}, {"cuda_driver", b->cuda_driver},
                  {"cpu", b->cpu}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!cJSON_AddStringToObject(o, fields[i].key, fields[i].value)) {
            cJSON_Delete(o);
            return NULL;
        }
    return o;
}

/* ---- settings as options ------------------------------------------------------------------- */

/* A number as the shortest text that reads back to the same double (integers plainly). */
static void number_text(char *buf, size_t len, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, len, "%.0f", v);
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

int provenance_config_args(const cJSON *config, char ***out, int *nout, char *err, size_t errlen)
{
    *out = NULL;
    *nout = 0;
    for (const cJSON *item = config ? config->child : NULL; item; item = item->next) {
        char opt[128], num[64];
        if (!item->string || snprintf(opt, sizeof opt, "--%s", item->string) >= (int)sizeof opt) {
            strv_free(out, nout);
            return cli_fail(err, errlen, "a setting without a name, or one too long");
        }
        const char *value = NULL;
        if (cJSON_IsFalse(item)) continue; /* (a switch not set: its default) */
        if (cJSON_IsNumber(item)) {
            number_text(num, sizeof num, item->valuedouble);
            value = num;
        } else if (cJSON_IsString(item)) {
            value = item->valuestring;
        } else if (!cJSON_IsTrue(item)) {
            strv_free(out, nout);
            return cli_fail(err, errlen, "setting \"%.100s\": neither a switch, a number nor a string", item->string);
        }
        if (strv_push(out, nout, opt) || (value && strv_push(out, nout, value))) {
            strv_free(out, nout);
            return cli_fail(err, errlen, "out of memory");
        }
    }
    return 0;
}

/* Whether a token needs quoting for a POSIX shell. */
static int needs_quotes(const char *t)
{
    if (!*t) return 1;
    for (const char *c = t; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+%@", *c)) return 1;
    return 0;
}

char *provenance_args_line(char *const *args, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) len += 4 * strlen(args[i]) + 3; /* (every ' becomes '\'' at worst) */
    char *line = malloc(len), *p = line;
    if (!line) return NULL;
    for (int i = 0; i < n; i++) {
        if (i) *p++ = ' ';
        const int quote = needs_quotes(args[i]);
        if (quote) *p++ = '\'';
        for (const char *c = args[i]; *c; c++) {
            if (quote && *c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        if (quote) *p++ = '\'';
    }
    *p = '\0';
    return line;
}

char *provenance_config_line(const cJSON *config, char *err, size_t errlen)
{
    char **args = NULL;
    int n = 0;
    if (provenance_config_args(config, &args, &n, err, errlen) != 0) return NULL;
    char *line = provenance_args_line(args, n);
    strv_free(&args, &n);
    if (!line) cli_fail(err, errlen, "out of memory");
    return line;
}

/* ---- one run's provenance ------------------------------------------------------------------ */

void provenance_of_run(run_provenance *p, int argc, char **argv, int world, const run_config *run_cfg)
{
    memset(p, 0, sizeof *p);
    provenance_build(&p->build);
    /* Who started it: a --ranks supervisor names its notes directory on its ranks' command line
     * (--job-notes), a sweep (or --find-max, --search --verify) its report pipe on its child's
     * (--report-fd). */
    const int supervised = run_cfg->job_notes[0] != '\0';
    p->started_by = world > 1 ? (supervised ? "--ranks" : "mpirun")
                    : run_cfg->report_fd > 0 ? "a sweep" : "the command line";
    char err[512] = "";
    char **args = NULL;
    int n = 0;
    if (cli_child_args(argc, argv, 0, 0, &args, &n) != 0) snprintf(err, sizeof err, "out of memory");
    else p->settings = cli_args_config(args, n, err, sizeof err);
    strv_free(&args, &n);
    /* (a rank of --ranks N: its supervisor took --ranks off its command line) */
    if (p->settings && supervised && world > 1 && !cJSON_GetObjectItemCaseSensitive(p->settings, "ranks") &&
        !cJSON_AddNumberToObject(p->settings, "ranks", world)) {
        cJSON_Delete(p->settings);
        p->settings = NULL;
        snprintf(err, sizeof err, "out of memory");
    }
    if (p->settings && !(p->settings_line = provenance_config_line(p->settings, err, sizeof err))) {
        cJSON_Delete(p->settings);
        p->settings = NULL;
    }
    if (!p->settings)
        fprintf(stderr, "aebench: note: the run's record will not hold its settings (--rerun cannot run it): %s\n", err);
    /* (--rerun-of: what --rerun put on the command line it runs) */
    if (run_cfg->rerun_of.fingerprint[0]) {
        snprintf(p->rerun_fingerprint, sizeof p->rerun_fingerprint, "%s", run_cfg->rerun_of.fingerprint);
        snprintf(p->rerun_of, sizeof p->rerun_of, "%s", run_cfg->rerun_of.path);
    }
}

void provenance_free(run_provenance *p)
{
    cJSON_Delete(p->settings);
    free(p->settings_line);
    p->settings = NULL;
    p->settings_line = NULL;
}

char *provenance_log_lines(const run_provenance *p)
{
    const build_info *b = &p->build;
    const char *settings = p->settings_line ? p->settings_line : "(not known)";
    const size_t len = strlen(b->config) + strlen(settings) + strlen(p->rerun_of) + 2048;
    char *text = malloc(len);
    if (!text) return NULL;
    int n = snprintf(text, len, "build: commit %s | MPI %s | NCCL %s | CUDA runtime %s, driver %s | CPU %s\n"
                     "build config: %s\nsettings: %s%s", b->commit, b->mpi, b->nccl, b->cuda_runtime,
                     b->cuda_driver, b->cpu, b->config, settings, p->settings_line && !*settings ? "(every default)" : "");
    if (p->rerun_of[0] && n > 0 && (size_t)n < len)
        snprintf(text + n, len - (size_t)n, "\nrerun of: %s (fingerprint %s)", p->rerun_of, p->rerun_fingerprint);
    return text;
}

void provenance_add_json(cJSON *root, const run_provenance *p)
{
    cJSON *build = provenance_build_json(&p->build);
    if (build) cJSON_AddItemToObject(root, "build", build);
    cJSON *settings = p->settings ? cJSON_Duplicate(p->settings, 1) : NULL;
    if (settings) cJSON_AddItemToObject(root, "settings", settings);
    cJSON_AddStringToObject(root, "started_by", p->started_by ? p->started_by : "the command line");
    if (p->rerun_of[0]) {
        cJSON *r = cJSON_AddObjectToObject(root, "rerun_of");
        cJSON_AddStringToObject(r, "path", p->rerun_of);
        cJSON_AddStringToObject(r, "fingerprint", p->rerun_fingerprint);
    }
}
