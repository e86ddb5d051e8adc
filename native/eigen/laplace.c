/* The test matrix, the 2-D Dirichlet Laplacian, and its eigenvalues in closed form. */
#include "eigen.h"

#include <math.h>
#include <stdlib.h>

#define EIG_PI 3.14159265358979323846

/* 5-point stencil on a g x g grid (h = 1): 4 on the diagonal, -1 to each neighbour. */
void eig_laplacian(int g, int perturb, struct csr *a)
{
    int n = g * g;
    a->n = n;
    a->rowptr = eig_alloc(((size_t)n + 1) * sizeof(int), "the matrix row pointers");
    a->col = eig_alloc((size_t)n * 5 * sizeof(int), "the matrix column indices");
    a->val = eig_alloc((size_t)n * 5 * sizeof(double), "the matrix values");
    /* --perturb: a relative 1e-6 on the diagonal moves every eigenvalue by 4e-6, far more
     * than the verification tolerance, and far less than the gaps at the interval's ends */
    double diag = perturb ? 4.0 * (1.0 + 1e-6) : 4.0;
    int k = 0;
    for (int y = 0; y < g; y++)
        for (int x = 0; x < g; x++) {
            int i = y * g + x;
            a->rowptr[i] = k;
            /* columns ascending: the rows are read in order by every product */
            if (y > 0) { a->col[k] = i - g; a->val[k++] = -1.0; }
            if (x > 0) { a->col[k] = i - 1; a->val[k++] = -1.0; }
            a->col[k] = i; a->val[k++] = diag;
            if (x < g - 1) { a->col[k] = i + 1; a->val[k++] = -1.0; }
            if (y < g - 1) { a->col[k] = i + g; a->val[k++] = -1.0; }
        }
    a->rowptr[n] = k;
    a->norm1 = diag + 4.0;
}

void eig_spmm_real(const struct csr *a, int k, const double *x, double *y)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < a->n; i++) {
        double *yi = y + (size_t)i * k;
        for (int c = 0; c < k; c++)
            yi[c] = 0.0;
        for (int p = a->rowptr[i]; p < a->rowptr[i + 1]; p++) {
            const double *xj = x + (size_t)a->col[p] * k;
            double v = a->val[p];
            for (int c = 0; c < k; c++)
                yi[c] += v * xj[c];
        }
    }
}

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* Eigenvalues of the g x g Dirichlet Laplacian: mu_k + mu_l, mu_k = 4 sin^2(pi k / (2(g+1))),
 * k, l = 1..g.  Each interval end is put in the widest gap among a few neighbouring positions,
 * so no eigenvalue (nor a cluster of equal ones) sits near an end and the count inside is
 * exact.  Equal eigenvalues (mu_k + mu_l = mu_l + mu_k, and accidental ones) are counted as one
 * cluster when they agree to 1e-10 relative: the block size must be at least that large. */
void eig_target_interval(int g, int first, int count, struct eig_target *t)
{
    size_t n = (size_t)g * g;
    double *mu = eig_alloc((size_t)g * sizeof(double), "the 1-D eigenvalues");
    double *ev = eig_alloc(n * sizeof(double), "the closed-form spectrum");
    for (int k = 1; k <= g; k++) {
        double s = sin(EIG_PI * k / (2.0 * (g + 1)));
        mu[k - 1] = 4.0 * s * s;
    }
    for (int k = 0; k < g; k++)
        for (int l = 0; l < g; l++)
            ev[(size_t)k * g + l] = mu[k] + mu[l];
    qsort(ev, n, sizeof(double), cmp_double);

    const int window = 4;
    int lo = first;
    double gap = -1.0;
    for (int i = first - window; i <= first + window; i++)
        if (i >= 1 && (size_t)i < n && ev[i] - ev[i - 1] > gap) {
            gap = ev[i] - ev[i - 1];
            lo = i;
        }
    gap = -1.0;
    int hi = lo + count;
    for (int j = lo + count - window; j <= lo + count + window; j++)
        if (j > lo && (size_t)j < n && ev[j] - ev[j - 1] > gap) {
            gap = ev[j] - ev[j - 1];
            hi = j;
        }
    t->first = lo;
    t->count = hi - lo;
    t->lo = 0.5 * (ev[lo - 1] + ev[lo]);
    t->hi = 0.5 * (ev[hi - 1] + ev[hi]);
    t->exact = eig_alloc((size_t)t->count * sizeof(double), "the eigenvalues wanted");
    int run = 1;
    t->max_multiplicity = 1;
    for (int i = lo; i < hi; i++) {
        t->exact[i - lo] = ev[i];
        if (i > lo && ev[i] - ev[i - 1] <= 1e-10 * ev[i])
            run++;
        else
            run = 1;
        if (run > t->max_multiplicity)
            t->max_multiplicity = run;
    }
    free(ev);
    free(mu);
}
