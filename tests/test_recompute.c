/*
 * test_recompute.c — --recompute full|selective|none on every engine, on the CPU backend.
 *
 * What a layer keeps for its backward must not change what the backward computes: selective
 * recomputes the LayerNorms, the attention and the GELU with the same ops on the same inputs
 * as the forward, none recomputes nothing, so every engine under every mode gives the
 * baseline's (megatron-lm, full) losses, norms and final parameters bit for bit.  A kept
 * tensor carved over another layer's, a recompute that reads a buffer the backward already
 * wrote its gradients into, or a forward that stores the GELU by another path than the
 * recompute takes would all show as a difference here.  And each mode's memory is what its
 * plan says: the GPU peak equals the plan, and the plans differ by exactly the activations
 * the mode keeps.  (stronghold -w auto under a budget with selective: test_engines.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gpt_recompute KEPT_MODES[] = {GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_NONE};

/* The split: selective keeps qkv (3NC), res2 (NC), fch (4NC) of each layer and recomputes the
 * rest into one working set; full keeps nothing; none keeps the whole struct per layer. */
static void test_layer_sizes(void **state)
{
    (void)state;
    const gpt_shape sh = {.layers = 3, .hidden = 64, .heads = 4, .seq = 32, .batch = 2, .vocab = 512,
                          .vocab_padded = 512};
    const size_t NC = (size_t)sh.batch * sh.seq * sh.hidden;
    for (int d = 0; d < 2; d++) {
        const gpt_dtype dt = d ? GPT_BF16 : GPT_F32;
        const size_t e = gpt_dtype_size(dt), whole = gpt_layer_acts_bytes(&sh, dt);
        assert_int_equal(gpt_layer_kept_bytes(&sh, dt, GPT_RECOMPUTE_FULL), 0);
        assert_int_equal(gpt_layer_kept_bytes(&sh, dt, GPT_RECOMPUTE_NONE), whole);
        assert_int_equal(gpt_layer_kept_bytes(&sh, dt, GPT_RECOMPUTE_SELECTIVE), 8 * NC * e);
        assert_int_equal(gpt_layers_acts_bytes(&sh, dt, GPT_RECOMPUTE_FULL, 3), whole);
        assert_int_equal(gpt_layers_acts_bytes(&sh, dt, GPT_RECOMPUTE_NONE, 3), 3 * whole);
        /* selective's working set and one layer's own make the whole struct */
        assert_int_equal(gpt_layers_acts_bytes(&sh, dt, GPT_RECOMPUTE_SELECTIVE, 1), whole);
        assert_int_equal(gpt_layers_acts_bytes(&sh, dt, GPT_RECOMPUTE_SELECTIVE, 3), whole + 2 * 8 * NC * e);
        /* carves: each layer's own tensors lie apart, the working set is shared, all inside */
        char *base = (char *)0x100000;
        const size_t total = gpt_layers_acts_bytes(&sh, dt, GPT_RECOMPUTE_SELECTIVE, 3);
        gpt_layer_acts a[3];
        for (int l = 0; l < 3; l++) {
            gpt_layers_acts_carve(&a[l], base, &sh, dt, GPT_RECOMPUTE_SELECTIVE, l);
            assert_int_equal(a[l].recompute, GPT_RECOMPUTE_SELECTIVE);
            assert_true((char *)a[l].fch + 4 * NC * e <= base + total);
            if (l > 0) {
                assert_ptr_equal(a[l].ln1, a[0].ln1);
                assert_ptr_equal(a[l].fch_gelu, a[0].fch_gelu);
                assert_true((char *)a[l].qkv >= (char *)a[l - 1].fch + 4 * NC * e);
            }
        }
        gpt_layer_acts f;
        gpt_layers_acts_carve(&f, base, &sh, dt, GPT_RECOMPUTE_FULL, 2);
        assert_int_equal(f.recompute, GPT_RECOMPUTE_FULL);
        assert_ptr_equal(f.ln1, base);
        /* for the backward: the same tensors; the last layer recomputes nothing, the others
         * what the mode says */
        for (int l = 0; l < sh.layers; l++) {
            gpt_layer_acts b;
            gpt_layers_acts_carve(&f, base, &sh, dt, GPT_RECOMPUTE_FULL, l);
            gpt_layers_acts_carve_backward(&b, base, &sh, dt, GPT_RECOMPUTE_FULL, l);
            assert_ptr_equal(b.ln1, f.ln1);
            assert_ptr_equal(b.fch_gelu, f.fch_gelu);
            assert_int_equal(b.recompute, l == sh.layers - 1 ? GPT_RECOMPUTE_NONE : GPT_RECOMPUTE_FULL);
        }
    }
    gpt_recompute r;
    assert_int_equal(gpt_recompute_parse("selective", &r), 0);
    assert_int_equal(r, GPT_RECOMPUTE_SELECTIVE);
    assert_int_equal(gpt_recompute_parse("partial", &r), -1);
    assert_string_equal(gpt_recompute_name(GPT_RECOMPUTE_NONE), "none");
}

