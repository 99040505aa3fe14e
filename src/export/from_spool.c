/* Builds a profile from a spool: streams the file through the spool decoder (so memory
 * grows with distinct modules, frames and stacks plus one small entry per sample), and
 * symbolizes each distinct frame once, when it is defined. Spool ids are dense and
 * defined before use (docs/spool.md), so plain arrays map them to profile ids.
 *
 * A frame no module covered (module 0: typically JIT code whose mapping the recorder did not
 * see) needs a pid to find its JIT perf map, and a frame record names none. The writer
 * defines frames and nodes right before the sample that first uses them, so such a frame
 * is held back, with every node defined after it, until the next sample: its thread gives
 * the pid, then the held frames are symbolized and the held nodes built, in order. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/spool_reader.h>
#include <sonde/view.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "base/u64map.h"
#include "export/acct.h"
#include "export/profile.h"
#include "tail/tail.h"

enum { READ_CHUNK = 1 << 20, MAX_INLINE = 64 };

struct conv_module {
	struct sonde_sym_module m; /* what the symbolizer needs, with owned strings */
	char *path;
	uint8_t build_id[32];
	uint32_t id; /* profile module id */
};

struct held_frame {
	uint32_t id; /* spool frame id */
	uint64_t addr;
};

struct held_node {
	uint32_t id, parent, frame; /* spool ids */
};

struct conv {
	struct sonde_profile *p;
	ARR(uint32_t) pids;		    /* spool thread id -> pid */
	ARR(struct held_frame) held_frames; /* module-0 frames waiting for a pid */
	ARR(struct held_node) held_nodes;   /* nodes defined since the first held frame */
	struct sonde_symbolizer *sym;
	ARR(struct conv_module) mods; /* indexed by spool id; entry 0 unused */
	ARR(uint32_t) frames;	      /* spool frame id -> location id */
	ARR(uint32_t) nodes;	      /* spool node id -> profile node id */
	ARR(uint32_t) threads;	      /* spool thread id -> profile thread id */
	ARR(uint32_t) trunc;	      /* profile node id -> the same path under [truncated], or 0 */
	uint32_t trunc_loc;	      /* the [truncated] location, once made */
	struct sonde_sym_frame out[MAX_INLINE];
	uint64_t sym_failures;
	struct sonde_profile_spool_opts o; /* the caller's, missing fields zero */
	ARR(uint8_t) keep;		   /* spool thread id -> passes pid, tid and comm */
	/* the readers' one filter set (include/sonde/view.h): by thread (pid, tid, comm),
	 * and by CPU and time on the sample clock (once the header gives its start) */
	struct sonde_view_filter who, when;
	/* roots: spool thread id -> its root frame's location (0: not made yet); the root
	 * location of each (name << 32 | pid) + 1, name the process's name when the frame was
	 * made; the command of each pid's main thread so far (its comm string id), by pid + 1;
	 * and the node of (root location << 32 | node) */
	ARR(uint32_t) root_of;
	struct u64map proc_root, main_comm, rooted;
	/* sample records decoded (each kept sample's wall_ns holds its index until the
	 * weights are known), and whether the recording may say its tasks' on-CPU time exactly:
	 * it kept the CPUs' switches, or every switch-out of its threads (a COVERAGE record;
	 * sonde__acct_weights decides) */
	uint64_t spool_samples;
	bool exact_on;
};

int sonde__prof_sym_module_from_spool(const struct sonde_spool_record *r, char **path,
				      uint8_t build_id[32], struct sonde_sym_module *out)
{
	const struct sonde_spool_module_def *d = &r->module.def;

	*path = sonde__strndup(d->path ? d->path : "", r->module.path_len);
	if (!*path)
		return -ENOMEM;
	if (d->build_id_len)
		memcpy(build_id, d->build_id, d->build_id_len);
	sonde__tail_sym_module(d, out);
	out->path = *path;
	out->build_id = d->build_id_len ? build_id : NULL;
	return 0;
}

static int on_module(struct conv *c, const struct sonde_spool_record *r)
{
	const struct sonde_spool_module_def *d = &r->module.def;
	struct conv_module *cm = ARR_PUSH(c->mods);

	if (!cm)
		return -ENOMEM;
	if (sonde__prof_sym_module_from_spool(r, &cm->path, cm->build_id, &cm->m))
		return -ENOMEM;
	struct sonde_profile_module pm = {
		.pid = d->pid,
		.flags = d->flags,
		.start = d->start,
		.end = d->end,
		.pgoff = d->pgoff,
		.build_id = cm->m.build_id,
		.build_id_len = d->build_id_len,
		.path = cm->path[0] ? cm->path : NULL,
	};
	return sonde_profile__add_module(c->p, &pm, &cm->id);
}

