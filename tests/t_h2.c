/* t_h2.c - the HTTP/2 part: HPACK (every RFC 7541 Appendix C example, with the dynamic table
 * after each block as the RFC lists it; the Huffman table; every error), frames, and the
 * client connection driven through scripted exchanges. Every decoded input is placed right
 * before a PROT_NONE page, so reading one byte past it crashes. */
#define _DEFAULT_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------- */

#define ARENA (4u * 1024u * 1024u)
static unsigned char *arena;

static void guard_init(void)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = mmap(NULL, ARENA + pg, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + ARENA, pg, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    arena = p;
}

static const unsigned char *place(const void *s, size_t n)
{
    unsigned char *p = arena + ARENA - n;
    if (n > ARENA) exit(3);
    if (n) memcpy(p, s, n);
    return p;
}

/* "8286 84be ..." (spaces and newlines ignored) -> bytes; returns the length. */
static size_t hex(const char *h, unsigned char *out, size_t cap)
{
    size_t n = 0;
    int hi = -1;
    for (; *h; h++) {
        int v;
        if (*h >= '0' && *h <= '9') v = *h - '0';
        else if (*h >= 'a' && *h <= 'f') v = *h - 'a' + 10;
        else if (*h >= 'A' && *h <= 'F') v = *h - 'A' + 10;
        else continue;
        if (hi < 0) { hi = v; continue; }
        if (n == cap) exit(4);
        out[n++] = (unsigned char)(hi << 4 | v);
        hi = -1;
    }
    return n;
}

static int str_is(coai_str v, const char *lit)
{
    return v.ptr != NULL && v.len == strlen(lit) && memcmp(v.ptr, lit, v.len) == 0;
}

static coai_h2_header H(const char *n, const char *v)
{
    coai_h2_header h;
    h.name = coai_str_c(n);
    h.value = coai_str_c(v);
    return h;
}

/* ---- Huffman ------------------------------------------------------------------------- */

/* The canonical code of symbol s, rebuilt from the lengths alone. */
static uint32_t huff_code(unsigned s)
{
    uint32_t code = 0;
    unsigned i, len, prev = 0;
    for (len = 1; len <= 30; len++) {
        for (i = 0; i < 257; i++) {
            if (coai__huff_len[i] != len) continue;
            code <<= len - prev;
            prev = len;
            if (i == s) return code;
            code++;
        }
    }
    return 0;
}

/* A Huffman encoder for the tests (the library's encoder sends plain literals). */
static size_t huff_encode(const char *s, size_t n, unsigned char *out)
{
    uint64_t acc = 0;
    unsigned bits = 0;
    size_t o = 0, i;
    for (i = 0; i < n; i++) {
        unsigned sym = (unsigned char)s[i];
        acc = acc << coai__huff_len[sym] | huff_code(sym);
        bits += coai__huff_len[sym];
        while (bits >= 8) { out[o++] = (unsigned char)(acc >> (bits - 8)); bits -= 8; }
    }
    if (bits) out[o++] = (unsigned char)((acc << (8 - bits)) | (0xffu >> bits));
    return o;
}

static void test_huffman_table(void)
{
    uint64_t kraft = 0;
    unsigned cnt[31] = {0}, i, k = 0, len;
    for (i = 0; i < 257; i++) {
        CHECK(coai__huff_len[i] >= 5 && coai__huff_len[i] <= 30);
        cnt[coai__huff_len[i]]++;
        kraft += (uint64_t)1 << (30 - coai__huff_len[i]);
    }
    CHECK(kraft == (uint64_t)1 << 30);          /* complete: every bit string decodes */
    for (len = 0; len <= 30; len++) CHECK(cnt[len] == coai__huff_count[len]);
    /* coai__huff_sym: by length, then by symbol */
    for (len = 1; len <= 30; len++)
        for (i = 0; i < 257; i++)
            if (coai__huff_len[i] == len) CHECK(coai__huff_sym[k++] == i);
    CHECK(k == 257);
    /* codes as RFC 7541 Appendix B prints them */
    CHECK(huff_code(0) == 0x1ff8 && huff_code(' ') == 0x14 && huff_code('0') == 0x0);
    CHECK(huff_code('a') == 0x3 && huff_code('z') == 0x7b && huff_code('~') == 0x1ffd);
    CHECK(huff_code(10) == 0x3ffffffc && huff_code(127) == 0xffffffc);
    CHECK(huff_code(192) == 0x3ffffe0 && huff_code(220) == 0xffffffd);
    CHECK(huff_code(255) == 0x3ffffee && huff_code(256) == 0x3fffffff);
    CHECK(huff_code(184) == 0xfffea && huff_code(195) == 0x7fff1);
}

static void test_huffman_roundtrip(void)
{
    char in[256];
    unsigned char enc[1024];
    coai_buf out = {0};
    size_t i, n;
    for (i = 0; i < 256; i++) in[i] = (char)i;
    n = huff_encode(in, 256, enc);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == 0);
    CHECK_MEM(out.data, out.len, in, 256);
    /* every symbol alone (each ends with its own padding) */
    for (i = 0; i < 256; i++) {
        coai_buf_reset(&out);
        n = huff_encode(in + i, 1, enc);
        CHECKF(coai__huff_decode(&out, place(enc, n), n) == 0 && out.len == 1
               && out.data[0] == (unsigned char)i, "symbol %zu", i);
    }
    /* "www.example.com" (RFC 7541 C.4.1) */
    n = hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff", enc, sizeof enc);
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == 0);
    CHECK_MEM(out.data, out.len, "www.example.com", 15);
    CHECK(huff_encode("www.example.com", 15, enc + 100) == n && !memcmp(enc, enc + 100, n));
    /* errors: EOS inside (30 ones), padding over 7 bits, padding not ones */
    n = hex("ffff fffc", enc, sizeof enc);               /* 30 ones then 00 */
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == COAI_ERR_H2);
    n = hex("1fff", enc, sizeof enc);                   /* 'a' (00011) + 11 ones */
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == COAI_ERR_H2);
    n = hex("18", enc, sizeof enc);                     /* 'a' then 000 */
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == COAI_ERR_H2);
    n = hex("1f", enc, sizeof enc);                     /* 'a' then 111: fine */
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == 0 && out.len == 1 && out.data[0] == 'a');
    n = hex("ff", enc, sizeof enc);                     /* 8 ones: padding too long */
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place(enc, n), n) == COAI_ERR_H2);
    coai_buf_reset(&out);
    CHECK(coai__huff_decode(&out, place("", 0), 0) == 0 && out.len == 0);
    coai_buf_free(&out);
}

/* ---- HPACK: RFC 7541 Appendix C ------------------------------------------------------ */

static void test_integers(void)
{
    unsigned char b[16];
    size_t pos = 0, n;
    uint32_t v;
    coai_buf out = {0};
    /* C.1.1: 10 on a 5-bit prefix; C.1.2: 1337 on 5 bits; C.1.3: 42 on 8 bits */
    CHECK(coai__hpack_int_put(&out, 0xe0, 5, 10) == 0);
    CHECK_MEM(out.data, out.len, "\xea", 1);
    coai_buf_reset(&out);
    CHECK(coai__hpack_int_put(&out, 0, 5, 1337) == 0);
    CHECK_MEM(out.data, out.len, "\x1f\x9a\x0a", 3);
    pos = 0;
    CHECK(coai__hpack_int(place(out.data, 3), 3, &pos, 5, &v) == 0 && v == 1337 && pos == 3);
    b[0] = 42;
    pos = 0;
    CHECK(coai__hpack_int(place(b, 1), 1, &pos, 8, &v) == 0 && v == 42);
    pos = 0;
    b[0] = 0xea;
    CHECK(coai__hpack_int(place(b, 1), 1, &pos, 5, &v) == 0 && v == 10);
    /* 2^31 - 1 fits, 2^31 does not; endless continuation bytes and a cut one fail */
    coai_buf_reset(&out);
    CHECK(coai__hpack_int_put(&out, 0, 7, 0x7fffffffu) == 0);
    pos = 0;
    CHECK(coai__hpack_int(place(out.data, out.len), out.len, &pos, 7, &v) == 0
          && v == 0x7fffffffu);
    n = hex("7f 81 ff ff ff 07", b, sizeof b);          /* 127 + 2^31 - 127 */
    pos = 0;
    CHECK(coai__hpack_int(place(b, n), n, &pos, 7, &v) == COAI_ERR_H2);
    n = hex("7f ff ff ff ff ff ff 00", b, sizeof b);
    pos = 0;
    CHECK(coai__hpack_int(place(b, n), n, &pos, 7, &v) == COAI_ERR_H2);
    n = hex("7f 80", b, sizeof b);
    pos = 0;
    CHECK(coai__hpack_int(place(b, n), n, &pos, 7, &v) == COAI_ERR_H2);
    pos = 0;
    CHECK(coai__hpack_int(place(b, 0), 0, &pos, 7, &v) == COAI_ERR_H2);
    coai_buf_free(&out);
}

/* Decode hex with d (the block placed before the guard page), then compare the list with
 * want ("name: value" lines joined by '\n') and the table with table ("name: value" newest
 * first) and its size. */
static void check_block(coai_hpack_decoder *d, coai_hpack_list *l, const char *hx,
                        const char *want, const char *table, size_t size, const char *what)
{
    unsigned char blk[512];
    char got[2048];
    size_t n = hex(hx, blk, sizeof blk), i, o = 0;
    coai_result r = coai_hpack_decode(d, place(blk, n), n, l);
    CHECKF(r == COAI_OK, "%s: decode %d", what, (int)r);
    got[0] = 0;
    for (i = 0; i < l->n && o + l->v[i].name.len + l->v[i].value.len + 4 < sizeof got; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%.*s: %.*s", i ? "\n" : "",
                              (int)l->v[i].name.len, l->v[i].name.ptr,
                              (int)l->v[i].value.len, l->v[i].value.ptr);
    CHECKF(strcmp(got, want) == 0, "%s: list\n%s\n---- want\n%s", what, got, want);
    o = 0;
    got[0] = 0;
    for (i = 0; i < d->count; i++) {
        coai_str nm, v;
        if (coai__hpack_get(d, (uint32_t)(62 + i), &nm, &v) != 0) break;
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%.*s: %.*s", i ? "\n" : "",
                              (int)nm.len, nm.ptr, (int)v.len, v.ptr);
    }
    CHECKF(strcmp(got, table) == 0, "%s: table\n%s\n---- want\n%s", what, got, table);
    CHECKF(d->size == size, "%s: table size %zu, want %zu", what, d->size, size);
}

static void test_rfc_c2(void)
{
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
                "custom-key: custom-header", "custom-key: custom-header", 55, "C.2.1");
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "040c 2f73 616d 706c 652f 7061 7468", ":path: /sample/path", "", 0,
                "C.2.2");
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "1008 7061 7373 776f 7264 0673 6563 7265 74", "password: secret", "",
                0, "C.2.3");
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "82", ":method: GET", "", 0, "C.2.4");
    coai_hpack_list_free(&l);
}

static const char *const req1 = ":method: GET\n:scheme: http\n:path: /\n"
                                ":authority: www.example.com";
static const char *const req2 = ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com"
                                "\ncache-control: no-cache";
static const char *const req3 = ":method: GET\n:scheme: https\n:path: /index.html\n"
                                ":authority: www.example.com\ncustom-key: custom-value";
static const char *const tab1 = ":authority: www.example.com";
static const char *const tab2 = "cache-control: no-cache\n:authority: www.example.com";
static const char *const tab3 = "custom-key: custom-value\ncache-control: no-cache\n"
                                ":authority: www.example.com";

