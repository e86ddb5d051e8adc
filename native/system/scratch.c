/* The private temporary directory of the file-copy and shell tests: one
 * mkdtemp dir under --dir, removed with everything in it at the end, on
 * failure and on SIGINT/SIGTERM. Everything inside it was made by us. */
#include "harness.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char scratch_path[4096];

char *vb_scratch_create(const char *base)
{
    char tmpl[sizeof scratch_path];
    int n = snprintf(tmpl, sizeof tmpl, "%s/vb-system.XXXXXX", base);
    if (n < 0 || (size_t)n >= sizeof tmpl)
        vb_die(VB_EXIT_USAGE, "--dir %s: path too long; pass a shorter directory with --dir", base);
    if (!mkdtemp(tmpl)) {
        int err = errno;
        if (err == EACCES || err == EPERM || err == EROFS || err == ENOENT || err == ENOTDIR)
            vb_die(VB_EXIT_USAGE, "--dir %s: not a writable directory (%s); pass a writable directory with --dir",
                   base, strerror(err));
        vb_die(VB_EXIT_RUNTIME, "--dir %s: cannot create a temporary directory: %s", base, strerror(err));
    }
    memcpy(scratch_path, tmpl, sizeof scratch_path);
    /* exit() from anywhere (vb_die too) removes it: harness.c need not know this file. */
    if (atexit(vb_scratch_remove) != 0)
        vb_die(VB_EXIT_RUNTIME, "cannot register the removal of %s", tmpl);
    /* A copy of the path: forked copies clear scratch_path (see below). */
    char *dup = strdup(tmpl);
    if (!dup)
        vb_die(VB_EXIT_RUNTIME, "out of memory");
    return dup;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;   /* keep going: remove as much as possible */
}

void vb_scratch_remove(void)
{
    if (!scratch_path[0])
        return;
    /* A killed shell tool may still be exiting and closing files; retry a
     * few times rather than leave a half-removed tree. */
    for (int attempt = 0; attempt < 50; attempt++) {
        nftw(scratch_path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        if (access(scratch_path, F_OK) != 0)
            break;
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
    scratch_path[0] = '\0';
}

void vb_scratch_forget(void)
{
    scratch_path[0] = '\0';
}
