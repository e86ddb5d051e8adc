/*
 * vb-hpa: Hash Partitioned Apriori (HPA) over MPI.
 *
 *   mpirun -np R vb-hpa --input PREFIX --support S [--confidence C] [--max-k K]
 *                       [--rules-out FILE] [--itemsets-out FILE] [--batch B]
 *
 * Written for virtbench from the published description of HPA (Shintani and
 * Kitsuregawa, 1996) and of Apriori (Agrawal and Srikant, 1994).
 *
 * Rank r reads its share of the transactions from PREFIX.r (text: one transaction
 * per line, item ids separated by blanks; a blank line is an empty transaction).
 *
 *   pass 1   every rank counts items locally, MPI_Allreduce sums the counts.
 *   pass k   candidates C(k) = apriori-gen(L(k-1)) (join + prune).  Each candidate
 *            belongs to rank hash(itemset) % R, which alone keeps a counter for it.
 *            Every rank scans its transactions, enumerates the k-subsets that can
 *            be candidates, and ships each one to its owner: per destination a
 *            buffer of B subsets; when one fills, all ranks swap buffers with
 *            MPI_Alltoall (sizes) + MPI_Alltoallv (subsets).  Owners count in an
 *            open-addressing hash table.  The frequent k-itemsets go to every
 *            rank with MPI_Allgatherv, and the next pass begins.
 *   end      rank 0 derives the rules X\A => A ... (confidence >= C) and prints.
 *
 * Pruning of the subsets a rank enumerates (none changes the result):
 *   - items that are not frequent, or that occur in no candidate of this pass,
 *     are removed from the transactions for good; short transactions are dropped;
 *   - a subset is not extended when a pair of its items is not in L(2) or when its
 *     j-item prefix (2 < j < k) is not in L(j): no candidate can have it.
 *
 * Output (rank 0, stdout): one JSON line per pass, then a summary line:
 *   {"pass":k,"candidates":..,"frequent":..,"time_s":..,"bytes_sent":..}
 *   {"summary":true,"transactions":D,"items":N,"support":S,"confidence":C,
 *    "min_count":..,"ranks":R,"frequent_itemsets":..,"rules":..,"time_s":..,
 *    "read_time_s":..,"bytes_exchanged":..,"passes":..,"version":1}
 * bytes_sent is the volume of candidate subsets shipped between distinct ranks in
 * that pass (all ranks together); the small pass-1 Allreduce and the Allgatherv
 * of frequent itemsets are not included.  N is the largest item id + 1.
 *
 * Exit status: 0 success, 2 bad arguments or input, 3 out of memory.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION 1
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0)
                printf("usage: mpirun -np R vb-hpa --input PREFIX --support S [--confidence C=0.5]\n"
                       "           [--max-k K] [--rules-out FILE] [--itemsets-out FILE] [--batch B]\n"
                       "  rank r reads PREFIX.r; S is a fraction in (0,1]; B subsets per peer per "
                       "exchange\n");
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
typedef struct {
    int k;
    long batch;
    uint32_t *sbuf; /* destination r's queue: sbuf[r * batch * k ...], batch subsets */
    int *scount;    /* items (not subsets) queued per destination */
    uint32_t *rbuf;
    size_t rcap;
    int *sendcnt, *recvcnt, *sdispl, *rdispl, *flags_out, *flags_in;
    uint64_t bytes_sent;
} exchanger;

/* Swap the queued subsets among all ranks and count what arrives.  Returns 1 when
 * every rank has reported that it has nothing more to send. */
static int exchange(exchanger *x, ctab *cand, int local_done)
{
    const int k = x->k;
    for (int r = 0; r < nranks; r++) {
        x->flags_out[2 * r] = x->scount[r];
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
        x->sendcnt[r] = x->scount[r];
        x->sdispl[r] = (int)((size_t)r * (size_t)x->batch * (size_t)k);
    }
    if (total > x->rcap) {
        x->rcap = total;
        x->rbuf = xrealloc(x->rbuf, sizeof(uint32_t) * total);
    }
    MPI_Alltoallv(x->sbuf, x->sendcnt, x->sdispl, MPI_UINT32_T, x->rbuf, x->recvcnt, x->rdispl,
                  MPI_UINT32_T, MPI_COMM_WORLD);
    for (size_t i = 0; i < total; i += (size_t)k)
        ctab_hit(cand, x->rbuf + i, cand->tri ? 0 : hash_items(x->rbuf + i, k));
    for (int r = 0; r < nranks; r++) {
        x->bytes_sent += sizeof(uint32_t) * (uint64_t)x->scount[r];
        x->scount[r] = 0;
    }
    return all_done;
}

