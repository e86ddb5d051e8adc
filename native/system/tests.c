/* The test table: names, units and descriptions are part of the output
 * contract (`vb-system list`). */
#include "harness.h"
#include "kernels.h"

#include <string.h>

const vb_test vb_tests[] = {
    { "dhrystone", "lps", "integer, string and record/pointer work (Dhrystone-like loop)",
      1.0, 0, 0, NULL, vb_dhry_run },
    { "whetstone", "MWIPS", "floating-point module mix (Whetstone-like), million weighted instructions/s",
      1.0, 0, 0, NULL, vb_whet_run },
    { "execl", "lps", "execl() of this binary, replacing the process each time",
      1.0, 0, 0, NULL, vb_execl_run },
    { "fcopy256", "KBps", "file copy with a 256-byte buffer (read one file, write another)",
      1.0, 1, 256, vb_fcopy_setup, vb_fcopy_run },
    { "fcopy1024", "KBps", "file copy with a 1024-byte buffer (read one file, write another)",
      1.0, 1, 1024, vb_fcopy_setup, vb_fcopy_run },
    { "fcopy4096", "KBps", "file copy with a 4096-byte buffer (read one file, write another)",
      1.0, 1, 4096, vb_fcopy_setup, vb_fcopy_run },
    { "pipe", "lps", "write 512 bytes into a pipe and read them back",
      1.0, 0, 0, NULL, vb_pipe_run },
    { "context", "lps", "two processes on one CPU pass an incrementing integer over two pipes",
      1.0, 0, 0, NULL, vb_context_run },
    { "spawn", "lps", "fork() a child that exits at once, then wait for it (both on one CPU)",
      1.0, 0, 0, NULL, vb_spawn_run },
    { "shell1", "lpm", "one /bin/sh text-processing script (sort, od, grep, tee, wc, tr, uniq)",
      60.0, 1, 0, vb_shell_setup, vb_shell1_run },
    { "shell8", "lpm", "eight concurrent copies of the shell script per loop",
      60.0, 1, 0, vb_shell_setup, vb_shell8_run },
    { "syscall", "lps", "cheap system calls: dup+close, getpid, getuid, umask",
      1.0, 0, 0, NULL, vb_syscall_run },
    { "fileopen", "lps", "open a file by its path, fstat it, close it",
      1.0, 1, 0, vb_fileopen_setup, vb_fileopen_run },
};

const size_t vb_ntests = sizeof vb_tests / sizeof vb_tests[0];

const vb_test *vb_find_test(const char *name)
{
    for (size_t i = 0; i < vb_ntests; i++)
        if (strcmp(vb_tests[i].name, name) == 0)
            return &vb_tests[i];
    return NULL;
}
