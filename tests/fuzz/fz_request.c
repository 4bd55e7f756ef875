/* fz_request.c - any bytes as a chat request body (-> request, run params, prompt, or
 * a clean 4xx error), as a model list, and as an upstream error body. Every JSON text
 * written must parse and be valid UTF-8. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <cJSON.h>
#include <stdlib.h>



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
        coai_prompt_build(&b, coai__core_get(q.root_, "messages"));
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
