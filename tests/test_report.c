/*
 * test_report.c — the log lines are the artifact's, character for character; sizes and
 * Python-style floats are formatted as the artifact's parsers expect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../cmd/report.h"
#include "../engines/runtime/membudget.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#include <stdio.h>
#include <string.h>

static void test_pyfloat_matches_python_repr(void **state)
{
    (void)state;
    /* Pairs of (value, what Python 3's repr prints). */
    static const struct { double v; const char *repr; } cases[] = {
        {6.618663311004639, "6.618663311004639"},
        {0.6043516359790244, "0.6043516359790244"},
        {28904.0, "28904.0"},
        {19087.3203125, "19087.3203125"},
        {100.0, "100.0"},
        {0.1, "0.1"},
        {1e-05, "1e-05"},
        {0.0001, "0.0001"},
        {1e16, "1e+16"},
        {1234567890123456.0, "1234567890123456.0"},
        {0.0, "0.0"},
        {2.5e-07, "2.5e-07"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fmt_pyfloat(buf, sizeof buf, cases[i].v);
        assert_string_equal(buf, cases[i].repr);
    }
}

static void test_iteration_line_is_megatrons(void **state)
{
    (void)state;
    char buf[1024];
    /* the lr as the schedule computes it (1.5e-4 * 10 / 3200 lies just below 4.6875e-07) */
    fmt_iteration_line(buf, sizeof buf, 10, 50, 6618.7, 1.5e-4 * 10 / 3200, 4, 11.06684, 1089.76, 0, 0);
    assert_string_equal(
        buf,
        " iteration       10/      50 | elapsed time per iteration (ms): 6618.7 | learning rate: "
        "4.687E-07 | global batch size:     4 | lm loss: 1.106684E+01 | loss scale: 1.0 | grad "
        "norm: 1089.760 | number of skipped iterations:   0 | number of nan iterations:   0 |");
}

static void test_artifact_lines(void **state)
{
    (void)state;
    char buf[1024];
    fmt_params_line(buf, sizeof buf, 1716588544ULL);
    assert_string_equal(buf, " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1716588544");
    fmt_tflops_line(buf, sizeof buf, effective_tflops(1716588544ULL, 4, 1024, 6.618663311004639),
                    1716588544ULL);
    assert_string_equal(buf, "Effective Tera Flops per GPU: 8.5 and total parameters 1.717 B");
    fmt_throughput_line(buf, sizeof buf, 1, 4, 6.618663311004639, 4 / 6.618663311004639);
    assert_string_equal(buf, "NumWorkers: 1; SamplesPerStep: 4; IterationTime: 6.618663311004639;  "
                             "SamplesPerSecond: 0.6043516359790244");
    const double MB = 1048576.0;
    fmt_memory_line(buf, sizeof buf, 0, 10, 19087.3203125 * MB, 23593.408203125 * MB, 28904.0 * MB,
                    28904.0 * MB);
    assert_string_equal(buf, "[Rank 0] (after 10 iterations) memory (MB) | allocated: 19087.3203125 | "
                             "max allocated: 23593.408203125 | reserved: 28904.0 | max reserved: 28904.0");
    const char *const names[] = {"e2e-time", "forward-compute", "backward-compute", "optimizer"};
    const double values[] = {6618.734, 857.241, 5750.48, 2.49};
    fmt_timers_line(buf, sizeof buf, 4, names, values);
    assert_string_equal(buf, "time (ms) | e2e-time: 6618.73 | forward-compute: 857.24 | "
                             "backward-compute: 5750.48 | optimizer: 2.49");
}

