/* The profile model: interning of strings, functions and stacks. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/spool.h>
#include <sonde/view.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "export/profile.h"

int64_t sonde__prof_intern(struct sonde_profile *p, const char *s)
{
	return sonde__strtab_intern(&p->strs, s);
}

struct sonde_profile *sonde_profile__new(const struct sonde_profile_info *info)
{
	struct sonde_profile *p;

	if (!OPTS_VALID(info, sonde_profile_info)) {
		errno = EINVAL;
		return NULL;
	}
	if (!(p = sonde__calloc(1, sizeof(*p))))
		return NULL;
	OPTS_COPY(&p->info, info);
	/* entry 0 of every table is a placeholder so that id 0 means "none" */
	if (sonde__strtab_init(&p->strs) < 0 || !ARR_PUSH(p->modules) || !ARR_PUSH(p->threads) ||
	    sonde__functab_init(&p->funcs) < 0 || !ARR_PUSH(p->locs) || !ARR_PUSH(p->nodes))
		goto fail;
	return p;
fail:
	sonde_profile__free(p);
	errno = ENOMEM;
	return NULL;
}

void sonde_profile__free(struct sonde_profile *p)
{
	if (!p)
		return;
	sonde__strtab_free(&p->strs);
	ARR_FREE(p->modules);
	ARR_FREE(p->threads);
	sonde__functab_free(&p->funcs);
	ARR_FREE(p->lines);
	ARR_FREE(p->locs);
	ARR_FREE(p->nodes);
	sonde__idmap_free(&p->node_index);
	ARR_FREE(p->samples);
	ARR_FREE(p->offcpu);
	sonde__free(p);
}

static int64_t intern_build_id(struct sonde_profile *p, const uint8_t *id, size_t len)
{
	char hex[2 * 32 + 1];

	if (!id || !len)
		return 0;
	if (len > 32)
		return -SONDE_E_RANGE;
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	return sonde__prof_intern(p, hex);
}

int sonde_profile__add_module(struct sonde_profile *p, const struct sonde_profile_module *m,
			      uint32_t *id)
{
	if (!p || !m || m->end < m->start)
		return -EINVAL;
	int64_t path = sonde__prof_intern(p, m->path);
	int64_t bid = intern_build_id(p, m->build_id, m->build_id_len);
	if (path < 0 || bid < 0)
		return path < 0 ? (int)path : (int)bid;
	struct prof_module *pm = ARR_PUSH(p->modules);
	if (!pm)
		return -ENOMEM;
	*pm = (struct prof_module){.pid = m->pid,
				   .flags = m->flags,
				   .start = m->start,
				   .end = m->end,
				   .pgoff = m->pgoff,
				   .path = (uint32_t)path,
				   .build_id = (uint32_t)bid};
	if (id)
		*id = p->modules.n - 1;
	return 0;
}

int sonde_profile__add_thread(struct sonde_profile *p, uint32_t pid, uint32_t tid, const char *comm,
			      uint32_t *id)
{
	if (!p)
		return -EINVAL;
	int64_t c = sonde__prof_intern(p, comm);
	if (c < 0)
		return (int)c;
	struct prof_thread *t = ARR_PUSH(p->threads);
	if (!t)
		return -ENOMEM;
	*t = (struct prof_thread){pid, tid, (uint32_t)c};
	if (id)
		*id = p->threads.n - 1;
	return 0;
}

static int add_line(struct sonde_profile *p, const struct sonde_sym_frame *s)
{
	int64_t name = sonde__prof_intern(p, s->name ? s->name : "??");
	int64_t file = sonde__prof_intern(p, s->file);
	int64_t mod = sonde__prof_intern(p, s->module);
	if (name < 0 || file < 0 || mod < 0)
		return -ENOMEM;
	struct tab_func f = {(uint32_t)name, (uint32_t)file, (uint32_t)mod, s->kind, s->origin};
	int64_t fid = sonde__functab_intern(&p->funcs, &f);
	if (fid < 0)
		return (int)fid;
	struct prof_line *l = ARR_PUSH(p->lines);
	if (!l)
		return -ENOMEM;
	*l = (struct prof_line){(uint32_t)fid, s->line, s->inline_depth};
	return 0;
}

const char *sonde__prof_basename(const struct sonde_profile *p, uint32_t str)
{
	const char *s = prof_str(p, str);
	const char *slash = strrchr(s, '/');

	return slash && slash[1] ? slash + 1 : s;
}

/* The name flame views give a location nobody symbolized: "module+0xoffset" or
 * "0xaddress", the same text the symbolizer's address-only fallback uses. */
