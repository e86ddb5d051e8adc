/* vb-monitor: virtbench's resource sampler (what Ganglia's gmond did in the studies).
 *
 * Every interval (default 1 s) it reads a handful of kernel counter files and prints one JSON
 * line with rates over the interval: CPU (fractions of the capacity and cores busy), memory
 * (bytes), network (bytes and packets per second, rx/tx) and disk (bytes and operations per
 * second, read/write).
 *
 * Two scopes:
 *   host    the machine it runs on: /proc/stat, /proc/meminfo, /proc/net/dev, /proc/diskstats.
 *           Used on the bare host and inside a VM (a guest's /proc is its own).
 *   cgroup  a container: /proc/stat there shows the host's CPUs, so CPU, memory and disk come
 *           from the container's own cgroup (v1: cpuacct, memory, blkio; v2: cpu.stat,
 *           memory.current/stat, io.stat); network from /proc/net/dev, which inside the
 *           container's network namespace shows only its interfaces.
 *   auto    cgroup when /run/.containerenv or /.dockerenv exists, else host.
 *
 * The first line ("type":"start") names the source of every series; then one "tick" line per
 * interval; a final partial tick and an "end" line on SIGTERM/SIGINT, at --lifetime, at
 * --count, or when --watch-pid's process is gone.
 *
 *   vb-monitor [--interval S] [--scope auto|host|cgroup] [--cgroup-root DIR] [--lifetime S]
 *              [--count N] [--watch-pid PID] [--out FILE] [--pidfile FILE] [--daemon]
 *   vb-monitor --stop PIDFILE [--print FILE] [--remove] [--wait S]
 *   vb-monitor --version
 *
 * --daemon detaches (double fork, setsid, stdio to /dev/null) once the start line is written,
 * so a driver's plain exec() can start it; --stop signals it, waits until it is gone (SIGKILL
 * after --wait seconds), prints --print's content and removes both files: one exec each way.
 *
 * Cost: files stay open and are re-read with pread() at offset 0; no allocation per tick.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VB_MONITOR_VERSION 1
#define BUFSZ 65536
#define MAXDEV 1024
#define NAMELEN 64

static volatile sig_atomic_t g_stop;
static char g_buf[BUFSZ];

static void on_signal(int sig) { g_stop = sig; }

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vb-monitor: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- counter files: opened once, re-read from offset 0 ------------------------------------ */

typedef struct {
    char path[512];
    int fd;
} cfile;

static int cf_open(cfile *f, const char *path)
{
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    return f->fd >= 0;
}

/* The file's text in g_buf (NUL-terminated), or NULL. */
static char *cf_read(cfile *f)
{
    if (f->fd < 0)
        return NULL;
    ssize_t n = pread(f->fd, g_buf, BUFSZ - 1, 0);
    if (n < 0) {
        /* Some files refuse pread; reopen and read. */
        close(f->fd);
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (f->fd < 0)
            return NULL;
        n = read(f->fd, g_buf, BUFSZ - 1);
        if (n < 0)
            return NULL;
    }
    g_buf[n] = '\0';
    return g_buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int read_small(const char *path, char *out, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0)
        return 0;
    out[n] = '\0';
    return 1;
}

/* "key value" lines (meminfo, memory.stat, cpu.stat): the value of key, or -1. */
static int64_t kv_get(const char *text, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, key, klen) == 0 && (p[klen] == ' ' || p[klen] == ':' || p[klen] == '\t')) {
            const char *v = p + klen;
            while (*v == ' ' || *v == ':' || *v == '\t')
                v++;
            return strtoll(v, NULL, 10);
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

/* ---- per-device counters (interfaces, disks), tolerant of devices coming and going --------- */

typedef struct {
    char name[NAMELEN];
    uint64_t v[4];
    int seen;      /* present in the current read */
    int excluded;  /* decided once per name */
} dev;

typedef struct {
    dev d[MAXDEV];
    int n;
} devtab;

static dev *dev_get(devtab *t, const char *name, int *is_new)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->d[i].name, name) == 0) {
            *is_new = 0;
            return &t->d[i];
        }
    if (t->n == MAXDEV)
        return NULL;
    dev *d = &t->d[t->n++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    *is_new = 1;
    return d;
}

/* Adds the increase of each device present before and now to sum[]; forgets vanished ones. */
static void dev_update(devtab *t, const char *name, const uint64_t v[4], double sum[4], int *first)
{
    int is_new;
    dev *d = dev_get(t, name, &is_new);
    if (!d)
        return;
    d->seen = 1;
    if (!is_new && !*first)
        for (int k = 0; k < 4; k++)
            if (v[k] >= d->v[k])
                sum[k] += (double)(v[k] - d->v[k]);
    memcpy(d->v, v, sizeof d->v);
}

