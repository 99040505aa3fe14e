/* The binary pages of a tracefs ring buffer. See ftrace_page.h for the layout. */
#include "probes/ftrace_page.h"

#include <string.h>

#include <sonde/error.h>

#include "perf/ftrace_format.h"

enum {
	TYPE_PADDING = 29,
	TYPE_TIME_EXTEND = 30,
	TYPE_TIME_STAMP = 31,
	TYPE_DATA_MAX = 28,
	TS_SHIFT = 27,
};

/* Flags in the high bits of commit (ring_buffer.c); the low bits are the data length. */
#define RB_MISSED_EVENTS (1UL << 31)
#define RB_MISSED_STORED (1UL << 30)
#define RB_COMMIT_MASK	 ((1UL << 30) - 1)
/* rb_fix_abs_ts: the 5 top bits of an absolute time come from the page. */
#define TS_MSB (0xf8ULL << 56)

void sonde__ftrace_page_layout_default(struct ftrace_page_layout *l)
{
	*l = (struct ftrace_page_layout){
		.timestamp_offset = 0,
		.timestamp_size = 8,
		.commit_offset = 8,
		.commit_size = 8,
		.data_offset = 16,
		.page_size = 4096,
	};
}

int sonde__ftrace_page_layout_parse(const char *buf, size_t len, struct ftrace_page_layout *l)
{
	struct ftrace_page_layout n = {0};
	bool ts = false, commit = false, data = false;
	const char *p = buf, *end = buf + len;

	sonde__ftrace_page_layout_default(l);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		struct ftrace_field f;
		if (sonde__ftrace_field_parse(p, (size_t)(e - p), &f) == 0) {
			if (!strcmp(f.name, "timestamp")) {
				n.timestamp_offset = f.offset, n.timestamp_size = f.size, ts = true;
			} else if (!strcmp(f.name, "commit")) {
				n.commit_offset = f.offset, n.commit_size = f.size, commit = true;
			} else if (!strcmp(f.name, "data")) {
				n.data_offset = f.offset;
				n.page_size = (uint32_t)f.offset + f.size;
				data = true;
			}
		}
		p = nl ? nl + 1 : end;
	}
	if (!ts || !commit || !data || n.timestamp_size != 8 ||
	    (n.commit_size != 4 && n.commit_size != 8) || n.timestamp_offset + 8u > n.data_offset ||
	    n.commit_offset + n.commit_size > n.data_offset || n.page_size <= n.data_offset)
		return -SONDE_E_FORMAT;
	*l = n;
	return 0;
}

static bool has_line(const char *buf, size_t len, const char *needle)
{
	return memmem(buf, len, needle, strlen(needle)) != NULL;
}

int sonde__ftrace_header_event_check(const char *buf, size_t len)
{
	/* The file's spacing varies between kernels only in "time_stamp : type"; look for the
	 * values rather than the layout. */
	if (!has_line(buf, len, "type_len    :    5 bits") ||
	    !has_line(buf, len, "time_delta  :   27 bits") || !has_line(buf, len, "type == 29") ||
	    !has_line(buf, len, "type == 30") || !has_line(buf, len, "type == 31") ||
	    !has_line(buf, len, "type_len  == 28"))
		return -SONDE_E_UNSUPPORTED;
	return 0;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

int sonde__ftrace_page_header(const struct ftrace_page_layout *l, const void *buf, size_t len,
		       struct ftrace_page_info *info)
{
	const uint8_t *p = buf;

	memset(info, 0, sizeof(*info));
	if (len < l->data_offset)
		return -SONDE_E_TRUNCATED;
	info->timestamp = rd64(p + l->timestamp_offset);
	uint64_t commit =
		l->commit_size == 8 ? rd64(p + l->commit_offset) : rd32(p + l->commit_offset);
	info->data_len = (uint32_t)(commit & RB_COMMIT_MASK);
	info->lost_events = (commit & RB_MISSED_EVENTS) != 0;
	if (info->data_len > len - l->data_offset)
		return -SONDE_E_TRUNCATED;
	/* The count, an unsigned long (commit_size bytes, local_t's width), follows the data. */
	size_t after = (size_t)l->data_offset + info->data_len;
	if ((commit & RB_MISSED_STORED) && len - after >= l->commit_size) {
		info->lost_count_set = true;
		info->lost_count = l->commit_size == 8 ? rd64(p + after) : rd32(p + after);
	}
	return 0;
}

int sonde__ftrace_page_parse(const struct ftrace_page_layout *l, const void *buf, size_t len,
		      struct ftrace_page_info *info, ftrace_event_fn fn, void *ctx)
{
	const uint8_t *page = buf;
	int r = sonde__ftrace_page_header(l, page, len, info), n = 0;

	if (r < 0)
		return r;
	const uint8_t *p = page + l->data_offset, *end = p + info->data_len;
	uint64_t ts = info->timestamp;
	while (p < end) {
		if (end - p < 4)
			return -SONDE_E_FORMAT;
		uint32_t h = rd32(p);
		unsigned type_len = h & 31;
		uint32_t delta = h >> 5;
		size_t avail = (size_t)(end - p) - 4;
		const uint8_t *arr = p + 4;
		if (type_len == TYPE_PADDING) {
			if (delta == 0)
				break; /* the rest of the page is unused */
			if (avail < 4 || rd32(arr) > avail)
				return -SONDE_E_FORMAT;
			p = arr + rd32(arr);
			continue;
		}
		if (type_len == TYPE_TIME_EXTEND || type_len == TYPE_TIME_STAMP) {
			if (avail < 4)
				return -SONDE_E_FORMAT;
			uint64_t v = ((uint64_t)rd32(arr) << TS_SHIFT) | delta;
			if (type_len == TYPE_TIME_EXTEND) {
				ts += v;
			} else {
				ts = v | (info->timestamp & TS_MSB);
				if (ts < info->timestamp && (info->timestamp & TS_MSB))
					ts += 1ULL << 59;
			}
			p = arr + 4;
			continue;
		}
		const uint8_t *data;
		size_t dlen;
		if (type_len == 0) {
			if (avail < 4)
				return -SONDE_E_FORMAT;
			uint32_t a0 = rd32(arr);
			/* array[0] counts itself: the payload is a0 - 4 bytes after it. */
			if (a0 < 4 || a0 > avail)
				return -SONDE_E_FORMAT;
			data = arr + 4;
			dlen = a0 - 4;
		} else {
			dlen = (size_t)type_len * 4;
			if (dlen > avail)
				return -SONDE_E_FORMAT;
			data = arr;
		}
		ts += delta;
		if (fn) {
			r = fn(ctx, ts, data, dlen);
			if (r)
				return r;
		}
		n++;
		p = data + dlen;
	}
	return n;
}
