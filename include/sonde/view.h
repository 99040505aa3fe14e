/* Views of a recording: weighted stacks of named functions, filtered, grouped and ranked
 * for reading, the read-side model `sonde report`, `sonde top` and `sonde convert` share.
 *
 * A view knows functions (a name and a module, interned once: the one function table of
 * the readers) and events: a stack of functions, innermost first, with the process,
 * thread, CPU, time and state it was taken in and a weight (samples, or nanoseconds). The
 * caller resolves frames into functions (from a spool, a live tail or a profile); the view
 * does the rest (include/sonde/view_source.h has the library build a view from a spool or a
 * tail itself):
 *  - one filter set (pid, tid, comm, CPU, time range, state), applied as events are added;
 *  - aggregation by function (self: the innermost function; total: anywhere on the stack,
 *    counted once per event even when recursive), by function within each process or
 *    thread, or by process, thread or CPU alone;
 *  - top-N rows sorted by self, total, name or process, with the number of rows cut;
 *  - the diff of two views, function by function;
 *  - folded stacks ("outer;...;inner weight").
 *
 * Call order: sonde_view__new, then any interleaving of sonde_view__func, __stack, __add
 * and __add_stack, then any number of sonde_view__rows / __stats / __diff / __write_folded calls
 * (adding more in between is fine); sonde_view__clear empties the events and keeps the
 * functions (a sliding window refreshed from its events); sonde_view__free.
 */
#ifndef SONDE_VIEW_H
#define SONDE_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>

struct sonde_view;

/* An event's state: on the CPU, or off it in one of the states of enum
 * sonde_offcpu_state (include/sonde/spool.h) plus one, or an off-CPU interval a loss cut. */
enum sonde_view_state {
	SONDE_VIEW_ON_CPU = 0,
	SONDE_VIEW_RUNNABLE = 1, /* preempted, waiting for a CPU */
	SONDE_VIEW_SLEEPING = 2,
	SONDE_VIEW_BLOCKED = 3, /* uninterruptible */
	SONDE_VIEW_OTHER = 4,
	SONDE_VIEW_UNKNOWN = 5, /* lost records cut the interval */
	/* on-CPU time of a thread no sample saw (by the CPUs' switches: --metric wall) */
	SONDE_VIEW_UNSAMPLED = 6,
	SONDE_VIEW_STATES = 7,
};

/* The CPU of an event that has none. */
#define SONDE_VIEW_CPU_NONE UINT32_MAX

/* Which events a view keeps: an event is kept when it passes every filter given; NULL or 0
 * leaves one out. The same filters, with the same meaning, as `sonde report`'s --pid,
 * --tid, --comm, --cpu, --time and --metric (docs/view.md). */
struct sonde_view_filter {
	size_t sz; /* sizeof(struct sonde_view_filter) */
	const uint32_t *pids;
	size_t n_pids;
	const uint32_t *tids;
	size_t n_tids;
	const char *const *comms; /* the thread's name, exactly */
	size_t n_comms;
	const int *cpus;
	size_t n_cpus;
	/* Nonzero: only events taken between time_from_ns and time_to_ns (inclusive, on the
	 * events' clock); time_to_ns 0 for no end. */
	int time_range;
	uint64_t time_from_ns, time_to_ns;
	/* A mask of 1 << enum sonde_view_state: only events in these states; 0: every state. */
	uint32_t states;
};

/* Sets f's time range from seconds after start_ns (the recording's start, on the events'
 * clock), as `sonde report --time` and `sonde convert --time` give it: from the first
 * nanosecond at or after from_s to the last at or before to_s, a time given to the
 * nanosecond being that nanosecond (to_s < 0: no end; a window that ends at the clock's
 * zero ends at its first nanosecond, 0 meaning no end). */
SONDE_API void sonde_view_filter__time_s(struct sonde_view_filter *f, uint64_t start_ns,
					 double from_s, double to_s);

struct sonde_view_opts {
	size_t sz;				/* sizeof(struct sonde_view_opts) */
	const struct sonde_view_filter *filter; /* NULL: keep everything; copied */
	/* Nonzero: an off-CPU event's stack gets its state's pseudo-function innermost (name
	 * sonde_view_state_name, module "[sched]"), so that rows, diffs and folded stacks say
	 * how the thread waited; 0: the stack as added. */
	int state_frames;
};

/* The pseudo-function of an off-CPU state: "[off-cpu: R]", "[off-cpu: S]", "[off-cpu: D]",
 * "[off-cpu: other]", "[unknown: lost records]", "[on-cpu: not sampled]"; "" for
 * SONDE_VIEW_ON_CPU and past the states. A static string. */
SONDE_API const char *sonde_view_state_name(uint32_t state);

