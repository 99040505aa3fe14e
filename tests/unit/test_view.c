/* The readers' model (include/sonde/view.h) on synthetic events, without perf: the
 * filters, self and total (recursion counted once), every grouping, the sort keys and the
 * cut, the diff of two views, and the one folded writer (escaping, sums then rounding,
 * roots). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/profile.h>
#include <sonde/spool.h>
#include <sonde/view.h>

#include "../test.h"

/* A function id, asserted. */
static uint32_t fn(struct sonde_view *v, const char *name, const char *module)
{
	int64_t id = sonde_view__func(v, name, module);

	ASSERT_INT(id, >, 0);
	return (uint32_t)id;
}

static struct sonde_view_event ev(uint32_t pid, uint32_t tid, const char *comm, uint32_t cpu,
				  uint64_t time_ns, uint64_t weight)
{
	return (struct sonde_view_event){.sz = sizeof(struct sonde_view_event),
					 .pid = pid,
					 .tid = tid,
					 .comm = comm,
					 .cpu = cpu,
					 .time_ns = time_ns,
					 .weight = weight};
}

/* What the writer wrote, NUL-terminated (to be freed). */
static char *folded(const struct sonde_view *v, enum sonde_view_roots roots, uint64_t unit)
{
	struct sonde_view_folded_opts o = {.sz = sizeof(o), .roots = roots, .unit = unit};
	int fd = memfd_create("folded", 0);
	char *s = calloc(1, 65536);

	ASSERT(fd >= 0 && s);
	ASSERT_OK(sonde_view__write_folded(v, fd, &o));
	ASSERT_INT(lseek(fd, 0, SEEK_SET), ==, 0);
	ASSERT_INT(read(fd, s, 65535), >=, 0);
	close(fd);
	return s;
}

static const struct sonde_view_row *rows_of(struct sonde_view *v, enum sonde_view_group g,
					    enum sonde_view_sort sort, size_t max, size_t *n,
					    size_t *n_all)
{
	struct sonde_view_rows_opts o = {.sz = sizeof(o), .group = g, .sort = sort, .max = max};
	const struct sonde_view_row *rows = NULL;

	ASSERT_OK(sonde_view__rows(v, &o, &rows, n, n_all));
	return rows;
}

TEST(view_self_and_total_count_recursion_once_and_cut_to_top_n)
{
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t main_ = fn(v, "main", "prog"), work = fn(v, "work", "prog");
	uint32_t hot = fn(v, "hot", "libc.so.6");
	struct sonde_view_event e = ev(10, 10, "prog", 0, 1, 3);
	/* main -> work -> work -> hot, three samples: work is on the stack twice */
	uint32_t rec[] = {hot, work, work, main_};
	uint32_t shallow[] = {work, main_};
	size_t n, n_all;

	ASSERT_INT(fn(v, "hot", "libc.so.6"), ==, hot); /* interned once */
	ASSERT_INT(fn(v, "hot", "other.so"), !=, hot);	/* the module is part of it */
	ASSERT_INT(sonde_view__add(v, &e, rec, 4), ==, 1);
	e.weight = 2;
	ASSERT_INT(sonde_view__add(v, &e, shallow, 2), ==, 1);
	ASSERT_INT(sonde_view__add(v, &e, shallow, 2), ==, 1);
	uint64_t events;
	ASSERT_UINT(sonde_view__total(v, &events), ==, 7);
	ASSERT_UINT(events, ==, 3);

	const struct sonde_view_row *r =
		rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_SELF, 0, &n, &n_all);
	ASSERT_UINT(n, ==, 3);
	ASSERT_UINT(n_all, ==, 3);
	ASSERT_STR_EQ(r[0].name, "work");
	ASSERT_UINT(r[0].self, ==, 4);
	ASSERT_UINT(r[0].total, ==, 7); /* not 10: the recursive stack counts once */
	ASSERT_STR_EQ(r[1].name, "hot");
	ASSERT_STR_EQ(r[1].module, "libc.so.6");
	ASSERT_UINT(r[1].self, ==, 3);
	ASSERT_UINT(r[1].total, ==, 3);
	ASSERT_STR_EQ(r[2].name, "main");
	ASSERT_UINT(r[2].self, ==, 0);
	ASSERT_UINT(r[2].total, ==, 7);
	ASSERT_STR_EQ(r[2].label, "");

	r = rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_TOTAL, 2, &n, &n_all);
	ASSERT_UINT(n, ==, 2);
	ASSERT_UINT(n_all, ==, 3); /* what a reader says it cut */
	ASSERT_STR_EQ(r[0].name, "work"); /* total 7, self 4 */
	ASSERT_STR_EQ(r[1].name, "main"); /* total 7, self 0 */

	r = rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_NAME, 0, &n, NULL);
	ASSERT_STR_EQ(r[0].name, "hot");
	ASSERT_STR_EQ(r[2].name, "work");

	/* cleared: no rows, the ids stay */
	sonde_view__clear(v);
	ASSERT_UINT(sonde_view__total(v, NULL), ==, 0);
	rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 0);
	ASSERT_INT(fn(v, "work", "prog"), ==, work);
	ASSERT_INT(sonde_view__add(v, &e, shallow, 2), ==, 1);
	r = rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 2);
	ASSERT_UINT(r[0].self, ==, 2);
	sonde_view__free(v);
}

