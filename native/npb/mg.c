/*
 * MG: V-cycle multigrid for the 3-D Poisson equation on an n^3 periodic grid
 * (RNR-94-007 section 2.4).
 *
 * v is zero except at 20 points: +1 at the ten grid points holding the largest and -1
 * at the ten holding the smallest of n^3 NPB deviates (seed 314159265, a = 5^13) laid
 * out over the grid with x fastest, then y, then z.  Starting from u = 0:
 *     r = v - A u;   nit times: { u = u + M r;  r = v - A u };   report ||r||_2 / sqrt(n^3)
 * with the V-cycle M^k (k = log2 n down to 1, the coarsest grid 2^3):
 *     k > 1: r_{k-1} = P r_k;  z_{k-1} = M^{k-1} r_{k-1};  z_k = Q z_{k-1};
 *            r_k = r_k - A z_k;  z_k = z_k + S r_k
 *     k = 1: z_1 = S r_1
 * A, S and the restriction P are 27-point operators with one coefficient per
 * neighbour distance (centre, face, edge, corner):
 *     A = (-8/3, 0, 1/6, 1/12)
 *     S = (-3/8, 1/32, -1/64, 0) for classes S, W, A;  (-3/17, 1/33, -1/61, 0) for B, C
 *     P = (1/2, 1/4, 1/8, 1/16)
 * and Q is trilinear interpolation (weights 1, 1/2, 1/4, 1/8).  Coarse point c sits on
 * fine point 2c+1 (0-based), periodic in every direction.  One untimed cycle warms up
 * first.  Verification: ||r|| against the published value, relative error <= 1e-8.
 *
 * Decomposition: z-slabs.  Levels with at least two planes per rank stay distributed
 * (ghost planes exchanged with neighbours); coarser levels are gathered once
 * (MPI_Allgather of the restricted planes) and computed redundantly on every rank.
 * Rank count: a power of two with n >= 2 * ranks.
 *
 * Operation count (NPB's Mop/s): 58 * nit * n^3.
 * Timed section: initial residual, nit cycles with residuals, final norm.
 */
#include "classes.h"
#include "npb.h"
#include "randlc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MG_CHARGES 10

static int mg_check(char cls, int nranks, char *msg, size_t len)
{
    const struct mg_class *p = mg_class_get(cls);
    if (!npb_is_pow2(nranks)) {
        snprintf(msg, len, "mg needs a power-of-two number of ranks, got %d", nranks);
        return 2;
    }
    if (2 * nranks > p->n) {
        snprintf(msg, len, "mg class %c (%d^3 grid) can use at most %d ranks, got %d", cls, p->n,
                 p->n / 2, nranks);
        return 2;
    }
    return 0;
}

static double mg_mem(char cls, int nranks)
{
    const struct mg_class *p = mg_class_get(cls);
    double n = p->n;
    double top = (n + 2) * (n + 2) * (n / nranks + 2) * 8.0;
    return top * (3.0 + 2.0 / 7.0 * 1.3) + 1024.0 * 1024.0;
}

struct level {
    int n;        /* grid points per dimension */
    int dist;     /* planes distributed over ranks (else every rank holds all) */
    int nzl, z0;  /* local planes and the global index of the first */
    long sx;      /* n + 2 */
    long plane;   /* (n + 2)^2 */
    size_t total; /* plane * (nzl + 2) */
    double *u, *r;
};

struct mg {
    MPI_Comm comm;
    int rank, nranks, lt;
    struct level *lv; /* lv[1..lt] */
    double *v;        /* right-hand side at the top level */
    double a[4], c[4];
};

#define AT(L, arr, i, j, k) ((arr)[(size_t)(k) * (L)->plane + (size_t)(j) * (L)->sx + (size_t)(i)])

static int big(const struct level *L) { return (long)L->nzl * L->n * L->n >= 32768; }

