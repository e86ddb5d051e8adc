/*
 * Shared numerics of SP and BT (see cfd.h): constants, exact solution, initial field,
 * forcing, right-hand side, norms, and the z-slab MPI decomposition.  Written from the
 * NPB 2/3 definition (NAS-95-020 section 4 and the reference's documented discretization);
 * the arithmetic follows the reference's order of operations so that the published norms
 * are reproduced to 1e-8.
 */
#include "cfd.h"
#include "npb.h"
#include "zone.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- classes ---------------------------------------------------------------------------- */

const struct cfd_class *cfd_sp_class(char cls)
{
    /* NPB 3.4 sp/verify.f; NAS-95-020 table 2 */
    static const struct cfd_class t[] = {
        {'S', 12, 100, 0.015,
         {2.7470315451339479e-02, 1.0360746705285417e-02, 1.6235745065095532e-02,
          1.5840557224455615e-02, 3.4849040609362460e-02},
         {2.7289258557377227e-05, 1.0364446640837285e-05, 1.6154798287166471e-05,
          1.5750704994480102e-05, 3.4177666183390531e-05}},
        {'W', 36, 400, 0.0015,
         {0.1893253733584e-02, 0.1717075447775e-03, 0.2778153350936e-03, 0.2887475409984e-03,
          0.3143611161242e-02},
         {0.7542088599534e-04, 0.6512852253086e-05, 0.1049092285688e-04, 0.1128838671535e-04,
          0.1212845639773e-03}},
        {'A', 64, 400, 0.0015,
         {2.4799822399300195, 1.1276337964368832, 1.5028977888770491, 1.4217816211695179,
          2.1292113035138280},
         {1.0900140297820550e-04, 3.7343951769282091e-05, 5.0092785406541633e-05,
          4.7671093939528255e-05, 1.3621613399213001e-04}},
        {'B', 102, 400, 0.001,
         {0.6903293579998e+02, 0.3095134488084e+02, 0.4103336647017e+02, 0.3864769009604e+02,
          0.5643482272596e+02},
         {0.9810006190188e-02, 0.1022827905670e-02, 0.1720597911692e-02, 0.1694479428231e-02,
          0.1847456263981e-01}},
        {'C', 162, 400, 0.00067,
         {0.5881691581829e+03, 0.2454417603569e+03, 0.3293829191851e+03, 0.3081924971891e+03,
          0.4597223799176e+03},
         {0.2598120500183e+00, 0.2590888922315e-01, 0.5132886416320e-01, 0.4806073419454e-01,
          0.5483377491301e+00}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].cls == cls)
            return &t[i];
    return NULL;
}

const struct cfd_class *cfd_bt_class(char cls)
{
    /* NPB 3.4 bt/verify.f; NAS-95-020 table 2 */
    static const struct cfd_class t[] = {
        {'S', 12, 60, 0.010,
         {1.7034283709541311e-01, 1.2975252070034097e-02, 3.2527926989486055e-02,
          2.6436421275166801e-02, 1.9211784131744430e-01},
         {4.9976913345811579e-04, 4.5195666782961927e-05, 7.3973765172921357e-05,
          7.3821238632439731e-05, 8.9269630987491446e-04}},
        {'W', 24, 200, 0.0008,
         {0.1125590409344e+03, 0.1180007595731e+02, 0.2710329767846e+02, 0.2469174937669e+02,
          0.2638427874317e+03},
         {0.4419655736008e+01, 0.4638531260002e+00, 0.1011551749967e+01, 0.9235878729944e+00,
          0.1018045837718e+02}},
        {'A', 64, 200, 0.0008,
         {1.0806346714637264e+02, 1.1319730901220813e+01, 2.5974354511582465e+01,
          2.3665622544678910e+01, 2.5278963211748344e+02},
         {4.2348416040525025e+00, 4.4390282496995698e-01, 9.6692480136345650e-01,
          8.8302063039765474e-01, 9.7379901770829278e+00}},
        {'B', 102, 200, 0.0003,
         {1.4233597229287254e+03, 9.9330522590150238e+01, 3.5646025644535285e+02,
          3.2485447959084092e+02, 3.2707541254659363e+03},
         {5.2969847140936856e+01, 4.4632896115670668e+00, 1.3122573342210174e+01,
          1.2006925323559144e+01, 1.2459576151035986e+02}},
        {'C', 162, 200, 0.0001,
         {0.62398116551764615e+04, 0.50793239190423964e+03, 0.15423530093013596e+04,
          0.13302387929291190e+04, 0.11604087428436455e+05},
         {0.16462008369091265e+03, 0.11497107903824313e+02, 0.41207446207461508e+02,
          0.37087651059694167e+02, 0.36211053051841265e+03}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].cls == cls)
            return &t[i];
    return NULL;
}

/* ---- constants ---------------------------------------------------------------------------- */

void cfd_constants(struct cfd_consts *c, int gnx, int gny, int gnz, double dt)
{
    cfd_constants_zones(c, gnx, gny, gnz, 1, 1, dt);
}

/* coefficients of the exact solution (a polynomial of degree 4 in each coordinate) */
const double cfd_ce[5][13] = {
    {2.0, 0.0, 0.0, 4.0, 5.0, 3.0, 0.5, 0.02, 0.01, 0.03, 0.5, 0.4, 0.3},
    {1.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.01, 0.03, 0.02, 0.4, 0.3, 0.5},
    {2.0, 2.0, 0.0, 0.0, 0.0, 2.0, 3.0, 0.04, 0.03, 0.05, 0.3, 0.5, 0.4},
    {2.0, 2.0, 0.0, 0.0, 0.0, 2.0, 3.0, 0.03, 0.05, 0.04, 0.2, 0.1, 0.3},
    {5.0, 4.0, 3.0, 2.0, 0.1, 0.4, 0.3, 0.05, 0.04, 0.03, 0.1, 0.3, 0.2},
};

