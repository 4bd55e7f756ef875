/* floor.h - what the two floor proxies (floor_h1.c, floor_h2.c) share: the client side.
 *
 * A floor is the least a proxy must do for the bench's load generator (loadgen proxy): accept
 * plain HTTP/1.1 keep-alive connections carrying POST /v1/chat/completions (a JSON body with
 * "model"), start one Cursor run upstream for it, and per upstream delta (one envelope with one
 * text delta) write one SSE event as an HTTP chunk to the client, then "data: [DONE]" and the
 * last chunk. No JSON parser, no OpenAI shapes beyond the one event, no threads: one epoll loop.
 * Every write a read made possible goes out in one write() per client and upstream read.
 * Bench only (OpenSSL and, for HTTP/2, libnghttp2 from Debian).
 */
#ifndef FLOOR_H
#define FLOOR_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bbuf.h"

enum { FK_LISTEN, FK_CLIENT, FK_UP };

static void fdie(const char *m)
{
    fprintf(stderr, "floor: %s\n", m);
    exit(2);
}


static struct {
    int ep, up_port;
    SSL_CTX *ctx;
    const char *token;
    struct client *clients;
    struct client **dirty;          /* clients with bytes queued by this upstream read */
    size_t ndirty, capdirty;
} F;

struct client {
    int kind, fd, want_out, closing, busy, dirty;
    struct client *prev, *next;     /* every client */
    struct bbuf in, out;
    void *run;                      /* the floor's run for the request in progress */
};

/* The floor's part: start a run for this client's request (model id), or fail (-1). */
static int floor_start(struct client *c, const char *model, size_t mn);
/* The client went away mid-run. */
static void floor_abandon(struct client *c);

