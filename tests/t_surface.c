/* t_surface.c - the USAGE part (dashboard JSON -> /v1/usage JSON, text, summary), the
 * usage-limit error message, and (below) images and request-field emulations. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>
#include <ctype.h>

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

static cJSON *usage_json(const coai_usage *u)
{
    coai_buf b = { 0 };
    cJSON *j;
    CHECK(coai_usage_write_json(&b, u) == 0);
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
    coai_usage u;
    coai_buf t = { 0 };
    cJSON *j;
    const int64_t now = 1766620800000LL;   /* 2025-12-25T00:00:00Z: 7 days before the end */
    CHECK(coai_usage_parse(&u, PERIOD_PLAN, sizeof PERIOD_PLAN - 1, PLAN_INFO,
                           sizeof PLAN_INFO - 1) == 0);
    CHECK(u.cycle_start_ms == 1764547200000LL && u.cycle_end_ms == 1767225600000LL);
    CHECK(u.used_cents == 1234 && u.limit_cents == 2000 && u.remaining_cents == 766);
    CHECK(u.od_limit_cents == 5000 && u.od_remaining_cents == 5000);
    CHECK(coai_usage_limit_reached(&u) == 0);
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
    CHECK(coai_usage_summary(&t, &u, now) == 0);
    CHECKF(strcmp((char *)t.data, "$12.34 of $20.00 included usage used (62%), $7.66 left; "
                  "resets 2026-01-01 (in 7 days)") == 0, "%s", (char *)t.data);
    coai_buf_reset(&t);
    CHECK(coai_usage_write_text(&t, &u, now) == 0);
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
    coai_usage u;
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
    CHECK(coai_usage_parse(&u, none, sizeof none - 1, NULL, 0) == 0);
    CHECK(coai_usage_limit_reached(&u) == -1);
    j = usage_json(&u);
    CHECK(jnull(j, "plan") && jnull(j, "included") && jnull(j, "on_demand"));
    CHECK(jnull(j, "resets_at") && jnull(j, "limit_reached") && jnull(j, "message"));
    CHECK(jnull(j, "billing_cycle.end") && jnum(j, "billing_cycle.start_ms") == 1764547200000.0);
    cJSON_Delete(j);
    CHECK(coai_usage_summary(&t, &u, 0) == 0);
    CHECK(strcmp((char *)t.data, "no usage figures from Cursor") == 0);
    coai_buf_reset(&t);

    CHECK(coai_usage_parse(&u, hit, sizeof hit - 1, "not json", 8) == 0);
    CHECK(coai_usage_limit_reached(&u) == 1 && u.used_cents == 2000);
    j = usage_json(&u);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "limit_reached")));
    CHECK(jnull(j, "plan"));
    cJSON_Delete(j);
    CHECK(coai_usage_summary(&t, &u, 1767225600000LL - 3 * 3600000LL) == 0);
    CHECKF(strcmp((char *)t.data, "$20.00 of $20.00 included usage used (100%), $0.00 left - "
                  "LIMIT REACHED; resets 2026-01-01 (in 3 hours)") == 0, "%s", (char *)t.data);
    coai_buf_reset(&t);

    /* plan used up, but a team on-demand pool with money left: not reached */
    CHECK(coai_usage_parse(&u, hit_od, sizeof hit_od - 1, NULL, 0) == 0);
    CHECK(coai_usage_limit_reached(&u) == 0 && u.od_used_cents == 2500);
    CHECK(strcmp(u.od_limit_type, "team") == 0);

    /* wrong types and junk read as unknown, never as 0; control bytes dropped */
    CHECK(coai_usage_parse(&u, odd, sizeof odd - 1, NULL, 0) == 0);
    CHECK(u.cycle_start_ms == COAI_USAGE_NONE && u.cycle_end_ms == COAI_USAGE_NONE);
    CHECK(u.used_cents == COAI_USAGE_NONE && u.limit_cents == COAI_USAGE_NONE);
    CHECK(u.remaining_cents == COAI_USAGE_NONE && u.percent_used < 0 && u.auto_percent_used < 0);
    CHECK(!u.have_on_demand && strcmp(u.message, "ab") == 0);
    j = usage_json(&u);
    CHECK(jnull(j, "included.used_cents") && jnull(j, "billing_cycle"));
    cJSON_Delete(j);

    /* the period body is required */
    CHECK(coai_usage_parse(&u, "[]", 2, PLAN_INFO, sizeof PLAN_INFO - 1) == COAI_ERR_JSON);
    CHECK(coai_usage_parse(&u, "", 0, NULL, 0) == COAI_ERR_JSON);
    CHECK(coai_usage_parse(&u, "{\"a\":\"\xff\"}", 8, NULL, 0) == COAI_ERR_JSON);
    CHECK(u.used_cents == COAI_USAGE_NONE);
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
    /* a bare grpc 8 with no words still says what happened */
    memset(&st, 0, sizeof st);
    st.code = 8;
    coai_error_from_status(&st, &e);
    CHECKF(strcmp(e.message, "You've hit your Cursor usage limit (grpc-status 8)") == 0, "%s",
           e.message);
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

int main(void)
{
    test_usage_plan();
    test_usage_shapes();
    test_iso8601();
    test_limit_message();
    TEST_END();
}
