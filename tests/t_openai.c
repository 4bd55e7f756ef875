/* t_openai.c - OPENAI part: request validation, prompt flattening, exec -> tool call
 * mapping, SSE / JSON output of coai_reply, UTF-8 repair, usage, KV store, errors. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>

/* ---- helpers ------------------------------------------------------------ */

typedef struct sink {
    coai_buf all;      /* every message, each prefixed by one length byte (tests: < 256) */
    int count;
    int fail_at;       /* 1-based call number that fails; 0 = never */
} sink;

static int sink_send(void *user, const unsigned char *msg, size_t n)
{
    sink *s = (sink *)user;
    s->count++;
    if (s->fail_at && s->count == s->fail_at) return -1;
    coai_buf_putc(&s->all, (int)(n & 0xff));
    coai_buf_append(&s->all, msg, n);
    return 0;
}

/* Every SSE event must be "data: <one-line JSON>\n\n", "data: [DONE]\n\n" or a comment;
 * returns the number of data events, -1 on a malformed stream. */
static int sse_check(const coai_buf *b, int *saw_done)
{
    size_t i = 0;
    int n = 0;
    *saw_done = 0;
    if (coai_utf8_valid_prefix((const char *)b->data, b->len) != b->len) return -1;
    while (i < b->len) {
        const char *p = (const char *)b->data + i;
        const char *e = strstr(p, "\n\n");
        size_t len;
        if (!e) return -1;
        len = (size_t)(e - p);
        if (memchr(p, '\n', len)) return -1;
        if (*saw_done) return -1;                         /* nothing after [DONE] */
        if (len >= 1 && p[0] == ':') { i += len + 2; continue; }
        if (len < 6 || memcmp(p, "data: ", 6) != 0) return -1;
        if (len == 12 && memcmp(p + 6, "[DONE]", 6) == 0) *saw_done = 1;
        else {
            cJSON *j = cJSON_ParseWithLength(p + 6, len - 6);
            if (!j) return -1;
            cJSON_Delete(j);
        }
        n++;
        i += len + 2;
    }
    return n;
}

/* The n-th (0-based) data event parsed, or NULL. */
static cJSON *sse_event(const coai_buf *b, int idx)
{
    size_t i = 0;
    int n = 0;
    while (b->data && i < b->len) {
        const char *p = (const char *)b->data + i;
        const char *e = strstr(p, "\n\n");
        if (!e) return NULL;
        if (p[0] != ':') {
            if (n == idx) return cJSON_ParseWithLength(p + 6, (size_t)(e - p) - 6);
            n++;
        }
        i = (size_t)(e - (const char *)b->data) + 2;
    }
    return NULL;
}

/* Concatenation of every delta.<field> string in the stream. */
static void sse_collect(const coai_buf *b, const char *field, coai_buf *out)
{
    int i;
    for (i = 0;; i++) {
        cJSON *j = sse_event(b, i), *ch, *d, *f;
        if (!j) {
            /* [DONE] does not parse: stop only past the end */
            if (!sse_event(b, i + 1)) break;
            continue;
        }
        ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        d = cJSON_GetObjectItem(ch, "delta");
        f = cJSON_GetObjectItem(d, field);
        if (cJSON_IsString(f)) coai_buf_puts(out, f->valuestring);
        cJSON_Delete(j);
    }
}

static coai_msg msg_text(coai_msg_kind k, const char *t, size_t n)
{
    coai_msg m;
    memset(&m, 0, sizeof m);
    m.kind = k;
    m.text.ptr = t;
    m.text.len = n;
    return m;
}

static coai_msg msg_kind(coai_msg_kind k)
{
    coai_msg m;
    memset(&m, 0, sizeof m);
    m.kind = k;
    return m;
}

static void reply_setup(coai_reply *r, sink *s, int stream, int usage, const coai_tool *tools,
                        size_t ntools)
{
    coai_reply_opts o;
    memset(&o, 0, sizeof o);
    memset(s, 0, sizeof *s);
    o.stream = stream;
    o.include_usage = usage;
    o.completion_id = coai_str_c("chatcmpl-020202020202402280220202");
    o.created = 1768474032;
    o.model = coai_str_c("claude-4.5-sonnet");
    o.tools = tools;
    o.tool_count = ntools;
    o.session_id = coai_str_c("030303030303");
    o.prompt = coai_str_c("You are terse.\n\nUser: Say hello");
    o.send = sink_send;
    o.send_user = s;
    CHECK(coai_reply_init(r, &o) == 0);
}

/* ---- request validation ----------------------------------------------------- */

static void test_validation(void)
{
    static const struct { const char *body; int rc; const char *param; } cases[] = {
        { "", COAI_ERR_JSON, "" },
        { "{", COAI_ERR_JSON, "" },
        { "{\"1\":1", COAI_ERR_JSON, "" },
        { "[1,2]", COAI_ERR_INVALID, "" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} x", COAI_ERR_JSON, "" },
        { "{}", COAI_ERR_INVALID, "messages" },
        { "{\"messages\":[]}", COAI_ERR_INVALID, "messages" },
        { "{\"messages\":{}}", COAI_ERR_INVALID, "messages" },
        { "{\"model\":3,\"messages\":[{\"role\":\"user\"}]}", COAI_ERR_INVALID, "model" },
        { "{\"stream\":\"yes\",\"messages\":[{\"role\":\"user\"}]}", COAI_ERR_INVALID, "stream" },
        { "{\"n\":2,\"messages\":[{\"role\":\"user\"}]}", COAI_ERR_INVALID, "n" },
        { "{\"messages\":[{\"role\":\"user\"},7]}", COAI_ERR_INVALID, "messages[1]" },
        { "{\"messages\":[{\"content\":\"x\"}]}", COAI_ERR_INVALID, "messages[0].role" },
        { "{\"messages\":[{\"role\":\"wizard\"}]}", COAI_ERR_INVALID, "messages[0].role" },
        { "{\"messages\":[{\"role\":\"user\"},{\"role\":\"user\"},{\"role\":\"user\",\"content\""
            ":5}]}",
          COAI_ERR_INVALID, "messages[2].content" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
          COAI_ERR_INVALID, "messages[0].content[0].text" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":[\"hi\"]}]}",
          COAI_ERR_INVALID, "messages[0].content[0]" },
        { "{\"messages\":[{\"role\":\"tool\",\"content\":\"r\"}]}",
          COAI_ERR_INVALID, "messages[0].tool_call_id" },
        { "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
          COAI_ERR_INVALID, "messages[0].tool_calls" },
        { "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
          COAI_ERR_INVALID, "messages[0].tool_calls[0].function.name" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":{}}", COAI_ERR_INVALID, "tools" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\"}]}",
          COAI_ERR_INVALID, "tools[0].function" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"function\",\"function\":{}"
            "}]}",
          COAI_ERR_INVALID, "tools[0].function.name" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"function\":{\"name\":\"a\"}},"
          "{\"function\":{\"name\":\"bad name\"}}]}", COAI_ERR_INVALID, "tools[1].function.name" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"function\":{\"name\":"
          "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}]}",
          COAI_ERR_INVALID, "tools[0].function.name" },
        { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"function\":{\"name\":\"a\","
          "\"parameters\":[]}}]}", COAI_ERR_INVALID, "tools[0].function.parameters" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", COAI_ERR_INVALID, "" },
        /* a lone surrogate escape is accepted as U+FFFD (t_quota_images_fields.c); a bad escape
         * is not */
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"\\uZ800\"}]}", COAI_ERR_JSON, "" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", COAI_ERR_UTF8, "" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", COAI_ERR_UTF8, "" },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        coai_chat_request q;
        coai_error e;
        coai_buf b = { 0 };
        cJSON *j;
        int rc = coai_chat_request_parse(&q, cases[i].body, strlen(cases[i].body), &e);
        CHECKF(rc == cases[i].rc, "case %zu: rc %d", i, rc);
        CHECKF(e.status == 400 && strcmp(e.type, "invalid_request_error") == 0, "case %zu", i);
        CHECKF(strcmp(e.param, cases[i].param) == 0, "case %zu: param '%s'", i, e.param);
        CHECK(e.message[0] != 0);
        coai_error_write(&b, &e);
        j = cJSON_Parse((const char *)b.data);
        CHECKF(j && cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")),
               "case %zu: %s", i, b.data);
        if (j) {
            cJSON *pm = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param");
            CHECK(cases[i].param[0] ? cJSON_IsString(pm) : cJSON_IsNull(pm));
        }
        cJSON_Delete(j);
        coai_buf_free(&b);
        coai_chat_request_free(&q);
    }
    /* Deep nesting is refused quickly, not recursed into. */
    {
        size_t n = 200000, k;
        char *deep = (char *)malloc(n);
        coai_chat_request q;
        coai_error e;
        for (k = 0; k < n / 2; k++) deep[k] = '[';
        for (; k < n; k++) deep[k] = ']';
        CHECK(coai_chat_request_parse(&q, deep, n, &e) == COAI_ERR_JSON && e.status == 400);
        free(deep);
    }
}

