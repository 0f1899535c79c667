#include "report.h"

#include "cli.h"

#include "../engines/engine.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void fmt_pyfloat(char *buf, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, v > 0 ? "inf" : "-inf");
        return;
    }
    /* The fewest significant digits that read back as the same double, as repr() finds. */
    int digits = 17;
    char probe[40];
    for (int d = 1; d <= 17; d++) {
        snprintf(probe, sizeof probe, "%.*e", d - 1, v);
        if (strtod(probe, NULL) == v) {
            digits = d;
            break;
        }
    }
    snprintf(probe, sizeof probe, "%.*e", digits - 1, v);
    int exp10 = atoi(strchr(probe, 'e') + 1);
    if (v != 0 && (exp10 < -4 || exp10 >= 16)) {
        /* repr's exponent form: "1e-05", "1.5e+16" — the same as C's %e here. */
        snprintf(buf, len, "%s", probe);
        return;
    }
    int decimals = digits - 1 - exp10;
    /* repr always shows a fractional part: "28904.0". */
    snprintf(buf, len, "%.*f", decimals > 1 ? decimals : 1, v);
}

void fmt_params_line(char *buf, size_t len, uint64_t params)
{
    snprintf(buf, len,
             " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): %llu",
             (unsigned long long)params);
}

void fmt_iteration_line(char *buf, size_t len, int iteration, int iters, double ms_per_iter,
                        double lr, int global_batch, double loss, double grad_norm,
                        int skipped, int nans)
{
    snprintf(buf, len,
             " iteration %8d/%8d | elapsed time per iteration (ms): %.1f | learning rate: %.3E |"
             " global batch size: %5d | lm loss: %.6E | loss scale: 1.0 | grad norm: %.3f |"
             " number of skipped iterations: %3d | number of nan iterations: %3d |",
             iteration, iters, ms_per_iter, lr, global_batch, loss, grad_norm, skipped, nans);
}

void fmt_tflops_line(char *buf, size_t len, double tflops, uint64_t params)
{
    snprintf(buf, len, "Effective Tera Flops per GPU: %.1f and total parameters %.3f B", tflops,
             (double)params / 1e9);
}

void fmt_throughput_line(char *buf, size_t len, int workers, int samples_per_step,
                         double iter_seconds, double samples_per_second)
{
    char it[40], sps[40];
    fmt_pyfloat(it, sizeof it, iter_seconds);
    fmt_pyfloat(sps, sizeof sps, samples_per_second);
    /* Two spaces before SamplesPerSecond, as the artifact printed (its awk relies on it). */
    snprintf(buf, len, "NumWorkers: %d; SamplesPerStep: %d; IterationTime: %s;  SamplesPerSecond: %s",
             workers, samples_per_step, it, sps);
}

void fmt_memory_line(char *buf, size_t len, int rank, int iteration, double alloc_bytes,
                     double max_alloc_bytes, double reserved_bytes, double max_reserved_bytes)
{
    const double MB = 1024.0 * 1024.0;
    char a[40], ma[40], r[40], mr[40];
    fmt_pyfloat(a, sizeof a, alloc_bytes / MB);
    fmt_pyfloat(ma, sizeof ma, max_alloc_bytes / MB);
    fmt_pyfloat(r, sizeof r, reserved_bytes / MB);
    fmt_pyfloat(mr, sizeof mr, max_reserved_bytes / MB);
    snprintf(buf, len,
             "[Rank %d] (after %d iterations) memory (MB) | allocated: %s | max allocated: %s |"
             " reserved: %s | max reserved: %s",
             rank, iteration, a, ma, r, mr);
}

void fmt_timers_line(char *buf, size_t len, int n, const char *const *names,
                     const double *values)
{
    size_t used = (size_t)snprintf(buf, len, "time (ms)");
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, " | %s: %.2f", names[i], values[i]);
}

double effective_tflops(uint64_t params, int batch, int seq, double iter_seconds)
{
    return (double)params / 1e9 * batch * seq * 8.0 / (iter_seconds * 1000.0);
}

