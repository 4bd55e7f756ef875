/* fz_runconv.c - coai_encode_run_request_conversation, the run request's new conversation id.
 * Byte 0 picks the mode.
 *   even: the rest is any message. Whatever it is, the call never reads outside it; on
 *         success the result is one run request whose conversation_id is the new id, and
 *         giving it the same id again changes nothing; on failure nothing is appended.
 *   odd:  the rest builds a run request (byte 1: the old id's length, byte 2: the new one's,
 *         byte 3: tools and blobs, then the id bytes, then the prompt). Re-encoding it with
 *         the new id equals encoding it with the new id in the first place. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

/* The conversation_id of the run request in m[0..n) (the last one, as protobuf reads it):
 * 1 found, 0 none, -1 malformed. */
static int fz__conv_id(const unsigned char *m, size_t n, coai_str *id)
{
    coai__pbr top, rr;
    coai__pbf f, g;
    int k, found = 0, runs = 0;
    coai__pbr_init(&top, m, n);
    while ((k = coai__pb_next(&top, &f)) > 0) {
        if (f.num != 1) continue;
        runs++;
        coai__pbr_init(&rr, f.p, f.n);
        while ((k = coai__pb_next(&rr, &g)) > 0)
            if (g.num == 5) { id->ptr = (const char *)g.p; id->len = g.n; found++; }
        if (k < 0) return -1;
    }
    if (k < 0 || runs != 1) return -1;
    return found == 1;
}

static void fz__raw(const uint8_t *data, size_t size)
{
    static const char nid[] = "7c2e9a41-0b6f-4d1a-8e55-93d0c4b2f716";
    coai_buf out = { 0 }, again = { 0 };
    coai_str id = { 0 };
    unsigned char *m = (unsigned char *)malloc(size ? size : 1);
    int r;
    if (!m) abort();
    memcpy(m, data, size);
    coai_buf_puts(&out, "pre");
    r = coai_encode_run_request_conversation(&out, m, size, coai_str_c(nid));
    if (out.err) abort();
    if (r != COAI_OK) {
        if (r != COAI_ERR_PROTO || out.len != 3) abort();
    } else {
        if (out.len < 3 || memcmp(out.data, "pre", 3) != 0) abort();
        if (fz__conv_id(out.data + 3, out.len - 3, &id) != 1) abort();
        if (id.len != sizeof nid - 1 || memcmp(id.ptr, nid, id.len) != 0) abort();
        if (coai_encode_run_request_conversation(&again, out.data + 3, out.len - 3,
                                                 coai_str_c(nid)) != COAI_OK)
            abort();
        if (again.len != out.len - 3 || memcmp(again.data, out.data + 3, again.len) != 0)
            abort();
    }
    free(m);
    coai_buf_free(&out);
    coai_buf_free(&again);
}

static void fz__built(const uint8_t *data, size_t size)
{
    coai_run_params p;
    coai_tool t;
    coai_str ids[2], vals[2];
    coai_buf a = { 0 }, b = { 0 }, got = { 0 };
    size_t la, lb, i = 4;
    char *oid, *nid;
    if (size < 4) return;
    la = data[1] % 64;
    lb = 1 + data[2] % 64;                    /* an empty new id is refused: tested apart */
    if (size < i + la + lb) return;
    oid = (char *)malloc(la + 1);
    nid = (char *)malloc(lb + 1);
    if (!oid || !nid) abort();
    memcpy(oid, data + i, la);
    memcpy(nid, data + i + la, lb);
    i += la + lb;
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    p.prompt.ptr = (const char *)data + i;
    p.prompt.len = size - i;
    p.model_id = coai_str_c("gpt-5");
    p.message_id = coai_str_c("11111111-2222-3333-4444-555555555555");
    p.workspace = coai_str_c("/w");
    t.name = coai_str_c("f");
    if (data[3] & 1) { p.tools = &t; p.tool_count = 1; }
    if (data[3] & 2) {
        ids[0] = coai_str_c("b1");
        vals[0] = p.prompt;
        ids[1] = p.prompt;
        vals[1] = coai_str_c("v");
        p.blob_ids = ids;
        p.blob_values = vals;
        p.blob_count = 2;
    }
    if (data[3] & 4) p.conversation_state = p.prompt;
    p.conversation_id.ptr = oid;
    p.conversation_id.len = la;
    if (coai_encode_run_request(&a, &p) != COAI_OK) abort();
    p.conversation_id.ptr = nid;
    p.conversation_id.len = lb;
    if (coai_encode_run_request(&b, &p) != COAI_OK) abort();
    if (coai_encode_run_request_conversation(&got, a.data, a.len, p.conversation_id) != COAI_OK)
        abort();
    if (got.len != b.len || memcmp(got.data, b.data, b.len) != 0) abort();
    free(oid);
    free(nid);
    coai_buf_free(&a);
    coai_buf_free(&b);
    coai_buf_free(&got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1) fz__built(data, size);
    else fz__raw(data + 1, size - 1);
    return 0;
}
