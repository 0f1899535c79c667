#include "comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

/* A positive integer from the environment variable name, else 0. */
static int env_count(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    return *end == '\0' && n > 0 && n <= INT_MAX ? (int)n : 0;
}

int comm_launched_world(int *rank)
{
    /* (size, rank) as each launcher names them: Hydra (MPICH, Intel MPI) and Slurm's PMI,
     * Open MPI, MVAPICH. */
    static const char *const vars[][2] = {
        {"PMI_SIZE", "PMI_RANK"},
        {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
        {"MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"},
    };
    *rank = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const int world = env_count(vars[i][0]);
        if (world > 1) {
            const char *r = getenv(vars[i][1]);
            *rank = r ? atoi(r) : 0;
            return world;
        }
    }
    return 1;
}

int comm_launcher_waits_on_stopped(void)
{
    int rank = 0;
    return comm_launched_world(&rank) > 1 && env_count("PMI_SIZE") == 0;
}

#ifdef AEBENCH_HAVE_MPI
#include <mpi.h>

int comm_has_mpi(void) { return 1; }

int comm_mpi_failed(int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "aebench: %s failed: %s\n", what, msg);
    return -1;
}

static int mpi_ok(int rc, const char *what) { return comm_mpi_failed(rc, what); }

int comm_init(comm_world *c, int *argc, char ***argv)
{
    c->rank = 0;
    c->world = 1;
    c->local_rank = 0;
    c->local_world = 1;
    c->machine = 0;
    c->machines = 1;
    c->rank_machine = NULL;
    c->initialised = 0;
    /* A rank of several dies with the launcher's process that started it (MPICH's proxy,
     * Open MPI's daemon), however that one dies: no rank outlives its job.  (Not a process
     * of one: its parent is a shell, which may go while it runs on under nohup.) */
    int launched_rank0 = 0;
    const pid_t launcher = getppid();
    if (comm_launched_world(&launched_rank0) > 1 &&
        (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher)) {
        fprintf(stderr, "aebench: the process that started this rank is gone\n");
        return -1;
    }
    int provided = 0;
    /* Collectives run on stream worker threads (the CPU backend's emulation of a GPU's
     * communication stream) while the main thread may be in MPI too: several threads at once. */
    if (mpi_ok(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"))
        return -1;
    c->initialised = 1;
    if (provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "aebench: this MPI library gives thread level %d, not MPI_THREAD_MULTIPLE "
                        "(collectives run on stream threads)\n", provided);
        return -1;
    }
    /* MPI's default handler aborts the job inside a failing call, before aebench's check of
     * its result can name the call and end the run by its own error path: errors are returned
     * instead, and every call is checked (the communicators made from the world inherit the handler; windows set
     * theirs, collectives.c). */
    if (mpi_ok(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler (world)") ||
        mpi_ok(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler (self)"))
        return -1;
    if (mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "MPI_Comm_rank") ||
        mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &c->world), "MPI_Comm_size"))
        return -1;
    /* A launcher of another MPI (Open MPI's mpirun starting an MPICH build, say) makes every
     * process a world of its own: each would train alone, and nobody would notice. */
    int launched_rank = 0;
    const int launched = comm_launched_world(&launched_rank);
    if (launched > 1 && c->world == 1) {
        if (launched_rank == 0)
            fprintf(stderr, "aebench: started as one of %d ranks, but MPI says this is a world of 1: the "
                            "launcher is not of the MPI aebench was built with (use its mpiexec)\n", launched);
        return COMM_NOT_A_RANK;
    }
    /* The ranks that share this machine (its memory): the local rank picks the GPU, and
     * they share the host budget. */
    MPI_Comm node;
    int lowest = c->rank; /* the machine's lowest rank: its name until they are numbered */
    if (mpi_ok(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
               "MPI_Comm_split_type") ||
        mpi_ok(MPI_Comm_rank(node, &c->local_rank), "MPI_Comm_rank (node)") ||
        mpi_ok(MPI_Comm_size(node, &c->local_world), "MPI_Comm_size (node)") ||
        mpi_ok(MPI_Allreduce(&c->rank, &lowest, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce (node)") ||
        mpi_ok(MPI_Comm_free(&node), "MPI_Comm_free"))
        return -1;
    /* Every rank's machine: numbered in the order of their lowest ranks (rank r's lowest is
     * r itself only on the machine it is the lowest of, and never above r). */
    int *lowests = malloc(sizeof(int) * (size_t)c->world);
    c->rank_machine = malloc(sizeof(int) * (size_t)c->world);
    if (!lowests || !c->rank_machine) {
        free(lowests);
        fprintf(stderr, "aebench: out of memory for the ranks' machines\n");
        return -1;
    }
    if (mpi_ok(MPI_Allgather(&lowest, 1, MPI_INT, lowests, 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather (machines)")) {
        free(lowests);
        return -1;
    }
    c->machines = 0;
    for (int r = 0; r < c->world; r++)
        c->rank_machine[r] = lowests[r] == r ? c->machines++ : c->rank_machine[lowests[r]];
    c->machine = c->rank_machine[c->rank];
    free(lowests);
    return 0;
}

void comm_finalize(comm_world *c)
{
    if (c->initialised) (void)mpi_ok(MPI_Finalize(), "MPI_Finalize");
    c->initialised = 0;
    free(c->rank_machine);
    c->rank_machine = NULL;
}

void comm_abort(const comm_world *c, int code)
{
    if (c->initialised && c->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int comm_barrier(const comm_world *c)
{
    if (!c->initialised || c->world == 1) return 0;
    return mpi_ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

int comm_all_gather(const comm_world *c, const void *in, void *out, size_t bytes)
{
    if (!c->initialised || c->world == 1) {
        memmove(out, in, bytes);
        return 0;
    }
    if (bytes > (size_t)INT_MAX) return -1;
    return mpi_ok(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                  "MPI_Allgather");
}

int comm_max_int(const comm_world *c, int mine, int *out)
{
    *out = mine;
    if (!c->initialised || c->world == 1) return 0;
    return mpi_ok(MPI_Allreduce(&mine, out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
}

int comm_max_doubles(const comm_world *c, double *v, int n)
{
    if (!c->initialised || c->world == 1) return 0;
    return mpi_ok(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
}

#else

int comm_has_mpi(void) { return 0; }

int comm_init(comm_world *c, int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    c->rank = 0;
    c->world = 1;
    c->local_rank = 0;
    c->local_world = 1;
    c->machine = 0;
    c->machines = 1;
    c->rank_machine = NULL;
    c->initialised = 0;
    int launched_rank = 0;
    const int launched = comm_launched_world(&launched_rank);
    if (launched > 1) {
        /* one line for the job, not one per process */
        if (launched_rank == 0)
            fprintf(stderr, "aebench: started as one of %d ranks, but this aebench was built without MPI "
                            "(make deps installs MPICH; then make)\n", launched);
        return COMM_NOT_A_RANK;
    }
    return 0;
}

void comm_finalize(comm_world *c)
{
    c->initialised = 0;
}

void comm_abort(const comm_world *c, int code)
{
    (void)c;
    exit(code);
}

int comm_barrier(const comm_world *c)
{
    (void)c;
    return 0;
}

int comm_all_gather(const comm_world *c, const void *in, void *out, size_t bytes)
{
    (void)c;
    memmove(out, in, bytes);
    return 0;
}

int comm_max_int(const comm_world *c, int mine, int *out)
{
    (void)c;
    *out = mine;
    return 0;
}

int comm_max_doubles(const comm_world *c, double *v, int n)
{
    (void)c;
    (void)v;
    (void)n;
    return 0;
}

int comm_mpi_failed(int rc, const char *what)
{
    (void)what;
    return rc == 0 ? 0 : -1;
}

#endif
