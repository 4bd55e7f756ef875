/* t_common.c - the common helpers of cursor_oai.h: coai_buf, hex, base64, UUID, UTF-8 prefix,
 * and the JSON.stringify-compatible string and number writers.
 * Known answers come from RFC 4648, from Node.js (JSON.stringify over TextDecoder, which is
 * what the original TypeScript proxy does with upstream bytes) and from the golden vectors:
 * every string and number in every vector JSON file (and in the JSON documents and SSE
 * bodies nested in their strings) was written by JSON.stringify, so re-encoding what cJSON
 * decodes must give back the exact bytes. */
#define _POSIX_C_SOURCE 200809L
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include "cJSON.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void)   /* xorshift64*: deterministic, so failures reproduce */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717u;
}

static int is_hexstr(const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */

static void test_result_and_str(void)
{
    int codes[] = { COAI_OK, COAI_MORE, COAI_DONE, COAI_ERR_NOMEM, COAI_ERR_TOO_BIG,
                    COAI_ERR_FRAME, COAI_ERR_COMPRESSED, COAI_ERR_PROTO, COAI_ERR_JSON,
                    COAI_ERR_INVALID, COAI_ERR_UTF8, COAI_ERR_HTTP, COAI_ERR_TRUNCATED,
                    COAI_ERR_STATE, COAI_ERR_UPSTREAM };
    size_t i, j, n = sizeof codes / sizeof codes[0];
    const char *unknown = coai_result_str(12345);
    coai_str s;
    CHECK(unknown != NULL && strcmp(unknown, coai_result_str(-12345)) == 0);
    for (i = 0; i < n; i++) {
        const char *a = coai_result_str(codes[i]);
        CHECKF(a && *a && strcmp(a, unknown) != 0, "code %d has no name", codes[i]);
        for (j = i + 1; j < n; j++)
            CHECKF(strcmp(a, coai_result_str(codes[j])) != 0, "codes %d and %d share a name",
                   codes[i], codes[j]);
    }
    s = coai_str_c(NULL);
    CHECK(s.ptr != NULL && s.len == 0);
    s = coai_str_c("abc");
    CHECK(s.len == 3 && coai_str_eq(s, "abc"));
    CHECK(!coai_str_eq(s, "ab") && !coai_str_eq(s, "abcd") && !coai_str_eq(s, "abd"));
    s.len = 0;
    CHECK(coai_str_eq(s, "") && !coai_str_eq(s, "a"));
}

static void test_buf(void)
{
    coai_buf b = {0};
    char big[1000];
    size_t i;
    CHECK(coai_buf_append(&b, "ab", 2) == 0 && b.len == 2 && b.data[2] == 0);
    CHECK(coai_buf_puts(&b, "cd") == 0 && coai_buf_putc(&b, 'e') == 0);
    CHECK_MEM(b.data, b.len, "abcde", 5);
    CHECK(coai_buf_append(&b, NULL, 0) == 0 && b.len == 5);
    CHECK(coai_buf_printf(&b, "[%d:%s]", 42, "x") == 0);
    CHECK_MEM(b.data, b.len, "abcde[42:x]", 11);
    /* Longer than printf's 256-byte stack buffer: the second vsnprintf path. */
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    coai_buf_reset(&b);
    CHECK(b.len == 0 && b.err == 0 && b.data[0] == 0);
    CHECK(coai_buf_printf(&b, "<%s>", big) == 0 && b.len == 1001 && b.data[1001] == 0);
    CHECK(b.data[0] == '<' && b.data[999] == 'z' && b.data[1000] == '>');
    coai_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);

    /* A capped buffer: exactly max bytes fit, one more fails, and the failure sticks. */
    b.max = 8;
    CHECK(coai_buf_append(&b, "12345678", 8) == 0 && b.len == 8);
    CHECK(coai_buf_putc(&b, '9') == -1 && b.err == 1 && b.len == 8);
    CHECK(coai_buf_append(&b, "", 0) == -1);          /* sticky even for empty appends */
    CHECK(coai_buf_printf(&b, "%d", 1) == -1 && b.len == 8);
    coai_buf_reset(&b);
    CHECK(b.err == 0 && coai_buf_puts(&b, "ok") == 0 && b.len == 2 && b.max == 8);
    CHECK(coai_buf_printf(&b, "%s", big) == -1 && b.err == 1);
    coai_buf_free(&b);

    /* Size arithmetic must not wrap. */
    memset(&b, 0, sizeof b);
    CHECK(coai_buf_putc(&b, 'a') == 0);
    CHECK(coai_buf_reserve(&b, (size_t)-1) == -1 && b.err == 1);
    coai_buf_reset(&b);
    CHECK(coai_hex_append(&b, "x", (size_t)-1 / 2) == -1);
    coai_buf_reset(&b);
    CHECK(coai_base64_append(&b, "x", (size_t)-1 / 2 + 1, 0) == -1);
    coai_buf_free(&b);

    /* Growth keeps earlier content. */
    for (i = 0; i < 5000; i++) coai_buf_putc(&b, (int)('a' + i % 26));
    CHECK(b.len == 5000 && !b.err && b.data[4999] == 'a' + 4999 % 26 && b.data[5000] == 0);
    coai_buf_free(&b);
}

