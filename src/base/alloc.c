#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/alloc.h>

#include "base/alloc.h"

/* The second piece of mutable global state besides the log callback: like it, set once by
 * the program (include/sonde/alloc.h says when) and read by every thread after. */
static struct {
	sonde_malloc_fn malloc;
	sonde_realloc_fn realloc;
	sonde_calloc_fn calloc;
	sonde_free_fn free;
} allocator = { malloc, realloc, calloc, free };

int sonde_allocator__replace(sonde_malloc_fn malloc_fn, sonde_realloc_fn realloc_fn,
			     sonde_calloc_fn calloc_fn, sonde_free_fn free_fn)
{
	if (!malloc_fn || !realloc_fn || !calloc_fn || !free_fn)
		return -EINVAL;
	allocator.malloc = malloc_fn;
	allocator.realloc = realloc_fn;
	allocator.calloc = calloc_fn;
	allocator.free = free_fn;
	return 0;
}

/* A replaced allocator need not set errno; callers that return NULL with errno rely on
 * ENOMEM. */
void *sonde__malloc(size_t size)
{
	void *p = allocator.malloc(size);

	if (!p)
		errno = ENOMEM;
	return p;
}

void *sonde__calloc(size_t count, size_t size)
{
	void *p = allocator.calloc(count, size);

	if (!p)
		errno = ENOMEM;
	return p;
}

void *sonde__realloc(void *ptr, size_t size)
{
	void *p = allocator.realloc(ptr, size);

	if (!p && size)
		errno = ENOMEM;
	return p;
}

void sonde__free(void *ptr)
{
	/* free(3) keeps errno since POSIX 2024; a replaced free may not, and error paths free
	 * before they return -errno. */
	int e = errno;

	allocator.free(ptr);
	errno = e;
}

char *sonde__strdup(const char *s)
{
	return sonde__strndup(s, strlen(s));
}

char *sonde__strndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *d = sonde__malloc(len + 1);

	if (!d)
		return NULL;
	memcpy(d, s, len);
	d[len] = '\0';
	return d;
}
