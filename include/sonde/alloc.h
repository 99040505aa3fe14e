/* The library's allocator.
 *
 * Every allocation libsonde makes goes through four functions, libc's malloc, realloc,
 * calloc and free by default. A program may replace them, as libuv's
 * uv_replace_allocator, to account for the library's memory or to make an allocation
 * fail on purpose (the library's own tests fail the Nth allocation to check that every
 * error path returns -ENOMEM and frees what it had).
 *
 * Memory that the library hands to the caller to free (the buffers of
 * sonde_trace_config__from_text and sonde_trace_config__encode) comes from the replaced
 * malloc and is freed with the replaced free.
 */
#ifndef SONDE_ALLOC_H
#define SONDE_ALLOC_H

#include <stddef.h>
#include <sonde/export.h>

typedef void *(*sonde_malloc_fn)(size_t size);
typedef void *(*sonde_realloc_fn)(void *ptr, size_t size);
typedef void *(*sonde_calloc_fn)(size_t count, size_t size);
typedef void (*sonde_free_fn)(void *ptr);

/* Replaces the allocator; the four functions must behave as libc's (free(NULL) does
 * nothing, realloc(NULL, n) allocates, a failure returns NULL). Returns 0, or -EINVAL if
 * any of them is NULL (the allocator is then unchanged).
 *
 * Call it before any other libsonde function, or when the library holds no memory (every
 * handle freed): memory allocated through one allocator is freed through the one in place
 * when it is released. The functions are read without synchronization, so the call must
 * not race with another thread using the library. Replacing with libc's own functions
 * restores the default. */
SONDE_API int sonde_allocator__replace(sonde_malloc_fn malloc_fn, sonde_realloc_fn realloc_fn,
				       sonde_calloc_fn calloc_fn, sonde_free_fn free_fn);

#endif
