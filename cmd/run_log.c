/*
 * run_log.c — a run's log (run_state.h): the record's lock, its lines (set-up, each interval's
 * Megatron-format lines, a recovery's cost) and the summary on stdout, with the figures over
 * the steps that they and the JSON report.
 */
#include "run_state.h"

#include "../engines/step_bound.h"
#include "provenance.h"
#include "report.h"

#include "../engines/runtime/timer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A write of the run's record failed (a full disk): the run ends at once, saying which file
 * and why, rather than train on and leave a record with nothing in it. */
void run_record_failed(run_state *s, const char *path, int err)
{
    if (s->status != EXIT_RUN_OK) return;
    s->status = EXIT_RUN_ERROR;
    s->step_failed = 1; /* (the other ranks are ended with it: they would wait for this one) */
    snprintf(s->message, sizeof s->message, "%s writing %.400s", err == ENOSPC ? "disk full" : strerror(err), path);
}

/* record_lock, taken and given back (a failure is a bug: said, and the record written anyway) */
void run_record_lock(run_state *s)
{
    const int e = pthread_mutex_lock(&s->record_lock);
    if (e) fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
}
void run_record_unlock(run_state *s)
{
    const int e = pthread_mutex_unlock(&s->record_lock);
    if (e) fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
}

void run_logline(run_state *s, const char *fmt, ...)
{
    run_record_lock(s);
    if (s->log) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(s->log, fmt, ap);
        va_end(ap);
        if (fputc('\n', s->log) == EOF || ferror(s->log)) run_record_failed(s, s->log_path, errno ? errno : EIO);
    }
    run_record_unlock(s);
}

/* The part of the engine's set-up that none of the measured phases covers (its own work:
 * streams, events, copies to the GPU, the -w auto probe). */
double run_setup_rest_ms(const run_state *s)
{
    const double rest = s->setup_ms - s->host_at_setup.pinned_ms - s->gpu_at_setup.alloc_ms - s->host_at_setup.alloc_ms -
                        s->init_ms;
    return rest > 0 ? rest : 0;
}

/* Steps of this run whose norm the clip scaled (--clip-grad > 0; a skipped step is not
 * one): the clipped schedule is the one the offload engines run there. */
int run_clipped_steps(const run_state *s)
{
    int n = 0;
    for (int i = s->first; i < s->done; i++)
        n += !s->iters[i].r.skipped && gpt_clip_scale(&s->ec.optim, s->iters[i].r.grad_norm) != 1.0f;
    return n;
}

/* Steps of this run that updated blocks ahead of the norm (--clip-speculate), and of those
 * the ones redone because the norm clipped. */
void run_speculated_steps(const run_state *s, int *ahead, int *redone)
{
    *ahead = *redone = 0;
    for (int i = s->first; i < s->done; i++) {
        *ahead += s->iters[i].r.ahead_blocks > 0;
        *redone += s->iters[i].r.ahead_redone;
    }
}

/* Where the engine's set-up went: page-locking (and zeroing) host memory, the device and
 * other host allocations (host ones zeroed), initialising the parameters, and the rest. */
void run_report_setup(run_state *s)
{
    s->host_at_setup = s->host;
    s->gpu_at_setup = s->gpu.budget;
    const double pinned = s->host.pinned_ms, dev = s->gpu.budget.alloc_ms + s->host.alloc_ms;
    char pb[32], db[32], hb[32], line[512];
    format_bytes((double)s->host.pinned_bytes, pb, sizeof pb);
    format_bytes((double)s->gpu.budget.alloc_bytes, db, sizeof db);
    format_bytes((double)s->host.alloc_bytes, hb, sizeof hb);
    snprintf(line, sizeof line, "setup: pinned host %s in %.2f s | GPU %s and host %s allocated in %.2f s | "
                                "parameters initialised in %.2f s | the rest %.2f s | total %.2f s",
             pb, pinned / 1e3, db, hb, dev / 1e3, s->init_ms / 1e3, run_setup_rest_ms(s) / 1e3, s->setup_ms / 1e3);
    run_logline(s, "%s", line);
    /* (on stdout too: start-up is part of what a run costs) */
    if (s->rank == 0) {
        printf("  %s\n", line);
        fflush(stdout);
    }
}

