/* t_decode.c - AgentServerMessage decoding (coai_msg_decode) against the vectors,
 * hand-built messages for every variant, McpArgs.args -> JSON, limits and malformed input. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include "cJSON.h"
#include <math.h>

/* ---- a tiny protobuf writer (test only) ---- */

static void pw_varint(coai_buf *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    coai_buf_append(b, t, n);
}

static void pw_tag(coai_buf *b, uint32_t f, int wt)
{
    pw_varint(b, (uint64_t)f << 3 | (unsigned)wt);
}
static void pw_uv(coai_buf *b, uint32_t f, uint64_t v) { pw_tag(b, f, 0); pw_varint(b, v); }

static void pw_len(coai_buf *b, uint32_t f, const void *p, size_t n)
{
    pw_tag(b, f, 2);
    pw_varint(b, n);
    coai_buf_append(b, p, n);
}

static void pw_str(coai_buf *b, uint32_t f, const char *s) { pw_len(b, f, s, strlen(s)); }

static void pw_f64(coai_buf *b, uint32_t f, double d)
{
    uint64_t u;
    unsigned char t[8];
    int i;
    memcpy(&u, &d, 8);
    for (i = 0; i < 8; i++) t[i] = (unsigned char)(u >> (8 * i));
    pw_tag(b, f, 1);
    coai_buf_append(b, t, 8);
}

/* Append sub as field f (length-delimited) and free sub. */
static void pw_sub(coai_buf *b, uint32_t f, coai_buf *sub)
{
    pw_len(b, f, sub->data ? (const void *)sub->data : "", sub->len);
    coai_buf_free(sub);
}

/* Replace b by a message that holds b as field f. */
static void pw_wrap(coai_buf *b, uint32_t f)
{
    coai_buf o = { 0 };
    pw_sub(&o, f, b);
    *b = o;
}

/* Struct / McpArgs map entry {1 key, 2 Value}; val NULL = no value field. */
static void pw_entry(coai_buf *b, uint32_t f, const char *key, size_t klen, coai_buf *val)
{
    coai_buf e = { 0 };
    pw_len(&e, 1, key, klen);
    if (val) pw_sub(&e, 2, val);
    pw_sub(b, f, &e);
}

static coai_buf v_str(const char *s) { coai_buf v = { 0 }; pw_str(&v, 3, s); return v; }
static coai_buf v_num(double d) { coai_buf v = { 0 }; pw_f64(&v, 2, d); return v; }
static coai_buf v_bool(uint64_t x) { coai_buf v = { 0 }; pw_uv(&v, 4, x); return v; }
static coai_buf v_null(void) { coai_buf v = { 0 }; pw_uv(&v, 1, 0); return v; }
static coai_buf v_empty(void) { coai_buf v = { 0 }; coai_buf_reserve(&v, 1); return v; }

/* Decode from an exact-size heap copy so ASan sees any over-read. */
static coai_result dec(coai_msg *m, const void *p, size_t n)
{
    unsigned char *c = (unsigned char *)malloc(n ? n : 1);
    coai_result r;
    if (!c) return COAI_ERR_NOMEM;
    if (n) memcpy(c, p, n);
    r = coai_msg_decode(m, c, n);
    /* views must not point into the input: scribble over it before anyone reads them */
    memset(c, 0xa5, n);
    free(c);
    return r;
}

static coai_result dec_buf(coai_msg *m, const coai_buf *b) { return dec(m, b->data, b->len); }

static int str_is(coai_str s, const char *lit) { return s.ptr && coai_str_eq(s, lit); }

/* ---- checking a decoded message against its proto3-JSON form ---- */

static const struct { const char *name; int num; } tool_names[] = {
    { "shellToolCall", 1 }, { "deleteToolCall", 3 }, { "globToolCall", 4 }, { "grepToolCall", 5 },
    { "readToolCall", 8 }, { "updateTodosToolCall", 9 }, { "readTodosToolCall", 10 },
    { "editToolCall", 12 }, { "lsToolCall", 13 }, { "readLintsToolCall", 14 },
    { "mcpToolCall", 15 }, { "applyAgentDiffToolCall", 22 }, { "fetchToolCall", 24 },
};

static const struct { const char *name; int num; } exec_names[] = {
    { "shellArgs", 2 }, { "writeArgs", 3 }, { "deleteArgs", 4 }, { "grepArgs", 5 },
    { "readArgs", 7 }, { "lsArgs", 8 }, { "diagnosticsArgs", 9 }, { "requestContextArgs", 10 },
    { "mcpArgs", 11 }, { "shellStreamArgs", 14 }, { "backgroundShellSpawnArgs", 16 },
    { "listMcpResourcesExecArgs", 17 }, { "readMcpResourceExecArgs", 18 }, { "fetchArgs", 20 },
    { "recordScreenArgs", 21 }, { "computerUseArgs", 22 },
};

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void check_b64(coai_str got, const char *b64, const char *what)
{
    unsigned char buf[4096];
    long n = coai_base64_decode(b64, strlen(b64), buf, sizeof buf);
    CHECKF(n >= 0 && got.len == (size_t)n && memcmp(got.ptr, buf, (size_t)n) == 0, "%s", what);
}

