/*
 * SP: the scalar-pentadiagonal pseudo-application (NAS-95-020 section 4.2; NPB 3.x
 * definition).  Each time step (adi) is
 *     compute_rhs; txinvr; x_solve (+ ninvr); y_solve (+ pinvr); z_solve (+ tzetar); add
 * Beam-Warming approximate factorization with the flux Jacobians diagonalized, so each
 * direction solves three scalar pentadiagonal systems per line (one shared by the first three
 * characteristic variables, one each for the u+c and u-c waves).  Shared numerics are in
 * cfd.c; verification: RMS norms of the residual and of the error against the published
 * values (cfd_sp_class), relative error 1e-8.
 *
 * Single zone on P ranks: z-slabs (cfd_slab) with 2 halo planes each side.  compute_rhs,
 * x_solve and y_solve run on the slab; for z_solve rhs is transposed to y-slabs (all z local;
 * the y-slab keeps its own copy of u), solved there, and transposed back together with the
 * halo planes (see sp_adi).  Any P with >= 2 z planes per rank.  OpenMP threads share the
 * lines of each direction.
 *
 * Operation count (NPB's Mop/s): (881.174 n^3 - 4683.91 n^2 + 11484.5 n - 19272.4) * niter.
 *
 * The same step serves SP-MZ: npb_zone_sp advances one whole zone (zone.h).
 */
#include "cfd.h"
#include "npb.h"
#include "zone.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* max for finite values, inlined (libm's fmax is a call that also handles NaN) */
static inline double dmax(double a, double b) { return a > b ? a : b; }

/* coefficients of one direction's line systems */
struct sp_dir {
    double dtt1, dtt2, c2dtt1, dA, d5, dmax, d1;
};

static struct sp_dir sp_dir_of(const struct cfd_consts *c, int d)
{
    struct sp_dir D;
    if (d == 0)
        D = (struct sp_dir){c->dttx1, c->dttx2, c->c2dttx1, c->dx2, c->dx5, c->dxmax, c->dx1};
    else if (d == 1)
        D = (struct sp_dir){c->dtty1, c->dtty2, c->c2dtty1, c->dy3, c->dy5, c->dymax, c->dy1};
    else
        D = (struct sp_dir){c->dttz1, c->dttz2, c->c2dttz1, c->dz4, c->dz5, c->dzmax, c->dz1};
    return D;
}

/* lines solved together (their arithmetic interleaved, so the recurrences of one line hide
 * the latency of another's; with adjacent lines contiguous in memory, the loops over them
 * vectorize) and workspace doubles per line point */
#define SP_L 8
#define SP_WORK 17

/*
 * Solve nl <= SP_L lines of n points each (positions 0..n-1; the ends are boundaries with
 * identity rows).  Line l's point q has its 5 rhs values at rhs + q*st5 + l*lst5 (overwritten
 * with the solution) and its velocity along the line, 1/rho and sound speed at index
 * q*st + l*lst of vel, rho_i, speed.  w: SP_WORK * SP_L * n doubles.  Each line's arithmetic
 * is exactly that of the reference's one-line solver.
 */
