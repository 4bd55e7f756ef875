/* t_versions_errors.c - live-parity pieces of the header: cursor-agent build ids (every form the
 * 2026 CLIs used), the GetServerConfig agent URL, ErrorDetails with CustomErrorDetails field 10,
 * and the error mapping of outdated clients and of a bare resource_exhausted. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"

static int ver(const char *s, coai_cli_version *v)
{
    return coai_cli_version_parse(coai_str_c(s), v);
}

static int cmp(const char *a, const char *b)
{
    coai_cli_version x, y;
    if (ver(a, &x) || ver(b, &y)) return 99;
    return coai_cli_version_cmp(&x, &y);
}

static void test_versions(void)
{
    coai_cli_version v;
    CHECK(ver("cli-2026.08.11-e8db854", &v) == 0 && v.year == 2026 && v.month == 8
          && v.day == 11 && v.hour == -1 && !v.lab && strcmp(v.hash, "e8db854") == 0);
    CHECK(ver("2026.08.11-e8db854", &v) == 0 && strcmp(v.hash, "e8db854") == 0);
    CHECK(ver("2026.06.12-01-15-52-7244546", &v) == 0 && v.hour == 1 && v.minute == 15
          && v.second == 52 && strcmp(v.hash, "7244546") == 0);
    CHECK(ver("cli-2026.06.15-03-48-54-da23e37", &v) == 0 && v.hour == 3);
    CHECK(ver("2026.09.02-fa0c06e-lab", &v) == 0 && v.lab && strcmp(v.hash, "fa0c06e") == 0);
    CHECK(ver("cli-2026.06.24-00-45-58-9f61de7-lab", &v) == 0 && v.lab && v.hour == 0);
    CHECK(ver("cli-2025.11.25-d5b3271", &v) == 0 && v.year == 2025);
    /* a hash made of digits only is not mistaken for a time part */
    CHECK(ver("2026.01.01-1234567", &v) == 0 && v.hour == -1 && strcmp(v.hash, "1234567") == 0);
    /* refused */
    CHECK(ver("", &v) < 0);
    CHECK(ver("cli-", &v) < 0);
    CHECK(ver("cli-3.9", &v) < 0);
    CHECK(ver("0.48.7", &v) < 0);
    CHECK(ver("cli-2026.8.11-e8db854", &v) < 0);
    CHECK(ver("cli-2026.13.11-e8db854", &v) < 0);
    CHECK(ver("cli-2026.08.32-e8db854", &v) < 0);
    CHECK(ver("cli-2026.08.11-", &v) < 0);
    CHECK(ver("cli-2026.08.11-e8d", &v) < 0);
    CHECK(ver("cli-2026.08.11-E8DB854", &v) < 0);
    CHECK(ver("cli-2026.08.11-e8db854-beta", &v) < 0);
    CHECK(ver("cli-2026.08.11-e8db854\r\nx: 1", &v) < 0);
    CHECK(ver("cli-2026.06.12-25-15-52-7244546", &v) < 0);
    CHECK(ver("cli-2026.08.11-e8db854 ", &v) < 0);
    {   /* not NUL-reliant: a view that stops before the suffix */
        coai_str s = { "2026.09.02-fa0c06e-lab", 18 };
        CHECK(coai_cli_version_parse(s, &v) == 0 && !v.lab);
    }
    /* release order */
    CHECK(cmp("cli-2026.08.11-e8db854", "cli-2025.11.25-d5b3271") > 0);
    CHECK(cmp("2026.08.31-4057e58", "cli-2026.08.11-e8db854") > 0);
    CHECK(cmp("2026.06.12-19-59-36-f6aba9a", "2026.06.12-01-15-52-7244546") > 0);
    CHECK(cmp("2026.06.12-01-15-52-7244546", "2026.06.12-aaaaaaa") > 0);
    CHECK(cmp("2026.08.11-e8db854", "2026.08.11-0000000") == 0);
    CHECK(cmp("2026.08.11-e8db854-lab", "2026.08.11-e8db854") == 0);
    CHECK(cmp("2026.07.31-e8db854", "2026.08.01-e8db854") < 0);
    CHECK(cmp("2025.12.31-e8db854", "2026.01.01-e8db854") < 0);
}

