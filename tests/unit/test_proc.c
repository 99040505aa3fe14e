/* The proc layer: maps/stat/status parsing, stopping and resuming, launching suspended. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "proc/launch.h"
#include "proc/maps.h"
#include "proc/proc.h"

struct collected {
	struct proc_map m[8];
	char path[8][128];
	int n;
};

static int collect(void *ctx, const struct proc_map *m)
{
	struct collected *c = ctx;

	if (c->n == 8)
		return 1;
	c->m[c->n] = *m;
	snprintf(c->path[c->n], sizeof(c->path[0]), "%.*s", (int)m->path_len, m->path);
	c->n++;
	return 0;
}

TEST(proc_maps_parse_fields)
{
	static const char text[] =
		"55d0c8a00000-55d0c8a02000 r--p 00000000 fd:01 1312 /usr/bin/cat\n"
		"55d0c8a02000-55d0c8a07000 r-xp 00002000 fd:01 1312 /usr/bin/cat\n"
		"7f0000000000-7f0000001000 rwxs 00000000 00:05 99 /dev/zero (deleted)\n"
		"7f1000000000-7f1000021000 rw-p 00000000 00:00 0 \n"
		"7ffd1e5f0000-7ffd1e5f2000 r-xp 00000000 00:00 0                          [vdso]\n"
		"7f2000000000-7f2000001000 r-xp 00001000 103:0a 4242 /opt/with space/lib.so\n";
	struct collected c = {0};

	ASSERT_OK(sonde__proc_maps_parse(text, sizeof(text) - 1, collect, &c));
	ASSERT_INT(c.n, ==, 6);
	ASSERT_UINT(c.m[1].start, ==, 0x55d0c8a02000);
	ASSERT_UINT(c.m[1].end, ==, 0x55d0c8a07000);
	ASSERT_UINT(c.m[1].pgoff, ==, 0x2000);
	ASSERT_UINT(c.m[1].dev_major, ==, 0xfd);
	ASSERT_UINT(c.m[1].dev_minor, ==, 1);
	ASSERT_UINT(c.m[1].inode, ==, 1312);
	ASSERT(c.m[1].exec && c.m[1].read && !c.m[1].write && !c.m[1].shared);
	ASSERT(!c.m[0].exec);
	ASSERT_STR_EQ(c.path[1], "/usr/bin/cat");
	ASSERT(c.m[2].shared && c.m[2].write);
	ASSERT_STR_EQ(c.path[2], "/dev/zero (deleted)");
	ASSERT_STR_EQ(c.path[3], "");
	ASSERT_STR_EQ(c.path[4], "[vdso]");
	ASSERT_UINT(c.m[5].dev_major, ==, 0x103);
	ASSERT_UINT(c.m[5].dev_minor, ==, 0xa);
	ASSERT_STR_EQ(c.path[5], "/opt/with space/lib.so");
}

TEST(proc_maps_parse_rejects_malformed_lines)
{
	static const char *bad[] = {
		"55d0c8a00000 r--p 00000000 fd:01 1312 /x\n",
		"2000-1000 r--p 00000000 fd:01 1312 /x\n",
		"1000-2000 rq-p 00000000 fd:01 1312 /x\n",
		"1000-2000 r--p 00000000 fd01 1312 /x\n",
		"1000-2000 r--p 00000000 fd:01 x /x\n",
		"11112222333344445-2000 r--p 0 0:0 0\n",
		"1000-2000 r--p",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct collected c = {0};
		ASSERT_ERR(sonde__proc_maps_parse(bad[i], strlen(bad[i]), collect, &c),
			   -SONDE_E_FORMAT);
		ASSERT_INT(c.n, ==, 0);
	}
}

TEST(proc_maps_of_self_cover_this_code)
{
	struct collected c = {0};
	uint64_t here = (uint64_t)(uintptr_t)&sonde__proc_maps_parse;
	int found = 0;
	struct buf b = BUF_INIT;

	ASSERT_OK(sonde__proc_read_file("/proc/self/maps", &b));
	const char *p = (const char *)b.data, *end = p + b.len;
	/* Check every line, eight at a time. */
	while (p < end) {
		const char *q = p;
		int lines = 0;
		while (q < end && lines < 8) {
			const char *nl = memchr(q, '\n', (size_t)(end - q));
			q = nl ? nl + 1 : end;
			lines++;
		}
		c.n = 0;
		ASSERT_OK(sonde__proc_maps_parse(p, (size_t)(q - p), collect, &c));
		for (int i = 0; i < c.n; i++)
			if (here >= c.m[i].start && here < c.m[i].end) {
				ASSERT(c.m[i].exec);
				ASSERT_CONTAINS(c.path[i], "sonde-test");
				found = 1;
			}
		p = q;
	}
	sonde__buf_free(&b);
	ASSERT(found);
}

