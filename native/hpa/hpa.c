/*
 * vb-hpa: Hash Partitioned Apriori (HPA) over MPI.
 *
 *   mpirun -np R vb-hpa --input PREFIX --support S [--confidence C] [--max-k K]
 *                       [--rules-out FILE] [--itemsets-out FILE] [--batch B]
 *                       [--ship prefix|subsets]
 *
 * Written for virtbench from the published description of HPA (Shintani and
 * Kitsuregawa, 1996) and of Apriori (Agrawal and Srikant, 1994).
 *
 * Rank r reads its share of the transactions from PREFIX.r (text: one transaction
 * per line, item ids separated by blanks; a blank line is an empty transaction).
 *
 *   pass 1   every rank counts items locally, MPI_Allreduce sums the counts.
 *   pass k   candidates C(k) = apriori-gen(L(k-1)) (join + prune).  Each candidate
 *            belongs to one rank, chosen by a hash of the itemset, which alone keeps
 *            a counter for it (pairs: a triangular matrix; longer: a hash table).
 *            Every rank scans its transactions and sends each k-subset that can be
 *            a candidate to its owner, in rounds (queues of about B subsets per
 *            destination; MPI_Alltoall of sizes, MPI_Alltoallv of the data), and
 *            counts what arrives.  The frequent k-itemsets go to every rank with
 *            MPI_Allgatherv, and the next pass begins.  See "counting pass" for
 *            the two ways (--ship) subsets travel.
 *   end      rank 0 derives the rules X\A => A ... (confidence >= C) and prints.
 *
 * Pruning of the subsets a rank enumerates (none changes the result):
 *   - items that are not frequent, or that occur in no candidate of this pass,
 *     are removed from the transactions for good; short transactions are dropped;
 *   - a subset is not extended when a pair of its items is not in L(2) or when its
 *     j-item prefix (2 < j < k) is not in L(j): no candidate can have it.
 *
 * Output (rank 0, stdout): one JSON line per pass, then a summary line:
 *   {"pass":k,"candidates":..,"frequent":..,"time_s":..,"bytes_sent":..,
 *    "gen_s":..,"count_s":..,"exchange_s":..,"gather_s":..,"subsets":..,"imbalance":..}
 *   {"summary":true,"transactions":D,"items":N,"support":S,"confidence":C,
 *    "min_count":..,"ranks":R,"frequent_itemsets":..,"rules":..,"time_s":..,
 *    "read_time_s":..,"bytes_exchanged":..,"passes":..,"version":2,
 *    "cpu_busy_mean":..,"cpu_busy_min":..}
 * cpu_busy_*: each rank's share of the run (reading to the last pass) on a CPU or waiting
 * in a run queue for one, i.e. not blocked on I/O or asleep (Linux schedstat of the rank's
 * main thread), the mean and the smallest over the ranks; left out where the kernel does not
 * keep schedstat.
 * bytes_sent is the volume of subset records shipped between distinct ranks in
 * that pass (all ranks together); the small pass-1 Allreduce and the Allgatherv
 * of frequent itemsets are not included.  N is the largest item id + 1.  The
 * phase times are rank 0's; subsets = subsets counted by all ranks, imbalance =
 * the busiest rank's count / the mean (see README.md).
 *
 * Exit status: 0 success, 2 bad arguments or input, 3 out of memory.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VERSION 2

/* This thread's time on a CPU (its CPU clock, exact) and waiting in a run queue for one (the
 * second field of /proc/thread-self/schedstat, Linux), in seconds: what is left of a span is time
 * blocked (on I/O, on a message, asleep). -1 where the kernel does not keep schedstat. */
static double sched_busy_s(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run_ns, wait_ns;
    struct timespec cpu;
    int n = 0;
    if (f) {
        n = fscanf(f, "%llu %llu", &run_ns, &wait_ns);
        fclose(f);
    }
    if (n != 2 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu))
        return -1.0;
    return (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9 + (double)wait_ns / 1e9;
}
#define KMAX 64

static int rank, nranks;

/* ------------------------------------------------------------------ utilities */

static void die_oom(void)
{
    fprintf(stderr, "vb-hpa: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die_oom();
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        die_oom();
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        die_oom();
    return p;
}

static inline uint64_t hash_items(const uint32_t *a, int k)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)k;
    for (int i = 0; i < k; i++) {
        h = (h ^ a[i]) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}

