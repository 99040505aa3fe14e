/* Views built from a recording (include/sonde/view_source.h): a spool read whole, or a
 * sliding window of a live tail, through one reader.
 *
 * The reader is what both sources present: stack nodes, frames, modules and threads by
 * id, and a frame's names. Over it, the names: each frame is symbolized once into view
 * functions (innermost first, inline frames their own unless no_inline), each stack node
 * resolved once into a view stack, each thread's process named once after its main thread.
 * A tail's invalidations forget the frames of the processes they name.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/view_source.h>

#include "base/array.h"
#include "base/buf.h"
#include "base/opts.h"
#include "base/u64map.h"
#include "export/acct.h"
#include "view/view.h"

enum { MAX_INLINE = 16 };

/* What a spool and a tail both present. */
struct reader {
	const void *src;
	int (*node)(const void *src, uint32_t id, uint32_t *parent, uint32_t *frame);
	int (*frame)(const void *src, uint32_t id, struct sonde_spool_frame *out);
	int (*module)(const void *src, uint32_t id, struct sonde_spool_module *out);
	int (*thread)(const void *src, uint32_t id, struct sonde_spool_thread *out);
	/* frame's names, innermost first, into out[0, max): how many, or -errno */
	int (*symbolize)(void *ctx, uint32_t frame, uint32_t pid, struct sonde_sym_frame *out,
			 size_t max);
	void *ctx;
};

struct frame_res {
	uint32_t first;	    /* index into names.frame_funcs */
	uint8_t n;	    /* 0: not resolved yet */
	uint8_t unresolved; /* the symbolizer could not name it */
	uint32_t pid;	    /* whose invalidation renames it: its module's process (0: none) */
};

/* A node's pid when its names came through two processes: any invalidation renames it. */
#define ANY_PID UINT32_MAX
/* node_res.stack's mark of a node that has a frame of no module: its stack is by process. */
#define PER_PROCESS UINT32_MAX

struct node_res {
	uint32_t stack; /* its view stack id + 1 (0 until resolved), or PER_PROCESS */
	uint32_t pid;	/* whose invalidation renames it (ANY_PID: any) */
};

/* The reader's ids resolved into the view's: frames, stack nodes, threads' processes.
 * A frame of no module is a raw address, which only a process's address space names (a
 * JIT's perf map): two processes may name one frame two ways, so such frames, and the
 * nodes whose path holds one, are resolved per process. */
/* A definition of a process's main thread, and the one before it (see names.main_of). */
struct main_def {
	uint32_t thread, older;
};

struct names {
	struct reader rd;
	struct sonde_view *v;
	int lines, no_inline, no_symbolize;
	struct frame_res *frames; /* by frame id, frames of a module */
	size_t frames_cap;
	/* frame << 32 | pid -> a frame of no module as that process names it (raw_pack) */
	struct u64map raw_frames;
	struct buf frame_funcs; /* uint32_t view function ids, innermost first, per frame */
	struct node_res *nodes; /* by stack node */
	size_t nodes_cap;
	/* node << 32 | pid -> pid renaming it << 32 | view stack id + 1: the nodes whose path
	 * holds a frame of no module, by process */
	struct u64map proc_nodes;
	const char **proc; /* by thread id: its process's name, NULL until known */
	size_t threads_cap;
	/* The definitions of main threads (tid = pid) among thread ids [1, indexed], each
	 * process's newest first: pid -> 1 + index in main_defs of its newest, each one's
	 * older = 1 + the index of the one before it (0: none). A process's name is then found
	 * among its own main thread's definitions, not by a scan of every thread's. */
	struct u64map main_of;
	struct main_def *main_defs;
	size_t n_main, main_cap;
	uint32_t indexed;
	struct buf stack; /* uint32_t function ids of the stack being resolved */
	uint64_t resolved, unresolved;
};

static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	void *p = realloc(*(void **)pp, n * elem);
	if (!p)
		return -ENOMEM;
	memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
	*(void **)pp = p;
	*cap = n;
	return 0;
}

static void names_free(struct names *n)
{
	free(n->frames);
	free(n->nodes);
	free(n->proc);
	free(n->main_defs);
	sonde__u64map_free(&n->main_of);
	sonde__u64map_free(&n->raw_frames);
	sonde__u64map_free(&n->proc_nodes);
	sonde__buf_free(&n->frame_funcs);
	sonde__buf_free(&n->stack);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* The module a frame's names belong to, by the reader's definitions. */
static const char *frame_module(const struct names *n, uint32_t frame_id)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	if (n->rd.frame(n->rd.src, frame_id, &f) < 0 || !f.module ||
	    n->rd.module(n->rd.src, f.module, &m) < 0)
		return "[unknown]";
	return m.def.path && m.def.path[0] ? base_name(m.def.path) : "[anonymous]";
}

/* frame_id named as a symbolizer names what it cannot, without one: "module+0xOFFSET",
 * or "0xADDR" outside modules, into buf. 1, or -ERANGE. */
static int unsymbolized(const struct names *n, uint32_t frame_id, struct sonde_sym_frame *out,
			char *buf, size_t cap)
{
	struct sonde_spool_frame f;

	if (n->rd.frame(n->rd.src, frame_id, &f) < 0)
		return -ERANGE;
	if (f.module)
		snprintf(buf, cap, "%s+0x%" PRIx64, frame_module(n, frame_id), f.addr);
	else
		snprintf(buf, cap, "0x%" PRIx64, f.addr);
	*out = (struct sonde_sym_frame){.name = buf};
	return 1;
}

/* Resolves frame_id (of a stack of process pid) into view function ids, *fr. 0 or -errno. */
static int resolve_frame(struct names *n, uint32_t frame_id, uint32_t pid, struct frame_res *fr)
{
	struct sonde_sym_frame out[MAX_INLINE];
	const char *module = frame_module(n, frame_id);
	char label[1024], fallback[64], raw[300];
	int k = n->no_symbolize ? unsymbolized(n, frame_id, out, raw, sizeof(raw))
				: n->rd.symbolize(n->rd.ctx, frame_id, pid, out, MAX_INLINE);

	if (k <= 0) {
		/* the symbolizer refused the frame: name it by its number, still counted */
		snprintf(fallback, sizeof(fallback), "[frame %" PRIu32 "]", frame_id);
		out[0] = (struct sonde_sym_frame){.name = fallback};
		k = 1;
	}
	n->resolved++;
	fr->unresolved = out[0].origin == SONDE_SYM_ORIGIN_NONE;
	n->unresolved += fr->unresolved;
	int first = n->no_inline ? k - 1 : 0;
	fr->first = (uint32_t)(n->frame_funcs.len / sizeof(uint32_t));
	fr->n = (uint8_t)(k - first);
	for (int i = first; i < k; i++) {
		const struct sonde_sym_frame *s = &out[i];
		if (n->lines && s->file && s->line)
			snprintf(label, sizeof(label), "%s (%s:%" PRIu32 ")", s->name,
				 base_name(s->file), s->line);
		else
			snprintf(label, sizeof(label), "%s", s->name ? s->name : "");
		int64_t id =
			sonde_view__func(n->v, label, s->module ? base_name(s->module) : module);
		if (id < 0)
			return (int)id;
		uint32_t v = (uint32_t)id;
		if (fr->unresolved)
			sonde_view__func_unresolved(n->v, v);
		sonde__buf_append(&n->frame_funcs, &v, sizeof(v));
	}
	return buf_error(&n->frame_funcs);
}

