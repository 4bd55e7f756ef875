/* fz_msg.c - fuzz coai_msg_decode: arbitrary AgentServerMessage bytes, every view touched.
 * The first byte picks how the input is used so one target covers reuse of a coai_msg. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

static unsigned fz_touch(const coai_msg *m)
{
    const coai_str *v[] = { &m->text, &m->call_id, &m->blob_id, &m->blob_data, &m->exec.exec_id,
                            &m->exec.command, &m->exec.cwd, &m->exec.path, &m->exec.content,
                            &m->exec.pattern, &m->exec.glob, &m->exec.url, &m->exec.mcp_name,
                            &m->exec.tool_name, &m->exec.provider, &m->exec.tool_call_id,
                            &m->exec.args_json, &m->exec.description,
                            &m->exec.run_conversation_id, &m->exec.run_request_id };
    unsigned s = 0;
    size_t i, j;
    for (i = 0; i < sizeof v / sizeof *v; i++) {
        if (!v[i]->ptr) __builtin_trap();          /* views are never NULL */
        for (j = 0; j < v[i]->len; j++) s += (unsigned char)v[i]->ptr[j];
    }
    if (m->kind < COAI_MSG_NONE || m->kind > COAI_MSG_QUERY) __builtin_trap();
    /* mcp_state server identifiers: count and NUL-terminated copies agree */
    if (m->exec.server_id_count && !m->exec.server_ids) __builtin_trap();
    for (i = 0; i < m->exec.server_id_count; i++) {
        if (!m->exec.server_ids[i]) __builtin_trap();
        s += (unsigned)strlen(m->exec.server_ids[i]);
    }
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static volatile unsigned sink;
    coai_msg m = { 0 };
    unsigned char *copy = (unsigned char *)calloc(1, size ? size : 1);
    coai_result r;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    r = coai_msg_decode(&m, copy, size);
    if (r != COAI_OK && m.kind != COAI_MSG_NONE) __builtin_trap();
    if (size) memset(copy, 0x5a, size);           /* views must not point into the input */
    sink += fz_touch(&m);
    /* decode again into the same object: old storage must be released cleanly */
    if (size > 1) {
        memcpy(copy, data, size);
        r = coai_msg_decode(&m, copy + 1, size - 1);
        if (r != COAI_OK && m.kind != COAI_MSG_NONE) __builtin_trap();
        sink += fz_touch(&m);
    }
    coai_msg_free(&m);
    free(copy);
    return 0;
}
