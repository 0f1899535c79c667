/*
 * test_launch_status.c — the --ranks supervisor's mapping from a launcher's ending to
 * aebench's exit code and reason (cmd/launch_status.h), for every status MPICH's Hydra and
 * Open MPI's mpirun produce: ranks that exit, refuse, run out of memory, are killed by one
 * signal or by several (Hydra ORs them), a launcher killed itself, a signal we passed on.
 * Exit 2 only ever comes from a refusal a rank noted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../cmd/launch_status.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* wait(2) statuses: an exit code, a signal (with a core dump) */
static int exited(int code) { return (code & 0xff) << 8; }
static int killed(int sig) { return sig & 0x7f; }
static int dumped(int sig) { return (sig & 0x7f) | 0x80; }

/* What Hydra's mpiexec (ui/mpich/mpiexec.c) exits with for its ranks' raw statuses: their OR;
 * when it says a signal, the ORed status itself (exit takes its low byte), else its exit code. */
static int hydra_status(const int *rank_status, int n)
{
    int ored = 0;
    for (int i = 0; i < n; i++) ored |= rank_status[i];
    return exited(WIFSIGNALED(ored) ? ored & 0xff : WEXITSTATUS(ored));
}

/* What Open MPI's mpirun exits with (ORTE's and PRRTE's odls: a rank killed by a signal is
 * 128 + it; mpirun reports the first rank that failed). */
static int ompi_status(int first_failed_status)
{
    if (WIFSIGNALED(first_failed_status)) return exited(128 + WTERMSIG(first_failed_status));
    return exited(WEXITSTATUS(first_failed_status));
}

static launch_outcome mpich(int s0, int s1)
{
    const int s[2] = {s0, s1};
    return (launch_outcome){.launcher = LAUNCHER_MPICH, .reaped = 1, .status = hydra_status(s, 2), .ranks = 2};
}

static void expect(const launch_outcome *o, int code, const char *phrase)
{
    const launch_ending e = launch_ending_of(o);
    if (e.code != code || (phrase && !strstr(e.reason, phrase)))
        fail_msg("exit %d, reason \"%s\"; want exit %d with \"%s\"", e.code, e.reason, code, phrase ? phrase : "");
}

static void test_mpich_ok_and_refused(void **state)
{
    (void)state;
    launch_outcome o = mpich(exited(0), exited(0));
    o.rank0 = RANK0_OK;
    expect(&o, 0, NULL);
    o.rank0 = RANK0_NONE;
    o.calibrate = 1;
    expect(&o, 0, NULL);
    /* 0 without rank 0's result: mpiexec was stopped from outside */
    o.calibrate = 0;
    o.rank0 = RANK0_RUNNING;
    expect(&o, 4, "without rank 0's result");
    /* every rank refused its configuration and noted it: 2, rank 0 said why */
    o = mpich(exited(2), exited(2));
    o.refusal_noted = 1;
    const launch_ending e = launch_ending_of(&o);
    assert_int_equal(e.code, 2);
    assert_int_equal(e.said, 1);
}

/* The probe's finding: SIGINT on a rank in its first moments reads as exit 2 */
static void test_mpich_early_sigint_is_not_bad_input(void **state)
{
    (void)state;
    launch_outcome o = mpich(exited(0), killed(SIGINT));
    assert_int_equal(WEXITSTATUS(o.status), 2);
    expect(&o, 4, "a rank killed by SIGINT");
    /* ... and with the proxy's SIGKILL of the other rank: 2 | 9 = 11 */
    o = mpich(killed(SIGKILL), killed(SIGINT));
    assert_int_equal(WEXITSTATUS(o.status), 11);
    expect(&o, 4, "mpiexec exit 11: MPICH ORs its ranks' statuses: a rank killed by a signal, e.g. SIGINT|SIGKILL");
    expect(&o, 4, "or SIGSEGV");
    /* the kernel's statuses (pidfds) name the rank: the one not killed by the clean-up */
    o.known = 3;
    o.rank_status[0] = killed(SIGKILL);
    o.rank_status[1] = killed(SIGINT);
    expect(&o, 4, "rank 1 was killed by SIGINT (mpiexec exit 11");
    /* a refusal note does not make a killed rank's 2 a refusal */
    o = mpich(exited(2), killed(SIGINT));
    o.refusal_noted = 1;
    o.known = 2;
    o.rank_status[1] = killed(SIGINT);
    expect(&o, 4, "rank 1 was killed by SIGINT");
}

