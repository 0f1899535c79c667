/*
 * private_dir.h — the one way aebench keeps files under a name others could know, in a
 * directory others may write (/dev/shm, /tmp, a shared --ckpt-dir or --nvme-dir).
 *
 * A store or checkpoint directory has a name every rank and every relaunch can compute
 * (DIR/aebench-gemini-UID-JOB), so another user can make it first, or plant a link there.
 * So: the directory is made with mode 0700, or, when it exists, opened with O_NOFOLLOW and
 * accepted only when fstat says it is a directory of this user with mode 0700 — checked on the
 * descriptor we then use, so nothing can be swapped between the check and the use.  Every file
 * in it is opened with openat(O_NOFOLLOW) from that descriptor and must be a regular file with
 * one link.  A directory that fails the check is refused with one line naming it, its owner and
 * its mode, and is never used nor deleted.
 *
 * Locks: private_dir_lock takes an flock on a lock file in the directory (named by the caller,
 * e.g. one per rank), holding this process's pid; a second job on the same files is refused at
 * once with the holder's pid, and a lock nobody holds is a stale one (its holder died).
 */
#ifndef AEBENCH_PRIVATE_DIR_H
#define AEBENCH_PRIVATE_DIR_H

#include <stddef.h>

enum { PRIVATE_DIR_PATH = 1024 };

typedef struct private_dir {
    int fd;       /* the directory (-1: none) */
    int lock_fd;  /* the lock file this process holds (-1: none) */
    int made;     /* this open made the directory */
    int lock_made; /* ... and this process the lock file */
    char lock_name[64];
    char path[PRIVATE_DIR_PATH];
} private_dir;

/* Opens the directory at path — with create, made first (mode 0700) when it is missing —
 * and checks it (see above).  0; -1 with why (whylen bytes) saying what is wrong (errno set:
 * EPERM for a directory that is not ours and private). */
int private_dir_open(private_dir *d, const char *path, int create, char *why, size_t whylen);

/* Takes the lock `name` (a file in d, created when missing) for this process, and writes its
 * pid there.  0; 1 when another process holds it (*holder its pid, 0 if unknown; why says
 * so); -1 on an error (why). */
int private_dir_lock(private_dir *d, const char *name, long *holder, char *why, size_t whylen);

/* Whether lock `name` in directory path is held, without taking it: 1 held (*holder its pid),
 * 0 free or missing, -1 when path is not a private directory of ours. */
int private_dir_lock_held(const char *path, const char *name, long *holder);

/* Opens file `name` in d: openat with flags | O_NOFOLLOW | O_CLOEXEC (mode 0600 when created);
 * refused unless it is a regular file with one link.  Its descriptor, or -1 with why (errno
 * set). */
int private_dir_openat(const private_dir *d, const char *name, int flags, char *why, size_t whylen);

/* Removes file `name` in d (a link: the link).  0 or -1. */
int private_dir_unlink(const private_dir *d, const char *name);

/* Releases the lock (its file removed with remove) and closes d; with remove, the directory is
 * removed too when it is empty (other ranks' files keep it).  Safe on a closed d. */
void private_dir_close(private_dir *d, int remove);

/* After a failure: releases the lock and closes d as private_dir_close does, removing only
 * what this process made: the lock file, and the directory once it is empty. */
void private_dir_close_made(private_dir *d);

/* A private_dir that holds nothing (fd -1), for structures set up before the open. */
void private_dir_init(private_dir *d);

#endif
