/*
 * job_dir.c — a job's private temporary directories, and the notes its ranks leave in the
 * supervisor's (job_dir.h).
 */
#include "job_dir.h"

#include "exit_codes.h"
#include "../engines/runtime/timer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the ranks' side ------------------------------------------------------------------- */

/* An empty note NAME in the supervisor's notes directory (--job-notes; best effort). */
static void note_mark(const char *notes, const char *name)
{
    if (!notes || !*notes) return;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", notes, name) >= (int)sizeof path) return;
    /* (on a machine other than the supervisor's the directory is not there: nothing to do) */
    const int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
}

/* on_exit: a rank that leaves with exit 2 refused its configuration (rank 0 said why in one
 * line): the note that tells the supervisor so, since MPICH's mpiexec also exits 2 when a rank
 * is killed by SIGINT.  notes: launch_note_started's copy of the directory's name (the
 * run_config it came from is gone by then). */
static void note_refusal_at_exit(int status, void *notes)
{
    if (status == EXIT_BAD_INPUT) note_mark(notes, LAUNCH_NOTE_REFUSED);
    free(notes);
}

void launch_note_started(const char *notes)
{
    if (!notes || !*notes) return;
    note_mark(notes, "started");
    char *kept = strdup(notes);
    if (!kept || on_exit(note_refusal_at_exit, kept) != 0) {
        free(kept);
        fprintf(stderr, "aebench: note: a refusal of this rank would not be told to the supervisor\n");
    }
}

void fault_note(const char *notes, int rank, const char *fmt, ...)
{
    if (!notes || !*notes) return;
    char path[PATH_MAX], line[1024];
    if (snprintf(path, sizeof path, "%s/rank-%d", notes, rank) >= (int)sizeof path) return;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line, sizeof line - 40, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len > sizeof line - 41) len = (int)sizeof line - 41;
    /* second line: when (CLOCK_REALTIME, seconds), for the recovered job's time lost */
    len += snprintf(line + len, 40, "\n%.6f\n", epoch_s());
    /* Best effort: the rank is about to end the job either way. */
    /* (the notes directory is the supervisor's private one; still, never follow a link) */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)len);
    (void)w;
    close(fd);
}

void fault_maybe_die(const run_config *run_cfg, int rank, int iteration, int phase)
{
    const unsigned long long ranks = run_cfg->fail_ranks ? run_cfg->fail_ranks : 1ull; /* default rank 0 */
    if (run_cfg->fail_at != iteration || rank > 63 || !((ranks >> rank) & 1) || run_cfg->fail_phase != phase) return;
    static const char *const where[] = {"at the start of", "in the backward of", "in the checkpoint of"};
    if (run_cfg->fail_kind == FAIL_STOP) {
        /* A hang, not a death: no note (a hung rank leaves none); the others' watchdogs must
         * find it from its heartbeat, which stops with it. */
        fprintf(stderr, "aebench: rank %d: --fail-at %d --fail-kind stop: SIGSTOP now, %s iteration %d\n", rank,
                iteration, where[phase], iteration);
        fflush(stdout);
        fflush(stderr);
        raise(SIGSTOP);
        return;
    }
    fault_note(run_cfg->job_notes, rank, "killed itself (SIGKILL) %s iteration %d (--fail-at %d --fail-rank %s)",
               where[phase], iteration, run_cfg->fail_at, run_cfg->fail_ranks_text[0] ? run_cfg->fail_ranks_text : "0");
    fprintf(stderr, "aebench: rank %d: --fail-at %d: SIGKILL now\n", rank, iteration);
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL);
}

/* ---- a job's temporary directories -------------------------------------------------------- */

/* Name every directory of ours under tmp called prefix.* whose maker (its "pid") is gone. */
static void name_stale(const char *tmp, const char *prefix)
{
    const int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0) return;
    DIR *d = fdopendir(tfd);
    if (!d) {
        close(tfd);
        return;
    }
    const size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] != '.') continue;
        struct stat st;
        /* ours, a real directory (not a link someone planted), private */
        if (fstatat(tfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        char pidpath[PATH_MAX], text[32] = "";
        snprintf(pidpath, sizeof pidpath, "%s/pid", e->d_name);
        const int fd = openat(tfd, pidpath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue; /* being made, or not one of ours */
        const ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        const long pid = atol(text);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        fprintf(stderr, "aebench: %s/%s is a stale directory of a job that is gone (pid %ld); remove it with: "
                        "rm -rf %s/%s\n", tmp, e->d_name, pid, tmp, e->d_name);
    }
    closedir(d);
}

const char *job_tmp(void)
{
    const char *tmpdir = getenv("TMPDIR");
    return tmpdir && *tmpdir ? tmpdir : "/tmp";
}

int job_tmp_refused(char *err, size_t errlen)
{
    const char *tmp = job_tmp();
    const char *whence = tmp == getenv("TMPDIR") ? "TMPDIR" : "TMPDIR is unset: the default";
    struct stat st;
    if (stat(tmp, &st) != 0) {
        snprintf(err, errlen, "--ranks: the job's private directory goes in %.300s (%s), which %s", tmp, whence,
                 errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--ranks: the job's private directory goes in %.300s (%s), which is not a directory",
                 tmp, whence);
        return -1;
    }
    if (access(tmp, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "--ranks: the job's private directory goes in %.300s (%s), which is not writable "
                 "here: %s", tmp, whence, strerror(errno));
        return -1;
    }
    return 0;
}

int job_dir_make(char *out, size_t len, const char *prefix)
{
    const char *tmp = job_tmp();
    name_stale(tmp, prefix);
    if ((size_t)snprintf(out, len, "%s/%s.XXXXXX", tmp, prefix) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(out)) return -1;
    char path[PATH_MAX + 8], pid[32];
    snprintf(path, sizeof path, "%s/pid", out);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    const int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (fd < 0 || write(fd, pid, (size_t)n) != n) {
        const int e = errno;
        if (fd >= 0) close(fd);
        unlink(path);
        rmdir(out);
        errno = e;
        return -1;
    }
    close(fd);
    return 0;
}

void job_dir_remove(const char *dir)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/pid", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/hosts", dir); /* (--hosts, in the launcher's syntax) */
    unlink(path);
    snprintf(path, sizeof path, "%s/started", dir); /* (launch_note_started) */
    unlink(path);
    snprintf(path, sizeof path, "%s/" LAUNCH_NOTE_REFUSED, dir); /* (note_refusal_at_exit) */
    unlink(path);
    if (rmdir(dir) != 0 && errno != ENOENT) fprintf(stderr, "aebench: cannot remove %s: %s\n", dir, strerror(errno));
}
