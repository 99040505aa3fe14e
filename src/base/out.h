/* Buffered text output to a file descriptor, with the escaping the text exporters need.
 * Internal to libsonde.
 *
 * Errors are sticky: after the first failed write or allocation every call is a no-op
 * and sonde__out_close() returns the error, so exporters check once at the end.
 */
#ifndef SONDE_BASE_OUT_H
#define SONDE_BASE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct out {
	int fd;
	int err;
	struct buf b;
};

void sonde__out_init(struct out *o, int fd);
void sonde__out_write(struct out *o, const void *p, size_t n);
void sonde__out_puts(struct out *o, const char *s);
void sonde__out_putc(struct out *o, char c);
void sonde__out_u64(struct out *o, uint64_t v);
void sonde__out_printf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as the body of a JSON string (no quotes): escapes, and invalid UTF-8 as U+FFFD. */
void sonde__out_json_str(struct out *o, const char *s);
/* s as XML character data or attribute text: escapes markup, drops characters XML 1.0
 * forbids, and writes invalid UTF-8 as U+FFFD. At most max_chars characters when
 * max_chars > 0 (then ".." marks the cut). */
void sonde__out_xml_str(struct out *o, const char *s, size_t max_chars);
/* Flushes, frees the buffer, and returns 0 or the first error (-errno). */
int sonde__out_close(struct out *o);

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one. */
size_t sonde__utf8_seq_len(const unsigned char *s);

/* Whether c may not be printed as it is in a name or a message line: a control character
 * (but a tab, only white space) or DEL. Names come from the recorded programs and the
 * service's peers: an escape sequence would reach a terminal, a newline forge a line. */
static inline bool sonde__out_is_control(char c)
{
	return ((unsigned char)c < 0x20 && c && c != '\t') || c == 0x7f;
}

/* s with each such character as '?' (as ps shows them), in place. */
static inline void sonde__out_unctrl(char *s)
{
	for (; *s; s++)
		if (sonde__out_is_control(*s))
			*s = '?';
}

#endif
