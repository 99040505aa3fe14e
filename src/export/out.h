/* Buffered text output to a file descriptor, with the escaping the text exporters need.
 * Internal to libsonde.
 *
 * Errors are sticky: after the first failed write or allocation every call is a no-op
 * and out_close() returns the error, so exporters check once at the end.
 */
#ifndef SONDE_EXPORT_OUT_H
#define SONDE_EXPORT_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct out {
	int fd;
	int err;
	struct buf b;
};

void out_init(struct out *o, int fd);
void out_write(struct out *o, const void *p, size_t n);
void out_puts(struct out *o, const char *s);
void out_putc(struct out *o, char c);
void out_u64(struct out *o, uint64_t v);
void out_printf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as the body of a JSON string (no quotes): escapes, and invalid UTF-8 as U+FFFD. */
void out_json_str(struct out *o, const char *s);
/* s as XML character data or attribute text: escapes markup, drops characters XML 1.0
 * forbids, and writes invalid UTF-8 as U+FFFD. At most max_chars characters when
 * max_chars > 0 (then ".." marks the cut). */
void out_xml_str(struct out *o, const char *s, size_t max_chars);
/* Flushes, frees the buffer, and returns 0 or the first error (-errno). */
int out_close(struct out *o);

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one. */
size_t utf8_seq_len(const unsigned char *s);

#endif
