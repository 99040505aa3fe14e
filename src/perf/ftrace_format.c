/* tracefs event format files into field descriptors. See ftrace_format.h. */
#include "base/alloc.h"
#include "perf/ftrace_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

#include "base/array.h"

/* Record offsets and sizes are u16 in the kernel (struct ftrace_event_field uses int, but
 * a record is at most a page). */
enum { FIELD_LIMIT = 65535 };

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/* Finds "key:" in [p, end) and parses the unsigned decimal after it up to ';'. */
static bool parse_attr(const char *p, const char *end, const char *key, unsigned long *out)
{
	size_t kl = strlen(key);

	for (const char *q = p; q + kl <= end; q++) {
		if (memcmp(q, key, kl) != 0 || (q > p && is_ident(q[-1])))
			continue;
		q += kl;
		unsigned long v = 0;
		int digits = 0;
		while (q < end && *q >= '0' && *q <= '9' && digits < 10) {
			v = v * 10 + (unsigned long)(*q - '0');
			q++, digits++;
		}
		if (digits == 0 || digits == 10 || q >= end || *q != ';')
			return false;
		*out = v;
		return true;
	}
	return false;
}

static void copy_trimmed(char *dst, size_t cap, const char *s, const char *e)
{
	while (s < e && is_blank(*s))
		s++;
	while (e > s && is_blank(e[-1]))
		e--;
	size_t n = (size_t)(e - s);
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

static enum ftrace_field_kind classify(const struct ftrace_field *f, bool array)
{
	bool dl = !strncmp(f->type, "__data_loc", 10), rl = !strncmp(f->type, "__rel_loc", 9);

	if (dl || rl) {
		if (strstr(f->type, "char"))
			return dl ? FTRACE_FIELD_DATA_LOC_STR : FTRACE_FIELD_REL_LOC_STR;
		return FTRACE_FIELD_DATA_LOC;
	}
	if (array) {
		/* char, unsigned char, u8 arrays hold names (comm[16] and the like). */
		if (!strcmp(f->type, "char") || !strcmp(f->type, "const char"))
			return FTRACE_FIELD_CHARS;
		return FTRACE_FIELD_ARRAY;
	}
	if (f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8)
		return FTRACE_FIELD_INT;
	return FTRACE_FIELD_OTHER;
}

int sonde__ftrace_field_parse(const char *line, size_t len, struct ftrace_field *out)
{
	const char *p = line, *end = line + len;
	unsigned long off, size, sgn = 0;

	memset(out, 0, sizeof(*out));
	while (p < end && is_blank(*p))
		p++;
	if ((size_t)(end - p) < 6 || memcmp(p, "field:", 6) != 0)
		return -SONDE_E_FORMAT;
	p += 6;
	const char *decl_end = memchr(p, ';', (size_t)(end - p));
	if (!decl_end)
		return -SONDE_E_FORMAT;
	/* The declaration ends with the name, maybe followed by [N] or []. */
	const char *e = decl_end;
	while (e > p && is_blank(e[-1]))
		e--;
	bool array = false;
	if (e > p && e[-1] == ']') {
		const char *lb = e - 1;
		while (lb > p && *lb != '[')
			lb--;
		if (*lb != '[')
			return -SONDE_E_FORMAT;
		array = true;
		e = lb;
	}
	const char *ns = e;
	while (ns > p && is_ident(ns[-1]))
		ns--;
	if (ns == e)
		return -SONDE_E_FORMAT;
	copy_trimmed(out->name, sizeof(out->name), ns, e);
	copy_trimmed(out->type, sizeof(out->type), p, ns);
	/* "__data_loc char[] name": the [] belongs to the type. */
	size_t tl = strlen(out->type);
	if (tl >= 2 && !strcmp(out->type + tl - 2, "[]")) {
		tl -= 2;
		while (tl > 0 && is_blank(out->type[tl - 1]))
			tl--;
		out->type[tl] = '\0';
	}
	if (!parse_attr(decl_end, end, "offset:", &off) ||
	    !parse_attr(decl_end, end, "size:", &size))
		return -SONDE_E_FORMAT;
	parse_attr(decl_end, end, "signed:", &sgn); /* absent in old kernels' header_page */
	if (off > FIELD_LIMIT || size > FIELD_LIMIT || off + size > FIELD_LIMIT)
		return -SONDE_E_FORMAT;
	out->offset = (uint16_t)off;
	out->size = (uint16_t)size;
	out->is_signed = sgn != 0;
	out->common = !strncmp(out->name, "common_", 7);
	out->kind = classify(out, array);
	return 0;
}

/* Parses "key: value" at the start of [p, e) into dst; false if the key differs. */
static bool header_value(const char *p, const char *e, const char *key, char *dst, size_t cap)
{
	size_t kl = strlen(key);

	if ((size_t)(e - p) < kl || memcmp(p, key, kl) != 0)
		return false;
	copy_trimmed(dst, cap, p + kl, e);
	return true;
}

static int parse_line(struct ftrace_format *f, size_t *cap, const char *p, const char *e,
		      bool *have_id)
{
	char tmp[32];

	if (header_value(p, e, "name:", f->name, sizeof(f->name)))
		return 0;
	if (header_value(p, e, "ID:", tmp, sizeof(tmp))) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(tmp, &end, 10);
		if (errno || end == tmp || *end || v > UINT16_MAX)
			return -SONDE_E_FORMAT;
		f->id = (uint32_t)v;
		*have_id = true;
		return 0;
	}
	const char *q = p;
	while (q < e && is_blank(*q))
		q++;
	if ((size_t)(e - q) < 6 || memcmp(q, "field:", 6) != 0)
		return 0; /* "format:", blank lines, "print fmt:" */
	struct ftrace_field fd;
	int r = sonde__ftrace_field_parse(q, (size_t)(e - q), &fd);
	if (r < 0)
		return r;
	if (sonde__array_grow(&f->fields, cap, f->nfields + 1, sizeof(*f->fields), 16) < 0)
		return -ENOMEM;
	f->fields[f->nfields++] = fd;
	if ((uint32_t)fd.offset + fd.size > f->record_size)
		f->record_size = (uint16_t)(fd.offset + fd.size);
	return 0;
}