/*
 * Periodic borders.  The i and j borders of a plane are copies within that plane, so every
 * operator below fills them right after computing the plane, while it is still in cache,
 * instead of in a separate pass over the array; only the z borders (ghost planes, from the
 * neighbouring ranks when the level is distributed) are left for comm3_z.
 */
static void borders_ij(const struct level *L, double *a, int k)
{
    const int n = L->n;
    double *p = a + (size_t)k * L->plane;
    for (int j = 1; j <= n; j++) {
        double *row = p + (size_t)j * L->sx;
        row[0] = row[n];
        row[n + 1] = row[1];
    }
    memcpy(p, p + (size_t)n * L->sx, sizeof(double) * L->sx);
    memcpy(p + (size_t)(n + 1) * L->sx, p + L->sx, sizeof(double) * L->sx);
}

static void comm3_z(const struct mg *g, const struct level *L, double *a)
{
    const size_t last = (size_t)L->nzl * L->plane, ghost_hi = (size_t)(L->nzl + 1) * L->plane;
    if (!L->dist || g->nranks == 1) {
        memcpy(a, a + last, sizeof(double) * L->plane);
        memcpy(a + ghost_hi, a + L->plane, sizeof(double) * L->plane);
        return;
    }
    /* both planes in flight at once (with two ranks they go to the same peer) */
    int up = (g->rank + 1) % g->nranks, down = (g->rank + g->nranks - 1) % g->nranks;
    MPI_Request rq[4];
    MPI_Irecv(a, (int)L->plane, MPI_DOUBLE, down, 1, g->comm, &rq[0]);
    MPI_Irecv(a + ghost_hi, (int)L->plane, MPI_DOUBLE, up, 2, g->comm, &rq[1]);
    MPI_Isend(a + last, (int)L->plane, MPI_DOUBLE, up, 1, g->comm, &rq[2]);
    MPI_Isend(a + L->plane, (int)L->plane, MPI_DOUBLE, down, 2, g->comm, &rq[3]);
    MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
}

/* all periodic borders of a level array (for arrays not made by the operators below) */
static void comm3(const struct mg *g, const struct level *L, double *a)
{
#pragma omp parallel for if (big(L))
    for (int k = 1; k <= L->nzl; k++)
        borders_ij(L, a, k);
    comm3_z(g, L, a);
}

/*
 * out = base + s0 x + s1 faces(x) + s2 edges(x) + s3 corners(x) on the interior of plane k:
 * resid (out = v - A u: coefficients -A, base v) and psinv (u = u + S r: coefficients S,
 * base u).  Per row, the sums of the four neighbours in the j-k plane that share a face
 * (x1) and an edge (x2) with the row are formed once (the NPB reference's partial sums):
 * a point's edge sum is then x2[i] + x1[i-1] + x1[i+1], its corner sum x2[i-1] + x2[i+1].
 * A has no face term and S no corner term (0 for every class), as in the reference those
 * terms are skipped when their coefficient is zero.  base may equal out (each point reads
 * only its own base value); x must not.  x1, x2: n + 2 doubles of scratch.
 */
static void stencil_plane(const struct level *L, const double *s, const double *x,
                          const double *base, double *out, int k, double *x1, double *x2)
{
    const int n = L->n;
    const long sx = L->sx, pl = L->plane;
    const double s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
    for (int j = 1; j <= n; j++) {
        const double *c = &AT(L, x, 0, j, k);
        const double *b = &AT(L, base, 0, j, k);
        double *o = &AT(L, out, 0, j, k);
#pragma omp simd
        for (int i = 0; i <= n + 1; i++) {
            x1[i] = c[i - sx] + c[i + sx] + c[i - pl] + c[i + pl];
            x2[i] = c[i - sx - pl] + c[i + sx - pl] + c[i - sx + pl] + c[i + sx + pl];
        }
        if (s1 == 0.0) {
#pragma omp simd
            for (int i = 1; i <= n; i++)
                o[i] = b[i] + s0 * c[i] + s2 * (x2[i] + x1[i - 1] + x1[i + 1]) +
                       s3 * (x2[i - 1] + x2[i + 1]);
        } else if (s3 == 0.0) {
#pragma omp simd
            for (int i = 1; i <= n; i++)
                o[i] = b[i] + s0 * c[i] + s1 * (c[i - 1] + c[i + 1] + x1[i]) +
                       s2 * (x2[i] + x1[i - 1] + x1[i + 1]);
        } else {
#pragma omp simd
            for (int i = 1; i <= n; i++)
                o[i] = b[i] + s0 * c[i] + s1 * (c[i - 1] + c[i + 1] + x1[i]) +
                       s2 * (x2[i] + x1[i - 1] + x1[i + 1]) + s3 * (x2[i - 1] + x2[i + 1]);
        }
    }
    borders_ij(L, out, k);
}

