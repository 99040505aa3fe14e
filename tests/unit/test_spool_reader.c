/* The spool readers: round trip with the writer, recovery from truncation at every byte,
 * incremental decoding, and rejection of each kind of corruption at the right offset. */
#include <sonde/spool_reader.h>

#include "base/pb.h"
#include "spool_fixture.h"
#include "../test.h"
#include "../util.h"

static struct sonde_spool *open_ok(const struct buf *b)
{
	uint64_t off = 0;
	struct sonde_spool *s = sonde_spool__open_mem(b->data, b->len, &off);
	if (!s)
		FAIL("open_mem: %s at byte %llu", sonde_strerror(errno), (unsigned long long)off);
	return s;
}

TEST(spool_reader_round_trip)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_info in;
	struct sonde_spool_sample smp;
	struct sonde_spool_frame f;
	struct sonde_spool_module m;
	struct sonde_spool_thread th;
	uint32_t frames[8];

	spool_fixture_small(&b, 100, 1);
	struct sonde_spool *s = open_ok(&b);
	sonde_spool__get_info(s, &in);
	ASSERT_UINT(in.version_major, ==, 2);
	ASSERT_UINT(in.header.start_time_ns, ==, 1700000000000000000ULL);
	ASSERT_UINT(in.header.start_monotonic_ns, ==, 5000000000ULL);
	ASSERT_UINT(in.header.sample_period_ns, ==, 1001001);
	ASSERT_UINT(in.samples, ==, 100);
	ASSERT_UINT(in.modules, ==, 3);
	ASSERT_UINT(in.threads, ==, 3);
	ASSERT_INT(in.complete, ==, 1);
	ASSERT_UINT(in.valid_bytes, ==, b.len);
	ASSERT_UINT(in.dropped_bytes, ==, 0);
	ASSERT_UINT(in.first_time_ns, ==, 5000000000ULL + 1001001);

	/* sample 0: thread "worker" (i % 4 == 0), three frames leaf first */
	ASSERT_OK(sonde_spool__get_sample(s, 0, &smp));
	ASSERT_UINT(smp.thread, ==, 2);
	ASSERT_UINT(smp.flags, ==, 0);
	ASSERT_INT(sonde_spool__get_stack(s, smp.stack, frames, 8), ==, 3);
	ASSERT_OK(sonde_spool__get_frame(s, frames[0], &f));
	ASSERT_UINT(f.module, ==, 2);
	ASSERT_UINT(f.addr, ==, 0x1000);
	ASSERT_OK(sonde_spool__get_frame(s, frames[2], &f));
	ASSERT_UINT(f.module, ==, 1);
	ASSERT_UINT(f.addr, ==, 0x3000);
	/* a short buffer gets the leaf frames and the full depth */
	ASSERT_INT(sonde_spool__get_stack(s, smp.stack, frames, 1), ==, 3);
	/* sample 3: empty stack; sample 5: truncated */
	ASSERT_OK(sonde_spool__get_sample(s, 3, &smp));
	ASSERT_UINT(smp.stack, ==, 0);
	ASSERT_INT(sonde_spool__get_stack(s, 0, frames, 8), ==, 0);
	ASSERT_OK(sonde_spool__get_sample(s, 5, &smp));
	ASSERT_UINT(smp.flags, ==, SONDE_SAMPLE_TRUNCATED);
	/* after the exec: kernel flag, raw leaf address, the new thread */
	ASSERT_OK(sonde_spool__get_sample(s, 61, &smp));
	ASSERT_UINT(smp.flags, ==, SONDE_SAMPLE_KERNEL);
	ASSERT_UINT(smp.thread, ==, 3);
	ASSERT_INT(sonde_spool__get_stack(s, smp.stack, frames, 8), ==, 2);
	ASSERT_OK(sonde_spool__get_frame(s, frames[0], &f));
	ASSERT_UINT(f.module, ==, 0);
	ASSERT_UINT(f.addr, ==, 0xffffffff81000000ULL + 61);
	ASSERT_ERR(sonde_spool__get_sample(s, 100, &smp), -ERANGE);

	ASSERT_OK(sonde_spool__get_module(s, 1, &m));
	ASSERT_STR_EQ(m.def.path, "/usr/bin/prog");
	ASSERT_UINT(m.def.start, ==, 0x400000);
	ASSERT_UINT(m.def.end, ==, 0x410000);
	ASSERT_UINT(m.def.pgoff, ==, 0x1000);
	ASSERT_UINT(m.def.dev, ==, 0x801);
	ASSERT_UINT(m.def.build_id_len, ==, 20);
	ASSERT_UINT(m.def.build_id[9], ==, 10);
	ASSERT_INT(m.retired, ==, 1);
	ASSERT_OK(sonde_spool__get_module(s, 3, &m));
	ASSERT_STR_EQ(m.def.path, "/usr/bin/other");
	ASSERT_INT(m.retired, ==, 0);
	ASSERT_ERR(sonde_spool__get_module(s, 4, &m), -ERANGE);
	ASSERT_OK(sonde_spool__get_thread(s, 3, &th));
	ASSERT_STR_EQ(th.comm, "other");
	ASSERT_UINT(th.tid, ==, 100);

	/* times never go backwards */
	uint64_t last = 0;
	for (uint64_t i = 0; i < in.samples; i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.time_ns, >=, last);
		last = smp.time_ns;
	}
	ASSERT_UINT(in.last_time_ns, ==, last);
	sonde_spool__close(s);
	sonde_spool__close(NULL);
	sonde__buf_free(&b);
}