static void test_rfc_c3_c4(void)
{
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", req1, tab1, 57,
                "C.3.1");
    check_block(&d, &l, "8286 84be 5808 6e6f 2d63 6163 6865", req2, tab2, 110, "C.3.2");
    check_block(&d, &l, "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 "
                "6c75 65", req3, tab3, 164, "C.3.3");
    memset(&d, 0, sizeof d);
    check_block(&d, &l, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", req1, tab1, 57, "C.4.1");
    check_block(&d, &l, "8286 84be 5886 a8eb 1064 9cbf", req2, tab2, 110, "C.4.2");
    check_block(&d, &l, "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", req3,
                tab3, 164, "C.4.3");
    coai_hpack_list_free(&l);
}

static const char *const resp1 = ":status: 302\ncache-control: private\n"
                                 "date: Mon, 21 Oct 2013 20:13:21 GMT\n"
                                 "location: https://www.example.com";
static const char *const resp2 = ":status: 307\ncache-control: private\n"
                                 "date: Mon, 21 Oct 2013 20:13:21 GMT\n"
                                 "location: https://www.example.com";
static const char *const resp3 = ":status: 200\ncache-control: private\n"
                                 "date: Mon, 21 Oct 2013 20:13:22 GMT\n"
                                 "location: https://www.example.com\ncontent-encoding: gzip\n"
                                 "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; "
                                 "version=1";
static const char *const rtab1 = "location: https://www.example.com\n"
                                 "date: Mon, 21 Oct 2013 20:13:21 GMT\n"
                                 "cache-control: private\n:status: 302";
static const char *const rtab2 = ":status: 307\nlocation: https://www.example.com\n"
                                 "date: Mon, 21 Oct 2013 20:13:21 GMT\ncache-control: private";
static const char *const rtab3 = "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; "
                                 "version=1\ncontent-encoding: gzip\n"
                                 "date: Mon, 21 Oct 2013 20:13:22 GMT";

