#include <dwarf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/array.h"
#include "symbol/dwidx.h"

enum { DW_MAX_DEPTH = 200 }; /* DIE nesting followed; deeper (hostile) input is cut off */

struct dw_cu {
	Dwarf_Die die;
	Dwarf_Files *files;
	size_t n_files;
	struct dw_scope *scopes; /* sorted by lo, then by depth */
	size_t n_scopes;
	int built;
};

struct dw_range {
	uint64_t lo, hi;
	uint32_t cu;
};

struct dwidx {
	Dwarf *dw;
	struct dw_cu *cus;
	size_t n_cus;
	struct dw_range *ranges; /* sorted by lo */
	size_t n_ranges, cap_ranges;
};

/* ---- building a unit's scope table ---- */

struct dw_frag {
	struct dw_scope s;
	uint32_t depth;
	uint32_t parent_first, parent_count; /* fragments of the enclosing scope */
	uint32_t orig;			     /* position before sorting */
};

struct dw_build {
	struct dw_cu *cu;
	struct dw_frag *v;
	size_t n, cap;
	int failed;
};

static const char *die_name(Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));

	if (!n)
		n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
	if (!n)
		n = dwarf_diename(die);
	return n;
}

static void die_call_site(struct dw_cu *cu, Dwarf_Die *die, struct dw_scope *s)
{
	Dwarf_Attribute a;
	Dwarf_Word w;

	if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &a), &w) == 0)
		s->call_line = (uint32_t)w;
	if (cu->files && dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &a), &w) == 0 &&
	    w < cu->n_files)
		s->call_file = dwarf_filesrc(cu->files, w, NULL, NULL);
}

static int build_push(struct dw_build *b, const struct dw_frag *f)
{
	if (sonde__array_grow(&b->v, &b->cap, b->n + 1, sizeof(*b->v), 64) < 0) {
		b->failed = 1;
		return -ENOMEM;
	}
	b->v[b->n] = *f;
	b->v[b->n].orig = (uint32_t)b->n;
	b->n++;
	return 0;
}

/* Emits one fragment per address range of a function or inlined scope; the fragments of
 * one DIE are contiguous, which is how children find their parent's. */
static void build_scope(struct dw_build *b, Dwarf_Die *die, int tag, uint32_t depth,
			uint32_t pfirst, uint32_t pcount, uint32_t *first, uint32_t *count)
{
	struct dw_frag f = {.depth = depth, .parent_first = pfirst, .parent_count = pcount};
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;

	*first = (uint32_t)b->n;
	f.s.is_inline = tag == DW_TAG_inlined_subroutine;
	f.s.name = die_name(die);
	if (f.s.is_inline)
		die_call_site(b->cu, die, &f.s);
	while ((off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (hi <= lo)
			continue;
		f.s.lo = lo;
		f.s.hi = hi;
		if (build_push(b, &f) < 0)
			break;
	}
	*count = (uint32_t)b->n - *first;
}

static int tag_has_code_scopes(int tag)
{
	switch (tag) {
	case DW_TAG_subprogram:
	case DW_TAG_inlined_subroutine:
	case DW_TAG_lexical_block:
	case DW_TAG_namespace:
	case DW_TAG_module:
	case DW_TAG_class_type:
	case DW_TAG_structure_type:
	case DW_TAG_union_type:
	case DW_TAG_try_block:
	case DW_TAG_catch_block:
	case DW_TAG_compile_unit:
	case DW_TAG_partial_unit:
		return 1;
	}
	return 0;
}

static void build_walk(struct dw_build *b, Dwarf_Die *parent, uint32_t depth, uint32_t pfirst,
		       uint32_t pcount)
{
	Dwarf_Die child;

	if (depth > DW_MAX_DEPTH || b->failed || dwarf_child(parent, &child) != 0)
		return;
	do {
		int tag = dwarf_tag(&child);
		uint32_t first = pfirst, count = pcount;
		if (!tag_has_code_scopes(tag))
			continue;
		if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine)
			build_scope(b, &child, tag, depth, pfirst, pcount, &first, &count);
		/* a scope without code (a declaration, an abstract instance) has no code
		 * children either that belong to it; its children keep the outer parent */
		if (!count) {
			first = pfirst;
			count = pcount;
		}
		build_walk(b, &child, depth + 1, first, count);
	} while (dwarf_siblingof(&child, &child) == 0 && !b->failed);
}

