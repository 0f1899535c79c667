#include "cli.h"
#include "hostfile.h"
#include "options.h"
#include "report.h"
#include "strv.h"
#include "../engines/runtime/private_dir.h"
#include "../engines/runtime/watchdog.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef AEBENCH_VERSION
#define AEBENCH_VERSION "0.1.0"
#endif

/* ---- the options: the driver's table (options.h) and the engines' (option_decl.h) ----------- */

#define OPT_ID(id_, ...) OPT_##id_,
typedef enum opt_id { AEBENCH_OPTIONS(OPT_ID) OPT_DRIVER_COUNT } opt_id;
#undef OPT_ID

/* Where an option may be given (the table's use column). */
enum { CFG = OPTION_CFG, KID = OPTION_KID, SRCH = OPTION_SRCH };

typedef struct opt_spec opt_spec;
/* One value given to an option, as its setter sees it. */
typedef struct opt_value {
    const char *text;  /* the value (a switch: NULL) */
    int flag;          /* a switch's value: 1 set, 0 cleared (false in a config) */
    const char *opt;   /* how messages name the option: "--layers", or "config F: runs[3].layers" */
    const char *label; /* NULL on the command line, else where in a config (as opt) */
} opt_value;
/* Checks one value and sets the option's field: 0, or what cli_fail returns. */
typedef int opt_setter(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen);

/* One of the driver's options (a row of options.h): its declaration (field offsets within
 * run_config), the setter of its own where it has one (SET_SPECIAL), and whose it is. */
typedef struct driver_option {
    option_decl d;
    opt_setter *special;
    const char *owner;
} driver_option;

/* One option as the parser sees it: the driver's, or an engine's (own or shared). */
struct opt_spec {
    int id;                   /* 0 ..: its bit in run_config.given; getopt gives 1000 + id */
    const option_decl *d;
    opt_setter *special;      /* d->set == SET_SPECIAL: the driver's setter */
    size_t base;              /* where d's field offsets count from in run_config */
    const engine_vtbl *owner; /* the engine whose own option it is (NULL: the driver's or shared) */
    int of_engines;           /* 1: an option of the engines (own or shared) */
};

static opt_setter set_method, set_device, set_no_ckpt, set_fail_ranks, set_hang_timeout, set_verify, set_relaunch_of,
    set_job_notes, set_rerun_of, set_report_fd;

/* The largest value an integer option takes.  The model's dimensions are bounded far above any
 * model (2^20 layers, a hidden size of 2^20, ...) so that no int arithmetic on them (layers + 1
 * blocks, heads x head size, ...) can wrap, and the byte counts are 64-bit; a vocabulary's
 * padding to a multiple of 128 still fits an int; CPU threads beyond what any host has only
 * make the OpenMP runtime fail; iterations leave room for one more. */
enum { MAX_THREADS = 1024, MIN_VOCAB = 2, MAX_VOCAB = 2147483647 - 127, MAX_DIM = 1 << 20, MAX_SEQ = 1 << 24,
       MAX_ITERS = OPTION_MAX_ITERS };

/* The table's set, scope and use columns, as initializers of a driver_option. */
#define FIELD_OF(f) (((run_config *)0)->f)
#define FIELD(f) .d.offset = offsetof(run_config, f), .d.size = sizeof FIELD_OF(f), \
                 .d.text = _Generic(FIELD_OF(f), char *: 1, default: 0)
#define INT(f, lo_, hi_) .d.set = SET_INT, FIELD(f), .d.lo = (lo_), .d.hi = (hi_)
#define INT_NOTE(f, lo_, hi_, note_) INT(f, lo_, hi_), .d.note = (note_)
#define SPECIAL_INT(f, lo_, hi_, fn) .d.set = SET_SPECIAL, .special = fn, FIELD(f), .d.lo = (lo_), .d.hi = (hi_)
#define NUM(f, rule_, note_) .d.set = SET_NUM, FIELD(f), .d.rule = (rule_), .d.note = (note_)
#define WORDS(f, ...) .d.set = SET_WORDS, FIELD(f), .d.words = (const option_choice[]){__VA_ARGS__}, \
                      .d.nwords = (int)(sizeof((const option_choice[]){__VA_ARGS__}) / sizeof(option_choice))
#define PATH(f, what_) .d.set = SET_PATH, FIELD(f), .d.what = (what_)
#define BYTES(f) .d.set = SET_BYTES, FIELD(f)
#define FLAG(f) .d.set = SET_FLAG, FIELD(f)
#define SPECIAL(f, fn) .d.set = SET_SPECIAL, .special = fn, FIELD(f)
#define NO_FIELD .d.set = SET_NONE
#define FP(slot_) .d.scope = SCOPE_RESULT, .d.slot = (slot_)
#define AGREE(slot_) .d.scope = SCOPE_AGREE, .d.slot = (slot_)
#define LOCAL .d.scope = SCOPE_LOCAL, .d.slot = -1
#define OPT_SPEC(id_, name_, short_, kind_, arg_, set_, dflt_, owner_, scope_, use_, help_)                       \
    [OPT_##id_] = {.d.name = (name_), .d.short_name = (short_), .d.kind = (kind_), .d.arg = (arg_), set_,          \
                   .d.dflt = (dflt_), .owner = (owner_), scope_, .d.use = (use_), .d.help = (help_)},

static const driver_option driver_options[] = {AEBENCH_OPTIONS(OPT_SPEC)};

#undef OPT_SPEC
#undef LOCAL
#undef AGREE
#undef FP
#undef NO_FIELD
#undef SPECIAL
#undef FLAG
#undef BYTES
#undef PATH
#undef WORDS
#undef NUM
#undef SPECIAL_INT
#undef INT_NOTE
#undef INT
#undef FIELD
#undef FIELD_OF

_Static_assert(sizeof driver_options / sizeof driver_options[0] == (size_t)OPT_DRIVER_COUNT,
               "one driver_option per row of options.h");
_Static_assert((int)OPT_DRIVER_COUNT <= (int)CLI_OPTIONS_MAX, "run_config.given has a bit for every option");

/* The driver's option `id` into *sp. */
static void driver_spec(int id, opt_spec *sp)
{
    *sp = (opt_spec){.id = id, .d = &driver_options[id].d, .special = driver_options[id].special};
}

/* An engine's option (d; owner: the engine whose own it is, NULL: shared) as the parser's
 * option `id`: its field is in run_config.eng. */
static void engine_spec(int id, const option_decl *d, const engine_vtbl *owner, opt_spec *sp)
{
    *sp = (opt_spec){.id = id, .d = d, .base = offsetof(run_config, eng), .owner = owner, .of_engines = 1};
}

/* Option `id` into *sp: 0, or -1 past the last.  The driver's first (options.h's order), then
 * the engines' (engine_option_at's). */
static int spec_at(int id, opt_spec *sp)
{
    if (id < 0) return -1;
    if (id < (int)OPT_DRIVER_COUNT) {
        driver_spec(id, sp);
        return 0;
    }
    const engine_vtbl *owner;
    const option_decl *d = engine_option_at(id - (int)OPT_DRIVER_COUNT, &owner);
    if (!d) return -1;
    engine_spec(id, d, owner, sp);
    return 0;
}

/* The option of this long name into *sp: 0, or -1 none. */
static int spec_by_name(const char *name, opt_spec *sp)
{
    for (int id = 0; spec_at(id, sp) == 0; id++)
        if (strcmp(sp->d->name, name) == 0) return 0;
    return -1;
}

/* The option getopt_long returned c for (1000 + id, or a letter): 0, or -1 none. */
static int spec_of_getopt(int c, opt_spec *sp)
{
    if (c >= 1000) return spec_at(c - 1000, sp);
    for (int id = 0; spec_at(id, sp) == 0; id++)
        if (sp->d->short_name && sp->d->short_name == c) return 0;
    return -1;
}

static int is_given(const run_config *run_cfg, const opt_spec *sp)
{
    return (run_cfg->given[sp->id / 64] >> (sp->id % 64) & 1ULL) != 0;
}

/* ---- the tables' check: what contradicts itself is this build's bug, found at start-up ------ */

/* A setter that stores an integer (an int or a 64-bit field). */
static int stores_int(const opt_spec *sp)
{
    const option_set s = sp->d->set;
    return s == SET_INT || s == SET_INT_OR_AUTO || s == SET_WORDS || s == SET_FLAG ||
           sp->special == set_device || sp->special == set_no_ckpt || sp->special == set_verify;
}

/* What is wrong with option sp alone (its setter against its field, its refusal), or NULL. */
static const char *spec_broken(const opt_spec *sp)
{
    const option_decl *d = sp->d;
    if (!d->name || !d->name[0] || !d->help) return "no name or no help";
    if (stores_int(sp) && d->size != sizeof(int) && d->size != sizeof(uint64_t))
        return "an integer setter on a field that is no integer";
    if ((d->set == SET_NUM || sp->special == set_hang_timeout) && d->size != sizeof(double))
        return "a number setter on a field that is no double";
    if ((d->set == SET_BYTES && d->size != sizeof(size_t)) ||
        (sp->special == set_fail_ranks && d->size != sizeof(unsigned long long)) ||
        (sp->special == set_relaunch_of && d->size != sizeof(relaunch_account)) ||
        (sp->special == set_rerun_of && d->size != sizeof(rerun_source)) ||
        (sp->special == set_job_notes && !d->text))
        return "a setter on a field of another type";
    if ((d->set == SET_PATH || d->set == SET_TEXT || sp->special == set_method) && !d->text)
        return "a text setter on a field that is no string";
    if (d->set == SET_SPECIAL && !sp->special) return "SET_SPECIAL without a setter";
    if (sp->of_engines && (d->set == SET_SPECIAL || d->set == SET_BYTES || d->set == SET_NONE))
        return "an engine's option takes one of the generic setters (option_decl.h)";
    if (d->dflt && d->set == SET_NONE) return "a default, but no field";
    if (d->set == SET_WORDS && d->nwords < 1) return "SET_WORDS without words";
    if (sp->of_engines && d->refusal == REFUSED_ALWAYS && d->ninert < 1)
        return "REFUSED_ALWAYS without the values that ask nothing (inert): every other engine would refuse it";
    if ((d->ninert || d->nsearch) && !stores_int(sp)) return "inert or search values on an option of no integer";
    if (d->scope != SCOPE_LOCAL && d->set == SET_NONE) return "hashed, but no field";
    return NULL;
}