int sonde__ftrace_format_parse(const char *buf, size_t len, struct ftrace_format *f)
{
	const char *p = buf, *end = buf + len;
	size_t cap = 0;
	bool have_id = false;
	int r = 0;

	memset(f, 0, sizeof(*f));
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		/* The print fmt line is last and may be long; nothing after it matters. */
		if ((size_t)(e - p) >= 10 && !memcmp(p, "print fmt:", 10))
			break;
		r = parse_line(f, &cap, p, e, &have_id);
		if (r < 0)
			goto fail;
		p = nl ? nl + 1 : end;
	}
	if (!f->name[0] || !have_id || f->nfields == 0) {
		r = -SONDE_E_FORMAT;
		goto fail;
	}
	return 0;
fail:
	sonde__ftrace_format_free(f);
	return r;
}

void sonde__ftrace_format_free(struct ftrace_format *f)
{
	if (!f)
		return;
	sonde__free(f->fields);
	memset(f, 0, sizeof(*f));
}

const struct ftrace_field *sonde__ftrace_format_field(const struct ftrace_format *f, const char *name)
{
	for (size_t i = 0; i < f->nfields; i++)
		if (!strcmp(f->fields[i].name, name))
			return &f->fields[i];
	return NULL;
}

bool sonde__ftrace_field_int(const struct ftrace_field *fd, const uint8_t *rec, size_t len, int64_t *out)
{
	if (fd->kind != FTRACE_FIELD_INT || (size_t)fd->offset + fd->size > len)
		return false;
	const uint8_t *p = rec + fd->offset;
	switch (fd->size) {
	case 1: {
		uint8_t v = p[0];
		*out = fd->is_signed ? (int64_t)(int8_t)v : (int64_t)v;
		return true;
	}
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		*out = fd->is_signed ? (int64_t)(int16_t)v : (int64_t)v;
		return true;
	}
	case 4: {
		uint32_t v;
		memcpy(&v, p, 4);
		*out = fd->is_signed ? (int64_t)(int32_t)v : (int64_t)v;
		return true;
	}
	default: {
		uint64_t v;
		memcpy(&v, p, 8);
		*out = (int64_t)v;
		return true;
	}
	}
}

bool sonde__ftrace_field_str(const struct ftrace_field *fd, const uint8_t *rec, size_t len, const char **s,
		      size_t *n)
{
	size_t start, max;

	if ((size_t)fd->offset + fd->size > len)
		return false;
	if (fd->kind == FTRACE_FIELD_CHARS) {
		start = fd->offset;
		max = fd->size;
	} else if (fd->kind == FTRACE_FIELD_DATA_LOC_STR || fd->kind == FTRACE_FIELD_REL_LOC_STR) {
		uint32_t loc;
		if (fd->size != 4)
			return false;
		memcpy(&loc, rec + fd->offset, 4);
		start = loc & 0xffff;
		max = loc >> 16;
		if (fd->kind == FTRACE_FIELD_REL_LOC_STR)
			start += (size_t)fd->offset + fd->size;
		if (start > len || max > len - start)
			return false;
	} else {
		return false;
	}
	const char *p = (const char *)rec + start;
	const char *nul = memchr(p, '\0', max);
	*s = p;
	*n = nul ? (size_t)(nul - p) : max;
	return true;
}
