/* upstream.c - the bench's agent host in C (issue 32 item 1): never the bottleneck.
 *
 * Serves, on one TLS listener (ALPN h2 and http/1.1, the test certificates of tests/fake):
 *   HTTP/2   POST /agent.v1.AgentService/Run          Connect streaming (application/connect+proto)
 *   HTTP/1.1 POST /agent.v1.AgentService/RunSSE       Connect (connect+proto) or gRPC-web
 *            POST /aiserver.v1.BidiService/BidiAppend Connect unary (application/proto) or gRPC-web
 * One thread, epoll, OpenSSL non-blocking, libnghttp2 for HTTP/2. Bench only: the product stays
 * dependency-free. The unary calls (models, server config) stay with the Python fake: the proxy
 * is pointed here with CURSOR_OAI_AGENT_URL, which moves its runs only.
 *
 * What a run gets is chosen by the run request's model id "scenario:<name>", looked up among
 * the --scenario options:
 *   --scenario NAME=N,INTERVAL_US,STAMP,TEXT[,BATCH]  N text deltas "TEXT" (STAMP 1: each prefixed
 *        "@T<CLOCK_MONOTONIC ns>;" at its send time), one every INTERVAL_US (0: as fast as the
 *        connection takes them), then turn_ended and the protocol's end (Connect end-stream {}
 *        or a gRPC-web trailer grpc-status: 0); BATCH (1-64, default 1) deltas per write
 *   --scenario NAME=hold                       one delta "held", then nothing until POST
 *        /release, then " done", turn_ended, the end
 * Any other model: 20 deltas "s", unpaced. Every delta is one envelope in one DATA frame (one
 * HTTP chunk) in one TLS record in one write, as the live server sends them.
 * HTTP/2 answers' HEADERS go out when the request's HEADERS arrive (as the fake's).
 *
 * Control (plain HTTP on 127.0.0.1, the fake's shape): GET /state, POST /reset, POST /release,
 * POST /config {"runsse_close": true|false}, POST /shutdown. /state includes this process's
 * own CPU (getrusage) and a note of every protocol error seen (capped).
 * Usage: upstream --cert-dir DIR --info FILE [--scenario ...]... [--max-streams 100]
 *        [--ping-s 10] [--alpn h2,http/1.1]
 */
#define _GNU_SOURCE
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "bbuf.h"

#define RUN_PATH "/agent.v1.AgentService/Run"
#define RUNSSE_PATH "/agent.v1.AgentService/RunSSE"
#define APPEND_PATH "/aiserver.v1.BidiService/BidiAppend"
#define CT_CONNECT "application/connect+proto"
#define CT_PROTO "application/proto"
#define CT_GRPCWEB "application/grpc-web+proto"
#define OUT_SOFT (64 * 1024)        /* unpaced answers wait while a connection has this queued */
#define MAX_ERRORS 200

enum { K_LISTEN, K_CTL_LISTEN, K_TIMER, K_CONN, K_CTL };
enum { C_HS, C_H2, C_H1 };
enum { P_CONNECT, P_GRPCWEB };
enum { R_WAIT, R_RUN, R_HOLD, R_DONE };

struct scen {
    char name[64], text[64];
    int n, stamp, hold, batch;
    int64_t interval_ns;
};

struct conn;

struct run {
    struct conn *c;                 /* NULL: an h1 run whose append came before its RunSSE */
    int32_t sid;                    /* HTTP/2 stream id, 0 for HTTP/1.1 */
    int state, profile, sent, ok_path, ok_ct, has_auth;
    char rid[48];
    const struct scen *sc;
    int64_t due;                    /* paced: next delta (CLOCK_MONOTONIC ns) */
    int heap_i;                     /* index in the timer heap, -1 when not in it */
    int unpaced;                    /* in the unpaced list */
    struct bbuf pend;                /* HTTP/2: answer bytes nghttp2 has not taken yet */
    int eof;                        /* HTTP/2: the answer's last byte is in pend */
    struct bbuf body;                /* HTTP/2: request body bytes not yet split */
    struct run *prev, *next;        /* every run */
    struct run *hnext;              /* request id hash chain (HTTP/1.1) */
    struct run *unext, *uprev;      /* unpaced list */
};

struct conn {
    int kind, fd, state, closing, want_out, close_after;
    SSL *ssl;
    nghttp2_session *h2;
    struct bbuf out, in;
    struct run *run;                /* HTTP/1.1: the RunSSE open on this connection */
    int64_t ping_at;                /* HTTP/2: when the PING in flight was sent, 0 none */
    struct conn *prev, *next;
};

static struct {
    int ep, tfd, max_streams, runsse_close, stop;
    double ping_s;
    int64_t next_ping, armed;
    SSL_CTX *ctx;
    struct scen sc[64];
    int nsc;
    struct scen dflt;
    struct run *runs;               /* every run */
    struct run *unpaced;
    struct run *grave;              /* runs to free at the end of the loop's turn */
    struct run **heap;
    int heap_n, heap_cap;
    struct run *hash[16384];
    struct conn *conns;
    int nconns;
    long active, max_active;
    char *errors[MAX_ERRORS];
    int nerr;
    struct { long tls_handshakes, tls_handshake_failures, requests, runs, messages, deltas,
             pings_sent, ping_acks, client_resets, released, appends, http1_connections,
             h2_connections; } c;
    double ping_ack_max_s;
    const unsigned char *alpn;
    unsigned alpn_len;
} G;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *m)
{
    fprintf(stderr, "upstream: %s\n", m);
    exit(2);
}

static void error_note(const char *fmt, ...)
{
    char b[256];
    va_list ap;
    size_t i;
    if (G.nerr >= MAX_ERRORS) return;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    for (i = 0; b[i]; i++)          /* JSON-safe without escaping */
        if (b[i] == '"' || b[i] == '\\' || (unsigned char)b[i] < 0x20) b[i] = '\'';
    G.errors[G.nerr++] = strdup(b);
}

/* ---- buffers ---- */


