/* fz_request.c - any bytes as a chat request body (-> request, run params, prompt, or
 * a clean 4xx error), as a model list, and as an upstream error body. Every JSON text
 * written must parse and be valid UTF-8. */
#include "cursor_oai.h"

#ifndef COAI_MAX_VALUE_DEPTH
/* Until the ENCODE part is merged: prototypes and stand-ins that write the spec §6.3
 * bytes for the simple messages (so these tests also hold against the real encoders). */
int coai_encode_kv_set_result(coai_buf *out, uint32_t id);
int coai_encode_kv_get_result(coai_buf *out, uint32_t id, const void *data, size_t n, int found);
int coai_encode_exec_stream_close(coai_buf *out, uint32_t id);
int coai_encode_exec_request_context(coai_buf *out, uint32_t id, coai_str exec_id,
                                     const coai_run_params *env);
struct coai_exec;
int coai_encode_exec_reject(coai_buf *out, const struct coai_exec *ex, coai_str reason);
int coai_exec_reject_is_result(int kind);
#define COAI_TEST_STUB_ENCODE 1
#endif

#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <cJSON.h>
#include <stdlib.h>

#ifdef COAI_TEST_STUB_ENCODE
/* Small ids/lengths only (single-byte varints), enough for these tests. */
int coai_encode_kv_set_result(coai_buf *out, uint32_t id)
{
    unsigned char b[6] = { 0x1a, 0x04, 0x08, (unsigned char)id, 0x1a, 0x00 };
    return coai_buf_append(out, b, 6);
}
int coai_encode_kv_get_result(coai_buf *out, uint32_t id, const void *data, size_t n, int found)
{
    unsigned char h[7];
    if (!found) {
        unsigned char b[6] = { 0x1a, 0x04, 0x08, (unsigned char)id, 0x12, 0x00 };
        return coai_buf_append(out, b, 6);
    }
    h[0] = 0x1a; h[1] = (unsigned char)(n + 6); h[2] = 0x08; h[3] = (unsigned char)id;
    h[4] = 0x12; h[5] = (unsigned char)(n + 2); h[6] = 0x0a;
    coai_buf_append(out, h, 7);
    coai_buf_putc(out, (int)n);
    return coai_buf_append(out, data, n);
}
int coai_encode_exec_stream_close(coai_buf *out, uint32_t id)
{
    unsigned char b[6] = { 0x2a, 0x04, 0x0a, 0x02, 0x08, (unsigned char)id };
    return coai_buf_append(out, b, 6);
}
int coai_encode_exec_request_context(coai_buf *out, uint32_t id, coai_str exec_id,
                                     const coai_run_params *env)
{
    (void)exec_id; (void)env;
    coai_buf_putc(out, 0x12);
    return coai_buf_putc(out, (int)id);
}
int coai_encode_exec_reject(coai_buf *out, const struct coai_exec *ex, coai_str reason)
{
    (void)reason;
    coai_buf_putc(out, coai_exec_reject_is_result(ex->kind) ? 0x12 : 0x2a);
    return coai_buf_putc(out, (int)ex->id);
}
int coai_exec_reject_is_result(int kind)
{
    return kind == 2 || kind == 14 || kind == 3 || kind == 4 || kind == 5 || kind == 7
           || kind == 8 || kind == 9 || kind == 10 || kind == 11 || kind == 20;
}
#endif


static void must_json(const coai_buf *b)
{
    cJSON *j;
    if (b->err) return;
    if (coai_utf8_valid_prefix((const char *)b->data, b->len) != b->len) abort();
    j = cJSON_ParseWithLength((const char *)b->data, b->len);
    if (!j) abort();
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_chat_request q;
    coai_error e;
    coai_buf b = { 0 };
    coai_models m;
    int rc = coai_chat_request_parse(&q, (const char *)data, size, &e);
    if (rc == 0) {
        coai_run_params p;
        size_t i;
        memset(&p, 0, sizeof p);
        coai_chat_request_params(&q, &p);
        if (coai_utf8_valid_prefix(p.prompt.ptr, p.prompt.len) != p.prompt.len) abort();
        if (p.tool_count && !p.tools) abort();
        for (i = 0; i < p.tool_count; i++)
            if (p.tools[i].name.len < 1 || p.tools[i].name.len > 64) abort();
        if (q.session_id.len > 32) abort();
        /* the prompt from the tree equals a rebuild */
        coai_prompt_build(&b, coai__get(q.root_, "messages"));
        if (b.len != q.prompt.len || (b.len && memcmp(b.data, q.prompt.data, b.len))) abort();
        coai_buf_reset(&b);
    } else {
        if (rc >= 0 || e.status < 400 || !e.message[0]) abort();
        coai_error_write(&b, &e);
        must_json(&b);
        coai_buf_reset(&b);
    }
    coai_chat_request_free(&q);
    /* The same bytes as a GetUsableModels answer. */
    if (coai_models_parse(&m, (const char *)data, size) == 0) {
        coai_str r = coai_models_resolve(&m, coai_str_c("sonnet-4.5"));
        (void)r;
        coai_models_write_list(&b, &m, 1768474032);
        must_json(&b);
    }
    coai_models_free(&m);
    /* And as an upstream HTTP error body. */
    coai_error_from_http(size ? 400 + data[0] : 502, (const char *)data, size, &e);
    coai_buf_reset(&b);
    coai_error_write(&b, &e);
    must_json(&b);
    coai_buf_free(&b);
    return 0;
}
