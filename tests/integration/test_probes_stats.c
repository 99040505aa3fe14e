/* linux.process_stats and linux.sys_stats on this machine: the test process in the tree,
 * threads named on demand from linux.ftrace's sched events, per-process counters, meminfo
 * at its period, and protoc reading all of it. */
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "probes/ftrace.h"
#include "probes/procstats.h"
#include "probes/sysstats.h"
#include "probes_util.h"

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

TEST(procstats_tree_holds_this_process_and_its_threads)
{
	struct procstats_config c = {.scan_all_processes_on_start = true, .on_demand = true};
	struct buf trace = BUF_INIT;
	struct procstats *s =
		ASSERT_NOT_NULL(sonde__procstats_new(&c, NULL, probes_collect, &trace));
	char want[64];

	ASSERT_OK(sonde__procstats_start(s));
	sonde__procstats_free(s);
	char *text = probes_protoc_decode(&trace);
	snprintf(want, sizeof(want), "pid: %d\n", getpid());
	ASSERT_CONTAINS(text, "process_tree {");
	ASSERT_CONTAINS(text, want);
	ASSERT_CONTAINS(text, "sonde-test"); /* the cmdline's argv0 */
	ASSERT_CONTAINS(text, "pid: 1\n");
	ASSERT_CONTAINS(text, "is_kthread: true");
	ASSERT_CONTAINS(text, "collection_end_timestamp:");
	free(text);
	sonde__buf_free(&trace);
}

struct stats_seen {
	int pid, found;
	uint64_t rss, utime_ns;
};

static void find_stats(void *ctx, const uint8_t *p, size_t n)
{
	struct stats_seen *w = ctx;
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 9 || f.wire != PB_LEN)
			continue;
		struct pb_reader ps = pb_sub(&f);
		while (sonde__pb_next(&ps, &g) > 0) {
			if (g.num != 1 || g.wire != PB_LEN)
				continue;
			struct pb_reader pr = pb_sub(&g);
			int pid = -1;
			uint64_t rss = 0, ut = 0;
			while (sonde__pb_next(&pr, &h) > 0) {
				if (h.num == 1)
					pid = (int)h.u;
				if (h.num == 3)
					rss = h.u;
				if (h.num == 21)
					ut = h.u;
			}
			if (pid == w->pid)
				w->found++, w->rss = rss, w->utime_ns = ut;
		}
	}
}

TEST(procstats_poll_reports_this_process)
{
	struct procstats_config c = {.proc_stats_poll_ms = 100};
	struct buf trace = BUF_INIT;
	struct procstats *s =
		ASSERT_NOT_NULL(sonde__procstats_new(&c, NULL, probes_collect, &trace));
	uint64_t start = now_ms(), t;
	struct stats_seen w = {.pid = getpid()};

	/* five polls, however late a loaded machine runs the ticks; never more often than
	 * the period */
	while (w.found < 5) {
		t = now_ms();
		ASSERT_UINT(t - start, <, 20000);
		int64_t d = ASSERT_OK(sonde__procstats_tick(s, t));
		ASSERT_INT(d, <=, 100);
		w = (struct stats_seen){.pid = getpid()};
		probes_each_packet(&trace, find_stats, &w);
		if (d > 0)
			usleep((useconds_t)d * 1000);
	}
	ASSERT_INT(w.found, <=, (int)((now_ms() - start) / 100) + 1);
	sonde__procstats_free(s);
	ASSERT_UINT(w.rss, >, 0);
	char *text = probes_protoc_decode(&trace);
	ASSERT_CONTAINS(text, "process_stats {");
	ASSERT_CONTAINS(text, "oom_score_adj:");
	free(text);
	sonde__buf_free(&trace);
}

/* The known workload's thread, named by linux.ftrace's sched events, appears in the
 * tree with its name: the on-demand path (record_thread_names). */
