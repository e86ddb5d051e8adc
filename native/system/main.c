/* vb-system: virtbench's UnixBench-style system tests.
 *   vb-system TEST [--duration SECONDS] [--copies N] [--dir PATH]
 *   vb-system list
 * Parses and validates the command line, then hands over to copies.c. */
#include "harness.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: vb-system TEST [--duration SECONDS] [--copies N] [--dir PATH] | vb-system list"

static double parse_duration(const char *s)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(d))
        vb_die(VB_EXIT_USAGE, "--duration %s: not a number; pass seconds, e.g. --duration 10", s);
    if (!(d > 0.0) || d > VB_MAX_DURATION)
        vb_die(VB_EXIT_USAGE, "--duration %s: out of range; pass a value > 0 and <= %.0f seconds",
               s, VB_MAX_DURATION);
    return d;
}

static int parse_copies(const char *s)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (end == s || *end || errno || n < 1 || n > VB_MAX_COPIES)
        vb_die(VB_EXIT_USAGE, "--copies %s: not an integer from 1 to %d; pass e.g. --copies 2",
               s, VB_MAX_COPIES);
    return (int)n;
}

/* `what` names where the path came from: "--dir" or "$TMPDIR". */
static void check_dir(const char *what, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        vb_die(VB_EXIT_USAGE, "%s %s: not a writable directory (%s); pass a writable directory with --dir",
               what, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        vb_die(VB_EXIT_USAGE, "%s %s: not a directory; pass a writable directory with --dir", what, dir);
    if (access(dir, W_OK | X_OK) != 0)
        vb_die(VB_EXIT_USAGE, "%s %s: not a writable directory; pass a writable directory with --dir",
               what, dir);
}

/* The execl test re-executes this very file: /proc/self/exe, else argv[0]. */
static const char *find_self(const char *argv0)
{
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) {
        path[n] = '\0';
        return path;
    }
    if (strchr(argv0, '/') && realpath(argv0, path))
        return path;
    return argv0;
}

/* Accepts "--opt value" and "--opt=value"; returns the value or NULL. */
static const char *option_value(const char *name, int argc, char **argv, int *i)
{
    size_t len = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, len) != 0)
        return NULL;
    if (a[len] == '=')
        return a + len + 1;
    if (a[len] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        vb_die(VB_EXIT_USAGE, "%s needs a value; " USAGE, name);
    return argv[++*i];
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], VB_EXECL_ARG) == 0)
        vb_execl_continue(argc, argv);

    const char *name = NULL, *dir = NULL, *v;
    double duration = 10.0;
    int copies = 1;

    for (int i = 1; i < argc; i++) {
        if ((v = option_value("--duration", argc, argv, &i)))
            duration = parse_duration(v);
        else if ((v = option_value("--copies", argc, argv, &i)))
            copies = parse_copies(v);
        else if ((v = option_value("--dir", argc, argv, &i)))
            dir = v;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s\nTests (vb-system list): name, unit, description.\n", USAGE);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1])
            vb_die(VB_EXIT_USAGE, "unknown option %s; " USAGE, argv[i]);
        else if (name)
            vb_die(VB_EXIT_USAGE, "unexpected argument %s (test already given: %s); " USAGE,
                   argv[i], name);
        else
            name = argv[i];
    }
    if (!name)
        vb_die(VB_EXIT_USAGE, "no test given; " USAGE);
    if (!strcmp(name, "list")) {
        vb_print_list();
        return 0;
    }
    const vb_test *t = vb_find_test(name);
    if (!t)
        vb_die(VB_EXIT_USAGE, "unknown test '%s'; run 'vb-system list' for the test names", name);

    /* Only tests that write files need the directory, unless it was given. */
    int explicit_dir = dir != NULL;
    const char *what = "--dir";
    if (!dir) {
        dir = getenv("TMPDIR");
        what = "$TMPDIR";
        if (!dir || !*dir)
            dir = "/tmp";
    }
    if (explicit_dir || t->needs_dir)
        check_dir(what, dir);

    vb_install_signal_handlers();
    char *scratch = t->needs_dir ? vb_scratch_create(dir) : NULL;
    vb_run run;
    vb_run_copies(t, duration, copies, scratch, find_self(argv[0]), &run);
    vb_scratch_remove();
    free(scratch);
    if (vb_stop_signal)
        vb_exit_on_signal();
    vb_print_result(t, &run);
    free(run.per_copy);
    return fflush(stdout) == 0 ? 0 : VB_EXIT_RUNTIME;
}
