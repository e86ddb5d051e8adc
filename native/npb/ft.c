/*
 * FT: 3-D FFT solution of the diffusion equation du/dt = alpha laplace(u)
 * (RNR-94-007 section 2.5), alpha = 1e-6, on an nx x ny x nz periodic grid.
 *
 *  1. U0(x,y,z): complex numbers whose real and imaginary parts are consecutive NPB
 *     deviates (seed 314159265, a = 5^13), x fastest, then y, then z.
 *  2. V = forward 3-D DFT of U0.
 *  3. For t = 1..niter: W = V * exp(-4 alpha pi^2 (i'^2 + j'^2 + k'^2) t), with the
 *     wrapped frequencies i' = i for i < nx/2 else i - nx (likewise j', k');
 *     X_t = inverse DFT of W (normalised by 1/(nx ny nz));
 *     checksum_t = sum_{j=1..1024} X_t(j mod nx, 3j mod ny, 5j mod nz).
 * Verification: every checksum against the published complex value,
 * |c - ref| / |ref| <= 1e-12.
 *
 * FFTs: own radix-2 Stockham (self-sorting, out of place) on batches of lines copied
 * into a contiguous [n][batch] buffer.  Decomposition: z-slabs in physical space,
 * y-slabs in frequency space; one MPI_Alltoall transposes between them.  On one rank
 * there is nothing to transpose: the z lines are transformed where they lie (stride
 * nx ny) and frequency space keeps the physical layout, as the reference's 0-D layout
 * does (the transposes cost a quarter of the 1-rank time).  Rank count: a power of
 * two no larger than ny and nz.
 *
 * Operation count (NPB's Mop/s), N = nx ny nz, ln = natural logarithm:
 *   N * (14.8157 + 7.19641 ln N + (5.23518 + 7.21113 ln N) * niter)
 * Timed section: initial conditions, forward FFT, niter x (evolve, inverse FFT,
 * checksum); the same work runs once untimed before (warm-up).
 */
#include "classes.h"
#include "npb.h"
#include "randlc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FT_BATCH 16 /* lines per FFT batch */
#define FT_PI 3.141592653589793238462643383279502884

static int ft_check(char cls, int nranks, char *msg, size_t len)
{
    const struct ft_class *p = ft_class_get(cls);
    if (!npb_is_pow2(nranks)) {
        snprintf(msg, len, "ft needs a power-of-two number of ranks, got %d", nranks);
        return 2;
    }
    int lim = p->ny < p->nz ? p->ny : p->nz;
    if (nranks > lim) {
        snprintf(msg, len, "ft class %c (%dx%dx%d) can use at most %d ranks, got %d", cls, p->nx,
                 p->ny, p->nz, lim, nranks);
        return 2;
    }
    return 0;
}

static double ft_mem(char cls, int nranks)
{
    const struct ft_class *p = ft_class_get(cls);
    double pts = (double)p->nx * p->ny * p->nz / nranks;
    /* state, work, send and receive buffers (complex; no transposes on one rank),
     * evolution factors (real) */
    return pts * ((nranks > 1 ? 4 : 2) * 16.0 + 8.0) * 1.03 + 8.0 * 1024 * 1024;
}

struct plan {
    int n;
    double *w; /* w[k] = exp(-2 pi i k / n), k < n/2, interleaved re, im */
};

static void plan_init(struct plan *pl, int n)
{
    pl->n = n;
    pl->w = npb_alloc(sizeof(double) * (n > 1 ? n : 2), "ft twiddles");
    for (int k = 0; k < n / 2; k++) {
        double th = 2.0 * FT_PI * (double)k / (double)n;
        pl->w[2 * k] = cos(th);
        pl->w[2 * k + 1] = -sin(th);
    }
}

/*
 * DFT of B interleaved lines laid out as x[n][2][B]: for each element index k, the
 * B real parts, then the B imaginary parts, so that the butterflies run over unit-
 * stride vectors of B (split re/im vectorizes; interleaved complex did not at -O2).
 * sign -1: forward (exp(-2 pi i jk/n)), +1: inverse (unnormalised).  y is scratch of
 * the same size.  Returns the buffer holding the result (x or y).
 */
