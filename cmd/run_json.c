/*
 * run_json.c — a run's JSON record (run_state.h): the record so far ("running"), the final
 * one, or an interruption's, and what goes when it cannot be written.
 */
#include "run_state.h"

#include "../engines/step_bound.h"
#include "provenance.h"
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cJSON *json_budget(const mem_budget *b, uint64_t planned)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "limit_bytes", (double)b->limit);
    cJSON_AddNumberToObject(o, "planned_bytes", (double)planned);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)b->peak);
    /* How far the measured peak is from the plan: engines are held to 10%. */
    cJSON_AddNumberToObject(o, "peak_over_plan", planned ? (double)b->peak / (double)planned : 0);
    return o;
}

static int write_json_locked(run_state *s);

/* The JSON: the record so far ("running"), the final one, or an interruption's. */
int run_write_json(run_state *s)
{
    run_record_lock(s);
    const int status = write_json_locked(s);
    run_record_unlock(s);
    return status;
}

/* The JSON's "config": the run as it was asked for. */
static void json_config(cJSON *root, const run_state *s)
{
    const run_config *run_cfg = s->run_cfg;
    const engine_config *ec = &s->ec;
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "layers", ec->shape.layers);
    cJSON_AddNumberToObject(cfg, "hidden", ec->shape.hidden);
    cJSON_AddNumberToObject(cfg, "heads", ec->shape.heads);
    cJSON_AddNumberToObject(cfg, "seq", ec->shape.seq);
    cJSON_AddNumberToObject(cfg, "batch", ec->shape.batch);
    cJSON_AddNumberToObject(cfg, "global_batch", run_global_batch(ec));
    cJSON_AddNumberToObject(cfg, "zero_stage", ec->zero_stage);
    cJSON_AddNumberToObject(cfg, "vocab", ec->shape.vocab);
    cJSON_AddNumberToObject(cfg, "vocab_padded", ec->shape.vocab_padded);
    cJSON_AddStringToObject(cfg, "window", s->window);
    cJSON_AddNumberToObject(cfg, "iters", run_cfg->iters);
    cJSON_AddNumberToObject(cfg, "log_interval", run_cfg->log_interval);
    cJSON_AddNumberToObject(cfg, "seed", (double)ec->seed);
    report_json_recompute(cfg, ec->recompute);
    /* as asked: what the engine made of it is its note ("graphs: on ...", engine_notes) */
    cJSON_AddStringToObject(cfg, "graphs", ec->graphs == GRAPHS_ON ? "on" : ec->graphs == GRAPHS_OFF ? "off" : "auto");
    char fingerprint[24];
    snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)cli_fingerprint(run_cfg));
    cJSON_AddStringToObject(cfg, "fingerprint", fingerprint);
    if (s->ec.machine) cJSON_AddStringToObject(cfg, "machine_file", s->machine_path);
    cJSON_AddStringToObject(cfg, "dtype", ec->bf16 ? "bf16" : "fp32");
    cJSON_AddStringToObject(cfg, "math", ec->device == DEVICE_CPU ? "fp32" : ec->tf32 ? "tf32" : "fp32");
    cJSON_AddStringToObject(cfg, "backend", ec->device == DEVICE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(cfg, "data", run_cfg->data_path[0] ? run_cfg->data_path : "synthetic");
    cJSON_AddNumberToObject(cfg, "lr", ec->optim.lr);
    cJSON_AddNumberToObject(cfg, "min_lr", ec->optim.min_lr);
    cJSON_AddNumberToObject(cfg, "lr_decay_iters", ec->optim.decay_iters);
    cJSON_AddNumberToObject(cfg, "lr_warmup_fraction", ec->optim.warmup_fraction);
    cJSON_AddNumberToObject(cfg, "weight_decay", ec->optim.weight_decay);
    cJSON_AddNumberToObject(cfg, "clip_grad", ec->optim.clip);
    cJSON_AddNumberToObject(cfg, "clip_speculate", ec->clip_speculate);
    cJSON_AddStringToObject(cfg, "placement", ec->placement == PLACE_SPREAD ? "spread" : ec->placement == PLACE_BOTTOM ? "bottom" : "auto");
    cJSON_AddNumberToObject(cfg, "threads", ec->threads);
    cJSON_AddBoolToObject(cfg, "dpu", ec->dpu);
    cJSON_AddStringToObject(cfg, "offload", ec->offload == OFFLOAD_NVME ? "nvme" : "cpu");
    if (ec->offload == OFFLOAD_NVME) cJSON_AddStringToObject(cfg, "nvme_dir", ec->nvme_dir);
    cJSON_AddBoolToObject(cfg, "cpu_preset", run_cfg->cpu_preset);
    if (run_cfg->provenance) provenance_add_json(root, run_cfg->provenance);
}

