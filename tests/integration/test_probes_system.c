/* linux.ftrace, linux.process_stats and linux.sys_stats served by sonded's probes child to
 * `sonde trace --txt`: a thread blocking a known number of times is seen switched out at
 * least that often, its process is in the tree, meminfo comes at its period, and protoc
 * reads the trace with tests/protos/probes.proto; tracefs refused to a consumer that may
 * not read it; a second ftrace session told why it has none. */
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
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
		 "  ftrace_events: \"sched/sched_switch\" ftrace_events: \"sched/sched_waking\"\n"
		 "  compact_sched { enabled: false } } } }\n"
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

/* The pid holding linux.ftrace's lock (/proc/locks names the flock's owner), 0 if none. */
static pid_t ftrace_holder(void)
{
	char line[256];
	struct stat st;
	pid_t holder = 0;

	if (stat("/run/sonde/ftrace-sonde.lock", &st) < 0)
		return 0;
	FILE *f = fopen("/proc/locks", "re");
	while (f && fgets(line, sizeof(line), f)) {
		int pid;
		unsigned long ino;
		if (sscanf(line, "%*d: FLOCK %*s %*s %d %*x:%*x:%lu", &pid, &ino) == 2 &&
		    ino == st.st_ino)
			holder = pid;
	}
	if (f)
		fclose(f);
	return holder;
}

/* Whether our sonded's probes hold linux.ftrace's lock (another test run's probes may hold
 * it) and its instance records sched_switch. */