void run_describe_shape(const engine_config *ec, char *buf, size_t len)
{
    const gpt_shape *sh = &ec->shape;
    snprintf(buf, len, "l%d h%d heads%d s%d b%d vocab%d", sh->layers, sh->hidden, sh->heads,
             sh->seq, sh->batch, sh->vocab);
}

/* The median of `what` over the iterations s->iters[lo..done), those that have it, and how
 * many did (*count, when not NULL). */
static double median_from(const run_state *s, int lo, int what, int *count)
{
    const int n = s->done - lo;
    if (count) *count = 0;
    if (n <= 0) return 0;
    double *v = malloc(sizeof(double) * (size_t)n);
    if (!v) return what == STEP_MS ? s->iters[s->done - 1].ms : 0;
    int m = 0;
    for (int i = lo; i < s->done; i++) {
        const iter_record *it = &s->iters[i];
        if (what == STEP_MS) v[m++] = it->ms;
        else if (what == STEP_EXPOSED_COMM) {
            if (it->r.has_comm) v[m++] = it->r.exposed_comm_ms;
        } else if (what >= STEP_BUSY) {
            if (it->r.has_busy) v[m++] = it->r.busy_ms[what - STEP_BUSY];
        } else if (it->r.has_busy) {
            engine_bound b;
            step_bound_of(s->eng, &s->ec, it->r.busy_ms, &b);
            v[m++] = what == STEP_ROOFLINE ? b.roofline_ms : b.ms;
        }
    }
    const double med = m ? median_of(v, m) : 0;
    free(v);
    if (count) *count = m;
    return med;
}

/* The median of `what` over the measured iterations, leaving out the first (it carries
 * one-time costs: first touch of memory, library warm-up) whenever there is more than one;
 * 0 when no step has it. */
double run_median_over_steps(const run_state *s, int what)
{
    return median_from(s, s->first + (s->done - s->first > 1), what, NULL);
}

double run_median_iteration_ms(const run_state *s) { return run_median_over_steps(s, STEP_MS); }

/* iteration i+1 is s->iters[i]; a resumed run has those from s->first on */
static int steady_lo(const run_state *s)
{
    const int from = engine_steady_from(s->eng, &s->ec);
    return from - 1 > s->first ? from - 1 : s->first;
}

double run_steady_median_over_steps(const run_state *s, int what)
{
    return median_from(s, steady_lo(s), what, NULL);
}

int run_steady_median_ms(const run_state *s, double *ms)
{
    int n = 0;
    *ms = median_from(s, steady_lo(s), STEP_MS, &n);
    if (n == 0) *ms = 0;
    return n;
}

/* The run so far, for the engine's report hooks (engine.h): its lines go to this run's log. */
static void report_line(void *ctx, const char *text) { run_logline(ctx, "%s", text); }
engine_report run_report_of(run_state *s)
{
    return (engine_report){.cfg = &s->ec, .iters = s->iters, .first = s->first, .done = s->done,
                           .line = report_line, .line_ctx = s};
}

