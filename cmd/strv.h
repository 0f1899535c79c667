/*
 * strv.h — a growable NULL-terminated array of strings (a child's argv, a list of options).
 */
#ifndef AEBENCH_STRV_H
#define AEBENCH_STRV_H

#include <stdlib.h>
#include <string.h>

/* Append a copy of s; returns -1 (vector unchanged) when out of memory. */
static inline int strv_push(char ***v, int *n, const char *s)
{
    char *copy = strdup(s);
    if (!copy) return -1;
    char **grown = realloc(*v, sizeof **v * (size_t)(*n + 2));
    if (!grown) {
        free(copy);
        return -1;
    }
    *v = grown;
    grown[*n] = copy;
    grown[++*n] = NULL;
    return 0;
}

static inline int strv_push_all(char ***v, int *n, char *const *src, int count)
{
    for (int i = 0; i < count; i++)
        if (strv_push(v, n, src[i])) return -1;
    return 0;
}

static inline void strv_free(char ***v, int *n)
{
    for (int i = 0; *v && i < *n; i++) free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

#endif