/* The watchdog's margin (nothing without a watchdog: --hang-timeout 0). */
static void json_watchdog(cJSON *root, const run_state *s)
{
    const run_config *run_cfg = s->run_cfg;
    watchdog_margin wm;
    if (watchdog_get_margin(s->dog, &wm) == 0) {
        /* (this rank's: how near its watchdog came to a false alarm) */
        cJSON *wd = cJSON_AddObjectToObject(root, "watchdog");
        cJSON_AddStringToObject(wd, "hang_timeout", run_cfg->hang_timeout_s > 0 ? "fixed" : "auto");
        cJSON_AddNumberToObject(wd, "limit_s", wm.limit_s);
        cJSON_AddNumberToObject(wd, "closest_idle_s", wm.closest_idle_s);
        cJSON_AddNumberToObject(wd, "closest_limit_s", wm.closest_limit_s);
        cJSON_AddStringToObject(wd, "closest_phase", wm.closest_phase);
        cJSON_AddNumberToObject(wd, "closest_iteration", wm.closest_iteration);
    }
}

/* Each resource's busy time's key in the JSON (engine.h's BUSY_* order). */
static const char *const BUSY_JSON_KEYS[BUSY_KINDS] = {"compute", "h2d", "d2h", "host_adam", "disk", "collectives"};

