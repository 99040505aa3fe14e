/* The tail reader on spools written by the real writer and appended to a file piece by
 * piece: every split point, bounded batches, a shrinking file, punched holes, invalidation
 * of processes, malformed bytes. The whole-file reader over the same bytes is the
 * reference. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/spool_reader.h>
#include <sonde/tail.h>

#include "spool_fixture.h"
#include "../test.h"
#include "../util.h"

static void append(int fd, const void *p, size_t n)
{
	ASSERT_INT(write(fd, p, n), ==, (long)n);
}

/* Checks that tail sample i has the same time, thread and leaf-first frames as the
 * reference's sample i. */
static void check_sample(struct sonde_tail *t, const struct sonde_spool *ref, uint64_t i,
			 const struct sonde_spool_sample *got)
{
	struct sonde_spool_sample want;
	uint32_t fa[64], fb[64];

	ASSERT_OK(sonde_spool__get_sample(ref, i, &want));
	ASSERT_UINT(got->time_ns, ==, want.time_ns);
	ASSERT_UINT(got->thread, ==, want.thread);
	ASSERT_UINT(got->flags, ==, want.flags);
	int da = ASSERT_OK(sonde_tail__get_stack(t, got->stack, fa, 64));
	int db = ASSERT_OK(sonde_spool__get_stack(ref, want.stack, fb, 64));
	ASSERT_INT(da, ==, db);
	for (int k = 0; k < da; k++) {
		struct sonde_spool_frame x, y;
		ASSERT_OK(sonde_tail__get_frame(t, fa[k], &x));
		ASSERT_OK(sonde_spool__get_frame(ref, fb[k], &y));
		ASSERT_UINT(x.module, ==, y.module);
		ASSERT_UINT(x.addr, ==, y.addr);
	}
	struct sonde_spool_thread th;
	ASSERT_OK(sonde_tail__get_thread(t, got->thread, &th));
	ASSERT(th.comm && th.comm[0]);
}

/* Appends the spool `step` bytes at a time, polling after each piece with at most
 * max_records per poll; checks every sample against the reference. */
static void follow_in_pieces(const struct buf *b, size_t step, size_t max_records)
{
	struct sonde_spool *ref = ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
	struct sonde_spool_info info;
	const char *path = test_path("pieces.spool");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	uint64_t seen = 0, records = 0;
	bool saw_pending = false, ended = false;

	sonde_spool__get_info(ref, &info);
	ASSERT(fd >= 0);
	for (size_t off = 0; off <= b->len; off += step) {
		size_t n = b->len - off < step ? b->len - off : step;
		append(fd, b->data + off, n);
		for (;;) {
			struct sonde_tail_batch batch = {.sz = sizeof(batch)};
			int got = ASSERT_OK(sonde_tail__poll(t, max_records, 0, &batch));
			ASSERT_UINT(batch.records, <=, max_records);
			ASSERT_UINT(batch.records, ==, (uint64_t)got);
			records += batch.records;
			saw_pending |= batch.pending > 0;
			for (size_t i = 0; i < batch.n_samples; i++)
				check_sample(t, ref, seen++, &batch.samples[i]);
			ended = batch.ended;
			if (got == 0)
				break;
		}
	}
	ASSERT_UINT(seen, ==, info.samples);
	ASSERT(ended);
	ASSERT_UINT(sonde_tail__offset(t), ==, b->len);
	/* Pieces that cut records were retried, not failed. */
	if (step < 16)
		ASSERT(saw_pending);
	ASSERT_UINT(records, >, seen);
	sonde_tail__free(t);
	close(fd);
	sonde_spool__close(ref);
}

TEST(tail_every_split_point_of_a_growing_file)
{
	struct buf b = {0};

	spool_fixture_small(&b, 120, 1);
	follow_in_pieces(&b, 1, 1000);
	follow_in_pieces(&b, 7, 3);
	follow_in_pieces(&b, 4096, 1);
	follow_in_pieces(&b, b.len, 100000);
	sonde__buf_free(&b);
}

