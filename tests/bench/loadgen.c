/* loadgen.c - load generator for ./build.sh bench (tests/bench.sh builds it with gcc -O2).
 *
 * Modes (one JSON object on stdout at the end; times in microseconds):
 *   loadgen proxy   --port P --model M --conc C --count N [--expect E]
 *       N streaming chat completions through cursor-oai (plain HTTP/1.1 keep-alive, chunked
 *       SSE), C at a time.
 *   loadgen direct  --port P --model M --conc C --count N --ca PEM --token JWT [--expect E]
 *       the floor: what the proxy does upstream, straight against the fake (TLS 1.2 via
 *       BearSSL): RunSSE and its response head, then BidiAppend seqno 0 with the run request
 *       on a second connection, then the RunSSE stream. Both connections are kept alive per
 *       worker (connected before the clock starts).
 *   loadgen hold    --port P --model M --conc N [--ramp K]
 *       N streams through the proxy at once; prints "READY <streaming> <failed>" when every
 *       stream has its first content delta (or failed), then waits for them all to end.
 *       --ramp K: at most K streams are between "connect" and "first delta" at a time (the
 *       others wait their turn), so that opening 10,000 streams measures the proxy, not a
 *       10,000-deep queue of TLS handshakes in the single-threaded fake. All streams are
 *       driven by one thread (epoll): threads are bounded machine-wide by pid_max (32,768
 *       here), and the proxy and the fake need theirs.
 *   loadgen startup --bin PROXY --port P --count R
 *       R times: fork+exec "PROXY serve --listen 127.0.0.1:P" (environment inherited), time
 *       until a TCP connect succeeds and until GET /health answers, VmRSS at that point.
 *
 * Per stream: ttfb = request sent -> first content delta (first text frame for direct),
 * head = request sent -> first response byte, total = request sent -> end of the stream.
 * A delta whose text starts with "@T<ns>;" (the fake's "stamp" option: its CLOCK_MONOTONIC
 * at send time) gives a per-delta latency sample: arrival - stamp. Same host, same clock.
 */
#define _GNU_SOURCE
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"

#include <bearssl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LG_RBUF 65536
#define LG_MAX_LAT 2000000          /* per-delta latency samples kept */
#define LG_IO_TIMEOUT_S 60
#define LG_HOLD_IDLE_S 900           /* hold: give up after this long without an event */

enum { M_PROXY, M_DIRECT, M_HOLD, M_STARTUP };

static struct {
    int mode, port, conc, count, expect;
    const char *model, *ca, *token, *bin;
    char body[512];                 /* the OpenAI request body */
    size_t body_len;
    br_x509_trust_anchor *tas;
    size_t tas_n;
    coai_buf run_msg;               /* direct: the AgentClientMessage{run_request} */
    atomic_int next;                /* next stream index */
    atomic_int ready, failed;       /* hold mode */
    int64_t t_start;
} G;

/* Per stream record. */
struct rec {
    int64_t head, ttfb, total;      /* us; -1 when not reached */
    int events;                     /* content deltas */
    int64_t bytes;                  /* response body bytes (SSE or gRPC-web frames) */
    const char *err;                /* NULL ok */
};

static struct rec *R;
static int64_t *LAT;                /* per-delta latencies, us*1000 (ns) */
static atomic_long LAT_N;
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static sem_t ramp_sem;              /* hold --ramp K: streams still starting */
static int ramp_k;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "loadgen: %s\n", msg);
    exit(2);
}

/* ---- connections: plain TCP or BearSSL over a blocking socket ---- */

struct conn {
    int fd;
    int tls;
    size_t rlen, roff;
    unsigned char rbuf[LG_RBUF];
    br_ssl_client_context sc;
    br_x509_minimal_context xc;
    br_sslio_context io;
    unsigned char iobuf[BR_SSL_BUFSIZE_BIDI];
};

static int sock_read(void *ctx, unsigned char *buf, size_t len)
{
    struct conn *c = ctx;
    for (;;) {
        ssize_t r = recv(c->fd, buf, len, 0);
        if (r > 0) return (int)r;
        if (r < 0 && errno == EINTR) continue;
        return -1;
    }
}

static int sock_write(void *ctx, const unsigned char *buf, size_t len)
{
    struct conn *c = ctx;
    for (;;) {
        ssize_t w = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (w > 0) return (int)w;
        if (w < 0 && errno == EINTR) continue;
        return -1;
    }
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->rlen = c->roff = 0;
}

static int conn_open(struct conn *c, int tls)
{
    struct sockaddr_in a;
    struct timeval tv = { LG_IO_TIMEOUT_S, 0 };
    int one = 1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)G.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) { conn_close(c); return -1; }
    c->rlen = c->roff = 0;
    c->tls = tls;
    if (!tls) return 0;
    br_ssl_client_init_full(&c->sc, &c->xc, G.tas, G.tas_n);
    br_ssl_engine_set_versions(&c->sc.eng, BR_TLS12, BR_TLS12);
    br_ssl_engine_set_buffer(&c->sc.eng, c->iobuf, sizeof c->iobuf, 1);
    if (!br_ssl_client_reset(&c->sc, "localhost", 0)) { conn_close(c); return -1; }
    br_sslio_init(&c->io, &c->sc.eng, sock_read, c, sock_write, c);
    if (br_sslio_flush(&c->io) < 0) { conn_close(c); return -1; }
    return 0;
}

