/* The spool writer: exact bytes of a small recording (the format of docs/spool.md),
 * interning, argument checking, buffering, and no allocation per sample once warm. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "base/buf.h"
#include "../test.h"

/* Collects everything written, counting the write calls. */
struct sink {
	struct buf b;
	int calls;
	int fail_with; /* when nonzero, every write fails with this */
};

static int sink_write(void *ctx, const void *p, size_t n)
{
	struct sink *s = ctx;

	if (s->fail_with)
		return s->fail_with;
	s->calls++;
	sonde__buf_append(&s->b, p, n);
	return buf_error(&s->b);
}

static const struct sonde_spool_header hdr = {1, 2, 3};

static struct sonde_spool_writer *new_writer(struct sink *s)
{
	memset(s, 0, sizeof(*s));
	return ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, s, &hdr));
}

static uint32_t add_test_module(struct sonde_spool_writer *w, uint32_t pid)
{
	static const uint8_t bid[] = {0xaa};
	struct sonde_spool_module_def m = {.pid = pid,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x1000,
					   .end = 0x2000,
					   .inode = 7,
					   .build_id = bid,
					   .build_id_len = 1,
					   .path = "/x"};
	uint32_t id = 0;
	ASSERT_OK(sonde_spool_writer__add_module(w, 6, &m, &id));
	return id;
}

TEST(spool_writer_exact_bytes)
{
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread = 0;
	const struct sonde_spool_frame frames[] = {{1, 0x10}, {1, 0x20}};

	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &thread));
	ASSERT_UINT(thread, ==, 1);
	ASSERT_UINT(add_test_module(w, 10), ==, 1);
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 100, thread, 3, frames, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 150, thread, 3, frames, 2, SONDE_SAMPLE_TRUNCATED));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 160, thread, frames, 2, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));

	static const uint8_t expect[] = {
		0x89, 'S', 'O', 'N',  'D', 'E',	 '\r', '\n', 2,	   0, /* magic, version 2.0 */
		3,    1,   2,	3,				      /* header payload */
		0x04, 6,   5,	10,   11,  2,	 'a',  'b',	      /* thread 1 */
		0x01, 15,  6,	10,   1,   0x80, 0x20, 0x80, 0x20, 0,
		0,    7,   1,	0xaa, 2,   '/',	 'x', /* module 1 */
		0x02, 2,   1,	0x20,		      /* frame 1: outermost first */
		0x03, 2,   0,	1,		      /* node 1 = (root, frame 1) */
		0x02, 2,   1,	0x10,		      /* frame 2 */
		0x03, 2,   1,	2,		      /* node 2 = (node 1, frame 2) */
		0x88, 100, 1,	4,   2,		      /* sample: dt 100, thread 1, CPU 3 (+1), node 2 */
		0x85, 50,  2,			      /* same thread and CPU, truncated */
		0x8c, 10,  0,	2,		      /* same thread, CPU not known (0) */
		0x06, 1,   3,			      /* end: 3 samples */
	};
	ASSERT_UINT(s.b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(s.b.data, expect, sizeof(expect));
	/* everything went out in one chunk */
	ASSERT_INT(s.calls, ==, 1);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

TEST(spool_writer_rejects_invalid_calls)
{
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread, id;
	struct sonde_spool_frame f = {1, 0x10};

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "t", &thread));
	/* unknown thread, unknown module, unknown flags */
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, 2, NULL, 0, 0), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, 0, NULL, 0, 0), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, thread, &f, 1, 0), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, thread, NULL, 0, 0x100), -EINVAL);
	/* empty and inverted module ranges, oversized build id */
	struct sonde_spool_module_def m = {.pid = 1, .start = 0x1000, .end = 0x1000};
	ASSERT_ERR(sonde_spool_writer__add_module(w, 0, &m, &id), -EINVAL);
	m.end = 0x2000;
	m.build_id_len = 33;
	m.build_id = (const uint8_t *)"0123456789012345678901234567890123";
	ASSERT_ERR(sonde_spool_writer__add_module(w, 0, &m, &id), -EINVAL);

	add_test_module(w, 1);
	/* a frame offset outside the module's [pgoff, pgoff + size) */
	f.addr = 0x1000;
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, thread, &f, 1, 0), -EINVAL);
	f.addr = 0xfff;
	ASSERT_OK(sonde_spool_writer__add_sample(w, 10, thread, &f, 1, 0));
	/* samples go forward in time */
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 9, thread, &f, 1, 0), -ERANGE);
	/* a retired module cannot be referenced; a raw address can */
	ASSERT_OK(sonde_spool_writer__retire_process(w, 11, 1));
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 12, thread, &f, 1, 0), -EINVAL);
	f.module = 0;
	ASSERT_OK(sonde_spool_writer__add_sample(w, 12, thread, &f, 1, 0));

	ASSERT_OK(sonde_spool_writer__finish(w));
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 13, thread, &f, 1, 0), -SONDE_E_STATE);
	ASSERT_ERR(sonde_spool_writer__finish(w), -SONDE_E_STATE);
	sonde_spool_writer__free(w);
	sonde_spool_writer__free(NULL);
	sonde__buf_free(&s.b);
}

