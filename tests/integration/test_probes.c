/* `sonde probes`: sonded's supervised child (--no-probes, restarts), linux.perf's
 * target_cmdline patterns through it, the consumer credentials only sonded may send, and
 * the --targets policies of probes that serve a service which does not send them. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/buf.h"
#include "base/pb.h"
#include "client_util.h"
#include "ipc/protos.h"
#include "pftrace_util.h"
#include "sec_util.h"
#include "svc_util.h"

/* A target the selection profiles has at least this many samples, one it excludes none.
 * The sessions last 3 s at 199 Hz, but on a loaded 2-core machine a CPU-bound target may
 * get a small share of a CPU: a higher floor would judge the machine, not the selection. */
enum { MIN_PROFILED = 5 };

enum { NOBODY = 65534 };

static void decode(const char *path, struct pft_trace *t)
{
	size_t len;
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(path, &len));
	pft_decode(data, len, t);
	free(data);
}

/* A copy of tests/progs/split at path, that anyone may run. */
static void copy_split(const char *path)
{
	size_t len;
	char *bin = ASSERT_NOT_NULL(test_read_file(test_prog("split"), &len));
	test_write_file(path, bin, len);
	chmod(path, 0755);
	free(bin);
}

/* argv (argv[0] a path anyone may run) as nobody, or as root, stderr in errfile. */
static pid_t spawn_as(bool nobody, const char *errfile, const char *const argv[])
{
	uid_t id = nobody ? NOBODY : 0;

	return test_spawn_as(id, id, errfile, argv);
}

/* A copy of sonde anyone may run, made once per test (a running copy cannot be
 * rewritten). */
static const char *anyone_sonde(void)
{
	static const char *path;

	if (!path)
		path = test_copy_for_anyone(test_bin("sonde"));
	return path;
}

/* `sonde trace` with config file cfg (text with txt), as root or nobody, into out; its
 * stderr is returned (free it) and its exit status put in *status. */
static char *trace_as(bool nobody, const char *csock, const char *cfg, bool txt, const char *out,
		      int *status)
{
	char errfile[600];
	const char *sonde = anyone_sonde();

	snprintf(errfile, sizeof(errfile), "%s.err", out);
	const char *argv[] = {sonde, "trace", "--socket",	    csock, "-c", cfg,
			      "-o",  out,     txt ? "--txt" : NULL, NULL};
	*status = test_wait(spawn_as(nobody, errfile, argv), 120);
	return ASSERT_NOT_NULL(test_read_file(errfile, NULL));
}

/* A directory anyone may write, for files of a nobody consumer or producer. */
static const char *open_dir(void)
{
	static char dir[512];

	chmod(test_tmpdir(), 0755);
	snprintf(dir, sizeof(dir), "%s/any", test_tmpdir());
	mkdir(dir, 0777);
	chmod(dir, 0777);
	return dir;
}

static void write_txt(const char *path, const char *text)
{
	test_write_file(path, text, strlen(text));
	chmod(path, 0644);
}

static char *query(const char *csock)
{
	struct test_output o;

	test_runf(&o, 30, "%s trace --socket %s --query", test_bin("sonde"), csock);
	ASSERT_INT(o.status, ==, 0);
	char *out = strdup(o.out);
	test_output_free(&o);
	return ASSERT_NOT_NULL(out);
}

TEST_TIMEOUT(probes_sonded_without_probes_has_no_linux_perf, 60)
{
	static const char *const no[] = {"--no-probes", NULL};
	struct sonded d;

	sonded_start(&d, no);
	usleep(500000); /* time enough for a child to have registered */
	char *q = query(d.csock);
	ASSERT(strstr(q, "linux.perf") == NULL);
	ASSERT(strstr(q, "sonde.probes") == NULL);
	free(q);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)d.pid, (int)d.pid);
	char *children = ASSERT_NOT_NULL(test_read_file(path, NULL));
	ASSERT_STR_EQ(children, "");
	free(children);
	sonded_stop(&d);
	/* the control: by default it has */
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	q = query(d.csock);
	ASSERT_CONTAINS(q, "sonde.probes");
	free(q);
	sonded_stop(&d);
}

static void split_session_cfg(char *cfg, size_t n, pid_t pid, uint32_t ms)
{
	snprintf(cfg, n,
		 "buffers { size_kb: 8192 fill_policy: DISCARD }\nduration_ms: %u\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 } callstack_sampling { scope { target_pid: %d } }\n"
		 "} } }\n",
		 ms, (int)pid);
}

