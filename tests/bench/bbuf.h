/* bbuf.h: the byte buffer the bench's C programs share (upstream.c, the floors): bytes are
 * appended at len and consumed from off; room is made by moving the unread part down before
 * the buffer grows. Bench only. */
#ifndef COAI_BENCH_BBUF_H
#define COAI_BENCH_BBUF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bbuf {
    unsigned char *p;
    size_t len, off, cap;
};

static void bbuf_add(struct bbuf *b, const void *p, size_t n)
{
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->len + n > b->cap) {
        if (b->off) {
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            size_t nc = b->cap ? b->cap : 512;
            while (nc < b->len + n) nc *= 2;
            b->p = realloc(b->p, nc);
            if (!b->p) {
                fprintf(stderr, "bench: out of memory\n");
                exit(2);
            }
            b->cap = nc;
        }
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static size_t bbuf_avail(const struct bbuf *b) { return b->len - b->off; }

#endif
