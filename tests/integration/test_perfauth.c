/* linux.perf never gives a consumer more than the kernel would (docs/service.md,
 * "Authorization"): each test runs the attack as uid nobody with `sonde trace` against a
 * root sonded, on targets put in the state under test by tests/progs/auth_target.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/connector.h>
#include <sonde/error.h>

#include "../test.h"
#include "../util.h"
#include "client_util.h"
#include "pftrace_util.h"
#include "sec_util.h"
#include "svc_util.h"

enum { OTHER_GID = 4242 };

/* sonded (root) with linux.perf, its sockets reachable by nobody. */
/* kernel.perf_event_paranoid, read with the shared lock by rig_start: what sonded decides
 * for an unprivileged consumer follows it, so no test elsewhere changes it meanwhile. */
static long rig_paranoid;

static void rig_start(struct sonded *d)
{
	sec_require_root();
	test_require_perf();
	rig_paranoid = test_sysctl_get("kernel/perf_event_paranoid");
	ASSERT_OK(chmod(test_tmpdir(), 0755));
	sonded_start(d, NULL);
	client_wait_data_source(d->csock, "linux.perf");
}

/* A copy of auth_target anyone may run, with owner, group and mode as given (a set-ID
 * copy needs a file system mounted without nosuid: the test skips otherwise). */
static void target_copy(char *out, size_t cap, const char *name, uid_t uid, gid_t gid, mode_t mode)
{
	struct statvfs sv;

	snprintf(out, cap, "%s/%s", test_tmpdir(), name);
	size_t len;
	char *bin = ASSERT_NOT_NULL(test_read_file(test_prog("auth_target"), &len));
	test_write_file(out, bin, len);
	free(bin);
	ASSERT_OK(chown(out, uid, gid));
	ASSERT_OK(chmod(out, mode));
	ASSERT_OK(statvfs(out, &sv));
	if ((mode & (S_ISUID | S_ISGID)) && (sv.f_flag & ST_NOSUID))
		SKIP("%s is on a file system mounted nosuid: set-ID bits have no effect",
		     test_tmpdir());
}

struct run {
	int status;
	char *err; /* sonde trace's stderr */
	struct pft_trace t;
};

/* `sonde trace` as uid with the config text cfg. */
static void trace_as_cfg(uid_t uid, const struct sonded *d, const char *cfg, struct run *r)
{
	char dir[512], out[600], errf[600], cfgf[600];

	snprintf(dir, sizeof(dir), "%s/as%u.%d", test_tmpdir(), (unsigned)uid, rand());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	snprintf(out, sizeof(out), "%s/out.pftrace", dir);
	snprintf(errf, sizeof(errf), "%s/err.txt", dir);
	snprintf(cfgf, sizeof(cfgf), "%s/cfg.txt", dir);
	test_write_file(cfgf, cfg, strlen(cfg));
	chmod(cfgf, 0644);
	char sonde[512];
	snprintf(sonde, sizeof(sonde), "%s", test_copy_for_anyone(test_bin("sonde")));
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(uid ? SEC_NOBODY : 0) < 0 || setuid(uid) < 0)
			_exit(99);
		execl(sonde, "sonde", "trace", "--socket", d->csock, "--txt", "-c", cfgf, "-o", out,
		      (char *)NULL);
		_exit(98);
	}
	r->status = test_wait(child, 120);
	r->err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	size_t len;
	uint8_t *data = (uint8_t *)test_read_file(out, &len);
	if (!data)
		FAIL("sonde trace exited %d without a trace:\n%s", r->status, r->err);
	pft_decode(data, len, &r->t);
	free(data);
}

/* `sonde trace` as uid with a linux.perf config around `scope` and `extra`. */
static void trace_as(uid_t uid, const struct sonded *d, const char *scope, const char *extra,
		     int duration_ms, struct run *r)
{
	char cfg[2048];

	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 16384 fill_policy: DISCARD }\nduration_ms: %d\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 }\n"
		 "  callstack_sampling { scope { %s } %s }\n"
		 "  ring_buffer_read_period_ms: 50 } } }\n",
		 duration_ms, scope, extra ? extra : "");
	trace_as_cfg(uid, d, cfg, r);
}

