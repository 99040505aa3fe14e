/* Perfetto profile packets from spool records; see perfetto.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/spool.h>
#include <sonde/view.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "export/perfetto.h"
#include "export/profile.h"

enum { MAX_INLINE = 64, PF_ANON_MAPPING = 0x7fffffff };

/* TracePacket and nested field numbers (perfetto-wire.md §6.1, §7). */
enum {
	F_PACKET_FTRACE_EVENTS = 1,
	F_PACKET_PROCESS_TREE = 2,
	F_PACKET_CLOCK_SNAPSHOT = 6,
	F_PACKET_TIMESTAMP = 8,
	F_PACKET_INTERNED_DATA = 12,
	F_PACKET_SEQUENCE_FLAGS = 13,
	F_PACKET_TIMESTAMP_CLOCK_ID = 58,
	F_PACKET_DEFAULTS = 59,
	F_PACKET_PERF_SAMPLE = 66,
	F_PACKET_TRACK_EVENT = 11,
	F_PACKET_TRACK_DESCRIPTOR = 60,
	F_DEFAULTS_PERF_SAMPLE = 12,
	F_PERF_DEFAULTS_TIMEBASE = 1,
	F_TIMEBASE_PERIOD = 1,
	F_TIMEBASE_FREQUENCY = 2,
	F_TIMEBASE_COUNTER = 4,
	F_TIMEBASE_TRACEPOINT = 3,
	F_TRACEPOINT_NAME = 1,
	F_TRACEPOINT_FILTER = 2,
	F_INTERNED_FUNCTION_NAMES = 5,
	F_INTERNED_FRAMES = 6,
	F_INTERNED_CALLSTACKS = 7,
	F_INTERNED_BUILD_IDS = 16,
	F_INTERNED_MAPPING_PATHS = 17,
	F_INTERNED_MAPPINGS = 19,
	F_SAMPLE_CPU = 1,
	F_SAMPLE_PID = 2,
	F_SAMPLE_TID = 3,
	F_SAMPLE_CALLSTACK_IID = 4,
	F_SAMPLE_CPU_MODE = 5,
	F_SAMPLE_TIMEBASE_COUNT = 6,
	F_SAMPLE_UNWIND_ERROR = 16,
	F_SAMPLE_KERNEL_RECORDS_LOST = 17,
	F_SAMPLE_PRODUCER_EVENT = 19,
	F_PROCESS_TREE_PROCESSES = 1,
	F_PROCESS_TREE_THREADS = 2,
	SEQ_INCREMENTAL_STATE_CLEARED = 1,
	SEQ_NEEDS_INCREMENTAL_STATE = 2,
	CLOCK_REALTIME_ID = 1,
	CLOCK_MONOTONIC_ID = 3,
	CLOCK_BOOTTIME_ID = 6,
	CPU_MODE_KERNEL = 1,
	CPU_MODE_USER = 2,
};

/* TrackDescriptor, ThreadDescriptor and TrackEvent (protos/perfetto/trace/track_event/). */
enum {
	F_TRACK_UUID = 1,
	F_TRACK_NAME = 2,
	F_TRACK_THREAD = 4,
	F_THREAD_PID = 1,
	F_THREAD_TID = 2,
	F_EVENT_TYPE = 9,
	F_EVENT_TRACK_UUID = 11,
	F_EVENT_NAME = 23,
	TYPE_SLICE_BEGIN = 1,
	TYPE_SLICE_END = 2,
};
/* The uuid of a thread's unknown-time track: this | tid. */
static const uint64_t pf_unknown_track_uuid = 0x736f6e64ull << 32;

/* FtraceEventBundle, FtraceEvent and the sched events (protos/perfetto/trace/ftrace/). */
enum {
	F_BUNDLE_CPU = 1,
	F_BUNDLE_EVENT = 2,
	F_FTRACE_TIMESTAMP = 1,
	F_FTRACE_PID = 2,
	F_FTRACE_SCHED_SWITCH = 4,
	F_FTRACE_SCHED_WAKING = 20,
	F_SWITCH_PREV_COMM = 1,
	F_SWITCH_PREV_PID = 2,
	F_SWITCH_PREV_PRIO = 3,
	F_SWITCH_PREV_STATE = 4,
	F_SWITCH_NEXT_COMM = 5,
	F_SWITCH_NEXT_PID = 6,
	F_SWITCH_NEXT_PRIO = 7,
	F_WAKING_COMM = 1,
	F_WAKING_PID = 2,
	F_WAKING_PRIO = 3,
	F_WAKING_SUCCESS = 4,
	F_WAKING_TARGET_CPU = 5,
	/* the kernel's TASK_* bits as sched_switch reports prev_state: only the bits below
	 * 0x40, which every kernel version (and Trace Processor's decoding of each) shares;
	 * preemption's TASK_REPORT_MAX bit moved between versions, so R is plain 0 */
	TASK_RUNNING = 0,
	TASK_INTERRUPTIBLE = 1,
	TASK_UNINTERRUPTIBLE = 2,
	TASK_STOPPED = 4,
	TASK_EXIT_DEAD = 0x10,
	/* the spool does not record priorities: the default nice 0 task's */
	PF_DEFAULT_PRIO = 120,
	/* sched events held before they are sorted into per-CPU bundles */
	PF_SCHED_BATCH = 4096,
	/* without the CPUs' switches, the events made from intervals are held up to this
	 * many, so that each CPU's sequence is chained in time order (flush_sched) */
	PF_SCHED_HOLD = 1 << 20,
	/* threads whose runs one CPU's sequence can hold suspended under another's */
	PF_CHAIN_DEPTH = 4,
	/* CPUs chained; events of a CPU numbered above are written as they are */
	PF_CHAIN_CPUS = 1 << 16,
	PF_BUNDLE_MAX_EVENTS = 1024,
};

/* One sched event made from an off-CPU interval, held until written in CPU order. */
enum pf_sched_kind { PF_SWITCH_OUT, PF_WAKING, PF_SWITCH_IN, PF_SWITCH };

struct pf_sched {
	uint64_t ts;
	uint32_t cpu;
	uint32_t thread; /* pf_enc.threads index; PF_SWITCH: the prev tid */
	uint32_t waker;	 /* tid, for PF_WAKING; PF_SWITCH: the next tid */
	uint32_t seq;	 /* order made, for a stable sort */
	uint8_t kind;	 /* enum pf_sched_kind */
	uint8_t state;	 /* enum sonde_offcpu_state (PF_SWITCH: or SONDE_SWITCH_EXITED) */
};

/* One interning table (function names, build ids or mapping paths): iid = index, iid 0 is
 * the empty string. Strings may hold any bytes (build ids are raw). */
struct pf_str {
	uint32_t off, len, gen;
};

struct pf_strtab {
	struct buf chars;
	ARR(struct pf_str) s;
	struct idmap idx;
};

struct pf_mod {
	uint32_t gen;
	uint32_t bid;	 /* build_ids iid */
	uint32_t *comps; /* mapping_paths iids */
	uint32_t n_comps;
	struct sonde_sym_module sm; /* for the symbolizer; owns path */
	uint8_t build_id[32];
	char *path;
};

struct pf_frame {
	uint32_t module; /* spool module id, 0: raw address */
	uint64_t addr;
	uint32_t first, n; /* expanded frames [first, first + n) in xfn, innermost first */
	uint32_t gen;
	/* A raw address waiting for the pid of the first sample using it, whose JIT perf
	 * map names it (a frame record names no process). */
	bool held;
};

struct pf_node {
	uint32_t parent, frame, gen;
};

struct pf_thread {
	uint32_t pid, tid;
	char comm[64];
	bool kept; /* passes the pid, tid and comm filters (pf_enc_opts.select) */
	/* its switch-in, held until its next switch-out says on which CPU that run was (a
	 * task does not change CPUs while it runs); meanwhile a sample's CPU stands */
	bool in_pending, in_sampled;
	uint32_t in_cpu;
	uint64_t in_ns;
};

