/* The producer's chunk writer against an in-memory SMB: framing, fragmentation, patches,
 * chunk states and CommitData contents, checked the way the service reads them. */
#include <sonde/client.h>

#include "base/buf.h"
#include "base/pb.h"
#include "client/arbiter.h"
#include "client/writer.h"
#include "ipc/protos.h"
#include "ipc/smb.h"

#include "../test.h"

struct rig {
	uint8_t *smb;
	size_t size, page;
	struct arbiter a;
	struct sonde_trace_writer w;
	struct buf commits[64];
	int n_commits;
};

static int capture(void *ctx, const uint8_t *req, size_t len)
{
	struct rig *r = ctx;
	if (!req)
		return 0;
	ASSERT(r->n_commits < 64);
	struct buf *b = &r->commits[r->n_commits++];
	*b = (struct buf)BUF_INIT;
	sonde__buf_append(b, req, len);
	return 0;
}

static void rig_init(struct rig *r, size_t size, size_t page, uint32_t stall_ms)
{
	memset(r, 0, sizeof(*r));
	r->smb = ASSERT_NOT_NULL(aligned_alloc(4096, size));
	memset(r->smb, 0, size);
	r->size = size;
	r->page = page;
	ASSERT_OK(sonde__arbiter_init(&r->a, r->smb, size, page, SMB_LAYOUT_DIV1, capture, r));
	/* commit only when asked, so tests see the batch */
	r->a.commit_threshold = 1000;
	sonde__tw_init(&r->w, &r->a, 7, 3, stall_ms);
}

static void rig_fini(struct rig *r)
{
	sonde__arbiter_fini(&r->a);
	for (int i = 0; i < r->n_commits; i++)
		sonde__buf_free(&r->commits[i]);
	free(r->smb);
}

static unsigned chunk_state(struct rig *r, size_t page, unsigned chunk)
{
	return smb_bitmap_state(smb_bitmap_load(smb_page_bitmap(r->smb, r->page, page)), chunk);
}

/* Chunks listed in a CommitData, and its patches. */
struct commit {
	struct {
		uint32_t page, chunk, target;
	} moves[64];
	int n_moves;
	struct {
		uint32_t target, writer, chunk_id, offset;
		uint8_t data[4];
		bool has_more;
	} patches[16];
	int n_patches;
	uint64_t flush_id;
};

static void decode_commit(const struct buf *b, struct commit *c)
{
	struct pb_reader r = pb_reader_init(b->data, b->len);
	struct pb_field f, g, h;

	memset(c, 0, sizeof(*c));
	while (ASSERT_OK(sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID) {
			c->flush_id = f.u;
		} else if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE) {
			struct pb_reader s = pb_sub(&f);
			while (ASSERT_OK(sonde__pb_next(&s, &g)) > 0) {
				if (g.num == 1)
					c->moves[c->n_moves].page = (uint32_t)g.u;
				if (g.num == 2)
					c->moves[c->n_moves].chunk = (uint32_t)g.u;
				if (g.num == 3)
					c->moves[c->n_moves].target = (uint32_t)g.u;
			}
			c->n_moves++;
		} else if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH) {
			struct pb_reader s = pb_sub(&f);
			uint32_t t = 0, wr = 0, id = 0;
			bool more = false;
			int first = c->n_patches;
			while (ASSERT_OK(sonde__pb_next(&s, &g)) > 0) {
				if (g.num == 1)
					t = (uint32_t)g.u;
				else if (g.num == 2)
					wr = (uint32_t)g.u;
				else if (g.num == 3)
					id = (uint32_t)g.u;
				else if (g.num == 5)
					more = g.u != 0;
				else if (g.num == 4) {
					struct pb_reader pr = pb_sub(&g);
					while (ASSERT_OK(sonde__pb_next(&pr, &h)) > 0) {
						if (h.num == 1)
							c->patches[c->n_patches].offset = (uint32_t)h.u;
						if (h.num == 2) {
							ASSERT_UINT(h.len, ==, 4);
							memcpy(c->patches[c->n_patches].data, h.ptr, 4);
						}
					}
					c->n_patches++;
				}
			}
			for (int i = first; i < c->n_patches; i++) {
				c->patches[i].target = t;
				c->patches[i].writer = wr;
				c->patches[i].chunk_id = id;
				c->patches[i].has_more = more;
			}
		}
	}
}

