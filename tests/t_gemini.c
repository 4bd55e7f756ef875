/* t_gemini.c - the Gemini API dialect on the neutral core: request parsing (Gemini CLI's
 * shapes: systemInstruction, functionCall / functionResponse with and without ids, thought
 * parts, parametersJsonSchema and OpenAPI-typed parameters, toolConfig, generationConfig),
 * Gemini CLI's shell result read into an exit code and output, the writer in its three shapes
 * (JSON, SSE, JSON array) with thoughts, function calls and usageMetadata, Google's error shape
 * (the usage limit Gemini CLI stops on), the exec mapping onto Gemini CLI's tools, and the shell
 * answer with the real exit code. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include "pbwalk.h"
#include <cJSON.h>

static int sink_send(void *user, const unsigned char *msg, size_t n)
{
    (void)user;
    (void)msg;
    (void)n;
    return 0;
}

static int parse(coai_request *q, const char *body, int stream, coai_error *e)
{
    return coai_gemini_parse(q, body, strlen(body), coai_str_c("models/gemini-2.5-pro"), stream,
                             e);
}

/* ---- requests ------------------------------------------------------------------------- */

static void test_request(void)
{
    coai_request q;
    coai_error e;
    coai_buf res = { 0 };
    int iserr = -1;
    const char *body =
        "{\"contents\":["
        "{\"role\":\"user\",\"parts\":[{\"text\":\"<session_context>ws</session_context>\"},"
        "{\"text\":\"Run it.\"}]},"
        "{\"role\":\"model\",\"parts\":[{\"text\":\"plan\",\"thought\":true},"
        "{\"functionCall\":{\"id\":\"sess_ab12__call_x1\",\"name\":\"run_shell_command\","
        "\"args\":{\"command\":\"exit 3\"}},\"thoughtSignature\":\"sig\"}]},"
        "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"id\":\"sess_ab12__call_x1\","
        "\"name\":\"run_shell_command\",\"response\":{\"output\":\"<untrusted_context>\\n"
        "Output: oops\\nExit Code: 3\\nProcess Group PGID: 77\\n</untrusted_context>\"}}}]},"
        "{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"read_file\","
        "\"args\":{\"file_path\":\"a\"}}}]},"
        "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"read_file\","
        "\"response\":{\"error\":\"no such file\"}}}]}],"
        "\"systemInstruction\":{\"parts\":[{\"text\":\"You are Gemini CLI.\"}]},"
        "\"tools\":[{\"functionDeclarations\":[{\"name\":\"read_file\",\"description\":\"Read\","
        "\"parametersJsonSchema\":{\"type\":\"object\",\"properties\":{\"file_path\":"
        "{\"type\":\"string\"}}}},{\"name\":\"old\",\"parameters\":{\"type\":\"OBJECT\","
        "\"properties\":{\"n\":{\"type\":\"INTEGER\"}}}}]},{\"googleSearch\":{}}],"
        "\"generationConfig\":{\"temperature\":1,\"topK\":64,\"thinkingConfig\":"
        "{\"includeThoughts\":true},\"maxOutputTokens\":500,\"stopSequences\":[\"END\"]}}";
    const char *want =
        "You are Gemini CLI.\n\nUser: <session_context>ws</session_context>\nRun it.\n\n"
        "Assistant: [Called tool: run_shell_command({\"command\":\"exit 3\"})]\n\n"
        "[Tool result for sess_ab12__call_x1]: <untrusted_context>\nOutput: oops\nExit Code: 3\n"
        "Process Group PGID: 77\n</untrusted_context>\n\n"
        "Assistant: [Called tool: read_file({\"file_path\":\"a\"})]\n\n"
        "[Tool result for read_file (error)]: no such file\n\n";
    CHECK(parse(&q, body, 1, &e) == 0);
    CHECK(q.dialect == COAI_DIALECT_GEMINI && q.stream == 1);
    CHECK(coai_str_eq(q.model, "gemini-2.5-pro"));
    CHECKF(q.prompt.len >= strlen(want) && memcmp(q.prompt.data, want, strlen(want)) == 0,
           "prompt: %s", q.prompt.data);
    CHECK(q.tool_count == 2 && coai_str_eq(q.tools[0].name, "read_file"));
    CHECK(q.tools[1].parameters && strcmp(cJSON_GetObjectItemCaseSensitive(
              (cJSON *)q.tools[1].parameters, "type")->valuestring, "object") == 0);
    CHECK(coai_str_eq(q.session_id, "ab12") && q.has_tool_messages);
    CHECK(q.max_tokens == 500 && q.stop_count == 1 && coai_str_eq(q.stop[0], "END"));
    CHECK(q.thinking == -1);
    /* the thought went in as THINKING, not prompt text */
    CHECK(!strstr((const char *)q.prompt.data, "plan"));
    /* the results keep the client's text (coai_exec_outcome_parse reads it later) */
    CHECK(coai_request_tool_result(&q, coai_str_c("sess_ab12__call_x1"), &res, &iserr) == 0
          && iserr == 0 && strncmp((const char *)res.data, "<untrusted_context>\nOutput: oops", 32)
          == 0);
    coai_buf_reset(&res);
    CHECK(coai_request_tool_result(&q, coai_str_c("read_file"), &res, &iserr) == 0 && iserr == 1
          && strcmp((const char *)res.data, "no such file") == 0);
    coai_buf_free(&res);
    coai_request_free(&q);
    /* the table's parser: model "auto", no stream */
    CHECK(coai_request_parse(&q, COAI_DIALECT_GEMINI, body, strlen(body), &e) == 0);
    CHECK(coai_str_eq(q.model, "auto") && q.stream == 0);
    coai_request_free(&q);
}

