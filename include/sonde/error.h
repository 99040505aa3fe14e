/* sonde error codes.
 *
 * Every int-returning sonde function returns 0 (or a positive count) on success and a
 * negative error on failure: -errno for system errors, or -SONDE_E_* for the
 * project-specific errors below. Constructors return NULL and set errno.
 */
#ifndef SONDE_ERROR_H
#define SONDE_ERROR_H

#include <sonde/export.h>

enum sonde_error {
	SONDE_E_BASE = 4096,
	SONDE_E_FORMAT = SONDE_E_BASE, /* malformed input bytes */
	SONDE_E_TRUNCATED,	       /* input ends inside a record */
	SONDE_E_VERSION,	       /* unsupported format version */
	SONDE_E_MAGIC,		       /* not a file of the expected kind */
	SONDE_E_RANGE,		       /* a value outside its valid range */
	SONDE_E_REFERENCE,	       /* reference to an undefined or duplicate id */
	SONDE_E_UNSUPPORTED,	       /* valid but not supported by this build or machine */
	SONDE_E_PROTOCOL,	       /* peer violated the wire protocol */
	SONDE_E_STATE,		       /* call not valid in the object's current state */
	SONDE_E_EXITED,		       /* the target process has exited */
	SONDE_E_LIMIT,		       /* a configured limit was reached */
	SONDE_E_SHRUNK,		       /* a file being followed became shorter */
	SONDE_E_NOT_REGULAR,	       /* a FIFO, device... where a file was due */
	SONDE_E_OWNER,		       /* a file of an owner it may not come from */
	SONDE_E_EMPTY,		       /* a file that ends before its header does */
	SONDE_E_END
};

/* Text for an error code; accepts err or -err. Never NULL; the string is static. */
SONDE_API const char *sonde_strerror(int err);

#endif