static void test_rfc_c5_c6(void)
{
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    memset(&d, 0, sizeof d);
    d.max_size = 256;           /* SETTINGS_HEADER_TABLE_SIZE 256, as C.5 and C.6 say */
    check_block(&d, &l, "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 "
                "7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 "
                "7777 2e65 7861 6d70 6c65 2e63 6f6d", resp1, rtab1, 222, "C.5.1");
    check_block(&d, &l, "4803 3330 37c1 c0bf", resp2, rtab2, 222, "C.5.2");
    check_block(&d, &l, "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 "
                "3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a "
                "584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 "
                "303b 2076 6572 7369 6f6e 3d31", resp3, rtab3, 215, "C.5.3");
    memset(&d, 0, sizeof d);
    d.max_size = 256;
    check_block(&d, &l, "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 "
                "0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                resp1, rtab1, 222, "C.6.1");
    check_block(&d, &l, "4883 640e ffc1 c0bf", resp2, rtab2, 222, "C.6.2");
    check_block(&d, &l, "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff "
                "c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 "
                "72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07", resp3, rtab3, 215,
                "C.6.3");
    coai_hpack_list_free(&l);
}

/* ---- HPACK: errors, limits, table mechanics ------------------------------------------ */

static coai_result dec_hex(coai_hpack_decoder *d, coai_hpack_list *l, const char *hx)
{
    unsigned char blk[512];
    size_t n = hex(hx, blk, sizeof blk);
    return coai_hpack_decode(d, place(blk, n), n, l);
}

static void test_hpack_errors(void)
{
    static const char *const bad[] = {
        "80",                   /* index 0 */
        "be",                   /* index 62 on an empty table */
        "ff 80 80 80 80 08",    /* index over 2^31 */
        "3f e2 1f",             /* size update to 4097 (over SETTINGS_HEADER_TABLE_SIZE) */
        "82 20",                /* size update after a field */
        "41",                   /* literal cut before its value */
        "41 05 61 62",          /* value longer than the block */
        "40 03 61 62",          /* name longer than the block */
        "40 7f",                /* name length cut */
        "40 81 ff 00",          /* Huffman name: 8 ones of padding */
        "04 84 ff ff ff fc",    /* Huffman value containing EOS */
        "04 81 18",             /* Huffman value padded with zeros */
        "4e 00",                /* literal with indexed name 14, value length 0 -> fine? */
        "ff",                   /* index prefix cut */
        "0f 3f 00",             /* literal without indexing, name index 78: out of range */
    };
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coai_result r;
        memset(&d, 0, sizeof d);
        r = dec_hex(&d, &l, bad[i]);
        if (i == 12) {          /* the control: a valid block among the bad ones */
            CHECKF(r == COAI_OK && l.n == 1 && str_is(l.v[0].name, ":status")
                   && str_is(l.v[0].value, "") && d.count == 1, "%s", bad[i]);
            continue;
        }
        CHECKF(r == COAI_ERR_H2 && d.err && l.n == 0, "%s -> %d", bad[i], (int)r);
        /* sticky: even a good block fails now */
        CHECK(dec_hex(&d, &l, "82") == COAI_ERR_H2);
    }
    /* size updates: down to 0 empties the table; up to 4096 again is allowed; two at the
       start of a block are fine */
    memset(&d, 0, sizeof d);
    CHECK(dec_hex(&d, &l, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")
          == COAI_OK && d.count == 1 && d.size == 55);
    CHECK(dec_hex(&d, &l, "20 3f e1 1f be") == COAI_ERR_H2 && d.count == 0);
    memset(&d, 0, sizeof d);
    CHECK(dec_hex(&d, &l, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")
          == COAI_OK);
    CHECK(dec_hex(&d, &l, "20 3f e1 1f 82") == COAI_OK && d.count == 0 && d.cap == 4096
          && l.n == 1);
    CHECK(dec_hex(&d, &l, "3f 11 40 01 61 01 62") == COAI_OK && d.cap == 48 && d.count == 1);
    /* an entry bigger than the table empties it and is not added */
    CHECK(dec_hex(&d, &l, "40 01 63 10 3031 3233 3435 3637 3839 3031 3233 3435") == COAI_OK
          && d.count == 0 && d.size == 0 && l.n == 1
          && str_is(l.v[0].value, "0123456789012345"));
    CHECK(dec_hex(&d, &l, "be") == COAI_ERR_H2);
    /* a size update shrinking the table evicts the oldest entries */
    memset(&d, 0, sizeof d);
    CHECK(dec_hex(&d, &l, "40 01 61 01 31 40 01 62 01 32 40 01 63 01 33") == COAI_OK
          && d.count == 3 && d.size == 102);
    CHECK(dec_hex(&d, &l, "3f 2f be") == COAI_OK && d.count == 2 && d.size == 68 && l.n == 1
          && str_is(l.v[0].name, "c"));
    CHECK(dec_hex(&d, &l, "3f 2f c0") == COAI_ERR_H2);     /* index 64: "a" is gone */
    coai_hpack_list_free(&l);
}

static void test_hpack_list_limit(void)
{
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    memset(&d, 0, sizeof d);
    d.max_list = 100;
    /* custom-key: custom-header (55) + :authority: www.example.com (57) = 112 > 100 */
    CHECK(dec_hex(&d, &l, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572 "
                  "41 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d") == COAI_ERR_TOO_BIG);
    CHECK(l.n == 0 && !d.err);
    /* both entries went into the table all the same: the next block can use them */
    CHECK(d.count == 2 && d.size == 112);
    CHECK(dec_hex(&d, &l, "be") == COAI_OK && l.n == 1 && str_is(l.v[0].name, ":authority"));
    CHECK(dec_hex(&d, &l, "bf") == COAI_OK && l.n == 1 && str_is(l.v[0].value, "custom-header"));
    /* exactly at the limit is fine */
    d.max_list = 55;
    CHECK(dec_hex(&d, &l, "bf") == COAI_OK && l.n == 1 && l.size == 55);
    CHECK(dec_hex(&d, &l, "bf bf") == COAI_ERR_TOO_BIG);
    coai_hpack_list_free(&l);
}

/* A block of 2-byte literals with incremental indexing whose name is a 4000-byte table
 * entry: each copies the name and puts it back in the table, so 2 bytes cost 8 KB of
 * copying. Past the header list limit that work is still bounded per block (max_work);
 * 1-byte indexes to the entry cost nothing once over the limit, and the table stays in step
 * with the server's. */
static void big_entry(coai_buf *b)
{
    static char name[4000];
    memset(name, 'n', sizeof name);
    coai_buf_putc(b, 0x40);                          /* literal with indexing, new name */
    coai__hpack_int_put(b, 0, 7, (uint32_t)sizeof name);
    coai_buf_append(b, name, sizeof name);
    coai_buf_putc(b, 0);                             /* empty value */
}

static void test_hpack_flood(void)
{
    static coai_hpack_decoder d;
    coai_hpack_list l = {0};
    coai_buf blk = {0};
    size_t i;
    coai_result r;
    memset(&d, 0, sizeof d);
    big_entry(&blk);
    CHECK(coai_hpack_decode(&d, place(blk.data, blk.len), blk.len, &l) == COAI_OK && l.n == 1);
    CHECK(d.count == 1 && d.size == 4032);
    /* 64 Ki indexes of it (256 MB to copy): over the list limit, and within a 200 KB budget
     * because nothing past the limit is copied; the stream fails, the table is as it was */
    coai_buf_reset(&blk);
    for (i = 0; i < 65536; i++) coai_buf_putc(&blk, 0xbe);
    d.max_work = 200 * 1024;
    r = coai_hpack_decode(&d, place(blk.data, blk.len), blk.len, &l);
    CHECKF(r == COAI_ERR_TOO_BIG && !d.err && l.n == 0, "r %d err %d", (int)r, d.err);
    CHECK(d.count == 1 && d.size == 4032);
    CHECK(coai_hpack_decode(&d, place("\xbe", 1), 1, &l) == COAI_OK && l.n == 1
          && l.v[0].name.len == 4000 && l.v[0].value.len == 0);
    /* 64 Ki literals re-indexing it (1 GB of copying and table churn): past max_work the
     * decoder stops, a connection error (ENHANCE_YOUR_CALM below), not a stream error */
    d.max_work = COAI_H2_MAX_HEADER_WORK;
    coai_buf_reset(&blk);
    for (i = 0; i < 65536; i++) { coai_buf_putc(&blk, 0x7e); coai_buf_putc(&blk, 0); }
    r = coai_hpack_decode(&d, place(blk.data, blk.len), blk.len, &l);
    CHECKF(r == COAI_ERR_H2 && d.err == 2 && l.n == 0, "r %d err %d", (int)r, d.err);
    /* it stopped once the budget was spent: the table holds the last re-indexed copy */
    CHECK(d.count == 1 && d.size == 4032);
    CHECK(coai_hpack_decode(&d, place("\x82", 1), 1, &l) == COAI_ERR_H2);   /* sticky */
    /* the same fields under the limit decode as before (a fresh decoder, 8 of them) */
    memset(&d, 0, sizeof d);
    coai_buf_reset(&blk);
    big_entry(&blk);
    for (i = 0; i < 8; i++) { coai_buf_putc(&blk, 0x7e); coai_buf_putc(&blk, 0); }
    CHECK(coai_hpack_decode(&d, place(blk.data, blk.len), blk.len, &l) == COAI_OK
          && l.n == 9 && l.v[8].name.len == 4000 && d.count == 1 && d.size == 4032);
    coai_buf_free(&blk);
    coai_hpack_list_free(&l);
}

/* The table against a plain model across many inserts of varied sizes (wrap, compaction,
 * eviction) and size updates. */
static void test_hpack_table_model(void)
{
    static char mn[200][40], mv[200][120];
    size_t mcount = 0, msize = 0, cap = 4096, i, step;
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    unsigned seed = 12345;
    int ok = 1;
    memset(&d, 0, sizeof d);
    for (step = 0; step < 3000 && ok; step++) {
        coai_buf blk = {0};
        size_t nl, vl;
        char name[40], value[120];
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 37 == 0) {           /* a size update */
            size_t ns = (seed >> 8) % 4097;
            coai__hpack_int_put(&blk, 0x20, 5, (uint32_t)ns);
            cap = ns;
            while (mcount && msize > cap) {
                msize -= strlen(mn[0]) + strlen(mv[0]) + 32;
                memmove(mn, mn + 1, sizeof mn[0] * (mcount - 1));
                memmove(mv, mv + 1, sizeof mv[0] * (mcount - 1));
                mcount--;
            }
        }
        /* the oldest entry of the model, if any, by index; then a new entry */
        if (mcount) coai__hpack_int_put(&blk, 0x80, 7, (uint32_t)(61 + mcount));
        nl = 1 + (seed >> 4) % 30;
        vl = (seed >> 9) % 110;
        for (i = 0; i < nl; i++) name[i] = (char)('a' + (step + i) % 26);
        for (i = 0; i < vl; i++) value[i] = (char)('A' + (step * 7 + i) % 26);
        name[nl] = value[vl] = 0;
        coai_buf_putc(&blk, 0x40);
        coai__hpack_int_put(&blk, 0, 7, (uint32_t)nl);
        coai_buf_append(&blk, name, nl);
        coai__hpack_int_put(&blk, 0, 7, (uint32_t)vl);
        coai_buf_append(&blk, value, vl);
        if (coai_hpack_decode(&d, place(blk.data, blk.len), blk.len, &l) != COAI_OK) ok = 0;
        if (mcount && ok && !(l.n == 2 && str_is(l.v[0].name, mn[0])
                              && str_is(l.v[0].value, mv[0])))
            ok = 0;
        /* model: newest at the end */
        if (nl + vl + 32 > cap) {
            mcount = msize = 0;
        } else {
            while (mcount && msize + nl + vl + 32 > cap) {
                msize -= strlen(mn[0]) + strlen(mv[0]) + 32;
                memmove(mn, mn + 1, sizeof mn[0] * (mcount - 1));
                memmove(mv, mv + 1, sizeof mv[0] * (mcount - 1));
                mcount--;
            }
            strcpy(mn[mcount], name);
            strcpy(mv[mcount], value);
            mcount++;
            msize += nl + vl + 32;
        }
        if (d.count != mcount || d.size != msize) ok = 0;
        for (i = 0; ok && i < mcount; i++) {
            coai_str a, b;
            if (coai__hpack_get(&d, (uint32_t)(62 + i), &a, &b) != 0
                || !str_is(a, mn[mcount - 1 - i]) || !str_is(b, mv[mcount - 1 - i]))
                ok = 0;
        }
        CHECKF(ok, "model step %zu", step);
        coai_buf_free(&blk);
    }
    coai_hpack_list_free(&l);
}

static void test_hpack_encode(void)
{
    coai_h2_header h[8];
    coai_buf out = {0};
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    size_t i;
    h[0] = H(":method", "POST");
    h[1] = H(":scheme", "https");
    h[2] = H(":path", "/agent.v1.AgentService/Run");
    h[3] = H(":authority", "agentn.global.api5.cursor.sh");
    h[4] = H("content-type", "application/connect+proto");
    h[5] = H("x-cursor-client-version", "cli-2026.01.01-abcd");
    h[6] = H("te", "trailers");
    h[7] = H("accept-encoding", "gzip, deflate");
    CHECK(coai_hpack_encode(&out, h, 8) == 0);
    /* :method POST and :scheme https indexed; :path a literal with name index 4 */
    CHECK(out.len > 4 && out.data[0] == 0x83 && out.data[1] == 0x87 && out.data[2] == 0x04
          && out.data[3] == 26);
    memset(&d, 0, sizeof d);
    CHECK(coai_hpack_decode(&d, place(out.data, out.len), out.len, &l) == COAI_OK && l.n == 8);
    for (i = 0; i < 8 && i < l.n; i++)
        CHECK(str_is(l.v[i].name, h[i].name.ptr) && str_is(l.v[i].value, h[i].value.ptr));
    CHECK(d.count == 0);                        /* nothing for the server to remember */
    CHECK(out.data[out.len - 1] == 0x90);      /* accept-encoding: gzip, deflate = 16 */
    /* bad names and values: nothing appended */
    coai_buf_reset(&out);
    h[0] = H("Content-Type", "x");
    CHECK(coai_hpack_encode(&out, h, 1) == COAI_ERR_INVALID && out.len == 0);
    h[0] = H("", "x");
    CHECK(coai_hpack_encode(&out, h, 1) == COAI_ERR_INVALID && out.len == 0);
    h[0] = H("x-a", "a\r\nb: c");
    CHECK(coai_hpack_encode(&out, h, 1) == COAI_ERR_INVALID && out.len == 0);
    h[0] = H("x a", "v");
    CHECK(coai_hpack_encode(&out, h, 1) == COAI_ERR_INVALID && out.len == 0);
    /* long values use multi-byte lengths */
    {
        static char big[3000];
        memset(big, 'v', sizeof big - 1);
        h[0] = H("x-big", big);
        CHECK(coai_hpack_encode(&out, h, 1) == 0);
        CHECK(coai_hpack_decode(&d, place(out.data, out.len), out.len, &l) == COAI_OK
              && l.n == 1 && l.v[0].value.len == sizeof big - 1);
    }
    coai_hpack_list_free(&l);
    coai_buf_free(&out);
}

/* ---- frames ------------------------------------------------------------------------- */

static void test_frames(void)
{
    static const int types[] = { COAI_H2_DATA, COAI_H2_HEADERS, COAI_H2_PRIORITY,
                                 COAI_H2_RST_STREAM, COAI_H2_SETTINGS, COAI_H2_PUSH_PROMISE,
                                 COAI_H2_PING, COAI_H2_GOAWAY, COAI_H2_WINDOW_UPDATE,
                                 COAI_H2_CONTINUATION, 0xfa };
    coai_buf b = {0};
    coai_h2_frame f;
    size_t used, i, k;
    unsigned char pay[300];
    for (i = 0; i < sizeof pay; i++) pay[i] = (unsigned char)(i * 7);
    for (i = 0; i < sizeof types / sizeof types[0]; i++) {
        coai_buf_reset(&b);
        CHECK(coai_h2_frame_append(&b, types[i], 0x2d, 0x80000000u | (uint32_t)(i * 2 + 1),
                                   pay, i * 20) == 0);
        CHECK(b.len == 9 + i * 20);
        CHECK(coai_h2_frame_parse(place(b.data, b.len), b.len, 16384, &f, &used) == COAI_OK);
        CHECK(used == b.len && f.type == types[i] && f.flags == 0x2d && f.length == i * 20
              && f.stream == i * 2 + 1 && memcmp(f.payload, pay, i * 20) == 0);
        /* every prefix: more */
        for (k = 0; k < b.len; k++)
            CHECK(coai_h2_frame_parse(place(b.data, k), k, 16384, &f, &used) == COAI_MORE);
    }
    /* the length is checked as soon as it is known: 3 bytes */
    coai_buf_reset(&b);
    CHECK(coai_h2_frame_append(&b, COAI_H2_DATA, 0, 1, pay, 101) == 0);
    CHECK(coai_h2_frame_parse(place(b.data, 3), 3, 100, &f, &used) == COAI_ERR_TOO_BIG);
    CHECK(coai_h2_frame_parse(place(b.data, 2), 2, 100, &f, &used) == COAI_MORE);
    CHECK(coai_h2_frame_parse(place(b.data, b.len), b.len, 101, &f, &used) == COAI_OK);
    /* padding and priority fields */
    {
        unsigned char p[32];
        const unsigned char *q;
        size_t n;
        p[0] = 3;                                          /* pad length */
        memcpy(p + 1, "\x80\0\0\x05\x10", 5);              /* exclusive, dep 5, weight */
        memcpy(p + 6, "abc", 3);
        memset(p + 9, 0, 3);
        f.type = COAI_H2_HEADERS;
        f.flags = COAI_H2_FLAG_PADDED | COAI_H2_FLAG_PRIORITY;
        f.payload = place(p, 12);
        f.length = 12;
        CHECK(coai__h2_unpad(&f, &q, &n) == 0 && n == 3 && memcmp(q, "abc", 3) == 0);
        f.flags = COAI_H2_FLAG_PRIORITY;
        f.payload = place(p + 1, 8);
        f.length = 8;
        CHECK(coai__h2_unpad(&f, &q, &n) == 0 && n == 3 && memcmp(q, "abc", 3) == 0);
        f.type = COAI_H2_DATA;                             /* DATA has no priority fields */
        f.flags = COAI_H2_FLAG_PADDED | COAI_H2_FLAG_PRIORITY;
        f.payload = place(p, 12);
        f.length = 12;
        CHECK(coai__h2_unpad(&f, &q, &n) == 0 && n == 8);
        p[0] = 11;                                         /* padding = all the rest: ok */
        f.payload = place(p, 12);
        CHECK(coai__h2_unpad(&f, &q, &n) == 0 && n == 0);
        p[0] = 12;                                         /* longer than the rest */
        f.payload = place(p, 12);
        CHECK(coai__h2_unpad(&f, &q, &n) == -1);
        f.length = 0;
        f.payload = place(p, 0);
        CHECK(coai__h2_unpad(&f, &q, &n) == -1);           /* PADDED without the length */
        f.type = COAI_H2_HEADERS;
        f.flags = COAI_H2_FLAG_PRIORITY;
        f.length = 4;
        f.payload = place(p, 4);
        CHECK(coai__h2_unpad(&f, &q, &n) == -1);           /* priority fields cut */
    }
    coai_buf_free(&b);
}

/* ---- the connection: a scripted server ----------------------------------------------- */

/* Server-side frame builders. */
static void sf(coai_buf *b, int type, int flags, uint32_t stream, const void *p, size_t n)
{
    coai_h2_frame_append(b, type, flags, stream, p, n);
}

static void s_settings(coai_buf *b, const uint32_t *kv, size_t pairs)
{
    unsigned char p[64];
    size_t i;
    for (i = 0; i < pairs; i++) {
        p[i * 6] = 0;
        p[i * 6 + 1] = (unsigned char)kv[2 * i];
        coai__put32(p + i * 6 + 2, kv[2 * i + 1]);
    }
    sf(b, COAI_H2_SETTINGS, 0, 0, p, pairs * 6);
}

static void s_u32(coai_buf *b, int type, uint32_t stream, uint32_t v)
{
    unsigned char p[4];
    coai__put32(p, v);
    sf(b, type, 0, stream, p, 4);
}

static void s_goaway(coai_buf *b, uint32_t last, uint32_t code, const char *debug)
{
    unsigned char p[64];
    coai__put32(p, last);
    coai__put32(p + 4, code);
    memcpy(p + 8, debug, strlen(debug));
    sf(b, COAI_H2_GOAWAY, 0, 0, p, 8 + strlen(debug));
}

/* HEADERS (END_HEADERS) with fields "name: value" separated by '\n'. */
static void s_headers(coai_buf *b, uint32_t stream, int flags, const char *lines)
{
    coai_h2_header h[16];
    coai_buf blk = {0};
    char tmp[1024], *p = tmp, *nl;
    size_t n = 0;
    snprintf(tmp, sizeof tmp, "%s", lines);
    while (*p && n < 16) {
        char *c;
        nl = strchr(p, '\n');
        if (nl) *nl = 0;
        c = strstr(p + 1, ": ");
        *c = 0;
        h[n].name = coai_str_c(p);
        h[n].value = coai_str_c(c + 2);
        n++;
        if (!nl) break;
        p = nl + 1;
    }
    /* the library's encoder when it accepts the fields, else raw literals (uppercase...) */
    if (coai_hpack_encode(&blk, h, n) != 0) {
        size_t i;
        coai_buf_reset(&blk);
        for (i = 0; i < n; i++) {
            coai_buf_putc(&blk, 0);
            coai__hpack_int_put(&blk, 0, 7, (uint32_t)h[i].name.len);
            coai_buf_append(&blk, h[i].name.ptr, h[i].name.len);
            coai__hpack_int_put(&blk, 0, 7, (uint32_t)h[i].value.len);
            coai_buf_append(&blk, h[i].value.ptr, h[i].value.len);
        }
    }
    sf(b, COAI_H2_HEADERS, flags | COAI_H2_FLAG_END_HEADERS, stream, blk.data, blk.len);
    coai_buf_free(&blk);
}

/* The events of one run, flattened to text so runs can be compared. */
typedef struct evlog {
    char text[8192];
    size_t len;
    int count;
    coai_h2_event last;
    char last_data[20000];
} evlog;

static void log_ev(evlog *g, const coai_h2_event *e)
{
    static const char *const names[] = { "?", "SETTINGS", "HEADERS", "DATA", "RESET", "REFUSED",
                                         "WINDOW", "GOAWAY", "PING_ACK" };
    size_t i;
    char *o = g->text + g->len;
    size_t room = sizeof g->text - g->len;
    int w = snprintf(o, room, "%s %u", names[e->type], e->stream);
    if (e->type == COAI_H2_EV_HEADERS) {
        w += snprintf(o + w, room - (size_t)w, " status=%d%s%s", e->status,
                      e->trailers ? " trailers" : "", e->end_stream ? " end" : "");
        for (i = 0; i < e->n_headers; i++)
            w += snprintf(o + w, room - (size_t)w, " [%.*s: %.*s]",
                          (int)e->headers[i].name.len, e->headers[i].name.ptr,
                          (int)e->headers[i].value.len, e->headers[i].value.ptr);
    } else if (e->type == COAI_H2_EV_DATA || e->type == COAI_H2_EV_PING_ACK
               || e->type == COAI_H2_EV_GOAWAY) {
        w += snprintf(o + w, room - (size_t)w, " len=%zu%s '%.*s'", e->data.len,
                      e->end_stream ? " end" : "", (int)(e->data.len > 40 ? 40 : e->data.len),
                      e->data.ptr);
    }
    if (e->type == COAI_H2_EV_RESET || e->type == COAI_H2_EV_REFUSED
        || e->type == COAI_H2_EV_GOAWAY)
        w += snprintf(o + w, room - (size_t)w, " code=%u%s", e->code, e->local ? " local" : "");
    if (e->type == COAI_H2_EV_GOAWAY) w += snprintf(o + w, room - (size_t)w, " last=%u",
                                                    e->last_stream);
    w += snprintf(o + w, room - (size_t)w, "\n");
    g->len += (size_t)w;
    g->count++;
    g->last = *e;
    if (e->data.len <= sizeof g->last_data && e->data.len)
        memcpy(g->last_data, e->data.ptr, e->data.len);
}

/* Feed bytes (whole, or one at a time when split) and collect every event. Returns the
 * last result of coai_h2_next. */
static coai_result feed(coai_h2_conn *c, coai_buf *in, int split, evlog *g)
{
    coai_result r = COAI_MORE;
    size_t off = 0, step;
    memset(g, 0, sizeof *g);
    do {
        coai_h2_event ev;
        step = split ? 1 : in->len;
        if (step > in->len - off) step = in->len - off;
        /* each piece before the guard page */
        CHECK(coai_h2_feed(c, place(in->data ? in->data + off : NULL, step), step) == 0);
        off += step;
        while ((r = coai_h2_next(c, &ev)) == COAI_OK) log_ev(g, &ev);
    } while (off < in->len && r >= 0);
    coai_buf_reset(in);
    return r;
}

/* Client output as frames, consumed. */
typedef struct outlog {
    coai_h2_frame f[64];
    unsigned char mem[70000];
    size_t n;
    int preface;
} outlog;

static void take(coai_h2_conn *c, outlog *o)
{
    const unsigned char *p;
    size_t n = coai_h2_want_write(c, &p), off = 0, used;
    memset(o, 0, sizeof *o);
    if (n > sizeof o->mem) { CHECK(!"output too big"); coai_h2_wrote(c, n); return; }
    if (n) memcpy(o->mem, p, n);
    if (n >= 24 && memcmp(o->mem, COAI_H2_PREFACE, 24) == 0) { o->preface = 1; off = 24; }
    while (off < n && o->n < 64
           && coai_h2_frame_parse(o->mem + off, n - off, 0xffffff, &o->f[o->n], &used) == 0) {
        o->n++;
        off += used;
    }
    CHECK(off == n);
    coai_h2_wrote(c, n);
}

static int has_frame(const outlog *o, int type, uint32_t stream, int flags, uint32_t u32)
{
    size_t i;
    for (i = 0; i < o->n; i++) {
        const coai_h2_frame *f = &o->f[i];
        if (f->type != type || f->stream != stream || (flags >= 0 && f->flags != flags))
            continue;
        if (type == COAI_H2_WINDOW_UPDATE || type == COAI_H2_RST_STREAM)
            if (f->length != 4 || coai__be32(f->payload) != u32) continue;
        if (type == COAI_H2_GOAWAY)
            if (f->length < 8 || coai__be32(f->payload + 4) != u32) continue;
        return 1;
    }
    return 0;
}

static const coai_h2_header req[] = {
    { COAI_STR_LIT(":method"), COAI_STR_LIT("POST") },
    { COAI_STR_LIT(":scheme"), COAI_STR_LIT("https") },
    { COAI_STR_LIT(":path"), COAI_STR_LIT("/agent.v1.AgentService/Run") },
    { COAI_STR_LIT(":authority"), COAI_STR_LIT("agentn.example") },
    { COAI_STR_LIT("content-type"), COAI_STR_LIT("application/connect+proto") }
};

/* A connection past the preface exchange: server SETTINGS (kv pairs) sent and ours acked. */
static void conn_up(coai_h2_conn *c, const coai_h2_opts *o, const uint32_t *kv, size_t pairs)
{
    coai_buf in = {0};
    evlog *g = malloc(sizeof *g);
    outlog *out = malloc(sizeof *out);
    CHECK(coai_h2_init(c, o) == 0);
    take(c, out);
    s_settings(&in, kv, pairs);
    sf(&in, COAI_H2_SETTINGS, COAI_H2_FLAG_ACK, 0, NULL, 0);
    CHECK(feed(c, &in, 0, g) == COAI_MORE && g->count == 1
          && g->last.type == COAI_H2_EV_SETTINGS);
    take(c, out);
    CHECK(out->n == 1 && has_frame(out, COAI_H2_SETTINGS, 0, COAI_H2_FLAG_ACK, 0));
    coai_buf_free(&in);
    free(g);
    free(out);
}

static void test_conn_init(void)
{
    static coai_h2_conn c;
    static outlog o;
    coai_h2_opts opts;
    const coai_h2_frame *s;
    CHECK(coai_h2_init(&c, NULL) == 0);
    take(&c, &o);
    CHECK(o.preface && o.n == 2);
    s = &o.f[0];
    CHECK(s->type == COAI_H2_SETTINGS && s->flags == 0 && s->stream == 0 && s->length == 24);
    CHECK(memcmp(s->payload, "\0\x01\0\0\x10\0" "\0\x02\0\0\0\0" "\0\x04\0\x04\0\0"
                 "\0\x06\0\x01\0\0", 24) == 0);
    CHECK(has_frame(&o, COAI_H2_WINDOW_UPDATE, 0, 0,
                    COAI_H2_MAX_STREAMS * COAI_H2_STREAM_WINDOW - 65535));
    CHECK(coai_h2_want_write(&c, &o.f[0].payload) == 0);
    coai_h2_free(&c);
    /* options: a bigger frame size is announced; a small connection window sends no update */
    memset(&opts, 0, sizeof opts);
    opts.max_frame = 65536;
    opts.conn_window = 65535;
    opts.stream_window = 1000;
    CHECK(coai_h2_init(&c, &opts) == 0);
    take(&c, &o);
    CHECK(o.preface && o.n == 1 && o.f[0].length == 30);
    CHECK(memcmp(o.f[0].payload + 12, "\0\x04\0\0\x03\xe8" "\0\x05\0\x01\0\0", 12) == 0);
    coai_h2_free(&c);
}

static void test_conn_exchange(int split)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    const uint32_t set[] = { COAI_H2_SET_MAX_CONCURRENT_STREAMS, 2,
                             COAI_H2_SET_INITIAL_WINDOW_SIZE, 100, 0x99, 7 };
    char body[250];
    size_t sent;
    long id1, id3;
    coai_hpack_decoder d;
    coai_hpack_list l = {0};
    memset(body, 'b', sizeof body);
    conn_up(&c, NULL, set, 3);
    CHECK(c.peer.max_concurrent_streams == 2 && c.peer.initial_window_size == 100);
    id1 = coai_h2_open(&c, req, 5, 0, &g);
    id3 = coai_h2_open(&c, req, 5, 1, NULL);
    CHECK(id1 == 1 && id3 == 3);
    CHECK(coai_h2_open(&c, req, 5, 0, NULL) == 0);          /* the server allows 2 */
    CHECK(coai_h2_active(&c) == 2);
    CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_OPEN);
    CHECK(coai_h2_stream_state(&c, 3) == COAI_H2_ST_HALF_CLOSED_LOCAL);
    take(&c, &o);
    CHECK(o.n == 2 && o.f[0].type == COAI_H2_HEADERS && o.f[0].stream == 1
          && o.f[0].flags == COAI_H2_FLAG_END_HEADERS);
    CHECK(o.f[1].stream == 3
          && o.f[1].flags == (COAI_H2_FLAG_END_HEADERS | COAI_H2_FLAG_END_STREAM));
    memset(&d, 0, sizeof d);
    CHECK(coai_hpack_decode(&d, o.f[0].payload, o.f[0].length, &l) == COAI_OK && l.n == 5
          && str_is(l.v[2].value, "/agent.v1.AgentService/Run"));
    coai_hpack_list_free(&l);
    /* DATA within the stream window (100) */
    CHECK(coai_h2_send_room(&c, 1) == 100 && coai_h2_send_room(&c, 3) == 0);
    CHECK(coai_h2_send_data(&c, 1, body, 250, 1, &sent) == 0 && sent == 100);
    CHECK(coai_h2_send_room(&c, 1) == 0 && coai_h2_stream_state(&c, 1) == COAI_H2_ST_OPEN);
    CHECK(coai_h2_send_data(&c, 3, body, 1, 0, &sent) == COAI_ERR_STATE && sent == 0);
    take(&c, &o);
    CHECK(o.n == 1 && o.f[0].type == COAI_H2_DATA && o.f[0].length == 100 && o.f[0].flags == 0);
    /* the server opens the window by 60 */
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 1, 60);
    CHECK(feed(&c, &in, split, &g) == COAI_MORE && g.count == 1
          && g.last.type == COAI_H2_EV_WINDOW && g.last.stream == 1 && g.last.user == &g);
    CHECK(coai_h2_send_room(&c, 1) == 60);
    CHECK(coai_h2_send_data(&c, 1, body + 100, 150, 1, &sent) == 0 && sent == 60);
    CHECK(c.send_window == 65535 - 160);
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 1, 1000);
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 0, 5);
    CHECK(feed(&c, &in, split, &g) == COAI_MORE && g.count == 2
          && g.last.type == COAI_H2_EV_WINDOW && g.last.stream == 0);
    CHECK(coai_h2_send_data(&c, 1, body + 160, 90, 1, &sent) == 0 && sent == 90);
    CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_HALF_CLOSED_LOCAL);
    take(&c, &o);
    CHECK(o.n == 2 && o.f[1].length == 90 && o.f[1].flags == COAI_H2_FLAG_END_STREAM);
    CHECK(coai_h2_send_data(&c, 1, NULL, 0, 1, &sent) == COAI_ERR_STATE);
    /* the response: HEADERS (padded, with priority) + CONTINUATION, padded DATA, trailers */
    {
        coai_buf blk = {0};
        coai_h2_header rh[3];
        unsigned char p[200];
        size_t n;
        rh[0] = H(":status", "200");
        rh[1] = H("content-type", "application/connect+proto");
        rh[2] = H("x-long", "0123456789012345678901234567890123456789");
        coai_hpack_encode(&blk, rh, 3);
        p[0] = 4;
        memcpy(p + 1, "\0\0\0\x03\x20", 5);
        memcpy(p + 6, blk.data, 10);
        memset(p + 16, 0, 4);
        sf(&in, COAI_H2_HEADERS, COAI_H2_FLAG_PADDED | COAI_H2_FLAG_PRIORITY, 1, p, 20);
        sf(&in, COAI_H2_CONTINUATION, 0, 1, blk.data + 10, 5);
        sf(&in, 0x42, 0, 0, "ignored", 7);                   /* unknown type: ignored ... */
        coai_buf_free(&blk);
        CHECK(feed(&c, &in, split, &g) == COAI_ERR_H2);      /* ... but not inside a block */
        CHECK(c.error == COAI_H2_PROTOCOL_ERROR);
        coai_h2_free(&c);
        conn_up(&c, NULL, set, 3);
        CHECK(coai_h2_open(&c, req, 5, 1, &g) == 1);
        take(&c, &o);
        sf(&in, COAI_H2_PRIORITY, 0, 1, "\0\0\0\0\x10", 5);   /* ignored */
        sf(&in, 0x42, 0, 0, "ignored", 7);
        sf(&in, COAI_H2_HEADERS, COAI_H2_FLAG_PADDED | COAI_H2_FLAG_PRIORITY, 1, p, 20);
        coai_hpack_encode(&blk, rh, 3);
        sf(&in, COAI_H2_CONTINUATION, 0, 1, blk.data + 10, 5);
        sf(&in, COAI_H2_CONTINUATION, COAI_H2_FLAG_END_HEADERS, 1, blk.data + 15,
           blk.len - 15);
        coai_buf_free(&blk);
        p[0] = 3;
        memcpy(p + 1, "hello", 5);
        memset(p + 6, 0, 3);
        sf(&in, COAI_H2_DATA, COAI_H2_FLAG_PADDED, 1, p, 9);
        sf(&in, COAI_H2_DATA, 0, 1, "world", 5);
        s_headers(&in, 1, COAI_H2_FLAG_END_STREAM, "grpc-status: 0\ngrpc-message: ok");
        n = in.len;
        CHECK(n > 0);
        CHECK(feed(&c, &in, split, &g) == COAI_MORE && g.count == 4);
        CHECK(strcmp(g.text,
                     "HEADERS 1 status=200 [:status: 200] [content-type: application/connect+proto]"
                     " [x-long: 0123456789012345678901234567890123456789]\n"
                     "DATA 1 len=5 'hello'\n"
                     "DATA 1 len=5 'world'\n"
                     "HEADERS 1 status=0 trailers end [grpc-status: 0] [grpc-message: ok]\n")
              == 0);
        if (g.count != 4) fprintf(stderr, "%s", g.text);
        CHECK(g.last.user == &g && coai_h2_active(&c) == 0);
        CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_CLOSED);
        /* padding (4 bytes) was returned at once; the 10 data bytes when consumed */
        coai_h2_consumed(&c, 1, 10);
        CHECK(c.unacked == 14
              && c.recv_window == COAI_H2_MAX_STREAMS * COAI_H2_STREAM_WINDOW - 14);
        take(&c, &o);
        CHECK(o.n == 0);
    }
    coai_h2_free(&c);
    coai_buf_free(&in);
}

