/*
 * What the NPB pseudo-applications SP and BT share (NAS-95-020 section 4; NPB 3.x definition):
 * the constants of the discretized Navier-Stokes problem, the exact solution, the initial
 * field, the forcing term that makes the exact solution a steady state (exact_rhs), the
 * explicit right-hand side (fluxes + 4th-order artificial dissipation, compute_rhs), the
 * error / residual norms, and the single-zone MPI decomposition into z-slabs with its halo
 * exchange and its transpose to y-slabs (for the z-direction line solves).
 *
 * One data structure serves three uses, so the same solver code runs all of them:
 *   - one rank's z-slab of a single-zone grid (MPI): all x, y; z planes [k0, k1) plus up
 *     to 2 halo planes each side (compute_rhs reaches k +- 2);
 *   - the same data transposed to a y-slab (all x, all z, rows [j0, j1)) for the z solves;
 *   - one whole zone of a multi-zone run (struct npb_zone): all points of the zone, whose
 *     x/y boundary points belong to neighbouring zones (refreshed by the MZ driver).
 *
 * Layout (as zone.h): 5-component fields f[((k*n[1] + j)*n[0] + i)*5 + m], m fastest;
 * scalar fields s[(k*n[1] + j)*n[0] + i].  i, j, k are stored (local) indices.
 *
 * Three index mappings per direction d (0 = x, 1 = y, 2 = z):
 *   coordinates:  index g = local + org[d];  xi = g * dnxm1 (cfd_consts), and g = 0, gn[d] - 1
 *                 are the faces where initialize puts the exact solution at xi = 0.0 / 1.0
 *   solve lines:  line position p = local + line0[d] in [0, nline[d]); p = 0 and p = nline-1
 *                 are boundary points (never updated); the one-sided dissipation stencils
 *                 apply at p = 1, 2, nline-3, nline-2.  A single-zone run has nline = gn;
 *                 a zone has nline = gn = its own size, org = 0 (NPB-MZ computes every zone in
 *                 local coordinates and treats every zone edge as a boundary).
 *   ownership:    stored points [lo[d], hi[d]) are this block's own (boundaries included);
 *                 the rest are halo points (read, never written).
 * The points a step updates are the owned points with 1 <= p <= nline-2 in every direction.
 */
#ifndef VB_NPB_CFD_H
#define VB_NPB_CFD_H

#include <mpi.h>
#include <stddef.h>

/* ---- classes of SP and BT: grid, steps, dt, published verification values -------------
 * Source: NPB 3.4 sp/verify.f and bt/verify.f (the reference tables), NAS-95-020 table 2
 * (grid sizes, steps, dt).  Relative error epsilon 1e-8 for every norm. */
#define CFD_EPSILON 1.0e-8
struct cfd_class {
    char cls;
    int n, niter;
    double dt;
    double xcr[5], xce[5]; /* RMS of the residual (/dt) and of the error vs the exact solution */
};
/* NULL for an unknown class */
const struct cfd_class *cfd_sp_class(char cls);
const struct cfd_class *cfd_bt_class(char cls);

/* ---- constants (set_constants of the reference), from the global grid and dt ---------- */
struct cfd_consts {
    double dt, dnxm1, dnym1, dnzm1;
    double c1, c2, c3, c4, c5, c1c2, c1c5, c3c4, c1345, conz1, bt;
    double tx1, tx2, tx3, ty1, ty2, ty3, tz1, tz2, tz3;
    double dx1, dx2, dx3, dx4, dx5, dy1, dy2, dy3, dy4, dy5, dz1, dz2, dz3, dz4, dz5;
    double dxmax, dymax, dzmax, dssp, c4dssp, c5dssp, dtdssp;
    double dttx1, dttx2, dtty1, dtty2, dttz1, dttz2, c2dttx1, c2dtty1, c2dttz1;
    double comz1, comz4, comz5, comz6;
    double c3c4tx3, c3c4ty3, c3c4tz3;
    double dx1tx1, dx2tx1, dx3tx1, dx4tx1, dx5tx1;
    double dy1ty1, dy2ty1, dy3ty1, dy4ty1, dy5ty1;
    double dz1tz1, dz2tz1, dz3tz1, dz4tz1, dz5tz1;
    double c2iv, con43, con16;
    double xxcon1, xxcon2, xxcon3, xxcon4, xxcon5;
    double yycon1, yycon2, yycon3, yycon4, yycon5;
    double zzcon1, zzcon2, zzcon3, zzcon4, zzcon5;
};
void cfd_constants(struct cfd_consts *c, int gnx, int gny, int gnz, double dt);
/* NPB-MZ: cell sizes from the average zone, dnxm1 = 1 / ((gnx - 1) / x_zones) (likewise y) */
void cfd_constants_zones(struct cfd_consts *c, int gnx, int gny, int gnz, int x_zones, int y_zones,
                         double dt);