TEST(proc_stat_parse_handles_odd_comm)
{
	static const char text[] =
		"4242 (a) b (c)) S 17 4242 4242 0 -1 4194304 100 0 0 0 1 2 0 0 20 "
		"0 1 0 987654 1000 100\n";
	struct proc_stat st;

	ASSERT_OK(sonde__proc_stat_parse(text, sizeof(text) - 1, &st));
	ASSERT_STR_EQ(st.comm, "a) b (c)");
	ASSERT_INT(st.state, ==, 'S');
	ASSERT_INT(st.ppid, ==, 17);
	ASSERT_UINT(st.flags, ==, 4194304);
	ASSERT_UINT(st.start_time, ==, 987654);
	ASSERT_UINT(st.threads, ==, 1);
	ASSERT_ERR(sonde__proc_stat_parse("4242 (x) S 1 2", 14, &st), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_stat_parse("4242 x", 6, &st), -SONDE_E_FORMAT);
}

/* A process lives until its last thread ends: its main thread ended first (pthread_exit)
 * stays a zombie, 'Z' in /proc/PID/stat, while its other threads run on. */
TEST(proc_stat_a_zombie_main_thread_with_threads_is_a_live_process)
{
	static const char zombie_main[] =
		"4242 (a) Z 17 4242 4242 0 -1 4194308 100 0 0 0 1 2 0 0 20 0 2 0 987654 0 0\n";
	static const char zombie[] =
		"4242 (a) Z 17 4242 4242 0 -1 4194308 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0\n";
	struct proc_stat st;

	ASSERT_OK(sonde__proc_stat_parse(zombie_main, sizeof(zombie_main) - 1, &st));
	ASSERT_UINT(st.threads, ==, 2);
	ASSERT(!sonde__proc_stat_ended(&st));
	ASSERT_OK(sonde__proc_stat_parse(zombie, sizeof(zombie) - 1, &st));
	ASSERT(sonde__proc_stat_ended(&st));
	st.state = 'X';
	ASSERT(sonde__proc_stat_ended(&st));
	st.state = 'S';
	ASSERT(!sonde__proc_stat_ended(&st));
}

/* The same on a live process: offcpu_leader_exit's main thread ends at once, and the
 * process lives on in its napper until it has napped (sonde__proc_is_alive: 1), then
 * ends (0). The napper's first naps are awaited: pthread_join returns once the kernel
 * has cleared the main thread's tid. */
TEST(proc_process_whose_main_thread_ended_is_alive)
{
	const char *truth = test_path("leader.truth");
	const char *argv[] = {test_prog("offcpu_leader_exit"), "20", "20", truth, NULL};
	pid_t pid = test_spawn(argv);
	struct proc_stat st;

	for (double end = test_now() + 60;; usleep(2000)) {
		ASSERT_OK(sonde__proc_stat_read(pid, 0, &st));
		if (st.state == 'Z')
			break;
		if (test_now() > end)
			FAIL("the main thread of %d did not end in 60 s", (int)pid);
	}
	int alive = sonde__proc_is_alive(pid, st.start_time);
	bool done = access(truth, F_OK) == 0; /* the napper may be done already */
	ASSERT_INT(test_wait(pid, 60), ==, 0);
	if (!done)
		ASSERT_INT(alive, ==, 1);
	ASSERT_INT(sonde__proc_is_alive(pid, st.start_time), ==, 0);
}

TEST(proc_status_parse_uids)
{
	static const char text[] = "Name:\tcat\nState:\tR\nUid:\t1000\t1001\t1001\t1001\nGid:\t0\n";
	uid_t r, e;

	ASSERT_OK(sonde__proc_status_parse_uids(text, sizeof(text) - 1, &r, &e));
	ASSERT_UINT(r, ==, 1000);
	ASSERT_UINT(e, ==, 1001);
	ASSERT_ERR(sonde__proc_status_parse_uids("Name:\tx\n", 8, &r, &e), -SONDE_E_FORMAT);
	ASSERT_OK(sonde__proc_read_uids(getpid(), &r, &e));
	ASSERT_UINT(e, ==, geteuid());
}

static void *tgid_thread(void *arg)
{
	pid_t *out = arg, tgid = 0;

	if (sonde__proc_read_tgid((pid_t)syscall(SYS_gettid), &tgid) == 0)
		*out = tgid;
	return NULL;
}

