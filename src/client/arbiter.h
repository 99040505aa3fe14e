/* Producer side of the shared memory buffer: hands out free chunks to trace writers,
 * collects returned chunks and patches into CommitData requests. Internal to libsonde.
 *
 * Chunk acquisition is lock-free (CAS on the page bitmaps, as the ABI requires, since the
 * service frees chunks concurrently). The commit batch is guarded by a mutex because
 * writers on any thread return chunks into it.
 *
 * Returned chunks stay BeingWritten in the batch until the batch is sent: a patch for a
 * chunk still in the batch is applied in place ("direct patching", which the service
 * advertises), so only patches for chunks the service already owns travel over IPC. Right
 * before a batch is sent, its chunks move BeingWritten -> Complete.
 */
#ifndef SONDE_CLIENT_ARBITER_H
#define SONDE_CLIENT_ARBITER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Sends one serialized CommitDataRequest; with req == NULL, only writes bytes still queued
 * from earlier sends. Returns 0 or -errno. Called with the arbiter lock held, from
 * whichever thread triggered the commit. */
typedef int (*arb_send_fn)(void *ctx, const uint8_t *req, size_t len);
/* The same for a request in n pieces (len bytes in all), sent without being gathered
 * first; the pieces may be reused once it returns. With iov == NULL, only writes bytes
 * still queued. Positions count the connection's bytes from its start: *end gets where
 * this request ends, *sent how far the socket has taken the stream. Returns 0 or -errno. */
struct iovec;
typedef int (*arb_send_iov_fn)(void *ctx, const struct iovec *iov, int n, size_t len, uint64_t *end,
			       uint64_t *sent);

/* A piece of an emulated request: bytes [off, off + len) of the encoding buffer, or the
 * len bytes at ext (a chunk, header included) */
struct arb_seg {
	const uint8_t *ext;
	size_t off, len;
};

struct arb_chunk {
	uint8_t *base;	  /* chunk start (its 8-byte header) */
	uint8_t *payload; /* base + 8 */
	uint32_t payload_size;
	uint32_t page;
	uint32_t index; /* chunk index in the page */
};

/* A patch of 4 bytes at `offset` from the payload start of (writer_id, chunk_id). */
struct arb_patch {
	uint32_t chunk_id;
	uint32_t target_buffer;
	uint16_t writer_id;
	uint16_t offset;
	uint8_t data[4];
	bool has_more; /* more patches of this chunk are still to come */
};

struct arb_move {
	struct arb_chunk c;
	uint32_t target_buffer;
	uint32_t chunk_id;
	uint16_t writer_id;
};

struct arbiter {
	uint8_t *base;
	size_t size, page_size, num_pages;
	unsigned layout; /* SMB_LAYOUT_* used to partition free pages */
	pthread_mutex_t lock;
	size_t next_page; /* scan start hint (relaxed; any value is correct) */
	/* the batch */
	struct arb_move *moves;
	size_t n_moves, cap_moves;
	struct arb_patch *patches;
	size_t n_patches, cap_patches;
	size_t commit_threshold; /* send once this many chunks are batched */
	struct buf req;		 /* reused encoding buffer */
	arb_send_fn send;
	void *send_ctx;
	int send_error; /* first send failure (sticky) */
	/* shared-memory emulation: base is this process's own memory, every chunk goes inline
	 * in CommitData and is free again as soon as it is sent. With send_iov the chunks are
	 * not copied into req: the request is req's encoded fields and the chunks in place
	 * (segs, ext_len bytes of chunks), and the chunks in `sent` are freed once it went.
	 * Chunks whose bytes the socket did not all take (queued in the connection) are
	 * `held`, not free, until the socket took their request (held_end, the stream
	 * position where it ends): a service slower than the writers fills the buffer, and
	 * the writers stall, then drop, as with shared memory, instead of the queue growing
	 * without bound */
	bool emulated;
	arb_send_iov_fn send_iov;
	struct arb_seg *segs;
	size_t n_segs, cap_segs, seg_from, ext_len;
	struct arb_chunk *sent, *held;
	uint64_t *held_end;
	size_t n_sent, cap_sent, n_held, cap_held, cap_held_end;
	/* statistics */
	uint64_t chunks_committed, patches_sent, patches_direct, commits_sent;
};

/* Adopts an SMB mapping (not owned: the caller unmaps it after sonde__arbiter_fini). layout is
 * the page layout writers get (SMB_LAYOUT_DIV1 as in the SDK). Returns 0 or -errno. */
int sonde__arbiter_init(struct arbiter *a, void *base, size_t size, size_t page_size, unsigned layout,
		 arb_send_fn send, void *send_ctx);
void sonde__arbiter_fini(struct arbiter *a);

/* Tries once to take a free chunk (Free -> BeingWritten). Returns true with *c filled. */
bool sonde__arbiter_try_acquire(struct arbiter *a, struct arb_chunk *c);

/* Returns a chunk the writer has finished (its header is final except for flags that
 * patches clear). It stays BeingWritten until the batch is sent. May send the batch. */
void sonde__arbiter_return_chunk(struct arbiter *a, const struct arb_chunk *c, uint16_t writer_id,
			  uint32_t chunk_id, uint32_t target_buffer);
/* Hands over ready patches: applied in place when their chunk is still batched, else
 * queued for IPC. Each patch's has_more tells whether more will follow for its chunk. */
void sonde__arbiter_add_patches(struct arbiter *a, const struct arb_patch *p, size_t n);
/* Sends the batch (even if empty when flush_id != 0: that acks the flush). Returns 0 or
 * the send error. */
int sonde__arbiter_commit(struct arbiter *a, uint64_t flush_id);
/* Sends the batch if it holds any chunk or patch; does nothing otherwise. */
void sonde__arbiter_commit_batched(struct arbiter *a);
/* Locked variants' building blocks, for callers that batch several steps. */
void sonde__arbiter_lock(struct arbiter *a);
void sonde__arbiter_unlock(struct arbiter *a);
int sonde__arbiter_commit_locked(struct arbiter *a, uint64_t flush_id);
size_t sonde__arbiter_total_chunks(const struct arbiter *a);

#endif
