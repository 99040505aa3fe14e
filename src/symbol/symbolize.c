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
#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/spool.h>
#include <sonde/symbolize.h>

#include "base/alloc.h"
#include "symbol/bidcache.h"
#include "symbol/debugfile.h"
#include "symbol/demangle.h"
#include "symbol/dinfod.h"
#include "symbol/dwidx.h"
#include "symbol/elfimg.h"
#include "symbol/imgcache.h"
#include "symbol/kallsyms.h"
#include "symbol/perfmap.h"
#include "symbol/strpool.h"
#include "symbol/symtab.h"
#include "base/opts.h"
#include "base/u64map.h"

struct sym_mod {
	struct sym_mod *next; /* hash chain */
	uint64_t hash;
	uint64_t dev, inode;
	uint8_t build_id[ELFIMG_MAX_BUILD_ID];
	size_t build_id_len;
	const char *path; /* pool copy; also the frames' module */
	const char *base; /* basename of path, for "base+0xoffset" */
	int loaded;
	int have_img, have_dbg;
	struct elfimg img; /* the module's own image */
	struct elfimg dbg; /* its separate debug file */
	struct symtab syms;
	uint8_t sym_origin;
	struct dwidx *dw;
	uint8_t dw_origin;	/* DWARF, or DEBUGINFOD when the debug file came from there */
	struct u64map fallback; /* offset -> "base+0xoffset", so repeats do not allocate */
};

struct sonde_symbolizer {
	struct sonde_symbolizer_opts opts;
	struct strpool pool;
	struct sym_mod **buckets;
	size_t n_buckets, n_mods;
	struct u64map raw_names; /* addr -> "0xaddr" */
	struct dinfod *dinfod;	 /* NULL: debuginfod not configured */
	int dinfod_checked;
	struct kallsyms ksyms;
	int ksyms_loaded;
	struct u64map perfmaps; /* pid -> struct sym_perfmap */
	struct imgcache images;
	char *bidcache_dir;		 /* NULL: no build-id cache */
	struct regfile_refusals refused; /* files not read, by reason (docs/symbolize.md) */
};

enum {
	IMAGE_CACHE_BYTES = 1u << 30, /* default bound of the image cache */
	IMAGE_CACHE_MAX = 128,	      /* default number of images (descriptors) kept */
};

struct sym_perfmap {
	struct perfmap map;
	const char *path; /* pool copy, the frames' module */
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
	struct sym_mod **b = sonde__calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_buckets; i++) {
		for (struct sym_mod *sm = s->buckets[i], *next; sm; sm = next) {
			next = sm->next;
			sm->next = b[sm->hash & (n - 1)];
			b[sm->hash & (n - 1)] = sm;
		}
	}
	sonde__free(s->buckets);
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
	sm = sonde__calloc(1, sizeof(*sm));
	if (!sm)
		return NULL;
	sm->hash = h;
	sm->dev = m->dev;
	sm->inode = m->inode;
	sm->build_id_len =
		m->build_id_len > ELFIMG_MAX_BUILD_ID ? ELFIMG_MAX_BUILD_ID : m->build_id_len;
	if (sm->build_id_len)
		memcpy(sm->build_id, m->build_id, sm->build_id_len);
	sm->path = sonde__strpool_add(&s->pool, m->path ? m->path : "");
	if (!sm->path) {
		sonde__free(sm);
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
	sonde__symtab_free(&sm->syms);
	sonde__dwidx_close(sm->dw);
	if (sm->have_dbg)
		sonde__elfimg_close(&sm->dbg);
	if (sm->have_img)
		sonde__elfimg_close(&sm->img);
	sonde__u64map_free(&sm->fallback);
	sonde__free(sm);
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
	if (!sm->inode || fd < 0)
		return 1;
	return fstat(fd, &st) == 0 && (uint64_t)st.st_ino == sm->inode;
}

/* path comes from a recording (the mapped file's name, as /proc/PID/maps shows it) or
 * names a file in the build-id cache: never a symbolic link for the real file. */
