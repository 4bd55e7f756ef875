/* t_framing.c - envelopes (spec 4.1/4.2), trailers (4.3/4.4), Connect end-stream, and the
 * upstream framing fault scenarios 16-24 of reliability.md. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include <pb_encode.h>

/* ------------------------------------------------------------------ helpers */

typedef struct frame_rec {
    unsigned flags;
    unsigned char *data;
    size_t len;
} frame_rec;

typedef struct run_rec {
    frame_rec f[64];
    size_t n;
    coai_result end;        /* first error from feed, else the result of finish */
    int bad_view;           /* a frame view pointed outside both the input and the decoder */
} run_rec;

static void run_free(run_rec *r)
{
    size_t i;
    for (i = 0; i < r->n; i++) free(r->f[i].data);
    r->n = 0;
}

/* Feed s[0..n) cut at the given offsets (ascending). Every piece lives in its own exact-size
 * heap block so that ASan catches any read past it. */
static void run_cuts(const unsigned char *s, size_t n, const size_t *cuts, size_t ncuts,
                     size_t max_frame, run_rec *r)
{
    coai_frame_decoder d;
    size_t a = 0, k;
    memset(&d, 0, sizeof d);
    memset(r, 0, sizeof *r);
    d.max_frame = max_frame;
    r->end = COAI_OK;
    for (k = 0; k <= ncuts; k++) {
        size_t b = k < ncuts ? cuts[k] : n, len = b - a, off = 0;
        unsigned char *piece = (unsigned char *)malloc(len ? len : 1);
        coai_result res = COAI_MORE;
        if (len) memcpy(piece, s + a, len);
        for (;;) {
            size_t used = 0;
            coai_frame f;
            res = coai_frame_feed(&d, piece + off, len - off, &used, &f);
            if (res < 0) break;
            off += used;
            if (res == COAI_MORE) break;
            if (f.data == NULL ||
                !((f.data >= piece && f.data + f.len <= piece + len) ||
                  (f.len && f.data == d.buf_.data && f.len <= d.buf_.len) ||
                  f.len == 0))
                r->bad_view = 1;
            if (r->n < 64) {
                r->f[r->n].flags = f.flags;
                r->f[r->n].len = f.len;
                r->f[r->n].data = (unsigned char *)malloc(f.len + 1);
                if (f.len) memcpy(r->f[r->n].data, f.data, f.len);
                r->n++;
            }
        }
        free(piece);
        a = b;
        if (res < 0) { r->end = res; break; }
        if (off != len) { r->end = COAI_ERR_STATE; break; }   /* MORE must consume all */
    }
    if (r->end == COAI_OK) r->end = coai_frame_finish(&d);
    coai_frame_decoder_free(&d);
}

static int same_frames(const run_rec *a, const run_rec *b)
{
    size_t i;
    if (a->n != b->n || a->end != b->end) return 0;
    for (i = 0; i < a->n; i++)
        if (a->f[i].flags != b->f[i].flags || a->f[i].len != b->f[i].len ||
            (a->f[i].len && memcmp(a->f[i].data, b->f[i].data, a->f[i].len) != 0))
            return 0;
    return 1;
}

static cJSON *load_json(const char *name)
{
    size_t n = 0;
    char *t = test_read_file(test_vec_path(name), &n);
    cJSON *j;
    CHECKF(t != NULL, "cannot read %s", test_vec_path(name));
    if (!t) return NULL;
    j = cJSON_ParseWithLength(t, n);
    free(t);
    CHECK(j != NULL);
    return j;
}

static const cJSON *find_frame(const cJSON *frames, const char *name)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, frames) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0) return f;
    }
    return NULL;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Valid UTF-8, no C0/DEL/C1 control characters, NUL inside the field. */
static int clean_text(const char *s, size_t cap)
{
    const char *z = (const char *)memchr(s, 0, cap);
    size_t n = z ? (size_t)(z - s) : cap, i;
    if (n >= cap) return 0;
    if (coai_utf8_valid_prefix(s, n) != n) return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 0;
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] < 0xa0) return 0;
    }
    return 1;
}

static int status_clean(const coai_status *st)
{
    return clean_text(st->message, sizeof st->message) && clean_text(st->title, sizeof st->title)
        && clean_text(st->detail, sizeof st->detail);
}

/* ------------------------------------------------------------------ envelopes */

static unsigned char *g_stream;
static size_t g_stream_n;
static size_t g_bounds[80];     /* frame end offsets (and 0) */
static size_t g_nbounds;
static run_rec g_expect;

static void stream_add(const unsigned char *frame, size_t n)
{
    g_stream = (unsigned char *)realloc(g_stream, g_stream_n + n);
    memcpy(g_stream + g_stream_n, frame, n);
    g_stream_n += n;
    g_bounds[g_nbounds++] = g_stream_n;
    g_expect.f[g_expect.n].flags = frame[0];
    g_expect.f[g_expect.n].len = n - 5;
    g_expect.f[g_expect.n].data = (unsigned char *)malloc(n - 5 + 1);
    memcpy(g_expect.f[g_expect.n].data, frame + 5, n - 5);
    g_expect.n++;
}

/* Stream = every data frame of server_frames.json, an empty frame after the third, and the
 * error-details trailer last (a trailer must be the final frame). */
static void build_stream(const cJSON *frames)
{
    const cJSON *f;
    size_t i = 0;
    memset(&g_expect, 0, sizeof g_expect);
    g_bounds[g_nbounds++] = 0;
    cJSON_ArrayForEach(f, frames) {
        size_t n;
        unsigned char *b = test_unhex(jstr(f, "frame_hex"), &n);
        CHECK(b != NULL && n >= 5);
        if (!b) continue;
        if (b[0] == 0) {
            stream_add(b, n);
            if (++i == 3) stream_add((const unsigned char *)"\0\0\0\0\0", 5);
        }
        free(b);
    }
    f = find_frame(frames, "trailer_error_details");
    CHECK(f != NULL);
    if (f) {
        size_t n;
        unsigned char *b = test_unhex(jstr(f, "frame_hex"), &n);
        stream_add(b, n);
        free(b);
    }
    g_expect.end = COAI_OK;
    CHECKF(g_expect.n >= 15, "only %zu frames", g_expect.n);
}

