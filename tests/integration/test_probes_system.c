/* linux.ftrace, linux.process_stats and linux.sys_stats served by sonded's probes child to
 * `sonde trace --txt`: a thread blocking a known number of times is seen switched out at
 * least that often, its process is in the tree, meminfo comes at its period, and protoc
 * reads the trace with tests/protos/probes.proto; tracefs refused to a consumer that may
 * not read it; a second ftrace session told why it has none. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/buf.h"
#include "base/pb.h"
#include "client_util.h"
#include "probes_util.h"
#include "sec_util.h"
#include "svc_util.h"

enum { NOBODY = 65534, SLEEPS = 200, MEMINFO_MS = 250 };

static const char *const busy = "another tracing session is already recording ftrace";

/* `sonde trace` (a copy anyone may run) with config cfg into out, its stderr into
 * out.err, as root or nobody. Returns the pid. */
static pid_t trace_spawn(bool nobody, const char *csock, const char *cfg, const char *out)
{
	static const char *sonde;
	char errfile[600];

	if (!sonde)
		sonde = test_copy_for_anyone(test_bin("sonde"));
	snprintf(errfile, sizeof(errfile), "%s.err", out);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		if (nobody && (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0))
			_exit(99);
		execl(sonde, sonde, "trace", "--socket", csock, "-c", cfg, "-o", out, "--txt",
		      (char *)NULL);
		_exit(98);
	}
	return pid;
}

static char *trace_err(const char *out)
{
	char errfile[600];

	snprintf(errfile, sizeof(errfile), "%s.err", out);
	return ASSERT_NOT_NULL(test_read_file(errfile, NULL));
}

/* TracePacket{39 android_log{1 events{6 tag, 8 message}}}, as "tag: message\n" lines. */
static void log_lines(void *ctx, const uint8_t *p, size_t n)
{
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 39 || f.wire != PB_LEN)
			continue;
		for (struct pb_reader lr = pb_sub(&f); sonde__pb_next(&lr, &g) > 0;) {
			const uint8_t *tag = NULL, *msg = NULL;
			size_t tl = 0, ml = 0;
			if (g.num != 1 || g.wire != PB_LEN)
				continue;
			for (struct pb_reader er = pb_sub(&g); sonde__pb_next(&er, &h) > 0;) {
				if (h.num == 6 && h.wire == PB_LEN)
					tag = h.ptr, tl = h.len;
				else if (h.num == 8 && h.wire == PB_LEN)
					msg = h.ptr, ml = h.len;
			}
			if (tag && msg) {
				sonde__buf_append(ctx, tag, tl);
				sonde__buf_append(ctx, ": ", 2);
				sonde__buf_append(ctx, msg, ml);
				sonde__buf_append(ctx, "\n", 1);
			}
		}
	}
}

/* The trace file out, and the messages its data sources wrote into it (*logs: free). */
static void read_trace(const char *out, struct buf *trace, char **logs)
{
	struct buf l = BUF_INIT;
	size_t len;
	char *bytes = ASSERT_NOT_NULL(test_read_file(out, &len));

	sonde__buf_append(trace, bytes, len);
	free(bytes);
	probes_each_packet(trace, log_lines, &l);
	sonde__buf_append(&l, "", 1);
	*logs = ASSERT_NOT_NULL(strdup((const char *)l.data));
	sonde__buf_free(&l);
}

/* A directory anyone may write, for the files of a nobody consumer. */
static const char *open_dir(void)
{
	static char dir[512];

	chmod(test_tmpdir(), 0755);
	snprintf(dir, sizeof(dir), "%s/any", test_tmpdir());
	mkdir(dir, 0777);
	chmod(dir, 0777);
	return dir;
}

