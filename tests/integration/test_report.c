/* sonde report over spools written by the spool writer with stacks of real code: the
 * function offsets come from nm and readelf on the built target programs, so the names
 * the report prints go through the real symbolizer. */
#include <sonde/spool.h>

#include "../test.h"
#include "../util.h"
#include "../unit/spool_fixture.h"
#include "sym_util.h"

enum { PID = 4242 };

struct split_spool {
	struct buf b;
	struct sonde_spool_writer *w;
	uint32_t thread, exe;
	uint64_t t;
	const char *prog;
};

static void begin(struct split_spool *s, const char *prog)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1001001};
	struct sonde_spool_module_def m = {.pid = PID,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x555555554000ULL,
					   .end = 0x555555554000ULL + 0x100000,
					   .path = prog};

	memset(s, 0, sizeof(*s));
	s->prog = prog;
	s->t = h.start_monotonic_ns;
	s->w = ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &s->b, &h));
	ASSERT_OK(sonde_spool_writer__add_thread(s->w, s->t, PID, PID, "split", &s->thread));
	ASSERT_OK(sonde_spool_writer__add_module(s->w, s->t, &m, &s->exe));
}

/* File offset of a point inside function fn. */
static uint64_t off_in(const struct split_spool *s, const char *fn, uint64_t delta)
{
	return sym_test_vaddr_to_off(s->prog, sym_test_nm(s->prog, fn, 0) + delta);
}

/* n samples of the stack fns[] (innermost first), the leaf address varying a little. */
static void add(struct split_spool *s, const char *const *fns, size_t depth, int n)
{
	struct sonde_spool_frame st[16];

	for (size_t i = 0; i < depth; i++)
		st[i] = (struct sonde_spool_frame){s->exe, off_in(s, fns[i], 4)};
	uint64_t leaf = st[0].addr;
	for (int k = 0; k < n; k++) {
		st[0].addr = leaf + (uint64_t)(k % 3);
		s->t += 1001001;
		ASSERT_OK(sonde_spool_writer__add_sample(s->w, s->t, s->thread, st, depth, 0));
	}
}

static const char *const hot[] = {"compute_hot", "path_hot", "run", "main"};
static const char *const warm[] = {"compute_warm", "path_warm", "run", "main"};
static const char *const cool[] = {"compute_cool", "path_cool", "run", "main"};

/* The split profile, 600/300/100 samples, written to test_path(name). */
static const char *split_file(const char *name, int finish, size_t *len)
{
	struct split_spool s;
	const char *path = test_path(name);

	begin(&s, test_prog("split"));
	for (int round = 0; round < 2; round++) {
		add(&s, hot, 4, 300);
		add(&s, warm, 4, 150);
		add(&s, cool, 4, 50);
	}
	if (finish)
		ASSERT_OK(sonde_spool_writer__finish(s.w));
	else
		ASSERT_OK(sonde_spool_writer__flush(s.w));
	sonde_spool_writer__free(s.w);
	test_write_file(path, s.b.data, s.b.len);
	if (len)
		*len = s.b.len;
	sonde__buf_free(&s.b);
	return path;
}

/* The row of `function` in the table that follows `title`, e.g. "by self". */
static const char *row_of(const char *out, const char *title, const char *function)
{
	static char line[512];
	const char *p = strstr(out, title);

	if (!p)
		FAIL("no table '%s' in:\n%s", title, out);
	p = strchr(p, '\n');
	for (; p && *p; p = strchr(p + 1, '\n')) {
		const char *eol = strchr(p + 1, '\n');
		size_t n = eol ? (size_t)(eol - p - 1) : strlen(p + 1);
		if (n == 0)
			break; /* end of the table */
		snprintf(line, sizeof(line), "%.*s", (int)n, p + 1);
		char needle[256];
		snprintf(needle, sizeof(needle), "  %s [", function);
		if (strstr(line, needle))
			return line;
	}
	FAIL("no row for %s in table '%s':\n%s", function, title, out);
}

