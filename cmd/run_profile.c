/*
 * run_profile.c — beside a run's steps (run_state.h): --profile's table, op family by family,
 * and rank 0's GPU clock and power, each in the log, on stdout and in the JSON.
 */
#include "run_state.h"

#include <stdio.h>
#include <string.h>

/* The GPU clock's sampling period: 20 samples a second, a few microseconds of NVML each. */
enum { RUN_CLOCK_PERIOD_MS = 50 };

/* ---- --profile: where a step goes, op family by family (kernels/profile.h) -------------------- */

/* The mean step (ms) over the steps the profile counts (those after the first). */
static double profiled_step_ms(const run_state *s)
{
    const int n = s->done - s->first, skip = n > 1;
    double sum = 0;
    for (int i = s->first + skip; i < s->done; i++) sum += s->iters[i].ms;
    return n - skip > 0 ? sum / (n - skip) : 0;
}

/* Each op family that ran, in the table's order (the most time first), into rows; how many. */
static int profile_rows(const run_state *s, gpt_profile_family rows[PROF_OPS])
{
    int n = 0;
    for (int f = 0; f < PROF_OPS; f++) {
        gpt_profile_family_of(s->prof, (gpt_profile_op)f, &rows[n]);
        if (rows[n].calls > 0) n++;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rows[j].ms > rows[j - 1].ms; j--) {
            const gpt_profile_family t = rows[j];
            rows[j] = rows[j - 1], rows[j - 1] = t;
        }
    return n;
}

/* The table, into the log (every rank's own) and, on rank 0, stdout. */
void run_report_profile(run_state *s)
{
    if (!s->prof || s->done <= s->first) return;
    gpt_profile_family rows[PROF_OPS];
    const int n = profile_rows(s, rows), steps = gpt_profile_steps(s->prof);
    const double step = profiled_step_ms(s);
    double ops = 0;
    for (int i = 0; i < n; i++) ops += rows[i].ms;
    ops /= steps > 0 ? steps : 1;
    run_logline(s, "profile | %d step%s | step %.2f ms | ops' device time %.2f ms/step (every stream) | untimed ops: %lld",
                steps, steps == 1 ? "" : "s", step, ops, gpt_profile_untimed(s->prof));
    if (s->rank == 0)
        printf("  profile (%d step%s, %.2f ms each; ops' device time on every stream %.2f ms):\n"
               "    %-28s %10s %10s %8s %10s %8s\n", steps, steps == 1 ? "" : "s", step, ops, "op", "calls/step",
               "ms/step", "of step", "TFLOP/s", "GB/s");
    for (int i = 0; i < n; i++) {
        const gpt_profile_family *r = &rows[i];
        const double per = r->ms / steps, tflops = r->ms > 0 && r->flops > 0 ? r->flops / (r->ms * 1e-3) / 1e12 : 0,
                     gbps = r->ms > 0 && r->bytes > 0 ? r->bytes / (r->ms * 1e-3) / 1e9 : 0;
        run_logline(s, "profile op | %s | calls/step: %.1f | ms/step: %.3f | of step: %.1f%% | TFLOP/s: %.2f | GB/s: %.2f",
                    r->name, (double)r->calls / steps, per, step > 0 ? 100 * per / step : 0, tflops, gbps);
        if (s->rank == 0)
            printf("    %-28s %10.1f %10.3f %7.1f%% %10.2f %8.2f\n", r->name, (double)r->calls / steps, per,
                   step > 0 ? 100 * per / step : 0, tflops, gbps);
    }
    /* each stream: its ops' time and the gaps between them (launches, waits) */
    for (int k = 0; k < gpt_profile_nstreams(s->prof); k++) {
        gpt_profile_stream st;
        gpt_profile_stream_of(s->prof, k, &st);
        if (st.ops == 0) continue;
        const double busy = st.busy_ms / steps, span = st.span_ms / steps;
        run_logline(s, "profile stream | %d | ops/step: %.1f | busy ms/step: %.3f | gaps ms/step: %.3f | span ms/step: %.3f",
                    k + 1, (double)st.ops / steps, busy, span - busy, span);
        if (s->rank == 0)
            printf("    stream %d: %.1f ops/step, busy %.3f ms, gaps %.3f ms between them (span %.3f ms)\n", k + 1,
                   (double)st.ops / steps, busy, span - busy, span);
    }
}

