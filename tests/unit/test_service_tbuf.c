/* The central trace buffer on its own: re-commits of a scraped chunk return only new
 * fragments, packets carry the trusted suffix, reserved fields are dropped. */
#include "../test.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/tbuf.h"

struct got {
	int n;
	char last[64];
	uint64_t seq;
};

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct got *g = ctx;
	struct pb_reader r = pb_reader_init(iov[0].iov_base, iov[0].iov_len);
	struct pb_field f;

	(void)total;
	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == 900)
			snprintf(g->last, sizeof(g->last), "%.*s", (int)f.len, f.ptr);
	r = pb_reader_init(iov[n - 1].iov_base, iov[n - 1].iov_len); /* the suffix */
	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID)
			g->seq = f.u;
	g->n++;
	return 0;
}

/* A chunk payload with packets tagged names[0..n). */
static size_t payload(uint8_t *out, const char *const *names, size_t n, uint32_t extra_field)
{
	size_t off = 0;

	for (size_t i = 0; i < n; i++) {
		struct buf b = BUF_INIT;
		sonde__pb_put_string(&b, 900, names[i]);
		if (extra_field)
			sonde__pb_put_varint(&b, extra_field, 1);
		sonde__pb_write_redundant_len(out + off, (uint32_t)b.len);
		memcpy(out + off + 4, b.data, b.len);
		off += 4 + b.len;
		sonde__buf_free(&b);
	}
	return off;
}

TEST(service_tbuf_recommit_returns_only_new_fragments)
{
	static const char *const names[] = {"p0", "p1", "p2"};
	uint8_t chunk[1012] = {0};
	struct smb_chunk_info ci = {.chunk_id = 5, .writer_id = 3, .count = 1};
	struct tbuf tb;
	struct got g = {0};
	uint32_t seq = 2;
	uint64_t invalid = 0;

	ASSERT_OK(sonde__tbuf_init(&tb, 65536, false));
	payload(chunk, names, 3, 0);
	sonde__tbuf_copy_chunk(&tb, 1, 0, 10, &ci, chunk, sizeof(chunk)); /* scraped: 1 fragment */
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, 1);
	ASSERT_STR_EQ(g.last, "p0");
	ASSERT_UINT(g.seq, ==, 2);
	ci.count = 3; /* the real commit of the same chunk, after the copy was consumed */
	sonde__tbuf_copy_chunk(&tb, 1, 0, 10, &ci, chunk, sizeof(chunk));
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, 3);
	ASSERT_STR_EQ(g.last, "p2");
	ci.count = 2; /* shrinking is a violation and changes nothing */
	sonde__tbuf_copy_chunk(&tb, 1, 0, 10, &ci, chunk, sizeof(chunk));
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, 3);
	ASSERT_UINT(invalid, ==, 0);
	sonde__tbuf_free(&tb);
}

TEST(service_tbuf_drops_packets_with_reserved_fields)
{
	static const char *const names[] = {"forged"};
	uint8_t chunk[1012] = {0};
	struct smb_chunk_info ci = {.chunk_id = 0, .writer_id = 1, .count = 1};
	struct tbuf tb;
	struct got g = {0};
	uint32_t seq = 2;
	uint64_t invalid = 0;

	ASSERT_OK(sonde__tbuf_init(&tb, 65536, false));
	payload(chunk, names, 1, PF_PACKET_TRUSTED_UID);
	sonde__tbuf_copy_chunk(&tb, 1, 0, 10, &ci, chunk, sizeof(chunk));
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, 0);
	ASSERT_UINT(invalid, ==, 1);
	ASSERT(!sonde__tbuf_packet_valid((const uint8_t *)"\x50\x01", 2)); /* sequence id */
	ASSERT(sonde__tbuf_packet_valid((const uint8_t *)"\x40\x01", 2));  /* timestamp */
	ASSERT(!sonde__tbuf_packet_valid((const uint8_t *)"\x42", 1));	    /* truncated */
	ASSERT(sonde__tbuf_packet_valid(NULL, 0)); /* empty, with no storage */
	sonde__tbuf_free(&tb);
}

/* Commits bytes [from, to) of pkt as chunk `id` of writer 1, one fragment continuing from
 * the chunk before unless it is the first piece, and into the next unless the last. */
