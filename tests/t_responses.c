/* t_responses.c - the OpenAI Responses dialect: request parsing into the neutral request,
 * validation errors, previous_response_id history, the Codex exec mapping, and the writer
 * (stream events with sequence numbers, non-stream object, tool calls, errors). */
#define _POSIX_C_SOURCE 200809L
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int parse(coai_responses_request *rr, const char *body, const char *hist, coai_error *e)
{
    coai_str h = coai_str_c(hist);
    return coai_responses_request_parse(rr, body, strlen(body), h, e);
}

static const char *prompt(const coai_responses_request *rr)
{
    return rr->req.prompt.data ? (const char *)rr->req.prompt.data : "";
}

static void test_parse(void)
{
    coai_responses_request rr;
    coai_error e;
    int rc;
    /* a string input with instructions */
    rc = parse(&rr, "{\"model\":\"gpt-5\",\"instructions\":\"Be brief.\",\"input\":\"Hi\"}", "", &e);
    CHECK(rc == 0);
    CHECKF(strcmp(prompt(&rr), "Be brief.\n\nUser: Hi") == 0, "%s", prompt(&rr));
    CHECK(rr.store == 1 && !rr.req.stream && rr.req.dialect == COAI_DIALECT_RESPONSES);
    CHECKF(strstr((const char *)rr.items.data, "\"input_text\",\"text\":\"Hi\"") != NULL, "%s",
           (const char *)rr.items.data);
    coai_responses_request_free(&rr);
    /* Codex-like items: developer messages, a call and its output, reasoning, hosted tools */
    rc = parse(&rr, "{\"model\":\"m\",\"stream\":true,\"store\":false,\"input\":["
               "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\","
               "\"text\":\"dev\"}]},"
               "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
               "\"text\":\"fix it\"}]},"
               "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"t\"}],"
               "\"encrypted_content\":null},"
               "{\"type\":\"function_call\",\"call_id\":\"sess_abc123__call_9\",\"name\":"
               "\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"},"
               "{\"type\":\"function_call_output\",\"call_id\":\"sess_abc123__call_9\","
               "\"output\":\"a.txt\"},"
               "{\"type\":\"web_search_call\",\"id\":\"ws\"}],"
               "\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\",\"parameters\":"
               "{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}}}},"
               "{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Edit files.\","
               "\"format\":{\"type\":\"grammar\",\"syntax\":\"lark\",\"definition\":\"start: x\"}},"
               "{\"type\":\"namespace\",\"name\":\"multi\",\"tools\":[]},{\"type\":\"web_search\"}],"
               "\"reasoning\":{\"summary\":\"auto\"},\"include\":[\"reasoning.encrypted_content\"],"
               "\"parallel_tool_calls\":true,\"prompt_cache_key\":\"thread-1\","
               "\"client_metadata\":{\"x\":1}}", "", &e);
    CHECKF(rc == 0, "%s", e.message);
    CHECKF(strcmp(prompt(&rr), "dev\n\nUser: fix it\n\nAssistant: [Called tool: exec_command("
                  "{\"cmd\":\"ls\"})]\n\n[Tool result for sess_abc123__call_9]: a.txt\n\n\n"
                  "Based on the tool results above, please continue your response:") == 0,
           "%s", prompt(&rr));
    CHECK(rr.req.tool_count == 2);
    CHECK(coai_str_eq(rr.req.tools[1].name, "apply_patch") && rr.req.tools[1].freeform);
    CHECK(!rr.req.tools[0].freeform);
    CHECK(rr.req.tools[1].parameters && cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(rr.req.tools[1].parameters, "properties"),
              "input"));
    CHECK(strstr(rr.req.tools[1].description.ptr, "start: x") != NULL);
    CHECK(coai_str_eq(rr.req.session_id, "abc123"));
    CHECK(coai_str_eq(rr.req.conversation_key, "thread-1"));
    CHECK(rr.store == 0 && rr.req.stream == 1);
    /* the Response object echoes the tools as given, like OpenAI's */
    CHECKF(strstr((const char *)rr.echo.data, ",\"tools\":[{\"type\":\"function\"") != NULL,
           "%.*s", (int)rr.echo.len, (const char *)rr.echo.data);
    coai_responses_request_free(&rr);
    /* history from previous_response_id goes first; instructions are the request's own */
    rc = parse(&rr, "{\"input\":\"second\",\"previous_response_id\":\"resp_1\","
               "\"instructions\":\"sys\"}",
               "[{\"type\":\"message\",\"role\":\"user\",\"content\":\"first\"},"
               "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":"
               "\"output_text\",\"text\":\"one\"}]}]", &e);
    CHECK(rc == 0);
    CHECKF(strcmp(prompt(&rr), "sys\n\nUser: first\n\nAssistant: one\n\nUser: second") == 0,
           "%s", prompt(&rr));
    CHECK(coai_str_eq(rr.previous_response_id, "resp_1"));
    CHECK(strstr((const char *)rr.echo.data, "\"previous_response_id\":\"resp_1\"") != NULL);
    /* no tool fields given: OpenAI's defaults, as its Response object always has them */
    CHECKF(strstr((const char *)rr.echo.data, ",\"tools\":[],\"tool_choice\":\"auto\","
                  "\"parallel_tool_calls\":true") != NULL, "%.*s", (int)rr.echo.len,
           (const char *)rr.echo.data);
    coai_responses_request_free(&rr);
    {
        char id[48];
        const char *b = "{\"previous_response_id\":\"resp_x\"}";
        CHECK(coai_responses_previous_id(b, strlen(b), id, sizeof id) == 1 && !strcmp(id, "resp_x"));
        b = "{\"previous_response_id\":5}";
        CHECK(coai_responses_previous_id(b, strlen(b), id, sizeof id) == -1);
        b = "{\"input\":\"x\"}";
        CHECK(coai_responses_previous_id(b, strlen(b), id, sizeof id) == 0);
    }
}

static void bad(const char *body, const char *param)
{
    coai_responses_request rr;
    coai_error e;
    int rc = parse(&rr, body, "", &e);
    CHECKF(rc < 0 && e.status == 400 && !strcmp(e.param, param), "%s -> %d %s (%s)", body, rc,
           e.param, e.message);
    coai_responses_request_free(&rr);
}

/* issue 29: an image error names the Responses field it came from (a function_call_output's
 * image used to be "messages[1].content[0]"), and text.format.type is one of OpenAI's */