static int on_frame(struct conv *c, const struct sonde_spool_record *r)
{
	const struct sonde_spool_frame *f = &r->frame.frame;
	uint32_t *slot = ARR_PUSH(c->frames);
	int n = 0;

	if (!slot)
		return -ENOMEM;
	if (f->module >= c->mods.n)
		return -SONDE_E_REFERENCE;
	if (c->sym && !f->module) {
		struct held_frame *h = ARR_PUSH(c->held_frames);
		if (!h)
			return -ENOMEM;
		*h = (struct held_frame){c->frames.n - 1, f->addr};
		return 0;
	}
	if (c->sym && f->module) {
		struct conv_module *m = &c->mods.v[f->module];
		/* the module array moves as it grows: its build id is reached afresh */
		m->m.build_id = m->m.build_id_len ? m->build_id : NULL;
		n = sonde_symbolizer__symbolize(c->sym, &m->m, f->addr, c->out, MAX_INLINE);
		if (n < 0 && c->sym_failures++ == 0)
			sonde_warn("cannot symbolize %s+0x%llx: %s", c->mods.v[f->module].path,
				   (unsigned long long)f->addr, sonde_strerror(n));
	}
	return sonde_profile__add_location(c->p, f->module ? c->mods.v[f->module].id : 0, f->addr,
					   c->out, n > 0 ? (size_t)n : 0, slot);
}

/* The node for the same call path hung under a "[truncated]" root frame, so that a stack
 * the recorder cut short does not pose as starting at its outermost recorded frame.
 * Memoized per node; parents are mapped before their children. */
static int64_t truncated_node(struct conv *c, uint32_t node)
{
	struct sonde_profile *p = c->p;

	if (!c->trunc_loc) {
		struct sonde_sym_frame f = {.name = "[truncated]"};
		int err = sonde_profile__add_location(p, 0, 0, &f, 1, &c->trunc_loc);
		if (err)
			return err;
	}
	if (node >= c->trunc.n) {
		uint32_t old = c->trunc.n;
		if (sonde__array_grow(&c->trunc.v, &c->trunc.cap, p->nodes.n, sizeof(uint32_t), 16))
			return -ENOMEM;
		memset(c->trunc.v + old, 0, (p->nodes.n - old) * sizeof(uint32_t));
		c->trunc.n = p->nodes.n;
	}
	if (c->trunc.v[node])
		return c->trunc.v[node];
	int64_t parent = node ? truncated_node(c, p->nodes.v[node].parent) : 0;
	if (parent < 0)
		return parent;
	int64_t id = sonde__prof_add_node(p, (uint32_t)parent,
					  node ? p->nodes.v[node].loc : c->trunc_loc);
	if (id < 0)
		return id;
	c->trunc.v[node] = (uint32_t)id;
	return id;
}

static int on_node(struct conv *c, uint32_t parent, uint32_t frame, uint32_t *slot)
{
	int64_t node = sonde__prof_add_node(c->p, c->nodes.v[parent], c->frames.v[frame]);

	*slot = (uint32_t)node;
	return node < 0 ? (int)node : 0;
}

/* Symbolizes the held frames with process pid's JIT map, then builds the held nodes. */
static int release_held(struct conv *c, uint32_t pid)
{
	int err = 0;

	for (uint32_t i = 0; i < c->held_frames.n && !err; i++) {
		const struct held_frame *h = &c->held_frames.v[i];
		int n = sonde_symbolizer__symbolize_raw(c->sym, pid, h->addr, c->out, MAX_INLINE);
		err = sonde_profile__add_location(c->p, 0, h->addr, c->out, n > 0 ? (size_t)n : 0,
						  &c->frames.v[h->id]);
	}
	for (uint32_t i = 0; i < c->held_nodes.n && !err; i++) {
		const struct held_node *h = &c->held_nodes.v[i];
		err = on_node(c, h->parent, h->frame, &c->nodes.v[h->id]);
	}
	c->held_frames.n = c->held_nodes.n = 0;
	return err;
}

