/* Fuzz target: the service's real CommitData handler and SMB scraping against a shared
 * memory buffer that a hostile producer rewrites while the service reads it.
 *
 * The input is a script. Some operations lay out the SMB (chunks with arbitrary headers,
 * states and payloads, raw bytes); others run the service: CommitData built from
 * structured moves and patches or from raw request bytes, scraping, and reads of the
 * central buffers. Each service call carries a schedule of mutations: the service calls
 * smb_access_hook() at every point where it touches the SMB, and the hook applies the next
 * mutation there (rewrite a bitmap word, flip a chunk's state or layout, rewrite the header
 * or the payload of the chunk being read, scribble anywhere).
 *
 * Invariants checked (abort on violation), besides ASan/UBSan's:
 *   - every pointer the service passes to the hook lies inside the SMB, a payload inside one
 *     page, and a copied payload is the one of the chunk the service holds;
 *   - between two access points the service writes the SMB only through the protocol: a
 *     bitmap word changes by one chunk going Complete->BeingRead or BeingRead->Free (or the
 *     whole word to 0 once every chunk is Free), and a chunk header is only cleared, only
 *     the header of the chunk it holds;
 *   - every chunk taken BeingRead is released before the next one is taken and before
 *     CommitData returns (also when the copy is refused);
 *   - the SMB is made inaccessible (PROT_NONE) while the central buffers are read: parsing
 *     works on the snapshots only;
 *   - every packet read is a valid producer packet followed by a trusted suffix whose
 *     trusted_uid and trusted_packet_sequence_id win over anything the producer wrote.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "service/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { PAGE = 4096, NPAGES = 4, SMB_BYTES = PAGE * NPAGES, PEER_UID = 1234, PEER_PID = 99 };

struct reader {
	const uint8_t *p, *end;
};

static struct svc svc;
static struct conn conn;
static struct tbuf tbufs[2]; /* BufferIDs 1 (this producer's) and 2 (someone else's) */
static uint8_t *smb;
static uint8_t shadow[SMB_BYTES]; /* the SMB as of the last access point */
static bool hooks_on;
static struct reader sched; /* mutations applied at access points */
static const uint8_t *held; /* chunk the service holds BeingRead, or NULL */
static size_t held_size;
static unsigned long hook_calls;

static uint32_t take(struct reader *r, size_t n)
{
	uint32_t v = 0;

	for (size_t i = 0; i < n && r->p < r->end; i++)
		v |= (uint32_t) * (r->p)++ << (8 * i);
	return v;
}

/* A sub-reader of the next n bytes (as many as are left). */
static struct reader take_bytes(struct reader *r, size_t n)
{
	struct reader s = {r->p, r->p};

	if (n > (size_t)(r->end - r->p))
		n = (size_t)(r->end - r->p);
	s.end = r->p + n;
	r->p += n;
	return s;
}

static uint32_t *bitmap(size_t page)
{
	return smb_page_bitmap(smb, PAGE, page);
}

/* ------------------------------------------------------------------ invariants */

static bool in_smb(const void *p, size_t len)
{
	const uint8_t *b = p;
	return b >= smb && len <= SMB_BYTES && (size_t)(b - smb) <= SMB_BYTES - len;
}

/* One bitmap word changed by the service since the last access point. */
static void check_bitmap_change(uint32_t old, uint32_t now)
{
	int changed = -1;

	if (now == 0) {
		/* un-partitioning: legal only when the chunk just freed was the last busy one */
		for (unsigned i = 0; i < smb_layout_nchunks(smb_bitmap_layout(old)); i++)
			if (smb_bitmap_state(old, i) != SMB_CHUNK_FREE &&
			    smb_bitmap_state(old, i) != SMB_CHUNK_BEING_READ)
				abort();
		return;
	}
	if ((old ^ now) & ~SMB_STATES_MASK)
		abort(); /* layout or reserved bit rewritten */
	for (unsigned i = 0; i < SMB_MAX_CHUNKS_PER_PAGE; i++) {
		enum smb_chunk_state a = smb_bitmap_state(old, i), b = smb_bitmap_state(now, i);
		if (a == b)
			continue;
		if (changed >= 0 || i >= smb_layout_nchunks(smb_bitmap_layout(old)))
			abort();
		changed = (int)i;
		if (!(a == SMB_CHUNK_COMPLETE && b == SMB_CHUNK_BEING_READ) &&
		    !(a == SMB_CHUNK_BEING_READ && b == SMB_CHUNK_FREE))
			abort();
	}
}