static void test_issue29(void)
{
    static const struct { const char *body, *param; } img[] = {
        { "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"read\","
          "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c1\","
          "\"output\":[{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,AAAA\"}]}]}",
          "input[1].output[0].image_url" },
        { "{\"input\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":["
          "{\"type\":\"input_text\",\"text\":\"x\"},{\"type\":\"input_image\",\"image_url\":"
          "\"data:image/png;base64,bm90IGFuIGltYWdl\"}]}]}", "input[1].content[1].image_url" },
    };
    size_t i;
    for (i = 0; i < sizeof img / sizeof img[0]; i++) {
        coai_responses_request rr;
        coai_error e;
        int rc = parse(&rr, img[i].body, "", &e);
        CHECKF(rc == 0, "%s", e.message);
        if (rc) continue;
        rc = coai_request_check(&rr.req, NULL, &e);
        CHECKF(rc < 0 && !strcmp(e.param, img[i].param) && strstr(e.message, img[i].param)
               && !strstr(e.message, "messages["), "%d %s: %s", rc, e.param, e.message);
        coai_responses_request_free(&rr);
    }
    bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type");
    bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json\"}}}", "text.format.type");
    bad("{\"input\":\"x\",\"text\":{\"format\":{}}}", "text.format.type");
    bad("{\"input\":\"x\",\"text\":{\"format\":\"json_object\"}}", "text.format");
    {
        coai_responses_request rr;
        coai_error e;
        CHECK(parse(&rr, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}", "", &e)
              == 0 && !rr.req.response_json);
        coai_responses_request_free(&rr);
        CHECK(parse(&rr, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "", &e)
              < 0 && e.code && !strcmp(e.code, "invalid_value")
              && strstr(e.message, "Invalid value: 'xml'. Supported values are: 'text', "
                        "'json_object', and 'json_schema'."));
        coai_responses_request_free(&rr);
    }
}

static void test_errors(void)
{
    bad("{\"model\":\"m\"}", "input");
    bad("{\"input\":5}", "input");
    bad("{\"input\":[{\"type\":\"telepathy\"}]}", "input[0].type");
    bad("{\"input\":[{\"role\":\"king\",\"content\":\"x\"}]}", "input[0].role");
    bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}",
        "input[0].content[0].type");
    bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
        "input[0].content[0].image_url");
    bad("{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input[0].call_id");
    bad("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0].output");
    bad("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0].type");
    bad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0].name");
    bad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", "tools[0].name");
    bad("{\"input\":\"x\",\"tools\":[{\"type\":\"quantum\"}]}", "tools[0].type");
    bad("{\"input\":\"x\",\"tool_choice\":\"sometimes\"}", "tool_choice");
    /* a named tool must be one of the tools (the rule every dialect shares) */
    bad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"a\"}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"zz\"}}", "tool_choice");
    bad("{\"input\":\"x\",\"reasoning\":{\"effort\":\"extreme\"}}", "reasoning.effort");
    bad("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens");
    bad("{\"input\":\"x\",\"max_output_tokens\":1.5}", "max_output_tokens");
    bad("{\"input\":\"x\",\"background\":true}", "background");
    bad("{\"input\":\"x\",\"stream\":\"yes\"}", "stream");
    bad("{\"input\":\"x\",\"metadata\":{\"k\":1}}", "metadata");
    bad("{\"input\":\"x\",\"include\":[1]}", "include[0]");
    bad("{\"input\":\"x\",\"conversation\":\"c\"}", "conversation");
    {
        coai_responses_request rr;
        coai_error e;
        CHECK(parse(&rr, "{\"input\":\"x\"", "", &e) == COAI_ERR_JSON && e.status == 400);
        coai_responses_request_free(&rr);
        CHECK(parse(&rr, "{\"input\":\"x\"}", "{\"not\":\"an array\"}", &e) < 0
              && !strcmp(e.param, "previous_response_id"));
        coai_responses_request_free(&rr);
    }
}

/* ---- exec mapping ---- */

static coai_tool *tools_of(coai_responses_request *rr, const char *tools_json)
{
    coai_error e;
    char body[4096];
    snprintf(body, sizeof body, "{\"input\":\"x\",\"tools\":%s}", tools_json);
    if (parse(rr, body, "", &e) < 0) return NULL;
    return rr->req.tools;
}

static void map_check(const char *tools_json, const coai_exec *ex, const char *ws,
                      const char *want_tool, const char *want_args)
{
    coai_responses_request rr;
    coai_tool_call tc;
    coai_tool *t = tools_of(&rr, tools_json);
    int m;
    memset(&tc, 0, sizeof tc);
    m = coai_responses_exec_map(ex, t, rr.req.tool_count, coai_str_c(ws), &tc);
    if (!want_tool) {
        CHECKF(m == 0, "mapped to %.*s", (int)tc.args.len, (const char *)tc.args.data);
    } else {
        CHECKF(m == 1 && coai_str_eq(t[tc.tool].name, want_tool), "m=%d", m);
        CHECKF(m == 1 && tc.args.len == strlen(want_args)
                   && !memcmp(tc.args.data, want_args, tc.args.len),
               "%.*s", (int)tc.args.len, tc.args.data ? (const char *)tc.args.data : "");
    }
    coai_buf_free(&tc.args);
    coai_responses_request_free(&rr);
}

#define CODEX_TOOLS "[{\"type\":\"function\",\"name\":\"exec_command\",\"parameters\":{\"type\":" \
    "\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"},\"workdir\":{\"type\":\"string\"}}}}"
#define APPLY_PATCH ",{\"type\":\"custom\",\"name\":\"apply_patch\"}"