static void test_split_invariance(void)
{
    run_rec r;
    size_t *cuts, k, bad = 0, badview = 0;
    unsigned seed = 12345;
    if (g_stream_n == 0) {          /* the vectors were not found (reported above) */
        CHECKF(0, "split invariance: no stream to split");
        return;
    }
    cuts = (size_t *)malloc(g_stream_n * sizeof *cuts);
    /* whole */
    run_cuts(g_stream, g_stream_n, NULL, 0, 0, &r);
    CHECKF(same_frames(&r, &g_expect), "whole: %zu frames, end %d", r.n, r.end);
    CHECK(!r.bad_view);
    run_free(&r);
    /* byte by byte */
    for (k = 1; k < g_stream_n; k++) cuts[k - 1] = k;
    run_cuts(g_stream, g_stream_n, cuts, g_stream_n - 1, 0, &r);
    CHECKF(same_frames(&r, &g_expect), "bytewise: %zu frames, end %d", r.n, r.end);
    CHECK(!r.bad_view);
    run_free(&r);
    /* every single split point, and every pair of split points a few bytes apart */
    for (k = 0; k <= g_stream_n; k++) {
        size_t c[2], j;
        c[0] = k;
        run_cuts(g_stream, g_stream_n, c, 1, 0, &r);
        if (!same_frames(&r, &g_expect)) bad++;
        if (r.bad_view) badview++;
        run_free(&r);
        for (j = 1; j <= 7 && k + j <= g_stream_n; j++) {
            c[1] = k + j;
            run_cuts(g_stream, g_stream_n, c, 2, 0, &r);
            if (!same_frames(&r, &g_expect)) bad++;
            run_free(&r);
        }
    }
    CHECKF(bad == 0, "%zu split runs differ", bad);
    CHECK(badview == 0);
    /* random chunkings */
    bad = 0;
    for (k = 0; k < 300; k++) {
        size_t nc = 0, pos = 0;
        for (;;) {
            seed = seed * 1103515245u + 12345u;
            pos += 1 + (seed >> 16) % 40;
            if (pos >= g_stream_n) break;
            cuts[nc++] = pos;
        }
        run_cuts(g_stream, g_stream_n, cuts, nc, 0, &r);
        if (!same_frames(&r, &g_expect) || r.bad_view) bad++;
        run_free(&r);
    }
    CHECKF(bad == 0, "%zu random chunkings differ", bad);
    free(cuts);
}

static void test_zero_copy(void)
{
    coai_frame_decoder d;
    coai_frame f;
    size_t used = 0, off = 0, count = 0;
    int inside = 1;
    memset(&d, 0, sizeof d);
    while (off < g_stream_n) {
        coai_result r = coai_frame_feed(&d, g_stream + off, g_stream_n - off, &used, &f);
        if (r != COAI_OK) { CHECKF(0, "feed %d at %zu", r, off); break; }
        if (f.len && !(f.data >= g_stream + off && f.data + f.len <= g_stream + g_stream_n))
            inside = 0;
        off += used;
        count++;
    }
    CHECK(inside);
    CHECK(count == g_expect.n);
    CHECK(d.buf_.cap == 0);   /* nothing was copied */
    CHECK(coai_frame_finish(&d) == COAI_OK);
    coai_frame_decoder_free(&d);
}

static void test_truncation(void)
{
    size_t k, b = 0, bad = 0;
    for (k = 0; k <= g_stream_n; k++) {
        run_rec r;
        size_t *cuts, j;
        int boundary;
        while (b < g_nbounds && g_bounds[b] < k) b++;
        boundary = b < g_nbounds && g_bounds[b] == k;
        run_cuts(g_stream, k, NULL, 0, 0, &r);
        if (r.end != (boundary ? COAI_OK : COAI_ERR_TRUNCATED)) bad++;
        run_free(&r);
        /* the same prefix byte by byte */
        cuts = (size_t *)malloc((k + 1) * sizeof *cuts);
        for (j = 1; j < k; j++) cuts[j - 1] = j;
        run_cuts(g_stream, k, cuts, k ? k - 1 : 0, 0, &r);
        if (r.end != (boundary ? COAI_OK : COAI_ERR_TRUNCATED)) bad++;
        run_free(&r);
        free(cuts);
    }
    CHECKF(bad == 0, "%zu prefixes misjudged", bad);
}