/* One CPU's sequence as written without the CPUs' switches: the task on it (0: idle)
 * and the tasks whose runs are suspended under it, innermost last. */
struct pf_chain {
	uint32_t cur, n;
	uint32_t stk[PF_CHAIN_DEPTH];
	bool begun; /* a switch was written: before it, what ran on the CPU is unknown */
};

struct pf_enc {
	struct pf_enc_opts o;
	uint32_t gen; /* current interning generation */
	bool started; /* start packets of this generation written */
	bool have_header, snapshot_done;
	struct sonde_spool_header hdr;
	struct pf_strtab fn, bid, paths;
	ARR(struct pf_mod) mods;
	ARR(struct pf_frame) frames;
	ARR(uint32_t) xfn; /* function_names iid of each expanded frame (frame iid = index + 1) */
	ARR(struct pf_node) nodes;
	ARR(struct pf_thread) threads;
	ARR(uint32_t) pending; /* thread ids not yet in a ProcessTree packet */
	ARR(uint32_t) path;    /* scratch: node ids leaf to root */
	struct u64map pids;    /* pids already in a ProcessTree */
	uint32_t anon_gen;     /* generation the raw-address mapping was emitted in */
	/* interned_data of the packet being built, one buffer per field */
	struct buf i_bid, i_paths, i_fn, i_maps, i_frames, i_stacks;
	struct buf pkt;
	struct sonde_spool_decoder *dec;
	struct buf in; /* sonde__pf_enc_feed's unconsumed bytes */
	struct sonde_sym_frame out[MAX_INLINE];
	ARR(struct pf_sched) sched; /* not yet written */
	ARR(struct pf_chain) chain; /* by CPU: where each CPU's written sequence stands */
	/* The spool keeps each CPU's switches (SWITCHES records): they are written as they
	 * are, and the intervals give only their samples and wakeups. */
	bool real_switches;
	struct u64map tids; /* tid -> pf_enc.threads index of its latest definition */
	/* tid -> generation + 1 its unknown-time track was described in */
	struct u64map unknown_tracks;
	uint32_t sched_seq;
	uint64_t samples, sym_failures, offcpu;
	uint32_t n_held; /* frames still held (pf_frame.held) */
	/* pf_enc_opts.select split into the thread's filters (who) and the CPU and time
	 * filters (when), set at the header (the time window counts from its start) */
	bool selecting;
	struct sonde_view_filter who, when;
};

/* ---- strings ---- */

struct str_key {
	const void *p;
	size_t len;
};

static bool str_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct pf_strtab *t = ctx;
	const struct str_key *k = key;
	const struct pf_str *s = &t->s.v[id];

	return s->len == k->len && memcmp(t->chars.data + s->off, k->p, k->len) == 0;
}

static int strtab_init(struct pf_strtab *t)
{
	return ARR_PUSH(t->s) ? 0 : -ENOMEM; /* iid 0: "" */
}

static void strtab_free(struct pf_strtab *t)
{
	sonde__buf_free(&t->chars);
	ARR_FREE(t->s);
	sonde__idmap_free(&t->idx);
}

static int64_t strtab_intern(struct pf_strtab *t, const void *p, size_t len)
{
	if (!len)
		return 0;
	struct str_key k = {p, len};
	uint32_t h = (uint32_t)idmap_hash_bytes(p, len);
	int64_t id = sonde__idmap_find(&t->idx, h, str_eq, t, &k);
	if (id >= 0)
		return id;
	if (t->chars.len + len > UINT32_MAX)
		return -ENOMEM;
	struct pf_str *s = ARR_PUSH(t->s);
	if (!s)
		return -ENOMEM;
	*s = (struct pf_str){(uint32_t)t->chars.len, (uint32_t)len, 0};
	sonde__buf_append(&t->chars, p, len);
	if (buf_error(&t->chars) || sonde__idmap_insert(&t->idx, h, t->s.n - 1) < 0) {
		t->s.n--;
		return -ENOMEM;
	}
	return t->s.n - 1;
}

/* Adds InternedString{iid, str} to out unless it was emitted in this generation. */
static void strtab_use(struct pf_enc *e, struct pf_strtab *t, uint32_t iid, struct buf *out,
		       uint32_t field)
{
	struct pf_str *s = &t->s.v[iid];

	if (!iid || s->gen == e->gen)
		return;
	s->gen = e->gen;
	size_t m = sonde__pb_begin(out, field);
	sonde__pb_put_varint(out, 1, iid);
	sonde__pb_put_bytes(out, 2, t->chars.data + s->off, s->len);
	sonde__pb_end(out, m);
}

/* ---- packets ---- */

static int emit(struct pf_enc *e)
{
	if (buf_error(&e->pkt))
		return -ENOMEM;
	int err = e->o.sink(e->o.ctx, e->pkt.data, e->pkt.len);
	sonde__buf_reset(&e->pkt);
	return err;
}

static void put_timebase(struct pf_enc *e, struct buf *b)
{
	uint64_t freq = e->o.frequency;

	if (!freq && !e->o.period && e->hdr.sample_period_ns)
		freq = (1000000000ull + e->hdr.sample_period_ns / 2) / e->hdr.sample_period_ns;
	size_t m = sonde__pb_begin(b, F_PERF_DEFAULTS_TIMEBASE);
	if (e->o.period)
		sonde__pb_put_varint(b, F_TIMEBASE_PERIOD, e->o.period);
	else
		sonde__pb_put_varint(b, F_TIMEBASE_FREQUENCY, freq);
	if (e->o.counter)
		sonde__pb_put_varint(b, F_TIMEBASE_COUNTER, e->o.counter);
	if (e->o.tracepoint) {
		size_t t = sonde__pb_begin(b, F_TIMEBASE_TRACEPOINT);
		sonde__pb_put_string(b, F_TRACEPOINT_NAME, e->o.tracepoint);
		sonde__pb_put_string(b, F_TRACEPOINT_FILTER, e->o.tracepoint_filter);
		sonde__pb_end(b, t);
	}
	sonde__pb_end(b, m);
}

static int emit_clock_snapshot(struct pf_enc *e)
{
	const uint32_t ids[] = {CLOCK_BOOTTIME_ID, CLOCK_MONOTONIC_ID, CLOCK_REALTIME_ID};
	const uint64_t ts[] = {e->hdr.start_monotonic_ns, e->hdr.start_monotonic_ns,
			       e->hdr.start_time_ns};
	struct buf *b = &e->pkt;

	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, e->hdr.start_monotonic_ns);
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
	size_t m = sonde__pb_begin(b, F_PACKET_CLOCK_SNAPSHOT);
	for (int i = 0; i < 3; i++) {
		size_t c = sonde__pb_begin(b, 1);
		sonde__pb_put_varint(b, 1, ids[i]);
		sonde__pb_put_varint(b, 2, ts[i]);
		sonde__pb_end(b, c);
	}
	sonde__pb_put_varint(b, 2, CLOCK_BOOTTIME_ID); /* primary_trace_clock */
	sonde__pb_end(b, m);
	e->snapshot_done = true;
	return emit(e);
}

/* §7.2 step 1: the defaults packet (clearing the sequence's state), then the iid-0
 * strings, once per generation, before any other packet of it. */