static void test_request_fields(void)
{
    const char *body =
        "{\"model\":\"sonnet-4.5\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"temperature\":0.2,\"unknown\":{\"x\":[1]},\"messages\":["
        "{\"role\":\"developer\",\"content\":\"Dev rules.\"},"
        "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Sys\"}]},"
        "{\"role\":\"user\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"sess_abc123__call_x\","
        "\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_plain\",\"content\":\"ok\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bash\",\"description\":\"Run\","
        "\"parameters\":{\"type\":\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\""
            "x-y_1\"}}]}";
    coai_chat_request q;
    coai_error e;
    coai_run_params p;
    const char *want = "Dev rules.\nSys\n\nUser: \n\nAssistant: [Called tool: bash({})]\n\n"
                       "[Tool result for call_plain]: ok\n\n\n"
                       "Based on the tool results above, please continue your response:";
    CHECK(coai_chat_request_parse(&q, body, strlen(body), &e) == 0);
    CHECK(coai_str_eq(q.model, "sonnet-4.5"));
    CHECK(q.stream == 1 && q.include_usage == 1 && q.has_tool_messages == 1);
    CHECK(q.tool_count == 2 && coai_str_eq(q.tools[1].name, "x-y_1"));
    CHECK(coai_str_eq(q.tools[0].description, "Run") && q.tools[0].parameters != NULL);
    CHECK(q.tools[1].parameters == NULL && q.tools[1].description.len == 0);
    CHECK(coai_str_eq(q.session_id, "abc123"));
    CHECK_MEM(q.prompt.data, q.prompt.len, want, strlen(want));
    memset(&p, 0, sizeof p);
    coai_chat_request_params(&q, &p);
    CHECK(p.tool_count == 2 && p.tools == q.tools && p.prompt.len == q.prompt.len);
    coai_chat_request_free(&q);

    /* tool_choice none: no tools reach the run; model missing -> auto; stream_options
     * without stream is ignored. */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"none\","
           "\"stream_options\":{\"include_usage\":true},"
           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bash\"}}]}";
    CHECK(coai_chat_request_parse(&q, body, strlen(body), &e) == 0);
    CHECK(q.tool_count == 0 && q.tools == NULL && q.tools_disabled == 1);
    CHECK(coai_str_eq(q.model, "auto") && q.stream == 0 && q.include_usage == 0);
    CHECK(q.session_id.len == 0);
    coai_chat_request_free(&q);
}

static void test_prompt_vectors(void)
{
    size_t n;
    char *txt = test_read_file(test_vec_path("messages_to_prompt.json"), &n);
    cJSON *root, *v;
    int count = 0;
    CHECKF(txt != NULL, "messages_to_prompt.json missing (COAI_VECTORS)");
    if (!txt) return;
    root = cJSON_ParseWithLength(txt, n);
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(root, "vectors")) {
        const char *want = cJSON_GetObjectItem(v, "expected_prompt")->valuestring;
        cJSON *msgs = cJSON_GetObjectItem(v, "messages");
        coai_buf direct = { 0 }, body = { 0 };
        coai_chat_request q;
        coai_error e;
        char *ms = cJSON_PrintUnformatted(msgs);
        CHECK(coai_prompt_build(&direct, msgs) == 0);
        CHECK_MEM(direct.data, direct.len, want, strlen(want));
        coai_buf_printf(&body, "{\"model\":\"m\",\"messages\":%s}", ms);
        if (strstr(ms, "data:image/png;base64,AA\"")) {
            /* DIFF: the original dropped image parts; we send them, so its placeholder "AA"
             * (one zero byte, not a PNG) is now a 400 naming the part. With a real PNG in its
             * place the prompt is the original's and the image is taken. */
            static const char png[] = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAMAAAAC"
                "CAIAAAASFvFNAAAAEUlEQVR4nGP4z8AAQTD6PwMAPtUF+6guL00AAAAASUVORK5CYII=";
            char *at;
            CHECK(coai_chat_request_parse(&q, (const char *)body.data, body.len, &e)
                  == COAI_ERR_INVALID);
            CHECKF(e.status == 400 && strcmp(e.param, "messages[0].content[1].image_url.url")
                   == 0, "%d %s", e.status, e.param);
            at = strstr((char *)body.data, "data:image/png;base64,AA\"");
            coai_buf_reset(&direct);
            coai_buf_append(&direct, body.data, (size_t)(at - (char *)body.data));
            coai_buf_puts(&direct, png);
            coai_buf_puts(&direct, at + strlen("data:image/png;base64,AA"));
            coai_buf_reset(&body);
            coai_buf_append(&body, direct.data, direct.len);
        }
        CHECK(coai_chat_request_parse(&q, (const char *)body.data, body.len, &e) == 0);
        CHECK_MEM(q.prompt.data, q.prompt.len, want, strlen(want));
        coai_chat_request_free(&q);
        coai_buf_free(&direct);
        coai_buf_free(&body);
        free(ms);
        count++;
    }
    CHECK(count >= 3);
    cJSON_Delete(root);
    free(txt);
}

/* ---- exec mapping ------------------------------------------------------- */

static cJSON *schema(const char *json) { return cJSON_Parse(json); }

static void check_map(const coai_exec *ex, const coai_tool *tools, size_t n, int want_rc,
                      const char *want_name, const char *want_args, int line)
{
    coai_tool_call tc;
    int rc;
    memset(&tc, 0, sizeof tc);
    rc = coai_exec_map(ex, tools, n, coai_str_c("/ws"), &tc);
    CHECKF(rc == want_rc, "line %d: rc %d", line, rc);
    if (rc == 1 && want_rc == 1) {
        CHECKF(coai_str_eq(tools[tc.tool].name, want_name), "line %d", line);
        CHECKF(tc.args.len == strlen(want_args)
               && memcmp(tc.args.data, want_args, tc.args.len) == 0,
               "line %d: got %s", line, tc.args.data);
    }
    coai_buf_free(&tc.args);
}

