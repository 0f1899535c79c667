/*
 * option_decl.h — how an option is declared: the driver's (cmd/options.h), the options several
 * engines take (engines/registry.c) and each engine's own (its engine_vtbl.own_options, in its
 * file).  cmd/cli.c reads every declaration for the parser, the config keys, --help, the
 * defaults, the ranks' agreement and the results' fingerprint; the registry reads the engines'
 * for its refusals (engine_option_refused) and --search for its knobs.
 *
 * An engine's option is declared once, in its own file, with OPTION_FIELD(f) naming the
 * engine_config field it sets; a new engine with an option of its own touches only its file
 * (a field in engine_config.own_values where it needs no named one) and one registry line.
 */
#ifndef AEBENCH_OPTION_DECL_H
#define AEBENCH_OPTION_DECL_H

#include <stddef.h>

struct engine_config;

/* What an option takes: a switch (true/false in a config), an integer, a number, text, or text
 * that a config may give as a whole number (-w 15 or "auto"). */
typedef enum option_arg { ARG_NONE, ARG_INT, ARG_NUM, ARG_TEXT, ARG_TEXT_OR_INT } option_arg;

/* Where an option may be given: a config may hold it; it is handed on to the child runs of a
 * sweep; it is one of --search's own (only with --search, typed by hand).  0: typed by hand
 * and kept by this process. */
enum { OPTION_CFG = 1u << 0, OPTION_KID = 1u << 1, OPTION_SRCH = 1u << 2 };

/* What an option changes: nothing the ranks share (LOCAL); what every rank does, so all ranks
 * must agree, but not the results (AGREE: where it writes, how often it logs, job ids); the
 * results (RESULT: the fingerprint holds it, and the ranks must agree); the results where it
 * differs from its default (RESULT_SET: results made before it keep their fingerprints). */
typedef enum option_scope { SCOPE_LOCAL, SCOPE_AGREE, SCOPE_RESULT, SCOPE_RESULT_SET } option_scope;

/* What a number option must be. */
typedef enum num_rule { NUM_ANY = 0, NUM_POSITIVE, NUM_NON_NEGATIVE, NUM_FRACTION } num_rule;

/* One word an option takes, and the value it sets. */
typedef struct option_choice {
    const char *word;
    int value;
} option_choice;

/* How a value is checked and stored in the option's field:
 *   SET_INT          an integer in [lo, hi] (an int or a 64-bit field)
 *   SET_INT_OR_AUTO  the same, or "auto" (auto_value); `what` says what else it takes
 *   SET_NUM          a finite number under `rule`
 *   SET_WORDS        one of `words`
 *   SET_PATH         a path (what: what it names, "directory"; NULL: may be empty)
 *   SET_FLAG         a switch (1; false in a config: 0)
 *   SET_TEXT         text that fits the field (the check says what else it must be)
 *   SET_BYTES        a size (32G, 512M, bytes): the driver's
 *   SET_SPECIAL      a setter of the driver's own (cmd/cli.c)
 *   SET_NONE         no field: it acts in the parser itself (--config, --help) */
typedef enum option_set {
    SET_NONE, SET_INT, SET_INT_OR_AUTO, SET_NUM, SET_WORDS, SET_PATH, SET_FLAG, SET_TEXT, SET_BYTES, SET_SPECIAL
} option_set;

/* When an engine that does not take an option refuses it (engine_option_refused):
 *   REFUSED_GIVEN   given, with a value not in `inert` (none: any value), to a run of that
 *                   engine; a sweep hands it on to whichever of its engines take it (-m all
 *                   -w 4 is the windowed engines' window)
 *   REFUSED_ALWAYS  its value not in `inert`, given or not: no run of that engine, a sweep's
 *                   included (it leaves the engine out), since the run would be another
 *                   configuration than its label says
 *   REFUSED_NEVER   never: it only says where or how the engines that take it do what another
 *                   option asks (--nvme-dir), which that option's refusal covers */
typedef enum option_refusal { REFUSED_GIVEN = 0, REFUSED_ALWAYS, REFUSED_NEVER } option_refusal;

/* --search tries an option's search values (where it is not given, and the engine takes it)
 * only when the run can use them: several ranks, clipping on (--clip-grad > 0), a disk tier
 * known where the search puts it.  0: always. */