static void test_conn_recv_flow(void)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    coai_h2_opts opts;
    char big[1200];
    int k;
    memset(big, 'x', sizeof big);
    memset(&opts, 0, sizeof opts);
    opts.stream_window = 1000;
    opts.conn_window = 65535;
    conn_up(&c, &opts, NULL, 0);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1);
    CHECK(c.streams[0].recv_window == 1000);
    take(&c, &o);
    s_headers(&in, 1, 0, ":status: 200");
    sf(&in, COAI_H2_DATA, 0, 1, big, 600);
    sf(&in, COAI_H2_DATA, 0, 1, big, 400);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 3);
    take(&c, &o);
    CHECK(o.n == 0);                    /* nothing consumed yet: no window comes back */
    coai_h2_consumed(&c, 1, 499);
    take(&c, &o);
    CHECK(o.n == 0);
    coai_h2_consumed(&c, 1, 1);         /* half the stream window */
    take(&c, &o);
    CHECK(o.n == 1 && has_frame(&o, COAI_H2_WINDOW_UPDATE, 1, 0, 500));
    /* a caller returning more than it got cannot inflate the window */
    coai_h2_consumed(&c, 1, 100000);
    take(&c, &o);
    CHECK(o.n == 1 && has_frame(&o, COAI_H2_WINDOW_UPDATE, 1, 0, 500));
    CHECK(c.streams[0].recv_window == 1000 && c.streams[0].unacked == 0);
    /* connection: 1000 of 65535 taken and returned as consumed? only at half (32767) */
    CHECK(c.recv_window == 65535 - 1000 && c.unacked == 1000);
    /* the server overruns the stream window: the stream is reset, the connection goes on */
    sf(&in, COAI_H2_DATA, 0, 1, big, 1001);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1
          && g.last.type == COAI_H2_EV_RESET && g.last.local
          && g.last.code == COAI_H2_FLOW_CONTROL_ERROR);
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_RST_STREAM, 1, 0, COAI_H2_FLOW_CONTROL_ERROR));
    /* DATA still in flight for the reset stream: dropped, counted for the connection */
    sf(&in, COAI_H2_DATA, 0, 1, big, 1000);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 0);
    CHECK(c.recv_window == 65535 - 3001 && c.unacked == 3001);
    /* DATA for forgotten streams is returned to the connection, so it never stalls */
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 3);
    s_headers(&in, 3, 0, ":status: 200");
    while (in.len < 70000) sf(&in, COAI_H2_DATA, 0, 3, big, 1000);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 3 && c.error == -1);
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_RST_STREAM, 3, 0, COAI_H2_FLOW_CONTROL_ERROR));
    CHECK(has_frame(&o, COAI_H2_WINDOW_UPDATE, 0, 0, 33001));
    coai_h2_free(&c);
    /* the connection window overrun (streams within theirs): GOAWAY FLOW_CONTROL_ERROR */
    memset(&opts, 0, sizeof opts);
    opts.stream_window = 200000;
    opts.conn_window = 65535;
    conn_up(&c, &opts, NULL, 0);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1);
    s_headers(&in, 1, 0, ":status: 200");
    for (k = 0; k < 66; k++) sf(&in, COAI_H2_DATA, 0, 1, big, 1000);
    CHECK(feed(&c, &in, 0, &g) == COAI_ERR_H2 && c.error == COAI_H2_FLOW_CONTROL_ERROR);
    CHECK(g.count == 66);               /* the head and 65 DATA frames fit in 65535 */
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_GOAWAY, 0, 0, COAI_H2_FLOW_CONTROL_ERROR));
    coai_h2_free(&c);
    coai_buf_free(&in);

    /* streams whose readers stall fill their own windows, never the connection's: with the
       default connection window, every stream can still get its whole window */
    memset(&opts, 0, sizeof opts);
    opts.stream_window = 300000;
    opts.max_streams = 4;
    conn_up(&c, &opts, NULL, 0);
    CHECK(c.opts.conn_window == 1200000);
    for (k = 0; k < 4; k++) {
        static char chunk[16384];
        int left = 300000;
        CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1 + 2 * k);
        s_headers(&in, (uint32_t)(1 + 2 * k), 0, ":status: 200");
        while (left > 0) {
            int m = left > 16384 ? 16384 : left;
            sf(&in, COAI_H2_DATA, 0, (uint32_t)(1 + 2 * k), chunk, (size_t)m);
            left -= m;
        }
    }
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && c.error == -1 && c.recv_window == 0);
    CHECK(g.count == 4 * (1 + 19));
    coai_h2_free(&c);
    coai_buf_free(&in);

    /* a slow consumer: the server stops at the window; consuming lets it go on */
    memset(&opts, 0, sizeof opts);
    opts.stream_window = 1000;
    conn_up(&c, &opts, NULL, 0);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1);
    take(&c, &o);
    s_headers(&in, 1, 0, ":status: 200");
    sf(&in, COAI_H2_DATA, 0, 1, big, 1000);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 2);
    CHECK(c.streams[0].recv_window == 0);
    take(&c, &o);
    CHECK(o.n == 0);
    coai_h2_consumed(&c, 1, 1000);
    take(&c, &o);
    CHECK(o.n == 1 && has_frame(&o, COAI_H2_WINDOW_UPDATE, 1, 0, 1000));
    coai_h2_free(&c);

    /* before our SETTINGS are acked a stream gets the default 65535; the ack applies ours */
    {
        const uint32_t none[] = { 0, 0 };
        CHECK(coai_h2_init(&c, &opts) == 0);
        take(&c, &o);
        s_settings(&in, none, 0);
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1);
        CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1 && c.streams[0].recv_window == 65535);
        s_headers(&in, 1, 0, ":status: 200");
        sf(&in, COAI_H2_DATA, 0, 1, big, 1200);              /* fine before the ack */
        sf(&in, COAI_H2_SETTINGS, COAI_H2_FLAG_ACK, 0, NULL, 0);
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 2);
        CHECK(c.settings_acked && c.streams[0].recv_window == 1000 - 1200);
        coai_h2_consumed(&c, 1, 1200);
        take(&c, &o);
        CHECK(has_frame(&o, COAI_H2_WINDOW_UPDATE, 1, 0, 1200));
        CHECK(c.streams[0].recv_window == 1000);
        coai_h2_free(&c);
    }
    coai_buf_free(&in);
}

