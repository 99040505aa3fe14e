/* Recording threads (-t/--tid) and system-wide filters (-a with -t and --comm), on
 * tests/progs/two_threads: two busy threads, hot_a in hot_a_work and hot_b in hot_b_work.
 *
 *  - -t TID_A: every sample is of that thread, hot_b_work never appears, the samples go
 *    through thread_a to hot_a_work (its process's modules were read);
 *  - -t with -p: both targets recorded, nothing else;
 *  - a thread that does not exist, or a kernel thread, is refused at once, in one line;
 *  - -a -t TID_A and -a --comm hot_a (a process started during the recording) record only
 *    that thread's samples, from system-wide events.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

struct two {
	pid_t pid;
	int tid[2];
};

/* The file whose creation starts two_threads' late thread. */
static const char *late_gate(void)
{
	return test_path("tids.late");
}

/* two_threads running for `seconds`, once it has written its threads' ids. */
static void two_start_args(struct two *t, const char *seconds, const char *late)
{
	const char *file = test_path("tids");
	char path[512];

	snprintf(path, sizeof(path), "%s", file);
	unlink(path);
	unlink(late_gate());
	const char *argv[] = {test_prog("two_threads"), seconds, path, late, NULL};
	t->pid = test_spawn(argv);
	double end = test_now() + 20;
	char *text;
	while (!(text = test_read_file(path, NULL))) {
		if (test_now() > end)
			FAIL("two_threads wrote no thread ids");
		usleep(10000);
	}
	ASSERT_INT(sscanf(text, "%d %d", &t->tid[0], &t->tid[1]), ==, 2);
	free(text);
}

static void two_start(struct two *t, const char *seconds)
{
	two_start_args(t, seconds, NULL);
}

static void two_stop(struct two *t)
{
	kill(t->pid, SIGKILL);
	test_wait(t->pid, 10);
}

/* What `sonde report --folded --folded-roots thread` says of a spool. */
struct folded {
	unsigned long total;	   /* samples */
	unsigned long hot_a;	   /* through thread_a;hot_a_work */
	unsigned long hot_b;	   /* in hot_b_work anywhere */
	unsigned long hot_c;	   /* through thread_c;hot_c_work, of a thread named hot_c */
	unsigned long other_roots; /* samples whose root is none of the allowed ones */
	char first_bad[256];
	unsigned long other_same_tid; /* other_roots of the thread of first_bad */
};

/* allowed: root-frame suffixes ("/TID") or prefixes ("comm-") a sample may have. */
static void fold(const char *spool, const char *const *allowed, bool by_prefix, struct folded *f)
{
	struct test_output o;

	memset(f, 0, sizeof(*f));
	test_runf(&o, 120, "%s report --folded --folded-roots thread %s", test_bin("sonde"), spool);
	if (o.status != 0)
		FAIL("sonde report exited %d:\n%s", o.status, o.err);
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' '), *semi = strchr(line, ';');
		if (!sp || !semi)
			continue;
		unsigned long n = strtoul(sp + 1, NULL, 10);
		*sp = 0;
		*semi = 0;
		bool ok = false;
		for (const char *const *a = allowed; *a && !ok; a++) {
			size_t la = strlen(*a), lr = strlen(line);
			ok = by_prefix ? strncmp(line, *a, la) == 0
				       : lr >= la && strcmp(line + lr - la, *a) == 0;
		}
		if (!ok) {
			f->other_roots += n;
			if (!f->first_bad[0])
				snprintf(f->first_bad, sizeof(f->first_bad), "%s", line);
			const char *a = strrchr(f->first_bad, '/'), *b = strrchr(line, '/');
			f->other_same_tid += a && b && !strcmp(a, b) ? n : 0;
		}
		*semi = ';';
		f->total += n;
		f->hot_a += strstr(semi, ";thread_a;hot_a_work") ? n : 0;
		f->hot_b += strstr(semi, "hot_b_work") ? n : 0;
		f->hot_c +=
			strstr(semi, ";thread_c;hot_c_work") && !strncmp(line, "hot_c-", 6) ? n : 0;
	}
	test_output_free(&o);
}