static double *fft_batch(const struct plan *pl, int sign, double *x, double *y, int B)
{
    const int n = pl->n;
    double *src = x, *dst = y;
    const double sg = sign < 0 ? 1.0 : -1.0; /* conjugate twiddles for the inverse */
    const long row = 2L * B;
    for (int ncur = n, s = 1; ncur > 1; ncur /= 2, s *= 2) {
        const int m = ncur / 2;
        for (int p = 0; p < m; p++) {
            const double wr = pl->w[2L * p * s], wi = sg * pl->w[2L * p * s + 1];
            for (int q = 0; q < s; q++) {
                const double *a = src + row * (q + (long)s * p);
                const double *b = src + row * (q + (long)s * (p + m));
                double *o0 = dst + row * (q + (long)s * 2 * p);
                double *o1 = dst + row * (q + (long)s * (2 * p + 1));
#pragma omp simd
                for (int t = 0; t < B; t++) {
                    double ar = a[t], ai = a[B + t], br = b[t], bi = b[B + t];
                    o0[t] = ar + br;
                    o0[B + t] = ai + bi;
                    double dr = ar - br, di = ai - bi;
                    o1[t] = dr * wr - di * wi;
                    o1[B + t] = dr * wi + di * wr;
                }
            }
        }
        double *tmp = src;
        src = dst;
        dst = tmp;
    }
    return src;
}

struct ft {
    MPI_Comm comm;
    int rank, nranks;
    int nx, ny, nz, nzl, nyl, z0, y0;
    long npts; /* local points */
    struct plan px, py, pz;
    int nthreads;
    double **scratch; /* per thread: 2 buffers of max(n) * FT_BATCH complex */
    MPI_Datatype cplx;
};

/*
 * 1-D DFTs along one dimension of many lines: nplanes planes plane_dist apart, each
 * with nlines lines line_dist apart, elements elem_stride apart (complex units).
 * Lines are read from data and written to out at the same offsets (out may be data).
 */
static void fft_dim(struct ft *f, const struct plan *pl, int sign, const double *data, double *out,
                    int nplanes, long plane_dist, int nlines, long line_dist, long elem_stride)
{
    const int n = pl->n;
    const int nblk = (nlines + FT_BATCH - 1) / FT_BATCH;
    const long items = (long)nplanes * nblk;
#pragma omp parallel for schedule(static)
    for (long it = 0; it < items; it++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *buf = f->scratch[tid], *buf2 = buf + 2L * n * FT_BATCH;
        long pl_i = it / nblk;
        int l0 = (int)(it % nblk) * FT_BATCH;
        int B = nlines - l0 < FT_BATCH ? nlines - l0 : FT_BATCH;
        const long off = 2 * (pl_i * plane_dist + (long)l0 * line_dist);
        const double *base = data + off;
        double *obase = out + off;
        for (int k = 0; k < n; k++) {
            double *o = buf + 2L * k * B;
            const double *s = base + 2 * k * elem_stride;
            for (int b = 0; b < B; b++) {
                o[b] = s[2 * b * line_dist];
                o[B + b] = s[2 * b * line_dist + 1];
            }
        }
        double *r = fft_batch(pl, sign, buf, buf2, B);
        for (int k = 0; k < n; k++) {
            const double *o = r + 2L * k * B;
            double *s = obase + 2 * k * elem_stride;
            for (int b = 0; b < B; b++) {
                s[2 * b * line_dist] = o[b];
                s[2 * b * line_dist + 1] = o[B + b];
            }
        }
    }
}

/* physical layout a[z_local][y][x]  <->  frequency layout b[y_local][z][x] */
static void transpose_zy(struct ft *f, const double *a, double *b, double *sbuf, double *rbuf)
{
    const int nx = f->nx, ny = f->ny, nz = f->nz, nzl = f->nzl, nyl = f->nyl;
    const long blk = (long)nzl * nyl * nx; /* complex per peer */
    const size_t rowb = sizeof(double) * 2 * nx;
#pragma omp parallel for collapse(2)
    for (int d = 0; d < f->nranks; d++)
        for (int zl = 0; zl < nzl; zl++)
            for (int yl = 0; yl < nyl; yl++)
                memcpy(sbuf + 2 * (d * blk + ((long)zl * nyl + yl) * nx),
                       a + 2 * (((long)zl * ny + d * nyl + yl) * nx), rowb);
    MPI_Alltoall(sbuf, (int)blk, f->cplx, rbuf, (int)blk, f->cplx, f->comm);
#pragma omp parallel for collapse(2)
    for (int s = 0; s < f->nranks; s++)
        for (int zl = 0; zl < nzl; zl++)
            for (int yl = 0; yl < nyl; yl++)
                memcpy(b + 2 * (((long)yl * nz + s * nzl + zl) * nx),
                       rbuf + 2 * (s * blk + ((long)zl * nyl + yl) * nx), rowb);
}

