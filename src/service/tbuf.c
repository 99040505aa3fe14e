#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/alloc.h"
#include "base/array.h"
#include "base/buf.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/tbuf.h"

enum { REC_HDR = 16, REC_CHUNK = 1, REC_PAD = 2, MAX_REC = 65536 };

/* A ring at least this large is written around the caches (see stream_rec). */
#define STREAM_MIN ((size_t)8 << 20)

/* A sequence's window of chunk ids (tbuf_seq.win) grows over a gap of at most WIN_GAP ids
 * and while at least a quarter of it (plus WIN_SLACK) is stored chunks, so that a
 * producer numbering its chunks far apart costs the fallback table, not a window of
 * empty slots. */
enum { WIN_MIN = 16, WIN_GAP = 16, WIN_SLACK = 64 };

/* The 16-byte record header in the ring. */
struct rec {
	uint16_t seq;
	uint16_t payload_len;
	uint32_t chunk_id;
	uint16_t count;
	uint16_t frags_read; /* fragments already consumed */
	uint16_t read_off;   /* payload offset of the first unconsumed fragment */
	uint8_t flags;	     /* smb_chunk_flags */
	uint8_t kind;
};
_Static_assert(sizeof(struct rec) == REC_HDR, "record header is 16 bytes");

static size_t rec_size(const struct rec *r)
{
	size_t n = REC_HDR + r->payload_len;
	return r->kind == REC_PAD ? n : (n + 15) & ~(size_t)15;
}

static struct rec *rec_at(const struct tbuf *tb, size_t off)
{
	return (struct rec *)(void *)(tb->data + off);
}

static uint64_t chunk_key(uint16_t seq, uint32_t chunk_id)
{
	return ((uint64_t)seq << 32) | chunk_id;
}

/* The ring's bytes, at a cache-line boundary: records of a multiple of 64 bytes (a chunk
 * filling a 4 or 32 KiB page) then share no line, so the header read when the oldest
 * record makes room never lies in the line the previous record's non-temporal stores
 * ended in (that load waited for those stores and missed: `perf` on trace_bench --case 0
 * put 18 % of the service's CPU in it, with the ring at 16 bytes past a line as malloc
 * left it). */
static uint8_t *ring_alloc(size_t size, void **mem)
{
	*mem = sonde__malloc(size + 63);
	return *mem ? (uint8_t *)(((uintptr_t)*mem + 63) & ~(uintptr_t)63) : NULL;
}

int sonde__tbuf_init(struct tbuf *tb, size_t size, bool discard)
{
	memset(tb, 0, sizeof(*tb));
	size &= ~(size_t)15;
	if (size < 4096)
		size = 4096;
	tb->data = ring_alloc(size, &tb->mem);
	tb->size = size;
	tb->seq_cache_key = UINT64_MAX;
	tb->discard = discard;
	tb->stream = size >= STREAM_MIN;
	/* the chunk table only holds what falls outside the sequences' windows: it starts
	 * empty and is allocated if that ever happens */
	if (!tb->data || sonde__u64map_reserve(&tb->seqmap, 16) < 0) {
		sonde__tbuf_free(tb);
		return -ENOMEM;
	}
	return 0;
}

struct tbuf_mem {
	void *mem;
	unsigned refs;
};

void sonde__tbuf_free(struct tbuf *tb)
{
	for (size_t i = 0; i < tb->nseqs; i++)
		sonde__free(tb->seqs[i].win);
	if (tb->lent)
		sonde__tbuf_mem_release(tb->lent);
	else
		sonde__free(tb->mem);
	sonde__u64map_free(&tb->chunks);
	sonde__u64map_free(&tb->seqmap);
	sonde__free(tb->seqs);
	sonde__free(tb->iov);
	memset(tb, 0, sizeof(*tb));
}

static int map_copy(struct u64map *dst, const struct u64map *src)
{
	*dst = *src;
	if (!src->slots)
		return 0;
	dst->slots = sonde__malloc((src->cap + 1) * sizeof(*src->slots));
	if (!dst->slots) {
		memset(dst, 0, sizeof(*dst));
		return -ENOMEM;
	}
	memcpy(dst->slots, src->slots, (src->cap + 1) * sizeof(*src->slots));
	return 0;
}

void sonde__tbuf_seal(struct tbuf *tb)
{
	tb->sealed = true;
}

struct tbuf_mem *sonde__tbuf_lend(struct tbuf *tb)
{
	if (!tb->lent) {
		tb->lent = sonde__malloc(sizeof(*tb->lent));
		if (!tb->lent)
			return NULL;
		*tb->lent = (struct tbuf_mem){tb->mem, 1}; /* the buffer's own */
	}
	tb->lent->refs++;
	return tb->lent;
}

