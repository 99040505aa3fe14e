/* The recorder's images part: build ids by file identity, the images held open until the
 * recording ends and the build-id cache they are saved into (images.c, track.c).
 * Internal. */
#ifndef SONDE_RECORD_IMAGES_H
#define SONDE_RECORD_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/regfile.h"

struct rec_build_id {
	uint64_t dev, inode;
	uint32_t gen; /* the inode's generation, 0: unknown */
	uint8_t len;
	uint8_t id[32];
	int fd;	    /* the image, held until finish (images.c), or -1 */
	char *path; /* its path when held */
};

/* Images held open at once, to be checked (and kept if deleted) when the recording ends. */
enum { REC_IMAGES_HELD_MAX = 256 };

struct rec_images {
	struct rec_build_id *build_ids;
	size_t n_build_ids, cap_build_ids;
	size_t n_images_held;
	char *bidcache_dir; /* where deleted or replaced images are kept; NULL: nowhere */
	uint64_t bidcache_bytes;
	struct regfile_refusals refused; /* mapped files not read (base/regfile.h) */
};

#endif
