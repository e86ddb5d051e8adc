/* fcopy256/1024/4096: copy a 128 KiB file into another, again and again, with
 * read()/write() of one buffer size; the rate is KB (1024 bytes) copied per
 * second. Both files are rewound at the end of the source, so the copy
 * rewrites pages already in the cache: it measures the file-system call path
 * and memory copies rather than the disk, as the classic test does.
 *
 * The file size keeps source + destination (256 KiB) well inside the L2 cache
 * of current server cores (512 KiB and up). With 1 MiB files the pair filled
 * this machine's 2 MiB L2, and whether it fitted depended on where the page
 * cache pages landed: fcopy4096 moved by 4.4 % (half-width of x(3)..x(10) of 12
 * runs) against 0.4 % at 128 KiB, and 3.9 % at 8 MiB, out in the shared L3. */
#include "kernels.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES (128 * 1024)
#define BATCH 64   /* read/write pairs between clock reads */

struct fcopy_state {
    int src, dst;
    char src_path[4200], dst_path[4200];
    char *buf;
};

static struct fcopy_state st;   /* one copy per process */

void vb_fcopy_setup(vb_ctx *ctx)
{
    /* A file-size limit must show up as EFBIG from write(), not a kill. */
    signal(SIGXFSZ, SIG_IGN);
    snprintf(st.src_path, sizeof st.src_path, "%s/src", ctx->dir);
    snprintf(st.dst_path, sizeof st.dst_path, "%s/dst", ctx->dir);
    st.buf = malloc((size_t)ctx->buf_size);
    if (!st.buf)
        vb_fail(ctx, "out of memory");

    int fd = open(st.src_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        vb_fail_errno(ctx, "create %s", st.src_path);
    for (size_t i = 0; i < (size_t)ctx->buf_size; i++)
        st.buf[i] = (char)('a' + i % 26);
    for (size_t done = 0; done < FILE_BYTES; done += (size_t)ctx->buf_size)
        if (vb_write_all(fd, st.buf, (size_t)ctx->buf_size) != 0)
            vb_fail_errno(ctx, "write %s", st.src_path);
    if (close(fd) != 0)
        vb_fail_errno(ctx, "close %s", st.src_path);

    st.src = open(st.src_path, O_RDONLY | O_CLOEXEC);
    if (st.src < 0)
        vb_fail_errno(ctx, "open %s", st.src_path);
    st.dst = open(st.dst_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (st.dst < 0)
        vb_fail_errno(ctx, "create %s", st.dst_path);
    ctx->state = &st;
}

void vb_fcopy_run(vb_ctx *ctx, vb_result *out)
{
    struct fcopy_state *s = ctx->state;
    size_t size = (size_t)ctx->buf_size;
    uint64_t bytes = 0;
    do {
        for (int k = 0; k < BATCH; k++) {
            ssize_t n = read(s->src, s->buf, size);
            if (n < 0)
                vb_fail_errno(ctx, "read %s", s->src_path);
            if (n == 0) {   /* end of the source: start both files over */
                if (lseek(s->src, 0, SEEK_SET) < 0 || lseek(s->dst, 0, SEEK_SET) < 0)
                    vb_fail_errno(ctx, "lseek");
                continue;
            }
            if (vb_write_all(s->dst, s->buf, (size_t)n) != 0)
                vb_fail_errno(ctx, "write %s", s->dst_path);
            bytes += (uint64_t)n;
        }
    } while (!vb_time_up(ctx));
    out->units = bytes / 1024;
    out->work = (double)bytes / 1024.0;
}
