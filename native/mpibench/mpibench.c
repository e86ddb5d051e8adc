/*
 * vb-mpibench: MPI point-to-point and collective micro-benchmarks for virtbench.
 *
 *   mpirun -np R vb-mpibench OP [--min-bytes B] [--max-bytes B] [--iterations N]
 *                               [--time-budget S] [--warmup W]
 *
 * OP is one of the IMB-MPI1 set: pingpong, sendrecv, exchange, bcast, reduce, allreduce,
 * allgather, alltoall, gather, scatter, barrier.  Written from the methodology of the
 * Intel MPI Benchmarks (IMB) as described in its user guide; no IMB code.
 *
 * Output: one JSON object per message size on rank 0's stdout, for example
 *   {"op":"bcast","bytes":1024,"ranks":4,"iterations":1000,"t_min_us":1.234,
 *    "t_avg_us":1.456,"t_max_us":1.789,"mbps":703.297,"version":2}
 *
 * Timing semantics (IMB's)
 *   Every taking part rank times the whole loop of N calls (no timer inside the loop:
 *   one clock read costs ~30 ns, 8 % of a 0.36 us shared-memory latency); its time per
 *   call is loop / N (PingPong: loop / 2N, half a round trip).  t_min/t_avg/t_max are
 *   the min/mean/max of that over the ranks taking part (PingPong: ranks 0 and 1).
 *   N = 1000, at most 40 MiB / message size, cut down so that N calls take at most
 *   --time-budget (estimated from the fastest warm-up call); --iterations fixes N.
 *   Send and receive buffers are separate, as in IMB: with one buffer, every copy reads
 *   data the other core had just written: PingPong 2-3x slower at 4 KiB-1 MiB (issue 15).
 *   mbps       IMB's throughput: X/t for pingpong, 2X/t sendrecv, 4X/t exchange; bcast,
 *              reduce, allreduce X/t (study 001's table); null where IMB reports time
 *              only (allgather, alltoall, gather, scatter, barrier) and for 0 bytes.
 *              1 MB = 10^6 bytes.
 *   Data check Once per size, before timing, one call with patterned data is verified
 *              on every receiving rank; a mismatch ends the run (exit 4).
 *
 * Exit status: 0 success, 2 bad input, 3 buffers cannot be allocated, 4 data check failed.
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

#define VERSION 2
#define TAG 17
#define MAX_MSG_BYTES ((uint64_t)1 << 30) /* largest power of two with an int count */
#define MAX_REPS 1000                     /* IMB's MSGSPERSAMPLE */
#define OVERALL_VOL (40.0 * 1048576)      /* IMB: at most this many bytes per size */

enum op {
    OP_PINGPONG, OP_SENDRECV, OP_EXCHANGE, OP_BCAST, OP_REDUCE, OP_ALLREDUCE,
    OP_ALLGATHER, OP_ALLTOALL, OP_GATHER, OP_SCATTER, OP_BARRIER, N_OPS
};

/* Buffers in messages of X bytes (ALL = one per rank); mb = messages counted for MB/s. */
#define ALL (-1)
static const struct opinfo {
    const char *name;
    int send, recv, mb, floats;
} ops[N_OPS] = {
    {"pingpong", 1, 1, 1, 0},   {"sendrecv", 1, 1, 2, 0},   {"exchange", 1, 2, 4, 0},
    {"bcast", 1, 0, 1, 0},      {"reduce", 1, 1, 1, 1},     {"allreduce", 1, 1, 1, 1},
    {"allgather", 1, ALL, 0, 0}, {"alltoall", ALL, ALL, 0, 0}, {"gather", 1, ALL, 0, 0},
    {"scatter", ALL, 1, 0, 0},  {"barrier", 0, 0, 0, 0},
};
#define OP_LIST "pingpong, sendrecv, exchange, bcast, reduce, allreduce, allgather, " \
                "alltoall, gather, scatter or barrier"

struct options {
    enum op op;
    uint64_t min_bytes;
    uint64_t max_bytes;
    long iterations;   /* 0: IMB's rule and time_budget */
    double time_budget;
    long warmup;
    int corrupt;       /* test only: flip a received byte before the data check */
};