/* The plan (and a machine's, of N ranks), the memory the budgets saw, and what ran out. */
static void json_memory(cJSON *root, const run_state *s)
{
    const engine_config *ec = &s->ec;
    cJSON *plan = cJSON_AddObjectToObject(root, "plan");
    cJSON_AddNumberToObject(plan, "gpu_bytes", (double)s->plan.gpu_bytes);
    /* (of gpu_bytes, the communicators' reserve: NCCL's own, not the arena's) */
    cJSON_AddNumberToObject(plan, "gpu_comm_bytes", (double)s->plan.gpu_comm_bytes);
    cJSON_AddNumberToObject(plan, "host_bytes", (double)s->plan.host_bytes);
    cJSON_AddNumberToObject(plan, "disk_bytes", (double)s->plan.disk_bytes);
    if (engine_world(ec) > 1) {
        /* (the plan above is one rank's; a machine's ranks share its host memory and disk) */
        const double local = engine_local_world(ec);
        cJSON *pm = cJSON_AddObjectToObject(plan, "per_machine");
        cJSON_AddNumberToObject(pm, "ranks", local);
        cJSON_AddNumberToObject(pm, "gpu_bytes", local * (double)s->plan.gpu_bytes);
        cJSON_AddNumberToObject(pm, "host_bytes", local * (double)s->plan.host_bytes);
        cJSON_AddNumberToObject(pm, "disk_bytes", local * (double)s->plan.disk_bytes);
    }
    cJSON *mem = cJSON_AddObjectToObject(root, "memory");
    if (s->per_rank) {
        cJSON *ranks = cJSON_AddArrayToObject(mem, "per_rank");
        for (int r = 0; r < s->world; r++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            cJSON_AddNumberToObject(o, "gpu_peak_bytes", s->per_rank[r].gpu_peak);
            cJSON_AddNumberToObject(o, "host_peak_bytes", s->per_rank[r].host_peak);
            cJSON_AddNumberToObject(o, "gpu_planned_bytes", s->per_rank[r].gpu_planned);
            cJSON_AddNumberToObject(o, "host_planned_bytes", s->per_rank[r].host_planned);
            cJSON_AddItemToArray(ranks, o);
        }
    }
    /* (the arena's peak against the arena's plan: engine_plan_arena_gpu) */
    cJSON_AddItemToObject(mem, "gpu", json_budget(&s->gpu.budget, engine_plan_arena_gpu(&s->plan)));
    cJSON *host = json_budget(&s->host, s->plan.host_bytes);
    cJSON_AddNumberToObject(host, "planned_while_ahead_bytes", (double)s->plan.host_while_ahead);
    cJSON_AddItemToObject(mem, "host", host);
    if (s->has_disk) cJSON_AddItemToObject(mem, "disk", json_budget(&s->disk, s->plan.disk_bytes));
    if (s->status == EXIT_RUN_OOM && s->oom_budget) {
        cJSON *oom = cJSON_AddObjectToObject(root, "oom");
        cJSON_AddStringToObject(oom, "memory", s->oom_device);
        cJSON_AddStringToObject(oom, "allocating", s->oom_budget->oom_what);
        cJSON_AddNumberToObject(oom, "requested_bytes", (double)s->oom_budget->oom_bytes);
        cJSON_AddNumberToObject(oom, "in_use_bytes", (double)s->oom_budget->oom_in_use);
        cJSON_AddNumberToObject(oom, "limit_bytes", (double)s->oom_budget->limit);
    }
}

/* Where the set-up went, and a recovered job's recovery. */
static void json_setup(cJSON *root, const run_state *s)
{
    cJSON *setup = cJSON_AddObjectToObject(root, "setup");
    cJSON_AddNumberToObject(setup, "total_ms", s->setup_ms);
    cJSON_AddNumberToObject(setup, "pinned_host_bytes", (double)s->host_at_setup.pinned_bytes);
    cJSON_AddNumberToObject(setup, "pinned_host_ms", s->host_at_setup.pinned_ms);
    cJSON_AddNumberToObject(setup, "allocation_ms", s->gpu_at_setup.alloc_ms + s->host_at_setup.alloc_ms);
    cJSON_AddNumberToObject(setup, "host_bytes", (double)s->host_at_setup.alloc_bytes);
    cJSON_AddNumberToObject(setup, "init_ms", s->init_ms);
    cJSON_AddNumberToObject(setup, "rest_ms", run_setup_rest_ms(s));
    if (s->resume.iteration > 0) {
        /* the recovery: what was restored, how, and (from --ranks) how the job before ended */
        cJSON *rec = cJSON_AddObjectToObject(root, "recovery");
        cJSON_AddNumberToObject(rec, "restored_iteration", s->resume.iteration);
        cJSON_AddStringToObject(rec, "from", s->resume.from_disk ? "persistent checkpoint" : "memory");
        cJSON_AddNumberToObject(rec, "ms", s->resume.ms);
        cJSON_AddNumberToObject(rec, "fetched_bytes", s->resume.fetched_bytes);
        const relaunch_account *a = &s->run_cfg->relaunch; /* (--relaunch-of, from --ranks) */
        if (a->given) {
            cJSON_AddStringToObject(rec, "previous_job", a->note);
            cJSON_AddNumberToObject(rec, "previous_job_seconds", a->ran_s);
        }
        if (a->given && a->failed_at > 0) {
            cJSON_AddNumberToObject(rec, "failed_at_iteration", a->failed_at);
            cJSON_AddNumberToObject(rec, "iterations_redone", a->failed_at - 1 - s->resume.iteration);
        }
        if (s->failed_s > 0 && s->back_s > 0) {
            /* from the failure to being back where the failed job was (the part of the failed
             * iteration done before the failure is not counted) */
            cJSON_AddNumberToObject(rec, "back_at_iteration", s->back_iteration);
            cJSON_AddNumberToObject(rec, "time_lost_s", s->back_s - s->failed_s);
            cJSON_AddNumberToObject(rec, "relaunch_s", s->train_start_s - s->failed_s);
            cJSON_AddNumberToObject(rec, "setup_s", s->setup_ms / 1e3);
            cJSON_AddNumberToObject(rec, "redo_s", s->back_s - s->train_start_s - s->setup_ms / 1e3);
        }
    }
}

