#include "private_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void private_dir_init(private_dir *d)
{
    memset(d, 0, sizeof *d);
    d->fd = -1;
    d->lock_fd = -1;
}

/* "uid 1001 (alice)" into out. */
static void owner_name(unsigned uid, char *out, size_t len)
{
    char buf[1024];
    struct passwd pw, *found = NULL;
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
        snprintf(out, len, "uid %u (%s)", uid, found->pw_name);
    else
        snprintf(out, len, "uid %u", uid);
}

int private_dir_open(private_dir *d, const char *path, int create, char *why, size_t whylen)
{
    private_dir_init(d);
    if (strlen(path) >= sizeof d->path) {
        snprintf(why, whylen, "%.200s...: the path is longer than %d bytes", path, PRIVATE_DIR_PATH - 1);
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(d->path, sizeof d->path, "%s", path);
    const int made = create && mkdir(path, 0700) == 0;
    if (create && !made && errno != EEXIST) {
        const int e = errno;
        snprintf(why, whylen, "%s: cannot make the directory: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        /* (O_NOFOLLOW|O_DIRECTORY on a link: ELOOP or ENOTDIR; on a file: ENOTDIR) */
        struct stat lst;
        const int is_link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
        if (e == ELOOP || e == ENOTDIR)
            snprintf(why, whylen, "%s: %s, not a directory of ours: not used, not removed", path,
                     is_link ? "a symbolic link" : "not a directory");
        else
            snprintf(why, whylen, "%s: %s", path, strerror(e));
        errno = e == ELOOP || e == ENOTDIR ? EPERM : e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        snprintf(why, whylen, "%s: %s", path, strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700) {
        char owner[160];
        owner_name((unsigned)st.st_uid, owner, sizeof owner);
        snprintf(why, whylen, "%s: not a private directory of this user (owner %s, mode %04o; it must be ours with "
                 "mode 0700): not used, not removed", path, owner, (unsigned)(st.st_mode & 07777));
        close(fd);
        errno = EPERM;
        return -1;
    }
    d->fd = fd;
    d->made = made;
    return 0;
}

int private_dir_openat(const private_dir *d, const char *name, int flags, char *why, size_t whylen)
{
    const int fd = openat(d->fd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int e = errno;
        snprintf(why, whylen, "%s/%s: %s", d->path, name,
                 e == ELOOP ? "a symbolic link planted in our directory; not followed" : strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        snprintf(why, whylen, "%s/%s: not a regular file of one link; not used", d->path, name);
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* The pid written in a lock file (0 when none). */
static long lock_pid(int fd)
{
    char text[32] = "";
    const ssize_t n = pread(fd, text, sizeof text - 1, 0);
    long pid = 0;
    if (n > 0) {
        text[n] = '\0';
        if (sscanf(text, "%ld", &pid) != 1 || pid < 0) pid = 0;
    }
    return pid;
}

int private_dir_lock(private_dir *d, const char *name, long *holder, char *why, size_t whylen)
{
    *holder = 0;
    if (d->lock_fd >= 0) {
        snprintf(why, whylen, "%s: already holds the lock %s", d->path, d->lock_name);
        return -1;
    }
    /* (made here, or there already: a lock file is removed only by whoever made it) */
    int fd = private_dir_openat(d, name, O_RDWR | O_CREAT | O_EXCL, why, whylen);
    const int made = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = private_dir_openat(d, name, O_RDWR, why, whylen);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        if (e == EWOULDBLOCK) {
            *holder = lock_pid(fd);
            snprintf(why, whylen, "%s is in use by another job (pid %ld holds %s)", d->path, *holder, name);
            close(fd);
            return 1;
        }
        snprintf(why, whylen, "%s/%s: cannot lock: %s", d->path, name, strerror(e));
        close(fd);
        return -1;
    }
    char text[32];
    const int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        const int e = errno;
        snprintf(why, whylen, "%s/%s: cannot write: %s", d->path, name, strerror(e));
        close(fd);
        return -1;
    }
    d->lock_fd = fd;
    d->lock_made = made;
    snprintf(d->lock_name, sizeof d->lock_name, "%s", name);
    return 0;
}

int private_dir_lock_held(const char *path, const char *name, long *holder)
{
    *holder = 0;
    private_dir d;
    char why[64];
    if (private_dir_open(&d, path, 0, why, sizeof why) != 0) return -1;
    const int fd = openat(d.fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int held = 0;
    if (fd >= 0) {
        /* (a shared lock tried: it fails only against the holder's exclusive one) */
        if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
            held = 1;
            *holder = lock_pid(fd);
        }
        close(fd); /* (our shared lock, if taken, goes with it) */
    }
    private_dir_close(&d, 0);
    return held;
}

int private_dir_unlink(const private_dir *d, const char *name)
{
    return d->fd >= 0 ? unlinkat(d->fd, name, 0) : -1;
}

void private_dir_close(private_dir *d, int remove)
{
    if (d->lock_fd >= 0) {
        /* (removed while still held: a job that starts now finds no lock file, makes its own) */
        if (remove) (void)unlinkat(d->fd, d->lock_name, 0);
        close(d->lock_fd);
        d->lock_fd = -1;
    }
    if (d->fd >= 0) {
        close(d->fd);
        d->fd = -1;
        if (remove) (void)rmdir(d->path); /* (fails, as it should, while other ranks' files are there) */
    }
}

void private_dir_close_made(private_dir *d)
{
    if (d->lock_fd >= 0 && d->lock_made) (void)unlinkat(d->fd, d->lock_name, 0);
    const int made = d->made;
    private_dir_close(d, 0);
    if (made) (void)rmdir(d->path); /* (fails, as it should, while files are left in it) */
}
