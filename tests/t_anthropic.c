/* t_anthropic.c - the Anthropic Messages dialect on the neutral core: request parsing into
 * coai_request, the §11.1 prompt of a Claude Code conversation, the writer (stream and
 * not, thinking, tool_use, errors), usage, model names, and the dialect-neutral exec
 * mapping rules (names ignoring case and separators, members the schema allows). */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>

typedef struct sink {
    int count;
} sink;

static int sink_send(void *user, const unsigned char *msg, size_t n)
{
    (void)msg;
    (void)n;
    ((sink *)user)->count++;
    return 0;
}

static int parse(coai_request *q, const char *body, coai_error *e)
{
    return coai_request_parse(q, COAI_DIALECT_ANTHROPIC, body, strlen(body), e);
}

/* ---- requests ------------------------------------------------------------------------- */

static void test_request(void)
{
    coai_request q;
    coai_error e;
    const char *claude =
        "{\"model\":\"claude-sonnet-4-5-20250929\",\"max_tokens\":32000,\"stream\":true,"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are Claude Code.\","
        "\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"Be brief.\"}],"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Read a.txt\"}]},"
        "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"env: linux\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\","
        "\"signature\":\"sig\"},{\"type\":\"redacted_thinking\",\"data\":\"xx\"},"
        "{\"type\":\"text\",\"text\":\"Reading.\"},{\"type\":\"tool_use\","
        "\"id\":\"sess_abc123__call_x1\",\"name\":\"Read\",\"input\":{\"file_path\":\"/w/a.txt\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
        "\"sess_abc123__call_x1\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"},"
        "{\"type\":\"tool_reference\",\"tool_name\":\"X\"}]},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"content\":\"boom\",\"is_error\":true},"
        "{\"type\":\"text\",\"text\":\"go on\",\"cache_control\":{\"type\":\"ephemeral\"}}]}],"
        "\"tools\":[{\"name\":\"Bash\",\"description\":\"run\",\"input_schema\":{\"type\":"
        "\"object\",\"properties\":{\"command\":{}}}},{\"name\":\"Later\",\"defer_loading\":true,"
        "\"input_schema\":{\"type\":\"object\"}},{\"type\":\"web_search_20250305\",\"name\":"
        "\"web_search\"},{\"name\":\"mcp__srv__do_it\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"auto\"},\"thinking\":{\"type\":\"adaptive\"},"
        "\"context_management\":{\"edits\":[]},\"output_config\":{\"effort\":\"high\"},"
        "\"metadata\":{\"user_id\":\"u\"},\"stop_sequences\":[\"END\"],\"temperature\":1}";
    const char *want =
        "You are Claude Code.\nBe brief.\nenv: linux\n\nUser: Read a.txt\n\n"
        "Assistant: Reading.\n[Called tool: Read({\"file_path\":\"/w/a.txt\"})]\n\n"
        "[Tool result for sess_abc123__call_x1]: hello\n\n"
        "[Tool result for t2 (error)]: boom\n\nUser: go on\n\n"
        "\nBased on the tool results above, please continue your response:";
    coai_run_params p;
    coai_reply_opts o;
    memset(&p, 0, sizeof p);
    memset(&o, 0, sizeof o);
    CHECKF(parse(&q, claude, &e) == 0, "%s", e.message);
    CHECK(q.dialect == COAI_DIALECT_ANTHROPIC && q.stream == 1 && q.max_tokens == 32000);
    CHECK(coai_str_eq(q.model, "claude-sonnet-4-5-20250929"));
    CHECK_MEM(q.prompt.data, q.prompt.len, want, strlen(want));
    CHECK(q.tool_count == 2 && coai_str_eq(q.tools[0].name, "Bash")
          && coai_str_eq(q.tools[1].name, "mcp__srv__do_it"));
    CHECK(q.thinking == 1 && q.stop_count == 1 && coai_str_eq(q.stop[0], "END"));
    CHECK(q.tool_choice == COAI_TOOL_CHOICE_AUTO && q.has_tool_messages == 1);
    CHECK(coai_str_eq(q.session_id, "abc123"));
    /* the neutral conversation: system, system, user, assistant, tool, tool, user */
    CHECK(q.message_count == 7);
    if (q.message_count == 7) {
        CHECK(q.messages[3].role == COAI_ROLE_ASSISTANT && q.messages[3].part_count == 2
              && q.messages[3].parts[0].kind == COAI_PART_THINKING
              && coai_str_eq(q.messages[3].parts[0].text, "hmm")
              && q.messages[3].call_count == 1);
        CHECK(q.messages[4].role == COAI_ROLE_TOOL && !q.messages[4].is_error
              && q.messages[4].part_count == 1);
        CHECK(q.messages[5].role == COAI_ROLE_TOOL && q.messages[5].is_error);
        CHECK(q.messages[6].role == COAI_ROLE_USER && q.messages[6].part_count == 1);
    }
    coai_request_params(&q, &p);
    CHECK(p.tool_count == 2 && p.prompt.len == q.prompt.len);
    coai_reply_opts_from_request(&o, &q);
    CHECK(o.dialect == COAI_DIALECT_ANTHROPIC && o.stream == 1);
    CHECK(coai_request_input_tokens(&q) == (int64_t)((q.prompt.len + 3) / 4));   /* ASCII */
    coai_request_free(&q);

    /* a plain string system/content, tool_choice variants */
    CHECK(parse(&q, "{\"model\":\"m\",\"max_tokens\":1,\"system\":\"S\",\"messages\":[{\"role\":"
                "\"user\",\"content\":\"hi\"}],\"tool_choice\":{\"type\":\"none\"},\"tools\":[{"
                "\"name\":\"a\",\"input_schema\":{}}]}", &e) == 0);
    CHECK_MEM(q.prompt.data, q.prompt.len, "S\n\nUser: hi", 11);
    CHECK(q.tool_choice == COAI_TOOL_CHOICE_NONE && q.tools_disabled && q.tool_count == 0);
    coai_request_free(&q);
    CHECK(parse(&q, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
                "\"hi\"}],\"tools\":[{\"name\":\"b\",\"input_schema\":{}},{\"name\":\"a\","
                "\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"a\"}}",
                &e) == 0);
    CHECK(q.tool_choice == COAI_TOOL_CHOICE_TOOL && coai_str_eq(q.tool_choice_name, "a")
          && q.tool_count == 1 && coai_str_eq(q.tools[0].name, "a"));
    coai_request_free(&q);
    /* a name that is not among the tools: refused, as in every dialect (it used to reach
     * the prompt as "call the tool ..." with another tool's name) */
    CHECK(parse(&q, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
                "\"hi\"}],\"tools\":[{\"name\":\"b\",\"input_schema\":{}}],\"tool_choice\":"
                "{\"type\":\"tool\",\"name\":\"a\"}}", &e) == COAI_ERR_INVALID
          && e.status == 400 && e.param && strcmp(e.param, "tool_choice") == 0);
    CHECK(parse(&q, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
                "\"hi\"}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"a\"}}", &e)
          == COAI_ERR_INVALID && e.status == 400);
    /* count_tokens: no max_tokens needed, never a stream */
    {
        const char *cb = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                         "\"content\":\"12345678\"}]}";
        CHECK(coai_anthropic_count_parse(&q, cb, strlen(cb), &e) == 0);
    }
    CHECK(q.stream == 0 && coai_request_input_tokens(&q) == 4);  /* "User: 12345678" = 14 */
    coai_request_free(&q);
}

