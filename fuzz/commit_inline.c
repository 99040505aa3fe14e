/* Fuzz target: the service's real CommitData handler for a producer under shared-memory
 * emulation (a remote one), whose chunks come inline in the request.
 *
 * The input is a script: 'I' commits inline chunks (arbitrary headers, sizes up to past a
 * page, payloads of fragments or raw bytes, any target buffer, mixed with SMB-style moves
 * that name pages), 'P' patches, 'R' commits raw request bytes, 'W' registers a writer,
 * 'D' reads the central buffers.
 *
 * Invariants checked (abort on violation), besides ASan/UBSan's: every packet read is a
 * valid producer packet followed by the trusted suffix, which carries a trusted sequence id
 * and no trusted_uid (the producer's uid is unknown); nothing reaches buffer 2, which the
 * producer may not write; the request buffer is never written.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "service/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { PAGE = 4096, NPAGES = 4 };

struct reader {
	const uint8_t *p, *end;
};

static struct svc svc;
static struct conn conn;
static struct tbuf tbufs[2]; /* BufferIDs 1 (this producer's) and 2 (someone else's) */

static uint32_t take(struct reader *r, size_t n)
{
	uint32_t v = 0;

	for (size_t i = 0; i < n && r->p < r->end; i++)
		v = v << 8 | *r->p++;
	return v;
}

static struct reader take_bytes(struct reader *r, size_t n)
{
	struct reader b = {r->p, r->p};
	size_t left = (size_t)(r->end - r->p);

	b.end = b.p + (n < left ? n : left);
	r->p = b.end;
	return b;
}

static void svc_setup(void)
{
	sonde__bufid_free(&svc);
	memset(&svc, 0, sizeof(svc));
	memset(&conn, 0, sizeof(conn));
	uint16_t id;
	if (sonde__bufid_alloc(&svc, &tbufs[0], &id) < 0 || id != 1 ||
	    sonde__bufid_alloc(&svc, &tbufs[1], &id) < 0 || id != 2)
		abort();
	conn.id = 5;
	conn.remote = true;
	conn.is_producer = true;
	conn.ch.fd = -1;
	conn.ch.peer_uid = (uid_t)-1;
	conn.p.initialized = true;
	conn.p.emulated = true;
	conn.p.id = 7;
	conn.p.smb_fd = -1;
	conn.p.page_size = PAGE;
	conn.p.num_pages = NPAGES;
	sonde__producer_allow_buffer(&conn, 1);
}

static void run_commit(const struct buf *args)
{
	struct req r = {.c = &conn, .id = 1, .drop_reply = true, .fd = -1};
	struct buf copy = BUF_INIT;

	sonde__buf_append(&copy, args->data, args->len);
	r.args = args->data ? args->data : (const uint8_t *)"";
	r.args_len = args->len;
	sonde__producer_dispatch(&svc, &r, PF_PRODUCER_COMMIT_DATA);
	if (args->len && memcmp(copy.data, args->data, args->len) != 0)
		abort();
	sonde__buf_free(&copy);
}

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct buf *b = ctx;
	size_t sum = 0, body = 0;

	if (n < 2)
		abort();
	sonde__buf_reset(b);
	for (size_t i = 0; i < n; i++) {
		sonde__buf_append(b, iov[i].iov_base, iov[i].iov_len);
		sum += iov[i].iov_len;
		if (i + 1 < n)
			body += iov[i].iov_len;
	}
	if (sum != total || buf_error(b) < 0 || !sonde__tbuf_packet_valid(b->data, body))
		abort();
	struct pb_reader r = pb_reader_init(b->data, b->len);
	struct pb_field f;
	uint64_t seq = 0;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_PACKET_TRUSTED_UID)
			abort(); /* no uid is known for this producer */
		if (f.num == PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID)
			seq = f.wire == PB_VARINT ? f.u : 0;
	}
	if (r.p != r.end || seq < 2)
		abort();
	return 0;
}

static void read_all(uint32_t *next_seq)
{
	struct buf b = BUF_INIT;
	uint64_t invalid = 0;

	for (int i = 0; i < 2; i++)
		sonde__tbuf_read(&tbufs[i], on_packet, &b, next_seq, &invalid);
	sonde__buf_free(&b);
}

