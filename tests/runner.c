/* The test runner: forks each registered test into its own process group, enforces its
 * timeout, runs up to N tests at once, shows the captured output of failures whole, and
 * ends with the failed tests' names, the ten slowest tests, each phase's wall and CPU time
 * and, last, the summary line "N passed, N failed, N skipped".
 *
 * A test's CPU time is its process's and every descendant's it waited for (wait4): the
 * programs it ran and the sonde it recorded them with. Against the wall time it says
 * whether a phase was bound by the CPUs (CPU time near wall time times the tests at once)
 * or by waiting, where more tests at once would finish sooner.
 *
 * usage: sonde-test [-l] [-j N] [PATTERN...]   (a test runs when its name contains any
 * PATTERN; -j: tests at once, default the CPUs this process may use, -j1 one after another)
 *
 * Tests declared TEST_EXCLUSIVE run after the others, one at a time, with nothing else of
 * the suite running, nor of another copy of the suite on the machine (MACHINE_LOCK): they
 * need the machine to themselves.
 */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "util.h"

enum { EXIT_SKIP = 77, MAX_TESTS = 4096, MAX_CAPTURE = 1 << 20, MAX_JOBS = 64, SLOWEST = 10 };

struct test_case {
	const char *name;
	const char *file;
	test_fn fn;
	int timeout_s;
	bool exclusive;
	double took; /* seconds, once it ran */
	double cpu;  /* user + system seconds of it and the descendants it waited for */
};

static struct test_case tests[MAX_TESTS];
static size_t n_tests;

static void add_test(const char *name, const char *file, test_fn fn, int timeout_s,
		     bool exclusive)
{
	if (n_tests == MAX_TESTS) {
		fprintf(stderr, "too many tests (raise MAX_TESTS)\n");
		exit(2);
	}
	tests[n_tests++] = (struct test_case){name, file, fn, timeout_s, exclusive, 0, 0};
}

void test_register(const char *name, const char *file, test_fn fn, int timeout_s)
{
	add_test(name, file, fn, timeout_s, false);
}

void test_register_exclusive(const char *name, const char *file, test_fn fn, int timeout_s)
{
	add_test(name, file, fn, timeout_s, true);
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "FAILED at %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	test_keep_tmpdir();
	exit(1);
}

