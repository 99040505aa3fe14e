/* A short-lived target for the recorder's lifecycle tests: spins for MS milliseconds of its
 * own CPU time in life_spin_work (reached through main), then exits. CPU time, not wall
 * time, so that a loaded machine still yields the same number of samples per process.
 *
 * usage: life_spin [MS]   (default 20)
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static double cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void life_spin_work(double ms)
{
	double until = cpu_ms() + ms;
	uint64_t x = 1;

	while (cpu_ms() < until)
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

int main(int argc, char **argv)
{
	life_spin_work(argc > 1 ? atof(argv[1]) : 20);
	return 0;
}
