/* The recorder's clock (sonde__rec_set_clock): what it says, not how long the test slept,
 * decides when a poll's deadlines are due and which records are old enough to release.
 * A clock the test holds, then moves forward:
 *
 *  - an open gap waits for REC_SWEEP_INTERVAL_NS of that clock since the last sweep, to
 *    the nanosecond, however long the polls took;
 *  - records newer than the held clock stay queued whatever the polls, and are released
 *    once it has moved past them;
 *  - buffered spool bytes reach the writer when the last push is REC_PUSH_INTERVAL_NS old
 *    by that clock, not before, and each CPU's pending switches with them;
 *  - the cut of a generation switch is read from it while the older generation still
 *    records (a clock that makes the target act at that read finds its act recorded).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/record.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "base/buf.h"
#include "record/recorder.h"

struct held_clock {
	uint64_t ns;
};

static uint64_t held_now(void *ctx)
{
	return ((const struct held_clock *)ctx)->ns;
}

static int discard_write(void *ctx, const void *buf, size_t len)
{
	(void)ctx;
	(void)buf;
	(void)len;
	return 0;
}

/* A recorder of a spawned argv writing through write (ctx), on the clock c holds from now. */
struct held_rec {
	pid_t pid;
	struct sonde_recorder *r;
};

static struct held_rec held_start(const char *const argv[], sonde_spool_write_fn write,
				  void *ctx, struct held_clock *c)
{
	struct sonde_record_opts opts = {
		.sz = sizeof(opts), .frequency = 999, .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	struct held_rec h;

	test_require_perf();
	h.pid = test_spawn(argv);
	h.r = ASSERT_NOT_NULL(
		sonde_recorder__attach_writer(h.pid, write, ctx, SONDE_ATTACH_STOP, &opts));
	c->ns = sonde__rec_mono_now();
	sonde__rec_set_clock(h.r, held_now, c);
	return h;
}

/* Back on the recorder's own clock, finished and freed, its process killed. */
static void held_stop(struct held_rec *h)
{
	sonde__rec_set_clock(h->r, NULL, NULL);
	ASSERT_OK(sonde_recorder__finish(h->r, NULL));
	sonde_recorder__free(h->r);
	kill(h->pid, SIGKILL);
	test_wait(h->pid, 10);
}

static struct sonde_record_summary summary(struct sonde_recorder *r)
{
	struct sonde_record_summary s = {.sz = sizeof(s)};

	ASSERT_OK(sonde_recorder__summary(r, &s));
	return s;
}

/* A process that sleeps: its ring stays nearly empty, so every gap is one the test opened,
 * and the clock moved ahead of the kernel's ignores no record of it. */
TEST_TIMEOUT(record_clock_drives_recovery_sweeps, 60)
{
	const char *argv[] = {"/bin/sleep", "60", NULL};
	struct held_clock c;
	struct held_rec h = held_start(argv, discard_write, NULL, &c);
	struct sonde_recorder *r = h.r;

	sonde__rec_note_loss(r, c.ns); /* the first gap: no sweep ran yet, it is due at once */
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	ASSERT_UINT(summary(r).recovery_sweeps, ==, 1);
	ASSERT_UINT(summary(r).gaps_recovered, ==, 1);

	sonde__rec_note_loss(r, c.ns);
	c.ns += REC_SWEEP_INTERVAL_NS - 1;
	for (int i = 0; i < 3; i++)
		ASSERT_INT(sonde_recorder__poll(r, 10, NULL), >=, 0);
	ASSERT_UINT(summary(r).recovery_sweeps, ==, 1);
	ASSERT_UINT(summary(r).gaps_recovered, ==, 1);

	c.ns += 1;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	ASSERT_UINT(summary(r).recovery_sweeps, ==, 2);
	ASSERT_UINT(summary(r).gaps_recovered, ==, 2);

	/* no gap open: the clock passing the interval runs nothing */
	c.ns += 10ull * REC_SWEEP_INTERVAL_NS;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	ASSERT_UINT(summary(r).recovery_sweeps, ==, 2);

	/* flush sweeps an open gap whatever the clock says */
	sonde__rec_note_loss(r, c.ns);
	ASSERT_OK(sonde_recorder__flush(r));
	ASSERT_UINT(summary(r).recovery_sweeps, ==, 3);
	ASSERT_UINT(summary(r).lifecycle_gaps, ==, 3);
	ASSERT_UINT(summary(r).gaps_recovered, ==, 3);
	held_stop(&h);
}

/* A busy process: what it records after the held time stays queued, poll after poll. */
TEST_TIMEOUT(record_clock_releases_records, 60)
{
	const char *argv[] = {test_prog("split"), "30", NULL};
	struct held_clock c;
	struct held_rec h = held_start(argv, discard_write, NULL, &c);
	struct sonde_recorder *r = h.r;
	/* what was recorded before the clock was held is released by this poll */
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	uint64_t written = summary(r).samples_written;

	/* every record from now on is newer than the held clock: polls queue them. Not all of
	 * them are samples (the kernel's throttling records on a loaded machine, a thread's
	 * mappings): twice the samples asked for below are queued first (a loaded CI run
	 * released 19 samples of 20 records). */
	double end = test_now() + 30;
	while (sonde__perf_stream_count(r->stream) < 40) {
		ASSERT(test_now() < end);
		ASSERT_INT(sonde_recorder__poll(r, 100, NULL), ==, 0);
	}
	ASSERT_UINT(summary(r).samples_written, ==, written);

	c.ns = sonde__rec_mono_now() + REC_REORDER_SLACK_NS;
	int n = sonde_recorder__poll(r, 0, NULL);
	ASSERT_INT(n, >=, 20);
	ASSERT_UINT(summary(r).samples_written, >=, written + 20);
	held_stop(&h);
}

static int count_write(void *ctx, const void *buf, size_t len)
{
	(void)buf;
	(void)len;
	(*(size_t *)ctx)++;
	return 0;
}

TEST_TIMEOUT(record_clock_times_live_pushes, 60)
{
	const char *argv[] = {test_prog("split"), "30", NULL};
	size_t writes = 0;
	struct held_clock c;
	struct held_rec h = held_start(argv, count_write, &writes, &c);
	struct sonde_recorder *r = h.r;
	uint64_t t0 = c.ns;
	/* the first poll pushes what attaching buffered (no push before) */
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	size_t pushed = writes;
	ASSERT_UINT(pushed, >=, 1);

	/* records of the next interval and later are queued: polls release and push nothing */
	double end = test_now() + 30;
	while (sonde__perf_stream_count(r->stream) < 20 ||
	       sonde__rec_mono_now() < t0 + 3 * REC_PUSH_INTERVAL_NS) {
		ASSERT(test_now() < end);
		ASSERT_INT(sonde_recorder__poll(r, 50, NULL), ==, 0);
	}
	ASSERT_UINT(writes, ==, pushed);

	/* the samples of one interval less a nanosecond are written, into the buffer only */
	uint64_t written = summary(r).samples_written;
	c.ns = t0 + REC_PUSH_INTERVAL_NS - 1;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >, 0);
	ASSERT_UINT(summary(r).samples_written, >, written);
	ASSERT_UINT(writes, ==, pushed);
	/* the interval is over: they are pushed, in one write */
	c.ns = t0 + REC_PUSH_INTERVAL_NS;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	ASSERT_UINT(writes, ==, pushed + 1);
	held_stop(&h);
}