TEST(view_filters_keep_what_passes_every_filter)
{
	static const uint32_t pids[] = {10, 30};
	static const uint32_t tids[] = {11, 30, 31};
	static const char *const comms[] = {"b", "c"};
	static const int cpus[] = {1, 2};
	struct sonde_view_filter f = {
		.sz = sizeof(f),
		.pids = pids,
		.n_pids = 2,
		.tids = tids,
		.n_tids = 3,
		.comms = comms,
		.n_comms = 2,
		.cpus = cpus,
		.n_cpus = 2,
		.time_range = 1,
		.time_from_ns = 100,
		.time_to_ns = 200,
		.states = 1u << SONDE_VIEW_ON_CPU | 1u << SONDE_VIEW_BLOCKED,
	};
	struct sonde_view_opts o = {.sz = sizeof(o), .filter = &f};
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(&o));
	uint32_t a = fn(v, "a", "m");
	struct sonde_view_event e = ev(10, 11, "b", 1, 100, 1);

	/* the view copied the filter: the caller's lists may go */
	f.n_pids = 0;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1); /* passes all, at the start bound */
	e.time_ns = 200;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1); /* the end bound is inclusive */
	e.time_ns = 201;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.time_ns = 99;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.time_ns = 150;
	e.pid = 20;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.pid = 10;
	e.tid = 12;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.tid = 11;
	e.comm = "bb";
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.comm = "c";
	e.cpu = 0;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.cpu = SONDE_VIEW_CPU_NONE;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.cpu = 2;
	e.state = SONDE_VIEW_SLEEPING;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	e.state = SONDE_VIEW_BLOCKED;
	e.weight = 1000;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1);
	ASSERT_UINT(sonde_view__total(v, NULL), ==, 1002);
	sonde_view__free(v);

	/* the same test alone, for readers that count their own way */
	f.n_pids = 2;
	e = ev(30, 30, "c", 2, 150, 1);
	ASSERT_INT(sonde_view_filter__match(&f, &e), ==, 1);
	e.tid = 32;
	ASSERT_INT(sonde_view_filter__match(&f, &e), ==, 0);
	ASSERT_INT(sonde_view_filter__match(NULL, &e), ==, 1);
	e.state = SONDE_VIEW_STATES;
	ASSERT_ERR(sonde_view_filter__match(&f, &e), -EINVAL);

	/* no end: time_to_ns 0 */
	f = (struct sonde_view_filter){.sz = sizeof(f), .time_range = 1, .time_from_ns = 5};
	v = ASSERT_NOT_NULL(sonde_view__new(&o));
	a = fn(v, "a", "m");
	e = ev(1, 1, NULL, 0, UINT64_MAX, 1);
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1);
	e.time_ns = 4;
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 0);
	sonde_view__free(v);
}