TEST(tail_batches_respect_byte_and_record_bounds)
{
	struct buf b = {0};
	const char *path = test_path("bounds.spool");

	spool_fixture_small(&b, 3000, 1);
	test_write_file(path, b.data, b.len);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	uint64_t total = 0;
	int polls = 0;
	do {
		ASSERT_OK(sonde_tail__poll(t, 0, 256, &batch));
		/* A poll reads at most 256 bytes, so it consumes at most those plus the
		 * incomplete record it carried over. */
		ASSERT_UINT(batch.bytes, <=, 256 + 64);
		total += batch.bytes;
		polls++;
	} while (batch.records && polls < 100000);
	ASSERT_UINT(total, ==, b.len);
	ASSERT_INT(polls, >=, (int)(b.len / 320));
	ASSERT(batch.ended);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

/* A byte bound smaller than a record: each poll reads on to finish the record it ends in,
 * so a caller polling until 0 consumes the whole file. Before, such a poll returned 0 in
 * the middle of the record ("nothing new"), and that caller stopped there. */
TEST(tail_poll_until_nothing_new_reads_records_larger_than_the_byte_bound)
{
	struct buf b = {0};
	const char *path = test_path("small-bound.spool");

	spool_fixture_small(&b, 50, 1);
	test_write_file(path, b.data, b.len);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	uint64_t total = 0, samples = 0;
	int n;

	while ((n = sonde_tail__poll(t, 0, 8, &batch)) > 0) {
		total += batch.bytes;
		samples += batch.n_samples;
	}
	ASSERT_INT(n, ==, 0);
	ASSERT_UINT(total, ==, b.len);
	ASSERT_UINT(samples, ==, 50);
	ASSERT(batch.ended);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

TEST(tail_shrinking_file_is_an_error)
{
	struct buf b = {0};
	const char *path = test_path("shrink.spool");

	spool_fixture_small(&b, 200, 0);
	test_write_file(path, b.data, b.len);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_UINT(batch.n_samples, ==, 200);
	ASSERT(!batch.ended);
	/* Nothing new is fine... */
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), ==, 0);
	/* ...a file cut below what was read is not, and the error stays. */
	ASSERT_OK(truncate(path, (off_t)(b.len / 2)));
	ASSERT_ERR(sonde_tail__poll(t, 0, 0, &batch), -SONDE_E_SHRUNK);
	test_write_file(path, b.data, b.len);
	ASSERT_ERR(sonde_tail__poll(t, 0, 0, &batch), -SONDE_E_SHRUNK);
	ASSERT_CONTAINS(sonde_strerror(-SONDE_E_SHRUNK), "shrank");
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

TEST(tail_reports_invalidated_processes)
{
	struct buf b = {0};
	const char *path = test_path("inval.spool");
	struct sonde_spool_header h = {1, 2, 3};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_module_def exe = {.pid = 42,
					     .flags = SONDE_MODULE_EXEC,
					     .start = 0x1000,
					     .end = 0x2000,
					     .path = "/bin/x"};
	struct sonde_spool_module_def jit = {.pid = 43,
					     .flags = SONDE_MODULE_EXEC | SONDE_MODULE_JIT,
					     .start = 0x9000,
					     .end = 0xa000,
					     .path = "//anon"};
	uint32_t id, th;

	ASSERT_OK(sonde_spool_writer__add_module(w, 10, &exe, &id));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 10, 42, 42, "x", &th));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b.data, b.len);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), ==, 3);
	ASSERT_UINT(batch.new_modules, ==, 1);
	ASSERT_UINT(batch.n_invalidated, ==, 0);

	/* pid 42 execs (its modules retire, twice for good measure), pid 43 maps JIT code. */
	ASSERT_OK(sonde_spool_writer__retire_process(w, 20, 42));
	ASSERT_OK(sonde_spool_writer__retire_process(w, 21, 42));
	ASSERT_OK(sonde_spool_writer__add_module(w, 22, &jit, &id));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b.data, b.len);
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), ==, 3);
	ASSERT_UINT(batch.retirements, ==, 2);
	ASSERT_UINT(batch.n_invalidated, ==, 2);
	ASSERT_UINT(batch.invalidated_pids[0], ==, 42);
	ASSERT_UINT(batch.invalidated_pids[1], ==, 43);
	struct sonde_spool_module m;
	ASSERT_OK(sonde_tail__get_module(t, 1, &m));
	ASSERT(m.retired);
	ASSERT_STR_EQ(m.def.path, "/bin/x");
	/* The next batch starts with a clean list. */
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), ==, 0);
	ASSERT_UINT(batch.n_invalidated, ==, 0);
	sonde_spool_writer__free(w);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

