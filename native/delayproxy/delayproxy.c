/* vb-delayproxy: a user-space TCP relay that adds one-way delay (and optionally a rate cap) in both
 * directions, for kernels without tc netem; plus the echo server and ping-pong client that measure
 * the delay actually added.
 *
 *   vb-delayproxy relay --listen ADDR:PORT --target HOST:PORT [--delay-ms MS] [--rate-mbit MBIT]
 *                       [--queue-kib KIB] [--exit-with-parent]
 *   vb-delayproxy echo  --listen ADDR:PORT [--exit-with-parent]
 *   vb-delayproxy ping  --target HOST:PORT [--count N] [--warmup N] [--size BYTES]
 *
 * relay and echo print one JSON line {"listening": "ADDR:PORT"} once they accept connections
 * (PORT 0 picks a free port), run until SIGTERM/SIGINT (or their parent dies with
 * --exit-with-parent), then print {"connections": N, "bytes_up": N, "bytes_down": N}.
 * ping prints one JSON line with round-trip-time statistics in microseconds.
 *
 * The relay model is a link: each direction is a queue; a chunk read at time t leaves the queue at
 * max(t, link free) + size/rate (serialisation, only with --rate-mbit) + delay. Each direction
 * buffers at most --queue-kib (default 4096, like a TCP window of 4 MiB): when full the relay stops
 * reading, so the sender is held back the way a window-limited sender on a long path is. EOF is
 * passed on (shutdown) after the delay, like the data before it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define EXIT_SYS 1
#define CHUNK (64 * 1024)
#define RATE_CHUNK (16 * 1024)
#define MAX_EVENTS 64

static volatile sig_atomic_t stop_flag;

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vb-delayproxy: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void setup_signals(int exit_with_parent)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (exit_with_parent) {
        pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent || parent == 1)
            exit(0); /* the parent is already gone */
    }
    prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: wake-ups on time, not up to 50 us late */
}

/* "1.2.3.4:80", "[::1]:80", "localhost:80" -> resolved address. */
static void parse_addr(const char *what, const char *text, int passive, struct sockaddr_storage *out,
                       socklen_t *outlen)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || !colon[1] || (size_t)(colon - text) >= sizeof host)
        die(EXIT_USAGE, "%s %s: expected HOST:PORT, e.g. 127.0.0.1:9000", what, text);
    size_t n = (size_t)(colon - text);
    memcpy(host, text, n);
    host[n] = 0;
    if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
        memmove(host, host + 1, n - 2);
        host[n - 2] = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        die(EXIT_USAGE, "%s %s: port must be a number from 0 to 65535", what, text);
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0)
        die(EXIT_USAGE, "%s %s: cannot resolve: %s", what, text, gai_strerror(rc));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *outlen = res->ai_addrlen;
    freeaddrinfo(res);
}

static void format_addr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    }
}

static int make_listener(const char *text)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    parse_addr("--listen", text, 1, &ss, &sl);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die(EXIT_SYS, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0)
        die(EXIT_SYS, "--listen %s: cannot bind: %s", text, strerror(errno));
    if (listen(fd, 128) != 0)
        die(EXIT_SYS, "--listen %s: cannot listen: %s", text, strerror(errno));
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    char buf[128];
    format_addr(&got, buf, sizeof buf);
    printf("{\"listening\": \"%s\"}\n", buf);
    fflush(stdout);
    return fd;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static double parse_number(const char *what, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        die(EXIT_USAGE, "%s %s: expected a number from %g to %g", what, s, lo, hi);
    return v;
}

/* ------------------------------------------------------------------------------------------------
 * relay */

struct chunk {
    struct chunk *next;
    uint64_t due;
    size_t len, off;
    char data[];
};

struct dir {
    int src, dst;          /* read from src, write to dst */
    struct chunk *head, *tail;
    size_t queued;
    uint64_t link_free;    /* when the emulated link finishes sending what is queued */
    int eof;               /* src said EOF */
    uint64_t eof_due;
    int shut;              /* EOF passed on to dst */
    int blocked;           /* dst said EAGAIN: wait for EPOLLOUT */
    uint64_t bytes;
};