static void stencil(const struct mg *g, const struct level *L, const double *s, const double *x,
                    const double *base, double *out)
{
    const int n = L->n;
#pragma omp parallel if (big(L))
    {
        double x1[n + 2], x2[n + 2];
#pragma omp for
        for (int k = 1; k <= L->nzl; k++)
            stencil_plane(L, s, x, base, out, k, x1, x2);
    }
    comm3_z(g, L, out);
}

static void resid(const struct mg *g, const struct level *L, const double *u, const double *v,
                  double *r)
{
    const double na[4] = {-g->a[0], -g->a[1], -g->a[2], -g->a[3]};
    stencil(g, L, na, u, v, r);
}

static void psinv(const struct mg *g, const struct level *L, const double *r, double *u)
{
    stencil(g, L, g->c, r, u, u);
}

/*
 * Restriction of coarse plane kc (local) = global plane gc of C from F; the fine centre
 * row of coarse row jc is fine row 2 jc on fine plane 2 gc + 2 - F->z0.  As in stencil,
 * x1/y1 hold the face and edge neighbour sums in the j-k plane for every fine point of the
 * row, so each coarse point adds three of each.  x1, y1: 2 nc + 2 doubles of scratch.
 */
static void rprj3_plane(const struct level *F, const double *rf, const struct level *C,
                        double *rc, int gc, double *x1, double *y1)
{
    const int nc = C->n;
    const long fx = F->sx, fp = F->plane;
    const int kc = gc - C->z0 + 1;
    const int kf = 2 * gc + 2 - F->z0;
    for (int jc = 1; jc <= nc; jc++) {
        const double *c = &AT(F, rf, 0, 2 * jc, kf);
#pragma omp simd
        for (int i = 0; i <= 2 * nc + 1; i++) {
            x1[i] = c[i - fx] + c[i + fx] + c[i - fp] + c[i + fp];
            y1[i] = c[i - fx - fp] + c[i + fx - fp] + c[i - fx + fp] + c[i + fx + fp];
        }
        double *o = &AT(C, rc, 0, jc, kc);
#pragma omp simd
        for (int ic = 1; ic <= nc; ic++) {
            const int i = 2 * ic;
            o[ic] = 0.5 * c[i] + 0.25 * (c[i - 1] + c[i + 1] + x1[i]) +
                    0.125 * (x1[i - 1] + x1[i + 1] + y1[i]) + 0.0625 * (y1[i - 1] + y1[i + 1]);
        }
    }
    borders_ij(C, rc, kc);
}

/* coarse planes [gc0, gc0 + cnt) (global) of C from F */
static void rprj3_planes(const struct level *F, const double *rf, const struct level *C,
                         double *rc, int gc0, int cnt)
{
    const int nc = C->n;
#pragma omp parallel if (big(C))
    {
        double x1[2 * nc + 2], y1[2 * nc + 2];
#pragma omp for
        for (int q = 0; q < cnt; q++)
            rprj3_plane(F, rf, C, rc, gc0 + q, x1, y1);
    }
}

