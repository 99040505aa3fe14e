/* Whom sonded's probes act for, however the producer socket is spelled (docs/service.md,
 * "sonded and its probes", "Security"): each test runs the consumer as uid nobody with
 * `sonde trace` against a root sonded, as test_perfauth.c does. The probes reach sonded
 * over a socketpair sonded made when it started them, so a TCP producer socket, a list
 * whose Unix name is gone or a restart changes nothing; probes that cannot tell who the
 * consumer is act for nobody in particular, never with their own (root) rights. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/client.h>

#include "../test.h"
#include "../util.h"
#include "client_util.h"
#include "hostile_util.h"
#include "pftrace_util.h"
#include "sec_util.h"
#include "svc_util.h"

/* A program's output and exit, and its trace decoded. */
struct trun {
	int status;
	char *err;
	struct pft_trace t;
	char out[600], errf[600];
};

/* `sonde trace` as uid on consumer socket csock, started: linux.perf on scope with kernel
 * frames asked for, for ms; with hidepid, in a mount namespace of its own whose /proc is
 * a procfs mounted hidepid=2 (the machine's /proc is left alone). trace_end waits. */
static pid_t trace_start(uid_t uid, const char *csock, const char *scope, int ms, bool hidepid,
			 struct trun *r)
{
	char dir[512], cfgf[600], cfg[1024];

	snprintf(dir, sizeof(dir), "%s/as%u.%d", test_tmpdir(), (unsigned)uid, rand());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	snprintf(r->out, sizeof(r->out), "%s/out.pftrace", dir);
	snprintf(r->errf, sizeof(r->errf), "%s/err.txt", dir);
	snprintf(cfgf, sizeof(cfgf), "%s/cfg.txt", dir);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 16384 fill_policy: DISCARD }\nduration_ms: %d\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { %s } kernel_frames: true }\n"
		 "  ring_buffer_read_period_ms: 50 } } }\n",
		 ms, scope);
	test_write_file(cfgf, cfg, strlen(cfg));
	chmod(cfgf, 0644);
	char sonde[512];
	snprintf(sonde, sizeof(sonde), "%s", test_copy_for_anyone(test_bin("sonde")));
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		int fd = open(r->errf, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (hidepid && (unshare(CLONE_NEWNS) < 0 ||
				mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
				mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
				      "hidepid=2") < 0)) {
			dprintf(fd, "cannot mount a private /proc with hidepid=2: %s\n",
				strerror(errno));
			_exit(97);
		}
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
			_exit(99);
		execl(sonde, "sonde", "trace", "--socket", csock, "--txt", "-c", cfgf, "-o", r->out,
		      (char *)NULL);
		_exit(98);
	}
	return child;
}

static void trace_end(pid_t child, struct trun *r)
{
	r->status = test_wait(child, 120);
	r->err = ASSERT_NOT_NULL(test_read_file(r->errf, NULL));
	if (r->status == 97)
		SKIP("%s", r->err);
	size_t len;
	uint8_t *data = (uint8_t *)test_read_file(r->out, &len);
	if (!data)
		FAIL("sonde trace exited %d without a trace:\n%s", r->status, r->err);
	pft_decode(data, len, &r->t);
	free(data);
}

static void trace_scope_as(uid_t uid, const char *csock, const char *scope, int ms, bool hidepid,
			   struct trun *r)
{
	trace_end(trace_start(uid, csock, scope, ms, hidepid, r), r);
}

static void trace_pid_as(uid_t uid, const char *csock, pid_t pid, int ms, struct trun *r)
{
	char scope[64];

	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	trace_scope_as(uid, csock, scope, ms, false, r);
}

static void trun_free(struct trun *r)
{
	free(r->err);
	pft_free(&r->t);
}

static size_t kernel_frames(const struct pft_trace *t)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n_samples; i++)
		n += t->samples[i].leaf_mapping && !strcmp(t->samples[i].leaf_mapping, "/kernel");
	return n;
}

/* A syscall-heavy root process (most of its samples would have kernel frames). */
static pid_t root_target(void)
{
	const char *argv[] = {test_prog("kernel_syscalls"), "300", NULL};

	return test_spawn_as(0, 0, NULL, argv);
}

