/* The debuginfod client (libdebuginfod), used for build ids that have no local debug
 * information. Internal.
 *
 * libdebuginfod reads its server list from the DEBUGINFOD_URLS environment variable only.
 * When the caller gave URLs in the options, the variable is set to them for the duration
 * of each query and restored afterwards; that is not thread-safe, which is why a
 * symbolizer is documented as single-threaded. Downloads land in libdebuginfod's cache
 * (DEBUGINFOD_CACHE_PATH, default ~/.cache/debuginfod_client), so a second run is local.
 */
#ifndef SONDE_SYMBOL_DINFOD_H
#define SONDE_SYMBOL_DINFOD_H

#include <stddef.h>
#include <stdint.h>

#include "symbol/elfimg.h"

struct dinfod;

/* urls: NULL to use the environment. NULL result: debuginfod is not configured. */
struct dinfod *sonde__dinfod_new(const char *urls);
/* Fetches (or finds in the cache) the debug file of a build id. 0 or -errno. */
int sonde__dinfod_find_debuginfo(struct dinfod *d, const uint8_t *id, size_t len, struct elfimg *out);
void sonde__dinfod_free(struct dinfod *d);

#endif
