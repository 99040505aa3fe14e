/* A thread other than the main one execs (as Go's syscall.Exec may, from whatever thread
 * its goroutine runs on): the kernel ends the other threads, and the exec'ing thread takes
 * the process's id. The new program names itself and burns CPU time, so that a recording
 * samples it under its new name.
 *
 * usage: exec_thread              (the threads; one execs this program with "after")
 *        exec_thread after        (the new program: named "after-exec", 100 ms of CPU)
 * Prints the exec'ing thread's id on stdout before the exec.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *self;

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void burn(double seconds)
{
	volatile unsigned long x = 0;

	for (double end = cpu_s() + seconds; cpu_s() < end;)
		for (int i = 0; i < 10000; i++)
			x += (unsigned long)i;
}

static void *execer(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "execer");
	burn(0.05);
	printf("%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	execl(self, self, "after", (char *)NULL);
	perror("exec");
	_exit(1);
}

int main(int argc, char **argv)
{
	pthread_t t;

	self = argv[0];
	if (argc > 1 && strcmp(argv[1], "after") == 0) {
		prctl(PR_SET_NAME, "after-exec");
		burn(0.1);
		return 0;
	}
	if (pthread_create(&t, NULL, execer, NULL) != 0)
		return 1;
	for (;;)
		burn(0.01); /* until the exec ends this thread */
}