static void stop_target(pid_t pid)
{
	kill(pid, SIGKILL);
	test_wait(pid, 10);
}

/* nobody asks for root's process: refused by the rule for uid 65534 (which shows that
 * the probes were told who the consumer is), no sample of it, no kernel frame. */
static void expect_nobody_refused(const struct sonded *d, pid_t root)
{
	struct trun r;
	char want[128];

	trace_pid_as(SEC_NOBODY, d->csock, root, 1000, &r);
	printf("nobody: %zu samples of root's pid %d, %zu kernel frames\n",
	       pft_samples_of(&r.t, (uint32_t)root), (int)root, kernel_frames(&r.t));
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)root), ==, 0);
	ASSERT_UINT(kernel_frames(&r.t), ==, 0);
	snprintf(want, sizeof(want), "refused: consumer uid 65534 may not profile pid %d",
		 (int)root);
	ASSERT_CONTAINS(r.err, want);
	trun_free(&r);
}

/* The control, so that nobody's zero means something: root gets root's process, with
 * kernel frames, through the same probes. Sessions until 5 samples and a kernel frame
 * accumulated, up to a deadline: a loaded machine leaves the target a part of a CPU, so
 * one window may hold fewer. */
static void expect_root_profiles(const struct sonded *d, pid_t root)
{
	struct trun r;
	size_t samples = 0, kframes = 0;

	for (double end = test_now() + 60; (samples < 5 || kframes < 1) && test_now() < end;) {
		trace_pid_as(0, d->csock, root, 1000, &r);
		if (r.status != 0)
			FAIL("sonde trace as root exited %d:\n%s", r.status, r.err);
		printf("root: %zu samples, %zu kernel frames\n",
		       pft_samples_of(&r.t, (uint32_t)root), kernel_frames(&r.t));
		samples += pft_samples_of(&r.t, (uint32_t)root);
		kframes += kernel_frames(&r.t);
		trun_free(&r);
	}
	ASSERT_UINT(samples, >=, 5);
	ASSERT_UINT(kframes, >=, 1);
}

static void rig_require(void)
{
	sec_require_root();
	test_require_perf();
	ASSERT_OK(chmod(test_tmpdir(), 0755));
}

/* Issue #21, defect 1: a TCP-only producer socket. sonded's probes used to connect over
 * TCP, where they could not tell their parent from anyone, and then acted as root for
 * every consumer. */