static bool ftrace_on(const struct sonded *d, const char *root)
{
	char path[600];
	bool ours = ftrace_holder() == sonded_probes_pid(d, 0, 10);

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
	pid_t probes = sonded_probes_pid(d, 0, 10);

	for (double end = test_now() + 90;;) {
		pid_t t = trace_spawn(false, d->csock, cfg, out), other = 0;
		for (double e2 = test_now() + 20; test_now() < e2 && !other; usleep(20000)) {
			if (ftrace_on(d, root))
				return t;
			int st;
			if (waitpid(t, &st, WNOHANG) == t)
				FAIL("sonde trace exited before linux.ftrace recorded");
			pid_t h = ftrace_holder();
			other = h && h != probes ? h : 0;
		}
		/* another test run's probes hold ftrace (its message is in this trace): again
		 * once they let it go, rather than after the 20 s given to a slow start */
		kill(t, SIGINT);
		test_wait(t, 60);
		while (ftrace_holder() && ftrace_holder() != probes && test_now() < end)
			usleep(20000);
		if (test_now() > end)
			FAIL("linux.ftrace never started recording");
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

/* The meminfo samples in the trace file at path so far (0 while it cannot be read). */
static size_t meminfo_in_file(const char *path)
{
	struct meminfo_times m = {0};
	struct buf trace = BUF_INIT;
	size_t len;
	char *bytes = test_read_file(path, &len);

	if (!bytes)
		return 0;
	sonde__buf_append(&trace, bytes, len);
	free(bytes);
	probes_each_packet(&trace, meminfo_time, &m);
	sonde__buf_free(&trace);
	return m.n;
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
	/* the service writes the trace as it goes: the test sees its meminfo samples */
	static const char into_file[] = "write_into_file: true\nfile_write_period_ms: 100\n";
	size_t len;
	char *text0 = ASSERT_NOT_NULL(test_read_file(cfg, &len));
	text0 = ASSERT_NOT_NULL(realloc(text0, len + sizeof(into_file)));
	memcpy(text0 + len, into_file, sizeof(into_file));
	test_write_file(cfg, text0, len + sizeof(into_file) - 1);
	free(text0);
	pid_t t = trace_recording(&d, root, cfg, out);
	char count[16];
	snprintf(count, sizeof(count), "%d", SLEEPS);
	/* The thread lives until the recording ends: it is named from /proc when the probes
	 * get to its events, which a loaded machine delays past a thread that ended (a CI
	 * run's trace had its switches and no name for it). */
	const char *done = test_path("sleeper.done");
	const char *argv[] = {test_prog("ftrace_sleeper"), count, probes_sleeper_name(), done,
			      NULL};
	int in;
	pid_t sleeper = test_spawn_fed(&in, argv);
	for (double end = test_now() + 120; access(done, F_OK) != 0; usleep(10000))
		if (test_now() > end)
			FAIL("ftrace_sleeper did not finish its %d sleeps in 120 s", SLEEPS);
	/* 4 meminfo samples in the file the service writes as it goes, not a second's worth
	 * of them: how late sonded's loop gets to a tick is the machine's load */
	for (double end = test_now() + 120; meminfo_in_file(out) < 4; usleep(20000))
		if (test_now() > end)
			FAIL("%s held %zu meminfo samples after 120 s", out, meminfo_in_file(out));
	kill(t, SIGINT);
	int status = test_wait(t, 120);
	close(in);
	ASSERT_INT(test_wait(sleeper, 120), ==, 0);
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
	/* never faster than the period; how late sonded's loop gets to a tick is the
	 * machine's load (a SAN run at load 20: mean gap 425 ms for 250), so the schedule
	 * itself, each sample at its due time, is judged on an injected clock
	 * (sysstats_meminfo_at_its_period) */
	ASSERT(gap_ms > MEMINFO_MS * 0.8);
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

/* The sched_switch events of a trace, per CPU in file order, as trace processor reads
 * them: a typed sched_switch has its prev_pid; a compact one (CompactSched columns) has
 * none, the reader taking the CPU's previous next_pid for it. And the END_OF_TRACE
 * FtraceStats' read_events per CPU: what the probes took from the kernel's rings. */
enum { SCHED_MAX_CPUS = 64 };

struct sched_sw {
	uint32_t cpu;
	uint64_t ts;
	int64_t prev; /* -1: compact, not written */
	int64_t next;
	char next_comm[16];
};

struct sched_trace {
	struct sched_sw *sw;
	size_t n, cap;
	size_t typed_switch, compact_switch, typed_waking, compact_waking;
	size_t events[SCHED_MAX_CPUS];	    /* switch + waking events per CPU */
	uint64_t read_events[SCHED_MAX_CPUS]; /* END_OF_TRACE */
	uint64_t overrun;
	bool have_end, lost;
	uint64_t bundle_last;		     /* the last event of the bundle being read */
	uint64_t cpu_last[SCHED_MAX_CPUS];   /* ... of each CPU's previous bundles */
	size_t bad_previous_end;	     /* previous_bundle_end_timestamp != cpu_last */
};

static void sched_push(struct sched_trace *t, struct sched_sw sw)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 4096;
		t->sw = ASSERT_NOT_NULL(realloc(t->sw, t->cap * sizeof(*t->sw)));
	}
	t->sw[t->n++] = sw;
}

static void copy_comm(char out[16], const uint8_t *p, size_t n)
{
	n = n < 15 ? n : 15;
	memcpy(out, p, n);
	out[n] = '\0';
}

/* FtraceEvent {1 timestamp, 4 sched_switch {2 prev_pid, 5 next_comm, 6 next_pid}, 20
 * sched_waking}. */
static void sched_typed(struct sched_trace *t, uint32_t cpu, struct pb_reader r)
{
	struct pb_field f, g;
	struct sched_sw sw = {.cpu = cpu, .prev = 0};
	bool is_switch = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1 && f.wire == PB_VARINT) {
			sw.ts = f.u;
			t->bundle_last = f.u > t->bundle_last ? f.u : t->bundle_last;
		}
		if (f.num == 20 && f.wire == PB_LEN) {
			t->typed_waking++;
			t->events[cpu]++;
		}
		if (f.num != 4 || f.wire != PB_LEN)
			continue;
		is_switch = true;
		for (struct pb_reader s = pb_sub(&f); sonde__pb_next(&s, &g) > 0;) {
			if (g.num == 2 && g.wire == PB_VARINT)
				sw.prev = (int32_t)g.u;
			else if (g.num == 6 && g.wire == PB_VARINT)
				sw.next = (int32_t)g.u;
			else if (g.num == 5 && g.wire == PB_LEN)
				copy_comm(sw.next_comm, g.ptr, g.len);
		}
	}
	if (is_switch) {
		t->typed_switch++;
		t->events[cpu]++;
		sched_push(t, sw);
	}
}

/* CompactSched {5 intern_table, 1 switch_timestamp (deltas), 3 switch_next_pid, 6
 * switch_next_comm_index, 7 waking_timestamp}. */