static int mod_try_path(struct sonde_symbolizer *s, struct sym_mod *sm, const char *path)
{
	struct regfile_rules rules = sonde__elfimg_rules(false, &s->refused);
	int fd = sonde__regfile_open(path, &rules, NULL);
	int r;

	if (fd < 0)
		return fd;
	r = sonde__elfimg_open_fd(&sm->img, fd);
	if (r == 0 && !mod_is_image(sm, &sm->img, fd)) {
		sonde_debug("symbolize: %s is not the mapped image (replaced?)", path);
		sonde__elfimg_close(&sm->img);
		r = -ESTALE;
	}
	close(fd);
	if (r == 0)
		sm->have_img = 1;
	return r;
}

/* The vDSO is the same image in every process of this kernel: ours stands in for the
 * recorded one when the build ids agree. */
static void mod_open_vdso(struct sym_mod *sm)
{
	const unsigned char *base = (const unsigned char *)getauxval(AT_SYSINFO_EHDR);
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
	size_t len;

	if (!base || memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return;
	len = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	for (size_t i = 0; i < eh->e_phnum; i++) {
		const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff) + i;
		if (ph->p_offset + ph->p_filesz > len)
			len = ph->p_offset + ph->p_filesz;
	}
	if (sonde__elfimg_open_mem(&sm->img, base, len) < 0)
		return;
	if (!mod_is_image(sm, &sm->img, -1)) {
		sonde__elfimg_close(&sm->img);
		return;
	}
	sm->have_img = 1;
}

static int mod_try_cached(struct sonde_symbolizer *s, struct sym_mod *sm)
{
	int fd;

	if (!sm->inode)
		return -ENOENT;
	fd = sonde__imgcache_get(&s->images, sm->dev, sm->inode, sm->build_id, sm->build_id_len);
	if (fd < 0 || sonde__elfimg_open_fd(&sm->img, fd) < 0)
		return -ENOENT;
	sm->have_img = 1;
	return 0;
}

static int mod_open_image_path(struct sonde_symbolizer *s, struct sym_mod *sm, uint32_t pid);

/* The recorder's copy of a deleted or replaced image, by build id. */
static int mod_try_bidcache(struct sonde_symbolizer *s, struct sym_mod *sm)
{
	char path[4096];

	if (!s->bidcache_dir || !sm->build_id_len ||
	    sonde__bidcache_path(s->bidcache_dir, sm->build_id, sm->build_id_len, path, sizeof(path)))
		return -ENOENT;
	return mod_try_path(s, sm, path);
}

static void mod_open_image(struct sonde_symbolizer *s, struct sym_mod *sm, uint32_t pid)
{
	if (mod_open_image_path(s, sm, pid) < 0 && !sm->have_img)
		mod_try_bidcache(s, sm);
}

/* A hold of the image through the image cache or the module's path; 0 or -ENOENT. */
static int mod_open_image_path(struct sonde_symbolizer *s, struct sym_mod *sm, uint32_t pid)
{
	char buf[4096];
	size_t n = strlen(sm->path);
	static const char deleted[] = " (deleted)";

	if (mod_try_cached(s, sm) == 0)
		return 0;
	if (sm->path[0] != '/')
		return -ENOENT;
	if (mod_try_path(s, sm, sm->path) == 0)
		return 0;
	/* A path from another mount namespace is reachable through the process's root. */
	if (pid &&
	    snprintf(buf, sizeof(buf), "/proc/%" PRIu32 "/root%s", pid, sm->path) <
		    (int)sizeof(buf) &&
	    mod_try_path(s, sm, buf) == 0)
		return 0;
	if (n > sizeof(deleted) - 1 && !strcmp(sm->path + n - (sizeof(deleted) - 1), deleted) &&
	    n < sizeof(buf)) {
		memcpy(buf, sm->path, n - (sizeof(deleted) - 1));
		buf[n - (sizeof(deleted) - 1)] = 0;
		if (mod_try_path(s, sm, buf) == 0)
			return 0;
	}
	return -ENOENT;
}

static const uint8_t *mod_build_id(const struct sym_mod *sm, size_t *len)
{
	if (sm->build_id_len) {
		*len = sm->build_id_len;
		return sm->build_id;
	}
	*len = sm->have_img ? sm->img.build_id_len : 0;
	return sm->img.build_id;
}

static struct dinfod *symbolizer_dinfod(struct sonde_symbolizer *s)
{
	if (!s->dinfod_checked) {
		s->dinfod_checked = 1;
		s->dinfod = sonde__dinfod_new(s->opts.debuginfod_urls);
	}
	return s->dinfod;
}