static void commit_piece(struct tbuf *tb, const uint8_t *pkt, size_t from, size_t to, size_t len,
			 uint32_t id)
{
	uint8_t chunk[64] = {0};
	struct smb_chunk_info ci = {.chunk_id = id, .writer_id = 1, .count = 1};

	if (from > 0)
		ci.flags |= SMB_FLAG_FIRST_PACKET_CONTINUES;
	if (to < len)
		ci.flags |= SMB_FLAG_LAST_PACKET_CONTINUES;
	sonde__pb_write_redundant_len(chunk, (uint32_t)(to - from));
	memcpy(chunk + 4, pkt + from, to - from);
	sonde__tbuf_copy_chunk(tb, 1, 0, 10, &ci, chunk, 4 + (to - from));
}

struct bytes {
	struct buf b;
	int n;
};

static int on_packet_bytes(void *ctx, const struct iovec *iov, size_t n, size_t total);

TEST(service_tbuf_checks_a_packet_split_inside_its_fields)
{
	/* field 80 = 300, field 900 = "abcdef", then in the forged one the service's
	 * trusted_pid (79), whose tag takes two bytes: every split into three chunks, inside a
	 * tag, a value or a length, reads the valid packet whole and drops the forged one */
	static const uint8_t valid[] = {0x80, 0x05, 0xAC, 0x02, 0xA2, 0x38, 6,
					'a',  'b',  'c',  'd',  'e',  'f'};
	uint8_t forged[sizeof(valid) + 3];

	memcpy(forged, valid, sizeof(valid));
	memcpy(forged + sizeof(valid), "\xF8\x04\x01", 3);
	for (int f = 0; f < 2; f++) {
		const uint8_t *pkt = f ? forged : valid;
		size_t len = f ? sizeof(forged) : sizeof(valid);
		for (size_t a = 1; a < len; a++)
			for (size_t b = a + 1; b < len; b++) {
				struct tbuf tb;
				struct bytes o = {BUF_INIT, 0};
				uint32_t seq = 2;
				uint64_t invalid = 0;
				ASSERT_OK(sonde__tbuf_init(&tb, 65536, false));
				commit_piece(&tb, pkt, 0, a, len, 7);
				commit_piece(&tb, pkt, a, b, len, 8);
				commit_piece(&tb, pkt, b, len, len, 9);
				ASSERT_INT(sonde__tbuf_read(&tb, on_packet_bytes, &o, &seq, &invalid),
					   ==, 0);
				ASSERT_INT(o.n, ==, f ? 0 : 1);
				ASSERT_UINT(invalid, ==, f ? 1 : 0);
				if (!f)
					ASSERT(o.b.len > len && !memcmp(o.b.data, pkt, len));
				sonde__buf_free(&o.b);
				sonde__tbuf_free(&tb);
			}
	}
}

/* Commits one chunk of writer 1 holding the packet "c<id>", flagged as needing a patch. */
static void commit_named(struct tbuf *tb, uint32_t chunk_id, uint8_t flags)
{
	char name[16];
	const char *names[] = {name};
	uint8_t chunk[1008] = {0};
	struct smb_chunk_info ci = {
		.chunk_id = chunk_id, .writer_id = 1, .count = 1, .flags = flags};

	snprintf(name, sizeof(name), "c%u", chunk_id);
	payload(chunk, names, 1, 0);
	sonde__tbuf_copy_chunk(tb, 1, 0, 10, &ci, chunk, sizeof(chunk));
}

/* Patches the 4-byte fragment header of a stored chunk with what it holds already. */
static int patch_same(struct tbuf *tb, uint32_t chunk_id)
{
	uint8_t chunk[1008] = {0};
	char name[16];
	const char *names[] = {name};

	snprintf(name, sizeof(name), "c%u", chunk_id);
	payload(chunk, names, 1, 0);
	return sonde__tbuf_patch(tb, 1, 1, chunk_id, 0, chunk);
}

