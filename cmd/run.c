/*
 * run.c — one training run of one engine, from its plan to its record (run.h): the checks
 * before a run, its set-up, the training loop, the watchdog's hooks and run_engine.  The
 * state every part reads and writes, and the other parts (the log, the JSON, the profile, the
 * signals), are run_state.h's.
 */
#include "run_state.h"

#include "job_dir.h"
#include "machine.h"
#include "report.h"

#include "../engines/runtime/timer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* engine_env.note: an engine's decision goes to the log and, on rank 0, to stdout. */
static void engine_said(void *ctx, const char *line)
{
    run_state *s = ctx;
    run_record_lock(s);
    run_logline(s, "%s", line);
    if (s->nnotes < (int)(sizeof s->notes / sizeof s->notes[0]))
        snprintf(s->notes[s->nnotes++], sizeof s->notes[0], "%.*s", (int)sizeof s->notes[0] - 1, line); /* (a longer line: cut) */
    run_record_unlock(s);
    if (s->rank == 0) {
        printf("  %s\n", line);
        fflush(stdout);
    }
}

/* engine_env.fault_point: the phase reached is progress for the watchdog; --fail-at's rank
 * dies where the engine says it is. */
static void engine_fault(void *ctx, int iteration, int phase)
{
    const run_state *s = ctx;
    static const char *const names[] = {"forward", "backward", "checkpoint"};
    watchdog_at(s->dog, iteration, phase >= 0 && phase <= FAULT_CHECKPOINT ? names[phase] : "step");
    if (s->run_cfg->fail_at > 0) fault_maybe_die(s->run_cfg, s->rank, iteration, phase);
}

/* A set-up of many GiB takes seconds (9 s for an offload engine at l100 on the H100 machine):
 * say on stdout what is coming before it starts, from the engine's plan, from --setup-notice
 * MiB of GPU and host memory together (8 GiB). */
static void announce_setup(const run_state *s, int rank)
{
    const double threshold = (double)s->run_cfg->setup_notice_mib * (1 << 20);
    engine_plan plan = {0};
    s->eng->plan(&s->ec, &plan);
    if (rank != 0 || (double)(plan.gpu_bytes + plan.host_bytes) < threshold) return;
    char g[32], h[32];
    format_bytes((double)plan.gpu_bytes, g, sizeof g);
    format_bytes((double)plan.host_bytes, h, sizeof h);
    printf("  setting up: %s of GPU memory, %s of host memory (zeroed by every core), %.3f B parameters to "
           "initialise ...\n", g, h, (double)gpt_param_count(&s->ec.shape) / 1e9);
    fflush(stdout);
}

/* Can a file be made in directory dir, opened with extra_flags (O_DIRECT: the disk tier's)?
 * Made and removed at once (access() says yes to root where the file system says no: /proc).
 * 0, or the errno (EINVAL: the file system refuses a flag). */
static int can_create_in(const char *dir, int extra_flags)
{
    char probe[PATH_MAX + 64];
    if (snprintf(probe, sizeof probe, "%s/.aebench-probe-%ld", dir, (long)getpid()) >= (int)sizeof probe)
        return ENAMETOOLONG;
    const int fd = open(probe, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | extra_flags, 0600);
    const int e = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    if (fd >= 0 || e == EINVAL) unlink(probe); /* (some file systems make the file, then refuse the flag) */
    return e;
}

/* The run's outputs can be written: said now, before any training, not after it (issue 29).
 * --save-params's file must be a regular file we can write, or one we can create (made and
 * removed here); then the results directory is made (where the run writes first) and must
 * take files — or, without make_results_dir, the deepest existing part of its path must. */