static void dev_sweep(devtab *t)
{
    int j = 0;
    for (int i = 0; i < t->n; i++)
        if (t->d[i].seen) {
            t->d[i].seen = 0;
            if (i != j)
                t->d[j] = t->d[i];
            j++;
        }
    t->n = j;
}

/* ---- the sampler's state ---------------------------------------------------------------- */

enum { SCOPE_HOST, SCOPE_CGROUP };

typedef struct {
    int scope;
    int cgv;                  /* cgroup version 1 or 2 (cgroup scope) */
    char root[256];           /* cgroup mount root */
    double capacity;          /* CPUs the scope may use */
    int ncpu;
    long hz;
    /* files */
    cfile stat, meminfo, netdev, diskstats;
    cfile cg_cpu, cg_cpu_user, cg_cpu_sys, cg_cpustat, cg_throttle, cg_mem, cg_memstat, cg_swap, cg_io;
    int have_cpu, have_mem, have_net, have_disk, disk_from_procs;
    char src_cpu[400], src_mem[400], src_net[400], src_disk[400];
    /* previous raw values */
    uint64_t cpu[8];          /* host: user nice system idle iowait irq softirq steal (ticks) */
    uint64_t cg_usage_ns, cg_user, cg_sys, cg_thr_ns;
    devtab nets, disks, procs;
    int first;
    double mono;
} sampler;

typedef struct {
    double cpu_util, cpu_user, cpu_system, cpu_iowait, cpu_steal, cpu_idle, cpu_cores, cpu_throttled;
    int have_iowait, have_throttled;
    double mem_used, mem_cache, swap_used;
    double net[4];   /* rx bytes, rx packets, tx bytes, tx packets per s */
    double disk[4];  /* read bytes, read ops, write bytes, write ops per s */
} tick;

static int detect_container(void)
{
    return exists("/run/.containerenv") || exists("/.dockerenv");
}

static int affinity_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void cg_path(const sampler *s, char *out, size_t len, const char *ctrl, const char *file)
{
    if (s->cgv == 2)
        snprintf(out, len, "%s/%s", s->root, file);
    else
        snprintf(out, len, "%s/%s/%s", s->root, ctrl, file);
}

static int cg_open(sampler *s, cfile *f, const char *ctrl, const char *file)
{
    char p[512];
    cg_path(s, p, sizeof p, ctrl, file);
    return cf_open(f, p);
}

static void setup_host(sampler *s)
{
    s->have_cpu = cf_open(&s->stat, "/proc/stat");
    snprintf(s->src_cpu, sizeof s->src_cpu, "/proc/stat");
    s->ncpu = 0;
    char *t = cf_read(&s->stat);
    for (char *p = t; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, "cpu", 3) == 0 && isdigit((unsigned char)p[3]))
            s->ncpu++;
    if (s->ncpu == 0)
        s->ncpu = affinity_cpus();
    s->capacity = s->ncpu;
    s->have_mem = cf_open(&s->meminfo, "/proc/meminfo");
    snprintf(s->src_mem, sizeof s->src_mem, "/proc/meminfo (used = MemTotal - MemAvailable, as free(1) of procps 4; cache = Buffers + Cached + SReclaimable)");
    s->have_disk = cf_open(&s->diskstats, "/proc/diskstats");
    snprintf(s->src_disk, sizeof s->src_disk, "/proc/diskstats (whole disks with a device: no partitions, loop, dm, md)");
}