static void test_request_errors(void)
{
    static const struct { const char *body; int rc; const char *msg; } cases[] = {
        { "", COAI_ERR_JSON, "parse" },
        { "[1]", COAI_ERR_INVALID, "JSON object" },
        { "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          COAI_ERR_INVALID, "model: Field required" },
        { "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          COAI_ERR_INVALID, "max_tokens" },
        { "{\"model\":\"m\",\"max_tokens\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          COAI_ERR_INVALID, "max_tokens" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}", COAI_ERR_INVALID, "messages" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
          COAI_ERR_INVALID, "messages.0.role" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
          COAI_ERR_INVALID, "messages.0.content" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"text\"}]}]}", COAI_ERR_INVALID, "messages.0.content.0.text: Field required" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"audio\"}]}]}", COAI_ERR_INVALID, "unsupported content block type 'audio'" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":{}}]}]}", COAI_ERR_INVALID,
          "assistant messages" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"tool_result\",\"tool_use_id\":\"a\",\"is_error\":\"yes\"}]}]}", COAI_ERR_INVALID,
          "is_error" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"image\",\"source\":{\"type\":\"base64\"}}]}]}", COAI_ERR_INVALID,
          "messages.0.content.0.source" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
          "\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}]}", COAI_ERR_INVALID, "tools.0.name" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
          "\"tools\":[{\"name\":\"a\"}]}", COAI_ERR_INVALID, "tools.0.input_schema" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
          "\"tool_choice\":{\"type\":\"sometimes\"}}", COAI_ERR_INVALID, "tool_choice" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
          "\"thinking\":{\"type\":\"maybe\"}}", COAI_ERR_INVALID, "thinking.type" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"system\":[{\"type\":\"image\"}],\"messages\":[{"
          "\"role\":\"user\",\"content\":\"x\"}]}", COAI_ERR_INVALID, "system.0" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
          "\"stop_sequences\":[1]}", COAI_ERR_INVALID, "stop_sequences.0" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"search_result\",\"source\":\"s\",\"content\":[]}]}]}", COAI_ERR_INVALID,
          "messages.0.content.0: a search_result needs string source and title" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
          "\"tool_result\",\"tool_use_id\":\"a\",\"content\":[{\"type\":\"search_result\","
          "\"source\":\"s\",\"title\":\"t\",\"content\":[{\"type\":\"image\"}]}]}]}]}",
          COAI_ERR_INVALID, "only text blocks" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]}",
          COAI_ERR_INVALID, "u0000" },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        coai_request q;
        coai_error e;
        coai_buf b = { 0 };
        cJSON *j;
        int rc = parse(&q, cases[i].body, &e);
        CHECKF(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc, e.message);
        CHECKF(e.status == 400 && strstr(e.message, cases[i].msg), "case %zu: %d %s", i,
               e.status, e.message);
        /* written the Anthropic way */
        CHECK(coai_error_write_as(&b, &e, COAI_DIALECT_ANTHROPIC) == 0);
        j = cJSON_ParseWithLength((const char *)b.data, b.len);
        CHECKF(j && strcmp(cJSON_GetObjectItem(j, "type")->valuestring, "error") == 0
               && strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "type")->valuestring,
                         "invalid_request_error") == 0, "case %zu: %s", i, b.data);
        cJSON_Delete(j);
        coai_buf_free(&b);
        coai_request_free(&q);
    }
}

