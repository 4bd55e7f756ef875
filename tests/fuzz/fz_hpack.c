/* fz_hpack.c - libFuzzer target for the HPACK decoder (RFC 7541). Input: two option bytes
 * (the table size we allow, the header list limit), then header blocks, each as a 2-byte
 * big-endian length and its bytes, all decoded by one decoder so the dynamic table carries
 * over. Checked: results are one of the documented codes, a COMPRESSION_ERROR is sticky,
 * the table stays within its bounds and its size matches its entries, decoded lists respect
 * the limit, decoding is deterministic (a copy of the decoder decodes the same block the
 * same way), and a list our encoder accepts decodes back to itself. Any violation aborts. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"
#include <stdlib.h>
#include <string.h>

#define FZ_ASSERT(c) do { if (!(c)) abort(); } while (0)

static int fz_same(const coai_hpack_list *a, const coai_hpack_list *b)
{
    size_t i;
    if (a->n != b->n || a->size != b->size) return 0;
    for (i = 0; i < a->n; i++) {
        if (a->v[i].name.len != b->v[i].name.len || a->v[i].value.len != b->v[i].value.len)
            return 0;
        if (a->v[i].name.len && memcmp(a->v[i].name.ptr, b->v[i].name.ptr, a->v[i].name.len))
            return 0;
        if (a->v[i].value.len
            && memcmp(a->v[i].value.ptr, b->v[i].value.ptr, a->v[i].value.len))
            return 0;
    }
    return 1;
}

static void fz_table(const coai_hpack_decoder *d)
{
    size_t i, sum = 0;
    FZ_ASSERT(d->cap <= d->max_size && d->max_size <= COAI_HPACK_TABLE);
    FZ_ASSERT(d->size <= d->cap && d->count <= COAI_HPACK_TABLE / 32);
    for (i = 0; i < d->count; i++) {
        coai_str n, v;
        FZ_ASSERT(coai__hpack_get(d, (uint32_t)(62 + i), &n, &v) == 0);
        FZ_ASSERT((const unsigned char *)v.ptr + v.len <= d->mem + sizeof d->mem);
        sum += n.len + v.len + 32;
    }
    FZ_ASSERT(sum == d->size);
    {
        coai_str n, v;
        FZ_ASSERT(coai__hpack_get(d, (uint32_t)(62 + d->count), &n, &v) == COAI_ERR_H2);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static coai_hpack_decoder d, copy, fresh;
    static coai_hpack_list l, l2, l3;
    coai_buf enc = {0};
    size_t off = 2;
    int failed = 0;
    if (size < 2) return 0;
    memset(&d, 0, sizeof d);
    d.max_size = data[0] ? (size_t)data[0] * 16 : 0;
    d.max_list = data[1] ? (size_t)data[1] * 64 : 0;
    while (off < size) {
        size_t n = size - off;
        const unsigned char *p;
        unsigned char *blk;
        coai_result r, r2;
        size_t i, sum = 0;
        if (n >= 2) {
            size_t want = (size_t)data[off] << 8 | data[off + 1];
            off += 2;
            n = size - off;
            if (want < n) n = want;
        } else {
            off = size;
            n = 0;
        }
        p = data + off;
        off += n;
        /* an exactly sized copy, so ASan sees over-reads */
        blk = malloc(n ? n : 1);
        if (!blk) break;
        if (n) memcpy(blk, p, n);
        memcpy(&copy, &d, sizeof d);
        r = coai_hpack_decode(&d, blk, n, &l);
        FZ_ASSERT(r == COAI_OK || r == COAI_ERR_H2 || r == COAI_ERR_TOO_BIG);
        if (failed) FZ_ASSERT(r == COAI_ERR_H2);
        if (r == COAI_ERR_H2) { failed = 1; FZ_ASSERT(d.err && l.n == 0); }
        fz_table(&d);
        r2 = coai_hpack_decode(&copy, blk, n, &l2);
        FZ_ASSERT(r2 == r && copy.size == d.size && copy.count == d.count);
        if (r == COAI_OK) {
            FZ_ASSERT(fz_same(&l, &l2));
            FZ_ASSERT(l.size <= d.max_list);
            for (i = 0; i < l.n; i++) sum += l.v[i].name.len + l.v[i].value.len + 32;
            FZ_ASSERT(sum == l.size);
            /* what our encoder accepts decodes back to the same list */
            coai_buf_reset(&enc);
            if (coai_hpack_encode(&enc, l.v, l.n) == 0) {
                memset(&fresh, 0, sizeof fresh);
                fresh.max_list = (size_t)-1 / 2;
                FZ_ASSERT(coai_hpack_decode(&fresh, enc.data ? enc.data : blk, enc.len, &l3)
                          == COAI_OK);
                FZ_ASSERT(fz_same(&l, &l3) && fresh.count == 0);
            }
        } else {
            FZ_ASSERT(l.n == 0);
        }
        free(blk);
    }
    coai_buf_free(&enc);
    return 0;
}
