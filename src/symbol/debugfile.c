#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sonde/log.h>

#include "symbol/debugfile.h"

static const char default_debug_dirs[] = "/usr/lib/debug";

static int same_build_id(const struct elfimg *img, const uint8_t *id, size_t len)
{
	return img->build_id_len == len && !memcmp(img->build_id, id, len);
}

static int try_build_id_path(const char *path, const struct debugfile_query *q, struct elfimg *out)
{
	if (sonde__elfimg_open_path(out, path, true, q->refusals) < 0)
		return -ENOENT;
	if (!same_build_id(out, q->build_id, q->build_id_len)) {
		sonde_debug("symbolize: %s has another build id", path);
		sonde__elfimg_close(out);
		return -ENOENT;
	}
	return 0;
}

static int try_link_path(const char *path, bool trusted, const struct debugfile_query *q,
			 struct elfimg *out)
{
	struct regfile_rules rules = sonde__elfimg_rules(trusted, q->refusals);
	int fd = sonde__regfile_open(path, &rules, NULL);
	uint32_t crc;
	int r = -ENOENT;

	if (fd < 0)
		return -ENOENT;
	if (sonde__elf_file_crc32(fd, &crc) == 0 && crc == q->debuglink_crc) {
		r = sonde__elfimg_open_fd(out, fd) == 0 ? 0 : -ENOENT;
		/* the CRC is the link's contract; a build id, when both have one, must agree */
		if (r == 0 && q->build_id_len && out->build_id_len &&
		    !same_build_id(out, q->build_id, q->build_id_len)) {
			sonde__elfimg_close(out);
			r = -ENOENT;
		}
	} else {
		sonde_debug("symbolize: %s: debuglink CRC mismatch", path);
	}
	close(fd);
	return r;
}

/* Calls fn on each directory of a colon-separated list until it returns 0. */
static int each_dir(const char *dirs, int (*fn)(const char *dir, size_t len, void *ctx), void *ctx)
{
	for (const char *p = dirs; *p;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		if (len && fn(p, len, ctx) == 0)
			return 0;
		p += len + (colon ? 1 : 0);
	}
	return -ENOENT;
}

struct search {
	const struct debugfile_query *q;
	struct elfimg *out;
	const char *moddir;
	size_t moddir_len;
};

static int by_build_id(const char *dir, size_t len, void *ctx)
{
	struct search *s = ctx;
	char path[4096];
	int n = snprintf(path, sizeof(path), "%.*s/.build-id/%02x/", (int)len, dir,
			 s->q->build_id[0]);

	for (size_t i = 1; i < s->q->build_id_len && n > 0 && (size_t)n + 3 < sizeof(path); i++)
		n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", s->q->build_id[i]);
	if (n <= 0 || (size_t)n + 7 > sizeof(path))
		return -ENOENT;
	strcpy(path + n, ".debug");
	return try_build_id_path(path, s->q, s->out);
}

static int by_link_global(const char *dir, size_t len, void *ctx)
{
	struct search *s = ctx;
	char path[4096];

	if (snprintf(path, sizeof(path), "%.*s%.*s/%s", (int)len, dir, (int)s->moddir_len,
		     s->moddir, s->q->debuglink) >= (int)sizeof(path))
		return -ENOENT;
	return try_link_path(path, true, s->q, s->out);
}

static int by_link(struct search *s)
{
	const struct debugfile_query *q = s->q;
	const char *slash = q->module_path ? strrchr(q->module_path, '/') : NULL;
	char path[4096];

	if (!slash || strchr(q->debuglink, '/'))
		return -ENOENT;
	s->moddir = q->module_path;
	s->moddir_len = (size_t)(slash - q->module_path);
	if (snprintf(path, sizeof(path), "%.*s/%s", (int)s->moddir_len, s->moddir, q->debuglink) <
		    (int)sizeof(path) &&
	    strcmp(path, q->module_path) != 0 && try_link_path(path, false, q, s->out) == 0)
		return 0;
	if (snprintf(path, sizeof(path), "%.*s/.debug/%s", (int)s->moddir_len, s->moddir,
		     q->debuglink) < (int)sizeof(path) &&
	    try_link_path(path, false, q, s->out) == 0)
		return 0;
	return each_dir(q->debug_dirs ? q->debug_dirs : default_debug_dirs, by_link_global, s);
}

int sonde__debugfile_find(const struct debugfile_query *q, struct elfimg *out)
{
	struct search s = {.q = q, .out = out};
	const char *dirs = q->debug_dirs ? q->debug_dirs : default_debug_dirs;

	if (q->build_id_len && each_dir(dirs, by_build_id, &s) == 0)
		return 0;
	if (q->debuglink && q->debuglink[0] && by_link(&s) == 0)
		return 0;
	return -ENOENT;
}
