/* sonde report: where a recording spent its samples.
 *
 * Samples are first counted per stack node (the spool's interned call paths), so every
 * distinct stack is symbolized and walked once however many samples share it. Each frame
 * is resolved once through the symbolizer into one or more functions (inline frames are
 * functions of their own unless --no-inline); functions are interned by (label, module).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>
#include <sonde/view.h>

#include "base/buf.h"
#include "base/u64map.h"
#include "export/acct.h"
#include "cli.h"
#include "output.h"
#include "progress.h"

enum { MAX_INLINE = 16 };

struct func {
	char *label;  /* name, plus " (file:line)" with --lines */
	char *module; /* basename of the module, or "[unknown]" */
	uint64_t self, total;
	uint64_t stamp; /* last node counted into total: counts once per stack */
	uint32_t col;	/* in report.rows: func id + 1 of its process/thread label */
};

struct frame_res {
	uint32_t first;	    /* index into report.frame_funcs */
	uint8_t n;	    /* 0: not resolved yet */
	uint8_t unresolved; /* the symbolizer could not name it */
};

enum { MAX_CPU = 1 << 16 };

enum folded_roots { ROOTS_NONE, ROOTS_PROCESS, ROOTS_THREAD };

/* A --folded line's key before its text is made: samples of one stack node under one
 * root frame (0: none). */
struct root_node {
	uint32_t root; /* func id + 1 of the comm-pid[/tid] frame, 0 for none */
	uint32_t node;
	uint64_t count;
};

/* --sort keys. Each orders two functions; ties fall back to the name. A key's table
 * shows the rows that have a count for it (zero_ok: all). */
struct report;
struct sort_key {
	const char *name;
	int (*cmp)(const void *, const void *);
	bool self_rows; /* only rows with self samples */
};

struct report {
	const char *path;
	const char *buildid_cache; /* NULL: the default the recorder writes to */
	const char *path_after;	   /* --diff: the second spool */
	int folded, lines, no_inline, diff, summary;
	long top;
	double percent_limit;
	const struct sort_key *sort; /* NULL: a table by self, then one by total */
	bool sort_cpu;		     /* --sort cpu: samples by CPU instead of by function */
	uint64_t *cpu_count;	     /* samples per CPU, [MAX_CPU] for samples without one */
	uint32_t cpu_max;	     /* highest CPU seen + 1 */
	enum folded_roots roots;
	struct cli_filter filt; /* which samples count (every filter given must match) */
	const char *cpu_list;	/* --cpu as given, for the count line */
	uint64_t from_ns, to_ns; /* --time on the sample clock (to_ns 0: no end), once loaded */
	enum sonde_profile_metric metric; /* --metric: what a sample or an interval weighs */
	uint64_t samples; /* samples (and, for off-CPU metrics, intervals) that passed */
	uint64_t total;	  /* their weight: samples, or nanoseconds */
	uint64_t on_samples, intervals; /* of those, on-CPU samples and off-CPU intervals */
	uint64_t on_ns, off_ns;		/* their weights under a time metric */
	uint64_t unsampled_ns;		/* of on_ns: tasks' stays on CPUs with no sample */
	/* --metric wall: each sample's weight, by the CPUs' switches where the recording
	 * kept them (sonde__acct_weights), and the on-CPU time of tasks never sampled */
	struct sonde_acct_weights weights;
	uint64_t unknown_ns, unknowns;	/* of off_ns: intervals a loss cut, and how many */
	uint64_t short_count, short_ns; /* intervals too short to stack (of the threads kept) */
	uint64_t empty;			/* samples with an empty stack */
	uint32_t processes, tids;	/* distinct processes and threads among them */
	uint64_t fn_stacks;		/* distinct stacks by function: --folded's lines */
	uint64_t unresolved_samples;	/* weight with an unresolved frame on its stack */
	bool stack_unresolved;		/* the stack last expanded has one */
	struct root_node *pairs;	/* --folded-roots: the counted (root, node) pairs */
	size_t n_pairs;
	uint32_t *thread_root; /* by spool thread id: its root frame's func id + 1, 0 unknown */
	/* The process/thread column: rows per (function, process or thread), their labels
	 * borrowed from funcs; row_of maps func id << 32 | col to a row. */
	enum folded_roots column;
	bool column_auto;
	struct func *rows;
	size_t n_rows, rows_cap;
	struct u64map row_of;
	struct sonde_spool *spool;
	struct sonde_spool_info info;
	struct sonde_symbolizer *sym;

	struct func *funcs;
	size_t n_funcs, funcs_cap;
	uint32_t *ftab; /* hash slot -> func index + 1 */
	size_t ftab_size;

	struct frame_res *frames; /* by frame id */
	struct buf frame_funcs;	  /* uint32_t func ids, innermost first, per frame */
	uint64_t resolved;	  /* distinct frames looked up */
	uint64_t unresolved;	  /* of those, the ones the symbolizer could not name */
	/* Counts are kept per unit: a stack node of on-CPU samples (unit = node), or of
	 * off-CPU intervals in state s (unit = (1 + s) * (stacks + 1) + node), whose stack
	 * gets the state's pseudo-frame as its leaf; the unknown state, then on-CPU time no
	 * sample saw (--metric wall with the CPUs' switches) come after the states.
	 * gets the state's pseudo-frame as its leaf. */
	uint64_t *node_count; /* weight per unit */
	uint32_t n_units;
	/* func id + 1 of each state's frame, then of the unknown and the unsampled frames */
	uint32_t state_func[SONDE_OFFCPU_STATES + 2];
	uint32_t *node_pid;	       /* pid of a sample of that node (for raw addresses) */
	struct buf stack;	       /* uint32_t func ids of the stack being walked, leaf first */
	struct cli_progress *progress; /* NULL: none shown */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde report [options] [-i FILE | FILE]\n"
		"       sonde report --diff [options] BEFORE AFTER\n\n"
		"Summarizes a spool written by 'sonde record' (default sonde.spool): the "
		"functions\n"
		"with the most samples, by self (the sampled function itself) and by total\n"
		"(anywhere on the stack, counted once per sample even when recursive).\n\n"
		"  -i, --input FILE  the spool to read (or give it as the argument)\n"
		"  --folded      print 'outer;...;inner COUNT' lines (flamegraph.pl, speedscope)\n"
		"  --folded-roots process|thread|none  with --folded, start each stack with a\n"
		"                'comm-pid' (process) or 'comm-pid/tid' (thread) frame\n"
		"  --metric cpu|off-cpu|wall  what stacks weigh (default cpu: on-CPU samples);\n"
		"                off-cpu: the time threads spent off the CPU (a recording made\n"
		"                with record's off-CPU option), under an [off-cpu: R|S|D|other]\n"
		"                frame naming the state;\n"
		"                wall: both, samples weighing their period (where the CPUs'\n"
		"                switches were recorded, their thread's on-CPU time by them);\n"
		"                --folded then prints microseconds, the tables milliseconds\n"
		"  --top N       rows per table (default 20)\n"
		"  --column auto|process|thread|none  a column naming the process ('comm-pid') or\n"
		"                thread ('comm-pid/tid') of each row, whose counts are then its\n"
		"                own (default auto: when the samples come from more than one)\n"
		"  --sort KEY    one table, ordered by self, total or name (default: a table by\n"
		"                self, then one by total); cpu: samples by CPU instead\n"
		"  --percent-limit P  leave out rows under P percent (of the key's count)\n"
		"  --pid PID[,PID...]  only samples of these processes\n"
		"  --tid TID[,TID...]  only samples of these threads\n"
		"  --comm NAME[,NAME...]  only samples of threads with these names\n"
		"  --cpu LIST    only samples taken on these CPUs (perf's list syntax: 0,2-3)\n"
		"  --time START,END  only samples in this window, in seconds from the start of\n"
		"                the recording (either side may be left out: 2.5, or ,10)\n"
		"  --diff        compare two spools: each function's self %% in BEFORE and in\n"
		"                AFTER and the change, largest changes first (perf diff)\n"
		"  --summary     where the wall-clock time went: seconds per process on CPU,\n"
		"                runnable, sleeping (S), blocked (D), other and unknown, and\n"
		"                on-CPU seconds per CPU (the filters apply)\n"
		"  --lines       add file:line to each function when debug info has it\n"
		"  --no-inline   attribute inlined code to the function it was inlined into\n"
		"  --buildid-cache DIR  where 'sonde record --buildid-cache DIR' kept deleted or\n"
		"                replaced images (default $SONDE_BUILDID_CACHE, else\n"
		"                $XDG_CACHE_HOME/sonde/buildid, else ~/.cache/sonde/buildid)\n"
		"  -h, --help    this help\n");
}