static void test_exec_map(void)
{
    coai_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_SHELL;
    ex.command = coai_str_c("ls -la");
    ex.cwd = coai_str_c("/srv/proxy-ws");
    /* Cursor's own workspace is not passed: Codex runs in its cwd */
    map_check(CODEX_TOOLS "]", &ex, "/srv/proxy-ws", "exec_command", "{\"cmd\":\"ls -la\"}");
    map_check(CODEX_TOOLS "]", &ex, "/elsewhere", "exec_command",
              "{\"cmd\":\"ls -la\",\"workdir\":\"/srv/proxy-ws\"}");
    map_check("[{\"type\":\"function\",\"name\":\"shell\",\"parameters\":{\"type\":\"object\","
              "\"properties\":{\"command\":{\"type\":\"array\"}}}}]", &ex, "/srv/proxy-ws",
              "shell", "{\"command\":[\"bash\",\"-lc\",\"ls -la\"]}");
    map_check("[{\"type\":\"function\",\"name\":\"shell_command\"}]", &ex, "", "shell_command",
              "{\"command\":\"ls -la\",\"workdir\":\"/srv/proxy-ws\"}");
    map_check("[{\"type\":\"function\",\"name\":\"get_weather\"}]", &ex, "", NULL, NULL);
    /* Cursor's hard timeout (ShellArgs 14, ms) where the tool takes timeout_ms (issue 24
     * item 9); a tool without it does not get one */
    ex.hard_timeout_ms = 90000;
    map_check("[{\"type\":\"function\",\"name\":\"shell\",\"parameters\":{\"type\":\"object\","
              "\"properties\":{\"command\":{\"type\":\"array\"},\"timeout_ms\":{}}}}]", &ex,
              "/srv/proxy-ws", "shell",
              "{\"command\":[\"bash\",\"-lc\",\"ls -la\"],\"timeout_ms\":90000}");
    map_check(CODEX_TOOLS "]", &ex, "/srv/proxy-ws", "exec_command", "{\"cmd\":\"ls -la\"}");
    ex.hard_timeout_ms = 0;
    /* writes: apply_patch (Add File), else the shell */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.path = coai_str_c("a/b.txt");
    ex.content = coai_str_c("one\ntwo it's\n");
    map_check(CODEX_TOOLS APPLY_PATCH "]", &ex, "", "apply_patch",
              "{\"input\":\"*** Begin Patch\\n*** Add File: a/b.txt\\n+one\\n+two it's\\n"
              "*** End Patch\\n\"}");
    map_check(CODEX_TOOLS "]", &ex, "", "exec_command",
              "{\"cmd\":\"mkdir -p -- \\\"$(dirname -- 'a/b.txt')\\\" && printf '%s' 'one\\ntwo "
              "it'\\\\''s\\n' > 'a/b.txt'\"}");
    ex.kind = COAI_EXEC_DELETE;
    map_check(CODEX_TOOLS APPLY_PATCH "]", &ex, "", "apply_patch",
              "{\"input\":\"*** Begin Patch\\n*** Delete File: a/b.txt\\n*** End Patch\\n\"}");
    map_check(CODEX_TOOLS "]", &ex, "", "exec_command",
              "{\"cmd\":\"wc -c < 'a/b.txt' && rm -- 'a/b.txt'\"}");
    /* reads and searches: a dedicated tool first, else the shell */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_READ;
    ex.path = coai_str_c("/w/x.c");
    map_check(CODEX_TOOLS "]", &ex, "", "exec_command", "{\"cmd\":\"cat -- '/w/x.c'\"}");
    map_check(CODEX_TOOLS ",{\"type\":\"function\",\"name\":\"read_file\",\"parameters\":{"
              "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}]", &ex, "",
              "read_file", "{\"path\":\"/w/x.c\"}");
    ex.kind = COAI_EXEC_LS;
    ex.path = coai_str_c("");
    map_check(CODEX_TOOLS "]", &ex, "/ws", "exec_command", "{\"cmd\":\"ls -la -- '/ws'\"}");
    ex.kind = COAI_EXEC_GREP;
    ex.pattern = coai_str_c("TODO");
    ex.glob = coai_str_c("*.c");
    ex.path = coai_str_c("src");
    map_check(CODEX_TOOLS "]", &ex, "", "exec_command",
              "{\"cmd\":\"rg -n -e 'TODO' --glob='*.c' -- 'src'\"}");
    ex.pattern = coai_str_c("");
    map_check(CODEX_TOOLS "]", &ex, "", "exec_command",
              "{\"cmd\":\"rg --files --glob='*.c' -- 'src'\"}");
    /* an MCP exec for a client tool by name */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_MCP;
    ex.tool_name = coai_str_c("view_image");
    ex.args_json = coai_str_c("{\"path\":\"p.png\"}");
    map_check(CODEX_TOOLS ",{\"type\":\"function\",\"name\":\"view_image\"}]", &ex, "",
              "view_image", "{\"path\":\"p.png\"}");
}

/* ---- writer ---- */

static int sink(void *u, const unsigned char *m, size_t n)
{
    (void)u; (void)m; (void)n;
    return 0;
}

static void reply_start(coai_reply *r, coai_responses_request *rr, const char *body, int stream)
{
    coai_reply_opts o;
    coai_error e;
    CHECK(parse(rr, body, "", &e) == 0);
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &rr->req);
    o.stream = stream;
    o.completion_id = coai_str_c("resp_abc");
    o.model = coai_str_c("gpt-5");
    o.created = 1700000000;
    o.send = sink;
    o.echo.ptr = (const char *)rr->echo.data;
    o.echo.len = rr->echo.len;
    CHECK(coai_reply_init(r, &o) == 0);
}

static void feed_text(coai_reply *r, coai_msg_kind k, const char *t)
{
    coai_msg m;
    memset(&m, 0, sizeof m);
    m.kind = k;
    m.text = coai_str_c(t);
    coai_reply_feed_msg(r, &m);
}

/* The JSON data of every SSE event, checked: event name = type, sequence 0.. */
static cJSON *events(const coai_buf *out)
{
    cJSON *arr = cJSON_CreateArray();
    const char *p = (const char *)out->data, *end = p + out->len;
    int seq = 0;
    while (p < end) {
        const char *blk = strstr(p, "\n\n");
        char name[96];
        const char *d;
        cJSON *j;
        if (!blk) break;
        CHECK(sscanf(p, "event: %95s", name) == 1);
        d = strstr(p, "\ndata: ");
        CHECK(d && d < blk);
        if (!d || d > blk) break;
        j = cJSON_ParseWithLength(d + 7, (size_t)(blk - d - 7));
        CHECK(j != NULL);
        if (!j) break;
        CHECK(!strcmp(cJSON_GetObjectItem(j, "type")->valuestring, name));
        CHECK(cJSON_GetObjectItem(j, "sequence_number")->valueint == seq++);
        cJSON_AddItemToArray(arr, j);
        p = blk + 2;
    }
    return arr;
}

static const char *ev_type(cJSON *evs, int i)
{
    cJSON *j = cJSON_GetArrayItem(evs, i);
    return j ? cJSON_GetObjectItem(j, "type")->valuestring : "";
}

