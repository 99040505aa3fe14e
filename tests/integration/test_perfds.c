/* sonded's linux.perf data source over the real sockets: `sonde trace --txt` with a
 * PerfEventConfig, the trace decoded packet by packet (pftrace_util.c rebuilds each
 * PerfSample's stack from the sequence's interned callstacks, frames and names). */
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "client_util.h"
#include "ipc/sock.h"
#include "pftrace_util.h"
#include "split_util.h"

enum { NOBODY = 65534 };

struct rig {
	pid_t sonded;
	char psock[256], csock[256], log[256];
};

/* sonded on sockets in a directory anyone can reach, its log in a file; returns once
 * linux.perf is registered. */
static void rig_start(struct rig *r)
{
	chmod(test_tmpdir(), 0755);
	snprintf(r->psock, sizeof(r->psock), "%s", test_path("prod.sock"));
	snprintf(r->csock, sizeof(r->csock), "%s", test_path("cons.sock"));
	snprintf(r->log, sizeof(r->log), "%s", test_path("sonded.log"));
	const char *sonded = test_bin("sonded");
	r->sonded = fork();
	ASSERT(r->sonded >= 0);
	if (r->sonded == 0) {
		int fd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(97);
		execl(sonded, "sonded", "-p", r->psock, "-c", r->csock, "-x", "none", "-l", "info",
		      (char *)NULL);
		_exit(98);
	}
	double end = test_now() + 20;
	int fd;
	while ((fd = sonde__ipc_connect(r->csock)) < 0) {
		if (test_now() > end)
			FAIL("sonded does not listen on %s", r->csock);
		usleep(10000);
	}
	close(fd);
	client_wait_data_source(r->csock, "linux.perf");
}

static void rig_stop(struct rig *r)
{
	kill(r->sonded, SIGTERM);
	ASSERT_INT(test_wait(r->sonded, 20), ==, 0);
}

/* Runs `sonde trace --txt` with the config text; returns its output (status, stderr). */
static void trace(const struct rig *r, const char *cfg, const char *out, struct test_output *o)
{
	const char *path = test_path("cfg.txt");
	test_write_file(path, cfg, strlen(cfg));
	test_runf(o, 120, "%s trace --socket %s --txt -c %s -o %s", test_bin("sonde"), r->csock,
		  path, out);
}

static void decode(const char *path, struct pft_trace *t)
{
	size_t len;
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(path, &len));
	pft_decode(data, len, t);
	free(data);
}

static pid_t spawn_split(const char *path, const char *seconds)
{
	const char *argv[] = {path, seconds, NULL};
	return test_spawn(argv);
}

/* The CPU numbers a sample may carry. */
static uint32_t cpus_configured(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	return n > 0 ? (uint32_t)n : 1;
}

/* Every sample carries the CPU it was taken on (PerfSample.cpu). */
static void assert_cpus_set(const struct pft_trace *t)
{
	for (size_t i = 0; i < t->n_samples; i++)
		ASSERT_UINT(t->samples[i].cpu, <, cpus_configured());
}

/* Adds the samples of `sonde report --folded` on a spool of split recorded at 999 Hz. */
static void report_split(int seconds, struct split_counts *c)
{
	const char *spool = test_path("split.spool");
	struct test_output o;

	test_runf(&o, seconds + 90, "%s record -q -F 999 -o %s -- %s %d", test_bin("sonde"), spool,
		  test_prog("split"), seconds);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	split_add_spool(c, spool, "");
}

/* One trace of a running split through sonded's linux.perf (add[0]), and one `sonde
 * record` of another split to compare it with (add[1]). */