/* Local debug files first (build id, then debuglink); debuginfod only for a build id that
 * has none. */
static void mod_find_debug(struct sonde_symbolizer *s, struct sym_mod *sm)
{
	struct debugfile_query q = {
		.debug_dirs = s->opts.debug_dirs,
		.module_path = sm->path,
		.refusals = &s->refused,
	};
	struct dinfod *d;

	q.build_id = mod_build_id(sm, &q.build_id_len);
	if (sm->have_img) {
		q.debuglink = sm->img.debuglink;
		q.debuglink_crc = sm->img.debuglink_crc;
	}
	if (sonde__debugfile_find(&q, &sm->dbg) == 0) {
		sm->have_dbg = 1;
		sm->dw_origin = SONDE_SYM_ORIGIN_DWARF;
		return;
	}
	if (q.build_id_len && (d = symbolizer_dinfod(s)) &&
	    sonde__dinfod_find_debuginfo(d, q.build_id, q.build_id_len, &sm->dbg) == 0) {
		sm->have_dbg = 1;
		sm->dw_origin = SONDE_SYM_ORIGIN_DEBUGINFOD;
	}
}

/* .symtab of the image, else of the debug file (which keeps it when the image was
 * stripped), else the image's .dynsym. */
static void mod_load_table(struct sym_mod *sm)
{
	if (sm->have_img && sonde__symtab_build(&sm->syms, sm->img.elf, SHT_SYMTAB) > 0) {
		sm->sym_origin = SONDE_SYM_ORIGIN_SYMTAB;
		return;
	}
	if (sm->have_dbg && sonde__symtab_build(&sm->syms, sm->dbg.elf, SHT_SYMTAB) > 0) {
		sm->sym_origin = SONDE_SYM_ORIGIN_SYMTAB;
		return;
	}
	if (sm->have_img && sonde__symtab_build(&sm->syms, sm->img.elf, SHT_DYNSYM) > 0)
		sm->sym_origin = SONDE_SYM_ORIGIN_DYNSYM;
}

/* The table, then names for the PLT stubs ("sin@plt", as perf shows them), which no
 * symbol table names: they come from the image's PLT relocations. */
static void mod_load_symbols(struct sym_mod *sm)
{
	mod_load_table(sm);
	if (sm->have_img && sonde__symtab_add_plt(&sm->syms, sm->img.elf) > 0 &&
	    sm->sym_origin == SONDE_SYM_ORIGIN_NONE)
		sm->sym_origin = SONDE_SYM_ORIGIN_DYNSYM;
}

static void mod_load(struct sonde_symbolizer *s, struct sym_mod *sm,
		     const struct sonde_sym_module *m)
{
	Elf *dw_elf = NULL;

	sm->loaded = 1;
	if (m->flags & SONDE_MODULE_VDSO)
		mod_open_vdso(sm);
	else
		mod_open_image(s, sm, m->pid);
	sm->dw_origin = SONDE_SYM_ORIGIN_DWARF;
	if (!sm->have_img || !sm->img.has_debug_info)
		mod_find_debug(s, sm);
	mod_load_symbols(sm);
	if (sm->have_img && sm->img.has_debug_info)
		dw_elf = sm->img.elf;
	else if (sm->have_dbg && sm->dbg.has_debug_info)
		dw_elf = sm->dbg.elf;
	if (dw_elf)
		sm->dw = sonde__dwidx_open(dw_elf);
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
	const char *name = u64map_get_ptr(&sm->fallback, offset);

	if (!name) {
		name = sonde__strpool_printf(&s->pool, "%s+0x%" PRIx64, sm->base, offset);
		if (!name || u64map_put_ptr(&sm->fallback, offset, name) < 0)
			return -ENOMEM;
	}
	frame_init(out, name, sm->path, kind, SONDE_SYM_ORIGIN_NONE);
	return 1;
}

static const char *pretty_name(struct sonde_symbolizer *s, const char *raw, const char **cache)
{
	if (s->opts.no_demangle || !raw)
		return raw;
	if (!*cache)
		*cache = sonde__sym_demangle(&s->pool, raw);
	return *cache ? *cache : raw;
}

