/*
 * test_options.c — the option tables put together (issue 48: the engines declare their own
 * options): the results' fingerprints are those the one table gave before (recorded from that
 * build), a table that contradicts another (a name, a letter or a hash slot twice, a field two
 * options set, a shared option no table declares) is refused, an engine's option given to an
 * engine that does not take it is refused naming the engines whose it is, every engine option
 * is in --help after the engines that take it, and what the declarations say (an iteration,
 * an option that goes with another) is checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../cmd/cli.h"
#include "../engines/step_bound.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ARGS = 96 };

/* "aebench" and the words of line (split on spaces; the words stay in *buf) into argv. */
static int split(const char *line, char *buf, size_t len, char **argv)
{
    snprintf(buf, len, "%s", line);
    int argc = 0;
    argv[argc++] = "aebench";
    for (char *w = strtok(buf, " "); w && argc < MAX_ARGS - 1; w = strtok(NULL, " ")) argv[argc++] = w;
    argv[argc] = NULL;
    return argc;
}

/* line parsed into run_cfg: cli_parse's outcome, its message in err. */
static cli_outcome parse(const char *line, run_config *run_cfg, char *err, size_t errlen)
{
    char buf[2048], *argv[MAX_ARGS];
    const int argc = split(line, buf, sizeof buf, argv);
    err[0] = '\0';
    return cli_parse(argc, argv, run_cfg, err, errlen);
}

static int given_in(const void *ctx, const char *name)
{
    return cli_given(ctx, name);
}

/* Fingerprints aebench printed (config.fingerprint) before the engines had option tables of
 * their own, for option sets that give every hashed option, the driver's and the engines',
 * a value other than its default somewhere: the tables' slots, names and hashing are the one
 * table's, so --resume still finds the results made before them. */
static void test_fingerprints_as_before(void **state)
{
    (void)state;
    static const struct {
        const char *args, *fingerprint;
    } known[] = {
        {"-m megatron-lm", "eac78e5588d81c1f"},
        {"-m stronghold -l 8 -h 256 --heads 4 --seq 64 -b 2 --vocab 1000 -w 3 --placement spread "
         "--clip-speculate 2 --offload nvme --nvme-dir /tmp --lr 1e-3 --min-lr 1e-5 --lr-decay-iters 100 "
         "--lr-warmup-fraction 0.1 --weight-decay 0 --clip-grad 0.5 --seed 7 --dtype bf16 --math fp32 "
         "--recompute selective --iters 5 --gpu-mem-limit 2G --cpu-mem-limit 3G --data /dev/null --device cpu",
         "d86e254fadad1460"},
        {"-m gemini --gemini-mode naive --gemini-replicas 2 --gemini-placement ring --gemini-transport sendrecv "
         "--gemini-store /tmp --gemini-job abc --gemini-recover --ckpt-dir /tmp --ckpt-every 3 "
         "--gemini-ckpt-from 2 --gemini-every 2 --iters 20 --fail-at 3 --fail-rank 1 --fail-phase checkpoint "
         "--fail-kind hardware --global-batch 8 -b 4",
         "64d74c5205630d63"},
        {"-m gemini --gemini-mode interleave --gemini-every auto --threads 3 --log-interval 2 --results /tmp/r "
         "--hang-timeout 30 --dry-run --save-params /tmp/p",
         "b6bcb936c1792be6"},
        {"-m megatron-lm --zero-stage 2 --graphs off --no-ckpt", "f9286a7f1ab60a94"},
        {"-m megatron-lm --graphs on --zero-stage 3", "6941af38ea0b831b"},
        {"-m zero-offload --dpu -l 4", "4077d9ae570297ba"},
        {"-m zero-infinity --offload nvme --clip-speculate auto --window auto", "08a7ee065e212ad2"},
        {"-m l2l --clip-speculate 0 --placement bottom", "aeb6fd0380add8ca"},
        {"-m stronghold -w 2 -l 4 --placement auto --recompute none", "17d8e243d611fc41"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        run_config run_cfg;
        char err[1024], fp[24];
        assert_int_equal(parse(known[i].args, &run_cfg, err, sizeof err), CLI_RUN);
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)cli_fingerprint(&run_cfg));
        if (strcmp(fp, known[i].fingerprint) != 0)
            fail_msg("%s: fingerprint %s, was %s", known[i].args, fp, known[i].fingerprint);
    }
}

