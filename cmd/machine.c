/*
 * machine.c — --predict (machine.h): every engine asked to walk its own schedule over a
 * machine file's rates, and --find-max --predict's largest layer count whose plan fits.  The
 * file's reading is machine_file.c's and the measuring calibrate*.c's; what is left here
 * needs neither a device nor the file's JSON, only the rates machine_load gave.
 */
#include "machine.h"

#include "bisect.h"
#include "../engines/step_bound.h"

#include "exit_codes.h"
#include "../engines/runtime/membudget.h"
#include "../engines/runtime/predict.h"
#include "../engines/runtime/timer.h"
#include "../kernels/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- predicting ------------------------------------------------------------------------------ */

static const char *const BUSY_NAMES[BUSY_KINDS] = {"compute", "h2d", "d2h", "host adam", "disk", "collectives"};

/* An engine's plan against the budgets at n layers (bisect_largest's test). */
typedef struct plan_test {
    const engine_vtbl *eng;
    engine_config cfg; /* with the budgets */
} plan_test;
static int plan_fits_at(int layers, void *ctx)
{
    plan_test *t = ctx;
    t->cfg.shape.layers = layers;
    engine_plan plan = {0};
    t->eng->plan(&t->cfg, &plan);
    return plan.gpu_bytes <= t->cfg.gpu_budget && plan.host_bytes <= t->cfg.host_budget;
}

/* --find-max --predict: the largest layer count whose plan fits the budgets (the plans are
 * monotone in the layers), and the prediction there. */
static int largest_fitting(const engine_vtbl *eng, const engine_config *base, size_t gpu_budget, size_t host_budget)
{
    plan_test t = {eng, *base};
    t.cfg.gpu_budget = gpu_budget;
    t.cfg.host_budget = host_budget;
    return bisect_largest(1, 1 << 20, plan_fits_at, &t);
}

/* pred_walk_fn of an engine's predict function (ctx: its vtbl) */
static void walk_engine(const engine_config *cfg, const machine_rates *m, const void *ctx, engine_prediction *out)
{
    ((const engine_vtbl *)ctx)->predict(cfg, m, out);
}

void machine_budgets(const run_config *run_cfg, const machine_rates *m, int local, int shared_device, size_t *gpu,
                     size_t *host)
{
    const size_t n = local > 1 ? (size_t)local : 1;
    *gpu = run_cfg->gpu_mem_limit ? run_cfg->gpu_mem_limit : (size_t)m->gpu_bytes / (shared_device ? n : 1);
    *host = (run_cfg->cpu_mem_limit ? run_cfg->cpu_mem_limit : (size_t)m->host_bytes) / n;
}

int machine_region_near(double region, double shard) { return region <= 2 * shard && shard <= 2 * region; }

int machine_region_note(const machine_rates *m, const engine_config *cfg, char *note, size_t len)
{
    const double region = m->host_adam_region_mparams,
                 shard = (double)gpt_param_count(&cfg->shape) / engine_world(cfg) / 1e6;
    if (!m->gpu_backend || region <= 0 || machine_region_near(region, shard)) return 0;
    snprintf(note, len,
             "the machine file's host Adam rate was swept over %.*f M parameters a rank, this model's shard is %.*f M: "
             "the rate depends on the region (aebench --calibrate -l %d sweeps this model's, as far as 60%% of the host's "
             "memory holds)",
             region < 10 ? 2 : 0, region, shard < 10 ? 2 : 0, shard, cfg->shape.layers);
    return 1;
}

int machine_predict(const run_config *run_cfg, const machine_rates *m, size_t gpu_budget, size_t host_budget)
{
    char note[400];
    if (machine_region_note(m, &run_cfg->eng, note, sizeof note)) printf("predict: note: %s\n", note);
    const engine_vtbl *only = strcmp(run_cfg->method, "all") == 0 ? NULL : engine_find(run_cfg->method);
    const double t0 = wall_ms();
    int any = 0;
    for (int i = 0; i < engine_count(); i++) {
        const engine_vtbl *eng = engine_at(i);
        if (only ? eng != only : eng->not_in_all) continue;
        /* (the budgets the engines' plans see, as a run's do: -w auto sizes its window under
         * the GPU's, --clip-speculate auto its second copies under the host's) */
        engine_config cfg = run_cfg->eng;
        cfg.gpu_budget = gpu_budget;
        cfg.host_budget = host_budget;
        if (run_cfg->find_max) {
            cfg.shape.layers = largest_fitting(eng, &run_cfg->eng, gpu_budget, host_budget);
            if (cfg.shape.layers == 0) {
                printf("predict %-14s not even one layer fits\n", eng->name);
                continue;
            }
            printf("find-max %-13s l%d (%.3f B parameters) fits, l%d does not\n", eng->name, cfg.shape.layers,
                   (double)gpt_param_count(&cfg.shape) / 1e9, cfg.shape.layers + 1);
        }
        engine_prediction p;
        memset(&p, 0, sizeof p);
        if (eng->predict) pred_settle(&cfg, m, walk_engine, eng, &p);
        engine_plan plan = {0};
        eng->plan(&cfg, &plan);
        char g[32], h[32];
        format_bytes((double)plan.gpu_bytes, g, sizeof g);
        format_bytes((double)plan.host_bytes, h, sizeof h);
        const int fits = plan.gpu_bytes <= gpu_budget && plan.host_bytes <= host_budget;
        if (!p.modelled) {
            printf("predict %-14s not modelled yet%s%s | plan GPU %s, host %s: %s\n", eng->name, p.why[0] ? ": " : "",
                   p.why, g, h, fits ? "fits" : "does not fit");
            continue;
        }
        if (!isfinite(p.ms) || !(p.ms > 0)) {
            /* (the fields' bounds keep this from happening; a prediction is never printed as inf) */
            fprintf(stderr, "aebench: machine file: %s's prediction from its values is %g ms/it, not a time\n",
                    eng->name, p.ms);
            return EXIT_BAD_INPUT;
        }
        any = 1;
        /* (the global batch: each data-parallel rank's micro-batches; --tp/--pp ranks share theirs) */
        const int B = run_cfg->eng.shape.batch * engine_micro_batches(&run_cfg->eng) * engine_dp_world(&run_cfg->eng);
        printf("predict %-14s %8.1f ms/it | %7.2f samples/s | bound: %s |", eng->name, p.ms, B * 1000.0 / p.ms,
               BUSY_NAMES[p.bound]);
        for (int k = 0; k < BUSY_KINDS; k++)
            if (p.busy_ms[k] > 0) printf(" %s %.1f", BUSY_NAMES[k], p.busy_ms[k]);
        /* the step's bounds from those busy times (engines/step_bound.h), as a run prints them */
        engine_bound b;
        step_bound_of(eng, &cfg, p.busy_ms, &b);
        printf(" | roofline %.1f", b.roofline_ms);
        if (b.own_schedule) printf(" | %s %.1f", b.name, b.ms);
        printf(" | plan GPU %s, host %s: %s\n", g, h, fits ? "fits" : "does not fit");
    }
    printf("predicted in %.1f ms\n", wall_ms() - t0);
    return any || only ? 0 : EXIT_RUN_ERROR;
}
