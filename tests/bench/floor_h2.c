/* floor_h2.c - the HTTP/2 floor (issue 32 item 2): a minimal proxy on libnghttp2 + OpenSSL.
 *
 * What a proxy over HTTP/2 cannot do without, and nothing else (see floor.h for the client
 * side): one upstream TLS connection (ALPN h2, made at start), one Run stream per client
 * request on it (HEADERS, then one DATA frame with the run request; the request body stays
 * open, as the proxy's does for its heartbeats, and ends when the answer has), and per upstream
 * DATA frame with one delta one SSE chunk to the client, written with one write() per client
 * per upstream read. One thread, one epoll loop; nghttp2's own flow control (windows of 16 MiB
 * for the connection, 1 MiB per stream, updated by nghttp2 as data is consumed).
 * Usage: floor_h2 --listen PORT --upstream-port PORT --ca PEM [--token T]
 */
#define _GNU_SOURCE
#include <nghttp2/nghttp2.h>

#include "floor.h"

#define RUN_PATH "/agent.v1.AgentService/Run"

struct frun {
    struct client *c;
    int32_t sid;
    struct bbuf in;                 /* answer bytes not yet split into envelopes */
    unsigned char req[128];         /* the run request's envelope */
    size_t req_len;
    int req_sent, eof;
};

static struct {
    int kind, fd, want_out;
    SSL *ssl;
    nghttp2_session *h2;
    struct bbuf out;
    char authority[32];
} U;

static void up_ep(void)
{
    struct epoll_event ev;
    ev.events = EPOLLIN | (U.want_out ? EPOLLOUT : 0);
    ev.data.ptr = &U;
    epoll_ctl(F.ep, EPOLL_CTL_MOD, U.fd, &ev);
}

static void up_flush(void)
{
    if (nghttp2_session_send(U.h2) != 0) fdie("nghttp2_session_send");
    while (bbuf_avail(&U.out)) {
        int n = SSL_write(U.ssl, U.out.p + U.out.off, (int)bbuf_avail(&U.out));
        if (n > 0) { U.out.off += (size_t)n; continue; }
        n = SSL_get_error(U.ssl, n);
        if (n == SSL_ERROR_WANT_WRITE || n == SSL_ERROR_WANT_READ) {
            if (!U.want_out) { U.want_out = 1; up_ep(); }
            return;
        }
        fdie("upstream write failed");
    }
    U.out.off = U.out.len = 0;
    if (U.want_out) { U.want_out = 0; up_ep(); }
}

static ssize_t send_cb(nghttp2_session *s, const uint8_t *d, size_t n, int fl, void *u)
{
    (void)s; (void)fl; (void)u;
    bbuf_add(&U.out, d, n);
    return (ssize_t)n;
}

static ssize_t body_cb(nghttp2_session *s, int32_t sid, uint8_t *b, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *u)
{
    struct frun *r = src->ptr;
    (void)s; (void)sid; (void)u;
    if (!r->req_sent && len >= r->req_len) {
        memcpy(b, r->req, r->req_len);
        r->req_sent = 1;
        return (ssize_t)r->req_len;
    }
    if (r->eof) { *flags |= NGHTTP2_DATA_FLAG_EOF; return 0; }
    return NGHTTP2_ERR_DEFERRED;
}

static int data_cb(nghttp2_session *s, uint8_t fl, int32_t sid, const uint8_t *d, size_t n,
                   void *u)
{
    struct frun *r = nghttp2_session_get_stream_user_data(s, sid);
    (void)fl; (void)u;
    if (!r) return 0;
    bbuf_add(&r->in, d, n);
    if (fenvelopes(&r->in, r->c) && !r->eof) {
        if (r->c) cl_done(r->c);
        r->c = NULL;
        r->eof = 1;                 /* our side ends too */
        nghttp2_session_resume_data(s, sid);
    }
    return 0;
}

static int close_cb(nghttp2_session *s, int32_t sid, uint32_t code, void *u)
{
    struct frun *r = nghttp2_session_get_stream_user_data(s, sid);
    (void)code; (void)u;
    if (!r) return 0;
    if (r->c) {                     /* ended without its end: the client gets none */
        r->c->run = NULL;
        r->c->busy = 0;
        r->c->closing = 1;
    }
    free(r->in.p);
    free(r);
    return 0;
}