static void run_free(struct run *r)
{
	free(r->err);
	pft_free(&r->t);
}

static size_t samples_in(const struct pft_trace *t, const char *fn)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n_samples; i++)
		n += t->samples[i].stack && strstr(t->samples[i].stack, fn) != NULL;
	return n;
}

/* Sessions of duration_ms, as uid, on scope, until they hold min samples of pid in all (at
 * most 8): a loaded machine leaves a spinning target a part of a CPU, so its samples are
 * judged on the sessions' total, never on one window. Every session must succeed; check,
 * when given, judges each one. Returns the total. */
static size_t samples_over_sessions(uid_t uid, const struct sonded *d, const char *scope,
				    const char *extra, int duration_ms, pid_t pid, size_t min,
				    void (*check)(const struct run *r))
{
	size_t total = 0;

	for (int i = 1; i <= 8 && total < min; i++) {
		struct run r;

		trace_as(uid, d, scope, extra, duration_ms, &r);
		if (r.status != 0)
			FAIL("sonde trace exited %d:\n%s", r.status, r.err);
		if (check)
			check(&r);
		total += pft_samples_of(&r.t, (uint32_t)pid);
		printf("session %d: %zu samples of pid %d, %zu in all\n", i,
		       pft_samples_of(&r.t, (uint32_t)pid), (int)pid, total);
		run_free(&r);
	}
	return total;
}

static void stop_target(pid_t pid)
{
	kill(pid, SIGKILL);
	test_wait(pid, 10);
}

/* Waits until target pid has put itself in the state its mode asks for, which it does
 * after its exec (where test_spawn_as returned), so that a loaded machine may not have run
 * it yet: all its uids and gids `id`, and its mm not dumpable, which the kernel shows by
 * giving its /proc files to root (as the service reads it, src/proc/perfauth.c). An event
 * awaited up to 30 s, not a pause. */
static void await_nondumpable_as(pid_t pid, unsigned id)
{
	char path[64], line[256], want[64];
	double end = test_now() + 30;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(want, sizeof(want), "\t%u\t%u\t%u\t%u\n", id, id, id, id);
	for (;;) {
		int ids_ok = 0;
		struct stat st;
		FILE *f = fopen(path, "r");
		ASSERT(f != NULL);
		while (fgets(line, sizeof(line), f))
			if ((!strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4)) &&
			    !strcmp(line + 4, want))
				ids_ok++;
		fclose(f);
		ASSERT_OK(stat(path, &st));
		if (ids_ok == 2 && st.st_uid == 0)
			return;
		if (test_now() > end)
			FAIL("pid %d never became non-dumpable with ids %u", (int)pid, id);
		usleep(1000);
	}
}

/* nobody asks for target pid, which it must not get: refused with the reason, in the
 * trace and on stderr, and not one sample of it. */
static void expect_refused(const struct sonded *d, pid_t pid, const char *reason)
{
	struct run r;
	char scope[64], want[256];

	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	trace_as(SEC_NOBODY, d, scope, NULL, 1000, &r);
	snprintf(want, sizeof(want), "refused: consumer uid 65534 may not profile pid %d",
		 (int)pid);
	ASSERT_CONTAINS(r.err, want);
	ASSERT_CONTAINS(r.err, reason);
	ASSERT_CONTAINS(r.t.errors, want);
	ASSERT_INT(r.status, ==, 1);
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)pid), ==, 0);
	run_free(&r);
}

