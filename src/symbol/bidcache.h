/* The build-id cache: a directory of ELF images named by build id, DIR/xx/rest (the first
 * byte of the build id in hex, then the rest), like the layout of /usr/lib/debug/.build-id.
 * Internal.
 *
 * The recorder copies into it the images a recording needs that can no longer be found by
 * their path once the process is gone (deleted or replaced while mapped); the symbolizer
 * looks there by build id when a module's path does not lead to its image. The directory
 * is bounded in total bytes: storing an image removes the least recently modified others
 * past the bound.
 */
#ifndef SONDE_SYMBOL_BIDCACHE_H
#define SONDE_SYMBOL_BIDCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/regfile.h"

/* Default bound of the directory's total size. */
#define BIDCACHE_DEFAULT_BYTES (512ull << 20)
/* Environment variable naming the directory (overrides the XDG default). */
#define BIDCACHE_ENV "SONDE_BUILDID_CACHE"

/* The directory to use: dir when not NULL, else $SONDE_BUILDID_CACHE, else
 * $XDG_CACHE_HOME/sonde/buildid, else $HOME/.cache/sonde/buildid. An empty result (dir or
 * the variable set to "") means "disabled": -ENOENT, as when there is no HOME. 0 or
 * -errno (-ENAMETOOLONG when it does not fit out[cap]). */
int sonde__bidcache_dir(const char *dir, char *out, size_t cap);

/* The file of a build id (1..32 bytes) in dir: DIR/xx/rest. 0 or -errno. */
int sonde__bidcache_path(const char *dir, const uint8_t *id, size_t len, char *out, size_t cap);

/* Copies the whole file open at fd, whose build id is id, into dir (created if missing,
 * mode 0700), unless an image of that build id is already there; then removes the least
 * recently modified images until the directory holds at most max_bytes (never the one just
 * stored). Returns 1 when stored, 0 when it was already there, -SONDE_E_LIMIT when the
 * file alone exceeds max_bytes, or -errno. */
int sonde__bidcache_store(const char *dir, const uint8_t *id, size_t len, int fd, uint64_t max_bytes);

/* Opens the image of a build id in dir, read-only, with sonde__regfile_open's rules: a regular
 * file, no symbolic link, at most max_bytes; refusals counted in refusals (may be NULL).
 * A descriptor or -errno. */
int sonde__bidcache_open(const char *dir, const uint8_t *id, size_t len, uint64_t max_bytes,
		  struct regfile_refusals *refusals);

#endif
