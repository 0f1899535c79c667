/*
 * test_engines.c — every engine against the baseline on the CPU backend.
 *
 * The CPU backend runs the same kernels in the same order for every engine, so an engine
 * that moves tensors around correctly must give exactly (bit for bit) the baseline's
 * per-iteration losses and grad norms and its final parameters.  A prefetch that is not
 * ordered before its use, a slot reused too early or an update applied to the wrong layer
 * shows up here as a difference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"
#include "../engines/runtime/update_ahead.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every engine of the registry gives the baseline's trajectory bit for bit: clipped
 * (small_config's clip binds) and unclipped (where an engine's host updates then run during
 * the backward), on eight layers; an engine with a window of resident layers (stronghold)
 * with -w 3, so that it streams the rest (its other windows and placements: below).  It loops
 * over engine_count() / engine_at(), so an engine added to the registry is checked here
 * without this test naming it. */
static void test_every_engine_equals_baseline(void **state)
{
    (void)state;
    assert_registry_populated();
    const int L = 8;
    for (int clipped = 1; clipped >= 0; clipped--) {
        engine_config cfg = small_config(L);
        if (!clipped) {
            cfg.optim.clip = 0;
            cfg.optim.lr = 1e-3;
        }
        trajectory base;
        run_baseline(&cfg, &base);
        assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3); /* (it trained: equality means something) */
        for (int i = 0; i < engine_count(); i++) {
            const engine_vtbl *eng = engine_at(i);
            engine_config c = cfg;
            if (eng->uses_window) c.window = 3;
            trajectory t;
            run_engine(eng, &c, SIZE_MAX, &t);
            char what[96];
            snprintf(what, sizeof what, "%s%s%s", eng->name, eng->uses_window ? " -w 3" : "",
                     clipped ? "" : " --clip-grad 0");
            assert_same_trajectory(&base, &t, what);
            free_trajectory(&t);
        }
        free_trajectory(&base);
    }
}

/* stronghold with -w W for W in {1, 2, 3, L} and -w auto (everything fits) equals the
 * baseline exactly, its resident layers at the bottom and (W < L) spread between the
 * streamed ones; the training actually moved (so equality is not of two no-ops). */
static void test_stronghold_equals_baseline(void **state)
{
    (void)state;
    const int L = 8;
    engine_config cfg = small_config(L);
    trajectory base;
    run_baseline(&cfg, &base);
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3);

    const int windows[] = {1, 2, 3, L, 0};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        engine_config c = cfg;
        c.window = windows[i];
        for (int spread = 0; spread < 2; spread++) {
            if (spread && (windows[i] == 0 || windows[i] >= L)) continue;
            c.placement = spread ? PLACE_SPREAD : PLACE_AUTO;
            trajectory t;
            run_engine(&engine_stronghold, &c, SIZE_MAX, &t);
            char what[64];
            snprintf(what, sizeof what, "stronghold -w %d%s", windows[i], spread ? " --placement spread" : "");
            assert_same_trajectory(&base, &t, what);
            free_trajectory(&t);
        }
    }
    free_trajectory(&base);
}

/* Without clipping the host updates run during the backward (queued as each layer's grads
 * leave): still the baseline's trajectory, bit for bit. */
static void test_stronghold_unclipped_equals_baseline(void **state)
{
    (void)state;
    const int L = 8;
    engine_config cfg = small_config(L);
    cfg.optim.clip = 0;
    cfg.optim.lr = 1e-3;
    trajectory base;
    run_baseline(&cfg, &base);
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3);
    /* (-w 5: 5 resident, 3 streamed in 3 slots; spread: layers 2, 5 and 7 stream) */
    const struct { int window, placement; const char *what; } runs[] = {
        {1, PLACE_AUTO, "unclipped -w 1"}, {3, PLACE_AUTO, "unclipped -w 3"},
        {3, PLACE_SPREAD, "unclipped -w 3 --placement spread"}, {5, PLACE_SPREAD, "unclipped -w 5 --placement spread"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        engine_config c = cfg;
        c.window = runs[i].window;
        c.placement = runs[i].placement;
        trajectory t;
        run_engine(&engine_stronghold, &c, SIZE_MAX, &t);
        assert_same_trajectory(&base, &t, runs[i].what);
        free_trajectory(&t);
    }
    free_trajectory(&base);
}