static void setup_cgroup(sampler *s)
{
    char p[512], txt[256];
    if (exists(strcat(strcpy(p, s->root), "/cgroup.controllers")))
        s->cgv = 2;
    else
        s->cgv = 1;
    int aff = affinity_cpus();
    s->ncpu = aff;
    s->capacity = aff;
    if (s->cgv == 2) {
        s->have_cpu = cg_open(s, &s->cg_cpustat, "", "cpu.stat");
        snprintf(s->src_cpu, sizeof s->src_cpu, "cgroup v2 cpu.stat (usage_usec, user_usec, system_usec)");
        snprintf(p, sizeof p, "%s/cpu.max", s->root);
        if (read_small(p, txt, sizeof txt) && strncmp(txt, "max", 3) != 0) {
            double q = strtod(txt, NULL), per = strtod(strchr(txt, ' ') ? strchr(txt, ' ') : "0", NULL);
            if (q > 0 && per > 0 && q / per < s->capacity)
                s->capacity = q / per;
        }
        s->have_mem = cg_open(s, &s->cg_mem, "", "memory.current");
        cg_open(s, &s->cg_memstat, "", "memory.stat");
        cg_open(s, &s->cg_swap, "", "memory.swap.current");
        snprintf(s->src_mem, sizeof s->src_mem,
                 "cgroup v2 memory.current, memory.stat (used = current - inactive_file; cache = file)");
        s->have_disk = cg_open(s, &s->cg_io, "", "io.stat");
        snprintf(s->src_disk, sizeof s->src_disk, "cgroup v2 io.stat (rbytes, wbytes, rios, wios)");
    } else {
        /* cpuacct may be mounted alone or as cpu,cpuacct; the plain name is usually a link. */
        const char *acct = exists(strcat(strcpy(p, s->root), "/cpuacct/cpuacct.usage")) ? "cpuacct" : "cpu,cpuacct";
        s->have_cpu = cg_open(s, &s->cg_cpu, acct, "cpuacct.usage");
        if (!cg_open(s, &s->cg_cpu_user, acct, "cpuacct.usage_user") ||
            !cg_open(s, &s->cg_cpu_sys, acct, "cpuacct.usage_sys")) {
            cg_open(s, &s->cg_cpustat, acct, "cpuacct.stat");
        }
        const char *cpuc = exists(strcat(strcpy(p, s->root), "/cpu/cpu.cfs_quota_us")) ? "cpu" : "cpu,cpuacct";
        cg_open(s, &s->cg_throttle, cpuc, "cpu.stat");
        char q[64], per[64];
        char pq[512], pp[512];
        cg_path(s, pq, sizeof pq, cpuc, "cpu.cfs_quota_us");
        cg_path(s, pp, sizeof pp, cpuc, "cpu.cfs_period_us");
        if (read_small(pq, q, sizeof q) && read_small(pp, per, sizeof per)) {
            double qq = strtod(q, NULL), pv = strtod(per, NULL);
            if (qq > 0 && pv > 0 && qq / pv < s->capacity)
                s->capacity = qq / pv;
        }
        snprintf(s->src_cpu, sizeof s->src_cpu, "cgroup v1 %s/cpuacct.usage (+usage_user/usage_sys)", acct);
        s->have_mem = cg_open(s, &s->cg_mem, "memory", "memory.usage_in_bytes");
        cg_open(s, &s->cg_memstat, "memory", "memory.stat");
        snprintf(s->src_mem, sizeof s->src_mem,
                 "cgroup v1 memory.usage_in_bytes, memory.stat (used = usage - total_inactive_file; cache = total_cache)");
        /* blkio.throttle.* stay at zero on recent kernels unless a limit is set, and v1 has no
         * other per-cgroup I/O counter: sum /proc/PID/io of the container's processes instead (its
         * PID namespace shows only them). Bytes only; what a process did after the last tick
         * before it exited is not seen. */
        DIR *dir = opendir("/proc");
        s->have_disk = dir != NULL && exists("/proc/self/io");
        if (dir)
            closedir(dir);
        s->disk_from_procs = 1;
        snprintf(s->src_disk, sizeof s->src_disk,
                 "/proc/PID/io read_bytes/write_bytes summed over the container's processes (cgroup v1 has no "
                 "usable per-cgroup I/O counter; no operation counts; I/O of a process after the last tick "
                 "before it exits is missed)");
    }
}

/* Is this interface one we count? Not lo, not a port of a bridge (its traffic also crosses the
 * bridge device, so counting both would count it twice). */
static int net_excluded(const char *name)
{
    char p[256];
    if (strcmp(name, "lo") == 0)
        return 1;
    snprintf(p, sizeof p, "/sys/class/net/%s/brport", name);
    return exists(p);
}

static int disk_excluded(const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "/sys/block/%s/device", name);
    return !exists(p);
}

static void read_net(sampler *s, double out[4])
{
    char *t = cf_read(&s->netdev);
    memset(out, 0, 4 * sizeof(double));
    if (!t)
        return;
    for (char *line = t; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char *colon = strchr(line, ':');
        char *nl = strchr(line, '\n');
        if (!colon || (nl && colon > nl))
            continue;
        char name[NAMELEN];
        char *b = line;
        while (*b == ' ')
            b++;
        size_t len = (size_t)(colon - b);
        if (len == 0 || len >= NAMELEN)
            continue;
        memcpy(name, b, len);
        name[len] = '\0';
        uint64_t f[16] = {0};
        char *q = colon + 1;
        for (int i = 0; i < 16; i++)
            f[i] = strtoull(q, &q, 10);
        int is_new;
        dev *d = dev_get(&s->nets, name, &is_new);
        if (!d)
            continue;
        if (is_new)
            d->excluded = net_excluded(name);
        if (d->excluded) {
            d->seen = 1;
            continue;
        }
        uint64_t v[4] = {f[0], f[1], f[8], f[9]};
        dev_update(&s->nets, name, v, out, &s->first);
    }
    dev_sweep(&s->nets);
}