static void test_sizes(void **state)
{
    (void)state;
    size_t b = 0;
    assert_int_equal(parse_bytes("32G", &b), 0);
    assert_true(b == 32ULL << 30);
    assert_int_equal(parse_bytes("90GiB", &b), 0);
    assert_true(b == 90ULL << 30);
    assert_int_equal(parse_bytes("512M", &b), 0);
    assert_true(b == 512ULL << 20);
    assert_int_equal(parse_bytes("1.5K", &b), 0);
    assert_true(b == 1536);
    assert_int_equal(parse_bytes("1048576", &b), 0);
    assert_true(b == 1048576);
    assert_int_equal(parse_bytes("12GB", &b), 0);
    assert_true(b == 12ULL << 30);
    assert_int_equal(parse_bytes("0", &b), -1);
    assert_int_equal(parse_bytes("-3G", &b), -1);
    assert_int_equal(parse_bytes("lots", &b), -1);
    assert_int_equal(parse_bytes("3X", &b), -1);
    assert_int_equal(parse_bytes("3Gx", &b), -1);
    assert_int_equal(parse_bytes("", &b), -1);
    char buf[32];
    format_bytes(1536.0 * 1024 * 1024, buf, sizeof buf);
    assert_string_equal(buf, "1.50 GiB");
    format_bytes(512, buf, sizeof buf);
    assert_string_equal(buf, "512 B");
}

static void test_budget_records_first_oom(void **state)
{
    (void)state;
    mem_budget b;
    mem_budget_init(&b, "GPU", 1000);
    assert_int_equal(mem_budget_take(&b, 600, "parameters"), 0);
    assert_int_equal(mem_budget_take(&b, 500, "gradients"), GPT_ERR_OOM);
    assert_int_equal(mem_budget_take(&b, 900, "Adam m"), GPT_ERR_OOM);
    assert_true(b.oom && b.oom_bytes == 500 && b.oom_in_use == 600);
    assert_string_equal(b.oom_what, "gradients");
    assert_true(b.in_use == 600 && b.peak == 600);
    char msg[256];
    mem_budget_oom_message(&b, msg, sizeof msg);
    assert_non_null(strstr(msg, "out of GPU memory"));
    assert_non_null(strstr(msg, "gradients"));
    assert_non_null(strstr(msg, "short by 100 B"));
    mem_budget_give(&b, 600);
    assert_true(b.in_use == 0 && b.peak == 600);
}

/* The JSON files' numbers read back to the same doubles: one that cJSON's 15 digits miss by
 * an ulp (a search's samples/s once: 4000 / 11.756730419160533), a run of random doubles of
 * every magnitude, the short forms kept short, and a NaN as null. */
static void test_json_numbers_read_back_exactly(void **state)
{
    (void)state;
    enum { N = 2000 };
    double v[N];
    v[0] = 4000.0 / 11.756730419160533;
    v[1] = 0.1, v[2] = 3, v[3] = -0.0, v[4] = 1e300, v[5] = 5e-324, v[6] = 123456789012345678.0;
    uint64_t x = 88172645463325252ull;
    for (int i = 7; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        v[i] = isfinite(d) ? d : (double)(x >> 11) / 9007199254740992.0;
    }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "v");
    for (int i = 0; i < N; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
    cJSON_AddNumberToObject(root, "nan", NAN);
    char *text = report_json_text(root);
    assert_non_null(text);
    /* the tree itself is untouched (still numbers) */
    assert_true(cJSON_IsNumber(cJSON_GetArrayItem(arr, 0)));
    cJSON *back = cJSON_Parse(text);
    assert_non_null(back);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(back, "v");
    assert_int_equal(cJSON_GetArraySize(b), N);
    for (int i = 0; i < N; i++) {
        const double got = cJSON_GetArrayItem(b, i)->valuedouble;
        if (memcmp(&got, &v[i], sizeof got) != 0 && !(got == 0 && v[i] == 0))
            fail_msg("%.17g came back as %.17g", v[i], got);
    }
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(back, "nan")));
    assert_non_null(strstr(text, "0.1,"));
    assert_non_null(strstr(text, "340.23064724534294"));
    cJSON_Delete(back);
    cJSON_free(text);
    cJSON_Delete(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pyfloat_matches_python_repr),
        cmocka_unit_test(test_iteration_line_is_megatrons),
        cmocka_unit_test(test_artifact_lines),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_budget_records_first_oom),
        cmocka_unit_test(test_json_numbers_read_back_exactly),
    };
    return cmocka_run_group_tests_name("report", tests, NULL, NULL);
}
