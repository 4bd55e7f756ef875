/* fz_h2.c - libFuzzer target for the HTTP/2 client connection: arbitrary bytes from the
 * server. Input: one option byte (small windows, how many streams to open first, whether to
 * send bodies), then the server's bytes. Two connections get the same bytes, one in a single
 * feed and one in pieces chosen from the input; the application reacts to each event the
 * same way in both (consume DATA, send on WINDOW, open a stream after one ends, ping). The
 * two must report the same events and write the same bytes (splitting never changes the
 * result), every result is a documented one, a connection error is sticky and queues a
 * GOAWAY, windows stay within their bounds, views stay inside the connection's buffers, and
 * everything the client writes parses as frames within the server's frame size. Any
 * violation aborts. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"
#include <stdlib.h>
#include <string.h>

#define FZ_ASSERT(c) do { if (!(c)) abort(); } while (0)

static const coai_h2_header fz_req[] = {
    { COAI_STR_LIT(":method"), COAI_STR_LIT("POST") },
    { COAI_STR_LIT(":scheme"), COAI_STR_LIT("https") },
    { COAI_STR_LIT(":path"), COAI_STR_LIT("/agent.v1.AgentService/Run") },
    { COAI_STR_LIT(":authority"), COAI_STR_LIT("agent.example") }
};

typedef struct fz_side {
    coai_h2_conn c;
    uint32_t hash;              /* of the events */
    unsigned events;
    coai_buf written;           /* everything the client wrote */
    int done;                   /* got a connection error */
} fz_side;

static void fz_mix(fz_side *s, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) s->hash = (s->hash ^ b[i]) * 16777619u;
}

static void fz_check_conn(const coai_h2_conn *c)
{
    size_t i, active = 0;
    FZ_ASSERT(c->send_window <= 0x7fffffff && c->recv_window <= 0x7fffffff);
    FZ_ASSERT(c->recv_window + c->unacked <= (int64_t)c->opts.conn_window);
    for (i = 0; i < COAI_H2_MAX_STREAMS; i++) {
        const coai_h2_stream *s = &c->streams[i];
        if (!s->id) continue;
        active++;
        FZ_ASSERT(s->id & 1 && s->id <= c->max_id);
        FZ_ASSERT(s->send_window <= 0x7fffffff);
        FZ_ASSERT(s->recv_window + s->unacked <= (int64_t)(c->opts.stream_window > 65535
                                                           ? c->opts.stream_window : 65535));
        FZ_ASSERT(s->state >= COAI_H2_ST_OPEN && s->state <= COAI_H2_ST_HALF_CLOSED_REMOTE);
    }
    FZ_ASSERT(active == c->active && active <= c->opts.max_streams);
}

/* Take what the client wants to write: it must parse as frames (after the preface). */
static void fz_drain(fz_side *s)
{
    const unsigned char *p;
    size_t n = coai_h2_want_write(&s->c, &p);
    if (n) coai_buf_append(&s->written, p, n);
    coai_h2_wrote(&s->c, n);
}

static void fz_event(fz_side *s, const coai_h2_event *ev, int send_bodies)
{
    static const unsigned char body[3000];
    uint32_t v[4];
    size_t sent, i;
    v[0] = (uint32_t)ev->type;
    v[1] = ev->stream;
    v[2] = ev->code ^ (uint32_t)ev->status << 8 ^ (uint32_t)ev->end_stream << 30
           ^ (uint32_t)ev->trailers << 29 ^ (uint32_t)ev->local << 28;
    v[3] = (uint32_t)ev->data.len ^ (uint32_t)ev->n_headers << 20 ^ ev->last_stream;
    fz_mix(s, v, sizeof v);
    if (ev->data.len) fz_mix(s, ev->data.ptr, ev->data.len);
    for (i = 0; i < ev->n_headers; i++) {
        const coai_h2_header *h = &ev->headers[i];
        FZ_ASSERT(h->name.len > 0);
        fz_mix(s, h->name.ptr, h->name.len);
        fz_mix(s, h->value.ptr, h->value.len);
    }
    s->events++;
    switch (ev->type) {
    case COAI_H2_EV_HEADERS:
        FZ_ASSERT(ev->trailers ? ev->status == 0 && ev->end_stream
                               : ev->status >= 200 && ev->status <= 999);
        FZ_ASSERT(ev->n_headers && (ev->trailers || coai_str_eq(ev->headers[0].name, ":status")));
        break;
    case COAI_H2_EV_DATA:
        coai_h2_consumed(&s->c, ev->stream, ev->data.len);
        break;
    case COAI_H2_EV_WINDOW:
        if (send_bodies && ev->stream) {
            size_t room = coai_h2_send_room(&s->c, ev->stream);
            if (room > sizeof body) room = sizeof body;
            if (coai_h2_send_data(&s->c, ev->stream, body, room, 0, &sent) == 0)
                FZ_ASSERT(sent == room);
        }
        break;
    case COAI_H2_EV_RESET:
    case COAI_H2_EV_REFUSED:
        FZ_ASSERT(coai_h2_stream_state(&s->c, ev->stream) == COAI_H2_ST_CLOSED);
        (void)coai_h2_open(&s->c, fz_req, 4, 0, NULL);
        break;
    case COAI_H2_EV_PING_ACK:
        FZ_ASSERT(ev->data.len == 8);
        break;
    case COAI_H2_EV_SETTINGS:
        (void)coai_h2_ping(&s->c, (const unsigned char *)"fuzzping");
        break;
    default:
        break;
    }
}

