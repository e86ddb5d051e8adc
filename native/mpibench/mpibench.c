/*
 * vb-mpibench: MPI point-to-point and collective micro-benchmarks for virtbench.
 *
 *   mpirun -np R vb-mpibench OP [--min-bytes B] [--max-bytes B] [--iterations N]
 *                               [--time-budget S] [--warmup W]
 *
 * OP is one of pingpong, bcast, reduce, allreduce.  Written from the methodology
 * of the Intel MPI Benchmarks (IMB) as described in its user guide; no IMB code.
 *
 * Output: one JSON object per message size on rank 0's stdout, for example
 *   {"op":"bcast","bytes":1024,"ranks":4,"iterations":1000,"t_min_us":1.234,
 *    "t_avg_us":1.456,"t_max_us":1.789,"mbps":703.297,"version":1}
 *
 * Timing semantics
 *   pingpong   ranks 0 and 1 bounce one message; one sample is half of a round
 *              trip measured on rank 0.  t_min/t_max are the fastest / slowest
 *              sample, t_avg the mean over all iterations (what IMB prints as t).
 *   collective every rank times each call; per rank the mean over iterations is
 *              taken, then t_min/t_avg/t_max are the min/mean/max over ranks
 *              (IMB's t_min/t_avg/t_max).  The root of bcast and reduce rotates
 *              from one call to the next, as in IMB, so the root cannot race ahead.
 *   mbps       bytes / t_avg, with 1 MB = 10^6 bytes; null for 0 bytes.
 *
 * Exit status: 0 success, 2 bad input, 3 buffers cannot be allocated.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION 1
#define TAG 17
#define MAX_MSG_BYTES ((uint64_t)1 << 30) /* largest power of two with an int count */

enum op { OP_PINGPONG, OP_BCAST, OP_REDUCE, OP_ALLREDUCE };
static const char *const op_names[] = {"pingpong", "bcast", "reduce", "allreduce"};

struct options {
    enum op op;
    uint64_t min_bytes;
    uint64_t max_bytes;
    long iterations;   /* 0: calibrate from time_budget */
    double time_budget;
    long warmup;
};

static int rank, nranks;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np R vb-mpibench OP [--min-bytes B] [--max-bytes B]\n"
            "                    [--iterations N] [--time-budget S] [--warmup W]\n"
            "  OP: pingpong | bcast | reduce | allreduce\n"
            "  B accepts K, M, G suffixes (binary); default min 1, max 4M, max at most 1G\n"
            "  default: iterations calibrated to about S=0.2 s per size (2..1000), W=2\n");
}

/* Every rank parses the same argv; only rank 0 speaks.  Returns 0 or an exit code. */
static int fail(const char *fmt, const char *arg)
{
    if (rank == 0) {
        fputs("vb-mpibench: ", stderr);
        fprintf(stderr, fmt, arg);
        fputc('\n', stderr);
    }
    return 2;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (*s == '-' || *s == '+' || *s == '\0')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0')
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_long(const char *s, long lo, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    o->min_bytes = 1;
    o->max_bytes = (uint64_t)4 << 20;
    o->iterations = 0;
    o->time_budget = 0.2;
    o->warmup = 2;
    int have_op = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (rank == 0)
                usage(stdout);
            return -1;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *val = NULL;
            char key[32];
            const char *eq = strchr(name, '=');
            size_t n = eq ? (size_t)(eq - name) : strlen(name);
            if (n >= sizeof key)
                return fail("unknown option %s", a);
            memcpy(key, name, n);
            key[n] = '\0';
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return fail("option %s needs a value", a);

            if (strcmp(key, "min-bytes") == 0) {
                if (parse_size(val, &o->min_bytes))
                    return fail("bad --min-bytes '%s' (want e.g. 0, 512, 64K, 4M)", val);
            } else if (strcmp(key, "max-bytes") == 0) {
                if (parse_size(val, &o->max_bytes))
                    return fail("bad --max-bytes '%s' (want e.g. 64K, 4M, 1G)", val);
            } else if (strcmp(key, "iterations") == 0) {
                if (parse_long(val, 1, &o->iterations))
                    return fail("bad --iterations '%s' (want an integer >= 1)", val);
            } else if (strcmp(key, "warmup") == 0) {
                if (parse_long(val, 0, &o->warmup))
                    return fail("bad --warmup '%s' (want an integer >= 0)", val);
            } else if (strcmp(key, "time-budget") == 0) {
                char *end;
                errno = 0;
                double v = strtod(val, &end);
                if (errno || end == val || *end != '\0' || !(v > 0) || !isfinite(v))
                    return fail("bad --time-budget '%s' (want seconds > 0)", val);
                o->time_budget = v;
            } else {
                return fail("unknown option %s", a);
            }
            continue;
        }
        if (have_op)
            return fail("unexpected argument '%s'", a);
        int found = 0;
        for (int k = 0; k < 4; k++)
            if (strcmp(a, op_names[k]) == 0) {
                o->op = (enum op)k;
                found = 1;
            }
        if (!found)
            return fail("unknown operation '%s' (want pingpong, bcast, reduce or allreduce)", a);
        have_op = 1;
    }
    if (!have_op)
        return fail("%s", "missing operation (pingpong, bcast, reduce or allreduce)");
    if (o->max_bytes > MAX_MSG_BYTES)
        return fail("%s", "--max-bytes above 1G is not supported (MPI int counts)");
    if (o->min_bytes > o->max_bytes)
        return fail("%s", "--min-bytes is larger than --max-bytes");
    if (o->op == OP_PINGPONG && nranks < 2)
        return fail("%s", "pingpong needs at least 2 ranks (mpirun -np 2 ...)");
    return 0;
}

