#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The steps the auto limit takes its median over (the latest ones). */
enum { STEP_SAMPLES = 32, HEARTBEAT_BYTES = 512, MAX_STOPPED = 8 };

struct watchdog {
    watchdog_config cfg;
    pthread_t thread;
    pthread_mutex_t lock; /* guards what the training and the thread both touch below */
    pthread_cond_t wake;
    int stopping;
    /* progress, under lock */
    double progress_s; /* CLOCK_MONOTONIC of the last progress */
    double progress_epoch_s;
    int iteration;
    const char *phase;
    const char *waits_on;
    watchdog_margin margin; /* the closest call so far (closest_limit_s 0: none yet) */
    char pending[160]; /* what the probes said the rank is busy with ("" nothing; cleared by progress) */
    double steps_ms[STEP_SAMPLES];
    int nsteps;
    int heartbeat_fd;
    char dir[4096];            /* the heartbeats' directory ("" none) */
    char heartbeat_path[4200];
    char host[128];
    long stopped_pids[8]; /* stopped ranks of this machine named when it fired: killed by
                             watchdog_kill_stopped once the job's record is written */
    int nstopped;
    /* probes: added and removed by the training, called by the thread, all under probes_lock
     * (never taken with lock held: a probe takes its own locks) */
    pthread_mutex_t probes_lock;
    watchdog_probe probe_fn[WATCHDOG_PROBES];
    void *probe_ctx[WATCHDOG_PROBES];
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double real_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int watchdog_parse_timeout(const char *text, double *out)
{
    if (strcmp(text, "auto") == 0) {
        *out = -1;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < 0 || v > 7 * 24 * 3600.0) return -1;
    *out = v;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* (under lock) */
static double limit_locked(const watchdog *w)
{
    if (w->cfg.timeout_s > 0) return w->cfg.timeout_s;
    if (w->nsteps < 2) return WATCHDOG_SETUP_S;
    double s[STEP_SAMPLES];
    const int n = w->nsteps < STEP_SAMPLES ? w->nsteps : STEP_SAMPLES;
    memcpy(s, w->steps_ms, sizeof s[0] * (size_t)n);
    qsort(s, (size_t)n, sizeof s[0], cmp_double);
    const double ten = WATCHDOG_STEPS * s[n / 2] / 1000.0;
    return ten > WATCHDOG_MIN_S ? ten : WATCHDOG_MIN_S;
}

double watchdog_limit_s(const watchdog *w)
{
    if (!w) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&w->lock);
    const double l = limit_locked(w);
    pthread_mutex_unlock((pthread_mutex_t *)&w->lock);
    return l;
}

/* One heartbeat record: fixed size, rewritten in place (a reader never sees a short file). */
static void beat(watchdog *w, double now_epoch)
{
    if (w->heartbeat_fd < 0) return;
    char rec[HEARTBEAT_BYTES];
    memset(rec, ' ', sizeof rec);
    pthread_mutex_lock(&w->lock);
    int n = snprintf(rec, sizeof rec, "beat %.3f progress %.3f pid %ld iteration %d phase %s host %s waits %s",
                     now_epoch, w->progress_epoch_s, (long)getpid(), w->iteration, w->phase, w->host,
                     w->waits_on ? w->waits_on : w->pending[0] ? w->pending : "-");
    pthread_mutex_unlock(&w->lock);
    if (n < 0) return;
    if (n >= (int)sizeof rec) n = (int)sizeof rec - 1;
    rec[n] = ' ';
    rec[sizeof rec - 1] = '\n';
    if (pwrite(w->heartbeat_fd, rec, sizeof rec, 0) != (ssize_t)sizeof rec) {
        /* a full disk or a removed directory: the others will name us as stopped; say why once */
        fprintf(stderr, "aebench: rank %d: cannot write its heartbeat %s: %s\n", w->cfg.rank, w->heartbeat_path,
                strerror(errno));
        close(w->heartbeat_fd);
        w->heartbeat_fd = -1;
    }
}

int watchdog_read_heartbeat(const char *dir, int rank, watchdog_heartbeat *p)
{
    memset(p, 0, sizeof *p);
    char path[4200], rec[HEARTBEAT_BYTES + 1];
    snprintf(path, sizeof path, "%.4096s/heartbeat-%d", dir, rank);
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t n = pread(fd, rec, HEARTBEAT_BYTES, 0);
    close(fd);
    if (n != HEARTBEAT_BYTES) return -1;
    rec[n] = '\0';
    /* "waits" is the rest of the record, spaces and all */
    if (sscanf(rec, "beat %lf progress %lf pid %ld iteration %d phase %63s host %127s waits %159[^\n]", &p->beat,
               &p->progress, &p->pid, &p->iteration, p->phase, p->host, p->waits) != 7 || p->beat <= 0)
        return -1;
    for (size_t k = strlen(p->waits); k > 0 && p->waits[k - 1] == ' '; k--) p->waits[k - 1] = '\0';
    return 0;
}

/* A rank of ours on this machine that is stopped (SIGSTOP, a paused container) would keep the
 * job from ending: MPI_Abort's launcher (Open MPI's) sends it SIGTERM and waits for it.  Kill
 * it (really) if, and only if, that pid is a stopped process of ours (its state 'T' or 't',
 * our uid): never a process that took the number of a rank that died.  1 when it is (killed). */
static int kill_if_stopped(long pid, int really)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    const ssize_t n = read(fd, stat, sizeof stat - 1);
    const int ours = fstat(fd, &st) == 0 && st.st_uid == geteuid();
    close(fd);
    if (n <= 0 || !ours) return 0;
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* the command may hold spaces and parentheses */
    if (!end || (end[2] != 'T' && end[2] != 't')) return 0;
    return !really || kill((pid_t)pid, SIGKILL) == 0;
}

