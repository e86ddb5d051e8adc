/* Output and error reporting of vb-npb; the format is described in report.h. */
#include "npb.h"
#include "../common/jsonout.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static void set_name(struct npb_check *c, const char *name)
{
    strncpy(c->name, name, sizeof c->name - 1);
    c->name[sizeof c->name - 1] = '\0';
}

static struct npb_check *new_check(struct npb_result *res, const char *name)
{
    if (res->nchecks >= NPB_MAX_CHECKS)
        npb_fatal(1, "internal error: too many verification checks");
    struct npb_check *c = &res->checks[res->nchecks++];
    memset(c, 0, sizeof *c);
    set_name(c, name);
    return c;
}

void npb_add_check(struct npb_result *res, const char *name, double value, double reference,
                   double epsilon)
{
    struct npb_check *c = new_check(res, name);
    c->value = value;
    c->reference = reference;
    c->epsilon = epsilon;
    c->rel_err = fabs(value - reference) / fabs(reference);
    c->passed = c->rel_err <= epsilon; /* false for NaN */
}

void npb_add_check_complex(struct npb_result *res, const char *name, double re, double im,
                           double ref_re, double ref_im, double epsilon)
{
    struct npb_check *c = new_check(res, name);
    c->is_complex = 1;
    c->value = re;
    c->value_im = im;
    c->reference = ref_re;
    c->reference_im = ref_im;
    c->epsilon = epsilon;
    c->rel_err = hypot(re - ref_re, im - ref_im) / hypot(ref_re, ref_im);
    c->passed = c->rel_err <= epsilon;
}

void npb_add_check_exact(struct npb_result *res, const char *name, double value, double reference)
{
    struct npb_check *c = new_check(res, name);
    c->value = value;
    c->reference = reference;
    c->epsilon = 0.0;
    c->rel_err = reference != 0.0 ? fabs(value - reference) / fabs(reference) : fabs(value);
    c->passed = value == reference;
}

static void put_check(FILE *f, const struct npb_check *c, int nchecks, int failed)
{
    const double im[2] = {c->value_im, c->reference_im};
    const struct vb_json_check j = {c->name, c->value, c->reference, c->rel_err, c->epsilon,
                                    c->is_complex ? im : NULL, c->passed};
    vb_json_check(f, &j, nchecks, failed);
}

/* is check a worse than check b?  Failed beats passed, then the larger rel_err / epsilon */
static int worse(const struct npb_check *a, const struct npb_check *b)
{
    if (a->passed != b->passed)
        return !a->passed;
    double ra = a->epsilon > 0 ? a->rel_err / a->epsilon : a->rel_err;
    double rb = b->epsilon > 0 ? b->rel_err / b->epsilon : b->rel_err;
    return ra > rb;
}

void npb_print_json(FILE *f, const struct npb_ctx *ctx, const char *kernel,
                    const struct npb_result *res)
{
    int failed = 0, worst = 0;
    for (int i = 0; i < res->nchecks; i++) {
        failed += !res->checks[i].passed;
        if (worse(&res->checks[i], &res->checks[worst]))
            worst = i;
    }
    int verified = res->nchecks > 0 && failed == 0;
    fprintf(f, "{\"kernel\":\"%s\",\"class\":\"%c\",\"ranks\":%d,\"threads\":%d,", kernel,
            ctx->cls, ctx->nranks, ctx->threads);
    fprintf(f, "\"time_s\":%.6f,\"mops\":%.3f,\"verified\":%s,\"verify\":", res->time_s,
            res->mops, verified ? "true" : "false");
    if (res->nchecks > 0)
        put_check(f, &res->checks[worst], res->nchecks, failed);
    else
        fputs("null", f);
    fputs(",\"checks\":[", f);
    for (int i = 0; i < res->nchecks; i++) {
        if (i)
            fputc(',', f);
        put_check(f, &res->checks[i], 0, 0);
    }
    fprintf(f, "],\"iterations\":%d,\"size\":\"%s\",\"version\":%d}\n", res->iterations,
            res->size, NPB_VERSION);
    fflush(f);
}

_Noreturn void npb_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vb_vfatal("vb-npb", code, fmt, ap);
}

void *npb_alloc(size_t bytes, const char *what) { return vb_alloc("vb-npb", bytes, what); }
