/*
 * exch_qbc of NPB-MZ: before every time step each zone's x and y boundary planes get
 * the neighbour zones' second-outermost planes (see mz.h).  Faces between zones of the
 * same rank are copied directly; faces between ranks travel in one message per peer
 * rank and direction.  Both ends enumerate a peer's faces in the same canonical order
 * (receiving zone id, then west, east, south, north), so no face headers are sent.
 */
#include "mz.h"

#include <stdlib.h>
#include <string.h>

enum { W, E, S, N };

/* one plane of a zone: k = 1..nz-2, and i (y plane) or j (x plane) = 1..n-2 */
struct mz_face {
    struct npb_zone *z; /* read z->u at run time: solvers may reallocate it */
    int xplane;         /* 1: the plane i = at; 0: the plane j = at */
    int at;
    long off;           /* first double in the message buffer */
};

static long face_len(const struct npb_zone *z, int xplane)
{
    return (long)((xplane ? z->ny : z->nx) - 2) * (z->nz - 2) * 5;
}

/* copy a plane to (out = 1) or from (out = 0) a contiguous buffer */
static void face_copy(const struct mz_face *f, double *buf, int out)
{
    const struct npb_zone *z = f->z;
    const int nx = z->nx, ny = z->ny, nz = z->nz;
    const int n = f->xplane ? ny : nx;
    for (int k = 1; k < nz - 1; k++)
        for (int a = 1; a < n - 1; a++) {
            int i = f->xplane ? f->at : a, j = f->xplane ? a : f->at;
            double *p = z->u + (((size_t)k * ny + j) * nx + i) * 5;
            double *q = buf + ((long)(k - 1) * (n - 2) + (a - 1)) * 5;
            if (out)
                memcpy(q, p, 5 * sizeof(double));
            else
                memcpy(p, q, 5 * sizeof(double));
        }
}

/* neighbour of zone g in direction d, and the plane of that neighbour we read */
static int source_of(const struct mz_zone_geom *g, int d)
{
    return d == W ? g->west : d == E ? g->east : d == S ? g->south : g->north;
}

static struct mz_face dest_face(struct npb_zone *z, int d)
{
    struct mz_face f = {z, d == W || d == E, 0, 0};
    f.at = d == W ? 0 : d == E ? z->nx - 1 : d == S ? 0 : z->ny - 1;
    return f;
}

static struct mz_face src_face(struct npb_zone *s, int d)
{
    /* our west boundary is the west neighbour's last interior plane but one, etc. */
    struct mz_face f = {s, d == W || d == E, 0, 0};
    f.at = d == W ? s->nx - 2 : d == E ? 1 : d == S ? s->ny - 2 : 1;
    return f;
}

void mz_exchange_init(struct mz_exchange *x, const struct mz_layout *l,
                      struct npb_zone *const *zones, MPI_Comm comm)
{
    memset(x, 0, sizeof *x);
    x->comm = comm;
    MPI_Comm_rank(comm, &x->rank);
    const int me = x->rank, nz = l->nzones;

    /* count faces: local copies, and faces to / from each other rank */
    long *nsend = calloc((size_t)l->nranks, sizeof(long));
    long *nrecv = calloc((size_t)l->nranks, sizeof(long));
    if (!nsend || !nrecv)
        npb_fatal(3, "out of memory planning the zone exchange");
    for (int z = 0; z < nz; z++)
        for (int d = 0; d < 4; d++) {
            const struct mz_zone_geom *g = &l->zone[z];
            int src = l->zone[source_of(g, d)].rank;
            if (g->rank == me && src == me)
                x->nlocal++;
            else if (g->rank == me)
                nrecv[src]++;
            else if (src == me)
                nsend[g->rank]++;
        }
    for (int q = 0; q < l->nranks; q++)
        if (q != me && (nsend[q] || nrecv[q]))
            x->npeers++;
    x->peer = npb_alloc(sizeof(int) * (size_t)(x->npeers + 1), "zone exchange");
    x->send_off = npb_alloc(sizeof(int) * (size_t)(x->npeers + 1), "zone exchange");
    x->recv_off = npb_alloc(sizeof(int) * (size_t)(x->npeers + 1), "zone exchange");
    x->req = npb_alloc(sizeof(MPI_Request) * (size_t)(2 * x->npeers + 1), "zone exchange");
    int np = 0;
    for (int q = 0; q < l->nranks; q++)
        if (q != me && (nsend[q] || nrecv[q]))
            x->peer[np++] = q;
    for (int q = 0; q < l->nranks; q++)
        x->nsend += (int)nsend[q], x->nrecv += (int)nrecv[q];
    free(nsend);
    free(nrecv);