/* The control: nobody's own ordinary process is profiled. */
TEST_TIMEOUT(perfauth_nobody_profiles_its_own_process, 120)
{
	struct sonded d;
	char scope[64];

	rig_start(&d);
	const char *argv[] = {test_copy_for_anyone(test_prog("auth_target")), "spin", "60", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	ASSERT_UINT(samples_over_sessions(SEC_NOBODY, &d, scope, NULL, 1000, pid, 20, NULL), >=,
		    20);
	stop_target(pid);
	sonded_stop(&d);
}

/* A set-user-ID root program run by nobody: its effective and saved uids are root's. */
TEST_TIMEOUT(perfauth_setuid_target_is_refused, 120)
{
	struct sonded d;
	char path[512];

	rig_start(&d);
	target_copy(path, sizeof(path), "auth_setuid", 0, 0, 04755);
	const char *argv[] = {path, "spin", "30", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	/* its ids are the exec's, in place when test_spawn_as returned */
	expect_refused(&d, pid, "its real, effective and saved uids are not all the consumer's");
	stop_target(pid);
	sonded_stop(&d);
}

/* ... and one that went back to nobody's uid after it started: all its uids are nobody's,
 * but the kernel keeps it non-dumpable (it may hold what it opened as root). */
TEST_TIMEOUT(perfauth_setuid_target_back_to_callers_uid_is_refused, 120)
{
	struct sonded d;
	char path[512];

	rig_start(&d);
	target_copy(path, sizeof(path), "auth_setuid", 0, 0, 04755);
	const char *argv[] = {path, "dropsuid", "30", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	await_nondumpable_as(pid, SEC_NOBODY);
	expect_refused(&d, pid, "it is not dumpable");
	stop_target(pid);
	sonded_stop(&d);
}

/* A set-group-ID program run by nobody (as ssh-agent is): uids all nobody's, but the
 * effective and saved gids are another group's. */
TEST_TIMEOUT(perfauth_setgid_target_is_refused, 120)
{
	struct sonded d;
	char path[512];

	rig_start(&d);
	target_copy(path, sizeof(path), "auth_setgid", 0, OTHER_GID, 02755);
	const char *argv[] = {path, "spin", "30", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	/* its ids are the exec's, in place when test_spawn_as returned */
	expect_refused(&d, pid, "its real, effective and saved gids are not all the consumer's");
	stop_target(pid);
	sonded_stop(&d);
}

/* nobody's own process that made itself non-dumpable with prctl. */
TEST_TIMEOUT(perfauth_nondumpable_target_is_refused, 120)
{
	struct sonded d;

	rig_start(&d);
	const char *argv[] = {test_copy_for_anyone(test_prog("auth_target")), "nodump", "30", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	await_nondumpable_as(pid, SEC_NOBODY);
	expect_refused(&d, pid, "it is not dumpable");
	stop_target(pid);
	sonded_stop(&d);
}

/* A root daemon that changed its uids and gids to nobody's after it started. */
TEST_TIMEOUT(perfauth_target_that_changed_uid_is_refused, 120)
{
	struct sonded d;

	rig_start(&d);
	const char *argv[] = {test_copy_for_anyone(test_prog("auth_target")), "drop", "30", "65534",
			      NULL};
	pid_t pid = test_spawn_as(0, 0, NULL, argv);
	await_nondumpable_as(pid, SEC_NOBODY);
	expect_refused(&d, pid, "it is not dumpable");
	stop_target(pid);
	sonded_stop(&d);
}

/* Root's consumer holds CAP_SYS_PTRACE: it may profile the set-group-ID process. */
TEST_TIMEOUT(perfauth_root_consumer_profiles_setgid_target, 120)
{
	struct sonded d;
	char path[512], scope[64];

	rig_start(&d);
	target_copy(path, sizeof(path), "auth_setgid", 0, OTHER_GID, 02755);
	const char *argv[] = {path, "spin", "60", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	ASSERT_UINT(samples_over_sessions(0, &d, scope, NULL, 1000, pid, 20, NULL), >=, 20);
	stop_target(pid);
	sonded_stop(&d);
}

/* nobody's process, profiled, execs a set-user-ID root program. The kernel ends perf
 * events itself at an exec that leaves the process non-dumpable (fs/exec.c
 * begin_new_exec); sonded must stop too (it would otherwise go on reading the process's
 * maps, memory and mapped files as root for the recording) and say so in the trace. */
TEST_EXCLUSIVE(perfauth_target_exec_of_setuid_program_ends_profiling, 120)
{
	struct sonded d;
	struct run r;
	char path[512], scope[64];

	rig_start(&d);
	target_copy(path, sizeof(path), "auth_setuid", 0, 0, 04755);
	const char *argv[] = {test_copy_for_anyone(test_prog("auth_target")), "exec", "1", path,
			      NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	usleep(100000);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	trace_as(SEC_NOBODY, &d, scope, NULL, 2500, &r);
	printf("%zu samples in public_work, %zu in secret_work\n", samples_in(&r.t, "public_work"),
	       samples_in(&r.t, "secret_work"));
	ASSERT_UINT(samples_in(&r.t, "public_work"), >=, 10);
	ASSERT_UINT(samples_in(&r.t, "secret_work"), ==, 0);
	char want[160];
	snprintf(want, sizeof(want), "may not profile pid %d", (int)pid);
	ASSERT_CONTAINS(r.t.errors, want);
	ASSERT_CONTAINS(r.t.errors, "after it exec'd; no longer profiled");
	ASSERT_CONTAINS(r.err, "after it exec'd; no longer profiled");
	run_free(&r);
	stop_target(pid);
	sonded_stop(&d);
}

/* Samples whose leaf is a kernel frame (the one mapping named /kernel), and how many of
 * those frames have an address. */
static void kernel_frames_of(const struct pft_trace *t, size_t *frames, size_t *addressed)
{
	*frames = *addressed = 0;
	for (size_t i = 0; i < t->n_samples; i++) {
		const struct pft_sample *s = &t->samples[i];
		if (!s->leaf_mapping || strcmp(s->leaf_mapping, "/kernel") != 0)
			continue;
		(*frames)++;
		*addressed += s->leaf_rel_pc != 0;
	}
}

/* A session of nobody's at paranoid 2 asked for kernel frames: told it gets none, and none. */
static void no_kernel_frames(const struct run *r)
{
	size_t kf, ka;

	ASSERT_CONTAINS(r->err, "linux.perf: warning: kernel frames are not permitted for "
				"consumer uid 65534");
	kernel_frames_of(&r->t, &kf, &ka);
	printf("%zu samples, %zu with a kernel leaf\n", r->t.n_samples, kf);
	ASSERT_UINT(kf, ==, 0);
}

/* With kernel.perf_event_paranoid 2, nobody gets no kernel frames of its own
 * syscall-heavy process, and is told why. */
TEST_EXCLUSIVE(perfauth_kernel_frames_refused_to_unprivileged_consumer, 120)
{
	struct sonded d;
	char scope[64];

	rig_start(&d);
	/* the kernel's default (and Debian's more) refuses kernel samples to nobody */
	if (rig_paranoid != 2)
		test_sysctl_set("kernel/perf_event_paranoid", 2);
	const char *argv[] = {test_copy_for_anyone(test_prog("kernel_syscalls")), "60", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	usleep(200000);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	/* user time only, now: a small share of this program's */
	ASSERT_UINT(samples_over_sessions(SEC_NOBODY, &d, scope, "kernel_frames: true", 1500, pid,
					  5, no_kernel_frames),
		    >=, 5);
	stop_target(pid);
	sonded_stop(&d);
}

/* Root gets kernel frames, named, under the kernel mapping, without their addresses. */
TEST_TIMEOUT(perfauth_kernel_frames_carry_names_not_addresses, 120)
{
	struct sonded d;
	struct run r;
	char scope[64];
	size_t kf = 0, ka = 0, named = 0;

	rig_start(&d);
	const char *argv[] = {test_prog("kernel_syscalls"), "300", NULL};
	pid_t pid = test_spawn_as(0, 0, NULL, argv);
	snprintf(scope, sizeof(scope), "target_pid: %d", (int)pid);
	/* sessions until 5 kernel leaves accumulated, up to a deadline: a loaded machine
	 * leaves the target a part of a CPU, so one window may hold fewer */
	for (double end = test_now() + 60; kf < 5 && test_now() < end;) {
		size_t k1, a1;
		trace_as(0, &d, scope, "kernel_frames: true", 1000, &r);
		if (r.status != 0)
			FAIL("sonde trace exited %d:\n%s", r.status, r.err);
		kernel_frames_of(&r.t, &k1, &a1);
		printf("%zu samples, %zu with a kernel leaf, %zu of them with an address\n",
		       r.t.n_samples, k1, a1);
		kf += k1;
		ka += a1;
		/* named from kallsyms: the leaf has a name */
		for (size_t i = 0; i < r.t.n_samples; i++) {
			const struct pft_sample *s = &r.t.samples[i];
			const char *leaf = s->stack ? strrchr(s->stack, ';') : NULL;
			if (s->leaf_mapping && !strcmp(s->leaf_mapping, "/kernel") && leaf)
				named += strcmp(leaf, ";?") != 0;
		}
		run_free(&r);
	}
	ASSERT_UINT(kf, >=, 5);
	ASSERT_UINT(ka, ==, 0);
	ASSERT_UINT(named, >=, kf / 2);
	stop_target(pid);
	sonded_stop(&d);
}

/* uid 0xFFFFFFFF is (uid_t)-1, no one's uid: the connector refuses to grant it (and gid
 * 0xFFFFFFFF), so no connection can carry it into a credential comparison. */
TEST_TIMEOUT(perfauth_connector_refuses_to_grant_uid_minus_one, 60)
{
	struct sonded d;
	int sv[2];

	sec_require_root();
	sonded_start(&d, NULL);
	struct sonde_connector_opts co = {.sz = sizeof(co), .socket = d.xsock};
	struct sonde_connector *c = ASSERT_NOT_NULL(sonde_connector__new(&co));
	for (int which = 0; which < 2; which++) {
		struct sonde_connect_opts o = {.sz = sizeof(o)};
		if (which == 0) {
			o.set_uid = true;
			o.uid = 0xFFFFFFFFu;
		} else {
			o.set_gid = true;
			o.gid = 0xFFFFFFFFu;
		}
		ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
		int rc = sonde_connector__connect_consumer(c, sv[0], &o);
		ASSERT_INT(rc, ==, -EINVAL);
		ASSERT_CONTAINS(sonde_connector__last_error(c),
				which ? "gid 4294967295 is not a valid gid"
				      : "uid 4294967295 is not a valid uid");
		close(sv[0]);
		close(sv[1]);
	}
	sonde_connector__free(c);
	sonded_stop(&d);
}

/* A target chosen by cmdline that starts after the session began is normal: no error,
 * and its samples are there (issue: "no process to profile" contradicted the trace). */
TEST_EXCLUSIVE(perfauth_cmdline_target_starting_late_is_no_error, 120)
{
	struct sonded d;
	struct run r;
	char path[512], scope[128];

	rig_start(&d);
	snprintf(path, sizeof(path), "%s", test_copy_for_anyone(test_prog("auth_target")));
	char name[64];
	snprintf(name, sizeof(name), "auth_late%d", (int)getpid());
	char late[600];
	snprintf(late, sizeof(late), "%s/%s", test_tmpdir(), name);
	ASSERT_OK(link(path, late));
	/* it execs 1 s after the session starts, as nobody */
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		usleep(1000000);
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(SEC_NOBODY) < 0)
			_exit(99);
		execl(late, late, "spin", "30", (char *)NULL);
		_exit(98);
	}
	snprintf(scope, sizeof(scope), "target_cmdline: \"%s\"", name);
	trace_as(SEC_NOBODY, &d, scope, NULL, 3500, &r);
	printf("%zu samples; stderr: %s\n", r.t.n_samples, r.err);
	ASSERT_NOT_CONTAINS(r.err, "no process");
	ASSERT_NOT_CONTAINS(r.err, "error");
	ASSERT_INT(r.status, ==, 0);
	ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)pid), >=, 20);
	run_free(&r);
	stop_target(pid);
	/* and one that never starts: an error, at the end */
	snprintf(scope, sizeof(scope), "target_cmdline: \"never%d\"", (int)getpid());
	trace_as(SEC_NOBODY, &d, scope, NULL, 1500, &r);
	ASSERT_INT(r.status, ==, 1);
	ASSERT_CONTAINS(r.err, "no process matching target_cmdline ran during the session");
	ASSERT_CONTAINS(r.t.errors, "no process matching target_cmdline ran during the session");
	run_free(&r);
	sonded_stop(&d);
}

/* The uid of a live process, or -1 once it is gone. */
static long uid_of(uint32_t pid)
{
	char path[64], *st, *u;
	long uid = -1;

	snprintf(path, sizeof(path), "/proc/%u/status", (unsigned)pid);
	if (!(st = test_read_file(path, NULL)))
		return -1;
	if ((u = strstr(st, "\nUid:")))
		uid = strtol(u + 5, NULL, 10);
	free(st);
	return uid;
}

/* A system-wide session (no scope) of nobody's: its own busy process is found, root's
 * busy process is not, nor anything of it (samples, process tree), and every sampled
 * process still alive is nobody's; kernel frames as the rule says. The same session of
 * root's gets both processes. */
TEST_TIMEOUT(perfauth_nobody_system_wide_gets_only_its_own_processes, 300)
{
	struct sonded d;
	struct run r;
	char name[64];
	size_t kf, ka;

	rig_start(&d);
	const char *mine_argv[] = {test_copy_for_anyone(test_prog("auth_target")), "spin", "60",
				   NULL};
	const char *root_argv[] = {test_prog("split"), "60", NULL};
	pid_t mine = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, mine_argv);
	pid_t root = test_spawn_as(0, 0, NULL, root_argv);
	long paranoid = rig_paranoid;

	/* A system-wide session starts with reading every process it may record, which a
	 * loaded machine (or a sanitized build) can stretch over most of a short session (a
	 * SAN run at load 20 had root's 8 sessions of 3 s sample its spinner 7 times in all):
	 * sessions until enough samples accumulated, each judged whole, up to a deadline
	 * rather than a count of sessions. */
	size_t got = 0, got_mine = 0, got_root = 0;
	for (double end = test_now() + 100; got < 10 && test_now() < end;) {
		trace_as(SEC_NOBODY, &d, "", "kernel_frames: true", 3000, &r);
		if (r.status != 0)
			FAIL("sonde trace exited %d:\n%s", r.status, r.err);
		ASSERT_CONTAINS(r.err, "linux.perf: warning: system-wide for consumer uid 65534: "
				       "only the processes it may profile");
		printf("nobody: %zu samples, %zu of its own process\n", r.t.n_samples,
		       pft_samples_of(&r.t, (uint32_t)mine));
		got += pft_samples_of(&r.t, (uint32_t)mine);
		ASSERT_UINT(pft_samples_of(&r.t, (uint32_t)root), ==, 0);
		/* nor in the process tree ("pid=cmdline" lines) */
		snprintf(name, sizeof(name), "%d=", (int)root);
		for (const char *l = r.t.process_names; l && *l;
		     l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "")
			ASSERT(strncmp(l, name, strlen(name)) != 0);
		for (size_t i = 0; i < r.t.n_samples; i++) {
			long uid = uid_of(r.t.samples[i].pid);
			if (uid >= 0 && uid != SEC_NOBODY)
				FAIL("nobody got a sample of pid %u, of uid %ld",
				     r.t.samples[i].pid, uid);
			ASSERT_UINT(r.t.samples[i].pid, !=, 1);
			ASSERT_UINT(r.t.samples[i].pid, !=, (uint32_t)d.pid);
		}
		kernel_frames_of(&r.t, &kf, &ka);
		if (paranoid >= 2) {
			ASSERT_CONTAINS(r.err,
					"kernel frames are not permitted for consumer uid 65534");
			ASSERT_UINT(kf, ==, 0);
		}
		run_free(&r);
	}
	ASSERT_UINT(got, >=, 10);

	for (double end = test_now() + 100; (got_mine < 10 || got_root < 10) && test_now() < end;) {
		trace_as(0, &d, "", NULL, 3000, &r);
		if (r.status != 0)
			FAIL("sonde trace exited %d:\n%s", r.status, r.err);
		ASSERT_NOT_CONTAINS(r.err, "system-wide for consumer");
		printf("root: %zu samples, %zu of nobody's process, %zu of root's\n", r.t.n_samples,
		       pft_samples_of(&r.t, (uint32_t)mine), pft_samples_of(&r.t, (uint32_t)root));
		got_mine += pft_samples_of(&r.t, (uint32_t)mine);
		got_root += pft_samples_of(&r.t, (uint32_t)root);
		run_free(&r);
	}
	ASSERT_UINT(got_mine, >=, 10);
	ASSERT_UINT(got_root, >=, 10);
	stop_target(mine);
	stop_target(root);
	sonded_stop(&d);
}

/* A tracepoint samples in the kernel: perf_event_open asks perf_allow_kernel of it, so
 * at perf_event_paranoid 2 nobody could not open one, and linux.perf refuses it to nobody
 * even for nobody's own process. */
TEST_TIMEOUT(perfauth_tracepoint_timebase_refused_to_unprivileged_consumer, 120)
{
	struct sonded d;
	struct run r;
	char cfg[1024];

	rig_start(&d);
	long paranoid = rig_paranoid;

	if (paranoid < 2)
		SKIP("kernel.perf_event_paranoid is %ld: the kernel gives nobody tracepoints",
		     paranoid);
	const char *argv[] = {test_copy_for_anyone(test_prog("auth_target")), "spin", "30", NULL};
	pid_t pid = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, argv);
	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 4096 }\nduration_ms: 500\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { tracepoint { name: \"sched/sched_switch\" } }\n"
		 "  callstack_sampling { scope { target_pid: %d } } } } }\n",
		 (int)pid);
	trace_as_cfg(SEC_NOBODY, &d, cfg, &r);
	ASSERT_INT(r.status, ==, 1);
	ASSERT_CONTAINS(r.err, "linux.perf: config refused: a tracepoint timebase is not "
			       "permitted for consumer uid 65534");
	ASSERT_UINT(r.t.n_samples, ==, 0);
	run_free(&r);
	/* root's own session of the same config is served */
	trace_as_cfg(0, &d, cfg, &r);
	if (r.status != 0)
		FAIL("sonde trace exited %d:\n%s", r.status, r.err);
	run_free(&r);
	stop_target(pid);
	sonded_stop(&d);
}

/* The threads of process pid (its /proc/PID/task), at most cap; their count. */
static size_t tids_of(pid_t pid, uint32_t *out, size_t cap)
{
	char path[64];
	size_t n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d)) && n < cap)
		if (de->d_name[0] != '.')
			out[n++] = (uint32_t)strtoul(de->d_name, NULL, 10);
	if (d)
		closedir(d);
	return n;
}

