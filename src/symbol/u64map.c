#include <errno.h>
#include <stdlib.h>

#include "symbol/u64map.h"

void *u64map_get(const struct u64map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = u64map_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].val)
			return NULL;
		if (m->slots[i].key == key)
			return m->slots[i].val;
	}
}

static void u64map_place(struct u64map_slot *slots, size_t cap, uint64_t key, void *val)
{
	size_t i = u64map_hash(key) & (cap - 1);

	while (slots[i].val && slots[i].key != key)
		i = (i + 1) & (cap - 1);
	slots[i].key = key;
	slots[i].val = val;
}

static int u64map_grow(struct u64map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	struct u64map_slot *s = calloc(cap, sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].val)
			u64map_place(s, cap, m->slots[i].key, m->slots[i].val);
	free(m->slots);
	m->slots = s;
	m->cap = cap;
	return 0;
}

int u64map_put(struct u64map *m, uint64_t key, void *val)
{
	if ((m->n + 1) * 2 > m->cap && u64map_grow(m) < 0)
		return -ENOMEM;
	if (!u64map_get(m, key))
		m->n++;
	u64map_place(m->slots, m->cap, key, val);
	return 0;
}

void u64map_free(struct u64map *m)
{
	if (!m)
		return;
	free(m->slots);
	m->slots = NULL;
	m->cap = m->n = 0;
}