/* The artifact's lines for the interval (first, last] of iterations. */
void run_log_interval(run_state *s, int first, int last, int *memory_reported)
{
    const engine_config *ec = &s->ec;
    const int n = last - first;
    double ms = 0, loss = 0, fwd = 0, bwd = 0, opt = 0;
    int skipped = 0, nans = 0;
    for (int i = first; i < last; i++) {
        const iter_record *r = &s->iters[i];
        ms += r->ms;
        loss += r->r.loss;
        fwd += r->r.ms_forward;
        bwd += r->r.ms_backward;
        opt += r->r.ms_optimizer;
        skipped += r->r.skipped;
        nans += !isfinite(r->r.loss) || !isfinite(r->r.grad_norm);
    }
    ms /= n, loss /= n, fwd /= n, bwd /= n, opt /= n;
    const iter_record *cur = &s->iters[last - 1];
    const int global_batch = run_global_batch(ec);
    char line[1024];
    fmt_iteration_line(line, sizeof line, last, s->run_cfg->iters, ms, cur->r.lr, global_batch, loss,
                       cur->r.grad_norm, skipped, nans);
    run_logline(s, "%s", line);
    fmt_tflops_line(line, sizeof line, effective_tflops(s->params / (uint64_t)engine_model_ranks(ec), run_rank_batch(ec), ec->shape.seq, ms * 1e-3),
                    s->params);
    run_logline(s, "%s", line);
    fmt_throughput_line(line, sizeof line, s->world, global_batch, ms * 1e-3, global_batch * 1000.0 / ms);
    run_logline(s, "%s", line);
    if (!*memory_reported) {
        /* As Megatron: once, after the first logged interval.  The arena keeps no cache,
         * so reserved equals allocated. */
        const mem_budget *g = &s->gpu.budget;
        /* One line per rank, as Megatron prints [Rank r]: rank 0 gathers them (every rank is
         * here at the same iteration). */
        double mine[2] = {(double)g->in_use, (double)g->peak};
        double *all = calloc((size_t)s->world * 2, sizeof *all);
        if (all && comm_all_gather(s->comm, mine, all, sizeof mine) == 0) {
            for (int r = 0; r < s->world; r++) {
                fmt_memory_line(line, sizeof line, r, last, all[2 * r], all[2 * r + 1], all[2 * r],
                                all[2 * r + 1]);
                run_logline(s, "%s", line);
            }
        } else {
            fmt_memory_line(line, sizeof line, s->rank, last, mine[0], mine[1], mine[0], mine[1]);
            run_logline(s, "%s", line);
        }
        free(all);
        *memory_reported = 1;
    }
    static const char *const names[] = {"e2e-time", "forward-compute", "backward-compute", "optimizer"};
    const double values[] = {ms, fwd, bwd, opt};
    fmt_timers_line(line, sizeof line, 4, names, values);
    run_logline(s, "%s", line);
    if (cur->r.has_busy) {
        /* The last iteration's busy time per stream and bytes moved: the bottleneck. */
        run_logline(s, "stream busy (ms) | compute: %.1f | h2d: %.1f | d2h: %.1f | host-adam: %.1f | "
                       "disk: %.1f | h2d GB: %.3f | d2h GB: %.3f | host-adam M params: %.1f | "
                       "disk read GB: %.3f | disk write GB: %.3f",
                    cur->r.busy_ms[BUSY_COMPUTE], cur->r.busy_ms[BUSY_H2D], cur->r.busy_ms[BUSY_D2H],
                    cur->r.busy_ms[BUSY_HOST_ADAM], cur->r.busy_ms[BUSY_DISK], cur->r.bytes_h2d / 1e9,
                    cur->r.bytes_d2h / 1e9, cur->r.host_adam_params / 1e6, cur->r.bytes_disk_read / 1e9,
                    cur->r.bytes_disk_write / 1e9);
    }
    if (cur->r.has_busy) {
        engine_bound b;
        step_bound_of(s->eng, ec, cur->r.busy_ms, &b);
        if (b.own_schedule)
            run_logline(s, "bound (ms, last iteration) | roofline: %.1f | %s: %.1f | measured: %.1f", b.roofline_ms,
                        b.name, b.ms, cur->ms);
        else
            run_logline(s, "bound (ms, last iteration) | roofline: %.1f | measured: %.1f", b.roofline_ms, cur->ms);
    }
    if (cur->r.has_comm)
        run_logline(s, "collectives (rank 0, last iteration) | busy ms: %.1f | GB handed to them: %.3f",
                    cur->r.busy_ms[BUSY_COMM], cur->r.bytes_comm / 1e9);
    if (s->eng->report_interval) {
        const engine_report rep = run_report_of(s);
        s->eng->report_interval(&rep, last);
    }
    if (s->rank == 0) {
        printf("  iter %6d/%d | loss %.4f | grad norm %.3f | %.1f ms/it\n", last, s->run_cfg->iters,
               loss, cur->r.grad_norm, ms);
        fflush(stdout);
    }
}