void sonde__tbuf_mem_release(struct tbuf_mem *m)
{
	if (--m->refs)
		return;
	sonde__free(m->mem);
	sonde__free(m);
}

bool sonde__tbuf_holds(const struct tbuf *tb, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p, d = (uintptr_t)tb->data;

	return a >= d && a - d <= tb->size && n <= tb->size - (a - d);
}

int sonde__tbuf_clone(struct tbuf *dst, const struct tbuf *src)
{
	*dst = *src;
	dst->sealed = false;
	dst->lent = NULL;
	dst->data = ring_alloc(src->size, &dst->mem);
	dst->seqs = sonde__malloc((src->seqs_cap ? src->seqs_cap : 1) * sizeof(*src->seqs));
	dst->nseqs = 0; /* until the sequences and their windows are copied */
	dst->iov = NULL;
	dst->iov_cap = 0;
	memset(&dst->chunks, 0, sizeof(dst->chunks));
	memset(&dst->seqmap, 0, sizeof(dst->seqmap));
	if (!dst->data || !dst->seqs || map_copy(&dst->chunks, &src->chunks) < 0 ||
	    map_copy(&dst->seqmap, &src->seqmap) < 0) {
		sonde__tbuf_free(dst);
		return -ENOMEM;
	}
	memcpy(dst->data, src->data, src->size);
	for (size_t i = 0; i < src->nseqs; i++) {
		struct tbuf_seq *d = &dst->seqs[dst->nseqs++];
		*d = src->seqs[i];
		if (!d->win)
			continue;
		d->win = sonde__malloc(d->win_cap * sizeof(*d->win));
		if (!d->win) {
			sonde__tbuf_free(dst);
			return -ENOMEM;
		}
		memcpy(d->win, src->seqs[i].win, d->win_cap * sizeof(*d->win));
	}
	return 0;
}

static int seq_get(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id,
		   const struct tbuf_ident *who)
{
	uint64_t key = ((uint64_t)producer_id << 16) | writer_id;
	uint64_t *v;

	if (key == tb->seq_cache_key)
		return tb->seq_cache_idx;
	v = sonde__u64map_get(&tb->seqmap, key);
	if (v) {
		tb->seq_cache_key = key;
		tb->seq_cache_idx = (int)*v;
		return (int)*v;
	}
	if (tb->nseqs >= UINT16_MAX)
		return -1;
	if (sonde__array_grow(&tb->seqs, &tb->seqs_cap, tb->nseqs + 1, sizeof(*tb->seqs), 16) < 0)
		return -1;
	if (sonde__u64map_put(&tb->seqmap, key, (uint32_t)tb->nseqs) < 0)
		return -1;
	tb->seqs[tb->nseqs] = (struct tbuf_seq){.producer_id = producer_id,
						.writer_id = writer_id,
						.uid = who->uid,
						.pid = who->pid,
						.uid_unknown = who->uid_unknown,
						.machine_id = who->machine_id};
	return (int)tb->nseqs++;
}

/* ------------------------------------------------------------------ chunk index */

/* The window slot of chunk_id, or NULL when the id is outside the window. */
static uint32_t *win_slot(const struct tbuf_seq *s, uint32_t chunk_id)
{
	uint32_t i = chunk_id - s->win_base; /* ids wrap at 2^32 as the producer's do */

	return i < s->win_len ? &s->win[(s->win_head + i) & (s->win_cap - 1)] : NULL;
}

/* Drops the empty slots at the window's front: the oldest stored chunk is its base. */
static void win_trim(struct tbuf_seq *s)
{
	while (s->win_len && s->win[s->win_head] == TBUF_WIN_NONE) {
		s->win_head = (s->win_head + 1) & (s->win_cap - 1);
		s->win_base++;
		s->win_len--;
	}
}

/* Extends the window to chunk_id, which is past its end (or the window is empty).
 * Returns false when the id is too far ahead, or behind the window, or on ENOMEM. */
static bool win_extend(struct tbuf_seq *s, uint32_t chunk_id)
{
	uint32_t len = s->win_len ? chunk_id - s->win_base + 1 : 1;

	if (s->win_len && (len - 1 < s->win_len || len - s->win_len > WIN_GAP ||
			   len > 4 * (s->win_present + 1) + WIN_SLACK))
		return false;
	if (len > s->win_cap) {
		uint32_t cap = s->win_cap ? s->win_cap : WIN_MIN;
		while (cap < len)
			cap *= 2;
		uint32_t *w = sonde__malloc(cap * sizeof(*w));
		if (!w)
			return false;
		for (uint32_t i = 0; i < s->win_len; i++)
			w[i] = s->win[(s->win_head + i) & (s->win_cap - 1)];
		sonde__free(s->win);
		s->win = w;
		s->win_cap = cap;
		s->win_head = 0;
	}
	if (!s->win_len) {
		s->win_base = chunk_id;
		s->win_head = 0;
	}
	for (uint32_t i = s->win_len; i < len; i++)
		s->win[(s->win_head + i) & (s->win_cap - 1)] = TBUF_WIN_NONE;
	s->win_len = len;
	return true;
}