/* The registry's engines, then extra (NULL: none), into list: how many. */
static int engines_and(const engine_vtbl *extra, const engine_vtbl **list)
{
    int n = 0;
    for (int i = 0; i < engine_count(); i++) list[n++] = engine_at(i);
    if (extra) list[n++] = extra;
    return n;
}

/* cli_check_options over the registry and a made-up engine with own option d (and takes):
 * its message, "" when the tables agree. */
static const char *check_with(const option_decl *d, const char *const *takes, char *err, size_t errlen)
{
    const engine_vtbl fake = {.name = "fake", .own_options = d, .n_own_options = d ? 1 : 0, .takes = takes};
    const engine_vtbl *list[32];
    const int n = engines_and(&fake, list);
    err[0] = '\0';
    if (cli_check_options(list, n, err, errlen) == 0) err[0] = '\0';
    return err;
}

static void test_contradicting_tables_refused(void **state)
{
    (void)state;
    char err[512];
    const engine_vtbl *list[32];
    const int n = engines_and(NULL, list);
    assert_int_equal(cli_check_options(list, n, err, sizeof err), 0);
    /* (the slots 0 .. 59 are taken: a new result option takes 60) */
    const option_decl fine = {.name = "fake-knob", .kind = ARG_INT, .arg = "N", .set = SET_INT,
                              OPTION_FIELD(own_values[0]), .lo = 0, .hi = 9, .scope = SCOPE_RESULT, .slot = 60,
                              .use = OPTION_CFG, .help = "a made-up engine's own option"};
    assert_string_equal(check_with(&fine, NULL, err, sizeof err), "");

    option_decl d = fine;
    d.name = "layers";
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--layers is declared twice (cmd/options.h, and fake)"));
    d.name = "gemini-mode";
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--gemini-mode is declared twice (gemini, and fake)"));
    d.name = "window";
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--window is declared twice (fake, and engines/registry.c)"));
    d = fine;
    d.short_name = 'w';
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--fake-knob and --window both take the letter -w"));
    d = fine;
    d.slot = 7;
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--fake-knob and --window both take hash slot 7 (the next free one is 60)"));
    d.slot = 62;
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "hash slot 60 is skipped"));
    d = fine;
    d.offset = offsetof(engine_config, gemini_mode);
    d.size = sizeof(int);
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "--gemini-mode (gemini) and --fake-knob (fake) set the same field"));
    d = fine;
    d.refusal = REFUSED_ALWAYS;
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "REFUSED_ALWAYS without the values"));
    d = fine;
    d.set = SET_PATH;
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "a text setter on a field that is no string"));
    static const char *const bogus[] = {"window", "bogus", NULL};
    assert_non_null(strstr(check_with(NULL, bogus, err, sizeof err), "fake takes --bogus, which is not one of"));
    d = fine;
    d.goes_with = "no-such-option";
    assert_non_null(strstr(check_with(&d, NULL, err, sizeof err), "goes with --no-such-option, which no table"));
}

/* A value of d (an integer option) that asks something of an engine that does not take it. */
static long long asking_value(const option_decl *d)
{
    long long tries[16];
    int n = 0;
    for (int i = 0; i < d->nwords && n < 12; i++) tries[n++] = d->words[i].value;
    tries[n++] = d->lo > 0 ? d->lo : 1;
    tries[n++] = d->auto_value;
    tries[n++] = (d->lo > 0 ? d->lo : 1) + 1; /* (--pp: 0 and 1 are none, 2 asks for stages) */
    for (int t = 0; t < n; t++) {
        int inert = 0;
        for (int i = 0; i < d->ninert; i++) inert |= d->inert[i] == tries[t];
        if (!inert) return tries[t];
    }
    fail_msg("--%s: no value asks for anything", d->name);
    return 0;
}

static int given_only(const void *ctx, const char *name)
{
    return strcmp(ctx, name) == 0;
}

/* Every engine option, given to every engine that does not take it with a value that asks
 * for something: refused (but --nvme-dir's kind, REFUSED_NEVER), the message naming the
 * option, the engine and each engine whose option it is; the engines that take it do not
 * refuse it, and its default (given) asks nothing where it names values that ask nothing. */