/* Whether a sched event names task tid, in any of its pid fields. */
static bool sched_names(const struct pft_sched *e, uint32_t tid)
{
	return e->pid == tid ||
	       (e->waking ? e->woken_pid == tid : e->prev_pid == tid || e->next_pid == tid);
}

/* An off-CPU profile (sched/sched_switch timebase with callstack_sampling) is raw
 * tracepoint data: refused to nobody at kernel.perf_event_paranoid 1 (the kernel gives
 * it raw tracepoints at -1 only); at -1 its system-wide session has its own
 * offcpu_split's switch-outs and none of root's offcpu_split, neither as samples nor in
 * any sched event, and every task a sched event names is nobody's or the idle task. */
TEST_EXCLUSIVE(perfauth_nobody_offcpu_profile_sees_only_its_own_tasks, 300)
{
	struct sonded d;
	struct run r;
	uint32_t root_tids[8];
	const char *cfg = "buffers { size_kb: 65536 fill_policy: DISCARD }\nduration_ms: 3000\n"
			  "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
			  "  timebase { tracepoint { name: \"sched/sched_switch\" } }\n"
			  "  callstack_sampling { }\n"
			  "  ring_buffer_read_period_ms: 50 } } }\n";

	test_require_perf();
	if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) != 0)
		SKIP("no readable tracefs with sched:sched_switch");
	rig_start(&d);
	const char *mine_argv[] = {test_copy_for_anyone(test_prog("offcpu_split")), "120",
				   "/dev/null", NULL};
	const char *root_argv[] = {test_prog("offcpu_split"), "120", "/dev/null", NULL};
	pid_t mine = test_spawn_as(SEC_NOBODY, SEC_NOBODY, NULL, mine_argv);
	pid_t root = test_spawn_as(0, 0, NULL, root_argv);
	usleep(200000);
	size_t n_root = tids_of(root, root_tids, 8);

	test_sysctl_set("kernel/perf_event_paranoid", 1);
	trace_as_cfg(SEC_NOBODY, &d, cfg, &r);
	int refused_status = r.status;
	bool refused = strstr(r.err, "linux.perf: config refused: an off-CPU profile "
				     "(sched_switch with callstacks) is not permitted for "
				     "consumer uid 65534") != NULL;
	size_t refused_samples = r.t.n_samples + r.t.n_sched;
	run_free(&r);

	/* sessions until nobody's main thread accumulated 20 switch-outs, each judged whole */
	test_sysctl_set("kernel/perf_event_paranoid", -1);
	size_t outs = 0, root_seen = 0, foreign = 0;
	for (int round = 0; round < 8 && outs < 20; round++) {
		trace_as_cfg(SEC_NOBODY, &d, cfg, &r);
		if (r.status != 0)
			FAIL("sonde trace exited %d:\n%s", r.status, r.err);
		root_seen += pft_samples_of(&r.t, (uint32_t)root);
		for (size_t i = 0; i < r.t.n_sched; i++) {
			const struct pft_sched *e = &r.t.sched[i];
			outs += !e->waking && e->prev_pid == (uint32_t)mine;
			for (size_t k = 0; k < n_root; k++)
				root_seen += sched_names(e, root_tids[k]);
			uint32_t ids[] = {e->pid, e->waking ? e->woken_pid : e->prev_pid,
					  e->waking ? 0 : e->next_pid};
			for (size_t k = 0; k < 3; k++) {
				long uid = ids[k] ? uid_of(ids[k]) : SEC_NOBODY;
				foreign += uid >= 0 && uid != SEC_NOBODY;
			}
		}
		printf("nobody: %zu samples, %zu sched events, %zu switch-outs of its own "
		       "offcpu_split so far\n",
		       r.t.n_samples, r.t.n_sched, outs);
		run_free(&r);
	}
	stop_target(mine);
	stop_target(root);
	sonded_stop(&d);
	ASSERT_INT(refused_status, ==, 1);
	ASSERT(refused);
	ASSERT_UINT(refused_samples, ==, 0);
	ASSERT_UINT(n_root, ==, 2); /* main and its writer thread */
	ASSERT_UINT(outs, >=, 20);
	ASSERT_UINT(root_seen, ==, 0);
	ASSERT_UINT(foreign, ==, 0);
}
