/* fz_responses.c - any bytes as an OpenAI Responses request body (and as the stored history
 * of previous_response_id), then, for a request that parses, a reply driven by the bytes
 * after a "\n--\n" marker: text / reasoning deltas and execs mapped onto the request's
 * tools (coai_responses_exec_map), streaming and not; the same bytes as a /responses/compact
 * body (coai_responses_compact_parse). Every error body, tool argument and
 * response object must be valid JSON and UTF-8; every SSE event's data must be JSON. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <cJSON.h>
#include <stdlib.h>

static void must_json(const char *p, size_t n)
{
    cJSON *j;
    if (coai_utf8_valid_prefix(p, n) != n) abort();
    j = cJSON_ParseWithLength(p, n);
    if (!j) abort();
    cJSON_Delete(j);
}

/* Every "data: " line of an SSE text is one JSON object. */
static void must_sse(const coai_buf *b)
{
    size_t i = 0;
    if (b->err) return;
    while (i < b->len) {
        const char *s = (const char *)b->data + i;
        const char *nl = memchr(s, '\n', b->len - i);
        size_t n = nl ? (size_t)(nl - s) : b->len - i;
        if (n > 6 && memcmp(s, "data: ", 6) == 0) must_json(s + 6, n - 6);
        i += n + 1;
    }
}

static int sink(void *u, const unsigned char *m, size_t n)
{
    (void)u; (void)m; (void)n;
    return 0;
}

/* A view of the next piece of the script: length byte + bytes. */
static coai_str piece(const uint8_t **p, const uint8_t *end)
{
    coai_str s = { "", 0 };
    size_t n;
    if (*p >= end) return s;
    n = **p % 48;
    (*p)++;
    if (n > (size_t)(end - *p)) n = (size_t)(end - *p);
    s.ptr = (const char *)*p;
    s.len = n;
    *p += n;
    return s;
}

static void drive(coai_responses_request *rr, int stream, const uint8_t *p, const uint8_t *end)
{
    static const coai_exec_kind kinds[] = { COAI_EXEC_SHELL, COAI_EXEC_WRITE, COAI_EXEC_DELETE,
                                            COAI_EXEC_READ, COAI_EXEC_LS, COAI_EXEC_GREP,
                                            COAI_EXEC_MCP, COAI_EXEC_SHELL_STREAM };
    coai_reply r;
    coai_reply_opts o;
    coai_msg m;
    int rc = 0;
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &rr->req);
    o.stream = stream;
    o.completion_id = coai_str_c("resp_00112233445566778899aabbccddeeff");
    o.model = coai_str_c("fuzz-model");
    o.created = 1768474032;
    o.send = sink;
    o.echo.ptr = rr->echo.data ? (const char *)rr->echo.data : "";
    o.echo.len = rr->echo.len;
    o.rs_compact = rr->compact;
    if (coai_reply_init(&r, &o) < 0) return;
    while (p < end && rc >= 0 && rc != COAI_DONE) {
        uint8_t op = *p++;
        memset(&m, 0, sizeof m);
        switch (op % 4) {
        case 0: m.kind = COAI_MSG_TEXT; m.text = piece(&p, end); break;
        case 1: m.kind = COAI_MSG_THINKING; m.text = piece(&p, end); break;
        case 2: m.kind = COAI_MSG_TOKENS; m.value = op; break;
        default:
            m.kind = COAI_MSG_EXEC;
            m.exec.kind = kinds[(op >> 2) % 8];
            m.exec.id = op;
            m.exec.exec_id = piece(&p, end);
            m.exec.command = piece(&p, end);
            m.exec.cwd = piece(&p, end);
            m.exec.path = piece(&p, end);
            m.exec.content = piece(&p, end);
            m.exec.pattern = piece(&p, end);
            m.exec.glob = piece(&p, end);
            m.exec.tool_name = piece(&p, end);
            m.exec.args_json = coai_str_c("{}");
            break;
        }
        rc = coai_reply_feed_msg(&r, &m);
    }
    if (rc >= 0 && rc != COAI_DONE) coai_reply_feed_eof(&r);
    if (stream && coai_reply_status(&r) == 200) must_sse(&r.out);
    else if (!r.out.err && r.out.len) must_json((const char *)r.out.data, r.out.len);
    {
        coai_str s = coai_reply_response(&r);
        if (s.len) must_json(s.ptr, s.len);
        s = coai_reply_output_items(&r);
        if (s.len) {
            coai_buf a = { 0 };
            coai_buf_putc(&a, '[');
            coai_buf_append(&a, s.ptr, s.len);
            coai_buf_putc(&a, ']');
            if (!a.err) must_json((const char *)a.data, a.len);
            coai_buf_free(&a);
        }
    }
    coai_reply_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_responses_request rr;
    coai_error e;
    coai_buf b = { 0 };
    coai_str none = { "", 0 }, hist;
    const uint8_t *mark = NULL;
    size_t body_n = size, i;
    char prev[48];
    int rc;
    for (i = 0; i + 4 <= size; i++)
        if (memcmp(data + i, "\n--\n", 4) == 0) { mark = data + i + 4; body_n = i; break; }
    coai_responses_previous_id((const char *)data, body_n, prev, sizeof prev);
    rc = coai_responses_request_parse(&rr, (const char *)data, body_n, none, &e);
    if (rc == 0) {
        coai_run_params p;
        memset(&p, 0, sizeof p);
        coai_request_params(&rr.req, &p);
        if (coai_utf8_valid_prefix(p.prompt.ptr, p.prompt.len) != p.prompt.len) abort();
        for (i = 0; i < p.tool_count; i++)
            if (p.tools[i].name.len < 1 || p.tools[i].name.len > 64) abort();
        if (rr.items.len) {
            coai_buf_putc(&b, '[');
            coai_buf_append(&b, rr.items.data, rr.items.len);
            coai_buf_putc(&b, ']');
            if (!b.err) must_json((const char *)b.data, b.len);
            coai_buf_reset(&b);
        }
        if (mark) {
            drive(&rr, 1, mark, data + size);
            drive(&rr, 0, mark, data + size);
        }
    } else {
        if (rc >= 0 || e.status < 400 || !e.message[0]) abort();
        coai_error_write_as(&b, &e, COAI_DIALECT_RESPONSES);
        if (!b.err) must_json((const char *)b.data, b.len);
        coai_buf_reset(&b);
    }
    coai_responses_request_free(&rr);
    /* The same bytes as a POST /responses/compact body (answered non-streamed). */
    rc = coai_responses_compact_parse(&rr, (const char *)data, body_n, none, &e);
    if (rc == 0) {
        if (rr.compact != 2 || rr.req.stream || rr.req.tool_count) abort();
        if (mark) drive(&rr, 0, mark, data + size);
    } else if (rc >= 0 || e.status < 400 || !e.message[0]) {
        abort();
    }
    coai_responses_request_free(&rr);
    /* The same bytes as the stored history of previous_response_id. */
    hist.ptr = (const char *)data;
    hist.len = body_n;
    if (body_n && coai_responses_request_parse(&rr, "{\"input\":\"x\"}", 13, hist, &e) < 0)
        if (e.status < 400 || !e.message[0]) abort();
    coai_responses_request_free(&rr);
    coai_buf_free(&b);
    return 0;
}