static int ensure_started(struct pf_enc *e, uint64_t ts)
{
	struct buf *b = &e->pkt;
	int err;

	if (e->started)
		return 0;
	if (e->o.clock_snapshot && e->have_header && !e->snapshot_done) {
		err = emit_clock_snapshot(e);
		if (err)
			return err;
	}
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, ts);
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
	sonde__pb_put_varint(b, F_PACKET_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
	size_t d = sonde__pb_begin(b, F_PACKET_DEFAULTS);
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
	size_t p = sonde__pb_begin(b, F_DEFAULTS_PERF_SAMPLE);
	put_timebase(e, b);
	sonde__pb_end(b, p);
	sonde__pb_end(b, d);
	err = emit(e);
	if (err)
		return err;
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, ts);
	sonde__pb_put_varint(b, F_PACKET_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
	size_t i = sonde__pb_begin(b, F_PACKET_INTERNED_DATA);
	static const uint32_t tables[] = {F_INTERNED_BUILD_IDS, F_INTERNED_MAPPING_PATHS,
					  F_INTERNED_FUNCTION_NAMES};
	for (int k = 0; k < 3; k++) {
		size_t m = sonde__pb_begin(b, tables[k]);
		sonde__pb_put_varint(b, 1, 0);
		sonde__pb_put_bytes(b, 2, "", 0);
		sonde__pb_end(b, m);
	}
	sonde__pb_end(b, i);
	e->started = true;
	return emit(e);
}

void sonde__pf_enc_clear_incremental(struct pf_enc *e)
{
	if (!e)
		return;
	e->gen++;
	e->started = false;
}

/* ---- modules, frames, callstacks ---- */

static int on_module(struct pf_enc *e, const struct sonde_spool_record *r)
{
	const struct sonde_spool_module_def *d = &r->module.def;
	struct pf_mod *m = ARR_PUSH(e->mods);

	if (!m)
		return -ENOMEM;
	if (sonde__prof_sym_module_from_spool(r, &m->path, m->build_id, &m->sm))
		return -ENOMEM;
	if (d->flags & SONDE_MODULE_KERNEL) {
		/* §7.2: the kernel is one mapping named /kernel, without build id */
		int64_t k = strtab_intern(&e->paths, "kernel", 6);
		m->comps = sonde__malloc(sizeof(uint32_t));
		if (k < 0 || !m->comps)
			return -ENOMEM;
		m->comps[m->n_comps++] = (uint32_t)k;
		return 0;
	}
	int64_t bid = strtab_intern(&e->bid, d->build_id, d->build_id_len);
	if (bid < 0)
		return (int)bid;
	m->bid = (uint32_t)bid;
	m->comps = sonde__malloc((strlen(m->path) / 2 + 2) * sizeof(uint32_t));
	if (!m->comps)
		return -ENOMEM;
	/* one mapping_paths entry per path component; the path is "/" + join("/") */
	for (const char *p = m->path; *p;) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n) {
			int64_t c = strtab_intern(&e->paths, p, n);
			if (c < 0)
				return (int)c;
			m->comps[m->n_comps++] = (uint32_t)c;
		}
		p += n + (end != NULL);
	}
	return 0;
}

static void use_mapping(struct pf_enc *e, uint32_t id)
{
	struct buf *b = &e->i_maps;

	if (!id) {
		/* addresses no module covered share one anonymous mapping */
		if (e->anon_gen == e->gen)
			return;
		e->anon_gen = e->gen;
		size_t m = sonde__pb_begin(b, F_INTERNED_MAPPINGS);
		sonde__pb_put_varint(b, 1, PF_ANON_MAPPING);
		sonde__pb_end(b, m);
		return;
	}
	struct pf_mod *pm = &e->mods.v[id];
	if (pm->gen == e->gen)
		return;
	pm->gen = e->gen;
	bool kernel = pm->sm.flags & SONDE_MODULE_KERNEL;

	strtab_use(e, &e->bid, pm->bid, &e->i_bid, F_INTERNED_BUILD_IDS);
	for (uint32_t i = 0; i < pm->n_comps; i++)
		strtab_use(e, &e->paths, pm->comps[i], &e->i_paths, F_INTERNED_MAPPING_PATHS);
	size_t m = sonde__pb_begin(b, F_INTERNED_MAPPINGS);
	sonde__pb_put_varint(b, 1, id);
	if (pm->bid)
		sonde__pb_put_varint(b, 2, pm->bid);
	if (!kernel) {
		sonde__pb_put_varint(b, 3, pm->sm.pgoff); /* start_offset */
		sonde__pb_put_varint(b, 4, pm->sm.start);
		sonde__pb_put_varint(b, 5, pm->sm.end);
		sonde__pb_put_varint(b, 8, pm->sm.pgoff); /* exact_offset */
	}
	for (uint32_t i = 0; i < pm->n_comps; i++)
		sonde__pb_put_varint(b, 7, pm->comps[i]);
	sonde__pb_end(b, m);
}

/* Appends the n symbolized names in e->out (none: one unnamed entry) as f's expansion. */
static int push_names(struct pf_enc *e, struct pf_frame *f, int n)
{
	f->first = e->xfn.n;
	for (int i = 0; i < (n > 0 ? n : 1); i++) {
		int64_t s =
			n > 0 ? strtab_intern(&e->fn, e->out[i].name, strlen(e->out[i].name)) : 0;
		uint32_t *x = s < 0 ? NULL : ARR_PUSH(e->xfn);
		if (!x)
			return -ENOMEM;
		*x = (uint32_t)s;
	}
	f->n = e->xfn.n - f->first;
	return 0;
}

static int on_frame(struct pf_enc *e, const struct sonde_spool_record *r)
{
	const struct sonde_spool_frame *f = &r->frame.frame;
	struct pf_frame *pf = ARR_PUSH(e->frames);
	int n = 0;

	if (!pf)
		return -ENOMEM;
	if (f->module >= e->mods.n)
		return -SONDE_E_REFERENCE;
	*pf = (struct pf_frame){.module = f->module, .addr = f->addr, .first = e->xfn.n};
	if (e->o.sym && !f->module) {
		pf->held = true;
		e->n_held++;
		return 0;
	}
	if (e->o.sym) {
		struct pf_mod *m = &e->mods.v[f->module];
		/* the module array moves as it grows: its build id is reached afresh */
		m->sm.build_id = m->sm.build_id_len ? m->build_id : NULL;
		n = sonde_symbolizer__symbolize(e->o.sym, &m->sm, f->addr, e->out, MAX_INLINE);
		if (n < 0 && e->sym_failures++ == 0)
			sonde_warn("cannot symbolize %s+0x%llx: %s", e->mods.v[f->module].path,
				   (unsigned long long)f->addr, sonde_strerror(n));
	}
	return push_names(e, pf, n);
}

/* Names the held frames of stack `node` through process pid's JIT perf map. */
static int release_held(struct pf_enc *e, uint32_t node, uint32_t pid)
{
	for (uint32_t n = node; n && e->n_held; n = e->nodes.v[n].parent) {
		struct pf_frame *f = &e->frames.v[e->nodes.v[n].frame];
		if (!f->held)
			continue;
		int k = sonde_symbolizer__symbolize_raw(e->o.sym, pid, f->addr, e->out, MAX_INLINE);
		int err = push_names(e, f, k);
		if (err)
			return err;
		f->held = false;
		e->n_held--;
	}
	return 0;
}

static void use_frame(struct pf_enc *e, uint32_t id)
{
	struct pf_frame *f = &e->frames.v[id];
	struct buf *b = &e->i_frames;

	if (f->gen == e->gen)
		return;
	f->gen = e->gen;
	use_mapping(e, f->module);
	bool kernel = f->module && (e->mods.v[f->module].sm.flags & SONDE_MODULE_KERNEL);
	for (uint32_t i = 0; i < f->n; i++) {
		uint32_t fn = e->xfn.v[f->first + i];
		strtab_use(e, &e->fn, fn, &e->i_fn, F_INTERNED_FUNCTION_NAMES);
		size_t m = sonde__pb_begin(b, F_INTERNED_FRAMES);
		sonde__pb_put_varint(b, 1, f->first + i + 1);
		if (fn)
			sonde__pb_put_varint(b, 2, fn);
		sonde__pb_put_varint(b, 3, f->module ? f->module : PF_ANON_MAPPING);
		/* rel_pc: the file offset, which is the ELF-relative pc for the usual layout
		 * where segments have p_vaddr == p_offset. A kernel frame has none: as in
		 * traced_perf, only its function name is written, so that a trace never
		 * discloses kernel addresses (KASLR). */
		if (!kernel)
			sonde__pb_put_varint(b, 4, f->addr);
		sonde__pb_end(b, m);
	}
}

