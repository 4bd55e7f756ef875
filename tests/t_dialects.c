/* t_dialects.c - the dialect table (PART:DIALECTS): each client API's facts read from its row
 * (names, id prefix, credentials in the request, URL model and stream, count-tokens, the model
 * list's shape, a model by id or alias, the error shape and status). The toy fifth dialect of
 * the header's manual is compiled and run by tests/header_test.py. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <string.h>

/* The dialect table (PART:DIALECTS): every fact of a dialect from its row. */
static void test_dialect_table(void)
{
    static const char models_json[] =
        "{\"models\":[{\"modelId\":\"gpt-5\",\"displayModelId\":\"gpt-5-disp\","
        "\"aliases\":[\"g5\"]},{\"modelId\":\"claude-4.5-sonnet\"}]}";
    static const struct { coai_dialect d; const char *name, *pre; int hex; const char *kh, *kq,
                          *ch; int url, m404, stored; coai_model_names names; } rows[] = {
        { COAI_DIALECT_OPENAI_CHAT, "openai-chat", "chatcmpl-", 24, NULL, NULL, NULL, 0, 0, 0,
          COAI_MODEL_NAMES_CURSOR },
        { COAI_DIALECT_ANTHROPIC, "anthropic", "msg_", 24, "x-api-key", NULL,
          "anthropic-version", 0, 0, 0, COAI_MODEL_NAMES_CLAUDE },
        { COAI_DIALECT_RESPONSES, "openai-responses", "resp_", 32, NULL, NULL, NULL, 0, 0, 1,
          COAI_MODEL_NAMES_CURSOR },
        { COAI_DIALECT_GEMINI, "gemini", "", 24, "x-goog-api-key", "key", NULL, 1, 1, 0,
          COAI_MODEL_NAMES_GEMINI },
    };
#define STREQ_OR_NULL(a, b) ((a) == NULL ? (b) == NULL : (b) != NULL && strcmp((a), (b)) == 0)
    coai_models m;
    coai_buf out = { 0 };
    coai_error e;
    coai_request req;
    const coai_model *hit;
    char body[128];
    size_t i;
    for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const coai_dialect_info *di = coai_dialect_get(rows[i].d);
        CHECKF(di != NULL, "row %zu", i);
        if (!di) continue;
        CHECKF(strcmp(di->name, rows[i].name) == 0 && strcmp(di->id_prefix, rows[i].pre) == 0
               && di->id_hex == rows[i].hex, "%s", di->name);
        CHECKF(STREQ_OR_NULL(rows[i].kh, di->key_header) && STREQ_OR_NULL(rows[i].kq, di->key_query)
               && STREQ_OR_NULL(rows[i].ch, di->client_header), "%s keys", di->name);
        CHECKF(di->url_model == rows[i].url && di->method_404 == rows[i].m404
               && di->stored == rows[i].stored && di->model_names == rows[i].names, "%s flags",
               di->name);
    }
    CHECK(coai_dialect_get(COAI_DIALECT_COUNT_) == NULL);
    CHECK(coai_dialect_get((coai_dialect)-1) == NULL);

    /* the one home of the bad-escape sentence, in place */
    memset(&e, 0, sizeof e);
    strcpy(body, "{\"a\":\"\\ud800x\"}");
    CHECK(coai_request_body_fix(body, strlen(body), &e) == 0
          && strcmp(body, "{\"a\":\"\\ufffdx\"}") == 0);
    strcpy(body, "{\"a\":\"\\u12\"}");
    CHECK(coai_request_body_fix(body, strlen(body), &e) == -1 && e.status == 400
          && strcmp(e.message, "We could not parse the JSON body of your request: a \\u "
                    "escape needs four hex digits") == 0);

    /* a URL dialect's parse takes the model and stream from the URL */
    strcpy(body, "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]}]}");
    CHECK(coai_dialect_parse(&req, COAI_DIALECT_GEMINI, body, strlen(body),
                             coai_str_c("models/gem-x"), 1, NULL, &e) == 0
          && req.model.len == 5 && memcmp(req.model.ptr, "gem-x", 5) == 0 && req.stream == 1);
    coai_request_free(&req);
    strcpy(body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(coai_dialect_parse(&req, COAI_DIALECT_OPENAI_CHAT, body, strlen(body),
                             coai_str_c("ignored"), 1, NULL, &e) == 0
          && req.model.len == 1 && req.stream == 0);
    coai_request_free(&req);

    /* count-tokens: each dialect's member; a dialect without the route: 404 */
    strcpy(body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK(coai_dialect_count_tokens(&out, COAI_DIALECT_ANTHROPIC, body, strlen(body),
                                    coai_str_c(""), NULL, &e) == 0
          && out.len > 16 && memcmp(out.data, "{\"input_tokens\":", 16) == 0);
    coai_buf_reset(&out);
    strcpy(body, "{\"generateContentRequest\":{\"contents\":[{\"parts\":[{\"text\":\"hi\"}]}]}}");
    CHECK(coai_dialect_count_tokens(&out, COAI_DIALECT_GEMINI, body, strlen(body),
                                    coai_str_c("g"), NULL, &e) == 0
          && out.len > 15 && memcmp(out.data, "{\"totalTokens\":", 15) == 0);
    coai_buf_reset(&out);
    CHECK(coai_dialect_count_tokens(&out, COAI_DIALECT_OPENAI_CHAT, body, strlen(body),
                                    coai_str_c(""), NULL, &e) < 0 && e.status == 404);

    /* models: each dialect's shape, one model found by id, display id or alias */
    CHECK(coai_models_parse(&m, models_json, sizeof models_json - 1) == 0);
    CHECK(coai_dialect_models_write(&out, COAI_DIALECT_OPENAI_CHAT, &m, NULL, 1) == 0
          && strstr((const char *)out.data, "\"object\":\"list\"") != NULL);
    coai_buf_reset(&out);
    CHECK(coai_dialect_models_write(&out, COAI_DIALECT_ANTHROPIC, &m, NULL, 1) == 0
          && strstr((const char *)out.data, "\"has_more\"") != NULL);
    coai_buf_reset(&out);
    CHECK(coai_dialect_models_write(&out, COAI_DIALECT_GEMINI, &m, NULL, 1) == 0
          && strstr((const char *)out.data, "\"name\":\"models/gpt-5-disp\"") != NULL);
    coai_buf_reset(&out);
    hit = coai_dialect_model_find(COAI_DIALECT_GEMINI, &m, "models/g5", "/v1beta/models/g5", &e);
    CHECK(hit == &m.items[0]);
    CHECK(coai_dialect_model_find(COAI_DIALECT_OPENAI_CHAT, &m, "gpt-5-disp", "/v1/models/x",
                                  &e) == &m.items[0]);
    CHECK(coai_dialect_model_find(COAI_DIALECT_OPENAI_CHAT, &m, "models/g5", "/v1/models/x",
                                  &e) == NULL && e.status == 404
          && strcmp(e.message, "The model 'models/g5' does not exist (not a model of this "
                    "Cursor account; GET /v1/models lists them)") == 0);
    CHECK(coai_dialect_model_find(COAI_DIALECT_GEMINI, &m, "nope", "/v1/models/nope", &e) == NULL
          && strcmp(e.message, "models/nope is not found for API version v1 (not a model of "
                    "this Cursor account; GET /v1/models lists them)") == 0);
    CHECK(coai_dialect_model_find(COAI_DIALECT_GEMINI, &m, "nope", "/v1beta/models/nope", &e)
          == NULL && strstr(e.message, "API version v1beta") != NULL);
    coai_models_free(&m);
    coai_buf_free(&out);

    /* errors: the row's shape and status */
    coai_error_set(&e, 503, "server_error", NULL, NULL, "down");
    CHECK(coai_error_status_as(&e, COAI_DIALECT_ANTHROPIC) == 529
          && coai_error_status_as(&e, COAI_DIALECT_GEMINI) == 503);
    coai_error_set(&e, 429, "insufficient_quota", "insufficient_quota", NULL, "limit");
    CHECK(coai_error_status_as(&e, COAI_DIALECT_OPENAI_CHAT) == 402
          && coai_error_status_as(&e, COAI_DIALECT_RESPONSES) == 429);
#undef STREQ_OR_NULL
}

/* A chat request's model in its client's own names (coai_dialect_model_pick): Cursor's names
 * are kept, a Claude name resolves by family, a Gemini name the account lacks runs on "auto",
 * a Claude name nothing matches is a 404 naming the account's models. */
static void test_model_pick(void)
{
    static const char models_json[] =
        "{\"models\":[{\"modelId\":\"gpt-5\",\"displayModelId\":\"gpt-5-disp\"},"
        "{\"modelId\":\"claude-4.5-sonnet\"}]}";
    coai_models m;
    coai_str out, want, ref;
    coai_error e;
    memset(&e, 0, sizeof e);
    CHECK(coai_models_parse(&m, models_json, sizeof models_json - 1) == 0);
    /* Cursor's names: whatever the list resolved stays */
    out = coai_str_c("untouched");
    CHECK(coai_dialect_model_pick(COAI_DIALECT_OPENAI_CHAT, &m, coai_str_c("claude-x"),
                                  "claude-x", 0, &out, &e) == 0
          && coai_str_eq(out, "untouched"));
    CHECK(coai_dialect_model_pick(COAI_DIALECT_RESPONSES, &m, coai_str_c("gemini-x"),
                                  "gemini-x", 0, &out, &e) == 0);
    /* an id of the account's is kept in every dialect */
    CHECK(coai_dialect_model_pick(COAI_DIALECT_ANTHROPIC, &m, coai_str_c("gpt-5"), "gpt-5", 0,
                                  &out, &e) == 0);
    CHECK(coai_dialect_model_pick(COAI_DIALECT_GEMINI, &m, coai_str_c("gemini-2.5-pro"),
                                  "claude-4.5-sonnet", 0, &out, &e) == 0);
    /* a Claude name: the family's model, as coai_models_resolve_claude finds it */
    want = coai_str_c("claude-sonnet-4-5");
    CHECK(coai_models_resolve_claude(&m, want, 0, &ref) == 1);
    CHECK(coai_dialect_model_pick(COAI_DIALECT_ANTHROPIC, &m, want, "claude-sonnet-4-5", 0,
                                  &out, &e) == 1
          && out.len == ref.len && memcmp(out.ptr, ref.ptr, ref.len) == 0
          && coai_str_eq(out, "claude-4.5-sonnet"));
    /* a Claude name nothing matches: 404, the account's models by display id */
    CHECK(coai_dialect_model_pick(COAI_DIALECT_ANTHROPIC, &m, coai_str_c("claude-opus-9"),
                                  "claude-opus-9", 0, &out, &e) == -1
          && e.status == 404 && strcmp(e.type, "not_found_error") == 0
          && strcmp(e.message, "model: 'claude-opus-9' is not a model of this Cursor account "
                    "(set CURSOR_OAI_MODEL_MAP to map it). Available: gpt-5-disp, "
                    "claude-4.5-sonnet") == 0);
    /* a Gemini name the account lacks (any case): what "auto" resolves to */
    ref = coai_models_resolve(&m, coai_str_c("auto"));
    CHECK(coai_dialect_model_pick(COAI_DIALECT_GEMINI, &m, coai_str_c("GEMINI-2.5-flash-lite"),
                                  "GEMINI-2.5-flash-lite", 0, &out, &e) == 1
          && out.len == ref.len && memcmp(out.ptr, ref.ptr, ref.len) == 0);
    /* on the Gemini API, a name that is not Gemini's is used as resolved */
    CHECK(coai_dialect_model_pick(COAI_DIALECT_GEMINI, &m, coai_str_c("claude-opus-9"),
                                  "claude-opus-9", 0, &out, &e) == 0);
    CHECK(coai_dialect_model_pick(COAI_DIALECT_GEMINI, &m, coai_str_c("gemini"), "gemini", 0,
                                  &out, &e) == 0);
    coai_models_free(&m);
}

int main(void)
{
    test_dialect_table();
    test_model_pick();
    TEST_END();
}
