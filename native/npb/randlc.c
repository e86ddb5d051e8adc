/* NPB linear congruential generator helpers; see randlc.h. */
#include "randlc.h"

/*
 * Four interleaved sub-streams x_{i+4} = a^4 x_i fill the array in the same order as
 * one stream would: the four multiplications of a step are independent, so the loop
 * is bound by multiplier throughput instead of the latency of one chain.
 */
void vranlc(long n, uint64_t *x, uint64_t a, double *out)
{
    uint64_t s = *x;
    long i = 0;
    if (n >= 8) {
        const uint64_t a4 = lcg_pow(a, 4);
        uint64_t s0 = lcg_mul(a, s), s1 = lcg_mul(a, s0), s2 = lcg_mul(a, s1), s3 = lcg_mul(a, s2);
        for (; i + 4 <= n; i += 4) {
            out[i] = lcg_deviate(s0);
            out[i + 1] = lcg_deviate(s1);
            out[i + 2] = lcg_deviate(s2);
            out[i + 3] = lcg_deviate(s3);
            s = s3;
            s0 = lcg_mul(a4, s0);
            s1 = lcg_mul(a4, s1);
            s2 = lcg_mul(a4, s2);
            s3 = lcg_mul(a4, s3);
        }
    }
    for (; i < n; i++) {
        s = lcg_mul(a, s);
        out[i] = lcg_deviate(s);
    }
    *x = s;
}

uint64_t lcg_pow(uint64_t a, uint64_t n)
{
    uint64_t result = 1, base = a & NPB_MASK46;
    while (n) {
        if (n & 1)
            result = lcg_mul(result, base);
        base = lcg_mul(base, base);
        n >>= 1;
    }
    return result;
}
