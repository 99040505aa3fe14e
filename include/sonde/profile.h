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
 * inlined into, as sonde_symbolizer__symbolize returns them); n == 0 keeps the location unsymbolized
 * (exporters then show "module+0xoffset" and keep the raw address and build id). Every
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

struct sonde_profile_spool_opts {
	size_t sz;				 /* sizeof(struct sonde_profile_spool_opts) */
	int no_symbolize;			 /* keep raw addresses and build ids only */
	const struct sonde_symbolizer_opts *sym; /* NULL: defaults */
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
};

/* Writes the profile to fd in the given format; opts may be NULL. Returns 0 or -errno /
 * -SONDE_E_*. The profile is not modified; fd stays open. */
SONDE_API int sonde_profile__write(const struct sonde_profile *p, enum sonde_profile_format fmt,
				  int fd, const struct sonde_profile_write_opts *opts);

/* Parses "pprof", "folded", "speedscope" or "svg"; returns 0 or -EINVAL. */
SONDE_API int sonde_profile__parse_format(const char *name, enum sonde_profile_format *out);
/* The format a file name implies (.pb.gz/.pprof, .folded/.txt, .json, .svg), or -EINVAL. */
SONDE_API int sonde_profile__format_from_path(const char *path, enum sonde_profile_format *out);

#endif
