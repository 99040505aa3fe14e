/* Producer-side SMB arbiter: chunk acquisition and the CommitData batch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/pb.h"
#include "client/arbiter.h"
#include "ipc/frame.h"
#include "ipc/protos.h"
#include "ipc/smb.h"

/* Split a batch so that every CommitData stays well inside one IPC frame (and, emulated,
 * within the pieces one send takes). */
enum { COMMIT_REQ_SOFT_MAX = 96 * 1024, ARB_MAX_SEGS = IPC_CHAN_MAX_IOV };

int sonde__arbiter_init(struct arbiter *a, void *base, size_t size, size_t page_size, unsigned layout,
		 arb_send_fn send, void *send_ctx)
{
	memset(a, 0, sizeof(*a));
	if (!smb_geometry_abi_ok(size, page_size) || !smb_layout_nchunks(layout))
		return -EINVAL;
	a->base = base;
	a->size = size;
	a->page_size = page_size;
	a->num_pages = size / page_size;
	a->layout = layout;
	a->send = send;
	a->send_ctx = send_ctx;
	/* Commit once an eighth of the SMB is batched: large enough that the commit costs
	 * little per chunk, small enough that the service frees chunks long before the
	 * writers run out. */
	a->commit_threshold = sonde__arbiter_total_chunks(a) / 8;
	if (!a->commit_threshold)
		a->commit_threshold = 1;
	return -pthread_mutex_init(&a->lock, NULL);
}

void sonde__arbiter_fini(struct arbiter *a)
{
	if (!a->base)
		return;
	pthread_mutex_destroy(&a->lock);
	sonde__free(a->moves);
	sonde__free(a->patches);
	sonde__free(a->segs);
	sonde__free(a->sent);
	sonde__free(a->held);
	sonde__free(a->held_end);
	sonde__buf_free(&a->req);
	a->base = NULL;
}

size_t sonde__arbiter_total_chunks(const struct arbiter *a)
{
	return a->num_pages * smb_layout_nchunks(a->layout);
}

void sonde__arbiter_lock(struct arbiter *a)
{
	pthread_mutex_lock(&a->lock);
}

void sonde__arbiter_unlock(struct arbiter *a)
{
	pthread_mutex_unlock(&a->lock);
}

static bool acquire_in_page(struct arbiter *a, size_t page, struct arb_chunk *c)
{
	uint32_t *bm = smb_page_bitmap(a->base, a->page_size, page);
	uint32_t cur = smb_bitmap_load(bm);

	if (cur == 0) {
		/* partition a free page; losing the race to another writer is fine */
		smb_try_partition(a->base, a->page_size, page, a->layout);
		cur = smb_bitmap_load(bm);
	}
	unsigned layout = smb_bitmap_layout(cur), n = smb_layout_nchunks(layout);
	for (unsigned k = 0; k < n; k++) {
		if (smb_bitmap_state(cur, k) != SMB_CHUNK_FREE)
			continue;
		/* transition directly (not smb_acquire_for_writing) to learn the layout the
		 * CAS succeeded with: chunk address and size must both come from it */
		unsigned got;
		if (!smb_chunk_transition(bm, k, SMB_CHUNK_FREE, SMB_CHUNK_BEING_WRITTEN, &got))
			continue;
		uint8_t *p = smb_chunk_ptr(a->base, a->page_size, page, got, k);
		c->base = p;
		c->payload = p + SMB_CHUNK_HDR_SIZE;
		c->payload_size =
			(uint32_t)(smb_chunk_size(a->page_size, got) - SMB_CHUNK_HDR_SIZE);
		c->page = (uint32_t)page;
		c->index = k;
		return true;
	}
	return false;
}

bool sonde__arbiter_try_acquire(struct arbiter *a, struct arb_chunk *c)
{
	size_t start = __atomic_load_n(&a->next_page, __ATOMIC_RELAXED);

	for (size_t i = 0; i < a->num_pages; i++) {
		size_t page = (start + i) % a->num_pages;
		if (acquire_in_page(a, page, c)) {
			__atomic_store_n(&a->next_page, page, __ATOMIC_RELAXED);
			return true;
		}
	}
	return false;
}

