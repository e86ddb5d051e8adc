/* SIGINT/SIGTERM in the parent: the handler only records the signal (nothing
 * else is async-signal-safe enough); the parent's wait loop notices it, kills
 * its copies, removes the scratch dir and exits 130/143. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile sig_atomic_t vb_stop_signal = 0;

static void on_signal(int sig)
{
    if (!vb_stop_signal)
        vb_stop_signal = sig;
}

void vb_install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;   /* no SA_RESTART: let blocking calls return EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void vb_reset_signal_handlers(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

void vb_exit_on_signal(void)
{
    int sig = vb_stop_signal;
    vb_scratch_remove();
    fprintf(stderr, "vb-system: interrupted by %s; temporary files removed\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    exit(128 + sig);
}