static void check_against_json(const coai_msg *m, const cJSON *asm_, const char *name)
{
    const cJSON *top = asm_->child, *mem;
    CHECKF(top != NULL, "%s: empty JSON", name);
    if (!top) return;
    if (strcmp(top->string, "interactionUpdate") == 0) {
        mem = top->child;
        if (!mem) { CHECKF(m->kind == COAI_MSG_NONE, "%s", name); return; }
        if (!strcmp(mem->string, "textDelta")) {
            CHECKF(m->kind == COAI_MSG_TEXT && str_is(m->text, jstr(mem, "text")), "%s", name);
        } else if (!strcmp(mem->string, "thinkingDelta")) {
            CHECKF(m->kind == COAI_MSG_THINKING && str_is(m->text, jstr(mem, "text")), "%s", name);
        } else if (!strcmp(mem->string, "heartbeat")) {
            CHECKF(m->kind == COAI_MSG_HEARTBEAT, "%s", name);
        } else if (!strcmp(mem->string, "turnEnded")) {
            CHECKF(m->kind == COAI_MSG_TURN_ENDED, "%s", name);
        } else if (!strcmp(mem->string, "tokenDelta")) {
            CHECKF(m->kind == COAI_MSG_TOKENS && m->value == (int64_t)jnum(mem, "tokens"), "%s",
                   name);
        } else if (!strcmp(mem->string, "thinkingCompleted")) {
            CHECKF(m->kind == COAI_MSG_THINKING_DONE &&
                   m->value == (int64_t)jnum(mem, "thinkingDurationMs"), "%s", name);
        } else if (!strcmp(mem->string, "toolCallStarted") ||
                   !strcmp(mem->string, "toolCallCompleted") ||
                   !strcmp(mem->string, "partialToolCall")) {
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(mem, "toolCall");
            int want = 0;
            size_t i;
            coai_msg_kind k = !strcmp(mem->string, "toolCallStarted") ? COAI_MSG_TOOL_STARTED :
                              !strcmp(mem->string, "toolCallCompleted") ? COAI_MSG_TOOL_COMPLETED :
                              COAI_MSG_TOOL_PARTIAL;
            for (i = 0; tc && tc->child && i < sizeof tool_names / sizeof *tool_names; i++)
                if (!strcmp(tool_names[i].name, tc->child->string)) want = tool_names[i].num;
            CHECKF(m->kind == k, "%s kind %d", name, m->kind);
            CHECKF(m->tool == want && want != 0, "%s tool %d want %d", name, m->tool, want);
            CHECKF(str_is(m->call_id, jstr(mem, "callId")), "%s call_id", name);
            if (k == COAI_MSG_TOOL_PARTIAL)
                CHECKF(str_is(m->text, jstr(mem, "argsTextDelta")), "%s args delta", name);
        } else {
            CHECKF(0, "%s: member %s not covered by the checker", name, mem->string);
        }
    } else if (strcmp(top->string, "execServerMessage") == 0) {
        const coai_exec *x = &m->exec;
        const cJSON *a = NULL;
        int want = 0;
        size_t i;
        for (mem = top->child; mem; mem = mem->next)
            for (i = 0; i < sizeof exec_names / sizeof *exec_names; i++)
                if (!strcmp(exec_names[i].name, mem->string)) { want = exec_names[i].num; a = mem; }
        CHECKF(m->kind == COAI_MSG_EXEC && (int)x->kind == want, "%s kind %d/%d", name, m->kind,
               x->kind);
        CHECKF(x->id == (uint32_t)jnum(top, "id"), "%s id", name);
        CHECKF(str_is(x->exec_id, jstr(top, "execId")), "%s exec_id", name);
        if (!a) return;
        CHECKF(str_is(x->tool_call_id, jstr(a, "toolCallId")), "%s tool_call_id", name);
        switch (want) {
        case 2: case 14:
            CHECKF(str_is(x->command, jstr(a, "command")), "%s command", name);
            CHECKF(str_is(x->cwd, jstr(a, "workingDirectory")), "%s cwd", name);
            break;
        case 3:
            CHECKF(str_is(x->path, jstr(a, "path")), "%s", name);
            CHECKF(str_is(x->content, jstr(a, "fileText")), "%s", name);
            break;
        case 5:
            CHECKF(str_is(x->pattern, jstr(a, "pattern")), "%s pattern", name);
            CHECKF(str_is(x->path, jstr(a, "path")), "%s path", name);
            CHECKF(x->has_path == (cJSON_GetObjectItemCaseSensitive(a, "path") != NULL),
                   "%s has_path", name);
            CHECKF(str_is(x->glob, jstr(a, "glob")), "%s glob", name);
            break;
        case 4: case 7: case 8:
            CHECKF(str_is(x->path, jstr(a, "path")), "%s path", name);
            CHECKF(x->has_path == (cJSON_GetObjectItemCaseSensitive(a, "path") != NULL),
                   "%s has_path", name);
            break;
        case 20:
            CHECKF(str_is(x->url, jstr(a, "url")), "%s url", name);
            break;
        case 11: {
            char *want_json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, "args"));
            CHECKF(str_is(x->mcp_name, jstr(a, "name")), "%s name", name);
            CHECKF(str_is(x->provider, jstr(a, "providerIdentifier")), "%s provider", name);
            CHECKF(str_is(x->tool_name, jstr(a, "toolName")), "%s tool_name", name);
            CHECKF(want_json && str_is(x->args_json, want_json), "%s args %.*s vs %s", name,
                   (int)x->args_json.len, x->args_json.ptr, want_json ? want_json : "?");
            cJSON_free(want_json);
            break;
        }
        }
    } else if (strcmp(top->string, "kvServerMessage") == 0) {
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(top, "setBlobArgs");
        const cJSON *get = cJSON_GetObjectItemCaseSensitive(top, "getBlobArgs");
        CHECKF(m->id == (uint32_t)jnum(top, "id"), "%s id", name);
        if (set) {
            CHECKF(m->kind == COAI_MSG_KV_SET, "%s", name);
            check_b64(m->blob_id, jstr(set, "blobId"), name);
            check_b64(m->blob_data, jstr(set, "blobData"), name);
        } else {
            CHECKF(get && m->kind == COAI_MSG_KV_GET, "%s", name);
            check_b64(m->blob_id, jstr(get, "blobId"), name);
        }
    } else if (strcmp(top->string, "conversationCheckpointUpdate") == 0) {
        const cJSON *td = cJSON_GetObjectItemCaseSensitive(top, "tokenDetails");
        CHECKF(m->kind == COAI_MSG_CHECKPOINT, "%s", name);
        CHECKF(m->value == (int64_t)jnum(td, "usedTokens") &&
               m->value2 == (int64_t)jnum(td, "maxTokens"), "%s tokens", name);
    } else {
        CHECKF(0, "%s: %s not covered by the checker", name, top->string);
    }
}

/* The original's own low-level parse (server_frames.json) must agree too. */
static void check_against_original(const coai_msg *m, const cJSON *olp, const char *name)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, olp) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(it, "parseExecServerMessage");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "parseKvServerMessage");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(it, "parseInteractionUpdate");
        if (e) {
            const char *type = jstr(e, "type");
            CHECKF(m->exec.id == (uint32_t)jnum(e, "id"), "%s", name);
            CHECKF(str_is(m->exec.exec_id, jstr(e, "execId")), "%s", name);
            if (!strcmp(type, "shell")) {
                CHECKF(m->exec.kind == COAI_EXEC_SHELL || m->exec.kind == COAI_EXEC_SHELL_STREAM,
                       "%s", name);
                CHECKF(str_is(m->exec.command, jstr(e, "command")), "%s", name);
                CHECKF(str_is(m->exec.cwd, jstr(e, "cwd")), "%s", name);
            } else if (!strcmp(type, "read")) {
                CHECKF(m->exec.kind == COAI_EXEC_READ && str_is(m->exec.path, jstr(e, "path")),
                       "%s", name);
            } else if (!strcmp(type, "mcp")) {
                CHECKF(m->exec.kind == COAI_EXEC_MCP, "%s", name);
                CHECKF(str_is(m->exec.mcp_name, jstr(e, "name")), "%s", name);
                CHECKF(str_is(m->exec.tool_call_id, jstr(e, "toolCallId")), "%s", name);
                CHECKF(str_is(m->exec.tool_name, jstr(e, "toolName")), "%s", name);
            } else {
                CHECKF(0, "%s: type %s not covered", name, type);
            }
        } else if (k) {
            coai_buf h = { 0 };
            coai_hex_append(&h, m->blob_id.ptr, m->blob_id.len);
            CHECKF(m->id == (uint32_t)jnum(k, "id"), "%s", name);
            CHECKF(strcmp((char *)h.data, jstr(k, "blobId")) == 0, "%s blob id hex", name);
            if (cJSON_GetObjectItemCaseSensitive(k, "blobData")) {
                coai_buf_reset(&h);
                coai_hex_append(&h, m->blob_data.ptr, m->blob_data.len);
                CHECKF(strcmp((char *)h.data, jstr(k, "blobData")) == 0, "%s blob hex", name);
            }
            coai_buf_free(&h);
        } else if (u) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(u, "text");
            const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(u, "toolCallStarted");
            if (cJSON_IsString(t))
                CHECKF(m->kind == COAI_MSG_TEXT && str_is(m->text, t->valuestring), "%s", name);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(u, "isComplete")))
                CHECKF(m->kind == COAI_MSG_TURN_ENDED, "%s", name);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(u, "isHeartbeat")))
                CHECKF(m->kind == COAI_MSG_HEARTBEAT, "%s", name);
            if (cJSON_IsObject(tcs))
                CHECKF(m->kind == COAI_MSG_TOOL_STARTED && str_is(m->call_id, jstr(tcs, "callId")),
                       "%s", name);
        }
    }
}

/* Touch every view: ASan flags any view that points at freed or foreign memory. */
static unsigned touch(const coai_msg *m)
{
    const coai_str *v[] = { &m->text, &m->call_id, &m->blob_id, &m->blob_data, &m->exec.exec_id,
                            &m->exec.command, &m->exec.cwd, &m->exec.path, &m->exec.content,
                            &m->exec.pattern, &m->exec.glob, &m->exec.url, &m->exec.mcp_name,
                            &m->exec.tool_name, &m->exec.provider, &m->exec.tool_call_id,
                            &m->exec.args_json };
    unsigned s = 0;
    size_t i, j;
    for (i = 0; i < sizeof v / sizeof *v; i++) {
        if (!v[i]->ptr) { s += 1000; continue; }           /* must never be NULL */
        for (j = 0; j < v[i]->len; j++) s += (unsigned char)v[i]->ptr[j];
    }
    return s;
}

/* Every prefix of msg: an error or a well-formed event, never a crash or over-read. */
static void truncations(const unsigned char *p, size_t n, const char *name)
{
    coai_msg m = { 0 };
    size_t i;
    int bad = 0;
    for (i = 0; i < n; i++) {
        coai_result r = dec(&m, p, i);
        if (r != COAI_OK && r != COAI_ERR_PROTO) bad++;
        if (r == COAI_OK && (m.kind < COAI_MSG_NONE || m.kind > COAI_MSG_QUERY)) bad++;
        if (r != COAI_OK && m.kind != COAI_MSG_NONE) bad++;
        touch(&m);
    }
    CHECKF(bad == 0, "%s: %d bad truncations", name, bad);
    coai_msg_free(&m);
}