/* The service's view of chunk (page, 0): header and fragments. */
struct chunk_view {
	struct smb_chunk_info ci;
	const uint8_t *frag[1100];
	uint32_t frag_len[1100];
	unsigned n;
};

static void read_chunk(struct rig *r, size_t page, struct chunk_view *v)
{
	uint8_t *c = smb_chunk_ptr(r->smb, r->page, page, SMB_LAYOUT_DIV1, 0);
	const uint8_t *p = c + SMB_CHUNK_HDR_SIZE;
	const uint8_t *end = c + smb_chunk_size(r->page, SMB_LAYOUT_DIV1);

	v->ci = smb_chunk_read_hdr(c);
	v->n = 0;
	for (unsigned i = 0; i < v->ci.count; i++) {
		uint32_t size;
		size_t k = smb_frag_size(p, end, &size);
		ASSERT_UINT(k, ==, 4);
		p += k;
		v->frag[v->n] = p;
		v->frag_len[v->n++] = size;
		if (size != SMB_PACKET_SIZE_DROP) {
			ASSERT_UINT(size, <=, (size_t)(end - p));
			p += size;
		}
	}
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

TEST(client_writer_small_packets_share_a_chunk)
{
	struct rig r;
	struct chunk_view v;
	struct commit c;

	rig_init(&r, 4 * 4096, 4096, 0);
	for (int i = 0; i < 5; i++) {
		uint8_t pkt[100];
		fill_pattern(pkt, sizeof(pkt), (unsigned)i);
		ASSERT_OK(sonde_trace_writer__write_packet(&r.w, pkt, (size_t)(10 + i * 20)));
	}
	/* the chunk is ours while we write */
	ASSERT_UINT(chunk_state(&r, 0, 0), ==, SMB_CHUNK_BEING_WRITTEN);
	sonde__tw_release(&r.w);
	/* returned but still batched: not yet the service's */
	ASSERT_UINT(chunk_state(&r, 0, 0), ==, SMB_CHUNK_BEING_WRITTEN);
	ASSERT_INT(r.n_commits, ==, 0);
	ASSERT_OK(sonde__arbiter_commit(&r.a, 0));
	ASSERT_UINT(chunk_state(&r, 0, 0), ==, SMB_CHUNK_COMPLETE);
	ASSERT_INT(r.n_commits, ==, 1);
	decode_commit(&r.commits[0], &c);
	ASSERT_INT(c.n_moves, ==, 1);
	ASSERT_UINT(c.moves[0].page, ==, 0);
	ASSERT_UINT(c.moves[0].chunk, ==, 0);
	ASSERT_UINT(c.moves[0].target, ==, 3);
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.writer_id, ==, 7);
	ASSERT_UINT(v.ci.chunk_id, ==, 0);
	ASSERT_UINT(v.ci.flags, ==, 0);
	ASSERT_UINT(v.n, ==, 5);
	for (int i = 0; i < 5; i++) {
		uint8_t pkt[100];
		fill_pattern(pkt, sizeof(pkt), (unsigned)i);
		ASSERT_UINT(v.frag_len[i], ==, 10 + i * 20);
		ASSERT_MEM_EQ(v.frag[i], pkt, v.frag_len[i]);
	}
	rig_fini(&r);
}