/* `sonde record FLAGS -o SPOOL` (its stderr in o->err, its status in o->status), interrupted
 * once it has published its spool (its events are open), and then (late, unless NULL,
 * created: two_threads starts its late thread) pid has `threads` threads (0: whatever it
 * has) and has run `cpu` s more of its CPU time, and pid2 (unless 0)
 * 0.3 s of its own: not after a -d, of which a loaded machine may give the targets little
 * (the thread counts checked are samples of their CPU time) and a loaded recorder may
 * spend some starting. */
static void record_while(struct test_output *o, const char *flags, const char *spool, pid_t pid,
			 const char *late, int threads, double cpu, pid_t pid2)
{
	char cmd[8400], errf[600];

	snprintf(errf, sizeof(errf), "%s.err", spool);
	unlink(spool);
	snprintf(cmd, sizeof(cmd), "exec %s record %s -o %s 2>%s", test_bin("sonde"), flags, spool,
		 errf);
	pid_t r = test_spawn((const char *const[]){"/bin/sh", "-c", cmd, NULL});
	for (double end = test_now() + 60; access(spool, F_OK) != 0; usleep(10 * 1000))
		if (test_now() > end)
			FAIL("sonde record did not start recording into %s in 60 s", spool);
	if (late)
		test_write_file(late, "", 0);
	if (threads)
		test_await_threads(pid, threads);
	test_await_cpu(pid, cpu);
	if (pid2)
		test_await_cpu(pid2, 0.3);
	kill(r, SIGINT);
	memset(o, 0, sizeof(*o));
	o->status = test_wait(r, 60);
	o->err = ASSERT_NOT_NULL(test_read_file(errf, &o->err_len));
}

TEST_TIMEOUT(record_tid_records_that_thread_only, 120)
{
	struct two t;
	struct test_output o;
	struct folded f;
	char suffix[32], flags[128];
	const char *spool = test_path("tid.spool");

	test_require_perf();
	two_start(&t, "60");
	snprintf(flags, sizeof(flags), "-q -t %d", t.tid[0]);
	record_while(&o, flags, spool, t.pid, NULL, 0, 1.0, 0);
	two_stop(&t);
	if (o.status != 0)
		FAIL("sonde record -t exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	snprintf(suffix, sizeof(suffix), "/%d", t.tid[0]);
	const char *allowed[] = {suffix, NULL};
	fold(spool, allowed, false, &f);
	ASSERT_UINT(f.total, >=, 100);
	if (f.other_roots)
		FAIL("%lu of %lu samples not of thread %d (first: %s)", f.other_roots, f.total,
		     t.tid[0], f.first_bad);
	ASSERT_UINT(f.hot_b, ==, 0);
	/* through the thread function, symbolized from the process's modules */
	ASSERT_UINT(f.hot_a * 10, >=, f.total * 9);
}

/* Threads the recorded thread creates afterwards inherit its events; with --no-inherit
 * they do not (perf's inherit = 0), and nothing but the thread itself is recorded. */
static void late_thread(bool inherit, struct folded *f, struct two *t)
{
	struct test_output o;
	char suffix[32], flags[128];
	const char *spool = test_path("late.spool");

	two_start_args(t, "60", "late");
	snprintf(flags, sizeof(flags), "-q -t %d %s", t->tid[0], inherit ? "" : "--no-inherit");
	/* the late one started once the recording has: 0.5 s of the CPU time of each of the
	 * three busy threads */
	record_while(&o, flags, spool, t->pid, late_gate(), 3, 1.5, 0);
	two_stop(t);
	if (o.status != 0)
		FAIL("sonde record -t exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	snprintf(suffix, sizeof(suffix), "/%d", t->tid[0]);
	const char *allowed[] = {suffix, NULL};
	fold(spool, allowed, false, f);
}

TEST_EXCLUSIVE(record_tid_follows_the_threads_it_creates, 120)
{
	struct two t;
	struct folded f;

	test_require_perf();
	late_thread(true, &f, &t);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_a, >=, 50);
	/* the samples not of hot_a's tid are of one thread, the late one, mostly in
	 * hot_c_work under its own name (its first ones may precede its prctl) */
	ASSERT_UINT(f.hot_c, >=, 50);
	ASSERT_UINT(f.other_same_tid, ==, f.other_roots);
	ASSERT_UINT(f.hot_c * 10, >=, f.other_roots * 9);
	late_thread(false, &f, &t);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_c, ==, 0);
	ASSERT_UINT(f.other_roots, ==, 0);
	ASSERT_UINT(f.hot_a, >=, 50);
}

