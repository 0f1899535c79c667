#include "child.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int child_self_exe(char *buf, size_t len, char *err, size_t errlen)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n < 0) return cli_fail(err, errlen, "cannot find this binary (/proc/self/exe): %s", strerror(errno));
    if ((size_t)n >= len - 1) return cli_fail(err, errlen, "the path of this binary is too long");
    buf[n] = '\0';
    return 0;
}

void child_signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev) snprintf(buf, len, "SIG%s", abbrev);
    else snprintf(buf, len, "signal %d", sig);
}

/* The child's command line: argv with --report-fd fd right after argv[0] (fd_text holds the
 * number); malloc'd, the strings argv's.  Built before fork, because between fork and exec
 * only async-signal-safe calls are allowed. */
static char **child_argv(char *const argv[], int fd, char *fd_text, size_t fd_len)
{
    size_t n = 0;
    while (argv[n]) n++;
    char **args = malloc(sizeof *args * (n + 3));
    if (!args) return NULL;
    snprintf(fd_text, fd_len, "%d", fd);
    args[0] = argv[0];
    args[1] = "--report-fd";
    args[2] = fd_text;
    for (size_t i = 1; i <= n; i++) args[i + 2] = argv[i]; /* (with the NULL) */
    return args;
}

/* The pipe's write end at a descriptor above stdio (--report-fd refuses 0-2: where a run
 * started with stdio closed would get it): *fd moved there, or -1. */
static int above_stdio(int *fd)
{
    if (*fd > STDERR_FILENO) return 0;
    const int moved = fcntl(*fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0) return -1;
    close(*fd);
    *fd = moved;
    return 0;
}

static void parse_report(char *text, child_result *out)
{
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        const char *key = line, *val = sp + 1;
        if (strcmp(key, "log") == 0) snprintf(out->log, sizeof out->log, "%s", val);
        else if (strcmp(key, "json") == 0) snprintf(out->json, sizeof out->json, "%s", val);
        else if (strcmp(key, "backend") == 0) {
            snprintf(out->backend, sizeof out->backend, "%s", val);
            out->probed = 1;
        } else if (strcmp(key, "preset") == 0) out->preset = atoi(val);
        else if (strcmp(key, "shape") == 0)
            sscanf(val, "%d %d %d %d %d %d", &out->shape[0], &out->shape[1], &out->shape[2],
                   &out->shape[3], &out->shape[4], &out->shape[5]);
        else if (strcmp(key, "budget-gpu") == 0) out->budget_gpu = strtoull(val, NULL, 10);
        else if (strcmp(key, "budget-host") == 0) out->budget_host = strtoull(val, NULL, 10);
        else if (strcmp(key, "budget-disk") == 0) out->budget_disk = strtoull(val, NULL, 10);
        else if (strcmp(key, "machine") == 0) snprintf(out->machine, sizeof out->machine, "%s", val);
    }
}

