/* Library logging.
 *
 * The library never prints to stdout. Diagnostics go through one process-wide callback
 * (the only mutable global state the library has); by default messages at or above
 * SONDE_LOG_WARN are written to stderr as "sonde: LEVEL: message".
 */
#ifndef SONDE_LOG_H
#define SONDE_LOG_H

#include <stdarg.h>
#include <sonde/export.h>

enum sonde_log_level {
	SONDE_LOG_DEBUG,
	SONDE_LOG_INFO,
	SONDE_LOG_WARN,
	SONDE_LOG_ERROR,
	SONDE_LOG_OFF,
};

typedef void (*sonde_log_fn)(enum sonde_log_level level, const char *msg, void *ctx);

/* Replace the log callback (NULL restores the default) and its context. */
SONDE_API void sonde_log__set_callback(sonde_log_fn fn, void *ctx);
/* Messages below level are discarded before formatting. */
SONDE_API void sonde_log__set_level(enum sonde_log_level level);
SONDE_API enum sonde_log_level sonde_log__get_level(void);
/* Parse "debug", "info", "warn", "error" or "off"; returns 0 or -EINVAL. */
SONDE_API int sonde_log__parse_level(const char *name, enum sonde_log_level *out);

SONDE_API void sonde_log(enum sonde_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define sonde_debug(...) sonde_log(SONDE_LOG_DEBUG, __VA_ARGS__)
#define sonde_info(...)	 sonde_log(SONDE_LOG_INFO, __VA_ARGS__)
#define sonde_warn(...)	 sonde_log(SONDE_LOG_WARN, __VA_ARGS__)
#define sonde_error(...) sonde_log(SONDE_LOG_ERROR, __VA_ARGS__)

#endif