void run_print_summary(run_state *s)
{
    if (s->rank != 0) return;
    char g[32], h[32];
    format_bytes((double)s->gpu.budget.peak, g, sizeof g);
    format_bytes((double)s->host.peak, h, sizeof h);
    if (s->status == EXIT_RUN_OK && s->done > s->first) {
        const double med = run_median_iteration_ms(s);
        const int global_batch = run_global_batch(&s->ec);
        printf("  done: median %.1f ms/it | %.2f samples/s | %.3f TFLOP/s (model) | peak GPU %s, "
               "host %s | loss %.4f -> %.4f\n",
               med, global_batch * 1000.0 / med,
               run_rank_model_flops(&s->ec) / (med * 1e-3) / 1e12,
               g, h, s->iters[s->first].r.loss, s->iters[s->done - 1].r.loss);
        if (s->ec.optim.clip > 0 && engine_takes_option(s->eng, "clip-speculate")) {
            int ahead = 0, redone = 0;
            run_speculated_steps(s, &ahead, &redone);
            printf("  clip-grad %g: %d of %d steps clipped; %d updated ahead of the norm, %d of them redone\n",
                   s->ec.optim.clip, run_clipped_steps(s), s->done - s->first, ahead, redone);
        } else if (s->ec.optim.clip > 0) {
            printf("  clip-grad %g: %d of %d steps clipped\n", s->ec.optim.clip, run_clipped_steps(s), s->done - s->first);
        }
        const double roof = run_median_over_steps(s, STEP_ROOFLINE);
        if (roof > 0) {
            const double sched = run_median_over_steps(s, STEP_SCHEDULE_BOUND);
            engine_bound last;
            step_bound_of(s->eng, &s->ec, s->iters[s->done - 1].r.busy_ms, &last);
            if (last.own_schedule)
                printf("  bound: %.1f ms/it (%s; roofline %.1f) | measured %.2fx of it\n", sched, last.why, roof,
                       med / sched);
            else
                printf("  bound: %.1f ms/it (%s) | measured %.2fx of it\n", sched, last.why, med / sched);
        }
    } else if (s->record_discarded) {
        /* (stdout names no file that is not there: the message, on stderr, names the one) */
        printf("  FAILED: the run's log and JSON could not be written in %s, and neither is kept (see stderr)\n",
               s->run_cfg->results_dir);
    } else if (s->status == EXIT_RUN_OK) {
        /* (a recovered job whose checkpoint is its last iteration: done before it started) */
        printf("  done: nothing left to train: iterations 1-%d were trained by the job this one recovers\n",
               s->first);
    } else {
        printf("  %s: %s\n", s->status == EXIT_RUN_OOM ? "OUT OF MEMORY" : "FAILED",
               s->message[0] ? s->message : "(no reason was recorded: a bug, please report it)");
    }
    if (s->has_log) printf("  log:  %s\n  json: %s\n", s->log_path, s->json_path);
    fflush(stdout);
}

/* A recovered job is back where the failed one was: say what the failure cost. */
void run_recovery_back(run_state *s)
{
    s->back_s = epoch_s();
    if (s->failed_s <= 0) return;
    const int redone = s->back_iteration - s->resume.iteration;
    run_logline(s, "recovery: back at iteration %d %.2f s after the failure | relaunch %.2f s | setup and restore "
                "%.2f s (restore %.2f s) | %d iteration%s redone in %.2f s", s->back_iteration,
                s->back_s - s->failed_s, s->train_start_s - s->failed_s, s->setup_ms / 1e3, s->resume.ms / 1e3,
                redone, redone == 1 ? "" : "s", s->back_s - s->train_start_s - s->setup_ms / 1e3);
}