static void fz_run(fz_side *s, const uint8_t *data, size_t size, const uint8_t *cuts,
                   size_t ncuts, int send_bodies)
{
    size_t off = 0, k = 0;
    while (off < size && !s->done) {
        size_t piece = size - off;
        coai_h2_event ev;
        coai_result r;
        unsigned char *copy;
        if (cuts && k < ncuts) {
            piece = 1 + cuts[k++] % 64;
            if (piece > size - off) piece = size - off;
        }
        copy = malloc(piece);
        if (!copy) return;
        memcpy(copy, data + off, piece);
        FZ_ASSERT(coai_h2_feed(&s->c, copy, piece) == 0);
        free(copy);
        off += piece;
        while ((r = coai_h2_next(&s->c, &ev)) == COAI_OK) {
            if (ev.data.len) {
                /* views point into the connection's input buffer */
                FZ_ASSERT((const unsigned char *)ev.data.ptr >= s->c.in.data
                          && (const unsigned char *)ev.data.ptr + ev.data.len
                             <= s->c.in.data + s->c.in.len);
            }
            fz_event(s, &ev, send_bodies);
            fz_check_conn(&s->c);
            fz_drain(s);
        }
        FZ_ASSERT(r == COAI_MORE || r == COAI_ERR_H2);
        if (r == COAI_ERR_H2) {
            FZ_ASSERT(s->c.error >= 0 && s->c.goaway_out);
            FZ_ASSERT(coai_h2_next(&s->c, &ev) == COAI_ERR_H2);
            s->done = 1;
        }
        fz_check_conn(&s->c);
        fz_drain(s);
    }
}

/* What the client wrote: the preface, then frames within the server's frame size. */
static void fz_check_written(const fz_side *s)
{
    const unsigned char *p = s->written.data;
    size_t n = s->written.len, off = 24, used;
    coai_h2_frame f;
    FZ_ASSERT(n >= 24 && memcmp(p, COAI_H2_PREFACE, 24) == 0);
    while (off < n) {
        FZ_ASSERT(coai_h2_frame_parse(p + off, n - off, 0xffffff, &f, &used) == COAI_OK);
        if (f.type == COAI_H2_DATA || f.type == COAI_H2_HEADERS
            || f.type == COAI_H2_CONTINUATION)
            FZ_ASSERT(f.length <= s->c.peer.max_frame_size && f.stream & 1);
        off += used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_side a, b;
    coai_h2_opts o;
    int nstreams, send_bodies, i;
    if (size < 1) return 0;
    memset(&o, 0, sizeof o);
    if (data[0] & 1) o.stream_window = 1000;
    if (data[0] & 2) o.conn_window = 65535;
    if (data[0] & 4) o.max_streams = 2;
    nstreams = 1 + (data[0] >> 3 & 3);
    send_bodies = data[0] >> 5 & 1;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    FZ_ASSERT(coai_h2_init(&a.c, &o) == 0 && coai_h2_init(&b.c, &o) == 0);
    for (i = 0; i < nstreams; i++) {
        long ia = coai_h2_open(&a.c, fz_req, 4, i & 1, NULL);
        long ib = coai_h2_open(&b.c, fz_req, 4, i & 1, NULL);
        FZ_ASSERT(ia == ib && ia >= 0);
    }
    fz_drain(&a);
    fz_drain(&b);
    fz_run(&a, data + 1, size - 1, NULL, 0, send_bodies);
    fz_run(&b, data + 1, size - 1, data + 1, size - 1, send_bodies);
    FZ_ASSERT(a.events == b.events && a.hash == b.hash && a.done == b.done);
    FZ_ASSERT(a.written.len == b.written.len
              && (a.written.len == 0 || !memcmp(a.written.data, b.written.data, a.written.len)));
    fz_check_written(&a);
    coai_h2_free(&a.c);
    coai_h2_free(&b.c);
    coai_buf_free(&a.written);
    coai_buf_free(&b.written);
    return 0;
}
