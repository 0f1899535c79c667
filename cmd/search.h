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

/* Kendall's tau-b of n pairs (ties in either list counted as neither concordant nor
 * discordant, and taken out of the denominator).  0 when n < 2 or either list is constant. */
double search_kendall_tau(const double *a, const double *b, int n);

#endif
