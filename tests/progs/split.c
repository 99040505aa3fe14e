/* A CPU-bound program with a known profile: about 60%, 30% and 10% of its time in three
 * leaf functions, each reached through its own middle function:
 *
 *   main -> run -> path_hot  -> compute_hot   (60%)
 *               -> path_warm -> compute_warm  (30%)
 *               -> path_cool -> compute_cool  (10%)
 *
 * usage: split [SECONDS[cpu]]   (default 3). It is the bundled demo and the reference target of
 * the profiler's accuracy tests, so the split is set by work done, not by time slept.
 * SECONDS ending in "cpu" (split 0.3cpu) are seconds of its own CPU time, not of the wall
 * clock: as many samples of its CPU time on a loaded machine as on a quiet one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { UNIT = 200000 };

static volatile uint64_t sink;

/* One unit of work: a dependent multiply-add chain the compiler cannot fold. A macro, not
 * an inline function, so that each compute_* is the leaf that profiles attribute time to
 * (an inlined function would rightly appear as its own inline frame). */
#define SPIN(x, units)                                                                             \
	do {                                                                                       \
		for (long i_ = 0; i_ < (units) * UNIT; i_++)                                       \
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;                   \
	} while (0)

__attribute__((noinline)) uint64_t compute_hot(uint64_t x)
{
	SPIN(x, 6);
	return x;
}

__attribute__((noinline)) uint64_t compute_warm(uint64_t x)
{
	SPIN(x, 3);
	return x;
}

__attribute__((noinline)) uint64_t compute_cool(uint64_t x)
{
	SPIN(x, 1);
	return x;
}

__attribute__((noinline)) uint64_t path_hot(uint64_t x)
{
	return compute_hot(x) + 1;
}

__attribute__((noinline)) uint64_t path_warm(uint64_t x)
{
	return compute_warm(x) + 2;
}

__attribute__((noinline)) uint64_t path_cool(uint64_t x)
{
	return compute_cool(x) + 3;
}

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void)
{
	struct timespec ts;

	clock_gettime(clock_id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Rounds of the three paths, each path taken the same 1 to 8 times in a round, varied from
 * round to round. Rounds of one fixed length (one call each: 1.9 ms of CPU, close to two
 * sampling periods at 999 Hz) are sampled at the same few points of the round for as
 * long as their length stays near a multiple of the period, which the speed of a loaded
 * machine drifts into and out of: single recordings strayed far from 60/30/10, perf's as
 * much as sonde's (standard deviations of 2.6/3.4/2.6 points over recordings of ~270
 * samples, where varied rounds gave 0.8/0.8/0.9). The work in a round, and so the split,
 * is 6:3:1 whatever its length. */
__attribute__((noinline)) uint64_t run(double seconds)
{
	double end = now() + seconds;
	uint64_t x = 1, r = 1;

	while (now() < end) {
		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		int times = 1 + (int)(r >> 61);
		for (int i = 0; i < times; i++)
			x = path_hot(x);
		for (int i = 0; i < times; i++)
			x = path_warm(x);
		for (int i = 0; i < times; i++)
			x = path_cool(x);
	}
	return x;
}

int main(int argc, char **argv)
{
	char *unit = NULL;
	double seconds = argc > 1 ? strtod(argv[1], &unit) : 3.0;

	if (unit && strcmp(unit, "cpu") == 0)
		clock_id = CLOCK_PROCESS_CPUTIME_ID;
	else if (unit && *unit)
		seconds = 0;
	if (seconds <= 0) {
		fprintf(stderr, "usage: split [SECONDS[cpu]]\n");
		return 2;
	}
	sink = run(seconds);
	return 0;
}