/* a 3x2 PNG (images are decoded by the core, so the test needs a real one) */
#define PNG3X2 "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAEUlEQVR4nGP4z8AAQTD6PwMAPtUF+6guL00AAAAASUVORK5CYII="

/* The OpenAI dialect fills the same neutral request. */
static void test_openai_neutral(void)
{
    coai_request q;
    coai_error e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"D\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
        "\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64," PNG3X2 "\"}},{\"type\":"
        "\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
        "[{\"id\":\"sess_S1__call_c\",\"type\":\"function\",\"function\":{\"name\":\"read\","
        "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"sess_S1__call_c\","
        "\"content\":\"r\"}],\"tool_choice\":\"required\"}";
    CHECK(coai_request_parse(&q, COAI_DIALECT_OPENAI_CHAT, body, strlen(body), &e) == 0);
    CHECK(q.dialect == COAI_DIALECT_OPENAI_CHAT && q.message_count == 4 && q.thinking == -1);
    if (q.message_count == 4) {
        CHECK(q.messages[0].role == COAI_ROLE_SYSTEM);
        CHECK(q.messages[1].role == COAI_ROLE_USER && q.messages[1].part_count == 3
              && q.messages[1].parts[1].kind == COAI_PART_IMAGE
              && coai_str_eq(q.messages[1].parts[1].url, "data:image/png;base64," PNG3X2));
        /* the image is decoded for the run (surface: a real PNG; "AAAA" would be a 400) */
        CHECK(q.image_count == 1 && q.images[0].width == 3 && q.images[0].height == 2);
        CHECK(q.messages[2].role == COAI_ROLE_ASSISTANT && q.messages[2].call_count == 1
              && coai_str_eq(q.messages[2].calls[0].name, "read")
              && coai_str_eq(q.messages[2].calls[0].args, "{}"));
        CHECK(q.messages[3].role == COAI_ROLE_TOOL
              && coai_str_eq(q.messages[3].tool_call_id, "sess_S1__call_c"));
    }
    CHECK(q.tool_choice == COAI_TOOL_CHOICE_ANY && coai_str_eq(q.session_id, "S1"));
    /* images are not text: the prompt joins the two text parts */
    CHECK(strstr((const char *)q.prompt.data, "User: a\nb") != NULL);
    coai_request_free(&q);
    /* an unknown dialect is refused, not crashed on */
    CHECK(coai_request_parse(&q, (coai_dialect)7, body, strlen(body), &e) == COAI_ERR_INVALID
          && e.status == 404);
    coai_request_free(&q);
}

/* ---- the writer ----------------------------------------------------------------------- */

static void setup(coai_reply *r, sink *s, int stream, const coai_tool *tools, size_t n)
{
    coai_reply_opts o;
    memset(&o, 0, sizeof o);
    memset(s, 0, sizeof *s);
    o.dialect = COAI_DIALECT_ANTHROPIC;
    o.stream = stream;
    o.completion_id = coai_str_c("msg_0123456789abcdef01234567");
    o.created = 1768474032;
    o.model = coai_str_c("claude-sonnet-4-5");
    o.tools = tools;
    o.tool_count = n;
    o.session_id = coai_str_c("030303030303");
    o.prompt = coai_str_c("User: Say hello");         /* 15 units -> 4 tokens */
    o.send = sink_send;
    o.send_user = s;
    CHECK(coai_reply_init(r, &o) == 0);
}

static coai_msg text_msg(coai_msg_kind k, const char *t)
{
    coai_msg m;
    memset(&m, 0, sizeof m);
    m.kind = k;
    m.text = coai_str_c(t);
    return m;
}

/* "event: X\ndata: {...}\n\n" blocks -> the JSON of each, checking that every event name
 * matches its data's type. Returns the count. */
static int events(const coai_buf *b, cJSON **out, int cap)
{
    const char *p = (const char *)b->data, *end = p + b->len;
    int n = 0;
    while (p < end) {
        const char *ev = strstr(p, "event: "), *dl, *nl, *stop;
        char name[64];
        cJSON *j;
        if (ev != p) { CHECKF(0, "junk before event: %.40s", p); return n; }
        nl = strchr(ev, '\n');
        snprintf(name, sizeof name, "%.*s", (int)(nl - ev - 7), ev + 7);
        dl = nl + 1;
        CHECK(strncmp(dl, "data: ", 6) == 0);
        stop = strstr(dl, "\n\n");
        if (!stop) { CHECKF(0, "unterminated event"); return n; }
        j = cJSON_ParseWithLength(dl + 6, (size_t)(stop - dl - 6));
        CHECKF(j != NULL, "bad JSON in %s", name);
        CHECKF(j && strcmp(cJSON_GetObjectItem(j, "type")->valuestring, name) == 0, "%s", name);
        if (n < cap) out[n] = j;
        else cJSON_Delete(j);
        n++;
        p = stop + 2;
    }
    return n;
}

static const char *ev_type(cJSON *j) { return cJSON_GetObjectItem(j, "type")->valuestring; }

