/* sonde record -e GROUP:NAME: a tracepoint as the sampling event. sleep_loop blocks 300
 * times in nanosleep called from sleep_caller, so sched:sched_switch fires at least 300
 * times in it, each with the stack of the sleep. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/log.h>
#include <sonde/record.h>

#include "../test.h"
#include "../util.h"

static void require_sched_switch(void)
{
	test_require_perf();
	if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) != 0)
		SKIP("no readable tracefs with sched:sched_switch (mount -t tracefs nodev "
		     "/sys/kernel/tracing)");
}

/* Samples of `sonde report --folded` whose stack holds `needle`, and in all. */
static void folded_counts(const char *spool, const char *needle, uint64_t *hits, uint64_t *all)
{
	struct test_output o;

	test_runf(&o, 60, "%s report --folded -i %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	*hits = *all = 0;
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		ASSERT_NOT_NULL(sp);
		uint64_t n = strtoull(sp + 1, NULL, 10);
		*all += n;
		if (strstr(line, needle))
			*hits += n;
	}
	test_output_free(&o);
}

TEST_TIMEOUT(record_tracepoint_sched_switch_stacks_reach_main, 120)
{
	const char *spool = test_path("tp.spool");
	struct test_output o;
	uint64_t hits, all;

	require_sched_switch();
	test_runf(&o, 60, "%s record -e sched:sched_switch -o %s -- %s 300", test_bin("sonde"),
		  spool, test_prog("sleep_loop"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, ", event sched:sched_switch\n");
	ASSERT_CONTAINS(o.err, "; every hit, ");
	const char *v = strstr(o.out, "voluntary switches ");
	long slept = v ? atol(v + 19) : -1;
	test_output_free(&o);
	folded_counts(spool, ";main;sleep_caller;", &hits, &all);
	/* every sleep that left the CPU (all 300 but a sleep whose timer fired before the
	 * scheduler was reached, on a loaded machine) switched the thread out there; the
	 * rest are preemptions and exit */
	printf("%ld sleeps left the CPU; %" PRIu64 " of %" PRIu64 " hits through sleep_caller\n",
	       slept, hits, all);
	ASSERT_INT(slept, >, 0);
	ASSERT_UINT(hits, >=, (uint64_t)slept);
	ASSERT_UINT(hits * 10, >=, all * 9);
}

/* -c N: one hit in N, not every hit with the period written down (the kernel samples a
 * software event at every hit when the sample carries its period). */
TEST_TIMEOUT(record_tracepoint_count_takes_one_hit_in_n, 120)
{
	const char *spool = test_path("tp3.spool");
	struct test_output o;
	uint64_t hits, all;

	require_sched_switch();
	test_runf(&o, 60, "%s record -e sched:sched_switch -c 3 -o %s -- %s 300", test_bin("sonde"),
		  spool, test_prog("sleep_loop"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "; a sample every 3 events, ");
	/* Each counter the kernel kept may end with up to 2 hits that never made a third:
	 * one counter per CPU ring, and as many again after each stack-copy switch, which
	 * opens the thread's events anew. */
	const char *rings = strstr(o.err, "-byte stacks, ");
	const char *switches = strstr(o.err, " per thread after ");
	ASSERT_NOT_NULL(rings);
	uint64_t counters = strtoull(rings + strlen("-byte stacks, "), NULL, 10);
	ASSERT_UINT(counters, >=, 1);
	if (switches)
		counters *= 1 + strtoull(switches + strlen(" per thread after "), NULL, 10);
	test_output_free(&o);
	folded_counts(spool, ";main;sleep_caller;", &hits, &all);
	ASSERT_UINT(all * 3 + 2 * counters, >=, 300);
	ASSERT_UINT(all, <=, 200);
	ASSERT_UINT(hits * 10, >=, all * 9);
}

TEST_TIMEOUT(record_tracepoint_errors_are_one_line, 60)
{
	struct test_output o;

	require_sched_switch();
	test_runf(&o, 30, "%s record -e sched:no_such_tracepoint -o %s -- true", test_bin("sonde"),
		  test_path("x.spool"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde record: unknown tracepoint sched:no_such_tracepoint "
			     "(tracefs has no events/sched/no_such_tracepoint)\n");
	test_output_free(&o);
	test_runf(&o, 30, "%s record -e sched:.. -o %s -- true", test_bin("sonde"),
		  test_path("x.spool"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde record: tracepoint 'sched:..' is not GROUP:NAME\n");
	test_output_free(&o);
	test_runf(&o, 30, "%s record -e sched_switch -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--event wants auto, cycles, cpu-clock or a tracepoint GROUP:NAME, "
			       "not 'sched_switch'\n");
	test_output_free(&o);
	/* No tracefs: in a mount namespace of its own, with tracefs and debugfs unmounted. */
	if (access("/usr/bin/unshare", X_OK) != 0)
		SKIP("no /usr/bin/unshare to hide tracefs in a mount namespace");
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "umount -l /sys/kernel/debug 2>/dev/null; umount -l /sys/kernel/tracing "
		 "2>/dev/null; exec %s record -e sched:sched_switch -o %s -- true",
		 test_bin("sonde"), test_path("y.spool"));
	const char *argv[] = {"/usr/bin/unshare",
			      "--mount",
			      "--propagation",
			      "private",
			      "/bin/sh",
			      "-c",
			      cmd,
			      NULL};
	test_run(&o, 30, argv);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde record: tracepoint sched:sched_switch: tracefs is not mounted "
			     "(at /sys/kernel/tracing or /sys/kernel/debug/tracing)\n");
	test_output_free(&o);
}

/* The API: GROUP/NAME as Perfetto writes it, the summary naming the tracepoint, and a
 * name that is no GROUP:NAME refused. */
TEST_TIMEOUT(record_api_tracepoint_option, 60)
{
	char *argv[] = {(char *)test_prog("sleep_loop"), "100", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .tracepoint = "sched/sched_switch"};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	int status;

	require_sched_switch();
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach(
		sonde_launch__pid(l), test_path("api.spool"), SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	while (sonde_launch__wait(l, WNOHANG, &status) == 0)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	ASSERT_STR_EQ(sum.event, "tracepoint");
	ASSERT_STR_EQ(sum.tracepoint, "sched:sched_switch");
	ASSERT_UINT(sum.frequency, ==, 0);
	ASSERT_UINT(sum.samples_written, >=, 100);

	sonde_log__set_level(SONDE_LOG_OFF);
	static const char *const bad[] = {"sched", "sched:", ":x", "a:b/c", "../x:y"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		opts.tracepoint = bad[i];
		errno = 0;
		ASSERT(!sonde_recorder__attach(getpid(), test_path("b.spool"), SONDE_ATTACH_RUNNING,
					       &opts));
		ASSERT_INT(errno, ==, EINVAL);
	}
	opts.tracepoint = "sched:no_such_tracepoint";
	ASSERT(!sonde_recorder__attach(getpid(), test_path("b.spool"), SONDE_ATTACH_RUNNING,
				       &opts));
	ASSERT_INT(errno, ==, ENOENT);
}

struct checks {
	pid_t refused, execs; /* refused outright; allowed until it execs split */
	int calls_refused, calls_execs, calls;
};

static bool comm_is(pid_t pid, const char *want)
{
	char path[64], *c;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if (!(c = test_read_file(path, NULL)))
		return false;
	bool yes = strncmp(c, want, strlen(want)) == 0 && c[strlen(want)] == '\n';
	free(c);
	return yes;
}

static bool check(void *ctx, pid_t pid)
{
	struct checks *k = ctx;

	k->calls++;
	if (pid == k->refused) {
		k->calls_refused++;
		return false;
	}
	if (pid == k->execs) {
		k->calls_execs++;
		return !comm_is(pid, "split");
	}
	return true;
}

/* Samples of pid in a spool, by `sonde report --folded --pid`; with comm, only those of
 * its threads under that name (--comm: a thread is named again after its exec). */
static uint64_t spool_samples_of(const char *spool, pid_t pid, const char *comm)
{
	struct test_output o;
	uint64_t n = 0;

	test_runf(&o, 60, "%s report --folded --pid %d%s%s -i %s", test_bin("sonde"), (int)pid,
		  comm ? " --comm " : "", comm ? comm : "", spool);
	ASSERT_INT(o.status, ==, 0);
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		n += sp ? strtoull(sp + 1, NULL, 10) : 0;
	}
	test_output_free(&o);
	return n;
}

/* CPU seconds pid has run (utime + stime), -1 once it is gone. */
static double cpu_s(pid_t pid)
{
	char path[64], *text;
	unsigned long ut, st;
	double s = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(text = test_read_file(path, NULL)))
		return -1;
	const char *p = strrchr(text, ')'); /* the command may hold spaces */
	if (p &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
		s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	free(text);
	return s;
}

/* opts.process_check in a system-wide recording: asked about each process, what it
 * refuses is not recorded, and it is asked again at an exec, whose refusal retires the
 * process; the processes it allows are. The recording runs until the allowed process and
 * the exec'd one have each had CPU time enough for samples (not a fixed time, which a
 * loaded machine gives them too little of). The exec'd process was a shell, allowed,
 * until its exec: samples of it as sh are its own and may be there; not one as split. */
TEST_TIMEOUT(record_api_system_process_check, 120)
{
	const char *spool = test_path("check.spool");
	const char *split[] = {test_prog("split"), "30", NULL};
	char cmd[512];
	struct checks k = {0};

	test_require_perf();
	pid_t allowed = test_spawn(split);
	k.refused = test_spawn(split);
	/* execs once the recording runs, however long its start took */
	const char *go = test_path("go");
	snprintf(cmd, sizeof(cmd), "while [ ! -e %s ]; do sleep 0.05; done; exec %s 30", go,
		 test_prog("split"));
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	k.execs = test_spawn(sh);
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 199,
					 .process_check = check,
					 .process_check_ctx = &k};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_system(spool, &opts));
	double allowed0 = cpu_s(allowed);
	ASSERT(allowed0 >= 0);
	test_write_file(go, "", 0);
	/* 0.3 s of CPU: about 60 samples at 199 Hz, when 20 are asked of the allowed one */
	double end = test_now() + 90;
	while (!(comm_is(k.execs, "split") && cpu_s(k.execs) >= 0.3 &&
		 cpu_s(allowed) - allowed0 >= 0.3)) {
		if (test_now() > end)
			FAIL("the two spinning processes did not get 0.3 s of CPU each in 90 s");
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	}
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	pid_t kids[] = {allowed, k.refused, k.execs};
	for (int i = 0; i < 3; i++) {
		kill(kids[i], SIGKILL);
		test_wait(kids[i], 10);
	}
	ASSERT_INT(k.calls_refused, ==, 1); /* its answer is kept */
	ASSERT_INT(k.calls_execs, >=, 2);   /* at the start, and at its exec */
	ASSERT_UINT(sum.processes_refused, >=, 2);
	ASSERT_UINT(sum.unfollowed_samples, >=, 1);
	ASSERT_UINT(spool_samples_of(spool, k.refused, NULL), ==, 0);
	ASSERT_UINT(spool_samples_of(spool, k.execs, "split"), ==, 0);
	ASSERT_UINT(spool_samples_of(spool, allowed, "split"), >=, 20);
}

/* A tracepoint filter the kernel refuses is one error, and needs a tracepoint. */
TEST_TIMEOUT(record_api_tracepoint_filter, 60)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .tracepoint = "sched:sched_switch",
					 .tracepoint_filter = "no_such_field == 3"};
	struct test_output o;

	require_sched_switch();
	sonde_log__set_level(SONDE_LOG_OFF);
	errno = 0;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("f.spool"), SONDE_ATTACH_RUNNING,
				       &opts));
	ASSERT_INT(errno, ==, EINVAL);
	opts.tracepoint = NULL;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("f.spool"), SONDE_ATTACH_RUNNING,
				       &opts));
	ASSERT_INT(errno, ==, EINVAL);
	/* a filter that holds: only sleep_loop's own switch-outs, system-wide */
	const char *argv[] = {test_prog("sleep_loop"), "100000", NULL};
	pid_t sl = test_spawn(argv);
	char filter[64];
	snprintf(filter, sizeof(filter), "prev_pid == %d", (int)sl);
	opts.tracepoint = "sched:sched_switch";
	opts.tracepoint_filter = filter;
	const char *spool = test_path("filtered.spool");
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_system(spool, &opts));
	double end = test_now() + 1.0;
	while (test_now() < end)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	kill(sl, SIGKILL);
	test_wait(sl, 10);
	test_runf(&o, 60, "%s report --folded -i %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	uint64_t hits, all;
	folded_counts(spool, ";main;sleep_caller;", &hits, &all);
	ASSERT_UINT(hits, >=, 100);
	ASSERT_UINT(spool_samples_of(spool, sl, NULL), ==, all);
}