static void buf_free(struct bbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- protobuf: the few fields read and written here ---- */

static size_t put_varint(unsigned char *o, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) { o[n++] = (unsigned char)(v | 0x80); v >>= 7; }
    o[n++] = (unsigned char)v;
    return n;
}

static int get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
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

/* The last field fn of a message: a length-delimited one (out, on) or a varint (vv).
 * 1 found, 0 absent, -1 malformed. */
static int pb_field(const unsigned char *p, size_t n, unsigned fn, const unsigned char **out,
                    size_t *on, uint64_t *vv)
{
    const unsigned char *end = p + n;
    int found = 0;
    while (p < end) {
        uint64_t key, v;
        if (get_varint(&p, end, &key) < 0) return -1;
        switch (key & 7) {
        case 0:
            if (get_varint(&p, end, &v) < 0) return -1;
            if ((key >> 3) == fn && vv) { *vv = v; found = 1; }
            break;
        case 1: if (end - p < 8) return -1; p += 8; break;
        case 5: if (end - p < 4) return -1; p += 4; break;
        case 2:
            if (get_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p)) return -1;
            if ((key >> 3) == fn && out) { *out = p; *on = (size_t)v; found = 1; }
            p += v;
            break;
        default: return -1;
        }
    }
    return found;
}

/* The scenario a serialized AgentClientMessage{run_request{model_details{model_id}}} asks. */
static const struct scen *scen_of(const unsigned char *m, size_t n)
{
    const unsigned char *rr, *md, *id;
    size_t rn, mn, idn;
    int i;
    if (pb_field(m, n, 1, &rr, &rn, NULL) != 1 || pb_field(rr, rn, 3, &md, &mn, NULL) != 1
        || pb_field(md, mn, 1, &id, &idn, NULL) != 1)
        return NULL;
    if (idn > 9 && !memcmp(id, "scenario:", 9))
        for (i = 0; i < G.nsc; i++)
            if (strlen(G.sc[i].name) == idn - 9 && !memcmp(G.sc[i].name, id + 9, idn - 9))
                return &G.sc[i];
    return &G.dflt;
}

/* envelope(flags, AgentServerMessage{1: InteractionUpdate{1: TextDelta{1: text}}}) */
static size_t env_text(unsigned char *o, const char *t, size_t tn)
{
    size_t k;
    unsigned char l1[10], l2[10], l3[10];
    size_t n1 = put_varint(l1, tn);
    size_t s1 = 1 + n1 + tn, n2 = put_varint(l2, s1), s2 = 1 + n2 + s1, n3 = put_varint(l3, s2);
    size_t total = 1 + n3 + s2;
    o[0] = 0;
    o[1] = (unsigned char)(total >> 24);
    o[2] = (unsigned char)(total >> 16);
    o[3] = (unsigned char)(total >> 8);
    o[4] = (unsigned char)total;
    k = 5;
    o[k++] = 0x0a; memcpy(o + k, l3, n3); k += n3;
    o[k++] = 0x0a; memcpy(o + k, l2, n2); k += n2;
    o[k++] = 0x0a; memcpy(o + k, l1, n1); k += n1;
    memcpy(o + k, t, tn);
    return k + tn;
}

static size_t env_delta(unsigned char *o, const struct scen *sc)
{
    char t[128];
    int n;
    if (sc->stamp)
        n = snprintf(t, sizeof t, "@T%lld;%s", (long long)now_ns(), sc->text);
    else
        n = snprintf(t, sizeof t, "%s", sc->text);
    return env_text(o, t, (size_t)n);
}

/* turn_ended (0a 02 72 00) and the end of the answer in the run's profile */
static size_t env_end(unsigned char *o, int profile)
{
    static const unsigned char te[] = { 0, 0, 0, 0, 4, 0x0a, 0x02, 0x72, 0x00 };
    static const unsigned char cend[] = { 2, 0, 0, 0, 2, '{', '}' };
    static const unsigned char gend[] = { 0x80, 0, 0, 0, 16, 'g', 'r', 'p', 'c', '-', 's', 't',
                                          'a', 't', 'u', 's', ':', ' ', '0', '\r', '\n' };
    memcpy(o, te, sizeof te);
    if (profile == P_CONNECT) { memcpy(o + sizeof te, cend, sizeof cend); return sizeof te + sizeof cend; }
    memcpy(o + sizeof te, gend, sizeof gend);
    return sizeof te + sizeof gend;
}

/* ---- connections ---- */

static void ep_mod(struct conn *c)
{
    struct epoll_event ev;
    ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
    ev.data.ptr = c;
    epoll_ctl(G.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_close(struct conn *c);

/* Write what is queued. 0 all written or waiting for EPOLLOUT, -1 the connection failed. */
static int conn_flush(struct conn *c)
{
    while (bbuf_avail(&c->out)) {
        int n = SSL_write(c->ssl, c->out.p + c->out.off, (int)bbuf_avail(&c->out));
        if (n > 0) { c->out.off += (size_t)n; continue; }
        n = SSL_get_error(c->ssl, n);
        if (n == SSL_ERROR_WANT_WRITE || n == SSL_ERROR_WANT_READ) {
            if (!c->want_out) { c->want_out = 1; ep_mod(c); }
            return 0;
        }
        error_note("%s write failed: ssl error %d errno %d", c->state == C_H2 ? "HTTP/2" : "HTTP/1.1",
                   n, errno);
        c->closing = 1;
        return -1;
    }
    c->out.off = c->out.len = 0;
    if (c->want_out) { c->want_out = 0; ep_mod(c); }
    return 0;
}

/* ---- runs: the timer heap (paced), the unpaced list ---- */

static void heap_swap(int a, int b)
{
    struct run *t = G.heap[a];
    G.heap[a] = G.heap[b];
    G.heap[b] = t;
    G.heap[a]->heap_i = a;
    G.heap[b]->heap_i = b;
}

static void heap_up(int i)
{
    while (i > 0 && G.heap[(i - 1) / 2]->due > G.heap[i]->due) { heap_swap(i, (i - 1) / 2); i = (i - 1) / 2; }
}

static void heap_down(int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < G.heap_n && G.heap[l]->due < G.heap[m]->due) m = l;
        if (r < G.heap_n && G.heap[r]->due < G.heap[m]->due) m = r;
        if (m == i) return;
        heap_swap(i, m);
        i = m;
    }
}