/* Percentages of a row: "  60.00%       600  100.00%  ..." */
static void row_pcts(const char *row, double *self, double *total)
{
	unsigned long long s, t;
	if (sscanf(row, " %lf%% %llu %lf%% %llu", self, &s, total, &t) != 4)
		FAIL("cannot parse row: %s", row);
}

TEST(report_top_functions_self_and_total)
{
	struct test_output o;
	double self, total;
	const char *path = split_file("split.spool", 1, NULL);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.err, "");
	ASSERT_CONTAINS(o.out, "1000 samples");
	row_pcts(row_of(o.out, "by self", "compute_hot"), &self, &total);
	ASSERT_DOUBLE_NEAR(self, 60.0, 0.001);
	ASSERT_DOUBLE_NEAR(total, 60.0, 0.001);
	ASSERT_CONTAINS(row_of(o.out, "by self", "compute_hot"), "[split]");
	row_pcts(row_of(o.out, "by self", "compute_warm"), &self, &total);
	ASSERT_DOUBLE_NEAR(self, 30.0, 0.001);
	row_pcts(row_of(o.out, "by self", "compute_cool"), &self, &total);
	ASSERT_DOUBLE_NEAR(self, 10.0, 0.001);
	row_pcts(row_of(o.out, "by total", "main"), &self, &total);
	ASSERT_DOUBLE_NEAR(self, 0.0, 0.001);
	ASSERT_DOUBLE_NEAR(total, 100.0, 0.001);
	row_pcts(row_of(o.out, "by total", "path_warm"), &self, &total);
	ASSERT_DOUBLE_NEAR(total, 30.0, 0.001);
	/* the self table lists only functions with self samples */
	char *self_table = strdup(strstr(o.out, "by self"));
	*strstr(self_table, "by total") = 0;
	ASSERT_NOT_CONTAINS(self_table, "  main [");
	free(self_table);
	ASSERT_CONTAINS(o.out, "unresolved frames: 0 of ");
	test_output_free(&o);

	/* --top bounds the rows */
	test_runf(&o, 60, "%s report --top 1 %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "compute_warm");
	test_output_free(&o);
}

TEST(report_folded_stacks)
{
	struct test_output o;
	const char *path = split_file("split.spool", 1, NULL);

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	/* leaf addresses differ, functions merge; sorted; nothing else printed */
	ASSERT_STR_EQ(o.out, "main;run;path_cool;compute_cool 100\n"
			     "main;run;path_hot;compute_hot 600\n"
			     "main;run;path_warm;compute_warm 300\n");
	test_output_free(&o);
}

TEST(report_recursion_counts_once_and_unresolved)
{
	struct test_output o;
	struct split_spool s;
	double self, total;
	const char *path = test_path("rec.spool");

	begin(&s, test_prog("split"));
	/* run appears twice on the stack (different call sites): still 100% total */
	struct sonde_spool_frame st[] = {{s.exe, off_in(&s, "compute_hot", 4)},
					 {s.exe, off_in(&s, "run", 4)},
					 {s.exe, off_in(&s, "run", 8)},
					 {s.exe, off_in(&s, "main", 4)}};
	for (int i = 0; i < 50; i++)
		ASSERT_OK(sonde_spool_writer__add_sample(s.w, s.t += 1000000, s.thread, st, 4, 0));
	/* a raw address no module covers, and an empty stack */
	struct sonde_spool_frame raw[] = {{0, 0x1234}, {s.exe, off_in(&s, "main", 4)}};
	for (int i = 0; i < 50; i++)
		ASSERT_OK(sonde_spool_writer__add_sample(s.w, s.t += 1000000, s.thread, raw, 2, 0));
	ASSERT_OK(sonde_spool_writer__add_sample(s.w, s.t += 1000000, s.thread, NULL, 0, 0));
	ASSERT_OK(sonde_spool_writer__finish(s.w));
	sonde_spool_writer__free(s.w);
	test_write_file(path, s.b.data, s.b.len);
	sonde__buf_free(&s.b);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	row_pcts(row_of(o.out, "by total", "run"), &self, &total);
	ASSERT_DOUBLE_NEAR(total, 100.0 * 50 / 101, 0.01);
	row_pcts(row_of(o.out, "by self", "0x1234"), &self, &total);
	ASSERT_DOUBLE_NEAR(self, 100.0 * 50 / 101, 0.01);
	ASSERT_CONTAINS(o.out, "1 samples (0.99%) have an empty stack");
	ASSERT_CONTAINS(o.out, "unresolved frames: 1 of 5");
	test_output_free(&o);
}