static int agent(const char *json, int ghost, const char *want_host, const char *want_port)
{
    coai_url u;
    int r = coai_server_config_agent_url(json, strlen(json), ghost, &u);
    if (!want_host) return r;
    return r == 0 && strcmp(u.host, want_host) == 0 && strcmp(u.port, want_port) == 0 ? 0 : -9;
}

static void test_server_config(void)
{
    const char *both = "{\"agentUrlConfig\":{\"agentUrl\":\"https://agent.api5.cursor.sh\","
                       "\"agentnUrl\":\"agentn.us.api5.cursor.sh\"},\"other\":[1,2]}";
    CHECK(agent(both, 1, "agent.api5.cursor.sh", "443") == 0);
    CHECK(agent(both, 0, "agentn.us.api5.cursor.sh", "443") == 0);     /* bare host */
    CHECK(agent("{\"agentUrlConfig\":{\"agentUrl\":\"https://localhost:8443/\"}}", 1,
                "localhost", "8443") == 0);
    /* ghost mode on never falls over to the non-privacy host */
    CHECK(agent("{\"agentUrlConfig\":{\"agentnUrl\":\"https://agentn.api5.cursor.sh\"}}", 1,
                NULL, NULL) == 1);
    CHECK(agent("{}", 1, NULL, NULL) == 1);
    CHECK(agent("{\"agentUrlConfig\":null}", 1, NULL, NULL) == 1);
    CHECK(agent("{\"agentUrlConfig\":{\"agentUrl\":\"\"}}", 1, NULL, NULL) == 1);
    CHECK(agent("{\"agentUrlConfig\":{\"agentUrl\":7}}", 1, NULL, NULL) == 1);
    CHECK(agent("{\"agentUrlConfig\":{\"agentUrl\":\"http://plain.example\"}}", 1, NULL, NULL)
          == 1);
    CHECK(agent("{\"agentUrlConfig\":{\"agentUrl\":\"https://a b\"}}", 1, NULL, NULL) == 1);
    CHECK(agent("[]", 1, NULL, NULL) == -1);
    CHECK(agent("not json", 1, NULL, NULL) == -1);
    CHECK(agent("", 1, NULL, NULL) == -1);
}

/* http2_config (field 7, late-autumn N2): name or number; anything else is the default */
static int h2cfg(const char *json)
{
    return coai_server_config_http2(json, strlen(json));
}

static void test_server_config_http2(void)
{
    CHECK(h2cfg("{\"http2Config\":\"HTTP2_CONFIG_FORCE_ALL_DISABLED\"}") == 1);
    CHECK(h2cfg("{\"http2Config\":\"FORCE_ALL_ENABLED\"}") == 2);
    CHECK(h2cfg("{\"http2Config\":\"HTTP2_CONFIG_FORCE_BIDI_DISABLED\",\"agentUrlConfig\":{}}")
          == 3);
    CHECK(h2cfg("{\"http2Config\":4}") == 4);
    CHECK(h2cfg("{\"http2_config\":3}") == 3);
    CHECK(h2cfg("{\"http2Config\":\"HTTP2_CONFIG_UNSPECIFIED\"}") == 0);
    CHECK(h2cfg("{\"http2Config\":5}") == 0);
    CHECK(h2cfg("{\"http2Config\":1.5}") == 0);
    CHECK(h2cfg("{\"http2Config\":\"HTTP2_CONFIG_SOMETHING_NEW\"}") == 0);
    CHECK(h2cfg("{\"http2Config\":null}") == 0);
    CHECK(h2cfg("{}") == 0 && h2cfg("[]") == 0 && h2cfg("not json") == 0 && h2cfg("") == 0);
    CHECK(coai_http2_config_transport(1) == 1 && coai_http2_config_transport(3) == 1);
    CHECK(coai_http2_config_transport(2) == 2 && coai_http2_config_transport(4) == 2);
    CHECK(coai_http2_config_transport(0) == 0 && coai_http2_config_transport(9) == 0);
    CHECK(strcmp(coai_http2_config_name(3), "FORCE_BIDI_DISABLED") == 0
          && strcmp(coai_http2_config_name(-1), "UNSPECIFIED") == 0);
}