TEST(tail_punches_consumed_blocks_and_keeps_definitions)
{
	struct buf b = {0};
	const char *path = test_path("punch.spool");
	struct stat st_before, st_after;

	/* Definitions come first, then megabytes of samples referring to them. */
	spool_fixture_small(&b, 400000, 0);
	test_write_file(path, b.data, b.len);
	int fd = open(path, O_RDONLY);
	ASSERT(fd >= 0);
	ASSERT_OK(fsync(fd));
	ASSERT_OK(fstat(fd, &st_before));

	struct sonde_tail_opts o = {.sz = sizeof(o), .punch_holes = 1};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, &o));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	uint64_t samples = 0;
	uint32_t last_stack = 0;
	while (ASSERT_OK(sonde_tail__poll(t, 0, 0, &batch)) > 0) {
		samples += batch.n_samples;
		for (size_t i = 0; i < batch.n_samples; i++)
			if (batch.samples[i].stack)
				last_stack = batch.samples[i].stack;
	}
	ASSERT_UINT(samples, ==, 400000);
	ASSERT_OK(fstat(fd, &st_after));
	if (st_after.st_blocks == st_before.st_blocks)
		SKIP("the file system of %s does not deallocate punched blocks", path);
	/* Everything but the last partial block is gone; the size is kept. */
	ASSERT_INT(st_after.st_size, ==, st_before.st_size);
	ASSERT_INT(st_after.st_blocks * 512, <=, 3 * 4096);
	ASSERT_INT(st_before.st_blocks * 512, >=, (long)b.len);
	char zero[64] = {0}, head[64];
	ASSERT_INT(pread(fd, head, sizeof(head), 0), ==, (long)sizeof(head));
	ASSERT_MEM_EQ(head, zero, sizeof(head));
	/* Definitions read from the punched range still resolve. */
	uint32_t frames[8];
	int depth = ASSERT_OK(sonde_tail__get_stack(t, last_stack, frames, 8));
	ASSERT_INT(depth, >=, 1);
	struct sonde_spool_frame f;
	ASSERT_OK(sonde_tail__get_frame(t, frames[depth - 1], &f));
	struct sonde_spool_module m;
	ASSERT_OK(sonde_tail__get_module(t, f.module, &m));
	ASSERT_STR_EQ(m.def.path, "/usr/bin/other");
	close(fd);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

TEST(tail_malformed_bytes_are_a_sticky_error)
{
	struct buf b = {0};
	const char *path = test_path("bad.spool");

	spool_fixture_small(&b, 50, 1);
	b.data[b.len - 1] ^= 0x55; /* the END count no longer matches */
	test_write_file(path, b.data, b.len);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	int err = sonde_tail__poll(t, 0, 0, NULL);
	if (err > 0) /* the good records come first */
		err = sonde_tail__poll(t, 0, 0, NULL);
	ASSERT_INT(err, <, 0);
	ASSERT_INT(sonde_tail__poll(t, 0, 0, NULL), ==, err);
	ASSERT_UINT(sonde_tail__offset(t), <, b.len);
	sonde_tail__free(t);

	test_write_file(path, "not a spool at all", 18);
	t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	ASSERT_ERR(sonde_tail__poll(t, 0, 0, NULL), -SONDE_E_MAGIC);
	sonde_tail__free(t);
	sonde__buf_free(&b);
	ASSERT(sonde_tail__open(test_path("missing"), NULL) == NULL);
	ASSERT_INT(errno, ==, ENOENT);
}