static int vector_frames(coai_msg *m)
{
    size_t len;
    char *txt = test_read_file(test_vec_path("server_frames.json"), &len);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL, *f;
    int count = 0;
    CHECKF(root != NULL, "server_frames.json missing (COAI_VECTORS?)");
    if (!root) { free(txt); return 0; }
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(root, "frames")) {
        const char *name = jstr(f, "name"), *hex = jstr(f, "agent_server_message_hex");
        const char *fhex = jstr(f, "frame_hex");
        unsigned char *b, *fb;
        size_t n, fn;
        if (!*hex) continue;                                /* trailer frames: not ours */
        b = test_unhex(hex, &n);
        fb = test_unhex(fhex, &fn);
        CHECKF(b && fb && fn == n + 5 && fb[0] == 0 && memcmp(fb + 5, b, n) == 0, "%s frame", name);
        CHECKF(dec(m, b, n) == COAI_OK, "%s decodes", name);
        check_against_json(m, cJSON_GetObjectItemCaseSensitive(f, "agent_server_message"), name);
        check_against_original(m, cJSON_GetObjectItemCaseSensitive(f, "original_low_level_parse"),
                               name);
        touch(m);
        truncations(b, n, name);
        free(b);
        free(fb);
        count++;
    }
    cJSON_Delete(root);
    free(txt);
    return count;
}

static const char *scenarios[] = {
    "error_outdated_client", "error_session_path", "error_usage_limit", "error_usage_limit_auto",
    "http_401", "kv_blob_assistant_fallback", "models", "non_stream", "non_stream_error",
    "request_context_exec", "run_request_one_tool", "text_basic", "tool_call_glob",
    "tool_call_mcp", "tool_call_shell", "tool_result_followup", "unprovided_tool_ls",
};

/* The arguments text of the tool-call chunk in an e2e OpenAI response, or NULL. */
static char *e2e_arguments(const cJSON *root)
{
    const char *body = jstr(cJSON_GetObjectItemCaseSensitive(root, "openai_response"), "body");
    const char *line = strstr(body, "\"tool_calls\"");
    const char *start, *end;
    char *one, *res = NULL;
    cJSON *j, *tc;
    if (!line) return NULL;
    start = line;
    while (start > body && start[-1] != '\n') start--;
    end = strchr(line, '\n');
    if (!end || strncmp(start, "data: ", 6) != 0) return NULL;
    one = (char *)malloc((size_t)(end - start));
    memcpy(one, start + 6, (size_t)(end - start - 6));
    one[end - start - 6] = 0;
    j = cJSON_Parse(one);
    tc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
             cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(
                 cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "delta"), "tool_calls"), 0);
    tc = cJSON_GetObjectItemCaseSensitive(tc, "function");
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(tc, "arguments"))) {
        const char *t = jstr(tc, "arguments");
        res = (char *)malloc(strlen(t) + 1);
        strcpy(res, t);
    }
    cJSON_Delete(j);
    free(one);
    return res;
}

static int e2e_frames(coai_msg *m, int *mcp_checked)
{
    size_t s, len;
    int count = 0;
    for (s = 0; s < sizeof scenarios / sizeof *scenarios; s++) {
        char path[256], *txt, *args;
        cJSON *root, *f;
        snprintf(path, sizeof path, "e2e/scenario_%s.json", scenarios[s]);
        txt = test_read_file(test_vec_path(path), &len);
        root = txt ? cJSON_Parse(txt) : NULL;
        CHECKF(root != NULL, "%s missing", path);
        if (!root) { free(txt); continue; }
        args = e2e_arguments(root);
        const cJSON *frames = cJSON_GetObjectItemCaseSensitive(root, "server_frames_sent_in_order");
        cJSON_ArrayForEach(f, frames) {
            const char *hex = jstr(f, "agent_server_message_hex");
            unsigned char *b;
            size_t n;
            char label[200];
            if (!*hex) continue;
            snprintf(label, sizeof label, "%s/%s", scenarios[s], jstr(f, "name"));
            b = test_unhex(hex, &n);
            CHECKF(b && dec(m, b, n) == COAI_OK, "%s decodes", label);
            check_against_json(m, cJSON_GetObjectItemCaseSensitive(f, "agent_server_message"),
                               label);
            /* The exact arguments text the original sent to the OpenAI client. */
            if (m->kind == COAI_MSG_EXEC && m->exec.kind == COAI_EXEC_MCP) {
                CHECKF(args && str_is(m->exec.args_json, args), "%s: %.*s vs %s", label,
                       (int)m->exec.args_json.len, m->exec.args_json.ptr, args ? args : "-");
                ++*mcp_checked;
            }
            touch(m);
            truncations(b, n, label);
            free(b);
            count++;
        }
        free(args);
        cJSON_Delete(root);
        free(txt);
    }
    return count;
}

/* ---- hand-built messages ---- */

/* AgentServerMessage{1: InteractionUpdate{f: sub}} */
static coai_buf iu(uint32_t f, coai_buf *sub)
{
    coai_buf b = { 0 };
    pw_sub(&b, f, sub);
    pw_wrap(&b, 1);
    return b;
}

static coai_buf exec_msg(uint32_t id, const char *exec_id, uint32_t f, coai_buf *args)
{
    coai_buf b = { 0 };
    pw_uv(&b, 1, id);
    pw_sub(&b, f, args);
    if (exec_id) pw_str(&b, 15, exec_id);
    pw_wrap(&b, 2);
    return b;
}

static void all_trunc(const coai_buf *b, const char *name) { truncations(b->data, b->len, name); }

static void interaction_variants(coai_msg *m)
{
    coai_buf s = { 0 }, t = { 0 }, b;
    /* thinking_completed */
    pw_uv(&s, 1, 1500);
    b = iu(5, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_THINKING_DONE && m->value == 1500);
    all_trunc(&b, "thinking_completed");
    coai_buf_free(&b);
    /* token_delta with a negative int32 */
    pw_uv(&s, 1, (uint64_t)(int64_t)-3);
    b = iu(8, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOKENS && m->value == -3);
    coai_buf_free(&b);
    /* partial_tool_call: edit (12) with args_text_delta */
    pw_str(&t, 1, "/a.txt");
    pw_wrap(&t, 1);                      /* EditToolCall{args} */
    pw_wrap(&t, 12);                     /* ToolCall{edit_tool_call} */
    pw_str(&s, 1, "call-9");
    pw_sub(&s, 2, &t);
    pw_str(&s, 3, "{\"path\":");
    pw_str(&s, 4, "toolu_9");
    b = iu(7, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOOL_PARTIAL && m->tool == 12);
    CHECK(str_is(m->call_id, "call-9") && str_is(m->text, "{\"path\":"));
    all_trunc(&b, "partial_tool_call");
    coai_buf_free(&b);
    /* tool_call_completed: apply_agent_diff (22) */
    pw_str(&t, 1, "agent");
    pw_wrap(&t, 1);
    pw_wrap(&t, 22);
    pw_str(&s, 1, "call-10");
    pw_sub(&s, 2, &t);
    b = iu(3, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOOL_COMPLETED && m->tool == 22);
    CHECK(str_is(m->call_id, "call-10") && m->text.len == 0);
    coai_buf_free(&b);
    /* tool_call_started without a ToolCall, and one whose ToolCall is a varint (ignored) */
    pw_str(&s, 1, "c");
    b = iu(2, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOOL_STARTED && m->tool == 0);
    coai_buf_free(&b);
    pw_uv(&s, 2, 15);
    pw_str(&s, 1, "c2");
    b = iu(2, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOOL_STARTED && m->tool == 0 &&
          str_is(m->call_id, "c2"));
    coai_buf_free(&b);
    /* a ToolCall whose result is a 20000-deep tree: never decoded, no recursion */
    {
        int i;
        coai_buf_reserve(&t, 1);
        for (i = 0; i < 20000; i++) pw_wrap(&t, 1);
        pw_wrap(&t, 2);                  /* LsToolCall.result */
        pw_wrap(&t, 13);                 /* ToolCall.ls_tool_call */
        pw_str(&s, 1, "deep");
        pw_sub(&s, 2, &t);
        b = iu(2, &s);
        CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TOOL_STARTED && m->tool == 13);
        coai_buf_free(&b);
    }
    /* step_started */
    pw_uv(&s, 1, 77);
    b = iu(16, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_STEP && m->value == 16 &&
          m->value2 == 77);
    coai_buf_free(&b);
    /* informational members -> STEP with the member number */
    {
        static const uint32_t info[] = { 6, 9, 10, 11, 12, 15 };
        size_t i;
        for (i = 0; i < sizeof info / sizeof *info; i++) {
            pw_str(&s, 1, "x");
            b = iu(info[i], &s);
            CHECKF(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_STEP &&
                   m->value == (int64_t)info[i], "member %u", (unsigned)info[i]);
            coai_buf_free(&b);
        }
    }
    /* unknown member, empty update, unknown fields around a text delta */
    pw_str(&s, 1, "x");
    b = iu(40, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    pw_len(&b, 1, "", 0);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    pw_uv(&s, 9, 5);
    pw_str(&s, 1, "hi");
    pw_f64(&s, 10, 1.0);
    pw_tag(&s, 11, 5);
    coai_buf_append(&s, "\1\2\3\4", 4);
    b = iu(1, &s);
    pw_uv(&b, 99, 1);                    /* unknown top-level field after the update */
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TEXT && str_is(m->text, "hi"));
    coai_buf_free(&b);
    /* text with an embedded NUL ends there (documented); empty text is a TEXT event */
    pw_len(&s, 1, "a\0b", 3);
    b = iu(1, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TEXT && str_is(m->text, "a"));
    coai_buf_free(&b);
    coai_buf_reserve(&s, 1);
    b = iu(1, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TEXT && m->text.len == 0 &&
          m->text.ptr != NULL);
    coai_buf_free(&b);
}

