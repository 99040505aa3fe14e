#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "symbol/strpool.h"

enum { STRPOOL_CHUNK = 16384 };

struct strpool_chunk {
	struct strpool_chunk *next;
	char data[];
};

static char *strpool_alloc(struct strpool *p, size_t n)
{
	if (!p->head || p->cap - p->used < n) {
		/* A string larger than a chunk gets a chunk of its own size. */
		size_t cap = n > STRPOOL_CHUNK ? n : STRPOOL_CHUNK;
		struct strpool_chunk *c = sonde__malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = p->head;
		p->head = c;
		p->used = 0;
		p->cap = cap;
	}
	char *r = p->head->data + p->used;
	p->used += n;
	return r;
}

const char *sonde__strpool_addn(struct strpool *p, const char *s, size_t n)
{
	char *d = strpool_alloc(p, n + 1);

	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

const char *sonde__strpool_add(struct strpool *p, const char *s)
{
	return sonde__strpool_addn(p, s, strlen(s));
}

const char *sonde__strpool_printf(struct strpool *p, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	if ((size_t)n < sizeof(small))
		return sonde__strpool_addn(p, small, (size_t)n);
	char *d = strpool_alloc(p, (size_t)n + 1);
	if (!d)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(d, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return d;
}

void sonde__strpool_free(struct strpool *p)
{
	if (!p)
		return;
	for (struct strpool_chunk *c = p->head, *next; c; c = next) {
		next = c->next;
		sonde__free(c);
	}
	p->head = NULL;
	p->used = p->cap = 0;
}
