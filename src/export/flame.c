#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "export/flame.h"

/* What a stack's outermost node is (top_mark): reached by the idle task's or kernel
 * threads' stacks only, or a root frame to leave out. */
enum { TOP_KTHREAD = 1, TOP_OTHER = 2, TOP_ROOTED = 4, TOP_IDLE = 8, TOP_UNROOT = 16 };

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
 * outermost first (lines are stored innermost first). A stack's outermost node hangs
 * under top[node]'s choice: the root, or the idle group; unroot[node] maps it there
 * instead of to a node of its own. */
static int map_nodes(struct flame *f, const struct sonde_profile *p, const uint8_t *top_mark)
{
	for (uint32_t i = 1; i < p->nodes.n; i++) {
		const struct prof_node *pn = &p->nodes.v[i];
		const struct prof_loc *l = &p->locs.v[pn->loc];
		int64_t at = f->of_node[pn->parent];

		if (!pn->parent && (top_mark[i] & TOP_IDLE)) {
			if (!f->idle) {
				at = intern(f, 0, FLAME_IDLE_FUNC);
				if (at < 0)
					return (int)at;
				f->idle = (uint32_t)at;
			}
			at = f->idle;
		}
		if (!pn->parent && (top_mark[i] & TOP_UNROOT)) {
			f->of_node[i] = (uint32_t)at;
			continue;
		}
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
	uint64_t weight; /* 0 unless ordered by weight; the idle group's 1 */
};

static int child_cmp(const void *a, const void *b)
{
	const struct child *x = a, *y = b;

	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	if (x->weight != y->weight)
		return x->weight > y->weight ? -1 : 1;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Links children in name order (the same name can come twice from different modules), or
 * the root's and the idle group's by weight. */
static int link_children(struct flame *f, const struct sonde_profile *p, bool heaviest_first)
{
	uint32_t n = f->nodes.n - 1;
	struct child *c = sonde__malloc(((size_t)n + 1) * sizeof(*c));

	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct flame_node *fn = &f->nodes.v[i + 1];
		c[i] = (struct child){fn->parent, i + 1, sonde__flame_name(f, p, i + 1), 0};
		if (heaviest_first && (!fn->parent || fn->parent == f->idle))
			/* +1 so that the idle group (1) is below every weighed process */
			c[i].weight = i + 1 == f->idle ? 1 : fn->total + 1;
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

const char *sonde__flame_name(const struct flame *f, const struct sonde_profile *p, uint32_t id)
{
	if (!id)
		return "all";
	uint32_t func = f->nodes.v[id].func;
	if (func == FLAME_IDLE_FUNC)
		return "[idle and kernel threads]";
	return prof_str(p, p->funcs.v[func].name);
}

int sonde__flame_build(struct flame *f, const struct sonde_profile *p)
{
	return sonde__flame_build_metric(f, p, SONDE_PROFILE_METRIC_CPU);
}

int sonde__flame_build_metric(struct flame *f, const struct sonde_profile *p,
			      enum sonde_profile_metric m)
{
	struct flame_opts o = {.metric = m};

	return sonde__flame_build_opts(f, p, &o);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Whether a location is user code: in a module of a process, or a raw address no module
 * covered (JIT code). The kernel's module and the model's own frames (roots,
 * [truncated], off-CPU states: no module, address 0) are not. */
static bool loc_is_user(const struct sonde_profile *p, const struct prof_loc *l)
{
	if (!l->module)
		return l->addr != 0;
	return !(p->modules.v[l->module].flags & SONDE_MODULE_KERNEL);
}

/* Which threads are the idle task or kernel threads: pid 0, or a process with no module of
 * its own none of whose weighed stacks (user[node]) has a user frame. */
static uint8_t *kernel_threads(const struct sonde_profile *p, const uint8_t *user,
			       enum sonde_profile_metric m)
{
	uint8_t *k = sonde__calloc(p->threads.n ? p->threads.n : 1, 1);
	uint32_t *pids = sonde__calloc(p->modules.n + 1, sizeof(*pids));
	size_t n = 0;

	if (!k || !pids) {
		sonde__free(k);
		sonde__free(pids);
		return NULL;
	}
	for (uint32_t i = 1; i < p->modules.n; i++)
		if (!(p->modules.v[i].flags & SONDE_MODULE_KERNEL))
			pids[n++] = p->modules.v[i].pid;
	qsort(pids, n, sizeof(*pids), u32_cmp);
	for (uint32_t t = 1; t < p->threads.n; t++) {
		uint32_t pid = p->threads.v[t].pid;
		k[t] = !pid || !bsearch(&pid, pids, n, sizeof(*pids), u32_cmp);
	}
	sonde__free(pids);
	for (uint32_t i = 0; i < p->samples.n; i++) {
		const struct prof_sample *s = &p->samples.v[i];
		if (user[s->node] && p->threads.v[s->thread].pid &&
		    sonde__prof_sample_weight(p, s, m))
			k[s->thread] = 0;
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *o = &p->offcpu.v[i];
		if (user[o->node] && p->threads.v[o->thread].pid &&
		    sonde__prof_offcpu_weight(o, m))
			k[o->thread] = 0;
	}
	k[0] = 0;
	return k;
}

/* Marks each stack's outermost node (top_mark) from the stacks that reach it, and says
 * which threads' weight to leave out (hide[thread]). */
static int mark_tops(struct flame *f, const struct sonde_profile *p, const struct flame_opts *o,
		     uint8_t *mark, uint8_t **hide)
{
	uint32_t *top = sonde__calloc(p->nodes.n, sizeof(*top));
	uint8_t *user = sonde__calloc(p->nodes.n, 1), *k = NULL;
	int err = -ENOMEM;

	*hide = NULL;
	if (!top || !user)
		goto out;
	/* parents have smaller ids: one forward pass */
	for (uint32_t i = 1; i < p->nodes.n; i++) {
		const struct prof_node *pn = &p->nodes.v[i];
		top[i] = pn->parent ? top[pn->parent] : i;
		user[i] = user[pn->parent] || loc_is_user(p, &p->locs.v[pn->loc]);
	}
	if (o->idle != FLAME_IDLE_KEEP && !(k = kernel_threads(p, user, o->metric)))
		goto out;
	for (uint32_t i = 0; i < p->samples.n; i++) {
		const struct prof_sample *s = &p->samples.v[i];
		if (s->node)
			mark[top[s->node]] |= (k && k[s->thread] ? TOP_KTHREAD : TOP_OTHER) |
					      (s->thread ? TOP_ROOTED : 0);
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *iv = &p->offcpu.v[i];
		if (iv->node)
			mark[top[iv->node]] |= (k && k[iv->thread] ? TOP_KTHREAD : TOP_OTHER) |
					       (iv->thread ? TOP_ROOTED : 0);
	}
	for (uint32_t i = 1; i < p->nodes.n; i++) {
		if (p->nodes.v[i].parent)
			continue;
		/* a root frame is the outermost node of every stack of a known thread */
		if (o->unroot && p->roots && (mark[i] & TOP_ROOTED))
			mark[i] |= TOP_UNROOT;
		if (o->idle == FLAME_IDLE_GROUP && (mark[i] & (TOP_KTHREAD | TOP_OTHER)) == TOP_KTHREAD)
			mark[i] |= TOP_IDLE;
	}
	err = 0;
	if (o->idle == FLAME_IDLE_HIDE) {
		*hide = k;
		k = NULL;
	}
out:
	sonde__free(top);
	sonde__free(user);
	sonde__free(k);
	return err;
}

uint32_t sonde__flame_count_processes(const struct sonde_profile *p, enum sonde_profile_metric m)
{
	uint32_t *pids = sonde__calloc(p->threads.n + 1, sizeof(*pids)), n = 0, distinct = 0;
	uint8_t *weighs = sonde__calloc(p->threads.n + 1, 1);

	if (pids && weighs) {
		for (uint32_t i = 0; i < p->samples.n; i++)
			if (sonde__prof_sample_weight(p, &p->samples.v[i], m))
				weighs[p->samples.v[i].thread] = 1;
		for (uint32_t i = 0; i < p->offcpu.n; i++)
			if (sonde__prof_offcpu_weight(&p->offcpu.v[i], m))
				weighs[p->offcpu.v[i].thread] = 1;
		for (uint32_t t = 1; t < p->threads.n; t++)
			if (weighs[t])
				pids[n++] = p->threads.v[t].pid;
		qsort(pids, n, sizeof(*pids), u32_cmp);
		for (uint32_t i = 0; i < n; i++)
			distinct += !i || pids[i] != pids[i - 1];
	}
	sonde__free(pids);
	sonde__free(weighs);
	return distinct;
}

int sonde__flame_build_opts(struct flame *f, const struct sonde_profile *p,
			    const struct flame_opts *o)
{
	enum sonde_profile_metric m = o->metric;
	uint8_t *mark = NULL, *hide = NULL;
	int err = -ENOMEM;

	*f = (struct flame){0};
	f->of_node = sonde__calloc(p->nodes.n, sizeof(*f->of_node));
	mark = sonde__calloc(p->nodes.n, 1);
	if (!f->of_node || !mark || !ARR_PUSH(f->nodes))
		goto fail;
	err = mark_tops(f, p, o, mark, &hide);
	if (!err)
		err = map_nodes(f, p, mark);
	if (err)
		goto fail;
	for (uint32_t i = 0; i < p->samples.n; i++) {
		const struct prof_sample *s = &p->samples.v[i];
		uint64_t w = sonde__prof_sample_weight(p, s, m);
		if (hide && hide[s->thread])
			f->hidden += w;
		else
			f->nodes.v[f->of_node[s->node]].self += w;
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *iv = &p->offcpu.v[i];
		uint64_t w = sonde__prof_offcpu_weight(iv, m);
		if (hide && hide[iv->thread])
			f->hidden += w;
		else
			f->nodes.v[f->of_node[iv->node]].self += w;
	}
	/* children have larger ids than their parents: one backward pass sums totals */
	for (uint32_t i = f->nodes.n; i-- > 0;) {
		struct flame_node *n = &f->nodes.v[i];
		n->total += n->self;
		if (i)
			f->nodes.v[n->parent].total += n->total;
	}
	for (uint32_t i = 0; i < f->nodes.n; i++)
		if (f->nodes.v[i].total && f->nodes.v[i].depth > f->weighed_depth)
			f->weighed_depth = f->nodes.v[i].depth;
	err = link_children(f, p, o->heaviest_first);
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
	sonde__free(mark);
	sonde__free(hide);
	return 0;
fail:
	sonde__free(mark);
	sonde__free(hide);
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
