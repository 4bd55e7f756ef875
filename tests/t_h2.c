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

#define ARENA (1024u * 1024u)
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

static const char *const req1 = ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com";
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
    TEST_END();
}
