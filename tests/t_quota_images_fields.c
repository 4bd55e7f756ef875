/* t_quota_images_fields.c - the QUOTA part (dashboard JSON -> /v1/usage JSON, text, summary), the
 * usage-limit error message, and (below) images and request-field emulations. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>
#include <ctype.h>
#include "pbwalk.h"

static const char PERIOD_PLAN[] =
    "{\"billingCycleStart\":\"1764547200000\",\"billingCycleEnd\":\"1767225600000\","
    "\"planUsage\":{\"totalSpend\":1234,\"includedSpend\":1234,\"bonusSpend\":0,"
    "\"remaining\":766,\"limit\":2000,\"autoPercentUsed\":40,\"apiPercentUsed\":75.5,"
    "\"totalPercentUsed\":61.7},"
    "\"spendLimitUsage\":{\"totalSpend\":0,\"individualLimit\":5000,\"individualUsed\":0,"
    "\"individualRemaining\":5000,\"limitType\":\"user\"},"
    "\"displayThreshold\":200,\"enabled\":true,"
    "\"displayMessage\":\"You've used 62% of your usage limit\",\"newField\":[1,2]}";
static const char PLAN_INFO[] =
    "{\"planInfo\":{\"planName\":\"Pro\",\"includedAmountCents\":2000,\"price\":\"$20/mo\","
    "\"billingCycleEnd\":\"1767225600000\",\"planOwner\":\"PLAN_OWNER_STRIPE\"}}";

static cJSON *usage_json(const coai_quota *u)
{
    coai_buf b = { 0 };
    cJSON *j;
    CHECK(coai_quota_write_json(&b, u) == 0);
    CHECK(coai_utf8_valid_prefix((const char *)b.data, b.len) == b.len);
    j = cJSON_ParseWithLength((const char *)b.data, b.len);
    CHECKF(j != NULL, "not JSON: %s", (char *)b.data);
    coai_buf_free(&b);
    return j;
}

static double jnum(const cJSON *o, const char *path)
{
    char k[64];
    const char *dot = strchr(path, '.');
    if (dot) {
        snprintf(k, sizeof k, "%.*s", (int)(dot - path), path);
        return jnum(cJSON_GetObjectItemCaseSensitive(o, k), dot + 1);
    }
    o = cJSON_GetObjectItemCaseSensitive(o, path);
    return cJSON_IsNumber(o) ? o->valuedouble : -12345;
}

static int jnull(const cJSON *o, const char *path)
{
    char k[64];
    const char *dot = strchr(path, '.');
    if (dot) {
        snprintf(k, sizeof k, "%.*s", (int)(dot - path), path);
        return jnull(cJSON_GetObjectItemCaseSensitive(o, k), dot + 1);
    }
    o = cJSON_GetObjectItemCaseSensitive(o, path);
    return cJSON_IsNull(o);
}

static const char *jstr_at(const cJSON *o, const char *path)
{
    char k[64];
    const char *dot = strchr(path, '.');
    if (dot) {
        snprintf(k, sizeof k, "%.*s", (int)(dot - path), path);
        return jstr_at(cJSON_GetObjectItemCaseSensitive(o, k), dot + 1);
    }
    o = cJSON_GetObjectItemCaseSensitive(o, path);
    return cJSON_IsString(o) ? o->valuestring : "<none>";
}

static void test_usage_plan(void)
{
    coai_quota u;
    coai_buf t = { 0 };
    cJSON *j;
    const int64_t now = 1766620800000LL;   /* 2025-12-25T00:00:00Z: 7 days before the end */
    CHECK(coai_quota_parse(&u, PERIOD_PLAN, sizeof PERIOD_PLAN - 1, PLAN_INFO,
                           sizeof PLAN_INFO - 1) == 0);
    CHECK(u.cycle_start_ms == 1764547200000LL && u.cycle_end_ms == 1767225600000LL);
    CHECK(u.used_cents == 1234 && u.limit_cents == 2000 && u.remaining_cents == 766);
    CHECK(u.od_limit_cents == 5000 && u.od_remaining_cents == 5000);
    CHECK(coai_quota_limit_reached(&u) == 0);
    j = usage_json(&u);
    CHECK(strcmp(jstr_at(j, "object"), "cursor.usage") == 0);
    CHECK(strcmp(jstr_at(j, "plan.name"), "Pro") == 0);
    CHECK(strcmp(jstr_at(j, "plan.price"), "$20/mo") == 0);
    CHECK(jnum(j, "plan.included_cents") == 2000);
    CHECK(strcmp(jstr_at(j, "billing_cycle.start"), "2025-12-01T00:00:00Z") == 0);
    CHECK(strcmp(jstr_at(j, "billing_cycle.end"), "2026-01-01T00:00:00Z") == 0);
    CHECK(strcmp(jstr_at(j, "resets_at"), "2026-01-01T00:00:00Z") == 0);
    CHECK(jnum(j, "billing_cycle.end_ms") == 1767225600000.0);
    CHECK(jnum(j, "included.used_cents") == 1234 && jnum(j, "included.limit_cents") == 2000);
    CHECK(jnum(j, "included.remaining_cents") == 766);
    CHECK(jnum(j, "included.percent_used") == 61.7 && jnum(j, "included.api_percent_used") == 75.5);
    CHECK(jnum(j, "on_demand.limit_cents") == 5000);
    CHECK(strcmp(jstr_at(j, "on_demand.limit_type"), "user") == 0);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "limit_reached")));
    CHECK(strcmp(jstr_at(j, "message"), "You've used 62% of your usage limit") == 0);
    cJSON_Delete(j);
    CHECK(coai_quota_summary(&t, &u, now) == 0);
    CHECKF(strcmp((char *)t.data, "$12.34 of $20.00 included usage used (62%), $7.66 left; "
                  "resets 2026-01-01 (in 7 days)") == 0, "%s", (char *)t.data);
    coai_buf_reset(&t);
    CHECK(coai_quota_write_text(&t, &u, now) == 0);
    CHECKF(strstr((char *)t.data, "Plan:           Pro ($20/mo)\n") != NULL, "%s", (char *)t.data);
    CHECK(strstr((char *)t.data, "Billing cycle:  2025-12-01 to 2026-01-01 (resets in 7 days, "
                 "2026-01-01 00:00 UTC)\n") != NULL);
    CHECK(strstr((char *)t.data, "Included usage: $12.34 of $20.00 used (62%), $7.66 left\n"));
    CHECK(strstr((char *)t.data, "On-demand:      $0.00 of $50.00 used (user limit), $50.00 left"));
    CHECK(strstr((char *)t.data, "Limit reached:  no\n") != NULL);
    coai_buf_free(&t);
}

