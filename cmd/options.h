/*
 * options.h — the driver's option table: every option of aebench's own (the model, the
 * optimizer, the budgets, the faults, the sweeps, --search) is declared here, once.  The
 * engines' options are declared by the engines (engines/option_decl.h): each engine's own in
 * its file (engine_vtbl.own_options), those several take in engines/registry.c.
 *
 * Everything else about the options comes from these tables (cmd/cli.c puts them together at
 * start-up, and says at once where they contradict each other: a name, a letter or a hash slot
 * twice): the option ids, getopt's tables, the parser's dispatch, the keys a config may hold,
 * --help, the defaults, and the per-option hashes that the ranks compare and the results
 * fingerprint holds.  tests/test_docs.sh checks the README's flag table against --help, and
 * tests/test_fuzz_grammar.sh the fuzzer's grammar: a new option fails both until they say
 * what it is.
 *
 * X(ID, name, short, kind, arg, set, default, owner, scope, use, help):
 *   ID       OPT_<ID> in cli.c
 *   name     the long name (--name, and the key in a config)
 *   short    its letter (-m), or 0
 *   kind     what it takes: ARG_NONE (a switch; true/false in a config), ARG_INT, ARG_NUM,
 *            ARG_TEXT, or ARG_TEXT_OR_INT (text, which a config may give as a whole number)
 *   arg      the value's name in --help (NULL: a switch)
 *   set      the run_config field it sets and how its value is checked (cli.c's setters):
 *            INT(field, lo, hi), INT_NOTE(field, lo, hi, note), NUM(field, rule, note),
 *            WORDS(field, {word, value}, ...), PATH(field, what), BYTES(field), FLAG(field),
 *            SPECIAL(field, setter), SPECIAL_INT(field, lo, hi, setter), or NO_FIELD (it acts
 *            in cli_parse itself)
 *   default  the value set_defaults gives, as the text the option takes (NULL: the field's
 *            zero, which the run resolves: "free memory", "min(2, ranks)", ...; --method's is
 *            the registry's first engine)
 *   owner    whose option it is: "driver" or "search"
 *   scope    what it changes: FP(slot): the results (the fingerprint, and all ranks must
 *            agree); AGREE(slot): what every rank does, so all ranks must agree, but not the
 *            results (where it writes, how often it logs, threads); LOCAL: neither.  slot is
 *            the option's place in the hashes (0, 1, 2, ... with no gaps over this table and
 *            the engines'): the order they had before these tables, so that results made
 *            before them keep their fingerprints (--resume finds them); a new option takes the
 *            next free one (the start-up check names it).
 *   use      where it may be given: CFG (a config may hold it), KID (handed on to the child
 *            runs of a sweep), SRCH (one of --search's own: only with --search, typed by
 *            hand); 0: typed by hand and kept by this process
 *   help     its line in --help
 */
#ifndef AEBENCH_OPTIONS_H
#define AEBENCH_OPTIONS_H