/* Feeding the decoder one more byte at a time, as a tail reader over a growing file does,
 * yields exactly the records of the whole buffer, and never an error. */
TEST(spool_decoder_incremental_matches_whole)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_record rec;
	size_t pos = 0, records = 0, samples = 0;

	spool_fixture_small(&b, 60, 1);
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	for (size_t avail = 0; avail <= b.len; avail++) {
		int r = sonde_spool_decoder__decode(d, b.data + pos, avail - pos, &rec);
		ASSERT_INT(r, >=, 0);
		if (r == 0)
			continue;
		ASSERT_UINT(rec.offset, ==, pos);
		/* a record is recognised exactly when its last byte arrives */
		ASSERT_UINT(pos + (size_t)r, ==, avail);
		pos += (size_t)r;
		records++;
		samples += rec.type == SONDE_SPOOL_REC_SAMPLE;
		avail = pos; /* the loop continues at one byte past it */
	}
	ASSERT_UINT(pos, ==, b.len);
	ASSERT_UINT(samples, ==, 60);
	ASSERT_INT(sonde_spool_decoder__ended(d), ==, 1);
	ASSERT_UINT(sonde_spool_decoder__offset(d), ==, b.len);
	/* nothing may follow END */
	ASSERT_ERR(sonde_spool_decoder__decode(d, "\x80", 1, &rec), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde_spool_decoder__decode(d, "\x80", 1, &rec), -SONDE_E_FORMAT);
	ASSERT_UINT(records, >, 60);
	sonde_spool_decoder__free(d);
	sonde__buf_free(&b);
}

TEST(spool_reader_recovers_every_truncation)
{
	struct buf b = BUF_INIT;
	uint64_t prev_samples = 0;

	spool_fixture_small(&b, 40, 1);
	for (size_t len = 0; len <= b.len; len++) {
		uint64_t off = 99;
		struct sonde_spool *s = sonde_spool__open_mem(b.data, len, &off);
		/* magic 8, version 2, length 1, times of 9 + 5 + 3 bytes */
		if (len < 28) {
			ASSERT(s == NULL);
			ASSERT_INT(errno, ==, SONDE_E_EMPTY);
			ASSERT_UINT(off, ==, 0);
			continue;
		}
		if (!s)
			FAIL("prefix of %zu bytes: %s at %llu", len, sonde_strerror(errno),
			     (unsigned long long)off);
		struct sonde_spool_info in;
		sonde_spool__get_info(s, &in);
		ASSERT_UINT(in.valid_bytes + in.dropped_bytes, ==, len);
		ASSERT_INT(in.complete, ==, len == b.len);
		ASSERT_UINT(in.samples, >=, prev_samples);
		prev_samples = in.samples;
		sonde_spool__close(s);
	}
	ASSERT_UINT(prev_samples, ==, 40);
	sonde__buf_free(&b);
}

