/*
 * test_zero_infinity.c — the zero-infinity engine against the baseline on the CPU backend.
 *
 * Every fetch, bucket and host update is asynchronous on the CPU backend's stream threads
 * and the host Adam pool, so a missing event between them shows up as a difference from
 * megatron-lm's trajectory (bit for bit: losses, grad norms, final parameters).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_harness.h"

#include "../engines/runtime/disk_tier.h"
#include "../engines/runtime/nvme_adam.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where --offload nvme puts its swap directories: <test binary's dir>/zi-disk-tmp (a disk
 * file system: O_DIRECT works there, unlike tmpfs).  Set once by main. */
static char nvme_root[ENGINE_PATH_MAX - 1];

static void use_nvme(engine_config *c)
{
    c->offload = OFFLOAD_NVME;
    assert_true(mkdir(nvme_root, 0755) == 0 || errno == EEXIST);
    snprintf(c->nvme_dir, sizeof c->nvme_dir, "%s", nvme_root);
}

/* Nothing of the swap directories is left once the engines are freed. */
static void assert_nvme_root_empty(void)
{
    DIR *d = opendir(nvme_root);
    assert_non_null(d);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) entries++;
    closedir(d);
    assert_int_equal(entries, 0);
}

static void equals_baseline(engine_config cfg, const char *mode)
{
    trajectory base;
    run_baseline(&cfg, &base);
    /* The training moved, so equality is not of two no-ops. */
    assert_true(base.loss[ITERS - 1] < base.loss[0] - 0.1);
    trajectory t;
    run_engine(&engine_zero_infinity, &cfg, SIZE_MAX, &t);
    char what[96];
    snprintf(what, sizeof what, "zero-infinity %s L=%d clip %g", mode, cfg.shape.layers,
             cfg.optim.clip);
    assert_same_trajectory(&base, &t, what);
    free_trajectory(&t);
    free_trajectory(&base);
}

/* Clipped (the updates wait for the global norm) and unclipped (each block's update runs as
 * soon as its grads are home, under the rest of the backward), L = 1, 2, 4. */
static void test_cpu_equals_baseline(void **state)
{
    (void)state;
    const int layers[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        engine_config cfg = small_config(layers[i]);
        equals_baseline(cfg, "cpu");
        cfg.optim.clip = 0;
        cfg.optim.lr = 1e-3;
        equals_baseline(cfg, "cpu");
    }
}

/* More layers than fetch buffers, buckets and grad staging blocks, so every one of them is
 * reused within a step (where a missing "consumed", "grads home" or staging wait would
 * bite), in both modes. */
static void test_many_layers_equals_baseline(void **state)
{
    (void)state;
    engine_config cfg = small_config(9);
    equals_baseline(cfg, "cpu");
    cfg.optim.clip = 0;
    equals_baseline(cfg, "cpu");
    use_nvme(&cfg);
    equals_baseline(cfg, "nvme");
    assert_nvme_root_empty();
}

/* --offload nvme (grads, m, v on disk through nvme_adam): the same trajectory, clipped and
 * unclipped, L = 1, 2, 4. */
static void test_nvme_equals_baseline(void **state)
{
    (void)state;
    const int layers[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        engine_config cfg = small_config(layers[i]);
        use_nvme(&cfg);
        equals_baseline(cfg, "nvme");
        cfg.optim.clip = 0;
        cfg.optim.lr = 1e-3;
        equals_baseline(cfg, "nvme");
    }
    assert_nvme_root_empty();
}

static double layer_bytes(const engine_config *c)
{
    return (double)gpt_layer_layout_of(&c->shape).total * sizeof(float);
}
static double embed_bytes(const engine_config *c)
{
    return (double)gpt_embed_layout_of(&c->shape).total * sizeof(float);
}

/* GPU memory grows with L only by the checkpointed inputs and the block norms; the measured
 * peaks equal the plan; host is 16 P plus the read-backs; the bytes of one step. */
static void test_memory_and_bytes(void **state)
{
    (void)state;
    engine_config c4 = small_config(4), c8 = small_config(8);
    engine_plan p4, p8;
    engine_zero_infinity.plan(&c4, &p4);
    engine_zero_infinity.plan(&c8, &p8);
    const size_t NC = (size_t)c4.shape.batch * c4.shape.seq * c4.shape.hidden;
    assert_int_equal(p8.gpu_bytes - p4.gpu_bytes, 4 * (NC + 1) * sizeof(float));
    const uint64_t P8 = gpt_param_count(&c8.shape);
    const size_t N = (size_t)c8.shape.batch * c8.shape.seq;
    assert_int_equal(p8.host_bytes, 16 * P8 + (N + 9) * sizeof(float));
    assert_int_equal(p8.disk_bytes, 0);

    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_zero_infinity, &c8, SIZE_MAX), 0);
    step_result r;
    for (int it = 1; it <= 2; it++) {
        memset(&r, 0, sizeof r);
        harness_step(&h, it, &r);
    }
    assert_int_equal(h.gpu.budget.peak, p8.gpu_bytes);
    assert_int_equal(h.host.peak, p8.host_bytes);
    engine_plan chosen;
    engine_zero_infinity.chosen_plan(h.state, &chosen);
    assert_memory_equal(&chosen, &p8, sizeof chosen);
    /* Params in twice (forward and backward), the embed block once; grads out once. */
    assert_true(r.has_busy);
    assert_true(r.bytes_h2d == 2 * 8 * layer_bytes(&c8) + embed_bytes(&c8));
    assert_true(r.bytes_d2h == 8 * layer_bytes(&c8) + embed_bytes(&c8));
    assert_true(r.host_adam_params == (double)P8);
    assert_true(r.bytes_disk_read == 0 && r.bytes_disk_write == 0);
    assert_true(r.busy_ms[BUSY_COMPUTE] > 0 && r.busy_ms[BUSY_H2D] > 0 && r.busy_ms[BUSY_D2H] > 0);
    harness_close(&h);
}