/* A frame of no module's resolution as raw_frames holds it, and back. */
static uint64_t raw_pack(const struct frame_res *fr)
{
	return fr->first | (uint64_t)fr->n << 32 | (uint64_t)fr->unresolved << 40;
}

static struct frame_res raw_unpack(uint64_t v, uint32_t pid)
{
	return (struct frame_res){(uint32_t)v, (uint8_t)(v >> 32), (uint8_t)(v >> 40), pid};
}

/* Frame frame_id of a stack of process pid, resolved once (a frame of no module once per
 * process), into *fr; *raw whether it has no module. 0 or -errno. */
static int frame_of(struct names *n, uint32_t frame_id, uint32_t pid, struct frame_res *fr,
		    bool *raw)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;
	bool defined = n->rd.frame(n->rd.src, frame_id, &f) == 0;

	*raw = defined && !f.module;
	if (*raw) {
		uint64_t key = (uint64_t)frame_id << 32 | pid, *v;
		if ((v = sonde__u64map_get(&n->raw_frames, key))) {
			*fr = raw_unpack(*v, pid);
			return 0;
		}
		int err = resolve_frame(n, frame_id, pid, fr);
		fr->pid = pid;
		return err ?: sonde__u64map_put(&n->raw_frames, key, raw_pack(fr));
	}
	if (grow(&n->frames, &n->frames_cap, (size_t)frame_id + 1, sizeof(*n->frames)) < 0)
		return -ENOMEM;
	if (!n->frames[frame_id].n) {
		int err = resolve_frame(n, frame_id, pid, &n->frames[frame_id]);
		if (err)
			return err;
		n->frames[frame_id].pid = defined && n->rd.module(n->rd.src, f.module, &m) == 0
						  ? m.def.pid
						  : 0;
	}
	*fr = n->frames[frame_id];
	return 0;
}

/* The view stack of stack node `node` (its events are of process pid), resolved once (a
 * node whose path holds a frame of no module once per process). */
static int64_t node_stack(struct names *n, uint32_t node, uint32_t pid)
{
	uint32_t parent, frame, renamed_by = 0;
	uint64_t key = (uint64_t)node << 32 | pid, *at;
	bool by_process = false, raw;
	struct frame_res fr;

	if (!node)
		return 0;
	if (grow(&n->nodes, &n->nodes_cap, (size_t)node + 1, sizeof(*n->nodes)) < 0)
		return -ENOMEM;
	uint32_t s = n->nodes[node].stack;
	if (s && s != PER_PROCESS)
		return s - 1;
	if (s == PER_PROCESS && (at = sonde__u64map_get(&n->proc_nodes, key)))
		return (uint32_t)*at - 1;
	n->stack.len = 0;
	for (uint32_t k = node; k; k = parent) {
		if (n->rd.node(n->rd.src, k, &parent, &frame) < 0)
			return -SONDE_E_REFERENCE;
		int e = frame_of(n, frame, pid, &fr, &raw);
		if (e < 0)
			return e;
		by_process |= raw;
		if (fr.pid)
			renamed_by = !renamed_by || renamed_by == fr.pid ? fr.pid : ANY_PID;
		const uint32_t *ids = (const uint32_t *)n->frame_funcs.data + fr.first;
		sonde__buf_append(&n->stack, ids, fr.n * sizeof(uint32_t));
	}
	if (buf_error(&n->stack))
		return -ENOMEM;
	int64_t id = sonde_view__stack(n->v, (const uint32_t *)n->stack.data,
				       n->stack.len / sizeof(uint32_t));
	if (id < 0)
		return id;
	if (by_process) {
		n->nodes[node].stack = PER_PROCESS;
		if (sonde__u64map_put(&n->proc_nodes, key,
				      (uint64_t)renamed_by << 32 | ((uint64_t)id + 1)) < 0)
			return -ENOMEM;
	} else {
		n->nodes[node] = (struct node_res){(uint32_t)id + 1, renamed_by};
	}
	return id;
}

/* Adds the main threads the reader defined since the last call to main_of (a live
 * reader's threads grow): 0 or -ENOMEM. */
static int index_main_threads(struct names *n)
{
	struct sonde_spool_thread m;

	for (uint32_t i = n->indexed + 1; n->rd.thread(n->rd.src, i, &m) == 0; n->indexed = i++) {
		if (m.tid != m.pid)
			continue;
		if (grow(&n->main_defs, &n->main_cap, n->n_main + 1, sizeof(*n->main_defs)) < 0)
			return -ENOMEM;
		uint64_t *newest = sonde__u64map_get(&n->main_of, m.pid);
		n->main_defs[n->n_main] = (struct main_def){i, newest ? (uint32_t)*newest : 0};
		if (newest)
			*newest = n->n_main + 1;
		else if (sonde__u64map_put(&n->main_of, m.pid, n->n_main + 1) < 0)
			return -ENOMEM;
		n->n_main++;
	}
	return 0;
}

/* The name of the process of thread t when t was defined: its main thread's name then (the
 * main thread's last definition up to t's; after an exec, the new program's), else its
 * first, else t's own (also when memory for the index runs out). */
static const char *process_comm(struct names *n, const struct sonde_spool_thread *t)
{
	struct sonde_spool_thread m;
	const char *first = NULL, *then = NULL;
	const uint64_t *newest;

	if (index_main_threads(n) < 0 || !(newest = sonde__u64map_get(&n->main_of, t->pid)))
		return t->comm;
	/* newest first: the first up to t's time is the last one then, the last the first */
	for (uint32_t k = (uint32_t)*newest; k; k = n->main_defs[k - 1].older) {
		if (n->rd.thread(n->rd.src, n->main_defs[k - 1].thread, &m) < 0)
			continue;
		first = m.comm;
		if (!then && m.time_ns <= t->time_ns)
			then = m.comm;
	}
	return then ? then : first ? first : t->comm;
}

/* Event e's thread fields from reader thread `thread`, the process's name cached: 0, or
 * -ERANGE for an unknown thread (pid, tid 0, no name). */
static int event_thread(struct names *n, uint32_t thread, struct sonde_view_event *e)
{
	struct sonde_spool_thread t;

	if (n->rd.thread(n->rd.src, thread, &t) < 0) {
		e->pid = e->tid = 0;
		e->comm = e->process = "";
		return -ERANGE;
	}
	e->pid = t.pid;
	e->tid = t.tid;
	e->comm = t.comm;
	if (grow(&n->proc, &n->threads_cap, (size_t)thread + 1, sizeof(*n->proc)) < 0) {
		e->process = process_comm(n, &t);
		return 0;
	}
	if (!n->proc[thread])
		n->proc[thread] = process_comm(n, &t);
	e->process = n->proc[thread];
	return 0;
}

