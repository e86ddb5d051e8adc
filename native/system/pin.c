/* Pinning a copy to one CPU, for the tests whose rate depends on where the
 * scheduler puts a process and its partner or child rather than on what the
 * work costs (context, spawn). Copy i takes the i-th allowed CPU, wrapping, so
 * N copies on N CPUs still use them all; processes forked later inherit it. */
#include "harness.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

void vb_pin_copy(const vb_ctx *ctx, const char *test)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        goto unpinned;
    int n = CPU_COUNT(&allowed), want = ctx->index % (n > 0 ? n : 1), seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != want)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0)
            return;
        break;
    }
unpinned:
    fprintf(stderr, "vb-system: %s copy %d: cannot pin to one CPU (%s); placement is left to the "
                    "scheduler, expect a bimodal rate\n", test, ctx->index, strerror(errno));
}
