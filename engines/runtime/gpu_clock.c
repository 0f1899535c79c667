#include "gpu_clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NVML's C interface, the few entry points used here, declared by hand: the header comes with
 * the CUDA toolkit, and a build without it must still compile this file.  nvmlReturn_t is an
 * int-sized enum (0 = success), nvmlDevice_t an opaque pointer, NVML_CLOCK_SM = 1; powers are
 * in milliwatts. */
typedef struct nvml_device_st *nvml_device;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef const char *(*nvml_error_string_fn)(int);
typedef int (*nvml_by_pci_fn)(const char *, nvml_device *);
typedef int (*nvml_clock_fn)(nvml_device, int, unsigned *);
typedef int (*nvml_uint_fn)(nvml_device, unsigned *);
typedef int (*nvml_reasons_fn)(nvml_device, unsigned long long *);
enum { NVML_SUCCESS = 0, NVML_CLOCK_SM = 1 };

typedef struct nvml_source {
    void *lib;
    nvml_shutdown_fn shutdown;
    nvml_clock_fn clock;
    nvml_uint_fn power;
    nvml_reasons_fn reasons;
    nvml_device dev;
} nvml_source;

struct gpu_clock {
    gpu_clock_read_fn read;
    void *ctx;
    nvml_source *nvml; /* (owned: closed with the monitor) */
    pthread_t thread;
    int started;
    pthread_mutex_t lock; /* guards stopping; wake ends the thread's wait at once */
    pthread_cond_t wake;
    int stopping;
    /* the summary's counts, clock range and fixed fields (period, allowed clock, limit);
     * written by the sampling thread only, read after it is joined */
    gpu_clock_summary sum;
    int power_capped, thermal, hw_slowdown; /* busy samples with each reason */
    uint32_t mhz_hist[GPU_CLOCK_MAX_MHZ];
    uint32_t watt_hist[GPU_CLOCK_MAX_W];
};

static void take_sample(gpu_clock *g)
{
    gpu_clock_summary *c = &g->sum;
    gpu_clock_sample s = {0};
    if (g->read(g->ctx, &s) != 0) {
        c->read_errors++;
        return;
    }
    c->samples++;
    if (s.reasons & GPU_CLOCK_IDLE) return;
    c->busy++;
    const unsigned mhz = s.sm_mhz < GPU_CLOCK_MAX_MHZ ? s.sm_mhz : GPU_CLOCK_MAX_MHZ - 1;
    const double w = s.power_w < 0 ? 0 : s.power_w + 0.5;
    const unsigned watt = w < GPU_CLOCK_MAX_W ? (unsigned)w : GPU_CLOCK_MAX_W - 1;
    g->mhz_hist[mhz]++;
    g->watt_hist[watt]++;
    if (c->busy == 1 || mhz < c->sm_mhz_min) c->sm_mhz_min = mhz;
    if (mhz > c->sm_mhz_max) c->sm_mhz_max = mhz;
    if (s.reasons & GPU_CLOCK_SW_POWER_CAP) g->power_capped++;
    if (s.reasons & (GPU_CLOCK_SW_THERMAL | GPU_CLOCK_HW_THERMAL)) g->thermal++;
    if (s.reasons & (GPU_CLOCK_HW_SLOWDOWN | GPU_CLOCK_HW_POWER_BRAKE)) g->hw_slowdown++;
}

/* One sample, then one every period until stopped (so a start and an immediate stop still
 * leave one); a stop ends the wait at once. */
static void *sampling_thread(void *arg)
{
    gpu_clock *g = arg;
    for (;;) {
        take_sample(g);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += g->sum.period_ms / 1000;
        until.tv_nsec += (long)(g->sum.period_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&g->lock);
        /* 0: signalled or woken early, wait on; ETIMEDOUT (or an error, taken as one): sample */
        for (int w = 0; !g->stopping && w == 0;)
            w = pthread_cond_timedwait(&g->wake, &g->lock, &until);
        const int stop = g->stopping;
        pthread_mutex_unlock(&g->lock);
        if (stop) return NULL;
    }
}

int gpu_clock_open_source(gpu_clock **out, gpu_clock_read_fn read, void *ctx, int period_ms,
                          unsigned allowed_mhz, double limit_w)
{
    *out = NULL;
    if (read == NULL || period_ms < 1 || period_ms > 60000) return -1;
    gpu_clock *g = calloc(1, sizeof *g);
    if (g == NULL) return -1;
    g->read = read;
    g->ctx = ctx;
    g->sum.period_ms = period_ms;
    g->sum.sm_mhz_allowed = allowed_mhz;
    g->sum.power_limit_w = limit_w;
    pthread_condattr_t ca;
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        return -1;
    }
    /* the waits' deadlines on the monotonic clock: a change of the wall clock moves nothing */
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&g->wake, &ca) != 0) {
        pthread_mutex_destroy(&g->lock);
        free(g);
        return -1;
    }
    pthread_condattr_destroy(&ca);
    *out = g;
    return 0;
}

static int nvml_read(void *ctx, gpu_clock_sample *out)
{
    const nvml_source *n = ctx;
    unsigned mhz = 0, mw = 0;
    unsigned long long reasons = 0;
    if (n->clock(n->dev, NVML_CLOCK_SM, &mhz) != NVML_SUCCESS || n->power(n->dev, &mw) != NVML_SUCCESS ||
        n->reasons(n->dev, &reasons) != NVML_SUCCESS)
        return -1;
    out->sm_mhz = mhz;
    out->power_w = mw / 1000.0;
    out->reasons = reasons;
    return 0;
}