static void exec_variants(coai_msg *m)
{
    coai_buf a = { 0 }, b;
    const coai_exec *x = &m->exec;
    /* shell_args (2) with tool_call_id */
    pw_str(&a, 1, "echo hi");
    pw_str(&a, 2, "/w");
    pw_uv(&a, 3, 1000);
    pw_str(&a, 4, "toolu_S");
    pw_str(&a, 5, "echo");
    b = exec_msg(12, NULL, 2, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC && x->kind == COAI_EXEC_SHELL);
    CHECK(x->id == 12 && x->exec_id.len == 0 && x->exec_id.ptr != NULL);
    CHECK(str_is(x->command, "echo hi") && str_is(x->cwd, "/w"));
    CHECK(str_is(x->tool_call_id, "toolu_S"));
    all_trunc(&b, "shell");
    coai_buf_free(&b);
    /* write */
    pw_str(&a, 1, "/w/f.txt");
    pw_str(&a, 2, "line1\nline2\n");
    pw_str(&a, 3, "toolu_W");
    pw_uv(&a, 4, 1);
    pw_len(&a, 5, "\0\1", 2);
    b = exec_msg(3, "exec-w", 3, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_WRITE && str_is(x->path, "/w/f.txt"));
    CHECK(str_is(x->content, "line1\nline2\n") && str_is(x->tool_call_id, "toolu_W"));
    CHECK(str_is(x->exec_id, "exec-w"));
    coai_buf_free(&b);
    /* delete */
    pw_str(&a, 1, "/w/gone");
    b = exec_msg(4, "e4", 4, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_DELETE && str_is(x->path, "/w/gone"));
    coai_buf_free(&b);
    /* grep: pattern + path, no glob; then glob without path */
    pw_str(&a, 1, "TODO");
    pw_str(&a, 2, "/w/src");
    pw_str(&a, 14, "toolu_G");
    b = exec_msg(5, NULL, 5, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_GREP && str_is(x->pattern, "TODO"));
    CHECK(x->has_path && str_is(x->path, "/w/src") && x->glob.len == 0);
    CHECK(str_is(x->tool_call_id, "toolu_G"));
    coai_buf_free(&b);
    pw_str(&a, 3, "*.c");
    b = exec_msg(6, NULL, 5, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_GREP && !x->has_path);
    CHECK(str_is(x->glob, "*.c") && x->pattern.len == 0);
    coai_buf_free(&b);
    /* read with tool_call_id */
    pw_str(&a, 1, "/w/r");
    pw_str(&a, 2, "toolu_R");
    b = exec_msg(7, NULL, 7, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_READ && str_is(x->path, "/w/r"));
    CHECK(str_is(x->tool_call_id, "toolu_R"));
    coai_buf_free(&b);
    /* ls: absent path, present-but-empty path */
    pw_str(&a, 2, "node_modules");
    b = exec_msg(8, NULL, 8, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_LS && !x->has_path && x->path.len == 0);
    coai_buf_free(&b);
    pw_len(&a, 1, "", 0);
    b = exec_msg(8, NULL, 8, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_LS && x->has_path && x->path.len == 0);
    coai_buf_free(&b);
    /* fetch */
    pw_str(&a, 1, "https://example.com/");
    b = exec_msg(20, NULL, 20, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_FETCH &&
          str_is(x->url, "https://example.com/"));
    coai_buf_free(&b);
    /* kinds without fields */
    {
        static const uint32_t bare[] = { 9, 10, 16, 17, 18, 21, 22 };
        size_t i;
        for (i = 0; i < sizeof bare / sizeof *bare; i++) {
            pw_str(&a, 1, "whatever");
            b = exec_msg(100 + (uint32_t)i, "ex", bare[i], &a);
            CHECKF(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC &&
                   x->kind == (coai_exec_kind)bare[i] && x->id == 100 + i &&
                   str_is(x->exec_id, "ex"), "exec kind %u", (unsigned)bare[i]);
            coai_buf_free(&b);
        }
    }
    /* an exec member we do not know -> EXEC with kind = its field number (answered with a
     * throw); exec_id with a NUL keeps its length */
    pw_str(&a, 1, "x");
    b = exec_msg(1, "a\0b", 30, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC && x->kind == 30);
    coai_buf_free(&b);
    {
        coai_buf e = { 0 };
        pw_uv(&e, 1, 2);
        pw_len(&e, 10, "", 0);
        pw_len(&e, 15, "a\0b", 3);
        pw_wrap(&e, 2);
        CHECK(dec_buf(m, &e) == COAI_OK && x->kind == COAI_EXEC_REQUEST_CONTEXT &&
              x->exec_id.len == 3 && memcmp(x->exec_id.ptr, "a\0b", 3) == 0);
        coai_buf_free(&e);
    }
    /* id above 32 bits is truncated like any uint32 */
    {
        coai_buf e = { 0 };
        pw_uv(&e, 1, 0x100000005ull);
        pw_str(&a, 1, "p");
        pw_sub(&e, 7, &a);
        pw_wrap(&e, 2);
        CHECK(dec_buf(m, &e) == COAI_OK && x->id == 5);
        coai_buf_free(&e);
    }
}

static void other_variants(coai_msg *m)
{
    coai_buf a = { 0 }, b = { 0 };
    unsigned char *big;
    size_t i;
    /* exec_server_control_message abort */
    pw_uv(&a, 1, 42);
    pw_wrap(&a, 1);
    pw_wrap(&a, 5);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_EXEC_ABORT && m->id == 42);
    all_trunc(&a, "abort");
    coai_buf_free(&a);
    pw_uv(&a, 7, 1);
    pw_wrap(&a, 5);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&a);
    /* interaction_query */
    pw_uv(&a, 1, 5);
    pw_len(&a, 3, "\x0a\x00", 2);
    pw_wrap(&a, 7);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_QUERY && m->id == 5 && m->query == 3);
    coai_buf_free(&a);
    pw_uv(&a, 1, 6);
    pw_wrap(&a, 7);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_QUERY && m->id == 6 && m->query == 0);
    coai_buf_free(&a);
    /* checkpoint without token details; token details split in two (merged) */
    pw_str(&a, 4, "pending");
    pw_wrap(&a, 3);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_CHECKPOINT && m->value == 0 &&
          m->value2 == 0);
    coai_buf_free(&a);
    pw_len(&a, 5, "\x10\x64", 2);        /* max_tokens 100 */
    pw_len(&a, 5, "\x08\x07", 2);        /* used_tokens 7 */
    pw_wrap(&a, 3);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_CHECKPOINT && m->value == 7 &&
          m->value2 == 100);
    coai_buf_free(&a);
    /* kv: 200 KiB set_blob, with NUL bytes; get without member */
    big = (unsigned char *)malloc(200 * 1024);
    for (i = 0; i < 200 * 1024; i++) big[i] = (unsigned char)(i * 7);
    pw_uv(&a, 1, 9);
    pw_len(&b, 1, "\0id\0", 4);
    pw_len(&b, 2, big, 200 * 1024);
    pw_sub(&a, 3, &b);
    pw_wrap(&a, 4);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_KV_SET && m->id == 9);
    CHECK_MEM(m->blob_id.ptr, m->blob_id.len, "\0id\0", 4);
    CHECK_MEM(m->blob_data.ptr, m->blob_data.len, big, (size_t)200 * 1024);
    coai_buf_free(&a);
    free(big);
    pw_uv(&a, 1, 3);
    pw_wrap(&a, 4);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&a);
    pw_uv(&a, 1, 4);
    pw_len(&a, 2, "", 0);                /* get_blob_args{} : blob id absent -> "" */
    pw_wrap(&a, 4);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_KV_GET && m->blob_id.len == 0 &&
          m->blob_id.ptr != NULL);
    coai_buf_free(&a);
    /* top level: unknown fields only, field 6, empty payload, last member wins */
    pw_uv(&a, 6, 1);
    pw_len(&a, 8, "x", 1);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&a);
    CHECK(coai_msg_decode(m, "", 0) == COAI_OK && m->kind == COAI_MSG_NONE);
    CHECK(coai_msg_decode(m, NULL, 0) == COAI_OK && m->kind == COAI_MSG_NONE);
    CHECK(coai_msg_decode(m, NULL, 3) == COAI_ERR_STATE);
    coai_buf_append(&a, "\x0a\x02\x6a\x00\x0a\x02\x72\x00", 8);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_TURN_ENDED);
    coai_buf_free(&a);
}