static void rprj3(const struct mg *g, const struct level *F, const double *rf,
                  const struct level *C, double *rc)
{
    if (C->dist || !F->dist || g->nranks == 1) {
        /* same ownership pattern: every rank computes its own coarse planes */
        rprj3_planes(F, rf, C, rc, C->z0, C->nzl);
    } else {
        /* fine distributed, coarse replicated: compute own share (with its i-j borders),
         * then gather all planes */
        int share = F->nzl / 2;
        rprj3_planes(F, rf, C, rc, F->z0 / 2, share);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rc + C->plane, (int)(share * C->plane),
                      MPI_DOUBLE, g->comm);
    }
    comm3_z(g, C, rc);
}

/* one fine row from its coarse-row values t[0..nc] (fine 2ic on coarse ic, 2ic-1 between) */
static void interp_row(int nc, const double *t, double *o, int add)
{
    if (add) {
#pragma omp simd
        for (int ic = 1; ic <= nc; ic++) {
            o[2 * ic - 1] += 0.5 * (t[ic - 1] + t[ic]);
            o[2 * ic] += t[ic];
        }
    } else {
#pragma omp simd
        for (int ic = 1; ic <= nc; ic++) {
            o[2 * ic - 1] = 0.5 * (t[ic - 1] + t[ic]);
            o[2 * ic] = t[ic];
        }
    }
}

/*
 * uf (+)= Q uc, trilinear interpolation; add = 0 stores instead (uf was zero: saves
 * clearing it).  Fine planes 2m-1, 2m (local) lie between coarse planes lo, lo+1 and on
 * lo+1; fine rows 2jc-1, 2jc between coarse rows jc-1, jc and on jc.  Each pair of coarse
 * rows is read once for the four fine rows it feeds (like the reference's z1/z2/z3).
 */
static void interp(const struct mg *g, const struct level *C, const double *uc,
                   const struct level *F, double *uf, int add)
{
    const int nc = C->n;
#pragma omp parallel if (big(F))
    {
        double tb[nc + 1], te[nc + 1], tc[nc + 1];
#pragma omp for
        for (int m = 1; m <= F->nzl / 2; m++) {
            const int lo = F->z0 / 2 + m - 1 - C->z0;
            for (int jc = 1; jc <= nc; jc++) {
                const double *A = &AT(C, uc, 0, jc - 1, lo), *B = &AT(C, uc, 0, jc, lo);
                const double *Cr = &AT(C, uc, 0, jc - 1, lo + 1), *D = &AT(C, uc, 0, jc, lo + 1);
#pragma omp simd
                for (int ic = 0; ic <= nc; ic++) {
                    te[ic] = 0.5 * (Cr[ic] + D[ic]);
                    tb[ic] = 0.5 * (B[ic] + D[ic]);
                    tc[ic] = 0.25 * (A[ic] + B[ic] + Cr[ic] + D[ic]);
                }
                interp_row(nc, D, &AT(F, uf, 0, 2 * jc, 2 * m), add);
                interp_row(nc, te, &AT(F, uf, 0, 2 * jc - 1, 2 * m), add);
                interp_row(nc, tb, &AT(F, uf, 0, 2 * jc, 2 * m - 1), add);
                interp_row(nc, tc, &AT(F, uf, 0, 2 * jc - 1, 2 * m - 1), add);
            }
            borders_ij(F, uf, 2 * m - 1);
            borders_ij(F, uf, 2 * m);
        }
    }
    comm3_z(g, F, uf);
}

static void zero(const struct level *L, double *a)
{
    memset(a, 0, sizeof(double) * L->total);
}