/* As uid nobody: either tracefs is root's (its default 0700) and it says so, or the
 * kernel refuses a tracepoint at perf_event_paranoid 2 and it says why; one line. */
TEST_TIMEOUT(record_tracepoint_unprivileged_says_why, 60)
{
	struct stat st;
	char errf[512], *err;

	require_sched_switch();
	if (geteuid() != 0)
		SKIP("needs root to run sonde as uid nobody");
	chmod(test_tmpdir(), 0755);
	const char *sonde = test_copy_for_anyone(test_bin("sonde"));
	snprintf(errf, sizeof(errf), "%s", test_path("nobody.err"));
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		execl(sonde, "sonde", "record", "-e", "sched:sched_switch", "-o", "/dev/null", "--",
		      "/bin/true", (char *)NULL);
		_exit(98);
	}
	ASSERT_INT(test_wait(child, 30), ==, 1);
	err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	ASSERT_OK(stat("/sys/kernel/tracing", &st));
	if (!(st.st_mode & S_IXOTH))
		ASSERT_STR_EQ(err,
			      "sonde record: tracepoint sched:sched_switch: tracefs is not "
			      "readable by this user (/sys/kernel/tracing is root's unless its "
			      "mode is changed)\n");
	else
		ASSERT_CONTAINS(err, "sonde record: permission denied: tracepoint "
				     "sched:sched_switch samples in the kernel");
	ASSERT(strchr(err, '\n') == err + strlen(err) - 1);
	free(err);
}