static int conn_write(struct conn *c, const void *p, size_t n)
{
    if (c->tls) return br_sslio_write_all(&c->io, p, n) < 0 ? -1 : 0;
    return sock_write(c, p, n) == (int)n ? 0 : -1;   /* blocking send writes it all */
}

static int conn_flush(struct conn *c)
{
    return c->tls ? br_sslio_flush(&c->io) : 0;
}

/* Read more bytes into rbuf (compacting first). >0 bytes, 0 EOF, -1 error. */
static int conn_fill(struct conn *c)
{
    int n;
    if (c->roff > 0) {
        memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
        c->rlen -= c->roff;
        c->roff = 0;
    }
    if (c->rlen == sizeof c->rbuf) return -1;
    if (c->tls) {
        n = br_sslio_read(&c->io, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen);
        if (n < 0) return br_ssl_engine_last_error(&c->sc.eng) == BR_ERR_OK ? 0 : -1;
    } else {
        ssize_t r;
        do r = recv(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen, 0);
        while (r < 0 && errno == EINTR);
        if (r <= 0) return r == 0 ? 0 : -1;
        n = (int)r;
    }
    c->rlen += (size_t)n;
    return n;
}

/* ---- one HTTP response: head, then the body piece by piece to a callback ---- */

typedef int (*body_cb)(void *ctx, const unsigned char *p, size_t n, int64_t t);

/* The response head. *t_first: time of its first byte. Returns the status (>= 100), -1 I/O
 * error, -2 bad head; rs describes the body that follows. */
static int resp_head(struct conn *c, int64_t *t_first, coai_http_response *rs)
{
    long hl;
    int64_t t = now_ns();
    *t_first = 0;
    for (;;) {
        hl = c->rlen > c->roff
           ? coai_http_parse_response((const char *)c->rbuf + c->roff, c->rlen - c->roff, rs)
           : COAI_MORE;
        if (hl != COAI_MORE) break;
        if (conn_fill(c) <= 0) return -1;
        t = now_ns();
        if (!*t_first) *t_first = t;
    }
    if (!*t_first) *t_first = t;
    if (hl <= 0) return -2;
    c->roff += (size_t)hl;
    return rs->status;
}

/* The body of the response whose head resp_head read, piece by piece to cb. Returns the
 * status, -1 I/O error, -2 bad body. keep: 1 when the connection may carry another request. */
static int resp_body(struct conn *c, const coai_http_response *rsp, body_cb cb, void *ctx,
                     int *keep)
{
    coai_http_response rs = *rsp;
    coai_chunked_decoder cd;
    int64_t t = now_ns();
    uint64_t left = 0;
    *keep = 0;
    memset(&cd, 0, sizeof cd);
    if (rs.no_body) goto done;
    if (!rs.chunked && rs.content_length < 0) return -2;     /* not used by either server */
    left = rs.chunked ? 0 : (uint64_t)rs.content_length;
    for (;;) {
        size_t avail = c->rlen - c->roff;
        if (!rs.chunked && left == 0) break;
        if (avail > 0) {
            if (rs.chunked) {
                size_t used = 0, out = 0;
                unsigned char *base = c->rbuf + c->roff;
                coai_result cr = coai_chunked_feed(&cd, (char *)base, avail, &used, &out);
                if (cr < 0) return -2;
                c->roff += used;
                if (out > 0 && cb(ctx, base, out, t) < 0) return -2;
                if (cr == COAI_DONE) break;
                if (used == avail) continue;
            } else {
                size_t n = avail < left ? avail : (size_t)left;
                if (cb(ctx, c->rbuf + c->roff, n, t) < 0) return -2;
                c->roff += n;
                left -= n;
                continue;
            }
        }
        if (conn_fill(c) <= 0) return -1;
        t = now_ns();
    }
done:
    *keep = rs.keep_alive;
    return rs.status;
}

/* One whole response: head, then the body to cb. */
static int resp_read(struct conn *c, int64_t *t_first, body_cb cb, void *ctx, int *keep)
{
    coai_http_response rs;
    int st = resp_head(c, t_first, &rs);
    *keep = 0;
    if (st < 0) return st;
    return resp_body(c, &rs, cb, ctx, keep);
}

/* ---- per-delta bookkeeping shared by both modes ---- */

struct stream {
    int64_t t0;
    struct rec *r;
    int done;                       /* [DONE] / OK trailer seen */
    int hold;                       /* hold mode: report the first delta */
    const char *err;
    coai_buf sse;                   /* proxy: SSE bytes not yet split into events */
    coai_frame_decoder fd;          /* direct */
    coai_msg msg;                   /* direct */
};