static uint64_t str_hash(const char *a, const char *b)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *a; a++)
		h = (h ^ (uint8_t)*a) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL;
	for (; *b; b++)
		h = (h ^ (uint8_t)*b) * 0x100000001b3ULL;
	return h;
}

static int ftab_grow(struct report *r)
{
	size_t size = r->ftab_size ? r->ftab_size * 2 : 1024;
	uint32_t *t = calloc(size, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_funcs; i++) {
		size_t j = str_hash(r->funcs[i].label, r->funcs[i].module) & (size - 1);
		while (t[j])
			j = (j + 1) & (size - 1);
		t[j] = (uint32_t)i + 1;
	}
	free(r->ftab);
	r->ftab = t;
	r->ftab_size = size;
	return 0;
}

/* The id of function (label, module), added if new; -ENOMEM on failure. */
static long func_intern(struct report *r, const char *label, const char *module)
{
	if ((r->n_funcs + 1) * 2 > r->ftab_size && ftab_grow(r) < 0)
		return -ENOMEM;
	size_t mask = r->ftab_size - 1, j = str_hash(label, module) & mask;
	for (; r->ftab[j]; j = (j + 1) & mask) {
		const struct func *f = &r->funcs[r->ftab[j] - 1];
		if (!strcmp(f->label, label) && !strcmp(f->module, module))
			return r->ftab[j] - 1;
	}
	if (r->n_funcs == r->funcs_cap) {
		size_t cap = r->funcs_cap ? r->funcs_cap * 2 : 256;
		struct func *n = realloc(r->funcs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		r->funcs = n;
		r->funcs_cap = cap;
	}
	struct func *f = &r->funcs[r->n_funcs];
	*f = (struct func){.label = strdup(label), .module = strdup(module), .stamp = UINT64_MAX};
	if (!f->label || !f->module) {
		free(f->label);
		free(f->module);
		return -ENOMEM;
	}
	r->ftab[j] = (uint32_t)++r->n_funcs;
	return (long)r->n_funcs - 1;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* Symbolizes one frame: fills out[] innermost first, returns how many. */
static int symbolize_frame(struct report *r, uint32_t frame_id, uint32_t pid,
			   struct sonde_sym_frame *out, const char **module)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	*module = "[unknown]";
	if (sonde_spool__get_frame(r->spool, frame_id, &f) < 0)
		return -ERANGE;
	if (f.module == 0)
		return sonde_symbolizer__symbolize_raw(r->sym, pid, f.addr, out, MAX_INLINE);
	if (sonde_spool__get_module(r->spool, f.module, &m) < 0)
		return -ERANGE;
	*module = m.def.path && m.def.path[0] ? base_name(m.def.path) : "[anonymous]";
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
	return sonde_symbolizer__symbolize(r->sym, &sm, f.addr, out, MAX_INLINE);
}

/* Resolves frame_id into function ids (cached); returns 0 or -errno. */
static int resolve_frame(struct report *r, uint32_t frame_id, uint32_t pid)
{
	struct sonde_sym_frame out[MAX_INLINE];
	const char *module;
	char label[1024];
	char fallback[64];
	int n = symbolize_frame(r, frame_id, pid, out, &module);

	if (n < 0) {
		/* the symbolizer refused the frame: name it by its number, still counted */
		snprintf(fallback, sizeof(fallback), "[frame %" PRIu32 "]", frame_id);
		out[0] = (struct sonde_sym_frame){.name = fallback};
		n = 1;
	}
	r->resolved++;
	r->frames[frame_id].unresolved = out[0].origin == SONDE_SYM_ORIGIN_NONE;
	r->unresolved += r->frames[frame_id].unresolved;
	int first = r->no_inline ? n - 1 : 0;
	r->frames[frame_id].first = (uint32_t)(r->frame_funcs.len / sizeof(uint32_t));
	r->frames[frame_id].n = (uint8_t)(n - first);
	for (int i = first; i < n; i++) {
		const struct sonde_sym_frame *s = &out[i];
		if (r->lines && s->file && s->line)
			snprintf(label, sizeof(label), "%s (%s:%" PRIu32 ")", s->name,
				 base_name(s->file), s->line);
		else
			snprintf(label, sizeof(label), "%s", s->name);
		long id = func_intern(r, label, s->module ? base_name(s->module) : module);
		if (id < 0)
			return (int)id;
		uint32_t v = (uint32_t)id;
		sonde__buf_append(&r->frame_funcs, &v, sizeof(v));
	}
	return buf_error(&r->frame_funcs);
}

/* The pseudo-function of off-CPU state s, the leaf of its intervals' stacks. */
static long state_func(struct report *r, uint32_t s)
{
	static const char *const names[SONDE_OFFCPU_STATES + 2] = {"[off-cpu: R]",
								   "[off-cpu: S]",
								   "[off-cpu: D]",
								   "[off-cpu: other]",
								   "[unknown: lost records]",
								   "[on-cpu: not sampled]"};

	if (!r->state_func[s]) {
		long id = func_intern(r, names[s], "[sched]");
		if (id < 0)
			return id;
		r->state_func[s] = (uint32_t)id + 1;
	}
	return r->state_func[s] - 1;
}

/* Expands unit `unit` (a stack node, with a state frame for off-CPU units) into
 * r->stack: function ids, leaf first. */
static int expand_stack(struct report *r, uint32_t unit)
{
	uint32_t parent, frame, kind = unit / (r->info.stacks + 1);
	uint32_t node = unit % (r->info.stacks + 1);

	r->stack.len = 0;
	r->stack_unresolved = false;
	if (kind) {
		long id = state_func(r, kind - 1);
		if (id < 0)
			return (int)id;
		uint32_t v = (uint32_t)id;
		sonde__buf_append(&r->stack, &v, sizeof(v));
	}
	for (; node; node = parent) {
		if (sonde_spool__get_node(r->spool, node, &parent, &frame) < 0)
			return -ERANGE;
		if (!r->frames[frame].n) {
			int e = resolve_frame(r, frame, r->node_pid[node]);
			if (e < 0)
				return e;
		}
		r->stack_unresolved |= r->frames[frame].unresolved;
		const uint32_t *ids =
			(const uint32_t *)r->frame_funcs.data + r->frames[frame].first;
		sonde__buf_append(&r->stack, ids, r->frames[frame].n * sizeof(uint32_t));
	}
	return buf_error(&r->stack);
}

/* Whether a sample (or an interval, as a sample at its switch-out) passes the filters:
 * the library's test (sonde_view_filter__match), so that report keeps what every reader
 * keeps. r->filt is read at each call: the short intervals' count leaves out its time
 * and CPU filters for a while. */
static bool sample_matches(const struct report *r, const struct sonde_spool_sample *smp,
			   const struct sonde_spool_thread *t)
{
	const struct cli_filter *f = &r->filt;

	if (!cli_filter_any(f))
		return true; /* the common case, once per sample: nothing to build */
	struct sonde_view_filter vf = {
		.sz = sizeof(vf),
		.pids = f->pids,
		.n_pids = f->n_pids,
		.tids = f->tids,
		.n_tids = f->n_tids,
		.comms = f->comms,
		.n_comms = f->n_comms,
		.cpus = f->cpus,
		.n_cpus = f->cpus ? f->n_cpus : 0,
		.time_range = f->has_time,
		.time_from_ns = r->from_ns,
		.time_to_ns = r->to_ns,
	};
	struct sonde_view_event e = {
		.sz = sizeof(e),
		.pid = t->pid,
		.tid = t->tid,
		.comm = t->comm,
		.cpu = smp->cpu,
		.time_ns = smp->time_ns,
	};

	/* a window that ends at the clock's zero would read as "no end": nothing is before */
	if (vf.time_range && f->to_s >= 0 && !vf.time_to_ns)
		return smp->time_ns == 0;
	return sonde_view_filter__match(&vf, &e) == 1;
}

/* What samples are grouped by: --folded-roots for --folded, the column for the tables. */
static enum folded_roots grouping(const struct report *r)
{
	return r->folded ? r->roots : r->column;
}

/* The name of process pid when thread t was defined: its main thread's name then (the
 * main thread's last definition up to t's; after an exec, the new program's), else its
 * first, else that of the thread sampled. */
static const char *process_comm(const struct report *r, const struct sonde_spool_thread *t)
{
	struct sonde_spool_thread m;
	const char *first = NULL, *then = NULL;

	for (uint32_t i = 1; i <= r->info.threads; i++) {
		if (sonde_spool__get_thread(r->spool, i, &m) < 0 || m.tid != t->pid ||
		    m.pid != t->pid)
			continue;
		if (!first)
			first = m.comm;
		if (m.time_ns <= t->time_ns)
			then = m.comm;
	}
	return then ? then : first ? first : t->comm;
}

/* The root frame of a thread's samples for --folded-roots, as a func id + 1; cached by
 * spool thread id in r->thread_root. */
static long root_of(struct report *r, uint32_t thread, const struct sonde_spool_thread *t)
{
	char label[128];

	if (thread <= r->info.threads && r->thread_root[thread])
		return r->thread_root[thread];
	if (grouping(r) == ROOTS_PROCESS)
		snprintf(label, sizeof(label), "%s-%" PRIu32, process_comm(r, t), t->pid);
	else
		snprintf(label, sizeof(label), "%s-%" PRIu32 "/%" PRIu32, t->comm, t->pid, t->tid);
	long id = func_intern(r, label, "");
	if (id >= 0 && thread <= r->info.threads)
		r->thread_root[thread] = (uint32_t)id + 1;
	return id < 0 ? id : id + 1;
}

static int by_root_node(const void *a, const void *b)
{
	const struct root_node *x = a, *y = b;

	if (x->root != y->root)
		return x->root < y->root ? -1 : 1;
	return x->node < y->node ? -1 : x->node > y->node;
}

/* Distinct values in a sorted-in-place array. */
static uint32_t distinct(uint64_t *v, size_t n);

/* The kind of unit (unit / (stacks + 1)) of on-CPU time no sample saw. */
enum { KIND_UNSAMPLED = 2 + SONDE_OFFCPU_STATES };

/* One event to count: sample i, then (for off-CPU metrics) interval i - samples, then
 * (--metric wall by the switches) the tasks that ran unsampled. Fills *smp (an interval as
 * a sample at its switch-out), its weight and unit; 0, or -ERANGE past the last. */
static int next_event(const struct report *r, uint64_t i, struct sonde_spool_sample *smp,
		      uint64_t *weight, uint32_t *unit)
{
	struct sonde_spool_offcpu o;
	uint64_t base = r->metric == SONDE_PROFILE_METRIC_OFF_CPU ? 0 : r->info.samples;

	if (i < base) {
		if (sonde_spool__get_sample(r->spool, i, smp) < 0)
			return -ERANGE;
		*weight = r->metric != SONDE_PROFILE_METRIC_WALL ? 1
			  : r->weights.sample_ns		 ? r->weights.sample_ns[i]
								 : r->info.header.sample_period_ns;
		*unit = smp->stack;
		return 0;
	}
	if (r->metric == SONDE_PROFILE_METRIC_CPU)
		return -ERANGE;
	/* the intervals, then those a loss cut (under the unknown frame, past the states) */
	uint64_t n_off = sonde_spool__offcpu_count(r->spool);
	uint64_t n_unknown = sonde_spool__unknown_count(r->spool);
	uint32_t kind;
	if (i - base >= n_off + n_unknown) {
		uint64_t u = i - base - n_off - n_unknown;
		if (u >= r->weights.n_unsampled)
			return -ERANGE;
		const struct sonde_acct_unsampled *un = &r->weights.unsampled[u];
		*smp = (struct sonde_spool_sample){un->time_ns, un->thread, 0, 0,
						   SONDE_SPOOL_CPU_NONE};
		*weight = un->on_ns;
		*unit = KIND_UNSAMPLED * (r->info.stacks + 1);
		return 0;
	}
	if (i - base < n_off) {
		if (sonde_spool__get_offcpu(r->spool, i - base, &o) < 0)
			return -ERANGE;
		kind = 1 + o.state;
	} else {
		if (sonde_spool__get_unknown(r->spool, i - base - n_off, &o) < 0)
			return -ERANGE;
		kind = 1 + SONDE_OFFCPU_STATES;
	}
	*smp = (struct sonde_spool_sample){o.switch_out_ns, o.thread, o.stack, o.flags, o.cpu};
	*weight = o.switch_in_ns - o.switch_out_ns;
	*unit = kind * (r->info.stacks + 1) + o.stack;
	return 0;
}

/* The short intervals of the threads the filter keeps (a time filter keeps them all:
 * they have no time). */
static void count_short(struct report *r)
{
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_thread t;
	bool has_time = r->filt.has_time;
	int *cpus = r->filt.cpus;

	r->filt.has_time = false;
	r->filt.cpus = NULL;
	for (uint64_t i = 0; sonde_spool__get_offcpu_short(r->spool, i, &sh) == 0; i++) {
		struct sonde_spool_sample smp = {.thread = sh.thread, .cpu = SONDE_SPOOL_CPU_NONE};
		if (sonde_spool__get_thread(r->spool, sh.thread, &t) < 0 ||
		    !sample_matches(r, &smp, &t))
			continue;
		r->short_count += sh.count;
		r->short_ns += sh.total_ns;
	}
	r->filt.has_time = has_time;
	r->filt.cpus = cpus;
}

/* Counts the weight the filter keeps per unit, remembering a pid for each node, the
 * distinct processes and threads among them and, for --folded-roots, (root, unit) pairs. */
static int count_nodes(struct report *r)
{
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;
	uint64_t *pids = NULL, *tids = NULL, w, kinds = KIND_UNSAMPLED + 1;
	uint64_t events = r->info.samples + sonde_spool__offcpu_count(r->spool) +
			  sonde_spool__unknown_count(r->spool) + r->weights.n_unsampled;
	size_t n = 0, cap = 0;
	uint32_t unit;
	int err = 0;

	if (((uint64_t)r->info.stacks + 1) * kinds > UINT32_MAX)
		return -SONDE_E_LIMIT;
	r->n_units = (uint32_t)(((uint64_t)r->info.stacks + 1) * kinds);
	r->node_count = calloc(r->n_units, sizeof(*r->node_count));
	r->node_pid = calloc((size_t)r->info.stacks + 1, sizeof(*r->node_pid));
	r->frames = calloc((size_t)r->info.frames + 1, sizeof(*r->frames));
	r->thread_root = calloc((size_t)r->info.threads + 1, sizeof(*r->thread_root));
	r->cpu_count = calloc(MAX_CPU + 1, sizeof(*r->cpu_count));
	if (!r->node_count || !r->node_pid || !r->frames || !r->thread_root || !r->cpu_count)
		return -ENOMEM;
	for (uint64_t i = 0; next_event(r, i, &smp, &w, &unit) == 0; i++) {
		if ((i & 0xfff) == 0)
			cli_progress_update(r->progress, i, events);
		if (sonde_spool__get_thread(r->spool, smp.thread, &t) < 0)
			t = (struct sonde_spool_thread){.comm = ""};
		if (!sample_matches(r, &smp, &t))
			continue;
		uint32_t cpu = smp.cpu < MAX_CPU ? smp.cpu : MAX_CPU;
		r->cpu_count[cpu] += w;
		if (cpu < MAX_CPU && cpu >= r->cpu_max)
			r->cpu_max = cpu + 1;
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			uint64_t *p = realloc(pids, cap * sizeof(*p)), *q;
			if (p)
				pids = p;
			q = p ? realloc(tids, cap * sizeof(*q)) : NULL;
			if (q)
				tids = q;
			struct root_node *rn = NULL;
			if (q && grouping(r) != ROOTS_NONE &&
			    (rn = realloc(r->pairs, cap * sizeof(*rn))))
				r->pairs = rn;
			if (!p || !q || (grouping(r) != ROOTS_NONE && !rn)) {
				err = -ENOMEM;
				break;
			}
		}
		pids[n] = t.pid;
		tids[n] = (uint64_t)t.pid << 32 | t.tid;
		if (grouping(r) != ROOTS_NONE) {
			long root = root_of(r, smp.thread, &t);
			if (root < 0) {
				err = (int)root;
				break;
			}
			r->pairs[n] = (struct root_node){(uint32_t)root, unit, w};
		}
		n++;
		r->samples++;
		r->total += w;
		if (unit <= r->info.stacks) {
			r->on_samples++;
			r->on_ns += w;
			r->empty += unit == 0;
		} else if (unit / (r->info.stacks + 1) == KIND_UNSAMPLED) {
			r->on_ns += w;
			r->unsampled_ns += w;
		} else {
			r->intervals++;
			r->off_ns += w;
			if (unit / (r->info.stacks + 1) == 1 + SONDE_OFFCPU_STATES) {
				r->unknowns++;
				r->unknown_ns += w;
			}
		}
		if (!r->node_count[unit])
			r->node_pid[smp.stack] = t.pid;
		r->node_count[unit] += w;
	}
	if (!err) {
		r->processes = distinct(pids, n);
		r->tids = distinct(tids, n);
		r->n_pairs = grouping(r) != ROOTS_NONE ? n : 0;
		count_short(r);
	}
	free(pids);
	free(tids);
	return err;
}

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint32_t distinct(uint64_t *v, size_t n)
{
	uint32_t d = 0;

	if (!n)
		return 0; /* v may be NULL: nothing was counted */
	qsort(v, n, sizeof(*v), by_u64);
	for (size_t i = 0; i < n; i++)
		d += i == 0 || v[i] != v[i - 1];
	return d;
}

