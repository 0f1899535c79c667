/*
 * launch.c — aebench --ranks N (launch.h): the supervisor of one job, and the relaunches of a
 * job that lost ranks.  The ranks' side, and the job's private directory, are job_dir.c's.
 */
#include "launch.h"
#include "hostfile.h"
#include "launch_status.h"

#include "child.h"
#include "report.h"
#include "../engines/runtime/timer.h"
#include "../engines/runtime/watchdog.h"
#include "run.h"
#include "strv.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* ---- the supervisor ------------------------------------------------------------------------ */

/* The first executable `name` on the PATH into buf; -1 when there is none. */
static int find_on_path(const char *name, char *buf, size_t len)
{
    const char *path = getenv("PATH");
    if (!path) return -1;
    for (const char *p = path; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0 && (size_t)snprintf(buf, len, "%.*s/%s", (int)n, p, name) < len &&
            access(buf, X_OK) == 0)
            return 0;
        p += n + (end ? 1 : 0);
    }
    return -1;
}

/* Open MPI's launcher (it refuses root and oversubscription unless told): Debian's
 * alternatives resolve mpiexec to orterun / prterun / mpiexec.openmpi; MPICH's is hydra. */
static int is_open_mpi(const char *mpiexec)
{
    char real[PATH_MAX];
    if (!realpath(mpiexec, real)) return 0;
    const char *base = strrchr(real, '/');
    base = base ? base + 1 : real;
    return strstr(base, "openmpi") || strstr(base, "orterun") || strstr(base, "prterun");
}

/* The identity of the log rank 0 created (its "log-id DEV INO" report line); have 0: not
 * reported (then what the file is must do: ours, regular, one link). */
typedef struct file_id {
    int have;
    unsigned long long dev, ino;
} file_id;

/* The job's report lines (the file its rank 0 appended them to), relayed to our parent in
 * order, the log and JSON paths kept; the file is removed. */
static void relay_report(const run_config *run_cfg, const char *notes, char *log_path, size_t log_len,
                         file_id *log_id, char *json_path, size_t json_len)
{
    memset(log_id, 0, sizeof *log_id);
    char path[PATH_MAX + 16], line[8192];
    snprintf(path, sizeof path, "%s/report", notes);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        report_to_parent(run_cfg, "%s", line);
        if (strncmp(line, "log ", 4) == 0) snprintf(log_path, log_len, "%.4000s", line + 4);
        if (strncmp(line, "json ", 5) == 0) snprintf(json_path, json_len, "%.4000s", line + 5);
        if (sscanf(line, "log-id %llu %llu", &log_id->dev, &log_id->ino) == 2) log_id->have = 1;
    }
    fclose(f);
    unlink(path);
}

/* What the ranks' notes say, one "rank R: ..." per note, in rank order, and the earliest
 * time a note was written (CLOCK_REALTIME seconds, its second line; 0 if none); what the
 * heartbeats left say of the rank that stopped first (*lost); removes them and the directory. */
typedef struct lost_rank {
    int rank;
    watchdog_heartbeat hb; /* its last heartbeat (hb.beat 0: none was left) */
    int noted; /* a rank's note says why itself (--fail-at killed it): nothing to add */
    unsigned long long tied; /* other ranks seen to exit in the same instant (either may be the
                                one lost: the supervisor woke after both) */
} lost_rank;

/* Which rank of this machine exited first: the supervisor holds a pidfd of each rank (from
 * its heartbeat's pid) and polls them with the job's pipe.  A rank killed from outside exits
 * before mpiexec ends the others; its heartbeat, rewritten every 250 ms, cannot tell that
 * order, its exit can, mostly.  Not always: a peer in a collective with it sees it gone as soon
 * as its memory is (UCX reads a peer's memory directly), aborts, and may finish exiting while
 * the killed rank's kernel still tears down the rest of it (seen once in CI: the peer's SIGABRT
 * first, the victim's SIGKILL a moment later).  So exits within EXIT_TIE_MS of the first are
 * one event, and within it a rank that was killed by a signal is taken before one that ended
 * itself (an exit code, or the abort of an MPI transport that lost its peer); the kernel keeps
 * that status for a pidfd after the rank is reaped (PIDFD_GET_INFO, Linux 6.15; before it, the
 * order alone decides). */
enum { EXIT_WATCH_MAX = 64, EXIT_TIE_MS = 1000, EXIT_SETTLE_MS = 2000 };
typedef struct exit_order {
    int fd[EXIT_WATCH_MAX]; /* 0: not yet watched, > 0: its pidfd (kept to the end for its exit
                               status), -1: not watchable */
    pid_t pid[EXIT_WATCH_MAX]; /* its pid (from its heartbeat), where watched */
    double seen_ms[EXIT_WATCH_MAX]; /* when poll first found it exited (0: not yet) */
    int round[EXIT_WATCH_MAX]; /* which poll found it (ranks of one poll: the supervisor woke
                                  after both, their order is unknown) */
    int rounds;
    int ranks;
    char host[128];
} exit_order;

static void exit_order_init(exit_order *x, int ranks)
{
    memset(x, 0, sizeof *x);
    x->ranks = ranks < EXIT_WATCH_MAX ? ranks : EXIT_WATCH_MAX;
    watchdog_hostname(x->host, sizeof x->host); /* (as the heartbeats write it) */
}

/* Watch the ranks whose heartbeats appeared since the last call (this machine's only). */
static void exit_order_scan(exit_order *x, const char *notes)
{
    for (int r = 0; r < x->ranks; r++) {
        if (x->fd[r] != 0) continue;
        watchdog_heartbeat hb;
        if (watchdog_read_heartbeat(notes, r, &hb) != 0) continue;
        if (strcmp(hb.host, x->host) != 0 || hb.pid <= 0) {
            x->fd[r] = -1;
            continue;
        }
        x->pid[r] = (pid_t)hb.pid;
        const long fd = syscall(SYS_pidfd_open, (pid_t)hb.pid, 0);
        /* (a kernel before 5.3, or the rank already gone: its exit is not ordered) */
        x->fd[r] = fd > 0 ? (int)fd : -1;
        if (fd > 0 && fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) {
            close((int)fd);
            x->fd[r] = -1;
        }
    }
}

/* Poll entries for the watched ranks not yet seen to exit after p[0..base); their ranks into
 * which[]. */
static int exit_order_fill(const exit_order *x, struct pollfd *p, int base, int *which)
{
    int n = base;
    for (int r = 0; r < x->ranks; r++)
        if (x->fd[r] > 0 && x->seen_ms[r] == 0) {
            p[n] = (struct pollfd){.fd = x->fd[r], .events = POLLIN};
            which[n++] = r;
        }
    return n;
}