static void test_writer_stream(void)
{
    coai_responses_request rr;
    coai_reply r;
    cJSON *evs, *last, *resp, *out;
    coai_str s;
    reply_start(&r, &rr, "{\"input\":\"x\",\"stream\":true,\"metadata\":{\"a\":\"b\"}}", 1);
    feed_text(&r, COAI_MSG_THINKING, "hmm");
    feed_text(&r, COAI_MSG_TEXT, "Hel");
    feed_text(&r, COAI_MSG_TEXT, "lo");
    feed_text(&r, COAI_MSG_TURN_ENDED, "");
    coai_reply_feed_eof(&r);
    evs = events(&r.out);
    CHECK(cJSON_GetArraySize(evs) == 16);
    CHECK(!strcmp(ev_type(evs, 0), "response.created"));
    CHECK(!strcmp(ev_type(evs, 4), "response.reasoning_summary_text.delta"));
    CHECK(!strcmp(ev_type(evs, 11), "response.output_text.delta"));
    CHECK(!strcmp(ev_type(evs, 12), "response.output_text.done"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(evs, 12), "text")->valuestring, "Hello"));
    last = cJSON_GetArrayItem(evs, cJSON_GetArraySize(evs) - 1);
    CHECK(!strcmp(ev_type(evs, cJSON_GetArraySize(evs) - 1), "response.completed"));
    resp = cJSON_GetObjectItem(last, "response");
    out = cJSON_GetObjectItem(resp, "output");
    CHECK(cJSON_GetArraySize(out) == 2);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "type")->valuestring,
                  "reasoning"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(resp, "metadata"), "a")->valuestring,
                  "b"));
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(resp, "usage"),
                              "output_tokens_details"), "reasoning_tokens")->valueint == 1);
    s = coai_reply_response(&r);
    CHECK(s.len > 0 && !memcmp(s.ptr, "{\"id\":\"resp_abc\"", 16));
    s = coai_reply_output_items(&r);
    CHECK(s.len > 0 && strstr(s.ptr, "\"type\":\"message\"") != NULL);
    cJSON_Delete(evs);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
}

static void test_writer_tool_calls(void)
{
    coai_responses_request rr;
    coai_reply r;
    coai_msg m;
    cJSON *evs, *item;
    int n;
    /* a write with apply_patch offered: a custom_tool_call with the patch as input */
    reply_start(&r, &rr, "{\"input\":\"x\",\"stream\":true,\"tools\":" CODEX_TOOLS APPLY_PATCH
                "]}", 1);
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_EXEC;
    m.exec.kind = COAI_EXEC_WRITE;
    m.exec.id = 3;
    m.exec.exec_id = coai_str_c("exec-3");
    m.exec.path = coai_str_c("f.txt");
    m.exec.content = coai_str_c("hi\n");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    CHECK(coai_reply_tool_called(&r));
    evs = events(&r.out);
    n = cJSON_GetArraySize(evs);
    CHECK(!strcmp(ev_type(evs, 2), "response.output_item.added"));
    CHECK(!strcmp(ev_type(evs, 3), "response.custom_tool_call_input.delta"));
    CHECK(!strcmp(ev_type(evs, 4), "response.custom_tool_call_input.done"));
    CHECK(!strcmp(ev_type(evs, n - 1), "response.completed"));
    item = cJSON_GetObjectItem(cJSON_GetArrayItem(evs, 5), "item");
    CHECK(!strcmp(cJSON_GetObjectItem(item, "type")->valuestring, "custom_tool_call"));
    CHECK(!strcmp(cJSON_GetObjectItem(item, "input")->valuestring,
                  "*** Begin Patch\n*** Add File: f.txt\n+hi\n*** End Patch\n"));
    CHECK(!strcmp(cJSON_GetObjectItem(item, "call_id")->valuestring, "sess_respabc__call_exec3"));
    cJSON_Delete(evs);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
    /* non-stream: a shell exec -> a function_call item after the text */
    reply_start(&r, &rr, "{\"input\":\"x\",\"tools\":" CODEX_TOOLS "]}", 0);
    feed_text(&r, COAI_MSG_TEXT, "Looking.");
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_EXEC;
    m.exec.kind = COAI_EXEC_SHELL;
    m.exec.id = 4;
    m.exec.command = coai_str_c("ls");
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    {
        cJSON *j = cJSON_ParseWithLength((const char *)r.out.data, r.out.len), *o;
        CHECK(j != NULL);
        o = cJSON_GetObjectItem(j, "output");
        CHECK(cJSON_GetArraySize(o) == 2);
        item = cJSON_GetArrayItem(o, 1);
        CHECK(!strcmp(cJSON_GetObjectItem(item, "type")->valuestring, "function_call"));
        CHECK(!strcmp(cJSON_GetObjectItem(item, "arguments")->valuestring, "{\"cmd\":\"ls\"}"));
        CHECK(!strcmp(cJSON_GetObjectItem(j, "status")->valuestring, "completed"));
        cJSON_Delete(j);
    }
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
}

static void test_writer_errors(void)
{
    coai_responses_request rr;
    coai_reply r;
    coai_error e;
    cJSON *evs, *last;
    /* before the first byte: a status and OpenAI's error body */
    reply_start(&r, &rr, "{\"input\":\"x\",\"stream\":true}", 1);
    coai_error_set(&e, 429, "insufficient_quota", "insufficient_quota", NULL, "quota");
    coai_reply_feed_error(&r, &e);
    CHECK(coai_reply_status(&r) == 429);
    CHECK(strstr((const char *)r.out.data, "{\"error\":{\"message\":\"quota\"") != NULL);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
    /* after it: response.failed with the error */
    reply_start(&r, &rr, "{\"input\":\"x\",\"stream\":true}", 1);
    feed_text(&r, COAI_MSG_TEXT, "partial");
    coai_error_set(&e, 502, "upstream_error", "upstream_truncated", NULL, "cut");
    coai_reply_feed_error(&r, &e);
    CHECK(coai_reply_status(&r) == 200);
    evs = events(&r.out);
    last = cJSON_GetArrayItem(evs, cJSON_GetArraySize(evs) - 1);
    CHECK(!strcmp(ev_type(evs, cJSON_GetArraySize(evs) - 1), "response.failed"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(last, "response"),
                                                          "error"), "code")->valuestring,
                  "upstream_truncated"));
    CHECK(coai_reply_response(&r).len == 0);
    cJSON_Delete(evs);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
}