/* clang-format off */
#define AEBENCH_OPTIONS(X) \
    X(METHOD, "method", 'm', ARG_TEXT, "NAME", SPECIAL(method, set_method), \
      NULL, "driver", FP(0), CFG | KID, \
      "engine to run, or 'all' (default: the first method above)") \
    X(LAYERS, "layers", 'l', ARG_INT, "L", INT(eng.shape.layers, 1, MAX_DIM), \
      "16", "driver", FP(1), CFG | KID, \
      "transformer layers (default 16)") \
    X(HIDDEN, "hidden", 'h', ARG_INT, "H", INT(eng.shape.hidden, 1, MAX_DIM), \
      "2048", "driver", FP(2), CFG | KID, \
      "hidden size (default 2048)") \
    X(BATCH, "batch", 'b', ARG_INT, "B", INT(eng.shape.batch, 1, MAX_DIM), \
      "4", "driver", FP(5), CFG | KID, \
      "micro-batch size per rank (default 4)") \
    X(HEADS, "heads", 0, ARG_INT, "N", INT(eng.shape.heads, 1, MAX_DIM), \
      "16", "driver", FP(3), CFG | KID, \
      "attention heads (default 16)") \
    X(SEQ, "seq", 0, ARG_INT, "T", INT(eng.shape.seq, 1, MAX_SEQ), \
      "1024", "driver", FP(4), CFG | KID, \
      "sequence length (default 1024)") \
    X(VOCAB, "vocab", 0, ARG_INT, "V", INT_NOTE(eng.shape.vocab, MIN_VOCAB, MAX_VOCAB, " (two tokens or more to predict; at most what its padding to a multiple of 128 leaves in an int)"), \
      "50257", "driver", FP(6), CFG | KID, \
      "vocabulary size, 2 or more, padded to a multiple of 128 (default 50257)") \
    X(ITERS, "iters", 0, ARG_INT, "N", INT(iters, 1, MAX_ITERS), \
      "50", "driver", FP(26), CFG | KID, \
      "training iterations (default 50)") \
    X(LOG_INTERVAL, "log-interval", 0, ARG_INT, "N", INT(log_interval, 1, MAX_ITERS), \
      "10", "driver", AGREE(27), CFG | KID, \
      "iterations per log line (default 10)") \
    X(SEED, "seed", 0, ARG_INT, "S", INT(eng.seed, 0, INT_MAX), \
      "1234", "driver", FP(16), CFG | KID, \
      "seed of initialisation and synthetic data (default 1234)") \
    X(RESULTS, "results", 0, ARG_TEXT, "DIR", PATH(results_dir, "directory"), \
      "results", "driver", AGREE(28), CFG | KID, \
      "where logs and JSON go (default results)") \
    X(DEVICE, "device", 0, ARG_TEXT, "cpu|cuda", SPECIAL(eng.device, set_device), \
      NULL, "driver", FP(17), CFG | KID, \
      "compute backend (default cuda if usable)") \
    X(CONFIG, "config", 0, ARG_TEXT, "FILE.json", NO_FIELD, \
      NULL, "driver", LOCAL, KID, \
      "read options, or a run list (a case), from JSON") \
    X(DTYPE, "dtype", 0, ARG_TEXT, "fp32|bf16", WORDS(eng.bf16, {"fp32", 0}, {"bf16", 1}), \
      "fp32", "driver", FP(18), CFG | KID, \
      "activations and working weights (default fp32; bf16 emulated on the CPU backend)") \
    X(MATH, "math", 0, ARG_TEXT, "tf32|fp32", WORDS(eng.tf32, {"tf32", 1}, {"fp32", 0}), \
      "tf32", "driver", FP(19), CFG | KID, \
      "GPU matmuls on TF32 tensor cores, or strict fp32 (default tf32)") \
    X(GPU_MEM, "gpu-mem-limit", 0, ARG_TEXT_OR_INT, "SIZE", BYTES(gpu_mem_limit), \
      NULL, "driver", FP(30), CFG | KID, \
      "GPU memory budget, e.g. 32G (default: free memory)") \
    X(CPU_MEM, "cpu-mem-limit", 0, ARG_TEXT_OR_INT, "SIZE", BYTES(cpu_mem_limit), \
      NULL, "driver", FP(31), CFG | KID, \
      "host memory budget, e.g. 90G (default: 90% of available memory)") \
    X(DRY_RUN, "dry-run", 0, ARG_NONE, NULL, FLAG(dry_run), \
      NULL, "driver", AGREE(32), CFG | KID, \
      "print the memory plan and parameter count, allocate nothing") \
    X(SETUP_NOTICE, "setup-notice", 0, ARG_INT, "MIB", INT(setup_notice_mib, 0, INT_MAX), \
      "8192", "driver", LOCAL, CFG | KID, \
      "say 'setting up: ...' on stdout before a set-up of at least MIB MiB of GPU and host memory together (default 8192; 0: every run)") \
    X(DATA, "data", 0, ARG_TEXT, "FILE", PATH(data_path, NULL), \
      NULL, "driver", FP(29), CFG | KID, \
      "train on little-endian uint16 tokens (default: synthetic corpus)") \
    X(RECOMPUTE, "recompute", 0, ARG_TEXT, "full|selective|none", WORDS(eng.recompute, {"full", GPT_RECOMPUTE_FULL}, {"selective", GPT_RECOMPUTE_SELECTIVE}, {"none", GPT_RECOMPUTE_NONE}), \
      "full", "driver", FP(8), CFG | KID, \
      "what the backward recomputes (default full: each layer from its input, the artifact's; selective: the LayerNorms, attention and GELU, keeping the GEMM outputs; none: keeps every activation)") \
    X(NO_CKPT, "no-ckpt", 0, ARG_NONE, NULL, SPECIAL(eng.recompute, set_no_ckpt), \
      NULL, "driver", LOCAL, CFG | KID, \
      "--recompute none (the older name)") \
    X(LR, "lr", 0, ARG_NUM, "X", NUM(eng.optim.lr, NUM_POSITIVE, ""), \
      "1.5e-4", "driver", FP(10), CFG | KID, \
      "peak learning rate (default 1.5e-4)") \
    X(MIN_LR, "min-lr", 0, ARG_NUM, "X", NUM(eng.optim.min_lr, NUM_NON_NEGATIVE, ""), \
      "1e-5", "driver", FP(11), CFG | KID, \
      "final learning rate of the cosine decay (default 1e-5)") \
    X(DECAY_ITERS, "lr-decay-iters", 0, ARG_INT, "N", INT(eng.optim.decay_iters, 1, MAX_ITERS), \
      "320000", "driver", FP(12), CFG | KID, \
      "cosine decay length (default 320000)") \
    X(WARMUP, "lr-warmup-fraction", 0, ARG_NUM, "F", NUM(eng.optim.warmup_fraction, NUM_FRACTION, ""), \
      "0.01", "driver", FP(13), CFG | KID, \
      "warm-up fraction of the decay (default 0.01)") \
    X(WEIGHT_DECAY, "weight-decay", 0, ARG_NUM, "X", NUM(eng.optim.weight_decay, NUM_NON_NEGATIVE, ""), \
      "0.01", "driver", FP(14), CFG | KID, \
      "AdamW weight decay (default 0.01)") \
    X(CLIP, "clip-grad", 0, ARG_NUM, "X", NUM(eng.optim.clip, NUM_NON_NEGATIVE, ""), \
      "1.0", "driver", FP(15), CFG | KID, \
      "global-norm clipping, 0 disables (default 1.0)") \
    X(THREADS, "threads", 0, ARG_INT, "N", INT_NOTE(eng.threads, 0, MAX_THREADS, " (CPU threads; 0: all cores)"), \
      "0", "driver", AGREE(20), CFG | KID, \
      "CPU threads, 0 = all cores (default 0)") \
    X(RANKS, "ranks", 0, ARG_INT, "N", INT(ranks, 1, INT_MAX), \
      NULL, "driver", LOCAL, CFG | KID, \
      "data-parallel ranks on this machine: starts mpiexec -n N itself (default 1; under mpirun: the world size)") \
    X(PROFILE, "profile", 0, ARG_NONE, NULL, FLAG(profile), \
      NULL, "driver", LOCAL, CFG | KID, \
      "time every kernel-set op of every step (an event pair around each; the host waits at each step's end): where the step goes, op family by family, with TFLOP/s and GB/s, in the log, stdout and JSON") \
    X(HOSTS, "hosts", 0, ARG_TEXT, "FILE", PATH(hosts_path, "file"), \
      NULL, "driver", LOCAL, CFG | KID, \
      "--ranks N on the machines mpiexec's hostfile FILE lists (MPICH host:S, Open MPI host slots=S; the first must be this one, where rank 0 runs): passed to mpiexec, and -m all, --find-max, --search and the plans split each machine's memory by its ranks") \
    X(GLOBAL_BATCH, "global-batch", 0, ARG_INT, "G", INT(eng.global_batch, 1, INT_MAX), \
      NULL, "driver", FP(24), CFG | KID, \
      "samples per optimizer step over all ranks, as Megatron's (default B x ranks); G/(B x ranks) micro-batches each") \
    X(SAVE_PARAMS, "save-params", 0, ARG_TEXT, "FILE", PATH(save_params, "file"), \
      NULL, "driver", AGREE(33), CFG | KID, \
      "after training, write every parameter (fp32, little-endian, the canonical [embed | layer 0 | ...] layout) to FILE") \
    X(FAIL_AT, "fail-at", 0, ARG_INT, "I", INT(fail_at, 1, MAX_ITERS), \
      NULL, "driver", FP(34), CFG | KID, \
      "fault injection: rank --fail-rank kills itself (SIGKILL) at the start of iteration I") \
    X(FAIL_RANK, "fail-rank", 0, ARG_TEXT, "R[,R...]", SPECIAL(fail_ranks, set_fail_ranks), \
      NULL, "driver", FP(35), CFG | KID, \
      "the rank(s) that --fail-at kills, at once (default 0)") \
    X(FAIL_PHASE, "fail-phase", 0, ARG_TEXT, "forward|backward|checkpoint", WORDS(fail_phase, {"forward", FAULT_FORWARD}, {"backward", FAULT_BACKWARD}, {"checkpoint", FAULT_CHECKPOINT}), \
      "forward", "driver", FP(37), CFG | KID, \
      "with --fail-at: where in iteration I the rank dies: its start, its backward's, or its checkpoint's middle (these two where the engine has such a point; the others refuse them) (default forward)") \
    X(FAIL_KIND, "fail-kind", 0, ARG_TEXT, "software|hardware|stop", WORDS(fail_kind, {"software", FAIL_SOFTWARE}, {"hardware", FAIL_HARDWARE}, {"stop", FAIL_STOP}), \
      "software", "driver", FP(36), CFG | KID, \
      "with --fail-at: what it does: kill the process, or (hardware) its machine too: --ranks deletes its in-memory checkpoints before relaunching, or (stop) stop it (SIGSTOP: a hung rank, for the watchdogs) (default software)") \
    X(FIND_MAX, "find-max", 0, ARG_NONE, NULL, FLAG(find_max), \
      NULL, "driver", LOCAL, CFG, \
      "find the largest layer count that trains (bisection over child runs)") \
    X(RESUME, "resume", 0, ARG_NONE, NULL, FLAG(resume), \
      NULL, "driver", LOCAL, 0, \
      "sweeps: skip runs whose JSON in the results directory says ok") \
    X(CALIBRATE, "calibrate", 0, ARG_NONE, NULL, FLAG(calibrate), \
      NULL, "driver", LOCAL, KID, \
      "measure this machine for --predict at the given shape, math and dtype into results/machine_HOST_DEVICE.json (or --machine FILE)") \
    X(PREDICT, "predict", 0, ARG_NONE, NULL, FLAG(predict), \
      NULL, "driver", LOCAL, KID, \
      "print each engine's predicted ms/iteration, its breakdown and plan from the machine file, train nothing") \
    X(MACHINE, "machine", 0, ARG_TEXT, "FILE", PATH(machine_path, "file"), \
      NULL, "driver", LOCAL, CFG | KID, \
      "the machine file --calibrate writes and --predict reads (default results/machine_HOST_DEVICE.json)") \
    X(SEARCH, "search", 0, ARG_NONE, NULL, FLAG(search), \
      NULL, "search", LOCAL, SRCH, \
      "every configuration of every engine (window, placement, ZeRO stage, --dpu, --offload, --clip-speculate, micro-batch, checkpointing) planned against the budgets and predicted from the machine file; prints the fastest with the command that runs each (what you give is fixed, the rest searched)") \
    X(LARGEST, "largest", 0, ARG_NONE, NULL, FLAG(search_largest), \
      NULL, "search", LOCAL, SRCH, \
      "--search: the largest -l that any configuration trains in the budgets, and the fastest there") \
    X(MIN_SAMPLES, "min-samples-per-s", 0, ARG_NUM, "X", NUM(min_samples_per_s, NUM_POSITIVE, " (samples per second)"), \
      NULL, "search", LOCAL, SRCH, \
      "--search --largest: the largest -l that still trains at X samples/s (predicted)") \
    X(TOP, "top", 0, ARG_INT, "K", INT(search_top, 1, INT_MAX), \
      "5", "search", LOCAL, SRCH, \
      "--search: how many configurations to print (default 5)") \
    X(OUT, "out", 0, ARG_TEXT, "FILE", PATH(search_out, "file"), \
      NULL, "search", LOCAL, SRCH, \
      "--search: write the fastest as a config that --config FILE runs") \
    X(VERIFY, "verify", 0, ARG_INT, "K", SPECIAL_INT(search_verify, 1, INT_MAX, set_verify), \
      NULL, "search", LOCAL, SRCH, \
      "--search: train the top K (each predicted 1% apart) and K random feasible configurations and print " \
      "predicted against measured") \
    X(HANG_TIMEOUT, "hang-timeout", 0, ARG_TEXT, "S|auto", SPECIAL(hang_timeout_s, set_hang_timeout), \
      "auto", "driver", AGREE(38), CFG | KID, \
      "every rank ends the job (exit 4) after S seconds (1 or more) without progress, naming where it waits and the rank that stopped; auto: 600 s while setting up, then max(30 s, 10 median steps); the --ranks supervisor ends a job none of whose ranks gets past MPI's start-up in S (auto: 120 s); 0: never (default auto)") \
    X(RELAUNCH_OF, "relaunch-of", 0, ARG_TEXT, "ACCOUNT", SPECIAL(relaunch, set_relaunch_of), \
      NULL, "driver", LOCAL, 0, \
      "set by --ranks on a relaunch, not by hand: how the job before ended, 'RAN_S FAILED_S FAILED_AT NOTE' (seconds it ran, when it failed in epoch seconds, the iteration a --fail-at struck or 0, a line); a recovered job's log and JSON record it") \
    X(JOB_NOTES, "job-notes", 0, ARG_TEXT, "DIR", SPECIAL(job_notes, set_job_notes), \
      NULL, "driver", LOCAL, 0, \
      "set by --ranks for its ranks, not by hand: the job's private directory (the supervisor's, mode 0700), where each rank notes that it started, refused its configuration or failed, and writes its heartbeat; one that is there but not a private directory of ours is refused") \
    X(REPORT_FD, "report-fd", 0, ARG_INT, "FD", SPECIAL_INT(report_fd, 3, INT_MAX, set_report_fd), \
      NULL, "driver", LOCAL, 0, \
      "set by a sweep (-m all, a run list, --find-max, --search --verify) for each run it starts, not by hand: the pipe the run writes its result lines to; such a run starts no sweep of its own, and takes the sweep's options its engine does not use without refusing them") \
    X(RERUN_OF, "rerun-of", 0, ARG_TEXT, "RECORD", SPECIAL(rerun_of, set_rerun_of), \
      NULL, "driver", LOCAL, 0, \
      "set by --rerun, not by hand: 'FINGERPRINT PATH' (16 hex digits, an absolute path) of the record it runs again; the run's JSON names it in rerun_of") \
    X(LIST_ENGINES, "list-engines", 0, ARG_NONE, NULL, NO_FIELD, \
      NULL, "driver", LOCAL, KID, \
      "print the names of the engines -m takes, one a line, and exit") \
    X(HELP, "help", 0, ARG_NONE, NULL, NO_FIELD, \
      NULL, "driver", LOCAL, KID, \
      "this text") \
    X(VERSION, "version", 0, ARG_NONE, NULL, NO_FIELD, \
      NULL, "driver", LOCAL, KID, \
      "print the version") \
    X(RERUN, "rerun", 0, ARG_TEXT, "FILE.json", PATH(rerun_path, "file"), \
      NULL, "driver", LOCAL, 0, \
      "run again the run a result's JSON records: its engine, options, seed, shape and ranks, after saying what differs here (commit, build, device, libraries); beside it only --results, --device and --hosts") \
    /* (end of the table) */

/* clang-format on */

#endif