TEST(view_groups_by_process_thread_and_cpu)
{
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t a = fn(v, "a", "m"), b = fn(v, "b", "m");
	struct sonde_view_event e = ev(10, 10, "server", 0, 1, 5);
	uint32_t ab[] = {a, b};
	size_t n, n_all;

	ASSERT_INT(sonde_view__add(v, &e, ab, 2), ==, 1);
	e = ev(10, 12, "worker", 1, 1, 3); /* another thread of process 10 */
	e.process = "server";
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1);
	e = ev(20, 20, "cron", SONDE_VIEW_CPU_NONE, 1, 4);
	ASSERT_INT(sonde_view__add(v, &e, &b, 1), ==, 1);

	const struct sonde_view_row *r =
		rows_of(v, SONDE_VIEW_BY_PROCESS, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 2);
	ASSERT_STR_EQ(r[0].name, "server-10"); /* the process's name, not the worker's */
	ASSERT_UINT(r[0].self, ==, 8);
	ASSERT_UINT(r[0].pid, ==, 10);
	ASSERT_STR_EQ(r[1].name, "cron-20");
	ASSERT_UINT(r[1].total, ==, 4);

	r = rows_of(v, SONDE_VIEW_BY_THREAD, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 3);
	ASSERT_STR_EQ(r[0].name, "server-10/10");
	ASSERT_STR_EQ(r[1].name, "cron-20/20");
	ASSERT_STR_EQ(r[2].name, "worker-10/12");
	ASSERT_UINT(r[2].tid, ==, 12);

	r = rows_of(v, SONDE_VIEW_BY_CPU, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 3);
	ASSERT_STR_EQ(r[0].name, "0");
	ASSERT_STR_EQ(r[1].name, "[unknown]");
	ASSERT_UINT(r[1].cpu, ==, SONDE_VIEW_CPU_NONE);
	ASSERT_STR_EQ(r[2].name, "1");

	/* a function's row per process: the process column */
	r = rows_of(v, SONDE_VIEW_BY_FUNCTION_PROCESS, SONDE_VIEW_SORT_SELF, 0, &n, &n_all);
	ASSERT_UINT(n, ==, 3);
	ASSERT_STR_EQ(r[0].name, "a");
	ASSERT_STR_EQ(r[0].label, "server-10");
	ASSERT_UINT(r[0].self, ==, 8);
	ASSERT_UINT(r[0].total, ==, 8);
	ASSERT_STR_EQ(r[1].name, "b");
	ASSERT_STR_EQ(r[1].label, "cron-20");
	ASSERT_UINT(r[1].self, ==, 4);
	ASSERT_STR_EQ(r[2].name, "b");
	ASSERT_STR_EQ(r[2].label, "server-10");
	ASSERT_UINT(r[2].self, ==, 0);
	ASSERT_UINT(r[2].total, ==, 5);

	/* sorted by process: labels in order, then self */
	r = rows_of(v, SONDE_VIEW_BY_FUNCTION_PROCESS, SONDE_VIEW_SORT_PROCESS, 0, &n, NULL);
	ASSERT_STR_EQ(r[0].label, "cron-20");
	ASSERT_STR_EQ(r[1].label, "server-10");
	ASSERT_STR_EQ(r[1].name, "a");
	ASSERT_STR_EQ(r[2].name, "b");

	r = rows_of(v, SONDE_VIEW_BY_FUNCTION_THREAD, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 4);
	ASSERT_STR_EQ(r[0].label, "server-10/10");
	ASSERT_UINT(r[0].self, ==, 5);
	sonde_view__free(v);

	/* many CPUs: their names, made while the rows are, stay readable in every row */
	v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	a = fn(v, "a", "m");
	for (uint32_t cpu = 0; cpu < 500; cpu++) {
		e = ev(1, 1, "p", cpu, 1, 1000 - cpu);
		ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1);
	}
	r = rows_of(v, SONDE_VIEW_BY_CPU, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_UINT(n, ==, 500);
	for (uint32_t i = 0; i < 500; i++) {
		char want[16];
		snprintf(want, sizeof(want), "%u", i);
		ASSERT_STR_EQ(r[i].name, want);
		ASSERT_UINT(r[i].self, ==, 1000 - i);
	}
	sonde_view__free(v);
}

