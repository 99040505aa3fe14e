/* Test helper: perf records built byte by byte, and rings in memory that a test publishes
 * them into as the kernel would (the recorder's layout). */
#ifndef SONDE_TEST_PERF_FIXTURE_H
#define SONDE_TEST_PERF_FIXTURE_H

#include <linux/perf_event.h>
#include <stddef.h>
#include <stdint.h>

#include "perf/ring.h"

/* A little record builder. */
struct rb {
	uint8_t b[4096];
	size_t n;
};

void rb_u64(struct rb *r, uint64_t v);
void rb_u32x2(struct rb *r, uint32_t a, uint32_t b);
void rb_bytes(struct rb *r, const void *p, size_t n);
/* Starts a record of type (its size is set by rb_end). */
void rb_begin(struct rb *r, uint32_t type, uint16_t misc);
void rb_end(struct rb *r);

/* A ring in memory. */
struct sring {
	struct perf_event_mmap_page meta;
	uint8_t *data;
	uint64_t size;
	struct perf_ring ring;
};

/* size: a power of two; start: where the head and tail start. */
void sring_init(struct sring *s, uint64_t size, uint64_t start);
void sring_free(struct sring *s);
/* Publishes r at the head, across the end of the data area if it falls there. */
void sring_put(struct sring *s, const struct rb *r);

/* A sample of tid at time t in the recorder's layout with kernel callchains (event id 76):
 * a 3-entry callchain, a 64-byte stack copy of which `used` bytes are valid, each byte
 * (seed + i). */
void stream_sample(struct rb *r, uint32_t pid, uint32_t tid, uint64_t t, uint64_t used,
		   uint8_t seed);
/* The same with a stack copy of `copy` bytes (a multiple of 8, at most 3 KiB). */
void stream_sample_copy(struct rb *r, uint32_t pid, uint32_t tid, uint64_t t, uint32_t copy,
			uint64_t used, uint8_t seed);

#endif