/* (the engines' median, which their reports take too: one definition of it) */
double median_of(const double *v, int n) { return engine_median(v, n); }

char *report_read_text(const char *path)
{
    return report_read_text_max(path, SIZE_MAX, NULL);
}

char *report_read_text_max(const char *path, size_t max_bytes, long long *size)
{
    /* (a regular file only: O_NONBLOCK so that a FIFO named here cannot block the open) */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    return fd < 0 ? NULL : report_read_fd_max(fd, max_bytes, size);
}

char *report_read_fd_max(int fd, size_t max_bytes, long long *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    if (size) *size = (long long)st.st_size;
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int bad = 0;
    for (;;) {
        if (len + 4097 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(text, cap);
            if (!grown) {
                bad = ENOMEM;
                break;
            }
            text = grown;
        }
        const size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
        if (len > max_bytes) { /* (it grew after the fstat) */
            bad = EFBIG;
            if (size) *size = (long long)len;
            break;
        }
    }
    if (!bad && ferror(f)) bad = EIO;
    fclose(f);
    if (bad) {
        free(text);
        errno = bad;
        return NULL;
    }
    text[len] = '\0';
    return text;
}

int report_write_text(const char *path, const char *text)
{
    char tmp[PATH_MAX + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* (made anew, never through a link planted under its name in a shared results directory;
     * one left by a crash, or planted, is removed first: a link goes, not its target) */
    unlink(tmp);
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return -1;
    }
    /* (every step checked: on a full disk the write, the flush or the sync is the one that
     * says so, and the file is then not renamed into place) */
    const int written = fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fd) == 0;
    const int e_write = written ? 0 : errno;
    int ok = (fclose(f) == 0) && written;
    if (e_write) errno = e_write;
    if (ok && rename(tmp, path) == 0) return 0;
    const int e = errno;
    unlink(tmp);
    errno = e ? e : EIO;
    return -1;
}

/* mkdir -p */
int report_make_dirs(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "results directory name too long");
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create results directory %s: %s", path,
                         strerror(errno));
                return -1;
            }
            *p = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "results path %s is not a directory", dir);
        return -1;
    }
    return 0;
}

FILE *report_create_unique(const char *dir, const char *name, const char *ext, char *path, size_t len, char *err,
                           size_t errlen)
{
    if (report_make_dirs(dir, err, errlen)) return NULL;
    const time_t now = time(NULL);
    struct tm tm_now;
    localtime_r(&now, &tm_now);
    char date[16];
    strftime(date, sizeof date, "%Y-%m-%d", &tm_now);
    for (int attempt = 0; attempt < 1000; attempt++) {
        char clash[16] = "";
        if (attempt) snprintf(clash, sizeof clash, "-%d", attempt);
        if (snprintf(path, len, "%s/%s_%s.%lld%s%s", dir, name, date, (long long)now, clash, ext) >= (int)len) {
            snprintf(err, errlen, "results path too long");
            return NULL;
        }
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            if (errno == ENOSPC) snprintf(err, errlen, "disk full writing %s", path);
            else snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
            return NULL;
        }
        FILE *f = fdopen(fd, "w");
        if (!f) {
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
            close(fd);
            unlink(path);
        }
        return f;
    }
    snprintf(err, errlen, "cannot find a free file name in %s", dir);
    return NULL;
}

/* path with its extension (what follows the last '.') replaced by ext, into out */
static int with_extension(char *out, size_t len, const char *path, const char *ext)
{
    const char *dot = strrchr(path, '.');
    const int stem = dot ? (int)(dot - path) : (int)strlen(path);
    return snprintf(out, len, "%.*s%s", stem, path, ext) >= (int)len ? -1 : 0;
}

FILE *report_create_log_named(const char *dir, const char *name, char *log_path, size_t log_len, char *json_path,
                              size_t json_len, char *err, size_t errlen)
{
    FILE *f = report_create_unique(dir, name, ".txt", log_path, log_len, err, errlen);
    if (f && with_extension(json_path, json_len, log_path, ".json")) {
        snprintf(err, errlen, "results path too long");
        fclose(f);
        unlink(log_path);
        return NULL;
    }
    return f;
}