static int floor_start(struct client *c, const char *model, size_t mn)
{
    struct frun *r = calloc(1, sizeof *r);
    char rid[37], auth[512];
    size_t k;
    nghttp2_data_provider dp;
    int32_t sid;
    if (!r) fdie("out of memory");
    k = frun_request(r->req + 5, model, mn);
    r->req[0] = 0;
    r->req[1] = r->req[2] = 0;
    r->req[3] = (unsigned char)(k >> 8);
    r->req[4] = (unsigned char)k;
    r->req_len = k + 5;
    fuuid(rid);
    snprintf(auth, sizeof auth, "Bearer %s", F.token);
    {
        nghttp2_nv h[] = {
#define NV(a, b) { (uint8_t *)(a), (uint8_t *)(b), strlen(a), strlen(b), NGHTTP2_NV_FLAG_NONE }
            NV(":method", "POST"), NV(":scheme", "https"), NV(":authority", U.authority),
            NV(":path", RUN_PATH), NV("content-type", "application/connect+proto"),
            NV("connect-protocol-version", "1"), NV("authorization", auth),
            NV("x-request-id", rid)
#undef NV
        };
        dp.source.ptr = r;
        dp.read_callback = body_cb;
        sid = nghttp2_submit_request(U.h2, NULL, h, sizeof h / sizeof h[0], &dp, r);
    }
    if (sid < 0) { free(r); return -1; }
    r->sid = sid;
    r->c = c;
    c->run = r;
    return 0;
}

static void floor_abandon(struct client *c)
{
    struct frun *r = c->run;
    if (!r) return;
    r->c = NULL;
    nghttp2_submit_rst_stream(U.h2, NGHTTP2_FLAG_NONE, r->sid, NGHTTP2_CANCEL);
}

static void up_read(void)
{
    unsigned char b[16384];
    for (;;) {
        int n = SSL_read(U.ssl, b, sizeof b);
        if (n <= 0) {
            int e = SSL_get_error(U.ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
            fdie("upstream connection closed");
        }
        if (nghttp2_session_mem_recv(U.h2, b, (size_t)n) < 0) fdie("nghttp2_session_mem_recv");
    }
}

int main(int argc, char **argv)
{
    int lport = 0, lfd;
    nghttp2_session_callbacks *cb;
    nghttp2_settings_entry iv[2] = { { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                                     { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 } };
    struct epoll_event ev, evs[256];
    floor_init(argc, argv, &lport);
    U.ssl = floor_connect(&U.fd, "\x02h2", 3);
    if (!U.ssl) fdie("cannot connect to the upstream");
    {
        const unsigned char *a;
        unsigned al;
        SSL_get0_alpn_selected(U.ssl, &a, &al);
        if (al != 2 || memcmp(a, "h2", 2)) fdie("the upstream did not choose h2");
    }
    snprintf(U.authority, sizeof U.authority, "localhost:%d", F.up_port);
    U.kind = FK_UP;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, send_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, data_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, close_cb);
    nghttp2_session_client_new(&U.h2, cb, NULL);
    nghttp2_submit_settings(U.h2, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(U.h2, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    ev.events = EPOLLIN;
    ev.data.ptr = &U;
    epoll_ctl(F.ep, EPOLL_CTL_ADD, U.fd, &ev);
    up_flush();
    lfd = floor_listen(lport);
    {
        static int k_listen = FK_LISTEN;
        ev.data.ptr = &k_listen;
        epoll_ctl(F.ep, EPOLL_CTL_ADD, lfd, &ev);
    }
    for (;;) {
        int n = epoll_wait(F.ep, evs, 256, -1), j;
        if (n < 0 && errno != EINTR) fdie("epoll_wait");
        for (j = 0; j < n; j++) {
            int kind = *(int *)evs[j].data.ptr;
            if (kind == FK_LISTEN) floor_accept(lfd);
            else if (kind == FK_UP) {
                up_read();
                cl_flush_dirty();
            } else {
                struct client *c = evs[j].data.ptr;
                if (c->closing) continue;
                if (evs[j].events & EPOLLOUT) cl_flush(c);
                if (evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) cl_read(c);
                cl_flush(c);
            }
        }
        up_flush();
        cl_flush_dirty();
        floor_sweep();
        up_flush();                 /* RST_STREAMs of clients that went away */
    }
}
