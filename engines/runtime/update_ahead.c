#include "update_ahead.h"
#include "timer.h"

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

/* Allocate the second copies from the host budget (params pinned: the copies to the GPU read
 * whichever is current), every block's current state at home. */
static int take_copies(update_ahead *a)
{
    const size_t bytes = (size_t)a->count * a->block * sizeof(float);
    const double t0 = wall_ms();
    int rc = pinned_alloc(a->host, a->be, (void **)&a->p, bytes, "--clip-speculate second copy of params");
    if (!rc && (rc = host_alloc(a->host, (void **)&a->m, bytes, "--clip-speculate second copy of Adam m"))) {
        pinned_free(a->host, a->be, a->p, bytes);
        a->p = NULL;
    }
    if (!rc && (rc = host_alloc(a->host, (void **)&a->v, bytes, "--clip-speculate second copy of Adam v"))) {
        host_free(a->host, a->m, bytes);
        pinned_free(a->host, a->be, a->p, bytes);
        a->p = a->m = NULL;
    }
    a->take_ms += wall_ms() - t0;
    if (rc) return rc;
    memset(a->swapped, 0, (size_t)a->count);
    a->taken++;
    return GPT_OK;
}

static void free_copies(update_ahead *a)
{
    if (!a->p) return;
    const size_t bytes = (size_t)a->count * a->block * sizeof(float);
    host_free(a->host, a->v, bytes);
    host_free(a->host, a->m, bytes);
    pinned_free(a->host, a->be, a->p, bytes);
    a->p = a->m = a->v = NULL;
}

int update_ahead_open(update_ahead *a, engine_allocs *mem, const engine_config *cfg, int first, int count,
                      size_t block_floats)
{
    memset(a, 0, sizeof *a);
    a->next = 1;
    if (count <= 0) return GPT_OK;
    a->first = first;
    a->count = count;
    a->block = block_floats;
    a->host = mem->host;
    a->be = mem->be;
    a->swapped = calloc((size_t)count, 1);
    if (!a->swapped) return GPT_ERR_OOM;
    /* auto: nothing until a step does not clip */
    a->adaptive = cfg->clip_speculate < 0;
    if (a->adaptive) a->next = 0;
    return a->adaptive ? GPT_OK : take_copies(a);
}

void update_ahead_give_back(update_ahead *a, float *home_p, float *home_m, float *home_v)
{
    if (!a->p) return;
    const size_t bytes = a->block * sizeof(float);
    for (int i = 0; i < a->count; i++) {
        if (!a->swapped[i]) continue;
        const size_t home = (size_t)(a->first + i) * a->block, at = (size_t)i * a->block;
        memcpy(home_p + home, a->p + at, bytes);
        memcpy(home_m + home, a->m + at, bytes);
        memcpy(home_v + home, a->v + at, bytes);
        a->swapped[i] = 0;
    }
    free_copies(a);
    a->given_back++;
}

void update_ahead_close(update_ahead *a)
{
    free_copies(a);
    free(a->swapped);
    a->swapped = NULL;
}

ahead_state update_ahead_state(const update_ahead *a, int b, float *home_p, float *home_m, float *home_v,
                               int other)
{
    if (a->count && a->p && b >= a->first && b < a->first + a->count && (a->swapped[b - a->first] ^ other)) {
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

int update_ahead_begin_step(update_ahead *a)
{
    if (a->count > 0 && a->next && !a->p) {
        const int rc = take_copies(a);
        if (rc) return rc;
    }
    a->now = a->count > 0 && a->next && a->p;
    return GPT_OK;
}

void update_ahead_swap(update_ahead *a, int b) { a->swapped[b - a->first] ^= 1; }

int update_ahead_end_step(update_ahead *a, step_result *out, float clip_scale)
{
    const int clipped = out->skipped || clip_scale != 1.0f;
    out->ahead_blocks = a->now ? a->count : 0;
    out->ahead_redone = a->now && clipped;
    if (!a->count) return 0;
    a->steps_seen++;
    a->clipped += clipped;
    if (a->now) {
        a->steps++;
        a->redone += clipped;
    }
    a->clipped_run = clipped ? a->clipped_run + 1 : 0;
    a->next = !clipped;
    return a->adaptive && a->p && a->clipped_run >= UPDATE_AHEAD_GIVE_BACK_AFTER;
}

void update_ahead_note_plan(const update_ahead *a, const engine_env *env, const char *engine, int of_blocks)
{
    if (!a->count) return;
    if (a->adaptive)
        engine_note(env, "%s --clip-speculate auto: the top %d of %d host-updated blocks may be updated as their grads "
                    "arrive, ahead of the clipping norm, into a second copy of their state (%.2f GiB of host memory, "
                    "in the plan): allocated at the step after one that does not clip, given back after %d clipped "
                    "steps in a row; redone from the first copy when the norm clips",
                    engine, a->count, of_blocks, (double)update_ahead_bytes(a->count, a->block) / (1u << 30),
                    UPDATE_AHEAD_GIVE_BACK_AFTER);
    else
        engine_note(env, "%s --clip-speculate: the top %d of %d host-updated blocks are updated as their grads arrive, "
                    "ahead of the clipping norm, into a second copy of their state (%.2f GiB of host memory), and again "
                    "from the first when the norm clips; after a step that clips, the next waits for the norm",
                    engine, a->count, of_blocks, (double)update_ahead_bytes(a->count, a->block) / (1u << 30));
}

void update_ahead_note_result(const update_ahead *a, const engine_env *env, const char *engine)
{
    if (!a->count) return;
    engine_note(env, "%s --clip-speculate: %d of %d steps clipped (or were skipped); %d steps updated %d blocks ahead "
                "of the norm, %d of them redone; second copies allocated %d times (%.0f ms), given back %d times",
                engine, a->clipped, a->steps_seen, a->steps, a->count, a->redone, a->taken, a->take_ms, a->given_back);
}
