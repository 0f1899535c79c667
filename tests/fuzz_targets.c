/*
 * fuzz_targets.c — coverage-guided fuzz targets (libFuzzer, clang) for the parsers of what
 * aebench reads from files (issue 29), beside tests/fuzz.py's process-level campaign:
 *
 *   FUZZ_CONFIG   an options config or a run list (cli_parse --config, then cli_load_runlist)
 *   FUZZ_MACHINE  a machine file (machine_load, as --predict reads it)
 *   FUZZ_CKPT     a persistent checkpoint file's bytes (ckpt_file_header / ckpt_file_read,
 *                 and ckpt_file_peek and ckpt_job_holdings as recovery and the supervisor read
 *                 it): whatever the bytes, a version is restored only when its header and data
 *                 are whole; here, that it never reads out of bounds or trusts a wild size.
 *                 The shape asked for is the one the input's first header names (a job of
 *                 that shape reading it), so that a real file (tests/run.sh's seeds) gets past
 *                 the header to the data and its checksums
 *   FUZZ_STORE    a gemini store file's bytes (rank 0's, in a store directory): what a
 *                 relaunch reads of it (ckpt_job_holdings, ckpt_newest_whole), the recovery's
 *                 check before anything is written (ckpt_store_peek), and the recovery itself
 *                 (ckpt_store_open reusing it, ckpt_store_valid of every version), for the
 *                 shape and owners its headers name
 *   FUZZ_DATA     a --data token file (data_open_file, then data_rows of a few iterations):
 *                 refused with a reason, or every id it hands out below the vocabulary
 *   FUZZ_HOSTS    a --hosts hostfile (host_list_read, then the ranks per machine it maps):
 *                 every answer a machine count and slots in range, or an error
 *
 * Each input is written to a file (the parsers take paths, as the binary does) in a private
 * directory made once per process.  Built by `make fuzz-targets` (clang -fsanitize=fuzzer with
 * ASan and UBSan) and run for a few seconds each by `make test` when clang is there; a crash
 * or a sanitizer report fails it.
 */
#include "../cmd/cli.h"
#include "../cmd/data.h"
#include "../cmd/hostfile.h"
#include "../cmd/machine.h"
#include "../engines/runtime/ckpt_store.h"
#include "../engines/runtime/private_dir.h"
#include "../kernels/gpt.h"

#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libFuzzer's own entry point (no prototype in a header of ours). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The directory the inputs are written to: made once (mkdtemp, 0700) and kept for the process
 * (libFuzzer calls the target in one process; the directory is under TMPDIR). */
