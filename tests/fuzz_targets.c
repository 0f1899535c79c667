/*
 * fuzz_targets.c — coverage-guided fuzz targets (libFuzzer, clang) for the parsers of what
 * aebench reads from files (issue 29), beside tests/fuzz.py's process-level campaign:
 *
 *   FUZZ_CONFIG   an options config or a run list (cli_parse --config, then cli_load_runlist)
 *   FUZZ_MACHINE  a machine file (machine_load, as --predict reads it)
 *   FUZZ_CKPT     a persistent checkpoint file's bytes (ckpt_file_header / ckpt_file_read):
 *                 whatever the bytes, a version is restored only when its header and data
 *                 are whole; here, that it never reads out of bounds or trusts a wild size
 *   FUZZ_HOSTS    a --hosts hostfile (host_list_read, then the ranks per machine it maps):
 *                 every answer a machine count and slots in range, or an error
 *
 * Each input is written to a file (the parsers take paths, as the binary does) in a private
 * directory made once per process.  Built by `make fuzz-targets` (clang -fsanitize=fuzzer with
 * ASan and UBSan) and run for a few seconds each by `make test` when clang is there; a crash
 * or a sanitizer report fails it.
 */
#include "../cmd/cli.h"
#include "../cmd/hostfile.h"
#include "../cmd/machine.h"
#include "../engines/runtime/ckpt_store.h"
#include "../engines/runtime/private_dir.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[PATH_MAX + 32], err[2048];
#if defined(FUZZ_CONFIG)
    snprintf(path, sizeof path, "%s/in.json", work_dir());
    write_input(path, data, size);
    char *argv[] = {"aebench", "--config", path, "--device", "cpu", "--dry-run", NULL};
    optind = 0; /* (getopt's state: a full rescan for every input) */
    run_config rc;
    const cli_outcome out = cli_parse(6, argv, &rc, err, sizeof err);
    if (out == CLI_RUN && rc.config_runs) {
        cli_runlist list;
        if (cli_load_runlist(path, &list, err, sizeof err) == 0) cli_runlist_free(&list);
    }
#elif defined(FUZZ_MACHINE)
    snprintf(path, sizeof path, "%s/machine.json", work_dir());
    write_input(path, data, size);
    char *argv[] = {"aebench", "--device", "cpu", "-l", "1", "-h", "32", "--heads", "2", "--seq", "8", "--vocab",
                    "64", "-b", "1", NULL};
    optind = 0;
    run_config rc;
    if (cli_parse(15, argv, &rc, err, sizeof err) != CLI_RUN) abort();
    machine_rates m;
    (void)machine_load(path, &rc.eng, &m, err, sizeof err);
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
    static float buf[4096 / sizeof(float) * 2] __attribute__((aligned(4096)));
    for (int v = 0; v < CKPT_VERSIONS; v++) {
        int step = 0;
        (void)ckpt_file_header(&d, 0, v, 42, 64, 16, &step);
        (void)ckpt_file_read(&d, 0, v, 42, buf, 64, 16, &step);
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
#error "build with one of FUZZ_CONFIG, FUZZ_MACHINE, FUZZ_CKPT, FUZZ_HOSTS"
#endif
    (void)err;
    return 0;
}