static int64_t display_func(struct sonde_profile *p, uint32_t module, uint64_t addr)
{
	char name[512];
	struct tab_func f = {0};

	if (module) {
		const struct prof_module *m = &p->modules.v[module];
		const char *base = m->path ? sonde__prof_basename(p, m->path) : "[anon]";
		snprintf(name, sizeof(name), "%s+0x%" PRIx64, base, addr);
		f.module = m->path;
		f.kind = m->flags & SONDE_MODULE_KERNEL ? SONDE_SYM_KERNEL
			 : m->flags & SONDE_MODULE_JIT	? SONDE_SYM_JIT
							: SONDE_SYM_NATIVE;
	} else {
		snprintf(name, sizeof(name), "0x%" PRIx64, addr);
	}
	int64_t s = sonde__prof_intern(p, name);
	if (s < 0)
		return s;
	f.name = (uint32_t)s;
	f.origin = SONDE_SYM_ORIGIN_NONE;
	return sonde__functab_intern(&p->funcs, &f);
}

int sonde_profile__add_location(struct sonde_profile *p, uint32_t module, uint64_t addr,
				const struct sonde_sym_frame *lines, size_t n, uint32_t *id)
{
	if (!p || module >= p->modules.n || (n && !lines) || n > UINT32_MAX)
		return -EINVAL;
	uint32_t first = p->lines.n;
	for (size_t i = 0; i < n; i++) {
		int err = add_line(p, &lines[i]);
		if (err) {
			p->lines.n = first;
			return err;
		}
	}
	int64_t df = n ? p->lines.v[first + n - 1].func : display_func(p, module, addr);
	struct prof_loc *l = df < 0 ? NULL : ARR_PUSH(p->locs);
	if (!l) {
		p->lines.n = first;
		return df < 0 ? (int)df : -ENOMEM;
	}
	*l = (struct prof_loc){.module = module,
			       .addr = addr,
			       .first_line = first,
			       .n_lines = (uint32_t)n,
			       .display_func = (uint32_t)df};
	if (id)
		*id = p->locs.n - 1;
	return 0;
}

uint64_t sonde__prof_loc_address(const struct sonde_profile *p, const struct prof_loc *l)
{
	if (!l->module)
		return l->addr;
	const struct prof_module *m = &p->modules.v[l->module];
	/* kernel modules record absolute addresses (see sonde_symbolizer__symbolize) */
	if (m->flags & SONDE_MODULE_KERNEL)
		return l->addr;
	return m->start + (l->addr - m->pgoff);
}

static bool node_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct prof_node *a = &((const struct sonde_profile *)ctx)->nodes.v[id];
	const struct prof_node *b = key;

	return a->parent == b->parent && a->loc == b->loc;
}

int64_t sonde__prof_add_node(struct sonde_profile *p, uint32_t parent, uint32_t loc)
{
	struct prof_node k = {parent, loc};
	uint32_t h = (uint32_t)u64_hash((uint64_t)parent << 32 | loc);
	int64_t id = sonde__idmap_find(&p->node_index, h, node_eq, p, &k);
	if (id >= 0)
		return id;
	struct prof_node *n = ARR_PUSH(p->nodes);
	if (!n)
		return -ENOMEM;
	*n = k;
	if (sonde__idmap_insert(&p->node_index, h, p->nodes.n - 1) < 0) {
		p->nodes.n--;
		return -ENOMEM;
	}
	return p->nodes.n - 1;
}

int sonde_profile__add_sample(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
			      const uint32_t *locs, size_t n, uint64_t count)
{
	if (!p || thread >= p->threads.n || (n && !locs))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!locs[i] || locs[i] >= p->locs.n)
			return -SONDE_E_REFERENCE;
	if (count == 0)
		return 0;
	int64_t node = 0;
	/* the tree grows from the outermost frame, so walk the stack backwards */
	for (size_t i = n; i-- > 0;) {
		node = sonde__prof_add_node(p, (uint32_t)node, locs[i]);
		if (node < 0)
			return (int)node;
	}
	return sonde__prof_add_sample_node(p, time_ns, thread, (uint32_t)node, SONDE_SPOOL_CPU_NONE,
					   count);
}

int sonde__prof_add_sample_node(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
				uint32_t node, uint32_t cpu, uint64_t count)
{
	struct prof_sample *s = ARR_PUSH(p->samples);
	if (!s)
		return -ENOMEM;
	*s = (struct prof_sample){time_ns, count, thread, node, cpu};
	if (p->samples.n == 1 || time_ns < p->first_time_ns)
		p->first_time_ns = time_ns;
	if (time_ns > p->last_time_ns)
		p->last_time_ns = time_ns;
	p->total += count;
	return 0;
}

