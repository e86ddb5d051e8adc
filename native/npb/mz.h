/*
 * The NPB multi-zone driver (SP-MZ, BT-MZ, LU-MZ; NAS report NAS-03-010 and the NPB-MZ
 * 3.3/3.4 distributions): class parameters, zone geometry, the zone -> rank map, and the
 * exchange of zone boundary values (exch_qbc).  The kernels themselves are in mz.c.
 *
 * Zones form an x_zones x y_zones grid of boxes, each spanning the whole z extent.  Every
 * zone has its own boundary points; before each time step the driver sets a zone's x
 * boundary planes (i = 0, i = nx-1) and y planes (j = 0, j = ny-1), for the interior
 * k = 1..nz-2 and the interior range of the other index, to the neighbour zone's
 * second-outermost plane (the west neighbour's i = nx-2 becomes our i = 0, the east
 * neighbour's i = 1 our i = nx-1, likewise in y); the zone grid wraps around periodically.
 */
#ifndef VB_NPB_MZ_H
#define VB_NPB_MZ_H

#include "npb.h"
#include "zone.h"

enum mz_bench { MZ_SP, MZ_BT, MZ_LU };

struct mz_class {
    int gx, gy, gz;   /* global grid */
    int x_zones, y_zones;
    double ratio;     /* largest / smallest zone width (BT-MZ), 1 = equal zones */
    int niter;
    double dt;
    double xcr[5], xce[5], xci; /* reference values (xci: LU-MZ only) */
};

/* the class's parameters, NULL for an unknown class */
const struct mz_class *mz_class_get(enum mz_bench b, char cls);

struct mz_zone_geom {
    int nx, ny, nz;
    int x0, y0;                   /* NPB-MZ x_start-1, y_start-1 */
    int ix, iy;                   /* position in the zone grid */
    int west, east, south, north; /* neighbour zone ids (periodic) */
    int rank;                     /* owner */
};

struct mz_layout {
    int nzones, x_zones, y_zones;
    int nranks;
    struct mz_zone_geom *zone; /* nzones, id = ix + iy * x_zones */
    double *rank_load;         /* nranks: points owned */
};

/* zone sizes and neighbours of class p, zones mapped to nranks ranks by NPB-MZ's bin
 * packing; 0, or -1 when nranks exceeds the number of zones */
int mz_layout_init(struct mz_layout *l, const struct mz_class *p, int nranks);
void mz_layout_free(struct mz_layout *l);

/* ---- exchange ------------------------------------------------------------------------ */

struct mz_face; /* one boundary plane to fill: private to mz_exch.c */

struct mz_exchange {
    MPI_Comm comm;
    int rank, npeers;
    int *peer;                     /* peer ranks */
    int *send_off, *recv_off;      /* npeers + 1 offsets into the buffers (doubles) */
    double *send_buf, *recv_buf;
    struct mz_face *send, *recv, *local;
    int nsend, nrecv, nlocal;
    MPI_Request *req;
};

/* plan the exchange for this rank; zones[z] is this rank's npb_zone for zone z (NULL
 * for zones other ranks own); the zones' u arrays must stay where they are */
void mz_exchange_init(struct mz_exchange *x, const struct mz_layout *l,
                      struct npb_zone *const *zones, MPI_Comm comm);
/* refresh every x/y boundary plane of this rank's zones (collective over comm) */
void mz_exchange_run(struct mz_exchange *x);
void mz_exchange_free(struct mz_exchange *x);

/* self-test of the exchange (no solver needed): fill the zones with a function of the
 * interior-point coordinates, exchange, count the boundary points that did not get the
 * neighbour's value; returns the number of wrong values summed over all ranks */
long mz_exchange_selftest(const struct mz_layout *l, MPI_Comm comm, int rank);

#endif