/* Iteration i (0-based) of the record. */
static cJSON *json_iteration(const run_state *s, const engine_report *rep, int i)
{
    const engine_config *ec = &s->ec;
    const iter_record *r = &s->iters[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "iteration", i + 1);
    cJSON_AddNumberToObject(o, "loss", r->r.loss);
    cJSON_AddNumberToObject(o, "grad_norm", r->r.grad_norm);
    cJSON_AddNumberToObject(o, "lr", r->r.lr);
    cJSON_AddNumberToObject(o, "ms", r->ms);
    cJSON_AddNumberToObject(o, "forward_ms", r->r.ms_forward);
    cJSON_AddNumberToObject(o, "backward_ms", r->r.ms_backward);
    cJSON_AddNumberToObject(o, "optimizer_ms", r->r.ms_optimizer);
    cJSON_AddBoolToObject(o, "skipped", r->r.skipped);
    if (s->ec.optim.clip > 0 && engine_takes_option(s->eng, "clip-speculate")) {
        cJSON_AddNumberToObject(o, "ahead_blocks", r->r.ahead_blocks);
        cJSON_AddBoolToObject(o, "ahead_redone", r->r.ahead_redone);
    }
    if (r->r.has_busy) {
        cJSON *b = cJSON_AddObjectToObject(o, "busy_ms");
        /* (the collectives' own: collectives_busy_ms below, with the step's other figures of them) */
        for (int k = 0; k < BUSY_KINDS; k++)
            if (k != BUSY_COMM) cJSON_AddNumberToObject(b, BUSY_JSON_KEYS[k], r->r.busy_ms[k]);
        engine_bound bound;
        step_bound_of(s->eng, ec, r->r.busy_ms, &bound);
        cJSON_AddNumberToObject(o, "roofline_ms", bound.roofline_ms);
        if (bound.waits_for_norm) cJSON_AddNumberToObject(o, "clipped_bound_ms", bound.ms);
        cJSON_AddNumberToObject(o, "schedule_bound_ms", bound.ms);
        cJSON_AddNumberToObject(o, "bytes_h2d", r->r.bytes_h2d);
        cJSON_AddNumberToObject(o, "bytes_d2h", r->r.bytes_d2h);
        cJSON_AddNumberToObject(o, "host_adam_params", r->r.host_adam_params);
        cJSON_AddNumberToObject(o, "bytes_disk_read", r->r.bytes_disk_read);
        cJSON_AddNumberToObject(o, "bytes_disk_write", r->r.bytes_disk_write);
    }
    if (r->r.has_comm) {
        cJSON_AddNumberToObject(o, "collectives_busy_ms", r->r.busy_ms[BUSY_COMM]);
        cJSON_AddNumberToObject(o, "collectives_exposed_ms", r->r.exposed_comm_ms);
        cJSON_AddNumberToObject(o, "bytes_collectives", r->r.bytes_comm);
    }
    if (s->eng->report_iteration_json) s->eng->report_iteration_json(rep, i + 1, o);
    return o;
}

