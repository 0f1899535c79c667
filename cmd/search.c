/*
 * search.c — aebench --search (search.h).
 *
 * 1. A --dry-run child says how a run resolves here (the backend, the CPU preset's shape,
 *    the budgets a run would get, the machine file): this process opens no backend, so that
 *    --verify's runs get the whole GPU.
 * 2. The budgets per rank: --gpu-mem-limit / --cpu-mem-limit, else the smaller of what the
 *    machine file recorded and what is free now; host memory (and the disk under --nvme-dir)
 *    shared by the ranks of the machine, as run.c shares them.
 * 3. Every configuration (knobs below) is checked by the engine (engine_config_refused),
 *    planned against the three budgets, and, when it fits and its micro-batch is calibrated,
 *    predicted (pred_settle over the engine's walk, as --predict does).  Each configuration
 *    lands in exactly one bucket of the tally: refused, over one tier, not calibrated, not
 *    modelled, or predicted.
 * 4. --largest: for every engine and knob setting, the largest -l whose plan fits (plans
 *    grow with the layers: doubling, then bisection; a windowed engine at its smallest window
 *    and at -w auto, the largest the GPU holds), then the full search at the largest of all.  With
 *    --min-samples-per-s X, a bisection on the layers for the largest whose best predicted
 *    throughput is at least X.
 * 5. The top K printed with the exact command of each; the JSON (results/search_*.json) keeps
 *    every predicted configuration; --out writes the winner as a config; --verify trains.
 *
 * What the user gave is fixed; what they did not is searched.  The knobs, per engine:
 *   micro-batch      every divisor of global batch / ranks (-b fixes it)
 *   its options      each option the engine takes that declares search values
 *                    (option_decl.search: a ZeRO stage on N > 1 ranks, --dpu off/on, --offload
 *                    cpu/nvme where the disk tier is known, --clip-speculate auto/0 with
 *                    clipping on, ...), in the order of the engines' option tables
 *   --recompute      full/selective/none, every engine (what each layer keeps for its
 *                    backward against what the backward redoes)
 *   -w, --placement  the windowed engines (uses_window): every window 1..L and auto (resident
 *                    layers and three slots sized to the GPU budget, which no -w W gives);
 *                    those that take --placement, the resident layers at the bottom or
 *                    spread (one placement at W = L: nothing streams)
 * An engine that -m all leaves out is searched only when -m names it (it answers another
 * question).
 *
 * One file of ~1,200 lines: the enumeration, --largest, the commands, the output and --verify
 * all work on the one search state and its knob lists; split, each part would need them all.
 */
#include "search.h"

#include "child.h"
#include "machine.h"
#include "report.h"
#include "bisect.h"
#include "run.h"
#include "strv.h"

#include "../engines/runtime/predict.h"
#include "../kernels/rng.h"
#include "../engines/runtime/timer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { TIER_GPU, TIER_HOST, TIER_DISK, TIERS };
enum { MAX_BATCHES = 64, MAX_REASONS = 8, MAX_ENGINES = 16, LAYERS_CAP = 1 << 20 };
/* The engines' options that declare search values (option_decl.search), and the most values
 * one declares. */
enum { MAX_KNOB_OPTIONS = 16, MAX_KNOB_VALUES = 8 };
/* the windowed engines' windows: every one up to WINDOWS_ALL layers; beyond, a grid of WINDOW_GRID over
 * [1, L] refined around the fastest (try_windows) */
enum { WINDOWS_ALL = 96, WINDOW_GRID = 33 };
/* The most layers one search's predictions walk in all (a prediction at L layers counts L;
 * it walks them a few dozen times while it settles), a few seconds on the CPU machine: an
 * absurd budget (--largest with petabytes answers a million layers) ends, saying so, instead
 * of running for hours.  A real search stays far below: l1000 with every knob is 2-3e6. */
#define SEARCH_WORK_MAX 1e7

static const char *const BOUND_NAMES[BUSY_KINDS] = {"compute", "h2d", "d2h", "host adam", "disk", "collectives"};

/* One configuration's settings beside the engine and the layers. */
typedef struct knobs {
    int batch;          /* micro-batch per rank */
    gpt_recompute recompute;
    int window;         /* the windowed engines': 1..L; 0 auto (--largest's bound only) */
    int placement;      /* PLACE_* */
    long long value[MAX_KNOB_OPTIONS]; /* each of search.knob_opt's (searched or the run's) */
} knobs;

typedef struct candidate {
    const engine_vtbl *eng;
    knobs k;
    int layers;
    engine_plan plan;
    engine_prediction pred;
    long seq; /* order of enumeration: the last tie-break, so the ranking is deterministic */
    int micro_batches; /* a step's, as its config counts them (config_of) */
} candidate;

typedef struct reason {
    char text[480];
    long n;
} reason;

/* Where every configuration of one enumeration went. */
typedef struct tally {
    long considered, refused, over[TIERS], not_calibrated, not_modelled, predicted;
    long not_calibrated_at[MAX_BATCHES];
    reason refused_why[MAX_REASONS], modelled_why[MAX_REASONS];
} tally;

typedef struct batch_rates {
    int batch;
    int loaded;       /* m holds the machine file's entry at this micro-batch */
    machine_rates m;
} batch_rates;

typedef struct search {
    const run_config *run_cfg;
    int argc;
    char **argv;
    char exe[PATH_MAX];
    char **base;      /* the command line handed on to each configuration's command */
    int nbase;
    gpt_shape shape;  /* as a run resolves it (the CPU preset where it applies) */
    int preset;
    char backend[8];
    char machine[PATH_MAX];
    char machine_err[900]; /* why the file gives no rates (then nothing is predicted) */
    int world, local, global_batch;
    int nccl; /* the machine file is a GPU machine's (engine_config.nccl) */
    int nbatches;
    batch_rates rates[MAX_BATCHES];
    size_t budget[TIERS];
    int disk_known;
    char disk_why[600];
    char nvme_dir[ENGINE_PATH_MAX];
    const engine_vtbl *engines[MAX_ENGINES];
    int nengines;
    /* the engines' options that declare search values, in engine_option_at's order */
    const option_decl *knob_opt[MAX_KNOB_OPTIONS];
    int nknob_opts;
    /* the enumeration in progress */
    int keep;         /* keep every predicted configuration in c (else only the best) */
    candidate *c;
    size_t n, cap;
    candidate best;
    int have_best;
    tally t;
    double work;   /* layer walks so far (SEARCH_WORK_MAX) */
    int truncated; /* the work bound stopped the search */
} search;

/* ---- small helpers --------------------------------------------------------------------------- */

static void count_reason(reason *list, const char *why)
{
    for (int i = 0; i < MAX_REASONS; i++) {
        if (list[i].n && strcmp(list[i].text, why) == 0) {
            list[i].n++;
            return;
        }
        if (!list[i].n) {
            snprintf(list[i].text, sizeof list[i].text, "%.470s", why);
            list[i].n = 1;
            return;
        }
    }
    /* (the table is full: the last row gathers the rest) */
    snprintf(list[MAX_REASONS - 1].text, sizeof list[MAX_REASONS - 1].text, "other reasons");
    list[MAX_REASONS - 1].n++;
}

static void walk_engine(const engine_config *cfg, const machine_rates *m, const void *ctx, engine_prediction *out)
{
    ((const engine_vtbl *)ctx)->predict(cfg, m, out);
}

static double samples_per_s(const search *s, const candidate *c) { return s->global_batch * 1000.0 / c->pred.ms; }

/* Model TFLOP/s per GPU (rank), as a run's log reports them. */
static double tflops_of(const search *s, const candidate *c)
{
    gpt_shape sh = s->shape;
    sh.layers = c->layers, sh.batch = c->k.batch;
    sh.vocab_padded = gpt_pad_vocab(sh.vocab);
    /* (the step's model FLOPs, every micro-batch of the global batch, shared by the world) */
    const double step_flops = gpt_model_flops(&sh) * (s->global_batch / c->k.batch);
    return step_flops / s->world / (c->pred.ms * 1e-3) / 1e12;
}

/* --placement's word for p (its declaration's). */
static void placement_name(int p, char *buf, size_t len)
{
    const option_decl *d = engine_option_named("placement");
    if (d) engine_option_value_text(d, p, buf, len);
    else snprintf(buf, len, "%d", p);
}

/* Whether the window walk places e's resident layers (it takes --placement). */
static int places(const engine_vtbl *e) { return e->uses_window && engine_takes_option(e, "placement"); }

/* Whether the search tries option d's values for engine e: e takes it, it was not given, and
 * the run can use them (option_decl.search_when). */
static int searched(const search *s, const engine_vtbl *e, const option_decl *d)
{
    const unsigned when = d->search_when;
    return d->nsearch > 0 && engine_takes_option(e, d->name) && !cli_given(s->run_cfg, d->name) &&
           (!(when & SEARCH_WITH_RANKS) || s->world > 1) && (!(when & SEARCH_WITH_CLIPPING) || s->run_cfg->eng.optim.clip > 0) &&
           (!(when & SEARCH_WITH_DISK) || s->disk_known);
}

static batch_rates *rates_at(search *s, int batch)
{
    for (int i = 0; i < s->nbatches; i++)
        if (s->rates[i].batch == batch) return &s->rates[i];
    return NULL;
}