int run_outputs_refused(const run_config *run_cfg, int make_results_dir, char *err, size_t errlen)
{
    if (run_cfg->save_params[0]) {
        const char *p = run_cfg->save_params;
        struct stat st;
        if (strcmp(p, run_cfg->results_dir) == 0) {
            snprintf(err, errlen, "--save-params %.500s: that is the results directory", p);
            return -1;
        }
        int fd = -1, made = 0, e = 0;
        if (stat(p, &st) == 0 && !S_ISREG(st.st_mode)) {
            snprintf(err, errlen, "--save-params %.500s: not a regular file (a file to write the parameters to "
                     "was expected)", p);
            return -1;
        }
        fd = open(p, O_WRONLY | O_CLOEXEC | O_NONBLOCK); /* (no O_TRUNC: the file is replaced at the end) */
        if (fd < 0 && errno == ENOENT) {
            fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            made = fd >= 0;
        }
        e = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        if (made) unlink(p);
        if (e) {
            snprintf(err, errlen, "--save-params %.500s: cannot write there: %s", p, strerror(e));
            return -1;
        }
    }
    if (run_cfg->eng.offload == OFFLOAD_NVME && run_cfg->eng.nvme_dir[0]) {
        /* the disk tier's directory: a directory that takes files opened with O_DIRECT */
        struct stat st;
        const char *d = run_cfg->eng.nvme_dir;
        if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "--nvme-dir %.500s: %s (a directory on the disk to swap to was expected)", d,
                     stat(d, &st) != 0 ? strerror(errno) : "not a directory");
            return -1;
        }
        const int e = can_create_in(d, O_DIRECT);
        if (e == EINVAL)
            snprintf(err, errlen, "--nvme-dir %.500s: its file system takes no O_DIRECT I/O (the disk tier needs it)",
                     d);
        else if (e)
            snprintf(err, errlen, "--nvme-dir %.500s: no file can be made there (%s)", d, strerror(e));
        if (e) return -1;
    }
    if (make_results_dir) {
        if (report_make_dirs(run_cfg->results_dir, err, errlen) != 0) return -1;
        const int e = can_create_in(run_cfg->results_dir, 0);
        if (e) {
            snprintf(err, errlen, "--results %.500s: no file can be made there: %s", run_cfg->results_dir, strerror(e));
            return -1;
        }
        return 0;
    }
    /* Not made yet (the --ranks supervisor: its ranks may still refuse the run, which must then
     * leave nothing, not an empty directory): the deepest part of the path that exists must be
     * a directory that takes files, so that rank 0 can make the rest. */
    char existing[PATH_MAX];
    if (snprintf(existing, sizeof existing, "%s", run_cfg->results_dir) >= (int)sizeof existing) {
        snprintf(err, errlen, "--results: the path is too long");
        return -1;
    }
    struct stat st;
    while (stat(existing, &st) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "--results %.500s: %s", existing, strerror(errno));
            return -1;
        }
        char *slash = strrchr(existing, '/');
        while (slash && slash > existing && slash[1] == '\0') { /* (a trailing '/') */
            *slash = '\0';
            slash = strrchr(existing, '/');
        }
        if (!slash) snprintf(existing, sizeof existing, ".");
        else if (slash == existing) existing[1] = '\0'; /* ("/") */
        else *slash = '\0';
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--results %.500s: %.500s is not a directory", run_cfg->results_dir, existing);
        return -1;
    }
    const int e = can_create_in(existing, 0);
    if (e) {
        snprintf(err, errlen, "--results %.500s: no file can be made in %.500s: %s", run_cfg->results_dir, existing,
                 strerror(e));
        return -1;
    }
    return 0;
}

void run_dry(const run_config *run_cfg, const engine_vtbl *eng)
{
    engine_plan plan;
    eng->plan(&run_cfg->eng, &plan);
    uint64_t P = gpt_param_count(&run_cfg->eng.shape);
    char shape[128], g[32], h[32], d[32], line[256];
    run_describe_shape(&run_cfg->eng, shape, sizeof shape);
    format_bytes((double)plan.gpu_bytes, g, sizeof g);
    format_bytes((double)plan.host_bytes, h, sizeof h);
    format_bytes((double)plan.disk_bytes, d, sizeof d);
    fmt_params_line(line, sizeof line, P);
    printf("%s\n", line);
    printf("%s | %s | %.3f B parameters (%llu) | recompute %s\n", eng->name, shape,
           (double)P / 1e9, (unsigned long long)P, gpt_recompute_name(run_cfg->eng.recompute));
    printf("plan: GPU %s (%llu bytes) | host %s (%llu bytes) | disk %s (%llu bytes)\n", g,
           (unsigned long long)plan.gpu_bytes, h, (unsigned long long)plan.host_bytes, d,
           (unsigned long long)plan.disk_bytes);
}

/* Record an out-of-memory outcome from a budget's record. */
static void set_oom(run_state *s, const mem_budget *b)
{
    s->status = EXIT_RUN_OOM;
    s->oom_device = b->device;
    s->oom_budget = b;
    mem_budget_oom_message(b, s->message, sizeof s->message);
}

/* The plan must fit the budgets before anything is allocated. */
static int check_plan(run_state *s)
{
    mem_budget probe;
    mem_budget_init(&probe, "GPU", s->gpu.budget.limit);
    if (mem_budget_take(&probe, s->plan.gpu_bytes, "the run (its plan)")) {
        s->gpu.budget = probe; /* keep the record for the report */
        set_oom(s, &s->gpu.budget);
        return -1;
    }
    mem_budget_init(&probe, "host", s->host.limit);
    if (mem_budget_take(&probe, s->plan.host_bytes, "the run (its plan)")) {
        s->host = probe;
        set_oom(s, &s->host);
        return -1;
    }
    if (s->has_disk) {
        mem_budget_init(&probe, "disk", s->disk.limit);
        if (mem_budget_take(&probe, s->plan.disk_bytes, "the run (its plan)")) {
            s->disk = probe;
            set_oom(s, &s->disk);
            return -1;
        }
    }
    return 0;
}

/* The budget whose record says what ran out. */
static const mem_budget *oom_budget(const run_state *s)
{
    if (s->gpu.budget.oom) return &s->gpu.budget;
    if (s->has_disk && s->disk.oom) return &s->disk;
    return &s->host;
}