/* What the heartbeats say of the other ranks, appended to line; a stopped rank on this
 * machine is marked to be killed (kill_if_stopped) where the launcher would wait on it. */
static void name_the_stopped(watchdog *w, double now_epoch, char *line, size_t len)
{
    if (!w->dir[0] || w->cfg.world < 2) return;
    size_t used = strlen(line);
    int stopped = 0, behind = -1;
    double behind_progress = 0;
    watchdog_heartbeat b = {0};
    for (int r = 0; r < w->cfg.world && used + 200 < len; r++) {
        if (r == w->cfg.rank) continue;
        watchdog_heartbeat p;
        if (watchdog_read_heartbeat(w->dir, r, &p) != 0) continue; /* another machine's, or never started */
        if (now_epoch - p.beat > WATCHDOG_STALE_S) {
            used += (size_t)snprintf(line + used, len - used,
                                     "; rank %d (pid %ld on %s) stopped: its heartbeat is %.0f s old, last in the %s "
                                     "of iteration %d", r, p.pid, p.host, now_epoch - p.beat,
                                     p.phase, p.iteration);
            if (w->cfg.kill_stopped && strcmp(p.host, w->host) == 0 && kill_if_stopped(p.pid, 0) && w->nstopped < MAX_STOPPED &&
                used + 80 < len) {
                w->stopped_pids[w->nstopped++] = p.pid;
                used += (size_t)snprintf(line + used, len - used, " (killed: a launcher's SIGTERM waits on a stopped "
                                         "process, SIGKILL does not)");
            }
            stopped++;
        } else if (behind < 0 || p.progress < behind_progress) {
            behind = r;
            behind_progress = p.progress;
            b = p;
        }
    }
    if (!stopped && behind >= 0 && used + 200 < len)
        snprintf(line + used, len - used, "; every rank here still runs; furthest behind: rank %d, in the %s of "
                 "iteration %d%s%s", behind, b.phase, b.iteration, strcmp(b.waits, "-") ? ", waiting on " : "",
                 strcmp(b.waits, "-") ? b.waits : "");
}

/* Would a lower rank that still runs say it first?  (One line for the job, not one a rank.) */
static int lower_rank_runs(const watchdog *w, double now_epoch)
{
    if (!w->dir[0]) return 0;
    for (int r = 0; r < w->cfg.rank; r++) {
        watchdog_heartbeat p;
        if (watchdog_read_heartbeat(w->dir, r, &p) == 0 && now_epoch - p.beat <= WATCHDOG_STALE_S) return 1;
    }
    return 0;
}

