/* Folded stacks (the input format of Brendan Gregg's flamegraph.pl and of many other
 * tools): one line per distinct stack, "outer;...;inner count", in tree order. */
#include <errno.h>

#include "base/alloc.h"
#include "export/flame.h"
#include "export/out.h"

/* ';' separates frames and '\n' lines, so neither may appear inside a name. */
static void put_name(struct out *o, const char *s)
{
	const char *start = s;

	for (; *s; s++) {
		if (*s == ';' || *s == '\n' || *s == '\r') {
			sonde__out_write(o, start, (size_t)(s - start));
			sonde__out_putc(o, *s == ';' ? ':' : ' ');
			start = s + 1;
		}
	}
	sonde__out_write(o, start, (size_t)(s - start));
}

int sonde__prof_write_folded(const struct sonde_profile *p, int fd, enum sonde_profile_metric m)
{
	struct flame f;
	struct out o;
	uint32_t *path;
	int err = sonde__flame_build_metric(&f, p, m);
	/* time metrics in microseconds, as flamegraph.pl users expect of off-CPU graphs */
	uint64_t unit = m == SONDE_PROFILE_METRIC_CPU ? 1 : 1000;

	if (err)
		return err;
	path = sonde__malloc(((size_t)f.max_depth + 1) * sizeof(*path));
	if (!path) {
		sonde__flame_free(&f);
		return -ENOMEM;
	}
	sonde__out_init(&o, fd);
	for (uint32_t it = sonde__flame_next(&f, 0); it && !o.err; it = sonde__flame_next(&f, it)) {
		const struct flame_node *n = &f.nodes.v[it];
		path[n->depth] = it;
		if (n->self < unit)
			continue;
		for (uint32_t d = 1; d <= n->depth; d++) {
			if (d > 1)
				sonde__out_putc(&o, ';');
			uint32_t func = f.nodes.v[path[d]].func;
			put_name(&o, prof_str(p, p->funcs.v[func].name));
		}
		sonde__out_putc(&o, ' ');
		sonde__out_u64(&o, (n->self + unit / 2) / unit);
		sonde__out_putc(&o, '\n');
	}
	err = sonde__out_close(&o);
	sonde__free(path);
	sonde__flame_free(&f);
	return err;
}
