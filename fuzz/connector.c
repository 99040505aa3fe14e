/* Fuzz target: arbitrary bytes as a connector request and as a connector reply (the two
 * parsers of src/ipc/cxmsg.c, one run by sonded on what a supervisor sends, one by the
 * client library on what the service answers). A decoded message is re-encoded and must
 * decode to the same values. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/cxmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *data, size_t size)
{
	struct cx_request q, q2;
	struct buf b = BUF_INIT;

	if (sonde__cx_request_decode(data, size, &q) < 0)
		return;
	sonde__cx_request_encode(&q, &b);
	if (buf_error(&b) == 0) {
		if (sonde__cx_request_decode(b.data, b.len, &q2) < 0)
			abort();
		if (q2.id != q.id || q2.kind != q.kind || q2.buffer != q.buffer ||
		    q2.page_size != q.page_size || q2.buffer_size != q.buffer_size ||
		    q2.has_uid != q.has_uid || q2.uid != q.uid || q2.has_gid != q.has_gid ||
		    q2.gid != q.gid)
			abort();
	}
	sonde__buf_free(&b);
}

static void reply(const uint8_t *data, size_t size)
{
	struct cx_reply r, r2;
	struct buf b = BUF_INIT;

	if (sonde__cx_reply_decode(data, size, &r) < 0)
		return;
	if (strlen(r.message) >= sizeof(r.message))
		abort();
	sonde__cx_reply_encode(&r, &b);
	if (buf_error(&b) == 0) {
		if (sonde__cx_reply_decode(b.data, b.len, &r2) < 0)
			abort();
		/* a message with an embedded NUL re-encodes shorter: compare as strings */
		if (r2.id != r.id || r2.status != r.status || strcmp(r2.message, r.message) ||
		    r2.page_size != r.page_size || r2.buffer_size != r.buffer_size)
			abort();
	}
	sonde__buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	request(data, size);
	reply(data, size);
	return 0;
}
