/*
 * Output and error reporting of vb-npb.
 *
 * Rank 0 prints exactly one JSON line on stdout at the end of a run, e.g.
 *   {"kernel":"cg","class":"S","ranks":2,"threads":1,"time_s":0.123456,"mops":456.789,
 *    "verified":true,"verify":{"check":"zeta","value":8.5971775078648,
 *    "reference":8.5971775078648,"rel_err":1.2e-14,"epsilon":1e-10,"checks":1,"failed":0},
 *    "checks":[{...same fields per check...}],"iterations":15,"size":"1400","version":1}
 * "verify" is the worst check (largest rel_err / epsilon; any failed check beats a
 * passing one); "checks" lists every check.  Complex checks (FT) carry the real parts
 * in value/reference and the imaginary parts in value_im/reference_im; their rel_err
 * is |c - ref| / |ref| over the complex numbers.  Exact checks (IS) have epsilon 0.
 */
#ifndef VB_NPB_REPORT_H
#define VB_NPB_REPORT_H

#include <stddef.h>
#include <stdio.h>

struct npb_ctx;
struct npb_result;

void npb_add_check(struct npb_result *res, const char *name, double value, double reference,
                   double epsilon);
void npb_add_check_complex(struct npb_result *res, const char *name, double re, double im,
                           double ref_re, double ref_im, double epsilon);
/* an exact check (integers): passes only when value == reference */
void npb_add_check_exact(struct npb_result *res, const char *name, double value, double reference);
void npb_print_json(FILE *f, const struct npb_ctx *ctx, const char *kernel,
                    const struct npb_result *res);
/* runtime failure: message on stderr, abort every rank with exit status code */
_Noreturn void npb_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* malloc that aborts with exit status 3 on failure; memory is not initialised */
void *npb_alloc(size_t bytes, const char *what);

#endif