/* --clip-speculate: the top host-updated layers of stronghold, l2l and zero-infinity updated
 * ahead of the clipping norm, redone exactly when it clips.  The clip is set at the baseline's median norm, so that some steps
 * clip and some do not; by the engine's rule (ahead only after a step that did not clip),
 * the test checks from the baseline's norms that steps were updated ahead and kept, and
 * others updated ahead and redone: both paths ran, and the trajectory is the baseline's. */
static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* eng with cfg and -w window --clip-speculate speculate --placement placement: the second
 * copies are in its plan (so updates go ahead), and its trajectory is base's. */
static void check_speculating_run(const engine_vtbl *eng, const engine_config *cfg, int window, int speculate,
                                  int placement, const trajectory *base)
{
    engine_config c = *cfg;
    c.window = window;
    c.clip_speculate = speculate;
    c.placement = placement;
    engine_config off = c;
    off.clip_speculate = 0;
    engine_plan with, without;
    eng->plan(&c, &with);
    eng->plan(&off, &without);
    assert_true(with.host_bytes > without.host_bytes);
    trajectory t;
    run_engine(eng, &c, SIZE_MAX, &t);
    char what[96];
    snprintf(what, sizeof what, "%s -w %d --clip-speculate %d%s", eng->name, window, speculate,
             placement == PLACE_SPREAD ? " --placement spread" : "");
    assert_same_trajectory(base, &t, what);
    free_trajectory(&t);
}

static void test_clip_speculate_equals_baseline(void **state)
{
    (void)state;
    const int L = 8;
    engine_config cfg = small_config(L);
    trajectory probe;
    run_baseline(&cfg, &probe);
    double sorted[ITERS];
    memcpy(sorted, probe.norm, sizeof sorted);
    qsort(sorted, ITERS, sizeof sorted[0], by_double);
    free_trajectory(&probe);
    cfg.optim.clip = sorted[ITERS / 2];
    trajectory base;
    run_baseline(&cfg, &base);
    int kept = 0, redone = 0, ahead = 1;
    for (int i = 0; i < ITERS; i++) {
        const int clips = gpt_clip_scale(&cfg.optim, base.norm[i]) != 1.0f;
        if (ahead) kept += !clips, redone += clips;
        ahead = !clips;
    }
    assert_true(kept >= 1 && redone >= 1);

    /* every engine whose host updates otherwise wait for the norm: each engine of the registry
     * that takes --clip-speculate, in the runs this table gives it, or
     * (an engine the table does not name) -w 3 if it has a window, --clip-speculate 2 */
    /* (stronghold --placement spread -w 3 --clip-speculate 2: the streamed layers updated
     * ahead are 6 and 7, below them 4 and 1 wait for the norm; zero-infinity's auto is none,
     * so its runs give the count) */
    static const struct { const char *engine; int window, speculate, placement; } runs[] = {
        {"stronghold", 1, -1, 0}, {"stronghold", 3, -1, 0}, {"stronghold", 1, 2, 0},
        {"stronghold", 3, -1, PLACE_SPREAD}, {"stronghold", 3, 2, PLACE_SPREAD},
        {"l2l", 0, -1, 0}, {"l2l", 0, 3, 0}, {"zero-infinity", 0, 8, 0}, {"zero-infinity", 0, 1, 0}};
    const size_t nruns = sizeof runs / sizeof runs[0];
    size_t table_runs = 0;
    for (int e = 0; e < engine_count(); e++) {
        const engine_vtbl *eng = engine_at(e);
        if (!engine_takes_option(eng, "clip-speculate")) continue;
        int named = 0;
        for (size_t i = 0; i < nruns; i++) {
            if (strcmp(runs[i].engine, eng->name) != 0) continue;
            named = 1;
            table_runs++;
            check_speculating_run(eng, &cfg, runs[i].window, runs[i].speculate, runs[i].placement, &base);
        }
        if (!named) check_speculating_run(eng, &cfg, eng->uses_window ? 3 : 0, 2, PLACE_AUTO, &base);
    }
    /* (every run of the table ran: none of its engines lost the option or its registry entry) */
    assert_int_equal(table_runs, nruns);
    free_trajectory(&base);
}

/* --clip-speculate auto's rule (runtime/update_ahead.h) on a trajectory's norms: how often
 * the second copies would be taken and given back. */