static void on_delta(struct stream *s, const char *text, size_t n, int64_t t)
{
    if (s->r->events++ == 0) {
        s->r->ttfb = (t - s->t0) / 1000;
        if (s->hold) {
            if (ramp_k) sem_post(&ramp_sem);
            pthread_mutex_lock(&hold_lock);
            atomic_fetch_add(&G.ready, 1);
            pthread_cond_broadcast(&hold_cond);
            pthread_mutex_unlock(&hold_lock);
        }
    }
    if (n > 2 && text[0] == '@' && text[1] == 'T') {
        int64_t stamp = 0;
        size_t i;
        for (i = 2; i < n && text[i] >= '0' && text[i] <= '9'; i++)
            stamp = stamp * 10 + (text[i] - '0');
        if (i < n && text[i] == ';') {
            long k = atomic_fetch_add(&LAT_N, 1);
            if (k < LG_MAX_LAT) LAT[k] = t - stamp;
        }
    }
}

/* Proxy: split the SSE body into events. */
static int sse_cb(void *ctx, const unsigned char *p, size_t n, int64_t t)
{
    struct stream *s = ctx;
    size_t start = 0, i;
    s->r->bytes += (int64_t)n;
    if (coai_buf_append(&s->sse, p, n) < 0) return -1;
    for (i = 0; i + 1 < s->sse.len; i++) {
        const char *ev, *c;
        size_t evn;
        if (s->sse.data[i] != '\n' || s->sse.data[i + 1] != '\n') continue;
        ev = (const char *)s->sse.data + start;
        evn = i - start;
        start = i + 2;
        i++;
        if (evn >= 6 && memcmp(ev, "data: ", 6) == 0) {
            if (evn == 12 && memcmp(ev + 6, "[DONE]", 6) == 0) { s->done = 1; continue; }
            if (s->done) { s->err = "event_after_done"; continue; }
            if (memmem(ev, evn, "{\"error\":", 9)) { s->err = "error_event"; continue; }
            c = memmem(ev, evn, "\"content\":\"", 11);
            if (c) {
                c += 11;
                on_delta(s, c, (size_t)(ev + evn - c), t);
            }
        }
    }
    if (start > 0) {
        memmove(s->sse.data, s->sse.data + start, s->sse.len - start);
        s->sse.len -= start;
    }
    return 0;
}

/* Direct: gRPC-web frames -> messages. */
static int frame_cb(void *ctx, const unsigned char *p, size_t n, int64_t t)
{
    struct stream *s = ctx;
    s->r->bytes += (int64_t)n;
    while (n > 0) {
        size_t used = 0;
        coai_frame f;
        coai_result fr = coai_frame_feed(&s->fd, p, n, &used, &f);
        p += used;
        n -= used;
        if (fr == COAI_MORE) break;
        if (fr < 0) { s->err = "bad_frame"; return -1; }
        if (f.flags == COAI_FRAME_TRAILER) {
            coai_status st;
            coai_trailer_parse(f.data, f.len, &st);
            if (st.code != 0) s->err = "trailer_status";
            else s->done = 1;
        } else if (f.flags == COAI_FRAME_END_STREAM) {
            s->err = "end_stream";
        } else {
            if (coai_msg_decode(&s->msg, f.data, f.len) < 0) { s->err = "bad_msg"; return -1; }
            if (s->msg.kind == COAI_MSG_TEXT) on_delta(s, s->msg.text.ptr, s->msg.text.len, t);
        }
    }
    return 0;
}

static int discard_cb(void *ctx, const unsigned char *p, size_t n, int64_t t)
{
    (void)ctx; (void)p; (void)n; (void)t;
    return 0;
}

/* ---- one stream through the proxy ---- */

struct worker {
    struct conn *a, *b;             /* proxy: a; direct: a = RunSSE, b = BidiAppend */
    int hold;
};

static void proxy_stream(struct worker *w, struct rec *r)
{
    char head[256];
    struct stream s;
    int64_t tf;
    int st, keep, hn, attempt;
    memset(&s, 0, sizeof s);
    s.r = r;
    s.hold = w->hold;
    hn = snprintf(head, sizeof head, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                  G.port, G.body_len);
    for (attempt = 0; attempt < 2; attempt++) {
        int fresh = w->a->fd < 0;
        if (fresh && conn_open(w->a, 0) < 0) { r->err = "connect"; goto out; }
        s.t0 = now_ns();
        if (conn_write(w->a, head, (size_t)hn) == 0
            && conn_write(w->a, G.body, G.body_len) == 0) {
            st = resp_read(w->a, &tf, sse_cb, &s, &keep);
            if (st != -1 || fresh || r->events > 0 || s.r->bytes > 0) break;
        }
        conn_close(w->a);            /* a kept-alive connection the server had closed */
        if (fresh) { r->err = "send"; goto out; }
    }
    if (attempt == 2) { r->err = "send"; goto out; }
    r->head = (tf - s.t0) / 1000;
    r->total = (now_ns() - s.t0) / 1000;
    if (st == -1) r->err = "io";
    else if (st == -2) r->err = "bad_response";
    else if (st != 200) r->err = "status";
    else if (s.err) r->err = s.err;
    else if (!s.done) r->err = "no_done";
    else if (G.expect && r->events != G.expect) r->err = "delta_count";
    if (st < 0 || !keep) conn_close(w->a);
out:
    if (r->err) conn_close(w->a);
    coai_buf_free(&s.sse);
}

