/* Threads that burn CPU at a chosen stack depth, for the recorder's per-thread stack copy
 * sizing (docs/record.md, "Stack copy sizing"):
 *
 *   main -> [THREADS threads] -> descend -> descend -> ... (DEPTH frames) -> burn
 *
 * Each thread descends DEPTH recursive frames of about 64 bytes (DEPTH 800 puts the leaf
 * about 50 KiB deep: beyond a 32 KiB copy, within the 64 KiB perf_event allows) and burns
 * CPU in the leaf until SECONDS have passed. THREADS 0 runs the descent on the main thread.
 *
 * usage: stack_depths [SECONDS[cpu] [THREADS [DEPTH]]]   (defaults 2, 0, 1)
 * SECONDS ending in "cpu" are of the process's own CPU time, not of the wall clock: as
 * many samples on a loaded machine as on a quiet one.
 * At the end it prints on stdout
 *   stack_depths: CPU s of CPU
 * the process's own CPU time, which a recording at a fixed period of cpu-clock should have
 * sampled CPU / period times.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;
static double until;
static clockid_t clock_id = CLOCK_MONOTONIC;
static int depth = 1;

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static uint64_t burn(uint64_t x)
{
	while (clock_s(clock_id) < until)
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

/* One frame: a buffer the compiler must keep, so each level takes its share of stack. */
__attribute__((noinline)) static uint64_t descend(uint64_t x, int level)
{
	volatile uint64_t pad[4];

	pad[0] = x;
	if (level <= 1)
		return burn(x) + pad[0];
	return descend(x + 1, level - 1) + pad[3];
}

static void *thread_main(void *arg)
{
	sink += descend((uint64_t)(uintptr_t)arg, depth);
	return NULL;
}

int main(int argc, char **argv)
{
	char *unit = NULL;
	double seconds = argc > 1 ? strtod(argv[1], &unit) : 2;
	int threads = argc > 2 ? atoi(argv[2]) : 0;
	pthread_t tids[256];

	if (unit && strcmp(unit, "cpu") == 0)
		clock_id = CLOCK_PROCESS_CPUTIME_ID;
	else if (unit && *unit)
		seconds = 0;
	depth = argc > 3 ? atoi(argv[3]) : 1;
	if (seconds <= 0 || threads < 0 || threads > 256 || depth < 1 || depth > 1000) {
		fprintf(stderr, "usage: stack_depths [SECONDS[cpu] [THREADS [DEPTH]]]\n");
		return 2;
	}
	until = clock_s(clock_id) + seconds;
	if (threads == 0)
		thread_main(NULL);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tids[i], NULL, thread_main, (void *)(uintptr_t)i) != 0)
			return 1;
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	printf("stack_depths: %.3f s of CPU\n", clock_s(CLOCK_PROCESS_CPUTIME_ID));
	return 0;
}