static int SHELL_ERR;   /* the last shell_of's outcome is_error */
static char SHELL_ERRTXT[512];

/* Gemini CLI's run_shell_command result read the way held runs read it: 1 with the output
 * and exit code, 0 when no exit code came out (SHELL_ERR: a failure). */
static int shell_of(const char *text, coai_str *out, int *code)
{
    static char keep[512];
    coai_exec_outcome o;
    coai_exec_ref x;
    int r;
    memset(&o, 0, sizeof o);
    memset(&x, 0, sizeof x);
    x.kind = COAI_EXEC_SHELL_STREAM;
    if (coai_exec_outcome_parse(&o, &x, coai_str_c("run_shell_command"), coai_str_c(text), 0))
        return -1;
    r = o.has_exit;
    *code = o.exit_code;
    snprintf(keep, sizeof keep, "%.*s", (int)o.out.len, o.out.ptr ? o.out.ptr : "");
    snprintf(SHELL_ERRTXT, sizeof SHELL_ERRTXT, "%.*s", (int)o.err.len, o.err.ptr ? o.err.ptr : "");
    out->ptr = keep;
    out->len = strlen(keep);
    SHELL_ERR = o.is_error;
    coai_exec_outcome_free(&o);
    return r;
}

static void test_shell_results(void)
{
    coai_str o;
    int c = -9;
    CHECK(shell_of("<untrusted_context>\nOutput: hi\nnotes.txt\nProcess Group PGID: 1\n"
                   "</untrusted_context>", &o, &c) == 1 && c == 0
          && coai_str_eq(o, "hi\nnotes.txt"));
    CHECK(shell_of("Output: a\nExit Code: 3\nProcess Group PGID: 9", &o, &c) == 1 && c == 3
          && coai_str_eq(o, "a"));
    CHECK(shell_of("Output: (empty)\nExit Code: 127", &o, &c) == 1 && c == 127 && o.len == 0);
    CHECK(shell_of("Output: x\nExit Code: 2\nBackground PIDs: 5, 6\nProcess Group PGID: 9", &o,
                   &c) == 1 && c == 2 && coai_str_eq(o, "x"));
    /* a line inside the output that looks like a section stays output */
    CHECK(shell_of("Output: Exit Code: 5\nreal\nExit Code: 1", &o, &c) == 1 && c == 1
          && coai_str_eq(o, "Exit Code: 5\nreal"));
    CHECK(shell_of("Output: x\nExit Code: 3", &o, &c) == 1 && SHELL_ERR && coai_str_eq(o, "x"));
    CHECK(shell_of("Output: x\nProcess Group PGID: 4", &o, &c) == 1 && !SHELL_ERR && c == 0);
    /* a signal, a spawn error, a cancel: no exit code to report -> the text goes as a failure */
    CHECK(shell_of("Output: x\nSignal: 9\nProcess Group PGID: 9", &o, &c) == 0 && SHELL_ERR
          && strstr(SHELL_ERRTXT, "Signal: 9"));
    CHECK(shell_of("Output: \nError: spawn bash ENOENT\nExit Code: 1", &o, &c) == 0 && SHELL_ERR);
    CHECK(shell_of("Command was cancelled by user before it could complete.", &o, &c) == 0
          && SHELL_ERR);
    CHECK(shell_of("Command was automatically cancelled because it exceeded the timeout", &o,
                   &c) == 0 && SHELL_ERR);
    /* Qwen Code's own timeout text is not Gemini CLI's: left as it is */
    CHECK(shell_of("Command timed out after 5ms before it could complete.", &o, &c) == 0
          && !SHELL_ERR);
    CHECK(shell_of("Something else", &o, &c) == 0 && !SHELL_ERR);
    CHECK(shell_of("Output: x\nExit Code: 3x", &o, &c) == 0);
    CHECK(shell_of("<untrusted_context>\nOutput: x", &o, &c) == 0);
}