uint64_t sonde_profile__sample_count(const struct sonde_profile *p)
{
	return p ? p->total : 0;
}

void sonde__prof_view_filter(const struct sonde_profile_spool_opts *o, uint64_t start_ns,
			     struct sonde_view_filter *f)
{
	static const struct sonde_profile_spool_opts none = {.sz = sizeof(none)};

	o = o ? o : &none;
	*f = (struct sonde_view_filter){.sz = sizeof(*f),
					.pids = o->pids,
					.n_pids = o->n_pids,
					.tids = o->tids,
					.n_tids = o->n_tids,
					.comms = o->comms,
					.n_comms = o->n_comms,
					.cpus = o->cpus,
					.n_cpus = o->n_cpus};
	if (o->time_range)
		sonde_view_filter__time_s(f, start_ns, o->time_from_s, o->time_to_s);
}

void sonde__prof_view_filters(const struct sonde_profile_spool_opts *o, uint64_t start_ns,
			      struct sonde_view_filter *who, struct sonde_view_filter *when)
{
	sonde__prof_view_filter(o, start_ns, who);
	*when = *who;
	who->n_cpus = 0;
	who->time_range = 0;
	when->n_pids = when->n_tids = when->n_comms = 0;
}

const char *sonde__prof_state_name(uint32_t state)
{
	/* the readers' names (include/sonde/view.h), whose states count from on-CPU; past
	 * the unknown state, on-CPU time no sample saw */
	return sonde_view_state_name(
		1 + (state <= PROF_STATE_UNKNOWN + 1 ? state : SONDE_OFFCPU_OTHER));
}

/* The pseudo-frame of a state: a location of no module whose one line is its name. */
static int state_loc(struct sonde_profile *p, uint32_t state, uint32_t *loc)
{
	if (!p->state_loc[state]) {
		struct sonde_sym_frame f = {.name = sonde__prof_state_name(state),
					    .origin = SONDE_SYM_ORIGIN_NONE};
		int err = sonde_profile__add_location(p, 0, 0, &f, 1, &p->state_loc[state]);
		if (err)
			return err;
	}
	*loc = p->state_loc[state];
	return 0;
}

int sonde__prof_add_unsampled(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
			      uint32_t node, uint64_t on_ns)
{
	uint32_t loc;
	int err = state_loc(p, PROF_STATE_UNKNOWN + 1, &loc);
	int64_t leaf = err ? err : sonde__prof_add_node(p, node, loc);

	if (leaf < 0)
		return (int)leaf;
	err = sonde__prof_add_sample_node(p, time_ns, thread, (uint32_t)leaf, SONDE_SPOOL_CPU_NONE,
					  0);
	if (err)
		return err;
	p->samples.v[p->samples.n - 1].wall_ns = on_ns;
	p->wall_on_ns += on_ns;
	return 0;
}

int sonde__prof_add_offcpu_node(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
				uint32_t cpu, uint32_t node, uint64_t duration_ns, uint32_t state)
{
	uint32_t loc;

	if (state > PROF_STATE_UNKNOWN)
		state = SONDE_OFFCPU_OTHER;
	int err = state_loc(p, state, &loc);
	if (err)
		return err;
	int64_t leaf = sonde__prof_add_node(p, node, loc);
	if (leaf < 0)
		return (int)leaf;
	struct prof_offcpu *o = ARR_PUSH(p->offcpu);
	if (!o)
		return -ENOMEM;
	*o = (struct prof_offcpu){time_ns, duration_ns, thread, (uint32_t)leaf, cpu, state};
	p->offcpu_ns += duration_ns;
	return 0;
}

int sonde_profile__add_offcpu(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
			      uint32_t cpu, const uint32_t *locs, size_t n, uint64_t duration_ns,
			      uint32_t state)
{
	if (!p || thread >= p->threads.n || (n && !locs) || state >= SONDE_OFFCPU_STATES)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!locs[i] || locs[i] >= p->locs.n)
			return -SONDE_E_REFERENCE;
	int64_t node = 0;
	for (size_t i = n; i-- > 0;) {
		node = sonde__prof_add_node(p, (uint32_t)node, locs[i]);
		if (node < 0)
			return (int)node;
	}
	return sonde__prof_add_offcpu_node(p, time_ns, thread, cpu, (uint32_t)node, duration_ns,
					   state);
}

