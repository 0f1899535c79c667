/*
 * hostfile.h — the machines `--ranks N --hosts FILE` starts its ranks on, read from mpiexec's
 * own hostfile, so that the supervisor (sweeps, --find-max, --search --verify, an engine's
 * relaunch) plans per machine as the ranks will.
 *
 * A line is one machine: "host" (1 slot), MPICH's "host:S" or Open MPI's "host slots=S"
 * (other Open MPI keys, e.g. max_slots=M, are passed over); blank lines and '#' comments are
 * skipped.  Lines that name the same host are one machine (their slots add up).  Ranks fill
 * the machines in file order, S at a time, and wrap around when N exceeds the slots: what
 * Hydra and Open MPI's default mapping do.  The ranks themselves learn their machines from MPI
 * (MPI_Comm_split_type); this is the supervisor's view before they start.
 */
#ifndef AEBENCH_HOSTFILE_H
#define AEBENCH_HOSTFILE_H

#include <stddef.h>

/* (a name's longest: a DNS name's 253 characters, RFC 1035 and 2181; NAME_MAX holds it and its NUL) */
enum { HOSTFILE_MAX_HOSTS = 1024, HOSTFILE_NAME_LONGEST = 253, HOSTFILE_NAME_MAX = 256, HOSTFILE_MAX_BYTES = 1 << 20 };

typedef struct host_list {
    int n;                                         /* machines */
    char name[HOSTFILE_MAX_HOSTS][HOSTFILE_NAME_MAX];
    int slots[HOSTFILE_MAX_HOSTS];
} host_list;

/* Read and check FILE (a regular file, not followed through a link); 0, or -1 with err set
 * naming the file, the line and what is wrong. */
int host_list_read(const char *path, host_list *h, char *err, size_t errlen);

/* The most ranks of N that one machine gets (the ranks each machine's memory is split by),
 * and into how many machines they go. */
int host_list_ranks_per_machine(const host_list *h, int ranks, int *machines_used);

/* Whether the named host is this machine (its hostname, short or full, or a loopback name). */
int host_is_this_machine(const char *name);

#endif
