/* fz_sse.c - any byte string as a sequence of upstream events fed to a coai_reply
 * (first byte: options; then [op, len, bytes]...). The client body must be valid UTF-8;
 * every SSE data line valid JSON (or [DONE], last); non-SSE bodies one JSON document;
 * at most one finish_reason; the run always ends. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <cJSON.h>
#include <stdlib.h>



static int fz_fail_send;

static int fz_send(void *user, const unsigned char *msg, size_t n)
{
    (void)user; (void)msg; (void)n;
    return fz_fail_send;
}

static int has_str(const char *p, size_t n, const char *needle)
{
    size_t m = strlen(needle), i;
    for (i = 0; i + m <= n; i++)
        if (memcmp(p + i, needle, m) == 0) return 1;
    return 0;
}

static void must_json(const unsigned char *p, size_t n)
{
    cJSON *j = cJSON_ParseWithLength((const char *)p, n);
    if (!j) abort();
    cJSON_Delete(j);
}

/* The whole client body: SSE events (status 200, streaming) or one JSON document. */
static void check_body(const coai_reply *r, const coai_buf *all)
{
    size_t i = 0;
    int done = 0, finishes = 0;
    if (all->len && coai_utf8_valid_prefix((const char *)all->data, all->len) != all->len)
        abort();
    if (!coai_reply_started(r)) { if (all->len) abort(); return; }
    if (!r->o_.stream || coai_reply_status(r) != 200) {
        if (coai_reply_done(r)) must_json(all->data, all->len);
        return;
    }
    while (i < all->len) {
        const char *p = (const char *)all->data + i;
        const char *e = strstr(p, "\n\n");
        size_t len;
        if (!e || done) abort();
        len = (size_t)(e - p);
        if (memchr(p, '\n', len)) abort();
        if (len && p[0] == ':') { i += len + 2; continue; }
        if (len < 6 || memcmp(p, "data: ", 6) != 0) abort();
        if (len == 12 && memcmp(p + 6, "[DONE]", 6) == 0) done = 1;
        else {
            must_json((const unsigned char *)p + 6, len - 6);
            if (has_str(p, len, "\"finish_reason\":\"")) finishes++;
        }
        i += len + 2;
    }
    if (finishes > 1) abort();
    if (coai_reply_done(r) && !done) abort();
}