TEST(client_writer_large_packet_is_fragmented_with_continuation_flags)
{
	static uint8_t pkt[10000], got[10000];
	struct rig r;
	struct chunk_view v;
	size_t off = 0;

	rig_init(&r, 8 * 4096, 4096, 0);
	fill_pattern(pkt, sizeof(pkt), 1);
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "ab", 2));
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt)));
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "cd", 2));
	sonde__tw_release(&r.w);
	ASSERT_OK(sonde__arbiter_commit(&r.a, 0));
	static const unsigned want_flags[3] = {
		SMB_FLAG_LAST_PACKET_CONTINUES,
		SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_LAST_PACKET_CONTINUES,
		SMB_FLAG_FIRST_PACKET_CONTINUES};
	static const unsigned want_count[3] = {2, 1, 2};
	for (size_t page = 0; page < 3; page++) {
		ASSERT_UINT(chunk_state(&r, page, 0), ==, SMB_CHUNK_COMPLETE);
		read_chunk(&r, page, &v);
		ASSERT_UINT(v.ci.chunk_id, ==, page);
		ASSERT_UINT(v.ci.flags, ==, want_flags[page]);
		ASSERT_UINT(v.ci.count, ==, want_count[page]);
		unsigned first = page == 0 ? 1 : 0;
		memcpy(got + off, v.frag[first], v.frag_len[first]);
		off += v.frag_len[first];
		if (page == 2) {
			ASSERT_UINT(v.frag_len[1], ==, 2);
			ASSERT_MEM_EQ(v.frag[1], "cd", 2);
		}
	}
	ASSERT_UINT(off, ==, sizeof(pkt));
	ASSERT_MEM_EQ(got, pkt, sizeof(pkt));
	ASSERT_UINT(chunk_state(&r, 3, 0), ==, SMB_CHUNK_FREE);
	rig_fini(&r);
}

/* Writes a packet {1: nested{2: <n bytes>}, 3: 9} starting `lead` bytes into the chunk. */
static void write_nested_packet(struct rig *r, size_t lead, size_t n)
{
	static uint8_t body[20000];
	fill_pattern(body, sizeof(body), 5);
	ASSERT_OK(sonde_trace_writer__begin_packet(&r->w));
	sonde_trace_writer__append_bytes(&r->w, 4, body, lead);
	ASSERT_OK(sonde_trace_writer__begin_nested(&r->w, 1));
	sonde_trace_writer__append_bytes(&r->w, 2, body, n);
	ASSERT_OK(sonde_trace_writer__end_nested(&r->w));
	sonde_trace_writer__append_varint(&r->w, 3, 9);
	sonde_trace_writer__end_packet(&r->w);
}

/* Reassembles the single packet spread over pages [0, n) and checks its nested length. */
static void check_nested_packet(struct rig *r, size_t pages, size_t lead, size_t n)
{
	static uint8_t got[40000];
	struct chunk_view v;
	size_t off = 0;

	for (size_t page = 0; page < pages; page++) {
		read_chunk(r, page, &v);
		memcpy(got + off, v.frag[0], v.frag_len[0]);
		off += v.frag_len[0];
	}
	struct pb_reader rd = pb_reader_init(got, off);
	struct pb_field f, g;
	ASSERT_INT(sonde__pb_next(&rd, &f), ==, 1);
	ASSERT_UINT(f.num, ==, 4);
	ASSERT_UINT(f.len, ==, lead);
	ASSERT_INT(sonde__pb_next(&rd, &f), ==, 1);
	ASSERT_UINT(f.num, ==, 1);
	struct pb_reader sub = pb_sub(&f);
	ASSERT_INT(sonde__pb_next(&sub, &g), ==, 1);
	ASSERT_UINT(g.num, ==, 2);
	ASSERT_UINT(g.len, ==, n);
	ASSERT_INT(sonde__pb_next(&sub, &g), ==, 0);
	ASSERT_INT(sonde__pb_next(&rd, &f), ==, 1);
	ASSERT_UINT(f.num, ==, 3);
	ASSERT_UINT(f.u, ==, 9);
	ASSERT_INT(sonde__pb_next(&rd, &f), ==, 0);
}