static void test_usage_shapes(void)
{
    coai_quota u;
    coai_buf t = { 0 };
    cJSON *j;
    /* free / no plan: no planUsage at all, no plan info, int64s as numbers */
    static const char none[] = "{\"billingCycleStart\":1764547200000,\"enabled\":false}";
    static const char hit[] = "{\"billingCycleEnd\":\"1767225600000\",\"planUsage\":"
        "{\"totalSpend\":\"2000\",\"limit\":2000,\"remaining\":0}}";
    static const char hit_od[] = "{\"planUsage\":{\"totalSpend\":2000,\"limit\":2000,"
        "\"remaining\":0},\"spendLimitUsage\":{\"pooledLimit\":10000,\"pooledUsed\":2500,"
        "\"pooledRemaining\":7500,\"limitType\":\"team\"}}";
    static const char odd[] = "{\"billingCycleStart\":\"12x\",\"billingCycleEnd\":true,"
        "\"planUsage\":{\"totalSpend\":1.5,\"limit\":\"-\",\"remaining\":\"99999999999999999999\","
        "\"totalPercentUsed\":\"abc\",\"autoPercentUsed\":-3},\"displayMessage\":\"a\\u0007b\","
        "\"spendLimitUsage\":7}";
    CHECK(coai_quota_parse(&u, none, sizeof none - 1, NULL, 0) == 0);
    CHECK(coai_quota_limit_reached(&u) == -1);
    j = usage_json(&u);
    CHECK(jnull(j, "plan") && jnull(j, "included") && jnull(j, "on_demand"));
    CHECK(jnull(j, "resets_at") && jnull(j, "limit_reached") && jnull(j, "message"));
    CHECK(jnull(j, "billing_cycle.end") && jnum(j, "billing_cycle.start_ms") == 1764547200000.0);
    cJSON_Delete(j);
    CHECK(coai_quota_summary(&t, &u, 0) == 0);
    CHECK(strcmp((char *)t.data, "no usage figures from Cursor") == 0);
    coai_buf_reset(&t);

    CHECK(coai_quota_parse(&u, hit, sizeof hit - 1, "not json", 8) == 0);
    CHECK(coai_quota_limit_reached(&u) == 1 && u.used_cents == 2000);
    j = usage_json(&u);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "limit_reached")));
    CHECK(jnull(j, "plan"));
    cJSON_Delete(j);
    CHECK(coai_quota_summary(&t, &u, 1767225600000LL - 3 * 3600000LL) == 0);
    CHECKF(strcmp((char *)t.data, "$20.00 of $20.00 included usage used (100%), $0.00 left - "
                  "LIMIT REACHED; resets 2026-01-01 (in 3 hours)") == 0, "%s", (char *)t.data);
    coai_buf_reset(&t);

    /* plan used up, but a team on-demand pool with money left: not reached */
    CHECK(coai_quota_parse(&u, hit_od, sizeof hit_od - 1, NULL, 0) == 0);
    CHECK(coai_quota_limit_reached(&u) == 0 && u.od_used_cents == 2500);
    CHECK(strcmp(u.od_limit_type, "team") == 0);

    /* wrong types and junk read as unknown, never as 0; control bytes dropped */
    CHECK(coai_quota_parse(&u, odd, sizeof odd - 1, NULL, 0) == 0);
    CHECK(u.cycle_start_ms == COAI_QUOTA_NONE && u.cycle_end_ms == COAI_QUOTA_NONE);
    CHECK(u.used_cents == COAI_QUOTA_NONE && u.limit_cents == COAI_QUOTA_NONE);
    CHECK(u.remaining_cents == COAI_QUOTA_NONE && u.percent_used < 0 && u.auto_percent_used < 0);
    CHECK(!u.have_on_demand && strcmp(u.message, "ab") == 0);
    j = usage_json(&u);
    CHECK(jnull(j, "included.used_cents") && jnull(j, "billing_cycle"));
    cJSON_Delete(j);

    /* the period body is required */
    CHECK(coai_quota_parse(&u, "[]", 2, PLAN_INFO, sizeof PLAN_INFO - 1) == COAI_ERR_JSON);
    CHECK(coai_quota_parse(&u, "", 0, NULL, 0) == COAI_ERR_JSON);
    CHECK(coai_quota_parse(&u, "{\"a\":\"\xff\"}", 8, NULL, 0) == COAI_ERR_JSON);
    CHECK(u.used_cents == COAI_QUOTA_NONE);
    coai_buf_free(&t);
}

static void test_iso8601(void)
{
    char s[21];
    coai_iso8601(s, 0);
    CHECK(strcmp(s, "1970-01-01T00:00:00Z") == 0);
    coai_iso8601(s, -1);
    CHECK(strcmp(s, "1969-12-31T23:59:59Z") == 0);
    coai_iso8601(s, 951782400000LL);           /* leap day 2000 */
    CHECK(strcmp(s, "2000-02-29T00:00:00Z") == 0);
    coai_iso8601(s, 1767225599999LL);
    CHECK(strcmp(s, "2025-12-31T23:59:59Z") == 0);
    coai_iso8601(s, INT64_MAX);
    CHECK(strcmp(s, "9999-12-31T23:59:59Z") == 0);
    coai_iso8601(s, INT64_MIN);
    CHECK(strcmp(s, "0000-01-01T00:00:00Z") == 0);
}

static int count_ci(const char *hay, const char *needle)
{
    size_t n = strlen(hay), m = strlen(needle), i, j;
    int c = 0;
    for (i = 0; i + m <= n; i++) {
        for (j = 0; j < m; j++)
            if (tolower((unsigned char)hay[i + j]) != tolower((unsigned char)needle[j])) break;
        if (j == m) c++;
    }
    return c;
}

/* The usage-limit message says each thing once (it used to nest "usage limit" 3 times). */
static void test_limit_message(void)
{
    coai_status st;
    coai_error e;
    memset(&st, 0, sizeof st);
    st.code = 8;
    st.error = 10;
    st.error_name = "ERROR_PRO_USER_USAGE_LIMIT";
    snprintf(st.message, sizeof st.message, "You've hit your usage limit");
    snprintf(st.title, sizeof st.title, "Usage limit");
    snprintf(st.detail, sizeof st.detail, "You've hit your usage limit");
    coai_error_from_status(&st, &e);
    CHECK(e.status == 429 && strcmp(e.code, "insufficient_quota") == 0 && e.no_retry);
    CHECKF(count_ci(e.message, "usage limit") == 1, "%s", e.message);
    CHECKF(strcmp(e.message, "Cursor: You've hit your usage limit (ERROR_PRO_USER_USAGE_LIMIT)")
           == 0, "%s", e.message);
    /* a detail with the limit and the reset time is kept, once */
    snprintf(st.detail, sizeof st.detail, "Your $20 included usage resets on Jan 1 (plan: pro)");
    coai_error_from_status(&st, &e);
    CHECKF(count_ci(e.message, "usage limit") == 1 && count_ci(e.message, "resets on Jan 1") == 1,
           "%s", e.message);
    CHECK(strstr(e.message, "$20") != NULL);
    /* a usage-limit error code with no words still says what happened (a bare grpc 8
     * without details is ambiguous and reported as such: see t_openai.c) */
    memset(&st, 0, sizeof st);
    st.code = 8;
    st.error = 10;
    st.error_name = "ERROR_PRO_USER_USAGE_LIMIT";
    coai_error_from_status(&st, &e);
    CHECKF(strcmp(e.message, "You've hit your Cursor usage limit (ERROR_PRO_USER_USAGE_LIMIT)")
           == 0, "%s", e.message);
    /* words that do not say "limit" get ours in front, once */
    snprintf(st.message, sizeof st.message, "Out of requests");
    coai_error_from_status(&st, &e);
    CHECKF(count_ci(e.message, "usage limit") == 1 && strstr(e.message, "Out of requests"),
           "%s", e.message);
    /* HTTP path: Cursor's own words are not wrapped in a second "usage limit" */
    coai_error_from_http(429, "{\"code\":\"resource_exhausted\",\"message\":\"You've hit your "
                         "usage limit\"}", 69, &e);
    CHECKF(e.status == 429 && count_ci(e.message, "usage limit") == 1, "%s", e.message);
}