/* What the probes say (the first that has something pending; "" none). */
static void ask_probes(watchdog *w, char *out, size_t len)
{
    out[0] = '\0';
    pthread_mutex_lock(&w->probes_lock);
    for (int i = 0; i < WATCHDOG_PROBES && !out[0]; i++)
        if (w->probe_fn[i] && !w->probe_fn[i](w->probe_ctx[i], out, len)) out[0] = '\0';
    pthread_mutex_unlock(&w->probes_lock);
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = ' '; /* (one heartbeat record, one line) */
}

int watchdog_add_probe(watchdog *w, watchdog_probe fn, void *ctx)
{
    if (!w) return 0;
    int rc = -1;
    pthread_mutex_lock(&w->probes_lock);
    for (int i = 0; i < WATCHDOG_PROBES && rc; i++)
        if (!w->probe_fn[i]) {
            w->probe_fn[i] = fn;
            w->probe_ctx[i] = ctx;
            rc = 0;
        }
    pthread_mutex_unlock(&w->probes_lock);
    return rc;
}

void watchdog_remove_probe(watchdog *w, void *ctx)
{
    if (!w) return;
    pthread_mutex_lock(&w->probes_lock);
    for (int i = 0; i < WATCHDOG_PROBES; i++)
        if (w->probe_ctx[i] == ctx) w->probe_fn[i] = NULL, w->probe_ctx[i] = NULL;
    pthread_mutex_unlock(&w->probes_lock);
}