/* Whether frame id goes into callstacks: all of them, or with user_frames SKIP only kernel
 * frames. */
static bool frame_kept(const struct pf_enc *e, uint32_t id)
{
	const struct pf_frame *f = &e->frames.v[id];

	return !e->o.skip_user_frames ||
	       (f->module && (e->mods.v[f->module].sm.flags & SONDE_MODULE_KERNEL));
}

/* Whether the sample's callstack has any frame to show. */
static bool stack_shown(const struct pf_enc *e, uint32_t node)
{
	for (uint32_t n = node; n; n = e->nodes.v[n].parent)
		if (frame_kept(e, e->nodes.v[n].frame))
			return true;
	return false;
}

/* Interns callstack `node` (iid = the spool node id) with everything it refers to. */
static int use_callstack(struct pf_enc *e, uint32_t node)
{
	struct buf *b = &e->i_stacks;

	if (e->nodes.v[node].gen == e->gen)
		return 0;
	e->path.n = 0;
	for (uint32_t n = node; n; n = e->nodes.v[n].parent) {
		if (!frame_kept(e, e->nodes.v[n].frame))
			continue;
		uint32_t *slot = ARR_PUSH(e->path);
		if (!slot)
			return -ENOMEM;
		*slot = n;
		use_frame(e, e->nodes.v[n].frame);
	}
	e->nodes.v[node].gen = e->gen;
	size_t m = sonde__pb_begin(b, F_INTERNED_CALLSTACKS);
	sonde__pb_put_varint(b, 1, node);
	/* frame_ids[0] is the root: walk the path backwards, and each frame's inline
	 * expansion from the real function (last) to the innermost inlined one */
	for (uint32_t i = e->path.n; i-- > 0;) {
		const struct pf_frame *f = &e->frames.v[e->nodes.v[e->path.v[i]].frame];
		for (uint32_t k = f->n; k-- > 0;)
			sonde__pb_put_varint(b, 2, f->first + k + 1);
	}
	sonde__pb_end(b, m);
	return 0;
}

/* Writes the interned_data collected for the current packet: strings first, then
 * mappings, frames and callstacks (§7.2). */
static void put_interned(struct pf_enc *e)
{
	struct buf *parts[] = {&e->i_bid,  &e->i_paths,	 &e->i_fn,
			       &e->i_maps, &e->i_frames, &e->i_stacks};
	size_t total = 0;

	for (size_t i = 0; i < 6; i++)
		total += parts[i]->len;
	if (total) {
		size_t m = sonde__pb_begin(&e->pkt, F_PACKET_INTERNED_DATA);
		for (size_t i = 0; i < 6; i++)
			sonde__buf_append(&e->pkt, parts[i]->data, parts[i]->len);
		sonde__pb_end(&e->pkt, m);
	}
	for (size_t i = 0; i < 6; i++) {
		if (buf_error(parts[i]))
			e->pkt.failed = true;
		sonde__buf_reset(parts[i]);
	}
}

/* ---- processes and threads (§7.3) ---- */

static size_t read_small(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;

	if (fd < 0)
		return 0;
	while (len < cap) {
		ssize_t n = read(fd, out + len, cap - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	return len;
}

/* ProcessDescriptor-like entry of ProcessTree: {1 pid, 2 ppid, 3 cmdline repeated}. */
static void put_process(struct pf_enc *e, const struct pf_thread *t)
{
	struct buf *b = &e->pkt;
	char cmd[4096], path[64];
	size_t len = 0;
	int ppid = 0;

	if (e->o.live_proc) {
		snprintf(path, sizeof(path), "/proc/%u/cmdline", t->pid);
		len = read_small(path, cmd, sizeof(cmd) - 1);
		char stat[512];
		snprintf(path, sizeof(path), "/proc/%u/stat", t->pid);
		size_t sl = read_small(path, stat, sizeof(stat) - 1);
		stat[sl] = 0;
		const char *rp = strrchr(stat, ')');
		if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1)
			ppid = 0;
	}
	size_t m = sonde__pb_begin(b, F_PROCESS_TREE_PROCESSES);
	sonde__pb_put_varint(b, 1, t->pid);
	sonde__pb_put_varint(b, 2, (uint64_t)(int64_t)ppid);
	if (len) {
		cmd[len] = 0;
		for (size_t i = 0; i < len; i += strlen(cmd + i) + 1)
			sonde__pb_put_string(b, 3, cmd + i);
	} else {
		/* Trace Processor ignores processes without a cmdline: the comm stands in */
		sonde__pb_put_string(b, 3, t->comm[0] ? t->comm : "?");
	}
	sonde__pb_end(b, m);
}

static int flush_process_tree(struct pf_enc *e, uint64_t ts)
{
	struct buf *b = &e->pkt;

	if (!e->pending.n)
		return 0;
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, ts);
	size_t m = sonde__pb_begin(b, F_PACKET_PROCESS_TREE);
	for (uint32_t i = 0; i < e->pending.n; i++) {
		const struct pf_thread *t = &e->threads.v[e->pending.v[i]];
		if (sonde__u64map_get(&e->pids, t->pid))
			continue;
		/* name the process after its main thread when that one is pending too */
		const struct pf_thread *main_t = t;
		for (uint32_t j = 0; j < e->pending.n; j++)
			if (e->threads.v[e->pending.v[j]].tid == t->pid)
				main_t = &e->threads.v[e->pending.v[j]];
		if (sonde__u64map_put(&e->pids, t->pid, 1) < 0)
			return -ENOMEM;
		put_process(e, main_t);
	}
	for (uint32_t i = 0; i < e->pending.n; i++) {
		const struct pf_thread *t = &e->threads.v[e->pending.v[i]];
		size_t tm = sonde__pb_begin(b, F_PROCESS_TREE_THREADS);
		sonde__pb_put_varint(b, 1, t->tid);
		sonde__pb_put_string(b, 2, t->comm);
		sonde__pb_put_varint(b, 3, t->pid);
		sonde__pb_end(b, tm);
	}
	sonde__pb_end(b, m);
	e->pending.n = 0;
	return emit(e);
}

/* Whether a thread of this pid, tid and comm passes the thread filters. */
static bool thread_kept(const struct pf_enc *e, uint32_t pid, uint32_t tid, const char *comm)
{
	struct sonde_view_event ev = {.sz = sizeof(ev), .pid = pid, .tid = tid, .comm = comm};

	return !e->selecting || sonde_view_filter__match(&e->who, &ev) == 1;
}

/* Whether a moment on cpu passes the CPU and time filters. */
static bool when_kept(const struct pf_enc *e, uint64_t ts, uint32_t cpu)
{
	struct sonde_view_event ev = {.sz = sizeof(ev), .cpu = cpu, .time_ns = ts};

	return !e->selecting || (!e->when.n_cpus && !e->when.time_range) ||
	       sonde_view_filter__match(&e->when, &ev) == 1;
}

/* The tid a switch shows for task tid: itself when its thread is kept, else the idle task
 * (0), so that each CPU's switches still chain. A task the spool never named is kept only
 * when no thread filter is given. */
static uint32_t switch_task(const struct pf_enc *e, uint32_t tid)
{
	if (!tid || !e->selecting || (!e->who.n_pids && !e->who.n_tids && !e->who.n_comms))
		return tid;
	uint64_t *i = sonde__u64map_get(&e->tids, tid);
	return i && *i < e->threads.n && e->threads.v[*i].kept ? tid : 0;
}

