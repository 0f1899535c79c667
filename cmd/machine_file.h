/*
 * machine_file.h — what the calibration (calibrate*.c) needs of the machine file's JSON,
 * which machine_file.c reads, checks and writes.  Internal to those files: the rest of cmd/
 * reads a machine file through machine.h (machine_load).
 */
#ifndef AEBENCH_MACHINE_FILE_H
#define AEBENCH_MACHINE_FILE_H

/* The most micro-batches a collectives entry's compute_beside_at holds (--calibrate --ranks). */
#define MACHINE_BESIDE_BATCHES 16

#include "../engines/engine.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* The math mode and dtype of an entry for c's run (an entry's "math", "dtype"). */
const char *machine_file_math_of(const engine_config *c);
const char *machine_file_dtype_of(const engine_config *c);
/* The JSON object in path, or NULL with one line in err (not a regular file, above the size
 * limit, unreadable, not a JSON object). */
cJSON *machine_file_read_json(const char *path, char *err, size_t errlen);
/* -1 with err set unless root's format version is this aebench's (MACHINE_FORMAT). */
int machine_file_version_refused(const cJSON *root, const char *path, char *err, size_t errlen);
/* Whether the compute entry e is c's shape, math and dtype (`backend`: the file's). */
int machine_file_same_entry(const cJSON *e, const engine_config *c, const char *backend);
/* Whether e, an entry of a per-directory list, is dir's (dir "": no entry is). */
int machine_file_entry_of_dir(const cJSON *e, const char *dir);
/* root's array `name`, made (in place of anything else there) when it is not one. */
cJSON *machine_file_array_in(cJSON *root, const char *name);
/* Whether rates has every rate a prediction reads. */
int machine_file_has_every_rate(const cJSON *rates);
/* Write root to path; 0, or EXIT_RUN_ERROR said on stderr. */
int machine_file_write(cJSON *root, const char *path);

#endif
