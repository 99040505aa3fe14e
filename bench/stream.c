/* bench-stream: the perf stream's own CPU per sample, drained from a ring and popped.
 *
 * One ring over memory (as sonde__perf_ring_init_mem makes it), written the way the kernel
 * writes a CPU's ring in a `sonde record -a`: samples with the kernel callchain, user
 * registers and a user stack copy of STACK bytes. Each round writes a batch of BATCH KiB
 * (what one poll of the recorder finds: 100 ms of samples), then drains it and pops every
 * event, reading READS words of each stack copy spread over its first 2 KiB (as an
 * unwinder walking a few frames does). Only the drain and the pops are timed (thread CPU
 * time); the writing stands for the kernel's. Printed: the median and range over the
 * rounds of ns per sample.
 *
 * usage: bench-stream [--stack BYTES] [--batch KIB] [--ring MIB] [--reads N] [--rounds N]
 */
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"
#include "perf/stream.h"

static uint8_t *rec_buf;
static size_t rec_len;

static void put_u64(uint8_t **p, uint64_t v)
{
	memcpy(*p, &v, 8);
	*p += 8;
}

static void put_u32x2(uint8_t **p, uint32_t a, uint32_t b)
{
	memcpy(*p, &a, 4);
	memcpy(*p + 4, &b, 4);
	*p += 8;
}

/* A sample record of the layout, its stack copy of stack bytes (all used). */
static void make_sample(const struct perf_layout *l, uint32_t stack)
{
	uint8_t *p;

	rec_buf = calloc(1, 65536);
	if (!rec_buf)
		exit(1);
	p = rec_buf + sizeof(struct perf_event_header);
	if (l->sample_type & PERF_SAMPLE_IDENTIFIER)
		put_u64(&p, 1);
	put_u64(&p, 0x401234);
	put_u32x2(&p, 100, 101);
	put_u64(&p, 0); /* time, set per record */
	if (l->sample_type & PERF_SAMPLE_ID)
		put_u64(&p, 1);
	if (l->sample_type & PERF_SAMPLE_CPU)
		put_u32x2(&p, 0, 0);
	if (l->sample_type & PERF_SAMPLE_PERIOD)
		put_u64(&p, 100000);
	if (l->sample_type & PERF_SAMPLE_CALLCHAIN) {
		put_u64(&p, 6);
		put_u64(&p, PERF_CONTEXT_KERNEL);
		for (int i = 0; i < 5; i++)
			put_u64(&p, 0xffffffff81000000ull + (uint64_t)i * 64);
	}
	if (l->sample_type & PERF_SAMPLE_REGS_USER) {
		put_u64(&p, PERF_SAMPLE_REGS_ABI_64);
		for (int i = 0; i < 64; i++)
			if (l->regs_mask & (1ull << i))
				put_u64(&p, 0x7ffc00001000ull + (uint64_t)i * 8);
	}
	put_u64(&p, stack);
	for (uint32_t i = 0; i < stack; i += 8)
		put_u64(&p, 0x7ffc00002000ull + i);
	put_u64(&p, stack);
	rec_len = (size_t)(p - rec_buf);
	struct perf_event_header h = {.type = PERF_RECORD_SAMPLE,
				      .misc = PERF_RECORD_MISC_USER,
				      .size = (uint16_t)rec_len};
	memcpy(rec_buf, &h, sizeof(h));
}

static int time_offset(const struct perf_layout *l)
{
	int off = sizeof(struct perf_event_header) + 8 + 8;

	if (l->sample_type & PERF_SAMPLE_IDENTIFIER)
		off += 8;
	return off;
}

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t stack = 8192, batch_kib = 6 << 10, ring_mib = 64, reads = 16, rounds = 40;

	for (int i = 1; i + 1 < argc; i += 2) {
		uint32_t v = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		if (!strcmp(argv[i], "--stack"))
			stack = v & ~7u;
		else if (!strcmp(argv[i], "--batch"))
			batch_kib = v;
		else if (!strcmp(argv[i], "--ring"))
			ring_mib = v;
		else if (!strcmp(argv[i], "--reads"))
			reads = v;
		else if (!strcmp(argv[i], "--rounds"))
			rounds = v;
		else {
			fprintf(stderr, "usage: bench-stream [--stack BYTES] [--batch KIB] "
					"[--ring MIB] [--reads N] [--rounds N]\n");
			return 2;
		}
	}
	const struct perf_event_cfg cfg = {.kernel = true, .cpu_wide = true, .stack_bytes = stack};
	struct perf_layout l;
	sonde__perf_event_layout_cfg(&l, &cfg);
	make_sample(&l, stack);

	uint64_t size = (uint64_t)ring_mib << 20;
	static struct perf_event_mmap_page meta;
	uint8_t *data = malloc(size);
	struct perf_ring ring;
	double *per = calloc(rounds, sizeof(*per));
	if (!data || !per)
		return 1;
	memset(data, 0, size);
	sonde__perf_ring_init_mem(&ring, &meta, data, size);
	struct perf_stream *s = sonde__perf_stream_new(&l, NULL, NULL);
	int src = sonde__perf_stream_add_source(s);
	uint64_t t = 1, sink = 0, span = stack < 2048 ? stack : 2048;
	int toff = time_offset(&l);

	for (uint32_t round = 0; round < rounds; round++) {
		uint64_t n = 0, want = (uint64_t)batch_kib << 10;
		/* the kernel's part: a batch of samples, where there is room */
		for (uint64_t w = 0; w + rec_len <= want; w += rec_len) {
			if (meta.data_head + rec_len - meta.data_tail > size)
				break;
			memcpy(rec_buf + toff, &t, 8);
			t++;
			for (size_t i = 0; i < rec_len; i++)
				data[(meta.data_head + i) & (size - 1)] = rec_buf[i];
			meta.data_head += rec_len;
			n++;
		}
		uint64_t t0 = thread_ns();
		sonde__perf_stream_drain(s, src, &ring, NULL);
		const struct perf_rec *e;
		while ((e = sonde__perf_stream_pop(s, UINT64_MAX))) {
			if (e->sample.stack_len != stack) {
				fprintf(stderr, "bench-stream: a sample decoded wrong\n");
				return 1;
			}
			for (uint32_t k = 0; k < reads && e->sample.stack_len >= 8; k++) {
				uint64_t v, off = (span / (reads ? reads : 1) * k) & ~7ull;
				memcpy(&v, e->sample.stack + off, 8);
				sink += v;
			}
		}
		per[round] = n ? (double)(thread_ns() - t0) / (double)n : 0;
	}
	qsort(per, rounds, sizeof(*per), cmp_double);
	printf("stack %u B, record %zu B, batch %u KiB, ring %u MiB, %u reads: "
	       "%.0f ns/sample [%.0f-%.0f] over %u rounds (sink %" PRIu64 ")\n",
	       stack, rec_len, batch_kib, ring_mib, reads, per[rounds / 2], per[0], per[rounds - 1],
	       rounds, sink & 1);
	sonde__perf_stream_free(s);
	sonde__perf_ring_unmap(&ring);
	free(data);
	free(per);
	free(rec_buf);
	return 0;
}