    x->send = npb_alloc(sizeof(struct mz_face) * (size_t)(x->nsend + 1), "zone exchange");
    x->recv = npb_alloc(sizeof(struct mz_face) * (size_t)(x->nrecv + 1), "zone exchange");
    x->local = npb_alloc(sizeof(struct mz_face) * (size_t)(2 * x->nlocal + 1), "zone exchange");

    /* canonical order per peer: receiving zone id, then W E S N */
    int ns = 0, nr = 0, nl = 0;
    long soff = 0, roff = 0;
    for (int pi = 0; pi < x->npeers; pi++) {
        const int q = x->peer[pi];
        x->send_off[pi] = (int)soff;
        x->recv_off[pi] = (int)roff;
        for (int z = 0; z < nz; z++)
            for (int d = 0; d < 4; d++) {
                const struct mz_zone_geom *g = &l->zone[z];
                const int s = source_of(g, d);
                if (g->rank == q && l->zone[s].rank == me) {
                    struct mz_face f = src_face(zones[s], d);
                    f.off = soff;
                    soff += face_len(zones[s], f.xplane);
                    x->send[ns++] = f;
                }
                if (g->rank == me && l->zone[s].rank == q) {
                    struct mz_face f = dest_face(zones[z], d);
                    f.off = roff;
                    roff += face_len(zones[z], f.xplane);
                    x->recv[nr++] = f;
                }
            }
    }
    x->send_off[x->npeers] = (int)soff;
    x->recv_off[x->npeers] = (int)roff;
    if (soff > 0x7fffffffL || roff > 0x7fffffffL)
        npb_fatal(1, "zone exchange message too large for MPI (%ld doubles); use more ranks", soff);
    for (int z = 0; z < nz; z++)
        for (int d = 0; d < 4; d++) {
            const struct mz_zone_geom *g = &l->zone[z];
            const int s = source_of(g, d);
            if (g->rank == me && l->zone[s].rank == me) {
                x->local[nl++] = src_face(zones[s], d);
                x->local[nl++] = dest_face(zones[z], d);
            }
        }
    x->send_buf = npb_alloc(sizeof(double) * (size_t)(soff + 1), "zone exchange buffers");
    x->recv_buf = npb_alloc(sizeof(double) * (size_t)(roff + 1), "zone exchange buffers");
}

/* a zone's plane straight into another zone's boundary plane */
static void local_copy(const struct mz_face *src, const struct mz_face *dst)
{
    const struct npb_zone *a = src->z, *b = dst->z;
    const int n = src->xplane ? a->ny : a->nx;
    for (int k = 1; k < a->nz - 1; k++)
        for (int c = 1; c < n - 1; c++) {
            int ia = src->xplane ? src->at : c, ja = src->xplane ? c : src->at;
            int ib = dst->xplane ? dst->at : c, jb = dst->xplane ? c : dst->at;
            memcpy(b->u + (((size_t)k * b->ny + jb) * b->nx + ib) * 5,
                   a->u + (((size_t)k * a->ny + ja) * a->nx + ia) * 5, 5 * sizeof(double));
        }
}

void mz_exchange_run(struct mz_exchange *x)
{
    const int TAG = 4242;
    int nreq = 0;
    for (int p = 0; p < x->npeers; p++) {
        int len = x->recv_off[p + 1] - x->recv_off[p];
        MPI_Irecv(x->recv_buf + x->recv_off[p], len, MPI_DOUBLE, x->peer[p], TAG, x->comm,
                  &x->req[nreq++]);
    }
#pragma omp parallel for schedule(dynamic)
    for (int f = 0; f < x->nsend; f++)
        face_copy(&x->send[f], x->send_buf + x->send[f].off, 1);
    for (int p = 0; p < x->npeers; p++) {
        int len = x->send_off[p + 1] - x->send_off[p];
        MPI_Isend(x->send_buf + x->send_off[p], len, MPI_DOUBLE, x->peer[p], TAG, x->comm,
                  &x->req[nreq++]);
    }
    /* zones of this rank meanwhile: sources are interior planes, targets boundary planes */
#pragma omp parallel for schedule(dynamic)
    for (int f = 0; f < x->nlocal; f++)
        local_copy(&x->local[2 * f], &x->local[2 * f + 1]);
    MPI_Waitall(nreq, x->req, MPI_STATUSES_IGNORE);
#pragma omp parallel for schedule(dynamic)
    for (int f = 0; f < x->nrecv; f++)
        face_copy(&x->recv[f], x->recv_buf + x->recv[f].off, 0);
}

