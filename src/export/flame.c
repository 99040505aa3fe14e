#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "export/flame.h"

static bool fnode_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct flame_node *a = &((const struct flame *)ctx)->nodes.v[id];
	const struct flame_node *b = key;

	return a->parent == b->parent && a->func == b->func;
}

static int64_t intern(struct flame *f, uint32_t parent, uint32_t func)
{
	struct flame_node k = {.parent = parent, .func = func};
	uint32_t h = (uint32_t)u64_hash((uint64_t)parent << 32 | func);
	int64_t id = sonde__idmap_find(&f->index, h, fnode_eq, f, &k);
	if (id >= 0)
		return id;
	struct flame_node *n = ARR_PUSH(f->nodes);
	if (!n)
		return -ENOMEM;
	k.depth = f->nodes.v[parent].depth + 1;
	*n = k;
	if (k.depth > f->max_depth)
		f->max_depth = k.depth;
	if (sonde__idmap_insert(&f->index, h, f->nodes.n - 1) < 0) {
		f->nodes.n--;
		return -ENOMEM;
	}
	return f->nodes.n - 1;
}

/* Maps every stack node to a flame node: a location expands to its inlined frames,
 * outermost first (lines are stored innermost first). */
static int map_nodes(struct flame *f, const struct sonde_profile *p)
{
	for (uint32_t i = 1; i < p->nodes.n; i++) {
		const struct prof_node *pn = &p->nodes.v[i];
		const struct prof_loc *l = &p->locs.v[pn->loc];
		int64_t at = f->of_node[pn->parent];

		if (!l->n_lines)
			at = intern(f, (uint32_t)at, l->display_func);
		for (uint32_t j = l->n_lines; j-- > 0 && at >= 0;)
			at = intern(f, (uint32_t)at, p->lines.v[l->first_line + j].func);
		if (at < 0)
			return (int)at;
		f->of_node[i] = (uint32_t)at;
	}
	return 0;
}

struct child {
	uint32_t parent;
	uint32_t id;
	const char *name;
};

static int child_cmp(const void *a, const void *b)
{
	const struct child *x = a, *y = b;

	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Links children in name order (the same name can come twice from different modules). */
static int link_children(struct flame *f, const struct sonde_profile *p)
{
	uint32_t n = f->nodes.n - 1;
	struct child *c = sonde__malloc(((size_t)n + 1) * sizeof(*c));

	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct flame_node *fn = &f->nodes.v[i + 1];
		c[i] = (struct child){fn->parent, i + 1, prof_str(p, p->funcs.v[fn->func].name)};
	}
	qsort(c, n, sizeof(*c), child_cmp);
	for (uint32_t i = n; i-- > 0;) {
		struct flame_node *parent = &f->nodes.v[c[i].parent];
		f->nodes.v[c[i].id].next_sibling = parent->first_child;
		parent->first_child = c[i].id;
	}
	sonde__free(c);
	return 0;
}

uint32_t sonde__flame_next(const struct flame *f, uint32_t it)
{
	const struct flame_node *n = &f->nodes.v[it];

	if (n->first_child)
		return n->first_child;
	while (it) {
		n = &f->nodes.v[it];
		if (n->next_sibling)
			return n->next_sibling;
		it = n->parent;
	}
	return 0;
}

int sonde__flame_build(struct flame *f, const struct sonde_profile *p)
{
	return sonde__flame_build_metric(f, p, SONDE_PROFILE_METRIC_CPU);
}

int sonde__flame_build_metric(struct flame *f, const struct sonde_profile *p,
			      enum sonde_profile_metric m)
{
	int err = -ENOMEM;

	*f = (struct flame){0};
	f->of_node = sonde__calloc(p->nodes.n, sizeof(*f->of_node));
	if (!f->of_node || !ARR_PUSH(f->nodes))
		goto fail;
	err = map_nodes(f, p);
	if (err)
		goto fail;
	for (uint32_t i = 0; i < p->samples.n; i++)
		f->nodes.v[f->of_node[p->samples.v[i].node]].self +=
			sonde__prof_sample_weight(p, &p->samples.v[i], m);
	for (uint32_t i = 0; i < p->offcpu.n; i++)
		f->nodes.v[f->of_node[p->offcpu.v[i].node]].self +=
			sonde__prof_offcpu_weight(&p->offcpu.v[i], m);
	/* children have larger ids than their parents: one backward pass sums totals */
	for (uint32_t i = f->nodes.n; i-- > 0;) {
		struct flame_node *n = &f->nodes.v[i];
		n->total += n->self;
		if (i)
			f->nodes.v[n->parent].total += n->total;
	}
	err = link_children(f, p);
	if (err)
		goto fail;
	/* x positions: children start where their parent does, side by side in link order;
	 * parents have smaller ids, so they are placed before their children */
	for (uint32_t i = 0; i < f->nodes.n; i++) {
		uint64_t x = f->nodes.v[i].x;
		for (uint32_t c = f->nodes.v[i].first_child; c; c = f->nodes.v[c].next_sibling) {
			f->nodes.v[c].x = x;
			x += f->nodes.v[c].total;
		}
	}
	return 0;
fail:
	sonde__flame_free(f);
	return err;
}

void sonde__flame_free(struct flame *f)
{
	if (!f)
		return;
	ARR_FREE(f->nodes);
	sonde__idmap_free(&f->index);
	sonde__free(f->of_node);
	*f = (struct flame){0};
}