static void read_diskstats(sampler *s, double out[4])
{
    char *t = cf_read(&s->diskstats);
    memset(out, 0, 4 * sizeof(double));
    if (!t)
        return;
    for (char *line = t; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        unsigned maj, min;
        char name[NAMELEN];
        unsigned long long rd, rdm, rsec, rms, wr, wrm, wsec;
        if (sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu", &maj, &min, name, &rd, &rdm, &rsec,
                   &rms, &wr, &wrm, &wsec) != 10)
            continue;
        int is_new;
        dev *d = dev_get(&s->disks, name, &is_new);
        if (!d)
            continue;
        if (is_new)
            d->excluded = disk_excluded(name);
        if (d->excluded) {
            d->seen = 1;
            continue;
        }
        uint64_t v[4] = {rsec * 512ULL, rd, wsec * 512ULL, wr};
        dev_update(&s->disks, name, v, out, &s->first);
    }
    dev_sweep(&s->disks);
}

/* cgroup v2 I/O: "MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.." per device. */
static void read_cg_io(sampler *s, double out[4])
{
    memset(out, 0, 4 * sizeof(double));
    char *t = cf_read(&s->cg_io);
    for (char *line = t; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char name[NAMELEN];
        if (sscanf(line, "%63s", name) != 1)
            continue;
        uint64_t v[4] = {0};
        const char *keys[4] = {"rbytes=", "rios=", "wbytes=", "wios="};
        char *nl = strchr(line, '\n');
        for (int k = 0; k < 4; k++) {
            char *at = strstr(line, keys[k]);
            if (at && (!nl || at < nl))
                v[k] = strtoull(at + strlen(keys[k]), NULL, 10);
        }
        dev_update(&s->disks, name, v, out, &s->first);
    }
    dev_sweep(&s->disks);
}

/* Per-process I/O (cgroup v1 containers): read_bytes and write_bytes of every process we can see. */
static void read_proc_io(sampler *s, double out[4])
{
    memset(out, 0, 4 * sizeof(double));
    DIR *dir = opendir("/proc");
    if (!dir)
        return;
    struct dirent *e;
    char path[300], txt[1024];
    pid_t self = getpid();
    while ((e = readdir(dir))) {
        if (!isdigit((unsigned char)e->d_name[0]) || (pid_t)atoi(e->d_name) == self)
            continue;
        snprintf(path, sizeof path, "/proc/%s/io", e->d_name);
        if (!read_small(path, txt, sizeof txt))
            continue;
        int64_t rb = kv_get(txt, "read_bytes"), wb = kv_get(txt, "write_bytes"), cw = kv_get(txt, "cancelled_write_bytes");
        uint64_t v[4] = {rb > 0 ? (uint64_t)rb : 0, 0, (uint64_t)(wb > 0 ? wb : 0) - (uint64_t)(cw > 0 && cw < wb ? cw : 0), 0};
        dev_update(&s->procs, e->d_name, v, out, &s->first);
    }
    closedir(dir);
    dev_sweep(&s->procs);
}