TEST(client_writer_nested_length_in_batched_chunk_is_patched_in_place)
{
	struct rig r;
	struct chunk_view v;
	struct commit c;

	rig_init(&r, 8 * 4096, 4096, 0);
	write_nested_packet(&r, 3000, 3000);
	sonde__tw_release(&r.w);
	/* both chunks were still batched when the length became known */
	ASSERT_UINT(r.a.patches_direct, ==, 1);
	ASSERT_OK(sonde__arbiter_commit(&r.a, 0));
	decode_commit(&r.commits[0], &c);
	ASSERT_INT(c.n_moves, ==, 2);
	ASSERT_INT(c.n_patches, ==, 0);
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.flags, ==, SMB_FLAG_LAST_PACKET_CONTINUES); /* patching flag cleared */
	check_nested_packet(&r, 2, 3000, 3000);
	rig_fini(&r);
}

TEST(client_writer_nested_length_in_committed_chunk_travels_as_patch)
{
	struct rig r;
	struct chunk_view v;
	struct commit c;

	rig_init(&r, 8 * 4096, 4096, 0);
	r.a.commit_threshold = 1; /* every returned chunk is committed at once */
	write_nested_packet(&r, 3000, 6000);
	sonde__tw_release(&r.w);
	ASSERT_OK(sonde__arbiter_commit(&r.a, 0));
	/* chunk 0 went out with the length open: it needs patching */
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.flags, ==, SMB_FLAG_LAST_PACKET_CONTINUES | SMB_FLAG_NEEDS_PATCHING);
	int found = 0;
	for (int i = 0; i < r.n_commits; i++) {
		decode_commit(&r.commits[i], &c);
		for (int k = 0; k < c.n_patches; k++) {
			found++;
			ASSERT_UINT(c.patches[k].writer, ==, 7);
			ASSERT_UINT(c.patches[k].target, ==, 3);
			ASSERT_UINT(c.patches[k].chunk_id, ==, 0);
			ASSERT(!c.patches[k].has_more);
			/* the offset is relative to the payload, where the 4 reserved bytes are */
			uint8_t *payload = r.smb + SMB_PAGE_HDR_SIZE + SMB_CHUNK_HDR_SIZE;
			ASSERT_UINT(c.patches[k].offset + 4, <=, 4096 - 16);
			static const uint8_t zero[4];
			ASSERT_MEM_EQ(payload + c.patches[k].offset, zero, 4);
			/* apply it as the service does, then the packet must parse */
			memcpy(payload + c.patches[k].offset, c.patches[k].data, 4);
			uint32_t len;
			ASSERT_UINT(smb_frag_size(c.patches[k].data, c.patches[k].data + 4, &len), ==,
				    4);
			ASSERT_UINT(len, ==, 6000 + 3); /* tag + 2-byte length + bytes */
		}
	}
	ASSERT_INT(found, ==, 1);
	check_nested_packet(&r, 3, 3000, 6000);
	rig_fini(&r);
}

TEST(client_writer_exhausted_smb_drops_with_marker_and_flags_the_next_packet)
{
	static uint8_t pkt[6000];
	struct rig r;
	struct chunk_view v;

	rig_init(&r, 4096, 4096, 0); /* a single chunk, no stalling */
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "ok", 2));
	/* needs a second chunk: there is none, so the packet is abandoned */
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt)));
	ASSERT_UINT(sonde_trace_writer__packets_lost(&r.w), ==, 1);
	ASSERT_ERR(sonde_trace_writer__write_packet(&r.w, "x", 1), -SONDE_E_LIMIT);
	ASSERT_UINT(sonde_trace_writer__packets_lost(&r.w), ==, 2);
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.count, ==, 2);
	ASSERT_UINT(v.ci.flags, ==, 0); /* no continuation promised */
	ASSERT_UINT(v.frag_len[1], ==, SMB_PACKET_SIZE_DROP);
	/* the service reads and frees the chunk */
	ASSERT_OK(sonde__arbiter_commit(&r.a, 0));
	struct smb_chunk_info ci;
	uint8_t *ch = ASSERT_NOT_NULL(smb_acquire_for_reading(r.smb, 4096, 0, 0, &ci));
	smb_release_read_chunk(r.smb, 4096, 0, 0, ch);
	/* the writer recovers with the next chunk id (a gap would stall a reader that
	 * waits for it) and its first packet carries previous_packet_dropped */
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "back", 4));
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.chunk_id, ==, 1);
	ASSERT_UINT(v.n, ==, 1);
	static const uint8_t flagged[] = {0xd0, 0x02, 0x01, 'b', 'a', 'c', 'k'};
	ASSERT_UINT(v.frag_len[0], ==, sizeof(flagged));
	ASSERT_MEM_EQ(v.frag[0], flagged, sizeof(flagged));
	/* only the first one */
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "more", 4));
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.n, ==, 2);
	ASSERT_UINT(v.frag_len[1], ==, 4);
	ASSERT_MEM_EQ(v.frag[1], "more", 4);
	rig_fini(&r);
}

