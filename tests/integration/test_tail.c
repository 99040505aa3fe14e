/* The tail on real recordings of the split program: in the recording process (sharing the
 * recorder's images), and in a second process (how soon it sees what the recorder
 * flushed). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/record.h>
#include <sonde/tail.h>

#include "../test.h"
#include "../util.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct sonde_recorder *record_launched(struct sonde_launch **l, const char *const argv[],
					      const char *out)
{
	struct sonde_record_opts o = {.sz = sizeof(o), .frequency = 999};

	*l = ASSERT_NOT_NULL(sonde_launch__new((char **)argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(sonde_launch__pid(*l), out, SONDE_ATTACH_ON_EXEC, &o));
	ASSERT_OK(sonde_launch__resume(*l));
	return r;
}

/* Leaf function names of a batch's samples: counts of compute_hot and of all samples. */
struct leaf_counts {
	uint64_t samples, hot, resolved;
};

static void count_leaves(struct sonde_tail *t, const struct sonde_tail_batch *b,
			 struct leaf_counts *c)
{
	for (size_t i = 0; i < b->n_samples; i++) {
		uint32_t frames[1];
		struct sonde_spool_thread th;
		struct sonde_sym_frame sym[8];
		c->samples++;
		if (ASSERT_OK(sonde_tail__get_stack(t, b->samples[i].stack, frames, 1)) == 0)
			continue;
		ASSERT_OK(sonde_tail__get_thread(t, b->samples[i].thread, &th));
		int n = ASSERT_OK(sonde_tail__symbolize(t, frames[0], th.pid, sym, 8));
		ASSERT_INT(n, >=, 1);
		if (sym[n - 1].origin != SONDE_SYM_ORIGIN_NONE)
			c->resolved++;
		if (strcmp(sym[n - 1].name, "compute_hot") == 0)
			c->hot++;
	}
}

static void drain_tail(struct sonde_tail *t, struct leaf_counts *c, int *ended)
{
	struct sonde_tail_batch b = {.sz = sizeof(b)};

	while (ASSERT_OK(sonde_tail__poll(t, 5000, 0, &b)) > 0)
		count_leaves(t, &b, c);
	*ended = b.ended;
}

/* The recording's samples reach the tail while the program runs, not only at its end: the
 * program (split for 0.5 s of its CPU time, then the gate) waits at its gate until 100 have,
 * however slowly a loaded machine runs it or the test. */
TEST_TIMEOUT(tail_recorder_follows_its_own_recording, 120)
{
	const char *out = test_path("live.spool");
	struct sonde_launch *l;
	struct leaf_counts c = {0};
	struct test_gate g;
	int status, ended = 0;

	test_require_perf();
	test_gate_open(&g, "gate");
	const char *argv[] = {"/bin/sh", "-c", TEST_HELD, test_prog("split"), "0.5cpu", g.path, NULL};
	struct sonde_recorder *r = record_launched(&l, argv, out);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_recorder__tail(r, NULL));
	/* One tail per recorder. */
	ASSERT(sonde_recorder__tail(r, NULL) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	double deadline = test_now() + 60;
	while (c.samples < 100) {
		ASSERT(test_now() < deadline);
		ASSERT_OK(sonde_recorder__poll(r, 100, NULL));
		drain_tail(t, &c, &ended);
		ASSERT(!ended);
	}
	test_gate_pass(&g);
	while (sonde_launch__wait(l, WNOHANG, &status) == 0) {
		ASSERT_OK(sonde_recorder__poll(r, 100, NULL));
		drain_tail(t, &c, &ended);
		ASSERT(!ended);
	}
	ASSERT_INT(status, ==, 0);
	struct sonde_record_summary s = {.sz = sizeof(s)};
	ASSERT_OK(sonde_recorder__finish(r, &s));
	/* The tail outlives its recorder. */
	sonde_recorder__free(r);
	drain_tail(t, &c, &ended);
	ASSERT(ended);
	ASSERT_UINT(c.samples, ==, s.samples_written);
	/* Symbolized through the tail: compute_hot holds ~60% of the CPU. */
	ASSERT_UINT(c.resolved * 10, >=, c.samples * 9);
	ASSERT_UINT(c.hot * 100, >=, c.samples * 40);
	ASSERT_UINT(c.hot * 100, <=, c.samples * 80);
	sonde_tail__free(t);
	sonde_launch__free(l);
	test_gate_close(&g);
}

TEST_TIMEOUT(tail_shares_recorder_images_of_deleted_binary, 120)
{
	const char *out = test_path("deleted.spool");
	const char *copy = test_copy_for_anyone(test_prog("split"));
	struct sonde_launch *l;
	struct leaf_counts shared = {0}, alone = {0};
	int status, ended;

	test_require_perf();
	/* A build-id cache of this test's own: finishing would copy the deleted binary into
	 * the user's, where a later run's tail without the recorder would find it. */
	setenv("SONDE_BUILDID_CACHE", test_path("bidcache"), 1);
	/* split for 0.5 s of its CPU time: as many samples however loaded the machine is */
	const char *argv[] = {copy, "0.5cpu", NULL};
	struct sonde_recorder *r = record_launched(&l, argv, out);
	while (sonde_launch__wait(l, WNOHANG, &status) == 0)
		ASSERT_OK(sonde_recorder__poll(r, 100, NULL));
	ASSERT_OK(sonde_recorder__flush(r));
	/* The process is gone and so is its binary: only the recorder's image is left. */
	ASSERT_OK(unlink(copy));
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_recorder__tail(r, NULL));
	drain_tail(t, &shared, &ended);
	struct sonde_tail *t2 = ASSERT_NOT_NULL(sonde_tail__open(out, NULL));
	drain_tail(t2, &alone, &ended);

	ASSERT_UINT(shared.samples, >=, 100);
	ASSERT_UINT(shared.samples, ==, alone.samples);
	ASSERT_UINT(shared.hot * 100, >=, shared.samples * 40);
	/* Without the recorder, the deleted binary's frames cannot be named. */
	ASSERT_UINT(alone.hot, ==, 0);
	sonde_tail__free(t2);
	sonde_tail__free(t);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	sonde_launch__free(l);
}