/* ---- McpArgs.args -> JSON ---- */

static coai_buf mcp_msg(coai_buf *args_fields)
{
    coai_buf a = { 0 };
    pw_str(&a, 1, "cursor-tools-t");
    if (args_fields->len) coai_buf_append(&a, args_fields->data, args_fields->len);
    coai_buf_free(args_fields);
    pw_str(&a, 3, "toolu_M");
    pw_str(&a, 4, "cursor-tools");
    pw_str(&a, 5, "t");
    return exec_msg(2, "exec-m", 11, &a);
}

#define ENTRY(b, k, v) \
    do { coai_buf v_ = (v); pw_entry((b), 2, (k), sizeof(k) - 1, &v_); } while (0)

static void mcp_args_json(coai_msg *m)
{
    coai_buf f = { 0 }, b, st = { 0 }, ls = { 0 }, v;
    const char *want =
        "{\"2\":\"TWO\",\"10\":\"ten\",\"4294967294\":\"maxidx\","
        "\"s\":\"a\\\"b\\\\c\\n\\u0001/\xc3\xa9\",\"n\":3,\"f\":-0.5,\"big\":1e+21,"
        "\"t\":true,\"fa\":false,\"two\":false,\"nul\":null,"
        "\"obj\":{\"k\":[1,null,\"z\",[],{}]},\"dup\":2,\"01\":\"zero-one\","
        "\"4294967295\":\"max\",\"bom\":\"hi\",\"bad\":\"\xef\xbf\xbd\",\"first\":true,"
        "\"nan\":null}";
    ENTRY(&f, "s", v_str("a\"b\\c\n\x01/\xc3\xa9"));
    ENTRY(&f, "n", v_num(3));
    ENTRY(&f, "f", v_num(-0.5));
    ENTRY(&f, "big", v_num(1e21));
    ENTRY(&f, "t", v_bool(1));
    ENTRY(&f, "fa", v_bool(0));
    ENTRY(&f, "two", v_bool(2));
    ENTRY(&f, "nul", v_null());
    ENTRY(&f, "gone", v_empty());
    ENTRY(&f, "", v_str("x"));
    ENTRY(&f, "__proto__", v_num(1));
    ENTRY(&f, "\xef\xbb\xbf", v_num(1));                 /* BOM-only key decodes to "" */
    /* obj: {"k": [1, <empty>, "z", [], {}]} */
    v = v_num(1); pw_sub(&ls, 1, &v);
    v = v_empty(); pw_sub(&ls, 1, &v);
    v = v_str("z"); pw_sub(&ls, 1, &v);
    pw_len(&ls, 1, "\x32\x00", 2);
    pw_len(&ls, 1, "\x2a\x00", 2);
    pw_wrap(&ls, 6);
    pw_entry(&st, 1, "k", 1, &ls);
    pw_wrap(&st, 5);
    pw_entry(&f, 2, "obj", 3, &st);
    ENTRY(&f, "dup", v_num(1));
    ENTRY(&f, "10", v_str("ten"));
    ENTRY(&f, "2", v_str("two"));
    ENTRY(&f, "01", v_str("zero-one"));
    ENTRY(&f, "4294967295", v_str("max"));
    ENTRY(&f, "4294967294", v_str("maxidx"));
    ENTRY(&f, "bom", v_str("\xef\xbb\xbfhi"));
    ENTRY(&f, "bad", v_str("\xff"));
    /* first recognised member wins: 3 as a varint is not recognised, then bool, then string */
    memset(&v, 0, sizeof v);
    pw_uv(&v, 3, 1);
    pw_uv(&v, 4, 1);
    pw_str(&v, 3, "later");
    pw_entry(&f, 2, "first", 5, &v);
    ENTRY(&f, "nan", v_num(NAN));
    ENTRY(&f, "undef_dup", v_str("x"));
    ENTRY(&f, "undef_dup", v_empty());
    ENTRY(&f, "\xef\xbb\xbf" "dup", v_num(2));           /* decodes to "dup" again */
    ENTRY(&f, "2", v_str("TWO"));
    pw_entry(&f, 2, "novalue", 7, NULL);                 /* entry without a Value */
    pw_uv(&f, 2, 5);                                     /* args as a varint: ignored */
    b = mcp_msg(&f);
    CHECK(dec_buf(m, &b) == COAI_OK && m->exec.kind == COAI_EXEC_MCP);
    CHECKF(str_is(m->exec.args_json, want), "got %.*s", (int)m->exec.args_json.len,
           m->exec.args_json.ptr);
    CHECK(str_is(m->exec.mcp_name, "cursor-tools-t") && str_is(m->exec.tool_name, "t"));
    CHECK(str_is(m->exec.provider, "cursor-tools") && str_is(m->exec.tool_call_id, "toolu_M"));
    CHECK(str_is(m->exec.exec_id, "exec-m") && m->exec.id == 2);
    all_trunc(&b, "mcp args");
    coai_buf_free(&b);
    /* no args at all -> {} */
    b = mcp_msg(&f);
    CHECK(dec_buf(m, &b) == COAI_OK && str_is(m->exec.args_json, "{}"));
    coai_buf_free(&b);
    /* a malformed Value inside the args is a protocol error */
    pw_entry(&f, 2, "x", 1, NULL);
    {
        coai_buf bad = { 0 };
        pw_tag(&bad, 3, 2);
        pw_varint(&bad, 50);             /* string length past the end of the Value */
        coai_buf_append(&bad, "ab", 2);
        pw_entry(&f, 2, "y", 1, &bad);
    }
    b = mcp_msg(&f);
    CHECK(dec_buf(m, &b) == COAI_ERR_PROTO && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
}

/* args {"a": {"a": ... {}}} with `total` JSON objects, or lists [[...]] inside "a". */
static void nesting(coai_msg *m, int total, int lists, coai_result want)
{
    coai_buf v = { 0 }, f = { 0 }, b, exp = { 0 };
    int i;
    coai_buf_reserve(&v, 1);
    pw_wrap(&v, lists ? 6 : 5);                          /* innermost [] or {} */
    for (i = 0; i < total - 2; i++) {
        if (lists) {
            pw_wrap(&v, 1);                              /* ListValue{values: v} */
            pw_wrap(&v, 6);
        } else {
            coai_buf st = { 0 };
            pw_entry(&st, 1, "a", 1, &v);
            pw_wrap(&st, 5);
            v = st;
        }
    }
    pw_entry(&f, 2, "a", 1, &v);
    b = mcp_msg(&f);
    coai_buf_puts(&exp, "{\"a\":");
    for (i = 0; i < total - 2; i++) coai_buf_puts(&exp, lists ? "[" : "{\"a\":");
    coai_buf_puts(&exp, lists ? "[]" : "{}");
    for (i = 0; i < total - 2; i++) coai_buf_puts(&exp, lists ? "]" : "}");
    coai_buf_puts(&exp, "}");
    CHECKF(dec_buf(m, &b) == want, "depth %d lists %d", total, lists);
    if (want == COAI_OK)
        CHECKF(str_is(m->exec.args_json, (char *)exp.data), "depth %d: %.60s", total,
               m->exec.args_json.ptr);
    else
        CHECK(m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    coai_buf_free(&exp);
}

/* ---- malformed input ---- */

static void malformed(coai_msg *m)
{
    unsigned char over[80];
    coai_buf a = { 0 }, s = { 0 }, b;
    size_t i;
    /* a 70-byte varint: as a top-level tag, as a length, inside an unknown leaf field */
    for (i = 0; i < 69; i++) over[i] = 0x80;
    over[69] = 0x01;
    CHECK(dec(m, over, 70) == COAI_ERR_PROTO);
    coai_buf_append(&a, "\x0a", 1);
    coai_buf_append(&a, over, 70);
    CHECK(dec_buf(m, &a) == COAI_ERR_PROTO && m->kind == COAI_MSG_NONE);
    coai_buf_free(&a);
    pw_str(&s, 1, "hi");
    pw_tag(&s, 9, 0);
    coai_buf_append(&s, over, 70);
    b = iu(1, &s);
    CHECK(dec_buf(m, &b) == COAI_ERR_PROTO);
    coai_buf_free(&b);
    /* 10-byte varints are fine (uint64 max) */
    pw_tag(&a, 9, 0);
    coai_buf_append(&a, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
    CHECK(dec_buf(m, &a) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&a);
    /* wrong wire types */
    CHECK(dec(m, "\x08\x01", 2) == COAI_ERR_PROTO);                 /* interaction_update varint */
    CHECK(dec(m, "\x0a\x02\x08\x01", 4) == COAI_ERR_PROTO);         /* text_delta varint */
    CHECK(dec(m, "\x0a\x04\x0a\x02\x08\x01", 6) == COAI_ERR_PROTO); /* text as varint (nanopb) */
    CHECK(dec(m, "\x12\x03\x0a\x01\x31", 5) == COAI_ERR_PROTO);     /* exec id as string */
    CHECK(dec(m, "\x12\x02\x10\x01", 4) == COAI_ERR_PROTO);         /* shell_args varint */
    CHECK(dec(m, "\x22\x03\x0a\x01\x31", 5) == COAI_ERR_PROTO);     /* kv id as string */
    CHECK(dec(m, "\x22\x02\x18\x01", 4) == COAI_ERR_PROTO);         /* set_blob varint */
    CHECK(dec(m, "\x2a\x02\x08\x01", 4) == COAI_ERR_PROTO);         /* abort varint */
    CHECK(dec(m, "\x3a\x02\x10\x01", 4) == COAI_ERR_PROTO);         /* query member varint */
    CHECK(dec(m, "\x1a\x02\x28\x01", 4) == COAI_ERR_PROTO);         /* token details varint */
    CHECK(dec(m, "\x0b\x0c", 2) == COAI_ERR_PROTO);                 /* groups */
    CHECK(dec(m, "\x0e\x00", 2) == COAI_ERR_PROTO);                 /* wire type 6 */
    CHECK(dec(m, "\x0f\x00", 2) == COAI_ERR_PROTO);                 /* wire type 7 */
    CHECK(dec(m, "\x00\x00", 2) == COAI_ERR_PROTO);                 /* field 0 */
    CHECK(dec(m, "\x0a\x02\x00\x00", 4) == COAI_ERR_PROTO);         /* field 0 inside */
    CHECK(dec(m, "\x0a\x04\x0a\x02\x00\x00", 6) == COAI_ERR_PROTO); /* field 0 in a leaf */
    CHECK(dec(m, "\x0a\x05\x6a\x00", 4) == COAI_ERR_PROTO);         /* length past the end */
    CHECK(dec(m, "\x0a\xff\xff\xff\xff\x0f", 6) == COAI_ERR_PROTO); /* 4 GiB length */
    CHECK(dec(m, "\x0a\x02\x6a\x00\x0a", 5) == COAI_ERR_PROTO);     /* trailing half field */
    CHECK(dec(m, "\x09\x01\x02", 3) == COAI_ERR_PROTO);             /* short fixed64 */
    CHECK(dec(m, "\x0d\x01\x02", 3) == COAI_ERR_PROTO);             /* short fixed32 */
    CHECK(dec(m, "\x0a\x04\x0a\x02\x0a\x05", 6) == COAI_ERR_PROTO); /* leaf string too long */
    /* fixed-width unknown fields are skipped */
    CHECK(dec(m, "\x49\x01\x02\x03\x04\x05\x06\x07\x08\x4d\x01\x02\x03\x04", 14) == COAI_OK &&
          m->kind == COAI_MSG_NONE);
    /* a leaf with more fields than COAI_MAX_PB_FIELDS */
    for (i = 0; i <= COAI_MAX_PB_FIELDS; i++) pw_len(&s, 5, "", 0);
    pw_str(&s, 1, "cmd");
    b = exec_msg(1, NULL, 2, &s);
    CHECK(dec_buf(m, &b) == COAI_ERR_TOO_BIG && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    for (i = 0; i < 1000; i++) pw_len(&s, 5, "x", 1);
    pw_str(&s, 1, "cmd");
    b = exec_msg(1, NULL, 2, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && str_is(m->exec.command, "cmd"));
    coai_buf_free(&b);
}

/* The bare text/thinking delta goes through a fast path; the same delta with one
 * unknown field beside it at any level goes through nanopb. Both must agree. */
static void fast_path_equivalence(coai_msg *m)
{
    static const char nul_text[] = "before\0after";
    struct { const char *p; size_t n; } texts[4];
    char *big = (char *)malloc(200 * 1024);
    int t, upd, extra;
    memset(big, 'z', 200 * 1024);
    texts[0].p = "Hello"; texts[0].n = 5;
    texts[1].p = "w\xc3\xb6rld \xf0\x9f\x8c\x8d"; texts[1].n = 11;
    texts[2].p = nul_text; texts[2].n = sizeof nul_text - 1;
    texts[3].p = big; texts[3].n = 200 * 1024;
    for (t = 0; t < 4; t++)
        for (upd = 1; upd <= 4; upd += 3)            /* 1 text_delta, 4 thinking_delta */
            for (extra = 0; extra <= 3; extra++) {   /* 0: bare; 1..3: unknown field at a level */
                coai_buf b = { 0 };
                coai_str got;
                coai_msg_kind kind;
                pw_len(&b, 1, texts[t].p, texts[t].n);
                if (extra == 3) pw_uv(&b, 9, 1);
                pw_wrap(&b, (uint32_t)upd);
                if (extra == 2) pw_uv(&b, 99, 1);
                pw_wrap(&b, 1);
                if (extra == 1) pw_uv(&b, 99, 1);
                CHECKF(dec(m, b.data, b.len) == COAI_OK, "text %d upd %d extra %d", t, upd, extra);
                kind = m->kind;
                got = m->text;
                CHECKF(kind == (upd == 1 ? COAI_MSG_TEXT : COAI_MSG_THINKING), "kind %d", kind);
                /* nanopb strings end at an embedded NUL; the fast path does the same */
                CHECKF(got.len == (t == 2 ? 6 : texts[t].n)
                       && memcmp(got.ptr, texts[t].p, got.len) == 0,
                       "text %d upd %d extra %d: %zu bytes", t, upd, extra, got.len);
                coai_buf_free(&b);
            }
    free(big);
}

/* Issue 24 items 5 and 9: the fields the 2026-08/10 captures carry. */
static void autumn_fields(coai_msg *m)
{
    coai_buf a = { 0 }, b = { 0 }, s = { 0 };
    const coai_exec *x = &m->exec;
    /* TurnEndedUpdate 1-5 */
    pw_uv(&s, 1, 12000); pw_uv(&s, 2, 345); pw_uv(&s, 3, 7000); pw_uv(&s, 4, 250);
    pw_uv(&s, 5, 120);
    b = iu(14, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TURN_ENDED && m->turn.present
          && m->turn.input == 12000 && m->turn.output == 345 && m->turn.cache_read == 7000
          && m->turn.cache_write == 250 && m->turn.reasoning == 120);
    all_trunc(&b, "turn_ended tokens");
    coai_buf_free(&b);
    b = iu(14, &s);                                  /* the bare 72 00 form */
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_TURN_ENDED && !m->turn.present
          && m->turn.input == 0);
    coai_buf_free(&b);
    pw_uv(&s, 1, (uint64_t)-5);                      /* int64 -5 as a 10-byte varint */
    b = iu(14, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->turn.present && m->turn.input == -5);
    coai_buf_free(&b);
    pw_str(&s, 1, "x");                              /* wrong wire type: malformed */
    b = iu(14, &s);
    CHECK(dec_buf(m, &b) == COAI_ERR_PROTO && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    /* InteractionUpdate 17 step_completed */
    pw_uv(&s, 1, 4); pw_uv(&s, 2, 1834);
    b = iu(17, &s);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_STEP && m->value == 17
          && m->value2 == 4 && m->value3 == 1834);
    coai_buf_free(&b);
    /* ShellArgs 13, 14, 15, 17, 21, 23 (and 3) */
    pw_str(&a, 1, "sleep 100"); pw_str(&a, 2, "/w"); pw_uv(&a, 3, 30000);
    pw_uv(&a, 13, 2); pw_uv(&a, 14, 600000); pw_str(&a, 15, "Wait for the build");
    pw_uv(&a, 17, 1); pw_str(&a, 21, "conv-1"); pw_str(&a, 23, "req-1");
    { coai_buf pr = { 0 }, ec = { 0 };            /* parsing_result{2 executable_commands} */
      pw_str(&ec, 1, "sleep"); pw_sub(&pr, 2, &ec); pw_sub(&a, 8, &pr); }
    {   /* envelope field 55 (a bool) and 19 (span_context) are not exec members */
        coai_buf sp = { 0 };
        pw_uv(&b, 1, 9);
        pw_sub(&b, 14, &a);
        pw_str(&b, 15, "e9");
        pw_str(&sp, 1, "trace"); pw_sub(&b, 19, &sp);
        pw_uv(&b, 55, 1);
        pw_wrap(&b, 2);
    }
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC
          && x->kind == COAI_EXEC_SHELL_STREAM && x->id == 9 && str_is(x->command, "sleep 100")
          && x->timeout == 30000 && x->timeout_behavior == 2 && x->hard_timeout_ms == 600000
          && str_is(x->description, "Wait for the build") && x->close_stdin == 1
          && str_is(x->run_conversation_id, "conv-1") && str_is(x->run_request_id, "req-1")
          && x->accept_hook_contexts == 1);
    all_trunc(&b, "shell args 2026");
    coai_buf_free(&b);
    /* McpStateExecArgs 1 server_identifiers */
    pw_str(&a, 1, "cursor-tools"); pw_str(&a, 1, "other");
    b = exec_msg(36, "e36", 36, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC && x->kind == COAI_EXEC_MCP_STATE
          && x->server_id_count == 2 && strcmp(x->server_ids[0], "cursor-tools") == 0
          && strcmp(x->server_ids[1], "other") == 0);
    coai_buf_free(&b);
    b = exec_msg(37, NULL, 36, &a);                  /* empty args: every server */
    CHECK(dec_buf(m, &b) == COAI_OK && x->kind == COAI_EXEC_MCP_STATE && x->server_id_count == 0);
    coai_buf_free(&b);
    /* precheck 41-43 and an exec made only of envelope fields */
    b = exec_msg(41, "p", 42, &a);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_EXEC && x->kind == 42);
    coai_buf_free(&b);
    pw_uv(&b, 1, 5); pw_str(&s, 1, "t"); pw_sub(&b, 19, &s); pw_uv(&b, 55, 1);
    pw_wrap(&b, 2);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_NONE);
    coai_buf_free(&b);
    /* a varint at 55 is the envelope bool; a string there is not an exec either */
    pw_uv(&b, 1, 5); pw_str(&b, 55, "zz");
    pw_wrap(&b, 2);
    CHECK(dec_buf(m, &b) == COAI_ERR_PROTO);
    coai_buf_free(&b);
    /* interaction queries 7, 8, 9, 12 (and an unknown 20); a varint at 9 is malformed */
    {
        static const uint32_t kinds[] = { 7, 8, 9, 12, 20 };
        size_t i;
        for (i = 0; i < sizeof kinds / sizeof *kinds; i++) {
            pw_uv(&b, 1, 70 + i);
            pw_len(&b, kinds[i], "", 0);
            pw_wrap(&b, 7);
            CHECKF(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_QUERY
                   && m->query == (int)kinds[i] && m->id == 70 + i, "query %u", kinds[i]);
            coai_buf_free(&b);
        }
        pw_uv(&b, 1, 1); pw_uv(&b, 9, 1);
        pw_wrap(&b, 7);
        CHECK(dec_buf(m, &b) == COAI_ERR_PROTO);
        coai_buf_free(&b);
    }
    /* set_blob without blob_data; with an empty one */
    pw_len(&s, 1, "k", 1);
    pw_uv(&b, 1, 3); pw_sub(&b, 3, &s); pw_wrap(&b, 4);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_KV_SET && m->no_blob_data
          && m->blob_data.len == 0);
    coai_buf_free(&b);
    pw_len(&s, 1, "k", 1); pw_len(&s, 2, "", 0);
    pw_uv(&b, 1, 3); pw_sub(&b, 3, &s); pw_wrap(&b, 4);
    CHECK(dec_buf(m, &b) == COAI_OK && m->kind == COAI_MSG_KV_SET && !m->no_blob_data);
    coai_buf_free(&b);
    coai_buf_free(&a);
    coai_buf_free(&s);
}