static void heap_push(struct run *r)
{
    if (G.heap_n == G.heap_cap) {
        G.heap_cap = G.heap_cap ? 2 * G.heap_cap : 1024;
        G.heap = realloc(G.heap, sizeof *G.heap * (size_t)G.heap_cap);
        if (!G.heap) die("out of memory");
    }
    G.heap[G.heap_n] = r;
    r->heap_i = G.heap_n++;
    heap_up(r->heap_i);
}

static void heap_del(struct run *r)
{
    int i = r->heap_i;
    if (i < 0) return;
    r->heap_i = -1;
    if (i == --G.heap_n) return;
    G.heap[i] = G.heap[G.heap_n];
    G.heap[i]->heap_i = i;
    heap_down(i);
    heap_up(i);
}

static void unpaced_add(struct run *r)
{
    if (r->unpaced) return;
    r->unpaced = 1;
    r->uprev = NULL;
    r->unext = G.unpaced;
    if (G.unpaced) G.unpaced->uprev = r;
    G.unpaced = r;
}

static void unpaced_del(struct run *r)
{
    if (!r->unpaced) return;
    r->unpaced = 0;
    if (r->uprev) r->uprev->unext = r->unext; else G.unpaced = r->unext;
    if (r->unext) r->unext->uprev = r->uprev;
}

static unsigned rid_hash(const char *s)
{
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % (sizeof G.hash / sizeof G.hash[0]);
}

static struct run *rid_find(const char *rid)
{
    struct run *r;
    for (r = G.hash[rid_hash(rid)]; r; r = r->hnext)
        if (!strcmp(r->rid, rid)) return r;
    return NULL;
}

static void rid_del(struct run *r)
{
    struct run **pp;
    if (!r->rid[0]) return;
    for (pp = &G.hash[rid_hash(r->rid)]; *pp; pp = &(*pp)->hnext)
        if (*pp == r) { *pp = r->hnext; break; }
    r->rid[0] = 0;
}

static struct run *run_new(struct conn *c, int32_t sid)
{
    struct run *r = calloc(1, sizeof *r);
    if (!r) die("out of memory");
    r->c = c;
    r->sid = sid;
    r->heap_i = -1;
    r->next = G.runs;
    if (G.runs) G.runs->prev = r;
    G.runs = r;
    return r;
}

static void run_counted(void)
{
    G.c.runs++;
    if (++G.active > G.max_active) G.max_active = G.active;
}

static void run_free(struct run *r, int counted)
{
    heap_del(r);
    unpaced_del(r);
    rid_del(r);
    if (r->prev) r->prev->next = r->next; else G.runs = r->next;
    if (r->next) r->next->prev = r->prev;
    if (counted) G.active--;
    buf_free(&r->pend);
    buf_free(&r->body);
    r->state = R_DONE;
    r->c = NULL;
    r->hnext = G.grave;             /* freed after this turn of the loop: callbacks may still */
    G.grave = r;                    /* hold a pointer to it (nghttp2 closes streams in send) */
}

/* Bytes of an answer onto its connection (HTTP/1.1: one chunk; HTTP/2: the stream's pending
 * bytes, then nghttp2 makes the DATA frame), then written out. */
static void run_emit(struct run *r, const unsigned char *p, size_t n, int last)
{
    struct conn *c = r->c;
    if (r->sid) {
        bbuf_add(&r->pend, p, n);
        if (last) r->eof = 1;
        nghttp2_session_resume_data(c->h2, r->sid);
        if (nghttp2_session_send(c->h2) != 0) { error_note("nghttp2_session_send failed"); c->closing = 1; }
    } else {
        char h[16];
        int hn = snprintf(h, sizeof h, "%zx\r\n", n);
        bbuf_add(&c->out, h, (size_t)hn);
        bbuf_add(&c->out, p, n);
        bbuf_add(&c->out, "\r\n", 2);
        if (last) bbuf_add(&c->out, "0\r\n\r\n", 5);
    }
    conn_flush(c);
}

static void run_finish_h1(struct run *r)
{
    struct conn *c = r->c;
    c->run = NULL;
    r->state = R_DONE;
    run_free(r, 1);
    if (c->close_after) {
        conn_flush(c);
        SSL_shutdown(c->ssl);
        c->closing = 1;
    }
}

/* The next thing a running answer sends: a delta, or the end. */
static void run_step(struct run *r)
{
    unsigned char o[64 * 160 + 64];
    size_t n = 0;
    int k;
    const struct scen *sc = r->sc;
    if (r->sent < sc->n) {
        for (k = 0; k < sc->batch && r->sent < sc->n; k++) {   /* BATCH deltas per write */
            n += env_delta(o + n, sc);
            r->sent++;
            G.c.deltas++;
        }
        if (r->sent < sc->n || sc->hold) {
            run_emit(r, o, n, 0);
            if (sc->hold) { r->state = R_HOLD; return; }
            if (sc->interval_ns) { r->due = now_ns() + sc->interval_ns; heap_push(r); }
            else unpaced_add(r);
            return;
        }
        n += env_end(o + n, r->profile);
    } else {
        n = env_end(o, r->profile);
    }
    r->state = R_DONE;
    unpaced_del(r);
    run_emit(r, o, n, 1);           /* HTTP/2: may close the stream and so free r */
    if (!r->sid && r->c) run_finish_h1(r);
}

/* The run request is in: start the answer. */
static void run_start(struct run *r, const struct scen *sc)
{
    r->sc = sc;
    r->state = R_RUN;
    run_step(r);
}

static void run_release(struct run *r)
{
    unsigned char o[256];
    size_t n;
    n = env_text(o, " done", 5);
    n += env_end(o + n, r->profile);
    r->state = R_DONE;
    G.c.released++;
    run_emit(r, o, n, 1);
    if (!r->sid && r->c) run_finish_h1(r);
}