static void cl_ep(struct client *c)
{
    struct epoll_event ev;
    ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
    ev.data.ptr = c;
    epoll_ctl(F.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void cl_flush(struct client *c)
{
    while (bbuf_avail(&c->out)) {
        ssize_t n = send(c->fd, c->out.p + c->out.off, bbuf_avail(&c->out), MSG_NOSIGNAL);
        if (n > 0) { c->out.off += (size_t)n; continue; }
        if (n < 0 && errno == EAGAIN) {
            if (!c->want_out) { c->want_out = 1; cl_ep(c); }
            return;
        }
        c->closing = 1;
        return;
    }
    c->out.off = c->out.len = 0;
    if (c->want_out) { c->want_out = 0; cl_ep(c); }
}

/* c has bytes to write once this upstream read is handled */
static void cl_mark(struct client *c)
{
    if (c->dirty) return;
    if (F.ndirty == F.capdirty) {
        F.capdirty = F.capdirty ? 2 * F.capdirty : 256;
        F.dirty = realloc(F.dirty, F.capdirty * sizeof *F.dirty);
        if (!F.dirty) fdie("out of memory");
    }
    c->dirty = 1;
    F.dirty[F.ndirty++] = c;
}

/* One write per client that an upstream read gave bytes to. */
static void cl_flush_dirty(void)
{
    size_t i;
    for (i = 0; i < F.ndirty; i++) {
        F.dirty[i]->dirty = 0;
        cl_flush(F.dirty[i]);
    }
    F.ndirty = 0;
}

/* One SSE event for one text delta, as one HTTP chunk (queued; cl_flush writes). */
static void cl_delta(struct client *c, const unsigned char *t, size_t n)
{
    static const char pre[] = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"";
    static const char post[] = "\"}}]}\n\n";
    char ev[1024], h[16];
    size_t k = sizeof pre - 1, i;
    int hn;
    memcpy(ev, pre, k);
    for (i = 0; i < n && k < sizeof ev - 16; i++) {
        unsigned char ch = t[i];
        if (ch == '"' || ch == '\\') { ev[k++] = '\\'; ev[k++] = (char)ch; }
        else if (ch < 0x20) k += (size_t)snprintf(ev + k, 8, "\\u%04x", ch);
        else ev[k++] = (char)ch;
    }
    memcpy(ev + k, post, sizeof post - 1);
    k += sizeof post - 1;
    hn = snprintf(h, sizeof h, "%zx\r\n", k);
    bbuf_add(&c->out, h, (size_t)hn);
    bbuf_add(&c->out, ev, k);
    bbuf_add(&c->out, "\r\n", 2);
    cl_mark(c);
}

static void cl_done(struct client *c)
{
    static const char d[] = "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
    bbuf_add(&c->out, d, sizeof d - 1);
    c->busy = 0;
    c->run = NULL;
    cl_mark(c);
}

static void cl_head(struct client *c)
{
    static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    bbuf_add(&c->out, h, sizeof h - 1);
}

static void cl_fail(struct client *c)
{
    static const char r[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    bbuf_add(&c->out, r, sizeof r - 1);
    cl_flush(c);
    c->closing = 1;
}

static void cl_read(struct client *c)
{
    char b[8192];
    for (;;) {
        ssize_t n = recv(c->fd, b, sizeof b, 0);
        if (n > 0) { bbuf_add(&c->in, b, (size_t)n); continue; }
        if (n < 0 && errno == EAGAIN) break;
        c->closing = 1;
        return;
    }
    while (!c->busy && bbuf_avail(&c->in)) {
        const char *p = (const char *)c->in.p + c->in.off, *e, *cl, *m, *me;
        size_t avail = bbuf_avail(&c->in), hl, bl = 0;
        e = memmem(p, avail, "\r\n\r\n", 4);
        if (!e) return;
        hl = (size_t)(e - p) + 4;
        cl = memmem(p, hl, "Content-Length:", 15);
        if (!cl) cl = memmem(p, hl, "content-length:", 15);
        if (cl) bl = (size_t)strtoul(cl + 15, NULL, 10);
        if (avail < hl + bl) return;
        c->in.off += hl + bl;
        m = memmem(p + hl, bl, "\"model\":\"", 9);
        if (!m) { cl_fail(c); return; }
        m += 9;
        me = memchr(m, '"', (size_t)(p + hl + bl - m));
        if (!me) { cl_fail(c); return; }
        c->busy = 1;
        cl_head(c);
        if (floor_start(c, m, (size_t)(me - m)) < 0) { cl_fail(c); return; }
    }
}

static void cl_close(struct client *c)
{
    if (c->prev) c->prev->next = c->next; else F.clients = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->busy) floor_abandon(c);
    epoll_ctl(F.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in.p);
    free(c->out.p);
    free(c);
}

/* ---- the Cursor side: envelopes and the two messages a floor reads ---- */

static int fvarint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    int s = 0;
    *v = 0;
    while (*p < end && s < 64) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 0;
        s += 7;
    }
    return -1;
}

/* The first length-delimited field fn of a message (1), 0 none, -1 malformed. */
static int ffield(const unsigned char *p, size_t n, unsigned fn, const unsigned char **o,
                  size_t *on)
{
    const unsigned char *end = p + n;
    while (p < end) {
        uint64_t key, v;
        if (fvarint(&p, end, &key) < 0) return -1;
        switch (key & 7) {
        case 0: if (fvarint(&p, end, &v) < 0) return -1; break;
        case 1: if (end - p < 8) return -1; p += 8; break;
        case 5: if (end - p < 4) return -1; p += 4; break;
        case 2:
            if (fvarint(&p, end, &v) < 0 || v > (uint64_t)(end - p)) return -1;
            if ((key >> 3) == fn) { *o = p; *on = (size_t)v; return 1; }
            p += v;
            break;
        default: return -1;
        }
    }
    return 0;
}

enum { FM_OTHER, FM_TEXT, FM_END };

/* One AgentServerMessage: a text delta (*t, *tn), the turn's end, or something else. */
static int fmsg(const unsigned char *m, size_t n, const unsigned char **t, size_t *tn)
{
    const unsigned char *iu, *x;
    size_t iun, xn;
    if (ffield(m, n, 1, &iu, &iun) != 1) return FM_OTHER;
    if (ffield(iu, iun, 1, &x, &xn) == 1) {
        if (ffield(x, xn, 1, t, tn) != 1) { *t = x; *tn = 0; }
        return FM_TEXT;
    }
    if (ffield(iu, iun, 14, &x, &xn) == 1) return FM_END;
    return FM_OTHER;
}