/* one V-cycle: u += M r at the top level (r = v - A u on entry) */
static void mg3p(struct mg *g)
{
    const int lt = g->lt;
    struct level *lv = g->lv;
    for (int k = lt; k >= 2; k--)
        rprj3(g, &lv[k], lv[k].r, &lv[k - 1], lv[k - 1].r);
    zero(&lv[1], lv[1].u);
    psinv(g, &lv[1], lv[1].r, lv[1].u);
    for (int k = 2; k < lt; k++) {
        interp(g, &lv[k - 1], lv[k - 1].u, &lv[k], lv[k].u, 0); /* u_k = Q u_{k-1} */
        resid(g, &lv[k], lv[k].u, lv[k].r, lv[k].r);
        psinv(g, &lv[k], lv[k].r, lv[k].u);
    }
    interp(g, &lv[lt - 1], lv[lt - 1].u, &lv[lt], lv[lt].u, 1);
    resid(g, &lv[lt], lv[lt].u, g->v, lv[lt].r);
    psinv(g, &lv[lt], lv[lt].r, lv[lt].u);
}

struct cand {
    double val;
    long pos; /* global linear index */
};

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->val != y->val)
        return x->val < y->val ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* keep the m smallest (dir -1) or largest (dir +1) in a sorted-insertion list */
static void keep(struct cand *list, int *cnt, int m, double val, long pos, int dir)
{
    int c = *cnt;
    if (c == m) {
        double worst = list[c - 1].val;
        if (dir > 0 ? !(val > worst) : !(val < worst))
            return;
        c--;
    }
    int i = c;
    while (i > 0 && (dir > 0 ? val > list[i - 1].val : val < list[i - 1].val)) {
        list[i] = list[i - 1];
        i--;
    }
    list[i].val = val;
    list[i].pos = pos;
    *cnt = c + 1;
}