static void trace_split_once(void *ctx, int seconds, struct split_counts *add)
{
	const struct rig *r = ctx;
	struct test_output o;
	struct pft_trace t;
	char cfg[1024], run_s[16];
	const char *out = test_path("split.pftrace");

	snprintf(run_s, sizeof(run_s), "%d", seconds + 30);
	pid_t split = spawn_split(test_prog("split"), run_s);
	usleep(200000); /* past its start-up */
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 32768 fill_policy: DISCARD }\n"
		 "duration_ms: %d\n"
		 "incremental_state_config { clear_period_ms: 1000 }\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 999 counter: SW_CPU_CLOCK }\n"
		 "  callstack_sampling { scope { target_pid: %d } }\n"
		 "  ring_buffer_read_period_ms: 50 } } }\n",
		 seconds * 1000, (int)split);
	trace(r, cfg, out, &o);
	kill(split, SIGKILL);
	test_wait(split, 10);
	if (o.status != 0)
		FAIL("sonde trace exited %d:\n%s", o.status, o.err);
	ASSERT_NOT_CONTAINS(o.err, "linux.perf:");
	test_output_free(&o);

	decode(out, &t);
	/* one sequence of its own: not the service's (1) */
	ASSERT_INT(t.n_seq_ids, ==, 1);
	ASSERT_UINT(t.seq_ids[0], >=, 2);
	ASSERT_INT(t.missing_interned, ==, 0);
	/* the periodic clears re-emitted the defaults and the interning */
	ASSERT_INT(t.defaults_packets, >=, 2);
	ASSERT_UINT(t.timebase_freq, ==, 999);
	ASSERT_UINT(t.timebase_counter, ==, 1);
	char name[64];
	snprintf(name, sizeof(name), "%d=", (int)split);
	ASSERT_CONTAINS(t.process_names, name);
	ASSERT_CONTAINS(t.thread_names, "=split\n");
	assert_cpus_set(&t);
	pft_split(&t, (uint32_t)split, &add[0]);
	pft_free(&t);
	report_split(seconds, &add[1]);
}

TEST_TIMEOUT(perfds_split_through_sonde_trace_matches_report, 300)
{
	static const struct split_judge judge = {
		.tolerance = 5.0, .min_samples = 1200, .seconds = 4};
	struct split_counts acc[2];
	struct rig r;

	test_require_perf();
	rig_start(&r);
	/* the trace and the report each within 5 points of 60/30/10, so of each other */
	split_settle(&judge, trace_split_once, &r, acc, 2);
	rig_stop(&r);
	ASSERT_UINT(acc[0].all, >=, 300);
	ASSERT_UINT(acc[1].all, >=, 300);
	for (int k = 0; k < 3; k++)
		ASSERT_DOUBLE_NEAR(split_pct(&acc[0], k, false), split_pct(&acc[1], k, false), 5.0);
}

TEST_TIMEOUT(perfds_target_cmdline_with_exclusion, 180)
{
	struct rig r;
	struct test_output o;
	struct pft_trace t;
	char a[256], b[256], cfg[1024];
	const char *out = test_path("cmdline.pftrace");

	test_require_perf();
	/* names no other process on the machine has */
	snprintf(a, sizeof(a), "%s/pdsel_a%d", test_tmpdir(), (int)getpid());
	snprintf(b, sizeof(b), "%s/pdsel_b%d", test_tmpdir(), (int)getpid());
	for (int i = 0; i < 2; i++) {
		size_t len;
		char *bin = ASSERT_NOT_NULL(test_read_file(test_prog("split"), &len));
		test_write_file(i ? b : a, bin, len);
		chmod(i ? b : a, 0755);
		free(bin);
	}
	rig_start(&r);
	pid_t pa = spawn_split(a, "300"), pb = spawn_split(b, "300");
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 16384 fill_policy: DISCARD }\n"
		 "duration_ms: 2000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 499 }\n"
		 "  callstack_sampling { scope { target_cmdline: \"pdsel_a%d\"\n"
		 "    target_cmdline: \"/any/dir/pdsel_b%d\" exclude_cmdline: \"pdsel_b%d\" } }\n"
		 "} } }\n",
		 (int)getpid(), (int)getpid(), (int)getpid());
	/* sessions until pdsel_a's samples accumulated, each judged whole, up to a deadline: a
	 * loaded machine leaves it a part of a CPU, so one window may hold fewer */
	size_t of_a = 0;
	for (double end = test_now() + 90; of_a < 10 && test_now() < end;) {
		trace(&r, cfg, out, &o);
		if (o.status != 0)
			FAIL("sonde trace exited %d:\n%s", o.status, o.err);
		test_output_free(&o);
		decode(out, &t);
		printf("%zu samples of pdsel_a, %zu of pdsel_b\n", pft_samples_of(&t, (uint32_t)pa),
		       pft_samples_of(&t, (uint32_t)pb));
		ASSERT_UINT(pft_samples_of(&t, (uint32_t)pb), ==, 0);
		assert_cpus_set(&t); /* per process as system-wide */
		ASSERT_UINT(t.n_samples, ==, pft_samples_of(&t, (uint32_t)pa));
		of_a += pft_samples_of(&t, (uint32_t)pa);
		pft_free(&t);
	}
	kill(pa, SIGKILL);
	kill(pb, SIGKILL);
	test_wait(pa, 10);
	test_wait(pb, 10);
	rig_stop(&r);
	ASSERT_UINT(of_a, >=, 10);
}

