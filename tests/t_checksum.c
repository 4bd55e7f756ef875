/* t_checksum.c - x-cursor-checksum against vectors/checksum.json (spec section 3). */
#define _POSIX_C_SOURCE 200809L
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include <time.h>

/* Independent SHA-256 prefix for expectations (BearSSL directly, no header helper). */
static void sha_hex8(char out[9], const char *s, size_t n)
{
    br_sha256_context c;
    unsigned char h[32];
    int i;
    br_sha256_init(&c);
    br_sha256_update(&c, s, n);
    br_sha256_out(&c, h);
    for (i = 0; i < 4; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

static void set_tz(const char *tz)
{
    setenv("TZ", tz, 1);
    tzset();
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int64_t jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static void test_vectors(void)
{
    size_t len = 0;
    char *text = test_read_file(test_vec_path("checksum.json"), &len);
    cJSON *root, *v;
    int count = 0;
    CHECKF(text != NULL, "cannot read %s", test_vec_path("checksum.json"));
    if (!text) return;
    root = cJSON_Parse(text);
    CHECK(root != NULL);
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors")) {
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(v, "intermediate");
        const char *id = jstr(v, "id"), *tok = jstr(v, "token");
        const char *expect = jstr(v, "expected_checksum");
        int64_t now = jnum(v, "now_epoch_ms"), bucket = jnum(im, "bucket_start_epoch_ms");
        char out[COAI_CHECKSUM_SIZE], out2[COAI_CHECKSUM_SIZE];
        coai_str t = coai_str_c(tok);
        set_tz(jstr(v, "process_tz"));
        CHECKF(coai_checksum_bucket(now) == bucket, "%s bucket %lld vs %lld", id,
               (long long)coai_checksum_bucket(now), (long long)bucket);
        memset(out, 0xAA, sizeof out);
        coai_checksum_at(out, t, bucket);
        CHECKF(strcmp(out, expect) == 0, "%s: %s vs %s", id, out, expect);
        CHECKF(strlen(out) == 25, "%s length %zu", id, strlen(out));
        CHECKF(memcmp(out, jstr(im, "timestamp_b64url"), 8) == 0, "%s b64 %.8s", id, out);
        CHECKF(memcmp(out + 8, jstr(im, "jwt_payload_segment_sha256_prefix"), 8) == 0,
               "%s h1 %.8s", id, out + 8);
        CHECKF(memcmp(out + 17, jstr(im, "token_sha256_prefix"), 8) == 0, "%s h2", id);
        memset(out2, 0xAA, sizeof out2);
        coai_checksum(out2, t, now);
        CHECKF(strcmp(out2, expect) == 0, "%s via clock: %s vs %s", id, out2, expect);
        count++;
    }
    CHECKF(count == 5, "vector count %d", count);
    cJSON_Delete(root);
    free(text);
}

/* Zones with whole half-hour offsets match the UTC formula; :45 zones shift by the offset. */
static void test_bucket_zones(void)
{
    static const struct { const char *tz; int64_t off_ms; } z[] = {
        { "UTC", 0 }, { "Asia/Kolkata", 19800000 }, { "America/New_York", 0 },
        { "Asia/Kathmandu", 20700000 }, { "Australia/Eucla", 31500000 }
    };
    size_t i;
    int64_t ms;
    for (i = 0; i < sizeof z / sizeof z[0]; i++) {
        int bad = 0;
        set_tz(z[i].tz);
        /* 2025-06-01 .. about 2 years, stepping an odd amount to hit every minute phase */
        for (ms = 1748736000000LL; ms < 1748736000000LL + 63072000000LL; ms += 7777777LL) {
            int64_t want = ((ms + z[i].off_ms) / 1800000) * 1800000 - z[i].off_ms;
            if (coai_checksum_bucket(ms) != want) bad++;
        }
        CHECKF(bad == 0, "%s: %d mismatches", z[i].tz, bad);
    }
    set_tz("UTC");
    CHECK(coai_checksum_bucket(1800000) == 1800000);
    CHECK(coai_checksum_bucket(1799999) == 0);
}

/* Token splitting: H1 is the hash of the text between the first and second '.'. */
static void test_token_shapes(void)
{
    static const char *const toks[] = {
        "a.b.c", "a.b", "a..c", "a.", ".b", "", "no-dots", "a.b.c.d", "x.\xff\x00y.z"
    };
    size_t i;
    for (i = 0; i < sizeof toks / sizeof toks[0]; i++) {
        coai_str t = coai_str_c(toks[i]);
        char out[COAI_CHECKSUM_SIZE], h1[9] = "00000000", h2[9];
        const char *d1 = strchr(toks[i], '.');
        if (d1) {
            const char *d2 = strchr(d1 + 1, '.');
            size_t n = d2 ? (size_t)(d2 - d1 - 1) : strlen(d1 + 1);
            if (n) sha_hex8(h1, d1 + 1, n);
        }
        if (i == 8) t.len = 7;   /* embedded NUL: lengths, not NUL, decide */
        sha_hex8(h2, t.ptr, t.len);
        memset(out, 0xAA, sizeof out);
        coai_checksum_at(out, t, 1768473000000LL);
        CHECKF(memcmp(out, "paaotU1Z", 8) == 0, "tok %zu prefix %.8s", i, out);
        if (i != 8) CHECKF(memcmp(out + 8, h1, 8) == 0, "tok %zu h1 %.8s vs %s", i, out + 8, h1);
        CHECKF(out[16] == '/' && memcmp(out + 17, h2, 8) == 0 && out[25] == 0, "tok %zu h2", i);
    }
    {   /* "x.\xff\0y.z" (7 bytes): segment is "\xff\0y" (3 bytes, including the NUL) */
        coai_str t = { "x.\xff\x00y.z", 7 };
        char out[COAI_CHECKSUM_SIZE], h1[9];
        sha_hex8(h1, "\xff\x00y", 3);
        coai_checksum_at(out, t, 0);
        CHECK(memcmp(out + 8, h1, 8) == 0);
    }
}

int main(void)
{
    test_vectors();
    test_bucket_zones();
    test_token_shapes();
    TEST_END();
}