static void *watch(void *arg)
{
    watchdog *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += WATCHDOG_TICK_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (w->stopping) break;
        const double now = mono_s(), since = w->progress_s, idle = now - since, limit = limit_locked(w);
        watchdog_margin *m = &w->margin;
        if (limit > 0 && (m->closest_limit_s <= 0 || idle / limit > m->closest_idle_s / m->closest_limit_s)) {
            m->closest_idle_s = idle;
            m->closest_limit_s = limit;
            m->closest_iteration = w->iteration;
            snprintf(m->closest_phase, sizeof m->closest_phase, "%s", w->phase);
        }
        pthread_mutex_unlock(&w->lock);
        const double now_epoch = real_s();
        if (idle > 1.0) {
            /* idle for a second: ask what it is blocked in (the probes take their own locks) */
            char pending[sizeof w->pending];
            ask_probes(w, pending, sizeof pending);
            pthread_mutex_lock(&w->lock);
            if (w->progress_s == since) memcpy(w->pending, pending, sizeof pending); /* (no progress since) */
            pthread_mutex_unlock(&w->lock);
        }
        beat(w, now_epoch);
        /* a lower rank that still runs speaks for the job, unless it has not within a grace */
        const double grace = lower_rank_runs(w, now_epoch) ? 2.0 + w->cfg.rank : 0;
        pthread_mutex_lock(&w->lock);
        if (idle <= limit + grace) continue;
        char line[2048];
        int n = snprintf(line, sizeof line, "rank %d on %s: no progress for %.0f s (--hang-timeout %s%.0f s) in the %s "
                         "of iteration %d%s%s", w->cfg.rank, w->host, idle, w->cfg.timeout_s > 0 ? "" : "auto: ",
                         limit, w->phase, w->iteration, w->waits_on ? ", waiting on " : "",
                         w->waits_on ? w->waits_on : "");
        if (n > 0 && n < (int)sizeof line && w->pending[0])
            n += snprintf(line + n, sizeof line - (size_t)n, "; busy with %s", w->pending);
        pthread_mutex_unlock(&w->lock);
        if (n > 0) name_the_stopped(w, now_epoch, line, sizeof line);
        fprintf(stderr, "aebench: %s\n", line);
        fflush(stderr);
        if (w->cfg.fire) w->cfg.fire(w->cfg.fire_ctx, line);
        /* (fire ends the job; if it came back, stop watching rather than repeat it) */
        pthread_mutex_lock(&w->lock);
        break;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

void watchdog_hostname(char *out, size_t len)
{
    if (gethostname(out, len) != 0) snprintf(out, len, "?");
    out[len - 1] = '\0';
    for (char *c = out; *c; c++)
        if (*c == ' ') *c = '_'; /* (one word in the heartbeat record) */
}

int watchdog_start(watchdog **out, const watchdog_config *cfg)
{
    *out = NULL;
    if (cfg->timeout_s == 0) return 0;
    watchdog *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "aebench: watchdog: out of memory\n");
        return -1;
    }
    w->cfg = *cfg;
    w->heartbeat_fd = -1;
    w->phase = "setup";
    w->iteration = 0;
    w->progress_s = mono_s();
    w->progress_epoch_s = real_s();
    watchdog_hostname(w->host, sizeof w->host);
    if (cfg->heartbeat_dir && cfg->heartbeat_dir[0] && strlen(cfg->heartbeat_dir) < sizeof w->dir) {
        snprintf(w->dir, sizeof w->dir, "%s", cfg->heartbeat_dir);
        snprintf(w->heartbeat_path, sizeof w->heartbeat_path, "%s/heartbeat-%d", w->dir, cfg->rank);
        /* the directory is private (made by us, 0700); never follow a link planted there */
        w->heartbeat_fd = open(w->heartbeat_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (w->heartbeat_fd < 0)
            fprintf(stderr, "aebench: rank %d: no heartbeat (%s: %s); its watchdog still runs\n", cfg->rank,
                    w->heartbeat_path, strerror(errno));
    }
    w->cfg.heartbeat_dir = NULL; /* (the caller's string; w->dir is ours) */
    pthread_condattr_t ca;
    int bad = pthread_mutex_init(&w->lock, NULL) || pthread_mutex_init(&w->probes_lock, NULL) ||
              pthread_condattr_init(&ca) ||
              pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) || pthread_cond_init(&w->wake, &ca);
    if (!bad) {
        pthread_condattr_destroy(&ca);
        beat(w, real_s()); /* (before the thread: the others see this rank from its start) */
        bad = pthread_create(&w->thread, NULL, watch, w);
    }
    if (bad) {
        fprintf(stderr, "aebench: watchdog: cannot start its thread\n");
        if (w->heartbeat_fd >= 0) {
            close(w->heartbeat_fd);
            unlink(w->heartbeat_path);
        }
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

/* Progress: iteration `iteration` at `phase`; with a step's time (step_ms >= 0), a sample for
 * the auto limit. */
static void progressed(watchdog *w, int iteration, const char *phase, double step_ms)
{
    const double now_epoch = real_s();
    pthread_mutex_lock(&w->lock);
    if (step_ms >= 0) w->steps_ms[w->nsteps++ % STEP_SAMPLES] = step_ms;
    w->iteration = iteration;
    w->phase = phase;
    w->waits_on = NULL;
    w->pending[0] = '\0';
    w->progress_s = mono_s();
    w->progress_epoch_s = now_epoch;
    pthread_mutex_unlock(&w->lock);
    beat(w, now_epoch); /* (so that the others know where this rank last got to) */
}

void watchdog_at(watchdog *w, int iteration, const char *phase)
{
    if (w) progressed(w, iteration, phase, -1);
}

void watchdog_waits_on(watchdog *w, const char *what)
{
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->waits_on = what;
    pthread_mutex_unlock(&w->lock);
}

void watchdog_step(watchdog *w, int iteration, double ms)
{
    if (w) progressed(w, iteration, "end", ms < 0 ? 0 : ms);
}

void watchdog_stop(watchdog *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    if (w->heartbeat_fd >= 0) {
        close(w->heartbeat_fd);
        unlink(w->heartbeat_path);
    }
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->probes_lock);
    pthread_cond_destroy(&w->wake);
    free(w);
}

int watchdog_get_margin(watchdog *w, watchdog_margin *out)
{
    memset(out, 0, sizeof *out);
    if (!w) return -1;
    pthread_mutex_lock(&w->lock);
    *out = w->margin;
    out->limit_s = limit_locked(w);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void watchdog_kill_stopped(watchdog *w)
{
    if (!w) return;
    for (int i = 0; i < w->nstopped; i++) (void)kill_if_stopped(w->stopped_pids[i], 1);
    w->nstopped = 0;
}
