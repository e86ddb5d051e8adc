/*
 * vb-eigen: a coarse-grained MPI + OpenMP eigensolver, virtbench's counterpart of the
 * block Sakurai-Sugiura application of study 001 (Bloss).  It finds every eigenvalue of a
 * large sparse symmetric matrix inside an interval by contour integration:
 *
 *   S_k = 1/(2 pi i) \oint ((z - c)/r)^k (z I - A)^{-1} V dz,  k = 0 .. M-1
 *
 * with the N-point trapezoidal rule on the circle (centre c, radius r) around the interval.
 * The N/2 shifted systems of the upper half plane (the lower half are their conjugates)
 * are dealt out to the MPI ranks; each rank solves its systems, L right-hand sides at a
 * time, with OpenMP threads (COCG); one large MPI_Allreduce sums the moments; every rank
 * then repeats the same small dense Rayleigh-Ritz step (LAPACK).  See README.md.
 *
 *   mpirun -np R vb-eigen CLASS [--threads T] [--points N] [--allreduce-bytes B]
 *
 * Exit status: 0 run finished (verified or not: see the JSON line), 1 runtime error,
 * 2 bad input, 3 not enough memory.  The memory check is vb-npb's: the per-rank estimate
 * times the ranks on each node against MemAvailable capped by the cgroup limit;
 * VB_EIGEN_MEM_AVAILABLE (bytes) replaces the measurement (for tests).  The hidden option
 * --perturb changes the matrix's diagonal by 1e-6 relative so that verification must fail.
 */
#include "eigen.h"
#include "../common/jsonout.h"
#include "../common/memavail.h"
#include "../common/mpistart.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* grid, L, M, N, first, count.  Memory per rank: see mem_per_rank. */
static const struct eig_class classes[] = {
    {'S', 48, 4, 8, 32, 24, 8},
    {'W', 96, 8, 4, 32, 12, 16},
    {'A', 128, 8, 8, 32, 16, 32},
    {'B', 256, 16, 16, 32, 32, 64},
};
#define NCLASSES (sizeof classes / sizeof classes[0])

static const double SOLVE_TOL = 1e-9;   /* relative residual of each shifted solve */
static const int SOLVE_MAXIT = 100000;  /* per solve; never reached by the classes here */
static const double RESID_TOL = 1e-6;   /* Ritz pair accepted: ||A x - t x|| / ||A|| <= this */
static const double EIG_EPSILON = 1e-8; /* verification: relative error of each eigenvalue */

struct args {
    const struct eig_class *cls;
    int threads, points, perturb;
    double allreduce_bytes; /* 0: the moments' own size */
};

static void usage(FILE *f)
{
    fputs("usage: mpirun -np R vb-eigen CLASS [--threads T] [--points N] [--allreduce-bytes B]\n"
          "  CLASS   S | W | A | B  (2-D Laplacian on a 48^2 .. 512^2 grid)\n"
          "  --threads T          OpenMP threads per rank (default 1)\n"
          "  --points N           quadrature points on the circle, even, 4..1024 (default: the\n"
          "                       class's); N/2 shifted systems are dealt out to the ranks\n"
          "  --allreduce-bytes B  reduce a buffer of B bytes (suffix K, M, G = 2^10, 2^20, 2^30):\n"
          "                       the moments, padded with zeros; at least their own size\n"
          "Ranks: at most N/2.  Prints one JSON line (time_s, eigenvalues, verification,\n"
          "allreduce_bytes, duplicated_fraction ...) on rank 0's stdout.\n",
          f);
}

static int parse_count(const char *v, double *out)
{
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || x < 0 || !isfinite(x))
        return -1;
    if (*end == 'K' || *end == 'k')
        x *= 1024.0, end++;
    else if (*end == 'M')
        x *= 1048576.0, end++;
    else if (*end == 'G')
        x *= 1073741824.0, end++;
    if (*end || x != floor(x))
        return -1;
    *out = x;
    return 0;
}

static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);
    if (argv[*i][len] == '=')
        return argv[*i] + len + 1;
    return *i + 1 < argc ? argv[++*i] : NULL;
}