TEST(report_lines_and_inline_frames)
{
	struct test_output o;
	struct split_spool s;
	const char *exe = test_prog("sym_inline");
	const char *src = test_src_path("tests/progs/sym_inline.c");
	const char *path = test_path("inline.spool");
	static struct sym_test_row rows[4096];
	size_t n_rows = sym_test_lines(exe, rows, 4096);
	uint32_t body = sym_test_marker_line(src, "sym:inner-body");
	uint64_t lo = sym_test_nm(exe, "outer_work", 0), leaf = 0;

	for (size_t i = 0; i < n_rows && !leaf; i++)
		if (rows[i].addr >= lo && rows[i].addr < lo + 0x200 &&
		    sym_test_line_at(rows, n_rows, rows[i].addr) == body)
			leaf = rows[i].addr;
	ASSERT(leaf != 0);
	begin(&s, exe);
	struct sonde_spool_frame st[] = {{s.exe, sym_test_vaddr_to_off(exe, leaf)},
					 {s.exe, off_in(&s, "main", 4)}};
	for (int i = 0; i < 10; i++)
		ASSERT_OK(sonde_spool_writer__add_sample(s.w, s.t += 1000000, s.thread, st, 2, 0));
	ASSERT_OK(sonde_spool_writer__finish(s.w));
	sonde_spool_writer__free(s.w);
	test_write_file(path, s.b.data, s.b.len);
	sonde__buf_free(&s.b);

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), path);
	ASSERT_STR_EQ(o.out, "main;outer_work;middle_step;inner_mix 10\n");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded --no-inline %s", test_bin("sonde"), path);
	ASSERT_STR_EQ(o.out, "main;outer_work 10\n");
	test_output_free(&o);

	char want[128];
	snprintf(want, sizeof(want), "  inner_mix (sym_inline.c:%u) [sym_inline]", body);
	test_runf(&o, 60, "%s report --lines %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);
}

TEST(report_truncated_spool_recovers_with_warning)
{
	struct test_output o;
	size_t len;
	const char *full = split_file("full.spool", 1, &len);
	char *data = test_read_file(full, NULL);
	const char *cut = test_path("cut.spool");

	test_write_file(cut, data, len - 2); /* inside the last sample or the end record */
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), cut);
	ASSERT_INT(o.status, ==, 0);
	char want[512];
	snprintf(want, sizeof(want), "sonde report: %s: truncated at byte ", cut);
	ASSERT_CONTAINS(o.err, want);
	ASSERT_CONTAINS(o.err, ", recovered 1000 samples\n");
	ASSERT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);
	/* a recording that was never finished, cut at a record boundary */
	const char *open_rec = split_file("unfinished.spool", 0, &len);
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), open_rec);
	ASSERT_INT(o.status, ==, 0);
	snprintf(want, sizeof(want), "truncated at byte %zu, recovered 1000 samples", len);
	ASSERT_CONTAINS(o.err, want);
	ASSERT_CONTAINS(o.out, "main;run;path_hot;compute_hot 600\n");
	test_output_free(&o);
	free(data);
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