static void test_exec_map(void)
{
    /* Tools shaped like the e2e vectors (schema properties matching the original's keys). */
    cJSON *s_bash = schema("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string"
        "\"}}}");
    cJSON *s_read = schema("{\"type\":\"object\",\"properties\":{\"filePath\":{}}}");
    /* OpenCode's schemas. */
    cJSON *o_bash = schema("{\"type\":\"object\",\"properties\":{\"command\":{},\"timeout\":{},"
                           "\"workdir\":{},\"description\":{}}}");
    cJSON *o_read = schema("{\"properties\":{\"filePath\":{},\"offset\":{},\"limit\":{}}}");
    cJSON *o_list = schema("{\"properties\":{\"path\":{},\"ignore\":{}}}");
    cJSON *o_glob = schema("{\"properties\":{\"pattern\":{},\"path\":{}}}");
    cJSON *o_grep = schema("{\"properties\":{\"pattern\":{},\"path\":{},\"include\":{}}}");
    cJSON *o_write = schema("{\"properties\":{\"content\":{},\"filePath\":{}}}");
    /* Another client's naming. */
    cJSON *x_read = schema("{\"properties\":{\"file_path\":{}}}");
    cJSON *x_shell = schema("{\"properties\":{\"cmd\":{},\"working_directory\":{}}}");
    coai_tool vec[3], oc[7], other[3];
    coai_exec ex;
    memset(vec, 0, sizeof vec);
    memset(oc, 0, sizeof oc);
    memset(other, 0, sizeof other);
    vec[0].name = coai_str_c("bash"); vec[0].parameters = s_bash;
    vec[1].name = coai_str_c("read"); vec[1].parameters = s_read;
    vec[2].name = coai_str_c("get_weather");
    oc[0].name = coai_str_c("bash"); oc[0].parameters = o_bash;
    oc[1].name = coai_str_c("read"); oc[1].parameters = o_read;
    oc[2].name = coai_str_c("list"); oc[2].parameters = o_list;
    oc[3].name = coai_str_c("glob"); oc[3].parameters = o_glob;
    oc[4].name = coai_str_c("grep"); oc[4].parameters = o_grep;
    oc[5].name = coai_str_c("write"); oc[5].parameters = o_write;
    oc[6].name = coai_str_c("edit");
    other[0].name = coai_str_c("read_file"); other[0].parameters = x_read;
    other[1].name = coai_str_c("run_shell_command"); other[1].parameters = x_shell;
    other[2].name = coai_str_c("list_dir");

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_SHELL_STREAM;
    ex.command = coai_str_c("ls -la");
    ex.cwd = coai_str_c("/home/user/project");
    check_map(&ex, vec, 3, 1, "bash", "{\"command\":\"ls -la\",\"description\":\"Execute shell "
              "command: ls -la\",\"cwd\":\"/home/user/project\"}", __LINE__);
    check_map(&ex, oc, 7, 1, "bash", "{\"command\":\"ls -la\",\"description\":\"Execute shell "
              "command: ls -la\",\"workdir\":\"/home/user/project\"}", __LINE__);
    check_map(&ex, other, 3, 1, "run_shell_command", "{\"cmd\":\"ls -la\",\"description\":"
              "\"Execute shell command: ls -la\",\"working_directory\":\"/home/user/project\"}",
              __LINE__);
    ex.kind = COAI_EXEC_SHELL;
    ex.cwd = coai_str_c("");
    /* 61 characters: cut to 60 + "..."; an emoji (2 UTF-16 units) is never split. */
    ex.command = coai_str_c("echo 01234567890123456789012345678901234567890123456789012345");
    check_map(&ex, vec, 3, 1, "bash", "{\"command\":\"echo 0123456789012345678901234567890123456789"
              "0123456789012345\",\"description\":\"Execute shell command: echo 0123456789012345"
                  "6789"
              "01234567890123456789012345678901234...\"}", __LINE__);
    ex.command = coai_str_c("echo 012345678901234567890123456789012345678901234567890123\xf0\x9f"
        "\x8c\x8d");
    check_map(&ex, vec, 3, 1, "bash", "{\"command\":\"echo 0123456789012345678901234567890123456789"
              "01234567890123\xf0\x9f\x8c\x8d\",\"description\":\"Execute shell command: echo 01234"
              "5678901234567890123456789012345678901234567890123...\"}", __LINE__);
    /* exactly 60 units: no "..." */
    ex.command = coai_str_c("echo 0123456789012345678901234567890123456789012345678901234");
    check_map(&ex, vec, 3, 1, "bash", "{\"command\":\"echo 0123456789012345678901234567890123456789"
              "012345678901234\",\"description\":\"Execute shell command: echo 01234567890123456789"
              "01234567890123456789012345678901234\"}", __LINE__);
    ex.command = coai_str_c("printf 'a\"b\\\\c\n'");
    check_map(&ex, vec, 3, 1, "bash", "{\"command\":\"printf 'a\\\"b\\\\\\\\c\\n'\",\"descriptio"
        "n\":"
              "\"Execute shell command: printf 'a\\\"b\\\\\\\\c\\n'\"}", __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_READ;
    ex.path = coai_str_c("/a/b.txt");
    check_map(&ex, vec, 3, 1, "read", "{\"filePath\":\"/a/b.txt\"}", __LINE__);
    check_map(&ex, oc, 7, 1, "read", "{\"filePath\":\"/a/b.txt\"}", __LINE__);
    check_map(&ex, other, 3, 1, "read_file", "{\"file_path\":\"/a/b.txt\"}", __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_LS;
    ex.path = coai_str_c("/home/user/project/fixture");
    ex.has_path = 1;
    check_map(&ex, vec, 3, 0, NULL, NULL, __LINE__);                  /* no list tool */
    check_map(&ex, oc, 7, 1, "list", "{\"path\":\"/home/user/project/fixture\"}", __LINE__);
    check_map(&ex, other, 3, 1, "list_dir", "{\"path\":\"/home/user/project/fixture\"}", __LINE__);
    ex.path = coai_str_c("");
    ex.has_path = 0;
    check_map(&ex, oc, 7, 1, "list", "{\"path\":\"/ws\"}", __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_GREP;
    ex.path = coai_str_c("/home/user/project/src");
    ex.has_path = 1;
    ex.glob = coai_str_c("**/*.ts");
    check_map(&ex, oc, 7, 1, "glob", "{\"pattern\":\"**/*.ts\",\"path\":\"/home/user/project/src"
        "\"}",
              __LINE__);
    ex.pattern = coai_str_c("TODO");
    check_map(&ex, oc, 7, 1, "grep", "{\"pattern\":\"TODO\",\"path\":\"/home/user/project/src\","
              "\"include\":\"**/*.ts\"}", __LINE__);
    ex.glob = coai_str_c("");
    check_map(&ex, oc, 7, 1, "grep", "{\"pattern\":\"TODO\",\"path\":\"/home/user/project/src\"}",
              __LINE__);
    ex.has_path = 0;
    ex.path = coai_str_c("");
    check_map(&ex, oc, 7, 1, "grep", "{\"pattern\":\"TODO\"}", __LINE__);
    check_map(&ex, vec, 3, 0, NULL, NULL, __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.path = coai_str_c("/a.txt");
    ex.content = coai_str_c("x\ny");
    check_map(&ex, oc, 7, 1, "write", "{\"filePath\":\"/a.txt\",\"content\":\"x\\ny\"}", __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_MCP;
    ex.tool_name = coai_str_c("get_weather");
    ex.args_json = coai_str_c("{\"location\":\"Tokyo\",\"days\":3,\"units\":\"c\"}");
    check_map(&ex, vec, 3, 1, "get_weather", "{\"location\":\"Tokyo\",\"days\":3,\"units\":\"c\"}",
              __LINE__);
    ex.args_json = coai_str_c("");
    check_map(&ex, vec, 3, 1, "get_weather", "{}", __LINE__);
    ex.tool_name = coai_str_c("get_weathe");
    check_map(&ex, vec, 3, 0, NULL, NULL, __LINE__);

    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_DELETE;
    check_map(&ex, oc, 7, 0, NULL, NULL, __LINE__);
    ex.kind = COAI_EXEC_REQUEST_CONTEXT;
    check_map(&ex, oc, 7, 0, NULL, NULL, __LINE__);
    ex.kind = COAI_EXEC_READ;
    check_map(&ex, NULL, 0, 0, NULL, NULL, __LINE__);

    cJSON_Delete(s_bash); cJSON_Delete(s_read); cJSON_Delete(o_bash); cJSON_Delete(o_read);
    cJSON_Delete(o_list); cJSON_Delete(o_glob); cJSON_Delete(o_grep); cJSON_Delete(o_write);
    cJSON_Delete(x_read); cJSON_Delete(x_shell);
}

/* ---- reply: SSE shapes ------------------------------------------------- */

#define PFX "data: {\"id\":\"chatcmpl-020202020202402280220202\"," \
            "\"object\":\"chat.completion.chunk\",\"created\":1768474032," \
            "\"model\":\"claude-4.5-sonnet\",\"choices\":[{\"index\":0,\"delta\":"

static void test_sse_text(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    const char *want =
        PFX "{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n"
        PFX "{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n"
        PFX "{\"reasoning_content\":\"hmm\"},\"finish_reason\":null}]}\n\n"
        PFX "{\"content\":\" w\xc3\xb6rld \xf0\x9f\x8c\x8d!\"},\"finish_reason\":null}]}\n\n"
        PFX "{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens"
            "\":5,"
        "\"total_tokens\":13}}\n\n"
        "data: [DONE]\n\n";
    int done;
    reply_setup(&r, &s, 1, 0, NULL, 0);
    /* KV and heartbeats do not commit: nothing is written yet. */
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 1;
    m.blob_id = coai_str_c("k1");
    m.blob_data = coai_str_c("{\"role\":\"user\",\"content\":\"hi\"}");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_kind(COAI_MSG_HEARTBEAT);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(!coai_reply_started(&r) && r.out.len == 0);
    m = msg_text(COAI_MSG_TEXT, "Hello", 5);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(coai_reply_started(&r) && coai_reply_status(&r) == 200);
    m = msg_text(COAI_MSG_THINKING, "hmm", 3);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_text(COAI_MSG_TEXT, "", 0);                 /* empty deltas write nothing */
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_text(COAI_MSG_TEXT, " w\xc3\xb6rld \xf0\x9f\x8c\x8d!", 13);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_kind(COAI_MSG_CHECKPOINT);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);      /* no used_tokens: estimate stays */
    m = msg_kind(COAI_MSG_HEARTBEAT);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_kind(COAI_MSG_TURN_ENDED);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK_MEM(r.out.data, r.out.len, want, strlen(want));
    CHECK(sse_check(&r.out, &done) == 6 && done);
    CHECK(coai_reply_tool_called(&r) == 0);               /* a normal end: drain upstream */
    CHECK(s.count == 1);                                  /* the set_blob answer */
    CHECK_MEM(s.all.data, s.all.len, "\x06\x1a\x04\x08\x01\x1a\x00", 7);
    /* after done: nothing more */
    coai_buf_reset(&r.out);
    m = msg_text(COAI_MSG_TEXT, "late", 4);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE && r.out.len == 0);
    CHECK(coai_reply_feed_eof(&r) == COAI_DONE && r.out.len == 0);
    {
        coai_buf h = { 0 };
        coai_reply_head(&r, &h);
        CHECK(h.data && strcmp((char *)h.data, "Content-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\n") == 0);
        coai_buf_free(&h);
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);
}

static void test_sse_usage(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    int done;
    const char *want =
        PFX "{\"role\":\"assistant\"},\"finish_reason\":null}],\"usage\":null}\n\n"
        PFX "{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n"
        PFX "{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n"
        "data: {\"id\":\"chatcmpl-020202020202402280220202\",\"object\":\"chat.completion.chunk\","
        "\"created\":1768474032,\"model\":\"claude-4.5-sonnet\",\"choices\":[],\"usage\":"
        "{\"prompt_tokens\":1232,\"completion_tokens\":2,\"total_tokens\":1234}}\n\n"
        "data: [DONE]\n\n";
    reply_setup(&r, &s, 1, 1, NULL, 0);
    m = msg_text(COAI_MSG_TEXT, "Hi", 2);
    coai_reply_feed_msg(&r, &m);
    m = msg_kind(COAI_MSG_TOKENS);
    m.value = 2;
    coai_reply_feed_msg(&r, &m);
    m = msg_kind(COAI_MSG_CHECKPOINT);
    m.value = 1234;
    m.value2 = 200000;
    coai_reply_feed_msg(&r, &m);
    /* OK trailer then end of body: a normal end. */
    {
        coai_status st;
        memset(&st, 0, sizeof st);
        st.retryable = -1;
        CHECK(coai_reply_feed_status(&r, &st) == COAI_OK);
    }
    CHECK(coai_reply_feed_eof(&r) == COAI_DONE);
    CHECK_MEM(r.out.data, r.out.len, want, strlen(want));
    CHECK(sse_check(&r.out, &done) == 5 && done);
    coai_reply_free(&r);
    coai_buf_free(&s.all);
}

static void test_sse_tool_call(void)
{
    cJSON *sb = schema("{\"properties\":{\"command\":{}}}");
    coai_tool tools[2];
    coai_reply r;
    sink s;
    coai_msg m;
    int done;
    const char *want =
        PFX "{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n"
        PFX "{\"content\":\"I'll list the files.\"},\"finish_reason\":null}]}\n\n"
        PFX "{\"tool_calls\":[{\"index\":0,\"id\":\"sess_030303030303__call_exec7f3a0001\","
        "\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"command\\\":"
        "\\\"ls -la\\\",\\\"description\\\":\\\"Execute shell command: ls -la\\\",\\\"cwd\\\":"
        "\\\"/home/user/project\\\"}\"}}]},\"finish_reason\":null}]}\n\n"
        PFX "{},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: [DONE]\n\n";
    memset(tools, 0, sizeof tools);
    tools[0].name = coai_str_c("bash");
    tools[0].parameters = sb;
    tools[1].name = coai_str_c("read");
    reply_setup(&r, &s, 1, 0, tools, 2);
    m = msg_text(COAI_MSG_TEXT, "I'll list the files.", 20);
    coai_reply_feed_msg(&r, &m);
    m = msg_kind(COAI_MSG_TOOL_STARTED);
    m.tool = 1;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    /* An exec no tool matches gets what the CLI sends for an exec it cannot run:
     * throw{id, error} then stream_close{id} (issue 10 item 5). A kind without a name
     * (6): an ls went here until issue 31 item 2, but a shell tool now lists a directory
     * (the sentence for a refused file exec is checked in t_roles) */
    m = msg_kind(COAI_MSG_EXEC);
    m.exec.kind = (coai_exec_kind)6;
    m.exec.id = 3;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 2 && r.rejected == 1);
    /* [len] 2a <n> 12 <n> 08 03 12 <reason...>: exec_client_control{throw{1: 3, 2: ..}} */
    CHECK(s.all.len >= 9 && s.all.data[1] == 0x2a && s.all.data[3] == 0x12);
    CHECK(s.all.data[5] == 0x08 && s.all.data[6] == 3 && s.all.data[7] == 0x12);
    CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x2a\x04\x0a\x02\x08\x03", 7) == 0);
    /* Any other kind (here computer use) gets the same pair. */
    m.exec.kind = COAI_EXEC_COMPUTER_USE;
    m.exec.id = 4;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 4 && r.rejected == 2);
    CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x2a\x04\x0a\x02\x08\x04", 7) == 0);
    /* mcp_state_exec_args (36) gets McpStateExecResult.success (issue 24 item 5): the two
     * tools as one server, status "ready"; then stream_close. An unknown kind (28) a throw. */
    m.exec.kind = COAI_EXEC_MCP_STATE;
    m.exec.id = 8;
    {
        size_t at = s.all.len, k, found = 0;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
        CHECK(s.count == 6 && r.rejected == 2);
        /* [len] 12 <n> 08 08 a2 02 ... */
        CHECK(s.all.len > at + 12 && s.all.data[at + 1] == 0x12);
        for (k = at; k + 7 <= s.all.len; k++)
            if (memcmp(s.all.data + k, "\x3a\x05ready", 7) == 0) found++;
        CHECK(found == 1);
        for (k = at, found = 0; k + 17 <= s.all.len; k++)
            if (memcmp(s.all.data + k, "cursor-tools-read", 17) == 0) found++;
        CHECK(found == 1);
    }
    CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x2a\x04\x0a\x02\x08\x08", 7) == 0);
    m.exec.kind = (coai_exec_kind)28;   /* subagent: subagent_result.error{2 reason} */
    m.exec.id = 9;
    {
        size_t at = s.all.len;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
        CHECK(s.count == 8 && r.rejected == 3);
        /* [len] 12 <n> 08 09 e2 01 <n> 12 <n> 12 <n> "Subagents ..." */
        CHECK(s.all.len > at + 14 && s.all.data[at + 1] == 0x12 && s.all.data[at + 3] == 0x08
              && s.all.data[at + 4] == 9 && s.all.data[at + 5] == 0xe2
              && s.all.data[at + 6] == 0x01 && s.all.data[at + 8] == 0x12
              && s.all.data[at + 10] == 0x12 && memcmp(s.all.data + at + 12, "Subagents", 9) == 0);
    }
    CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x2a\x04\x0a\x02\x08\x09", 7) == 0);
    m.exec.kind = (coai_exec_kind)42;                /* MCP precheck: allowlisted: true */
    m.exec.id = 10;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 10 && r.rejected == 3);
    CHECK(memcmp(s.all.data + s.all.len - 7 - 10,
                 "\x09\x12\x07\x08\x0a\xd2\x02\x02\x08\x01", 10) == 0);
    m.exec.kind = (coai_exec_kind)41;                /* shell precheck: empty (not listed) */
    m.exec.id = 11;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 12 && r.rejected == 3);
    CHECK(memcmp(s.all.data + s.all.len - 7 - 8, "\x07\x12\x05\x08\x0b\xca\x02\x00", 8) == 0);
    m.exec.kind = (coai_exec_kind)45;                /* pi_read_args: a throw naming it */
    m.exec.id = 12;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 14 && r.rejected == 4);
    {
        size_t k, found = 0;
        for (k = 0; k + 21 <= s.all.len; k++)
            if (memcmp(s.all.data + k, "This tool (pi_read_args)", 21) == 0) found++;
        CHECK(found == 1);
    }
    /* request_context: result + stream_close, no output. */
    m.exec.kind = COAI_EXEC_REQUEST_CONTEXT;
    m.exec.id = 5;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 16 && r.rejected == 4);
    m = msg_kind(COAI_MSG_QUERY);
    m.query = 3;
    m.id = 7;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK && r.queries == 1);
    /* answered with an empty ask-question response: {6: {1: 7, 3: {}}}, no client output */
    CHECK(s.count == 17);
    CHECK(s.all.len >= 6 && memcmp(s.all.data + s.all.len - 6, "\x32\x04\x08\x07\x1a\x00", 6) == 0);
    m.query = 9;                     /* the hosted web fetch: approved {} */
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK && r.queries == 2 && s.count == 18);
    CHECK(memcmp(s.all.data + s.all.len - 8, "\x32\x06\x08\x07\x4a\x02\x0a\x00", 8) == 0);
    m = msg_kind(COAI_MSG_EXEC);
    m.exec.kind = COAI_EXEC_SHELL_STREAM;
    m.exec.id = 1;
    m.exec.exec_id = coai_str_c("exec-7f3a-0001");
    m.exec.command = coai_str_c("ls -la");
    m.exec.cwd = coai_str_c("/home/user/project");
    m.exec.tool_call_id = coai_str_c("toolu_01SHELL");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(s.count == 18);                       /* the mapped exec is not answered */
    CHECK(coai_reply_tool_called(&r) == 1);     /* the upstream run is left waiting */
    CHECK_MEM(r.out.data, r.out.len, want, strlen(want));
    CHECK(sse_check(&r.out, &done) == 5 && done);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* MCP: id from tool_call_id; non-stream aggregation: content null with tool call. */
    tools[1].name = coai_str_c("get_weather");
    reply_setup(&r, &s, 0, 0, tools, 2);
    m = msg_kind(COAI_MSG_EXEC);
    m.exec.kind = COAI_EXEC_MCP;
    m.exec.id = 2;
    m.exec.exec_id = coai_str_c("exec-mcp-0002");
    m.exec.tool_name = coai_str_c("get_weather");
    m.exec.tool_call_id = coai_str_c("toolu_01!ISSUE-xyz");
    m.exec.args_json = coai_str_c("{\"location\":\"Tokyo\"}");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    {
        const char *w = "{\"id\":\"chatcmpl-020202020202402280220202\",\"object\":\"chat.complet"
            "ion\","
            "\"created\":1768474032,\"model\":\"claude-4.5-sonnet\",\"choices\":[{\"index\":0,"
            "\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
            "\"sess_030303030303__call_toolu01ISSUExyz\",\"type\":\"function\",\"function\":"
            "{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Tokyo\\\"}\"}}]},"
            "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":8,"
            "\"completion_tokens\":8,\"total_tokens\":16}}";
        CHECK_MEM(r.out.data, r.out.len, w, strlen(w));
        CHECK(coai_reply_status(&r) == 200);
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);
    cJSON_Delete(sb);
}