/* Count the k-subsets of the local transactions against the owned candidates. */
static uint64_t count_pass(const txdb *db, int k, ctab *cand, const prefilter *pf, long batch)
{
    exchanger x;
    memset(&x, 0, sizeof x);
    x.k = k;
    if ((size_t)batch * (size_t)k * (size_t)nranks > 0x7FFFFFFF) /* MPI int displacements */
        batch = (long)(0x7FFFFFFF / ((size_t)k * (size_t)nranks));
    x.batch = batch;
    if (nranks > 1) {
        x.sbuf = xmalloc(sizeof(uint32_t) * (size_t)batch * (size_t)k * (size_t)nranks);
        x.scount = xcalloc((size_t)nranks, sizeof(int));
        x.sendcnt = xmalloc(sizeof(int) * (size_t)nranks);
        x.recvcnt = xmalloc(sizeof(int) * (size_t)nranks);
        x.sdispl = xmalloc(sizeof(int) * (size_t)nranks);
        x.rdispl = xmalloc(sizeof(int) * (size_t)nranks);
        x.flags_out = xmalloc(sizeof(int) * 2 * (size_t)nranks);
        x.flags_in = xmalloc(sizeof(int) * 2 * (size_t)nranks);
    }
    const int full = (int)(batch * k);
    subenum e;
    size_t ti = 0;
    int active = 0;
    uint32_t pending[KMAX];
    int pending_to = -1;

    for (;;) {
        int paused = 0;
        if (pending_to >= 0) { /* the subset that did not fit last round */
            memcpy(x.sbuf + (size_t)pending_to * (size_t)full + (size_t)x.scount[pending_to], pending, sizeof(uint32_t) * (size_t)k);
            x.scount[pending_to] += k;
            pending_to = -1;
        }
        while (!paused) {
            if (!active) {
                if (ti >= db->n)
                    break;
                size_t a = db->off[ti], b = db->off[ti + 1];
                sub_init(&e, db->items + a, (int)(b - a), k);
                active = 1;
            }
            while (sub_next(&e, pf)) {
                uint64_t h = nranks > 1 || !cand->tri ? hash_items(e.cur, k) : 0;
                int o = nranks > 1 ? owner_of(h) : 0;
                if (o == rank) {
                    ctab_hit(cand, e.cur, h);
                } else if (x.scount[o] + k > full) {
                    memcpy(pending, e.cur, sizeof(uint32_t) * (size_t)k);
                    pending_to = o;
                    paused = 1;
                    break;
                } else {
                    memcpy(x.sbuf + (size_t)o * (size_t)full + (size_t)x.scount[o], e.cur, sizeof(uint32_t) * (size_t)k);
                    x.scount[o] += k;
                }
            }
            if (!paused) {
                active = 0;
                ti++;
            }
        }
        if (nranks == 1)
            break;
        if (exchange(&x, cand, !paused))
            break;
    }
    if (nranks > 1) {
        free(x.sbuf);
        free(x.scount);
        free(x.sendcnt);
        free(x.recvcnt);
        free(x.sdispl);
        free(x.rdispl);
        free(x.flags_out);
        free(x.flags_in);
        free(x.rbuf);
    }
    return x.bytes_sent;
}