TEST(report_errors_are_one_clear_line)
{
	struct test_output o;
	size_t len;
	const char *full = split_file("full.spool", 1, &len);
	char *data = test_read_file(full, NULL);
	const char *bad = test_path("bad.spool");

	data[len - 1] = 77; /* the END record's sample count */
	test_write_file(bad, data, len);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), bad);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "corrupt spool: malformed data at byte ");
	ASSERT_INT(count_lines(o.err), ==, 1);
	ASSERT_STR_EQ(o.out, "");
	test_output_free(&o);

	test_write_file(bad, "#!/bin/sh\necho hello\n", 21);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), bad);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "not a sonde spool file");
	ASSERT_INT(count_lines(o.err), ==, 1);
	test_output_free(&o);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), test_path("nope.spool"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "No such file or directory");
	ASSERT_INT(count_lines(o.err), ==, 1);
	test_output_free(&o);
	free(data);
}

TEST(report_usage)
{
	struct test_output o;

	test_runf(&o, 10, "%s report --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde report");
	ASSERT_CONTAINS(o.out, "--folded");
	test_output_free(&o);
	/* no file: sonde.spool, which is not here */
	test_runf(&o, 10, "%s report", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde report: sonde.spool: ");
	test_output_free(&o);
	test_runf(&o, 10, "%s report --top x f", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--top");
	test_output_free(&o);
	test_runf(&o, 10, "%s report --bogus f", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err,
		      "sonde report: unknown option '--bogus' (see 'sonde report --help')\n");
	test_output_free(&o);
}

/* Two processes (three threads) of the split program, for the header and the filters. */
static const char *multi_file(const char *name)
{
	struct split_spool s;
	uint32_t t2, t3;
	const char *path = test_path(name);

	begin(&s, test_prog("split"));
	ASSERT_OK(sonde_spool_writer__add_thread(s.w, s.t, PID, PID + 1, "worker", &t2));
	ASSERT_OK(sonde_spool_writer__add_thread(s.w, s.t, PID + 7, PID + 7, "other", &t3));
	add(&s, hot, 4, 600); /* 0.6 s of samples on the main thread */
	uint32_t main_thread = s.thread;
	s.thread = t2;
	add(&s, warm, 4, 300);
	s.thread = t3;
	add(&s, cool, 4, 100);
	s.thread = main_thread;
	ASSERT_OK(sonde_spool_writer__finish(s.w));
	sonde_spool_writer__free(s.w);
	test_write_file(path, s.b.data, s.b.len);
	sonde__buf_free(&s.b);
	return path;
}

TEST(report_header_counts_say_what_they_count)
{
	struct test_output o;
	const char *path = split_file("split.spool", 1, NULL);

	/* 1000 samples of 3 function stacks (each leaf at 3 addresses: 9 stack nodes), one
	 * thread: the header counted 3 nodes per leaf address and the threads of the spool */
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "1000 samples over ");
	ASSERT_CONTAINS(o.out, "sampled in 1 process and 1 thread; 3 distinct stacks (by function, "
			       "as --folded prints them)");
	ASSERT_CONTAINS(o.out, "unresolved frames: 0 of ");
	ASSERT_CONTAINS(o.out, " distinct frame addresses have no symbol; 0 samples (0.00%)");
	test_output_free(&o);

	path = multi_file("multi.spool");
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), path);
	ASSERT_CONTAINS(o.out, "sampled in 2 processes and 3 threads; 3 distinct stacks");
	test_output_free(&o);
}

/* `sonde report ARGS PATH` succeeds and prints text. */
static void report_says(const char *args, const char *path, const char *text)
{
	struct test_output o;

	test_runf(&o, 60, "%s report %s %s", test_bin("sonde"), args, path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, text);
	test_output_free(&o);
}

/* Finishes writer w, whose bytes b holds, into the test file name: its path. */
static const char *finished_spool(struct sonde_spool_writer *w, struct buf *b, const char *name)
{
	const char *path = test_path(name);

	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	test_write_file(path, b->data, b->len);
	sonde__buf_free(b);
	return path;
}

/* With the CPUs' switches, the header's span is the accounting's window, the one
 * --summary's tables add up over (from where the machine was first seen to where it was
 * last): it used to be the samples' span, here 0.19 s of a 0.49 s window. Spinner 90 is
 * sampled at 510 and 700 ms on CPU 0, sleeps 520..600 and leaves it at 1000. */