static void write_cfg(const char *path, uint32_t duration_ms)
{
	char cfg[1024];

	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 32768 fill_policy: DISCARD }\n"
		 "duration_ms: %u\n"
		 "data_sources { config { name: \"linux.ftrace\" ftrace_config {\n"
		 "  ftrace_events: \"sched/sched_switch\" ftrace_events: \"sched/sched_waking\" } "
		 "} }\n"
		 "data_sources { config { name: \"linux.process_stats\" process_stats_config {\n"
		 "  scan_all_processes_on_start: true record_thread_names: true } } }\n"
		 "data_sources { config { name: \"linux.sys_stats\" sys_stats_config {\n"
		 "  meminfo_period_ms: %u } } }\n",
		 duration_ms, MEMINFO_MS);
	test_write_file(path, cfg, strlen(cfg));
	chmod(path, 0644);
}

static void wait_sources(const struct sonded *d)
{
	client_wait_data_source(d->csock, "linux.ftrace");
	client_wait_data_source(d->csock, "linux.process_stats");
	client_wait_data_source(d->csock, "linux.sys_stats");
}

/* Whether our sonded's probes hold linux.ftrace's lock (/proc/locks names the flock's
 * owner; another test run's probes may hold it) and its instance records sched_switch. */
static bool ftrace_on(const struct sonded *d, const char *root)
{
	char path[600], line[256];
	struct stat st;
	bool ours = false;

	pid_t probes = sonded_probes_pid(d, 0, 10);
	if (stat("/run/sonde/ftrace-sonde.lock", &st) < 0)
		return false;
	FILE *f = fopen("/proc/locks", "re");
	while (f && fgets(line, sizeof(line), f)) {
		int pid;
		unsigned long ino;
		if (sscanf(line, "%*d: FLOCK %*s %*s %d %*x:%*x:%lu", &pid, &ino) == 2 &&
		    pid == probes && ino == st.st_ino)
			ours = true;
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/instances/sonde/events/sched/sched_switch/enable", root);
	char *s = test_read_file(path, NULL);
	bool on = ours && s && s[0] == '1';
	free(s);
	return on;
}

/* Starts a session until Ctrl-C once its ftrace records (another test run's probes may
 * hold ftrace: then again, until a deadline). Returns the pid of `sonde trace`. */
static pid_t trace_recording(const struct sonded *d, const char *root, const char *cfg,
			     const char *out)
{
	for (double end = test_now() + 90;;) {
		pid_t t = trace_spawn(false, d->csock, cfg, out);
		for (double e2 = test_now() + 20; test_now() < e2; usleep(20000)) {
			if (ftrace_on(d, root))
				return t;
			int st;
			if (waitpid(t, &st, WNOHANG) == t)
				FAIL("sonde trace exited before linux.ftrace recorded");
		}
		/* another test run's probes hold ftrace (its message is in this trace) */
		kill(t, SIGINT);
		test_wait(t, 60);
		if (test_now() > end)
			FAIL("linux.ftrace never started recording");
		usleep(500000);
	}
}

struct meminfo_times {
	uint64_t first, last;
	size_t n;
};

/* TracePacket{8 timestamp, 7 sys_stats{1 meminfo}}. */
static void meminfo_time(void *ctx, const uint8_t *p, size_t n)
{
	struct meminfo_times *m = ctx;
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g;
	uint64_t ts = 0;
	bool mem = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 8 && f.wire == PB_VARINT)
			ts = f.u;
		if (f.num != 7 || f.wire != PB_LEN)
			continue;
		struct pb_reader s = pb_sub(&f);
		while (sonde__pb_next(&s, &g) > 0)
			mem |= g.num == 1;
	}
	if (!mem || !ts)
		return;
	if (!m->n++)
		m->first = ts;
	m->last = ts;
}