TEST(service_tbuf_finds_chunks_whatever_their_ids)
{
	/* consecutive ids across the 2^32 wrap, one far ahead, one behind, and back */
	static const uint32_t ids[] = {UINT32_MAX - 1, UINT32_MAX, 0, 1, 1000, 500, 2, 40, 3};
	enum { N = sizeof(ids) / sizeof(ids[0]) };
	struct tbuf tb, cl;
	struct got g = {0};
	uint32_t seq = 1;
	uint64_t invalid = 0;

	ASSERT_OK(sonde__tbuf_init(&tb, 1 << 20, false));
	for (int i = 0; i < N; i++)
		commit_named(&tb, ids[i], SMB_FLAG_NEEDS_PATCHING);
	ASSERT(sonde__tbuf_index_ok(&tb));
	ASSERT_INT(sonde__tbuf_patch(&tb, 1, 1, 4, 0, (const uint8_t *)"abcd"), ==, -ENOENT);
	ASSERT_INT(sonde__tbuf_patch(&tb, 1, 1, 999, 0, (const uint8_t *)"abcd"), ==, -ENOENT);
	for (int i = 0; i < N; i++)
		ASSERT_INT(patch_same(&tb, ids[i]), ==, 0);
	/* nothing is readable before its last patch came */
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, 0);
	/* a clone has its own index: the source gone, each chunk is still found in it */
	ASSERT_OK(sonde__tbuf_clone(&cl, &tb));
	sonde__tbuf_free(&tb);
	ASSERT(sonde__tbuf_index_ok(&cl));
	for (int i = 0; i < N; i++) {
		ASSERT_INT(patch_same(&cl, ids[i]), ==, 0);
		sonde__tbuf_patch_done(&cl, 1, 1, ids[i]);
	}
	ASSERT_INT(sonde__tbuf_read(&cl, on_packet, &g, &seq, &invalid), ==, 0);
	ASSERT_INT(g.n, ==, N);
	ASSERT_STR_EQ(g.last, "c3");
	ASSERT_UINT(invalid, ==, 0);
	ASSERT_UINT(cl.st.patches_succeeded, ==, 2 * N);
	ASSERT(sonde__tbuf_index_ok(&cl));
	/* read and gone: the same ids are unknown now, and so is a re-commit's target */
	for (int i = 0; i < N; i++)
		ASSERT_INT(patch_same(&cl, ids[i]), ==, -ENOENT);
	sonde__tbuf_free(&cl);
}

TEST(service_tbuf_forgets_overwritten_chunks)
{
	/* a 4 KiB ring holds 4 of these chunks: the older ones are overwritten, and a patch
	 * naming one must not land in whatever record took its place */
	for (uint32_t step = 1; step <= 100; step += 99) { /* in the window, then far apart */
		struct tbuf tb;
		struct got g = {0};
		uint32_t seq = 1;
		uint64_t invalid = 0;
		char want[16];

		ASSERT_OK(sonde__tbuf_init(&tb, 4096, false));
		for (uint32_t i = 0; i < 12; i++)
			commit_named(&tb, i * step, 0);
		ASSERT_UINT(tb.st.chunks_overwritten, ==, 8);
		ASSERT(sonde__tbuf_index_ok(&tb));
		for (uint32_t i = 0; i < 12; i++)
			ASSERT_INT(patch_same(&tb, i * step), ==, i < 8 ? -ENOENT : 0);
		ASSERT_INT(sonde__tbuf_read(&tb, on_packet, &g, &seq, &invalid), ==, 0);
		ASSERT_INT(g.n, ==, 4);
		snprintf(want, sizeof(want), "c%u", 11 * step);
		ASSERT_STR_EQ(g.last, want);
		sonde__tbuf_free(&tb);
	}
}

static int on_packet_bytes(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct bytes *o = ctx;

	for (size_t i = 0; i < n; i++)
		sonde__buf_append(&o->b, iov[i].iov_base, iov[i].iov_len);
	sonde__buf_append(&o->b, &total, sizeof(total));
	o->n++;
	return 0;
}

/* Chunk i of a mixed workload: three writers, 1-5 packets of 0-699 bytes each (so every
 * payload length modulo 16 and 64 occurs), one chunk in 50 scraped (one fragment) before
 * its commit. */
static void commit_mixed(struct tbuf *tb, uint32_t i)
{
	static uint8_t chunk[8192];
	char body[5][704];
	const char *names[5];
	uint32_t k = 1 + i % 5;

	for (uint32_t j = 0; j < k; j++) {
		size_t len = (i * 13 + j * 7) % 700;
		memset(body[j], 'a' + (int)((i + j) % 26), len);
		body[j][len] = 0;
		names[j] = body[j];
	}
	size_t len = payload(chunk, names, k, 0);
	struct smb_chunk_info ci = {
		.chunk_id = i / 3, .writer_id = (uint16_t)(1 + i % 3), .count = (uint16_t)k};
	if (i % 50 == 1) { /* k == 2 */
		ci.count = 1;
		sonde__tbuf_copy_chunk(tb, 1, 0, 10, &ci, chunk, len);
		ci.count = (uint16_t)k;
	}
	sonde__tbuf_copy_chunk(tb, 1, 0, 10, &ci, chunk, len);
}