TEST(spool_reader_unfinished_recording)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_info in;

	spool_fixture_small(&b, 30, 0);
	struct sonde_spool *s = open_ok(&b);
	sonde_spool__get_info(s, &in);
	ASSERT_INT(in.complete, ==, 0);
	ASSERT_UINT(in.dropped_bytes, ==, 0);
	ASSERT_UINT(in.samples, ==, 30);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* Crosses the file reader's 1 MiB chunks many times. */
TEST(spool_reader_file_matches_memory)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_info a, c;

	spool_fixture_small(&b, 600000, 1);
	ASSERT_UINT(b.len, >, 2 << 20);
	const char *path = test_path("big.spool");
	test_write_file(path, b.data, b.len);
	struct sonde_spool *m = open_ok(&b);
	uint64_t off;
	struct sonde_spool *f = ASSERT_NOT_NULL(sonde_spool__open(path, &off));
	sonde_spool__get_info(m, &a);
	sonde_spool__get_info(f, &c);
	ASSERT_UINT(c.samples, ==, 600000);
	ASSERT_UINT(c.stacks, ==, a.stacks);
	ASSERT_UINT(c.valid_bytes, ==, b.len);
	ASSERT_INT(c.complete, ==, 1);
	for (uint64_t i = 0; i < c.samples; i += 997) {
		struct sonde_spool_sample x, y;
		ASSERT_OK(sonde_spool__get_sample(m, i, &x));
		ASSERT_OK(sonde_spool__get_sample(f, i, &y));
		ASSERT_UINT(x.time_ns, ==, y.time_ns);
		ASSERT_UINT(x.thread, ==, y.thread);
		ASSERT_UINT(x.stack, ==, y.stack);
		ASSERT_UINT(x.flags, ==, y.flags);
	}
	sonde_spool__close(m);
	sonde_spool__close(f);

	/* cut in the middle of a record: recovered, the tail reported */
	test_write_file(path, b.data, b.len - 2);
	f = ASSERT_NOT_NULL(sonde_spool__open(path, &off));
	sonde_spool__get_info(f, &c);
	ASSERT_INT(c.complete, ==, 0);
	ASSERT_UINT(c.valid_bytes + c.dropped_bytes, ==, b.len - 2);
	ASSERT_UINT(c.samples, ==, 600000);
	sonde_spool__close(f);

	ASSERT(sonde_spool__open(test_path("missing.spool"), &off) == NULL);
	ASSERT_INT(errno, ==, ENOENT);
	sonde__buf_free(&b);
}

/* The worked example of docs/spool.md. */
static const uint8_t example[] = {
	0x89, 'S', 'O', 'N',  'D', 'E',	 '\r', '\n', 1,	   0, 3, 1, 2, 3,		  /* 0 */
	0x04, 6,   5,	10,   11,  2,	 'a',  'b',					  /* 14 */
	0x01, 15,  6,	10,   1,   0x80, 0x20, 0x80, 0x20, 0, 0, 7, 1, 0xaa, 2, '/', 'x', /* 22 */
	0x02, 2,   1,	0x20,								  /* 39 */
	0x03, 2,   0,	1,								  /* 43 */
	0x02, 2,   1,	0x10,								  /* 47 */
	0x03, 2,   1,	2,								  /* 51 */
	0x80, 100, 1,	2,								  /* 55 */
	0x85, 50,  2,									  /* 59 */
	0x06, 1,   2,									  /* 62 */
};

/* example with bytes [at, at + del) replaced by ins[0, n) */
static size_t edit_example(uint8_t *out, size_t at, size_t del, const void *ins, size_t n)
{
	memcpy(out, example, at);
	memcpy(out + at, ins, n);
	memcpy(out + at + n, example + at + del, sizeof(example) - at - del);
	return sizeof(example) - del + n;
}

