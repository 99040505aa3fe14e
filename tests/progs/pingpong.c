/* A context-switch-heavy workload for the off-CPU benchmark: two threads bounce a byte
 * through a pair of pipes for SECONDS, each blocking in read until the other answers (two
 * switch-outs per round trip at least), and the round trips per second are printed: the
 * program's own throughput, which a profiler sampling every switch lowers.
 *
 * Each round trip also does WORK iterations of arithmetic (default 4000, a few microseconds
 * here), so that an unprofiled run switches about 100k times a second on a 2-core machine.
 *
 * It also prints the CPU time both threads took per round trip (user and system, getrusage):
 * what a profiler adds to the program itself (its programs and samples run in the
 * program's context), which the load of other processes changes far less than the
 * throughput (a CPU the thread waits for, or its partner woken on the other CPU).
 *
 * With CPU, both threads run on that CPU alone: each round trip is then two direct switches
 * between them, whatever the load elsewhere (unpinned, a round trip costs more or less
 * depending on whether the threads share a CPU, which a profiler's load changes).
 *
 * usage: pingpong [SECONDS [WORK [CPU]]]   (default 3 4000, not pinned)
 */
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];
static long work = 4000;
static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static int answer(void)
{
	char c;

	if (read(ping[0], &c, 1) != 1)
		return -1;
	return write(pong[1], &c, 1) == 1 ? (c == 0 ? -1 : 0) : -1;
}

static void *ponger(void *arg)
{
	while (answer() == 0)
		;
	return NULL;
}

__attribute__((noinline)) static int round_trip(char c)
{
	for (long i = 0; i < work; i++)
		sink += (uint64_t)i * i;
	return write(ping[1], &c, 1) == 1 && read(pong[0], &c, 1) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 3, start, end;
	uint64_t n = 0;
	pthread_t t;

	if (argc > 2)
		work = atol(argv[2]);
	if (argc > 3) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(argv[3]), &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			return 2;
	}
	if (pipe(ping) || pipe(pong) || pthread_create(&t, NULL, ponger, NULL))
		return 2;
	start = now_s();
	end = start + secs;
	do {
		for (int i = 0; i < 256; i++, n++)
			if (round_trip(1))
				return 3;
	} while (now_s() < end);
	double took = now_s() - start;
	round_trip(0);
	pthread_join(t, NULL);
	struct rusage ru;
	double cpu = 0;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		      (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	printf("pingpong: %llu round trips in %.3f s = %.0f round trips/s, %.3f us of CPU each\n",
	       (unsigned long long)n, took, n / took, n ? cpu * 1e6 / (double)n : 0.0);
	return 0;
}
