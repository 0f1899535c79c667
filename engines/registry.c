/* The list of engines that `-m` accepts, in the order `-m all` runs them. */
#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void engine_note(const engine_env *env, const char *fmt, ...)
{
    if (!env->note) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    env->note(env->note_ctx, line);
}

static const engine_vtbl *const engines[] = {
    &engine_megatron_lm,
    &engine_stronghold,
};

int engine_count(void)
{
    return (int)(sizeof engines / sizeof engines[0]);
}

const engine_vtbl *engine_at(int i)
{
    return (i >= 0 && i < engine_count()) ? engines[i] : NULL;
}

const engine_vtbl *engine_find(const char *name)
{
    for (int i = 0; i < engine_count(); i++) {
        if (strcmp(engines[i]->name, name) == 0) return engines[i];
        if (engines[i]->alias && strcmp(engines[i]->alias, name) == 0) return engines[i];
    }
    return NULL;
}