static int is_opt(const char *s, const char *name)
{
    size_t len = strlen(name);
    return !strncmp(s, name, len) && (s[len] == '\0' || s[len] == '=');
}

static double moments_bytes(const struct eig_class *c)
{
    return (double)c->grid * c->grid * c->moments * c->block * sizeof(double);
}

/* returns 0, -1 for --help, or 2 with the message in msg */
static int parse_args(int argc, char **argv, int nranks, struct args *a, char *msg, size_t len)
{
    memset(a, 0, sizeof *a);
    a->threads = 1;
    const char *cls = NULL;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help"))
            return -1;
        if (!strcmp(s, "--perturb")) {
            a->perturb = 1;
        } else if (is_opt(s, "--threads") || is_opt(s, "--points")) {
            int threads = s[2] == 't';
            const char *v = opt_value(argc, argv, &i, threads ? "--threads" : "--points");
            char *end;
            errno = 0;
            long t = v ? strtol(v, &end, 10) : 0;
            if (threads && (!v || errno || end == v || *end || t < 1 || t > 1024)) {
                snprintf(msg, len, "--threads needs a whole number from 1 to 1024, got '%s'", v ? v : "");
                return 2;
            }
            if (!threads && (!v || errno || end == v || *end || t < 4 || t > 1024 || t % 2)) {
                snprintf(msg, len, "--points needs an even whole number from 4 to 1024, got '%s'",
                         v ? v : "");
                return 2;
            }
            *(threads ? &a->threads : &a->points) = (int)t;
        } else if (is_opt(s, "--allreduce-bytes")) {
            const char *v = opt_value(argc, argv, &i, "--allreduce-bytes");
            if (parse_count(v, &a->allreduce_bytes) != 0 || a->allreduce_bytes > 64.0 * 1073741824.0) {
                snprintf(msg, len, "--allreduce-bytes needs a byte count up to 64G (e.g. 268435456 or 256M), "
                         "got '%s'", v ? v : "");
                return 2;
            }
        } else if (s[0] == '-' && s[1] != '\0') {
            snprintf(msg, len, "unknown option '%s' (see --help)", s);
            return 2;
        } else if (!cls) {
            cls = s;
        } else {
            snprintf(msg, len, "unexpected argument '%s' (see --help)", s);
            return 2;
        }
    }
    if (!cls) {
        snprintf(msg, len, "need a CLASS, e.g. 'vb-eigen S' (see --help)");
        return 2;
    }
    for (size_t k = 0; k < NCLASSES; k++)
        if (strlen(cls) == 1 && toupper((unsigned char)cls[0]) == classes[k].name)
            a->cls = &classes[k];
    if (!a->cls) {
        snprintf(msg, len, "class '%s' is not one of S, W, A, B", cls);
        return 2;
    }
    if (!a->points)
        a->points = a->cls->points;
    if (nranks > a->points / 2) {
        snprintf(msg, len, "class %c with %d quadrature points has %d shifted systems to share; "
                 "run on at most %d ranks (or raise --points), got %d", a->cls->name, a->points,
                 a->points / 2, a->points / 2, nranks);
        return 2;
    }
    double own = moments_bytes(a->cls);
    if (a->allreduce_bytes > 0 && a->allreduce_bytes < own) {
        snprintf(msg, len, "--allreduce-bytes %.0f is smaller than class %c's moments (%.0f bytes); "
                 "give at least that, or 0 for exactly that", a->allreduce_bytes, a->cls->name, own);
        return 2;
    }
    if (a->allreduce_bytes < own)
        a->allreduce_bytes = own;
    a->allreduce_bytes = ceil(a->allreduce_bytes / sizeof(double)) * sizeof(double);
    return 0;
}

/* ---- memory (as vb-npb) ------------------------------------------------------------------ */