/* --offload nvme: the disk budget, from the --nvme-dir file system (see run.h). */
static int open_disk_budget(run_state *s)
{
    if (s->ec.offload != OFFLOAD_NVME) return 0;
    size_t free_bytes = 0;
    if (run_resolve_disk_budget(&s->ec, s->run_cfg->results_dir, &free_bytes, s->message,
                                sizeof s->message)) {
        s->status = EXIT_RUN_ERROR;
        return -1;
    }
    /* The ranks of one machine share its disk as they share its host memory: each takes its
     * share (ranks on other machines see their own --nvme-dir). */
    free_bytes /= (size_t)engine_local_world(&s->ec);
    mem_budget_init(&s->disk, "disk", free_bytes);
    s->has_disk = 1;
    return 0;
}

/* --save-params: every rank takes part (a sharded engine gathers), rank 0 writes the file
 * (whole or not at all: written aside, then renamed). */
static void save_params(run_state *s, void *state)
{
    const size_t P = (size_t)gpt_param_count(&s->ec.shape);
    float *params = malloc(P * sizeof *params);
    int status = params ? s->eng->read_params(state, params) : GPT_ERR_OOM, save_errno = 0;
    if (status == 0 && s->rank == 0) {
        char tmp[PATH_MAX + 8];
        snprintf(tmp, sizeof tmp, "%s.tmp", s->run_cfg->save_params);
        unlink(tmp); /* (a link planted under its name goes, not its target) */
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (!f && fd >= 0) close(fd);
        int ok = f && fwrite(params, sizeof *params, P, f) == P;
        if (f) ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, s->run_cfg->save_params) != 0) {
            save_errno = errno ? errno : EIO;
            unlink(tmp);
            status = GPT_ERR_IO;
        }
    }
    free(params);
    if (status) {
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "cannot save the parameters to %.400s%s%s", s->run_cfg->save_params,
                 save_errno ? ": " : "", save_errno == ENOSPC ? "disk full" : save_errno ? strerror(save_errno) : "");
    }
}

/* N ranks: every rank says how it stands; when one has failed, every rank takes the first
 * failure (its status and message, "rank R: ...") so that no rank goes on into a collective
 * that the failed one will never join.  1 when every rank is fine. */
static int ranks_agree(run_state *s)
{
    if (s->world == 1) return s->status == EXIT_RUN_OK;
    typedef struct { int status, init_refused; char message[512]; } rank_state;
    rank_state mine = {.status = s->status, .init_refused = s->init_refused};
    snprintf(mine.message, sizeof mine.message, "%s", s->message);
    rank_state *all = calloc((size_t)s->world, sizeof *all);
    watchdog_waits_on(s->dog, "the other ranks' state (an all-gather)");
    if (!all || comm_all_gather(s->comm, &mine, all, sizeof mine) != 0) {
        free(all);
        fprintf(stderr, "aebench: rank %d: cannot exchange its state with the other ranks\n", s->rank);
        comm_abort(s->comm, EXIT_RUN_ERROR);
        return 0;
    }
    int ok = 1;
    for (int r = 0; r < s->world && ok; r++) {
        if (all[r].status == EXIT_RUN_OK) continue;
        ok = 0;
        if (r != s->rank) {
            s->status = all[r].status;
            s->init_refused = all[r].init_refused;
            s->oom_budget = NULL; /* the record is that rank's */
            s->oom_device = NULL;
            snprintf(s->message, sizeof s->message, "rank %d: %.480s", r, all[r].message);
        }
    }
    free(all);
    watchdog_waits_on(s->dog, NULL);
    return ok;
}

static void remove_heartbeat_dir(run_state *s);

/* The watchdog's end of the job, from its thread: the training is stuck, so nothing else
 * writes the record now.  The note for the supervisor, the log's ERROR line and the JSON with
 * the iterations done (rank 0), then every rank ends with EXIT_RANK_LOST. */
static void run_hung(void *ctx, const char *why)
{
    run_state *s = ctx;
    /* the note is "rank R <rest>" to the supervisor: without our own "rank R " */
    const char *rest = why;
    if (strncmp(why, "rank ", 5) == 0 && strchr(why + 5, ' ')) rest = strchr(why + 5, ' ') + 1;
    fault_note(s->run_cfg->job_notes, s->rank, "%s", rest);
    run_record_lock(s);
    if (s->has_log && s->log && !s->record_final) {
        s->status = EXIT_RANK_LOST;
        snprintf(s->message, sizeof s->message, "%.500s", why);
        run_logline(s, "ERROR: %s", why);
        if (fclose(s->log) != 0) fprintf(stderr, "aebench: error closing %s\n", s->log_path);
        s->log = NULL;
        if (run_write_json(s) == 0) report_to_parent(s->run_cfg, "json %s", s->json_path);
        else fprintf(stderr, "aebench: cannot write %s: %s\n", s->json_path, strerror(errno));
        s->record_final = 1;
    }
    run_record_unlock(s);
    remove_heartbeat_dir(s);
    fflush(stdout);
    fflush(stderr);
    watchdog_kill_stopped(s->dog);
    comm_abort(s->comm, EXIT_RANK_LOST);
}

