/* The symbolizer: module cache and lookup order (include/sonde/symbolize.h).
 *
 * Every distinct module identity (path plus build id, or path plus dev and inode) gets one
 * struct sym_mod, loaded on its first lookup: the ELF image is opened and mapped, its
 * symbols sorted. Later lookups are a hash of the identity and a binary search, with no
 * allocation. Modules live until the symbolizer is freed, because the names handed out
 * point into their images and string pools.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/spool.h>
#include <sonde/symbolize.h>

#include "symbol/elfimg.h"
#include "symbol/strpool.h"
#include "symbol/symtab.h"
#include "symbol/u64map.h"

struct sym_mod {
	struct sym_mod *next; /* hash chain */
	uint64_t hash;
	uint64_t dev, inode;
	uint8_t build_id[ELFIMG_MAX_BUILD_ID];
	size_t build_id_len;
	const char *path; /* pool copy; also the frames' module */
	const char *base; /* basename of path, for "base+0xoffset" */
	int loaded;
	int have_img;
	struct elfimg img;
	struct symtab syms;
	uint8_t sym_origin;
	struct u64map fallback; /* offset -> "base+0xoffset", so repeats do not allocate */
};

struct sonde_symbolizer {
	struct sonde_symbolizer_opts opts;
	struct strpool pool;
	struct sym_mod **buckets;
	size_t n_buckets, n_mods;
	struct u64map raw_names; /* addr -> "0xaddr" */
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

static uint64_t mod_hash(const struct sonde_sym_module *m)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const char *path = m->path ? m->path : "";

	h = fnv1a(h, path, strlen(path));
	if (m->build_id_len)
		return fnv1a(h, m->build_id, m->build_id_len);
	h = fnv1a(h, &m->dev, sizeof(m->dev));
	return fnv1a(h, &m->inode, sizeof(m->inode));
}

static int mod_matches(const struct sym_mod *sm, uint64_t h, const struct sonde_sym_module *m)
{
	size_t id_len =
		m->build_id_len > ELFIMG_MAX_BUILD_ID ? ELFIMG_MAX_BUILD_ID : m->build_id_len;

	if (sm->hash != h || strcmp(sm->path, m->path ? m->path : ""))
		return 0;
	if (id_len || sm->build_id_len)
		return id_len == sm->build_id_len && !memcmp(sm->build_id, m->build_id, id_len);
	return sm->dev == m->dev && sm->inode == m->inode;
}

