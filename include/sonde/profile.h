/* Symbolized profiles and their exports: pprof, folded stacks, speedscope, SVG flame graph.
 *
 * A profile is an in-memory model shared by every exporter: modules (executable
 * mappings), threads, locations (one recorded address, with the source lines it resolved
 * to, inlined frames first) and samples (a stack of locations, interned as a call tree,
 * plus time, thread and count).
 *
 * Call order when building one by hand: sonde_profile__new, then any interleaving of
 * add_module, add_thread, add_location and add_sample (everything a call refers to must
 * exist already), then any number of sonde_profile__write calls, then sonde_profile__free.
 * sonde_profile__from_spool does all of that from a recording.
 */
#ifndef SONDE_PROFILE_H
#define SONDE_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>
#include <sonde/symbolize.h>

struct sonde_profile;

struct sonde_profile_info {
	size_t sz;		     /* sizeof(struct sonde_profile_info) */
	uint64_t start_time_ns;	     /* wall clock (CLOCK_REALTIME) when recording started */
	uint64_t start_monotonic_ns; /* the same instant on the sample clock */
	uint64_t sample_period_ns;   /* nominal interval between samples; 0 if unknown */
};

/* One executable mapping, as recorded (see struct sonde_spool_module_def). */
struct sonde_profile_module {
	uint32_t pid;
	uint32_t flags;		 /* SONDE_MODULE_* of include/sonde/spool.h */
	uint64_t start, end;	 /* mapped address range [start, end) */
	uint64_t pgoff;		 /* file offset of start */
	const uint8_t *build_id; /* may be NULL */
	size_t build_id_len;	 /* at most 32 */
	const char *path;	 /* may be NULL (anonymous) */
};

/* Creates an empty profile; info may be NULL. NULL and errno on failure. */
SONDE_API struct sonde_profile *sonde_profile__new(const struct sonde_profile_info *info);
/* Frees the profile and every string it holds (NULL is fine). */
SONDE_API void sonde_profile__free(struct sonde_profile *p);

/* Adds a module (the profile copies it); *id receives its id (ids start at 1). */
SONDE_API int sonde_profile__add_module(struct sonde_profile *p,
					const struct sonde_profile_module *m, uint32_t *id);
/* Adds a thread (comm may be NULL); *id receives its id (ids start at 1). */
SONDE_API int sonde_profile__add_thread(struct sonde_profile *p, uint32_t pid, uint32_t tid,
					const char *comm, uint32_t *id);
/* Adds a location: module != 0 means addr is a file offset inside that module, module == 0
 * a raw address no module covers (as in struct sonde_spool_frame). lines[0..n-1] are the
 * frames it resolved to, innermost first (inlined frames before the function they were
 * inlined into, as sonde_symbolizer__symbolize returns them); n == 0 keeps the location
 * unsymbolized (exporters then show "module+0xoffset" and keep the raw address and build id). Every
 * string is copied. *id receives the location id (ids start at 1). */
SONDE_API int sonde_profile__add_location(struct sonde_profile *p, uint32_t module, uint64_t addr,
					  const struct sonde_sym_frame *lines, size_t n,
					  uint32_t *id);
/* Adds `count` samples taken at time_ns (sample clock) in `thread` (0 when unknown) with
 * the stack locs[0..n-1], innermost first. Identical stacks share storage. */
SONDE_API int sonde_profile__add_sample(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
					const uint32_t *locs, size_t n, uint64_t count);

/* Total number of samples (sum of counts). */
SONDE_API uint64_t sonde_profile__sample_count(const struct sonde_profile *p);

