/* dlopen/dlclose in a loop while calling into the library: alternately liblife_a.so and
 * liblife_b.so (tests/progs/life_lib), which the loader tends to map at the same address.
 * Each round spins about a millisecond of CPU inside the library, then unloads it.
 * Prints "rounds N same_address M" where M counts rounds whose library was mapped where the
 * other one had been in the previous round (what makes misattribution possible).
 *
 * usage: life_dlswap LIBA LIBB CPU_SECONDS
 */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One round: load lib, call its hot function, unload. Returns its base address. */
__attribute__((noinline)) static uintptr_t life_round(const char *lib, const char *fn)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	struct link_map *lm;

	if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		exit(2);
	}
	void (*hot)(uint64_t) = (void (*)(uint64_t))dlsym(h, fn);
	if (!hot) {
		fprintf(stderr, "dlsym %s: %s\n", fn, dlerror());
		exit(2);
	}
	uintptr_t base = lm->l_addr;
	hot(300000);
	dlclose(h);
	return base;
}

/* Rounds of each library go through a function of their own in this binary (which is never
 * unmapped): a sample in one library under the other's round was misattributed, even though
 * the two libraries' code is identical at identical offsets. */
__attribute__((noinline)) uintptr_t life_round_a(const char *lib)
{
	return life_round(lib, "life_a_hot");
}

__attribute__((noinline)) uintptr_t life_round_b(const char *lib)
{
	return life_round(lib, "life_b_hot");
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	double until = cpu_s() + atof(argv[3]);
	uintptr_t prev = 0;
	long rounds = 0, same = 0;

	while (cpu_s() < until) {
		int b = rounds & 1;
		uintptr_t base = b ? life_round_b(argv[2]) : life_round_a(argv[1]);
		same += base == prev;
		prev = base;
		rounds++;
	}
	printf("rounds %ld same_address %ld\n", rounds, same);
	return 0;
}
