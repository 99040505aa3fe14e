#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "service/imap.h"

static size_t hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k;
}

static int rehash(struct imap *m, size_t cap)
{
	struct imap_slot *old = m->slots, *s = calloc(cap, sizeof(*s));
	size_t oldcap = m->cap;

	if (!s)
		return -ENOMEM;
	m->slots = s;
	m->cap = cap;
	m->n = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].used)
			imap_put(m, old[i].key, old[i].val);
	free(old);
	return 0;
}

int imap_init(struct imap *m, size_t n)
{
	size_t cap = 16;

	memset(m, 0, sizeof(*m));
	while (cap < n * 2)
		cap *= 2;
	return rehash(m, cap);
}

void imap_free(struct imap *m)
{
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

void imap_clear(struct imap *m)
{
	if (m->slots)
		memset(m->slots, 0, m->cap * sizeof(*m->slots));
	m->n = 0;
}

uint32_t *imap_get(const struct imap *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].used)
			return NULL;
		if (m->slots[i].key == key)
			return &m->slots[i].val;
	}
}

int imap_put(struct imap *m, uint64_t key, uint32_t val)
{
	if ((m->n + 1) * 4 > m->cap * 3 && rehash(m, m->cap ? m->cap * 2 : 16) < 0)
		return -ENOMEM;
	for (size_t i = hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct imap_slot *s = &m->slots[i];
		if (!s->used) {
			*s = (struct imap_slot){key, val, 1};
			m->n++;
			return 0;
		}
		if (s->key == key) {
			s->val = val;
			return 0;
		}
	}
}

bool imap_del(struct imap *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!m->cap)
		return false;
	for (i = hash(key) & mask;; i = (i + 1) & mask) {
		if (!m->slots[i].used)
			return false;
		if (m->slots[i].key == key)
			break;
	}
	/* backward-shift: pull later members of the probe run into the hole */
	for (j = (i + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
		size_t home = hash(m->slots[j].key) & mask;
		bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
		if (movable) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i].used = 0;
	m->n--;
	return true;
}
