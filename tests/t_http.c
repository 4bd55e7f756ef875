/* t_http.c - HTTP/1.1 request/response heads, chunked bodies, Host/Origin/JSON/auth checks.
 * Every input is placed right before a PROT_NONE page, so reading one byte past it crashes. */
#define _DEFAULT_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"

/* ---- guard page ---------------------------------------------------------------------- */

#define ARENA (512u * 1024u)
static char *arena;             /* ARENA writable bytes, then a PROT_NONE page */

static void guard_init(void)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, ARENA + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + ARENA, pg, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    arena = p;
}

/* Copy n bytes so that they end exactly at the guard page. */
static char *place(const void *s, size_t n)
{
    char *p = arena + ARENA - n;
    if (n > ARENA) exit(3);
    memcpy(p, s, n);
    return p;
}

static coai_str S(const char *s) { return coai_str_c(s); }

static int view_is(coai_str v, const char *lit)
{
    return v.ptr != NULL && v.len == strlen(lit) && memcmp(v.ptr, lit, v.len) == 0;
}

/* ---- request parser ------------------------------------------------------------------ */

/* Parse s[0..n) whole, and check that every prefix gives COAI_MORE or the same outcome.
 * Prefixes are all tried for small inputs, a sample for big ones. Returns the whole result. */
static int req_n(const char *s, size_t n, coai_http_request *rq, int *status)
{
    static coai_http_request tmp;
    int r = coai_http_parse_request(place(s, n), n, rq, status), st2, bad = 0;
    size_t p, step = n <= 4096 ? 1 : 61;
    for (p = 0; p < n; p += step) {
        int r2 = coai_http_parse_request(place(s, p), p, &tmp, &st2);
        if (r > COAI_MORE && (size_t)r <= p) {
            if (r2 != r || tmp.header_count != rq->header_count) bad++;
        } else if (r > COAI_MORE) {
            if (r2 != COAI_MORE || st2 != 0) bad++;
        } else if (r2 != COAI_MORE && (r2 != r || st2 != *status)) {
            bad++;
        }
    }
    CHECKF(bad == 0, "%d prefixes disagree (whole: %d/%d) for %.40s", bad, r, *status, s);
    /* Re-parse whole so the views point at the placed copy of the full input. */
    return coai_http_parse_request(place(s, n), n, rq, status);
}

static coai_http_request RQ;

static int req(const char *s, int *status) { return req_n(s, strlen(s), &RQ, status); }

/* Expect an error with this HTTP status. */
static void req_err(const char *s, int want_status, int line)
{
    int st = -1, r = req(s, &st);
    CHECKF(r < 0 && st == want_status, "line %d: got %d status %d, want %d for %.60s", line, r,
           st, want_status, s);
    CHECKF(r == (want_status == 414 || want_status == 431 ? COAI_ERR_TOO_BIG : COAI_ERR_HTTP),
           "line %d: result %d", line, r);
}
#define REQ_ERR(s, st) req_err(s, st, __LINE__)

static void req_ok(const char *s, int line)
{
    int st = -1, r = req(s, &st);
    CHECKF(r == (int)strlen(s) && st == 0, "line %d: got %d status %d for %.60s", line, r, st, s);
}
#define REQ_OK(s) req_ok(s, __LINE__)