static void test_header_limits(void)
{
    coai_frame_decoder d;
    coai_frame f;
    size_t used = 0;
    unsigned char h[5];
    static unsigned char payload[101];
    memset(&d, 0, sizeof d);

    /* 0xFFFFFFFF: rejected from the header alone, nothing allocated */
    CHECK(coai_frame_feed(&d, "\x00\xff\xff\xff\xff" "abc", 8, &used, &f) == COAI_ERR_TOO_BIG);
    CHECK(d.buf_.cap == 0 && d.buf_.data == NULL);
    CHECK(coai_frame_feed(&d, "\0\0\0\0\0", 5, &used, &f) == COAI_ERR_TOO_BIG);   /* sticky */
    CHECK(coai_frame_finish(&d) == COAI_ERR_TOO_BIG);
    coai_frame_decoder_reset(&d);
    CHECK(coai_frame_feed(&d, "\0\0\0\0\0", 5, &used, &f) == COAI_OK && f.len == 0 && used == 5);

    /* 0xFFFFFFFF split over feeds */
    coai_frame_decoder_reset(&d);
    CHECK(coai_frame_feed(&d, "\x80\xff", 2, &used, &f) == COAI_MORE && used == 2);
    CHECK(coai_frame_feed(&d, "\xff\xff", 2, &used, &f) == COAI_MORE);
    CHECK(coai_frame_feed(&d, "\xff", 1, &used, &f) == COAI_ERR_TOO_BIG);
    CHECK(d.buf_.cap == 0);

    /* default cap: COAI_MAX_FRAME passes the header check, +1 does not */
    coai_frame_decoder_reset(&d);
    CHECK(coai_frame_header(h, 0, COAI_MAX_FRAME) == 0);
    CHECK(coai_frame_feed(&d, h, 5, &used, &f) == COAI_MORE && d.buf_.cap == 0);
    CHECK(coai_frame_finish(&d) == COAI_ERR_TRUNCATED);
    coai_frame_decoder_reset(&d);
    CHECK(coai_frame_header(h, 0, (size_t)COAI_MAX_FRAME + 1) == 0);
    CHECK(coai_frame_feed(&d, h, 5, &used, &f) == COAI_ERR_TOO_BIG);

    /* custom cap: 100 ok, 101 not */
    coai_frame_decoder_free(&d);
    d.max_frame = 100;
    coai_frame_header(h, 0, 100);
    CHECK(coai_frame_feed(&d, h, 5, &used, &f) == COAI_MORE);
    CHECK(coai_frame_feed(&d, payload, 100, &used, &f) == COAI_OK && f.len == 100 && used == 100);
    coai_frame_header(h, 0x80, 101);
    CHECK(coai_frame_feed(&d, h, 5, &used, &f) == COAI_ERR_TOO_BIG);
    CHECK(d.max_frame == 100);
    coai_frame_decoder_reset(&d);
    CHECK(d.max_frame == 100);   /* reset keeps the setting */
    coai_frame_decoder_free(&d);
}

static void test_flags(void)
{
    static const struct { unsigned char flags; coai_result want; } t[] = {
        { 0x00, COAI_OK }, { 0x80, COAI_OK }, { 0x02, COAI_OK },
        { 0x01, COAI_ERR_COMPRESSED }, { 0x81, COAI_ERR_COMPRESSED },
        { 0x03, COAI_ERR_COMPRESSED }, { 0x04, COAI_ERR_FRAME }, { 0x40, COAI_ERR_FRAME },
        { 0x82, COAI_ERR_FRAME }, { 0xff, COAI_ERR_COMPRESSED }, { 0xfe, COAI_ERR_FRAME },
        { 0x10, COAI_ERR_FRAME }
    };
    size_t i;
    for (i = 0; i < sizeof t / sizeof t[0]; i++) {
        coai_frame_decoder d;
        coai_frame f;
        size_t used = 9;
        unsigned char fr[7] = { 0, 0, 0, 0, 2, 'h', 'i' };
        coai_result r;
        memset(&d, 0, sizeof d);
        fr[0] = t[i].flags;
        r = coai_frame_feed(&d, fr, 7, &used, &f);
        CHECKF(r == t[i].want, "flags %02x -> %d", t[i].flags, r);
        if (r == COAI_OK) CHECK(f.flags == t[i].flags && f.len == 2 && !memcmp(f.data, "hi", 2));
        coai_frame_decoder_free(&d);
    }
}

static void test_after_end(void)
{
    coai_frame_decoder d;
    coai_frame f;
    size_t used = 0;
    coai_buf b = { 0 };
    memset(&d, 0, sizeof d);
    /* end-stream {} then a data frame: the data frame is a protocol error */
    coai_frame_encode(&b, COAI_FRAME_END_STREAM, "{}", 2);
    coai_frame_encode(&b, COAI_FRAME_DATA, "x", 1);
    CHECK(coai_frame_feed(&d, b.data, b.len, &used, &f) == COAI_OK);
    CHECK(f.flags == COAI_FRAME_END_STREAM && f.len == 2 && used == 7);
    CHECK(coai_frame_feed(&d, b.data + used, 0, &used, &f) == COAI_MORE);
    CHECK(coai_frame_finish(&d) == COAI_OK);
    CHECK(coai_frame_feed(&d, b.data + 7, b.len - 7, &used, &f) == COAI_ERR_FRAME);
    CHECK(coai_frame_finish(&d) == COAI_ERR_FRAME);
    coai_frame_decoder_reset(&d);
    /* trailer then another trailer */
    coai_buf_reset(&b);
    coai_frame_encode(&b, COAI_FRAME_TRAILER, "grpc-status: 0\r\n", 16);
    coai_frame_encode(&b, COAI_FRAME_TRAILER, "grpc-status: 0\r\n", 16);
    CHECK(coai_frame_feed(&d, b.data, b.len, &used, &f) == COAI_OK && used == 21);
    CHECK(coai_frame_feed(&d, b.data + 21, 1, &used, &f) == COAI_ERR_FRAME);
    coai_frame_decoder_free(&d);
    coai_buf_free(&b);
}

static void test_zero_length_frames(void)
{
    coai_frame_decoder d;
    coai_frame f;
    size_t used = 0, off = 0, count = 0;
    const unsigned char s[20] = { 0 };    /* four empty data frames */
    memset(&d, 0, sizeof d);
    while (off < sizeof s) {
        CHECK(coai_frame_feed(&d, s + off, sizeof s - off, &used, &f) == COAI_OK);
        CHECK(f.len == 0 && f.data != NULL && f.flags == 0 && used == 5);
        off += used;
        count++;
    }
    CHECK(count == 4);
    /* header completing exactly at the end of the input still yields the empty frame */
    CHECK(coai_frame_feed(&d, "\x80\0\0", 3, &used, &f) == COAI_MORE);
    CHECK(coai_frame_feed(&d, "\0\0", 2, &used, &f) == COAI_OK && f.len == 0 && f.flags == 0x80);
    CHECK(coai_frame_finish(&d) == COAI_OK);
    /* an empty input is never an error, even before any frame */
    coai_frame_decoder_reset(&d);
    CHECK(coai_frame_feed(&d, NULL, 0, &used, &f) == COAI_MORE && used == 0);
    CHECK(coai_frame_feed(&d, NULL, 3, &used, &f) == COAI_ERR_STATE);
    CHECK(coai_frame_finish(&d) == COAI_OK);
    coai_frame_decoder_free(&d);
}