/* Event e of smp (a sample, or an interval as one at its switch-out) in state, weighing
 * weight, its thread's fields from the reader. */
static void event_of(struct names *n, const struct sonde_spool_sample *smp, uint32_t state,
		     uint64_t weight, struct sonde_view_event *e)
{
	*e = (struct sonde_view_event){.sz = sizeof(*e),
				       .cpu = smp->cpu,
				       .time_ns = smp->time_ns,
				       .state = state,
				       .weight = weight};
	event_thread(n, smp->thread, e);
}

/* Off-CPU interval o as a sample at its switch-out, weighing its length: what both
 * sources add for it. */
static struct sonde_spool_sample interval_sample(const struct sonde_spool_offcpu *o,
						 uint64_t *weight)
{
	*weight = o->switch_in_ns - o->switch_out_ns;
	return (struct sonde_spool_sample){o->switch_out_ns, o->thread, o->stack, o->flags, o->cpu};
}

/* The view state of an interval the recording stacked (one a loss cut is UNKNOWN). */
static uint32_t interval_state(const struct sonde_spool_offcpu *o)
{
	return o->state < SONDE_OFFCPU_STATES ? 1 + o->state : SONDE_VIEW_OTHER;
}

/* Whether a resolution renamed by `by` (ANY_PID: any) is renamed by pid's invalidation. */
static bool renamed(uint32_t by, uint32_t pid)
{
	return by == pid || by == ANY_PID;
}

/* Removes the entries of m whose key's low half (a pid), or whose value's high half (a
 * pid renaming it) when by_value, is renamed by pid. A cache: when the keys to remove
 * cannot be listed, it is emptied (they are resolved again). */
static void drop_pid(struct u64map *m, uint32_t pid, bool by_value)
{
	struct buf keys = BUF_INIT;
	uint64_t key, val;
	size_t pos = 0;

	while (sonde__u64map_next(m, &pos, &key, &val))
		if ((uint32_t)key == pid || (by_value && renamed((uint32_t)(val >> 32), pid)))
			sonde__buf_append(&keys, &key, sizeof(key));
	if (buf_error(&keys))
		sonde__u64map_clear(m);
	for (size_t i = 0; !buf_error(&keys) && i < keys.len / sizeof(key); i++)
		sonde__u64map_del(m, ((const uint64_t *)keys.data)[i]);
	sonde__buf_free(&keys);
}

/* Forgets what process pid's invalidation (an exec, new JIT code) renames: the frames of
 * its modules and those of no module it named, and the stacks that hold one. Other
 * processes' names stay. */
static void names_invalidate(struct names *n, uint32_t pid)
{
	for (size_t id = 1; id < n->nodes_cap; id++)
		if (n->nodes[id].stack != PER_PROCESS && renamed(n->nodes[id].pid, pid))
			n->nodes[id].stack = 0;
	drop_pid(&n->proc_nodes, pid, true);
	for (size_t id = 1; id < n->frames_cap; id++)
		if (n->frames[id].pid == pid)
			n->frames[id].n = 0;
	drop_pid(&n->raw_frames, pid, false);
}

uint32_t sonde_view_metric_states(enum sonde_profile_metric m)
{
	switch (m) {
	case SONDE_PROFILE_METRIC_CPU:
		return 1u << SONDE_VIEW_ON_CPU;
	case SONDE_PROFILE_METRIC_OFF_CPU:
		return 1u << SONDE_VIEW_RUNNABLE | 1u << SONDE_VIEW_SLEEPING |
		       1u << SONDE_VIEW_BLOCKED | 1u << SONDE_VIEW_OTHER | 1u << SONDE_VIEW_UNKNOWN;
	case SONDE_PROFILE_METRIC_WALL:
		return (1u << SONDE_VIEW_STATES) - 1;
	}
	return 0;
}

/* opts' filter with its states narrowed to the metric's, into *vf. 0 or -EINVAL. */
static int source_filter(const struct sonde_view_source_opts *opts, struct sonde_view_filter *vf)
{
	const struct sonde_view_filter *f = OPTS_GET(opts, filter, NULL);
	uint32_t states = sonde_view_metric_states(OPTS_GET(opts, metric, 0));

	if (f && f->sz < sizeof(*vf))
		return -EINVAL;
	*vf = f ? *f : (struct sonde_view_filter){0};
	vf->sz = sizeof(*vf);
	vf->states = vf->states ? vf->states & states : states;
	if (!vf->states)
		vf->states = 1u << SONDE_VIEW_STATES; /* a state no event has: nothing is kept */
	return 0;
}

/* A new view of filter vf. */
static struct sonde_view *view_new(const struct sonde_view_source_opts *opts,
				   const struct sonde_view_filter *vf)
{
	struct sonde_view_opts vo = {
		.sz = sizeof(vo), .filter = vf, .state_frames = OPTS_GET(opts, state_frames, 0)};
	return sonde_view__new(&vo);
}

/* ---- the spool ---- */

static int spool_node(const void *s, uint32_t id, uint32_t *parent, uint32_t *frame)
{
	return sonde_spool__get_node(s, id, parent, frame);
}

static int spool_frame(const void *s, uint32_t id, struct sonde_spool_frame *out)
{
	return sonde_spool__get_frame(s, id, out);
}

static int spool_module(const void *s, uint32_t id, struct sonde_spool_module *out)
{
	return sonde_spool__get_module(s, id, out);
}

static int spool_thread(const void *s, uint32_t id, struct sonde_spool_thread *out)
{
	return sonde_spool__get_thread(s, id, out);
}

struct spool_src {
	const struct sonde_spool *s;
	struct sonde_symbolizer *sym;
};

int sonde_spool__symbolize_frame(const struct sonde_spool *s, struct sonde_symbolizer *sym,
				 uint32_t frame, uint32_t pid, struct sonde_sym_frame *out, size_t max)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	if (sonde_spool__get_frame(s, frame, &f) < 0)
		return -ERANGE;
	if (f.module == 0)
		return sonde_symbolizer__symbolize_raw(sym, pid, f.addr, out, max);
	if (sonde_spool__get_module(s, f.module, &m) < 0)
		return -ERANGE;
	struct sonde_sym_module sm = {
		.pid = m.def.pid,
		.flags = m.def.flags,
		.start = m.def.start,
		.end = m.def.end,
		.pgoff = m.def.pgoff,
		.dev = m.def.dev,
		.inode = m.def.inode,
		.build_id = m.def.build_id,
		.build_id_len = m.def.build_id_len,
		.path = m.def.path,
	};
	return sonde_symbolizer__symbolize(sym, &sm, f.addr, out, max);
}