TEST(report_header_span_is_the_accounting_window)
{
	enum { MS = 1000000 };
	static const uint64_t S0 = 1000000000;
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 520 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 600 * MS, 0, 90, SONDE_OFFCPU_RUNNABLE},
		{S0 + 1000 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
	};
	const struct sonde_spool_frame f = {0, 0x1234};
	struct buf b = BUF_INIT;
	struct test_output o;
	uint32_t spinner;

	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 510 * MS, 90, 90, "spinner", &spinner));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 510 * MS, spinner, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 700 * MS, spinner, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 3));
	const char *path = finished_spool(w, &b, "window.spool");

	test_runf(&o, 60, "%s report --metric wall %s", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, " over 0.49 s at 1000 Hz");
	/* the tables printed under it, over the same window */
	ASSERT_CONTAINS(o.out, "(seconds over 0.490 s, by the CPUs' switches)");
	test_output_free(&o);
	report_says("--summary", path, "where the wall-clock time went, over 0.490 s");
}

/* --summary of a recording made without --off-cpu says that its rows are their samples
 * alone (the waits were not recorded), and `report` says how to get them. */
TEST(report_summary_without_off_cpu_says_rows_are_samples)
{
	enum { MS = 1000000 };
	static const uint64_t S0 = 1000000000;
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	const struct sonde_spool_frame f = {0, 0x1234};
	struct buf b = BUF_INIT;
	uint32_t t;

	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 90, 90, "spinner", &t));
	for (int i = 0; i < 3; i++)
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + (10 + i) * MS, t, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_exit(w, S0 + 100 * MS, t));
	const char *path = finished_spool(w, &b, "oncpu.spool");

	report_says("--summary", path,
		    "recorded without --off-cpu: the time threads spent off the CPUs is not in the "
		    "recording, so a row holds its on-CPU samples alone");
	report_says("--summary", path,
		    "\nspinner-90                   0.003     0.000     0.000     0.000     0.000     "
		    "0.000     0.000     0.003\n");
	report_says("--metric wall", path,
		    "the recording has no off-CPU intervals (record with --off-cpu)");
}

/* A spool of one 20 ms wait of thread "waiter", a known one or unknown time, and the
 * account acct, written to the test file name: its path. */
static const char *one_wait_spool(const char *name, bool unknown,
				  const struct sonde_spool_account *acct)
{
	enum { MS = 1000000 };
	static const uint64_t S0 = 1000000000;
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	struct buf b = BUF_INIT;
	uint32_t t;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 90, 90, "waiter", &t));
	const struct sonde_spool_offcpu iv = {.switch_out_ns = S0 + 10 * MS,
					      .switch_in_ns = S0 + 30 * MS,
					      .thread = t,
					      .state = unknown ? SONDE_OFFCPU_OTHER
							       : SONDE_OFFCPU_SLEEPING};
	ASSERT_OK(unknown ? sonde_spool_writer__add_unknown(w, &iv, NULL, 0)
			  : sonde_spool_writer__add_offcpu(w, &iv, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_account(w, acct));
	return finished_spool(w, &b, name);
}

/* Unknown time in a recording that lost no record is a wait whose switch-in the kernel did
 * not trace: the report's line on it says that, not only "0 records lost"; with a loss it
 * names the loss. */
TEST(report_unknown_time_without_a_loss_names_its_cause)
{
	for (int lost = 0; lost < 2; lost++) {
		const struct sonde_spool_account acct = {.kernel_time = 1,
							 .lost_records = lost ? 428 : 0};
		const char *path = one_wait_spool("unknown.spool", true, &acct);

		report_says("--metric wall", path,
			    lost ? "% of thread time unknown: 428 records lost (0.020 s, in 1 "
				   "intervals under [unknown: lost records])"
				 : "% of thread time unknown: 0 records lost, waits whose switch-in "
				   "the kernel did not trace (0.020 s, in 1 intervals under [unknown: "
				   "lost records])");
	}
}

