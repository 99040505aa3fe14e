/* sonde convert end to end on spools: a spool written with the spool writer from the real
 * addresses of tests/progs/split (symbolized by the real symbolizer), and recordings. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/spool.h>

#include "../test.h"
#include "base/buf.h"
#include "export/perfetto.h"
#include "../unit/export_fixture.h"
#include "../unit/spool_fixture.h"
#include "../util.h"
#include "export_browser.h"
#include "pftrace_util.h"
#include "split_util.h"
#include "sym_util.h"

/* A spool of split's call paths with 60/30/10 samples, at addresses inside the functions
 * (per nm), in a module mapped the way the loader maps a PIE's code. */
static const char *split_spool_mix(const char *name, int hot, int warm, int n);
static const char *split_spool_write(const char *name, int hot, int warm, int n, bool offcpu);

static const char *split_spool(void)
{
	return split_spool_mix("split.spool", 6, 3, 100);
}

static const char *split_spool_mix(const char *name, int hot, int warm, int n)
{
	return split_spool_write(name, hot, warm, n, false);
}

/* The off-CPU intervals of split_offcpu_spool: 300 ms asleep under path_warm (woken 250 ms
 * in: 50 ms runnable), 100 ms in D under path_cool, on CPUs 0 and 1. */
static const struct sonde_spool_offcpu split_offcpu[] = {
	{.switch_out_ns = 110000000,
	 .switch_in_ns = 410000000,
	 .wakeup_ns = 360000000,
	 .cpu = 0,
	 .state = SONDE_OFFCPU_SLEEPING,
	 .waker_tid = 4243},
	{.switch_out_ns = 420000000,
	 .switch_in_ns = 520000000,
	 .cpu = 1,
	 .state = SONDE_OFFCPU_BLOCKED},
};

/* split_spool's 100 samples (100 ms on CPU) and the intervals above (400 ms off it). */
static const char *split_offcpu_spool(void)
{
	return split_spool_write("offcpu.spool", 6, 3, 100, true);
}

/* n samples, hot and warm of each 10 in those leaves, the rest cool; with offcpu, the
 * split_offcpu intervals after them. */
static const char *split_spool_write(const char *name, int hot, int warm, int n, bool offcpu)
{
	const char *bin = test_prog("split");
	const char *path = test_path(name);
	static const char *const names[] = {"main",	    "run",	   "path_hot",
					    "path_warm",    "path_cool",   "compute_hot",
					    "compute_warm", "compute_cool"};
	uint64_t off[8];
	struct sonde_spool_header h = {.start_time_ns = 1700000000000000000ULL,
				       .start_monotonic_ns = 5000000,
				       .sample_period_ns = 1000000};
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint32_t mod, thread;

	ASSERT(fd >= 0);
	for (int i = 0; i < 8; i++)
		off[i] = sym_test_vaddr_to_off(bin, sym_test_nm(bin, names[i], 0) + 4);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	if (offcpu)
		ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	/* the executable mapping as the loader makes it: the pages holding the code, at the
	 * load base plus their file offset (split is a PIE whose vaddrs equal offsets) */
	uint64_t lo = UINT64_MAX, hi = 0;
	for (int i = 0; i < 8; i++) {
		lo = off[i] < lo ? off[i] : lo;
		hi = off[i] > hi ? off[i] : hi;
	}
	lo &= ~0xfffULL;
	hi = (hi + 0x1000) & ~0xfffULL;
	struct sonde_spool_module_def m = {.pid = 4242,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x555555554000 + lo,
					   .end = 0x555555554000 + hi,
					   .pgoff = lo,
					   .path = bin};
	ASSERT_OK(sonde_spool_writer__add_module(w, 5000000, &m, &mod));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5000000, 4242, 4242, "split", &thread));
	uint64_t t = 6000000;
	for (int i = 0; i < n; i++) {
		int leaf = i % 10 < hot ? 0 : i % 10 < hot + warm ? 1 : 2; /* hot, warm, cool */
		struct sonde_spool_frame st[4] = {
			{mod, off[5 + leaf]}, {mod, off[2 + leaf]}, {mod, off[1]}, {mod, off[0]}};
		ASSERT_OK(sonde_spool_writer__add_sample(w, t += 1000000, thread, st, 4, 0));
	}
	for (size_t i = 0; offcpu && i < sizeof(split_offcpu) / sizeof(split_offcpu[0]); i++) {
		int leaf = i ? 2 : 1;
		struct sonde_spool_frame st[4] = {
			{mod, off[5 + leaf]}, {mod, off[2 + leaf]}, {mod, off[1]}, {mod, off[0]}};
		struct sonde_spool_offcpu iv = split_offcpu[i];
		iv.thread = thread;
		ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, st, 4));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);
	return path;
}

TEST(convert_truncated_stacks_are_marked)
{
	const char *bin = test_prog("split");
	const char *path = test_path("trunc.spool");
	struct sonde_spool_header h = {.sample_period_ns = 1000000};
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint64_t hot = sym_test_vaddr_to_off(bin, sym_test_nm(bin, "compute_hot", 0) + 4);
	uint64_t ph = sym_test_vaddr_to_off(bin, sym_test_nm(bin, "path_hot", 0) + 4);
	uint64_t run = sym_test_vaddr_to_off(bin, sym_test_nm(bin, "run", 0) + 4);
	uint32_t mod, thread;
	struct test_output o;

	ASSERT(fd >= 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	struct sonde_spool_module_def m = {.pid = 7,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x10000,
					   .end = 0x10000 + 0x100000,
					   .path = bin};
	ASSERT_OK(sonde_spool_writer__add_module(w, 1, &m, &mod));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 1, 7, 7, "t", &thread));
	struct sonde_spool_frame st[3] = {{mod, hot}, {mod, ph}, {mod, run}};
	ASSERT_OK(sonde_spool_writer__add_sample(w, 2, thread, st, 3, 0));
	/* cut short: the same frames, but the recorder could not reach the root */
	ASSERT_OK(sonde_spool_writer__add_sample(w, 3, thread, st, 2, SONDE_SAMPLE_TRUNCATED));
	ASSERT_OK(sonde_spool_writer__add_sample(w, 4, thread, st, 2, SONDE_SAMPLE_TRUNCATED));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);

	test_runf(&o, 60, "%s convert %s -o - -f folded", test_bin("sonde"), path);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.out, "[truncated];path_hot;compute_hot 2\n"
			     "run;path_hot;compute_hot 1\n");
	test_output_free(&o);
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void convert(struct test_output *o, const char *spool, const char *out, const char *extra)
{
	test_runf(o, 60, "%s convert %s -o %s%s%s", test_bin("sonde"), spool, out, extra ? " " : "",
		  extra ? extra : "");
}

TEST(convert_spool_to_folded_symbolized)
{
	const char *spool = split_spool();
	const char *out = test_path("split.folded");
	struct test_output o;

	convert(&o, spool, out, NULL);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.err, "");
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_STR_EQ(text, "main;run;path_cool;compute_cool 10\n"
			    "main;run;path_hot;compute_hot 60\n"
			    "main;run;path_warm;compute_warm 30\n");
	free(text);
	test_output_free(&o);
}

TEST(convert_no_symbolize_keeps_offsets)
{
	const char *spool = split_spool();
	const char *bin = test_prog("split");
	struct test_output o;
	char expect[256];

	test_runf(&o, 60, "%s convert %s -o - --format folded --no-symbolize", test_bin("sonde"),
		  spool);
	ASSERT_INT(o.status, ==, 0);
	uint64_t hot = sym_test_vaddr_to_off(bin, sym_test_nm(bin, "compute_hot", 0) + 4);
	uint64_t main_off = sym_test_vaddr_to_off(bin, sym_test_nm(bin, "main", 0) + 4);
	snprintf(expect, sizeof(expect), "split+0x%llx;", (unsigned long long)main_off);
	ASSERT_CONTAINS(o.out, expect);
	snprintf(expect, sizeof(expect), ";split+0x%llx 60\n", (unsigned long long)hot);
	ASSERT_CONTAINS(o.out, expect);
	ASSERT_NOT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);
}