static void nvml_close(nvml_source *n)
{
    if (n == NULL) return;
    if (n->shutdown) (void)n->shutdown();
    if (n->lib) dlclose(n->lib);
    free(n);
}

int gpu_clock_open_nvml(gpu_clock **out, const char *lib, const char *pci_bus_id, int period_ms,
                        char *why, size_t why_len)
{
    *out = NULL;
    nvml_source *n = calloc(1, sizeof *n);
    if (n == NULL) {
        snprintf(why, why_len, "out of host memory");
        return -1;
    }
    n->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (n->lib == NULL) {
        const char *e = dlerror();
        snprintf(why, why_len, "no NVML (%s)", e ? e : lib);
        free(n);
        return -1;
    }
    nvml_init_fn init = (nvml_init_fn)dlsym(n->lib, "nvmlInit_v2");
    nvml_error_string_fn err = (nvml_error_string_fn)dlsym(n->lib, "nvmlErrorString");
    nvml_by_pci_fn by_pci = (nvml_by_pci_fn)dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml_clock_fn max_clock = (nvml_clock_fn)dlsym(n->lib, "nvmlDeviceGetMaxClockInfo");
    nvml_uint_fn limit = (nvml_uint_fn)dlsym(n->lib, "nvmlDeviceGetEnforcedPowerLimit");
    n->clock = (nvml_clock_fn)dlsym(n->lib, "nvmlDeviceGetClockInfo");
    n->power = (nvml_uint_fn)dlsym(n->lib, "nvmlDeviceGetPowerUsage");
    /* the name since driver 535; the older one has the same signature and bits */
    n->reasons = (nvml_reasons_fn)dlsym(n->lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (n->reasons == NULL)
        n->reasons = (nvml_reasons_fn)dlsym(n->lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!init || !by_pci || !max_clock || !limit || !n->clock || !n->power || !n->reasons) {
        snprintf(why, why_len, "%s lacks an entry point this needs", lib);
        nvml_close(n);
        return -1;
    }
    int rc = init();
    if (rc != NVML_SUCCESS) {
        snprintf(why, why_len, "nvmlInit: %s", err ? err(rc) : "failed");
        nvml_close(n);
        return -1;
    }
    n->shutdown = (nvml_shutdown_fn)dlsym(n->lib, "nvmlShutdown");
    rc = by_pci(pci_bus_id, &n->dev);
    if (rc != NVML_SUCCESS) {
        snprintf(why, why_len, "NVML has no device at %s: %s", pci_bus_id, err ? err(rc) : "failed");
        nvml_close(n);
        return -1;
    }
    unsigned allowed = 0, limit_mw = 0;
    if (max_clock(n->dev, NVML_CLOCK_SM, &allowed) != NVML_SUCCESS) allowed = 0;
    if (limit(n->dev, &limit_mw) != NVML_SUCCESS) limit_mw = 0;
    gpu_clock_sample probe;
    if (nvml_read(n, &probe) != 0) {
        snprintf(why, why_len, "NVML cannot read the clock, power or clock-event reasons of %s", pci_bus_id);
        nvml_close(n);
        return -1;
    }
    if (gpu_clock_open_source(out, nvml_read, n, period_ms, allowed, limit_mw / 1000.0) != 0) {
        snprintf(why, why_len, "out of host memory");
        nvml_close(n);
        return -1;
    }
    (*out)->nvml = n;
    return 0;
}

int gpu_clock_start(gpu_clock *g)
{
    if (g == NULL || g->started) return -1;
    g->stopping = 0;
    if (pthread_create(&g->thread, NULL, sampling_thread, g) != 0) return -1;
    g->started = 1;
    return 0;
}

void gpu_clock_stop(gpu_clock *g)
{
    if (g == NULL || !g->started) return;
    pthread_mutex_lock(&g->lock);
    g->stopping = 1;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    g->started = 0;
}

/* The value below which half of the histogram's count lies (the lower median). */
static unsigned hist_median(const uint32_t *h, int bins, int count)
{
    long seen = 0;
    for (int i = 0; i < bins; i++) {
        seen += h[i];
        if (2 * seen >= count) return (unsigned)i;
    }
    return 0;
}

void gpu_clock_summarize(const gpu_clock *g, gpu_clock_summary *out)
{
    memset(out, 0, sizeof *out);
    if (g == NULL || g->started) return; /* (only once the thread is joined) */
    *out = g->sum;
    const int busy = g->sum.busy;
    if (busy == 0) return;
    out->sm_mhz_median = hist_median(g->mhz_hist, GPU_CLOCK_MAX_MHZ, busy);
    out->power_w_median = hist_median(g->watt_hist, GPU_CLOCK_MAX_W, busy);
    out->power_cap_share = (double)g->power_capped / busy;
    out->thermal_share = (double)g->thermal / busy;
    out->hw_slowdown_share = (double)g->hw_slowdown / busy;
}

void gpu_clock_close(gpu_clock *g)
{
    if (g == NULL) return;
    gpu_clock_stop(g);
    nvml_close(g->nvml);
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}
