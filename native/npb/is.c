/*
 * IS: integer sort (RNR-94-007 section 2.6, as refined in NPB 2).
 *
 * N = 2^k keys in [0, B_max), B_max = 2^m: key_i = floor(B_max/4 * (r_{4i+1} + r_{4i+2}
 * + r_{4i+3} + r_{4i+4})) from the NPB generator (seed 314159265, a = 5^13).  Ten
 * ranking passes (it = 1..10), each first setting key_it = it and key_{it+10} =
 * B_max - it, then computing the rank of every key (the number of keys <= it, by
 * counting), and checking the ranks of five published test keys (partial
 * verification, see classes.h).  After the last pass the keys are placed by their
 * ranks and must come out in non-decreasing order (full verification).  Verified
 * when all 5 x 10 partial checks and the full check pass.
 *
 * Decomposition: each rank generates a contiguous block of keys (jumping ahead in
 * the random stream); per pass, keys are counted into 1024 buckets of the key range,
 * the global bucket counts are allreduced, buckets are split into contiguous key
 * ranges with about N/ranks keys each, keys are exchanged with MPI_Alltoallv, and
 * each rank ranks its key range by counting.  Rank count: a power of two (as in the
 * NPB reference), at most 1024.  One thread per rank.
 *
 * Operation count (NPB's Mop/s, keys ranked): 10 * N.
 * Timed section: the ten ranking passes (not key generation, not full verification);
 * one untimed pass runs first.
 */
#include "classes.h"
#include "npb.h"
#include "randlc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IS_BUCKET_LOG2 10

static int is_check(char cls, int nranks, char *msg, size_t len)
{
    (void)cls;
    if (!npb_is_pow2(nranks)) {
        snprintf(msg, len, "is needs a power-of-two number of ranks, got %d", nranks);
        return 2;
    }
    if (nranks > (1 << IS_BUCKET_LOG2)) {
        snprintf(msg, len, "is can use at most %d ranks, got %d", 1 << IS_BUCKET_LOG2, nranks);
        return 2;
    }
    return 0;
}

static double is_mem(char cls, int nranks)
{
    const struct is_class *p = is_class_get(cls);
    double nloc = (double)(1L << p->total_keys_log2) / nranks;
    return 4.0 * nloc * 7.0 + 4.0 * (double)(1L << p->max_key_log2) + 1024.0 * 1024;
}

struct is {
    MPI_Comm comm;
    int rank, nranks;
    const struct is_class *p;
    long ntotal, nloc;
    int max_key, nb, shift;
    int *key, *sbuf, *rbuf;
    long rcap;
    int *bcount, *gcount, *owner, *bptr;
    int *scount, *rcount, *sdispl, *rdispl;
    int *kcount;            /* counts then inclusive prefix over [lo, hi) */
    int lo, hi;             /* this rank's key range in the last pass */
    long below;             /* keys smaller than lo, all ranks */
    long nrecv;
    long pv[IS_TESTS];      /* test key values */
    long partial_passed;
};