static int on_thread(struct pf_enc *e, const struct sonde_spool_record *r)
{
	struct pf_thread *t = ARR_PUSH(e->threads);
	char comm[256];

	if (!t)
		return -ENOMEM;
	t->pid = r->thread.pid;
	t->tid = r->thread.tid;
	snprintf(t->comm, sizeof(t->comm), "%.*s", (int)r->thread.comm_len, r->thread.comm);
	snprintf(comm, sizeof(comm), "%.*s", (int)r->thread.comm_len, r->thread.comm);
	t->kept = thread_kept(e, t->pid, t->tid, comm);
	if (t->kept) {
		uint32_t *p = ARR_PUSH(e->pending);
		if (!p)
			return -ENOMEM;
		*p = e->threads.n - 1;
	}
	return sonde__u64map_put(&e->tids, t->tid, e->threads.n - 1);
}

/* ---- samples ---- */

struct pf_sample {
	uint64_t ts;
	uint32_t thread, cpu, node, flags;
	uint64_t timebase_count; /* 0: none */
};

/* A PerfSample packet with its interned callstack (a ProcessTree first for new threads). */
static int put_perf_sample(struct pf_enc *e, const struct pf_sample *s)
{
	uint32_t node = s->node;
	int err;

	if (s->thread >= e->threads.n || !s->thread || node >= e->nodes.n)
		return -SONDE_E_REFERENCE;
	err = ensure_started(e, s->ts);
	if (!err)
		err = flush_process_tree(e, s->ts);
	bool stack = node && stack_shown(e, node);
	if (!err && stack && e->n_held)
		err = release_held(e, node, e->threads.v[s->thread].pid);
	if (!err && stack)
		err = use_callstack(e, node);
	if (err)
		return err;
	const struct pf_thread *t = &e->threads.v[s->thread];
	struct buf *b = &e->pkt;
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, s->ts);
	sonde__pb_put_varint(b, F_PACKET_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
	put_interned(e);
	size_t m = sonde__pb_begin(b, F_PACKET_PERF_SAMPLE);
	if (s->cpu != SONDE_SPOOL_CPU_NONE)
		sonde__pb_put_varint(b, F_SAMPLE_CPU, s->cpu);
	sonde__pb_put_varint(b, F_SAMPLE_PID, t->pid);
	sonde__pb_put_varint(b, F_SAMPLE_TID, t->tid);
	if (stack)
		sonde__pb_put_varint(b, F_SAMPLE_CALLSTACK_IID, node);
	sonde__pb_put_varint(b, F_SAMPLE_CPU_MODE,
			     s->flags & SONDE_SAMPLE_KERNEL ? CPU_MODE_KERNEL : CPU_MODE_USER);
	if (s->timebase_count)
		sonde__pb_put_varint(b, F_SAMPLE_TIMEBASE_COUNT, s->timebase_count);
	/* a stack cut short where the copied stack memory ended */
	if (s->flags & SONDE_SAMPLE_TRUNCATED)
		sonde__pb_put_varint(b, F_SAMPLE_UNWIND_ERROR, PF_UNWIND_MEMORY_INVALID);
	sonde__pb_end(b, m);
	return emit(e);
}

static int on_sample(struct pf_enc *e, const struct sonde_spool_record *r)
{
	struct pf_sample s = {r->sample.time_ns, r->sample.thread, r->sample.cpu,
			      r->sample.stack,	 r->sample.flags,  e->hdr.sample_period_ns};

	if (s.thread >= e->threads.n || !s.thread)
		return -SONDE_E_REFERENCE;
	struct pf_thread *t = &e->threads.v[s.thread];
	if (t->in_pending && !t->in_sampled && s.ts >= t->in_ns && s.cpu != SONDE_SPOOL_CPU_NONE) {
		t->in_cpu = s.cpu;
		t->in_sampled = true;
	}
	if (!t->kept || !when_kept(e, s.ts, s.cpu))
		return 0;
	int err = put_perf_sample(e, &s);

	if (!err)
		e->samples++;
	return err;
}

/* ---- off-CPU intervals as sched events (thread states) ---- */