/* Compaction: Codex's compaction_trigger item (a streamed response with one compaction
 * item), POST /responses/compact (a response.compaction object), a summary sent back. */
static void test_compaction(void)
{
    coai_responses_request rr;
    coai_reply r;
    coai_reply_opts o;
    coai_error e;
    cJSON *evs, *j, *out;
    const char *tools = ",\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\","
                        "\"parameters\":{\"type\":\"object\"}}]";
    char body[512];
    int n = 0, i;
    snprintf(body, sizeof body, "{\"stream\":true,\"input\":[{\"type\":\"message\",\"role\":"
             "\"user\",\"content\":\"fix it\"},{\"type\":\"compaction_trigger\"}]%s}", tools);
    reply_start(&r, &rr, body, 1);
    CHECK(rr.compact == 1 && rr.req.tool_count == 0 && rr.req.stream == 1);
    CHECK(strstr(prompt(&rr), "User: fix it\n\nUser: Context compaction:") != NULL);
    r.o_.rs_compact = rr.compact;      /* what the server sets from rr.compact */
    feed_text(&r, COAI_MSG_THINKING, "hmm");
    feed_text(&r, COAI_MSG_TEXT, "Sum");
    feed_text(&r, COAI_MSG_TEXT, "mary \"x\"");
    feed_text(&r, COAI_MSG_TURN_ENDED, "");
    coai_reply_feed_eof(&r);
    evs = events(&r.out);
    for (i = 0; i < cJSON_GetArraySize(evs); i++) {
        const char *t = ev_type(evs, i);
        CHECKF(!strstr(t, "output_text") && !strstr(t, "reasoning_summary"), "%s", t);
        if (!strcmp(t, "response.output_item.done")) {
            j = cJSON_GetObjectItem(cJSON_GetArrayItem(evs, i), "item");
            CHECK(!strcmp(cJSON_GetObjectItem(j, "type")->valuestring, "compaction"));
            CHECK(!strcmp(cJSON_GetObjectItem(j, "encrypted_content")->valuestring,
                          COAI_RESPONSES_COMPACT_TAG "Summary \"x\""));
            n++;
        }
    }
    CHECK(n == 1);
    CHECK(!strcmp(ev_type(evs, cJSON_GetArraySize(evs) - 1), "response.completed"));
    cJSON_Delete(evs);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
    /* POST /responses/compact: not streamed even when asked, no tools, not stored */
    snprintf(body, sizeof body, "{\"model\":\"gpt-5\",\"stream\":true,\"input\":\"hello\"%s}",
             tools);
    CHECK(coai_responses_compact_parse(&rr, body, strlen(body), coai_str_c(""), &e) == 0);
    CHECK(rr.compact == 2 && rr.req.stream == 0 && rr.req.tool_count == 0 && rr.store == 0);
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &rr.req);
    o.completion_id = coai_str_c("resp_abc");
    o.model = coai_str_c("gpt-5");
    o.created = 1700000000;
    o.send = sink;
    o.rs_compact = rr.compact;
    CHECK(coai_reply_init(&r, &o) == 0);
    feed_text(&r, COAI_MSG_TEXT, "S1");
    feed_text(&r, COAI_MSG_TURN_ENDED, "");
    coai_reply_feed_eof(&r);
    j = cJSON_ParseWithLength((const char *)r.out.data, r.out.len);
    CHECKF(j != NULL, "%.*s", (int)r.out.len, (const char *)r.out.data);
    CHECK(!strcmp(cJSON_GetObjectItem(j, "object")->valuestring, "response.compaction"));
    CHECK(!strcmp(cJSON_GetObjectItem(j, "id")->valuestring, "resp_abc"));
    CHECK(cJSON_GetObjectItem(j, "created_at")->valueint == 1700000000);
    out = cJSON_GetObjectItem(j, "output");
    CHECK(cJSON_GetArraySize(out) == 1);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "encrypted_content")
                  ->valuestring, COAI_RESPONSES_COMPACT_TAG "S1"));
    CHECK(cJSON_GetObjectItem(j, "usage") != NULL);
    cJSON_Delete(j);
    coai_reply_free(&r);
    coai_responses_request_free(&rr);
    /* the summary sent back: a user message; another server's compaction: a 400 */
    CHECK(parse(&rr, "{\"input\":[{\"type\":\"compaction\",\"encrypted_content\":"
                "\"cursor-oai compaction summary v1\\nS1\"},{\"role\":\"user\",\"content\":"
                "\"go on\"}]}", "", &e) == 0);
    CHECKF(strcmp(prompt(&rr), "User: " COAI_RESPONSES_SUMMARY_INTRO "S1\n\nUser: go on") == 0,
           "%s", prompt(&rr));
    CHECK(rr.compact == 0);
    coai_responses_request_free(&rr);
    CHECK(parse(&rr, "{\"input\":[{\"type\":\"compaction\",\"encrypted_content\":\"gAAA\"}]}",
                "", &e) < 0);
    CHECK(e.status == 400 && !strcmp(e.param, "input[0].encrypted_content"));
    coai_responses_request_free(&rr);
}

/* A write over Linux's 128 KiB per-argument limit through the array-form shell tool: the
 * content as several arguments after the script, each under the limit, never splitting a
 * UTF-8 sequence, together the exact bytes. */