/* ---- one configuration ----------------------------------------------------------------------- */

static void config_of(const search *s, const knobs *k, int layers, engine_config *cfg)
{
    *cfg = s->run_cfg->eng;
    cfg->shape = s->shape;
    cfg->shape.layers = layers;
    cfg->shape.batch = k->batch;
    cfg->shape.vocab_padded = gpt_pad_vocab(cfg->shape.vocab);
    cfg->world = s->world;
    cfg->local_world = s->local;
    cfg->nccl = s->nccl;
    for (int j = 0; j < s->nknob_opts; j++) engine_option_store(s->knob_opt[j], cfg, k->value[j]);
    /* (after the knobs: the global batch over the micro-batch times the data-parallel ranks,
     * world / (T x P), as cli.c counts them for the run the search prints; a --tp 2 config on 2
     * ranks is one copy of the model, which takes the whole global batch) */
    cfg->micro_batches = s->global_batch / (k->batch * engine_dp_world(cfg));
    cfg->recompute = k->recompute;
    cfg->window = k->window;
    cfg->placement = k->placement;
    if (cfg->offload == OFFLOAD_NVME) snprintf(cfg->nvme_dir, sizeof cfg->nvme_dir, "%s", s->nvme_dir);
    cfg->gpu_budget = s->budget[TIER_GPU];
    cfg->host_budget = s->budget[TIER_HOST];
}

/* The engine accepts it and its plan fits every budget: 1; else 0 and, with tier, which
 * budget it is over (TIERS: refused). */
static int fits(const search *s, const engine_vtbl *eng, const knobs *k, int layers, engine_config *cfg,
                engine_plan *plan, int *tier, char *why, size_t whylen)
{
    config_of(s, k, layers, cfg);
    const batch_rates *br = rates_at((search *)s, k->batch);
    cfg->machine = br && br->loaded ? &br->m : NULL;
    *tier = TIERS;
    if (!cli_shape_addressable(&cfg->shape, NULL, NULL)) {
        snprintf(why, whylen, "l%d is too large to address", layers);
        return 0;
    }
    if (engine_config_refused(eng, cfg, why, whylen)) return 0;
    memset(plan, 0, sizeof *plan);
    eng->plan(cfg, plan);
    if (plan->gpu_bytes > s->budget[TIER_GPU]) *tier = TIER_GPU;
    else if (plan->host_bytes > s->budget[TIER_HOST]) *tier = TIER_HOST;
    else if (plan->disk_bytes > 0 && (!s->disk_known || plan->disk_bytes > s->budget[TIER_DISK])) *tier = TIER_DISK;
    else return 1;
    return 0;
}

/* Lower is better: the step, then the memory it takes, then the order found. */
static int candidate_cmp(const void *pa, const void *pb)
{
    const candidate *a = pa, *b = pb;
    if (a->pred.ms != b->pred.ms) return a->pred.ms < b->pred.ms ? -1 : 1;
    const double ma = (double)a->plan.gpu_bytes + (double)a->plan.host_bytes,
                 mb = (double)b->plan.gpu_bytes + (double)b->plan.host_bytes;
    if (ma != mb) return ma < mb ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* One configuration into the tally (and s->c); *ms its prediction, 0 when it has none. */
static int consider(search *s, const engine_vtbl *eng, const knobs *k, int layers, double *ms)
{
    engine_config cfg;
    engine_plan plan;
    int tier;
    char why[400];
    *ms = 0;
    if (s->truncated) return 0;
    s->t.considered++;
    if (!fits(s, eng, k, layers, &cfg, &plan, &tier, why, sizeof why)) {
        if (tier == TIERS) {
            char line[460];
            snprintf(line, sizeof line, "%s: %s", eng->name, why);
            count_reason(s->t.refused_why, line);
            s->t.refused++;
        } else {
            s->t.over[tier]++;
        }
        return 0;
    }
    batch_rates *br = rates_at(s, k->batch);
    if (!br || !br->loaded) {
        s->t.not_calibrated++;
        if (br) s->t.not_calibrated_at[br - s->rates]++;
        return 0;
    }
    if (s->work + layers > SEARCH_WORK_MAX) {
        s->truncated = 1;
        s->t.considered--;
        return 0;
    }
    s->work += layers;
    candidate c;
    memset(&c, 0, sizeof c);
    if (eng->predict) pred_settle(&cfg, &br->m, walk_engine, eng, &c.pred);
    if (!c.pred.modelled || !(c.pred.ms > 0)) {
        char line[260];
        snprintf(line, sizeof line, "%s: %s", eng->name, c.pred.why[0] ? c.pred.why : "the engine has no model");
        count_reason(s->t.modelled_why, line);
        s->t.not_modelled++;
        return 0;
    }
    s->t.predicted++;
    *ms = c.pred.ms;
    c.eng = eng, c.k = *k, c.layers = layers, c.plan = plan, c.seq = s->t.considered;
    c.micro_batches = cfg.micro_batches;
    if (!s->have_best || candidate_cmp(&c, &s->best) < 0) s->best = c, s->have_best = 1;
    if (!s->keep) return 0;
    if (s->n == s->cap) {
        const size_t cap = s->cap ? s->cap * 2 : 1024;
        candidate *grown = realloc(s->c, cap * sizeof *grown);
        if (!grown) return -1;
        s->c = grown, s->cap = cap;
    }
    s->c[s->n++] = c;
    return 0;
}

/* ---- the knobs ------------------------------------------------------------------------------- */

typedef struct knob_lists {
    long long value[MAX_KNOB_OPTIONS][MAX_KNOB_VALUES]; /* each of search.knob_opt's */
    int nvalue[MAX_KNOB_OPTIONS];
    int place[2], nplace;
    gpt_recompute recompute[GPT_RECOMPUTE_MODES];
    int nrecompute;
} knob_lists;

static void knob_lists_of(const search *s, const engine_vtbl *e, knob_lists *kl)
{
    const run_config *run_cfg = s->run_cfg;
    const engine_config *ec = &run_cfg->eng;
    memset(kl, 0, sizeof *kl);
    for (int j = 0; j < s->nknob_opts; j++) {
        const option_decl *d = s->knob_opt[j];
        if (searched(s, e, d))
            for (int i = 0; i < d->nsearch; i++) kl->value[j][kl->nvalue[j]++] = d->search[i];
        else
            kl->value[j][kl->nvalue[j]++] = engine_option_value(d, ec);
    }
    kl->recompute[kl->nrecompute++] = ec->recompute;
    if (!cli_given(run_cfg, "recompute") && !cli_given(run_cfg, "no-ckpt")) {
        for (int m = 0; m < GPT_RECOMPUTE_MODES; m++)
            if ((gpt_recompute)m != ec->recompute) kl->recompute[kl->nrecompute++] = (gpt_recompute)m;
    }
    if (places(e) && !cli_given(run_cfg, "placement")) {
        kl->place[kl->nplace++] = PLACE_BOTTOM;
        kl->place[kl->nplace++] = PLACE_SPREAD;
    } else {
        kl->place[kl->nplace++] = ec->placement;
    }
}

/* Every setting of e's knobs but the window (each knobs.window is the user's), in the order
 * the search walks them (the micro-batch outermost, then the options in search.knob_opt's
 * order, the recomputation, the placement innermost), into *out (malloc'd): their count, or
 * -1 out of memory. */
static int knob_settings(const search *s, const engine_vtbl *e, knobs **out)
{
    knob_lists kl;
    knob_lists_of(s, e, &kl);
    int n = s->nbatches * kl.nrecompute * kl.nplace;
    for (int j = 0; j < s->nknob_opts; j++) n *= kl.nvalue[j];
    knobs *k = malloc(sizeof *k * (size_t)n);
    if (!k) return -1;
    for (int i = 0; i < n; i++) {
        /* (i in mixed radix, the placement its fastest digit) */
        int r = i;
        memset(&k[i], 0, sizeof k[i]);
        k[i].window = s->run_cfg->eng.window;
        k[i].placement = kl.place[r % kl.nplace], r /= kl.nplace;
        k[i].recompute = kl.recompute[r % kl.nrecompute], r /= kl.nrecompute;
        for (int j = s->nknob_opts - 1; j >= 0; j--) k[i].value[j] = kl.value[j][r % kl.nvalue[j]], r /= kl.nvalue[j];
        k[i].batch = s->rates[r].batch;
    }
    *out = k;
    return n;
}

/* Whether the option of this long name was given (ctx: the run_config), for the registry. */
static int option_given(const void *ctx, const char *name)
{
    return cli_given(ctx, name);
}

/* Why eng is left out of this search (into why; 1), or 0: an option the user gave that it
 * does not take (what is given is fixed, so it cannot take part): engine_option_refused. */
static int left_out(const search *s, const engine_vtbl *e, char *why, size_t len)
{
    return engine_option_refused(e, &s->run_cfg->eng, option_given, s->run_cfg, why, len) != 0;
}

/* A windowed engine's windows at knobs k: -w auto (0) — its layout (resident layers and three slots
 * sized to the GPU budget) is no -w W's, where W is both; at the largest sizes only it fits —
 * and every W in 1..L (1..L-1 for a second placement: at W = L nothing streams).  Beyond
 * WINDOWS_ALL layers, a grid of WINDOW_GRID windows, then the same grid between the fastest
 * one's neighbours, until the range is small enough to take whole: the step falls as the
 * window grows until the GPU or the copies stop it, one valley, which the grid brackets. */
static int try_windows(search *s, const engine_vtbl *e, knobs k, int layers, int second_placement)
{
    double ms;
    k.window = 0;
    if (consider(s, e, &k, layers, &ms)) return -1;
    int lo = 1, hi = second_placement ? layers - 1 : layers;
    if (hi < lo) return 0;
    if (layers <= WINDOWS_ALL) {
        for (int w = lo; w <= hi; w++) {
            k.window = w;
            if (consider(s, e, &k, layers, &ms)) return -1;
        }
        return 0;
    }
    double *seen = malloc(sizeof *seen * ((size_t)hi + 1)); /* each window's ms (0: none), -1: not tried */
    if (!seen) return -1;
    for (int w = 0; w <= hi; w++) seen[w] = -1;
    for (;;) {
        const int whole = hi - lo + 1 <= WINDOW_GRID;
        int grid[WINDOW_GRID], n = 0, best = -1;
        for (int i = 0; whole ? lo + i <= hi : i < WINDOW_GRID; i++) {
            const int w = whole ? lo + i : lo + (int)((long long)(hi - lo) * i / (WINDOW_GRID - 1));
            if (n && grid[n - 1] == w) continue;
            grid[n++] = w;
            if (seen[w] < 0) {
                k.window = w;
                if (consider(s, e, &k, layers, &seen[w])) {
                    free(seen);
                    return -1;
                }
            }
            if (seen[w] > 0 && (best < 0 || seen[w] < seen[grid[best]])) best = n - 1;
        }
        if (whole || best < 0 || s->truncated) break;
        const int nlo = grid[best > 0 ? best - 1 : 0], nhi = grid[best < n - 1 ? best + 1 : n - 1];
        if (nlo == lo && nhi == hi) break; /* (cannot narrow: every window of it tried above) */
        lo = nlo, hi = nhi;
    }
    free(seen);
    return 0;
}

/* Every configuration at `layers`, into s->t (and s->c when s->keep).  -1: out of memory. */
static int enumerate(search *s, int layers)
{
    memset(&s->t, 0, sizeof s->t);
    s->n = 0;
    s->have_best = 0;
    const int window_given = cli_given(s->run_cfg, "window");
    for (int ei = 0; ei < s->nengines; ei++) {
        const engine_vtbl *e = s->engines[ei];
        knobs *settings;
        const int n = knob_settings(s, e, &settings);
        int status = n < 0 ? -1 : 0;
        for (int i = 0; !status && i < n; i++) {
            double ms;
            if (!e->uses_window || window_given) status = consider(s, e, &settings[i], layers, &ms);
            else status = try_windows(s, e, settings[i], layers, settings[i].placement != settings[0].placement);
        }
        free(settings);
        if (status) return -1;
    }
    if (s->keep && s->n > 1) qsort(s->c, s->n, sizeof *s->c, candidate_cmp);
    return 0;
}

/* ---- --largest ------------------------------------------------------------------------------- */

/* fits() as bisect_largest asks it */
typedef struct fit_test {
    const search *s;
    const engine_vtbl *eng;
    const knobs *k;
} fit_test;
static int fits_at(int layers, void *ctx)
{
    const fit_test *t = ctx;
    engine_config cfg;
    engine_plan plan;
    int tier;
    char why[400];
    return fits(t->s, t->eng, t->k, layers, &cfg, &plan, &tier, why, sizeof why);
}

/* The largest layer count at which eng with k fits (0: not even the smallest; plans grow with
 * the layers, and a window needs at least its layers). */
static int largest_layers(const search *s, const engine_vtbl *eng, const knobs *k)
{
    fit_test t = {s, eng, k};
    return bisect_largest(k->window > 1 ? k->window : 1, LAYERS_CAP, fits_at, &t);
}

typedef struct engine_largest {
    const engine_vtbl *eng;
    int layers;
    knobs k;
} engine_largest;

/* Each engine's largest layer count over its knob settings (a windowed one: at W = 1 and at
 * -w auto; with -w given, at that window), into per[]; returns the largest of all, -1 out of
 * memory. */
static int largest_of_all(const search *s, engine_largest *per)
{
    int best = 0;
    const int given = cli_given(s->run_cfg, "window");
    for (int ei = 0; ei < s->nengines; ei++) {
        const engine_vtbl *e = s->engines[ei];
        per[ei] = (engine_largest){e, 0, {0}};
        knobs *settings;
        const int n = knob_settings(s, e, &settings);
        if (n < 0) return -1;
        /* (the placement moves no byte: the first one's) */
        const int windows[2] = {given ? s->run_cfg->eng.window : 1, 0};
        const int nwindows = e->uses_window && !given ? 2 : 1;
        for (int i = 0; i < n; i++)
            for (int w = 0; settings[i].placement == settings[0].placement && w < nwindows; w++) {
                knobs k = settings[i];
                if (e->uses_window) k.window = windows[w];
                const int L = largest_layers(s, e, &k);
                if (L > per[ei].layers) per[ei].layers = L, per[ei].k = k;
            }
        free(settings);
        if (per[ei].layers > best) best = per[ei].layers;
    }
    return best;
}

/* ---- commands -------------------------------------------------------------------------------- */

static int push2(char ***v, int *n, const char *a, const char *b) { return strv_push(v, n, a) || strv_push(v, n, b); }

static int push_int(char ***v, int *n, const char *opt, long long x)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", x);
    return push2(v, n, opt, num);
}

