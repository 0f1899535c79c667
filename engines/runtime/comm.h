/*
 * comm.h — ranks and collectives.  Built with MPI (make finds mpicc) every run knows its
 * rank and world size from mpirun; without MPI it is rank 0 of 1.  Engines get rank and
 * world from day one, so multi-rank engines (gemini) need no new plumbing.
 */
#ifndef AEBENCH_COMM_H
#define AEBENCH_COMM_H

#include <stddef.h>

typedef struct comm_world {
    int rank;
    int world;
    int local_rank;  /* among the ranks of this machine: the GPU it uses */
    int local_world; /* ranks on this machine (they share its host memory and disk) */
    /* The machines: numbered 0, 1, ... in the order of their lowest rank; each rank's
     * (world entries; NULL on one rank) and this rank's.  What MPI_COMM_TYPE_SHARED says a
     * machine is (MPICH's MPIR_CVAR_NUM_CLIQUES splits one host into several, as tests do). */
    int machine, machines;
    int *rank_machine;
    int initialised; /* MPI_Init was called by us: finalise it */
} comm_world;

/* 0 on success; on failure prints why and returns -1.  A build without MPI that a launcher
 * started as one of several ranks returns COMM_NOT_A_RANK (see comm_launched_world). */
int comm_init(comm_world *c, int *argc, char ***argv);
enum { COMM_NOT_A_RANK = -2 };
/* Whether this build runs ranks (MPI). */
int comm_has_mpi(void);
/* The world a launcher (mpiexec of MPICH or Intel MPI, Open MPI's mpirun, MVAPICH) says it
 * started this process into, from its environment, and this process's rank there (*rank,
 * 0 when not said); 1 when none did.  A build without MPI refuses a world above 1: its
 * processes would each train alone, with nobody noticing. */
int comm_launched_world(int *rank);
/* Whether the launcher that started this rank ends a job by signals it waits on (Open MPI's
 * mpirun: SIGTERM, then it waits; a stopped rank never takes it), so a rank ending the job
 * must SIGKILL a stopped peer itself: 1; 0 under a PMI launcher (MPICH's and Intel MPI's
 * Hydra, Slurm), which SIGKILLs the job itself, and whose exit code is that of the first
 * rank it sees end: a peer we kill first would make the job's code its signal. */
int comm_launcher_waits_on_stopped(void);
void comm_finalize(comm_world *c);
/* Ends every rank with this exit code (MPI_Abort under MPI, exit otherwise). */
void comm_abort(const comm_world *c, int code);
/* An MPI call's result: 0 when it succeeded, else -1 after printing "aebench: WHAT failed:
 * <MPI's message>" (MPI builds; the collectives share it). */
int comm_mpi_failed(int mpi_rc, const char *what);

/* Barrier over all ranks (no-op on one). 0 on success. */
int comm_barrier(const comm_world *c);
/* out (world x bytes) = every rank's in, in rank order (a copy on one rank); blocking,
 * from the main thread.  0 on success. */
int comm_all_gather(const comm_world *c, const void *in, void *out, size_t bytes);
/* *out = the largest of every rank's mine (mine on one rank); blocking, from the main thread.
 * 0 on success. */
int comm_max_int(const comm_world *c, int mine, int *out);
/* v[i] = the largest of every rank's v[i], i < n (unchanged on one rank); blocking, from the
 * main thread.  0 on success. */
int comm_max_doubles(const comm_world *c, double *v, int n);

#endif
