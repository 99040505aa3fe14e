/* A shared object for the symbolizer tests: an exported function, a local one, an ifunc,
 * and a function the sym_maplib program calls in a loop. */
#include <stdint.h>

static volatile uint64_t shlib_sink;

__attribute__((noinline)) static uint64_t shlib_local_helper(uint64_t x)
{
	return x * 31 + 7;
}

__attribute__((noinline)) uint64_t shlib_exported(uint64_t x)
{
	return shlib_local_helper(x) ^ 0x5a5a;
}

static uint64_t shlib_impl_fast(uint64_t x)
{
	return x + 1;
}

/* The resolver runs at load time; the ifunc symbol names it. */
static uint64_t (*shlib_pick(void))(uint64_t)
{
	return shlib_impl_fast;
}

uint64_t shlib_ifunc(uint64_t x) __attribute__((ifunc("shlib_pick")));

__attribute__((noinline)) uint64_t shlib_spin(uint64_t n)
{
	uint64_t x = 1;

	for (uint64_t i = 0; i < n; i++)
		x = shlib_exported(x) + shlib_ifunc(i);
	shlib_sink = x;
	return x;
}
