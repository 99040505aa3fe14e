/* Fuzz target: the perf stream over rings of arbitrary bytes.
 *
 * The first byte picks the number of rings (1..8), the layout (the recorder's plain,
 * --kernel or --off-cpu one) and what the filter does; the rest is dealt out to the rings
 * in pieces whose lengths come from the input, each ring starting near the end of its data
 * area so records wrap. Every ring is drained in two passes with events popped between
 * them up to a limit; every event popped must come in time order, every byte it
 * borrows must be readable (the sanitizers check), a stack it reads in its ring must lie
 * in space not handed back to the kernel, and once everything is popped the stream holds
 * nothing.
 */
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/log.h>

#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"
#include "perf/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_RINGS = 8, RING_BYTES = 1 << 14 };

struct fring {
	struct perf_event_mmap_page meta;
	uint8_t data[RING_BYTES];
	struct perf_ring ring;
	int src;
};

static unsigned filter_mode;

static enum perf_stream_keep filter(void *ctx, const struct perf_rec *rec)
{
	(void)ctx;
	if (!filter_mode)
		return PERF_STREAM_KEEP;
	switch ((rec->pid ^ filter_mode) % 3) {
	case 0:
		return PERF_STREAM_DROP;
	case 1:
		return PERF_STREAM_HEADER;
	default:
		return PERF_STREAM_KEEP;
	}
}

static volatile uint8_t sink;

static void touch(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		sink ^= p[i];
}

/* A stack read where it lies must be in a part of its ring not handed back to the kernel
 * (feed writes only the rest, as the kernel does). */
static void check_held(const struct fring *rings, unsigned n_rings, const uint8_t *p, uint64_t n)
{
	for (unsigned k = 0; k < n_rings; k++) {
		const struct fring *r = &rings[k];
		if (p < r->data || p >= r->data + RING_BYTES)
			continue;
		uint64_t off = (uint64_t)(p - r->data), tail = r->meta.data_tail & (RING_BYTES - 1);
		uint64_t held = r->meta.data_head - r->meta.data_tail;
		if (((off - tail) & (RING_BYTES - 1)) + n > held)
			__builtin_trap(); /* borrowed from space the kernel may write */
	}
}

static void check(const struct fring *rings, unsigned n_rings, const struct perf_rec *e,
		  uint64_t *last)
{
	if (e->time < *last)
		__builtin_trap(); /* out of order */
	*last = e->time;
	if (e->type == PERF_RECORD_SAMPLE) {
		if (e->sample.stack && e->sample.stack_len) {
			touch(e->sample.stack, e->sample.stack_len);
			check_held(rings, n_rings, e->sample.stack, e->sample.stack_len);
		}
		if (e->sample.callchain)
			touch(e->sample.callchain, e->sample.callchain_nr * 8);
		if (e->sample.raw)
			touch(e->sample.raw, e->sample.raw_size);
	} else if (e->type == PERF_RECORD_MMAP2 && e->mmap2.filename) {
		touch((const uint8_t *)e->mmap2.filename, strlen(e->mmap2.filename) + 1);
	} else if (e->type == PERF_RECORD_COMM && e->comm.comm) {
		touch((const uint8_t *)e->comm.comm, strlen(e->comm.comm) + 1);
	}
}

/* Publishes up to n bytes of in into r (as many as there is room for). */
static void feed(struct fring *r, const uint8_t *in, size_t n)
{
	uint64_t room = RING_BYTES - (r->meta.data_head - r->meta.data_tail);

	if (n > room)
		n = (size_t)room;
	for (size_t i = 0; i < n; i++)
		r->data[(r->meta.data_head + i) & (RING_BYTES - 1)] = in[i];
	r->meta.data_head += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct perf_event_cfg cfgs[3] = {{0}, {.kernel = true},
						      {.kernel = true, .raw = true}};
	struct perf_layout l;
	uint64_t last;

	sonde_log__set_level(SONDE_LOG_OFF);
	if (size < 2)
		return 0;
	unsigned n_rings = 1 + (data[0] & 7);
	sonde__perf_event_layout_cfg(&l, &cfgs[(data[0] >> 3) % 3]);
	filter_mode = data[0] >> 5;
	data++;
	size--;

	struct fring *rings = calloc(n_rings, sizeof(*rings));
	struct perf_stream *s = sonde__perf_stream_new(&l, filter, NULL);
	if (!rings || !s)
		abort();
	for (unsigned k = 0; k < n_rings; k++) {
		rings[k].meta.data_tail = rings[k].meta.data_head = RING_BYTES - 64 * (k + 1);
		sonde__perf_ring_init_mem(&rings[k].ring, &rings[k].meta, rings[k].data, RING_BYTES);
		rings[k].src = sonde__perf_stream_add_source(s);
		if (rings[k].src < 0)
			abort();
	}
	for (int pass = 0; pass < 2; pass++) {
		/* pieces: a length byte (in 8-byte units), then that many bytes */
		size_t half = pass == 0 ? size / 2 : size, pos = pass == 0 ? 0 : size / 2;
		for (unsigned k = 0; pos < half; k = (k + 1) % n_rings) {
			size_t want = (size_t)data[pos++] * 8;
			if (want > half - pos)
				want = half - pos;
			feed(&rings[k], data + pos, want); /* a full ring skips the rest */
			pos += want;
		}
		for (unsigned k = 0; k < n_rings; k++)
			sonde__perf_stream_drain(s, rings[k].src, &rings[k].ring, NULL);
		/* what a pass adds may be older than what the one before released (the kernel's
		 * clock would not allow that; arbitrary bytes do): order holds within a pass */
		const struct perf_rec *e;
		last = 0;
		uint64_t limit = pass == 0 ? sonde__perf_stream_limit(s, 0) : UINT64_MAX;
		while ((e = sonde__perf_stream_pop(s, limit)))
			check(rings, n_rings, e, &last);
	}
	if (sonde__perf_stream_count(s) != 0 || sonde__perf_stream_bytes(s) != 0)
		__builtin_trap();
	for (unsigned k = 0; k < n_rings; k++)
		sonde__perf_ring_unmap(&rings[k].ring);
	sonde__perf_stream_free(s);
	free(rings);
	return 0;
}
