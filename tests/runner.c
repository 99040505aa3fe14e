/* The test runner: forks each registered test into its own process group, enforces its
 * timeout, shows the captured output of failures, and ends with the summary line
 * "N passed, N failed, N skipped".
 *
 * usage: sonde-test [-l] [PATTERN...]   (a test runs when its name contains any PATTERN)
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

enum { EXIT_SKIP = 77, MAX_TESTS = 4096, MAX_CAPTURE = 1 << 20 };

struct test_case {
	const char *name;
	const char *file;
	test_fn fn;
	int timeout_s;
};

static struct test_case tests[MAX_TESTS];
static size_t n_tests;

void test_register(const char *name, const char *file, test_fn fn, int timeout_s)
{
	if (n_tests == MAX_TESTS) {
		fprintf(stderr, "too many tests (raise MAX_TESTS)\n");
		exit(2);
	}
	tests[n_tests++] = (struct test_case){name, file, fn, timeout_s};
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

/* Reads the child's combined output until EOF or the deadline. Returns false on timeout. */
static bool capture(int fd, char *buf, size_t *len, double deadline)
{
	for (;;) {
		double left = deadline - now_s();
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (left <= 0)
			return false;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		char tmp[4096];
		ssize_t n = read(fd, tmp, sizeof(tmp));
		if (n == 0)
			return true;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return true;
		}
		size_t room = MAX_CAPTURE - 1 - *len;
		memcpy(buf + *len, tmp, (size_t)n < room ? (size_t)n : room);
		*len += (size_t)n < room ? (size_t)n : room;
	}
}

enum result { PASS, FAIL_, SKIPPED };

static enum result run_one(const struct test_case *t, char *buf)
{
	int pipefd[2];
	size_t len = 0;
	int status = 0;
	double start = now_s();

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
		setpgid(0, 0);
		dup2(pipefd[1], STDOUT_FILENO);
		dup2(pipefd[1], STDERR_FILENO);
		setvbuf(stdout, NULL, _IONBF, 0);
		t->fn();
		exit(0); /* not _exit: atexit handlers remove the test's files */
	}
	setpgid(pid, pid);
	close(pipefd[1]);
	bool finished = capture(pipefd[0], buf, &len, start + t->timeout_s);
	close(pipefd[0]);
	if (!finished)
		kill(-pid, SIGKILL);
	waitpid(pid, &status, 0);
	/* Anything the test left running in its group goes with it. */
	kill(-pid, SIGKILL);
	buf[len] = 0;

	double took = now_s() - start;
	if (!finished) {
		printf("FAIL %s (timed out after %d s)\n%s", t->name, t->timeout_s, buf);
		return FAIL_;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ok   %s (%.2f s)\n", t->name, took);
		return PASS;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SKIP) {
		char *reason = strstr(buf, "SKIP: ");
		printf("skip %s: %s", t->name, reason ? reason + 6 : "(no reason)\n");
		return SKIPPED;
	}
	if (WIFSIGNALED(status))
		printf("FAIL %s (killed by signal %d: %s)\n", t->name, WTERMSIG(status),
		       strsignal(WTERMSIG(status)));
	else
		printf("FAIL %s (exit %d)\n", t->name, WEXITSTATUS(status));
	printf("%s%s", buf, len && buf[len - 1] != '\n' ? "\n" : "");
	return FAIL_;
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

int main(int argc, char **argv)
{
	bool list = false;
	int counts[3] = {0, 0, 0};
	const char *failed[MAX_TESTS];

	if (argc > 1 && strcmp(argv[1], "-l") == 0) {
		list = true;
		argc--, argv++;
	}
	qsort(tests, n_tests, sizeof(tests[0]), by_file_then_name);
	setvbuf(stdout, NULL, _IOLBF, 0);
	char *buf = malloc(MAX_CAPTURE);
	if (!buf)
		return 2;
	for (size_t i = 0; i < n_tests; i++) {
		if (!selected(&tests[i], argc - 1, argv + 1))
			continue;
		if (list)
			printf("%s\t%s\n", tests[i].name, tests[i].file);
		else {
			enum result res = run_one(&tests[i], buf);
			if (res == FAIL_)
				failed[counts[FAIL_]] = tests[i].name;
			counts[res]++;
		}
	}
	free(buf);
	if (list)
		return 0;
	/* The names again at the end, where a log cut in the middle still shows them. */
	if (counts[FAIL_]) {
		printf("failed:");
		for (int i = 0; i < counts[FAIL_]; i++)
			printf(" %s", failed[i]);
		printf("\n");
	}
	printf("%d passed, %d failed, %d skipped\n", counts[PASS], counts[FAIL_], counts[SKIPPED]);
	return counts[FAIL_] ? 1 : 0;
}