void cfd_constants_zones(struct cfd_consts *c, int gnx, int gny, int gnz, int x_zones, int y_zones,
                         double dt)
{
    c->dt = dt;
    c->c1 = 1.4;
    c->c2 = 0.4;
    c->c3 = 0.1;
    c->c4 = 1.0;
    c->c5 = 1.4;
    c->bt = sqrt(0.5);
    c->dnxm1 = 1.0 / ((double)(gnx - 1) / (double)x_zones);
    c->dnym1 = 1.0 / ((double)(gny - 1) / (double)y_zones);
    c->dnzm1 = 1.0 / (double)(gnz - 1);
    c->c1c2 = c->c1 * c->c2;
    c->c1c5 = c->c1 * c->c5;
    c->c3c4 = c->c3 * c->c4;
    c->c1345 = c->c1c5 * c->c3c4;
    c->conz1 = 1.0 - c->c1c5;
    c->tx1 = 1.0 / (c->dnxm1 * c->dnxm1);
    c->tx2 = 1.0 / (2.0 * c->dnxm1);
    c->tx3 = 1.0 / c->dnxm1;
    c->ty1 = 1.0 / (c->dnym1 * c->dnym1);
    c->ty2 = 1.0 / (2.0 * c->dnym1);
    c->ty3 = 1.0 / c->dnym1;
    c->tz1 = 1.0 / (c->dnzm1 * c->dnzm1);
    c->tz2 = 1.0 / (2.0 * c->dnzm1);
    c->tz3 = 1.0 / c->dnzm1;
    c->dx1 = c->dx2 = c->dx3 = c->dx4 = c->dx5 = 0.75;
    c->dy1 = c->dy2 = c->dy3 = c->dy4 = c->dy5 = 0.75;
    c->dz1 = c->dz2 = c->dz3 = c->dz4 = c->dz5 = 1.0;
    c->dxmax = fmax(c->dx3, c->dx4);
    c->dymax = fmax(c->dy2, c->dy4);
    c->dzmax = fmax(c->dz2, c->dz3);
    c->dssp = 0.25 * fmax(c->dx1, fmax(c->dy1, c->dz1));
    c->c4dssp = 4.0 * c->dssp;
    c->c5dssp = 5.0 * c->dssp;
    c->dttx1 = dt * c->tx1;
    c->dttx2 = dt * c->tx2;
    c->dtty1 = dt * c->ty1;
    c->dtty2 = dt * c->ty2;
    c->dttz1 = dt * c->tz1;
    c->dttz2 = dt * c->tz2;
    c->c2dttx1 = 2.0 * c->dttx1;
    c->c2dtty1 = 2.0 * c->dtty1;
    c->c2dttz1 = 2.0 * c->dttz1;
    c->dtdssp = dt * c->dssp;
    c->comz1 = c->dtdssp;
    c->comz4 = 4.0 * c->dtdssp;
    c->comz5 = 5.0 * c->dtdssp;
    c->comz6 = 6.0 * c->dtdssp;
    c->c3c4tx3 = c->c3c4 * c->tx3;
    c->c3c4ty3 = c->c3c4 * c->ty3;
    c->c3c4tz3 = c->c3c4 * c->tz3;
    c->dx1tx1 = c->dx1 * c->tx1;
    c->dx2tx1 = c->dx2 * c->tx1;
    c->dx3tx1 = c->dx3 * c->tx1;
    c->dx4tx1 = c->dx4 * c->tx1;
    c->dx5tx1 = c->dx5 * c->tx1;
    c->dy1ty1 = c->dy1 * c->ty1;
    c->dy2ty1 = c->dy2 * c->ty1;
    c->dy3ty1 = c->dy3 * c->ty1;
    c->dy4ty1 = c->dy4 * c->ty1;
    c->dy5ty1 = c->dy5 * c->ty1;
    c->dz1tz1 = c->dz1 * c->tz1;
    c->dz2tz1 = c->dz2 * c->tz1;
    c->dz3tz1 = c->dz3 * c->tz1;
    c->dz4tz1 = c->dz4 * c->tz1;
    c->dz5tz1 = c->dz5 * c->tz1;
    c->c2iv = 2.5;
    c->con43 = 4.0 / 3.0;
    c->con16 = 1.0 / 6.0;
    c->xxcon1 = c->c3c4tx3 * c->con43 * c->tx3;
    c->xxcon2 = c->c3c4tx3 * c->tx3;
    c->xxcon3 = c->c3c4tx3 * c->conz1 * c->tx3;
    c->xxcon4 = c->c3c4tx3 * c->con16 * c->tx3;
    c->xxcon5 = c->c3c4tx3 * c->c1c5 * c->tx3;
    c->yycon1 = c->c3c4ty3 * c->con43 * c->ty3;
    c->yycon2 = c->c3c4ty3 * c->ty3;
    c->yycon3 = c->c3c4ty3 * c->conz1 * c->ty3;
    c->yycon4 = c->c3c4ty3 * c->con16 * c->ty3;
    c->yycon5 = c->c3c4ty3 * c->c1c5 * c->ty3;
    c->zzcon1 = c->c3c4tz3 * c->con43 * c->tz3;
    c->zzcon2 = c->c3c4tz3 * c->tz3;
    c->zzcon3 = c->c3c4tz3 * c->conz1 * c->tz3;
    c->zzcon4 = c->c3c4tz3 * c->con16 * c->tz3;
    c->zzcon5 = c->c3c4tz3 * c->c1c5 * c->tz3;
}

void cfd_exact(double xi, double eta, double zeta, double out[5])
{
    for (int m = 0; m < 5; m++) {
        const double *e = cfd_ce[m];
        out[m] = e[0] + xi * (e[1] + xi * (e[4] + xi * (e[7] + xi * e[10]))) +
                 eta * (e[2] + eta * (e[5] + eta * (e[8] + eta * e[11]))) +
                 zeta * (e[3] + zeta * (e[6] + zeta * (e[9] + zeta * e[12])));
    }
}

/* ---- blocks ------------------------------------------------------------------------------- */

void cfd_block_zone(struct cfd_block *b, int nx, int ny, int nz, int ox, int oy, int gnx, int gny,
                    int gnz)
{
    memset(b, 0, sizeof *b);
    const int n[3] = {nx, ny, nz}, o[3] = {ox, oy, 0}, g[3] = {gnx, gny, gnz};
    for (int d = 0; d < 3; d++) {
        b->n[d] = n[d];
        b->org[d] = o[d];
        b->gn[d] = g[d];
        b->line0[d] = 0;
        b->nline[d] = n[d];
        b->lo[d] = 0;
        b->hi[d] = n[d];
    }
    b->npts = (size_t)nx * ny * nz;
}

void cfd_block_alloc(struct cfd_block *b, int with_forcing, int with_speed)
{
    size_t np = b->npts ? b->npts : 1;
    b->u = npb_alloc(np * 5 * sizeof(double), "cfd u");
    b->rhs = npb_alloc(np * 5 * sizeof(double), "cfd rhs");
    b->forcing = with_forcing ? npb_alloc(np * 5 * sizeof(double), "cfd forcing") : NULL;
    double **s[] = {&b->rho_i, &b->us, &b->vs, &b->ws, &b->qs, &b->square};
    for (size_t q = 0; q < sizeof s / sizeof s[0]; q++)
        *s[q] = npb_alloc(np * sizeof(double), "cfd derived fields");
    b->speed = with_speed ? npb_alloc(np * sizeof(double), "cfd speed") : NULL;
    /* first touch in parallel, as the compute loops will run */
#pragma omp parallel for schedule(static)
    for (size_t p = 0; p < np; p++) {
        for (int m = 0; m < 5; m++) {
            b->u[p * 5 + m] = 0.0;
            b->rhs[p * 5 + m] = 0.0;
            if (b->forcing)
                b->forcing[p * 5 + m] = 0.0;
        }
        b->rho_i[p] = b->us[p] = b->vs[p] = b->ws[p] = b->qs[p] = b->square[p] = 0.0;
        if (b->speed)
            b->speed[p] = 0.0;
    }
}

void cfd_block_free(struct cfd_block *b)
{
    double *f[] = {b->u, b->rhs, b->forcing, b->rho_i, b->us, b->vs, b->ws, b->qs, b->square, b->speed};
    for (size_t q = 0; q < sizeof f / sizeof f[0]; q++)
        free(f[q]);
    b->u = b->rhs = b->forcing = b->rho_i = b->us = b->vs = b->ws = b->qs = b->square = b->speed = NULL;
}

/* ---- initialize ----------------------------------------------------------------------------- */