/* eng under cfg (its recompute mode) = the baseline (full), and its GPU peak = its plan. */
static void check_engine(const engine_vtbl *eng, const engine_config *cfg, const trajectory *base,
                         const char *what)
{
    trajectory t;
    run_engine(eng, cfg, SIZE_MAX, &t);
    char label[128];
    snprintf(label, sizeof label, "%s --recompute %s", what, gpt_recompute_name(cfg->recompute));
    assert_same_trajectory(base, &t, label);
    free_trajectory(&t);
    engine_plan p;
    eng->plan(cfg, &p);
    engine_harness h;
    assert_int_equal(harness_open(&h, eng, cfg, SIZE_MAX), 0);
    if (h.gpu.budget.peak != p.gpu_bytes)
        fail_msg("%s: GPU peak %zu, plan %llu", label, (size_t)h.gpu.budget.peak, (unsigned long long)p.gpu_bytes);
    harness_close(&h);
}

/* Every engine of the registry, selective and none, against megatron-lm full; clipped
 * (small_config's clip binds), on four layers.  An engine with a window of resident layers
 * (stronghold) runs -w 2, those two at the bottom and spread between the streamed ones. */
static void test_every_engine_every_mode(void **state)
{
    (void)state;
    assert_registry_populated();
    engine_config cfg = small_config(4);
    trajectory base;
    run_baseline(&cfg, &base);
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.3); /* (it trained: equality means something) */
    for (size_t m = 0; m < sizeof KEPT_MODES / sizeof KEPT_MODES[0]; m++) {
        for (int i = 0; i < engine_count(); i++) {
            const engine_vtbl *eng = engine_at(i);
            engine_config c = cfg;
            c.recompute = KEPT_MODES[m];
            char what[96];
            if (!eng->uses_window) {
                check_engine(eng, &c, &base, eng->name);
                continue;
            }
            c.window = 2;
            snprintf(what, sizeof what, "%s -w 2", eng->name);
            check_engine(eng, &c, &base, what);
            c.placement = PLACE_SPREAD;
            snprintf(what, sizeof what, "%s -w 2 --placement spread", eng->name);
            check_engine(eng, &c, &base, what);
        }
    }
    free_trajectory(&base);
}

/* bf16 activations (the CPU backend rounds as the GPU does): selective and none = full. */
static void test_bf16_modes(void **state)
{
    (void)state;
    engine_config cfg = small_config(3);
    cfg.bf16 = 1;
    trajectory base;
    run_baseline(&cfg, &base);
    for (size_t m = 0; m < sizeof KEPT_MODES / sizeof KEPT_MODES[0]; m++) {
        engine_config c = cfg;
        c.recompute = KEPT_MODES[m];
        check_engine(&engine_megatron_lm, &c, &base, "megatron-lm bf16");
        c.window = 1;
        check_engine(&engine_stronghold, &c, &base, "stronghold bf16 -w 1");
    }
    free_trajectory(&base);
}

/* The plans differ by the activations each mode keeps: selective adds L - 1 layers' GEMM
 * outputs to full's one working set (engines that keep the layer inputs anyway), none all
 * of L - 1 more layers' activations; the same on every engine of the registry. */
static void test_plans_differ_by_the_kept(void **state)
{
    (void)state;
    assert_registry_populated();
    const int L = 6;
    engine_config cfg = small_config(L);
    const gpt_shape *sh = &cfg.shape;
    const uint64_t kept = gpt_layer_kept_bytes(sh, GPT_F32, GPT_RECOMPUTE_SELECTIVE);
    const uint64_t whole = gpt_layer_acts_bytes(sh, GPT_F32);
    cfg.window = 2;
    for (int i = 0; i < engine_count(); i++) {
        const engine_vtbl *eng = engine_at(i);
        engine_plan full, sel, none;
        engine_config c = cfg;
        eng->plan(&c, &full);
        c.recompute = GPT_RECOMPUTE_SELECTIVE;
        eng->plan(&c, &sel);
        c.recompute = GPT_RECOMPUTE_NONE;
        eng->plan(&c, &none);
        if (sel.gpu_bytes - full.gpu_bytes != (uint64_t)(L - 1) * kept ||
            none.gpu_bytes - full.gpu_bytes != (uint64_t)(L - 1) * whole)
            fail_msg("%s: plans full %llu, selective %llu (+%llu, expected +%llu), none %llu (+%llu, expected +%llu)",
                     eng->name, (unsigned long long)full.gpu_bytes, (unsigned long long)sel.gpu_bytes,
                     (unsigned long long)(sel.gpu_bytes - full.gpu_bytes), (unsigned long long)((L - 1) * kept),
                     (unsigned long long)none.gpu_bytes, (unsigned long long)(none.gpu_bytes - full.gpu_bytes),
                     (unsigned long long)((L - 1) * whole));
        assert_true(full.host_bytes == sel.host_bytes && sel.host_bytes == none.host_bytes);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_sizes),
        cmocka_unit_test(test_every_engine_every_mode),
        cmocka_unit_test(test_bf16_modes),
        cmocka_unit_test(test_plans_differ_by_the_kept),
    };
    return cmocka_run_group_tests_name("recompute", tests, NULL, NULL);
}
