/*
 * Shared by the MPI programs under native/ (vb-npb, vb-eigen): will a node hold the ranks
 * placed on it?  Each program estimates its bytes per rank; the node leaders compare the sum
 * with what the node can still give, so an oversized run stops with exit 3 and a message
 * instead of being killed by the OOM killer half way.  No Makefile here: each program's
 * Makefile compiles these files (../common/x.c) into its own binary.
 */
#ifndef VB_COMMON_MEMAVAIL_H
#define VB_COMMON_MEMAVAIL_H

#include <mpi.h>
#include <stddef.h>

/* bytes this node can still give: the smaller of MemAvailable and the cgroup (v2 or v1)
 * limit minus usage, or the value of environment variable env_var when it is set (tests);
 * *what names the source.  < 0: unknown, do not refuse */
double vb_available_memory(const char *env_var, const char **what);

/* "1.50 GiB" or "12.3 MiB" into buf */
const char *vb_human(double bytes, char *buf, size_t len);

/* what a node leader found short, for the program's own message */
struct vb_mem_shortage {
    double node_need, need, avail; /* bytes: all ranks of the node, one rank, available */
    int node_ranks;
    const char *what; /* source of avail */
    const char *host;
    char node_need_h[32], need_h[32], avail_h[32]; /* the same, human-readable (vb_human) */
};

/* Collective over comm: each rank needs `need` bytes.  A node leader that lacks room calls
 * report (on stderr, say) once.  Returns 0 on every rank when all nodes have room, else 3. */
int vb_memory_check(MPI_Comm comm, double need, const char *env_var,
                    void (*report)(const struct vb_mem_shortage *s, const void *arg), const void *arg);

#endif