/* The ranks whose pidfds one poll found readable (mask). */
static void exit_order_seen(exit_order *x, unsigned long long exited)
{
    const double now = wall_ms();
    x->rounds++;
    for (int r = 0; r < x->ranks; r++)
        if ((exited >> r) & 1) {
            x->seen_ms[r] = now > 0 ? now : 1;
            x->round[r] = x->rounds;
        }
}

/* PIDFD_GET_INFO's argument as far as the exit status (its first version, 64 bytes; the
 * kernel's headers here may predate it) */
typedef struct pidfd_exit_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code; /* as wait(2) gives it */
} pidfd_exit_info;
#define PIDFD_GET_INFO_IOCTL _IOWR(0xFF, 11, pidfd_exit_info)
#define PIDFD_INFO_EXIT_BIT 8u

/* What the kernel says of rank r's exit: 1 with its wait(2) status in *code once the rank is
 * reaped, 0 while it is not (still running, or a zombie), -1 when it cannot say (no pidfd, or a
 * kernel before PIDFD_GET_INFO). */
static int exit_order_status(const exit_order *x, int r, int *code)
{
    if (x->fd[r] <= 0) return -1;
    pidfd_exit_info info;
    memset(&info, 0, sizeof info);
    info.mask = PIDFD_INFO_EXIT_BIT;
    if (ioctl(x->fd[r], PIDFD_GET_INFO_IOCTL, &info) != 0) return -1;
    if (!(info.mask & PIDFD_INFO_EXIT_BIT)) return 0;
    *code = info.exit_code;
    return 1;
}

/* 1 when the kernel says rank r was killed by a signal other than SIGABRT, 0 when it ended
 * itself (exit code, abort), -1 when it cannot say (an older kernel, not reaped yet). */
static int exit_order_killed(const exit_order *x, int r)
{
    int code = 0;
    if (exit_order_status(x, r, &code) != 1) return -1;
    return WIFSIGNALED(code) && WTERMSIG(code) != SIGABRT;
}

/* After mpiexec is reaped: the watched ranks whose exit the loop did not see (it ends when the
 * job's pipe closes, and a rank's exit closes its end before its pidfd turns readable), or
 * whose exit status the kernel does not have yet, for up to ms more.  The status is there once
 * the rank is reaped.  A rank that outlived its MPI proxy is an orphan, and an init that reaps
 * orphans every two seconds (this machine's does) left it unreaped.  Its status was then
 * unknown, the order alone decided, and the peer whose abort came first was named (seen once in
 * CI).  The supervisor is the job's subreaper, so such a rank is its child and is reaped here. */
static void exit_order_settle(exit_order *x, int ms)
{
    const double until = wall_ms() + ms;
    for (;;) {
        struct pollfd p[EXIT_WATCH_MAX];
        int which[EXIT_WATCH_MAX], pending = 0;
        const int n = exit_order_fill(x, p, 0, which);
        for (int r = 0; r < x->ranks; r++) {
            int code;
            if (x->seen_ms[r] == 0 || exit_order_status(x, r, &code) != 0) continue;
            /* An exited rank nobody reaped: its MPI proxy ended first, so it became this
             * supervisor's (the job's subreaper: launch_job); reaping it gives the kernel its
             * status.  (ECHILD: it is another's, which will reap it.) */
            int status;
            if (waitpid(x->pid[r], &status, WNOHANG) != x->pid[r]) pending = 1;
        }
        const double left = until - wall_ms();
        if ((n == 0 && !pending) || left <= 0) return;
        const int ready = poll(p, (nfds_t)n, left < 20 ? (int)left + 1 : 20);
        if (ready < 0 && errno != EINTR) return;
        unsigned long long exited = 0;
        for (int i = 0; i < n && ready > 0; i++)
            if (p[i].revents) exited |= 1ull << which[i];
        if (exited) exit_order_seen(x, exited);
    }
}

/* The ranks that exited first (mask; one, or several the order cannot tell apart): of those
 * seen within EXIT_TIE_MS of the first exit, the ones killed by a signal if some ended
 * themselves, and of these the ones the earliest poll found. */
static unsigned long long exit_order_first(const exit_order *x)
{
    double t0 = 0;
    for (int r = 0; r < x->ranks; r++)
        if (x->seen_ms[r] > 0 && (t0 == 0 || x->seen_ms[r] < t0)) t0 = x->seen_ms[r];
    if (t0 == 0) return 0;
    unsigned long long window = 0, killed = 0, ended_itself = 0;
    for (int r = 0; r < x->ranks; r++) {
        if (x->seen_ms[r] == 0 || x->seen_ms[r] > t0 + EXIT_TIE_MS) continue;
        window |= 1ull << r;
        const int k = exit_order_killed(x, r);
        if (k == 1) killed |= 1ull << r;
        if (k == 0) ended_itself |= 1ull << r;
    }
    const unsigned long long set = killed && ended_itself ? killed : window;
    int first_round = 0;
    for (int r = 0; r < x->ranks; r++)
        if (((set >> r) & 1) && (first_round == 0 || x->round[r] < first_round)) first_round = x->round[r];
    unsigned long long first = 0;
    for (int r = 0; r < x->ranks; r++)
        if (((set >> r) & 1) && x->round[r] == first_round) first |= 1ull << r;
    return first;
}

/* 1 once the process of pidfd fd has exited (its pidfd readable), 0 if it has not within ms. */
static int pidfd_exited_within(int fd, int ms)
{
    const double until = wall_ms() + ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        const double left = until - wall_ms();
        const int ready = poll(&p, 1, left <= 0 ? 0 : (int)left + 1);
        if (ready > 0) return 1;
        if (ready < 0 && errno != EINTR) return 0;
        if (ready == 0 && left <= 0) return 0;
    }
}

/* Rank 0 writes the run's log and JSON, and on a forwarded SIGINT or SIGTERM its own ERROR line
 * and "interrupted" record (run_interrupted).  mpiexec may end before it does (seen under load:
 * MPICH's proxy gone, rank 0 still writing), and the supervisor's "read the log's tail, append
 * why" (append_error_line) then raced rank 0's line: two ERROR lines, either order.  So before
 * the supervisor reads or writes the record, rank 0 (of this machine: it holds its pidfd) has
 * ended: RANK0_END_WAIT_MS for it to finish what it writes, then, as the orphan of a job that is
 * over, SIGKILL and RANK0_KILL_WAIT_MS more.  An exited process writes nothing more: the
 * supervisor's check and append see rank 0's last word, whatever the interleaving. */