static void test_options(void)
{
    coai_request q;
    coai_error e;
    const char *tools = "\"tools\":[{\"functionDeclarations\":[{\"name\":\"a\"},"
                        "{\"name\":\"b\"}]}]";
    char body[1024];
    snprintf(body, sizeof body, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],%s,"
             "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"NONE\"}}}", tools);
    CHECK(parse(&q, body, 0, &e) == 0 && q.tool_count == 0 && q.tools_disabled);
    coai_request_free(&q);
    snprintf(body, sizeof body, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],%s,"
             "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
             "\"allowedFunctionNames\":[\"b\"]}}}", tools);
    CHECK(parse(&q, body, 0, &e) == 0 && q.tool_count == 1 && coai_str_eq(q.tools[0].name, "b")
          && q.tool_choice == COAI_TOOL_CHOICE_TOOL);
    coai_request_free(&q);
    snprintf(body, sizeof body, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],%s,"
             "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\"}}}", tools);
    CHECK(parse(&q, body, 0, &e) == 0 && q.tool_count == 2
          && q.tool_choice == COAI_TOOL_CHOICE_ANY);
    coai_request_free(&q);
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"generationConfig\":"
                "{\"thinkingConfig\":{\"thinkingBudget\":0},\"responseMimeType\":"
                "\"application/json\",\"responseSchema\":{\"type\":\"OBJECT\",\"required\":"
                "[\"a\"]}}}", 0, &e) == 0);
    CHECK(q.thinking == 0 && q.response_json == 1 && q.response_schema);
    coai_request_free(&q);
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"generationConfig\":"
                "{\"thinkingConfig\":{\"thinkingBudget\":1024}}}", 0, &e) == 0);
    CHECK(q.thinking == 1 && q.thinking_budget == 1024);
    coai_request_free(&q);
    /* refusals: a clear 400 */
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"generationConfig\":"
                "{\"candidateCount\":2}}", 0, &e) == COAI_ERR_INVALID && e.status == 400
          && strstr(e.message, "candidateCount"));
    CHECK(parse(&q, "{\"contents\":[]}", 0, &e) == COAI_ERR_INVALID && strstr(e.message,
                                                                               "contents"));
    CHECK(parse(&q, "{\"contents\":[{\"role\":\"system\",\"parts\":[{\"text\":\"x\"}]}]}", 0, &e)
          == COAI_ERR_INVALID && strstr(e.message, "role"));
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"fileData\":{\"fileUri\":\"gs://x\"}}]}]}", 0,
                &e) == COAI_ERR_INVALID && strstr(e.message, "fileData"));
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"bogus\":1}]}]}", 0, &e) == COAI_ERR_INVALID);
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"cachedContent\":\"c/1\"}",
                0, &e) == COAI_ERR_INVALID);
    CHECK(parse(&q, "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"functionCall\":"
                "{\"name\":\"a\"}}]}]}", 0, &e) == COAI_ERR_INVALID);
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"tools\":[{"
                "\"functionDeclarations\":[{\"name\":\"bad name\"}]}]}", 0, &e)
          == COAI_ERR_INVALID);
    /* an image */
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"inlineData\":{\"mimeType\":\"image/png\","
                "\"data\":\"iVBORw0KGgo=\"}}]}]}", 0, &e) == 0 && q.message_count == 1
          && q.messages[0].parts[0].kind == COAI_PART_IMAGE);
    coai_request_free(&q);
}

/* ---- issue 29: Google's 400s, and errors that name the client's own fields ------------- */

/* body must parse and then fail coai_request_check (the image decoding) with the param
 * and the message naming want */
static void image_error_names(const char *body, const char *want)
{
    coai_request q;
    coai_error e;
    int rc = parse(&q, body, 0, &e);
    CHECKF(rc == 0, "parse %d: %s", rc, e.message);
    if (rc) return;
    rc = coai_request_check(&q, NULL, &e);
    CHECKF(rc < 0 && strcmp(e.param, want) == 0 && strstr(e.message, want)
           && !strstr(e.message, "messages["), "%d param '%s' message '%s'", rc, e.param,
           e.message);
    if (rc == 0) coai_request_free(&q);
}