static void sp_lines(const struct cfd_consts *c, const struct sp_dir *D, int n, int nl, double *rhs,
                     long st5, long lst5, const double *vel, const double *rho_i, const double *speed,
                     long st, long lst, double *w)
{
    const size_t N = (size_t)n * SP_L;
    double *cv = w, *rh = w + N;
    /* the five diagonals of lhs (a..e), lhsp (pa..pe) and lhsm (mA..mE): [q][l] */
    double *a = w + 2 * N, *b = a + N, *cc = b + N, *d = cc + N, *e = d + N;
    double *pa = e + N, *pb = pa + N, *pc = pb + N, *pd = pc + N, *pe = pd + N;
    double *mA = pe + N, *mb = mA + N, *mC = mb + N, *md = mC + N, *mE = md + N;
#define X(v, q) v[(size_t)(q) * SP_L + l]
#define R(q) (rhs + (q) * st5 + l * lst5)
    for (int q = 0; q < n; q++)
        for (int l = 0; l < nl; l++) {
            double ru1 = c->c3c4 * rho_i[q * st + l * lst];
            X(cv, q) = vel[q * st + l * lst];
            X(rh, q) = dmax(dmax(D->dA + c->con43 * ru1, D->d5 + c->c1c5 * ru1), dmax(D->dmax + ru1, D->d1));
        }
    for (int l = 0; l < nl; l++) {
        X(a, 0) = X(b, 0) = X(d, 0) = X(e, 0) = 0.0, X(cc, 0) = 1.0;
        X(a, n - 1) = X(b, n - 1) = X(d, n - 1) = X(e, n - 1) = 0.0, X(cc, n - 1) = 1.0;
    }
    for (int q = 1; q < n - 1; q++)
        for (int l = 0; l < nl; l++) {
            X(a, q) = 0.0;
            X(b, q) = -D->dtt2 * X(cv, q - 1) - D->dtt1 * X(rh, q - 1);
            X(cc, q) = 1.0 + D->c2dtt1 * X(rh, q);
            X(d, q) = D->dtt2 * X(cv, q + 1) - D->dtt1 * X(rh, q + 1);
            X(e, q) = 0.0;
        }
    /* fourth-order dissipation */
    for (int l = 0; l < nl; l++) {
        X(cc, 1) += c->comz5;
        X(d, 1) -= c->comz4;
        X(e, 1) += c->comz1;
        X(b, 2) -= c->comz4;
        X(cc, 2) += c->comz6;
        X(d, 2) -= c->comz4;
        X(e, 2) += c->comz1;
    }
    for (int q = 3; q < n - 3; q++)
        for (int l = 0; l < nl; l++) {
            X(a, q) += c->comz1;
            X(b, q) -= c->comz4;
            X(cc, q) += c->comz6;
            X(d, q) -= c->comz4;
            X(e, q) += c->comz1;
        }
    for (int l = 0; l < nl; l++) {
        X(a, n - 3) += c->comz1;
        X(b, n - 3) -= c->comz4;
        X(cc, n - 3) += c->comz6;
        X(d, n - 3) -= c->comz4;
        X(a, n - 2) += c->comz1;
        X(b, n - 2) -= c->comz4;
        X(cc, n - 2) += c->comz5;
    }
    /* the u+c and u-c systems: lhs with the sound speed added to the off-diagonals */
    for (size_t k = 0; k < N; k++) {
        pa[k] = mA[k] = a[k];
        pb[k] = mb[k] = b[k];
        pc[k] = mC[k] = cc[k];
        pd[k] = md[k] = d[k];
        pe[k] = mE[k] = e[k];
    }
    for (int q = 1; q < n - 1; q++)
        for (int l = 0; l < nl; l++) {
            double sm = D->dtt2 * speed[(q - 1) * st + l * lst], sp1 = D->dtt2 * speed[(q + 1) * st + l * lst];
            X(pb, q) = X(b, q) - sm;
            X(pd, q) = X(d, q) + sp1;
            X(mb, q) = X(b, q) + sm;
            X(md, q) = X(d, q) - sp1;
        }

    /* forward elimination: components 1-3 with lhs, 4 with lhsp, 5 with lhsm */
    for (int q = 0; q <= n - 3; q++)
        for (int l = 0; l < nl; l++) {
            double *r0 = R(q), *r1 = r0 + st5, *r2 = r1 + st5;
            double fac1 = 1.0 / X(cc, q);
            X(d, q) *= fac1;
            X(e, q) *= fac1;
            r0[0] *= fac1, r0[1] *= fac1, r0[2] *= fac1;
            X(cc, q + 1) -= X(b, q + 1) * X(d, q);
            X(d, q + 1) -= X(b, q + 1) * X(e, q);
            r1[0] -= X(b, q + 1) * r0[0], r1[1] -= X(b, q + 1) * r0[1], r1[2] -= X(b, q + 1) * r0[2];
            X(b, q + 2) -= X(a, q + 2) * X(d, q);
            X(cc, q + 2) -= X(a, q + 2) * X(e, q);
            r2[0] -= X(a, q + 2) * r0[0], r2[1] -= X(a, q + 2) * r0[1], r2[2] -= X(a, q + 2) * r0[2];
            fac1 = 1.0 / X(pc, q);
            X(pd, q) *= fac1;
            X(pe, q) *= fac1;
            r0[3] *= fac1;
            X(pc, q + 1) -= X(pb, q + 1) * X(pd, q);
            X(pd, q + 1) -= X(pb, q + 1) * X(pe, q);
            r1[3] -= X(pb, q + 1) * r0[3];
            X(pb, q + 2) -= X(pa, q + 2) * X(pd, q);
            X(pc, q + 2) -= X(pa, q + 2) * X(pe, q);
            r2[3] -= X(pa, q + 2) * r0[3];
            fac1 = 1.0 / X(mC, q);
            X(md, q) *= fac1;
            X(mE, q) *= fac1;
            r0[4] *= fac1;
            X(mC, q + 1) -= X(mb, q + 1) * X(md, q);
            X(md, q + 1) -= X(mb, q + 1) * X(mE, q);
            r1[4] -= X(mb, q + 1) * r0[4];
            X(mb, q + 2) -= X(mA, q + 2) * X(md, q);
            X(mC, q + 2) -= X(mA, q + 2) * X(mE, q);
            r2[4] -= X(mA, q + 2) * r0[4];
        }
    /* the last two rows */
    for (int l = 0; l < nl; l++) {
        const int q = n - 2;
        double *r0 = R(q), *r1 = r0 + st5;
        double fac1 = 1.0 / X(cc, q);
        X(d, q) *= fac1;
        X(e, q) *= fac1;
        r0[0] *= fac1, r0[1] *= fac1, r0[2] *= fac1;
        X(cc, q + 1) -= X(b, q + 1) * X(d, q);
        X(d, q + 1) -= X(b, q + 1) * X(e, q);
        r1[0] -= X(b, q + 1) * r0[0], r1[1] -= X(b, q + 1) * r0[1], r1[2] -= X(b, q + 1) * r0[2];
        double fac2 = 1.0 / X(cc, q + 1);
        r1[0] *= fac2, r1[1] *= fac2, r1[2] *= fac2;
        fac1 = 1.0 / X(pc, q);
        X(pd, q) *= fac1;
        X(pe, q) *= fac1;
        r0[3] *= fac1;
        X(pc, q + 1) -= X(pb, q + 1) * X(pd, q);
        X(pd, q + 1) -= X(pb, q + 1) * X(pe, q);
        r1[3] -= X(pb, q + 1) * r0[3];
        fac1 = 1.0 / X(mC, q);
        X(md, q) *= fac1;
        X(mE, q) *= fac1;
        r0[4] *= fac1;
        X(mC, q + 1) -= X(mb, q + 1) * X(md, q);
        X(md, q + 1) -= X(mb, q + 1) * X(mE, q);
        r1[4] -= X(mb, q + 1) * r0[4];
        r1[3] = r1[3] / X(pc, q + 1);
        r1[4] = r1[4] / X(mC, q + 1);
        /* back substitution starts */
        r0[0] -= X(d, q) * r1[0], r0[1] -= X(d, q) * r1[1], r0[2] -= X(d, q) * r1[2];
        r0[3] -= X(pd, q) * r1[3];
        r0[4] -= X(md, q) * r1[4];
    }
    for (int q = n - 3; q >= 0; q--)
        for (int l = 0; l < nl; l++) {
            double *r0 = R(q), *r1 = r0 + st5, *r2 = r1 + st5;
            for (int m = 0; m < 3; m++)
                r0[m] -= X(d, q) * r1[m] + X(e, q) * r2[m];
            r0[3] -= X(pd, q) * r1[3] + X(pe, q) * r2[3];
            r0[4] -= X(md, q) * r1[4] + X(mE, q) * r2[4];
        }
#undef X
#undef R
}

