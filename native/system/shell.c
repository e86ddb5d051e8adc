/* shell1/shell8: start /bin/sh on a small text-processing script (the kind of
 * work a login shell does: many short-lived standard tools) and wait for it.
 * shell8 starts 8 scripts at once per loop. Rates are per minute.
 * Each copy works in its own directory, which the copy chdir()s into. */
#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCRIPT "script.sh"
#define INPUT "words.txt"
#define ERRLOG "stderr.log"
#define INPUT_LINES 400

/* Scratch names carry $$ so concurrent scripts in one directory never
 * collide; set -e makes a missing tool fail the run instead of going on. */
static const char script_text[] =
    "# virtbench shell test: a fixed chain of standard text tools.\n"
    "set -e\n"
    "sort " INPUT " > s.$$\n"
    "tr 'a-z' 'A-Z' < s.$$ | uniq -c > u.$$\n"
    "od -c u.$$ | sort -k 2 > o.$$\n"
    "grep -e ing -e ter s.$$ | tee g.$$ | wc -l > w.$$\n"
    "wc -c o.$$ g.$$ >> w.$$\n"
    "rm -f s.$$ u.$$ o.$$ g.$$ w.$$\n";

static const char *const syllables[] = {
    "vir", "tu", "al", "ma", "chine", "con", "tain", "er", "host", "ing",
    "bench", "mark", "ker", "nel", "page", "ca", "che", "net", "work", "ter",
    "disk", "clo", "ud", "node", "proc", "ess", "sche", "dul", "ed", "lo",
};

static int null_fd = -1, err_fd = -1;

static int write_file(const char *name, const char *text, size_t len)
{
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = vb_write_all(fd, text, len);
    if (close(fd) != 0)
        rc = -1;
    return rc;
}

/* A deterministic pseudo-text: the same bytes on every platform. */
static size_t make_words(char *buf, size_t cap)
{
    uint32_t seed = 12345;
    size_t len = 0;
    const size_t nsyl = sizeof syllables / sizeof syllables[0];
    for (int line = 0; line < INPUT_LINES; line++) {
        int words = 4 + line % 6;
        for (int w = 0; w < words; w++) {
            int parts = 1 + w % 3;
            for (int p = 0; p < parts; p++) {
                seed = seed * 1103515245u + 12345u;
                const char *s = syllables[(seed >> 16) % nsyl];
                size_t n = strlen(s);
                if (len + n + 2 >= cap)
                    return len;
                memcpy(buf + len, s, n);
                len += n;
            }
            buf[len++] = w + 1 < words ? ' ' : '\n';
        }
    }
    return len;
}

void vb_shell_setup(vb_ctx *ctx)
{
    static char words[64 * 1024];
    if (chdir(ctx->dir) != 0)
        vb_fail_errno(ctx, "chdir %s", ctx->dir);
    if (write_file(SCRIPT, script_text, sizeof script_text - 1) != 0)
        vb_fail_errno(ctx, "write %s/%s", ctx->dir, SCRIPT);
    size_t n = make_words(words, sizeof words);
    if (write_file(INPUT, words, n) != 0)
        vb_fail_errno(ctx, "write %s/%s", ctx->dir, INPUT);
    null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0)
        vb_fail_errno(ctx, "open /dev/null");
    err_fd = open(ERRLOG, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err_fd < 0)
        vb_fail_errno(ctx, "create %s/%s", ctx->dir, ERRLOG);
}

static pid_t start_script(vb_ctx *ctx)
{
    pid_t pid = fork();
    if (pid < 0)
        vb_fail_errno(ctx, "fork");
    if (pid == 0) {
        /* Scripts write only files; their stderr goes to a log we quote if
         * they fail, so stdout keeps its one JSON line. */
        dup2(null_fd, 0);
        dup2(null_fd, 1);
        dup2(err_fd, 2);
        execl("/bin/sh", "sh", SCRIPT, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void first_line(char *line, size_t cap)
{
    line[0] = '\0';
    int fd = open(ERRLOG, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, line, cap - 1);
    close(fd);
    line[n > 0 ? n : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
}

static void wait_script(vb_ctx *ctx, pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            vb_fail_errno(ctx, "waitpid");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return;
    char why[200];
    first_line(why, sizeof why);
    if (WIFEXITED(st))
        vb_fail(ctx, "shell script failed with status %d (%s); it needs /bin/sh, coreutils and grep",
                WEXITSTATUS(st), why[0] ? why : "no message");
    vb_fail(ctx, "shell script killed by signal %d; it needs /bin/sh, coreutils and grep",
            WTERMSIG(st));
}

static void run_loops(vb_ctx *ctx, vb_result *out, int concurrent)
{
    pid_t pids[8];
    uint64_t loops = 0;
    do {
        for (int i = 0; i < concurrent; i++)
            pids[i] = start_script(ctx);
        for (int i = 0; i < concurrent; i++)
            wait_script(ctx, pids[i]);
        loops++;
    } while (!vb_time_up(ctx));
    out->units = loops;
    out->work = (double)loops;
}

void vb_shell1_run(vb_ctx *ctx, vb_result *out)
{
    run_loops(ctx, out, 1);
}

void vb_shell8_run(vb_ctx *ctx, vb_result *out)
{
    run_loops(ctx, out, 8);
}
