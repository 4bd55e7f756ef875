/* fz_trailer.c - trailer text, Connect end-stream JSON and google.rpc.Status bytes. The
 * input is used three ways: as a trailer block, as end-stream JSON, and (base64-wrapped) as
 * grpc-status-details-bin and as an end-stream ErrorDetails value. Every outcome must leave a
 * clean coai_status (valid UTF-8, no control characters, NUL-terminated fields), and the
 * error each maps to (coai_error_from_status, _from_http, _from_http_call) a clean message. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

static void fz__field_ok(const char *s, size_t cap)
{
    const char *z = (const char *)memchr(s, 0, cap);
    size_t n, i;
    if (!z) abort();
    n = (size_t)(z - s);
    if (coai_utf8_valid_prefix(s, n) != n) abort();
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) abort();
        if (c == 0xc2 && (unsigned char)s[i + 1] < 0xa0) abort();
    }
}

/* The error a status maps to (Cursor's words matched in it, notes 2026-autumn §4): a real
 * HTTP status, a clean message. */
static void fz__error_ok(const coai_error *e)
{
    if (e->status && (e->status < 400 || e->status > 599)) abort();
    fz__field_ok(e->message, sizeof e->message);
}

static void fz__check(const coai_status *st, coai_result r)
{
    coai_buf b = { 0 };
    coai_error e;
    coai_error_from_status(st, &e);
    fz__error_ok(&e);
    if (r > 0) abort();
    fz__field_ok(st->message, sizeof st->message);
    fz__field_ok(st->title, sizeof st->title);
    fz__field_ok(st->detail, sizeof st->detail);
    fz__field_ok(st->action_required, sizeof st->action_required);
    if (st->retryable < -1 || st->retryable > 1) abort();
    if (st->expected < -1 || st->expected > 1) abort();
    if (st->error_name && strncmp(st->error_name, "ERROR_", 6) != 0) abort();
    coai_status_describe(st, &b);
    if (b.err || !b.data || strlen((const char *)b.data) != b.len) abort();
    fz__field_ok((const char *)b.data, b.len + 1);
    coai_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_status st;
    coai_result r;
    coai_buf t = { 0 };
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);   /* exact size for ASan */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);

    r = coai_trailer_parse(copy, size, &st);
    fz__check(&st, r);
    r = coai_end_stream_parse(copy, size, &st);
    fz__check(&st, r);
    {   /* the same bytes as a unary call's error body */
        coai_error e;
        coai_error_from_http(403, (const char *)copy, size, &e);
        fz__error_ok(&e);
        coai_error_from_http_call(404, (const char *)copy, size, "/aiserver.v1.X/Y", &e);
        fz__error_ok(&e);
        if (strcmp(e.code, "upstream_not_found") != 0) abort();
    }

    coai_buf_puts(&t, "grpc-status: 3\r\ngrpc-status-details-bin: ");
    coai_base64_append(&t, copy, size, 0);
    coai_buf_puts(&t, "\r\n");
    r = coai_trailer_parse(t.data, t.len, &st);
    fz__check(&st, r);
    if (st.code != 3) abort();   /* the header wins over Status.code */

    coai_buf_reset(&t);
    coai_buf_puts(&t, "{\"error\":{\"code\":\"internal\",\"details\":[{\"type\":"
                      "\"aiserver.v1.ErrorDetails\",\"value\":\"");
    coai_base64_append(&t, copy, size, 0);
    coai_buf_puts(&t, "\"}]}}");
    r = coai_end_stream_parse(t.data, t.len, &st);
    fz__check(&st, r);
    if (st.code != 13) abort();

    coai_buf_free(&t);
    free(copy);
    return 0;
}
