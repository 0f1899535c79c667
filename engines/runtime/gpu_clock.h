/*
 * gpu_clock.h — the GPU's SM clock, power and clock-event reasons, sampled beside the timed
 * steps, so that a run's time says what the GPU was allowed to run at.
 *
 * Why: on an H100 (700 W) a bf16 l32 step holds the GPU at its power limit, and the SM clock
 * falls from 1980 to about 1710 MHz while it runs (bench/results/2026-11-27e-h100-batch).  The
 * same binary on a card with another limit, cooling or clock setting runs at another pace.
 * Without this line two runs' times cannot be compared across machines.
 *
 * A thread of its own reads the source every period_ms, from gpu_clock_start to
 * gpu_clock_stop (which ends its wait at once).  It takes one sample at start even if stopped
 * at once.  It keeps histograms,
 * not the samples, so a run of any length costs the same 24 KiB.  The clock and power
 * statistics are over the busy samples: those whose reasons lack "GPU idle" (an offload
 * engine's GPU waits for the host, and an idle GPU reads its highest clock).  The source is
 * NVML, loaded with dlopen: a machine without the driver (the CPU backend, CI) runs without it
 * and says why.  Tests give a source of their own (gpu_clock_open_source).
 */
#ifndef AEBENCH_GPU_CLOCK_H
#define AEBENCH_GPU_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* NVML's clock-event reason bits (nvmlClocksEventReasons), the ones the summary counts */
enum {
    GPU_CLOCK_IDLE = 0x1,
    GPU_CLOCK_SW_POWER_CAP = 0x4,
    GPU_CLOCK_HW_SLOWDOWN = 0x8,
    GPU_CLOCK_SW_THERMAL = 0x20,
    GPU_CLOCK_HW_THERMAL = 0x40,
    GPU_CLOCK_HW_POWER_BRAKE = 0x80,
};

enum { GPU_CLOCK_MAX_MHZ = 4096, GPU_CLOCK_MAX_W = 2048 };

typedef struct gpu_clock_sample {
    unsigned sm_mhz;
    double power_w;
    uint64_t reasons;
} gpu_clock_sample;

/* A sample into *out; 0 on success.  Called from the sampling thread only. */
typedef int (*gpu_clock_read_fn)(void *ctx, gpu_clock_sample *out);

typedef struct gpu_clock_summary {
    int samples, busy;         /* all, and those without the idle reason */
    int read_errors;           /* reads that failed (not counted as samples) */
    int period_ms;
    unsigned sm_mhz_median, sm_mhz_min, sm_mhz_max; /* busy samples; 0 when none */
    unsigned sm_mhz_allowed;   /* the clock's maximum (0: unknown) */
    double power_w_median;     /* busy samples, to 1 W */
    double power_limit_w;      /* the enforced limit (0: unknown) */
    double power_cap_share;    /* of the busy samples: the software power cap among the reasons */
    double thermal_share;      /* software or hardware thermal slowdown */
    double hw_slowdown_share;  /* hardware slowdown or power brake */
} gpu_clock_summary;

typedef struct gpu_clock gpu_clock;

/* Through NVML (lib, e.g. "libnvidia-ml.so.1"), the device at pci_bus_id (as CUDA gives it).
 * 0 on success; else -1 and why says what was missing. */
int gpu_clock_open_nvml(gpu_clock **out, const char *lib, const char *pci_bus_id, int period_ms,
                        char *why, size_t why_len);
/* Through the given source; allowed_mhz and limit_w as the summary reports them. */
int gpu_clock_open_source(gpu_clock **out, gpu_clock_read_fn read, void *ctx, int period_ms,
                          unsigned allowed_mhz, double limit_w);
/* Sampling on (0 on success; starting twice is an error) and off (joins the thread). */
int gpu_clock_start(gpu_clock *g);
void gpu_clock_stop(gpu_clock *g);
/* What was sampled so far (after gpu_clock_stop: all of it). */
void gpu_clock_summarize(const gpu_clock *g, gpu_clock_summary *out);
void gpu_clock_close(gpu_clock *g);

#endif
