/* Per-recording cache of CFI tables (see cache.h). Entries live in an open-addressing hash
 * on file identity; the vDSO is one entry (every process of a boot maps the same image). */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/log.h>

#include "base/alloc.h"
#include "base/regfile.h"
#include "unwind/cache.h"
#include "unwind/cfi_parse.h"

/* Larger files are not loaded: no real binary needs it, and a hostile mapping must not
 * make the profiler read gigabytes. The vDSO is a few pages. */
enum { MAX_IMAGE = 1 << 30, MAX_VDSO = 1 << 20 };

struct entry {
	uint64_t dev, inode; /* inode 0 and dev 1: the vDSO; 0/0: empty slot */
	uint32_t gen;	     /* the inode's generation, 0: unknown */
	struct cfi_table *table;
	struct cfi_load loads[CFI_MAX_LOADS]; /* for the bias of each mapping */
	unsigned n_loads;
};

struct unwind_cache {
	struct entry *v;
	size_t n, cap; /* cap a power of two */
	uint32_t tables, without;
};

struct unwind_cache *sonde__unwind_cache_new(void)
{
	struct unwind_cache *c = sonde__calloc(1, sizeof(*c));

	if (c && !(c->v = sonde__calloc(c->cap = 64, sizeof(*c->v)))) {
		sonde__free(c);
		return NULL;
	}
	return c;
}

void sonde__unwind_cache_free(struct unwind_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->cap; i++)
		sonde__cfi_table_free(c->v[i].table);
	sonde__free(c->v);
	sonde__free(c);
}

void sonde__unwind_cache_counts(const struct unwind_cache *c, uint32_t *tables, uint32_t *without)
{
	*tables = c->tables;
	*without = c->without;
}

static size_t home_of(const struct unwind_cache *c, uint64_t dev, uint64_t inode)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ (dev * 0xc2b2ae3d27d4eb4full);

	return (size_t)(h >> 17) & (c->cap - 1);
}

/* The slot of file (dev, inode, gen), or the empty one where it goes. Files that had the
 * same inode number one after the other (the first deleted and freed) are told apart by
 * their generation where both are known: a library written again under a temporary name
 * took the first one's table. */
static size_t slot_of(const struct unwind_cache *c, uint64_t dev, uint64_t inode, uint32_t gen)
{
	size_t i = home_of(c, dev, inode);

	for (const struct entry *e; (e = &c->v[i])->dev || e->inode; i = (i + 1) & (c->cap - 1))
		if (e->dev == dev && e->inode == inode &&
		    sonde__regfile_same_generation(e->gen, gen))
			break;
	return i;
}

static int grow(struct unwind_cache *c)
{
	struct unwind_cache bigger = {.cap = c->cap * 2};

	if (!(bigger.v = sonde__calloc(bigger.cap, sizeof(*bigger.v))))
		return -ENOMEM;
	for (size_t i = 0; i < c->cap; i++) {
		if (!c->v[i].dev && !c->v[i].inode)
			continue;
		size_t k = home_of(&bigger, c->v[i].dev, c->v[i].inode);
		while (bigger.v[k].dev || bigger.v[k].inode)
			k = (k + 1) & (bigger.cap - 1);
		bigger.v[k] = c->v[i];
	}
	sonde__free(c->v);
	c->v = bigger.v;
	c->cap = bigger.cap;
	return 0;
}

/* buf[off, off + n) from the file; false when it lies outside or cannot be read. */
static bool read_range(int fd, uint8_t *buf, size_t size, uint64_t off, uint64_t n)
{
	if (off > size || n > size - off)
		return false;
	for (uint64_t got = 0; got < n;) {
		ssize_t r = pread(fd, buf + off + got, (size_t)(n - got), (off_t)(off + got));
		if (r <= 0)
			return false;
		got += (uint64_t)r;
	}
	return true;
}

/* Only what the CFI reader looks at, at its file offsets in a zeroed buffer of the file's
 * size: the ELF and program headers, the section headers and their names, and the
 * .eh_frame, .eh_frame_hdr and .debug_frame sections (and the PT_GNU_EH_FRAME segment).
 * A large binary's code and debug information are never read: a system-wide recording
 * meets many of them (compilers, libLLVM) and must not stall on each. false when the
 * image is not laid out that way (no section headers): the caller reads it whole. */
static bool read_cfi_parts(int fd, uint8_t *buf, size_t size)
{
	Elf64_Ehdr eh;

	if (!read_range(fd, buf, size, 0, sizeof(eh)))
		return false;
	memcpy(&eh, buf, sizeof(eh));
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    !eh.e_shoff || !eh.e_shnum || eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    eh.e_shstrndx >= eh.e_shnum || (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)))
		return false;
	uint64_t shdrs = (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
	if (!read_range(fd, buf, size, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr)) ||
	    !read_range(fd, buf, size, eh.e_shoff, shdrs))
		return false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, buf + eh.e_phoff + i * sizeof(ph), sizeof(ph));
		if (ph.p_type == PT_GNU_EH_FRAME &&
		    !read_range(fd, buf, size, ph.p_offset, ph.p_filesz))
			return false;
	}
	Elf64_Shdr str;
	memcpy(&str, buf + eh.e_shoff + eh.e_shstrndx * sizeof(str), sizeof(str));
	if (str.sh_type == SHT_NOBITS || !read_range(fd, buf, size, str.sh_offset, str.sh_size))
		return false;
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		memcpy(&sh, buf + eh.e_shoff + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type == SHT_NOBITS || sh.sh_name >= str.sh_size)
			continue;
		const char *name = (const char *)buf + str.sh_offset + sh.sh_name;
		size_t room = str.sh_size - sh.sh_name;
		bool want = !strncmp(name, ".eh_frame", room) ||
			    !strncmp(name, ".eh_frame_hdr", room) ||
			    !strncmp(name, ".debug_frame", room);
		if (want && !read_range(fd, buf, size, sh.sh_offset, sh.sh_size))
			return false;
	}
	return true;
}