/* Records that chunk_id of sequence seq is stored at off. 0, or -ENOMEM. */
static int idx_put(struct tbuf *tb, uint16_t seq, uint32_t chunk_id, uint32_t off)
{
	struct tbuf_seq *s = &tb->seqs[seq];
	uint32_t *w = win_slot(s, chunk_id);

	if (!w && win_extend(s, chunk_id))
		w = win_slot(s, chunk_id);
	if (!w)
		return sonde__u64map_put(&tb->chunks, chunk_key(seq, chunk_id), off);
	if (*w == TBUF_WIN_NONE)
		s->win_present++;
	*w = off;
	/* one place per chunk: the window extended over an id the table held */
	if (u64map_count(&tb->chunks))
		sonde__u64map_del(&tb->chunks, chunk_key(seq, chunk_id));
	return 0;
}

/* Where chunk_id of sequence seq is stored: true and *off, or false. */
static bool idx_get(const struct tbuf *tb, uint16_t seq, uint32_t chunk_id, size_t *off)
{
	const uint32_t *w = win_slot(&tb->seqs[seq], chunk_id);
	const uint64_t *v;

	if (w && *w != TBUF_WIN_NONE) {
		*off = *w;
		return true;
	}
	if (!u64map_count(&tb->chunks) ||
	    !(v = sonde__u64map_get(&tb->chunks, chunk_key(seq, chunk_id))))
		return false;
	*off = (size_t)*v;
	return true;
}

/* Forgets chunk_id of sequence seq if the index has it at off (the record leaving). */
static void idx_del(struct tbuf *tb, uint16_t seq, uint32_t chunk_id, size_t off)
{
	struct tbuf_seq *s = &tb->seqs[seq];
	uint32_t *w = win_slot(s, chunk_id);
	uint64_t *v;

	if (w && *w == off) {
		*w = TBUF_WIN_NONE;
		s->win_present--;
		win_trim(s);
		return;
	}
	if (u64map_count(&tb->chunks) &&
	    (v = sonde__u64map_get(&tb->chunks, chunk_key(seq, chunk_id))) && *v == off)
		sonde__u64map_del(&tb->chunks, chunk_key(seq, chunk_id));
}

/* Whether off is the start of a live chunk record of (seq, chunk_id). */
static bool live_rec(const struct tbuf *tb, size_t off, uint16_t seq, uint32_t chunk_id)
{
	size_t pos = tb->rd, left = tb->used;

	while (left > 0) {
		const struct rec *r = rec_at(tb, pos);
		size_t n = rec_size(r);
		if (pos == off)
			return r->kind == REC_CHUNK && r->seq == seq && r->chunk_id == chunk_id;
		left -= n;
		pos = pos + n == tb->size ? 0 : pos + n;
	}
	return false;
}

bool sonde__tbuf_index_ok(const struct tbuf *tb)
{
	size_t pos = 0;
	uint64_t key, val;

	for (size_t i = 0; i < tb->nseqs; i++) {
		const struct tbuf_seq *s = &tb->seqs[i];
		uint32_t present = 0;
		if (s->win_len > s->win_cap || (s->win_len && s->win[s->win_head] == TBUF_WIN_NONE))
			return false;
		for (uint32_t k = 0; k < s->win_len; k++) {
			uint32_t off = s->win[(s->win_head + k) & (s->win_cap - 1)];
			if (off == TBUF_WIN_NONE)
				continue;
			present++;
			if (!live_rec(tb, off, (uint16_t)i, s->win_base + k))
				return false;
		}
		if (present != s->win_present)
			return false;
	}
	while (sonde__u64map_next(&tb->chunks, &pos, &key, &val)) {
		if (key >> 32 >= tb->nseqs ||
		    !live_rec(tb, (size_t)val, (uint16_t)(key >> 32), (uint32_t)key))
			return false; /* a dangling entry */
		const uint32_t *w = win_slot(&tb->seqs[key >> 32], (uint32_t)key);
		if (w && *w != TBUF_WIN_NONE)
			return false; /* a chunk in both places */
	}
	return true;
}

/* ------------------------------------------------------------------ records */