static void refused(const char *body, const char *want)
{
    coai_request q;
    coai_error e;
    int rc = parse(&q, body, 0, &e);
    CHECKF(rc == COAI_ERR_INVALID && e.status == 400 && strstr(e.message, want),
           "rc %d message '%s' (wanted '%s')", rc, rc ? e.message : "", want);
    if (rc == 0) coai_request_free(&q);
}

static void test_google_rules(void)
{
    coai_request q;
    coai_error e;
    char out[256];
    const char *U = "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],";
    char body[1024];
    /* allowedFunctionNames naming an undeclared function (the tools used to vanish) */
    snprintf(body, sizeof body, "%s\"tools\":[{\"functionDeclarations\":[{\"name\":\"a\"}]}],"
             "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
             "\"allowedFunctionNames\":[\"a\",\"nope\"]}}}", U);
    refused(body, "allowedFunctionNames[1]: 'nope' is not the name of a function declaration");
    snprintf(body, sizeof body, "%s\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
             "\"allowedFunctionNames\":[\"a\"]}}}", U);
    refused(body, "'a' is not the name of a function declaration");
    /* duplicate declaration names */
    snprintf(body, sizeof body, "%s\"tools\":[{\"functionDeclarations\":[{\"name\":\"a\"}]},"
             "{\"functionDeclarations\":[{\"name\":\"b\"},{\"name\":\"a\"}]}]}", U);
    refused(body, "tools[1].functionDeclarations[1].name: Duplicate function declaration "
                  "found: a");
    /* functionResponse.response must be an object (Google's Struct) */
    refused("{\"contents\":[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]},"
            "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"f\",\"response\":"
            "\"done\"}}]}]}", "contents[1].parts[0].functionResponse.response: must be a JSON "
            "object");
    refused("{\"contents\":[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]},"
            "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"f\",\"response\":"
            "[1]}}]}]}", "functionResponse.response: must be a JSON object");
    /* a functionResponse with no function call turn right before it */
    refused("{\"contents\":[{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"f\","
            "\"response\":{}}}]}]}", "contents[0].parts[0].functionResponse: Please ensure "
            "that function response turn comes immediately after a function call turn");
    refused("{\"contents\":[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]},"
            "{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]},{\"role\":\"user\",\"parts\":"
            "[{\"text\":\"t\"},{\"functionResponse\":{\"name\":\"f\",\"response\":{}}}]}]}",
            "contents[2].parts[1].functionResponse: Please ensure");
    /* ... and the proper order still parses */
    CHECK(parse(&q, "{\"contents\":[{\"parts\":[{\"text\":\"go\"}]},{\"role\":\"model\","
                "\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]},{\"role\":\"user\",\"parts\":"
                "[{\"functionResponse\":{\"name\":\"f\",\"response\":{\"output\":\"ok\"}}}]}]}",
                0, &e) == 0 && q.message_count == 3);
    coai_request_free(&q);
    /* responseSchema that is not an object: 400 before the run */
    snprintf(body, sizeof body, "%s\"generationConfig\":{\"responseMimeType\":"
             "\"application/json\",\"responseSchema\":\"x\"}}", U);
    refused(body, "generationConfig.responseSchema: must be an object");
    snprintf(body, sizeof body, "%s\"generationConfig\":{\"responseJsonSchema\":[1]}}", U);
    refused(body, "generationConfig.responseJsonSchema: must be an object");
    /* responseMimeType outside Google's list */
    snprintf(body, sizeof body, "%s\"generationConfig\":{\"responseMimeType\":"
             "\"application/jsonx\"}}", U);
    refused(body, "generationConfig.responseMimeType: allowed mimetypes are");
    snprintf(body, sizeof body, "%s\"generationConfig\":{\"responseMimeType\":"
             "\"text/plain\"}}", U);
    CHECK(parse(&q, body, 0, &e) == 0 && !q.response_json);
    coai_request_free(&q);
    /* image errors name Gemini's fields, not the neutral messages[0].content[0] */
    image_error_names("{\"contents\":[{\"parts\":[{\"inlineData\":{\"mimeType\":\"image/png\","
                      "\"data\":\"AAAA\"}}]}]}", "contents[0].parts[0].inlineData");
    image_error_names("{\"contents\":[{\"parts\":[{\"text\":\"go\"}]},{\"role\":\"model\","
                      "\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]},{\"role\":\"user\","
                      "\"parts\":[{\"text\":\"see\"},{\"functionResponse\":{\"name\":\"f\","
                      "\"response\":{},\"parts\":[{\"inlineData\":{\"mimeType\":\"image/png\","
                      "\"data\":\"bm90IGFuIGltYWdl\"}}]}}]}]}",
                      "contents[2].parts[1].functionResponse.parts[0].inlineData");
    /* the model of the URL: a control byte or an overlong name is refused, not cut */
    CHECK(coai_gemini_url_model(coai_str_c("gemini-2.5-pro"), out, sizeof out) == 0
          && strcmp(out, "gemini-2.5-pro") == 0);
    CHECK(coai_gemini_url_model(coai_str_c("a%3Ab%2f"), out, sizeof out) == 0
          && strcmp(out, "a:b/") == 0);
    CHECK(coai_gemini_url_model(coai_str_c("%00"), out, sizeof out) < 0 && !out[0]);
    CHECK(coai_gemini_url_model(coai_str_c("a%0d%0aX"), out, sizeof out) < 0);
    CHECK(coai_gemini_url_model(coai_str_c("a\tb"), out, sizeof out) < 0);
    CHECK(coai_gemini_url_model(coai_str_c("a%7F"), out, sizeof out) < 0);
    CHECK(coai_gemini_url_model(coai_str_c("abcd"), out, 4) < 0
          && coai_gemini_url_model(coai_str_c("abc"), out, 4) == 0);
    CHECK(coai_gemini_url_model(coai_str_c("50%"), out, sizeof out) == 0
          && strcmp(out, "50%") == 0);
}

