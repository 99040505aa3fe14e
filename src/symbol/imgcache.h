/* The image cache: open descriptors of the exact files processes mapped, so that a
 * library deleted or replaced on disk after it was mapped still symbolizes. Internal.
 *
 * Keyed by (dev, inode) as recorded, with the image's build id kept to reject a reused
 * inode. Bounded by the total size of the files held and by their number; the least
 * recently used image is closed first.
 */
#ifndef SONDE_SYMBOL_IMGCACHE_H
#define SONDE_SYMBOL_IMGCACHE_H

#include <stddef.h>
#include <stdint.h>

struct imgcache_entry;

struct imgcache {
	struct imgcache_entry *head, *tail; /* most recently used first */
	size_t n;
	uint64_t bytes;
	uint64_t max_bytes;
	size_t max_n;
};

/* Takes ownership of fd in every case (it is closed when not kept). 0, or -SONDE_E_LIMIT
 * when the file alone exceeds the byte bound, or -errno. */
int sonde__imgcache_add(struct imgcache *c, uint64_t dev, uint64_t ino, const uint8_t *build_id,
		 size_t build_id_len, int fd, uint64_t size);
/* A borrowed descriptor of the image, or -1. A build id, when given, must match. */
int sonde__imgcache_get(struct imgcache *c, uint64_t dev, uint64_t ino, const uint8_t *build_id,
		 size_t build_id_len);
void sonde__imgcache_free(struct imgcache *c);

#endif
