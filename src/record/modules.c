#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <sonde/spool.h>

#include "base/alloc.h"
#include "base/array.h"
#include "proc/maps.h"
#include "record/modules.h"
#include "symbol/elfimg.h"

static const char *own_path(struct rec_modtable *t, const char *path)
{
	/* Consecutive inserts of the same file (split pieces, copies) share one string. */
	if (t->n_paths && strcmp(t->paths[t->n_paths - 1], path) == 0)
		return t->paths[t->n_paths - 1];
	if (sonde__array_grow(&t->paths, &t->cap_paths, t->n_paths + 1, sizeof(*t->paths), 16) < 0)
		return NULL;
	char *s = sonde__strdup(path);
	if (!s)
		return NULL;
	t->paths[t->n_paths++] = s;
	return s;
}

static int reserve(struct rec_modtable *t, size_t extra)
{
	return sonde__array_grow(&t->m, &t->cap, t->n + extra, sizeof(*t->m), 16);
}

/* Index of the first entry whose end is above addr. */
static size_t lower_bound(const struct rec_modtable *t, uint64_t addr)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->m[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Removes [start, end) from the table, trimming or splitting entries that straddle it.
 * Needs one free slot (a split adds an entry). */
static void punch(struct rec_modtable *t, uint64_t start, uint64_t end)
{
	size_t i = lower_bound(t, start);

	while (i < t->n && t->m[i].start < end) {
		struct rec_module *e = &t->m[i];
		if (e->start < start && e->end > end) { /* split in two */
			memmove(e + 1, e, (t->n - i) * sizeof(*e));
			t->n++;
			struct rec_module *right = e + 1;
			e->end = start;
			right->pgoff += end - right->start;
			right->start = end;
			right->unw_cache = NULL;
			return;
		}
		if (e->start < start) { /* keep the left part */
			e->end = start;
			i++;
		} else if (e->end > end) { /* keep the right part */
			e->pgoff += end - e->start;
			e->start = end;
			e->unw_cache = NULL;
			return;
		} else { /* fully covered */
			memmove(e, e + 1, (t->n - i - 1) * sizeof(*e));
			t->n--;
		}
	}
}

int sonde__modtable_insert(struct rec_modtable *t, const struct rec_module *m)
{
	if (m->end <= m->start)
		return 0;
	if (reserve(t, 2) < 0)
		return -ENOMEM;
	const char *path = own_path(t, m->path ? m->path : "");
	if (!path)
		return -ENOMEM;
	punch(t, m->start, m->end);
	size_t i = lower_bound(t, m->start);
	memmove(&t->m[i + 1], &t->m[i], (t->n - i) * sizeof(t->m[0]));
	t->m[i] = *m;
	t->m[i].path = path;
	t->m[i].unw_cache = NULL;
	t->n++;
	return 0;
}

int sonde__modtable_remove(struct rec_modtable *t, uint64_t start, uint64_t end)
{
	if (end <= start)
		return 0;
	if (reserve(t, 1) < 0)
		return -ENOMEM;
	punch(t, start, end);
	return 0;
}

const struct rec_module *sonde__modtable_find(const struct rec_modtable *t, uint64_t pc)
{
	size_t i = lower_bound(t, pc);

	if (i < t->n && t->m[i].start <= pc)
		return &t->m[i];
	return NULL;
}

void sonde__modtable_clear(struct rec_modtable *t)
{
	for (size_t i = 0; i < t->n_paths; i++)
		sonde__free(t->paths[i]);
	t->n_paths = 0;
	t->n = 0;
}

int sonde__modtable_copy(struct rec_modtable *dst, const struct rec_modtable *src)
{
	for (size_t i = 0; i < src->n; i++) {
		int err = sonde__modtable_insert(dst, &src->m[i]);
		if (err)
			return err;
	}
	return 0;
}

void sonde__modtable_free(struct rec_modtable *t)
{
	if (!t)
		return;
	sonde__modtable_clear(t);
	sonde__free(t->m);
	sonde__free(t->paths);
	memset(t, 0, sizeof(*t));
}

int sonde__read_build_id(int fd, uint8_t *out, size_t cap)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e)
		return 0; /* not ELF, or unreadable: no build id */
	int n = (int)sonde__elf_build_id(e, out, cap);
	elf_end(e);
	return n;
}

static int on_exec_map(void *ctx, const struct proc_map *pm)
{
	struct rec_modtable *t = ctx;
	char path[4096];

	if (!pm->exec || !pm->path_len)
		return 0;
	bool vdso = pm->path_len == 6 && !memcmp(pm->path, "[vdso]", 6);
	if (pm->path[0] != '/' && !vdso)
		return 0; /* anonymous code and [vsyscall] have no file to unwind from */
	snprintf(path, sizeof(path), "%.*s", (int)pm->path_len, pm->path);
	struct rec_module m = {.start = pm->start,
			       .end = pm->end,
			       .pgoff = pm->pgoff,
			       .flags = SONDE_MODULE_EXEC | (vdso ? SONDE_MODULE_VDSO : 0),
			       .dev = makedev(pm->dev_major, pm->dev_minor),
			       .inode = pm->inode,
			       .path = path};
	return sonde__modtable_insert(t, &m);
}

int sonde__modtable_load_pid(struct rec_modtable *t, pid_t pid)
{
	return sonde__proc_maps_read(pid, on_exec_map, t);
}