/* Drops the record at rd from the FIFO (consumed, or overwritten). */
static void pop_rec(struct tbuf *tb)
{
	struct rec *r = rec_at(tb, tb->rd);
	size_t n = rec_size(r);

	if (r->kind == REC_CHUNK) {
		idx_del(tb, r->seq, r->chunk_id, tb->rd);
		if (r->frags_read < r->count) {
			tb->st.chunks_overwritten++;
			tb->st.bytes_overwritten += n;
			tb->seqs[r->seq].loss = true;
		}
	}
	tb->used -= n;
	tb->rd += n;
	if (tb->rd == tb->size)
		tb->rd = 0;
	/* The header at rd is the next one read, when the next chunk needs room or the next
	 * packet is read: in a ring larger than the caches (or written around them) that read
	 * misses, a fifth of the service's CPU with four producers on 4 KiB chunks (`perf` on
	 * trace_bench --case 4). Fetching it now, a chunk ahead, hides the miss. */
	if (tb->used)
		__builtin_prefetch(tb->data + tb->rd);
}

/* Makes `need` contiguous bytes free at wr. Returns false if the chunk must be dropped. */
static bool make_room(struct tbuf *tb, size_t need)
{
	for (;;) {
		if (tb->used == 0)
			tb->rd = tb->wr = 0;
		bool linear = tb->used == 0 || tb->wr > tb->rd;
		size_t contig = linear ? tb->size - tb->wr : tb->rd - tb->wr;
		if (contig >= need)
			return true;
		if (tb->discard) {
			tb->discard_full = true;
			return false;
		}
		if (linear) {
			struct rec *pad = rec_at(tb, tb->wr);
			memset(pad, 0, REC_HDR);
			pad->kind = REC_PAD;
			pad->payload_len = (uint16_t)(contig - REC_HDR);
			tb->used += contig;
			tb->st.padding_bytes_written += contig;
			tb->st.write_wrap_count++;
			tb->wr = 0;
			continue;
		}
		pop_rec(tb);
	}
}

/* Writes the record h with its payload at r (16-byte aligned) with non-temporal stores,
 * the padding up to the next 16 bytes zeroed. In a ring larger than the caches a record
 * is evicted long before a reader gets to it, so a plain copy into it pays twice for
 * nothing: it reads each destination line from memory before overwriting it, and it
 * pushes out of the cache the producers' shared memory, which the producers are writing
 * and the service reads next (`perf` on trace_bench with four producers on 32 KiB
 * chunks: 90 % of the service's CPU in that copy). The source is read with plain loads,
 * never past len. The closing fence orders these stores with the plain stores that
 * follow, should another thread (the file writer) ever read the ring. */
static void stream_rec(struct rec *r, const struct rec *h, const uint8_t *payload, size_t len)
{
#if defined(__SSE2__)
	__m128i *d = (__m128i *)(void *)r;
	size_t i = 0;

	_mm_stream_si128(d++, _mm_loadu_si128((const __m128i *)(const void *)h));
	for (; i + 64 <= len; i += 64, d += 4) {
		const __m128i *sp = (const __m128i *)(const void *)(payload + i);
		__m128i a = _mm_loadu_si128(sp), b = _mm_loadu_si128(sp + 1);
		__m128i c = _mm_loadu_si128(sp + 2), e = _mm_loadu_si128(sp + 3);
		_mm_stream_si128(d, a);
		_mm_stream_si128(d + 1, b);
		_mm_stream_si128(d + 2, c);
		_mm_stream_si128(d + 3, e);
	}
	for (; i + 16 <= len; i += 16, d++)
		_mm_stream_si128(d, _mm_loadu_si128((const __m128i *)(const void *)(payload + i)));
	if (i < len) {
		uint8_t last[16] = {0};
		memcpy(last, payload + i, len - i);
		_mm_stream_si128(d, _mm_loadu_si128((const __m128i *)(const void *)last));
	}
	_mm_sfence();
#else
	*r = *h;
	memcpy(r + 1, payload, len);
#endif
}

static void append_rec(struct tbuf *tb, int seq, const struct smb_chunk_info *ci,
		       const uint8_t *payload, size_t len, uint16_t frags_read, uint16_t read_off)
{
	size_t need = (REC_HDR + len + 15) & ~(size_t)15;
	struct rec *r;

	if (tb->discard_full || !make_room(tb, need)) {
		tb->st.chunks_discarded++;
		return;
	}
	r = rec_at(tb, tb->wr);
	struct rec h = {.seq = (uint16_t)seq,
			.payload_len = (uint16_t)len,
			.chunk_id = ci->chunk_id,
			.count = ci->count,
			.frags_read = frags_read,
			.read_off = read_off,
			.flags = ci->flags,
			.kind = REC_CHUNK};
	if (tb->stream) {
		stream_rec(r, &h, payload, len);
	} else {
		*r = h;
		memcpy(r + 1, payload, len);
	}
	if (idx_put(tb, (uint16_t)seq, ci->chunk_id, (uint32_t)tb->wr) < 0) {
		r->frags_read = r->count; /* unindexed: still read in order, never patched */
		tb->st.abi_violations++;
	}
	tb->wr += need;
	tb->used += need;
	if (tb->wr == tb->size)
		tb->wr = 0;
	tb->st.chunks_written++;
	tb->st.bytes_written += need;
}

