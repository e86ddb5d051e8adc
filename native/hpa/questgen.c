/*
 * vb-questgen: synthetic market-basket transactions after the IBM Quest model
 * (Agrawal & Srikant, "Fast Algorithms for Mining Association Rules", VLDB 1994,
 * section "Generation of Synthetic Data").  Written from the paper's description.
 *
 *   vb-questgen --transactions D --out PREFIX [--items N] [--avg-size T]
 *               [--pattern-size I] [--patterns L] [--seed S] [--parts P]
 *               [--correlation 0.5] [--corruption-mean 0.5] [--corruption-var 0.1]
 *
 * Model
 *   - L "potentially large" itemsets (patterns).  Sizes are Poisson with mean I
 *     (at least 1).  The first pattern's items are uniform random; for each later
 *     one a fraction of its items, exponential with mean = correlation (0.5) and
 *     capped at 1, is taken from the previous pattern, the rest are uniform random.
 *   - Each pattern has a weight, exponential with mean 1, normalised to sum to 1:
 *     the probability that it is picked.
 *   - Each pattern has a corruption level c ~ Normal(mean 0.5, variance 0.1),
 *     clamped to [0, 1].  When a pattern is put into a transaction, items are
 *     dropped from it at random as long as a uniform(0,1) number is below c.
 *   - Transaction sizes are Poisson with mean T (at least 1).  A transaction is
 *     filled with weighted-random patterns; when a pattern does not fit it is put
 *     in anyway in half of the cases and kept for the next transaction otherwise.
 *
 * Output: PREFIX.0 .. PREFIX.(P-1); transaction i goes to part floor(i*P/D), so the
 * parts are contiguous blocks and their concatenation does not depend on P.  One
 * transaction per line, sorted distinct item ids in 0..N-1 separated by spaces.
 * Same arguments (P aside) => byte-identical data.  A JSON summary goes to stdout.
 *
 * Exit status: 0 success, 1 I/O error, 2 bad arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION 1

/* ---- reproducible random numbers: xoshiro256** seeded through splitmix64 ---- */
static uint64_t rng_s[4];

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng_s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(void)
{
    uint64_t r = rotl(rng_s[1] * 5, 7) * 9, t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return r;
}

/* uniform in [0, 1) */
static double unif(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }

/* uniform integer in [0, n) without modulo bias */
static uint32_t unif_int(uint32_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next();
    while (x >= limit);
    return (uint32_t)(x % n);
}

static double expo(double mean) { return -mean * log(1.0 - unif()); }