/* ---- errors ---------------------------------------------------------------------------- */

static void test_errors(void)
{
    coai_error e;
    coai_buf b = { 0 };
    cJSON *j, *err;
    coai_error_set(&e, 400, "invalid_request_error", NULL, NULL, "bad \"thing\"");
    coai_error_write_as(&b, &e, COAI_DIALECT_GEMINI);
    j = cJSON_Parse((const char *)b.data);
    err = cJSON_GetObjectItemCaseSensitive(j, "error");
    CHECK(err && cJSON_GetObjectItemCaseSensitive(err, "code")->valueint == 400);
    CHECK(strcmp(cJSON_GetObjectItemCaseSensitive(err, "status")->valuestring,
                 "INVALID_ARGUMENT") == 0);
    CHECK(strcmp(cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring,
                 "bad \"thing\"") == 0);
    CHECK(coai_error_status_as(&e, COAI_DIALECT_GEMINI) == 400);
    cJSON_Delete(j);
    coai_buf_reset(&b);
    coai_error_set(&e, 429, "insufficient_quota", "insufficient_quota", NULL,
                   "You've hit your usage limit");
    coai_error_write_as(&b, &e, COAI_DIALECT_GEMINI);
    CHECKF(strstr((const char *)b.data, "limit: 0") && strstr((const char *)b.data,
           "RESOURCE_EXHAUSTED") && strstr((const char *)b.data, "google.rpc.QuotaFailure")
           && strstr((const char *)b.data, "google.rpc.ErrorInfo"), "%s", b.data);
    j = cJSON_Parse((const char *)b.data);
    CHECK(j != NULL);
    cJSON_Delete(j);
    coai_buf_reset(&b);
    coai_error_set(&e, 429, "requests", "rate_limit_exceeded", NULL, "slow down");
    e.retry_after = 10;
    coai_error_write_as(&b, &e, COAI_DIALECT_GEMINI);
    CHECK(strstr((const char *)b.data, "\"retryDelay\":\"10s\"") && !strstr((const char *)b.data,
                                                                             "limit: 0"));
    coai_buf_reset(&b);
    coai_error_set(&e, 401, "authentication_error", NULL, NULL, "no");
    coai_error_write_as(&b, &e, COAI_DIALECT_GEMINI);
    CHECK(strstr((const char *)b.data, "\"status\":\"UNAUTHENTICATED\""));
    coai_buf_free(&b);
}

/* ---- the writer ------------------------------------------------------------------------ */

static void feed_text(coai_reply *r, coai_msg_kind k, const char *s)
{
    coai_msg m;
    memset(&m, 0, sizeof m);
    m.kind = k;
    m.text = coai_str_c(s);
    coai_reply_feed_msg(r, &m);
}

static void reply_init(coai_reply *r, int stream, const coai_tool *tools, size_t n)
{
    coai_reply_opts o;
    memset(&o, 0, sizeof o);
    o.dialect = COAI_DIALECT_GEMINI;
    o.stream = stream;
    o.completion_id = coai_str_c("abc123");
    o.model = coai_str_c("gpt-5");
    o.send = sink_send;
    o.tools = tools;
    o.tool_count = n;
    o.session_id = coai_str_c("s1");
    o.prompt = coai_str_c("hello there, model");
    CHECK(coai_reply_init(r, &o) == 0);
}