TEST(service_tbuf_streamed_ring_reads_as_a_copied_one)
{
	/* a ring large enough to be written with non-temporal stores, against the same ring
	 * written with memcpy: the same workload (wrapping it three times, read once
	 * halfway) must read back the same packets, byte for byte, with the same stats */
	struct tbuf tb[2];
	struct bytes out[2] = {{.b = BUF_INIT}, {.b = BUF_INIT}};

	for (int t = 0; t < 2; t++) {
		uint32_t seq = 1;
		uint64_t invalid = 0;

		ASSERT_OK(sonde__tbuf_init(&tb[t], 8 << 20, false));
		if (t == 1)
			tb[t].stream = false;
		for (uint32_t i = 0; i < 24000; i++) {
			commit_mixed(&tb[t], i);
			if (i == 12000)
				ASSERT_INT(sonde__tbuf_read(&tb[t], on_packet_bytes, &out[t], &seq,
							    &invalid),
					   ==, 0);
		}
		ASSERT_INT(sonde__tbuf_read(&tb[t], on_packet_bytes, &out[t], &seq, &invalid), ==,
			   0);
		ASSERT_UINT(invalid, ==, 0);
		ASSERT(sonde__tbuf_index_ok(&tb[t]));
	}
	ASSERT(tb[0].stream);
	ASSERT_UINT(tb[0].st.chunks_overwritten, >, 1000);
	ASSERT_UINT(tb[0].st.chunks_rewritten, >, 100);
	ASSERT_INT(out[0].n, >, 10000);
	ASSERT_INT(out[0].n, ==, out[1].n);
	ASSERT_UINT(out[0].b.len, ==, out[1].b.len);
	ASSERT_MEM_EQ(out[0].b.data, out[1].b.data, out[0].b.len);
	ASSERT_MEM_EQ(&tb[0].st, &tb[1].st, sizeof(tb[0].st));
	for (int t = 0; t < 2; t++) {
		sonde__tbuf_free(&tb[t]);
		sonde__buf_free(&out[t].b);
	}
}

struct slices {
	const uint8_t *p[8];
	uint8_t copy[8][32];
	size_t len[8], n;
};

/* Keeps where each packet's first slice lies, and what it holds. */
static int on_packet_where(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct slices *s = ctx;

	(void)n;
	(void)total;
	ASSERT_UINT(s->n, <, 8);
	s->p[s->n] = iov[0].iov_base;
	s->len[s->n] = iov[0].iov_len < 32 ? iov[0].iov_len : 32;
	memcpy(s->copy[s->n], iov[0].iov_base, s->len[s->n]);
	s->n++;
	return 0;
}

/* The last drain of a write_into_file session: once sealed, a ring takes no chunk and no
 * patch (each counted), a chunk still waiting for its patches stays unread, and what was
 * read stays where it lies, in memory a borrower keeps after the buffer is freed. */
TEST(service_tbuf_sealed_ring_keeps_what_was_read_for_its_borrowers)
{
	/* a 4 KiB ring holds 4 of these chunks: a fifth would overwrite the first */
	struct tbuf tb;
	struct slices s = {0};
	uint32_t seq = 1;
	uint64_t invalid = 0;

	ASSERT_OK(sonde__tbuf_init(&tb, 4096, false));
	for (uint32_t i = 0; i < 3; i++)
		commit_named(&tb, i, 0);
	commit_named(&tb, 3, SMB_FLAG_NEEDS_PATCHING);
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet_where, &s, &seq, &invalid), ==, 0);
	ASSERT_UINT(s.n, ==, 3);
	sonde__tbuf_seal(&tb);
	struct tbuf_mem *m = sonde__tbuf_lend(&tb);
	ASSERT(m != NULL);
	for (uint32_t i = 4; i < 12; i++)
		commit_named(&tb, i, 0);
	ASSERT_UINT(tb.st.chunks_discarded, ==, 8);
	ASSERT_UINT(tb.st.chunks_overwritten, ==, 0);
	ASSERT_INT(patch_same(&tb, 3), ==, -ENOENT);
	ASSERT_UINT(tb.st.patches_failed, ==, 1);
	sonde__tbuf_patch_done(&tb, 1, 1, 3);
	ASSERT_INT(sonde__tbuf_read(&tb, on_packet_where, &s, &seq, &invalid), ==, 0);
	ASSERT_UINT(s.n, ==, 3); /* its patches were refused: not read */
	for (size_t i = 0; i < s.n; i++)
		ASSERT(sonde__tbuf_holds(&tb, s.p[i], s.len[i]));
	ASSERT(!sonde__tbuf_holds(&tb, s.copy[0], 1));
	sonde__tbuf_free(&tb);
	/* the borrower's reference keeps the bytes (ASan would see a read of freed memory) */
	for (size_t i = 0; i < s.n; i++)
		ASSERT(memcmp(s.p[i], s.copy[i], s.len[i]) == 0);
	sonde__tbuf_mem_release(m);
}