/* ---- one run straight against the fake ---- */

static int up_head(char *out, size_t cap, const char *path, const char *rid, size_t len)
{
    char cs[COAI_CHECKSUM_SIZE];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    coai_checksum(cs, coai_str_c(G.token), (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    return snprintf(out, cap,
                    "POST %s HTTP/1.1\r\nhost: localhost:%d\r\nauthorization: Bearer %s\r\n"
                    "content-type: application/grpc-web+proto\r\n"
                    "user-agent: connect-es/1.4.0\r\nx-cursor-checksum: %s\r\n"
                    "x-cursor-client-version: cli-2026.10.01-e373342\r\n"
                    "x-cursor-client-type: cli\r\nx-cursor-timezone: UTC\r\n"
                    "x-ghost-mode: true\r\nx-cursor-streaming: true\r\nx-request-id: %s\r\n"
                    "content-length: %zu\r\n\r\n", path, G.port, G.token, cs, rid, len);
}

static void direct_stream(struct worker *w, struct rec *r)
{
    char rid[37], head[8192];
    unsigned char rnd[16];
    coai_buf body = { 0 }, app = { 0 };
    coai_http_response rs;
    struct stream s;
    int64_t tf, tf2;
    int st, keep, hn, i;
    memset(&s, 0, sizeof s);
    s.r = r;
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { r->err = "random"; return; }
    coai_uuid_format(rid, rnd);
    if (coai_encode_run_body(&body, coai_str_c(rid)) < 0
        || coai_encode_bidi_append(&app, G.run_msg.data, G.run_msg.len, coai_str_c(rid), 0) < 0) {
        r->err = "encode";
        goto out;
    }
    for (i = 0; i < 2; i++) {
        struct conn *c = i ? w->b : w->a;
        if (c->fd < 0 && conn_open(c, 1) < 0) { r->err = "connect"; goto out; }
    }
    s.t0 = now_ns();
    hn = up_head(head, sizeof head, "/agent.v1.AgentService/RunSSE", rid, body.len);
    if (conn_write(w->a, head, (size_t)hn) < 0 || conn_write(w->a, body.data, body.len) < 0
        || conn_flush(w->a) < 0) {
        r->err = "send";
        goto out;
    }
    /* as the proxy does: the RunSSE head first, then the seqno-0 append */
    st = resp_head(w->a, &tf, &rs);
    if (st != 200) { r->err = st < 0 ? "io" : "status"; goto out; }
    hn = up_head(head, sizeof head, "/aiserver.v1.BidiService/BidiAppend", rid, app.len);
    if (conn_write(w->b, head, (size_t)hn) < 0 || conn_write(w->b, app.data, app.len) < 0
        || conn_flush(w->b) < 0) {
        r->err = "send";
        goto out;
    }
    st = resp_read(w->b, &tf2, discard_cb, NULL, &keep);
    if (st != 200) { r->err = st < 0 ? "append_io" : "append_status"; goto out; }
    if (!keep) conn_close(w->b);
    st = resp_body(w->a, &rs, frame_cb, &s, &keep);
    r->head = (tf - s.t0) / 1000;
    r->total = (now_ns() - s.t0) / 1000;
    if (st == -1) r->err = "io";
    else if (st == -2) r->err = s.err ? s.err : "bad_response";
    else if (st != 200) r->err = "status";
    else if (s.err) r->err = s.err;
    else if (!s.done) r->err = "no_trailer";
    else if (G.expect && r->events != G.expect) r->err = "delta_count";
    if (st < 0 || !keep) conn_close(w->a);
out:
    if (r->err) { conn_close(w->a); conn_close(w->b); }
    coai_buf_free(&body);
    coai_buf_free(&app);
    coai_msg_free(&s.msg);
    coai_frame_decoder_free(&s.fd);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        int i = atomic_fetch_add(&G.next, 1);
        struct rec *r;
        if (i >= G.count) break;
        r = &R[i];
        r->head = r->ttfb = r->total = -1;
        if (w->hold && ramp_k) while (sem_wait(&ramp_sem) < 0) {}
        if (G.mode == M_DIRECT) direct_stream(w, r);
        else proxy_stream(w, r);
        if (w->hold && r->events == 0) {
            if (ramp_k) sem_post(&ramp_sem);
            pthread_mutex_lock(&hold_lock);
            atomic_fetch_add(&G.failed, 1);
            pthread_cond_broadcast(&hold_cond);
            pthread_mutex_unlock(&hold_lock);
        }
    }
    conn_close(w->a);
    if (w->b) conn_close(w->b);
    return NULL;
}

/* ---- hold mode: every stream on one thread (epoll), so that 10,000 held streams cost the
 * load generator 10,000 sockets, not 10,000 threads (the machine's pid_max bounds threads
 * across the proxy, the fake and this) ---- */

struct hs {
    int fd, phase;                  /* HS_* */
    size_t sent;                    /* request bytes written */
    int64_t t0;
    coai_buf in;                    /* the whole response so far (a held answer is small) */
    int head_done, status;
};

enum { HS_WAIT, HS_CONNECTING, HS_READING, HS_DONE };

static int hold_count(const coai_buf *b, size_t from, const char *pat)
{
    size_t n = strlen(pat);
    int k = 0;
    const unsigned char *p = b->data + from, *end = b->data + b->len;
    while (p + n <= end) {
        const unsigned char *q = memmem(p, (size_t)(end - p), pat, n);
        if (!q) break;
        k++;
        p = q + n;
    }
    return k;
}

static void hold_end(struct hs *h, struct rec *r, const char *err, int *starting)
{
    if (h->phase == HS_DONE) return;
    if (!err && h->status != 200) err = "status";
    if (!err && memmem(h->in.data, h->in.len, "{\"error\":", 9)) err = "error_event";
    if (!err && !memmem(h->in.data, h->in.len, "data: [DONE]", 12)) err = "no_done";
    if (!err && G.expect && r->events != G.expect) err = "delta_count";
    r->err = err;
    r->total = (now_ns() - h->t0) / 1000;
    if (r->events == 0) {           /* never got going: its ramp slot, and READY's count */
        (*starting)--;
        atomic_fetch_add(&G.failed, 1);
    }
    if (h->fd >= 0) close(h->fd);
    h->fd = -1;
    h->phase = HS_DONE;
    coai_buf_free(&h->in);
}

/* Bytes arrived on h: the head's status, content deltas (each "content":" of an SSE event,
 * as sse_cb counts them), the end (the terminating chunk). */
static void hold_feed(struct hs *h, struct rec *r, int *starting)
{
    int total;
    if (!h->head_done) {
        if (!memmem(h->in.data, h->in.len, "\r\n\r\n", 4)) return;
        h->head_done = 1;
        r->head = (now_ns() - h->t0) / 1000;
        if (h->in.len > 12 && !memcmp(h->in.data, "HTTP/1.1 ", 9))
            h->status = atoi((const char *)h->in.data + 9);
    }
    total = hold_count(&h->in, 0, "\"content\":\"");
    if (total > r->events) {
        if (r->events == 0) {
            r->ttfb = (now_ns() - h->t0) / 1000;
            (*starting)--;
            atomic_fetch_add(&G.ready, 1);
        }
        r->events = total;
    }
    if (h->in.len >= 5 && !memcmp(h->in.data + h->in.len - 5, "0\r\n\r\n", 5))
        hold_end(h, r, NULL, starting);
}

static int hold_mode(void)
{
    struct hs *hs = calloc((size_t)G.count, sizeof *hs);
    struct epoll_event *evs = calloc(1024, sizeof *evs);
    char head[256];
    int ep = epoll_create1(EPOLL_CLOEXEC), hn, next = 0, done = 0, starting = 0, i;
    int ready_said = 0;
    int64_t last_progress = now_ns();
    if (!hs || !evs || ep < 0) die("hold: out of memory");
    hn = snprintf(head, sizeof head, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                  G.port, G.body_len, G.body);
    if (hn <= 0 || (size_t)hn >= sizeof head) die("hold: request too long");
    for (i = 0; i < G.count; i++) {
        hs[i].fd = -1;
        R[i].head = R[i].ttfb = R[i].total = -1;
    }
    while (done < G.count) {
        int n, j;
        /* start streams while fewer than --ramp are between connect and first delta */
        while (next < G.count && (!ramp_k || starting < ramp_k)) {
            struct hs *h = &hs[next];
            struct sockaddr_in a;
            struct epoll_event ev;
            int one = 1;
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_port = htons((uint16_t)G.port);
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            starting++;
            h->t0 = now_ns();
            h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (h->fd >= 0) setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (h->fd < 0 || (connect(h->fd, (struct sockaddr *)&a, sizeof a) < 0
                              && errno != EINPROGRESS)) {
                hold_end(h, &R[next], "connect", &starting);
                done++;
                next++;
                continue;
            }
            h->phase = HS_CONNECTING;
            ev.events = EPOLLOUT | EPOLLIN;
            ev.data.u32 = (uint32_t)next;
            if (epoll_ctl(ep, EPOLL_CTL_ADD, h->fd, &ev) < 0) die("epoll_ctl");
            next++;
        }
        if (!ready_said && next == G.count
            && atomic_load(&G.ready) + atomic_load(&G.failed) >= G.count) {
            fprintf(stderr, "READY %d %d %.3f\n", atomic_load(&G.ready), atomic_load(&G.failed),
                    (double)(now_ns() - G.t_start) / 1e9);
            fflush(stderr);
            ready_said = 1;
        }
        if (done >= G.count) break;
        n = epoll_wait(ep, evs, 1024, 1000);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("epoll_wait");
        if (n > 0) last_progress = now_ns();
        else if (now_ns() - last_progress > (int64_t)LG_HOLD_IDLE_S * 1000000000) {
            for (i = 0; i < G.count; i++)
                if (hs[i].phase != HS_DONE && hs[i].phase != HS_WAIT) {
                    hold_end(&hs[i], &R[i], "timeout", &starting);
                    done++;
                }
            break;
        }
        for (j = 0; j < n; j++) {
            int idx = (int)evs[j].data.u32;
            struct hs *h = &hs[idx];
            struct rec *r = &R[idx];
            if (h->phase == HS_CONNECTING && (evs[j].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                ssize_t w = send(h->fd, head + h->sent, (size_t)hn - h->sent, MSG_NOSIGNAL);
                if (w < 0 && (errno == EAGAIN || errno == EINPROGRESS)) continue;
                if (w < 0) { hold_end(h, r, "connect", &starting); done++; continue; }
                h->sent += (size_t)w;
                if (h->sent == (size_t)hn) {
                    struct epoll_event ev;
                    h->phase = HS_READING;
                    ev.events = EPOLLIN;
                    ev.data.u32 = (uint32_t)idx;
                    epoll_ctl(ep, EPOLL_CTL_MOD, h->fd, &ev);
                }
                continue;
            }
            if (h->phase == HS_READING && (evs[j].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
                unsigned char b[16384];
                ssize_t k = recv(h->fd, b, sizeof b, 0);
                if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (k <= 0) {           /* the end: fine after [DONE] (Connection: close) */
                    hold_end(h, r, k == 0 && h->in.len
                             && memmem(h->in.data, h->in.len, "data: [DONE]", 12) ? NULL : "io",
                             &starting);
                    done++;
                    continue;
                }
                r->bytes += k;
                if (coai_buf_append(&h->in, b, (size_t)k) < 0 || h->in.len > (1u << 20)) {
                    hold_end(h, r, "too_big", &starting);
                    done++;
                    continue;
                }
                hold_feed(h, r, &starting);
                if (h->phase == HS_DONE) done++;
            }
        }
    }
    close(ep);
    free(evs);
    free(hs);
    return 0;
}

/* ---- trust anchors (PEM file -> BearSSL anchors) ---- */

struct ta_ctx {
    coai_buf der;
};

static void der_append(void *ctx, const void *p, size_t n)
{
    coai_buf_append(&((struct ta_ctx *)ctx)->der, p, n);
}

static void dn_append(void *ctx, const void *p, size_t n)
{
    coai_buf_append(ctx, p, n);
}

static void ta_add_der(const unsigned char *der, size_t n)
{
    br_x509_decoder_context dc;
    coai_buf dn = { 0 };
    br_x509_pkey *pk;
    br_x509_trust_anchor *ta;
    br_x509_decoder_init(&dc, dn_append, &dn);
    br_x509_decoder_push(&dc, der, n);
    pk = br_x509_decoder_get_pkey(&dc);
    if (!pk) die("bad CA certificate");
    G.tas = realloc(G.tas, (G.tas_n + 1) * sizeof *G.tas);
    if (!G.tas) die("out of memory");
    ta = &G.tas[G.tas_n++];
    memset(ta, 0, sizeof *ta);
    ta->dn.data = dn.data;
    ta->dn.len = dn.len;
    ta->flags = br_x509_decoder_isCA(&dc) ? BR_X509_TA_CA : 0;
    ta->pkey.key_type = pk->key_type;
    if (pk->key_type == BR_KEYTYPE_RSA) {
        ta->pkey.key.rsa.n = malloc(pk->key.rsa.nlen);
        ta->pkey.key.rsa.e = malloc(pk->key.rsa.elen);
        if (!ta->pkey.key.rsa.n || !ta->pkey.key.rsa.e) die("out of memory");
        memcpy(ta->pkey.key.rsa.n, pk->key.rsa.n, pk->key.rsa.nlen);
        memcpy(ta->pkey.key.rsa.e, pk->key.rsa.e, pk->key.rsa.elen);
        ta->pkey.key.rsa.nlen = pk->key.rsa.nlen;
        ta->pkey.key.rsa.elen = pk->key.rsa.elen;
    } else {
        ta->pkey.key.ec.curve = pk->key.ec.curve;
        ta->pkey.key.ec.q = malloc(pk->key.ec.qlen);
        if (!ta->pkey.key.ec.q) die("out of memory");
        memcpy(ta->pkey.key.ec.q, pk->key.ec.q, pk->key.ec.qlen);
        ta->pkey.key.ec.qlen = pk->key.ec.qlen;
    }
}

static void ta_load(const char *path)
{
    FILE *f = fopen(path, "rb");
    br_pem_decoder_context pc;
    struct ta_ctx tc;
    unsigned char buf[4096];
    size_t n;
    int in_cert = 0;
    if (!f) die("cannot open the CA file");
    memset(&tc, 0, sizeof tc);
    br_pem_decoder_init(&pc);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        const unsigned char *p = buf;
        while (n > 0) {
            size_t k = br_pem_decoder_push(&pc, p, n);
            p += k;
            n -= k;
            switch (br_pem_decoder_event(&pc)) {
            case BR_PEM_BEGIN_OBJ:
                in_cert = strcmp(br_pem_decoder_name(&pc), "CERTIFICATE") == 0;
                tc.der.len = 0;
                br_pem_decoder_setdest(&pc, in_cert ? der_append : NULL, &tc);
                break;
            case BR_PEM_END_OBJ:
                if (in_cert) ta_add_der(tc.der.data, tc.der.len);
                in_cert = 0;
                break;
            case BR_PEM_ERROR:
                die("bad PEM");
            default:
                break;
            }
        }
    }
    fclose(f);
    coai_buf_free(&tc.der);
    if (!G.tas_n) die("no certificate in the CA file");
}

/* ---- start-up timing ---- */

static long vmrss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) break;
    fclose(f);
    return kb;
}

