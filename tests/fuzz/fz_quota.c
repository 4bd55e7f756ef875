/* fz_usage.c - the QUOTA part from any bytes: the input is split at the first NUL into a
 * GetCurrentPeriodUsage body and a GetPlanInfo body. Properties: parse never fails on a JSON
 * object, the JSON writer's output is valid UTF-8 JSON with every documented member, the text
 * and summary writers emit valid UTF-8 without control bytes other than '\n', and ISO-8601
 * dates are always 20 characters. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void clean(const coai_buf *b, int nl_ok)
{
    size_t i;
    if (b->err) return;
    if (coai_utf8_valid_prefix((const char *)b->data, b->len) != b->len) abort();
    for (i = 0; i < b->len; i++)
        if ((b->data[i] < 0x20 && !(nl_ok && b->data[i] == '\n')) || b->data[i] == 0x7f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const members[] = { "object", "plan", "billing_cycle", "resets_at",
                                           "included", "on_demand", "limit_reached", "message" };
    const uint8_t *nul = memchr(data, 0, size);
    size_t n = nul ? (size_t)(nul - data) : size;
    const char *plan = nul ? (const char *)nul + 1 : NULL;
    size_t pn = nul ? size - n - 1 : 0;
    coai_quota u;
    coai_buf b = { 0 };
    char iso[21];
    int64_t ms = 0;
    size_t i;
    if (coai_quota_parse(&u, (const char *)data, n, plan, pn) == 0) {
        cJSON *j;
        if (coai_quota_write_json(&b, &u) != 0) abort();
        clean(&b, 0);
        j = cJSON_ParseWithLength((const char *)b.data, b.len);
        if (!j) abort();
        for (i = 0; i < sizeof members / sizeof members[0]; i++)
            if (!cJSON_GetObjectItemCaseSensitive(j, members[i])) abort();
        cJSON_Delete(j);
        coai_buf_reset(&b);
        if (coai_quota_write_text(&b, &u, 1767225600000LL) != 0) abort();
        clean(&b, 1);
        coai_buf_reset(&b);
        if (coai_quota_summary(&b, &u, -1) != 0) abort();
        clean(&b, 0);
        if (coai_quota_limit_reached(&u) < -1 || coai_quota_limit_reached(&u) > 1) abort();
    }
    coai_buf_free(&b);
    for (i = 0; i < 8 && i < size; i++) ms = (int64_t)((uint64_t)ms << 8 | data[i]);
    coai_iso8601(iso, ms);
    if (strlen(iso) != 20 || iso[4] != '-' || iso[10] != 'T' || iso[19] != 'Z') abort();
    return 0;
}