enum { RANK0_END_WAIT_MS = 20000, RANK0_KILL_WAIT_MS = 5000 };
static void exit_order_await_rank0(exit_order *x, const char *notes)
{
    if (x->ranks <= 0) return;
    if (x->fd[0] == 0) exit_order_scan(x, notes); /* (stopped before it was watched) */
    const int fd = x->fd[0];
    if (fd <= 0 || pidfd_exited_within(fd, RANK0_END_WAIT_MS)) return; /* (another machine's: not ours to wait on) */
    fprintf(stderr, "aebench: --ranks: rank 0 (pid %ld) outlived the job by %d s: ended (SIGKILL) before its "
            "record is completed\n", (long)x->pid[0], RANK0_END_WAIT_MS / 1000);
    if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) != 0)
        fprintf(stderr, "aebench: --ranks: cannot end rank 0: %s\n", strerror(errno));
    else if (!pidfd_exited_within(fd, RANK0_KILL_WAIT_MS))
        fprintf(stderr, "aebench: --ranks: rank 0 did not end within %d s of SIGKILL: its log may get a second "
                "ERROR line\n", RANK0_KILL_WAIT_MS / 1000);
}

static void exit_order_close(exit_order *x)
{
    for (int r = 0; r < x->ranks; r++)
        if (x->fd[r] > 0) close(x->fd[r]);
    x->ranks = 0;
}

static void collect_notes(const char *dir, char *out, size_t len, double *noted_at, lost_rank *lost,
                          unsigned long long first_exits)
{
    out[0] = '\0';
    *noted_at = 0;
    memset(lost, 0, sizeof *lost);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    int best = INT_MAX;
    char best_line[600] = "";
    unsigned long long noted = 0;
    int count = 0, self_killed = 0;
    lost_rank left[64];
    memset(left, 0, sizeof left);
    while ((e = readdir(d))) {
        int r;
        char path[PATH_MAX + 256], line[512] = "";
        if (sscanf(e->d_name, "heartbeat-%d", &r) == 1) {
            /* The ranks' heartbeats (watchdog.h): a rank that ended in order removed its own;
             * the rank lost is chosen from those left below. */
            watchdog_heartbeat hb;
            if (r >= 0 && r < 64 && watchdog_read_heartbeat(dir, r, &hb) == 0)
                left[r] = (lost_rank){.rank = r, .hb = hb};
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
            continue;
        }
        if (sscanf(e->d_name, "rank-%d", &r) != 1) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            char when[64];
            double t = 0;
            if (!fgets(line, sizeof line, f)) line[0] = '\0';
            if (fgets(when, sizeof when, f) && sscanf(when, "%lf", &t) == 1 && t > 0 &&
                (*noted_at == 0 || t < *noted_at))
                *noted_at = t;
            fclose(f);
        }
        line[strcspn(line, "\n")] = '\0';
        if (r < best) {
            best = r;
            snprintf(best_line, sizeof best_line, "rank %d %s", r, line);
        }
        if (r >= 0 && r < 64) noted |= 1ull << r;
        self_killed |= strncmp(line, "killed itself", 13) == 0;
        count++;
        unlink(path);
    }
    closedir(d);
    job_dir_remove(dir);
    /* The rank the job lost: of the heartbeats left, the oldest of a rank that left no note (a
     * rank that noted something was alive to say it), else the oldest of all; first among the
     * ranks of this machine that exited first (a rank killed from outside exits before mpiexec
     * ends the others, but its heartbeat, beaten every 250 ms, cannot show that), unless a
     * noteless rank's heartbeat is stale (a stopped rank is the one lost, though its peer's
     * watchdog may make it exit first or last). */
    double newest_first = 0, oldest_noteless = 0;
    for (int r = 0; r < 64; r++) {
        if (left[r].hb.beat <= 0 || ((noted >> r) & 1)) continue;
        if (((first_exits >> r) & 1) && left[r].hb.beat > newest_first) newest_first = left[r].hb.beat;
        if (oldest_noteless == 0 || left[r].hb.beat < oldest_noteless) oldest_noteless = left[r].hb.beat;
    }
    const unsigned long long prefer = newest_first - oldest_noteless > WATCHDOG_STALE_S ? 0 : first_exits;
    for (int pass = 0; pass < 3 && lost->hb.beat == 0; pass++)
        for (int r = 0; r < 64; r++)
            if (left[r].hb.beat > 0 && (pass == 2 || !((noted >> r) & 1)) && (pass > 0 || ((prefer >> r) & 1)) &&
                (lost->hb.beat == 0 || left[r].hb.beat < lost->hb.beat))
                *lost = left[r];
    /* (a rank that killed itself on purpose says why itself) */
    lost->noted = self_killed;
    if (lost->hb.beat > 0 && (prefer >> lost->rank) & 1) lost->tied = prefer & ~(1ull << lost->rank);
    if (count > 0) snprintf(out, len, "%s%s", best_line, count > 1 ? " (and other ranks left notes)" : "");
}

/* "rank R (pid P on HOST) was lost in the PHASE of iteration I (its last heartbeat)" into out;
 * its length. */
static int describe_lost(const lost_rank *l, char *out, size_t len)
{
    int n = snprintf(out, len, "rank %d (pid %ld on %s) was lost in the %s of iteration %d (its last heartbeat)",
                     l->rank, l->hb.pid, l->hb.host, l->hb.phase, l->hb.iteration);
    for (int r = 0; r < 64 && n > 0 && (size_t)n + 80 < len; r++)
        if ((l->tied >> r) & 1)
            n += snprintf(out + n, len - (size_t)n, " (rank %d ended in the same instant: it may be the one lost)", r);
    return n < 0 ? 0 : (size_t)n >= len ? (int)len - 1 : n;
}

/* The results directory may be writable by others: a file of the run found there is ours only
 * if it is a regular file of our user with one link (a link planted in its place — symbolic,
 * or hard to someone else's file — is not), and, where known, the very file rank 0 made.
 * 0, or -1 with why. */
static int own_file(int fd, const file_id *id, const char **why)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return *why = "it cannot be examined", -1;
    if (!S_ISREG(st.st_mode)) return *why = "it is no longer a regular file", -1;
    if (st.st_uid != geteuid()) return *why = "it belongs to another user now", -1;
    if (st.st_nlink != 1) return *why = "it has another link (a hard link to it, or it is one)", -1;
    if (id && id->have && ((unsigned long long)st.st_dev != id->dev || (unsigned long long)st.st_ino != id->ino))
        return *why = "it is not the file rank 0 created", -1;
    return 0;
}

/* The text of a file of the run (own_file), read without following a link; NULL if it is not
 * one, or cannot be read (a JSON up to 64 MiB). */
