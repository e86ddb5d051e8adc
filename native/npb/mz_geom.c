/*
 * NPB-MZ class parameters, zone geometry and the zone -> rank map.
 *
 * Sources of the numbers (NPB-MZ 3.3.1 / 3.4 distributions): grid, zones, dt, iterations
 * and BT-MZ's size ratio from sys/setparams.c; reference values and tolerance (1e-8) from
 * SP-MZ/verify.f, BT-MZ/verify.f (identical in NPB3.2-MZ) and LU-MZ/verify.f.  NAS report
 * NAS-03-010 describes the benchmarks.
 *
 * Zone widths (zone_setup.f): equal zones (ratio 1): x_end(i) = i*gx/x_zones (integer
 * division, i = 1..x_zones); BT-MZ: widths grow geometrically, x_r = ratio^(1/(x_zones-1)),
 * smallest = gx (x_r-1)/(x_r^x_zones - 1), x_end(i) = int(smallest (x_r^i - 1)/(x_r - 1)
 * + 0.45); the same in y.  x_start(1) = 1, x_start(i+1) = x_end(i) + 1, width = x_end -
 * x_start + 1 (the widths add up to gx: boundary points are counted in every zone).
 *
 * Zone -> rank map (map_zones in mpi_setup.f): NPB-MZ's bin packing.  Zones are sorted by
 * size (points), largest first; repeatedly the least loaded rank takes the next unassigned
 * zone, or, among the unassigned zones at most 5% smaller than that one, the zone sharing
 * the most boundary with zones the rank already owns (its "communication index").
 * Threads per rank stay what --threads says (NPB-MZ can also move threads between ranks;
 * that option is not implemented: every rank gets the same count).
 */
#include "classes.h"
#include "mz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* S W A B C, in NPB_CLASS_LETTERS order */
static const struct mz_class sp_classes[5] = {
    {24, 24, 6, 2, 2, 1.0, 100, 0.015,
     {0.7698876173566e+01, 0.1517766790280e+01, 0.2686805141546e+01, 0.1893688083690e+01,
      0.1369739859738e+02},
     {0.9566808043467e+01, 0.3894109553741e+01, 0.4516022447464e+01, 0.4099103995615e+01,
      0.7776038881521e+01},
     0},
    {64, 64, 8, 4, 4, 1.0, 400, 0.0015,
     {0.1887636218359e+03, 0.1489637963542e+02, 0.4851711701400e+02, 0.3384633608154e+02,
      0.4036632495857e+03},
     {0.2975895149929e+02, 0.1341508175806e+02, 0.1585310846491e+02, 0.1450916426713e+02,
      0.5854137431023e+02},
     0},
    {128, 128, 16, 4, 4, 1.0, 400, 0.0015,
     {0.2800097900548e+03, 0.2268349014438e+02, 0.7000852739901e+02, 0.5000771004061e+02,
      0.5552068537578e+03},
     {0.3112046666578e+02, 0.1172197785348e+02, 0.1486616708032e+02, 0.1313680576292e+02,
      0.7365834058154e+02},
     0},
    {304, 208, 17, 8, 8, 1.0, 400, 0.001,
     {0.5190422977921e+04, 0.3655458539065e+03, 0.1261126592633e+04, 0.1002038338842e+04,
      0.1075902511165e+05},
     {0.5469182054223e+03, 0.4983658028989e+02, 0.1418301776602e+03, 0.1097717156175e+03,
      0.1260195162174e+04},
     0},
    {480, 320, 28, 16, 16, 1.0, 400, 0.00067,
     {0.5886814493676e+05, 0.3967324375474e+04, 0.1444126529019e+05, 0.1210582211196e+05,
      0.1278941567976e+06},
     {0.6414069213021e+04, 0.4069468353404e+03, 0.1585311908719e+04, 0.1270243185759e+04,
      0.1441398372869e+05},
     0},
};

