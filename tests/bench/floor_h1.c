/* floor_h1.c - the HTTP/1.1 floor (issue 32 item 2): a minimal proxy on OpenSSL, the same
 * contract as floor_h2.c (see floor.h for the client side).
 *
 * Per client request, what the proxy's HTTP/1.1 transport (Connect profile) cannot do without:
 * a RunSSE (envelope(BidiRequestId), application/connect+proto) on one kept-alive upstream TLS
 * connection and the run request as BidiAppend seqno 0 (application/proto, hex data) on
 * another, both sent at once; then the RunSSE's chunked body, per envelope with one delta one
 * SSE chunk to the client, written with one write() per client per upstream read. Upstream
 * connections are pooled (kept alive, reused LIFO; a new one is a blocking connect + TLS
 * handshake, which the bench's warm-up pays). One thread, one epoll loop.
 * Usage: floor_h1 --listen PORT --upstream-port PORT --ca PEM [--token T]
 */
#include "floor.h"

#define RUNSSE_PATH "/agent.v1.AgentService/RunSSE"
#define APPEND_PATH "/aiserver.v1.BidiService/BidiAppend"

enum { U_HEAD, U_SIZE, U_DATA, U_CRLF, U_LAST, U_IDLE };

struct uconn {
    int kind, fd, want_out, dead;
    SSL *ssl;
    struct bbuf in, out;
    struct frun *run;               /* NULL when idle */
    int is_sse, st, ended;
    size_t left;                    /* bytes left of the chunk (U_DATA), or the body (append) */
    struct uconn *next;             /* idle pool */
};

struct frun {
    struct client *c;
    struct uconn *sse, *app;
    struct bbuf env;                /* RunSSE body bytes not yet split into envelopes */
};

static struct uconn *POOL;

static void uc_ep(struct uconn *u)
{
    struct epoll_event ev;
    ev.events = EPOLLIN | (u->want_out ? EPOLLOUT : 0);
    ev.data.ptr = u;
    epoll_ctl(F.ep, EPOLL_CTL_MOD, u->fd, &ev);
}

static void uc_free(struct uconn *u)
{
    epoll_ctl(F.ep, EPOLL_CTL_DEL, u->fd, NULL);
    close(u->fd);
    SSL_free(u->ssl);
    free(u->in.p);
    free(u->out.p);
    free(u);
}

static void uc_flush(struct uconn *u)
{
    while (bbuf_avail(&u->out)) {
        int n = SSL_write(u->ssl, u->out.p + u->out.off, (int)bbuf_avail(&u->out));
        if (n > 0) { u->out.off += (size_t)n; continue; }
        n = SSL_get_error(u->ssl, n);
        if (n == SSL_ERROR_WANT_WRITE || n == SSL_ERROR_WANT_READ) {
            if (!u->want_out) { u->want_out = 1; uc_ep(u); }
            return;
        }
        u->dead = 1;
        return;
    }
    u->out.off = u->out.len = 0;
    if (u->want_out) { u->want_out = 0; uc_ep(u); }
}

static struct uconn *uc_get(void)
{
    struct uconn *u = POOL;
    struct epoll_event ev;
    if (u) {
        POOL = u->next;
        return u;
    }
    u = calloc(1, sizeof *u);
    if (!u) fdie("out of memory");
    u->kind = FK_UP;
    u->ssl = floor_connect(&u->fd, "\x08http/1.1", 9);
    if (!u->ssl) { free(u); return NULL; }
    ev.events = EPOLLIN;
    ev.data.ptr = u;
    epoll_ctl(F.ep, EPOLL_CTL_ADD, u->fd, &ev);
    return u;
}

static void uc_put(struct uconn *u)
{
    u->run = NULL;
    u->st = U_IDLE;
    u->next = POOL;                 /* a dead one is taken out and freed by the loop */
    POOL = u;
}

static int head(char *o, size_t cap, const char *path, const char *ct, const char *rid,
                size_t len)
{
    return snprintf(o, cap, "POST %s HTTP/1.1\r\nhost: localhost:%d\r\nauthorization: Bearer %s\r\n"
                    "content-type: %s\r\nconnect-protocol-version: 1\r\nx-request-id: %s\r\n"
                    "content-length: %zu\r\n\r\n", path, F.up_port, F.token, ct, rid, len);
}

static int floor_start(struct client *c, const char *model, size_t mn)
{
    static const char hx[] = "0123456789abcdef";
    struct frun *r = calloc(1, sizeof *r);
    char rid[37], h[1024];
    unsigned char rr[128], b[512];
    size_t rn, k = 0, i;
    int hn;
    if (!r) fdie("out of memory");
    r->sse = uc_get();
    r->app = uc_get();
    if (!r->sse || !r->app) fdie("cannot connect to the upstream");
    fuuid(rid);
    /* RunSSE: envelope(BidiRequestId{1: rid}) */
    b[0] = 0; b[1] = b[2] = b[3] = 0; b[4] = 38; b[5] = 0x0a; b[6] = 36;
    memcpy(b + 7, rid, 36);
    hn = head(h, sizeof h, RUNSSE_PATH, "application/connect+proto", rid, 43);
    bbuf_add(&r->sse->out, h, (size_t)hn);
    bbuf_add(&r->sse->out, b, 43);
    /* BidiAppend: BidiAppendRequest{1: hex(run request), 2: {1: rid}, 3: 0} */
    rn = frun_request(rr, model, mn);
    b[k++] = 0x0a;
    b[k++] = (unsigned char)(2 * rn);       /* < 128: one varint byte */
    if (2 * rn >= 128) { b[k - 1] = (unsigned char)(2 * rn | 0x80); b[k++] = (unsigned char)(2 * rn >> 7); }
    for (i = 0; i < rn; i++) { b[k++] = (unsigned char)hx[rr[i] >> 4]; b[k++] = (unsigned char)hx[rr[i] & 15]; }
    b[k++] = 0x12; b[k++] = 38; b[k++] = 0x0a; b[k++] = 36;
    memcpy(b + k, rid, 36);
    k += 36;
    b[k++] = 0x18; b[k++] = 0;
    hn = head(h, sizeof h, APPEND_PATH, "application/proto", rid, k);
    bbuf_add(&r->app->out, h, (size_t)hn);
    bbuf_add(&r->app->out, b, k);
    r->sse->run = r->app->run = r;
    r->sse->is_sse = 1;
    r->app->is_sse = 0;
    r->sse->st = r->app->st = U_HEAD;
    r->sse->ended = 0;
    r->c = c;
    c->run = r;
    uc_flush(r->sse);
    uc_flush(r->app);
    return 0;
}

