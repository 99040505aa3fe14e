/* A small open-addressing hash map from nonzero-or-zero uint64_t keys to pointers.
 * Internal. Lookups allocate nothing; inserts grow the table (to half full at most). */
#ifndef SONDE_SYMBOL_U64MAP_H
#define SONDE_SYMBOL_U64MAP_H

#include <stddef.h>
#include <stdint.h>

struct u64map_slot {
	uint64_t key;
	void *val; /* NULL marks an empty slot, so values are never NULL */
};

struct u64map {
	struct u64map_slot *slots;
	size_t cap, n; /* cap is 0 or a power of two */
};

static inline uint64_t u64map_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

void *u64map_get(const struct u64map *m, uint64_t key);
/* val must not be NULL. Replaces an existing value. 0 or -ENOMEM. */
int u64map_put(struct u64map *m, uint64_t key, void *val);
void u64map_free(struct u64map *m);

#endif