static void test_non_stream(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    coai_buf h = { 0 };
    const char *want = "{\"id\":\"chatcmpl-020202020202402280220202\",\"object\":\"chat.completi"
        "on\","
        "\"created\":1768474032,\"model\":\"claude-4.5-sonnet\",\"choices\":[{\"index\":0,"
        "\"message\":{\"role\":\"assistant\",\"content\":\"Hello there.\",\"reasoning_content\":"
        "\"Let me think\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,"
        "\"completion_tokens\":6,\"total_tokens\":14}}";
    reply_setup(&r, &s, 0, 0, NULL, 0);
    m = msg_text(COAI_MSG_THINKING, "Let me", 6);
    coai_reply_feed_msg(&r, &m);
    m = msg_text(COAI_MSG_TEXT, "Hello", 5);
    coai_reply_feed_msg(&r, &m);
    m = msg_text(COAI_MSG_THINKING, " think", 6);
    coai_reply_feed_msg(&r, &m);
    CHECK(coai_reply_keepalive(&r) == COAI_OK && r.out.len == 0 && !coai_reply_started(&r));
    m = msg_text(COAI_MSG_TEXT, " there.", 7);
    coai_reply_feed_msg(&r, &m);
    CHECK(!coai_reply_started(&r) && r.out.len == 0);
    m = msg_kind(COAI_MSG_TURN_ENDED);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK_MEM(r.out.data, r.out.len, want, strlen(want));
    coai_reply_head(&r, &h);
    CHECK(h.data && strcmp((char *)h.data, "Content-Type: application/json\r\n") == 0);
    coai_buf_free(&h);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* A non-streaming error is always a real status. */
    reply_setup(&r, &s, 0, 0, NULL, 0);
    m = msg_text(COAI_MSG_TEXT, "partial", 7);
    coai_reply_feed_msg(&r, &m);
    {
        coai_status st;
        memset(&st, 0, sizeof st);
        st.code = 8;
        strcpy(st.message, "You've hit your usage limit");
        CHECK(coai_reply_feed_status(&r, &st) == COAI_DONE);
    }
    /* a usage limit, to a Chat Completions client: 402 (issue 25 item 6); the error keeps
     * its 429 for the other dialects */
    CHECK(coai_reply_status(&r) == 402 && r.error.status == 429);
    CHECK(coai_error_status_as(&r.error, COAI_DIALECT_RESPONSES) == 429);
    CHECK(coai_error_status_as(&r.error, COAI_DIALECT_ANTHROPIC) == 429);
    CHECK(r.out.data && strstr((char *)r.out.data, "\"type\":\"insufficient_quota\"") != NULL);
    coai_reply_head(&r, &h);
    CHECK(h.data && strcmp((char *)h.data, "Content-Type: application/json\r\n"
                           "x-should-retry: false\r\n") == 0);
    coai_buf_free(&h);
    coai_reply_free(&r);
    coai_buf_free(&s.all);
}

/* ---- errors before / after commit --------------------------------------- */

