/*
 * search.h — aebench --search: which engine, with which settings, trains this model fastest
 * on this machine, and how large a model can it train.
 *
 * Every configuration the engines accept (engine; a windowed engine's window and placement;
 * the values each engine's options declare for the search, as a ZeRO stage on N ranks, --dpu,
 * --offload cpu|nvme, --clip-speculate; the micro-batch, each divisor of global batch / ranks;
 * activation checkpointing where an engine may go without) is planned exactly against the
 * budgets and, where it fits, predicted from the calibrated machine file (cmd/machine.h) by
 * the engine's own schedule walk.  Nothing is allocated or trained, unless --verify asks for it: then the
 * top K and K random feasible configurations train as child processes (as sweeps run theirs)
 * and the prediction is set against what they measured.
 */
#ifndef AEBENCH_SEARCH_H
#define AEBENCH_SEARCH_H

#include "cli.h"

/* Runs the search run_cfg describes (parsed from argc/argv), in a process with no backend of its
 * own (a --dry-run child says how a run resolves here).  Returns the exit code: 0, 1 when
 * --verify's runs failed or none is predicted, 2 for bad input (nothing written). */
int search_main(int argc, char **argv, const run_config *run_cfg);

/* The micro-batch sizes --search tries, which --calibrate measures in one call: -b where it is
 * given (it must divide global batch / ranks), else every divisor of global batch / ranks,
 * ascending.  batch: the run's micro-batch as resolved (the CPU preset's where it applied);
 * the global batch is --global-batch, else batch x ranks.  Into out (at most max): the count,
 * or -1 with the reason in err (the global batch not a multiple of the ranks, or of -b x ranks). */
int search_micro_batch_sizes(const run_config *run_cfg, int batch, int *out, int max, char *err, size_t errlen);

/* Kendall's tau-b of n pairs (ties in either list counted as neither concordant nor
 * discordant, and taken out of the denominator).  0 when n < 2 or either list is constant. */
double search_kendall_tau(const double *a, const double *b, int n);

#endif