TEST_TIMEOUT(procstats_names_threads_ftrace_sees, 60)
{
	probes_require_tracefs();
	static char events[1][FTRACE_EVENT_NAME_MAX] = {"sched/sched_switch"};
	struct ftrace_config fc = {.events = events, .nevents = 1, .drain_period_ms = 20};
	struct procstats_config pc = {.record_thread_names = true, .on_demand = true};
	struct buf trace = BUF_INIT;
	char lockdir[512];
	snprintf(lockdir, sizeof(lockdir), "%s/locks", test_tmpdir());
	struct procstats *ps =
		ASSERT_NOT_NULL(sonde__procstats_new(&pc, NULL, probes_collect, &trace));
	struct ftrace_opts o = {.sz = sizeof(o),
				.instance = probes_test_instance(),
				.lock_dir = lockdir,
				.on_pid = sonde__procstats_on_pid,
				.pid_ctx = ps};
	struct ftrace_session *fs =
		ASSERT_NOT_NULL(sonde__ftrace_session_new(&fc, &o, probes_collect, &trace));
	/* The sleeper sleeps 1 ms 2000 times: alive for a while after it is first seen. */
	const char *argv[] = {test_prog("ftrace_sleeper"), "2000", probes_sleeper_name(), NULL};
	pid_t pid = test_spawn(argv);
	int status;
	for (int i = 0; i < 25; i++) {
		usleep(20000);
		ASSERT_OK(sonde__ftrace_session_drain(fs));
		ASSERT_OK(sonde__procstats_flush(ps));
	}
	ASSERT_OK(sonde__ftrace_session_stop(fs));
	ASSERT_OK(sonde__procstats_flush(ps));
	sonde__ftrace_session_free(fs);
	sonde__procstats_free(ps);
	waitpid(pid, &status, 0);
	char *text = probes_protoc_decode(&trace);
	ASSERT_CONTAINS(text, "threads {");
	char want[64];
	snprintf(want, sizeof(want), "name: \"%s\"", probes_sleeper_name());
	ASSERT_CONTAINS(text, want);
	snprintf(want, sizeof(want), "tgid: %d\n", pid);
	ASSERT_CONTAINS(text, want);
	free(text);
	sonde__buf_free(&trace);
}

struct meminfo_seen {
	uint64_t ts[64];
	int n, with_total, with_cpu;
};

static void find_meminfo(void *ctx, const uint8_t *p, size_t n)
{
	struct meminfo_seen *m = ctx;
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g;
	uint64_t ts = 0;
	bool mem = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 8)
			ts = f.u;
		if (f.num != 7 || f.wire != PB_LEN)
			continue;
		struct pb_reader ss = pb_sub(&f);
		while (sonde__pb_next(&ss, &g) > 0) {
			mem |= g.num == 1;
			m->with_cpu += g.num == 3;
		}
	}
	if (mem && m->n < 64)
		m->ts[m->n++] = ts;
}

/* The ticks of a sysstats on a clock the test moves: when (on that clock) each packet
 * with meminfo, and each with cpu_stat, was emitted. */
struct tick_times {
	uint64_t now;
	struct buf *trace;
	uint64_t mem_at[64], cpu_at[64];
	int n_mem, n_cpu;
};

static int tick_emit(void *ctx, const void *packet, size_t len)
{
	struct tick_times *tt = ctx;
	struct meminfo_seen m = {0};

	find_meminfo(&m, packet, len);
	if (m.n && tt->n_mem < 64)
		tt->mem_at[tt->n_mem++] = tt->now;
	if (m.with_cpu && tt->n_cpu < 64)
		tt->cpu_at[tt->n_cpu++] = tt->now;
	return probes_collect(tt->trace, packet, len);
}

/* The periods on the clock passed to sonde__sysstats_tick, which the test moves: every
 * sample at its due time and none between, a late tick keeping the phase, a whole missed
 * period skipped. No real time passes. */
