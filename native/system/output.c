/* The only things vb-system writes to stdout: one JSON line per run, or the
 * test list. Field order and names are a contract with the Python parser. */
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>

void vb_print_result(const vb_test *t, const vb_run *r)
{
    printf("{\"test\":\"%s\",\"unit\":\"%s\",\"copies\":%d,\"duration_s\":%.4f,"
           "\"count\":%" PRIu64 ",\"rate\":%.3f,\"per_copy\":[",
           t->name, t->unit, r->copies, r->duration_s, r->count, r->rate);
    for (int i = 0; i < r->copies; i++)
        printf("%s%.3f", i ? "," : "", r->per_copy[i]);
    printf("],\"version\":%d}\n", VB_FORMAT_VERSION);
}

void vb_print_list(void)
{
    for (size_t i = 0; i < vb_ntests; i++)
        printf("%s\t%s\t%s\n", vb_tests[i].name, vb_tests[i].unit, vb_tests[i].desc);
}
