/* One busy thread that logs, every 50 microseconds or so of its work, the pair
 * (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID) in nanoseconds, and writes the log to FILE at
 * the end: a test maps the timestamps of its samples to its CPU time with it. The log is
 * taken with a system call every few thousand loop iterations, so that almost every
 * sample (user frames only) lands in user code.
 *
 * It starts working when a byte (or end of file) comes on its standard input, the test's
 * go once the session that samples it has started, and works until it has had CPU_SECONDS
 * of CPU time since: on a loaded machine it takes longer, but gives as many samples and
 * as long a log.
 *
 * It stays on the CPU it starts on: a per-thread cpu-clock event is one event per CPU,
 * each counting the thread's time on its own CPU, so only on one CPU is the spacing of
 * its samples the thread's whole CPU time.
 *
 * usage: cputime_log CPU_SECONDS FILE
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct entry {
	uint64_t mono, cpu;
};

static volatile uint64_t sink;

static uint64_t ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) void cputime_work(void)
{
	uint64_t x = sink;

	for (int i = 0; i < 50000; i++)
		x = x * 6364136223846793005ULL + 1;
	sink = x;
}

int main(int argc, char **argv)
{
	char go;

	if (argc != 3)
		return 2;
	size_t cap = 1u << 20, n = 0;
	struct entry *log = malloc(cap * sizeof(*log));

	cpu_set_t one;

	if (!log)
		return 1;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	if (sched_setaffinity(0, sizeof(one), &one) < 0 || read(0, &go, 1) < 0)
		return 1;
	uint64_t end = ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)(atof(argv[1]) * 1e9);
	for (;;) {
		uint64_t cpu = ns(CLOCK_THREAD_CPUTIME_ID);
		if (cpu >= end)
			break;
		if (n < cap)
			log[n++] = (struct entry){ns(CLOCK_MONOTONIC), cpu};
		cputime_work();
	}
	FILE *f = fopen(argv[2], "we");
	if (!f || fwrite(log, sizeof(*log), n, f) != n || fclose(f) != 0)
		return 1;
	return 0;
}
