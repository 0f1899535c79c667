/*
 * engine_twin.c — "test-twin", an engine built into the test binaries alone (issue 48).
 *
 * It proves that a new engine touches two places: this file and one line of the registry's
 * AEBENCH_TEST_ENGINES_LIST.  It runs megatron-lm's plan, init, step and free unchanged, so
 * its losses and parameters equal the baseline's bit for bit, and every cross-engine test
 * (those that loop over the registry) checks it like any other engine.  What it has of its
 * own, each through engine_vtbl alone:
 *   an option     --twin-report-every N: its report lists every Nth iteration's loss
 *   a report      a "test-twin:" section at the end of the log and a "twin" object in the JSON
 *   a bound       megatron-lm's prediction, and its bound: the roofline, by its own hook
 */
#include "../engines/engine.h"
#include "../engines/step_bound.h"

#include <cjson/cJSON.h>

/* Where --twin-report-every is kept: engine_config.own_values' last entry, so that an engine
 * of the shipped program that takes its own from the first ones up does not meet it (the
 * option tables' check at start-up says so if one ever does). */
enum { TWIN_REPORT_EVERY = 7 };

static long long twin_report_every(const engine_config *cfg) { return cfg->own_values[TWIN_REPORT_EVERY]; }

/* (megatron-lm's own functions are static in its file: the twin reaches them through its
 * engine_vtbl, which is what an engine built on another does, as gemini does) */
static void twin_plan(const engine_config *cfg, engine_plan *out) { engine_megatron_lm.plan(cfg, out); }

static int twin_check(const engine_config *cfg, char *err, size_t errlen)
{
    return engine_megatron_lm.check ? engine_megatron_lm.check(cfg, err, errlen) : 0;
}

static int twin_init(const engine_env *env, void **state) { return engine_megatron_lm.init(env, state); }

static int twin_read_params(void *state, float *host_params)
{
    return engine_megatron_lm.read_params(state, host_params);
}

static int twin_step(void *state, int iteration, const int32_t *tokens, const int32_t *targets, step_result *out)
{
    return engine_megatron_lm.step(state, iteration, tokens, targets, out);
}

static void twin_free(void *state) { engine_megatron_lm.free(state); }

/* Its bound: megatron-lm's schedule is its own. */
static void twin_predict(const engine_config *cfg, const machine_rates *m, engine_prediction *out)
{
    engine_megatron_lm.predict(cfg, m, out);
}

/* (no copies, no host Adam: every resource at once) */
static void twin_bound(const engine_config *cfg, const double busy[BUSY_KINDS], engine_bound *out)
{
    step_bound_schedule(cfg, busy, 0, 0, out);
}

/* Whether iteration i (1-based) is one the report lists: every Nth of --twin-report-every N
 * (0: none). */
static int twin_reported(const engine_report *rep, int i)
{
    const long long every = twin_report_every(rep->cfg);
    return every > 0 && i % every == 0;
}

static void twin_report_summary(const engine_report *rep)
{
    const int trained = rep->done - rep->first;
    engine_report_line(rep, "test-twin: %d iteration%s as megatron-lm; a loss every %lld iterations listed", trained,
                       trained == 1 ? "" : "s", twin_report_every(rep->cfg));
    for (int i = rep->first + 1; i <= rep->done; i++)
        if (twin_reported(rep, i))
            engine_report_line(rep, "test-twin: iteration %d loss %.6f", i, rep->iters[i - 1].r.loss);
}

static void twin_report_json(const engine_report *rep, cJSON *root)
{
    cJSON *twin = cJSON_AddObjectToObject(root, "twin");
    if (!twin) return; /* (out of memory: the record goes without the section, as cJSON leaves it) */
    cJSON_AddStringToObject(twin, "as", engine_megatron_lm.name);
    cJSON_AddNumberToObject(twin, "report_every", (double)twin_report_every(rep->cfg));
    cJSON_AddNumberToObject(twin, "iterations", rep->done - rep->first);
    cJSON *listed = cJSON_AddArrayToObject(twin, "losses");
    for (int i = rep->first + 1; listed && i <= rep->done; i++) {
        if (!twin_reported(rep, i)) continue;
        cJSON *one = cJSON_CreateObject();
        if (!one) return;
        cJSON_AddNumberToObject(one, "iteration", i);
        cJSON_AddNumberToObject(one, "loss", rep->iters[i - 1].r.loss);
        cJSON_AddItemToArray(listed, one);
    }
}

/* Its option.  SCOPE_LOCAL: it changes only rank 0's log and record, not what any rank computes,
 * and it takes no hash slot, so that it never holds the next free one that an option of the
 * shipped program will take (the slots go 0, 1, 2, ... over every table of the test build). */
static const option_decl twin_options[] = {
    {.name = "twin-report-every", .kind = ARG_INT, .arg = "N", .set = SET_INT,
     OPTION_FIELD(own_values[TWIN_REPORT_EVERY]), .lo = 0, .hi = OPTION_MAX_ITERS, .dflt = "0",
     .scope = SCOPE_LOCAL, .slot = -1, .use = OPTION_CFG | OPTION_KID, .refusal = REFUSED_GIVEN,
     .lacks = "has no twin report",
     .help = "its report lists the loss of every Nth iteration (default 0: none)"},
};

const engine_vtbl engine_test_twin = {
    .name = "test-twin",
    .alias = NULL,
    .description = "test only: megatron-lm's plan and step, with an option, a report and a bound of its own",
    .uses_window = 0,
    /* (-m all compares the shipped engines; a second baseline adds nothing to it) */
    .not_in_all = 1,
    .supports_bf16 = 1,
    .options = ENGINE_OPT_RANKS | ENGINE_OPT_ACCUM | ENGINE_OPT_FAULT_BACKWARD,
    .plan = twin_plan,
    .check = twin_check,
    .init = twin_init,
    .step = twin_step,
    .free = twin_free,
    .read_params = twin_read_params,
    .predict = twin_predict,
    .report_summary = twin_report_summary,
    .report_json = twin_report_json,
    .bound = twin_bound,
    OWN_OPTIONS(twin_options),
};