TEST_TIMEOUT(probes_trust_tcp_producer_socket_gives_nobody_nothing_of_root, 240)
{
	struct sonded d;
	char prod[64];

	rig_require();
	snprintf(prod, sizeof(prod), "127.0.0.1:%u", test_free_tcp_port());
	sonded_start_at(&d, prod, NULL, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	pid_t root = root_target();
	expect_nobody_refused(&d, root);
	expect_root_profiles(&d, root);
	/* and after a restart of the probes, the same */
	pid_t probes = sonded_probes_pid(&d, 0, 10);
	kill(probes, SIGKILL);
	sonded_probes_pid(&d, probes, 20);
	client_wait_data_source(d.csock, "linux.perf");
	expect_nobody_refused(&d, root);
	stop_target(root);
	sonded_stop(&d);
}

/* Defect 1 with a list: the Unix name first, then TCP. The Unix socket file is removed
 * and the probes are killed, so that a name lookup could reach sonded over TCP only. */
TEST_TIMEOUT(probes_trust_list_with_forced_tcp_reconnect_gives_nobody_nothing_of_root, 240)
{
	struct sonded d;
	char prod[600];
	const char *unix_name = test_path("p.sock");

	rig_require();
	snprintf(prod, sizeof(prod), "%s,127.0.0.1:%u", unix_name, test_free_tcp_port());
	sonded_start_at(&d, prod, NULL, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	ASSERT_OK(unlink(unix_name));
	pid_t probes = sonded_probes_pid(&d, 0, 10);
	kill(probes, SIGKILL);
	sonded_probes_pid(&d, probes, 20);
	client_wait_data_source(d.csock, "linux.perf");
	pid_t root = root_target();
	expect_nobody_refused(&d, root);
	expect_root_profiles(&d, root);
	stop_target(root);
	sonded_stop(&d);
}

/* `sonde probes --trust-parent` that the service did not start (a root process told to
 * trust its parent, which is no service): it cannot know who the consumer is, so it acts
 * for nobody in particular, for root's consumer as for nobody's, and says so. */
TEST_TIMEOUT(probes_trust_parent_without_its_channel_acts_for_nobody, 240)
{
	static const char *const no[] = {"--no-probes", NULL};
	struct sonded d;
	struct trun r;
	char want[160];
	const char *errfile = test_path("probes.err");

	rig_require();
	sonded_start(&d, no);
	pid_t probes = fork();
	ASSERT(probes >= 0);
	if (probes == 0) {
		int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, STDERR_FILENO);
		execl(test_bin("sonde"), "sonde", "probes", "-s", d.psock, "--trust-parent", "-l",
		      "info", (char *)NULL);
		_exit(98);
	}
	client_wait_data_source(d.csock, "linux.perf");
	pid_t root = root_target();
	for (int who = 0; who < 2; who++) {
		trace_pid_as(who ? 0 : SEC_NOBODY, d.csock, root, 1000, &r);
		printf("%s: %zu samples of root's pid, %zu kernel frames\n",
		       who ? "root" : "nobody", pft_samples_of(&r.t, (uint32_t)root),
		       kernel_frames(&r.t));
		ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)root), ==, 0);
		ASSERT_UINT(kernel_frames(&r.t), ==, 0);
		/* nothing about the process: not its name, not its owner */
		snprintf(want, sizeof(want), "pid %d (", (int)root);
		ASSERT(strstr(r.err, want) == NULL);
		ASSERT_CONTAINS(r.err, "refused: an unidentified consumer may profile no process");
		trun_free(&r);
	}
	kill(probes, SIGTERM);
	test_wait(probes, 20);
	char *log = ASSERT_NOT_NULL(test_read_file(errfile, NULL));
	ASSERT_CONTAINS(log, "act for nobody in particular");
	free(log);
	stop_target(root);
	sonded_stop(&d);
}

/* A listening Unix socket at path, bound by a child running as uid; returns its pid. */
static pid_t listen_as(uid_t uid, const char *path)
{
	int ready[2];

	ASSERT_OK(pipe(ready));
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		if (strlen(path) >= sizeof(a.sun_path))
			_exit(97);
		memcpy(a.sun_path, path, strlen(path) + 1);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0 ||
		    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0)
			_exit(99);
		if (write(ready[1], "x", 1) != 1)
			_exit(98);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char c;
	ASSERT_INT(read(ready[0], &c, 1), ==, 1);
	close(ready[0]);
	return pid;
}

/* Issue #21, defect 5: a comma-joined list is split before anything is tried. nobody
 * binds a socket at the literal list `DIR/p.sock,127.0.0.1:PORT` (in a directory it may
 * write); a root producer given the list reaches sonded at DIR/p.sock, not nobody's
 * listener (which the old whole-name attempt reached first, and refused as the service:
 * the producer never connected). */
TEST_TIMEOUT(probes_trust_socket_list_is_split_before_any_connect, 120)
{
	static const char *const no[] = {"--no-probes", NULL};
	struct sonded d;
	char dir[512], sock[600], list[700];

	sec_require_root();
	ASSERT_OK(chmod(test_tmpdir(), 0755));
	snprintf(dir, sizeof(dir), "%s/shared", test_tmpdir());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 01777) == 0);
	snprintf(sock, sizeof(sock), "%s/p.sock", dir);
	snprintf(list, sizeof(list), "%s,127.0.0.1:%u", sock, test_free_tcp_port());
	sonded_start_at(&d, list, NULL, no);
	pid_t squatter = listen_as(SEC_NOBODY, list);
	struct sonde_producer_opts o = {
		.sz = sizeof(o), .name = "list.test", .socket = list, .timeout_ms = 5000};
	struct sonde_producer *p = sonde_producer__new(&o);
	if (!p)
		FAIL("no connection through %s: %s", list, strerror(errno));
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs)};
	ASSERT_OK(sonde_producer__register_data_source(p, "list.test.ds", &cbs));
	/* the one who answered is sonded: it lists the data source */
	client_wait_data_source(d.csock, "list.test.ds");
	sonde_producer__free(p);
	kill(squatter, SIGKILL);
	test_wait(squatter, 10);
	sonded_stop(&d);
}

