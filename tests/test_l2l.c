/*
 * test_l2l.c — the l2l engine against the baseline on the CPU backend, and its memory and
 * traffic against its plan.
 *
 * The CPU backend's streams are worker threads with real events, so a copy into the one
 * layer slot that is not ordered after the slot's previous use, grads sent home before the
 * backward wrote them, or a host update that runs on stale grads gives a different
 * trajectory, which assert_same_trajectory catches bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Clipped (small_config's clip binds: norms ~1-5 against 0.5): equal to the baseline for
 * L = 1, 2, 4, and the training moved. */
static void test_l2l_equals_baseline(void **state)
{
    (void)state;
    const int layers[] = {1, 2, 4};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        engine_config cfg = small_config(layers[i]);
        trajectory base, t;
        run_baseline(&cfg, &base);
        run_engine(&engine_l2l, &cfg, SIZE_MAX, &t);
        /* The clip binds on the first step, so the clipped path is what is compared. */
        assert_true(base.norm[0] > cfg.optim.clip);
        char what[32];
        snprintf(what, sizeof what, "l2l L=%d", layers[i]);
        assert_same_trajectory(&base, &t, what);
        free_trajectory(&base);
        free_trajectory(&t);
    }
}

/* The training moved: the loss fell, and every layer's block changed from its
 * initialisation, weights and biases/LayerNorm alike (the artifact updated neither the
 * biases nor all rows). */
static void test_l2l_trains(void **state)
{
    (void)state;
    const int L = 2;
    engine_config cfg = small_config(L);
    trajectory t;
    run_engine(&engine_l2l, &cfg, SIZE_MAX, &t);
    assert_true(t.loss[ITERS - 1] < t.loss[0] - 0.3);

    const gpt_shape *sh = &cfg.shape;
    gpt_layer_layout ll = gpt_layer_layout_of(sh);
    const size_t PE = gpt_embed_layout_of(sh).total;
    float *init = malloc(ll.total * sizeof(float));
    assert_non_null(init);
    for (int k = 0; k < L; k++) {
        gpt_init_layer(init, sh, k, cfg.seed);
        const float *now = t.params + PE + (size_t)k * ll.total;
        size_t moved_decay = 0, moved_rest = 0;
        for (size_t i = 0; i < ll.total; i++)
            if (now[i] != init[i]) *(i < ll.n_decay ? &moved_decay : &moved_rest) += 1;
        /* Nearly every element moves; the last rows of fcproj_w and the biases too. */
        assert_true(moved_decay > ll.n_decay * 9 / 10);
        assert_true(moved_rest > (ll.total - ll.n_decay) * 9 / 10);
        assert_true(now[ll.n_decay - 1] != init[ll.n_decay - 1]);
    }
    free(init);
    free_trajectory(&t);
}

/* Without clipping each layer's host update runs during the backward: still the baseline. */
static void test_l2l_unclipped_equals_baseline(void **state)
{
    (void)state;
    engine_config cfg = small_config(4);
    cfg.optim.clip = 0;
    cfg.optim.lr = 1e-3;
    trajectory base, t;
    run_baseline(&cfg, &base);
    run_engine(&engine_l2l, &cfg, SIZE_MAX, &t);
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3);
    assert_same_trajectory(&base, &t, "l2l unclipped");
    free_trajectory(&base);
    free_trajectory(&t);
}

/* GPU memory does not grow with L except for the checkpointed inputs and the norms; the
 * measured peaks equal the plan, GPU and host; the bytes moved are the schedule's. */