/* ErrorDetails{1: error, 2: CustomErrorDetails{1 title, 2 detail, 10 {1 action}}, 3: true} */
static size_t error_details(unsigned char *out, int error, const char *title, const char *detail,
                            const char *action)
{
    unsigned char cd[512], am[64];
    size_t n = 0, c = 0, a = 0, l;
    l = strlen(title);
    cd[c++] = 0x0a; cd[c++] = (unsigned char)l; memcpy(cd + c, title, l); c += l;
    l = strlen(detail);
    cd[c++] = 0x12; cd[c++] = (unsigned char)l; memcpy(cd + c, detail, l); c += l;
    if (action) {
        l = strlen(action);
        am[a++] = 0x0a; am[a++] = (unsigned char)l; memcpy(am + a, action, l); a += l;
        cd[c++] = 0x52; cd[c++] = (unsigned char)a; memcpy(cd + c, am, a); c += a;
    }
    out[n++] = 0x08; out[n++] = (unsigned char)error;
    out[n++] = 0x12; out[n++] = (unsigned char)c; memcpy(out + n, cd, c); n += c;
    out[n++] = 0x18; out[n++] = 1;
    return n;
}

static void test_outdated(void)
{
    unsigned char ed[600];
    size_t n = error_details(ed, 28, "Update Required",
                             "Your version of Cursor is no longer supported.", "payment");
    coai_buf js = { 0 };
    coai_status st;
    coai_error e;
    /* jcode#399's end-stream shape (Connect), unpadded base64 as Connect sends it */
    coai_buf_puts(&js, "{\"error\":{\"code\":\"resource_exhausted\",\"message\":\"Error\","
                       "\"details\":[{\"type\":\"aiserver.v1.ErrorDetails\",\"value\":\"");
    coai_base64_append(&js, ed, n, 0);
    while (js.len && js.data[js.len - 1] == '=') js.len--;
    coai_buf_puts(&js, "\",\"debug\":{\"error\":\"ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT\"}}]}}");
    CHECK(!js.err);
    CHECK(coai_end_stream_parse(js.data, js.len, &st) == COAI_OK);
    CHECK(st.code == 8 && st.error == 28 && st.expected == 1);
    CHECK(strcmp(st.title, "Update Required") == 0);
    CHECK(strcmp(st.action_required, "payment") == 0);
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 502 && strcmp(e.code, "outdated_client") == 0, "%d %s", e.status,
           e.code);
    CHECK(e.no_retry && e.retry_after == 0);
    CHECK(strstr(e.message, "CURSOR_CLIENT_VERSION") && strstr(e.message, "no longer supported"));
    CHECK(!strstr(e.message, "usage limit") && !strstr(e.message, "rate limit"));
    /* the same as a unary 429 error body (GetUsableModels, BidiAppend) */
    {
        const char *obj = strstr((const char *)js.data, "{\"code\"");
        size_t on = js.len - (size_t)(obj - (const char *)js.data) - 1;     /* drop the last } */
        coai_error_from_http(429, obj, on, &e);
        CHECKF(e.status == 502 && e.code && strcmp(e.code, "outdated_client") == 0, "%d %s",
               e.status, e.code ? e.code : "-");
        CHECK(e.retry_after == 0 && e.no_retry);
    }
    /* ERROR_OUTDATED_CLIENT (30) as a gRPC-web trailer, the older form */
    {
        coai_buf t = { 0 };
        n = error_details(ed, 30, "Outdated Client Error", "Please update.", NULL);
        {
            /* google.rpc.Status{1 code 7, 3 Any{1 type_url, 2 value}} */
            unsigned char any[700], stb[800];
            const char *tu = "type.googleapis.com/aiserver.v1.ErrorDetails";
            size_t a = 0, s = 0, l = strlen(tu);
            any[a++] = 0x0a; any[a++] = (unsigned char)l; memcpy(any + a, tu, l); a += l;
            any[a++] = 0x12; any[a++] = (unsigned char)n; memcpy(any + a, ed, n); a += n;
            stb[s++] = 0x08; stb[s++] = 7;
            stb[s++] = 0x1a; stb[s++] = (unsigned char)a; memcpy(stb + s, any, a); s += a;
            coai_buf_puts(&t, "grpc-status: 7\r\ngrpc-status-details-bin: ");
            coai_base64_append(&t, stb, s, 0);
            coai_buf_puts(&t, "\r\n");
        }
        CHECK(coai_trailer_parse(t.data, t.len, &st) == COAI_OK && st.error == 30);
        CHECK(st.action_required[0] == 0);
        coai_error_from_status(&st, &e);
        CHECK(e.status == 502 && strcmp(e.code, "outdated_client") == 0);
        coai_buf_free(&t);
    }
    /* 2025 form: a title asking to update, resource_exhausted */
    coai__status_init(&st);
    st.code = 8;
    strcpy(st.title, "Please update to the latest version of Cursor to continue using the Agent");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 502 && strcmp(e.code, "outdated_client") == 0);
    /* error 28 without an update title stays a rate limit */
    coai__status_init(&st);
    st.code = 8;
    st.error = 28;
    strcpy(st.title, "Too many vision requests");
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 429, "%d %s", e.status, e.code);
    coai_buf_free(&js);
}