static int mod_symtab_frame(struct sonde_symbolizer *s, struct sym_mod *sm, uint64_t vaddr,
			    struct sonde_sym_frame *out)
{
	struct sym_entry *e = sonde__symtab_find(&sm->syms, vaddr);

	if (!e)
		return 0;
	frame_init(out, pretty_name(s, e->name, &e->pretty), sm->path, SONDE_SYM_NATIVE,
		   sm->sym_origin);
	return 1;
}

/* Frames from DWARF: r->scopes[0] is the innermost scope. When more scopes than max
 * remain, the innermost ones are dropped so that the real function stays last. */
static int mod_dwarf_frames(struct sonde_symbolizer *s, struct sym_mod *sm, uint64_t vaddr,
			    const struct dw_result *r, struct sonde_sym_frame *out, size_t max)
{
	size_t skip = r->n > max ? r->n - max : 0;
	int n = 0;

	for (size_t i = skip; i < r->n; i++) {
		struct dw_scope *sc = r->scopes[i];
		struct sonde_sym_frame *f = &out[n++];
		const char *name = pretty_name(s, sc->name, &sc->pretty);
		if (i == r->n - 1 && (!name || sc->is_inline) && mod_symtab_frame(s, sm, vaddr, f))
			name = f->name;
		frame_init(f, name ? name : "??", sm->path, SONDE_SYM_NATIVE, sm->dw_origin);
		f->inline_depth = (uint32_t)(r->n - 1 - i);
		if (i == 0) {
			f->file = r->file;
			f->line = r->line;
		} else {
			f->file = r->scopes[i - 1]->call_file;
			f->line = r->scopes[i - 1]->call_line;
		}
	}
	return n;
}

static int mod_resolve(struct sonde_symbolizer *s, struct sym_mod *sm, uint64_t vaddr,
		       struct sonde_sym_frame *out, size_t max)
{
	struct dw_result r;

	if (sm->dw && sonde__dwidx_lookup(sm->dw, vaddr, &r)) {
		if (r.n)
			return mod_dwarf_frames(s, sm, vaddr, &r, out, max);
		/* code with lines but no function entry (assembly): name from the symbols */
		if (mod_symtab_frame(s, sm, vaddr, out)) {
			out->file = r.file;
			out->line = r.line;
			return 1;
		}
		return 0;
	}
	return mod_symtab_frame(s, sm, vaddr, out);
}

static struct sym_perfmap *perfmap_of(struct sonde_symbolizer *s, uint32_t pid)
{
	struct sym_perfmap *p = u64map_get_ptr(&s->perfmaps, pid);
	char path[4096];

	if (!p) {
		snprintf(path, sizeof(path), "%s/perf-%" PRIu32 ".map",
			 s->opts.perf_map_dir ? s->opts.perf_map_dir : "/tmp", pid);
		p = sonde__calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->path = sonde__strpool_add(&s->pool, path);
		if (!p->path || u64map_put_ptr(&s->perfmaps, pid, p) < 0) {
			sonde__free(p);
			return NULL;
		}
	}
	return p;
}

/* Names from the JIT's perf map; the file is checked for news on every lookup, since a
 * JIT keeps appending to it. */
static int jit_frame(struct sonde_symbolizer *s, uint32_t pid, uint64_t addr,
		     struct sonde_sym_frame *out)
{
	struct sym_perfmap *p = perfmap_of(s, pid);
	const struct perfmap_entry *e;

	if (!p)
		return -ENOMEM;
	sonde__perfmap_refresh(&p->map, p->path, (pid_t)pid, &s->refused);
	e = sonde__perfmap_find(&p->map, addr);
	if (!e)
		return 0;
	frame_init(out, e->name, p->path, SONDE_SYM_JIT, SONDE_SYM_ORIGIN_PERF_MAP);
	return 1;
}

static int kernel_frame(struct sonde_symbolizer *s, uint64_t addr, struct sonde_sym_frame *out)
{
	const struct ksym *k;

	if (!s->ksyms_loaded) {
		s->ksyms_loaded = 1;
		const char *path = s->opts.kallsyms_path ? s->opts.kallsyms_path : "/proc/kallsyms";
		int r = sonde__kallsyms_load(&s->ksyms, path, &s->refused);
		if (r < 0)
			sonde_debug("symbolize: %s: %s", path, sonde_strerror(r));
	}
	k = sonde__kallsyms_find(&s->ksyms, addr);
	if (!k)
		return 0;
	frame_init(out, k->name, k->module, SONDE_SYM_KERNEL, SONDE_SYM_ORIGIN_KALLSYMS);
	return 1;
}

