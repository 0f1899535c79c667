#include "offload_streams.h"

#include "timer.h"

#include <stdlib.h>
#include <string.h>

int offload_streams_open(offload_streams *o, gpt_backend *be, const engine_config *cfg, int spans_per_micro_batch)
{
    memset(o, 0, sizeof *o);
    o->be = be;
    int rc;
    if ((rc = be->ops->stream_create(be, &o->compute)) ||
        (rc = be->ops->stream_create(be, &o->h2d)) ||
        (rc = be->ops->stream_create(be, &o->d2h)) ||
        (rc = cpu_adam_create(&o->host_adam, cfg->threads)) ||
        (rc = spans_init(&o->spans, be, engine_micro_batches(cfg) * spans_per_micro_batch)))
        return rc;
    return GPT_OK;
}

void offload_streams_close(offload_streams *o)
{
    if (o->host_adam) cpu_adam_destroy(o->host_adam); /* waits for its queued jobs */
    o->host_adam = NULL;
    gpt_stream *streams[] = {o->compute, o->h2d, o->d2h};
    /* Queued work may still use the engine's buffers (after a failed step): drain first. */
    for (int i = 0; i < 3; i++)
        if (streams[i]) (void)gpt_stream_sync(streams[i]);
    spans_free(&o->spans);
    for (int i = 0; i < 3; i++)
        if (streams[i]) o->be->ops->stream_destroy(streams[i]);
    o->compute = o->h2d = o->d2h = NULL;
}

int offload_streams_begin_step(offload_streams *o, step_result *out, int32_t *ids,
                               const int32_t *tokens, const int32_t *targets, size_t N)
{
    out->bytes_h2d = out->bytes_d2h = out->host_adam_params = 0;
    out->bytes_disk_read = out->bytes_disk_write = 0;
    int rc;
    if ((rc = spans_reset(&o->spans)) || (rc = gpt_memcpy_h2d(o->compute, ids, tokens, N * sizeof(int32_t))) ||
        (rc = gpt_memcpy_h2d(o->compute, ids + N, targets, N * sizeof(int32_t))))
        return rc;
    return GPT_OK;
}

int offload_streams_end_step(offload_streams *o, step_result *out, const double phases[3])
{
    int rc = offload_streams_sync(o);
    if (rc) return rc;
    out->ms_forward = phases[1] - phases[0];
    out->ms_backward = phases[2] - phases[1];
    out->ms_optimizer = wall_ms() - phases[2];
    return offload_streams_busy(o, out);
}

int event_array_create(const gpt_backend *be, gpt_event ***out, int n)
{
    *out = calloc((size_t)(n > 0 ? n : 1), sizeof **out);
    if (!*out) return GPT_ERR_OOM;
    for (int i = 0; i < n; i++) {
        int rc = gpt_event_create(be, &(*out)[i]);
        if (rc) return rc;
    }
    return GPT_OK;
}

void event_array_destroy(gpt_event **ev, int n)
{
    if (!ev) return;
    for (int i = 0; i < n; i++) gpt_event_destroy(ev[i]);
    free(ev);
}

int offload_streams_sync(offload_streams *o)
{
    int rc;
    if ((rc = gpt_stream_sync(o->compute)) || (rc = gpt_stream_sync(o->d2h)) ||
        (rc = gpt_stream_sync(o->h2d)))
        return rc;
    return GPT_OK;
}

int offload_streams_busy(offload_streams *o, step_result *out)
{
    for (int k = 0; k < BUSY_KINDS; k++) out->busy_ms[k] = 0;
    int rc = spans_sum(&o->spans, out->busy_ms, BUSY_KINDS);
    if (rc) return rc;
    out->busy_ms[BUSY_HOST_ADAM] = cpu_adam_take_busy_ms(o->host_adam);
    /* A step with more spans than were made room for counted only some: no busy times rather
     * than wrong ones (the bound printed from them would be too low). */
    out->has_busy = o->spans.overflow == 0;
    return GPT_OK;
}