/* ---- metrics: on-CPU samples and off-CPU intervals ----
 *
 * A profile holds on-CPU samples (sonde_profile__add_sample) and, from recordings made
 * with --off-cpu, off-CPU intervals: a thread's stack when it left the CPU, how long it
 * stayed off and in which state (enum sonde_offcpu_state of include/sonde/spool.h). What
 * a view weighs is its metric:
 *  - CPU: on-CPU samples, each weighing its count (off-CPU intervals are left out);
 *  - OFF_CPU: off-CPU intervals, each weighing its duration in nanoseconds;
 *  - WALL: both, in nanoseconds: a sample weighs its count times the recording's
 *    sample period (sonde_profile_info.sample_period_ns), an interval its duration. The
 *    two share each thread's stacks, so one profile per thread shows where its wall-clock
 *    time went.
 * An interval's stack ends with a pseudo-frame naming its state, the innermost frame:
 * "[off-cpu: R]" (preempted, runnable: waiting for a CPU), "[off-cpu: S]" (sleeping),
 * "[off-cpu: D]" (uninterruptible) or "[off-cpu: other]"; the frame below it is the
 * function that blocked. */
enum sonde_profile_metric {
	SONDE_PROFILE_METRIC_CPU = 0,	  /* samples (count) */
	SONDE_PROFILE_METRIC_OFF_CPU = 1, /* off-CPU time (nanoseconds) */
	SONDE_PROFILE_METRIC_WALL = 2,	  /* on-CPU plus off-CPU time (nanoseconds) */
};

/* Adds an off-CPU interval of `thread` that began at time_ns (its switch-out) and lasted
 * duration_ns, in state `state` (enum sonde_offcpu_state), on CPU cpu
 * (SONDE_SPOOL_CPU_NONE: unknown), with the stack locs[0..n-1] (innermost first: the
 * function that blocked), below which the model puts the state's pseudo-frame. */
SONDE_API int sonde_profile__add_offcpu(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
					uint32_t cpu, const uint32_t *locs, size_t n,
					uint64_t duration_ns, uint32_t state);
/* Adds intervals of `thread` shorter than the recording's threshold, counted but not
 * stacked (they weigh in no metric; reports state them). */
SONDE_API int sonde_profile__add_offcpu_short(struct sonde_profile *p, uint32_t thread,
					      uint64_t count, uint64_t total_ns);
/* Number of off-CPU intervals; with short_count/short_ns (may be NULL), the aggregated short
 * intervals. */
SONDE_API uint64_t sonde_profile__offcpu_count(const struct sonde_profile *p, uint64_t *short_count,
					       uint64_t *short_ns);
/* The total weight of the profile under metric m (samples, or nanoseconds). */
SONDE_API uint64_t sonde_profile__total(const struct sonde_profile *p, enum sonde_profile_metric m);
/* Parses "cpu", "off-cpu" or "wall"; 0 or -EINVAL. */
SONDE_API int sonde_profile__parse_metric(const char *name, enum sonde_profile_metric *out);
/* "cpu", "off-cpu", "wall" (NULL for an unknown value). */
SONDE_API const char *sonde_profile__metric_name(enum sonde_profile_metric m);

struct sonde_profile_spool_opts {
	size_t sz;				 /* sizeof(struct sonde_profile_spool_opts) */
	int no_symbolize;			 /* keep raw addresses and build ids only */
	const struct sonde_symbolizer_opts *sym; /* NULL: defaults */
	/* Filters, with `sonde report`'s meaning (docs/exports.md): a sample (or off-CPU
	 * interval) is kept when it passes every filter given; NULL or 0 leaves one out.
	 * pids and tids as the kernel numbers them; comms exactly the thread's name as the
	 * recording knew it at that sample; cpus the CPU it was taken on (at switch-out for
	 * an interval). */
	const uint32_t *pids;
	size_t n_pids;
	const uint32_t *tids;
	size_t n_tids;
	const char *const *comms;
	size_t n_comms;
	const int *cpus;
	size_t n_cpus;
	/* Nonzero: only what was taken between time_from_s and time_to_s (inclusive), in
	 * seconds from the start of the recording; time_to_s < 0 for its end. */
	int time_range;
	double time_from_s, time_to_s;
	/* Root frames, as `sonde report --folded-roots`: every stack hangs under a
	 * "comm-pid" frame of its process (the command of its main thread as the recording
	 * named it up to then: after an exec, the new program's; else of the sampled
	 * thread), or a "comm-pid/tid" frame of its thread, so that flame views start with
	 * the processes or threads. AUTO: process roots, which the SVG flame graph draws
	 * only when more than one process weighs in it (a machine-wide recording) and leaves
	 * out otherwise; the other formats keep them as with PROCESS. */
	enum sonde_profile_roots {
		SONDE_PROFILE_ROOTS_NONE = 0,
		SONDE_PROFILE_ROOTS_PROCESS = 1,
		SONDE_PROFILE_ROOTS_THREAD = 2,
		SONDE_PROFILE_ROOTS_AUTO = 3,
	} roots;
};

