#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sonde/error.h>

#include "base/buf.h"
#include "proc/maps.h"
#include "proc/proc.h"

static bool hex_field(const char **p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;
	int digits = 0;

	while (s < end) {
		char c = *s;
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			break;
		if (++digits > 16)
			return false;
		v = v << 4 | (uint64_t)d;
		s++;
	}
	*p = s;
	*out = v;
	return digits > 0;
}

static bool dec_field(const char **p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	while (s < end && *s >= '0' && *s <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
		s++;
	}
	if (s == *p)
		return false;
	*p = s;
	*out = v;
	return true;
}

static bool expect(const char **p, const char *end, char c)
{
	if (*p >= end || **p != c)
		return false;
	(*p)++;
	return true;
}

static bool parse_perms(const char **p, const char *end, struct proc_map *m)
{
	const char *s = *p;

	if (end - s < 4)
		return false;
	if ((s[0] != 'r' && s[0] != '-') || (s[1] != 'w' && s[1] != '-') ||
	    (s[2] != 'x' && s[2] != '-') || (s[3] != 'p' && s[3] != 's'))
		return false;
	m->read = s[0] == 'r';
	m->write = s[1] == 'w';
	m->exec = s[2] == 'x';
	m->shared = s[3] == 's';
	*p = s + 4;
	return true;
}

static bool parse_line(const char *s, const char *end, struct proc_map *m)
{
	uint64_t maj, min;

	if (!hex_field(&s, end, &m->start) || !expect(&s, end, '-') ||
	    !hex_field(&s, end, &m->end) || !expect(&s, end, ' ') || !parse_perms(&s, end, m) ||
	    !expect(&s, end, ' ') || !hex_field(&s, end, &m->pgoff) || !expect(&s, end, ' ') ||
	    !hex_field(&s, end, &maj) || !expect(&s, end, ':') || !hex_field(&s, end, &min) ||
	    !expect(&s, end, ' ') || !dec_field(&s, end, &m->inode))
		return false;
	if (m->end < m->start || maj > UINT32_MAX || min > UINT32_MAX)
		return false;
	m->dev_major = (uint32_t)maj;
	m->dev_minor = (uint32_t)min;
	while (s < end && *s == ' ')
		s++;
	m->path = s;
	m->path_len = (size_t)(end - s);
	return true;
}

int sonde__proc_maps_parse(const char *buf, size_t len, proc_map_fn fn, void *ctx)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end;
		struct proc_map m = {0};

		if (line_end > p) {
			if (!parse_line(p, line_end, &m))
				return -SONDE_E_FORMAT;
			int r = fn(ctx, &m);
			if (r)
				return r;
		}
		p = nl ? nl + 1 : end;
	}
	return 0;
}

bool sonde__proc_map_is_code(const struct proc_map *m)
{
	static const char vsyscall[] = "[vsyscall]";

	/* the whole path: a prefix compare of an anonymous mapping's empty one matched */
	return m->exec && !(m->path_len == sizeof(vsyscall) - 1 &&
			    memcmp(m->path, vsyscall, sizeof(vsyscall) - 1) == 0);
}

int sonde__proc_maps_read(pid_t pid, proc_map_fn fn, void *ctx)
{
	char path[64];
	struct buf b = BUF_INIT;
	pid_t tid;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	int err = sonde__proc_read_file(path, &b);
	/* Empty: a main thread that ended first has no memory left to show; a live thread of
	 * the process shows its maps. */
	if (!err && b.len == 0 && sonde__proc_live_task(pid, &tid) == 0 && tid != pid) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d/maps", (int)pid, (int)tid);
		err = sonde__proc_read_file(path, &b);
	}
	if (!err)
		err = sonde__proc_maps_parse((const char *)b.data, b.len, fn, ctx);
	sonde__buf_free(&b);
	return err;
}
