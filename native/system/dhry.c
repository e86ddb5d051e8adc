/* dhrystone: a synthetic integer loop in the spirit of Dhrystone. One loop
 * does the mix of a typical systems program: scalar assignments, integer
 * arithmetic with a division, enum switches, 1-D and 2-D array indexing, a
 * 30-character string copy and compare, a record copied through a pointer,
 * character comparisons, and procedure calls with value and pointer
 * arguments. The code is virtbench's own; only the kind of work follows the
 * classic benchmark. Procedures are kept out of line (VB_KEEP_CALL) and every
 * result flows into state read by the next loop, so nothing can be folded. */
#include "kernels.h"

#include <stdbool.h>
#include <string.h>

#define BATCH 4096   /* loops between clock reads */
#define DIM 50
#define NAME_SIZE 31  /* 30 characters and the terminator */

typedef enum { K_IDLE, K_READ, K_WRITE, K_SEEK, K_SYNC } kind_t;

typedef struct record {
    struct record *link;
    kind_t kind;
    int number;
    int weight;
    char label[NAME_SIZE];
} record_t;

#define NAME_FIXED "VIRTBENCH SYSTEM TEST, RECORD1"
#define NAME_EVEN  "VIRTBENCH SYSTEM TEST, RECORD2"
#define NAME_ODD   "VIRTBENCH SYSTEM TEST, RECORD3"
_Static_assert(sizeof NAME_FIXED == NAME_SIZE, "30-character strings");
_Static_assert(sizeof NAME_EVEN == NAME_SIZE && sizeof NAME_ODD == NAME_SIZE,
               "30-character strings");

static record_t rec_first, rec_second;
static record_t *current;
static int row[DIM];
static int grid[DIM][DIM];
static char name_a[NAME_SIZE], name_b[NAME_SIZE];
static int g_level;
static char g_mark, g_letter;
static bool g_flag;
static volatile uint64_t sink;   /* the final checksum goes here */

/* Next state of a small state machine over the enum. */
VB_KEEP_CALL static kind_t next_kind(kind_t k, int level)
{
    switch (k) {
    case K_IDLE:  return level > 2 ? K_READ : K_SYNC;
    case K_READ:  return K_WRITE;
    case K_WRITE: return level > 100 ? K_IDLE : K_SEEK;
    case K_SEEK:  return K_READ;
    default:      return K_IDLE;
    }
}

/* Character compare returning an enum, as parsers do. */
VB_KEEP_CALL static kind_t letter_kind(char c, char wanted)
{
    if (c != wanted)
        return K_IDLE;
    g_letter = c;
    return K_READ;
}

/* String compare plus a character test on the compared strings. */
VB_KEEP_CALL static bool names_differ(const char *a, const char *b)
{
    if (a[2] == b[3])   /* 'R' vs 'T': never equal, but must be read */
        g_letter = 'R';
    return strcmp(a, b) != 0;
}

/* Pointer argument: the callee updates the caller's variable. */
VB_KEEP_CALL static void shift_level(int *value)
{
    int v = *value + 10;
    if (g_letter == 'A')
        v -= g_level + 1;
    *value = v;
}

/* Array work: 1-D and 2-D stores around an index the caller computed. */
VB_KEEP_CALL static void fill_arrays(int *line, int square[][DIM], int at, int value)
{
    int base = at + 5;
    line[base] = value;
    line[base + 1] = line[base];
    line[base + 30] = base;
    for (int j = base; j <= base + 1; j++)
        square[base][j] = base;
    square[base][base - 1] = (square[base][base - 1] + 1) & 0xffff;
    square[base + 20][base] = line[base];
    g_level = 5;
}

/* Record work: copy the record into its successor through the pointer,
 * then edit both through pointers. */
VB_KEEP_CALL static void rework_record(record_t *r)
{
    record_t *next = r->link;
    *next = *r;                 /* whole-struct copy */
    r->number = 5;
    next->number = r->number;
    next->link = r->link;
    next->kind = next_kind(r->kind, next->number);
    if (next->kind == K_IDLE || next->kind == K_SYNC) {
        next->number = 6;
        shift_level(&next->weight);
        next->weight &= 0xff;
    } else {
        *r = *next;
    }
    r->link = next;
}

/* Integer arithmetic with values that stay small. */
VB_KEEP_CALL static int combine(int a, int b)
{
    return (a * 3 + b) % 97 + 2;
}

static void init_state(void)
{
    rec_first.link = &rec_second;
    rec_first.kind = K_WRITE;
    rec_first.number = 40;
    rec_first.weight = 0;
    memcpy(rec_first.label, NAME_FIXED, NAME_SIZE);
    rec_second = rec_first;
    rec_second.link = &rec_first;
    current = &rec_first;
    memcpy(name_a, NAME_FIXED, NAME_SIZE);
    g_mark = 'B';
    grid[8][7] = 10;
}

void vb_dhry_run(vb_ctx *ctx, vb_result *out)
{
    init_state();
    uint64_t loops = 0;
    do {
        for (int k = 0; k < BATCH; k++) {
            int a = g_level % 7 + 1;       /* 1..7, from the previous loop */
            int b = a + 2;
            int c = 0;
            kind_t kind = K_WRITE;

            strcpy(name_b, (k & 1) ? NAME_ODD : NAME_EVEN);
            g_flag = names_differ(name_a, name_b);

            while (a < b) {
                c = 5 * a - b;
                c = combine(c, b);
                a++;
            }
            fill_arrays(row, grid, a, c);
            rework_record(current);

            for (char ch = 'A'; ch <= g_mark; ch++)
                if (kind == letter_kind(ch, 'C'))
                    kind = next_kind(K_IDLE, c);

            b = b * a;
            c = b / a;                     /* a >= 2 here */
            b = 7 * (b - c) - a;
            shift_level(&a);
            g_level = (g_level + a + b + c) & 0x3ff;
        }
        loops += BATCH;
    } while (!vb_time_up(ctx));

    sink = (uint64_t)g_level + (uint64_t)row[10] + (uint64_t)grid[8][7] +
           (uint64_t)current->number + (uint64_t)g_flag + (uint64_t)g_letter;
    out->units = loops;
    out->work = (double)loops;
}