/* ---- issue 30 item 3: what this version does not know ---- */

static int buf_is(const coai_buf *b, const char *lit)
{
    return b->len == strlen(lit) && memcmp(b->data, lit, b->len) == 0;
}

static size_t unk_of(const coai_buf *b, coai_unknown *u, size_t max)
{
    return coai_msg_unknowns(b->data, b->len, u, max);
}

/* {1: {1: {1: text, extra...}}}: a text delta; extra fields appended at the level asked. */
static void unk_text(coai_buf *b, const char *text, int level, uint32_t f, int wt)
{
    coai_buf leaf = { 0 }, upd = { 0 };
    memset(b, 0, sizeof *b);
    pw_str(&leaf, 1, text);
    if (level == 2) { if (wt == 2) pw_str(&leaf, f, "zz"); else pw_uv(&leaf, f, 7); }
    pw_sub(&upd, 1, &leaf);
    if (level == 1) { if (wt == 2) pw_str(&upd, f, ""); else pw_uv(&upd, f, 7); }
    pw_sub(b, 1, &upd);
    if (level == 0) { if (wt == 2) pw_str(b, f, "\x08\x01"); else pw_uv(b, f, 7); }
}

static void unknowns(coai_msg *m)
{
    coai_unknown u[8];
    coai_buf b = { 0 }, e = { 0 }, x = { 0 }, s = { 0 };
    size_t k;
    char *plain;

    /* nothing unknown in a plain delta, nor in a decoded exec with its envelope fields */
    unk_text(&b, "hello", -1, 0, 0);
    CHECK(unk_of(&b, u, 8) == 0);
    plain = (char *)malloc(b.len);
    memcpy(plain, b.data, b.len);
    CHECK(coai_msg_decode(m, plain, b.len) == COAI_OK && m->kind == COAI_MSG_TEXT);
    CHECK(coai_str_eq(m->text, "hello"));
    coai_buf_free(&b);
    free(plain);

    /* an undeclared AgentServerMessage member: a "message kind", its number and wire type */
    unk_text(&b, "hello", 0, 47, 2);
    k = unk_of(&b, u, 8);
    CHECKF(k == 1 && strcmp(u[0].message, "AgentServerMessage") == 0
           && strcmp(u[0].what, "message kind") == 0 && u[0].field == 47 && u[0].wire == 2
           && u[0].expected_wire == -1 && u[0].name[0] == 0, "k=%zu", k);
    /* ...and the decoder does the same as without it */
    CHECK(coai_msg_decode(m, b.data, b.len) == COAI_OK && m->kind == COAI_MSG_TEXT
          && coai_str_eq(m->text, "hello"));
    coai_buf_free(&b);

    /* an undeclared InteractionUpdate kind; an undeclared scalar there is a "field" */
    unk_text(&b, "hello", 1, 40, 2);
    k = unk_of(&b, u, 8);
    CHECK(k == 1 && strcmp(u[0].message, "InteractionUpdate") == 0
          && strcmp(u[0].what, "update kind") == 0 && u[0].field == 40);
    coai_buf_free(&b);
    unk_text(&b, "hello", 1, 41, 0);
    CHECK(unk_of(&b, u, 8) == 1 && strcmp(u[0].what, "field") == 0 && u[0].wire == 0);
    coai_buf_free(&b);

    /* an undeclared field of a leaf the decoder reads, and the text still decodes */
    unk_text(&b, "hello", 2, 9, 0);
    CHECK(unk_of(&b, u, 8) == 1 && strcmp(u[0].message, "TextDeltaUpdate") == 0
          && u[0].field == 9 && u[0].wire == 0);
    CHECK(coai_msg_decode(m, b.data, b.len) == COAI_OK && coai_str_eq(m->text, "hello"));
    coai_buf_free(&b);

    /* a declared field with another wire type: TurnEndedUpdate.input_tokens as bytes */
    pw_str(&x, 1, "ab");
    pw_sub(&e, 14, &x);
    pw_sub(&b, 1, &e);
    CHECK(unk_of(&b, u, 8) == 1 && strcmp(u[0].message, "TurnEndedUpdate") == 0
          && u[0].field == 1 && u[0].wire == 2 && u[0].expected_wire == 0);
    coai_buf_free(&b);

    /* exec kinds: 60 is not known, 41-43 are (answered without a declaration); the same
     * unknown twice in one message is one record */
    pw_uv(&e, 1, 3);
    pw_str(&e, 60, "\x0a\x01q");
    pw_str(&e, 60, "");
    pw_str(&e, 42, "");
    pw_uv(&e, 55, 1);
    pw_sub(&b, 2, &e);
    k = unk_of(&b, u, 8);
    CHECKF(k == 1 && strcmp(u[0].message, "ExecServerMessage") == 0
           && strcmp(u[0].what, "exec kind") == 0 && u[0].field == 60, "k=%zu", k);
    coai_buf_free(&b);

    /* an interaction query kind nothing declares (20), next to a known one */
    pw_uv(&e, 1, 5);
    pw_str(&e, 20, "");
    pw_sub(&b, 7, &e);
    CHECK(unk_of(&b, u, 8) == 1 && strcmp(u[0].what, "query kind") == 0 && u[0].field == 20);
    CHECK(coai_msg_decode(m, b.data, b.len) == COAI_OK && m->kind == COAI_MSG_QUERY
          && m->query == 20);
    coai_buf_free(&b);

    /* the kinds answered by hand without a schema entry are known: query 13 (a typed
     * failure), exec 28 (a typed subagent error) and exec 45 (named in its throw) */
    pw_uv(&e, 1, 5);
    pw_str(&e, 13, "");
    pw_sub(&b, 7, &e);
    CHECK(unk_of(&b, u, 8) == 0);
    coai_buf_free(&b);
    pw_uv(&e, 1, 6);
    pw_str(&e, 28, "");
    pw_sub(&b, 2, &e);
    CHECK(unk_of(&b, u, 8) == 0);
    coai_buf_free(&b);
    pw_uv(&e, 1, 7);
    pw_str(&e, 45, "");
    pw_sub(&b, 2, &e);
    CHECK(unk_of(&b, u, 8) == 0);
    coai_buf_free(&b);

    /* more than max: the count goes on, the records stop */
    {
        uint32_t f;
        for (f = 100; f < 110; f++) pw_uv(&b, f, 1);
        CHECK(unk_of(&b, u, 3) == 10 && u[2].field == 102);
        CHECK(coai_msg_unknowns(b.data, b.len, NULL, 0) == 10);
        coai_buf_free(&b);
    }
    /* malformed bytes end the walk without a record past them */
    CHECK(coai_msg_unknowns("\x0a\x09\x0a", 3, u, 8) == 0);
    CHECK(coai_msg_unknowns(NULL, 0, u, 8) == 0);

    /* the redacted shape: numbers, wire types, lengths; never a string's bytes */
    unk_text(&b, "s3cret prompt", 2, 9, 0);
    pw_str(&b, 47, "another s3cret");
    CHECK(coai_pb_shape(&s, "AgentServerMessage", b.data, b.len, 0) == COAI_OK);
    CHECKF(s.len && buf_is(&s, "AgentServerMessage{1/2[19]InteractionUpdate{1/2[17]"
                                "TextDeltaUpdate{1/2[13] !9/0}} !47/2[14]}"),
           "%.*s", (int)s.len, (const char *)s.data);
    coai_buf_free(&s);
    /* an undeclared field that parses as a message is opened, text that parses is not */
    coai_buf_free(&b);
    pw_str(&b, 3, "hi");                          /* 'h' 'i' = field 13, varint 0x69 */
    pw_str(&b, 4, "\x08\x01\x12\x02" "ab");
    CHECK(coai_pb_shape(&s, NULL, b.data, b.len, 0) == COAI_OK);
    CHECKF(s.len && buf_is(&s, "{!3/2[2] !4/2[6]{!1/0 !2/2[2]}}"),
           "%.*s", (int)s.len, (const char *)s.data);
    coai_buf_free(&s);
    /* malformed: what parsed, then "?"; a cap ends with "..." */
    CHECK(coai_pb_shape(&s, "AgentServerMessage", "\x08\x01\x0a\x05", 4, 0) == COAI_ERR_PROTO);
    CHECKF(s.len && buf_is(&s, "AgentServerMessage{1/0 ?}"),
           "%.*s", (int)s.len, (const char *)s.data);
    coai_buf_free(&s);
    {
        uint32_t f;
        for (f = 1; f < 200; f++) pw_uv(&b, 900, 1);
        CHECK(coai_pb_shape(&s, NULL, b.data, b.len, 40) == COAI_OK);
        CHECKF(s.len >= 40 && s.len < 60 && memcmp(s.data + s.len - 3, "...", 3) == 0,
               "%.*s", (int)s.len, (const char *)s.data);
        coai_buf_free(&s);
        coai_buf_free(&b);
    }
    coai_buf_free(&x);
    coai_buf_free(&e);
}