/* A stack of function ids, as --folded merges them. */
static uint64_t ids_hash(const uint32_t *ids, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ ids[i]) * 0x100000001b3ULL;
	return (h ^ n) * 0x100000001b3ULL;
}

/* Self and total per function; the distinct stacks by function and the samples with an
 * unresolved frame. */
static int attribute(struct report *r)
{
	uint64_t *hashes = malloc(((size_t)r->n_units + 1) * sizeof(*hashes));
	size_t n_hashes = 0;

	if (!hashes)
		return -ENOMEM;
	cli_progress_update(r->progress, 0, r->n_units);
	for (uint32_t node = 1; node < r->n_units; node++) {
		uint64_t c = r->node_count[node];
		if (!c)
			continue;
		if ((node & 0xff) == 0)
			cli_progress_update(r->progress, node, r->n_units);
		int e = expand_stack(r, node);
		if (e < 0) {
			free(hashes);
			return e;
		}
		const uint32_t *ids = (const uint32_t *)r->stack.data;
		size_t n = r->stack.len / sizeof(uint32_t);
		hashes[n_hashes++] = ids_hash(ids, n);
		if (r->stack_unresolved)
			r->unresolved_samples += c;
		r->funcs[ids[0]].self += c;
		for (size_t i = 0; i < n; i++) {
			struct func *f = &r->funcs[ids[i]];
			if (f->stamp != node) {
				f->stamp = node;
				f->total += c;
			}
		}
	}
	r->fn_stacks = distinct(hashes, n_hashes);
	free(hashes);
	return 0;
}