static void test_mpich_rank_codes(void **state)
{
    (void)state;
    /* out of memory: rank 0 says so and aborts with 3 */
    launch_outcome o = mpich(exited(3), exited(0));
    o.rank0 = RANK0_OOM;
    expect(&o, 3, "out of memory");
    /* ... even when the launcher's SIGKILL of the other rank is all the kernel says */
    o = mpich(exited(3), killed(SIGKILL));
    o.rank0 = RANK0_OOM;
    o.known = 2;
    o.rank_status[1] = killed(SIGKILL);
    expect(&o, 3, NULL);
    /* a run error rank 0 wrote: 1; a watchdog's end: 4 */
    o = mpich(exited(1), exited(1));
    o.rank0 = RANK0_FAILED;
    expect(&o, 1, "rank 0 ended the job");
    o = mpich(exited(4), exited(4));
    o.rank0 = RANK0_FAILED;
    expect(&o, 4, "rank 0 ended the job");
    /* a rank's own code without rank 0's word */
    o = mpich(exited(0), exited(1));
    o.rank0 = RANK0_RUNNING;
    expect(&o, 1, "exit 1");
    /* codes ORed (1 | 4 = 5): not one of ours, a rank was lost */
    o = mpich(exited(1), exited(4));
    expect(&o, 4, "mpiexec exit 5");
}

static void test_mpich_signals(void **state)
{
    (void)state;
    const int sigs[] = {SIGKILL, SIGTERM, SIGSEGV, SIGABRT, SIGBUS};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        launch_outcome o = mpich(exited(0), killed(sigs[i]));
        o.rank0 = RANK0_RUNNING;
        char want[64];
        snprintf(want, sizeof want, "SIG%s", sigabbrev_np(sigs[i]));
        expect(&o, 4, want);
    }
    /* a crash with a core dump: SIGSEGV | 0x80 = 139 */
    launch_outcome o = mpich(exited(0), dumped(SIGSEGV));
    assert_int_equal(WEXITSTATUS(o.status), 139);
    expect(&o, 4, "SIGSEGV, a core dumped");
    /* SIGABRT with a core and SIGKILL: 0x86 | 9 = 0x8f */
    o = mpich(dumped(SIGABRT), killed(SIGKILL));
    expect(&o, 4, "SIGABRT|SIGKILL");
    /* mpiexec itself killed */
    o = mpich(exited(0), exited(0));
    o.status = killed(SIGKILL);
    expect(&o, 4, "the job (mpiexec) was killed by SIGKILL");
    o.reaped = 0;
    expect(&o, 4, "could not be waited for");
    /* Hydra dead of SIGPIPE (a rank lost while it started the job): the rank, where known */
    o = mpich(exited(0), exited(0));
    o.status = killed(SIGPIPE);
    expect(&o, 4, "the job (mpiexec) was killed by SIGPIPE");
    o.known = 2;
    o.rank_status[1] = killed(SIGINT);
    expect(&o, 4, "rank 1 was killed by SIGINT; then the job (mpiexec) was killed by SIGPIPE");
    /* Hydra's own failure: -1 from its main, exit 255, not a status of its ranks */
    o = mpich(exited(0), exited(0));
    o.status = exited(255);
    expect(&o, 4, "mpiexec exit 255: it failed itself");
}

static void test_forwarded_and_timeout(void **state)
{
    (void)state;
    const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < 2; i++) {
        /* whatever the launcher made of it: 0, the signal, the ORed kills */
        const int statuses[] = {exited(0), exited(2), exited(15), exited(11), killed(SIGTERM)};
        for (size_t j = 0; j < sizeof statuses / sizeof statuses[0]; j++) {
            launch_outcome o = {.launcher = (launcher_kind)(j & 1), .reaped = 1, .status = statuses[j], .ranks = 2,
                                .forwarded_signal = sigs[i], .refusal_noted = 1, .rank0 = RANK0_FAILED};
            expect(&o, 128 + sigs[i], "interrupted (SIG");
        }
    }
    launch_outcome o = mpich(killed(SIGTERM), killed(SIGTERM));
    o.start_timeout = 1;
    expect(&o, 1, "start-up");
}