/* The options that run configuration c (no argv[0]): the user's, then what the search chose
 * of what they did not give. */
static int command_of(const search *s, const candidate *c, int largest, char ***out, int *nout)
{
    const run_config *run_cfg = s->run_cfg;
    const engine_vtbl *e = c->eng;
    /* (-l is the search's under --largest; --nvme-dir only goes with --offload nvme) */
    const char *drop[3];
    int ndrop = 0;
    engine_config cfg;
    config_of(s, &c->k, c->layers, &cfg);
    if (largest) drop[ndrop++] = "layers";
    if (cfg.offload != OFFLOAD_NVME) drop[ndrop++] = "nvme-dir";
    drop[ndrop] = NULL;
    *out = NULL, *nout = 0;
    int bad = cli_args_without(s->base, s->nbase, drop, out, nout);
    bad = bad || push2(out, nout, "-m", e->name);
    if (s->preset) {
        /* (the CPU preset applies only when no shape option is given: its shape, in full) */
        bad = bad || push_int(out, nout, "-h", s->shape.hidden) || push_int(out, nout, "--heads", s->shape.heads) ||
              push_int(out, nout, "--seq", s->shape.seq) || push_int(out, nout, "--vocab", s->shape.vocab);
        if (!cli_given(run_cfg, "lr")) bad = bad || push2(out, nout, "--lr", "0.001");
        if (!cli_given(run_cfg, "min-lr")) bad = bad || push2(out, nout, "--min-lr", "0.0001");
        if (!cli_given(run_cfg, "lr-decay-iters")) bad = bad || push2(out, nout, "--lr-decay-iters", "1000");
    }
    if (largest || (s->preset && !cli_given(run_cfg, "layers"))) bad = bad || push_int(out, nout, "-l", c->layers);
    if (!cli_given(run_cfg, "batch")) bad = bad || push_int(out, nout, "-b", c->k.batch);
    /* (a smaller micro-batch keeps the global batch: the step accumulates several) */
    if (!cli_given(run_cfg, "global-batch") && c->micro_batches > 1)
        bad = bad || push_int(out, nout, "--global-batch", s->global_batch);
    /* (each option searched for e, as it chose: a switch where on, the others' values) */
    for (int j = 0; j < s->nknob_opts; j++) {
        const option_decl *d = s->knob_opt[j];
        char opt[80], value[64];
        if (!searched(s, e, d) || (d->set == SET_FLAG && !c->k.value[j])) continue;
        snprintf(opt, sizeof opt, "--%s", d->name);
        engine_option_value_text(d, c->k.value[j], value, sizeof value);
        bad = bad || (d->set == SET_FLAG ? strv_push(out, nout, opt) : push2(out, nout, opt, value));
    }
    if (c->k.recompute != GPT_RECOMPUTE_FULL && !cli_given(run_cfg, "recompute") && !cli_given(run_cfg, "no-ckpt"))
        bad = bad || push2(out, nout, "--recompute", gpt_recompute_name(c->k.recompute));
    if (e->uses_window && !cli_given(run_cfg, "window"))
        bad = bad || (c->k.window ? push_int(out, nout, "-w", c->k.window) : push2(out, nout, "-w", "auto"));
    char place[32];
    placement_name(c->k.placement, place, sizeof place);
    if (places(e) && !cli_given(run_cfg, "placement")) bad = bad || push2(out, nout, "--placement", place);
    if (bad) strv_free(out, nout);
    return bad ? -1 : 0;
}

