/* The write_into_file writer on its own: a full queue wakes the loop through its eventfd
 * when the thread takes it, and the loop queues the next batch while that one is written,
 * the file getting every byte in order. */
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "service/fwriter.h"

enum { MAX = 256 * 1024 };

static void fill(struct buf *b, uint8_t tag)
{
	uint8_t chunk[4096];

	memset(chunk, tag, sizeof(chunk));
	sonde__buf_reset(b);
	for (int i = 0; i < MAX / (int)sizeof(chunk); i++)
		sonde__buf_append(b, chunk, sizeof(chunk));
}

/* Reads the pipe until it has n bytes, checking that they are MAX bytes of each tag in
 * turn. */
static void drain_pipe(int fd, size_t n, const uint8_t *tags)
{
	static uint8_t got[3 * MAX];

	for (size_t have = 0; have < n;) {
		ssize_t k = read(fd, got + have, n - have);
		ASSERT_INT(k, >, 0);
		have += (size_t)k;
	}
	for (size_t i = 0; i < n; i++)
		if (got[i] != tags[i / MAX])
			FAIL("byte %zu is %u, not %u", i, got[i], tags[i / MAX]);
}

/* Waits for the writer's next wake-up through eventfd efd. */
static void wait_wake(int efd)
{
	struct pollfd pf = {.fd = efd, .events = POLLIN};
	uint64_t v;

	ASSERT_INT(poll(&pf, 1, 10000), ==, 1);
	ASSERT_INT(read(efd, &v, sizeof(v)), ==, (ssize_t)sizeof(v));
}

/* After sonde__fwriter_finish: the wake-ups of the queue's room may come first, so wakes
 * are awaited until the finish is done. */
static void wait_finished(struct fwriter *w, int efd)
{
	for (int tries = 0; !sonde__fwriter_finished(w); tries++) {
		ASSERT_INT(tries, <, 10);
		wait_wake(efd);
	}
}

TEST(service_fwriter_wakes_the_loop_and_takes_the_next_batch_meanwhile)
{
	static const uint8_t tags[] = {'a', 'b', 'c'};
	struct buf b = BUF_INIT;
	int p[2], efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	ASSERT_INT(efd, >=, 0);
	ASSERT_OK(pipe(p));
	struct fwriter *w = sonde__fwriter_new(p[1], MAX);
	ASSERT(w != NULL);
	sonde__fwriter_notify(w, efd);
	/* the pipe holds far less than a batch: the thread blocks writing 'a' */
	fill(&b, 'a');
	ASSERT_INT(sonde__fwriter_push_buf(w, &b), ==, 0);
	ASSERT_UINT(b.len, ==, 0);
	fill(&b, 'b');
	int rc;
	while ((rc = sonde__fwriter_push_buf(w, &b)) == -ENOBUFS) {
		/* 'a' still queued: the thread says when it took it */
		wait_wake(efd);
		ASSERT_UINT(b.len, ==, MAX); /* refused whole, nothing taken */
	}
	ASSERT_INT(rc, ==, 0);
	/* 'a' is being written, 'b' waits: the bound holds 'c' back */
	fill(&b, 'c');
	ASSERT_INT(sonde__fwriter_push_buf(w, &b), ==, -ENOBUFS);
	ASSERT(!sonde__fwriter_room(w, 1));
	drain_pipe(p[0], MAX, tags);
	while ((rc = sonde__fwriter_push_buf(w, &b)) == -ENOBUFS)
		wait_wake(efd);
	ASSERT_INT(rc, ==, 0);
	drain_pipe(p[0], 2 * MAX, tags + 1);
	ASSERT(sonde__fwriter_free(w, 5000));
	sonde__buf_free(&b);
	close(p[0]);
	close(efd);
}

/* A buffer queued behind another changes hands as it is: the loop gets another one back
 * instead of its bytes being copied after the queued ones (a copy of every byte that
 * bound a file's drain), and the file still gets every byte in order. */