/* Whether the own option sp's field shares a byte with option o's (both have fields). */
static int fields_overlap(const opt_spec *sp, const opt_spec *o)
{
    const size_t a = sp->base + sp->d->offset, b = o->base + o->d->offset;
    return sp->d->set != SET_NONE && o->d->set != SET_NONE && a < b + o->d->size && b < a + sp->d->size;
}

/* The driver's table, the shared options and engines[0..n)'s own into all[] (at most max):
 * how many, or -1 when they are more. */
static int specs_of(const engine_vtbl *const *engines, int n, opt_spec *all, int max)
{
    int k = 0, nshared;
    const option_decl *shared = engine_shared_options(&nshared);
    for (int id = 0; id < (int)OPT_DRIVER_COUNT; id++, k++)
        if (k < max) driver_spec(id, &all[k]);
    for (int e = 0; e < n; e++)
        for (int i = 0; i < engines[e]->n_own_options; i++, k++)
            if (k < max) engine_spec(k, &engines[e]->own_options[i], engines[e], &all[k]);
    for (int i = 0; i < nshared; i++, k++)
        if (k < max) engine_spec(k, &shared[i], NULL, &all[k]);
    return k <= max ? k : -1;
}

/* What makes the hash slots of all[0..n) other than 0, 1, 2, ... with no gap, into err; 0 fine. */
static int slots_broken(const opt_spec *all, int n, char *err, size_t errlen)
{
    int hashed = 0, next = 0, taken[CLI_OPTIONS_MAX];
    for (int s = 0; s < CLI_OPTIONS_MAX; s++) taken[s] = -1;
    for (int i = 0; i < n; i++) {
        if (all[i].d->scope == SCOPE_LOCAL) continue;
        hashed++;
        if (all[i].d->slot >= next) next = all[i].d->slot + 1;
    }
    for (int i = 0; i < n; i++) {
        const int s = all[i].d->slot;
        if (all[i].d->scope == SCOPE_LOCAL) continue;
        if (s < 0 || s >= CLI_OPTIONS_MAX)
            return cli_fail(err, errlen, "--%s: hash slot %d is out of range (the next free one is %d)", all[i].d->name,
                            s, next);
        if (taken[s] >= 0)
            return cli_fail(err, errlen, "--%s and --%s both take hash slot %d (the next free one is %d)",
                            all[taken[s]].d->name, all[i].d->name, s, next);
        taken[s] = i;
    }
    for (int s = 0; s < hashed; s++)
        if (taken[s] < 0) return cli_fail(err, errlen, "hash slot %d is skipped (the slots go 0, 1, 2, ... with no gap)", s);
    return 0;
}

/* Where option sp is declared, for messages. */
static const char *table_of(const opt_spec *sp)
{
    return sp->owner ? sp->owner->name : sp->of_engines ? "engines/registry.c" : "cmd/options.h";
}

int cli_check_options(const engine_vtbl *const *engines, int n, char *err, size_t errlen)
{
    opt_spec all[CLI_OPTIONS_MAX];
    const int count = specs_of(engines, n, all, CLI_OPTIONS_MAX);
    if (count < 0) return cli_fail(err, errlen, "more than %d options (CLI_OPTIONS_MAX)", CLI_OPTIONS_MAX);
    for (int i = 0; i < count; i++) {
        const option_decl *d = all[i].d;
        const char *why = spec_broken(&all[i]);
        if (why) return cli_fail(err, errlen, "--%s: %s", d->name, why);
        for (int k = 0; k < i; k++) {
            if (strcmp(all[k].d->name, d->name) == 0)
                return cli_fail(err, errlen, "--%s is declared twice (%s, and %s)", d->name, table_of(&all[k]),
                                table_of(&all[i]));
            if (d->short_name && all[k].d->short_name == d->short_name)
                return cli_fail(err, errlen, "--%s and --%s both take the letter -%c", all[k].d->name, d->name,
                                d->short_name);
        }
        for (int k = 0; all[i].owner && k < count; k++)
            if (k != i && fields_overlap(&all[i], &all[k]))
                return cli_fail(err, errlen, "--%s (%s) and --%s (%s) set the same field", d->name, table_of(&all[i]),
                                all[k].d->name, table_of(&all[k]));
        int with = !d->goes_with;
        for (int k = 0; !with && k < count; k++) with = strcmp(all[k].d->name, d->goes_with) == 0;
        if (!with) return cli_fail(err, errlen, "--%s goes with --%s, which no table declares", d->name, d->goes_with);
    }
    int nshared;
    const option_decl *shared = engine_shared_options(&nshared);
    for (int e = 0; e < n; e++)
        for (const char *const *t = engines[e]->takes; t && *t; t++) {
            int known = 0;
            for (int i = 0; i < nshared && !known; i++) known = strcmp(shared[i].name, *t) == 0;
            if (!known)
                return cli_fail(err, errlen, "%s takes --%s, which is not one of the options several engines take "
                                "(engines/registry.c)", engines[e]->name, *t);
        }
    return slots_broken(all, count, err, errlen);
}

/* The tables checked (cli_check_options over the registry): how many options are hashed.  A
 * table that contradicts itself (a name or letter twice, a hash slot twice or skipped, a
 * setter of ints on a field of another size) is a bug of this build, not of the input: said
 * and aborted at once, before it can drop an option from the hashes or parse into the wrong
 * bytes. */
static int options_checked(void)
{
    const engine_vtbl *engines[64];
    const int n = engine_count() < 64 ? engine_count() : 64;
    for (int i = 0; i < n; i++) engines[i] = engine_at(i);
    char err[512];
    if (n < engine_count()) snprintf(err, sizeof err, "more than 64 engines");
    else if (cli_check_options(engines, n, err, sizeof err) == 0) {
        int hashed = 0;
        opt_spec sp;
        for (int id = 0; spec_at(id, &sp) == 0; id++) hashed += sp.d->scope != SCOPE_LOCAL;
        return hashed;
    }
    fprintf(stderr, "aebench: the option tables (cmd/options.h, the engines') are broken: %s\n", err);
    abort();
}

int cli_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    /* One line, whatever the input it quotes holds (a newline in a config's string) */
    for (char *c = err; errlen && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return -1;
}


/* An option that takes one of some words: the value of the word given into *out; else
 * "OPT: 'x' is not a, b or c" (the words in the table's order).  0, or what cli_fail returns. */
static int choose(const char *opt, const char *value, const option_choice *words, int n, int *out, char *err,
                  size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (strcmp(value, words[i].word) == 0) {
            *out = words[i].value;
            return 0;
        }
    char list[200] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 words[i].word);
    return cli_fail(err, errlen, "%s: '%s' is not %s", opt, value, list);
}

/* A path option's value into dst: "empty <what> name" when it is empty (what NULL: empty is
 * allowed), "path too long" when it does not fit.  0, or what cli_fail returns. */
static int set_path(char *dst, size_t len, const char *value, const char *what, const char *opt, char *err,
                    size_t errlen)
{
    if (what && !*value) return cli_fail(err, errlen, "%s: empty %s name", opt, what);
    if (snprintf(dst, len, "%s", value) >= (int)len) return cli_fail(err, errlen, "%s: path too long", opt);
    return 0;
}

/* A whole-string integer in [lo, hi]: 0; -1 when it is not an integer, -2 when it is one
 * outside the range (or too large for 64 bits). */
static int parse_int(const char *text, long long lo, long long hi, long long *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (*end != '\0' || end == text) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    if (errno) return -1;
    *out = v;
    return 0;
}

