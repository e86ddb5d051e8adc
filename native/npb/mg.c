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

/* periodic borders of a level array, exchanging ghost planes with neighbours */
static void comm3(const struct mg *g, const struct level *L, double *a)
{
    const int n = L->n;
#pragma omp parallel for if (big(L))
    for (int k = 1; k <= L->nzl; k++) {
        for (int j = 1; j <= n; j++) {
            AT(L, a, 0, j, k) = AT(L, a, n, j, k);
            AT(L, a, n + 1, j, k) = AT(L, a, 1, j, k);
        }
        memcpy(&AT(L, a, 0, 0, k), &AT(L, a, 0, n, k), sizeof(double) * L->sx);
        memcpy(&AT(L, a, 0, n + 1, k), &AT(L, a, 0, 1, k), sizeof(double) * L->sx);
    }
    if (!L->dist || g->nranks == 1) {
        memcpy(a, a + (size_t)L->nzl * L->plane, sizeof(double) * L->plane);
        memcpy(a + (size_t)(L->nzl + 1) * L->plane, a + L->plane, sizeof(double) * L->plane);
        return;
    }
    int up = (g->rank + 1) % g->nranks, down = (g->rank + g->nranks - 1) % g->nranks;
    MPI_Sendrecv(a + (size_t)L->nzl * L->plane, (int)L->plane, MPI_DOUBLE, up, 1, a, (int)L->plane,
                 MPI_DOUBLE, down, 1, g->comm, MPI_STATUS_IGNORE);
    MPI_Sendrecv(a + L->plane, (int)L->plane, MPI_DOUBLE, down, 2,
                 a + (size_t)(L->nzl + 1) * L->plane, (int)L->plane, MPI_DOUBLE, up, 2, g->comm,
                 MPI_STATUS_IGNORE);
}

/*
 * out = base + sign * (s0 x + s1 faces(x) + s2 edges(x) + s3 corners(x)) on the interior,
 * i.e. resid (out = v - A u: base v, sign -1) and psinv (u = u + S r: base u, sign +1).
 * base may equal out (each point reads only its own base value).
 */
static void stencil(const struct mg *g, const struct level *L, const double *s, double sign,
                    const double *x, const double *base, double *out)
{
    const int n = L->n;
    const double s0 = sign * s[0], s1 = sign * s[1], s2 = sign * s[2], s3 = sign * s[3];
#pragma omp parallel for collapse(2) if (big(L))
    for (int k = 1; k <= L->nzl; k++)
        for (int j = 1; j <= n; j++) {
            double x1[n + 2], x2[n + 2];
            const double *c = &AT(L, x, 0, j, k);
            const double *ym = &AT(L, x, 0, j - 1, k), *yp = &AT(L, x, 0, j + 1, k);
            const double *zm = &AT(L, x, 0, j, k - 1), *zp = &AT(L, x, 0, j, k + 1);
            const double *mm = &AT(L, x, 0, j - 1, k - 1), *pm = &AT(L, x, 0, j + 1, k - 1);
            const double *mp = &AT(L, x, 0, j - 1, k + 1), *pp = &AT(L, x, 0, j + 1, k + 1);
            for (int i = 0; i <= n + 1; i++) {
                x1[i] = ym[i] + yp[i] + zm[i] + zp[i];
                x2[i] = mm[i] + pm[i] + mp[i] + pp[i];
            }
            const double *b = &AT(L, base, 0, j, k);
            double *o = &AT(L, out, 0, j, k);
            for (int i = 1; i <= n; i++) {
                double faces = c[i - 1] + c[i + 1] + x1[i];
                double edges = x2[i] + x1[i - 1] + x1[i + 1];
                double corners = x2[i - 1] + x2[i + 1];
                o[i] = b[i] + s0 * c[i] + s1 * faces + s2 * edges + s3 * corners;
            }
        }
    (void)g;
}

static void resid(const struct mg *g, const struct level *L, const double *u, const double *v,
                  double *r)
{
    stencil(g, L, g->a, -1.0, u, v, r);
    comm3(g, L, r);
}

static void psinv(const struct mg *g, const struct level *L, const double *r, double *u)
{
    stencil(g, L, g->c, 1.0, r, u, u);
    comm3(g, L, u);
}

