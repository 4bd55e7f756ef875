/* fz_qr.c - any bytes -> QR encode + render; sizes and output must stay in bounds. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_qr q;
    coai_buf b = { 0 };
    if (coai_qr_encode(&q, data, size) != 0) {
        if (size <= 213) abort();       /* everything up to 213 bytes fits */
        return 0;
    }
    if (size > 213 || q.version < 1 || q.version > 10 || q.size != 17 + 4 * q.version) abort();
    if (q.mask < 0 || q.mask > 7) abort();
    if (coai_qr_render_utf8(&q, &b) != 0) abort();
    if (coai_utf8_valid_prefix((const char *)b.data, b.len) != b.len) abort();
    coai_buf_free(&b);
    return 0;
}
