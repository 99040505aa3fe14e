/* Fuzz target: the central trace buffer against arbitrary chunk traffic. The input is a
 * script of operations on a small buffer (so it wraps and overwrites): copy a chunk with
 * an arbitrary header and payload, patch a stored chunk, read everything, seal the buffer
 * and lend its memory (a write_into_file session's last drain). Every packet read must be
 * a valid producer packet followed by the trusted suffix; once sealed, what a read handed
 * out must hold the same bytes to the end, the buffer freed meanwhile. */
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "service/tbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct lent {
	const uint8_t *p[64];
	size_t len[64];
	uint64_t sum[64];
	size_t n;
	bool on; /* the buffer is sealed: keep what is read */
};

struct rd {
	size_t packets;
	struct lent lent;
};

static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct rd *r = ctx;
	size_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += iov[i].iov_len;
	if (sum != total || n < 2)
		abort();
	r->packets++;
	/* the slices but the suffix (the reader's scratch) lie in the ring */
	for (size_t i = 0; r->lent.on && i + 1 < n && r->lent.n < 64; i++) {
		struct lent *l = &r->lent;
		l->p[l->n] = iov[i].iov_base;
		l->len[l->n] = iov[i].iov_len;
		l->sum[l->n++] = fnv(iov[i].iov_base, iov[i].iov_len);
	}
	return 0;
}

static uint32_t take(const uint8_t **p, const uint8_t *end, size_t n)
{
	uint32_t v = 0;

	for (size_t i = 0; i < n && *p < end; i++)
		v |= (uint32_t) * (*p)++ << (8 * i);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;
	struct tbuf tb;
	struct tbuf_mem *mem = NULL;
	uint32_t next_seq = 2;
	uint64_t invalid = 0;
	struct rd rd = {0};

	if (sonde__tbuf_init(&tb, 8192, size && (data[0] & 1)) < 0)
		return 0;
	while (p < end) {
		uint8_t op = *p++;
		if (op % 3 == 0) {
			struct smb_chunk_info ci = {0};
			ci.writer_id = (uint16_t)take(&p, end, 2);
			ci.chunk_id = take(&p, end, 1);
			ci.count = (uint16_t)(take(&p, end, 2) & 1023);
			ci.flags = (uint8_t)(take(&p, end, 1) & 7);
			size_t len = take(&p, end, 2) % 3000;
			if (len > (size_t)(end - p))
				len = (size_t)(end - p);
			sonde__tbuf_copy_chunk(&tb, op >> 6, 1000, 42, &ci, p, len);
			p += len;
		} else if (op % 3 == 1) {
			uint8_t d[4];
			uint16_t writer = (uint16_t)take(&p, end, 2);
			uint32_t chunk_id = take(&p, end, 1), off = take(&p, end, 2);
			memcpy(d, &off, 4);
			sonde__tbuf_patch(&tb, op >> 6, writer, chunk_id, off, d);
			if (op & 0x20)
				sonde__tbuf_patch_done(&tb, op >> 6, writer, chunk_id);
		} else if (op & 0x80 && !mem) {
			sonde__tbuf_seal(&tb);
			if (!(mem = sonde__tbuf_lend(&tb)))
				abort();
			rd.lent.on = true;
		} else {
			sonde__tbuf_read(&tb, on_packet, &rd, &next_seq, &invalid);
		}
		/* no index entry may outlive its record: a patch through one would land in
		 * whatever record took its place */
		if (!sonde__tbuf_index_ok(&tb))
			abort();
	}
	sonde__tbuf_read(&tb, on_packet, &rd, &next_seq, &invalid);
	for (size_t i = 0; i < rd.lent.n; i++)
		if (!sonde__tbuf_holds(&tb, rd.lent.p[i], rd.lent.len[i]))
			abort();
	sonde__tbuf_free(&tb);
	for (size_t i = 0; i < rd.lent.n; i++)
		if (fnv(rd.lent.p[i], rd.lent.len[i]) != rd.lent.sum[i])
			abort();
	if (mem)
		sonde__tbuf_mem_release(mem);
	return 0;
}
