/* Creates and joins THREADS threads (default 1000), at most 8 alive at a time, each named
 * "lifethr" and spinning about MS milliseconds of its own CPU time in life_thread_work.
 *
 * usage: life_threads [THREADS] [MS]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static volatile uint64_t sink;
static double work_ms = 2;

static double thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void life_thread_work(void)
{
	double until = thread_cpu_ms() + work_ms;
	uint64_t x = 1;

	while (thread_cpu_ms() < until)
		for (int i = 0; i < 5000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

static void *thread_main(void *arg)
{
	prctl(PR_SET_NAME, "lifethr");
	life_thread_work();
	return arg;
}

int main(int argc, char **argv)
{
	int total = argc > 1 ? atoi(argv[1]) : 1000;
	pthread_t t[8];

	if (argc > 2)
		work_ms = atof(argv[2]);
	for (int done = 0; done < total;) {
		int n = total - done < 8 ? total - done : 8;
		for (int i = 0; i < n; i++)
			if (pthread_create(&t[i], NULL, thread_main, NULL) != 0) {
				perror("pthread_create");
				return 1;
			}
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		done += n;
	}
	return 0;
}
