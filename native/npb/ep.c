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
#define EP_CHUNK 1024 /* pairs per pass (24 KiB of buffers: stays in L1) */

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
    const uint64_t a = NPB_A, a2 = lcg_mul(NPB_A, NPB_A);

    double sx = 0.0, sy = 0.0;
    int64_t q[EP_NQ];
    memset(q, 0, sizeof q);

    MPI_Barrier(ctx->comm);
    double t0 = npb_wtime();

#pragma omp parallel for schedule(static) reduction(+ : sx, sy, q[:EP_NQ])
    for (long b = b0; b < b1; b++) {
        uint64_t x = lcg_skip(seed, a, (uint64_t)(2 * per) * (uint64_t)b);
        double bsx = 0.0, bsy = 0.0;
        for (long c = 0; c < per; c += EP_CHUNK) {
            double px[EP_CHUNK], py[EP_CHUNK], pt[EP_CHUNK];
            int na = 0;
            /* pass 1: the pairs, keeping those inside the unit disc without a branch
             * (about one in five falls outside, at random: a mispredicted branch each) */
            for (int j = 0; j < EP_CHUNK; j++) {
                /* both deviates of the pair from x: a chain of one multiplication per pair */
                uint64_t y1 = lcg_mul(a, x), y2 = lcg_mul(a2, x);
                x = y2;
                double x1 = 2.0 * lcg_deviate(y1) - 1.0;
                double x2 = 2.0 * lcg_deviate(y2) - 1.0;
                double t = x1 * x1 + x2 * x2;
                px[na] = x1;
                py[na] = x2;
                pt[na] = t;
                na += t <= 1.0;
            }
            /* pass 2: the Gaussian pairs; the iterations are independent, so the latencies
             * of log, division and square root of successive pairs overlap */
            for (int j = 0; j < na; j++) {
                double t = pt[j];
                double f = sqrt(-2.0 * log(t) / t);
                double gx = px[j] * f, gy = py[j] * f;
                /* not fmax(): without -ffinite-math-only that is a libm call, which also
                 * forces the sums out of registers; the values here are never NaN */
                double ax = fabs(gx), ay = fabs(gy);
                double m = ax > ay ? ax : ay;
                if (m < EP_NQ)
                    q[(int)m]++;
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
