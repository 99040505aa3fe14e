/* Test helper: perf records built byte by byte, rings in memory (perf_fixture.h). */
#include <stdlib.h>
#include <string.h>

#include "perf/event.h"
#include "perf_fixture.h"

void rb_u64(struct rb *r, uint64_t v)
{
	memcpy(r->b + r->n, &v, 8);
	r->n += 8;
}

void rb_u32x2(struct rb *r, uint32_t a, uint32_t b)
{
	rb_u64(r, (uint64_t)b << 32 | a);
}

void rb_bytes(struct rb *r, const void *p, size_t n)
{
	memcpy(r->b + r->n, p, n);
	r->n += n;
}

void rb_begin(struct rb *r, uint32_t type, uint16_t misc)
{
	r->n = 0;
	struct perf_event_header h = {.type = type, .misc = misc};
	rb_bytes(r, &h, sizeof(h));
}

void rb_end(struct rb *r)
{
	uint16_t sz = (uint16_t)r->n;
	memcpy(r->b + 6, &sz, 2);
}

void sring_init(struct sring *s, uint64_t size, uint64_t start)
{
	memset(&s->meta, 0, sizeof(s->meta));
	s->data = calloc(1, size);
	s->size = size;
	s->meta.data_tail = s->meta.data_head = start;
	sonde__perf_ring_init_mem(&s->ring, &s->meta, s->data, size);
}

void sring_free(struct sring *s)
{
	sonde__perf_ring_unmap(&s->ring);
	free(s->data);
}

void sring_put(struct sring *s, const struct rb *r)
{
	for (size_t i = 0; i < r->n; i++)
		s->data[(s->meta.data_head + i) & (s->size - 1)] = r->b[i];
	s->meta.data_head += r->n;
}

void stream_sample(struct rb *r, uint32_t pid, uint32_t tid, uint64_t t, uint64_t used,
		   uint8_t seed)
{
	stream_sample_copy(r, pid, tid, t, 64, used, seed);
}

void stream_sample_copy(struct rb *r, uint32_t pid, uint32_t tid, uint64_t t, uint32_t copy,
			uint64_t used, uint8_t seed)
{
	const struct perf_event_cfg kcfg = {.kernel = true};
	struct perf_layout l;

	sonde__perf_event_layout_cfg(&l, &kcfg);
	rb_begin(r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
	if (l.sample_type & PERF_SAMPLE_IDENTIFIER)
		rb_u64(r, 76);
	rb_u64(r, 0x401234);
	rb_u32x2(r, pid, tid);
	rb_u64(r, t);
	if (l.sample_type & PERF_SAMPLE_ID)
		rb_u64(r, 76);
	if (l.sample_type & PERF_SAMPLE_CPU)
		rb_u32x2(r, 1, 0);
	if (l.sample_type & PERF_SAMPLE_PERIOD)
		rb_u64(r, 1000);
	if (l.sample_type & PERF_SAMPLE_CALLCHAIN) {
		rb_u64(r, 3);
		rb_u64(r, PERF_CONTEXT_KERNEL);
		rb_u64(r, 0xffffffff81000000ull + t);
		rb_u64(r, 0xffffffff81000010ull);
	}
	if (l.sample_type & PERF_SAMPLE_REGS_USER) {
		rb_u64(r, PERF_SAMPLE_REGS_ABI_64);
		for (int i = 0; i < 24; i++)
			if (l.regs_mask & (1ull << i))
				rb_u64(r, 0x1000 + (uint64_t)i);
	}
	rb_u64(r, copy);
	for (uint32_t i = 0; i < copy; i++)
		r->b[r->n++] = (uint8_t)(seed + i);
	rb_u64(r, used);
	rb_end(r);
}