/* The root frame of spool thread `thread` (opts.roots), made on first use. */
static int64_t root_loc(struct conv *c, uint32_t thread)
{
	struct sonde_profile *p = c->p;
	const struct prof_thread *t = &p->threads.v[c->threads.v[thread]];
	uint64_t *have = NULL;
	char label[300];

	if (c->root_of.v[thread])
		return c->root_of.v[thread];
	/* a process's frame is named by its main thread's name so far (after an exec, the
	 * new program's), one frame per name */
	uint64_t *main = sonde__u64map_get(&c->main_comm, (uint64_t)t->pid + 1);
	uint32_t name = main ? (uint32_t)*main : t->comm;
	uint64_t key = ((uint64_t)name << 32 | t->pid) + 1;
	if (c->o.roots == SONDE_PROFILE_ROOTS_PROCESS) {
		have = sonde__u64map_get(&c->proc_root, key);
		if (have) {
			c->root_of.v[thread] = (uint32_t)*have;
			return *have;
		}
		snprintf(label, sizeof(label), "%s-%u", prof_str(p, name), t->pid);
	} else {
		snprintf(label, sizeof(label), "%s-%u/%u", prof_str(p, t->comm), t->pid, t->tid);
	}
	struct sonde_sym_frame f = {.name = label};
	uint32_t loc;
	int err = sonde_profile__add_location(p, 0, 0, &f, 1, &loc);
	if (!err && c->o.roots == SONDE_PROFILE_ROOTS_PROCESS)
		err = sonde__u64map_put(&c->proc_root, key, loc);
	if (err)
		return err;
	c->root_of.v[thread] = loc;
	return loc;
}

/* The node for the same call path under root location `root`; memoized. */
static int64_t rooted_node(struct conv *c, uint32_t root, uint32_t node)
{
	struct sonde_profile *p = c->p;
	uint64_t key = (uint64_t)root << 32 | node, *have = sonde__u64map_get(&c->rooted, key);

	if (have)
		return (int64_t)*have;
	int64_t parent = node ? rooted_node(c, root, p->nodes.v[node].parent) : 0;
	if (parent < 0)
		return parent;
	int64_t id = sonde__prof_add_node(p, (uint32_t)parent, node ? p->nodes.v[node].loc : root);
	if (id < 0)
		return id;
	int err = sonde__u64map_put(&c->rooted, key, (uint64_t)id);
	return err ? err : id;
}

/* node under its thread's root frame when opts.roots asks for one. */
static int64_t with_root(struct conv *c, uint32_t thread, int64_t node)
{
	if (node < 0 || !c->o.roots || thread == 0)
		return node;
	int64_t root = root_loc(c, thread);
	return root < 0 ? root : rooted_node(c, (uint32_t)root, (uint32_t)node);
}

/* Whether a thread passes the pid, tid and comm filters. */
static bool thread_kept(const struct conv *c, uint32_t pid, uint32_t tid, const char *comm)
{
	struct sonde_view_event e = {.sz = sizeof(e), .pid = pid, .tid = tid, .comm = comm};

	return sonde_view_filter__match(&c->who, &e) == 1;
}

/* Whether what thread took at time_ns on cpu passes every filter. */
static bool kept(const struct conv *c, uint32_t thread, uint64_t time_ns, uint32_t cpu)
{
	struct sonde_view_event e = {.sz = sizeof(e), .cpu = cpu, .time_ns = time_ns};

	if (!c->keep.v[thread])
		return false;
	return !c->when.n_cpus && !c->when.time_range ? true
						      : sonde_view_filter__match(&c->when, &e) == 1;
}

static int on_sample(struct conv *c, const struct sonde_spool_record *r)
{
	if (r->sample.thread >= c->threads.n || r->sample.stack >= c->nodes.n)
		return -SONDE_E_REFERENCE;
	uint64_t index = c->spool_samples++;
	if (!kept(c, r->sample.thread, r->sample.time_ns, r->sample.cpu))
		return 0;
	if (c->held_frames.n) {
		int err = release_held(c, c->pids.v[r->sample.thread]);
		if (err)
			return err;
	}
	int64_t node = c->nodes.v[r->sample.stack];
	if (r->sample.flags & SONDE_SAMPLE_TRUNCATED)
		node = truncated_node(c, (uint32_t)node);
	node = with_root(c, r->sample.thread, node);
	if (node < 0)
		return (int)node;
	int err =
		sonde__prof_add_sample_node(c->p, r->sample.time_ns, c->threads.v[r->sample.thread],
					    (uint32_t)node, r->sample.cpu, 1);
	if (!err)
		c->p->samples.v[c->p->samples.n - 1].wall_ns = index;
	return err;
}

