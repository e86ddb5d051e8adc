/*
 * BT: the block-tridiagonal pseudo-application (NAS-95-020 section 4; NPB 3.x definition).
 * Each time step (adi) is
 *     compute_rhs; x_solve; y_solve; z_solve; add
 * Beam-Warming approximate factorization of the implicit operator: along every grid line
 * of each direction one block-tridiagonal system with 5x5 blocks,
 *     A_p = -dt t2 F_{p-1} - dt t1 N_{p-1} - dt t1 D
 *     B_p = I + 2 dt t1 N_p + 2 dt t1 D
 *     C_p =  dt t2 F_{p+1} - dt t1 N_{p+1} - dt t1 D
 * (F: inviscid flux Jacobian along the direction, N: its viscous part, D = diag(d1..d5),
 * t1 = 1/h^2, t2 = 1/(2h)), solved by block Thomas elimination (Gauss-Jordan on the
 * diagonal block, no pivoting, as the reference).  The end points of a line are boundary
 * points with identity rows and zero right-hand side, so they are left out of the systems:
 * the interior solution is the same.  Shared numerics (exact solution, initial field,
 * forcing, compute_rhs, norms, decomposition) are in cfd.c.
 *
 * Single zone on P ranks: z-slabs (cfd_slab).  compute_rhs, x_solve and y_solve run on the
 * slab after a 2-plane halo exchange of u; for z_solve u and rhs are transposed to y-slabs
 * (all z local), solved there, and rhs is transposed back.  Any P with >= 2 z planes per
 * rank.  OpenMP threads share the lines of each direction.
 *
 * Verification: RMS norms of the residual (/dt) and of the error against the published
 * values (cfd_bt_class: NPB 3.4 bt/verify.f), relative error 1e-8.
 * Operation count (NPB's Mop/s), n = grid points per direction:
 *     (3478.8 n^3 - 17655.7 n^2 + 28023.7 n) * niter
 *
 * The same step serves BT-MZ: npb_zone_bt advances one whole zone (zone.h).
 */
#include "cfd.h"
#include "npb.h"
#include "zone.h"

#include <stdlib.h>
#include <string.h>

/* ---- 5x5 block kernels (row-major a[r*5 + c]) ------------------------------------------- */
/* The 5-trip loops are unrolled on purpose (GCC's -O2 keeps them rolled): with constant
 * indices the blocks live in registers, which makes the line solves ~1.4x faster. */

/* y -= a x */
static inline void matvec_sub(const double *restrict a, const double *restrict x,
                              double *restrict y)
{
#pragma GCC unroll 5
    for (int r = 0; r < 5; r++)
        y[r] = y[r] - a[r * 5 + 0] * x[0] - a[r * 5 + 1] * x[1] - a[r * 5 + 2] * x[2] -
               a[r * 5 + 3] * x[3] - a[r * 5 + 4] * x[4];
}

/* c -= a b */
static inline void matmul_sub(const double *restrict a, const double *restrict b,
                              double *restrict c)
{
#pragma GCC unroll 5
    for (int r = 0; r < 5; r++) {
        const double a0 = a[r * 5 + 0], a1 = a[r * 5 + 1], a2 = a[r * 5 + 2], a3 = a[r * 5 + 3],
                     a4 = a[r * 5 + 4];
#pragma GCC unroll 5
        for (int q = 0; q < 5; q++)
            c[r * 5 + q] = c[r * 5 + q] - a0 * b[q] - a1 * b[5 + q] - a2 * b[10 + q] -
                           a3 * b[15 + q] - a4 * b[20 + q];
    }
}

/* Gauss-Jordan on l (no pivoting: the blocks are diagonally dominant):
 * c <- l^-1 c (unless c is NULL: the last block of a line has none), r <- l^-1 r; l is
 * destroyed.  Always inlined with a constant c, so the NULL tests fold away. */