/* ---- images ------------------------------------------------------------- */

/* 3x2 RGB PNG made with zlib (the same bytes quota_images_fields_test.py builds) */
static const char PNG_B64[] = "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAEUlEQVR4nGP4z8AAQT"
                              "D6PwMAPtUF+6guL00AAAAASUVORK5CYII=";

static coai_str S_(const char *s) { return coai_str_c(s); }

static void test_data_url(void)
{
    coai_str t, p;
    CHECK(coai_data_url_parse(S_("data:image/png;base64,QUJD"), &t, &p) == 0);
    CHECK(coai_str_eq(t, "image/png") && coai_str_eq(p, "QUJD"));
    CHECK(coai_data_url_parse(S_("DATA:image/jpeg;name=a.jpg;BASE64,QQ=="), &t, &p) == 0);
    CHECK(coai_str_eq(t, "image/jpeg") && coai_str_eq(p, "QQ=="));
    CHECK(coai_data_url_parse(S_("data:;base64,"), &t, &p) == 0 && t.len == 0 && p.len == 0);
    CHECK(coai_data_url_parse(S_("data:image/png,QUJD"), &t, &p) == COAI_ERR_INVALID);
    CHECK(coai_data_url_parse(S_("data:image/png;base64QUJD"), &t, &p) == COAI_ERR_INVALID);
    CHECK(coai_data_url_parse(S_("data:ima ge/png;base64,QUJD"), &t, &p) == COAI_ERR_INVALID);
    CHECK(coai_data_url_parse(S_("https://x/y.png"), &t, &p) == COAI_ERR_INVALID);
    CHECK(coai_data_url_parse(S_("data:"), &t, &p) == COAI_ERR_INVALID);
    CHECK(coai_data_url_parse(S_(""), &t, &p) == COAI_ERR_INVALID);
}

static void test_sniff(void)
{
    unsigned char png[80];
    long n = coai_base64_decode(PNG_B64, strlen(PNG_B64), png, sizeof png);
    /* JPEG: SOI, APP0 (16 bytes), a fill byte, SOF0 with 480 x 640 (h x w) */
    static const unsigned char jpg[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F',
        0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0xff, 0xff, 0xc0, 0x00, 0x11, 8, 0x01, 0xe0, 0x02, 0x80,
        3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1 };
    static const unsigned char jpg_sos[] = { 0xff, 0xd8, 0xff, 0xda, 0x00, 0x04, 0, 0 };
    static const unsigned char gif[] = { 'G', 'I', 'F', '8', '9', 'a', 0x10, 0x00, 0x20, 0x00, 0 };
    static const unsigned char vp8[30] = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P', 'V',
        'P', '8', ' ', 0, 0, 0, 0, 0, 0, 0, 0x9d, 0x01, 0x2a, 0x40, 0x01, 0xf0, 0x00 };
    /* VP8L: 0x2f, then 14 bits width-1 = 99, 14 bits height-1 = 49 */
    unsigned char vp8l[25] = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8',
        'L', 0, 0, 0, 0, 0x2f };
    static const unsigned char vp8x[30] = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P',
        'V', 'P', '8', 'X', 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x03, 0, 0xff, 0x01, 0 };
    uint32_t w, h, bits = 99u | 49u << 14;
    vp8l[21] = (unsigned char)bits;
    vp8l[22] = (unsigned char)(bits >> 8);
    vp8l[23] = (unsigned char)(bits >> 16);
    vp8l[24] = (unsigned char)(bits >> 24);
    CHECK(n == 74);
    CHECK(strcmp(coai_image_sniff(png, (size_t)n, &w, &h), "image/png") == 0 && w == 3 && h == 2);
    CHECK(strcmp(coai_image_sniff(png, 20, &w, &h), "image/png") == 0 && w == 0 && h == 0);
    CHECK(strcmp(coai_image_sniff(jpg, sizeof jpg, &w, &h), "image/jpeg") == 0);
    CHECKF(w == 640 && h == 480, "%u x %u", w, h);
    CHECK(strcmp(coai_image_sniff(jpg, 28, &w, &h), "image/jpeg") == 0 && w == 0);
    CHECK(strcmp(coai_image_sniff(jpg_sos, sizeof jpg_sos, &w, &h), "image/jpeg") == 0 && !w);
    CHECK(strcmp(coai_image_sniff(gif, sizeof gif, &w, &h), "image/gif") == 0 && w == 16 && h == 32);
    CHECK(strcmp(coai_image_sniff(vp8, sizeof vp8, &w, &h), "image/webp") == 0);
    CHECKF(w == 320 && h == 240, "%u x %u", w, h);
    CHECK(strcmp(coai_image_sniff(vp8l, sizeof vp8l, &w, &h), "image/webp") == 0);
    CHECKF(w == 100 && h == 50, "%u x %u", w, h);
    CHECK(strcmp(coai_image_sniff(vp8x, sizeof vp8x, &w, &h), "image/webp") == 0);
    CHECKF(w == 1024 && h == 512, "%u x %u", w, h);
    CHECK(coai_image_sniff((const unsigned char *)"BM\x00\x00", 4, &w, &h) == NULL);
    {   /* BMP (issue 24 item 8): BITMAPINFOHEADER, a top-down one, a core header; "BM" with
         * an unknown DIB header size is not taken */
        unsigned char bmp[58];
        memset(bmp, 0, sizeof bmp);
        memcpy(bmp, "BM", 2);
        bmp[2] = sizeof bmp;
        bmp[10] = 54;
        bmp[14] = 40;                                    /* DIB header size */
        bmp[18] = 2; bmp[22] = 3;                        /* 2 x 3 */
        bmp[26] = 1; bmp[28] = 24;
        CHECK(strcmp(coai_image_sniff(bmp, sizeof bmp, &w, &h), "image/bmp") == 0);
        CHECKF(w == 2 && h == 3, "%u x %u", w, h);
        bmp[22] = 0xfd; bmp[23] = bmp[24] = bmp[25] = 0xff;   /* height -3: top-down */
        CHECK(strcmp(coai_image_sniff(bmp, sizeof bmp, &w, &h), "image/bmp") == 0 && h == 3);
        memset(bmp + 14, 0, 12);
        bmp[14] = 12; bmp[18] = 7; bmp[20] = 5;          /* BITMAPCOREHEADER: 7 x 5 */
        CHECK(strcmp(coai_image_sniff(bmp, sizeof bmp, &w, &h), "image/bmp") == 0);
        CHECKF(w == 7 && h == 5, "%u x %u", w, h);
        bmp[14] = 41;
        CHECK(coai_image_sniff(bmp, sizeof bmp, &w, &h) == NULL);
        CHECK(coai_image_sniff(bmp, 25, &w, &h) == NULL);
    }
    CHECK(coai_image_sniff((const unsigned char *)"%PDF-1.4", 8, NULL, NULL) == NULL);
    CHECK(coai_image_sniff(png, 0, &w, &h) == NULL && w == 0);
}