/* "aebench ARGS" with the arguments a shell would need quoted in single quotes. */
static void format_command(char *const *args, int n, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "aebench");
    for (int i = 0; i < n && at < len; i++) {
        const char *a = args[i];
        int plain = a[0] != '\0';
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%", *p)) plain = 0;
        if (plain) {
            at += (size_t)snprintf(buf + at, len - at, " %s", a);
            continue;
        }
        at += (size_t)snprintf(buf + at, len - at, " '");
        for (const char *p = a; *p && at < len; p++)
            at += (size_t)(*p == '\'' ? snprintf(buf + at, len - at, "'\\''") : snprintf(buf + at, len - at, "%c", *p));
        if (at < len) at += (size_t)snprintf(buf + at, len - at, "'");
    }
}

static int command_text(const search *s, const candidate *c, int largest, char *buf, size_t len)
{
    char **args = NULL;
    int n = 0;
    if (command_of(s, c, largest, &args, &n)) return -1;
    format_command(args, n, buf, len);
    strv_free(&args, &n);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_tally(const search *s, const tally *t, double ms)
{
    printf("search: %ld configurations in %.1f ms: %ld predicted, %ld over GPU memory, %ld over host memory, %ld over "
           "disk, %ld refused by the engine, %ld not modelled, %ld not calibrated\n",
           t->considered, ms, t->predicted, t->over[TIER_GPU], t->over[TIER_HOST], t->over[TIER_DISK], t->refused,
           t->not_modelled, t->not_calibrated);
    for (int i = 0; i < MAX_REASONS && t->refused_why[i].n; i++)
        printf("  refused (%ld): %s\n", t->refused_why[i].n, t->refused_why[i].text);
    for (int i = 0; i < MAX_REASONS && t->modelled_why[i].n; i++)
        printf("  not modelled (%ld): %s\n", t->modelled_why[i].n, t->modelled_why[i].text);
    for (int i = 0; i < s->nbatches; i++)
        if (t->not_calibrated_at[i]) {
            const batch_rates *br = &s->rates[i];
            printf("  not calibrated (%ld): micro-batch %d has no entry in %s (aebench --calibrate -b %d with this "
                   "shape%s)\n", t->not_calibrated_at[i], br->batch, s->machine, br->batch,
                   s->run_cfg->machine_path[0] ? " and --machine" : "");
        }
}

static void format_plan(const candidate *c, char *g, char *h, char *d, size_t len)
{
    format_bytes((double)c->plan.gpu_bytes, g, len);
    format_bytes((double)c->plan.host_bytes, h, len);
    if (c->plan.disk_bytes) format_bytes((double)c->plan.disk_bytes, d, len);
    else snprintf(d, len, "-");
}

static int print_top(const search *s, int largest)
{
    const int k = (int)s->n < s->run_cfg->search_top ? (int)s->n : s->run_cfg->search_top;
    if (k == 0) return 0;
    printf("  %-3s %10s %10s %8s %10s %10s %10s  %-11s %s\n", "#", "ms/it", "samples/s", "TFLOP/s", "GPU", "host", "disk",
           "bound", "command");
    for (int i = 0; i < k; i++) {
        const candidate *c = &s->c[i];
        char g[32], h[32], d[32], cmd[8192];
        format_plan(c, g, h, d, sizeof g);
        if (command_text(s, c, largest, cmd, sizeof cmd)) return -1;
        printf("  %-3d %10.1f %10.2f %8.2f %10s %10s %10s  %-11s %s\n", i + 1, c->pred.ms, samples_per_s(s, c),
               tflops_of(s, c), g, h, d, BOUND_NAMES[c->pred.bound], cmd);
    }
    return 0;
}

static cJSON *reasons_json(const reason *list)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < MAX_REASONS && list[i].n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "why", list[i].text);
        cJSON_AddNumberToObject(o, "count", (double)list[i].n);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *tally_json(const search *s, const tally *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "considered", (double)t->considered);
    cJSON_AddNumberToObject(o, "predicted", (double)t->predicted);
    cJSON_AddNumberToObject(o, "over_gpu", (double)t->over[TIER_GPU]);
    cJSON_AddNumberToObject(o, "over_host", (double)t->over[TIER_HOST]);
    cJSON_AddNumberToObject(o, "over_disk", (double)t->over[TIER_DISK]);
    cJSON_AddNumberToObject(o, "refused", (double)t->refused);
    cJSON_AddNumberToObject(o, "not_modelled", (double)t->not_modelled);
    cJSON_AddNumberToObject(o, "not_calibrated", (double)t->not_calibrated);
    cJSON_AddItemToObject(o, "refused_why", reasons_json(t->refused_why));
    cJSON_AddItemToObject(o, "not_modelled_why", reasons_json(t->modelled_why));
    cJSON *nc = cJSON_AddArrayToObject(o, "not_calibrated_batches");
    for (int i = 0; i < s->nbatches; i++)
        if (t->not_calibrated_at[i]) cJSON_AddItemToArray(nc, cJSON_CreateNumber(s->rates[i].batch));
    return o;
}

static cJSON *candidate_json(const search *s, const candidate *c, int rank, int largest)
{
    cJSON *o = cJSON_CreateObject();
    char cmd[8192];
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddStringToObject(o, "engine", c->eng->name);
    cJSON_AddNumberToObject(o, "layers", c->layers);
    cJSON_AddNumberToObject(o, "batch", c->k.batch);
    cJSON_AddNumberToObject(o, "micro_batches", c->micro_batches);
    for (int j = 0; j < s->nknob_opts; j++) {
        /* (every searched option's value, under its name with _ for -: a switch true or false,
         * a word or auto as text, a number as one) */
        const option_decl *d = s->knob_opt[j];
        char key[80], value[64];
        snprintf(key, sizeof key, "%s", d->name);
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
        engine_option_value_text(d, c->k.value[j], value, sizeof value);
        if (d->set == SET_FLAG) cJSON_AddBoolToObject(o, key, c->k.value[j] != 0);
        else if (d->set == SET_WORDS || strcmp(value, "auto") == 0) cJSON_AddStringToObject(o, key, value);
        else cJSON_AddNumberToObject(o, key, (double)c->k.value[j]);
    }
    report_json_recompute(o, c->k.recompute);
    if (c->eng->uses_window) cJSON_AddNumberToObject(o, "window", c->k.window);
    if (places(c->eng)) {
        char place[32];
        placement_name(c->k.placement, place, sizeof place);
        cJSON_AddStringToObject(o, "placement", place);
    }
    cJSON_AddNumberToObject(o, "ms", c->pred.ms);
    cJSON_AddNumberToObject(o, "samples_per_s", samples_per_s(s, c));
    cJSON_AddNumberToObject(o, "tflops", tflops_of(s, c));
    cJSON_AddStringToObject(o, "bound", BOUND_NAMES[c->pred.bound]);
    cJSON *busy = cJSON_AddObjectToObject(o, "busy_ms");
    for (int k = 0; k < BUSY_KINDS; k++)
        if (c->pred.busy_ms[k] > 0) cJSON_AddNumberToObject(busy, BOUND_NAMES[k], c->pred.busy_ms[k]);
    cJSON *plan = cJSON_AddObjectToObject(o, "plan");
    cJSON_AddNumberToObject(plan, "gpu_bytes", (double)c->plan.gpu_bytes);
    cJSON_AddNumberToObject(plan, "host_bytes", (double)c->plan.host_bytes);
    cJSON_AddNumberToObject(plan, "disk_bytes", (double)c->plan.disk_bytes);
    if (command_text(s, c, largest, cmd, sizeof cmd) == 0) cJSON_AddStringToObject(o, "command", cmd);
    return o;
}

/* results/search_l-L_h-H_gb-G_DATE.EPOCH.json, created anew (report_create_unique). */
static int write_json(const search *s, const cJSON *root, int layers, char *path, size_t len)
{
    char err[PATH_MAX + 200], name[128];
    snprintf(name, sizeof name, "search_l-%d_h-%d_gb-%d", layers, s->shape.hidden, s->global_batch);
    char *text = report_json_text(root);
    FILE *f = text ? report_create_unique(s->run_cfg->results_dir, name, ".json", path, len, err, sizeof err) : NULL;
    if (!text) snprintf(err, sizeof err, "out of memory");
    int ok = f != NULL;
    if (f) {
        ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
        const int e = ok ? 0 : errno;
        ok = fclose(f) == 0 && ok;
        if (!ok) {
            if (e) errno = e;
            if (errno == ENOSPC) snprintf(err, sizeof err, "disk full writing %s", path);
            else snprintf(err, sizeof err, "cannot write %s: %s", path, strerror(errno));
            unlink(path);
        }
    }
    if (!ok) fprintf(stderr, "aebench: the search's JSON: %s\n", err);
    free(text);
    return ok ? 0 : -1;
}

/* The search's JSON at path (write_json made it) rewritten whole with root: made aside and
 * renamed into place (report_write_text), so a reader sees the last record or this one. */
static int rewrite_json(const cJSON *root, const char *path)
{
    char *text = report_json_text(root);
    const int ok = text && report_write_text(path, text) == 0;
    if (!ok)
        fprintf(stderr, "aebench: the search's JSON: %s writing %s\n",
                !text ? "out of memory" : errno == ENOSPC ? "disk full" : strerror(errno), path);
    free(text);
    return ok ? 0 : -1;
}

