/* Fuzz target: arbitrary bytes as an IPC byte stream. The channel's reassembly splits them
 * into frames (rejecting oversize headers), the count of complete frames waiting agrees
 * with it, each payload is decoded as an IPCFrame, bind
 * replies have their method lists walked, and every decoded frame is re-encoded and
 * decoded again to the same values. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const struct ipc_frame *f)
{
	struct buf b = BUF_INIT;
	struct ipc_frame g = *f, h;

	/* method names cannot be re-encoded from the decoded form; drop them */
	g.n_methods = 0;
	if (g.msg == IPC_MSG_INVOKE_METHOD && !g.data)
		g.data_len = 0;
	if (sonde__ipc_frame_encode(&b, &g) == 0) {
		if (sonde__ipc_frame_decode(b.data + IPC_HEADER_SIZE, b.len - IPC_HEADER_SIZE, &h) != 0)
			abort();
		if (h.request_id != g.request_id || h.msg != g.msg)
			abort();
		if (g.msg == IPC_MSG_INVOKE_METHOD &&
		    (h.method_id != g.method_id || h.data_len != g.data_len ||
		     (g.data_len && memcmp(h.data, g.data, g.data_len) != 0)))
			abort();
	}
	sonde__buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_chan c;
	struct ipc_frame f;
	struct ipc_method m;
	int fd;

	memset(&c, 0, sizeof(c));
	c.fd = -1;
	sonde__buf_append(&c.rx, data, size);
	for (;;) {
		/* the service's count of waiting requests (host.c) walks the same headers: a
		 * frame handed out was one it counted, and the count never exceeds the bytes */
		size_t q = sonde__ipc_chan_queued(&c, SIZE_MAX);
		if (q > (c.rx.len - c.rx_off) / IPC_HEADER_SIZE)
			abort();
		int n = sonde__ipc_chan_next(&c, &f, &fd);
		if (n > 0 && q == 0)
			abort();
		if (n <= 0)
			break;
		size_t it = 0;
		while (sonde__ipc_methods_next(&f, &it, &m) > 0)
			;
		roundtrip(&f);
	}
	sonde__ipc_chan_close(&c);
	return 0;
}