static int mod_vaddr(const struct sym_mod *sm, const struct sonde_sym_module *m, uint64_t offset,
		     uint64_t *vaddr)
{
	if (sm->have_img)
		return sonde__elfimg_off_to_vaddr(&sm->img, offset, vaddr);
	if (sm->have_dbg)
		return sonde__elfimg_mapping_to_vaddr(&sm->dbg, m->pgoff, offset, vaddr);
	return -SONDE_E_RANGE;
}

/* The name of every frame of a module the recording itself names (docs/spool.md), or NULL:
 * "[kernel]", a sample's time in the kernel recorded without kernel frames, and
 * "[exiting]", the user part of a wait of a thread on its way out after it had released its
 * memory. Both are kernel-space modules (pid 0, flag KERNEL) of those paths. */
static const char *recording_name(const struct sonde_sym_module *m)
{
	static const char *const names[] = {"[kernel]", "[exiting]"};

	if (!(m->flags & SONDE_MODULE_KERNEL) || !m->path)
		return NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(m->path, names[i]))
			return names[i];
	return NULL;
}

SONDE_API int sonde_symbolizer__symbolize(struct sonde_symbolizer *s, const struct sonde_sym_module *m,
			      uint64_t offset, struct sonde_sym_frame *out, size_t max)
{
	struct sym_mod *sm;
	uint64_t vaddr;
	int r;

	if (!s || !m || !out || max < 1)
		return -EINVAL;
	const char *named = recording_name(m);
	if (named) {
		/* one frame for all of the module: no address of it means anything */
		frame_init(out, named, named, SONDE_SYM_KERNEL, SONDE_SYM_ORIGIN_RECORDING);
		return 1;
	}
	if (m->flags & SONDE_MODULE_KERNEL) {
		r = kernel_frame(s, offset, out);
		if (r)
			return r;
	} else if (m->flags & SONDE_MODULE_JIT) {
		r = jit_frame(s, m->pid, m->start + (offset - m->pgoff), out);
		if (r)
			return r;
	}
	sm = mod_get(s, m);
	if (!sm)
		return -ENOMEM;
	if (m->flags & (SONDE_MODULE_KERNEL | SONDE_MODULE_JIT))
		return mod_fallback(
			s, sm, offset,
			m->flags & SONDE_MODULE_KERNEL ? SONDE_SYM_KERNEL : SONDE_SYM_JIT, out);
	if (!sm->loaded)
		mod_load(s, sm, m);
	if (mod_vaddr(sm, m, offset, &vaddr) == 0) {
		r = mod_resolve(s, sm, vaddr, out, max);
		if (r)
			return r;
	}
	return mod_fallback(s, sm, offset, SONDE_SYM_NATIVE, out);
}

SONDE_API int sonde_symbolizer__symbolize_raw(struct sonde_symbolizer *s, uint32_t pid, uint64_t addr,
				  struct sonde_sym_frame *out, size_t max)
{
	const char *name;

	if (!s || !out || max < 1)
		return -EINVAL;
	int r = jit_frame(s, pid, addr, out);
	if (r)
		return r;
	name = u64map_get_ptr(&s->raw_names, addr);
	if (!name) {
		name = sonde__strpool_printf(&s->pool, "0x%" PRIx64, addr);
		if (!name || u64map_put_ptr(&s->raw_names, addr, name) < 0)
			return -ENOMEM;
	}
	frame_init(out, name, NULL, SONDE_SYM_NATIVE, SONDE_SYM_ORIGIN_NONE);
	return 1;
}

SONDE_API int sonde_symbolizer__add_image(struct sonde_symbolizer *s,
					 const struct sonde_sym_module *m, int fd)
{
	struct elfimg img;
	int r, dup_fd;

	if (!s || !m || fd < 0 || !m->inode)
		return -EINVAL;
	r = sonde__elfimg_open_fd(&img, fd);
	if (r < 0)
		return r;
	if (m->build_id_len && (m->build_id_len != img.build_id_len ||
				memcmp(m->build_id, img.build_id, img.build_id_len))) {
		sonde__elfimg_close(&img);
		return -ESTALE;
	}
	dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup_fd < 0) {
		r = -errno;
		sonde__elfimg_close(&img);
		return r;
	}
	r = sonde__imgcache_add(&s->images, m->dev, m->inode, img.build_id, img.build_id_len, dup_fd,
			 img.file_size);
	sonde__elfimg_close(&img);
	return r;
}

