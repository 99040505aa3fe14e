/* Fuzz target: perf record decoding and ring reading over arbitrary bytes.
 *
 * The input is used twice: as one record for sonde__perf_decode (with the recorder's layout and
 * with a layout derived from the first bytes), and as the data area of a synthetic ring
 * whose head covers the whole input, read record by record with the wrap-around copy.
 */
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/log.h>

#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(const uint8_t *data, size_t size)
{
	struct perf_layout l;
	struct perf_rec rec;

	sonde__perf_event_layout(&l);
	sonde__perf_decode(data, size, &l, &rec);
	/* The layout of --kernel recordings: a callchain before the user registers. */
	struct perf_event_cfg kcfg = {.kernel = true};
	sonde__perf_event_layout_cfg(&l, &kcfg);
	sonde__perf_decode(data, size, &l, &rec);
	/* The layout of --off-cpu recordings: a raw tracepoint record too. */
	struct perf_event_cfg ocfg = {.kernel = true, .raw = true};
	sonde__perf_event_layout_cfg(&l, &ocfg);
	if (sonde__perf_decode(data, size, &l, &rec) == 0 && rec.type == PERF_RECORD_SAMPLE &&
	    rec.sample.raw &&
	    (rec.sample.raw < data || rec.sample.raw + rec.sample.raw_size > data + size))
		__builtin_trap(); /* raw data outside the record */
	if (size >= 16) {
		uint64_t bits;
		memcpy(&bits, data + size - 8, 8);
		l.sample_type = bits & PERF_DECODE_SAMPLE_TYPES;
		l.regs_mask = (bits >> 32) & 0xffffff;
		l.sample_id_all = bits & 1;
		if (sonde__perf_layout_check(&l) == 0)
			sonde__perf_decode(data, size - 8, &l, &rec);
	}
}

static void ring_all(const uint8_t *data, size_t size)
{
	struct perf_event_mmap_page *meta = calloc(1, sizeof(*meta));
	size_t ring_size = 64;
	struct perf_layout l;
	struct perf_rec rec;
	struct perf_ring r;
	const void *p;
	size_t len;

	while (ring_size < size && ring_size < (1u << 20))
		ring_size *= 2;
	uint8_t *ring = calloc(1, ring_size);
	size_t n = size < ring_size ? size : ring_size;
	/* Start in the middle so records wrap around the end. */
	uint64_t start = ring_size / 2;
	for (size_t i = 0; i < n; i++)
		ring[(start + i) % ring_size] = data[i];
	meta->data_tail = start;
	meta->data_head = start + n;
	sonde__perf_event_layout(&l);
	sonde__perf_ring_init_mem(&r, meta, ring, ring_size);
	sonde__perf_ring_begin(&r);
	while (sonde__perf_ring_next(&r, &p, &len) == 1)
		sonde__perf_decode(p, len, &l, &rec);
	sonde__perf_ring_end(&r);
	sonde__perf_ring_unmap(&r);
	free(ring);
	free(meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Malformed rings are logged; at fuzzing speed that is only noise. */
	sonde_log__set_level(SONDE_LOG_OFF);
	decode_all(data, size);
	ring_all(data, size);
	return 0;
}
