/* Timing of vb-npb: MPI wall-clock seconds; NPB reports the slowest rank's time of
 * the timed section, so every kernel passes its local time through npb_time_max. */
#ifndef VB_NPB_TIMER_H
#define VB_NPB_TIMER_H

#include <mpi.h>

static inline double npb_wtime(void) { return MPI_Wtime(); }

/* maximum of t over the communicator (collective) */
double npb_time_max(MPI_Comm comm, double t);

#endif