static void test_request_basic(void)
{
    int st;
    const char *get = "GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n";
    const char *post = "POST /v1/chat/completions HTTP/1.1\r\n"
                       "Host: 127.0.0.1:8080\r\n"
                       "Content-Type: application/json; charset=utf-8\r\n"
                       "Authorization:   Bearer sk-123  \r\n"
                       "Origin: http://localhost:8080\r\n"
                       "Content-Length: 0042\r\n"
                       "X-Empty:\r\n"
                       "X-Obs: caf\xc3\xa9\tok\r\n"
                       "\r\n";
    CHECK(req(get, &st) == (int)strlen(get) && st == 0);
    CHECK(coai_str_eq(RQ.method, "GET"));
    CHECK(coai_str_eq(RQ.target, "/v1/models?x=1"));
    CHECK(coai_str_eq(RQ.path, "/v1/models"));
    CHECK(RQ.minor_version == 1 && RQ.header_count == 1);
    CHECK(view_is(RQ.host, "localhost:8080") && RQ.host_count == 1);
    CHECK(RQ.content_length == -1 && !RQ.chunked && RQ.keep_alive && !RQ.expect_continue);
    CHECK(RQ.origin.ptr == NULL && RQ.content_type.ptr == NULL && RQ.authorization.ptr == NULL);

    CHECK(req(post, &st) == (int)strlen(post) && st == 0);
    CHECK(coai_str_eq(RQ.method, "POST") && coai_str_eq(RQ.path, "/v1/chat/completions"));
    CHECK(RQ.header_count == 7);
    CHECK(RQ.content_length == 42);
    CHECK(view_is(RQ.content_type, "application/json; charset=utf-8"));
    CHECK(view_is(RQ.authorization, "Bearer sk-123"));
    CHECK(view_is(RQ.origin, "http://localhost:8080"));
    CHECK(view_is(RQ.headers[5].name, "X-Empty") && RQ.headers[5].value.ptr != NULL &&
          RQ.headers[5].value.len == 0);
    CHECK(view_is(RQ.headers[6].value, "caf\xc3\xa9\tok"));
    /* Views point into the caller's buffer. */
    CHECK(RQ.method.ptr == arena + ARENA - strlen(post));
    CHECK(view_is(coai_http_header_get(RQ.headers, RQ.header_count, "CONTENT-length"), "0042"));
    CHECK(coai_http_header_get(RQ.headers, RQ.header_count, "x-missing").ptr == NULL);
    CHECK(coai_http_header_get(RQ.headers, RQ.header_count, "x-empty").ptr != NULL);
    CHECK(coai_http_header_get(RQ.headers, RQ.header_count, "x-emptyy").ptr == NULL);

    /* keep-alive rules */
    REQ_OK("GET / HTTP/1.0\r\n\r\n");
    CHECK(RQ.minor_version == 0 && !RQ.keep_alive && RQ.host.ptr == NULL && RQ.host_count == 0);
    REQ_OK("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    CHECK(RQ.keep_alive);
    REQ_OK("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n");
    CHECK(!RQ.keep_alive);
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    CHECK(!RQ.keep_alive);
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade , CLOSE\r\n\r\n");
    CHECK(!RQ.keep_alive);
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\nConnection: keep-alive\r\n\r\n");
    CHECK(RQ.keep_alive);
    /* Expect */
    REQ_OK("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
    CHECK(RQ.expect_continue && RQ.content_length == 3);
    REQ_OK("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    CHECK(!RQ.expect_continue);
    REQ_OK("POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n");
    CHECK(!RQ.expect_continue);
    /* chunked */
    REQ_OK("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
    CHECK(RQ.chunked && RQ.content_length == -1);
    /* empty lines before the request line are skipped but counted */
    REQ_OK("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(coai_str_eq(RQ.method, "GET"));
    REQ_OK("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(coai_str_eq(RQ.target, "*"));
    /* value trimming; an empty Host is parsed (the allow-list rejects it) */
    REQ_OK("GET / HTTP/1.1\r\nHost: \t localhost \t\r\n\r\n");
    CHECK(view_is(RQ.host, "localhost"));
    REQ_OK("GET / HTTP/1.1\r\nHost:\r\n\r\n");
    CHECK(RQ.host.ptr != NULL && RQ.host.len == 0 && RQ.host_count == 1);
    CHECK(!coai_http_host_allowed(RQ.host, NULL, 0, 8080));
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    CHECK(RQ.content_length == 0);
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n");
    CHECK(RQ.content_length == INT64_MAX);
    REQ_OK("GET / HTTP/1.1\r\nHost: a\r\nX-Tchars: !#$%&'*+-.^_`|~09azAZ\r\n"
           "!#$%&'*+-.^_`|~: v\r\n\r\n");
    CHECK(RQ.header_count == 3);
}

static void test_request_errors(void)
{
    /* 400: syntax */
    REQ_ERR("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /  HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /\r\n\r\n", 400);
    REQ_ERR("GET / http/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/11.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHo\x01st: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\x1b\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\n\tHost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost localhost\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nX-\xc3\xa9: 1\r\n\r\n", 400);
    /* line endings: bare LF is rejected, CR must be followed by LF */
    REQ_ERR("GET / HTTP/1.1\nHost: a\n\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\n\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\n\rx", 400);
    REQ_ERR("\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    /* Host */
    REQ_ERR("GET / HTTP/1.1\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nX-Host: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n", 400);
    /* other singletons */
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nOrigin: x\r\nOrigin: x\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nContent-Type: a\r\ncontent-type: b\r\n\r\n", 400);
    REQ_ERR("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nAuthorization: a\r\n\r\n", 400);
    /* Content-Length */
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1e3\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400);
    /* Transfer-Encoding (nginx-tests body_chunked.t) */
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
            "Content-Length: 10\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n"
            "Transfer-Encoding: chunked\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
            "Transfer-Encoding: chunked\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400);
    /* absolute-form and other non-origin targets */
    REQ_ERR("POST http://evil/v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n\r\n", 400);
    REQ_ERR("CONNECT localhost:443 HTTP/1.1\r\nHost: localhost\r\n\r\n", 400);
    REQ_ERR("GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    REQ_ERR("GET v1/models HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    /* 501 */
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501);
    REQ_ERR("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    /* 505 */
    REQ_ERR("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    REQ_ERR("GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505);
    REQ_ERR("GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505);
}

/* Limits: 414 / 431 at exact boundaries. */
static void test_request_limits(void)
{
    coai_buf b = {0};
    int st, r, i;
    size_t base;

    /* request line of exactly COAI_HTTP_MAX_LINE bytes, then one more */
    coai_buf_puts(&b, "GET /");
    while (b.len < COAI_HTTP_MAX_LINE - 9) coai_buf_putc(&b, 'a');
    coai_buf_puts(&b, " HTTP/1.1");
    CHECK(b.len == COAI_HTTP_MAX_LINE);
    coai_buf_puts(&b, "\r\nHost: a\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECKF(r == (int)b.len, "r=%d st=%d", r, st);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "GET /");
    while (b.len < COAI_HTTP_MAX_LINE - 8) coai_buf_putc(&b, 'a');
    coai_buf_puts(&b, " HTTP/1.1\r\nHost: a\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECKF(r == COAI_ERR_TOO_BIG && st == 414, "r=%d st=%d", r, st);
    /* a request line that never ends: 414 as soon as it is too long */
    r = coai_http_parse_request(place(b.data, COAI_HTTP_MAX_LINE + 1), COAI_HTTP_MAX_LINE + 1,
                                &RQ, &st);
    CHECK(r == COAI_ERR_TOO_BIG && st == 414);
    r = coai_http_parse_request(place(b.data, COAI_HTTP_MAX_LINE), COAI_HTTP_MAX_LINE, &RQ, &st);
    CHECK(r == COAI_MORE && st == 0);

    /* header line of exactly COAI_HTTP_MAX_LINE bytes, then one more */
    coai_buf_reset(&b);
    coai_buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
    base = b.len;
    coai_buf_puts(&b, "X-Big: ");
    while (b.len - base < COAI_HTTP_MAX_LINE) coai_buf_putc(&b, 'b');
    coai_buf_puts(&b, "\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECKF(r == (int)b.len && RQ.headers[1].value.len == COAI_HTTP_MAX_LINE - 7, "r=%d", r);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
    base = b.len;
    coai_buf_puts(&b, "X-Big: ");
    while (b.len - base < COAI_HTTP_MAX_LINE + 1) coai_buf_putc(&b, 'b');
    coai_buf_puts(&b, "\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECKF(r == COAI_ERR_TOO_BIG && st == 431, "r=%d st=%d", r, st);

    /* exactly COAI_HTTP_MAX_HEADERS headers, then one more */
    coai_buf_reset(&b);
    coai_buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (i = 1; i < COAI_HTTP_MAX_HEADERS; i++) coai_buf_printf(&b, "X-%d: %d\r\n", i, i);
    coai_buf_puts(&b, "\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECK(r == (int)b.len && RQ.header_count == COAI_HTTP_MAX_HEADERS);
    CHECK(view_is(RQ.headers[COAI_HTTP_MAX_HEADERS - 1].value, "99"));
    b.len -= 2;
    coai_buf_puts(&b, "X-Extra: 1\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECKF(r == COAI_ERR_TOO_BIG && st == 431, "r=%d st=%d", r, st);

    /* a head of exactly COAI_HTTP_MAX_HEAD bytes, then one more */
    for (i = 0; i < 2; i++) {
        size_t want = COAI_HTTP_MAX_HEAD + (size_t)i, k;
        coai_buf_reset(&b);
        coai_buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
        while (want - b.len - 2 > 8000) {
            coai_buf_puts(&b, "X-Fill: ");
            for (k = 0; k < 7990; k++) coai_buf_putc(&b, 'f');
            coai_buf_puts(&b, "\r\n");
        }
        coai_buf_puts(&b, "X-Last: ");
        while (b.len < want - 4) coai_buf_putc(&b, 'l');
        coai_buf_puts(&b, "\r\n\r\n");
        CHECK(b.len == want);
        r = req_n((char *)b.data, b.len, &RQ, &st);
        if (i == 0) CHECKF(r == (int)COAI_HTTP_MAX_HEAD && st == 0, "r=%d st=%d", r, st);
        else CHECKF(r == COAI_ERR_TOO_BIG && st == 431, "r=%d st=%d", r, st);
    }
    /* many empty lines before the request count toward the head */
    coai_buf_reset(&b);
    while (b.len < COAI_HTTP_MAX_HEAD) coai_buf_puts(&b, "\r\n");
    coai_buf_puts(&b, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    r = req_n((char *)b.data, b.len, &RQ, &st);
    CHECK(r == COAI_ERR_TOO_BIG && st == 431);
    coai_buf_free(&b);
}

/* Byte-by-byte delivery into a growing buffer ends in the same parse. */
static void test_request_incremental(void)
{
    const char *s = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8080\r\n"
                    "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    size_t n = strlen(s), head = n - 2, i;
    int st, r = 0, more = 0;
    for (i = 1; i <= n; i++) {
        r = coai_http_parse_request(place(s, i), i, &RQ, &st);
        if (r == COAI_MORE) more++;
        else break;
    }
    CHECK(i == head && r == (int)head && more == (int)head - 1);
    CHECK(RQ.content_length == 2 && view_is(RQ.host, "localhost:8080"));
}

/* Pipelined requests in one buffer, with Content-Length and chunked bodies. */
static void test_pipeline(void)
{
    coai_buf in = {0};
    char *p;
    size_t off = 0, n, k, sizes[3] = { 10, 1280, 5120 }, i;
    int st, r;
    coai_buf_puts(&in, "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
    for (i = 0; i < 3; i++) {
        coai_buf_printf(&in, "POST /c%zu HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                        i);
        coai_buf_printf(&in, "%zx\r\n", sizes[i]);
        for (k = 0; k < sizes[i]; k++) coai_buf_putc(&in, 'A' + (int)(k % 26));
        coai_buf_puts(&in, "\r\n0\r\n\r\n");
    }
    coai_buf_puts(&in, "GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    n = in.len;
    p = place(in.data, n);
    r = coai_http_parse_request(p, n, &RQ, &st);
    CHECK(r > COAI_MORE && coai_str_eq(RQ.path, "/a") && RQ.content_length == 5);
    off = (size_t)r;
    CHECK(memcmp(p + off, "hello", 5) == 0);
    off += 5;
    for (i = 0; i < 3; i++) {
        coai_chunked_decoder d;
        size_t used, out;
        char want[16];
        int ok = 1;
        memset(&d, 0, sizeof d);
        r = coai_http_parse_request(p + off, n - off, &RQ, &st);
        snprintf(want, sizeof want, "/c%zu", i);
        CHECK(r > COAI_MORE && coai_str_eq(RQ.path, want) && RQ.chunked);
        if (r <= COAI_MORE) break;
        off += (size_t)r;
        CHECK(coai_chunked_feed(&d, p + off, n - off, &used, &out) == COAI_DONE);
        CHECK(out == sizes[i]);
        for (k = 0; k < out; k++) ok &= p[off + k] == 'A' + (int)(k % 26);
        CHECK(ok);
        off += used;
    }
    r = coai_http_parse_request(p + off, n - off, &RQ, &st);
    CHECK(r == (int)(n - off) && coai_str_eq(RQ.path, "/last") && !RQ.keep_alive);
    coai_buf_free(&in);
}

/* ---- chunked decoder ----------------------------------------------------------------- */

typedef struct dec_out {
    int r;                      /* final result */
    size_t consumed;            /* input bytes used in total */
    coai_buf payload;
} dec_out;

/* Feed in[0..n) in pieces cut at cuts[0..ncut) (ascending), each piece placed before the
 * guard page, collecting the payload. Stops at DONE or an error. */
static void dec_run(const char *in, size_t n, const size_t *cuts, size_t ncut, size_t max_body,
                    dec_out *o)
{
    coai_chunked_decoder d;
    size_t start = 0, i;
    memset(&d, 0, sizeof d);
    d.max_body = max_body;
    coai_buf_reset(&o->payload);
    o->r = COAI_MORE;
    o->consumed = 0;
    for (i = 0; i <= ncut; i++) {
        size_t end = i < ncut ? cuts[i] : n, used = 99, out = 99;
        char *p = place(in + start, end - start);
        memset(p - 64, 0xAA, 64);
        o->r = coai_chunked_feed(&d, p, end - start, &used, &out);
        coai_buf_append(&o->payload, p, out);
        o->consumed += used;
        if (o->r != COAI_MORE) break;
        if (used != end - start) { o->r = -100; break; }   /* MORE must consume all */
        start = end;
    }
    if (o->r == COAI_DONE || o->r < 0) {
        /* Done/error state is sticky and consumes nothing more. */
        size_t used = 7, out = 7;
        char tail[4] = "0\r\n";
        coai_result again = coai_chunked_feed(&d, tail, 3, &used, &out);
        if (again != o->r || used != 0 || out != 0) o->r = -101;
    }
}

/* Decode whole, byte by byte and split at every offset; all must agree. */
static void dec_check(const char *in, size_t n, size_t max_body, int want_r, const char *want,
                      size_t want_consumed, int line)
{
    dec_out whole = {0}, o = {0};
    size_t *cuts = malloc((n + 1) * sizeof *cuts), i, bad = 0;
    dec_run(in, n, NULL, 0, max_body, &whole);
    CHECKF(whole.r == want_r, "line %d: result %d want %d", line, whole.r, want_r);
    if (want) CHECKF(whole.payload.len == strlen(want) &&
                     memcmp(whole.payload.data, want, whole.payload.len) == 0,
                     "line %d: payload %zu bytes", line, whole.payload.len);
    if (want_r == COAI_DONE)
        CHECKF(whole.consumed == want_consumed, "line %d: consumed %zu want %zu", line,
               whole.consumed, want_consumed);
    for (i = 0; i + 1 < n; i++) cuts[i] = i + 1;
    dec_run(in, n, cuts, n ? n - 1 : 0, max_body, &o);
    CHECKF(o.r == whole.r && o.consumed == whole.consumed && o.payload.len == whole.payload.len &&
           memcmp(o.payload.data, whole.payload.data, o.payload.len) == 0,
           "line %d: byte-by-byte differs (%d)", line, o.r);
    if (n <= 20000) {
        for (i = 1; i < n; i++) {
            dec_run(in, n, &i, 1, max_body, &o);
            if (o.r != whole.r || o.consumed != whole.consumed ||
                o.payload.len != whole.payload.len ||
                memcmp(o.payload.data, whole.payload.data, o.payload.len) != 0)
                bad++;
        }
        CHECKF(bad == 0, "line %d: %zu split points differ", line, bad);
    }
    free(cuts);
    coai_buf_free(&whole.payload);
    coai_buf_free(&o.payload);
}
#define DEC_OK(s, want, consumed) dec_check(s, strlen(s), 0, COAI_DONE, want, consumed, __LINE__)
#define DEC_ERR(s, r) dec_check(s, strlen(s), 0, r, NULL, 0, __LINE__)

static void test_chunked(void)
{
    const char *next = "GET / HTTP/1.1\r\n";
    coai_buf b = {0};
    size_t i;
    DEC_OK("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", 26);
    DEC_OK("0\r\n\r\n", "", 5);
    DEC_OK("A\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n", "0123456789abcdefghij", 35);
    DEC_OK("5;name=value;x=\"q;\"\r\nhello\r\n0 ; last\r\n\r\n", "hello", 40);
    DEC_OK("5 \t;ext\r\nhello\r\n0\r\n\r\n", "hello", 21);
    DEC_OK("5  \r\nhello\r\n0\r\n\r\n", "hello", 17);
    DEC_OK("0000000000000005\r\nhello\r\n0\r\n\r\n", "hello", 30);
    DEC_OK("5\r\nhello\r\n0\r\nX-Trailer: 1\r\nY: caf\xc3\xa9\r\n\r\n", "hello", 39);
    /* the next pipelined request is left alone */
    coai_buf_puts(&b, "3\r\nabc\r\n0\r\n\r\n");
    coai_buf_puts(&b, next);
    dec_check((char *)b.data, b.len, 0, COAI_DONE, "abc", 13, __LINE__);

    /* picohttpparser: 16 hex digits are fine (wait for data), 17 are not */
    DEC_ERR("fffffffffffffffff\r\n", COAI_ERR_HTTP);
    DEC_ERR("00000000000000005\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    dec_check("ffffffffffffffff\r\nabc", 21, 0, COAI_MORE, "abc", 0, __LINE__);
    /* bad hex and bad framing */
    DEC_ERR("g\r\n", COAI_ERR_HTTP);
    DEC_ERR("\r\n", COAI_ERR_HTTP);
    DEC_ERR(" 5\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("-5\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("0x5\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5 x\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5;a\x01\r\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    /* picohttpparser: bare LF cannot be used in a chunk header */
    DEC_ERR("5\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5;ext\nhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5\r\nhello\r\n0\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5\rhello\r\n0\r\n\r\n", COAI_ERR_HTTP);
    /* nginx-tests: runaway chunk (size 4, more data sent); missing CRLF after data */
    DEC_ERR("4\r\nSEE-THIS\r\n0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5\r\nhello0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5\r\nhello\r0\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("5\r\nhello\n0\r\n\r\n", COAI_ERR_HTTP);
    /* trailers */
    DEC_ERR("0\r\nX: 1\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("0\r\nX: \x01\r\n\r\n", COAI_ERR_HTTP);
    DEC_ERR("0\r\n\rx", COAI_ERR_HTTP);

    /* bounded chunk extensions */
    coai_buf_reset(&b);
    coai_buf_puts(&b, "5;");
    while (b.len < COAI_HTTP_MAX_CHUNK_LINE) coai_buf_putc(&b, 'e');
    coai_buf_puts(&b, "\r\nhello\r\n0\r\n\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_DONE, "hello", b.len, __LINE__);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "5;");
    while (b.len < COAI_HTTP_MAX_CHUNK_LINE + 1) coai_buf_putc(&b, 'e');
    coai_buf_puts(&b, "\r\nhello\r\n0\r\n\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_ERR_HTTP, NULL, 0, __LINE__);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "5");
    while (b.len < COAI_HTTP_MAX_CHUNK_LINE + 1) coai_buf_putc(&b, ' ');
    coai_buf_puts(&b, "\r\nhello\r\n0\r\n\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_ERR_HTTP, NULL, 0, __LINE__);
    /* bounded trailers */
    coai_buf_reset(&b);
    coai_buf_puts(&b, "0\r\n");
    while (b.len < COAI_HTTP_MAX_HEAD + 10) coai_buf_puts(&b, "X-T: 0123456789abcdef\r\n");
    coai_buf_puts(&b, "\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_ERR_HTTP, NULL, 0, __LINE__);

    /* max_body: equal is fine; one over fails at the size line, before the data */
    dec_check("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 26, 11, COAI_DONE, "hello world", 26,
              __LINE__);
    dec_check("5\r\nhello\r\n7\r\n world\r\n0\r\n\r\n", 26, 11, COAI_ERR_TOO_BIG, "hello", 0,
              __LINE__);
    dec_check("ffffffffffffffff\r\n", 18, COAI_HTTP_MAX_BODY, COAI_ERR_TOO_BIG, "", 0, __LINE__);
    dec_check("8\r\n12345678\r\nffffffffffffffff\r\n", 31, 0, COAI_ERR_TOO_BIG, "12345678", 0,
              __LINE__);
    {
        dec_out o = {0};
        dec_run("5\r\nhello\r\n7\r\n", 13, NULL, 0, 11, &o);
        CHECK(o.r == COAI_ERR_TOO_BIG && o.consumed == 13);
        coai_buf_free(&o.payload);
    }

    /* picohttpparser's overhead rule: a flood of 1-byte chunks fails, 2-byte chunks pass */
    coai_buf_reset(&b);
    for (i = 0; i < 30000; i++) coai_buf_puts(&b, "1\r\nx\r\n");
    coai_buf_puts(&b, "0\r\n\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_ERR_HTTP, NULL, 0, __LINE__);
    coai_buf_reset(&b);
    for (i = 0; i < 30000; i++) coai_buf_puts(&b, "2\r\nxy\r\n");
    coai_buf_puts(&b, "0\r\n\r\n");
    dec_check((char *)b.data, b.len, 0, COAI_DONE, NULL, b.len, __LINE__);
    coai_buf_free(&b);
}

/* ---- response parser ----------------------------------------------------------------- */

static coai_http_response RS;

/* Whole parse plus the prefix property. */
static int resp(const char *s)
{
    static coai_http_response tmp;
    size_t n = strlen(s), p;
    int r = coai_http_parse_response(place(s, n), n, &RS), bad = 0;
    for (p = 0; p < n; p++) {
        int r2 = coai_http_parse_response(place(s, p), p, &tmp);
        if (r > COAI_MORE && (size_t)r <= p) { if (r2 != r) bad++; }
        else if (r > COAI_MORE) { if (r2 != COAI_MORE) bad++; }
        else if (r2 != COAI_MORE && r2 != r) bad++;
    }
    CHECKF(bad == 0, "%d prefixes disagree for %.40s", bad, s);
    return coai_http_parse_response(place(s, n), n, &RS);
}

static void test_response(void)
{
    const char *s;
    coai_buf b = {0};
    int i, r;
    s = "HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\n"
        "Transfer-Encoding: chunked\r\nx-request-id: abc\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s));
    CHECK(RS.status == 200 && RS.minor_version == 1 && coai_str_eq(RS.reason, "OK"));
    CHECK(RS.chunked && RS.content_length == -1 && RS.keep_alive && !RS.no_body);
    CHECK(view_is(RS.content_type, "application/connect+proto") && RS.header_count == 3);
    CHECK(view_is(coai_http_header_get(RS.headers, RS.header_count, "X-Request-ID"), "abc"));
    s = "HTTP/1.1 200\r\nContent-Length: 12\r\n\r\n{\"ok\":true}\n";
    CHECK(resp(s) == (int)strlen(s) - 12);
    CHECK(RS.status == 200 && RS.reason.len == 0 && RS.content_length == 12 && RS.keep_alive);
    CHECK(RS.content_type.ptr == NULL);
    s = "HTTP/1.1 404 Not Found\nContent-Length: 0\nConnection: close\n\n";
    CHECK(resp(s) == (int)strlen(s) && RS.status == 404 && coai_str_eq(RS.reason, "Not Found"));
    CHECK(RS.content_length == 0 && !RS.keep_alive);
    s = "HTTP/1.1 500 \r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.content_length == 5 && RS.reason.len == 0);
    s = "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.content_length == 5);
    s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.chunked && RS.content_length == -1 && !RS.keep_alive);
    s = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.content_length == -1 && !RS.keep_alive);
    s = "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.minor_version == 0 && !RS.keep_alive);
    s = "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.keep_alive);
    s = "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.no_body && RS.content_length == 0 && RS.keep_alive);
    s = "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.no_body && !RS.chunked);
    s = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    CHECK(resp(s) == 25 && RS.status == 100 && RS.no_body);
    s = "HTTP/1.1 200 OK\r\nX-Odd: a\x01\x7f\xff\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && view_is(RS.headers[0].value, "a\x01\x7f\xff"));
    s = "HTTP/1.1 429 Too\tMany \xe2\x80\x94 Requests\r\nRetry-After: 1\r\n\r\n";
    CHECK(resp(s) == (int)strlen(s) && RS.status == 429);

    CHECK(resp("HTTP/2 200\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.2 200 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 99 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 099 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 600 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 2000 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 20x OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1  200 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("http/1.1 200 OK\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 O\x01K\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nX: a\x00" "b\r\n\r\n") == COAI_MORE);  /* strlen stops */
    {
        static const char nul[] = "HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n";
        CHECK(coai_http_parse_response(place(nul, sizeof nul - 1), sizeof nul - 1, &RS) ==
              COAI_ERR_HTTP);
    }
    CHECK(resp("HTTP/1.1 200 OK\r\nX : a\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\n: a\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n") ==
          COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n") ==
          COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
               "\r\n\r\n") == COAI_ERR_HTTP);
    CHECK(resp("HTTP/1.1 200 OK\r\n") == COAI_MORE);

    /* limits */
    coai_buf_puts(&b, "HTTP/1.1 200 OK\r\n");
    for (i = 0; i < COAI_HTTP_MAX_HEADERS; i++) coai_buf_printf(&b, "X-%d: %d\r\n", i, i);
    coai_buf_puts(&b, "\r\n");
    r = coai_http_parse_response(place(b.data, b.len), b.len, &RS);
    CHECK(r == (int)b.len && RS.header_count == COAI_HTTP_MAX_HEADERS);
    b.len -= 2;
    coai_buf_puts(&b, "X-Extra: 1\r\n\r\n");
    CHECK(coai_http_parse_response(place(b.data, b.len), b.len, &RS) == COAI_ERR_TOO_BIG);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "HTTP/1.1 200 OK\r\nSet-Cookie: ");
    while (b.len < 17 + COAI_HTTP_MAX_LINE + 1) coai_buf_putc(&b, 'c');
    coai_buf_puts(&b, "\r\n\r\n");
    CHECK(coai_http_parse_response(place(b.data, b.len), b.len, &RS) == COAI_ERR_TOO_BIG);
    coai_buf_reset(&b);
    coai_buf_puts(&b, "HTTP/1.1 200 OK\r\n");
    while (b.len <= COAI_HTTP_MAX_HEAD) coai_buf_puts(&b, "X-Fill: 0123456789012345678\r\n");
    CHECK(coai_http_parse_response(place(b.data, b.len), b.len, &RS) == COAI_ERR_TOO_BIG);
    CHECK(coai_http_parse_response(place(b.data, 1000), 1000, &RS) == COAI_MORE);
    coai_buf_free(&b);
}

/* ---- security checks ----------------------------------------------------------------- */

static void test_host_origin(void)
{
    coai_str extra[2];
    extra[0] = S("myhost.lan");
    extra[1] = S("");
    /* reliability.md scenario 6 */
    CHECK(coai_http_host_allowed(S("localhost"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("LocalHost:8080"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("127.0.0.1:8080"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("127.0.0.1"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("[::1]:8080"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("[::1]"), NULL, 0, 8080));
    CHECK(coai_http_host_allowed(S("localhost:1234"), NULL, 0, 0));
    CHECK(coai_http_host_allowed(S("myhost.lan:8080"), extra, 2, 8080));
    CHECK(coai_http_host_allowed(S("MYHOST.LAN"), extra, 2, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:8081"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("evil.example:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost.evil.com"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost.evil.com:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost."), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost.:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S(":8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S(":8080"), extra, 2, 8080));   /* empty extra never matches */
    CHECK(!coai_http_host_allowed(S(""), extra, 2, 8080));
    CHECK(!coai_http_host_allowed(coai__http_none(), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("user@localhost"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("user@localhost:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:008080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:+8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:8080:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhost :8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("::1"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("[::1"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("[::1]x"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("[::2]:8080"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("127.0.0.2"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("127.0.0.1.nip.io"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("localhos"), NULL, 0, 8080));
    CHECK(!coai_http_host_allowed(S("myhost.lan.evil"), extra, 2, 8080));
    CHECK(!coai_http_host_allowed(S("myhost.la"), extra, 2, 8080));
    CHECK(!coai_http_host_allowed(S("localhost:999999"), NULL, 0, 0));
    CHECK(!coai_http_host_allowed(S("evil.example:9000"), NULL, 0, 0));  /* any port, no name */
    /* "name:port" entries pin a name to their ports (issue 16: tunnels) */
    {
        coai_str pin[4];
        pin[0] = S("box.lan:9000");
        pin[1] = S("localhost:9000");
        pin[2] = S("[::1]:9001");
        pin[3] = S("box.lan:9002");
        CHECK(coai_http_host_allowed(S("box.lan:9000"), pin, 4, 0));
        CHECK(coai_http_host_allowed(S("BOX.LAN:9002"), pin, 4, 8080));
        CHECK(!coai_http_host_allowed(S("box.lan:9001"), pin, 4, 0));
        CHECK(!coai_http_host_allowed(S("box.lan"), pin, 4, 0));          /* = port 80 */
        CHECK(coai_http_host_allowed(S("localhost:9000"), pin, 4, 8080));  /* pin beats port */
        CHECK(!coai_http_host_allowed(S("localhost:8080"), pin, 4, 8080));
        CHECK(coai_http_host_allowed(S("[::1]:9001"), pin, 4, 0));
        CHECK(!coai_http_host_allowed(S("[::1]:9000"), pin, 4, 0));
        CHECK(coai_http_host_allowed(S("127.0.0.1:5555"), pin, 4, 0));    /* not pinned */
        CHECK(!coai_http_host_allowed(S("box.lan.evil:9000"), pin, 4, 0));
        CHECK(coai_http_origin_allowed(S("http://box.lan:9000"), 0, pin, 4));
        CHECK(!coai_http_origin_allowed(S("http://box.lan:9003"), 0, pin, 4));
    }
    /* scenario 7 */
    CHECK(coai_http_origin_allowed(S("http://localhost:8080"), 8080, NULL, 0));
    CHECK(coai_http_origin_allowed(S("https://127.0.0.1:8080"), 8080, NULL, 0));
    CHECK(coai_http_origin_allowed(S("HTTP://LOCALHOST:8080"), 8080, NULL, 0));
    CHECK(coai_http_origin_allowed(S("http://[::1]:8080"), 8080, NULL, 0));
    CHECK(coai_http_origin_allowed(S("http://localhost"), 8080, NULL, 0));
    CHECK(coai_http_origin_allowed(S("http://localhost:3000"), 0, NULL, 0));
    CHECK(coai_http_origin_allowed(S("https://myhost.lan:8080"), 8080, extra, 2));
    CHECK(!coai_http_origin_allowed(S("https://evil.example"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("null"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S(""), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(coai__http_none(), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http://localhost:3000"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http://localhost:8080/"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http://localhost.evil.com:8080"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http://user@localhost:8080"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http://"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("https://"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("file://localhost"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("localhost:8080"), 8080, NULL, 0));
    CHECK(!coai_http_origin_allowed(S("http:/localhost:8080"), 8080, NULL, 0));
}

static void test_json_type(void)
{
    /* scenario 8 */
    CHECK(coai_http_is_json(S("application/json")));
    CHECK(coai_http_is_json(S("Application/JSON")));
    CHECK(coai_http_is_json(S(" application/json \t")));
    CHECK(coai_http_is_json(S("application/json; charset=utf-8")));
    CHECK(coai_http_is_json(S("application/json;charset=UTF-8")));
    CHECK(coai_http_is_json(S("application/json; charset=\"utf-8\"")));
    CHECK(coai_http_is_json(S("application/json; x=1; charset=utf-8")));
    CHECK(coai_http_is_json(S("application/json;")));
    CHECK(!coai_http_is_json(S("text/plain")));
    CHECK(!coai_http_is_json(S("text/plain; charset=utf-8")));
    CHECK(!coai_http_is_json(S("application/x-www-form-urlencoded")));
    CHECK(!coai_http_is_json(S("multipart/form-data; boundary=x")));
    CHECK(!coai_http_is_json(S("application/jsonx")));
    CHECK(!coai_http_is_json(S("application/json-patch+json")));
    CHECK(!coai_http_is_json(S("application/json garbage")));
    CHECK(!coai_http_is_json(S("application/json; charset=latin1")));
    CHECK(!coai_http_is_json(S("application/json; charset=\"utf-8")));
    CHECK(!coai_http_is_json(S("application/json; foo")));
    CHECK(!coai_http_is_json(S("application/json; =x")));
    CHECK(!coai_http_is_json(S("application/json; x=")));
    CHECK(!coai_http_is_json(S("application/jso")));
    CHECK(!coai_http_is_json(S("")));
    CHECK(!coai_http_is_json(coai__http_none()));
}

static void test_auth(void)
{
    const char *key = "sk-local-0123456789abcdef";
    int st;
    CHECK(coai_http_token_equal(S(key), S("sk-local-0123456789abcdef")));
    CHECK(!coai_http_token_equal(S(key), S("sk-local-0123456789abcdeg")));   /* same length */
    CHECK(!coai_http_token_equal(S(key), S("sk-local-0123456789abcde")));    /* shorter */
    CHECK(!coai_http_token_equal(S(key), S("sk-local-0123456789abcdef0")));  /* longer */
    CHECK(!coai_http_token_equal(S(key), S("")));
    CHECK(!coai_http_token_equal(S(""), S("")));
    CHECK(!coai_http_token_equal(coai__http_none(), S(key)));
    CHECK(coai_http_token_equal(S("x"), S("x")));

    CHECK(view_is(coai_http_bearer(S("Bearer abc")), "abc"));
    CHECK(view_is(coai_http_bearer(S("bearer abc")), "abc"));
    CHECK(view_is(coai_http_bearer(S("BEARER   abc  \t")), "abc"));
    CHECK(view_is(coai_http_bearer(S("  Bearer\tabc")), "abc"));
    CHECK(coai_http_bearer(S("Bearer")).ptr == NULL);
    CHECK(coai_http_bearer(S("Bearer ")).ptr == NULL);
    CHECK(coai_http_bearer(S("Bearer    ")).ptr == NULL);
    CHECK(coai_http_bearer(S("Basic abc")).ptr == NULL);
    CHECK(coai_http_bearer(S("Bearerabc")).ptr == NULL);
    CHECK(coai_http_bearer(S("")).ptr == NULL);
    CHECK(coai_http_bearer(coai__http_none()).ptr == NULL);

    /* the status page's ?key= and its cookie */
    CHECK(view_is(coai_http_query_param(S("/?key=abc"), "key"), "abc"));
    CHECK(view_is(coai_http_query_param(S("/?a=1&key=abc&key=x"), "key"), "abc"));
    CHECK(view_is(coai_http_query_param(S("/?key="), "key"), ""));
    CHECK(coai_http_query_param(S("/?key="), "key").ptr != NULL);
    CHECK(coai_http_query_param(S("/?akey=abc"), "key").ptr == NULL);
    CHECK(coai_http_query_param(S("/?key"), "key").ptr == NULL);
    CHECK(coai_http_query_param(S("/key=abc"), "key").ptr == NULL);
    CHECK(coai_http_query_param(S("/?"), "key").ptr == NULL);
    CHECK(coai_http_query_param(coai__http_none(), "key").ptr == NULL);
    CHECK(view_is(coai_http_cookie(S("sid=1"), "sid"), "1"));
    CHECK(view_is(coai_http_cookie(S("a=b;  sid=xyz ; c=d"), "sid"), "xyz"));
    CHECK(view_is(coai_http_cookie(S("asid=1; sid=2"), "sid"), "2"));
    CHECK(coai_http_cookie(S("a=b; sidx=2"), "sid").ptr == NULL);
    CHECK(coai_http_cookie(S(""), "sid").ptr == NULL);
    CHECK(coai_http_cookie(coai__http_none(), "sid").ptr == NULL);

    /* scenario 9, through the parser */
    REQ_OK("POST / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk-local-0123456789abcdef"
           "   \r\n\r\n");
    CHECK(coai_http_token_equal(coai_http_bearer(RQ.authorization), S(key)));
    REQ_OK("POST / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk-local-0123456789abcdeX"
           "\r\n\r\n");
    CHECK(!coai_http_token_equal(coai_http_bearer(RQ.authorization), S(key)));
    CHECK(req("POST / HTTP/1.1\r\nHost: localhost\r\n\r\n", &st) > COAI_MORE);
    CHECK(!coai_http_token_equal(coai_http_bearer(RQ.authorization), S(key)));
}

/* Scenarios 5 and 6 end to end: parse, then the Host check as server.c will do it. */
static void test_scenarios(void)
{
    static const struct { const char *host; int ok; } hosts[] = {
        { "localhost:8080", 1 }, { "evil.example:8080", 0 }, { "localhost.evil.com", 0 },
        { ":8080", 0 }, { "", 0 },
    };
    size_t i;
    for (i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char req_s[256];
        int st;
        snprintf(req_s, sizeof req_s, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\n"
                 "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n", hosts[i].host);
        CHECK(req(req_s, &st) == (int)strlen(req_s));
        CHECKF(coai_http_host_allowed(RQ.host, NULL, 0, 8080) == hosts[i].ok, "%s",
               hosts[i].host);
    }
    /* Content-Length over the body cap: parsed fine, the caller answers 413 */
    REQ_OK("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 40000000\r\n\r\n");
    CHECK(RQ.content_length > (int64_t)COAI_HTTP_MAX_BODY);
}

int main(void)
{
    guard_init();
    test_request_basic();
    test_request_errors();
    test_request_limits();
    test_request_incremental();
    test_pipeline();
    test_chunked();
    test_response();
    test_host_origin();
    test_json_type();
    test_auth();
    test_scenarios();
    TEST_END();
}