static const struct func *sort_funcs; /* the array being sorted */
static int by_self(const void *a, const void *b)
{
	const struct func *x = &sort_funcs[*(const uint32_t *)a];
	const struct func *y = &sort_funcs[*(const uint32_t *)b];
	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	return strcmp(x->label, y->label);
}
static int by_total(const void *a, const void *b)
{
	const struct func *x = &sort_funcs[*(const uint32_t *)a];
	const struct func *y = &sort_funcs[*(const uint32_t *)b];
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return strcmp(x->label, y->label);
}

static int by_name(const void *a, const void *b)
{
	const struct func *x = &sort_funcs[*(const uint32_t *)a];
	const struct func *y = &sort_funcs[*(const uint32_t *)b];
	int c = strcmp(x->label, y->label);

	return c ? c : strcmp(x->module, y->module);
}

/* A new key (a cpu column, say) is one more row here and its compare function. */
static const struct sort_key sort_keys[] = {
	{"self", by_self, true},
	{"total", by_total, false},
	{"name", by_name, false},
};

static const struct sort_key *sort_key_named(const char *name)
{
	for (size_t i = 0; i < sizeof(sort_keys) / sizeof(sort_keys[0]); i++)
		if (!strcmp(sort_keys[i].name, name))
			return &sort_keys[i];
	return NULL;
}

/* The width of the process/thread column: its longest label, within reason. */
static int column_width(const struct report *r)
{
	size_t w = strlen(r->column == ROOTS_PROCESS ? "process" : "thread");

	for (size_t i = 0; i < r->n_rows; i++) {
		size_t n = strlen(r->funcs[r->rows[i].col - 1].label);
		w = n > w ? n : w;
	}
	return w > 32 ? 32 : (int)w;
}

static bool time_metric(const struct report *r)
{
	return r->metric != SONDE_PROFILE_METRIC_CPU;
}

/* A count column: samples, or milliseconds for a time metric. */
static void print_value(const struct report *r, uint64_t v)
{
	if (time_metric(r))
		printf("%9.1f", v / 1e6);
	else
		printf("%9" PRIu64, v);
}

static void print_table(const struct report *r, uint32_t *order, const struct sort_key *key)
{
	double all = r->total ? (double)r->total : 1;
	const struct func *funcs = r->column != ROOTS_NONE ? r->rows : r->funcs;
	size_t n = r->column != ROOTS_NONE ? r->n_rows : r->n_funcs, rows = 0;
	int cw = r->column != ROOTS_NONE ? column_width(r) : 0;

	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	sort_funcs = funcs;
	qsort(order, n, sizeof(*order), key->cmp);
	printf("\nTop functions by %s%s:\n", key->name,
	       key->cmp == by_name			? ""
	       : r->metric == SONDE_PROFILE_METRIC_CPU	? " samples"
	       : r->metric == SONDE_PROFILE_METRIC_WALL ? " wall-clock time (ms)"
							: " off-CPU time (ms)");
	printf("%8s %9s %8s %9s  ", "self%", "self", "total%", "total");
	if (cw)
		printf("%-*s  ", cw, r->column == ROOTS_PROCESS ? "process" : "thread");
	printf("function [module]\n");
	for (size_t i = 0; i < n && rows < (size_t)r->top; i++) {
		const struct func *f = &funcs[order[i]];
		uint64_t v = key->self_rows ? f->self : f->total;
		if (!f->total || !f->module[0]) /* not sampled, or a --folded-roots frame */
			continue;
		if (key->self_rows && !f->self)
			break;
		if (100.0 * v / all < r->percent_limit) {
			if (key->cmp == by_name)
				continue;
			break;
		}
		/* names that are already bracketed ([kernel.kallsyms], [vdso]) are not wrapped
		 * again */
		bool bracketed = f->module[0] == '[' && f->module[strlen(f->module) - 1] == ']';
		printf("%7.2f%% ", 100.0 * f->self / all);
		print_value(r, f->self);
		printf(" %7.2f%% ", 100.0 * f->total / all);
		print_value(r, f->total);
		printf("  ");
		if (cw)
			printf("%-*s  ", cw, r->funcs[f->col - 1].label);
		printf("%s %s%s%s\n", f->label, bracketed ? "" : "[", f->module,
		       bracketed ? "" : "]");
		rows++;
	}
}

/* Why a report has no samples, on stderr: the filter left none, or the recording has
 * none (and what that usually means). */
static void explain_empty(const struct report *r)
{
	const struct cli_filter *f = &r->filt;

	if (r->info.samples && (f->n_pids || f->n_tids || f->n_comms || f->has_time))
		cli_error("report",
			  "%s: no samples match --pid, --tid, --comm or --time (the recording "
			  "has %" PRIu64 ")",
			  r->path, r->info.samples);
	else if (!r->info.samples)
		cli_error("report",
			  "%s: no samples: the targets used no CPU while recorded (sonde "
			  "samples CPU time: a sleeping or blocked program is not sampled), or "
			  "ran too briefly",
			  r->path);
}

/* --cpu's list, for the paths that end before report_free. */
static void free_cpus(struct report *r)
{
	free(r->filt.cpus);
	r->filt.cpus = NULL;
}

/* --sort cpu: one row per CPU that has samples (as perf report --sort cpu). */
static void print_cpus(const struct report *r)
{
	double all = r->total ? (double)r->total : 1;

	if (time_metric(r))
		printf("\nTime by CPU (ms):\n%8s %9s  %s\n", "time%", "time", "cpu");
	else
		printf("\nSamples by CPU:\n%8s %9s  %s\n", "samples%", "samples", "cpu");
	for (uint32_t c = 0; c < r->cpu_max; c++) {
		if (!r->cpu_count[c])
			continue;
		printf("%7.2f%% ", 100.0 * r->cpu_count[c] / all);
		print_value(r, r->cpu_count[c]);
		printf("  %" PRIu32 "\n", c);
	}
	if (r->cpu_count[MAX_CPU]) {
		printf("%7.2f%% ", 100.0 * r->cpu_count[MAX_CPU] / all);
		print_value(r, r->cpu_count[MAX_CPU]);
		printf("  [unknown]\n");
	}
}

static int print_summary(const struct report *r, bool title);