static int sched_cmp(const void *a, const void *b)
{
	const struct pf_sched *x = a, *y = b;

	if (x->cpu != y->cpu)
		return x->cpu < y->cpu ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const uint32_t task_state_bits[SONDE_OFFCPU_STATES] = {
	[SONDE_OFFCPU_RUNNABLE] = TASK_RUNNING,
	[SONDE_OFFCPU_SLEEPING] = TASK_INTERRUPTIBLE,
	[SONDE_OFFCPU_BLOCKED] = TASK_UNINTERRUPTIBLE,
	[SONDE_OFFCPU_OTHER] = TASK_STOPPED,
};

/* The CPU's idle task stands for whoever ran before or after: the spool does not say. */
static void put_idle(struct buf *b, uint32_t comm_field, uint32_t pid_field, uint32_t cpu)
{
	char idle[32];

	snprintf(idle, sizeof(idle), "swapper/%u", cpu);
	sonde__pb_put_string(b, comm_field, idle);
	sonde__pb_put_varint(b, pid_field, 0);
}

/* The waker as written: itself, or with wakers_recorded_only and a task the stream has
 * no thread of, the idle task (0). */
static uint32_t shown_waker(const struct pf_enc *e, uint32_t tid)
{
	if (e->selecting)
		tid = switch_task(e, tid);
	if (!e->o.wakers_recorded_only)
		return tid;
	for (uint32_t i = 1; i < e->threads.n; i++)
		if (e->threads.v[i].tid == tid)
			return tid;
	return 0;
}

/* A task of a real switch by its tid: the idle task, or the name of its latest
 * definition (a task the spool never names, such as the recorder, has none). */
static void put_task(struct pf_enc *e, uint32_t comm_field, uint32_t pid_field, uint32_t tid,
		     uint32_t cpu)
{
	uint64_t *i = tid ? sonde__u64map_get(&e->tids, tid) : NULL;

	if (!tid) {
		put_idle(&e->pkt, comm_field, pid_field, cpu);
		return;
	}
	sonde__pb_put_string(&e->pkt, comm_field,
			     i && *i < e->threads.n ? e->threads.v[*i].comm : "");
	sonde__pb_put_varint(&e->pkt, pid_field, tid);
}

static void put_real_switch(struct pf_enc *e, const struct pf_sched *ev)
{
	uint32_t state = ev->state & ~(uint32_t)SONDE_SWITCH_INFERRED;
	struct buf *b = &e->pkt;
	size_t m = sonde__pb_begin(b, F_BUNDLE_EVENT);

	sonde__pb_put_varint(b, F_FTRACE_TIMESTAMP, ev->ts + (uint64_t)e->o.sched_boot_offset_ns);
	sonde__pb_put_varint(b, F_FTRACE_PID, ev->thread);
	size_t w = sonde__pb_begin(b, F_FTRACE_SCHED_SWITCH);
	put_task(e, F_SWITCH_PREV_COMM, F_SWITCH_PREV_PID, ev->thread, ev->cpu);
	sonde__pb_put_varint(b, F_SWITCH_PREV_PRIO, PF_DEFAULT_PRIO);
	sonde__pb_put_varint(b, F_SWITCH_PREV_STATE,
			     state == SONDE_SWITCH_EXITED ? TASK_EXIT_DEAD
			     : ev->thread && state < SONDE_OFFCPU_STATES ? task_state_bits[state]
									 : TASK_RUNNING);
	put_task(e, F_SWITCH_NEXT_COMM, F_SWITCH_NEXT_PID, ev->waker, ev->cpu);
	sonde__pb_put_varint(b, F_SWITCH_NEXT_PRIO, PF_DEFAULT_PRIO);
	sonde__pb_end(b, w);
	sonde__pb_end(b, m);
}

static void put_sched_event(struct pf_enc *e, const struct pf_sched *ev)
{
	if (ev->kind == PF_SWITCH) {
		put_real_switch(e, ev);
		return;
	}
	const struct pf_thread *t = &e->threads.v[ev->thread];
	struct buf *b = &e->pkt;
	size_t m = sonde__pb_begin(b, F_BUNDLE_EVENT);

	sonde__pb_put_varint(b, F_FTRACE_TIMESTAMP, ev->ts + (uint64_t)e->o.sched_boot_offset_ns);
	/* the task that emitted the event: the one leaving, the waker, the idle task */
	sonde__pb_put_varint(b, F_FTRACE_PID,
			     ev->kind == PF_SWITCH_OUT ? t->tid
			     : ev->kind == PF_WAKING   ? shown_waker(e, ev->waker)
						       : 0);
	if (ev->kind == PF_WAKING) {
		size_t w = sonde__pb_begin(b, F_FTRACE_SCHED_WAKING);
		sonde__pb_put_string(b, F_WAKING_COMM, t->comm);
		sonde__pb_put_varint(b, F_WAKING_PID, t->tid);
		sonde__pb_put_varint(b, F_WAKING_PRIO, PF_DEFAULT_PRIO);
		sonde__pb_put_varint(b, F_WAKING_SUCCESS, 1);
		sonde__pb_put_varint(b, F_WAKING_TARGET_CPU, ev->cpu);
		sonde__pb_end(b, w);
	} else {
		bool out = ev->kind == PF_SWITCH_OUT;
		size_t w = sonde__pb_begin(b, F_FTRACE_SCHED_SWITCH);
		if (out) {
			sonde__pb_put_string(b, F_SWITCH_PREV_COMM, t->comm);
			sonde__pb_put_varint(b, F_SWITCH_PREV_PID, t->tid);
		} else {
			put_idle(b, F_SWITCH_PREV_COMM, F_SWITCH_PREV_PID, ev->cpu);
		}
		sonde__pb_put_varint(b, F_SWITCH_PREV_PRIO, PF_DEFAULT_PRIO);
		sonde__pb_put_varint(b, F_SWITCH_PREV_STATE,
				     out ? task_state_bits[ev->state] : TASK_RUNNING);
		if (out) {
			put_idle(b, F_SWITCH_NEXT_COMM, F_SWITCH_NEXT_PID, ev->cpu);
		} else {
			sonde__pb_put_string(b, F_SWITCH_NEXT_COMM, t->comm);
			sonde__pb_put_varint(b, F_SWITCH_NEXT_PID, t->tid);
		}
		sonde__pb_put_varint(b, F_SWITCH_NEXT_PRIO, PF_DEFAULT_PRIO);
		sonde__pb_end(b, w);
	}
	sonde__pb_end(b, m);
}

static struct pf_chain *chain_of(struct pf_enc *e, uint32_t cpu)
{
	while (e->chain.n <= cpu) {
		struct pf_chain *c = ARR_PUSH(e->chain);
		if (!c)
			return NULL;
		*c = (struct pf_chain){0};
	}
	return &e->chain.v[cpu];
}

static void add_switch(struct pf_sched *out, uint32_t *n, const struct pf_sched *ev, uint32_t prev,
		       uint32_t state, uint32_t next)
{
	out[(*n)++] =
		(struct pf_sched){ev->ts, ev->cpu, prev, next, ev->seq, PF_SWITCH, (uint8_t)state};
}

/* Without the CPUs' switches, each CPU's sequence is made to chain (every switch's prev
 * the previous one's next): the held switch-outs and switch-ins (sorted by CPU and time)
 * become switches from and to the task the CPU's sequence has on it. A switch-in while
 * another task runs there means that task was off the CPU for a wait shorter than
 * --off-cpu-min (not stacked, so not in the spool): it is switched out as runnable and
 * back in when the inner run ends. The CPU's first switch, a switch-out, is written as it
 * is (what ran before is unknown). A later switch-out while another task is on the CPU
 * (the thread's first, running since before the recording, or one whose run was
 * suspended under another's that outlasted it) follows a run of no length: the other task
 * is switched out as runnable, the thread in and out at once, and the other back in. */
static int chain_sched(struct pf_enc *e)
{
	uint32_t n = 0, cap = e->sched.n * 2;
	struct pf_sched *out = sonde__calloc(cap ? cap : 1, sizeof(*out));

	if (!out)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->sched.n; i++) {
		const struct pf_sched *ev = &e->sched.v[i];
		struct pf_chain *c = ev->cpu < PF_CHAIN_CPUS ? chain_of(e, ev->cpu) : NULL;
		if (!c && ev->cpu < PF_CHAIN_CPUS) {
			sonde__free(out);
			return -ENOMEM;
		}
		if (!c || ev->kind == PF_WAKING || ev->kind == PF_SWITCH) {
			out[n++] = *ev;
			continue;
		}
		uint32_t tid = e->threads.v[ev->thread].tid;
		bool begun = c->begun;
		c->begun = true;
		if (ev->kind == PF_SWITCH_OUT && !begun) {
			/* the CPU's first switch has nothing to chain to: no run of no length */
			add_switch(out, &n, ev, tid, ev->state, 0);
			continue;
		}
		if (ev->kind == PF_SWITCH_IN) {
			if (c->cur == tid)
				continue;
			if (c->cur && c->n < PF_CHAIN_DEPTH)
				c->stk[c->n++] = c->cur;
			add_switch(out, &n, ev, c->cur, SONDE_OFFCPU_RUNNABLE, tid);
			c->cur = tid;
			continue;
		}
		if (c->cur == tid) {
			uint32_t next = c->n ? c->stk[--c->n] : 0;
			add_switch(out, &n, ev, tid, ev->state, next);
			c->cur = next;
			continue;
		}
		for (uint32_t k = 0; k < c->n; k++)
			if (c->stk[k] == tid) {
				memmove(c->stk + k, c->stk + k + 1,
					(c->n - k - 1) * sizeof(*c->stk));
				c->n--;
				break;
			}
		add_switch(out, &n, ev, c->cur, SONDE_OFFCPU_RUNNABLE, tid);
		add_switch(out, &n, ev, tid, ev->state, c->cur);
	}
	sonde__free(e->sched.v);
	e->sched.v = out;
	e->sched.n = n;
	e->sched.cap = cap ? cap : 1;
	return 0;
}

/* Writes the held sched events as FtraceEventBundles, one CPU's events in time order per
 * bundle (at most PF_BUNDLE_MAX_EVENTS each). */
static int flush_sched(struct pf_enc *e)
{
	int err = 0;

	if (e->selecting) {
		/* a switch shows a task left out as the idle task, and goes when both are */
		uint32_t n = 0;
		for (uint32_t i = 0; i < e->sched.n; i++) {
			struct pf_sched ev = e->sched.v[i];
			if (ev.kind == PF_SWITCH) {
				uint32_t prev = switch_task(e, ev.thread);
				uint32_t next = switch_task(e, ev.waker);
				if (!prev && !next)
					continue;
				if (prev != ev.thread)
					ev.state = SONDE_OFFCPU_RUNNABLE;
				ev.thread = prev;
				ev.waker = next;
			}
			e->sched.v[n++] = ev;
		}
		e->sched.n = n;
	}
	if (!e->sched.n)
		return 0;
	qsort(e->sched.v, e->sched.n, sizeof(*e->sched.v), sched_cmp);
	if (!e->real_switches && (err = chain_sched(e)) < 0)
		return err;
	for (uint32_t i = 0; i < e->sched.n && !err;) {
		uint32_t cpu = e->sched.v[i].cpu, n = 0;
		size_t m = sonde__pb_begin(&e->pkt, F_PACKET_FTRACE_EVENTS);
		sonde__pb_put_varint(&e->pkt, F_BUNDLE_CPU, cpu);
		for (; i < e->sched.n && e->sched.v[i].cpu == cpu && n < PF_BUNDLE_MAX_EVENTS;
		     i++, n++)
			put_sched_event(e, &e->sched.v[i]);
		sonde__pb_end(&e->pkt, m);
		err = emit(e);
	}
	e->sched.n = 0;
	return err;
}

static int push_sched(struct pf_enc *e, uint64_t ts, uint32_t cpu, uint32_t thread,
		      enum pf_sched_kind kind, uint32_t state, uint32_t waker)
{
	struct pf_sched *ev = ARR_PUSH(e->sched);