TEST(convert_errors_are_one_line)
{
	struct test_output o;
	const char *garbage = test_path("garbage.spool");

	test_write_file(garbage, "not a spool at all", 18);
	convert(&o, garbage, test_path("x.svg"), NULL);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde convert: ");
	ASSERT_INT(count_lines(o.err), ==, 1);
	ASSERT(access(test_path("x.svg"), F_OK) != 0); /* nothing half-written */
	test_output_free(&o);

	convert(&o, test_path("missing.spool"), test_path("x.svg"), NULL);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "missing.spool: No such file or directory\n");
	test_output_free(&o);

	convert(&o, split_spool(), test_path("x.bin"), NULL);
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "cannot tell the format from");
	test_output_free(&o);

	convert(&o, split_spool(), test_path("x.svg"), "--format flames");
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "unknown format 'flames'");
	test_output_free(&o);

	/* the Perfetto export reads the spool itself: a missing one is named */
	convert(&o, test_path("missing.spool"), test_path("x.pftrace"), NULL);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "missing.spool: No such file or directory\n");
	test_output_free(&o);

	test_runf(&o, 10, "%s convert %s", test_bin("sonde"), split_spool());
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "no output given");
	test_output_free(&o);

	test_runf(&o, 10, "%s convert --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde convert [-i SPOOL | SPOOL] -o OUT");
	test_output_free(&o);
}

/* The folded text of split_spool(), converted to standard output. */
static char *folded_of_split(void)
{
	struct test_output o;

	test_runf(&o, 60, "%s convert %s -o - -f folded", test_bin("sonde"), split_spool());
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "compute_hot 60\n");
	char *text = ASSERT_NOT_NULL(strdup(o.out));
	test_output_free(&o);
	return text;
}

/* As root, `-o /dev/null` once turned /dev/null into a regular file (renamed over it): a
 * device is written in place, and stays what it is. */
TEST(convert_output_device_is_written_in_place)
{
	struct test_output o;
	struct stat st;

	if (geteuid() != 0)
		SKIP("needs root: only root could replace /dev/null");
	convert(&o, split_spool(), "/dev/null", "--format svg");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	ASSERT_OK(lstat("/dev/null", &st));
	ASSERT(S_ISCHR(st.st_mode));
	ASSERT_INT(access("/dev/null.old", F_OK), ==, -1);
	/* A device that refuses the data is an error, not a file made beside it. */
	convert(&o, split_spool(), "/dev/full", "--format folded");
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde convert: /dev/full: No space left on device");
	test_output_free(&o);
	ASSERT_OK(lstat("/dev/full", &st));
	ASSERT(S_ISCHR(st.st_mode));
}