static void test_engine_options_refused_elsewhere(void **state)
{
    (void)state;
    run_config defaults;
    char err[512];
    assert_int_equal(parse("-m megatron-lm", &defaults, err, sizeof err), CLI_RUN);
    for (int i = 0; i < engine_option_count(); i++) {
        const option_decl *d = engine_option_at(i, NULL);
        char owners[256], dashed[80];
        engine_option_takers(d->name, 1, owners, sizeof owners);
        assert_true(owners[0] != '\0'); /* (some engine takes it) */
        snprintf(dashed, sizeof dashed, "--%s", d->name);
        for (int e = 0; e < engine_count(); e++) {
            const engine_vtbl *eng = engine_at(e);
            /* the defaults ask nothing of any engine, given or not, where there are inert values */
            assert_int_equal(engine_option_refused(eng, &defaults.eng, NULL, NULL, err, sizeof err), 0);
            if (d->ninert)
                assert_int_equal(engine_option_refused(eng, &defaults.eng, given_only, d->name, err, sizeof err), 0);
            engine_config cfg = defaults.eng;
            if (d->set == SET_INT || d->set == SET_INT_OR_AUTO || d->set == SET_WORDS || d->set == SET_FLAG)
                engine_option_store(d, &cfg, asking_value(d));
            const int refused = engine_option_refused(eng, &cfg, given_only, d->name, err, sizeof err) != 0;
            if (engine_takes_option(eng, d->name) || d->refusal == REFUSED_NEVER) {
                if (refused) fail_msg("%s refuses %s: %s", eng->name, dashed, err);
                continue;
            }
            if (!refused) fail_msg("%s does not refuse %s", eng->name, dashed);
            if (!strstr(err, dashed) || !strstr(err, owners) || !strstr(err, eng->name))
                fail_msg("%s %s: '%s' names not the option, %s or the engine", eng->name, dashed, err, owners);
            /* (and refused without being given where its value alone asks: a sweep's runs) */
            const int unasked = engine_option_refused(eng, &cfg, NULL, NULL, err, sizeof err) != 0;
            assert_int_equal(unasked, d->refusal == REFUSED_ALWAYS);
        }
    }
}

/* The messages themselves, as the tests of the command line read them. */
static void test_refusal_messages(void **state)
{
    (void)state;
    run_config run_cfg;
    char err[512];
    assert_int_equal(parse("-m megatron-lm --gemini-every 2 --iters 5", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_megatron_lm, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), -1);
    assert_string_equal(err, "--gemini-every: megatron-lm takes no checkpoints (gemini's option)");
    assert_int_equal(engine_option_refused(&engine_gemini, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), 0);

    assert_int_equal(parse("-m megatron-lm --clip-speculate 2", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_megatron_lm, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), -1);
    assert_string_equal(err, "--clip-speculate: megatron-lm updates no layer before the step's norm is known (l2l's, "
                             "zero-infinity's and stronghold's option)");

    assert_int_equal(parse("-m l2l -w 1 -l 2", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_l2l, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), -1);
    assert_string_equal(err, "-w/--window 1: l2l has no window of layers (stronghold's option)");
    /* (-w auto asks nothing of an engine without a window) */
    assert_int_equal(parse("-m l2l -w auto", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_l2l, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), 0);

    assert_int_equal(parse("-m l2l --graphs on", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_l2l, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), -1);
    assert_string_equal(err, "--graphs on: l2l has no CUDA graphs (megatron-lm's option)");
    assert_int_equal(parse("-m l2l --graphs off", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_option_refused(&engine_l2l, &run_cfg.eng, given_in, &run_cfg, err, sizeof err), 0);

    /* the ones whose value asks, given or not: the engine's whole configuration refused (a
     * sweep leaves the engine out saying so) */
    assert_int_equal(parse("-m l2l --zero-stage 2", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_config_refused(&engine_l2l, &run_cfg.eng, err, sizeof err), -1);
    assert_string_equal(err, "l2l shards as its own system does (--zero-stage is megatron-lm's)");
    assert_int_equal(parse("-m megatron-lm --offload nvme", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_config_refused(&engine_megatron_lm, &run_cfg.eng, err, sizeof err), -1);
    assert_string_equal(err, "megatron-lm keeps nothing on disk (--offload is zero-infinity's and stronghold's)");
    assert_int_equal(parse("-m megatron-lm --dpu", &run_cfg, err, sizeof err), CLI_RUN);
    assert_int_equal(engine_config_refused(&engine_megatron_lm, &run_cfg.eng, err, sizeof err), -1);
    assert_string_equal(err, "megatron-lm has no delayed parameter update (--dpu is zero-offload's)");
}

/* --help: every engine option once, after the engines that take it. */
static void test_help_names_the_takers(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    cli_usage(f);
    assert_int_equal(fclose(f), 0);
    for (int i = 0; i < engine_option_count(); i++) {
        const option_decl *d = engine_option_at(i, NULL);
        char takers[256], name[80], line_start[300];
        engine_option_takers(d->name, 0, takers, sizeof takers);
        snprintf(name, sizeof name, "--%s%s", d->name, d->arg ? " " : "");
        snprintf(line_start, sizeof line_start, " %s: %s", takers, d->help);
        int lines = 0;
        for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
            const char *end = strchr(l, '\n');
            const size_t n = end ? (size_t)(end - l) : strlen(l);
            char one[1024];
            snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), l);
            const char *at = strstr(one, name);
            if (!at || strspn(one, " ") + (d->short_name ? 4 : 0) != (size_t)(at - one)) continue;
            lines++;
            if (!strstr(one, line_start)) fail_msg("--help's line of --%s: '%s', want '%s'", d->name, one, line_start);
        }
        if (lines != 1) fail_msg("--help lists --%s %d times", d->name, lines);
    }
    free(text);
}