/* ---- the steps of adi ------------------------------------------------------------------- */

/* the block-diagonal transform to characteristic variables before the x solve */
static void sp_txinvr(struct cfd_block *B, const struct cfd_consts *c)
{
    int i0, i1, j0, j1, k0, k1;
    cfd_update_range(B, 0, &i0, &i1);
    cfd_update_range(B, 1, &j0, &j1);
    cfd_update_range(B, 2, &k0, &k1);
#pragma omp parallel for schedule(static) collapse(2)
    for (int k = k0; k < k1; k++)
        for (int j = j0; j < j1; j++)
            for (int i = i0; i < i1; i++) {
                size_t p = cfd_idx(B, i, j, k);
                double *r = B->rhs + p * 5;
                double ru1 = B->rho_i[p], uu = B->us[p], vv = B->vs[p], ww = B->ws[p];
                double ac = B->speed[p], ac2inv = 1.0 / (ac * ac);
                double r1 = r[0], r2 = r[1], r3 = r[2], r4 = r[3], r5 = r[4];
                double t1 = c->c2 * ac2inv * (B->qs[p] * r1 - uu * r2 - vv * r3 - ww * r4 + r5);
                double t2 = c->bt * ru1 * (uu * r1 - r2);
                double t3 = (c->bt * ru1 * ac) * t1;
                r[0] = r1 - t1;
                r[1] = -ru1 * (ww * r1 - r4);
                r[2] = ru1 * (vv * r1 - r3);
                r[3] = -t2 + t3;
                r[4] = t2 + t3;
            }
}