static void test_open_mpi(void **state)
{
    (void)state;
    launch_outcome o = {.launcher = LAUNCHER_OPEN_MPI, .reaped = 1, .ranks = 2};
    o.status = ompi_status(killed(SIGINT));
    assert_int_equal(WEXITSTATUS(o.status), 130);
    expect(&o, 4, "a rank killed by SIGINT (Open MPI reports 128 + its signal)");
    o.status = ompi_status(killed(SIGKILL));
    expect(&o, 4, "SIGKILL");
    o.status = ompi_status(exited(2));
    expect(&o, 4, "no rank noted a refusal");
    o.refusal_noted = 1;
    expect(&o, 2, NULL);
    o.refusal_noted = 0;
    o.status = ompi_status(exited(3));
    o.rank0 = RANK0_OOM;
    expect(&o, 3, NULL);
    o.rank0 = RANK0_RUNNING;
    o.status = ompi_status(exited(1));
    expect(&o, 1, "exit 1");
    o.status = ompi_status(exited(4));
    expect(&o, 4, "exit 4");
    o.status = ompi_status(exited(0));
    o.rank0 = RANK0_OK;
    expect(&o, 0, NULL);
}

/* Every pair of rank endings under either launcher, with and without the kernel's word and
 * rank 0's: exit 2 only with a noted refusal and no rank killed by a signal of its own; a
 * reason always, but for 0. */
static void test_exit_2_only_when_refused(void **state)
{
    (void)state;
    const int endings[] = {exited(0), exited(1), exited(2), exited(3), exited(4), killed(SIGINT), killed(SIGKILL),
                           killed(SIGTERM), killed(SIGHUP), dumped(SIGABRT), dumped(SIGSEGV)};
    const int n = sizeof endings / sizeof endings[0];
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            for (int variant = 0; variant < 32; variant++) {
                const int s[2] = {endings[a], endings[b]};
                launch_outcome o = {.launcher = (launcher_kind)(variant & 1), .reaped = 1, .ranks = 2,
                                    .refusal_noted = (variant >> 1) & 1, .rank0 = (rank0_record)((variant >> 2) % 5)};
                o.status = o.launcher == LAUNCHER_MPICH ? hydra_status(s, 2)
                                                       : ompi_status(s[0] != exited(0) ? s[0] : s[1]);
                if (variant & 16) {
                    o.known = 3;
                    o.rank_status[0] = s[0];
                    o.rank_status[1] = s[1];
                }
                const launch_ending e = launch_ending_of(&o);
                const int own_kill = (variant & 16) && ((WIFSIGNALED(s[0]) && WTERMSIG(s[0]) != SIGKILL) ||
                                                        (WIFSIGNALED(s[1]) && WTERMSIG(s[1]) != SIGKILL));
                if (e.code == 2 && (!o.refusal_noted || own_kill || WEXITSTATUS(o.status) != 2))
                    fail_msg("exit 2 for ranks 0x%x 0x%x (launcher %d, variant %d): %s", s[0], s[1], o.launcher,
                             variant, e.reason);
                if (e.code != 0 && !e.reason[0]) fail_msg("exit %d without a reason (variant %d)", e.code, variant);
                if (e.code != 0 && e.code != 1 && e.code != 2 && e.code != 3 && e.code != 4)
                    fail_msg("exit %d is none of aebench's (variant %d)", e.code, variant);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpich_ok_and_refused),
        cmocka_unit_test(test_mpich_early_sigint_is_not_bad_input),
        cmocka_unit_test(test_mpich_rank_codes),
        cmocka_unit_test(test_mpich_signals),
        cmocka_unit_test(test_forwarded_and_timeout),
        cmocka_unit_test(test_open_mpi),
        cmocka_unit_test(test_exit_2_only_when_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
