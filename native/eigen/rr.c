/* The dense step every rank repeats: orthonormalize the moment subspace, project A on it,
 * solve the small symmetric eigenproblem with LAPACK (dsyev), keep the Ritz pairs inside the
 * interval whose residual is small.
 *
 * The tall products (n x K by K x K) are written here with OpenMP; only the K x K
 * eigenproblems go to LAPACK.  The orthonormalization is SVQB (Stathopoulos & Wu 2002) done
 * twice: the first pass drops the directions the filter left numerically empty (the moment
 * subspace is rank-deficient by design: M*L exceeds the eigenvalues inside), the second
 * restores the orthogonality the first lost to rounding. */
#include "eigen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* reference LAPACK (Fortran), linked statically: see the Makefile */
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t, size_t);

static void syev(int k, double *a, double *w)
{
    int info = 0, lwork = -1;
    double query;
    dsyev_("V", "U", &k, a, &k, w, &query, &lwork, &info, 1, 1);
    lwork = (int)query;
    double *work = eig_alloc((size_t)lwork * sizeof(double), "the LAPACK workspace");
    dsyev_("V", "U", &k, a, &k, w, work, &lwork, &info, 1, 1);
    free(work);
    if (info != 0)
        eig_fatal(1, "LAPACK dsyev failed (info %d) on a %d x %d matrix", info, k, k);
}

/* g = x^T y for n x k row-major x, y (k x k, row-major, symmetric when x == y) */
static void gram(int n, int k, const double *x, const double *y, double *g, double *flops)
{
    memset(g, 0, (size_t)k * k * sizeof(double));
#pragma omp parallel
    {
        double *loc = calloc((size_t)k * k, sizeof(double));
        if (!loc)
            eig_fatal(3, "out of memory for a %d x %d Gram matrix", k, k);
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            const double *xi = x + (size_t)i * k, *yi = y + (size_t)i * k;
            for (int a = 0; a < k; a++) {
                double xa = xi[a];
                double *la = loc + (size_t)a * k;
                for (int b = 0; b < k; b++)
                    la[b] += xa * yi[b];
            }
        }
#pragma omp critical
        for (size_t j = 0; j < (size_t)k * k; j++)
            g[j] += loc[j];
        free(loc);
    }
    *flops += 2.0 * n * k * k;
}

/* s (n x k, row-major, leading dimension ld) <- s * c, c is k x kout (kout <= k), in place */
static void apply_right(int n, int ld, int k, int kout, double *s, const double *c, double *flops)
{
#pragma omp parallel
    {
        double *row = malloc((size_t)kout * sizeof(double));
        if (!row)
            eig_fatal(3, "out of memory for a row of %d", kout);
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            double *si = s + (size_t)i * ld;
            for (int b = 0; b < kout; b++)
                row[b] = 0.0;
            for (int a = 0; a < k; a++) {
                double sa = si[a];
                const double *ca = c + (size_t)a * kout;
                for (int b = 0; b < kout; b++)
                    row[b] += sa * ca[b];
            }
            memcpy(si, row, (size_t)kout * sizeof(double));
        }
        free(row);
    }
    *flops += 2.0 * n * k * kout;
}

/* pack the first k of ld columns of every row to a stride of k, in place (rows move left) */
static void pack(int n, int ld, int k, double *s)
{
    if (ld != k)
        for (int i = 1; i < n; i++)
            memmove(s + (size_t)i * k, s + (size_t)i * ld, (size_t)k * sizeof(double));
}

/* one SVQB pass on the packed n x k matrix s, in place; returns the columns kept (s is then
 * packed n x kept).  Directions with eigenvalue <= drop * largest of the scaled Gram matrix
 * are dropped. */