static void test_big_write(void)
{
    coai_responses_request rr;
    coai_tool_call tc;
    coai_tool *t = tools_of(&rr, "[{\"type\":\"function\",\"name\":\"shell\",\"parameters\":"
                            "{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                            "\"array\"}}}}]");
    coai_exec ex;
    coai_buf content = { 0 }, joined = { 0 };
    cJSON *j, *cmd, *a;
    int m, i, n;
    for (i = 0; content.len < 300 * 1024; i++)     /* 3-byte and 4-byte UTF-8 throughout */
        coai_buf_printf(&content, "line %d: it's \"q\" $HOME \xe2\x82\xac \xf0\x9f\x8c\x8d\n", i);
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.path = coai_str_c("out dir/big.txt");
    ex.content.ptr = (const char *)content.data;
    ex.content.len = content.len;
    memset(&tc, 0, sizeof tc);
    m = coai_responses_exec_map(&ex, t, rr.req.tool_count, coai_str_c(""), &tc);
    CHECK(m == 1);
    j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
    cmd = cJSON_GetObjectItem(j, "command");
    n = cJSON_GetArraySize(cmd);
    CHECKF(n >= 7, "%d arguments", n);
    CHECK(!strcmp(cJSON_GetArrayItem(cmd, 0)->valuestring, "bash"));
    CHECK(!strcmp(cJSON_GetArrayItem(cmd, 1)->valuestring, "-lc"));
    CHECKF(!strcmp(cJSON_GetArrayItem(cmd, 2)->valuestring, "mkdir -p -- \"$(dirname -- "
                   "'out dir/big.txt')\" && printf '%s' \"$@\" > 'out dir/big.txt'"), "%s",
           cJSON_GetArrayItem(cmd, 2)->valuestring);
    for (i = 4; i < n; i++) {
        a = cJSON_GetArrayItem(cmd, i);
        CHECK(strlen(a->valuestring) < 128 * 1024);
        CHECK(((unsigned char)a->valuestring[0] & 0xc0) != 0x80);
        coai_buf_puts(&joined, a->valuestring);
    }
    CHECK(joined.len == content.len && !memcmp(joined.data, content.data, content.len));
    cJSON_Delete(j);
    coai_buf_free(&tc.args);
    coai_buf_free(&content);
    coai_buf_free(&joined);
    coai_responses_request_free(&rr);
}

/* Run cmd as `bash -lc cmd` (one argument, as Codex's exec_command does) in dir: the exit
 * status, or -1 when it could not run (E2BIG: the argument was over Linux's limit). */
static int run_bash(const char *dir, const char *cmd)
{
    int st;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        if (!freopen("/dev/null", "w", stderr)) _exit(126);  /* a failing part's message */
        execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st) == 127 ? -1 : WEXITSTATUS(st);
}

/* The one command a split write's call k runs (its exec_command "cmd"), malloc'd. */
static char *part_cmd(const coai_exec *ex, coai_tool *t, size_t nt, unsigned k,
                      unsigned *parts)
{
    coai_tool_call tc;
    cJSON *j;
    char *c = NULL;
    memset(&tc, 0, sizeof tc);
    tc.part = k;
    if (coai_responses_exec_map(ex, t, nt, coai_str_c(""), &tc) == 1) {
        j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
        if (cJSON_IsString(cJSON_GetObjectItem(j, "cmd")))
            c = strdup(cJSON_GetObjectItem(j, "cmd")->valuestring);
        cJSON_Delete(j);
    }
    *parts = tc.parts;
    coai_buf_free(&tc.args);
    return c;
}

/* The directory holds exactly one entry, named name (no staging directory left). */
static int only_entry(const char *dir, const char *name)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0, found = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (!strcmp(e->d_name, name)) found = 1;
    }
    closedir(d);
    return n == 1 && found;
}

/* A write over 128 KiB through Codex's exec_command (one string, run as bash -lc <cmd>):
 * several calls, each command well under Linux's 128 KiB for one argument; run by bash in
 * order, in reverse order, or with a part failing, the target is either the exact bytes
 * (any bytes: quotes, NUL, invalid UTF-8, no trailing newline) or untouched. */
