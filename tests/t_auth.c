/* t_auth.c - token claims, PKCE, login polling schedule, credential JSON. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"

static char *vector_token(void)
{
    /* The fake JWT of checksum vector cs-1 (exp 1773654000). */
    size_t n;
    char *txt = test_read_file(test_vec_path("checksum.json"), &n);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL, *v;
    char *tok = NULL;
    v = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "vectors"), 0);
    v = cJSON_GetObjectItem(v, "token");
    if (cJSON_IsString(v)) {
        tok = (char *)malloc(strlen(v->valuestring) + 1);
        strcpy(tok, v->valuestring);
    }
    cJSON_Delete(root);
    free(txt);
    return tok;
}

static void test_jwt(void)
{
    char *tok = vector_token();
    coai_jwt j;
    CHECK(tok != NULL);
    if (!tok) return;
    CHECK(coai_jwt_decode(coai_str_c(tok), &j) == 0);
    CHECK(j.exp == 1773654000);
    CHECK(strcmp(j.sub, "auth0|user_01TESTVECTORAAAAAAAAAAAAAA") == 0);
    CHECK(j.email[0] == 0);
    CHECK(coai_token_expiring(coai_str_c(tok), 1773654000 - 301, 300) == 0);
    CHECK(coai_token_expiring(coai_str_c(tok), 1773654000 - 299, 300) == 1);
    CHECK(coai_token_expiring(coai_str_c("not-a-jwt"), 0, 300) == 1);
    CHECK(coai_jwt_decode(coai_str_c("a.!!!.c"), &j) == -1);
    CHECK(coai_jwt_decode(coai_str_c("a..c"), &j) == -1);
    CHECK(coai_jwt_decode(coai_str_c(""), &j) == -1);
    /* payload "[1]" is JSON but not an object */
    CHECK(coai_jwt_decode(coai_str_c("x.WzFd.y"), &j) == -1);
    /* no signature segment still decodes; exp as a string is ignored */
    CHECK(coai_jwt_decode(coai_str_c("x.eyJleHAiOiIxIn0"), &j) == 0 && j.exp == 0);
    free(tok);
}

