/* Views the library builds from a recording (include/sonde/view_source.h), on spools the
 * real writer wrote, without perf: a spool and a tail of the same file give the same
 * view; processes are named after their main thread; filters and metrics keep what they
 * say; the metrics' state masks are exact; bad arguments are refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>
#include <sonde/tail.h>
#include <sonde/view.h>
#include <sonde/view_source.h>

#include "spool_fixture.h"
#include "../test.h"
#include "../util.h"

/* The view's folded stacks, NUL-terminated (to be freed). */
static char *folded_of(const struct sonde_view *v, enum sonde_view_roots roots)
{
	struct sonde_view_folded_opts o = {.sz = sizeof(o), .roots = roots};
	int fd = memfd_create("folded", 0);
	char *s = calloc(1, 1 << 16);

	ASSERT(fd >= 0 && s);
	ASSERT_OK(sonde_view__write_folded(v, fd, &o));
	ASSERT_INT(lseek(fd, 0, SEEK_SET), ==, 0);
	ASSERT_INT(read(fd, s, (1 << 16) - 1), >=, 0);
	close(fd);
	return s;
}

/* spool_fixture_small's bytes in a file of the test's, and that file's path. */
static const char *fixture_file(struct buf *b, int n_samples)
{
	const char *path = test_path("view_source.spool");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	spool_fixture_small(b, n_samples, 1);
	ASSERT(fd >= 0);
	ASSERT_INT(write(fd, b->data, b->len), ==, (ssize_t)b->len);
	close(fd);
	return path;
}

/* The label and weight of the row of process pid, grouped by process. */
static const char *process_label(struct sonde_view *v, uint32_t pid, uint64_t *weight)
{
	struct sonde_view_rows_opts o = {.sz = sizeof(o), .group = SONDE_VIEW_BY_PROCESS};
	const struct sonde_view_row *rows;
	size_t n;

	ASSERT_OK(sonde_view__rows(v, &o, &rows, &n, NULL));
	for (size_t i = 0; i < n; i++)
		if (rows[i].pid == pid) {
			*weight = rows[i].self;
			return rows[i].label;
		}
	return NULL;
}

/* A tail polled to the END of path, its samples taken into a live view with no window. */
/* The live view, window window_ns, of the whole of the spool at path, tailed into it. */
static struct sonde_view_live *live_window_of(const char *path, uint64_t window_ns,
					      struct sonde_tail **t,
					      const struct sonde_view_source_opts *o)
{
	struct sonde_tail_batch b = {.sz = sizeof(b)};
	struct sonde_view_live *l;

	*t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	l = ASSERT_NOT_NULL(sonde_view_live__new(*t, window_ns, o));
	/* small batches, so that threads and stacks arrive over several */
	while (!b.ended) {
		int n = sonde_tail__poll(*t, 7, 0, &b);
		ASSERT_INT(n, >=, 0);
		ASSERT(n > 0 || b.ended);
		ASSERT_OK(sonde_view_live__add(l, &b));
	}
	return l;
}

static struct sonde_view_live *live_of(const char *path, struct sonde_tail **t,
				       const struct sonde_view_source_opts *o)
{
	return live_window_of(path, 0, t, o);
}

TEST(view_from_a_spool_and_from_its_tail_are_the_same)
{
	struct buf b = {0};
	const char *path = fixture_file(&b, 120);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	struct sonde_view_source_opts o = {.sz = sizeof(o), .no_inline = 1};
	struct sonde_view_source_stats st = {.sz = sizeof(st)};
	struct sonde_view *v = NULL;
	struct sonde_tail *t;
	uint64_t events;

	ASSERT_OK(sonde_view__from_spool(s, &o, &v, &st));
	ASSERT_INT(sonde_view__total(v, &events), ==, 120);
	ASSERT_INT(events, ==, 120);
	ASSERT_INT(st.events, ==, 120);
	ASSERT_INT(st.frames, >, 0);

	struct sonde_view_live *l = live_of(path, &t, &o);
	ASSERT_INT(sonde_view_live__samples(l), ==, 120);
	struct sonde_view *lv = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(lv, NULL), ==, 120);

	/* the same stacks under the same thread and process roots, line for line */
	char *a = folded_of(v, SONDE_VIEW_ROOTS_THREAD),
	     *c = folded_of(lv, SONDE_VIEW_ROOTS_THREAD);
	ASSERT(strlen(a) > 0);
	ASSERT_STR_EQ(c, a);
	ASSERT_CONTAINS(a, "\nworker-100/101;prog+0x3000;");
	free(a);
	free(c);
	a = folded_of(v, SONDE_VIEW_ROOTS_PROCESS);
	c = folded_of(lv, SONDE_VIEW_ROOTS_PROCESS);
	ASSERT_STR_EQ(c, a);
	/* the worker's stacks are under its process, named after the main thread then; after
	 * the exec, the new program's name */
	ASSERT_CONTAINS(a, "main-100;prog+0x3000;");
	ASSERT_CONTAINS(a, "\nother-100;other+0x4000;");
	ASSERT_NOT_CONTAINS(a, "worker");
	free(a);
	free(c);

	/* by process: main-100 has the first half's 60 samples, the worker's 15 among them
	 * (other-100, after the exec, is a row of its own) */
	uint64_t w1 = 0, w2 = 0;
	const char *l1 = process_label(v, 100, &w1), *l2 = process_label(lv, 100, &w2);
	ASSERT_NOT_NULL(l1);
	ASSERT_NOT_NULL(l2);
	ASSERT_STR_EQ(l1, "main-100");
	ASSERT_STR_EQ(l2, l1);
	ASSERT_INT(w2, ==, w1);
	ASSERT_INT(w1, ==, 60);

	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_view__free(v);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

