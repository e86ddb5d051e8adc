/* Shared types of vb-system: the test table, the per-copy context, timing and
 * the error path. Test files reach it through kernels.h. */
#ifndef VB_HARNESS_H
#define VB_HARNESS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Kernels whose cost is the procedure call itself (dhrystone, whetstone) must
 * keep their calls: forbid inlining and, on gcc, interprocedural shortcuts
 * (constant propagation, pure-call elimination) that would skip the work. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define VB_KEEP_CALL __attribute__((noipa))
#elif defined(__GNUC__)
#define VB_KEEP_CALL __attribute__((noinline))
#else
#define VB_KEEP_CALL
#endif

#define VB_FORMAT_VERSION 1
#define VB_MAX_COPIES 1024
#define VB_MAX_DURATION 3600.0

/* Exit statuses promised to the Python harness. */
#define VB_EXIT_RUNTIME 1
#define VB_EXIT_USAGE 2

/* What one copy of a test needs to know. */
typedef struct vb_ctx {
    int index;          /* copy number, 0..copies-1 */
    double duration;    /* seconds each copy works */
    double start;       /* monotonic time the timed phase began (s) */
    uint64_t start_ns;  /* the same in ns, for the execl chain */
    double deadline;    /* start + duration */
    const char *dir;    /* this copy's private scratch dir, or NULL */
    const char *self;   /* path to this binary (execl test) */
    const char *test;   /* test name, for messages */
    int status_fd;      /* pipe to the parent (execl chain needs it) */
    int buf_size;       /* fcopy buffer size */
    void *state;        /* whatever setup() prepared */
} vb_ctx;

/* What one copy reports. `units` is the integer count shown in the output;
 * `work` is the numerator of the rate in the test's unit (KB, MWI, loops). */
typedef struct vb_result {
    uint64_t units;
    double work;
} vb_result;

typedef struct vb_test {
    const char *name;
    const char *unit;
    const char *desc;
    double per_second;   /* 1 for per-second units, 60 for lpm */
    int needs_dir;       /* makes a private dir under --dir */
    int buf_size;        /* fcopy only */
    /* Untimed preparation in the copy's own process; may call vb_fail. */
    void (*setup)(vb_ctx *ctx);
    /* Work until vb_time_up(ctx), at least one unit; fill *out. */
    void (*run)(vb_ctx *ctx, vb_result *out);
} vb_test;

/* tests.c */
extern const vb_test vb_tests[];
extern const size_t vb_ntests;
const vb_test *vb_find_test(const char *name);

/* harness.c: clock */
double vb_now(void);                 /* CLOCK_MONOTONIC seconds */
uint64_t vb_now_ns(void);
static inline int vb_time_up(const vb_ctx *ctx) { return vb_now() >= ctx->deadline; }

/* harness.c: messages from a copy to the parent */
void vb_send_ready(const vb_ctx *ctx);
void vb_send_result(int status_fd, int index, const vb_result *res, double elapsed);
/* Report a runtime failure of this copy to the parent and _exit. */
_Noreturn void vb_fail(const vb_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, with ": strerror(errno)" appended. */
_Noreturn void vb_fail_errno(const vb_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* harness.c: errors of the parent process (nothing on stdout, one line). */
_Noreturn void vb_die(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Full-length I/O that retries short transfers and EINTR. */
int vb_write_all(int fd, const void *buf, size_t len);
int vb_read_all(int fd, void *buf, size_t len);   /* 1 ok, 0 EOF, -1 error */

/* pin.c: pin this copy (and what it forks later) to the copy's own CPU. */
void vb_pin_copy(const vb_ctx *ctx, const char *test);

/* ---- parent-side pieces, one file each ---- */

/* signals.c: SIGINT/SIGTERM only set a flag; the parent polls it, kills its
 * copies, removes its scratch dir and exits 128+signal. */
extern volatile sig_atomic_t vb_stop_signal;
void vb_install_signal_handlers(void);
void vb_reset_signal_handlers(void);   /* in copies, before work starts */
_Noreturn void vb_exit_on_signal(void);

/* scratch.c: the private mkdtemp dir under --dir and its removal. */
char *vb_scratch_create(const char *base);   /* dies on error */
void vb_scratch_remove(void);
void vb_scratch_forget(void);   /* a forked copy must never remove it */

/* copies.c: fork N copies, start them together, collect their results. */
typedef struct vb_run {
    int copies;
    double duration_s;     /* wall time of the timed phase */
    uint64_t count;        /* sum of units */
    double rate;           /* sum of per-copy rates */
    double *per_copy;      /* copies entries */
} vb_run;
void vb_run_copies(const vb_test *t, double duration, int copies,
                   const char *scratch, const char *self, vb_run *out);

/* output.c */
void vb_print_result(const vb_test *t, const vb_run *r);
void vb_print_list(void);

/* proc.c: entry point of a process in the execl chain (hidden argument). */
#define VB_EXECL_ARG "--vb-internal-execl"
_Noreturn void vb_execl_continue(int argc, char **argv);

#endif
