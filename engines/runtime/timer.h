/* timer.h — wall-clock milliseconds from the monotonic clock. */
#ifndef AEBENCH_TIMER_H
#define AEBENCH_TIMER_H

#include <time.h>

static inline double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Seconds since the epoch (CLOCK_REALTIME): for times compared across processes (a rank's
 * failure against the relaunched job's progress), where the monotonic clock's origin differs. */
static inline double epoch_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