static void test_image_url(void)
{
    coai_image im, im2;
    coai_error e;
    coai_buf u = { 0 };
    coai_buf_printf(&u, "data:image/jpeg;base64,%s", PNG_B64);   /* declared type is not used */
    CHECK(coai_image_from_url(&im, coai_str_c((char *)u.data), 0, "p", &e) == 0);
    CHECK(strcmp(im.mime, "image/png") == 0 && im.len == 74 && im.width == 3 && im.height == 2);
    CHECK(strlen(im.uuid) == 36 && im.uuid[14] == '4');
    /* line-wrapped base64 is fine, and the same bytes give the same uuid */
    coai_buf_reset(&u);
    coai_buf_printf(&u, "data:image/png;base64,%.20s\r\n %s", PNG_B64, PNG_B64 + 20);
    CHECK(coai_image_from_url(&im2, coai_str_c((char *)u.data), 0, "p", &e) == 0);
    CHECK(strcmp(im.uuid, im2.uuid) == 0 && im2.len == 74);
    coai_image_free(&im2);
    coai_image_free(&im);
    CHECK(coai_image_from_url(&im, S_("https://example.com/a.png"), 0, "x.url", &e)
          == COAI_ERR_INVALID);
    CHECK(e.status == 400 && strcmp(e.code, "image_url_not_supported") == 0);
    CHECK(strcmp(e.param, "x.url") == 0 && strstr(e.message, "not fetched") != NULL);
    CHECK(im.data == NULL);
    CHECK(coai_image_from_url(&im, S_("HTTP://example.com/a.png"), 0, "x", &e) < 0);
    CHECK(strcmp(e.code, "image_url_not_supported") == 0);
    CHECK(coai_image_from_url(&im, S_("file:///etc/passwd"), 0, "x", &e) == COAI_ERR_INVALID);
    CHECK(strcmp(e.code, "invalid_image_url") == 0);
    CHECK(coai_image_from_url(&im, S_("data:text/plain;base64,QUJD"), 0, "x", &e) < 0);
    CHECK(strcmp(e.code, "invalid_image_format") == 0);
    CHECK(coai_image_from_url(&im, S_("data:image/png;base64,QUJD"), 0, "x", &e) < 0);
    CHECK(strcmp(e.code, "invalid_image_format") == 0 && strstr(e.message, "not a JPEG"));
    CHECK(coai_image_from_url(&im, S_("data:image/png;base64,Q!JD"), 0, "x", &e) < 0);
    CHECK(strcmp(e.code, "invalid_image_url") == 0 && e.status == 400);
    CHECK(coai_image_from_url(&im, S_("data:image/png;base64,"), 0, "x", &e) < 0);
    CHECK(e.status == 400);
    /* the cap: 74 bytes do not fit in 73; refused before decoding when clearly over */
    coai_buf_reset(&u);
    coai_buf_printf(&u, "data:image/png;base64,%s", PNG_B64);
    CHECK(coai_image_from_url(&im, coai_str_c((char *)u.data), 73, "x", &e) == COAI_ERR_TOO_BIG);
    CHECK(e.status == 413 && strcmp(e.code, "image_too_large") == 0 && strstr(e.message, "73"));
    CHECK(coai_image_from_url(&im, coai_str_c((char *)u.data), 10, "x", &e) == COAI_ERR_TOO_BIG);
    CHECK(coai_image_from_url(&im, coai_str_c((char *)u.data), 74, "x", &e) == 0);
    coai_image_free(&im);
    coai_buf_free(&u);
}

/* Find field `num` (length-delimited) at the top level of p[0..n). */
static int pb_find(const unsigned char *p, size_t n, uint32_t num, const unsigned char **out,
                   size_t *on)
{
    size_t pos = 0;
    pbw_field f;
    while (pbw_next(p, n, &pos, &f) == 1)
        if (f.num == num && f.wire == 2) { *out = f.p; *on = f.n; return 1; }
    return 0;
}

/* The value of varint field num, or -1 when absent. */
static int64_t pb_varint_of(const unsigned char *p, size_t n, uint32_t num)
{
    size_t pos = 0;
    pbw_field f;
    while (pbw_next(p, n, &pos, &f) == 1)
        if (f.num == num && f.wire == 0) return (int64_t)f.v;
    return -1;
}

static void test_image_request(void)
{
    coai_chat_request q;
    coai_error e;
    coai_buf b = { 0 }, msg = { 0 };
    coai_run_params rp;
    const unsigned char *p;
    size_t n;
    uint64_t v;
    coai_image_limits lim;
    /* an image in an earlier user message becomes a marker; the newest one's is sent */
    coai_buf_printf(&b, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"first\"},{\"type\":\"image_url\",\"image_url\":{\"url\":"
                    "\"https://old.example/a.png\"}}]},{\"role\":\"assistant\",\"content\":\"ok\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this\"},"
                    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\","
                    "\"detail\":\"high\"}},{\"type\":\"image_url\",\"image_url\":"
                    "\"data:image/png;base64,%s\"}]}]}", PNG_B64, PNG_B64);
    CHECKF(coai_chat_request_parse(&q, (char *)b.data, b.len, &e) == 0, "%s", e.message);
    CHECK(q.image_count == 2 && q.images[0].width == 3 && q.images[1].len == 74);
    CHECKF(strcmp((char *)q.prompt.data, "User: first\n[image omitted: attached to an earlier "
                  "message]\n\nAssistant: ok\n\nUser: what is this") == 0, "%s",
           (char *)q.prompt.data);
    memset(&rp, 0, sizeof rp);
    coai_chat_request_params(&q, &rp);
    rp.model_id = S_("m");
    rp.message_id = S_("11111111-1111-4111-8111-111111111111");
    CHECK(rp.image_count == 2);
    CHECK(coai_encode_run_request(&msg, &rp) == COAI_OK);
    /* AgentRunRequest.client_supports_inline_images (19) = true: Cursor ignores inline image
     * data without it (issue 24 item 8) */
    CHECK(pb_find(msg.data, msg.len, 1, &p, &n) && pb_varint_of(p, n, 19) == 1);
    /* AgentClientMessage.1 run_request .2 action .1 user_message_action .1 user_message .3 */
    CHECK(pbw_walk(msg.data, msg.len));
    CHECK(pb_find(msg.data, msg.len, 1, &p, &n) && pb_find(p, n, 2, &p, &n)
          && pb_find(p, n, 1, &p, &n) && pb_find(p, n, 1, &p, &n));
    {
        const unsigned char *sc, *si, *d;
        size_t scn, sin, dn, pos = 0, count = 0;
        pbw_field f;
        CHECK(pb_find(p, n, 3, &sc, &scn));
        while (pbw_next(sc, scn, &pos, &f) == 1) {
            CHECK(f.num == 1 && f.wire == 2);
            count++;
        }
        CHECK(count == 2);
        CHECK(pb_find(sc, scn, 1, &si, &sin));
        CHECK(pb_find(si, sin, 8, &d, &dn) && dn == 74 && memcmp(d, "\x89PNG", 4) == 0);
        CHECK(pb_find(si, sin, 7, &d, &dn) && dn == 9 && memcmp(d, "image/png", 9) == 0);
        CHECK(pb_find(si, sin, 2, &d, &dn) && dn == 36);
        CHECK(pb_find(si, sin, 4, &d, &dn) && dn == 4);   /* {1: 3, 2: 2} */
        CHECK(pbw_varint(d + 1, 1, &v) == 1 && v == 3 && pbw_varint(d + 3, 1, &v) == 1 && v == 2);
        CHECK(!pb_find(si, sin, 1, &d, &dn));              /* never a blob id */
    }
    coai_buf_free(&msg);
    coai_chat_request_free(&q);

    /* without images the run request has no selected_context (the original's bytes) */
    CHECK(coai_chat_request_parse(&q, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                                  45, &e) == 0);
    memset(&rp, 0, sizeof rp);
    coai_chat_request_params(&q, &rp);
    CHECK(coai_encode_run_request(&msg, &rp) == COAI_OK);
    CHECK(pb_find(msg.data, msg.len, 1, &p, &n) && pb_find(p, n, 2, &p, &n)
          && pb_find(p, n, 1, &p, &n) && pb_find(p, n, 1, &p, &n) && !pb_find(p, n, 3, &p, &n));
    CHECK(pb_find(msg.data, msg.len, 1, &p, &n) && pb_varint_of(p, n, 19) == -1);
    coai_buf_free(&msg);
    coai_chat_request_free(&q);

    /* caps: count and total, configurable per request */
    memset(&lim, 0, sizeof lim);
    lim.max_count = 1;
    CHECK(coai_request_parse_ex(&q, COAI_DIALECT_OPENAI_CHAT, (char *)b.data, b.len, &lim, &e) == COAI_ERR_INVALID);
    CHECKF(e.status == 400 && strcmp(e.param, "messages[2].content") == 0
           && strstr(e.message, "at most 1"), "%s", e.message);
    lim.max_count = 0;
    lim.max_total = 100;
    CHECK(coai_request_parse_ex(&q, COAI_DIALECT_OPENAI_CHAT, (char *)b.data, b.len, &lim, &e) == COAI_ERR_TOO_BIG);
    CHECK(e.status == 413 && strcmp(e.code, "images_too_large") == 0);
    lim.max_total = 0;
    lim.max_bytes = 50;
    CHECK(coai_request_parse_ex(&q, COAI_DIALECT_OPENAI_CHAT, (char *)b.data, b.len, &lim, &e) == COAI_ERR_TOO_BIG);
    CHECKF(e.status == 413 && strcmp(e.param, "messages[2].content[1].image_url.url") == 0,
           "%s", e.param);
    coai_buf_free(&b);
}