static const coai_exec_kind fz_kinds[] = {
    COAI_EXEC_SHELL, COAI_EXEC_WRITE, COAI_EXEC_DELETE, COAI_EXEC_GREP, COAI_EXEC_READ,
    COAI_EXEC_LS, COAI_EXEC_DIAGNOSTICS, COAI_EXEC_REQUEST_CONTEXT, COAI_EXEC_MCP,
    COAI_EXEC_SHELL_STREAM, COAI_EXEC_BACKGROUND_SHELL, COAI_EXEC_FETCH, COAI_EXEC_NONE
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = { "bash", "read", "list", "glob", "grep", "write",
                                         "get_weather" };
    coai_tool tools[7];
    cJSON *schema = cJSON_Parse("{\"properties\":{\"filePath\":{},\"include\":{},"
                                "\"workdir\":{},\"description\":{}}}");
    coai_reply_opts o;
    coai_reply r;
    coai_buf all = { 0 };
    size_t i = 1, k;
    int rc = COAI_OK;
    if (size < 1) { cJSON_Delete(schema); return 0; }
    memset(tools, 0, sizeof tools);
    for (k = 0; k < 7; k++) {
        tools[k].name = coai_str_c(names[k]);
        tools[k].parameters = k % 2 ? schema : NULL;
    }
    memset(&o, 0, sizeof o);
    o.stream = data[0] & 1;
    o.include_usage = (data[0] >> 1) & 1;
    o.tools = data[0] & 4 ? tools : NULL;
    o.tool_count = data[0] & 4 ? 7 : 0;
    o.max_kv_bytes = data[0] & 8 ? 300 : 0;
    o.completion_id = coai_str_c("chatcmpl-0123456789abcdef01234567");
    o.created = 1768474032;
    o.model = coai_str_c("claude-4.5-sonnet");
    o.session_id = coai_str_c(data[0] & 16 ? "" : "abc123");
    o.prompt = coai_str_c("User: hi");
    o.send = fz_send;
    fz_fail_send = 0;
    if (coai_reply_init(&r, &o) != 0) abort();
    while (i + 1 < size && rc == COAI_OK) {
        unsigned op = data[i] & 15;
        size_t len = data[i + 1], avail = size - i - 2;
        const char *p = (const char *)data + i + 2;
        coai_msg m;
        if (len > avail) len = avail;
        i += 2 + len;
        memset(&m, 0, sizeof m);
        switch (op) {
        case 0: m.kind = COAI_MSG_TEXT; m.text.ptr = p; m.text.len = len; break;
        case 1: m.kind = COAI_MSG_THINKING; m.text.ptr = p; m.text.len = len; break;
        case 2: m.kind = COAI_MSG_TOKENS; m.value = len ? (int8_t)p[0] : 0; break;
        case 3: m.kind = COAI_MSG_CHECKPOINT; m.value = len ? (unsigned char)p[0] * 50 : 0; break;
        case 4: m.kind = COAI_MSG_TURN_ENDED; break;
        case 5:
            m.kind = COAI_MSG_EXEC;
            if (len >= 2) {
                coai_str s;
                s.ptr = p + 2;
                s.len = len - 2;
                m.exec.kind = fz_kinds[(unsigned char)p[0]
                                       % (sizeof fz_kinds / sizeof fz_kinds[0])];
                m.exec.id = (unsigned char)p[1];
                m.exec.exec_id = p[1] & 1 ? s : coai_str_c("");
                m.exec.command = m.exec.path = m.exec.content = m.exec.pattern = s;
                m.exec.cwd = p[1] & 2 ? s : coai_str_c("");
                m.exec.glob = p[1] & 4 ? s : coai_str_c("");
                m.exec.has_path = (p[1] >> 3) & 1;
                m.exec.tool_name = coai_str_c(names[((unsigned char)p[1] >> 4) % 7]);
                m.exec.tool_call_id = s;
                m.exec.args_json = s;
            }
            break;
        case 6:
        case 7:
            m.kind = op == 6 ? COAI_MSG_KV_SET : COAI_MSG_KV_GET;
            m.id = len ? (unsigned char)p[0] : 0;
            m.blob_id.ptr = p;
            m.blob_id.len = len > 2 ? 2 : len;
            m.blob_data.ptr = p + m.blob_id.len;
            m.blob_data.len = len - m.blob_id.len;
            break;
        case 8: m.kind = COAI_MSG_QUERY; m.query = 2; break;
        case 9: m.kind = COAI_MSG_HEARTBEAT; break;
        case 10: {
            coai_status st;
            memset(&st, 0, sizeof st);
            st.code = len ? (unsigned char)p[0] % 17 : 0;
            st.error = len > 1 ? (unsigned char)p[1] % 55 : 0;
            st.retryable = -1;
            if (len > 2) {
                size_t n = len - 2 < sizeof st.message - 1 ? len - 2 : sizeof st.message - 1;
                n = coai_utf8_valid_prefix(p + 2, n);
                memcpy(st.message, p + 2, n);
            }
            rc = coai_reply_feed_status(&r, &st);
            break;
        }
        case 11: rc = coai_reply_feed_eof(&r); break;
        case 12: {
            coai_error e;
            coai_error_from_http(400 + (len ? (unsigned char)p[0] : 0), p, len, &e);
            rc = coai_reply_feed_error(&r, &e);
            break;
        }
        case 13: rc = coai_reply_fail_timeout(&r); break;
        case 14: rc = coai_reply_keepalive(&r); break;
        default: fz_fail_send = !fz_fail_send; break;
        }
        if (m.kind != COAI_MSG_NONE) rc = coai_reply_feed_msg(&r, &m);
        if (rc == COAI_ERR_NOMEM) abort();
        if (r.out.len) {
            if (!coai_reply_started(&r)) abort();
            coai_buf_append(&all, r.out.data, r.out.len);
            coai_buf_reset(&r.out);
        }
    }
    if (rc == COAI_OK) rc = coai_reply_feed_eof(&r);
    if (rc != COAI_DONE || !coai_reply_done(&r) || !coai_reply_started(&r)) abort();
    coai_buf_append(&all, r.out.data, r.out.len);
    check_body(&r, &all);
    {
        coai_buf h = { 0 };
        coai_reply_head(&r, &h);
        coai_buf_free(&h);
    }
    coai_reply_free(&r);
    coai_buf_free(&all);
    cJSON_Delete(schema);
    return 0;
}
