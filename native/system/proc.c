/* spawn and execl: the cost of creating a process and of replacing one.
 * The execl chain keeps its state in its arguments: each exec'd image counts
 * one more, and the image that finds the deadline passed reports to the
 * parent over the inherited status pipe. The pid stays the same throughout. */
#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_BATCH 16

/* The copy and its children share one CPU (vb_pin_copy). Left free, a fresh child goes to the
 * idlest CPU: with one copy on two CPUs it ran on the other one in some runs and not in others,
 * and the rate moved by up to 15 % from run to run (7.3k-8.6k lps free, 12.2k-13.0k pinned, one
 * 2-vCPU VM) - a cross-CPU wake-up lottery, not the cost of fork. */
void vb_spawn_run(vb_ctx *ctx, vb_result *out)
{
    uint64_t n = 0;
    vb_pin_copy(ctx, "spawn");
    do {
        for (int k = 0; k < SPAWN_BATCH; k++) {
            pid_t pid = fork();
            if (pid < 0)
                vb_fail_errno(ctx, "fork");
            if (pid == 0)
                _exit(0);
            int st;
            while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                    vb_fail_errno(ctx, "waitpid");
        }
        n += SPAWN_BATCH;
    } while (!vb_time_up(ctx));
    out->units = n;
    out->work = (double)n;
}

/* argv of a chain image: self, flag, status fd, copy index, start ns,
 * deadline ns, execs so far. */
static _Noreturn void exec_next(const vb_ctx *ctx, const char *self,
                                uint64_t start, uint64_t deadline, uint64_t count)
{
    char fd[16], idx[16], s[24], d[24], c[24];
    snprintf(fd, sizeof fd, "%d", ctx->status_fd);
    snprintf(idx, sizeof idx, "%d", ctx->index);
    snprintf(s, sizeof s, "%" PRIu64, start);
    snprintf(d, sizeof d, "%" PRIu64, deadline);
    snprintf(c, sizeof c, "%" PRIu64, count);
    if (strchr(self, '/'))
        execl(self, self, VB_EXECL_ARG, fd, idx, s, d, c, (char *)NULL);
    else   /* no /proc and a bare argv[0]: let the PATH find us */
        execlp(self, self, VB_EXECL_ARG, fd, idx, s, d, c, (char *)NULL);
    vb_fail_errno(ctx, "execl %s", self);
}

void vb_execl_run(vb_ctx *ctx, vb_result *out)
{
    (void)out;   /* the last image of the chain reports instead */
    int flags = fcntl(ctx->status_fd, F_GETFD);
    if (flags < 0 || fcntl(ctx->status_fd, F_SETFD, flags & ~FD_CLOEXEC) < 0)
        vb_fail_errno(ctx, "fcntl on the status pipe");
    uint64_t start = ctx->start_ns;
    exec_next(ctx, ctx->self, start, start + (uint64_t)(ctx->duration * 1e9), 0);
}

static uint64_t arg_u64(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno)
        vb_die(VB_EXIT_USAGE, VB_EXECL_ARG " is internal to the execl test; do not pass it");
    return (uint64_t)v;
}

void vb_execl_continue(int argc, char **argv)
{
    if (argc != 7)
        vb_die(VB_EXIT_USAGE, VB_EXECL_ARG " is internal to the execl test; do not pass it");
    vb_ctx ctx = { .status_fd = (int)arg_u64(argv[2]), .index = (int)arg_u64(argv[3]),
                   .test = "execl" };
    uint64_t start = arg_u64(argv[4]), deadline = arg_u64(argv[5]);
    uint64_t count = arg_u64(argv[6]) + 1;   /* this image is one more exec */
    uint64_t now = vb_now_ns();
    if (now >= deadline) {
        vb_result res = { count, (double)count };
        vb_send_result(ctx.status_fd, ctx.index, &res, (double)(now - start) * 1e-9);
        _exit(0);
    }
    exec_next(&ctx, argv[0], start, deadline, count);
}