/* Where the ranks' heartbeats go: the supervisor's private notes directory (--ranks passes it
 * as --job-notes), or, when every rank is on this machine, a private one that rank 0 makes
 * (mkdtemp: 0700, a fresh name) and shares; none otherwise (each rank still watches itself).
 * 0, or -1 when the ranks could not share it. */
static int heartbeat_dir(run_state *s, char *dir, size_t len)
{
    dir[0] = '\0';
    if (s->run_cfg->job_notes[0]) {
        snprintf(dir, len, "%s", s->run_cfg->job_notes);
        return 0;
    }
    if (s->world == 1 || s->comm->local_world != s->world) return 0;
    enum { PATH_BYTES = 4096 };
    char mine[PATH_BYTES] = "";
    if (s->rank == 0 && job_dir_make(mine, sizeof mine, "aebench-heartbeats") != 0) {
        fprintf(stderr, "aebench: no heartbeat directory (%s): %s; each rank still watches itself\n", mine,
                strerror(errno));
        mine[0] = '\0';
    }
    char *all = calloc((size_t)s->world, PATH_BYTES);
    if (!all || comm_all_gather(s->comm, mine, all, PATH_BYTES) != 0) {
        free(all);
        return -1;
    }
    snprintf(dir, len, "%.4000s", all);
    /* (every rank knows it: whichever rank's watchdog ends the job removes it) */
    snprintf(s->heartbeat_dir, sizeof s->heartbeat_dir, "%.4000s", all);
    free(all);
    return 0;
}

/* The heartbeat directory rank 0 made (not the supervisor's), the ranks' files in it first:
 * by rank 0 at the end, or by the rank whose watchdog ends the job. */
static void remove_heartbeat_dir(run_state *s)
{
    if (!s->heartbeat_dir[0]) return;
    char path[4400];
    for (int r = 0; r < s->world; r++) {
        snprintf(path, sizeof path, "%.4200s/heartbeat-%d", s->heartbeat_dir, r);
        unlink(path);
    }
    job_dir_remove(s->heartbeat_dir);
    s->heartbeat_dir[0] = '\0';
}

/* The engine's init, timed (its set-up: into the log by run_report_setup), its state into
 * *state; a refusal into s's status and message (init_why: what the engine said, why_len its
 * size, kept for the steps). */
static void init_engine(run_state *s, gpt_backend *be, const comm_world *comm, char *init_why, size_t why_len,
                        void **state)
{
    engine_env env = {
        .cfg = &s->ec, .be = be, .gpu = &s->gpu, .host = &s->host,
        .disk = s->has_disk ? &s->disk : NULL, .rank = comm->rank,
        .world = comm->world, .note = engine_said, .note_ctx = s,
        .fault_point = engine_fault, .fault_ctx = s,
        .init_ms = &s->init_ms, .dog = s->dog, .why = init_why, .why_len = why_len,
    };
    announce_setup(s, comm->rank);
    const double setup0 = wall_ms();
    const int status = s->eng->init(&env, state);
    s->setup_ms = wall_ms() - setup0;
    if (status == GPT_OK) run_report_setup(s);
    if (status == GPT_OK && s->eng->report_header) {
        const engine_report rep = run_report_of(s);
        s->eng->report_header(&rep);
    }
    if (status == GPT_ERR_OOM) {
        set_oom(s, oom_budget(s));
    } else if (status == GPT_ERR_IO) {
        s->status = EXIT_RUN_ERROR;
        if (init_why[0]) snprintf(s->message, sizeof s->message, "%s: %.440s", s->eng->name, init_why);
        else snprintf(s->message, sizeof s->message, "%s: disk tier under %.400s failed (see stderr)",
                      s->eng->name, s->ec.nvme_dir);
    } else if (status) {
        s->status = EXIT_RUN_ERROR;
        s->init_refused = 1;
        if (init_why[0]) snprintf(s->message, sizeof s->message, "%s: initialisation failed: %.420s", s->eng->name, init_why);
        else snprintf(s->message, sizeof s->message, "%s: initialisation failed (%s)", s->eng->name,
                      status == GPT_ERR_INVALID ? "invalid configuration, see stderr" : "backend error, see stderr");
    }
}

/* An engine that recovered a checkpoint goes on from the iteration after it: where the run
 * starts, and (from --ranks) what the failure before it was. */
