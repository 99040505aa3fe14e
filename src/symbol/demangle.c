#include <stdlib.h>
#include <string.h>

#include <libiberty/demangle.h>

#include "symbol/demangle.h"

const char *sonde__sym_demangle(struct strpool *pool, const char *name)
{
	char *d;
	const char *r;

	if (!name)
		return NULL;
	/* Itanium C++ and Rust legacy names start with _Z, Rust v0 names with _R; anything
	 * else (C names) is returned as is without a call into the demangler. */
	if (name[0] != '_' || (name[1] != 'Z' && name[1] != 'R'))
		return name;
	/* DMGL_AUTO tries Rust (both manglings) first, then the C++ ABI. */
	d = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
	if (!d)
		return name;
	/* cplus_demangle allocates with libc's malloc, never sonde__malloc. */
	r = sonde__strpool_add(pool, d);
	free(d);
	return r ? r : name;
}