static void test_conn_send_flow(void)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    static char big[70000];
    const uint32_t set[] = { COAI_H2_SET_INITIAL_WINDOW_SIZE, 100 };
    size_t sent, i;
    conn_up(&c, NULL, set, 1);
    CHECK(coai_h2_open(&c, req, 5, 0, NULL) == 1);
    CHECK(coai_h2_send_data(&c, 1, big, 100, 0, &sent) == 0 && sent == 100);
    /* the server lowers the initial window: the stream's window goes negative */
    {
        const uint32_t s2[] = { COAI_H2_SET_INITIAL_WINDOW_SIZE, 50 };
        s_settings(&in, s2, 1);
    }
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1);
    CHECK(c.streams[0].send_window == -50 && coai_h2_send_room(&c, 1) == 0);
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 1, 60);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1);
    CHECK(coai_h2_send_room(&c, 1) == 10);
    {
        const uint32_t s3[] = { COAI_H2_SET_INITIAL_WINDOW_SIZE, 0x7fffffff };
        s_settings(&in, s3, 1);
    }
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1);
    /* now the connection window (65535 - 100) is the limit */
    CHECK(coai_h2_send_room(&c, 1) == 65435);
    take(&c, &o);
    CHECK(coai_h2_send_data(&c, 1, big, sizeof big, 1, &sent) == 0 && sent == 65435);
    CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_OPEN);   /* not all sent: no END_STREAM */
    take(&c, &o);
    CHECK(o.n == 4);
    for (i = 0; i < o.n; i++) CHECK(o.f[i].type == COAI_H2_DATA && o.f[i].length <= 16384
                                    && o.f[i].flags == 0);
    /* a window that would pass 2^31 - 1: stream -> RST, connection -> GOAWAY */
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 1, 0x7fffffff);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1 && g.last.type == COAI_H2_EV_RESET
          && g.last.code == COAI_H2_FLOW_CONTROL_ERROR && g.last.local);
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_RST_STREAM, 1, 0, COAI_H2_FLOW_CONTROL_ERROR));
    CHECK(coai_h2_send_data(&c, 1, big, 1, 0, &sent) == COAI_ERR_STATE);
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 0, 0x7fffffff);     /* 0 + 2^31 - 1: the most */
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1 && c.send_window == 0x7fffffff);
    s_u32(&in, COAI_H2_WINDOW_UPDATE, 0, 1);
    CHECK(feed(&c, &in, 0, &g) == COAI_ERR_H2 && c.error == COAI_H2_FLOW_CONTROL_ERROR);
    coai_h2_free(&c);
    /* a header block over the server's frame size goes out as HEADERS + CONTINUATION */
    conn_up(&c, NULL, NULL, 0);
    {
        coai_h2_header h[6];
        static char v[40000];
        coai_hpack_decoder d;
        coai_hpack_list l = {0};
        coai_buf blk = {0};
        memcpy(h, req, sizeof req);
        memset(v, 'v', sizeof v - 1);
        h[5] = H("x-big", v);
        CHECK(coai_h2_open(&c, h, 6, 1, NULL) == 1);
        take(&c, &o);
        CHECK(o.n == 3 && o.f[0].type == COAI_H2_HEADERS && o.f[0].length == 16384
              && o.f[0].flags == COAI_H2_FLAG_END_STREAM);
        CHECK(o.f[1].type == COAI_H2_CONTINUATION && o.f[1].flags == 0 && o.f[1].stream == 1);
        CHECK(o.f[2].type == COAI_H2_CONTINUATION
              && o.f[2].flags == COAI_H2_FLAG_END_HEADERS);
        for (i = 0; i < 3; i++) coai_buf_append(&blk, o.f[i].payload, o.f[i].length);
        memset(&d, 0, sizeof d);
        d.max_list = 100000;
        CHECK(coai_hpack_decode(&d, blk.data, blk.len, &l) == COAI_OK && l.n == 6
              && l.v[5].value.len == sizeof v - 1);
        coai_hpack_list_free(&l);
        coai_buf_free(&blk);
        /* a bad header: nothing sent, no stream used */
        h[0] = H(":Method", "POST");
        CHECK(coai_h2_open(&c, h, 1, 1, NULL) == COAI_ERR_INVALID);
        CHECK(coai_h2_want_write(&c, &o.f[0].payload) == 0 && c.next_id == 3);
    }
    coai_h2_free(&c);
    coai_buf_free(&in);
}