static void test_commit_errors(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    coai_status st;
    int done;
    cJSON *j;
    /* before any output: a real 401 with an OpenAI error body */
    reply_setup(&r, &s, 1, 0, NULL, 0);
    m = msg_kind(COAI_MSG_HEARTBEAT);
    coai_reply_feed_msg(&r, &m);
    memset(&st, 0, sizeof st);
    st.code = 16;
    strcpy(st.message, "Not logged in");
    CHECK(coai_reply_feed_status(&r, &st) == COAI_DONE);
    CHECK(coai_reply_started(&r) && coai_reply_status(&r) == 401);
    j = cJSON_ParseWithLength((const char *)r.out.data, r.out.len);
    CHECK(j != NULL);
    CHECK(j && strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "type")->valuestring,
                      "authentication_error") == 0);
    cJSON_Delete(j);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* after output: in-band error + [DONE], never a stop */
    reply_setup(&r, &s, 1, 1, NULL, 0);
    m = msg_text(COAI_MSG_TEXT, "a\xe2\x82", 3);       /* a held partial char is dropped */
    coai_reply_feed_msg(&r, &m);
    CHECK(coai_reply_feed_eof(&r) == COAI_DONE);       /* EOF without trailer = truncated */
    CHECK(sse_check(&r.out, &done) == 4 && done);
    CHECK(strstr((char *)r.out.data, "\"finish_reason\":\"stop\"") == NULL);
    CHECK(strstr((char *)r.out.data, "data: {\"error\":{\"message\":\"The Cursor stream ended "
                 "before the end of the turn\",\"type\":\"upstream_error\",\"code\":"
                 "\"upstream_truncated\"}}\n\ndata: [DONE]\n\n") != NULL);
    CHECK(r.error.status == 502);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* keepalive before output commits the 200 and writes a comment */
    reply_setup(&r, &s, 1, 0, NULL, 0);
    CHECK(coai_reply_keepalive(&r) == COAI_OK && coai_reply_started(&r));
    CHECK(r.out.len > 14 && memcmp(r.out.data + r.out.len - 13, ": keepalive\n\n", 13) == 0);
    CHECK(coai_reply_fail_timeout(&r) == COAI_DONE);
    CHECK(strstr((char *)r.out.data, "\"code\":\"upstream_timeout\"") != NULL);
    CHECK(sse_check(&r.out, &done) == 3 && done);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* transport error before output */
    reply_setup(&r, &s, 1, 0, NULL, 0);
    {
        coai_error e;
        const char *b = "{\"code\":\"unauthenticated\",\"message\":\"Not logged in\"}";
        coai_error_from_http(401, b, strlen(b), &e);
        CHECK(coai_reply_feed_error(&r, &e) == COAI_DONE && coai_reply_status(&r) == 401);
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* the upstream send failing ends the run with a 502 */
    reply_setup(&r, &s, 1, 0, NULL, 0);
    s.fail_at = 1;
    m = msg_kind(COAI_MSG_KV_GET);
    m.id = 9;
    m.blob_id = coai_str_c("nope");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE && coai_reply_status(&r) == 502);
    coai_reply_free(&r);
    coai_buf_free(&s.all);
}

/* ---- UTF-8 ------------------------------------------------------------ */

static void test_utf8(void)
{
    const char *text = "a\xc3\xb6" "b\xe2\x82\xac" "c\xf0\x9f\x8c\x8d" "d";
    size_t n = strlen(text), cut, cut2;
    int ok = 1;
    for (cut = 0; cut <= n; cut++) {
        for (cut2 = cut; cut2 <= n; cut2++) {
            coai_reply r;
            sink s;
            coai_msg m;
            coai_buf got = { 0 };
            int done;
            reply_setup(&r, &s, 1, 0, NULL, 0);
            m = msg_text(COAI_MSG_TEXT, text, cut);
            coai_reply_feed_msg(&r, &m);
            m = msg_text(COAI_MSG_TEXT, text + cut, cut2 - cut);
            coai_reply_feed_msg(&r, &m);
            m = msg_text(COAI_MSG_TEXT, text + cut2, n - cut2);
            coai_reply_feed_msg(&r, &m);
            m = msg_kind(COAI_MSG_TURN_ENDED);
            coai_reply_feed_msg(&r, &m);
            if (sse_check(&r.out, &done) < 0 || !done) ok = 0;
            sse_collect(&r.out, "content", &got);
            if (got.len != n || memcmp(got.data, text, n) != 0) ok = 0;
            coai_buf_free(&got);
            coai_reply_free(&r);
            coai_buf_free(&s.all);
        }
    }
    CHECKF(ok, "split characters must be reassembled exactly");

    /* invalid bytes -> U+FFFD, reasoning has its own carry */
    {
        coai_reply r;
        sink s;
        coai_msg m;
        coai_buf got = { 0 }, gr = { 0 };
        int done;
        reply_setup(&r, &s, 1, 0, NULL, 0);
        m = msg_text(COAI_MSG_TEXT, "x\xff" "y\xc3", 4);
        coai_reply_feed_msg(&r, &m);
        m = msg_text(COAI_MSG_THINKING, "t\xe2\x82", 3);
        coai_reply_feed_msg(&r, &m);
        m = msg_text(COAI_MSG_TEXT, "\xa9" "z\xed\xa0\x80", 5);   /* completes é; surrogate */
        coai_reply_feed_msg(&r, &m);
        m = msg_text(COAI_MSG_THINKING, "\xac", 1);
        coai_reply_feed_msg(&r, &m);
        m = msg_text(COAI_MSG_TEXT, "\xf0\x9f", 2);              /* never completed */
        coai_reply_feed_msg(&r, &m);
        m = msg_kind(COAI_MSG_TURN_ENDED);
        coai_reply_feed_msg(&r, &m);
        CHECK(sse_check(&r.out, &done) > 0 && done);
        sse_collect(&r.out, "content", &got);
        sse_collect(&r.out, "reasoning_content", &gr);
        /* ED A0 80 (a surrogate) is three maximal invalid subparts and the cut-off F0 9F one
         * more, so four U+FFFD, as Node's TextDecoder would produce */
        CHECK(got.data && strcmp((char *)got.data, "x\xef\xbf\xbdy\xc3\xa9z\xef\xbf\xbd\xef\xbf"
            "\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0);
        CHECK(gr.data && strcmp((char *)gr.data, "t\xe2\x82\xac") == 0);
        coai_buf_free(&got);
        coai_buf_free(&gr);
        coai_reply_free(&r);
        coai_buf_free(&s.all);
    }
}

/* ---- KV store ----------------------------------------------------------- */

static void test_kv(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    coai_reply_opts o;
    int done;
    reply_setup(&r, &s, 1, 0, NULL, 0);
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 1;
    m.blob_id = coai_str_c("id-1");
    m.blob_data = coai_str_c("abc");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_kind(COAI_MSG_KV_GET);
    m.id = 2;
    m.blob_id = coai_str_c("id-1");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m.id = 3;
    m.blob_id = coai_str_c("id-2");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(s.count == 3);
    /* a key that is not a 32-byte digest and is not stored: the key is the data (issue 24
     * item 5) */
    CHECK_MEM(s.all.data, s.all.len,
              "\x06\x1a\x04\x08\x01\x1a\x00"
              "\x0b\x1a\x09\x08\x02\x12\x05\x0a\x03" "abc"
              "\x0c\x1a\x0a\x08\x03\x12\x06\x0a\x04" "id-2", 32);
    CHECK(r.kv_misses_ == 0);
    {   /* a 32-byte key not stored: a miss, answered without data */
        static const char key[32] = "0123456789abcdef0123456789abcdef";
        m.id = 6;
        m.blob_id.ptr = key;
        m.blob_id.len = 32;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
        CHECK(s.count == 4 && r.kv_misses_ == 1);
        CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x1a\x04\x08\x06\x12\x00", 7) == 0);
    }
    /* set_blob without data: acked, the stored blob stays */
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 11;
    m.blob_id = coai_str_c("id-1");
    m.no_blob_data = 1;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK && s.count == 5);
    CHECK(memcmp(s.all.data + s.all.len - 7, "\x06\x1a\x04\x08\x0b\x1a\x00", 7) == 0);
    m = msg_kind(COAI_MSG_KV_GET);
    m.id = 12;
    m.blob_id = coai_str_c("id-1");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK && s.count == 6);
    CHECK(memcmp(s.all.data + s.all.len - 11, "\x0a\x1a\x08\x08\x0c\x12\x04\x0a\x02" "ab", 11)
          == 0 || memcmp(s.all.data + s.all.len - 12, "\x0b\x1a\x09\x08\x0c\x12\x05\x0a\x03" "abc",
                         12) == 0);
    /* overwrite with new data */
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 4;
    m.blob_id = coai_str_c("id-1");
    m.blob_data = coai_str_c("xy");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = msg_kind(COAI_MSG_KV_GET);
    m.id = 5;
    m.blob_id = coai_str_c("id-1");
    coai_reply_feed_msg(&r, &m);
    CHECK(s.all.len >= 10 && memcmp(s.all.data + s.all.len - 10,
                                    "\x1a\x08\x08\x05\x12\x04\x0a\x02xy", 10) == 0);
    CHECK(r.kv_count_ == 1 && r.kv_bytes_ == 4 + 2 + COAI__OA_KV_OVERHEAD);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* the bound: a small cap; the blob that crosses it fails the run clearly */
    memset(&o, 0, sizeof o);
    memset(&s, 0, sizeof s);
    o.stream = 1;
    o.completion_id = coai_str_c("chatcmpl-1");
    o.model = coai_str_c("m");
    o.send = sink_send;
    o.send_user = &s;
    o.max_kv_bytes = 1000;
    CHECK(coai_reply_init(&r, &o) == 0);
    {
        static char big[900];
        memset(big, 'q', sizeof big);
        m = msg_kind(COAI_MSG_KV_SET);
        m.id = 1;
        m.blob_id = coai_str_c("a");
        m.blob_data.ptr = big;
        m.blob_data.len = 800;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
        m.blob_id = coai_str_c("a");             /* replacing frees the old size */
        m.blob_data.len = 900;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
        m.id = 2;
        m.blob_id = coai_str_c("b");
        m.blob_data.len = 10;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    }
    CHECK(coai_reply_status(&r) == 502 && r.error.code && strcmp(r.error.code, "kv_store_limit"
        "") == 0);
    CHECK(strstr(r.error.message, "1000 bytes") != NULL);
    CHECK(s.count == 2);
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    /* §9 fallback: assistant text from a blob, only when no text was streamed */
    reply_setup(&r, &s, 1, 0, NULL, 0);
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 7;
    m.blob_id = coai_str_c("b1");
    m.blob_data = coai_str_c("{\"id\":\"2\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                             "\"text\":\"Answer that was only stored in a blob.\"}]}");
    coai_reply_feed_msg(&r, &m);
    m.id = 8;
    m.blob_id = coai_str_c("b2");
    m.blob_data = coai_str_c("{\"messages\":[{\"role\":\"assistant\",\"content\":\"Second.\"},"
                             "{\"role\":\"user\",\"content\":\"no\"}]}");
    coai_reply_feed_msg(&r, &m);
    {
        /* protobuf-looking blob: field 1 = 60 chars of text, field 2 = varint; invalid
         * UTF-8 somewhere (field 3 bytes) makes it "not JSON". */
        unsigned char pb[80];
        size_t k = 0, i;
        pb[k++] = 0x0a; pb[k++] = 60;
        for (i = 0; i < 60; i++) pb[k++] = (unsigned char)('A' + i % 26);
        pb[k++] = 0x10; pb[k++] = 0x05;
        pb[k++] = 0x1a; pb[k++] = 0x02; pb[k++] = 0xff; pb[k++] = 0xfe;
        m.id = 9;
        m.blob_id = coai_str_c("b3");
        m.blob_data.ptr = (const char *)pb;
        m.blob_data.len = k;
        coai_reply_feed_msg(&r, &m);
        m.id = 10;
        m.blob_id = coai_str_c("b3");        /* same data again: not kept twice */
        coai_reply_feed_msg(&r, &m);
    }
    m = msg_kind(COAI_MSG_TURN_ENDED);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    {
        coai_buf got = { 0 };
        sse_collect(&r.out, "content", &got);
        CHECK(got.data && strcmp((char *)got.data, "Answer that was only stored in a blob."
                                 "Second.ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZABC"
                                     "DEFGH")
              == 0);
        coai_buf_free(&got);
        CHECK(sse_check(&r.out, &done) == 6 && done);
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);

    reply_setup(&r, &s, 1, 0, NULL, 0);
    m = msg_kind(COAI_MSG_KV_SET);
    m.id = 7;
    m.blob_id = coai_str_c("b1");
    m.blob_data = coai_str_c("{\"role\":\"assistant\",\"content\":\"stored\"}");
    coai_reply_feed_msg(&r, &m);
    m = msg_text(COAI_MSG_TEXT, "streamed", 8);
    coai_reply_feed_msg(&r, &m);
    m = msg_kind(COAI_MSG_TURN_ENDED);
    coai_reply_feed_msg(&r, &m);
    CHECK(strstr((char *)r.out.data, "stored") == NULL);
    coai_reply_free(&r);
    coai_buf_free(&s.all);
}