/* One inline chunk: header, then fragments (varint length + bytes) or raw bytes. */
static void put_chunk(struct reader *in, struct buf *a)
{
	uint8_t ch[PAGE + 64];
	struct buf c = {.data = ch, .cap = sizeof(ch)};
	struct smb_chunk_hdr h = {.chunk_id = take(in, 1) % 8,
				  .writer_id = (uint16_t)(take(in, 1) % 4),
				  .packets = 0};
	unsigned nfrag = take(in, 1) % 5, flags = take(in, 1) & 3;
	bool raw = take(in, 1) & 1;

	c.len = sizeof(h);
	if (raw) {
		struct reader b = take_bytes(in, take(in, 2) % sizeof(ch));
		size_t n = (size_t)(b.end - b.p);
		memcpy(ch + c.len, b.p, n < sizeof(ch) - c.len ? n : sizeof(ch) - c.len);
		c.len += n < sizeof(ch) - c.len ? n : sizeof(ch) - c.len;
	} else {
		for (unsigned i = 0; i < nfrag && c.len + 8 < sizeof(ch); i++) {
			struct reader b = take_bytes(in, take(in, 1));
			size_t n = (size_t)(b.end - b.p);
			if (c.len + 2 + n > sizeof(ch))
				break;
			ch[c.len++] = (uint8_t)(n | 0x80); /* a 2-byte varint, possibly redundant */
			ch[c.len++] = (uint8_t)(n >> 7);
			memcpy(ch + c.len, b.p, n);
			c.len += n;
		}
	}
	h.packets = smb_packets_word(nfrag, flags);
	memcpy(ch, &h, sizeof(h));
	size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
	sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_PAGE, take(in, 1) % (NPAGES + 1));
	sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_CHUNK, take(in, 1) % 16);
	sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, take(in, 1) % 4);
	if (take(in, 1) % 8) /* and sometimes no data: a move an emulated producer cannot make */
		sonde__pb_put_bytes(a, PF_CHUNKS_TO_MOVE_DATA, ch, c.len);
	sonde__pb_end(a, m);
}

static void op_patches(struct reader *in, struct buf *a)
{
	size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_TARGET_BUFFER, take(in, 1) % 4);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_WRITER_ID, take(in, 1) % 4);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_CHUNK_ID, take(in, 1) % 8);
	for (unsigned k = take(in, 1) % 4; k--;) {
		size_t pm = sonde__pb_begin(a, PF_CHUNK_TO_PATCH_PATCHES);
		sonde__pb_put_varint(a, PF_PATCH_OFFSET, take(in, 2) % (PAGE + 8));
		struct reader d = take_bytes(in, take(in, 1) % 6);
		sonde__pb_put_bytes(a, PF_PATCH_DATA, d.p, (size_t)(d.end - d.p));
		sonde__pb_end(a, pm);
	}
	sonde__pb_put_bool(a, PF_CHUNK_TO_PATCH_HAS_MORE_PATCHES, take(in, 1) & 1);
	sonde__pb_end(a, m);
}

static void run_script(struct reader *in)
{
	struct buf a = BUF_INIT;
	uint32_t next_seq = 2;

	while (in->p < in->end) {
		sonde__buf_reset(&a);
		switch (take(in, 1)) {
		case 'I':
			for (unsigned n = take(in, 1) % 8 + 1; n--;)
				put_chunk(in, &a);
			if (take(in, 1) & 1)
				op_patches(in, &a);
			run_commit(&a);
			break;
		case 'P':
			op_patches(in, &a);
			run_commit(&a);
			break;
		case 'R': {
			struct reader b = take_bytes(in, take(in, 2));
			sonde__buf_append(&a, b.p, (size_t)(b.end - b.p));
			run_commit(&a);
			break;
		}
		case 'W': {
			uint16_t w = (uint16_t)(take(in, 1) % 4);
			sonde__producer_bind_writer(&conn, w, (uint16_t)(take(in, 1) % 4));
			break;
		}
		case 'D':
			read_all(&next_seq);
			break;
		default:
			break;
		}
	}
	read_all(&next_seq);
	if (tbufs[1].st.chunks_written)
		abort(); /* buffer 2 is not this producer's */
	sonde__buf_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader in = {data, data + size};
	bool discard = take(&in, 1) & 1;

	if (sonde__tbuf_init(&tbufs[0], 16384, discard) < 0)
		return 0;
	if (sonde__tbuf_init(&tbufs[1], 16384, false) < 0) {
		sonde__tbuf_free(&tbufs[0]);
		return 0;
	}
	svc_setup();
	run_script(&in);
	free(conn.p.allowed);
	sonde__tbuf_free(&tbufs[0]);
	sonde__tbuf_free(&tbufs[1]);
	return 0;
}