/* A FIFO is written through: its reader gets the profile. */
TEST(convert_output_fifo_is_written_through)
{
	struct test_output o;
	struct stat st;
	const char *fifo = test_path("profile.fifo"), *got = test_path("got.folded");
	char *want = folded_of_split();

	ASSERT_OK(mkfifo(fifo, 0644));
	pid_t reader = fork();
	ASSERT(reader >= 0);
	if (reader == 0) {
		int in = open(fifo, O_RDONLY), out = open(got, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		char buf[4096];
		ssize_t n;
		while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
			if (write(out, buf, (size_t)n) != n)
				_exit(1);
		_exit(in < 0 || out < 0);
	}
	convert(&o, split_spool(), fifo, "--format folded");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	ASSERT_INT(test_wait(reader, 30), ==, 0);
	char *text = ASSERT_NOT_NULL(test_read_file(got, NULL));
	ASSERT_STR_EQ(text, want);
	ASSERT_OK(lstat(fifo, &st));
	ASSERT(S_ISFIFO(st.st_mode));
	free(text);
	free(want);
}

/* A symlink is followed: its target is replaced (and its old contents kept as
 * TARGET.old); the link stays a link. */
TEST(convert_output_symlink_writes_its_target)
{
	struct test_output o;
	struct stat st;
	char target[4200], old[4300], linked[4200];
	const char *link = test_path("latest.folded");
	char *want = folded_of_split();

	snprintf(target, sizeof(target), "%s", test_path("run1.folded"));
	snprintf(old, sizeof(old), "%s.old", target);
	test_write_file(target, "before\n", 7);
	ASSERT_OK(symlink("run1.folded", link));
	convert(&o, split_spool(), link, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	ASSERT_OK(lstat(link, &st));
	ASSERT(S_ISLNK(st.st_mode));
	ssize_t n = readlink(link, linked, sizeof(linked) - 1);
	ASSERT(n > 0);
	linked[n] = 0;
	ASSERT_STR_EQ(linked, "run1.folded");
	char *text = ASSERT_NOT_NULL(test_read_file(target, NULL));
	ASSERT_STR_EQ(text, want);
	free(text);
	text = ASSERT_NOT_NULL(test_read_file(old, NULL));
	ASSERT_STR_EQ(text, "before\n");
	free(text);
	free(want);
}

/* An existing regular file is replaced by a complete new one with its mode, and kept as
 * FILE.old (perf's perf.data.old); a failed conversion leaves both alone. */
TEST(convert_output_existing_file_is_kept_as_old)
{
	struct test_output o;
	struct stat st;
	char old[4200];
	const char *out = test_path("prof.folded");
	char *want = folded_of_split();

	snprintf(old, sizeof(old), "%s.old", out);
	test_write_file(out, "first\n", 6);
	ASSERT_OK(chmod(out, 0640));
	convert(&o, split_spool(), out, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	ASSERT_OK(stat(out, &st));
	ASSERT_INT(st.st_mode & 07777, ==, 0640);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_STR_EQ(text, want);
	free(text);
	text = ASSERT_NOT_NULL(test_read_file(old, NULL));
	ASSERT_STR_EQ(text, "first\n");
	free(text);

	/* Again: the previous output becomes the .old one. */
	convert(&o, split_spool(), out, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(old, NULL));
	ASSERT_STR_EQ(text, want);
	free(text);

	/* A failure replaces nothing and leaves no temporary file. */
	const char *garbage = test_path("garbage.spool");
	test_write_file(garbage, "not a spool at all", 18);
	test_write_file(out, "keep\n", 5);
	convert(&o, garbage, out, NULL);
	ASSERT_INT(o.status, ==, 1);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_STR_EQ(text, "keep\n");
	free(text);
	test_runf(&o, 10, "/bin/sh -c ls %s", test_tmpdir());
	ASSERT_NOT_CONTAINS(o.out, ".tmp");
	test_output_free(&o);
	free(want);
}

/* The flat% go tool pprof -top prints for function `name`, or -1. */
static double pprof_flat_pct(const char *top, const char *name)
{
	for (const char *l = top; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		size_t nl = strlen(name);
		/* rows end with the function name */
		if (len > nl && strncmp(l + len - nl, name, nl) == 0 && l[len - nl - 1] == ' ') {
			char flat[32];
			double pct;
			if (sscanf(l, "%31s %lf%%", flat, &pct) == 2)
				return pct;
		}
	}
	return -1;
}

/* go tool pprof -top on a pprof export, with -sample_index=INDEX unless NULL; fails the
 * test unless it ran. */
static void go_pprof_top_index(struct test_output *o, const char *pprof, const char *index)
{
	const char *go = export_which("go");
	char home[4200];

	if (!go)
		FAIL("go not found: golang-go is in scripts/packages");
	/* go wants a cache directory; keep it inside the test's own directory */
	snprintf(home, sizeof(home), "GOCACHE=%s", test_path("gocache"));
	putenv(home);
	char idx[64];
	snprintf(idx, sizeof(idx), "-sample_index=%s", index ? index : "");
	if (index)
		test_run(o, 120,
			 (const char *const[]){go, "tool", "pprof", "-top", idx, pprof, NULL});
	else
		test_run(o, 120, (const char *const[]){go, "tool", "pprof", "-top", pprof, NULL});
	if (o->status != 0)
		FAIL("go tool pprof failed (%d):\n%s%s", o->status, o->out, o->err);
}

static void go_pprof_top(struct test_output *o, const char *pprof)
{
	go_pprof_top_index(o, pprof, NULL);
}

/* One pprof file holds every metric: -sample_index picks off_cpu (the intervals, by state
 * and blocking function), wall (both) or cpu; the default follows --metric. */
TEST_TIMEOUT(convert_pprof_offcpu_sample_index_in_go_tool_pprof, 300)
{
	const char *spool = split_offcpu_spool();
	const char *out = test_path("offcpu.pb.gz"), *wall = test_path("wall.pb.gz");
	struct test_output o;

	convert(&o, spool, out, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	go_pprof_top_index(&o, out, "off_cpu");
	ASSERT_CONTAINS(o.out, "Type: off_cpu");
	ASSERT_CONTAINS(o.out, "400ms total");
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "[off-cpu: S]"), 75, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "[off-cpu: D]"), 25, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_hot"), -1, 0.01);
	test_output_free(&o);
	go_pprof_top_index(&o, out, "wall");
	ASSERT_CONTAINS(o.out, "500ms total");
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "[off-cpu: S]"), 60, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_hot"), 12, 0.01);
	test_output_free(&o);
	go_pprof_top_index(&o, out, "samples");
	ASSERT_CONTAINS(o.out, "100 total");
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_hot"), 60, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "[off-cpu: S]"), -1, 0.01);
	test_output_free(&o);
	/* the default is cpu time, unless --metric names another */
	go_pprof_top(&o, out);
	ASSERT_CONTAINS(o.out, "Type: cpu");
	ASSERT_CONTAINS(o.out, "100ms total");
	test_output_free(&o);
	convert(&o, spool, wall, "--metric wall");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	go_pprof_top(&o, wall);
	ASSERT_CONTAINS(o.out, "Type: wall");
	ASSERT_CONTAINS(o.out, "500ms total");
	test_output_free(&o);
}

/* The raw message, by protoc: four sample types, and every Sample's four values (on-CPU:
 * count, count x period, 0, the same time; off-CPU: 0, 0, its duration twice). */
TEST(convert_pprof_offcpu_values_by_protoc)
{
	const char *spool = split_offcpu_spool();
	const char *out = test_path("offcpu.pb.gz"), *raw = test_path("offcpu.pb");
	const char *protoc = export_which("protoc");
	struct test_output o;

	if (!protoc)
		FAIL("protoc not found: it is in scripts/packages (protobuf-compiler)");
	convert(&o, spool, out, "--metric off-cpu");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "gzip -dc < %s > %s && %s --decode_raw < %s", out, raw, protoc,
		 raw);
	test_run(&o, 60, (const char *const[]){export_which("sh"), "-c", cmd, NULL});
	ASSERT_INT(o.status, ==, 0);
	/* strings: the table is in first-use order, so the types come first */
	const char *want_types[] = {"\"samples\"",     "\"count\"",   "\"cpu\"",
				    "\"nanoseconds\"", "\"off_cpu\"", "\"wall\""};
	const char *at = o.out;
	for (size_t i = 0; i < sizeof(want_types) / sizeof(want_types[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "6: %s\n", want_types[i]);
		at = strstr(at, line);
		if (!at)
			FAIL("no %s in order in:\n%s", line, o.out);
	}
	/* default_sample_type (14) is string 5, off_cpu */
	ASSERT_CONTAINS(o.out, "\n14: 5\n");
	/* values (2) are packed varints: protoc shows them as bytes; the off-CPU samples are
	 * 0, 0, 300 ms and 0, 0, 100 ms (varints \200\306\206\217\001 and \200\302\327/) */
	ASSERT_CONTAINS(o.out,
			"2: \"\\000\\000\\200\\306\\206\\217\\001\\200\\306\\206\\217\\001\"");
	ASSERT_CONTAINS(o.out, "2: \"\\000\\000\\200\\302\\327/\\200\\302\\327/\"");
	test_output_free(&o);
}

/* --metric for the flame views: the SVG weighs and labels milliseconds, speedscope's
 * profile weighs nanoseconds with the intervals in time order among the samples. */
TEST(convert_svg_and_speedscope_take_metric)
{
	const char *spool = split_offcpu_spool();
	const char *svg = test_path("off.svg"), *json = test_path("wall.speedscope.json");
	const char *folded = test_path("wall.folded");
	struct test_output o;

	convert(&o, spool, svg, "--metric off-cpu");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, ">400.000 ms off-CPU</text>");
	ASSERT_CONTAINS(text, "<title>all (400.000 ms, 100.00%)</title>");
	ASSERT_CONTAINS(text, "<title>[off-cpu: S] (300.000 ms, 75.00%)</title>");
	ASSERT_CONTAINS(text, "<title>compute_cool (100.000 ms, 25.00%)</title>");
	ASSERT_NOT_CONTAINS(text, "compute_hot");
	free(text);
	convert(&o, spool, svg, "--metric cpu");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, ">100 samples</text>");
	ASSERT_CONTAINS(text, "<title>compute_hot (60 samples, 60.00%)</title>");
	ASSERT_NOT_CONTAINS(text, "off-cpu");
	free(text);

	convert(&o, spool, folded, "--metric wall");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	ASSERT_STR_EQ(text, "main;run;path_cool;compute_cool 10000\n"
			    "main;run;path_cool;compute_cool;[off-cpu: D] 100000\n"
			    "main;run;path_hot;compute_hot 60000\n"
			    "main;run;path_warm;compute_warm 30000\n"
			    "main;run;path_warm;compute_warm;[off-cpu: S] 300000\n");
	free(text);

	convert(&o, spool, json, "--metric wall");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	static const char code[] =
		"import json, sys\n"
		"d = json.load(open(sys.argv[1]))\n"
		"names = [f['name'] for f in d['shared']['frames']]\n"
		"p = d['profiles'][0]\n"
		"print(len(d['profiles']), p['unit'], p['endValue'], sum(p['weights']))\n"
		"print(' '.join('%s=%d' % (names[s[-1]], w) for s, w in "
		"list(zip(p['samples'], p['weights']))[-3:]))\n";
	const char *py = export_which("python3");
	if (!py)
		FAIL("python3 not found: it is in scripts/packages");
	test_run(&o, 60, (const char *const[]){py, "-c", code, json, NULL});
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "1 nanoseconds 500000000 500000000\n");
	/* the last samples, then the two intervals, in time order */
	ASSERT_CONTAINS(o.out, "=1000000 [off-cpu: S]=300000000 [off-cpu: D]=100000000\n");
	test_output_free(&o);
	convert(&o, spool, json, "--metric cpu");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(json, NULL));
	ASSERT_NOT_CONTAINS(text, "off-cpu");
	ASSERT_CONTAINS(text, "\"endValue\":100000000}");
	free(text);
}

/* The off-CPU intervals on the Perfetto timeline: per CPU, in time order, the sched_switch
 * out with the state's TASK_* bits, the sched_waking from the waker, the sched_switch back
 * in; the blocking stacks as PerfSamples at the switch-outs, next to the 100 samples. */
