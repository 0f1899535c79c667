/*
 * machine.h — a calibrated model of the machine (--calibrate, --machine FILE, --predict).
 *
 * --calibrate measures what the engines' schedules are made of, with their own code paths
 * (model.h's layer, embedding and head, the backend's AdamW and copies, the host Adam pool):
 * per model shape, math mode and dtype, one layer's forward and backward (with recompute),
 * the embedding and the head, the device AdamW; PCIe each way and both ways at once (pinned);
 * the host Adam with the run's threads, and host copies.  One JSON file per machine,
 * results/machine_<host>_<device>.json, gathers them: an entry per shape, re-measured only
 * when missing or older than MACHINE_FRESH_DAYS.
 *
 * --predict reads it (or --machine FILE: another machine's, no GPU needed) and asks each
 * engine's predict function (engine.h), which walks its own schedule over these rates.
 *
 * The file's reading and writing is machine_file.c's, the measuring calibrate.c's (its disks
 * calibrate_disk.c's, its collectives calibrate_collectives.c's, with calibrate.h between
 * them), the predicting machine.c's.
 */
#ifndef AEBENCH_MACHINE_H
#define AEBENCH_MACHINE_H

#include "cli.h"
#include "../engines/engine.h"
#include "../engines/runtime/comm.h"

enum { MACHINE_FRESH_DAYS = 7 };
/* The file's format ("aebench_machine"): what machine_load reads, what --calibrate writes. */
enum { MACHINE_FORMAT = 1 };

/* The default machine file of this host and backend into out (results_dir/machine_H_D.json). */
int machine_default_path(char *out, size_t len, const char *results_dir, const gpt_backend *be);
/* --calibrate: measure the entry of run_cfg's shape (unless the file has a fresh one) and the
 * machine-wide rates, and write the file.  0, or an EXIT_* code (the reason on stderr). */
int machine_calibrate(const run_config *run_cfg, gpt_backend *be, const char *path);
/* Under mpirun: the collectives among the world's ranks (every rank calls it), what they
 * slow the compute beside them by, and the copy and host Adam rates each rank gets while every
 * rank works at once; merged into the file by rank 0.  0, or an EXIT_* code. */
int machine_calibrate_collectives(const run_config *run_cfg, gpt_backend *be, const char *path, const comm_world *comm);
/* Read `path` and take the compute entry of cfg's shape, math and dtype into out.  0, or
 * with one line in err: MACHINE_NO_ENTRY when the file is sound but has no entry for the
 * shape, EXIT_BAD_INPUT otherwise (a missing file, a missing or malformed field).  Both are
 * bad input to a run. */
enum { MACHINE_NO_ENTRY = 100 };
int machine_load(const char *path, const engine_config *cfg, machine_rates *out, char *err, size_t errlen);
/* The budgets per rank that a run of run_cfg plans with on machine m: --gpu-mem-limit /
 * --cpu-mem-limit, else what the file recorded; the `local` ranks of one machine share its
 * host memory (a --cpu-mem-limit is the machine's) and, with shared_device (the CPU backend's
 * stand-in for a device, on this machine), its device memory too. */
void machine_budgets(const run_config *run_cfg, const machine_rates *m, int local, int shared_device, size_t *gpu,
                     size_t *host);
/* Whether m's host Adam rate was measured over a region far from cfg's shard of the parameters
 * (every parameter on one rank, 1/N on N ranks): more than 2x off either way, on a GPU machine,
 * where --calibrate sweeps the run's shard (the CPU backend times one block).  Then `note` has
 * one line saying so (the rate depends on the region on some machines: two H200 processes ran
 * 0.44-0.47 ms per M parameters over 858 M and 0.31-0.32 over 4,930 M, and a calibration of
 * the default 16 layers' shard priced l48's updates 16-19% long). */
int machine_region_note(const machine_rates *m, const engine_config *cfg, char *note, size_t len);
/* Whether a host Adam rate swept over `region` M parameters stands for a shard of `shard` M: within
 * 2x either way (--calibrate keeps a fresh file's rates by it; machine_region_note). */
int machine_region_near(double region, double shard);
/* --predict: every engine asked (or run_cfg's one), its prediction and plan printed.  Exit code. */
int machine_predict(const run_config *run_cfg, const machine_rates *m, size_t gpu_budget, size_t host_budget);

#endif