static void test_stream(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    cJSON *ev[32];
    int n, i;
    static const char *const want[] = {
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop" };
    setup(&r, &s, 1, NULL, 0);
    CHECK(coai_reply_started(&r) == 0 && r.out.len == 0);
    CHECK(coai_reply_keepalive(&r) == COAI_OK);          /* commits: message_start + ping */
    m = text_msg(COAI_MSG_THINKING, "Let me ");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = text_msg(COAI_MSG_THINKING, "think.");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = text_msg(COAI_MSG_TEXT, "Hello \xc3");            /* a character split across deltas */
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = text_msg(COAI_MSG_TEXT, "\xa9!");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_TOKENS;
    m.value = 7;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m.kind = COAI_MSG_TURN_ENDED;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(coai_reply_status(&r) == 200);
    n = events(&r.out, ev, 32);
    CHECKF(n == 13, "%d events: %s", n, r.out.data);
    for (i = 0; i < n && i < 13; i++) CHECKF(strcmp(ev_type(ev[i]), want[i]) == 0, "%d", i);
    if (n == 13) {
        cJSON *msg = cJSON_GetObjectItem(ev[0], "message"), *u, *d;
        CHECK(strcmp(cJSON_GetObjectItem(msg, "id")->valuestring,
                     "msg_0123456789abcdef01234567") == 0);
        CHECK(strcmp(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant") == 0);
        CHECK(strcmp(cJSON_GetObjectItem(msg, "model")->valuestring, "claude-sonnet-4-5") == 0);
        u = cJSON_GetObjectItem(msg, "usage");
        CHECK(cJSON_GetObjectItem(u, "input_tokens")->valueint == 4
              && cJSON_GetObjectItem(u, "output_tokens")->valueint == 0);
        d = cJSON_GetObjectItem(ev[2], "content_block");
        CHECK(strcmp(cJSON_GetObjectItem(d, "type")->valuestring, "thinking") == 0
              && cJSON_GetObjectItem(ev[2], "index")->valueint == 0);
        d = cJSON_GetObjectItem(ev[4], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "thinking")->valuestring, "think.") == 0);
        d = cJSON_GetObjectItem(ev[5], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "type")->valuestring, "signature_delta") == 0
              && cJSON_GetObjectItem(d, "signature")->valuestring[0]);
        CHECK(cJSON_GetObjectItem(ev[7], "index")->valueint == 1);
        d = cJSON_GetObjectItem(ev[8], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "type")->valuestring, "text_delta") == 0
              && strcmp(cJSON_GetObjectItem(d, "text")->valuestring, "Hello ") == 0);
        d = cJSON_GetObjectItem(ev[9], "delta");          /* the split character, whole */
        CHECK(strcmp(cJSON_GetObjectItem(d, "text")->valuestring, "\xc3\xa9!") == 0);
        d = cJSON_GetObjectItem(ev[11], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "stop_reason")->valuestring, "end_turn") == 0
              && cJSON_IsNull(cJSON_GetObjectItem(d, "stop_sequence")));
        u = cJSON_GetObjectItem(ev[11], "usage");
        CHECK(cJSON_GetObjectItem(u, "output_tokens")->valueint == 7
              && cJSON_GetObjectItem(u, "input_tokens")->valueint == 4
              && cJSON_GetObjectItem(u, "cache_read_input_tokens")->valueint == 0);
    }
    for (i = 0; i < n && i < 32; i++) cJSON_Delete(ev[i]);
    coai_reply_free(&r);
}

static void test_tool_use(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    coai_tool tools[2];
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"additionalProperties\":false,"
                             "\"properties\":{\"command\":{},\"description\":{},\"timeout\":{}}}");
    cJSON *ev[16], *j;
    int n, i;
    memset(tools, 0, sizeof tools);
    tools[0].name = coai_str_c("Read");
    tools[1].name = coai_str_c("Bash");
    tools[1].parameters = sch;
    setup(&r, &s, 1, tools, 2);
    m = text_msg(COAI_MSG_TEXT, "Running.");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_EXEC;
    m.exec.kind = COAI_EXEC_SHELL_STREAM;
    m.exec.id = 1;
    m.exec.exec_id = coai_str_c("exec-1");
    m.exec.command = coai_str_c("ls");
    m.exec.cwd = coai_str_c("/w");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(coai_reply_tool_called(&r));
    n = events(&r.out, ev, 16);
    CHECKF(n == 9, "%d: %s", n, r.out.data);
    if (n == 9) {
        cJSON *cb = cJSON_GetObjectItem(ev[4], "content_block"), *d, *in;
        CHECK(strcmp(ev_type(ev[4]), "content_block_start") == 0
              && cJSON_GetObjectItem(ev[4], "index")->valueint == 1);
        CHECK(strcmp(cJSON_GetObjectItem(cb, "type")->valuestring, "tool_use") == 0
              && strcmp(cJSON_GetObjectItem(cb, "name")->valuestring, "Bash") == 0
              && strcmp(cJSON_GetObjectItem(cb, "id")->valuestring,
                        "sess_030303030303__call_exec1") == 0);
        d = cJSON_GetObjectItem(ev[5], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "type")->valuestring, "input_json_delta") == 0);
        /* Bash (any case) gets the shell exec; cwd is not in its closed schema */
        in = cJSON_Parse(cJSON_GetObjectItem(d, "partial_json")->valuestring);
        CHECK(in && cJSON_GetArraySize(in) == 2
              && strcmp(cJSON_GetObjectItem(in, "command")->valuestring, "ls") == 0
              && cJSON_GetObjectItem(in, "description") && !cJSON_GetObjectItem(in, "cwd"));
        cJSON_Delete(in);
        d = cJSON_GetObjectItem(ev[7], "delta");
        CHECK(strcmp(cJSON_GetObjectItem(d, "stop_reason")->valuestring, "tool_use") == 0);
    }
    for (i = 0; i < n && i < 16; i++) cJSON_Delete(ev[i]);
    coai_reply_free(&r);

    /* non-streaming: one message with text and tool_use, input an object */
    setup(&r, &s, 0, tools, 2);
    m.exec.kind = COAI_EXEC_READ;
    m.exec.path = coai_str_c("/w/a.txt");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    j = cJSON_ParseWithLength((const char *)r.out.data, r.out.len);
    CHECKF(j != NULL, "%s", r.out.data);
    if (j) {
        cJSON *c = cJSON_GetObjectItem(j, "content"), *t = cJSON_GetArrayItem(c, 0);
        CHECK(strcmp(cJSON_GetObjectItem(j, "type")->valuestring, "message") == 0);
        CHECK(strcmp(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "tool_use") == 0);
        CHECK(cJSON_GetArraySize(c) == 1 && strcmp(ev_type(t), "tool_use") == 0
              && strcmp(cJSON_GetObjectItem(t, "name")->valuestring, "Read") == 0);
        /* Read has no schema: the spec name "filePath" */
        CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "input"), "filePath")->valuestring,
                     "/w/a.txt") == 0);
    }
    cJSON_Delete(j);
    coai_reply_free(&r);
    cJSON_Delete(sch);
}