/* ---- error mapping --------------------------------------------------------- */

/* coai_error.kind and .upstream_status come from the mapping, so that a program (doctor)
 * decides on them and never on the message's words. */
static void test_error_kind(void)
{
    static const char invoice_like[] = "You've hit your usage limit; the details are on your "
                                       "invoice";
    coai_status st;
    coai_error e;
    memset(&st, 0, sizeof st);
    st.retryable = -1;
    st.code = 8;
    strcpy(st.message, "unpaid invoice: please pay it");
    coai_error_from_status(&st, &e);
    CHECK(e.code && strcmp(e.code, "insufficient_quota") == 0
          && e.kind == COAI_ERRK_UNPAID_INVOICE && e.upstream_status == 0);
    /* a usage limit whose words mention an invoice is a used-up plan, not an open invoice */
    strcpy(st.message, invoice_like);
    coai_error_from_status(&st, &e);
    CHECKF(e.code && strcmp(e.code, "insufficient_quota") == 0 && e.kind == COAI_ERRK_NONE
           && strstr(e.message, "invoice"), "%d %s", (int)e.kind, e.message);
    st.code = 4;
    strcpy(st.message, "Timeout waiting for next item.");
    coai_error_from_status(&st, &e);
    CHECK(e.code && strcmp(e.code, "upstream_timeout") == 0
          && e.kind == COAI_ERRK_CONTEXT_UNANSWERED);
    /* another timeout that names request_context in its words */
    strcpy(st.message, "deadline passed while building request_context");
    coai_error_from_status(&st, &e);
    CHECKF(e.code && strcmp(e.code, "upstream_timeout") == 0 && e.kind == COAI_ERRK_NONE
           && strstr(e.message, "request_context"), "%d %s", (int)e.kind, e.message);
    st.code = 13;
    strcpy(st.message, "illegal request line");
    coai_error_from_status(&st, &e);
    CHECK(e.kind == COAI_ERRK_NONE && e.upstream_status == 0);
    /* HTTP answers: the status is carried, whatever the words */
    coai_error_from_http(464, "", 0, &e);
    CHECK(e.status == 502 && e.upstream_status == 464 && e.kind == COAI_ERRK_NONE);
    coai_error_from_http(415, "{\"code\":\"unknown\",\"message\":\"nope\"}", 35, &e);
    CHECK(e.upstream_status == 415);
    coai_error_from_http(500, "proxy said: answered HTTP 464 earlier", 37, &e);
    CHECK(e.upstream_status == 500 && strstr(e.message, "answered HTTP 464"));
    coai_error_from_http(400, "Illegal Request Line", 20, &e);
    CHECK(e.upstream_status == 400 && e.kind == COAI_ERRK_HTTP1_REFUSED);
    coai_error_from_http(505, "", 0, &e);
    CHECK(e.kind == COAI_ERRK_HTTP1_REFUSED);
    coai_error_from_http(502, "illegal request line", 20, &e);
    CHECK(e.kind == COAI_ERRK_NONE);
    coai_error_from_http(429, "{\"code\":\"resource_exhausted\",\"message\":\"unpaid invoice\"}", 56,
                         &e);
    CHECK(e.kind == COAI_ERRK_UNPAID_INVOICE && e.upstream_status == 429);
    coai_error_from_http_call(404, "", 0, "/x.Svc/Call", &e);
    CHECK(e.code && strcmp(e.code, "upstream_not_found") == 0 && e.upstream_status == 404);
    /* coai_error_set fills every field */
    coai_error_set(&e, 500, "server_error", NULL, NULL, "x");
    CHECK(e.upstream_status == 0 && e.kind == COAI_ERRK_NONE);
}

static void test_error_mapping(void)
{
    static const struct { int code, err; const char *name; int status; const char *type;
                          const char *ecode; int no_retry; } cases[] = {
        { 8, 0, NULL, 429, "insufficient_quota", "insufficient_quota", 1 },
        { 2, 10, "ERROR_PRO_USER_USAGE_LIMIT", 429, "insufficient_quota", "insufficient_quota", 1 },
        { 8, 41, "ERROR_RESOURCE_EXHAUSTED", 429, "insufficient_quota", "insufficient_quota", 1 },
        { 8, 22, "ERROR_GENERIC_RATE_LIMIT_EXCEEDED", 429, "requests", "rate_limit_exceeded", 0 },
        { 16, 0, NULL, 401, "authentication_error", "upstream_auth_failed", 1 },
        { 2, 2, "ERROR_NOT_LOGGED_IN", 401, "authentication_error", "upstream_auth_failed", 1 },
        { 2, 12, "ERROR_AUTH_TOKEN_EXPIRED", 401, "authentication_error", "upstream_auth_failed"
            "", 1 },
        { 7, 38, "ERROR_UNAUTHORIZED", 401, "authentication_error", "upstream_auth_failed", 1 },
        { 3, 1, "ERROR_BAD_API_KEY", 401, "authentication_error", "upstream_auth_failed", 1 },
        { 9, 30, "ERROR_OUTDATED_CLIENT", 502, "upstream_error", "outdated_client", 1 },
        { 3, 5, "ERROR_BAD_MODEL_NAME", 404, "invalid_request_error", "model_not_found", 1 },
        { 9, 40, "ERROR_DEPRECATED", 404, "invalid_request_error", "model_not_found", 1 },
        { 5, 0, NULL, 404, "invalid_request_error", "model_not_found", 1 },
        { 3, 43, "ERROR_CONVERSATION_TOO_LONG", 400, "invalid_request_error",
          "context_length_exceeded", 1 },
        { 14, 0, NULL, 503, "server_error", "upstream_unavailable", 0 },
        { 4, 0, NULL, 504, "server_error", "upstream_timeout", 0 },
        { 13, 0, NULL, 502, "upstream_error", "upstream_error", 0 },
        { 2, 0, NULL, 502, "upstream_error", "upstream_error", 0 },
    };
    size_t i;
    coai_status st;
    coai_error e;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&st, 0, sizeof st);
        st.code = cases[i].code;
        st.error = cases[i].err;
        st.error_name = cases[i].name;
        st.retryable = -1;
        strcpy(st.message, "Upstream says no");
        strcpy(st.title, "Title here");
        coai_error_from_status(&st, &e);
        CHECKF(e.status == cases[i].status, "case %zu: %d", i, e.status);
        CHECKF(strcmp(e.type, cases[i].type) == 0, "case %zu: %s", i, e.type);
        CHECKF(e.code && strcmp(e.code, cases[i].ecode) == 0, "case %zu", i);
        CHECKF(e.no_retry == cases[i].no_retry, "case %zu", i);
        CHECKF(strstr(e.message, "Upstream says no") && strstr(e.message, "Title here"),
               "case %zu: %s", i, e.message);
        if (cases[i].name) CHECK(strstr(e.message, cases[i].name) != NULL);
    }
    memset(&st, 0, sizeof st);
    st.code = 9;
    st.error = 30;
    coai_error_from_status(&st, &e);
    CHECK(strstr(e.message, "CURSOR_CLIENT_VERSION") != NULL);
    /* a long upstream detail never pushes the hint out of the 512-byte message */
    memset(st.detail, 'd', sizeof st.detail - 1);
    st.detail[sizeof st.detail - 1] = 0;
    coai_error_from_status(&st, &e);
    CHECK(strstr(e.message, "CURSOR_CLIENT_VERSION") != NULL && strlen(e.message) < 512);
    /* the same text as coai_status_describe: a title equal to the message appears once */
    memset(&st, 0, sizeof st);
    st.code = 13;
    strcpy(st.message, "Boom happened");
    strcpy(st.title, "Boom happened");
    strcpy(st.detail, "try later");
    coai_error_from_status(&st, &e);
    CHECKF(strcmp(e.message, "Cursor error: Boom happened: try later (grpc-status 13)") == 0,
           "%s", e.message);
    memset(&st, 0, sizeof st);
    coai_error_from_status(&st, &e);
    CHECK(e.status == 0);

    {
        static const struct { int http; const char *body; int status; const char *code; } h[] = {
            { 401, "{\"code\":\"unauthenticated\",\"message\":\"Not logged in\"}", 401,
              "upstream_auth_failed" },
            { 200, "{\"error\":{\"code\":\"unauthenticated\",\"message\":\"x\"}}", 401,
              "upstream_auth_failed" },
            { 404, "{\"code\":\"not_found\",\"message\":\"model gone\"}", 404, "model_not_found" },
            { 404, "<html>nope</html>", 502, "upstream_error" },
            { 429, "{\"code\":\"resource_exhausted\",\"message\":\"usage limit hit\"}", 429,
              "insufficient_quota" },
            { 429, "slow down", 429, "rate_limit_exceeded" },
            { 503, "", 503, "upstream_unavailable" },
            { 500, "<html>\x01\xff oops</html>", 502, "upstream_error" },
            { 403, "{}", 403, "upstream_permission_denied" },
        };
        for (i = 0; i < sizeof h / sizeof h[0]; i++) {
            coai_buf b = { 0 };
            cJSON *j;
            coai_error_from_http(h[i].http, h[i].body, strlen(h[i].body), &e);
            CHECKF(e.status == h[i].status, "http case %zu: %d", i, e.status);
            CHECKF(e.code && strcmp(e.code, h[i].code) == 0, "http case %zu", i);
            CHECK(coai_utf8_valid_prefix(e.message, strlen(e.message)) == strlen(e.message));
            coai_error_write(&b, &e);
            j = cJSON_Parse((const char *)b.data);
            CHECK(j != NULL);
            cJSON_Delete(j);
            coai_buf_free(&b);
        }
        coai_error_from_http(500, "<html>\x01\xff oops</html>", 21, &e);
        CHECK(strchr(e.message, 1) == NULL && strstr(e.message, "oops") != NULL);
        {   /* a CDN error page: its text, not its markup (reliability #27) */
            const char *page = "\n <html>\n<head><title>502 Bad Gateway</title></head>\n"
                               "<body><!-- x --><center><h1>502   Bad Gateway</h1></center>"
                               "</body></html>\n";
            coai_error_from_http(502, page, strlen(page), &e);
            CHECKF(e.status == 502 && strstr(e.message, "502 Bad Gateway 502 Bad Gateway")
                   && !strchr(e.message, '<') && !strchr(e.message, '>'), "%s", e.message);
        }
        {
            char big[1000];
            memset(big, 'x', sizeof big);
            coai_error_from_http(502, big, sizeof big, &e);
            CHECK(strlen(e.message) < 260);
        }
    }
}