static void test_conn_ping_goaway_rst(void)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    size_t i;
    conn_up(&c, NULL, NULL, 0);
    /* the server's PING is answered at once, ours comes back as an event */
    sf(&in, COAI_H2_PING, 0, 0, "12345678", 8);
    CHECK(feed(&c, &in, 1, &g) == COAI_MORE && g.count == 0);
    take(&c, &o);
    CHECK(o.n == 1 && o.f[0].type == COAI_H2_PING && o.f[0].flags == COAI_H2_FLAG_ACK
          && memcmp(o.f[0].payload, "12345678", 8) == 0);
    CHECK(coai_h2_ping(&c, (const unsigned char *)"abcdefgh") == 0);
    take(&c, &o);
    CHECK(o.n == 1 && o.f[0].type == COAI_H2_PING && o.f[0].flags == 0);
    sf(&in, COAI_H2_PING, COAI_H2_FLAG_ACK, 0, "abcdefgh", 8);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1
          && g.last.type == COAI_H2_EV_PING_ACK && memcmp(g.last_data, "abcdefgh", 8) == 0);
    /* RST_STREAM: CANCEL -> RESET, REFUSED_STREAM -> REFUSED; frames after it are dropped */
    for (i = 0; i < 5; i++) CHECK(coai_h2_open(&c, req, 5, 1, &c) == (long)(1 + 2 * i));
    s_u32(&in, COAI_H2_RST_STREAM, 1, COAI_H2_CANCEL);
    s_u32(&in, COAI_H2_RST_STREAM, 3, COAI_H2_REFUSED_STREAM);
    s_headers(&in, 1, 0, ":status: 200");
    sf(&in, COAI_H2_DATA, 0, 3, "late", 4);
    s_u32(&in, COAI_H2_RST_STREAM, 3, COAI_H2_CANCEL);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE);
    CHECK(strcmp(g.text, "RESET 1 code=8\nREFUSED 3 code=7\n") == 0);
    CHECK(g.last.user == &c && coai_h2_active(&c) == 3);
    /* our reset */
    CHECK(coai_h2_reset(&c, 5, COAI_H2_CANCEL) == 0 && coai_h2_active(&c) == 2);
    CHECK(coai_h2_reset(&c, 5, COAI_H2_CANCEL) == COAI_ERR_STATE);
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_RST_STREAM, 5, 0, COAI_H2_CANCEL));
    /* GOAWAY last 7: 7 finishes, 9 is refused, no new streams */
    s_goaway(&in, 7, COAI_H2_NO_ERROR, "bye");
    s_headers(&in, 7, COAI_H2_FLAG_END_STREAM, ":status: 200\ngrpc-status: 0");
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE);
    CHECK(strcmp(g.text, "GOAWAY 0 len=3 'bye' code=0 last=7\nREFUSED 9 code=7\n"
                 "HEADERS 7 status=200 end [:status: 200] [grpc-status: 0]\n") == 0);
    if (g.count != 3) fprintf(stderr, "%s", g.text);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == COAI_ERR_STATE);
    CHECK(coai_h2_active(&c) == 0);
    /* a second GOAWAY cannot raise the last id */
    s_goaway(&in, 100, COAI_H2_NO_ERROR, "");
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1 && c.goaway_last == 7);
    /* our GOAWAY */
    CHECK(coai_h2_goaway(&c, COAI_H2_NO_ERROR) == 0);
    take(&c, &o);
    CHECK(has_frame(&o, COAI_H2_GOAWAY, 0, 0, COAI_H2_NO_ERROR) && c.error == -1);
    coai_h2_free(&c);
    coai_buf_free(&in);
}

/* A stream error: the stream is reset with code, the connection goes on. */
static void stream_err(const char *what, void (*build)(coai_buf *), uint32_t code)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    coai_result r;
    char want[100];
    conn_up(&c, NULL, NULL, 0);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1 && coai_h2_open(&c, req, 5, 1, NULL) == 3);
    take(&c, &o);
    build(&in);
    s_headers(&in, 3, COAI_H2_FLAG_END_STREAM, ":status: 204");
    r = feed(&c, &in, 0, &g);
    snprintf(want, sizeof want, "RESET 1 code=%u local\nHEADERS 3 status=204 end "
             "[:status: 204]\n", code);
    CHECKF(r == COAI_MORE && g.len >= strlen(want)
           && strcmp(g.text + g.len - strlen(want), want) == 0, "%s: %d\n%s", what, (int)r,
           g.text);
    take(&c, &o);
    CHECKF(has_frame(&o, COAI_H2_RST_STREAM, 1, 0, code), "%s", what);
    CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_CLOSED);
    coai_h2_free(&c);
    coai_buf_free(&in);
}

static void b_upper(coai_buf *b) { s_headers(b, 1, 0, ":status: 200\nContent-Type: x"); }
static void b_nostatus(coai_buf *b) { s_headers(b, 1, 0, "content-type: x"); }
static void b_status2(coai_buf *b) { s_headers(b, 1, 0, ":status: 200\n:status: 200"); }
static void b_status_late(coai_buf *b) { s_headers(b, 1, 0, "a: b\n:status: 200"); }
static void b_status_bad(coai_buf *b) { s_headers(b, 1, 0, ":status: 2x0"); }
static void b_pseudo(coai_buf *b) { s_headers(b, 1, 0, ":status: 200\n:path: /"); }
static void b_conn_hdr(coai_buf *b) { s_headers(b, 1, 0, ":status: 200\nconnection: close"); }
static void b_data_first(coai_buf *b) { sf(b, COAI_H2_DATA, 0, 1, "x", 1); }
static void b_trailers_open(coai_buf *b)
{
    s_headers(b, 1, 0, ":status: 200");
    s_headers(b, 1, 0, "grpc-status: 0");
}
static void b_trailers_pseudo(coai_buf *b)
{
    s_headers(b, 1, 0, ":status: 200");
    s_headers(b, 1, COAI_H2_FLAG_END_STREAM, ":status: 200");
}
static void b_wu_zero(coai_buf *b) { s_u32(b, COAI_H2_WINDOW_UPDATE, 1, 0); }
static void b_1xx_end(coai_buf *b) { s_headers(b, 1, COAI_H2_FLAG_END_STREAM, ":status: 103"); }

static void test_conn_stream_errors(void)
{
    stream_err("uppercase name", b_upper, COAI_H2_PROTOCOL_ERROR);
    stream_err("no :status", b_nostatus, COAI_H2_PROTOCOL_ERROR);
    stream_err("two :status", b_status2, COAI_H2_PROTOCOL_ERROR);
    stream_err(":status after a field", b_status_late, COAI_H2_PROTOCOL_ERROR);
    stream_err(":status not 3 digits", b_status_bad, COAI_H2_PROTOCOL_ERROR);
    stream_err("request pseudo-header", b_pseudo, COAI_H2_PROTOCOL_ERROR);
    stream_err("connection header", b_conn_hdr, COAI_H2_PROTOCOL_ERROR);
    stream_err("DATA before HEADERS", b_data_first, COAI_H2_PROTOCOL_ERROR);
    stream_err("trailers without END_STREAM", b_trailers_open, COAI_H2_PROTOCOL_ERROR);
    stream_err("pseudo-header in trailers", b_trailers_pseudo, COAI_H2_PROTOCOL_ERROR);
    stream_err("WINDOW_UPDATE 0", b_wu_zero, COAI_H2_PROTOCOL_ERROR);
    stream_err("1xx with END_STREAM", b_1xx_end, COAI_H2_PROTOCOL_ERROR);
    /* frames after the server's END_STREAM while ours is open: STREAM_CLOSED */
    {
        static coai_h2_conn c;
        static evlog g;
        static outlog o;
        coai_buf in = {0};
        size_t sent;
        conn_up(&c, NULL, NULL, 0);
        CHECK(coai_h2_open(&c, req, 5, 0, NULL) == 1);
        s_headers(&in, 1, COAI_H2_FLAG_END_STREAM, ":status: 200\ngrpc-status: 0");
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1 && g.last.end_stream
              && !g.last.trailers);
        CHECK(coai_h2_stream_state(&c, 1) == COAI_H2_ST_HALF_CLOSED_REMOTE);
        CHECK(coai_h2_send_data(&c, 1, "x", 1, 0, &sent) == 0 && sent == 1);
        sf(&in, COAI_H2_DATA, 0, 1, "late", 4);
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE && strcmp(g.text, "RESET 1 code=5 local\n") == 0);
        take(&c, &o);
        CHECK(has_frame(&o, COAI_H2_RST_STREAM, 1, 0, COAI_H2_STREAM_CLOSED));
        /* and when we end ours too, the stream is closed and forgotten */
        CHECK(coai_h2_open(&c, req, 5, 0, NULL) == 3);
        s_headers(&in, 3, COAI_H2_FLAG_END_STREAM, ":status: 200");
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE && g.count == 1);
        CHECK(coai_h2_send_data(&c, 3, NULL, 0, 1, &sent) == 0 && coai_h2_active(&c) == 0);
        take(&c, &o);
        CHECK(o.n == 2 && o.f[1].type == COAI_H2_DATA && o.f[1].length == 0
              && o.f[1].flags == COAI_H2_FLAG_END_STREAM);
        coai_h2_free(&c);
        coai_buf_free(&in);
    }
    /* 1xx heads are skipped; a HEADERS for a forgotten stream still feeds the table */
    {
        static coai_h2_conn c;
        static evlog g;
        coai_buf in = {0}, blk = {0};
        conn_up(&c, NULL, NULL, 0);
        CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1 && coai_h2_open(&c, req, 5, 1, NULL) == 3);
        CHECK(coai_h2_reset(&c, 1, COAI_H2_CANCEL) == 0);
        s_headers(&in, 3, 0, ":status: 100");
        /* stream 1 (reset): ":status: 200" + "x-k: v" with indexing */
        coai_buf_append(&blk, "\x88\x40\x03x-k\x01v", 8);
        sf(&in, COAI_H2_HEADERS, COAI_H2_FLAG_END_HEADERS, 1, blk.data, blk.len);
        sf(&in, COAI_H2_HEADERS, COAI_H2_FLAG_END_HEADERS, 3, "\x88\xbe", 2);
        CHECK(feed(&c, &in, 0, &g) == COAI_MORE);
        CHECK(strcmp(g.text, "HEADERS 3 status=200 [:status: 200] [x-k: v]\n") == 0);
        coai_h2_free(&c);
        coai_buf_free(&in);
        coai_buf_free(&blk);
    }
}