static void sched_compact(struct sched_trace *t, uint32_t cpu, struct pb_reader r)
{
	struct pb_field f;
	struct pb_field col[8] = {0};
	const uint8_t *intern[256];
	size_t intern_len[256], nintern = 0;
	uint64_t v;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 5 && f.wire == PB_LEN && nintern < 256) {
			intern[nintern] = f.ptr;
			intern_len[nintern++] = f.len;
		} else if (f.num < 8 && f.wire == PB_LEN) {
			col[f.num] = f;
		}
	}
	struct pb_reader ts = pb_sub(&col[1]), pid = pb_sub(&col[3]), comm = pb_sub(&col[6]);
	for (uint64_t abs = 0; sonde__pb_packed_next(&ts, &v) > 0;) {
		struct sched_sw sw = {.cpu = cpu, .prev = -1};
		uint64_t p = 0, c = 0;
		abs += v;
		sw.ts = abs;
		t->bundle_last = abs > t->bundle_last ? abs : t->bundle_last;
		ASSERT(sonde__pb_packed_next(&pid, &p) > 0);
		ASSERT(sonde__pb_packed_next(&comm, &c) > 0);
		ASSERT_UINT(c, <, nintern);
		sw.next = (int32_t)p;
		copy_comm(sw.next_comm, intern[c], intern_len[c]);
		t->compact_switch++;
		t->events[cpu]++;
		sched_push(t, sw);
	}
	struct pb_reader wts = pb_sub(&col[7]);
	for (uint64_t abs = 0; sonde__pb_packed_next(&wts, &v) > 0;) {
		abs += v;
		t->bundle_last = abs > t->bundle_last ? abs : t->bundle_last;
		t->compact_waking++;
		t->events[cpu]++;
	}
}

/* TracePacket {1 ftrace_events {1 cpu, 2 event, 3 lost_events, 4 compact_sched}, 34
 * ftrace_stats {1 phase, 2 cpu_stats {1 cpu, 3 overrun, 9 read_events}}}. */
static void sched_packet(void *ctx, const uint8_t *p, size_t n)
{
	struct sched_trace *t = ctx;
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 34 && f.wire == PB_LEN) {
			uint64_t phase = 0;
			for (struct pb_reader s = pb_sub(&f); sonde__pb_next(&s, &g) > 0;)
				if (g.num == 1 && g.wire == PB_VARINT)
					phase = g.u;
			if (phase != 2) /* END_OF_TRACE */
				continue;
			t->have_end = true;
			for (struct pb_reader s = pb_sub(&f); sonde__pb_next(&s, &g) > 0;) {
				uint64_t cpu = UINT64_MAX, rd = 0, ov = 0;
				if (g.num != 2 || g.wire != PB_LEN)
					continue;
				for (struct pb_reader c = pb_sub(&g); sonde__pb_next(&c, &h) > 0;) {
					if (h.num == 1)
						cpu = h.u;
					else if (h.num == 3)
						ov = h.u;
					else if (h.num == 9)
						rd = h.u;
				}
				ASSERT_UINT(cpu, <, SCHED_MAX_CPUS);
				t->read_events[cpu] = rd;
				t->overrun += ov;
			}
		}
		if (f.num != 1 || f.wire != PB_LEN)
			continue;
		uint64_t cpu = UINT64_MAX, prev_end = UINT64_MAX;
		for (struct pb_reader b = pb_sub(&f); sonde__pb_next(&b, &g) > 0;) {
			if (g.num == 1 && g.wire == PB_VARINT)
				cpu = g.u;
			else if (g.num == 3 && g.wire == PB_VARINT && g.u)
				t->lost = true;
			else if (g.num == 10 && g.wire == PB_VARINT)
				prev_end = g.u;
		}
		ASSERT_UINT(cpu, <, SCHED_MAX_CPUS); /* cpu comes first in every bundle */
		t->bad_previous_end += prev_end != t->cpu_last[cpu];
		t->bundle_last = 0;
		for (struct pb_reader b = pb_sub(&f); sonde__pb_next(&b, &g) > 0;) {
			if (g.num == 2 && g.wire == PB_LEN)
				sched_typed(t, (uint32_t)cpu, pb_sub(&g));
			else if (g.num == 4 && g.wire == PB_LEN)
				sched_compact(t, (uint32_t)cpu, pb_sub(&g));
		}
		if (t->bundle_last)
			t->cpu_last[cpu] = t->bundle_last;
	}
}