static void test_split_write(void)
{
    coai_responses_request rr;
    coai_tool *t = tools_of(&rr, CODEX_TOOLS "]");
    coai_exec ex;
    coai_buf content = { 0 };
    char dir[] = "/tmp/t_responses_splitXXXXXX", path[300], sub[300];
    char *cmds[16];
    unsigned parts = 0, p2, k;
    size_t i, got_len = 0;
    char *got;
    for (i = 0; content.len < 200 * 1024 + 7; i++) {
        coai_buf_printf(&content, "line %lu: it's \"q\" $HOME `x` \\ %% \xe2\x82\xac\n",
                        (unsigned long)i);
        if (i % 97 == 0) coai_buf_append(&content, "\0\xff\xfe", 3);
    }
    coai_buf_puts(&content, "no newline at the end");
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.id = 5;
    ex.exec_id = coai_str_c("exec-big-5");
    ex.path = coai_str_c("out dir/it's big.txt");
    ex.content.ptr = (const char *)content.data;
    ex.content.len = content.len;
    /* the old single command was over the limit: E2BIG */
    cmds[0] = part_cmd(&ex, t, rr.req.tool_count, 0, &parts);
    CHECKF(parts == (content.len + 65535) / 65536 && parts >= 4, "%u parts", parts);
    CHECK(cmds[0] != NULL);
    for (k = 1; k < parts && k < 16; k++) {
        cmds[k] = part_cmd(&ex, t, rr.req.tool_count, k, &p2);
        CHECK(cmds[k] != NULL && p2 == parts);
    }
    for (k = 0; k < parts && k < 16; k++)
        CHECKF(cmds[k] && strlen(cmds[k]) < 100 * 1024, "part %u: %zu bytes", k,
               cmds[k] ? strlen(cmds[k]) : 0);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/out dir/it's big.txt", dir);
    snprintf(sub, sizeof sub, "%s/out dir", dir);
    /* in order: each call exits 0, the last one puts the file in place */
    for (k = 0; k < parts && k < 16; k++) {
        int rc = cmds[k] ? run_bash(dir, cmds[k]) : -1;
        CHECKF(rc == 0, "part %u exit %d", k, rc);
        if (k + 1 < parts) CHECK(access(path, F_OK) != 0);    /* not half-written */
    }
    got = test_read_file(path, &got_len);
    CHECK(got != NULL);
    if (got) CHECK_MEM(got, got_len, content.data, content.len);
    free(got);
    CHECK(only_entry(sub, "it's big.txt"));
    /* in reverse order (a client running them at once): the same bytes */
    CHECK(unlink(path) == 0);
    for (k = parts; k-- > 0;) CHECK(k >= 16 || (cmds[k] && run_bash(dir, cmds[k]) == 0));
    got = test_read_file(path, &got_len);
    CHECK(got != NULL);
    if (got) CHECK_MEM(got, got_len, content.data, content.len);
    free(got);
    CHECK(only_entry(sub, "it's big.txt"));
    /* a part that fails (its staging file cannot be written): the old file stays whole */
    {
        char blocker[400], old[] = "old contents\n";
        FILE *f = fopen(path, "wb");
        int fail_rc;
        CHECK(f && fwrite(old, 1, sizeof old - 1, f) == sizeof old - 1);
        if (f) fclose(f);
        CHECK(run_bash(dir, cmds[0]) == 0);
        /* a directory where part 2's staging file goes: writing it fails */
        {
            char *s0 = strstr(cmds[1], "s=\""), *e0 = s0 ? strstr(s0, "\"\n") : NULL;
            const char *stage = s0 ? s0 + 3 : "";
            size_t sl = e0 ? (size_t)(e0 - stage) : 0;
            /* "$d/.cursor-oai-write-..." with $d = out dir */
            snprintf(blocker, sizeof blocker, "%s/out dir%.*s/2.tmp", dir,
                     (int)(sl > 2 ? sl - 2 : 0), stage + 2);
        }
        CHECKF(mkdir(blocker, 0700) == 0, "%s", blocker);
        fail_rc = run_bash(dir, cmds[1]);
        CHECKF(fail_rc > 0, "exit %d", fail_rc);
        /* the calls after it find the set failed and fail too */
        for (k = 2; k < parts && k < 16; k++) CHECK(run_bash(dir, cmds[k]) > 0);
        got = test_read_file(path, &got_len);
        CHECK(got && got_len == sizeof old - 1 && !memcmp(got, old, got_len));
        free(got);
        /* nothing of the set is left but the blocker (which no rm -- can remove) */
        CHECK(rmdir(blocker) == 0);
        *strrchr(blocker, '/') = 0;
        CHECKF(rmdir(blocker) == 0, "%s not empty", blocker);
        CHECK(only_entry(sub, "it's big.txt"));
    }
    /* a part whose command fails (its base64 -d, here false), in order, in reverse order,
     * first or last: the calls after it fail too, and once every call has run no staging
     * directory is left; the old file stays whole */
    {
        static const char old[] = "old contents\n";
        unsigned fail, rev;
        for (rev = 0; rev < 2; rev++)
            for (fail = 0; fail < parts && fail < 16; fail++) {
                FILE *f = fopen(path, "wb");
                unsigned n;
                CHECK(f && fwrite(old, 1, sizeof old - 1, f) == sizeof old - 1);
                if (f) fclose(f);
                for (n = 0; n < parts && n < 16; n++) {
                    unsigned c = rev ? parts - 1 - n : n;
                    char *cmd = cmds[c] ? strdup(cmds[c]) : NULL, *b64;
                    int rc;
                    if (cmd && c == fail && (b64 = strstr(cmd, "| base64 -d >")) != NULL)
                        memcpy(b64, "| false    ", 11);        /* same length */
                    rc = cmd ? run_bash(dir, cmd) : -1;
                    CHECKF(rev ? (n + 1 < parts - fail ? rc == 0 : rc > 0)
                           : (n < fail ? rc == 0 : rc > 0),
                           "fail %u rev %u call %u: exit %d", fail, rev, c, rc);
                    free(cmd);
                }
                got = test_read_file(path, &got_len);
                CHECKF(got && got_len == sizeof old - 1 && !memcmp(got, old, got_len),
                       "fail %u rev %u: the old file", fail, rev);
                free(got);
                CHECKF(only_entry(sub, "it's big.txt"), "fail %u rev %u: no staging left",
                       fail, rev);
            }
    }
    /* joining fails (the target is a directory): the last part fails, and once the
     * directory is gone the same calls again write the file (the lock was released) */
    {
        char rm[400];
        int rc;
        snprintf(rm, sizeof rm, "rm -rf -- '%s/out dir'", dir);
        CHECK(run_bash("/", rm) == 0);
        CHECK(mkdir(sub, 0700) == 0 && mkdir(path, 0700) == 0);
        for (k = 0; k + 1 < parts && k < 16; k++) CHECK(run_bash(dir, cmds[k]) == 0);
        rc = k < 16 ? run_bash(dir, cmds[k]) : -1;
        CHECKF(rc > 0, "exit %d", rc);
        CHECK(only_entry(sub, "it's big.txt"));    /* the failed call removed the parts */
        CHECK(rmdir(path) == 0);
        for (k = 0; k < parts && k < 16; k++) CHECK(run_bash(dir, cmds[k]) == 0);
        got = test_read_file(path, &got_len);
        CHECK(got != NULL);
        if (got) CHECK_MEM(got, got_len, content.data, content.len);
        free(got);
        CHECK(only_entry(sub, "it's big.txt"));
    }
    {
        char rm[400];
        snprintf(rm, sizeof rm, "rm -rf -- '%s'", dir);
        CHECK(run_bash("/", rm) == 0);
    }
    /* shell_command {command} (older Codex) takes one string too: the same calls */
    {
        coai_responses_request r2;
        coai_tool *t2 = tools_of(&r2, "[{\"type\":\"function\",\"name\":\"shell_command\","
                                 "\"parameters\":{\"type\":\"object\",\"properties\":{"
                                 "\"command\":{\"type\":\"string\"}}}}]");
        coai_tool_call tc;
        cJSON *j;
        memset(&tc, 0, sizeof tc);
        tc.part = 1;
        CHECK(coai_responses_exec_map(&ex, t2, r2.req.tool_count, coai_str_c(""), &tc) == 1);
        CHECK(tc.parts == parts);
        j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
        CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "command"))
              && cmds[1] && !strcmp(cJSON_GetObjectItem(j, "command")->valuestring, cmds[1]));
        cJSON_Delete(j);
        coai_buf_free(&tc.args);
        coai_responses_request_free(&r2);
    }
    /* a write that fits one command stays one call */
    ex.content = coai_str_c("small\n");
    free(part_cmd(&ex, t, rr.req.tool_count, 0, &p2));
    CHECK(p2 == 0);
    for (k = 0; k < parts && k < 16; k++) free(cmds[k]);
    coai_buf_free(&content);
    coai_responses_request_free(&rr);
}

/* The reply: one Cursor write -> that many function_call items in one response (streamed or
 * not, parallel tool calls allowed or not), each its own call id, all for the one exec; and
 * the one result Cursor gets: the first failing part's, else the last part's. */