static int parse_err(const char *body, coai_error *e)
{
    coai_chat_request q;
    int rc = coai_chat_request_parse(&q, body, strlen(body), e);
    coai_chat_request_free(&q);
    return rc;
}

/* Unknown content parts are refused with the part named (issue 16). */
static void test_unknown_parts(void)
{
    coai_error e;
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                    "\"hi\"},{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"AA\"}}]}]}",
                    &e) == COAI_ERR_INVALID);
    CHECK(e.status == 400 && strcmp(e.param, "messages[0].content[1].type") == 0);
    CHECKF(strstr(e.message, "'input_audio' is not supported") != NULL, "%s", e.message);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}",
                    &e) == COAI_ERR_INVALID && strcmp(e.param, "messages[0].content[0].type") == 0);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":"
                    "{}}]}]}", &e) == COAI_ERR_INVALID);
    /* images only in user messages; refusal only in assistant messages */
    CHECK(parse_err("{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\","
                    "\"image_url\":{\"url\":\"data:,\"}}]},{\"role\":\"user\",\"content\":\"x\"}]}",
                    &e) == COAI_ERR_INVALID && strcmp(e.param, "messages[0].content[0].type") == 0);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"refusal\","
                    "\"refusal\":\"no\"}]}]}", &e) == COAI_ERR_INVALID);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                    "\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}]},{\"role\":\"user\","
                    "\"content\":\"again\"}]}", &e) == 0);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                    "\"image_url\":{}}]}]}", &e) == COAI_ERR_INVALID);
    CHECK(strcmp(e.param, "messages[0].content[0].image_url.url") == 0);
}

/* Lone surrogate escapes become U+FFFD; pairs stay; duplicate keys are refused (issue 16). */
static void test_surrogates_dups(void)
{
    coai_chat_request q;
    coai_error e;
    const char *b1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\ud800b\\udc00c\\ud83d\\ude00"
                     "d\\uD800\\u0041\"}]}";
    CHECKF(coai_chat_request_parse(&q, b1, strlen(b1), &e) == 0, "%s", e.message);
    CHECKF(strcmp((char *)q.prompt.data, "User: a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xf0\x9f\x98\x80"
                  "d\xef\xbf\xbd" "A") == 0, "%s", (char *)q.prompt.data);
    coai_chat_request_free(&q);
    /* a \u without four hex digits is refused (cJSON would read U+0000 and cut the text) */
    b1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"ab\\uZ800cd\"}]}";
    CHECK(coai_chat_request_parse(&q, b1, strlen(b1), &e) == COAI_ERR_JSON);
    CHECK(e.status == 400 && strstr(e.message, "four hex digits") != NULL);
    /* a surrogate escape at the very end, truncated: still a JSON error, not a crash */
    CHECK(coai_chat_request_parse(&q, "{\"a\":\"\\ud8", 10, &e) == COAI_ERR_JSON);
    /* an escaped backslash before "ud800" is text, not an escape */
    b1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"\\\\ud800\"}]}";
    CHECK(coai_chat_request_parse(&q, b1, strlen(b1), &e) == 0);
    CHECKF(strcmp((char *)q.prompt.data, "User: \\ud800") == 0, "%s", (char *)q.prompt.data);
    coai_chat_request_free(&q);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"messages\":[]}", &e)
          == COAI_ERR_INVALID);
    CHECKF(e.status == 400 && strcmp(e.code, "duplicate_key") == 0
           && strstr(e.message, "'messages' twice"), "%s", e.message);
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"user\"}]}", &e)
          == COAI_ERR_INVALID && strstr(e.message, "'role'"));
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                    "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                    "\"properties\":{\"a\":{},\"b\":{},\"a\":{}}}}}]}", &e) == COAI_ERR_INVALID);
    CHECK(strstr(e.message, "'a'") != NULL);
    /* the same name at different levels is fine */
    CHECK(parse_err("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"metadata\":"
                    "{\"messages\":1}}", &e) == 0);
}

/* ---- request fields (emulated in the core reply) ------------------------------ */

static int null_send(void *u, const unsigned char *m, size_t n) { (void)u; (void)m; (void)n; return 0; }

typedef struct fx {
    coai_chat_request q;
    coai_reply r;
    coai_buf out;            /* everything the reply wrote */
} fx;

static int fx_start(fx *f, const char *body)
{
    coai_error e;
    coai_reply_opts o;
    memset(f, 0, sizeof *f);
    if (coai_chat_request_parse(&f->q, body, strlen(body), &e) != 0) {
        fprintf(stderr, "parse: %s\n", e.message);
        return -1;
    }
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &f->q);
    o.completion_id = S_("chatcmpl-1");
    o.model = S_("auto");
    o.created = 1;
    o.send = null_send;
    return coai_reply_init(&f->r, &o);
}