/* ---- HTTP/2 (nghttp2 server session) ---- */

static ssize_t h2_send_cb(nghttp2_session *s, const uint8_t *d, size_t n, int fl, void *u)
{
    struct conn *c = u;
    (void)s; (void)fl;
    bbuf_add(&c->out, d, n);
    return (ssize_t)n;
}

static ssize_t h2_read_cb(nghttp2_session *s, int32_t sid, uint8_t *b, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *u)
{
    struct run *r = src->ptr;
    size_t n = bbuf_avail(&r->pend);
    (void)s; (void)sid; (void)u;
    if (n == 0) {
        if (r->eof) { *flags |= NGHTTP2_DATA_FLAG_EOF; return 0; }
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > len) n = len;
    memcpy(b, r->pend.p + r->pend.off, n);
    r->pend.off += n;
    if (r->eof && !bbuf_avail(&r->pend)) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int h2_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *u)
{
    struct run *r;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    r = run_new(u, f->hd.stream_id);
    nghttp2_session_set_stream_user_data(s, f->hd.stream_id, r);
    return 0;
}

static int h2_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *val, size_t vl, uint8_t fl, void *u)
{
    struct run *r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    (void)fl; (void)u;
    if (!r) return 0;
    if (nl == 5 && !memcmp(name, ":path", 5))
        r->ok_path = vl == strlen(RUN_PATH) && !memcmp(val, RUN_PATH, vl);
    else if (nl == 12 && !memcmp(name, "content-type", 12))
        r->ok_ct = vl == strlen(CT_CONNECT) && !memcmp(val, CT_CONNECT, vl);
    else if (nl == 13 && !memcmp(name, "authorization", 13))
        r->has_auth = vl > 7 && !memcmp(val, "Bearer ", 7);
    return 0;
}

static int h2_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *u)
{
    struct conn *c = u;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        error_note("GOAWAY from the client: error code %u, last stream %d",
                   f->goaway.error_code, f->goaway.last_stream_id);
    } else if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK) && c->ping_at) {
        double dt = (double)(now_ns() - c->ping_at) / 1e9;
        G.c.ping_acks++;
        if (dt > G.ping_ack_max_s) G.ping_ack_max_s = dt;
        c->ping_at = 0;
    } else if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        struct run *r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        nghttp2_data_provider dp;
        nghttp2_nv hd[2] = {
            { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
            { (uint8_t *)"content-type", (uint8_t *)CT_CONNECT, 12, sizeof CT_CONNECT - 1,
              NGHTTP2_NV_FLAG_NONE } };
        if (!r) return 0;
        G.c.requests++;
        if (!r->ok_path || !r->ok_ct || !r->has_auth) {
            nghttp2_nv e[1] = { { (uint8_t *)":status", (uint8_t *)"415", 7, 3, 0 } };
            error_note("HTTP/2 request refused: path ok %d, content-type ok %d, bearer %d",
                       r->ok_path, r->ok_ct, r->has_auth);
            nghttp2_submit_response(s, f->hd.stream_id, e, 1, NULL);
            r->state = R_DONE;
            return 0;
        }
        r->profile = P_CONNECT;
        run_counted();
        r->state = R_WAIT;
        r->has_auth = 2;            /* counted: freed with G.active-- */
        dp.source.ptr = r;
        dp.read_callback = h2_read_cb;
        nghttp2_submit_response(s, f->hd.stream_id, hd, 2, &dp);
    }
    return 0;
}

static int h2_data(nghttp2_session *s, uint8_t fl, int32_t sid, const uint8_t *d, size_t n,
                   void *u)
{
    struct run *r = nghttp2_session_get_stream_user_data(s, sid);
    (void)fl; (void)u;
    if (!r || r->has_auth != 2) return 0;
    bbuf_add(&r->body, d, n);
    while (bbuf_avail(&r->body) >= 5) {
        const unsigned char *p = r->body.p + r->body.off;
        size_t ln = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (bbuf_avail(&r->body) < 5 + ln) break;
        if (p[0] & 3) error_note("a client message with flags 0x%02x on Run", p[0]);
        G.c.messages++;
        if (r->state == R_WAIT) {
            const struct scen *sc = scen_of(p + 5, ln);
            r->body.off += 5 + ln;
            if (!sc) { error_note("the first message on Run is not a run request"); sc = &G.dflt; }
            run_start(r, sc);
            continue;
        }
        r->body.off += 5 + ln;
    }
    return 0;
}

static int h2_stream_close(nghttp2_session *s, int32_t sid, uint32_t code, void *u)
{
    struct run *r = nghttp2_session_get_stream_user_data(s, sid);
    (void)code; (void)u;
    if (!r) return 0;
    nghttp2_session_set_stream_user_data(s, sid, NULL);
    if (r->state != R_DONE) G.c.client_resets++;
    run_free(r, r->has_auth == 2);
    return 0;
}

static nghttp2_session_callbacks *H2CB;