static int spool_symbolize(void *ctx, uint32_t frame_id, uint32_t pid, struct sonde_sym_frame *out,
			   size_t max)
{
	struct spool_src *ss = ctx;

	return sonde_spool__symbolize_frame(ss->s, ss->sym, frame_id, pid, out, max);
}

/* Reading a spool into a view: three passes over its events (the events kept mark their
 * stack nodes; each marked node is resolved once; every event is added by stack id). */
struct build {
	const struct sonde_spool *s;
	struct sonde_spool_info info;
	enum sonde_profile_metric metric;
	struct sonde_acct_weights weights;
	struct names names;
	struct sonde_view_filter filter; /* the view's, for marking */
	uint32_t *node_pid;		 /* by stack node: the pid of a kept event, 0: none */
	uint8_t *node_kept;
	uint64_t n_off, n_unknown, events;
	sonde_view_progress_fn progress;
	void *progress_ctx;
};

/* Interval i (the intervals, then those a loss cut, then the unsampled stays) as a sample
 * at its switch-out, with its state and weight. 0, or -ERANGE past the last. */
static int interval(const struct build *b, uint64_t i, struct sonde_spool_sample *smp,
		    uint32_t *state, uint64_t *weight)
{
	struct sonde_spool_offcpu o;

	if (i < b->n_off) {
		if (sonde_spool__get_offcpu(b->s, i, &o) < 0)
			return -ERANGE;
		*state = interval_state(&o);
	} else if (i - b->n_off < b->n_unknown) {
		struct sonde_spool_thread t;
		if (sonde_spool__get_unknown(b->s, i - b->n_off, &o) < 0)
			return -ERANGE;
		*state = SONDE_VIEW_UNKNOWN;
		*smp = interval_sample(&o, weight);
		/* less the thread's stays on the CPUs within it, which its samples weigh */
		if (sonde_spool__get_thread(b->s, o.thread, &t) == 0)
			*weight -= sonde__acct_stays_within(b->s, t.tid, o.switch_out_ns,
							    o.switch_in_ns);
		return 0;
	} else {
		uint64_t u = i - b->n_off - b->n_unknown;
		if (u >= b->weights.n_unsampled)
			return -ERANGE;
		const struct sonde_acct_unsampled *un = &b->weights.unsampled[u];
		o = (struct sonde_spool_offcpu){.switch_out_ns = un->time_ns,
						.switch_in_ns = un->time_ns + un->on_ns,
						.thread = un->thread,
						.cpu = SONDE_SPOOL_CPU_NONE};
		*state = SONDE_VIEW_UNSAMPLED;
	}
	*smp = interval_sample(&o, weight);
	return 0;
}

/* Event i: sample i, then (off-CPU metrics) the intervals; *node its stack node. 0, or
 * -ERANGE past the last. */
static int next_event(struct build *b, uint64_t i, struct sonde_view_event *e, uint32_t *node)
{
	struct sonde_spool_sample smp;
	uint64_t base = b->metric == SONDE_PROFILE_METRIC_OFF_CPU ? 0 : b->info.samples;
	uint64_t weight;
	uint32_t state;

	if (i < base) {
		if (sonde_spool__get_sample(b->s, i, &smp) < 0)
			return -ERANGE;
		weight = b->metric != SONDE_PROFILE_METRIC_WALL ? 1
			 : b->weights.sample_ns			? b->weights.sample_ns[i]
								: b->info.header.sample_period_ns;
		state = SONDE_VIEW_ON_CPU;
	} else if (b->metric == SONDE_PROFILE_METRIC_CPU ||
		   interval(b, i - base, &smp, &state, &weight) < 0) {
		return -ERANGE;
	}
	event_of(&b->names, &smp, state, weight, e);
	*node = smp.stack <= b->info.stacks ? smp.stack : 0;
	return 0;
}

static void progress(const struct build *b, const char *phase, uint64_t done, uint64_t total)
{
	if (b->progress)
		b->progress(b->progress_ctx, phase, done, total);
}

/* Pass 1: marks the stack node of each event the filters keep, with its pid. */
static int mark_nodes(struct build *b)
{
	struct sonde_view_event e;
	uint32_t node;

	for (uint64_t i = 0; next_event(b, i, &e, &node) == 0; i++) {
		if ((i & 0xfff) == 0)
			progress(b, "counting samples", i, b->events);
		if (!b->node_kept[node] && sonde_view_filter__match(&b->filter, &e) == 1) {
			b->node_kept[node] = 1;
			b->node_pid[node] = e.pid;
		}
	}
	return 0;
}

/* Pass 2: resolves every marked node. */
static int resolve_nodes(struct build *b)
{
	progress(b, "symbolizing stacks", 0, b->info.stacks);
	for (uint32_t node = 1; node <= b->info.stacks; node++) {
		if ((node & 0xff) == 0)
			progress(b, "symbolizing stacks", node, b->info.stacks);
		if (!b->node_kept[node])
			continue;
		int64_t id = node_stack(&b->names, node, b->node_pid[node]);
		if (id < 0)
			return (int)id;
	}
	return 0;
}

/* Pass 3: every event to the view, by its node's stack (an unmarked node's events are not
 * kept either), then the short intervals of the time metrics. */
static int add_events(struct build *b)
{
	struct sonde_spool_offcpu_short sh;
	struct sonde_view_event e;
	uint32_t node;
	uint64_t i;

	for (i = 0; next_event(b, i, &e, &node) == 0; i++) {
		if ((i & 0xfff) == 0)
			progress(b, "adding up samples", i, b->events);
		if (!b->node_kept[node])
			continue;
		int64_t stack = node ? b->names.nodes[node].stack - 1 : 0;
		/* a path through a frame of no module is the process's: resolved for the
		 * first process kept, for another here */
		if (node && b->names.nodes[node].stack == PER_PROCESS) {
			if (sonde_view_filter__match(&b->filter, &e) != 1)
				continue;
			stack = node_stack(&b->names, node, e.pid);
		}
		int err = stack < 0 ? (int)stack : sonde_view__add_stack(b->names.v, &e, (uint32_t)stack);
		if (err < 0)
			return err;
	}
	if (b->metric == SONDE_PROFILE_METRIC_CPU)
		return 0;
	for (i = 0; sonde_spool__get_offcpu_short(b->s, i, &sh) == 0; i++) {
		struct sonde_view_event se = {.sz = sizeof(se)};
		if (event_thread(&b->names, sh.thread, &se) < 0)
			continue;
		int err = sonde_view__add_short(b->names.v, &se, sh.count, sh.total_ns);
		if (err < 0)
			return err;
	}
	return 0;
}