/* `sonde trace` as uid nobody asking for a root process: refused, said in the trace, in
 * the consumer's output and in sonded's log. */
TEST_TIMEOUT(perfds_unprivileged_consumer_is_refused_root_target, 120)
{
	struct rig r;
	struct pft_trace t;
	char dir[512], cfg[1024], out[600], errfile[600], cfgfile[600];

	if (geteuid() != 0)
		SKIP("needs root to run a root target and switch to uid nobody");
	rig_start(&r);
	pid_t target = spawn_split(test_prog("split"), "30");
	snprintf(dir, sizeof(dir), "%s/nobody", test_tmpdir());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	snprintf(out, sizeof(out), "%s/out.pftrace", dir);
	snprintf(errfile, sizeof(errfile), "%s/err.txt", dir);
	snprintf(cfgfile, sizeof(cfgfile), "%s/cfg.txt", dir);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 4096 }\nduration_ms: 500\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 99 } callstack_sampling { scope { target_pid: %d } } } } "
		 "}\n",
		 (int)target);
	test_write_file(cfgfile, cfg, strlen(cfg));
	chmod(cfgfile, 0644);
	const char *sonde = test_copy_for_anyone(test_bin("sonde"));
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(99);
		execl(sonde, "sonde", "trace", "--socket", r.csock, "--txt", "-c", cfgfile, "-o",
		      out, (char *)NULL);
		_exit(98);
	}
	int status = test_wait(child, 60);
	char *err = ASSERT_NOT_NULL(test_read_file(errfile, NULL));
	char want[256];
	snprintf(want, sizeof(want),
		 "sonde trace: linux.perf: refused: consumer uid 65534 may not profile pid %d "
		 "(split, uid 0)",
		 (int)target);
	ASSERT_CONTAINS(err, want);
	ASSERT_INT(status, ==, 1);
	free(err);
	kill(target, SIGKILL);
	test_wait(target, 10);
	decode(out, &t);
	ASSERT_CONTAINS(t.errors, "refused: consumer uid 65534 may not profile pid");
	ASSERT_UINT(t.n_samples, ==, 0);
	pft_free(&t);
	rig_stop(&r);
	char *log = ASSERT_NOT_NULL(test_read_file(r.log, NULL));
	ASSERT_CONTAINS(log, "consumer uid 65534): refused: consumer uid 65534 may not profile");
	free(log);
}

TEST_TIMEOUT(perfds_guardrail_stops_the_data_source, 120)
{
	struct rig r;
	struct test_output o;
	struct pft_trace t;
	char cfg[1024];
	const char *out = test_path("guard.pftrace");

	test_require_perf();
	rig_start(&r);
	pid_t split = spawn_split(test_prog("split"), "30");
	/* any daemon is above 1 KiB: the first check stops it */
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 4096 }\nduration_ms: 1000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 99 } callstack_sampling { scope { target_pid: %d } }\n"
		 "  max_daemon_memory_kb: 1 } } }\n",
		 (int)split);
	trace(&r, cfg, out, &o);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "linux.perf: warning: stopped: sonde probes uses ");
	ASSERT_CONTAINS(o.err, "above max_daemon_memory_kb 1 (guardrail)");
	test_output_free(&o);
	kill(split, SIGKILL);
	test_wait(split, 10);
	rig_stop(&r);
	decode(out, &t);
	ASSERT_INT(t.guardrail_stops, ==, 1);
	pft_free(&t);
}

TEST_TIMEOUT(perfds_bad_config_is_refused, 120)
{
	struct rig r;
	struct test_output o;
	struct pft_trace t;
	char cfg[1024];
	const char *out = test_path("bad.pftrace");

	rig_start(&r);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 4096 }\nduration_ms: 300\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 99 } callstack_sampling { scope { target_pid: %d } }\n"
		 "  ring_buffer_pages: 3 } } }\n",
		 (int)getpid());
	trace(&r, cfg, out, &o);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde trace: linux.perf: config refused: ring_buffer_pages 3 is "
			       "not a power of two\n");
	test_output_free(&o);
	rig_stop(&r);
	decode(out, &t);
	ASSERT_CONTAINS(t.errors, "ring_buffer_pages 3 is not a power of two");
	ASSERT_UINT(t.n_samples, ==, 0);
	pft_free(&t);
	/* a tracepoint tracefs does not have: named, before anything is opened */
	rig_start(&r);
	trace(&r,
	      "buffers { size_kb: 4096 }\nduration_ms: 300\n"
	      "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
	      "  timebase { tracepoint { name: \"sched/no_such_tracepoint\" } } } } }\n",
	      out, &o);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "sonde trace: linux.perf: config refused: unknown tracepoint "
			       "sched:no_such_tracepoint (tracefs has no "
			       "events/sched/no_such_tracepoint)\n");
	test_output_free(&o);
	rig_stop(&r);
}