/* Envelopes out of b: each text to the client; returns 1 when the answer ended (turn_ended,
 * a Connect end-stream or a gRPC-web trailer). */
static int fenvelopes(struct bbuf *b, struct client *c)
{
    int end = 0;
    while (bbuf_avail(b) >= 5) {
        const unsigned char *p = b->p + b->off, *t;
        size_t ln = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4], tn;
        if (bbuf_avail(b) < 5 + ln) break;
        b->off += 5 + ln;
        if (p[0] & 0x82) { end = 1; continue; }
        switch (fmsg(p + 5, ln, &t, &tn)) {
        case FM_TEXT: if (c) cl_delta(c, t, tn); break;
        case FM_END: end = 1; break;
        default: break;
        }
    }
    return end;
}

/* AgentClientMessage{1: AgentRunRequest{3: ModelDetails{1: model_id}}} (the least a run
 * request can be: the bench's upstream reads only the model) into o; returns its length. */
static size_t frun_request(unsigned char *o, const char *model, size_t mn)
{
    size_t k = 0;
    if (mn > 100) mn = 100;
    o[k++] = 0x0a; o[k++] = (unsigned char)(mn + 4);
    o[k++] = 0x1a; o[k++] = (unsigned char)(mn + 2);
    o[k++] = 0x0a; o[k++] = (unsigned char)mn;
    memcpy(o + k, model, mn);
    return k + mn;
}

static void fuuid(char out[37])
{
    static uint64_t n;
    snprintf(out, 37, "00000000-0000-4000-8000-%012llx", (unsigned long long)++n);
}

/* ---- the loop ---- */

static int floor_listen(int port)
{
    struct sockaddr_in a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fdie("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4096) < 0) fdie("bind/listen");
    return fd;
}

/* A blocking TCP connect to the upstream, then non-blocking, with a TLS client on it. */
static SSL *floor_connect(int *fdp, const char *alpn, unsigned alpn_len)
{
    struct sockaddr_in a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SSL *s;
    if (fd < 0) return NULL;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)F.up_port);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) { close(fd); return NULL; }
    s = SSL_new(F.ctx);
    SSL_set_fd(s, fd);
    SSL_set_tlsext_host_name(s, "localhost");
    SSL_set_alpn_protos(s, (const unsigned char *)alpn, alpn_len);
    if (SSL_connect(s) != 1) { SSL_free(s); close(fd); return NULL; }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *fdp = fd;
    return s;
}

static void floor_init(int argc, char **argv, int *listen_port)
{
    const char *ca = NULL;
    int i;
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--listen")) *listen_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--upstream-port")) F.up_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ca")) ca = argv[i + 1];
        else if (!strcmp(argv[i], "--token")) F.token = argv[i + 1];
        else fdie("usage: floor --listen PORT --upstream-port PORT --ca PEM [--token T]");
    }
    if (i != argc || !*listen_port || !F.up_port || !ca) fdie("--listen, --upstream-port, --ca");
    if (!F.token) F.token = "bench";
    signal(SIGPIPE, SIG_IGN);
    {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    }
    F.ctx = SSL_CTX_new(TLS_client_method());
    if (SSL_CTX_load_verify_locations(F.ctx, ca, NULL) != 1) fdie("--ca");
    SSL_CTX_set_verify(F.ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(F.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(F.ctx, 1);  /* one read() for many records, not two per record */
    F.ep = epoll_create1(EPOLL_CLOEXEC);
}

static void floor_accept(int lfd)
{
    for (;;) {
        struct epoll_event ev;
        struct client *c;
        int one = 1, fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c = calloc(1, sizeof *c);
        if (!c) fdie("out of memory");
        c->kind = FK_CLIENT;
        c->fd = fd;
        c->next = F.clients;
        if (F.clients) F.clients->prev = c;
        F.clients = c;
        ev.events = EPOLLIN;
        ev.data.ptr = c;
        epoll_ctl(F.ep, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* The end of a loop's turn: the clients that went away in it. */
static void floor_sweep(void)
{
    struct client *c, *nx;
    for (c = F.clients; c; c = nx) {
        nx = c->next;
        if (c->closing) cl_close(c);
    }
}

#endif