TEST(view_live_window_drops_what_is_older)
{
	struct buf b = {0};
	const char *path = fixture_file(&b, 60);
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	/* the fixture's samples are about 1 ms apart: a 10.5 ms window holds 10 or 11 */
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 10500000, NULL));

	while (!batch.ended) {
		ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >=, 0);
		ASSERT_OK(sonde_view_live__add(l, &batch));
	}
	ASSERT_INT(sonde_view_live__samples(l), ==, 60);
	uint64_t last = sonde_view_live__last_time(l);
	ASSERT_INT(last, >, 0);
	sonde_view_live__expire(l, last);
	uint64_t kept = sonde_view_live__samples(l);
	ASSERT(kept >= 10 && kept <= 11);
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(v, NULL), ==, kept);
	sonde_view_live__expire(l, last + 20000000);
	ASSERT_INT(sonde_view_live__samples(l), ==, 0);
	v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 0);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

TEST(view_from_spool_keeps_what_its_filter_keeps)
{
	struct buf b = {0};
	spool_fixture_small(&b, 100, 1);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	uint32_t tid = 101, pid = 999;
	struct sonde_view_filter f = {.sz = sizeof(f), .tids = &tid, .n_tids = 1};
	struct sonde_view_source_opts o = {.sz = sizeof(o), .filter = &f};
	struct sonde_view *v = NULL;
	uint64_t events;

	/* the worker has every 4th sample of the first half (i % 4 == 0, i < 50): 13 */
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	ASSERT_INT(sonde_view__total(v, &events), ==, 13);
	sonde_view__free(v);
	f = (struct sonde_view_filter){.sz = sizeof(f), .pids = &pid, .n_pids = 1};
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 0);
	sonde_view__free(v);
	/* the off-CPU metric of a recording with no intervals: nothing, not its samples */
	o = (struct sonde_view_source_opts){.sz = sizeof(o),
					    .metric = SONDE_PROFILE_METRIC_OFF_CPU};
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 0);
	sonde_view__free(v);
	/* a filter asking for on-CPU states under the off-CPU metric keeps nothing either */
	f = (struct sonde_view_filter){.sz = sizeof(f), .states = 1u << SONDE_VIEW_ON_CPU};
	o.filter = &f;
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 0);
	sonde_view__free(v);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A recording of one thread: a sample at 100, intervals in S (5 us) and R (3 us) with
 * stacks, and a short-interval aggregate. */
static struct sonde_spool *offcpu_spool(struct buf *b)
{
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	struct sonde_spool_frame frames[1] = {{0, 0x1234}};
	uint32_t thread;

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &thread));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 100, thread, 0, frames, 1, 0));
	struct sonde_spool_offcpu iv = {.switch_out_ns = 200,
					.switch_in_ns = 5200,
					.thread = thread,
					.cpu = SONDE_SPOOL_CPU_NONE,
					.state = SONDE_OFFCPU_SLEEPING};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 1));
	iv.switch_out_ns = 6000;
	iv.switch_in_ns = 9000;
	iv.state = SONDE_OFFCPU_RUNNABLE;
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 1));
	struct sonde_spool_offcpu_short sh = {thread, 1000, 7, 3500};
	ASSERT_OK(sonde_spool_writer__add_offcpu_short(w, &sh));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	return ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
}

TEST(view_from_spool_weighs_by_the_metric)
{
	struct buf b = {0};
	struct sonde_spool *s = offcpu_spool(&b);
	struct sonde_view_source_opts o = {
		.sz = sizeof(o), .metric = SONDE_PROFILE_METRIC_OFF_CPU, .state_frames = 1};
	struct sonde_view_stats st = {.sz = sizeof(st)};
	struct sonde_view *v = NULL;

	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_INT(st.total, ==, 8000);
	ASSERT_INT(st.state_events[SONDE_VIEW_SLEEPING], ==, 1);
	ASSERT_INT(st.weight[SONDE_VIEW_RUNNABLE], ==, 3000);
	ASSERT_INT(st.state_events[SONDE_VIEW_ON_CPU], ==, 0);
	ASSERT_INT(st.short_count, ==, 7);
	ASSERT_INT(st.short_ns, ==, 3500);
	char *f = folded_of(v, SONDE_VIEW_ROOTS_NONE);
	ASSERT_CONTAINS(f, ";[off-cpu: S] 5000\n");
	ASSERT_CONTAINS(f, ";[off-cpu: R] 3000\n");
	free(f);
	sonde_view__free(v);

	/* wall: the sample weighs its period (no switches recorded), the intervals their time */
	o.metric = SONDE_PROFILE_METRIC_WALL;
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	st = (struct sonde_view_stats){.sz = sizeof(st)};
	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_INT(st.total, ==, 9000);
	ASSERT_INT(st.weight[SONDE_VIEW_ON_CPU], ==, 1000);
	sonde_view__free(v);

	/* cpu: the one sample, no short intervals */
	o.metric = SONDE_PROFILE_METRIC_CPU;
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	st = (struct sonde_view_stats){.sz = sizeof(st)};
	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_INT(st.total, ==, 1);
	ASSERT_INT(st.short_count, ==, 0);
	sonde_view__free(v);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* The rows of view v by function (by self, all), as text: one line each. */
static char *rows_text(struct sonde_view *v)
{
	const struct sonde_view_row *rows;
	size_t n;
	struct buf t = BUF_INIT;
	char line[512];

	ASSERT_OK(sonde_view__rows(v, NULL, &rows, &n, NULL));
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(line, sizeof(line), "%s [%s] %llu %llu\n", rows[i].name,
				 rows[i].module, (unsigned long long)rows[i].self,
				 (unsigned long long)rows[i].total);
		sonde__buf_append(&t, line, (size_t)k);
	}
	buf_put_u8(&t, 0);
	ASSERT_OK(buf_error(&t));
	return (char *)t.data;
}

