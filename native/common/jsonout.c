/* JSON record pieces and fatal errors of the MPI programs (jsonout.h). */
#include "jsonout.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>

void vb_json_num(FILE *f, double x)
{
    if (!isfinite(x)) {
        fputs("null", f);
        return;
    }
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, f);
}

void vb_json_field(FILE *f, const char *name, double x)
{
    fprintf(f, ",\"%s\":", name);
    vb_json_num(f, x);
}

void vb_json_check(FILE *f, const struct vb_json_check *c, int nchecks, int failed)
{
    fprintf(f, "{\"check\":\"%s\"", c->name);
    vb_json_field(f, "value", c->value);
    vb_json_field(f, "reference", c->reference);
    if (c->im) {
        vb_json_field(f, "value_im", c->im[0]);
        vb_json_field(f, "reference_im", c->im[1]);
    }
    vb_json_field(f, "rel_err", c->rel_err);
    vb_json_field(f, "epsilon", c->epsilon);
    fprintf(f, ",\"passed\":%s", c->passed ? "true" : "false");
    if (nchecks > 0)
        fprintf(f, ",\"checks\":%d,\"failed\":%d", nchecks, failed);
    fputc('}', f);
}

_Noreturn void vb_vfatal(const char *prog, int code, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* not reached */
}

__attribute__((format(printf, 3, 4))) static _Noreturn void fatal(const char *prog, int code,
                                                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vb_vfatal(prog, code, fmt, ap);
}

void *vb_alloc(const char *prog, size_t bytes, const char *what)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        fatal(prog, 3, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}