static void expect_error(const uint8_t *p, size_t len, int err, uint64_t offset)
{
	uint64_t off = 12345;
	struct sonde_spool *s = sonde_spool__open_mem(p, len, &off);
	if (s) {
		sonde_spool__close(s);
		FAIL("opened; expected %s at %llu", sonde_strerror(err),
		     (unsigned long long)offset);
	}
	if (errno != err || off != offset)
		FAIL("got %s at %llu, expected %s at %llu", sonde_strerror(errno),
		     (unsigned long long)off, sonde_strerror(err), (unsigned long long)offset);
}

static void expect_byte_error(size_t at, uint8_t v, int err, uint64_t offset)
{
	uint8_t p[sizeof(example)];
	memcpy(p, example, sizeof(p));
	p[at] = v;
	expect_error(p, sizeof(p), err, offset);
}

TEST(spool_reader_rejects_corruption)
{
	uint8_t p[sizeof(example) + 64];
	size_t n;

	/* the example itself is valid */
	struct sonde_spool *s =
		ASSERT_NOT_NULL(sonde_spool__open_mem(example, sizeof(example), NULL));
	sonde_spool__close(s);

	expect_byte_error(1, 'X', SONDE_E_MAGIC, 0);
	expect_byte_error(8, 3, SONDE_E_VERSION, 0); /* a later major */
	expect_byte_error(8, 0, SONDE_E_VERSION, 0);
	expect_byte_error(46, 2, SONDE_E_REFERENCE, 43); /* node uses frame 2 before it exists */
	expect_byte_error(45, 1, SONDE_E_REFERENCE, 43); /* node 1 is its own parent */
	expect_byte_error(41, 2, SONDE_E_REFERENCE, 39); /* frame in undefined module 2 */
	expect_byte_error(57, 2, SONDE_E_REFERENCE, 55); /* undefined thread */
	expect_byte_error(58, 3, SONDE_E_REFERENCE, 55); /* undefined node */
	expect_byte_error(55, 0x88, SONDE_E_FORMAT, 55); /* reserved sample bit (CPU in v2) */
	expect_byte_error(55, 0x84, SONDE_E_FORMAT, 55); /* "same thread" on the first sample */
	expect_byte_error(64, 3, SONDE_E_FORMAT, 62);	 /* END count */
	expect_byte_error(62, 0x07, SONDE_E_FORMAT, 62); /* unknown mandatory tag */
	expect_byte_error(38, 0, SONDE_E_FORMAT, 22);	 /* NUL in a path */
	expect_byte_error(34, 33, SONDE_E_FORMAT, 22);	 /* build id longer than 32 */
	expect_byte_error(15, 5, SONDE_E_FORMAT, 14); /* thread payload shorter than its fields */

	/* module size 0 and a module of 16 bytes that frame offset 0x20 overruns (both
	 * written as non-minimal varints to keep the layout) */
	n = edit_example(p, 29, 2, "\x80\x00", 2);
	expect_error(p, n, SONDE_E_RANGE, 22);
	n = edit_example(p, 29, 2, "\x90\x00", 2);
	expect_error(p, n, SONDE_E_RANGE, 39);
	/* pid 10 retired before the frame is defined in its module */
	n = edit_example(p, 39, 0, "\x05\x02\x05\x0a", 4);
	expect_error(p, n, SONDE_E_REFERENCE, 43);
	/* a time delta that overflows */
	n = edit_example(p, 60, 1, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
	expect_error(p, n, SONDE_E_RANGE, 59);
	/* an 11-byte varint */
	n = edit_example(p, 60, 1, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
	expect_error(p, n, SONDE_E_FORMAT, 59);
	/* a record length above the bound */
	n = edit_example(p, 40, 1, "\x81\x80\x04", 3);
	expect_error(p, n, SONDE_E_FORMAT, 39);
	/* a record length reaching past the end of the data reads as a cut file */
	memcpy(p, example, sizeof(example));
	p[23] = 0xff;
	s = ASSERT_NOT_NULL(sonde_spool__open_mem(p, sizeof(example), NULL));
	struct sonde_spool_info in;
	sonde_spool__get_info(s, &in);
	ASSERT_UINT(in.valid_bytes, ==, 22);
	ASSERT_UINT(in.dropped_bytes, ==, sizeof(example) - 22);
	sonde_spool__close(s);
	/* a byte after END */
	n = edit_example(p, sizeof(example), 0, "\x80", 1);
	expect_error(p, n, SONDE_E_FORMAT, 65);

	/* an optional record of a later minor is skipped; payload bytes past the known
	 * fields too */
	n = edit_example(p, 55, 0, "\x41\x02xy", 4);
	s = ASSERT_NOT_NULL(sonde_spool__open_mem(p, n, NULL));
	sonde_spool__close(s);
	n = edit_example(p, 43, 0, "\x09", 1);
	p[40] = 3;
	s = ASSERT_NOT_NULL(sonde_spool__open_mem(p, n, NULL));
	sonde_spool__close(s);
	/* a later minor is read; a later major is not */
	n = edit_example(p, 9, 1, "\x07", 1);
	s = ASSERT_NOT_NULL(sonde_spool__open_mem(p, n, NULL));
	sonde_spool__close(s);
	/* not a spool at all, even a short one */
	expect_error((const uint8_t *)"hello", 5, SONDE_E_MAGIC, 0);
}

static void put_rec(struct buf *b, uint8_t tag, const uint64_t *v, size_t n)
{
	uint8_t payload[64];
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += sonde__pb_varint_encode(payload + len, v[i]);
	buf_put_u8(b, tag);
	sonde__pb_put_varint_raw(b, len);
	sonde__buf_append(b, payload, len);
}

TEST(spool_reader_bounds_stack_depth)
{
	struct buf b = BUF_INIT;
	uint64_t off;

	sonde__buf_append(&b, example, 14);
	put_rec(&b, 0x02, (uint64_t[]){0, 0x1234}, 2); /* frame 1: a raw address */
	for (uint64_t i = 0; i < SONDE_SPOOL_MAX_DEPTH; i++)
		put_rec(&b, 0x03, (uint64_t[]){i, 1}, 2);
	size_t deepest_ok = b.len;
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, &off));
	uint32_t frames[2];
	ASSERT_INT(sonde_spool__get_stack(s, SONDE_SPOOL_MAX_DEPTH, frames, 2), ==,
		   SONDE_SPOOL_MAX_DEPTH);
	sonde_spool__close(s);
	put_rec(&b, 0x03, (uint64_t[]){SONDE_SPOOL_MAX_DEPTH, 1}, 2);
	expect_error(b.data, b.len, SONDE_E_RANGE, deepest_ok);
	sonde__buf_free(&b);
}

