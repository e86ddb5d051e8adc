/*
 * Shared by the MPI programs under native/ (vb-npb, vb-eigen): the start-up steps both take
 * after MPI_Init and argument parsing.  No Makefile here (see memavail.h).
 */
#ifndef VB_COMMON_MPISTART_H
#define VB_COMMON_MPISTART_H

#include <stdio.h>

/* After parse_args returned rc != 0: rank 0 prints the usage (rc < 0, --help) or
 * "prog: msg"; MPI is finalized; the exit status to return (0 for --help, else rc). */
int vb_args_exit(int rc, int rank, const char *prog, const char *msg, void (*usage)(FILE *));

/* Rank 0 warns when it may run on fewer CPUs than its OpenMP threads (a binding mpirun). */
void vb_warn_thread_binding(int rank, const char *prog, int threads);

#endif