/* The engine's notes and the iterations this run trained. */
static void json_iterations(cJSON *root, const run_state *s, const engine_report *rep)
{
    cJSON *notes = cJSON_AddArrayToObject(root, "engine_notes");
    for (int i = 0; notes && i < s->nnotes; i++) cJSON_AddItemToArray(notes, cJSON_CreateString(s->notes[i]));
    cJSON *its = cJSON_AddArrayToObject(root, "iterations");
    for (int i = s->first; i < s->done; i++) cJSON_AddItemToArray(its, json_iteration(s, rep, i));
}

/* The summary: the median step, its rates and bounds, the losses, the clip's count. */
static void json_summary(cJSON *root, const run_state *s)
{
    const engine_config *ec = &s->ec;
    cJSON *sum = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddNumberToObject(sum, "iterations_run", s->done - s->first);
    if (s->first > 0) cJSON_AddNumberToObject(sum, "resumed_after", s->first);
    if (s->done > s->first) {
        const double med = run_median_iteration_ms(s);
        const int global_batch = run_global_batch(ec);
        cJSON_AddNumberToObject(sum, "median_ms", med);
        cJSON_AddNumberToObject(sum, "median_excludes_first", s->done - s->first > 1);
        /* the engine's steady state: its warm-up steps left out (engine_steady_from) */
        double steady = 0;
        const int nsteady = run_steady_median_ms(s, &steady);
        cJSON_AddNumberToObject(sum, "steady_from_iteration", engine_steady_from(s->eng, ec));
        cJSON_AddNumberToObject(sum, "steady_steps", nsteady);
        if (nsteady > 0) cJSON_AddNumberToObject(sum, "steady_median_ms", steady);
        cJSON_AddNumberToObject(sum, "samples_per_second", global_batch * 1000.0 / med);
        /* per rank, as the artifact's "per GPU" figures */
        cJSON_AddNumberToObject(sum, "model_tflops",
                                run_rank_model_flops(ec) / (med * 1e-3) / 1e12);
        cJSON_AddNumberToObject(sum, "effective_tflops",
                                effective_tflops(s->params / (uint64_t)engine_model_ranks(ec), run_rank_batch(ec), ec->shape.seq, med * 1e-3));
        cJSON_AddNumberToObject(sum, "first_loss", s->iters[s->first].r.loss);
        cJSON_AddNumberToObject(sum, "final_loss", s->iters[s->done - 1].r.loss);
    }
    /* The bounds of its steps beside the measured time (engines/step_bound.h) */
    if (s->done > s->first && s->iters[s->done - 1].r.has_busy) {
        const double med = run_median_iteration_ms(s), roof = run_median_over_steps(s, STEP_ROOFLINE);
        cJSON_AddNumberToObject(sum, "roofline_ms", roof);
        const double bound = run_median_over_steps(s, STEP_SCHEDULE_BOUND);
        engine_bound last;
        step_bound_of(s->eng, ec, s->iters[s->done - 1].r.busy_ms, &last);
        if (last.waits_for_norm) cJSON_AddNumberToObject(sum, "clipped_bound_ms", bound);
        cJSON_AddNumberToObject(sum, "schedule_bound_ms", bound);
        cJSON_AddStringToObject(sum, "schedule_bound_is", last.name);
        if (bound > 0) cJSON_AddNumberToObject(sum, "ms_over_bound", med / bound);
    }
    /* N ranks: every rank's median busy times over the engine's steady steps (those of
     * steady_median_ms, which a prediction is of): the ranks of a job in step wait for the
     * slowest, whose figures rank 0's own need not be */
    if (s->per_rank && s->done > s->first && s->iters[s->done - 1].r.has_busy) {
        cJSON *ranks = cJSON_AddArrayToObject(sum, "per_rank_busy_ms");
        for (int r = 0; r < s->world; r++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            for (int k = 0; k < BUSY_KINDS; k++) cJSON_AddNumberToObject(o, BUSY_JSON_KEYS[k], s->per_rank[r].busy_ms[k]);
            cJSON_AddItemToArray(ranks, o);
        }
    }
    /* N ranks: the median step's collectives that no compute ran beside (the steps after the
     * first) */
    if (s->done > s->first && s->iters[s->done - 1].r.has_comm)
        cJSON_AddNumberToObject(sum, "collectives_exposed_median_ms", run_median_over_steps(s, STEP_EXPOSED_COMM));
    /* (the clip the run trained with, and how many of its steps it bound) */
    cJSON_AddNumberToObject(sum, "clip_grad", ec->optim.clip);
    cJSON_AddNumberToObject(sum, "clipped_steps", run_clipped_steps(s));
    if (ec->optim.clip > 0 && engine_takes_option(s->eng, "clip-speculate")) {
        int ahead = 0, redone = 0;
        run_speculated_steps(s, &ahead, &redone);
        cJSON_AddNumberToObject(sum, "steps_updated_ahead", ahead);
        cJSON_AddNumberToObject(sum, "steps_redone", redone);
    }
}