static int frag_cmp(const void *pa, const void *pb)
{
	const struct dw_frag *a = pa, *b = pb;

	if (a->s.lo != b->s.lo)
		return a->s.lo < b->s.lo ? -1 : 1;
	if (a->depth != b->depth)
		return a->depth < b->depth ? -1 : 1;
	return a->orig < b->orig ? -1 : a->orig > b->orig;
}

/* Resolves each fragment's parent to the enclosing scope's fragment that holds its start,
 * then sorts, renumbering parents. */
static int build_finish(struct dw_build *b)
{
	uint32_t *where = sonde__malloc((b->n ? b->n : 1) * sizeof(*where));
	struct dw_cu *cu = b->cu;

	if (!where)
		return -ENOMEM;
	for (size_t i = 0; i < b->n; i++) {
		struct dw_frag *f = &b->v[i];
		f->s.parent = DW_NONE;
		for (uint32_t k = 0; k < f->parent_count; k++) {
			const struct dw_frag *p = &b->v[f->parent_first + k];
			if (f->s.parent == DW_NONE || (p->s.lo <= f->s.lo && f->s.lo < p->s.hi))
				f->s.parent = f->parent_first + k;
		}
	}
	if (b->n > 1)
		qsort(b->v, b->n, sizeof(*b->v), frag_cmp);
	for (size_t i = 0; i < b->n; i++)
		where[b->v[i].orig] = (uint32_t)i;
	cu->scopes = sonde__malloc((b->n ? b->n : 1) * sizeof(*cu->scopes));
	if (!cu->scopes) {
		sonde__free(where);
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->n; i++) {
		cu->scopes[i] = b->v[i].s;
		if (cu->scopes[i].parent != DW_NONE)
			cu->scopes[i].parent = where[cu->scopes[i].parent];
	}
	cu->n_scopes = b->n;
	sonde__free(where);
	return 0;
}

static void cu_build(struct dw_cu *cu)
{
	struct dw_build b = {.cu = cu};

	cu->built = 1;
	if (dwarf_getsrcfiles(&cu->die, &cu->files, &cu->n_files) != 0) {
		cu->files = NULL;
		cu->n_files = 0;
	}
	build_walk(&b, &cu->die, 0, 0, 0);
	if (!b.failed)
		build_finish(&b);
	sonde__free(b.v);
}

/* ---- the unit range table ---- */

static int add_range(struct dwidx *x, uint64_t lo, uint64_t hi, uint32_t cu)
{
	if (sonde__array_grow(&x->ranges, &x->cap_ranges, x->n_ranges + 1,
			       sizeof(*x->ranges), 64) < 0)
		return -ENOMEM;
	x->ranges[x->n_ranges++] = (struct dw_range){lo, hi, cu};
	return 0;
}

static int range_cmp(const void *pa, const void *pb)
{
	const struct dw_range *a = pa, *b = pb;

	if (a->lo != b->lo)
		return a->lo < b->lo ? -1 : 1;
	return a->cu < b->cu ? -1 : a->cu > b->cu;
}

/* A unit that states no ranges of its own is covered by its functions' ranges. */
static int add_unit_ranges(struct dwidx *x, uint32_t i)
{
	struct dw_cu *cu = &x->cus[i];
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;
	size_t before = x->n_ranges;

	while ((off = dwarf_ranges(&cu->die, off, &base, &lo, &hi)) > 0)
		if (hi > lo && add_range(x, lo, hi, i) < 0)
			return -ENOMEM;
	if (x->n_ranges > before)
		return 0;
	cu_build(cu);
	for (size_t k = 0; k < cu->n_scopes; k++)
		if (cu->scopes[k].parent == DW_NONE &&
		    add_range(x, cu->scopes[k].lo, cu->scopes[k].hi, i) < 0)
			return -ENOMEM;
	return 0;
}

