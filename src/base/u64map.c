#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/u64map.h"

enum { U64MAP_MIN_CAP = 16 };

static size_t home_of(uint64_t key, size_t mask)
{
	return (size_t)u64_hash(key) & mask;
}

/* Slot index holding key (nonzero), or the empty slot ending its probe run. */
static size_t probe(const struct u64map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i = home_of(key, mask);

	while (m->slots[i].key && m->slots[i].key != key)
		i = (i + 1) & mask;
	return i;
}

/* Moves every entry into a new table of cap slots. The new table is allocated before the
 * old one is freed, so a growth always changes m->slots (the tests rely on that). */
static int rehash(struct u64map *m, size_t cap)
{
	struct u64map_slot *old = m->slots, *s = sonde__calloc(cap + 1, sizeof(*s));
	size_t oldcap = m->cap;

	if (!s)
		return -ENOMEM;
	if (old)
		s[cap] = old[oldcap];
	m->slots = s;
	m->cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].key)
			m->slots[probe(m, old[i].key)] = old[i];
	sonde__free(old);
	return 0;
}

int sonde__u64map_reserve(struct u64map *m, size_t n)
{
	size_t cap = U64MAP_MIN_CAP;

	if (n > SIZE_MAX / 4 / sizeof(struct u64map_slot))
		return -ENOMEM;
	while (cap < n * 2)
		cap *= 2;
	return cap > m->cap ? rehash(m, cap) : 0;
}

void sonde__u64map_free(struct u64map *m)
{
	if (!m)
		return;
	sonde__free(m->slots);
	memset(m, 0, sizeof(*m));
}

void sonde__u64map_clear(struct u64map *m)
{
	if (m->slots)
		memset(m->slots, 0, (m->cap + 1) * sizeof(*m->slots));
	m->n = 0;
	m->has_zero = false;
}

uint64_t *sonde__u64map_get(const struct u64map *m, uint64_t key)
{
	size_t i;

	if (!key)
		return m->has_zero ? &m->slots[m->cap].val : NULL;
	if (!m->cap)
		return NULL;
	i = probe(m, key);
	return m->slots[i].key ? &m->slots[i].val : NULL;
}

int sonde__u64map_put(struct u64map *m, uint64_t key, uint64_t val)
{
	uint64_t *v = sonde__u64map_get(m, key);
	size_t i;

	if (v) {
		*v = val;
		return 0;
	}
	if (!m->cap || (key && (m->n + 1) * 2 > m->cap)) {
		int err = rehash(m, m->cap ? m->cap * 2 : U64MAP_MIN_CAP);
		if (err < 0)
			return err;
	}
	if (!key) {
		m->slots[m->cap].val = val;
		m->has_zero = true;
		return 0;
	}
	i = probe(m, key);
	m->slots[i] = (struct u64map_slot){key, val};
	m->n++;
	return 0;
}

bool sonde__u64map_del(struct u64map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!key) {
		if (!m->has_zero)
			return false;
		m->has_zero = false;
		m->slots[m->cap].val = 0;
		return true;
	}
	if (!m->cap || !m->slots[i = probe(m, key)].key)
		return false;
	/* Backward shift: walk the rest of the run; an entry at j may fill the hole at i
	 * unless its home lies cyclically in (i, j], where moving it before its home would
	 * hide it from lookups. */
	for (j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
		size_t home = home_of(m->slots[j].key, mask);
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i] = (struct u64map_slot){0, 0};
	m->n--;
	return true;
}

bool sonde__u64map_next(const struct u64map *m, size_t *pos, uint64_t *key, uint64_t *val)
{
	for (; *pos < m->cap; (*pos)++) {
		if (m->slots[*pos].key) {
			*key = m->slots[*pos].key;
			*val = m->slots[(*pos)++].val;
			return true;
		}
	}
	if (*pos == m->cap && m->has_zero) {
		(*pos)++;
		*key = 0;
		*val = m->slots[m->cap].val;
		return true;
	}
	return false;
}