void run_json_profile(cJSON *root, const run_state *s)
{
    if (!s->prof || s->done <= s->first) return;
    gpt_profile_family rows[PROF_OPS];
    const int n = profile_rows(s, rows), steps = gpt_profile_steps(s->prof);
    cJSON *p = cJSON_AddObjectToObject(root, "profile");
    cJSON_AddNumberToObject(p, "steps", steps);
    cJSON_AddNumberToObject(p, "step_ms", profiled_step_ms(s));
    cJSON_AddNumberToObject(p, "untimed_ops", (double)gpt_profile_untimed(s->prof));
    cJSON *ops = cJSON_AddArrayToObject(p, "ops");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", rows[i].name);
        cJSON_AddNumberToObject(o, "calls_per_step", (double)rows[i].calls / steps);
        cJSON_AddNumberToObject(o, "ms_per_step", rows[i].ms / steps);
        cJSON_AddNumberToObject(o, "flops_per_step", rows[i].flops / steps);
        cJSON_AddNumberToObject(o, "bytes_per_step", rows[i].bytes / steps);
        cJSON_AddItemToArray(ops, o);
    }
    cJSON *streams = cJSON_AddArrayToObject(p, "streams");
    for (int k = 0; k < gpt_profile_nstreams(s->prof); k++) {
        gpt_profile_stream st;
        gpt_profile_stream_of(s->prof, k, &st);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "stream", k + 1);
        cJSON_AddNumberToObject(o, "ops_per_step", (double)st.ops / steps);
        cJSON_AddNumberToObject(o, "busy_ms_per_step", st.busy_ms / steps);
        cJSON_AddNumberToObject(o, "gaps_ms_per_step", (st.span_ms - st.busy_ms) / steps);
        cJSON_AddItemToArray(streams, o);
    }
}

/* ---- the GPU's clock and power beside the steps (engines/runtime/gpu_clock.h) ------------------- */

/* Rank 0 of a CUDA run samples its GPU through NVML; elsewhere, or without NVML, the log says
 * why not. */
void run_open_gpu_clock(run_state *s, gpt_backend *be)
{
    if (s->rank != 0 || strcmp(be->name, "cuda") != 0) return;
    char bus[64];
    if (gpt_cuda_backend_pci_bus_id(be, bus, (int)sizeof bus) != GPT_OK) {
        snprintf(s->clock_why, sizeof s->clock_why, "the GPU's PCI bus id is unknown");
        return;
    }
    if (gpu_clock_open_nvml(&s->clock, "libnvidia-ml.so.1", bus, RUN_CLOCK_PERIOD_MS, s->clock_why,
                            sizeof s->clock_why) != 0)
        s->clock = NULL;
}

void run_report_gpu_clock(run_state *s)
{
    if (s->clock == NULL) {
        if (s->clock_why[0]) run_logline(s, "gpu clock | not sampled: %s", s->clock_why);
        return;
    }
    gpu_clock_summary c;
    gpu_clock_summarize(s->clock, &c);
    if (c.busy == 0) {
        run_logline(s, "gpu clock | no busy samples (%d samples, %d failed reads: too few iterations?)", c.samples,
                    c.read_errors);
        return;
    }
    run_logline(s, "gpu clock | iterations %d-%d, every %d ms: %d samples, %d busy | SM MHz median %u, min %u, max %u "
                "(highest allowed %u) | power W median %.0f of %.0f (limit) | of the busy samples: power cap %.0f%%, "
                "thermal slowdown %.0f%%, hardware slowdown %.0f%%",
                s->first + 2, s->done, c.period_ms, c.samples, c.busy, c.sm_mhz_median, c.sm_mhz_min, c.sm_mhz_max,
                c.sm_mhz_allowed, c.power_w_median, c.power_limit_w, 100 * c.power_cap_share, 100 * c.thermal_share,
                100 * c.hw_slowdown_share);
    printf("  gpu clock: SM %u MHz median (highest allowed %u) | power %.0f W of %.0f | power-capped %.0f%% of the "
           "busy samples\n", c.sm_mhz_median, c.sm_mhz_allowed, c.power_w_median, c.power_limit_w,
           100 * c.power_cap_share);
}

void run_json_gpu_clock(cJSON *root, const run_state *s)
{
    if (s->clock == NULL && !s->clock_why[0]) return; /* (not a CUDA run) */
    if (s->clock != NULL && !s->clock_done) return;   /* (a record written while the steps run) */
    cJSON *o = cJSON_AddObjectToObject(root, "gpu_clock");
    if (o == NULL) return;
    if (s->clock == NULL) {
        cJSON_AddBoolToObject(o, "sampled", 0);
        cJSON_AddStringToObject(o, "why", s->clock_why);
        return;
    }
    gpu_clock_summary c;
    gpu_clock_summarize(s->clock, &c);
    cJSON_AddBoolToObject(o, "sampled", c.busy > 0);
    const struct {
        const char *key;
        double value;
    } fields[] = {
        {"period_ms", c.period_ms},           {"samples", c.samples},
        {"busy_samples", c.busy},             {"failed_reads", c.read_errors},
        {"sm_mhz_median", c.sm_mhz_median},   {"sm_mhz_min", c.sm_mhz_min},
        {"sm_mhz_max", c.sm_mhz_max},         {"sm_mhz_allowed", c.sm_mhz_allowed},
        {"power_w_median", c.power_w_median}, {"power_limit_w", c.power_limit_w},
        {"power_cap_share", c.power_cap_share}, {"thermal_share", c.thermal_share},
        {"hw_slowdown_share", c.hw_slowdown_share},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cJSON_AddNumberToObject(o, fields[i].key, fields[i].value);
}