/* nvme: host about 4 P plus buffers, disk 12 P (rounded per block), both measured equal to
 * the plan; the GPU as in cpu mode; a step's disk bytes: grads written once, then read with
 * m and v, and m, v written back. */
static void test_nvme_memory_and_bytes(void **state)
{
    (void)state;
    engine_config cpu = small_config(4), c = small_config(4);
    use_nvme(&c);
    engine_plan pc, p;
    engine_zero_infinity.plan(&cpu, &pc);
    engine_zero_infinity.plan(&c, &p);
    assert_int_equal(p.gpu_bytes, pc.gpu_bytes);
    const uint64_t P = gpt_param_count(&c.shape);
    const size_t PL = gpt_layer_layout_of(&c.shape).total, PE = gpt_embed_layout_of(&c.shape).total;
    const size_t max_block = PE > PL ? PE : PL;
    const size_t N = (size_t)c.shape.batch * c.shape.seq;
    const uint64_t round_l = disk_tier_round(PL * sizeof(float));
    const uint64_t round_e = disk_tier_round(PE * sizeof(float));
    assert_int_equal(p.disk_bytes, 3 * (round_e + 4 * round_l));
    assert_int_equal(p.host_bytes, 4 * P + (N + 5) * sizeof(float) +
                                       2 * disk_tier_round(max_block * sizeof(float)) +
                                       nvme_adam_staging_bytes(max_block, 3, 1));

    engine_harness h;
    assert_int_equal(harness_open_disk(&h, &engine_zero_infinity, &c, SIZE_MAX, SIZE_MAX), 0);
    step_result r;
    for (int it = 1; it <= 2; it++) {
        memset(&r, 0, sizeof r);
        harness_step(&h, it, &r);
    }
    assert_int_equal(h.gpu.budget.peak, p.gpu_bytes);
    assert_int_equal(h.host.peak, p.host_bytes);
    assert_int_equal(h.disk.peak, p.disk_bytes);
    assert_true(r.bytes_h2d == 2 * 4 * layer_bytes(&c) + embed_bytes(&c));
    assert_true(r.bytes_d2h == 4 * layer_bytes(&c) + embed_bytes(&c));
    assert_true(r.host_adam_params == (double)P);
    const double round_all = (double)(round_e + 4 * round_l);
    assert_true(r.bytes_disk_write == 3 * round_all);
    assert_true(r.bytes_disk_read == 3 * round_all);
    harness_close(&h); /* also asserts the disk budget is back to zero */
    assert_nvme_root_empty();
}

/* A disk budget below the plan is an OOM with the disk budget's record. */
static void test_nvme_disk_oom(void **state)
{
    (void)state;
    engine_config c = small_config(2);
    use_nvme(&c);
    engine_plan p;
    engine_zero_infinity.plan(&c, &p);
    engine_harness h;
    assert_int_equal(harness_open_disk(&h, &engine_zero_infinity, &c, SIZE_MAX, p.disk_bytes - 1),
                     GPT_ERR_OOM);
    assert_true(h.disk.oom);
    harness_close(&h);
    assert_nvme_root_empty();
}

/* A GPU budget below the plan is an OOM with the budget's record, not a crash; the plan
 * itself fits. */
static void test_oom(void **state)
{
    (void)state;
    engine_config c = small_config(4);
    engine_plan p;
    engine_zero_infinity.plan(&c, &p);
    engine_harness h;
    assert_int_equal(harness_open(&h, &engine_zero_infinity, &c, p.gpu_bytes - 1), GPT_ERR_OOM);
    assert_true(h.gpu.budget.oom);
    assert_true(h.gpu.budget.oom_bytes > 0);
    harness_close(&h);
    assert_int_equal(harness_open(&h, &engine_zero_infinity, &c, p.gpu_bytes), 0);
    harness_close(&h);
}

static void test_takes_bf16(void **state)
{
    (void)state;
    engine_config c = small_config(2);
    char err[256] = "";
    c.bf16 = 1; /* bf16, on disk and with micro-batches too */
    assert_int_equal(engine_config_refused(&engine_zero_infinity, &c, err, sizeof err), 0);
    c.offload = OFFLOAD_NVME;
    c.micro_batches = 2;
    assert_int_equal(engine_config_refused(&engine_zero_infinity, &c, err, sizeof err), 0);
    c = small_config(2);
    assert_int_equal(engine_config_refused(&engine_zero_infinity, &c, err, sizeof err), 0);
    assert_int_equal(engine_zero_infinity.uses_window, 0);
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    if (slash) snprintf(nvme_root, sizeof nvme_root, "%.*s/zi-disk-tmp", (int)(slash - argv[0]), argv[0]);
    else snprintf(nvme_root, sizeof nvme_root, "zi-disk-tmp");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_equals_baseline),
        cmocka_unit_test(test_many_layers_equals_baseline),
        cmocka_unit_test(test_nvme_equals_baseline),
        cmocka_unit_test(test_memory_and_bytes),
        cmocka_unit_test(test_nvme_memory_and_bytes),
        cmocka_unit_test(test_nvme_disk_oom),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_takes_bf16),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (rmdir(nvme_root) != 0 && errno != ENOENT) failed++; /* something was left behind */
    return failed;
}