/* --out FILE: the winner's options as a config --config reads back to the same run. */
static int write_winner(const search *s, const candidate *c, int largest)
{
    char **args = NULL;
    int n = 0;
    char err[PATH_MAX + 200];
    if (command_of(s, c, largest, &args, &n)) return -1;
    cJSON *cfg = cli_args_config(args, n, err, sizeof err);
    strv_free(&args, &n);
    char *text = cfg ? report_json_text(cfg) : NULL;
    cJSON_Delete(cfg);
    if (!text) {
        fprintf(stderr, "aebench: --out: %s\n", err);
        return -1;
    }
    const int status = report_write_text(s->run_cfg->search_out, text);
    if (status) fprintf(stderr, "aebench: --out %s: %s\n", s->run_cfg->search_out, strerror(errno));
    else printf("search: the fastest written to %s (aebench --config %s runs it)\n", s->run_cfg->search_out,
                s->run_cfg->search_out);
    free(text);
    return status;
}

int search_micro_batch_sizes(const run_config *run_cfg, int batch, int *out, int max, char *err, size_t errlen)
{
    const int world = run_cfg->ranks > 1 ? run_cfg->ranks : 1;
    const int global = run_cfg->eng.global_batch ? run_cfg->eng.global_batch : batch * world;
    const int per_rank = global / world;
    if (global % world != 0 || per_rank < 1) {
        snprintf(err, errlen, "--global-batch %d is not a multiple of the ranks (%d)", global, world);
        return -1;
    }
    int n = 0;
    if (cli_given(run_cfg, "batch")) {
        if (per_rank % batch != 0) {
            snprintf(err, errlen, "--global-batch %d is not a multiple of batch x ranks = %d x %d", global, batch, world);
            return -1;
        }
        if (max > 0) out[n++] = batch;
        return n;
    }
    for (int b = 1; b <= per_rank && n < max; b++)
        if (per_rank % b == 0) out[n++] = b;
    return n;
}

/* ---- --verify -------------------------------------------------------------------------------- */

double search_kendall_tau(const double *a, const double *b, int n)
{
    double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const double da = a[i] - a[j], db = b[i] - b[j];
            if (da == 0 && db == 0) continue;
            if (da == 0) ties_a++;
            else if (db == 0) ties_b++;
            else if ((da > 0) == (db > 0)) concordant++;
            else discordant++;
        }
    const double denom = sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
    return denom > 0 ? (concordant - discordant) / denom : 0;
}

/* Why --verify trains a configuration: one of the top K; the fastest of a layout the top
 * ones leave out (OPTION_LAYOUT); one of K random others. */
typedef enum verify_pick { PICK_TOP, PICK_LAYOUT, PICK_RANDOM } verify_pick;
static const char *const PICK_NAMES[] = {"top", "layout", "random"};

typedef struct verified {
    int rank;        /* 1-based, in the search's order */
    verify_pick why;
    int ok;
    double measured_ms;
    char status[48];
    char json[PATH_MAX];
} verified;

/* The iterations each --verify run trains unless --iters is given: the steady state of every
 * engine (from iteration 8 at the latest: --dpu's) and 13 steps of it. */
#define VERIFY_ITERS "20"

/* Where --iters is given, a run whose engine's steady state it would leave fewer than this
 * many steps of trains that many more (said on its line): with --iters 6 at l48 on two H200s,
 * zero-offload --dpu's "steady" median was its warm-up's, its steady state starting at 8. */
#define VERIFY_MIN_STEADY 4

/* --verify's top picks are predicted at least this far apart (relative): configurations the
 * model prices within it (on two H200s the top five were one stronghold window under four
 * settings of knobs that change no time, predicted equal and measured 111.0-111.5 ms) are
 * ranked by a run's noise, which a tau over them would measure instead of the model. */
#define VERIFY_TOP_GAP 0.01

/* a and b lay the model out alike: one engine, and the same value of every layout option
 * (--tp, --pp, --zero-stage, --offload: OPTION_LAYOUT) */
static int same_layout(const search *s, const candidate *a, const candidate *b)
{
    if (a->eng != b->eng) return 0;
    for (int j = 0; j < s->nknob_opts; j++)
        if ((s->knob_opt[j]->flags & OPTION_LAYOUT) && a->k.value[j] != b->k.value[j]) return 0;
    return 1;
}

/* The verification so far into root ("verify", "verify_summary", replacing those there): the
 * first `done` of the nv picks trained (the others "pending"), Kendall's tau over those that
 * did, and whether the pick was the best of them; with `print`, the table and its lines on
 * stdout too.  0, or -1 out of memory. */
static int verify_record(const search *s, const verified *v, int nv, int done, cJSON *root, int print)
{
    cJSON_DeleteItemFromObjectCaseSensitive(root, "verify");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "verify_summary");
    double *pred = calloc((size_t)(nv > 0 ? nv : 1), sizeof *pred), *meas = calloc((size_t)(nv > 0 ? nv : 1), sizeof *meas);
    cJSON *arr = cJSON_AddArrayToObject(root, "verify"), *sum = cJSON_AddObjectToObject(root, "verify_summary");
    if (!pred || !meas || !arr || !sum) {
        free(pred);
        free(meas);
        return -1;
    }
    int m = 0, measured_best = -1;
    if (print) printf("  %-3s %-8s %12s %12s %8s\n", "#", "pick", "predicted", "measured", "error");
    for (int i = 0; i < nv; i++) {
        const candidate *c = &s->c[v[i].rank - 1];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", v[i].rank);
        cJSON_AddStringToObject(o, "picked", PICK_NAMES[v[i].why]);
        cJSON_AddBoolToObject(o, "random", v[i].why == PICK_RANDOM);
        cJSON_AddNumberToObject(o, "predicted_ms", c->pred.ms);
        cJSON_AddStringToObject(o, "status", i < done ? v[i].status : "pending");
        if (v[i].json[0]) cJSON_AddStringToObject(o, "json", v[i].json);
        if (i < done && v[i].ok) {
            cJSON_AddNumberToObject(o, "measured_ms", v[i].measured_ms);
            if (print)
                printf("  %-3d %-8s %10.1f ms %10.1f ms %+7.1f%%\n", v[i].rank, PICK_NAMES[v[i].why], c->pred.ms,
                       v[i].measured_ms, (c->pred.ms - v[i].measured_ms) / v[i].measured_ms * 100);
            pred[m] = c->pred.ms, meas[m] = v[i].measured_ms, m++;
            if (measured_best < 0 || v[i].measured_ms < v[measured_best].measured_ms) measured_best = i;
        } else if (print) {
            printf("  %-3d %-8s %10.1f ms %13s\n", v[i].rank, PICK_NAMES[v[i].why], c->pred.ms, v[i].status);
        }
        cJSON_AddItemToArray(arr, o);
    }
    const double tau = search_kendall_tau(pred, meas, m);
    free(pred);
    free(meas);
    /* (a search stopped before its last run leaves this record: what it says is of the first
     * `done`) */
    cJSON_AddNumberToObject(sum, "runs", nv);
    cJSON_AddNumberToObject(sum, "runs_done", done);
    cJSON_AddBoolToObject(sum, "complete", done == nv);
    cJSON_AddNumberToObject(sum, "trained", m);
    cJSON_AddNumberToObject(sum, "kendall_tau", tau);
    if (print && m >= 2) printf("verify: Kendall's tau of predicted against measured over %d runs: %.3f\n", m, tau);
    if (measured_best >= 0 && v[0].rank == 1 && v[0].ok && done > 0) {
        const double loss = (v[0].measured_ms - v[measured_best].measured_ms) / v[measured_best].measured_ms * 100;
        cJSON_AddBoolToObject(sum, "pick_is_measured_best", measured_best == 0);
        cJSON_AddNumberToObject(sum, "pick_loss_pct", loss);
        cJSON_AddNumberToObject(sum, "measured_best_rank", v[measured_best].rank);
        if (print && measured_best == 0)
            printf("verify: the predicted best (#1) was the measured best of the %d trained\n", m);
        else if (print)
            printf("verify: the predicted best (#1, %.1f ms) was not the measured best: #%d trained in %.1f ms; the "
                   "pick lost %.1f%%\n", v[0].measured_ms, v[measured_best].rank, v[measured_best].measured_ms, loss);
    } else if (print && nv) {
        printf("verify: the predicted best did not train (%s)\n", v[0].status);
    }
    return 0;
}

/* Trains the top K (the pick, then down the ranking each configuration predicted at least
 * VERIFY_TOP_GAP from every one picked before), the fastest of each layout none of those has
 * (on two H200s the top and K random ones of an l48 search were megatron-lm and stronghold
 * only: a tau over them said nothing of the pipeline, zero-infinity or l2l), and K random
 * others ranked below the top; prints predicted against measured; adds "verify" to root, and
 * rewrites the JSON at path (none: "") with it before the first run and after each (a search
 * stopped midway, a GPU call's time limit, leaves what trained; l48's runs take 20-40 s each).
 * Returns 0 when every run trained and every record was written, 1 otherwise. */
