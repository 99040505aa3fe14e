/* Fuzz target: the producer packet validator (sonde__tbuf_packet_valid, perfetto-wire.md §4.8 and
 * §8) on arbitrary packet bytes, checked against a reference written here from the spec's
 * rules alone:
 *   - the packet is a sequence of whole top-level fields: a tag varint below 2^32 (field
 *     numbers 1..2^29-1), wire type 0, 1, 2 or 5, varints of at most 10 bytes that fit
 *     64 bits, lengths at most 0x0FFFFFFF that stay inside the packet;
 *   - no field is one of the reserved, service-only TracePacket fields.
 * Both must agree in both directions. The same bytes then go through a central buffer as
 * a packet fragmented over 1 to 3 chunks: a valid packet comes out byte for byte, followed
 * by the trusted suffix; an invalid one is dropped and counted, never emitted.
 *
 * Input: byte 0 the number of chunks (mod 3, + 1), byte 1 and 2 the split points (scaled
 * to the packet length), then the packet.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/pb.h"
#include "service/tbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint32_t reserved_fields[] = {
	3,  10, 33, 35,	 50,  36,  /* v14: trusted_uid ... synchronization_marker */
	79, 98, 69, 124, 125, 133, /* HEAD: trusted_pid ... zstd_compressed_packets */
};

/* LEB128 of at most 10 bytes whose value fits 64 bits. Returns bytes read, 0 if bad. */
static size_t ref_varint(const uint8_t *p, size_t n, uint64_t *v)
{
	unsigned __int128 acc = 0;

	for (size_t i = 0; i < n && i < 10; i++) {
		acc |= (unsigned __int128)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			if (acc >> 64)
				return 0;
			*v = (uint64_t)acc;
			return i + 1;
		}
	}
	return 0;
}

static bool ref_valid(const uint8_t *p, size_t n)
{
	size_t i = 0, k;
	uint64_t tag, v;

	while (i < n) {
		if (!(k = ref_varint(p + i, n - i, &tag)) || tag >= (1ull << 32) || tag >> 3 == 0)
			return false;
		i += k;
		for (size_t r = 0; r < sizeof(reserved_fields) / sizeof(reserved_fields[0]); r++)
			if (tag >> 3 == reserved_fields[r])
				return false;
		switch (tag & 7) {
		case 0:
			if (!(k = ref_varint(p + i, n - i, &v)))
				return false;
			i += k;
			break;
		case 1:
		case 5:
			k = (tag & 7) == 1 ? 8 : 4;
			if (n - i < k)
				return false;
			i += k;
			break;
		case 2:
			if (!(k = ref_varint(p + i, n - i, &v)) || v > 0x0FFFFFFF || v > n - i - k)
				return false;
			i += k + (size_t)v;
			break;
		default:
			return false;
		}
	}
	return true;
}

struct got {
	const uint8_t *want;
	size_t want_len;
	int packets;
	struct buf b;
};

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct got *g = ctx;
	size_t body = 0;

	if (n < 2)
		abort();
	sonde__buf_reset(&g->b);
	for (size_t i = 0; i + 1 < n; i++) {
		sonde__buf_append(&g->b, iov[i].iov_base, iov[i].iov_len);
		body += iov[i].iov_len;
	}
	if (body + iov[n - 1].iov_len != total || body != g->want_len ||
	    memcmp(g->b.data, g->want, body) != 0)
		abort(); /* not the packet written, or not whole */
	g->packets++;
	return 0;
}

/* Writes piece i of n of the packet as a one-fragment chunk with continuation flags. */
static void put_piece(struct tbuf *tb, const uint8_t *p, size_t len, unsigned i, unsigned n)
{
	uint8_t *payload = malloc(len + 4);
	struct smb_chunk_info ci = {.chunk_id = 100 + i, .writer_id = 1, .count = 1};

	if (!payload)
		return;
	if (i > 0)
		ci.flags |= SMB_FLAG_FIRST_PACKET_CONTINUES;
	if (i + 1 < n)
		ci.flags |= SMB_FLAG_LAST_PACKET_CONTINUES;
	sonde__pb_write_redundant_len(payload, (uint32_t)len);
	memcpy(payload + 4, p, len);
	sonde__tbuf_copy_chunk(tb, 1, 1000, 42, &ci, payload, len + 4);
	free(payload);
}

static void through_buffer(const uint8_t *split, const uint8_t *pkt, size_t len, bool valid)
{
	unsigned n = split[0] % 3 + 1;
	size_t cut[4] = {0, len * split[1] / 256, len * split[2] / 256, len};
	struct got g = {pkt, len, 0, BUF_INIT};
	struct tbuf tb;
	uint32_t next_seq = 2;
	uint64_t invalid = 0;

	if (cut[2] < cut[1] || n < 3)
		cut[2] = cut[1];
	cut[n] = len;
	if (sonde__tbuf_init(&tb, 1 << 15, false) < 0)
		return;
	for (unsigned i = 0; i < n; i++)
		put_piece(&tb, pkt + cut[i], cut[i + 1] - cut[i], i, n);
	sonde__tbuf_read(&tb, on_packet, &g, &next_seq, &invalid);
	/* an empty packet is skipped without counting */
	if (len && (valid ? g.packets != 1 || invalid : g.packets || invalid != 1))
		abort();
	sonde__tbuf_free(&tb);
	sonde__buf_free(&g.b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	const uint8_t *pkt = data + 3;
	size_t len = size - 3;
	bool valid = sonde__tbuf_packet_valid(pkt, len);

	if (valid != ref_valid(pkt, len))
		abort();
	if (len <= 3 * 8000)
		through_buffer(data, pkt, len, valid);
	return 0;
}
