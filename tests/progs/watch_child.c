/* A parent that watches its child the way a shell does: it forks a CPU-bound child and
 * waits for it with WUNTRACED | WCONTINUED, so a stop or continue of the child (such as
 * SIGSTOP/SIGCONT sent by a profiler attaching to it) is reported.
 *
 * usage: watch_child PIDFILE REPORT SECONDS|-
 *   writes the child's pid to PIDFILE, lets the child spin for SECONDS (with "-": until
 *   its stdin has something to read, or is closed), then writes
 *   "stopped N continued M exit S" to REPORT (S: the child's exit status).
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Whether stdin has something to read, or is closed: the caller's word to stop. */
static int told(void)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};

	return poll(&p, 1, 0) != 0;
}

/* seconds < 0: until told */
__attribute__((noinline)) static void spin(double seconds)
{
	double end = now_s() + seconds;

	while (seconds < 0 ? !told() : now_s() < end)
		for (int i = 0; i < 100000; i++)
			sink = sink * 6364136223846793005ULL + 1;
}

static int write_text(const char *path, const char *text)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		return -1;
	return rename(tmp, path); /* the reader never sees a partial file */
}

int main(int argc, char **argv)
{
	int stopped = 0, continued = 0, status = 0;
	char text[128];

	if (argc != 4) {
		fprintf(stderr, "usage: watch_child PIDFILE REPORT SECONDS\n");
		return 2;
	}
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		spin(strcmp(argv[3], "-") ? atof(argv[3]) : -1);
		_exit(0);
	}
	snprintf(text, sizeof(text), "%d\n", (int)child);
	if (write_text(argv[1], text) < 0)
		return 1;
	for (;;) {
		pid_t got = waitpid(child, &status, WUNTRACED | WCONTINUED);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return 1;
		if (WIFSTOPPED(status))
			stopped++;
		else if (WIFCONTINUED(status))
			continued++;
		else
			break;
	}
	snprintf(text, sizeof(text), "stopped %d continued %d exit %d\n", stopped, continued,
		 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return write_text(argv[2], text) < 0;
}