TEST(view_diff_compares_self_shares_function_by_function)
{
	struct sonde_view *before = ASSERT_NOT_NULL(sonde_view__new(NULL));
	struct sonde_view *after = ASSERT_NOT_NULL(sonde_view__new(NULL));
	struct sonde_view_event e = ev(1, 1, "p", 0, 0, 0);
	const struct sonde_view_diff_row *r;
	size_t n;

	/* before: a 75 %, b 25 %; after: a 50 %, c 50 % (b gone, c new) */
	uint32_t a = fn(before, "a", "m"), b = fn(before, "b", "m");
	e.weight = 3;
	sonde_view__add(before, &e, &a, 1);
	e.weight = 1;
	sonde_view__add(before, &e, &b, 1);
	uint32_t c = fn(after, "c", "m"), a2 = fn(after, "a", "m");
	e.weight = 10;
	sonde_view__add(after, &e, &c, 1);
	sonde_view__add(after, &e, &a2, 1);

	ASSERT_OK(sonde_view__diff(before, after, &r, &n));
	ASSERT_UINT(n, ==, 3);
	ASSERT_STR_EQ(r[0].name, "c"); /* +50 */
	ASSERT_DOUBLE_NEAR(r[0].before_pct, 0, 1e-9);
	ASSERT_DOUBLE_NEAR(r[0].after_pct, 50, 1e-9);
	ASSERT_STR_EQ(r[1].name, "a"); /* -25, tied with b: by name */
	ASSERT_UINT(r[1].before, ==, 3);
	ASSERT_UINT(r[1].after, ==, 10);
	ASSERT_DOUBLE_NEAR(r[1].before_pct, 75, 1e-9);
	ASSERT_STR_EQ(r[2].name, "b");
	ASSERT_DOUBLE_NEAR(r[2].after_pct, 0, 1e-9);
	ASSERT_ERR(sonde_view__diff(after, after, &r, &n), -EINVAL);
	sonde_view__free(before);
	sonde_view__free(after);
}

TEST(view_folded_escapes_sums_then_rounds_and_roots)
{
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t main_ = fn(v, "main", "prog");
	uint32_t op = fn(v, "operator;x", "prog"); /* a ';' would split the frame */
	uint32_t nl = fn(v, "two\nlines", "prog"); /* a control character is shown as '?' */
	uint32_t run1 = fn(v, "run", "libA.so"), run2 = fn(v, "run", "libB.so");
	struct sonde_view_event e = ev(7, 8, "app", 0, 0, 300);
	uint32_t s1[] = {run1, main_}, s2[] = {run2, main_}, s3[] = {op, main_};
	uint32_t s4[] = {nl};
	char *out;

	/* two stacks of the same names (run in two modules), 300 ns each: 0.6 us summed */
	sonde_view__add(v, &e, s1, 2);
	sonde_view__add(v, &e, s2, 2);
	e.weight = 400; /* alone under half a microsecond: rounds away */
	sonde_view__add(v, &e, s3, 2);
	e.weight = 1500;
	sonde_view__add(v, &e, s4, 1);
	e.weight = 9; /* an empty stack: no line without roots */
	sonde_view__add(v, &e, NULL, 0);

	out = folded(v, SONDE_VIEW_ROOTS_NONE, 1000);
	ASSERT_STR_EQ(out, "main;run 1\ntwo?lines 2\n");
	free(out);
	out = folded(v, SONDE_VIEW_ROOTS_NONE, 1);
	ASSERT_STR_EQ(out, "main;operator:x 400\nmain;run 600\ntwo?lines 1500\n");
	free(out);

	e = ev(9, 10, "wkr", 0, 0, 5);
	e.process = "srv";
	sonde_view__add(v, &e, &main_, 1);
	out = folded(v, SONDE_VIEW_ROOTS_PROCESS, 0);
	ASSERT_STR_EQ(out, "app-7 9\napp-7;main;operator:x 400\napp-7;main;run 600\n"
			   "app-7;two?lines 1500\nsrv-9;main 5\n");
	free(out);
	out = folded(v, SONDE_VIEW_ROOTS_THREAD, 0);
	ASSERT_CONTAINS(out, "app-7/8;main;run 600\n");
	ASSERT_CONTAINS(out, "wkr-9/10;main 5\n");
	free(out);
	sonde_view__free(v);
}

