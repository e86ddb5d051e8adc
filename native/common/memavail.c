/* Memory the node can still give, and the collective check (memavail.h). */
#define _POSIX_C_SOURCE 200809L /* gethostname under -std=c11 */
#include "memavail.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int read_u64_file(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64];
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || !isdigit((unsigned char)buf[0]))
        return -1; /* "max" or unreadable: no limit */
    *out = strtoull(buf, NULL, 10);
    return 0;
}

double vb_available_memory(const char *env_var, const char **what)
{
    const char *env = getenv(env_var);
    if (env && *env) {
        *what = env_var;
        return strtod(env, NULL);
    }
    double avail = -1;
    *what = "MemAvailable";
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                avail = (double)kb * 1024.0;
        fclose(f);
    }
    uint64_t lim, used = 0;
    double cg = -1;
    if (read_u64_file("/sys/fs/cgroup/memory.max", &lim) == 0) {
        read_u64_file("/sys/fs/cgroup/memory.current", &used);
        cg = lim > used ? (double)(lim - used) : 0.0;
    } else if (read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &lim) == 0 &&
               lim < (1ULL << 60)) { /* v1 reports "no limit" as a huge number */
        read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used);
        cg = lim > used ? (double)(lim - used) : 0.0;
    }
    if (cg >= 0 && (avail < 0 || cg < avail)) {
        avail = cg;
        *what = "cgroup memory limit";
    }
    return avail;
}

const char *vb_human(double bytes, char *buf, size_t len)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

int vb_memory_check(MPI_Comm comm, double need, const char *env_var,
                    void (*report)(const struct vb_mem_shortage *s, const void *arg), const void *arg)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm node;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int nrank, nsize;
    MPI_Comm_rank(node, &nrank);
    MPI_Comm_size(node, &nsize);
    double node_need = 0;
    MPI_Reduce(&need, &node_need, 1, MPI_DOUBLE, MPI_SUM, 0, node);
    int status = 0;
    if (nrank == 0) {
        const char *what;
        double avail = vb_available_memory(env_var, &what);
        if (avail >= 0 && node_need > avail) {
            char host[256] = "this node";
            gethostname(host, sizeof host);
            host[sizeof host - 1] = '\0';
            struct vb_mem_shortage s = {node_need, need, avail, nsize, what, host, "", "", ""};
            vb_human(node_need, s.node_need_h, sizeof s.node_need_h);
            vb_human(need, s.need_h, sizeof s.need_h);
            vb_human(avail, s.avail_h, sizeof s.avail_h);
            report(&s, arg);
            status = 3;
        }
    }
    MPI_Comm_free(&node);
    int any = 0;
    MPI_Allreduce(&status, &any, 1, MPI_INT, MPI_MAX, comm);
    return any;
}
