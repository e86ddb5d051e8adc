/* Shared declarations of vb-eigen (see main.c for the command line, README.md for the method). */
#ifndef VB_EIGEN_H
#define VB_EIGEN_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EIG_VERSION 1 /* of the output format */
#define EIG_MAX_BLOCK 32

/* one problem class: the grid, the block Sakurai-Sugiura parameters, the target interval */
struct eig_class {
    char name;
    int grid;      /* g: the matrix is the 2-D Dirichlet Laplacian on a g x g grid, n = g^2 */
    int block;     /* L: right-hand sides per shifted system (>= the largest multiplicity) */
    int moments;   /* M: moment matrices S_0 .. S_{M-1}; the subspace has M*L columns */
    int points;    /* N: quadrature points on the circle (N/2 systems solved: conjugate pairs) */
    int first;     /* index (ascending, from 0) of the first eigenvalue wanted, about */
    int count;     /* number of eigenvalues wanted, about (the interval ends in a wide gap) */
};

/* compressed sparse rows, symmetric */
struct csr {
    int n;
    int *rowptr, *col;
    double *val;
    double norm1; /* max row sum of |a_ij| (bounds ||A||_2) */
};

/* the target: interval [lo, hi] and what the closed form says is inside it */
struct eig_target {
    double lo, hi;
    int first, count;     /* eigenvalues [first, first + count) of the sorted spectrum */
    int max_multiplicity; /* largest cluster of equal eigenvalues inside */
    double *exact;        /* the count eigenvalues inside, ascending (closed form) */
};

/* laplace.c */
void eig_laplacian(int g, int perturb, struct csr *a);
void eig_target_interval(int g, int first, int count, struct eig_target *t);
/* y = A x for k real columns stored row-major (x[i*k + c]) */
void eig_spmm_real(const struct csr *a, int k, const double *x, double *y);

/* cocg.c: solve (z I - A) Y = V for L real right-hand sides V (row-major n x L) with COCG.
 * Y is complex, interleaved (y[2*(i*L + c)] real, +1 imaginary).  Returns the matrix-vector
 * products done (one per active column per iteration); *resid gets the largest final
 * relative residual; *flops the floating-point operations counted. */
long eig_cocg(const struct csr *a, int L, double zr, double zi, const double *v, double *y,
              double tol, int maxit, double *resid, double *flops);

/* rr.c: Rayleigh-Ritz in the span of the n x K real matrix S (row-major, overwritten). */
struct eig_ritz {
    int rank;      /* columns kept after the rank-revealing orthonormalization */
    int nfound;    /* Ritz values in [lo, hi] with a small residual (the eigenvalues found) */
    int nrejected; /* Ritz values in [lo, hi] whose residual was too large (spurious) */
    double *values;   /* nfound, ascending */
    double max_resid; /* largest ||A x - t x|| / ||A|| among those found */
    double flops;
};
void eig_rayleigh_ritz(const struct csr *a, int K, double *s, double lo, double hi,
                       double resid_tol, struct eig_ritz *out);

/* report */
_Noreturn void eig_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *eig_alloc(size_t bytes, const char *what);
double eig_now(void);

#endif