/* No target: system-wide. A CPU-bound split the config never names is found, each of
 * its samples carries a CPU that exists, and its stacks are split's own paths
 * (pft_split fails on a compute_* function reached any other way). */
TEST_EXCLUSIVE(perfds_system_wide_finds_an_unnamed_busy_process, 300)
{
	struct rig r;
	struct test_output o;
	struct pft_trace t;
	const char *out = test_path("sys.pftrace");
	const char *cfg = "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
			  "duration_ms: 3000\n"
			  "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
			  "  timebase { frequency: 199 counter: SW_CPU_CLOCK }\n"
			  "  ring_buffer_read_period_ms: 50 } } }\n";
	struct split_counts c = {0};
	size_t mine = 0;

	test_require_perf();
	rig_start(&r);
	pid_t split = spawn_split(test_prog("split"), "60");
	/* a loaded machine may give it little CPU in one session, and reading every process
	 * at the start (longer in a sanitized build) may take most of it: sessions until it
	 * has 20 samples, at most 10 */
	for (int round = 0; round < 10 && mine < 20; round++) {
		trace(&r, cfg, out, &o);
		if (o.status != 0)
			FAIL("sonde trace exited %d:\n%s", o.status, o.err);
		ASSERT_NOT_CONTAINS(o.err, "linux.perf: error");
		test_output_free(&o);
		decode(out, &t);
		ASSERT_INT(t.missing_interned, ==, 0);
		ASSERT_UINT(t.timebase_freq, ==, 199);
		assert_cpus_set(&t);
		mine += pft_samples_of(&t, (uint32_t)split);
		char name[64];
		snprintf(name, sizeof(name), "%d=", (int)split);
		if (pft_samples_of(&t, (uint32_t)split))
			ASSERT_CONTAINS(t.process_names, name);
		pft_split(&t, (uint32_t)split, &c);
		pft_free(&t);
	}
	/* exclude_pid without a target: system-wide still, without split */
	char ex[1024];
	snprintf(ex, sizeof(ex),
		 "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
		 "duration_ms: 1000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { exclude_pid: %d } }\n"
		 "  ring_buffer_read_period_ms: 50 } } }\n",
		 (int)split);
	trace(&r, ex, out, &o);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "linux.perf: warning: system-wide: ");
	ASSERT_CONTAINS(o.err, " processes left out (excluded, or not the consumer's to profile)");
	test_output_free(&o);
	decode(out, &t);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)split), ==, 0);
	pft_free(&t);
	kill(split, SIGKILL);
	test_wait(split, 10);
	rig_stop(&r);
	printf("%zu samples of the unnamed split (%llu in compute_*)\n", mine,
	       (unsigned long long)c.all);
	ASSERT_UINT(mine, >=, 20);
	ASSERT_UINT(c.all * 10, >=, (uint64_t)mine * 8);
}

/* A tracepoint timebase: sched/sched_switch with a filter on the thread switched out,
 * system-wide, takes exactly sleep_loop's switch-outs, every one a sample whose stack
 * goes through its sleep_caller; and with a target_pid and no filter, its own. */