/* offcpu_spool's recording and more, in a file: a second thread sampled in another
 * function, an interval a loss cut, one in D written after a later sample. */
static const char *offcpu_file(struct buf *b)
{
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	struct sonde_spool_frame a[2] = {{0, 0x1234}, {0, 0x9000}}, c[1] = {{0, 0x5678}};
	uint32_t t1, t2;

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 12, "cd", &t2));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 100, t1, 0, a, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 150, t2, 1, c, 1, 0));
	struct sonde_spool_offcpu iv = {.switch_out_ns = 200,
					.switch_in_ns = 5200,
					.thread = t1,
					.cpu = 0,
					.state = SONDE_OFFCPU_SLEEPING};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, a, 2));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 7000, t2, 1, c, 1, 0));
	iv = (struct sonde_spool_offcpu){.switch_out_ns = 6000,
					 .switch_in_ns = 9000,
					 .thread = t2,
					 .cpu = 1,
					 .state = SONDE_OFFCPU_BLOCKED};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, c, 1));
	iv.switch_out_ns = 9500;
	iv.switch_in_ns = 9900;
	iv.thread = t1;
	ASSERT_OK(sonde_spool_writer__add_unknown(w, &iv, a, 1));
	struct sonde_spool_offcpu_short sh = {t1, 1000, 7, 3500};
	ASSERT_OK(sonde_spool_writer__add_offcpu_short(w, &sh));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *path = test_path("offcpu.spool");
	test_write_file(path, b->data, b->len);
	return path;
}

/* The live view lv has spool view v's figures, rows and folded stacks: the latter
 * returned (thread roots; the caller frees it), and the total in *total. */
static char *live_as_spool(struct sonde_view *v, struct sonde_view *lv,
			   uint64_t *total)
{
	struct sonde_view_stats a = {.sz = sizeof(a)}, c = {.sz = sizeof(c)};

	ASSERT_OK(sonde_view__stats(v, &a));
	ASSERT_OK(sonde_view__stats(lv, &c));
	ASSERT_INT(c.total, ==, a.total);
	ASSERT_INT(c.events, ==, a.events);
	ASSERT_INT(c.short_count, ==, a.short_count);
	ASSERT_INT(c.short_ns, ==, a.short_ns);
	ASSERT_INT(memcmp(c.weight, a.weight, sizeof(a.weight)), ==, 0);
	char *x = rows_text(v), *y = rows_text(lv);
	ASSERT_STR_EQ(y, x);
	free(x);
	free(y);
	x = folded_of(v, SONDE_VIEW_ROOTS_THREAD);
	y = folded_of(lv, SONDE_VIEW_ROOTS_THREAD);
	ASSERT_STR_EQ(y, x);
	free(y);
	*total = a.total;
	return x;
}

/* live_as_spool for the spool at path, opened as s, and a live view of its whole tail
 * under o: the spool's view in *v (the caller frees it) unless v is NULL. */
static char *live_of_whole_as_spool(const char *path, struct sonde_spool *s,
				    const struct sonde_view_source_opts *o, uint64_t *total,
				    struct sonde_view **v)
{
	struct sonde_view *sv = NULL;
	struct sonde_tail *t;

	ASSERT_OK(sonde_view__from_spool(s, o, &sv, NULL));
	struct sonde_view_live *l = live_of(path, &t, o);
	char *x = live_as_spool(sv, ASSERT_NOT_NULL(sonde_view_live__view(l)), total);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	if (v)
		*v = sv;
	else
		sonde_view__free(sv);
	return x;
}

/* The tail hands out intervals as the spool reader does: under every metric, with and
 * without a filter, the live view of the tail has the spool view's rows, folded stacks
 * and figures (the sample weighing its period under wall, the recording having no
 * switches). */
TEST(view_live_of_a_tail_weighs_intervals_as_the_spool_view)
{
	struct buf b = {0};
	const char *path = offcpu_file(&b);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	uint32_t tid = 12;
	struct sonde_view_filter f = {.sz = sizeof(f), .tids = &tid, .n_tids = 1};
	/* a total per metric, unfiltered: 3 samples; 5000 S + 3000 D + 400 cut; both, each
	 * sample weighing 1000 ns */
	static const uint64_t want[] = {3, 8400, 11400};

	for (int filtered = 0; filtered < 2; filtered++)
		for (int m = SONDE_PROFILE_METRIC_CPU; m <= SONDE_PROFILE_METRIC_WALL; m++) {
			struct sonde_view_source_opts o = {.sz = sizeof(o),
							   .metric = (enum sonde_profile_metric)m,
							   .filter = filtered ? &f : NULL,
							   .state_frames = 1};
			struct sonde_view *v;
			uint64_t total;
			char *x = live_of_whole_as_spool(path, s, &o, &total, &v);

			if (!filtered)
				ASSERT_INT(total, ==, want[m]);
			if (m == SONDE_PROFILE_METRIC_OFF_CPU && !filtered) {
				char *rows = rows_text(v);
				ASSERT_CONTAINS(rows, "[off-cpu: S] [[sched]] 5000 5000\n");
				free(rows);
			}
			if (m == SONDE_PROFILE_METRIC_WALL && filtered)
				ASSERT_STR_EQ(x, "cd-10/12;0x5678 2000\n"
						 "cd-10/12;0x5678;[off-cpu: D] 3000\n");
			free(x);
			sonde_view__free(v);
		}
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A recording that keeps the CPUs' switches, written up to `upto` (its first part, or the
 * whole with its END): pid 10's threads 11 (ab), 12 (cd) and 13 (ef, never sampled), each
 * sample weighing 1000 ns by the period. CPU 0: idle, 11 from 100 (samples at 1000, 2000,
 * 3000) to 3100 (asleep to 8000, an interval), 13 from 3100 to 3600, idle, 11 from 8000
 * to the end (a sample at 9000, the last event). CPU 1: 12 from 150 (a sample at 1150)
 * to 2150, idle. */