void cfd_initialize(struct cfd_block *b, const struct cfd_consts *c)
{
    const int nx = b->n[0], ny = b->n[1], nz = b->n[2];
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nz; k++) {
        const int gk = k + b->org[2];
        const double zeta = gk * c->dnzm1;
        for (int j = 0; j < ny; j++) {
            const int gj = j + b->org[1];
            const double eta = gj * c->dnym1;
            for (int i = 0; i < nx; i++) {
                const int gi = i + b->org[0];
                const double xi = gi * c->dnxm1;
                double px[2][5], py[2][5], pz[2][5];
                for (int f = 0; f < 2; f++) {
                    cfd_exact((double)f, eta, zeta, px[f]);
                    cfd_exact(xi, (double)f, zeta, py[f]);
                    cfd_exact(xi, eta, (double)f, pz[f]);
                }
                double *u = b->u + cfd_idx(b, i, j, k) * 5;
                for (int m = 0; m < 5; m++) {
                    double pxi = xi * px[1][m] + (1.0 - xi) * px[0][m];
                    double peta = eta * py[1][m] + (1.0 - eta) * py[0][m];
                    double pzeta = zeta * pz[1][m] + (1.0 - zeta) * pz[0][m];
                    u[m] = pxi + peta + pzeta - pxi * peta - pxi * pzeta - peta * pzeta +
                           pxi * peta * pzeta;
                }
                /* the six faces of the global domain carry the exact solution; the reference
                 * sets them face by face (x, then y, then z), so a later face wins at edges */
                const int onface = gi == 0 || gi == b->gn[0] - 1 || gj == 0 || gj == b->gn[1] - 1 ||
                                   gk == 0 || gk == b->gn[2] - 1;
                if (onface) {
                    /* the face set last wins; only its own coordinate is exactly 0 or 1 */
                    double fx = xi, fy = eta, fz = zeta;
                    if (gk == 0 || gk == b->gn[2] - 1)
                        fz = gk == 0 ? 0.0 : 1.0;
                    else if (gj == 0 || gj == b->gn[1] - 1)
                        fy = gj == 0 ? 0.0 : 1.0;
                    else
                        fx = gi == 0 ? 0.0 : 1.0;
                    cfd_exact(fx, fy, fz, u);
                }
            }
        }
    }
}

/* ---- exact_rhs ------------------------------------------------------------------------------ */

/* contribution of direction d at a point: ue[o][m] is the exact solution at offset o - 2
 * along d (only offsets inside the line are valid), p the line position, n the line size */
static void forcing_dir(const struct cfd_consts *c, int d, double ue[5][5], int p, int n,
                        double f[5])
{
    double t2, dm[5], con1, con2, con3, con4, con5;
    if (d == 0) {
        t2 = c->tx2;
        dm[0] = c->dx1tx1, dm[1] = c->dx2tx1, dm[2] = c->dx3tx1, dm[3] = c->dx4tx1, dm[4] = c->dx5tx1;
        con1 = c->xxcon1, con2 = c->xxcon2, con3 = c->xxcon3, con4 = c->xxcon4, con5 = c->xxcon5;
    } else if (d == 1) {
        t2 = c->ty2;
        dm[0] = c->dy1ty1, dm[1] = c->dy2ty1, dm[2] = c->dy3ty1, dm[3] = c->dy4ty1, dm[4] = c->dy5ty1;
        con1 = c->yycon1, con2 = c->yycon2, con3 = c->yycon3, con4 = c->yycon4, con5 = c->yycon5;
    } else {
        t2 = c->tz2;
        dm[0] = c->dz1tz1, dm[1] = c->dz2tz1, dm[2] = c->dz3tz1, dm[3] = c->dz4tz1, dm[4] = c->dz5tz1;
        con1 = c->zzcon1, con2 = c->zzcon2, con3 = c->zzcon3, con4 = c->zzcon4, con5 = c->zzcon5;
    }
    const int v = d + 1; /* the velocity component along d */
    /* buf: velocities (1..3), energy (4), squared speed (0); cuf: velocity along d squared */
    double buf[3][5], cuf[3], q[3];
    for (int o = 0; o < 3; o++) {
        const double *e = ue[o + 1];
        double dtpp = 1.0 / e[0];
        for (int m = 1; m < 5; m++)
            buf[o][m] = dtpp * e[m];
        cuf[o] = buf[o][v] * buf[o][v];
        /* the other two velocities in increasing component order */
        int a = v == 1 ? 2 : 1, bb = v == 3 ? 2 : 3;
        buf[o][0] = cuf[o] + buf[o][a] * buf[o][a] + buf[o][bb] * buf[o][bb];
        q[o] = 0.5 * (buf[o][1] * e[1] + buf[o][2] * e[2] + buf[o][3] * e[3]);
    }
    const double *up = ue[3], *u0 = ue[2], *um = ue[1];
    f[0] = f[0] - t2 * (up[v] - um[v]) + dm[0] * (up[0] - 2.0 * u0[0] + um[0]);
    for (int m = 1; m < 4; m++) {
        if (m == v)
            f[m] = f[m] -
                   t2 * ((up[m] * buf[2][v] + c->c2 * (up[4] - q[2])) -
                         (um[m] * buf[0][v] + c->c2 * (um[4] - q[0]))) +
                   con1 * (buf[2][m] - 2.0 * buf[1][m] + buf[0][m]) +
                   dm[m] * (up[m] - 2.0 * u0[m] + um[m]);
        else
            f[m] = f[m] - t2 * (up[m] * buf[2][v] - um[m] * buf[0][v]) +
                   con2 * (buf[2][m] - 2.0 * buf[1][m] + buf[0][m]) +
                   dm[m] * (up[m] - 2.0 * u0[m] + um[m]);
    }
    f[4] = f[4] -
           t2 * (buf[2][v] * (c->c1 * up[4] - c->c2 * q[2]) -
                 buf[0][v] * (c->c1 * um[4] - c->c2 * q[0])) +
           0.5 * con3 * (buf[2][0] - 2.0 * buf[1][0] + buf[0][0]) +
           con4 * (cuf[2] - 2.0 * cuf[1] + cuf[0]) + con5 * (buf[2][4] - 2.0 * buf[1][4] + buf[0][4]) +
           dm[4] * (up[4] - 2.0 * u0[4] + um[4]);
    /* fourth-order dissipation, in the reference's operand order */
    for (int m = 0; m < 5; m++) {
        double s;
        if (p == 1)
            s = 5.0 * ue[2][m] - 4.0 * ue[3][m] + ue[4][m];
        else if (p == 2)
            s = -4.0 * ue[1][m] + 6.0 * ue[2][m] - 4.0 * ue[3][m] + ue[4][m];
        else if (p == n - 3)
            s = ue[0][m] - 4.0 * ue[1][m] + 6.0 * ue[2][m] - 4.0 * ue[3][m];
        else if (p == n - 2)
            s = ue[0][m] - 4.0 * ue[1][m] + 5.0 * ue[2][m];
        else
            s = ue[0][m] - 4.0 * ue[1][m] + 6.0 * ue[2][m] - 4.0 * ue[3][m] + ue[4][m];
        f[m] = f[m] - c->dssp * s;
    }
}