/* the exact solution's coefficients (NPB's 5 x 13 table; LU uses the same), and the exact
 * solution at (xi, eta, zeta) in [0,1]^3 */
extern const double cfd_ce[5][13];
void cfd_exact(double xi, double eta, double zeta, double out[5]);

/* ---- a block of grid points (see the header comment) ----------------------------------- */
struct cfd_block {
    int n[3];                 /* stored points per direction */
    int org[3], gn[3];        /* coordinates; gn also places the faces of initialize */
    int line0[3], nline[3];   /* solve lines / boundary treatment */
    int lo[3], hi[3];         /* owned stored points */
    size_t npts;              /* n[0]*n[1]*n[2] */
    double *u, *rhs, *forcing;                  /* 5 per point */
    double *rho_i, *us, *vs, *ws, *qs, *square; /* 1 per point (compute_rhs) */
    double *speed;            /* sound speed; only when allocated with speed = 1 (SP) */
};

/* geometry of a whole zone (or a whole single-zone grid: org 0, n = gn) */
void cfd_block_zone(struct cfd_block *b, int nx, int ny, int nz, int ox, int oy, int gnx, int gny,
                    int gnz);
/* allocate the fields of a block whose geometry is set (aborts with exit 3 on failure);
 * forcing only when with_forcing, speed only when with_speed */
void cfd_block_alloc(struct cfd_block *b, int with_forcing, int with_speed);
void cfd_block_free(struct cfd_block *b);
/* point index of stored (i, j, k) */
static inline size_t cfd_idx(const struct cfd_block *b, int i, int j, int k)
{
    return ((size_t)k * b->n[1] + j) * b->n[0] + i;
}

/* u at every stored point: transfinite interpolation of the exact solution's face values,
 * then the exact solution on the global boundary faces (initialize of the reference) */
void cfd_initialize(struct cfd_block *b, const struct cfd_consts *c);
/* forcing at the owned points (zero on boundaries), exact_rhs of the reference */
void cfd_exact_rhs(struct cfd_block *b, const struct cfd_consts *c);
/* rho_i, us, vs, ws, qs, square (and speed) at every stored point, then
 * rhs = dt * (forcing + fluxes + dissipation) at the updated points and rhs = forcing at the
 * other owned points.  Halo planes of u must be current.  OpenMP inside. */
void cfd_compute_rhs(struct cfd_block *b, const struct cfd_consts *c);
/* rho_i, us, vs, ws, qs, square (and speed) from u at every stored point */
void cfd_derived(struct cfd_block *b, const struct cfd_consts *c);
/* the stored indices [*a, *e) along d of the points a step updates */
void cfd_update_range(const struct cfd_block *b, int d, int *a, int *e);
/* u += rhs at the updated points */
void cfd_add(struct cfd_block *b);
/* sums of squares per component: rhs over the updated points; u - exact over all owned
 * points (the reference's error_norm includes the boundaries).  Local: no communication. */
void cfd_rhs_sq(const struct cfd_block *b, double out[5]);
void cfd_error_sq(const struct cfd_block *b, const struct cfd_consts *c, double out[5]);
/* RMS from a global sum of squares: sqrt(sum / ((nx-2)(ny-2)(nz-2))) with the line sizes */
void cfd_rms(const double sq[5], int nx, int ny, int nz, double rms[5]);

