/* sonde top, end to end: the plain-text view of split, following a file `sonde record` is
 * writing, the pid/tid filters, Ctrl-C, and the terminal view driven through a pty. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "../unit/spool_fixture.h"

/* The last table of a plain-text output (from its "sonde top:" line on). */
static const char *last_table(const char *out)
{
	const char *t = NULL;

	for (const char *p = out; (p = strstr(p, "sonde top:")); p++)
		t = p;
	ASSERT_NOT_NULL(t);
	return t;
}

/* The SELF% and TOTAL% of function `name` in the table starting at t (up to the next
 * blank line); false when it is not listed. */
static bool row_of(const char *t, const char *name, double *self, double *total)
{
	const char *end = strstr(t, "\n\n");

	for (const char *p = strchr(t, '\n'); p && (!end || p < end); p = strchr(p + 1, '\n')) {
		char fn[256];
		double s, tot;
		if (sscanf(p + 1, "%lf %lf %255s", &s, &tot, fn) == 3 && strcmp(fn, name) == 0) {
			*self = s;
			*total = tot;
			return true;
		}
	}
	return false;
}

/* The function on the first row of the table at t. */
static void first_row(const char *t, char *fn, size_t n)
{
	const char *p = strstr(t, "FUNCTION");
	double s, tot;
	char buf[256];

	ASSERT_NOT_NULL(p);
	p = strchr(p, '\n');
	ASSERT_INT(sscanf(p + 1, "%lf %lf %255s", &s, &tot, buf), ==, 3);
	snprintf(fn, n, "%s", buf);
}

static void check_split_table(const char *t)
{
	char fn[256];
	double self, total;

	first_row(t, fn, sizeof(fn));
	ASSERT_STR_EQ(fn, "compute_hot");
	ASSERT(row_of(t, "compute_hot", &self, &total));
	ASSERT_DOUBLE_NEAR(self, 60, 15);
	ASSERT(row_of(t, "compute_warm", &self, &total));
	ASSERT_DOUBLE_NEAR(self, 30, 12);
	ASSERT(row_of(t, "main", &self, &total));
	ASSERT_DOUBLE_NEAR(total, 100, 3);
	ASSERT_DOUBLE_NEAR(self, 0, 2);
}

/* sonde top in the background, its standard output in the file out, where the test reads
 * its tables as they come. */