/* owner from the high half, table slot from the low half of the same hash */
static inline int owner_of(uint64_t h) { return (int)(((h >> 32) * (uint64_t)nranks) >> 32); }

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static inline int keys_equal(const uint32_t *a, const uint32_t *b, int k)
{
    for (int i = 0; i < k; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* ------------------------------------------------- itemset table (open addressing) */
/*
 * Itemsets of one length k stored densely (items[idx*k..], counts[idx]); the slot
 * array maps hash -> idx with linear probing.  A slot holds (hash high 32 bits << 32)
 * | (idx + 1), 0 meaning empty, so most mismatches are rejected without touching
 * the items.  The load factor stays at or below 1/2.
 */
typedef struct {
    int k;
    size_t n, cap;
    uint32_t *items;
    uint32_t *counts;
    uint64_t *slots;
    size_t mask;
} itab;

static void itab_init(itab *t, int k, size_t expect)
{
    size_t ns = 16;
    while (ns < 2 * expect)
        ns <<= 1;
    t->k = k;
    t->n = 0;
    t->cap = expect ? expect : 16;
    t->items = xmalloc(sizeof(uint32_t) * t->cap * (size_t)k);
    t->counts = xmalloc(sizeof(uint32_t) * t->cap);
    t->slots = xcalloc(ns, sizeof(uint64_t));
    t->mask = ns - 1;
}

static void itab_free(itab *t)
{
    free(t->items);
    free(t->counts);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static inline long itab_find(const itab *t, const uint32_t *key, uint64_t h)
{
    const int k = t->k;
    const uint64_t tag = h & 0xFFFFFFFF00000000ull;
    for (size_t s = h & t->mask;; s = (s + 1) & t->mask) {
        uint64_t v = t->slots[s];
        if (!v)
            return -1;
        if ((v & 0xFFFFFFFF00000000ull) == tag) {
            size_t idx = (size_t)(uint32_t)v - 1;
            if (keys_equal(t->items + idx * (size_t)k, key, k))
                return (long)idx;
        }
    }
}

static void itab_place(itab *t, uint64_t h, size_t idx)
{
    size_t s = h & t->mask;
    while (t->slots[s])
        s = (s + 1) & t->mask;
    t->slots[s] = (h & 0xFFFFFFFF00000000ull) | (uint64_t)(idx + 1);
}

/* append a key known to be absent */
static void itab_add(itab *t, const uint32_t *key, uint64_t h, uint32_t count)
{
    const int k = t->k;
    if (t->n == t->cap) {
        t->cap *= 2;
        t->items = xrealloc(t->items, sizeof(uint32_t) * t->cap * (size_t)k);
        t->counts = xrealloc(t->counts, sizeof(uint32_t) * t->cap);
    }
    if (2 * (t->n + 1) > t->mask + 1) { /* grow the slot array and re-place everything */
        size_t ns = 2 * (t->mask + 1);
        free(t->slots);
        t->slots = xcalloc(ns, sizeof(uint64_t));
        t->mask = ns - 1;
        for (size_t i = 0; i < t->n; i++)
            itab_place(t, hash_items(t->items + i * (size_t)k, k), i);
    }
    memcpy(t->items + t->n * (size_t)k, key, sizeof(uint32_t) * (size_t)k);
    t->counts[t->n] = count;
    itab_place(t, h, t->n);
    t->n++;
}

/* ------------------------------------------- candidate counters of one owner */
/*
 * Owned candidates of length k >= 2 live in an open-addressing table whose slots
 * hold the entries themselves, (tag, count, k items) in k + 2 words, so that a
 * probe touches one cache line; tag = high half of the hash | 1, 0 = empty slot.
 * Pairs are counted in a triangular matrix instead when F (frequent items) is at
 * most TRI_MAX_F: one increment, no hashing, 4 bytes per pair.
 */
#ifndef TRI_MAX_F
#define TRI_MAX_F 4096
#endif
_Static_assert(TRI_MAX_F <= 65536, "pair positions are kept in 16 bits");
#ifndef PAIRBITS_MAX_F
#define PAIRBITS_MAX_F 8192 /* F x F bits of L(2) for the subset filter */
#endif

typedef struct {
    int k, w;
    size_t n, mask;
    uint32_t *e;
    uint32_t *tri; /* k == 2 only: F*(F-1)/2 counters, or NULL */
    size_t F;
} ctab;

static void ctab_init(ctab *t, int k, size_t expect)
{
    size_t ns = 16;
    while (ns < 2 * expect)
        ns <<= 1;
    memset(t, 0, sizeof *t);
    t->k = k;
    t->w = k + 2;
    t->mask = ns - 1;
    t->e = xcalloc(ns * (size_t)t->w, sizeof(uint32_t));
}

static void ctab_free(ctab *t)
{
    free(t->e);
    free(t->tri);
    memset(t, 0, sizeof *t);
}

static inline size_t tri_index(uint32_t i, uint32_t j, size_t F)
{
    return (size_t)i * (F - 1) - (size_t)i * (i - 1) / 2 + (j - i - 1);
}

static void ctab_place(ctab *t, const uint32_t *entry, uint64_t h)
{
    size_t s = h & t->mask;
    while (t->e[s * (size_t)t->w])
        s = (s + 1) & t->mask;
    memcpy(t->e + s * (size_t)t->w, entry, sizeof(uint32_t) * (size_t)t->w);
}

static void ctab_add(ctab *t, const uint32_t *key, uint64_t h)
{
    const int k = t->k, w = t->w;
    if (2 * (t->n + 1) > t->mask + 1) {
        uint32_t *old = t->e;
        size_t olds = t->mask + 1;
        t->mask = 2 * olds - 1;
        t->e = xcalloc(2 * olds * (size_t)w, sizeof(uint32_t));
        for (size_t s = 0; s < olds; s++)
            if (old[s * (size_t)w])
                ctab_place(t, old + s * (size_t)w, hash_items(old + s * (size_t)w + 2, k));
        free(old);
    }
    uint32_t entry[KMAX + 2];
    entry[0] = (uint32_t)(h >> 32) | 1u;
    entry[1] = 0;
    memcpy(entry + 2, key, sizeof(uint32_t) * (size_t)k);
    ctab_place(t, entry, h);
    t->n++;
}

/* count one subset if it is a candidate of this owner */
static inline void ctab_hit(ctab *t, const uint32_t *key, uint64_t h)
{
    if (t->tri) {
        t->tri[tri_index(key[0], key[1], t->F)]++;
        return;
    }
    const int k = t->k, w = t->w;
    const uint32_t tag = (uint32_t)(h >> 32) | 1u;
    for (size_t s = h & t->mask;; s = (s + 1) & t->mask) {
        uint32_t *e = t->e + s * (size_t)w;
        if (!e[0])
            return;
        if (e[0] == tag && keys_equal(e + 2, key, k)) {
            e[1]++;
            return;
        }
    }
}

/* ---------------------------------------------------------------- transactions */
typedef struct {
    uint32_t *items; /* all items, transaction after transaction */
    size_t *off;     /* transaction i = items[off[i] .. off[i+1]) */
    size_t n;        /* transactions */
    size_t nitems, cap_items, cap_off;
} txdb;

static void db_push_item(txdb *db, uint32_t v)
{
    if (db->nitems == db->cap_items) {
        db->cap_items = db->cap_items ? 2 * db->cap_items : 1 << 16;
        db->items = xrealloc(db->items, sizeof(uint32_t) * db->cap_items);
    }
    db->items[db->nitems++] = v;
}

static void db_end_txn(txdb *db, int sorted)
{
    size_t start = db->off[db->n];
    uint32_t *t = db->items + start;
    size_t len = db->nitems - start;
    if (!sorted && len > 1) { /* sort and drop duplicates */
        qsort(t, len, sizeof *t, cmp_u32);
        size_t w = 1;
        for (size_t i = 1; i < len; i++)
            if (t[i] != t[w - 1])
                t[w++] = t[i];
        db->nitems = start + w;
    }
    if (db->n + 2 > db->cap_off) {
        db->cap_off = db->cap_off ? 2 * db->cap_off : 1 << 14;
        db->off = xrealloc(db->off, sizeof(size_t) * db->cap_off);
    }
    db->n++;
    db->off[db->n] = db->nitems;
}

/* Read one file; on error fill msg and return -1. */
static int read_db(const char *path, txdb *db, char *msg, size_t msglen)
{
    memset(db, 0, sizeof *db);
    db->cap_off = 1 << 14;
    db->off = xmalloc(sizeof(size_t) * db->cap_off);
    db->off[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, msglen, "cannot open input %s: %s", path, strerror(errno));
        return -1;
    }
    enum { CHUNK = 1 << 22 };
    char *buf = xmalloc(CHUNK);
    uint64_t val = 0;
    int innum = 0, sorted = 1, line_open = 0;
    uint32_t last = 0;
    size_t lineno = 1, got;
    int rc = 0;
    while ((got = fread(buf, 1, CHUNK, f)) > 0) {
        for (size_t i = 0; i < got; i++) {
            unsigned char c = (unsigned char)buf[i];
            if (c >= '0' && c <= '9') {
                val = val * 10 + (c - '0');
                if (val > 0x7FFFFFFF) {
                    snprintf(msg, msglen, "%s:%zu: item id too large", path, lineno);
                    rc = -1;
                    goto out;
                }
                innum = 1;
                line_open = 1;
                continue;
            }
            if (innum) {
                uint32_t v = (uint32_t)val;
                if (db->nitems > db->off[db->n] && v <= last)
                    sorted = 0;
                last = v;
                db_push_item(db, v);
                innum = 0;
                val = 0;
            }
            if (c == '\n') {
                db_end_txn(db, sorted);
                sorted = 1;
                line_open = 0;
                lineno++;
            } else if (c == ' ' || c == '\t' || c == '\r') {
                line_open = 1;
            } else {
                snprintf(msg, msglen, "%s:%zu: unexpected character 0x%02x (want item ids "
                                      "separated by blanks)", path, lineno, c);
                rc = -1;
                goto out;
            }
        }
    }
    if (ferror(f)) {
        snprintf(msg, msglen, "cannot read %s: %s", path, strerror(errno));
        rc = -1;
        goto out;
    }
    if (innum) {
        uint32_t v = (uint32_t)val;
        if (db->nitems > db->off[db->n] && v <= last)
            sorted = 0;
        db_push_item(db, v);
    }
    if (line_open) /* last line without a newline */
        db_end_txn(db, sorted);
out:
    free(buf);
    fclose(f);
    return rc;
}

/* Keep only items with keep[item] != UINT32_MAX, renamed to keep[item]; drop
 * transactions shorter than minlen.  keep == NULL: only drop short ones. */
static void db_filter(txdb *db, const uint32_t *keep, size_t minlen)
{
    size_t w = 0, nt = 0;
    for (size_t i = 0; i < db->n; i++) {
        size_t a = db->off[i], b = db->off[i + 1], start = w;
        for (size_t j = a; j < b; j++) {
            uint32_t v = db->items[j];
            if (keep) {
                v = keep[v];
                if (v == UINT32_MAX)
                    continue;
            }
            db->items[w++] = v;
        }
        if (w - start < minlen) {
            w = start;
            continue;
        }
        db->off[nt++] = start; /* off[nt] <= a: safe to overwrite in place */
    }
    db->off[nt] = w;
    db->n = nt;
    db->nitems = w;
}

/* -------------------------------------------------------------- subset enumerator */
/*
 * Iterates over the k-subsets of one transaction (sorted items a[0..m-1]) in
 * lexicographic order, skipping every subtree whose prefix cannot be part of a
 * candidate.  State survives between calls, so a caller can stop at any subset.
 */
typedef struct {
    const uint32_t *a;
    int m, k, d;
    int pos[KMAX + 1];
    uint32_t cur[KMAX];
    const uint8_t *first_ok; /* first item x allowed only if first_ok[x]; NULL: all */
} subenum;

typedef struct {
    const uint8_t *pairbits; /* F x F bit matrix of L(2), or NULL */
    size_t F;
    const itab *levels;      /* levels[j] = L(j) (j >= 1) */
} prefilter;

static inline int pair_frequent(const prefilter *pf, uint32_t x, uint32_t y)
{
    if (pf->pairbits) {
        size_t bit = (size_t)x * pf->F + y;
        return (pf->pairbits[bit >> 3] >> (bit & 7)) & 1;
    }
    uint32_t key[2] = {x, y};
    return itab_find(&pf->levels[2], key, hash_items(key, 2)) >= 0;
}

static void sub_init(subenum *e, const uint32_t *a, int m, int k)
{
    e->a = a;
    e->m = m;
    e->k = k;
    e->d = 0;
    e->pos[0] = 0;
    e->first_ok = NULL;
}

/* 1 and the subset in e->cur, or 0 when exhausted */
static int sub_next(subenum *e, const prefilter *pf)
{
    const int k = e->k, m = e->m;
    for (;;) {
        int d = e->d;
        if (d < 0)
            return 0;
        int p = e->pos[d];
        if (p > m - (k - d)) { /* not enough items left for the rest */
            e->d = --d;
            if (d >= 0)
                e->pos[d]++;
            continue;
        }
        uint32_t x = e->a[p];
        if (d == 0 && e->first_ok && !e->first_ok[x]) {
            e->pos[0]++;
            continue;
        }
        if (k >= 3 && d >= 1) {
            int ok = 1;
            for (int i = 0; i < d && ok; i++)
                ok = pair_frequent(pf, e->cur[i], x);
            if (ok && d + 1 >= 3 && d + 1 < k) {
                e->cur[d] = x;
                ok = itab_find(&pf->levels[d + 1], e->cur, hash_items(e->cur, d + 1)) >= 0;
            }
            if (!ok) {
                e->pos[d]++;
                continue;
            }
        }
        e->cur[d] = x;
        if (d == k - 1) {
            e->pos[d]++;
            return 1;
        }
        e->d = d + 1;
        e->pos[d + 1] = p + 1;
    }
}

/* ------------------------------------------------------------- options & output */
struct options {
    const char *input;
    double support, confidence;
    int max_k;
    const char *rules_out, *itemsets_out;
    long batch;
    int ship_prefix;
};

static int usage_error(const char *fmt, const char *arg)
{
    if (rank == 0) {
        fputs("vb-hpa: ", stderr);
        fprintf(stderr, fmt, arg);
        fputc('\n', stderr);
    }
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    memset(o, 0, sizeof *o);
    o->support = -1;
    o->confidence = 0.5;
    o->max_k = KMAX;
    o->batch = 65536;
    o->ship_prefix = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0)
                printf("usage: mpirun -np R vb-hpa --input PREFIX --support S [--confidence C=0.5]\n"
                       "           [--max-k K] [--rules-out FILE] [--itemsets-out FILE] [--batch B]\n"
                       "           [--ship prefix|subsets]\n"
                       "  rank r reads PREFIX.r; S is a fraction in (0,1]; queues of B subsets' worth "
                       "per peer;\n"
                       "  prefix: a candidate's owner hashes its first item, a transaction's subsets for "
                       "one owner\n"
                       "  travel as one suffix; subsets: owner hashes the whole set, each subset "
                       "travels alone\n");
            return -1;
        }
        if (i + 1 >= argc)
            return usage_error("option %s needs a value", a);
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--input")) {
            o->input = v;
        } else if (!strcmp(a, "--support")) {
            errno = 0;
            o->support = strtod(v, &end);
            if (errno || end == v || *end || !(o->support > 0 && o->support <= 1))
                return usage_error("--support must be a fraction in (0, 1], got '%s'", v);
        } else if (!strcmp(a, "--confidence")) {
            errno = 0;
            o->confidence = strtod(v, &end);
            if (errno || end == v || *end || !(o->confidence >= 0 && o->confidence <= 1))
                return usage_error("--confidence must be in [0, 1], got '%s'", v);
        } else if (!strcmp(a, "--max-k")) {
            errno = 0;
            long k = strtol(v, &end, 10);
            if (errno || end == v || *end || k < 1 || k > KMAX)
                return usage_error("--max-k must be an integer in 1..64, got '%s'", v);
            o->max_k = (int)k;
        } else if (!strcmp(a, "--batch")) {
            errno = 0;
            long b = strtol(v, &end, 10);
            if (errno || end == v || *end || b < 1 || b > (1L << 24))
                return usage_error("--batch must be an integer in 1..16777216, got '%s'", v);
            o->batch = b;
        } else if (!strcmp(a, "--ship")) {
            if (strcmp(v, "prefix") && strcmp(v, "subsets"))
                return usage_error("--ship must be 'prefix' or 'subsets', got '%s'", v);
            o->ship_prefix = !strcmp(v, "prefix");
        } else if (!strcmp(a, "--rules-out")) {
            o->rules_out = v;
        } else if (!strcmp(a, "--itemsets-out")) {
            o->itemsets_out = v;
        } else {
            return usage_error("unknown option %s (see --help)", a);
        }
    }
    if (!o->input)
        return usage_error("%s", "--input PREFIX is required");
    if (o->support < 0)
        return usage_error("%s", "--support S is required (a fraction in (0, 1])");
    return 0;
}