static int fx_feed(fx *f, coai_msg_kind k, const char *t)
{
    coai_msg m;
    int rc;
    memset(&m, 0, sizeof m);
    m.kind = k;
    m.text = S_(t);
    if (k == COAI_MSG_TOKENS) m.value = atoi(t);
    rc = coai_reply_feed_msg(&f->r, &m);
    coai_buf_append(&f->out, f->r.out.data, f->r.out.len);
    coai_buf_reset(&f->r.out);
    return rc;
}

static void fx_end(fx *f)
{
    coai_reply_free(&f->r);
    coai_chat_request_free(&f->q);
    coai_buf_free(&f->out);
}

/* Content of all SSE chunks, or of the one chat.completion. */
static void fx_content(fx *f, coai_buf *c, char *finish, size_t fcap)
{
    const char *p = (const char *)f->out.data;
    finish[0] = 0;
    coai_buf_reset(c);
    if (!p) return;
    if (strncmp(p, "data: ", 6) != 0) {
        cJSON *j = cJSON_Parse(p), *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        cJSON *ct = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content");
        cJSON *fr = cJSON_GetObjectItem(ch, "finish_reason");
        if (cJSON_IsString(ct)) coai_buf_puts(c, ct->valuestring);
        if (cJSON_IsString(fr)) snprintf(finish, fcap, "%s", fr->valuestring);
        cJSON_Delete(j);
        return;
    }
    while ((p = strstr(p, "data: ")) != NULL) {
        const char *e = strstr(p, "\n\n");
        cJSON *j = cJSON_ParseWithLength(p + 6, e ? (size_t)(e - p - 6) : strlen(p + 6));
        cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
        cJSON *fr = cJSON_GetObjectItem(ch, "finish_reason");
        if (cJSON_IsString(d)) coai_buf_puts(c, d->valuestring);
        if (cJSON_IsString(fr)) snprintf(finish, fcap, "%s", fr->valuestring);
        cJSON_Delete(j);
        p = e ? e : p + 6;
    }
}

static void test_stop(void)
{
    fx f;
    coai_buf c = { 0 };
    char fin[32];
    /* a stop sequence split across three deltas: cut before it, finish "stop" */
    CHECK(fx_start(&f, "{\"stream\":true,\"stop\":[\"END\",\"zzz\"],\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"x\"}]}") == 0);
    CHECK(f.q.stop_count == 2);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "Hello E") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "N") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "D and more") == COAI_DONE);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "after") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "Hello ") == 0 && strcmp(fin, "stop") == 0, "'%s' %s",
           (char *)c.data, fin);
    CHECK(strstr((char *)f.out.data, "END") == NULL && strstr((char *)f.out.data, "[DONE]"));
    fx_end(&f);
    /* the earliest of several matches wins; non-streaming */
    CHECK(fx_start(&f, "{\"stop\":[\"b\",\"a\"],\"messages\":[{\"role\":\"user\",\"content\":"
                   "\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "xyab") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "xy") == 0 && strcmp(fin, "stop") == 0, "'%s'", (char *)c.data);
    fx_end(&f);
    /* no match: everything arrives, the held tail too; "stop" as a plain string */
    CHECK(fx_start(&f, "{\"stream\":true,\"stop\":\"STOP!\",\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "it ST") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "OP? no \xc3\xa9") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "it STOP? no \xc3\xa9") == 0 && strcmp(fin, "stop") == 0,
           "'%s'", (char *)c.data);
    fx_end(&f);
    /* reasoning is never cut by stop sequences */
    CHECK(fx_start(&f, "{\"stream\":true,\"stop\":[\"X\"],\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_THINKING, "XXX") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "aXb") == COAI_DONE);
    CHECK(strstr((char *)f.out.data, "\"reasoning_content\":\"XXX\"") != NULL);
    fx_end(&f);
    coai_buf_free(&c);
}

static void test_max_tokens(void)
{
    fx f;
    coai_buf c = { 0 };
    char fin[32];
    cJSON *j;
    /* 3 tokens = 12 UTF-16 units by the estimate: cut there, finish "length" */
    CHECK(fx_start(&f, "{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}")
          == 0);
    CHECK(f.q.max_tokens == 3);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "abcdefgh") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "ijklmnop") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "abcdefghijkl") == 0 && strcmp(fin, "length") == 0,
           "'%s' %s", (char *)c.data, fin);
    j = cJSON_Parse((char *)f.out.data);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint
          == 3);
    cJSON_Delete(j);
    fx_end(&f);
    /* max_completion_tokens, streaming; Cursor's own count can end it first */
    CHECK(fx_start(&f, "{\"stream\":true,\"max_completion_tokens\":100,\"max_tokens\":200,"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}") == 0);
    CHECK(f.q.max_tokens == 100);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "one") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TOKENS, "100") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "two") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "one") == 0 && strcmp(fin, "length") == 0, "'%s' %s",
           (char *)c.data, fin);
    fx_end(&f);
    /* a character is never split: 1 token = 4 units; "ab" + an astral (2 units) fit */
    CHECK(fx_start(&f, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}")
          == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "a\xf0\x9f\x98\x80\xf0\x9f\x98\x80") == COAI_DONE);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "a\xf0\x9f\x98\x80") == 0, "'%s'", (char *)c.data);
    fx_end(&f);
    coai_buf_free(&c);
}