/* A connection error: GOAWAY with code, COAI_ERR_H2 from then on. */
static void conn_err(const char *what, void (*build)(coai_buf *), uint32_t code, int up)
{
    static coai_h2_conn c;
    static evlog g;
    static outlog o;
    coai_buf in = {0};
    coai_h2_event ev;
    coai_result r;
    if (up) {
        conn_up(&c, NULL, NULL, 0);
        CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1);
    } else {
        CHECK(coai_h2_init(&c, NULL) == 0);
    }
    take(&c, &o);
    build(&in);
    r = feed(&c, &in, 0, &g);
    CHECKF(r == COAI_ERR_H2 && c.error == (int)code, "%s: r %d error %d", what, (int)r,
           c.error);
    take(&c, &o);
    CHECKF(o.n >= 1 && o.f[o.n - 1].type == COAI_H2_GOAWAY
           && coai__be32(o.f[o.n - 1].payload + 4) == code, "%s", what);
    CHECK(coai_h2_next(&c, &ev) == COAI_ERR_H2);              /* sticky */
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == COAI_ERR_STATE);
    coai_h2_free(&c);
    coai_buf_free(&in);
}

static void e_not_settings(coai_buf *b) { sf(b, COAI_H2_PING, 0, 0, "12345678", 8); }
static void e_push(coai_buf *b) { sf(b, COAI_H2_PUSH_PROMISE, COAI_H2_FLAG_END_HEADERS, 1,
                                     "\0\0\0\x02\x82", 5); }
static void e_data0(coai_buf *b) { sf(b, COAI_H2_DATA, 0, 0, "x", 1); }
static void e_idle(coai_buf *b) { s_headers(b, 5, 0, ":status: 200"); }
static void e_even(coai_buf *b) { s_headers(b, 2, 0, ":status: 200"); }
static void e_data_idle(coai_buf *b) { sf(b, COAI_H2_DATA, 0, 9, "x", 1); }
static void e_big(coai_buf *b) { static char x[16385]; sf(b, COAI_H2_DATA, 0, 1, x, sizeof x); }
static void e_hpack(coai_buf *b) { sf(b, COAI_H2_HEADERS, COAI_H2_FLAG_END_HEADERS, 1, "\x80", 1); }
static void e_cont_alone(coai_buf *b) { sf(b, COAI_H2_CONTINUATION, 4, 1, "\x88", 1); }
static void e_cont_other(coai_buf *b)
{
    sf(b, COAI_H2_HEADERS, 0, 1, "\x88", 1);
    sf(b, COAI_H2_CONTINUATION, 4, 3, "", 0);
}
static void e_cont_flood(coai_buf *b)
{
    static char x[16384];
    size_t i;
    sf(b, COAI_H2_HEADERS, 0, 1, "\x88", 1);
    for (i = 0; i < COAI_H2_MAX_HEADER_BLOCK / sizeof x + 1; i++)
        sf(b, COAI_H2_CONTINUATION, 0, 1, x, sizeof x);
}
static void e_wu0(coai_buf *b) { s_u32(b, COAI_H2_WINDOW_UPDATE, 0, 0); }
static void e_wu_len(coai_buf *b) { sf(b, COAI_H2_WINDOW_UPDATE, 0, 0, "\0\0\0\1\0", 5); }
static void e_wu_idle(coai_buf *b) { s_u32(b, COAI_H2_WINDOW_UPDATE, 11, 1); }
static void e_push_on(coai_buf *b)
{
    const uint32_t kv[] = { COAI_H2_SET_ENABLE_PUSH, 1 };
    s_settings(b, kv, 1);
}
static void e_set_len(coai_buf *b) { sf(b, COAI_H2_SETTINGS, 0, 0, "\0\x03\0\0\0", 5); }
static void e_set_stream(coai_buf *b) { sf(b, COAI_H2_SETTINGS, 0, 1, "", 0); }
static void e_set_ack_len(coai_buf *b) { sf(b, COAI_H2_SETTINGS, 1, 0, "\0\x03\0\0\0\x01", 6); }
static void e_set_window(coai_buf *b)
{
    const uint32_t kv[] = { COAI_H2_SET_INITIAL_WINDOW_SIZE, 0x80000000u };
    s_settings(b, kv, 1);
}
static void e_set_frame(coai_buf *b)
{
    const uint32_t kv[] = { COAI_H2_SET_MAX_FRAME_SIZE, 16383 };
    s_settings(b, kv, 1);
}
static void e_set_frame_hi(coai_buf *b)
{
    const uint32_t kv[] = { COAI_H2_SET_MAX_FRAME_SIZE, 0x1000000 };
    s_settings(b, kv, 1);
}
static void e_ping_len(coai_buf *b) { sf(b, COAI_H2_PING, 0, 0, "1234567", 7); }
static void e_ping_stream(coai_buf *b) { sf(b, COAI_H2_PING, 0, 1, "12345678", 8); }
static void e_rst0(coai_buf *b) { s_u32(b, COAI_H2_RST_STREAM, 0, 0); }
static void e_rst_len(coai_buf *b) { sf(b, COAI_H2_RST_STREAM, 0, 1, "\0\0\0", 3); }
static void e_rst_idle(coai_buf *b) { s_u32(b, COAI_H2_RST_STREAM, 3, 0); }
static void e_goaway_stream(coai_buf *b) { sf(b, COAI_H2_GOAWAY, 0, 1, "\0\0\0\0\0\0\0\0", 8); }
static void e_goaway_len(coai_buf *b) { sf(b, COAI_H2_GOAWAY, 0, 0, "\0\0\0\0\0\0\0", 7); }
static void e_prio0(coai_buf *b) { sf(b, COAI_H2_PRIORITY, 0, 0, "\0\0\0\0\0", 5); }
static void e_prio_len(coai_buf *b) { sf(b, COAI_H2_PRIORITY, 0, 1, "\0\0\0\0", 4); }
static void e_pad(coai_buf *b)
{
    sf(b, COAI_H2_HEADERS, COAI_H2_FLAG_PADDED | COAI_H2_FLAG_END_HEADERS, 1, "\x05\x88", 2);
}
static void e_data_pad(coai_buf *b)
{
    s_headers(b, 1, 0, ":status: 200");
    sf(b, COAI_H2_DATA, COAI_H2_FLAG_PADDED, 1, "\x02x", 2);
}
static void e_http1(coai_buf *b) { coai_buf_puts(b, "HTTP/1.1 400 Bad Request\r\n\r\n"); }

