/* Clock, full-length I/O, and the two error paths: a copy reports its failure
 * to the parent over the status pipe; the parent prints one line and exits. */
#include "harness.h"
#include "protocol.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t vb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double vb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int vb_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int vb_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            return got == 0 ? 0 : -1;   /* EOF inside a message is an error */
        got += (size_t)n;
    }
    return 1;
}

static void send_msg(int fd, vb_msg *m)
{
    /* Nothing sensible is left to do if the parent is gone. */
    (void)vb_write_all(fd, m, sizeof *m);
}

void vb_send_ready(const vb_ctx *ctx)
{
    vb_msg m = { .type = VB_MSG_READY, .index = ctx->index };
    send_msg(ctx->status_fd, &m);
}

void vb_send_result(int status_fd, int index, const vb_result *res, double elapsed)
{
    vb_msg m = { .type = VB_MSG_RESULT, .index = index, .units = res->units,
                 .work = res->work, .elapsed = elapsed };
    send_msg(status_fd, &m);
}

static _Noreturn void fail_with(const vb_ctx *ctx, const char *fmt, va_list ap,
                                int err)
{
    vb_msg m = { .type = VB_MSG_FAIL, .index = ctx->index };
    int n = vsnprintf(m.text, sizeof m.text, fmt, ap);
    if (err && n >= 0 && (size_t)n < sizeof m.text)
        snprintf(m.text + n, sizeof m.text - (size_t)n, ": %s", strerror(err));
    send_msg(ctx->status_fd, &m);
    _exit(VB_EXIT_RUNTIME);
}

void vb_fail(const vb_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_with(ctx, fmt, ap, 0);
}

void vb_fail_errno(const vb_ctx *ctx, const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    fail_with(ctx, fmt, ap, err);
}

void vb_die(int status, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "vb-system: %s\n", line);
    exit(status);   /* runs the atexit handlers: scratch.c's removal of its directory */
}