static char *read_own_text(const char *path)
{
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    const char *why;
    if (own_file(fd, NULL, &why) != 0) {
        close(fd);
        return NULL;
    }
    return report_read_fd_max(fd, 64u << 20, NULL);
}

/* The last line of the log open at fd (size bytes) into out when it is rank 0's own ERROR line
 * ("" otherwise): rank 0 may have said why itself and then been killed before its JSON did. */
static void log_error_tail(int fd, off_t size, char *out, size_t len)
{
    out[0] = '\0';
    char tail[1100];
    const off_t from = size > (off_t)sizeof tail - 1 ? size - (off_t)(sizeof tail - 1) : 0;
    ssize_t got;
    while ((got = pread(fd, tail, (size_t)(size - from), from)) < 0 && errno == EINTR) {
    }
    if (got <= 0) return;
    tail[got] = '\0';
    if (tail[got - 1] == '\n') tail[--got] = '\0';
    const char *nl = strrchr(tail, '\n');
    const char *last = nl ? nl + 1 : from == 0 ? tail : NULL;
    if (last && strncmp(last, "ERROR: ", 7) == 0) snprintf(out, len, "%s", last + 7);
}

/* "ERROR: why" appended to rank 0's log, through no link: a log replaced since (a link to
 * another file, or another file) is not written, and stderr says so.  A log whose last line is
 * already rank 0's own ERROR line gets no second one: its text goes into said (else "").  0
 * when the log says why (written, or already). */
static int append_error_line(const char *log_path, const file_id *id, const char *why, char *said, size_t said_len)
{
    said[0] = '\0';
    /* (O_NONBLOCK: a FIFO planted there cannot block the open; no O_CREAT: a log that is gone
     * is not made anew; O_RDWR, not O_WRONLY: log_error_tail reads the tail through this fd, and
     * a pread on a write-only fd fails (EBADF), which left the tail unread and let a second
     * ERROR line follow rank 0's own whenever rank 0 had not yet relayed its JSON's path) */
    const int fd = open(log_path, O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    const char *refused = NULL;
    if (fd < 0) refused = errno == ELOOP ? "it is a symbolic link now" : strerror(errno);
    if (fd < 0 || own_file(fd, id, &refused) != 0) {
        fprintf(stderr, "aebench: %s was replaced since rank 0 wrote it (%s): not written\n", log_path, refused);
        if (fd >= 0) close(fd);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) == 0) log_error_tail(fd, st.st_size, said, said_len);
    if (said[0]) {
        close(fd);
        return 0;
    }
    char line[1024];
    const int n = snprintf(line, sizeof line, "ERROR: %.1000s\n", why);
    const int bad = write(fd, line, (size_t)n) != n;
    if (bad) fprintf(stderr, "aebench: cannot append to %s: %s\n", log_path, strerror(errno ? errno : EIO));
    if (close(fd) != 0 && !bad) fprintf(stderr, "aebench: cannot append to %s: %s\n", log_path, strerror(errno));
    return bad ? -1 : 0;
}

/* The field `key` ("status", "message") the JSON at path says into out ("" when there is
 * none, or the file is not the run's own: read_own_text). */
static void json_field(const char *path, const char *key, char *out, size_t len)
{
    out[0] = '\0';
    if (!path[0]) return;
    char *text = read_own_text(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *st = root ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    if (cJSON_IsString(st)) snprintf(out, len, "%s", st->valuestring);
    cJSON_Delete(root);
}

static void json_status(const char *path, char *out, size_t len) { json_field(path, "status", out, len); }

/* Does the JSON at path say the run failed (its rank 0 wrote why; "running" is the record so
 * far of a job that did not get to say)? */
static int json_says_failed(const char *path)
{
    char st[32];
    json_status(path, st, sizeof st);
    return st[0] && strcmp(st, "ok") != 0 && strcmp(st, "running") != 0;
}

/* Rank 0's JSON says status (error, or interrupted: the job was stopped by a signal passed on
 * to it) with msg unless it already says why the run failed. */
static void mark_json(const char *json_path, const char *log_path, const char *status, const char *msg)
{
    if (json_says_failed(json_path)) return; /* rank 0 said what went wrong itself */
    /* (what is there is taken only if it is the run's own file; the new one replaces whatever
     * is there, a link included, by a rename: report_write_text) */
    char *old = read_own_text(json_path);
    cJSON *root = old ? cJSON_Parse(old) : NULL;
    free(old);
    if (root) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "status");
        cJSON_DeleteItemFromObjectCaseSensitive(root, "message");
    } else {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "log", log_path);
    }
    cJSON_AddStringToObject(root, "status", status);
    cJSON_AddStringToObject(root, "message", msg);
    char *text = report_json_text(root);
    cJSON_Delete(root);
    if (!text) return;
    if (report_write_text(json_path, text) != 0) fprintf(stderr, "aebench: cannot update %s\n", json_path);
    cJSON_free(text);
}

/* --hosts FILE rewritten for the launcher (MPICH "host:S", Open MPI "host slots=S") as
 * DIR/hosts, created here (never through a link); its path into out. */
static int write_hostfile(const char *file, int open_mpi, const char *dir, char *out, size_t outlen, char *err,
                          size_t errlen)
{
    host_list *h = malloc(sizeof *h);
    if (!h) return snprintf(err, errlen, "--hosts: out of memory"), -1;
    if (host_list_read(file, h, err, errlen)) {
        free(h);
        return -1;
    }
    snprintf(out, outlen, "%s/hosts", dir);
    const int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int bad = !f;
    for (int i = 0; !bad && i < h->n; i++)
        bad = (open_mpi ? fprintf(f, "%s slots=%d\n", h->name[i], h->slots[i])
                        : fprintf(f, "%s:%d\n", h->name[i], h->slots[i])) < 0;
    if (f) bad = fclose(f) != 0 || bad;
    else if (fd >= 0) close(fd);
    free(h);
    if (bad) snprintf(err, errlen, "--hosts: cannot write %.300s: %s", out, strerror(errno));
    return bad ? -1 : 0;
}

/* The start-up deadline (--hang-timeout auto) and the grace mpiexec gets to end its ranks
 * after a SIGTERM before a SIGKILL. */
enum { START_DEADLINE_S = 120, START_GRACE_S = 10 };

/* The job's command line into *jargv (strv.h): mpiexec -n N, its own options, this binary,
 * --job-notes and the job's notes directory, and argv[1..] without --ranks, --hosts, any
 * --job-notes and --report-fd.  0, or -1 out of memory (*jargv is the caller's to free either
 * way). */
