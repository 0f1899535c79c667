/*
 * aebench — how large a GPT can each GPU-memory offloading strategy train, and how fast?
 *
 * main: parse the command line (and --config), then either run one engine in this process
 * — pick the backend (CUDA when usable, else the CPU reference backend with its small
 * preset), open the data, train — or hand over to the sweep driver (cmd/sweep.c) for
 * -m all, a run-list config and --find-max, which runs every run as a child process.
 * Bad input exits 2 before anything is written.
 */
#include "cli.h"
#include "data.h"
#include "launch.h"
#include "machine.h"
#include "provenance.h"
#include "report.h"
#include "rerun.h"
#include "run.h"
#include "search.h"
#include "sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The backend the run asked for; without --device, CUDA if this build and machine have
 * it, else the CPU.  Returns NULL (with a message) only when --device cuda cannot be had. */
static gpt_backend *open_backend(run_config *run_cfg, int device)
{
    gpt_backend *be = NULL;
    if (run_cfg->eng.device == DEVICE_CUDA || !run_cfg->device_given) {
        /* --dtype bf16 makes a backend whose activations are bf16 (kernels/gpt.h). */
        if (gpt_cuda_backend_create_dtype(&be, device, run_cfg->eng.tf32,
                                          run_cfg->eng.bf16 ? GPT_BF16 : GPT_F32) == 0) {
            run_cfg->eng.device = DEVICE_CUDA;
            return be;
        }
        if (run_cfg->device_given) return NULL;
    }
    run_cfg->eng.device = DEVICE_CPU;
    if (gpt_cpu_backend_create_dtype(&be, run_cfg->eng.threads, run_cfg->eng.bf16 ? GPT_BF16 : GPT_F32) != 0) return NULL;
    return be;
}

static void close_backend(gpt_backend *be, device_kind kind)
{
    if (!be) return;
    if (kind == DEVICE_CUDA) gpt_cuda_backend_destroy(be);
    else gpt_cpu_backend_destroy(be);
}

/* N ranks: every rank was given the same options (a hash of each parsed value, compared
 * with rank 0's); 0, or -1 after rank 0 named the first option that differs. */
static int same_options_everywhere(const comm_world *comm, const run_config *run_cfg)
{
    uint64_t mine[CLI_OPTIONS_MAX] = {0};
    const char *names[CLI_OPTIONS_MAX];
    const int n = cli_option_hashes(run_cfg, mine, names, CLI_OPTIONS_MAX);
    uint64_t *all = n < 0 ? NULL : calloc((size_t)comm->world * CLI_OPTIONS_MAX, sizeof *all);
    if (!all || comm_all_gather(comm, mine, all, sizeof mine) != 0) {
        free(all);
        if (comm->rank == 0) fprintf(stderr, "aebench: cannot compare the ranks' options\n");
        return -1;
    }
    int bad_rank = -1, bad_opt = -1;
    for (int r = 1; r < comm->world && bad_rank < 0; r++)
        for (int i = 0; i < n && bad_rank < 0; i++)
            if (all[(size_t)r * CLI_OPTIONS_MAX + i] != all[i]) bad_rank = r, bad_opt = i;
    free(all);
    if (bad_rank < 0) return 0;
    if (comm->rank == 0)
        fprintf(stderr, "aebench: rank %d was given a different --%s than rank 0 (every rank must run the "
                        "same configuration)\n", bad_rank, names[bad_opt]);
    return -1;
}

/* Whether the option of this long name was given (ctx: the run_config), for the registry. */
static int option_given(const void *ctx, const char *name)
{
    return cli_given(ctx, name);
}

/* An option given for one engine that the engine does not use is an error, not a silent
 * no-op (and not a label: -w would name the log ws-W): the engines' option tables say which
 * (engine_option_refused).  A sweep's children are exempt (the sweep's options are for
 * whichever of its engines use them: -m all -w 4 is the windowed engines' window): a child of
 * a sweep or of --find-max is one they report to (--report-fd). */