/* A big payload arriving in small reads: memory grows with what arrived, not with the header's
 * promise; the big buffer is let go at the next frame. */
static void test_growth(void)
{
    coai_frame_decoder d;
    coai_frame f;
    size_t used = 0, total = 1u << 20, off = 0, maxcap_early = 0;
    unsigned char *p = (unsigned char *)malloc(total), h[5];
    size_t i;
    coai_result r = COAI_MORE;
    for (i = 0; i < total; i++) p[i] = (unsigned char)(i * 7);
    memset(&d, 0, sizeof d);
    coai_frame_header(h, 0, total);
    CHECK(coai_frame_feed(&d, h, 5, &used, &f) == COAI_MORE && d.buf_.cap == 0);
    while (off < total) {
        size_t n = total - off < 4096 ? total - off : 4096;
        r = coai_frame_feed(&d, p + off, n, &used, &f);
        if (off < 16384 && d.buf_.cap > maxcap_early) maxcap_early = d.buf_.cap;
        off += used;
        if (r != COAI_MORE) break;
    }
    CHECK(r == COAI_OK && off == total);
    CHECK(maxcap_early <= 32768);
    CHECK(f.len == total && memcmp(f.data, p, total) == 0);
    CHECK(coai_frame_feed(&d, "\0\0\0\0\1z", 6, &used, &f) == COAI_OK && f.len == 1);
    CHECK(d.buf_.cap <= COAI_FRAME_KEEP);
    coai_frame_decoder_free(&d);
    /* a failing buffer is COAI_ERR_NOMEM, sticky */
    memset(&d, 0, sizeof d);
    d.buf_.max = 10;
    CHECK(coai_frame_feed(&d, "\0\0\0\0\x20" "abc", 8, &used, &f) == COAI_MORE);
    CHECK(coai_frame_feed(&d, p, 20, &used, &f) == COAI_ERR_NOMEM);
    CHECK(coai_frame_feed(&d, p, 1, &used, &f) == COAI_ERR_NOMEM);
    coai_frame_decoder_free(&d);
    free(p);
}

static void test_encode(const cJSON *client, const cJSON *bidi)
{
    unsigned char h[5];
    coai_buf b = { 0 };
    const cJSON *v;
    int seen = 0;
    CHECK(coai_frame_header(h, 0x80, 0x01020304) == 0 && !memcmp(h, "\x80\x01\x02\x03\x04", 5));
    CHECK(coai_frame_header(h, 0, 0xffffffffu) == 0 && !memcmp(h, "\0\xff\xff\xff\xff", 5));
    CHECK(coai_frame_header(h, 0x100, 0) == -1);
#if SIZE_MAX > 0xffffffffu
    CHECK(coai_frame_header(h, 0, (size_t)0x100000000ull) == -1);
    CHECK(coai_frame_encode(&b, 0, "", (size_t)0x100000000ull) == COAI_ERR_TOO_BIG);
    CHECK(b.len == 0);
#endif
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(client, "vectors")) {
        const char *id = jstr(v, "id");
        size_t n;
        unsigned char *x;
        if (strcmp(id, "empty-envelope") && strcmp(id, "bidi-request-id-envelope")) continue;
        x = test_unhex(jstr(v, "hex"), &n);
        coai_buf_reset(&b);
        CHECK(coai_frame_encode(&b, 0, x + 5, n - 5) == COAI_OK);
        CHECK_MEM(b.data, b.len, x, n);
        free(x);
        seen++;
    }
    CHECK(seen == 2);
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(bidi, "vectors")) {
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(v, "bidiappend_request");
        size_t n, m;
        unsigned char *msg = test_unhex(jstr(req, "bidi_append_request_hex"), &n);
        unsigned char *body = test_unhex(jstr(req, "http_body_hex"), &m);
        CHECK(msg && body);
        if (msg && body) {
            coai_buf_reset(&b);
            CHECK(coai_frame_encode(&b, 0, msg, n) == COAI_OK);
            CHECK_MEM(b.data, b.len, body, m);
        }
        free(msg);
        free(body);
    }
    coai_buf_free(&b);
}

/* ------------------------------------------------------------------ trailers */

static coai_result trailer(const char *text, coai_status *st)
{
    size_t n = strlen(text);
    char *copy = (char *)malloc(n ? n : 1);   /* exact size: over-reads are caught */
    coai_result r;
    memcpy(copy, text, n);
    memset(st, 0xAA, sizeof *st);
    r = coai_trailer_parse(copy, n, st);
    free(copy);
    return r;
}