static void sample(sampler *s, tick *k, double dt)
{
    memset(k, 0, sizeof *k);
    /* CPU */
    if (s->scope == SCOPE_HOST && s->have_cpu) {
        char *t = cf_read(&s->stat);
        uint64_t c[8] = {0};
        if (t && strncmp(t, "cpu ", 4) == 0)
            sscanf(t + 4, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                   " %" SCNu64, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7]);
        double d[8], total = 0;
        for (int i = 0; i < 8; i++) {
            d[i] = c[i] >= s->cpu[i] ? (double)(c[i] - s->cpu[i]) : 0;
            total += d[i];
        }
        memcpy(s->cpu, c, sizeof c);
        if (total > 0) {
            k->cpu_user = (d[0] + d[1]) / total;
            k->cpu_system = (d[2] + d[5] + d[6]) / total;
            k->cpu_idle = d[3] / total;
            k->cpu_iowait = d[4] / total;
            k->cpu_steal = d[7] / total;
            k->cpu_util = k->cpu_user + k->cpu_system;
            k->cpu_cores = (d[0] + d[1] + d[2] + d[5] + d[6]) / s->hz / dt;
        }
        k->have_iowait = 1;
    } else if (s->scope == SCOPE_CGROUP && s->have_cpu) {
        uint64_t usage = 0, user = 0, sys = 0, thr = 0;
        int ns = 1; /* user/sys in ns (v1 usage_user) or ticks (v1 cpuacct.stat) or us (v2) */
        if (s->cgv == 2) {
            char *t = cf_read(&s->cg_cpustat);
            if (t) {
                usage = (uint64_t)kv_get(t, "usage_usec") * 1000;
                user = (uint64_t)kv_get(t, "user_usec") * 1000;
                sys = (uint64_t)kv_get(t, "system_usec") * 1000;
                int64_t th = kv_get(t, "throttled_usec");
                if (th >= 0) {
                    thr = (uint64_t)th * 1000;
                    k->have_throttled = 1;
                }
            }
        } else {
            char *t = cf_read(&s->cg_cpu);
            usage = t ? strtoull(t, NULL, 10) : 0;
            if (s->cg_cpu_user.fd >= 0 && s->cg_cpu_sys.fd >= 0) {
                t = cf_read(&s->cg_cpu_user);
                user = t ? strtoull(t, NULL, 10) : 0;
                t = cf_read(&s->cg_cpu_sys);
                sys = t ? strtoull(t, NULL, 10) : 0;
            } else if ((t = cf_read(&s->cg_cpustat))) {
                user = (uint64_t)kv_get(t, "user");
                sys = (uint64_t)kv_get(t, "system");
                ns = 0;
            }
            if ((t = cf_read(&s->cg_throttle))) {
                int64_t th = kv_get(t, "throttled_time");
                if (th >= 0) {
                    thr = (uint64_t)th;
                    k->have_throttled = 1;
                }
            }
        }
        double du = usage >= s->cg_usage_ns ? (double)(usage - s->cg_usage_ns) : 0;
        double dus = user >= s->cg_user ? (double)(user - s->cg_user) : 0;
        double dsy = sys >= s->cg_sys ? (double)(sys - s->cg_sys) : 0;
        double dth = thr >= s->cg_thr_ns ? (double)(thr - s->cg_thr_ns) : 0;
        s->cg_usage_ns = usage;
        s->cg_user = user;
        s->cg_sys = sys;
        s->cg_thr_ns = thr;
        (void)ns;
        k->cpu_cores = du / 1e9 / dt;
        k->cpu_util = k->cpu_cores / s->capacity;
        double split = dus + dsy;
        k->cpu_user = split > 0 ? k->cpu_util * dus / split : k->cpu_util;
        k->cpu_system = split > 0 ? k->cpu_util * dsy / split : 0;
        k->cpu_idle = k->cpu_util < 1 ? 1 - k->cpu_util : 0;
        k->cpu_throttled = dth / 1e9 / dt;
    }
    /* memory */
    if (s->scope == SCOPE_HOST && s->have_mem) {
        char *t = cf_read(&s->meminfo);
        if (t) {
            double kb = 1024.0;
            double total = kv_get(t, "MemTotal"), free_ = kv_get(t, "MemFree"), buf = kv_get(t, "Buffers"),
                   cached = kv_get(t, "Cached"), srec = kv_get(t, "SReclaimable"), st = kv_get(t, "SwapTotal"),
                   sf = kv_get(t, "SwapFree");
            double avail = kv_get(t, "MemAvailable");
            if (srec < 0)
                srec = 0;
            k->mem_cache = (buf + cached + srec) * kb;
            k->mem_used = (avail >= 0 ? total - avail : total - free_ - buf - cached - srec) * kb;
            k->swap_used = (st - sf) * kb;
        }
    } else if (s->scope == SCOPE_CGROUP && s->have_mem) {
        char *t = cf_read(&s->cg_mem);
        double usage = t ? strtod(t, NULL) : 0;
        t = cf_read(&s->cg_memstat);
        if (t) {
            if (s->cgv == 2) {
                double inact = kv_get(t, "inactive_file"), file = kv_get(t, "file");
                k->mem_used = usage - (inact > 0 ? inact : 0);
                k->mem_cache = file > 0 ? file : 0;
            } else {
                double inact = kv_get(t, "total_inactive_file"), cache = kv_get(t, "total_cache"),
                       swap = kv_get(t, "total_swap");
                k->mem_used = usage - (inact > 0 ? inact : 0);
                k->mem_cache = cache > 0 ? cache : 0;
                k->swap_used = swap > 0 ? swap : 0;
            }
        } else {
            k->mem_used = usage;
        }
        if (s->cgv == 2 && (t = cf_read(&s->cg_swap)))
            k->swap_used = strtod(t, NULL);
        if (k->mem_used < 0)
            k->mem_used = 0;
    }
    /* network and disk: rates */
    double n[4], d[4];
    read_net(s, n);
    if (s->scope == SCOPE_HOST)
        read_diskstats(s, d);
    else if (s->have_disk && s->disk_from_procs)
        read_proc_io(s, d);
    else if (s->have_disk)
        read_cg_io(s, d);
    else
        memset(d, 0, sizeof d);
    for (int i = 0; i < 4; i++) {
        k->net[i] = n[i] / dt;
        k->disk[i] = d[i] / dt;
    }
    s->first = 0;
}