static int read_units(struct dwidx *x)
{
	Dwarf_CU *cu = NULL;
	Dwarf_Die cudie;
	uint8_t unit_type;
	size_t cap = 0;

	while (dwarf_get_units(x->dw, cu, &cu, NULL, &unit_type, &cudie, NULL) == 0) {
		if (unit_type == DW_UT_type || unit_type == DW_UT_split_type)
			continue;
		if (sonde__array_grow(&x->cus, &cap, x->n_cus + 1, sizeof(*x->cus), 16) < 0)
			return -ENOMEM;
		x->cus[x->n_cus] = (struct dw_cu){.die = cudie};
		if (add_unit_ranges(x, (uint32_t)x->n_cus) < 0)
			return -ENOMEM;
		x->n_cus++;
		if (x->n_cus >= UINT32_MAX - 1)
			break;
	}
	if (x->n_ranges > 1)
		qsort(x->ranges, x->n_ranges, sizeof(*x->ranges), range_cmp);
	return 0;
}

struct dwidx *sonde__dwidx_open(Elf *elf)
{
	struct dwidx *x = sonde__calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	if (!x->dw) {
		sonde__free(x);
		errno = ENOENT;
		return NULL;
	}
	if (read_units(x) < 0) {
		sonde__dwidx_close(x);
		errno = ENOMEM;
		return NULL;
	}
	return x;
}

void sonde__dwidx_close(struct dwidx *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n_cus; i++)
		sonde__free(x->cus[i].scopes);
	sonde__free(x->cus);
	sonde__free(x->ranges);
	if (x->dw)
		dwarf_end(x->dw);
	sonde__free(x);
}

/* ---- lookups ---- */

static struct dw_cu *find_cu(struct dwidx *x, uint64_t a)
{
	size_t lo = 0, hi = x->n_ranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->ranges[mid].lo <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* ranges of different units may nest (rare); look back a little */
	for (size_t i = lo, k = 0; i > 0 && k < 16; i--, k++)
		if (a < x->ranges[i - 1].hi)
			return &x->cus[x->ranges[i - 1].cu];
	return NULL;
}

/* The innermost scope holding a: the last fragment starting at or below a is that scope
 * or nested in it, so walking up its parents reaches it. */
static uint32_t find_scope(const struct dw_cu *cu, uint64_t a)
{
	size_t lo = 0, hi = cu->n_scopes;
	uint32_t i;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cu->scopes[mid].lo <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return DW_NONE;
	i = (uint32_t)(lo - 1);
	for (size_t steps = 0; i != DW_NONE && steps <= DW_MAX_DEPTH; steps++) {
		const struct dw_scope *s = &cu->scopes[i];
		if (s->lo <= a && a < s->hi)
			return i;
		i = s->parent;
	}
	return DW_NONE;
}

int sonde__dwidx_lookup(struct dwidx *x, uint64_t vaddr, struct dw_result *r)
{
	struct dw_cu *cu = find_cu(x, vaddr);
	Dwarf_Line *line;

	r->n = 0;
	r->file = NULL;
	r->line = 0;
	if (!cu)
		return 0;
	if (!cu->built)
		cu_build(cu);
	line = dwarf_getsrc_die(&cu->die, vaddr);
	if (line) {
		int ln = 0;
		r->file = dwarf_linesrc(line, NULL, NULL);
		if (dwarf_lineno(line, &ln) == 0 && ln > 0)
			r->line = (uint32_t)ln;
	}
	for (uint32_t i = find_scope(cu, vaddr); i != DW_NONE && r->n < 64;) {
		struct dw_scope *s = &cu->scopes[i];
		if (s->lo <= vaddr && vaddr < s->hi) {
			r->scopes[r->n++] = s;
			if (!s->is_inline)
				break;
		}
		i = s->parent;
	}
	return 1;
}
