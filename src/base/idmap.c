#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/idmap.h"

int64_t sonde__idmap_find(const struct idmap *m, uint32_t h, idmap_eq_fn eq, const void *ctx,
		   const void *key)
{
	return idmap_find(m, h, eq, ctx, key);
}

static void place(uint64_t *slots, size_t mask, uint64_t s)
{
	size_t i = (s >> 32) & mask;

	while (slots[i])
		i = (i + 1) & mask;
	slots[i] = s;
}

static int grow(struct idmap *m)
{
	size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
	uint64_t *slots = sonde__calloc(cap, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	if (m->slots) {
		for (size_t i = 0; i <= m->mask; i++)
			if (m->slots[i])
				place(slots, cap - 1, m->slots[i]);
		sonde__free(m->slots);
	}
	m->slots = slots;
	m->mask = cap - 1;
	return 0;
}

int sonde__idmap_insert(struct idmap *m, uint32_t h, uint32_t id)
{
	/* keep the load under 1/2 so probe runs stay short */
	if (!m->slots || (m->n + 1) * 2 > m->mask + 1) {
		int err = grow(m);
		if (err)
			return err;
	}
	place(m->slots, m->mask, ((uint64_t)h << 32) | ((uint64_t)id + 1));
	m->n++;
	return 0;
}

void sonde__idmap_free(struct idmap *m)
{
	if (!m)
		return;
	sonde__free(m->slots);
	*m = (struct idmap){0};
}