struct pair;
struct end {
    struct pair *p;
    int idx;
};

struct pair {
    struct pair *next;
    struct end e[2];       /* epoll tags, one per fd */
    int gone[2];           /* fd hung up: out of epoll, read and written only by the pump loop */
    int fd[2];             /* 0 = client, 1 = target */
    int connecting;        /* target connect() in progress */
    struct dir d[2];       /* d[0]: client -> target (up), d[1]: target -> client (down) */
    uint32_t ev[2];        /* events registered per fd */
    int dead;
};

static struct {
    int ep, tfd, lfd;
    struct sockaddr_storage target;
    socklen_t target_len;
    uint64_t delay_ns;
    double bytes_per_ns;   /* 0: no rate cap */
    size_t queue_limit;
    struct pair *pairs;
    uint64_t connections, bytes_up, bytes_down;
} R;

static void free_queue(struct dir *d)
{
    while (d->head) {
        struct chunk *c = d->head;
        d->head = c->next;
        free(c);
    }
    d->tail = NULL;
    d->queued = 0;
}

static void close_pair(struct pair *p)
{
    if (p->dead)
        return;
    p->dead = 1;
    R.bytes_up += p->d[0].bytes;
    R.bytes_down += p->d[1].bytes;
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] >= 0) {
            if (!p->gone[i])
                epoll_ctl(R.ep, EPOLL_CTL_DEL, p->fd[i], NULL);
            close(p->fd[i]);
            p->fd[i] = -1;
        }
        free_queue(&p->d[i]);
    }
}

/* Read what src has (up to the queue limit) into timestamped chunks. */
static void pump_in(struct pair *p, struct dir *d, uint64_t now)
{
    size_t cap = R.bytes_per_ns > 0 ? RATE_CHUNK : CHUNK;
    while (!d->eof && d->queued < R.queue_limit) {
        size_t want = R.queue_limit - d->queued;
        if (want > cap)
            want = cap;
        struct chunk *c = malloc(sizeof *c + want);
        if (!c)
            die(EXIT_SYS, "out of memory");
        ssize_t n = read(d->src, c->data, want);
        if (n < 0) {
            free(c);
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                close_pair(p);
            return;
        }
        if (n == 0) {
            free(c);
            d->eof = 1;
            d->eof_due = (d->link_free > now ? d->link_free : now) + R.delay_ns;
            return;
        }
        uint64_t start = d->link_free > now ? d->link_free : now;
        uint64_t sent = start;
        if (R.bytes_per_ns > 0)
            sent = start + (uint64_t)((double)n / R.bytes_per_ns);
        d->link_free = sent;
        c->due = sent + R.delay_ns;
        c->len = (size_t)n;
        c->off = 0;
        c->next = NULL;
        if (d->tail)
            d->tail->next = c;
        else
            d->head = c;
        d->tail = c;
        d->queued += (size_t)n;
        if ((size_t)n < want)
            return; /* drained for now */
    }
}

/* Write the chunks whose time has come. */
static void pump_out(struct pair *p, struct dir *d, uint64_t now)
{
    while (d->head && d->head->due <= now) {
        struct chunk *c = d->head;
        ssize_t n = write(d->dst, c->data + c->off, c->len - c->off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                d->blocked = 1;
                return;
            }
            close_pair(p);
            return;
        }
        d->blocked = 0;
        c->off += (size_t)n;
        d->bytes += (uint64_t)n;
        d->queued -= (size_t)n;
        if (c->off == c->len) {
            d->head = c->next;
            if (!d->head)
                d->tail = NULL;
            free(c);
        }
    }
    if (!d->head)
        d->blocked = 0;
    if (d->eof && !d->head && !d->shut && now >= d->eof_due) {
        shutdown(d->dst, SHUT_WR);
        d->shut = 1;
    }
}