TEST(service_fwriter_queues_a_buffer_behind_another_without_copying_it)
{
	static const uint8_t tags[] = {'a', 'b', 'c'};
	struct buf b = BUF_INIT;
	int p[2];

	ASSERT_OK(pipe(p));
	struct fwriter *w = sonde__fwriter_new(p[1], 4 * MAX);
	ASSERT(w != NULL);
	/* the pipe holds far less than 'a': once the thread took it, it blocks writing it
	 * and 'b' stays queued, so 'c' goes behind 'b' (or behind 'a' and 'b') */
	fill(&b, 'a');
	ASSERT_INT(sonde__fwriter_push_buf(w, &b), ==, 0);
	fill(&b, 'b');
	ASSERT_INT(sonde__fwriter_push_buf(w, &b), ==, 0);
	fill(&b, 'c');
	const uint8_t *c = b.data;
	ASSERT_INT(sonde__fwriter_push_buf(w, &b), ==, 0);
	ASSERT_UINT(b.len, ==, 0);
	ASSERT(b.data != c);
	drain_pipe(p[0], 3 * MAX, tags);
	ASSERT(sonde__fwriter_free(w, 5000));
	sonde__buf_free(&b);
	close(p[0]);
}

/* A finish done wakes the loop through the eventfd, so that the EnableTracing reply of
 * a completed file does not wait for the loop's next retry; a closing file (its session
 * disabled, each batch sent to the disk as written) gets every byte. */
TEST(service_fwriter_wakes_the_loop_when_the_finish_is_done)
{
	char path[] = "/tmp/sonde-fwriter-XXXXXX";
	int fd = mkstemp(path), efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct buf b = BUF_INIT;

	ASSERT_INT(fd, >=, 0);
	ASSERT_INT(efd, >=, 0);
	unlink(path);
	int rd = dup(fd);
	ASSERT_INT(rd, >=, 0);
	struct fwriter *w = sonde__fwriter_new(fd, 4 * MAX);
	ASSERT(w != NULL);
	sonde__fwriter_notify(w, efd);
	sonde__fwriter_closing(w);
	for (int i = 0; i < 3; i++) {
		fill(&b, (uint8_t)('a' + i));
		int rc;
		while ((rc = sonde__fwriter_push_buf(w, &b)) == -ENOBUFS)
			wait_wake(efd);
		ASSERT_INT(rc, ==, 0);
	}
	sonde__fwriter_finish(w, 0);
	wait_finished(w, efd);
	struct stat st;
	ASSERT_OK(fstat(rd, &st));
	ASSERT_INT(st.st_size, ==, 3 * MAX);
	static uint8_t got[3 * MAX];
	ASSERT_INT(pread(rd, got, sizeof(got), 0), ==, (ssize_t)sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		if (got[i] != 'a' + i / MAX)
			FAIL("byte %zu is %u, not %u", i, got[i], (unsigned)('a' + i / MAX));
	ASSERT(sonde__fwriter_free(w, 5000));
	sonde__buf_free(&b);
	close(rd);
	close(efd);
}

static void count_release(void *arg)
{
	++*(int *)arg;
}

/* Borrowed bytes (the last drain's packets, written from the trace buffer) go between the
 * owned ones in order, are counted against the bound, and what keeps their memory alive
 * is let go only once the writer is destroyed, its thread gone: not when the queue is
 * written, nor at the finish. */
TEST(service_fwriter_writes_borrowed_bytes_in_order_and_holds_them_to_the_end)
{
	static const uint8_t tags[] = {'a', 'b', 'c'};
	static uint8_t borrowed[MAX];
	struct buf b = BUF_INIT;
	int p[2], released = 0;

	ASSERT_OK(pipe(p));
	struct fwriter *w = sonde__fwriter_new(p[1], MAX);
	ASSERT(w != NULL);
	ASSERT_INT(sonde__fwriter_hold(w, count_release, &released), ==, 0);
	memset(borrowed, 'b', sizeof(borrowed));
	fill(&b, 'a');
	/* 'a' then the borrowed 'b': taken past the bound, which says the queue is full */
	ASSERT_INT(sonde__fwriter_push_ref(w, &b, borrowed, sizeof(borrowed)), ==, 1);
	ASSERT_UINT(b.len, ==, 0);
	fill(&b, 'c');
	/* full or not, depending on whether the thread took 'a' and 'b' by now */
	ASSERT_INT(sonde__fwriter_push_ref(w, &b, NULL, 0), >=, 0);
	drain_pipe(p[0], 3 * MAX, tags);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ASSERT_INT(efd, >=, 0);
	sonde__fwriter_notify(w, efd);
	sonde__fwriter_finish(w, 0);
	wait_finished(w, efd);
	close(efd);
	ASSERT_INT(released, ==, 0); /* finished, not destroyed: its thread may still read */
	ASSERT(sonde__fwriter_free(w, 5000));
	ASSERT_INT(released, ==, 1);
	sonde__buf_free(&b);
	close(p[0]);
}