static void test_non_stream_and_errors(void)
{
    coai_reply r;
    sink s;
    coai_msg m;
    coai_status st;
    coai_error e;
    coai_buf h = { 0 };
    cJSON *j;
    setup(&r, &s, 0, NULL, 0);
    m = text_msg(COAI_MSG_THINKING, "hm");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m = text_msg(COAI_MSG_TEXT, "Hi");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    CHECK(coai_reply_keepalive(&r) == COAI_OK && r.out.len == 0);   /* nothing before the end */
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_CHECKPOINT;
    m.value = 1000;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    m.kind = COAI_MSG_TURN_ENDED;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    j = cJSON_ParseWithLength((const char *)r.out.data, r.out.len);
    CHECKF(j != NULL, "%s", r.out.data);
    if (j) {
        cJSON *c = cJSON_GetObjectItem(j, "content"), *u = cJSON_GetObjectItem(j, "usage");
        CHECK(cJSON_GetArraySize(c) == 2);
        CHECK(strcmp(ev_type(cJSON_GetArrayItem(c, 0)), "thinking") == 0
              && cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "signature"));
        CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 1), "text")->valuestring, "Hi") == 0);
        CHECK(strcmp(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "end_turn") == 0);
        /* checkpoint 1000 - 2 output tokens (the estimate of "hm" + "Hi") */
        CHECK(cJSON_GetObjectItem(u, "input_tokens")->valueint == 999
              && cJSON_GetObjectItem(u, "output_tokens")->valueint == 1);
    }
    cJSON_Delete(j);
    coai_reply_free(&r);

    /* before the first byte: a status and an Anthropic error body */
    setup(&r, &s, 1, NULL, 0);
    memset(&st, 0, sizeof st);
    st.code = 14;
    CHECK(coai_reply_feed_status(&r, &st) == COAI_DONE);
    CHECK(coai_reply_status(&r) == 529);             /* overloaded upstream */
    CHECK(strstr((const char *)r.out.data, "\"type\":\"overloaded_error\"") != NULL);
    CHECK(coai_reply_head(&r, &h) == 0 && strstr((const char *)h.data, "application/json"));
    coai_buf_free(&h);
    coai_reply_free(&r);
    setup(&r, &s, 1, NULL, 0);
    st.code = 8;
    st.error = 10;                                     /* usage limit */
    CHECK(coai_reply_feed_status(&r, &st) == COAI_DONE);
    CHECK(coai_reply_status(&r) == 429 && r.error.no_retry);
    CHECK(strstr((const char *)r.out.data, "{\"type\":\"error\",\"error\":{\"type\":"
                 "\"rate_limit_error\",\"message\":\"You've hit your Cursor usage limit") != NULL);
    coai_reply_free(&r);
    /* after it: event: error */
    setup(&r, &s, 1, NULL, 0);
    m = text_msg(COAI_MSG_TEXT, "partial");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_OK);
    coai_error_set(&e, 502, "upstream_error", "upstream_error", NULL, "broken");
    CHECK(coai_reply_feed_error(&r, &e) == COAI_DONE);
    CHECK(coai_reply_status(&r) == 200);
    CHECK(strstr((const char *)r.out.data, "event: error\ndata: {\"type\":\"error\",\"error\":"
                 "{\"type\":\"api_error\",\"message\":\"broken\"}}\n\n") != NULL);
    CHECK(strstr((const char *)r.out.data, "message_stop") == NULL);
    coai_reply_free(&r);
    /* an empty answer is one empty text block */
    setup(&r, &s, 1, NULL, 0);
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_TURN_ENDED;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(strstr((const char *)r.out.data, "\"content_block\":{\"type\":\"text\",\"text\":\"\"}"));
    coai_reply_free(&r);
    /* statuses and types */
    coai_error_set(&e, 504, "server_error", "upstream_timeout", NULL, "slow");
    CHECK(coai_error_status_as(&e, COAI_DIALECT_ANTHROPIC) == 500);
    CHECK(coai_error_status_as(&e, COAI_DIALECT_OPENAI_CHAT) == 504);
    coai_error_set(&e, 413, "invalid_request_error", NULL, NULL, "big");
    coai_error_write_as(&h, &e, COAI_DIALECT_ANTHROPIC);
    CHECK(strcmp((const char *)h.data,
                 "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"big\"}}")
          == 0);
    coai_buf_free(&h);
}