static void update_events(struct pair *p)
{
    if (p->dead)
        return;
    for (int i = 0; i < 2; i++) {
        uint32_t want = 0;
        if (i == 1 && p->connecting) {
            want = EPOLLOUT;
        } else {
            struct dir *rd = &p->d[i];      /* fd i is the source of direction i */
            struct dir *wd = &p->d[1 - i];  /* and the destination of the other */
            if (!rd->eof && rd->queued < R.queue_limit && !(i == 0 && p->connecting))
                want |= EPOLLIN;
            if (wd->blocked)
                want |= EPOLLOUT;
        }
        if (p->gone[i])
            continue;
        if (want != p->ev[i]) {
            struct epoll_event ev = {.events = want, .data.ptr = &p->e[i]};
            epoll_ctl(R.ep, EPOLL_CTL_MOD, p->fd[i], &ev);
            p->ev[i] = want;
        }
    }
}

static void accept_all(void)
{
    for (;;) {
        int c = accept4(R.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            return;
        int t = socket(R.target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (t < 0) {
            close(c);
            continue;
        }
        tune(c);
        tune(t);
        int rc = connect(t, (struct sockaddr *)&R.target, R.target_len);
        if (rc != 0 && errno != EINPROGRESS) {
            close(c);
            close(t);
            continue;
        }
        struct pair *p = calloc(1, sizeof *p);
        if (!p)
            die(EXIT_SYS, "out of memory");
        p->fd[0] = c;
        p->fd[1] = t;
        p->connecting = rc != 0;
        p->d[0].src = c;
        p->d[0].dst = t;
        p->d[1].src = t;
        p->d[1].dst = c;
        for (int i = 0; i < 2; i++) {
            p->e[i].p = p;
            p->e[i].idx = i;
            struct epoll_event ev = {.events = 0, .data.ptr = &p->e[i]};
            epoll_ctl(R.ep, EPOLL_CTL_ADD, p->fd[i], &ev);
        }
        p->next = R.pairs;
        R.pairs = p;
        R.connections++;
        update_events(p);
    }
}

static void arm_timer(void)
{
    uint64_t next = 0;
    for (struct pair *p = R.pairs; p; p = p->next) {
        if (p->dead)
            continue;
        for (int i = 0; i < 2; i++) {
            struct dir *d = &p->d[i];
            uint64_t due = 0;
            if (d->head && !d->blocked)
                due = d->head->due;
            else if (!d->head && d->eof && !d->shut)
                due = d->eof_due;
            if (due && (!next || due < next))
                next = due;
        }
    }
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (next) {
        its.it_value.tv_sec = (time_t)(next / 1000000000ull);
        its.it_value.tv_nsec = (long)(next % 1000000000ull);
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(R.tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void reap(void)
{
    struct pair **pp = &R.pairs;
    while (*pp) {
        struct pair *p = *pp;
        int done = p->d[0].shut && p->d[1].shut;
        if (done)
            close_pair(p);
        if (p->dead) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

static int cmd_relay(int argc, char **argv)
{
    const char *listen_at = NULL, *target = NULL;
    double delay_ms = 0, rate = 0, queue_kib = 4096;
    int ewp = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--exit-with-parent")) {
            ewp = 1;
            continue;
        }
        if (i + 1 >= argc)
            die(EXIT_USAGE, "%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--listen"))
            listen_at = v;
        else if (!strcmp(a, "--target"))
            target = v;
        else if (!strcmp(a, "--delay-ms"))
            delay_ms = parse_number(a, v, 0, 60000);
        else if (!strcmp(a, "--rate-mbit"))
            rate = parse_number(a, v, 0, 1e6);
        else if (!strcmp(a, "--queue-kib"))
            queue_kib = parse_number(a, v, 16, 1 << 20);
        else
            die(EXIT_USAGE, "relay: unknown option %s", a);
    }
    if (!listen_at || !target)
        die(EXIT_USAGE, "relay needs --listen ADDR:PORT and --target HOST:PORT");
    setup_signals(ewp);
    parse_addr("--target", target, 0, &R.target, &R.target_len);
    R.delay_ns = (uint64_t)llround(delay_ms * 1e6);
    R.bytes_per_ns = rate > 0 ? rate * 1e6 / 8.0 / 1e9 : 0;
    R.queue_limit = (size_t)queue_kib * 1024;
    R.ep = epoll_create1(EPOLL_CLOEXEC);
    R.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (R.ep < 0 || R.tfd < 0)
        die(EXIT_SYS, "epoll/timerfd: %s", strerror(errno));
    R.lfd = make_listener(listen_at);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &R.lfd};
    epoll_ctl(R.ep, EPOLL_CTL_ADD, R.lfd, &ev);
    ev.data.ptr = &R.tfd;
    epoll_ctl(R.ep, EPOLL_CTL_ADD, R.tfd, &ev);

    struct epoll_event evs[MAX_EVENTS];
    while (!stop_flag) {
        int n = epoll_wait(R.ep, evs, MAX_EVENTS, 1000);
        if (n < 0 && errno != EINTR)
            die(EXIT_SYS, "epoll_wait: %s", strerror(errno));
        uint64_t now = now_ns();
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &R.lfd) {
                accept_all();
            } else if (tag == &R.tfd) {
                uint64_t exp;
                while (read(R.tfd, &exp, sizeof exp) > 0) {
                }
            } else {
                struct end *e = tag;
                struct pair *p = e->p;
                if (p->dead)
                    continue;
                if ((evs[i].events & EPOLLERR) && !p->connecting) {
                    close_pair(p); /* reset: nothing more can be delivered */
                    continue;
                }
                if ((evs[i].events & EPOLLHUP) && !p->connecting && !p->gone[e->idx]) {
                    /* Both halves closed: level-triggered HUP would spin; what is left in the
                     * socket buffer is read by the pump loop below. */
                    epoll_ctl(R.ep, EPOLL_CTL_DEL, p->fd[e->idx], NULL);
                    p->gone[e->idx] = 1;
                }
                if (p->connecting && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                    int err = 0;
                    socklen_t el = sizeof err;
                    getsockopt(p->fd[1], SOL_SOCKET, SO_ERROR, &err, &el);
                    if (err) {
                        close_pair(p);
                        continue;
                    }
                    p->connecting = 0;
                }
            }
        }
        /* Move data on every live pair: cheap for the handful of connections a benchmark has. */
        now = now_ns();
        for (struct pair *p = R.pairs; p; p = p->next) {
            for (int k = 0; k < 2 && !p->dead && !p->connecting; k++) {
                pump_in(p, &p->d[k], now);
                if (!p->dead)
                    pump_out(p, &p->d[k], now);
            }
            if (!p->dead && !p->connecting && !(p->d[0].head || p->d[1].head)) {
                /* an error with nothing left to deliver (e.g. reset) closes the pair */
                if (p->d[0].eof && p->d[1].eof && p->d[0].shut && p->d[1].shut)
                    close_pair(p);
            }
            update_events(p);
        }
        reap();
        arm_timer();
    }
    for (struct pair *p = R.pairs; p; p = p->next)
        close_pair(p);
    printf("{\"connections\": %llu, \"bytes_up\": %llu, \"bytes_down\": %llu}\n",
           (unsigned long long)R.connections, (unsigned long long)R.bytes_up,
           (unsigned long long)R.bytes_down);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * echo */

static int cmd_echo(int argc, char **argv)
{
    const char *listen_at = NULL;
    int ewp = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--exit-with-parent"))
            ewp = 1;
        else if (!strcmp(argv[i], "--listen") && i + 1 < argc)
            listen_at = argv[++i];
        else
            die(EXIT_USAGE, "echo: unknown option or missing value: %s", argv[i]);
    }
    if (!listen_at)
        die(EXIT_USAGE, "echo needs --listen ADDR:PORT");
    setup_signals(ewp);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int lfd = make_listener(listen_at);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event evs[MAX_EVENTS];
    static char buf[CHUNK];
    unsigned long long conns = 0, bytes = 0;
    while (!stop_flag) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, 1000);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
                    tune(c);
                    struct epoll_event e2 = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e2);
                    conns++;
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                continue;
            }
            bytes += (unsigned long long)r;
            for (ssize_t off = 0; off < r;) { /* blocking socket: the pinger reads every reply */
                ssize_t w = write(fd, buf + off, (size_t)(r - off));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    break;
                off += w;
            }
        }
    }
    printf("{\"connections\": %llu, \"bytes\": %llu}\n", conns, bytes);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * ping */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
    /* nearest rank */
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)v[k - 1] / 1000.0;
}

