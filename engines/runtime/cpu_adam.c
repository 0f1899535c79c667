/*
 * cpu_adam.c — placeholder implementation: jobs run synchronously in the submitting thread
 * with the scalar formula.  The threaded, vectorised pool replaces it (issue 4, runtime).
 */
#include "cpu_adam.h"

#include "../../kernels/adamw_element.h"
#include "timer.h"

#include <math.h>
#include <stdlib.h>

struct cpu_adam {
    int nthreads;
    uint64_t next_ticket;
    double busy_ms;
};

int cpu_adam_create(cpu_adam **out, int nthreads)
{
    *out = NULL;
    cpu_adam *p = calloc(1, sizeof *p);
    if (!p) return GPT_ERR_OOM;
    p->nthreads = nthreads > 0 ? nthreads : 1;
    *out = p;
    return GPT_OK;
}

void cpu_adam_destroy(cpu_adam *pool) { free(pool); }

static void adam_range(const cpu_adam_job *j, size_t lo, size_t hi, float wd, float bc1,
                       float bc2)
{
    for (size_t i = lo; i < hi; i++)
        gpt_adamw_element(&j->params[i], j->grads[i], &j->m[i], &j->v[i], j->lr,
                          (float)j->optim.beta1, (float)j->optim.beta2, (float)j->optim.eps, wd,
                          bc1, bc2, j->grad_scale);
}

int cpu_adam_run(cpu_adam *pool, const cpu_adam_job *job)
{
    if (job->after) {
        int rc = gpt_event_sync(job->after);
        if (rc) return rc;
    }
    double t0 = wall_ms();
    const float bc1 = 1.0f - powf((float)job->optim.beta1, (float)job->t);
    const float bc2 = 1.0f - powf((float)job->optim.beta2, (float)job->t);
    adam_range(job, 0, job->n_decay, (float)job->optim.weight_decay, bc1, bc2);
    adam_range(job, job->n_decay, job->n, 0.0f, bc1, bc2);
    pool->busy_ms += wall_ms() - t0;
    return GPT_OK;
}

int cpu_adam_submit(cpu_adam *pool, const cpu_adam_job *job, uint64_t *ticket)
{
    *ticket = ++pool->next_ticket;
    return cpu_adam_run(pool, job);
}

int cpu_adam_wait(cpu_adam *pool, uint64_t ticket)
{
    (void)pool;
    (void)ticket;
    return GPT_OK;
}

double cpu_adam_take_busy_ms(cpu_adam *pool)
{
    double ms = pool->busy_ms;
    pool->busy_ms = 0;
    return ms;
}

const char *cpu_adam_isa(const cpu_adam *pool)
{
    (void)pool;
    return "scalar";
}