/* What the engines' tables say agrees with their capabilities, and is checked as they say. */
static void test_declarations_kept(void **state)
{
    (void)state;
    for (int e = 0; e < engine_count(); e++) {
        const engine_vtbl *eng = engine_at(e);
        /* its bound (its own hook) waits for the norm under a clip exactly where it takes
         * --clip-speculate (whose updates otherwise run before the norm), and under no clip
         * nowhere; never below the roofline */
        engine_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.shape.layers = 4;
        cfg.recompute = GPT_RECOMPUTE_FULL;
        const double busy[BUSY_KINDS] = {[BUSY_COMPUTE] = 40, [BUSY_H2D] = 30, [BUSY_HOST_ADAM] = 35};
        for (int clip = 0; clip <= 1; clip++) {
            cfg.optim.clip = clip;
            engine_bound b;
            memset(&b, 0, sizeof b);
            step_bound_of(eng, &cfg, busy, &b);
            assert_int_equal(b.waits_for_norm, clip && engine_takes_option(eng, "clip-speculate"));
            assert_true(b.roofline_ms == 40 && b.ms >= b.roofline_ms && b.name != NULL);
            assert_true(b.own_schedule || b.ms == b.roofline_ms);
        }
        assert_int_equal(eng->uses_window != 0, engine_takes_option(eng, "window"));
    }
    run_config run_cfg;
    char err[512];
    const char *names[CLI_OPTIONS_MAX + 1];
    const int n = cli_iteration_options(names, CLI_OPTIONS_MAX + 1);
    assert_true(n >= 1);
    assert_null(names[n]);
    for (int i = 0; i < n; i++) {
        char line[256], want[160];
        snprintf(line, sizeof line, "-m gemini --iters 3 --%s 4", names[i]);
        assert_int_equal(parse(line, &run_cfg, err, sizeof err), CLI_ERROR);
        snprintf(want, sizeof want, "--%s 4: the run has only 3 iterations (--iters)", names[i]);
        assert_string_equal(err, want);
    }
    assert_int_equal(parse("-m gemini --ckpt-every 3", &run_cfg, err, sizeof err), CLI_ERROR);
    assert_string_equal(err, "--ckpt-every 3 goes with --ckpt-dir DIR");
    assert_int_equal(parse("-m gemini --ckpt-every 3 --ckpt-dir /tmp", &run_cfg, err, sizeof err), CLI_RUN);
    /* an engine's own check of a value (option_decl.check) */
    assert_int_equal(parse("-m megatron-lm --zero-stage 4", &run_cfg, err, sizeof err), CLI_ERROR);
    assert_string_equal(err, "--zero-stage: '4' is not a ZeRO stage (0, 1, 2 or 3)");
    assert_int_equal(parse("-m gemini --gemini-job a/b", &run_cfg, err, sizeof err), CLI_ERROR);
    assert_string_equal(err, "--gemini-job: 'a/b' is not a job id (letters, digits, _ and -, at most 63)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprints_as_before),
        cmocka_unit_test(test_contradicting_tables_refused),
        cmocka_unit_test(test_engine_options_refused_elsewhere),
        cmocka_unit_test(test_refusal_messages),
        cmocka_unit_test(test_help_names_the_takers),
        cmocka_unit_test(test_declarations_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