/* cache tokens are inside input_tokens for the core, beside it for Anthropic */
static void test_usage_cache(void)
{
    coai_reply r;
    sink s;
    coai_usage u;
    coai_buf b = { 0 };
    setup(&r, &s, 0, NULL, 0);
    r.used_tokens_ = 1010;
    r.token_sum_ = 10;
    r.have_token_delta_ = 1;
    r.cache_read_ = 600;
    r.cache_write_ = 100;
    coai_reply_usage(&r, &u);
    CHECK(u.input_tokens == 1000 && u.output_tokens == 10 && u.cache_read_tokens == 600
          && u.cache_write_tokens == 100);
    coai__an_usage(&r, &b, 0);
    CHECK(strcmp((const char *)b.data, "{\"input_tokens\":300,\"cache_creation_input_tokens\":100,"
                 "\"cache_read_input_tokens\":600,\"output_tokens\":10}") == 0);
    r.cache_read_ = 5000;                             /* more than the input: not believed */
    coai_reply_usage(&r, &u);
    CHECK(u.cache_read_tokens == 0 && u.cache_write_tokens == 100);
    coai_buf_free(&b);
    coai_reply_free(&r);
}

/* ---- exec mapping rules shared by every dialect ---------------------------------------- */

static void test_exec_names(void)
{
    coai_tool t[4];
    coai_exec ex;
    coai_tool_call tc;
    cJSON *open_s = cJSON_Parse("{\"properties\":{\"command\":{}}}");
    memset(t, 0, sizeof t);
    memset(&ex, 0, sizeof ex);
    memset(&tc, 0, sizeof tc);
    t[0].name = coai_str_c("Run-Shell_Command");
    t[0].parameters = open_s;
    t[1].name = coai_str_c("READ_FILE");
    t[2].name = coai_str_c("mcp__srv__get_weather");
    t[3].name = coai_str_c("bash");
    ex.kind = COAI_EXEC_SHELL;
    ex.command = coai_str_c("pwd");
    ex.cwd = coai_str_c("/w");
    /* an exact "bash" wins over a name that only matches loosely */
    CHECK(coai_exec_map(&ex, t, 4, coai_str_c(""), &tc) == 1 && tc.tool == 3);
    /* without it, run_shell_command matches ignoring case and separators; its schema is
     * open (no additionalProperties: false), so the §8.2 members stay */
    CHECK(coai_exec_map(&ex, t, 3, coai_str_c(""), &tc) == 1 && tc.tool == 0);
    CHECKF(strcmp((const char *)tc.args.data, "{\"command\":\"pwd\",\"description\":\"Execute "
                  "shell command: pwd\",\"cwd\":\"/w\"}") == 0, "%s", tc.args.data);
    ex.kind = COAI_EXEC_READ;
    ex.path = coai_str_c("/a");
    CHECK(coai_exec_map(&ex, t, 3, coai_str_c(""), &tc) == 1 && tc.tool == 1);
    /* MCP tools pass through by name (exact, then loosely) with their arguments */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_MCP;
    ex.tool_name = coai_str_c("mcp__srv__get_weather");
    ex.args_json = coai_str_c("{\"city\":\"Oslo\"}");
    CHECK(coai_exec_map(&ex, t, 4, coai_str_c(""), &tc) == 1 && tc.tool == 2);
    CHECK(strcmp((const char *)tc.args.data, "{\"city\":\"Oslo\"}") == 0);
    ex.tool_name = coai_str_c("MCP__SRV__GET-WEATHER");
    CHECK(coai_exec_map(&ex, t, 4, coai_str_c(""), &tc) == 1 && tc.tool == 2);
    ex.tool_name = coai_str_c("mcp__srv__get_weather2");
    CHECK(coai_exec_map(&ex, t, 4, coai_str_c(""), &tc) == 0);
    coai_buf_free(&tc.args);
    cJSON_Delete(open_s);
}

/* Claude Code offers no LS/Grep/Glob: those execs become Bash commands in the Messages
 * dialect (and stay refused in OpenAI chat, whose mapping is unchanged). */