/* Reads the spool file at path and builds its profile, symbolizing every distinct address
 * once unless opts->no_symbolize. opts may be NULL. NULL and errno on failure (a negative
 * SONDE_E_* value is stored in errno as its absolute value). A truncated final record is
 * tolerated, as by the spool reader. */
SONDE_API struct sonde_profile *
sonde_profile__from_spool(const char *path, const struct sonde_profile_spool_opts *opts);

/* Converts the spool at path into a standalone Perfetto trace written to fd: traced_perf's
 * packets (PerfSample with interned callstacks, ProcessTree), one sequence, symbolized
 * unless opts->no_symbolize (docs/exports.md). opts may be NULL. Returns 0 or -errno /
 * -SONDE_E_*; fd stays open. A truncated final record is tolerated (with a warning). */
SONDE_API int sonde_profile__spool_to_perfetto(const char *path, int fd,
					       const struct sonde_profile_spool_opts *opts);

enum sonde_profile_format {
	SONDE_PROFILE_PPROF,	  /* gzip'd profile.proto */
	SONDE_PROFILE_FOLDED,	  /* "outer;...;inner count" lines */
	SONDE_PROFILE_SPEEDSCOPE, /* speedscope's file format, sampled profiles */
	SONDE_PROFILE_SVG,	  /* standalone interactive flame graph */
};

struct sonde_profile_write_opts {
	size_t sz;	   /* sizeof(struct sonde_profile_write_opts) */
	const char *title; /* SVG and speedscope title; NULL: "sonde profile" */
	/* What the stacks weigh (default CPU). Folded stacks print samples for CPU and
	 * microseconds for OFF_CPU and WALL; the SVG states samples or milliseconds;
	 * speedscope weighs nanoseconds (CPU: count x period when the period is known).
	 * pprof holds every metric as a sample type (samples/count, cpu/nanoseconds,
	 * off_cpu/nanoseconds, wall/nanoseconds) and makes this one the default. */
	enum sonde_profile_metric metric;
	/* The SVG's layout: > 0 an icicle (inverted: the root at the top, callees below, as
	 * flamegraph.pl --inverted), < 0 a flame graph (the root at the bottom), 0 the icicle
	 * when more than one process weighs in it (a machine-wide recording, whose first
	 * screen then shows its processes) and the flame graph otherwise. With more than one
	 * process the root's children (process roots) are ordered heaviest first. */
	int inverted;
	/* The SVG's idle task and kernel threads (threads of a process with no module of its
	 * own and no user frame on any stack): > 0 left out, the subtitle saying their share;
	 * < 0 shown, grouped under one "[idle and kernel threads]" node below the root when
	 * more than one process weighs; 0 left out under the CPU metric when more than one
	 * process weighs, else shown. */
	int hide_idle;
};

/* Writes the profile to fd in the given format; opts may be NULL. Returns 0 or -errno /
 * -SONDE_E_* (-EINVAL for an unknown metric). The profile is not modified; fd stays open. */
SONDE_API int sonde_profile__write(const struct sonde_profile *p, enum sonde_profile_format fmt,
				   int fd, const struct sonde_profile_write_opts *opts);

/* Parses "pprof", "folded", "speedscope" or "svg"; returns 0 or -EINVAL. */
SONDE_API int sonde_profile__parse_format(const char *name, enum sonde_profile_format *out);
/* The format a file name implies (.pb.gz/.pprof, .folded/.txt, .json, .svg), or -EINVAL. */
SONDE_API int sonde_profile__format_from_path(const char *path, enum sonde_profile_format *out);

#endif
