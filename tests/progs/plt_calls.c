/* Calls through PLT stubs in a hot loop, so that samples land in the stubs themselves:
 * labs through .plt (or .plt.sec with IBT), llabs through .plt.got (its address is also
 * loaded from the GOT, so the linker gives it a GLOB_DAT slot and a .plt.got stub). Both
 * are a few instructions long, so the stubs take a good part of the time.
 * Built plain, with -z now, and with IBT stubs (mk/symbol.mk). Runs SECONDS (default 3).
 *
 * usage: plt_calls [SECONDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long long (*volatile llabs_ptr)(long long);
static volatile long sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) long plt_loop(long x)
{
	long s = 0;

	for (int i = 0; i < 100000; i++) {
		s += labs(x - i);
		s += (long)llabs(i - x);
	}
	return s;
}

int main(int argc, char **argv)
{
	double until = now() + (argc > 1 ? atof(argv[1]) : 3);

	llabs_ptr = llabs; /* the address from the GOT: llabs's stub goes to .plt.got */
	while (now() < until)
		sink += plt_loop(sink & 0xffff);
	printf("%lld\n", (long long)sink + llabs_ptr(0));
	return 0;
}
