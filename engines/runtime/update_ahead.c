#include "update_ahead.h"

#include <stdlib.h>
#include <string.h>

int update_ahead_blocks(const engine_config *cfg, int eligible, int by_default, int blocks, uint64_t host_plan,
                        size_t block_floats)
{
    if (cfg->optim.clip <= 0 || !eligible || cfg->clip_speculate == 0 || blocks <= 0) return 0;
    if (cfg->clip_speculate > 0) return cfg->clip_speculate < blocks ? cfg->clip_speculate : blocks;
    if (!by_default) return 0;
    if (!cfg->host_budget) return blocks;
    const uint64_t spare = cfg->host_budget / 20, per = update_ahead_bytes(1, block_floats);
    if (host_plan + spare >= cfg->host_budget || per == 0) return 0;
    const uint64_t k = (cfg->host_budget - spare - host_plan) / per;
    return k < (uint64_t)blocks ? (int)k : blocks;
}

uint64_t update_ahead_bytes(int count, size_t block_floats)
{
    return (uint64_t)count * 3 * block_floats * sizeof(float);
}

int update_ahead_open(update_ahead *a, engine_allocs *mem, int first, int count, size_t block_floats)
{
    memset(a, 0, sizeof *a);
    a->next = 1;
    if (count <= 0) return GPT_OK;
    a->first = first;
    a->count = count;
    a->block = block_floats;
    const size_t bytes = (size_t)count * block_floats * sizeof(float);
    int rc;
    if ((rc = engine_alloc(mem, MEM_PINNED, (void **)&a->p, bytes, "--clip-speculate second copy of params")) ||
        (rc = engine_alloc(mem, MEM_HOST, (void **)&a->m, bytes, "--clip-speculate second copy of Adam m")) ||
        (rc = engine_alloc(mem, MEM_HOST, (void **)&a->v, bytes, "--clip-speculate second copy of Adam v")))
        return rc;
    a->swapped = calloc((size_t)count, 1);
    return a->swapped ? GPT_OK : GPT_ERR_OOM;
}

void update_ahead_close(update_ahead *a)
{
    free(a->swapped);
    a->swapped = NULL;
}

ahead_state update_ahead_state(const update_ahead *a, int b, float *home_p, float *home_m, float *home_v,
                               int other)
{
    if (a->count && b >= a->first && b < a->first + a->count && (a->swapped[b - a->first] ^ other)) {
        const size_t at = (size_t)(b - a->first) * a->block;
        return (ahead_state){a->p + at, a->m + at, a->v + at};
    }
    return (ahead_state){home_p, home_m, home_v};
}

void update_ahead_job(const update_ahead *a, int b, float *home_p, float *home_m, float *home_v, int ahead,
                      cpu_adam_job *job)
{
    const ahead_state in = update_ahead_state(a, b, home_p, home_m, home_v, 0);
    job->params = in.p, job->m = in.m, job->v = in.v;
    job->params_out = job->m_out = job->v_out = NULL;
    if (ahead) {
        const ahead_state to = update_ahead_state(a, b, home_p, home_m, home_v, 1);
        job->params_out = to.p, job->m_out = to.m, job->v_out = to.v;
    }
}

void update_ahead_begin_step(update_ahead *a) { a->now = a->count > 0 && a->next; }

void update_ahead_swap(update_ahead *a, int b) { a->swapped[b - a->first] ^= 1; }

void update_ahead_end_step(update_ahead *a, int skipped, float clip_scale)
{
    if (!a->count) return;
    if (a->now) {
        a->steps++;
        if (skipped || clip_scale != 1.0f) a->redone++;
    }
    a->next = !skipped && clip_scale == 1.0f;
}

void update_ahead_note_plan(const update_ahead *a, const engine_env *env, const char *engine, int of_blocks)
{
    if (!a->count) return;
    engine_note(env, "%s --clip-speculate: the top %d of %d host-updated blocks are updated as their grads arrive, "
                "ahead of the clipping norm, into a second copy of their state (%.2f GiB of host memory), and again "
                "from the first when the norm clips; after a step that clips, the next waits for the norm",
                engine, a->count, of_blocks, (double)update_ahead_bytes(a->count, a->block) / (1u << 30));
}

void update_ahead_note_result(const update_ahead *a, const engine_env *env, const char *engine)
{
    if (!a->count) return;
    engine_note(env, "%s --clip-speculate: %d steps updated %d blocks ahead of the norm, %d of them redone (the norm "
                "clipped or was not finite)", engine, a->steps, a->count, a->redone);
}
