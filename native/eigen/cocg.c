/* Block of COCG solves: (z I - A) y_c = v_c, c = 0..L-1, for one complex shift z.
 *
 * A is real symmetric, so z I - A is complex symmetric (not Hermitian): COCG (conjugate
 * orthogonal CG, van der Vorst & Melissen 1990) is CG with the bilinear form x^T y instead of
 * x^H y, short recurrences, one product per iteration.  The L columns share each sweep over
 * the matrix (rows stored as n x L blocks), which is what makes a block of right-hand sides
 * cheaper than L separate solves.  Converged columns are frozen. */
#include "eigen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

long eig_cocg(const struct csr *a, int L, double zr, double zi, const double *v, double *y,
              double tol, int maxit, double *resid, double *flops)
{
    const int n = a->n, L2 = 2 * L;
    const size_t len = (size_t)n * L2;
    double *r = eig_alloc(len * sizeof(double), "the COCG residuals");
    double *p = eig_alloc(len * sizeof(double), "the COCG directions");
    double *q = eig_alloc(len * sizeof(double), "the COCG products");
    double rho[2 * EIG_MAX_BLOCK], bnorm[EIG_MAX_BLOCK], rnorm[EIG_MAX_BLOCK];
    int active[EIG_MAX_BLOCK];
    long matvecs = 0;
    double fl = 0.0;

    memset(y, 0, len * sizeof(double));
    double b2[EIG_MAX_BLOCK] = {0};
#pragma omp parallel for reduction(+ : b2[:L]) schedule(static)
    for (int i = 0; i < n; i++)
        for (int c = 0; c < L; c++) {
            double vi = v[(size_t)i * L + c];
            r[(size_t)i * L2 + 2 * c] = vi;
            r[(size_t)i * L2 + 2 * c + 1] = 0.0;
            p[(size_t)i * L2 + 2 * c] = vi;
            p[(size_t)i * L2 + 2 * c + 1] = 0.0;
            b2[c] += vi * vi;
        }
    int nactive = 0;
    for (int c = 0; c < L; c++) {
        bnorm[c] = sqrt(b2[c]);
        rnorm[c] = 1.0;
        rho[2 * c] = b2[c]; /* r^T r of a real r */
        rho[2 * c + 1] = 0.0;
        active[c] = b2[c] > 0.0;
        nactive += active[c];
    }

    /* one parallel region for the whole solve: a fork per loop would cost more than the
     * loop on small grids; the scalar recurrences run in `single` sections */
    double sig[2 * EIG_MAX_BLOCK] = {0}, rr[3 * EIG_MAX_BLOCK] = {0};
    double alpha[2 * EIG_MAX_BLOCK], beta[2 * EIG_MAX_BLOCK];
    const int L3 = 3 * L;
    int it = 0;
#pragma omp parallel
    for (;;) {
        if (it >= maxit || nactive == 0) /* shared, read by every thread after a barrier */
            break;
        /* q = (z I - A) p and sigma = p^T q, every column (frozen ones are cheap to carry) */
#pragma omp for reduction(+ : sig[:L2]) schedule(static)
        for (int i = 0; i < n; i++) {
            double acc[2 * EIG_MAX_BLOCK];
            const double *pi = p + (size_t)i * L2;
            for (int c = 0; c < L; c++) {
                acc[2 * c] = zr * pi[2 * c] - zi * pi[2 * c + 1];
                acc[2 * c + 1] = zr * pi[2 * c + 1] + zi * pi[2 * c];
            }
            for (int k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) {
                const double *pj = p + (size_t)a->col[k] * L2;
                double w = a->val[k];
                for (int c = 0; c < L2; c++)
                    acc[c] -= w * pj[c];
            }
            double *qi = q + (size_t)i * L2;
            for (int c = 0; c < L; c++) {
                qi[2 * c] = acc[2 * c];
                qi[2 * c + 1] = acc[2 * c + 1];
                sig[2 * c] += pi[2 * c] * acc[2 * c] - pi[2 * c + 1] * acc[2 * c + 1];
                sig[2 * c + 1] += pi[2 * c] * acc[2 * c + 1] + pi[2 * c + 1] * acc[2 * c];
            }
        }
#pragma omp single
        {
            fl += (double)n * L * (4.0 * 5 + 6 + 8);
            matvecs += nactive;
            for (int c = 0; c < L; c++) {
                double sr = sig[2 * c], si = sig[2 * c + 1], d = sr * sr + si * si;
                if (!active[c] || d == 0.0) { /* frozen, or a breakdown: stop this column */
                    alpha[2 * c] = alpha[2 * c + 1] = 0.0;
                    if (active[c]) {
                        active[c] = 0;
                        nactive--;
                    }
                    continue;
                }
                alpha[2 * c] = (rho[2 * c] * sr + rho[2 * c + 1] * si) / d;
                alpha[2 * c + 1] = (rho[2 * c + 1] * sr - rho[2 * c] * si) / d;
            }
            memset(sig, 0, sizeof sig);
        }
        /* x += alpha p, r -= alpha q, then rho' = r^T r and ||r||^2 */
#pragma omp for reduction(+ : rr[:L3]) schedule(static)
        for (int i = 0; i < n; i++) {
            double *yi = y + (size_t)i * L2, *ri = r + (size_t)i * L2;
            const double *pi = p + (size_t)i * L2, *qi = q + (size_t)i * L2;
            for (int c = 0; c < L; c++) {
                if (!active[c])
                    continue;
                double ar = alpha[2 * c], ai = alpha[2 * c + 1];
                yi[2 * c] += ar * pi[2 * c] - ai * pi[2 * c + 1];
                yi[2 * c + 1] += ar * pi[2 * c + 1] + ai * pi[2 * c];
                double xr = ri[2 * c] - (ar * qi[2 * c] - ai * qi[2 * c + 1]);
                double xi = ri[2 * c + 1] - (ar * qi[2 * c + 1] + ai * qi[2 * c]);
                ri[2 * c] = xr;
                ri[2 * c + 1] = xi;
                rr[3 * c] += xr * xr - xi * xi;
                rr[3 * c + 1] += 2.0 * xr * xi;
                rr[3 * c + 2] += xr * xr + xi * xi;
            }
        }
#pragma omp single
        {
            fl += (double)n * nactive * 24.0;
            for (int c = 0; c < L; c++) {
                beta[2 * c] = beta[2 * c + 1] = 0.0;
                if (!active[c])
                    continue;
                rnorm[c] = sqrt(rr[3 * c + 2]) / bnorm[c];
                double nr = rr[3 * c], ni = rr[3 * c + 1];
                double d = rho[2 * c] * rho[2 * c] + rho[2 * c + 1] * rho[2 * c + 1];
                if (rnorm[c] <= tol || d == 0.0) {
                    active[c] = 0;
                    nactive--;
                    continue;
                }
                beta[2 * c] = (nr * rho[2 * c] + ni * rho[2 * c + 1]) / d;
                beta[2 * c + 1] = (ni * rho[2 * c] - nr * rho[2 * c + 1]) / d;
                rho[2 * c] = nr;
                rho[2 * c + 1] = ni;
            }
            memset(rr, 0, sizeof rr);
            fl += (double)n * nactive * 8.0;
            it++;
        }
        /* p = r + beta p (nothing to do for frozen columns; the loop ends when all are) */
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            double *pi = p + (size_t)i * L2;
            const double *ri = r + (size_t)i * L2;
            for (int c = 0; c < L; c++) {
                if (!active[c])
                    continue;
                double br = beta[2 * c], bi = beta[2 * c + 1];
                double pr = pi[2 * c], pim = pi[2 * c + 1];
                pi[2 * c] = ri[2 * c] + br * pr - bi * pim;
                pi[2 * c + 1] = ri[2 * c + 1] + br * pim + bi * pr;
            }
        }
    }
    double worst = 0.0;
    for (int c = 0; c < L; c++)
        if (rnorm[c] > worst)
            worst = rnorm[c];
    *resid = worst;
    *flops += fl;
    free(r);
    free(p);
    free(q);
    return matvecs;
}
