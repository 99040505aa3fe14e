/* Finding a module's separate debug file, the way gdb and elfutils do. Internal.
 *
 *  1. by build id: DIR/.build-id/xx/rest.debug for each global debug directory DIR
 *     (default /usr/lib/debug); the file's own build id must match;
 *  2. by .gnu_debuglink NAME next to the module: MODDIR/NAME, MODDIR/.debug/NAME, and
 *     DIR/MODDIR/NAME; the file's CRC32 must match the link's.
 *
 * Files under the debug directories are trusted as system directories are (distributions
 * make .build-id entries symbolic links); files next to the module are where its owner
 * put them, so a symbolic link there is refused (base/regfile.h). Both are capped at
 * ELFIMG_MAX_BYTES and must be regular files.
 */
#ifndef SONDE_SYMBOL_DEBUGFILE_H
#define SONDE_SYMBOL_DEBUGFILE_H

#include <stddef.h>
#include <stdint.h>

#include "symbol/elfimg.h"

struct debugfile_query {
	const char *debug_dirs; /* colon-separated; NULL: /usr/lib/debug */
	const uint8_t *build_id;
	size_t build_id_len;
	const char *module_path; /* for the debuglink search; may be NULL */
	const char *debuglink;	 /* may be NULL or "" */
	uint32_t debuglink_crc;
	struct regfile_refusals *refusals; /* files refused are counted here; may be NULL */
};

/* Opens the first matching debug file into *out. 0, or -ENOENT when there is none. */
int sonde__debugfile_find(const struct debugfile_query *q, struct elfimg *out);

#endif
