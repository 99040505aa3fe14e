/* speedscope's file format (https://www.speedscope.app/file-format-schema.json): one
 * "sampled" profile per thread, or per process (its threads merged, in time order) when
 * the profile holds more than one process, as a machine-wide recording does, heaviest
 * first; samples in time order with runs of the same stack merged,
 * frames shared by all profiles and identified by function. Under a time metric the
 * thread's off-CPU intervals join its samples in time order, each weighing its duration. */
#include <errno.h>

#include "base/alloc.h"
#include "export/flame.h"
#include "base/out.h"

#define SONDE_EXPORTER "sonde"

/* One weighed stack of a thread: an on-CPU sample or an off-CPU interval. */
struct ev {
	uint64_t time_ns;
	uint64_t weight;
	uint32_t thread;
	uint32_t fnode; /* flame node */
	uint32_t seq;	/* order of addition, for a stable sort */
};

struct ss {
	const struct sonde_profile *p;
	enum sonde_profile_metric metric;
	struct flame f;
	struct out o;
	uint32_t *frame_of_func; /* func id -> frame index + 1 (0: not emitted) */
	uint32_t *path;		 /* scratch, max_depth entries */
	struct ev *evs;		 /* grouped by thread, in time order */
	uint32_t n_evs;
	uint32_t *thread_start; /* group -> first index in evs; n_threads + 1 entries */
	/* Profiles are of groups: a thread, or with by_process a process, named by the thread
	 * id of its main thread (else its first). */
	uint32_t *group_of; /* thread id -> group */
	bool by_process;
};

static void write_frames(struct ss *s)
{
	const struct sonde_profile *p = s->p;
	uint32_t next = 0;

	sonde__out_puts(&s->o, "\"shared\":{\"frames\":[");
	for (uint32_t it = sonde__flame_next(&s->f, 0); it; it = sonde__flame_next(&s->f, it)) {
		uint32_t func = s->f.nodes.v[it].func;
		const struct tab_func *fn = &p->funcs.v[func];
		/* nothing weighs here under this metric (off-CPU stacks in a CPU profile) */
		if (s->frame_of_func[func] || !s->f.nodes.v[it].total)
			continue;
		s->frame_of_func[func] = ++next;
		sonde__out_puts(&s->o, next > 1 ? ",{\"name\":\"" : "{\"name\":\"");
		sonde__out_json_str(&s->o, prof_str(p, fn->name));
		sonde__out_putc(&s->o, '"');
		if (fn->file || fn->module) {
			sonde__out_puts(&s->o, ",\"file\":\"");
			sonde__out_json_str(&s->o, prof_str(p, fn->file ? fn->file : fn->module));
			sonde__out_putc(&s->o, '"');
		}
		sonde__out_putc(&s->o, '}');
	}
	sonde__out_puts(&s->o, "]},");
}

static int ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;

	if (x->thread != y->thread)
		return x->thread < y->thread ? -1 : 1;
	if (x->time_ns != y->time_ns)
		return x->time_ns < y->time_ns ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void push_ev(struct ss *s, uint64_t time_ns, uint64_t weight, uint32_t thread, uint32_t node)
{
	if (!weight)
		return;
	s->evs[s->n_evs] =
		(struct ev){time_ns, weight, s->group_of[thread], s->f.of_node[node], s->n_evs};
	s->n_evs++;
}

/* The samples and intervals that weigh under the metric, sorted by thread and time (a
 * CPU profile's samples are already in time order: the sort keeps it). */
