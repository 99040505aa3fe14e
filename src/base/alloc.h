/* The allocator every libsonde allocation goes through (include/sonde/alloc.h). Internal
 * to libsonde.
 *
 * Memory that libc or another library allocates on the library's behalf (libiberty's
 * cplus_demangle, for one) is released with that library's own free, never with
 * sonde__free. */
#ifndef SONDE_BASE_ALLOC_H
#define SONDE_BASE_ALLOC_H

#include <stddef.h>

void *sonde__malloc(size_t size);
void *sonde__calloc(size_t count, size_t size);
void *sonde__realloc(void *ptr, size_t size);
void sonde__free(void *ptr);
/* strdup and strndup through sonde__malloc; NULL with errno ENOMEM on failure. */
char *sonde__strdup(const char *s);
char *sonde__strndup(const char *s, size_t n);

#endif