/* fd was opened by sonde__regfile_open: a regular file within MAX_IMAGE. */
static uint8_t *read_fd(int fd, const struct stat *st, const struct unwind_mapping *m,
			size_t *len)
{
	size_t size = (size_t)st->st_size;
	uint8_t *buf;

	if (st->st_size <= 0 || (m->inode && st->st_ino != m->inode) ||
	    !sonde__regfile_is_generation(fd, m->gen))
		return NULL;
	/* calloc: pages never written stay untouched (and unallocated) for large images */
	if (!(buf = sonde__calloc(1, size)))
		return NULL;
	if (!read_cfi_parts(fd, buf, size) && !read_range(fd, buf, size, 0, size)) {
		sonde__free(buf);
		return NULL;
	}
	*len = size;
	return buf;
}

/* The mapped file's bytes: map_files first (deleted or replaced files), then the path. */
static uint8_t *read_image(const struct unwind_mapping *m, size_t *len)
{
	char path[96];
	uint8_t *img = NULL;
	int fd;

	if (m->vdso) {
		if (m->end - m->start > MAX_VDSO)
			return NULL;
		snprintf(path, sizeof(path), "/proc/%d/mem", (int)m->pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return NULL;
		*len = (size_t)(m->end - m->start);
		if ((img = sonde__malloc(*len)) &&
		    pread(fd, img, *len, (off_t)m->start) != (ssize_t)*len) {
			sonde__free(img);
			img = NULL;
		}
		close(fd);
		return img;
	}
	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)m->pid,
		 m->start, m->end);
	for (int i = 0; i < 2 && !img; i++) {
		/* map_files is the kernel's link to the mapping, followed; the mapped path is
		 * the target's to replace (a FIFO there would block the unwinder) */
		struct regfile_rules rules = {
			.what = "mapped file", .max_size = MAX_IMAGE, .follow = i == 0};
		const char *p = i == 0 ? path : m->path;
		struct stat st;
		if (!p || (i == 0 && m->pid <= 0) || (fd = sonde__regfile_open(p, &rules, &st)) < 0)
			continue;
		img = read_fd(fd, &st, m, len);
		close(fd);
	}
	return img;
}

static void read_loads(const uint8_t *img, size_t len, struct entry *e)
{
	Elf *elf;
	size_t nph;

	if (elf_version(EV_CURRENT) == EV_NONE || !(elf = elf_memory((char *)img, len)))
		return;
	if (elf_getphdrnum(elf, &nph) < 0)
		nph = 0;
	for (size_t i = 0; i < nph && e->n_loads < CFI_MAX_LOADS; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD)
			e->loads[e->n_loads++] =
				(struct cfi_load){ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz,
						  (ph.p_flags & PF_X) != 0};
	}
	elf_end(elf);
}

static void build(struct entry *e, const struct unwind_mapping *m)
{
	size_t len = 0;
	uint8_t *img = read_image(m, &len);

	if (!img) {
		sonde_debug("unwind: cannot read %s", m->path ? m->path : "[vdso]");
		return;
	}
	read_loads(img, len, e);
	/* lazily: the table keeps the image's CFI bytes and runs an FDE at its first use */
	if (e->n_loads)
		e->table = sonde__cfi_table_from_elf_lazy(img, len);
	if (!e->table) {
		sonde_debug("unwind: no CFI in %s", m->path ? m->path : "[vdso]");
		sonde__free(img);
	}
}

/* runtime address - ELF vaddr, from the PT_LOAD segment that holds the mapping's offset. */
static bool bias_of(const struct entry *e, const struct unwind_mapping *m, uint64_t *bias)
{
	for (unsigned i = 0; i < e->n_loads; i++) {
		const struct cfi_load *l = &e->loads[i];
		if (m->pgoff >= (l->offset & ~(uint64_t)0xfff) &&
		    m->pgoff < l->offset + l->filesz) {
			*bias = m->start - m->pgoff + l->offset - l->vaddr;
			return true;
		}
	}
	return false;
}

bool sonde__unwind_cache_lookup(struct unwind_cache *c, const struct unwind_mapping *m,
			 struct unwind_module *out)
{
	uint64_t dev = m->vdso ? 1 : m->dev, inode = m->vdso ? 0 : m->inode;

	out->table = NULL;
	out->bias = 0;
	if (!m->vdso && !inode)
		return true; /* anonymous code (JIT): no file, no CFI */
	if (2 * (c->n + 1) > c->cap && grow(c) < 0)
		return false;
	size_t i = slot_of(c, dev, inode, m->vdso ? 0 : m->gen);
	struct entry *e = &c->v[i];
	if (!e->dev && !e->inode) {
		e->dev = dev;
		e->inode = inode;
		e->gen = m->vdso ? 0 : m->gen;
		c->n++;
		build(e, m);
		if (e->table)
			c->tables++;
		else
			c->without++;
	}
	if (e->table && bias_of(e, m, &out->bias))
		out->table = e->table;
	return true;
}