TEST(convert_perfetto_offcpu_sched_events)
{
	const char *spool = split_offcpu_spool(), *trace = test_path("offcpu.pftrace");
	struct test_output o;
	struct pft_trace t;
	size_t len;

	convert(&o, spool, trace, NULL);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.err, "");
	test_output_free(&o);
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(trace, &len));
	pft_decode(data, len, &t);
	free(data);
	ASSERT_INT(t.missing_interned, ==, 0);
	ASSERT_UINT(t.n_samples, ==, 102);
	const struct pft_sample *blocked[2] = {NULL, NULL};
	for (size_t i = 0; i < t.n_samples; i++)
		for (int k = 0; k < 2; k++)
			if (t.samples[i].ts == split_offcpu[k].switch_out_ns)
				blocked[k] = &t.samples[i];
	ASSERT_NOT_NULL(blocked[0]);
	ASSERT_NOT_NULL(blocked[1]);
	ASSERT_STR_EQ(blocked[0]->stack, "main;run;path_warm;compute_warm");
	ASSERT_STR_EQ(blocked[1]->stack, "main;run;path_cool;compute_cool");
	ASSERT_UINT(blocked[0]->cpu, ==, 0);
	ASSERT_UINT(blocked[1]->cpu, ==, 1);

	/* CPU 0: out asleep (TASK_INTERRUPTIBLE), woken by 4243 250 ms later; back in 50 ms
	 * after that on CPU 1, where its next switch-out is (a task does not change CPUs
	 * while it runs); out in D (TASK_UNINTERRUPTIBLE) 10 ms later, back in 100 ms later.
	 * Each CPU's first switch is written as it is: no run of no length before it. */
	ASSERT_INT(t.bundles, ==, 2);
	ASSERT_UINT(t.n_sched, ==, 5);
	const struct pft_sched *e = t.sched;
	ASSERT_UINT(e[0].cpu, ==, 0);
	ASSERT(!e[0].waking);
	ASSERT_UINT(e[0].ts, ==, 110000000);
	ASSERT_UINT(e[0].pid, ==, 4242);
	ASSERT_UINT(e[0].prev_pid, ==, 4242);
	ASSERT_STR_EQ(e[0].prev_comm, "split");
	ASSERT_INT(e[0].prev_state, ==, 1);
	ASSERT_UINT(e[0].next_pid, ==, 0);
	ASSERT_STR_EQ(e[0].next_comm, "swapper/0");
	ASSERT(e[1].waking);
	ASSERT_UINT(e[1].ts, ==, 360000000);
	ASSERT_UINT(e[1].pid, ==, 4243);
	ASSERT_UINT(e[1].woken_pid, ==, 4242);
	ASSERT_UINT(e[1].target_cpu, ==, 0);
	ASSERT_UINT(e[1].success, ==, 1);
	ASSERT(!e[2].waking);
	ASSERT_UINT(e[2].cpu, ==, 1);
	ASSERT_UINT(e[2].ts, ==, 410000000);
	ASSERT_UINT(e[2].prev_pid, ==, 0);
	ASSERT_INT(e[2].prev_state, ==, 0);
	ASSERT_UINT(e[2].next_pid, ==, 4242);
	ASSERT_STR_EQ(e[2].next_comm, "split");
	ASSERT_UINT(e[3].cpu, ==, 1);
	ASSERT_UINT(e[3].ts, ==, 420000000);
	ASSERT_UINT(e[3].prev_pid, ==, 4242);
	ASSERT_INT(e[3].prev_state, ==, 2);
	ASSERT_UINT(e[4].cpu, ==, 1);
	ASSERT_UINT(e[4].ts, ==, 520000000);
	ASSERT_UINT(e[4].next_pid, ==, 4242);
	pft_free(&t);
}

static int collect_packet(void *ctx, const uint8_t *pkt, size_t len)
{
	return sonde__pf_frame_standalone(ctx, pkt, len, 0, PF_STANDALONE_SEQUENCE_ID);
}

/* The data source's encoder options on the same spool: the sched events moved by the
 * BOOTTIME offset (the PerfSamples not), and a waker that is no thread of the stream
 * written as the idle task. */
TEST(convert_perfetto_offcpu_data_source_options)
{
	size_t len;
	uint8_t *spool = ASSERT_NOT_NULL((uint8_t *)test_read_file(split_offcpu_spool(), &len));
	struct buf out = BUF_INIT;
	struct pft_trace t;
	struct pf_enc_opts o = {.sink = collect_packet,
				.ctx = &out,
				.sched_boot_offset_ns = 1000000000,
				.wakers_recorded_only = true};
	struct pf_enc *e = ASSERT_NOT_NULL(sonde__pf_enc_new(&o));

	ASSERT_OK(sonde__pf_enc_feed(e, spool, len));
	ASSERT_INT(sonde__pf_enc_ended(e), ==, 1);
	sonde__pf_enc_free(e);
	free(spool);
	pft_decode(out.data, out.len, &t);
	sonde__buf_free(&out);
	ASSERT_UINT(t.n_sched, ==, 5);
	size_t at_out = 0;
	for (size_t i = 0; i < t.n_samples; i++)
		at_out += t.samples[i].ts == split_offcpu[0].switch_out_ns;
	ASSERT_UINT(at_out, ==, 1);
	ASSERT_UINT(t.sched[0].ts, ==, 1110000000);
	ASSERT(t.sched[1].waking);
	ASSERT_UINT(t.sched[1].ts, ==, 1360000000);
	ASSERT_UINT(t.sched[1].pid, ==, 0); /* 4243 is no thread of the spool */
	ASSERT_UINT(t.sched[1].woken_pid, ==, 4242);
	ASSERT_UINT(t.sched[2].ts, ==, 1410000000);
	ASSERT_UINT(t.sched[4].ts, ==, 1520000000);
	pft_free(&t);
}