static inline __attribute__((always_inline)) void binv(double *restrict l, double *restrict c,
                                                       double *restrict r)
{
#pragma GCC unroll 5
    for (int p = 0; p < 5; p++) {
        const double piv = 1.0 / l[p * 5 + p];
#pragma GCC unroll 5
        for (int q = p + 1; q < 5; q++)
            l[p * 5 + q] *= piv;
        if (c) {
#pragma GCC unroll 5
            for (int q = 0; q < 5; q++)
                c[p * 5 + q] *= piv;
        }
        r[p] *= piv;
#pragma GCC unroll 5
        for (int row = 0; row < 5; row++) {
            if (row == p)
                continue;
            const double f = l[row * 5 + p];
#pragma GCC unroll 5
            for (int q = p + 1; q < 5; q++)
                l[row * 5 + q] -= f * l[p * 5 + q];
            if (c) {
#pragma GCC unroll 5
                for (int q = 0; q < 5; q++)
                    c[row * 5 + q] -= f * c[p * 5 + q];
            }
            r[row] -= f * r[p];
        }
    }
}

/* the blocks with a c stay out of line (as GCC chose for the separate function: the line
 * loop stays small); the last block's r-only elimination is inlined */
static void binvcrhs(double *restrict l, double *restrict c, double *restrict r) { binv(l, c, r); }

/* ---- the line systems ---------------------------------------------------------------------- */

/* coefficients of one direction's systems */
struct bt_dir {
    double t1, t2;     /* dt / h^2, dt / (2h) */
    double t1d[5];     /* dt t1 d_m: the artificial-dissipation diagonal */
    double c1, c2, c3c4, c1345, con43;
};

static struct bt_dir bt_dir_of(const struct cfd_consts *c, int d)
{
    struct bt_dir D;
    const double t1 = d == 0 ? c->tx1 : d == 1 ? c->ty1 : c->tz1;
    const double t2 = d == 0 ? c->tx2 : d == 1 ? c->ty2 : c->tz2;
    const double dd[3][5] = {{c->dx1, c->dx2, c->dx3, c->dx4, c->dx5},
                             {c->dy1, c->dy2, c->dy3, c->dy4, c->dy5},
                             {c->dz1, c->dz2, c->dz3, c->dz4, c->dz5}};
    D.t1 = c->dt * t1;
    D.t2 = c->dt * t2;
    for (int m = 0; m < 5; m++)
        D.t1d[m] = D.t1 * dd[d][m];
    D.c1 = c->c1;
    D.c2 = c->c2;
    D.c3c4 = c->c3c4;
    D.c1345 = c->c1345;
    D.con43 = c->con43;
    return D;
}

/*
 * The three blocks one point contributes, from its conserved values u: AM (the point as the
 * lower neighbour: -dt t2 F - dt t1 N - dt t1 D), BM (the point itself: I + 2 dt t1 N +
 * 2 dt t1 D) and CM (the point as the upper neighbour: dt t2 F - dt t1 N - dt t1 D).
 * F is the flux Jacobian along the direction, N its viscous part: with n the momentum along
 * the direction (v = 1, 2, 3; a, b the other two), rho_i = 1/rho, square = |m|^2/(2 rho),
 * qs = square/rho, the derivatives of the fluxes (rho v_n, m v_n + c2 (e - square) e_n,
 * (c1 e - c2 square) v_n) and of the viscous terms (con43 c3c4 on the normal momentum, c3c4
 * on the others, c1345 on the energy) with respect to (rho, m1, m2, m3, e).
 * v is a literal in every caller, so after inlining all indices are constants and F, N
 * live in registers.
 */