/* Appends what the recorder writes to a buffer. */
static int buf_write(void *ctx, const void *buf, size_t len)
{
	sonde__buf_append(ctx, buf, len);
	return buf_error(ctx);
}

/* Switches in the SWITCHES records of the spool bytes b holds (a prefix of a spool). */
static uint64_t written_switches(const struct buf *b)
{
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	uint64_t n = 0;
	size_t pos = 0;
	int k;

	while (pos < b->len && (k = sonde_spool_decoder__decode(d, b->data + pos, b->len - pos,
								&rec)) > 0) {
		if (rec.type == SONDE_SPOOL_REC_SWITCHES)
			n += rec.switches.n;
		pos += (size_t)k;
	}
	sonde_spool_decoder__free(d);
	return n;
}

/* A system-wide off-CPU recording keeps the CPUs' switches in runs of up to 1024 per CPU;
 * a push writes every CPU's pending ones, so that a live reader sees the stays end (the
 * live wall view weighs samples by them): after the poll that pushes, no switch is left
 * pending, and the bytes pushed hold the switches of the records it released. */
TEST_TIMEOUT(record_clock_push_writes_the_pending_switches, 60)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 999,
					 .event = SONDE_RECORD_EVENT_CPU_CLOCK,
					 .off_cpu = true};
	struct held_clock c;
	struct buf b = {0};

	test_require_perf();
	if (geteuid() != 0)
		SKIP("a system-wide recording needs root here");
	struct sonde_recorder *r =
		ASSERT_NOT_NULL(sonde_recorder__attach_system_writer(buf_write, &b, &opts));
	c.ns = sonde__rec_mono_now();
	sonde__rec_set_clock(r, held_now, &c);
	uint64_t t0 = c.ns;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	/* the CPUs switch (this test's own waits do) while the clock is held, nothing pushed,
	 * until the recorder holds switches not yet written (the BPF backend hands them over
	 * in batches of 64 per CPU, the perf backend's wait for the clock) */
	double end = test_now() + 30;
	while (!sonde__rec_offcpu_switches_pending(r)) {
		ASSERT(test_now() < end);
		c.ns = sonde__rec_mono_now();
		if (c.ns >= t0 + REC_PUSH_INTERVAL_NS)
			c.ns = t0 + REC_PUSH_INTERVAL_NS - 1;
		ASSERT_INT(sonde_recorder__poll(r, 20, NULL), >=, 0);
	}
	size_t pushed = b.len;
	/* released and pushed in one poll: the switches with them */
	c.ns = sonde__rec_mono_now() + REC_REORDER_SLACK_NS;
	if (c.ns < t0 + REC_PUSH_INTERVAL_NS)
		c.ns = t0 + REC_PUSH_INTERVAL_NS;
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	ASSERT_UINT(b.len, >, pushed);
	ASSERT_UINT(sonde__rec_offcpu_switches_pending(r), ==, 0);
	ASSERT_UINT(written_switches(&b), >, 0);
	sonde__rec_set_clock(r, NULL, NULL);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	sonde__buf_free(&b);
}

