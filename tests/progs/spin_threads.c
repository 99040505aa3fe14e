/* THREADS threads (default 64), all busy for SECONDS seconds (default 3) of wall time: the
 * load under which a profiler's rings must not overflow.
 *
 * usage: spin_threads [THREADS] [SECONDS]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;
static double seconds = 3;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin_thread_work(double until)
{
	uint64_t x = 1;

	while (now() < until)
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005ULL + 1;
	sink = x;
}

static void *run(void *arg)
{
	spin_thread_work(*(const double *)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 64;
	static pthread_t t[1024];
	double until;

	if (argc > 2)
		seconds = atof(argv[2]);
	if (n < 1 || n > 1024)
		return 2;
	until = now() + seconds;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, run, &until) != 0)
			return 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