TEST(proc_status_parse_tgid)
{
	static const char text[] = "Name:\tcat\nUmask:\t0022\nState:\tR\nTgid:\t4242\nPid:\t4250\n";
	pid_t tgid = 0;

	ASSERT_OK(sonde__proc_status_parse_tgid(text, sizeof(text) - 1, &tgid));
	ASSERT_INT(tgid, ==, 4242);
	ASSERT_ERR(sonde__proc_status_parse_tgid("Tgid:\t\n", 7, &tgid), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_status_parse_tgid("Tgid:\t0\n", 8, &tgid), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_status_parse_tgid("Pid:\t1\n", 7, &tgid), -SONDE_E_FORMAT);
	/* another thread of this process names this process */
	pthread_t t;
	pid_t got = 0;
	ASSERT_INT(pthread_create(&t, NULL, tgid_thread, &got), ==, 0);
	pthread_join(t, NULL);
	ASSERT_INT(got, ==, getpid());
}

TEST(proc_tasks_and_comm_of_self)
{
	pid_t *tids;
	size_t n;
	char comm[16];
	struct proc_stat st;

	ASSERT_OK(sonde__proc_list_tasks(getpid(), &tids, &n));
	ASSERT_UINT(n, >=, 1);
	ASSERT_INT(tids[0], >, 0);
	free(tids);
	ASSERT_OK(sonde__proc_read_comm(getpid(), 0, comm, sizeof(comm)));
	ASSERT_STR_EQ(comm, "sonde-test");
	ASSERT_OK(sonde__proc_stat_read(getpid(), 0, &st));
	ASSERT_INT(st.ppid, ==, getppid());
	ASSERT_INT(sonde__proc_is_alive(getpid(), st.start_time), ==, 1);
	ASSERT_INT(sonde__proc_is_alive(getpid(), st.start_time + 1), ==, 0); /* a reused pid */
	ASSERT_ERR(sonde__proc_list_tasks(0x7ffffff0, &tids, &n), -ESRCH);
}

static char state_of(pid_t pid)
{
	struct proc_stat st;

	return sonde__proc_stat_read(pid, 0, &st) ? '?' : st.state;
}

TEST(proc_stop_and_resume_only_what_it_stopped)
{
	pid_t child = fork();
	if (child == 0) {
		for (;;)
			;
	}
	struct proc_stopped s;
	/* Our own child: SIGSTOP (a group-stop), since we are the parent who sees it. */
	ASSERT_OK(sonde__proc_stop(child, 0, 5000, &s));
	ASSERT(s.stopped_by_us);
	ASSERT_INT(state_of(child), ==, 'T');
	ASSERT_OK(sonde__proc_resume(&s));
	for (int i = 0; i < 1000 && state_of(child) == 'T'; i++)
		usleep(1000);
	ASSERT_INT(state_of(child), !=, 'T');

	/* Stopped by someone else: left stopped. */
	kill(child, SIGSTOP);
	for (int i = 0; i < 1000 && state_of(child) != 'T'; i++)
		usleep(1000);
	ASSERT_OK(sonde__proc_stop(child, 0, 5000, &s));
	ASSERT(!s.stopped_by_us);
	ASSERT_OK(sonde__proc_resume(&s));
	usleep(20000);
	ASSERT_INT(state_of(child), ==, 'T');

	/* The wrong start time is another process. */
	ASSERT_ERR(sonde__proc_stop(child, s.start_time + 1, 100, &s), -ESRCH);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	ASSERT_ERR(sonde__proc_stop(child, 0, 100, &s), -ESRCH);
}

/* Another process's child (here our grandchild) is held with ptrace-stops, which its
 * parent does not see, and runs on after sonde__proc_resume. */
TEST(proc_stop_of_another_process_child_is_a_ptrace_stop)
{
	int fds[2];
	pid_t grandchild;

	ASSERT_OK(pipe(fds));
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		int status, events = 0;
		pid_t g = fork();
		if (g == 0) {
			for (;;)
				;
		}
		if (write(fds[1], &g, sizeof(g)) != sizeof(g))
			_exit(100);
		/* Counts what a shell would see, until the grandchild is killed. */
		while (waitpid(g, &status, WUNTRACED | WCONTINUED) == g &&
		       (WIFSTOPPED(status) || WIFCONTINUED(status)))
			events++;
		_exit(events);
	}
	ASSERT_INT(read(fds[0], &grandchild, sizeof(grandchild)), ==, sizeof(grandchild));
	struct proc_stopped s;
	ASSERT_OK(sonde__proc_stop(grandchild, 0, 5000, &s));
	ASSERT(s.stopped_by_us);
	ASSERT_INT(state_of(grandchild), ==, 't'); /* a ptrace-stop */
	ASSERT_OK(sonde__proc_resume(&s));
	ASSERT_OK(sonde__proc_resume(&s)); /* idempotent */
	for (int i = 0; i < 1000 && state_of(grandchild) == 't'; i++)
		usleep(1000);
	ASSERT_INT(state_of(grandchild), ==, 'R');
	kill(grandchild, SIGKILL);
	int status;
	ASSERT_INT(waitpid(child, &status, 0), ==, child);
	ASSERT(WIFEXITED(status));
	ASSERT_INT(WEXITSTATUS(status), ==, 0); /* no stop, no continue */
	close(fds[0]);
	close(fds[1]);
}