SONDE_API int sonde_symbolizer__add_image_from_pid(struct sonde_symbolizer *s,
						  const struct sonde_sym_module *m)
{
	/* map_files entries are the kernel's links to what is mapped: followed, but a mapped
	 * device is still no image */
	struct regfile_rules rules = sonde__elfimg_rules(true, NULL);
	char path[128];
	int fd, r;

	if (!s || !m)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/map_files/%" PRIx64 "-%" PRIx64, m->pid,
		 m->start, m->end);
	fd = sonde__regfile_open(path, &rules, NULL);
	if (fd < 0)
		return fd;
	r = sonde_symbolizer__add_image(s, m, fd);
	close(fd);
	return r;
}

SONDE_API int sonde_symbolizer__get_stats(const struct sonde_symbolizer *s,
					 struct sonde_symbolizer_stats *out)
{
	struct sonde_symbolizer_stats st;

	if (!s || !out || out->sz < sizeof(size_t))
		return -EINVAL;
	st = (struct sonde_symbolizer_stats){
		.sz = out->sz,
		.refused_symlink = s->refused.symlink,
		.refused_not_regular = s->refused.not_regular,
		.refused_too_big = s->refused.too_big,
		.refused_owner = s->refused.owner,
	};
	memcpy(out, &st, out->sz < sizeof(st) ? out->sz : sizeof(st));
	return 0;
}

SONDE_API int sonde_symbolizer__forget_pid(struct sonde_symbolizer *s, uint32_t pid)
{
	struct sym_perfmap *p;

	if (!s)
		return -EINVAL;
	p = u64map_get_ptr(&s->perfmaps, pid);
	if (!p || !p->map.n_lines)
		return 0;
	sonde__perfmap_reset(&p->map);
	return 1;
}

SONDE_API struct sonde_symbolizer *sonde_symbolizer__new(const struct sonde_symbolizer_opts *opts)
{
	struct sonde_symbolizer *s;

	if (!OPTS_VALID(opts, sonde_symbolizer_opts)) {
		errno = EINVAL;
		return NULL;
	}
	if (!(s = sonde__calloc(1, sizeof(*s))))
		return NULL;
	OPTS_COPY(&s->opts, opts);
	s->images.max_bytes =
		s->opts.image_cache_bytes ? s->opts.image_cache_bytes : IMAGE_CACHE_BYTES;
	s->images.max_n = s->opts.image_cache_max ? s->opts.image_cache_max : IMAGE_CACHE_MAX;
	char dir[4096];
	if (sonde__bidcache_dir(s->opts.buildid_cache_dir, dir, sizeof(dir)) == 0 &&
	    !(s->bidcache_dir = sonde__strdup(dir))) {
		sonde__free(s);
		return NULL;
	}
	/* The caller's strings are not kept. */
	s->opts.buildid_cache_dir = NULL;
	return s;
}

SONDE_API void sonde_symbolizer__free(struct sonde_symbolizer *s)
{
	uint64_t pid, val;

	if (!s)
		return;
	for (size_t i = 0; i < s->n_buckets; i++) {
		for (struct sym_mod *sm = s->buckets[i], *next; sm; sm = next) {
			next = sm->next;
			mod_free(sm);
		}
	}
	sonde__free(s->buckets);
	sonde__dinfod_free(s->dinfod);
	sonde__kallsyms_free(&s->ksyms);
	for (size_t pos = 0; sonde__u64map_next(&s->perfmaps, &pos, &pid, &val);) {
		struct sym_perfmap *p = (void *)(uintptr_t)val;
		sonde__perfmap_free(&p->map);
		sonde__free(p);
	}
	sonde__u64map_free(&s->perfmaps);
	sonde__imgcache_free(&s->images);
	sonde__free(s->bidcache_dir);
	sonde__u64map_free(&s->raw_names);
	sonde__strpool_free(&s->pool);
	sonde__free(s);
}