/* Killed, the probes come back (a new pid, registered again), and a new session works. */
TEST_TIMEOUT(probes_killed_child_is_restarted_and_serves_again, 120)
{
	struct sonded d;
	struct pft_trace t;
	char cfg[1024], want[64];
	const char *cfgfile = test_path("cfg.txt"), *out = test_path("restart.pftrace");
	int status;

	sec_require_root();
	test_require_perf();
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	pid_t first = sonded_probes_pid(&d, 0, 10);
	ASSERT_INT(kill(first, SIGKILL), ==, 0);
	pid_t second = sonded_probes_pid(&d, first, 10);
	snprintf(want, sizeof(want), "pid %d ", (int)second);
	for (double end = test_now() + 10;; usleep(20000)) {
		char *q = query(d.csock);
		bool back = strstr(q, want) && strstr(q, "linux.perf");
		free(q);
		if (back)
			break;
		if (test_now() > end)
			FAIL("the restarted probes (pid %d) never registered", (int)second);
	}
	const char *argv[] = {test_prog("split"), "30", NULL};
	pid_t split = test_spawn(argv);
	split_session_cfg(cfg, sizeof(cfg), split, 1000);
	write_txt(cfgfile, cfg);
	free(trace_as(false, d.csock, cfgfile, true, out, &status));
	kill(split, SIGKILL);
	test_wait(split, 10);
	sonded_stop(&d);
	ASSERT_INT(status, ==, 0);
	decode(out, &t);
	printf("probes %d killed, %d serves: %zu samples\n", (int)first, (int)second,
	       pft_samples_of(&t, (uint32_t)split));
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)split), >=, MIN_PROFILED);
	pft_free(&t);
}

/* target_cmdline as perf_event_config.proto says today: "wcsplit_*" takes both copies
 * named so; an absolute pattern matches argv0 itself (not the same name elsewhere); a
 * plain name matches argv0's binary name. */
TEST_TIMEOUT(probes_target_cmdline_wildcard_absolute_and_binary_name, 180)
{
	struct sonded d;
	struct pft_trace t;
	char a[512], b[512], c[512], cfg[2048];
	const char *cfgfile = test_path("cfg.txt"), *out1 = test_path("wild.pftrace"),
		   *out2 = test_path("names.pftrace");
	int status;
	int me = (int)getpid();

	sec_require_root();
	test_require_perf();
	snprintf(a, sizeof(a), "%s/wcsplit_a%d", test_tmpdir(), me);
	snprintf(b, sizeof(b), "%s/wcsplit_b%d", test_tmpdir(), me);
	snprintf(c, sizeof(c), "%s/other%d", test_tmpdir(), me);
	copy_split(a);
	copy_split(b);
	copy_split(c);
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	const char *av[] = {a, "60", NULL}, *bv[] = {b, "60", NULL}, *cv[] = {c, "60", NULL};
	pid_t pa = test_spawn(av), pb = test_spawn(bv), pc = test_spawn(cv);
	usleep(200000);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 16384 fill_policy: DISCARD }\nduration_ms: 3000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { target_cmdline: \"wcsplit_*\" } } } } }\n");
	write_txt(cfgfile, cfg);
	free(trace_as(false, d.csock, cfgfile, true, out1, &status));
	ASSERT_INT(status, ==, 0);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 16384 fill_policy: DISCARD }\nduration_ms: 3000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { target_cmdline: \"%s\"\n"
		 "    target_cmdline: \"/elsewhere/wcsplit_a%d\" target_cmdline: \"wcsplit_b%d\" } "
		 "}\n"
		 "} } }\n",
		 c, me, me);
	write_txt(cfgfile, cfg);
	free(trace_as(false, d.csock, cfgfile, true, out2, &status));
	ASSERT_INT(status, ==, 0);
	kill(pa, SIGKILL);
	kill(pb, SIGKILL);
	kill(pc, SIGKILL);
	test_wait(pa, 10);
	test_wait(pb, 10);
	test_wait(pc, 10);
	sonded_stop(&d);

	decode(out1, &t);
	printf("wcsplit_*: a %zu, b %zu, other %zu samples\n", pft_samples_of(&t, (uint32_t)pa),
	       pft_samples_of(&t, (uint32_t)pb), pft_samples_of(&t, (uint32_t)pc));
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pa), >=, MIN_PROFILED);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pb), >=, MIN_PROFILED);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pc), ==, 0);
	pft_free(&t);
	decode(out2, &t);
	printf("absolute and names: a %zu, b %zu, other %zu samples\n",
	       pft_samples_of(&t, (uint32_t)pa), pft_samples_of(&t, (uint32_t)pb),
	       pft_samples_of(&t, (uint32_t)pc));
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pa), ==, 0);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pb), >=, MIN_PROFILED);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)pc), >=, MIN_PROFILED);
	pft_free(&t);
}

