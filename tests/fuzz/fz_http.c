/* fz_http.c - libFuzzer target for the HTTP part: the request head parser, the chunked
 * decoder, the response head parser, query parameters and cookies, each run on the whole
 * input and checked against
 * its own properties (prefixes agree with the whole, any split of a chunked body decodes
 * to the same bytes, views stay inside the input). Any violation aborts. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"
#include <stdlib.h>
#include <string.h>

#define FZ_ASSERT(c) do { if (!(c)) abort(); } while (0)

static int fz_inside(coai_str v, const char *buf, size_t len)
{
    if (!v.ptr) return v.len == 0;
    return v.ptr >= buf && v.len <= len && (size_t)(v.ptr - buf) <= len - v.len;
}

static void fz_headers(const coai_http_header *h, size_t n, const char *buf, size_t head)
{
    size_t i;
    FZ_ASSERT(n <= COAI_HTTP_MAX_HEADERS);
    for (i = 0; i < n; i++) {
        FZ_ASSERT(h[i].name.len > 0 && fz_inside(h[i].name, buf, head));
        FZ_ASSERT(h[i].value.ptr && fz_inside(h[i].value, buf, head));
    }
}

/* Decode body[0..n) once whole and once cut into pieces chosen by seed; both must agree. */
static void fz_chunked(const uint8_t *body, size_t n, unsigned seed, size_t max_body)
{
    coai_chunked_decoder a, b;
    char *x = calloc(1, n ? n : 1), *y = calloc(1, n ? n : 1);
    size_t used_a = 0, out_a = 0, off = 0, out_b = 0, used_b = 0;
    coai_result ra, rb = COAI_MORE;
    if (!x || !y) { free(x); free(y); return; }
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.max_body = b.max_body = max_body;
    if (n) memcpy(x, body, n);
    if (n) memcpy(y, body, n);
    ra = coai_chunked_feed(&a, x, n, &used_a, &out_a);
    FZ_ASSERT(ra == COAI_MORE || ra == COAI_DONE || ra < 0);
    FZ_ASSERT(used_a <= n && out_a <= used_a);
    FZ_ASSERT(ra != COAI_MORE || used_a == n);
    if (max_body) FZ_ASSERT(out_a <= max_body);
    while (off < n) {
        size_t piece, used, out;
        char *p;
        seed = seed * 1103515245u + 12345u;
        piece = 1 + (seed >> 16) % (seed & 0x100 ? 7 : 300);
        if (piece > n - off) piece = n - off;
        /* each piece in its own exact-size heap block so ASan sees over-reads */
        p = malloc(piece);
        if (!p) break;
        memcpy(p, body + off, piece);
        rb = coai_chunked_feed(&b, p, piece, &used, &out);
        FZ_ASSERT(used <= piece && out <= used);
        FZ_ASSERT(out_b + out <= out_a || ra < 0);
        if (out_b + out <= out_a) FZ_ASSERT(memcmp(x + out_b, p, out) == 0);
        out_b += out;
        used_b += used;
        free(p);
        if (rb != COAI_MORE) break;
        FZ_ASSERT(used == piece);
        off += piece;
    }
    if (n == 0) rb = coai_chunked_feed(&b, y, 0, &used_b, &out_b);
    FZ_ASSERT(rb == ra && used_b == used_a && out_b == out_a);
    free(x);
    free(y);
}

static void fz_request(const uint8_t *data, size_t size, unsigned seed)
{
    static coai_http_request rq, rq2;
    char *buf = calloc(1, size ? size : 1);
    int st, st2, r, r2;
    size_t p, step;
    if (!buf) return;
    if (size) memcpy(buf, data, size);
    r = coai_http_parse_request(buf, size, &rq, &st);
    if (r > COAI_MORE) {
        FZ_ASSERT(r > COAI_MORE && (size_t)r <= size && (size_t)r <= COAI_HTTP_MAX_HEAD);
        FZ_ASSERT(st == 0 && rq.content_length >= -1 && rq.host_count <= 1);
        FZ_ASSERT(!(rq.chunked && rq.content_length >= 0));
        FZ_ASSERT(rq.minor_version == 1 || !rq.chunked);
        FZ_ASSERT(rq.method.len && rq.target.len && fz_inside(rq.target, buf, (size_t)r));
        FZ_ASSERT(rq.path.len <= rq.target.len);
        fz_headers(rq.headers, rq.header_count, buf, (size_t)r);
        FZ_ASSERT(fz_inside(rq.host, buf, (size_t)r) && fz_inside(rq.origin, buf, (size_t)r));
        if (rq.chunked) fz_chunked(data + r, size - (size_t)r, seed, seed & 1 ? 0 : 4096);
    } else if (r == COAI_MORE) {
        FZ_ASSERT(st == 0 && size < COAI_HTTP_MAX_HEAD);
    } else {
        FZ_ASSERT((r == COAI_ERR_HTTP && (st == 400 || st == 501 || st == 505)) ||
                  (r == COAI_ERR_TOO_BIG && (st == 414 || st == 431)));
    }
    /* A prefix gives COAI_MORE or the same outcome as the whole input. */
    /* Re-parsing prefixes is the costly part: do it for one input in four. */
    step = size < 64 ? 1 : size / 31 + 1;
    for (p = (seed >> 8 & 3) ? size : (size_t)seed % step; p < size; p += step) {
        r2 = coai_http_parse_request(buf, p, &rq2, &st2);
        if (r > COAI_MORE && (size_t)r <= p)
            FZ_ASSERT(r2 == r && rq2.header_count == rq.header_count);
        else if (r > COAI_MORE) FZ_ASSERT(r2 == COAI_MORE);
        else FZ_ASSERT(r2 == COAI_MORE || (r2 == r && st2 == st));
    }
    free(buf);
}