static int option_unused(const run_config *run_cfg, const engine_vtbl *eng, int world, char *err, size_t errlen)
{
    if (!eng || run_cfg->report_fd > 0) return 0;
    if (engine_option_refused(eng, &run_cfg->eng, option_given, run_cfg, err, errlen)) return -1;
    if (run_cfg->fail_at > 0 && run_cfg->fail_at > run_cfg->iters) {
        snprintf(err, errlen, "--fail-at %d: the run has only %d iterations (--iters)", run_cfg->fail_at, run_cfg->iters);
        return -1;
    }
    if (run_cfg->fail_ranks && world < 64 && (run_cfg->fail_ranks >> world) != 0) {
        snprintf(err, errlen, "--fail-rank %s: the job has ranks 0 to %d", run_cfg->fail_ranks_text, world - 1);
        return -1;
    }
    return 0;
}

/* --fail-phase backward / checkpoint only where the engine marks that phase. */
static int fault_phase_refused(const run_config *run_cfg, const engine_vtbl *eng, char *err, size_t errlen)
{
    if (!eng || run_cfg->fail_at <= 0) return 0;
    char who[256];
    if (run_cfg->fail_phase == FAULT_BACKWARD && !(eng->options & ENGINE_OPT_FAULT_BACKWARD)) {
        engine_names_with(ENGINE_OPT_FAULT_BACKWARD, who, sizeof who);
        snprintf(err, errlen, "--fail-phase backward: %s has no backward fault point (%s ha%s)", eng->name, who,
                 strchr(who, ' ') ? "ve" : "s");
        return -1;
    }
    if (run_cfg->fail_phase == FAULT_CHECKPOINT && !(eng->options & ENGINE_OPT_FAULT_CHECKPOINT)) {
        engine_names_with(ENGINE_OPT_FAULT_CHECKPOINT, who, sizeof who);
        snprintf(err, errlen, "--fail-phase checkpoint: %s takes no checkpoint (%s do%s)", eng->name, who,
                 strchr(who, ' ') ? "" : "es");
        return -1;
    }
    return 0;
}

/* Threads held at once by the probe below, each waiting until it is let go. */
typedef struct thread_probe {
    pthread_mutex_t lock;
    pthread_cond_t go;
    int released;
} thread_probe;

