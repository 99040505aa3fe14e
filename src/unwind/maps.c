/* Executable mappings with lazily built CFI tables (see maps.h). */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/log.h>

#include "unwind/maps.h"

/* Larger files are not loaded: no real binary's CFI needs it, and a hostile mapping must
 * not make the profiler read gigabytes. */
enum { MAX_IMAGE = 1 << 30 };

struct map {
	uint64_t start, end, pgoff;
	char *path;
	uint8_t *image; /* memory image (vDSO) until the table is built */
	size_t image_len;
	struct cfi_table *table;
	uint64_t bias;
	bool tried;
};

struct unwind_maps {
	pid_t pid;
	struct map *v;
	size_t n, cap;
};

struct unwind_maps *unwind_maps_new(pid_t pid)
{
	struct unwind_maps *m = calloc(1, sizeof(*m));

	if (m)
		m->pid = pid;
	return m;
}

void unwind_maps_free(struct unwind_maps *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		free(m->v[i].path);
		free(m->v[i].image);
		cfi_table_free(m->v[i].table);
	}
	free(m->v);
	free(m);
}

int unwind_maps_add(struct unwind_maps *m, uint64_t start, uint64_t end, uint64_t pgoff,
		    const char *path, const void *image, size_t image_len)
{
	struct map e = {.start = start, .end = end, .pgoff = pgoff};
	size_t i;

	if (end <= start || (!path && !image))
		return -EINVAL;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 32;
		struct map *v = realloc(m->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	if ((path && !(e.path = strdup(path))) || (image && !(e.image = malloc(image_len)))) {
		free(e.path);
		return -ENOMEM;
	}
	if (image) {
		memcpy(e.image, image, image_len);
		e.image_len = image_len;
	}
	for (i = m->n; i > 0 && m->v[i - 1].start > start; i--)
		m->v[i] = m->v[i - 1];
	m->v[i] = e;
	m->n++;
	return 0;
}

static uint8_t *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > MAX_IMAGE)
		goto out;
	buf = malloc((size_t)st.st_size);
	while (buf && got < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (r <= 0) {
			free(buf);
			buf = NULL;
			break;
		}
		got += (size_t)r;
	}
	*len = got;
out:
	close(fd);
	return buf;
}

/* bias = runtime address - ELF vaddr, from the PT_LOAD segment that holds pgoff. */
static bool image_bias(const uint8_t *img, size_t len, const struct map *e, uint64_t *bias)
{
	Elf *elf;
	size_t nph;
	bool ok = false;

	if (elf_version(EV_CURRENT) == EV_NONE || !(elf = elf_memory((char *)img, len)))
		return false;
	if (elf_getphdrnum(elf, &nph) < 0)
		nph = 0;
	for (size_t i = 0; i < nph && !ok; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (e->pgoff < (ph.p_offset & ~(uint64_t)0xfff) ||
		    e->pgoff >= ph.p_offset + ph.p_filesz)
			continue;
		*bias = e->start - e->pgoff + ph.p_offset - ph.p_vaddr;
		ok = true;
	}
	elf_end(elf);
	return ok;
}

static void build(struct unwind_maps *m, struct map *e)
{
	uint8_t *img = e->image;
	size_t len = e->image_len;
	char mf[96];

	e->tried = true;
	if (!img && m->pid > 0) {
		snprintf(mf, sizeof(mf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)m->pid,
			 e->start, e->end);
		img = read_file(mf, &len);
	}
	if (!img && e->path)
		img = read_file(e->path, &len);
	if (!img) {
		sonde_debug("unwind: cannot read %s: %s", e->path ? e->path : "image",
			    strerror(errno));
		return;
	}
	if (image_bias(img, len, e, &e->bias))
		e->table = cfi_table_from_elf(img, len, NULL, 0);
	if (!e->table)
		sonde_debug("unwind: no CFI for %s: %s", e->path ? e->path : "image",
			    strerror(errno));
	free(img);
	e->image = NULL;
	e->image_len = 0;
}

bool unwind_maps_find(void *ctx, uint64_t pc, struct unwind_module *out)
{
	struct unwind_maps *m = ctx;
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->v[mid].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || pc >= m->v[lo - 1].end)
		return false;
	struct map *e = &m->v[lo - 1];
	if (!e->tried)
		build(m, e);
	out->table = e->table;
	out->bias = e->bias;
	return true;
}

static int add_vdso(struct unwind_maps *m, pid_t pid, uint64_t start, uint64_t end)
{
	char path[64];
	size_t len = (size_t)(end - start);
	uint8_t *buf;
	int fd, rc;

	if (len > (1 << 24))
		return -E2BIG;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	buf = malloc(len);
	if (!buf)
		rc = -ENOMEM;
	else if (pread(fd, buf, len, (off_t)start) != (ssize_t)len)
		rc = -EIO;
	else
		rc = unwind_maps_add(m, start, end, 0, "[vdso]", buf, len);
	free(buf);
	close(fd);
	return rc;
}

int unwind_maps_load_pid(struct unwind_maps *m, pid_t pid)
{
	char path[64], line[4096];
	FILE *f;
	int added = 0, rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if (!(f = fopen(path, "re")))
		return -errno;
	while (rc >= 0 && fgets(line, sizeof(line), f)) {
		uint64_t start, end, off;
		char perms[8];
		int name = 0;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end,
			   perms, &off, &name) < 4 ||
		    !name || perms[2] != 'x')
			continue;
		char *p = line + name;
		p[strcspn(p, "\n")] = 0;
		if (p[0] == '/')
			rc = unwind_maps_add(m, start, end, off, p, NULL, 0);
		else if (!strcmp(p, "[vdso]"))
			rc = add_vdso(m, pid, start, end);
		else
			continue;
		added += rc >= 0;
	}
	fclose(f);
	return rc < 0 ? rc : added;
}