void cfd_exact_rhs(struct cfd_block *b, const struct cfd_consts *c)
{
    const double dn[3] = {c->dnxm1, c->dnym1, c->dnzm1};
#pragma omp parallel for schedule(static)
    for (int k = b->lo[2]; k < b->hi[2]; k++)
        for (int j = b->lo[1]; j < b->hi[1]; j++)
            for (int i = b->lo[0]; i < b->hi[0]; i++) {
                const int loc[3] = {i, j, k};
                double *f = b->forcing + cfd_idx(b, i, j, k) * 5;
                int interior = 1, p[3];
                for (int d = 0; d < 3; d++) {
                    p[d] = loc[d] + b->line0[d];
                    if (p[d] < 1 || p[d] > b->nline[d] - 2)
                        interior = 0;
                }
                for (int m = 0; m < 5; m++)
                    f[m] = 0.0;
                if (!interior)
                    continue;
                for (int d = 0; d < 3; d++) {
                    /* exact solution at offsets -2..2 along d (inside the line) */
                    double ue[5][5];
                    for (int o = -2; o <= 2; o++) {
                        int pp = p[d] + o;
                        if (pp < 0 || pp > b->nline[d] - 1) {
                            for (int m = 0; m < 5; m++)
                                ue[o + 2][m] = 0.0;
                            continue;
                        }
                        int g[3];
                        for (int e = 0; e < 3; e++)
                            g[e] = loc[e] + b->org[e];
                        g[d] += o;
                        cfd_exact(g[0] * dn[0], g[1] * dn[1], g[2] * dn[2], ue[o + 2]);
                    }
                    forcing_dir(c, d, ue, p[d], b->nline[d], f);
                }
                for (int m = 0; m < 5; m++)
                    f[m] = -1.0 * f[m];
            }
}

/* ---- compute_rhs ----------------------------------------------------------------------------- */

/* the reference's one-sided and centred dissipation sums: value s for offsets -2..2 around
 * point P with strides st; kind 1: p = 1, 2: p = 2, 3: middle, 4: p = n-3, 5: p = n-2 */
static inline int diss_kind(int p, int n)
{
    return p == 1 ? 1 : p == 2 ? 2 : p == n - 3 ? 4 : p == n - 2 ? 5 : 3;
}
static inline __attribute__((always_inline)) double diss(const double *u, long st, int kind)
{
    switch (kind) {
    case 1:
        return 5.0 * u[0] - 4.0 * u[st] + u[2 * st];
    case 2:
        return -4.0 * u[-st] + 6.0 * u[0] - 4.0 * u[st] + u[2 * st];
    case 4:
        return u[-2 * st] - 4.0 * u[-st] + 6.0 * u[0] - 4.0 * u[st];
    case 5:
        return u[-2 * st] - 4.0 * u[-st] + 5.0 * u[0];
    default:
        return u[-2 * st] - 4.0 * u[-st] + 6.0 * u[0] - 4.0 * u[st] + u[2 * st];
    }
}

/* the updated range of stored indices along d: [*a, *b) */
void cfd_update_range(const struct cfd_block *b, int d, int *a, int *e)
{
    int lo = b->lo[d], hi = b->hi[d];
    if (lo + b->line0[d] < 1)
        lo = 1 - b->line0[d];
    if (hi + b->line0[d] > b->nline[d] - 1)
        hi = b->nline[d] - 1 - b->line0[d];
    *a = lo;
    *e = hi > lo ? hi : lo;
}

void cfd_derived(struct cfd_block *b, const struct cfd_consts *c)
{
    const int nx = b->n[0], ny = b->n[1], nz = b->n[2];
    const double c1c2 = c->c1c2;
    double *const rho_i = b->rho_i, *const us = b->us, *const vs = b->vs, *const ws = b->ws,
                  *const qs = b->qs, *const square = b->square, *const speed = b->speed;
    const double *const u = b->u;
    /* derived quantities at every stored point (halos included) */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nz; k++)
        for (int j = 0; j < ny; j++) {
            size_t p = cfd_idx(b, 0, j, k);
            for (int i = 0; i < nx; i++, p++) {
                const double *up = u + p * 5;
                double rho_inv = 1.0 / up[0];
                rho_i[p] = rho_inv;
                us[p] = up[1] * rho_inv;
                vs[p] = up[2] * rho_inv;
                ws[p] = up[3] * rho_inv;
                square[p] = 0.5 * (up[1] * up[1] + up[2] * up[2] + up[3] * up[3]) * rho_inv;
                qs[p] = square[p] * rho_inv;
                if (speed)
                    speed[p] = sqrt(c1c2 * rho_inv * (up[4] - square[p]));
            }
        }
}

