/* fz_gemini.c - any bytes as a Gemini API body (generateContent / streamGenerateContent, model
 * from the URL -> request and prompt, or a clean 4xx error in Google's shape), each tool result
 * read as Gemini CLI's shell result (coai_exec_outcome_parse), and the same bytes as model
 * text / thinking and as a functionCall's arguments through the Gemini writer in its three
 * shapes (JSON object, SSE, JSON array). Every JSON text written must parse and be valid
 * UTF-8; every SSE event must be "data: <JSON>\r\n\r\n" (bare "\r\n" keepalives allowed);
 * the array stream must parse as one JSON array. */
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
        const char *stop;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') { p += 2; continue; }
        if (end - p < 6 || memcmp(p, "data: ", 6) != 0) abort();
        stop = strstr(p + 6, "\r\n\r\n");
        if (!stop || memchr(p, '\n', (size_t)(stop - p))) abort();
        must_json(p + 6, (size_t)(stop - p - 6));
        p = stop + 4;
    }
}

static int sink(void *u, const unsigned char *m, size_t n) { (void)u; (void)m; (void)n; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_request q;
    coai_error e;
    coai_buf b = { 0 };
    int k, rc;
    coai_str model = { (const char *)data, size > 8 ? 8 : size };
    rc = coai_gemini_parse(&q, (const char *)data, size, model, (int)(size % 3), &e);
    if (rc == 0) {
        coai_run_params p;
        size_t i;
        memset(&p, 0, sizeof p);
        coai_request_params(&q, &p);
        if (coai_utf8_valid_prefix(p.prompt.ptr, p.prompt.len) != p.prompt.len) abort();
        if (p.tool_count && !p.tools) abort();
        if (!q.model.len || q.session_id.len > 32 || q.stream != (int)(size % 3)) abort();
        for (i = 0; i < q.message_count; i++) {
            /* each result read as Gemini CLI's shell result would be on a held run */
            const coai_message *m = &q.messages[i];
            coai_exec_outcome oc;
            coai_exec_ref x;
            if (m->role != COAI_ROLE_TOOL || !m->part_count) continue;
            memset(&oc, 0, sizeof oc);
            memset(&x, 0, sizeof x);
            x.kind = COAI_EXEC_SHELL_STREAM;
            if (coai_exec_outcome_parse(&oc, &x, coai_str_c("run_shell_command"),
                                        m->parts[0].text, m->is_error) == 0) {
                if (coai_utf8_valid_prefix(oc.out.ptr ? oc.out.ptr : "", oc.out.len) != oc.out.len
                    || oc.out.len > m->parts[0].text.len || oc.err.len > m->parts[0].text.len)
                    abort();
            }
            coai_exec_outcome_free(&oc);
        }
    } else {
        if (rc >= 0 || e.status < 400 || !e.message[0]) abort();
        coai_error_write_as(&b, &e, COAI_DIALECT_GEMINI);
        must_json((const char *)b.data, b.len);
        coai_buf_reset(&b);
    }
    coai_request_free(&q);
    if (coai_request_parse(&q, COAI_DIALECT_GEMINI, (const char *)data, size, &e) == 0
        && q.stream)
        abort();
    coai_request_free(&q);
    /* the bytes as model output and as a call's arguments: non-stream, SSE, array */
    for (k = 0; k < 3; k++) {
        static const char *const sch = "{\"type\":\"object\",\"properties\":{\"command\":"
                                       "{\"type\":\"string\"},\"dir_path\":{\"type\":\"string\"}}}";
        coai_reply r;
        coai_reply_opts o;
        coai_msg m;
        coai_tool t;
        cJSON *params = cJSON_Parse(sch);
        size_t half = size / 2;
        memset(&o, 0, sizeof o);
        memset(&m, 0, sizeof m);
        memset(&t, 0, sizeof t);
        t.name = coai_str_c("run_shell_command");
        t.parameters = params;
        o.dialect = COAI_DIALECT_GEMINI;
        o.stream = k;
        o.completion_id = coai_str_c("resp0");
        o.model = coai_str_c("gemini-2.5-pro");
        o.send = sink;
        o.tools = &t;
        o.tool_count = 1;
        if (coai_reply_init(&r, &o) != 0) abort();
        m.kind = size && (data[0] & 1) ? COAI_MSG_THINKING : COAI_MSG_TEXT;
        m.text.ptr = (const char *)data;
        m.text.len = half;
        coai_reply_feed_msg(&r, &m);
        if (k) coai_reply_keepalive(&r);
        m.kind = COAI_MSG_TEXT;
        m.text.ptr = (const char *)data + half;
        m.text.len = size - half;
        coai_reply_feed_msg(&r, &m);
        if (size && (data[size - 1] & 1)) {
            coai_error_set(&e, 429, "insufficient_quota", "insufficient_quota", NULL, "%.*s",
                           (int)size, (const char *)data);
            coai_reply_feed_error(&r, &e);
        } else if (size && (data[size - 1] & 2)) {
            memset(&m, 0, sizeof m);
            m.kind = COAI_MSG_EXEC;
            m.exec.kind = COAI_EXEC_SHELL_STREAM;
            m.exec.id = 7;
            m.exec.exec_id = coai_str_c("exec-7");
            m.exec.command.ptr = (const char *)data;
            m.exec.command.len = size;
            m.exec.cwd.ptr = (const char *)data;
            m.exec.cwd.len = half;
            coai_reply_feed_msg(&r, &m);
        } else {
            m.kind = COAI_MSG_TURN_ENDED;
            coai_reply_feed_msg(&r, &m);
        }
        if (k == 1 && coai_reply_status(&r) == 200) must_sse(&r.out);
        else must_json((const char *)r.out.data, r.out.len);
        coai_reply_free(&r);
        cJSON_Delete(params);
    }
    coai_buf_free(&b);
    return 0;
}