static const char *switches_file(struct buf *b, bool whole)
{
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	struct sonde_spool_frame a[2] = {{0, 0x1234}, {0, 0x9000}}, c[1] = {{0, 0x5678}};
	struct sonde_spool_switch cpu0[] = {{100, 0, 11, 0},
					    {3100, 11, 13, SONDE_OFFCPU_SLEEPING},
					    {3600, 13, 0, SONDE_OFFCPU_SLEEPING},
					    {8000, 0, 11, SONDE_OFFCPU_RUNNABLE}},
				  cpu1[] = {{150, 0, 12, 0}, {2150, 12, 0, SONDE_OFFCPU_RUNNABLE}};
	uint32_t t1, t2, t3;

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 12, "cd", &t2));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 13, "ef", &t3));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 1));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 1));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 1000, t1, 0, a, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 1150, t2, 1, c, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 2000, t1, 0, a, 2, 0));
	if (whole) {
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 3000, t1, 0, a, 2, 0));
		ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1 + 1, 1));
		ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0 + 1, 3));
		struct sonde_spool_offcpu iv = {.switch_out_ns = 3100,
						.switch_in_ns = 8000,
						.thread = t1,
						.cpu = 0,
						.state = SONDE_OFFCPU_SLEEPING};
		ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, a, 2));
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 9000, t1, 0, a, 2, 0));
		ASSERT_OK(sonde_spool_writer__finish(w));
	} else {
		ASSERT_OK(sonde_spool_writer__flush(w));
	}
	sonde_spool_writer__free(w);
	const char *path = test_path(whole ? "switches.spool" : "switches-part.spool");
	test_write_file(path, b->data, b->len);
	return path;
}

/* Under wall, a recording that keeps the CPUs' switches weighs each sample by its
 * thread's on-CPU time by them, and a thread that ran unsampled shows as such: the live
 * view of the whole recording (no window) gives the spool view's figures, rows and
 * folded stacks, with and without a filter. */
TEST(view_live_wall_weighs_samples_by_the_switches_as_the_spool_view)
{
	struct buf b = {0};
	const char *path = switches_file(&b, true);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	uint32_t tid = 11;
	struct sonde_view_filter f = {.sz = sizeof(f), .tids = &tid, .n_tids = 1};

	for (int filtered = 0; filtered < 2; filtered++) {
		struct sonde_view_source_opts o = {.sz = sizeof(o),
						   .metric = SONDE_PROFILE_METRIC_WALL,
						   .filter = filtered ? &f : NULL,
						   .state_frames = 1};
		struct sonde_view_source_stats st = {.sz = sizeof(st)};
		struct sonde_view *v = NULL;
		struct sonde_tail *t;
		uint64_t total;

		ASSERT_OK(sonde_view__from_spool(s, &o, &v, &st));
		ASSERT_INT(st.wall_by_switches, ==, 1);
		struct sonde_view_live *l = live_of(path, &t, &o);
		struct sonde_view *lv = ASSERT_NOT_NULL(sonde_view_live__view(l));
		ASSERT_OK(sonde_view_live__stats(l, &st));
		ASSERT_INT(st.wall_by_switches, ==, 1);
		char *x = live_as_spool(v, lv, &total);
		/* 11: 3000 + 1000 on the CPU over its 4 samples, 4900 asleep; 12: 2000 over
		 * its one sample; 13: 500 unsampled */
		ASSERT_INT(total, ==, filtered ? 8900 : 11400);
		if (!filtered)
			ASSERT_CONTAINS(x, "ef-10/13;[on-cpu: not sampled] 500\n");
		free(x);
		sonde_view_live__free(l);
		sonde_tail__free(t);
		sonde_view__free(v);
	}
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* Thread 11 (ab) of pid 10 on CPU 0 from 100 to 3100 (asleep to 8000, an interval) and
 * from 8000 to the end (9000), samples at 1000, 2000 and 9000; on CPU 1 from 150 to an
 * inferred switch at 4000 (its switch-out from CPU 1 went untraced: the stay overlaps
 * its stay on CPU 0 and reads on past its wait's start), then 12 (cd) to 5000, a sample
 * at 4500. */
static const char *inferred_file(struct buf *b)
{
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	struct sonde_spool_frame a[1] = {{0, 0x1234}};
	struct sonde_spool_switch cpu0[] = {{100, 0, 11, 0},
					    {3100, 11, 0, SONDE_OFFCPU_SLEEPING},
					    {8000, 0, 11, SONDE_OFFCPU_RUNNABLE}},
				  cpu1[] = {{150, 0, 11, 0},
					    {4000, 11, 12, SONDE_OFFCPU_RUNNABLE | SONDE_SWITCH_INFERRED},
					    {5000, 12, 0, SONDE_OFFCPU_RUNNABLE}};
	struct sonde_spool_offcpu iv = {.switch_out_ns = 3100,
					.switch_in_ns = 8000,
					.cpu = 0,
					.state = SONDE_OFFCPU_SLEEPING};
	uint32_t t1, t2;

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 12, "cd", &t2));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 1));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 1));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 1000, t1, 0, a, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 2000, t1, 0, a, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0 + 1, 1));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1 + 1, 2));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 4500, t2, 1, a, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0 + 2, 1));
	iv.thread = t1;
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, a, 1));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 9000, t1, 0, a, 1, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *path = test_path("inferred.spool");
	test_write_file(path, b->data, b->len);
	return path;
}