static int symbolizer_grow(struct sonde_symbolizer *s)
{
	size_t n = s->n_buckets ? s->n_buckets * 2 : 64;
	struct sym_mod **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_buckets; i++) {
		for (struct sym_mod *sm = s->buckets[i], *next; sm; sm = next) {
			next = sm->next;
			sm->next = b[sm->hash & (n - 1)];
			b[sm->hash & (n - 1)] = sm;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->n_buckets = n;
	return 0;
}

static struct sym_mod *mod_new(struct sonde_symbolizer *s, uint64_t h,
			       const struct sonde_sym_module *m)
{
	struct sym_mod *sm;
	const char *slash;

	if (s->n_mods >= s->n_buckets && symbolizer_grow(s) < 0)
		return NULL;
	sm = calloc(1, sizeof(*sm));
	if (!sm)
		return NULL;
	sm->hash = h;
	sm->dev = m->dev;
	sm->inode = m->inode;
	sm->build_id_len =
		m->build_id_len > ELFIMG_MAX_BUILD_ID ? ELFIMG_MAX_BUILD_ID : m->build_id_len;
	if (sm->build_id_len)
		memcpy(sm->build_id, m->build_id, sm->build_id_len);
	sm->path = strpool_add(&s->pool, m->path ? m->path : "");
	if (!sm->path) {
		free(sm);
		return NULL;
	}
	slash = strrchr(sm->path, '/');
	sm->base = slash ? slash + 1 : sm->path;
	sm->next = s->buckets[h & (s->n_buckets - 1)];
	s->buckets[h & (s->n_buckets - 1)] = sm;
	s->n_mods++;
	return sm;
}

static struct sym_mod *mod_get(struct sonde_symbolizer *s, const struct sonde_sym_module *m)
{
	uint64_t h = mod_hash(m);

	if (s->n_buckets) {
		for (struct sym_mod *sm = s->buckets[h & (s->n_buckets - 1)]; sm; sm = sm->next)
			if (mod_matches(sm, h, m))
				return sm;
	}
	return mod_new(s, h, m);
}

static void mod_free(struct sym_mod *sm)
{
	symtab_free(&sm->syms);
	if (sm->have_img)
		elfimg_close(&sm->img);
	u64map_free(&sm->fallback);
	free(sm);
}

/* Whether an opened file is the image that was mapped: the build id decides when both
 * sides have one; otherwise the inode (the device number is not compared, because
 * overlay file systems report a different one in /proc/PID/maps than stat does). */
static int mod_is_image(const struct sym_mod *sm, const struct elfimg *img, int fd)
{
	struct stat st;

	if (sm->build_id_len && img->build_id_len)
		return sm->build_id_len == img->build_id_len &&
		       !memcmp(sm->build_id, img->build_id, sm->build_id_len);
	if (!sm->inode)
		return 1;
	return fstat(fd, &st) == 0 && (uint64_t)st.st_ino == sm->inode;
}

static int mod_try_path(struct sym_mod *sm, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return -errno;
	r = elfimg_open_fd(&sm->img, fd);
	if (r == 0 && !mod_is_image(sm, &sm->img, fd)) {
		sonde_debug("symbolize: %s is not the mapped image (replaced?)", path);
		elfimg_close(&sm->img);
		r = -ESTALE;
	}
	close(fd);
	if (r == 0)
		sm->have_img = 1;
	return r;
}

static void mod_open_image(struct sym_mod *sm, uint32_t pid)
{
	char buf[4096];
	size_t n = strlen(sm->path);
	static const char deleted[] = " (deleted)";

	if (sm->path[0] != '/')
		return;
	if (mod_try_path(sm, sm->path) == 0)
		return;
	/* A path from another mount namespace is reachable through the process's root. */
	if (pid &&
	    snprintf(buf, sizeof(buf), "/proc/%" PRIu32 "/root%s", pid, sm->path) <
		    (int)sizeof(buf) &&
	    mod_try_path(sm, buf) == 0)
		return;
	if (n > sizeof(deleted) - 1 && !strcmp(sm->path + n - (sizeof(deleted) - 1), deleted) &&
	    n < sizeof(buf)) {
		memcpy(buf, sm->path, n - (sizeof(deleted) - 1));
		buf[n - (sizeof(deleted) - 1)] = 0;
		mod_try_path(sm, buf);
	}
}

static void mod_load_symbols(struct sym_mod *sm)
{
	int r;

	if (!sm->have_img)
		return;
	r = symtab_build(&sm->syms, sm->img.elf, SHT_SYMTAB);
	if (r > 0) {
		sm->sym_origin = SONDE_SYM_ORIGIN_SYMTAB;
		return;
	}
	r = symtab_build(&sm->syms, sm->img.elf, SHT_DYNSYM);
	if (r > 0)
		sm->sym_origin = SONDE_SYM_ORIGIN_DYNSYM;
}

static void mod_load(struct sonde_symbolizer *s, struct sym_mod *sm,
		     const struct sonde_sym_module *m)
{
	sm->loaded = 1;
	mod_open_image(sm, m->pid);
	mod_load_symbols(sm);
}

static void frame_init(struct sonde_sym_frame *f, const char *name, const char *module,
		       uint8_t kind, uint8_t origin)
{
	*f = (struct sonde_sym_frame){
		.name = name,
		.module = module,
		.kind = kind,
		.origin = origin,
	};
}

/* The address-only fallback; its name is made once per (module, offset). */
static int mod_fallback(struct sonde_symbolizer *s, struct sym_mod *sm, uint64_t offset,
			uint8_t kind, struct sonde_sym_frame *out)
{
	const char *name = u64map_get(&sm->fallback, offset);

	if (!name) {
		name = strpool_printf(&s->pool, "%s+0x%" PRIx64, sm->base, offset);
		if (!name || u64map_put(&sm->fallback, offset, (void *)name) < 0)
			return -ENOMEM;
	}
	frame_init(out, name, sm->path, kind, SONDE_SYM_ORIGIN_NONE);
	return 1;
}

static int mod_symtab_frame(struct sym_mod *sm, uint64_t vaddr, struct sonde_sym_frame *out)
{
	struct sym_entry *e = symtab_find(&sm->syms, vaddr);

	if (!e)
		return 0;
	frame_init(out, e->pretty ? e->pretty : e->name, sm->path, SONDE_SYM_NATIVE,
		   sm->sym_origin);
	return 1;
}

SONDE_API int sonde_symbolize(struct sonde_symbolizer *s, const struct sonde_sym_module *m,
			      uint64_t offset, struct sonde_sym_frame *out, size_t max)
{
	struct sym_mod *sm;
	uint64_t vaddr;
	int r;

	if (!s || !m || !out || max < 1)
		return -EINVAL;
	sm = mod_get(s, m);
	if (!sm)
		return -ENOMEM;
	if (!sm->loaded)
		mod_load(s, sm, m);
	if (sm->have_img && elfimg_off_to_vaddr(&sm->img, offset, &vaddr) == 0) {
		r = mod_symtab_frame(sm, vaddr, out);
		if (r)
			return r;
	}
	return mod_fallback(s, sm, offset, SONDE_SYM_NATIVE, out);
}

SONDE_API int sonde_symbolize_raw(struct sonde_symbolizer *s, uint32_t pid, uint64_t addr,
				  struct sonde_sym_frame *out, size_t max)
{
	const char *name;

	if (!s || !out || max < 1)
		return -EINVAL;
	name = u64map_get(&s->raw_names, addr);
	if (!name) {
		name = strpool_printf(&s->pool, "0x%" PRIx64, addr);
		if (!name || u64map_put(&s->raw_names, addr, (void *)name) < 0)
			return -ENOMEM;
	}
	frame_init(out, name, NULL, SONDE_SYM_NATIVE, SONDE_SYM_ORIGIN_NONE);
	return 1;
}

SONDE_API struct sonde_symbolizer *sonde_symbolizer_new(const struct sonde_symbolizer_opts *opts)
{
	struct sonde_symbolizer *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (opts) {
		/* Older callers pass a smaller struct: copy what they know, zero the rest. */
		size_t n = opts->sz < sizeof(s->opts) ? opts->sz : sizeof(s->opts);
		memcpy(&s->opts, opts, n);
	}
	s->opts.sz = sizeof(s->opts);
	return s;
}

SONDE_API void sonde_symbolizer_free(struct sonde_symbolizer *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_buckets; i++) {
		for (struct sym_mod *sm = s->buckets[i], *next; sm; sm = next) {
			next = sm->next;
			mod_free(sm);
		}
	}
	free(s->buckets);
	u64map_free(&s->raw_names);
	strpool_free(&s->pool);
	free(s);
}