static int verify(const search *s, int largest, cJSON *root, const char *path)
{
    const int n = (int)s->n, K = s->run_cfg->search_verify < n ? s->run_cfg->search_verify : n;
    verified *v = calloc((size_t)n + 1, sizeof *v);
    int *rest = malloc(sizeof *rest * (size_t)(n > 0 ? n : 1));
    if (!v || !rest) {
        free(v);
        free(rest);
        return 1;
    }
    int nv = 0, nrest = 0;
    for (int i = 0; i < n; i++) {
        int apart = nv < K;
        for (int j = 0; j < nv && apart; j++) {
            const double p = s->c[v[j].rank - 1].pred.ms;
            apart = fabs(s->c[i].pred.ms - p) >= VERIFY_TOP_GAP * p;
        }
        if (apart) v[nv++] = (verified){.rank = i + 1, .why = PICK_TOP};
        else if (nv == K) rest[nrest++] = i + 1; /* (not the near twins passed over above) */
    }
    /* the fastest of each layout not yet picked (the ranking is fastest first; a near twin
     * passed over by the top picks among them), then the random ones from the others below */
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < nv && !seen; j++) seen = same_layout(s, &s->c[i], &s->c[v[j].rank - 1]);
        if (!seen) v[nv++] = (verified){.rank = i + 1, .why = PICK_LAYOUT};
    }
    int kept = 0;
    for (int r = 0; r < nrest; r++) {
        int picked = 0;
        for (int j = 0; j < nv && !picked; j++) picked = v[j].rank == rest[r];
        if (!picked) rest[kept++] = rest[r];
    }
    nrest = kept;
    /* K distinct others of those ranked below the top picks, uniformly (a partial Fisher-Yates) */
    rng pick = rng_for(s->run_cfg->eng.seed, 0x5EA2C4u, 0); /* (a stream of its own of the run's seed) */
    for (int i = 0; i < K && i < nrest; i++) {
        const int j = i + (int)rng_below(&pick, (uint32_t)(nrest - i));
        const int t = rest[i];
        rest[i] = rest[j], rest[j] = t;
        v[nv++] = (verified){.rank = rest[i], .why = PICK_RANDOM};
    }
    free(rest);
    int failed = path[0] && (verify_record(s, v, nv, 0, root, 0) || rewrite_json(root, path));
    for (int i = 0; i < nv; i++) {
        const candidate *c = &s->c[v[i].rank - 1];
        char **args = NULL, **opts = NULL, cmd[8192], err[600];
        int na = 0, no = 0;
        const int bad = command_of(s, c, largest, &opts, &no) || strv_push(&args, &na, "aebench") ||
                        strv_push_all(&args, &na, opts, no);
        strv_free(&opts, &no);
        if (bad) {
            strv_free(&args, &na);
            free(v);
            return 1;
        }
        /* (VERIFY_ITERS unless given; measured over the engine's steady state, which its own
         * rule starts: --dpu's after 5 undelayed steps and a first delayed one, which would
         * otherwise rank it ahead of configurations that beat it from then on) */
        engine_config cfg;
        config_of(s, &c->k, c->layers, &cfg);
        const int from = engine_steady_from(c->eng, &cfg), need = from + VERIFY_MIN_STEADY - 1;
        const int given = cli_given(s->run_cfg, "iters"), raise = given && s->run_cfg->iters < need;
        char raised[96] = "";
        if (raise) snprintf(raised, sizeof raised, " (--iters %d: its steady state starts at iteration %d)", need, from);
        if ((!given && push2(&args, &na, "--iters", VERIFY_ITERS)) || (raise && push_int(&args, &na, "--iters", need))) {
            strv_free(&args, &na);
            free(v);
            return 1;
        }
        format_command(args + 1, na - 1, cmd, sizeof cmd);
        char tag[16] = "";
        if (v[i].why != PICK_TOP) snprintf(tag, sizeof tag, " (%s)", PICK_NAMES[v[i].why]);
        printf("verify %d/%d: #%d%s %s%s\n", i + 1, nv, v[i].rank, tag, cmd, raised);
        fflush(stdout);
        child_result cr;
        if (child_run(s->exe, args, CHILD_QUIET_OUT, &cr, err, sizeof err)) {
            snprintf(v[i].status, sizeof v[i].status, "not started");
            fprintf(stderr, "aebench: %s\n", err);
        } else {
            run_outcome o;
            memset(&o, 0, sizeof o);
            if (cr.json[0] && run_outcome_read(cr.json, &o) == 0 && strcmp(o.status, "ok") == 0 && o.median_ms > 0) {
                v[i].ok = 1;
                v[i].measured_ms = o.steady_median_ms > 0 ? o.steady_median_ms : o.median_ms;
                snprintf(v[i].status, sizeof v[i].status, "ok");
            } else if (!cr.exited) {
                char sig[32];
                child_signal_name(cr.signal, sig, sizeof sig);
                snprintf(v[i].status, sizeof v[i].status, "%s", sig);
            } else {
                snprintf(v[i].status, sizeof v[i].status, "%s (exit %d)", o.have ? o.status : "failed", cr.exit_code);
            }
            snprintf(v[i].json, sizeof v[i].json, "%s", cr.json);
        }
        strv_free(&args, &na);
        failed |= !v[i].ok;
        if (path[0] && i + 1 < nv) failed |= verify_record(s, v, nv, i + 1, root, 0) || rewrite_json(root, path);
    }
    const int recorded = verify_record(s, v, nv, nv, root, 1);
    free(v);
    return failed || recorded;
}

/* ---- setting up ------------------------------------------------------------------------------ */

/* How a run resolves here: a --dry-run child of the user's options. */
static int probe(search *s, child_result *pr)
{
    char **args = NULL, err[600];
    int n = 0;
    int bad = cli_child_args(s->argc, s->argv, 0, 1, &args, &n);
    /* (-m all: the dry run then plans every engine that accepts the options, and refuses
     * none of them for an option another engine has) */
    char **probe_argv = NULL;
    int np = 0;
    bad = bad || strv_push(&probe_argv, &np, "aebench") || strv_push_all(&probe_argv, &np, args, n) ||
          push2(&probe_argv, &np, "-m", "all") || strv_push(&probe_argv, &np, "--dry-run");
    strv_free(&args, &n);
    if (bad) {
        strv_free(&probe_argv, &np);
        fprintf(stderr, "aebench: out of memory\n");
        return EXIT_RUN_ERROR;
    }
    const int status = child_run(s->exe, probe_argv, CHILD_QUIET_OUT, pr, err, sizeof err);
    strv_free(&probe_argv, &np);
    if (status) {
        fprintf(stderr, "aebench: %s\n", err);
        return EXIT_RUN_ERROR;
    }
    if (!pr->exited || pr->exit_code != 0 || !pr->probed || !pr->machine[0]) {
        fprintf(stderr, "aebench: --search: how a run resolves here is not known (its dry run ended with %s %d)\n",
                pr->exited ? "exit" : "signal", pr->exited ? pr->exit_code : pr->signal);
        return pr->exited && pr->exit_code == EXIT_BAD_INPUT ? EXIT_BAD_INPUT : EXIT_RUN_ERROR;
    }
    return 0;
}

