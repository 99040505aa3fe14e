/* The perf stream: records of many rings, each decoded once and released in time order.
 * Internal to libsonde.
 *
 * A stream has sources, one per ring the caller reads (no fixed number). Draining a source
 * reads its ring: each record is decoded once, where it lies in the ring, into a fixed event
 * (struct perf_rec); a filter may drop it there or ask for its header fields only, before
 * anything is copied. A sample's stack copy, the bulk of its bytes, is read where it lies:
 * the ring's space from that record on stays the stream's until the event is released (up
 * to an eighth of the ring; past that, from a ring more than a quarter full when its drain
 * began, and for a record that wraps around the ring's end, it is copied). What else an
 * event uses of a kept record (the callchain, raw tracepoint data, names) is copied once
 * into the source's arena, whose chunks are reused once every event in them has been
 * released. The ring's space goes back to the kernel at the end of a drain and when a pop
 * finds nothing more to release, up to the oldest record still used.
 *
 * A ring is in time order on its own (nearly: a record older than the one before it is put
 * back in place within its source), so the sources are merged by a k-way merge over their
 * oldest events, a heap of sources, O(log sources) per event. An event is released only up
 * to a limit (sonde__perf_stream_limit): the time before which no source can still deliver
 * an older record, perf's finished-round rule. Once the queues and arenas have grown to the
 * working size, neither draining nor popping allocates.
 */
#ifndef SONDE_PERF_STREAM_H
#define SONDE_PERF_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "perf/decode.h"
#include "perf/ring.h"

/* What a filter decides for a decoded record, before anything of it is copied. */
enum perf_stream_keep {
	PERF_STREAM_DROP,   /* not queued at all */
	PERF_STREAM_HEADER, /* queued without its stack copy and callchain (raw data is kept) */
	PERF_STREAM_KEEP,   /* queued whole */
};

typedef enum perf_stream_keep (*perf_stream_filter)(void *ctx, const struct perf_rec *rec);

/* What one drain read. */
struct perf_stream_drained {
	uint64_t records; /* queued */
	uint64_t dropped; /* by the filter */
	uint64_t bad;	  /* headers or bodies that did not decode (skipped) */
	uint64_t lost;	  /* LOST and LOST_SAMPLES records among the queued */
};

struct perf_stream;

/* NULL and errno on failure. filter may be NULL (everything kept whole). */
struct perf_stream *sonde__perf_stream_new(const struct perf_layout *l, perf_stream_filter filter,
					   void *ctx);
void sonde__perf_stream_free(struct perf_stream *s);
/* The layout records read from now on are decoded with. */
void sonde__perf_stream_set_layout(struct perf_stream *s, const struct perf_layout *l);

/* A new source: returns its index (>= 0) or -ENOMEM. */
int sonde__perf_stream_add_source(struct perf_stream *s);

/* Reads every record ring has published into source src, and hands the space back to the
 * kernel but for the records whose stacks queued events borrow. A source reads one ring
 * until sonde__perf_stream_unborrow lets it go (-EINVAL otherwise). Returns 0, or -ENOMEM
 * when a record could not be queued (it and the rest of the pass are then left in the ring
 * for the next drain). *out (may be NULL) says what was read. Events popped before are
 * invalid afterwards. */
int sonde__perf_stream_drain(struct perf_stream *s, int src, struct perf_ring *ring,
			     struct perf_stream_drained *out);

/* The same, reading no more than max_bytes of the ring's records (at least one, when it
 * has any): *more (may be NULL) says whether it holds published records still. Drained a
 * batch at a time, and each batch processed before the next is read, the records decoded
 * are still in the caches when they are used, and the ring space their stacks hold goes
 * back a batch at a time. */
int sonde__perf_stream_drain_some(struct perf_stream *s, int src, struct perf_ring *ring,
				  size_t max_bytes, bool *more, struct perf_stream_drained *out);

/* Lets go of source src's ring, before it is unmapped or replaced: the stacks its queued
 * events borrow from it are copied into the arena, and all it read goes back to the kernel.
 * 0, or -ENOMEM when some could not be copied (those events go without their stacks).
 * Events popped before are invalid afterwards. */
int sonde__perf_stream_unborrow(struct perf_stream *s, int src);

/* Queues an event that no ring delivered, into source si: type is the caller's (no perf
 * record type), time its place in the merge, and the len bytes at data are copied into the
 * arena, 8-aligned, as rec.sample.raw / raw_size (at most 256 KiB). 0, -EINVAL or -ENOMEM.
 * Events popped before are invalid afterwards, as after a drain. */
int sonde__perf_stream_push(struct perf_stream *s, int si, uint32_t type, uint64_t time,
			    const void *data, uint32_t len);

/* The oldest queued event if its time is <= limit (UINT64_MAX: any): returns it, valid until
 * the next pop or drain, or NULL. Events of equal time come in the order they were read. */
const struct perf_rec *sonde__perf_stream_pop(struct perf_stream *s, uint64_t limit);

/* The release limit: every source is represented by the newest time read from it, or by
 * floor (a time before which no ring can still publish a record) when that is older or it
 * has read nothing, so an idle ring does not hold the others back; a source whose last
 * drain left records in its ring, by its newest time read less a millisecond, however old
 * (what it left is older than floor, some a little older than what it read). */
uint64_t sonde__perf_stream_limit(const struct perf_stream *s, uint64_t floor);

/* Events queued, and bytes held by them (the events and what they copied into the arena,
 * not what they borrow from the rings). */
size_t sonde__perf_stream_count(const struct perf_stream *s);
size_t sonde__perf_stream_bytes(const struct perf_stream *s);

#endif