/* A whole number in [lo, hi], or "auto" (*out = auto_value); -1 when it is neither. */
static int parse_int_or_auto(const char *text, long long lo, long long hi, int auto_value, int *out)
{
    long long v = 0;
    if (strcmp(text, "auto") == 0) {
        *out = auto_value;
        return 0;
    }
    if (parse_int(text, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

static int parse_num(const char *text, double *out)
{
    if (!text || !*text) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (errno || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* --recompute M and --no-ckpt (the older name of --recompute none) given in one place (the
 * command line, or one object of a config): whichever came last would win, so two that
 * disagree are refused.  (A config's value overridden by the command line is not a clash.) */
typedef struct recompute_seen {
    int recompute, no_ckpt; /* given here */
    int none;               /* --recompute's value is none */
    int no_ckpt_flag;       /* --no-ckpt's value (false in a config: --recompute full) */
    char value[16];
} recompute_seen;

static void note_recompute(recompute_seen *seen, const opt_spec *sp, const char *value, int flag)
{
    if (sp->id == OPT_RECOMPUTE) {
        seen->recompute = 1;
        seen->none = strcmp(value, "none") == 0;
        snprintf(seen->value, sizeof seen->value, "%.15s", value);
    } else if (sp->id == OPT_NO_CKPT) {
        seen->no_ckpt = 1;
        seen->no_ckpt_flag = flag;
    }
}

static int recompute_clash(const recompute_seen *seen, const char *where, char *err, size_t errlen)
{
    if (!seen->recompute || !seen->no_ckpt || seen->none == seen->no_ckpt_flag) return 0;
    return cli_fail(err, errlen, "%s%s--recompute %s and --no-ckpt%s contradict each other (--no-ckpt is --recompute "
                    "none): give one", where, where[0] ? ": " : "", seen->value, seen->no_ckpt_flag ? "" : " false");
}



/* ---- the setters: each option's value checked and stored (its declaration's set) ------------ */

static void *field_of(run_config *run_cfg, const opt_spec *sp)
{
    return (char *)run_cfg + sp->base + sp->d->offset;
}

/* An integer into the option's field, an int or a uint64_t (cli_check_options knows which). */
static void store_int(run_config *run_cfg, const opt_spec *sp, long long v)
{
    if (sp->d->size == sizeof(int)) {
        const int i = (int)v;
        memcpy(field_of(run_cfg, sp), &i, sizeof i);
    } else {
        const uint64_t u = (uint64_t)v;
        memcpy(field_of(run_cfg, sp), &u, sizeof u);
    }
}

/* err made one line (a check's own message may quote a config's newline). */
static void one_line(char *err, size_t errlen)
{
    for (char *c = err; errlen && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* The declaration's own check of a value that passed its kind's (option_decl.check): 0, or -1
 * with its message in err. */
static int own_check(const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (!sp->d->check) return 0;
    const char *text = v->text ? v->text : v->flag ? "true" : "false";
    if (sp->d->check(v->opt, text, err, errlen) == 0) return 0;
    one_line(err, errlen);
    return -1;
}

/* The value as an integer in the option's range: 0, or what cli_fail returns. */
static int int_value(const opt_spec *sp, const opt_value *v, long long *out, char *err, size_t errlen)
{
    const int bad = parse_int(v->text, sp->d->lo, sp->d->hi, out);
    if (bad == -2)
        return cli_fail(err, errlen, "%s: %s is out of range: an integer from %lld to %lld%s", v->opt, v->text,
                        sp->d->lo, sp->d->hi, sp->d->note ? sp->d->note : "");
    if (bad)
        return cli_fail(err, errlen, "%s: '%s' is not %s integer", v->opt, v->text ? v->text : "",
                        sp->d->lo ? "a positive" : "a non-negative");
    return 0;
}

static int set_int(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    long long iv = 0;
    if (int_value(sp, v, &iv, err, errlen) || own_check(sp, v, err, errlen)) return -1;
    store_int(run_cfg, sp, iv);
    return 0;
}

static int set_int_or_auto(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    int iv = 0;
    if (parse_int_or_auto(v->text, sp->d->lo, sp->d->hi, sp->d->auto_value, &iv))
        return cli_fail(err, errlen, "%s: '%s' is neither %s nor 'auto'", v->opt, v->text, sp->d->what);
    if (own_check(sp, v, err, errlen)) return -1;
    store_int(run_cfg, sp, iv);
    return 0;
}

static int set_num(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    double dv = 0;
    const num_rule rule = sp->d->rule;
    if (parse_num(v->text, &dv)) return cli_fail(err, errlen, "%s: '%s' is not a number", v->opt, v->text ? v->text : "");
    const char *must = rule == NUM_POSITIVE && dv <= 0                 ? "must be positive"
                       : rule == NUM_NON_NEGATIVE && dv < 0            ? "must not be negative"
                       : rule == NUM_FRACTION && (dv < 0 || dv > 1) ? "must be in [0, 1]"
                                                                    : NULL;
    if (must) return cli_fail(err, errlen, "%s: %s%s", v->opt, must, sp->d->note ? sp->d->note : "");
    if (own_check(sp, v, err, errlen)) return -1;
    memcpy(field_of(run_cfg, sp), &dv, sizeof dv);
    return 0;
}

static int set_word(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    int value = 0;
    if (choose(v->opt, v->text, sp->d->words, sp->d->nwords, &value, err, errlen) || own_check(sp, v, err, errlen))
        return -1;
    store_int(run_cfg, sp, value);
    return 0;
}

static int set_path_value(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (own_check(sp, v, err, errlen)) return -1;
    return set_path(field_of(run_cfg, sp), sp->d->size, v->text, sp->d->what, v->opt, err, errlen);
}

/* Text that fits the field (the declaration's check says what else it must be). */
static int set_text(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (own_check(sp, v, err, errlen)) return -1;
    if (strlen(v->text) >= sp->d->size)
        return cli_fail(err, errlen, "%s: '%s' is too long (at most %zu characters)", v->opt, v->text, sp->d->size - 1);
    snprintf(field_of(run_cfg, sp), sp->d->size, "%s", v->text);
    return 0;
}

static int set_bytes(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    size_t bytes = 0;
    if (parse_bytes(v->text, &bytes))
        return cli_fail(err, errlen, "%s: '%s' is not a size (e.g. 32G, 512M, 1073741824)", v->opt, v->text);
    memcpy(field_of(run_cfg, sp), &bytes, sizeof bytes);
    return 0;
}

static int set_flag(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (own_check(sp, v, err, errlen)) return -1;
    store_int(run_cfg, sp, v->flag);
    return 0;
}

/* Option sp's value checked and stored by its declaration's setter: 0, or what cli_fail returns. */
static int set_value(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    switch (sp->d->set) {
    case SET_INT: return set_int(run_cfg, sp, v, err, errlen);
    case SET_INT_OR_AUTO: return set_int_or_auto(run_cfg, sp, v, err, errlen);
    case SET_NUM: return set_num(run_cfg, sp, v, err, errlen);
    case SET_WORDS: return set_word(run_cfg, sp, v, err, errlen);
    case SET_PATH: return set_path_value(run_cfg, sp, v, err, errlen);
    case SET_FLAG: return set_flag(run_cfg, sp, v, err, errlen);
    case SET_TEXT: return set_text(run_cfg, sp, v, err, errlen);
    case SET_BYTES: return set_bytes(run_cfg, sp, v, err, errlen);
    case SET_SPECIAL: return sp->special(run_cfg, sp, v, err, errlen);
    case SET_NONE: break;
    }
    return 0;
}

/* -m: a registered engine, an alias, or all. */
static int set_method(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (strcmp(v->text, "all") != 0 && !engine_find(v->text)) {
        char names[256] = "";
        for (int i = 0; i < engine_count(); i++) {
            strncat(names, engine_at(i)->name, sizeof names - strlen(names) - 1);
            strncat(names, ", ", sizeof names - strlen(names) - 1);
        }
        return cli_fail(err, errlen, "%s%sunknown method '%s' (known: %sall)", v->label ? v->label : "",
                        v->label ? ": " : "", v->text, names);
    }
    snprintf(field_of(run_cfg, sp), sp->d->size, "%s", v->text);
    return 0;
}

/* --device: and that it was chosen (else CUDA where usable, the CPU otherwise). */
static int set_device(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    static const option_choice devices[] = {{"cpu", DEVICE_CPU}, {"cuda", DEVICE_CUDA}};
    int value = 0;
    if (choose(v->opt, v->text, devices, (int)(sizeof devices / sizeof devices[0]), &value, err, errlen)) return -1;
    store_int(run_cfg, sp, value);
    run_cfg->device_given = 1;
    return 0;
}

/* --no-ckpt: --recompute none (false in a config: full). */
static int set_no_ckpt(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    store_int(run_cfg, sp, v->flag ? GPT_RECOMPUTE_NONE : GPT_RECOMPUTE_FULL);
    return 0;
}

/* --fail-rank R[,R...]: a bit per rank, and the text for messages. */
static int set_fail_ranks(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    unsigned long long mask = 0;
    const char *q = v->text;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long r = strtol(q, &end, 10);
        if (end == q || errno || r < 0 || r > 63 || (*end != ',' && *end != '\0'))
            return cli_fail(err, errlen, "%s: '%s' is not a rank or a list of ranks (0-63, e.g. 1,2)", v->opt, v->text);
        mask |= 1ull << r;
        if (*end == '\0') break;
        q = end + 1;
    }
    memcpy(field_of(run_cfg, sp), &mask, sizeof mask);
    snprintf(run_cfg->fail_ranks_text, sizeof run_cfg->fail_ranks_text, "%.63s", v->text);
    return 0;
}

/* --relaunch-of "RAN_S FAILED_S FAILED_AT NOTE" (launch.c's relaunch_account_of writes it): two
 * non-negative numbers, an iteration (0: none), then the note, one line. */
static int set_relaunch_of(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    relaunch_account a = {.given = 1};
    const char *q = v->text;
    char *end = (char *)q; /* (a field not read leaves end at its start: bad) */
    errno = 0;
    /* (each field starts with a digit: strtod and strtol would skip a second space, or take a sign) */
    if (isdigit((unsigned char)*q)) a.ran_s = strtod(q, &end);
    int bad = end == q || *end != ' ' || errno || !(a.ran_s >= 0 && a.ran_s < 1e9);
    if (!bad) {
        q = end = end + 1;
        if (isdigit((unsigned char)*q)) a.failed_s = strtod(q, &end);
        bad = end == q || *end != ' ' || errno || !(a.failed_s >= 0 && a.failed_s < 1e11);
    }
    if (!bad) {
        q = end = end + 1;
        const long at = isdigit((unsigned char)*q) ? strtol(q, &end, 10) : -1;
        bad = end == q || *end != ' ' || errno || at < 0 || at > MAX_ITERS;
        a.failed_at = (int)at;
    }
    if (!bad) {
        q = end + 1;
        bad = !*q || strlen(q) >= sizeof a.note || strpbrk(q, "\n\r") != NULL;
    }
    if (bad)
        return cli_fail(err, errlen, "%s: '%.200s' is not a relaunch's account ('RAN_S FAILED_S FAILED_AT NOTE', "
                        "which --ranks writes: not for typing by hand)", v->opt, v->text);
    snprintf(a.note, sizeof a.note, "%s", q);
    memcpy(field_of(run_cfg, sp), &a, sizeof a);
    return 0;
}

/* --job-notes DIR (launch.c's job_command puts it first on its ranks' command line): an absolute
 * path.  Where it is there (the supervisor's machine) it must be what job_dir_make made, as
 * private_dir.h checks one; a rank on another machine finds nothing there and leaves no notes
 * (job_dir.c).  A neighbour's directory named here is refused, not written. */
static int set_job_notes(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    if (v->text[0] != '/')
        return cli_fail(err, errlen, "%s: '%.200s' is not an absolute path (set by --ranks, not by hand)", v->opt,
                        v->text);
    if (strlen(v->text) >= sp->d->size) return cli_fail(err, errlen, "%s: path too long", v->opt);
    private_dir d;
    char why[1024];
    if (private_dir_open(&d, v->text, 0, why, sizeof why) != 0) {
        if (errno != ENOENT) return cli_fail(err, errlen, "%s %s", v->opt, why);
    } else {
        private_dir_close(&d, 0);
    }
    snprintf(field_of(run_cfg, sp), sp->d->size, "%s", v->text);
    return 0;
}

/* --report-fd FD (child.c puts it first on a child run's command line): an open pipe, not
 * stdio, which the run's result lines go up (report_to_parent). */
static int set_report_fd(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    long long fd = 0;
    if (int_value(sp, v, &fd, err, errlen)) return -1;
    struct stat st;
    const int flags = fcntl((int)fd, F_GETFL);
    if (fstat((int)fd, &st) != 0 || !S_ISFIFO(st.st_mode) || flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
        return cli_fail(err, errlen, "%s %lld: not a pipe open for writing (a sweep sets it for the runs it "
                        "starts, not by hand)", v->opt, fd);
    store_int(run_cfg, sp, fd);
    return 0;
}

/* --rerun-of "FINGERPRINT PATH" (rerun.c puts it on the command line a rerun runs): 16 hex
 * digits, one space, an absolute path on one line. */
static int set_rerun_of(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    rerun_source r;
    memset(&r, 0, sizeof r);
    const char *space = strchr(v->text, ' ');
    int bad = !space || !cli_is_fingerprint(v->text, (size_t)(space - v->text)) || space[1] != '/' ||
              strlen(space + 1) >= sizeof r.path || strpbrk(space + 1, "\n\r") != NULL;
    if (bad)
        return cli_fail(err, errlen, "%s: '%.200s' is not a record ('FINGERPRINT PATH': 16 hex digits and an "
                        "absolute path, which --rerun writes: not for typing by hand)", v->opt, v->text);
    memcpy(r.fingerprint, v->text, 16);
    snprintf(r.path, sizeof r.path, "%s", space + 1);
    memcpy(field_of(run_cfg, sp), &r, sizeof r);
    return 0;
}

static int set_verify(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    long long iv = 0;
    if (int_value(sp, v, &iv, err, errlen)) return -1;
    if (iv > 1000) return cli_fail(err, errlen, "%s: %lld is out of range: at most 1000 trained", v->opt, iv);
    store_int(run_cfg, sp, iv);
    return 0;
}

static int set_hang_timeout(run_config *run_cfg, const opt_spec *sp, const opt_value *v, char *err, size_t errlen)
{
    double seconds = 0;
    if (watchdog_parse_timeout(v->text, &seconds))
        return cli_fail(err, errlen, "%s: '%s' is neither seconds (0 or more, 0: never) nor 'auto'", v->opt, v->text);
    /* The watchdog looks once per tick and gives a lower rank a grace of seconds, so a
     * limit under a second would not be kept; and the messages print whole seconds */
    if (seconds > 0 && seconds < 1)
        return cli_fail(err, errlen, "%s: %s s is below 1 s, the least the watchdogs keep (0: never)", v->opt, v->text);
    memcpy(field_of(run_cfg, sp), &seconds, sizeof seconds);
    return 0;
}

/* The tables' defaults, through the setters (so a default is a value the option takes); the
 * method's is the registry's first engine (the baseline). */
static void set_defaults(run_config *run_cfg)
{
    memset(run_cfg, 0, sizeof *run_cfg);
    /* (Adam's betas and epsilon, which no option sets: the artifact's) */
    run_cfg->eng.optim = gpt_optim_default();
    opt_spec sp;
    for (int id = 0; spec_at(id, &sp) == 0; id++) {
        if (!sp.d->dflt) continue;
        char err[512];
        const opt_value v = {sp.d->dflt, 1, sp.d->name, NULL};
        if (set_value(run_cfg, &sp, &v, err, sizeof err)) {
            fprintf(stderr, "aebench: the option tables are broken: --%s's default: %s\n", sp.d->name, err);
            abort();
        }
    }
    snprintf(run_cfg->method, sizeof run_cfg->method, "%s", engine_at(0)->name);
}


/* Apply one option whose value is text (from argv, or converted from JSON).
 * flag_value: for ARG_NONE options, 1 to set and 0 to clear.  label names the option in
 * messages: NULL for the command line ("--layers"), else where it came from in a config
 * ("config F: runs[3].layers"). */
static int apply(run_config *run_cfg, const opt_spec *sp, const char *value, int flag_value,
                 const char *label, char *err, size_t errlen)
{
    char dashed[64];
    snprintf(dashed, sizeof dashed, "--%s", sp->d->name);
    run_cfg->given[sp->id / 64] |= 1ULL << (sp->id % 64);
    const opt_value v = {value, flag_value, label ? label : dashed, label};
    return set_value(run_cfg, sp, &v, err, errlen);
}

/* The whole file parsed as JSON; NULL with err set. */
/* The first key given twice in one object of the tree (cJSON keeps both; which one an option
 * took would be an accident), or NULL; *where is that object's key ("" the top level). */
static const char *duplicate_key(const cJSON *obj, const char **where)
{
    for (const cJSON *a = obj->child; a; a = a->next) {
        if (cJSON_IsObject(obj) && a->string)
            for (const cJSON *b = a->next; b; b = b->next)
                if (b->string && strcmp(a->string, b->string) == 0) {
                    *where = obj->string ? obj->string : "";
                    return a->string;
                }
        if (cJSON_IsObject(a) || cJSON_IsArray(a)) {
            const char *d = duplicate_key(a, where);
            if (d) return d;
        }
    }
    return NULL;
}

static cJSON *read_json(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return cli_fail(err, errlen, "config %s: not a regular file (a JSON file was expected)", path), NULL;
    long long size = 0;
    char *text = report_read_text_max(path, CLI_JSON_MAX_BYTES, &size);
    if (!text && errno == EFBIG)
        return cli_fail(err, errlen, "config %s: %lld bytes, above the limit of %d (1 MiB) for a config", path, size,
                        CLI_JSON_MAX_BYTES), NULL;
    if (!text) return cli_fail(err, errlen, "cannot read config %s: %s", path, strerror(errno)), NULL;
    const char *where_err = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &where_err, 1);
    if (!root) {
        size_t at = where_err ? (size_t)(where_err - text) : 0;
        cli_fail(err, errlen, "config %s: malformed JSON near byte %zu", path, at);
    }
    free(text);
    const char *where = "", *dup = root ? duplicate_key(root, &where) : NULL;
    if (dup) {
        cli_fail(err, errlen, "config %s: key \"%s\" given twice%s%s", path, dup, where[0] ? " in " : "", where);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static const char *json_type_name(const cJSON *item)
{
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    if (cJSON_IsNull(item)) return "null";
    return "an invalid value";
}

/* Options a config may set: every option but those that only make sense typed by hand. */
static int config_spec(const char *key, opt_spec *sp)
{
    return spec_by_name(key, sp) == 0 && (sp->d->use & CFG) ? 0 : -1;
}

/* Check one scalar JSON value against the type of option sp and turn it into the text that
 * apply() takes.  Types are strict (a layer count is a JSON integer, not "32"); the only
 * options that take a number or a string are those of kind ARG_TEXT_OR_INT: the window (15
 * or "auto"), --clip-speculate (4 or "auto") and the memory limits (bytes or "32G"). */
static int json_value(const cJSON *item, const opt_spec *sp, const char *label, char *value,
                      size_t vlen, int *flag, char *err, size_t errlen)
{
    const int text_or_number = sp->d->kind == ARG_TEXT_OR_INT;
    *flag = 1;
    value[0] = '\0';
    const char *want = NULL;
    switch (sp->d->kind) {
    case ARG_NONE:
        if (cJSON_IsBool(item)) {
            *flag = cJSON_IsTrue(item);
            return 0;
        }
        want = "true or false";
        break;
    case ARG_INT:
        if (cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble) &&
            fabs(item->valuedouble) < 9.0e15) {
            snprintf(value, vlen, "%lld", (long long)item->valuedouble);
            return 0;
        }
        want = "an integer";
        break;
    case ARG_NUM:
        if (cJSON_IsNumber(item)) {
            snprintf(value, vlen, "%.17g", item->valuedouble);
            return 0;
        }
        want = "a number";
        break;
    case ARG_TEXT:
    case ARG_TEXT_OR_INT:
        if (cJSON_IsString(item)) {
            if (snprintf(value, vlen, "%s", item->valuestring) >= (int)vlen)
                return cli_fail(err, errlen, "%s: value too long", label);
            return 0;
        }
        if (text_or_number && cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble) &&
            item->valuedouble >= 0 && item->valuedouble < 9.0e15) {
            snprintf(value, vlen, "%lld", (long long)item->valuedouble);
            return 0;
        }
        want = text_or_number ? "a string or a non-negative integer" : "a string";
        break;
    }
    return cli_fail(err, errlen, "%s: wrong type (want %s, got %s)", label, want, json_type_name(item));
}

/* A plain config: an object of options, applied to run_cfg. */
static int load_options(run_config *run_cfg, const cJSON *root, const char *path, char *err,
                        size_t errlen)
{
    recompute_seen seen = {0};
    for (const cJSON *item = root->child; item; item = item->next) {
        char label[PATH_MAX + 128];
        snprintf(label, sizeof label, "config %s: %s", path, item->string);
        opt_spec sp;
        if (config_spec(item->string, &sp)) return cli_fail(err, errlen, "%s: unknown key (see aebench --help)", label);
        /* A child run gets the plain config too; --find-max in it would make every child a
         * sweep again.  In a run list the sweep driver takes it out of the children's options. */
        if (sp.id == OPT_FIND_MAX)
            return cli_fail(err, errlen, "%s: only in a run list's defaults or runs", label);
        char value[PATH_MAX];
        int flag;
        if (json_value(item, &sp, label, value, sizeof value, &flag, err, errlen)) return -1;
        if (apply(run_cfg, &sp, value, flag, label, err, errlen)) return -1;
        note_recompute(&seen, &sp, value, flag);
    }
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s", path);
    return recompute_clash(&seen, where, err, errlen);
}

/* A config with "runs" (or "defaults") is a run list, run by the sweep driver. */
static int is_runlist(const cJSON *root)
{
    return cJSON_GetObjectItemCaseSensitive(root, "runs") ||
           cJSON_GetObjectItemCaseSensitive(root, "defaults");
}

static int load_config(run_config *run_cfg, const char *path, char *err, size_t errlen)
{
    cJSON *root = read_json(path, err, errlen);
    if (!root) return -1;
    int status = 0;
    if (!cJSON_IsObject(root))
        status = cli_fail(err, errlen, "config %s: the top level must be a JSON object (of options, or a "
                                "run list with \"defaults\" and \"runs\")", path);
    else if (is_runlist(root))
        run_cfg->config_runs = 1; /* checked in full by cli_load_runlist before anything runs */
    else
        status = load_options(run_cfg, root, path, err, errlen);
    cJSON_Delete(root);
    return status;
}

/* ---- run lists -------------------------------------------------------------------------- */

#define RUNLIST_MAX 10000 /* expansions beyond this are surely a mistake */

/* "layers-from": an engine name, "self" (the run's own engine) or "all" (every other
 * engine): each must be registered. */
static int check_layers_from(const cJSON *item, const char *label, char *err, size_t errlen)
{
    if (!cJSON_IsString(item))
        return cli_fail(err, errlen, "%s: wrong type (want an engine name, \"self\" or \"all\", got %s)",
                    label, json_type_name(item));
    if (strcmp(item->valuestring, "all") != 0 && strcmp(item->valuestring, "self") != 0 &&
        !engine_find(item->valuestring))
        return cli_fail(err, errlen, "%s: unknown method '%s'", label, item->valuestring);
    return 0;
}

/* Every key of one "defaults" or "runs[i]" object: known, of the right type, a valid value
 * (checked by applying it to a scratch config).  An array value is a list to sweep over. */
static int check_run_object(const cJSON *obj, const char *path, const char *prefix, char *err,
                            size_t errlen)
{
    if (!cJSON_IsObject(obj))
        return cli_fail(err, errlen, "config %s: %s: wrong type (want an object of options, got %s)",
                    path, prefix, json_type_name(obj));
    run_config scratch;
    set_defaults(&scratch);
    recompute_seen seen = {0};
    for (const cJSON *item = obj->child; item; item = item->next) {
        char label[PATH_MAX + 256];
        snprintf(label, sizeof label, "config %s: %s.%s", path, prefix, item->string);
        const int from = strcmp(item->string, "layers-from") == 0;
        opt_spec sp;
        if (!from && config_spec(item->string, &sp))
            return cli_fail(err, errlen, "%s: unknown key (see aebench --help)", label);
        if (from && cJSON_GetObjectItemCaseSensitive(obj, "layers"))
            return cli_fail(err, errlen, "%s: give layers or layers-from, not both", label);
        const cJSON *first = item, *one = item;
        int count = 1;
        if (cJSON_IsArray(item)) {
            count = cJSON_GetArraySize(item);
            if (count == 0) return cli_fail(err, errlen, "%s: empty list", label);
            first = item->child;
        }
        one = first;
        for (int i = 0; i < count; i++, one = one->next) {
            char elabel[PATH_MAX + 300];
            if (cJSON_IsArray(item)) snprintf(elabel, sizeof elabel, "%s[%d]", label, i);
            else snprintf(elabel, sizeof elabel, "%s", label);
            if (from) {
                if (check_layers_from(one, elabel, err, errlen)) return -1;
                continue;
            }
            char value[PATH_MAX];
            int flag;
            if (json_value(one, &sp, elabel, value, sizeof value, &flag, err, errlen)) return -1;
            if (apply(&scratch, &sp, value, flag, elabel, err, errlen)) return -1;
            /* (a list's elements become runs of their own, whose command lines are checked whole) */
            if (!cJSON_IsArray(item)) note_recompute(&seen, &sp, value, flag);
        }
    }
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where, "config %s: %s", path, prefix);
    return recompute_clash(&seen, where, err, errlen);
}

/* One fully expanded run (no arrays, method not "all") into a cli_run. */
static int emit_run(cli_runlist *out, const cJSON *obj, const char *where, char *err,
                    size_t errlen)
{
    if (out->n >= RUNLIST_MAX)
        return cli_fail(err, errlen, "%s: more than %d runs after expansion", where, RUNLIST_MAX);
    cli_run *grown = realloc(out->runs, sizeof *grown * (size_t)(out->n + 1));
    if (!grown) return cli_fail(err, errlen, "out of memory");
    out->runs = grown;
    cli_run *r = &out->runs[out->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->where, sizeof r->where, "%s", where);
    for (const cJSON *item = obj->child; item; item = item->next) {
        if (strcmp(item->string, "layers-from") == 0) {
            snprintf(r->layers_from, sizeof r->layers_from, "%s", item->valuestring);
            continue;
        }
        opt_spec sp;
        char value[PATH_MAX], opt[80];
        int flag;
        if (config_spec(item->string, &sp) || json_value(item, &sp, where, value, sizeof value, &flag, err, errlen))
            return -1;
        if (sp.id == OPT_FIND_MAX) {
            r->find_max = flag;
            continue;
        }
        /* Method names were checked against the registry, so they fit. */
        if (sp.id == OPT_METHOD) snprintf(r->method, sizeof r->method, "%.63s", value);
        /* Defaults and run are merged already, so a false flag is simply left out. */
        if (sp.d->kind == ARG_NONE && !flag) continue;
        snprintf(opt, sizeof opt, "--%s", sp.d->name);
        if (strv_push(&r->args, &r->nargs, opt)) return cli_fail(err, errlen, "out of memory");
        if (sp.d->kind != ARG_NONE && strv_push(&r->args, &r->nargs, value))
            return cli_fail(err, errlen, "out of memory");
    }
    return 0;
}

/* Expand a merged run: first "method" (a list, or "all": every registered engine), then any
 * other list (cartesian product, in key order), then "layers-from": "all" (every engine
 * other than the run's own).  obj is consumed. */
static int expand_run(cli_runlist *out, cJSON *obj, const char *path, const char *where,
                      char *err, size_t errlen)
{
    cJSON *method = cJSON_GetObjectItemCaseSensitive(obj, "method");
    cJSON *list = NULL;
    if (method && cJSON_IsString(method) && strcmp(method->valuestring, "all") == 0) {
        list = cJSON_CreateArray();
        for (int i = 0; list && i < engine_count(); i++)
            if (engine_in_all(engine_at(i))) cJSON_AddItemToArray(list, cJSON_CreateString(engine_at(i)->name));
        cJSON_ReplaceItemInObjectCaseSensitive(obj, "method", list);
    } else if (method && cJSON_IsArray(method)) {
        list = method;
    }
    if (!list) {
        for (cJSON *item = obj->child; item; item = item->next)
            if (cJSON_IsArray(item)) {
                list = item;
                break;
            }
    }
    cJSON *from = cJSON_GetObjectItemCaseSensitive(obj, "layers-from");
    if (!list && from && strcmp(from->valuestring, "all") == 0) {
        const engine_vtbl *own = engine_find(cJSON_GetObjectItemCaseSensitive(obj, "method")->valuestring);
        list = cJSON_CreateArray();
        for (int i = 0; list && i < engine_count(); i++)
            if (engine_at(i) != own && engine_in_all(engine_at(i)))
                cJSON_AddItemToArray(list, cJSON_CreateString(engine_at(i)->name));
        if (list && cJSON_GetArraySize(list) == 0) {
            cJSON_Delete(list);
            cJSON_Delete(obj);
            return cli_fail(err, errlen, "config %s: %s.layers-from: 'all' names no engine other than the "
                                     "run's own", path, where);
        }
        cJSON_ReplaceItemInObjectCaseSensitive(obj, "layers-from", list);
    }
    if (!list && from && strcmp(from->valuestring, "self") == 0)
        cJSON_ReplaceItemInObjectCaseSensitive(
            obj, "layers-from", cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(obj, "method")->valuestring));
    if (!list) {
        int status = emit_run(out, obj, where, err, errlen);
        cJSON_Delete(obj);
        return status;
    }
    const char *key = list->string;
    for (const cJSON *el = list->child; el; el = el->next) {
        cJSON *copy = cJSON_Duplicate(obj, 1);
        cJSON *val = copy ? cJSON_Duplicate(el, 1) : NULL;
        if (!val) {
            cJSON_Delete(copy);
            cJSON_Delete(obj);
            return cli_fail(err, errlen, "out of memory");
        }
        cJSON_ReplaceItemInObjectCaseSensitive(copy, key, val);
        if (expand_run(out, copy, path, where, err, errlen)) {
            cJSON_Delete(obj);
            return -1;
        }
    }
    cJSON_Delete(obj);
    return 0;
}

void cli_runlist_free(cli_runlist *l)
{
    for (int i = 0; i < l->n; i++) strv_free(&l->runs[i].args, &l->runs[i].nargs);
    free(l->runs);
    memset(l, 0, sizeof *l);
}

int cli_load_runlist(const char *path, cli_runlist *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *root = read_json(path, err, errlen);
    if (!root) return -1;
    int status = -1;
    const cJSON *defaults = NULL, *runs = NULL;
    if (!cJSON_IsObject(root)) {
        cli_fail(err, errlen, "config %s: the top level must be a JSON object", path);
        goto out;
    }
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "description") == 0) {
            if (!cJSON_IsString(item)) {
                cli_fail(err, errlen, "config %s: description: wrong type (want a string, got %s)", path,
                     json_type_name(item));
                goto out;
            }
            snprintf(out->description, sizeof out->description, "%s", item->valuestring);
        } else if (strcmp(item->string, "defaults") == 0) {
            defaults = item;
        } else if (strcmp(item->string, "runs") == 0) {
            runs = item;
        } else {
            cli_fail(err, errlen, "config %s: %s: unknown key (a run list has description, defaults "
                              "and runs)", path, item->string);
            goto out;
        }
    }
    if (!runs) {
        cli_fail(err, errlen, "config %s: runs: missing key (a run list needs an array of runs)", path);
        goto out;
    }
    if (!cJSON_IsArray(runs) || cJSON_GetArraySize(runs) == 0) {
        cli_fail(err, errlen, "config %s: runs: wrong type (want a non-empty array of objects, got %s)",
             path, cJSON_IsArray(runs) ? "an empty array" : json_type_name(runs));
        goto out;
    }
    if (defaults && check_run_object(defaults, path, "defaults", err, errlen)) goto out;
    int i = 0;
    for (const cJSON *run = runs->child; run; run = run->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "runs[%d]", i);
        if (check_run_object(run, path, where, err, errlen)) goto out;
    }
    /* Merge each run over the defaults (the run's keys win; layers and layers-from replace
     * each other), then expand its lists. */
    i = 0;
    for (const cJSON *run = runs->child; run; run = run->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "runs[%d]", i);
        cJSON *merged = defaults ? cJSON_Duplicate(defaults, 1) : cJSON_CreateObject();
        if (!merged) {
            cli_fail(err, errlen, "out of memory");
            goto out;
        }
        for (const cJSON *item = run->child; item; item = item->next) {
            if (strcmp(item->string, "layers") == 0) cJSON_DeleteItemFromObjectCaseSensitive(merged, "layers-from");
            if (strcmp(item->string, "layers-from") == 0) cJSON_DeleteItemFromObjectCaseSensitive(merged, "layers");
            cJSON_DeleteItemFromObjectCaseSensitive(merged, item->string);
            cJSON_AddItemToObject(merged, item->string, cJSON_Duplicate(item, 1));
        }
        if (!cJSON_GetObjectItemCaseSensitive(merged, "method")) {
            cJSON_Delete(merged);
            cli_fail(err, errlen, "config %s: %s.method: missing key (give it in the run or in defaults)",
                 path, where);
            goto out;
        }
        if (expand_run(out, merged, path, where, err, errlen)) goto out;
    }
    status = 0;
out:
    cJSON_Delete(root);
    if (status) cli_runlist_free(out);
    return status;
}