static void test_writer(void)
{
    coai_reply r;
    coai_msg m;
    coai_buf h = { 0 };
    cJSON *j, *arr;
    const char *o;
    coai_tool t;
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"dir_path\":"
                             "{\"type\":\"string\"}}}");
    /* non-stream: thought + text parts, finishReason, usage, modelVersion, responseId */
    reply_init(&r, 0, NULL, 0);
    feed_text(&r, COAI_MSG_THINKING, "think");
    feed_text(&r, COAI_MSG_TEXT, "Hi \xe2\x80\xa8 there");
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_TURN_ENDED;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    o = (const char *)r.out.data;
    j = cJSON_Parse(o);
    CHECKF(j != NULL, "%s", o);
    CHECKF(strstr(o, "{\"text\":\"think\",\"thought\":true},{\"text\":\"Hi \\u2028 there\"}")
           && strstr(o, "\"finishReason\":\"STOP\"") && strstr(o, "\"modelVersion\":\"gpt-5\"")
           && strstr(o, "\"responseId\":\"abc123\"") && strstr(o, "\"thoughtsTokenCount\":2"),
           "%s", o);
    cJSON_Delete(j);
    coai_reply_head(&r, &h);
    CHECK(strstr((const char *)h.data, "application/json"));
    coai_buf_reset(&h);
    coai_reply_free(&r);
    /* SSE: one "data: {...}\r\n\r\n" per delta, a bare CRLF keepalive, the last chunk */
    reply_init(&r, 1, NULL, 0);
    feed_text(&r, COAI_MSG_TEXT, "A");
    coai_reply_keepalive(&r);
    feed_text(&r, COAI_MSG_TEXT, "B");
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_TURN_ENDED;
    coai_reply_feed_msg(&r, &m);
    o = (const char *)r.out.data;
    {
        const char *first = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":"
                            "[{\"text\":\"A\"}]},\"index\":0}]";
        CHECKF(strncmp(o, first, strlen(first)) == 0, "%s", o);
    }
    CHECKF(strstr(o, "}\r\n\r\n\r\ndata: ") != NULL, "%s", o);
    CHECKF(strstr(o, "{\"text\":\"\"}]},\"finishReason\":\"STOP\"") != NULL, "%s", o);
    coai_reply_head(&r, &h);
    CHECK(strstr((const char *)h.data, "text/event-stream"));
    coai_buf_reset(&h);
    coai_reply_free(&r);
    /* the JSON array stream with a function call */
    memset(&t, 0, sizeof t);
    t.name = coai_str_c("list_directory");
    t.parameters = sch;
    reply_init(&r, 2, &t, 1);
    feed_text(&r, COAI_MSG_TEXT, "Listing.");
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_EXEC;
    m.exec.kind = COAI_EXEC_LS;
    m.exec.id = 4;
    m.exec.exec_id = coai_str_c("exec-4");
    m.exec.path = coai_str_c("/w");
    m.exec.has_path = 1;
    CHECK(coai_reply_feed_msg(&r, &m) == COAI_DONE);
    o = (const char *)r.out.data;
    arr = cJSON_Parse(o);
    CHECKF(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 2, "%s", o);
    CHECKF(strstr(o, "{\"functionCall\":{\"id\":\"sess_s1__call_exec4\",\"name\":"
                  "\"list_directory\",\"args\":{\"dir_path\":\"/w\"}}}]},\"finishReason\":\"STOP\"")
           != NULL, "%s", o);
    cJSON_Delete(arr);
    coai_reply_head(&r, &h);
    CHECK(strstr((const char *)h.data, "application/json"));
    coai_reply_free(&r);
    /* an error after the first byte: an error chunk */
    reply_init(&r, 1, NULL, 0);
    feed_text(&r, COAI_MSG_TEXT, "A");
    {
        coai_error e;
        coai_error_set(&e, 502, "upstream_error", "upstream_truncated", NULL, "cut");
        coai_reply_feed_error(&r, &e);
    }
    CHECKF(strstr((const char *)r.out.data, "data: {\"error\":{\"code\":502,\"message\":\"cut\","
                  "\"status\":\"INTERNAL\"}}\r\n\r\n") != NULL, "%s", r.out.data);
    coai_reply_free(&r);
    coai_buf_free(&h);
    cJSON_Delete(sch);
}

/* ---- exec mapping ---------------------------------------------------------------------- */

static cJSON *G_SCH[8];

