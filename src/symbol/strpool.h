/* An append-only string arena: strings copied in stay at the same address until the pool
 * is freed, which is what lets the symbolizer hand out borrowed names. Internal.
 */
#ifndef SONDE_SYMBOL_STRPOOL_H
#define SONDE_SYMBOL_STRPOOL_H

#include <stddef.h>

struct strpool_chunk;

struct strpool {
	struct strpool_chunk *head;
	size_t used; /* bytes used in head */
	size_t cap;  /* bytes available in head */
};

/* Copies n bytes of s plus a NUL; returns the copy or NULL (ENOMEM). */
const char *sonde__strpool_addn(struct strpool *p, const char *s, size_t n);
const char *sonde__strpool_add(struct strpool *p, const char *s);
/* printf into the pool; NULL on failure. */
const char *sonde__strpool_printf(struct strpool *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void sonde__strpool_free(struct strpool *p);

#endif