/* A chunk id seen again (§4.7): keep the copy that grew, reject shrinking or flag loss. */
static void recommit(struct tbuf *tb, struct rec *r, const struct smb_chunk_info *ci,
		     const uint8_t *payload, size_t len)
{
	if (ci->count == r->count)
		return;
	if (ci->count < r->count || (r->flags & ~ci->flags) || len != r->payload_len) {
		tb->st.abi_violations++;
		return;
	}
	memcpy(r + 1, payload, len);
	r->count = ci->count;
	r->flags = ci->flags;
	tb->st.chunks_rewritten++;
}

void sonde__tbuf_copy_chunk(struct tbuf *tb, uint32_t producer_id, int32_t uid, int32_t pid,
		     const struct smb_chunk_info *ci, const uint8_t *payload, size_t len)
{
	struct tbuf_ident who = {.uid = uid, .pid = pid};

	sonde__tbuf_copy_chunk_ident(tb, producer_id, &who, ci, payload, len);
}

void sonde__tbuf_copy_chunk_remote(struct tbuf *tb, uint32_t producer_id,
				   const struct smb_chunk_info *ci, const uint8_t *payload,
				   size_t len)
{
	struct tbuf_ident who = {.uid_unknown = true};

	sonde__tbuf_copy_chunk_ident(tb, producer_id, &who, ci, payload, len);
}

void sonde__tbuf_copy_chunk_ident(struct tbuf *tb, uint32_t producer_id,
				  const struct tbuf_ident *who, const struct smb_chunk_info *ci,
				  const uint8_t *payload, size_t len)
{
	size_t cap = tb->size < 65535 ? tb->size : 65535;
	struct tbuf_seq *s;
	size_t off;
	int seq;

	if (tb->sealed) {
		tb->st.chunks_discarded++;
		return;
	}
	if (((REC_HDR + len + 15) & ~(size_t)15) > cap || ci->writer_id == 0 ||
	    ci->writer_id > SMB_MAX_WRITER_ID) {
		tb->st.abi_violations++;
		return;
	}
	seq = seq_get(tb, producer_id, ci->writer_id, who);
	if (seq < 0) {
		tb->st.chunks_discarded++;
		return;
	}
	s = &tb->seqs[seq];
	if (!s->has_newest || (int32_t)(ci->chunk_id - s->newest_chunk_id) > 0) {
		/* the common case, a chunk newer than any copied: it cannot be stored yet */
		s->has_newest = true;
		s->newest_chunk_id = ci->chunk_id;
		append_rec(tb, seq, ci, payload, len, 0, 0);
		return;
	}
	if (idx_get(tb, (uint16_t)seq, ci->chunk_id, &off)) {
		recommit(tb, rec_at(tb, off), ci, payload, len);
		return;
	}
	if (ci->chunk_id != s->newest_chunk_id)
		tb->st.chunks_committed_out_of_order++;
	if (s->has_last && s->last_chunk_id == ci->chunk_id) {
		/* an earlier copy was read and has left the ring: keep only what is new */
		if (ci->count > s->last_frags)
			append_rec(tb, seq, ci, payload, len, s->last_frags, s->last_off);
		return;
	}
	append_rec(tb, seq, ci, payload, len, 0, 0);
}

static struct rec *find_rec(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id,
			    uint32_t chunk_id)
{
	uint64_t *v = sonde__u64map_get(&tb->seqmap, ((uint64_t)producer_id << 16) | writer_id);
	size_t off;

	if (!v || !idx_get(tb, (uint16_t)*v, chunk_id, &off))
		return NULL;
	return rec_at(tb, off);
}

int sonde__tbuf_patch(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id, uint32_t chunk_id,
	       uint32_t off, const uint8_t data[4])
{
	struct rec *r = tb->sealed ? NULL : find_rec(tb, producer_id, writer_id, chunk_id);

	if (!r) {
		tb->st.patches_failed++;
		return -ENOENT;
	}
	if ((uint64_t)off + 4 > r->payload_len) {
		tb->st.patches_failed++;
		return -ERANGE;
	}
	memcpy((uint8_t *)(r + 1) + off, data, 4);
	tb->st.patches_succeeded++;
	return 0;
}