TEST(view_refuses_bad_arguments)
{
	struct sonde_view_opts bad = {0}; /* sz not set */
	struct sonde_view *v;

	errno = 0;
	ASSERT(sonde_view__new(&bad) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t a = fn(v, "a", NULL), unknown = a + 1;
	struct sonde_view_event e = ev(1, 1, "p", 0, 0, 1);
	ASSERT_ERR(sonde_view__add(v, &e, &unknown, 1), -EINVAL);
	e.state = SONDE_VIEW_STATES;
	ASSERT_ERR(sonde_view__add(v, &e, &a, 1), -EINVAL);
	e.state = SONDE_VIEW_ON_CPU;
	e.sz = 0;
	ASSERT_ERR(sonde_view__add(v, &e, &a, 1), -EINVAL);
	ASSERT_ERR(sonde_view__func(v, NULL, "m"), -EINVAL);
	struct sonde_view_rows_opts ro = {.sz = sizeof(ro), .group = 99};
	const struct sonde_view_row *rows;
	size_t n;
	ASSERT_ERR(sonde_view__rows(v, &ro, &rows, &n, NULL), -EINVAL);
	sonde_view__free(v);
}

/* convert's folded export goes through the same writer: two functions of one name (in two
 * modules) off the CPU for 300 ns each print one line of 1 us, where the export used to
 * drop each tree node under one unit before summing (and printed nothing). */
TEST(view_folded_export_of_a_profile_sums_before_rounding)
{
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(NULL));
	struct sonde_sym_frame a = {.name = "wait", .module = "/lib/a.so", .file = "a.c"};
	struct sonde_sym_frame b = {.name = "wait", .module = "/lib/b.so", .file = "b.c"};
	struct sonde_sym_frame m = {.name = "main", .module = "/bin/p", .file = "p.c"};
	uint32_t la, lb, lm, t;
	int fd = memfd_create("folded", 0);
	char out[256] = "";

	ASSERT(fd >= 0);
	ASSERT_OK(sonde_profile__add_location(p, 0, 0x10, &a, 1, &la));
	ASSERT_OK(sonde_profile__add_location(p, 0, 0x20, &b, 1, &lb));
	ASSERT_OK(sonde_profile__add_location(p, 0, 0x30, &m, 1, &lm));
	ASSERT_OK(sonde_profile__add_thread(p, 5, 5, "p", &t));
	uint32_t sa[] = {la, lm}, sb[] = {lb, lm};
	ASSERT_OK(sonde_profile__add_offcpu(p, 1, t, 0, sa, 2, 300, SONDE_OFFCPU_SLEEPING));
	ASSERT_OK(sonde_profile__add_offcpu(p, 2, t, 0, sb, 2, 300, SONDE_OFFCPU_SLEEPING));
	struct sonde_profile_write_opts o = {.sz = sizeof(o), .metric = SONDE_PROFILE_METRIC_OFF_CPU};
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, &o));
	ASSERT_INT(lseek(fd, 0, SEEK_SET), ==, 0);
	ASSERT_INT(read(fd, out, sizeof(out) - 1), >=, 0);
	ASSERT_STR_EQ(out, "main;wait;[off-cpu: S] 1\n");
	close(fd);
	sonde_profile__free(p);
}

/* What a spool reader does: stacks resolved once and added by id, off-CPU events under
 * their state's frame, and the figures of its header (states, threads, stacks, empty
 * stacks, unresolved weight). */