/* The live view counts a task's stays as the spool's view does where a switch-out went
 * untraced: the stay an inferred switch ended reads only to the task's next wait, and
 * stays that overlap count once. */
TEST(view_live_wall_counts_a_task_s_overlapping_stays_once)
{
	struct buf b = {0};
	const char *path = inferred_file(&b);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	struct sonde_view_source_opts o = {
		.sz = sizeof(o), .metric = SONDE_PROFILE_METRIC_WALL, .state_frames = 1};
	uint64_t total;

	free(live_of_whole_as_spool(path, s, &o, &total, NULL));
	/* 11: 3000 + 1000 on the CPU over its 3 samples (its stay on CPU 1 adds nothing),
	 * 4900 asleep; 12: 1000 over its sample */
	ASSERT_INT(total, ==, 4000 + 4900 + 1000);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A window weighs a thread's samples in it by its stays clipped to it; a sample after its
 * CPU's latest switch read so far (its stay still open) weighs its period until the
 * switch that ends the stay comes. */
TEST(view_live_wall_by_switches_clips_stays_to_the_window)
{
	struct buf b = {0}, part = {0};
	struct sonde_view_source_opts o = {
		.sz = sizeof(o), .metric = SONDE_PROFILE_METRIC_WALL, .state_frames = 1};
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	const char *path = switches_file(&part, false);
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 0, &o));

	/* the first part: 11 came in at 100 and 12 at 150, neither left yet: their three
	 * samples weigh their periods */
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT(!batch.ended && batch.switches);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	ASSERT_INT(sonde_view__total(ASSERT_NOT_NULL(sonde_view_live__view(l)), NULL), ==, 3000);
	sonde_view_live__free(l);
	sonde_tail__free(t);

	path = switches_file(&b, true);
	l = live_window_of(path, 2000, &t, &o);
	/* from 7000: 11's stay from 8000 to the end (9000) over its sample at 9000, and the
	 * interval that ended at 8000, whole; 13's stay and 12's ended before */
	sonde_view_live__expire(l, 9000);
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 1000 + 4900);
	/* from 2500: 11's stay clipped to 2500-3100 and 8000-9000 over its samples at
	 * 3000 and 9000, 13's 500 unsampled, 12 none (its sample at 1150 is out, its stay
	 * ended at 2150) */
	sonde_view_live__free(l);
	sonde_tail__free(t);
	l = live_window_of(path, 6500, &t, &o);
	sonde_view_live__expire(l, 9000);
	v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	char *x = folded_of(v, SONDE_VIEW_ROOTS_THREAD);
	ASSERT_STR_EQ(x, "ab-10/11;0x9000;0x1234 1600\n"
			 "ab-10/11;0x9000;0x1234;[off-cpu: S] 4900\n"
			 "ef-10/13;[on-cpu: not sampled] 500\n");
	free(x);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde__buf_free(&b);
	sonde__buf_free(&part);
}

/* An interval enters the window when it is written, at its end, and stays a window after
 * its end, however long before its switch-out was. */
TEST(view_live_window_keeps_an_interval_until_a_window_after_its_end)
{
	struct buf b = {0};
	const char *path = offcpu_file(&b);
	struct sonde_view_source_opts o = {.sz = sizeof(o), .metric = SONDE_PROFILE_METRIC_OFF_CPU};
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 1000, &o));

	while (!batch.ended) {
		ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >=, 0);
		ASSERT_OK(sonde_view_live__add(l, &batch));
	}
	/* the cut interval ends last, at 9900 */
	ASSERT_INT(sonde_view_live__last_time(l), ==, 9900);
	ASSERT_INT(sonde_view_live__samples(l), ==, 3);
	/* at 9500 the window reaches back to 8500: the D interval (6000 to 9000) and the cut
	 * one are in it, the S interval (200 to 5200) is not */
	sonde_view_live__expire(l, 9500);
	ASSERT_INT(sonde_view_live__samples(l), ==, 2);
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 3400);
	sonde_view_live__expire(l, 10500);
	ASSERT_INT(sonde_view_live__samples(l), ==, 1);
	sonde_view_live__expire(l, 11000);
	ASSERT_INT(sonde_view_live__samples(l), ==, 0);
	v = ASSERT_NOT_NULL(sonde_view_live__view(l));
	ASSERT_INT(sonde_view__total(v, NULL), ==, 0);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde__buf_free(&b);
}

/* Process 43 names its JIT code in its perf map, then execs and maps other code at the
 * same addresses. The sample taken before keeps the name it had (the live view used to
 * name the whole window again, the earlier sample under the new program's name); the
 * sample after gets the new name, not the old one's id. */
