/* A known workload for linux.ftrace's tests: a thread named NAME blocks COUNT times
 * (nanosleep of 1 ms each), so it is switched out at least COUNT times; then the program
 * exits.
 *
 * usage: ftrace_sleeper [COUNT [NAME [DONE]]]   (default 200, "sonde-sleeper"; NAME is cut
 *                                               to 15 bytes, the kernel's comm)
 *
 * With DONE, the thread creates the file DONE after its sleeps and lives on until its
 * standard input ends: a reader that names threads from /proc when it meets them (a
 * process tree made on demand) finds it however late it gets to its events.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static const char *name = "sonde-sleeper";
static const char *done;

static void *sleeper(void *arg)
{
	long n = *(long *)arg;
	struct timespec ts = {0, 1000000};

	prctl(PR_SET_NAME, name);
	for (long i = 0; i < n; i++)
		nanosleep(&ts, NULL);
	if (done) {
		char c;
		int fd = open(done, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			exit(1);
		close(fd);
		while (read(0, &c, 1) > 0)
			;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200;
	pthread_t t;

	if (argc > 2)
		name = argv[2];
	if (argc > 3)
		done = argv[3];
	if (pthread_create(&t, NULL, sleeper, &n) != 0)
		return 1;
	pthread_join(t, NULL);
	printf("done %ld\n", n);
	return 0;
}