	if (!ev)
		return -ENOMEM;
	*ev = (struct pf_sched){
		ts, cpu, thread, waker, e->sched_seq++, (uint8_t)kind, (uint8_t)state};
	return 0;
}

/* An off-CPU interval: its blocking stack as a PerfSample at the switch-out, and on the
 * CPU it left the sched events Trace Processor derives the thread's states from: a
 * sched_switch out with its state, a sched_waking when the waker was seen (runnable from
 * then) and a sched_switch back in at its switch-in (running again; the spool does not
 * record where it resumed, so on the same CPU). An interval still open when the recording
 * ended has no switch-in; one whose CPU is not known has no sched events. */
static int on_offcpu(struct pf_enc *e, const struct sonde_spool_record *r)
{
	const struct sonde_spool_offcpu *o = &r->offcpu;
	struct pf_sample s = {o->switch_out_ns, o->thread, o->cpu, o->stack, o->flags, 0};
	uint32_t state = o->state < SONDE_OFFCPU_STATES ? o->state : SONDE_OFFCPU_OTHER;
	int err = 0;

	if (o->thread >= e->threads.n || !o->thread)
		return -SONDE_E_REFERENCE;
	/* with filters: a thread chosen, on a CPU chosen; each event within the window */
	bool out_kept = when_kept(e, o->switch_out_ns, o->cpu);
	if (!e->threads.v[o->thread].kept || (!out_kept && !when_kept(e, o->switch_in_ns, o->cpu)))
		return 0;
	if (out_kept)
		err = put_perf_sample(e, &s);
	if (err || o->cpu == SONDE_SPOOL_CPU_NONE)
		return err;
	e->offcpu++;
	struct pf_thread *t = &e->threads.v[o->thread];
	/* the run from the previous switch-in ended here: it was on this CPU */
	if (!e->real_switches && t->in_pending) {
		t->in_pending = false;
		uint32_t cpu = t->in_ns <= o->switch_out_ns ? o->cpu : t->in_cpu;
		if (when_kept(e, t->in_ns, cpu))
			err = push_sched(e, t->in_ns, cpu, o->thread, PF_SWITCH_IN, 0, 0);
	}
	if (!err && !e->real_switches && out_kept)
		err = push_sched(e, o->switch_out_ns, o->cpu, o->thread, PF_SWITCH_OUT, state, 0);
	if (!err && o->wakeup_ns && o->wakeup_ns >= o->switch_out_ns &&
	    o->wakeup_ns <= o->switch_in_ns && state != SONDE_OFFCPU_RUNNABLE &&
	    when_kept(e, o->wakeup_ns, o->cpu))
		err = push_sched(e, o->wakeup_ns, o->cpu, o->thread, PF_WAKING, 0, o->waker_tid);
	if (!err && !(o->flags & SONDE_OFFCPU_OPEN) && !e->real_switches) {
		t->in_pending = true;
		t->in_sampled = false;
		t->in_cpu = o->cpu;
		t->in_ns = o->switch_in_ns;
	}
	/* A live data source writes in batches, as its PerfSamples go out at once: the
	 * switches of a whole session are not held back to its end; its CPUs' sequences
	 * chain across batches through their chain state. */
	uint32_t hold = e->real_switches || e->o.live_proc ? PF_SCHED_BATCH : PF_SCHED_HOLD;
	if (!err && e->sched.n >= hold)
		err = flush_sched(e);
	return err;
}

/* The held switch-ins, each on the CPU of the thread's first sample after it, else the
 * CPU it left. */
static int push_pending_ins(struct pf_enc *e)
{
	int err = 0;

	for (uint32_t i = 1; i < e->threads.n && !err; i++) {
		struct pf_thread *t = &e->threads.v[i];
		if (!t->in_pending)
			continue;
		t->in_pending = false;
		if (when_kept(e, t->in_ns, t->in_cpu))
			err = push_sched(e, t->in_ns, t->in_cpu, i, PF_SWITCH_IN, 0, 0);
	}
	return err;
}

/* Time a loss covered (an UNKNOWN record): a slice "[unknown: lost records]" from its
 * switch-out to its switch-in on a track of its thread's (a TrackDescriptor with the
 * thread's pid and tid, once per generation), so that a trace shows where the thread's
 * time is not known; the thread's states there are not (no sched event is made up). An
 * interval still open when the recording ended has no end: its slice runs to the end of
 * the trace. */
static int put_unknown_track(struct pf_enc *e, const struct pf_thread *t, uint64_t uuid,
			     uint64_t ts)
{
	uint64_t *had = sonde__u64map_get(&e->unknown_tracks, t->tid);
	struct buf *b = &e->pkt;

	if (had && *had == (uint64_t)e->gen + 1)
		return 0;
	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, ts);
	size_t d = sonde__pb_begin(b, F_PACKET_TRACK_DESCRIPTOR);
	sonde__pb_put_varint(b, F_TRACK_UUID, uuid);
	sonde__pb_put_string(b, F_TRACK_NAME, "[unknown: lost records]");
	size_t th = sonde__pb_begin(b, F_TRACK_THREAD);
	sonde__pb_put_varint(b, F_THREAD_PID, t->pid);
	sonde__pb_put_varint(b, F_THREAD_TID, t->tid);
	sonde__pb_end(b, th);
	sonde__pb_end(b, d);
	int err = emit(e);
	return err ? err : sonde__u64map_put(&e->unknown_tracks, t->tid, (uint64_t)e->gen + 1);
}

static int put_unknown_edge(struct pf_enc *e, uint64_t uuid, uint64_t ts, uint32_t type)
{
	struct buf *b = &e->pkt;

	sonde__pb_put_varint(b, F_PACKET_TIMESTAMP, ts);
	size_t m = sonde__pb_begin(b, F_PACKET_TRACK_EVENT);
	sonde__pb_put_varint(b, F_EVENT_TYPE, type);
	sonde__pb_put_varint(b, F_EVENT_TRACK_UUID, uuid);
	if (type == TYPE_SLICE_BEGIN)
		sonde__pb_put_string(b, F_EVENT_NAME, "[unknown: lost records]");
	sonde__pb_end(b, m);
	return emit(e);
}

static int on_unknown(struct pf_enc *e, const struct sonde_spool_record *r)
{
	const struct sonde_spool_offcpu *o = &r->offcpu;

	if (!o->thread || o->thread >= e->threads.n)
		return -SONDE_E_REFERENCE;
	const struct pf_thread *t = &e->threads.v[o->thread];
	uint64_t uuid = pf_unknown_track_uuid | t->tid;
	bool open = (o->flags & SONDE_OFFCPU_OPEN) || o->switch_in_ns < o->switch_out_ns;
	uint64_t from = o->switch_out_ns, to = o->switch_in_ns;

	if (!t->kept || (e->selecting && e->when.n_cpus && !when_kept(e, from, o->cpu)))
		return 0;
	/* clipped to the time window: a slice of the part within it */
	if (e->selecting && e->when.time_range) {
		uint64_t lo = e->when.time_from_ns, hi = e->when.time_to_ns;
		if ((hi && from > hi) || (!open && to < lo))
			return 0;
		if (from < lo)
			from = lo;
		if (hi && (open || to > hi)) {
			to = hi;
			open = false;
		}
	}
	int err = ensure_started(e, from);

	if (!err)
		err = put_unknown_track(e, t, uuid, from);
	if (!err)
		err = put_unknown_edge(e, uuid, from, TYPE_SLICE_BEGIN);
	if (!err && !open)
		err = put_unknown_edge(e, uuid, to, TYPE_SLICE_END);
	return err;
}

