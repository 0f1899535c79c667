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

#endif