static pid_t top_spawn(const char *out, const char *const argv[])
{
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Whether text has a whole table (its blank line written) that is not the final one and
 * lists function fn (NULL: any table). */
static bool has_live_table(const char *text, const char *fn)
{
	double self, total;

	for (const char *t = text; (t = strstr(t, "sonde top:")); t++) {
		const char *eol = strchr(t, '\n');
		const char *final = strstr(t, "| final");
		if (!eol || !strstr(t, "\n\n"))
			return false;
		if ((!final || final > eol) && (!fn || row_of(t, fn, &self, &total)))
			return true;
	}
	return false;
}

/* Waits until top's output in the file out has a table has_live_table() finds: 60 s at most,
 * a loaded machine being slow rather than stuck. Returns the output (free it). */
static char *await_live_table(const char *out, const char *fn)
{
	double deadline = test_now() + 60;

	for (;;) {
		char *text = test_read_file(out, NULL);
		if (text && has_live_table(text, fn))
			return text;
		free(text);
		if (test_now() > deadline)
			FAIL("top showed no table%s%s while its source ran", fn ? " listing " : "",
			     fn ? fn : "");
		usleep(20000);
	}
}

/* Waits for top's end, which must be a success, and checks its last table: the final one,
 * over the whole recording (-w 3600), of split's samples. Returns the output (free it). */
static char *top_final(pid_t top, const char *out)
{
	ASSERT_INT(test_wait(top, 60), ==, 0);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	const char *t = last_table(text);
	ASSERT_CONTAINS(t, "| final");
	check_split_table(t);
	return text;
}

/* The tests of what top shows while its source runs hold that source's end at a gate
 * (TEST_HELD) until the test has seen it: a command on a loaded machine can be over before
 * a starved top drew its second table. split works for 0.5 s of its own CPU time, as many
 * samples however loaded the machine is, and the final tables count them all (-w 3600). */
TEST_TIMEOUT(top_plain_mode_on_split, 120)
{
	char out[PATH_MAX];
	struct test_gate g;

	test_require_perf();
	snprintf(out, sizeof(out), "%s", test_path("top.out"));
	test_gate_open(&g, "gate");
	const char *argv[] = {test_bin("sonde"),
			      "top",
			      "--interval",
			      "0.5",
			      "-w",
			      "3600",
			      "--command-output",
			      test_path("split.out"),
			      "--",
			      "sh",
			      "-c",
			      TEST_HELD,
			      test_prog("split"),
			      "0.5cpu",
			      g.path,
			      NULL};
	pid_t top = top_spawn(out, argv);
	/* A table while the command ran, then the final one once it ended. */
	free(await_live_table(out, "compute_hot"));
	test_gate_pass(&g);
	free(top_final(top, out));
	test_gate_close(&g);
}

TEST_TIMEOUT(top_follows_a_file_sonde_record_is_writing, 120)
{
	char spool[PATH_MAX], out[PATH_MAX];
	struct test_gate g;
	struct stat st;

	test_require_perf();
	snprintf(spool, sizeof(spool), "%s", test_path("rec.spool"));
	snprintf(out, sizeof(out), "%s", test_path("top.out"));
	test_gate_open(&g, "gate");
	const char *rec[] = {
		test_bin("sonde"), "record",	       "-q",   "-o",   spool, "--", "sh", "-c",
		TEST_HELD,	   test_prog("split"), "0.5cpu", g.path, NULL};
	pid_t recorder = test_spawn(rec);
	double deadline = test_now() + 30;
	while ((stat(spool, &st) < 0 || st.st_size == 0) && test_now() < deadline)
		usleep(10000);
	ASSERT_INT(st.st_size, >, 0);
	const char *argv[] = {
		test_bin("sonde"), "top", "--interval", "0.5", "-w", "3600", spool, NULL};
	pid_t top = top_spawn(out, argv);
	/* It shows the recording while it is being written, not only at its end. */
	free(await_live_table(out, "compute_hot"));
	test_gate_pass(&g);
	ASSERT_INT(test_wait(recorder, 60), ==, 0);
	free(top_final(top, out));
	test_gate_close(&g);
}

/* Threads of a record_family recording: the main thread, a worker, and the child. */
struct family {
	uint32_t pid, child_pid, worker_tid;
};

static void family_ids(const char *spool, struct family *f)
{
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_thread th;

	memset(f, 0, sizeof(*f));
	for (uint32_t i = 1; sonde_spool__get_thread(s, i, &th) == 0; i++) {
		if (strcmp(th.comm, "child") == 0)
			f->child_pid = th.pid;
		else if (strcmp(th.comm, "worker") == 0)
			f->worker_tid = th.tid;
		else if (th.pid == th.tid && !f->pid)
			f->pid = th.pid;
	}
	sonde_spool__close(s);
	ASSERT_UINT(f->child_pid, !=, 0);
	ASSERT_UINT(f->worker_tid, !=, 0);
	ASSERT_UINT(f->pid, !=, 0);
	ASSERT_UINT(f->pid, !=, f->child_pid);
}

static void top_filtered(struct test_output *o, const char *spool, const char *opt, uint32_t id)
{
	test_runf(o, 60, "%s top -w 60 %s %u %s", test_bin("sonde"), opt, id, spool);
	ASSERT_INT(o->status, ==, 0);
}

TEST_TIMEOUT(top_filters_by_pid_and_tid, 120)
{
	const char *spool = test_path("family.spool");
	struct test_output o;
	struct family f;
	double self, total;

	test_require_perf();
	test_runf(&o, 60, "%s record -q -o %s -- %s 1", test_bin("sonde"), spool,
		  test_prog("record_family"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	family_ids(spool, &f);

	top_filtered(&o, spool, "--filter-pid", f.child_pid);
	const char *t = last_table(o.out);
	ASSERT(row_of(t, "family_child", &self, &total));
	ASSERT_DOUBLE_NEAR(total, 100, 3);
	ASSERT(!row_of(t, "worker", &self, &total));
	test_output_free(&o);

	top_filtered(&o, spool, "--filter-pid", f.pid);
	t = last_table(o.out);
	ASSERT(!row_of(t, "family_child", &self, &total));
	ASSERT(row_of(t, "worker", &self, &total));
	ASSERT(row_of(t, "main", &self, &total));
	test_output_free(&o);

	top_filtered(&o, spool, "--filter-tid", f.worker_tid);
	t = last_table(o.out);
	ASSERT(row_of(t, "worker", &self, &total));
	ASSERT_DOUBLE_NEAR(total, 100, 3);
	ASSERT(!row_of(t, "main", &self, &total));
	ASSERT(!row_of(t, "family_child", &self, &total));
	test_output_free(&o);
}

TEST_TIMEOUT(top_exits_cleanly_on_sigint, 120)
{
	const char *out = test_path("top.out");

	test_require_perf();
	const char *argv[] = {
		test_bin("sonde"),	"top", "--interval",	   "0.3", "--command-output",
		test_path("split.out"), "--",  test_prog("split"), "60",  NULL};
	pid_t pid = top_spawn(out, argv);
	/* Wait for a first table that has samples. */
	free(await_live_table(out, "compute_hot"));
	double sent = test_now();
	ASSERT_OK(kill(pid, SIGINT));
	ASSERT_INT(test_wait(pid, 20), ==, 0);
	ASSERT_DOUBLE_NEAR(test_now() - sent, 0, 5);
	char *text = test_read_file(out, NULL);
	ASSERT_CONTAINS(last_table(text), "| final");
	/* The command it launched was ended too. */
	int child;
	const char *p = strstr(text, "(pid ");
	ASSERT_NOT_NULL(p);
	ASSERT_INT(sscanf(p, "(pid %d)", &child), ==, 1);
	double deadline = test_now() + 10;
	while (kill(child, 0) == 0 && test_now() < deadline)
		usleep(20000);
	ASSERT_INT(kill(child, 0), ==, -1);
	free(text);
}

/* Reads what the pty shows until `needle` appears or the deadline; returns the text. */
static char *pty_read_until(int master, char *acc, size_t *len, const char *needle, double secs)
{
	double deadline = test_now() + secs;

	while (!memmem(acc, *len, needle, strlen(needle)) && test_now() < deadline) {
		struct pollfd p = {.fd = master, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		acc = realloc(acc, *len + 4097);
		ssize_t n = read(master, acc + *len, 4096);
		if (n <= 0)
			break;
		*len += (size_t)n;
		acc[*len] = 0;
	}
	return acc;
}

TEST_TIMEOUT(top_terminal_mode_quits_on_q_and_restores_the_screen, 120)
{
	struct winsize ws = {.ws_row = 30, .ws_col = 100};
	struct termios during, after;
	int master, status;
	char *acc = calloc(1, 1);
	size_t len = 0;

	test_require_perf();
	/* named before the fork: a path first asked for in the child would make the child a
	 * temporary directory of its own, which nothing removes */
	const char *out = test_path("split.out");
	fflush(NULL);
	pid_t pid = forkpty(&master, NULL, NULL, &ws);
	ASSERT(pid >= 0);
	if (pid == 0) {
		execl(test_bin("sonde"), "sonde", "top", "--interval", "0.3", "--command-output",
		      out, "--", test_prog("split"), "60", (char *)NULL);
		_exit(127);
	}
	acc = pty_read_until(master, acc, &len, "compute_hot", 30);
	ASSERT_CONTAINS(acc, "\033[?1049h"); /* the alternate screen */
	ASSERT_CONTAINS(acc, "compute_hot");
	/* Raw mode while it runs: no canonical input, no echo. */
	ASSERT_OK(tcgetattr(master, &during));
	ASSERT_UINT(during.c_lflag & (ICANON | ECHO), ==, 0);
	ASSERT_INT(write(master, "q", 1), ==, 1);
	double sent = test_now();
	acc = pty_read_until(master, acc, &len, "\033[?1049l", 10);
	ASSERT_INT(waitpid(pid, &status, 0), ==, pid);
	ASSERT_DOUBLE_NEAR(test_now() - sent, 0, 5);
	ASSERT(WIFEXITED(status));
	ASSERT_INT(WEXITSTATUS(status), ==, 0);
	/* The normal screen is back, cursor shown, and nothing was drawn on it after. */
	const char *leave = ASSERT_NOT_NULL(strstr(acc, "\033[?1049l"));
	ASSERT_NOT_CONTAINS(leave, "compute_hot");
	ASSERT_CONTAINS(acc, "\033[?25h");
	ASSERT_OK(tcgetattr(master, &after));
	ASSERT_UINT(after.c_lflag & (ICANON | ECHO), ==, ICANON | ECHO);
	close(master);
	free(acc);
}

TEST(top_usage_and_errors)
{
	struct test_output o;

	test_runf(&o, 30, "%s top --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde top");
	test_output_free(&o);

	/* no source: sonde.spool, as perf top has no file but report reads perf.data */
	test_runf(&o, 30, "%s top", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde top: sonde.spool: No such file or directory\n");
	test_output_free(&o);

	test_runf(&o, 30, "%s top --interval 0 x.spool", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "bad value for --interval");
	test_output_free(&o);

	test_runf(&o, 30, "%s top -d x x.spool", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "bad value for -d/--duration: x");
	test_output_free(&o);

	test_runf(&o, 30, "%s top -i a.spool b.spool", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "one input file at a time");
	test_output_free(&o);

	test_runf(&o, 30,
		  "%s top --window 1 --freq max --sort total --rows 3 --filter-pid x "
		  "x.spool",
		  test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "bad --filter-pid: x");
	test_output_free(&o);

	test_runf(&o, 30, "%s top -p 1 %s", test_bin("sonde"), test_path("x.spool"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "only one of");
	test_output_free(&o);

	test_runf(&o, 30, "%s top %s", test_bin("sonde"), test_path("missing.spool"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "missing.spool");
	ASSERT_CONTAINS(o.err, "No such file");
	test_output_free(&o);

	test_runf(&o, 30, "%s top -p 2147483646", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "no such process");
	test_output_free(&o);

	test_runf(&o, 30, "%s top --command-output %s -- /nonexistent/cmd", test_bin("sonde"),
		  test_path("none.out"));
	ASSERT_INT(o.status, ==, 127);
	test_output_free(&o);
}

/* The process waits at the gate twice: it starts split once top has attached (top's first
 * table says so) and ends once top has shown split's samples. */
TEST_TIMEOUT(top_attaches_to_a_running_pid_until_it_exits, 120)
{
	char out[PATH_MAX], pid_arg[16], src[64];
	struct test_gate g;

	test_require_perf();
	snprintf(out, sizeof(out), "%s", test_path("top.out"));
	test_gate_open(&g, "gate");
	const char *held[] = {
		"/bin/sh", "-c", "read go <\"$2\"; " TEST_HELD, test_prog("split"), "0.5cpu",
		g.path,	   NULL};
	pid_t pid = test_spawn(held);
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)pid);
	const char *argv[] = {test_bin("sonde"), "top",	  "--interval", "0.5", "-w", "3600",
			      "--pid",		 pid_arg, NULL};
	pid_t top = top_spawn(out, argv);
	free(await_live_table(out, NULL));
	test_gate_pass(&g);
	free(await_live_table(out, "compute_hot"));
	test_gate_pass(&g);
	/* The process was resumed after attaching and ran to its normal end. */
	ASSERT_INT(test_wait(pid, 60), ==, 0);
	char *text = top_final(top, out);
	snprintf(src, sizeof(src), "sonde top: pid %d |", (int)pid);
	ASSERT_CONTAINS(last_table(text), src);
	free(text);
	test_gate_close(&g);
}

/* A finished spool of one raw-address stack of a process with no binary, named by a perf
 * map: top shows what the map says, so any name can be tested. */
static const char *named_spool(const char *name, uint32_t pid, const char *fn)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1001001};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_frame st[] = {{0, 0x10010}};
	uint32_t th;
	char map[64], line[1024];

	ASSERT_OK(sonde_spool_writer__add_thread(w, h.start_monotonic_ns, pid, pid, "cxx", &th));
	for (int i = 0; i < 10; i++)
		ASSERT_OK(sonde_spool_writer__add_sample(w, h.start_monotonic_ns + i * 1000000ull,
							 th, st, 1, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *path = test_path(name);
	test_write_file(path, b.data, b.len);
	sonde__buf_free(&b);
	snprintf(map, sizeof(map), "/tmp/perf-%u.map", pid);
	snprintf(line, sizeof(line), "10000 100 %s\n", fn);
	test_write_file(map, line, strlen(line));
	return path;
}

TEST(top_shortens_long_cxx_names_unless_full_names)
{
	static const char fn[] = "std::_Rb_tree<std::string, std::pair<std::string const, int>, "
				 "std::less<std::string> >::find(std::string const&) const";
	/* a pid no process has (above the usual pid_max of 4194304 would be refused) */
	uint32_t pid = 4000000 + (uint32_t)getpid() % 190000;
	const char *spool = named_spool("cxx.spool", pid, fn);
	struct test_output o;
	char map[64];

	test_runf(&o, 30, "%s top -i %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "  std::_Rb_tree<...>::find(...) const      perf-");
	test_output_free(&o);
	test_runf(&o, 30, "%s top --full-names %s", test_bin("sonde"), spool);
	ASSERT_CONTAINS(o.out, fn);
	test_output_free(&o);
	snprintf(map, sizeof(map), "/tmp/perf-%u.map", pid);
	unlink(map);
	/* still too long once elided: cut to the column, so MODULE stays put */
	spool = named_spool(
		"long.spool", pid,
		"a_very_long_namespace_name::another_long_class_name::method_name(int)");
	test_runf(&o, 30, "%s top %s", test_bin("sonde"), spool);
	ASSERT_CONTAINS(o.out, "  a_very_long_namespace_name::another_l... perf-");
	test_output_free(&o);
	unlink(map);
}

TEST_TIMEOUT(top_keeps_a_launched_commands_output_off_the_screen, 60)
{
	struct test_output o;
	const char *log = test_path("cmd.out");

	const char *argv[] = {test_bin("sonde"),
			      "top",
			      "--interval",
			      "0.2",
			      "--duration",
			      "1",
			      "--command-output",
			      log,
			      "--",
			      "/bin/sh",
			      "-c",
			      "echo; echo; echo; while :; do :; done",
			      NULL};
	test_run(&o, 30, argv);
	if (o.status == 1 && strstr(o.err, "perf"))
		SKIP("perf events are not available here");
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "\n\n\n");
	char want[512];
	snprintf(want, sizeof(want), "sonde top: the command's output is in %s\n", log);
	ASSERT_CONTAINS(o.err, want);
	snprintf(want, sizeof(want), "output in %s) |", log);
	ASSERT_CONTAINS(o.out, want);
	char *text = test_read_file(log, NULL);
	ASSERT_STR_EQ(text, "\n\n\n");
	free(text);
	test_output_free(&o);
}

/* One line per error, with the real reason (not EIO first and the reason after). */
TEST(top_says_each_error_once)
{
	struct test_output o;

	test_runf(&o, 30, "%s top -p 2", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_NOT_CONTAINS(o.err, "Input/output error");
	ASSERT_INT(strchr(o.err, '\n') - o.err + 1, ==, (long)strlen(o.err));
	ASSERT_CONTAINS(o.err, "kernel thread");
	test_output_free(&o);

	const char *bad = test_path("not-a-spool");
	test_write_file(bad, "hello world, not a spool\n", 25);
	test_runf(&o, 30, "%s top %s", test_bin("sonde"), bad);
	ASSERT_INT(o.status, ==, 1);
	char want[512];
	snprintf(want, sizeof(want), "sonde top: %s: not a sonde spool file\n", bad);
	ASSERT_STR_EQ(o.err, want);
	test_output_free(&o);
}

/* -t: one thread of two_threads recorded alone; the other's hot function never shows. */
TEST_TIMEOUT(top_records_a_thread_alone, 120)
{
	struct test_output o;
	const char *file = test_path("tids");
	char path[512], src[64], *text;
	int a, b;

	test_require_perf();
	snprintf(path, sizeof(path), "%s", file);
	const char *argv[] = {test_prog("two_threads"), "60", path, NULL};
	pid_t pid = test_spawn(argv);
	double end = test_now() + 20;
	while (!(text = test_read_file(path, NULL))) {
		if (test_now() > end)
			FAIL("two_threads wrote no thread ids");
		usleep(10000);
	}
	ASSERT_INT(sscanf(text, "%d %d", &a, &b), ==, 2);
	free(text);
	test_runf(&o, 60, "%s top --interval 0.5 -d 3 -t %d", test_bin("sonde"), a);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_INT(o.status, ==, 0);
	const char *t = last_table(o.out);
	snprintf(src, sizeof(src), "sonde top: tid %d |", a);
	ASSERT_CONTAINS(t, src);
	ASSERT_CONTAINS(t, "hot_a_work");
	ASSERT_NOT_CONTAINS(o.out, "hot_b_work");
	test_output_free(&o);
}

/* A launched command's children are recorded, as `sonde record -- CMD` records them: a
 * shell that runs split and then something else (so that it forks rather than exec's)
 * shows split's functions. */
TEST_TIMEOUT(top_follows_the_children_of_a_launched_command, 120)
{
	char script[1024];
	struct test_output o;
	double self, total;

	test_require_perf();
	snprintf(script, sizeof(script), "%s 2cpu; true", test_prog("split"));
	const char *top[] = {test_bin("sonde"), "top", "--interval", "0.5", "--command-output",
			     test_path("split.out"), "--", "sh", "-c", script, NULL};
	test_run(&o, 90, top);
	ASSERT_INT(o.status, ==, 0);
	const char *t = last_table(o.out);
	ASSERT_CONTAINS(t, "| final");
	ASSERT(row_of(t, "compute_hot", &self, &total));
	ASSERT(row_of(t, "compute_warm", &self, &total));
	test_output_free(&o);
}

/* --sort process: a PROCESS column names each row's process ('comm-pid', the command a
 * launched shell exec'd into its child), rows of one process stay together ordered by
 * self, and a table cut by -n says how many rows it left out. */
TEST_TIMEOUT(top_sort_by_process_shows_the_process_column_and_what_it_cut, 120)
{
	char script[1024], fn[256], proc[256], prev[256] = "";
	struct test_output o;
	double self, total, prev_self = 101;
	int rows = 0;

	test_require_perf();
	snprintf(script, sizeof(script), "%s 2; true", test_prog("split"));
	const char *top[] = {test_bin("sonde"), "top",	"--interval", "0.5", "-n", "3",
			     "--sort",		"process", "--command-output", test_path("split.out"),
			     "--",		"sh",	"-c",	     script,	NULL};
	test_run(&o, 90, top);
	ASSERT_INT(o.status, ==, 0);
	const char *t = last_table(o.out);
	ASSERT_CONTAINS(t, "| final");
	const char *head = ASSERT_NOT_NULL(strstr(t, "FUNCTION"));
	ASSERT(strncmp(head, "FUNCTION", 8) == 0 && strstr(head, "PROCESS") < strchr(head, '\n'));
	for (const char *p = strchr(head, '\n'); p && p[1] && p[1] != '\n';
	     p = strchr(p + 1, '\n')) {
		if (sscanf(p + 1, "%lf %lf %255s %255s", &self, &total, fn, proc) != 4)
			break;
		/* "split-PID" or "sh-PID": a command and its process id */
		const char *dash = strrchr(proc, '-');
		ASSERT_NOT_NULL(dash);
		ASSERT(dash[1] >= '1' && dash[1] <= '9');
		ASSERT_INT(strcmp(prev, proc), <=, 0);
		if (!strcmp(prev, proc))
			ASSERT(self <= prev_self);
		snprintf(prev, sizeof(prev), "%s", proc);
		prev_self = self;
		rows++;
	}
	ASSERT_INT(rows, ==, 3);
	/* split alone has more than three functions: the rest is counted, not dropped silently */
	ASSERT_CONTAINS(t, " more rows (-n shows more");
	test_output_free(&o);

	/* the whole table (as many rows as there are: how many functions sh is caught in
	 * varies with the machine's load): split's functions under split's process */
	const char *all[] = {test_bin("sonde"), "top",	    "--interval",	"0.5",
			     "--sort",		"process", "-n", "1000",
			     "--command-output", test_path("split.out"),
			     "--",		"sh",	    "-c",		script,
			     NULL};
	test_run(&o, 90, all);
	ASSERT_INT(o.status, ==, 0);
	t = last_table(o.out);
	const char *hot = ASSERT_NOT_NULL(strstr(t, "compute_hot"));
	ASSERT_INT(sscanf(hot, "%255s %255s", fn, proc), ==, 2);
	ASSERT(strncmp(proc, "split-", 6) == 0);
	ASSERT_NOT_CONTAINS(t, "more row");
	test_output_free(&o);
}

/* --metric off-cpu: top records the launched command's intervals off the CPU, and the
 * final table (top waits for the command's end) puts sleep_loop's time under the state it
 * slept in, with the stack it slept on: sleep_caller, called by main. */
TEST_TIMEOUT(top_metric_off_cpu_shows_where_a_sleeping_command_waits, 120)
{
	struct test_output o;
	double self, total;

	test_require_perf();
	test_runf(&o, 90, "%s top -w 3600 --metric off-cpu --command-output %s -- %s 300",
		  test_bin("sonde"), test_path("sleep.out"), test_prog("sleep_loop"));
	ASSERT_INT(o.status, ==, 0);
	const char *t = last_table(o.out);
	ASSERT_CONTAINS(t, "| final");
	ASSERT_CONTAINS(t, " | off-cpu ");
	ASSERT_NOT_CONTAINS(t, "no off-CPU intervals");
	/* every stacked wait is a sleep in sleep_caller: its state frame holds the self time */
	char fn[256];
	first_row(t, fn, sizeof(fn));
	ASSERT_STR_EQ(fn, "[off-cpu:");
	ASSERT_CONTAINS(t, "[off-cpu: S]");
	ASSERT(row_of(t, "sleep_caller", &self, &total));
	ASSERT_DOUBLE_NEAR(self, 0, 0.01);
	ASSERT(total > 90);
	ASSERT(row_of(t, "main", &self, &total));
	ASSERT(total > 90);
	test_output_free(&o);
}