static int job_command(int argc, char **argv, const run_config *run_cfg, const char *mpiexec, const char *exe,
                       int open_mpi, const char *hosts, const char *notes, char ***jargv_out, int *jn_out)
{
    char **jargv = NULL, nbuf[16];
    int jn = 0;
    snprintf(nbuf, sizeof nbuf, "%d", run_cfg->ranks);
    int bad = strv_push(&jargv, &jn, mpiexec) || strv_push(&jargv, &jn, "-n") || strv_push(&jargv, &jn, nbuf);
    if (!bad && open_mpi) {
        /* Open MPI binds each of a few ranks to one core by default: a rank's host Adam pool
         * and CPU stream threads would then share that core.  MPICH's hydra binds nothing. */
        bad = strv_push(&jargv, &jn, "--oversubscribe") || strv_push(&jargv, &jn, "--bind-to") ||
              strv_push(&jargv, &jn, "none");
        if (!bad && geteuid() == 0) bad = strv_push(&jargv, &jn, "--allow-run-as-root");
    }
    /* --hosts: mpiexec's own hostfile option (Hydra's -f, Open MPI's -hostfile); the ranks do
     * not see it (they learn their machines from MPI) */
    if (!bad && run_cfg->hosts_path[0])
        bad = strv_push(&jargv, &jn, open_mpi ? "-hostfile" : "-f") || strv_push(&jargv, &jn, hosts);
    if (!bad) bad = strv_push(&jargv, &jn, exe);
    /* the notes directory first: the ranks read it before anything they may refuse (cli.c) */
    if (!bad) bad = strv_push(&jargv, &jn, "--job-notes") || strv_push(&jargv, &jn, notes);
    /* the ranks get every option but these: they are the job (--ranks), its machines, its
     * notes directory (this one's, given above) and our own report pipe (they report into the
     * notes directory, which we relay) */
    static const char *const not_for_ranks[] = {"ranks", "hosts", "job-notes", "report-fd", NULL};
    char **kept = NULL;
    int nk = 0;
    if (!bad) bad = cli_args_without(argv + 1, argc - 1, not_for_ranks, &kept, &nk) != 0;
    for (int i = 0; i < nk && !bad; i++) bad = strv_push(&jargv, &jn, kept[i]);
    strv_free(&kept, &nk);
    *jargv_out = jargv;
    *jn_out = jn;
    return bad ? -1 : 0;
}

/* mpiexec started with jargv and our environment, its stdout and stderr ours, holding the
 * pipe's write end write_fd (made inheritable in it) and the signal mask old: its pid, or -1
 * with errno. */
static pid_t fork_mpiexec(const char *mpiexec, char **jargv, int write_fd, const sigset_t *old)
{
    fflush(stdout);
    fflush(stderr);
    const pid_t supervisor = getpid();
    /* Ranks that outlive their MPI proxy become this process's children, not init's: their
     * exit statuses are then ours to collect (exit_order_settle).  Best effort: without it, the
     * order of the exits alone names the rank lost. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        fprintf(stderr, "aebench: note: cannot be the job's subreaper (%s): ranks' exit statuses may be unknown\n",
                strerror(errno));
    const pid_t pid = fork();
    if (pid == 0) {
        /* mpiexec ends its ranks on SIGTERM: it gets one when we die, however we die */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != supervisor) _exit(127);
        sigprocmask(SIG_SETMASK, old, NULL);
        if (fcntl(write_fd, F_SETFD, 0) != 0) _exit(127);
        execv(mpiexec, jargv);
        static const char msg[] = "aebench: cannot start mpiexec\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    return pid;
}

/* Forward signals (from sfd to mpiexec, pid; the last one into *interrupted) until everything
 * holding the pipe (read_fd its read end) has exited, watching the ranks' exits meanwhile
 * (order).  Start-up deadline: a job whose ranks never get past MPI's start-up (a machine of
 * --hosts unreachable: its ranks never come, and the others wait in MPI_Init for them;
 * mpiexec may wait too) would hang forever, so unless a rank says it started
 * (launch_note_started) within --hang-timeout (auto: START_DEADLINE_S; 0: never), the job is
 * ended, saying why.  1 when the deadline ended it. */
