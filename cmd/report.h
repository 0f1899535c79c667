/*
 * report.h — what a run leaves behind: the artifact-format log, the JSON summary, and the
 * short summary on stdout.
 *
 * The log lines copy Megatron-LM's (and the artifact's patches') formats character for
 * character, because the artifact's extract scripts split them with awk field separators
 * such as '[/,_: ]' and '[/,_:|]' and pick fields by number (ENGINES.md, "Logs").
 */
#ifndef AEBENCH_REPORT_H
#define AEBENCH_REPORT_H

#include "../kernels/model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Python's repr() of a float (shortest round-trip digits, ".0" on integral values), which
 * is how the artifact printed IterationTime, SamplesPerSecond and the memory figures. */
void fmt_pyfloat(char *buf, size_t len, double v);

void fmt_params_line(char *buf, size_t len, uint64_t params);
void fmt_iteration_line(char *buf, size_t len, int iteration, int iters, double ms_per_iter,
                        double lr, int global_batch, double loss, double grad_norm,
                        int skipped, int nans);
void fmt_tflops_line(char *buf, size_t len, double tflops, uint64_t params);
void fmt_throughput_line(char *buf, size_t len, int workers, int samples_per_step,
                         double iter_seconds, double samples_per_second);
void fmt_memory_line(char *buf, size_t len, int rank, int iteration, double alloc_bytes,
                     double max_alloc_bytes, double reserved_bytes, double max_reserved_bytes);
/* "time (ms) | name: v | name: v ..." with n (name, value) pairs. */
void fmt_timers_line(char *buf, size_t len, int n, const char *const *names,
                     const double *values);

/* The artifact's "Effective Tera Flops per GPU": P[billions] * B * T * 8 / (seconds * 1000). */
double effective_tflops(uint64_t params, int batch, int seq, double iter_seconds);

/* Median of n values (copies; n >= 1). */
double median_of(const double *v, int n);

/* A whole file as a NUL-terminated string (malloc'd), or NULL with errno set. */
char *report_read_text(const char *path);
/* The same, for a file of at most max_bytes (an input, read whole): a larger one is not read,
 * NULL with errno EFBIG.  size (may be NULL) gets the file's size. */
char *report_read_text_max(const char *path, size_t max_bytes, long long *size);
/* The same from an open descriptor, which it closes (the caller opened it its own way: without
 * following a link, say). */
char *report_read_fd_max(int fd, size_t max_bytes, long long *size);
/* Write text and a newline to path through path.tmp and a rename, so that a reader never sees
 * half a file.  0, or -1 with errno set (the .tmp removed). */
int report_write_text(const char *path, const char *text);

/* The JSON text of root (cJSON_Print's, to cJSON_free) with every finite number written so
 * that it reads back to the same double: cJSON prints 15 digits and keeps them when they read
 * back within an ulp, so a loss or a time could come back one ulp off; here such a number gets
 * the 16 or 17 digits it needs (on a copy: root is untouched).  NULL: out of memory. */
typedef struct cJSON cJSON;
char *report_json_text(const cJSON *root);
/* A run's --recompute into obj: "recompute" (its name) and "ckpt" (whether layers are
 * recomputed at all, as the JSON said before --recompute; what sweeps match older runs by). */
void report_json_recompute(cJSON *obj, gpt_recompute mode);

/* mkdir -p dir; err says why not. */
int report_make_dirs(const char *dir, char *err, size_t errlen);

/* DIR/NAME_{YYYY-MM-DD}.{epoch}EXT, created anew (O_EXCL, never through a link; a clash
 * within one second gets "-1", "-2", ... before EXT; the directory made if needed): the open
 * file, its path in path; NULL with err. */
FILE *report_create_unique(const char *dir, const char *name, const char *ext, char *path, size_t len, char *err,
                           size_t errlen);
/* report_create_unique's NAME_... .txt, and json_path the same name with .json. */
FILE *report_create_log_named(const char *dir, const char *name, char *log_path, size_t log_len, char *json_path,
                              size_t json_len, char *err, size_t errlen);
/* results/log_{method}_l-{L}_h-{H}_bs-{B}_ws-{W}_{YYYY-MM-DD}.{epoch}.txt, created with
 * O_EXCL so two runs never share a file (a clash within one second gets "-1", "-2", ...).
 * Creates the directory if needed.  json_path gets the same name with .json. */
FILE *report_create_log(const char *dir, const char *method, int layers, int hidden, int batch,
                        const char *window, char *log_path, size_t log_len, char *json_path,
                        size_t json_len, char *err, size_t errlen);

/* A sweep (cmd/sweep.c) runs each run as a child process and learns what the child wrote
 * through a pipe whose descriptor it passes on the child's command line (--report-fd FD, into
 * run_cfg->report_fd): one "key value" line per fact ("log PATH", "json PATH", "backend cpu",
 * ...).  A rank of a --ranks job appends them to the file "report" in its supervisor's notes
 * directory (--job-notes), which the supervisor relays.  Does nothing for a run with neither,
 * so a run typed by hand is unaffected. */
struct run_config;
void report_to_parent(const struct run_config *run_cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