/* Off-CPU intervals the recorder dropped though no record was lost (a wait it could not
 * write) are said too: a recording that lost nothing used to say nothing of them. */
TEST(report_dropped_waits_without_a_loss_are_said)
{
	const struct sonde_spool_account acct = {.kernel_time = 1, .offcpu_dropped = 3};
	const char *path = one_wait_spool("dropped.spool", false, &acct);

	report_says("--metric wall", path,
		    "3 off-CPU intervals dropped with no record lost (waits the recorder could "
		    "not write): their time is in no figure here");
	report_says("", path, "3 off-CPU intervals dropped with no record lost");
}

TEST(report_filters_pid_tid_comm_time)
{
	struct test_output o;
	const char *path = multi_file("multi.spool");
	const char *sonde = test_bin("sonde");

	test_runf(&o, 60, "%s report --pid %d --folded %s", sonde, PID + 7, path);
	ASSERT_STR_EQ(o.out, "main;run;path_cool;compute_cool 100\n");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --tid %d,%d --folded %s", sonde, PID, PID + 7, path);
	ASSERT_STR_EQ(o.out, "main;run;path_cool;compute_cool 100\n"
			     "main;run;path_hot;compute_hot 600\n");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --comm worker %s", sonde, path);
	ASSERT_CONTAINS(o.out, "300 samples (of 1000)");
	test_output_free(&o);
	/* samples are 1.001 ms apart from the start: the first 0.6 s are the hot ones */
	test_runf(&o, 60, "%s report --time ,0.5 --folded %s", sonde, path);
	ASSERT_CONTAINS(o.out, "main;run;path_hot;compute_hot ");
	ASSERT_NOT_CONTAINS(o.out, "warm");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --time 0.901,2 --folded %s", sonde, path);
	ASSERT_STR_EQ(o.out, "main;run;path_cool;compute_cool 100\n");
	test_output_free(&o);
	/* nothing left: the report says why */
	test_runf(&o, 60, "%s report --pid 1 %s", sonde, path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "no samples match --pid, --tid, --comm or --time (the recording has "
			       "1000)");
	test_output_free(&o);
	/* the same with every way of grouping what is left */
	test_runf(&o, 60, "%s report --pid 1 --folded --folded-roots thread %s", sonde, path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.out, "");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --pid 1 --column process %s", sonde, path);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	test_runf(&o, 10, "%s report --time x %s", sonde, path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
	test_runf(&o, 10, "%s report --pid x %s", sonde, path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

TEST(report_sort_percent_limit_and_roots)
{
	struct test_output o;
	const char *path = multi_file("multi.spool");
	const char *sonde = test_bin("sonde");

	test_runf(&o, 60, "%s report --sort name %s", sonde, path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "Top functions by name:");
	ASSERT_NOT_CONTAINS(o.out, "by self");
	ASSERT(strstr(o.out, "compute_cool [") < strstr(o.out, "compute_hot ["));
	test_output_free(&o);
	test_runf(&o, 60, "%s report --sort total --percent-limit 50 %s", sonde, path);
	ASSERT_CONTAINS(o.out, "  main [");
	ASSERT_CONTAINS(o.out, "  compute_hot [");
	ASSERT_NOT_CONTAINS(o.out, "compute_warm");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --sort self %s", sonde, path);
	ASSERT_CONTAINS(o.out, "by self");
	ASSERT_NOT_CONTAINS(o.out, "by total");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded --folded-roots process %s", sonde, path);
	char want[512];
	snprintf(want, sizeof(want),
		 "other-%d;main;run;path_cool;compute_cool 100\n"
		 "split-%d;main;run;path_hot;compute_hot 600\n"
		 "split-%d;main;run;path_warm;compute_warm 300\n",
		 PID + 7, PID, PID);
	ASSERT_STR_EQ(o.out, want);
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded --folded-roots thread %s", sonde, path);
	snprintf(want, sizeof(want), "worker-%d/%d;main;run;path_warm;compute_warm 300\n", PID,
		 PID + 1);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded --folded-roots none %s", sonde, path);
	ASSERT_CONTAINS(o.out, "\nmain;run;path_hot;compute_hot 600\n");
	test_output_free(&o);
	test_runf(&o, 10, "%s report --folded-roots process %s", sonde, path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
	test_runf(&o, 10, "%s report --sort bogus %s", sonde, path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
	test_runf(&o, 10, "%s report --percent-limit 200 %s", sonde, path);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

TEST(report_input_option_and_default)
{
	struct test_output o;
	const char *path = split_file("split.spool", 1, NULL);

	test_runf(&o, 60, "%s report -i %s --folded", test_bin("sonde"), path);
	ASSERT_CONTAINS(o.out, "compute_hot 600");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --input %s --folded", test_bin("sonde"), path);
	ASSERT_CONTAINS(o.out, "compute_hot 600");
	test_output_free(&o);
	/* no file: sonde.spool in the current directory, as perf reads perf.data */
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "cd %s && cp %s sonde.spool && %s report --folded",
		 test_tmpdir(), path, test_bin("sonde"));
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 60, sh);
	ASSERT_CONTAINS(o.out, "compute_hot 600");
	test_output_free(&o);
	test_runf(&o, 10, "%s report -i %s %s", test_bin("sonde"), path, path);
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "one input file at a time");
	test_output_free(&o);
}

TEST(report_diff_table)
{
	struct test_output o;
	struct split_spool s;
	const char *before = split_file("before.spool", 1, NULL); /* 60/30/10 % */
	const char *after = test_path("after.spool");

	begin(&s, test_prog("split"));
	add(&s, hot, 4, 100); /* 20/30/50 % of 500 */
	add(&s, warm, 4, 150);
	add(&s, cool, 4, 250);
	ASSERT_OK(sonde_spool_writer__finish(s.w));
	sonde_spool_writer__free(s.w);
	test_write_file(after, s.b.data, s.b.len);
	sonde__buf_free(&s.b);

	test_runf(&o, 60, "%s report --diff %s %s", test_bin("sonde"), before, after);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "before%   after%    change  function [module]\n"
			       "  10.00%   50.00%   +40.00%  compute_cool [split]\n"
			       "  60.00%   20.00%   -40.00%  compute_hot [split]\n"
			       "  30.00%   30.00%    +0.00%  compute_warm [split]\n");
	ASSERT_CONTAINS(o.out, "after:  ");
	ASSERT_CONTAINS(o.out, ", 500 samples");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --diff --top 1 %s %s", test_bin("sonde"), before, after);
	ASSERT_NOT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);
	test_runf(&o, 10, "%s report --diff %s", test_bin("sonde"), before);
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--diff takes two spools");
	test_output_free(&o);
}