/* ---- models ------------------------------------------------------------ */

static const char *models_json =
    "{\"models\":["
    "{\"modelId\":\"default\",\"displayModelId\":\"auto\",\"displayName\":\"Auto\",\"aliases\":[]},"
    "{\"modelId\":\"claude-4.5-sonnet\",\"displayModelId\":\"sonnet-4.5\",\"displayName\":"
    "\"Sonnet 4.5\",\"aliases\":[\"sonnet\"]},"
    "{\"modelId\":\"claude-4.5-sonnet-thinking\",\"displayModelId\":\"sonnet-4.5-thinking\","
    "\"displayName\":\"Sonnet 4.5 Thinking\"},"
    "{\"modelId\":\"gpt-5.1-codex\",\"displayModelId\":\"gpt-5.1-codex\",\"displayName\":"
    "\"GPT-5.1 Codex\"},"
    "{\"modelId\":\"gemini-3-pro\",\"displayModelId\":\"gemini-3-pro\",\"displayName\":"
    "\"Gemini 3 Pro\"},"
    "{\"displayName\":\"skipped\"},"
    "{\"displayModelId\":\"grok-4\",\"displayName\":\"Grok 4\"}]}";

static const char *owner(const cJSON *d, int i)
{
    return cJSON_GetObjectItem(cJSON_GetArrayItem(d, i), "owned_by")->valuestring;
}

static void test_models(void)
{
    coai_models m;
    coai_buf b = { 0 };
    uint32_t c, o;
    cJSON *j, *d;
    CHECK(coai_models_parse(&m, models_json, strlen(models_json)) == 0);
    CHECK(m.count == 6);
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("sonnet-4.5")), "claude-4.5-sonnet"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("sonnet")), "claude-4.5-sonnet"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("claude-4.5-sonnet")), "claude-4.5-sonn"
        "et"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("auto")), "default"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("")), "default"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("my-own")), "my-own"));
    CHECK(coai_str_eq(coai_models_resolve(&m, coai_str_c("grok-4")), "grok-4"));
    CHECK(coai_str_eq(coai_models_resolve(NULL, coai_str_c("")), "auto"));
    coai_model_limits(coai_str_c("sonnet-4.5"), &c, &o);
    CHECK(c == 200000 && o == 64000);
    coai_model_limits(coai_str_c("gpt-5.1-codex"), &c, &o);
    CHECK(c == 400000 && o == 128000);
    coai_model_limits(coai_str_c("gemini-3-pro"), &c, &o);
    CHECK(c == 1048576 && o == 65536);
    coai_model_limits(coai_str_c("auto"), &c, &o);
    CHECK(c == 128000 && o == 16384);
    coai_model_limits(coai_str_c("grok-4"), &c, &o);
    CHECK(c == 256000 && o == 32768);
    coai_models_write_list(&b, &m, 1768474032);
    j = cJSON_Parse((const char *)b.data);
    CHECK(j != NULL);
    d = cJSON_GetObjectItem(j, "data");
    CHECK(cJSON_GetArraySize(d) == 6);
    CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 0), "id")->valuestring, "auto") == 0);
    CHECK(strcmp(owner(d, 0), "cursor") == 0);
    CHECK(strcmp(owner(d, 1), "anthropic") == 0);
    CHECK(strcmp(owner(d, 3), "openai") == 0);
    CHECK(strcmp(owner(d, 4), "google") == 0);
    CHECK(strcmp(owner(d, 5), "xai") == 0);
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 1), "context_length")->valueint == 200000);
    CHECK(strncmp((const char *)b.data, "{\"object\":\"list\",\"data\":[{\"id\":\"auto\",\"objec"
        "t\":"
                  "\"model\",\"created\":1768474032,\"owned_by\":\"cursor\",", 92) == 0);
    cJSON_Delete(j);
    coai_buf_free(&b);
    coai_models_free(&m);
    CHECK(coai_models_parse(&m, "nope", 4) == COAI_ERR_JSON && m.count == 0);
    coai_models_free(&m);
    CHECK(coai_models_parse(&m, "{\"models\":[]}", 13) == 0 && m.count == 0);
    coai_models_write_list(&b, &m, 5);
    CHECK(b.data && strcmp((char *)b.data, "{\"object\":\"list\",\"data\":[]}") == 0);
    coai_buf_free(&b);
    coai_models_free(&m);
}

/* Issue 24 item 9: Cursor's own token counts (TurnEndedUpdate 1-5) in every dialect's
 * usage, and a shell's description and hard timeout passed to tools that take them. */
static void test_turn_usage(void)
{
    static const coai_dialect ds[] = { COAI_DIALECT_OPENAI_CHAT, COAI_DIALECT_ANTHROPIC,
                                       COAI_DIALECT_RESPONSES };
    size_t i;
    for (i = 0; i < 3; i++) {
        coai_reply r;
        sink s;
        coai_msg m;
        coai_usage u;
        coai_reply_opts o;
        cJSON *j, *us;
        memset(&o, 0, sizeof o);
        memset(&s, 0, sizeof s);
        o.dialect = ds[i];
        o.completion_id = coai_str_c("id-1");
        o.model = coai_str_c("m");
        o.prompt = coai_str_c("User: hi");
        o.send = sink_send;
        o.send_user = &s;
        CHECK(coai_reply_init(&r, &o) == 0);
        m = msg_text(COAI_MSG_THINKING, "hmm", 3);
        coai_reply_feed_msg(&r, &m);
        m = msg_text(COAI_MSG_TEXT, "Hello", 5);
        coai_reply_feed_msg(&r, &m);
        m = msg_kind(COAI_MSG_TURN_ENDED);
        /* Cursor's input counts the cached tokens (the live frames: input 11,490 with
         * cache read 11,392): input as sent, Anthropic's without the cached parts */
        m.turn.input = 11490; m.turn.output = 40; m.turn.cache_read = 11092;
        m.turn.cache_write = 300; m.turn.reasoning = 25; m.turn.present = 1;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
        coai_reply_usage(&r, &u);
        CHECK(u.reported && u.input_tokens == 11490 && u.output_tokens == 40
              && u.cache_read_tokens == 11092 && u.cache_write_tokens == 300
              && u.reasoning_tokens == 25 && !u.cache_over_input);
        coai_buf_putc(&r.out, 0);
        j = cJSON_Parse((const char *)r.out.data);
        CHECKF(j != NULL, "dialect %d: %s", (int)ds[i], (const char *)r.out.data);
        us = cJSON_GetObjectItem(j, "usage");
        if (ds[i] == COAI_DIALECT_OPENAI_CHAT) {
            CHECK(cJSON_GetObjectItem(us, "prompt_tokens")->valueint == 11490);
            CHECK(cJSON_GetObjectItem(us, "completion_tokens")->valueint == 40);
            CHECK(cJSON_GetObjectItem(us, "total_tokens")->valueint == 11530);
            CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "prompt_tokens_details"),
                                      "cached_tokens")->valueint == 11092);
            CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "completion_tokens_details"),
                                      "reasoning_tokens")->valueint == 25);
        } else if (ds[i] == COAI_DIALECT_ANTHROPIC) {
            CHECK(cJSON_GetObjectItem(us, "input_tokens")->valueint == 98);
            CHECK(cJSON_GetObjectItem(us, "cache_read_input_tokens")->valueint == 11092);
            CHECK(cJSON_GetObjectItem(us, "cache_creation_input_tokens")->valueint == 300);
            CHECK(cJSON_GetObjectItem(us, "output_tokens")->valueint == 40);
        } else {
            CHECK(cJSON_GetObjectItem(us, "input_tokens")->valueint == 11490);
            CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "input_tokens_details"),
                                      "cached_tokens")->valueint == 11092);
            CHECK(cJSON_GetObjectItem(us, "output_tokens")->valueint == 40);
            CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "output_tokens_details"),
                                      "reasoning_tokens")->valueint == 25);
        }
        cJSON_Delete(j);
        coai_reply_free(&r);
        coai_buf_free(&s.all);
    }
    {   /* reasoning is part of output: never more than it; a turn_ended without counts
         * keeps the estimates */
        coai_reply r;
        sink s;
        coai_msg m;
        coai_usage u;
        reply_setup(&r, &s, 0, 0, NULL, 0);
        m = msg_kind(COAI_MSG_TURN_ENDED);
        m.turn.input = 10; m.turn.output = 5; m.turn.reasoning = 9; m.turn.present = 1;
        coai_reply_feed_msg(&r, &m);
        coai_reply_usage(&r, &u);
        CHECK(u.reported && u.reasoning_tokens == 5 && u.input_tokens == 10);
        coai_reply_free(&r);
        coai_buf_free(&s.all);
        /* a cache read over the input (a server that counts it apart): the raw figures,
         * flagged; Anthropic's input never below 0 */
        reply_setup(&r, &s, 0, 0, NULL, 0);
        m = msg_kind(COAI_MSG_TURN_ENDED);
        m.turn.input = 100; m.turn.output = 5; m.turn.cache_read = 5000; m.turn.present = 1;
        coai_reply_feed_msg(&r, &m);
        coai_reply_usage(&r, &u);
        CHECK(u.reported && u.input_tokens == 100 && u.cache_read_tokens == 5000
              && u.cache_over_input);
        coai_reply_free(&r);
        coai_buf_free(&s.all);
        reply_setup(&r, &s, 0, 0, NULL, 0);
        m = msg_kind(COAI_MSG_TURN_ENDED);
        coai_reply_feed_msg(&r, &m);
        coai_reply_usage(&r, &u);
        CHECK(!u.reported && u.input_tokens == 8 && u.cache_read_tokens == 0);
        coai_reply_free(&r);
        coai_buf_free(&s.all);
    }
    {   /* shell: Cursor's description and hard timeout */
        coai_exec ex;
        coai_tool t[1];
        cJSON *cc = schema("{\"type\":\"object\",\"properties\":{\"command\":{},"
                           "\"timeout\":{\"type\":\"number\"},\"description\":{}},"
                           "\"additionalProperties\":false}");
        cJSON *plain = schema("{\"properties\":{\"command\":{}},\"additionalProperties\":false}");
        memset(&ex, 0, sizeof ex);
        memset(t, 0, sizeof t);
        ex.kind = COAI_EXEC_SHELL_STREAM;
        ex.command = coai_str_c("make test");
        ex.description = coai_str_c("Run the tests");
        ex.hard_timeout_ms = 120000;
        t[0].name = coai_str_c("Bash");
        t[0].parameters = cc;
        check_map(&ex, t, 1, 1, "Bash", "{\"command\":\"make test\",\"description\":"
                  "\"Run the tests\",\"timeout\":120000}", __LINE__);
        t[0].parameters = plain;                     /* a tool that takes neither */
        check_map(&ex, t, 1, 1, "Bash", "{\"command\":\"make test\"}", __LINE__);
        cJSON_Delete(cc);
        cJSON_Delete(plain);
    }
}