/* Where the recording kept the CPUs' switches or every switch-out of its threads, the wall
 * metric weighs each sample by its task's on-CPU time (sonde__acct_weights, as `sonde
 * report --metric wall`), and
 * the tasks that ran unsampled weigh under [on-cpu: not sampled]: the spool at path is
 * read again, whole, for that. Otherwise each sample weighs the period. */
static int weigh_wall(struct conv *c, const char *path)
{
	struct sonde_profile *p = c->p;
	struct sonde_acct_weights w = {0};
	struct sonde_spool *s = c->exact_on && path ? sonde_spool__open(path, NULL) : NULL;
	int err = s ? sonde__acct_weights(s, &w) : 0;

	sonde_spool__close(s);
	if (err || !w.exact || w.n_samples != c->spool_samples) {
		for (uint32_t i = 0; i < p->samples.n; i++)
			p->samples.v[i].wall_ns = p->samples.v[i].count * p->info.sample_period_ns;
		sonde__acct_weights_free(&w);
		return err;
	}
	p->exact_wall = true;
	for (uint32_t i = 0; i < p->samples.n; i++) {
		struct prof_sample *sm = &p->samples.v[i];
		sm->wall_ns = w.sample_ns[sm->wall_ns];
		p->wall_on_ns += sm->wall_ns;
	}
	for (size_t i = 0; i < w.n_unsampled && !err; i++) {
		const struct sonde_acct_unsampled *u = &w.unsampled[i];
		if (u->thread >= c->threads.n ||
		    !kept(c, u->thread, u->time_ns, SONDE_SPOOL_CPU_NONE))
			continue;
		int64_t node = with_root(c, u->thread, 0);
		err = node < 0 ? (int)node
			       : sonde__prof_add_unsampled(p, u->time_ns, c->threads.v[u->thread],
							   (uint32_t)node, u->on_ns);
	}
	sonde__acct_weights_free(&w);
	return err;
}

/* An off-CPU interval: its stack as a sample's, the state frame added by the model. */
/* An off-CPU interval in the state it left the CPU in, or (state PROF_STATE_UNKNOWN) one a
 * loss cut. */
static int on_offcpu(struct conv *c, const struct sonde_spool_record *r, uint32_t state)
{
	const struct sonde_spool_offcpu *o = &r->offcpu;

	if (o->thread >= c->threads.n || o->stack >= c->nodes.n)
		return -SONDE_E_REFERENCE;
	if (!kept(c, o->thread, o->switch_out_ns, o->cpu))
		return 0;
	if (c->held_frames.n) {
		int err = release_held(c, c->pids.v[o->thread]);
		if (err)
			return err;
	}
	int64_t node = c->nodes.v[o->stack];
	if (o->flags & SONDE_SAMPLE_TRUNCATED)
		node = truncated_node(c, (uint32_t)node);
	node = with_root(c, o->thread, node);
	if (node < 0)
		return (int)node;
	return sonde__prof_add_offcpu_node(c->p, o->switch_out_ns, c->threads.v[o->thread], o->cpu,
					   (uint32_t)node, o->switch_in_ns - o->switch_out_ns, state);
}

