/*
 * vb-npb: virtbench's implementation of the NAS Parallel Benchmarks in C11 + MPI (+ OpenMP):
 * the kernels EP, CG, MG, FT, IS, the pseudo-applications LU, SP, BT and the multi-zone
 * SP-MZ, BT-MZ, LU-MZ, written from the published specifications (NAS reports RNR-94-007,
 * NAS-95-020, NAS-03-010) and verification tables, not from the NPB sources.
 *
 *   mpirun -np R vb-npb KERNEL CLASS [--threads T]
 *
 * KERNEL: ep | cg | mg | ft | is | lu | sp | bt | sp-mz | bt-mz | lu-mz   CLASS: S W A B C
 * --threads T   OpenMP threads per rank (default: OMP_NUM_THREADS, else 1; is runs with 1)
 *
 * Exit status: 0 run finished (verified or not: see the JSON line), 1 runtime error,
 * 2 bad input (kernel, class, options, rank count), 3 not enough memory.
 * Before allocating, the per-rank memory estimate times the ranks on each node is
 * compared with the memory available there: MemAvailable from /proc/meminfo, capped
 * by the cgroup limit minus current usage (v2 memory.max / v1 memory.limit_in_bytes).
 * The environment variable VB_NPB_MEM_AVAILABLE (bytes) replaces that measurement
 * (for tests).  A hidden option --perturb changes one input value of the kernel so
 * that verification must fail (to exercise "verified": false).
 */
#include "classes.h"
#include "npb.h"
#include "../common/memavail.h"
#include "../common/mpistart.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const struct npb_kernel *const kernels[] = {&npb_ep, &npb_cg, &npb_mg,   &npb_ft,   &npb_is,
                                                   &npb_lu, &npb_sp, &npb_bt,   &npb_spmz, &npb_btmz,
                                                   &npb_lumz};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static void usage(FILE *f)
{
    fputs("usage: mpirun -np R vb-npb KERNEL CLASS [--threads T]\n"
          "  KERNEL  ep | cg | mg | ft | is | lu | sp | bt | sp-mz | bt-mz | lu-mz\n"
          "  CLASS   S | W | A | B | C\n"
          "  --threads T  OpenMP threads per rank (default OMP_NUM_THREADS, else 1; is supports only 1)\n"
          "Rank counts: ep any; cg, mg, ft, is a power of two (within the class's grid);\n"
          "  lu, sp, bt any from 1 to n/2 of the n^3 grid; sp-mz, bt-mz, lu-mz 1 to the zones.\n"
          "Prints one JSON line with time_s, mops and verification on rank 0's stdout.\n",
          f);
}

struct args {
    const struct npb_kernel *kernel;
    char cls;
    int threads;
    int perturb;
};