/* Creates an empty view; opts may be NULL. NULL and errno on failure (EINVAL: bad opts). */
SONDE_API struct sonde_view *sonde_view__new(const struct sonde_view_opts *opts);
/* Frees the view and everything it returned (NULL is fine). */
SONDE_API void sonde_view__free(struct sonde_view *v);

/* The id (1 and up) of function (name, module), added when new; module may be NULL or ""
 * (a frame of no module, or a root frame). Both are copied. -errno on failure. */
SONDE_API int64_t sonde_view__func(struct sonde_view *v, const char *name, const char *module);

/* Marks function id as one the symbolizer could not name (sonde_view_stats.unresolved counts
 * the weight of stacks holding one). 0 or -EINVAL. */
SONDE_API int sonde_view__func_unresolved(struct sonde_view *v, uint32_t id);

/* The id of the stack funcs[0..n-1] (ids from sonde_view__func, innermost first), interned
 * once: 0 for an empty stack. For a source whose events share stacks it has resolved once
 * (a spool's stack nodes), to hand to sonde_view__add_stack. -errno (-EINVAL: an unknown
 * function id). */
SONDE_API int64_t sonde_view__stack(struct sonde_view *v, const uint32_t *funcs, size_t n);

struct sonde_view_event {
	size_t sz; /* sizeof(struct sonde_view_event) */
	uint32_t pid, tid;
	const char *comm;    /* the thread's name (NULL: ""); copied */
	const char *process; /* the process's name, its main thread's (NULL: comm); copied */
	uint32_t cpu;	     /* SONDE_VIEW_CPU_NONE: not known */
	uint64_t time_ns;
	uint32_t state;	 /* enum sonde_view_state */
	uint64_t weight; /* samples, or nanoseconds */
};

/* The view's copy of the filter it was made with (NULL: none, everything passes), valid
 * until sonde_view__free. */
SONDE_API const struct sonde_view_filter *sonde_view__filter(const struct sonde_view *v);

/* Whether event e passes filter f (f may be NULL: everything passes): 1 or 0, -EINVAL for a
 * bad struct. The test sonde_view__add applies, for readers that count events their own
 * way but must keep the same ones. */
SONDE_API int sonde_view_filter__match(const struct sonde_view_filter *f,
				       const struct sonde_view_event *e);

/* Adds event e whose stack is funcs[0..n-1] (ids from sonde_view__func, innermost first;
 * n may be 0). Returns 1 when kept, 0 when a filter left it out, -errno (-EINVAL for an
 * unknown function id or state). */
SONDE_API int sonde_view__add(struct sonde_view *v, const struct sonde_view_event *e,
			      const uint32_t *funcs, size_t n);
/* sonde_view__add with the stack given by its id (from sonde_view__stack). */
SONDE_API int sonde_view__add_stack(struct sonde_view *v, const struct sonde_view_event *e,
				    uint32_t stack);
/* Adds count off-CPU intervals of one thread, total_ns long in all, too short for the
 * recording to stack (a spool's OFFCPU_SHORT records): kept when e's thread passes the
 * pid, tid and comm filters (they have no time, CPU or state: those filters keep them all)
 * and counted apart from the events, in sonde_view_stats.short_count and short_ns. Only
 * e's pid, tid and comm are read. 1 when kept, 0 when left out, -EINVAL. */
SONDE_API int sonde_view__add_short(struct sonde_view *v, const struct sonde_view_event *e,
				    uint64_t count, uint64_t total_ns);
/* Forgets every event (the functions stay, with their ids). */
SONDE_API void sonde_view__clear(struct sonde_view *v);
/* The weight of the events kept, and (events may be NULL) how many. */
SONDE_API uint64_t sonde_view__total(const struct sonde_view *v, uint64_t *events);

/* What the events kept add up to. An output struct: the caller sets sz, the view fills the
 * fields it knows. */
struct sonde_view_stats {
	size_t sz;		/* sizeof(struct sonde_view_stats) */
	uint64_t total, events; /* as sonde_view__total */
	/* the weight and the number of events in each enum sonde_view_state */
	uint64_t weight[SONDE_VIEW_STATES], state_events[SONDE_VIEW_STATES];
	uint32_t processes, threads; /* distinct pids, and (pid, tid) pairs */
	/* distinct stacks of functions that carry weight, state frames included and empty
	 * stacks not: the lines of the folded stacks, before names merge */
	uint64_t stacks;
	uint64_t empty;	     /* events whose stack (with its state frame) is empty */
	uint64_t unresolved; /* weight of the events with an unresolved function on the stack */
	/* the short off-CPU intervals kept (sonde_view__add_short): how many, how long */
	uint64_t short_count, short_ns;
	/* functions the view has interned, whether or not an event holds one: what its
	 * function table costs (a live view's stays bounded, docs/view.md) */
	uint64_t functions;
};

