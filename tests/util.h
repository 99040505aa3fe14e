/* Helpers for integration tests: run sonde's programs and the target programs under
 * tests/progs, capture their output, make temporary files. */
#ifndef SONDE_TEST_UTIL_H
#define SONDE_TEST_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

struct test_output {
	char *out;   /* captured stdout, NUL-terminated */
	size_t out_len;
	char *err;   /* captured stderr, NUL-terminated */
	size_t err_len;
	int status;  /* exit code, or 128+signal; -1 when it timed out and was killed */
};

/* Path of a program built by this build variant: "sonde", "sonded", "sonde-test". */
const char *test_bin(const char *name);
/* Path of a target program from tests/progs/NAME.c. */
const char *test_prog(const char *name);
/* Path of an example from examples/NAME.c. */
const char *test_example(const char *name);
/* Path of a file in the source tree, e.g. "fuzz/corpus". */
const char *test_src_path(const char *rel);
/* A fresh directory for this test, removed when the test process ends but for a failure. */
const char *test_tmpdir(void);
/* Keeps test_tmpdir() when the test ends and prints where it is: a failed test's spools and
 * logs, for what its message does not say (test_fail calls it). */
void test_keep_tmpdir(void);
/* test_tmpdir()/name, in a static rotating buffer (valid for the next 8 calls). */
const char *test_path(const char *name);

/* A copy of the program at path in test_tmpdir(), executable by every user: for tests that
 * run a program as an unprivileged user, who may not be able to reach the build tree (a
 * checkout under a 0700 directory). Returned as test_path() returns. */
const char *test_copy_for_anyone(const char *path);

/* Run argv (NULL-terminated; argv[0] a path) with stdin from /dev/null, capturing both
 * streams; kill it after timeout_s. Fails the test if it cannot be started. */
void test_run(struct test_output *o, int timeout_s, const char *const argv[]);
/* Same, but the command line is split on spaces (no quoting). */
void test_runf(struct test_output *o, int timeout_s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void test_output_free(struct test_output *o);

/* Whole file into a NUL-terminated malloc'd buffer; NULL and errno on failure. */
char *test_read_file(const char *path, size_t *len);
void test_write_file(const char *path, const void *data, size_t len);

/* Start a program in the background; returns its pid once it has exec'd (stdout/stderr to
 * /dev/null). A program that cannot be run fails the test. */
pid_t test_spawn(const char *const argv[]);
/* The same with its stdin a pipe whose write end (close-on-exec) goes into *in: what the
 * caller writes there, or its close, tells the program when to go on. */
pid_t test_spawn_fed(int *in, const char *const argv[]);
/* The same as uid:gid (no supplementary groups), stderr in errfile (NULL: /dev/null). */
pid_t test_spawn_as(uid_t uid, gid_t gid, const char *errfile, const char *const argv[]);
/* Wait for a background program, killing it after timeout_s; returns as test_output.status. */
int test_wait(pid_t pid, int timeout_s);

/* A gate a program started by a test waits at until the test lets it through: what holds a
 * program's end (or start) until the test has seen what it awaits, however slowly a loaded
 * machine runs either of them. The program waits with `read go <PATH` in sh (TEST_HELD);
 * test_gate_open() makes the fifo test_path(name) and keeps it open read-write, so that the
 * program's open returns at once and only its read waits, for the line test_gate_pass()
 * writes (one per read). A test that fails lets it go too: its end closes the fifo's last
 * writer, and the read ends. */
struct test_gate {
	char path[PATH_MAX];
	int fd;
};
void test_gate_open(struct test_gate *g, const char *name);
void test_gate_pass(struct test_gate *g);
void test_gate_close(struct test_gate *g);
/* sh -c TEST_HELD PROG ARG GATE: runs PROG ARG, then waits at the gate before it ends. */
#define TEST_HELD "\"$0\" \"$1\"; read go <\"$2\""

/* Machine-wide settings under /proc/sys, NAME written as there: "kernel/perf_event_paranoid".
 * They are shared by every test of this suite and of any other suite on the machine, so
 * they are taken explicitly, with an flock on /run/sonde-test/NAME.lock held until the
 * test process ends. Test sources name /proc/sys nowhere else (test_sysctl_confined checks
 * it).
 *
 * test_sysctl_get() takes the lock shared and returns the value: while the test runs,
 * nobody changes it (a test that changes it is waited for). Fails the test when the setting
 * cannot be read.
 *
 * test_sysctl_set() takes the lock exclusive and writes VALUE. The first call for a NAME
 * starts a restoring process, outside the runner's process group, that writes back the
 * value found before and then lets the lock go, once the test process has ended however
 * it ended (returned, failed, crashed or killed at its timeout). Skips the test when the
 * setting cannot be written (not root). A test that sets one must be TEST_EXCLUSIVE: it
 * changes what every other test running beside it sees. */
long test_sysctl_get(const char *name);
void test_sysctl_set(const char *name, long value);
/* For a knob the kernel consumes rather than keeps (kernel/ns_last_pid, which only picks
 * the next pid): written without lock or restore. Returns 0 or -errno. */
int test_sysctl_poke(const char *name, long value);

/* Skips the test, naming kernel.perf_event_paranoid, unless this process may profile
 * other processes with perf_event (root, or paranoid <= 2 for its own children). */
void test_require_perf(void);

/* A loopback TCP port nothing listens on at the moment (the kernel's pick; another
 * process may take it before the caller binds it, which on a test machine it does not). */
unsigned test_free_tcp_port(void);
/* Waits until process pid has at least n threads (its /proc/PID/task): a program that starts
 * threads is ready for what a test does with them only once they exist, which on a loaded
 * machine may be long after its exec. Fails the test if pid ends or 60 s pass first. */
void test_await_threads(pid_t pid, int n);
/* CPU time process pid has run for (user and system, all its threads), in seconds; -1 once
 * it has ended (a zombie included). */
double test_cpu_s(pid_t pid);
/* Waits until process pid has run for seconds of CPU time (user and system, all its threads)
 * more than when called: what a test leaves a target to do (overflow a ring, be sampled) is
 * an amount of its CPU time, which a loaded machine gives it in more wall time. Fails the
 * test if pid ends or 120 s pass first. */
void test_await_cpu(pid_t pid, double seconds);
/* Number of open file descriptors of this process. */
int test_count_fds(void);
/* Monotonic time in seconds. */
double test_now(void);
/* Samples a spool being written holds so far (0 while it cannot be read yet): what a test
 * that interrupts a recording awaits first, since a loaded or sanitized recorder takes a
 * while to start sampling. */
unsigned long long test_spool_samples(const char *path);

#endif