/* getopt_long's tables from every option: long option id returns 1000 + id; a short option
 * returns its letter and always takes a value.  The leading ':' of shortopts makes a missing
 * argument come back as ':'. */
typedef struct getopt_table {
    struct option longopts[CLI_OPTIONS_MAX + 1];
    char shortopts[2 * CLI_OPTIONS_MAX + 2];
} getopt_table;

static void getopt_tables(getopt_table *t)
{
    size_t sl = 0;
    int n = 0;
    opt_spec sp;
    t->shortopts[sl++] = ':';
    /* (cli_parse's start-up check says there are no more than CLI_OPTIONS_MAX) */
    for (; n < CLI_OPTIONS_MAX && spec_at(n, &sp) == 0; n++) {
        t->longopts[n] = (struct option){sp.d->name, sp.d->kind == ARG_NONE ? no_argument : required_argument, NULL,
                                         1000 + n};
        if (sp.d->short_name) {
            t->shortopts[sl++] = sp.d->short_name;
            t->shortopts[sl++] = ':';
        }
    }
    t->longopts[n] = (struct option){0, 0, 0, 0};
    t->shortopts[sl] = '\0';
}

/* argv[1..]'s options into *out, but those `drop` says (by spec, with ctx). */
static int args_kept(int argc, char **argv, int (*drop)(const opt_spec *sp, const void *ctx), const void *ctx,
                     char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    getopt_table t;
    getopt_tables(&t);
    opterr = 0;
    optind = 1;
    int c, start = 1;
    /* cli_parse accepted argv, so every token belongs to an option (no permutation), and
     * every short option takes a value: tokens [start, optind) are one option. */
    while ((c = getopt_long(argc, argv, t.shortopts, t.longopts, NULL)) != -1) {
        opt_spec sp;
        const int dropped = spec_of_getopt(c, &sp) || drop(&sp, ctx);
        for (int t = start; !dropped && t < optind; t++)
            if (strv_push(out, nout, argv[t])) {
                optind = 1;
                return -1;
            }
        start = optind;
    }
    optind = 1;
    return 0;
}