void sonde__tbuf_patch_done(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id, uint32_t chunk_id)
{
	/* sealed, its patches were refused: the chunk stays unreadable */
	struct rec *r = tb->sealed ? NULL : find_rec(tb, producer_id, writer_id, chunk_id);

	if (r)
		r->flags &= (uint8_t)~SMB_FLAG_NEEDS_PATCHING;
}

/* ------------------------------------------------------------------ reading */

/* Top-level TracePacket fields only the service may write (§8), as a bitmap over field
 * numbers 0..191, so validation costs one bit test per field. */
#define RBIT(n, w) ((n) / 64 == (w) ? 1ull << ((n) % 64) : 0)
#define RWORD(w)                                                                                   \
	(RBIT(PF_PACKET_TRUSTED_UID, w) | RBIT(PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, w) |          \
	 RBIT(PF_PACKET_TRACE_CONFIG, w) | RBIT(PF_PACKET_TRACE_STATS, w) |                        \
	 RBIT(PF_PACKET_COMPRESSED_PACKETS, w) | RBIT(PF_PACKET_SYNCHRONIZATION_MARKER, w) |       \
	 RBIT(PF_PACKET_TRUSTED_PID, w) | RBIT(PF_PACKET_MACHINE_ID, w) |                          \
	 RBIT(PF_PACKET_SERVICE_EVENT, w) | RBIT(PF_PACKET_TRACE_PROVENANCE, w) |                  \
	 RBIT(PF_PACKET_PROTOVMS, w) | RBIT(PF_PACKET_ZSTD_COMPRESSED_PACKETS, w))
static const uint64_t reserved_bits[3] = {RWORD(0), RWORD(1), RWORD(2)};

static bool reserved(uint32_t num)
{
	return num < 192 && (reserved_bits[num / 64] >> (num % 64) & 1);
}

/* A packet's bytes as its slices hold them (a packet that spans chunks is in pieces), read
 * as one without joining them: the validator only reads tags and values, and skips each
 * length-delimited body, so only a tag and value that straddle two slices are gathered,
 * into a window of 2 x PB_VARINT_MAX bytes. */
struct slice_rd {
	const struct iovec *iov;
	const uint8_t *p, *end; /* the unread bytes of slice *iov */
	size_t left;		/* the packet's unread bytes, in all slices */
};

/* Up to 2 x PB_VARINT_MAX bytes from the read position on (fewer only at the packet's
 * end), in place or gathered into tmp; *len is their count. */
static const uint8_t *rd_window(struct slice_rd *r, uint8_t *tmp, size_t *len)
{
	size_t want = r->left < 2 * PB_VARINT_MAX ? r->left : 2 * PB_VARINT_MAX;
	const struct iovec *v = r->iov;
	const uint8_t *p = r->p, *end = r->end;

	*len = want;
	if ((size_t)(end - p) >= want)
		return p;
	for (size_t got = 0; got < want;) {
		if (p == end) {
			v++;
			p = v->iov_base;
			end = p + v->iov_len;
			continue;
		}
		size_t t = (size_t)(end - p) < want - got ? (size_t)(end - p) : want - got;
		memcpy(tmp + got, p, t);
		got += t;
		p += t;
	}
	return tmp;
}

/* Moves the read position k bytes on (k <= left). */
static void rd_skip(struct slice_rd *r, size_t k)
{
	r->left -= k;
	while (k > (size_t)(r->end - r->p)) {
		k -= (size_t)(r->end - r->p);
		r->iov++;
		r->p = r->iov->iov_base;
		r->end = r->p + r->iov->iov_len;
	}
	r->p += k;
}

/* Checks the packet of total bytes in the slices from iov on (§4.8): a sequence of whole
 * top-level fields, none of them reserved to the service. */
