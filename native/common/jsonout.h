/*
 * Shared by the MPI programs under native/ (vb-npb, vb-eigen): the pieces of their one-line
 * JSON records, and fatal errors / allocation that abort every rank.  No Makefile here: each
 * program's Makefile compiles these files (../common/x.c) into its own binary.
 */
#ifndef VB_COMMON_JSONOUT_H
#define VB_COMMON_JSONOUT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* shortest %g form that reads back to the same double; null for NaN / infinity */
void vb_json_num(FILE *f, double x);
/* ,"name":x */
void vb_json_field(FILE *f, const char *name, double x);

/* one verification check as a JSON object; im = {value_im, reference_im} for a complex
 * check (NULL otherwise); nchecks > 0 adds "checks" and "failed" (the summary "verify") */
struct vb_json_check {
    const char *name;
    double value, reference, rel_err, epsilon;
    const double *im;
    int passed;
};
void vb_json_check(FILE *f, const struct vb_json_check *c, int nchecks, int failed);

/* "prog: message" on stderr, then abort every rank with exit status code */
_Noreturn void vb_vfatal(const char *prog, int code, const char *fmt, va_list ap);
/* malloc that aborts (exit 3, "prog: out of memory ...") on failure; not initialised */
void *vb_alloc(const char *prog, size_t bytes, const char *what);

#endif