static int build_run(struct build *b, const struct sonde_view_source_opts *opts)
{
	int err;

	if (!OPTS_VALID(opts, sonde_view_source_opts))
		return -EINVAL;
	b->metric = OPTS_GET(opts, metric, SONDE_PROFILE_METRIC_CPU);
	if (!sonde_view_metric_states(b->metric))
		return -EINVAL;
	b->progress = OPTS_GET(opts, progress, NULL);
	b->progress_ctx = OPTS_GET(opts, progress_ctx, NULL);
	b->names.lines = OPTS_GET(opts, lines, 0);
	b->names.no_inline = OPTS_GET(opts, no_inline, 0);
	b->names.no_symbolize = OPTS_GET(opts, no_symbolize, 0);
	sonde_spool__get_info(b->s, &b->info);
	b->n_off = sonde_spool__offcpu_count(b->s);
	b->n_unknown = sonde_spool__unknown_count(b->s);
	if (b->metric == SONDE_PROFILE_METRIC_WALL && sonde__acct_weights_known(b->s) &&
	    (err = sonde__acct_weights(b->s, &b->weights)) < 0)
		return err;
	b->events = b->info.samples + b->n_off + b->n_unknown + b->weights.n_unsampled;
	/* the view's filter, as it applies it, to mark nodes with */
	if ((err = source_filter(opts, &b->filter)) < 0)
		return err;
	b->names.v = view_new(opts, &b->filter);
	if (!b->names.v)
		return -errno;
	size_t nodes = (size_t)b->info.stacks + 1;
	b->node_pid = calloc(nodes, sizeof(*b->node_pid));
	b->node_kept = calloc(nodes, sizeof(*b->node_kept));
	if (!b->node_pid || !b->node_kept ||
	    grow(&b->names.frames, &b->names.frames_cap, (size_t)b->info.frames + 1,
		 sizeof(*b->names.frames)) < 0 ||
	    grow(&b->names.proc, &b->names.threads_cap, (size_t)b->info.threads + 1,
		 sizeof(*b->names.proc)) < 0)
		return -ENOMEM;
	err = mark_nodes(b);
	if (!err)
		err = resolve_nodes(b);
	if (!err)
		err = add_events(b);
	return err;
}

int sonde_view__from_spool(const struct sonde_spool *s, const struct sonde_view_source_opts *opts,
			   struct sonde_view **out, struct sonde_view_source_stats *st)
{
	struct spool_src ss = {.s = s};
	struct build b = {.s = s};
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!s || (st && st->sz < sizeof(*st)))
		return -EINVAL;
	ss.sym = OPTS_GET(opts, symbolizer, NULL);
	struct sonde_symbolizer *own = NULL;
	if (!ss.sym && !OPTS_GET(opts, no_symbolize, 0)) {
		struct sonde_symbolizer_opts so = {.sz = sizeof(so),
						   .buildid_cache_dir =
							   OPTS_GET(opts, buildid_cache_dir, NULL)};
		ss.sym = own = sonde_symbolizer__new(&so);
		if (!own)
			return -errno;
	}
	b.names.rd = (struct reader){.src = s,
				     .node = spool_node,
				     .frame = spool_frame,
				     .module = spool_module,
				     .thread = spool_thread,
				     .symbolize = spool_symbolize,
				     .ctx = &ss};
	err = build_run(&b, opts);
	if (!err && st) {
		st->frames = b.names.resolved;
		st->unresolved_frames = b.names.unresolved;
		st->wall_by_switches = b.weights.exact;
		st->events = b.events;
	}
	if (err)
		sonde_view__free(b.names.v);
	else
		*out = b.names.v;
	free(b.node_pid);
	free(b.node_kept);
	names_free(&b.names);
	sonde__acct_weights_free(&b.weights);
	sonde_symbolizer__free(own);
	return err;
}

/* ---- the tail ---- */

static int tail_node(const void *t, uint32_t id, uint32_t *parent, uint32_t *frame)
{
	return sonde_tail__get_node(t, id, parent, frame);
}

static int tail_frame(const void *t, uint32_t id, struct sonde_spool_frame *out)
{
	return sonde_tail__get_frame(t, id, out);
}

static int tail_module(const void *t, uint32_t id, struct sonde_spool_module *out)
{
	return sonde_tail__get_module(t, id, out);
}

static int tail_thread(const void *t, uint32_t id, struct sonde_spool_thread *out)
{
	return sonde_tail__get_thread(t, id, out);
}

static int tail_symbolize(void *t, uint32_t frame, uint32_t pid, struct sonde_sym_frame *out,
			  size_t max)
{
	return sonde_tail__symbolize(t, frame, pid, out, max);
}

/* An event of the window: its view stack resolved when it was taken in, so that a later
 * invalidation renames nothing it holds. */
struct live_event {
	uint64_t time_ns; /* a sample's time, an interval's switch-out */
	uint64_t end_ns;  /* when it ended (an interval's switch-in): the window drops it after */
	uint64_t weight;
	uint32_t stack;	 /* the view's */
	uint32_t thread; /* the tail's */
	uint32_t cpu, state;
};

/* A short-interval record, kept as long as an event that ended when it was read. */
struct live_short {
	uint64_t end_ns;
	uint32_t thread;
	uint64_t count, total_ns;
};

/* A task's stay on a CPU by the switches (the wall metric of a recording that keeps them). */
struct live_run {
	uint64_t start_ns, end_ns; /* start 0: before the CPU's first switch; end UINT64_MAX:
				    * to the end of the recording */
	uint32_t tid;		   /* the kernel's */
	bool inferred;		   /* ended by an inferred switch (SONDE_SWITCH_INFERRED) */
};

struct sonde_view_live {
	struct sonde_tail *t;
	enum sonde_profile_metric metric;
	int state_frames;
	uint64_t window_ns, last_time;
	struct names names;
	ARR(struct live_event) events;
	ARR(struct live_short) shorts;
	uint32_t swept_funcs; /* the view's function ids after its last sweep */
	/* The wall metric by the CPUs' switches: the stays in the window, each CPU's last
	 * switch (its samples up to there fall in known stays), the window's floor, the
	 * first time seen, and each kernel tid's latest thread (tid + 1 -> thread id). */
	bool switches, ended;
	ARR(struct live_run) runs;
	ARR(uint64_t) switched;
	uint64_t floor, first_ns;
	struct u64map tid_thread;
	uint32_t threads_known;
};

/* A sweep once the view's functions are more than twice what the last one kept, and
 * this many more: each function is moved a bounded number of times on average. */
enum { SWEEP_SLACK = 256 };

/* Frame resolution fr's function ids (in old) moved from view `from` into the names'
 * view, appended to funcs, fr pointed at them. 0 or -errno. */
static int move_frame(struct names *n, const struct sonde_view *from, uint32_t *map,
		      const uint32_t *old, struct buf *funcs, struct frame_res *fr)
{
	uint32_t first = (uint32_t)(funcs->len / sizeof(uint32_t));

	for (uint32_t k = 0; k < fr->n; k++) {
		int64_t c = sonde__view_copy_func(n->v, from, old[fr->first + k], map);
		if (c < 0)
			return (int)c;
		uint32_t v = (uint32_t)c;
		sonde__buf_append(funcs, &v, sizeof(v));
	}
	fr->first = first;
	return buf_error(funcs);
}