TEST_TIMEOUT(perfds_tracepoint_timebase_samples_a_sleeping_program, 300)
{
	struct rig r;
	struct test_output o;
	struct pft_trace t;
	char cfg[1024];
	const char *out = test_path("tp.pftrace");

	test_require_perf();
	if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) != 0)
		SKIP("no readable tracefs with sched:sched_switch");
	rig_start(&r);
	const char *argv[] = {test_prog("sleep_loop"), "1000000", NULL};
	pid_t sl = test_spawn(argv);
	for (int scoped = 0; scoped < 2; scoped++) {
		/* ~900 sleeps a second, fewer on a loaded machine, and a system-wide start
		 * reads every process first: sessions until enough accumulated, each judged
		 * whole, up to a deadline rather than a count of sessions */
		size_t n = 0, want = scoped ? 50 : 100;
		for (double end = test_now() + 90; n < want && test_now() < end;) {
			if (scoped)
				snprintf(cfg, sizeof(cfg),
					 "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
					 "duration_ms: 2000\n"
					 "data_sources { config { name: \"linux.perf\" "
					 "perf_event_config {\n"
					 "  timebase { period: 2 tracepoint { name: "
					 "\"sched:sched_switch\" } }\n"
					 "  callstack_sampling { scope { target_pid: %d } }\n"
					 "  ring_buffer_read_period_ms: 50 } } }\n",
					 (int)sl);
			else
				snprintf(cfg, sizeof(cfg),
					 "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
					 "duration_ms: 2000\n"
					 "data_sources { config { name: \"linux.perf\" "
					 "perf_event_config {\n"
					 "  timebase { tracepoint { name: \"sched/sched_switch\"\n"
					 "    filter: \"prev_pid == %d\" } }\n"
					 "  ring_buffer_read_period_ms: 50 } } }\n",
					 (int)sl);
			trace(&r, cfg, out, &o);
			if (o.status != 0)
				FAIL("sonde trace exited %d:\n%s", o.status, o.err);
			ASSERT_NOT_CONTAINS(o.err, "linux.perf:");
			test_output_free(&o);
			decode(out, &t);
			ASSERT_STR_EQ(t.timebase_tracepoint, "sched:sched_switch");
			ASSERT_UINT(t.timebase_period, ==, scoped ? 2 : 1);
			ASSERT_UINT(t.timebase_counter, ==, 0);
			size_t through = 0, mine = pft_samples_of(&t, (uint32_t)sl);
			for (size_t i = 0; i < t.n_samples; i++)
				through += t.samples[i].pid == (uint32_t)sl && t.samples[i].stack &&
					   strstr(t.samples[i].stack, ";main;sleep_caller;");
			printf("%s: %zu samples of sleep_loop, %zu through sleep_caller, %zu in "
			       "all\n",
			       scoped ? "target_pid, period 2" : "system-wide, filtered", mine,
			       through, t.n_samples);
			ASSERT_UINT(t.n_samples, ==, mine); /* the filter, or the target */
			ASSERT_UINT(through * 10, >=, mine * 9);
			n += mine;
			pft_free(&t);
		}
		ASSERT_UINT(n, >=, want);
	}
	kill(sl, SIGKILL);
	test_wait(sl, 10);
	rig_stop(&r);
}

/* The thread CPU time of cputime_log at monotonic time ts, interpolated in its log. */
static double cpu_at(const uint64_t (*log)[2], size_t n, uint64_t ts)
{
	size_t lo = 0, hi = n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (log[mid][0] <= ts)
			lo = mid;
		else
			hi = mid;
	}
	if (hi >= n || log[hi][0] == log[lo][0])
		return (double)log[lo][1];
	double f = (double)(ts - log[lo][0]) / (double)(log[hi][0] - log[lo][0]);
	return (double)log[lo][1] + f * (double)(log[hi][1] - log[lo][1]);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Awaits the k-th session sonded started (its log says so as it starts the data sources). */
static void await_session_started(const struct rig *r, size_t k)
{
	for (double end = test_now() + 120;; usleep(20000)) {
		char *log = test_read_file(r->log, NULL);
		size_t n = 0;
		for (const char *at = log; at && (at = strstr(at, " started with ")); at++)
			n++;
		free(log);
		if (n >= k)
			return;
		if (test_now() > end)
			FAIL("sonded did not start session %zu within 120 s", k);
	}
}

/* Awaits linux.perf's events on pid: the probes log that they record it once its events
 * are open and enabled (the service's start is only a request to them). */
static void await_recording(const struct rig *r, pid_t pid)
{
	char want[64];

	snprintf(want, sizeof(want), "linux.perf: recording pid %d\n", (int)pid);
	for (double end = test_now() + 120;; usleep(20000)) {
		char *log = test_read_file(r->log, NULL);
		bool found = log && strstr(log, want);
		free(log);
		if (found)
			return;
		if (test_now() > end)
			FAIL("linux.perf did not record pid %d within 120 s", (int)pid);
	}
}

/* timebase.period reaches the kernel as a period: the samples of one busy thread (kept on
 * one CPU, so that one event samples it) are PERIOD ns of its CPU time apart. Through a
 * frequency, 35 ms would come back as 1e9 / 28 Hz = 35.71 ms. The target logs its own
 * CPU time against CLOCK_MONOTONIC (the trace's clock); the median spacing of ~85 samples
 * is compared, so a sample the machine delayed or one that fell in a system call (user
 * frames only: not taken) does not move it. The target works from the session's start
 * for 3 s of CPU time, however long a loaded machine takes to give it that, and the
 * session ends when it exits: a session of fixed length gave a starved target too little
 * CPU time to sample (103 log entries in 5 s where 1000 were needed). */