static void test_hex(void)
{
    coai_buf b = {0};
    const unsigned char in[] = { 0x00, 0x01, 0x7f, 0x80, 0xab, 0xff };
    unsigned char raw[256];
    size_t i;
    CHECK(coai_hex_append(&b, in, 0) == 0 && b.len == 0);
    CHECK(coai_hex_append(&b, in, sizeof in) == 0);
    CHECK_MEM(b.data, b.len, "00017f80abff", 12);
    coai_buf_reset(&b);
    for (i = 0; i < 256; i++) raw[i] = (unsigned char)i;
    CHECK(coai_hex_append(&b, raw, 256) == 0 && b.len == 512);
    for (i = 0; i < 256; i++) {
        char want[3];
        snprintf(want, sizeof want, "%02x", (unsigned)i);
        if (memcmp(b.data + 2 * i, want, 2) != 0) break;
    }
    CHECKF(i == 256, "byte %zu", i);
    coai_buf_free(&b);
}

/* RFC 4648 section 10. */
static const char *const rfc_in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
static const char *const rfc_b64[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                       "Zm9vYmFy" };

static void test_base64(void)
{
    coai_buf b = {0};
    unsigned char out[64], rnd[300];
    size_t i, k;
    long n;
    for (i = 0; i < sizeof rfc_in / sizeof rfc_in[0]; i++) {
        size_t inl = strlen(rfc_in[i]), el = strlen(rfc_b64[i]), nopad = el;
        while (nopad && rfc_b64[i][nopad - 1] == '=') nopad--;
        coai_buf_reset(&b);
        CHECK(coai_base64_append(&b, rfc_in[i], inl, 0) == 0);
        CHECK_MEM(b.data, b.len, rfc_b64[i], el);
        coai_buf_reset(&b);
        CHECK(coai_base64_append(&b, rfc_in[i], inl, 1) == 0);
        CHECK_MEM(b.data, b.len, rfc_b64[i], nopad);
        n = coai_base64_decode(rfc_b64[i], el, out, sizeof out);
        CHECK(n >= 0 && (size_t)n == inl && memcmp(out, rfc_in[i], inl) == 0);
        n = coai_base64_decode(rfc_b64[i], nopad, out, sizeof out);
        CHECK(n >= 0 && (size_t)n == inl && memcmp(out, rfc_in[i], inl) == 0);
        if (inl) CHECK(coai_base64_decode(rfc_b64[i], el, out, inl - 1) == -1);
    }
    /* The two alphabets differ only in 62 and 63. */
    coai_buf_reset(&b);
    CHECK(coai_base64_append(&b, "\xfb\xff\xbf", 3, 0) == 0);
    CHECK_MEM(b.data, b.len, "+/+/", 4);
    coai_buf_reset(&b);
    CHECK(coai_base64_append(&b, "\xfb\xff\xbf", 3, 1) == 0);
    CHECK_MEM(b.data, b.len, "-_-_", 4);
    n = coai_base64_decode("+/+/", 4, out, sizeof out);
    CHECK(n == 3 && memcmp(out, "\xfb\xff\xbf", 3) == 0);
    n = coai_base64_decode("-_-_", 4, out, sizeof out);
    CHECK(n == 3 && memcmp(out, "\xfb\xff\xbf", 3) == 0);
    /* Rejected input. */
    CHECK(coai_base64_decode("Z", 1, out, sizeof out) == -1);          /* 6 bits only */
    CHECK(coai_base64_decode("Zm9vY", 5, out, sizeof out) == -1);
    CHECK(coai_base64_decode("Zm9v\n", 5, out, sizeof out) == -1);
    CHECK(coai_base64_decode("Zm 9v", 5, out, sizeof out) == -1);
    CHECK(coai_base64_decode("Zm9*", 4, out, sizeof out) == -1);
    CHECK(coai_base64_decode("Zg=a", 4, out, sizeof out) == -1);       /* '=' in the middle */
    CHECK(coai_base64_decode("Zm9v\0", 5, out, sizeof out) == -1);
    CHECK(coai_base64_decode("Zm9v", 4, out, 2) == -1);                /* out too small */
    CHECK(coai_base64_decode("", 0, out, 0) == 0);
    /* Round trips of random data with both alphabets. */
    for (k = 0; k < 600; k++) {
        size_t len = k % 300, j;
        unsigned char dec[300];
        int url = (int)(k & 1);
        for (j = 0; j < len; j++) rnd[j] = (unsigned char)rng();
        coai_buf_reset(&b);
        if (coai_base64_append(&b, rnd, len, url)) { CHECK(0); continue; }
        if (url) {
            if (b.len != (len * 4 + 2) / 3 || memchr(b.data, '=', b.len)) break;
        } else if (b.len != (len + 2) / 3 * 4) break;
        n = coai_base64_decode((const char *)b.data, b.len, dec, sizeof dec);
        if (n < 0 || (size_t)n != len || memcmp(dec, rnd, len) != 0) break;
    }
    CHECKF(k == 600, "round trip %zu", k);
    coai_buf_free(&b);
}

