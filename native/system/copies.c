/* Runs N copies of a test as N forked processes. Each copy prepares (untimed),
 * says READY over the shared status pipe and blocks on the "go" pipe; the
 * parent closes the go pipe once all are ready, so all copies start at the
 * same moment, and then collects one RESULT (or FAIL) per copy.
 * All copies time from the one start the parent published, not from when
 * each happened to wake: with more copies than CPUs, late starters would
 * otherwise run in windows that barely overlap, and the sum of per-copy
 * rates would overstate what the copies achieved together. */
#include "harness.h"
#include "protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Give up if copies are still silent this long after they should be done
 * (a hung tool must not hang the whole harness). */
#define SETUP_LIMIT_S 600.0
#define FINISH_GRACE_S 300.0

/* The start time (CLOCK_MONOTONIC ns), shared by all copies. */
static _Atomic uint64_t *shared_start;

static _Noreturn void copy_main(const vb_test *t, int index, double duration,
                                const char *scratch, const char *self,
                                int status_fd, int go_fd)
{
    char dir[4096];
    vb_ctx ctx = { .index = index, .duration = duration, .self = self,
                   .test = t->name, .status_fd = status_fd,
                   .buf_size = t->buf_size };

    /* Own process group, so the parent can kill this copy with everything it
     * started (shell tools, the context partner); die with the parent. */
    pid_t parent = getppid();
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(VB_EXIT_RUNTIME);
    vb_reset_signal_handlers();
    vb_scratch_forget();

    if (t->needs_dir) {
        snprintf(dir, sizeof dir, "%s/c%d", scratch, index);
        if (mkdir(dir, 0700) != 0)
            vb_fail_errno(&ctx, "mkdir %s", dir);
        ctx.dir = dir;
    }
    if (t->setup)
        t->setup(&ctx);
    vb_send_ready(&ctx);

    char c;
    while (read(go_fd, &c, 1) < 0 && errno == EINTR)
        ;   /* EOF (parent closed the pipe) is the start signal */
    close(go_fd);

    vb_result res = { 0, 0.0 };
    ctx.start_ns = atomic_load(shared_start);
    ctx.start = (double)ctx.start_ns * 1e-9;
    ctx.deadline = ctx.start + duration;
    t->run(&ctx, &res);
    vb_send_result(status_fd, index, &res, (double)(vb_now_ns() - ctx.start_ns) * 1e-9);
    _exit(0);
}

typedef struct pool {
    int n;          /* copies started */
    pid_t *pids;
    int *done;      /* result received */
    int *exited;    /* reaped early; wstatus holds its status */
    int *wstatus;
    int status_fd;
} pool;

static void reap(pool *p, int i)
{
    if (!p->exited[i])
        while (waitpid(p->pids[i], &p->wstatus[i], 0) < 0 && errno == EINTR)
            ;
    p->exited[i] = 1;
}

static void kill_all(pool *p)
{
    for (int i = 0; i < p->n; i++) {
        kill(-p->pids[i], SIGKILL);
        kill(p->pids[i], SIGKILL);
    }
    for (int i = 0; i < p->n; i++)
        reap(p, i);
}

static _Noreturn void abort_run(pool *p, const vb_test *t, const char *msg)
{
    kill_all(p);
    if (vb_stop_signal)
        vb_exit_on_signal();
    vb_die(VB_EXIT_RUNTIME, "%s: %s", t->name, msg);
}