TEST_TIMEOUT(perfds_period_is_cpu_time_between_samples, 300)
{
	enum { PERIOD = 35000000, MIN_GAPS = 30 };
	struct rig r;
	struct pft_trace t;
	char cfg[1024];
	const char *out = test_path("period.pftrace"), *logf = test_path("cputime.log");
	const char *cfgf = test_path("period.txt");
	double *gap = NULL;
	size_t n = 0;

	test_require_perf();
	rig_start(&r);
	/* sessions until MIN_GAPS spacings in all: the data source starts a moment after the
	 * service says so, and the target's first samples may come before it */
	for (int round = 1; round <= 4 && n < MIN_GAPS; round++) {
		int go;
		const char *argv[] = {test_prog("cputime_log"), "3", logf, NULL};
		pid_t pid = test_spawn_fed(&go, argv);
		snprintf(cfg, sizeof(cfg),
			 "buffers { size_kb: 16384 fill_policy: DISCARD }\n"
			 "duration_ms: 240000\n"
			 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
			 "  timebase { period: %d counter: SW_CPU_CLOCK }\n"
			 "  callstack_sampling { scope { target_pid: %d } } } } }\n",
			 PERIOD, (int)pid);
		test_write_file(cfgf, cfg, strlen(cfg));
		const char *trace_argv[] = {test_bin("sonde"), "trace", "--socket", r.csock, "--txt",
					    "-c", cfgf, "-o", out, NULL};
		pid_t tr = test_spawn(trace_argv);
		await_session_started(&r, (size_t)round);
		close(go);
		ASSERT_INT(test_wait(pid, 240), ==, 0);
		kill(tr, SIGINT);
		ASSERT_INT(test_wait(tr, 120), ==, 0);

		size_t len;
		uint64_t(*log)[2] = ASSERT_NOT_NULL((uint64_t(*)[2])test_read_file(logf, &len));
		size_t n_log = len / sizeof(*log);
		ASSERT_UINT(n_log, >, 1000);
		decode(out, &t);
		ASSERT_UINT(t.timebase_period, ==, PERIOD);
		gap = ASSERT_NOT_NULL(realloc(gap, (n + t.n_samples + 1) * sizeof(*gap)));
		double prev = -1;
		for (size_t i = 0; i < t.n_samples; i++) {
			const struct pft_sample *s = &t.samples[i];
			if (s->pid != (uint32_t)pid || s->ts <= log[0][0] ||
			    s->ts >= log[n_log - 1][0])
				continue;
			double c = cpu_at(log, n_log, s->ts);
			if (prev >= 0)
				gap[n++] = c - prev;
			prev = c;
		}
		printf("session %d: %zu samples, %zu spacings in all\n", round, t.n_samples, n);
		free(log);
		pft_free(&t);
		unlink(logf);
	}
	rig_stop(&r);
	ASSERT_UINT(n, >=, MIN_GAPS);
	qsort(gap, n, sizeof(*gap), cmp_double);
	double median = gap[n / 2];
	ASSERT_DOUBLE_NEAR(median, (double)PERIOD, PERIOD * 0.01);
	free(gap);
}

/* BOOTTIME - MONOTONIC now: what the data source adds to its sched events' timestamps. */
static int64_t boot_offset_ns(void)
{
	struct timespec b, m;

	clock_gettime(CLOCK_BOOTTIME, &b);
	clock_gettime(CLOCK_MONOTONIC, &m);
	return ((int64_t)b.tv_sec - m.tv_sec) * 1000000000ll + (b.tv_nsec - m.tv_nsec);
}

/* The time sched events say tid ran again after the switch-out at index i (its next
 * switch-in, on any CPU), or 0 when none does or when the trace lacks it: a later
 * switch-out of tid before any switch-in of it says it ran again unseen (this guest's
 * kernel delivers no sched_switch event for some switches from its idle task), and the
 * next switch-in would end the wait a whole run of it late. */
static uint64_t switch_in_after(const struct pft_trace *t, size_t i, uint32_t tid)
{
	uint64_t in = 0, out = 0, from = t->sched[i].ts;

	for (size_t k = 0; k < t->n_sched; k++) {
		const struct pft_sched *e = &t->sched[k];
		if (e->waking || e->ts <= from)
			continue;
		if (e->next_pid == tid && (!in || e->ts < in))
			in = e->ts;
		if (e->prev_pid == tid && (!out || e->ts < out))
			out = e->ts;
	}
	return out && (!in || out < in) ? 0 : in;
}