static void status_unknowns(void)
{
    static const char js[] =
        "{\"error\":{\"code\":\"brand_new\",\"message\":\"m\",\"details\":["
        "{\"type\":\"google.rpc.Fresh\",\"value\":\"AA==\"},"
        "{\"type\":\"aiserver.v1.ErrorDetails\",\"value\":\"CL8H\"}]}}";
    coai_status st;
    coai_unknown u[8];
    size_t k;
    /* CL8H = ErrorDetails{error: 959}: a value past the names this build has */
    CHECK(coai_end_stream_parse(js, sizeof js - 1, &st) == COAI_ERR_INVALID);
    k = coai_status_unknowns(&st, u, 8);
    CHECKF(k == 3, "k=%zu", k);
    CHECK(k >= 1 && strcmp(u[0].what, "code") == 0 && strcmp(u[0].name, "brand_new") == 0
          && u[0].wire == -1);
    CHECK(k >= 2 && strcmp(u[1].what, "ErrorDetails.error") == 0 && u[1].field == 959);
    CHECK(k >= 3 && strcmp(u[2].what, "detail type") == 0
          && strcmp(u[2].name, "google.rpc.Fresh") == 0);
    /* known codes and details: nothing */
    CHECK(coai_end_stream_parse("{\"error\":{\"code\":\"unavailable\"}}", 32, &st) == COAI_OK);
    CHECK(coai_status_unknowns(&st, u, 8) == 0);
    /* a grpc-status past 16 */
    CHECK(coai_trailer_parse("grpc-status: 17\r\n", 17, &st) == COAI_OK);
    CHECK(coai_status_unknowns(&st, u, 8) == 1 && u[0].field == 17);
}