static int cmp_k; /* key length for cmp_itemset */
static int cmp_itemset(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    for (int i = 0; i < cmp_k; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* ----------------------------------------------------------------- counting pass */
/*
 * Ownership.  Every candidate X has one owner rank, computed the same way on every
 * rank from X alone:
 *   --ship subsets  owner = hash of all of X (the pair's triangle index for pairs);
 *   --ship prefix   owner = item_owner[x1], a table of X's first item: for pairs
 *                   R contiguous ranges of equal work (own_pair_ranges), for longer
 *                   itemsets a hash of the item's original id.
 * What travels.  With `subsets`, each k-subset of a transaction is one record for
 * its owner: the pair's triangle index (1 word) or the k item ids.  With `prefix`
 * (default) the subsets of one transaction bound for one owner are those whose
 * first item that owner owns; they are sent together, prefix-compressed, as the
 * transaction's suffix from the first such item: [m, a_p .. a_(m-1)] in 16-bit
 * words when the dense item ids fit.  The owner expands exactly its subsets from
 * it (it knows item_owner), so every subset is still counted by its owner and
 * only there; the sender no longer touches every subset, it looks at each item once.
 *
 * subsets: every destination, this rank included, has a byte queue; when one
 * fills, all ranks swap queues with MPI_Alltoall (sizes + done flags) and
 * MPI_Alltoallv and count what arrives.  prefix: pipelined point-to-point rounds
 * (count_prefix).
 */
static int ship_prefix = 1;     /* --ship prefix (1) or subsets (0) */
static uint32_t *pair_cut;      /* pass 2, prefix mode, several ranks: range boundaries */
static int *item_owner;         /* dense item id -> owner rank of the sets it starts */
static uint8_t *item_mine;      /* item_owner[i] == rank */

static inline int pair_owner(uint32_t idx)
{
    /* Fibonacci hashing of the pair's index: consecutive pairs scatter over ranks */
    return (int)(((uint64_t)(uint32_t)(idx * 0x9E3779B1u) * (uint64_t)nranks) >> 32);
}

static inline int set_owner(const uint32_t *x, uint64_t h)
{
    return ship_prefix ? item_owner[x[0]] : owner_of(h);
}

/* prefix mode: one of two alternating rounds (pipelined: one round's data is in
 * flight while the next round's transactions are packed and counted).  A round is
 * point-to-point: one message per peer, its tag = "the sender is done" (messages
 * between two ranks do not overtake, so rounds stay in order). */
typedef struct {
    uint8_t *sbuf;      /* destination r's queue: sbuf[r * cap ...] */
    int *scount;        /* bytes queued per destination */
    uint8_t *rbuf;      /* from source r: rbuf[r * cap ...] */
    size_t qmax;        /* fullest queue, bytes */
    MPI_Request *req;   /* 2 (R - 1): receives, then sends */
    MPI_Status *st;
    int nreq, complete, done; /* done: this rank had nothing more after this round */
} xslot;

typedef struct {
    int k, es;          /* es: bytes per word on the wire (2 or 4) */
    size_t cap;         /* bytes per destination queue */
    uint8_t *sbuf;      /* destination r's queue: sbuf[r * cap ...] */
    int *scount;        /* bytes queued per destination */
    uint8_t *rbuf;
    size_t rcap;
    int *sendcnt, *recvcnt, *sdispl, *rdispl, *flags_out, *flags_in;
    uint64_t bytes_sent, counted;
    double t_exchange;
    ctab *cand;
    const prefilter *pf;
    const uint32_t *row;   /* triangle mode: row[i] + j = index of pair (i, j) */
    uint32_t *tmp;         /* one decoded suffix */
    uint64_t *stamp, txn;  /* prefix mode: stamp[r] == txn when r has this suffix */
    const uint32_t *cut;   /* pairs, several ranks: rank r owns first items [cut[r], cut[r+1]) */
    xslot slot[2];         /* prefix mode, several ranks */
} exchanger;

/* prefix mode: count the subsets of a[0..m) whose first item this rank owns */
static void count_own(exchanger *x, const uint32_t *a, size_t m)
{
    const int k = x->k;
    if (x->row) {
        uint32_t *tri = x->cand->tri;
        const uint32_t *row = x->row;
        if (nranks == 1) {
            for (size_t p = 0; p + 1 < m; p++) {
                const uint32_t base = row[a[p]];
                for (size_t q = p + 1; q < m; q++)
                    tri[base + a[q]]++;
            }
            x->counted += (uint64_t)m * (m - 1) / 2;
            return;
        }
        /* the owned first positions, collected without a branch: whether an item
         * is ours is a coin flip, a branch on it would mispredict half the time */
        uint16_t own[TRI_MAX_F];
        size_t n = 0;
        for (size_t p = 0; p + 1 < m; p++) {
            own[n] = (uint16_t)p;
            n += item_mine[a[p]];
        }
        for (size_t i = 0; i < n; i++) {
            const size_t p = own[i];
            const uint32_t base = row[a[p]];
            for (size_t q = p + 1; q < m; q++)
                tri[base + a[q]]++;
            x->counted += m - 1 - p;
        }
        return;
    }
    subenum e;
    sub_init(&e, a, (int)m, k);
    e.first_ok = item_mine;
    while (sub_next(&e, x->pf)) {
        ctab_hit(x->cand, e.cur, hash_items(e.cur, k));
        x->counted++;
    }
}

/* count what arrived: suffixes (prefix mode) or subset records */
static void count_received(exchanger *x, const uint8_t *p, size_t nbytes)
{
    if (ship_prefix) {
        const uint8_t *end = p + nbytes;
        while (p < end) {
            size_t m;
            if (x->es == 2) {
                const uint16_t *w = (const uint16_t *)p;
                m = w[0];
                for (size_t i = 0; i < m; i++)
                    x->tmp[i] = w[1 + i];
            } else {
                const uint32_t *w = (const uint32_t *)p;
                m = w[0];
                memcpy(x->tmp, w + 1, sizeof(uint32_t) * m);
            }
            p += (m + 1) * (size_t)x->es;
            count_own(x, x->tmp, m);
        }
    } else if (x->cand->tri) {
        const uint32_t *w = (const uint32_t *)p;
        uint32_t *tri = x->cand->tri;
        for (size_t i = 0; i < nbytes / 4; i++)
            tri[w[i]]++;
        x->counted += nbytes / 4;
    } else {
        const uint32_t *w = (const uint32_t *)p;
        const int k = x->k;
        for (size_t i = 0; i < nbytes / 4; i += (size_t)k) {
            ctab_hit(x->cand, w + i, hash_items(w + i, k));
            x->counted++;
        }
    }
}

/* Swap the queued records among all ranks and count what arrives and the own
 * queue.  Returns 1 when every rank has reported that it has nothing more to send. */
static int exchange(exchanger *x, int local_done)
{
    double t0 = MPI_Wtime();
    for (int r = 0; r < nranks; r++) {
        x->flags_out[2 * r] = r == rank ? 0 : x->scount[r];
        x->flags_out[2 * r + 1] = local_done;
    }
    MPI_Alltoall(x->flags_out, 2, MPI_INT, x->flags_in, 2, MPI_INT, MPI_COMM_WORLD);
    int all_done = 1;
    size_t total = 0;
    for (int r = 0; r < nranks; r++) {
        x->recvcnt[r] = x->flags_in[2 * r];
        all_done &= x->flags_in[2 * r + 1];
        x->rdispl[r] = (int)total;
        total += (size_t)x->recvcnt[r];
    }
    for (int r = 0; r < nranks; r++) {
        x->sendcnt[r] = x->flags_out[2 * r];
        x->sdispl[r] = (int)((size_t)r * x->cap);
    }
    if (total > x->rcap) {
        x->rcap = total;
        x->rbuf = xrealloc(x->rbuf, total);
    }
    MPI_Alltoallv(x->sbuf, x->sendcnt, x->sdispl, MPI_BYTE, x->rbuf, x->recvcnt, x->rdispl,
                  MPI_BYTE, MPI_COMM_WORLD);
    x->t_exchange += MPI_Wtime() - t0;
    count_received(x, x->rbuf, total);
    count_received(x, x->sbuf + (size_t)rank * x->cap, (size_t)x->scount[rank]);
    for (int r = 0; r < nranks; r++) {
        if (r != rank)
            x->bytes_sent += (uint64_t)x->scount[r];
        x->scount[r] = 0;
    }
    return all_done;
}

/* room for n more bytes in queue o: count the own queue in place, or swap */
static inline uint8_t *reserve(exchanger *x, int o, size_t n)
{
    if ((size_t)x->scount[o] + n > x->cap) {
        if (o == rank) {
            count_received(x, x->sbuf + (size_t)rank * x->cap, (size_t)x->scount[rank]);
            x->scount[rank] = 0;
        } else {
            exchange(x, 0);
        }
    }
    uint8_t *q = x->sbuf + (size_t)o * x->cap + (size_t)x->scount[o];
    x->scount[o] += (int)n;
    return q;
}

/* prefix mode: queue one transaction's suffix for every other owner of one of its
 * first items (a subset's first item has at least k-1 items after it); the caller
 * has checked that (m + 1) words fit in every queue */
static inline void put_suffix(exchanger *x, xslot *sl, int o, const uint32_t *a, size_t len)
{
    uint8_t *q = sl->sbuf + (size_t)o * x->cap + (size_t)sl->scount[o];
    sl->scount[o] += (int)((len + 1) * (size_t)x->es);
    if ((size_t)sl->scount[o] > sl->qmax)
        sl->qmax = (size_t)sl->scount[o];
    if (x->es == 2) {
        uint16_t *w = (uint16_t *)(void *)q; /* queues hold whole 16-bit words */
        w[0] = (uint16_t)len;
        for (size_t i = 0; i < len; i++)
            w[1 + i] = (uint16_t)a[i];
    } else {
        uint32_t w = (uint32_t)len;
        memcpy(q, &w, 4);
        memcpy(q + 4, a, 4 * len);
    }
}

static void pack_suffixes(exchanger *x, xslot *sl, const uint32_t *a, size_t m)
{
    const int k = x->k;
    if (m < (size_t)k)
        return;
    x->txn++;
    int left = nranks - 1;
    for (size_t p = 0; p + (size_t)k <= m && left > 0; p++) {
        int o = item_owner[a[p]];
        if (o == rank || x->stamp[o] == x->txn)
            continue;
        x->stamp[o] = x->txn; /* the first suffix for o holds all later ones */
        left--;
        put_suffix(x, sl, o, a + p, m - p);
    }
}

/* pairs in the triangle, several ranks, first items owned in ranges: one scan of
 * the transaction counts the own pairs and queues the suffix from the first item
 * of each other owner's range (sorted items: each range is one run of positions) */
static void pairs_ranges(exchanger *x, xslot *sl, const uint32_t *a, size_t m)
{
    uint32_t *tri = x->cand->tri;
    const uint32_t *row = x->row, *cut = x->cut;
    size_t p = 0;
    for (int o = 0; o < nranks && p + 1 < m; o++) {
        const size_t s = p;
        const uint32_t hi = cut[o + 1];
        while (p + 1 < m && a[p] < hi) /* the last item starts no pair */
            p++;
        if (p == s)
            continue;
        if (o != rank) {
            put_suffix(x, sl, o, a + s, m - s);
            continue;
        }
        for (size_t i = s; i < p; i++) {
            const uint32_t base = row[a[i]];
            for (size_t q = i + 1; q < m; q++)
                tri[base + a[q]]++;
            x->counted += m - 1 - i;
        }
    }
}

/* pairs, ranges: count a received suffix [m, a0 ..] straight from the wire words;
 * its first items up to this rank's range end are this rank's */
#define COUNT_SUFFIXES(T)                                                       \
    do {                                                                        \
        const T *w = (const T *)(const void *)p, *wend = w + nbytes / sizeof(T); \
        while (w < wend) {                                                      \
            const size_t m = w[0];                                              \
            const T *a = w + 1;                                                 \
            for (size_t i = 0; i + 1 < m && a[i] < hi; i++) {                   \
                const uint32_t base = row[a[i]];                                \
                for (size_t q = i + 1; q < m; q++)                              \
                    tri[base + a[q]]++;                                         \
                counted += m - 1 - i;                                           \
            }                                                                   \
            w = a + m;                                                          \
        }                                                                       \
    } while (0)

static void count_suffix_pairs(exchanger *x, const uint8_t *p, size_t nbytes)
{
    uint32_t *tri = x->cand->tri;
    const uint32_t *row = x->row, hi = x->cut[rank + 1];
    uint64_t counted = 0;
    if (x->es == 2)
        COUNT_SUFFIXES(uint16_t);
    else
        COUNT_SUFFIXES(uint32_t);
    x->counted += counted;
}

/* prefix mode: start a round: post the receives from and the sends to every peer */
static void start_round(exchanger *x, xslot *sl, int done)
{
    double t0 = MPI_Wtime();
    int n = 0;
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            MPI_Irecv(sl->rbuf + (size_t)r * x->cap, (int)x->cap, MPI_BYTE, r, MPI_ANY_TAG, MPI_COMM_WORLD,
                      &sl->req[n++]);
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            MPI_Isend(sl->sbuf + (size_t)r * x->cap, sl->scount[r], MPI_BYTE, r, done, MPI_COMM_WORLD,
                      &sl->req[n++]);
    sl->nreq = n;
    sl->complete = 0;
    sl->done = done;
    x->t_exchange += MPI_Wtime() - t0;
}

/* prefix mode: push a round on; wait: until it is complete */
static void progress(exchanger *x, xslot *sl, int wait)
{
    if (sl->complete) /* a second MPI_Testall would overwrite the statuses */
        return;
    double t0 = MPI_Wtime();
    int flag = 0;
    MPI_Testall(sl->nreq, sl->req, &flag, sl->st);
    /* waiting: give the core away between polls, in case a peer (or anything
     * else) needs it -- MPI_Wait would spin */
    while (wait && !flag) {
        sched_yield();
        MPI_Testall(sl->nreq, sl->req, &flag, sl->st);
    }
    sl->complete = flag;
    x->t_exchange += MPI_Wtime() - t0;
}

/* prefix mode, in pipelined rounds: pack the suffixes of as many transactions as
 * the round's queues hold and count their own subsets at once (each transaction is
 * scanned once), start the round's messages, then finish the previous round (its
 * data moved meanwhile) and count what it brought.  Until a round in which every
 * rank was done. */
static void count_prefix(const txdb *db, exchanger *x)
{
    if (nranks == 1) { /* every item is this rank's */
        for (size_t t = 0; t < db->n; t++)
            count_own(x, db->items + db->off[t], db->off[t + 1] - db->off[t]);
        return;
    }
    size_t t = 0;
    int cur = 0, pending = 0; /* pending: the other slot's round is in flight */
    for (;;) {
        xslot *sl = &x->slot[cur], *prev = &x->slot[cur ^ 1];
        for (size_t n = 0; t < db->n; t++, n++) {
            const uint32_t *a = db->items + db->off[t];
            const size_t m = db->off[t + 1] - db->off[t];
            if (sl->qmax + (m + 1) * (size_t)x->es > x->cap)
                break;
            if (x->cut) {
                pairs_ranges(x, sl, a, m);
            } else {
                pack_suffixes(x, sl, a, m);
                count_own(x, a, m);
            }
            if ((n & 255) == 255 && pending && !prev->complete)
                progress(x, prev, 0);
        }
        start_round(x, sl, t >= db->n);
        if (pending) {
            /* every rank done in the previous round: this one carries nothing */
            int prev_done = prev->done;
            progress(x, prev, 1);
            for (int i = 0; i < nranks - 1; i++) { /* the receives come first */
                const int r = prev->st[i].MPI_SOURCE;
                int got;
                MPI_Get_count(&prev->st[i], MPI_BYTE, &got);
                prev_done &= prev->st[i].MPI_TAG;
                if (x->cut)
                    count_suffix_pairs(x, prev->rbuf + (size_t)r * x->cap, (size_t)got);
                else
                    count_received(x, prev->rbuf + (size_t)r * x->cap, (size_t)got);
            }
            for (int r = 0; r < nranks; r++) {
                x->bytes_sent += (uint64_t)prev->scount[r];
                prev->scount[r] = 0;
            }
            prev->qmax = 0;
            if (prev_done) {
                progress(x, sl, 1);
                break;
            }
        }
        pending = 1;
        cur ^= 1;
    }
}

/* subsets mode (several ranks), pairs in the triangle: queue each pair's index (4 bytes) for the pair's owner, the own ones too
 * (no branch on a coin-flip owner) */
static void count_pairs_subsets(const txdb *db, exchanger *x)
{
    const uint32_t *row = x->row;
    for (size_t t = 0; t < db->n; t++) {
        const uint32_t *a = db->items + db->off[t];
        const size_t m = db->off[t + 1] - db->off[t];
        for (size_t p = 0; p + 1 < m; p++) {
            const uint32_t base = row[a[p]];
            for (size_t q = p + 1; q < m; q++) {
                uint32_t idx = base + a[q];
                memcpy(reserve(x, pair_owner(idx), 4), &idx, 4);
            }
        }
    }
}

/* subsets mode, k >= 3 (or pairs without the triangle): enumerate the subsets that
 * survive the prefix filter, count own ones directly, queue the k item ids of the
 * others */
static void count_general_subsets(const txdb *db, exchanger *x)
{
    const int k = x->k;
    subenum e;
    for (size_t t = 0; t < db->n; t++) {
        size_t a = db->off[t], b = db->off[t + 1];
        sub_init(&e, db->items + a, (int)(b - a), k);
        while (sub_next(&e, x->pf)) {
            uint64_t h = hash_items(e.cur, k);
            int o = nranks > 1 ? owner_of(h) : 0;
            if (o == rank) {
                ctab_hit(x->cand, e.cur, h);
                x->counted++;
            } else {
                memcpy(reserve(x, o, 4 * (size_t)k), e.cur, 4 * (size_t)k);
            }
        }
    }
}

typedef struct {
    uint64_t bytes_sent, counted;
    double t_count, t_exchange;
    uint64_t bytes_all, counted_all, counted_max; /* over all ranks, filled by a collective */
} pass_stats;

/* Count the k-subsets of the local transactions against the owned candidates. */
static pass_stats count_pass(const txdb *db, int k, ctab *cand, const prefilter *pf, long batch)
{
    double t0 = MPI_Wtime();
    exchanger x;
    memset(&x, 0, sizeof x);
    x.k = k;
    x.cand = cand;
    x.pf = pf;
    x.es = ship_prefix && pf->F <= 0xFFFF ? 2 : 4;
    size_t maxm = 0;
    for (size_t t = 0; t < db->n; t++)
        if (db->off[t + 1] - db->off[t] > maxm)
            maxm = db->off[t + 1] - db->off[t];
    /* --batch B: the memory of B subsets of k items; at least one whole suffix of
     * any rank (at most F items: every rank computes the same size, which a
     * receiver needs to post its receives) */
    x.cap = (size_t)batch * (size_t)k * 4;
    if (x.cap < (pf->F + 1) * (size_t)x.es)
        x.cap = (pf->F + 1) * (size_t)x.es;
    if (x.cap * (size_t)nranks > 0x7FFFFFFF) /* MPI int displacements */
        x.cap = 0x7FFFFFFF / (size_t)nranks / 4 * 4;
    if (x.cap < (maxm + 1) * (size_t)x.es) {
        fprintf(stderr, "vb-hpa: rank %d: a transaction of %zu items does not fit the exchange "
                        "buffers of %d ranks; use fewer ranks\n", rank, maxm, nranks);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    uint32_t *row = NULL;
    if (cand->tri) {
        const size_t F = cand->F;
        row = xmalloc(sizeof(uint32_t) * F);
        for (size_t i = 0; i < F; i++) /* tri_index(i, 0) modulo 2^32: exact for j > i */
            row[i] = (uint32_t)((uint64_t)i * (F - 1) - (uint64_t)i * (i + 1) / 2 - 1);
        x.row = row;
    }
    if (nranks > 1 && !ship_prefix) {
        x.sbuf = xmalloc(x.cap * (size_t)nranks);
        x.scount = xcalloc((size_t)nranks, sizeof(int));
        x.sendcnt = xmalloc(sizeof(int) * (size_t)nranks);
        x.recvcnt = xmalloc(sizeof(int) * (size_t)nranks);
        x.sdispl = xmalloc(sizeof(int) * (size_t)nranks);
        x.rdispl = xmalloc(sizeof(int) * (size_t)nranks);
        x.flags_out = xmalloc(sizeof(int) * 2 * (size_t)nranks);
        x.flags_in = xmalloc(sizeof(int) * 2 * (size_t)nranks);
    }
    if (nranks > 1 && ship_prefix) {
        for (int i = 0; i < 2; i++) {
            xslot *sl = &x.slot[i];
            sl->sbuf = xmalloc(x.cap * (size_t)nranks);
            sl->rbuf = xmalloc(x.cap * (size_t)nranks);
            sl->scount = xcalloc((size_t)nranks, sizeof(int));
            sl->req = xmalloc(sizeof(MPI_Request) * 2 * (size_t)nranks);
            sl->st = xmalloc(sizeof(MPI_Status) * 2 * (size_t)nranks);
        }
        x.stamp = xcalloc((size_t)nranks, sizeof(uint64_t));
        x.cut = k == 2 ? pair_cut : NULL;
    }
    x.tmp = xmalloc(sizeof(uint32_t) * (pf->F + 1));
    if (ship_prefix || nranks == 1)
        count_prefix(db, &x);
    else if (cand->tri)
        count_pairs_subsets(db, &x);
    else
        count_general_subsets(db, &x);
    for (int i = 0; i < 2; i++) {
        free(x.slot[i].sbuf);
        free(x.slot[i].rbuf);
        free(x.slot[i].scount);
        free(x.slot[i].req);
        free(x.slot[i].st);
    }
    if (nranks > 1) {
        while (!ship_prefix && !exchange(&x, 1)) /* drain: until every rank is done */
            ;
        free(x.sbuf);
        free(x.scount);
        free(x.sendcnt);
        free(x.recvcnt);
        free(x.sdispl);
        free(x.rdispl);
        free(x.flags_out);
        free(x.flags_in);
        free(x.rbuf);
        free(x.stamp);
    }
    free(x.tmp);
    free(row);
    pass_stats s = {x.bytes_sent, x.counted, MPI_Wtime() - t0 - x.t_exchange, x.t_exchange, 0, 0, 0};
    return s;
}

/* Gather the frequent itemsets of every owner into a sorted L(k) on all ranks, and
 * the pass statistics of every rank with them (one collective fewer). */
static void gather_frequent(const ctab *cand, uint32_t min_count, itab *out, pass_stats *st)
{
    const int k = cand->k, w = k + 1;
    size_t nf = 0, cap = 1024;
    uint32_t *mine = xmalloc(sizeof(uint32_t) * cap * (size_t)w);
    if (cand->tri) { /* pairs: every (i, j) owned by this rank */
        for (uint32_t i = 0; i + 1 < cand->F; i++)
            for (uint32_t j = i + 1; j < cand->F; j++) {
                uint32_t idx = (uint32_t)tri_index(i, j, cand->F), c = cand->tri[idx];
                if (c < min_count || (nranks > 1 && (ship_prefix ? item_owner[i] : pair_owner(idx)) != rank))
                    continue;
                if (nf == cap)
                    mine = xrealloc(mine, sizeof(uint32_t) * (cap *= 2) * (size_t)w);
                mine[nf * 3] = i;
                mine[nf * 3 + 1] = j;
                mine[nf * 3 + 2] = c;
                nf++;
            }
    } else {
        for (size_t s = 0; s <= cand->mask; s++) {
            const uint32_t *e = cand->e + s * (size_t)cand->w;
            if (!e[0] || e[1] < min_count)
                continue;
            if (nf == cap)
                mine = xrealloc(mine, sizeof(uint32_t) * (cap *= 2) * (size_t)w);
            memcpy(mine + nf * (size_t)w, e + 2, sizeof(uint32_t) * (size_t)k);
            mine[nf * (size_t)w + (size_t)k] = e[1];
            nf++;
        }
    }
    uint64_t info[3] = {nf * (uint64_t)w, st->bytes_sent, st->counted};
    uint64_t *infos = xmalloc(sizeof(uint64_t) * 3 * (size_t)nranks);
    MPI_Allgather(info, 3, MPI_UINT64_T, infos, 3, MPI_UINT64_T, MPI_COMM_WORLD);
    int cnt = (int)info[0];
    int *cnts = xmalloc(sizeof(int) * (size_t)nranks), *displs = xmalloc(sizeof(int) * (size_t)nranks);
    size_t total = 0;
    st->bytes_all = st->counted_all = st->counted_max = 0;
    for (int r = 0; r < nranks; r++) {
        cnts[r] = (int)infos[3 * r];
        displs[r] = (int)total;
        total += (size_t)cnts[r];
        st->bytes_all += infos[3 * r + 1];
        st->counted_all += infos[3 * r + 2];
        if (infos[3 * r + 2] > st->counted_max)
            st->counted_max = infos[3 * r + 2];
    }
    free(infos);
    uint32_t *all = xmalloc(sizeof(uint32_t) * total);
    MPI_Allgatherv(mine, cnt, MPI_UINT32_T, all, cnts, displs, MPI_UINT32_T, MPI_COMM_WORLD);
    size_t n = total / (size_t)w;
    cmp_k = k;
    qsort(all, n, sizeof(uint32_t) * (size_t)w, cmp_itemset);
    itab_init(out, k, n);
    for (size_t i = 0; i < n; i++) {
        const uint32_t *s = all + i * (size_t)w;
        itab_add(out, s, hash_items(s, k), s[k]);
    }
    free(all);
    free(mine);
    free(cnts);
    free(displs);
}

/* apriori-gen: join L(k-1) with itself on the first k-2 items, keep a candidate
 * only if all its (k-1)-subsets are frequent.  Every rank generates the same
 * sequence; it stores the candidates it owns and marks the items used. */
static uint64_t gen_candidates(const itab *prev, int k, ctab *cand, uint8_t *used)
{
    if (k == 2 && prev->n <= TRI_MAX_F) { /* all pairs, counted in the triangle */
        size_t F = prev->n;
        if (F < 2)
            return 0;
        cand->F = F;
        cand->tri = xcalloc(F * (F - 1) / 2, sizeof(uint32_t));
        memset(used, 1, F);
        return (uint64_t)F * (F - 1) / 2;
    }
    const int m = k - 1;
    const size_t n = prev->n;
    uint64_t total = 0;
    uint32_t c[KMAX], sub[KMAX];
    size_t i = 0;
    while (i < n) {
        /* block of itemsets sharing the first m-1 items */
        size_t end = i + 1;
        const uint32_t *pi = prev->items + i * (size_t)m;
        while (end < n && !memcmp(prev->items + end * (size_t)m, pi, sizeof(uint32_t) * (size_t)(m - 1)))
            end++;
        for (size_t a = i; a < end; a++) {
            const uint32_t *x = prev->items + a * (size_t)m;
            memcpy(c, x, sizeof(uint32_t) * (size_t)m);
            for (size_t b = a + 1; b < end; b++) {
                c[m] = prev->items[b * (size_t)m + (size_t)(m - 1)];
                int ok = 1;
                /* dropping c[m-1] or c[m] gives x or y: frequent by construction */
                for (int drop = 0; drop < m - 1 && ok; drop++) {
                    int q = 0;
                    for (int t = 0; t <= m; t++)
                        if (t != drop)
                            sub[q++] = c[t];
                    ok = itab_find(prev, sub, hash_items(sub, m)) >= 0;
                }
                if (!ok)
                    continue;
                total++;
                for (int t = 0; t <= m; t++)
                    used[c[t]] = 1;
                uint64_t h = hash_items(c, k);
                if (nranks == 1 || set_owner(c, h) == rank)
                    ctab_add(cand, c, h);
            }
        }
        i = end;
    }
    return total;
}

/* ---------------------------------------------------------------------- rules */
/* For every frequent X (|X| >= 2) and every non-empty proper subset A (by size, then
 * lexicographically): rule A => X\A if count(X) / count(A) >= C.  Rank 0 only. */
static uint64_t make_rules(const itab *levels, int maxlen, double conf, const uint32_t *orig,
                           FILE *out)
{
    uint64_t nrules = 0;
    int idx[KMAX];
    uint32_t a[KMAX];
    for (int s = 2; s <= maxlen; s++) {
        const itab *L = &levels[s];
        for (size_t i = 0; i < L->n; i++) {
            const uint32_t *x = L->items + i * (size_t)s;
            double cx = (double)L->counts[i];
            for (int as = 1; as < s; as++) {
                for (int t = 0; t < as; t++)
                    idx[t] = t;
                for (;;) {
                    for (int t = 0; t < as; t++)
                        a[t] = x[idx[t]];
                    long ai = itab_find(&levels[as], a, hash_items(a, as));
                    double ca = ai >= 0 ? (double)levels[as].counts[ai] : 0;
                    if (ca > 0 && cx / ca >= conf) {
                        nrules++;
                        if (out) {
                            fprintf(out, "%u %.6f:", L->counts[i], cx / ca);
                            for (int t = 0; t < as; t++)
                                fprintf(out, " %u", orig[a[t]]);
                            fputs(" =>", out);
                            for (int t = 0, u = 0; t < s; t++) {
                                if (u < as && idx[u] == t) {
                                    u++;
                                    continue;
                                }
                                fprintf(out, " %u", orig[x[t]]);
                            }
                            fputc('\n', out);
                        }
                    }
                    /* next combination of as positions out of s */
                    int t = as - 1;
                    while (t >= 0 && idx[t] == s - as + t)
                        t--;
                    if (t < 0)
                        break;
                    idx[t]++;
                    for (int u = t + 1; u < as; u++)
                        idx[u] = idx[u - 1] + 1;
                }
            }
        }
    }
    return nrules;
}

/* Print one pass line (rank 0); returns the bytes all ranks sent.  Phase times are
 * rank 0's; subsets and imbalance come from every rank's counted subsets. */
static uint64_t report_pass(int k, uint64_t ncand, size_t nfreq, double dt, double t_gen,
                            const pass_stats *st, double t_gather)
{
    uint64_t sum[2] = {st->bytes_all, st->counted_all}, most = st->counted_max;
    if (rank == 0) {
        double imbalance = sum[1] ? (double)most * nranks / (double)sum[1] : 1.0;
        printf("{\"pass\":%d,\"candidates\":%llu,\"frequent\":%zu,\"time_s\":%.6f,"
               "\"bytes_sent\":%llu,\"gen_s\":%.6f,\"count_s\":%.6f,\"exchange_s\":%.6f,"
               "\"gather_s\":%.6f,\"subsets\":%llu,\"imbalance\":%.4f}\n",
               k, (unsigned long long)ncand, nfreq, dt, (unsigned long long)sum[0], t_gen, st->t_count,
               st->t_exchange, t_gather, (unsigned long long)sum[1], imbalance);
        fflush(stdout);
    }
    return sum[0];
}

/* prefix mode: the owner of the itemsets that start with item j is a hash of j's
 * original id (so that it does not depend on the support) */
static void set_item_owners(const uint32_t *orig, size_t F)
{
    for (size_t j = 0; j < F; j++) {
        item_owner[j] = owner_of(hash_items(&orig[j], 1));
        item_mine[j] = item_owner[j] == rank;
    }
}

/* Pass 2, prefix mode, several ranks: the owner table of the first items becomes
 * R contiguous ranges of about equal work, so that one scan of a sorted transaction
 * finds each owner's run of first items (no per-item owner test) and the triangle
 * rows a rank counts into are one block.  Work of first item j: its occurrences
 * times (1 + the later items expected beside it), from the pass-1 counts that every
 * rank has (items taken as independent: no extra scan, no collective; a cut that is
 * a little off costs balance, never correctness). */
static void own_pair_ranges(const itab *L1, size_t F, uint64_t ntx)
{
    double *w = xmalloc(sizeof(double) * (F ? F : 1)), later = 0, total = 0;
    for (size_t j = F; j-- > 0;) {
        const double c = (double)L1->counts[j]; /* L1 is sorted: entry j is item j */
        w[j] = c * (1.0 + later / (double)ntx);
        later += c;
        total += w[j];
    }
    pair_cut = xmalloc(sizeof(uint32_t) * ((size_t)nranks + 1));
    pair_cut[0] = 0;
    double sum = 0;
    int o = 0;
    for (size_t j = 0; j < F; j++) {
        /* owner o takes items until its share would pass (o + 1) / R of the work */
        while (o + 1 < nranks && (sum + w[j] / 2) * nranks > total * (o + 1))
            pair_cut[++o] = (uint32_t)j;
        item_owner[j] = o;
        item_mine[j] = o == rank;
        sum += w[j];
    }
    while (o < nranks)
        pair_cut[++o] = (uint32_t)F;
    free(w);
}

/* ----------------------------------------------------------------------- main */
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        MPI_Finalize();
        return rc < 0 ? 0 : 2;
    }
    ship_prefix = o.ship_prefix;

    MPI_Barrier(MPI_COMM_WORLD);
    double t_start = MPI_Wtime(), busy_start = sched_busy_s();

    /* ---- read this rank's part ---- */
    size_t plen = strlen(o.input) + 16;
    char *path = xmalloc(plen), msg[512];
    snprintf(path, plen, "%s.%d", o.input, rank);
    txdb db;
    int ok = read_db(path, &db, msg, sizeof msg) == 0, all_ok;
    if (!ok)
        fprintf(stderr, "vb-hpa: rank %d: %s\n", rank, msg);
    /* one collective: did any rank fail, and the slowest rank's reading time */
    double rd[2] = {ok ? 0.0 : 1.0, MPI_Wtime() - t_start}, rd_max[2];
    MPI_Allreduce(rd, rd_max, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    all_ok = rd_max[0] == 0.0;
    if (!all_ok) {
        MPI_Finalize();
        return 2;
    }
    double read_max = rd_max[1];

    /* ---- pass 1 ---- */
    double t_pass = MPI_Wtime();
    /* two collectives: the largest item id (and occurrences, for the balance), then
     * the item counts with the transaction and occurrence totals appended */
    double t_phase = MPI_Wtime();
    uint64_t mx[3] = {0, db.nitems > 0, db.nitems}, gmx[3];
    for (size_t i = 0; i < db.nitems; i++)
        if (db.items[i] > mx[0])
            mx[0] = db.items[i];
    double t_c = MPI_Wtime() - t_phase;
    t_phase = MPI_Wtime();
    MPI_Allreduce(mx, gmx, 3, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    double t_x = MPI_Wtime() - t_phase;
    const size_t N = gmx[1] ? (size_t)gmx[0] + 1 : 0;

    t_phase = MPI_Wtime();
    uint64_t *lc = xcalloc(N + 2, sizeof(uint64_t)), *gc = xcalloc(N + 2, sizeof(uint64_t));
    for (size_t i = 0; i < db.nitems; i++)
        lc[db.items[i]]++;
    lc[N] = db.n;
    lc[N + 1] = db.nitems;
    t_c += MPI_Wtime() - t_phase;
    t_phase = MPI_Wtime();
    MPI_Allreduce(lc, gc, (int)N + 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    t_x += MPI_Wtime() - t_phase;
    pass_stats st1 = {0, db.nitems, t_c, t_x, 0, gc[N + 1], gmx[2]};
    const uint64_t total_tx = gc[N];
    free(lc);
    if (total_tx > 0xFFFFFFFFull) {
        if (rank == 0)
            fprintf(stderr, "vb-hpa: more than 2^32-1 transactions are not supported\n");
        MPI_Finalize();
        return 2;
    }
    t_phase = MPI_Wtime();

    double mc = ceil(o.support * (double)total_tx - 1e-9);
    const uint32_t min_count = mc < 1 ? 1 : (uint32_t)mc;

    /* frequent items get dense ids 0..F-1 in increasing order of their ids */
    uint32_t *dense = xmalloc(sizeof(uint32_t) * (N ? N : 1));
    uint32_t *orig = xmalloc(sizeof(uint32_t) * (N ? N : 1));
    size_t F = 0;
    for (size_t i = 0; i < N; i++) {
        if (gc[i] >= min_count) {
            orig[F] = (uint32_t)i;
            dense[i] = (uint32_t)F++;
        } else {
            dense[i] = UINT32_MAX;
        }
    }
    itab *levels = xcalloc(KMAX + 2, sizeof(itab));
    itab_init(&levels[1], 1, F);
    for (size_t j = 0; j < F; j++) {
        uint32_t key = (uint32_t)j;
        itab_add(&levels[1], &key, hash_items(&key, 1), (uint32_t)gc[orig[j]]);
    }
    free(gc);
    db_filter(&db, dense, 2);
    free(dense);
    /* owner of the itemsets that start with item j (prefix mode), from its original
     * id so that it does not depend on the support */
    item_owner = xmalloc(sizeof(int) * (F ? F : 1));
    item_mine = xmalloc(F ? F : 1);
    set_item_owners(orig, F);

    uint64_t bytes_total = 0, n_frequent = F;
    int passes = 1, maxlen = F ? 1 : 0;
    double t_gather = MPI_Wtime() - t_phase;
    report_pass(1, N, F, MPI_Wtime() - t_pass, 0, &st1, t_gather);

    /* ---- passes k >= 2 ---- */
    uint8_t *used = xmalloc(F ? F : 1), *pairbits = NULL;
    uint32_t *keep = xmalloc(sizeof(uint32_t) * (F ? F : 1));
    uint8_t *alive = xmalloc(F ? F : 1); /* items still in the transactions */
    memset(alive, 1, F ? F : 1);
    prefilter pf = {NULL, F, levels};
    for (int k = 2; k <= o.max_k && levels[k - 1].n > 0; k++) {
        t_pass = MPI_Wtime();
        memset(used, 0, F ? F : 1);
        ctab cand;
        ctab_init(&cand, k, 1024);
        uint64_t ncand = gen_candidates(&levels[k - 1], k, &cand, used);
        if (ncand == 0) {
            ctab_free(&cand);
            break;
        }
        /* items in no candidate cannot be in any later one either: drop them (a pass
         * over all local items, so only when some item is really dropped) */
        int drop = 0;
        for (size_t j = 0; j < F; j++) {
            drop |= alive[j] && !used[j];
            alive[j] = used[j];
            keep[j] = used[j] ? (uint32_t)j : UINT32_MAX;
        }
        if (drop)
            db_filter(&db, keep, (size_t)k);
        if (k == 2 && cand.tri && ship_prefix && nranks > 1)
            own_pair_ranges(&levels[1], F, total_tx);
        double t_gen = MPI_Wtime() - t_pass;

        pass_stats st = count_pass(&db, k, &cand, &pf, o.batch);
        t_phase = MPI_Wtime();
        gather_frequent(&cand, min_count, &levels[k], &st);
        ctab_free(&cand);
        if (pair_cut) { /* passes 3+: the hash of the first item again */
            free(pair_cut);
            pair_cut = NULL;
            set_item_owners(orig, F);
        }

        if (k == 2 && F > 0 && F <= PAIRBITS_MAX_F && levels[2].n > 0) { /* bit matrix of L(2) */
            pairbits = xcalloc((F * F + 7) / 8, 1);
            for (size_t i = 0; i < levels[2].n; i++) {
                size_t bit = (size_t)levels[2].items[2 * i] * F + levels[2].items[2 * i + 1];
                pairbits[bit >> 3] |= (uint8_t)(1u << (bit & 7));
            }
            pf.pairbits = pairbits;
        }
        passes++;
        t_gather = MPI_Wtime() - t_phase;
        bytes_total += report_pass(k, ncand, levels[k].n, MPI_Wtime() - t_pass, t_gen, &st, t_gather);
        n_frequent += levels[k].n;
        if (levels[k].n > 0)
            maxlen = k;
    }
    if (rank == 0 && maxlen == KMAX && o.max_k == KMAX)
        fprintf(stderr, "vb-hpa: stopped at itemsets of length %d (the compiled-in limit)\n", KMAX);

    /* ---- each rank's share of the mining span on a CPU or waiting for one (not blocked) ---- */
    double busy_now = sched_busy_s(), span = MPI_Wtime() - t_start;
    double share = busy_start < 0 || busy_now < 0 || span <= 0 ? -1.0 : (busy_now - busy_start) / span;
    double share_min, share_sum;
    MPI_Reduce(&share, &share_min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&share, &share_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

    /* ---- rules and output files (rank 0) ---- */
    int out_ok = 1;
    uint64_t nrules = 0;
    if (rank == 0) {
        FILE *rf = NULL;
        if (o.rules_out && !(rf = fopen(o.rules_out, "w"))) {
            fprintf(stderr, "vb-hpa: cannot create %s: %s\n", o.rules_out, strerror(errno));
            out_ok = 0;
        }
        if (out_ok) {
            nrules = make_rules(levels, maxlen, o.confidence, orig, rf);
            if (rf && fclose(rf)) {
                fprintf(stderr, "vb-hpa: cannot write %s: %s\n", o.rules_out, strerror(errno));
                out_ok = 0;
            }
        }
        if (out_ok && o.itemsets_out) {
            FILE *f = fopen(o.itemsets_out, "w");
            if (!f) {
                fprintf(stderr, "vb-hpa: cannot create %s: %s\n", o.itemsets_out, strerror(errno));
                out_ok = 0;
            } else {
                for (int s = 1; s <= maxlen; s++)
                    for (size_t i = 0; i < levels[s].n; i++) {
                        fprintf(f, "%u:", levels[s].counts[i]);
                        for (int t = 0; t < s; t++)
                            fprintf(f, " %u", orig[levels[s].items[i * (size_t)s + (size_t)t]]);
                        fputc('\n', f);
                    }
                if (fclose(f)) {
                    fprintf(stderr, "vb-hpa: cannot write %s: %s\n", o.itemsets_out, strerror(errno));
                    out_ok = 0;
                }
            }
        }
        double total = MPI_Wtime() - t_start;
        if (out_ok) {
            printf("{\"summary\":true,\"transactions\":%llu,\"items\":%zu,\"support\":%.10g,"
                   "\"confidence\":%.10g,\"min_count\":%u,\"ranks\":%d,\"frequent_itemsets\":%llu,"
                   "\"rules\":%llu,\"time_s\":%.6f,\"read_time_s\":%.6f,\"bytes_exchanged\":%llu,"
                   "\"passes\":%d,\"version\":%d",
                   (unsigned long long)total_tx, N, o.support, o.confidence, min_count, nranks,
                   (unsigned long long)n_frequent, (unsigned long long)nrules, total, read_max,
                   (unsigned long long)bytes_total, passes, VERSION);
            if (share_min >= 0)
                printf(",\"cpu_busy_mean\":%.6f,\"cpu_busy_min\":%.6f", share_sum / nranks, share_min);
            printf("}\n");
            fflush(stdout);
        }
    }
    MPI_Bcast(&out_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);

    for (int s = 1; s <= KMAX; s++)
        if (levels[s].slots)
            itab_free(&levels[s]);
    free(levels);
    free(pairbits);
    free(used);
    free(keep);
    free(alive);
    free(item_owner);
    free(item_mine);
    free(orig);
    free(path);
    free(db.items);
    free(db.off);
    MPI_Finalize();
    return out_ok ? 0 : 1;
}