static int rank, nranks;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np R vb-mpibench OP [--min-bytes B] [--max-bytes B]\n"
            "                    [--iterations N] [--time-budget S] [--warmup W]\n"
            "  OP: pingpong | sendrecv | exchange | bcast | reduce | allreduce |\n"
            "      allgather | alltoall | gather | scatter | barrier\n"
            "  B accepts K, M, G suffixes (binary); default min 1, max 4M, max at most 1G\n"
            "  default: N = min(1000, 40 MiB / size), cut to about S=0.2 s per size; W=5\n"
            "  --test-corrupt (tests only) flips one received byte: the data check must fail\n");
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
    o->warmup = 5;
    o->corrupt = 0;
    int have_op = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (rank == 0)
                usage(stdout);
            return -1;
        }
        if (strcmp(a, "--test-corrupt") == 0) {
            o->corrupt = 1;
            continue;
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
        for (int k = 0; k < N_OPS; k++)
            if (strcmp(a, ops[k].name) == 0) {
                o->op = (enum op)k;
                found = 1;
            }
        if (!found)
            return fail("unknown operation '%s' (want " OP_LIST ")", a);
        have_op = 1;
    }
    if (!have_op)
        return fail("%s", "missing operation (" OP_LIST ")");
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
    char *s;  /* what this rank sends (bcast: the one buffer) */
    char *r;  /* what this rank receives */
};

/* Byte i of the message with this key at size x; never 0, so an undelivered (zeroed) byte
 * fails the check, and a different key or size gives different bytes. */
static unsigned char pat(long key, size_t i, size_t x)
{
    uint32_t h = ((uint32_t)i * 2654435761u) ^ (uint32_t)(key * 40503 + (long)(x % 65521));
    h *= 2246822519u;
    return (unsigned char)(1 + (h >> 24) % 255);
}

static void fill(char *buf, long key, size_t x)
{
    for (size_t i = 0; i < x; i++)
        buf[i] = (char)pat(key, i, x);
}

static int corrupt; /* --test-corrupt */

/* First byte of buf that differs from the message `key`, or -1. */
static long verify(char *buf, long key, size_t x)
{
    if (corrupt)
        buf[x / 2] ^= 0x20; /* as a broken transport would deliver it */
    for (size_t i = 0; i < x; i++)
        if ((unsigned char)buf[i] != pat(key, i, x))
            return (long)i;
    return -1;
}

/* Reductions: rank r contributes 1 + (r + i) % 8 at element i; sums of small integers are
 * exact in float, so the result is checked for equality. */
static void fill_floats(char *buf, size_t x)
{
    float *f = (float *)buf;
    for (size_t i = 0; i < x / sizeof(float); i++)
        f[i] = (float)(1 + (rank + i) % 8);
}

static long verify_sums(char *buf, size_t x)
{
    float want[8];
    for (int k = 0; k < 8; k++) {
        want[k] = 0;
        for (int r = 0; r < nranks; r++)
            want[k] += (float)(1 + (r + k) % 8);
    }
    if (corrupt)
        buf[x / 2] ^= 0x20;
    const float *f = (const float *)buf;
    for (size_t i = 0; i < x / sizeof(float); i++)
        if (f[i] != want[i % 8])
            return (long)(i * sizeof(float));
    return -1;
}

/* One call of the operation for message size x; `it` picks the root, which rotates from
 * call to call as in IMB, so no root can race ahead. */