static void resume_after(run_state *s, void *state)
{
    const run_config *run_cfg = s->run_cfg;
    engine_resume rs = {0};
    const int resumed = s->status == EXIT_RUN_OK && s->eng->resumed ? s->eng->resumed(state, &rs) : 0;
    s->resume = rs;
    if (resumed > run_cfg->iters) {
        /* (recovery_refused read the headers; the data of the version they named failed its
         * checksums and restore fell back to --ckpt-dir's, which is newer: its file stays) */
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "%s: the recovery restored iteration %d, past --iters %d: nothing "
                 "trained or saved", s->eng->name, resumed, run_cfg->iters);
    } else if (resumed > 0) {
        s->first = s->done = resumed;
        run_logline(s, "resumed: iterations 1-%d were trained by the job this one recovers", s->first);
        /* the supervisor's account of the failure (--relaunch-of: --ranks passes it on) */
        const relaunch_account *a = &run_cfg->relaunch;
        if (a->given) engine_said(s, a->note);
        s->failed_s = a->given ? a->failed_s : 0;
        /* back where the failed job was: the end of the iteration before the failed one (a
         * crash that names no iteration: where this job resumes) */
        s->back_iteration = a->given && a->failed_at - 1 > s->first ? a->failed_at - 1 : s->first;
        if (s->back_iteration > run_cfg->iters) s->back_iteration = run_cfg->iters;
        if (s->back_iteration <= s->first) run_recovery_back(s);
    }
}

/* Step it failed with status: the run's status and message (init_why: what the engine said). */
static void fail_step(run_state *s, int it, int status, const char *init_why)
{
    if (status == GPT_ERR_OOM) {
        set_oom(s, oom_budget(s));
    } else if (status == GPT_ERR_IO && init_why[0]) {
        /* (what the engine said, engine_fail: a checkpoint's disk full) */
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "%s: iteration %d: %.440s", s->eng->name, it, init_why);
    } else if (status == GPT_ERR_IO) {
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "%s: iteration %d: disk I/O under %.400s failed "
                 "(see stderr)", s->eng->name, it, s->ec.nvme_dir);
    } else {
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "%s: iteration %d failed (backend error, see stderr)",
                 s->eng->name, it);
    }
    s->step_failed = 1;
}

/* Iteration it ends a logged interval (after last_logged): its lines, the record so far, and
 * the ranks' barrier after it. */
static void end_interval(run_state *s, int it, int *last_logged, int *memory_reported, const comm_world *comm)
{
    const run_config *run_cfg = s->run_cfg;
    run_log_interval(s, *last_logged, it, memory_reported);
    *last_logged = it;
    if (s->has_log && it < run_cfg->iters) {
        /* the record so far, "running": a job that loses a rank keeps the iterations it
         * completed (the supervisor marks it failed); the final one replaces it */
        run_record_lock(s);
        if (s->log && (fflush(s->log) != 0 || ferror(s->log)))
            run_record_failed(s, s->log_path, errno ? errno : EIO);
        s->running = 1;
        if (s->status == EXIT_RUN_OK && run_write_json(s) != 0) run_record_failed(s, s->json_path, errno ? errno : EIO);
        s->running = 0;
        run_record_unlock(s);
    }
    /* ... and no rank starts the next iteration before that record is on disk: a rank
     * lost at the next iteration's start (the step's last collective is behind it) had
     * the launcher kill rank 0 in the middle of writing it, and the job's record kept
     * none of its iterations (seen once in CI on a busy machine) */
    if (it < run_cfg->iters && comm->world > 1) watchdog_at(s->dog, it, "the barrier after its record");
    if (it < run_cfg->iters && comm_barrier(comm) != 0 && s->status == EXIT_RUN_OK) {
        s->status = EXIT_RUN_ERROR;
        snprintf(s->message, sizeof s->message, "iteration %d: the ranks' barrier after its record "
                 "failed (see stderr)", it);
    }
}