static int group_by_thread(struct ss *s)
{
	const struct sonde_profile *p = s->p;
	uint64_t unit = p->info.sample_period_ns ? p->info.sample_period_ns : 1;
	uint32_t nt = p->threads.n;

	s->evs = sonde__malloc(((size_t)p->samples.n + p->offcpu.n + 1) * sizeof(*s->evs));
	s->thread_start = sonde__calloc((size_t)nt + 1, sizeof(*s->thread_start));
	s->group_of = sonde__calloc((size_t)nt + 1, sizeof(*s->group_of));
	if (!s->evs || !s->thread_start || !s->group_of)
		return -ENOMEM;
	/* by process when what weighs comes from more than one (threads of processes a
	 * filter left out are in the profile too) */
	uint32_t first = 0;
	for (uint32_t i = 0; i < p->samples.n + p->offcpu.n && !s->by_process; i++) {
		uint32_t t = i < p->samples.n ? p->samples.v[i].thread
					      : p->offcpu.v[i - p->samples.n].thread;
		if (t == 0 || t >= nt)
			continue;
		if (!first)
			first = t;
		s->by_process = p->threads.v[t].pid != p->threads.v[first].pid;
	}
	for (uint32_t t = 1; t < nt; t++)
		s->group_of[t] = t;
	/* each thread's group: the latest definition of its process's main thread when there
	 * is one (after an exec, the new program's name, as the other readers name the
	 * process), else the process's first thread (quadratic in threads, which are few
	 * next to samples) */
	for (uint32_t t = 1; s->by_process && t < nt; t++) {
		const struct prof_thread *th = &p->threads.v[t];
		uint32_t g = t;
		bool main_seen = false;
		for (uint32_t u = 1; u < nt; u++) {
			const struct prof_thread *o = &p->threads.v[u];
			if (o->pid != th->pid)
				continue;
			if (o->tid == o->pid) {
				g = u;
				main_seen = true;
			} else if (!main_seen && u < g) {
				g = u;
			}
		}
		s->group_of[t] = g;
	}
	for (uint32_t i = 0; i < p->samples.n; i++) {
		const struct prof_sample *sm = &p->samples.v[i];
		/* a CPU profile counts in periods, as before metrics existed */
		uint64_t w = s->metric == SONDE_PROFILE_METRIC_CPU
				     ? sm->count * unit
				     : sonde__prof_sample_weight(p, sm, s->metric);
		push_ev(s, sm->time_ns, w, sm->thread, sm->node);
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *o = &p->offcpu.v[i];
		push_ev(s, o->time_ns, sonde__prof_offcpu_weight(o, s->metric), o->thread, o->node);
	}
	qsort(s->evs, s->n_evs, sizeof(*s->evs), ev_cmp);
	for (uint32_t i = 0; i < s->n_evs; i++)
		s->thread_start[s->evs[i].thread + 1]++;
	for (uint32_t t = 1; t <= nt; t++)
		s->thread_start[t] += s->thread_start[t - 1];
	return 0;
}

/* A stack as frame indices, outermost first. */
static void write_stack(struct ss *s, uint32_t fnode)
{
	uint32_t depth = 0;

	for (uint32_t n = fnode; n; n = s->f.nodes.v[n].parent)
		s->path[depth++] = s->frame_of_func[s->f.nodes.v[n].func] - 1;
	sonde__out_putc(&s->o, '[');
	while (depth-- > 0) {
		sonde__out_u64(&s->o, s->path[depth]);
		if (depth)
			sonde__out_putc(&s->o, ',');
	}
	sonde__out_putc(&s->o, ']');
}

static void thread_name(struct ss *s, uint32_t t)
{
	const struct prof_thread *th = &s->p->threads.v[t];

	sonde__out_puts(&s->o, "\"name\":\"");
	if (t == 0) {
		sonde__out_puts(&s->o, "unknown thread");
	} else if (s->by_process) {
		sonde__out_json_str(&s->o, th->comm ? prof_str(s->p, th->comm) : "process");
		sonde__out_printf(&s->o, " (pid %u)", th->pid);
	} else {
		sonde__out_json_str(&s->o, th->comm ? prof_str(s->p, th->comm) : "thread");
		sonde__out_printf(&s->o, " (pid %u, tid %u)", th->pid, th->tid);
	}
	sonde__out_puts(&s->o, "\",");
}

/* One thread's samples; consecutive samples with the same stack become one weighted
 * sample, which speedscope displays identically. */