static void auto_rule(const engine_config *cfg, const double *norm, int *taken, int *given_back)
{
    int held = 0, next = 0, run = 0;
    *taken = *given_back = 0;
    for (int i = 0; i < ITERS; i++) {
        if (next && !held) held = 1, ++*taken;
        const int clips = gpt_clip_scale(&cfg->optim, norm[i]) != 1.0f;
        run = clips ? run + 1 : 0;
        next = !clips;
        if (held && run >= UPDATE_AHEAD_GIVE_BACK_AFTER) held = 0, ++*given_back;
    }
}

/* --clip-speculate auto follows the clipping: under a clip where a step does not clip, then
 * UPDATE_AHEAD_GIVE_BACK_AFTER or more in a row do, then one does not again, stronghold and
 * l2l take the second copies (host memory up by exactly their size), give them back (down to
 * what it was: the blocks whose state was in them copied home first) and take them again;
 * none at init; and the trajectory is the baseline's bit for bit throughout. */
static void test_clip_speculate_auto_follows_clipping(void **state)
{
    (void)state;
    const int L = 8;
    engine_config cfg = small_config(L);
    trajectory probe;
    cfg.optim.clip = 0;
    run_baseline(&cfg, &probe);
    double sorted[ITERS];
    memcpy(sorted, probe.norm, sizeof sorted);
    qsort(sorted, ITERS, sizeof sorted[0], by_double);
    free_trajectory(&probe);
    /* the first clip (from the norms' order) whose clipped baseline has that pattern */
    trajectory base;
    int found = 0;
    for (int q = 1; q < ITERS && !found; q++) {
        cfg.optim.clip = 0.5 * (sorted[q - 1] + sorted[q]);
        run_baseline(&cfg, &base);
        int taken, given;
        auto_rule(&cfg, base.norm, &taken, &given);
        if (taken >= 2 && given >= 1) found = 1;
        else free_trajectory(&base);
    }
    assert_true(found);

    const struct { const engine_vtbl *eng; int window; } runs[] = {
        {&engine_stronghold, 1}, {&engine_stronghold, 3}, {&engine_l2l, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        engine_config c = cfg;
        c.window = runs[i].window;
        c.clip_speculate = -1;
        engine_harness h;
        assert_int_equal(harness_open(&h, runs[i].eng, &c, SIZE_MAX), 0);
        const size_t at_init = h.host.in_use;
        size_t held_bytes = 0;
        int held = 0, next = 0, run = 0, taken = 0, given = 0;
        trajectory t;
        for (int it = 1; it <= ITERS; it++) {
            step_result r;
            memset(&r, 0, sizeof r);
            harness_step(&h, it, &r);
            t.loss[it - 1] = r.loss;
            t.norm[it - 1] = r.grad_norm;
            /* the rule on this run's own norms: what the step and the host memory must show */
            if (next && !held) held = 1, taken++;
            const int clips = gpt_clip_scale(&c.optim, r.grad_norm) != 1.0f;
            assert_int_equal(r.ahead_blocks > 0, next);
            assert_int_equal(r.ahead_redone, next && clips);
            run = clips ? run + 1 : 0;
            next = !clips;
            if (held && run >= UPDATE_AHEAD_GIVE_BACK_AFTER) held = 0, given++;
            if (held && !held_bytes) held_bytes = h.host.in_use - at_init;
            if (held) assert_true(held_bytes > 0 && h.host.in_use == at_init + held_bytes);
            else assert_true(h.host.in_use == at_init);
        }
        assert_true(taken >= 2 && given >= 1);
        t.nparams = (size_t)gpt_param_count(&c.shape);
        t.params = malloc(t.nparams * sizeof(float));
        assert_non_null(t.params);
        assert_int_equal(h.eng->read_params(h.state, t.params), 0);
        harness_close(&h);
        char what[96];
        snprintf(what, sizeof what, "%s -w %d --clip-speculate auto (clip %.4g)", runs[i].eng->name, runs[i].window,
                 c.optim.clip);
        assert_same_trajectory(&base, &t, what);
        free_trajectory(&t);
    }
    free_trajectory(&base);
}

/* -w auto under a GPU budget too small for every layer: it streams some layers (its
 * chosen plan has fewer resident layers than L) and still equals the baseline; under
 * --recompute selective too, whose kept activations come out of the budget before the
 * window is sized (so fewer layers stay resident and more host memory is used). */
static void test_stronghold_auto_under_budget(void **state)
{
    (void)state;
    const int L = 8;
    engine_config cfg = small_config(L);
    trajectory base;
    run_baseline(&cfg, &base);

    engine_config c = cfg;
    engine_plan all, some[2];
    c.window = L;
    engine_stronghold.plan(&c, &all);
    c.window = 0;
    /* Room for about half the layers resident. */
    const size_t limit = (size_t)(all.gpu_bytes * 0.6);
    for (int m = 0; m < 2; m++) {
        c.recompute = m ? GPT_RECOMPUTE_SELECTIVE : GPT_RECOMPUTE_FULL;
        engine_harness h;
        assert_int_equal(harness_open(&h, &engine_stronghold, &c, limit), 0);
        engine_stronghold.chosen_plan(h.state, &some[m]);
        assert_true(some[m].gpu_bytes < all.gpu_bytes);
        assert_true(some[m].host_bytes > 0);
        /* The arena holds exactly what the plan says (no hidden allocations). */
        assert_true(h.gpu.budget.peak <= limit);
        assert_int_equal(h.gpu.budget.in_use, some[m].gpu_bytes);
        harness_close(&h);

        trajectory t;
        run_engine(&engine_stronghold, &c, limit, &t);
        assert_same_trajectory(&base, &t, m ? "stronghold -w auto --recompute selective under a budget"
                                            : "stronghold -w auto under a budget");
        free_trajectory(&t);
    }
    assert_true(some[1].host_bytes > some[0].host_bytes);
    free_trajectory(&base);
}

/* GPU memory does not grow with L (beyond L+1 floats of block norms); host memory does. */
static void test_stronghold_gpu_memory_independent_of_layers(void **state)
{
    (void)state;
    engine_plan p8, p16;
    engine_config c8 = small_config(8), c16 = small_config(16);
    c8.window = c16.window = 2;
    engine_stronghold.plan(&c8, &p8);
    engine_stronghold.plan(&c16, &p16);
    assert_int_equal(p16.gpu_bytes - p8.gpu_bytes, 8 * sizeof(float));
    assert_true(p16.host_bytes > p8.host_bytes);

    /* Measured: the arena's peak equals the plan after a step. */
    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_stronghold, &c16, SIZE_MAX), 0);
    step_result r;
    memset(&r, 0, sizeof r);
    harness_step(&h, 1, &r);
    assert_int_equal(h.gpu.budget.peak, p16.gpu_bytes);
    assert_true(r.has_busy);
    /* 14 streamed layers in 2 slots: params in for each forward; params and input in for
     * each backward but the top 2's; grads out for each; inputs out for all but the top 2. */
    const double PL = (double)gpt_layer_layout_of(&c16.shape).total * sizeof(float);
    const double NC = (double)c16.shape.batch * c16.shape.seq * c16.shape.hidden * sizeof(float);
    assert_true(r.bytes_h2d == 14 * PL + 12 * (PL + NC));
    assert_true(r.bytes_d2h == 14 * PL + 12 * NC);
    assert_true(r.host_adam_params == 14.0 * gpt_layer_layout_of(&c16.shape).total);
    harness_close(&h);
}

/* A budget that cannot hold two layer slots is an OOM with a record, not a crash. */
static void test_stronghold_oom(void **state)
{
    (void)state;
    engine_config c = small_config(8);
    c.window = 0;
    engine_plan p;
    engine_stronghold.plan(&c, &p);
    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_stronghold, &c, p.gpu_bytes / 2), GPT_ERR_OOM);
    assert_true(h.gpu.budget.oom);
    harness_close(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_engine_equals_baseline),
        cmocka_unit_test(test_stronghold_equals_baseline),
        cmocka_unit_test(test_stronghold_unclipped_equals_baseline),
        cmocka_unit_test(test_clip_speculate_equals_baseline),
        cmocka_unit_test(test_clip_speculate_auto_follows_clipping),
        cmocka_unit_test(test_stronghold_auto_under_budget),
        cmocka_unit_test(test_stronghold_gpu_memory_independent_of_layers),
        cmocka_unit_test(test_stronghold_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