static double mem_per_rank(const struct args *a, int nranks)
{
    const struct eig_class *c = a->cls;
    double n = (double)c->grid * c->grid, L = c->block, K = (double)c->moments * c->block;
    double matrix = n * (4 + 5 * 12), rhs = n * L * 8, setup = n * 8;
    int mine = (a->points / 2 + nranks - 1) / nranks; /* systems of rank 0, the busiest */
    int concurrent = a->threads > 1 && mine >= a->threads ? a->threads : 1; /* see main */
    double solve = 4 * n * 2 * L * 8 * concurrent; /* y, r, p, q: complex, per solve at once */
    double dense = n * K * 8;         /* A Q beside Q (Q overwrites the moments) */
    double during = solve > dense ? solve : dense;
    if (setup > during)
        during = setup;
    return matrix + rhs + a->allreduce_bytes + during + 32.0 * 1048576;
}

/* the message of a node leader that lacks room (memavail.h) */
static void memory_short(const struct vb_mem_shortage *m, const void *arg)
{
    const struct args *a = arg;
    fprintf(stderr,
            "vb-eigen: class %c needs about %s on %s (%d rank(s) x %s), only %s available "
            "(%s); not starting (use a smaller class, a smaller --allreduce-bytes or fewer "
            "ranks per node)\n",
            a->cls->name, m->node_need_h, m->host, m->node_ranks,
            m->need_h, m->avail_h, m->what);
}

static int memory_check(const struct args *a, int nranks)
{
    return vb_memory_check(MPI_COMM_WORLD, mem_per_rank(a, nranks), "VB_EIGEN_MEM_AVAILABLE",
                           memory_short, a);
}

/* ---- output -------------------------------------------------------------------------------- */

/* ---- the run ------------------------------------------------------------------------------ */