static void transpose_yz(struct ft *f, const double *b, double *a, double *sbuf, double *rbuf)
{
    const int nx = f->nx, ny = f->ny, nz = f->nz, nzl = f->nzl, nyl = f->nyl;
    const long blk = (long)nzl * nyl * nx;
    const size_t rowb = sizeof(double) * 2 * nx;
#pragma omp parallel for collapse(2)
    for (int d = 0; d < f->nranks; d++)
        for (int yl = 0; yl < nyl; yl++)
            for (int zl = 0; zl < nzl; zl++)
                memcpy(sbuf + 2 * (d * blk + ((long)yl * nzl + zl) * nx),
                       b + 2 * (((long)yl * nz + d * nzl + zl) * nx), rowb);
    MPI_Alltoall(sbuf, (int)blk, f->cplx, rbuf, (int)blk, f->cplx, f->comm);
#pragma omp parallel for collapse(2)
    for (int s = 0; s < f->nranks; s++)
        for (int yl = 0; yl < nyl; yl++)
            for (int zl = 0; zl < nzl; zl++)
                memcpy(a + 2 * (((long)zl * ny + s * nyl + yl) * nx),
                       rbuf + 2 * (s * blk + ((long)yl * nzl + zl) * nx), rowb);
}

/* physical (z-slab) -> frequency (y-slab; on one rank the physical layout); a is overwritten */
static void fft3_forward(struct ft *f, double *a, double *b, double *sbuf, double *rbuf)
{
    const long plane = (long)f->nx * f->ny;
    fft_dim(f, &f->px, -1, a, a, f->nzl, plane, f->ny, f->nx, 1);
    fft_dim(f, &f->py, -1, a, a, f->nzl, plane, f->nx, 1, f->nx);
    if (f->nranks == 1) {
        fft_dim(f, &f->pz, -1, a, b, 1, 0, (int)plane, 1, plane);
        return;
    }
    transpose_zy(f, a, b, sbuf, rbuf);
    fft_dim(f, &f->pz, -1, b, b, f->nyl, (long)f->nz * f->nx, f->nx, 1, f->nx);
}

/* frequency -> physical (z-slab), unnormalised; b is overwritten (a may be b) */
static void fft3_inverse(struct ft *f, double *b, double *a, double *sbuf, double *rbuf)
{
    const long plane = (long)f->nx * f->ny;
    if (f->nranks == 1) {
        fft_dim(f, &f->pz, 1, b, a, 1, 0, (int)plane, 1, plane);
    } else {
        fft_dim(f, &f->pz, 1, b, b, f->nyl, (long)f->nz * f->nx, f->nx, 1, f->nx);
        transpose_yz(f, b, a, sbuf, rbuf);
    }
    fft_dim(f, &f->py, 1, a, a, f->nzl, plane, f->nx, 1, f->nx);
    fft_dim(f, &f->px, 1, a, a, f->nzl, plane, f->ny, f->nx, 1);
}

static void initial_conditions(struct ft *f, double *a)
{
    const long plane = (long)f->nx * f->ny;
    uint64_t x = lcg_skip(FT_SEED, NPB_A, (uint64_t)(2 * plane) * (uint64_t)f->z0);
    vranlc(2 * plane * f->nzl, &x, NPB_A, a);
}

static int wrap(int i, int n) { return i < n / 2 ? i : i - n; }