static void run_once(enum op op, struct buffers *b, int x, long it)
{
    int root = (int)(it % nranks);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int count = x / (int)sizeof(float);
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Request req[2];
    switch (op) {
    case OP_PINGPONG:
        if (rank == 0) {
            MPI_Send(b->s, x, MPI_BYTE, 1, TAG, w);
            MPI_Recv(b->r, x, MPI_BYTE, 1, TAG, w, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(b->r, x, MPI_BYTE, 0, TAG, w, MPI_STATUS_IGNORE);
            MPI_Send(b->s, x, MPI_BYTE, 0, TAG, w);
        }
        break;
    case OP_SENDRECV:
        MPI_Sendrecv(b->s, x, MPI_BYTE, right, TAG, b->r, x, MPI_BYTE, left, TAG, w,
                     MPI_STATUS_IGNORE);
        break;
    case OP_EXCHANGE:
        MPI_Isend(b->s, x, MPI_BYTE, right, TAG, w, &req[0]);
        MPI_Isend(b->s, x, MPI_BYTE, left, TAG, w, &req[1]);
        MPI_Recv(b->r, x, MPI_BYTE, left, TAG, w, MPI_STATUS_IGNORE);
        MPI_Recv(b->r + x, x, MPI_BYTE, right, TAG, w, MPI_STATUS_IGNORE);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        break;
    case OP_BCAST:
        MPI_Bcast(b->s, x, MPI_BYTE, root, w);
        break;
    case OP_REDUCE:
        MPI_Reduce(b->s, b->r, count, MPI_FLOAT, MPI_SUM, root, w);
        break;
    case OP_ALLREDUCE:
        MPI_Allreduce(b->s, b->r, count, MPI_FLOAT, MPI_SUM, w);
        break;
    case OP_ALLGATHER:
        MPI_Allgather(b->s, x, MPI_BYTE, b->r, x, MPI_BYTE, w);
        break;
    case OP_ALLTOALL:
        MPI_Alltoall(b->s, x, MPI_BYTE, b->r, x, MPI_BYTE, w);
        break;
    case OP_GATHER:
        MPI_Gather(b->s, x, MPI_BYTE, b->r, x, MPI_BYTE, root, w);
        break;
    case OP_SCATTER:
        MPI_Scatter(b->s, x, MPI_BYTE, b->r, x, MPI_BYTE, root, w);
        break;
    case OP_BARRIER:
    case N_OPS:
        MPI_Barrier(w);
        break;
    }
}

/* One call with known data (root 0), checked on every rank that received some: the first
 * bad byte's offset, or -1.  Receive buffers are zeroed first, so stale data fails too. */
static long check_size(enum op op, struct buffers *b, int x)
{
    size_t X = (size_t)x, n = (size_t)nranks;
    int left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
    if (x == 0 || op == OP_BARRIER)
        return -1; /* nothing is delivered */
    if (ops[op].floats)
        fill_floats(b->s, X);
    else if (op == OP_ALLTOALL)
        for (size_t j = 0; j < n; j++)
            fill(b->s + j * X, (long)(rank * n + j), X);
    else if (op == OP_SCATTER)
        for (size_t j = 0; j < n; j++)
            fill(b->s + j * X, (long)j, X);
    else if (op != OP_BCAST || rank == 0)
        fill(b->s, rank, X);
    if (op == OP_BCAST && rank != 0)
        memset(b->s, 0, X);
    if (b->r)
        memset(b->r, 0, X * (ops[op].recv == ALL ? n : (size_t)ops[op].recv));

    run_once(op, b, x, 0);

    long bad = -1;
    switch (op) {
    case OP_PINGPONG:
        if (rank < 2)
            bad = verify(b->r, 1 - rank, X);
        break;
    case OP_SENDRECV:
        bad = verify(b->r, left, X);
        break;
    case OP_EXCHANGE:
        bad = verify(b->r, left, X);
        if (bad < 0 && (bad = verify(b->r + X, right, X)) >= 0)
            bad += x;
        break;
    case OP_BCAST:
        if (rank != 0)
            bad = verify(b->s, 0, X);
        break;
    case OP_REDUCE:
    case OP_ALLREDUCE:
        if (rank == 0 || op == OP_ALLREDUCE)
            bad = verify_sums(b->r, X);
        break;
    case OP_ALLGATHER:
    case OP_ALLTOALL:
    case OP_GATHER:
        if (op == OP_GATHER && rank != 0)
            break;
        for (size_t j = 0; j < n && bad < 0; j++) {
            long key = op == OP_ALLTOALL ? (long)(j * n + (size_t)rank) : (long)j;
            if ((bad = verify(b->r + j * X, key, X)) >= 0)
                bad += (long)(j * X);
        }
        break;
    case OP_SCATTER:
        bad = verify(b->r, rank, X);
        break;
    case OP_BARRIER:
    case N_OPS:
        break;
    }
    return bad;
}

static void emit(enum op op, uint64_t bytes, long iters, double tmin, double tavg, double tmax)
{
    char mbps[64];
    if (bytes == 0 || ops[op].mb == 0 || !(tavg > 0))
        snprintf(mbps, sizeof mbps, "null");
    else /* bytes/us = MB/s */
        snprintf(mbps, sizeof mbps, "%.3f", (double)ops[op].mb * (double)bytes / tavg);
    printf("{\"op\":\"%s\",\"bytes\":%llu,\"ranks\":%d,\"iterations\":%ld,"
           "\"t_min_us\":%.3f,\"t_avg_us\":%.3f,\"t_max_us\":%.3f,\"mbps\":%s,\"version\":%d}\n",
           ops[op].name, (unsigned long long)bytes, nranks, iters, tmin, tavg, tmax, mbps,
           VERSION);
    fflush(stdout);
}

/* Check, warm up, time one size and print it; 0, or 4 when the data check failed. */
static int measure_size(const struct options *o, struct buffers *b, int x)
{
    enum op op = o->op;
    long bad = check_size(op, b, x);
    int failed = bad >= 0, any;
    if (failed)
        fprintf(stderr, "vb-mpibench: data check failed: %s at %d bytes, rank %d received "
                        "byte %ld unlike what was sent\n", ops[op].name, x, rank, bad);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
        return 4;

    /* Warm-up calls; the fastest (on the slowest rank) estimates one call's cost, robust to a
     * call the scheduler delayed.  One call is made even with --warmup 0 when calibrating. */
    long w = o->warmup > 0 || o->iterations ? o->warmup : 1;
    double fastest = 0;
    for (long i = 0; i < w; i++) {
        double t0 = MPI_Wtime();
        run_once(op, b, x, i);
        double dt = MPI_Wtime() - t0;
        if (i == 0 || dt < fastest)
            fastest = dt;
    }
    long iters = o->iterations;
    if (!iters) {
        double slowest, n = MAX_REPS;
        MPI_Allreduce(&fastest, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (x > 0 && OVERALL_VOL / x < n)
            n = OVERALL_VOL / x;
        if (slowest > 0 && n * slowest > o->time_budget)
            n = o->time_budget / slowest;
        iters = n < 2 ? 2 : (long)n;
    }

    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD); /* IMB's N_BARR: the ranks leave together */
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        run_once(op, b, x, i);
    double t = (MPI_Wtime() - t0) / (double)iters * 1e6;
    if (op == OP_PINGPONG)
        t *= 0.5; /* half a round trip */

    /* min / mean / max over the ranks taking part (PingPong: 0 and 1; others wait) */
    int part = op != OP_PINGPONG || rank < 2;
    int nparts = op == OP_PINGPONG ? 2 : nranks;
    double lo_in = part ? t : INFINITY, hi_in = part ? t : 0, sum_in = part ? t : 0;
    double lo, hi, sum;
    MPI_Reduce(&lo_in, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&hi_in, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&sum_in, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        emit(op, (uint64_t)x, iters, lo, sum / nparts, hi);
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
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
    corrupt = o.corrupt;
    const struct opinfo *p = &ops[o.op];

    /* Reductions work on whole floats: sizes below 4 bytes (other than 0) become 4. */
    uint64_t unit = p->floats ? sizeof(float) : 1;
    uint64_t first = o.min_bytes < unit ? unit : o.min_bytes;
    uint64_t pw = 1;
    while (pw < first)
        pw <<= 1;
    first = pw;
    uint64_t top = o.op == OP_BARRIER ? 0 : o.max_bytes; /* Barrier has no message */

    /* Allocate once at the largest size; every rank must succeed.  Linux overcommits,
     * so also refuse (rather than be OOM-killed while touching the pages) when the
     * ranks of this node would need more than the memory available to them. */
    size_t cap = (size_t)(top < unit ? unit : top);
    size_t scap = p->send == ALL ? cap * (size_t)nranks : cap * (size_t)p->send;
    size_t rcap = p->recv == ALL ? cap * (size_t)nranks : cap * (size_t)p->recv;
    uint64_t need = (uint64_t)scap + rcap;
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
        buf.s = scap ? malloc(scap) : NULL;
        buf.r = rcap ? malloc(rcap) : NULL;
        ok = (buf.s != NULL || !scap) && (buf.r != NULL || !rcap);
    }
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok)
            fprintf(stderr, "vb-mpibench: rank %d cannot allocate %llu bytes of buffers for "
                            "--max-bytes %llu (lower --max-bytes or give the instance more memory)\n",
                    rank, (unsigned long long)need, (unsigned long long)o.max_bytes);
        free(buf.s);
        free(buf.r);
        MPI_Finalize();
        return 3;
    }
    /* Touch every page now so first-touch page faults are never timed; floats stay finite. */
    if (p->floats)
        fill_floats(buf.s, scap);
    else if (buf.s)
        memset(buf.s, 1, scap);
    if (buf.r)
        memset(buf.r, 0, rcap);

    /* Start-up warm-up (IMB's N_WARMUP, with more calls): the first calls after MPI_Init set
     * up connections and fault code in; with only the per-size warm-up, size 0 read 25 % high. */
    for (long i = 0; i < 100; i++)
        run_once(o.op, &buf, 0, i);

    /* Size 0 always comes first (a pure latency figure), then the powers of two. */
    rc = measure_size(&o, &buf, 0);
    for (uint64_t s = first; rc == 0 && s <= top; s <<= 1)
        rc = measure_size(&o, &buf, (int)s);

    free(buf.s);
    free(buf.r);
    MPI_Finalize();
    return rc;
}