void sonde__arbiter_return_chunk(struct arbiter *a, const struct arb_chunk *c, uint16_t writer_id,
			  uint32_t chunk_id, uint32_t target_buffer)
{
	sonde__arbiter_lock(a);
	if (sonde__array_grow(&a->moves, &a->cap_moves, a->n_moves + 1, sizeof(*a->moves), 64) < 0) {
		/* cannot batch it: commit now, which needs no memory for this chunk */
		sonde__arbiter_commit_locked(a, 0);
		if (sonde__array_grow(&a->moves, &a->cap_moves, 1, sizeof(*a->moves), 64) < 0) {
			smb_mark_complete(a->base, a->page_size, c->page, c->index);
			sonde__arbiter_unlock(a);
			return;
		}
	}
	a->moves[a->n_moves++] = (struct arb_move){*c, target_buffer, chunk_id, writer_id};
	if (a->n_moves >= a->commit_threshold)
		sonde__arbiter_commit_locked(a, 0);
	sonde__arbiter_unlock(a);
}

static struct arb_move *find_batched(struct arbiter *a, const struct arb_patch *p)
{
	for (size_t i = a->n_moves; i-- > 0;) {
		struct arb_move *m = &a->moves[i];
		if (m->chunk_id == p->chunk_id && m->writer_id == p->writer_id &&
		    m->target_buffer == p->target_buffer)
			return m;
	}
	return NULL;
}

static void patch_in_place(struct arb_move *m, const struct arb_patch *p)
{
	if ((uint32_t)p->offset + 4 > m->c.payload_size)
		return;
	memcpy(m->c.payload + p->offset, p->data, 4);
	if (!p->has_more) {
		/* we still own the chunk (BeingWritten): clearing the flag is ours to do */
		struct smb_chunk_info ci = smb_chunk_read_hdr(m->c.base);
		smb_chunk_set_packets(m->c.base, ci.count, ci.flags & ~SMB_FLAG_NEEDS_PATCHING);
	}
}

void sonde__arbiter_add_patches(struct arbiter *a, const struct arb_patch *p, size_t n)
{
	if (!n)
		return;
	sonde__arbiter_lock(a);
	for (size_t i = 0; i < n; i++) {
		struct arb_move *m = find_batched(a, &p[i]);
		if (m) {
			patch_in_place(m, &p[i]);
			a->patches_direct++;
			continue;
		}
		if (sonde__array_grow(&a->patches, &a->cap_patches, a->n_patches + 1, sizeof(*a->patches),
			       64) < 0) {
			sonde_warn("producer: out of memory, dropping a patch");
			continue;
		}
		a->patches[a->n_patches++] = p[i];
	}
	sonde__arbiter_unlock(a);
}

/* Emulation: the chunk's bytes are in the request, so it is free again once the request
 * went (the service reads it there, never here): Complete -> BeingRead -> Free, the
 * service's own steps, on memory no one else maps. */
static void release_local(struct arbiter *a, const struct arb_chunk *c)
{
	struct smb_chunk_info ci;
	uint8_t *ch = smb_acquire_for_reading(a->base, a->page_size, c->page, c->index, &ci);

	if (ch)
		smb_release_read_chunk(a->base, a->page_size, c->page, c->index, ch);
}

/* Frees the held chunks whose request the socket took (all of them when sent is
 * UINT64_MAX); they are held in stream order. */
static void release_held(struct arbiter *a, uint64_t sent)
{
	size_t k = 0;

	while (k < a->n_held && a->held_end[k] <= sent)
		release_local(a, &a->held[k++]);
	if (!k)
		return;
	memmove(a->held, a->held + k, (a->n_held - k) * sizeof(*a->held));
	memmove(a->held_end, a->held_end + k, (a->n_held - k) * sizeof(*a->held_end));
	a->n_held -= k;
}

/* The encoded bytes since the last piece become one (room for it was reserved). */
static void close_seg(struct arbiter *a)
{
	if (a->req.len > a->seg_from)
		a->segs[a->n_segs++] =
			(struct arb_seg){NULL, a->seg_from, a->req.len - a->seg_from};
	a->seg_from = a->req.len;
}

