/* NPB linear congruential generator helpers; see randlc.h. */
#include "randlc.h"

void vranlc(long n, uint64_t *x, uint64_t a, double *out)
{
    uint64_t s = *x;
    for (long i = 0; i < n; i++) {
        s = lcg_mul(a, s);
        out[i] = (double)s * NPB_R46;
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