static void json_str(FILE *out, const char *str)
{
    fputc('"', out);
    for (const char *p = str; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', out);
        if ((unsigned char)*p >= 0x20)
            fputc(*p, out);
    }
    fputc('"', out);
}

/* Memory the scope may use, bytes: MemTotal, or a cgroup's limit when lower. */
static double mem_limit(const sampler *s)
{
    char txt[4096], p[512];
    double total = 0;
    if (read_small("/proc/meminfo", txt, sizeof txt))
        total = kv_get(txt, "MemTotal") * 1024.0;
    if (s->scope == SCOPE_CGROUP) {
        cg_path(s, p, sizeof p, "memory", s->cgv == 2 ? "memory.max" : "memory.limit_in_bytes");
        if (read_small(p, txt, sizeof txt) && isdigit((unsigned char)txt[0])) {
            double lim = strtod(txt, NULL);
            if (lim > 0 && (total <= 0 || lim < total))
                total = lim;
        }
    }
    return total;
}

static void print_start(FILE *out, const sampler *s, double interval)
{
    fprintf(out, "{\"type\":\"start\",\"version\":%d,\"t\":%.3f,\"pid\":%d,\"scope\":\"%s\",\"interval\":%g,"
                 "\"ncpu\":%d,\"cpu_capacity\":%.4g,\"mem_limit\":%.0f,\"sources\":{\"cpu\":",
            VB_MONITOR_VERSION, now_real(), (int)getpid(), s->scope == SCOPE_HOST ? "host" : "cgroup", interval,
            s->ncpu, s->capacity, mem_limit(s));
    json_str(out, s->have_cpu ? s->src_cpu : "unavailable");
    fputs(",\"memory\":", out);
    json_str(out, s->have_mem ? s->src_mem : "unavailable");
    fputs(",\"network\":", out);
    json_str(out, s->have_net ? s->src_net : "unavailable");
    fputs(",\"disk\":", out);
    json_str(out, s->have_disk ? s->src_disk : "unavailable");
    fputs("}}\n", out);
    fflush(out);
}

static void print_tick(FILE *out, const sampler *s, const tick *k, double t, double dt)
{
    fprintf(out, "{\"type\":\"tick\",\"t\":%.3f,\"dt\":%.4f", t, dt);
    if (s->have_cpu) {
        fprintf(out, ",\"cpu_util\":%.5f,\"cpu_user\":%.5f,\"cpu_system\":%.5f,\"cpu_idle\":%.5f,\"cpu_cores\":%.5f",
                k->cpu_util, k->cpu_user, k->cpu_system, k->cpu_idle, k->cpu_cores);
        if (k->have_iowait)
            fprintf(out, ",\"cpu_iowait\":%.5f,\"cpu_steal\":%.5f", k->cpu_iowait, k->cpu_steal);
        if (k->have_throttled)
            fprintf(out, ",\"cpu_throttled\":%.5f", k->cpu_throttled);
    }
    if (s->have_mem)
        fprintf(out, ",\"mem_used\":%.0f,\"mem_cache\":%.0f,\"swap_used\":%.0f", k->mem_used, k->mem_cache,
                k->swap_used);
    if (s->have_net)
        fprintf(out, ",\"net_rx_bytes\":%.1f,\"net_rx_packets\":%.2f,\"net_tx_bytes\":%.1f,\"net_tx_packets\":%.2f",
                k->net[0], k->net[1], k->net[2], k->net[3]);
    if (s->have_disk && s->disk_from_procs)
        fprintf(out, ",\"disk_read_bytes\":%.1f,\"disk_write_bytes\":%.1f", k->disk[0], k->disk[2]);
    else if (s->have_disk)
        fprintf(out, ",\"disk_read_bytes\":%.1f,\"disk_read_ops\":%.2f,\"disk_write_bytes\":%.1f,"
                     "\"disk_write_ops\":%.2f", k->disk[0], k->disk[1], k->disk[2], k->disk[3]);
    fputs("}\n", out);
    fflush(out);
}

