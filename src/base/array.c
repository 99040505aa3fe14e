#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/array.h"

int sonde__array_grow(void *pp, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
	void **p = pp;

	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : (min_cap ? min_cap : 1);
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	if (elem && n > SIZE_MAX / elem)
		return -ENOMEM;
	void *q = sonde__realloc(*p, n * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}