static double normal(double mean, double sd)
{
    double u1 = 1.0 - unif(), u2 = unif();
    return mean + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static long poisson(double mean)
{
    if (mean <= 0)
        return 0;
    if (mean > 500) { /* normal approximation; exp(-mean) would underflow */
        double v = floor(normal(mean, sqrt(mean)) + 0.5);
        return v < 0 ? 0 : (long)v;
    }
    double l = exp(-mean), p = 1.0;
    long k = 0;
    do {
        k++;
        p *= unif();
    } while (p > l);
    return k - 1;
}

/* ---- arguments ---- */
struct args {
    uint64_t transactions;
    long items, avg_size_set, patterns;
    double avg_size, pattern_size, correlation, corr_mean, corr_var;
    uint64_t seed;
    long parts;
    const char *out;
};

static int bad(const char *what, const char *val)
{
    fprintf(stderr, "vb-questgen: bad %s '%s'\n", what, val);
    return 2;
}

/* decimal count with optional k/M/G (x1000) suffix */
static int parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1000, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1000000, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1000000000, end++;
    if (*end != '\0' || v > UINT64_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vb-questgen --transactions D --out PREFIX [--items N=1000] [--avg-size T=10]\n"
               "         [--pattern-size I=4] [--patterns L=min(2000,2N)] [--seed S=1] [--parts P=1]\n"
               "         [--correlation 0.5] [--corruption-mean 0.5] [--corruption-var 0.1]\n"
               "  counts accept k/M/G (decimal) suffixes, e.g. --transactions 1M\n");
}

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    a->items = 1000;
    a->avg_size = 10;
    a->pattern_size = 4;
    a->patterns = -1;
    a->seed = 1;
    a->parts = 1;
    a->correlation = 0.5;
    a->corr_mean = 0.5;
    a->corr_var = 0.1;
    int have_d = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "vb-questgen: %s needs a value (see --help)\n", k);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t u;
        double d;
        if (!strcmp(k, "--transactions")) {
            if (parse_count(v, &a->transactions) || a->transactions > 1000000000000ull)
                return bad("--transactions", v);
            have_d = 1;
        } else if (!strcmp(k, "--items")) {
            if (parse_count(v, &u) || u < 1 || u > 0x7fffffff)
                return bad("--items", v);
            a->items = (long)u;
        } else if (!strcmp(k, "--patterns")) {
            if (parse_count(v, &u) || u < 1 || u > 100000000)
                return bad("--patterns", v);
            a->patterns = (long)u;
        } else if (!strcmp(k, "--parts")) {
            if (parse_count(v, &u) || u < 1 || u > 65536)
                return bad("--parts", v);
            a->parts = (long)u;
        } else if (!strcmp(k, "--seed")) {
            if (parse_count(v, &a->seed))
                return bad("--seed", v);
        } else if (!strcmp(k, "--avg-size")) {
            if (parse_double(v, &d) || d <= 0 || d > 10000)
                return bad("--avg-size", v);
            a->avg_size = d;
        } else if (!strcmp(k, "--pattern-size")) {
            if (parse_double(v, &d) || d <= 0 || d > 10000)
                return bad("--pattern-size", v);
            a->pattern_size = d;
        } else if (!strcmp(k, "--correlation")) {
            if (parse_double(v, &d) || d < 0 || d > 1)
                return bad("--correlation", v);
            a->correlation = d;
        } else if (!strcmp(k, "--corruption-mean")) {
            if (parse_double(v, &d) || d < 0 || d > 1)
                return bad("--corruption-mean", v);
            a->corr_mean = d;
        } else if (!strcmp(k, "--corruption-var")) {
            if (parse_double(v, &d) || d < 0 || d > 1)
                return bad("--corruption-var", v);
            a->corr_var = d;
        } else if (!strcmp(k, "--out")) {
            if (!*v)
                return bad("--out", v);
            a->out = v;
        } else {
            fprintf(stderr, "vb-questgen: unknown option %s (see --help)\n", k);
            return 2;
        }
    }
    if (!have_d || !a->out) {
        fprintf(stderr, "vb-questgen: --transactions and --out are required (see --help)\n");
        return 2;
    }
    if (a->patterns < 0)
        a->patterns = a->items * 2 < 2000 ? a->items * 2 : 2000;
    return 0;
}

/* ---- patterns ---- */
struct pattern {
    uint32_t *items;
    int n;
    double corruption;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "vb-questgen: out of memory\n");
        exit(1);
    }
    return p;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t *mark, mark_n, stamp;

static void next_stamp(void)
{
    if (++stamp == 0) { /* wrapped: forget every old mark */
        memset(mark, 0, sizeof *mark * mark_n);
        stamp = 1;
    }
}

