#include "launch_status.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* aebench's own exit codes (run.h; kept here so that this file needs nothing else) */
enum { CODE_OK = 0, CODE_ERROR = 1, CODE_BAD_INPUT = 2, CODE_OOM = 3, CODE_RANK_LOST = 4 };

static void signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sig > 0 && sig < 65 ? sigabbrev_np(sig) : NULL;
    if (abbrev) snprintf(buf, len, "SIG%s", abbrev);
    else snprintf(buf, len, "signal %d", sig);
}

/* The signals a rank of a job is killed by, the likeliest first: from outside (INT, TERM,
 * HUP, QUIT), the launcher's clean-up of the others (KILL), a crash (ABRT, SEGV, BUS, FPE,
 * ILL). */
static const int likely_signals[] = {SIGINT, SIGKILL, SIGTERM, SIGABRT, SIGSEGV, SIGHUP, SIGQUIT, SIGBUS, SIGFPE, SIGILL};
enum { N_LIKELY = sizeof likely_signals / sizeof likely_signals[0] };

void launch_decode_exit(launcher_kind launcher, int exit_code, char *out, size_t len)
{
    out[0] = '\0';
    if (len == 0 || exit_code == 0) return;
    char a[24];
    if (launcher == LAUNCHER_OPEN_MPI) {
        if (exit_code > 128 && exit_code < 128 + 65) {
            signal_name(exit_code - 128, a, sizeof a);
            snprintf(out, len, "a rank killed by %s (Open MPI reports 128 + its signal)", a);
        } else {
            snprintf(out, len, "a rank exited %d (Open MPI reports the first failed rank's exit code)", exit_code);
        }
        return;
    }
    /* MPICH: the ORed raw statuses' low byte, when any rank was killed: the signal numbers
     * ORed, and 0x80 when a core was dumped.  (Without a signal, the ORed exit codes.)  Its
     * proxies end the other ranks with SIGKILL once one is gone, so an ORed status is mostly one
     * rank's signal | SIGKILL: those are the readings offered besides the plain one. */
    const int sigbits = exit_code & 0x7f, dumped = exit_code & 0x80;
    const char *core = dumped ? ", a core dumped" : "";
    int n = 0;
    char alts[160] = "";
    for (int i = 0; i < N_LIKELY && n < 2; i++) {
        const int s = likely_signals[i];
        if (s == SIGKILL || s == sigbits || (s | SIGKILL) != sigbits || sigbits == SIGKILL) continue;
        signal_name(s, a, sizeof a);
        const size_t used = strlen(alts);
        snprintf(alts + used, sizeof alts - used, "%s%s|SIGKILL", n ? " or " : "", a);
        n++;
    }
    signal_name(sigbits, a, sizeof a);
    /* the plain reading: a signal that dumps a core, for a status with a core; otherwise one of
     * the likely signals, first when it is one sent from outside (INT, KILL, TERM, HUP) */
    const int crash = sigbits == SIGSEGV || sigbits == SIGABRT || sigbits == SIGBUS || sigbits == SIGFPE ||
                      sigbits == SIGILL || sigbits == SIGQUIT;
    int likely = 0;
    for (int i = 0; i < N_LIKELY; i++) likely |= likely_signals[i] == sigbits;
    const int plain = dumped ? crash : likely;
    const int outside = !dumped && (sigbits == SIGINT || sigbits == SIGKILL || sigbits == SIGTERM || sigbits == SIGHUP);
    if (plain && (outside || dumped || n == 0))
        snprintf(out, len, "a rank killed by %s%s (MPICH reports a killed rank's signal as its exit code%s%s)", a, core,
                 n ? "; or signals ORed, e.g. " : "", alts);
    else if (n > 0)
        snprintf(out, len, "MPICH ORs its ranks' statuses: a rank killed by a signal%s, e.g. %s%s%s", core, alts,
                 plain ? " or " : "", plain ? a : "");
    else
        snprintf(out, len, "a rank killed by %s%s (MPICH reports a killed rank's signal as its exit code)", a, core);
}

/* The rank to name as killed by a signal: of the ranks the kernel says were killed, one seen
 * to exit first, and one killed by other than SIGKILL (the launcher's clean-up of the rest)
 * before one that was; the lowest of those.  -1: none. */
static int killed_rank(const launch_outcome *o)
{
    int best = -1, best_score = -1;
    const int ranks = o->ranks < LAUNCH_RANKS_MAX ? o->ranks : LAUNCH_RANKS_MAX;
    for (int r = 0; r < ranks; r++) {
        if (!((o->known >> r) & 1) || !WIFSIGNALED(o->rank_status[r])) continue;
        const int score = 2 * (WTERMSIG(o->rank_status[r]) != SIGKILL) + (int)((o->first >> r) & 1);
        if (score > best_score) best = r, best_score = score;
    }
    return best;
}

/* An ending: its code, whether the ranks said why, and the reason. */
static launch_ending ending(int code, int said, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static launch_ending ending(int code, int said, const char *fmt, ...)
{
    launch_ending e = {.code = code, .said = said};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.reason, sizeof e.reason, fmt, ap);
    va_end(ap);
    return e;
}

