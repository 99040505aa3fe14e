#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/array.h"
#include "symbol/kallsyms.h"

enum { KSYM_LAST_REACH = 1 << 20 };

static const char kernel_module[] = "[kernel.kallsyms]";

/* The next blank-separated field of line[*pos..len). */
static size_t field(const char *line, size_t len, size_t *pos, const char **f)
{
	size_t i = *pos, start;

	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	start = i;
	while (i < len && line[i] != ' ' && line[i] != '\t')
		i++;
	*f = line + start;
	*pos = i;
	return i - start;
}

static int parse_hex(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (!n || n > 16)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int d = s[i] >= '0' && s[i] <= '9'   ? s[i] - '0'
			: s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10
			: s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 10
						     : -1;
		if (d < 0)
			return -1;
		x = (x << 4) | (uint64_t)d;
	}
	*v = x;
	return 0;
}

static int add_sym(struct kallsyms *k, uint64_t addr, const char *name, size_t name_len,
		   const char *mod, size_t mod_len)
{
	if (sonde__array_grow(&k->v, &k->cap, k->n + 1, sizeof(*k->v), 4096) < 0)
		return -ENOMEM;
	struct ksym *s = &k->v[k->n];
	s->addr = addr;
	s->name = sonde__strpool_addn(&k->pool, name, name_len);
	/* module names repeat: consecutive symbols of one module share the string */
	if (!mod_len)
		s->module = kernel_module;
	else if (k->n && k->v[k->n - 1].module != kernel_module &&
		 strlen(k->v[k->n - 1].module) == mod_len &&
		 !memcmp(k->v[k->n - 1].module, mod, mod_len))
		s->module = k->v[k->n - 1].module;
	else
		s->module = sonde__strpool_addn(&k->pool, mod, mod_len);
	if (!s->name || !s->module)
		return -ENOMEM;
	k->n++;
	return 0;
}

static int parse_line(struct kallsyms *k, const char *line, size_t len)
{
	const char *f_addr, *f_type, *f_name, *f_mod;
	size_t pos = 0, n_addr, n_type, n_name, n_mod;
	uint64_t addr;

	n_addr = field(line, len, &pos, &f_addr);
	n_type = field(line, len, &pos, &f_type);
	n_name = field(line, len, &pos, &f_name);
	n_mod = field(line, len, &pos, &f_mod);
	if (n_type != 1 || !n_name || parse_hex(f_addr, n_addr, &addr) < 0 || !addr)
		return 0;
	if (f_type[0] != 't' && f_type[0] != 'T')
		return 0;
	if (n_mod < 2 || f_mod[0] != '[' || f_mod[n_mod - 1] != ']')
		n_mod = 0;
	return add_sym(k, addr, f_name, n_name, f_mod, n_mod);
}

static int ksym_cmp(const void *pa, const void *pb)
{
	const struct ksym *a = pa, *b = pb;

	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return strcmp(a->name, b->name);
}

int sonde__kallsyms_parse(struct kallsyms *k, const char *buf, size_t len)
{
	size_t pos = 0;

	while (pos < len) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - buf) : len;
		if (parse_line(k, buf + pos, end - pos) < 0)
			return -ENOMEM;
		pos = end + 1;
	}
	if (k->n > 1)
		qsort(k->v, k->n, sizeof(*k->v), ksym_cmp);
	return 0;
}

int sonde__kallsyms_load(struct kallsyms *k, const char *path, struct regfile_refusals *refusals)
{
	/* The path is the caller's choice (an option, default /proc/kallsyms): trusted. */
	struct regfile_rules rules = {
		.what = "kallsyms",
		.max_size = KALLSYMS_MAX_BYTES,
		.follow = true,
		.refusals = refusals,
	};
	int fd = sonde__regfile_open(path, &rules, NULL);
	size_t len = 0, cap = 1 << 20;
	char *buf;
	int r = -ENOMEM;

	if (fd < 0)
		return fd;
	buf = sonde__malloc(cap);
	/* /proc files report size 0: read until the end, or the cap */
	for (ssize_t got; buf; len += (size_t)got) {
		if (len == cap) {
			char *b = cap < KALLSYMS_MAX_BYTES ? sonde__realloc(buf, cap * 2) : NULL;
			if (!b) {
				r = cap < KALLSYMS_MAX_BYTES ? -ENOMEM : -EFBIG;
				goto out;
			}
			buf = b;
			cap *= 2;
		}
		got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			got = 0;
		else if (got <= 0)
			break;
	}
	if (buf)
		r = sonde__kallsyms_parse(k, buf, len);
out:
	sonde__free(buf);
	close(fd);
	return r;
}

const struct ksym *sonde__kallsyms_find(const struct kallsyms *k, uint64_t addr)
{
	size_t lo = 0, hi = k->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (k->v[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	if (lo == k->n && addr - k->v[lo - 1].addr >= KSYM_LAST_REACH)
		return NULL;
	return &k->v[lo - 1];
}

void sonde__kallsyms_free(struct kallsyms *k)
{
	if (!k)
		return;
	sonde__free(k->v);
	sonde__strpool_free(&k->pool);
	memset(k, 0, sizeof(*k));
}
