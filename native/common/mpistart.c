#define _GNU_SOURCE
#include "mpistart.h"

#include <mpi.h>
#include <sched.h>

int vb_args_exit(int rc, int rank, const char *prog, const char *msg, void (*usage)(FILE *))
{
    if (rank == 0) {
        if (rc < 0)
            usage(stdout);
        else
            fprintf(stderr, "%s: %s\n", prog, msg);
    }
    MPI_Finalize();
    return rc < 0 ? 0 : rc;
}

void vb_warn_thread_binding(int rank, const char *prog, int threads)
{
    if (rank != 0 || threads <= 1)
        return;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < threads)
        fprintf(stderr,
                "%s: warning: rank 0 may run on %d CPU(s) but --threads is %d; "
                "launch with 'mpirun --bind-to none' or '--map-by slot:PE=%d'\n",
                prog, CPU_COUNT(&set), threads, threads);
}
