/* pipe and context: the cost of moving small messages through the kernel,
 * first within one process, then between two that take turns. */
#include "kernels.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PIPE_MSG 512
#define PIPE_BATCH 256
#define CONTEXT_BATCH 64

void vb_pipe_run(vb_ctx *ctx, vb_result *out)
{
    int p[2];
    char buf[PIPE_MSG];
    if (pipe(p) != 0)
        vb_fail_errno(ctx, "pipe");
    memset(buf, 'v', sizeof buf);
    uint64_t loops = 0;
    do {
        for (int k = 0; k < PIPE_BATCH; k++) {
            if (write(p[1], buf, sizeof buf) != (ssize_t)sizeof buf)
                vb_fail_errno(ctx, "write to pipe");
            if (read(p[0], buf, sizeof buf) != (ssize_t)sizeof buf)
                vb_fail_errno(ctx, "read from pipe");
        }
        loops += PIPE_BATCH;
    } while (!vb_time_up(ctx));
    close(p[0]);
    close(p[1]);
    out->units = loops;
    out->work = (double)loops;
}

/* The partner answers every value v with v + 1 and checks that it receives
 * exactly the sequence it expects; it leaves when the pipe closes. */
static _Noreturn void partner(int in, int out)
{
    uint64_t expect = 0, v;
    for (;;) {
        ssize_t n = read(in, &v, sizeof v);
        if (n == 0)
            _exit(0);
        if (n != (ssize_t)sizeof v || v != expect)
            _exit(3);
        v++;
        if (write(out, &v, sizeof v) != (ssize_t)sizeof v)
            _exit(4);
        expect = v + 1;
    }
}

/* Both processes of a copy share one CPU (vb_pin_copy), so every round trip is two context
 * switches on that CPU. Left to the scheduler, the pair lands on one CPU or on two from run to
 * run, and the rate differs by 10-20x between the two (measured on a 2-vCPU VM: ~525k lps on one
 * CPU, 24k-90k split): a bimodal figure that says where the scheduler put the pair, not what a
 * switch costs. The partner inherits the affinity. */
void vb_context_run(vb_ctx *ctx, vb_result *out)
{
    int to[2], back[2];
    vb_pin_copy(ctx, "context");
    if (pipe(to) != 0 || pipe(back) != 0)
        vb_fail_errno(ctx, "pipe");
    pid_t pid = fork();
    if (pid < 0)
        vb_fail_errno(ctx, "fork");
    if (pid == 0) {
        close(to[1]);
        close(back[0]);
        partner(to[0], back[1]);
    }
    close(to[0]);
    close(back[1]);

    uint64_t v = 0, trips = 0, reply;
    do {
        for (int k = 0; k < CONTEXT_BATCH; k++) {
            if (write(to[1], &v, sizeof v) != (ssize_t)sizeof v)
                vb_fail_errno(ctx, "write to partner");
            if (read(back[0], &reply, sizeof reply) != (ssize_t)sizeof reply)
                vb_fail(ctx, "context partner stopped answering");
            if (reply != v + 1)
                vb_fail(ctx, "context partner answered %llu, expected %llu",
                        (unsigned long long)reply, (unsigned long long)(v + 1));
            v = reply + 1;
        }
        trips += CONTEXT_BATCH;
    } while (!vb_time_up(ctx));

    close(to[1]);   /* partner sees EOF and exits */
    close(back[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    out->units = trips;
    out->work = (double)trips;
}