static void test_pkce(void)
{
    unsigned char rnd[48];
    coai_pkce p;
    coai_buf b = { 0 };
    int i;
    for (i = 0; i < 48; i++) rnd[i] = (unsigned char)i;
    coai_pkce_init(&p, rnd);
    /* Known answer computed independently (Python hashlib + base64.urlsafe_b64encode). */
    CHECK(strcmp(p.verifier, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8") == 0);
    CHECK(strcmp(p.challenge, "6oZqdX5MOLq_qBJ8vppAnT4fk6AP8UiP9zX8-Rev_9A") == 0);
    CHECK(strcmp(p.uuid, "20212223-2425-4627-a829-2a2b2c2d2e2f") == 0);
    CHECK(coai_login_url(&b, &p) == 0);
    CHECK(strcmp((char *)b.data, "https://cursor.com/loginDeepControl?challenge="
                 "6oZqdX5MOLq_qBJ8vppAnT4fk6AP8UiP9zX8-Rev_9A&uuid=20212223-2425-4627-a829-2a2b2c2d2e2f"
                 "&mode=login&redirectTarget=cli") == 0);
    coai_buf_reset(&b);
    CHECK(coai_login_poll_target(&b, &p) == 0);
    CHECK(strcmp((char *)b.data, "/auth/poll?uuid=20212223-2425-4627-a829-2a2b2c2d2e2f"
                 "&verifier=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8") == 0);
    coai_buf_free(&b);
}

static void test_delays(void)
{
    unsigned a, prev = 0, total = 0;
    CHECK(coai_login_poll_delay_ms(0) == 1000);
    CHECK(coai_login_poll_delay_ms(1) == 1200);
    CHECK(coai_login_poll_delay_ms(2) == 1440);
    for (a = 0; a < COAI_LOGIN_MAX_ATTEMPTS; a++) {
        unsigned d = coai_login_poll_delay_ms(a);
        CHECKF(d >= prev && d <= 10000, "attempt %u delay %u", a, d);
        prev = d;
        total += d;
    }
    CHECK(coai_login_poll_delay_ms(1000000) == 10000);
    /* 150 polls take between 20 and 25 minutes, as the spec says (about 23-24). */
    CHECKF(total > 20u * 60000u && total < 25u * 60000u, "total %u ms", total);
}

static void test_creds(void)
{
    coai_creds c, d;
    coai_buf b = { 0 };
    const char *in = "{\"accessToken\":\"a\\\"b\",\"refreshToken\":\"r\",\"other\":1}";
    CHECK(coai_creds_parse(in, strlen(in), &c) == 0);
    CHECK(c.access_token && strcmp(c.access_token, "a\"b") == 0);
    CHECK(c.refresh_token && strcmp(c.refresh_token, "r") == 0);
    CHECK(c.api_key == NULL);
    CHECK(coai_creds_format(&b, &c) == 0);
    CHECK(strcmp((char *)b.data, "{\n  \"accessToken\": \"a\\\"b\",\n  \"refreshToken\": \"r\"\n}\n") == 0);
    CHECK(coai_creds_parse((char *)b.data, b.len, &d) == 0);
    CHECK(d.access_token && strcmp(d.access_token, c.access_token) == 0);
    coai_creds_free(&d);
    coai_creds_free(&c);
    CHECK(c.access_token == NULL);
    CHECK(coai_creds_parse("[]", 2, &c) == -1);
    /* a \u0000 escape would cut the token short without a word: refused */
    {
        const char *nul = "{\"accessToken\":\"abc\\u0000def\"}";
        const char *bs = "{\"accessToken\":\"abc\\\\u0000\"}";   /* a backslash, then "u0000" */
        CHECK(coai_creds_parse(nul, strlen(nul), &c) == -2 && !c.access_token);
        CHECK(coai_creds_parse(bs, strlen(bs), &c) == 0 && c.access_token
              && strcmp(c.access_token, "abc\\u0000") == 0);
        coai_creds_free(&c);
    }
    CHECK(coai_creds_parse("{\"accessToken\":", 15, &c) == -1);
    CHECK(coai_creds_parse("{\"accessToken\":\"\",\"apiKey\":5}", 29, &c) == 0);
    CHECK(c.access_token == NULL && c.api_key == NULL);
    coai_creds_free(&c);
    /* header injection and non-ASCII are refused */
    {
        const char *bad = "{\"accessToken\":\"a\\r\\nX: y\",\"refreshToken\":\"r\\u00e9\"}";
        CHECK(coai_creds_parse(bad, strlen(bad), &c) == 0);
    }
    CHECK(c.access_token == NULL && c.refresh_token == NULL);
    coai_creds_free(&c);
    coai_buf_reset(&b);
    CHECK(coai_creds_format(&b, &c) == 0 && strcmp((char *)b.data, "{}\n") == 0);
    coai_buf_free(&b);
}

/* The /oauth/token answer (notes autumn 2026, 5.7): snake_case, no refresh token, and
 * shouldLogout for a revoked login. */
static void test_oauth_token(void)
{
    coai_creds c;
    int lo = 5;
    const char *ok = "{\"access_token\":\"eyJ.a.b\",\"id_token\":\"i\",\"shouldLogout\":false}";
    const char *out = "{\"access_token\":\"\",\"id_token\":\"\",\"shouldLogout\":true}";
    const char *rot = "{\"access_token\":\"t\",\"refresh_token\":\"r2\"}";
    const char *camel = "{\"accessToken\":\"t\",\"refreshToken\":\"r\",\"shouldLogout\":1}";
    const char *nul = "{\"access_token\":\"eyJ.a\\u0000.b\",\"shouldLogout\":false}";
    CHECK(coai_oauth_token_parse(ok, strlen(ok), &c, &lo) == 0);
    CHECK(lo == 0 && c.access_token && strcmp(c.access_token, "eyJ.a.b") == 0);
    coai_creds_free(&c);
    /* issue 29: a \u0000 escape is refused as in auth.json (it cut the token to "eyJ.a",
     * taken as a renewed login) */
    CHECK(coai_oauth_token_parse(nul, strlen(nul), &c, &lo) == -2 && !c.access_token);
    CHECK(c.refresh_token == NULL && c.api_key == NULL);
    coai_creds_free(&c);
    CHECK(coai_oauth_token_parse(out, strlen(out), &c, &lo) == 0);
    CHECK(lo == 1 && c.access_token == NULL);
    coai_creds_free(&c);
    CHECK(coai_oauth_token_parse(rot, strlen(rot), &c, &lo) == 0);
    CHECK(lo == 0 && c.refresh_token && strcmp(c.refresh_token, "r2") == 0);
    coai_creds_free(&c);
    /* the auth.json spelling is not this answer's; a non-bool shouldLogout is not true */
    CHECK(coai_oauth_token_parse(camel, strlen(camel), &c, &lo) == 0);
    CHECK(lo == 0 && c.access_token == NULL && c.refresh_token == NULL);
    coai_creds_free(&c);
    lo = 5;
    CHECK(coai_oauth_token_parse("[true]", 6, &c, &lo) == -1 && lo == 0 && !c.access_token);
    {
        const char *inj = "{\"access_token\":\"a\\r\\nX\"}";
        CHECK(coai_oauth_token_parse(inj, strlen(inj), &c, &lo) == 0);
    }
    CHECK(c.access_token == NULL);
    coai_creds_free(&c);
}

int main(void)
{
    test_jwt();
    test_pkce();
    test_delays();
    test_creds();
    test_oauth_token();
    TEST_END();
}