/* The run's header: on stdout (rank 0) and in the log, the method, device, shape and plan. */
void run_log_header(run_state *s)
{
    const run_config *run_cfg = s->run_cfg;
    const engine_vtbl *eng = s->eng;
    char shape[128], line[512], g[32], h[32], d[32];
    run_describe_shape(&s->ec, shape, sizeof shape);
    format_bytes((double)s->plan.gpu_bytes, g, sizeof g);
    format_bytes((double)s->plan.host_bytes, h, sizeof h);
    format_bytes((double)s->plan.disk_bytes, d, sizeof d);
    if (s->rank == 0) {
        printf("aebench %s | %s | %s | %.6g M parameters | recompute %s%s\n", eng->name,
               s->device_desc, shape, (double)s->params / 1e6, gpt_recompute_name(s->ec.recompute),
               run_cfg->cpu_preset ? " | CPU preset" : "");
        printf("  plan%s: GPU %s | host %s | disk %s\n", s->world > 1 ? " per rank" : "", g, h, d);
        fflush(stdout);
    }
    run_logline(s, "aebench %s: method %s, %s, %s, window %s, dtype %s, recompute %s, data %s",
                AEBENCH_VERSION, eng->name, s->device_desc, shape, s->window, s->ec.bf16 ? "bf16" : "fp32",
                gpt_recompute_name(s->ec.recompute), run_cfg->data_path[0] ? run_cfg->data_path : "synthetic");
    fmt_params_line(line, sizeof line, s->params);
    run_logline(s, "%s", line);
    char gl[32], hl[32];
    format_bytes((double)s->gpu.budget.limit, gl, sizeof gl);
    format_bytes((double)s->host.limit, hl, sizeof hl);
    run_logline(s, "memory plan%s | GPU: %s of %s | host: %s of %s | disk: %s", s->world > 1 ? " per rank" : "",
                g, gl, h, hl, d);
    if (s->world > 1) {
        const int local = engine_local_world(&s->ec);
        char mh[32], md[32];
        format_bytes((double)local * (double)s->plan.host_bytes, mh, sizeof mh);
        format_bytes((double)local * (double)s->plan.disk_bytes, md, sizeof md);
        run_logline(s, "memory plan per machine (%d ranks) | host: %s | disk: %s", local, mh, md);
        if (s->rank == 0) printf("  plan per machine (%d ranks): host %s | disk %s\n", local, mh, md);
    }
    if (s->run_cfg->provenance) {
        /* how it was made: the build, the settings, the record it reruns (provenance.h) */
        char *made = provenance_log_lines(s->run_cfg->provenance);
        if (made) run_logline(s, "%s", made);
        free(made);
    }
}

/* The log's lines at the end of the run: the peaks beside the plan and the watchdog's margin,
 * or why the run failed. */
void run_log_end(run_state *s)
{
    const run_config *run_cfg = s->run_cfg;
    if (s->status == EXIT_RUN_OK) {
        char pg[32], ph[32], pd[32], g[32], h[32], d[32];
        format_bytes((double)s->gpu.budget.peak, pg, sizeof pg);
        format_bytes((double)s->host.peak, ph, sizeof ph);
        format_bytes((double)s->disk.peak, pd, sizeof pd);
        format_bytes((double)engine_plan_arena_gpu(&s->plan), g, sizeof g);
        format_bytes((double)s->plan.host_bytes, h, sizeof h);
        format_bytes((double)s->plan.disk_bytes, d, sizeof d);
        run_logline(s, "memory peak | GPU: %s (plan %s) | host: %s (plan %s) | disk: %s (plan %s)", pg, g,
                    ph, h, pd, d);
        if (s->plan.gpu_comm_bytes) {
            char cb[32];
            format_bytes((double)s->plan.gpu_comm_bytes, cb, sizeof cb);
            run_logline(s, "memory peak | the GPU plan keeps %s more for the communicators' own buffers (NCCL's, "
                           "outside the peak above)", cb);
        }
        if (s->plan.host_while_ahead) {
            char wa[32];
            format_bytes((double)s->plan.host_while_ahead, wa, sizeof wa);
            run_logline(s, "memory peak | of the host plan, %s held only while steps do not clip (--clip-speculate auto)", wa);
        }
        watchdog_margin wm;
        if (watchdog_get_margin(s->dog, &wm) == 0 && wm.closest_limit_s > 0)
            run_logline(s, "watchdog | limit at the end: %.0f s (%s) | closest call: %.1f s idle of %.0f s (%.0f%%), in "
                        "the %s of iteration %d", wm.limit_s, run_cfg->hang_timeout_s > 0 ? "fixed" : "auto", wm.closest_idle_s,
                        wm.closest_limit_s, 100 * wm.closest_idle_s / wm.closest_limit_s, wm.closest_phase,
                        wm.closest_iteration);
    } else {
        run_logline(s, "%s: %s", s->status == EXIT_RUN_OOM ? "OUT OF MEMORY" : "ERROR", s->message);
    }
}