int sonde_profile__add_offcpu_short(struct sonde_profile *p, uint32_t thread, uint64_t count,
				    uint64_t total_ns)
{
	if (!p || thread >= p->threads.n)
		return -EINVAL;
	p->short_count += count;
	p->short_ns += total_ns;
	return 0;
}

uint64_t sonde_profile__offcpu_count(const struct sonde_profile *p, uint64_t *short_count,
				     uint64_t *short_ns)
{
	if (short_count)
		*short_count = p ? p->short_count : 0;
	if (short_ns)
		*short_ns = p ? p->short_ns : 0;
	return p ? p->offcpu.n : 0;
}

uint64_t sonde__prof_sample_weight(const struct sonde_profile *p, const struct prof_sample *s,
				   enum sonde_profile_metric m)
{
	if (m == SONDE_PROFILE_METRIC_CPU)
		return s->count;
	if (m == SONDE_PROFILE_METRIC_WALL)
		return p->exact_wall ? s->wall_ns : s->count * p->info.sample_period_ns;
	return 0;
}

uint64_t sonde__prof_offcpu_weight(const struct prof_offcpu *o, enum sonde_profile_metric m)
{
	return m == SONDE_PROFILE_METRIC_CPU ? 0 : o->duration_ns;
}

uint64_t sonde_profile__total(const struct sonde_profile *p, enum sonde_profile_metric m)
{
	if (!p)
		return 0;
	switch (m) {
	case SONDE_PROFILE_METRIC_CPU:
		return p->total;
	case SONDE_PROFILE_METRIC_OFF_CPU:
		return p->offcpu_ns;
	case SONDE_PROFILE_METRIC_WALL:
		return (p->exact_wall ? p->wall_on_ns : p->total * p->info.sample_period_ns) +
		       p->offcpu_ns;
	}
	return 0;
}

static const char *const metric_names[] = {"cpu", "off-cpu", "wall"};

int sonde_profile__parse_metric(const char *name, enum sonde_profile_metric *out)
{
	for (size_t i = 0; name && i < sizeof(metric_names) / sizeof(metric_names[0]); i++) {
		if (strcmp(name, metric_names[i]) == 0) {
			*out = (enum sonde_profile_metric)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *sonde_profile__metric_name(enum sonde_profile_metric m)
{
	return (unsigned)m < sizeof(metric_names) / sizeof(metric_names[0]) ? metric_names[m]
									    : NULL;
}

static const struct {
	const char *suffix;
	enum sonde_profile_format fmt;
} suffixes[] = {
	{".pb.gz", SONDE_PROFILE_PPROF},     {".pprof", SONDE_PROFILE_PPROF},
	{".folded", SONDE_PROFILE_FOLDED},   {".txt", SONDE_PROFILE_FOLDED},
	{".json", SONDE_PROFILE_SPEEDSCOPE}, {".svg", SONDE_PROFILE_SVG},
};

int sonde_profile__format_from_path(const char *path, enum sonde_profile_format *out)
{
	size_t len = path ? strlen(path) : 0;

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t sl = strlen(suffixes[i].suffix);
		if (len > sl && strcmp(path + len - sl, suffixes[i].suffix) == 0) {
			*out = suffixes[i].fmt;
			return 0;
		}
	}
	return -EINVAL;
}

int sonde_profile__parse_format(const char *name, enum sonde_profile_format *out)
{
	static const char *const names[] = {"pprof", "folded", "speedscope", "svg"};

	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(name, names[i]) == 0) {
			*out = (enum sonde_profile_format)i;
			return 0;
		}
	}
	return -EINVAL;
}

int sonde_profile__write(const struct sonde_profile *p, enum sonde_profile_format fmt, int fd,
			 const struct sonde_profile_write_opts *opts)
{
	const char *title = OPTS_GET(opts, title, NULL);
	enum sonde_profile_metric m = OPTS_GET(opts, metric, SONDE_PROFILE_METRIC_CPU);

	if (!p || fd < 0 || !OPTS_VALID(opts, sonde_profile_write_opts) ||
	    !sonde_profile__metric_name(m))
		return -EINVAL;
	if (!title)
		title = "sonde profile";
	switch (fmt) {
	case SONDE_PROFILE_PPROF:
		return sonde__prof_write_pprof(p, fd, m);
	case SONDE_PROFILE_FOLDED:
		return sonde__prof_write_folded(p, fd, m);
	case SONDE_PROFILE_SPEEDSCOPE:
		return sonde__prof_write_speedscope(p, fd, title, m);
	case SONDE_PROFILE_SVG:
		return sonde__prof_write_svg(p, fd, title, opts);
	}
	return -EINVAL;
}