TEST(tail_of_writer_recorder_is_refused)
{
	struct sonde_launch *l;
	char *argv[] = {(char *)test_prog("split"), "1", NULL};

	test_require_perf();
	l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	int fd = open(test_path("w.spool"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach_writer(sonde_launch__pid(l), sonde_spool_writer__write_fd,
					     (void *)(intptr_t)fd, SONDE_ATTACH_ON_EXEC, NULL));
	ASSERT(sonde_recorder__tail(r, NULL) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	sonde_recorder__free(r);
	sonde_launch__free(l);
	close(fd);
}

/* What the reader process reports: how many samples it has seen, and when. */
struct seen {
	uint64_t samples, at_ns;
};

static void reader_process(const char *path, int wfd)
{
	struct sonde_tail *t = sonde_tail__open(path, NULL);
	struct sonde_tail_batch b = {.sz = sizeof(b)};
	struct seen s = {0};
	uint64_t deadline = mono_ns() + 110ull * 1000000000ull; /* the test's 120 s, less its end */

	if (!t)
		_exit(2);
	while (mono_ns() < deadline) {
		int n = sonde_tail__poll(t, 0, 0, &b);
		if (n < 0)
			_exit(3);
		if (b.n_samples) {
			s.samples += b.n_samples;
			s.at_ns = mono_ns();
			if (write(wfd, &s, sizeof(s)) != sizeof(s))
				_exit(4);
		}
		if (b.ended)
			_exit(0);
		if (n == 0)
			usleep(10000);
	}
	_exit(5);
}

/* Waits for the reader to report at least `want` samples, the recorder left alone: what
 * its flush pushed to the file is all the reader can see. Returns when it saw them. */
static uint64_t wait_for_reader(int rfd, uint64_t want)
{
	struct seen s = {0};
	uint64_t deadline = mono_ns() + 60ull * 1000000000ull;

	while (s.samples < want) {
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		uint64_t now = mono_ns();
		if (now > deadline)
			FAIL("the reader saw %llu samples of %llu flushed, 60 s after the flush",
			     (unsigned long long)s.samples, (unsigned long long)want);
		if (poll(&p, 1, 100) == 1)
			ASSERT_INT(read(rfd, &s, sizeof(s)), ==, (long)sizeof(s));
	}
	return s.at_ns;
}

/* A flush makes every sample written so far visible to a tail in another process: after
 * it the recorder is not polled again (a poll also pushes its buffer), so what the reader
 * sees, it sees by the flush. Five rounds, each of 10 more samples (not of a time, in
 * which a loaded machine may give split none). How soon the reader sees them is printed,
 * not judged: it is the machine's scheduling of the reader. */
TEST_TIMEOUT(tail_second_process_sees_every_flushed_sample, 120)
{
	const char *out = test_path("xproc.spool");
	struct sonde_launch *l;
	int pfd[2], status;
	uint64_t worst = 0, written = 0;

	test_require_perf();
	/* killed at the end: it runs as long as the rounds take */
	const char *argv[] = {test_prog("split"), "300", NULL};
	struct sonde_recorder *r = record_launched(&l, argv, out);
	ASSERT_OK(pipe(pfd));
	pid_t reader = fork();
	ASSERT(reader >= 0);
	if (reader == 0) {
		close(pfd[0]);
		reader_process(out, pfd[1]);
	}
	close(pfd[1]);
	for (int round = 0; round < 5; round++) {
		struct sonde_record_summary s = {.sz = sizeof(s)};
		uint64_t deadline = mono_ns() + 60ull * 1000000000ull;
		do {
			ASSERT(mono_ns() < deadline);
			ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
			ASSERT_OK(sonde_recorder__summary(r, &s));
		} while (s.samples_written < written + 10);
		ASSERT_OK(sonde_recorder__flush(r));
		ASSERT_OK(sonde_recorder__summary(r, &s));
		written = s.samples_written;
		uint64_t flushed = mono_ns();
		uint64_t seen = wait_for_reader(pfd[0], written);
		uint64_t latency = seen > flushed ? seen - flushed : 0;
		if (latency > worst)
			worst = latency;
	}
	printf("%llu samples in 5 flushes, each seen by the reader at most %.1f ms after it\n",
	       (unsigned long long)written, worst / 1e6);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	ASSERT_INT(test_wait(reader, 30), ==, 0);
	sonde_recorder__free(r);
	kill(sonde_launch__pid(l), SIGKILL);
	sonde_launch__wait(l, 0, &status);
	sonde_launch__free(l);
	close(pfd[0]);
}