static void test_anthropic_exec(void)
{
    coai_tool t[2];
    coai_exec ex;
    coai_tool_call tc;
    cJSON *bash = cJSON_Parse("{\"type\":\"object\",\"additionalProperties\":false,"
                              "\"properties\":{\"command\":{},\"description\":{}}}");
    static const struct { int kind; const char *path, *pattern, *glob, *cmd; } cases[] = {
        { COAI_EXEC_LS, "/w/src", "", "", "ls -la -- '/w/src'" },
        { COAI_EXEC_LS, "", "", "", "ls -la -- '.'" },
        { COAI_EXEC_GREP, "/w", "TODO|FIXME", "", "grep -rnE -e 'TODO|FIXME' -- '/w'" },
        { COAI_EXEC_GREP, "", "it's", "*.c", "grep -rnE --include='*.c' -e 'it'\\''s' -- '.'" },
        { COAI_EXEC_GREP, "/w", "", "src/**/*.ts", "find '/w' -type f -name '*.ts'" },
        { COAI_EXEC_DELETE, "/w/old.txt", "", "", "wc -c < '/w/old.txt' && rm -- '/w/old.txt'" },
    };
    size_t i;
    memset(t, 0, sizeof t);
    memset(&tc, 0, sizeof tc);
    t[0].name = coai_str_c("Read");
    t[1].name = coai_str_c("Bash");
    t[1].parameters = bash;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j;
        memset(&ex, 0, sizeof ex);
        ex.kind = (coai_exec_kind)cases[i].kind;
        ex.path = coai_str_c(cases[i].path);
        ex.has_path = cases[i].path[0] != 0;
        ex.pattern = coai_str_c(cases[i].pattern);
        ex.glob = coai_str_c(cases[i].glob);
        CHECKF(coai_anthropic_exec_map(&ex, t, 2, coai_str_c("/proxy"), &tc) == 1 && tc.tool == 1,
               "case %zu", i);
        j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
        CHECKF(j && strcmp(cJSON_GetObjectItem(j, "command")->valuestring, cases[i].cmd) == 0
               && cJSON_GetObjectItem(j, "description") && cJSON_GetArraySize(j) == 2,
               "case %zu: %s", i, tc.args.data);
        cJSON_Delete(j);
        /* the OpenAI mapping is unchanged: refused */
        CHECK(coai_exec_map(&ex, t, 2, coai_str_c("/proxy"), &tc) == 0);
    }
    /* a dedicated tool still wins; no shell tool: refused */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_READ;
    ex.path = coai_str_c("/a");
    CHECK(coai_anthropic_exec_map(&ex, t, 2, coai_str_c(""), &tc) == 1 && tc.tool == 0);
    ex.kind = COAI_EXEC_LS;
    CHECK(coai_anthropic_exec_map(&ex, t, 1, coai_str_c(""), &tc) == 0);
    coai_buf_free(&tc.args);
    cJSON_Delete(bash);
}

/* ---- model names ---------------------------------------------------------------------- */

static void test_models(void)
{
    const char *list =
        "{\"models\":[{\"modelId\":\"default\",\"displayModelId\":\"auto\"},"
        "{\"modelId\":\"claude-4.5-sonnet\",\"displayModelId\":\"sonnet-4.5\"},"
        "{\"modelId\":\"claude-4.5-sonnet-thinking\",\"displayModelId\":\"sonnet-4.5-thinking\"},"
        "{\"modelId\":\"claude-4-sonnet\",\"displayModelId\":\"sonnet-4\"},"
        "{\"modelId\":\"claude-4.1-opus\",\"displayModelId\":\"opus-4.1\"},"
        "{\"modelId\":\"claude-4.5-opus-high\",\"displayModelId\":\"opus-4.5-high\"},"
        "{\"modelId\":\"gpt-5.1\"}]}";
    static const struct { const char *req; int thinking; const char *want; } cases[] = {
        { "claude-sonnet-4-5-20250929", 0, "claude-4.5-sonnet" },
        { "claude-sonnet-4-5", 1, "claude-4.5-sonnet-thinking" },
        { "claude-sonnet-4-20250514", 0, "claude-4-sonnet" },
        { "claude-3-7-sonnet-latest", 0, "claude-4.5-sonnet" },   /* no 3.7: the newest */
        { "claude-opus-4-1-20250805", 0, "claude-4.1-opus" },
        { "claude-opus-4-5", 0, "claude-4.5-opus-high" },
        { "claude-haiku-4-5-20251001", 0, "claude-4.5-sonnet" },   /* no haiku: a sonnet */
        { "Claude-Sonnet-4.5", 0, "claude-4.5-sonnet" },
        { "sonnet", 0, "claude-4.5-sonnet" },
        { "gpt-5.1", 0, NULL },
        { "claude-instant-1", 0, NULL },
        { "my-sonnet-model", 0, NULL },
    };
    coai_models m;
    coai_buf b = { 0 };
    size_t i;
    cJSON *j;
    CHECK(coai_models_parse(&m, list, strlen(list)) == 0);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        coai_str out = { "", 0 };
        int rc = coai_models_resolve_claude(&m, coai_str_c(cases[i].req), cases[i].thinking, &out);
        CHECKF(rc == (cases[i].want != NULL) && (!cases[i].want || coai_str_eq(out, cases[i].want)),
               "%s -> %d %.*s", cases[i].req, rc, (int)out.len, out.ptr);
    }
    CHECK(coai_models_write_anthropic(&b, &m, 1768474032) == 0);
    j = cJSON_ParseWithLength((const char *)b.data, b.len);
    CHECKF(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")) == 7, "%s", b.data);
    if (j) {
        cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 1);
        CHECK(strcmp(cJSON_GetObjectItem(e, "type")->valuestring, "model") == 0
              && strcmp(cJSON_GetObjectItem(e, "id")->valuestring, "sonnet-4.5") == 0
              && strcmp(cJSON_GetObjectItem(e, "created_at")->valuestring,
                        "2026-01-15T10:47:12Z") == 0);
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j, "has_more"))
              && strcmp(cJSON_GetObjectItem(j, "first_id")->valuestring, "auto") == 0
              && strcmp(cJSON_GetObjectItem(j, "last_id")->valuestring, "gpt-5.1") == 0);
    }
    cJSON_Delete(j);
    /* one model (GET /v1/models/{model}): the list's object for it, alone */
    {
        coai_buf one = { 0 }, list = { 0 };
        cJSON *lj, *oj;
        CHECK(coai_models_write_anthropic_model(&one, &m.items[1], 1768474032) == 0);
        CHECK(coai_models_write_anthropic(&list, &m, 1768474032) == 0);
        oj = cJSON_ParseWithLength((const char *)one.data, one.len);
        lj = cJSON_ParseWithLength((const char *)list.data, list.len);
        CHECKF(oj && lj && cJSON_Compare(oj, cJSON_GetArrayItem(cJSON_GetObjectItem(lj, "data"),
                                                                 1), 1), "%s", one.data);
        cJSON_Delete(oj);
        cJSON_Delete(lj);
        coai_buf_free(&one);
        coai_buf_free(&list);
    }
    coai_buf_free(&b);
    coai_models_free(&m);
    /* an empty list */
    CHECK(coai_models_write_anthropic(&b, NULL, 0) == 0);
    CHECK(strcmp((const char *)b.data, "{\"data\":[],\"has_more\":false,\"first_id\":null,"
                 "\"last_id\":null}") == 0);
    coai_buf_free(&b);
}