static void test_json_format(void)
{
    fx f;
    coai_buf c = { 0 };
    char fin[32];
    static const char schema_req[] = "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
        "{\"name\":\"p\",\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
        "\"string\"}},\"required\":[\"name\"]}}},\"messages\":[{\"role\":\"user\",\"content\":"
        "\"x\"}]}";
    /* the instruction goes into the prompt, with the schema */
    CHECK(fx_start(&f, schema_req) == 0);
    CHECK(strstr((char *)f.q.prompt.data, "[Output format: answer with exactly one JSON object")
          != NULL);
    CHECK(strstr((char *)f.q.prompt.data, "\"required\":[\"name\"]") != NULL);
    /* fenced JSON with the required member: fences removed, 200 */
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "```json\n{\"name\": \"Ada\"}\n```") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    CHECK(coai_reply_status(&f.r) == 200);
    fx_content(&f, &c, fin, sizeof fin);
    CHECKF(strcmp((char *)c.data, "{\"name\": \"Ada\"}") == 0, "'%s'", (char *)c.data);
    fx_end(&f);
    /* a missing required member: a clear 502, never bad JSON as success */
    CHECK(fx_start(&f, schema_req) == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "{\"nom\":1}") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    CHECK(coai_reply_status(&f.r) == 502);
    CHECKF(strstr((char *)f.out.data, "invalid_json_output")
           && strstr((char *)f.out.data, "lacks the required member 'name'"), "%s",
           (char *)f.out.data);
    fx_end(&f);
    /* json_object: prose is refused; an array is not an object */
    CHECK(fx_start(&f, "{\"response_format\":{\"type\":\"json_object\"},\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "Sure! {\"a\":1}") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    CHECK(coai_reply_status(&f.r) == 502 && strstr((char *)f.out.data, "is not valid JSON"));
    fx_end(&f);
    CHECK(fx_start(&f, "{\"response_format\":{\"type\":\"json_object\"},\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "[1]") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    CHECK(coai_reply_status(&f.r) == 502 && strstr((char *)f.out.data, "not an object"));
    fx_end(&f);
    coai_buf_free(&c);
}

static void test_field_errors(void)
{
    coai_error e;
    static const struct { const char *body, *param; } bad[] = {
        { "{\"logprobs\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "logprobs" },
        { "{\"top_logprobs\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          "top_logprobs" },
        { "{\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "n" },
        { "{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens" },
        { "{\"max_completion_tokens\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          "max_completion_tokens" },
        { "{\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"messages\":[{\"role\":\"user\",\"content\":"
          "\"x\"}]}", "stop" },
        { "{\"stop\":[\"a\",\"\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          "stop[1]" },
        { "{\"stop\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "stop" },
        { "{\"response_format\":{\"type\":\"xml\"},\"messages\":[{\"role\":\"user\",\"content\":"
          "\"x\"}]}", "response_format.type" },
        { "{\"modalities\":[\"text\",\"audio\"],\"messages\":[{\"role\":\"user\",\"content\":"
          "\"x\"}]}", "modalities" },
        { "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":"
          "{\"type\":\"function\",\"function\":{\"name\":\"b\"}},\"messages\":[{\"role\":\"user\","
          "\"content\":\"x\"}]}", "tool_choice" },
        { "{\"tool_choice\":\"sometimes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          "tool_choice" },
        { "{\"parallel_tool_calls\":\"no\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          "parallel_tool_calls" },
    };
    size_t i;
    coai_chat_request q;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(parse_err(bad[i].body, &e) == COAI_ERR_INVALID, "case %zu", i);
        CHECKF(e.status == 400 && strcmp(e.param, bad[i].param) == 0, "case %zu: %d '%s'", i,
               e.status, e.param);
    }
    /* ignored fields are accepted */
    CHECK(parse_err("{\"temperature\":0.2,\"top_p\":0.9,\"seed\":7,\"user\":\"u\",\"metadata\":"
                    "{\"k\":\"v\"},\"frequency_penalty\":0,\"presence_penalty\":0,\"logprobs\":"
                    "false,\"parallel_tool_calls\":false,\"messages\":[{\"role\":\"user\","
                    "\"content\":\"x\"}]}", &e) == 0);
    /* a named tool: only that tool is offered, and the prompt asks for it */
    {
        const char *b = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}],\"tool_choice\":"
                        "{\"type\":\"function\",\"function\":{\"name\":\"b\"}},\"messages\":"
                        "[{\"role\":\"user\",\"content\":\"x\"}]}";
        CHECK(coai_chat_request_parse(&q, b, strlen(b), &e) == 0);
        CHECK(q.tool_count == 1 && coai_str_eq(q.tools[0].name, "b"));
        CHECK(strstr((char *)q.prompt.data, "[Instruction: answer by calling the tool b.]"));
        coai_chat_request_free(&q);
        b = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":"
            "\"required\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
        CHECK(coai_chat_request_parse(&q, b, strlen(b), &e) == 0);
        CHECK(q.tool_count == 1 && strstr((char *)q.prompt.data, "calling one of the available"));
        coai_chat_request_free(&q);
    }
}

/* The same emulations reach Anthropic Messages and OpenAI Responses through the core. */
static int fx_start_d(fx *f, coai_dialect d, const char *body)
{
    coai_error e;
    coai_reply_opts o;
    memset(f, 0, sizeof *f);
    if (coai_request_parse(&f->q, d, body, strlen(body), &e) != 0) {
        fprintf(stderr, "parse: %s\n", e.message);
        return -1;
    }
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &f->q);
    o.completion_id = S_(d == COAI_DIALECT_ANTHROPIC ? "msg_1" : "resp_1");
    o.model = S_("m");
    o.created = 1;
    o.send = null_send;
    return coai_reply_init(&f->r, &o);
}

/* coai_request_parse with n = 0 meaning strlen (the literals above are long) */
static int rparse(coai_request *q, coai_dialect d, const char *body, size_t n, coai_error *e)
{
    return coai_request_parse(q, d, body, n ? n : strlen(body), e);
}

static void test_other_dialects(void)
{
    fx f;
    coai_error e;
    coai_request q;
    coai_buf b = { 0 };
    /* Anthropic: stop_sequences across deltas -> stop_reason stop_sequence + the sequence */
    CHECK(fx_start_d(&f, COAI_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":100,"
                     "\"stream\":true,\"stop_sequences\":[\"##\"],\"messages\":[{\"role\":\"user\","
                     "\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "one #") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "# two") == COAI_DONE);
    CHECKF(strstr((char *)f.out.data, "\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"##\"")
           && strstr((char *)f.out.data, "\"text\":\"one \"") && !strstr((char *)f.out.data,
                                                                          "two"),
           "%s", (char *)f.out.data);
    fx_end(&f);
    /* Anthropic: max_tokens -> stop_reason max_tokens */
    CHECK(fx_start_d(&f, COAI_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":2,"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "0123456789") == COAI_DONE);
    CHECKF(strstr((char *)f.out.data, "\"stop_reason\":\"max_tokens\"")
           && strstr((char *)f.out.data, "\"text\":\"01234567\""), "%s", (char *)f.out.data);
    fx_end(&f);
    /* Anthropic: a base64 image block is decoded and sent; tool_choice tool narrows tools */
    coai_buf_printf(&b, "{\"model\":\"m\",\"max_tokens\":9,\"tools\":[{\"name\":\"a\","
                    "\"input_schema\":{\"type\":\"object\"}},{\"name\":\"b\",\"input_schema\":"
                    "{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"},"
                    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
                    "{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},{\"type\":"
                    "\"text\",\"text\":\"what?\"}]}]}", PNG_B64);
    CHECKF(rparse(&q, COAI_DIALECT_ANTHROPIC, (char *)b.data, b.len, &e) == 0, "%s",
           e.message);
    CHECK(q.image_count == 1 && q.images[0].width == 3 && strcmp(q.images[0].mime, "image/png") == 0);
    CHECK(q.tool_count == 1 && coai_str_eq(q.tools[0].name, "b"));
    coai_request_free(&q);
    /* Anthropic: a url image source is refused like a remote image_url */
    CHECK(rparse(&q, COAI_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":9,"
                             "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                             "\"source\":{\"type\":\"url\",\"url\":\"https://x/y.png\"}}]}]}", 0,
                             &e) < 0);
    CHECKF(e.status == 400 && strcmp(e.code, "image_url_not_supported") == 0, "%d %s", e.status,
           e.message);
    /* duplicate keys: refused for every dialect */
    CHECK(rparse(&q, COAI_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"model\":\"n\","
                             "\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                             0, &e) == COAI_ERR_INVALID && strcmp(e.code, "duplicate_key") == 0);
    CHECK(rparse(&q, COAI_DIALECT_RESPONSES, "{\"model\":\"m\",\"input\":\"x\","
                             "\"input\":\"y\"}", 0, &e) == COAI_ERR_INVALID
          && strcmp(e.code, "duplicate_key") == 0);
    /* Responses: max_output_tokens cuts with finish LENGTH; input_image is decoded */
    CHECK(fx_start_d(&f, COAI_DIALECT_RESPONSES, "{\"model\":\"m\",\"max_output_tokens\":1,"
                     "\"input\":\"x\"}") == 0);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "abcdefgh") == COAI_DONE);
    CHECKF(strstr((char *)f.out.data, "\"max_output_tokens\"") && strstr((char *)f.out.data,
                                                                        "\"text\":\"abcd\""),
           "%s", (char *)f.out.data);
    fx_end(&f);
    coai_buf_reset(&b);
    coai_buf_printf(&b, "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                    "\"input_image\",\"image_url\":\"data:image/png;base64,%s\"}]}]}", PNG_B64);
    CHECKF(rparse(&q, COAI_DIALECT_RESPONSES, (char *)b.data, b.len, &e) == 0, "%s",
           e.message);
    CHECK(q.image_count == 1 && q.images[0].len == 74);
    coai_request_free(&q);
    /* Responses: text.format json_schema -> the same instruction and non-streaming check */
    CHECK(fx_start_d(&f, COAI_DIALECT_RESPONSES, "{\"model\":\"m\",\"input\":\"x\",\"text\":"
                     "{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"schema\":"
                     "{\"type\":\"object\",\"required\":[\"id\"]}}}}") == 0);
    CHECK(strstr((char *)f.q.prompt.data, "[Output format: answer with exactly one JSON object")
          != NULL);
    CHECK(fx_feed(&f, COAI_MSG_TEXT, "{\"name\":1}") == COAI_OK);
    CHECK(fx_feed(&f, COAI_MSG_TURN_ENDED, "") == COAI_DONE);
    CHECKF(coai_reply_status(&f.r) == 502 && strstr((char *)f.out.data, "invalid_json_output"),
           "%s", (char *)f.out.data);
    fx_end(&f);
    /* Anthropic: a tool_result image of the current turn is sent; an earlier one is a
     * marker in the prompt */
    coai_buf_reset(&b);
    coai_buf_printf(&b, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":["
                    "{\"role\":\"user\",\"content\":\"shot 1\"},"
                    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
                    "\"name\":\"shot\",\"input\":{}}]},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
                    "\"t1\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                    "\"media_type\":\"image/png\",\"data\":\"%s\"}}]},{\"type\":\"text\","
                    "\"text\":\"and now?\"}]},"
                    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t2\","
                    "\"name\":\"shot\",\"input\":{}}]},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
                    "\"t2\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                    "\"media_type\":\"image/png\",\"data\":\"%s\"}}]}]}]}", PNG_B64, PNG_B64);
    CHECKF(rparse(&q, COAI_DIALECT_ANTHROPIC, (char *)b.data, b.len, &e) == 0, "%s", e.message);
    CHECKF(q.image_count == 1, "%zu images", q.image_count);
    CHECKF(strstr((char *)q.prompt.data, "[Tool result for t1]: [image omitted: attached to an "
                  "earlier message]") != NULL, "%s", (char *)q.prompt.data);
    CHECKF(strstr((char *)q.prompt.data, "[Tool result for t2]: ") != NULL, "%s",
           (char *)q.prompt.data);
    CHECK(strstr((char *)q.prompt.data, "t2]: [image omitted") == NULL);
    /* McpImageContent for a tool result with images */
    {
        coai_buf m = { 0 };
        const unsigned char *p, *d;
        size_t n, dn, pos = 0, items = 0;
        pbw_field fl;
        CHECK(coai_encode_exec_mcp_result_images(&m, 7, S_("ex-7"), S_("see"), q.images, 1, 0)
              == COAI_OK);
        CHECK(pbw_walk(m.data, m.len));
        /* AgentClientMessage.2 exec_client_message .11 mcp_result .1 success */
        CHECK(pb_find(m.data, m.len, 2, &p, &n) && pb_find(p, n, 11, &p, &n)
              && pb_find(p, n, 1, &p, &n));
        while (pbw_next(p, n, &pos, &fl) == 1) items += fl.num == 1;
        CHECK(items == 2);
        pos = 0;
        CHECK(pbw_next(p, n, &pos, &fl) == 1 && pbw_next(p, n, &pos, &fl) == 1);
        CHECK(pb_find(fl.p, fl.n, 2, &d, &dn) && pb_find(d, dn, 1, &p, &n) && n == 74
              && pb_find(d, dn, 2, &p, &n) && n == 9 && memcmp(p, "image/png", 9) == 0);
        coai_buf_free(&m);
    }
    /* which images belong to which tool result: t2's (current turn) is req->images[0];
     * t1's is older (a marker, not decoded); unknown ids have none */
    {
        const coai_image *im = NULL;
        coai_exec_ref x;
        coai_buf a = { 0 }, c = { 0 };
        CHECK(coai_request_tool_result_images(&q, S_("t2"), &im) == 1 && im == q.images);
        CHECK(coai_request_tool_result_images(&q, S_("t1"), &im) == 0 && im == NULL);
        CHECK(coai_request_tool_result_images(&q, S_("t9"), &im) == 0);
        /* an exec answer with images: only MCP takes them; n = 0 is the plain answer */
        memset(&x, 0, sizeof x);
        x.kind = COAI_EXEC_READ;
        x.id = 3;
        x.exec_id = S_("ex-3");
        x.path = S_("/a.png");
        CHECK(coai_encode_exec_answer_images(&a, &x, S_("t"), q.images, 1, 0, 5, 0)
              == COAI_ERR_INVALID && a.len == 0);
        x.kind = COAI_EXEC_MCP;
        CHECK(coai_encode_exec_answer_images(&a, &x, S_("t"), q.images, 1, 0, 5, 0) == COAI_OK);
        CHECK(pbw_walk(a.data, a.len) && a.len > 74);
        coai_buf_reset(&a);
        CHECK(coai_encode_exec_answer_images(&a, &x, S_("t"), NULL, 0, 1, 5, 0) == COAI_OK);
        CHECK(coai_encode_exec_answer(&c, &x, S_("t"), 1, 5, 0) == COAI_OK);
        CHECK(a.len == c.len && memcmp(a.data, c.data, a.len) == 0);
        /* the second step is stream_close */
        coai_buf_reset(&a);
        CHECK(coai_encode_exec_answer_images(&a, &x, S_("t"), q.images, 1, 0, 5, 1) == COAI_OK);
        CHECK(coai_encode_exec_answer_images(&a, &x, S_("t"), q.images, 1, 0, 5, 2) == COAI_DONE);
        coai_buf_free(&a);
        coai_buf_free(&c);
    }
    coai_request_free(&q);
    /* the in-place helpers server.c uses on the Responses path */
    {
        char body[] = "{\"a\":\"\\ud800x\\ud83d\\ude00\"}";
        CHECK(coai_json_fix_surrogates(body, strlen(body)) == 1);
        CHECK(strcmp(body, "{\"a\":\"\\ufffdx\\ud83d\\ude00\"}") == 0);
        CHECK(coai_json_fix_surrogates((char[]){ '"', '\\', 'u', '1', '"', 0 }, 5) == -1);
    }
    coai_buf_free(&b);
}

int main(void)
{
    test_usage_plan();
    test_usage_shapes();
    test_iso8601();
    test_limit_message();
    test_data_url();
    test_sniff();
    test_image_url();
    test_image_request();
    test_unknown_parts();
    test_surrogates_dups();
    test_stop();
    test_max_tokens();
    test_json_format();
    test_field_errors();
    test_other_dialects();
    TEST_END();
}