void cfd_compute_rhs(struct cfd_block *b, const struct cfd_consts *cin)
{
    /* a local copy: the compiler may keep constants in registers across the rhs stores */
    const struct cfd_consts cl = *cin, *const c = &cl;
    const int nx = b->n[0], ny = b->n[1];
    const long sx = 1, sy = nx, sz = (long)nx * ny;
    int i0, i1, j0, j1, k0, k1;
    cfd_update_range(b, 0, &i0, &i1);
    cfd_update_range(b, 1, &j0, &j1);
    cfd_update_range(b, 2, &k0, &k1);
    const double *const rho_i = b->rho_i, *const us = b->us, *const vs = b->vs, *const ws = b->ws,
                        *const qs = b->qs, *const square = b->square;
    const double *const u = b->u;
    double *const rhs = b->rhs;
    cfd_derived(b, c);

#pragma omp parallel
    {
        /* owned non-updated points keep rhs = forcing (zero on boundaries) */
#pragma omp for schedule(static)
        for (int k = b->lo[2]; k < b->hi[2]; k++)
            for (int j = b->lo[1]; j < b->hi[1]; j++)
                for (int i = b->lo[0]; i < b->hi[0]; i++) {
                    if (k >= k0 && k < k1 && j >= j0 && j < j1 && i >= i0 && i < i1)
                        continue;
                    size_t p = cfd_idx(b, i, j, k) * 5;
                    for (int m = 0; m < 5; m++)
                        rhs[p + m] = b->forcing ? b->forcing[p + m] : 0.0;
                }

#pragma omp for schedule(static) collapse(2)
        for (int k = k0; k < k1; k++)
            for (int j = j0; j < j1; j++) {
                const int kk = diss_kind(k + b->line0[2], b->nline[2]);
                const int kj = diss_kind(j + b->line0[1], b->nline[1]);
                for (int i = i0; i < i1; i++) {
                    const int ki = diss_kind(i + b->line0[0], b->nline[0]);
                    const size_t p = cfd_idx(b, i, j, k);
                    const double *U = u + p * 5;
                    double *r = rhs + p * 5;
                    const double *F = b->forcing ? b->forcing + p * 5 : NULL;
                    double r0 = F ? F[0] : 0.0, r1 = F ? F[1] : 0.0, r2 = F ? F[2] : 0.0,
                           r3 = F ? F[3] : 0.0, r4 = F ? F[4] : 0.0;
                    /* xi-direction fluxes */
                    {
                        const long s = sx, s5 = 5 * s;
                        const double *P = U + s5, *M = U - s5;
                        double uijk = us[p], up1 = us[p + s], um1 = us[p - s];
                        r0 = r0 + c->dx1tx1 * (P[0] - 2.0 * U[0] + M[0]) - c->tx2 * (P[1] - M[1]);
                        r1 = r1 + c->dx2tx1 * (P[1] - 2.0 * U[1] + M[1]) +
                             c->xxcon2 * c->con43 * (up1 - 2.0 * uijk + um1) -
                             c->tx2 * (P[1] * up1 - M[1] * um1 +
                                       (P[4] - square[p + s] - M[4] + square[p - s]) * c->c2);
                        r2 = r2 + c->dx3tx1 * (P[2] - 2.0 * U[2] + M[2]) +
                             c->xxcon2 * (vs[p + s] - 2.0 * vs[p] + vs[p - s]) -
                             c->tx2 * (P[2] * up1 - M[2] * um1);
                        r3 = r3 + c->dx4tx1 * (P[3] - 2.0 * U[3] + M[3]) +
                             c->xxcon2 * (ws[p + s] - 2.0 * ws[p] + ws[p - s]) -
                             c->tx2 * (P[3] * up1 - M[3] * um1);
                        r4 = r4 + c->dx5tx1 * (P[4] - 2.0 * U[4] + M[4]) +
                             c->xxcon3 * (qs[p + s] - 2.0 * qs[p] + qs[p - s]) +
                             c->xxcon4 * (up1 * up1 - 2.0 * uijk * uijk + um1 * um1) +
                             c->xxcon5 * (P[4] * rho_i[p + s] - 2.0 * U[4] * rho_i[p] + M[4] * rho_i[p - s]) -
                             c->tx2 * ((c->c1 * P[4] - c->c2 * square[p + s]) * up1 -
                                       (c->c1 * M[4] - c->c2 * square[p - s]) * um1);
                        r0 = r0 - c->dssp * diss(U + 0, s5, ki);
                        r1 = r1 - c->dssp * diss(U + 1, s5, ki);
                        r2 = r2 - c->dssp * diss(U + 2, s5, ki);
                        r3 = r3 - c->dssp * diss(U + 3, s5, ki);
                        r4 = r4 - c->dssp * diss(U + 4, s5, ki);
                    }
                    /* eta-direction fluxes */
                    {
                        const long s = sy, s5 = 5 * s;
                        const double *P = U + s5, *M = U - s5;
                        double vijk = vs[p], vp1 = vs[p + s], vm1 = vs[p - s];
                        r0 = r0 + c->dy1ty1 * (P[0] - 2.0 * U[0] + M[0]) - c->ty2 * (P[2] - M[2]);
                        r1 = r1 + c->dy2ty1 * (P[1] - 2.0 * U[1] + M[1]) +
                             c->yycon2 * (us[p + s] - 2.0 * us[p] + us[p - s]) -
                             c->ty2 * (P[1] * vp1 - M[1] * vm1);
                        r2 = r2 + c->dy3ty1 * (P[2] - 2.0 * U[2] + M[2]) +
                             c->yycon2 * c->con43 * (vp1 - 2.0 * vijk + vm1) -
                             c->ty2 * (P[2] * vp1 - M[2] * vm1 +
                                       (P[4] - square[p + s] - M[4] + square[p - s]) * c->c2);
                        r3 = r3 + c->dy4ty1 * (P[3] - 2.0 * U[3] + M[3]) +
                             c->yycon2 * (ws[p + s] - 2.0 * ws[p] + ws[p - s]) -
                             c->ty2 * (P[3] * vp1 - M[3] * vm1);
                        r4 = r4 + c->dy5ty1 * (P[4] - 2.0 * U[4] + M[4]) +
                             c->yycon3 * (qs[p + s] - 2.0 * qs[p] + qs[p - s]) +
                             c->yycon4 * (vp1 * vp1 - 2.0 * vijk * vijk + vm1 * vm1) +
                             c->yycon5 * (P[4] * rho_i[p + s] - 2.0 * U[4] * rho_i[p] + M[4] * rho_i[p - s]) -
                             c->ty2 * ((c->c1 * P[4] - c->c2 * square[p + s]) * vp1 -
                                       (c->c1 * M[4] - c->c2 * square[p - s]) * vm1);
                        r0 = r0 - c->dssp * diss(U + 0, s5, kj);
                        r1 = r1 - c->dssp * diss(U + 1, s5, kj);
                        r2 = r2 - c->dssp * diss(U + 2, s5, kj);
                        r3 = r3 - c->dssp * diss(U + 3, s5, kj);
                        r4 = r4 - c->dssp * diss(U + 4, s5, kj);
                    }
                    /* zeta-direction fluxes */
                    {
                        const long s = sz, s5 = 5 * s;
                        const double *P = U + s5, *M = U - s5;
                        double wijk = ws[p], wp1 = ws[p + s], wm1 = ws[p - s];
                        r0 = r0 + c->dz1tz1 * (P[0] - 2.0 * U[0] + M[0]) - c->tz2 * (P[3] - M[3]);
                        r1 = r1 + c->dz2tz1 * (P[1] - 2.0 * U[1] + M[1]) +
                             c->zzcon2 * (us[p + s] - 2.0 * us[p] + us[p - s]) -
                             c->tz2 * (P[1] * wp1 - M[1] * wm1);
                        r2 = r2 + c->dz3tz1 * (P[2] - 2.0 * U[2] + M[2]) +
                             c->zzcon2 * (vs[p + s] - 2.0 * vs[p] + vs[p - s]) -
                             c->tz2 * (P[2] * wp1 - M[2] * wm1);
                        r3 = r3 + c->dz4tz1 * (P[3] - 2.0 * U[3] + M[3]) +
                             c->zzcon2 * c->con43 * (wp1 - 2.0 * wijk + wm1) -
                             c->tz2 * (P[3] * wp1 - M[3] * wm1 +
                                       (P[4] - square[p + s] - M[4] + square[p - s]) * c->c2);
                        r4 = r4 + c->dz5tz1 * (P[4] - 2.0 * U[4] + M[4]) +
                             c->zzcon3 * (qs[p + s] - 2.0 * qs[p] + qs[p - s]) +
                             c->zzcon4 * (wp1 * wp1 - 2.0 * wijk * wijk + wm1 * wm1) +
                             c->zzcon5 * (P[4] * rho_i[p + s] - 2.0 * U[4] * rho_i[p] + M[4] * rho_i[p - s]) -
                             c->tz2 * ((c->c1 * P[4] - c->c2 * square[p + s]) * wp1 -
                                       (c->c1 * M[4] - c->c2 * square[p - s]) * wm1);
                        r0 = r0 - c->dssp * diss(U + 0, s5, kk);
                        r1 = r1 - c->dssp * diss(U + 1, s5, kk);
                        r2 = r2 - c->dssp * diss(U + 2, s5, kk);
                        r3 = r3 - c->dssp * diss(U + 3, s5, kk);
                        r4 = r4 - c->dssp * diss(U + 4, s5, kk);
                    }
                    r[0] = r0 * c->dt;
                    r[1] = r1 * c->dt;
                    r[2] = r2 * c->dt;
                    r[3] = r3 * c->dt;
                    r[4] = r4 * c->dt;
                }
            }
    }
}

void cfd_add(struct cfd_block *b)
{
    int i0, i1, j0, j1, k0, k1;
    cfd_update_range(b, 0, &i0, &i1);
    cfd_update_range(b, 1, &j0, &j1);
    cfd_update_range(b, 2, &k0, &k1);
#pragma omp parallel for schedule(static) collapse(2)
    for (int k = k0; k < k1; k++)
        for (int j = j0; j < j1; j++) {
            double *u = b->u + cfd_idx(b, i0, j, k) * 5;
            const double *r = b->rhs + cfd_idx(b, i0, j, k) * 5;
            for (int q = 0; q < (i1 - i0) * 5; q++)
                u[q] += r[q];
        }
}

/* ---- norms ------------------------------------------------------------------------------------ */

