/*
 * bisect.h — the largest size for which a monotone test holds.
 *
 * --find-max's plan bound, --predict --find-max and --search --largest ask the same question
 * of a plan that grows with the layers (and --min-samples-per-s of a throughput that falls
 * with them): one search serves them, so their answers agree by construction.
 */
#ifndef AEBENCH_BISECT_H
#define AEBENCH_BISECT_H

/* The largest n in [first, cap] for which holds(n, ctx) is true, where it is true up to some
 * n and false beyond: doubling from first (clamped to cap), then bisection.  0 when
 * holds(first) is false or first > cap. */
static inline int bisect_largest(int first, int cap, int (*holds)(int n, void *ctx), void *ctx)
{
    if (first < 1 || first > cap || !holds(first, ctx)) return 0;
    int lo = first, hi; /* holds(lo); hi: the smallest known not to */
    for (;;) {
        if (lo == cap) return cap;
        const int next = lo > cap / 2 ? cap : lo * 2;
        if (!holds(next, ctx)) {
            hi = next;
            break;
        }
        lo = next;
    }
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (holds(mid, ctx)) lo = mid;
        else hi = mid;
    }
    return lo;
}

#endif