void test_skip(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "SKIP: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_SKIP);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int by_file_then_name(const void *a, const void *b)
{
	const struct test_case *x = a, *y = b;
	int c = strcmp(x->file, y->file);

	return c ? c : strcmp(x->name, y->name);
}

enum result { PASS, FAIL_, SKIPPED };

/* Copies of the suite on one machine (other checkouts, CI beside a developer) share it
 * through an flock on this file: a runner holds it shared while it runs tests in parallel
 * and exclusive while it runs the tests that need the machine alone, so those run beside
 * no other copy's tests either. scripts/run holds it shared while it builds the SAN
 * variant beside the release tests. Not inherited by tests (closed in each one). */
#define MACHINE_LOCK "/run/sonde-test/machine.lock"
/* flock queues nobody: a runner waiting to take the lock exclusive waited as long as other
 * copies kept taking it shared one after another (two other suites' parallel phases kept
 * one from its exclusive tests for over ten minutes). So a runner passes this gate to take
 * the lock, and one that waits for it exclusive waits holding the gate: sharers coming
 * later queue behind it, the sharers in place finish, and it runs. */
#define MACHINE_GATE "/run/sonde-test/machine.gate"

static int machine_lock_fd = -1, machine_gate_fd = -1;

static void lock_wait(int fd, int how)
{
	while (flock(fd, how) < 0 && errno == EINTR)
		;
}

static void machine_lock(int how)
{
	if (machine_lock_fd < 0) {
		mkdir("/run/sonde-test", 0755);
		machine_lock_fd = open(MACHINE_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (machine_lock_fd < 0)
			return; /* not root: other copies are not kept apart */
		machine_gate_fd = open(MACHINE_GATE, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	}
	/* nothing held while at the gate, or a sharer queued behind this runner would wait
	 * for a lock this runner holds */
	flock(machine_lock_fd, LOCK_UN);
	bool free_now = (machine_gate_fd < 0 || flock(machine_gate_fd, LOCK_EX | LOCK_NB) == 0) &&
			flock(machine_lock_fd, how | LOCK_NB) == 0;
	if (!free_now) {
		printf("waiting for another run of the suite to %s (" MACHINE_LOCK ")\n",
		       how == LOCK_EX ? "finish its parallel tests (or scripts/run's SAN build)"
				      : "finish its exclusive tests");
		double t0 = now_s();
		if (machine_gate_fd >= 0)
			lock_wait(machine_gate_fd, LOCK_EX);
		lock_wait(machine_lock_fd, how);
		printf("waited %.0f s for " MACHINE_LOCK "\n", now_s() - t0);
	}
	if (machine_gate_fd >= 0)
		flock(machine_gate_fd, LOCK_UN);
}

/* A test running: its process (group), the read end of its combined output, and what
 * it wrote so far. */
struct job {
	struct test_case *t;
	pid_t pid;
	int fd;	       /* -1 once at EOF */
	char *buf;
	size_t len;
	double start;
	bool timed_out;
};

static pid_t start_test(struct test_case *t, int *out_fd)
{
	int pipefd[2];

	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		perror("pipe");
		exit(2);
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		setpgid(0, 0);
		if (machine_lock_fd >= 0)
			close(machine_lock_fd);
		if (machine_gate_fd >= 0)
			close(machine_gate_fd);
		dup2(pipefd[1], STDOUT_FILENO);
		dup2(pipefd[1], STDERR_FILENO);
		setvbuf(stdout, NULL, _IONBF, 0);
		t->fn();
		exit(0); /* not _exit: atexit handlers remove the test's files */
	}
	setpgid(pid, pid);
	close(pipefd[1]);
	*out_fd = pipefd[0];
	return pid;
}

/* Appends what the test wrote; at EOF (every process holding its output gone) closes fd. */
static void drain(struct job *j)
{
	char tmp[4096];
	ssize_t n = read(j->fd, tmp, sizeof(tmp));

	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		close(j->fd);
		j->fd = -1;
		return;
	}
	size_t room = MAX_CAPTURE - 1 - j->len;
	size_t take = (size_t)n < room ? (size_t)n : room;
	memcpy(j->buf + j->len, tmp, take);
	j->len += take;
}

/* The one line of a finished test, and its whole output when it failed: printed at once,
 * so parallel tests never interleave. */
static enum result report(struct job *j, int status)
{
	const struct test_case *t = j->t;
	char *buf = j->buf;
	size_t len = j->len;

	buf[len] = 0;
	if (j->timed_out) {
		printf("FAIL %s (timed out after %d s)\n%s%s", t->name, t->timeout_s, buf,
		       len && buf[len - 1] != '\n' ? "\n" : "");
		return FAIL_;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ok   %s (%.2f s, CPU %.2f s)\n", t->name, t->took, t->cpu);
		if (getenv("SONDE_TEST_SHOW")) /* the figures a passing test printed */
			printf("%s%s", buf, len && buf[len - 1] != '\n' ? "\n" : "");
		return PASS;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SKIP) {
		char *reason = strstr(buf, "SKIP: ");
		printf("skip %s: %s", t->name, reason ? reason + 6 : "(no reason)\n");
		return SKIPPED;
	}
	if (WIFSIGNALED(status))
		printf("FAIL %s (killed by signal %d: %s)\n%s%s", t->name, WTERMSIG(status),
		       strsignal(WTERMSIG(status)), buf, len && buf[len - 1] != '\n' ? "\n" : "");
	else
		printf("FAIL %s (exit %d)\n%s%s", t->name, WEXITSTATUS(status), buf,
		       len && buf[len - 1] != '\n' ? "\n" : "");
	return FAIL_;
}

struct tally {
	int counts[3];
	const char *failed[MAX_TESTS];
};

/* A job is done when its process was reaped and its output reached EOF, or when its
 * deadline passed (then its group is killed). Anything left in its group goes with it. */
static bool finish_if_done(struct job *j, struct tally *tl)
{
	int status = 0;
	double now = now_s();
	struct rusage ru = {0};
	bool reaped = false;

	if (!j->timed_out && now > j->start + j->t->timeout_s) {
		j->timed_out = true;
		kill(-j->pid, SIGKILL);
	}
	if (j->fd >= 0 && !j->timed_out) {
		if (wait4(j->pid, &status, WNOHANG, &ru) != j->pid)
			return false;
		/* The test is gone but its output is still open: something it started (a
		 * service that a FAIL left behind) holds it. That ends with the test, whose
		 * status stands; it used to be waited for to the deadline and the failure
		 * reported as a timeout. */
		reaped = true;
		kill(-j->pid, SIGKILL);
		struct pollfd pf = {.fd = j->fd, .events = POLLIN};
		while (j->fd >= 0 && poll(&pf, 1, 0) > 0)
			drain(j);
		if (j->fd >= 0) {
			close(j->fd);
			j->fd = -1;
		}
	}
	/* a test that closed its output early is waited for until its deadline */
	if (!reaped && !j->timed_out && wait4(j->pid, &status, WNOHANG, &ru) == 0)
		return false;
	if (j->timed_out) {
		wait4(j->pid, &status, 0, &ru);
		if (j->fd >= 0) {
			close(j->fd);
			j->fd = -1;
		}
	}
	kill(-j->pid, SIGKILL);
	j->t->took = now - j->start;
	j->t->cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		    ru.ru_stime.tv_usec / 1e6;
	enum result res = report(j, status);
	if (res == FAIL_)
		tl->failed[tl->counts[FAIL_]] = j->t->name;
	tl->counts[res]++;
	j->t = NULL;
	return true;
}

/* The process groups of the tests running, for the signal handler: a test runs in a
 * group of its own, which a Ctrl-C at the terminal does not reach. */
static volatile pid_t running_groups[MAX_JOBS];

static void on_stop_signal(int sig)
{
	for (int k = 0; k < MAX_JOBS; k++)
		if (running_groups[k] > 0)
			kill(-running_groups[k], SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Runs order[0..n) with up to `jobs` at once; returns when all have finished. */
static void run_tests(struct test_case **order, size_t n, int jobs, struct job *slots,
		      struct tally *tl)
{
	size_t next = 0, running = 0;

	while (next < n || running) {
		for (int k = 0; k < jobs && next < n; k++) {
			struct job *j = &slots[k];
			if (j->t)
				continue;
			*j = (struct job){.t = order[next++], .buf = j->buf, .start = now_s()};
			j->pid = start_test(j->t, &j->fd);
			running_groups[k] = j->pid;
			running++;
		}
		struct pollfd p[MAX_JOBS];
		int np = 0, wait_ms = 1000;
		bool reaping = false;
		for (int k = 0; k < jobs; k++) {
			if (!slots[k].t)
				continue;
			if (slots[k].fd >= 0)
				p[np++] = (struct pollfd){.fd = slots[k].fd, .events = POLLIN};
			else
				reaping = true;
			double left = slots[k].start + slots[k].t->timeout_s - now_s();
			if (left * 1000 < wait_ms)
				wait_ms = left > 0 ? (int)(left * 1000) + 1 : 0;
		}
		if (reaping && wait_ms > 20)
			wait_ms = 20;
		poll(p, (nfds_t)np, wait_ms);
		for (int k = 0; k < jobs; k++) {
			struct job *j = &slots[k];
			if (!j->t)
				continue;
			for (int i = 0; i < np; i++)
				if (p[i].fd == j->fd && p[i].revents)
					drain(j);
			if (finish_if_done(j, tl)) {
				running_groups[k] = 0;
				running--;
			}
		}
	}
}

/* A phase of the run (the parallel tests, then the exclusive ones): its wall time, from
 * when it had the machine lock, and its tests' CPU time. */
struct phase {
	double start, wall, cpu;
};

static void phase_end(struct phase *ph, struct test_case **t, size_t n)
{
	ph->wall = now_s() - ph->start;
	for (size_t i = 0; i < n; i++)
		ph->cpu += t[i]->cpu;
}

static bool selected(const struct test_case *t, int argc, char **argv)
{
	if (argc == 0)
		return true;
	for (int i = 0; i < argc; i++)
		if (strstr(t->name, argv[i]))
			return true;
	return false;
}

static int by_time_desc(const void *a, const void *b)
{
	const struct test_case *x = *(struct test_case *const *)a;
	const struct test_case *y = *(struct test_case *const *)b;

	return x->took < y->took ? 1 : x->took > y->took ? -1 : 0;
}

static int default_jobs(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: sonde-test [-l] [-j N] [PATTERN...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	bool list = false;
	int jobs = default_jobs();
	static struct tally tl;
	static struct test_case *shared[MAX_TESTS], *alone[MAX_TESTS], *ran[MAX_TESTS];
	static struct job slots[MAX_JOBS];
	size_t n_shared = 0, n_alone = 0, n_ran = 0;
	int opt;

	while ((opt = getopt(argc, argv, "+lj:")) != -1) {
		if (opt == 'l')
			list = true;
		else if (opt == 'j') {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > MAX_JOBS) {
				fprintf(stderr, "sonde-test: -j takes 1 to %d\n", MAX_JOBS);
				exit(2);
			}
			jobs = (int)v;
		} else
			usage();
	}
	if (jobs > MAX_JOBS)
		jobs = MAX_JOBS;
	argc -= optind - 1, argv += optind - 1;
	qsort(tests, n_tests, sizeof(tests[0]), by_file_then_name);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < n_tests; i++) {
		if (!selected(&tests[i], argc - 1, argv + 1))
			continue;
		if (list)
			printf("%s\t%s%s\n", tests[i].name, tests[i].file,
			       tests[i].exclusive ? "\texclusive" : "");
		else if (tests[i].exclusive)
			alone[n_alone++] = &tests[i];
		else
			shared[n_shared++] = &tests[i];
		ran[n_ran++] = &tests[i];
	}
	if (list)
		return 0;
	for (int k = 0; k < jobs; k++)
		if (!(slots[k].buf = malloc(MAX_CAPTURE)))
			return 2;
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	signal(SIGHUP, on_stop_signal);
	struct phase ph_shared = {0}, ph_alone = {0};
	if (n_shared) {
		machine_lock(LOCK_SH);
		ph_shared.start = now_s();
		run_tests(shared, n_shared, jobs, slots, &tl);
		phase_end(&ph_shared, shared, n_shared);
	}
	if (n_alone) {
		machine_lock(LOCK_EX);
		ph_alone.start = now_s();
		run_tests(alone, n_alone, 1, slots, &tl);
		phase_end(&ph_alone, alone, n_alone);
	}
	if (machine_lock_fd >= 0)
		close(machine_lock_fd);
	for (int k = 0; k < jobs; k++)
		free(slots[k].buf);

	/* The names again at the end, where a log cut in the middle still shows them. */
	if (tl.counts[FAIL_]) {
		printf("failed:");
		for (int i = 0; i < tl.counts[FAIL_]; i++)
			printf(" %s", tl.failed[i]);
		printf("\n");
	}
	qsort(ran, n_ran, sizeof(ran[0]), by_time_desc);
	printf("slowest tests:\n");
	for (size_t i = 0; i < n_ran && i < SLOWEST; i++)
		printf("%8.2f s  %s (CPU %.2f s)\n", ran[i]->took, ran[i]->name, ran[i]->cpu);
	if (n_shared)
		printf("parallel tests: %zu, %.0f s, CPU %.0f s (%.2f CPUs busy of %d tests at "
		       "once)\n",
		       n_shared, ph_shared.wall, ph_shared.cpu,
		       ph_shared.wall > 0 ? ph_shared.cpu / ph_shared.wall : 0, jobs);
	if (n_alone)
		printf("exclusive tests: %zu, %.0f s, CPU %.0f s\n", n_alone, ph_alone.wall,
		       ph_alone.cpu);
	printf("%d passed, %d failed, %d skipped\n", tl.counts[PASS], tl.counts[FAIL_],
	       tl.counts[SKIPPED]);
	return tl.counts[FAIL_] ? 1 : 0;
}
