/* Shared declarations of vb-npb: run context, results, kernel table. */
#ifndef VB_NPB_H
#define VB_NPB_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#define NPB_VERSION 1 /* of the output format */

struct npb_ctx {
    MPI_Comm comm;
    int rank, nranks;
    int threads; /* OpenMP threads per rank */
    char cls;    /* S W A B C */
    int perturb; /* hidden debug flag: change one input value so verification fails */
};

#define NPB_MAX_CHECKS 48
struct npb_check {
    char name[24];
    double value, reference; /* for complex checks: the real parts */
    int is_complex;
    double value_im, reference_im;
    double rel_err, epsilon; /* rel_err = |value - reference| / |reference| (complex modulus) */
    int passed;
};

struct npb_result {
    double time_s; /* timed section, maximum over ranks */
    double mops;   /* specification's operation count / time_s / 1e6 */
    int iterations;
    char size[48];
    int nchecks;
    struct npb_check checks[NPB_MAX_CHECKS];
};

struct npb_kernel {
    const char *name;
    int multithreaded; /* 0: only --threads 1 */
    /* 0 if the kernel can run CLASS on NRANKS ranks, else 2 with a message in msg */
    int (*check)(char cls, int nranks, char *msg, size_t len);
    /* estimated peak bytes one rank allocates */
    double (*mem_per_rank)(char cls, int nranks);
    /* run, fill res on every rank (rank 0's copy is printed) */
    void (*run)(const struct npb_ctx *ctx, struct npb_result *res);
};

extern const struct npb_kernel npb_ep, npb_cg, npb_mg, npb_ft, npb_is;
/* pseudo-applications (lu.c, sp.c, bt.c) and their multi-zone versions */
extern const struct npb_kernel npb_lu, npb_sp, npb_bt, npb_spmz, npb_btmz, npb_lumz;

#include "report.h"

#include "timer.h"

static inline int npb_is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }
static inline int npb_log2(long x)
{
    int k = 0;
    while ((1L << k) < x)
        k++;
    return k;
}

#endif