TEST(client_writer_out_of_chunks_sends_the_batch_at_once)
{
	static uint8_t pkt[3000];
	struct rig r;
	struct commit c;

	rig_init(&r, 2 * 4096, 4096, 0); /* two chunks, no stalling, a batch never full */
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt)));
	ASSERT_OK(sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt)));
	ASSERT_INT(r.n_commits, ==, 0);
	/* the third starts in the second chunk and needs a third there is none of: it is
	 * abandoned, and both chunks go to the service now, which alone can free one */
	sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt));
	ASSERT_UINT(sonde_trace_writer__packets_lost(&r.w), ==, 1);
	ASSERT_INT(r.n_commits, ==, 1);
	decode_commit(&r.commits[0], &c);
	ASSERT_INT(c.n_moves, ==, 2);
	ASSERT_UINT(chunk_state(&r, 0, 0), ==, SMB_CHUNK_COMPLETE);
	ASSERT_UINT(chunk_state(&r, 1, 0), ==, SMB_CHUNK_COMPLETE);
	/* while dropping with nothing batched, no empty commits */
	ASSERT_ERR(sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt)), -SONDE_E_LIMIT);
	ASSERT_INT(r.n_commits, ==, 1);
	rig_fini(&r);
}

TEST(client_writer_packet_count_limit_starts_a_new_chunk)
{
	struct rig r;
	struct chunk_view v;

	rig_init(&r, 4 * 16384, 16384, 0);
	for (int i = 0; i < 1100; i++)
		ASSERT_OK(sonde_trace_writer__write_packet(&r.w, "", 0));
	sonde__tw_release(&r.w);
	read_chunk(&r, 0, &v);
	ASSERT_UINT(v.ci.count, ==, 1023);
	read_chunk(&r, 1, &v);
	ASSERT_UINT(v.ci.count, ==, 77);
	ASSERT_UINT(v.ci.chunk_id, ==, 1);
	rig_fini(&r);
}

TEST(client_writer_flush_id_is_sent_even_without_chunks)
{
	struct rig r;
	struct commit c;

	rig_init(&r, 4096, 4096, 0);
	ASSERT_OK(sonde__arbiter_commit(&r.a, 42));
	ASSERT_INT(r.n_commits, ==, 1);
	decode_commit(&r.commits[0], &c);
	ASSERT_UINT(c.flush_id, ==, 42);
	ASSERT_INT(c.n_moves, ==, 0);
	rig_fini(&r);
}

TEST(client_writer_warm_packets_allocate_nothing)
{
	struct rig r;
	static uint8_t pkt[3000];

	rig_init(&r, 64 * 4096, 4096, 0);
	r.a.commit_threshold = 8;
	/* warm up the batch arrays */
	for (int i = 0; i < 200; i++)
		sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt));
	for (int i = 0; i < r.n_commits; i++)
		sonde__buf_free(&r.commits[i]);
	r.n_commits = 0;
	void *moves = r.a.moves, *req = r.a.req.data;
	size_t cap = r.a.cap_moves, reqcap = r.a.req.cap;
	/* free everything the "service" got, then write more: nothing may grow */
	memset(r.smb, 0, r.size);
	r.w.have_chunk = false;
	for (int i = 0; i < 40; i++)
		sonde_trace_writer__write_packet(&r.w, pkt, sizeof(pkt));
	ASSERT(r.a.moves == moves && r.a.cap_moves == cap);
	ASSERT(r.a.req.data == req && r.a.req.cap == reqcap);
	rig_fini(&r);
}