static void *probe_thread(void *arg)
{
    thread_probe *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->released) pthread_cond_wait(&p->go, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* How many of `want` threads can run at once now (started, held, then ended); -1 when the
 * probe itself cannot be set up, or a thread was refused for another reason than the limit. */
static int threads_startable(int want)
{
    thread_probe p = {.released = 0};
    pthread_t *t = calloc((size_t)want, sizeof *t);
    pthread_attr_t attr;
    if (!t || pthread_mutex_init(&p.lock, NULL) != 0) {
        free(t);
        return -1;
    }
    int n = -1, refused = 0;
    if (pthread_cond_init(&p.go, NULL) == 0) {
        if (pthread_attr_init(&attr) == 0) {
            /* (the default stack: a small one can be refused for a reason of its own — a build
             * with CUDA's libraries has more thread-local storage than 64 KiB holds, EINVAL —
             * and the stacks are address space, not memory, until touched) */
            n = 0;
            while (n < want && (refused = pthread_create(&t[n], &attr, probe_thread, &p)) == 0) n++;
            pthread_attr_destroy(&attr);
            pthread_mutex_lock(&p.lock);
            p.released = 1;
            pthread_cond_broadcast(&p.go);
            pthread_mutex_unlock(&p.lock);
            for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        }
        pthread_cond_destroy(&p.go);
    }
    pthread_mutex_destroy(&p.lock);
    free(t);
    /* only the limit's refusal (EAGAIN) says how many can start; any other is the probe's own */
    return refused && refused != EAGAIN ? -1 : n;
}

/* Threads a run starts beside its --threads team: the backend's stream workers, the
 * watchdog, the GPU clock's sampler, the host Adam pool's leader. */
enum { THREADS_BESIDE_TEAM = 8 };

/* --threads N under a limit on this user's processes (ulimit -u, RLIMIT_NPROC, which counts
 * threads too): the OpenMP runtime aborts the process when it cannot start its team, which left
 * a log without its JSON; so the threads are tried first, before anything is written, and a
 * request the limit cannot honour is bad input.  (Root is not held to the limit.)  0, or -1 with
 * the reason in err. */
static int threads_refused(const run_config *run_cfg, char *err, size_t errlen)
{
    struct rlimit lim;
    if (geteuid() == 0 || getrlimit(RLIMIT_NPROC, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = run_cfg->eng.threads > 0 ? run_cfg->eng.threads : cores > 0 ? (int)cores : 1;
    const int want = threads - 1 + THREADS_BESIDE_TEAM; /* (this thread is one of the team) */
    const int could = threads_startable(want);
    if (could < 0 || could >= want) return 0;
    snprintf(err, errlen, "--threads %d%s: only %d more threads can start under this user's process limit (ulimit -u "
             "%llu), and a run needs %d (its threads and %d of its own): lower --threads or raise the limit", threads,
             run_cfg->eng.threads > 0 ? "" : " (0: every core)", could, (unsigned long long)lim.rlim_cur, want,
             THREADS_BESIDE_TEAM - 1);
    return -1;
}

/* What eng's options become on machine `machine` of the job (engine_vtbl.for_machine): 0, or
 * -1 with err. */
static int options_for_machine(const engine_vtbl *eng, engine_config *e, int machine, char *err, size_t errlen)
{
    return eng && eng->for_machine ? eng->for_machine(e, machine, err, errlen) : 0;
}

/* The machines the ranks are on (comm.h), for the engines; and eng's options this machine's. */
static int machines_of(run_config *run_cfg, const engine_vtbl *eng, const comm_world *comm, char *err, size_t errlen)
{
    run_cfg->eng.hosts = comm->machines;
    run_cfg->eng.host_index = comm->machine;
    run_cfg->eng.rank_host = comm->world > 1 ? comm->rank_machine : NULL;
    return options_for_machine(eng, &run_cfg->eng, comm->machine, err, errlen);
}

/* The checks every invocation passes before it runs anything, in the order they are made:
 * the threads the limit allows, the hosts, MPI for --ranks, the ranks' options alike and
 * their number, and what --calibrate and --predict combine with.  0, or -1 after saying why. */
static int command_refused(run_config *run_cfg, const comm_world *comm, char *err, size_t errlen)
{
    if (threads_refused(run_cfg, err, errlen) != 0) {
        if (comm->world > 1) fprintf(stderr, "aebench: rank %d: %s\n", comm->rank, err);
        else fprintf(stderr, "aebench: %s\n", err);
        return -1;
    }
    if (comm->world == 1 && cli_resolve_hosts(run_cfg, err, errlen) != 0) {
        fprintf(stderr, "aebench: %s\n", err);
        return -1;
    }
    if (run_cfg->ranks > 1 && !comm_has_mpi() && !run_cfg->predict && !run_cfg->dry_run) {
        /* (--predict and --dry-run only say what N ranks would take: they start none) */
        fprintf(stderr, "aebench: --ranks %d needs MPI, and this aebench was built without it (make deps "
                        "installs MPICH; then make)\n", run_cfg->ranks);
        return -1;
    }
    if (comm->world > 1 && same_options_everywhere(comm, run_cfg) != 0) return -1;
    if (comm->world > 1 && run_cfg->ranks > 0 && run_cfg->ranks != comm->world) {
        if (comm->rank == 0)
            fprintf(stderr, "aebench: --ranks %d, but mpirun started %d ranks\n", run_cfg->ranks, comm->world);
        return -1;
    }
    if ((run_cfg->calibrate || run_cfg->predict) && (run_cfg->config_runs || (run_cfg->find_max && !run_cfg->predict) ||
                                           (run_cfg->calibrate && run_cfg->predict) || (run_cfg->predict && comm->world > 1))) {
        if (comm->rank == 0)
            fprintf(stderr, "aebench: --calibrate and --predict take one configuration, not a run list, and one "
                            "at a time; --predict runs on one process (--ranks N says the world it predicts), "
                            "--calibrate under mpirun or --ranks N measures the collectives; --find-max only "
                            "with --predict\n");
        return -1;
    }
    return 0;
}

/* Whether this is a sweep: -m all (but for its dry run), a run-list config or --find-max. */
static int is_sweep(const run_config *run_cfg)
{
    return !run_cfg->calibrate && !run_cfg->predict &&
           (run_cfg->config_runs || run_cfg->find_max || (strcmp(run_cfg->method, "all") == 0 && !run_cfg->dry_run));
}

/* --search, -m all, run-list configs and --find-max run their runs as child processes
 * (--search: --verify's), on one process of their own that opens no backend: a CUDA context
 * here would take GPU memory from every child it starts.  Their exit code. */
static int run_as_children(int argc, char **argv, const run_config *run_cfg, const comm_world *comm, run_signals **sig)
{
    if (run_cfg->search && run_cfg->config_runs) {
        fprintf(stderr, "aebench: --search takes one model and its budgets, not a run list (--config with "
                        "\"runs\")\n");
        return EXIT_BAD_INPUT;
    }
    if (comm->world > 1) {
        if (comm->rank == 0)
            fprintf(stderr, "aebench: %s start%s runs as child processes: run %s without mpirun (--ranks N "
                            "says the world)\n",
                    run_cfg->search ? "--search" : "-m all, run-list configs and --find-max", run_cfg->search ? "s its" : " their",
                    run_cfg->search ? "it" : "them");
        return EXIT_BAD_INPUT;
    }
    /* (a sweep's child ends with its parent, and records it; --search's children too) */
    run_signals_stop(*sig);
    *sig = NULL;
    return run_cfg->search ? search_main(argc, argv, run_cfg) : sweep_main(argc, argv, run_cfg);
}

/* --ranks N started from here: what the ranks would refuse, refused before anything starts
 * (an engine's options per machine: the first machine's are checked).  0, or -1 with err. */
static int job_refused(const run_config *run_cfg, char *err, size_t errlen)
{
    const engine_vtbl *eng = engine_find(run_cfg->method);
    run_config probe = *run_cfg;
    err[0] = '\0';
    if (options_for_machine(eng, &probe.eng, 0, err, errlen) == 0 &&
        cli_resolve_ranks(&probe, run_cfg->ranks, cli_ranks_per_machine(run_cfg), err, errlen) == 0 && eng &&
        engine_config_refused(eng, &probe.eng, err, errlen) == 0 && fault_phase_refused(run_cfg, eng, err, errlen) == 0 &&
        option_unused(run_cfg, eng, run_cfg->ranks, err, errlen) == 0)
        err[0] = '\0';
    return err[0] ? -1 : 0;
}

/* This rank's backend: one rank per GPU (the local rank picks it), each with its share of the
 * machine's cores, and the CPU preset when it runs on the CPU.  NULL after saying why. */
static gpt_backend *rank_backend(run_config *run_cfg, const comm_world *comm)
{
    if (comm->world > 1 && run_cfg->eng.device != DEVICE_CPU) {
        const int gpus = gpt_cuda_device_count();
        if (gpus > 0 && comm->local_world > gpus) {
            if (comm->local_rank == 0)
                fprintf(stderr, "aebench: %d ranks on this machine but %d GPU%s (one rank per GPU; "
                                "--device cpu runs them on the CPU backend)\n", comm->local_world, gpus,
                        gpus == 1 ? "" : "s");
            return NULL;
        }
    }
    /* The ranks of one machine share its cores: by default each takes its share for its CPU
     * threads (host Adam pool, CPU backend), not all of them each.  (After the options were
     * compared: machines with other core counts give other shares.) */
    if (run_cfg->eng.threads == 0 && comm->local_world > 1) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        run_cfg->eng.threads = cores > comm->local_world ? (int)(cores / comm->local_world) : 1;
    }
    gpt_backend *be = open_backend(run_cfg, comm->local_rank);
    if (!be) {
        if (comm->rank == 0)
            fprintf(stderr, "aebench: --device %s is not usable here (see above)\n",
                    run_cfg->eng.device == DEVICE_CUDA ? "cuda" : "cpu");
        return NULL;
    }
    run_cfg->eng.nccl = run_cfg->eng.device == DEVICE_CUDA; /* (a GPU machine file's prediction: its own) */
    if (run_cfg->eng.device == DEVICE_CPU) {
        /* (--predict with another machine's file predicts that machine: no CPU preset) */
        if (!(run_cfg->predict && run_cfg->machine_path[0]) && cli_apply_cpu_preset(run_cfg) && comm->rank == 0)
            printf("aebench: no GPU in use and no model shape given: CPU preset %s\n",
                   cli_cpu_preset_text());
    }
    return be;
}

/* What this process's run is refused for once its backend is known: the ranks' batch and
 * machines, the engine's own checks, the --machine file.  0, or -1 with err. */
static int run_refused(run_config *run_cfg, const engine_vtbl *only, int world, const comm_world *comm, char *err,
                       size_t errlen)
{
    if (cli_resolve_ranks(run_cfg, world, comm->world == 1 ? cli_ranks_per_machine(run_cfg) : comm->local_world, err, errlen) ||
        machines_of(run_cfg, only, comm, err, errlen))
        return -1;
    /* bf16, --dpu and --offload nvme only for engines that implement them (refuse rather
     * than silently run something else under that label), then the engine's own checks:
     * nothing is written.  A sweep's child for such an engine ends here too. */
    if (only && (engine_config_refused(only, &run_cfg->eng, err, errlen) || fault_phase_refused(run_cfg, only, err, errlen) ||
                 option_unused(run_cfg, only, world, err, errlen)))
        return -1;
    /* --machine FILE on a training run: what -w auto sizes a windowed engine's window by; a
     * file that cannot be read, or has no entry for this shape, would be passed over in silence */
    if (run_cfg->machine_path[0] && !run_cfg->calibrate && !run_cfg->predict && !run_cfg->dry_run) {
        machine_rates m;
        if (machine_load(run_cfg->machine_path, &run_cfg->eng, &m, err, errlen) != 0) return -1;
    }
    return 0;
}

/* --calibrate (measure this machine into its machine file) or --predict (read one and say what
 * the run would take).  Their exit code. */
static int calibrate_or_predict(run_config *run_cfg, gpt_backend *be, const comm_world *comm, char *err, size_t errlen)
{
    char path[PATH_MAX + 256];
    int code = 0;
    /* --offload nvme without --nvme-dir: the disk tier a run would use, the results
     * directory (run_resolve_disk_budget), is the one measured and looked up */
    if (run_cfg->eng.offload == OFFLOAD_NVME && !run_cfg->eng.nvme_dir[0] && strlen(run_cfg->results_dir) < sizeof run_cfg->eng.nvme_dir)
        memcpy(run_cfg->eng.nvme_dir, run_cfg->results_dir, strlen(run_cfg->results_dir) + 1);
    /* (--predict reads: it makes no directory; --calibrate writes there) */
    if (run_cfg->machine_path[0]) snprintf(path, sizeof path, "%s", run_cfg->machine_path);
    else if ((run_cfg->calibrate && report_make_dirs(run_cfg->results_dir, err, errlen) != 0) ||
             machine_default_path(path, sizeof path, run_cfg->results_dir, be) != 0) {
        fprintf(stderr, "aebench: %s\n", err[0] ? err : "results directory path too long");
        code = EXIT_BAD_INPUT;
    }
    if (!code && run_cfg->calibrate)
        code = comm->world > 1 ? machine_calibrate_collectives(run_cfg, be, path, comm) : machine_calibrate(run_cfg, be, path);
    if (!code && run_cfg->predict) {
        machine_rates m;
        if (machine_load(path, &run_cfg->eng, &m, err, errlen) != 0) {
            fprintf(stderr, "aebench: %s\n", err);
            code = EXIT_BAD_INPUT;
        } else {
            /* fits: under the budgets per rank a run would have there (with --machine,
             * perhaps another machine's file: its device is not this CPU's stand-in) */
            size_t g, h;
            run_cfg->eng.nccl = m.gpu_backend;
            machine_budgets(run_cfg, &m, engine_local_world(&run_cfg->eng), run_cfg->eng.device == DEVICE_CPU && !run_cfg->machine_path[0],
                            &g, &h);
            code = machine_predict(run_cfg, &m, g, h);
        }
    }
    return code;
}

/* --dry-run: what a sweep needs to know before it runs this configuration — the backend, the
 * shape after the CPU preset, and the budgets (free memory as a child sees it) — then each
 * engine's plan (only's, or -m all's).  Exit code 0. */
static int dry_run(run_config *run_cfg, const engine_vtbl *only, gpt_backend *be, const comm_world *comm, char *err,
                   size_t errlen)
{
    size_t gpu_budget, host_budget;
    run_resolve_budgets(run_cfg, be, &gpu_budget, &host_budget);
    const gpt_shape *sh = &run_cfg->eng.shape;
    report_to_parent(run_cfg, "backend %s", run_cfg->eng.device == DEVICE_CUDA ? "cuda" : "cpu");
    report_to_parent(run_cfg, "preset %d", run_cfg->cpu_preset);
    report_to_parent(run_cfg, "shape %d %d %d %d %d %d", sh->layers, sh->hidden, sh->heads, sh->seq, sh->batch,
                     sh->vocab);
    report_to_parent(run_cfg, "budget-gpu %zu", gpu_budget);
    report_to_parent(run_cfg, "budget-host %zu", host_budget);
    char machine[PATH_MAX + 256];
    if (run_cfg->machine_path[0]) report_to_parent(run_cfg, "machine %s", run_cfg->machine_path);
    else if (machine_default_path(machine, sizeof machine, run_cfg->results_dir, be) == 0)
        report_to_parent(run_cfg, "machine %s", machine);
    if (run_cfg->eng.offload == OFFLOAD_NVME) {
        /* The disk budget bounds --find-max too; the directory must exist by now. */
        size_t disk_budget = 0;
        if (run_resolve_disk_budget(&run_cfg->eng, run_cfg->results_dir, &disk_budget, err, errlen) == 0)
            report_to_parent(run_cfg, "budget-disk %zu", disk_budget);
        else if (comm->rank == 0)
            printf("aebench: %s (no disk budget known)\n", err);
    }
    run_cfg->eng.gpu_budget = gpu_budget;
    run_cfg->eng.host_budget = host_budget;
    for (int i = 0; i < engine_count(); i++)
        if ((only ? engine_at(i) == only : engine_in_all(engine_at(i))) &&
            !engine_config_refused(engine_at(i), &run_cfg->eng, err, errlen))
            run_dry(run_cfg, engine_at(i));
    return 0;
}

/* The training run itself: open its data, let the engine and the results directory refuse it
 * before anything is written, then train with its provenance.  Its exit code. */
static int train(int argc, char **argv, run_config *run_cfg, const engine_vtbl *only, gpt_backend *be,
                 const comm_world *comm, run_signals *sig, char *err, size_t errlen)
{
    data_source data;
    if (run_cfg->data_path[0]) {
        if (data_open_file(&data, run_cfg->data_path, run_cfg->eng.shape.vocab, run_cfg->eng.shape.batch, run_cfg->eng.shape.seq, err,
                           errlen) != 0) {
            if (comm->rank == 0) fprintf(stderr, "aebench: %s\n", err);
            return EXIT_BAD_INPUT;
        }
    } else {
        data_open_synthetic(&data, run_cfg->eng.shape.vocab, run_cfg->eng.shape.batch, run_cfg->eng.shape.seq, run_cfg->eng.seed);
    }
    /* (what the engine finds says the run cannot be made — a recovery past --iters, say —
     * refused before the results directory is made) */
    const int engine_code = only && only->refused_before_writing ? only->refused_before_writing(&run_cfg->eng, run_cfg->iters, comm) : 0;
    if (engine_code) {
        data_close(&data);
        return engine_code;
    }
    /* (after the data, which writes nothing when it is refused; rank 0 writes the results: it
     * decides, and every rank ends alike) */
    int refused = comm->rank == 0 && run_outputs_refused(run_cfg, 1, err, errlen) != 0, any = refused;
    if (comm->world > 1 && comm_max_int(comm, refused, &any) != 0) any = 1;
    if (any) {
        if (refused) fprintf(stderr, "aebench: %s\n", err);
        data_close(&data);
        return EXIT_BAD_INPUT;
    }
    /* (how the run was made, for its record: its build and its own command line's settings) */
    run_provenance prov;
    provenance_of_run(&prov, argc, argv, comm->world, run_cfg);
    run_cfg->provenance = &prov;
    const int code = run_engine(run_cfg, only, be, &data, comm, sig);
    provenance_free(&prov);
    data_close(&data);
    return code;
}

/* main's work; *sig is the signal watcher (run.h), stopped and NULL before what handles
 * signals its own way or starts other programs. */
static int aebench_main(int argc, char **argv, run_signals **sig)
{
    comm_world comm;
    const int comm_rc = comm_init(&comm, &argc, &argv);
    if (comm_rc == COMM_NOT_A_RANK) {
        comm_finalize(&comm);
        return EXIT_BAD_INPUT;
    }
    if (comm_rc != 0) return EXIT_RUN_ERROR;

    run_config run_cfg;
    char err[1024];
    cli_outcome outcome = cli_parse(argc, argv, &run_cfg, err, sizeof err);
    /* (a supervised job's ranks found each other: its start-up deadline is met; --job-notes is
     * read first, so a rank that refuses the rest still tells its supervisor) */
    if (comm.world > 1) launch_note_started(run_cfg.job_notes);
    if (outcome != CLI_RUN) {
        if (outcome == CLI_ERROR && comm.rank == 0) fprintf(stderr, "aebench: %s\n", err);
        comm_finalize(&comm);
        return outcome == CLI_DONE ? 0 : EXIT_BAD_INPUT;
    }
    if (command_refused(&run_cfg, &comm, err, sizeof err) != 0) {
        comm_finalize(&comm);
        return EXIT_BAD_INPUT;
    }
    if (run_cfg.search || is_sweep(&run_cfg)) {
        const int code = run_as_children(argc, argv, &run_cfg, &comm, sig);
        comm_finalize(&comm);
        return code;
    }
    if (run_cfg.ranks > 1 && comm.world == 1 && !run_cfg.dry_run && !run_cfg.predict) {
        /* --ranks N: this process starts the job (mpiexec) and supervises it */
        if (job_refused(&run_cfg, err, sizeof err) != 0) {
            fprintf(stderr, "aebench: %s\n", err);
            comm_finalize(&comm);
            return EXIT_BAD_INPUT;
        }
        comm_finalize(&comm);
        /* (the supervisor reads SIGINT and SIGTERM itself, and passes them on to the job) */
        run_signals_stop(*sig);
        *sig = NULL;
        return launch_ranks(argc, argv, &run_cfg);
    }

    gpt_backend *be = rank_backend(&run_cfg, &comm);
    if (!be) {
        comm_finalize(&comm);
        return EXIT_BAD_INPUT;
    }
    /* (a --ranks dry run resolves the global batch for the ranks it would start) */
    const int world = comm.world == 1 && run_cfg.ranks > 1 ? run_cfg.ranks : comm.world;
    const engine_vtbl *only = strcmp(run_cfg.method, "all") == 0 ? NULL : engine_find(run_cfg.method);
    int code;
    if (run_refused(&run_cfg, only, world, &comm, err, sizeof err) != 0) {
        if (comm.rank == 0) fprintf(stderr, "aebench: %s\n", err);
        code = EXIT_BAD_INPUT;
    } else if (run_cfg.calibrate || run_cfg.predict) {
        code = calibrate_or_predict(&run_cfg, be, &comm, err, sizeof err);
    } else if (run_cfg.dry_run) {
        code = dry_run(&run_cfg, only, be, &comm, err, sizeof err);
    } else {
        code = train(argc, argv, &run_cfg, only, be, &comm, *sig, err, sizeof err);
    }
    close_backend(be, run_cfg.eng.device);
    comm_finalize(&comm);
    return code;
}

int main(int argc, char **argv)
{
    /* SIGINT and SIGTERM blocked before any thread exists (MPI's, the OpenMP pool, the CPU
     * backend's, the watchdog): a run stopped by one writes its record first (run.h).
     * Without the watcher, a signal ends the process at once, as it would anyway. */
    run_signals *sig = NULL;
    if (run_signals_start(&sig) != 0) sig = NULL;
    /* --rerun FILE.json: the command line that record's settings make runs instead (rerun.h) */
    rerun_plan rerun;
    int code = rerun_prepare(argc, argv, &rerun);
    if (code == RERUN_NONE) code = aebench_main(argc, argv, &sig);
    else if (code == RERUN_READY) code = aebench_main(rerun.argc, rerun.argv, &sig);
    rerun_plan_free(&rerun);
    run_signals_stop(sig);
    return code;
}
