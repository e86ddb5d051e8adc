/* Errors, allocation and the clock of vb-eigen. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "eigen.h"

#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

_Noreturn void eig_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vb-eigen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* not reached */
}

void *eig_alloc(size_t bytes, const char *what)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        eig_fatal(3, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

double eig_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