void cfd_rhs_sq(const struct cfd_block *b, double out[5])
{
    int i0, i1, j0, j1, k0, k1;
    cfd_update_range(b, 0, &i0, &i1);
    cfd_update_range(b, 1, &j0, &j1);
    cfd_update_range(b, 2, &k0, &k1);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0;
#pragma omp parallel for schedule(static) reduction(+ : s0, s1, s2, s3, s4)
    for (int k = k0; k < k1; k++)
        for (int j = j0; j < j1; j++)
            for (int i = i0; i < i1; i++) {
                const double *r = b->rhs + cfd_idx(b, i, j, k) * 5;
                s0 += r[0] * r[0];
                s1 += r[1] * r[1];
                s2 += r[2] * r[2];
                s3 += r[3] * r[3];
                s4 += r[4] * r[4];
            }
    out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3, out[4] = s4;
}

void cfd_error_sq(const struct cfd_block *b, const struct cfd_consts *c, double out[5])
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0;
#pragma omp parallel for schedule(static) reduction(+ : s0, s1, s2, s3, s4)
    for (int k = b->lo[2]; k < b->hi[2]; k++)
        for (int j = b->lo[1]; j < b->hi[1]; j++)
            for (int i = b->lo[0]; i < b->hi[0]; i++) {
                double e[5], d[5];
                cfd_exact((i + b->org[0]) * c->dnxm1, (j + b->org[1]) * c->dnym1,
                          (k + b->org[2]) * c->dnzm1, e);
                const double *u = b->u + cfd_idx(b, i, j, k) * 5;
                for (int m = 0; m < 5; m++)
                    d[m] = u[m] - e[m];
                s0 += d[0] * d[0];
                s1 += d[1] * d[1];
                s2 += d[2] * d[2];
                s3 += d[3] * d[3];
                s4 += d[4] * d[4];
            }
    out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3, out[4] = s4;
}

void cfd_rms(const double sq[5], int nx, int ny, int nz, double rms[5])
{
    for (int m = 0; m < 5; m++) {
        double r = sq[m];
        r = r / (double)(nx - 2);
        r = r / (double)(ny - 2);
        r = r / (double)(nz - 2);
        rms[m] = sqrt(r);
    }
}

/* ---- MPI z-slabs ------------------------------------------------------------------------------- */

int cfd_slab_check(const char *kernel, char cls, int gn, int nranks, char *msg, size_t len)
{
    int maxr = gn / 2; /* every rank needs >= 2 z planes (the halo is 2 deep) */
    if (nranks < 1 || nranks > maxr) {
        snprintf(msg, len, "%s class %c can run on 1 to %d ranks (at least 2 of the %d z planes per rank), got %d",
                 kernel, cls, maxr, gn, nranks);
        return 2;
    }
    return 0;
}

static void split(int n, int p, int *start)
{
    for (int r = 0; r <= p; r++)
        start[r] = (int)((long)n * r / p);
}

void cfd_slab_init(struct cfd_slab *s, MPI_Comm comm, int gnx, int gny, int gnz)
{
    memset(s, 0, sizeof *s);
    s->comm = comm;
    MPI_Comm_rank(comm, &s->rank);
    MPI_Comm_size(comm, &s->nranks);
    s->gn[0] = gnx, s->gn[1] = gny, s->gn[2] = gnz;
    const int P = s->nranks;
    s->kstart = npb_alloc(sizeof(int) * (P + 1), "cfd slabs");
    s->jstart = npb_alloc(sizeof(int) * (P + 1), "cfd slabs");
    split(gnz, P, s->kstart);
    split(gny, P, s->jstart);
    int *arr[] = {NULL, NULL, NULL, NULL};
    for (int q = 0; q < 4; q++)
        arr[q] = npb_alloc(sizeof(int) * P, "cfd slabs");
    s->scount = arr[0], s->sdispl = arr[1], s->rcount = arr[2], s->rdispl = arr[3];
    /* per component and field: my planes x their rows x nx, and the reverse */
    const int myk = s->kstart[s->rank + 1] - s->kstart[s->rank];
    const int myj = s->jstart[s->rank + 1] - s->jstart[s->rank];
    int sd = 0, rd = 0;
    for (int q = 0; q < P; q++) {
        s->scount[q] = myk * (s->jstart[q + 1] - s->jstart[q]) * gnx;
        s->rcount[q] = (s->kstart[q + 1] - s->kstart[q]) * myj * gnx;
        s->sdispl[q] = sd;
        s->rdispl[q] = rd;
        sd += s->scount[q];
        rd += s->rcount[q];
    }
    /* buffers for up to 2 fields of 5 components */
    /* (one rank needs none: its slab and y-slab have the same layout) */
    if (P > 1) {
        s->bufsz = ((size_t)(sd > rd ? sd : rd) + (size_t)4 * P * gnx * gny) * 10;
        s->sbuf = npb_alloc(sizeof(double) * s->bufsz, "cfd transpose buffer");
        s->rbuf = npb_alloc(sizeof(double) * s->bufsz, "cfd transpose buffer");
    }
}

void cfd_slab_free(struct cfd_slab *s)
{
    free(s->kstart);
    free(s->jstart);
    free(s->scount);
    free(s->sdispl);
    free(s->rcount);
    free(s->rdispl);
    free(s->sbuf);
    free(s->rbuf);
    memset(s, 0, sizeof *s);
}

void cfd_slab_block(const struct cfd_slab *s, struct cfd_block *b)
{
    const int k0 = s->kstart[s->rank], k1 = s->kstart[s->rank + 1];
    const int hlo = k0 > 0 ? 2 : 0, hhi = k1 < s->gn[2] ? 2 : 0;
    cfd_block_zone(b, s->gn[0], s->gn[1], k1 - k0 + hlo + hhi, 0, 0, s->gn[0], s->gn[1], s->gn[2]);
    b->org[2] = k0 - hlo;
    b->line0[2] = k0 - hlo;
    b->nline[2] = s->gn[2];
    b->lo[2] = hlo;
    b->hi[2] = hlo + (k1 - k0);
}

void cfd_slab_tblock(const struct cfd_slab *s, struct cfd_block *t)
{
    const int j0 = s->jstart[s->rank], j1 = s->jstart[s->rank + 1];
    cfd_block_zone(t, s->gn[0], j1 - j0, s->gn[2], 0, 0, s->gn[0], s->gn[1], s->gn[2]);
    t->org[1] = j0;
    t->line0[1] = j0;
    t->nline[1] = s->gn[1];
}

void cfd_halo(struct cfd_slab *s, const struct cfd_block *b, double *const *f, int nf, int ncomp)
{
    if (s->nranks == 1)
        return;
    const size_t plane = (size_t)b->n[0] * b->n[1] * ncomp;
    const int up = s->rank + 1 < s->nranks ? s->rank + 1 : MPI_PROC_NULL;
    const int dn = s->rank > 0 ? s->rank - 1 : MPI_PROC_NULL;
    for (int q = 0; q < nf; q++) {
        double *x = f[q];
        MPI_Request req[4];
        int nr = 0;
        /* my top 2 owned planes go up, my bottom 2 go down */
        if (up != MPI_PROC_NULL) {
            MPI_Irecv(x + (size_t)b->hi[2] * plane, (int)(2 * plane), MPI_DOUBLE, up, 11, s->comm, &req[nr++]);
            MPI_Isend(x + (size_t)(b->hi[2] - 2) * plane, (int)(2 * plane), MPI_DOUBLE, up, 12, s->comm,
                      &req[nr++]);
        }
        if (dn != MPI_PROC_NULL) {
            MPI_Irecv(x, (int)(2 * plane), MPI_DOUBLE, dn, 12, s->comm, &req[nr++]);
            MPI_Isend(x + (size_t)b->lo[2] * plane, (int)(2 * plane), MPI_DOUBLE, dn, 11, s->comm,
                      &req[nr++]);
        }
        MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
    }
}