/* The frame caches moved from view `from` into the names' view, into a compact
 * frame_funcs: the frames of a module, then those of no module. 0 or -errno. */
static int sweep_frames(struct names *n, const struct sonde_view *from, uint32_t *map)
{
	struct buf funcs = BUF_INIT;
	const uint32_t *old = (const uint32_t *)n->frame_funcs.data;
	uint64_t key, val;
	size_t pos = 0;
	int err = 0;

	for (size_t id = 1; id < n->frames_cap && !err; id++)
		err = move_frame(n, from, map, old, &funcs, &n->frames[id]);
	while (!err && sonde__u64map_next(&n->raw_frames, &pos, &key, &val)) {
		struct frame_res fr = raw_unpack(val, (uint32_t)key);
		err = move_frame(n, from, map, old, &funcs, &fr);
		*sonde__u64map_get(&n->raw_frames, key) = raw_pack(&fr);
	}
	if (err) {
		/* some frames point into funcs already: forget them all, to be named again */
		for (size_t id = 1; id < n->frames_cap; id++)
			n->frames[id].n = 0;
		sonde__u64map_clear(&n->raw_frames);
		sonde__buf_free(&funcs);
		return err;
	}
	sonde__buf_free(&n->frame_funcs);
	n->frame_funcs = funcs;
	return 0;
}

/* Moves what the window's events and the names of the processes still running hold into
 * a fresh view, leaving behind the functions, stacks and labels of what left the window
 * (names changed by an exec or new JIT code, processes gone): a long `sonde top` keeps a
 * bounded table. The stack nodes are resolved again as events come (from the frames
 * kept: nothing is symbolized again). 0, or -errno with the live view unchanged. */
static int live_sweep(struct sonde_view_live *l)
{
	struct sonde_view *from = l->names.v;
	struct sonde_view_opts vo = {.sz = sizeof(vo),
				     .filter = sonde_view__filter(from),
				     .state_frames = l->state_frames};
	struct sonde_view *to = sonde_view__new(&vo);
	uint32_t *map = calloc(sonde__view_func_ids(from), sizeof(*map));
	/* the window's stacks, each moved once, then written back when all could be */
	uint32_t *stacks = malloc((l->events.n ? l->events.n : 1) * sizeof(*stacks));
	struct u64map moved = U64MAP_INIT; /* old stack id -> new */
	int err = -ENOMEM;

	if (!to || !map || !stacks)
		goto out;
	err = 0;
	for (size_t i = 0; i < l->events.n && !err; i++) {
		uint32_t old = l->events.v[i].stack;
		uint64_t *at = sonde__u64map_get(&moved, old);
		if (at) {
			stacks[i] = (uint32_t)*at;
			continue;
		}
		int64_t id = sonde__view_copy_stack(to, from, old, map);
		err = id < 0 ? (int)id : sonde__u64map_put(&moved, old, (uint64_t)id);
		stacks[i] = (uint32_t)id;
	}
	sonde__u64map_free(&moved);
	l->names.v = to;
	if (!err)
		err = sweep_frames(&l->names, from, map);
	if (err) {
		l->names.v = from;
		goto out;
	}
	for (size_t i = 0; i < l->events.n; i++)
		l->events.v[i].stack = stacks[i];
	for (size_t id = 1; id < l->names.nodes_cap; id++)
		l->names.nodes[id].stack = 0;
	sonde__u64map_clear(&l->names.proc_nodes);
	l->swept_funcs = sonde__view_func_ids(to);
	to = from; /* the old view goes */
out:
	sonde_view__free(to);
	free(map);
	free(stacks);
	return err;
}