TEST(view_state_frames_stack_ids_and_stats)
{
	struct sonde_view_opts o = {.sz = sizeof(o), .state_frames = 1};
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(&o));
	uint32_t main_ = fn(v, "main", "prog"), rd = fn(v, "read", "libc.so.6");
	uint32_t raw = fn(v, "0x1234", "[unknown]");
	uint32_t io[] = {rd, main_}, odd[] = {raw, main_};
	int64_t s_io = sonde_view__stack(v, io, 2), s_odd = sonde_view__stack(v, odd, 2);
	struct sonde_view_stats st = {.sz = sizeof(st)};
	size_t n;

	ASSERT_INT(s_io, >, 0);
	ASSERT_INT(sonde_view__stack(v, io, 2), ==, s_io); /* interned once */
	ASSERT_INT(sonde_view__stack(v, io, 0), ==, 0);	   /* the empty stack */
	ASSERT_INT(sonde_view__stack(v, (uint32_t[]){99}, 1), ==, -EINVAL);
	ASSERT_OK(sonde_view__func_unresolved(v, raw));
	ASSERT_ERR(sonde_view__func_unresolved(v, 99), -EINVAL);
	ASSERT_STR_EQ(sonde_view_state_name(SONDE_VIEW_SLEEPING), "[off-cpu: S]");
	ASSERT_STR_EQ(sonde_view_state_name(SONDE_VIEW_UNKNOWN), "[unknown: lost records]");
	ASSERT_STR_EQ(sonde_view_state_name(SONDE_VIEW_ON_CPU), "");

	/* on CPU in read (3 + 1 empty), sleeping in read (1000 ns), blocked in read, an
	 * unresolved frame on another thread (5), and an interval with no stack at all */
	struct sonde_view_event e = ev(10, 10, "prog", 0, 1, 3);
	ASSERT_INT(sonde_view__add_stack(v, &e, (uint32_t)s_io), ==, 1);
	e.weight = 1;
	ASSERT_INT(sonde_view__add_stack(v, &e, 0), ==, 1);
	e.state = SONDE_VIEW_SLEEPING;
	e.weight = 1000;
	ASSERT_INT(sonde_view__add_stack(v, &e, (uint32_t)s_io), ==, 1);
	e.state = SONDE_VIEW_BLOCKED;
	e.weight = 10;
	ASSERT_INT(sonde_view__add_stack(v, &e, (uint32_t)s_io), ==, 1);
	e.state = SONDE_VIEW_UNKNOWN;
	e.weight = 7;
	ASSERT_INT(sonde_view__add_stack(v, &e, 0), ==, 1);
	e = ev(10, 11, "worker", 1, 2, 5);
	ASSERT_INT(sonde_view__add_stack(v, &e, (uint32_t)s_odd), ==, 1);
	ASSERT_ERR(sonde_view__add_stack(v, &e, 999), -EINVAL);

	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_UINT(st.total, ==, 3 + 1 + 1000 + 10 + 7 + 5);
	ASSERT_UINT(st.events, ==, 6);
	ASSERT_UINT(st.weight[SONDE_VIEW_ON_CPU], ==, 3 + 1 + 5);
	ASSERT_UINT(st.state_events[SONDE_VIEW_ON_CPU], ==, 3);
	ASSERT_UINT(st.weight[SONDE_VIEW_SLEEPING], ==, 1000);
	ASSERT_UINT(st.state_events[SONDE_VIEW_UNKNOWN], ==, 1);
	ASSERT_UINT(st.processes, ==, 1);
	ASSERT_UINT(st.threads, ==, 2);
	/* read;main on CPU, sleeping and blocked are three stacks, 0x1234;main a fourth, the
	 * lone [unknown: lost records] a fifth; the empty on-CPU one is not a stack */
	ASSERT_UINT(st.stacks, ==, 5);
	ASSERT_UINT(st.empty, ==, 1);
	ASSERT_UINT(st.unresolved, ==, 5);

	const struct sonde_view_row *r =
		rows_of(v, SONDE_VIEW_BY_FUNCTION, SONDE_VIEW_SORT_SELF, 0, &n, NULL);
	ASSERT_STR_EQ(r[0].name, "[off-cpu: S]");
	ASSERT_STR_EQ(r[0].module, "[sched]");
	ASSERT_UINT(r[0].self, ==, 1000);
	ASSERT_STR_EQ(r[1].name, "[off-cpu: D]");
	ASSERT_STR_EQ(r[2].name, "[unknown: lost records]");
	ASSERT_UINT(r[2].self, ==, 7);
	ASSERT_STR_EQ(r[3].name, "0x1234");
	ASSERT_STR_EQ(r[4].name, "read");
	ASSERT_UINT(r[4].self, ==, 3); /* on CPU only: off it, the state is innermost */
	ASSERT_UINT(r[4].total, ==, 1013);

	char *text = folded(v, SONDE_VIEW_ROOTS_NONE, 1);
	ASSERT_STR_EQ(text, "[unknown: lost records] 7\n"
			    "main;0x1234 5\n"
			    "main;read 3\n"
			    "main;read;[off-cpu: D] 10\n"
			    "main;read;[off-cpu: S] 1000\n");
	free(text);

	/* a state frame is a function like any other to a diff */
	struct sonde_view *before = ASSERT_NOT_NULL(sonde_view__new(&o));
	uint32_t b_rd = fn(before, "read", "libc.so.6");
	e = ev(10, 10, "prog", 0, 1, 10);
	e.state = SONDE_VIEW_SLEEPING;
	ASSERT_INT(sonde_view__add(before, &e, &b_rd, 1), ==, 1);
	const struct sonde_view_diff_row *d;
	ASSERT_OK(sonde_view__diff(before, v, &d, &n));
	ASSERT_STR_EQ(d[0].name, "[off-cpu: S]");
	ASSERT_UINT(d[0].before, ==, 10);
	ASSERT_UINT(d[0].after, ==, 1000);
	sonde_view__free(before);

	/* an older caller's shorter stats struct gets what it has room for */
	struct {
		size_t sz;
		uint64_t total;
	} small = {.sz = sizeof(small)};
	ASSERT_OK(sonde_view__stats(v, (struct sonde_view_stats *)&small));
	ASSERT_UINT(small.total, ==, st.total);
	ASSERT_ERR(sonde_view__stats(v, &(struct sonde_view_stats){0}), -EINVAL);
	sonde_view__free(v);
}