static int on_record(struct conv *c, const struct sonde_spool_record *r)
{
	struct sonde_profile_info *info = &c->p->info;
	uint32_t *slot;

	switch (r->type) {
	case SONDE_SPOOL_REC_HEADER:
		info->start_time_ns = r->header.h.start_time_ns;
		info->start_monotonic_ns = r->header.h.start_monotonic_ns;
		info->sample_period_ns = r->header.h.sample_period_ns;
		sonde__prof_view_filters(&c->o, info->start_monotonic_ns, &c->who, &c->when);
		return 0;
	case SONDE_SPOOL_REC_MODULE:
		return on_module(c, r);
	case SONDE_SPOOL_REC_FRAME:
		return on_frame(c, r);
	case SONDE_SPOOL_REC_NODE:
		/* the decoder validated every reference; checked again because an index out
		 * of these arrays would be a memory error rather than a bad file */
		if (r->node.parent >= c->nodes.n || r->node.frame >= c->frames.n)
			return -SONDE_E_REFERENCE;
		slot = ARR_PUSH(c->nodes);
		if (!slot)
			return -ENOMEM;
		if (c->held_frames.n) {
			struct held_node *h = ARR_PUSH(c->held_nodes);
			if (!h)
				return -ENOMEM;
			*h = (struct held_node){c->nodes.n - 1, r->node.parent, r->node.frame};
			return 0;
		}
		return on_node(c, r->node.parent, r->node.frame, slot);
	case SONDE_SPOOL_REC_THREAD: {
		char comm[256];
		snprintf(comm, sizeof(comm), "%.*s", (int)r->thread.comm_len, r->thread.comm);
		uint32_t *pid = ARR_PUSH(c->pids);
		uint8_t *keep = ARR_PUSH(c->keep);
		if (!pid || !keep || !ARR_PUSH(c->root_of))
			return -ENOMEM;
		*pid = r->thread.pid;
		*keep = thread_kept(c, r->thread.pid, r->thread.tid, comm);
		slot = ARR_PUSH(c->threads);
		int err = slot ? sonde_profile__add_thread(c->p, r->thread.pid, r->thread.tid, comm,
							   slot)
			       : -ENOMEM;
		if (!err && c->o.roots == SONDE_PROFILE_ROOTS_PROCESS &&
		    r->thread.pid == r->thread.tid)
			err = sonde__u64map_put(&c->main_comm, (uint64_t)r->thread.pid + 1,
						c->p->threads.v[*slot].comm);
		return err;
	}
	case SONDE_SPOOL_REC_SAMPLE:
		return on_sample(c, r);
	case SONDE_SPOOL_REC_SWITCHES:
	case SONDE_SPOOL_REC_COVERAGE:
		c->exact_on = true;
		return 0;
	case SONDE_SPOOL_REC_OFFCPU:
		return on_offcpu(c, r, r->offcpu.state);
	case SONDE_SPOOL_REC_UNKNOWN:
		return on_offcpu(c, r, PROF_STATE_UNKNOWN);
	case SONDE_SPOOL_REC_OFFCPU_SHORT:
		if (r->offcpu_short.thread >= c->threads.n)
			return -SONDE_E_REFERENCE;
		if (!c->keep.v[r->offcpu_short.thread] || c->o.n_cpus || c->o.time_range)
			return 0; /* counted per thread, neither on a CPU nor at a time */
		return sonde_profile__add_offcpu_short(c->p, c->threads.v[r->offcpu_short.thread],
						       r->offcpu_short.count,
						       r->offcpu_short.total_ns);
	default: /* retirements change nothing here; END and optional records carry nothing */
		return 0;
	}
}

/* Runs the decoder over the file in chunks; a record cut by the end of the file is the
 * truncated tail of a recording that did not finish: kept out, and said. */