static int watch_job(pid_t pid, int read_fd, int sfd, const char *notes, double deadline_s, exit_order *order,
                     int *interrupted)
{
    char drain[512];
    const double t_launch = wall_ms() / 1e3;
    double ended_at = 0; /* (when the deadline sent SIGTERM: SIGKILL after START_GRACE_S) */
    int started = 0, start_timeout = 0;
    char started_path[PATH_MAX + 16];
    snprintf(started_path, sizeof started_path, "%s/started", notes);
    for (;;) {
        if (!started && deadline_s > 0) {
            struct stat sst;
            started = lstat(started_path, &sst) == 0;
            const double now = wall_ms() / 1e3;
            if (!started && !start_timeout && now - t_launch > deadline_s) {
                start_timeout = 1;
                ended_at = now;
                kill(pid, SIGTERM);
            } else if (start_timeout && ended_at > 0 && now - ended_at > START_GRACE_S) {
                ended_at = 0;
                kill(pid, SIGKILL);
            }
        }
        struct pollfd p[2 + EXIT_WATCH_MAX] = {{.fd = read_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        int which[2 + EXIT_WATCH_MAX];
        exit_order_scan(order, notes);
        const int np = exit_order_fill(order, p, 2, which);
        if (sfd < 0) p[1].fd = -1; /* (poll skips it) */
        /* (a quarter second: ranks whose heartbeats appear later get watched too) */
        const int ready = poll(p, (nfds_t)np, WATCHDOG_TICK_MS);
        if (ready < 0) {
            if (errno == EINTR) continue;
            break;
        }
        unsigned long long exited = 0;
        for (int i = 2; i < np; i++)
            if (p[i].revents) exited |= 1ull << which[i];
        if (exited) exit_order_seen(order, exited);
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                kill(pid, (int)si.ssi_signo);
                *interrupted = (int)si.ssi_signo;
            }
        }
        if (!(p[0].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = read(read_fd, drain, sizeof drain);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
    }
    return start_timeout;
}

/* What the job's end says (outcome, as far as the launcher and the kernel told it), read from
 * what its ranks left in notes (the report lines, relayed; rank 0's JSON; the notes and
 * heartbeats, then removed with the directory): the exit code, one line on stderr and into
 * why_out saying why when it is not 0 or 2, and that line in rank 0's log and JSON. */
static int job_ended(const run_config *run_cfg, const char *notes, launch_outcome *outcome, double deadline_s,
                     int interrupted, char *why_out, size_t why_len, double *failed_at_s, int *init_refused)
{
    char log_path[PATH_MAX] = "", json_path[PATH_MAX] = "";
    file_id log_id;
    relay_report(run_cfg, notes, log_path, sizeof log_path, &log_id, json_path, sizeof json_path);
    char failed_in[32], rank0_status[32];
    json_field(json_path, "failed_in", failed_in, sizeof failed_in);
    *init_refused = strcmp(failed_in, "initialisation") == 0;
    json_status(json_path, rank0_status, sizeof rank0_status);
    outcome->rank0 = !rank0_status[0]                       ? RANK0_NONE
                     : strcmp(rank0_status, "ok") == 0      ? RANK0_OK
                     : strcmp(rank0_status, "running") == 0 ? RANK0_RUNNING
                     : strcmp(rank0_status, "oom") == 0     ? RANK0_OOM
                                                            : RANK0_FAILED;
    char refusal[PATH_MAX + 16];
    struct stat rst;
    snprintf(refusal, sizeof refusal, "%s/" LAUNCH_NOTE_REFUSED, notes);
    outcome->refusal_noted = lstat(refusal, &rst) == 0;
    char why[700];
    lost_rank lost;
    collect_notes(notes, why, sizeof why, failed_at_s, &lost, outcome->first);
    if (why[0] && lost.hb.beat > 0 && !lost.noted) {
        /* The rank lost left no note of its own: the notes are what the others saw next (an
         * error in a collective, a watchdog's line). */
        char seen[700];
        snprintf(seen, sizeof seen, "%s", why);
        const int n = describe_lost(&lost, why, sizeof why);
        snprintf(why + n, sizeof why - (size_t)n, "; then %.200s", seen);
    }
    const launch_ending ending = launch_ending_of(outcome);
    const int code = ending.code;
    /* the failure counts from the lost rank's last heartbeat when no note says sooner (a hung
     * rank's peer notes the hang only when its watchdog fires, --hang-timeout later) */
    if (lost.hb.beat > 0 && code != 0 && (*failed_at_s == 0 || lost.hb.beat < *failed_at_s)) *failed_at_s = lost.hb.beat;
    /* 0: fine; 2: the ranks refused the configuration, and rank 0 said why in one line (nothing
     * was written) */
    if (code == 0 || code == EXIT_BAD_INPUT) return code;
    const int mpiexec_exit = outcome->reaped && WIFEXITED(outcome->status) ? WEXITSTATUS(outcome->status) : -1;
    if (outcome->start_timeout) {
        /* no rank got past MPI's start-up: not a failure of a rank, of the launch */
        if (run_cfg->hosts_path[0])
            snprintf(why, sizeof why, "no rank got past MPI's start-up within %.0f s (--hang-timeout%s): a machine of "
                     "--hosts %.300s may be unreachable, or mpiexec could not start ranks there (its message is above); "
                     "the job was ended", deadline_s, run_cfg->hang_timeout_s < 0 ? " auto" : "", run_cfg->hosts_path);
        else
            snprintf(why, sizeof why, "no rank got past MPI's start-up within %.0f s (--hang-timeout%s): mpiexec "
                     "could not start the job (its message is above); the job was ended", deadline_s,
                     run_cfg->hang_timeout_s < 0 ? " auto" : "");
    } else if (interrupted) {
        /* told to stop: the job ended because we passed the signal on */
        snprintf(why, sizeof why, "%s", ending.reason);
    } else if (!why[0] && lost.hb.beat > 0 && !ending.said) {
        /* the rank lost, from the heartbeats, and what the launcher's status says */
        const int n = describe_lost(&lost, why, sizeof why);
        snprintf(why + n, sizeof why - (size_t)n, "; %.400s", ending.reason);
    } else if (!why[0] && outcome->rank0 == RANK0_FAILED && ending.said) {
        /* rank 0 said why in its record (an engine that refused what it found) */
        char said[480];
        json_field(json_path, "message", said, sizeof said);
        snprintf(why, sizeof why, "rank 0 ended the job: %s (mpiexec exit %d)", said[0] ? said : "see its log",
                 mpiexec_exit);
    } else if (!why[0]) {
        snprintf(why, sizeof why, "%s", ending.reason);
    } else if (!ending.said && code == EXIT_RANK_LOST && !lost.noted) {
        /* the notes say what the ranks saw; the launcher's status and the kernel's, which rank
         * was killed by which signal */
        const size_t n = strlen(why);
        if (n + 2 < sizeof why) snprintf(why + n, sizeof why - n, "; %.300s", ending.reason);
    }
    fprintf(stderr, "aebench: --ranks %d: %s\n", run_cfg->ranks, why);
    if (why_len) snprintf(why_out, why_len, "%s", why);
    if (log_path[0]) {
        /* (rank 0 may have said it in the log and JSON itself: its watchdog fired) */
        char said[1024] = "";
        if (!json_says_failed(json_path)) append_error_line(log_path, &log_id, why, said, sizeof said);
        if (!json_path[0]) {
            /* rank 0 never got to its JSON: it goes beside the log */
            snprintf(json_path, sizeof json_path, "%s", log_path);
            char *dot = strrchr(json_path, '.');
            if (dot && strcmp(dot, ".txt") == 0) strcpy(dot, ".json");
            else json_path[0] = '\0';
        }
        /* (the JSON says what the log's last line says: rank 0's own words when it wrote them) */
        if (json_path[0]) mark_json(json_path, log_path, interrupted ? "interrupted" : "error", said[0] ? said : why);
    }
    return code;
}

/* One job: mpiexec -n N over this binary with argv[1..], supervised (see launch.h). */
static int launch_job(int argc, char **argv, const run_config *run_cfg, char *why_out, size_t why_len,
                      int *interrupted, double *failed_at_s, int *init_refused)
{
    *init_refused = 0;
    if (why_len) why_out[0] = '\0';
    *failed_at_s = 0;
    *interrupted = 0;
    char mpiexec[PATH_MAX], exe[PATH_MAX], err[512];
    if (find_on_path("mpiexec", mpiexec, sizeof mpiexec) != 0) {
        fprintf(stderr, "aebench: --ranks %d needs mpiexec on the PATH (make deps installs MPICH; or "
                        "start the ranks with mpirun yourself)\n", run_cfg->ranks);
        return EXIT_BAD_INPUT;
    }
    if (child_self_exe(exe, sizeof exe, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        return EXIT_RUN_ERROR;
    }
    char notes[PATH_MAX], hosts[PATH_MAX + 16];
    if (job_dir_make(notes, sizeof notes, "aebench-job") != 0) {
        /* (launch_ranks found the directory there and writable: this is a failure of the run,
         * a full disk, or it was taken away since) */
        fprintf(stderr, "aebench: --ranks: cannot make the job's private directory in %s (%s): %s\n", job_tmp(),
                job_tmp() == getenv("TMPDIR") ? "TMPDIR" : "TMPDIR unset: the default", strerror(errno));
        return EXIT_RUN_ERROR;
    }
    const int open_mpi = is_open_mpi(mpiexec);
    /* --hosts: the machines, in the launcher's own hostfile syntax (a FILE in the other MPI's
     * would not parse: Hydra refuses "slots=") in the job's private directory */
    if (run_cfg->hosts_path[0] && write_hostfile(run_cfg->hosts_path, open_mpi, notes, hosts, sizeof hosts, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        job_dir_remove(notes);
        return EXIT_BAD_INPUT;
    }
    char **jargv = NULL;
    int jn = 0;
    if (job_command(argc, argv, run_cfg, mpiexec, exe, open_mpi, hosts, notes, &jargv, &jn) != 0) {
        fprintf(stderr, "aebench: --ranks: out of memory\n");
        strv_free(&jargv, &jn);
        job_dir_remove(notes);
        return EXIT_RUN_ERROR;
    }
    /* The pipe tells when the job is over: mpiexec (and with MPICH the ranks) hold its write
     * end until they exit.  The report lines come through a file in notes (relay_report). */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "aebench: --ranks: cannot set up the job: %s\n", strerror(errno));
        strv_free(&jargv, &jn);
        job_dir_remove(notes);
        return EXIT_RUN_ERROR;
    }
    /* SIGINT and SIGTERM to the supervisor go to the job (mpiexec ends its ranks), read
     * from a signalfd: no handler, no global state. */
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    int sfd = -1;
    if (sigprocmask(SIG_BLOCK, &mask, &old) != 0 || (sfd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0)
        fprintf(stderr, "aebench: --ranks: signals will not be forwarded: %s\n", strerror(errno));
    const pid_t pid = fork_mpiexec(mpiexec, jargv, fds[1], &old);
    strv_free(&jargv, &jn);
    close(fds[1]);
    if (pid < 0) {
        fprintf(stderr, "aebench: fork: %s\n", strerror(errno));
        close(fds[0]);
        if (sfd >= 0) close(sfd);
        sigprocmask(SIG_SETMASK, &old, NULL);
        job_dir_remove(notes);
        return EXIT_RUN_ERROR;
    }
    exit_order order;
    exit_order_init(&order, run_cfg->ranks);
    const double deadline_s = run_cfg->hang_timeout_s > 0 ? run_cfg->hang_timeout_s : run_cfg->hang_timeout_s < 0 ? START_DEADLINE_S : 0;
    const int start_timeout = watch_job(pid, fds[0], sfd, notes, deadline_s, &order, interrupted);
    close(fds[0]);
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    /* (after mpiexec: it has reaped the ranks, so the kernel has their exit statuses; those
     * it has not yet, and exits not yet seen, get a moment more) */
    exit_order_settle(&order, EXIT_SETTLE_MS);
    const unsigned long long first_exits = exit_order_first(&order);
    /* what the launcher, the kernel and the ranks say of the ending (launch_status.h) */
    launch_outcome outcome = {.launcher = open_mpi ? LAUNCHER_OPEN_MPI : LAUNCHER_MPICH, .reaped = w == pid,
                              .status = status, .forwarded_signal = *interrupted, .start_timeout = start_timeout,
                              .calibrate = run_cfg->calibrate, .ranks = order.ranks, .first = first_exits};
    for (int r = 0; r < order.ranks && r < LAUNCH_RANKS_MAX; r++)
        if (exit_order_status(&order, r, &outcome.rank_status[r]) == 1) outcome.known |= 1ull << r;
    /* (after the outcome: rank 0's end, however late, changes nothing of what it says) */
    exit_order_await_rank0(&order, notes);
    exit_order_close(&order);
    if (sfd >= 0) close(sfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return job_ended(run_cfg, notes, &outcome, deadline_s, *interrupted, why_out, why_len, failed_at_s, init_refused);
}

/* ---- a job that lost ranks: relaunched to recover, as its engine says ------------------------
 * An engine with the recovery hook (engine_vtbl.recovery) names its job, the arguments its
 * first launch and its relaunches add, and what a lost machine takes with it; this supervisor
 * relaunches the job while the engine finds something to recover from.
 *
 * The supervisor tells a relaunched job's ranks how the job before ended on their command line,
 * --relaunch-of "RAN_S FAILED_S FAILED_AT NOTE" (cli.h's relaunch_account; cmd/run.c and
 * run_json.c put it in the recovered job's log and JSON "recovery"): the seconds the job before
 * ran (recovery.previous_job_seconds), when it failed in CLOCK_REALTIME seconds (a rank's note,
 * else when the supervisor saw it end: where recovery.time_lost_s counts from), the iteration an
 * injected fault (--fail-at) struck or 0 (recovery.failed_at_iteration, iterations_redone,
 * back_at_iteration), and one line: the job before, its time, how it ended, the relaunch
 * (the log's note; recovery.previous_job).  An argument, not the environment: it reaches the
 * ranks on other machines as the rest of the command line does, and nothing a shell left set
 * can put a failure into a record. */

/* What a relaunch does not pass on of its own accord: the injected fault (it happened). */
static const char *const FAULT_OPTIONS[] = {"fail-at", "fail-rank", "fail-kind", "fail-phase", "relaunch-of"};
enum { NFAULT_OPTIONS = sizeof FAULT_OPTIONS / sizeof FAULT_OPTIONS[0], NOT_PASSED_MAX = NFAULT_OPTIONS + 8 };

/* The arguments of a relaunch: args without the fault's options and those the engine says, then
 * its relaunch argument and --relaunch-of account, into *again (NULL-terminated, strv.h).  0, or
 * -1 out of memory. */
static int relaunch_args(char **args, int n, const engine_recovery *plan, const char *account, char ***again, int *m)
{
    const char *names[NOT_PASSED_MAX + 1];
    int k = 0;
    for (int i = 0; i < NFAULT_OPTIONS; i++) names[k++] = FAULT_OPTIONS[i];
    for (int i = 0; plan->not_passed_on && plan->not_passed_on[i] && k < NOT_PASSED_MAX; i++)
        names[k++] = plan->not_passed_on[i];
    names[k] = NULL;
    strv_free(again, m);
    char **kept = NULL;
    int nk = 0;
    int bad = strv_push(again, m, args[0]) || cli_args_without(args + 1, n - 1, names, &kept, &nk) != 0;
    for (int i = 0; i < nk && !bad; i++) bad = strv_push(again, m, kept[i]);
    strv_free(&kept, &nk);
    bad = bad || (plan->relaunch_arg && strv_push(again, m, plan->relaunch_arg));
    return bad || strv_push(again, m, "--relaunch-of") || strv_push(again, m, account) ? -1 : 0;
}

/* What the recovered job's log and JSON say of the failure (--relaunch-of's account, into
 * account; see the top of this part): the job ran since `since` (now becomes the next job's
 * start), and ended as `why` says. */
static void relaunch_account_of(const engine_recovery *plan, const char *why, int relaunch, int lost, double failed_at_s,
                                int fail_at, struct timespec *since, char *account, size_t len)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double ran = (double)(now.tv_sec - since->tv_sec) + 1e-9 * (double)(now.tv_nsec - since->tv_nsec);
    /* (the note is one line: a newline in what the ranks said would end the account early) */
    char said[704];
    snprintf(said, sizeof said, "%.700s", why);
    for (char *c = said; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    /* when the failure happened (a rank's note), else when we saw the job end: the recovered
     * job counts the time lost from there; the iteration only where an injected fault says it
     * (a real crash does not) */
    /* (the note cut to what --relaunch-of takes: cli.h's relaunch_account.note) */
    char note[sizeof(((relaunch_account *)0)->note)];
    snprintf(note, sizeof note, "job %s ran %.1f s, then %s; relaunch %d%s", plan->job, ran, said, relaunch,
             lost && plan->lost_noted ? plan->lost_noted : "");
    snprintf(account, len, "%.3f %.6f %d %s", ran, failed_at_s > 0 ? failed_at_s : epoch_s(), fail_at > 0 ? fail_at : 0,
             note);
    *since = now;
}

int launch_ranks(int argc, char **argv, const run_config *run_cfg)
{
    /* (a launcher first: without one nothing runs, and nothing may be written; then what the
     * job will write, checked before it starts) */
    char mpiexec[PATH_MAX], oerr[1024];
    if (find_on_path("mpiexec", mpiexec, sizeof mpiexec) != 0) {
        fprintf(stderr, "aebench: --ranks %d needs mpiexec on the PATH (make deps installs MPICH; or "
                        "start the ranks with mpirun yourself)\n", run_cfg->ranks);
        return EXIT_BAD_INPUT;
    }
    /* (the job's private directory goes under TMPDIR: one the environment names wrongly is bad
     * input, said before anything is written) */
    if (job_tmp_refused(oerr, sizeof oerr) != 0 || run_outputs_refused(run_cfg, 0, oerr, sizeof oerr) != 0) {
        fprintf(stderr, "aebench: %s\n", oerr);
        return EXIT_BAD_INPUT;
    }
    char why[800];
    int interrupted = 0, init_refused = 0;
    double failed_at_s = 0; /* when a rank of the job said it failed (CLOCK_REALTIME s) */
    /* An engine that can go on from what the job kept (its recovery hook says so) gets its job
     * relaunched; any other job is launched once. */
    const engine_vtbl *eng = engine_find(run_cfg->method);
    engine_recovery plan = {0};
    if (!eng || !eng->recovery || eng->recovery(&run_cfg->eng, run_cfg->ranks, &plan) != 0)
        return launch_job(argc, argv, run_cfg, why, sizeof why, &interrupted, &failed_at_s, &init_refused);
    char **args = NULL, **again = NULL;
    int n = 0, m = 0, code = EXIT_RUN_ERROR, bad = strv_push_all(&args, &n, argv, argc);
    const int nfirst = (int)(sizeof plan.first_args / sizeof plan.first_args[0]);
    for (int i = 0; !bad && i < nfirst && plan.first_args[i]; i++) bad = strv_push(&args, &n, plan.first_args[i]);
    if (bad) {
        fprintf(stderr, "aebench: --ranks: out of memory\n");
        strv_free(&args, &n);
        plan.close(plan.state, 0);
        return EXIT_RUN_ERROR;
    }
    /* the ranks whose machines the injected fault replaced (--fail-kind hardware) */
    const unsigned long long lost =
        run_cfg->fail_kind == FAIL_HARDWARE && run_cfg->fail_at > 0 ? (run_cfg->fail_ranks ? run_cfg->fail_ranks : 1ull) : 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    code = launch_job(n, args, run_cfg, why, sizeof why, &interrupted, &failed_at_s, &init_refused);
    /* (a job we were told to stop is not relaunched: what it kept goes, as at a normal end; nor
     * one whose engine finds nothing to recover from — a configuration the ranks refused, a
     * store that was not ours, a failure before the first checkpoint) */
    for (int relaunch = 1; code != 0 && !interrupted && code != EXIT_BAD_INPUT && code != EXIT_RUN_OOM &&
                           relaunch <= plan.relaunches; relaunch++) {
        char said[1024] = "";
        if (init_refused || plan.in_use(plan.state, said, sizeof said)) {
            /* (what refused the job would refuse its relaunch: the reason is said above) */
            fprintf(stderr, "aebench: --ranks %d: job %s not relaunched: %s\n", run_cfg->ranks, plan.job,
                    init_refused ? "its ranks refused to start (see above)" : said);
            break;
        }
        if (lost) plan.machines_lost(plan.state, lost);
        /* (with --hosts the other machines' parts of the job are not visible here) */
        if (!plan.recoverable(plan.state, !run_cfg->hosts_path[0], lost, said, sizeof said)) {
            fprintf(stderr, "aebench: --ranks %d: job %s not relaunched: %s\n", run_cfg->ranks, plan.job, said);
            break;
        }
        fprintf(stderr, "aebench: --ranks %d: relaunching job %s (%d of at most %d) to recover from %s%s\n", run_cfg->ranks,
                plan.job, relaunch, plan.relaunches, said, lost && plan.lost_said ? plan.lost_said : "");
        char account[sizeof(((relaunch_account *)0)->note) + 96]; /* (the numbers, then the note) */
        relaunch_account_of(&plan, why, relaunch, lost != 0, failed_at_s, run_cfg->fail_at, &t0, account, sizeof account);
        if (relaunch_args(args, n, &plan, account, &again, &m) != 0) {
            fprintf(stderr, "aebench: --ranks: out of memory\n");
            break;
        }
        const int lost_code = code;
        code = launch_job(m, again, run_cfg, why, sizeof why, &interrupted, &failed_at_s, &init_refused);
        /* (a relaunch its ranks refuse, e.g. a copy the headers called complete but whose data
         * no longer matches its checksums, ends the job for the reason it was relaunched) */
        if (init_refused) code = lost_code;
    }
    strv_free(&again, &m);
    strv_free(&args, &n);
    plan.close(plan.state, 1);
    return code;
}
