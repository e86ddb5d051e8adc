/* Errors, allocation and the clock of vb-eigen. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "eigen.h"
#include "../common/jsonout.h"

#include <stdarg.h>
#include <time.h>

_Noreturn void eig_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vb_vfatal("vb-eigen", code, fmt, ap);
}

void *eig_alloc(size_t bytes, const char *what) { return vb_alloc("vb-eigen", bytes, what); }

double eig_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