static void h2_setup(struct conn *c)
{
    nghttp2_settings_entry iv[2] = {
        { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)G.max_streams },
        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 } };
    if (!H2CB) {
        nghttp2_session_callbacks_new(&H2CB);
        nghttp2_session_callbacks_set_send_callback(H2CB, h2_send_cb);
        nghttp2_session_callbacks_set_on_begin_headers_callback(H2CB, h2_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(H2CB, h2_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(H2CB, h2_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(H2CB, h2_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(H2CB, h2_stream_close);
    }
    nghttp2_session_server_new(&c->h2, H2CB, c);
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    nghttp2_session_send(c->h2);
    conn_flush(c);
}

/* ---- HTTP/1.1 (RunSSE + BidiAppend) ---- */

static const char *hdr_val(const char *head, size_t hl, const char *name, size_t *vl)
{
    size_t nl = strlen(name);
    const char *p = head, *end = head + hl;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        if ((size_t)(eol - p) > nl && !strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t')) v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ')) ve--;
            *vl = (size_t)(ve - v);
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

static int hdr_is(const char *head, size_t hl, const char *name, const char *want)
{
    size_t vl;
    const char *v = hdr_val(head, hl, name, &vl);
    return v && vl == strlen(want) && !strncasecmp(v, want, vl);
}

static void h1_fail(struct conn *c, const char *why)
{
    static const char r[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    error_note("%s", why);
    bbuf_add(&c->out, r, sizeof r - 1);
    conn_flush(c);
    c->closing = 1;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static void h1_request(struct conn *c, const char *head, size_t hl, const unsigned char *body,
                       size_t bl)
{
    size_t vl, pl;
    const char *v, *sp = memchr(head, ' ', hl), *path, *pe;
    char rid[48];
    int prof;
    struct run *r;
    G.c.requests++;
    if (!sp || strncmp(head, "POST ", 5)) { h1_fail(c, "HTTP/1.1: not a POST"); return; }
    path = sp + 1;
    pe = memchr(path, ' ', hl - (size_t)(path - head));
    if (!pe) { h1_fail(c, "HTTP/1.1: bad request line"); return; }
    pl = (size_t)(pe - path);
    v = hdr_val(head, hl, "x-request-id", &vl);
    if (!v || vl == 0 || vl >= sizeof rid) { h1_fail(c, "HTTP/1.1: no x-request-id"); return; }
    memcpy(rid, v, vl);
    rid[vl] = 0;
    if (!hdr_val(head, hl, "authorization", &vl)) { h1_fail(c, "HTTP/1.1: no authorization"); return; }
    if (pl == strlen(RUNSSE_PATH) && !memcmp(path, RUNSSE_PATH, pl)) {
        char h[160];
        int hn;
        if (hdr_is(head, hl, "content-type", CT_CONNECT)) prof = P_CONNECT;
        else if (hdr_is(head, hl, "content-type", CT_GRPCWEB)) prof = P_GRPCWEB;
        else { h1_fail(c, "RunSSE: content type"); return; }
        if (c->run) { h1_fail(c, "RunSSE on a connection whose RunSSE is open"); return; }
        if (bl < 5 || body[0] != 0) { h1_fail(c, "RunSSE: body not one envelope"); return; }
        r = rid_find(rid);
        if (r && r->c) { h1_fail(c, "a second RunSSE for one request id"); return; }
        if (!r) {
            r = run_new(c, 0);
            snprintf(r->rid, sizeof r->rid, "%s", rid);
            r->hnext = G.hash[rid_hash(rid)];
            G.hash[rid_hash(rid)] = r;
        }
        r->c = c;
        r->profile = prof;
        c->run = r;
        run_counted();
        c->close_after = G.runsse_close;
        hn = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: "
                      "chunked\r\n%s\r\n", prof == P_CONNECT ? CT_CONNECT : CT_GRPCWEB,
                      c->close_after ? "Connection: close\r\n" : "");
        bbuf_add(&c->out, h, (size_t)hn);
        conn_flush(c);
        if (r->sc) run_start(r, r->sc);      /* its run request came first */
        return;
    }
    if (pl == strlen(APPEND_PATH) && !memcmp(path, APPEND_PATH, pl)) {
        const unsigned char *d, *m = body;
        size_t dn, mn = bl;
        uint64_t seq = (uint64_t)-1;
        static const char rc[] = "HTTP/1.1 200 OK\r\nContent-Type: " CT_PROTO
                                 "\r\nContent-Length: 0\r\n\r\n";
        static const char rg[] = "HTTP/1.1 200 OK\r\nContent-Type: " CT_GRPCWEB
                                 "\r\nContent-Length: 26\r\n\r\n\0\0\0\0\0\x80\0\0\0\x10"
                                 "grpc-status: 0\r\n";
        if (hdr_is(head, hl, "content-type", CT_GRPCWEB)) {
            prof = P_GRPCWEB;
            if (bl < 5 || body[0] != 0) { h1_fail(c, "BidiAppend: body not one envelope"); return; }
            m = body + 5;
            mn = bl - 5;
        } else if (hdr_is(head, hl, "content-type", CT_PROTO)) {
            prof = P_CONNECT;
        } else { h1_fail(c, "BidiAppend: content type"); return; }
        if (pb_field(m, mn, 3, NULL, NULL, &seq) < 0 || pb_field(m, mn, 1, &d, &dn, NULL) != 1) {
            h1_fail(c, "BidiAppend: body");
            return;
        }
        G.c.appends++;
        G.c.messages++;
        if (prof == P_CONNECT) bbuf_add(&c->out, rc, sizeof rc - 1);
        else bbuf_add(&c->out, rg, sizeof rg - 1);
        conn_flush(c);
        if (seq == 0) {
            unsigned char *bin = malloc(dn / 2 + 1);
            size_t i;
            const struct scen *sc;
            if (!bin) die("out of memory");
            for (i = 0; i + 1 < dn; i += 2) {
                int a = hexval(d[i]), b = hexval(d[i + 1]);
                if (a < 0 || b < 0) break;
                bin[i / 2] = (unsigned char)(a << 4 | b);
            }
            sc = i + 1 >= dn ? scen_of(bin, dn / 2) : NULL;
            free(bin);
            if (!sc) { error_note("BidiAppend seqno 0 is not a run request"); sc = &G.dflt; }
            r = rid_find(rid);
            if (!r) {                   /* before its RunSSE: kept until it comes */
                r = run_new(NULL, 0);
                snprintf(r->rid, sizeof r->rid, "%s", rid);
                r->hnext = G.hash[rid_hash(rid)];
                G.hash[rid_hash(rid)] = r;
                r->sc = sc;
                return;
            }
            if (r->state == R_WAIT && r->c) run_start(r, sc);
        }
        return;
    }
    h1_fail(c, "HTTP/1.1: unknown path");
}

static void h1_read(struct conn *c)
{
    for (;;) {
        const char *p = (const char *)c->in.p + c->in.off, *e;
        size_t avail = bbuf_avail(&c->in), hl, vl, bl = 0;
        const char *v;
        if (!avail) { c->in.off = c->in.len = 0; return; }
        e = memmem(p, avail, "\r\n\r\n", 4);
        if (!e) {
            if (avail > 65536) h1_fail(c, "request head over 64 KiB");
            return;
        }
        hl = (size_t)(e - p) + 4;
        v = hdr_val(p, hl, "content-length", &vl);
        if (v) bl = (size_t)strtoul(v, NULL, 10);
        if (avail < hl + bl) return;
        c->in.off += hl + bl;
        h1_request(c, p, hl, (const unsigned char *)p + hl, bl);
        if (c->closing) return;
    }
}

/* ---- connection events ---- */

static void conn_close(struct conn *c)
{
    if (c->h2) {
        struct run *r, *nx;
        for (r = G.runs; r; r = nx) {   /* nghttp2_session_del calls no stream callbacks */
            nx = r->next;
            if (r->c == c && r->sid) {
                if (r->state != R_DONE) G.c.client_resets++;
                run_free(r, r->has_auth == 2);
            }
        }
        nghttp2_session_del(c->h2);
        c->h2 = NULL;
    }
    if (c->run) {
        if (c->run->state != R_DONE) G.c.client_resets++;
        run_free(c->run, 1);
        c->run = NULL;
    }
    epoll_ctl(G.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    SSL_free(c->ssl);
    buf_free(&c->out);
    buf_free(&c->in);
    if (c->prev) c->prev->next = c->next; else G.conns = c->next;
    if (c->next) c->next->prev = c->prev;
    G.nconns--;
    free(c);
}

static void conn_event(struct conn *c, uint32_t ev)
{
    unsigned char b[16384];
    if (c->state == C_HS) {
        int r = SSL_accept(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
            G.c.tls_handshake_failures++;
            c->closing = 1;
            return;
        }
        {
            const unsigned char *a;
            unsigned al;
            G.c.tls_handshakes++;
            SSL_get0_alpn_selected(c->ssl, &a, &al);
            if (al == 2 && !memcmp(a, "h2", 2)) {
                c->state = C_H2;
                G.c.h2_connections++;
                h2_setup(c);
            } else {
                c->state = C_H1;
                G.c.http1_connections++;
            }
        }
    }
    if (ev & EPOLLOUT) conn_flush(c);
    for (;;) {
        int n = SSL_read(c->ssl, b, sizeof b);
        if (n <= 0) {
            int e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
            if (e != SSL_ERROR_ZERO_RETURN && !(e == SSL_ERROR_SYSCALL && errno == 0))
                error_note("%s read failed: ssl error %d errno %d: %s (run %s)",
                           c->state == C_H2 ? "HTTP/2" : "HTTP/1.1", e, errno,
                           ERR_error_string(ERR_get_error(), NULL), c->run ? "open" : "none");
            c->closing = 1;
            return;
        }
        if (c->state == C_H2) {
            ssize_t rv = nghttp2_session_mem_recv(c->h2, b, (size_t)n);
            if (rv < 0) {
                error_note("HTTP/2 from the client: %s", nghttp2_strerror((int)rv));
                c->closing = 1;
                return;
            }
        } else {
            bbuf_add(&c->in, b, (size_t)n);
        }
    }
    if (c->state == C_H2) {
        if (nghttp2_session_send(c->h2) != 0) { error_note("nghttp2_session_send failed"); c->closing = 1; }
        conn_flush(c);
        if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) {
            error_note("HTTP/2 session over (GOAWAY)");
            c->closing = 1;
        }
    } else {
        h1_read(c);
    }
}

/* ---- control (plain HTTP) ---- */

struct ctl { int kind, fd; struct bbuf in; };

static void ctl_reply(int fd, int code, const char *body)
{
    char h[256];
    int hn = snprintf(h, sizeof h, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", code, strlen(body));
    if (write(fd, h, (size_t)hn) < 0 || write(fd, body, strlen(body)) < 0) {}
}

static void state_json(char **out)
{
    struct rusage ru;
    size_t cap = 8192 + (size_t)G.nerr * 300, n = 0;
    char *s = malloc(cap);
    int i;
    if (!s) die("out of memory");
    getrusage(RUSAGE_SELF, &ru);
    n += (size_t)snprintf(s + n, cap - n,
        "{\"active_streams\":%ld,\"max_active_streams\":%ld,\"connections\":%d,"
        "\"ping_ack_max_s\":%.3f,\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"pid\":%d,"
        "\"counters\":{\"tls_handshakes\":%ld,\"tls_handshake_failures\":%ld,\"requests\":%ld,"
        "\"runs\":%ld,\"messages\":%ld,\"deltas\":%ld,\"pings_sent\":%ld,\"ping_acks\":%ld,"
        "\"client_resets\":%ld,\"released\":%ld,\"appends\":%ld,\"http1_connections\":%ld,"
        "\"h2_connections\":%ld},\"errors\":[",
        G.active, G.max_active, G.nconns, G.ping_ack_max_s,
        ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
        ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, (int)getpid(),
        G.c.tls_handshakes, G.c.tls_handshake_failures, G.c.requests, G.c.runs, G.c.messages,
        G.c.deltas, G.c.pings_sent, G.c.ping_acks, G.c.client_resets, G.c.released, G.c.appends,
        G.c.http1_connections, G.c.h2_connections);
    for (i = 0; i < G.nerr; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"%s\"", i ? "," : "", G.errors[i]);
    snprintf(s + n, cap - n, "]}");
    *out = s;
}

static void ctl_request(struct ctl *k, const char *head, const char *body, size_t bl)
{
    char *s = NULL;
    if (!strncmp(head, "GET /state ", 11)) {
        state_json(&s);
        ctl_reply(k->fd, 200, s);
        free(s);
    } else if (!strncmp(head, "POST /reset ", 12)) {
        int i;
        for (i = 0; i < G.nerr; i++) free(G.errors[i]);
        G.nerr = 0;
        memset(&G.c, 0, sizeof G.c);
        G.max_active = G.active;
        G.ping_ack_max_s = 0;
        ctl_reply(k->fd, 200, "{}");
    } else if (!strncmp(head, "POST /release ", 14)) {
        struct run *r, *nx;
        char b[64];
        long n0 = G.c.released;
        for (r = G.runs; r; r = nx) {
            nx = r->next;
            if (r->state == R_HOLD && r->c) run_release(r);
        }
        snprintf(b, sizeof b, "{\"released\":%ld}", G.c.released - n0);
        ctl_reply(k->fd, 200, b);
    } else if (!strncmp(head, "POST /config ", 13)) {
        const char *p = memmem(body, bl, "runsse_close", 12);
        if (p) {
            const char *q = p + 12;
            while (q < body + bl && (*q == '"' || *q == ':' || *q == ' ')) q++;
            G.runsse_close = q < body + bl && *q == 't';
        }
        ctl_reply(k->fd, 200, "{}");
    } else if (!strncmp(head, "POST /shutdown ", 15)) {
        G.stop = 1;
        ctl_reply(k->fd, 200, "{}");
    } else {
        ctl_reply(k->fd, 404, "{\"error\":\"no such control path\"}");
    }
}

static void ctl_event(struct ctl *k)
{
    char b[4096];
    for (;;) {
        ssize_t n = read(k->fd, b, sizeof b);
        if (n > 0) { bbuf_add(&k->in, b, (size_t)n); continue; }
        if (n < 0 && errno == EAGAIN) break;
        goto done;
    }
    {
        const char *p = (const char *)k->in.p, *e;
        size_t hl, bl = 0, vl;
        const char *v;
        if (!k->in.len) return;
        e = memmem(p, k->in.len, "\r\n\r\n", 4);
        if (!e) return;
        hl = (size_t)(e - p) + 4;
        v = hdr_val(p, hl, "content-length", &vl);
        if (v) bl = (size_t)strtoul(v, NULL, 10);
        if (k->in.len < hl + bl) return;
        bbuf_add(&k->in, "", 1);     /* NUL after the body */
        {
            int fl = fcntl(k->fd, F_GETFL);
            fcntl(k->fd, F_SETFL, fl & ~O_NONBLOCK);
        }
        ctl_request(k, (const char *)k->in.p, (const char *)k->in.p + hl, bl);
    }
done:
    epoll_ctl(G.ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    buf_free(&k->in);
    free(k);
}

/* ---- timers: paced deltas and PINGs ---- */

static void timer_arm(void)
{
    int64_t t = G.heap_n ? G.heap[0]->due : 0;
    struct itimerspec its;
    if (G.next_ping && (!t || G.next_ping < t)) t = G.next_ping;
    if (t == G.armed) return;
    memset(&its, 0, sizeof its);
    if (t) {
        its.it_value.tv_sec = t / 1000000000;
        its.it_value.tv_nsec = t % 1000000000;
    }
    timerfd_settime(G.tfd, TFD_TIMER_ABSTIME, &its, NULL);
    G.armed = t;
}

static void timers_due(void)
{
    int64_t now = now_ns();
    while (G.heap_n && G.heap[0]->due <= now) {
        struct run *r = G.heap[0];
        heap_del(r);
        run_step(r);
    }
    if (G.next_ping && G.next_ping <= now) {
        struct conn *c;
        for (c = G.conns; c; c = c->next) {
            uint8_t op[8] = { 0 };
            if (c->state != C_H2 || c->closing) continue;
            if (c->ping_at && now - c->ping_at > 10 * (int64_t)1000000000)
                error_note("a PING left unanswered for %.1f s", (double)(now - c->ping_at) / 1e9);
            if (c->ping_at) continue;
            c->ping_at = now;
            nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, op);
            G.c.pings_sent++;
            nghttp2_session_send(c->h2);
            conn_flush(c);
        }
        G.next_ping = now + (int64_t)(G.ping_s * 1e9);
    }
}

/* Unpaced answers: one delta each, round robin, while their connections take them. Returns 1
 * when some answer could go on at once. */
static int unpaced_pass(void)
{
    struct run *r, *nx;
    int more = 0, k;
    for (k = 0; k < 16; k++) {
        int any = 0;
        for (r = G.unpaced; r; r = nx) {
            nx = r->unext;
            if (r->c->closing || bbuf_avail(&r->c->out) >= OUT_SOFT) continue;
            if (r->sid && bbuf_avail(&r->pend)) continue;   /* waiting for the stream's window */
            unpaced_del(r);
            run_step(r);
            any = 1;
        }
        if (!any) return 0;
        more = 1;
    }
    return more;
}

/* ---- main ---- */

static int alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned inlen, void *arg)
{
    const unsigned char *pref = G.alpn, *end = G.alpn + G.alpn_len;
    (void)s; (void)arg;
    for (; pref < end; pref += 1 + pref[0]) {
        const unsigned char *p = in, *pe = in + inlen;
        for (; p < pe; p += 1 + p[0])
            if (p[0] == pref[0] && !memcmp(p + 1, pref + 1, p[0])) {
                *out = p + 1;
                *outlen = p[0];
                return SSL_TLSEXT_ERR_OK;
            }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static int listen_on(int *port)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)*port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4096) < 0) die("bind/listen");
    getsockname(fd, (struct sockaddr *)&a, &al);
    *port = ntohs(a.sin_port);
    return fd;
}

static void parse_scenario(const char *arg)
{
    struct scen *s;
    const char *eq = strchr(arg, '=');
    long us;
    char text[64];
    if (!eq || G.nsc == (int)(sizeof G.sc / sizeof G.sc[0]) || (size_t)(eq - arg) >= sizeof s->name)
        die("bad --scenario");
    s = &G.sc[G.nsc++];
    memset(s, 0, sizeof *s);
    memcpy(s->name, arg, (size_t)(eq - arg));
    if (!strcmp(eq + 1, "hold")) {
        s->hold = 1;
        s->n = 1;
        s->batch = 1;
        strcpy(s->text, "held");
        return;
    }
    s->batch = 1;
    if (sscanf(eq + 1, "%d,%ld,%d,%63[^,],%d", &s->n, &us, &s->stamp, text, &s->batch) < 4
        || s->batch < 1 || s->batch > 64)
        die("bad --scenario");
    s->interval_ns = us * 1000;
    strcpy(s->text, text);
}

int main(int argc, char **argv)
{
    const char *cdir = NULL, *info = NULL, *alpn = "h2,http/1.1";
    char path[1024];
    int lfd, cfd, port = 0, cport = 0, i, more = 0;
    static unsigned char alpn_wire[64];
    struct epoll_event ev, evs[256];
    static int k_listen = K_LISTEN, k_ctl = K_CTL_LISTEN, k_timer = K_TIMER;
    FILE *f;
    G.max_streams = 100;
    G.ping_s = 10;
    G.dflt.n = 20;
    G.dflt.batch = 1;
    strcpy(G.dflt.text, "s");
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cert-dir")) cdir = argv[i + 1];
        else if (!strcmp(argv[i], "--info")) info = argv[i + 1];
        else if (!strcmp(argv[i], "--scenario")) parse_scenario(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-streams")) G.max_streams = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ping-s")) G.ping_s = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--alpn")) alpn = argv[i + 1];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else die("usage: upstream --cert-dir DIR --info FILE [--scenario NAME=N,US,STAMP,TEXT|"
                 "NAME=hold]... [--max-streams N] [--ping-s S] [--alpn h2,http/1.1] [--port P]");
    }
    if (i != argc || !cdir || !info) die("--cert-dir and --info are needed");
    {   /* "h2,http/1.1" -> wire format */
        const char *p = alpn;
        while (*p) {
            const char *q = strchr(p, ',');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            if (G.alpn_len + 1 + n > sizeof alpn_wire) die("--alpn too long");
            alpn_wire[G.alpn_len++] = (unsigned char)n;
            memcpy(alpn_wire + G.alpn_len, p, n);
            G.alpn_len += (unsigned)n;
            p += n + (q ? 1 : 0);
        }
        G.alpn = alpn_wire;
    }
    signal(SIGPIPE, SIG_IGN);
    {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    }
    G.ctx = SSL_CTX_new(TLS_server_method());
    snprintf(path, sizeof path, "%s/server.pem", cdir);
    if (SSL_CTX_use_certificate_chain_file(G.ctx, path) != 1) die("server.pem");
    snprintf(path, sizeof path, "%s/server.key", cdir);
    if (SSL_CTX_use_PrivateKey_file(G.ctx, path, SSL_FILETYPE_PEM) != 1) die("server.key");
    SSL_CTX_set_mode(G.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                     | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_alpn_select_cb(G.ctx, alpn_cb, NULL);
    SSL_CTX_set_options(G.ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);  /* clients that just close */
    SSL_CTX_set_read_ahead(G.ctx, 1);  /* one read() for many records, not two per record */
    G.ep = epoll_create1(EPOLL_CLOEXEC);
    lfd = listen_on(&port);
    cfd = listen_on(&cport);
    G.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ev.events = EPOLLIN;
    ev.data.ptr = &k_listen;
    epoll_ctl(G.ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.ptr = &k_ctl;
    epoll_ctl(G.ep, EPOLL_CTL_ADD, cfd, &ev);
    ev.data.ptr = &k_timer;
    epoll_ctl(G.ep, EPOLL_CTL_ADD, G.tfd, &ev);
    if (G.ping_s > 0) G.next_ping = now_ns() + (int64_t)(G.ping_s * 1e9);
    snprintf(path, sizeof path, "%s.tmp", info);
    f = fopen(path, "w");
    if (!f) die("--info");
    fprintf(f, "{\"port\":%d,\"control_port\":%d,\"pid\":%d}\n", port, cport, (int)getpid());
    fclose(f);
    if (rename(path, info) < 0) die("--info rename");
    while (!G.stop) {
        int n, j;
        struct conn *c, *cn;
        timer_arm();
        n = epoll_wait(G.ep, evs, 256, more ? 0 : -1);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (j = 0; j < n; j++) {
            int kind = *(int *)evs[j].data.ptr;
            if (kind == K_LISTEN) {
                int acc;
                /* at most 64 a turn: a backlog of handshakes must not starve the runs and the
                 * control port (the listener stays readable for the rest) */
                for (acc = 0; acc < 64; acc++) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = calloc(1, sizeof *c);
                    if (!c) die("out of memory");
                    c->kind = K_CONN;
                    c->fd = fd;
                    c->ssl = SSL_new(G.ctx);
                    SSL_set_fd(c->ssl, fd);
                    c->next = G.conns;
                    if (G.conns) G.conns->prev = c;
                    G.conns = c;
                    G.nconns++;
                    ev.events = EPOLLIN;
                    ev.data.ptr = c;
                    epoll_ctl(G.ep, EPOLL_CTL_ADD, fd, &ev);
                    conn_event(c, 0);
                    if (c->closing) conn_close(c);
                }
            } else if (kind == K_CTL_LISTEN) {
                for (;;) {
                    int fd = accept4(cfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    struct ctl *k;
                    if (fd < 0) break;
                    k = calloc(1, sizeof *k);
                    if (!k) die("out of memory");
                    k->kind = K_CTL;
                    k->fd = fd;
                    ev.events = EPOLLIN;
                    ev.data.ptr = k;
                    epoll_ctl(G.ep, EPOLL_CTL_ADD, fd, &ev);
                }
            } else if (kind == K_TIMER) {
                uint64_t x;
                if (read(G.tfd, &x, sizeof x) < 0) {}
                G.armed = 0;
                timers_due();
            } else if (kind == K_CTL) {
                ctl_event(evs[j].data.ptr);
            } else {
                c = evs[j].data.ptr;
                if (!c->closing) conn_event(c, evs[j].events);
            }
        }
        timers_due();
        more = unpaced_pass();
        for (c = G.conns; c; c = cn) {
            cn = c->next;
            if (c->closing) conn_close(c);
        }
        while (G.grave) {
            struct run *r = G.grave;
            G.grave = r->hnext;
            free(r);
        }
    }
    return 0;
}