TEST(sysstats_meminfo_at_its_period)
{
	static struct sysstats_config c = {.meminfo_period_ms = 100, .stat_period_ms = 250};
	struct buf trace = BUF_INIT;
	struct tick_times tt = {.now = 5000000, .trace = &trace};
	const uint64_t t0 = tt.now;
	c.meminfo_counters[0] = 1, c.meminfo_counters[1] = 2, c.nmeminfo = 2;
	struct sysstats *s = ASSERT_NOT_NULL(sonde__sysstats_new(&c, NULL, NULL, tick_emit, &tt));

	/* on time: ticks exactly when it asks, for 1050 ms */
	while (tt.now < t0 + 1050) {
		int64_t d = ASSERT_OK(sonde__sysstats_tick(s, tt.now));
		ASSERT_INT(d, >, 0);
		ASSERT_INT(d, <=, 100);
		tt.now += (uint64_t)d;
	}
	ASSERT_INT(tt.n_mem, ==, 11); /* 0, 100, ..., 1000 */
	for (int i = 0; i < tt.n_mem; i++)
		ASSERT_UINT(tt.mem_at[i] - t0, ==, 100 * (uint64_t)i);
	ASSERT_INT(tt.n_cpu, ==, 5); /* stat at 0, 250, ..., 1000 */
	for (int i = 0; i < tt.n_cpu; i++)
		ASSERT_UINT(tt.cpu_at[i] - t0, ==, 250 * (uint64_t)i);
	/* now at 1100, meminfo due: a tick 30 ms late samples, and the next is due at 1200,
	 * the phase kept, not at 1230 */
	tt.now = t0 + 1130;
	ASSERT_INT(ASSERT_OK(sonde__sysstats_tick(s, tt.now)), ==, 70);
	ASSERT_INT(tt.n_mem, ==, 12);
	/* a tick 250 ms late (at 1450: 1200, 1300 and 1400 missed) samples once, and the next
	 * is a period after it */
	tt.now = t0 + 1450;
	int n_before = tt.n_mem;
	ASSERT_INT(ASSERT_OK(sonde__sysstats_tick(s, tt.now)), ==, 50); /* stat due at 1500 */
	ASSERT_INT(tt.n_mem, ==, n_before + 1);
	tt.now = t0 + 1500;
	ASSERT_INT(ASSERT_OK(sonde__sysstats_tick(s, tt.now)), ==, 50); /* meminfo at 1550 */
	ASSERT_INT(tt.n_mem, ==, n_before + 1);
	sonde__sysstats_free(s);
	struct meminfo_seen m = {0};
	probes_each_packet(&trace, find_meminfo, &m);
	ASSERT_INT(m.n, ==, tt.n_mem); /* every packet with meminfo reached the trace */
	char *text = probes_protoc_decode(&trace);
	ASSERT_CONTAINS(text, "sys_stats {");
	ASSERT_CONTAINS(text, "meminfo {\n      key: 1\n");
	ASSERT_NOT_CONTAINS(text, "key: 3\n"); /* MemAvailable was not selected */
	ASSERT_CONTAINS(text, "cpu_stat {");
	ASSERT_CONTAINS(text, "num_forks:");
	ASSERT_CONTAINS(text, "num_irq_total:");
	free(text);
	sonde__buf_free(&trace);
}

/* This machine may have no cpufreq or devfreq: a /sys of files made for the test. */
TEST(sysstats_cpufreq_and_devfreq_from_sys)
{
	static struct sysstats_config c = {.cpufreq_period_ms = 100, .devfreq_period_ms = 100};
	struct buf trace = BUF_INIT;
	char root[512], path[1024];
	struct test_output o;

	snprintf(root, sizeof(root), "%s/sys", test_tmpdir());
	test_runf(&o, 30,
		  "/bin/mkdir -p %s/devices/system/cpu/cpu0/cpufreq "
		  "%s/devices/system/cpu/cpu1/cpufreq %s/class/devfreq/gpu0",
		  root, root, root);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu0/cpufreq/cpuinfo_cur_freq", root);
	test_write_file(path, "1800000\n", 8);
	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", root);
	test_write_file(path, "900000\n", 7);
	snprintf(path, sizeof(path), "%s/class/devfreq/gpu0/cur_freq", root);
	test_write_file(path, "585000000\n", 10);
	struct sysstats *s =
		ASSERT_NOT_NULL(sonde__sysstats_new(&c, NULL, root, probes_collect, &trace));
	ASSERT_INT(sonde__sysstats_tick(s, 1000), ==, 100);
	ASSERT_INT(sonde__sysstats_tick(s, 1050), ==, 50); /* nothing due: no packet */
	sonde__sysstats_free(s);
	char *text = probes_protoc_decode(&trace);
	ASSERT_INT(probes_count(text, "sys_stats {"), ==, 1);
	ASSERT_CONTAINS(text, "cpufreq_khz: 1800000\n");
	ASSERT_CONTAINS(text, "cpufreq_khz: 900000\n");
	ASSERT_CONTAINS(text, "key: \"gpu0\"\n");
	ASSERT_CONTAINS(text, "value: 585000000\n");
	free(text);
	sonde__buf_free(&trace);
}
