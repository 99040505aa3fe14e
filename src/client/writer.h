/* Trace writer internals: packet framing into SMB chunks. Internal to libsonde.
 *
 * A writer owns at most one BeingWritten chunk at a time. A packet is written as a run of
 * fragments, one per chunk it touches, each behind a 4-byte redundant-varint size:
 *
 *   chunk N:   [hdr: count=k, flags=..|LAST_CONTINUES] ... [size][fragment 0 of P]
 *   chunk N+1: [hdr: count=1, flags=FIRST_CONTINUES|LAST_CONTINUES] [size][fragment 1]
 *   chunk N+2: [hdr: count=j, flags=FIRST_CONTINUES] [size][last fragment] [size][next]...
 *
 * Nested protobuf messages reserve a 4-byte length that is filled in when they end. When
 * a chunk must be returned while such a length inside it is still open, the chunk gets
 * NEEDS_PATCHING and the length becomes a patch (chunk_id, offset, 4 bytes), applied in
 * place by the arbiter while the chunk is still batched, or sent in CommitData.
 */
#ifndef SONDE_CLIENT_WRITER_H
#define SONDE_CLIENT_WRITER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/arbiter.h"

enum {
	TW_MAX_NESTING = 32,
	TW_MAX_PATCHES = 2 * TW_MAX_NESTING, /* open lengths + ready ones not yet handed over */
	TW_SCRATCH_SIZE = 4096,
};

struct sonde_producer;

enum tw_patch_state { TW_PATCH_FREE, TW_PATCH_PENDING, TW_PATCH_READY };

struct tw_patch_slot {
	uint8_t state;
	struct arb_patch p;
};

struct tw_nested {
	uint8_t *field;	      /* the 4 reserved bytes, while they are in the current chunk */
	int slot;	      /* patch slot once the chunk holding them was returned, else -1 */
	uint32_t chunk_id;    /* chunk holding the field */
	uint64_t begin_total; /* w->total right after the field */
};

struct sonde_trace_writer {
	struct arbiter *arb; /* NULL or not set up: every packet is dropped */
	struct sonde_producer *producer;
	pthread_t owner; /* the creating thread: the only one the producer flushes it from */
	uint64_t instance_id;
	uint16_t writer_id;
	uint32_t target_buffer;
	uint32_t stall_ms; /* how long to wait for a free chunk; UINT32_MAX: forever */
	uint32_t next_chunk_id;

	/* current chunk */
	bool have_chunk;
	bool dropping;	       /* writing into scratch: the bytes are discarded */
	bool lost_since_chunk; /* packets were lost: the next packet says so */
	struct arb_chunk cur;
	uint32_t cur_chunk_id;
	uint8_t *wp, *end;
	unsigned count, flags;

	/* current packet */
	bool in_packet;
	uint8_t *frag_size; /* size prefix of the current fragment (in the current chunk) */
	uint8_t *frag_start;
	uint64_t total; /* packet bytes written, fragment prefixes excluded */
	struct tw_nested stack[TW_MAX_NESTING];
	int depth;

	struct tw_patch_slot slots[TW_MAX_PATCHES];
	unsigned n_ready;

	uint64_t packets_written, packets_lost, chunks_used;
	uint8_t scratch[TW_SCRATCH_SIZE];
};

/* Initialises a writer in place (no allocation). */
void sonde__tw_init(struct sonde_trace_writer *w, struct arbiter *arb, uint16_t writer_id,
	     uint32_t target_buffer, uint32_t stall_ms);
/* Returns the current chunk (if any) and hands over ready patches; does not commit. */
void sonde__tw_release(struct sonde_trace_writer *w);

#endif