static void test_conn_errors(void)
{
    conn_err("first frame not SETTINGS", e_not_settings, COAI_H2_PROTOCOL_ERROR, 0);
    conn_err("an HTTP/1.1 answer", e_http1, COAI_H2_FRAME_SIZE_ERROR, 0);
    conn_err("PUSH_PROMISE", e_push, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("DATA on stream 0", e_data0, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("HEADERS on an idle stream", e_idle, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("HEADERS on an even stream", e_even, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("DATA on an idle stream", e_data_idle, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("frame over SETTINGS_MAX_FRAME_SIZE", e_big, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("bad HPACK", e_hpack, COAI_H2_COMPRESSION_ERROR, 1);
    conn_err("CONTINUATION alone", e_cont_alone, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("CONTINUATION of another stream", e_cont_other, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("CONTINUATION flood", e_cont_flood, COAI_H2_ENHANCE_YOUR_CALM, 1);
    conn_err("WINDOW_UPDATE 0 on the connection", e_wu0, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("WINDOW_UPDATE length 5", e_wu_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("WINDOW_UPDATE on an idle stream", e_wu_idle, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("SETTINGS_ENABLE_PUSH 1", e_push_on, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("SETTINGS length 5", e_set_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("SETTINGS on a stream", e_set_stream, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("SETTINGS ack with a payload", e_set_ack_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("SETTINGS_INITIAL_WINDOW_SIZE 2^31", e_set_window, COAI_H2_FLOW_CONTROL_ERROR, 1);
    conn_err("SETTINGS_MAX_FRAME_SIZE 16383", e_set_frame, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("SETTINGS_MAX_FRAME_SIZE 2^24", e_set_frame_hi, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("PING length 7", e_ping_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("PING on a stream", e_ping_stream, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("RST_STREAM on stream 0", e_rst0, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("RST_STREAM length 3", e_rst_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("RST_STREAM on an idle stream", e_rst_idle, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("GOAWAY on a stream", e_goaway_stream, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("GOAWAY length 7", e_goaway_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("PRIORITY on stream 0", e_prio0, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("PRIORITY length 4", e_prio_len, COAI_H2_FRAME_SIZE_ERROR, 1);
    conn_err("HEADERS padding too long", e_pad, COAI_H2_PROTOCOL_ERROR, 1);
    conn_err("DATA padding too long", e_data_pad, COAI_H2_PROTOCOL_ERROR, 1);
}

/* PING and SETTINGS floods (CVE-2019-9512/9515): acks the server does not read are counted;
 * one more than COAI_H2_MAX_OUTBOUND_ACK waiting is ENHANCE_YOUR_CALM. Once all are written
 * the count starts again. */
static void ack_flood(int type)
{
    static coai_h2_conn c;
    static evlog g;
    coai_buf in = {0};
    const unsigned char *p;
    size_t i, n;
    coai_result r;
    coai_h2_frame f;
    size_t used;
    conn_up(&c, NULL, NULL, 0);
    for (i = 0; i < COAI_H2_MAX_OUTBOUND_ACK; i++)
        sf(&in, type, 0, 0, type == COAI_H2_PING ? "12345678" : NULL, type == COAI_H2_PING ? 8 : 0);
    CHECK(feed(&c, &in, 0, &g) == COAI_MORE && c.error == -1);
    /* all written but the last byte: the newest ack is still waiting */
    n = coai_h2_want_write(&c, &p);
    CHECK(n == COAI_H2_MAX_OUTBOUND_ACK * (type == COAI_H2_PING ? 17u : 9u));
    coai_h2_wrote(&c, n - 1);
    sf(&in, type, 0, 0, type == COAI_H2_PING ? "12345678" : NULL, type == COAI_H2_PING ? 8 : 0);
    r = feed(&c, &in, 0, &g);
    CHECKF(r == COAI_ERR_H2 && c.error == COAI_H2_ENHANCE_YOUR_CALM, "r %d error %d", (int)r,
           c.error);
    CHECK(c.error_why && strstr(c.error_why, "flooded control frames"));
    /* what is queued: the last byte of the last ack, then the GOAWAY (no ack for it) */
    n = coai_h2_want_write(&c, &p);
    CHECK(n == 1 + 17 && coai_h2_frame_parse(p + 1, n - 1, 0xffffff, &f, &used) == COAI_OK
          && f.type == COAI_H2_GOAWAY && coai__be32(f.payload + 4) == COAI_H2_ENHANCE_YOUR_CALM);
    coai_h2_free(&c);
    /* a server that reads its acks is never cut off */
    conn_up(&c, NULL, NULL, 0);
    for (i = 0; i < 3 * COAI_H2_MAX_OUTBOUND_ACK; i++) {
        sf(&in, type, 0, 0, type == COAI_H2_PING ? "12345678" : NULL,
           type == COAI_H2_PING ? 8 : 0);
        if ((i + 1) % COAI_H2_MAX_OUTBOUND_ACK == 0) {
            CHECK(feed(&c, &in, 0, &g) == COAI_MORE);
            n = coai_h2_want_write(&c, &p);
            coai_h2_wrote(&c, n);
        }
    }
    CHECK(c.error == -1 && c.error_why == NULL);
    coai_h2_free(&c);
    coai_buf_free(&in);
}

/* Empty DATA frames in a row (CVE-2019-9518): one more than COAI_H2_MAX_EMPTY_FRAMES ends
 * the connection; a frame with bytes between them starts the count again. Each is an
 * event, so they are fed here without the event log. */
static coai_result empty_run(size_t gap, int padded)
{
    static coai_h2_conn c;
    coai_buf in = {0};
    coai_h2_event ev;
    coai_result r;
    size_t i, events = 0;
    const unsigned char *p;
    conn_up(&c, NULL, NULL, 0);
    CHECK(coai_h2_open(&c, req, 5, 1, NULL) == 1);
    coai_h2_wrote(&c, coai_h2_want_write(&c, &p));
    s_headers(&in, 1, 0, ":status: 200");
    for (i = 0; i < 2 * COAI_H2_MAX_EMPTY_FRAMES + 1; i++)
        if (padded)     /* a pad length, then only padding: no byte of data either */
            sf(&in, COAI_H2_DATA, COAI_H2_FLAG_PADDED, 1, i == gap ? "\2xpp" : "\3ppp", 4);
        else
            sf(&in, COAI_H2_DATA, 0, 1, "x", i == gap);
    CHECK(coai_h2_feed(&c, in.data, in.len) == 0);
    while ((r = coai_h2_next(&c, &ev)) == COAI_OK) events++;
    if (r == COAI_ERR_H2) {
        size_t n = coai_h2_want_write(&c, &p);
        coai_h2_frame f;
        size_t used;
        CHECK(events >= 1 + COAI_H2_MAX_EMPTY_FRAMES && c.error == COAI_H2_ENHANCE_YOUR_CALM
              && c.error_why && strstr(c.error_why, "empty DATA"));
        CHECK(n == 17 && coai_h2_frame_parse(p, n, 0xffffff, &f, &used) == COAI_OK
              && f.type == COAI_H2_GOAWAY);
    } else {
        CHECK(events == 2 + 2 * COAI_H2_MAX_EMPTY_FRAMES && c.error == -1);
    }
    coai_h2_free(&c);
    coai_buf_free(&in);
    return r;
}

/* The HPACK flood above inside a connection: HEADERS + CONTINUATION of 32 Ki re-indexing
 * literals (256 MB of copying) -> ENHANCE_YOUR_CALM, not a stream reset after the work. */
static void e_hpack_flood(coai_buf *b)
{
    coai_buf blk = {0};
    size_t i, off = 0;
    int type = COAI_H2_HEADERS;
    big_entry(&blk);
    for (i = 0; i < 32768; i++) { coai_buf_putc(&blk, 0x7e); coai_buf_putc(&blk, 0); }
    while (off < blk.len) {
        size_t k = blk.len - off > 16384 ? 16384 : blk.len - off;
        sf(b, type, off + k == blk.len ? COAI_H2_FLAG_END_HEADERS : 0, 1, blk.data + off, k);
        off += k;
        type = COAI_H2_CONTINUATION;
    }
    coai_buf_free(&blk);
}

static void test_conn_floods(void)
{
    ack_flood(COAI_H2_PING);
    ack_flood(COAI_H2_SETTINGS);
    CHECK(empty_run(2 * COAI_H2_MAX_EMPTY_FRAMES + 5, 0) == COAI_ERR_H2);   /* no gap */
    CHECK(empty_run(COAI_H2_MAX_EMPTY_FRAMES - 1, 0) == COAI_ERR_H2);    /* 1001 after it */
    CHECK(empty_run(COAI_H2_MAX_EMPTY_FRAMES, 0) == COAI_MORE);          /* 1000 either side */
    CHECK(empty_run(COAI_H2_MAX_EMPTY_FRAMES + 1, 0) == COAI_ERR_H2);    /* 1001 before it */
    CHECK(empty_run(2 * COAI_H2_MAX_EMPTY_FRAMES + 5, 1) == COAI_ERR_H2);
    CHECK(empty_run(COAI_H2_MAX_EMPTY_FRAMES, 1) == COAI_MORE);
    conn_err("HPACK index flood", e_hpack_flood, COAI_H2_ENHANCE_YOUR_CALM, 1);
}

/* The same exchange fed whole and one byte at a time gives the same events. */
/* The server's SETTINGS_MAX_HEADER_LIST_SIZE: a head over it is not sent (nothing queued, no
 * stream id used); one that fits exactly is. req[] counts 115 bytes + 5 x 32 = 275. */
static void test_conn_header_list(void)
{
    static coai_h2_conn c;
    static outlog o;
    const uint32_t small[] = { COAI_H2_SET_MAX_HEADER_LIST_SIZE, 274 };
    const uint32_t exact[] = { COAI_H2_SET_MAX_HEADER_LIST_SIZE, 275 };
    CHECK(coai_h2_header_list_size(req, 5) == 275);
    conn_up(&c, NULL, small, 1);
    CHECK(c.peer.max_header_list_size == 274);
    CHECK(coai_h2_open(&c, req, 5, 0, NULL) == COAI_ERR_INVALID);
    take(&c, &o);
    CHECK(o.n == 0 && coai_h2_active(&c) == 0);
    CHECK(coai_h2_open(&c, req, 4, 0, NULL) == 1);          /* without content-type: fits */
    coai_h2_free(&c);
    conn_up(&c, NULL, exact, 1);
    CHECK(coai_h2_open(&c, req, 5, 0, NULL) == 1);
    take(&c, &o);
    CHECK(o.n == 1 && o.f[0].type == COAI_H2_HEADERS);
    coai_h2_free(&c);
}

/* coai_h2_open_block: the block coai_hpack_encode made, opened on the connection, gives
 * the bytes coai_h2_open gives; the same bounds (list size, stream limit) with nothing sent */
static void test_conn_open_block(void)
{
    static coai_h2_conn a, b;
    static outlog oa, ob;
    const uint32_t two[] = { COAI_H2_SET_MAX_CONCURRENT_STREAMS, 2 };
    const uint32_t small[] = { COAI_H2_SET_MAX_HEADER_LIST_SIZE, 274 };
    coai_buf blk = {0};
    size_t lsz = coai_h2_header_list_size(req, 5);
    CHECK(coai_hpack_encode(&blk, req, 5) == 0 && blk.len > 0);
    conn_up(&a, NULL, two, 1);
    conn_up(&b, NULL, two, 1);
    CHECK(coai_h2_open(&a, req, 5, 0, NULL) == 1);
    CHECK(coai_h2_open_block(&b, blk.data, blk.len, lsz, 0, NULL) == 1);
    CHECK(coai_h2_open(&a, req, 5, 1, NULL) == 3);
    CHECK(coai_h2_open_block(&b, blk.data, blk.len, lsz, 1, NULL) == 3);
    CHECK(a.out.len == b.out.len && a.out.len > 0 && !memcmp(a.out.data, b.out.data, a.out.len));
    CHECK(coai_h2_stream_state(&b, 3) == COAI_H2_ST_HALF_CLOSED_LOCAL);
    take(&b, &ob);
    CHECK(ob.n == 2 && ob.f[0].type == COAI_H2_HEADERS && ob.f[0].stream == 1
          && ob.f[0].length == blk.len && !memcmp(ob.f[0].payload, blk.data, blk.len));
    CHECK(coai_h2_open_block(&b, blk.data, blk.len, lsz, 0, NULL) == 0);  /* the limit, 2 */
    take(&b, &ob);
    CHECK(ob.n == 0 && coai_h2_active(&b) == 2);
    coai_h2_free(&a);
    coai_h2_free(&b);
    conn_up(&b, NULL, small, 1);
    CHECK(coai_h2_open_block(&b, blk.data, blk.len, lsz, 0, NULL) == COAI_ERR_INVALID);
    take(&b, &oa);
    CHECK(oa.n == 0 && coai_h2_active(&b) == 0);
    coai_h2_free(&b);
    coai_buf_free(&blk);
}

static void test_conn_split(void)
{
    static coai_h2_conn a, b;
    static evlog ga, gb;
    coai_buf in = {0}, in2 = {0};
    const uint32_t set[] = { COAI_H2_SET_MAX_CONCURRENT_STREAMS, 10 };
    int k;
    conn_up(&a, NULL, set, 1);
    conn_up(&b, NULL, set, 1);
    for (k = 0; k < 3; k++) {
        CHECK(coai_h2_open(&a, req, 5, 1, NULL) == 1 + 2 * k);
        CHECK(coai_h2_open(&b, req, 5, 1, NULL) == 1 + 2 * k);
    }
    s_headers(&in, 1, 0, ":status: 200\ncontent-type: application/grpc");
    sf(&in, COAI_H2_DATA, 0, 1, "abc", 3);
    s_headers(&in, 3, COAI_H2_FLAG_END_STREAM, ":status: 404");
    sf(&in, COAI_H2_PING, 0, 0, "pingpong", 8);
    sf(&in, COAI_H2_DATA, COAI_H2_FLAG_END_STREAM, 1, "def", 3);
    s_u32(&in, COAI_H2_RST_STREAM, 5, COAI_H2_INTERNAL_ERROR);
    s_goaway(&in, 5, COAI_H2_NO_ERROR, "done");
    coai_buf_append(&in2, in.data, in.len);
    CHECK(feed(&a, &in, 0, &ga) == COAI_MORE);
    CHECK(feed(&b, &in2, 1, &gb) == COAI_MORE);
    CHECK(ga.count == 6 && strcmp(ga.text, gb.text) == 0);
    if (ga.count != 6 || strcmp(ga.text, gb.text)) fprintf(stderr, "%s---\n%s", ga.text, gb.text);
    coai_h2_free(&a);
    coai_h2_free(&b);
    coai_buf_free(&in);
    coai_buf_free(&in2);
}

int main(void)
{
    guard_init();
    test_huffman_table();
    test_huffman_roundtrip();
    test_integers();
    test_rfc_c2();
    test_rfc_c3_c4();
    test_rfc_c5_c6();
    test_hpack_errors();
    test_hpack_list_limit();
    test_hpack_table_model();
    test_hpack_encode();
    test_frames();
    test_conn_init();
    test_conn_exchange(0);
    test_conn_exchange(1);
    test_conn_recv_flow();
    test_conn_send_flow();
    test_conn_ping_goaway_rst();
    test_conn_stream_errors();
    test_conn_errors();
    test_conn_split();
    test_conn_header_list();
    test_conn_open_block();
    test_hpack_flood();
    test_conn_floods();
    TEST_END();
}