/* a reproducible real block V, the same on every rank: a hash of (row, column) -> [-1, 1) */
static double rhs_entry(uint64_t i, uint64_t c)
{
    uint64_t x = (i * 0x9E3779B97F4A7C15ULL) ^ (c * 0xC2B2AE3D27D4EB4FULL) ^ 0x165667B19E3779F9ULL;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return (double)(x >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    struct args a;
    char msg[512];
    int rc = parse_args(argc, argv, nranks, &a, msg, sizeof msg);
    if (rc != 0)
        return vb_args_exit(rc, rank, "vb-eigen", msg, usage);
#ifdef _OPENMP
    omp_set_num_threads(a.threads);
    omp_set_max_active_levels(1); /* a thread that owns a whole solve runs it alone */
#endif
    vb_warn_thread_binding(rank, "vb-eigen", a.threads);
    rc = memory_check(&a, nranks);
    if (rc != 0) {
        MPI_Finalize();
        return rc;
    }

    /* ---- set-up, not timed: the matrix and the closed-form target ---- */
    const struct eig_class *c = a.cls;
    const int L = c->block, M = c->moments, K = L * M, N = a.points, systems = N / 2;
    double t_setup = eig_now();
    struct csr A;
    eig_laplacian(c->grid, a.perturb, &A);
    struct eig_target tgt;
    eig_target_interval(c->grid, c->first, c->count, &tgt);
    if (tgt.max_multiplicity > L || tgt.count >= K)
        eig_fatal(1, "internal error: class %c's interval holds %d eigenvalues of multiplicity up "
                  "to %d, too many for block %d x %d moments", c->name, tgt.count,
                  tgt.max_multiplicity, L, M);
    const int n = A.n;
    const double gamma = 0.5 * (tgt.lo + tgt.hi), radius = 0.5 * (tgt.hi - tgt.lo);
    const size_t buflen = (size_t)(a.allreduce_bytes / sizeof(double));
    t_setup = eig_now() - t_setup;

    /* ---- timed: right-hand sides, solves, allreduce, Rayleigh-Ritz ---- */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = eig_now();
    double *v = eig_alloc((size_t)n * L * sizeof(double), "the right-hand sides");
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (int col = 0; col < L; col++)
            v[(size_t)i * L + col] = rhs_entry((uint64_t)i, (uint64_t)col);
    double *s = calloc(buflen, sizeof(double));
    if (!s)
        eig_fatal(3, "out of memory allocating %zu bytes for the moments", buflen * sizeof(double));
    double t_rhs = eig_now() - t0;

    /* How the threads share a rank's systems: with at least as many systems as threads, each
     * thread solves whole systems (no synchronization during a solve: robust on busy or
     * oversubscribed cores); with fewer, all threads share each solve's rows. */
    const int mine = (systems - rank + nranks - 1) / nranks;
    const int by_systems = a.threads > 1 && mine >= a.threads;
    double t1 = eig_now(), solve_flops = 0.0, worst_resid = 0.0;
    long matvecs = 0;
#pragma omp parallel if (by_systems) reduction(+ : solve_flops, matvecs) reduction(max : worst_resid)
    {
        double *y = eig_alloc((size_t)n * 2 * L * sizeof(double), "the solutions");
#pragma omp for schedule(dynamic, 1)
        for (int j = rank; j < systems; j += nranks) {
            /* theta_j = 2 pi (j + 1/2) / N; z_j = c + r e^{i theta_j}; weight r e^{i theta_j} / N;
             * its conjugate point contributes the conjugate: take twice the real part */
            double th = 2.0 * 3.14159265358979323846 * (j + 0.5) / N;
            double er = cos(th), ei = sin(th);
            double resid;
            matvecs += eig_cocg(&A, L, gamma + radius * er, radius * ei, v, y, SOLVE_TOL,
                                SOLVE_MAXIT, &resid, &solve_flops);
            if (resid > worst_resid)
                worst_resid = resid;
            double cr[64], ci[64]; /* 2 w zeta^k, zeta = e^{i theta} */
            double wr = 2.0 * radius * er / N, wi = 2.0 * radius * ei / N;
            for (int k = 0; k < M; k++) {
                cr[k] = wr;
                ci[k] = wi;
                double nr = wr * er - wi * ei, ni = wr * ei + wi * er;
                wr = nr;
                wi = ni;
            }
            /* one thread at a time adds into the moments (by_systems), or all of them by rows */
#pragma omp critical(moments)
            {
#pragma omp parallel for if (!by_systems) schedule(static)
                for (int i = 0; i < n; i++) {
                    const double *yi = y + (size_t)i * 2 * L;
                    double *si = s + (size_t)i * K;
                    for (int k = 0; k < M; k++)
                        for (int col = 0; col < L; col++)
                            si[k * L + col] += cr[k] * yi[2 * col] - ci[k] * yi[2 * col + 1];
                }
            }
            solve_flops += 4.0 * n * K;
        }
        free(y);
    }
    double t_solve = eig_now() - t1;

    double t2 = eig_now();
    MPI_Barrier(MPI_COMM_WORLD); /* the wait for the slowest rank, apart from the transfer */
    double t_wait = eig_now() - t2;
    t2 = eig_now();
    for (size_t off = 0; off < buflen;) { /* MPI counts are int: 1 GiB pieces beyond 16 GiB */
        size_t cnt = buflen - off > (size_t)INT_MAX ? (size_t)1 << 27 : buflen - off;
        MPI_Allreduce(MPI_IN_PLACE, s + off, (int)cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        off += cnt;
    }
    double t_allreduce = eig_now() - t2;

    double t3 = eig_now();
    struct eig_ritz ritz;
    eig_rayleigh_ritz(&A, K, s, tgt.lo, tgt.hi, RESID_TOL, &ritz);
    double t_dense = eig_now() - t3;
    double t_total = eig_now() - t0;
    free(s);
    free(v);

    /* ---- gather the timers: slowest rank for the wall times, sums for the work ---- */
    double loc[4] = {t_total, t_solve, t_allreduce, t_wait}, mx[4];
    MPI_Reduce(loc, mx, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    double sums_in[3] = {t_solve, solve_flops, (double)matvecs}, sums[3];
    MPI_Reduce(sums_in, sums, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    double worst_all = 0.0;
    MPI_Reduce(&worst_resid, &worst_all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        /* verification against the closed form */
        struct vb_json_check chk[2];
        chk[0] = (struct vb_json_check){.name = "count", .value = ritz.nfound, .reference = tgt.count,
                                     .passed = ritz.nfound == tgt.count};
        chk[0].rel_err = fabs((double)ritz.nfound - tgt.count) / tgt.count;
        struct vb_json_check *e = &chk[1];
        *e = (struct vb_json_check){.name = "eigenvalues", .value = NAN, .reference = NAN,
                                    .rel_err = INFINITY, .epsilon = EIG_EPSILON};
        for (int i = 0; i < ritz.nfound; i++) {
            /* same count: the i-th of each; otherwise the nearest exact one */
            int best = i;
            if (ritz.nfound != tgt.count) {
                best = 0;
                for (int k = 1; k < tgt.count; k++)
                    if (fabs(tgt.exact[k] - ritz.values[i]) < fabs(tgt.exact[best] - ritz.values[i]))
                        best = k;
            }
            double rel = fabs(ritz.values[i] - tgt.exact[best]) / fabs(tgt.exact[best]);
            if (i == 0 || rel > e->rel_err) {
                e->value = ritz.values[i];
                e->reference = tgt.exact[best];
                e->rel_err = rel;
            }
        }
        e->passed = ritz.nfound > 0 && e->rel_err <= EIG_EPSILON;
        int failed = !chk[0].passed + !chk[1].passed;
        const struct vb_json_check *worst = !chk[0].passed ? &chk[0] : &chk[1];

        double dup = t_rhs + t_dense; /* every rank does this whole */
        double frac = dup / (dup + sums[0]);
        double mops = (sums[1] + ritz.flops * nranks) / mx[0] / 1e6;
        FILE *f = stdout;
        fprintf(f, "{\"kernel\":\"eigen\",\"class\":\"%c\",\"ranks\":%d,\"threads\":%d,", c->name,
                nranks, a.threads);
        fprintf(f, "\"time_s\":%.6f,\"mops\":%.3f,\"solves_per_s\":%.3f,\"verified\":%s,\"verify\":",
                mx[0], mops, (double)systems * L / mx[0], failed ? "false" : "true");
        vb_json_check(f, worst, 2, failed);
        fputs(",\"checks\":[", f);
        vb_json_check(f, &chk[0], 0, 0);
        fputc(',', f);
        vb_json_check(f, &chk[1], 0, 0);
        fprintf(f, "],\"iterations\":%.0f,\"size\":\"%dx%d\",\"n\":%d,\"points\":%d,\"systems\":%d,"
                "\"block\":%d,\"moments\":%d,\"subspace\":%d,\"thread_mode\":\"%s\","
                "\"interval\":[", sums[2], c->grid, c->grid, n, N, systems, L, M, ritz.rank,
                by_systems ? "systems" : "rows");
        vb_json_num(f, tgt.lo);
        fputc(',', f);
        vb_json_num(f, tgt.hi);
        fprintf(f, "],\"expected\":%d,\"found\":%d,\"rejected\":%d,\"max_multiplicity\":%d,"
                "\"eigenvalues\":[", tgt.count, ritz.nfound, ritz.nrejected, tgt.max_multiplicity);
        for (int i = 0; i < ritz.nfound; i++) {
            if (i)
                fputc(',', f);
            vb_json_num(f, ritz.values[i]);
        }
        fputc(']', f);
        vb_json_field(f, "max_ritz_residual", ritz.max_resid);
        vb_json_field(f, "max_solve_residual", worst_all);
        fprintf(f, ",\"allreduce_bytes\":%.0f,\"moments_bytes\":%.0f", a.allreduce_bytes,
                moments_bytes(c));
        fprintf(f, ",\"allreduce_s\":%.6f,\"wait_s\":%.6f,\"solve_s\":%.6f,\"dense_s\":%.6f,"
                "\"duplicated_s\":%.6f,\"setup_s\":%.6f", mx[2], mx[3], mx[1], t_dense, dup, t_setup);
        vb_json_field(f, "solve_imbalance", sums[0] > 0 ? mx[1] / (sums[0] / nranks) : 1.0);
        vb_json_field(f, "duplicated_fraction", frac);
        vb_json_field(f, "ideal_efficiency", 1.0 / (nranks * frac + (1.0 - frac)));
        fprintf(f, ",\"version\":%d}\n", EIG_VERSION);
        fflush(f);
    }
    free(ritz.values);
    free(tgt.exact);
    free(A.rowptr);
    free(A.col);
    free(A.val);
    MPI_Finalize();
    return 0;
}