/* search_result blocks (a search tool's result, or a user's block): their text reaches
 * Cursor as "title (source)" and the texts, a line each */
static void test_search_result(void)
{
    coai_request q;
    coai_error e;
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":100,\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"search_result\",\"source\":"
        "\"https://docs.example/a\",\"title\":\"Doc A\",\"content\":[{\"type\":\"text\","
        "\"text\":\"alpha\"}]},{\"type\":\"text\",\"text\":\"Search.\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
        "\"name\":\"find\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
        "\"content\":[{\"type\":\"search_result\",\"source\":\"kb://7\",\"title\":\"Seven\","
        "\"content\":[{\"type\":\"text\",\"text\":\"line one\"},{\"type\":\"text\","
        "\"text\":\"line two\"}],\"citations\":{\"enabled\":true}},"
        "{\"type\":\"tool_reference\",\"tool_name\":\"X\"}]}]}]}";
    CHECKF(parse(&q, body, &e) == 0, "%s", e.message);
    CHECKF(q.prompt.data && strstr((const char *)q.prompt.data, "User: Doc A "
           "(https://docs.example/a)\nalpha"), "%.*s", (int)q.prompt.len,
           (const char *)q.prompt.data);
    CHECKF(q.prompt.data && strstr((const char *)q.prompt.data, "[Tool result for t1]: Seven "
           "(kb://7)\nline one\nline two"), "%.*s", (int)q.prompt.len,
           (const char *)q.prompt.data);
    coai_request_free(&q);
}

/* issue 29: the README's rule for document blocks, held to: a text source is inlined as text
 * (in a message and in a tool_result), any other source is a 400 naming the block */
static void test_document(void)
{
    coai_request q;
    coai_error e;
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":100,\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"text\","
        "\"media_type\":\"text/plain\",\"data\":\"DOC-BODY-1\"},\"title\":\"t\"},"
        "{\"type\":\"text\",\"text\":\"Summarise.\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
        "\"name\":\"fetch\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
        "\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"text\",\"data\":"
        "\"DOC-BODY-2\"}}]}]}]}";
    CHECKF(parse(&q, body, &e) == 0, "%s", e.message);
    CHECKF(q.prompt.data && strstr((const char *)q.prompt.data, "User: DOC-BODY-1\nSummarise.")
           && strstr((const char *)q.prompt.data, "[Tool result for t1]: DOC-BODY-2"), "%.*s",
           (int)q.prompt.len, (const char *)q.prompt.data);
    coai_request_free(&q);
    CHECK(parse(&q, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
                "\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"document\","
                "\"source\":{\"type\":\"base64\",\"media_type\":\"application/pdf\",\"data\":"
                "\"JVBERi0=\"}}]}]}", &e) == COAI_ERR_INVALID && e.status == 400
          && strstr(e.message, "messages.0.content.1: only documents with a text source"));
}

/* issue 29: an image error names the Anthropic block it came from (a tool_result's image was
 * "messages[2].content[0]" - the neutral message, not the client's message 1) */
static void test_image_paths(void)
{
    static const struct { const char *body, *param; } c[] = {
        { "{\"model\":\"m\",\"max_tokens\":5,\"system\":\"s\",\"messages\":[{\"role\":\"user\","
          "\"content\":\"look\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
          "\"id\":\"t1\",\"name\":\"read\",\"input\":{}}]},{\"role\":\"user\",\"content\":["
          "{\"type\":\"text\",\"text\":\"here\"},{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
          "\"content\":[{\"type\":\"text\",\"text\":\"r\"},{\"type\":\"image\",\"source\":{"
          "\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]}]}]}",
          "messages.2.content.1.content.1.source" },
        { "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":["
          "{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"image\",\"source\":{\"type\":\"base64\","
          "\"media_type\":\"image/png\",\"data\":\"bm90IGFuIGltYWdl\"}}]}]}",
          "messages.0.content.1.source" },
    };
    size_t i;
    for (i = 0; i < sizeof c / sizeof c[0]; i++) {
        coai_request q;
        coai_error e;
        int rc = parse(&q, c[i].body, &e);
        CHECKF(rc < 0 && !strcmp(e.param, c[i].param) && strstr(e.message, c[i].param)
               && !strstr(e.message, "messages["), "%d %s: %s", rc, e.param, e.message);
        if (rc == 0) coai_request_free(&q);
    }
}

int main(void)
{
    test_request();
    test_search_result();
    test_document();
    test_request_errors();
    test_image_paths();
    test_openai_neutral();
    test_stream();
    test_tool_use();
    test_non_stream_and_errors();
    test_usage_cache();
    test_exec_names();
    test_anthropic_exec();
    test_models();
    TEST_END();
}
