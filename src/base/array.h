/* Growth of plain heap arrays: the one growable array of the library. Internal to
 * libsonde. */
#ifndef SONDE_BASE_ARRAY_H
#define SONDE_BASE_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

/* Makes the array *pp (items of elem bytes, capacity *cap items) hold at least need items,
 * doubling its capacity, starting from min_cap. Returns 0, or -ENOMEM when memory or the
 * size arithmetic runs out; on failure *pp and *cap are unchanged. pp is the address of
 * the array pointer (any T **). */
int sonde__array_grow(void *pp, size_t *cap, size_t need, size_t elem, size_t min_cap);

/* A growable array of T whose items are addressed by uint32_t ids, as the export tables
 * are: ARR_PUSH returns a pointer to a new zeroed slot, or NULL when memory (or the id
 * space) runs out; ARR_FREE empties it. */
#define ARR(T)                                                                                     \
	struct {                                                                                   \
		T *v;                                                                              \
		uint32_t n;                                                                        \
		size_t cap;                                                                        \
	}
#define ARR_PUSH(a)                                                                                \
	((a).n < (a).cap ||                                                                        \
			 ((a).n < UINT32_MAX &&                                                    \
			  sonde__array_grow(&(a).v, &(a).cap, (size_t)(a).n + 1, sizeof(*(a).v),   \
					    16) == 0)                                              \
		 ? memset(&(a).v[(a).n++], 0, sizeof(*(a).v))                                      \
		 : NULL)
#define ARR_FREE(a) (sonde__free((a).v), (a).v = NULL, (a).n = 0, (a).cap = 0)

#endif