TEST(convert_metric_errors)
{
	const char *spool = split_spool();
	struct test_output o;

	convert(&o, spool, test_path("x.svg"), "--metric walls");
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde convert: --metric wants cpu, off-cpu or wall, not 'walls'\n");
	test_output_free(&o);
	/* a spool without intervals converts, into an empty off-CPU profile, and says why */
	convert(&o, spool, test_path("x.svg"), "--metric off-cpu");
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "no off-CPU intervals");
	ASSERT_CONTAINS(o.err, "record with --off-cpu");
	test_output_free(&o);
	test_runf(&o, 60, "%s convert --diff %s %s -o %s --metric wall", test_bin("sonde"), spool,
		  spool, test_path("d.svg"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde convert: --diff compares on-CPU samples: no --metric wall\n");
	test_output_free(&o);
}

TEST_TIMEOUT(convert_pprof_reads_in_go_tool_pprof, 200)
{
	const char *spool = split_spool();
	const char *out = test_path("cpu.pb.gz");
	struct test_output o;

	convert(&o, spool, out, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	go_pprof_top(&o, out);
	ASSERT_CONTAINS(o.out, "Type: cpu");
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_hot"), 60, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_warm"), 30, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_cool"), 10, 0.01);
	ASSERT_CONTAINS(o.out, "100ms total");
	test_output_free(&o);
}

TEST_TIMEOUT(convert_svg_and_speedscope_in_chromium, 600)
{
	const char *spool = split_spool();
	const char *svg = test_path("split.svg");
	const char *json = test_path("split.speedscope.json");
	char url[4200];
	struct test_output o;

	convert(&o, spool, svg, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	snprintf(url, sizeof(url), "file://%s?s=compute_hot", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_CONTAINS(o.out, ">Matched: 60.0% (1 frame)<");
	/* the title defaults to the spool's name */
	ASSERT_CONTAINS(o.out, "split.spool</text>");
	test_output_free(&o);

	convert(&o, spool, json, "--title split-run");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	export_check_speedscope(json, "split (pid 4242, tid 4242)");
}

TEST_TIMEOUT(convert_no_symbolize_pprof_symbolizes_in_go_tool_pprof, 200)
{
	const char *spool = split_spool();
	const char *out = test_path("raw.pb.gz");
	struct test_output o;

	/* only addresses and mappings: pprof finds the binary by its mapping and symbolizes
	 * the addresses itself, which checks that they are the real virtual addresses */
	convert(&o, spool, out, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	go_pprof_top(&o, out);
	if (pprof_flat_pct(o.out, "compute_hot") < 0)
		FAIL("no compute_hot in:\n%s\n%s", o.out, o.err);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_hot"), 60, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_warm"), 30, 0.01);
	ASSERT_DOUBLE_NEAR(pprof_flat_pct(o.out, "compute_cool"), 10, 0.01);
	test_output_free(&o);
}

/* Share of samples (in %) whose folded stack contains frame `name`. */
static double folded_pct(const char *folded, const char *name)
{
	uint64_t with = 0, total = 0;
	size_t nl = strlen(name);

	for (const char *l = folded; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = strchr(l, '\n'), *sp = end;
		while (sp > l && sp[-1] != ' ')
			sp--;
		uint64_t n = strtoull(sp, NULL, 10);
		total += n;
		for (const char *p = l; p && p < sp; p = memchr(p, ';', (size_t)(sp - p))) {
			p += *p == ';';
			if (strncmp(p, name, nl) == 0 && (p[nl] == ';' || p[nl] == ' ')) {
				with += n;
				break;
			}
		}
	}
	return total ? 100.0 * (double)with / (double)total : -1;
}

/* The cum% go tool pprof -top prints for function `name`, or -1. */
static double pprof_cum_pct(const char *top, const char *name)
{
	for (const char *l = top; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		size_t nl = strlen(name);
		char c1[32], c2[32], c3[32], c4[32];
		double pct;
		if (len > nl && strncmp(l + len - nl, name, nl) == 0 && l[len - nl - 1] == ' ' &&
		    sscanf(l, "%31s %31s %31s %31s %lf%%", c1, c2, c3, c4, &pct) == 5)
			return pct;
	}
	return -1;
}

/* The self% sonde report prints for function `name` (its first table), or -1. */
static double report_self_pct(const char *report, const char *name)
{
	char key[128];
	double pct = -1;

	snprintf(key, sizeof(key), "  %s [", name);
	const char *row = strstr(report, key);
	if (!row)
		return -1;
	while (row > report && row[-1] != '\n')
		row--;
	if (sscanf(row, "%lf%%", &pct) != 1)
		return -1;
	return pct;
}

/* One recording of split into rec.spool; adds the spool's counts (report --folded). */
static void record_split_once(void *ctx, int seconds, struct split_counts *add)
{
	struct test_output o;

	/* user space only: the counts below take the compute functions as the leaves of their
	 * samples, and a sample in the kernel (a timer interrupt, a page fault) would put a
	 * [kernel] leaf under them (test_kernel.c covers those) */
	test_runf(&o, 60, "%s record -q --no-kernel -F 999 -o %s -- %s %d", test_bin("sonde"),
		  test_path("rec.spool"), test_prog("split"), seconds);
	if (o.status != 0)
		FAIL("sonde record failed (%d): %s", o.status, o.err);
	test_output_free(&o);
	split_add_spool(add, test_path("rec.spool"), "");
	*(struct split_counts *)ctx = *add;
}

TEST_TIMEOUT(convert_recording_of_split_to_every_format, 600)
{
	static const char *const funcs[] = {"compute_hot", "compute_warm", "compute_cool"};
	/* split's known shape, judged over recordings (split_util.h) */
	static const struct split_judge judge = {.tolerance = 8.0, .seconds = 2};
	struct split_counts acc, last;
	struct test_output o;

	test_require_perf();
	split_settle(&judge, record_split_once, &last, &acc, 1);
	/* the exports of the last recording */
	const char *spool = test_path("rec.spool");
	const char *pprof = test_path("rec.pb.gz"), *folded = test_path("rec.folded");
	convert(&o, spool, pprof, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	convert(&o, spool, folded, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	struct test_output rep;
	test_runf(&rep, 120, "%s report %s", test_bin("sonde"), spool);
	if (rep.status != 0)
		FAIL("sonde report failed (%d): %s", rep.status, rep.err);

	go_pprof_top(&o, pprof);
	for (int i = 0; i < 3; i++) {
		double go_flat = pprof_flat_pct(o.out, funcs[i]);
		double go_cum = pprof_cum_pct(o.out, funcs[i]);
		double report = report_self_pct(rep.out, funcs[i]);
		/* the same samples counted four ways: by go tool pprof from the pprof export,
		 * by sonde report from the spool, from the folded export and from the spool's
		 * folded stacks */
		ASSERT_DOUBLE_NEAR(go_flat, report, 1.0);
		ASSERT_DOUBLE_NEAR(go_cum, folded_pct(text, funcs[i]), 1.0);
		ASSERT_DOUBLE_NEAR(report, split_pct(&last, i, false), 0.0051);
	}
	test_output_free(&o);
	test_output_free(&rep);
	free(text);

	/* speedscope and the SVG read the same recording in the browser */
	const char *svg = test_path("rec.svg"), *json = test_path("rec.json");
	char url[4200];
	convert(&o, spool, svg, NULL);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	snprintf(url, sizeof(url), "file://%s?s=^compute_hot$", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_CONTAINS(o.out, ">Matched: ");
	double matched = -1;
	const char *m = strstr(o.out, ">Matched: ");
	ASSERT_INT(sscanf(m, ">Matched: %lf%%", &matched), ==, 1);
	ASSERT_DOUBLE_NEAR(matched, split_pct(&last, 0, false), 0.051);
	test_output_free(&o);
	convert(&o, spool, json, NULL);
	if (o.status != 0)
		FAIL("sonde convert failed (%d): %s", o.status, o.err);
	test_output_free(&o);
	export_check_speedscope(json, "split (pid ");
}

TEST(convert_diff_flame_graph_red_grew_blue_shrank)
{
	struct test_output o;
	/* before: 60/30/10 of 100; after: 30/30/40 of 200 (scaled: 120/60/20 against) */
	const char *before = split_spool_mix("before.spool", 6, 3, 100);
	const char *after = split_spool_mix("after.spool", 3, 3, 200);
	const char *svg = test_path("diff.svg"), *folded = test_path("diff.folded");

	test_runf(&o, 60, "%s convert --diff %s %s -o %s", test_bin("sonde"), before, after,
		  folded);
	ASSERT_INT(o.status, ==, 0);
	char *text = test_read_file(folded, NULL);
	ASSERT_STR_EQ(text, "main;run;path_cool;compute_cool 20 80\n"
			    "main;run;path_hot;compute_hot 120 60\n"
			    "main;run;path_warm;compute_warm 60 60\n");
	free(text);
	test_output_free(&o);

	test_runf(&o, 60, "%s convert --diff %s %s -o %s --title T", test_bin("sonde"), before,
		  after, svg);
	ASSERT_INT(o.status, ==, 0);
	text = test_read_file(svg, NULL);
	/* widths from after; the largest change is full red or blue, no change white */
	ASSERT_CONTAINS(text, "<title>compute_cool [self +30.00%] (80 samples, 40.00%)</title>");
	ASSERT_CONTAINS(text, "<title>compute_hot [self -30.00%] (60 samples, 30.00%)</title>");
	ASSERT_CONTAINS(text, "<title>compute_warm [self +0.00%] (60 samples, 30.00%)</title>");
	ASSERT_CONTAINS(text, "<title>all (200 samples, 100.00%)</title>");
	const char *cool = strstr(text, "compute_cool [self");
	const char *hot = strstr(text, "compute_hot [self");
	const char *warm = strstr(text, "compute_warm [self");
	ASSERT(strstr(cool, "fill=\"rgb(255,0,0)\"") == strstr(cool, "fill="));
	ASSERT(strstr(hot, "fill=\"rgb(0,0,255)\"") == strstr(hot, "fill="));
	ASSERT(strstr(warm, "fill=\"rgb(255,255,255)\"") == strstr(warm, "fill="));
	ASSERT_CONTAINS(text, "<text id=\"title\" x=\"600\" y=\"24\">T</text>");
	free(text);
	test_output_free(&o);

	test_runf(&o, 10, "%s convert --diff %s -o %s", test_bin("sonde"), before, svg);
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--diff takes two spools");
	test_output_free(&o);
	test_runf(&o, 10, "%s convert --diff %s %s -o %s", test_bin("sonde"), before, after,
		  test_path("d.pb.gz"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--diff writes svg or folded");
	test_output_free(&o);
}

TEST(convert_input_option_default_and_empty_profile)
{
	struct test_output o;
	const char *spool = split_spool();

	test_runf(&o, 60, "%s convert -i %s -o -", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "cannot tell the format from '-'");
	test_output_free(&o);
	test_runf(&o, 60, "%s convert --input %s --format folded -o -", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "main;run;path_hot;compute_hot 60\n");
	test_output_free(&o);
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "cd %s && cp %s sonde.spool && %s convert -f folded -o -",
		 test_tmpdir(), spool, test_bin("sonde"));
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 60, sh);
	ASSERT_CONTAINS(o.out, "main;run;path_hot;compute_hot 60\n");
	test_output_free(&o);

	const char *empty = split_spool_mix("empty.spool", 6, 3, 0);
	test_runf(&o, 60, "%s convert %s -o %s", test_bin("sonde"), empty, test_path("e.svg"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "no samples, so ");
	ASSERT_CONTAINS(o.err, "is an empty profile: the targets used no CPU");
	test_output_free(&o);
	/* a recording with samples the filters all leave out: the filters are why */
	test_runf(&o, 60, "%s convert --pid 1 %s -o %s", test_bin("sonde"), spool,
		  test_path("f.folded"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "nothing matches --pid, --tid, --comm, --cpu or --time");
	test_output_free(&o);
	/* a difference of nothing is an empty graph, said */
	test_runf(&o, 60, "%s convert --diff %s %s -o %s", test_bin("sonde"), empty, empty,
		  test_path("e-diff.svg"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "no samples: nothing on this side of the difference");
	test_output_free(&o);
}

TEST(convert_progress_only_when_asked_or_on_a_terminal)
{
	struct test_output o;
	const char *spool = split_spool();
	char cmd[4096];

	snprintf(cmd, sizeof(cmd), "SONDE_PROGRESS=1 %s convert %s -o %s", test_bin("sonde"), spool,
		 test_path("p.svg"));
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 60, sh);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "\rsonde convert: reading and symbolizing ");
	ASSERT_CONTAINS(o.err, "\rsonde convert: writing ");
	size_t n = strlen(o.err);
	ASSERT(n >= 4 && !strcmp(o.err + n - 4, "\r\033[K"));
	test_output_free(&o);
	convert(&o, spool, test_path("q.svg"), NULL);
	ASSERT_STR_EQ(o.err, "");
	test_output_free(&o);
}

/* The samples in a folded file: the sum of its counts. */
static uint64_t folded_total(const char *text)
{
	uint64_t n = 0;

	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n'), *sp = nl ? nl : l + strlen(l);
		while (sp > l && *sp != ' ')
			sp--;
		n += strtoull(sp + 1, NULL, 10);
		if (!nl)
			break;
		l = nl + 1;
	}
	return n;
}

/* --pid/--tid/--comm/--cpu/--time select samples as report's do, in every format: the
 * fixture's three threads (main and worker of process 100, then "other" after its exec)
 * split its samples between them, and an SVG of one keeps only its frames. */
TEST(convert_filters_as_report_does)
{
	const char *spool = test_path("small.spool");
	const char *out = test_path("f.folded");
	const char *comms[] = {"main", "worker", "other"};
	struct buf b = BUF_INIT;
	struct test_output o;
	uint64_t all, sum = 0;

	spool_fixture_small(&b, 40, 1);
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	convert(&o, spool, out, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	all = folded_total(text);
	free(text);
	ASSERT_UINT(all, >, 0);
	for (int i = 0; i < 3; i++) {
		char extra[64];
		snprintf(extra, sizeof(extra), "--no-symbolize --comm %s", comms[i]);
		convert(&o, spool, out, extra);
		ASSERT_INT(o.status, ==, 0);
		test_output_free(&o);
		text = ASSERT_NOT_NULL(test_read_file(out, NULL));
		uint64_t n = folded_total(text);
		ASSERT_UINT(n, >, 0);
		ASSERT_UINT(n, <, all);
		sum += n;
		free(text);
	}
	ASSERT_UINT(sum, ==, all);
	/* the same threads by id, and nothing at all for a pid not recorded */
	convert(&o, spool, out, "--no-symbolize --tid 101");
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	uint64_t by_tid = folded_total(text);
	free(text);
	convert(&o, spool, out, "--no-symbolize --comm worker");
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_UINT(folded_total(text), ==, by_tid);
	free(text);
	convert(&o, spool, out, "--no-symbolize --pid 100,7 --time 0,");
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_UINT(folded_total(text), ==, all);
	free(text);
	convert(&o, spool, out, "--no-symbolize --pid 7");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_STR_EQ(text, "");
	free(text);
	/* an SVG of "other" has its program's frames and none of the first program's */
	const char *svg = test_path("f.svg");
	convert(&o, spool, svg, "--no-symbolize --comm other");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "other+0x4000");
	ASSERT(strstr(text, "prog+0x") == NULL);
	free(text);
	convert(&o, spool, svg, "--no-symbolize");
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "prog+0x3000");
	free(text);
	/* report's syntax and errors */
	convert(&o, spool, out, "--time x");
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--time wants START,END");
	test_output_free(&o);
	/* the Perfetto export takes the filters (test_export_perfetto.c), not roots */
	convert(&o, spool, test_path("f.pftrace"), "--folded-roots process");
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--folded-roots");
	test_output_free(&o);
}

/* convert keeps what report keeps, through the readers' one filter (include/sonde/view.h):
 * the same samples for every filter, to the nanosecond at a window's edges (the first
 * sample is 1001001 ns after the start, the others about 1 ms apart). */
TEST(convert_and_report_keep_the_same_samples)
{
	static const char *const filters[] = {
		"--time 0.001001001,0.010",    "--time ,0.005005005",
		"--time 0.0200025,",	       "--time 0.001001,0.001001001",
		"--comm worker --time 0.002,", "--tid 100 --time 0.004,0.030",
		"--pid 100 --cpu 0",	       "--comm main,other"};
	const char *spool = test_path("same.spool");
	const char *out = test_path("same.folded");
	struct buf b = BUF_INIT;
	struct test_output o;
	uint64_t all = 0;
	bool some_cut = false;

	spool_fixture_small(&b, 40, 1);
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	all = folded_total(o.out);
	test_output_free(&o);
	for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
		test_runf(&o, 60, "%s report --folded %s %s", test_bin("sonde"), filters[i], spool);
		ASSERT_INT(o.status, ==, 0);
		uint64_t by_report = folded_total(o.out);
		test_output_free(&o);
		convert(&o, spool, out, filters[i]);
		ASSERT_INT(o.status, ==, 0);
		test_output_free(&o);
		char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
		/* convert marks a truncated stack, and an empty one that was cut is a line of
		 * its own there: report has no line for an empty stack */
		const char *lone = strstr(text, "[truncated] ");
		uint64_t by_convert =
			folded_total(text) - (lone && (lone == text || lone[-1] == '\n')
						      ? strtoull(lone + 12, NULL, 10)
						      : 0);
		printf("%s: report %" PRIu64 ", convert %" PRIu64 " of %" PRIu64 "\n", filters[i],
		       by_report, by_convert, all);
		ASSERT_UINT(by_convert, ==, by_report);
		some_cut |= by_report > 0 && by_report < all;
		free(text);
	}
	ASSERT(some_cut);
}

/* pprof takes its first mapping for the main binary (`go tool pprof` prints it as
 * "File:"): in a machine-wide recording that is the busiest process's executable, not
 * the [vdso] of the process the recording met first. */
TEST_TIMEOUT(convert_pprof_main_binary_is_the_busiest_process_executable, 200)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 5000000000ULL, 1001001};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_module_def vdso = {
		.pid = 10, .flags = SONDE_MODULE_EXEC, .start = 0x7ffd0000, .end = 0x7ffd2000,
		.path = "[vdso]"};
	struct sonde_spool_module_def libc = {
		.pid = 20, .flags = SONDE_MODULE_EXEC, .start = 0x7f0000000000ULL,
		.end = 0x7f0000100000ULL, .path = "/lib/libc.so.6"};
	struct sonde_spool_module_def exe = {
		.pid = 20, .flags = SONDE_MODULE_EXEC, .start = 0x555500000000ULL,
		.end = 0x555500100000ULL, .path = "/opt/busy/busyapp"};
	uint32_t t_idle, t_busy, m_vdso, m_libc, m_exe;
	uint64_t t = 5000000000ULL;
	struct test_output o;

	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 10, 10, "idler", &t_idle));
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &vdso, &m_vdso));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 20, 20, "busyapp", &t_busy));
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &libc, &m_libc));
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &exe, &m_exe));
	for (int i = 0; i < 50; i++) {
		struct sonde_spool_frame busy[] = {{m_libc, 0x1000}, {m_exe, 0x2000}};
		struct sonde_spool_frame idle[] = {{m_vdso, 0x100}};
		t += 1001001;
		if (i % 10 == 0)
			ASSERT_OK(sonde_spool_writer__add_sample(w, t, t_idle, idle, 1, 0));
		else
			ASSERT_OK(sonde_spool_writer__add_sample(w, t, t_busy, busy, 2, 0));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *spool = test_path("machine.spool"), *out = test_path("machine.pb.gz");
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	convert(&o, spool, out, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	go_pprof_top(&o, out);
	ASSERT_CONTAINS(o.out, "File: busyapp\n");
	test_output_free(&o);
}

/* Speedscope of several processes (a machine-wide recording): one profile per process,
 * its threads merged, the heaviest first and open. */
TEST(convert_speedscope_has_a_profile_per_process_heaviest_first)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 5000000000ULL, 1001001};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_module_def exe = {
		.pid = 20, .flags = SONDE_MODULE_EXEC, .start = 0x555500000000ULL,
		.end = 0x555500100000ULL, .path = "/opt/busy/busyapp"};
	uint32_t light, light2, busy, busy2, m;
	uint64_t t = 5000000000ULL;
	struct test_output o;

	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 10, 10, "light", &light));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 10, 11, "light-worker", &light2));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 20, 21, "busy-worker", &busy2));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 20, 20, "busyapp", &busy));
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &exe, &m));
	exe.pid = 10;
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &exe, &m));
	for (int i = 0; i < 40; i++) {
		struct sonde_spool_frame st[] = {{m, 0x2000 + (uint64_t)(i % 3) * 0x100}};
		/* halfway, light's main thread execs another program: the process is named
		 * after it, as the other readers name it */
		if (i == 20)
			ASSERT_OK(sonde_spool_writer__add_thread(w, t, 10, 10, "lightexec", &light));
		uint32_t th[] = {light, light2, busy, busy2, busy, busy2, busy, busy2};
		t += 1001001;
		ASSERT_OK(sonde_spool_writer__add_sample(w, t, th[i % 8], st, 1, 0));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *spool = test_path("procs.spool"), *out = test_path("procs.json");
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	convert(&o, spool, out, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *json = ASSERT_NOT_NULL(test_read_file(out, NULL));
	const char *profiles = ASSERT_NOT_NULL(strstr(json, "\"profiles\":["));
	const char *first = ASSERT_NOT_NULL(strstr(profiles, "\"name\":\""));
	ASSERT(strncmp(first, "\"name\":\"busyapp (pid 20)\"", 25) == 0);
	const char *second = ASSERT_NOT_NULL(strstr(first + 1, "\"name\":\""));
	ASSERT(strncmp(second, "\"name\":\"lightexec (pid 10)\"", 27) == 0);
	ASSERT(strstr(second + 1, "\"name\":\"") == NULL);
	ASSERT_CONTAINS(json, "\"activeProfileIndex\":0}");
	free(json);
}

/* --folded-roots hangs every stack under its process's or thread's frame, as report's
 * does, in the flame views too. */
TEST(convert_folded_roots_process_and_thread)
{
	const char *spool = test_path("roots.spool"), *out = test_path("roots.folded");
	struct buf b = BUF_INIT;
	struct test_output o;

	spool_fixture_small(&b, 40, 1);
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	convert(&o, spool, out, "--no-symbolize --folded-roots thread");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	int lines = 0;
	for (const char *l = text; *l; lines++) {
		if (strncmp(l, "main-100/100;", 13) && strncmp(l, "worker-100/101;", 15) &&
		    strncmp(l, "other-100/100;", 14) && strncmp(l, "main-100/100 ", 13) &&
		    strncmp(l, "other-100/100 ", 14))
			FAIL("a line without its thread's root: %s", l);
		const char *nl = strchr(l, '\n');
		if (!nl)
			break;
		l = nl + 1;
	}
	ASSERT_INT(lines, >, 3);
	ASSERT_CONTAINS(text, "worker-100/101;");
	free(text);
	convert(&o, spool, out, "--no-symbolize --folded-roots process");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	/* named as the process was when it ran: main, then other after its exec */
	ASSERT_CONTAINS(text, "other-100;");
	for (const char *l = text; *l;) {
		if (strncmp(l, "main-100;", 9) && strncmp(l, "main-100 ", 9) &&
		    strncmp(l, "other-100;", 10) && strncmp(l, "other-100 ", 10))
			FAIL("a line without its process's root: %s", l);
		const char *nl = strchr(l, '\n');
		if (!nl)
			break;
		l = nl + 1;
	}
	free(text);
	const char *svg = test_path("roots.svg");
	convert(&o, spool, svg, "--no-symbolize --folded-roots process");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "main-100");
	free(text);
	convert(&o, spool, out, "--folded-roots x");
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--folded-roots wants process, thread or none");
	test_output_free(&o);
}