/* A retirement ends every module of its process, however many and however interleaved
 * with other processes' they were defined, and no other's; modules defined later for the
 * same pid (the process exec'd) are live until its next retirement. */
TEST(spool_writer_retires_exactly_the_process_modules)
{
	enum { PIDS = 5, EACH = 40 };
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread, mod[PIDS][EACH];
	uint64_t time = 10;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "t", &thread));
	for (int k = 0; k < EACH; k++)
		for (uint32_t p = 0; p < PIDS; p++)
			mod[p][k] = add_test_module(w, 100 + p);
	ASSERT_OK(sonde_spool_writer__retire_process(w, time, 102));
	ASSERT_OK(sonde_spool_writer__retire_process(w, time, 999)); /* none: nothing ends */
	for (uint32_t p = 0; p < PIDS; p++)
		for (int k = 0; k < EACH; k++) {
			struct sonde_spool_frame f = {mod[p][k], 0x10};
			int r = sonde_spool_writer__add_sample(w, time++, thread, &f, 1, 0);
			if (r != (p == 2 ? -EINVAL : 0))
				FAIL("module %d of pid %u: %d after pid 102 retired", k, 100 + p,
				     r);
		}
	uint32_t after = add_test_module(w, 102);
	struct sonde_spool_frame f = {after, 0x10};
	ASSERT_OK(sonde_spool_writer__add_sample(w, time++, thread, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__retire_process(w, time, 102));
	ASSERT_ERR(sonde_spool_writer__add_sample(w, time++, thread, &f, 1, 0), -EINVAL);
	f.module = mod[3][EACH - 1];
	ASSERT_OK(sonde_spool_writer__add_sample(w, time++, thread, &f, 1, 0));
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

/* Each (module, offset) is one frame and each call path one node, however the stacks
 * reach them: a frame under two callers is one frame in two nodes, and a stack written
 * again by another thread (which the writer has no last stack of) defines nothing new. */
TEST(spool_writer_interns_each_frame_and_path_once)
{
	enum { THREADS = 20 };
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t tid[THREADS], mod = 0;
	uint64_t time = 10;

	for (int t = 0; t < THREADS; t++)
		ASSERT_OK(
			sonde_spool_writer__add_thread(w, 0, 1, (uint32_t)(10 + t), "t", &tid[t]));
	mod = add_test_module(w, 1);
	/* innermost first: a leaf 0x10 under callers 0x20 and 0x30, both under 0x40 */
	const struct sonde_spool_frame a[] = {{mod, 0x10}, {mod, 0x20}, {mod, 0x40}};
	const struct sonde_spool_frame b[] = {{mod, 0x10}, {mod, 0x30}, {mod, 0x40}};
	for (int t = 0; t < THREADS; t++) {
		ASSERT_OK(sonde_spool_writer__add_sample(w, time++, tid[t], a, 3, 0));
		ASSERT_OK(sonde_spool_writer__add_sample(w, time++, tid[t], b, 3, 0));
		ASSERT_OK(
			sonde_spool_writer__add_sample(w, time++, tid[(t * 7) % THREADS], a, 3, 0));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	struct sonde_spool *sp = ASSERT_NOT_NULL(sonde_spool__open_mem(s.b.data, s.b.len, NULL));
	struct sonde_spool_info info;
	sonde_spool__get_info(sp, &info);
	ASSERT_UINT(info.frames, ==, 4);
	ASSERT_UINT(info.stacks, ==, 5); /* 0x40, 0x40>0x20, 0x40>0x20>0x10, and the two via 0x30 */
	ASSERT_UINT(info.samples, ==, 3 * THREADS);
	struct sonde_spool_sample first, second;
	ASSERT_OK(sonde_spool__get_sample(sp, 0, &first));
	ASSERT_OK(sonde_spool__get_sample(sp, 1, &second));
	ASSERT_UINT(first.stack, !=, second.stack);
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		ASSERT_OK(sonde_spool__get_sample(sp, i, &smp));
		ASSERT_UINT(smp.stack, ==, i % 3 == 1 ? second.stack : first.stack);
	}
	sonde_spool__close(sp);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

TEST(spool_writer_write_errors_are_sticky)
{
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "t", &thread));
	s.fail_with = -ENOSPC;
	ASSERT_ERR(sonde_spool_writer__flush(w), -ENOSPC);
	s.fail_with = 0;
	ASSERT_ERR(sonde_spool_writer__add_sample(w, 1, thread, NULL, 0, 0), -ENOSPC);
	ASSERT_ERR(sonde_spool_writer__finish(w), -ENOSPC);
	ASSERT_INT(s.calls, ==, 0);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

/* Many samples over a handful of call paths, as a CPU-bound program produces. */
static void add_split_like_samples(struct sonde_spool_writer *w, uint32_t thread, int n,
				   uint64_t *t)
{
	for (int i = 0; i < n; i++) {
		struct sonde_spool_frame st[] = {{1, 0x100 + (uint64_t)(i % 7) * 4},
						 {1, 0x200 + (uint64_t)(i % 3) * 16},
						 {1, 0x300},
						 {1, 0x400},
						 {2, 0x50}};
		*t += 1001001 + (uint64_t)(i % 5) * 1000;
		ASSERT_OK(sonde_spool_writer__add_sample(w, *t, thread, st, 5, 0));
	}
}

TEST(spool_writer_samples_are_small_and_chunked)
{
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread, id;
	uint64_t t = 1000000000;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "split", &thread));
	add_test_module(w, 1);
	struct sonde_spool_module_def libc = {
		.pid = 1, .start = 0x7000, .end = 0x9000, .path = "/lib/libc.so.6"};
	ASSERT_OK(sonde_spool_writer__add_module(w, 0, &libc, &id));
	add_split_like_samples(w, thread, 100000, &t);
	ASSERT_OK(sonde_spool_writer__finish(w));
	double per_sample = (double)s.b.len / 100000;
	printf("%zu bytes, %.2f bytes per sample, %d writes\n", s.b.len, per_sample, s.calls);
	/* tag + 3-byte time delta + 1-byte node */
	ASSERT(per_sample <= 5.1);
	/* big chunks: ~500 KB in a handful of writes, not one per sample */
	ASSERT_INT(s.calls, <=, 4);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

