/* Runs a command and writes what the kernel charged it: its user and system CPU time, in
 * nanoseconds, from wait4's rusage, as "utime_ns N" and "stime_ns N" lines in FILE. A test
 * compares a recording's totals with them. Exits with the command's status (127 when it
 * could not be run).
 *
 * usage: rusage_run FILE CMD [ARGS...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long long tv_ns(struct timeval tv)
{
	return (unsigned long long)tv.tv_sec * 1000000000ull +
	       (unsigned long long)tv.tv_usec * 1000ull;
}

int main(int argc, char **argv)
{
	struct rusage ru;
	int status;

	if (argc < 3) {
		fprintf(stderr, "usage: rusage_run FILE CMD [ARGS...]\n");
		return 2;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) != pid) {
		perror("wait4");
		return 1;
	}
	FILE *f = fopen(argv[1], "w");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	fprintf(f, "pid %d\nutime_ns %llu\nstime_ns %llu\n", (int)pid, tv_ns(ru.ru_utime),
		tv_ns(ru.ru_stime));
	if (fclose(f) != 0)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