launch_ending launch_ending_of(const launch_outcome *o)
{
    char sig[24], decoded[300];
    if (o->forwarded_signal > 0) {
        /* we were told to stop: whatever the launcher made of it, it ends as we were ended */
        signal_name(o->forwarded_signal, sig, sizeof sig);
        return ending(128 + o->forwarded_signal, 0, "interrupted (%s): the job was stopped", sig);
    }
    if (o->start_timeout)
        return ending(CODE_ERROR, 0, "no rank got past MPI's start-up in time: the job was ended");
    if (!o->reaped) return ending(CODE_RANK_LOST, 0, "the job's launcher (mpiexec) could not be waited for");
    const int killed = killed_rank(o);
    char named[200] = "";
    if (killed >= 0) {
        signal_name(WTERMSIG(o->rank_status[killed]), sig, sizeof sig);
        snprintf(named, sizeof named, "rank %d was killed by %s", killed, sig);
    }
    if (WIFSIGNALED(o->status)) {
        /* (Hydra may die of SIGPIPE when a rank is lost while it starts the job) */
        signal_name(WTERMSIG(o->status), sig, sizeof sig);
        return ending(CODE_RANK_LOST, 0, "%s%sthe job (mpiexec) was killed by %s", named, killed >= 0 ? "; then " : "",
                      sig);
    }
    const int x = WIFEXITED(o->status) ? WEXITSTATUS(o->status) : 255;
    const char *launcher = o->launcher == LAUNCHER_OPEN_MPI ? "Open MPI's mpiexec" : "mpiexec";
    if (x == 0) {
        if (o->rank0 == RANK0_OK || (o->calibrate && o->rank0 == RANK0_NONE)) return ending(CODE_OK, 0, "%s", "");
        if (killed >= 0) return ending(CODE_RANK_LOST, 0, "%s (%s exit 0)", named, launcher);
        return ending(CODE_RANK_LOST, 0, "%s ended the job's ranks and exited 0 without rank 0's result: it was "
                      "stopped from outside", launcher);
    }
    /* exit 2 is a refusal only when a rank noted one, and no rank was killed by a signal of its
     * own (a launcher's SIGKILL of the others is not): SIGINT also reads 2 with MPICH */
    const int killed_by_own = killed >= 0 && WTERMSIG(o->rank_status[killed]) != SIGKILL;
    if (x == CODE_BAD_INPUT && o->refusal_noted && !killed_by_own)
        return ending(CODE_BAD_INPUT, 1, "the ranks refused the configuration (said above)");
    if (o->rank0 == RANK0_OOM) return ending(CODE_OOM, 1, "rank 0 ran out of memory (its log says what did not fit)");
    launch_decode_exit(o->launcher, x, decoded, sizeof decoded);
    if (o->rank0 == RANK0_FAILED && !killed_by_own) {
        /* rank 0 said why, and the launcher's code is one of ours; another code (a signal's)
         * says more than rank 0 could */
        if (x == CODE_ERROR || x == CODE_OOM || x == CODE_RANK_LOST)
            return ending(x, 1, "rank 0 ended the job (its JSON says why; %s exit %d)", launcher, x);
        return ending(CODE_RANK_LOST, 0, "rank 0 ended the job (its JSON says why); %s exit %d: %s", launcher, x,
                      decoded);
    }
    if (killed >= 0) return ending(CODE_RANK_LOST, 0, "%s (%s exit %d: %s)", named, launcher, x, decoded);
    if (o->launcher == LAUNCHER_OPEN_MPI) {
        if (x > 128 && x < 128 + 65) return ending(CODE_RANK_LOST, 0, "%s exit %d: %s", launcher, x, decoded);
        if (x == CODE_ERROR || x == CODE_OOM || x == CODE_RANK_LOST)
            return ending(x, 0, "a rank ended the job with exit %d (%s exit %d)", x, launcher, x);
        return ending(CODE_RANK_LOST, 0, "%s exit %d: %s%s", launcher, x, decoded,
                      x == CODE_BAD_INPUT ? ", though no rank noted a refusal" : "");
    }
    /* MPICH: 1, 3 and 4 are taken for a rank's own exit code (a signal 1, 3 or 4 — SIGHUP,
     * SIGQUIT, SIGILL — would read the same; the rank's note or rank 0's JSON says which) */
    if (x == CODE_ERROR || x == CODE_OOM || x == CODE_RANK_LOST)
        return ending(x, 0, "a rank ended the job with exit %d (%s exit %d; or a rank killed by signal %d)", x,
                      launcher, x, x);
    if (x == CODE_BAD_INPUT)
        return ending(CODE_RANK_LOST, 0, "%s exit 2 and no rank refused its configuration: %s", launcher, decoded);
    if (x == 255)
        /* Hydra's own failure (its main returns -1), not its ranks' statuses: seen when a rank
         * is lost before MPI's start-up */
        return ending(CODE_RANK_LOST, 0, "%s exit 255: it failed itself (its message is above), a rank may have "
                      "been lost before MPI's start-up", launcher);
    return ending(CODE_RANK_LOST, 0, "%s exit %d: %s%s", launcher, x, decoded,
                  x & 0x80 ? "" : " (or the ranks' exit codes ORed)");
}