static const struct mz_class bt_classes[5] = {
    {24, 24, 6, 2, 2, 3.0, 60, 0.010,
     {0.1047687395830e+04, 0.9419911314792e+02, 0.2124737403068e+03, 0.1422173591794e+03,
      0.1135441572375e+04},
     {0.1775416062982e+03, 0.1875540250835e+02, 0.3863334844506e+02, 0.2634713890362e+02,
      0.1965566269675e+03},
     0},
    {64, 64, 8, 4, 4, 4.5, 200, 0.0008,
     {0.5562611195402e+05, 0.5151404119932e+04, 0.1080453907954e+05, 0.6576058591929e+04,
      0.4528609293561e+05},
     {0.7185154786403e+04, 0.7040472738068e+03, 0.1437035074443e+04, 0.8570666307849e+03,
      0.5991235147368e+04},
     0},
    {128, 128, 16, 4, 4, 4.5, 200, 0.0008,
     {0.5536703889522e+05, 0.5077835038405e+04, 0.1067391361067e+05, 0.6441179694972e+04,
      0.4371926324069e+05},
     {0.6716797714343e+04, 0.6512687902160e+03, 0.1332930740128e+04, 0.7848302089180e+03,
      0.5429053878818e+04},
     0},
    {304, 208, 17, 8, 8, 4.5, 200, 0.0003,
     {0.4461388343844e+06, 0.3799759138035e+05, 0.8383296623970e+05, 0.5301970201273e+05,
      0.3618106851311e+06},
     {0.4496733567600e+05, 0.3892068540524e+04, 0.8763825844217e+04, 0.5599040091792e+04,
      0.4082652045598e+05},
     0},
    {480, 320, 28, 16, 16, 4.5, 200, 0.0001,
     {0.3457703287806e+07, 0.3213621375929e+06, 0.7002579656870e+06, 0.4517459627471e+06,
      0.2818715870791e+07},
     {0.2059106993570e+06, 0.1680761129461e+05, 0.4080731640795e+05, 0.2836541076778e+05,
      0.2136807610771e+06},
     0},
};

static const struct mz_class lu_classes[5] = {
    {24, 24, 6, 4, 4, 1.0, 50, 0.5,
     {0.3778579699366e+01, 0.3120418698065e+00, 0.8386213407018e+00, 0.4452165980488e+00,
      0.7808656756434e+01},
     {0.2429480066305e+02, 0.9072817470024e+01, 0.1032621825644e+02, 0.9256791727838e+01,
      0.1639045777714e+02},
     0.4964435445706e+02},
    {64, 64, 8, 4, 4, 1.0, 300, 1.5e-3,
     {0.8285060230339e+03, 0.5753415004693e+02, 0.2023477570531e+03, 0.1586275182502e+03,
      0.1733925947816e+04},
     {0.7514670702651e+02, 0.9776687033238e+01, 0.2141754291209e+02, 0.1685405918675e+02,
      0.1856944519722e+03},
     0.3781055348911e+03},
    {128, 128, 16, 4, 4, 1.0, 250, 2.0,
     {0.1131574877175e+04, 0.7965206944742e+02, 0.2705587159526e+03, 0.2129567530746e+03,
      0.2260584655432e+04},
     {0.1115694885382e+03, 0.1089257673798e+02, 0.2905379922066e+02, 0.2216126755530e+02,
      0.2501762341026e+03},
     0.5904992211511e+03},
    {304, 208, 17, 4, 4, 1.0, 250, 2.0,
     {0.1734656959567e+05, 0.1238977748533e+04, 0.4123885357100e+04, 0.3613705834056e+04,
      0.3531187871586e+05},
     {0.1781612313296e+04, 0.1177971120769e+03, 0.4233792871440e+03, 0.3577260438230e+03,
      0.3659958544012e+04},
     0.6107041476456e+04},
    {480, 320, 28, 4, 4, 1.0, 250, 2.0,
     {0.4108743427233e+05, 0.3439004802235e+04, 0.9961331392486e+04, 0.8321426758084e+04,
      0.7463792419218e+05},
     {0.3429276307955e+04, 0.2336680861825e+03, 0.8216363109621e+03, 0.7143809828225e+03,
      0.7057470798773e+04},
     0.1125826349653e+05},
};

const struct mz_class *mz_class_get(enum mz_bench b, char cls)
{
    const char *at = strchr(NPB_CLASS_LETTERS, cls);
    if (!at || cls == '\0')
        return NULL;
    int i = (int)(at - NPB_CLASS_LETTERS);
    switch (b) {
    case MZ_SP:
        return &sp_classes[i];
    case MZ_BT:
        return &bt_classes[i];
    case MZ_LU:
        return &lu_classes[i];
    }
    return NULL;
}