static void floor_abandon(struct client *c)
{
    struct frun *r = c->run;
    if (r) r->c = NULL;             /* the upstream answers run out and go back to the pool */
}

/* A response head in u->in: 1 read (the status 200), 0 more needed, -1 bad. */
static int uc_head(struct uconn *u)
{
    const char *p = (const char *)u->in.p + u->in.off, *e, *cl;
    size_t avail = bbuf_avail(&u->in), hl;
    e = memmem(p, avail, "\r\n\r\n", 4);
    if (!e) return 0;
    hl = (size_t)(e - p) + 4;
    if (hl < 12 || memcmp(p + 9, "200", 3)) return -1;
    u->left = 0;
    cl = memmem(p, hl, "ontent-Length:", 14);
    if (!cl) cl = memmem(p, hl, "ontent-length:", 14);
    if (cl) u->left = strtoul(cl + 14, NULL, 10);
    u->in.off += hl;
    return 1;
}

static void run_end(struct frun *r)
{
    if (r->c) cl_done(r->c);
    r->c = NULL;
}

/* The bytes of an upstream connection: the append's answer, or the RunSSE's chunks. */
static void uc_parse(struct uconn *u)
{
    struct frun *r = u->run;
    for (;;) {
        size_t avail = bbuf_avail(&u->in);
        const unsigned char *p = u->in.p + u->in.off, *e;
        if (!r) { u->in.off = u->in.len = 0; return; }
        switch (u->st) {
        case U_HEAD: {
            int h = uc_head(u);
            if (h == 0) return;
            if (h < 0) { u->dead = 1; if (r->c) r->c->closing = 1; return; }
            if (!u->is_sse) {       /* the append's answer: its body (none) and back to the pool */
                if (bbuf_avail(&u->in) < u->left) return;
                u->in.off += u->left;
                r->app = NULL;
                if (!r->sse) free(r);
                uc_put(u);
                return;
            }
            u->st = U_SIZE;
            break;
        }
        case U_SIZE:
            e = memmem(p, avail, "\r\n", 2);
            if (!e) return;
            u->left = strtoul((const char *)p, NULL, 16);
            u->in.off += (size_t)(e - p) + 2;
            u->st = u->left ? U_DATA : U_LAST;
            break;
        case U_DATA: {
            size_t n = avail < u->left ? avail : u->left;
            if (!n) return;
            bbuf_add(&r->env, p, n);
            u->in.off += n;
            u->left -= n;
            if (fenvelopes(&r->env, r->c)) run_end(r);
            if (!u->left) u->st = U_CRLF;
            break;
        }
        case U_CRLF:
            if (avail < 2) return;
            u->in.off += 2;
            u->st = U_SIZE;
            break;
        case U_LAST:
            if (avail < 2) return;
            u->in.off += 2;
            run_end(r);
            free(r->env.p);
            r->sse = NULL;
            if (!r->app) free(r);
            uc_put(u);
            return;
        default:
            return;
        }
    }
}

static void uc_read(struct uconn *u)
{
    unsigned char b[16384];
    for (;;) {
        int n = SSL_read(u->ssl, b, sizeof b);
        if (n <= 0) {
            int e = SSL_get_error(u->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
            u->dead = 1;
            break;
        }
        bbuf_add(&u->in, b, (size_t)n);
    }
    uc_parse(u);
}

int main(int argc, char **argv)
{
    int lport = 0, lfd;
    struct epoll_event ev, evs[256];
    static int k_listen = FK_LISTEN;
    floor_init(argc, argv, &lport);
    lfd = floor_listen(lport);
    ev.events = EPOLLIN;
    ev.data.ptr = &k_listen;
    epoll_ctl(F.ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(F.ep, evs, 256, -1), j;
        if (n < 0 && errno != EINTR) fdie("epoll_wait");
        for (j = 0; j < n; j++) {
            int kind = *(int *)evs[j].data.ptr;
            if (kind == FK_LISTEN) floor_accept(lfd);
            else if (kind == FK_UP) {
                struct uconn *u = evs[j].data.ptr;
                if (evs[j].events & EPOLLOUT) uc_flush(u);
                if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) uc_read(u);
                if (u->dead && !u->run) {
                    struct uconn **pp;      /* an idle one the upstream closed */
                    for (pp = &POOL; *pp; pp = &(*pp)->next)
                        if (*pp == u) { *pp = u->next; break; }
                    uc_free(u);
                } else if (u->dead) {
                    fdie("an upstream connection failed mid-run");
                }
                cl_flush_dirty();
            } else {
                struct client *c = evs[j].data.ptr;
                if (c->closing) continue;
                if (evs[j].events & EPOLLOUT) cl_flush(c);
                if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) cl_read(c);
                cl_flush(c);
            }
        }
        cl_flush_dirty();
        floor_sweep();
    }
}