static void train(run_state *s, gpt_backend *be, const data_source *data, const comm_world *comm)
{
    s->train_start_s = epoch_s();
    const run_config *run_cfg = s->run_cfg;
    char init_why[600] = ""; /* what the engine said when it refused (engine_fail) */
    void *state = NULL;
    init_engine(s, be, comm, init_why, sizeof init_why, &state);
    /* every rank initialised, or none trains */
    (void)ranks_agree(s);
    if (s->status == EXIT_RUN_OK && s->eng->chosen_plan) {
        /* What the engine chose (e.g. -w auto) replaces the pre-check's plan, so the memory
         * lines compare the peak with the plan of what actually ran. */
        s->eng->chosen_plan(state, &s->plan);
    }
    /* This rank's rows of the global batch: its micro-batches, one after the other. */
    const int M = engine_micro_batches(&s->ec), rank_rows = run_rank_batch(&s->ec);
    const size_t N = (size_t)M * s->ec.shape.batch * s->ec.shape.seq;
    int32_t *tokens = NULL, *targets = NULL;
    if (s->status == EXIT_RUN_OK) {
        tokens = malloc(N * sizeof *tokens);
        targets = malloc(N * sizeof *targets);
        if (!tokens || !targets) {
            s->status = EXIT_RUN_ERROR;
            snprintf(s->message, sizeof s->message, "out of host memory for the batch ids");
        }
    }
    resume_after(s, state);
    int memory_reported = 0, last_logged = s->first;
    for (int it = s->first + 1; s->status == EXIT_RUN_OK && it <= run_cfg->iters; it++) {
        /* (the ranks of one pipeline train the same rows: its data rank's) */
        data_rows(data, it, run_global_batch(&s->ec), engine_dp_rank(&s->ec, comm->rank) * rank_rows, rank_rows, tokens,
                  targets);
        watchdog_at(s->dog, it, "forward");
        fault_maybe_die(run_cfg, comm->rank, it, FAULT_FORWARD);
        step_result r = {0};
        double t0 = wall_ms();
        const int status = s->eng->step(state, it, tokens, targets, &r);
        double t1 = wall_ms();
        watchdog_step(s->dog, it, t1 - t0);
        if (status) {
            fail_step(s, it, status, init_why);
            break;
        }
        /* --profile: the step's ops timed once it is over (the wait is after t1) */
        if (s->prof && gpt_profile_step_end(s->prof) != GPT_OK) {
            s->status = EXIT_RUN_ERROR;
            snprintf(s->message, sizeof s->message, "--profile: iteration %d's op times could not be read (backend "
                     "error, see stderr)", it);
            break;
        }
        run_record_lock(s);
        s->iters[it - 1] = (iter_record){.r = r, .ms = t1 - t0};
        s->done = it;
        run_record_unlock(s);
        /* the clock beside the steps the medians count (all but the first) */
        if (s->clock && it == s->first + 1 && it < run_cfg->iters && gpu_clock_start(s->clock) != 0) {
            snprintf(s->clock_why, sizeof s->clock_why, "its sampling thread could not start");
            gpu_clock_close(s->clock);
            s->clock = NULL;
        }
        if (s->resume.iteration > 0 && it == s->back_iteration && s->back_s == 0) run_recovery_back(s);
        if (it % run_cfg->log_interval == 0 || it == run_cfg->iters) end_interval(s, it, &last_logged, &memory_reported, comm);
    }
    free(tokens);
    free(targets);
    if (s->clock) {
        gpu_clock_stop(s->clock);
        s->clock_done = 1;
    }
    watchdog_at(s->dog, s->done, "end of training");
    if (s->eng->report_summary) {
        const engine_report rep = run_report_of(s);
        s->eng->report_summary(&rep);
    }
    if (s->status == EXIT_RUN_OK && run_cfg->save_params[0]) save_params(s, state);
    s->eng->free(state);
}

int run_resolve_disk_budget(engine_config *ec, const char *results_dir, size_t *free_bytes,
                            char *err, size_t errlen)
{
    if (!ec->nvme_dir[0] && strlen(results_dir) < sizeof ec->nvme_dir)
        memcpy(ec->nvme_dir, results_dir, strlen(results_dir) + 1);
    if (!ec->nvme_dir[0]) {
        snprintf(err, errlen, "--offload nvme: the results directory's path is too long for the "
                 "swap directory; give --nvme-dir");
        return -1;
    }
    struct statvfs fs;
    if (statvfs(ec->nvme_dir, &fs) != 0 || access(ec->nvme_dir, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "--nvme-dir %.400s: %s", ec->nvme_dir, strerror(errno));
        return -1;
    }
    *free_bytes = (size_t)fs.f_bavail * (size_t)fs.f_frsize;
    return 0;
}

void run_resolve_budgets(const run_config *run_cfg, gpt_backend *be, size_t *gpu, size_t *host)
{
    size_t gpu_limit = run_cfg->gpu_mem_limit, host_limit = run_cfg->cpu_mem_limit;
    if (!gpu_limit) {
        size_t free_b = 0, total_b = 0;
        if (be->ops->dev_mem_info(be, &free_b, &total_b) == 0) gpu_limit = free_b;
    }
    if (!host_limit && gpt_host_mem_info(&host_limit, NULL) == 0) {
        /* Not all of it: the kernel, the CUDA driver and page tables need some, and a run
         * planned to the last byte of MemAvailable is killed by the OOM killer (seen at
         * l330 on a 125 GiB host) instead of being reported. */
        host_limit = host_limit / 10 * 9;
    }
    /* The ranks of one machine share its host memory (and, on the CPU backend, the free
     * memory that stands for a device's): each takes its share of the machine's budget.  A
     * --gpu-mem-limit is per rank (each has its own GPU); a --cpu-mem-limit is the machine's. */
    const size_t local = (size_t)engine_local_world(&run_cfg->eng);
    if (local > 1) {
        host_limit /= local;
        if (!run_cfg->gpu_mem_limit && strcmp(be->name, "cpu") == 0) gpu_limit /= local;
    }
    *gpu = gpu_limit ? gpu_limit : SIZE_MAX;
    *host = host_limit ? host_limit : SIZE_MAX;
}

/* The run's state from its configuration: the record's lock, the budgets (and a machine file
 * of this shape), the plan, the iterations' records.  0, or the exit code (said on stderr;
 * nothing is written). */
