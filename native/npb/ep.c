/*
 * EP: "embarrassingly parallel" Gaussian deviates (RNR-94-007 section 2.1).
 *
 * Generate n = 2^M pairs of uniform deviates (r_{2j-1}, r_{2j}) from the NPB generator
 * with seed 271828183 and a = 5^13, map them to x_j = 2r - 1, y_j likewise, and for
 * every pair with t_j = x_j^2 + y_j^2 <= 1 form the Gaussian pair
 *     X = x_j sqrt(-2 ln t_j / t_j),   Y = y_j sqrt(-2 ln t_j / t_j);
 * accumulate sx = sum X, sy = sum Y and count the pairs per square annulus
 * l <= max(|X|,|Y|) < l+1, l = 0..9.  Verification: sx and sy against the published
 * values with relative error <= 1e-8.
 *
 * Decomposition: the pairs are cut into batches of 2^16 pairs; each batch starts its
 * part of the single random stream by jumping ahead (seed * a^(2 * 2^16 * b)); ranks
 * take contiguous ranges of batches and OpenMP threads share a rank's batches.  Any
 * rank count up to the number of batches works.
 *
 * Operation count (NPB's "Mop/s", random numbers generated): 2^(M+1).
 * Timed section: the whole generation and accumulation, including the final reduction.
 */
#include "classes.h"
#include "npb.h"
#include "randlc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EP_MK 16 /* log2 of pairs per batch */
#define EP_NQ 10

static int ep_check(char cls, int nranks, char *msg, size_t len)
{
    const struct ep_class *p = ep_class_get(cls);
    long nb = 1L << (p->m - EP_MK);
    if (nranks > nb) {
        snprintf(msg, len, "ep class %c can use at most %ld ranks, got %d", cls, nb, nranks);
        return 2;
    }
    return 0;
}

static double ep_mem(char cls, int nranks)
{
    (void)cls;
    (void)nranks;
    return 1.0 * 1024 * 1024;
}

static void ep_run(const struct npb_ctx *ctx, struct npb_result *res)
{
    const struct ep_class *p = ep_class_get(ctx->cls);
    const long nb = 1L << (p->m - EP_MK);
    const long per = 1L << EP_MK;
    const long b0 = nb * ctx->rank / ctx->nranks, b1 = nb * (ctx->rank + 1) / ctx->nranks;
    const uint64_t seed = EP_SEED + (ctx->perturb ? 2 : 0);
    const uint64_t a = NPB_A;

    double sx = 0.0, sy = 0.0;
    int64_t q[EP_NQ];
    memset(q, 0, sizeof q);

    MPI_Barrier(ctx->comm);
    double t0 = npb_wtime();

#pragma omp parallel for schedule(static) reduction(+ : sx, sy, q[:EP_NQ])
    for (long b = b0; b < b1; b++) {
        uint64_t x = lcg_skip(seed, a, (uint64_t)(2 * per) * (uint64_t)b);
        double bsx = 0.0, bsy = 0.0;
        for (long j = 0; j < per; j++) {
            x = lcg_mul(a, x);
            double x1 = 2.0 * ((double)x * NPB_R46) - 1.0;
            x = lcg_mul(a, x);
            double x2 = 2.0 * ((double)x * NPB_R46) - 1.0;
            double t = x1 * x1 + x2 * x2;
            if (t <= 1.0) {
                double f = sqrt(-2.0 * log(t) / t);
                double gx = x1 * f, gy = x2 * f;
                int l = (int)fmax(fabs(gx), fabs(gy));
                if (l < EP_NQ)
                    q[l]++;
                bsx += gx;
                bsy += gy;
            }
        }
        sx += bsx;
        sy += bsy;
    }

    double in[2 + EP_NQ], out[2 + EP_NQ];
    in[0] = sx;
    in[1] = sy;
    for (int i = 0; i < EP_NQ; i++)
        in[2 + i] = (double)q[i];
    MPI_Allreduce(in, out, 2 + EP_NQ, MPI_DOUBLE, MPI_SUM, ctx->comm);
    double t = npb_wtime() - t0;

    res->time_s = npb_time_max(ctx->comm, t);
    double nrand = ldexp(1.0, p->m + 1);
    res->mops = res->time_s > 0 ? nrand / res->time_s / 1e6 : 0.0;
    res->iterations = 0;
    snprintf(res->size, sizeof res->size, "%.0f", nrand);
    npb_add_check(res, "sx", out[0], p->sx, EP_EPSILON);
    npb_add_check(res, "sy", out[1], p->sy, EP_EPSILON);
}

const struct npb_kernel npb_ep = {"ep", 1, ep_check, ep_mem, ep_run};