/* The metric and its total, and how it was made up. */
static void print_metric(const struct report *r)
{
	if (!time_metric(r)) {
		printf("metric cpu: %" PRIu64 " on-CPU samples", r->total);
		if (sonde_spool__offcpu_count(r->spool))
			printf(" (the recording also has %" PRIu64
			       " off-CPU intervals: --metric off-cpu or wall)",
			       sonde_spool__offcpu_count(r->spool));
		printf("\n");
		return;
	}
	printf("metric %s: %.3f s in all", sonde_profile__metric_name(r->metric), r->total / 1e9);
	if (r->metric == SONDE_PROFILE_METRIC_WALL && r->weights.exact)
		printf(" = %.3f s on CPU (by the CPUs' switches, spread over %" PRIu64
		       " samples; %.3f s of it not sampled) + %.3f s off CPU",
		       r->on_ns / 1e9, r->on_samples, r->unsampled_ns / 1e9,
		       (r->off_ns - r->unknown_ns) / 1e9);
	else if (r->metric == SONDE_PROFILE_METRIC_WALL)
		printf(" = %.3f s on CPU (%" PRIu64 " samples of %.3f ms) + %.3f s off CPU",
		       r->on_ns / 1e9, r->on_samples, r->info.header.sample_period_ns / 1e6,
		       (r->off_ns - r->unknown_ns) / 1e9);
	if (r->unknowns)
		printf(" + %.3f s unknown", r->unknown_ns / 1e9);
	printf(" (%" PRIu64 " intervals)", r->intervals);
	if (r->short_count)
		printf("; %" PRIu64 " shorter intervals not stacked, %.3f s", r->short_count,
		       r->short_ns / 1e9);
	if (!sonde_spool__offcpu_count(r->spool) && !sonde_spool__unknown_count(r->spool) &&
	    !r->short_count)
		printf("; the recording has no off-CPU intervals (record with --off-cpu)");
	printf("\n");
}

static void print_sum_row(const char *name, const uint64_t *ns, uint64_t total)
{
	printf("%-24.24s", name);
	for (int c = 0; c < SONDE_ACCT_COLS; c++)
		printf(" %9.3f", ns[c] / 1e9);
	printf(" %9.3f\n", total / 1e9);
}

static double recording_span(const struct report *r);
static void print_account(const struct report *r, FILE *f, const char *prefix);

/* Each CPU's time by the switches the recording kept (-a --off-cpu of every process):
 * busy, idle and unknown, adding up to CPUs x the window. */
static void print_cpu_time(const struct sonde_acct *a)
{
	uint64_t busy = 0, idle = 0, unknown = 0, span = a->window_end_ns - a->window_start_ns;

	if (!a->n_cpus)
		return;
	printf("\n%-6s %9s %9s %9s %9s  (seconds over %.3f s, by the CPUs' switches)\n", "cpu",
	       "busy", "idle", "unknown", "total", span / 1e9);
	for (uint32_t i = 0; i < a->n_cpus; i++) {
		const struct sonde_acct_cpu *t = &a->cpus[i];
		printf("%-6" PRIu32 " %9.3f %9.3f %9.3f %9.3f\n", t->cpu, t->busy_ns / 1e9,
		       t->idle_ns / 1e9, t->unknown_ns / 1e9,
		       (t->busy_ns + t->idle_ns + t->unknown_ns) / 1e9);
		busy += t->busy_ns;
		idle += t->idle_ns;
		unknown += t->unknown_ns;
	}
	printf("%-6s %9.3f %9.3f %9.3f %9.3f  (%" PRIu32 " CPUs x %.3f s)\n", "all", busy / 1e9,
	       idle / 1e9, unknown / 1e9, (busy + idle + unknown) / 1e9, a->n_cpus, span / 1e9);
}

/* --summary: the library's accounting tables (src/export/acct.h) of what passes the
 * report's filters, printed. */
static int print_summary(const struct report *r, bool title)
{
	struct sonde_profile_spool_opts o = {.sz = sizeof(o)};
	struct sonde_acct a;

	cli_filter_to_spool_opts(&r->filt, &o);
	int err = sonde__acct_build(r->spool, &o, &a);
	if (err < 0)
		return err;

	double span = recording_span(r);
	if (title) {
		printf("%s: where the wall-clock time went, over %.3f s (seconds; on-CPU: samples "
		       "of %.3f ms; the states are how threads left the CPU)\n",
		       r->path, span, a.period_ns / 1e6);
		print_account(r, stdout, "");
	}
	printf("%-24s %9s %9s %9s %9s %9s %9s %9s %9s\n", "process", "on-CPU", "runnable",
	       "sleeping", "blocked", "other", "unknown", "short", "total");
	uint64_t rest[SONDE_ACCT_COLS] = {0}, rest_total = 0;
	size_t shown = 0;
	for (size_t i = 0; i < a.n_rows; i++) {
		char name[48];
		if (shown < (size_t)r->top) {
			snprintf(name, sizeof(name), "%s-%" PRIu32, a.rows[i].comm, a.rows[i].pid);
			print_sum_row(name, a.rows[i].ns, a.rows[i].total);
			shown++;
			continue;
		}
		for (int c = 0; c < SONDE_ACCT_COLS; c++)
			rest[c] += a.rows[i].ns[c];
		rest_total += a.rows[i].total;
	}
	if (shown < a.n_rows) {
		char name[48];
		snprintf(name, sizeof(name), "(%zu others)", a.n_rows - shown);
		print_sum_row(name, rest, rest_total);
	}
	print_sum_row("all", a.all, a.all_total);

	printf("\n%-6s %9s %9s  (seconds over %.3f s: on-CPU samples of the processes "
	       "recorded)\n",
	       "cpu", "on-CPU", "rest", span);
	for (uint32_t c = 0; c < a.cpu_max; c++) {
		double busy = a.cpu_ns[c] / 1e9;
		if (a.cpu_ns[c])
			printf("%-6" PRIu32 " %9.3f %9.3f\n", c, busy, span > busy ? span - busy : 0);
	}
	if (a.cpu_ns[SONDE_ACCT_MAX_CPU])
		printf("%-6s %9.3f\n", "?", a.cpu_ns[SONDE_ACCT_MAX_CPU] / 1e9);
	print_cpu_time(&a);
	sonde__acct_free(&a);
	return 0;
}

/* The time the recording covers, in seconds: from its first sample or switch-out to its
 * last sample or switch-in (a recording of a sleeping program has intervals and no
 * sample, and its time is theirs). */
static double recording_span(const struct report *r)
{
	const struct sonde_spool_info *in = &r->info;
	uint64_t first = in->samples ? in->first_time_ns : UINT64_MAX;
	uint64_t last = in->samples ? in->last_time_ns : 0;
	struct sonde_spool_offcpu o;

	for (uint64_t i = 0; sonde_spool__get_offcpu(r->spool, i, &o) == 0; i++) {
		if (o.switch_out_ns < first)
			first = o.switch_out_ns;
		if (o.switch_in_ns > last)
			last = o.switch_in_ns;
	}
	for (uint64_t i = 0; sonde_spool__get_unknown(r->spool, i, &o) == 0; i++) {
		if (o.switch_out_ns < first)
			first = o.switch_out_ns;
		if (o.switch_in_ns > last)
			last = o.switch_in_ns;
	}
	return last > first ? (last - first) / 1e9 : 0;
}

/* The footer on unresolved frames, in the metric's unit: samples, or time. */
static void print_unresolved(const struct report *r)
{
	double share = r->total ? 100.0 * r->unresolved_samples / (double)r->total : 0.0;

	printf("\nunresolved frames: %" PRIu64 " of %" PRIu64
	       " distinct frame addresses have no symbol; ",
	       r->unresolved, r->resolved);
	if (time_metric(r))
		printf("%.3f s (%.2f%%) of the time has one on its stack\n",
		       r->unresolved_samples / 1e9, share);
	else
		printf("%" PRIu64 " samples (%.2f%%) have one on their stack\n",
		       r->unresolved_samples, share);
}

/* What the recording could not see (its account record), one line each, to f: time in
 * the kernel when it was not sampled, and the time lost records covered. Nothing for a
 * recording that saw everything, or one made before the account was written. */
