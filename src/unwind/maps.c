/* Executable mappings with lazily built CFI tables (see maps.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "base/alloc.h"
#include "base/array.h"
#include "unwind/cache.h"
#include "unwind/maps.h"

struct map {
	struct unwind_mapping m; /* path owned */
	struct unwind_module mod; /* once resolved */
	bool resolved;
};

struct unwind_maps {
	pid_t pid;
	struct map *v;
	size_t n, cap;
	struct unwind_cache *cache;
};

struct unwind_maps *sonde__unwind_maps_new(pid_t pid)
{
	struct unwind_maps *m = sonde__calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->pid = pid;
	if (!(m->cache = sonde__unwind_cache_new())) {
		sonde__free(m);
		return NULL;
	}
	return m;
}

void sonde__unwind_maps_free(struct unwind_maps *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		sonde__free((char *)m->v[i].m.path);
	sonde__free(m->v);
	sonde__unwind_cache_free(m->cache);
	sonde__free(m);
}

int sonde__unwind_maps_add(struct unwind_maps *m, uint64_t start, uint64_t end, uint64_t pgoff,
		    uint64_t dev, uint64_t inode, const char *path)
{
	struct map e = {.m = {.pid = m->pid,
			      .start = start,
			      .end = end,
			      .pgoff = pgoff,
			      .dev = dev,
			      .inode = inode}};
	size_t i;

	if (end <= start || !path)
		return -EINVAL;
	e.m.vdso = !strcmp(path, "[vdso]");
	if (sonde__array_grow(&m->v, &m->cap, m->n + 1, sizeof(*m->v), 32) < 0)
		return -ENOMEM;
	if (!(e.m.path = sonde__strdup(path)))
		return -ENOMEM;
	for (i = m->n; i > 0 && m->v[i - 1].m.start > start; i--)
		m->v[i] = m->v[i - 1];
	m->v[i] = e;
	m->n++;
	return 0;
}

bool sonde__unwind_maps_find(void *ctx, uint64_t pc, struct unwind_module *out)
{
	struct unwind_maps *m = ctx;
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->v[mid].m.start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || pc >= m->v[lo - 1].m.end)
		return false;
	struct map *e = &m->v[lo - 1];
	if (!e->resolved)
		e->resolved = sonde__unwind_cache_lookup(m->cache, &e->m, &e->mod);
	*out = e->mod;
	return true;
}

int sonde__unwind_maps_load_pid(struct unwind_maps *m, pid_t pid)
{
	char path[64], line[4096];
	FILE *f;
	int added = 0, rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if (!(f = fopen(path, "re")))
		return -errno;
	while (rc >= 0 && fgets(line, sizeof(line), f)) {
		uint64_t start, end, off, inode;
		unsigned maj, min;
		char perms[8];
		int name = 0;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n",
			   &start, &end, perms, &off, &maj, &min, &inode, &name) < 7 ||
		    !name || perms[2] != 'x')
			continue;
		char *p = line + name;
		p[strcspn(p, "\n")] = 0;
		if (p[0] != '/' && strcmp(p, "[vdso]"))
			continue; /* anonymous code and [vsyscall] have no CFI */
		rc = sonde__unwind_maps_add(m, start, end, off, makedev(maj, min), inode, p);
		added += rc >= 0;
	}
	fclose(f);
	return rc < 0 ? rc : added;
}