static size_t cli_tools(coai_tool *t)
{
    static const char *const names[] = { "read_file", "write_file", "run_shell_command",
                                         "grep_search", "glob", "list_directory" };
    static const char *const sch[] = {
        "{\"type\":\"object\",\"properties\":{\"file_path\":{},\"start_line\":{}},"
        "\"required\":[\"file_path\"]}",
        "{\"type\":\"object\",\"properties\":{\"file_path\":{},\"content\":{}}}",
        "{\"type\":\"object\",\"properties\":{\"command\":{},\"description\":{},"
        "\"dir_path\":{},\"is_background\":{}}}",
        "{\"type\":\"object\",\"properties\":{\"pattern\":{},\"dir_path\":{},"
        "\"include_pattern\":{}}}",
        "{\"type\":\"object\",\"properties\":{\"pattern\":{},\"dir_path\":{}}}",
        "{\"type\":\"object\",\"properties\":{\"dir_path\":{}}}" };
    size_t i;
    for (i = 0; i < 6; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = coai_str_c(names[i]);
        if (!G_SCH[i]) G_SCH[i] = cJSON_Parse(sch[i]);
        t[i].parameters = G_SCH[i];
    }
    return 6;
}

static int map(const coai_exec *ex, const coai_tool *t, size_t n, char *out, size_t cap,
               size_t *tool)
{
    coai_tool_call tc;
    int r;
    memset(&tc, 0, sizeof tc);
    r = coai_gemini_exec_map(ex, t, n, coai_str_c("/proxy/ws"), &tc);
    snprintf(out, cap, "%.*s", (int)tc.args.len, tc.args.data ? (const char *)tc.args.data : "");
    *tool = tc.tool;
    coai_buf_free(&tc.args);
    return r;
}

static void test_exec_map(void)
{
    coai_tool t[6];
    size_t n = cli_tools(t), k = 99;
    coai_exec ex;
    char a[512];
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_SHELL_STREAM;
    ex.command = coai_str_c("ls");
    ex.cwd = coai_str_c("/proxy/ws");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 2);
    CHECKF(strcmp(a, "{\"command\":\"ls\",\"description\":\"Execute shell command: ls\"}") == 0,
           "%s", a);
    ex.description = coai_str_c("List the files");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1
          && strcmp(a, "{\"command\":\"ls\",\"description\":\"List the files\"}") == 0);
    ex.description = coai_str_c("");
    ex.cwd = coai_str_c("/proxy/ws/src/");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1);
    CHECKF(strstr(a, ",\"dir_path\":\"src\"}") != NULL, "%s", a);
    ex.cwd = coai_str_c("/elsewhere");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && strstr(a, "\"dir_path\":\"/elsewhere\""));
    ex.cwd = coai_str_c("/proxy/wsx");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && strstr(a, "\"dir_path\":\"/proxy/wsx\""));
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_READ;
    ex.path = coai_str_c("/w/a.txt");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 0
          && strcmp(a, "{\"file_path\":\"/w/a.txt\"}") == 0);
    ex.kind = COAI_EXEC_WRITE;
    ex.content = coai_str_c("x\n");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 1
          && strcmp(a, "{\"file_path\":\"/w/a.txt\",\"content\":\"x\\n\"}") == 0);
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_GREP;
    ex.pattern = coai_str_c("TODO");
    ex.glob = coai_str_c("*.c");
    ex.path = coai_str_c("/w");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 3);
    CHECKF(strcmp(a, "{\"pattern\":\"TODO\",\"dir_path\":\"/w\",\"include_pattern\":\"*.c\"}")
           == 0, "%s", a);
    ex.pattern = coai_str_c("");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 4
          && strcmp(a, "{\"pattern\":\"*.c\",\"dir_path\":\"/w\"}") == 0);
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_LS;
    ex.path = coai_str_c("/w");
    ex.has_path = 1;
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 5
          && strcmp(a, "{\"dir_path\":\"/w\"}") == 0);
    /* no delete tool: the shell does it */
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_DELETE;
    ex.path = coai_str_c("/w/old.txt");
    CHECK(map(&ex, t, n, a, sizeof a, &k) == 1 && k == 2);
    CHECKF(strstr(a, "\"command\":\"wc -c < '/w/old.txt' && rm -- '/w/old.txt'\"") != NULL,
           "%s", a);
}

/* ---- the shell answer with the real exit code ------------------------------------------ */

