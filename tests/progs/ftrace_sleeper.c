/* A known workload for linux.ftrace's tests: a thread named NAME blocks COUNT times
 * (nanosleep of 1 ms each), so it is switched out at least COUNT times; then the program
 * exits.
 *
 * usage: ftrace_sleeper [COUNT [NAME]]   (default 200, "sonde-sleeper"; NAME is cut to
 *                                        15 bytes, the kernel's comm)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static const char *name = "sonde-sleeper";

static void *sleeper(void *arg)
{
	long n = *(long *)arg;
	struct timespec ts = {0, 1000000};

	prctl(PR_SET_NAME, name);
	for (long i = 0; i < n; i++)
		nanosleep(&ts, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200;
	pthread_t t;

	if (argc > 2)
		name = argv[2];
	if (pthread_create(&t, NULL, sleeper, &n) != 0)
		return 1;
	pthread_join(t, NULL);
	printf("done %ld\n", n);
	return 0;
}