/* A progress line on a terminal (forced here by SONDE_PROGRESS=1), erased at the end;
 * nothing in a pipe. */
TEST(report_progress_only_when_asked_or_on_a_terminal)
{
	struct test_output o;
	const char *path = split_file("split.spool", 1, NULL);
	char cmd[4096];

	snprintf(cmd, sizeof(cmd), "SONDE_PROGRESS=1 %s report %s", test_bin("sonde"), path);
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 60, sh);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "\rsonde report: counting samples 0/1000 (0%)\033[K");
	ASSERT_CONTAINS(o.err, "\rsonde report: symbolizing stacks");
	size_t n = strlen(o.err);
	ASSERT(n >= 4 && !strcmp(o.err + n - 4, "\r\033[K"));
	ASSERT_NOT_CONTAINS(o.out, "\r");
	test_output_free(&o);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), path);
	ASSERT_STR_EQ(o.err, "");
	test_output_free(&o);
}

/* The process/thread column: on by itself when the samples come from more than one, on
 * request otherwise; each row counts its own process's or thread's samples. */
TEST(report_process_and_thread_column)
{
	struct test_output o;
	const char *multi = multi_file("multi.spool");
	const char *single = split_file("split.spool", 1, NULL);
	const char *sonde = test_bin("sonde");
	char want[256];

	test_runf(&o, 60, "%s report %s", sonde, multi);
	ASSERT_CONTAINS(o.out, "  process     function [module]\n");
	snprintf(want, sizeof(want), "  60.00%%       600   60.00%%       600  split-%d  compute_hot [split]",
		 PID);
	ASSERT_CONTAINS(o.out, want);
	snprintf(want, sizeof(want), "   0.00%%         0   30.00%%       300  split-%d  path_warm [split]",
		 PID);
	ASSERT_CONTAINS(o.out, want);
	snprintf(want, sizeof(want), "   0.00%%         0   10.00%%       100  other-%d  main [split]",
		 PID + 7);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);

	test_runf(&o, 60, "%s report --column thread --pid %d %s", sonde, PID, multi);
	snprintf(want, sizeof(want), "  worker-%d/%d  compute_warm [split]", PID, PID + 1);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);

	/* one process, one thread: no column unless asked */
	test_runf(&o, 60, "%s report %s", sonde, single);
	ASSERT_CONTAINS(o.out, "  total  function [module]\n");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --column process %s", sonde, single);
	snprintf(want, sizeof(want), "  split-%d  compute_hot [split]", PID);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);
	test_runf(&o, 60, "%s report --column none %s", sonde, multi);
	ASSERT_CONTAINS(o.out, "  total  function [module]\n");
	ASSERT_CONTAINS(o.out, "  100.00%      1000  main [split]");
	test_output_free(&o);
	test_runf(&o, 10, "%s report --column cpu %s", sonde, multi);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

