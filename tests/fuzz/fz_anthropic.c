/* fz_anthropic.c - any bytes as an Anthropic Messages body (-> request, prompt, or a clean
 * 4xx error in Anthropic's shape) and as a count_tokens body; the same bytes as assistant
 * text and thinking through the Messages writer (stream and not) and as a model name for
 * coai_models_resolve_claude. Every JSON text written must parse and be valid UTF-8; every
 * SSE event must be "event: <name>\ndata: <JSON>\n\n". */
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

static void must_sse(const coai_buf *b)
{
    const char *p = (const char *)b->data, *end = p + b->len;
    while (p < end) {
        const char *nl, *stop;
        if (end - p < 7 || memcmp(p, "event: ", 7) != 0) abort();
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || end - nl < 7 || memcmp(nl + 1, "data: ", 6) != 0) abort();
        stop = strstr(nl + 1, "\n\n");
        if (!stop) abort();
        must_json(nl + 7, (size_t)(stop - nl - 7));
        p = stop + 2;
    }
}

static int sink(void *u, const unsigned char *m, size_t n) { (void)u; (void)m; (void)n; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_request q;
    coai_error e;
    coai_buf b = { 0 };
    int k, rc = coai_request_parse(&q, COAI_DIALECT_ANTHROPIC, (const char *)data, size, &e);
    if (rc == 0) {
        coai_run_params p;
        memset(&p, 0, sizeof p);
        coai_request_params(&q, &p);
        if (coai_utf8_valid_prefix(p.prompt.ptr, p.prompt.len) != p.prompt.len) abort();
        if (p.tool_count && !p.tools) abort();
        if (q.session_id.len > 32 || q.max_tokens < 1) abort();
        if (coai_request_input_tokens(&q) < 0) abort();
    } else {
        if (rc >= 0 || e.status < 400 || !e.message[0]) abort();
        coai_error_write_as(&b, &e, COAI_DIALECT_ANTHROPIC);
        must_json((const char *)b.data, b.len);
        coai_buf_reset(&b);
    }
    coai_request_free(&q);
    if (coai_anthropic_count_parse(&q, (const char *)data, size, &e) == 0 && q.stream) abort();
    coai_request_free(&q);
    /* the bytes as model output */
    for (k = 0; k < 2; k++) {
        coai_reply r;
        coai_reply_opts o;
        coai_msg m;
        size_t half = size / 2;
        memset(&o, 0, sizeof o);
        memset(&m, 0, sizeof m);
        o.dialect = COAI_DIALECT_ANTHROPIC;
        o.stream = k;
        o.completion_id = coai_str_c("msg_0");
        o.model = coai_str_c("claude-sonnet-4-5");
        o.send = sink;
        if (coai_reply_init(&r, &o) != 0) abort();
        m.kind = size && (data[0] & 1) ? COAI_MSG_THINKING : COAI_MSG_TEXT;
        m.text.ptr = (const char *)data;
        m.text.len = half;
        coai_reply_feed_msg(&r, &m);
        m.kind = COAI_MSG_TEXT;
        m.text.ptr = (const char *)data + half;
        m.text.len = size - half;
        coai_reply_feed_msg(&r, &m);
        if (size && (data[size - 1] & 1)) {
            coai_error_set(&e, 529, "overloaded_error", NULL, NULL, "%.*s", (int)size,
                           (const char *)data);
            coai_reply_feed_error(&r, &e);
        } else {
            m.kind = COAI_MSG_TURN_ENDED;
            coai_reply_feed_msg(&r, &m);
        }
        /* an error before the first byte is a JSON body even for a stream */
        if (k && coai_reply_status(&r) == 200) must_sse(&r.out);
        else must_json((const char *)r.out.data, r.out.len);
        coai_reply_free(&r);
    }
    /* the bytes as a model name */
    {
        const char *list = "{\"models\":[{\"modelId\":\"claude-4.5-sonnet\",\"displayModelId\":"
                           "\"sonnet-4.5\"},{\"modelId\":\"claude-4.1-opus\"}]}";
        coai_models mm;
        coai_str out = { "", 0 };
        coai_models_parse(&mm, list, strlen(list));
        if (coai_models_resolve_claude(&mm, coai_str_c(NULL), 0, &out)) abort();
        {
            coai_str req;
            req.ptr = (const char *)data;
            req.len = size;
            if (coai_models_resolve_claude(&mm, req, size & 1, &out) && !out.len) abort();
        }
        coai_models_free(&mm);
    }
    coai_buf_free(&b);
    return 0;
}