/* needle in hay (memmem is not C99) */
static int has_bytes(const void *hay, size_t n, const char *needle, size_t k)
{
    size_t i;
    for (i = 0; hay && i + k <= n; i++)
        if (memcmp((const char *)hay + i, needle, k) == 0) return 1;
    return 0;
}

/* Issue 31 item 5: custom (freeform) tools on Chat Completions, as the Responses dialect
 * takes them: accepted (not 400 "must be 'function'"), offered to Cursor as a function with
 * one string "input" (the grammar in the description), a call to one answered as
 * {"type":"custom","custom":{name, input}} (the raw text) in the message and in the stream's
 * delta, and such calls accepted back in the history. */
static void test_custom_tools(void)
{
    static const char body[] =
        "{\"model\":\"gpt-5\",\"messages\":["
        "{\"role\":\"user\",\"content\":\"patch it\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
        "\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\",\"input\":\"*** Begin Patch\\n"
        "*** End Patch\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"Done!\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
        "{\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\",\"description\":\"Edit "
        "files.\",\"format\":{\"type\":\"grammar\",\"grammar\":{\"syntax\":\"lark\","
        "\"definition\":\"start: PATCH\"}}}},"
        "{\"type\":\"custom\",\"custom\":{\"name\":\"free\"}}]}";
    coai_request q;
    coai_error e;
    coai_reply r;
    sink s;
    coai_msg m;
    const cJSON *in;
    coai_buf pb = { 0 };
    memset(&e, 0, sizeof e);
    CHECK(coai_chat_request_parse(&q, body, strlen(body), &e) == 0);
    CHECKF(q.tool_count == 3, "%s", e.message);
    if (q.tool_count != 3) { coai_request_free(&q); return; }
    CHECK(!q.tools[0].freeform && q.tools[1].freeform && q.tools[2].freeform);
    CHECK(coai_str_eq(q.tools[1].name, "apply_patch") && coai_str_eq(q.tools[2].name, "free"));
    CHECK(q.tools[1].description.len > 12
          && !memcmp(q.tools[1].description.ptr, "Edit files.\n\n", 13)
          && has_bytes(q.tools[1].description.ptr, q.tools[1].description.len,
                    "lark grammar:\nstart: PATCH", 26));
    in = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
        q.tools[2].parameters, "properties"), "input");
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(in, "type"))
          && !strcmp(cJSON_GetObjectItemCaseSensitive(in, "type")->valuestring, "string"));
    {   /* tool_choice naming a custom tool: only that tool is offered */
        static const char tc[] = "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":"
            "\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"custom\",\"custom\":"
            "{\"name\":\"apply_patch\"}}],\"tool_choice\":{\"type\":\"custom\",\"custom\":"
            "{\"name\":\"apply_patch\"}}}";
        coai_request c;
        CHECK(coai_chat_request_parse(&c, tc, strlen(tc), &e) == 0);
        CHECK(c.tool_choice == COAI_TOOL_CHOICE_TOOL && c.tool_count == 1
              && coai_str_eq(c.tools[0].name, "apply_patch") && c.tools[0].freeform);
        coai_request_free(&c);
    }
    /* the history: the custom call's input is its arguments */
    CHECK(q.message_count == 3 && q.messages[1].call_count == 1
          && coai_str_eq(q.messages[1].calls[0].name, "apply_patch")
          && coai_str_eq(q.messages[1].calls[0].args, "*** Begin Patch\n*** End Patch")
          && coai_str_eq(q.messages[2].tool_call_id, "call_1"));
    CHECK(coai_prompt_build(&pb, cJSON_GetObjectItemCaseSensitive(q.root_, "messages")) == 0);
    CHECK(pb.data && has_bytes(pb.data, pb.len, "[Called tool: apply_patch(*** Begin Patch\n*** "
                            "End Patch)]", 48));
    coai_buf_free(&pb);
    /* a bad custom tool: its object missing, a name missing, a format not an object */
    {
        static const char *const bad[][2] = {
            { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"custom\"}]}",
              "tools[0].custom" },
            { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"custom\",\"custom\":"
              "{}}]}", "tools[0].custom.name" },
            { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"custom\",\"custom\":"
              "{\"name\":\"x\",\"format\":3}}]}", "tools[0].custom.format" },
            { "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"custom\","
              "\"custom\":{\"name\":\"x\",\"input\":3}}]}]}",
              "messages[0].tool_calls[0].custom.input" },
            { "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"web\"}]}",
              "tools[0].type" } };
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            coai_request b;
            memset(&e, 0, sizeof e);
            CHECKF(coai_chat_request_parse(&b, bad[i][0], strlen(bad[i][0]), &e)
                   == COAI_ERR_INVALID && !strcmp(e.param, bad[i][1]),
                   "%zu: %s", i, e.param);
            coai_request_free(&b);
        }
    }
    /* Cursor calls the custom tool (an MCP call with {"input": ...}): non-stream message */
    reply_setup(&r, &s, 0, 0, q.tools, q.tool_count);
    m = msg_kind(COAI_MSG_EXEC);
    m.exec.kind = COAI_EXEC_MCP;
    m.exec.id = 2;
    m.exec.exec_id = coai_str_c("exec-mcp-0002");
    m.exec.tool_name = coai_str_c("apply_patch");
    m.exec.tool_call_id = coai_str_c("toolu_01P");
    m.exec.args_json = coai_str_c("{\"input\":\"*** Begin Patch\\n\\\"q\\\"\"}");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    {
        static const char w[] = "\"tool_calls\":[{\"id\":\"sess_030303030303__call_toolu01P\","
            "\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\",\"input\":\"*** Begin Patch"
            "\\n\\\"q\\\"\"}}]";
        CHECKF(r.out.data && has_bytes(r.out.data, r.out.len, w, strlen(w)), "%.*s",
               (int)r.out.len, r.out.data ? (const char *)r.out.data : "");
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);
    /* the same streamed: the delta's tool call is the custom shape; a function tool's stays */
    reply_setup(&r, &s, 1, 0, q.tools, q.tool_count);
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    {
        static const char w[] = "{\"tool_calls\":[{\"index\":0,\"id\":\"sess_030303030303__call_"
            "toolu01P\",\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\",\"input\":\"*** "
            "Begin Patch\\n\\\"q\\\"\"}}]}";
        CHECKF(r.out.data && has_bytes(r.out.data, r.out.len, w, strlen(w)), "%.*s",
               (int)r.out.len, r.out.data ? (const char *)r.out.data : "");
    }
    coai_reply_free(&r);
    coai_buf_free(&s.all);
    reply_setup(&r, &s, 1, 0, q.tools, q.tool_count);
    m.exec.tool_name = coai_str_c("get_weather");
    m.exec.args_json = coai_str_c("{\"input\":\"x\"}");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(r.out.data && has_bytes(r.out.data, r.out.len, "\"type\":\"function\",\"function\":{\"name"
                               "\":\"get_weather\",\"arguments\":\"{\\\"input\\\":\\\"x\\\"}\"}", 78));
    coai_reply_free(&r);
    coai_buf_free(&s.all);
    coai_request_free(&q);
}

int main(void)
{
    test_turn_usage();
    test_validation();
    test_request_fields();
    test_prompt_vectors();
    test_exec_map();
    test_sse_text();
    test_sse_usage();
    test_custom_tools();
    test_sse_tool_call();
    test_non_stream();
    test_commit_errors();
    test_utf8();
    test_kv();
    test_error_mapping();
    test_error_kind();
    test_models();
    TEST_END();
}