/* A machine-wide recording in small: "light" (pid 10, 6 samples), "busyapp" (pid 20, 24
 * samples over two threads) and a kernel thread "kworker/0:1" (pid 30: no module of its
 * own, kernel frames only, 10 samples). Writes it to test_path(name). */
static const char *machine_spool(const char *name)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 5000000000ULL, 1001001};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_module_def kernel = {
		.pid = 0, .flags = SONDE_MODULE_EXEC | SONDE_MODULE_KERNEL,
		.start = 0xffffffff81000000ULL, .end = 0xffffffff82000000ULL,
		.path = "[kernel.kallsyms]"};
	struct sonde_spool_module_def exe = {
		.pid = 20, .flags = SONDE_MODULE_EXEC, .start = 0x555500000000ULL,
		.end = 0x555500100000ULL, .path = "/opt/busy/busyapp"};
	uint32_t light, busy, busy2, kw, mk, mb, ml;
	uint64_t t = 5000000000ULL;

	ASSERT_OK(sonde_spool_writer__add_module(w, t, &kernel, &mk));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 10, 10, "light", &light));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 30, 30, "kworker/0:1", &kw));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 20, 20, "busyapp", &busy));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 20, 21, "busy-worker", &busy2));
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &exe, &mb));
	exe.pid = 10;
	exe.path = "/usr/bin/light";
	ASSERT_OK(sonde_spool_writer__add_module(w, t, &exe, &ml));
	for (int i = 0; i < 40; i++) {
		struct sonde_spool_frame user[] = {{0, 0}, {0, 0x2000}};
		struct sonde_spool_frame kern[] = {{mk, 0x1000}, {mk, 0x2000}};
		uint32_t th = i % 4 == 0 ? kw : i % 4 == 1 ? busy : i % 4 == 2 ? busy2 : light;
		if (th == light && i % 8 == 3 && i > 8) /* light keeps 6 of the 40 */
			th = busy2;
		user[0] = (struct sonde_spool_frame){th == light ? ml : mb,
						     0x1000 + (uint64_t)(i % 2) * 0x100};
		user[1].module = user[0].module;
		t += 1001001;
		if (th == kw)
			ASSERT_OK(sonde_spool_writer__add_sample(w, t, th, kern, 2, 0));
		else
			ASSERT_OK(sonde_spool_writer__add_sample(w, t, th, user, 2, 0));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *spool = test_path(name);
	test_write_file(spool, b.data, b.len);
	sonde__buf_free(&b);
	return spool;
}