static bool packet_slices_valid(const struct iovec *iov, size_t total)
{
	if (!total)
		return true; /* and the slice may be NULL, which takes no + 0 */
	struct slice_rd r = {iov, iov[0].iov_base, (const uint8_t *)iov[0].iov_base + iov[0].iov_len,
			     total};
	uint8_t tmp[2 * PB_VARINT_MAX];

	while (r.left) {
		size_t wlen, h, k;
		const uint8_t *w = rd_window(&r, tmp, &wlen);
		uint64_t tag, v, body;
		if (!(h = sonde__pb_varint_decode(w, w + wlen, &tag)))
			return false;
		/* A tag of 2^32 or more has no field number in protobuf (1..2^29-1); readers
		 * that truncate such a tag to 32 bits would see a reserved field in it. */
		if (tag >> 3 == 0 || tag >> 3 > 0x1FFFFFFF || reserved((uint32_t)(tag >> 3)))
			return false;
		switch (tag & 7) {
		case PB_VARINT:
			if (!(k = sonde__pb_varint_decode(w + h, w + wlen, &v)))
				return false;
			h += k;
			body = 0;
			break;
		case PB_FIXED64:
			body = 8;
			break;
		case PB_FIXED32:
			body = 4;
			break;
		case PB_LEN:
			if (!(k = sonde__pb_varint_decode(w + h, w + wlen, &body)) || body > 0x0FFFFFFF)
				return false;
			h += k;
			break;
		default:
			return false;
		}
		if (h > r.left || body > r.left - h)
			return false;
		rd_skip(&r, h + (size_t)body);
	}
	return true;
}

bool sonde__tbuf_packet_valid(const uint8_t *p, size_t len)
{
	struct iovec one = {(void *)p, len};

	return packet_slices_valid(&one, len);
}

/* A fragment inside a record's payload. */
struct frag {
	const uint8_t *p;
	uint32_t len;
	uint16_t next_off; /* payload offset just past it */
};

/* Parses the fragment at r->read_off. Returns 1 ok, 0 for a drop marker, -1 for an ABI
 * violation (the rest of the chunk is unusable). */
static int parse_frag(const struct rec *r, struct frag *fr)
{
	const uint8_t *base = (const uint8_t *)(r + 1);
	const uint8_t *p = base + r->read_off, *end = base + r->payload_len;
	uint32_t size;
	size_t h;

	if (r->read_off >= r->payload_len)
		return -1;
	h = smb_frag_size(p, end, &size);
	if (!h)
		return -1;
	if (size == SMB_PACKET_SIZE_DROP)
		return 0;
	if (size > (size_t)(end - p) - h)
		return -1;
	fr->p = p + h;
	fr->len = size;
	fr->next_off = (uint16_t)(r->read_off + h + size);
	return 1;
}

static void consume_rest(struct rec *r)
{
	r->frags_read = r->count;
	r->read_off = r->payload_len;
}

static bool iov_push(struct tbuf *tb, size_t *n, const void *p, size_t len)
{
	if (sonde__array_grow(&tb->iov, &tb->iov_cap, *n + 1, sizeof(*tb->iov), 64) < 0)
		return false;
	tb->iov[(*n)++] = (struct iovec){(void *)p, len};
	return true;
}

static void build_suffix(struct tbuf_seq *s)
{
	struct buf b = {.data = s->suffix, .cap = sizeof(s->suffix)};

	/* appended after the producer's bytes: last value wins, so these are authoritative */
	if (!s->uid_unknown)
		sonde__pb_put_varint(&b, PF_PACKET_TRUSTED_UID, (uint64_t)(uint32_t)s->uid);
	sonde__pb_put_varint(&b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, s->trusted_id);
	if (s->pid > 0)
		sonde__pb_put_varint(&b, PF_PACKET_TRUSTED_PID, (uint64_t)s->pid);
	if (s->machine_id)
		sonde__pb_put_varint(&b, PF_PACKET_MACHINE_ID, s->machine_id);
	s->suffix_len = (uint8_t)b.len;
}

struct rd_ctx {
	tbuf_packet_fn fn;
	void *ctx;
	uint32_t *next_seq_id;
	uint64_t *invalid;
	bool stop;
};

static void emit(struct tbuf *tb, struct rd_ctx *c, struct tbuf_seq *s, size_t n, size_t total)
{
	if (total == 0)
		return; /* empty packets are skipped */
	if (!packet_slices_valid(tb->iov, total)) {
		(*c->invalid)++;
		return;
	}
	if (!s->trusted_id) {
		s->trusted_id = (*c->next_seq_id)++;
		s->loss = true; /* v14 marks the first packet of every sequence */
		build_suffix(s);
	}
	const uint8_t *suffix = s->suffix;
	size_t slen = s->suffix_len;
	if (s->loss) {
		static const uint8_t dropped[] = {0xD0, 0x02, 0x01}; /* previous_packet_dropped */
		memcpy(tb->suffix, s->suffix, slen);
		memcpy(tb->suffix + slen, dropped, sizeof(dropped));
		suffix = tb->suffix;
		slen += sizeof(dropped);
		s->loss = false;
	}
	if (!iov_push(tb, &n, suffix, slen))
		return;
	tb->st.bytes_read += total;
	if (c->fn(c->ctx, tb->iov, n, total + slen))
		c->stop = true;
}