static void test_l2l_memory_and_traffic(void **state)
{
    (void)state;
    engine_config c4 = small_config(4), c8 = small_config(8);
    engine_plan p4, p8;
    engine_l2l.plan(&c4, &p4);
    engine_l2l.plan(&c8, &p8);
    const gpt_shape *sh = &c8.shape;
    const size_t NC = (size_t)sh->batch * sh->seq * sh->hidden;
    const size_t PL = gpt_layer_layout_of(sh).total, PE = gpt_embed_layout_of(sh).total;
    assert_int_equal(p8.gpu_bytes - p4.gpu_bytes, 4 * (NC + 1) * sizeof(float));
    /* The host holds 16 bytes per layer parameter. */
    assert_int_equal(p8.host_bytes - p4.host_bytes, 4 * (16 * PL + sizeof(float)));
    /* GPU = 20 P_E (params, grads, m, v and the embedding's own part of its gradient: model.h)
     * + 8 P_L + the L+1 inputs + one layer's working set + the head's. */
    const size_t N = (size_t)sh->batch * sh->seq;
    const size_t working = (gpt_layer_acts_floats(sh) + gpt_layer_scratch_floats(sh) +
                            gpt_head_acts_floats(sh) + NC + 9) * sizeof(float) +
                           2 * N * sizeof(int32_t);
    assert_int_equal(p8.gpu_bytes, 20 * PE + 8 * PL + 9 * NC * sizeof(float) + working);

    for (int clip = 1; clip >= 0; clip--) {
        engine_config c = c8;
        if (!clip) c.optim.clip = 0;
        engine_harness h;
        assert_int_equal(harness_open(&h, &engine_l2l, &c, SIZE_MAX), 0);
        engine_plan chosen;
        engine_l2l.chosen_plan(h.state, &chosen);
        assert_int_equal(chosen.gpu_bytes, p8.gpu_bytes);
        for (int it = 1; it <= 2; it++) {
            step_result r;
            memset(&r, 0, sizeof r);
            harness_step(&h, it, &r);
            assert_false(r.skipped);
            assert_true(r.has_busy);
            assert_true(r.busy_ms[BUSY_COMPUTE] > 0);
            assert_true(r.busy_ms[BUSY_H2D] > 0);
            assert_true(r.busy_ms[BUSY_D2H] > 0);
            /* Params in twice per layer (forward, backward), grads out once, every layer
             * updated on the host. */
            assert_true(r.bytes_h2d == 2.0 * 8 * PL * sizeof(float));
            assert_true(r.bytes_d2h == 8.0 * PL * sizeof(float));
            assert_true(r.host_adam_params == 8.0 * PL);
            assert_true(r.bytes_disk_read == 0 && r.bytes_disk_write == 0);
        }
        assert_int_equal(h.gpu.budget.peak, p8.gpu_bytes);
        assert_int_equal(h.host.peak, p8.host_bytes);
        /* The embedding staging was given back after init. */
        assert_int_equal(h.host.in_use, p8.host_bytes - PE * sizeof(float));
        harness_close(&h);
    }
}

/* A GPU budget one byte short of the plan: GPT_ERR_OOM, and the record names the last GPU
 * allocation (the block norms); half the plan fails earlier, also with a record. */
static void test_l2l_oom(void **state)
{
    (void)state;
    engine_config c = small_config(4);
    engine_plan p;
    engine_l2l.plan(&c, &p);
    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_l2l, &c, p.gpu_bytes - 1), GPT_ERR_OOM);
    assert_true(h.gpu.budget.oom);
    assert_string_equal(h.gpu.budget.oom_what, "block norms");
    assert_int_equal(h.gpu.budget.oom_bytes, (size_t)(c.shape.layers + 1) * sizeof(float));
    harness_close(&h);

    assert_int_equal(harness_open(&h, &engine_l2l, &c, p.gpu_bytes / 2), GPT_ERR_OOM);
    assert_true(h.gpu.budget.oom);
    assert_true(h.gpu.budget.oom_what[0] != '\0');
    assert_true(h.gpu.budget.oom_in_use + h.gpu.budget.oom_bytes > p.gpu_bytes / 2);
    harness_close(&h);

    /* Exactly the plan fits. */
    assert_int_equal(harness_open(&h, &engine_l2l, &c, p.gpu_bytes), 0);
    assert_false(h.gpu.budget.oom);
    harness_close(&h);
}

static void test_l2l_refuses(void **state)
{
    (void)state;
    engine_config c = small_config(4);
    char err[256] = "";
    assert_int_equal(engine_config_refused(&engine_l2l, &c, err, sizeof err), 0);
    c.bf16 = 1; /* bf16, with micro-batches too */
    assert_int_equal(engine_config_refused(&engine_l2l, &c, err, sizeof err), 0);
    c.micro_batches = 2;
    assert_int_equal(engine_config_refused(&engine_l2l, &c, err, sizeof err), 0);
    c.micro_batches = 1;
    c.bf16 = 0;
    c.dpu = 1;
    assert_int_not_equal(engine_config_refused(&engine_l2l, &c, err, sizeof err), 0);
    assert_ptr_equal(engine_find("l2l"), &engine_l2l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_l2l_equals_baseline),
        cmocka_unit_test(test_l2l_trains),
        cmocka_unit_test(test_l2l_unclipped_equals_baseline),
        cmocka_unit_test(test_l2l_memory_and_traffic),
        cmocka_unit_test(test_l2l_oom),
        cmocka_unit_test(test_l2l_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
