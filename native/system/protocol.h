/* The fixed-size message a copy sends to the parent over the shared status
 * pipe. It is smaller than PIPE_BUF, so concurrent writes never interleave. */
#ifndef VB_PROTOCOL_H
#define VB_PROTOCOL_H

#include <stdint.h>

enum { VB_MSG_READY = 1, VB_MSG_RESULT = 2, VB_MSG_FAIL = 3 };

typedef struct vb_msg {
    int32_t type;
    int32_t index;
    uint64_t units;
    double work;
    double elapsed;
    char text[384];
} vb_msg;

#endif