static void print_account(const struct report *r, FILE *f, const char *prefix)
{
	struct sonde_spool_account a;

	if (sonde_spool__get_account(r->spool, &a) < 0)
		return;
	if (!a.kernel_time && a.kernel_error == ERANGE)
		fprintf(f,
			"%skernel time not visible: recorded above 10000 Hz, where kernel time is "
			"not sampled by default, so time in system calls has no samples\n",
			prefix);
	else if (!a.kernel_time && a.kernel_error)
		fprintf(f,
			"%skernel time not visible: the kernel refused kernel sampling (%s; it "
			"needs kernel.perf_event_paranoid <= 1 or CAP_PERFMON), so time in system "
			"calls has no samples\n",
			prefix, strerror((int)a.kernel_error));
	else if (!a.kernel_time)
		fprintf(f,
			"%skernel time not visible: recorded with --no-kernel, so time in system "
			"calls has no samples\n",
			prefix);
	if (r->unknowns && time_metric(r))
		fprintf(f,
			"%s%.1f %% of thread time unknown: %" PRIu64 " records lost (%.3f s, in %" PRIu64
			" intervals under [unknown: lost records])\n",
			prefix, r->total ? 100.0 * r->unknown_ns / (double)r->total : 0.0,
			a.lost_records, r->unknown_ns / 1e9, r->unknowns);
	if (a.lost_records || a.lost_samples)
		fprintf(f,
			"%stime unknown: %" PRIu64 " records and %" PRIu64
			" samples lost (full rings); the samples they held are in no figure here "
			"(%" PRIu64 " off-CPU intervals dropped)\n",
			prefix, a.lost_records, a.lost_samples, a.offcpu_dropped);
}

static int print_report(const struct report *r)
{
	uint32_t *order = malloc((r->n_funcs + r->n_rows + 1) * sizeof(*order));
	const struct sonde_spool_info *in = &r->info;
	double secs = recording_span(r);

	if (!order)
		return -ENOMEM;
	printf("%s: %" PRIu64 " samples", r->path, r->on_samples);
	if (r->on_samples != in->samples && r->metric != SONDE_PROFILE_METRIC_OFF_CPU)
		printf(" (of %" PRIu64 ")", in->samples);
	if (time_metric(r))
		printf(" and %" PRIu64 " off-CPU intervals (of %" PRIu64 ")", r->intervals,
		       sonde_spool__offcpu_count(r->spool) + sonde_spool__unknown_count(r->spool));
	printf(" over %.2f s", secs);
	if (in->header.sample_period_ns)
		printf(" at %.0f Hz", 1e9 / in->header.sample_period_ns);
	printf(", sampled in %" PRIu32 " process%s and %" PRIu32 " thread%s; %" PRIu64
	       " distinct stack%s (by function, as --folded prints them)\n",
	       r->processes, r->processes == 1 ? "" : "es", r->tids, r->tids == 1 ? "" : "s",
	       r->fn_stacks, r->fn_stacks == 1 ? "" : "s");
	print_metric(r);
	print_account(r, stdout, "");
	/* system-wide, where the machine's time went: --summary's tables, per process and
	 * state and each CPU's busy, idle, unknown */
	if (r->metric == SONDE_PROFILE_METRIC_WALL && sonde_spool__switch_cpus(r->spool)) {
		int err = print_summary(r, false);
		if (err < 0)
			return err;
		printf("\n");
	}
	if (r->empty)
		printf("%" PRIu64 " samples (%.2f%%) have an empty stack\n", r->empty,
		       100.0 * r->empty / (double)r->samples);
	if (r->filt.cpus)
		printf("%" PRIu64 " samples on CPUs %s\n", r->samples, r->cpu_list);
	if (!r->samples)
		explain_empty(r);
	if (r->sort_cpu) {
		print_cpus(r);
	} else if (r->sort) {
		print_table(r, order, r->sort);
	} else {
		print_table(r, order, &sort_keys[0]);
		print_table(r, order, &sort_keys[1]);
	}
	print_unresolved(r);
	free(order);
	return 0;
}

/* The (root, node) pairs counted, merged: every sampled node under root 0 without
 * --folded-roots, else one entry per root and node. */
static int folded_units(struct report *r)
{
	size_t n = 0;

	if (grouping(r) != ROOTS_NONE) {
		if (r->n_pairs)
			qsort(r->pairs, r->n_pairs, sizeof(*r->pairs), by_root_node);
		for (size_t i = 0; i < r->n_pairs; i++) {
			if (n && r->pairs[n - 1].root == r->pairs[i].root &&
			    r->pairs[n - 1].node == r->pairs[i].node)
				r->pairs[n - 1].count += r->pairs[i].count;
			else
				r->pairs[n++] = r->pairs[i];
		}
		r->n_pairs = n;
		return 0;
	}
	r->pairs = calloc((size_t)r->n_units + 1, sizeof(*r->pairs));
	if (!r->pairs)
		return -ENOMEM;
	for (uint32_t node = 0; node < r->n_units; node++)
		if (r->node_count[node])
			r->pairs[n++] = (struct root_node){0, node, r->node_count[node]};
	r->n_pairs = n;
	return 0;
}

/* The stacks by function, with their root frames, through the library's one folded writer
 * (docs/view.md): stacks whose functions are the same (different addresses in one function)
 * merge; an empty stack has no line, unless it has a root frame. */
static int print_folded(struct report *r)
{
	int err = folded_units(r);
	struct sonde_view *v = err ? NULL : sonde_view__new(NULL);
	uint32_t *view_func = NULL; /* by report func id: the view's id, 0 until interned */
	size_t view_cap = 0;
	struct buf ids = BUF_INIT;
	struct sonde_view_event e = {.sz = sizeof(e), .cpu = SONDE_VIEW_CPU_NONE};
	/* a time metric in microseconds; a line under half of one rounds away */
	struct sonde_view_folded_opts o = {.sz = sizeof(o), .unit = time_metric(r) ? 1000 : 1};

	if (!v)
		err = err ? err : -ENOMEM;
	for (size_t i = 0; i < r->n_pairs && !err; i++) {
		const struct root_node *u = &r->pairs[i];
		if ((err = expand_stack(r, u->node)) < 0)
			break;
		/* the view's ids of the stack, innermost first, the root frame outermost */
		const uint32_t *fn = (const uint32_t *)r->stack.data;
		size_t n = r->stack.len / sizeof(uint32_t);
		ids.len = 0;
		for (size_t j = 0; j <= n && !err; j++) {
			uint32_t id = j < n ? fn[j] : u->root ? u->root - 1 : UINT32_MAX;
			if (id == UINT32_MAX)
				break;
			/* expanding a stack may intern functions: the map grows with them */
			if (id >= view_cap) {
				size_t cap = r->n_funcs > id ? r->n_funcs : (size_t)id + 1;
				uint32_t *nv = realloc(view_func, cap * sizeof(*nv));
				if (!nv) {
					err = -ENOMEM;
					break;
				}
				memset(nv + view_cap, 0, (cap - view_cap) * sizeof(*nv));
				view_func = nv;
				view_cap = cap;
			}
			if (!view_func[id]) {
				int64_t vid = sonde_view__func(v, r->funcs[id].label, NULL);
				if (vid < 0) {
					err = (int)vid;
					break;
				}
				view_func[id] = (uint32_t)vid;
			}
			sonde__buf_append(&ids, &view_func[id], sizeof(uint32_t));
		}
		if (!err && !(err = buf_error(&ids))) {
			e.weight = u->count;
			int k = sonde_view__add(v, &e, (const uint32_t *)ids.data,
						ids.len / sizeof(uint32_t));
			err = k < 0 ? k : 0;
		}
	}
	if (!err) {
		fflush(stdout);
		err = sonde_view__write_folded(v, STDOUT_FILENO, &o);
	}
	sonde__buf_free(&ids);
	free(view_func);
	sonde_view__free(v);
	return err;
}

static void report_free(struct report *r)
{
	for (size_t i = 0; i < r->n_funcs; i++) {
		free(r->funcs[i].label);
		free(r->funcs[i].module);
	}
	free(r->funcs);
	free(r->ftab);
	free(r->frames);
	free(r->node_count);
	free(r->node_pid);
	free(r->pairs);
	free(r->thread_root);
	free(r->cpu_count);
	free(r->filt.cpus);
	free(r->rows);
	sonde__acct_weights_free(&r->weights);
	sonde__u64map_free(&r->row_of);
	sonde__buf_free(&r->frame_funcs);
	sonde__buf_free(&r->stack);
	sonde_symbolizer__free(r->sym);
	sonde_spool__close(r->spool);
}