static void write_profile(struct ss *s, uint32_t t, bool timed)
{
	uint32_t from = s->thread_start[t], to = s->thread_start[t + 1];
	const struct ev *e = s->evs;
	uint64_t total = 0;

	sonde__out_puts(&s->o, "{\"type\":\"sampled\",");
	thread_name(s, t);
	sonde__out_puts(&s->o, timed ? "\"unit\":\"nanoseconds\"," : "\"unit\":\"none\",");
	sonde__out_puts(&s->o, "\"startValue\":0,\"samples\":[");
	for (uint32_t i = from; i < to;) {
		uint32_t fn = e[i].fnode;
		if (i > from)
			sonde__out_putc(&s->o, ',');
		write_stack(s, fn);
		while (++i < to && e[i].fnode == fn)
			;
	}
	sonde__out_puts(&s->o, "],\"weights\":[");
	for (uint32_t i = from; i < to;) {
		uint32_t fn = e[i].fnode;
		uint64_t w = 0;
		do {
			w += e[i].weight;
		} while (++i < to && e[i].fnode == fn);
		if (total)
			sonde__out_putc(&s->o, ',');
		sonde__out_u64(&s->o, w);
		total += w;
	}
	sonde__out_puts(&s->o, "],\"endValue\":");
	sonde__out_u64(&s->o, total);
	sonde__out_putc(&s->o, '}');
}

struct group_weight {
	uint64_t weight;
	uint32_t group;
};

static int heavier_first(const void *a, const void *b)
{
	const struct group_weight *x = a, *y = b;

	if (x->weight != y->weight)
		return x->weight > y->weight ? -1 : 1;
	return x->group < y->group ? -1 : x->group > y->group;
}

/* Per thread: in thread order, the one with the most samples active. Per process: the
 * heaviest first, and active, so that speedscope opens on the busiest process. */
static int write_profiles(struct ss *s)
{
	const struct sonde_profile *p = s->p;
	bool timed = s->metric != SONDE_PROFILE_METRIC_CPU || p->info.sample_period_ns;
	uint32_t n = 0, active = 0, most = 0, ng = 0;
	struct group_weight *gw = sonde__calloc((size_t)p->threads.n + 1, sizeof(*gw));

	if (!gw)
		return -ENOMEM;
	for (uint32_t t = 0; t < p->threads.n; t++) {
		if (s->thread_start[t + 1] == s->thread_start[t])
			continue;
		gw[ng].group = t;
		for (uint32_t i = s->thread_start[t]; i < s->thread_start[t + 1]; i++)
			gw[ng].weight += s->evs[i].weight;
		ng++;
	}
	if (s->by_process)
		qsort(gw, ng, sizeof(*gw), heavier_first);
	sonde__out_puts(&s->o, "\"profiles\":[");
	for (uint32_t k = 0; k < ng; k++) {
		uint32_t t = gw[k].group;
		uint32_t count = s->thread_start[t + 1] - s->thread_start[t];
		if (n)
			sonde__out_putc(&s->o, ',');
		write_profile(s, t, timed);
		if (!s->by_process && count > most) {
			most = count;
			active = n;
		}
		n++;
	}
	sonde__out_puts(&s->o, "],\"activeProfileIndex\":");
	sonde__out_u64(&s->o, active);
	sonde__free(gw);
	return 0;
}

int sonde__prof_write_speedscope(const struct sonde_profile *p, int fd, const char *title,
				 enum sonde_profile_metric m)
{
	struct ss s = {.p = p, .metric = m};
	int err = sonde__flame_build_metric(&s.f, p, m);

	if (err)
		return err;
	err = -ENOMEM;
	s.frame_of_func = sonde__calloc(p->funcs.n, sizeof(*s.frame_of_func));
	s.path = sonde__malloc(((size_t)s.f.max_depth + 1) * sizeof(*s.path));
	if (!s.frame_of_func || !s.path || group_by_thread(&s) < 0)
		goto out;
	sonde__out_init(&s.o, fd);
	sonde__out_puts(&s.o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
			      "\"exporter\":\"" SONDE_EXPORTER "\",\"name\":\"");
	sonde__out_json_str(&s.o, title);
	sonde__out_puts(&s.o, "\",");
	write_frames(&s);
	err = write_profiles(&s);
	sonde__out_puts(&s.o, "}\n");
	if (err)
		sonde__out_close(&s.o);
	else
		err = sonde__out_close(&s.o);
out:
	sonde__free(s.group_of);
	sonde__free(s.thread_start);
	sonde__free(s.evs);
	sonde__free(s.path);
	sonde__free(s.frame_of_func);
	sonde__flame_free(&s.f);
	return err;
}