/* An emulated request in pieces: gathered by the socket, not here. */
static int send_pieces(struct arbiter *a)
{
	struct iovec iov[ARB_MAX_SEGS];
	size_t len = 0;
	int r;

	close_seg(a);
	for (size_t i = 0; i < a->n_segs; i++) {
		const struct arb_seg *g = &a->segs[i];
		iov[i].iov_base = (void *)(g->ext ? g->ext : a->req.data + g->off);
		iov[i].iov_len = g->len;
		len += g->len;
	}
	uint64_t end = 0, sent = 0;
	r = a->send_iov(a->send_ctx, iov, (int)a->n_segs, len, &end, &sent);
	if (r == 0 && end > sent &&
	    sonde__array_grow(&a->held, &a->cap_held, a->n_held + a->n_sent, sizeof(*a->held),
			      64) == 0 &&
	    sonde__array_grow(&a->held_end, &a->cap_held_end, a->n_held + a->n_sent,
			      sizeof(*a->held_end), 64) == 0) {
		/* queued, not gone: free once the socket took it */
		for (size_t i = 0; i < a->n_sent; i++) {
			a->held[a->n_held] = a->sent[i];
			a->held_end[a->n_held++] = end;
		}
	} else {
		for (size_t i = 0; i < a->n_sent; i++)
			release_local(a, &a->sent[i]);
	}
	release_held(a, r < 0 ? UINT64_MAX : sent);
	a->n_segs = a->n_sent = a->seg_from = a->ext_len = 0;
	return r;
}

static int send_req(struct arbiter *a)
{
	int r = 0;

	if (buf_error(&a->req))
		r = -ENOMEM;
	else if (a->n_segs || a->n_sent)
		r = send_pieces(a);
	else if (a->send)
		r = a->send(a->send_ctx, a->req.data, a->req.len);
	/* chunks of a request that could not be encoded are freed all the same */
	for (size_t i = 0; i < a->n_sent; i++)
		release_local(a, &a->sent[i]);
	a->n_segs = a->n_sent = a->seg_from = a->ext_len = 0;
	if (r < 0 && !a->send_error)
		a->send_error = r;
	a->commits_sent++;
	sonde__buf_reset(&a->req);
	return r;
}

static size_t vlen(uint64_t v)
{
	size_t n = 1;

	for (; v >= 0x80; v >>= 7)
		n++;
	return n;
}

/* Emulation with send_iov: the chunk's ChunksToMove entry encoded up to its data, the
 * data left where it is. false when there is no room to track it (then it is copied). */
static bool move_in_place(struct arbiter *a, const struct arb_move *m, size_t csize)
{
	if (!a->send_iov ||
	    sonde__array_grow(&a->segs, &a->cap_segs, a->n_segs + 3, sizeof(*a->segs), 64) < 0 ||
	    sonde__array_grow(&a->sent, &a->cap_sent, a->n_sent + 1, sizeof(*a->sent), 32) < 0)
		return false;
	size_t inner = 1 + vlen(m->c.page) + 1 + vlen(m->c.index) + 1 + vlen(m->target_buffer) + 1 +
		       vlen(csize) + csize;
	sonde__pb_put_tag(&a->req, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE, PB_LEN);
	sonde__pb_put_varint_raw(&a->req, inner);
	sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_PAGE, m->c.page);
	sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_CHUNK, m->c.index);
	sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, m->target_buffer);
	sonde__pb_put_tag(&a->req, PF_CHUNKS_TO_MOVE_DATA, PB_LEN);
	sonde__pb_put_varint_raw(&a->req, csize);
	close_seg(a);
	a->segs[a->n_segs++] = (struct arb_seg){m->c.base, 0, csize};
	a->ext_len += csize;
	a->sent[a->n_sent++] = m->c;
	return true;
}