TEST_TIMEOUT(probes_system_sonde_trace_sleeper_switches_tree_and_meminfo, 240)
{
	const char *root = probes_require_tracefs();
	const char *cfg = test_path("system.txt"), *out = test_path("system.pftrace");
	struct sonded d;
	char want[128];

	sec_require_root();
	sonded_start(&d, NULL);
	wait_sources(&d);
	write_cfg(cfg, 0);
	pid_t t = trace_recording(&d, root, cfg, out);
	char count[16];
	snprintf(count, sizeof(count), "%d", SLEEPS);
	const char *argv[] = {test_prog("ftrace_sleeper"), count, probes_sleeper_name(), NULL};
	pid_t sleeper = test_spawn(argv);
	ASSERT_INT(test_wait(sleeper, 120), ==, 0);
	usleep(4 * MEMINFO_MS * 1000); /* a few more meminfo samples */
	kill(t, SIGINT);
	int status = test_wait(t, 120);
	char *err = trace_err(out);
	sonded_stop(&d);
	ASSERT_INT(status, ==, 0);
	free(err);

	struct buf trace = BUF_INIT;
	char *logs;
	read_trace(out, &trace, &logs);
	ASSERT_STR_EQ(logs, "");
	free(logs);
	char *text = probes_protoc_decode(&trace);
	/* switch-outs of the sleeper thread: each sleep blocks it once */
	snprintf(want, sizeof(want), "prev_comm: \"%s\"", probes_sleeper_name());
	size_t outs = probes_count(text, want);
	/* its process, and the thread named on demand from the sched events */
	snprintf(want, sizeof(want), "pid: %d\n      ppid: %d", (int)sleeper, (int)getpid());
	ASSERT_CONTAINS(text, want);
	snprintf(want, sizeof(want), "name: \"%s\"\n      tgid: %d", probes_sleeper_name(),
		 (int)sleeper);
	ASSERT_CONTAINS(text, want);
	struct meminfo_times m = {0};
	probes_each_packet(&trace, meminfo_time, &m);
	double gap_ms = m.n > 1 ? (double)(m.last - m.first) / 1e6 / (double)(m.n - 1) : 0;
	printf("%zu switch-outs of %d sleeps; %zu meminfo samples, mean gap %.1f ms (period "
	       "%d)\n",
	       outs, SLEEPS, m.n, gap_ms, MEMINFO_MS);
	ASSERT_UINT(outs, >=, SLEEPS);
	ASSERT_UINT(m.n, >=, 4);
	ASSERT(gap_ms > MEMINFO_MS * 0.8 && gap_ms < MEMINFO_MS * 1.5);
	free(text);
	sonde__buf_free(&trace);
}

/* Nobody may not read tracefs: its ftrace instance records nothing but the reason; the
 * system stats are anyone's. */
TEST_TIMEOUT(probes_system_ftrace_refused_for_nobody, 120)
{
	probes_require_tracefs();
	char cfg[600], out[600];
	struct sonded d;

	sec_require_root();
	const char *dir = open_dir();
	snprintf(cfg, sizeof(cfg), "%s/nobody.txt", dir);
	snprintf(out, sizeof(out), "%s/nobody.pftrace", dir);
	write_cfg(cfg, 1500);
	sonded_start(&d, NULL);
	wait_sources(&d);
	int status = test_wait(trace_spawn(true, d.csock, cfg, out), 120);
	char *err = trace_err(out);
	sonded_stop(&d);
	/* the refusal is printed with the data source's name and makes the exit status 1 */
	ASSERT_INT(status, ==, 1);
	ASSERT_CONTAINS(err, "linux.ftrace: ");
	free(err);

	struct buf trace = BUF_INIT;
	char *logs;
	read_trace(out, &trace, &logs);
	printf("%s", logs);
	ASSERT_CONTAINS(logs, "linux.ftrace: refused for consumer uid 65534: ");
	ASSERT_CONTAINS(logs, "ftrace needs root, CAP_SYS_ADMIN");
	ASSERT(strstr(logs, "linux.sys_stats") == NULL);
	free(logs);
	char *text = probes_protoc_decode(&trace);
	ASSERT(strstr(text, "ftrace_events {") == NULL);
	ASSERT(strstr(text, "ftrace_stats {") == NULL);
	ASSERT_CONTAINS(text, "meminfo {");
	free(text);
	sonde__buf_free(&trace);
}

/* While one session records ftrace, a second one gets the module's error in its trace
 * (and the first keeps recording). */
