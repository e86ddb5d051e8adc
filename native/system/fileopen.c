/* fileopen: open a small file by its path, fstat it and close it, again and
 * again: the cost of a path lookup and a file descriptor's life, which a
 * sandbox that serves files from outside the workload's kernel (gVisor's
 * gofer) makes dearer than a plain system call. The file lives in the copy's
 * private scratch dir, so copies never share a directory entry. */
#include "kernels.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define BATCH 64   /* loops between clock reads */

static char path[4200];   /* one copy per process */

void vb_fileopen_setup(vb_ctx *ctx)
{
    snprintf(path, sizeof path, "%s/fileopen", ctx->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        vb_fail_errno(ctx, "create %s", path);
    if (vb_write_all(fd, "virtbench\n", 10) != 0)
        vb_fail_errno(ctx, "write %s", path);
    if (close(fd) != 0)
        vb_fail_errno(ctx, "close %s", path);
}

void vb_fileopen_run(vb_ctx *ctx, vb_result *out)
{
    struct stat sb;
    uint64_t loops = 0;
    do {
        for (int k = 0; k < BATCH; k++) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                vb_fail_errno(ctx, "open %s", path);
            if (fstat(fd, &sb) != 0)
                vb_fail_errno(ctx, "fstat %s", path);
            if (close(fd) != 0)
                vb_fail_errno(ctx, "close %s", path);
        }
        loops += BATCH;
    } while (!vb_time_up(ctx));
    out->units = loops;
    out->work = (double)loops;
}