int main(void)
{
    coai_msg m = { 0 };
    int n, mcp = 0;
    n = vector_frames(&m);
    CHECKF(n == 13, "%d vector frames", n);
    n = e2e_frames(&m, &mcp);
    CHECKF(n == 31, "%d e2e frames", n);
    CHECK(mcp == 1);
    interaction_variants(&m);
    exec_variants(&m);
    other_variants(&m);
    autumn_fields(&m);
    mcp_args_json(&m);
    nesting(&m, 2, 0, COAI_OK);
    nesting(&m, COAI_MAX_VALUE_DEPTH, 0, COAI_OK);
    nesting(&m, COAI_MAX_VALUE_DEPTH + 1, 0, COAI_ERR_PROTO);
    nesting(&m, COAI_MAX_VALUE_DEPTH, 1, COAI_OK);
    nesting(&m, COAI_MAX_VALUE_DEPTH + 1, 1, COAI_ERR_PROTO);
    nesting(&m, 5000, 1, COAI_ERR_PROTO);
    malformed(&m);
    fast_path_equivalence(&m);
    unknowns(&m);
    status_unknowns();
    coai_msg_free(&m);
    CHECK(m.priv_ == NULL && m.scratch_.data == NULL);
    coai_msg_free(&m);                   /* twice is harmless */
    TEST_END();
}