struct sched_check {
	size_t breaks;	     /* prev_pid != the CPU's previous next_pid */
	size_t kernel_gaps;  /* ... where the kernel leaves switch-outs unreported */
	size_t idle_slices;  /* switches to pid 0 */
	uint64_t idle_ns;    /* time from a switch to pid 0 to the CPU's next switch */
	size_t cpus;
};

static bool appears_as_prev(const struct sched_trace *t, int64_t pid)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->sw[i].prev == pid)
			return true;
	return false;
}

/* Walks each CPU's switches in file order: timestamps never go back (bundles of a CPU are
 * written in order, not merged out of order), every switch to pid 0 is the CPU's idle
 * task (swapper/N), and a typed switch's prev_pid is the previous next_pid. */
static struct sched_check sched_walk(const struct sched_trace *t)
{
	struct sched_check c = {0};
	int64_t last_next[SCHED_MAX_CPUS];
	uint64_t last_ts[SCHED_MAX_CPUS] = {0};

	for (int i = 0; i < SCHED_MAX_CPUS; i++)
		last_next[i] = -1;
	for (size_t i = 0; i < t->n; i++) {
		const struct sched_sw *sw = &t->sw[i];
		if (last_next[sw->cpu] < 0 && !last_ts[sw->cpu])
			c.cpus++;
		if (sw->ts < last_ts[sw->cpu])
			FAIL("cpu %u: switch at %" PRIu64 " after one at %" PRIu64, sw->cpu, sw->ts,
			     last_ts[sw->cpu]);
		if (sw->next == 0) {
			if (strncmp(sw->next_comm, "swapper", 7) != 0)
				FAIL("cpu %u: pid 0 named \"%s\"", sw->cpu, sw->next_comm);
			c.idle_slices++;
		}
		if (last_next[sw->cpu] == 0)
			c.idle_ns += sw->ts - last_ts[sw->cpu];
		if (sw->prev >= 0 && last_next[sw->cpu] >= 0 && sw->prev != last_next[sw->cpu]) {
			c.breaks++;
			c.kernel_gaps += last_next[sw->cpu] == 0 ||
					 !appears_as_prev(t, last_next[sw->cpu]);
		}
		last_next[sw->cpu] = sw->next;
		last_ts[sw->cpu] = sw->ts;
	}
	return c;
}

/* Records sched_switch and sched_waking through sonded for about 2 s while both CPUs run
 * a busy thread, a pair of threads ping-ponging and a sleeper; compact_txt is the config's
 * compact_sched setting ("" for none). */
static void sched_record(const char *name, const char *compact_txt, struct sched_trace *t)
{
	const char *root = probes_require_tracefs();
	char cfgtxt[1024], cfg[600], out[600];
	struct sonded d;

	snprintf(cfg, sizeof(cfg), "%s/%s.txt", test_tmpdir(), name);
	snprintf(out, sizeof(out), "%s/%s.pftrace", test_tmpdir(), name);
	snprintf(cfgtxt, sizeof(cfgtxt),
		 "buffers { size_kb: 65536 fill_policy: DISCARD }\n"
		 "data_sources { config { name: \"linux.ftrace\" ftrace_config {\n"
		 "  ftrace_events: \"sched/sched_switch\" ftrace_events: \"sched/sched_waking\"\n"
		 "  %s } } }\n",
		 compact_txt);
	test_write_file(cfg, cfgtxt, strlen(cfgtxt));
	chmod(cfg, 0644);
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.ftrace");
	pid_t tr = trace_recording(&d, root, cfg, out);
	const char *spin[] = {test_prog("spin_threads"), "2", "2", NULL};
	const char *pp[] = {test_prog("pingpong"), "2", NULL};
	const char *slp[] = {test_prog("ftrace_sleeper"), "1000", probes_sleeper_name(), NULL};
	pid_t w[3] = {test_spawn(spin), test_spawn(pp), test_spawn(slp)};
	for (int i = 0; i < 3; i++)
		ASSERT_INT(test_wait(w[i], 120), ==, 0);
	kill(tr, SIGINT);
	int status = test_wait(tr, 120);
	char *err = trace_err(out);
	sonded_stop(&d);
	if (status != 0)
		FAIL("sonde trace: status %d: %s", status, err);
	free(err);

	struct buf trace = BUF_INIT;
	char *logs;
	read_trace(out, &trace, &logs);
	ASSERT_STR_EQ(logs, "");
	free(logs);
	probes_each_packet(&trace, sched_packet, t);
	sonde__buf_free(&trace);
}

