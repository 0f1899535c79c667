/*
 * watchdog.h — every rank watches its own progress, so that a job always ends.
 *
 * A thread of the rank's own (not a communicator: a collective that never completes is what
 * it watches for) wakes every WATCHDOG_TICK_MS.  The training marks progress with
 * watchdog_at (a phase of an iteration reached) and watchdog_step (an iteration done, with
 * its time).  When nothing moved for the limit, the watchdog ends the job: it writes one line
 * naming this rank, the phase, the iteration and what it waited on (and, from the others'
 * heartbeats, the rank that stopped), then calls the fire hook (MPI_Abort under ranks).
 *
 * The limit: --hang-timeout S (fixed), 0 (off), or auto: WATCHDOG_SETUP_S while the job sets
 * up and until two steps were measured, then max(WATCHDOG_MIN_S, 10 x the median step) — a
 * step that is merely slow, every step, does not trip it.
 *
 * Heartbeats (ranks of one machine): in a private directory every rank knows (the job's notes
 * directory, or one rank 0 makes and shares), each rank's thread rewrites its file every tick
 * with the time and its last progress.  A rank that is stopped (SIGSTOP, a paused container)
 * or dead stops beating: whichever rank's watchdog fires names it.
 */
#ifndef AEBENCH_WATCHDOG_H
#define AEBENCH_WATCHDOG_H

#include <stddef.h>

enum {
    WATCHDOG_TICK_MS = 250,
    WATCHDOG_SETUP_S = 600, /* auto, before two steps are measured: setting up 100 GB takes a while */
    WATCHDOG_MIN_S = 30,    /* auto, floor once steps are measured */
    WATCHDOG_STEPS = 10,    /* auto: this many median steps */
    WATCHDOG_STALE_S = 3,   /* a heartbeat this old: its rank is not running */
};

typedef struct watchdog watchdog;

typedef struct watchdog_config {
    double timeout_s;            /* > 0 fixed, 0 off, < 0 auto */
    int rank, world;
    const char *heartbeat_dir;   /* private directory of the ranks' heartbeats; NULL/"" none */
    int kill_stopped;            /* kill the stopped ranks of this machine it names, once the job's
                                  * record is written (comm_launcher_waits_on_stopped) */
    /* Ends the job: called once, from the watchdog's thread, with the line it printed. */
    void (*fire)(void *ctx, const char *why);
    void *fire_ctx;
} watchdog_config;

/* Starts the thread (NULL in *out when the timeout is 0).  0, or -1 with a message. */
int watchdog_start(watchdog **out, const watchdog_config *cfg);
/* Progress: iteration `iteration` reached `phase` (a string that lives as long as the
 * program: "setup", "forward", "backward", "checkpoint", ...).  NULL w: nothing. */
void watchdog_at(watchdog *w, int iteration, const char *phase);
/* What this rank is about to wait on (a string that lives as long as the program, e.g.
 * "all-reduce of the gradients"; NULL: nothing in particular).  Not progress by itself. */
void watchdog_waits_on(watchdog *w, const char *what);
/* Something this rank may be blocked in (a communicator's queue of collectives): asked, from
 * the watchdog's thread, once the rank has made no progress for a second, for one phrase that
 * says what it is busy with, e.g. "ncclAllReduce #12 (4.2 MB) of the gradients group, issued
 * 31 s ago, not complete"; it writes that into buf and returns 1, or returns 0 when it has
 * nothing pending.  The phrase goes into the heartbeat and the line the watchdog ends the job
 * with. */
typedef int (*watchdog_probe)(void *ctx, char *buf, size_t len);
enum { WATCHDOG_PROBES = 16 };
/* Adds a probe (NULL w: nothing); 0, or -1 when WATCHDOG_PROBES are already there. */
int watchdog_add_probe(watchdog *w, watchdog_probe fn, void *ctx);
/* Removes ctx's probe; once it returns the probe is not running and will not be called. */
void watchdog_remove_probe(watchdog *w, void *ctx);
/* Iteration done, in ms: progress, and a sample for the auto limit. */
void watchdog_step(watchdog *w, int iteration, double ms);
/* The limit in force now, in seconds (0: off). */
double watchdog_limit_s(const watchdog *w);
/* How near the watchdog came to firing: the moment the rank's idle time was the largest share
 * of the limit then in force (its phase and iteration), and the limit in force now. */
typedef struct watchdog_margin {
    double limit_s;          /* in force now (0: off) */
    double closest_idle_s;   /* the idle time at the closest call */
    double closest_limit_s;  /* the limit then */
    int closest_iteration;
    char closest_phase[64];
} watchdog_margin;
/* 0, or -1 when w is NULL (no watchdog). */
int watchdog_get_margin(watchdog *w, watchdog_margin *out);
/* From the fire hook, once the job's record is written: kill the stopped ranks of this machine
 * it named (a launcher's abort would wait on them; killing them sooner could end this rank
 * before its record is written). */
void watchdog_kill_stopped(watchdog *w);
/* Stops the thread and removes this rank's heartbeat. */
void watchdog_stop(watchdog *w);

/* A rank's heartbeat record, as its watchdog last wrote it. */
typedef struct watchdog_heartbeat {
    double beat;     /* when it was written (CLOCK_REALTIME s) */
    double progress; /* the rank's last progress (CLOCK_REALTIME s) */
    long pid;
    int iteration;
    char phase[64], host[128], waits[160];
} watchdog_heartbeat;
/* Rank's heartbeat in dir (opened without following links).  0, or -1 when there is none or
 * it is not one. */
int watchdog_read_heartbeat(const char *dir, int rank, watchdog_heartbeat *out);

/* This machine's name as heartbeats record it (one word), into out. */
void watchdog_hostname(char *out, size_t len);

/* --hang-timeout's text: "auto", or seconds (0 off).  0, or -1 when it is neither. */
int watchdog_parse_timeout(const char *text, double *out);

#endif
