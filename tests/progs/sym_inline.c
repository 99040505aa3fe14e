/* Inline frames for the symbolizer tests, built -O2 (mk/symbol.mk): outer_work calls
 * middle_step, which calls inner_mix, both always inlined. The markers in the comments
 * let the tests find the lines without hard-coding them.
 *
 * usage: sym_inline [N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static volatile uint64_t sink;

static inline __attribute__((always_inline)) uint64_t inner_mix(uint64_t x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + (x >> 17); /* sym:inner-body */
	return x;
}

static inline __attribute__((always_inline)) uint64_t middle_step(uint64_t x, uint64_t n)
{
	uint64_t y = inner_mix(x ^ 0x9e3779b97f4a7c15ULL, n); /* sym:middle-call */
	return y ^ (y >> 29);
}

__attribute__((noinline)) uint64_t outer_work(uint64_t x, uint64_t n)
{
	uint64_t r = middle_step(x, n); /* sym:outer-call */
	return r + 1;
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000;

	sink = outer_work(1, n);
	printf("%llu\n", (unsigned long long)sink);
	return 0;
}