/* ---- single-zone MPI decomposition: z-slabs, halos, transpose to y-slabs --------------- */
struct cfd_slab {
    MPI_Comm comm;
    int rank, nranks;
    int gn[3];
    int *kstart; /* nranks + 1 entries: rank r owns z planes [kstart[r], kstart[r+1]) */
    int *jstart; /* nranks + 1 entries: rank r owns y rows [jstart[r], jstart[r+1]) transposed */
    int *scount, *sdispl, *rcount, *rdispl; /* MPI_Alltoallv plans (doubles per component) */
    double *sbuf, *rbuf;
    size_t bufsz;
};
/* 0 if nranks can split this grid (every rank >= 2 z planes and >= 1 y row), else 2 with a
 * message naming the allowed counts */
int cfd_slab_check(const char *kernel, char cls, int gn, int nranks, char *msg, size_t len);
void cfd_slab_init(struct cfd_slab *s, MPI_Comm comm, int gnx, int gny, int gnz);
void cfd_slab_free(struct cfd_slab *s);
/* geometry of this rank's z-slab with halos (b->n[2] = own planes + halos) */
void cfd_slab_block(const struct cfd_slab *s, struct cfd_block *b);
/* geometry of this rank's y-slab: rows [jstart[r], jstart[r+1]), all x and z */
void cfd_slab_tblock(const struct cfd_slab *s, struct cfd_block *t);
/* fill the halo planes of nf fields of ncomp values per point of the z-slab b */
void cfd_halo(struct cfd_slab *s, const struct cfd_block *b, double *const *f, int nf, int ncomp);
/* z-slab -> y-slab (owned planes only) and back, for nf fields of ncomp values per point;
 * with one rank this copies */
void cfd_to_yslab(struct cfd_slab *s, const struct cfd_block *b, double *const *f,
                  const struct cfd_block *t, double *const *g, int nf, int ncomp);
void cfd_to_zslab(struct cfd_slab *s, const struct cfd_block *t, double *const *g,
                  const struct cfd_block *b, double *const *f, int nf, int ncomp);

/* y-slab -> z-slab including the halo planes of b (each rank receives its owned planes and
 * the <= 2 planes beyond each end), so that an update applied on all stored planes keeps the
 * halos current without a separate cfd_halo exchange */
void cfd_to_zslab_halo(struct cfd_slab *s, const struct cfd_block *t, double *const *g,
                       const struct cfd_block *b, double *const *f, int nf, int ncomp);
/* u += rhs at every stored point of b that lies inside the global interior (halos too) */
void cfd_add_stored(struct cfd_block *b);

/* estimated bytes per rank of the shared fields for a gn^3 grid on nranks z-slabs
 * (u, rhs, forcing, 6 or 7 scalars, plus a y-slab copy of u and rhs and buffers) */
double cfd_mem_per_rank(int gn, int nranks, int with_speed);

/* ---- the driver SP and BT share: state, single-zone run, zone-solver glue (zone.h) ----- */
struct npb_ctx;
struct npb_result;
struct npb_zone;

struct cfd_state {
    struct cfd_consts c;
    struct cfd_block b;     /* this rank's z-slab, or the zone */
    struct cfd_block t;     /* y-slab for the z solves (single zone, P > 1) */
    struct cfd_slab slab;
    int transposed;
};

/* what differs between SP and BT outside their line solves */
struct cfd_solver {
    const char *name;                      /* "sp", "bt" */
    const struct cfd_class *(*cls)(char);  /* cfd_sp_class, cfd_bt_class */
    int with_speed;                        /* SP keeps the sound speed per point */
    void (*adi)(struct cfd_state *s);      /* one time step */
    double ops[4]; /* NPB's operation count per step: ops[0] n^3 + ops[1] n^2 + ops[2] n + ops[3] */
};

/* npb_kernel.check for an SP/BT class on nranks z-slabs */
int cfd_check(const struct cfd_solver *sv, char cls, int nranks, char *msg, size_t len);
/* npb_kernel.run: set up, one untimed step, the timed steps, verification, cleanup */
void cfd_run(const struct cfd_solver *sv, const struct npb_ctx *ctx, struct npb_result *res);
/* npb_zone_solver init / norms / release on a cfd_state per zone */
int cfd_zone_init(struct npb_zone *z, double dt, int with_speed);
void cfd_zone_norms(struct npb_zone *z, double rhs_sq[5], double err_sq[5]);
void cfd_zone_release(struct npb_zone *z);

#endif