static int setup(search *s, const child_result *pr)
{
    const run_config *run_cfg = s->run_cfg;
    /* the engines */
    const int method_given = cli_given(run_cfg, "method") && strcmp(run_cfg->method, "all") != 0;
    for (int i = 0; i < engine_count() && s->nengines < MAX_ENGINES; i++) {
        const engine_vtbl *e = engine_at(i);
        if (method_given ? e != engine_find(run_cfg->method) : !engine_in_all(e)) continue;
        char why[512];
        if (left_out(s, e, why, sizeof why)) {
            printf("search: %s left out: %s\n", e->name, why);
            continue;
        }
        s->engines[s->nengines++] = e;
    }
    /* the options searched (option_decl.search) */
    for (int i = 0; i < engine_option_count(); i++) {
        const option_decl *d = engine_option_at(i, NULL);
        if (d->nsearch == 0) continue;
        if (s->nknob_opts == MAX_KNOB_OPTIONS || d->nsearch > MAX_KNOB_VALUES) {
            fprintf(stderr, "aebench: --search: --%s: more searched options or values than the search holds\n",
                    d->name);
            return EXIT_RUN_ERROR;
        }
        s->knob_opt[s->nknob_opts++] = d;
    }
    if (!s->nengines) {
        fprintf(stderr, "aebench: --search: no engine takes the options given\n");
        return EXIT_BAD_INPUT;
    }
    s->shape = run_cfg->eng.shape;
    s->preset = pr->preset;
    s->shape.layers = pr->shape[0], s->shape.hidden = pr->shape[1], s->shape.heads = pr->shape[2];
    s->shape.seq = pr->shape[3], s->shape.batch = pr->shape[4], s->shape.vocab = pr->shape[5];
    s->shape.vocab_padded = gpt_pad_vocab(s->shape.vocab);
    snprintf(s->backend, sizeof s->backend, "%s", pr->backend);
    snprintf(s->machine, sizeof s->machine, "%s", pr->machine);
    s->world = run_cfg->ranks > 1 ? run_cfg->ranks : 1;
    s->local = cli_ranks_per_machine(run_cfg); /* (--hosts: each machine's memory is split by its ranks) */
    s->global_batch = run_cfg->eng.global_batch ? run_cfg->eng.global_batch : s->shape.batch * s->world;
    /* the micro-batches: -b fixes it; else every divisor of global batch / ranks */
    int sizes[MAX_BATCHES];
    char why[200];
    const int nsizes = search_micro_batch_sizes(run_cfg, s->shape.batch, sizes, MAX_BATCHES, why, sizeof why);
    if (nsizes < 0) {
        fprintf(stderr, "aebench: %s\n", why);
        return EXIT_BAD_INPUT;
    }
    s->nbatches = nsizes;
    for (int i = 0; i < nsizes; i++) s->rates[i].batch = sizes[i];
    /* the disk tier's directory: --nvme-dir, else the results directory */
    const char *disk_dir = run_cfg->eng.nvme_dir[0] ? run_cfg->eng.nvme_dir : run_cfg->results_dir;
    if (strlen(disk_dir) >= sizeof s->nvme_dir) {
        fprintf(stderr, "aebench: --search: the results directory's path is too long for the disk tier's; give "
                        "--nvme-dir\n");
        return EXIT_BAD_INPUT;
    }
    memcpy(s->nvme_dir, disk_dir, strlen(disk_dir) + 1);
    /* the machine file, at each micro-batch (at the disk directory: its rates there) */
    const machine_rates *file = NULL; /* (its machine-wide rates: any entry's) */
    for (int i = 0; i < s->nbatches; i++) {
        engine_config c = run_cfg->eng;
        c.shape = s->shape;
        c.shape.batch = s->rates[i].batch;
        c.world = s->world, c.local_world = s->local;
        snprintf(c.nvme_dir, sizeof c.nvme_dir, "%s", s->nvme_dir);
        c.offload = OFFLOAD_NVME; /* (so that the disk tier's rates there are read too) */
        char why[900];
        const int loaded = machine_load(s->machine, &c, &s->rates[i].m, why, sizeof why);
        if (loaded == 0) {
            s->rates[i].loaded = 1;
            file = &s->rates[i].m;
        } else if (loaded != MACHINE_NO_ENTRY) {
            /* (a missing or broken file is an error; a missing entry leaves that micro-batch
             * out, counted as not calibrated) */
            fprintf(stderr, "aebench: %s\n", why);
            return EXIT_BAD_INPUT;
        } else {
            snprintf(s->machine_err, sizeof s->machine_err, "%s", why);
        }
    }
    if (!file) {
        fprintf(stderr, "aebench: --search: %s\n", s->machine_err);
        return EXIT_BAD_INPUT;
    }
    s->nccl = file->gpu_backend;
    /* the disk budget there (the results directory made now, after every check of the
     * input: the JSON goes there too) */
    char err[600];
    engine_config probe_cfg = run_cfg->eng;
    if (!run_cfg->eng.nvme_dir[0] && report_make_dirs(run_cfg->results_dir, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        return EXIT_RUN_ERROR;
    }
    size_t disk_free = 0;
    s->disk_known = run_resolve_disk_budget(&probe_cfg, run_cfg->results_dir, &disk_free, s->disk_why,
                                            sizeof s->disk_why) == 0;
    if (!s->disk_known && run_cfg->eng.nvme_dir[0]) {
        fprintf(stderr, "aebench: %s\n", s->disk_why);
        return EXIT_BAD_INPUT;
    }
    s->budget[TIER_DISK] = s->disk_known ? disk_free / (size_t)s->local : 0;
    /* the budgets per rank (machine_budgets), or what is free now if less; --machine FILE may
     * be another machine's, as with --predict: its budgets, not what is free here */
    size_t g, h;
    machine_budgets(run_cfg, file, s->local, strcmp(s->backend, "cpu") == 0 && !run_cfg->machine_path[0], &g, &h);
    if (!run_cfg->machine_path[0]) {
        if (pr->budget_gpu < g) g = pr->budget_gpu;
        if (pr->budget_host < h) h = pr->budget_host;
    }
    s->budget[TIER_GPU] = g, s->budget[TIER_HOST] = h;
    return 0;
}

/* machine_region_note at the model searched (any loaded entry's rates: they are the
 * machine's, not the micro-batch's) */
static int region_note(const search *s, int layers, char *note, size_t len)
{
    engine_config c = s->run_cfg->eng;
    c.shape = s->shape, c.shape.layers = layers, c.world = s->world;
    for (int i = 0; i < s->nbatches; i++)
        if (s->rates[i].loaded) return machine_region_note(&s->rates[i].m, &c, note, len);
    return 0;
}

static void print_header(const search *s, int layers)
{
    char g[32], h[32], d[32];
    format_bytes((double)s->budget[TIER_GPU], g, sizeof g);
    format_bytes((double)s->budget[TIER_HOST], h, sizeof h);
    if (s->disk_known) format_bytes((double)s->budget[TIER_DISK], d, sizeof d);
    printf("search: l%d h%d heads %d seq %d vocab %d %s, global batch %d on %d rank%s (micro-batch", layers,
           s->shape.hidden, s->shape.heads, s->shape.seq, s->shape.vocab, s->run_cfg->eng.bf16 ? "bf16" : "fp32",
           s->global_batch, s->world, s->world == 1 ? "" : "s");
    for (int i = 0; i < s->nbatches; i++) printf("%s%d", i ? ", " : " ", s->rates[i].batch);
    printf("); engines:");
    for (int i = 0; i < s->nengines; i++) printf("%s%s", i ? ", " : " ", s->engines[i]->name);
    printf("\nsearch: budgets per rank: GPU %s, host %s, disk %s%s%s; machine file %s\n", g, h,
           s->disk_known ? d : "none", s->disk_known ? " at " : "", s->disk_known ? s->nvme_dir : "", s->machine);
    char note[400];
    if (region_note(s, layers, note, sizeof note)) printf("search: note: %s\n", note);
}

static cJSON *header_json(const search *s, int layers)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layers", layers);
    cJSON_AddNumberToObject(o, "hidden", s->shape.hidden);
    cJSON_AddNumberToObject(o, "heads", s->shape.heads);
    cJSON_AddNumberToObject(o, "seq", s->shape.seq);
    cJSON_AddNumberToObject(o, "vocab", s->shape.vocab);
    cJSON_AddStringToObject(o, "dtype", s->run_cfg->eng.bf16 ? "bf16" : "fp32");
    cJSON_AddStringToObject(o, "backend", s->backend);
    cJSON_AddNumberToObject(o, "world", s->world);
    cJSON_AddNumberToObject(o, "global_batch", s->global_batch);
    cJSON *mb = cJSON_AddArrayToObject(o, "micro_batches_tried");
    for (int i = 0; i < s->nbatches; i++) cJSON_AddItemToArray(mb, cJSON_CreateNumber(s->rates[i].batch));
    cJSON *e = cJSON_AddArrayToObject(o, "engines");
    for (int i = 0; i < s->nengines; i++) cJSON_AddItemToArray(e, cJSON_CreateString(s->engines[i]->name));
    cJSON_AddStringToObject(o, "machine", s->machine);
    cJSON *b = cJSON_AddObjectToObject(o, "budgets");
    cJSON_AddNumberToObject(b, "gpu_bytes", (double)s->budget[TIER_GPU]);
    cJSON_AddNumberToObject(b, "host_bytes", (double)s->budget[TIER_HOST]);
    if (s->disk_known) cJSON_AddNumberToObject(b, "disk_bytes", (double)s->budget[TIER_DISK]);
    else cJSON_AddNullToObject(b, "disk_bytes");
    if (s->disk_known) cJSON_AddStringToObject(b, "disk_dir", s->nvme_dir);
    char note[400];
    if (region_note(s, layers, note, sizeof note)) cJSON_AddStringToObject(o, "calibration_note", note);
    return o;
}

/* ---- main ------------------------------------------------------------------------------------ */

/* Whether the best prediction at `layers` trains at --min-samples-per-s or more (ctx: the
 * search; bisect_largest's test).  (A threshold copied from a search's JSON is that size's
 * samples/s exactly: report_json_text writes numbers that read back to the same double.) */
static int fast_enough_at(int layers, void *ctx)
{
    search *s = ctx;
    s->keep = 0;
    return enumerate(s, layers) == 0 && s->have_best && samples_per_s(s, &s->best) >= s->run_cfg->min_samples_per_s;
}

/* --out FILE: its directory writable (tried with a file made there and removed at once) and
 * FILE, if it exists, a regular file; found now, not after the search: bad input writes
 * nothing.  0, or -1 after saying why. */
static int out_refused(const char *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else snprintf(dir, sizeof dir, ".");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "aebench: --out %s: its directory %s is not a writable directory\n", out, dir);
        return -1;
    }
    /* (access() says yes to root where the file system says no, /proc: a file is made
     * there and removed at once, as the winner's will be made) */
    char probe_path[PATH_MAX + 64];
    int e = ENAMETOOLONG;
    if (snprintf(probe_path, sizeof probe_path, "%s/.aebench-probe-%ld", dir, (long)getpid()) < (int)sizeof probe_path) {
        const int fd = open(probe_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        e = fd < 0 ? errno : 0;
        if (fd >= 0) {
            close(fd);
            unlink(probe_path);
        }
    }
    if (e) {
        fprintf(stderr, "aebench: --out %s: its directory %s is not a writable directory (%s)\n", out, dir,
                strerror(e));
        return -1;
    }
    if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "aebench: --out %s: exists and is not a regular file\n", out);
        return -1;
    }
    return 0;
}