/* Everything the service wrote into the SMB since the last access point. */
static void check_service_writes(void)
{
	for (size_t off = 0; off < SMB_BYTES; off += 4) {
		uint32_t old, now;
		memcpy(&old, shadow + off, 4);
		memcpy(&now, smb + off, 4);
		if (old == now)
			continue;
		if (off % PAGE == 0) {
			check_bitmap_change(old, now);
			continue;
		}
		/* only the header of the held chunk, and only cleared */
		if (!held || smb + off < held || smb + off >= held + SMB_CHUNK_HDR_SIZE || now != 0)
			abort();
	}
}

static void check_access(enum smb_access_point at, const void *ptr, size_t len)
{
	const uint8_t *p = ptr;

	if (!in_smb(ptr, len ? len : 1))
		abort();
	switch (at) {
	case SMB_AT_ACQUIRED:
		if (held)
			abort(); /* the previous chunk was never released */
		held = p;
		held_size = len;
		break;
	case SMB_AT_RELEASE:
		if (p != held)
			abort();
		held = NULL;
		break;
	case SMB_AT_COPY:
	case SMB_AT_COPIED:
		if ((size_t)(p - smb) / PAGE != (size_t)(p + len - 1 - smb) / PAGE)
			abort(); /* a payload never crosses a page */
		if (held &&
		    (p != held + SMB_CHUNK_HDR_SIZE || len != held_size - SMB_CHUNK_HDR_SIZE))
			abort(); /* copying something else than the chunk it holds */
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------ mutations */

static void mutate(const uint8_t *ptr, size_t len)
{
	uint8_t op = (uint8_t)take(&sched, 1);
	size_t page = take(&sched, 1) % NPAGES;
	uint32_t v;

	switch (op % 8) {
	case 1: /* a whole bitmap word */
		__atomic_store_n(bitmap(page), take(&sched, 4), __ATOMIC_RELEASE);
		break;
	case 2: { /* one chunk's state */
		unsigned i = take(&sched, 1) % SMB_MAX_CHUNKS_PER_PAGE;
		v = smb_bitmap_load(bitmap(page));
		v = smb_bitmap_with_state(v, i, (enum smb_chunk_state)(op >> 6));
		__atomic_store_n(bitmap(page), v, __ATOMIC_RELEASE);
		break;
	}
	case 3: /* the layout, states kept */
		v = smb_bitmap_load(bitmap(page)) & ~SMB_LAYOUT_MASK;
		v |= (uint32_t)(op >> 5) << SMB_LAYOUT_SHIFT;
		__atomic_store_n(bitmap(page), v, __ATOMIC_RELEASE);
		break;
	case 4: /* the header at the access point (a chunk's, or a payload's chunk's) */
	case 5: {
		uint8_t *h = (uint8_t *)ptr - (op % 8 == 5 ? SMB_CHUNK_HDR_SIZE : 0);
		uint32_t id = take(&sched, 4);
		uint16_t writer = (uint16_t)take(&sched, 2), packets = (uint16_t)take(&sched, 2);
		if (!in_smb(h, SMB_CHUNK_HDR_SIZE) || (size_t)(h - smb) % PAGE == 0)
			break; /* not a chunk: leave the bitmap word to the other cases */
		smb_chunk_init_hdr(h, id, writer, 0);
		smb_chunk_set_packets(h, packets & SMB_PACKETS_COUNT_MASK, packets >> 10);
		break;
	}
	case 6: { /* scribble over what is being accessed */
		struct reader b = take_bytes(&sched, take(&sched, 1));
		size_t at = len ? take(&sched, 2) % len : 0, n = (size_t)(b.end - b.p);
		if (n > len - at)
			n = len - at;
		memcpy((uint8_t *)ptr + at, b.p, n);
		break;
	}
	case 7: { /* scribble anywhere */
		size_t at = take(&sched, 2) % SMB_BYTES;
		struct reader b = take_bytes(&sched, take(&sched, 1) % 64);
		size_t n = (size_t)(b.end - b.p);
		if (n > SMB_BYTES - at)
			n = SMB_BYTES - at;
		memcpy(smb + at, b.p, n);
		break;
	}
	default:
		break;
	}
}

void smb_access_hook(enum smb_access_point at, const void *ptr, size_t len)
{
	if (!hooks_on)
		return;
	hook_calls++;
	check_service_writes();
	check_access(at, ptr, len);
	if (sched.p < sched.end)
		mutate(ptr, len);
	memcpy(shadow, smb, SMB_BYTES);
}

/* ------------------------------------------------------------------ the service */

static void svc_setup(void)
{
	sonde__bufid_free(&svc); /* the previous run's ids: each run starts from a fresh pool */
	memset(&svc, 0, sizeof(svc));
	memset(&conn, 0, sizeof(conn));
	uint16_t id;
	if (sonde__bufid_alloc(&svc, &tbufs[0], &id) < 0 || id != 1 ||
	    sonde__bufid_alloc(&svc, &tbufs[1], &id) < 0 || id != 2)
		abort();
	conn.id = 5;
	conn.is_producer = true;
	conn.ch.fd = -1;
	conn.ch.peer_uid = PEER_UID;
	conn.ch.peer_pid = PEER_PID;
	conn.p.initialized = true;
	conn.p.id = 7;
	conn.p.scraping = true;
	conn.p.smb = smb;
	conn.p.smb_fd = -1;
	conn.p.smb_size = SMB_BYTES;
	conn.p.page_size = PAGE;
	conn.p.num_pages = NPAGES;
	sonde__producer_allow_buffer(&conn, 1);
}

/* Runs CommitData with args under the mutation schedule s. */
static void run_commit(const struct buf *args, struct reader s)
{
	struct req r = {.c = &conn, .id = 1, .drop_reply = true, .fd = -1};

	r.args = args->data ? args->data : (const uint8_t *)"";
	r.args_len = args->len;
	sched = s;
	memcpy(shadow, smb, SMB_BYTES);
	hooks_on = true;
	sonde__producer_dispatch(&svc, &r, PF_PRODUCER_COMMIT_DATA);
	check_service_writes();
	hooks_on = false;
	if (held)
		abort(); /* CommitData returned holding a chunk */
}

static void run_scrape(struct reader s)
{
	sched = s;
	memcpy(shadow, smb, SMB_BYTES);
	hooks_on = true;
	sonde__producer_scrape(&svc, &conn, NULL);
	check_service_writes();
	hooks_on = false;
}

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct buf *b = ctx;
	size_t sum = 0, body = 0;

	if (n < 2)
		abort(); /* at least the packet and the trusted suffix */
	sonde__buf_reset(b);
	for (size_t i = 0; i < n; i++) {
		sonde__buf_append(b, iov[i].iov_base, iov[i].iov_len);
		sum += iov[i].iov_len;
		if (i + 1 < n)
			body += iov[i].iov_len;
	}
	if (sum != total || buf_error(b) < 0 || !sonde__tbuf_packet_valid(b->data, body))
		abort();
	/* the suffix is authoritative: the last trusted values are the service's */
	struct pb_reader r = pb_reader_init(b->data, b->len);
	struct pb_field f;
	uint64_t uid = 0, seq = 0;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_PACKET_TRUSTED_UID)
			uid = f.wire == PB_VARINT ? f.u : UINT64_MAX;
		else if (f.num == PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID)
			seq = f.wire == PB_VARINT ? f.u : 0;
	}
	if (r.p != r.end || uid != PEER_UID || seq < 2)
		abort();
	return 0;
}