enum { SEARCH_WITH_RANKS = 1u << 0, SEARCH_WITH_CLIPPING = 1u << 1, SEARCH_WITH_DISK = 1u << 2 };

/* The most iterations a run takes (--iters, and the options whose value is one). */
enum { OPTION_MAX_ITERS = 1000000000 };

/* flags: its value is an iteration of the run (refused beyond --iters; --find-max's probes,
 * which train 2 iterations, go without it). */
enum { OPTION_ITERATION = 1u << 0,
       /* it names one job's state (a checkpoint store's id, a recovery of it): --rerun, which
        * runs the whole job again as a new one, leaves it out */
       OPTION_ONE_JOB = 1u << 1,
       /* it lays the model out: which ranks hold which part, or which tier holds the state
        * (--tp, --pp, --zero-stage, --offload): --search --verify trains the fastest
        * configuration of every layout it predicted, so that what it proves spans them */
       OPTION_LAYOUT = 1u << 2 };

typedef struct option_decl {
    const char *name;     /* --name, and its key in a config */
    char short_name;      /* -x, or 0 */
    option_arg kind;
    const char *arg;      /* its value's name in --help (NULL: a switch) */
    option_set set;
    size_t offset, size;  /* its field: in engine_config (the engines'), run_config (the driver's) */
    int text;             /* the field is a string: hashed by its text */
    long long lo, hi;     /* an integer's range */
    const char *note;     /* said after a range's or a number's error */
    num_rule rule;
    int auto_value;       /* what "auto" sets (SET_INT_OR_AUTO) */
    const char *what;     /* SET_INT_OR_AUTO: what else it takes; SET_PATH: what it names */
    const option_choice *words; /* SET_WORDS, in --help's and the messages' order */
    int nwords;
    /* Optional, after the value passed its kind's checks and before it is stored: what else
     * it must be (opt: how messages name the option; value: as given).  0, or -1 with one
     * line in err. */
    int (*check)(const char *opt, const char *value, char *err, size_t errlen);
    const char *dflt;     /* the default, as text the option takes (NULL: the field's zero) */
    option_scope scope;
    int slot;             /* its place in the per-option hashes (not LOCAL): 0, 1, 2, ... with
                             no gaps over every table; a new option takes the next free one */
    unsigned use;         /* OPTION_CFG, OPTION_KID, OPTION_SRCH */
    unsigned flags;       /* OPTION_ITERATION, OPTION_ONE_JOB */
    const char *goes_with; /* given, it needs this option given too (NULL: none) */
    /* The engines' options: when one that does not take it refuses it, what such an engine
     * lacks ("has no window of layers"; NULL: "does not take it"), and the values that ask
     * nothing of it (the default among them) */
    option_refusal refusal;
    const char *lacks;
    const long long *inert;
    int ninert;
    /* --search: the values it tries (the default first) where it is not given and the
     * engine takes it, under search_when (SEARCH_WITH_*); none: not searched */
    const long long *search;
    int nsearch;
    unsigned search_when;
    const char *help;     /* its line in --help (the engines that take it are said before it) */
} option_decl;

/* Initialisers of an option_decl, for the engines' tables. */
#define OPTION_FIELD(f)                                                                                    \
    .offset = offsetof(struct engine_config, f), .size = sizeof(((struct engine_config *)0)->f),        \
    .text = _Generic(((struct engine_config *)0)->f, char *: 1, default: 0)
#define OPTION_WORDS(...)                                                                                  \
    .words = (const option_choice[]){__VA_ARGS__},                                                        \
    .nwords = (int)(sizeof((const option_choice[]){__VA_ARGS__}) / sizeof(option_choice))
#define OPTION_INERT(...)                                                                                  \
    .inert = (const long long[]){__VA_ARGS__},                                                            \
    .ninert = (int)(sizeof((const long long[]){__VA_ARGS__}) / sizeof(long long))
#define OPTION_SEARCH(...)                                                                                 \
    .search = (const long long[]){__VA_ARGS__},                                                           \
    .nsearch = (int)(sizeof((const long long[]){__VA_ARGS__}) / sizeof(long long))
/* An engine's table of its own options, in its engine_vtbl initialiser. */
#define OWN_OPTIONS(table) .own_options = (table), .n_own_options = (int)(sizeof(table) / sizeof((table)[0]))

#endif