/* mallinfo2 sees glibc's heap; under ASan its allocator replaces glibc's and the figures
 * stay zero, so this check is meaningful in the release build. */
TEST(spool_writer_warm_samples_allocate_nothing)
{
#if defined(__SANITIZE_ADDRESS__)
	SKIP("ASan replaces glibc's allocator, which mallinfo2 measures");
#endif
	struct sink s;
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t thread, id;
	uint64_t t = 0;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "split", &thread));
	add_test_module(w, 1);
	struct sonde_spool_module_def libc = {.pid = 1, .start = 0x7000, .end = 0x9000};
	ASSERT_OK(sonde_spool_writer__add_module(w, 0, &libc, &id));
	/* warm: every path seen, output buffer sized, sink grown to hold it all */
	add_split_like_samples(w, thread, 1000, &t);
	ASSERT_OK(sonde__buf_reserve(&s.b, 8 << 20));
	struct mallinfo2 before = mallinfo2();
	add_split_like_samples(w, thread, 200000, &t);
	struct mallinfo2 after = mallinfo2();
	ASSERT_UINT(after.uordblks + after.hblkhd, ==, before.uordblks + before.hblkhd);
	/* the measurement itself sees an allocation */
	void *volatile probe = malloc(4096);
	struct mallinfo2 probed = mallinfo2();
	ASSERT_UINT(probed.uordblks + probed.hblkhd, >, after.uordblks + after.hblkhd);
	free(probe);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
}