static int run_state_init(run_state *s, const run_config *run_cfg, const engine_vtbl *eng, gpt_backend *be,
                          const comm_world *comm)
{
    memset(s, 0, sizeof *s);
    s->log_lock_fd = -1;
    {
        pthread_mutexattr_t recursive;
        int e = pthread_mutexattr_init(&recursive);
        if (!e && (e = pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE)) == 0)
            e = pthread_mutex_init(&s->record_lock, &recursive);
        if (e) {
            fprintf(stderr, "aebench: the run's record lock: %s\n", strerror(e));
            return EXIT_RUN_ERROR;
        }
        pthread_mutexattr_destroy(&recursive);
    }
    s->run_cfg = run_cfg;
    s->eng = eng;
    s->ec = run_cfg->eng;
    s->world = comm->world;
    s->comm = comm;
    s->rank = comm->rank;
    s->params = gpt_param_count(&s->ec.shape);
    if (s->ec.window) snprintf(s->window, sizeof s->window, "%d", s->ec.window);
    else snprintf(s->window, sizeof s->window, "auto");
    be->ops->describe(be, s->device_desc, sizeof s->device_desc);

    size_t gpu_limit, host_limit;
    run_resolve_budgets(run_cfg, be, &gpu_limit, &host_limit);
    s->ec.gpu_budget = gpu_limit;
    s->ec.host_budget = host_limit;
    /* A machine file of this shape (--machine, or the results directory's for this host and
     * device) lets -w auto size its window with the engine's prediction (machine.h). */
    {
        char err[600];
        if (run_cfg->machine_path[0]) snprintf(s->machine_path, sizeof s->machine_path, "%s", run_cfg->machine_path);
        else if (machine_default_path(s->machine_path, sizeof s->machine_path, run_cfg->results_dir, be) != 0)
            s->machine_path[0] = '\0';
        if (s->machine_path[0] && access(s->machine_path, R_OK) == 0 &&
            machine_load(s->machine_path, &s->ec, &s->machine, err, sizeof err) == 0)
            s->ec.machine = &s->machine;
        else
            s->machine_path[0] = '\0';
    }
    eng->plan(&s->ec, &s->plan);
    dev_arena_init(&s->gpu, be, gpu_limit);
    mem_budget_init(&s->host, "host", host_limit);

    s->iters = calloc((size_t)run_cfg->iters, sizeof *s->iters);
    if (!s->iters) {
        /* (before the log is made: nothing is written; out of memory, as a budget short would be) */
        char need[32];
        format_bytes((double)run_cfg->iters * (double)sizeof *s->iters, need, sizeof need);
        fprintf(stderr, "aebench: out of host memory: %d iteration records (--iters) need %s\n", run_cfg->iters, need);
        return EXIT_RUN_OOM;
    }
    return 0;
}

/* Rank 0's log, made (its JSON's path beside it), share-locked, and named to a parent; 0, or -1
 * said on stderr. */
static int open_record(run_state *s)
{
    const run_config *run_cfg = s->run_cfg;
    char err[512];
    run_record_lock(s);
    s->log = report_create_log(run_cfg->results_dir, s->eng->name, s->ec.shape.layers, s->ec.shape.hidden,
                               s->ec.shape.batch, s->window, s->log_path, sizeof s->log_path,
                               s->json_path, sizeof s->json_path, err, sizeof err);
    s->has_log = s->log != NULL;
    run_record_unlock(s);
    if (!s->log) {
        fprintf(stderr, "aebench: %s\n", err);
        return -1;
    }
    /* (a shared lock while the run may write its record: a sweep's --resume takes a record
     * that says "running" or "interrupted" for one to replace only when no run holds it) */
    if ((s->log_lock_fd = fcntl(fileno(s->log), F_DUPFD_CLOEXEC, 0)) < 0 || flock(s->log_lock_fd, LOCK_SH) != 0)
        fprintf(stderr, "aebench: cannot lock %s: %s\n", s->log_path, strerror(errno));
    report_to_parent(s->run_cfg, "log %s", s->log_path);
    /* (which file it is: a --ranks supervisor appends to this one only, not to a link or
     * another file planted under its name since) */
    struct stat log_st;
    if (fstat(fileno(s->log), &log_st) == 0)
        report_to_parent(s->run_cfg, "log-id %llu %llu", (unsigned long long)log_st.st_dev,
                         (unsigned long long)log_st.st_ino);
    return 0;
}

/* N ranks: every rank's figures for the JSON (each rank reaches here after its last step).
 * Every rank says first whether it could make room, so that all gather or none does. */
static void gather_rank_figures(run_state *s)
{
    rank_figures mine = {(double)s->gpu.budget.peak, (double)s->host.peak, (double)engine_plan_arena_gpu(&s->plan),
                         (double)s->plan.host_bytes, {0}};
    for (int k = 0; k < BUSY_KINDS; k++) mine.busy_ms[k] = run_steady_median_over_steps(s, STEP_BUSY + k);
    rank_figures *all = calloc((size_t)s->world, sizeof *all);
    int any_failed = 1;
    if (comm_max_int(s->comm, !all, &any_failed) != 0 || any_failed ||
        comm_all_gather(s->comm, &mine, all, sizeof mine) != 0) {
        free(all);
        return;
    }
    s->per_rank = all;
}