/* Fills *st. 0 or -errno (-EINVAL: no sz). */
SONDE_API int sonde_view__stats(const struct sonde_view *v, struct sonde_view_stats *st);

enum sonde_view_group {
	SONDE_VIEW_BY_FUNCTION = 0,	    /* a row per function */
	SONDE_VIEW_BY_FUNCTION_PROCESS = 1, /* a row per function and process */
	SONDE_VIEW_BY_FUNCTION_THREAD = 2,  /* a row per function and thread */
	SONDE_VIEW_BY_PROCESS = 3,	    /* a row per process */
	SONDE_VIEW_BY_THREAD = 4,	    /* a row per thread */
	SONDE_VIEW_BY_CPU = 5,		    /* a row per CPU */
};

enum sonde_view_sort {
	SONDE_VIEW_SORT_SELF = 0,    /* self, then total, heaviest first */
	SONDE_VIEW_SORT_TOTAL = 1,   /* total, then self, heaviest first */
	SONDE_VIEW_SORT_NAME = 2,    /* name, then module; CPU rows by number, none last */
	SONDE_VIEW_SORT_PROCESS = 3, /* the process or thread label, then self */
};

struct sonde_view_rows_opts {
	size_t sz; /* sizeof(struct sonde_view_rows_opts) */
	enum sonde_view_group group;
	enum sonde_view_sort sort;
	size_t max; /* rows to return at most; 0: all */
	/* Nonzero: a tie in self (SORT_SELF) or total (SORT_TOTAL) goes straight to the name,
	 * as `sonde report`'s tables order it; 0: to the other weight first. */
	int ties_by_name;
};

/* One row. Ties in the sort key fall back to the name, the module, then the label, so the
 * order is the same on every run. */
struct sonde_view_row {
	const char *name;   /* the function; for a process, thread or CPU row its label */
	const char *module; /* the function's module; "" for other rows */
	/* "comm-pid" (process: the process's name), "comm-pid/tid" (thread), or for a CPU
	 * row the CPU number ("[unknown]" for none); "" for BY_FUNCTION rows */
	const char *label;
	uint32_t pid, tid, cpu; /* what the row is of, where it applies (else 0) */
	uint64_t self;		/* weight with this function innermost (other rows: all) */
	uint64_t total;		/* weight with it anywhere on the stack (other rows: all) */
};

/* The view's rows, sorted: *rows (owned by the view, valid until the next call on it but
 * sonde_view__total) and their number *n, at most opts->max; *n_all (may be NULL) the
 * number of rows before the cut. Functions only on stacks that were filtered out have no
 * row. opts may be NULL (by function, by self, all rows). 0 or -errno. */
SONDE_API int sonde_view__rows(struct sonde_view *v, const struct sonde_view_rows_opts *opts,
			       const struct sonde_view_row **rows, size_t *n, size_t *n_all);

/* A function's self weight in two views, as a share of each view's total. */
struct sonde_view_diff_row {
	const char *name, *module;
	uint64_t before, after; /* self weight */
	double before_pct, after_pct;
};

/* Compares before and after by function (name and module): a row for each function with
 * self weight in either, largest absolute change of share first (then name). *rows is
 * owned by `after` and valid until the next call on it. 0 or -errno. */
SONDE_API int sonde_view__diff(const struct sonde_view *before, struct sonde_view *after,
			       const struct sonde_view_diff_row **rows, size_t *n);

enum sonde_view_roots {
	SONDE_VIEW_ROOTS_NONE = 0,
	SONDE_VIEW_ROOTS_PROCESS = 1, /* each stack under a "comm-pid" frame */
	SONDE_VIEW_ROOTS_THREAD = 2,  /* each stack under a "comm-pid/tid" frame */
};

struct sonde_view_folded_opts {
	size_t sz; /* sizeof(struct sonde_view_folded_opts) */
	enum sonde_view_roots roots;
	/* The weight of one printed unit (0 or 1: as added; 1000: nanoseconds printed as
	 * microseconds). */
	uint64_t unit;
};

/* Writes folded stacks to fd: one line "outer;...;inner N" per distinct stack of function
 * names, sorted by text. Stacks with the same names merge (the same function at other
 * addresses, or names shared by two modules); their weights are summed first, then divided
 * by the unit, rounding half up, and a line that rounds to 0 is left out. A ';' inside a
 * name is written ':' and a line break ' ', so every line parses. An empty stack has no
 * line unless it has a root frame. opts may be NULL. 0 or -errno; fd stays open. */
SONDE_API int sonde_view__write_folded(const struct sonde_view *v, int fd,
				       const struct sonde_view_folded_opts *opts);

#endif