static int startup_mode(void)
{
    int i;
    printf("{\"mode\":\"startup\",\"runs\":[");
    for (i = 0; i < G.count; i++) {
        char listen[32], req[128], b[256];
        int64_t t0, t_conn = -1, t_health = -1, deadline;
        struct sockaddr_in a;
        long rss = -1;
        pid_t pid;
        int fd = -1, st;
        snprintf(listen, sizeof listen, "127.0.0.1:%d", G.port);
        t0 = now_ns();
        pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            int nul = open("/dev/null", O_RDWR);
            if (nul >= 0) { dup2(nul, 1); dup2(nul, 2); }
            execl(G.bin, G.bin, "serve", "--listen", listen, (char *)NULL);
            _exit(127);
        }
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)G.port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        deadline = t0 + 10 * (int64_t)1000000000;
        while (now_ns() < deadline) {
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) die("socket");
            if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
            close(fd);
            fd = -1;
            if (waitpid(pid, &st, WNOHANG) == pid) die("the proxy exited at start-up");
            usleep(20);
        }
        if (fd >= 0) {
            int n = snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                             "Connection: close\r\n\r\n", G.port);
            t_conn = (now_ns() - t0) / 1000;
            if (send(fd, req, (size_t)n, MSG_NOSIGNAL) == n && recv(fd, b, sizeof b, 0) > 0)
                t_health = (now_ns() - t0) / 1000;
            close(fd);
            rss = vmrss_kb(pid);
        }
        kill(pid, SIGTERM);
        waitpid(pid, &st, 0);
        printf("%s{\"listen_us\":%lld,\"health_us\":%lld,\"rss_kb\":%ld}", i ? "," : "",
               (long long)t_conn, (long long)t_health, rss);
        usleep(20000);
    }
    printf("]}\n");
    return 0;
}

