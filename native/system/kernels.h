/* Entry points of the test groups, one source file per group. */
#ifndef VB_KERNELS_H
#define VB_KERNELS_H

#include "harness.h"

void vb_dhry_run(vb_ctx *ctx, vb_result *out);       /* dhry.c */
void vb_whet_run(vb_ctx *ctx, vb_result *out);       /* whet.c */
void vb_execl_run(vb_ctx *ctx, vb_result *out);      /* proc.c */
void vb_spawn_run(vb_ctx *ctx, vb_result *out);      /* proc.c */
void vb_fcopy_setup(vb_ctx *ctx);                    /* fcopy.c */
void vb_fcopy_run(vb_ctx *ctx, vb_result *out);
void vb_pipe_run(vb_ctx *ctx, vb_result *out);       /* ipc.c */
void vb_context_run(vb_ctx *ctx, vb_result *out);
void vb_shell_setup(vb_ctx *ctx);                    /* shell.c */
void vb_shell1_run(vb_ctx *ctx, vb_result *out);
void vb_shell8_run(vb_ctx *ctx, vb_result *out);
void vb_syscall_run(vb_ctx *ctx, vb_result *out);    /* syscalls.c */
void vb_fileopen_setup(vb_ctx *ctx);                 /* fileopen.c */
void vb_fileopen_run(vb_ctx *ctx, vb_result *out);

#endif