/* A tracepoint with a filter and per-thread stack copies: offcpu_split's main thread
 * (a shallow half, then 600 frames deep) switches generations of its events as its copy
 * shrinks and grows; each new event gets the filter too, and no hit is lost or counted
 * twice: one sample for each of main's naps (a clock_nanosleep each), none of the writer
 * thread's, which the filter leaves out. */
TEST_TIMEOUT(record_api_tracepoint_filter_survives_stack_copy_switches, 120)
{
	const char *truth = test_path("tp.truth"), *spool = test_path("tp.spool");
	const char *argv[] = {test_prog("offcpu_split"), "6", truth, "600", NULL};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	char filter[64];
	int status;

	test_require_perf();
	if (access("/sys/kernel/tracing/events/syscalls/sys_enter_clock_nanosleep/id", R_OK))
		SKIP("no readable tracefs with syscalls:sys_enter_clock_nanosleep (a kernel "
		     "without CONFIG_FTRACE_SYSCALLS, or tracefs not mounted)");
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new((char *const *)argv, NULL));
	snprintf(filter, sizeof(filter), "common_pid == %d", (int)sonde_launch__pid(l));
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .tracepoint = "syscalls:sys_enter_clock_nanosleep",
					 .tracepoint_filter = filter};
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(sonde_launch__pid(l), spool, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	while (sonde_launch__wait(l, WNOHANG, &status) == 0)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	char *text = ASSERT_NOT_NULL(test_read_file(truth, NULL));
	const char *rl = strstr(text, "rounds ");
	ASSERT_NOT_NULL(rl);
	uint64_t rounds = strtoull(rl + 7, NULL, 10);
	free(text);
	/* the shrink of the shallow half, the growth of the deep one: a loaded machine may
	 * leave time for one of them only, which is still a switch the filter must survive */
	ASSERT_UINT(sum.stack_switches, >=, 1);
	ASSERT_UINT(sum.lost_samples + sum.lost_events, ==, 0);
	ASSERT_UINT(sum.samples, ==, rounds);
	ASSERT_UINT(sum.samples_written + sum.empty_stacks, ==, rounds);
}
