/* fz_dataurl.c - data: URLs from any bytes, through coai_data_url_parse and the whole
 * coai_image_from_url path (whitespace skipping, base64, caps, sniffing, uuid).
 * Properties: views stay inside the input; a success always has a known image type, a length
 * within the cap and a 36-character uuid; a failure fills an error with a 400/413/500 status
 * and leaves no data behind. The first input byte picks the cap (so 413 is reached). */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_str url, type, payload;
    coai_image im;
    coai_error e;
    size_t cap;
    int rc;
    if (size < 1) return 0;
    cap = (size_t)data[0] * 16 + 1;
    url.ptr = (const char *)data + 1;
    url.len = size - 1;
    if (coai_data_url_parse(url, &type, &payload) == 0) {
        if (type.ptr < url.ptr || type.ptr + type.len > url.ptr + url.len) abort();
        if (payload.ptr < url.ptr || payload.ptr + payload.len != url.ptr + url.len) abort();
        if (type.ptr + type.len > payload.ptr) abort();
    }
    memset(&e, 0, sizeof e);
    rc = coai_image_from_url(&im, url, cap, "messages[0].content[0].image_url.url", &e);
    if (rc == 0) {
        if (!im.mime || !im.data || im.len == 0 || im.len > cap || strlen(im.uuid) != 36) abort();
        if (coai_image_sniff(im.data, im.len, NULL, NULL) != im.mime) abort();
        {
            coai_buf b = { 0 };
            if (coai_encode_selected_images(&b, &im, 1) != COAI_OK && !b.err) abort();
            coai_buf_free(&b);
        }
        coai_image_free(&im);
    } else {
        if (im.data || (e.status != 400 && e.status != 413 && e.status != 500)) abort();
        if (coai_utf8_valid_prefix(e.message, strlen(e.message)) != strlen(e.message)) abort();
    }
    return 0;
}