struct sonde_view_live *sonde_view_live__new(struct sonde_tail *t, uint64_t window_ns,
					     const struct sonde_view_source_opts *opts)
{
	struct sonde_view_filter vf;
	struct sonde_view_live *l;

	if (!t || !OPTS_VALID(opts, sonde_view_source_opts) ||
	    !sonde_view_metric_states(OPTS_GET(opts, metric, SONDE_PROFILE_METRIC_CPU)) ||
	    source_filter(opts, &vf) < 0) {
		errno = EINVAL;
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->t = t;
	l->metric = OPTS_GET(opts, metric, SONDE_PROFILE_METRIC_CPU);
	l->state_frames = OPTS_GET(opts, state_frames, 0);
	l->window_ns = window_ns;
	l->names.rd = (struct reader){.src = t,
				      .node = tail_node,
				      .frame = tail_frame,
				      .module = tail_module,
				      .thread = tail_thread,
				      .symbolize = tail_symbolize,
				      .ctx = t};
	l->names.lines = OPTS_GET(opts, lines, 0);
	l->names.no_inline = OPTS_GET(opts, no_inline, 0);
	l->names.no_symbolize = OPTS_GET(opts, no_symbolize, 0);
	l->names.v = view_new(opts, &vf);
	if (!l->names.v) {
		int e = errno;
		free(l);
		errno = e;
		return NULL;
	}
	return l;
}

void sonde_view_live__free(struct sonde_view_live *l)
{
	if (!l)
		return;
	sonde_view__free(l->names.v);
	names_free(&l->names);
	ARR_FREE(l->events);
	ARR_FREE(l->shorts);
	ARR_FREE(l->runs);
	ARR_FREE(l->switched);
	sonde__u64map_free(&l->tid_thread);
	free(l);
}

/* Takes smp (a sample, or an interval as one, ending at end_ns) into the window when the
 * filter keeps it, its stack named now. 0 or -errno. */
static int live_take(struct sonde_view_live *l, const struct sonde_spool_sample *smp,
		     uint64_t end_ns, uint32_t state, uint64_t weight)
{
	struct sonde_view_event e;

	event_of(&l->names, smp, state, weight, &e);
	/* the view's copy of the filter: the caller's lists need not outlive the call */
	if (sonde_view_filter__match(sonde_view__filter(l->names.v), &e) != 1)
		return 0;
	int64_t stack = node_stack(&l->names, smp->stack, e.pid);
	if (stack < 0)
		return (int)stack;
	struct live_event *q = ARR_PUSH(l->events);
	if (!q)
		return -ENOMEM;
	*q = (struct live_event){.time_ns = smp->time_ns,
				 .end_ns = end_ns,
				 .weight = weight,
				 .stack = (uint32_t)stack,
				 .thread = smp->thread,
				 .cpu = smp->cpu,
				 .state = e.state};
	if (end_ns > l->last_time)
		l->last_time = end_ns;
	return 0;
}

static void seen_at(struct sonde_view_live *l, uint64_t t)
{
	if (t && (!l->first_ns || t < l->first_ns))
		l->first_ns = t;
}

/* Takes the batch's stays and its CPUs' latest switches (a recording that keeps the
 * CPUs' switches), and each new thread as its tid's latest. 0 or -ENOMEM. */
static int live_take_switches(struct sonde_view_live *l, const struct sonde_tail_batch *b)
{
	struct sonde_spool_thread th;

	if (b->sz < offsetof(struct sonde_tail_batch, switches) + sizeof(b->switches) ||
	    !b->switches)
		return 0;
	l->switches = true;
	l->ended = b->ended;
	for (uint32_t id = l->threads_known + 1; sonde_tail__get_thread(l->t, id, &th) == 0;
	     id++) {
		if (sonde__u64map_put(&l->tid_thread, (uint64_t)th.tid + 1, id) < 0)
			return -ENOMEM;
		l->threads_known = id;
	}
	for (size_t i = 0; i < b->n_runs; i++) {
		const struct sonde_spool_run *r = &b->runs[i];
		struct live_run *q = ARR_PUSH(l->runs);
		if (!q)
			return -ENOMEM;
		*q = (struct live_run){r->start_ns, r->end_ns, r->tid,
				       (r->state & SONDE_SWITCH_INFERRED) != 0};
		seen_at(l, r->start_ns);
		if (r->end_ns != UINT64_MAX) {
			seen_at(l, r->end_ns);
			if (r->end_ns > l->last_time)
				l->last_time = r->end_ns;
		}
	}
	while (l->switched.n < b->n_switched)
		if (!ARR_PUSH(l->switched))
			return -ENOMEM;
	for (uint32_t c = 0; c < b->n_switched; c++)
		l->switched.v[c] = b->switched[c];
	return 0;
}

int sonde_view_live__add(struct sonde_view_live *l, const struct sonde_tail_batch *b)
{
	struct sonde_spool_header h = {0};
	int err = 0;

	if (!l || !b)
		return -EINVAL;
	for (size_t i = 0; i < b->n_invalidated; i++)
		names_invalidate(&l->names, b->invalidated_pids[i]);
	/* a thread defined since may be a process's main thread: name processes again */
	if (b->new_threads && l->names.proc)
		memset(l->names.proc, 0, l->names.threads_cap * sizeof(*l->names.proc));
	/* as the spool's: a sample weighs 1, or its period under wall (a tail has no CPU
	 * switches to weigh it by); the metric's states leave out what it does not count */
	sonde_tail__header(l->t, &h);
	uint64_t weight = l->metric == SONDE_PROFILE_METRIC_WALL ? h.sample_period_ns : 1, w;
	for (size_t i = 0; i < b->n_samples && !err; i++) {
		seen_at(l, b->samples[i].time_ns);
		err = live_take(l, &b->samples[i], b->samples[i].time_ns, SONDE_VIEW_ON_CPU,
				weight);
	}
	if (l->metric == SONDE_PROFILE_METRIC_CPU)
		return err;
	for (size_t i = 0; i < b->n_offcpu && !err; i++) {
		struct sonde_spool_sample smp = interval_sample(&b->offcpu[i], &w);
		err = live_take(l, &smp, b->offcpu[i].switch_in_ns, interval_state(&b->offcpu[i]),
				w);
	}
	for (size_t i = 0; i < b->n_unknown && !err; i++) {
		struct sonde_spool_sample smp = interval_sample(&b->unknown[i], &w);
		err = live_take(l, &smp, b->unknown[i].switch_in_ns, SONDE_VIEW_UNKNOWN, w);
	}
	for (size_t i = 0; i < b->n_shorts && !err; i++) {
		const struct sonde_spool_offcpu_short *sh = &b->shorts[i];
		struct live_short *q = ARR_PUSH(l->shorts);
		if (!q)
			return -ENOMEM;
		*q = (struct live_short){l->last_time, sh->thread, sh->count, sh->total_ns};
	}
	if (!err && l->metric == SONDE_PROFILE_METRIC_WALL)
		err = live_take_switches(l, b);
	return err;
}

void sonde_view_live__expire(struct sonde_view_live *l, uint64_t now_ns)
{
	size_t k = 0;

	if (!l || !l->window_ns)
		return;
	/* intervals are written when they end, out of their switch-outs' order: each event
	 * is looked at */
	uint64_t floor = now_ns > l->window_ns ? now_ns - l->window_ns : 0;
	for (size_t i = 0; i < l->events.n; i++)
		if (l->events.v[i].end_ns >= floor)
			l->events.v[k++] = l->events.v[i];
	l->events.n = k;
	k = 0;
	for (size_t i = 0; i < l->shorts.n; i++)
		if (l->shorts.v[i].end_ns >= floor)
			l->shorts.v[k++] = l->shorts.v[i];
	l->shorts.n = k;
	k = 0;
	for (size_t i = 0; i < l->runs.n; i++)
		if (l->runs.v[i].end_ns >= floor)
			l->runs.v[k++] = l->runs.v[i];
	l->runs.n = k;
	l->floor = floor;
}

uint64_t sonde_view_live__samples(const struct sonde_view_live *l)
{
	return l ? l->events.n : 0;
}

uint64_t sonde_view_live__last_time(const struct sonde_view_live *l)
{
	return l ? l->last_time : 0;
}

/* The wall metric of a window by the CPUs' switches, as `sonde report --metric wall`
 * weighs a whole recording (sonde__acct_weights): each task's on-CPU time in the window,
 * its stays clipped to it, spread over its samples there to the nanosecond; a task that
 * ran unsampled shows as `[on-cpu: not sampled]`. A sample after its CPU's latest switch
 * read so far falls in a stay still open (or not yet written): it weighs its period, as
 * without switches, until the switch that ends the stay comes. */
struct live_task {
	uint64_t on_ns, from_ns; /* on-CPU time in the window, from its first stay there */
	uint64_t n, k;		 /* samples in its stays, of them weighed so far */
};

struct live_wall {
	struct u64map by_tid; /* tid + 1 -> index in tasks */
	ARR(struct live_task) tasks;
};

static void wall_free(struct live_wall *w)
{
	sonde__u64map_free(&w->by_tid);
	ARR_FREE(w->tasks);
}

/* Thread id's kernel tid, 0 when unknown. */
static uint32_t thread_tid(const struct sonde_view_live *l, uint32_t id)
{
	struct sonde_spool_thread th;

	return sonde_tail__get_thread(l->t, id, &th) == 0 ? th.tid : 0;
}

static struct live_task *wall_task(struct live_wall *w, uint32_t tid)
{
	uint64_t *i = sonde__u64map_get(&w->by_tid, (uint64_t)tid + 1);

	if (i)
		return &w->tasks.v[*i];
	if (!ARR_PUSH(w->tasks) ||
	    sonde__u64map_put(&w->by_tid, (uint64_t)tid + 1, w->tasks.n - 1) < 0)
		return NULL;
	w->tasks.v[w->tasks.n - 1] = (struct live_task){.from_ns = UINT64_MAX};
	return &w->tasks.v[w->tasks.n - 1];
}

/* A sample that falls in a stay the switches read so far give. */
static bool in_known_stay(const struct sonde_view_live *l, const struct live_event *q)
{
	return q->state == SONDE_VIEW_ON_CPU &&
	       (l->ended || (q->cpu < l->switched.n && q->time_ns <= l->switched.v[q->cpu]));
}

/* A stay of kernel task tid clipped to the window. */
struct live_stay {
	uint32_t tid;
	bool inferred; /* ended by an inferred switch */
	uint64_t from, to;
};

static int by_tid_then_from(const void *a, const void *b)
{
	const struct live_stay *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->from < y->from ? -1 : x->from > y->from;
}

/* Each task's stays in the window, counted as the spool's accounting counts them
 * (sonde__acct_stay_once: an inferred end at the task's next wait, overlaps once). */
static int wall_stays(struct sonde_view_live *l, struct live_wall *w)
{
	/* the window's end: the last event or switch seen (the end of the recording) */
	uint64_t end = l->last_time;
	size_t n = 0, nw = 0;
	struct live_stay *v = malloc((l->runs.n ? l->runs.n : 1) * sizeof(*v));
	struct sonde_acct_wait *waits = NULL;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < l->runs.n; i++) {
		const struct live_run *r = &l->runs.v[i];
		uint64_t from = r->start_ns ? r->start_ns : l->first_ns;
		uint64_t to = r->end_ns < end ? r->end_ns : end;
		if (from < l->floor)
			from = l->floor;
		if (from < to)
			v[n++] = (struct live_stay){r->tid, r->inferred, from, to};
	}
	for (size_t i = 0; i < l->events.n; i++)
		nw += l->events.v[i].state != SONDE_VIEW_ON_CPU;
	if (nw && !(waits = malloc(nw * sizeof(*waits)))) {
		free(v);
		return -ENOMEM;
	}
	nw = 0;
	for (size_t i = 0; i < l->events.n; i++) {
		const struct live_event *q = &l->events.v[i];
		if (q->state != SONDE_VIEW_ON_CPU)
			waits[nw++] = (struct sonde_acct_wait){thread_tid(l, q->thread), q->time_ns};
	}
	qsort(v, n, sizeof(*v), by_tid_then_from);
	sonde__acct_waits_sort(waits, nw);
	uint64_t covered = 0;
	int err = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t from = v[i].from, to = v[i].to;
		if (i == 0 || v[i].tid != v[i - 1].tid)
			covered = 0;
		if (!sonde__acct_stay_once(waits, nw, v[i].tid, v[i].inferred, &from, &to,
					   &covered))
			continue;
		struct live_task *k = wall_task(w, v[i].tid);
		if (!k) {
			err = -ENOMEM;
			break;
		}
		k->on_ns += to - from;
		if (from < k->from_ns)
			k->from_ns = from;
	}
	free(v);
	free(waits);
	return err;
}