/* Explain why a copy went away without a message (crash, OOM kill). */
static _Noreturn void abort_silent(pool *p, const vb_test *t)
{
    char msg[256] = "a copy exited without reporting";
    for (int i = 0; i < p->n; i++) {
        if (!p->exited[i] && waitpid(p->pids[i], &p->wstatus[i], WNOHANG) > 0)
            p->exited[i] = 1;
        if (p->done[i] || !p->exited[i])
            continue;
        int st = p->wstatus[i];
        if (WIFSIGNALED(st))
            snprintf(msg, sizeof msg, "copy %d was killed by signal %d (%s)", i,
                     WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
            snprintf(msg, sizeof msg, "copy %d exited with status %d without reporting",
                     i, WEXITSTATUS(st));
        break;
    }
    abort_run(p, t, msg);
}

/* A copy that exited wrote its message before exiting, so if one has exited
 * and the pipe is empty, its message will never come. */
static int dead_without_result(pool *p)
{
    int dead = 0;
    for (int i = 0; i < p->n; i++) {
        if (!p->exited[i] && waitpid(p->pids[i], &p->wstatus[i], WNOHANG) > 0)
            p->exited[i] = 1;
        if (p->exited[i] && !p->done[i])
            dead = 1;
    }
    if (!dead)
        return 0;
    struct pollfd pfd = { .fd = p->status_fd, .events = POLLIN };
    return poll(&pfd, 1, 0) == 0;
}

/* Next message, or abort on signal, EOF, or time limit. */
static void next_msg(pool *p, const vb_test *t, double limit, vb_msg *m)
{
    for (;;) {
        if (vb_stop_signal)
            abort_run(p, t, "interrupted");
        if (vb_now() > limit)
            abort_run(p, t, "copies did not finish in time; a tool may be hanging");
        struct pollfd pfd = { .fd = p->status_fd, .events = POLLIN };
        int r = poll(&pfd, 1, 100);
        if (r < 0 && errno != EINTR)
            abort_run(p, t, "poll on the status pipe failed");
        if (r == 0 && dead_without_result(p))
            abort_silent(p, t);
        if (r <= 0)
            continue;
        int got = vb_read_all(p->status_fd, m, sizeof *m);
        if (got == 0)
            abort_silent(p, t);
        if (got < 0)
            abort_run(p, t, "reading the status pipe failed");
        if (m->index < 0 || m->index >= p->n)
            abort_run(p, t, "malformed message from a copy");
        if (m->type == VB_MSG_FAIL) {
            m->text[sizeof m->text - 1] = '\0';
            char msg[sizeof m->text + 32];
            snprintf(msg, sizeof msg, "copy %d: %s", (int)m->index, m->text);
            abort_run(p, t, msg);
        }
        return;
    }
}

void vb_run_copies(const vb_test *t, double duration, int copies,
                   const char *scratch, const char *self, vb_run *out)
{
    int status[2], go[2];
    if (pipe2(status, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0)
        vb_die(VB_EXIT_RUNTIME, "pipe: %s", strerror(errno));

    pool p = { 0, calloc((size_t)copies, sizeof(pid_t)),
               calloc((size_t)copies, sizeof(int)), calloc((size_t)copies, sizeof(int)),
               calloc((size_t)copies, sizeof(int)), status[0] };
    out->per_copy = calloc((size_t)copies, sizeof(double));
    if (!p.pids || !p.done || !p.exited || !p.wstatus || !out->per_copy)
        vb_die(VB_EXIT_RUNTIME, "out of memory");

    shared_start = mmap(NULL, sizeof *shared_start, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_start == MAP_FAILED)
        vb_die(VB_EXIT_RUNTIME, "mmap: %s", strerror(errno));

    fflush(NULL);   /* nothing buffered may be written twice */
    for (int i = 0; i < copies; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "fork of copy %d failed: %s; lower --copies", i, strerror(errno));
            abort_run(&p, t, msg);
        }
        if (pid == 0) {
            close(status[0]);
            close(go[1]);
            copy_main(t, i, duration, scratch, self, status[1], go[0]);
        }
        setpgid(pid, pid);   /* also done by the child; whichever runs first */
        p.pids[p.n++] = pid;
    }
    close(status[1]);
    close(go[0]);

    vb_msg m;
    double limit = vb_now() + SETUP_LIMIT_S;
    for (int ready = 0; ready < copies; ready++) {
        next_msg(&p, t, limit, &m);
        if (m.type != VB_MSG_READY)
            abort_run(&p, t, "copy reported before the start");
    }

    uint64_t t0_ns = vb_now_ns();
    double t0 = (double)t0_ns * 1e-9;
    atomic_store(shared_start, t0_ns);
    close(go[1]);   /* start all copies at once */
    limit = t0 + duration + FINISH_GRACE_S + duration;
    out->copies = copies;
    out->count = 0;
    out->rate = 0.0;
    for (int results = 0; results < copies; results++) {
        next_msg(&p, t, limit, &m);
        if (m.type != VB_MSG_RESULT || p.done[m.index] || !(m.elapsed > 0.0))
            abort_run(&p, t, "unexpected message from a copy");
        p.done[m.index] = 1;
        out->per_copy[m.index] = m.work / m.elapsed * t->per_second;
        out->count += m.units;
    }
    out->duration_s = vb_now() - t0;
    for (int i = 0; i < copies; i++)
        out->rate += out->per_copy[i];

    for (int i = 0; i < p.n; i++)
        reap(&p, i);
    close(status[0]);
    free(p.pids);
    free(p.done);
    free(p.exited);
    free(p.wstatus);
    munmap((void *)shared_start, sizeof *shared_start);
}