/* Bytes this process may still use: MemAvailable, capped by a cgroup v2 limit. */
static uint64_t available_memory(void)
{
    uint64_t avail = UINT64_MAX;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    unsigned long long max, cur;
    f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        int got = fscanf(f, "%llu", &max) == 1;
        fclose(f);
        FILE *g = got ? fopen("/sys/fs/cgroup/memory.current", "r") : NULL;
        if (g) {
            if (fscanf(g, "%llu", &cur) == 1) {
                uint64_t left = max > cur ? (uint64_t)(max - cur) : 0;
                if (left < avail)
                    avail = left;
            }
            fclose(g);
        }
    }
    return avail;
}

struct buffers {
    char *a;  /* send / bcast buffer */
    char *b;  /* receive buffer of reductions */
};

/* One timed call of the operation for message size `bytes`; `it` picks the root. */
static void run_collective(enum op op, struct buffers *buf, int bytes, long it)
{
    int root = (int)(it % nranks);
    int count = bytes / (int)sizeof(float);
    switch (op) {
    case OP_BCAST:
        MPI_Bcast(buf->a, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
        break;
    case OP_REDUCE:
        MPI_Reduce(buf->a, buf->b, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
        break;
    case OP_ALLREDUCE:
        MPI_Allreduce(buf->a, buf->b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case OP_PINGPONG:
        break;
    }
}

/* One round trip between ranks 0 and 1; returns the round-trip time on rank 0. */
static double pingpong_once(char *buf, int bytes)
{
    double t0 = MPI_Wtime();
    if (rank == 0) {
        MPI_Send(buf, bytes, MPI_BYTE, 1, TAG, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_BYTE, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Recv(buf, bytes, MPI_BYTE, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, bytes, MPI_BYTE, 0, TAG, MPI_COMM_WORLD);
    }
    return MPI_Wtime() - t0;
}

/* Iterations for this size: either fixed, or budget / (cost of one call), agreed by all. */
static long choose_iterations(const struct options *o, struct buffers *buf, int bytes)
{
    if (o->iterations > 0)
        return o->iterations;
    enum { PROBE = 3 };
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < PROBE; i++) {
        if (o->op == OP_PINGPONG)
            pingpong_once(buf->a, bytes);
        else
            run_collective(o->op, buf, bytes, i);
    }
    double per_call = (MPI_Wtime() - t0) / PROBE, slowest;
    MPI_Allreduce(&per_call, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double n = slowest > 0 ? o->time_budget / slowest : 1000.0;
    if (n > 1000.0)
        n = 1000.0;
    if (n < 2.0)
        n = 2.0;
    return (long)n;
}

static void emit(const struct options *o, uint64_t bytes, long iters,
                 double tmin, double tavg, double tmax)
{
    char mbps[64];
    if (bytes == 0 || !(tavg > 0))
        snprintf(mbps, sizeof mbps, "null");
    else
        snprintf(mbps, sizeof mbps, "%.3f", (double)bytes / tavg); /* bytes/us = MB/s */
    printf("{\"op\":\"%s\",\"bytes\":%llu,\"ranks\":%d,\"iterations\":%ld,"
           "\"t_min_us\":%.3f,\"t_avg_us\":%.3f,\"t_max_us\":%.3f,\"mbps\":%s,\"version\":%d}\n",
           op_names[o->op], (unsigned long long)bytes, nranks, iters, tmin, tavg, tmax, mbps,
           VERSION);
    fflush(stdout);
}

static void measure_size(const struct options *o, struct buffers *buf, int bytes)
{
    for (long i = 0; i < o->warmup; i++) {
        if (o->op == OP_PINGPONG)
            pingpong_once(buf->a, bytes);
        else
            run_collective(o->op, buf, bytes, i);
    }
    long iters = choose_iterations(o, buf, bytes);
    MPI_Barrier(MPI_COMM_WORLD);

    if (o->op == OP_PINGPONG) {
        double sum = 0, lo = INFINITY, hi = 0;
        for (long i = 0; i < iters; i++) {
            double rt = pingpong_once(buf->a, bytes);
            sum += rt;
            if (rt < lo)
                lo = rt;
            if (rt > hi)
                hi = rt;
        }
        if (rank == 0)
            emit(o, (uint64_t)bytes, iters, lo * 0.5e6, sum / iters * 0.5e6, hi * 0.5e6);
    } else {
        double sum = 0;
        for (long i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            run_collective(o->op, buf, bytes, i);
            sum += MPI_Wtime() - t0;
        }
        double mean = sum / iters, lo, hi, total;
        MPI_Reduce(&mean, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mean, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mean, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            emit(o, (uint64_t)bytes, iters, lo * 1e6, total / nranks * 1e6, hi * 1e6);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        MPI_Finalize();
        return rc < 0 ? 0 : rc;
    }

    /* Reductions work on whole floats: sizes below 4 bytes (other than 0) become 4. */
    uint64_t unit = o.op == OP_REDUCE || o.op == OP_ALLREDUCE ? sizeof(float) : 1;
    uint64_t first = o.min_bytes < unit ? unit : o.min_bytes;
    uint64_t p = 1;
    while (p < first)
        p <<= 1;
    first = p;

    /* Allocate once at the largest size; every rank must succeed.  Linux overcommits,
     * so also refuse (rather than be OOM-killed while touching the pages) when the
     * ranks of this node would need more than the memory available to them. */
    size_t cap = (size_t)(o.max_bytes < unit ? unit : o.max_bytes);
    int two = o.op == OP_REDUCE || o.op == OP_ALLREDUCE;
    uint64_t need = (uint64_t)cap * (two ? 2 : 1);
    MPI_Comm node;
    int node_ranks = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &node_ranks);
        MPI_Comm_free(&node);
    }
    uint64_t avail = available_memory();
    struct buffers buf = {NULL, NULL};
    int ok = need * (uint64_t)node_ranks <= avail;
    if (ok) {
        buf.a = malloc(cap);
        if (buf.a && two)
            buf.b = malloc(cap);
        ok = buf.a != NULL && (!two || buf.b != NULL);
    }
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok)
            fprintf(stderr, "vb-mpibench: rank %d cannot allocate %llu bytes of buffers for "
                            "--max-bytes %llu (lower --max-bytes or give the instance more memory)\n",
                    rank, (unsigned long long)need, (unsigned long long)o.max_bytes);
        free(buf.a);
        free(buf.b);
        MPI_Finalize();
        return 3;
    }
    /* Touch the pages now so page faults are not timed; floats stay finite under SUM. */
    float *f = (float *)buf.a;
    for (size_t i = 0; i < cap / sizeof(float); i++)
        f[i] = 1.0f;
    if (buf.b)
        memset(buf.b, 0, cap);

    /* Size 0 always comes first (a pure latency figure), then the powers of two. */
    measure_size(&o, &buf, 0);
    for (uint64_t s = first; s <= o.max_bytes; s <<= 1)
        measure_size(&o, &buf, (int)s);

    free(buf.a);
    free(buf.b);
    MPI_Finalize();
    return 0;
}