typedef struct child_drop {
    int config, method;
} child_drop;
static int drop_for_child(const opt_spec *sp, const void *ctx)
{
    const child_drop *d = ctx;
    return !(sp->d->use & KID) || (d->config && sp->id == OPT_CONFIG) || (d->method && sp->id == OPT_METHOD);
}

int cli_child_args(int argc, char **argv, int drop_config, int drop_method, char ***out, int *nout)
{
    const child_drop d = {drop_config, drop_method};
    return args_kept(argc, argv, drop_for_child, &d, out, nout);
}

static int drop_named(const opt_spec *sp, const void *ctx)
{
    for (const char *const *n = ctx; *n; n++)
        if (strcmp(sp->d->name, *n) == 0) return 1;
    return 0;
}

int cli_iteration_options(const char **names, int max)
{
    int n = 0;
    opt_spec sp;
    for (int id = 0; spec_at(id, &sp) == 0; id++)
        if ((sp.d->flags & OPTION_ITERATION) && n < max - 1) names[n++] = sp.d->name;
    if (max > 0) names[n] = NULL;
    return n;
}

int cli_args_without(char *const *args, int nargs, const char *const *names, char ***out, int *nout)
{
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    if (!argv) return -1;
    argv[0] = "aebench";
    for (int i = 0; i < nargs; i++) argv[i + 1] = args[i];
    const int status = args_kept(nargs + 1, argv, drop_named, names, out, nout);
    free(argv);
    return status;
}

