/* A growable byte buffer. Internal to libsonde.
 *
 * Invariant: len <= cap; data is NULL only when cap == 0. Growth failures are sticky:
 * after one, every append is a no-op and buf_error() returns -ENOMEM, so a long run of
 * appends needs a single check at the end.
 */
#ifndef SONDE_BASE_BUF_H
#define SONDE_BASE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool failed;
};

#define BUF_INIT {0}

/* Ensures room for n more bytes. Returns 0 or -ENOMEM (and marks the buffer failed). */
int sonde__buf_reserve(struct buf *b, size_t n);
void sonde__buf_append(struct buf *b, const void *p, size_t n);
/* Appends n bytes and returns a pointer to them (uninitialised), or NULL on failure. */
void *sonde__buf_extend(struct buf *b, size_t n);
void sonde__buf_reset(struct buf *b); /* len = 0, keeps the memory and clears the error */
void sonde__buf_free(struct buf *b);
/* 0, or -ENOMEM if any growth failed since the last reset. */
static inline int buf_error(const struct buf *b)
{
	return b->failed ? -12 /* ENOMEM */ : 0;
}

static inline void buf_put_u8(struct buf *b, uint8_t v)
{
	if (b->len < b->cap)
		b->data[b->len++] = v;
	else
		sonde__buf_append(b, &v, 1);
}

#endif
