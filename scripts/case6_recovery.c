/*
 * case6_recovery — the Gemini paper's placement analysis (its Figure 9, "the probability"):
 * when k of N machines fail at once, how likely is it that every machine's checkpoint shard
 * can still be fetched from CPU memory, with m copies of each shard placed
 *   group: machines in groups of m (r / m), each holding its whole group's shards
 *          (a shard is lost when its whole group fails);
 *   ring:  machine r holding r, r - 1, ..., r - m + 1, i.e. shard s held by s ... s + m - 1
 *          mod N (lost when m cyclically consecutive machines fail)
 * — the placements of aebench's gemini engine (--gemini-placement).  The k failed machines
 * are a uniformly random k-subset, so the probability is (good subsets) / C(N, k).
 *
 * The paper's notebook uses a union bound, 1 - (N/m) C(N-m, k-m) / C(N, k) for group and
 * 1 - N C(N-m, k-m) / C(N, k) for ring; it is exact for group while k < 2m and for ring while
 * no two losing windows can overlap, and slightly pessimistic beyond.  This program counts
 * exactly:
 *   group: the coefficient of x^k in (sum_{j<m} C(m, j) x^j)^(N/m);
 *   ring:  binary necklace positions (strings on a cycle) with k ones and no run of m ones,
 *          by the leading and trailing runs around the wrap and a linear count inside;
 * and prints both, so the figure shows the paper's curves beside the exact ones.
 *
 *   case6_recovery [--csv]      the table for N = 6, 12, ..., 126 (CSV on stdout with --csv)
 *   case6_recovery --check      every count against brute-force enumeration of all k-subsets
 *                               for N <= 16 (exit 1 on a mismatch): what the test runs
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_N = 200, MAX_M = 8 };

static double binom(int n, int k)
{
    if (k < 0 || k > n) return 0;
    double r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

/* k-subsets of N machines in groups of m that contain no whole group (N % m == 0). */
static double group_good(int N, int m, int k)
{
    double poly[MAX_N + 1] = {1}, next[MAX_N + 1];
    int deg = 0;
    for (int g = 0; g < N / m; g++) {
        memset(next, 0, sizeof next);
        for (int i = 0; i <= deg; i++)
            for (int j = 0; j < m; j++) next[i + j] += poly[i] * binom(m, j);
        deg += m - 1;
        memcpy(poly, next, sizeof poly);
    }
    return k <= deg ? poly[k] : 0;
}

/* Linear strings of length n with j ones and no run of m ones. */
static double linear_good(int n, int j, int m)
{
    if (n < 0 || j < 0 || j > n) return 0;
    /* ways[r][ones]: strings so far ending in a run of r ones */
    double ways[MAX_M][MAX_N + 1], next[MAX_M][MAX_N + 1];
    memset(ways, 0, sizeof ways);
    ways[0][0] = 1;
    for (int i = 0; i < n; i++) {
        memset(next, 0, sizeof next);
        for (int r = 0; r < m; r++)
            for (int o = 0; o <= i; o++) {
                if (ways[r][o] == 0) continue;
                next[0][o] += ways[r][o];                        /* a zero */
                if (r + 1 < m) next[r + 1][o + 1] += ways[r][o]; /* a one */
            }
        memcpy(ways, next, sizeof ways);
    }
    double total = 0;
    for (int r = 0; r < m; r++) total += ways[r][j];
    return total;
}

/* k-subsets of a cycle of N machines with no m consecutive ones. */
static double ring_good(int N, int m, int k)
{
    if (k == N) return N < m ? 1 : 0; /* all failed: one run of N */
    double total = 0;
    /* a leading ones, then a zero, ..., then a zero, then b trailing ones (the wrap run is
     * a + b); or, with one zero only, 1^a 0 1^b with a + b = N - 1 */
    for (int a = 0; a < m; a++)
        for (int b = 0; a + b < m; b++) {
            if (a + b == N - 1) {
                if (k == N - 1) total += 1;
                continue;
            }
            if (a + b > N - 2) continue;
            total += linear_good(N - a - b - 2, k - a - b, m);
        }
    return total;
}

static double group_prob(int N, int m, int k) { return group_good(N, m, k) / binom(N, k); }
static double ring_prob(int N, int m, int k) { return ring_good(N, m, k) / binom(N, k); }

/* The paper's union-bound formulas (its notebook), 1 while k < m. */
static double paper_group(int N, int m, int k)
{
    return k < m ? 1 : 1 - (double)N / m * binom(N - m, k - m) / binom(N, k);
}
static double paper_ring(int N, int m, int k)
{
    return k < m ? 1 : 1 - (double)N * binom(N - m, k - m) / binom(N, k);
}

/* Brute force: is every shard held by a machine outside the failed set? */
static int recoverable(uint32_t failed, int N, int m, int ring)
{
    for (int s = 0; s < N; s++) {
        int alive = 0;
        for (int d = 0; d < m; d++) {
            const int holder = ring ? (s + d) % N : (s / m) * m + d;
            if (!((failed >> holder) & 1)) alive = 1;
        }
        if (!alive) return 0;
    }
    return 1;
}

static int check(void)
{
    int bad = 0, cases = 0;
    for (int N = 2; N <= 16; N++)
        for (int m = 1; m <= 4 && m <= N; m++)
            for (int k = 0; k <= N; k++) {
                double group = 0, ring = 0;
                for (uint32_t set = 0; set < (1u << N); set++) {
                    if (__builtin_popcount(set) != k) continue;
                    group += recoverable(set, N, m, 0);
                    ring += recoverable(set, N, m, 1);
                }
                const double g = N % m == 0 ? group_good(N, m, k) : group, r = ring_good(N, m, k);
                cases++;
                if (g != group || r != ring) {
                    fprintf(stderr, "N=%d m=%d k=%d: group %.0f (enumerated %.0f), ring %.0f (enumerated %.0f)\n",
                            N, m, k, g, group, r, ring);
                    bad++;
                }
            }
    printf("case6_recovery --check: %d of %d (N, m, k) counts match enumeration\n", cases - bad, cases);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) return check();
        if (strcmp(argv[i], "--csv") == 0) csv = 1;
        else {
            fprintf(stderr, "usage: %s [--csv | --check]\n", argv[0]);
            return 2;
        }
    }
    const char *sep = csv ? "," : " ";
    printf("N%sgroup_m2_k2%sgroup_m2_k3%sring_m2_k2%sring_m2_k3%sgroup_m3_k3%sgroup_m3_k4%sring_m3_k3%s"
           "ring_m3_k4%spaper_group_m2_k3%spaper_ring_m2_k3\n",
           sep, sep, sep, sep, sep, sep, sep, sep, sep, sep);
    for (int N = 6; N <= 126; N += 6)
        printf("%d%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f%s%.6f\n", N, sep,
               group_prob(N, 2, 2), sep, group_prob(N, 2, 3), sep, ring_prob(N, 2, 2), sep,
               ring_prob(N, 2, 3), sep, group_prob(N, 3, 3), sep, group_prob(N, 3, 4), sep,
               ring_prob(N, 3, 3), sep, ring_prob(N, 3, 4), sep, paper_group(N, 2, 3), sep,
               paper_ring(N, 2, 3));
    return 0;
}