static int max3(const int n[3])
{
    int m = n[0] > n[1] ? n[0] : n[1];
    return m > n[2] ? m : n[2];
}

/* line solves along direction d on block B (every line lies whole in B), each followed by
 * the direction's transform (ninvr, pinvr, tzetar) at the line's interior points */
static void sp_solve(struct cfd_block *B, const struct cfd_consts *cin, int d)
{
    const struct cfd_consts cl = *cin, *const c = &cl; /* see cfd_compute_rhs */
    const struct sp_dir D = sp_dir_of(c, d);
    const int n = B->n[d];
    const long st = d == 0 ? 1 : d == 1 ? B->n[0] : (long)B->n[0] * B->n[1];
    /* the two directions across the lines: outer (o) and inner (in) */
    const int dout = d == 2 ? 1 : 2, din = d == 0 ? 1 : 0;
    int o0, o1, n0, n1;
    cfd_update_range(B, dout, &o0, &o1);
    cfd_update_range(B, din, &n0, &n1);
    const double *vel = d == 0 ? B->us : d == 1 ? B->vs : B->ws;
    const double bt = c->bt;
#pragma omp parallel
    {
        double *w = npb_alloc(sizeof(double) * SP_WORK * SP_L * (size_t)max3(B->n), "sp line workspace");
        /* lines in groups of SP_L neighbours along the inner direction */
        const int ngroups = (n1 - n0 + SP_L - 1) / SP_L;
        const long lst = din == 0 ? 1 : B->n[0];
#pragma omp for schedule(static) collapse(2)
        for (int o = o0; o < o1; o++)
            for (int gi = 0; gi < ngroups; gi++) {
                const int x0 = n0 + gi * SP_L, nl = n1 - x0 < SP_L ? n1 - x0 : SP_L;
                int idx[3];
                idx[d] = 0;
                idx[dout] = o;
                idx[din] = x0;
                const size_t pg = cfd_idx(B, idx[0], idx[1], idx[2]);
                sp_lines(c, &D, n, nl, B->rhs + pg * 5, 5 * st, 5 * lst, vel + pg, B->rho_i + pg,
                         B->speed + pg, st, lst, w);
                for (int l = 0; l < nl; l++) {
                    const size_t p0 = pg + l * lst;
                    for (int q = 1; q < n - 1; q++) {
                        const size_t p = p0 + q * st;
                        double *r = B->rhs + p * 5;
                        double r1 = r[0], r2 = r[1], r3 = r[2], r4 = r[3], r5 = r[4];
                        if (d == 0) { /* ninvr */
                            double t1 = bt * r3, t2 = 0.5 * (r4 + r5);
                            r[0] = -r2;
                            r[1] = r1;
                            r[2] = bt * (r4 - r5);
                            r[3] = -t1 + t2;
                            r[4] = t1 + t2;
                        } else if (d == 1) { /* pinvr */
                            double t1 = bt * r1, t2 = 0.5 * (r4 + r5);
                            r[0] = bt * (r4 - r5);
                            r[1] = -r3;
                            r[2] = r2;
                            r[3] = -t1 + t2;
                            r[4] = t1 + t2;
                        } else { /* tzetar: back to conserved variables */
                            double xvel = B->us[p], yvel = B->vs[p], zvel = B->ws[p], ac = B->speed[p];
                            double ac2u = ac * ac, uzik1 = B->u[p * 5], btuz = bt * uzik1;
                            double t1 = btuz / ac * (r4 + r5), t2 = r3 + t1, t3 = btuz * (r4 - r5);
                            r[0] = t2;
                            r[1] = -uzik1 * r2 + xvel * t2;
                            r[2] = uzik1 * r1 + yvel * t2;
                            r[3] = zvel * t2 + t3;
                            r[4] = uzik1 * (-xvel * r2 + yvel * r1) + B->qs[p] * t2 + c->c2iv * ac2u * t1 +
                                   zvel * t3;
                        }
                    }
                }
            }
        free(w);
    }
}