static inline __attribute__((always_inline)) void
bt_blocks(const struct bt_dir *D, const int v, const double *u, double *restrict AM,
          double *restrict BM, double *restrict CM)
{
    const int a = v == 1 ? 2 : 1, b = v == 3 ? 2 : 3;
    const double c1 = D->c1, c2 = D->c2;
    const double r1 = 1.0 / u[0], r2 = r1 * r1, r3 = r2 * r1;
    const double un = u[v], ua = u[a], ub = u[b], e = u[4];
    const double square = 0.5 * (u[1] * u[1] + u[2] * u[2] + u[3] * u[3]) * r1;
    const double qs = square * r1;
    double F[25] = {0}, N[25] = {0};
    /* continuity */
    F[0 * 5 + v] = 1.0;
    /* normal momentum */
    F[v * 5 + 0] = -(un * un * r2) + c2 * qs;
    F[v * 5 + v] = (2.0 - c2) * (un * r1);
    F[v * 5 + a] = -c2 * (ua * r1);
    F[v * 5 + b] = -c2 * (ub * r1);
    F[v * 5 + 4] = c2;
    /* tangential momenta */
    F[a * 5 + 0] = -(un * ua) * r2;
    F[a * 5 + v] = ua * r1;
    F[a * 5 + a] = un * r1;
    F[b * 5 + 0] = -(un * ub) * r2;
    F[b * 5 + v] = ub * r1;
    F[b * 5 + b] = un * r1;
    /* energy */
    F[4 * 5 + 0] = (c2 * 2.0 * square - c1 * e) * (un * r2);
    F[4 * 5 + v] = c1 * e * r1 - c2 * (un * un * r2 + qs);
    F[4 * 5 + a] = -c2 * (ua * un) * r2;
    F[4 * 5 + b] = -c2 * (ub * un) * r2;
    F[4 * 5 + 4] = c1 * (un * r1);

    const double cn = D->con43 * D->c3c4, ct = D->c3c4, c1345 = D->c1345;
    N[v * 5 + 0] = -cn * r2 * un;
    N[v * 5 + v] = cn * r1;
    N[a * 5 + 0] = -ct * r2 * ua;
    N[a * 5 + a] = ct * r1;
    N[b * 5 + 0] = -ct * r2 * ub;
    N[b * 5 + b] = ct * r1;
    N[4 * 5 + 0] = -(cn - c1345) * r3 * (un * un) - (ct - c1345) * r3 * (ua * ua) -
                   (ct - c1345) * r3 * (ub * ub) - c1345 * r2 * e;
    N[4 * 5 + v] = (cn - c1345) * r2 * un;
    N[4 * 5 + a] = (ct - c1345) * r2 * ua;
    N[4 * 5 + b] = (ct - c1345) * r2 * ub;
    N[4 * 5 + 4] = c1345 * r1;

    const double t1 = D->t1, t2 = D->t2;
#pragma GCC unroll 25
    for (int q = 0; q < 25; q++) {
        const double f = t2 * F[q], n = t1 * N[q];
        AM[q] = -f - n;
        BM[q] = 2.0 * n;
        CM[q] = f - n;
    }
#pragma GCC unroll 5
    for (int m = 0; m < 5; m++) {
        AM[m * 6] -= D->t1d[m];
        BM[m * 6] += 1.0 + 2.0 * D->t1d[m];
        CM[m * 6] -= D->t1d[m];
    }
}

/* workspace doubles per line point: its three blocks */
#define BT_WORK 75

/*
 * One line of np points (0 and np-1 are boundaries): u and rhs of point q at offset q*s
 * (doubles); rhs is overwritten with the solution at the interior points 1..np-2.
 * Row p of the system is AM[p-1] x[p-1] + BM[p] x[p] + CM[p+1] x[p+1] = r[p]; elimination
 * overwrites BM[p] and turns CM[p+1] into BM[p]^-1 CM[p+1] in place.
 */
static inline __attribute__((always_inline)) void
bt_line(const struct bt_dir *D, const int v, int np, const double *u, double *rhs, long s,
        double *w)
{
    double *AM = w, *BM = w + 25 * (size_t)np, *CM = w + 50 * (size_t)np;
    const int last = np - 2;
    for (int q = 1; q <= last; q++)
        bt_blocks(D, v, u + q * s, AM + 25 * q, BM + 25 * q, CM + 25 * q);
    for (int p = 1; p <= last; p++) {
        double *r = rhs + p * s, *B = BM + 25 * p;
        if (p > 1) {
            /* eliminate the sub-diagonal block with the previous (already solved) row */
            const double *A = AM + 25 * (p - 1);
            matvec_sub(A, r - s, r);
            matmul_sub(A, CM + 25 * p, B);
        }
        if (p < last)
            binvcrhs(B, CM + 25 * (p + 1), r);
        else
            binv(B, NULL, r);
    }
    /* back substitution */
    for (int p = last - 1; p >= 1; p--)
        matvec_sub(CM + 25 * (p + 1), rhs + (p + 1) * s, rhs + p * s);
}

/* one function per direction, so that bt_blocks sees its direction as a constant */
static void bt_line_x(const struct bt_dir *D, int np, const double *u, double *rhs, long s, double *w)
{
    bt_line(D, 1, np, u, rhs, s, w);
}
static void bt_line_y(const struct bt_dir *D, int np, const double *u, double *rhs, long s, double *w)
{
    bt_line(D, 2, np, u, rhs, s, w);
}
static void bt_line_z(const struct bt_dir *D, int np, const double *u, double *rhs, long s, double *w)
{
    bt_line(D, 3, np, u, rhs, s, w);
}

