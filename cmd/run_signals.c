/*
 * run_signals.c — SIGINT and SIGTERM (run.h): watched by a thread of their own from the start
 * of main, and the record of the run attached (run_state.h) when one stops it.
 */
#include "run_state.h"

#include "report.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* ---- SIGINT and SIGTERM: a run stopped by one ends with its record saying so ---------------- */

struct run_signals {
    sigset_t old_mask;   /* the calling thread's mask before: run_signals_stop restores it */
    sigset_t watched;    /* SIGINT and SIGTERM, less any that the process was started ignoring */
    int signal_fd;       /* reads the watched signals (every thread blocks them) */
    int stop_fd;         /* an eventfd: run_signals_stop's word to the watcher */
    pthread_t watcher;
    pthread_mutex_t lock; /* over on_signal: set, cleared and called under it */
    void (*on_signal)(void *ctx, int sig); /* the run's record of the interruption (NULL: none) */
    void *ctx;
};

/* The process ends by sig, as it would have without the watcher (a shell sees 128 + sig):
 * its default action, unblocked in this thread only, and raised here. */
static void die_by(int sig)
{
    fflush(stdout);
    fflush(stderr);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigset_t just;
    if (sigemptyset(&dfl.sa_mask) != 0 || sigaction(sig, &dfl, NULL) != 0 || sigemptyset(&just) != 0 ||
        sigaddset(&just, sig) != 0 || pthread_sigmask(SIG_UNBLOCK, &just, NULL) != 0 || raise(sig) != 0)
        fprintf(stderr, "aebench: cannot end by signal %d: %s\n", sig, strerror(errno));
    _exit(128 + sig); /* (only when the signal did not end the process) */
}

static void *watch_signals(void *arg)
{
    run_signals *g = arg;
    struct pollfd p[2] = {{.fd = g->signal_fd, .events = POLLIN}, {.fd = g->stop_fd, .events = POLLIN}};
    struct signalfd_siginfo si;
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "aebench: waiting for SIGINT and SIGTERM: %s (they are not handled now)\n", strerror(errno));
            return NULL;
        }
        if (p[1].revents) return NULL; /* (run_signals_stop) */
        if (!(p[0].revents & POLLIN)) continue;
        const ssize_t n = read(g->signal_fd, &si, sizeof si);
        if (n == (ssize_t)sizeof si) break;
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        fprintf(stderr, "aebench: reading a signal: %s\n", n < 0 ? strerror(errno) : "short read");
        return NULL;
    }
    const int sig = (int)si.ssi_signo;
    /* (the lock is kept: the run attached cannot go away, nor another attach, while it writes;
     * a second signal meanwhile stays pending, blocked, and ends nothing half-written) */
    const int e = pthread_mutex_lock(&g->lock);
    if (e) fprintf(stderr, "aebench: the signal watcher's lock: %s\n", strerror(e));
    else if (g->on_signal) g->on_signal(g->ctx, sig);
    die_by(sig);
    return NULL;
}

int run_signals_start(run_signals **out)
{
    *out = NULL;
    run_signals *g = calloc(1, sizeof *g);
    if (!g) {
        fprintf(stderr, "aebench: out of host memory for the signal watcher\n");
        return -1;
    }
    g->signal_fd = g->stop_fd = -1;
    /* (a signal the process was started ignoring, SIGINT of a shell's background job, stays
     * ignored: blocked, it would be queued and read) */
    static const int sigs[] = {SIGINT, SIGTERM};
    int e = sigemptyset(&g->watched) != 0 ? errno : 0;
    for (size_t i = 0; !e && i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction now;
        if (sigaction(sigs[i], NULL, &now) != 0 || (now.sa_handler != SIG_IGN && sigaddset(&g->watched, sigs[i]) != 0))
            e = errno;
    }
    if (!e) e = pthread_sigmask(SIG_BLOCK, &g->watched, &g->old_mask);
    if (e) {
        fprintf(stderr, "aebench: cannot block SIGINT and SIGTERM: %s\n", strerror(e));
        free(g);
        return -1;
    }
    if ((g->signal_fd = signalfd(-1, &g->watched, SFD_CLOEXEC)) < 0 ||
        (g->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
        e = errno;
    } else if ((e = pthread_mutex_init(&g->lock, NULL)) == 0 &&
               (e = pthread_create(&g->watcher, NULL, watch_signals, g)) != 0) {
        pthread_mutex_destroy(&g->lock);
    }
    if (e) {
        fprintf(stderr, "aebench: cannot watch for SIGINT and SIGTERM: %s\n", strerror(e));
        if (g->signal_fd >= 0) close(g->signal_fd);
        if (g->stop_fd >= 0) close(g->stop_fd);
        if (pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL) != 0)
            fprintf(stderr, "aebench: cannot unblock SIGINT and SIGTERM\n");
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void run_signals_stop(run_signals *g)
{
    if (!g) return;
    const uint64_t one = 1;
    if (write(g->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
        fprintf(stderr, "aebench: cannot stop the signal watcher: %s\n", strerror(errno));
    else if ((errno = pthread_join(g->watcher, NULL)) != 0)
        fprintf(stderr, "aebench: the signal watcher: %s\n", strerror(errno));
    if (close(g->signal_fd) != 0 || close(g->stop_fd) != 0)
        fprintf(stderr, "aebench: closing the signal watcher: %s\n", strerror(errno));
    pthread_mutex_destroy(&g->lock);
    /* (a signal that came since is delivered now: the process ends by it) */
    if (pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL) != 0)
        fprintf(stderr, "aebench: cannot unblock SIGINT and SIGTERM\n");
    free(g);
}

/* What the watcher calls on a signal (NULL fn: nothing, the process just ends by it). */
void run_signals_attach(run_signals *g, void (*fn)(void *ctx, int sig), void *ctx)
{
    if (!g) return;
    const int e = pthread_mutex_lock(&g->lock);
    if (e) {
        fprintf(stderr, "aebench: the signal watcher's lock: %s\n", strerror(e));
        return;
    }
    g->on_signal = fn;
    g->ctx = ctx;
    if (pthread_mutex_unlock(&g->lock) != 0) fprintf(stderr, "aebench: the signal watcher's lock\n");
}

/* The watcher's record of a run stopped by sig (rank 0, which writes the log and JSON; the
 * other ranks end by it at once): the log's ERROR line, the JSON the record so far with status
 * "interrupted", and its path to a parent sweep.  Unless the run's last record is written
 * already (it is then what the run did). */
void run_interrupted(void *ctx, int sig)
{
    run_state *s = ctx;
    run_record_lock(s); /* (kept: the process ends by sig, and nothing is written after) */
    if (!s->has_log || s->record_final) return;
    s->interrupted_by = sig;
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
    if (s->done > s->first)
        snprintf(s->interrupted_why, sizeof s->interrupted_why, "interrupted (%s): the run was stopped at iteration "
                 "%d of %d, after %d completed", name, s->done + 1 <= s->run_cfg->iters ? s->done + 1 : s->done,
                 s->run_cfg->iters, s->done);
    else
        snprintf(s->interrupted_why, sizeof s->interrupted_why, "interrupted (%s): the run was stopped before its "
                 "first iteration completed", name);
    run_logline(s, "ERROR: %s", s->interrupted_why);
    if (s->log && fclose(s->log) != 0) fprintf(stderr, "aebench: error closing %s\n", s->log_path);
    s->log = NULL;
    if (run_write_json(s) == 0) report_to_parent(s->run_cfg, "json %s", s->json_path);
    s->record_final = 1;
    fprintf(stderr, "aebench: %s\n", s->interrupted_why);
}