static int cmd_ping(int argc, char **argv)
{
    const char *target = NULL;
    long count = 200, warmup = 10, size = 64;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            die(EXIT_USAGE, "%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--target"))
            target = v;
        else if (!strcmp(a, "--count"))
            count = (long)parse_number(a, v, 1, 1e7);
        else if (!strcmp(a, "--warmup"))
            warmup = (long)parse_number(a, v, 0, 1e6);
        else if (!strcmp(a, "--size"))
            size = (long)parse_number(a, v, 1, 1 << 20);
        else
            die(EXIT_USAGE, "ping: unknown option %s", a);
    }
    if (!target)
        die(EXIT_USAGE, "ping needs --target HOST:PORT");
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_storage ss;
    socklen_t sl;
    parse_addr("--target", target, 0, &ss, &sl);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl) != 0)
        die(EXIT_SYS, "cannot connect to %s: %s", target, strerror(errno));
    tune(fd);
    char *buf = malloc((size_t)size);
    uint64_t *rtt = malloc(sizeof *rtt * (size_t)count);
    if (!buf || !rtt)
        die(EXIT_SYS, "out of memory");
    memset(buf, 'x', (size_t)size);
    for (long i = 0; i < warmup + count; i++) {
        uint64_t t0 = now_ns();
        for (long off = 0; off < size;) {
            ssize_t w = write(fd, buf + off, (size_t)(size - off));
            if (w <= 0)
                die(EXIT_SYS, "write to %s: %s", target, w < 0 ? strerror(errno) : "closed");
            off += w;
        }
        for (long got = 0; got < size;) {
            ssize_t r = read(fd, buf + got, (size_t)(size - got));
            if (r <= 0)
                die(EXIT_SYS, "read from %s: %s", target, r < 0 ? strerror(errno) : "closed by peer");
            got += r;
        }
        uint64_t dt = now_ns() - t0;
        if (i >= warmup)
            rtt[i - warmup] = dt;
    }
    close(fd);
    double sum = 0;
    for (long i = 0; i < count; i++)
        sum += (double)rtt[i];
    qsort(rtt, (size_t)count, sizeof *rtt, cmp_u64);
    size_t n = (size_t)count;
    printf("{\"target\": \"%s\", \"count\": %ld, \"size\": %ld, \"rtt_us\": {\"min\": %.3f, \"p50\": %.3f, "
           "\"mean\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"max\": %.3f}}\n",
           target, count, size, (double)rtt[0] / 1000.0, pct(rtt, n, 50), sum / (double)count / 1000.0,
           pct(rtt, n, 90), pct(rtt, n, 99), (double)rtt[n - 1] / 1000.0);
    free(buf);
    free(rtt);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die(EXIT_USAGE, "usage: vb-delayproxy relay|echo|ping ... (see the comment at the top of delayproxy.c)");
    if (!strcmp(argv[1], "relay"))
        return cmd_relay(argc - 2, argv + 2);
    if (!strcmp(argv[1], "echo"))
        return cmd_echo(argc - 2, argv + 2);
    if (!strcmp(argv[1], "ping"))
        return cmd_ping(argc - 2, argv + 2);
    die(EXIT_USAGE, "unknown command %s: use relay, echo or ping", argv[1]);
    return EXIT_USAGE;
}