static void rank_pass(struct is *s, int it)
{
    const struct is_class *p = s->p;
    if (s->rank == 0) { /* global indices it and it+10 live on rank 0 */
        s->key[it] = it;
        s->key[it + IS_ITERATIONS] = s->max_key - it;
    }
    memset(s->bcount, 0, sizeof(int) * s->nb);
    for (long i = 0; i < s->nloc; i++)
        s->bcount[s->key[i] >> s->shift]++;
    MPI_Allreduce(s->bcount, s->gcount, s->nb, MPI_INT, MPI_SUM, s->comm);

    /* contiguous bucket ranges per rank, about ntotal/nranks keys each */
    long cum = 0;
    for (int b = 0; b < s->nb; b++) {
        long o = (long)((cum + s->gcount[b] / 2.0) * s->nranks / (double)s->ntotal);
        s->owner[b] = (int)(o < s->nranks ? o : s->nranks - 1);
        cum += s->gcount[b];
    }
    memset(s->scount, 0, sizeof(int) * s->nranks);
    int pos = 0;
    for (int b = 0; b < s->nb; b++) {
        s->bptr[b] = pos;
        pos += s->bcount[b];
        s->scount[s->owner[b]] += s->bcount[b];
    }
    for (long i = 0; i < s->nloc; i++) {
        int k = s->key[i];
        s->sbuf[s->bptr[k >> s->shift]++] = k;
    }
    MPI_Alltoall(s->scount, 1, MPI_INT, s->rcount, 1, MPI_INT, s->comm);
    long nrecv = 0;
    for (int d = 0; d < s->nranks; d++) {
        s->sdispl[d] = d ? s->sdispl[d - 1] + s->scount[d - 1] : 0;
        s->rdispl[d] = (int)nrecv;
        nrecv += s->rcount[d];
    }
    if (nrecv > s->rcap) { /* rare: skewed split; grow once */
        free(s->rbuf);
        s->rcap = nrecv + nrecv / 4;
        s->rbuf = npb_alloc(sizeof(int) * s->rcap, "is receive buffer");
    }
    MPI_Alltoallv(s->sbuf, s->scount, s->sdispl, MPI_INT, s->rbuf, s->rcount, s->rdispl, MPI_INT,
                  s->comm);
    s->nrecv = nrecv;

    /* my key range and the keys below it */
    int bfirst = -1, blast = -1;
    long below = 0;
    for (int b = 0; b < s->nb; b++) {
        if (s->owner[b] < s->rank)
            below += s->gcount[b];
        if (s->owner[b] == s->rank) {
            if (bfirst < 0)
                bfirst = b;
            blast = b;
        }
    }
    s->below = below;
    s->lo = bfirst < 0 ? 0 : bfirst << s->shift;
    s->hi = bfirst < 0 ? 0 : (blast + 1) << s->shift;
    const int range = s->hi - s->lo;
    memset(s->kcount, 0, sizeof(int) * (range > 0 ? range : 1));
    for (long i = 0; i < nrecv; i++)
        s->kcount[s->rbuf[i] - s->lo]++;
    for (int k = 1; k < range; k++)
        s->kcount[k] += s->kcount[k - 1];

    /* partial verification: keys smaller than each test key */
    for (int t = 0; t < IS_TESTS; t++) {
        long k = s->pv[t];
        if (k > 0 && k - 1 >= s->lo && k - 1 < s->hi) {
            long key_rank = below + s->kcount[k - 1 - s->lo];
            long expect = p->test_rank[t] + (long)p->sign[t] * it + p->offset[t];
            if (key_rank == expect)
                s->partial_passed++;
        }
    }
}

/* place the last pass's keys by their ranks; 1 when globally sorted */
static int full_verify(struct is *s)
{
    const long n = s->nrecv;
    int *sorted = npb_alloc(sizeof(int) * (n ? n : 1), "is sorted keys");
    for (long i = n - 1; i >= 0; i--) {
        int k = s->rbuf[i];
        sorted[--s->kcount[k - s->lo]] = k;
    }
    long bad = 0;
    for (long i = 1; i < n; i++)
        bad += sorted[i - 1] > sorted[i];
    /* order across ranks and the total count */
    long mine[3] = {n, n ? sorted[0] : 0, n ? sorted[n - 1] : 0};
    long *all = npb_alloc(sizeof(long) * 3 * s->nranks, "is ends");
    MPI_Allgather(mine, 3, MPI_LONG, all, 3, MPI_LONG, s->comm);
    long total = 0, prev = -1;
    for (int d = 0; d < s->nranks; d++) {
        total += all[3 * d];
        if (all[3 * d] > 0) {
            bad += prev > all[3 * d + 1];
            prev = all[3 * d + 2];
        }
    }
    free(all);
    free(sorted);
    long gbad = 0;
    MPI_Allreduce(&bad, &gbad, 1, MPI_LONG, MPI_SUM, s->comm);
    return gbad == 0 && total == s->ntotal;
}