/* The y of the rect of the frame whose tooltip starts with title, or -1. */
static int frame_y(const char *svg, const char *title)
{
	char key[128];
	int y = -1;

	snprintf(key, sizeof(key), "<title>%s", title);
	const char *t = strstr(svg, key);
	const char *ya = t ? strstr(t, " y=\"") : NULL;
	if (!ya || sscanf(ya, " y=\"%d", &y) != 1)
		return -1;
	return y;
}

static double frame_x(const char *svg, const char *title)
{
	char key[128];
	double x = -1;

	snprintf(key, sizeof(key), "<title>%s", title);
	const char *t = strstr(svg, key);
	const char *xa = t ? strstr(t, "<rect x=\"") : NULL;
	if (!xa || sscanf(xa, "<rect x=\"%lf", &x) != 1)
		return -1;
	return x;
}

/* A machine-wide SVG opens on its processes: an icicle (root at the top, under the title),
 * a root frame per process, the busiest at the left; the kernel thread is left out and the
 * subtitle says how much that was. */
TEST(convert_machine_wide_svg_is_an_icicle_busiest_process_first)
{
	const char *spool = machine_spool("machine.spool"), *svg = test_path("machine.svg");
	struct test_output o;

	convert(&o, spool, svg, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "<g id=\"frames\" data-inverted=\"1\">");
	/* the root right under the title and buttons (48 px), the processes below it */
	ASSERT_INT(frame_y(text, "all ("), ==, 48);
	ASSERT_CONTAINS(text, "<title>busyapp-20 (24 samples, 80.00%)</title>");
	ASSERT_CONTAINS(text, "<title>light-10 (6 samples, 20.00%)</title>");
	ASSERT_INT(frame_y(text, "busyapp-20 ("), ==, 64);
	ASSERT_INT(frame_y(text, "light-10 ("), ==, 64);
	ASSERT_DOUBLE_NEAR(frame_x(text, "busyapp-20 ("), 10, 0.001);
	ASSERT_DOUBLE_NEAR(frame_x(text, "light-10 ("), 10 + 1180 * 0.8, 0.001);
	/* callees below their callers */
	ASSERT_INT(frame_y(text, "busyapp+0x2000 ("), ==, 80);
	ASSERT_NOT_CONTAINS(text, "kworker");
	ASSERT_NOT_CONTAINS(text, "kallsyms");
	ASSERT_CONTAINS(text, ">30 samples; idle and kernel threads hidden: 10 samples, 25.0% "
			      "of all samples</text>");
	free(text);

	/* shown, they are one node after the processes, the kernel thread under it */
	convert(&o, spool, svg, "--no-symbolize --no-hide-idle");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, ">40 samples</text>");
	ASSERT_CONTAINS(text, "<title>[idle and kernel threads] (10 samples, 25.00%)</title>");
	ASSERT_INT(frame_y(text, "[idle and kernel threads] ("), ==, 64);
	ASSERT_INT(frame_y(text, "kworker/0:1-30 ("), ==, 80);
	ASSERT_DOUBLE_NEAR(frame_x(text, "busyapp-20 ("), 10, 0.001);
	ASSERT_DOUBLE_NEAR(frame_x(text, "[idle and kernel threads] ("), 10 + 1180 * 0.75, 0.001);
	free(text);

	/* a flame graph when asked: the root at the bottom */
	convert(&o, spool, svg, "--no-symbolize --no-inverted");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "<g id=\"frames\">");
	int height = 0;
	ASSERT(sscanf(ASSERT_NOT_NULL(strstr(text, "height=\"")), "height=\"%d", &height) == 1);
	ASSERT_INT(frame_y(text, "all ("), ==, height - 34 - 16);
	ASSERT_INT(frame_y(text, "busyapp-20 ("), ==, height - 34 - 32);
	free(text);
}

