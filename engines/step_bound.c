/* step_bound.c — the shapes of a step's lower bound (step_bound.h). */
#include "step_bound.h"

#include <stdio.h>

double step_bound_roofline_ms(const double busy[BUSY_KINDS])
{
    double b = 0;
    for (int k = 0; k < BUSY_KINDS; k++)
        if (busy[k] > b) b = busy[k];
    return b;
}

void step_bound_schedule(const engine_config *cfg, const double busy[BUSY_KINDS], int one_slot,
                         int adam_waits_for_norm, engine_bound *out)
{
    const double roof = step_bound_roofline_ms(busy), compute = busy[BUSY_COMPUTE];
    const int clipped = adam_waits_for_norm && cfg->optim.clip > 0;
    out->roofline_ms = roof;
    out->waits_for_norm = clipped;
    out->own_schedule = one_slot || clipped;
    if (!out->own_schedule) {
        out->ms = roof;
        out->name = "roofline";
        snprintf(out->why, sizeof out->why, "roofline: every resource busy at once");
        return;
    }
    const double L = cfg->shape.layers > 0 ? cfg->shape.layers : 1;
    const double copies = one_slot ? busy[BUSY_H2D] * (1 - 1 / (2 * L)) : 0;
    double b = compute + copies;
    if (clipped) {
        /* (the forward: a quarter of the compute with a full recompute, a third without;
         * selective's recompute is small beside a layer) */
        const double fwd_share = cfg->recompute == GPT_RECOMPUTE_FULL ? 4.0 : 3.0;
        const double forward = compute / fwd_share + copies / 2, uncovered = busy[BUSY_HOST_ADAM] - forward;
        b += uncovered > 0 ? uncovered : 0;
    }
    out->ms = b > roof ? b : roof;
    out->name = clipped ? "clipped schedule" : "one slot";
    const char *slot_why = "one slot: each layer's copy in, then its compute";
    if (clipped)
        snprintf(out->why, sizeof out->why, "the clipped schedule: the host Adam waits for the norm%s%s",
                 one_slot ? ", " : "", one_slot ? slot_why : "");
    else
        snprintf(out->why, sizeof out->why, "%s", slot_why);
}

void step_bound_of(const engine_vtbl *eng, const engine_config *cfg, const double busy[BUSY_KINDS],
                   engine_bound *out)
{
    if (eng->bound) eng->bound(cfg, busy, out);
    else step_bound_schedule(cfg, busy, 0, 0, out);
}
