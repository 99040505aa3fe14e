#include <string.h>
#include <sonde/error.h>

static const char *const messages[SONDE_E_END - SONDE_E_BASE] = {
	[SONDE_E_FORMAT - SONDE_E_BASE] = "malformed data",
	[SONDE_E_TRUNCATED - SONDE_E_BASE] = "data ends inside a record",
	[SONDE_E_VERSION - SONDE_E_BASE] = "unsupported format version",
	[SONDE_E_MAGIC - SONDE_E_BASE] = "not a file of the expected kind (bad magic)",
	[SONDE_E_RANGE - SONDE_E_BASE] = "value out of range",
	[SONDE_E_REFERENCE - SONDE_E_BASE] = "reference to an undefined or duplicate id",
	[SONDE_E_UNSUPPORTED - SONDE_E_BASE] = "not supported",
	[SONDE_E_PROTOCOL - SONDE_E_BASE] = "protocol violation by peer",
	[SONDE_E_STATE - SONDE_E_BASE] = "operation not valid in the current state",
	[SONDE_E_EXITED - SONDE_E_BASE] = "process has exited",
	[SONDE_E_LIMIT - SONDE_E_BASE] = "limit reached",
	[SONDE_E_SHRUNK - SONDE_E_BASE] = "file shrank while being followed",
	[SONDE_E_NOT_REGULAR - SONDE_E_BASE] = "not a regular file",
	[SONDE_E_OWNER - SONDE_E_BASE] = "file owned by neither root nor the user it belongs to",
	[SONDE_E_EMPTY - SONDE_E_BASE] = "empty file (it ends before its header)",
};

const char *sonde_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err >= SONDE_E_BASE && err < SONDE_E_END)
		return messages[err - SONDE_E_BASE];
	/* strerror() returns a static string for every errno on glibc; unknown values get
	 * "Unknown error N" in a static buffer, which is fine for diagnostics. */
	return strerror(err);
}