/* A binary TraceConfig for linux.perf on pid whose DataSourceConfig carries a forged
 * sonded_consumer: uid and gid 0, every capability. */
static void forged_config(const char *path, pid_t pid)
{
	struct buf b = BUF_INIT;
	size_t m = sonde__pb_begin(&b, 1); /* buffers */
	sonde__pb_put_varint(&b, 1, 4096);
	sonde__pb_end(&b, m);
	size_t ds = sonde__pb_begin(&b, 2), dc = sonde__pb_begin(&b, 1);
	sonde__pb_put_string(&b, PF_DS_CONFIG_NAME, "linux.perf");
	size_t pe = sonde__pb_begin(&b, PF_DS_CONFIG_PERF_EVENT_CONFIG);
	size_t tb = sonde__pb_begin(&b, 15);
	sonde__pb_put_varint(&b, 2, 199);
	sonde__pb_end(&b, tb);
	size_t cs = sonde__pb_begin(&b, 16), sc = sonde__pb_begin(&b, 1);
	sonde__pb_put_varint(&b, 1, (uint64_t)pid);
	sonde__pb_end(&b, sc);
	sonde__pb_end(&b, cs);
	sonde__pb_end(&b, pe);
	size_t who = sonde__pb_begin(&b, PF_DS_CONFIG_SONDED_CONSUMER);
	sonde__pb_put_varint(&b, PF_SONDED_CONSUMER_UID, 0);
	sonde__pb_put_varint(&b, PF_SONDED_CONSUMER_GID, 0);
	sonde__pb_put_varint(&b, PF_SONDED_CONSUMER_PID, 1);
	sonde__pb_put_varint(&b, PF_SONDED_CONSUMER_CAP_EFF, UINT64_MAX);
	sonde__pb_end(&b, who);
	sonde__pb_end(&b, dc);
	sonde__pb_end(&b, ds);
	sonde__pb_put_varint(&b, 3, 700); /* duration_ms */
	ASSERT_OK(buf_error(&b));
	test_write_file(path, b.data, b.len);
	chmod(path, 0644);
	sonde__buf_free(&b);
}

/* A nobody consumer claiming root's credentials in sonded's own field: sonded strips it
 * and sends the consumer's real ones, so root's process stays refused. */
TEST_TIMEOUT(probes_forged_consumer_credentials_are_stripped, 120)
{
	struct sonded d;
	struct pft_trace t;
	char cfg[600], out[600], want[256];
	int status;

	sec_require_root();
	test_require_perf();
	const char *dir = open_dir();
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	const char *argv[] = {test_prog("split"), "30", NULL};
	pid_t target = test_spawn(argv);
	snprintf(cfg, sizeof(cfg), "%s/forged.cfg", dir);
	snprintf(out, sizeof(out), "%s/forged.pftrace", dir);
	forged_config(cfg, target);
	char *err = trace_as(true, d.csock, cfg, false, out, &status);
	kill(target, SIGKILL);
	test_wait(target, 10);
	sonded_stop(&d);
	snprintf(want, sizeof(want),
		 "linux.perf: refused: consumer uid 65534 may not profile pid %d (split, uid 0)",
		 (int)target);
	ASSERT_CONTAINS(err, want);
	ASSERT_INT(status, ==, 1);
	free(err);
	decode(out, &t);
	ASSERT_UINT(t.n_samples, ==, 0);
	pft_free(&t);
}

/* `sonde probes` as nobody, run by the test (not sonded's child), against a sonded without
 * probes of its own: a standalone run for its user's own service, for which the service
 * sends no consumer credentials, so the --targets policy decides (with --trust-parent it
 * would act for nobody in particular: test_probes_trust.c). Returns the probes' pid once
 * linux.perf is registered. */
static pid_t nobody_probes(const struct sonded *d, const char *targets, const char *errfile)
{
	const char *sonde = anyone_sonde();
	const char *argv[] = {sonde,   "probes", "-s",	 d->psock, "--targets",
			      targets, "-l",	 "info", NULL};
	pid_t pid = spawn_as(true, errfile, argv);
	client_wait_data_source(d->csock, "linux.perf");
	return pid;
}