/* report's order: ties in the key go to the name, not the other weight; CPUs by number. */
TEST(view_rows_ties_by_name_and_cpus_by_number)
{
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t a = fn(v, "a", "m"), b = fn(v, "b", "m"), top = fn(v, "top", "m");
	uint32_t deep[] = {b, top};
	struct sonde_view_rows_opts o = {.sz = sizeof(o), .sort = SONDE_VIEW_SORT_SELF};
	const struct sonde_view_row *r;
	size_t n;

	/* a, b and top all self 2; top has total 4 */
	struct sonde_view_event e = ev(1, 1, "p", 10, 0, 2);
	ASSERT_INT(sonde_view__add(v, &e, &a, 1), ==, 1);
	e.cpu = 9;
	ASSERT_INT(sonde_view__add(v, &e, deep, 2), ==, 1);
	e.cpu = SONDE_VIEW_CPU_NONE;
	e.weight = 1;
	ASSERT_INT(sonde_view__add(v, &e, &top, 1), ==, 1);
	e.cpu = 2;
	ASSERT_INT(sonde_view__add(v, &e, &top, 1), ==, 1);

	ASSERT_OK(sonde_view__rows(v, &o, &r, &n, NULL));
	ASSERT_STR_EQ(r[0].name, "top"); /* self 2, total 4: first without ties_by_name */
	ASSERT_STR_EQ(r[1].name, "a");
	o.ties_by_name = 1;
	ASSERT_OK(sonde_view__rows(v, &o, &r, &n, NULL));
	ASSERT_STR_EQ(r[0].name, "a");
	ASSERT_STR_EQ(r[1].name, "b");
	ASSERT_STR_EQ(r[2].name, "top");

	o = (struct sonde_view_rows_opts){
		.sz = sizeof(o), .group = SONDE_VIEW_BY_CPU, .sort = SONDE_VIEW_SORT_NAME};
	ASSERT_OK(sonde_view__rows(v, &o, &r, &n, NULL));
	ASSERT_UINT(n, ==, 4);
	ASSERT_STR_EQ(r[0].name, "2");
	ASSERT_STR_EQ(r[1].name, "9");
	ASSERT_STR_EQ(r[2].name, "10"); /* by number, not text */
	ASSERT_STR_EQ(r[3].name, "[unknown]");
	sonde_view__free(v);
}

/* --time's seconds on the events' clock: rounded inward, a time given to the nanosecond
 * kept exactly (0.001001001 * 1e9 is not 1001001 in a double). */