static const char *work_dir(void)
{
    static char dir[PATH_MAX];
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/aebench-fuzz-target.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

static void write_input(const char *path, const uint8_t *data, size_t size)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    size_t done = 0;
    while (done < size) {
        const ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    close(fd);
}

/* The shape a checkpoint's first header names (its layout: ckpt_store.c's version_header:
 * owner at 8, floats at 24, chunk_floats at 32, identity at 40), within what a target reads
 * (at most max_floats; a wild one: the fixed small shape), so that a whole file is read as
 * the job that wrote it would. */
#if defined(FUZZ_CKPT) || defined(FUZZ_STORE)
typedef struct named_shape {
    int owner;
    size_t floats, chunk;
    uint64_t identity;
} named_shape;
static named_shape shape_named(const uint8_t *data, size_t size, size_t max_floats)
{
    named_shape n = {0, 64, 16, 42};
    if (size < 48) return n;
    int32_t owner;
    uint64_t floats, chunk, identity;
    memcpy(&owner, data + 8, sizeof owner);
    memcpy(&floats, data + 24, sizeof floats);
    memcpy(&chunk, data + 32, sizeof chunk);
    memcpy(&identity, data + 40, sizeof identity);
    if (floats < 1 || floats > max_floats || chunk < 1 || chunk > floats) return n;
    n.owner = owner >= 0 && owner < 64 ? owner : 0;
    n.floats = (size_t)floats;
    n.chunk = (size_t)chunk;
    n.identity = identity;
    return n;
}
enum { FUZZ_MAX_FLOATS = 1 << 20 };
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[PATH_MAX + 32], err[2048];
#if defined(FUZZ_CONFIG)
    snprintf(path, sizeof path, "%s/in.json", work_dir());
    write_input(path, data, size);
    char *argv[] = {"aebench", "--config", path, "--device", "cpu", "--dry-run", NULL};
    optind = 0; /* (getopt's state: a full rescan for every input) */
    run_config run_cfg;
    const cli_outcome out = cli_parse(6, argv, &run_cfg, err, sizeof err);
    if (out == CLI_RUN && run_cfg.config_runs) {
        cli_runlist list;
        if (cli_load_runlist(path, &list, err, sizeof err) == 0) cli_runlist_free(&list);
    }
#elif defined(FUZZ_MACHINE)
    snprintf(path, sizeof path, "%s/machine.json", work_dir());
    write_input(path, data, size);
    char *argv[] = {"aebench", "--device", "cpu", "-l", "1", "-h", "32", "--heads", "2", "--seq", "8", "--vocab",
                    "64", "-b", "1", NULL};
    optind = 0;
    run_config run_cfg;
    if (cli_parse(15, argv, &run_cfg, err, sizeof err) != CLI_RUN) abort();
    machine_rates m;
    (void)machine_load(path, &run_cfg.eng, &m, err, sizeof err);
#elif defined(FUZZ_CKPT)
    /* the input is rank 0's file; read as 64 floats in 16-float chunks, both versions */
    static private_dir d;
    static int opened;
    if (!opened) {
        char why[1200];
        if (ckpt_dir_open(&d, work_dir(), "fuzz", 0, why, sizeof why) != 0) abort();
        opened = 1;
    }
    snprintf(path, sizeof path, "%s/rank-0.ckpt", d.path);
    write_input(path, data, size);
    const named_shape n = shape_named(data, size, FUZZ_MAX_FLOATS);
    static float *buf; /* (page aligned, room for the largest shape read) */
    if (!buf && posix_memalign((void **)&buf, 4096, FUZZ_MAX_FLOATS * sizeof(float) + 4096) != 0) abort();
    int its[CKPT_VERSIONS];
    for (int v = 0; v < CKPT_VERSIONS; v++) {
        int step = 0;
        const int head = ckpt_file_header(&d, 0, v, n.identity, n.floats, n.chunk, &step);
        const int read = ckpt_file_read(&d, 0, v, n.identity, buf, n.floats, n.chunk, &step);
        if (read >= 0 && read != head) abort(); /* (what the data's check passes, the header said) */
    }
    if (ckpt_file_peek(work_dir(), "fuzz", 0, n.identity, n.floats, n.chunk, its) != 0) abort();
    ckpt_holdings h = {0};
    if (ckpt_job_holdings(work_dir(), "fuzz", 1, &h) == 0) {
        int newest, missing;
        (void)ckpt_newest_whole(h.held, h.n, 1, &newest, &missing);
    }
    ckpt_holdings_free(&h);
#elif defined(FUZZ_STORE)
    /* the input is rank 0's store file of job "fuzz"; its slots and owners as its headers say */
    static private_dir d;
    static const gpt_backend *be;
    if (!be) {
        char why[1200], dir[PATH_MAX + 64];
        gpt_backend *made = NULL;
        if (ckpt_store_dir(dir, sizeof dir, work_dir(), "fuzz") || private_dir_open(&d, dir, 1, why, sizeof why) ||
            gpt_cpu_backend_create(&made, 1) != GPT_OK)
            abort();
        be = made;
    }
    snprintf(path, sizeof path, "%s/rank-0.ckpt", d.path);
    write_input(path, data, size);
    ckpt_holdings h = {0};
    if (ckpt_job_holdings(work_dir(), "fuzz", 0, &h) == 0) {
        int newest, missing;
        const int best = ckpt_newest_whole(h.held, h.n, 1 + (int)(size % 4), &newest, &missing);
        if (best >= 0 && newest != best) abort();
    }
    ckpt_holdings_free(&h);
    const named_shape n = shape_named(data, size, FUZZ_MAX_FLOATS / 4);
    const size_t version_bytes = 4096 + (n.floats * sizeof(float) + 4095) / 4096 * 4096;
    int slots = (int)(size / (CKPT_VERSIONS * version_bytes));
    slots = slots < 1 ? 1 : slots > 4 ? 4 : slots;
    int owners[4] = {n.owner, (n.owner + 1) % 64, (n.owner + 2) % 64, (n.owner + 3) % 64};
    for (int s = 1; s < slots; s++) { /* (each slot's owner as its first header says) */
        int32_t o;
        const size_t at = (size_t)s * CKPT_VERSIONS * version_bytes + 8;
        if (at + sizeof o <= size && (memcpy(&o, data + at, sizeof o), o >= 0 && o < 64)) owners[s] = o;
    }
    int its[4 * CKPT_VERSIONS];
    if (ckpt_store_peek(work_dir(), "fuzz", 0, slots, owners, n.floats, n.chunk, n.identity, its) != 0) abort();
    ckpt_store *store = NULL;
    char why[1200];
    /* (reuse: the file as it is when its size is the store's; else it is made anew, empty) */
    if (ckpt_store_open(&store, be, work_dir(), "fuzz", 0, slots, owners, n.floats, n.chunk, n.identity, 1, why,
                        sizeof why) == GPT_OK) {
        for (int s = 0; s < slots; s++)
            for (int v = 0; v < CKPT_VERSIONS; v++) {
                int step = 0;
                const int it = ckpt_store_valid(store, s, v, &step);
                if (it >= 0 && it != its[s * CKPT_VERSIONS + v]) abort(); /* (valid: its header said so) */
            }
        ckpt_store_close(store, 0);
    }
#elif defined(FUZZ_DATA)
    snprintf(path, sizeof path, "%s/tokens.bin", work_dir());
    write_input(path, data, size);
    data_source ds;
    const int vocab = 512, batch = 2, seq = 8;
    err[0] = '\0';
    if (data_open_file(&ds, path, vocab, batch, seq, err, sizeof err) == 0) {
        int32_t tokens[2 * 8], targets[2 * 8];
        for (int it = 1; it <= 3; it++) {
            data_rows(&ds, it, batch, 0, batch, tokens, targets);
            for (int i = 0; i < batch * seq; i++)
                if (tokens[i] < 0 || tokens[i] >= vocab || targets[i] < 0 || targets[i] >= vocab) abort();
        }
        data_close(&ds);
    } else if (!err[0]) {
        abort(); /* (a refusal always says why) */
    }
#elif defined(FUZZ_HOSTS)
    snprintf(path, sizeof path, "%s/hosts", work_dir());
    write_input(path, data, size);
    static host_list h; /* (256 KiB: not on the stack) */
    if (host_list_read(path, &h, err, sizeof err) == 0) {
        if (h.n < 1 || h.n > HOSTFILE_MAX_HOSTS) abort();
        for (int i = 0; i < h.n; i++)
            if (h.slots[i] < 1 || !h.name[i][0]) abort();
        int used = 0;
        const int most = host_list_ranks_per_machine(&h, 1 + (int)(size % 64), &used);
        if (most < 1 || used < 1 || used > h.n) abort();
    }
#else
#error "build with one of FUZZ_CONFIG, FUZZ_MACHINE, FUZZ_CKPT, FUZZ_STORE, FUZZ_DATA, FUZZ_HOSTS"
#endif
    (void)err;
    return 0;
}
