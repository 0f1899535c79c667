/* hostfile.c — mpiexec's hostfile, read for the supervisor's plan (see hostfile.h). */
#include "hostfile.h"
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, const char *path, int line, const char *what)
{
    if (line > 0) snprintf(err, errlen, "--hosts %.300s, line %d: %s", path, line, what);
    else snprintf(err, errlen, "--hosts %.300s: %s", path, what);
    return -1;
}

/* A host name as mpiexec takes it: letters, digits, '.', '-', '_' (no spaces, no ':'). */
static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= HOSTFILE_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* A slot count: 1 .. 65536, all digits. */
static int slots_of(const char *s, int *out)
{
    if (!*s) return -1;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > 65536) return -1;
    }
    if (v < 1) return -1;
    *out = (int)v;
    return 0;
}

/* One line (without its newline, comments cut): its host and slots; 0 blank, 1 a host, -1 bad. */
static int parse_line(char *line, char name[HOSTFILE_NAME_MAX], int *slots, const char **why)
{
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *save = NULL, *tok = strtok_r(line, " \t\r", &save);
    if (!tok) return 0;
    *slots = 1;
    char *colon = strchr(tok, ':');
    if (colon) {
        *colon = '\0';
        if (slots_of(colon + 1, slots)) {
            *why = "the slots after ':' are not a count from 1 to 65536";
            return -1;
        }
    }
    if (strlen(tok) > HOSTFILE_NAME_LONGEST) {
        *why = "the host name is longer than 253 characters, the most a DNS name has";
        return -1;
    }
    if (!name_ok(tok, strlen(tok))) {
        *why = "not a host name (letters, digits, '.', '-', '_')";
        return -1;
    }
    snprintf(name, HOSTFILE_NAME_MAX, "%s", tok);
    for (char *kv; (kv = strtok_r(NULL, " \t\r", &save)) != NULL;) {
        if (strncmp(kv, "slots=", 6) == 0) {
            if (colon) {
                *why = "slots given twice (host:S and slots=S)";
                return -1;
            }
            if (slots_of(kv + 6, slots)) {
                *why = "slots= is not a count from 1 to 65536";
                return -1;
            }
        } else if (!strchr(kv, '=')) {
            *why = "more than one host on the line (one machine per line)";
            return -1;
        }
        /* (max_slots=, and Open MPI's other keys: not the supervisor's business) */
    }
    return 1;
}

int host_list_read(const char *path, host_list *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    struct stat st;
    if (lstat(path, &st) != 0) return fail(err, errlen, path, 0, strerror(errno));
    if (S_ISLNK(st.st_mode)) return fail(err, errlen, path, 0, "is a symbolic link (give the file itself)");
    if (!S_ISREG(st.st_mode) || st.st_size > HOSTFILE_MAX_BYTES)
        return fail(err, errlen, path, 0, "not a regular file of at most 1 MiB");
    char *text = report_read_text(path);
    if (!text) return fail(err, errlen, path, 0, errno == EINVAL ? "not a regular file of at most 1 MiB" : strerror(errno));
    int line_no = 0, status = 0;
    for (char *line = text, *next; line && !status; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        char name[HOSTFILE_NAME_MAX];
        int slots = 0;
        const char *why = NULL;
        const int k = parse_line(line, name, &slots, &why);
        if (k < 0) {
            status = fail(err, errlen, path, line_no, why);
            break;
        }
        if (k == 0) continue;
        int i = 0;
        while (i < h->n && strcmp(h->name[i], name) != 0) i++;
        if (i == h->n) {
            if (h->n == HOSTFILE_MAX_HOSTS) {
                status = fail(err, errlen, path, line_no, "more than 1024 machines");
                break;
            }
            snprintf(h->name[h->n], HOSTFILE_NAME_MAX, "%s", name);
            h->n++;
        }
        if (h->slots[i] > 65536 * 16 - slots) {
            status = fail(err, errlen, path, line_no, "too many slots on one machine");
            break;
        }
        h->slots[i] += slots;
    }
    free(text);
    if (!status && h->n == 0) status = fail(err, errlen, path, 0, "lists no machine");
    return status;
}

int host_list_ranks_per_machine(const host_list *h, int ranks, int *machines_used)
{
    int *count = calloc((size_t)(h->n > 0 ? h->n : 1), sizeof *count);
    if (!count || h->n == 0) {
        free(count);
        if (machines_used) *machines_used = 1;
        return ranks;
    }
    /* slot by slot, machine by machine, round again while ranks are left */
    for (int r = 0, m = 0, used = 0; r < ranks; r++) {
        count[m]++;
        if (++used == h->slots[m]) used = 0, m = (m + 1) % h->n;
    }
    int most = 0, n = 0;
    for (int i = 0; i < h->n; i++) {
        if (count[i] > most) most = count[i];
        n += count[i] > 0;
    }
    free(count);
    if (machines_used) *machines_used = n;
    return most;
}

int host_is_this_machine(const char *name)
{
    if (strcmp(name, "localhost") == 0 || strncmp(name, "127.", 4) == 0 || strcmp(name, "localhost.localdomain") == 0)
        return 1;
    char me[HOSTFILE_NAME_MAX];
    if (gethostname(me, sizeof me) != 0) return 0;
    me[sizeof me - 1] = '\0';
    if (strcmp(name, me) == 0) return 1;
    /* the short names: "node1" for "node1.cluster" on either side */
    const size_t a = strcspn(name, "."), b = strcspn(me, ".");
    return a == b && strncmp(name, me, a) == 0 && (name[a] == '\0' || me[b] == '\0');
}
