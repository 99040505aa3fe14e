/* Growth of plain heap arrays. Internal to libsonde. */
#ifndef SONDE_BASE_ARRAY_H
#define SONDE_BASE_ARRAY_H

#include <stddef.h>

/* Makes the array *pp (items of elem bytes, capacity *cap items) hold at least need items,
 * doubling its capacity, starting from min_cap. Returns 0, or -ENOMEM when memory or the
 * size arithmetic runs out; on failure *pp and *cap are unchanged. pp is the address of
 * the array pointer (any T **). */
int sonde__array_grow(void *pp, size_t *cap, size_t need, size_t elem, size_t min_cap);

#endif