static void test_bare_exhausted(void)
{
    coai_status st;
    coai_error e;
    static const char *const es = "{\"error\":{\"code\":\"resource_exhausted\",\"message\":\"Error\"}}";
    CHECK(coai_end_stream_parse(es, strlen(es), &st) == COAI_OK);
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 400 && strcmp(e.code, "upstream_resource_exhausted") == 0, "%d %s",
           e.status, e.code);
    CHECK(e.retry_after == 0 && e.no_retry);
    CHECK(strstr(e.message, "ambiguous") && strstr(e.message, "plan"));
    CHECK(!strstr(e.message, "usage limit") && !strstr(e.message, "rate limit"));
    /* a bare trailer */
    CHECK(coai_trailer_parse("grpc-status: 8\r\n", 16, &st) == COAI_OK);
    coai_error_from_status(&st, &e);
    CHECK(e.status == 400 && e.retry_after == 0);
    /* with words about usage it is the quota error as before */
    CHECK(coai_trailer_parse("grpc-status: 8\r\ngrpc-message: You've hit your usage limit\r\n",
                             58, &st) == COAI_OK);
    coai_error_from_status(&st, &e);
    CHECK(e.status == 429 && strcmp(e.code, "insufficient_quota") == 0);
    /* unary HTTP bodies */
    coai_error_from_http(429, "{\"code\":\"resource_exhausted\",\"message\":\"Error\"}", 47, &e);
    CHECKF(e.status == 400 && e.retry_after == 0
           && strcmp(e.code, "upstream_resource_exhausted") == 0, "%d %s", e.status, e.code);
    coai_error_from_http(429, "{\"code\":\"resource_exhausted\",\"message\":\"rate limited\"}",
                         54, &e);
    CHECK(e.status == 429 && e.retry_after == 10);
    coai_error_from_http(429, "slow down", 9, &e);          /* a plain 429 (proxy, ALB) */
    CHECK(e.status == 429 && e.retry_after == 10);
}

/* One status: code, message, ErrorDetails error number (0: none), title. */
static void mk(coai_status *st, int code, const char *msg, int error, const char *title)
{
    coai__status_init(st);
    st->code = code;
    st->error = error;
    st->error_name = coai_error_details_name(error);
    snprintf(st->message, sizeof st->message, "%s", msg);
    snprintf(st->title, sizeof st->title, "%s", title);
}