int cli_shape_addressable(const gpt_shape *sh, double *params, double *rows)
{
    /* (what index arithmetic, int rows and size_t bytes, can address) */
    const double R = (double)sh->batch * sh->seq;
    const double P = (double)sh->vocab_padded * sh->hidden + (double)sh->seq * sh->hidden +
                     (double)sh->layers * (12.0 * sh->hidden * sh->hidden + 13.0 * sh->hidden);
    if (params) *params = P;
    if (rows) *rows = R;
    return !(R * 4.0 * sh->hidden > 2147483647.0 || R * sh->vocab_padded > 1.0e15 || P * 16.0 > 1.0e18);
}

int cli_resolve_hosts(run_config *run_cfg, char *err, size_t errlen)
{
    if (!run_cfg->hosts_path[0]) return 0;
    if (run_cfg->ranks < 2)
        return cli_fail(err, errlen, "--hosts %s goes with --ranks N (N > 1): the ranks it starts on those machines",
                        run_cfg->hosts_path);
    host_list *h = malloc(sizeof *h);
    if (!h) return cli_fail(err, errlen, "out of memory");
    int status = host_list_read(run_cfg->hosts_path, h, err, errlen);
    if (!status && !host_is_this_machine(h->name[0]))
        status = cli_fail(err, errlen, "--hosts %s: its first machine, %s, is where mpiexec starts rank 0, whose results "
                       "and reports this process reads here: list this machine first", run_cfg->hosts_path, h->name[0]);
    if (!status) run_cfg->ranks_per_machine = host_list_ranks_per_machine(h, run_cfg->ranks, NULL);
    free(h);
    return status;
}

int cli_ranks_per_machine(const run_config *run_cfg)
{
    if (run_cfg->ranks_per_machine > 0) return run_cfg->ranks_per_machine;
    return run_cfg->ranks > 1 ? run_cfg->ranks : 1;
}

/* -m all -w W: W is a window only the windowed engines take. */
static int window_with_all(int window, char *err, size_t errlen)
{
    char who[256];
    const char *first = NULL;
    engine_option_takers("window", 0, who, sizeof who);
    for (int i = 0; !first && i < engine_count(); i++)
        if (engine_takes_option(engine_at(i), "window")) first = engine_at(i)->name;
    return cli_fail(err, errlen, "-w/--window %d with -m all: only %s %s a window of layers, and the other engines' "
                    "files would be named ws-%d (run -m %s -w %d, or -m all without -w)", window, who,
                    strchr(who, ' ') ? "have" : "has", window, first ? first : "?", window);
}

/* What the declarations say an option goes with: --X given without the option it goes with
 * (option_decl.goes_with), or an iteration (OPTION_ITERATION) beyond --iters.  (--find-max's
 * probes, which train 2 iterations, are given none of the latter: cli_iteration_options.) */
static int options_unpaired(const run_config *run_cfg, char *err, size_t errlen)
{
    opt_spec sp, with;
    for (int id = 0; spec_at(id, &sp) == 0; id++) {
        if (!is_given(run_cfg, &sp)) continue;
        const engine_config *e = &run_cfg->eng;
        char value[64] = "";
        if (sp.of_engines && (sp.d->set == SET_INT || sp.d->set == SET_INT_OR_AUTO))
            engine_option_value_text(sp.d, engine_option_value(sp.d, e), value, sizeof value);
        if (sp.d->goes_with && spec_by_name(sp.d->goes_with, &with) == 0 && !is_given(run_cfg, &with))
            return cli_fail(err, errlen, "--%s%s%s goes with --%s%s%s", sp.d->name, value[0] ? " " : "", value,
                            with.d->name, with.d->arg ? " " : "", with.d->arg ? with.d->arg : "");
        if ((sp.d->flags & OPTION_ITERATION) && sp.of_engines && engine_option_value(sp.d, e) > run_cfg->iters)
            return cli_fail(err, errlen, "--%s %s: the run has only %d iterations (--iters)", sp.d->name, value,
                            run_cfg->iters);
    }
    return 0;
}