/* the right-hand side: +-1 at the extreme deviates of the grid */
static void zran3(struct mg *g, int perturb)
{
    const struct level *L = &g->lv[g->lt];
    const int n = L->n;
    const uint64_t an = lcg_pow(NPB_A, (uint64_t)n);
    const uint64_t ann = lcg_pow(NPB_A, (uint64_t)n * n);
    struct cand hi[MG_CHARGES], lo[MG_CHARGES];
    int nhi = 0, nlo = 0;
    double *row = npb_alloc(sizeof(double) * n, "mg row");
    zero(L, g->v);
    uint64_t xplane = lcg_skip(MG_SEED, NPB_A, (uint64_t)n * n * (uint64_t)L->z0);
    for (int k = 1; k <= L->nzl; k++) {
        uint64_t xrow = xplane;
        for (int j = 1; j <= n; j++) {
            uint64_t x = xrow;
            vranlc(n, &x, NPB_A, row);
            long base = ((long)(L->z0 + k - 1) * n + (j - 1)) * n;
            for (int i = 0; i < n; i++) {
                keep(hi, &nhi, MG_CHARGES, row[i], base + i, 1);
                keep(lo, &nlo, MG_CHARGES, row[i], base + i, -1);
            }
            xrow = lcg_mul(an, xrow);
        }
        xplane = lcg_mul(ann, xplane);
    }
    free(row);
    /* global selection from every rank's candidates */
    struct cand mine[2 * MG_CHARGES];
    memcpy(mine, hi, sizeof hi);
    memcpy(mine + MG_CHARGES, lo, sizeof lo);
    struct cand *all = npb_alloc(sizeof(struct cand) * 2 * MG_CHARGES * g->nranks, "mg charges");
    MPI_Datatype t;
    MPI_Type_contiguous(sizeof(struct cand), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    MPI_Allgather(mine, 2 * MG_CHARGES, t, all, 2 * MG_CHARGES, t, g->comm);
    MPI_Type_free(&t);
    int total = 2 * MG_CHARGES * g->nranks;
    qsort(all, total, sizeof *all, cmp_cand);
    long nn = (long)n * n;
    for (int s = 0; s < 2 * MG_CHARGES; s++) {
        /* the first ten are the smallest, the last ten the largest */
        const struct cand *c = s < MG_CHARGES ? &all[s] : &all[total - 1 - (s - MG_CHARGES)];
        double charge = s < MG_CHARGES ? -1.0 : 1.0;
        if (perturb && s == MG_CHARGES)
            charge = 1.5;
        int gz = (int)(c->pos / nn), gy = (int)(c->pos / n % n), gx = (int)(c->pos % n);
        if (gz >= L->z0 && gz < L->z0 + L->nzl)
            AT(L, g->v, gx + 1, gy + 1, gz - L->z0 + 1) = charge;
    }
    free(all);
    comm3(g, L, g->v);
}

static double norm2(const struct mg *g, const struct level *L, const double *r)
{
    double s = 0.0;
    const int n = L->n;
#pragma omp parallel for reduction(+ : s) if (big(L))
    for (int k = 1; k <= L->nzl; k++)
        for (int j = 1; j <= n; j++) {
            const double *o = &AT(L, r, 0, j, k);
#pragma omp simd reduction(+ : s)
            for (int i = 1; i <= n; i++)
                s += o[i] * o[i];
        }
    double tot;
    MPI_Allreduce(&s, &tot, 1, MPI_DOUBLE, MPI_SUM, g->comm);
    return sqrt(tot / ((double)n * n * n));
}

static void mg_run(const struct npb_ctx *ctx, struct npb_result *res)
{
    const struct mg_class *p = mg_class_get(ctx->cls);
    struct mg g;
    g.comm = ctx->comm;
    g.rank = ctx->rank;
    g.nranks = ctx->nranks;
    g.lt = npb_log2(p->n);
    memcpy(g.a, mg_coeff_a(), sizeof g.a);
    memcpy(g.c, mg_coeff_s(p->smoother), sizeof g.c);
    g.lv = npb_alloc(sizeof(struct level) * (g.lt + 1), "mg levels");
    for (int k = 1; k <= g.lt; k++) {
        struct level *L = &g.lv[k];
        L->n = 1 << k;
        L->dist = L->n >= 2 * g.nranks;
        L->nzl = L->dist ? L->n / g.nranks : L->n;
        L->z0 = L->dist ? L->nzl * g.rank : 0;
        L->sx = L->n + 2;
        L->plane = L->sx * L->sx;
        L->total = (size_t)L->plane * (L->nzl + 2);
        L->u = npb_alloc(sizeof(double) * L->total, "mg u");
        L->r = npb_alloc(sizeof(double) * L->total, "mg r");
        zero(L, L->u);
        zero(L, L->r);
    }
    struct level *top = &g.lv[g.lt];
    g.v = npb_alloc(sizeof(double) * top->total, "mg v");

    /* untimed warm-up cycle */
    zran3(&g, ctx->perturb);
    zero(top, top->u);
    resid(&g, top, top->u, g.v, top->r);
    mg3p(&g);
    resid(&g, top, top->u, g.v, top->r);

    /* the benchmark */
    zero(top, top->u);
    zran3(&g, ctx->perturb);
    MPI_Barrier(ctx->comm);
    double t0 = npb_wtime();
    resid(&g, top, top->u, g.v, top->r);
    for (int it = 1; it <= p->nit; it++) {
        mg3p(&g);
        resid(&g, top, top->u, g.v, top->r);
    }
    double rnm2 = norm2(&g, top, top->r);
    double t = npb_wtime() - t0;

    res->time_s = npb_time_max(ctx->comm, t);
    double nn = (double)p->n * p->n * p->n;
    res->mops = res->time_s > 0 ? 58.0 * p->nit * nn / res->time_s / 1e6 : 0.0;
    res->iterations = p->nit;
    snprintf(res->size, sizeof res->size, "%dx%dx%d", p->n, p->n, p->n);
    npb_add_check(res, "rnm2", rnm2, p->rnm2, MG_EPSILON);

    for (int k = 1; k <= g.lt; k++) {
        free(g.lv[k].u);
        free(g.lv[k].r);
    }
    free(g.lv);
    free(g.v);
}

const struct npb_kernel npb_mg = {"mg", 1, mg_check, mg_mem, mg_run};