/* The truth file of offcpu_split: its pid and the nanoseconds its rounds spent in fn. */
static uint64_t truth_of(const char *path, const char *key)
{
	char *txt = ASSERT_NOT_NULL(test_read_file(path, NULL));
	const char *at = strstr(txt, key);
	uint64_t v = at ? strtoull(at + strlen(key) + 1, NULL, 10) : 0;

	free(txt);
	if (!at)
		FAIL("%s has no %s", path, key);
	return v;
}

/* What off-CPU traces of offcpu_split accumulate. */
struct offcpu_seen {
	uint64_t nap_ns, pipe_ns;	/* off the CPU, by the PerfSample at the switch-out */
	uint64_t nap_truth, pipe_truth; /* what the program measured */
	size_t sleeps, sleeps_to_main, samples;
};

/* Checks one off-CPU trace of process pid (main thread tid pid) and adds to *s: every
 * PerfSample of it is at a switch-out of its thread (no on-CPU sample), all on one clock
 * offset from the sched events, and the main thread's off-CPU time in nap and wait_pipe. */
static void offcpu_trace_check(const struct pft_trace *t, uint32_t pid, struct offcpu_seen *s)
{
	int64_t off = boot_offset_ns(), d = 0;
	bool have_d = false;

	ASSERT_INT(t->missing_interned, ==, 0);
	ASSERT_STR_EQ(t->timebase_tracepoint, "sched:sched_switch");
	ASSERT_UINT(t->timebase_counter, ==, 0);
	for (size_t i = 0; i < t->n_samples; i++) {
		const struct pft_sample *p = &t->samples[i];
		if (p->pid != pid)
			continue;
		/* the sched event of this switch-out: the sample's time plus one offset, the
		 * same for every sample, BOOTTIME - MONOTONIC as this process reads it */
		size_t at = t->n_sched;
		for (size_t k = 0; k < t->n_sched; k++) {
			const struct pft_sched *e = &t->sched[k];
			if (e->waking || e->prev_pid != p->tid)
				continue;
			int64_t dk = (int64_t)(e->ts - p->ts);
			if (have_d) {
				if (dk == d) {
					at = k;
					break;
				}
			} else if (llabs(dk - off) < 1000000 &&
				   (at == t->n_sched ||
				    llabs(dk - off) < llabs((int64_t)(t->sched[at].ts - p->ts) - off))) {
				/* the first sample's offset: its nearest switch-out, not the first
				 * in the file within 1 ms (the CPUs' bundles are not in time order,
				 * and a thread's switch-outs can be under 1 ms apart) */
				at = k;
			}
		}
		if (!have_d && at < t->n_sched) {
			d = (int64_t)(t->sched[at].ts - p->ts);
			have_d = true;
		}
		if (at == t->n_sched)
			FAIL("PerfSample of tid %u at %llu is at no switch-out of it: an on-CPU "
			     "sample?",
			     p->tid, (unsigned long long)p->ts);
		s->samples++;
		if (p->tid != pid)
			continue;
		bool nap = p->stack && strstr(p->stack, ";nap;");
		bool pipe = p->stack && strstr(p->stack, ";wait_pipe;");
		uint64_t in = switch_in_after(t, at, p->tid);
		if ((nap || pipe) && in) {
			*(nap ? &s->nap_ns : &s->pipe_ns) += in - t->sched[at].ts;
			s->sleeps++;
			s->sleeps_to_main += strstr(p->stack, "main;nap;") ||
					     strstr(p->stack, "main;wait_pipe;");
		}
	}
}

/* A sched/sched_switch timebase with callstack_sampling is an off-CPU profile: the trace
 * of offcpu_split (run whole inside the session, from a shell that execs it) holds its
 * switch-outs as sched_switch events and, at each, a PerfSample whose stack reaches main
 * through the sleeping function, and no on-CPU sample; the off-CPU time in nap and
 * wait_pipe adds up to what the program measured (within 10 %, accumulated). */