static int validate(run_config *run_cfg, char *err, size_t errlen)
{
    gpt_shape *sh = &run_cfg->eng.shape;
    if (sh->hidden % sh->heads != 0)
        return cli_fail(err, errlen, "hidden size %d is not divisible by the number of heads %d",
                    sh->hidden, sh->heads);
    if (run_cfg->log_interval > run_cfg->iters) run_cfg->log_interval = run_cfg->iters;
    if (run_cfg->eng.window > sh->layers)
        return cli_fail(err, errlen, "window %d is larger than the number of layers %d",
                    run_cfg->eng.window, sh->layers);
    if (run_cfg->eng.optim.min_lr > run_cfg->eng.optim.lr)
        return cli_fail(err, errlen, "min-lr %g is above lr %g", run_cfg->eng.optim.min_lr,
                    run_cfg->eng.optim.lr);
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    double P, rows;
    if (!cli_shape_addressable(sh, &P, &rows))
        return cli_fail(err, errlen, "model or batch too large to address (%.3g parameters, %.3g rows)",
                    P, rows);
    if (run_cfg->eng.nvme_dir[0] && run_cfg->eng.offload != OFFLOAD_NVME && !run_cfg->search)
        return cli_fail(err, errlen, "--nvme-dir is only used with --offload nvme (or --search, which tries it)");
    opt_spec sp;
    for (int id = 0; !run_cfg->search && spec_at(id, &sp) == 0; id++)
        if ((sp.d->use & SRCH) && sp.id != OPT_SEARCH && is_given(run_cfg, &sp))
            return cli_fail(err, errlen, "--%s goes with --search", sp.d->name);
    if (run_cfg->min_samples_per_s > 0 && !run_cfg->search_largest)
        return cli_fail(err, errlen, "--min-samples-per-s goes with --search --largest (the largest model that "
                        "trains that fast)");
    /* (with --dry-run it is only carried: a sweep's and --find-max's checks of a run are dry
     * runs of its own arguments) */
    if (run_cfg->profile && (run_cfg->predict || run_cfg->calibrate || run_cfg->search))
        return cli_fail(err, errlen, "--profile times the steps a run trains: not with --%s",
                        run_cfg->predict ? "predict" : run_cfg->calibrate ? "calibrate" : "search");
    if (run_cfg->profile && run_cfg->eng.graphs == GRAPHS_ON)
        return cli_fail(err, errlen, "--graphs on: --profile times each op with events of its own, which a graph's "
                        "replay would not record (--graphs auto turns them off under --profile)");
    /* Options that would be taken and then do nothing (issue 47): refused, not a label or a no-op.
     * (-m all -w W: but for a dry run, which names no file and plans each engine as it would
     * run, and --search, which leaves the engines without a window out, saying so; --search's
     * own probe is such a dry run) */
    if (strcmp(run_cfg->method, "all") == 0 && cli_given(run_cfg, "window") && run_cfg->eng.window > 0 && !run_cfg->dry_run &&
        !run_cfg->search)
        return window_with_all(run_cfg->eng.window, err, errlen);
    static const char *const fail_opts[] = {"fail-rank", "fail-phase", "fail-kind"};
    for (size_t i = 0; i < sizeof fail_opts / sizeof fail_opts[0]; i++)
        if (cli_given(run_cfg, fail_opts[i]) && run_cfg->fail_at <= 0)
            return cli_fail(err, errlen, "--%s goes with --fail-at I (the iteration at which the fault happens)",
                            fail_opts[i]);
    if (options_unpaired(run_cfg, err, errlen)) return -1;
    if (run_cfg->machine_path[0] && !run_cfg->calibrate) {
        /* (read by --predict, --search, and a training run's -w auto; --calibrate makes it) */
        struct stat st;
        const int fd = open(run_cfg->machine_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        const int e = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EISDIR;
        if (fd >= 0) close(fd);
        if (e == EISDIR)
            return cli_fail(err, errlen, "machine file %s: not a regular file (the JSON file --calibrate writes was "
                            "expected)", run_cfg->machine_path);
        if (e) return cli_fail(err, errlen, "machine file %s: %s (make one with --calibrate)", run_cfg->machine_path, strerror(e));
    }
    if (run_cfg->search && (run_cfg->predict || run_cfg->calibrate || run_cfg->find_max || run_cfg->dry_run || run_cfg->resume))
        return cli_fail(err, errlen, "--search plans and predicts by itself: not with --%s",
                        run_cfg->predict ? "predict" : run_cfg->calibrate ? "calibrate" : run_cfg->find_max ? "find-max"
                        : run_cfg->dry_run ? "dry-run" : "resume");
    return 0;
}

struct cJSON *cli_args_config(char *const *args, int nargs, char *err, size_t errlen)
{
    cJSON *out = cJSON_CreateObject();
    char **argv = calloc((size_t)nargs + 2, sizeof *argv);
    if (!out || !argv) {
        cJSON_Delete(out);
        free(argv);
        return cli_fail(err, errlen, "out of memory"), NULL;
    }
    argv[0] = "aebench";
    for (int i = 0; i < nargs; i++) argv[i + 1] = args[i];
    getopt_table t;
    getopt_tables(&t);
    opterr = 0;
    optind = 1;
    int c, failed = 0;
    /* Two passes, as cli_parse: a config first, then the command line over it. */
    for (int pass = 0; pass < 2 && !failed; pass++) {
        optind = 1;
        while (!failed && (c = getopt_long(nargs + 1, argv, t.shortopts, t.longopts, NULL)) != -1) {
            opt_spec sp, kept;
            if (spec_of_getopt(c, &sp)) {
                failed = cli_fail(err, errlen, "option '%s' is not one a config can hold", argv[optind - 1]);
                break;
            }
            if ((pass == 0) != (sp.id == OPT_CONFIG)) continue;
            if (sp.id == OPT_CONFIG) {
                cJSON *cfg = read_json(optarg, err, errlen);
                if (!cfg) {
                    failed = -1;
                    break;
                }
                if (!cJSON_IsObject(cfg) || cJSON_GetObjectItemCaseSensitive(cfg, "runs")) {
                    cJSON_Delete(cfg);
                    failed = cli_fail(err, errlen, "config %s: a run list is not one run's config", optarg);
                    break;
                }
                for (cJSON *item = cfg->child; item; item = item->next)
                    if (item->string && config_spec(item->string, &kept) == 0)
                        cJSON_AddItemToObject(out, item->string, cJSON_Duplicate(item, 1));
                cJSON_Delete(cfg);
                continue;
            }
            if (config_spec(sp.d->name, &kept)) {
                failed = cli_fail(err, errlen, "--%s is typed by hand, not kept in a config", sp.d->name);
                break;
            }
            cJSON *v = NULL;
            if (sp.d->kind == ARG_NONE) v = cJSON_CreateTrue();
            else if (sp.d->kind == ARG_INT || sp.d->kind == ARG_NUM) v = cJSON_CreateNumber(strtod(optarg, NULL));
            else v = cJSON_CreateString(optarg);
            cJSON_DeleteItemFromObjectCaseSensitive(out, sp.d->name);
            if (!v || !cJSON_AddItemToObject(out, sp.d->name, v)) failed = cli_fail(err, errlen, "out of memory");
        }
    }
    free(argv);
    optind = 1;
    if (failed) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

cli_outcome cli_parse(int argc, char **argv, run_config *run_cfg, char *err, size_t errlen)
{
    options_checked();
    set_defaults(run_cfg);
    getopt_table t;
    getopt_tables(&t);

    /* Pass 1: --help, --version, --config (the config applies before other flags). */
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, t.shortopts, t.longopts, NULL)) != -1) {
        if (c == '?') {
            if (optopt) return cli_fail(err, errlen, "unknown option '-%c'", optopt), CLI_ERROR;
            return cli_fail(err, errlen, "unknown option '%s'", argv[optind - 1]), CLI_ERROR;
        }
        if (c == ':') return cli_fail(err, errlen, "option '%s' needs a value", argv[optind - 1]), CLI_ERROR;
        if (c == 1000 + OPT_HELP) {
            cli_usage(stdout);
            return CLI_DONE;
        }
        if (c == 1000 + OPT_LIST_ENGINES) {
            /* (the registry's names, what -m takes besides all; not the aliases) */
            for (int i = 0; i < engine_count(); i++) printf("%s\n", engine_at(i)->name);
            return CLI_DONE;
        }
        if (c == 1000 + OPT_VERSION) {
            /* and what this build can do (tests ask whether it runs ranks) */
            printf("aebench %s (backends: cpu%s; ranks: %s)\n", AEBENCH_VERSION,
#ifdef AEBENCH_HAVE_CUDA
                   ", cuda",
#else
                   "",
#endif
#ifdef AEBENCH_HAVE_MPI
                   "mpi"
#else
                   "none, built without MPI"
#endif
            );
            return CLI_DONE;
        }
        if (c == 1000 + OPT_CONFIG)
            snprintf(run_cfg->config_path, sizeof run_cfg->config_path, "%s", optarg);
        /* (at once: a rank that refuses what comes after it still tells its supervisor so,
         * aebench.c; --ranks puts it first) */
        if (c == 1000 + OPT_JOB_NOTES) {
            opt_spec sp;
            if (spec_of_getopt(c, &sp) == 0 && apply(run_cfg, &sp, optarg, 1, NULL, err, errlen)) return CLI_ERROR;
        }
    }
    if (optind < argc) return cli_fail(err, errlen, "unexpected argument '%s'", argv[optind]), CLI_ERROR;
    if (run_cfg->config_path[0] && load_config(run_cfg, run_cfg->config_path, err, errlen)) return CLI_ERROR;

    /* Pass 2: every other option, overriding the config. */
    recompute_seen seen = {0};
    optind = 1;
    while ((c = getopt_long(argc, argv, t.shortopts, t.longopts, NULL)) != -1) {
        opt_spec sp;
        if (spec_of_getopt(c, &sp) || sp.id == OPT_CONFIG) continue;
        if (apply(run_cfg, &sp, optarg, 1, NULL, err, errlen)) return CLI_ERROR;
        note_recompute(&seen, &sp, optarg, 1);
    }
    if (recompute_clash(&seen, "", err, errlen)) return CLI_ERROR;
    /* A run list's runs are checked one by one by the sweep driver (with their own shapes). */
    if (run_cfg->config_runs) {
        run_cfg->eng.shape.vocab_padded = gpt_pad_vocab(run_cfg->eng.shape.vocab);
        return CLI_RUN;
    }
    return validate(run_cfg, err, errlen) ? CLI_ERROR : CLI_RUN;
}

