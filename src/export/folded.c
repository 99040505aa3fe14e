/* Folded stacks (the input format of Brendan Gregg's flamegraph.pl and of many other
 * tools): the profile's function tree handed to the readers' one folded writer
 * (sonde_view__write_folded, docs/view.md), so that `sonde convert` and `sonde report
 * --folded` print the same lines by the same rules. */
#include <errno.h>

#include <sonde/view.h>

#include "base/alloc.h"
#include "export/flame.h"

int sonde__prof_write_folded(const struct sonde_profile *p, int fd, enum sonde_profile_metric m)
{
	struct flame f;
	uint32_t *path, *stack;
	struct sonde_view *v;
	int err = sonde__flame_build_metric(&f, p, m);
	/* time metrics in microseconds, as flamegraph.pl users expect of off-CPU graphs */
	struct sonde_view_folded_opts o = {
		.sz = sizeof(o),
		.unit = m == SONDE_PROFILE_METRIC_CPU ? 1 : 1000,
	};
	struct sonde_view_event e = {.sz = sizeof(e), .cpu = SONDE_VIEW_CPU_NONE};

	if (err)
		return err;
	path = sonde__calloc((size_t)f.max_depth + 1, sizeof(*path));
	stack = sonde__calloc((size_t)f.max_depth + 1, sizeof(*stack));
	/* the view's function id of each tree node's function, by tab_func id */
	uint32_t *func_of = sonde__calloc((size_t)p->funcs.n + 1, sizeof(*func_of));
	v = sonde_view__new(NULL);
	if (!path || !stack || !func_of || !v)
		err = -ENOMEM;
	for (uint32_t it = err ? 0 : sonde__flame_next(&f, 0); it; it = sonde__flame_next(&f, it)) {
		const struct flame_node *n = &f.nodes.v[it];
		path[n->depth] = it;
		if (!func_of[n->func]) {
			int64_t id = sonde_view__func(v, prof_str(p, p->funcs.v[n->func].name), NULL);
			if (id < 0) {
				err = (int)id;
				break;
			}
			func_of[n->func] = (uint32_t)id;
		}
		if (!n->self)
			continue;
		/* the path from this node up to the root's child, innermost first */
		for (uint32_t d = n->depth; d >= 1; d--)
			stack[n->depth - d] = func_of[f.nodes.v[path[d]].func];
		e.weight = n->self;
		int r = sonde_view__add(v, &e, stack, n->depth);
		if (r < 0) {
			err = r;
			break;
		}
	}
	if (!err)
		err = sonde_view__write_folded(v, fd, &o);
	sonde_view__free(v);
	sonde__free(func_of);
	sonde__free(stack);
	sonde__free(path);
	sonde__flame_free(&f);
	return err;
}