/* ---- --stop: signal, wait, print, remove ---------------------------------------------- */

static int is_monitor(pid_t pid)
{
    char p[64], cmd[256], st[512];
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
    if (!read_small(p, cmd, sizeof cmd))
        return 0;
    if (!strstr(cmd, "vb-monitor"))
        return 0;
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    if (read_small(p, st, sizeof st)) {
        char *rp = strrchr(st, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            return 0; /* a zombie has stopped already */
    }
    return 1;
}

static int do_stop(const char *pidfile, const char *print, int remove_files, double wait_s)
{
    char txt[64];
    int rc = 0;
    if (read_small(pidfile, txt, sizeof txt)) {
        pid_t pid = (pid_t)strtol(txt, NULL, 10);
        if (pid > 1 && is_monitor(pid)) {
            kill(pid, SIGTERM);
            double deadline = now_mono() + wait_s;
            while (is_monitor(pid) && now_mono() < deadline) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            if (is_monitor(pid)) {
                kill(pid, SIGKILL);
                fprintf(stderr, "vb-monitor: %d did not stop within %g s; killed\n", (int)pid, wait_s);
                rc = 3;
            }
        }
    }
    if (print) {
        int fd = open(print, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n;
            while ((n = read(fd, g_buf, BUFSZ)) > 0)
                if (fwrite(g_buf, 1, (size_t)n, stdout) != (size_t)n)
                    break;
            close(fd);
        }
        fflush(stdout);
    }
    if (remove_files) {
        unlink(pidfile);
        if (print)
            unlink(print);
    }
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(void)
{
    fputs("usage: vb-monitor [--interval S] [--scope auto|host|cgroup] [--cgroup-root DIR] [--lifetime S]\n"
          "                  [--count N] [--watch-pid PID] [--out FILE] [--pidfile FILE] [--daemon]\n"
          "       vb-monitor --stop PIDFILE [--print FILE] [--remove] [--wait S]\n"
          "       vb-monitor --version\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    double interval = 1.0, lifetime = 0, wait_s = 5;
    long count = 0;
    const char *scope = "auto", *out_path = NULL, *pidfile = NULL, *stop = NULL, *print = NULL;
    const char *cg_root = "/sys/fs/cgroup";
    int daemonize = 0, remove_files = 0;
    pid_t watch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && (v || (usage(), 0)) && ++i)
        if (strcmp(a, "--version") == 0) {
            printf("vb-monitor %d\n", VB_MONITOR_VERSION);
            return 0;
        } else if (strcmp(a, "--daemon") == 0)
            daemonize = 1;
        else if (strcmp(a, "--remove") == 0)
            remove_files = 1;
        else if (ARG("--interval"))
            interval = strtod(v, NULL);
        else if (ARG("--scope"))
            scope = v;
        else if (ARG("--cgroup-root"))
            cg_root = v;
        else if (ARG("--lifetime"))
            lifetime = strtod(v, NULL);
        else if (ARG("--count"))
            count = strtol(v, NULL, 10);
        else if (ARG("--watch-pid"))
            watch = (pid_t)strtol(v, NULL, 10);
        else if (ARG("--out"))
            out_path = v;
        else if (ARG("--pidfile"))
            pidfile = v;
        else if (ARG("--stop"))
            stop = v;
        else if (ARG("--print"))
            print = v;
        else if (ARG("--wait"))
            wait_s = strtod(v, NULL);
        else
            usage();
#undef ARG
    }
    if (stop)
        return do_stop(stop, print, remove_files, wait_s);
    if (!(interval >= 0.01 && interval <= 3600))
        die("--interval must be between 0.01 and 3600 seconds");
    if (daemonize && (!out_path || !pidfile))
        die("--daemon needs --out and --pidfile");

    static sampler s; /* large device tables: not on the stack */
    memset(&s, 0, sizeof s);
    s.stat.fd = s.meminfo.fd = s.netdev.fd = s.diskstats.fd = -1;
    s.cg_cpu.fd = s.cg_cpu_user.fd = s.cg_cpu_sys.fd = s.cg_cpustat.fd = s.cg_throttle.fd = -1;
    s.cg_mem.fd = s.cg_memstat.fd = s.cg_swap.fd = s.cg_io.fd = -1;
    s.hz = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
    snprintf(s.root, sizeof s.root, "%s", cg_root);
    if (strcmp(scope, "host") == 0)
        s.scope = SCOPE_HOST;
    else if (strcmp(scope, "cgroup") == 0)
        s.scope = SCOPE_CGROUP;
    else if (strcmp(scope, "auto") == 0)
        s.scope = detect_container() ? SCOPE_CGROUP : SCOPE_HOST;
    else
        die("--scope must be auto, host or cgroup");
    if (s.scope == SCOPE_HOST)
        setup_host(&s);
    else
        setup_cgroup(&s);
    s.have_net = cf_open(&s.netdev, "/proc/net/dev");
    snprintf(s.src_net, sizeof s.src_net, "%s",
             s.scope == SCOPE_HOST ? "/proc/net/dev (all interfaces but lo and bridge ports)"
                                   : "/proc/net/dev in the container's network namespace (all but lo)");

    FILE *out = stdout;
    int ready[2] = {-1, -1};
    if (daemonize) {
        if (pipe(ready) != 0)
            die("pipe: %s", strerror(errno));
        pid_t p = fork();
        if (p < 0)
            die("fork: %s", strerror(errno));
        if (p > 0) {
            /* The caller's exec returns once the sampler runs and its start line is written. */
            close(ready[1]);
            char msg[512];
            ssize_t n = read(ready[0], msg, sizeof msg - 1);
            waitpid(p, NULL, 0);
            if (n > 0 && msg[0] == 'O') {
                msg[n] = '\0';
                fputs(msg + 1, stdout);
                return 0;
            }
            fprintf(stderr, "vb-monitor: %s\n", n > 0 ? (msg[n] = '\0', msg) : "sampler did not start");
            return 1;
        }
        close(ready[0]);
        setsid();
        p = fork(); /* not a session leader: can never get a controlling terminal; parent reaps */
        if (p < 0)
            _exit(1);
        if (p > 0)
            _exit(0);
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 1);
            dup2(dn, 2);
            if (dn > 2)
                close(dn);
        }
    }
    if (out_path) {
        out = fopen(out_path, "w");
        if (!out) {
            if (daemonize) {
                dprintf(ready[1], "cannot write %s: %s", out_path, strerror(errno));
                _exit(1);
            }
            die("cannot write %s: %s", out_path, strerror(errno));
        }
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: the sleep returns at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    s.first = 1;
    tick k;
    sample(&s, &k, 1.0); /* baseline counters */
    double start = now_mono(), last = start;
    print_start(out, &s, interval);
    if (pidfile) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.tmp", pidfile);
        FILE *pf = fopen(tmp, "w");
        if (!pf || fprintf(pf, "%d\n", (int)getpid()) < 0 || fclose(pf) != 0 || rename(tmp, pidfile) != 0) {
            if (daemonize) {
                dprintf(ready[1], "cannot write pid file %s: %s", pidfile, strerror(errno));
                _exit(1);
            }
            die("cannot write pid file %s", pidfile);
        }
    }
    if (daemonize) {
        dprintf(ready[1], "O{\"pid\":%d}\n", (int)getpid());
        close(ready[1]);
    }

    const char *why = "signal";
    long ticks = 0;
    double next = start + interval;
    for (;;) {
        struct timespec ts = {(time_t)next, (long)((next - (time_t)next) * 1e9)};
        int r = 0;
        if (!g_stop)
            r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        double m = now_mono();
        double dt = m - last;
        if (g_stop || r == EINTR) {
            if (!g_stop)
                continue;
            /* A final partial tick, so a repetition shorter than the interval is still seen. */
            if (dt >= (interval * 0.2 < 0.05 ? interval * 0.2 : 0.05)) {
                sample(&s, &k, dt);
                print_tick(out, &s, &k, now_real(), dt);
            }
            break;
        }
        sample(&s, &k, dt);
        print_tick(out, &s, &k, now_real(), dt);
        last = m;
        ticks++;
        next += interval;
        if (next < m) /* we overran (a stopped or starved process): skip the missed ticks */
            next = m + interval;
        if (count > 0 && ticks >= count) {
            why = "count";
            break;
        }
        if (lifetime > 0 && m - start >= lifetime) {
            why = "lifetime";
            break;
        }
        if (watch > 0 && kill(watch, 0) != 0 && errno == ESRCH) {
            why = "watched process gone";
            break;
        }
    }
    fprintf(out, "{\"type\":\"end\",\"t\":%.3f,\"reason\":\"%s\",\"ticks\":%ld}\n", now_real(), why, ticks);
    fflush(out);
    if (pidfile && !daemonize)
        unlink(pidfile);
    return 0;
}