int cli_given(const run_config *run_cfg, const char *long_name)
{
    opt_spec sp;
    return spec_by_name(long_name, &sp) == 0 && is_given(run_cfg, &sp);
}

int cli_option_taken_by(const char *long_name, const engine_vtbl *eng)
{
    opt_spec sp;
    if (spec_by_name(long_name, &sp) != 0) return 0;
    return !sp.of_engines || engine_takes_option(eng, long_name);
}

int cli_option_one_job(const char *long_name)
{
    opt_spec sp;
    return spec_by_name(long_name, &sp) == 0 && (sp.d->flags & OPTION_ONE_JOB) != 0;
}

const char *cli_cpu_preset_text(void)
{
    return "-l 4 -h 128 --heads 4 --seq 128 -b 4 --vocab 4096, lr 1e-3 warming up over 10 iterations";
}

int cli_apply_cpu_preset(run_config *run_cfg)
{
    static const char *const shape_opts[] = {"layers", "hidden", "heads", "seq", "batch", "vocab"};
    for (size_t i = 0; i < sizeof shape_opts / sizeof shape_opts[0]; i++)
        if (cli_given(run_cfg, shape_opts[i])) return 0;
    gpt_shape *sh = &run_cfg->eng.shape;
    *sh = (gpt_shape){.layers = 4, .hidden = 128, .heads = 4, .seq = 128, .batch = 4, .vocab = 4096};
    sh->vocab_padded = gpt_pad_vocab(sh->vocab);
    /* The artifact's schedule warms up over 3200 iterations, so a 50-iteration run would
     * barely move; the preset trains quickly enough for the loss to fall visibly. */
    gpt_optim *o = &run_cfg->eng.optim;
    if (!cli_given(run_cfg, "lr")) o->lr = 1e-3;
    if (!cli_given(run_cfg, "min-lr")) o->min_lr = 1e-4;
    if (!cli_given(run_cfg, "lr-decay-iters")) o->decay_iters = 1000;
    if (run_cfg->eng.window > sh->layers) run_cfg->eng.window = sh->layers;
    run_cfg->cpu_preset = 1;
    return 1;
}

/* Option sp's line in --help: its names and value, then its help (an engine's option: after
 * the engines that take it, from the registry). */
static void usage_line(FILE *out, const opt_spec *sp)
{
    char lhs[64], who[256] = "";
    const option_decl *d = sp->d;
    if (d->short_name)
        snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", d->short_name, d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    else
        snprintf(lhs, sizeof lhs, "    --%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    if (sp->of_engines) {
        engine_option_takers(d->name, 0, who, sizeof who - 2);
        strcat(who, ": ");
    }
    fprintf(out, "  %-34s %s%s\n", lhs, who, d->help);
}

void cli_usage(FILE *out)
{
    fprintf(out,
            "usage: aebench [-m METHOD] [-l L] [-h H] [-b B] [-w W|auto] [options]\n"
            "\n"
            "Trains a Megatron GPT with one GPU-memory offloading strategy and writes\n"
            "results/log_METHOD_l-L_h-H_bs-B_ws-W_DATE.EPOCH.txt (the artifact's line formats)\n"
            "and a .json summary beside it.\n\n"
            "methods:\n");
    /* those -m all runs, then all, then the others */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < engine_count(); i++) {
            const engine_vtbl *e = engine_at(i);
            if (engine_in_all(e) != (pass == 0)) continue;
            fprintf(out, "  %-14s %s%s%s%s\n", e->name, e->description, e->alias ? " (alias " : "",
                    e->alias ? e->alias : "", e->alias ? ")" : "");
        }
        if (pass == 0) fprintf(out, "  %-14s %s\n", "all", "every method above, each run in its own child process");
    }
    fprintf(out, "\noptions:\n");
    opt_spec sp;
    for (int id = 0; spec_at(id, &sp) == 0; id++)
        if (!sp.of_engines) usage_line(out, &sp);
    /* (the engines' options: those several take, then each engine's own, in registry order) */
    fprintf(out, "\noptions of the engines (each after the engines that take it):\n");
    for (int pass = 0; pass < 2; pass++)
        for (int id = 0; spec_at(id, &sp) == 0; id++)
            if (sp.of_engines && (sp.owner == NULL) == (pass == 0)) usage_line(out, &sp);
    fprintf(out,
            "\nWithout a GPU, and with no model shape given, the CPU backend uses a small preset:\n"
            "  %s\n"
            "A config file is a JSON object whose keys are the long option names; flags on the\n"
            "command line override it.  A config with \"runs\" is a run list (configs/caseN.json):\n"
            "  {\"description\": \"...\", \"defaults\": {OPTIONS}, \"runs\": [{OPTIONS}, ...]}\n"
            "each run's keys over the defaults, then the command line over both; a list value\n"
            "([2, 4, 6]) runs once per element, \"method\": \"all\" once per engine,\n"
            "\"find-max\": true runs --find-max, \"layers-from\": ENGINE|self|all takes the layers\n"
            "from an earlier --find-max result.  Sweeps (-m all, run lists, --find-max) run every\n"
            "run as a child process and end with a summary; --resume skips runs already ok.\n"
            "Exit codes: 0 ok; 1 error (a sweep: some run failed or crashed); 2 bad input, nothing\n"
            "written; 3 out of memory (a sweep: some run did not fit, none failed); 4 a rank was\n"
            "lost or hung (its peers' watchdogs or the supervisor ended the job; mpiexec's own codes\n"
            "are mapped to it); 128+n: stopped by signal n (SIGINT 130, SIGTERM 143).\n",
            cli_cpu_preset_text());
}

int cli_resolve_ranks(run_config *run_cfg, int world, int local_world, char *err, size_t errlen)
{
    engine_config *e = &run_cfg->eng;
    e->world = world;
    e->local_world = local_world;
    /* (the ranks of a pipeline share their rows: data parallel over world / stages; ranks that
     * are not whole pipelines are the engine's to refuse) */
    const int dp = engine_dp_world(e), per_step = e->shape.batch * dp;
    const int G = e->global_batch ? e->global_batch : per_step;
    if (G % per_step != 0)
        return cli_fail(err, errlen, "--global-batch %d is not a multiple of batch x %s = %d x %d", G,
                        engine_model_ranks(e) > 1 ? "data-parallel ranks" : "ranks", e->shape.batch, dp);
    e->micro_batches = G / per_step;
    return 0;
}

/* FNV-1a over bytes. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* Whether the option's field holds what set_defaults gives it. */
static int at_default(const run_config *run_cfg, const run_config *defaults, const opt_spec *sp)
{
    const size_t at = sp->base + sp->d->offset;
    const char *mine = (const char *)run_cfg + at, *dflt = (const char *)defaults + at;
    return sp->d->text ? strncmp(mine, dflt, sp->d->size) == 0 : memcmp(mine, dflt, sp->d->size) == 0;
}

int cli_is_fingerprint(const char *text, size_t len)
{
    if (len != 16) return 0;
    for (size_t i = 0; i < len; i++)
        if (!strchr("0123456789abcdef", text[i]) || !text[i]) return 0;
    return 1;
}

uint64_t cli_fingerprint(const run_config *run_cfg)
{
    uint64_t hashes[CLI_OPTIONS_MAX], h = 0xcbf29ce484222325ULL;
    const char *names[CLI_OPTIONS_MAX];
    const int n = cli_option_hashes(run_cfg, hashes, names, CLI_OPTIONS_MAX); /* (room for every option) */
    run_config defaults;
    set_defaults(&defaults);
    for (int i = 0; i < n; i++) {
        opt_spec sp;
        if (spec_by_name(names[i], &sp) || sp.d->scope == SCOPE_AGREE) continue;
        /* (an option added after results were made, at its default, leaves their fingerprints
         * as they were) */
        if (sp.d->scope == SCOPE_RESULT_SET && at_default(run_cfg, &defaults, &sp)) continue;
        h = fnv1a(h, names[i], strlen(names[i]));
        h = fnv1a(h, &hashes[i], sizeof hashes[i]);
    }
    return h;
}

int cli_option_hashes(const run_config *run_cfg, uint64_t *hashes, const char **names, int max)
{
    const int n = options_checked();
    if (n > max) return -1;
    /* Every parsed value that a rank acts on, under the name of the option that sets it
     * (strings by their text, numbers by their bytes), in the order of their slots. */
    opt_spec sp;
    for (int id = 0; spec_at(id, &sp) == 0; id++) {
        const option_decl *d = sp.d;
        if (d->scope == SCOPE_LOCAL) continue;
        const char *field = (const char *)run_cfg + sp.base + d->offset;
        hashes[d->slot] = fnv1a(0xcbf29ce484222325ULL, field, d->text ? strnlen(field, d->size) : d->size);
        names[d->slot] = d->name;
    }
    return n;
}