/* The record's end (rank 0): the log closed and the final JSON written, in one piece under the
 * record's lock; the log's share lock given back. */
static void close_record(run_state *s)
{
    /* (one piece: an interruption sees the log open and no final JSON, or both done; the
     * log's last lines reach the disk at its close: a full disk can say so there) */
    run_record_lock(s);
    if (fclose(s->log) != 0) run_record_failed(s, s->log_path, errno ? errno : EIO);
    s->log = NULL;
    if (run_write_json(s) == 0) report_to_parent(s->run_cfg, "json %s", s->json_path);
    else run_discard_record(s, errno ? errno : EIO);
    s->record_final = 1;
    run_record_unlock(s);
    if (s->log_lock_fd >= 0 && close(s->log_lock_fd) != 0) fprintf(stderr, "aebench: closing %s\n", s->log_path);
    s->log_lock_fd = -1;
}

int run_engine(const run_config *run_cfg, const engine_vtbl *eng, gpt_backend *be,
               const data_source *data, const comm_world *comm, run_signals *sig)
{
    run_state s;
    const int refused = run_state_init(&s, run_cfg, eng, be, comm);
    if (refused) return refused;
    /* SIGINT or SIGTERM from here on: the record says so (rank 0's), and the run ends by it */
    run_signals_attach(sig, run_interrupted, &s);
    if (comm->rank == 0 && open_record(&s) != 0) {
        run_signals_attach(sig, NULL, NULL);
        free(s.iters);
        return EXIT_RUN_ERROR;
    }
    run_log_header(&s);
    /* From here on every rank watches its own progress (watchdog.h): a job always ends. */
    char beats[4200];
    if (heartbeat_dir(&s, beats, sizeof beats) != 0) {
        fprintf(stderr, "aebench: rank %d: cannot share the heartbeat directory with the other ranks\n", s.rank);
        comm_abort(comm, EXIT_RUN_ERROR);
    }
    const watchdog_config wc = {.timeout_s = run_cfg->hang_timeout_s, .rank = s.rank, .world = s.world,
                                .heartbeat_dir = beats, .kill_stopped = comm_launcher_waits_on_stopped(),
                                .fire = run_hung, .fire_ctx = &s};
    if (watchdog_start(&s.dog, &wc) != 0) {
        run_signals_attach(sig, NULL, NULL);
        if (s.has_log) fclose(s.log);
        if (s.log_lock_fd >= 0) close(s.log_lock_fd);
        free(s.iters);
        return EXIT_RUN_ERROR;
    }
    if (open_disk_budget(&s) == 0) check_plan(&s);
    if (run_cfg->profile && gpt_profile_create(&s.prof, be) != GPT_OK) {
        s.status = EXIT_RUN_ERROR;
        snprintf(s.message, sizeof s.message, "--profile: out of memory");
    }
    run_open_gpu_clock(&s, be);
    if (s.status == EXIT_RUN_OK && ranks_agree(&s)) train(&s, s.prof ? gpt_profile_backend(s.prof) : be, data, comm);
    if (s.status == EXIT_RUN_OK) run_report_profile(&s);
    if (s.status == EXIT_RUN_OK) run_report_gpu_clock(&s);
    if (s.world > 1 && s.status == EXIT_RUN_OK) gather_rank_figures(&s);
    run_log_end(&s);
    if (s.has_log) close_record(&s);
    if (s.rank == 0 && s.status != EXIT_RUN_OK)
        fprintf(stderr, "aebench: %s\n", s.message);
    if (s.world > 1 && s.step_failed) {
        /* The other ranks may wait for this one in a collective forever: end the job (its
         * log and JSON, on rank 0, are written by now). */
        if (s.rank != 0) fprintf(stderr, "aebench: rank %d: %s\n", s.rank, s.message);
        fault_note(run_cfg->job_notes, s.rank, "failed: %s", s.message);
        run_print_summary(&s);
        comm_abort(comm, s.status);
    }
    if (s.world > 1) {
        /* every rank is done with the heartbeats before rank 0 removes them (watched: a rank
         * that never comes still ends the job) */
        watchdog_at(s.dog, s.done, "the end of the job");
        watchdog_waits_on(s.dog, "the other ranks at the end of the job (a barrier)");
        if (comm_barrier(comm) != 0) s.status = s.status ? s.status : EXIT_RUN_ERROR;
    }
    watchdog_stop(s.dog);
    s.dog = NULL;
    if (s.rank == 0) remove_heartbeat_dir(&s);
    run_print_summary(&s);
    gpt_profile_destroy(s.prof);
    gpu_clock_close(s.clock);
    /* (the run's state goes with this function: the watcher no longer writes its record) */
    run_signals_attach(sig, NULL, NULL);
    free(s.iters);
    free(s.per_rank);
    pthread_mutex_destroy(&s.record_lock);
    return s.status;
}