/* returns 0, or an exit status with the message in msg (empty for --help) */
static int parse_args(int argc, char **argv, int nranks, struct args *a, char *msg, size_t len)
{
    a->kernel = NULL;
    a->cls = 0;
    a->threads = 0; /* 0: not given; OMP_NUM_THREADS, else 1 (below) */
    a->perturb = 0;
    msg[0] = '\0';
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help"))
            return -1;
        if (!strcmp(s, "--perturb")) {
            a->perturb = 1;
        } else if (!strcmp(s, "--threads") || !strncmp(s, "--threads=", 10)) {
            const char *v = s[9] == '=' ? s + 10 : (i + 1 < argc ? argv[++i] : NULL);
            char *end;
            errno = 0;
            long t = v ? strtol(v, &end, 10) : 0;
            if (!v || errno || end == v || *end || t < 1 || t > 1024) {
                snprintf(msg, len, "--threads needs a whole number from 1 to 1024, got '%s'",
                         v ? v : "");
                return 2;
            }
            a->threads = (int)t;
        } else if (s[0] == '-' && s[1] != '\0') {
            snprintf(msg, len, "unknown option '%s' (see --help)", s);
            return 2;
        } else if (npos < 2) {
            pos[npos++] = s;
        } else {
            snprintf(msg, len, "unexpected argument '%s' (see --help)", s);
            return 2;
        }
    }
    if (npos < 2) {
        snprintf(msg, len, "need KERNEL and CLASS, e.g. 'vb-npb cg S' (see --help)");
        return 2;
    }
    for (size_t k = 0; k < NKERNELS; k++)
        if (!strcmp(pos[0], kernels[k]->name))
            a->kernel = kernels[k];
    if (!a->kernel) {
        snprintf(msg, len, "kernel '%s' is not one of ep, cg, mg, ft, is, lu, sp, bt, sp-mz, bt-mz, lu-mz", pos[0]);
        return 2;
    }
    char c = (char)toupper((unsigned char)pos[1][0]);
    if (strlen(pos[1]) != 1 || !strchr(NPB_CLASS_LETTERS, c) || c == '\0') {
        snprintf(msg, len, "class '%s' is not one of S, W, A, B, C", pos[1]);
        return 2;
    }
    a->cls = c;
    if (a->threads == 0) {
        /* OpenMP's own variable when --threads is absent (its first value: "4,2" nests) */
        const char *env = getenv("OMP_NUM_THREADS");
        char *end;
        long t = env ? strtol(env, &end, 10) : 0;
        a->threads = (env && end != env && (*end == '\0' || *end == ',') && t >= 1 && t <= 1024 &&
                      a->kernel->multithreaded) ? (int)t : 1;
    }
    if (a->threads > 1 && !a->kernel->multithreaded) {
        snprintf(msg, len, "%s runs one thread per rank; --threads %d is not supported (use more ranks)",
                 a->kernel->name, a->threads);
        return 2;
    }
    return a->kernel->check(a->cls, nranks, msg, len);
}

/* ---- memory ------------------------------------------------------------------------- */

/* the message of a node leader that lacks room (memavail.h) */
static void memory_short(const struct vb_mem_shortage *m, const void *arg)
{
    const struct npb_ctx *ctx = ((const void *const *)arg)[0];
    const struct npb_kernel *k = ((const void *const *)arg)[1];
    fprintf(stderr,
            "vb-npb: %s class %c needs about %s on %s (%d rank(s) x %s), "
            "only %s available (%s); not starting\n",
            k->name, ctx->cls, m->node_need_h, m->host, m->node_ranks,
            m->need_h, m->avail_h, m->what);
}

/* 0 when every node has room for its ranks, else 3 (message printed by a node leader) */
static int memory_check(const struct npb_ctx *ctx, const struct npb_kernel *k)
{
    double need = k->mem_per_rank(ctx->cls, ctx->nranks) + 32.0 * 1024 * 1024; /* + runtime */
    const void *arg[2] = {ctx, k};
    return vb_memory_check(ctx->comm, need, "VB_NPB_MEM_AVAILABLE", memory_short, arg);
}

int main(int argc, char **argv)
{
    /* FUNNELED: OpenMP threads inside a rank, only the master thread calls MPI (lu pipelines that way) */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    struct npb_ctx ctx;
    ctx.comm = MPI_COMM_WORLD;
    MPI_Comm_rank(ctx.comm, &ctx.rank);
    MPI_Comm_size(ctx.comm, &ctx.nranks);

    struct args a;
    char msg[512];
    int rc = parse_args(argc, argv, ctx.nranks, &a, msg, sizeof msg);
    if (rc != 0)
        return vb_args_exit(rc, ctx.rank, "vb-npb", msg, usage);
    ctx.cls = a.cls;
    ctx.threads = a.threads;
    ctx.perturb = a.perturb;
#ifdef _OPENMP
    omp_set_num_threads(ctx.threads);
#endif
    vb_warn_thread_binding(ctx.rank, "vb-npb", ctx.threads);

    rc = memory_check(&ctx, a.kernel);
    if (rc != 0) {
        MPI_Finalize();
        return rc;
    }

    struct npb_result res;
    memset(&res, 0, sizeof res);
    a.kernel->run(&ctx, &res);
    if (ctx.rank == 0)
        npb_print_json(stdout, &ctx, a.kernel->name, &res);
    MPI_Finalize();
    return 0;
}