static void test_trailer_vectors(const cJSON *frames)
{
    const cJSON *f;
    int seen = 0;
    cJSON_ArrayForEach(f, frames) {
        const char *name = jstr(f, "name"), *text = jstr(f, "trailer_text"), *want_err = "";
        const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(f, "original_client_chunks");
        const cJSON *c0 = cJSON_GetArrayItem(chunks, 0);
        size_t n;
        unsigned char *fr;
        coai_status st, st2;
        coai_result r;
        int want_code = 0;
        const char *p;
        if (strncmp(name, "trailer_", 8) != 0) continue;
        seen++;
        fr = test_unhex(jstr(f, "frame_hex"), &n);
        /* the frame payload is the trailer text */
        CHECK(fr && fr[0] == 0x80 && n - 5 == strlen(text) && !memcmp(fr + 5, text, n - 5));
        r = trailer(text, &st);
        memset(&st2, 0x55, sizeof st2);
        CHECK(coai_trailer_parse(fr + 5, n - 5, &st2) == r);
        CHECK(memcmp(&st, &st2, sizeof st) == 0);
        free(fr);
        CHECKF(r == COAI_OK, "%s: %d", name, r);
        CHECK(status_clean(&st));
        p = strstr(text, "grpc-status: ");
        if (p) want_code = atoi(p + 13);
        CHECKF(st.code == want_code, "%s: code %d vs %d", name, st.code, want_code);
        if (strcmp(jstr(c0, "type"), "error") == 0) want_err = jstr(c0, "error");
        if (want_code == 0) {
            CHECK(st.message[0] == 0 && st.error == 0 && st.error_name == NULL);
        } else if (want_code == 8) {
            /* the original yields the decoded grpc-message as its error text */
            CHECKF(strcmp(st.message, want_err) == 0, "%s: '%s' vs '%s'", name, st.message,
                   want_err);
            CHECK(st.error == 0 && st.retryable == -1);
        } else {
            /* original: "<message> (grpc-status N): <parts joined by ' | '>" */
            const char *desc = jstr(f, "description"), *e = strstr(desc, "ERROR_");
            char want_name[64] = "", suffix[32];
            size_t ml = strlen(st.message);
            int k = 0;
            while (e && (e[k] == '_' || (e[k] >= 'A' && e[k] <= 'Z')) && k < 63) {
                want_name[k] = e[k];
                k++;
            }
            want_name[k] = 0;
            snprintf(suffix, sizeof suffix, " (grpc-status %d): ", want_code);
            CHECKF(ml > 0 && !strncmp(want_err, st.message, ml) &&
                   !strncmp(want_err + ml, suffix, strlen(suffix)), "%s: message '%s'", name,
                   st.message);
            CHECKF(st.error_name && strcmp(st.error_name, want_name) == 0, "%s: %s vs %s", name,
                   st.error_name ? st.error_name : "(null)", want_name);
            CHECK(st.error == 30);   /* ERROR_OUTDATED_CLIENT in aiserver.proto */
            /* title and detail are exactly two of the ' | '-joined parts the original found */
            {
                char needle[1200];
                snprintf(needle, sizeof needle, " | %s | ", st.title);
                CHECKF(st.title[0] && strstr(want_err, needle), "title '%s'", st.title);
                snprintf(needle, sizeof needle, " | %s", st.detail);
                CHECKF(st.detail[0] && strlen(want_err) > strlen(needle) &&
                       !strcmp(want_err + strlen(want_err) - strlen(needle), needle),
                       "detail '%s'", st.detail);
            }
            CHECK(st.retryable == -1);   /* is_retryable absent (0x18 01 is is_expected) */
            {
                coai_buf b = { 0 };
                char want[2048];
                coai_status_describe(&st, &b);
                snprintf(want, sizeof want, "%s: %s: %s (grpc-status %d, %s)", st.message,
                         st.title, st.detail, want_code, want_name);
                CHECKF(b.data && strcmp((char *)b.data, want) == 0, "describe '%s'",
                       b.data ? (char *)b.data : "");
                coai_buf_free(&b);
            }
        }
    }
    CHECK(seen == 3);
}

static void test_trailer_syntax(void)
{
    coai_status st;
    coai_buf b = { 0 };
    CHECK(trailer("", &st) == COAI_OK && st.code == 0 && st.retryable == -1 &&
          st.message[0] == 0 && st.title[0] == 0 && st.detail[0] == 0 && !st.error_name);
    CHECK(trailer("GRPC-Status:16\nGrpc-Message:Bad%20token", &st) == COAI_OK && st.code == 16);
    CHECK(strcmp(st.message, "Bad token") == 0);
    CHECK(trailer("  grpc-status :  7 \r\n\r\n garbage line\r\n:\r\ngrpc-message: a:b \r\n", &st)
          == COAI_OK && st.code == 7 && strcmp(st.message, "a:b") == 0);
    CHECK(trailer("grpc-status: 3\r\ngrpc-status: 5\r\ngrpc-message: x\r\ngrpc-message: y",
                  &st) == COAI_OK && st.code == 5 && strcmp(st.message, "y") == 0);
    CHECK(trailer("grpc-message: only a message\r\n", &st) == COAI_OK && st.code == 0);
    CHECK(trailer("grpc-status: abc\r\n", &st) == COAI_OK && st.code == 2);
    CHECK(trailer("grpc-status: -1\r\n", &st) == COAI_OK && st.code == 2);
    CHECK(trailer("grpc-status: 8x\r\n", &st) == COAI_OK && st.code == 2);
    CHECK(trailer("grpc-status:\r\n", &st) == COAI_OK && st.code == 2);
    CHECK(trailer("grpc-status: 99999999999999999999\r\n", &st) == COAI_OK && st.code == 2);
    CHECK(trailer("grpc-status: 016\r\n", &st) == COAI_OK && st.code == 16);
    CHECK(trailer("grpc-status 8\r\n", &st) == COAI_OK && st.code == 0);   /* no colon: skipped */
    CHECK(trailer("x-grpc-status: 8\r\ngrpc-statusx: 8\r\n", &st) == COAI_OK && st.code == 0);
    /* trailers-only: HTTP response header lines work too */
    CHECK(trailer("HTTP/1.1 200 OK\r\ncontent-type: application/grpc-web+proto\r\n"
                  "grpc-status: 16\r\ngrpc-message: token%20expired\r\n\r\n", &st) == COAI_OK);
    CHECK(st.code == 16 && strcmp(st.message, "token expired") == 0);
    coai_status_describe(&st, &b);
    CHECK(b.data && strcmp((char *)b.data, "token expired (grpc-status 16)") == 0);
    coai_buf_free(&b);
}