/* ---- main ---- */

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void usage(void)
{
    die("usage: loadgen proxy|direct|hold|startup --port P [--model M] [--conc C] "
        "[--count N] [--expect E] [--ca PEM --token JWT] [--bin PROXY]");
}

int main(int argc, char **argv)
{
    pthread_attr_t attr;
    pthread_t *th;
    struct worker *ws;
    int i;
    int64_t wall;
    if (argc < 2) usage();
    if (!strcmp(argv[1], "proxy")) G.mode = M_PROXY;
    else if (!strcmp(argv[1], "direct")) G.mode = M_DIRECT;
    else if (!strcmp(argv[1], "hold")) G.mode = M_HOLD;
    else if (!strcmp(argv[1], "startup")) G.mode = M_STARTUP;
    else usage();
    G.conc = 1;
    G.count = 1;
    G.model = "default";
    for (i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port")) G.port = atoi(v);
        else if (!strcmp(k, "--model")) G.model = v;
        else if (!strcmp(k, "--conc")) G.conc = atoi(v);
        else if (!strcmp(k, "--count")) G.count = atoi(v);
        else if (!strcmp(k, "--expect")) G.expect = atoi(v);
        else if (!strcmp(k, "--ca")) G.ca = v;
        else if (!strcmp(k, "--token")) G.token = v;
        else if (!strcmp(k, "--bin")) G.bin = v;
        else if (!strcmp(k, "--ramp")) ramp_k = atoi(v);
        else usage();
    }
    if (i != argc || G.port <= 0 || G.conc <= 0 || G.count <= 0) usage();
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    if (G.mode == M_STARTUP) {
        if (!G.bin) usage();
        return startup_mode();
    }
    if (G.mode == M_HOLD) G.count = G.conc;
    if (ramp_k > 0 && sem_init(&ramp_sem, 0, (unsigned)ramp_k) < 0) die("sem_init");
    if (G.conc > G.count) G.conc = G.count;
    G.body_len = (size_t)snprintf(G.body, sizeof G.body,
                                  "{\"model\":\"%s\",\"stream\":true,\"messages\":"
                                  "[{\"role\":\"user\",\"content\":\"hi\"}]}", G.model);
    if (G.body_len >= sizeof G.body) die("model name too long");
    if (G.mode == M_DIRECT) {
        /* The same run request the proxy builds for this body (minus its random ids). */
        coai_chat_request req;
        coai_run_params p;
        coai_error e;
        if (!G.ca || !G.token) usage();
        ta_load(G.ca);
        memset(&req, 0, sizeof req);
        memset(&p, 0, sizeof p);
        if (coai_chat_request_parse(&req, G.body, G.body_len, &e) < 0) die("request parse");
        coai_chat_request_params(&req, &p);
        p.model_id = coai_str_c(G.model);
        p.message_id = coai_str_c("3f1e9a3c-2b7d-4c4e-9a51-0d6a8f2b7c10");
        p.conversation_id = coai_str_c("9b2c7e41-5d3a-4f6b-8e0c-1a2b3c4d5e6f");
        p.workspace = coai_str_c("/tmp");
        p.time_zone = coai_str_c("UTC");
        if (coai_encode_run_request(&G.run_msg, &p) < 0) die("run request encode");
        coai_chat_request_free(&req);
    }
    R = calloc((size_t)G.count, sizeof *R);
    LAT = malloc(sizeof *LAT * LG_MAX_LAT);
    th = calloc((size_t)G.conc, sizeof *th);
    ws = calloc((size_t)G.conc, sizeof *ws);
    if (!R || !LAT || !th || !ws) die("out of memory");
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, G.mode == M_DIRECT ? 256 * 1024 : 128 * 1024);
    G.t_start = now_ns();
    if (G.mode == M_HOLD) {
        hold_mode();
        G.conc = 1;
        goto report;
    }
    for (i = 0; i < G.conc; i++) {
        ws[i].a = calloc(1, sizeof *ws[i].a);
        ws[i].b = G.mode == M_DIRECT ? calloc(1, sizeof *ws[i].b) : NULL;
        if (!ws[i].a || (G.mode == M_DIRECT && !ws[i].b)) die("out of memory");
        ws[i].a->fd = -1;
        if (ws[i].b) ws[i].b->fd = -1;
        ws[i].hold = G.mode == M_HOLD;
        if (pthread_create(&th[i], &attr, worker_main, &ws[i]) != 0) die("pthread_create");
    }
    if (G.mode == M_HOLD) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 300;
        pthread_mutex_lock(&hold_lock);
        while (atomic_load(&G.ready) + atomic_load(&G.failed) < G.count
               && pthread_cond_timedwait(&hold_cond, &hold_lock, &until) == 0) {}
        pthread_mutex_unlock(&hold_lock);
        fprintf(stderr, "READY %d %d %.3f\n", atomic_load(&G.ready), atomic_load(&G.failed),
                (double)(now_ns() - G.t_start) / 1e9);
        fflush(stderr);
    }
    for (i = 0; i < G.conc; i++) pthread_join(th[i], NULL);