void mz_exchange_free(struct mz_exchange *x)
{
    free(x->peer);
    free(x->send_off);
    free(x->recv_off);
    free(x->req);
    free(x->send);
    free(x->recv);
    free(x->local);
    free(x->send_buf);
    free(x->recv_buf);
    memset(x, 0, sizeof *x);
}

/* ---- self-test ----------------------------------------------------------------------- */

/* The interior points of all zones tile a periodic grid of sum(nx-2) x sum(ny-2) points;
 * a zone's boundary plane must receive the neighbouring interior plane of that grid. */
static double probe(long X, long Y, int k, int m)
{
    return (((double)X * 4096 + Y) * 64 + k) * 8 + m;
}

long mz_exchange_selftest(const struct mz_layout *l, MPI_Comm comm, int rank)
{
    const double SENTINEL = -1.0;
    long XT = 0, YT = 0;
    for (int i = 0; i < l->x_zones; i++)
        XT += l->zone[i].nx - 2;
    for (int j = 0; j < l->y_zones; j++)
        YT += l->zone[j * l->x_zones].ny - 2;

    struct npb_zone *zs = calloc((size_t)l->nzones, sizeof *zs);
    struct npb_zone **zp = calloc((size_t)l->nzones, sizeof *zp);
    if (!zs || !zp)
        npb_fatal(3, "out of memory in the exchange self-test");
    for (int z = 0; z < l->nzones; z++) {
        const struct mz_zone_geom *g = &l->zone[z];
        if (g->rank != rank)
            continue;
        struct npb_zone *Z = &zs[z];
        Z->nx = g->nx, Z->ny = g->ny, Z->nz = g->nz;
        Z->u = npb_alloc(sizeof(double) * 5 * (size_t)g->nx * g->ny * g->nz, "self-test zone");
        zp[z] = Z;
    }
    /* interior coordinates of a zone's point (i, j); boundary planes map outside */
    long wrong = 0;
    for (int pass = 0; pass < 2; pass++) {
        struct mz_exchange x;
        if (pass == 1) {
            mz_exchange_init(&x, l, zp, comm);
            mz_exchange_run(&x);
            mz_exchange_free(&x);
        }
        for (int z = 0; z < l->nzones; z++) {
            struct npb_zone *Z = zp[z];
            if (!Z)
                continue;
            const struct mz_zone_geom *g = &l->zone[z];
            const long X0 = g->x0 - 2L * g->ix, Y0 = g->y0 - 2L * g->iy;
            for (int k = 0; k < Z->nz; k++)
                for (int j = 0; j < Z->ny; j++)
                    for (int i = 0; i < Z->nx; i++) {
                        int bi = i == 0 || i == Z->nx - 1, bj = j == 0 || j == Z->ny - 1;
                        int bk = k == 0 || k == Z->nz - 1;
                        long X = ((X0 + i - 1) % XT + XT) % XT, Y = ((Y0 + j - 1) % YT + YT) % YT;
                        /* expected after the exchange: interior and exchanged planes hold
                         * probe values, corners and z boundary planes keep the sentinel */
                        int filled = !bk && (bi + bj <= 1);
                        for (int m = 0; m < 5; m++) {
                            double *p = Z->u + (((size_t)k * Z->ny + j) * Z->nx + i) * 5 + m;
                            double want = filled ? probe(X, Y, k, m) : SENTINEL;
                            if (pass == 0)
                                *p = (bi || bj || bk) ? SENTINEL : want;
                            else
                                wrong += *p != want;
                        }
                    }
        }
    }
    for (int z = 0; z < l->nzones; z++)
        if (zp[z])
            free(zp[z]->u);
    free(zs);
    free(zp);
    long total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, comm);
    return total;
}