static int write_json_locked(run_state *s)
{
    const engine_config *ec = &s->ec;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "aebench_version", AEBENCH_VERSION);
    cJSON_AddStringToObject(root, "status", s->interrupted_by            ? "interrupted"
                                            : s->running                 ? "running"
                                            : s->status == EXIT_RUN_OK  ? "ok"
                                            : s->status == EXIT_RUN_OOM ? "oom"
                                                                        : "error");
    if (s->interrupted_by) cJSON_AddStringToObject(root, "message", s->interrupted_why);
    else if (s->status != EXIT_RUN_OK) cJSON_AddStringToObject(root, "message", s->message);
    /* (the supervisor relaunches no job whose engine refused to start: it would again) */
    if (s->status != EXIT_RUN_OK && s->init_refused) cJSON_AddStringToObject(root, "failed_in", "initialisation");
    cJSON_AddStringToObject(root, "method", s->eng->name);
    cJSON_AddStringToObject(root, "device", s->device_desc);
    cJSON_AddNumberToObject(root, "world", s->world);
    cJSON_AddNumberToObject(root, "global_batch", run_global_batch(ec));
    cJSON_AddNumberToObject(root, "micro_batches", engine_micro_batches(ec));
    json_config(root, s);
    cJSON_AddNumberToObject(root, "parameters", (double)s->params);
    json_watchdog(root, s);
    json_memory(root, s);
    json_setup(root, s);
    const engine_report rep = run_report_of(s);
    json_iterations(root, s, &rep);
    if (s->eng->report_json) s->eng->report_json(&rep, root);
    /* (the profile is the main thread's, in the middle of a step when a signal comes) */
    if (!s->interrupted_by) run_json_profile(root, s);
    run_json_gpu_clock(root, s);
    json_summary(root, s);
    cJSON_AddStringToObject(root, "log", s->log_path);

    char *text = report_json_text(root);
    cJSON_Delete(root);
    if (!text) return -1;
    const int status = report_write_text(s->json_path, text);
    const int e = errno;
    cJSON_free(text);
    errno = e;
    return status;
}

/* The run's JSON could not be written (a full disk): the record is whole or not there, so the
 * log (cut short, or empty) and any earlier JSON (a "running" one) go too, and nothing names
 * them; the reason, the first write that failed, is the run's message. */
void run_discard_record(run_state *s, int err)
{
    run_record_failed(s, s->json_path, err);
    if (unlink(s->log_path) != 0 && errno != ENOENT)
        fprintf(stderr, "aebench: cannot remove %s: %s\n", s->log_path, strerror(errno));
    if (unlink(s->json_path) != 0 && errno != ENOENT)
        fprintf(stderr, "aebench: cannot remove %s: %s\n", s->json_path, strerror(errno));
    s->has_log = 0;
    s->record_discarded = 1;
}
