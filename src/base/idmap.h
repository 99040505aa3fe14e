/* A small open-addressing hash index from keys to dense ids. Internal to libsonde.
 *
 * The map stores only (hash, id) pairs: the keys live in the caller's own arrays, and
 * lookups compare through a callback. That lets one index type serve strings, tuples and
 * tree nodes without copying keys, and rehashing never needs the keys.
 *
 * One of the library's two maps, for interning: tables whose entries are numbered densely
 * in the order they are added (the exporters' strings, functions and stacks, the spool
 * writer's frames and nodes). base/u64map.h is the other, for lookups by an integer key
 * of a value kept in the map itself (pids, tids, buffer and sequence ids). Neither can
 * stand in for the other without a copy of every key (u64map keyed by hash would need
 * the keys beside it to resolve collisions, which is what this one is) or an indirection
 * per lookup.
 */
#ifndef SONDE_BASE_IDMAP_H
#define SONDE_BASE_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/u64map.h"

struct idmap {
	uint64_t *slots; /* (hash32 << 32) | (id + 1); 0 is empty */
	size_t mask;	 /* capacity - 1; capacity is a power of two */
	size_t n;
};

/* Does the entry `id` hold `key`? */
typedef bool (*idmap_eq_fn)(const void *ctx, uint32_t id, const void *key);

/* The id stored under hash h whose entry equals key, or -1. */
int64_t sonde__idmap_find(const struct idmap *m, uint32_t h, idmap_eq_fn eq, const void *ctx,
		   const void *key);
/* The same, inline: where eq is a function the caller's file defines, the compiler inlines
 * it too, leaving no call per probe (the spool writer's interning, once per frame of a
 * sample). */
static inline int64_t idmap_find(const struct idmap *m, uint32_t h, idmap_eq_fn eq, const void *ctx,
				 const void *key)
{
	if (!m->slots)
		return -1;
	for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
		uint64_t s = m->slots[i];
		if (!s)
			return -1;
		if ((uint32_t)(s >> 32) == h && eq(ctx, (uint32_t)s - 1, key))
			return (uint32_t)s - 1;
	}
}
/* Adds id under hash h (the caller checked it is absent). 0 or -ENOMEM. */
int sonde__idmap_insert(struct idmap *m, uint32_t h, uint32_t id);
void sonde__idmap_free(struct idmap *m);

/* Mixer for hashed keys: base/u64map.h's u64_hash. */

static inline uint64_t idmap_hash_bytes(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, finished by the mixer */

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ULL;
	return u64_hash(h ^ n);
}

#endif