static void test_uuid(void)
{
    unsigned char r[16];
    char u[37];
    int i, k;
    for (i = 0; i < 16; i++) r[i] = (unsigned char)i;
    memset(u, 'X', sizeof u);
    coai_uuid_format(u, r);
    CHECK(strcmp(u, "00010203-0405-4607-8809-0a0b0c0d0e0f") == 0);
    memset(r, 0xff, sizeof r);
    coai_uuid_format(u, r);
    CHECK(strcmp(u, "ffffffff-ffff-4fff-bfff-ffffffffffff") == 0);
    memset(r, 0, sizeof r);
    coai_uuid_format(u, r);
    CHECK(strcmp(u, "00000000-0000-4000-8000-000000000000") == 0);
    for (k = 0; k < 200; k++) {
        int ok = 1;
        for (i = 0; i < 16; i++) r[i] = (unsigned char)rng();
        memset(u, 'X', sizeof u);
        coai_uuid_format(u, r);
        if (u[36] != 0 || u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-') ok = 0;
        if (u[14] != '4' || !strchr("89ab", u[19])) ok = 0;
        for (i = 0; i < 36 && ok; i++)
            if (i != 8 && i != 13 && i != 18 && i != 23 && !is_hexstr(u + i, 1)) ok = 0;
        /* Bits outside version/variant are the random bytes unchanged. */
        if (ok) {
            char want[3];
            snprintf(want, sizeof want, "%02x", r[15]);
            ok = memcmp(u + 34, want, 2) == 0;
            snprintf(want, sizeof want, "%x", r[6] & 15);
            ok = ok && u[15] == want[0];
        }
        if (!ok) break;
    }
    CHECKF(k == 200, "uuid %d: %s", k, u);
}

static void test_utf8_prefix(void)
{
    const char *emoji = "a\xf0\x9f\x98\x80" "b";   /* a, U+1F600, b */
    size_t cut;
    CHECK(coai_utf8_valid_prefix("", 0) == 0);
    CHECK(coai_utf8_valid_prefix("abc", 3) == 3);
    CHECK(coai_utf8_valid_prefix("a\xe2\x82", 3) == 1);
    CHECK(coai_utf8_valid_prefix("a\xe2\x82\xac", 4) == 4);
    CHECK(coai_utf8_valid_prefix("\xff", 1) == 0);
    CHECK(coai_utf8_valid_prefix("a\xc0\xaf", 3) == 1);                 /* overlong */
    CHECK(coai_utf8_valid_prefix("ab\xed\xa0\x80", 5) == 2);            /* surrogate */
    CHECK(coai_utf8_valid_prefix("\xf4\x90\x80\x80", 4) == 0);          /* > U+10FFFF */
    CHECK(coai_utf8_valid_prefix("a\0b", 3) == 3);
    for (cut = 0; cut <= 6; cut++) {
        size_t want = cut == 0 ? 0 : cut < 5 ? 1 : cut;
        CHECKF(coai_utf8_valid_prefix(emoji, cut) == want, "cut %zu", cut);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* JSON writers: known answers from Node.js */

struct str_case { const char *in_hex, *out_hex; };
static const struct str_case str_cases[] = {
    { "", "2222" },
    { "22", "225c2222" },
    { "5c", "225c5c22" },
    { "2f", "222f22" },
    { "0001021f20", "225c75303030305c75303030315c75303030325c75303031662022" },
    { "7f", "227f22" },
    { "08090a0c0d", "225c625c745c6e5c665c7222" },
    { "e282ac", "22e282ac22" },
    { "f09f9880", "22f09f988022" },
    { "00", "225c753030303022" },
    { "c0af", "22efbfbdefbfbd22" },
    { "eda080", "22efbfbdefbfbdefbfbd22" },
    { "8080", "22efbfbdefbfbd22" },
    { "e282", "22efbfbd22" },
    { "f09f98", "22efbfbd22" },
    { "e22878", "22efbfbd287822" },
    { "f4908080", "22efbfbdefbfbdefbfbdefbfbd22" },
    { "fe", "22efbfbd22" },
    { "ff61", "22efbfbd6122" },
    { "e0809f", "22efbfbdefbfbdefbfbd22" },
    { "efbfbd", "22efbfbd22" },
    { "c2", "22efbfbd22" },
    { "61c2", "2261efbfbd22" },
    { "e280a8e280a9", "22e280a8e280a922" },
    { "edbfbf", "22efbfbdefbfbdefbfbd22" },
    { "f0908080", "22f090808022" },
    { "f48fbfbf", "22f48fbfbf22" },
    { "c3a9", "22c3a922" },
    { "c1bf", "22efbfbdefbfbd22" },
    { "e0a080", "22e0a08022" },
    { "f880808080", "22efbfbdefbfbdefbfbdefbfbdefbfbd22" },
    { "e1808061", "22e180806122" },
};

struct num_case { double v; const char *out; };
static const struct num_case num_cases[] = {
    { 0.0, "0" }, { -0.0, "0" }, { 1.0, "1" }, { -1.0, "-1" }, { 0.1, "0.1" }, { 0.5, "0.5" },
    { 100.0, "100" }, { 1e+21, "1e+21" }, { 1e-7, "1e-7" }, { 0.000001, "0.000001" },
    { 123456789012345680000.0, "123456789012345680000" }, { 5e-324, "5e-324" },
    { 1.7976931348623157e+308, "1.7976931348623157e+308" },
    { -1.7976931348623157e+308, "-1.7976931348623157e+308" }, { 1.5e-7, "1.5e-7" },
    { 9007199254740992.0, "9007199254740992" }, { 9007199254740994.0, "9007199254740994" },
    { 0.30000000000000004, "0.30000000000000004" }, { 0.3333333333333333, "0.3333333333333333" },
    { 1.23e-18, "1.23e-18" }, { -1.5e+300, "-1.5e+300" },
    { 999999999999999900000.0, "999999999999999900000" }, { 4.35, "4.35" }, { 5e-7, "5e-7" },
    { 1.5e-323, "1.5e-323" }, { 1.2345678901234568e-300, "1.2345678901234568e-300" },
    { 100000000000000000000.0, "100000000000000000000" }, { 1e+100, "1e+100" },
    { 2.2250738585072014e-308, "2.2250738585072014e-308" },
    { 1768474032345.0, "1768474032345" }, { -123.456, "-123.456" }, { 65535.0, "65535" },
    { 4294967295.0, "4294967295" }, { 1.1, "1.1" }, { 3.14159, "3.14159" },
};

static void test_json_known(void)
{
    coai_buf b = {0}, want = {0};
    size_t i, n;
    for (i = 0; i < sizeof str_cases / sizeof str_cases[0]; i++) {
        unsigned char *in = test_unhex(str_cases[i].in_hex, &n);
        if (!in) { CHECK(0); continue; }
        coai_buf_reset(&b);
        coai_buf_reset(&want);
        CHECK(coai_json_str_append(&b, (const char *)in, n) == 0);
        coai_hex_append(&want, b.data, b.len);
        CHECKF(coai_str_eq((coai_str){ (const char *)want.data, want.len }, str_cases[i].out_hex),
               "input %s: got %s want %s", str_cases[i].in_hex, want.data, str_cases[i].out_hex);
        free(in);
    }
    for (i = 0; i < sizeof num_cases / sizeof num_cases[0]; i++) {
        coai_buf_reset(&b);
        CHECK(coai_json_num_append(&b, num_cases[i].v) == 0);
        CHECKF(b.len == strlen(num_cases[i].out) && memcmp(b.data, num_cases[i].out, b.len) == 0,
               "%.17g: got %s want %s", num_cases[i].v, b.data, num_cases[i].out);
    }
    coai_buf_reset(&b);
    CHECK(coai_json_num_append(&b, NAN) == 0 && coai_buf_puts(&b, ",") == 0 &&
          coai_json_num_append(&b, INFINITY) == 0 && coai_buf_puts(&b, ",") == 0 &&
          coai_json_num_append(&b, -INFINITY) == 0);
    CHECK_MEM(b.data, b.len, "null,null,null", 14);
    /* A full buffer fails cleanly. */
    coai_buf_free(&b);
    b.max = 3;
    CHECK(coai_json_str_append(&b, "abc", 3) == -1 && b.err && b.len <= 3);
    coai_buf_reset(&b);
    CHECK(coai_json_num_append(&b, 1234.5) == -1 && b.err);
    coai_buf_free(&b);
    coai_buf_free(&want);
}

/* Properties over random input: output is valid UTF-8, valid JSON, and keeps valid text. */
static void test_json_random(void)
{
    coai_buf b = {0};
    unsigned char in[64];
    int k, bad_utf8 = 0, bad_json = 0, bad_same = 0, bad_num = 0, bad_short = 0, bad_form = 0;
    for (k = 0; k < 3000; k++) {
        size_t len = (size_t)(rng() % sizeof in), j;
        cJSON *j2;
        for (j = 0; j < len; j++) {
            uint64_t r = rng();
            /* Mostly UTF-8-ish bytes so that valid sequences occur often. */
            in[j] = (unsigned char)(r % 4 == 0 ? 0x80 + (r >> 8) % 0x40 : r % 4 == 1
                                    ? 0xc0 + (r >> 8) % 0x38 : r >> 16);
        }
        coai_buf_reset(&b);
        if (coai_json_str_append(&b, (const char *)in, len)) { bad_json++; continue; }
        if (coai_utf8_valid_prefix((const char *)b.data, b.len) != b.len) bad_utf8++;
        j2 = cJSON_ParseWithLength((const char *)b.data, b.len);
        if (!j2 || !cJSON_IsString(j2)) bad_json++;
        else if (coai_utf8_valid_prefix((const char *)in, len) == len && !memchr(in, 0, len) &&
                 (strlen(j2->valuestring) != len || memcmp(j2->valuestring, in, len) != 0))
            bad_same++;
        cJSON_Delete(j2);
    }
    CHECKF(!bad_utf8, "%d outputs with invalid UTF-8", bad_utf8);
    CHECKF(!bad_json, "%d outputs that are not a JSON string", bad_json);
    CHECKF(!bad_same, "%d valid inputs changed", bad_same);
    for (k = 0; k < 20000; k++) {
        uint64_t bits = rng();
        double v, back;
        char tmp[40], *e;
        int digits = 0, prec;
        size_t i;
        memcpy(&v, &bits, sizeof v);
        if (k % 3 == 0) v = (double)(int64_t)(bits >> (bits % 60));  /* integers too */
        if (isnan(v) || isinf(v)) continue;
        coai_buf_reset(&b);
        if (coai_json_num_append(&b, v)) { bad_num++; continue; }
        back = strtod((const char *)b.data, &e);
        if (*e || back != v) { bad_num++; continue; }
        /* Shortest: no text with fewer significant digits reads back as v. */
        for (i = 0; i < b.len && b.data[i] != 'e'; i++)
            if (b.data[i] >= '0' && b.data[i] <= '9') digits++;
        for (i = 0; i < b.len && (b.data[i] == '0' || b.data[i] == '.' || b.data[i] == '-'); i++)
            if (b.data[i] == '0') digits--;       /* leading zeros are not significant */
        for (prec = 1; prec < digits; prec++) {
            snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
            if (strtod(tmp, NULL) == v) break;
        }
        /* Only where the text has a '.': integers may carry non-significant zeros. */
        if (prec < digits && memchr(b.data, '.', b.len)) bad_short++;
        /* JavaScript switches to exponent form outside [1e-6, 1e21). */
        if (v != 0 && (fabs(v) >= 1e21 || fabs(v) < 1e-6) != (memchr(b.data, 'e', b.len) != NULL)) {
            if (bad_form < 5) fprintf(stderr, "notation: %.17g -> %s\n", v, b.data);
            bad_form++;
        }
    }
    CHECKF(!bad_num, "%d numbers do not read back exactly", bad_num);
    CHECKF(!bad_short, "%d numbers not in shortest form", bad_short);
    CHECKF(!bad_form, "%d numbers in the wrong notation", bad_form);
    coai_buf_free(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* JSON writers against every string and number in the vectors */

static int vec_strings, vec_numbers, vec_str_bad, vec_num_bad;

static void scan_json_text(const char *s, size_t n, int depth);

static void check_string_token(const char *tok, size_t n, int depth)
{
    cJSON *j = cJSON_ParseWithLength(tok, n);
    coai_buf b = {0};
    const char *v;
    size_t vl;
    if (!j || !cJSON_IsString(j)) { vec_str_bad++; cJSON_Delete(j); return; }
    v = j->valuestring;
    vl = strlen(v);
    /* cJSON's strings are NUL-terminated: a \u0000 would cut them short. */
    if (!strstr(tok, "\\u0000") || (size_t)(strstr(tok, "\\u0000") - tok) >= n) {
        vec_strings++;
        if (coai_json_str_append(&b, v, vl) || b.len != n || memcmp(b.data, tok, n) != 0) {
            if (vec_str_bad++ < 5)
                fprintf(stderr, "vector string differs:\n  want %.*s\n  got  %s\n", (int)n, tok,
                        b.data ? (const char *)b.data : "(error)");
        }
    }
    if (depth < 3 && vl > 1) {
        cJSON *inner = cJSON_ParseWithLength(v, vl);
        if (inner && (cJSON_IsObject(inner) || cJSON_IsArray(inner))) {
            scan_json_text(v, vl, depth + 1);
        } else {
            /* An SSE body: each "data: {...}" line is JSON.stringify output. */
            const char *p = v, *end = v + vl;
            while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (ll > 7 && memcmp(p, "data: {", 7) == 0)
                    scan_json_text(p + 6, ll - 6, depth + 1);
                p += ll + 1;
            }
        }
        cJSON_Delete(inner);
    }
    cJSON_Delete(j);
    coai_buf_free(&b);
}

static void check_number_token(const char *tok, size_t n)
{
    char tmp[64];
    coai_buf b = {0};
    double v;
    if (n >= sizeof tmp) { vec_num_bad++; return; }
    memcpy(tmp, tok, n);
    tmp[n] = 0;
    v = strtod(tmp, NULL);
    vec_numbers++;
    if (coai_json_num_append(&b, v) || b.len != n || memcmp(b.data, tok, n) != 0) {
        if (vec_num_bad++ < 5)
            fprintf(stderr, "vector number differs: want %s got %s\n", tmp,
                    b.data ? (const char *)b.data : "(error)");
    }
    coai_buf_free(&b);
}

static void scan_json_text(const char *s, size_t n, int depth)
{
    size_t i = 0, j;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            for (j = i + 1; j < n && s[j] != '"'; j++)
                if (s[j] == '\\') j++;
            if (j >= n) { vec_str_bad++; return; }
            check_string_token(s + i, j + 1 - i, depth);
            i = j + 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            for (j = i; j < n && strchr("+-.eE0123456789", s[j]) && s[j]; j++) {}
            check_number_token(s + i, j - i);
            i = j;
        } else {
            i++;
        }
    }
}

static int scan_vector_file(const char *name)
{
    size_t len;
    char *text = test_read_file(test_vec_path(name), &len);
    if (!text) return 0;
    scan_json_text(text, len, 0);
    free(text);
    return 1;
}

static void test_json_vectors(void)
{
    static const char *const top[] = { "checksum.json", "run_request.json", "bidi_append.json",
                                       "server_frames.json", "messages_to_prompt.json",
                                       "client_messages.json" };
    size_t i;
    int files = 0, missing = 0;
    DIR *d;
    struct dirent *e;
    for (i = 0; i < sizeof top / sizeof top[0]; i++) {
        if (scan_vector_file(top[i])) files++;
        else { missing++; fprintf(stderr, "cannot read %s\n", test_vec_path(top[i])); }
    }
    d = opendir(test_vec_path("e2e"));
    CHECKF(d != NULL, "cannot open %s", test_vec_path("e2e"));
    if (d) {
        while ((e = readdir(d)) != NULL) {
            char rel[512];
            size_t nl = strlen(e->d_name);
            if (nl < 6 || strcmp(e->d_name + nl - 5, ".json") != 0) continue;
            snprintf(rel, sizeof rel, "e2e/%s", e->d_name);
            if (scan_vector_file(rel)) files++;
            else missing++;
        }
        closedir(d);
    }
    CHECKF(missing == 0 && files >= 10, "%d vector files read, %d unreadable", files, missing);
    CHECKF(vec_strings > 1000, "only %d strings found in the vectors", vec_strings);
    CHECKF(vec_numbers > 100, "only %d numbers found in the vectors", vec_numbers);
    CHECKF(vec_str_bad == 0, "%d of %d vector strings re-encode differently", vec_str_bad,
           vec_strings);
    CHECKF(vec_num_bad == 0, "%d of %d vector numbers re-encode differently", vec_num_bad,
           vec_numbers);
    printf("vectors: %d files, %d strings, %d numbers\n", files, vec_strings, vec_numbers);
}

/* The checksum vectors carry the original's base64url and hex of the same bytes. */
static void test_checksum_vectors(void)
{
    size_t len;
    char *text = test_read_file(test_vec_path("checksum.json"), &len);
    cJSON *root, *vecs, *v;
    int seen = 0;
    CHECKF(text != NULL, "cannot read %s", test_vec_path("checksum.json"));
    if (!text) return;
    root = cJSON_ParseWithLength(text, len);
    vecs = cJSON_GetObjectItemCaseSensitive(root, "vectors");
    cJSON_ArrayForEach(v, vecs) {
        cJSON *im = cJSON_GetObjectItemCaseSensitive(v, "intermediate");
        cJSON *obf = cJSON_GetObjectItemCaseSensitive(im, "obfuscated_bytes_hex");
        cJSON *tsb = cJSON_GetObjectItemCaseSensitive(im, "timestamp_bytes_hex");
        cJSON *b64 = cJSON_GetObjectItemCaseSensitive(im, "timestamp_b64url");
        unsigned char *raw, dec[16];
        size_t rl;
        long dl;
        coai_buf b = {0};
        if (!cJSON_IsString(obf) || !cJSON_IsString(b64) || !cJSON_IsString(tsb)) continue;
        raw = test_unhex(obf->valuestring, &rl);
        if (!raw) { CHECK(0); continue; }
        seen++;
        CHECK(coai_base64_append(&b, raw, rl, 1) == 0);
        CHECKF(strcmp((const char *)b.data, b64->valuestring) == 0, "%s: got %s want %s",
               obf->valuestring, b.data, b64->valuestring);
        coai_buf_reset(&b);
        CHECK(coai_hex_append(&b, raw, rl) == 0 && strcmp((const char *)b.data,
                                                          obf->valuestring) == 0);
        dl = coai_base64_decode(b64->valuestring, strlen(b64->valuestring), dec, sizeof dec);
        CHECK(dl >= 0 && (size_t)dl == rl && memcmp(dec, raw, rl) == 0);
        free(raw);
        raw = test_unhex(tsb->valuestring, &rl);
        coai_buf_reset(&b);
        CHECK(raw && coai_hex_append(&b, raw, rl) == 0 &&
              strcmp((const char *)b.data, tsb->valuestring) == 0);
        free(raw);
        coai_buf_free(&b);
    }
    CHECKF(seen >= 3, "only %d checksum vectors", seen);
    cJSON_Delete(root);
    free(text);
}

int main(void)
{
    test_result_and_str();
    test_buf();
    test_hex();
    test_base64();
    test_uuid();
    test_utf8_prefix();
    test_json_known();
    test_json_random();
    test_json_vectors();
    test_checksum_vectors();
    TEST_END();
}