int child_run(const char *exe, char *const argv[], child_output output, child_result *out,
              char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return cli_fail(err, errlen, "pipe: %s", strerror(errno));
    char fd_text[16];
    char **args = above_stdio(&fds[1]) == 0 ? child_argv(argv, fds[1], fd_text, sizeof fd_text) : NULL;
    if (!args) {
        const int e = errno;
        close(fds[0]);
        close(fds[1]);
        return cli_fail(err, errlen, "cannot pass a child its report pipe: %s", strerror(e));
    }
    /* Whatever stdio holds would otherwise be written twice, by us and by the child. */
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        free(args);
        close(fds[0]);
        close(fds[1]);
        return cli_fail(err, errlen, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* The child: only async-signal-safe calls until exec.  It dies with us however we
         * die (kill -9 included): SIGTERM, which a --ranks supervisor passes on to its job.
         * (If we died before the prctl, our parent is already someone else: end here.) */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
        if (fcntl(fds[1], F_SETFD, 0) != 0) _exit(127);
        if (output != CHILD_SHOW) {
            int null = open("/dev/null", O_WRONLY);
            if (null < 0 || dup2(null, STDOUT_FILENO) < 0) _exit(127);
            if (output == CHILD_QUIET && dup2(null, STDERR_FILENO) < 0) _exit(127);
            close(null);
        }
        execv(exe, args);
        static const char msg[] = "aebench: cannot start a child run (exec failed)\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(127);
    }
    free(args);
    if (close(fds[1]) != 0) fprintf(stderr, "aebench: close: %s\n", strerror(errno));
    /* Read everything the child reports until it exits (EOF), then reap it.  Reports are
     * a few lines; anything past 64 KiB is drained and dropped. */
    char buf[65536];
    size_t len = 0;
    int read_failed = 0;
    for (;;) {
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            read_failed = errno;
            break;
        }
        if (n == 0) break;
        size_t take = (size_t)n < sizeof buf - 1 - len ? (size_t)n : sizeof buf - 1 - len;
        memcpy(buf + len, chunk, take);
        len += take;
    }
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0) return cli_fail(err, errlen, "waitpid: %s", strerror(errno));
    if (read_failed) fprintf(stderr, "aebench: reading a child's report: %s\n", strerror(read_failed));
    if (WIFEXITED(status)) {
        out->exited = 1;
        out->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        out->signal = WTERMSIG(status);
    }
    parse_report(buf, out);
    return 0;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : 0.0;
}

static void str(const cJSON *o, const char *key, char *buf, size_t len)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(buf, len, "%s", cJSON_IsString(it) ? it->valuestring : "");
}

int run_outcome_read(const char *json_path, run_outcome *o)
{
    memset(o, 0, sizeof *o);
    char *text = report_read_text(json_path);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return -1;
    str(root, "status", o->status, sizeof o->status);
    str(root, "message", o->message, sizeof o->message);
    str(root, "method", o->method, sizeof o->method);
    str(root, "log", o->log, sizeof o->log);
    o->params = num(root, "parameters");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    o->layers = (int)num(cfg, "layers");
    o->hidden = (int)num(cfg, "hidden");
    o->heads = (int)num(cfg, "heads");
    o->seq = (int)num(cfg, "seq");
    o->batch = (int)num(cfg, "batch");
    o->vocab = (int)num(cfg, "vocab");
    o->iters = (int)num(cfg, "iters");
    char recompute[16] = "";
    str(cfg, "recompute", recompute, sizeof recompute);
    if (gpt_recompute_parse(recompute, &o->recompute) != 0)
        o->recompute = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cfg, "ckpt")) ? GPT_RECOMPUTE_NONE
                                                                                  : GPT_RECOMPUTE_FULL;
    str(cfg, "window", o->window, sizeof o->window);
    str(cfg, "backend", o->backend, sizeof o->backend);
    str(cfg, "dtype", o->dtype, sizeof o->dtype);
    str(cfg, "fingerprint", o->fingerprint, sizeof o->fingerprint);
    o->world = (int)num(root, "world");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(root, "summary");
    o->median_ms = num(sum, "median_ms");
    o->steady_median_ms = num(sum, "steady_median_ms");
    o->samples_per_s = num(sum, "samples_per_second");
    o->model_tflops = num(sum, "model_tflops");
    o->effective_tflops = num(sum, "effective_tflops");
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(root, "memory");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(mem, "gpu");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(mem, "host");
    o->peak_gpu = num(g, "peak_bytes");
    o->peak_host = num(h, "peak_bytes");
    o->plan_gpu = num(g, "planned_bytes");
    o->plan_host = num(h, "planned_bytes");
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(root, "oom");
    if (oom) {
        str(oom, "memory", o->oom_memory, sizeof o->oom_memory);
        o->oom_requested = num(oom, "requested_bytes");
        o->oom_in_use = num(oom, "in_use_bytes");
        o->oom_limit = num(oom, "limit_bytes");
    }
    o->have = o->status[0] != '\0';
    cJSON_Delete(root);
    return o->have ? 0 : -1;
}