/* The size a search ranks the configurations of, and with --largest how it was found. */
typedef struct sizes_found {
    int layers;                      /* the size ranked (0: not even one layer fits) */
    int largest;                     /* --largest: the most layers any engine's plan fits */
    int threshold;                   /* --min-samples-per-s: the largest predicted that fast */
    engine_largest per[MAX_ENGINES]; /* --largest: each engine's own largest */
    tally next;                      /* --largest: why largest + 1 trains with none of them */
    double ms;                       /* the search's wall time */
} sizes_found;

/* The search itself: the size asked for, or with --largest the largest any engine fits (and
 * under --min-samples-per-s the largest fast enough); then that size's configurations kept in
 * s.  0, or -1 when out of memory. */
static int find_sizes(search *s, sizes_found *f)
{
    const double t0 = wall_ms();
    memset(f, 0, sizeof *f);
    f->layers = s->shape.layers;
    if (s->run_cfg->search_largest) {
        if ((f->largest = largest_of_all(s, f->per)) < 0) return -1;
        f->layers = f->largest;
        if (f->layers > 0 && f->layers < LAYERS_CAP) {
            /* why the next size trains with none of them */
            s->keep = 0;
            if (enumerate(s, f->layers + 1)) return -1;
            f->next = s->t;
        }
        if (f->layers > 0 && s->run_cfg->min_samples_per_s > 0) {
            /* the largest whose best throughput is at least X (throughput falls as layers grow) */
            f->threshold = bisect_largest(1, f->layers, fast_enough_at, s);
            f->layers = f->threshold;
        }
    }
    s->keep = 1;
    if (f->layers > 0 && enumerate(s, f->layers)) return -1;
    f->ms = wall_ms() - t0;
    return 0;
}

/* --largest's lines and its "largest" object in root: each engine's largest, the largest of
 * all and why the next size fits none, and the largest at --min-samples-per-s. */
static void report_largest(const search *s, const sizes_found *f, cJSON *root)
{
    const run_config *run_cfg = s->run_cfg;
    cJSON *lj = cJSON_AddObjectToObject(root, "largest");
    cJSON *pe = cJSON_AddArrayToObject(lj, "per_engine");
    printf("search: the largest -l each engine's plan fits in the budgets:");
    for (int i = 0; i < s->nengines; i++) {
        printf("%s %s l%d", i ? "," : "", f->per[i].eng->name, f->per[i].layers);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "engine", f->per[i].eng->name);
        cJSON_AddNumberToObject(o, "layers", f->per[i].layers);
        cJSON_AddItemToArray(pe, o);
    }
    printf("\n");
    cJSON_AddNumberToObject(lj, "layers", f->largest);
    if (f->largest > 0) {
        gpt_shape sh = s->shape;
        sh.layers = f->largest;
        sh.vocab_padded = gpt_pad_vocab(sh.vocab);
        const double params = (double)gpt_param_count(&sh);
        cJSON_AddNumberToObject(lj, "params", params);
        if (f->largest >= LAYERS_CAP)
            printf("search: largest: l%d (%.3f B parameters) trains, and the search goes no further\n", f->largest,
                   params / 1e9);
        else
            printf("search: largest: l%d (%.3f B parameters) trains; l%d fits no configuration (%ld over GPU "
                   "memory, %ld over host memory, %ld over disk, %ld refused)\n", f->largest, params / 1e9,
                   f->largest + 1, f->next.over[TIER_GPU], f->next.over[TIER_HOST], f->next.over[TIER_DISK],
                   f->next.refused);
        cJSON_AddItemToObject(lj, "next", tally_json(s, &f->next));
    } else {
        printf("search: largest: not even one layer fits any configuration\n");
    }
    if (run_cfg->min_samples_per_s > 0) {
        cJSON_AddNumberToObject(lj, "min_samples_per_s", run_cfg->min_samples_per_s);
        cJSON_AddNumberToObject(lj, "layers_at_min_samples_per_s", f->threshold);
        if (s->truncated)
            printf("search: the largest that trains at %.3g samples/s or more is not known: the work bound was "
                   "reached first\n", run_cfg->min_samples_per_s);
        else if (f->threshold > 0)
            printf("search: the largest predicted to train at %.3g samples/s or more: l%d\n", run_cfg->min_samples_per_s,
                   f->threshold);
        else
            printf("search: no size is predicted to train at %.3g samples/s\n", run_cfg->min_samples_per_s);
    }
}

/* No configuration predicted at `layers`: say why, and the exit code. */
static int report_none_predicted(const search *s, int layers)
{
    printf("search: no configuration is predicted%s\n", layers > 0 ? " (see the counts above)" : "");
    /* out of memory when the budgets are what stopped them, as --find-max says it; not when
     * some fit and only their prediction is missing (an engine not calibrated, or with no
     * model of it): that is for the user to mend, not a size that does not fit */
    long over = 0;
    for (int t = 0; t < TIERS; t++) over += s->t.over[t];
    const long fit_unpredicted = s->t.not_modelled + s->t.not_calibrated;
    if (fit_unpredicted > 0)
        printf("search: %ld configuration%s fit the budgets but could not be predicted (the reasons above): "
               "calibrate what they need, or leave them out (-m)\n", fit_unpredicted, fit_unpredicted == 1 ? "" : "s");
    return layers == 0 || (over > 0 && fit_unpredicted == 0) ? EXIT_RUN_OOM : EXIT_RUN_ERROR;
}

/* What the search found, printed and written: the header, --largest's findings, the counts,
 * the top configurations, --out's winner, --verify's runs and the JSON.  The exit code, or -1
 * when out of memory. */
static int report_search(const search *s, const sizes_found *f)
{
    const run_config *run_cfg = s->run_cfg;
    print_header(s, f->layers);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "search", header_json(s, f->layers));
    cJSON_AddNumberToObject(root, "seconds", f->ms / 1000);
    if (run_cfg->search_largest) report_largest(s, f, root);
    if (f->layers > 0) print_tally(s, &s->t, f->ms);
    if (s->truncated)
        printf("search: stopped at the work bound (%.0f layer walks): what is above was predicted before it, the "
               "rest not; fix some of the knobs (-b, -w, -m) or the size to search them\n", SEARCH_WORK_MAX);
    cJSON_AddItemToObject(root, "counts", tally_json(s, &s->t));
    cJSON_AddBoolToObject(root, "truncated", s->truncated);
    int status = 0;
    if (s->n == 0) {
        status = report_none_predicted(s, f->layers);
    } else if (print_top(s, run_cfg->search_largest) != 0) {
        cJSON_Delete(root);
        return -1;
    }
    cJSON *all = cJSON_AddArrayToObject(root, "configs");
    for (size_t i = 0; i < s->n; i++) cJSON_AddItemToArray(all, candidate_json(s, &s->c[i], (int)i + 1, run_cfg->search_largest));
    if (s->n && run_cfg->search_out[0] && write_winner(s, &s->c[0], run_cfg->search_largest)) status = EXIT_RUN_ERROR;
    char path[PATH_MAX] = "";
    if (s->n && run_cfg->search_verify > 0) {
        /* (the record made before the runs and rewritten after each: what trained is kept if
         * the search is stopped) */
        if (write_json(s, root, f->layers, path, sizeof path) == 0) {
            printf("search: writing %s (after each run of the verification)\n", path);
            fflush(stdout);
        } else {
            path[0] = '\0';
            status = EXIT_RUN_ERROR;
        }
        if (verify(s, run_cfg->search_largest, root, path)) status = EXIT_RUN_ERROR;
    }
    if (path[0] ? rewrite_json(root, path) == 0 : write_json(s, root, f->layers, path, sizeof path) == 0)
        printf("search: wrote %s\n", path);
    else status = EXIT_RUN_ERROR;
    cJSON_Delete(root);
    return status;
}

int search_main(int argc, char **argv, const run_config *run_cfg)
{
    search s;
    memset(&s, 0, sizeof s);
    s.run_cfg = run_cfg, s.argc = argc, s.argv = argv;
    char err[600];
    if (run_cfg->search_verify > 0 && run_cfg->ranks > 1 && !comm_has_mpi()) {
        fprintf(stderr, "aebench: --verify with --ranks %d trains on %d ranks, which needs MPI, and this aebench was "
                        "built without it\n", run_cfg->ranks, run_cfg->ranks);
        return EXIT_BAD_INPUT;
    }
    if (run_cfg->search_out[0] && out_refused(run_cfg->search_out) != 0) return EXIT_BAD_INPUT;
    if (child_self_exe(s.exe, sizeof s.exe, err, sizeof err)) {
        fprintf(stderr, "aebench: %s\n", err);
        return EXIT_RUN_ERROR;
    }
    child_result pr;
    int code = probe(&s, &pr);
    if (code) return code;
    if ((code = setup(&s, &pr)) != 0) return code;
    if (cli_child_args(argc, argv, 0, 1, &s.base, &s.nbase)) {
        fprintf(stderr, "aebench: out of memory\n");
        return EXIT_RUN_ERROR;
    }
    sizes_found found;
    int status = find_sizes(&s, &found) == 0 ? report_search(&s, &found) : -1;
    if (status < 0) {
        fprintf(stderr, "aebench: --search: out of memory\n");
        status = EXIT_RUN_ERROR;
    }
    strv_free(&s.base, &s.nbase);
    free(s.c);
    return status;
}