/* --hide-idle leaves the idle task and kernel threads out of any view and says so; a
 * filter that keeps one process draws it as before, without a root frame or icicle. */
TEST(convert_hide_idle_and_one_process_of_a_machine_wide_recording)
{
	const char *spool = machine_spool("machine.spool"), *svg = test_path("machine.svg");
	struct test_output o;

	/* without process roots, and under a time metric where it is not the default */
	convert(&o, spool, svg, "--no-symbolize --folded-roots none --metric wall --hide-idle");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_NOT_CONTAINS(text, "kallsyms");
	ASSERT_NOT_CONTAINS(text, "busyapp-20");
	ASSERT_CONTAINS(text, "idle and kernel threads hidden: 10.010 ms, 25.0% of the time");
	free(text);
	convert(&o, spool, svg, "--no-symbolize --folded-roots none --metric wall");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "[kernel.kallsyms]+0x2000");
	ASSERT_NOT_CONTAINS(text, "hidden");
	free(text);

	/* --comm keeps that process only: its own frames, as a single process's graph */
	convert(&o, spool, svg, "--no-symbolize --comm light");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "<title>all (6 samples, 100.00%)</title>");
	ASSERT_CONTAINS(text, "<title>light+0x2000 (6 samples");
	ASSERT_NOT_CONTAINS(text, "busyapp");
	ASSERT_NOT_CONTAINS(text, "light-10");
	ASSERT_CONTAINS(text, "<g id=\"frames\">");
	free(text);
	/* two processes chosen: both under their roots, the busier first */
	convert(&o, spool, svg, "--no-symbolize --comm light,busyapp,busy-worker");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_DOUBLE_NEAR(frame_x(text, "busyapp-20 ("), 10, 0.001);
	ASSERT_DOUBLE_NEAR(frame_x(text, "light-10 ("), 10 + 1180 * 0.8, 0.001);
	ASSERT_NOT_CONTAINS(text, "hidden");
	free(text);
	/* the option's spelling */
	convert(&o, spool, svg, "--hide-idle=1");
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

/* The names of a speedscope file's profiles, in order, separated by '|'. */
static void speedscope_names(const char *json, char *out, size_t len)
{
	const char *p = ASSERT_NOT_NULL(strstr(json, "\"profiles\":["));

	out[0] = 0;
	while ((p = strstr(p, "\"name\":\""))) {
		p += 8;
		const char *end = ASSERT_NOT_NULL(strchr(p, '"'));
		size_t n = strlen(out);
		snprintf(out + n, len - n, "%s%.*s", n ? "|" : "", (int)(end - p), p);
		p = end;
	}
}

/* Speedscope of a machine-wide recording opens on its busiest process, or on the one
 * --pid or --comm chose (its threads then, as for one program, the busiest open). */
TEST(convert_speedscope_of_a_machine_wide_recording_busiest_first_or_chosen)
{
	const char *spool = machine_spool("machine.spool"), *out = test_path("machine.json");
	struct test_output o;
	char names[512];

	convert(&o, spool, out, "--no-symbolize");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *json = ASSERT_NOT_NULL(test_read_file(out, NULL));
	speedscope_names(json, names, sizeof(names));
	ASSERT_STR_EQ(names, "busyapp (pid 20)|kworker/0:1 (pid 30)|light (pid 10)");
	ASSERT_CONTAINS(json, "\"activeProfileIndex\":0}");
	free(json);
	convert(&o, spool, out, "--no-symbolize --comm light");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	json = ASSERT_NOT_NULL(test_read_file(out, NULL));
	speedscope_names(json, names, sizeof(names));
	ASSERT_STR_EQ(names, "light (pid 10, tid 10)");
	free(json);
	convert(&o, spool, out, "--no-symbolize --pid 20");
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	json = ASSERT_NOT_NULL(test_read_file(out, NULL));
	speedscope_names(json, names, sizeof(names));
	/* threads in their order, the busiest (14 samples to 10) open */
	ASSERT_STR_EQ(names, "busyapp (pid 20, tid 20)|busy-worker (pid 20, tid 21)");
	ASSERT_CONTAINS(json, "\"activeProfileIndex\":1}");
	free(json);
}