static int decode_file(struct conv *c, int fd, const char *path)
{
	struct sonde_spool_decoder *d = sonde_spool_decoder__new();
	size_t cap = READ_CHUNK, len = 0;
	uint8_t *buf = sonde__malloc(cap);
	struct sonde_spool_record rec;
	int err = 0;
	bool eof = false;

	if (!d || !buf) {
		err = -ENOMEM;
		goto out;
	}
	while (!err) {
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		eof = n == 0;
		len += (size_t)n;
		size_t off = 0;
		int r = 0;
		while (off < len &&
		       (r = sonde_spool_decoder__decode(d, buf + off, len - off, &rec)) > 0) {
			off += (size_t)r;
			err = on_record(c, &rec);
			if (err)
				break;
		}
		if (!err && off < len && r < 0)
			err = r;
		memmove(buf, buf + off, len - off);
		len -= off;
		if (err || eof)
			break;
		if (len == cap) { /* one record larger than the buffer */
			uint8_t *nb = sonde__realloc(buf, cap * 2);
			if (!nb) {
				err = -ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	/* Bytes that are not a spool's were refused by the decoder (bad magic); what is left
	 * without error and without a whole header is a prefix of one, or nothing. */
	if (!err && sonde_spool_decoder__offset(d) == 0)
		err = -SONDE_E_EMPTY;
	else if (!err && (len || !sonde_spool_decoder__ended(d)))
		/* the words of `sonde report`, so that every reader says it alike: the samples
		 * decoded, whatever the filters kept of them */
		sonde_warn("%s: truncated at byte %llu, recovered %llu samples", path,
			   (unsigned long long)sonde_spool_decoder__offset(d),
			   (unsigned long long)c->spool_samples);
	if (err)
		sonde_debug("%s: error at byte %llu", path,
			    (unsigned long long)sonde_spool_decoder__offset(d));
out:
	sonde__free(buf);
	sonde_spool_decoder__free(d);
	return err;
}

static void conv_free(struct conv *c)
{
	for (uint32_t i = 0; i < c->mods.n; i++)
		sonde__free(c->mods.v[i].path);
	ARR_FREE(c->mods);
	ARR_FREE(c->frames);
	ARR_FREE(c->nodes);
	ARR_FREE(c->threads);
	ARR_FREE(c->pids);
	ARR_FREE(c->held_frames);
	ARR_FREE(c->held_nodes);
	ARR_FREE(c->trunc);
	ARR_FREE(c->keep);
	ARR_FREE(c->root_of);
	sonde__u64map_free(&c->proc_root);
	sonde__u64map_free(&c->main_comm);
	sonde__u64map_free(&c->rooted);
	sonde_symbolizer__free(c->sym);
}

/* sonde__prof_from_spool_fd; path: the file's, to read again for the wall metric's
 * weights (NULL: samples weigh the period). */
static struct sonde_profile *from_fd(int fd, const char *name,
				     const struct sonde_profile_spool_opts *opts, const char *path)
{
	struct conv c = {0};
	int err = -ENOMEM;

	if (!OPTS_VALID(opts, sonde_profile_spool_opts)) {
		errno = EINVAL;
		return NULL;
	}
	if (opts)
		OPTS_COPY(&c.o, opts);
	if ((c.o.n_pids && !c.o.pids) || (c.o.n_tids && !c.o.tids) ||
	    (c.o.n_comms && !c.o.comms) || (c.o.n_cpus && !c.o.cpus)) {
		errno = EINVAL;
		return NULL;
	}
	if (c.o.roots > SONDE_PROFILE_ROOTS_AUTO) {
		errno = EINVAL;
		return NULL;
	}
	c.p = sonde_profile__new(NULL);
	if (c.p)
		c.p->roots = (uint8_t)c.o.roots;
	/* the profile holds process roots either way; its views say whether to draw them */
	if (c.o.roots == SONDE_PROFILE_ROOTS_AUTO)
		c.o.roots = SONDE_PROFILE_ROOTS_PROCESS;
	/* entry 0 of each map stands for spool id 0 ("none", the root) */
	if (!c.p || !ARR_PUSH(c.mods) || !ARR_PUSH(c.frames) || !ARR_PUSH(c.nodes) ||
	    !ARR_PUSH(c.threads) || !ARR_PUSH(c.pids) || !ARR_PUSH(c.keep) || !ARR_PUSH(c.root_of))
		goto fail;
	sonde__prof_view_filters(&c.o, 0, &c.who, &c.when); /* the header sets the start */
	/* thread id 0, no thread known: kept unless a thread is asked for */
	c.keep.v[0] = !c.o.n_pids && !c.o.n_tids && !c.o.n_comms;
	if (!OPTS_GET(opts, no_symbolize, false)) {
		c.sym = sonde_symbolizer__new(OPTS_GET(opts, sym, NULL));
		if (!c.sym) {
			err = -errno;
			goto fail;
		}
	}
	err = decode_file(&c, fd, name);
	/* Frames no sample used (a cut recording): symbolized without a process. */
	if (!err && c.held_frames.n)
		err = release_held(&c, 0);
	if (!err)
		err = weigh_wall(&c, path);
	if (err)
		goto fail;
	if (c.sym_failures)
		sonde_warn("%llu addresses could not be symbolized",
			   (unsigned long long)c.sym_failures);
	conv_free(&c);
	return c.p;
fail:
	conv_free(&c);
	sonde_profile__free(c.p);
	errno = err < 0 ? -err : EINVAL;
	return NULL;
}

struct sonde_profile *sonde__prof_from_spool_fd(int fd, const char *name,
						const struct sonde_profile_spool_opts *opts)
{
	return from_fd(fd, name, opts, NULL);
}

struct sonde_profile *sonde_profile__from_spool(const char *path,
						const struct sonde_profile_spool_opts *opts)
{
	if (!path) {
		errno = EINVAL;
		return NULL;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct sonde_profile *p = from_fd(fd, path, opts, path);
	int saved = errno;
	close(fd);
	errno = saved;
	return p;
}