/*
 * One time step.  With P > 1 the y-slab keeps its own copy of u (advanced by the same add as
 * the z-slab, so both stay bitwise equal): only rhs travels, to the y-slab and back, and the
 * way back includes the halo planes, so adding on all stored planes keeps the halos current
 * without a separate exchange (two synchronizations per step).
 */
static void sp_adi(struct cfd_state *s)
{
    struct cfd_block *b = &s->b;
    cfd_compute_rhs(b, &s->c);
    sp_txinvr(b, &s->c);
    sp_solve(b, &s->c, 0);
    sp_solve(b, &s->c, 1);
    if (s->transposed) {
        double *f[1] = {b->rhs}, *g[1] = {s->t.rhs};
        cfd_to_yslab(&s->slab, b, f, &s->t, g, 1, 5);
        cfd_derived(&s->t, &s->c);
        sp_solve(&s->t, &s->c, 2);
        cfd_add(&s->t);
        cfd_to_zslab_halo(&s->slab, &s->t, g, b, f, 1, 5);
        cfd_add_stored(b);
    } else {
        sp_solve(b, &s->c, 2);
        cfd_add(b);
    }
}

/* ---- single zone and zones: the driver in cfd.c -------------------------------------------- */

static const struct cfd_solver sp_solver = {"sp", cfd_sp_class, 1, sp_adi,
                                             {881.174, -4683.91, 11484.5, -19272.4}};

static int sp_check(char cls, int nranks, char *msg, size_t len)
{
    return cfd_check(&sp_solver, cls, nranks, msg, len);
}

static double sp_mem(char cls, int nranks)
{
    const struct cfd_class *k = cfd_sp_class(cls);
    return k ? cfd_mem_per_rank(k->n, nranks, 1) : 0.0;
}

static void sp_run(const struct npb_ctx *ctx, struct npb_result *res) { cfd_run(&sp_solver, ctx, res); }

const struct npb_kernel npb_sp = {"sp", 1, sp_check, sp_mem, sp_run};

/* ---- SP-MZ zone solver (zone.h) -------------------------------------------------------------- */

static int spz_init(struct npb_zone *z, char cls, double dt)
{
    (void)cls;
    return cfd_zone_init(z, dt, 1);
}

static void spz_step(struct npb_zone *z) { sp_adi(z->state); }

const struct npb_zone_solver npb_zone_sp = {"sp", spz_init, spz_step, cfd_zone_norms, cfd_zone_release,
                                           NULL};