TEST(spool_writer_stack_depth_limit)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_header h = {0};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	static struct sonde_spool_frame st[SONDE_SPOOL_MAX_DEPTH + 1];
	uint32_t t;

	for (size_t i = 0; i <= SONDE_SPOOL_MAX_DEPTH; i++)
		st[i] = (struct sonde_spool_frame){0, 0x1000 + i};
	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "deep", &t));
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, t, st, SONDE_SPOOL_MAX_DEPTH + 1, 0), -EINVAL);
	ASSERT_OK(sonde_spool_writer__add_sample(w, 1, t, st, SONDE_SPOOL_MAX_DEPTH, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	struct sonde_spool *s = open_ok(&b);
	struct sonde_spool_sample smp;
	uint32_t frames[SONDE_SPOOL_MAX_DEPTH];
	struct sonde_spool_frame f;
	ASSERT_OK(sonde_spool__get_sample(s, 0, &smp));
	ASSERT_INT(sonde_spool__get_stack(s, smp.stack, frames, SONDE_SPOOL_MAX_DEPTH), ==,
		   SONDE_SPOOL_MAX_DEPTH);
	ASSERT_OK(sonde_spool__get_frame(s, frames[0], &f));
	ASSERT_UINT(f.addr, ==, 0x1000);
	ASSERT_OK(sonde_spool__get_frame(s, frames[SONDE_SPOOL_MAX_DEPTH - 1], &f));
	ASSERT_UINT(f.addr, ==, 0x1000 + SONDE_SPOOL_MAX_DEPTH - 1);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* tests/data/spool-v1.0.spool was written by the v1.0 writer (before samples carried their
 * CPU): every later reader must still read it as it was written. */
TEST(spool_reader_reads_v1_0_fixture)
{
	uint64_t off = 0;
	struct sonde_spool *s = sonde_spool__open(test_src_path("tests/data/spool-v1.0.spool"), &off);
	struct sonde_spool_info in;
	struct sonde_spool_sample smp;
	struct sonde_spool_thread th;
	struct sonde_spool_module m;
	struct sonde_spool_frame f;
	uint32_t frames[4];

	if (!s)
		FAIL("open: %s at byte %llu", sonde_strerror(errno), (unsigned long long)off);
	sonde_spool__get_info(s, &in);
	ASSERT_UINT(in.version_major, ==, 1);
	ASSERT_UINT(in.version_minor, ==, 0);
	ASSERT_UINT(in.header.sample_period_ns, ==, 1001001);
	ASSERT_UINT(in.samples, ==, 6);
	ASSERT_UINT(in.threads, ==, 2);
	ASSERT_UINT(in.modules, ==, 1);
	ASSERT_INT(in.complete, ==, 1);
	ASSERT_OK(sonde_spool__get_module(s, 1, &m));
	ASSERT_STR_EQ(m.def.path, "/usr/bin/prog");
	ASSERT_UINT(m.def.build_id_len, ==, 4);
	for (uint64_t i = 0; i < 6; i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.time_ns, ==, 5000000000ULL + (i + 1) * 1001001);
		ASSERT_UINT(smp.thread, ==, i % 2 ? 2 : 1);
		ASSERT_UINT(smp.flags, ==, i == 5 ? SONDE_SAMPLE_TRUNCATED : 0);
		ASSERT_UINT(smp.cpu, ==, SONDE_SPOOL_CPU_NONE); /* v1 records no CPU */
		ASSERT_INT(sonde_spool__get_stack(s, smp.stack, frames, 4), ==, 2);
		ASSERT_OK(sonde_spool__get_frame(s, frames[0], &f));
		ASSERT_UINT(f.addr, ==, 0x1100 + (i % 3) * 0x10);
	}
	ASSERT_OK(sonde_spool__get_thread(s, 2, &th));
	ASSERT_STR_EQ(th.comm, "worker");
	sonde_spool__close(s);
}

/* v2: each sample's CPU, written only when it changes, read back for every sample; "not
 * known" is a value of its own. A v2 sample with a reserved tag bit is refused. */
TEST(spool_reader_sample_cpus)
{
	static const uint32_t cpus[] = {0, 0, 1, 5, SONDE_SPOOL_CPU_NONE, 5, 300, 300};
	struct sonde_spool_header h = {1, 2, 3};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_sample smp;
	uint32_t t;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &t));
	for (size_t i = 0; i < sizeof(cpus) / sizeof(cpus[0]); i++)
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 10 + i, t, cpus[i], NULL, 0, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	struct sonde_spool *s = open_ok(&b);
	for (size_t i = 0; i < sizeof(cpus) / sizeof(cpus[0]); i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.cpu, ==, cpus[i]);
	}
	sonde_spool__close(s);
	/* the first sample record follows the header (14 bytes) and the thread (8) */
	ASSERT_UINT(b.data[22], ==, 0x88);
	b.data[22] = 0x98;
	uint64_t off = 0;
	ASSERT(sonde_spool__open_mem(b.data, b.len, &off) == NULL);
	ASSERT_INT(errno, ==, SONDE_E_FORMAT);
	ASSERT_UINT(off, ==, 22);
	sonde__buf_free(&b);
}