static void read_all(uint32_t *next_seq)
{
	struct buf b = BUF_INIT;
	uint64_t invalid = 0;

	/* the snapshots are all that may be parsed: the SMB is out of reach meanwhile */
	if (mprotect(smb, SMB_BYTES, PROT_NONE) < 0)
		abort();
	for (int i = 0; i < 2; i++)
		sonde__tbuf_read(&tbufs[i], on_packet, &b, next_seq, &invalid);
	if (mprotect(smb, SMB_BYTES, PROT_READ | PROT_WRITE) < 0)
		abort();
	sonde__buf_free(&b);
}

/* ------------------------------------------------------------------ script */

/* 'C': lay out a chunk (header, payload as fragments or raw, state). */
static void op_chunk(struct reader *in)
{
	size_t page = take(in, 1) % NPAGES;
	unsigned layout = take(in, 1) % 8, idx = take(in, 1) % SMB_MAX_CHUNKS_PER_PAGE;
	uint32_t bm = smb_bitmap_load(bitmap(page)), chunk_id = take(in, 4);
	uint16_t writer = (uint16_t)take(in, 2), packets = (uint16_t)take(in, 2);
	uint8_t mode = (uint8_t)take(in, 1);

	if (smb_bitmap_layout(bm) != layout)
		bm = (bm & ~SMB_LAYOUT_MASK) | (uint32_t)layout << SMB_LAYOUT_SHIFT;
	bm = smb_bitmap_with_state(bm, idx, (enum smb_chunk_state)(mode & 3));
	*bitmap(page) = bm;
	if (idx >= smb_layout_nchunks(layout))
		return;
	uint8_t *c = smb_chunk_ptr(smb, PAGE, page, layout, idx);
	size_t room = smb_chunk_size(PAGE, layout) - SMB_CHUNK_HDR_SIZE, off = 0;
	smb_chunk_init_hdr(c, chunk_id, writer, 0);
	smb_chunk_set_packets(c, packets & SMB_PACKETS_COUNT_MASK, packets >> 10);
	if (mode & 4) { /* raw payload bytes */
		struct reader b = take_bytes(in, take(in, 2) % (room + 1));
		memcpy(c + SMB_CHUNK_HDR_SIZE, b.p, (size_t)(b.end - b.p));
		return;
	}
	/* fragments with 4-byte size prefixes, as producers write them */
	for (unsigned nfrags = take(in, 1) % 8; nfrags--;) {
		struct reader b = take_bytes(in, take(in, 1));
		size_t n = (size_t)(b.end - b.p);
		if (off + 4 + n > room)
			break;
		sonde__pb_write_redundant_len(c + SMB_CHUNK_HDR_SIZE + off, (uint32_t)n);
		memcpy(c + SMB_CHUNK_HDR_SIZE + off + 4, b.p, n);
		off += 4 + n;
	}
}

