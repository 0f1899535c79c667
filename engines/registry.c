/* The list of engines that `-m` accepts, in the order `-m all` runs them. */
#include "engine.h"

#include <string.h>

static const engine_vtbl *const engines[] = {
    &engine_megatron_lm,
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
