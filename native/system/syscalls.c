/* syscall: a loop of cheap, real system calls. getpid goes through syscall()
 * so libc can never answer from a cache; the umask value is left unchanged. */
#include "kernels.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BATCH 256   /* loops between clock reads */

void vb_syscall_run(vb_ctx *ctx, vb_result *out)
{
    mode_t mask = umask(022);
    umask(mask);
    /* dup the status pipe: an fd that is always open (fd 0 may not be). */
    int fd = ctx->status_fd;
    uint64_t loops = 0;
    do {
        for (int k = 0; k < BATCH; k++) {
            int d = dup(fd);
            if (d < 0)
                vb_fail_errno(ctx, "dup");
            close(d);
            (void)syscall(SYS_getpid);
            (void)getuid();
            umask(mask);
        }
        loops += BATCH;
    } while (!vb_time_up(ctx));
    out->units = loops;
    out->work = (double)loops;
}