/* Issue #21, defect 4: nobody's own /proc is mounted hidepid=2 (in its mount namespace;
 * sonded's is not), and it asks for every process by cmdline. The refusals name none of
 * the processes that /proc hides from it (root's), and say how many there were; the
 * control, without hidepid, names root's process. */
TEST_TIMEOUT(probes_trust_refusals_name_no_process_hidden_by_hidepid, 240)
{
	struct sonded d;
	struct trun r;
	char want[128];

	rig_require();
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	pid_t root = root_target();
	snprintf(want, sizeof(want), "pid %d (", (int)root);

	trace_scope_as(SEC_NOBODY, d.csock, "target_cmdline: \"kernel_sys*\"", 1500, false, &r);
	ASSERT_CONTAINS(r.err, want);
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)root), ==, 0);
	trun_free(&r);

	trace_scope_as(SEC_NOBODY, d.csock, "target_cmdline: \"*\"", 1500, true, &r);
	printf("%s", r.err);
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)root), ==, 0);
	ASSERT(strstr(r.err, want) == NULL);
	ASSERT(strstr(r.err, "may not profile pid") == NULL);
	ASSERT(strstr(r.t.errors, "may not profile pid") == NULL);
	ASSERT_CONTAINS(r.err, "that consumer uid 65534 cannot see in its /proc (hidepid) were "
			       "not profiled");
	trun_free(&r);
	stop_target(root);
	sonded_stop(&d);
}

/* Whether process pid holds a perf event (its recorder has opened one). */
static bool has_perf_event(pid_t pid)
{
	char dir[64], link[600], target[64];

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(d));) {
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			found = !strcmp(target, "anon_inode:[perf_event]");
		}
	}
	closedir(d);
	return found;
}

static void wait_perf_event(pid_t pid)
{
	for (double end = test_now() + 60; !has_perf_event(pid); usleep(20000))
		if (test_now() > end)
			FAIL("sonde probes (pid %d) opened no perf event in 60 s", (int)pid);
}

/* A restart of the probes in the middle of a session is said in that session's trace (a
 * warning from the service, which `sonde trace` prints), rather than left as a silent
 * gap; the data source starts again on the new probes. nobody's session of its own
 * process, root's sonded. */
TEST_TIMEOUT(probes_trust_restart_is_noticed_in_the_session, 240)
{
	struct sonded d;
	struct trun r;
	char scope[64], want[160];

	rig_require();
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	const char *argv[] = {test_copy_for_anyone(test_prog("kernel_syscalls")), "60", NULL};
	pid_t own = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)own);
	pid_t probes = sonded_probes_pid(&d, 0, 10);
	pid_t tr = trace_start(SEC_NOBODY, d.csock, scope, 60000, false, &r);
	wait_perf_event(probes);
	kill(probes, SIGKILL);
	wait_perf_event(sonded_probes_pid(&d, probes, 20));
	/* the session ends (Ctrl-C: a flush, then the trace) once the target has had 1 s of
	 * CPU under the new probes, rather than at a fixed duration: about 200 periods at
	 * 199 Hz, of which those in user code give samples (user frames only: nobody's
	 * session: about 30) */
	double c0 = proc_cpu_s(own);
	for (double end = test_now() + 60; proc_cpu_s(own) - c0 < 1.0; usleep(20000))
		if (test_now() > end)
			FAIL("the target had no 1 s of CPU in 60 s");
	kill(tr, SIGINT);
	trace_end(tr, &r);
	printf("%s", r.err);
	snprintf(want, sizeof(want), "linux.perf: warning: sonde probes (pid %d) ended",
		 (int)probes);
	ASSERT_CONTAINS(r.err, want);
	/* the new probes opened the instance's events again (waited for above), and the
	 * trace has samples of it */
	printf("%zu samples of the target\n", (size_t)pft_samples_of(&r.t, (uint32_t)own));
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)own), >=, 1);
	trun_free(&r);
	stop_target(own);
	sonded_stop(&d);
}