TEST(spool_writer_fd_output)
{
	char path[] = "/tmp/sonde-spool-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_INT(fd, >=, 0);
	unlink(path);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &hdr));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	uint8_t got[32];
	ASSERT_INT(pread(fd, got, sizeof(got), 0), ==, 17);
	ASSERT_MEM_EQ(got, "\x89SONDE\r\n\x02\x00\x03\x01\x02\x03\x06\x01\x00", 17);
	close(fd);
}

/* Stacks of 12 threads (more than the writer remembers a last stack for) interleaved at
 * random, each sharing a random number of outer frames with its thread's previous one,
 * and retirements between them: the spool read back holds every stack exactly, and a
 * frame of a retired module is refused even right after a stack that had it. */
TEST(spool_writer_interleaved_stacks_read_back_exactly)
{
	enum { THREADS = 12, PROCS = 3, SAMPLES = 3000, DEPTH = 40 };
	struct sink s = {0};
	struct sonde_spool_writer *w = new_writer(&s);
	uint32_t tid[THREADS], module[PROCS];
	struct sonde_spool_frame prev[THREADS][DEPTH];
	size_t prev_n[THREADS] = {0};
	struct sonde_spool_frame(*want)[DEPTH] = calloc(SAMPLES, sizeof(*want));
	size_t *want_n = calloc(SAMPLES, sizeof(*want_n));
	uint64_t seed = 12345, time = 10;
	uint32_t frames[DEPTH];

	ASSERT(want && want_n);
	for (uint32_t p = 0; p < PROCS; p++)
		module[p] = add_test_module(w, 100 + p);
	for (uint32_t t = 0; t < THREADS; t++)
		ASSERT_OK(sonde_spool_writer__add_thread(w, 7, 100 + t % PROCS, 200 + t, "t",
							 &tid[t]));
	for (int i = 0; i < SAMPLES; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t t = (uint32_t)(seed >> 33) % THREADS, p = t % PROCS;
		size_t n = 1 + (seed >> 20) % DEPTH, keep = (seed >> 40) % (n + 1);
		struct sonde_spool_frame *st = want[i];
		if (i && i % 1000 == 0) {
			/* a process execs: its modules retire, a new one replaces them */
			ASSERT_OK(sonde_spool_writer__retire_process(w, time, 100 + p));
			if (prev_n[t])
				ASSERT_ERR(sonde_spool_writer__add_sample(w, time, tid[t], prev[t],
									  prev_n[t], 0),
					   -EINVAL);
			module[p] = add_test_module(w, 100 + p);
			prev_n[t] = 0;
			for (uint32_t o = p; o < THREADS; o += PROCS)
				prev_n[o] = 0;
		}
		if (keep > prev_n[t])
			keep = prev_n[t];
		/* the outer `keep` frames of the thread's previous stack, new ones inside */
		for (size_t k = 0; k < keep; k++)
			st[n - 1 - k] = prev[t][prev_n[t] - 1 - k];
		for (size_t k = keep; k < n; k++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			st[n - 1 - k] = (struct sonde_spool_frame){module[p], 0x10 + (seed >> 54)};
		}
		ASSERT_OK(sonde_spool_writer__add_sample(w, time++, tid[t], st, n, 0));
		memcpy(prev[t], st, n * sizeof(*st));
		prev_n[t] = n;
		want_n[i] = n;
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	uint64_t off = 0;
	struct sonde_spool *sp = sonde_spool__open_mem(s.b.data, s.b.len, &off);
	ASSERT_NOT_NULL(sp);
	for (int i = 0; i < SAMPLES; i++) {
		struct sonde_spool_sample smp;
		ASSERT_OK(sonde_spool__get_sample(sp, (uint64_t)i, &smp));
		ASSERT_INT(sonde_spool__get_stack(sp, smp.stack, frames, DEPTH), ==,
			   (int)want_n[i]);
		for (size_t k = 0; k < want_n[i]; k++) {
			struct sonde_spool_frame f;
			ASSERT_OK(sonde_spool__get_frame(sp, frames[k], &f));
			if (f.module != want[i][k].module || f.addr != want[i][k].addr)
				FAIL("sample %d frame %zu: %u:%#llx, written %u:%#llx", i, k,
				     f.module, (unsigned long long)f.addr, want[i][k].module,
				     (unsigned long long)want[i][k].addr);
		}
	}
	sonde_spool__close(sp);
	sonde_spool_writer__free(w);
	sonde__buf_free(&s.b);
	free(want);
	free(want_n);
}