/* report, convert and top say alike that a spool is empty (0 bytes, or cut inside its
 * header), and report and convert alike that one is truncated. */
TEST_TIMEOUT(readers_say_alike_that_a_spool_is_empty_or_truncated, 120)
{
	const char *cmds[][2] = {{"report", ""}, {"convert", "-o x.folded"}, {"top", "-d 0.5"}};
	struct test_output o;
	size_t len;
	const char *full = split_file("whole.spool", 1, &len);
	char *data = test_read_file(full, NULL);
	const char *empties[] = {test_path("zero.spool"), test_path("ten.spool")};
	char want[512];

	test_write_file(empties[0], data, 0);
	test_write_file(empties[1], data, 10);
	for (int f = 0; f < 2; f++)
		for (int c = 0; c < 3; c++) {
			test_runf(&o, 60, "%s %s %s %s", test_bin("sonde"), cmds[c][0], cmds[c][1],
				  empties[f]);
			ASSERT_INT(o.status, ==, 1);
			snprintf(want, sizeof(want), "sonde %s: %s is empty: it holds no recording\n",
				 cmds[c][0], empties[f]);
			ASSERT_STR_EQ(o.err, want);
			test_output_free(&o);
		}
	const char *cut = test_path("cut2.spool");
	test_write_file(cut, data, len - 2);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), cut);
	ASSERT_INT(o.status, ==, 0);
	snprintf(want, sizeof(want), "%s: truncated at byte ", cut);
	const char *line = strstr(o.err, want);
	ASSERT_NOT_NULL(line);
	snprintf(want, sizeof(want), "%.*s", (int)(strchr(line, '\n') - line), line);
	ASSERT_CONTAINS(want, ", recovered 1000 samples");
	test_output_free(&o);
	test_runf(&o, 60, "%s convert -o %s %s", test_bin("sonde"), test_path("cut.folded"), cut);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, want);
	test_output_free(&o);
	/* the samples recovered, not those a filter kept: none of them here */
	test_runf(&o, 60, "%s convert --pid 1 -o %s %s", test_bin("sonde"),
		  test_path("cut1.folded"), cut);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, want);
	test_output_free(&o);
	free(data);
}