TEST(view_live_names_after_an_invalidation_are_the_new_ones)
{
	struct buf b = {0};
	const char *path = test_path("jit.spool");
	char map[512];
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_module_def jit = {.pid = 43,
					     .flags = SONDE_MODULE_EXEC | SONDE_MODULE_JIT,
					     .start = 0x9000,
					     .end = 0xa000,
					     .path = "//anon"};
	uint32_t m, th;

	snprintf(map, sizeof(map), "%s/perf-43.map", test_tmpdir());
	test_write_file(map, "9100 10 old_fn\n", 15);
	ASSERT_OK(sonde_spool_writer__add_thread(w, 10, 43, 43, "jit", &th));
	ASSERT_OK(sonde_spool_writer__add_module(w, 10, &jit, &m));
	struct sonde_spool_frame st[1] = {{m, 0x100}};
	ASSERT_OK(sonde_spool_writer__add_sample(w, 20, th, st, 1, 0));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b.data, b.len);

	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .perf_map_dir = test_tmpdir()};
	struct sonde_tail_opts to = {.sz = sizeof(to), .symbolizer = &so};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, &to));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 0, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	char *x = rows_text(ASSERT_NOT_NULL(sonde_view_live__view(l)));
	ASSERT_STR_EQ(x, "old_fn [perf-43.map] 1 1\n");
	free(x);

	/* the exec: its modules retire, the new program's JIT writes its map anew */
	ASSERT_OK(sonde_spool_writer__retire_process(w, 30, 43));
	test_write_file(map, "9100 10 new_fn\n", 15);
	ASSERT_OK(sonde_spool_writer__add_thread(w, 30, 43, 43, "jit2", &th));
	ASSERT_OK(sonde_spool_writer__add_module(w, 30, &jit, &m));
	st[0].module = m;
	ASSERT_OK(sonde_spool_writer__add_sample(w, 40, th, st, 1, 0));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b.data, b.len);
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_INT(batch.n_invalidated, ==, 1);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	x = rows_text(ASSERT_NOT_NULL(sonde_view_live__view(l)));
	ASSERT_STR_EQ(x, "new_fn [perf-43.map] 1 1\nold_fn [perf-43.map] 1 1\n");
	free(x);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);
}

/* no_symbolize: no symbolizer is made, every frame is named by its module and offset (a
 * raw address by itself) and counted unresolved, by a spool and a tail alike. */