static int wall_build(struct sonde_view_live *l, struct live_wall *w)
{
	int err = wall_stays(l, w);

	if (err < 0)
		return err;
	for (size_t i = 0; i < l->events.n; i++) {
		const struct live_event *q = &l->events.v[i];
		if (!in_known_stay(l, q))
			continue;
		struct live_task *k = wall_task(w, thread_tid(l, q->thread));
		if (!k)
			return -ENOMEM;
		k->n++;
	}
	return 0;
}

static uint64_t wall_weight(const struct sonde_view_live *l, struct live_wall *w,
			    const struct live_event *q)
{
	if (!l->switches || !in_known_stay(l, q))
		return q->weight;
	uint64_t *i = sonde__u64map_get(&w->by_tid, (uint64_t)thread_tid(l, q->thread) + 1);
	struct live_task *k = &w->tasks.v[*i]; /* wall_build counted it */
	/* a task no stay was read for keeps its samples' period, as in the spool's view (a
	 * recording whose CPUs were declared, none switched yet, weighed them 0) */
	if (k->from_ns == UINT64_MAX)
		return q->weight;
	return k->on_ns / k->n + (k->k++ < k->on_ns % k->n);
}

/* Each task that ran in the window, unsampled, and that the recording named. 0 or -errno. */
static int wall_unsampled(struct sonde_view_live *l, struct live_wall *w)
{
	struct sonde_view_event e;
	size_t pos = 0;
	uint64_t key, i;

	while (sonde__u64map_next(&w->by_tid, &pos, &key, &i)) {
		const struct live_task *k = &w->tasks.v[i];
		uint64_t *thread = sonde__u64map_get(&l->tid_thread, key);
		if (k->n || !k->on_ns || key == 1 || !thread)
			continue;
		struct sonde_spool_sample smp = {.time_ns = k->from_ns,
						 .thread = (uint32_t)*thread,
						 .cpu = SONDE_SPOOL_CPU_NONE};
		event_of(&l->names, &smp, SONDE_VIEW_UNSAMPLED, k->on_ns, &e);
		if (sonde_view_filter__match(sonde_view__filter(l->names.v), &e) != 1)
			continue;
		int64_t stack = node_stack(&l->names, 0, e.pid);
		if (stack < 0)
			return (int)stack;
		int err = sonde_view__add_stack(l->names.v, &e, (uint32_t)stack);
		if (err < 0)
			return err;
	}
	return 0;
}

struct sonde_view *sonde_view_live__view(struct sonde_view_live *l)
{
	struct sonde_view_event e;
	int err = 0;

	if (!l) {
		errno = EINVAL;
		return NULL;
	}
	if (sonde__view_func_ids(l->names.v) > 2 * (uint64_t)l->swept_funcs + SWEEP_SLACK &&
	    (err = live_sweep(l)) < 0) {
		errno = -err;
		return NULL;
	}
	sonde_view__clear(l->names.v);
	struct live_wall w = {0};
	if (l->switches && (err = wall_build(l, &w)) < 0) {
		errno = -err;
		return NULL;
	}
	for (size_t i = 0; i < l->events.n && err >= 0; i++) {
		const struct live_event *q = &l->events.v[i];
		struct sonde_spool_sample smp = {
			.time_ns = q->time_ns, .thread = q->thread, .cpu = q->cpu};
		event_of(&l->names, &smp, q->state, wall_weight(l, &w, q), &e);
		err = sonde_view__add_stack(l->names.v, &e, q->stack);
	}
	if (err >= 0 && l->switches)
		err = wall_unsampled(l, &w);
	wall_free(&w);
	for (size_t i = 0; i < l->shorts.n && err >= 0; i++) {
		const struct live_short *q = &l->shorts.v[i];
		e = (struct sonde_view_event){.sz = sizeof(e)};
		if (event_thread(&l->names, q->thread, &e) == 0)
			err = sonde_view__add_short(l->names.v, &e, q->count, q->total_ns);
	}
	if (err < 0) {
		errno = -err;
		return NULL;
	}
	return l->names.v;
}

int sonde_view_live__stats(const struct sonde_view_live *l, struct sonde_view_source_stats *st)
{
	if (!l || !st || st->sz < sizeof(*st))
		return -EINVAL;
	st->frames = l->names.resolved;
	st->unresolved_frames = l->names.unresolved;
	st->wall_by_switches = l->switches;
	st->events = l->events.n;
	return 0;
}
