/* A perf mmap ring: the kernel writes records at data_head, we consume at data_tail.
 * Internal to libsonde.
 *
 * Call order for one read pass: sonde__perf_ring_begin (snapshot the head),
 * sonde__perf_ring_next until it returns 0, sonde__perf_ring_end (publish the new tail) or
 * sonde__perf_ring_release (publish less of it). A pointer sonde__perf_ring_next returns
 * points into the ring, valid until its space is handed back, or, for a record that wraps
 * around the end of the data area, into the ring's scratch buffer, valid until the next
 * sonde__perf_ring_next.
 */
#ifndef SONDE_PERF_RING_H
#define SONDE_PERF_RING_H

#include <linux/perf_event.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct perf_ring {
	struct perf_event_mmap_page *meta; /* the header page */
	uint8_t *data;			   /* data area of size bytes (a power of two) */
	uint64_t size;
	uint64_t head; /* snapshot taken by sonde__perf_ring_begin */
	uint64_t tail; /* our read position (published by sonde__perf_ring_end) */
	void *map;     /* the mmap'ed region, NULL for a ring in caller memory */
	size_t map_len;
	int fd;
	int cpu;
	struct buf scratch; /* wrapped records are copied here */
};

/* The kernel publishes data_head after writing records: read it with acquire semantics so
 * the record bytes are visible before we look at them. */
static inline uint64_t perf_ring_head_acquire(const struct perf_event_mmap_page *meta)
{
	return __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
}

/* Publishing data_tail hands the space back to the kernel: release semantics so every read
 * of the consumed bytes completes before the kernel can overwrite them. */
static inline void perf_ring_tail_release(struct perf_event_mmap_page *meta, uint64_t tail)
{
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

/* Maps the ring of event fd with 1 + pages pages (pages a power of two). When the mapping is
 * refused (ENOMEM, EPERM: the locked-memory limit), halves pages down to min_pages.
 * Returns 0 or -errno; r->size tells what was obtained. */
int sonde__perf_ring_map(struct perf_ring *r, int fd, int cpu, unsigned pages, unsigned min_pages);
/* A ring over caller memory (tests, fuzzing): meta and a data area of size bytes (a power
 * of two). sonde__perf_ring_unmap only frees the scratch buffer. */
void sonde__perf_ring_init_mem(struct perf_ring *r, struct perf_event_mmap_page *meta, void *data,
			uint64_t size);
void sonde__perf_ring_unmap(struct perf_ring *r);

void sonde__perf_ring_begin(struct perf_ring *r);
/* The next record: returns 1 with *rec and *len set, 0 when the ring is drained, or
 * -SONDE_E_FORMAT when a record header is impossible (smaller than a header or larger than
 * what the kernel published); the rest of the pass is then skipped so that reading resumes
 * at the head, and -ENOMEM when a wrapped record cannot be copied. */
int sonde__perf_ring_next(struct perf_ring *r, const void **rec, size_t *len);
void sonde__perf_ring_end(struct perf_ring *r);
/* Hands the ring's space before pos back to the kernel, where a reader still uses records
 * read since (pos is at most the read position, and never goes back). */
void sonde__perf_ring_release(struct perf_ring *r, uint64_t pos);
/* Bytes published but not yet consumed (for tests and flow control). */
uint64_t sonde__perf_ring_pending(const struct perf_ring *r);

#endif