TEST(view_without_symbolizer_names_frames_by_module_and_offset)
{
	struct buf b = {0};
	const char *path = fixture_file(&b, 60);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	struct sonde_view_source_opts o = {.sz = sizeof(o), .no_symbolize = 1};
	struct sonde_view_source_stats st = {.sz = sizeof(st)};
	struct sonde_view *v = NULL;
	struct sonde_tail *t;

	ASSERT_OK(sonde_view__from_spool(s, &o, &v, &st));
	ASSERT_INT(st.frames, >, 0);
	ASSERT_INT(st.unresolved_frames, ==, st.frames);
	char *a = folded_of(v, SONDE_VIEW_ROOTS_NONE);
	ASSERT_CONTAINS(a, "prog+0x3000;prog+0x2008;libc.so.6+0x1001 ");
	ASSERT_CONTAINS(a, "other+0x4000;0xffffffff8100001e ");
	struct sonde_view_live *l = live_of(path, &t, &o);
	char *c = folded_of(ASSERT_NOT_NULL(sonde_view_live__view(l)), SONDE_VIEW_ROOTS_NONE);
	ASSERT_STR_EQ(c, a);
	free(a);
	free(c);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_view__free(v);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

TEST(view_metric_states_are_exact)
{
	uint32_t off = sonde_view_metric_states(SONDE_PROFILE_METRIC_OFF_CPU);

	ASSERT_INT(sonde_view_metric_states(SONDE_PROFILE_METRIC_CPU), ==, 1u << SONDE_VIEW_ON_CPU);
	for (uint32_t st = 0; st < SONDE_VIEW_STATES; st++) {
		int want = st != SONDE_VIEW_ON_CPU && st != SONDE_VIEW_UNSAMPLED;
		ASSERT_INT(!!(off & (1u << st)), ==, want);
		ASSERT(sonde_view_metric_states(SONDE_PROFILE_METRIC_WALL) & (1u << st));
	}
	ASSERT_INT(off >> SONDE_VIEW_STATES, ==, 0);
	ASSERT_INT(sonde_view_metric_states((enum sonde_profile_metric)7), ==, 0);
}

TEST(view_source_refuses_bad_arguments)
{
	struct buf b = {0};
	spool_fixture_small(&b, 10, 1);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	struct sonde_view *v = (struct sonde_view *)&b;
	struct sonde_view_source_opts o = {.sz = sizeof(o), .metric = (enum sonde_profile_metric)9};
	struct sonde_view_source_stats st = {.sz = 1};
	struct sonde_view_filter f = {.sz = 1};

	ASSERT_ERR(sonde_view__from_spool(NULL, NULL, &v, NULL), -EINVAL);
	ASSERT(v == NULL);
	ASSERT_ERR(sonde_view__from_spool(s, NULL, NULL, NULL), -EINVAL);
	ASSERT_ERR(sonde_view__from_spool(s, &o, &v, NULL), -EINVAL);
	ASSERT_ERR(sonde_view__from_spool(s, NULL, &v, &st), -EINVAL);
	o = (struct sonde_view_source_opts){.sz = sizeof(o), .filter = &f};
	ASSERT_ERR(sonde_view__from_spool(s, &o, &v, NULL), -EINVAL);
	ASSERT(v == NULL);
	errno = 0;
	ASSERT(sonde_view_live__new(NULL, 0, NULL) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	sonde_view_live__free(NULL);
	ASSERT_ERR(sonde_view_live__add(NULL, NULL), -EINVAL);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* The example of the API (examples/view_top.c) on a written spool: the heaviest functions,
 * the worker's filter, and a one-line error for a file that is no spool. */
TEST(view_top_example_prints_the_heaviest_functions)
{
	struct buf b = {0};
	const char *path = fixture_file(&b, 100);
	struct test_output o;

	test_runf(&o, 30, "%s -n 60 %s", test_example("view_top"), path);
	ASSERT_INT(o.status, ==, 0);
	/* 100 samples, 52 functions: the libc leaves heaviest by self; prog+0x3000 is on every
	 * stack of the first half but the empty ones (50 - 7), innermost on none */
	ASSERT_CONTAINS(o.out, "100 events weighing 100; 52 of 52 functions:\n");
	ASSERT_CONTAINS(o.out, "functions:\n        self        total  function [module]\n"
			       "           9            9  libc.so.6+0x1001 [libc.so.6]\n");
	ASSERT_CONTAINS(o.out, "           0           43  prog+0x3000 [prog]\n");
	test_output_free(&o);
	test_runf(&o, 30, "%s -p 999 %s", test_example("view_top"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "0 events weighing 0; 0 of 0 functions:\n");
	test_output_free(&o);
	test_runf(&o, 30, "%s %s", test_example("view_top"), test_src_path("Makefile"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "view_top: ");
	ASSERT_INT(strchr(o.err, '\n') - o.err + 1, ==, (long)strlen(o.err));
	test_output_free(&o);
	sonde__buf_free(&b);
}

/* sonde top on a written spool: the window is the library's live view, and top's filters
 * are the view's: --filter-comm keeps the worker's 13 samples, named under its process;
 * --filter-cpu keeps none of a recording that kept no CPU (the tail hands out each
 * sample's CPU as the spool reader does: it used to say 0). */
TEST(top_filters_a_written_spool_by_comm_and_cpu)
{
	struct buf b = {0};
	const char *path = fixture_file(&b, 100);
	struct test_output o;

	test_runf(&o, 30, "%s top -n 50 -w 3600 --filter-comm worker %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "| 13 samples | final\nfilter: comm worker\n");
	ASSERT_CONTAINS(o.out, "prog+0x3000");
	ASSERT_NOT_CONTAINS(o.out, "other+0x4000");
	test_output_free(&o);
	test_runf(&o, 30, "%s top -n 50 -w 3600 -s process %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "| 100 samples | final\n");
	/* the worker's samples are main-100's: no row is labelled after the worker */
	ASSERT_CONTAINS(o.out, " main-100 ");
	ASSERT_CONTAINS(o.out, " other-100 ");
	ASSERT_NOT_CONTAINS(o.out, "worker");
	test_output_free(&o);
	test_runf(&o, 30, "%s top -n 50 -w 3600 --filter-cpu 0 %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "| 0 samples | final\nfilter: cpu 0\n");
	test_output_free(&o);
	test_runf(&o, 30, "%s top --filter-cpu x %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
	sonde__buf_free(&b);
}

/* Two processes, 50 and 60, run JIT code at the same raw addresses (no module covers
 * them), each named by its own perf map: one frame id, and one stack node, for both. */
static struct sonde_spool_writer *two_jits(struct buf *b, const char *path, uint32_t th[2])
{
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	struct sonde_spool_frame st[2] = {{0, 0x9100}, {0, 0x9200}};
	char map[512];

	snprintf(map, sizeof(map), "%s/perf-50.map", test_tmpdir());
	test_write_file(map, "9100 10 fifty_fn\n9200 10 fifty_main\n", 36);
	snprintf(map, sizeof(map), "%s/perf-60.map", test_tmpdir());
	test_write_file(map, "9100 10 sixty_fn\n9200 10 sixty_main\n", 36);
	ASSERT_OK(sonde_spool_writer__add_thread(w, 10, 50, 50, "fifty", &th[0]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 10, 60, 60, "sixty", &th[1]));
	/* 60 first: the spool view resolves the shared node for it, then for 50 */
	ASSERT_OK(sonde_spool_writer__add_sample(w, 20, th[1], st, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 21, th[0], st, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 22, th[0], st, 1, 0));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b->data, b->len);
	return w;
}

/* The JIT names of a frame of no module are each process's own, in a spool's view and a
 * tail's: they used to be one frame's, the first process's names shown for both. */
TEST(view_frames_of_no_module_are_named_by_each_process)
{
	struct buf b = {0};
	const char *path = test_path("two_jits.spool");
	uint32_t th[2];
	struct sonde_spool_writer *w = two_jits(&b, path, th);
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .perf_map_dir = test_tmpdir()};
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(&so));
	struct sonde_view_source_opts o = {.sz = sizeof(o), .symbolizer = sym};
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(path, NULL));
	struct sonde_view *v = NULL;
	const char *want = "fifty_fn [perf-50.map] 2 2\n"
			   "sixty_fn [perf-60.map] 1 1\n"
			   "fifty_main [perf-50.map] 0 1\n"
			   "sixty_main [perf-60.map] 0 1\n";

	ASSERT_OK(sonde_view__from_spool(s, &o, &v, NULL));
	char *x = rows_text(v);
	ASSERT_STR_EQ(x, want);
	free(x);
	sonde_view__free(v);
	/* 50's samples come after 60's: kept alone, only they are named (for 50) */
	uint32_t pid = 50;
	struct sonde_view_filter f = {.sz = sizeof(f), .pids = &pid, .n_pids = 1};
	struct sonde_view_source_stats vst = {.sz = sizeof(vst)};
	o.filter = &f;
	ASSERT_OK(sonde_view__from_spool(s, &o, &v, &vst));
	x = rows_text(v);
	ASSERT_STR_EQ(x, "fifty_fn [perf-50.map] 2 2\nfifty_main [perf-50.map] 0 1\n");
	ASSERT_INT(vst.frames, ==, 2);
	free(x);
	o.filter = NULL;

	struct sonde_tail_opts to = {.sz = sizeof(to), .symbolizer = &so};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, &to));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 0, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	x = rows_text(ASSERT_NOT_NULL(sonde_view_live__view(l)));
	ASSERT_STR_EQ(x, want);
	free(x);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_view__free(v);
	sonde_spool__close(s);
	sonde_symbolizer__free(sym);
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);
}

/* Process 50 execs and its perf map names its code anew; process 60's map changes too,
 * but nothing told the view: 50's frames are named again, 60's keep the names they had
 * and are not symbolized again (an invalidation used to forget every process's). */
TEST(view_live_invalidation_renames_only_its_process)
{
	struct buf b = {0};
	const char *path = test_path("two_jits.spool");
	uint32_t th[2];
	struct sonde_spool_writer *w = two_jits(&b, path, th);
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .perf_map_dir = test_tmpdir()};
	struct sonde_tail_opts to = {.sz = sizeof(to), .symbolizer = &so};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, &to));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 0, NULL));
	struct sonde_view_source_stats st = {.sz = sizeof(st)};
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	struct sonde_spool_frame fr[2] = {{0, 0x9100}, {0, 0x9200}};
	char map[512];

	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	ASSERT_OK(sonde_view_live__stats(l, &st));
	ASSERT_INT(st.frames, ==, 4); /* two frames, named by each process */

	ASSERT_OK(sonde_spool_writer__retire_process(w, 30, 50));
	snprintf(map, sizeof(map), "%s/perf-50.map", test_tmpdir());
	test_write_file(map, "9100 10 fifty_new\n9200 10 fifty_main\n", 37);
	snprintf(map, sizeof(map), "%s/perf-60.map", test_tmpdir());
	test_write_file(map, "9100 10 sixty_new\n9200 10 sixty_main\n", 37);
	ASSERT_OK(sonde_spool_writer__add_sample(w, 40, th[0], fr, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 41, th[1], fr, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 42, th[1], fr, 1, 0));
	ASSERT_OK(sonde_spool_writer__flush(w));
	test_write_file(path, b.data, b.len);
	ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
	ASSERT_INT(batch.n_invalidated, ==, 1);
	ASSERT_OK(sonde_view_live__add(l, &batch));
	ASSERT_OK(sonde_view_live__stats(l, &st));
	ASSERT_INT(st.frames, ==, 6); /* 50's two again, 60's none */
	char *x = rows_text(ASSERT_NOT_NULL(sonde_view_live__view(l)));
	ASSERT_STR_EQ(x, "sixty_fn [perf-60.map] 3 3\n"
			 "fifty_fn [perf-50.map] 2 2\n"
			 "fifty_new [perf-50.map] 1 1\n"
			 "fifty_main [perf-50.map] 0 2\n"
			 "sixty_main [perf-60.map] 0 2\n");
	free(x);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);
}