static int svqb(int n, int k, double *s, double drop, double *flops)
{
    double *g = eig_alloc((size_t)k * k * sizeof(double), "the Gram matrix");
    double *w = eig_alloc((size_t)k * sizeof(double), "the Gram eigenvalues");
    double *d = eig_alloc((size_t)k * sizeof(double), "the column scales");
    gram(n, k, s, s, g, flops);
    for (int a = 0; a < k; a++)
        d[a] = g[(size_t)a * k + a] > 0.0 ? 1.0 / sqrt(g[(size_t)a * k + a]) : 0.0;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++)
            g[(size_t)a * k + b] *= d[a] * d[b];
    syev(k, g, w); /* g now holds the eigenvectors, column j at g[j*k + .] (Fortran order) */
    double top = w[k - 1];
    int kept = 0;
    for (int j = 0; j < k; j++)
        kept += w[j] > drop * top && w[j] > 0.0;
    /* c = D U_kept W^(-1/2), k x kept, row-major; the largest directions first */
    double *c = eig_alloc((size_t)k * (kept ? kept : 1) * sizeof(double), "the SVQB transform");
    for (int b = 0; b < kept; b++) {
        int j = k - 1 - b;
        double sc = 1.0 / sqrt(w[j]);
        for (int a = 0; a < k; a++)
            c[(size_t)a * kept + b] = d[a] * g[(size_t)j * k + a] * sc;
    }
    apply_right(n, k, k, kept, s, c, flops);
    pack(n, k, kept, s);
    free(c);
    free(d);
    free(w);
    free(g);
    return kept;
}

void eig_rayleigh_ritz(const struct csr *a, int K, double *s, double lo, double hi,
                       double resid_tol, struct eig_ritz *out)
{
    const int n = a->n;
    memset(out, 0, sizeof *out);
    /* 1e-14 on the squared singular values: directions below 1e-7 of the largest are noise
     * (the Gram matrix squares the condition number) */
    int k = svqb(n, K, s, 1e-14, &out->flops);
    if (k == 0)
        eig_fatal(1, "the moment subspace is empty: every shifted solve returned zero");
    k = svqb(n, k, s, 1e-15, &out->flops);
    out->rank = k;
    const double *q = s; /* the orthonormal basis, packed n x k */
    double *aq = eig_alloc((size_t)n * k * sizeof(double), "A times the basis");
    eig_spmm_real(a, k, q, aq);
    out->flops += 2.0 * a->rowptr[n] * k;
    double *h = eig_alloc((size_t)k * k * sizeof(double), "the projected matrix");
    double *theta = eig_alloc((size_t)k * sizeof(double), "the Ritz values");
    gram(n, k, q, aq, h, &out->flops);
    for (int x = 0; x < k; x++) /* symmetrize: rounding made Q^T A Q slightly unsymmetric */
        for (int y = x + 1; y < k; y++) {
            double m = 0.5 * (h[(size_t)x * k + y] + h[(size_t)y * k + x]);
            h[(size_t)x * k + y] = h[(size_t)y * k + x] = m;
        }
    syev(k, h, theta); /* h: eigenvectors, column j at h[j*k + .] */

    /* residuals ||A Q w - theta Q w|| of the Ritz pairs inside the interval, in one sweep */
    int sel[4096], ns = 0;
    for (int j = 0; j < k && ns < 4096; j++)
        if (theta[j] > lo && theta[j] < hi)
            sel[ns++] = j;
    double *res2 = calloc((size_t)ns + 1, sizeof(double));
    if (!res2)
        eig_fatal(3, "out of memory for %d residuals", ns);
#pragma omp parallel
    {
        double *loc = calloc((size_t)ns + 1, sizeof(double));
        if (!loc)
            eig_fatal(3, "out of memory for %d residuals", ns);
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            const double *qi = q + (size_t)i * k, *ai = aq + (size_t)i * k;
            for (int t = 0; t < ns; t++) {
                const double *w = h + (size_t)sel[t] * k;
                double u = 0.0, v = 0.0;
                for (int b = 0; b < k; b++) {
                    u += ai[b] * w[b];
                    v += qi[b] * w[b];
                }
                double r = u - theta[sel[t]] * v;
                loc[t] += r * r;
            }
        }
#pragma omp critical
        for (int t = 0; t < ns; t++)
            res2[t] += loc[t];
        free(loc);
    }
    out->flops += 4.0 * n * k * ns;
    out->values = eig_alloc(((size_t)ns + 1) * sizeof(double), "the eigenvalues found");
    for (int t = 0; t < ns; t++) {
        double th = theta[sel[t]], rel = sqrt(res2[t]) / a->norm1;
        if (rel <= resid_tol) {
            out->values[out->nfound++] = th;
            if (rel > out->max_resid)
                out->max_resid = rel;
        } else {
            out->nrejected++;
        }
    }
    free(res2);
    free(theta);
    free(h);
    free(aq);
}
