/* A CPU-bound program that reports its own throughput, for measuring what a profiler costs
 * the program it samples (bench/record-overhead.py):
 *
 *   main -> run -> climb -> climb -> ... (DEPTH frames) -> rung
 *
 * Each round climbs down DEPTH recursive frames of FRAME bytes of stack each, does one unit
 * of work in the leaf (rung), and returns. DEPTH 1 keeps the stack shallow (a few hundred
 * bytes below main); DEPTH 2000 with the default FRAME puts the leaf about 200 KiB deep,
 * beyond any user-stack copy perf_event allows.
 *
 * usage: ladder [SECONDS [DEPTH [FRAME]]]   (defaults 3, 1, 96)
 * At the end it prints on stdout
 *   ladder: UNITS units in WALL s, CPU s of CPU = RATE units/s, CPU_RATE units/CPU-s
 * CPU is the process's own CPU time, which on kernels without IRQ time accounting includes
 * the sampling interrupts taken in it: CPU_RATE is its throughput whatever share of the
 * machine it got, and a profiler's per-sample cost lowers it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { UNIT = 20000 };

static volatile uint64_t sink;

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

__attribute__((noinline)) static uint64_t rung(uint64_t x)
{
	for (long i = 0; i < UNIT; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

/* One frame of the ladder: a stack buffer of `frame` bytes the compiler must keep. */
__attribute__((noinline)) static uint64_t climb(uint64_t x, int depth, size_t frame)
{
	volatile char pad[frame];

	pad[0] = (char)x;
	if (depth <= 1)
		return rung(x) + pad[0];
	return climb(x, depth - 1, frame) + pad[frame - 1];
}

__attribute__((noinline)) static uint64_t run(double seconds, int depth, size_t frame,
					      uint64_t *units)
{
	double start = now(), end = start + seconds;
	uint64_t x = 1, n = 0;

	while (now() < end) {
		/* Several rounds between clock reads, so reading the clock costs little. */
		for (int i = 0; i < 16; i++)
			x = climb(x, depth, frame);
		n += 16;
	}
	*units = n;
	return x;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	int depth = argc > 2 ? atoi(argv[2]) : 1;
	long frame = argc > 3 ? atol(argv[3]) : 96;
	uint64_t units;

	if (seconds <= 0 || depth < 1 || frame < 1 || frame > 65536) {
		fprintf(stderr, "usage: ladder [SECONDS [DEPTH [FRAME]]]\n");
		return 2;
	}
	double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	sink = run(seconds, depth, (size_t)frame, &units);
	double t = now() - t0, c = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	printf("ladder: %llu units in %.3f s, %.3f s of CPU = %.1f units/s, %.1f units/CPU-s\n",
	       (unsigned long long)units, t, c, units / t, units / c);
	return 0;
}