/* The clock the cut of a generation switch is read from: at that read, the first one after
 * the next generation's events are open (their ids are known, the switch not yet made),
 * the target renames itself, and the clock says so once it has. */
struct cut_clock {
	struct sonde_recorder *r;
	pid_t pid;
	const char *ack;
	bool renamed;
};

static uint64_t cut_now(void *ctx)
{
	struct cut_clock *c = ctx;
	const struct rec_events *ev = &c->r->ev;
	bool next_open = false;

	for (size_t i = 0; i < ev->n_ids && !c->renamed && !ev->switching; i++)
		next_open |= ev->ids[i].gen > ev->gen;
	if (next_open) {
		c->renamed = true;
		kill(c->pid, SIGUSR1);
		for (double end = test_now() + 60; access(c->ack, F_OK) != 0; usleep(1000))
			if (test_now() > end)
				FAIL("the target did not rename itself in 60 s");
	}
	return sonde__rec_mono_now();
}

/* The cut of a generation switch is read before the older generation is disabled: what a
 * thread does between the two is the older generation's to record (the newer one's records
 * older than the cut are dropped as the overlap). A busy shell, whose shallow stack shrinks
 * its copy, renames itself at the moment the cut is read: its COMM record, the only sign
 * of the new name, is in the recording. With the cut read after the disable, the thread
 * kept its old name (the rename, seen by the newer generation alone, was dropped). */
TEST_TIMEOUT(record_clock_switch_cut_loses_nothing_before_the_disable, 60)
{
	const char *ack = test_path("renamed"), *spool = test_path("cut.spool");
	char sh[1200];
	snprintf(sh, sizeof(sh),
		 "trap 'printf cut-renamed >/proc/$$/comm; : >%s' USR1; while :; do :; done", ack);
	const char *argv[] = {"/bin/sh", "-c", sh, NULL};
	struct sonde_record_opts opts = {
		.sz = sizeof(opts), .frequency = 999, .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	struct sonde_spool_thread th;
	struct sonde_spool_info info;
	bool named = false;

	test_require_perf();
	pid_t pid = test_spawn(argv);
	struct sonde_recorder *r =
		ASSERT_NOT_NULL(sonde_recorder__attach(pid, spool, SONDE_ATTACH_STOP, &opts));
	struct cut_clock c = {r, pid, ack, false};
	sonde__rec_set_clock(r, cut_now, &c);
	for (double end = test_now() + 40; !c.renamed || summary(r).stack_switches == 0;) {
		ASSERT(test_now() < end);
		ASSERT_INT(sonde_recorder__poll(r, 50, NULL), >=, 0);
	}
	/* samples of it under its new name: a thread is written as its samples define it */
	for (double from = test_cpu_s(pid), end = test_now() + 40; test_cpu_s(pid) < from + 0.1;) {
		ASSERT(test_now() < end);
		ASSERT_INT(sonde_recorder__poll(r, 50, NULL), >=, 0);
	}
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	sonde_spool__get_info(s, &info);
	for (uint32_t t = 1; t <= info.threads; t++)
		if (sonde_spool__get_thread(s, t, &th) == 0 && (int)th.tid == pid) {
			printf("thread %u: %s\n", t, th.comm);
			named |= strcmp(th.comm, "cut-renamed") == 0;
		}
	sonde_spool__close(s);
	ASSERT(named);
}
