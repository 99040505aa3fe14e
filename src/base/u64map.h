/* An open-addressing hash map from uint64_t keys to uint64_t values. Internal to libsonde.
 *
 * Callers that store narrower integers or pointers cast them through uint64_t (pointers
 * through uintptr_t; see u64map_get_ptr/u64map_put_ptr).
 *
 * Invariants:
 * - cap is 0 (nothing allocated) or a power of two >= 16; slots has cap + 1 entries, the
 *   last one holding key 0, which cannot live in the table because 0 marks an empty slot.
 * - n counts the nonzero keys in slots[0..cap) and 2 * n <= cap (load factor at most 1/2),
 *   so every probe run ends at an empty slot.
 * - Linear probing with backward-shift deletion: there are no tombstones, so every key
 *   sits in the probe run that starts at its home slot u64_hash(key) & (cap - 1), with
 *   no empty slot between home and it.
 * - Memory is allocated only when an insert of a new key would break the load bound (or
 *   the first insert): lookups, replacements and deletions never allocate, and after
 *   sonde__u64map_reserve(m, n) the first n distinct keys are inserted without allocating.
 * - A pointer returned by sonde__u64map_get stays valid until the next put of a new key, del,
 *   clear or free on the same map.
 *
 * A zeroed struct (U64MAP_INIT) is an empty, valid map.
 */
#ifndef SONDE_BASE_U64MAP_H
#define SONDE_BASE_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map_slot {
	uint64_t key; /* 0: empty (except in the key-0 slot at index cap) */
	uint64_t val;
};

struct u64map {
	struct u64map_slot *slots; /* cap + 1 entries, or NULL when cap == 0 */
	size_t cap;
	size_t n;      /* nonzero keys stored in slots[0..cap) */
	bool has_zero; /* slots[cap] holds the value of key 0 */
};

#define U64MAP_INIT                                                                                \
	{                                                                                          \
		0                                                                                  \
	}

/* murmur3's fmix64 finalizer: every input bit affects every output bit, so the low bits
 * used as a table index are well spread even for sequential or shifted keys. */
static inline uint64_t u64_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* Makes room for n entries in total without further allocation. 0 or -ENOMEM (the map is
 * unchanged on failure). Never shrinks. */
int sonde__u64map_reserve(struct u64map *m, size_t n);
/* Frees the table; the map is empty and valid afterwards. Accepts NULL. */
void sonde__u64map_free(struct u64map *m);
/* Removes every entry, keeping the table (no allocation on refill up to its capacity). */
void sonde__u64map_clear(struct u64map *m);
/* Number of entries. */
static inline size_t u64map_count(const struct u64map *m)
{
	return m->n + m->has_zero;
}
/* Pointer to the value of key, or NULL if absent. The map owns it; see the validity rule
 * above. Writing through it updates the entry. */
uint64_t *sonde__u64map_get(const struct u64map *m, uint64_t key);
/* Inserts key or replaces its value. 0, or -ENOMEM (map unchanged) if growth failed. */
int sonde__u64map_put(struct u64map *m, uint64_t key, uint64_t val);
/* Removes key; returns whether it was present. Never allocates. */
bool sonde__u64map_del(struct u64map *m, uint64_t key);
/* Iteration in table order: start with *pos = 0; each call stores the next entry and
 * returns true, or returns false at the end. The map must not be modified meanwhile,
 * except through the value pointers of sonde__u64map_get. */
bool sonde__u64map_next(const struct u64map *m, size_t *pos, uint64_t *key, uint64_t *val);

/* For maps whose values are non-NULL pointers: NULL means absent. */
static inline void *u64map_get_ptr(const struct u64map *m, uint64_t key)
{
	const uint64_t *v = sonde__u64map_get(m, key);

	return v ? (void *)(uintptr_t)*v : NULL;
}

static inline int u64map_put_ptr(struct u64map *m, uint64_t key, const void *p)
{
	return sonde__u64map_put(m, key, (uint64_t)(uintptr_t)p);
}

#endif