/* Gather the frequent itemsets of every owner into a sorted L(k) on all ranks. */
static void gather_frequent(const ctab *cand, uint32_t min_count, itab *out)
{
    const int k = cand->k, w = k + 1;
    size_t nf = 0, cap = 1024;
    uint32_t *mine = xmalloc(sizeof(uint32_t) * cap * (size_t)w);
    if (cand->tri) { /* pairs: every (i, j) owned by this rank */
        for (uint32_t i = 0; i + 1 < cand->F; i++)
            for (uint32_t j = i + 1; j < cand->F; j++) {
                uint32_t c = cand->tri[tri_index(i, j, cand->F)], key[2] = {i, j};
                if (c < min_count || (nranks > 1 && owner_of(hash_items(key, 2)) != rank))
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
    int cnt = (int)(nf * (size_t)w);
    int *cnts = xmalloc(sizeof(int) * (size_t)nranks), *displs = xmalloc(sizeof(int) * (size_t)nranks);
    MPI_Allgather(&cnt, 1, MPI_INT, cnts, 1, MPI_INT, MPI_COMM_WORLD);
    size_t total = 0;
    for (int r = 0; r < nranks; r++) {
        displs[r] = (int)total;
        total += (size_t)cnts[r];
    }
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
                if (nranks == 1 || owner_of(h) == rank)
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

    MPI_Barrier(MPI_COMM_WORLD);
    double t_start = MPI_Wtime();

    /* ---- read this rank's part ---- */
    size_t plen = strlen(o.input) + 16;
    char *path = xmalloc(plen), msg[512];
    snprintf(path, plen, "%s.%d", o.input, rank);
    txdb db;
    int ok = read_db(path, &db, msg, sizeof msg) == 0, all_ok;
    if (!ok)
        fprintf(stderr, "vb-hpa: rank %d: %s\n", rank, msg);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        MPI_Finalize();
        return 2;
    }
    double t_read = MPI_Wtime() - t_start, read_max;
    MPI_Allreduce(&t_read, &read_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    /* ---- pass 1 ---- */
    double t_pass = MPI_Wtime();
    uint64_t local_n = db.n, total_tx;
    MPI_Allreduce(&local_n, &total_tx, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (total_tx > 0xFFFFFFFFull) {
        if (rank == 0)
            fprintf(stderr, "vb-hpa: more than 2^32-1 transactions are not supported\n");
        MPI_Finalize();
        return 2;
    }
    uint32_t local_max = 0;
    int local_any = db.nitems > 0, any;
    for (size_t i = 0; i < db.nitems; i++)
        if (db.items[i] > local_max)
            local_max = db.items[i];
    uint32_t gmax;
    MPI_Allreduce(&local_max, &gmax, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&local_any, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const size_t N = any ? (size_t)gmax + 1 : 0;

    uint64_t *lc = xcalloc(N, sizeof(uint64_t)), *gc = xcalloc(N, sizeof(uint64_t));
    for (size_t i = 0; i < db.nitems; i++)
        lc[db.items[i]]++;
    MPI_Allreduce(lc, gc, (int)N, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    free(lc);

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

    uint64_t bytes_total = 0, n_frequent = F;
    int passes = 1, maxlen = F ? 1 : 0;
    double dt = MPI_Wtime() - t_pass;
    if (rank == 0) {
        printf("{\"pass\":1,\"candidates\":%zu,\"frequent\":%zu,\"time_s\":%.6f,\"bytes_sent\":0}\n",
               N, F, dt);
        fflush(stdout);
    }

    /* ---- passes k >= 2 ---- */
    uint8_t *used = xmalloc(F ? F : 1), *pairbits = NULL;
    uint32_t *keep = xmalloc(sizeof(uint32_t) * (F ? F : 1));
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
        /* items in no candidate cannot be in any later one either: drop them */
        for (size_t j = 0; j < F; j++)
            keep[j] = used[j] ? (uint32_t)j : UINT32_MAX;
        db_filter(&db, keep, (size_t)k);

        uint64_t sent = count_pass(&db, k, &cand, &pf, o.batch), sent_all;
        MPI_Allreduce(&sent, &sent_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        gather_frequent(&cand, min_count, &levels[k]);
        ctab_free(&cand);

        if (k == 2 && F > 0 && F <= PAIRBITS_MAX_F && levels[2].n > 0) { /* bit matrix of L(2) */
            pairbits = xcalloc((F * F + 7) / 8, 1);
            for (size_t i = 0; i < levels[2].n; i++) {
                size_t bit = (size_t)levels[2].items[2 * i] * F + levels[2].items[2 * i + 1];
                pairbits[bit >> 3] |= (uint8_t)(1u << (bit & 7));
            }
            pf.pairbits = pairbits;
        }
        passes++;
        bytes_total += sent_all;
        n_frequent += levels[k].n;
        if (levels[k].n > 0)
            maxlen = k;
        dt = MPI_Wtime() - t_pass;
        if (rank == 0) {
            printf("{\"pass\":%d,\"candidates\":%llu,\"frequent\":%zu,\"time_s\":%.6f,"
                   "\"bytes_sent\":%llu}\n",
                   k, (unsigned long long)ncand, levels[k].n, dt, (unsigned long long)sent_all);
            fflush(stdout);
        }
    }
    if (rank == 0 && maxlen == KMAX && o.max_k == KMAX)
        fprintf(stderr, "vb-hpa: stopped at itemsets of length %d (the compiled-in limit)\n", KMAX);

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
                   "\"passes\":%d,\"version\":%d}\n",
                   (unsigned long long)total_tx, N, o.support, o.confidence, min_count, nranks,
                   (unsigned long long)n_frequent, (unsigned long long)nrules, total, read_max,
                   (unsigned long long)bytes_total, passes, VERSION);
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
    free(orig);
    free(path);
    free(db.items);
    free(db.off);
    MPI_Finalize();
    return out_ok ? 0 : 1;
}