/* The payload of the field path f[0] > f[1] > ... (length-delimited), or the varint at its end. */
static int pb_path(const uint8_t *p, size_t n, const uint32_t *f, size_t depth, uint64_t *v,
                   const uint8_t **sub, size_t *subn)
{
    size_t pos = 0;
    pbw_field fl;
    while (pbw_next(p, n, &pos, &fl) == 1) {
        if (fl.num != f[0]) continue;
        if (depth == 1) {
            if (v) *v = fl.v;
            if (sub) { *sub = fl.p; *subn = fl.n; }
            return 1;
        }
        if (fl.wire == 2) return pb_path(fl.p, fl.n, f + 1, depth - 1, v, sub, subn);
    }
    return 0;
}

static void test_shell_answer(void)
{
    coai_exec_ref x;
    coai_exec_outcome oc;
    coai_buf b = { 0 };
    uint64_t v = 99;
    const uint8_t *s;
    size_t sn = 0;
    unsigned step;
    int got_exit = 0;
    static const uint32_t st_exit[] = { 2, 14, 3, 1 };    /* shell_stream > exit > code */
    static const uint32_t st_out[] = { 2, 14, 1, 1 };     /* shell_stream > stdout > data */
    static const uint32_t fail_code[] = { 2, 2, 2, 3 };   /* shell_result > failure > exit */
    static const uint32_t fail_out[] = { 2, 2, 2, 5 };
    const char *res = "<untrusted_context>\nOutput: oops\nExit Code: 3\nProcess Group PGID: 7\n"
                      "</untrusted_context>";
    memset(&x, 0, sizeof x);
    memset(&oc, 0, sizeof oc);
    x.kind = COAI_EXEC_SHELL_STREAM;
    x.id = 5;
    x.exec_id = coai_str_c("e5");
    x.command = coai_str_c("exit 3");
    CHECK(coai_exec_outcome_parse(&oc, &x, coai_str_c("run_shell_command"), coai_str_c(res), 0)
          == 0);
    CHECK(strcmp(oc.shape, "gemini-shell") == 0 && oc.has_exit && oc.exit_code == 3);
    for (step = 0; step < 6; step++) {
        coai_buf_reset(&b);
        if (coai_encode_exec_outcome(&b, &x, &oc, NULL, 0, 10, step) != COAI_OK) break;
        CHECK(pbw_walk(b.data, b.len));
        if (pb_path(b.data, b.len, st_exit, 4, &v, NULL, NULL)) got_exit = (int)v;
        if (pb_path(b.data, b.len, st_out, 4, NULL, &s, &sn))
            CHECK(sn == 4 && memcmp(s, "oops", 4) == 0);
    }
    CHECK(got_exit == 3);                       /* the real code, not 0 or 1 */
    x.kind = COAI_EXEC_SHELL;
    coai_buf_reset(&b);
    CHECK(coai_encode_exec_outcome(&b, &x, &oc, NULL, 0, 10, 0) == COAI_OK);
    CHECK(pb_path(b.data, b.len, fail_code, 4, &v, NULL, NULL) && v == 3);
    CHECK(pb_path(b.data, b.len, fail_out, 4, NULL, &s, &sn) && sn == 4 && !memcmp(s, "oops", 4));
    coai_exec_outcome_free(&oc);
    coai_buf_free(&b);
}

static void test_models(void)
{
    coai_models m;
    coai_buf b = { 0 };
    const char *list = "{\"models\":[{\"modelId\":\"gpt-5\",\"displayModelId\":\"gpt-5\","
                       "\"displayName\":\"GPT-5\"},{\"modelId\":\"claude-4.5-sonnet\"}]}";
    cJSON *j;
    CHECK(coai_models_parse(&m, list, strlen(list)) == 0);
    CHECK(coai_models_write_gemini(&b, &m, NULL) == 0);
    j = cJSON_Parse((const char *)b.data);
    CHECKF(j && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "models")) == 2, "%s",
           b.data);
    CHECK(strstr((const char *)b.data, "\"name\":\"models/gpt-5\"")
          && strstr((const char *)b.data, "\"displayName\":\"GPT-5\""));
    cJSON_Delete(j);
    coai_buf_reset(&b);
    CHECK(coai_models_write_gemini(&b, &m, &m.items[1]) == 0);
    CHECK(strncmp((const char *)b.data, "{\"name\":\"models/claude-4.5-sonnet\"", 34) == 0);
    coai_buf_free(&b);
    coai_models_free(&m);
}

int main(void)
{
    size_t i;
    test_request();
    test_shell_results();
    test_options();
    test_google_rules();
    test_errors();
    test_writer();
    test_exec_map();
    test_shell_answer();
    test_models();
    for (i = 0; i < 8; i++) cJSON_Delete(G_SCH[i]);
    TEST_END();
}