/* A spool writer's output appended to a file (ctx: its descriptor, O_APPEND). */
static int append_fd(void *ctx, const void *p, size_t n)
{
	return write(*(int *)ctx, p, n) == (ssize_t)n ? 0 : -EIO;
}

/* A long `sonde top` of a program whose JIT names its code anew again and again (an exec
 * each time, its perf map grown): 1000 names go through a window that holds two
 * samples, and the view's function table stays bounded (it used to keep every name it
 * had met), while the window's samples keep the names they were taken in with. */
TEST(view_live_table_stays_bounded_as_names_change)
{
	const char *path = test_path("renames.spool");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
	struct sonde_spool_header h = {1, 0, 1000};
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(sonde_spool_writer__new(append_fd, &fd, &h));
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .perf_map_dir = test_tmpdir()};
	struct sonde_tail_opts to = {.sz = sizeof(to), .symbolizer = &so};
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open(path, &to));
	struct sonde_view_live *l = ASSERT_NOT_NULL(sonde_view_live__new(t, 1500, NULL));
	struct sonde_tail_batch batch = {.sz = sizeof(batch)};
	struct sonde_spool_frame fr[1] = {{0, 0x9100}};
	struct sonde_view_stats st = {.sz = sizeof(st)};
	struct sonde_view *v = NULL;
	uint64_t most = 0;
	char map[512], line[64];
	uint32_t th;

	ASSERT(fd >= 0);
	snprintf(map, sizeof(map), "%s/perf-50.map", test_tmpdir());
	/* appended to, as a JIT does: its latest line for an address names it */
	int mfd = open(map, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
	ASSERT(mfd >= 0);
	ASSERT_OK(sonde_spool_writer__add_thread(w, 10, 50, 50, "jit", &th));
	for (int i = 0; i < 1000; i++) {
		uint64_t now = 1000 * (uint64_t)(i + 1);
		int k = snprintf(line, sizeof(line), "9100 10 fn_%d\n", i);
		ASSERT_INT(write(mfd, line, (size_t)k), ==, k);
		if (i)
			ASSERT_OK(sonde_spool_writer__retire_process(w, now - 1, 50));
		ASSERT_OK(sonde_spool_writer__add_sample(w, now, th, fr, 1, 0));
		ASSERT_OK(sonde_spool_writer__flush(w));
		ASSERT_INT(sonde_tail__poll(t, 0, 0, &batch), >, 0);
		ASSERT_OK(sonde_view_live__add(l, &batch));
		sonde_view_live__expire(l, now);
		v = ASSERT_NOT_NULL(sonde_view_live__view(l));
		ASSERT_OK(sonde_view__stats(v, &st));
		ASSERT_INT(st.events, ==, i ? 2 : 1);
		if (st.functions > most)
			most = st.functions;
	}
	/* a sweep once the table is twice what the last one kept (a few names) and 256 more */
	ASSERT_INT(most, <=, 300);
	ASSERT_INT(st.functions, <, most);
	char *x = rows_text(v);
	ASSERT_STR_EQ(x, "fn_998 [perf-50.map] 1 1\nfn_999 [perf-50.map] 1 1\n");
	free(x);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	sonde_spool_writer__free(w);
	close(fd);
	close(mfd);
}
