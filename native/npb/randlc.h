/*
 * The NPB pseudo-random number generator, as specified in NAS report RNR-94-007
 * section 2.2: the linear congruential recursion
 *
 *     x_{k+1} = a * x_k  (mod 2^46),     r_k = x_k * 2^-46  in (0, 1)
 *
 * with a = 5^13 unless a kernel says otherwise.  "randlc" advances the state once
 * and returns the new deviate; "vranlc" fills an array with the next n deviates.
 * The specification describes an implementation in double-precision arithmetic
 * (splitting into 23-bit halves); the recursion itself is exact integer
 * arithmetic, so here the state is kept as a 64-bit unsigned integer: because
 * 2^46 divides 2^64, the wrapped 64-bit product a*x taken mod 2^46 is exact.
 * Every deviate is bit-identical to the specification's.
 */
#ifndef VB_NPB_RANDLC_H
#define VB_NPB_RANDLC_H

#include <stdint.h>

#define NPB_A 1220703125ULL /* 5^13 */
#define NPB_MASK46 ((1ULL << 46) - 1)
#define NPB_R46 (1.0 / 70368744177664.0) /* 2^-46 */

/* a * x mod 2^46 */
static inline uint64_t lcg_mul(uint64_t a, uint64_t x) { return (a * x) & NPB_MASK46; }

/* the deviate of state x: x * 2^-46.  x < 2^46 fits a signed 64-bit integer, whose
 * conversion is one instruction (cvtsi2sd); the unsigned one needs a sign-bit branch. */
static inline double lcg_deviate(uint64_t x) { return (double)(int64_t)x * NPB_R46; }

/* advance *x once with multiplier a, return the new deviate x * 2^-46 */
static inline double randlc(uint64_t *x, uint64_t a)
{
    *x = lcg_mul(a, *x);
    return lcg_deviate(*x);
}

/* the next n deviates into out[0..n-1] */
void vranlc(long n, uint64_t *x, uint64_t a, double *out);

/* a^n mod 2^46 (the multiplier that jumps a stream n steps ahead) */
uint64_t lcg_pow(uint64_t a, uint64_t n);

/* state after skipping n steps from seed with multiplier a */
static inline uint64_t lcg_skip(uint64_t seed, uint64_t a, uint64_t n) { return lcg_mul(lcg_pow(a, n), seed); }

#endif