/* restriction: coarse planes [gc0, gc0 + cnt) (global) of C from F */
static void rprj3_planes(const struct level *F, const double *rf, const struct level *C,
                         double *rc, int gc0, int cnt)
{
    const int nc = C->n;
    const long fx = F->sx;
#pragma omp parallel for collapse(2) if (big(C))
    for (int q = 0; q < cnt; q++)
        for (int jc = 1; jc <= nc; jc++) {
            int gc = gc0 + q;
            int kc = gc - C->z0 + 1;
            int kf = 2 * gc + 2 - F->z0;
            int jf = 2 * jc;
            double x1[2 * nc + 2], y1[2 * nc + 2];
            const double *c = &AT(F, rf, 0, jf, kf);
            for (int i = 0; i <= 2 * nc + 1; i++) {
                x1[i] = c[i - fx] + c[i + fx] + c[i - F->plane] + c[i + F->plane];
                y1[i] = c[i - fx - F->plane] + c[i + fx - F->plane] + c[i - fx + F->plane] +
                        c[i + fx + F->plane];
            }
            double *o = &AT(C, rc, 0, jc, kc);
            for (int ic = 1; ic <= nc; ic++) {
                int i = 2 * ic;
                o[ic] = 0.5 * c[i] + 0.25 * (c[i - 1] + c[i + 1] + x1[i]) +
                        0.125 * (x1[i - 1] + x1[i + 1] + y1[i]) + 0.0625 * (y1[i - 1] + y1[i + 1]);
            }
        }
}

static void rprj3(const struct mg *g, const struct level *F, const double *rf,
                  const struct level *C, double *rc)
{
    if (C->dist || !F->dist || g->nranks == 1) {
        /* same ownership pattern: every rank computes its own coarse planes */
        rprj3_planes(F, rf, C, rc, C->z0, C->nzl);
    } else {
        /* fine distributed, coarse replicated: compute own share, then gather all planes */
        int share = F->nzl / 2;
        rprj3_planes(F, rf, C, rc, F->z0 / 2, share);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rc + C->plane, (int)(share * C->plane),
                      MPI_DOUBLE, g->comm);
    }
    comm3(g, C, rc);
}

/* uf += Q uc (trilinear interpolation), then borders */
static void interp(const struct mg *g, const struct level *C, const double *uc,
                   const struct level *F, double *uf)
{
    const int nf = F->n, nc = C->n;
#pragma omp parallel for collapse(2) if (big(F))
    for (int k = 1; k <= F->nzl; k++)
        for (int j = 1; j <= nf; j++) {
            int gk = k - 1 + F->z0;
            int ka, kb, ja, jb;
            double wk, wj;
            if (gk & 1) { /* on a coarse plane */
                ka = kb = (gk - 1) / 2 - C->z0 + 1;
                wk = 0.5; /* counted twice below */
            } else {
                ka = gk / 2 - C->z0;
                kb = ka + 1;
                wk = 0.5;
            }
            if (j % 2 == 0) { /* fine global j-1 odd: on a coarse row */
                ja = jb = j / 2;
            } else {
                ja = (j - 1) / 2;
                jb = ja + 1;
            }
            wj = 0.5;
            double t[nc + 2];
            const double *aa = &AT(C, uc, 0, ja, ka), *ab = &AT(C, uc, 0, jb, ka);
            const double *ba = &AT(C, uc, 0, ja, kb), *bb = &AT(C, uc, 0, jb, kb);
            const double w = wk * wj;
            for (int i = 0; i <= nc + 1; i++)
                t[i] = w * (aa[i] + ab[i] + ba[i] + bb[i]);
            double *o = &AT(F, uf, 0, j, k);
            for (int i = 1; i <= nf; i++)
                o[i] += (i % 2 == 0) ? t[i / 2] : 0.5 * (t[(i - 1) / 2] + t[(i + 1) / 2]);
        }
    comm3(g, F, uf);
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
        zero(&lv[k], lv[k].u);
        interp(g, &lv[k - 1], lv[k - 1].u, &lv[k], lv[k].u);
        resid(g, &lv[k], lv[k].u, lv[k].r, lv[k].r);
        psinv(g, &lv[k], lv[k].r, lv[k].u);
    }
    interp(g, &lv[lt - 1], lv[lt - 1].u, &lv[lt], lv[lt].u);
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
#pragma omp parallel for collapse(2) reduction(+ : s) if (big(L))
    for (int k = 1; k <= L->nzl; k++)
        for (int j = 1; j <= n; j++) {
            const double *o = &AT(L, r, 0, j, k);
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
