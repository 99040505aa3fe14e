#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/out.h"

enum { OUT_FLUSH_AT = 1 << 16 };

void sonde__out_init(struct out *o, int fd)
{
	*o = (struct out){.fd = fd, .b = BUF_INIT};
}

static void flush(struct out *o)
{
	size_t done = 0;

	if (o->err)
		return;
	while (done < o->b.len) {
		ssize_t n = write(o->fd, o->b.data + done, o->b.len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			o->err = n < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)n;
	}
	sonde__buf_reset(&o->b);
}

static void check(struct out *o)
{
	if (buf_error(&o->b) && !o->err)
		o->err = -ENOMEM;
	if (o->b.len >= OUT_FLUSH_AT)
		flush(o);
}

void sonde__out_write(struct out *o, const void *p, size_t n)
{
	if (o->err)
		return;
	sonde__buf_append(&o->b, p, n);
	check(o);
}

void sonde__out_puts(struct out *o, const char *s)
{
	sonde__out_write(o, s, strlen(s));
}

void sonde__out_putc(struct out *o, char c)
{
	if (o->err)
		return;
	buf_put_u8(&o->b, (uint8_t)c);
	check(o);
}

void sonde__out_u64(struct out *o, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	sonde__out_write(o, tmp + i, sizeof(tmp) - i);
}

void sonde__out_printf(struct out *o, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(tmp)) {
		sonde__out_write(o, tmp, (size_t)n);
		return;
	}
	char *big = sonde__buf_extend(&o->b, (size_t)n + 1);
	if (!big) {
		check(o);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	o->b.len--; /* drop the NUL */
	check(o);
}

size_t sonde__utf8_seq_len(const unsigned char *s)
{
	unsigned c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return (s[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c >= 0xe0 && c <= 0xef) {
		/* no overlong forms (e0 80..9f) and no surrogates (ed a0..bf) */
		if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return 0;
		if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))
			return 0;
		return 3;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
			return 0;
		if ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
			return 0;
		return 4;
	}
	return 0;
}

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

void sonde__out_json_str(struct out *o, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		size_t n = sonde__utf8_seq_len(s);
		if (n == 0) {
			sonde__out_write(o, replacement, 3);
			s++;
		} else if (*s == '"' || *s == '\\') {
			sonde__out_putc(o, '\\');
			sonde__out_putc(o, (char)*s++);
		} else if (*s < 0x20) {
			static const char esc[] = "btn\0fr";
			if (*s >= 8 && *s <= 13 && *s != 11)
				sonde__out_printf(o, "\\%c", esc[*s - 8]);
			else
				sonde__out_printf(o, "\\u%04x", *s);
			s++;
		} else {
			sonde__out_write(o, s, n);
			s += n;
		}
	}
}

void sonde__out_xml_str(struct out *o, const char *str, size_t max_chars)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t chars = 0;

	while (*s) {
		if (max_chars && ++chars > max_chars) {
			sonde__out_puts(o, "..");
			return;
		}
		size_t n = sonde__utf8_seq_len(s);
		if (n == 0 || (n == 3 && s[0] == 0xef && s[1] == 0xbf && s[2] >= 0xbe)) {
			/* invalid bytes, or U+FFFE/U+FFFF which XML forbids */
			sonde__out_write(o, replacement, 3);
			s += n ? n : 1;
			continue;
		}
		switch (*s) {
		case '&':
			sonde__out_puts(o, "&amp;");
			break;
		case '<':
			sonde__out_puts(o, "&lt;");
			break;
		case '>':
			sonde__out_puts(o, "&gt;");
			break;
		case '"':
			sonde__out_puts(o, "&quot;");
			break;
		case '\'':
			sonde__out_puts(o, "&apos;");
			break;
		case '\t':
		case '\n':
		case '\r':
			sonde__out_putc(o, ' ');
			break;
		default:
			if (*s < 0x20)
				sonde__out_putc(o, '?');
			else
				sonde__out_write(o, s, n);
		}
		s += n;
	}
}

int sonde__out_close(struct out *o)
{
	if (!o->err && buf_error(&o->b))
		o->err = -ENOMEM;
	flush(o);
	sonde__buf_free(&o->b);
	return o->err;
}