/* every line along d of block B (which holds its lines whole) at the updated points */
static void bt_solve(struct cfd_block *B, const struct cfd_consts *c, int d)
{
    const struct bt_dir D = bt_dir_of(c, d);
    const int np = B->n[d];
    if (B->line0[d] != 0 || B->nline[d] != np)
        npb_fatal(1, "internal error: bt line solve along %d on a block without whole lines", d);
    if (np < 3)
        return;
    const long st = d == 0 ? 1 : d == 1 ? B->n[0] : (long)B->n[0] * B->n[1];
    /* the two directions across the lines: outer (o) and inner (in), inner the faster */
    const int dout = d == 2 ? 1 : 2, din = d == 0 ? 1 : 0;
    int o0, o1, i0, i1;
    void (*const line)(const struct bt_dir *, int, const double *, double *, long, double *) =
        d == 0 ? bt_line_x : d == 1 ? bt_line_y : bt_line_z;
    cfd_update_range(B, dout, &o0, &o1);
    cfd_update_range(B, din, &i0, &i1);
#pragma omp parallel
    {
        double *w = npb_alloc(sizeof(double) * BT_WORK * (size_t)np, "bt line workspace");
#pragma omp for schedule(static) collapse(2)
        for (int o = o0; o < o1; o++)
            for (int x = i0; x < i1; x++) {
                int idx[3];
                idx[d] = 0;
                idx[dout] = o;
                idx[din] = x;
                const size_t p0 = cfd_idx(B, idx[0], idx[1], idx[2]) * 5;
                line(&D, np, B->u + p0, B->rhs + p0, 5 * st, w);
            }
        free(w);
    }
}

static void bt_adi(struct cfd_state *s)
{
    struct cfd_block *b = &s->b;
    if (s->transposed) {
        double *uf[1] = {b->u};
        cfd_halo(&s->slab, b, uf, 1, 5);
    }
    cfd_compute_rhs(b, &s->c);
    bt_solve(b, &s->c, 0);
    bt_solve(b, &s->c, 1);
    if (s->transposed) {
        double *f[2] = {b->u, b->rhs}, *g[2] = {s->t.u, s->t.rhs};
        cfd_to_yslab(&s->slab, b, f, &s->t, g, 2, 5);
        bt_solve(&s->t, &s->c, 2);
        double *rf[1] = {b->rhs}, *rg[1] = {s->t.rhs};
        cfd_to_zslab(&s->slab, &s->t, rg, b, rf, 1, 5);
    } else {
        bt_solve(b, &s->c, 2);
    }
    cfd_add(b);
}

/* ---- single zone and zones: the driver in cfd.c -------------------------------------------- */

static const struct cfd_solver bt_solver = {"bt", cfd_bt_class, 0, bt_adi,
                                             {3478.8, -17655.7, 28023.7, 0.0}};

static int bt_check(char cls, int nranks, char *msg, size_t len)
{
    return cfd_check(&bt_solver, cls, nranks, msg, len);
}

static double bt_mem(char cls, int nranks)
{
    const struct cfd_class *k = cfd_bt_class(cls);
    /* the shared fields plus one line workspace per thread (up to 64 threads; small) */
    return k ? cfd_mem_per_rank(k->n, nranks, 0) + 8.0 * BT_WORK * k->n * 64 : 0.0;
}

static void bt_run(const struct npb_ctx *ctx, struct npb_result *res) { cfd_run(&bt_solver, ctx, res); }

const struct npb_kernel npb_bt = {"bt", 1, bt_check, bt_mem, bt_run};

/* ---- BT-MZ zone solver (zone.h) -------------------------------------------------------------- */

static int btz_init(struct npb_zone *z, char cls, double dt)
{
    (void)cls;
    return cfd_zone_init(z, dt, 0);
}

static void btz_step(struct npb_zone *z) { bt_adi(z->state); }

const struct npb_zone_solver npb_zone_bt = {"bt", btz_init, btz_step, cfd_zone_norms, cfd_zone_release,
                                           NULL};