static void fz_response(const uint8_t *data, size_t size, unsigned seed)
{
    static coai_http_response rs, rs2;
    char *buf = calloc(1, size ? size : 1);
    int r, r2;
    size_t p, step;
    if (!buf) return;
    if (size) memcpy(buf, data, size);
    r = coai_http_parse_response(buf, size, &rs);
    if (r > COAI_MORE) {
        FZ_ASSERT((size_t)r <= size && rs.status >= 100 && rs.status <= 599);
        FZ_ASSERT(rs.content_length >= -1 && !(rs.chunked && rs.content_length >= 0));
        FZ_ASSERT(!rs.no_body || (!rs.chunked && rs.content_length == 0));
        fz_headers(rs.headers, rs.header_count, buf, (size_t)r);
        if (rs.chunked) fz_chunked(data + r, size - (size_t)r, seed, 0);
    } else {
        FZ_ASSERT(r == COAI_MORE || r == COAI_ERR_HTTP || r == COAI_ERR_TOO_BIG);
    }
    /* Re-parsing prefixes is the costly part: do it for one input in four. */
    step = size < 64 ? 1 : size / 31 + 1;
    for (p = (seed >> 8 & 3) ? size : (size_t)seed % step; p < size; p += step) {
        r2 = coai_http_parse_response(buf, p, &rs2);
        if (r > COAI_MORE && (size_t)r <= p) FZ_ASSERT(r2 == r);
        else if (r > COAI_MORE) FZ_ASSERT(r2 == COAI_MORE);
        else FZ_ASSERT(r2 == COAI_MORE || r2 == r);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned seed = 2166136261u;
    size_t i;
    for (i = 0; i < size && i < 64; i++) seed = (seed ^ data[i]) * 16777619u;
    fz_request(data, size, seed);
    fz_chunked(data, size, seed, seed & 2 ? 0 : 100);
    fz_response(data, size, seed);
    if (size) {
        coai_str s;
        s.ptr = (const char *)data;
        s.len = size;
        coai_str ex[2];
        const char *nl = memchr(data, '\n', size);
        (void)coai_http_host_allowed(s, NULL, 0, 8080);
        (void)coai_http_origin_allowed(s, 8080, NULL, 0);
        /* allow-list entries from the input too (NAME or NAME:PORT pins): "entry\nhost" */
        ex[0] = s;
        ex[1].ptr = "box.test:9000";
        ex[1].len = 13;
        if (nl) {
            coai_str h;
            ex[0].len = (size_t)(nl - (const char *)data);
            h.ptr = nl + 1;
            h.len = size - ex[0].len - 1;
            (void)coai_http_host_allowed(h, ex, 2, 0);
            (void)coai_http_origin_allowed(h, 0, ex, 2);
        } else {
            (void)coai_http_host_allowed(s, ex, 2, 0);
        }
        (void)coai_http_is_json(s);
        (void)coai_http_bearer(s);
        {   /* query parameters and cookies: views inside the input, after the name */
            coai_str q = coai_http_query_param(s, "key"), k = coai_http_cookie(s, "sid");
            FZ_ASSERT(fz_inside(q, (const char *)data, size));
            FZ_ASSERT(fz_inside(k, (const char *)data, size));
            FZ_ASSERT(!q.ptr || (q.ptr - (const char *)data >= 5 && q.ptr[-1] == '='
                                 && memcmp(q.ptr - 4, "key", 3) == 0));
            FZ_ASSERT(!k.ptr || (k.ptr - (const char *)data >= 4 && k.ptr[-1] == '='
                                 && memcmp(k.ptr - 4, "sid", 3) == 0));
            FZ_ASSERT(!q.ptr || !memchr(q.ptr, '&', q.len));
            FZ_ASSERT(!k.ptr || !memchr(k.ptr, ';', k.len));
        }
    }
    return 0;
}
