/* Trace writer: packet framing, fragmentation and patching (see writer.h). */
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>

#include "base/pb.h"
#include "client/writer.h"
#include "ipc/protos.h"
#include "ipc/smb.h"

/* Start a packet in the current chunk only if this much payload is left: a fragment of a
 * few bytes costs a 4-byte prefix and, later, a reassembly. */
enum { MIN_FRAGMENT_ROOM = SMB_PACKET_HDR_SIZE + 8 };

void sonde__tw_init(struct sonde_trace_writer *w, struct arbiter *arb, uint16_t writer_id,
	     uint32_t target_buffer, uint32_t stall_ms)
{
	memset(w, 0, offsetof(struct sonde_trace_writer, scratch));
	w->arb = arb;
	w->writer_id = writer_id;
	w->target_buffer = target_buffer;
	w->stall_ms = stall_ms;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Takes a free chunk, waiting up to stall_ms for the service to free one. */
static bool acquire(struct sonde_trace_writer *w, struct arb_chunk *c, bool may_stall)
{
	struct arbiter *a = w->arb;

	if (!a || !a->base)
		return false;
	if (sonde__arbiter_try_acquire(a, c))
		return true;
	if (!may_stall || !w->stall_ms)
		return false;
	/* the service frees chunks only after it sees them committed */
	sonde__arbiter_commit(a, 0);
	uint64_t deadline = w->stall_ms == UINT32_MAX ? UINT64_MAX : now_ms() + w->stall_ms;
	for (unsigned attempt = 0;; attempt++) {
		if (sonde__arbiter_try_acquire(a, c))
			return true;
		if (a->send_error || now_ms() >= deadline)
			return false;
		if (attempt < 16) {
			sched_yield();
		} else {
			sonde__arbiter_commit(a, 0); /* also pushes out queued bytes */
			usleep(attempt < 64 ? 20 : 200);
		}
	}
}

static void publish_count(struct sonde_trace_writer *w)
{
	smb_chunk_set_packets(w->cur.base, w->count, w->flags);
}

/* Makes chunk c the current one; continues the open packet when `cont`. */
static void use_chunk(struct sonde_trace_writer *w, const struct arb_chunk *c, bool cont)
{
	w->cur = *c;
	w->cur_chunk_id = w->next_chunk_id++;
	w->have_chunk = true;
	w->dropping = false;
	w->wp = c->payload;
	w->end = c->payload + c->payload_size;
	w->flags = cont ? SMB_FLAG_FIRST_PACKET_CONTINUES : 0;
	w->count = 0;
	smb_chunk_init_hdr(c->base, w->cur_chunk_id, w->writer_id, w->flags);
	w->chunks_used++;
}

/* Out of chunks: the packets go to scratch until a chunk is free again. */
static void use_scratch(struct sonde_trace_writer *w)
{
	/* What is batched must reach the service now, the chunk just given up included. A
	 * batch leaves once it holds an eighth of the SMB, and a writer that drops returns no
	 * more chunks to fill it: nothing would be freed for it until the loop thread's next
	 * commit, up to its poll timeout later. (The SDK's IPC thread, likewise, sends a
	 * commit as soon as a chunk is returned.) */
	if (w->arb && w->arb->base)
		sonde__arbiter_commit_batched(w->arb);
	w->have_chunk = false;
	w->dropping = true;
	w->lost_since_chunk = true;
	w->wp = w->scratch;
	w->end = w->scratch + sizeof(w->scratch);
}

/* Opens a fragment at wp: counts it (before writing, as the ABI says) and reserves its
 * size prefix. The caller guarantees 4 bytes of room. */
static void open_fragment(struct sonde_trace_writer *w)
{
	if (!w->dropping) {
		w->count++;
		publish_count(w);
	}
	w->frag_size = w->wp;
	memset(w->wp, 0, SMB_PACKET_HDR_SIZE);
	w->wp += SMB_PACKET_HDR_SIZE;
	w->frag_start = w->wp;
}

static void close_fragment(struct sonde_trace_writer *w, uint32_t size)
{
	sonde__pb_write_redundant_len(w->frag_size, size);
}

/* Turns the open lengths living in the current chunk into patches. */
static void open_lengths_to_patches(struct sonde_trace_writer *w)
{
	for (int i = 0; i < w->depth; i++) {
		struct tw_nested *n = &w->stack[i];
		if (n->slot >= 0 || n->chunk_id != w->cur_chunk_id)
			continue;
		int s = 0;
		while (s < TW_MAX_PATCHES && w->slots[s].state != TW_PATCH_FREE)
			s++;
		if (s == TW_MAX_PATCHES)
			s = 0; /* cannot happen: at most TW_MAX_NESTING pending + ready handed */
		w->slots[s].state = TW_PATCH_PENDING;
		w->slots[s].p = (struct arb_patch){
			.chunk_id = w->cur_chunk_id,
			.target_buffer = w->target_buffer,
			.writer_id = w->writer_id,
			.offset = (uint16_t)(n->field - w->cur.payload),
		};
		n->slot = s;
		n->field = NULL;
		w->flags |= SMB_FLAG_NEEDS_PATCHING;
	}
}

/* Hands ready patches to the arbiter, each marked with whether more are pending for the
 * same chunk. */
static void hand_over_patches(struct sonde_trace_writer *w)
{
	struct arb_patch ready[TW_MAX_PATCHES];
	size_t n = 0;

	if (!w->n_ready || !w->arb)
		return;
	for (int s = 0; s < TW_MAX_PATCHES; s++) {
		if (w->slots[s].state != TW_PATCH_READY)
			continue;
		struct arb_patch p = w->slots[s].p;
		p.has_more = false;
		for (int t = 0; t < TW_MAX_PATCHES; t++)
			if (w->slots[t].state == TW_PATCH_PENDING &&
			    w->slots[t].p.chunk_id == p.chunk_id)
				p.has_more = true;
		ready[n++] = p;
		w->slots[s].state = TW_PATCH_FREE;
	}
	/* keep a chunk's patches adjacent so they travel in one ChunkToPatch entry */
	for (size_t i = 1; i < n; i++) {
		struct arb_patch p = ready[i];
		size_t j = i;
		while (j > 0 && ready[j - 1].chunk_id > p.chunk_id) {
			ready[j] = ready[j - 1];
			j--;
		}
		ready[j] = p;
	}
	w->n_ready = 0;
	sonde__arbiter_add_patches(w->arb, ready, n);
}

static void return_current(struct sonde_trace_writer *w)
{
	publish_count(w);
	sonde__arbiter_return_chunk(w->arb, &w->cur, w->writer_id, w->cur_chunk_id, w->target_buffer);
	w->have_chunk = false;
}

/* The writer gave up on the open packet: tell the service to drop it, and release every
 * pending length so that chunks waiting for patches do not block the sequence. */
static void abandon_packet(struct sonde_trace_writer *w)
{
	close_fragment(w, SMB_PACKET_SIZE_DROP);
	for (int s = 0; s < TW_MAX_PATCHES; s++)
		if (w->slots[s].state == TW_PATCH_PENDING) {
			w->slots[s].state = TW_PATCH_READY;
			w->n_ready++;
		}
	for (int i = 0; i < w->depth; i++) {
		w->stack[i].slot = -1;
		w->stack[i].field = w->scratch; /* later length writes land in scratch */
		w->stack[i].chunk_id = w->cur_chunk_id - 1;
	}
	return_current(w);
	hand_over_patches(w);
}

/* The current chunk is full in the middle of a packet: continue in a new one. */
static void next_chunk_mid_packet(struct sonde_trace_writer *w)
{
	struct arb_chunk c;

	if (w->dropping) {
		w->wp = w->scratch; /* discard: keep overwriting the scratch area */
		return;
	}
	if (!acquire(w, &c, true)) {
		abandon_packet(w);
		use_scratch(w);
		return;
	}
	close_fragment(w, (uint32_t)(w->wp - w->frag_start));
	w->flags |= SMB_FLAG_LAST_PACKET_CONTINUES;
	open_lengths_to_patches(w);
	return_current(w);
	hand_over_patches(w);
	use_chunk(w, &c, true);
	open_fragment(w);
}

void sonde_trace_writer__append(struct sonde_trace_writer *w, const void *data, size_t n)
{
	const uint8_t *p = data;

	if (!w->in_packet)
		return;
	w->total += n;
	while (n) {
		size_t room = (size_t)(w->end - w->wp);
		if (!room) {
			next_chunk_mid_packet(w);
			continue;
		}
		size_t k = n < room ? n : room;
		memcpy(w->wp, p, k);
		w->wp += k;
		p += k;
		n -= k;
	}
}

int sonde_trace_writer__begin_packet(struct sonde_trace_writer *w)
{
	struct arb_chunk c;

	if (w->in_packet)
		sonde_trace_writer__end_packet(w);
	if (w->have_chunk &&
	    ((size_t)(w->end - w->wp) < MIN_FRAGMENT_ROOM || w->count >= SMB_MAX_PACKET_COUNT)) {
		return_current(w);
		hand_over_patches(w);
	}
	if (!w->have_chunk) {
		/* while dropping, retry without stalling: one wait per loss episode */
		if (acquire(w, &c, !w->dropping))
			use_chunk(w, &c, false);
		else
			use_scratch(w);
	}
	w->in_packet = true;
	w->total = 0;
	w->depth = 0;
	open_fragment(w);
	if (w->dropping)
		return -SONDE_E_LIMIT;
	if (w->lost_since_chunk) {
		/* The first packet after a loss says so itself, as the SDK's writers do. Chunk
		 * ids stay consecutive: a service that follows Perfetto's reads a sequence
		 * only up to its first gap in chunk ids until the gap is filled, so a skipped
		 * id would hide everything written after the loss. */
		sonde_trace_writer__append_varint(w, PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
		w->lost_since_chunk = false;
	}
	return 0;
}

void sonde_trace_writer__end_packet(struct sonde_trace_writer *w)
{
	if (!w->in_packet)
		return;
	while (w->depth > 0)
		sonde_trace_writer__end_nested(w);
	w->in_packet = false;
	if (w->dropping) {
		w->packets_lost++;
		return;
	}
	close_fragment(w, (uint32_t)(w->wp - w->frag_start));
	w->packets_written++;
	if (w->n_ready)
		hand_over_patches(w);
}

/* Makes sure n contiguous bytes are available at wp (n <= minimum chunk payload). */
static void reserve_contiguous(struct sonde_trace_writer *w, size_t n)
{
	while ((size_t)(w->end - w->wp) < n) {
		if (w->dropping) {
			w->wp = w->scratch;
			return;
		}
		next_chunk_mid_packet(w);
	}
}

int sonde_trace_writer__begin_nested(struct sonde_trace_writer *w, uint32_t field)
{
	uint8_t tag[PB_VARINT_MAX];

	if (!w->in_packet)
		return -SONDE_E_STATE;
	if (w->depth >= TW_MAX_NESTING)
		return -SONDE_E_LIMIT;
	sonde_trace_writer__append(w, tag, sonde__pb_varint_encode(tag, ((uint64_t)field << 3) | PB_LEN));
	reserve_contiguous(w, PB_NESTED_LEN_SIZE);
	struct tw_nested *n = &w->stack[w->depth++];
	n->field = w->wp;
	n->slot = -1;
	n->chunk_id = w->cur_chunk_id;
	memset(w->wp, 0, PB_NESTED_LEN_SIZE);
	w->wp += PB_NESTED_LEN_SIZE;
	w->total += PB_NESTED_LEN_SIZE;
	n->begin_total = w->total;
	return 0;
}

int sonde_trace_writer__end_nested(struct sonde_trace_writer *w)
{
	if (!w->in_packet || w->depth == 0)
		return -SONDE_E_STATE;
	struct tw_nested *n = &w->stack[--w->depth];
	uint64_t size = w->total - n->begin_total;
	uint8_t len[4];

	sonde__pb_write_redundant_len(len, size < (1u << 28) ? (uint32_t)size : 0);
	if (n->slot >= 0) {
		memcpy(w->slots[n->slot].p.data, len, 4);
		w->slots[n->slot].state = TW_PATCH_READY;
		w->n_ready++;
	} else if (n->field) {
		memcpy(n->field, len, 4);
	}
	return size < (1u << 28) ? 0 : -SONDE_E_RANGE;
}

void sonde_trace_writer__append_varint(struct sonde_trace_writer *w, uint32_t field, uint64_t v)
{
	uint8_t b[2 * PB_VARINT_MAX];
	size_t n = sonde__pb_varint_encode(b, ((uint64_t)field << 3) | PB_VARINT);
	n += sonde__pb_varint_encode(b + n, v);
	sonde_trace_writer__append(w, b, n);
}

void sonde_trace_writer__append_bytes(struct sonde_trace_writer *w, uint32_t field,
				      const void *data, size_t len)
{
	uint8_t b[2 * PB_VARINT_MAX];
	size_t n = sonde__pb_varint_encode(b, ((uint64_t)field << 3) | PB_LEN);
	n += sonde__pb_varint_encode(b + n, len);
	sonde_trace_writer__append(w, b, n);
	sonde_trace_writer__append(w, data, len);
}

static inline void put_redundant_len(uint8_t *p, uint32_t n)
{
	p[0] = (uint8_t)(n | 0x80);
	p[1] = (uint8_t)((n >> 7) | 0x80);
	p[2] = (uint8_t)((n >> 14) | 0x80);
	p[3] = (uint8_t)((n >> 21) & 0x7f);
}

int sonde_trace_writer__write_packet(struct sonde_trace_writer *w, const void *pkt, size_t len)
{
	/* fast path: the whole packet fits in the current chunk, so its size is final at
	 * once and the fragment is written in one go; the count is published after the bytes
	 * (release), so a scraping service never sees this fragment half written */
	if (w->have_chunk && !w->in_packet && w->count < SMB_MAX_PACKET_COUNT &&
	    (size_t)(w->end - w->wp) >= len + SMB_PACKET_HDR_SIZE + MIN_FRAGMENT_ROOM) {
		put_redundant_len(w->wp, (uint32_t)len);
		memcpy(w->wp + SMB_PACKET_HDR_SIZE, pkt, len);
		w->wp += SMB_PACKET_HDR_SIZE + len;
		w->count++;
		publish_count(w);
		w->packets_written++;
		return 0;
	}
	int r = sonde_trace_writer__begin_packet(w);
	sonde_trace_writer__append(w, pkt, len);
	sonde_trace_writer__end_packet(w);
	return r;
}

void sonde__tw_release(struct sonde_trace_writer *w)
{
	if (w->in_packet)
		sonde_trace_writer__end_packet(w);
	/* a chunk with nothing in it is kept for the next packet */
	if (w->have_chunk && w->count)
		return_current(w);
	hand_over_patches(w);
}

uint64_t sonde_trace_writer__packets_lost(const struct sonde_trace_writer *w)
{
	return w->packets_lost;
}