report:
    wall = now_ns() - G.t_start;
    printf("{\"mode\":\"%s\",\"conc\":%d,\"count\":%d,\"wall_us\":%lld,\"streams\":[",
           argv[1], G.conc, G.count, (long long)(wall / 1000));
    for (i = 0; i < G.count; i++) {
        printf("%s[%lld,%lld,%lld,%d,%lld]", i ? "," : "", (long long)R[i].head,
               (long long)R[i].ttfb, (long long)R[i].total, R[i].events, (long long)R[i].bytes);
    }
    printf("],\"errors\":{");
    for (i = 0; i < G.count; i++) {       /* each distinct error kind with its count */
        int j, seen = 0, n = 0;
        if (!R[i].err) continue;
        for (j = 0; j < i && !seen; j++) seen = R[j].err && !strcmp(R[j].err, R[i].err);
        if (seen) continue;
        for (j = i; j < G.count; j++) n += R[j].err && !strcmp(R[j].err, R[i].err);
        printf("\"%s\":%d,", R[i].err, n);
    }
    printf("\"_\":0},\"lat_ns\":[");
    {
        long k, n = atomic_load(&LAT_N);
        if (n > LG_MAX_LAT) n = LG_MAX_LAT;
        for (k = 0; k < n; k++) printf("%s%lld", k ? "," : "", (long long)LAT[k]);
    }
    printf("]}\n");
    return 0;
}
