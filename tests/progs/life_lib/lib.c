/* Built twice, as liblife_a.so (LIFE_NAME a) and liblife_b.so (LIFE_NAME b): the same code
 * under different names, so both libraries have the same layout and the loader maps one
 * where the other was just unmapped. A sample attributed to the wrong one of the two shows
 * up as a life_a_* name in liblife_b.so or the reverse. */
#include <stdint.h>

#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)
#define FN(suffix) CAT(CAT(life_, LIFE_NAME), suffix)

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t FN(_leaf)(uint64_t n)
{
	uint64_t x = n;

	for (uint64_t i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

/* Spins n rounds of the generator inside this library. */
__attribute__((noinline)) void FN(_hot)(uint64_t n)
{
	sink = FN(_leaf)(n);
}