/* Opens the spool, printing the one-line error or truncation warning. */
static int open_spool(struct report *r)
{
	uint64_t off = 0;

	r->spool = sonde_spool__open(r->path, &off);
	if (!r->spool) {
		int e = errno;
		cli_spool_error("report", r->path, e, off);
		return -e;
	}
	sonde_spool__get_info(r->spool, &r->info);
	if (!r->info.complete)
		cli_spool_truncated("report", r->path, r->info.valid_bytes, r->info.samples);
	/* --time's seconds from the start on the sample clock: the first nanosecond at or
	 * after the start of the window, the last at or before its end */
	uint64_t start = r->info.header.start_monotonic_ns;
	r->from_ns = start + (uint64_t)ceil(r->filt.from_s * 1e9);
	r->to_ns = r->filt.to_s < 0 ? 0 : start + (uint64_t)floor(r->filt.to_s * 1e9);
	return 0;
}

enum {
	OPT_FOLDED = 256,
	OPT_TOP,
	OPT_LINES,
	OPT_NO_INLINE,
	OPT_BUILDID_CACHE,
	OPT_SORT,
	OPT_CPU,
	OPT_PERCENT_LIMIT,
	OPT_PID,
	OPT_TID,
	OPT_COMM,
	OPT_TIME,
	OPT_ROOTS,
	OPT_DIFF,
	OPT_COLUMN,
	OPT_METRIC,
	OPT_SUMMARY,
};