/* Gathers the continuation of a packet whose last fragment is in r: chunks chunk_id+1...
 * of the same sequence. Returns 1 when complete (slices appended to tb->iov), 0 when a
 * piece is missing or unpatched (retry later), -1 when the chain is broken. */
static int gather(struct tbuf *tb, const struct rec *r, size_t *n, size_t *total)
{
	uint32_t id = r->chunk_id;

	for (int hops = 0; hops < 65536; hops++) {
		size_t off;
		if (!idx_get(tb, r->seq, ++id, &off))
			return 0;
		struct rec *c = rec_at(tb, off);
		struct frag fr;
		if (c->flags & SMB_FLAG_NEEDS_PATCHING)
			return 0;
		if (!(c->flags & SMB_FLAG_FIRST_PACKET_CONTINUES) || c->frags_read || !c->count ||
		    parse_frag(c, &fr) != 1)
			return -1;
		if (!iov_push(tb, n, fr.p, fr.len))
			return -1;
		*total += fr.len;
		if (!(c->count == 1 && (c->flags & SMB_FLAG_LAST_PACKET_CONTINUES)))
			return 1;
	}
	return -1;
}

/* Marks the continuation chunks of a gathered packet as having their first fragment read. */
static void consume_chain(struct tbuf *tb, const struct rec *r, size_t pieces)
{
	uint32_t id = r->chunk_id;

	for (size_t i = 0; i < pieces; i++) {
		size_t off = 0;
		idx_get(tb, r->seq, ++id, &off); /* gather() found each */
		struct rec *c = rec_at(tb, off);
		struct frag fr;
		parse_frag(c, &fr);
		c->frags_read = 1;
		c->read_off = fr.next_off;
		tb->st.readaheads_succeeded++;
	}
}

/* Reads what is readable of one record. Returns false if its sequence must wait. */
static bool read_rec(struct tbuf *tb, struct rd_ctx *c, struct rec *r)
{
	struct tbuf_seq *s = &tb->seqs[r->seq];

	if (r->flags & SMB_FLAG_NEEDS_PATCHING)
		return false;
	if (s->has_last && r->chunk_id != s->last_chunk_id && r->chunk_id != s->last_chunk_id + 1)
		s->loss = true;
	while (r->frags_read < r->count && !c->stop) {
		struct frag fr;
		int rc = parse_frag(r, &fr);
		if (rc <= 0) {
			if (rc < 0)
				tb->st.abi_violations++;
			else
				tb->st.trace_writer_packet_loss++;
			s->loss = true;
			consume_rest(r);
			break;
		}
		bool first = r->frags_read == 0, last = r->frags_read + 1 == r->count;
		if (first && (r->flags & SMB_FLAG_FIRST_PACKET_CONTINUES)) {
			s->loss = true; /* its beginning is gone */
		} else {
			size_t n = 0, total = fr.len;
			iov_push(tb, &n, fr.p, fr.len);
			if (last && (r->flags & SMB_FLAG_LAST_PACKET_CONTINUES)) {
				int g = gather(tb, r, &n, &total);
				if (g == 0) {
					tb->st.readaheads_failed++;
					return false;
				}
				if (g < 0) {
					s->loss = true;
					n = 0;
				} else {
					consume_chain(tb, r, n - 1);
				}
			}
			if (n)
				emit(tb, c, s, n, total);
		}
		r->frags_read++;
		r->read_off = fr.next_off;
	}
	if (r->frags_read >= r->count)
		tb->st.chunks_read++;
	s->has_last = true;
	s->last_chunk_id = r->chunk_id;
	s->last_frags = r->frags_read;
	s->last_off = r->read_off;
	return true;
}

int sonde__tbuf_read(struct tbuf *tb, tbuf_packet_fn fn, void *ctx, uint32_t *next_seq_id,
	      uint64_t *invalid)
{
	struct rd_ctx c = {fn, ctx, next_seq_id, invalid, false};
	size_t pos = tb->rd, left = tb->used;
	bool at_front = true; /* every record before pos has been fully consumed */

	tb->pass++;
	while (left > 0 && !c.stop) {
		struct rec *r = rec_at(tb, pos);
		size_t n = rec_size(r);
		if (r->kind == REC_CHUNK && r->frags_read < r->count) {
			struct tbuf_seq *s = &tb->seqs[r->seq];
			if (s->blocked_pass != tb->pass && !read_rec(tb, &c, r))
				s->blocked_pass = tb->pass;
		}
		bool done = r->kind != REC_CHUNK || r->frags_read >= r->count;
		left -= n;
		pos = pos + n == tb->size ? 0 : pos + n;
		if (at_front && done)
			pop_rec(tb);
		else
			at_front = false;
	}
	return c.stop ? 1 : 0;
}