TEST_TIMEOUT(probes_system_second_ftrace_session_told_busy, 240)
{
	const char *root = probes_require_tracefs();
	const char *cfg1 = test_path("first.txt"), *cfg2 = test_path("second.txt"),
		   *out1 = test_path("first.pftrace"), *out2 = test_path("second.pftrace");
	struct sonded d;

	sec_require_root();
	sonded_start(&d, NULL);
	wait_sources(&d);
	write_cfg(cfg1, 0);
	write_cfg(cfg2, 1000);
	pid_t first = trace_recording(&d, root, cfg1, out1);
	int status2 = test_wait(trace_spawn(false, d.csock, cfg2, out2), 120);
	bool still = ftrace_on(&d, root);
	kill(first, SIGINT);
	int status1 = test_wait(first, 120);
	char *err1 = trace_err(out1), *err2 = trace_err(out2);
	sonded_stop(&d);
	ASSERT_INT(status1, ==, 0);
	ASSERT_INT(status2, ==, 1); /* told busy, on stderr too */
	ASSERT_CONTAINS(err2, "linux.ftrace: cannot record ftrace");
	ASSERT(still);
	free(err1);
	free(err2);
	struct buf t1 = BUF_INIT, t2 = BUF_INIT;
	char *logs1, *logs2;
	read_trace(out1, &t1, &logs1);
	read_trace(out2, &t2, &logs2);
	printf("second: %s", logs2);
	ASSERT_CONTAINS(logs2, "linux.ftrace: cannot record ftrace: ");
	ASSERT_CONTAINS(logs2, busy);
	ASSERT_STR_EQ(logs1, "");
	free(logs1);
	free(logs2);
	sonde__buf_free(&t1);
	sonde__buf_free(&t2);
}

/* Config fields the probes do not act on are named in the trace, with why, and printed by
 * `sonde trace`; the session records what it does support, and the exit status stays 0. */
TEST_TIMEOUT(probes_system_unsupported_config_fields_are_named, 120)
{
	const char *cfg = test_path("unsupported.txt"), *out = test_path("unsupported.pftrace");
	static const char txt[] =
		"buffers { size_kb: 4096 fill_policy: DISCARD }\n"
		"duration_ms: 1500\n"
		"data_sources { config { name: \"linux.sys_stats\" sys_stats_config {\n"
		"  meminfo_period_ms: 100 meminfo_counters: MEMINFO_MEM_TOTAL\n"
		"  cpuidle_period_ms: 100 psi_period_ms: 0 } } }\n"
		"data_sources { config { name: \"linux.process_stats\" process_stats_config {\n"
		"  scan_all_processes_on_start: true resolve_process_fds: true\n"
		"  scan_smaps_rollup: false } } }\n";
	struct sonded d;

	sec_require_root();
	test_write_file(cfg, txt, sizeof(txt) - 1);
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.process_stats");
	client_wait_data_source(d.csock, "linux.sys_stats");
	int status = test_wait(trace_spawn(false, d.csock, cfg, out), 60);
	char *err = trace_err(out);
	sonded_stop(&d);
	printf("%s", err);
	ASSERT_INT(status, ==, 0);
	ASSERT_CONTAINS(err, "linux.sys_stats: warning: cpuidle_period_ms is not supported and "
			     "was ignored: cpuidle state times are not sampled");
	ASSERT_CONTAINS(err, "linux.process_stats: warning: resolve_process_fds is not supported "
			     "and was ignored: file descriptors are not resolved to paths");
	/* a zero period and a false bool ask for nothing */
	ASSERT_NOT_CONTAINS(err, "psi_period_ms");
	ASSERT_NOT_CONTAINS(err, "scan_smaps_rollup");
	free(err);

	struct buf trace = BUF_INIT;
	char *logs;
	read_trace(out, &trace, &logs);
	ASSERT_CONTAINS(logs, "linux.sys_stats: cpuidle_period_ms is not supported");
	ASSERT_CONTAINS(logs, "linux.process_stats: resolve_process_fds is not supported");
	free(logs);
	struct meminfo_times m = {0};
	probes_each_packet(&trace, meminfo_time, &m);
	ASSERT_UINT(m.n, >=, 1);
	sonde__buf_free(&trace);
}