/* Issue 24 item 6: the errors Cursor sends since 2026-08, each with Cursor's words. */
static void test_autumn_errors(void)
{
    coai_status st;
    coai_error e;
    /* geo blocks: 403, no retry, whatever the code says */
    mk(&st, 13, "This model is not available in your country or region", 13, "");
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 403 && strcmp(e.code, "unsupported_region") == 0 && e.no_retry
           && strstr(e.message, "not available in your country or region"), "%d %s", e.status,
           e.message);
    mk(&st, 7, "Model not available in your region", 29, "");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 403 && strcmp(e.code, "unsupported_region") == 0);
    coai_error_from_http(403, "{\"code\":\"permission_denied\",\"message\":\"unsupported_region\"}",
                         58, &e);
    CHECKF(e.status == 403 && strcmp(e.code, "unsupported_region") == 0, "%s", e.code);
    /* High Load: 429 suggesting another model, never the usage-limit code (not latched) */
    mk(&st, 8, "High Load \xe2\x80\x94 We're experiencing high demand for Cursor Grok 4.5. Please "
       "switch to Auto", 41, "High Load");
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 429 && strcmp(e.code, "model_overloaded") == 0 && e.no_retry
           && strstr(e.message, "another model") && strstr(e.message, "Grok 4.5"), "%d %s %s",
           e.status, e.code, e.message);
    coai_error_from_http(429, "{\"code\":\"resource_exhausted\",\"message\":\"High Load: We're "
                         "experiencing high demand\"}", 83, &e);
    CHECKF(e.status == 429 && strcmp(e.code, "model_overloaded") == 0, "%s", e.code);
    /* unpaid invoice: 429 with the text */
    mk(&st, 8, "You have an unpaid invoice. Please pay it to continue.", 50, "");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 429 && strcmp(e.code, "insufficient_quota") == 0
          && strstr(e.message, "unpaid invoice"));
    /* model channel down: retryable 503 */
    mk(&st, 14, "model channel not available", 0, "");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 503 && e.retry_after > 0 && !e.no_retry
          && strstr(e.message, "model channel not available"));
    mk(&st, 13, "ERROR_PROVIDER_ERROR: model channel not available [unavailable]", 0, "");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 503);
    /* permission_denied for the client identity: the client-version error */
    mk(&st, 7, "Unsupported client version for this endpoint", 0, "");
    coai_error_from_status(&st, &e);
    CHECKF(strcmp(e.code, "outdated_client") == 0 && strstr(e.message, "CURSOR_CLIENT_VERSION")
           && strstr(e.message, "Unsupported client version"), "%s", e.code);
    coai_error_from_http(403, "{\"code\":\"permission_denied\",\"message\":\"invalid client "
                         "version 0.18.0\"}", 70, &e);
    CHECKF(strcmp(e.code, "outdated_client") == 0, "%s", e.code);
    mk(&st, 7, "Team admin disabled this model", 0, "");          /* other denials stay 403 */
    coai_error_from_status(&st, &e);
    CHECK(e.status == 403 && strcmp(e.code, "upstream_permission_denied") == 0);
    /* the conversation lost server-side: its own code (the caller replays once) */
    mk(&st, 5, "blob missing", 0, "");
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 502 && strcmp(e.code, "conversation_lost") == 0
           && strstr(e.message, "blob missing"), "%d %s", e.status, e.code);
    mk(&st, 13, "Conversation data missing", 0, "");
    coai_error_from_status(&st, &e);
    CHECK(strcmp(e.code, "conversation_lost") == 0);
    /* deadline_exceeded waiting for the request_context answer */
    mk(&st, 4, "Timeout waiting for next item.", 0, "");
    coai_error_from_status(&st, &e);
    CHECKF(e.status == 504 && strstr(e.message, "request_context")
           && strstr(e.message, "Timeout waiting for next item."), "%s", e.message);
    mk(&st, 4, "deadline exceeded", 0, "");                       /* other timeouts as before */
    coai_error_from_status(&st, &e);
    CHECK(e.status == 504 && !strstr(e.message, "request_context"));
}

static int no_send(void *user, const unsigned char *msg, size_t n)
{
    (void)user; (void)msg; (void)n;
    return 0;
}

/* A bare resource_exhausted classified by the request's size. */
static void test_exhausted_by_size(void)
{
    static const int64_t sizes[] = { 80, 200000, 1000000 };   /* prompt UTF-16 units */
    static const char *const codes[] = { "model_not_available", "upstream_resource_exhausted",
                                         "context_length_exceeded" };
    size_t i;
    for (i = 0; i < 3; i++) {
        coai_reply r;
        coai_reply_opts o;
        coai_status st;
        char *p = (char *)malloc((size_t)sizes[i] + 1);
        memset(p, 'a', (size_t)sizes[i]);
        p[sizes[i]] = 0;
        memset(&o, 0, sizeof o);
        o.completion_id = coai_str_c("c");
        o.model = coai_str_c("m");
        o.prompt.ptr = p;
        o.prompt.len = (size_t)sizes[i];
        o.send = no_send;
        CHECK(coai_reply_init(&r, &o) == 0);
        CHECK(coai_trailer_parse("grpc-status: 8\r\n", 16, &st) == COAI_OK);
        CHECK(coai_reply_feed_status(&r, &st) == COAI_DONE);
        CHECKF(r.error.status == 400 && strcmp(r.error.code, codes[i]) == 0, "%lld units: %s",
               (long long)sizes[i], r.error.code);
        CHECK(r.error.no_retry && r.error.retry_after == 0);
        coai_reply_free(&r);
        free(p);
    }
}

int main(void)
{
    test_autumn_errors();
    test_exhausted_by_size();
    test_versions();
    test_server_config();
    test_server_config_http2();
    test_outdated();
    test_bare_exhausted();
    TEST_END();
}