static void is_run(const struct npb_ctx *ctx, struct npb_result *res)
{
    struct is s;
    memset(&s, 0, sizeof s);
    s.comm = ctx->comm;
    s.rank = ctx->rank;
    s.nranks = ctx->nranks;
    s.p = is_class_get(ctx->cls);
    s.ntotal = 1L << s.p->total_keys_log2;
    s.nloc = s.ntotal / s.nranks;
    s.max_key = 1 << s.p->max_key_log2;
    int blog = s.p->max_key_log2 < IS_BUCKET_LOG2 ? s.p->max_key_log2 : IS_BUCKET_LOG2;
    s.nb = 1 << blog;
    s.shift = s.p->max_key_log2 - blog;
    s.key = npb_alloc(sizeof(int) * s.nloc, "is keys");
    s.sbuf = npb_alloc(sizeof(int) * s.nloc, "is send buffer");
    s.rcap = 2 * s.nloc + 1024;
    s.rbuf = npb_alloc(sizeof(int) * s.rcap, "is receive buffer");
    s.kcount = npb_alloc(sizeof(int) * s.max_key, "is counts");
    s.bcount = npb_alloc(sizeof(int) * s.nb, "is buckets");
    s.gcount = npb_alloc(sizeof(int) * s.nb, "is buckets");
    s.owner = npb_alloc(sizeof(int) * s.nb, "is buckets");
    s.bptr = npb_alloc(sizeof(int) * s.nb, "is buckets");
    s.scount = npb_alloc(sizeof(int) * s.nranks, "is counts");
    s.rcount = npb_alloc(sizeof(int) * s.nranks, "is counts");
    s.sdispl = npb_alloc(sizeof(int) * s.nranks, "is counts");
    s.rdispl = npb_alloc(sizeof(int) * s.nranks, "is counts");

    /* keys: this rank's block of the stream, four deviates per key */
    const long g0 = s.nloc * s.rank;
    uint64_t x = lcg_skip(IS_SEED + (ctx->perturb ? 2 : 0), NPB_A, 4 * (uint64_t)g0);
    const double k4 = (double)(s.max_key / 4);
    for (long i = 0; i < s.nloc; i++) {
        double sum = randlc(&x, NPB_A);
        sum += randlc(&x, NPB_A);
        sum += randlc(&x, NPB_A);
        sum += randlc(&x, NPB_A);
        s.key[i] = (int)(k4 * sum);
    }
    /* the test keys' values (their positions are never modified) */
    long pv[IS_TESTS];
    for (int t = 0; t < IS_TESTS; t++) {
        long gi = s.p->test_index[t];
        pv[t] = (gi >= g0 && gi < g0 + s.nloc) ? s.key[gi - g0] : -1;
    }
    MPI_Allreduce(pv, s.pv, IS_TESTS, MPI_LONG, MPI_MAX, s.comm);

    rank_pass(&s, 1); /* untimed warm-up */
    s.partial_passed = 0;

    MPI_Barrier(ctx->comm);
    double t0 = npb_wtime();
    for (int it = 1; it <= IS_ITERATIONS; it++)
        rank_pass(&s, it);
    double t = npb_wtime() - t0;
    res->time_s = npb_time_max(ctx->comm, t);

    int full = full_verify(&s);
    long partial = 0;
    MPI_Allreduce(&s.partial_passed, &partial, 1, MPI_LONG, MPI_SUM, s.comm);

    res->mops = res->time_s > 0 ? (double)IS_ITERATIONS * s.ntotal / res->time_s / 1e6 : 0.0;
    res->iterations = IS_ITERATIONS;
    snprintf(res->size, sizeof res->size, "%ld", s.ntotal);
    npb_add_check_exact(res, "partial_ranks", (double)partial, (double)IS_TESTS * IS_ITERATIONS);
    npb_add_check_exact(res, "full_sort", (double)full, 1.0);

    free(s.key);
    free(s.sbuf);
    free(s.rbuf);
    free(s.kcount);
    free(s.bcount);
    free(s.gcount);
    free(s.owner);
    free(s.bptr);
    free(s.scount);
    free(s.rcount);
    free(s.sdispl);
    free(s.rdispl);
}

const struct npb_kernel npb_is = {"is", 0, is_check, is_mem, is_run};