TEST_EXCLUSIVE(perfds_offcpu_profile_puts_sleeps_on_the_timeline, 300)
{
	struct rig r;
	struct pft_trace t;
	char cfg[1024], sh[2 * PATH_MAX], out[PATH_MAX], truth[PATH_MAX];
	struct offcpu_seen s = {0};

	/* copies: test_path's eight buffers come round again in a run of several rounds */
	snprintf(out, sizeof(out), "%s", test_path("offcpu.pftrace"));
	snprintf(truth, sizeof(truth), "%s", test_path("offcpu.truth"));

	test_require_perf();
	if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) != 0)
		SKIP("no readable tracefs with sched:sched_switch");
	rig_start(&r);
	/* rounds of sessions, adding up, until 30 sleeps of the main thread and while its
	 * off-CPU time is off (the data source starts a moment after the service says so, or
	 * lost records on a loaded machine) */
	for (int round = 0; round < 6 && (s.sleeps < 30 || s.nap_ns * 10 < s.nap_truth * 9 ||
					  s.pipe_ns * 10 < s.pipe_truth * 9);
	     round++) {
		int go;
		unlink(truth);
		/* the session attaches to the shell, which execs offcpu_split once the session
		 * has started, and ends once it has exited: not a shell asleep for 2 s and a
		 * session of 6 s, which a loaded machine ended before the program (a CI run's
		 * trace had 15.89 s of its 21.81 s of pipe waits) */
		snprintf(sh, sizeof(sh), "read go; exec %s 2 %s", test_prog("offcpu_split"), truth);
		const char *argv[] = {"/bin/sh", "-c", sh, NULL};
		pid_t pid = test_spawn_fed(&go, argv);
		snprintf(cfg, sizeof(cfg),
			 "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
			 "duration_ms: 240000\n"
			 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
			 "  timebase { tracepoint { name: \"sched/sched_switch\" } }\n"
			 "  callstack_sampling { scope { target_pid: %d } }\n"
			 "  ring_buffer_read_period_ms: 50 } } }\n",
			 (int)pid);
		const char *cfgf = test_path("cfg.txt");
		test_write_file(cfgf, cfg, strlen(cfg));
		char errf[PATH_MAX + 8];
		snprintf(errf, sizeof(errf), "%s.err", out);
		char cmd[4 * PATH_MAX];
		snprintf(cmd, sizeof(cmd), "exec %s trace --socket %s --txt -c %s -o %s 2>%s",
			 test_bin("sonde"), r.csock, cfgf, out, errf);
		const char *trace_argv[] = {"/bin/sh", "-c", cmd, NULL};
		pid_t tr = test_spawn(trace_argv);
		await_session_started(&r, (size_t)round + 1);
		await_recording(&r, pid);
		close(go);
		ASSERT_INT(test_wait(pid, 120), ==, 0);
		kill(tr, SIGINT);
		int status = test_wait(tr, 120);
		char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
		if (status != 0)
			FAIL("sonde trace exited %d:\n%s", status, err);
		ASSERT_NOT_CONTAINS(err, "linux.perf:");
		free(err);
		decode(out, &t);
		struct offcpu_seen one = {0};
		offcpu_trace_check(&t, (uint32_t)pid, &one);
		pft_free(&t);
		uint64_t nap = truth_of(truth, "nap"), pipe = truth_of(truth, "wait_pipe");
		printf("round %d: %zu samples, %zu sleeps (%zu to main); nap %.3f s of %.3f, "
		       "wait_pipe %.3f s of %.3f\n",
		       round, one.samples, one.sleeps, one.sleeps_to_main, one.nap_ns / 1e9,
		       nap / 1e9, one.pipe_ns / 1e9, pipe / 1e9);
		if (one.nap_ns * 10 < nap * 9 || one.pipe_ns * 10 < pipe * 9) {
			/* a round short of its truth: its trace stays for a failure's kept files */
			char kept[PATH_MAX + 32];
			snprintf(kept, sizeof(kept), "%s.round%d", out, round);
			ASSERT_OK(rename(out, kept));
		}
		s.nap_ns += one.nap_ns;
		s.pipe_ns += one.pipe_ns;
		s.nap_truth += nap;
		s.pipe_truth += pipe;
		s.sleeps += one.sleeps;
		s.sleeps_to_main += one.sleeps_to_main;
		s.samples += one.samples;
	}
	rig_stop(&r);
	ASSERT_UINT(s.sleeps, >=, 30);
	ASSERT_UINT(s.sleeps_to_main * 10, >=, s.sleeps * 9);
	/* off the CPU from switch-out to switch-in: the call's time less its few
	 * microseconds on the CPU */
	ASSERT_UINT(s.nap_ns * 10, >=, s.nap_truth * 9);
	ASSERT_UINT(s.nap_ns, <=, s.nap_truth);
	ASSERT_UINT(s.pipe_ns * 10, >=, s.pipe_truth * 9);
	ASSERT_UINT(s.pipe_ns, <=, s.pipe_truth);
}