/* widths of the n zones along an axis of g points (zone_setup.f) */
static void zone_widths(int g, int n, double ratio, int *start, int *width)
{
    int end[n];
    if (fabs(ratio - 1.0) > 1e-10) {
        double r = exp(log(ratio) / (n - 1));
        double smallest = (double)g * (r - 1.0) / (pow(r, n) - 1.0);
        /* the +0.45 keeps the widths growing monotonically (NPB's "tricked rounding") */
        for (int i = 1; i <= n; i++)
            end[i - 1] = (int)(smallest * (pow(r, i) - 1.0) / (r - 1.0) + 0.45);
    } else {
        for (int i = 1; i <= n; i++)
            end[i - 1] = i * g / n;
    }
    start[0] = 1;
    for (int i = 0; i < n; i++) {
        if (i + 1 < n)
            start[i + 1] = end[i] + 1;
        width[i] = end[i] - start[i] + 1;
    }
}

/* boundary points zone z would share with zones rank p already owns */
static long comm_index(const struct mz_layout *l, int z, int p)
{
    const struct mz_zone_geom *g = &l->zone[z];
    long c = 0;
    if (l->zone[g->west].rank == p)
        c += g->ny;
    if (l->zone[g->east].rank == p)
        c += g->ny;
    if (l->zone[g->south].rank == p)
        c += g->nx;
    if (l->zone[g->north].rank == p)
        c += g->nx;
    return c;
}

static void bin_pack(struct mz_layout *l)
{
    const int n = l->nzones;
    double size[n];
    int order[n];
    for (int z = 0; z < n; z++) {
        size[z] = (double)l->zone[z].nx * l->zone[z].ny * l->zone[z].nz;
        order[z] = z;
        l->zone[z].rank = -1;
    }
    /* selection sort, largest first, ties keep the first found (NPB's order) */
    for (int a = 0; a < n - 1; a++) {
        int best = a;
        for (int b = a + 1; b < n; b++)
            if (size[order[best]] < size[order[b]])
                best = b;
        int t = order[a];
        order[a] = order[best];
        order[best] = t;
    }
    for (int p = 0; p < l->nranks; p++)
        l->rank_load[p] = 0;

    int iz = 0;
    while (iz < n) {
        int p = 0; /* the least loaded rank, lowest number on ties */
        for (int q = 1; q < l->nranks; q++)
            if (l->rank_load[p] > l->rank_load[q])
                p = q;
        int pick = order[iz];
        if (iz < n - 1) {
            long best = comm_index(l, pick, p);
            for (int b = iz + 1; b < n; b++) {
                int z = order[b];
                if ((size[order[iz]] - size[z]) / size[order[iz]] > 0.05)
                    break;
                if (l->zone[z].rank < 0) {
                    long c = comm_index(l, z, p);
                    if (c > best) {
                        pick = z;
                        best = c;
                    }
                }
            }
        }
        l->zone[pick].rank = p;
        l->rank_load[p] += size[pick];
        while (iz < n && l->zone[order[iz]].rank >= 0)
            iz++;
    }
}

int mz_layout_init(struct mz_layout *l, const struct mz_class *p, int nranks)
{
    memset(l, 0, sizeof *l);
    const int xz = p->x_zones, yz = p->y_zones;
    l->x_zones = xz;
    l->y_zones = yz;
    l->nzones = xz * yz;
    l->nranks = nranks;
    if (nranks < 1 || nranks > l->nzones)
        return -1;
    int xs[xz], xw[xz], ys[yz], yw[yz];
    zone_widths(p->gx, xz, p->ratio, xs, xw);
    zone_widths(p->gy, yz, p->ratio, ys, yw);
    l->zone = npb_alloc(sizeof *l->zone * (size_t)l->nzones, "zone table");
    l->rank_load = npb_alloc(sizeof *l->rank_load * (size_t)nranks, "zone map");
    for (int j = 0; j < yz; j++)
        for (int i = 0; i < xz; i++) {
            struct mz_zone_geom *g = &l->zone[i + j * xz];
            g->nx = xw[i];
            g->ny = yw[j];
            g->nz = p->gz;
            g->x0 = xs[i] - 1;
            g->y0 = ys[j] - 1;
            g->ix = i;
            g->iy = j;
            g->west = (i + xz - 1) % xz + j * xz;
            g->east = (i + 1) % xz + j * xz;
            g->south = i + ((j + yz - 1) % yz) * xz;
            g->north = i + ((j + 1) % yz) * xz;
        }
    bin_pack(l);
    return 0;
}

void mz_layout_free(struct mz_layout *l)
{
    free(l->zone);
    free(l->rank_load);
    memset(l, 0, sizeof *l);
}