/* ---- output ---- */
static char *put_u32(char *p, uint32_t v)
{
    char tmp[12];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

int main(int argc, char **argv)
{
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    rng_seed(a.seed);
    const uint32_t N = (uint32_t)a.items;
    const long L = a.patterns;

    /* mark[] with a generation stamp gives O(1) "already chosen?" without clearing */
    mark = xmalloc(sizeof *mark * N);
    mark_n = N;
    memset(mark, 0, sizeof *mark * N);

    struct pattern *pat = xmalloc(sizeof *pat * (size_t)L);
    double *cum = xmalloc(sizeof *cum * (size_t)L), total_w = 0;
    for (long j = 0; j < L; j++) {
        long n = poisson(a.pattern_size);
        if (n < 1)
            n = 1;
        if (n > (long)N)
            n = (long)N;
        struct pattern *p = &pat[j];
        p->items = xmalloc(sizeof(uint32_t) * (size_t)n);
        p->n = 0;
        next_stamp();
        if (j > 0) {
            const struct pattern *q = &pat[j - 1];
            double frac = expo(a.correlation);
            if (frac > 1)
                frac = 1;
            long take = (long)floor(frac * (double)n + 0.5);
            if (take > q->n)
                take = q->n;
            for (long t = 0; t < take;) { /* distinct random items of the previous pattern */
                uint32_t it = q->items[unif_int((uint32_t)q->n)];
                if (mark[it] != stamp) {
                    mark[it] = stamp;
                    p->items[p->n++] = it;
                    t++;
                }
            }
        }
        while (p->n < n) {
            uint32_t it = unif_int(N);
            if (mark[it] != stamp) {
                mark[it] = stamp;
                p->items[p->n++] = it;
            }
        }
        qsort(p->items, (size_t)p->n, sizeof(uint32_t), cmp_u32);
        total_w += expo(1.0);
        cum[j] = total_w;
        double c = normal(a.corr_mean, sqrt(a.corr_var));
        p->corruption = c < 0 ? 0 : c > 1 ? 1 : c;
    }

    /* transactions */
    uint32_t *txn = xmalloc(sizeof *txn * N), *work = xmalloc(sizeof *work * N);
    uint32_t *pending = xmalloc(sizeof *pending * N);
    int npending = -1; /* -1: nothing carried over */
    char *line = xmalloc((size_t)N * 11 + 2);
    size_t plen = strlen(a.out) + 16;
    char *path = xmalloc(plen);
    FILE *f = NULL;
    long part = -1;
    uint64_t bytes = 0, total_items = 0;

    for (uint64_t i = 0; i < a.transactions; i++) {
        long want_part = (long)(i * (uint64_t)a.parts / a.transactions);
        while (part < want_part) {
            if (f && fclose(f)) {
                fprintf(stderr, "vb-questgen: cannot write %s: %s\n", path, strerror(errno));
                return 1;
            }
            part++;
            snprintf(path, plen, "%s.%ld", a.out, part);
            f = fopen(path, "w");
            if (!f) {
                fprintf(stderr, "vb-questgen: cannot create %s: %s\n", path, strerror(errno));
                return 1;
            }
            setvbuf(f, NULL, _IOFBF, 1 << 20);
        }

        long size = poisson(a.avg_size);
        if (size < 1)
            size = 1;
        if (size > (long)N)
            size = (long)N;
        int n = 0, stalled = 0;
        next_stamp();
        while (n < size && stalled < 1000) {
            int m;
            if (npending >= 0) {
                m = npending;
                memcpy(work, pending, sizeof *work * (size_t)m);
                npending = -1;
            } else {
                /* pick a pattern by weight (binary search on the cumulative weights) */
                double r = unif() * total_w;
                long lo = 0, hi = L - 1;
                while (lo < hi) {
                    long mid = (lo + hi) / 2;
                    if (cum[mid] > r)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                const struct pattern *p = &pat[lo];
                m = p->n;
                memcpy(work, p->items, sizeof *work * (size_t)m);
                while (m > 0 && unif() < p->corruption) { /* corrupt: drop random items */
                    int d = (int)unif_int((uint32_t)m);
                    memmove(work + d, work + d + 1, sizeof *work * (size_t)(m - d - 1));
                    m--;
                }
            }
            int fresh = 0;
            for (int t = 0; t < m; t++)
                fresh += mark[work[t]] != stamp;
            if (n > 0 && n + fresh > size && unif() >= 0.5) {
                memcpy(pending, work, sizeof *work * (size_t)m); /* next transaction's */
                npending = m;
                break;
            }
            for (int t = 0; t < m; t++)
                if (mark[work[t]] != stamp) {
                    mark[work[t]] = stamp;
                    txn[n++] = work[t];
                }
            stalled = fresh ? 0 : stalled + 1;
        }
        qsort(txn, (size_t)n, sizeof *txn, cmp_u32);
        char *q = line;
        for (int t = 0; t < n; t++) {
            if (t)
                *q++ = ' ';
            q = put_u32(q, txn[t]);
        }
        *q++ = '\n';
        size_t len = (size_t)(q - line);
        if (fwrite(line, 1, len, f) != len) {
            fprintf(stderr, "vb-questgen: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        bytes += len;
        total_items += (uint64_t)n;
    }
    /* parts that received no transaction (P > D) still exist, empty */
    while (part < a.parts - 1) {
        if (f && fclose(f)) {
            fprintf(stderr, "vb-questgen: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        part++;
        snprintf(path, plen, "%s.%ld", a.out, part);
        f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "vb-questgen: cannot create %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    if (f && fclose(f)) {
        fprintf(stderr, "vb-questgen: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("{\"generator\":\"quest\",\"transactions\":%llu,\"items\":%u,\"avg_size\":%g,"
           "\"pattern_size\":%g,\"patterns\":%ld,\"seed\":%llu,\"parts\":%ld,"
           "\"mean_items\":%.4f,\"bytes\":%llu,\"version\":%d}\n",
           (unsigned long long)a.transactions, N, a.avg_size, a.pattern_size, L,
           (unsigned long long)a.seed, a.parts,
           a.transactions ? (double)total_items / (double)a.transactions : 0.0,
           (unsigned long long)bytes, VERSION);
    return 0;
}
