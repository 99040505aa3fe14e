/* Views built by the library from a recording: a spool read whole, or a live tail
 * (docs/view.md). The two sources are read through one reader (stack nodes, frames,
 * threads, symbolization), so that a tail presents what the spool does: the same events,
 * the same functions, the same process names.
 *
 * From a spool:
 *   sonde_spool__open, sonde_view__from_spool (the view is the caller's), then the view's
 *   own calls (include/sonde/view.h); sonde_view__free, sonde_spool__close.
 * From a tail (a sliding window of its events):
 *   sonde_tail__open, sonde_view_live__new;
 *   loop: sonde_tail__poll, sonde_view_live__add (the batch), sonde_view_live__expire,
 *         sonde_view_live__view (the window's view, rebuilt);
 *   sonde_view_live__free, then sonde_tail__free.
 */
#ifndef SONDE_VIEW_SOURCE_H
#define SONDE_VIEW_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>
#include <sonde/profile.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>
#include <sonde/tail.h>
#include <sonde/view.h>

/* The states the events of metric m are in, as a mask of 1 << enum sonde_view_state: cpu
 * the on-CPU state; off-cpu the off-CPU states (runnable, sleeping, blocked, other,
 * unknown); wall every state, the on-CPU time no sample saw (SONDE_VIEW_UNSAMPLED)
 * included. 0 for an unknown metric. */
SONDE_API uint32_t sonde_view_metric_states(enum sonde_profile_metric m);

/* The names sym gives frame `frame` of spool s, sampled in process pid, into out[max]
 * (inlined functions first, as sonde_symbolizer__symbolize): a frame of a module through
 * the module's definition in the spool, one of no module (0) by the process's address
 * space. The number written, or -ERANGE (no such frame or module) or the symbolizer's
 * -errno. */
SONDE_API int sonde_spool__symbolize_frame(const struct sonde_spool *s,
					   struct sonde_symbolizer *sym, uint32_t frame,
					   uint32_t pid, struct sonde_sym_frame *out, size_t max);

/* Progress of a long build: phase (a static string), done of total units. */
typedef void (*sonde_view_progress_fn)(void *ctx, const char *phase, uint64_t done, uint64_t total);

struct sonde_view_source_opts {
	size_t sz; /* sizeof(struct sonde_view_source_opts) */
	/* Which events are kept (NULL: all), on the recording's clock (sonde_view_filter__time_s
	 * with the header's start_monotonic_ns for seconds from the start); copied. Its state
	 * mask is narrowed to the metric's (sonde_view_metric_states). */
	const struct sonde_view_filter *filter;
	/* What an event weighs: cpu, a sample 1; off-cpu, an interval its nanoseconds; wall,
	 * both (a sample its thread's on-CPU time by the CPUs' switches where the recording
	 * kept them, else the sampling period; in a live view always the period, as a
	 * tail's window has no thread's whole life to spread its switches' time over). */
	enum sonde_profile_metric metric;
	int state_frames; /* as sonde_view_opts.state_frames */
	int lines;	  /* name functions "name (file:line)" where debug info says */
	int no_inline;	  /* a frame is its outermost function only (inlined code is its) */
	/* Spool: the symbolizer to name frames with (borrowed), NULL to create one with
	 * buildid_cache_dir, freed with the build. A tail names frames with its own. */
	struct sonde_symbolizer *symbolizer;
	const char *buildid_cache_dir;
	sonde_view_progress_fn progress; /* NULL: none */
	void *progress_ctx;
	/* Name no frame through a symbolizer, so that nothing but the recording is read (no
	 * path a spool names is opened): a frame is "module+0xOFFSET", or "0xADDR" outside
	 * modules, and counts as unresolved. Spool and tail alike. */
	int no_symbolize;
};

/* What building a view read. An output struct: the caller sets sz. */
struct sonde_view_source_stats {
	size_t sz;		    /* sizeof(struct sonde_view_source_stats) */
	uint64_t frames;	    /* distinct frames symbolized */
	uint64_t unresolved_frames; /* of those, the ones the symbolizer could not name */
	int wall_by_switches;	    /* wall: some samples weigh by the CPUs' switches */
	uint64_t events;	    /* events read (kept or not) */
};

/* Builds a view of the events of spool s that opts keeps (opts may be NULL: every on-CPU
 * sample), their stacks symbolized, each distinct stack node once: samples, then (for the
 * off-cpu and wall metrics) off-CPU intervals, intervals a loss cut (SONDE_VIEW_UNKNOWN)
 * and the short intervals (sonde_view__add_short), then (wall, by the switches) the
 * on-CPU time of tasks no sample saw (SONDE_VIEW_UNSAMPLED). A process is named after its
 * main thread when the event's thread was defined. *out is the caller's (sonde_view__free);
 * st may be NULL. 0, or -errno / -SONDE_E_* with *out NULL. */
SONDE_API int sonde_view__from_spool(const struct sonde_spool *s,
				     const struct sonde_view_source_opts *opts,
				     struct sonde_view **out, struct sonde_view_source_stats *st);

/* A sliding window of a tail's events, as a view: what sonde_view__from_spool adds of
 * the same records (samples; under the off-cpu and wall metrics the intervals, those a
 * loss cut and the short intervals), weighed and filtered alike, but the on-CPU time of
 * tasks no sample saw (a window does not see a task's whole life). */
struct sonde_view_live;

/* window_ns: how far back from the newest time the window reaches (0: it keeps every
 * event). The tail is borrowed and must outlive the live view. opts as for a spool (the
 * symbolizer is the tail's). NULL and errno (EINVAL, ENOMEM). */
SONDE_API struct sonde_view_live *sonde_view_live__new(struct sonde_tail *t, uint64_t window_ns,
						       const struct sonde_view_source_opts *opts);
/* NULL is fine. */
SONDE_API void sonde_view_live__free(struct sonde_view_live *l);
/* Forgets the names of the processes the batch invalidated, then takes its events that
 * the filter keeps into the window, each stack named as it is taken in: an event keeps
 * the names it had when a process later execs or remaps its JIT code. 0 or -errno. */
SONDE_API int sonde_view_live__add(struct sonde_view_live *l, const struct sonde_tail_batch *b);
/* Drops the events that ended before now_ns - window_ns (an interval ends at its
 * switch-in; a short-interval record when the newest event before it did). */
SONDE_API void sonde_view_live__expire(struct sonde_view_live *l, uint64_t now_ns);
/* Events in the window (samples and intervals), and the latest end of one taken in (0:
 * none). */
SONDE_API uint64_t sonde_view_live__samples(const struct sonde_view_live *l);
SONDE_API uint64_t sonde_view_live__last_time(const struct sonde_view_live *l);
/* The window's view, rebuilt from its samples: owned by l, valid until the next call on l.
 * NULL and errno on failure. */
SONDE_API struct sonde_view *sonde_view_live__view(struct sonde_view_live *l);
/* What was symbolized so far (st->sz set). 0 or -EINVAL. */
SONDE_API int sonde_view_live__stats(const struct sonde_view_live *l,
				     struct sonde_view_source_stats *st);

#endif