TEST(proc_launch_runs_only_after_resume)
{
	struct proc_launch l;
	char *argv[] = {"sh", "-c", "exit 7", NULL};
	char comm[16];
	int status;

	ASSERT_OK(sonde__proc_launch_start(&l, argv, NULL));
	ASSERT_INT(l.pid, >, 0);
	/* Suspended before execve: still a copy of this program. */
	ASSERT_OK(sonde__proc_read_comm(l.pid, 0, comm, sizeof(comm)));
	ASSERT_STR_EQ(comm, "sonde-test");
	ASSERT_INT(sonde__proc_launch_wait(&l, WNOHANG, &status), ==, 0);
	ASSERT_OK(sonde__proc_launch_resume(&l));
	ASSERT_INT(sonde__proc_launch_wait(&l, 0, &status), ==, 1);
	ASSERT_INT(sonde__proc_exit_code(status), ==, 7);
	ASSERT_INT(sonde__proc_launch_wait(&l, 0, &status), ==, 1); /* repeatable */
	sonde__proc_launch_free(&l);
}

TEST(proc_launch_reports_exec_errors)
{
	struct proc_launch l;
	char *missing[] = {"sonde-no-such-command", NULL};
	int status;

	ASSERT_ERR(sonde__proc_launch_start(&l, missing, NULL), -ENOENT);

	/* Not executable: found, but refused. */
	const char *plain = test_path("plain");
	test_write_file(plain, "x", 1);
	char *noexec[] = {(char *)plain, NULL};
	ASSERT_OK(sonde__proc_launch_start(&l, noexec, NULL));
	ASSERT_ERR(sonde__proc_launch_resume(&l), -EACCES);
	ASSERT_INT(sonde__proc_launch_wait(&l, 0, &status), ==, 1);
	ASSERT_INT(sonde__proc_exit_code(status), ==, 127);
	sonde__proc_launch_free(&l);

	/* Executable but not a program: execve's own error comes back through the pipe. */
	const char *junk = test_path("junk");
	test_write_file(junk, "\x7f\x45\x4c\x46garbage", 11);
	chmod(junk, 0755);
	char *bad[] = {(char *)junk, NULL};
	ASSERT_OK(sonde__proc_launch_start(&l, bad, NULL));
	ASSERT_ERR(sonde__proc_launch_resume(&l), -ENOEXEC);
	sonde__proc_launch_free(&l);
}

TEST(proc_launch_abort_kills_the_suspended_child)
{
	struct proc_launch l;
	char *argv[] = {"true", NULL};
	int status;

	ASSERT_OK(sonde__proc_launch_start(&l, argv, NULL));
	sonde__proc_launch_abort(&l);
	ASSERT_INT(sonde__proc_launch_wait(&l, 0, &status), ==, 1);
	ASSERT_INT(sonde__proc_exit_code(status), ==, 127);
	sonde__proc_launch_free(&l);
}

TEST(proc_find_in_path_searches_like_execvp)
{
	char out[4096];

	ASSERT_OK(sonde__proc_find_in_path("sh", out, sizeof(out)));
	ASSERT(out[0] == '/');
	ASSERT_OK(sonde__proc_find_in_path("./relative", out, sizeof(out)));
	ASSERT_STR_EQ(out, "./relative");
	ASSERT_ERR(sonde__proc_find_in_path("sonde-no-such-command", out, sizeof(out)), -ENOENT);
	ASSERT_ERR(sonde__proc_find_in_path("", out, sizeof(out)), -ENOENT);
}

/* A thread name may end with a newline of its own: only the kernel's is taken off (every
 * trailing one was, and the name no longer matched the COMM record of the same thread). */
TEST(proc_comm_keeps_a_newline_of_the_name)
{
	char before[16], comm[16];
	pid_t tid = (pid_t)syscall(SYS_gettid);

	ASSERT_OK(prctl(PR_GET_NAME, before));
	ASSERT_OK(prctl(PR_SET_NAME, "ends-with\n"));
	int rc = sonde__proc_read_comm(getpid(), tid, comm, sizeof(comm));
	prctl(PR_SET_NAME, before);
	ASSERT_OK(rc);
	ASSERT_STR_EQ(comm, "ends-with\n");
}
