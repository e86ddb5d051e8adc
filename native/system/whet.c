/* whetstone: a floating-point module mix in the spirit of Whetstone. The
 * modules are the classic kinds (array elements, array as a parameter,
 * conditional jumps, integer arithmetic, trigonometric functions, procedure
 * calls, array references, standard functions exp/log/sqrt) run with the
 * classic relative loop counts, under which one pass with multiplier 1 counts
 * as 100,000 Whetstone instructions. The module bodies are virtbench's own;
 * each is a contraction, so values settle to finite non-zero numbers and the
 * cost per pass never drifts (no overflow, NaN or denormals). */
#include "kernels.h"

#include <math.h>

/* Loop counts per module for multiplier 1 (= 0.1 million instructions). */
enum { N_ARRAY = 12, N_PARAM = 14, N_BRANCH = 345, N_INT = 210,
       N_TRIG = 32, N_CALL = 899, N_REF = 616, N_STDFN = 93 };
#define MULT 10                       /* one pass = 1 million instructions */
#define MWI_PER_PASS (0.1 * MULT)

static volatile double sink;
static volatile int seed_int = 1;     /* starting values the compiler can't see */
static volatile double seed_fp = 1.0;

/* One mixing step over four elements: weights sum in magnitude to 0.9, so
 * the step is a contraction towards 0.25. */
static inline void mix4(double *e)
{
    e[0] = 0.30 * e[0] + 0.25 * e[1] + 0.20 * e[2] - 0.15 * e[3] + 0.1;
    e[1] = 0.30 * e[1] + 0.25 * e[2] + 0.20 * e[3] - 0.15 * e[0] + 0.1;
    e[2] = 0.30 * e[2] + 0.25 * e[3] + 0.20 * e[0] - 0.15 * e[1] + 0.1;
    e[3] = 0.30 * e[3] + 0.25 * e[0] + 0.20 * e[1] - 0.15 * e[2] + 0.1;
}

/* Array passed as a parameter and worked on in the callee. */
VB_KEEP_CALL static void mix_param(double *e)
{
    for (int r = 0; r < 6; r++)
        mix4(e);
}

/* Scalar procedure with results returned through a pointer. */
VB_KEEP_CALL static void blend(double a, double b, double *out)
{
    a = (a + b) * 0.375;
    b = (a - b) * 0.625 + 1.0;
    *out = (a + b) * 0.5;
}

/* Array references: rotate three elements chosen by the caller. */
VB_KEEP_CALL static void rotate3(double *a, int i, int j, int k)
{
    double t = a[i];
    a[i] = a[j];
    a[j] = a[k];
    a[k] = t;
}

static double one_pass(int mult, double *e, double *f, int *ij)
{
    double x = seed_fp * 0.5, y = seed_fp * 0.25, z = seed_fp, w = seed_fp;
    int j = ij[0], k = ij[1], l = ij[2];

    for (int i = 0; i < N_ARRAY * mult; i++)         /* array elements */
        mix4(e);

    for (int i = 0; i < N_PARAM * mult; i++)         /* array as parameter */
        mix_param(e);

    for (int i = 0; i < N_BRANCH * mult; i++) {      /* conditional jumps */
        if (j == 1)
            j = 2;
        else
            j = 3;
        if (j >= 3)
            j = 1;
        else
            j = 0;
        if (j > 0)
            j = 0;
        else
            j = 1;
    }

    for (int i = 0; i < N_INT * mult; i++) {         /* integer arithmetic */
        k = (k * 5 + l + j) & 7;
        l = (l * 3 + k * 7 + 1) & 7;
        j = (j + k * l) & 3;
        f[k] = (double)(j + k + l);
        f[l] += (double)(k - j) * 0.5;
        f[l] *= 0.5;
    }

    for (int i = 0; i < N_TRIG * mult; i++) {        /* trigonometry */
        x = 0.5 * atan(sin(x) * cos(y) + 0.25 * cos(x + y) + 0.5);
        y = 0.5 * atan(cos(x) * sin(y) + 0.25 * sin(x - y) + 0.5);
    }

    for (int i = 0; i < N_CALL * mult; i++)          /* procedure calls */
        blend(x + z, y, &z);

    for (int i = 0; i < N_REF * mult; i++)           /* array references */
        rotate3(f, (i + j) & 7, (i + 3) & 7, (i + 6) & 7);

    for (int i = 0; i < N_STDFN * mult; i++)         /* standard functions */
        w = sqrt(exp(log(w + 1.0) * 0.75));

    ij[0] = j; ij[1] = k; ij[2] = l;
    return x + y + z + w;
}

void vb_whet_run(vb_ctx *ctx, vb_result *out)
{
    double e[4] = { seed_fp, -seed_fp, -seed_fp, -seed_fp };
    double f[8] = { 0 };
    int ij[3] = { seed_int, seed_int + 1, seed_int + 2 };
    double acc = 0.0;
    uint64_t passes = 0;
    do {
        acc += one_pass(MULT, e, f, ij);
        passes++;
    } while (!vb_time_up(ctx));
    sink = acc + e[0] + e[1] + e[2] + e[3] + f[0] + f[7] + ij[0];
    out->units = passes;
    out->work = (double)passes * MWI_PER_PASS;
}