FILE *report_create_log(const char *dir, const char *method, int layers, int hidden, int batch,
                        const char *window, char *log_path, size_t log_len, char *json_path,
                        size_t json_len, char *err, size_t errlen)
{
    char name[512];
    snprintf(name, sizeof name, "log_%s_l-%d_h-%d_bs-%d_ws-%s", method, layers, hidden, batch, window);
    FILE *f = report_create_log_named(dir, name, log_path, log_len, json_path, json_len, err, errlen);
    /* Line-buffered: a run that dies still leaves every line it reached. */
    if (f) setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

/* The driver's channel to the process that started this run, from its command line: a sweep
 * (-m all, a run list, --find-max, --search --verify) gives each child it starts --report-fd
 * (child.c: a pipe's descriptor), and the --ranks supervisor its ranks --job-notes (launch.c:
 * its private directory, where they append to the file "report"; Open MPI closes every
 * inherited descriptor but the standard ones).  Neither says anything about the run: the child
 * runs the options on its command line, and what goes up the channel are its result lines,
 * which its log and JSON hold as well.  Without either, nothing is sent. */
void report_to_parent(const run_config *run_cfg, const char *fmt, ...)
{
    if (!run_cfg->job_notes[0] && run_cfg->report_fd <= 0) return;
    char line[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line - 1) {
        fprintf(stderr, "aebench: report line too long for the sweep\n");
        return;
    }
    line[n++] = '\n';
    if (run_cfg->job_notes[0]) {
        char file[PATH_MAX + 16];
        snprintf(file, sizeof file, "%s/report", run_cfg->job_notes);
        /* one appending write per line: the supervisor reads whole lines after the job */
        /* (the file is in the job's private directory; a link there is still not followed) */
        int ffd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        ssize_t fw = ffd < 0 ? -1 : write(ffd, line, (size_t)n);
        if (fw != n)
            fprintf(stderr, "aebench: cannot report to the job's supervisor (%s): %s\n", file,
                    fw < 0 ? strerror(errno) : "short write");
        if (ffd >= 0) close(ffd);
        return;
    }
    /* One write per line: the parent reads whole lines; a short write to a pipe of a few
     * hundred bytes cannot happen (PIPE_BUF), but check anyway. */
    ssize_t w = write(run_cfg->report_fd, line, (size_t)n);
    if (w != n) fprintf(stderr, "aebench: cannot report to the sweep (fd %d): %s\n", run_cfg->report_fd,
                        w < 0 ? strerror(errno) : "short write");
}

/* Every number of the list from item on (and below) whose shortest form cJSON would print
 * inexactly, made a raw item holding the shortest form that reads back exactly. */
static int exact_numbers(cJSON *item)
{
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item) && isfinite(item->valuedouble)) {
            const double d = item->valuedouble;
            char buf[40];
            snprintf(buf, sizeof buf, "%.15g", d);
            if (strtod(buf, NULL) != d) {
                snprintf(buf, sizeof buf, "%.16g", d);
                if (strtod(buf, NULL) != d) snprintf(buf, sizeof buf, "%.17g", d);
                char *text = malloc(strlen(buf) + 1);
                if (!text) return -1;
                strcpy(text, buf);
                item->type = cJSON_Raw;
                item->valuestring = text;
            }
        }
        if (item->child && exact_numbers(item->child)) return -1;
    }
    return 0;
}

void report_json_recompute(cJSON *obj, gpt_recompute mode)
{
    cJSON_AddBoolToObject(obj, "ckpt", mode != GPT_RECOMPUTE_NONE);
    cJSON_AddStringToObject(obj, "recompute", gpt_recompute_name(mode));
}

char *report_json_text(const cJSON *root)
{
    cJSON *copy = cJSON_Duplicate(root, 1);
    if (!copy) return NULL;
    char *text = exact_numbers(copy) == 0 ? cJSON_Print(copy) : NULL;
    cJSON_Delete(copy);
    return text;
}
