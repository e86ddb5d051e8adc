/*
 * The contract between the pseudo-application solvers (sp.c, bt.c, lu.c) and the
 * multi-zone driver (SP-MZ, BT-MZ, LU-MZ): one zone is a box of grid points that one
 * rank owns whole; the solver advances it one time step, the driver refreshes its x/y
 * boundary points from the neighbouring zones between steps.
 *
 * Layout of u (and of every 5-component field a solver exposes): u[((k*ny + j)*nx + i)*5 + m],
 * m (the 5 conserved quantities) fastest, then i (x), j (y), k (z); i = 0 and i = nx - 1
 * (likewise j) are the zone's boundary points, which a step reads but never writes.
 */
#ifndef VB_NPB_ZONE_H
#define VB_NPB_ZONE_H

struct npb_zone {
    int nx, ny, nz;    /* points of this zone, boundary points included */
    int ox, oy;        /* NPB-MZ x_start-1, y_start-1 of the zone (informational) */
    int gnx, gny, gnz; /* points of the whole (global) grid */
    double *u;         /* nz*ny*nx*5 values, layout above; owned by the solver */
    void *state;       /* the solver's own arrays */
    /* Zones of the class in x and y (1 and 1 in a single-zone run, which makes the
     * formulas below the single-zone ones).  NPB-MZ evaluates the exact solution,
     * the initial values and the forcing in LOCAL zone coordinates with the AVERAGE cell
     * size of the class (set_constants.f of NPB-MZ):
     *   xi = i * dnxm1, dnxm1 = 1.0 / ((double)(gnx - 1) / (double)x_zones)
     *   eta = j * dnym1, dnym1 = 1.0 / ((double)(gny - 1) / (double)y_zones)
     *   zeta = k * dnzm1, dnzm1 = 1.0 / (double)(gnz - 1)
     * (every zone starts at xi = 0; the boundary faces still use xi = 0.0 / 1.0 etc.) */
    int x_zones, y_zones;
};

struct npb_zone_solver {
    const char *name; /* "sp", "bt", "lu" */
    /* allocate the zone's arrays, set initial values and the forcing term for class cls
     * (multi-zone: local coordinates, see x_zones above); dt is the class's time step.
     * Called again (after release) to reset the zone after the untimed warm-up step. */
    int (*init)(struct npb_zone *z, char cls, double dt);
    /* one time step (one ADI step for SP/BT, one SSOR iteration for LU); OpenMP inside */
    void (*step)(struct npb_zone *z);
    /* per component, the sum of squares of the residual over the zone's interior points
     * (SP/BT: rhs recomputed from the current u by compute_rhs; LU: rsd as the last SSOR
     * iteration left it) and of the error against the exact solution (SP/BT error_norm:
     * over ALL points, boundaries included; LU error: interior points).  The driver turns
     * each into sqrt(sum / ((nx-2)(ny-2)(nz-2))), adds those over zones (SP/BT divide the
     * residual by dt) and compares with the NPB-MZ reference values */
    void (*norms)(struct npb_zone *z, double rhs_sq[5], double err_sq[5]);
    void (*release)(struct npb_zone *z);
    /* LU only (NULL for SP, BT): the zone's surface integral (pintgr), summed over zones */
    double (*surface)(struct npb_zone *z);
};

extern const struct npb_zone_solver npb_zone_sp, npb_zone_bt, npb_zone_lu;

#endif
