/* Timing helpers: NPB reports the slowest rank's time of the timed section. */
#include "npb.h"

double npb_time_max(MPI_Comm comm, double t)
{
    double m = t;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
    return m;
}
