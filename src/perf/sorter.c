#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/array.h"
#include "perf/sorter.h"

struct entry {
	uint64_t time;
	uint64_t seq;
	size_t len, cap;
	uint8_t *data;
};

struct perf_sorter {
	struct entry **heap; /* binary min-heap on (time, seq) */
	size_t n, cap;
	struct entry **free; /* recycled entries, their buffers kept */
	size_t n_free, cap_free;
	struct entry *popped; /* returned by the last pop, recycled on the next call */
	uint64_t seq;
	size_t bytes;
};

struct perf_sorter *sonde__perf_sorter_new(void)
{
	return sonde__calloc(1, sizeof(struct perf_sorter));
}

static void entry_free(struct entry *e)
{
	if (e) {
		sonde__free(e->data);
		sonde__free(e);
	}
}

void sonde__perf_sorter_free(struct perf_sorter *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		entry_free(s->heap[i]);
	for (size_t i = 0; i < s->n_free; i++)
		entry_free(s->free[i]);
	entry_free(s->popped);
	sonde__free(s->heap);
	sonde__free(s->free);
	sonde__free(s);
}

static bool before(const struct entry *a, const struct entry *b)
{
	return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

static void sift_up(struct entry **h, size_t i)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!before(h[i], h[p]))
			break;
		struct entry *t = h[i];
		h[i] = h[p];
		h[p] = t;
		i = p;
	}
}

static void sift_down(struct entry **h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && before(h[l], h[m]))
			m = l;
		if (l + 1 < n && before(h[l + 1], h[m]))
			m = l + 1;
		if (m == i)
			return;
		struct entry *t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void recycle(struct perf_sorter *s, struct entry *e)
{
	/* The free list was sized together with the heap, so this cannot fail. */
	s->free[s->n_free++] = e;
}

static struct entry *take_entry(struct perf_sorter *s, size_t len)
{
	struct entry *e = s->n_free ? s->free[--s->n_free] : sonde__calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	if (e->cap < len) {
		/* Power-of-two capacities: entries settle at a few sizes and stop growing. */
		size_t cap = 256;
		while (cap < len)
			cap *= 2;
		uint8_t *d = sonde__realloc(e->data, cap);
		if (!d) {
			recycle(s, e);
			return NULL;
		}
		e->data = d;
		e->cap = cap;
	}
	return e;
}

int sonde__perf_sorter_push(struct perf_sorter *s, uint64_t time, const void *rec, size_t len)
{
	/* +1 for the entry held in s->popped */
	if (sonde__array_grow(&s->heap, &s->cap, s->n + 1, sizeof(void *), 64) ||
	    sonde__array_grow(&s->free, &s->cap_free, s->n + s->n_free + 2, sizeof(void *), 64))
		return -ENOMEM;
	struct entry *e = take_entry(s, len);
	if (!e)
		return -ENOMEM;
	memcpy(e->data, rec, len);
	e->len = len;
	e->time = time;
	e->seq = s->seq++;
	s->heap[s->n++] = e;
	sift_up(s->heap, s->n - 1);
	s->bytes += len;
	return 0;
}

int sonde__perf_sorter_pop(struct perf_sorter *s, uint64_t limit, const void **rec, size_t *len,
		    uint64_t *time)
{
	if (s->popped) {
		recycle(s, s->popped);
		s->popped = NULL;
	}
	if (s->n == 0 || s->heap[0]->time > limit)
		return 0;
	struct entry *e = s->heap[0];
	s->heap[0] = s->heap[--s->n];
	sift_down(s->heap, s->n, 0);
	s->popped = e;
	s->bytes -= e->len;
	*rec = e->data;
	*len = e->len;
	*time = e->time;
	return 1;
}

size_t sonde__perf_sorter_count(const struct perf_sorter *s)
{
	return s->n;
}

size_t sonde__perf_sorter_bytes(const struct perf_sorter *s)
{
	return s->bytes;
}

uint64_t sonde__perf_sorter_limit(const uint64_t *latest, size_t n, uint64_t floor)
{
	uint64_t limit = UINT64_MAX;

	for (size_t i = 0; i < n; i++) {
		uint64_t t = latest[i] > floor ? latest[i] : floor;
		if (t < limit)
			limit = t;
	}
	return limit == UINT64_MAX ? floor : limit;
}