/* One option; 0, or CLI_USAGE after saying why. */
static int parse_opt(struct report *r, int c, char *arg, char **argv)
{
	char *end;

	switch (c) {
	case OPT_FOLDED:
		r->folded = 1;
		return 0;
	case OPT_DIFF:
		r->diff = 1;
		return 0;
	case OPT_SUMMARY:
		r->summary = 1;
		return 0;
	case OPT_COLUMN:
		r->column_auto = !strcmp(arg, "auto");
		if (!strcmp(arg, "process"))
			r->column = ROOTS_PROCESS;
		else if (!strcmp(arg, "thread"))
			r->column = ROOTS_THREAD;
		else if (strcmp(arg, "none") && !r->column_auto) {
			cli_error("report",
				  "--column wants auto, process, thread or none, not '%s'", arg);
			return CLI_USAGE;
		} else {
			r->column = ROOTS_NONE;
		}
		return 0;
	case OPT_METRIC:
		if (sonde_profile__parse_metric(arg, &r->metric)) {
			cli_error("report", "--metric wants cpu, off-cpu or wall, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_TOP:
		errno = 0;
		r->top = strtol(arg, &end, 10);
		if (errno || *end || r->top < 1) {
			cli_error("report", "--top wants a positive number, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_LINES:
		r->lines = 1;
		return 0;
	case OPT_NO_INLINE:
		r->no_inline = 1;
		return 0;
	case OPT_BUILDID_CACHE:
		r->buildid_cache = arg;
		return 0;
	case OPT_SORT:
		r->sort_cpu = !strcmp(arg, "cpu");
		if (!r->sort_cpu && !(r->sort = sort_key_named(arg))) {
			cli_error("report", "--sort wants self, total, name or cpu, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_PERCENT_LIMIT:
		r->percent_limit = strtod(arg, &end);
		if (end == arg || *end || !(r->percent_limit >= 0) || r->percent_limit > 100) {
			cli_error("report", "--percent-limit wants a percentage, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_CPU:
		r->cpu_list = arg; /* the parser reads a CPU list without cutting it up */
		return cli_filter_parse("report", &r->filt, "cpu", arg);
	case OPT_PID:
		return cli_filter_parse("report", &r->filt, "pid", arg);
	case OPT_TID:
		return cli_filter_parse("report", &r->filt, "tid", arg);
	case OPT_COMM:
		return cli_filter_parse("report", &r->filt, "comm", arg);
	case OPT_TIME:
		return cli_filter_parse("report", &r->filt, "time", arg);
	case OPT_ROOTS:
		if (!strcmp(arg, "process"))
			r->roots = ROOTS_PROCESS;
		else if (!strcmp(arg, "thread"))
			r->roots = ROOTS_THREAD;
		else if (!strcmp(arg, "none"))
			r->roots = ROOTS_NONE;
		else {
			cli_error("report",
				  "--folded-roots wants process, thread or none, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	default:
		return cli_bad_option("report", c, argv);
	}
}

static int parse_args(struct report *r, int argc, char **argv)
{
	static const struct option opts[] = {
		{"input", required_argument, NULL, 'i'},
		{"folded", no_argument, NULL, OPT_FOLDED},
		{"diff", no_argument, NULL, OPT_DIFF},
		{"summary", no_argument, NULL, OPT_SUMMARY},
		{"column", required_argument, NULL, OPT_COLUMN},
		{"folded-roots", required_argument, NULL, OPT_ROOTS},
		{"top", required_argument, NULL, OPT_TOP},
		{"metric", required_argument, NULL, OPT_METRIC},
		{"lines", no_argument, NULL, OPT_LINES},
		{"no-inline", no_argument, NULL, OPT_NO_INLINE},
		{"buildid-cache", required_argument, NULL, OPT_BUILDID_CACHE},
		{"sort", required_argument, NULL, OPT_SORT},
		{"cpu", required_argument, NULL, OPT_CPU},
		{"percent-limit", required_argument, NULL, OPT_PERCENT_LIMIT},
		{"pid", required_argument, NULL, OPT_PID},
		{"tid", required_argument, NULL, OPT_TID},
		{"comm", required_argument, NULL, OPT_COMM},
		{"time", required_argument, NULL, OPT_TIME},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *input = NULL;
	int c;

	r->top = 20;
	r->column_auto = true;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":i:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return CLI_OK;
		}
		if (c == 'i') {
			input = optarg;
			continue;
		}
		int err = parse_opt(r, c, optarg, argv);
		if (err)
			return err;
	}
	if (r->roots != ROOTS_NONE && !r->folded) {
		cli_error("report", "--folded-roots goes with --folded");
		return CLI_USAGE;
	}
	if (r->diff) {
		if (input || argc - optind != 2 || r->folded || r->sort) {
			cli_error("report",
				  "--diff takes two spools, BEFORE AFTER, and no --folded "
				  "or --sort");
			return CLI_USAGE;
		}
		r->path = argv[optind];
		r->path_after = argv[optind + 1];
		r->column_auto = false; /* functions compare across the two, whoever ran them */
		r->column = ROOTS_NONE;
		return -1;
	}
	r->path = cli_input("report", input, argc, argv);
	return r->path ? -1 : CLI_USAGE;
}

/* One line on stderr when files were refused: their names are missing from the report,
 * and the warnings said which files (docs/symbolize.md). */
static void note_refused(const struct report *r)
{
	struct sonde_symbolizer_stats st = {.sz = sizeof(st)};
	uint64_t n;

	if (sonde_symbolizer__get_stats(r->sym, &st) < 0)
		return;
	n = st.refused_symlink + st.refused_not_regular + st.refused_too_big + st.refused_owner;
	if (n)
		fprintf(stderr,
			"sonde report: %llu file%s ignored (%llu symbolic links, %llu not regular "
			"files, %llu too big, %llu of another owner): their names are missing\n",
			(unsigned long long)n, n == 1 ? "" : "s",
			(unsigned long long)st.refused_symlink,
			(unsigned long long)st.refused_not_regular,
			(unsigned long long)st.refused_too_big,
			(unsigned long long)st.refused_owner);
}

/* The row of function func under column label col (func id + 1), added if new. */
static long row_for(struct report *r, uint32_t func, uint32_t col)
{
	uint64_t key = (uint64_t)func << 32 | col, *v = sonde__u64map_get(&r->row_of, key);

	if (v)
		return (long)*v;
	if (r->n_rows == r->rows_cap) {
		size_t cap = r->rows_cap ? r->rows_cap * 2 : 256;
		struct func *n = realloc(r->rows, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		r->rows = n;
		r->rows_cap = cap;
	}
	if (sonde__u64map_put(&r->row_of, key, r->n_rows) < 0)
		return -ENOMEM;
	r->rows[r->n_rows] = (struct func){.label = r->funcs[func].label,
					   .module = r->funcs[func].module,
					   .stamp = UINT64_MAX,
					   .col = col};
	return (long)r->n_rows++;
}

/* attribute() with a process/thread column: self and total per (function, process or
 * thread), from the (label, node) pairs counted. */
static int attribute_grouped(struct report *r)
{
	int err = folded_units(r);
	uint64_t *hashes = err ? NULL : malloc((r->n_pairs + 1) * sizeof(*hashes));
	size_t n_hashes = 0;

	if (!hashes)
		return err ? err : -ENOMEM;
	for (size_t u = 0; u < r->n_pairs && !err; u++) {
		const struct root_node *p = &r->pairs[u];
		if (!p->node)
			continue; /* an empty stack: counted in the header */
		if ((u & 0xff) == 0)
			cli_progress_update(r->progress, u, r->n_pairs);
		if ((err = expand_stack(r, p->node)) < 0)
			break;
		const uint32_t *ids = (const uint32_t *)r->stack.data;
		size_t n = r->stack.len / sizeof(uint32_t);
		hashes[n_hashes++] = ids_hash(ids, n);
		if (r->stack_unresolved)
			r->unresolved_samples += p->count;
		for (size_t i = 0; i < n; i++) {
			long row = row_for(r, ids[i], p->root);
			if (row < 0) {
				err = (int)row;
				break;
			}
			struct func *f = &r->rows[row];
			if (i == 0)
				f->self += p->count;
			if (f->stamp != u) {
				f->stamp = u;
				f->total += p->count;
			}
		}
	}
	r->fn_stacks = distinct(hashes, n_hashes);
	free(hashes);
	return err;
}

/* --column auto: a process column when the samples come from more than one process, a
 * thread column when from more than one thread of one, else none. */
static void decide_column(struct report *r)
{
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;
	uint32_t pid = 0, tid = 0, unit;
	uint64_t w;
	bool first = true;

	r->column = ROOTS_NONE;
	for (uint64_t i = 0; next_event(r, i, &smp, &w, &unit) == 0; i++) {
		if (sonde_spool__get_thread(r->spool, smp.thread, &t) < 0 ||
		    !sample_matches(r, &smp, &t))
			continue;
		if (first) {
			pid = t.pid, tid = t.tid, first = false;
		} else if (t.pid != pid) {
			r->column = ROOTS_PROCESS;
			return;
		} else if (t.tid != tid) {
			r->column = ROOTS_THREAD;
		}
	}
}

/* Opens r->path and counts its samples per function (or, with --folded, per stack
 * node only). 0, or CLI_FAILURE after saying why. */
static int load(struct report *r)
{
	if (open_spool(r) < 0)
		return CLI_FAILURE;
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .buildid_cache_dir = r->buildid_cache};
	r->sym = sonde_symbolizer__new(&so);
	if (!r->sym) {
		cli_error("report", "cannot create the symbolizer: %s", strerror(errno));
		return CLI_FAILURE;
	}
	/* the wall metric's on-CPU time by the CPUs' switches where the recording kept them */
	if (r->metric == SONDE_PROFILE_METRIC_WALL && sonde_spool__switch_cpus(r->spool)) {
		int err = sonde__acct_weights(r->spool, &r->weights);
		if (err < 0) {
			cli_error("report", "%s: %s", r->path, sonde_strerror(err));
			return CLI_FAILURE;
		}
	}
	if (r->column_auto && !r->folded)
		decide_column(r);
	r->progress = cli_progress_begin("report", "counting samples");
	int err = count_nodes(r);
	cli_progress_end(r->progress);
	r->progress = NULL;
	if (!err && !r->folded) {
		r->progress = cli_progress_begin("report", "symbolizing stacks");
		err = r->column != ROOTS_NONE ? attribute_grouped(r) : attribute(r);
		cli_progress_end(r->progress);
		r->progress = NULL;
	}
	if (err < 0) {
		cli_error("report", "%s: %s", r->path, sonde_strerror(err));
		return CLI_FAILURE;
	}
	return 0;
}

/* Function (label, module) of r, or -1. */
static long func_find(const struct report *r, const char *label, const char *module)
{
	if (!r->ftab_size)
		return -1;
	size_t mask = r->ftab_size - 1, j = str_hash(label, module) & mask;
	for (; r->ftab[j]; j = (j + 1) & mask) {
		const struct func *f = &r->funcs[r->ftab[j] - 1];
		if (!strcmp(f->label, label) && !strcmp(f->module, module))
			return r->ftab[j] - 1;
	}
	return -1;
}

struct diff_row {
	const struct func *f; /* for its name: AFTER's, or BEFORE's when AFTER lacks it */
	double before, after; /* self % */
};

static int by_change(const void *a, const void *b)
{
	const struct diff_row *x = a, *y = b;
	double dx = fabs(x->after - x->before), dy = fabs(y->after - y->before);

	if (dx != dy)
		return dx < dy ? 1 : -1;
	return strcmp(x->f->label, y->f->label);
}

/* The functions with self samples in either, their self %% in each and the change. */
static int print_diff(const struct report *a, const struct report *b, double limit, long top)
{
	struct diff_row *rows = calloc(a->n_funcs + b->n_funcs + 1, sizeof(*rows));
	double ta = a->total ? (double)a->total : 1, tb = b->total ? (double)b->total : 1;
	size_t n = 0;

	if (!rows)
		return -ENOMEM;
	for (size_t i = 0; i < b->n_funcs; i++) {
		const struct func *f = &b->funcs[i];
		long j = func_find(a, f->label, f->module);
		double before = j >= 0 ? 100.0 * (double)a->funcs[j].self / ta : 0;
		if (f->self || before > 0)
			rows[n++] = (struct diff_row){f, before, 100.0 * (double)f->self / tb};
	}
	for (size_t i = 0; i < a->n_funcs; i++) {
		const struct func *f = &a->funcs[i];
		if (f->self && func_find(b, f->label, f->module) < 0)
			rows[n++] = (struct diff_row){f, 100.0 * (double)f->self / ta, 0};
	}
	qsort(rows, n, sizeof(*rows), by_change);
	printf("before: %s, %" PRIu64 " samples\nafter:  %s, %" PRIu64 " samples\n", a->path,
	       a->samples, b->path, b->samples);
	printf("\nSelf samples, as a share of each profile, largest changes first:\n");
	printf("%8s %8s %9s  %s\n", "before%", "after%", "change", "function [module]");
	for (size_t i = 0, shown = 0; i < n && shown < (size_t)top; i++) {
		const struct diff_row *d = &rows[i];
		if (d->before < limit && d->after < limit)
			continue;
		bool bracketed = d->f->module[0] == '[';
		printf("%7.2f%% %7.2f%% %+8.2f%%  %s %s%s%s\n", d->before, d->after,
		       d->after - d->before, d->f->label, bracketed ? "" : "[", d->f->module,
		       bracketed ? "" : "]");
		shown++;
	}
	free(rows);
	return 0;
}

static int run_diff(struct report *a)
{
	struct report b = *a; /* the same options (nothing is loaded yet) */
	int rc;

	b.path = a->path_after;
	rc = load(a);
	if (!rc)
		rc = load(&b);
	if (!rc && print_diff(a, &b, a->percent_limit, a->top) < 0) {
		cli_error("report", "out of memory");
		rc = CLI_FAILURE;
	}
	report_free(a);
	b.filt.cpus = NULL; /* a's --cpu list, freed with a */
	report_free(&b);
	if (fflush(stdout) != 0)
		rc = CLI_FAILURE;
	return rc;
}

static int cmd_report(int argc, char **argv)
{
	struct report r = {0};
	int rc = parse_args(&r, argc, argv), err;

	if (rc >= 0) {
		free_cpus(&r);
		return rc;
	}
	if (r.diff)
		return run_diff(&r);
	if (r.sort_cpu && r.folded) {
		cli_error("report", "--sort cpu and --folded do not go together");
		report_free(&r);
		return CLI_USAGE;
	}
	if (r.summary) {
		/* a table of its own: no stacks to count or symbolize */
		err = open_spool(&r) < 0 ? -1 : print_summary(&r, true);
		if (err < -1)
			cli_error("report", "%s: %s", r.path, sonde_strerror(err));
		report_free(&r);
		if (fflush(stdout) != 0)
			err = -errno;
		return err < 0 ? CLI_FAILURE : CLI_OK;
	}
	if ((rc = load(&r))) {
		report_free(&r);
		return rc;
	}
	err = r.folded ? print_folded(&r) : print_report(&r);
	if (!err && r.folded && !r.samples)
		explain_empty(&r);
	if (!err && r.folded) /* stdout holds the stacks alone */
		print_account(&r, stderr, "sonde report: note: ");
	note_refused(&r);
	if (err < 0)
		cli_error("report", "%s: %s", r.path, sonde_strerror(err));
	report_free(&r);
	if (fflush(stdout) != 0)
		err = -errno;
	return err < 0 ? CLI_FAILURE : CLI_OK;
}

SONDE_COMMAND("report", "summarize a recording: top functions, folded stacks", cmd_report)