static void test_percent(void)
{
    static const struct { const char *in, *out; } t[] = {
        { "a%20b", "a b" }, { "%", "%" }, { "100%", "100%" }, { "%2", "%2" }, { "%zz", "%zz" },
        { "%%41", "%A" }, { "%4", "%4" }, { "%e2%82%AC", "\xe2\x82\xac" },
        { "%E2%82", "\xef\xbf\xbd\xef\xbf\xbd" },
        { "%ff", "\xef\xbf\xbd" }, { "a%0ab", "a b" }, { "a%00b", "a b" }, { "%7f", " " },
        { "%c2%85", " " }, { "%c2%a0", "\xc2\xa0" }, { "%C3%A9t%C3%A9", "\xc3\xa9t\xc3\xa9" },
        { "plain", "plain" }, { "%2520", "%20" }, { "\xc3\xa9", "\xc3\xa9" },
        { "%ed%a0%80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }
    };
    size_t i;
    for (i = 0; i < sizeof t / sizeof t[0]; i++) {
        char text[128];
        coai_status st;
        snprintf(text, sizeof text, "grpc-status: 13\r\ngrpc-message: %s\r\n", t[i].in);
        CHECKF(trailer(text, &st) == COAI_OK && strcmp(st.message, t[i].out) == 0,
               "'%s' -> '%s'", t[i].in, st.message);
        CHECK(status_clean(&st));
    }
    {   /* long messages are cut at a character boundary */
        coai_buf b = { 0 };
        coai_status st;
        coai_buf_puts(&b, "grpc-status: 2\r\ngrpc-message: ");
        for (i = 0; i < 2000; i++) coai_buf_puts(&b, i % 3 ? "%C3%A9" : "\xf0\x9f\x8c\x8d");
        CHECK(trailer((char *)b.data, &st) == COAI_OK && st.code == 2);
        CHECK(status_clean(&st) && strlen(st.message) > 500);
        coai_buf_free(&b);
    }
}

/* Build a google.rpc.Status with nanopb (the generated encoders), base64 it. */
static void b64_status(coai_buf *out, int code, const char *msg, const char *other_type,
                       const unsigned char *ed, size_t ed_n)
{
    google_rpc_Status s = google_rpc_Status_init_zero;
    google_protobuf_Any any[2];
    pb_bytes_array_t *v0 = (pb_bytes_array_t *)malloc(PB_BYTES_ARRAY_T_ALLOCSIZE(8));
    pb_bytes_array_t *v1 = (pb_bytes_array_t *)malloc(PB_BYTES_ARRAY_T_ALLOCSIZE(ed_n + 1));
    unsigned char raw[8192];
    pb_ostream_t os = pb_ostream_from_buffer(raw, sizeof raw);
    s.code = code;
    s.message = (char *)msg;
    v0->size = 3;
    memcpy(v0->bytes, "\x08\x01\x10", 3);
    any[0].type_url = (char *)other_type;
    any[0].value = v0;
    v1->size = (pb_size_t)ed_n;
    if (ed_n) memcpy(v1->bytes, ed, ed_n);
    any[1].type_url = (char *)"type.googleapis.com/aiserver.v1.ErrorDetails";
    any[1].value = v1;
    s.details = any;
    s.details_count = 2;
    CHECK(pb_encode(&os, google_rpc_Status_fields, &s));
    coai_base64_append(out, raw, os.bytes_written, 0);
    free(v0);
    free(v1);
}

static size_t encode_error_details(unsigned char *buf, size_t cap, int error, const char *title,
                                   const char *detail, int retry, int ninfo)
{
    aiserver_v1_ErrorDetails ed = aiserver_v1_ErrorDetails_init_zero;
    aiserver_v1_CustomErrorDetails_AdditionalInfoEntry info[2];
    pb_ostream_t os = pb_ostream_from_buffer(buf, cap);
    ed.error = (aiserver_v1_ErrorDetails_Error)error;
    ed.has_details = true;
    ed.details.title = (char *)title;
    ed.details.detail = (char *)detail;
    if (retry >= 0) {
        ed.details.has_is_retryable = true;
        ed.details.is_retryable = retry != 0;
    }
    info[0].key = (char *)"plan";
    info[0].value = (char *)"pro";
    info[1].key = (char *)"reset";
    info[1].value = (char *)"in 3\th";
    ed.details.additional_info = info;
    ed.details.additional_info_count = (pb_size_t)ninfo;
    CHECK(pb_encode(&os, aiserver_v1_ErrorDetails_fields, &ed));
    return os.bytes_written;
}

static void test_status_details(void)
{
    unsigned char ed[1024];
    size_t edn = encode_error_details(ed, sizeof ed, 41, "Usage limit", "Out of requests.\n", 1,
                                      2);
    coai_buf t = { 0 }, d = { 0 };
    coai_status st;

    /* structured decode with an unrelated Any first, additional_info, retryable */
    coai_buf_puts(&t, "grpc-status: 8\r\ngrpc-message: limit\r\ngrpc-status-details-bin: ");
    b64_status(&t, 8, "from status", "type.googleapis.com/google.rpc.DebugInfo", ed, edn);
    CHECK(trailer((char *)t.data, &st) == COAI_OK);
    CHECK(st.code == 8 && strcmp(st.message, "limit") == 0);
    CHECK(st.error == 41 && st.error_name && !strcmp(st.error_name, "ERROR_RESOURCE_EXHAUSTED"));
    CHECK(strcmp(st.title, "Usage limit") == 0);
    CHECKF(strcmp(st.detail, "Out of requests.  (plan: pro; reset: in 3 h)") == 0, "'%s'",
           st.detail);
    CHECK(st.retryable == 1 && status_clean(&st));
    coai_status_describe(&st, &d);
    CHECKF(strcmp((char *)d.data, "limit: Usage limit: Out of requests.  (plan: pro; reset: in 3"
                  " h) (grpc-status 8, ERROR_RESOURCE_EXHAUSTED)") == 0, "'%s'", (char *)d.data);

    /* without grpc-status / grpc-message the Status fills them; unpadded base64 is fine */
    coai_buf_reset(&t);
    coai_buf_puts(&t, "grpc-status-details-bin: ");
    edn = encode_error_details(ed, sizeof ed, 30, "", "", 0, 0);
    b64_status(&t, 9, "Outdated client", "x", ed, edn);
    while (t.data[t.len - 1] == '=') t.data[--t.len] = 0;
    CHECK(trailer((char *)t.data, &st) == COAI_OK);
    CHECK(st.code == 9 && strcmp(st.message, "Outdated client") == 0);
    CHECK(st.error == 30 && st.retryable == 0 && st.title[0] == 0);
    coai_buf_reset(&d);
    coai_status_describe(&st, &d);
    CHECK(strcmp((char *)d.data, "Outdated client (grpc-status 9, ERROR_OUTDATED_CLIENT)") == 0);

    /* unknown error enum value: number kept, no name */
    coai_buf_reset(&t);
    coai_buf_puts(&t, "grpc-status: 2\r\ngrpc-status-details-bin: ");
    edn = encode_error_details(ed, sizeof ed, 999, "T", "", -1, 0);
    b64_status(&t, 2, "", "x", ed, edn);
    CHECK(trailer((char *)t.data, &st) == COAI_OK && st.error == 999 && st.error_name == NULL);
    coai_buf_reset(&d);
    coai_status_describe(&st, &d);
    CHECK(strcmp((char *)d.data, "T (grpc-status 2, error 999)") == 0);

    /* bad base64: headers still count */
    CHECK(trailer("grpc-status: 9\r\ngrpc-message: m\r\ngrpc-status-details-bin: !!!!\r\n", &st)
          == COAI_ERR_PROTO && st.code == 9 && strcmp(st.message, "m") == 0 && st.error == 0);
    CHECK(trailer("grpc-status: 9\r\ngrpc-status-details-bin: QUJD=x\r\n", &st) ==
          COAI_ERR_PROTO && st.code == 9);
    CHECK(trailer("grpc-status: 9\r\ngrpc-status-details-bin: Q\r\n", &st) == COAI_ERR_PROTO);
    /* garbage Status bytes (ff ff ff: a varint that never ends) */
    CHECK(trailer("grpc-status: 14\r\ngrpc-message: down\r\ngrpc-status-details-bin: ////\r\n",
                  &st) == COAI_ERR_PROTO && st.code == 14 && !strcmp(st.message, "down"));
    CHECK(status_clean(&st));
    /* a Status whose ErrorDetails value is garbage: Status message still used */
    coai_buf_reset(&t);
    coai_buf_puts(&t, "grpc-status: 5\r\ngrpc-status-details-bin: ");
    b64_status(&t, 5, "not \x01 found", "x", (const unsigned char *)"\x12\x50\x0a", 3);
    CHECK(trailer((char *)t.data, &st) == COAI_ERR_PROTO && st.code == 5);
    CHECK(strcmp(st.message, "not   found") == 0 && st.error == 0);
    /* over the size cap: rejected without decoding */
    coai_buf_reset(&t);
    coai_buf_puts(&t, "grpc-status: 5\r\ngrpc-status-details-bin: ");
    while (t.len < 40 + COAI_MAX_STATUS_DETAILS * 2) coai_buf_puts(&t, "AAAA");
    CHECK(trailer((char *)t.data, &st) == COAI_ERR_TOO_BIG && st.code == 5);
    /* empty value: nothing to decode */
    CHECK(trailer("grpc-status: 5\r\ngrpc-status-details-bin:\r\n", &st) == COAI_OK);
    coai_buf_free(&t);
    coai_buf_free(&d);
}

/* ------------------------------------------------------------------ end-stream */

static coai_result endstream(const char *json, coai_status *st)
{
    size_t n = strlen(json);
    char *copy = (char *)malloc(n ? n : 1);
    coai_result r;
    memcpy(copy, json, n);
    memset(st, 0xAA, sizeof *st);
    r = coai_end_stream_parse(copy, n, st);
    free(copy);
    return r;
}

static void test_end_stream(void)
{
    static const char *const codes[] = {
        "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
        "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
        "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
        "unauthenticated"
    };
    coai_status st;
    coai_buf j = { 0 }, b = { 0 };
    unsigned char ed[512];
    size_t edn, i;
    CHECK(endstream("{}", &st) == COAI_OK && st.code == 0 && st.message[0] == 0);
    CHECK(endstream(" {\"metadata\":{\"x\":[\"y\"]}} ", &st) == COAI_OK && st.code == 0);
    for (i = 0; i < 16; i++) {
        char text[160];
        snprintf(text, sizeof text, "{\"error\":{\"code\":\"%s\",\"message\":\"m%zu\"}}", codes[i],
                 i);
        CHECKF(endstream(text, &st) == COAI_OK && st.code == (int)i + 1, "%s", codes[i]);
        {   /* gRPC names are the upper-cased Connect names, with CANCELLED spelled twice-l */
            char up[40];
            size_t k;
            for (k = 0; codes[i][k] && k < sizeof up - 1; k++)
                up[k] = (char)(codes[i][k] >= 'a' && codes[i][k] <= 'z' ? codes[i][k] - 32
                                                                         : codes[i][k]);
            up[k] = 0;
            if (i == 0) strcpy(up, "CANCELLED");
            CHECKF(!strcmp(coai_grpc_status_name((int)i + 1), up), "%s", up);
        }
    }
    CHECK(endstream("{\"error\":{\"code\":\"resource_exhausted\",\"message\":\"You've hit your "
                    "usage limit\\u0007\"},\"metadata\":{}}", &st) == COAI_OK);
    CHECK(st.code == 8 && strcmp(st.message, "You've hit your usage limit ") == 0);
    /* invalid shapes: never read as success */
    CHECK(endstream("{\"error\":null}", &st) == COAI_ERR_INVALID && st.code == 2);
    CHECK(endstream("{\"error\":{}}", &st) == COAI_ERR_INVALID && st.code == 2);
    CHECK(endstream("{\"error\":{\"code\":null}}", &st) == COAI_ERR_INVALID && st.code == 2);
    CHECK(endstream("{\"error\":{\"code\":\"ok\"}}", &st) == COAI_ERR_INVALID && st.code == 2);
    CHECK(endstream("{\"error\":{\"code\":\"bogus\",\"message\":\"x\"}}", &st) ==
          COAI_ERR_INVALID && st.code == 2 && !strcmp(st.message, "x"));
    CHECK(endstream("{\"error\":\"resource_exhausted\"}", &st) == COAI_ERR_INVALID);
    CHECK(endstream("", &st) == COAI_ERR_JSON && st.code == 2 && status_clean(&st));
    CHECK(endstream("[]", &st) == COAI_ERR_JSON && st.code == 2);
    CHECK(endstream("{\"error\":{\"code\":\"internal\"}", &st) == COAI_ERR_JSON && st.code == 2);
    CHECK(endstream("{\"a\":1} x", &st) == COAI_ERR_JSON);
    CHECK(coai_end_stream_parse(NULL, 0, &st) == COAI_ERR_JSON && st.code == 2);
    /* details: ErrorDetails as unpadded standard base64, plus an unrelated detail */
    edn = encode_error_details(ed, sizeof ed, 40, "Model deprecated", "Use another model.", 0, 1);
    coai_buf_puts(&j, "{\"error\":{\"code\":\"failed_precondition\",\"message\":\"gone\","
                      "\"details\":[{\"type\":\"google.rpc.RetryInfo\",\"value\":\"CAE\"},"
                      "{\"type\":\"aiserver.v1.ErrorDetails\",\"value\":\"");
    coai_base64_append(&b, ed, edn, 0);
    while (b.len && b.data[b.len - 1] == '=') b.len--;
    coai_buf_append(&j, b.data, b.len);
    coai_buf_puts(&j, "\",\"debug\":{}}]}}");
    CHECK(endstream((char *)j.data, &st) == COAI_OK);
    CHECK(st.code == 9 && !strcmp(st.message, "gone") && st.error == 40);
    CHECK(st.error_name && !strcmp(st.error_name, "ERROR_DEPRECATED") && st.retryable == 0);
    CHECK(!strcmp(st.title, "Model deprecated") && !strcmp(st.detail,
          "Use another model. (plan: pro)"));
    /* bad details: status still filled */
    CHECK(endstream("{\"error\":{\"code\":\"internal\",\"message\":\"boom\",\"details\":[{\"type"
                    "\":\"aiserver.v1.ErrorDetails\",\"value\":\"!!\"}]}}", &st) ==
          COAI_ERR_PROTO && st.code == 13 && !strcmp(st.message, "boom"));
    CHECK(endstream("{\"error\":{\"code\":\"internal\",\"details\":[{\"type\":\"aiserver.v1."
                    "ErrorDetails\",\"value\":\"/w\"}]}}", &st) == COAI_ERR_PROTO && st.code == 13);
    CHECK(endstream("{\"error\":{\"code\":\"internal\",\"details\":{}}}", &st) == COAI_OK);
    coai_buf_free(&j);
    coai_buf_free(&b);
}

static void test_names(void)
{
    size_t n = 0, count = 0;
    char *proto = test_read_file("proto/aiserver.proto", &n), *p, *blk;
    CHECK(!strcmp(coai_grpc_status_name(0), "OK"));
    CHECK(!strcmp(coai_grpc_status_name(8), "RESOURCE_EXHAUSTED"));
    CHECK(!strcmp(coai_grpc_status_name(16), "UNAUTHENTICATED"));
    CHECK(!strcmp(coai_grpc_status_name(17), "UNRECOGNIZED"));
    CHECK(!strcmp(coai_grpc_status_name(-1), "UNRECOGNIZED"));
    CHECK(coai_error_details_name(-1) == NULL && coai_error_details_name(54) == NULL);
    CHECKF(proto != NULL, "proto/aiserver.proto (run from the repo root)");
    if (!proto) return;
    /* every "ERROR_X = N;" of enum ErrorDetails.Error maps both ways */
    blk = strstr(proto, "enum Error {");
    CHECK(blk != NULL);
    for (p = blk; p && *p && *p != '}'; p = strchr(p + 1, '\n')) {
        char name[128];
        int v;
        if (sscanf(p, " %127[A-Z0-9_] = %d;", name, &v) == 2 && !strncmp(name, "ERROR_", 6)) {
            CHECKF(coai_error_details_name(v) && !strcmp(coai_error_details_name(v), name),
                   "%d: %s", v, name);
            count++;
        }
        if (strchr(p + 1, '\n') && strchr(p + 1, '\n') > strchr(p + 1, '}')) break;
    }
    CHECKF(count == 54, "%zu enum values", count);
    CHECK(coai_error_details_name((int)count) == NULL);
    free(proto);
}

int main(void)
{
    cJSON *sf = load_json("server_frames.json");
    cJSON *cm = load_json("client_messages.json");
    cJSON *ba = load_json("bidi_append.json");
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(sf, "frames");
    build_stream(frames);
    test_split_invariance();
    test_zero_copy();
    test_truncation();
    test_header_limits();
    test_flags();
    test_after_end();
    test_zero_length_frames();
    test_growth();
    test_encode(cm, ba);
    test_trailer_vectors(frames);
    test_trailer_syntax();
    test_percent();
    test_status_details();
    test_end_stream();
    test_names();
    run_free(&g_expect);
    free(g_stream);
    cJSON_Delete(sf);
    cJSON_Delete(cm);
    cJSON_Delete(ba);
    TEST_END();
}