static void ft_run(const struct npb_ctx *ctx, struct npb_result *res)
{
    const struct ft_class *p = ft_class_get(ctx->cls);
    struct ft f;
    f.comm = ctx->comm;
    f.rank = ctx->rank;
    f.nranks = ctx->nranks;
    f.nx = p->nx;
    f.ny = p->ny;
    f.nz = p->nz;
    f.nzl = p->nz / f.nranks;
    f.nyl = p->ny / f.nranks;
    f.z0 = f.nzl * f.rank;
    f.y0 = f.nyl * f.rank;
    f.npts = (long)f.nx * f.ny * f.nzl;
    plan_init(&f.px, f.nx);
    plan_init(&f.py, f.ny);
    plan_init(&f.pz, f.nz);
    f.nthreads = 1;
#ifdef _OPENMP
    f.nthreads = omp_get_max_threads();
#endif
    int nmax = f.nx > f.ny ? f.nx : f.ny;
    nmax = nmax > f.nz ? nmax : f.nz;
    f.scratch = npb_alloc(sizeof(double *) * f.nthreads, "ft scratch");
    for (int t = 0; t < f.nthreads; t++)
        f.scratch[t] = npb_alloc(sizeof(double) * 4 * nmax * FT_BATCH, "ft scratch");
    MPI_Type_contiguous(2, MPI_DOUBLE, &f.cplx);
    MPI_Type_commit(&f.cplx);

    const size_t bytes = sizeof(double) * 2 * (size_t)f.npts;
    double *u0 = npb_alloc(bytes, "ft state");   /* frequency layout */
    double *u1 = npb_alloc(bytes, "ft work");    /* physical / frequency work */
    /* the transposes' buffers; one rank has no transposes */
    double *sbuf = f.nranks > 1 ? npb_alloc(bytes, "ft send") : NULL;
    double *rbuf = f.nranks > 1 ? npb_alloc(bytes, "ft receive") : NULL;
    double *ex = npb_alloc(sizeof(double) * (size_t)f.npts, "ft factors");

    const double alpha = FT_ALPHA * (ctx->perturb ? 1.01 : 1.0);
    const double ap = -4.0 * alpha * FT_PI * FT_PI;
    const double ntotal = (double)f.nx * f.ny * f.nz;
    double sums[FT_MAX_ITER][2];

    for (int pass = 0; pass < 2; pass++) { /* pass 0: untimed warm-up */
        MPI_Barrier(ctx->comm);
        double t0 = npb_wtime();
        /* evolution factors exp(-4 alpha pi^2 |k|^2) in the frequency layout:
         * [y_local][z][x], or [z][y][x] on one rank */
        const int local = f.nranks == 1;
#pragma omp parallel for collapse(2)
        for (int yl = 0; yl < f.nyl; yl++)
            for (int z = 0; z < f.nz; z++) {
                int jj = wrap(f.y0 + yl, f.ny), kk = wrap(z, f.nz);
                double *e = ex + (local ? (long)z * f.ny + yl : (long)yl * f.nz + z) * f.nx;
                for (int x = 0; x < f.nx; x++) {
                    int ii = wrap(x, f.nx);
                    e[x] = exp(ap * (double)(ii * ii + jj * jj + kk * kk));
                }
            }
        initial_conditions(&f, u1);
        fft3_forward(&f, u1, u0, sbuf, rbuf);
        int iters = pass == 0 ? 1 : p->niter;
        for (int t = 0; t < iters; t++) {
#pragma omp parallel for
            for (long i = 0; i < f.npts; i++) {
                u0[2 * i] *= ex[i];
                u0[2 * i + 1] *= ex[i];
                u1[2 * i] = u0[2 * i];
                u1[2 * i + 1] = u0[2 * i + 1];
            }
            fft3_inverse(&f, u1, u1, sbuf, rbuf); /* in place: b is packed before a is written */
            /* u1 now holds X_t * ntotal in the physical layout */
            double s[2] = {0.0, 0.0}, g[2];
            for (int j = 1; j <= 1024; j++) {
                int q = j % f.nx, r = (3 * j) % f.ny, z = (5 * j) % f.nz;
                if (z >= f.z0 && z < f.z0 + f.nzl) {
                    const double *c = u1 + 2 * (((long)(z - f.z0) * f.ny + r) * f.nx + q);
                    s[0] += c[0];
                    s[1] += c[1];
                }
            }
            MPI_Allreduce(s, g, 2, MPI_DOUBLE, MPI_SUM, ctx->comm);
            sums[t][0] = g[0] / ntotal;
            sums[t][1] = g[1] / ntotal;
        }
        double tt = npb_wtime() - t0;
        if (pass == 1)
            res->time_s = npb_time_max(ctx->comm, tt);
    }

    double lnN = log(ntotal);
    double ops = ntotal * (14.8157 + 7.19641 * lnN + (5.23518 + 7.21113 * lnN) * p->niter);
    res->mops = res->time_s > 0 ? ops / res->time_s / 1e6 : 0.0;
    res->iterations = p->niter;
    snprintf(res->size, sizeof res->size, "%dx%dx%d", f.nx, f.ny, f.nz);
    for (int t = 0; t < p->niter; t++) {
        char name[24];
        snprintf(name, sizeof name, "checksum[%d]", t + 1);
        npb_add_check_complex(res, name, sums[t][0], sums[t][1], p->sum[t][0], p->sum[t][1],
                              FT_EPSILON);
    }

    MPI_Type_free(&f.cplx);
    for (int t = 0; t < f.nthreads; t++)
        free(f.scratch[t]);
    free(f.scratch);
    free(f.px.w);
    free(f.py.w);
    free(f.pz.w);
    free(u0);
    free(u1);
    free(sbuf);
    free(rbuf);
    free(ex);
}

const struct npb_kernel npb_ft = {"ft", 1, ft_check, ft_mem, ft_run};
