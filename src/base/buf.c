#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/buf.h"

int sonde__buf_reserve(struct buf *b, size_t n)
{
	if (b->failed)
		return -ENOMEM;
	if (b->cap - b->len >= n)
		return 0;
	size_t want = b->len + n;
	if (want < b->len)
		goto fail; /* overflow */
	size_t cap = b->cap ? b->cap : 256;
	while (cap < want) {
		if (cap > SIZE_MAX / 2)
			goto fail;
		cap *= 2;
	}
	uint8_t *p = sonde__realloc(b->data, cap);
	if (!p)
		goto fail;
	b->data = p;
	b->cap = cap;
	return 0;
fail:
	b->failed = true;
	return -ENOMEM;
}

void sonde__buf_append(struct buf *b, const void *p, size_t n)
{
	if (n == 0 || sonde__buf_reserve(b, n) < 0)
		return;
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void *sonde__buf_extend(struct buf *b, size_t n)
{
	if (sonde__buf_reserve(b, n) < 0)
		return NULL;
	void *p = b->data + b->len;
	b->len += n;
	return p;
}

void sonde__buf_reset(struct buf *b)
{
	b->len = 0;
	b->failed = false;
}

void sonde__buf_free(struct buf *b)
{
	if (!b)
		return;
	sonde__free(b->data);
	*b = (struct buf)BUF_INIT;
}
