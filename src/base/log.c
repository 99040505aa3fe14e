#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sonde/log.h>

#include "base/out.h"

/* The library's only mutable global state (house style): the log sink. */
static sonde_log_fn log_fn;
static void *log_ctx;
static enum sonde_log_level log_level = SONDE_LOG_WARN;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void sonde_log__set_callback(sonde_log_fn fn, void *ctx)
{
	log_fn = fn;
	log_ctx = ctx;
}

void sonde_log__set_level(enum sonde_log_level level)
{
	log_level = level;
}

enum sonde_log_level sonde_log__get_level(void)
{
	return log_level;
}

int sonde_log__parse_level(const char *name, enum sonde_log_level *out)
{
	for (int i = 0; i <= SONDE_LOG_OFF; i++) {
		if (strcmp(name, level_names[i]) == 0) {
			*out = (enum sonde_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void sonde_log(enum sonde_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (level < log_level || level >= SONDE_LOG_OFF)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* one line, whatever the peer names and paths in it hold: a control character (but a
	 * tab) is a '?', so that a producer named with a newline cannot write a line of its
	 * own into the service's log, nor an escape sequence reach a terminal */
	sonde__out_unctrl(msg);
	if (log_fn)
		log_fn(level, msg, log_ctx);
	else
		fprintf(stderr, "sonde: %s: %s\n", level_names[level], msg);
}