/* pack/unpack helpers: a (k, j-range) row block of nx*ncomp doubles per (k, j) */
void cfd_to_yslab(struct cfd_slab *s, const struct cfd_block *b, double *const *f,
                  const struct cfd_block *t, double *const *g, int nf, int ncomp)
{
    const int P = s->nranks, nx = s->gn[0];
    const int k0 = s->kstart[s->rank], myk = s->kstart[s->rank + 1] - k0;
    const size_t row = (size_t)nx * ncomp;
    if ((size_t)nf * ncomp > 10)
        npb_fatal(1, "internal error: cfd transpose of more than 10 values per point");
    if (P == 1) {
        for (int fi = 0; fi < nf; fi++)
            memcpy(g[fi], f[fi], b->npts * ncomp * sizeof(double));
        return;
    }
    /* pack: per destination q, field, my planes, q's rows */
    size_t off = 0;
    for (int q = 0; q < P; q++) {
        const int j0 = s->jstart[q], nj = s->jstart[q + 1] - j0;
        for (int fi = 0; fi < nf; fi++)
            for (int k = 0; k < myk; k++) {
                memcpy(s->sbuf + off, f[fi] + cfd_idx(b, 0, j0, b->lo[2] + k) * ncomp, row * nj * sizeof(double));
                off += row * nj;
            }
    }
    int *sc = npb_alloc(sizeof(int) * P * 4, "cfd counts"), *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
    for (int q = 0; q < P; q++) {
        sc[q] = s->scount[q] * nf * ncomp;
        sd[q] = s->sdispl[q] * nf * ncomp;
        rc[q] = s->rcount[q] * nf * ncomp;
        rd[q] = s->rdispl[q] * nf * ncomp;
    }
    MPI_Alltoallv(s->sbuf, sc, sd, MPI_DOUBLE, s->rbuf, rc, rd, MPI_DOUBLE, s->comm);
    /* unpack: from source q, field, q's planes, my rows */
    const int myj = t->n[1];
    off = 0;
    for (int q = 0; q < P; q++) {
        const int qk0 = s->kstart[q], nk = s->kstart[q + 1] - qk0;
        for (int fi = 0; fi < nf; fi++)
            for (int k = 0; k < nk; k++) {
                memcpy(g[fi] + cfd_idx(t, 0, 0, qk0 + k) * ncomp, s->rbuf + off, row * myj * sizeof(double));
                off += row * myj;
            }
    }
    free(sc);
}

void cfd_to_zslab(struct cfd_slab *s, const struct cfd_block *t, double *const *g,
                  const struct cfd_block *b, double *const *f, int nf, int ncomp)
{
    const int P = s->nranks, nx = s->gn[0];
    const size_t row = (size_t)nx * ncomp;
    const int myj = t->n[1];
    if ((size_t)nf * ncomp > 10)
        npb_fatal(1, "internal error: cfd transpose of more than 10 values per point");
    if (P == 1) {
        for (int fi = 0; fi < nf; fi++)
            memcpy(f[fi], g[fi], t->npts * ncomp * sizeof(double));
        return;
    }
    size_t off = 0;
    for (int q = 0; q < P; q++) {
        const int qk0 = s->kstart[q], nk = s->kstart[q + 1] - qk0;
        for (int fi = 0; fi < nf; fi++)
            for (int k = 0; k < nk; k++) {
                memcpy(s->sbuf + off, g[fi] + cfd_idx(t, 0, 0, qk0 + k) * ncomp, row * myj * sizeof(double));
                off += row * myj;
            }
    }
    int *sc = npb_alloc(sizeof(int) * P * 4, "cfd counts"), *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
    for (int q = 0; q < P; q++) {
        sc[q] = s->rcount[q] * nf * ncomp;
        sd[q] = s->rdispl[q] * nf * ncomp;
        rc[q] = s->scount[q] * nf * ncomp;
        rd[q] = s->sdispl[q] * nf * ncomp;
    }
    MPI_Alltoallv(s->sbuf, sc, sd, MPI_DOUBLE, s->rbuf, rc, rd, MPI_DOUBLE, s->comm);
    const int myk = s->kstart[s->rank + 1] - s->kstart[s->rank];
    off = 0;
    for (int q = 0; q < P; q++) {
        const int j0 = s->jstart[q], nj = s->jstart[q + 1] - j0;
        for (int fi = 0; fi < nf; fi++)
            for (int k = 0; k < myk; k++) {
                memcpy(f[fi] + cfd_idx(b, 0, j0, b->lo[2] + k) * ncomp, s->rbuf + off, row * nj * sizeof(double));
                off += row * nj;
            }
    }
    free(sc);
}

/* planes [*a, *e) that rank q stores (owned + halos) */
static void stored_planes(const struct cfd_slab *s, int q, int *a, int *e)
{
    *a = s->kstart[q] > 0 ? s->kstart[q] - 2 : 0;
    *e = s->kstart[q + 1] < s->gn[2] ? s->kstart[q + 1] + 2 : s->gn[2];
}

void cfd_to_zslab_halo(struct cfd_slab *s, const struct cfd_block *t, double *const *g,
                       const struct cfd_block *b, double *const *f, int nf, int ncomp)
{
    const int P = s->nranks;
    const size_t row = (size_t)s->gn[0] * ncomp;
    const int myj = t->n[1];
    if (P == 1) {
        for (int fi = 0; fi < nf; fi++)
            if (f[fi] != g[fi])
                memcpy(f[fi], g[fi], b->npts * ncomp * sizeof(double));
        return;
    }
    int *sc = npb_alloc(sizeof(int) * P * 4, "cfd counts"), *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
    size_t so = 0, ro = 0;
    int ma, me;
    stored_planes(s, s->rank, &ma, &me);
    for (int q = 0; q < P; q++) {
        int a, e;
        stored_planes(s, q, &a, &e);
        size_t ns = (size_t)(e - a) * myj * row * nf;
        size_t nr = (size_t)(me - ma) * (s->jstart[q + 1] - s->jstart[q]) * row * nf;
        if (so + ns > s->bufsz || ro + nr > s->bufsz)
            npb_fatal(1, "internal error: cfd transpose buffer too small");
        sc[q] = (int)ns, sd[q] = (int)so, rc[q] = (int)nr, rd[q] = (int)ro;
        for (int fi = 0; fi < nf; fi++)
            for (int k = a; k < e; k++) {
                memcpy(s->sbuf + so, g[fi] + cfd_idx(t, 0, 0, k) * ncomp, row * myj * sizeof(double));
                so += row * myj;
            }
        ro += nr;
    }
    MPI_Alltoallv(s->sbuf, sc, sd, MPI_DOUBLE, s->rbuf, rc, rd, MPI_DOUBLE, s->comm);
    ro = 0;
    for (int q = 0; q < P; q++) {
        const int j0 = s->jstart[q], nj = s->jstart[q + 1] - j0;
        for (int fi = 0; fi < nf; fi++)
            for (int k = ma; k < me; k++) {
                memcpy(f[fi] + cfd_idx(b, 0, j0, k - b->org[2]) * ncomp, s->rbuf + ro, row * nj * sizeof(double));
                ro += row * nj;
            }
    }
    free(sc);
}