static void test_split_write_reply(void)
{
    coai_responses_request rr;
    coai_reply r;
    coai_msg m;
    coai_buf content = { 0 };
    const coai_reply_call *calls;
    size_t n, i;
    int stream, failed = 0;
    while (content.len < 150 * 1024) coai_buf_puts(&content, "0123456789abcdef\n");
    for (stream = 0; stream < 2; stream++) {
        reply_start(&r, &rr, stream ? "{\"input\":\"x\",\"stream\":true,\"tools\":" CODEX_TOOLS
                    "]}" : "{\"input\":\"x\",\"tools\":" CODEX_TOOLS "]}", stream);
        memset(&m, 0, sizeof m);
        m.kind = COAI_MSG_EXEC;
        m.exec.kind = COAI_EXEC_WRITE;
        m.exec.id = 9;
        m.exec.exec_id = coai_str_c("exec-9");
        m.exec.path = coai_str_c("big.txt");
        m.exec.content.ptr = (const char *)content.data;
        m.exec.content.len = content.len;
        CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
        CHECK(coai_reply_tool_called(&r));
        n = coai_reply_calls(&r, &calls);
        CHECKF(n == 3, "%zu calls", n);
        for (i = 0; i < n; i++) {
            char want[64];
            snprintf(want, sizeof want, "sess_respabc__call_exec9_part%zu", i + 1);
            CHECKF(calls[i].call_id.len == strlen(want)
                   && !memcmp(calls[i].call_id.ptr, want, strlen(want)), "%.*s",
                   (int)calls[i].call_id.len, calls[i].call_id.ptr);
            CHECK(calls[i].ref.id == 9 && calls[i].ref.part == i && calls[i].ref.parts == 3);
            CHECK(calls[i].ref.kind == COAI_EXEC_WRITE
                  && calls[i].ref.write_size == (int64_t)content.len);
            CHECK(coai_str_eq(calls[i].tool, "exec_command"));
        }
        {
            coai_str items = coai_reply_output_items(&r);
            size_t c = 0;
            const char *p = items.ptr;
            while (p && (p = strstr(p, "\"type\":\"function_call\"")) != NULL) { c++; p++; }
            CHECKF(c == 3, "%zu function_call items", c);
        }
        coai_reply_free(&r);
        coai_responses_request_free(&rr);
    }
    /* the one result: all parts succeed -> the last part's outcome only */
    {
        coai_exec_ref x;
        coai_exec_outcome oc;
        const char *ok = "Chunk ID: a1\nWall time: 0.01 seconds\nProcess exited with code 0\n"
                         "Output:\n";
        const char *bad = "Chunk ID: a2\nWall time: 0.01 seconds\nProcess exited with code 1\n"
                          "Output:\nmv: cannot move: No space left on device\n";
        int sent[3], k;
        memset(&x, 0, sizeof x);
        memset(&oc, 0, sizeof oc);
        x.kind = COAI_EXEC_WRITE;
        x.parts = 3;
        for (k = 0; k < 3; k++) {
            x.part = (unsigned)k;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"), coai_str_c(ok),
                                          0) == 0);
            sent[k] = coai_exec_part_answers(&x, oc.is_error, &failed);
        }
        CHECK(sent[0] == 0 && sent[1] == 0 && sent[2] == 1);
        /* part 2 of 3 fails: its outcome (the error) is the one sent, nothing after it */
        for (k = 0; k < 3; k++) {
            x.part = (unsigned)k;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"),
                                          coai_str_c(k == 1 ? bad : ok), 0) == 0);
            sent[k] = coai_exec_part_answers(&x, oc.is_error, &failed);
            if (k == 1) {
                CHECK(oc.is_error && oc.exit_code == 1 && oc.out.len == 0);
                CHECK(oc.err.len && strstr(oc.err.ptr, "No space left") != NULL);
            }
        }
        CHECK(sent[0] == 0 && sent[1] == 1 && sent[2] == 0);
        /* both the first and the last fail: the first only */
        for (k = 0; k < 3; k++) {
            x.part = (unsigned)k;
            sent[k] = coai_exec_part_answers(&x, k != 1, &failed);
        }
        CHECK(sent[0] == 1 && sent[1] == 0 && sent[2] == 0);
        /* a part Codex refused to run (no exit code, the command quoted): a failure, its
         * text cut to 4 KiB ... */
        {
            coai_buf rej = { 0 };
            coai_buf_puts(&rej, "exec_command failed: CreateProcess { message: \"Rejected(\\\"`");
            while (rej.len < 90000) coai_buf_puts(&rej, "QUJDREVGR0g=");
            coai_buf_puts(&rej, "` rejected: rm -f style commands are not permitted\") }");
            x.part = 0;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"),
                                          coai_str_c((const char *)rej.data), 0) == 0);
            CHECK(oc.is_error && oc.err.len == 4096 && oc.out.len == 0);
            CHECK(!memcmp(oc.err.ptr, "exec_command failed", 19));
            CHECK(coai_exec_part_answers(&x, oc.is_error, &failed) == 1);
            x.parts = 0;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"),
                                          coai_str_c((const char *)rej.data), 0) == 0);
            CHECK(oc.is_error && oc.err.len == 4096 && oc.out.len == 0);
            /* ... which is a failure for any write through Codex's shell, split or not
             * (before: a success), and stays text for a shell exec or a write tool */
            x.kind = COAI_EXEC_DELETE;        /* a refused delete deleted nothing */
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"),
                                          coai_str_c((const char *)rej.data), 0) == 0);
            CHECK(oc.is_error && oc.err.len == 4096 && oc.out.len == 0);
            x.kind = COAI_EXEC_SHELL;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("exec_command"),
                                          coai_str_c((const char *)rej.data), 0) == 0);
            CHECK(!oc.is_error && oc.out.len == rej.len);
            x.kind = COAI_EXEC_WRITE;
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("shell_command"),
                                          coai_str_c("exec failed"), 0) == 0);
            CHECK(oc.is_error && oc.err.len == 11);
            CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("write"),
                                          coai_str_c("Wrote big.txt"), 0) == 0);
            CHECK(!oc.is_error && oc.out.len == 13);
            x.parts = 3;
            coai_buf_free(&rej);
        }
        /* a call that is not split: always */
        x.parts = 0; x.part = 0;
        CHECK(coai_exec_part_answers(&x, 0, &failed) == 1);
        CHECK(coai_exec_part_answers(&x, 1, &failed) == 1);
        coai_exec_outcome_free(&oc);
    }
    coai_buf_free(&content);
}

int main(void)
{
    test_parse();
    test_errors();
    test_issue29();
    test_exec_map();
    test_writer_stream();
    test_writer_tool_calls();
    test_writer_errors();
    test_compaction();
    test_big_write();
    test_split_write();
    test_split_write_reply();
    TEST_END();
}