TEST_TIMEOUT(record_tid_and_pid_together, 120)
{
	struct two t;
	struct test_output o;
	struct folded f;
	char suffix[32], pidpart[32], flags[128];
	const char *spool = test_path("tidpid.spool");

	test_require_perf();
	two_start(&t, "60");
	const char *argv[] = {test_prog("split"), "60", NULL};
	pid_t split = test_spawn(argv);
	snprintf(flags, sizeof(flags), "-q -t %d -p %d", t.tid[1], (int)split);
	record_while(&o, flags, spool, t.pid, NULL, 0, 1.0, split);
	two_stop(&t);
	kill(split, SIGKILL);
	test_wait(split, 10);
	if (o.status != 0)
		FAIL("sonde record -t -p exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	snprintf(suffix, sizeof(suffix), "-%d/%d", (int)t.pid, t.tid[1]);
	snprintf(pidpart, sizeof(pidpart), "-%d/%d", (int)split, (int)split);
	const char *allowed[] = {suffix, pidpart, NULL};
	fold(spool, allowed, false, &f);
	if (f.other_roots)
		FAIL("%lu of %lu samples of neither target (first: %s)", f.other_roots, f.total,
		     f.first_bad);
	ASSERT_UINT(f.hot_a, ==, 0);
	ASSERT_UINT(f.hot_b, >=, 30);
	ASSERT_UINT(f.total - f.hot_b, >=, 30); /* split's */
}

/* A thread id no task has: above every pid in use (pid_max is far larger). */
static int unused_tid(void)
{
	char path[64];

	for (int tid = 4000000;; tid++) {
		snprintf(path, sizeof(path), "/proc/%d", tid);
		if (access(path, F_OK) < 0)
			return tid;
	}
}

TEST_TIMEOUT(record_tid_unknown_or_kernel_is_refused_at_once, 60)
{
	struct test_output o;
	char want[96];
	int tid = unused_tid();

	test_require_perf();
	double t0 = test_now();
	test_runf(&o, 30, "%s record -t %d -o %s", test_bin("sonde"), tid, test_path("x.spool"));
	ASSERT_INT(o.status, ==, 1);
	snprintf(want, sizeof(want), "sonde record: no such thread: %d\n", tid);
	ASSERT_STR_EQ(o.err, want);
	ASSERT(test_now() - t0 < 3);
	test_output_free(&o);

	/* kthreadd, pid 2 */
	test_runf(&o, 30, "%s record -t 2 -o %s", test_bin("sonde"), test_path("x.spool"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde record: tid 2 is a kernel thread (kthreadd)");
	ASSERT(strchr(o.err, '\n') == o.err + strlen(o.err) - 1);
	test_output_free(&o);
	struct stat st;
	ASSERT(stat(test_path("x.spool"), &st) < 0);
}

/* System-wide events need CAP_PERFMON or root, or perf_event_paranoid <= 0. */
static void require_system_wide(void)
{
	test_require_perf();
	if (geteuid() == 0)
		return;
	long v = test_sysctl_get("kernel/perf_event_paranoid");
	if (v > 0)
		SKIP("system-wide perf events need root here (perf_event_paranoid %ld)", v);
}

TEST_TIMEOUT(record_all_cpus_tid_filter, 120)
{
	struct two t;
	struct test_output o;
	struct folded f;
	char suffix[32], flags[128];
	const char *spool = test_path("atid.spool");

	require_system_wide();
	two_start(&t, "60");
	snprintf(flags, sizeof(flags), "-q -a --no-kernel -t %d", t.tid[0]);
	record_while(&o, flags, spool, t.pid, NULL, 0, 1.0, 0);
	two_stop(&t);
	if (o.status != 0)
		FAIL("sonde record -a -t exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	snprintf(suffix, sizeof(suffix), "-%d/%d", (int)t.pid, t.tid[0]);
	const char *allowed[] = {suffix, NULL};
	fold(spool, allowed, false, &f);
	ASSERT_UINT(f.total, >=, 100);
	if (f.other_roots)
		FAIL("%lu of %lu samples not of thread %d (first: %s)", f.other_roots, f.total,
		     t.tid[0], f.first_bad);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_a * 10, >=, f.total * 9);
}

/* --comm hot_a: a process started during the recording names a thread hot_a (prctl);
 * only that thread's samples are kept, its other thread's (hot_b) and the process's main
 * thread's are not. */
TEST_TIMEOUT(record_all_cpus_comm_filter_started_during, 120)
{
	struct test_output o;
	struct folded f;
	const char *spool = test_path("acomm.spool");
	char cmd[1024];

	require_system_wide();
	/* the recording runs `sh -c 'sleep 0.5; two_threads 3 FILE'`: two_threads starts
	 * while it runs */
	snprintf(cmd, sizeof(cmd), "%s", test_path("start_late.sh"));
	char script[1024];
	int len = snprintf(script, sizeof(script), "sleep 0.5\nexec %s 3 %s\n",
			   test_prog("two_threads"), test_path("late_tids"));
	test_write_file(cmd, script, (size_t)len);
	test_runf(&o, 60, "%s record -q -a --no-kernel --comm hot_a -o %s -- sh %s",
		  test_bin("sonde"), spool, cmd);
	if (o.status != 0)
		FAIL("sonde record -a --comm exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	const char *allowed[] = {"hot_a-", NULL};
	fold(spool, allowed, true, &f);
	ASSERT_UINT(f.total, >=, 100);
	if (f.other_roots)
		FAIL("%lu of %lu samples not of comm hot_a (first: %s)", f.other_roots, f.total,
		     f.first_bad);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_a * 10, >=, f.total * 9);
}

/* Per-thread stack copies: hot_a's shallow stack shrinks its copy, which reopens its
 * events (a generation switch). The new ones keep -t's rules: only hot_a is recorded
 * (not hot_b, whose process a switch otherwise reopens whole), and with --no-inherit
 * the thread hot_a creates afterwards inherits nothing; without it, it is followed. */
static void late_thread_switched(bool inherit, struct folded *f, struct two *t)
{
	struct test_output o;
	char suffix[32], flags[128];
	unsigned lo, hi, switches = 0;
	const char *spool = test_path("late-switch.spool");

	two_start_args(t, "60", "late");
	snprintf(flags, sizeof(flags), "-t %d %s", t->tid[0], inherit ? "" : "--no-inherit");
	/* the late one started once the recording has: 0.7 s of the CPU time of each of the
	 * three busy threads, time for hot_a's copy to shrink after its first samples */
	record_while(&o, flags, spool, t->pid, late_gate(), 3, 2.0, 0);
	two_stop(t);
	if (o.status != 0)
		FAIL("sonde record -t exited %d:\n%s", o.status, o.err);
	const char *l = strstr(o.err, "stack copies: ");
	if (!l ||
	    sscanf(l, "stack copies: %u-%u bytes per thread after %u", &lo, &hi, &switches) != 3)
		FAIL("no stack copies line in the summary:\n%s", o.err);
	ASSERT_UINT(switches, >=, 1);
	ASSERT_UINT(hi, <, 32768); /* hot_a's copy shrank */
	test_output_free(&o);
	snprintf(suffix, sizeof(suffix), "/%d", t->tid[0]);
	const char *allowed[] = {suffix, NULL};
	fold(spool, allowed, false, f);
}

TEST_TIMEOUT(record_tid_no_inherit_stays_thread_only_after_a_resize, 120)
{
	struct two t;
	struct folded f;

	test_require_perf();
	late_thread_switched(false, &f, &t);
	if (f.other_roots)
		FAIL("%lu of %lu samples not of thread %d (first: %s)", f.other_roots, f.total,
		     t.tid[0], f.first_bad);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_c, ==, 0);
	ASSERT_UINT(f.hot_a, >=, 50);
	late_thread_switched(true, &f, &t);
	ASSERT_UINT(f.hot_b, ==, 0);
	ASSERT_UINT(f.hot_a, >=, 50);
	ASSERT_UINT(f.hot_c, >=, 50);
	ASSERT_UINT(f.other_same_tid, ==, f.other_roots);
}