/* 'M': CommitData from structured moves and patches. */
static void op_commit(struct reader *in, struct buf *a)
{
	sonde__buf_reset(a);
	for (unsigned n = take(in, 1) % 16; n--;) {
		size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
		sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_PAGE, take(in, 1) % (NPAGES + 1));
		sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_CHUNK, take(in, 1) % 16);
		sonde__pb_put_varint(a, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, take(in, 1) % 4);
		sonde__pb_end(a, m);
	}
	for (unsigned n = take(in, 1) % 4; n--;) {
		size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
		sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_TARGET_BUFFER, take(in, 1) % 4);
		sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_WRITER_ID, take(in, 2));
		sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_CHUNK_ID, take(in, 4));
		for (unsigned k = take(in, 1) % 4; k--;) {
			size_t pm = sonde__pb_begin(a, PF_CHUNK_TO_PATCH_PATCHES);
			sonde__pb_put_varint(a, PF_PATCH_OFFSET, take(in, 2));
			struct reader d = take_bytes(in, take(in, 1) % 6);
			sonde__pb_put_bytes(a, PF_PATCH_DATA, d.p, (size_t)(d.end - d.p));
			sonde__pb_end(a, pm);
		}
		sonde__pb_put_bool(a, PF_CHUNK_TO_PATCH_HAS_MORE_PATCHES, take(in, 1) & 1);
		sonde__pb_end(a, m);
	}
	run_commit(a, take_bytes(in, take(in, 1)));
}

/* 'R': CommitData with raw request bytes. */
static void op_raw_commit(struct reader *in, struct buf *a)
{
	struct reader b = take_bytes(in, take(in, 2));

	sonde__buf_reset(a);
	sonde__buf_append(a, b.p, (size_t)(b.end - b.p));
	run_commit(a, take_bytes(in, take(in, 1)));
}

static void run_script(struct reader *in)
{
	struct buf a = BUF_INIT;
	uint32_t next_seq = 2;

	while (in->p < in->end) {
		switch (take(in, 1)) {
		case 'C':
			op_chunk(in);
			break;
		case 'M':
			op_commit(in, &a);
			break;
		case 'R':
			op_raw_commit(in, &a);
			break;
		case 'S':
			run_scrape(take_bytes(in, take(in, 1)));
			break;
		case 'W': { /* RegisterTraceWriter */
			uint16_t w = (uint16_t)(take(in, 2) % (SMB_MAX_WRITER_ID + 1));
			sonde__producer_bind_writer(&conn, w, (uint16_t)(take(in, 1) % 4));
			break;
		}
		case 'G': /* buffer 1's session freed and its id given again: a new permission */
			sonde__producer_disallow_buffer(&conn, 1);
			sonde__producer_allow_buffer(&conn, 1);
			break;
		case 'B': { /* raw bytes anywhere (before the service runs) */
			size_t at = take(in, 2) % SMB_BYTES;
			struct reader b = take_bytes(in, take(in, 1));
			size_t n = (size_t)(b.end - b.p);
			memcpy(smb + at, b.p, n < SMB_BYTES - at ? n : SMB_BYTES - at);
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
	sonde__buf_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader in = {data, data + size};
	bool discard = take(&in, 1) & 1; /* the first byte picks the fill policy */

	if (!smb) {
		smb = mmap(NULL, SMB_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
			   0);
		if (smb == MAP_FAILED)
			abort();
	}
	memset(smb, 0, SMB_BYTES);
	held = NULL;
	if (sonde__tbuf_init(&tbufs[0], 8192, discard) < 0)
		return 0;
	if (sonde__tbuf_init(&tbufs[1], 8192, false) < 0) {
		sonde__tbuf_free(&tbufs[0]);
		return 0;
	}
	svc_setup();
	hook_calls = 0;
	run_script(&in);
	/* every copy into a buffer passes an access point: the seam must be live */
	if (tbufs[0].st.chunks_written + tbufs[1].st.chunks_written > 0 && hook_calls == 0)
		abort();
	free(conn.p.allowed);
	sonde__tbuf_free(&tbufs[0]);
	sonde__tbuf_free(&tbufs[1]);
	return 0;
}
