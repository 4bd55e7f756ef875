/* fz_frame.c - envelope decoder: any split of the input gives the frames of a whole-input
 * decode. Input: byte 0 picks the frame cap (bit 7 set: a small cap), bytes 1-2 seed the split
 * points, the rest is the stream. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

/* Decode s[0..n) in pieces of 1..maxpiece bytes (seeded), or whole when maxpiece == 0.
 * Frames are logged as flags | 8-byte length | payload; the final result is appended. */
static void fz__decode(const uint8_t *s, size_t n, size_t max_frame, unsigned seed,
                       size_t maxpiece, coai_buf *log)
{
    coai_frame_decoder d;
    size_t a = 0;
    coai_result res = COAI_MORE;
    memset(&d, 0, sizeof d);
    d.max_frame = max_frame;
    while (a < n) {
        size_t len = n - a, off = 0;
        uint8_t *piece;
        if (maxpiece) {
            seed = seed * 1103515245u + 12345u;
            len = 1 + (seed >> 16) % maxpiece;
            if (len > n - a) len = n - a;
        }
        piece = (uint8_t *)malloc(len);   /* exact size: ASan sees any read past the piece */
        if (!piece) abort();
        memcpy(piece, s + a, len);
        for (;;) {
            size_t used = 0, i;
            coai_frame f;
            unsigned char lenb[8];
            res = coai_frame_feed(&d, piece + off, len - off, &used, &f);
            if (used > len - off) abort();
            off += used;
            if (res != COAI_OK) break;
            if (f.len > (max_frame ? max_frame : COAI_MAX_FRAME) || !f.data) abort();
            if (f.flags != 0 && f.flags != 0x80 && f.flags != 0x02) abort();
            for (i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)f.len >> (56 - 8 * i));
            coai_buf_putc(log, (int)f.flags);
            coai_buf_append(log, lenb, 8);
            coai_buf_append(log, f.data, f.len);
        }
        free(piece);
        if (res < 0) break;
        if (off != len) abort();          /* COAI_MORE must mean "all consumed" */
        a += len;
    }
    if (res >= 0) res = coai_frame_finish(&d);
    coai_buf_printf(log, "|end %d", (int)res);
    coai_frame_decoder_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_buf whole = { 0 }, split = { 0 };
    size_t max_frame, maxpiece;
    unsigned seed;
    if (size < 3) return 0;
    max_frame = (data[0] & 0x80) ? (size_t)(data[0] & 0x7f) * 3 + 1 : 0;
    seed = (unsigned)data[1] | (unsigned)data[2] << 8;
    maxpiece = 1 + data[2] % 16;
    fz__decode(data + 3, size - 3, max_frame, 0, 0, &whole);
    fz__decode(data + 3, size - 3, max_frame, seed, maxpiece, &split);
    if (whole.err || split.err) abort();
    if (whole.len != split.len || memcmp(whole.data, split.data, whole.len) != 0) abort();
    coai_buf_reset(&split);
    fz__decode(data + 3, size - 3, max_frame, 0, 1, &split);     /* byte by byte */
    if (whole.len != split.len || memcmp(whole.data, split.data, whole.len) != 0) abort();
    coai_buf_free(&whole);
    coai_buf_free(&split);
    return 0;
}