/* A run of one CPU's switches, as the kernel delivered them. */
static int on_switches(struct pf_enc *e, const struct sonde_spool_record *r)
{
	int err = 0;

	e->real_switches = true;
	if (r->switches.n && (err = ensure_started(e, r->switches.v[0].time_ns)))
		return err;
	for (size_t i = 0; i < r->switches.n && !err; i++) {
		const struct sonde_spool_switch *sw = &r->switches.v[i];
		if (!when_kept(e, sw->time_ns, r->switches.cpu))
			continue;
		err = push_sched(e, sw->time_ns, r->switches.cpu, sw->prev_tid, PF_SWITCH,
				 sw->prev_state, sw->next_tid);
	}
	if (!err && e->sched.n >= PF_SCHED_BATCH)
		err = flush_sched(e);
	return err;
}

int sonde__pf_enc_flush(struct pf_enc *e)
{
	int err = e ? push_pending_ins(e) : 0;

	return e && !err ? flush_sched(e) : err;
}

int sonde__pf_enc_record(struct pf_enc *e, const struct sonde_spool_record *r)
{
	struct pf_node *n;
	int err;

	switch (r->type) {
	case SONDE_SPOOL_REC_HEADER:
		e->hdr = r->header.h;
		e->have_header = true;
		if (e->o.select) {
			e->selecting = true;
			sonde__prof_view_filters(e->o.select, e->hdr.start_monotonic_ns, &e->who,
						 &e->when);
		}
		return ensure_started(e, e->hdr.start_monotonic_ns);
	case SONDE_SPOOL_REC_MODULE:
		return on_module(e, r);
	case SONDE_SPOOL_REC_FRAME:
		return on_frame(e, r);
	case SONDE_SPOOL_REC_NODE:
		if (r->node.parent >= e->nodes.n || r->node.frame >= e->frames.n || !r->node.frame)
			return -SONDE_E_REFERENCE;
		n = ARR_PUSH(e->nodes);
		if (!n)
			return -ENOMEM;
		n->parent = r->node.parent;
		n->frame = r->node.frame;
		return 0;
	case SONDE_SPOOL_REC_THREAD:
		return on_thread(e, r);
	case SONDE_SPOOL_REC_SAMPLE:
		return on_sample(e, r);
	case SONDE_SPOOL_REC_OFFCPU:
		return on_offcpu(e, r);
	case SONDE_SPOOL_REC_SWITCHES:
		return on_switches(e, r);
	case SONDE_SPOOL_REC_UNKNOWN:
		return on_unknown(e, r);
	case SONDE_SPOOL_REC_END:
		/* threads that never had a sample still get their names */
		err = e->started ? flush_process_tree(e, e->hdr.start_monotonic_ns) : 0;
		return err ? err : sonde__pf_enc_flush(e);
	default:
		return 0;
	}
}

int sonde__pf_enc_feed(struct pf_enc *e, const void *buf, size_t len)
{
	struct sonde_spool_record rec;
	size_t off = 0;
	int r = 0, err = 0;

	if (!len)
		return 0;
	sonde__buf_append(&e->in, buf, len);
	if (buf_error(&e->in))
		return -ENOMEM;
	while (off < e->in.len && (r = sonde_spool_decoder__decode(e->dec, e->in.data + off,
								   e->in.len - off, &rec)) > 0) {
		off += (size_t)r;
		err = sonde__pf_enc_record(e, &rec);
		if (err)
			break;
	}
	if (!err && r < 0)
		err = r;
	if (off) {
		memmove(e->in.data, e->in.data + off, e->in.len - off);
		e->in.len -= off;
	}
	return err;
}

int sonde__pf_enc_lost(struct pf_enc *e, uint64_t ts, uint64_t n)
{
	int err = ensure_started(e, ts);

	if (err || !n)
		return err;
	sonde__pb_put_varint(&e->pkt, F_PACKET_TIMESTAMP, ts);
	sonde__pb_put_varint(&e->pkt, F_PACKET_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
	size_t m = sonde__pb_begin(&e->pkt, F_PACKET_PERF_SAMPLE);
	sonde__pb_put_varint(&e->pkt, F_SAMPLE_KERNEL_RECORDS_LOST, n);
	sonde__pb_end(&e->pkt, m);
	return emit(e);
}

int sonde__pf_enc_stop_event(struct pf_enc *e, uint64_t ts, uint32_t reason)
{
	int err = ensure_started(e, ts);

	if (err)
		return err;
	sonde__pb_put_varint(&e->pkt, F_PACKET_TIMESTAMP, ts);
	sonde__pb_put_varint(&e->pkt, F_PACKET_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
	size_t m = sonde__pb_begin(&e->pkt, F_PACKET_PERF_SAMPLE);
	size_t p = sonde__pb_begin(&e->pkt, F_SAMPLE_PRODUCER_EVENT);
	sonde__pb_put_varint(&e->pkt, 1, reason);
	sonde__pb_end(&e->pkt, p);
	sonde__pb_end(&e->pkt, m);
	return emit(e);
}

int sonde__pf_enc_ended(const struct pf_enc *e)
{
	return sonde_spool_decoder__ended(e->dec);
}

uint64_t sonde__pf_enc_samples(const struct pf_enc *e)
{
	return e ? e->samples : 0;
}

uint64_t sonde__pf_enc_offcpu(const struct pf_enc *e)
{
	return e ? e->offcpu : 0;
}

struct pf_enc *sonde__pf_enc_new(const struct pf_enc_opts *o)
{
	struct pf_enc *e = sonde__calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->o = *o;
	e->gen = 1;
	e->dec = sonde_spool_decoder__new();
	/* entry 0 of the spool-indexed tables stands for id 0 ("none") */
	if (!e->dec || strtab_init(&e->fn) || strtab_init(&e->bid) || strtab_init(&e->paths) ||
	    !ARR_PUSH(e->mods) || !ARR_PUSH(e->frames) || !ARR_PUSH(e->nodes) ||
	    !ARR_PUSH(e->threads)) {
		sonde__pf_enc_free(e);
		errno = ENOMEM;
		return NULL;
	}
	return e;
}

void sonde__pf_enc_free(struct pf_enc *e)
{
	if (!e)
		return;
	if (e->sym_failures)
		sonde_warn("%llu addresses could not be symbolized",
			   (unsigned long long)e->sym_failures);
	strtab_free(&e->fn);
	strtab_free(&e->bid);
	strtab_free(&e->paths);
	for (uint32_t i = 0; i < e->mods.n; i++) {
		sonde__free(e->mods.v[i].path);
		sonde__free(e->mods.v[i].comps);
	}
	ARR_FREE(e->mods);
	ARR_FREE(e->frames);
	ARR_FREE(e->xfn);
	ARR_FREE(e->nodes);
	ARR_FREE(e->threads);
	ARR_FREE(e->pending);
	ARR_FREE(e->path);
	ARR_FREE(e->sched);
	ARR_FREE(e->chain);
	sonde__u64map_free(&e->pids);
	sonde__u64map_free(&e->tids);
	sonde__u64map_free(&e->unknown_tracks);
	sonde__buf_free(&e->i_bid);
	sonde__buf_free(&e->i_paths);
	sonde__buf_free(&e->i_fn);
	sonde__buf_free(&e->i_maps);
	sonde__buf_free(&e->i_frames);
	sonde__buf_free(&e->i_stacks);
	sonde__buf_free(&e->pkt);
	sonde__buf_free(&e->in);
	sonde_spool_decoder__free(e->dec);
	sonde__free(e);
}

int sonde__pf_frame_standalone(struct buf *out, const uint8_t *pkt, size_t len, int32_t uid,
			       uint32_t seq_id)
{
	uint8_t suffix[2 + PB_VARINT_MAX * 2];
	size_t n = 0;

	suffix[n++] = 0x18; /* trusted_uid (3), varint */
	n += sonde__pb_varint_encode(suffix + n, (uint64_t)(int64_t)uid);
	suffix[n++] = 0x50; /* trusted_packet_sequence_id (10), varint */
	n += sonde__pb_varint_encode(suffix + n, seq_id);
	buf_put_u8(out, 0x0a);
	sonde__pb_put_varint_raw(out, len + n);
	sonde__buf_append(out, pkt, len);
	sonde__buf_append(out, suffix, n);
	return buf_error(out);
}