TEST(view_filter_time_in_seconds)
{
	struct sonde_view_filter f = {.sz = sizeof(f)};

	sonde_view_filter__time_s(&f, 5000000000ULL, 0.001001001, 0.0100000015);
	ASSERT_INT(f.time_range, ==, 1);
	ASSERT_UINT(f.time_from_ns, ==, 5001001001ULL);
	ASSERT_UINT(f.time_to_ns, ==, 5010000001ULL); /* the last nanosecond at or before */
	sonde_view_filter__time_s(&f, 5000000000ULL, 0.0000000015, -1);
	ASSERT_UINT(f.time_from_ns, ==, 5000000002ULL); /* the first at or after */
	ASSERT_UINT(f.time_to_ns, ==, 0);		/* no end */
	sonde_view_filter__time_s(&f, 0, 0, 0);		/* ends at the clock's zero: not "no end" */
	ASSERT_UINT(f.time_to_ns, ==, 1);
	sonde_view_filter__time_s(NULL, 0, 0, 0); /* nothing to set */
}

/* Short off-CPU intervals (too short to stack) are counted apart: kept by the thread
 * filters alone (no time, CPU or state of their own), summed in the stats, forgotten by
 * clear, and no event or weight. */
TEST(view_short_intervals_kept_by_thread_and_summed)
{
	static const uint32_t pids[] = {10};
	static const int cpus[] = {3};
	struct sonde_view_filter f = {.sz = sizeof(f),
				      .pids = pids,
				      .n_pids = 1,
				      .cpus = cpus,
				      .n_cpus = 1,
				      .time_range = 1,
				      .time_from_ns = 100,
				      .time_to_ns = 200,
				      .states = 1u << SONDE_VIEW_SLEEPING};
	struct sonde_view_opts o = {.sz = sizeof(o), .filter = &f};
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(&o));
	struct sonde_view_event a = ev(10, 11, "a", 0, 5000, 0), b = ev(20, 20, "b", 3, 150, 0);
	struct sonde_view_stats st = {.sz = sizeof(st)};

	ASSERT_INT(sonde_view__add_short(v, &a, 4, 4000), ==, 1);
	ASSERT_INT(sonde_view__add_short(v, &a, 1, 900), ==, 1);
	ASSERT_INT(sonde_view__add_short(v, &b, 7, 7000), ==, 0);
	ASSERT_INT(sonde_view__add_short(v, NULL, 1, 1), ==, -EINVAL);
	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_UINT(st.short_count, ==, 5);
	ASSERT_UINT(st.short_ns, ==, 4900);
	ASSERT_UINT(st.events, ==, 0);
	ASSERT_UINT(st.total, ==, 0);
	/* a caller's older, shorter stats struct is filled up to its size */
	struct sonde_view_stats old = {.sz = offsetof(struct sonde_view_stats, short_count)};
	old.short_count = 99;
	ASSERT_OK(sonde_view__stats(v, &old));
	ASSERT_UINT(old.short_count, ==, 99);
	sonde_view__clear(v);
	ASSERT_OK(sonde_view__stats(v, &st));
	ASSERT_UINT(st.short_count, ==, 0);
	ASSERT_UINT(st.short_ns, ==, 0);
	sonde_view__free(v);
}

/* What the readers print comes from the recorded programs (a thread's name, a binary's
 * symbols, a file's path): its control characters are shown as '?', so that an escape
 * sequence a process put in its name does not reach the terminal of whoever runs `sonde
 * report` or `sonde top` on a system-wide recording. */
TEST(view_names_show_control_characters_as_question_marks)
{
	struct sonde_view *v = ASSERT_NOT_NULL(sonde_view__new(NULL));
	uint32_t f = fn(v, "evil\x1b]0;title\x07", "lib\x1b[2J.so");
	struct sonde_view_event e = ev(7, 8, "x\x1b[31m", 0, 0, 5);
	size_t n;

	sonde_view__add(v, &e, &f, 1);
	const struct sonde_view_row *r = rows_of(v, SONDE_VIEW_BY_FUNCTION_THREAD,
						 SONDE_VIEW_SORT_SELF, 10, &n, NULL);
	ASSERT_UINT(n, ==, 1);
	ASSERT_STR_EQ(r[0].name, "evil?]0;title?");
	ASSERT_STR_EQ(r[0].module, "lib?[2J.so");
	ASSERT_STR_EQ(r[0].label, "x?[31m-7/8");
	sonde_view__free(v);
}