/* What the probes wrote of each CPU is what they read from its ring: per CPU, as many
 * switch and waking events as the kernel's read_events, in time order; and each bundle
 * says where its CPU's stream stood (previous_bundle_end_timestamp: the CPU's last event
 * in the bundles before, 0 in its first), which trace processor reads to find from when
 * every CPU's data is whole. */
static void sched_assert_complete(const struct sched_trace *t)
{
	ASSERT(t->have_end);
	ASSERT_UINT(t->bad_previous_end, ==, 0);
	for (int cpu = 0; cpu < SCHED_MAX_CPUS; cpu++)
		if (t->events[cpu] != t->read_events[cpu])
			FAIL("cpu %d: %zu events in the trace, the kernel's ring gave %" PRIu64,
			     cpu, t->events[cpu], t->read_events[cpu]);
}

/* A config that does not mention compact_sched gets it, as from traced_probes since v42:
 * trace processor then takes each switch's previous task from the CPU's last one, and
 * every event the kernel gave is there, in order. */
TEST_TIMEOUT(probes_system_sched_compact_by_default_complete_in_order, 240)
{
	struct sched_trace t = {0};

	sec_require_root();
	sched_record("sched-default", "", &t);
	struct sched_check c = sched_walk(&t);
	printf("%zu switches (%zu typed, %zu compact), %zu wakings (%zu compact) on %zu CPUs; "
	       "%zu switches to idle, %.1f ms idle; overrun %" PRIu64 "%s\n",
	       t.n, t.typed_switch, t.compact_switch, t.typed_waking + t.compact_waking,
	       t.compact_waking, c.cpus, c.idle_slices, c.idle_ns / 1e6, t.overrun,
	       t.lost ? ", lost events" : "");
	ASSERT_UINT(t.typed_switch, ==, 0);
	ASSERT_UINT(t.typed_waking, ==, 0);
	ASSERT_UINT(t.compact_switch, >=, 1000); /* the sleeper alone blocks 1000 times */
	ASSERT_UINT(t.compact_waking, >=, 1000);
	ASSERT_UINT(c.cpus, >=, 2);
	sched_assert_complete(&t);
	free(t.sw);
}

/* compact_sched { enabled: false }: typed events, and on each CPU a switch's prev_pid is
 * the previous switch's next_pid, but where the kernel itself leaves the previous task's
 * switch-out unreported. Some kernels do: the test machine's VM kernel never reports
 * those of pid 1's threads and leaves most of the idle task's out (its own trace file
 * shows the same breaks), so a break after pid 0 or after a task never seen switching
 * out is the kernel's. That the probes lose nothing is sched_assert_complete's check. */
TEST_TIMEOUT(probes_system_sched_typed_switches_chain, 240)
{
	struct sched_trace t = {0};

	sec_require_root();
	sched_record("sched-typed", "compact_sched { enabled: false }", &t);
	struct sched_check c = sched_walk(&t);
	printf("%zu switches on %zu CPUs, %zu breaks of the chain (%zu after pid 0 or a task never "
	       "seen switching out); %zu switches to idle, %.1f ms idle; overrun %" PRIu64 "%s\n",
	       t.n, c.cpus, c.breaks, c.kernel_gaps, c.idle_slices, c.idle_ns / 1e6, t.overrun,
	       t.lost ? ", lost events" : "");
	ASSERT_UINT(t.compact_switch, ==, 0);
	ASSERT_UINT(t.typed_switch, >=, 1000);
	ASSERT_UINT(c.cpus, >=, 2);
	sched_assert_complete(&t);
	if (!t.lost)
		ASSERT_UINT(c.breaks, ==, c.kernel_gaps);
	free(t.sw);
}