/* Stops them, and waits until sonded no longer lists their data source. */
static void stop_probes(const struct sonded *d, pid_t pid)
{
	kill(pid, SIGTERM);
	ASSERT_INT(test_wait(pid, 20), ==, 0);
	for (double end = test_now() + 10;; usleep(20000)) {
		char *q = query(d->csock);
		bool gone = strstr(q, "linux.perf") == NULL;
		free(q);
		if (gone)
			return;
		if (test_now() > end)
			FAIL("linux.perf is still listed after its probes stopped");
	}
}

/* Root's process and nobody's, both asked for by a root consumer. */
static void both_targets_cfg(const char *path, pid_t root_pid, pid_t nobody_pid)
{
	char cfg[1024];

	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 8192 fill_policy: DISCARD }\nduration_ms: 3000\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { target_pid: %d target_pid: %d } } } } }\n",
		 (int)root_pid, (int)nobody_pid);
	write_txt(path, cfg);
}

TEST_TIMEOUT(probes_targets_own_and_any_for_another_service, 180)
{
	static const char *const no[] = {"--no-probes", NULL};
	struct sonded d;
	struct pft_trace t;
	char split[600], errfile[600], want[256];
	const char *cfgfile = test_path("cfg.txt"), *own = test_path("own.pftrace"),
		   *any = test_path("any.pftrace");
	int status;

	sec_require_root();
	test_require_perf();
	const char *dir = open_dir();
	snprintf(split, sizeof(split), "%s/split", dir);
	copy_split(split);
	sonded_start(&d, no);
	const char *argv[] = {split, "60", NULL};
	pid_t root_t = spawn_as(false, NULL, argv), nobody_t = spawn_as(true, NULL, argv);
	both_targets_cfg(cfgfile, root_t, nobody_t);

	/* own: the probes act as their own user, nobody */
	snprintf(errfile, sizeof(errfile), "%s/probes-own.err", dir);
	pid_t probes = nobody_probes(&d, "own", errfile);
	char *err = trace_as(false, d.csock, cfgfile, true, own, &status);
	stop_probes(&d, probes);
	snprintf(want, sizeof(want),
		 "linux.perf: refused: consumer uid 65534 may not profile pid %d (split, uid 0)",
		 (int)root_t);
	ASSERT_CONTAINS(err, want);
	free(err);
	char *log = ASSERT_NOT_NULL(test_read_file(errfile, NULL));
	ASSERT_CONTAINS(log, "probes: running as uid 65534 without CAP_PERFMON and CAP_SYS_PTRACE");
	ASSERT_CONTAINS(log, "consumer uid 65534 (--targets own)): refused: consumer uid 65534");
	free(log);
	decode(own, &t);
	printf("--targets own: root's %zu, nobody's %zu samples\n",
	       pft_samples_of(&t, (uint32_t)root_t), pft_samples_of(&t, (uint32_t)nobody_t));
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)root_t), ==, 0);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)nobody_t), >=, MIN_PROFILED);
	pft_free(&t);

	/* any: no check of the probes' own; the kernel refuses nobody's probes root's
	 * process, and the message names what they lack */
	snprintf(errfile, sizeof(errfile), "%s/probes-any.err", dir);
	probes = nobody_probes(&d, "any", errfile);
	err = trace_as(false, d.csock, cfgfile, true, any, &status);
	stop_probes(&d, probes);
	snprintf(want, sizeof(want), "linux.perf: cannot profile pid %d: ", (int)root_t);
	ASSERT_CONTAINS(err, want);
	ASSERT_CONTAINS(err, "the probes do not run as root: profiling another user's process "
			     "needs CAP_PERFMON and CAP_SYS_PTRACE");
	ASSERT(strstr(err, "refused: consumer") == NULL);
	free(err);
	decode(any, &t);
	printf("--targets any: root's %zu, nobody's %zu samples\n",
	       pft_samples_of(&t, (uint32_t)root_t), pft_samples_of(&t, (uint32_t)nobody_t));
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)root_t), ==, 0);
	ASSERT_UINT(pft_samples_of(&t, (uint32_t)nobody_t), >=, MIN_PROFILED);
	pft_free(&t);

	kill(root_t, SIGKILL);
	kill(nobody_t, SIGKILL);
	test_wait(root_t, 10);
	test_wait(nobody_t, 10);
	sonded_stop(&d);
}