void cfd_add_stored(struct cfd_block *b)
{
    int i0, i1, j0, j1;
    cfd_update_range(b, 0, &i0, &i1);
    cfd_update_range(b, 1, &j0, &j1);
    int k0 = b->line0[2] < 1 ? 1 - b->line0[2] : 0;
    int k1 = b->n[2] + b->line0[2] > b->nline[2] - 1 ? b->nline[2] - 1 - b->line0[2] : b->n[2];
#pragma omp parallel for schedule(static) collapse(2)
    for (int k = k0; k < k1; k++)
        for (int j = j0; j < j1; j++) {
            double *u = b->u + cfd_idx(b, i0, j, k) * 5;
            const double *r = b->rhs + cfd_idx(b, i0, j, k) * 5;
            for (int q = 0; q < (i1 - i0) * 5; q++)
                u[q] += r[q];
        }
}

double cfd_mem_per_rank(int gn, int nranks, int with_speed)
{
    double n = gn, planes = n / nranks + 1.0 + 4.0; /* own planes (rounded up) + halos */
    double pts = n * n * planes, tpts = n * n * (n / nranks + 1.0);
    double fields = pts * (15.0 + 6.0 + (with_speed ? 1.0 : 0.0)); /* u, rhs, forcing, scalars */
    double tfields = nranks > 1 ? tpts * (10.0 + 7.0) : 0.0;        /* y-slab u, rhs, scalars */
    double bufs = nranks > 1 ? 2.0 * 10.0 * (tpts + 4.0 * nranks * n * n) : 0.0;
    return (fields + tfields + bufs) * 8.0;
}

/* ---- the driver SP and BT share ------------------------------------------------------------ */

int cfd_check(const struct cfd_solver *sv, char cls, int nranks, char *msg, size_t len)
{
    const struct cfd_class *k = sv->cls(cls);
    if (!k) {
        snprintf(msg, len, "%s has no class %c (use S, W, A, B or C)", sv->name, cls);
        return 2;
    }
    return cfd_slab_check(sv->name, cls, k->n, nranks, msg, len);
}

/* --perturb: one interior value of the initial field changes, so the norms must miss
 * (in every stored copy of that point: halos and the y-slab too) */
static void cfd_perturb(struct cfd_block *b)
{
    int l[3];
    for (int d = 0; d < 3; d++) {
        l[d] = b->gn[d] / 2 - b->org[d];
        if (l[d] < 0 || l[d] >= b->n[d])
            return;
    }
    b->u[cfd_idx(b, l[0], l[1], l[2]) * 5] *= 1.01;
}

/* the initial field on every block that stores u (SP's y-slab keeps its own copy) */
static void cfd_start(struct cfd_state *s, int perturb)
{
    cfd_initialize(&s->b, &s->c);
    if (s->transposed)
        cfd_initialize(&s->t, &s->c);
    if (perturb) {
        cfd_perturb(&s->b);
        if (s->transposed)
            cfd_perturb(&s->t);
    }
}

void cfd_run(const struct cfd_solver *sv, const struct npb_ctx *ctx, struct npb_result *res)
{
    const struct cfd_class *k = sv->cls(ctx->cls);
    const int n = k->n;
    struct cfd_state s;
    memset(&s, 0, sizeof s);
    cfd_constants(&s.c, n, n, n, k->dt);
    cfd_slab_init(&s.slab, ctx->comm, n, n, n);
    cfd_slab_block(&s.slab, &s.b);
    cfd_block_alloc(&s.b, 1, sv->with_speed);
    s.transposed = ctx->nranks > 1;
    if (s.transposed) {
        cfd_slab_tblock(&s.slab, &s.t);
        cfd_block_alloc(&s.t, 0, sv->with_speed);
    }
    cfd_start(&s, 0);
    cfd_exact_rhs(&s.b, &s.c);
    /* one untimed step touches all code and data, then start again */
    sv->adi(&s);
    cfd_start(&s, ctx->perturb);

    MPI_Barrier(ctx->comm);
    double t0 = npb_wtime();
    for (int it = 0; it < k->niter; it++)
        sv->adi(&s);
    double t = npb_wtime() - t0;
    res->time_s = npb_time_max(ctx->comm, t);

    /* verification: error and residual RMS norms (the residual of the final u; BT's step
     * leaves the halo planes stale, SP's keeps them current, so refreshing is safe for both) */
    double sq[10], gsq[10], xce[5], xcr[5];
    cfd_error_sq(&s.b, &s.c, sq);
    if (s.transposed) {
        double *uf[1] = {s.b.u};
        cfd_halo(&s.slab, &s.b, uf, 1, 5);
    }
    cfd_compute_rhs(&s.b, &s.c);
    cfd_rhs_sq(&s.b, sq + 5);
    MPI_Allreduce(sq, gsq, 10, MPI_DOUBLE, MPI_SUM, ctx->comm);
    cfd_rms(gsq, n, n, n, xce);
    cfd_rms(gsq + 5, n, n, n, xcr);
    static const char *const names[5] = {"rho", "rho_u", "rho_v", "rho_w", "energy"};
    char name[24];
    for (int m = 0; m < 5; m++) {
        snprintf(name, sizeof name, "xcr_%s", names[m]);
        npb_add_check(res, name, xcr[m] / k->dt, k->xcr[m], CFD_EPSILON);
    }
    for (int m = 0; m < 5; m++) {
        snprintf(name, sizeof name, "xce_%s", names[m]);
        npb_add_check(res, name, xce[m], k->xce[m], CFD_EPSILON);
    }
    const double dn = n;
    const double ops = (((sv->ops[0] * dn + sv->ops[1]) * dn + sv->ops[2]) * dn + sv->ops[3]) * k->niter;
    res->mops = res->time_s > 0 ? ops / res->time_s / 1e6 : 0.0;
    res->iterations = k->niter;
    snprintf(res->size, sizeof res->size, "%dx%dx%d", n, n, n);

    cfd_block_free(&s.b);
    if (s.transposed)
        cfd_block_free(&s.t);
    cfd_slab_free(&s.slab);
}

int cfd_zone_init(struct npb_zone *z, double dt, int with_speed)
{
    struct cfd_state *s = npb_alloc(sizeof *s, "cfd zone");
    memset(s, 0, sizeof *s);
    /* NPB-MZ: local zone coordinates with the class's average cell size; the zone's own
     * faces are the "boundary faces" of the initial field */
    cfd_constants_zones(&s->c, z->gnx, z->gny, z->gnz, z->x_zones, z->y_zones, dt);
    cfd_block_zone(&s->b, z->nx, z->ny, z->nz, 0, 0, z->nx, z->ny, z->nz);
    cfd_block_alloc(&s->b, 1, with_speed);
    cfd_initialize(&s->b, &s->c);
    cfd_exact_rhs(&s->b, &s->c);
    z->u = s->b.u;
    z->state = s;
    return 0;
}

void cfd_zone_norms(struct npb_zone *z, double rhs_sq[5], double err_sq[5])
{
    struct cfd_state *s = z->state;
    cfd_compute_rhs(&s->b, &s->c);
    cfd_rhs_sq(&s->b, rhs_sq);
    cfd_error_sq(&s->b, &s->c, err_sq);
}

void cfd_zone_release(struct npb_zone *z)
{
    struct cfd_state *s = z->state;
    if (!s)
        return;
    cfd_block_free(&s->b);
    free(s);
    z->state = NULL;
    z->u = NULL;
}