static void encode_moves(struct arbiter *a)
{
	for (size_t i = 0; i < a->n_moves; i++) {
		struct arb_move *m = &a->moves[i];
		/* hand the chunk to the service; a failed transition means the page changed
		 * under us, and then the service must not read it either */
		if (!smb_mark_complete(a->base, a->page_size, m->c.page, m->c.index))
			continue;
		size_t csize = SMB_CHUNK_HDR_SIZE + m->c.payload_size;
		/* an inline chunk must fit the frame: what is batched goes first */
		if (a->emulated && (a->req.len || a->ext_len) &&
		    (a->req.len + a->ext_len + csize + 32 > COMMIT_REQ_SOFT_MAX ||
		     a->n_segs + 3 > ARB_MAX_SEGS))
			send_req(a);
		if (a->emulated && move_in_place(a, m, csize)) {
			a->chunks_committed++;
			continue;
		}
		size_t mk = sonde__pb_begin(&a->req, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
		sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_PAGE, m->c.page);
		sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_CHUNK, m->c.index);
		sonde__pb_put_varint(&a->req, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, m->target_buffer);
		if (a->emulated)
			sonde__pb_put_bytes(&a->req, PF_CHUNKS_TO_MOVE_DATA, m->c.base, csize);
		sonde__pb_end(&a->req, mk);
		if (a->emulated)
			release_local(a, &m->c);
		a->chunks_committed++;
		if (a->req.len + a->ext_len > COMMIT_REQ_SOFT_MAX)
			send_req(a);
	}
	a->n_moves = 0;
}

static void encode_patches(struct arbiter *a)
{
	size_t i = 0;

	while (i < a->n_patches) {
		const struct arb_patch *first = &a->patches[i];
		size_t mk = sonde__pb_begin(&a->req, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
		sonde__pb_put_varint(&a->req, PF_CHUNK_TO_PATCH_TARGET_BUFFER, first->target_buffer);
		sonde__pb_put_varint(&a->req, PF_CHUNK_TO_PATCH_WRITER_ID, first->writer_id);
		sonde__pb_put_varint(&a->req, PF_CHUNK_TO_PATCH_CHUNK_ID, first->chunk_id);
		bool more = true;
		/* group the consecutive patches of one chunk (writers emit them together) */
		for (; i < a->n_patches; i++) {
			const struct arb_patch *p = &a->patches[i];
			if (p->chunk_id != first->chunk_id || p->writer_id != first->writer_id ||
			    p->target_buffer != first->target_buffer)
				break;
			size_t pm = sonde__pb_begin(&a->req, PF_CHUNK_TO_PATCH_PATCHES);
			sonde__pb_put_varint(&a->req, PF_PATCH_OFFSET, p->offset);
			sonde__pb_put_bytes(&a->req, PF_PATCH_DATA, p->data, 4);
			sonde__pb_end(&a->req, pm);
			more = p->has_more;
			a->patches_sent++;
		}
		if (more)
			sonde__pb_put_bool(&a->req, PF_CHUNK_TO_PATCH_HAS_MORE_PATCHES, true);
		sonde__pb_end(&a->req, mk);
		if (a->req.len + a->ext_len > COMMIT_REQ_SOFT_MAX)
			send_req(a);
	}
	a->n_patches = 0;
}

int sonde__arbiter_commit_locked(struct arbiter *a, uint64_t flush_id)
{
	if (!a->n_moves && !a->n_patches && !flush_id) {
		/* nothing new: just push out bytes an earlier commit left queued */
		if (a->send_iov && !a->send_error) {
			uint64_t end, sent = 0;
			int r = a->send_iov(a->send_ctx, NULL, 0, 0, &end, &sent);
			if (r < 0)
				a->send_error = r;
			/* what the socket took (or, broken, never will) frees its chunks */
			release_held(a, r < 0 ? UINT64_MAX : sent);
		} else if (a->send && !a->send_error) {
			int r = a->send(a->send_ctx, NULL, 0);
			if (r < 0)
				a->send_error = r;
		}
		return a->send_error;
	}
	sonde__buf_reset(&a->req);
	encode_moves(a);
	encode_patches(a);
	if (flush_id)
		sonde__pb_put_varint(&a->req, PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID, flush_id);
	if (a->req.len || a->n_segs || flush_id)
		send_req(a);
	return a->send_error;
}

int sonde__arbiter_commit(struct arbiter *a, uint64_t flush_id)
{
	sonde__arbiter_lock(a);
	int r = sonde__arbiter_commit_locked(a, flush_id);
	sonde__arbiter_unlock(a);
	return r;
}

void sonde__arbiter_commit_batched(struct arbiter *a)
{
	sonde__arbiter_lock(a);
	if (a->n_moves || a->n_patches)
		sonde__arbiter_commit_locked(a, 0);
	sonde__arbiter_unlock(a);
}
