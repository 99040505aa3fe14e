/* The profile model behind include/sonde/profile.h, shared by the exporters. Internal to
 * libsonde.
 *
 * Every table is a dense array whose entry 0 is a placeholder, so that id 0 can mean
 * "none" everywhere (as in the spool and in pprof). Strings are interned: string 0 is "".
 * Invariants the exporters rely on: a stack node's parent has a smaller id than the node;
 * a location's lines are innermost first and end with the inline_depth 0 frame.
 */
#ifndef SONDE_EXPORT_PROFILE_H
#define SONDE_EXPORT_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/profile.h>
#include <sonde/spool.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/buf.h"
#include "base/idmap.h"
#include "base/strtab.h"

struct prof_module {
	uint32_t pid, flags;
	uint64_t start, end, pgoff;
	uint32_t path;	   /* string id (0: none) */
	uint32_t build_id; /* string id of the lowercase hex build id (0: none) */
};

struct prof_line {
	uint32_t func;
	uint32_t line;
	uint32_t inline_depth;
};

struct prof_loc {
	uint32_t module;       /* 0: addr is a raw address */
	uint64_t addr;	       /* file offset in module, or raw address */
	uint32_t first_line;   /* index into lines */
	uint32_t n_lines;      /* 0: unsymbolized */
	uint32_t display_func; /* what flame views show for an unsymbolized location */
};

struct prof_node {
	uint32_t parent; /* 0: root (outermost frame) */
	uint32_t loc;
};

struct prof_sample {
	uint64_t time_ns;
	uint64_t count;
	uint32_t thread;
	uint32_t node;
	uint32_t cpu; /* SONDE_SPOOL_CPU_NONE when not recorded */
	/* its weight under the wall metric when the profile's exact_wall is set (its task's
	 * on-CPU time by the CPUs' switches, spread over the task's samples) */
	uint64_t wall_ns;
};

/* An off-CPU interval; node's innermost location is the state's pseudo-frame. */
/* The state of an off-CPU interval a loss cut (a spool UNKNOWN record): past enum
 * sonde_offcpu_state, named [unknown: lost records]. */
enum { PROF_STATE_UNKNOWN = SONDE_OFFCPU_STATES };

struct prof_offcpu {
	uint64_t time_ns; /* switch-out */
	uint64_t duration_ns;
	uint32_t thread;
	uint32_t node;
	uint32_t cpu;
	uint32_t state; /* enum sonde_offcpu_state, or PROF_STATE_UNKNOWN */
};

struct prof_thread {
	uint32_t pid, tid;
	uint32_t comm; /* string id */
};

struct sonde_profile {
	struct sonde_profile_info info;
	struct strtab strs; /* the profile's strings (base/strtab.h) */
	ARR(struct prof_module) modules;
	ARR(struct prof_thread) threads;
	struct functab funcs; /* struct tab_func: module is the module path */
	ARR(struct prof_line) lines;
	ARR(struct prof_loc) locs;
	ARR(struct prof_node) nodes;
	struct idmap node_index;
	ARR(struct prof_sample) samples;
	uint64_t total; /* sum of sample counts */
	/* Off-CPU intervals, apart from the samples: an exporter that knows no metric sees
	 * on-CPU samples only, as before. */
	ARR(struct prof_offcpu) offcpu;
	uint64_t offcpu_ns;			 /* sum of their durations */
	uint64_t short_count, short_ns;		 /* intervals too short to stack */
	/* the pseudo-frame of each state, then of unknown time, then of on-CPU time no
	 * sample saw, 0 until used */
	uint32_t state_loc[PROF_STATE_UNKNOWN + 2];
	/* the wall metric weighs samples by their wall_ns (sum wall_on_ns), not the period:
	 * a spool with the CPUs' switches. Samples of count 0 then stand for tasks' on-CPU
	 * time no sample saw, under the [on-cpu: not sampled] frame. */
	bool exact_wall;
	uint64_t wall_on_ns;
	uint64_t first_time_ns, last_time_ns;
	/* enum sonde_profile_roots the reader hung every known thread's stacks under (root
	 * frames: the outermost node of each such stack) */
	uint8_t roots;
};

static inline const char *prof_str(const struct sonde_profile *p, uint32_t id)
{
	return strtab_str(&p->strs, id);
}

/* Interns s (NULL and "" are string 0); returns the id or -ENOMEM. */
int64_t sonde__prof_intern(struct sonde_profile *p, const char *s);
/* Interns the stack node (parent, loc); returns its id or -ENOMEM. Both must exist. */
int64_t sonde__prof_add_node(struct sonde_profile *p, uint32_t parent, uint32_t loc);
/* Appends a sample whose stack is an existing node. 0 or -ENOMEM. */
int sonde__prof_add_sample_node(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
				uint32_t node, uint32_t cpu, uint64_t count);
/* A sample's weight under metric m: its count for CPU, count * period for WALL, 0 for
 * OFF_CPU; an interval's: its duration for OFF_CPU and WALL, 0 for CPU. */
uint64_t sonde__prof_sample_weight(const struct sonde_profile *p, const struct prof_sample *s,
				   enum sonde_profile_metric m);
uint64_t sonde__prof_offcpu_weight(const struct prof_offcpu *o, enum sonde_profile_metric m);
/* The name of state's pseudo-frame, "[off-cpu: S]" and so on. */
const char *sonde__prof_state_name(uint32_t state);
/* Appends a thread's on-CPU time no sample saw (exact_wall profiles): a sample of count 0
 * weighing on_ns under the wall metric, its stack node with [on-cpu: not sampled] as its
 * leaf. 0 or -ENOMEM. */
int sonde__prof_add_unsampled(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
			      uint32_t node, uint64_t on_ns);

/* Appends an off-CPU interval whose stack (without its state frame) is an existing node. */
int sonde__prof_add_offcpu_node(struct sonde_profile *p, uint64_t time_ns, uint32_t thread,
				uint32_t cpu, uint32_t node, uint64_t duration_ns, uint32_t state);
/* The absolute address a location stands for (what pprof and perf show). */
uint64_t sonde__prof_loc_address(const struct sonde_profile *p, const struct prof_loc *l);
/* Last path component of a string id (the whole string if it has no '/'). */
const char *sonde__prof_basename(const struct sonde_profile *p, uint32_t str);

/* sonde_profile__from_spool on an open file (read from its current position to its end);
 * name is used in messages. */
struct sonde_profile *sonde__prof_from_spool_fd(int fd, const char *name,
						const struct sonde_profile_spool_opts *opts);

/* The readers' filter (include/sonde/view.h) of the profile reader's opts o (NULL: none),
 * its lists pointing into o, its time on the sample clock of a recording that started at
 * start_ns. No states: every state passes. */
struct sonde_view_filter;
void sonde__prof_view_filter(const struct sonde_profile_spool_opts *o, uint64_t start_ns,
			     struct sonde_view_filter *f);
/* The same cut in two: *who by thread (pid, tid, comm), *when by CPU and time. */
void sonde__prof_view_filters(const struct sonde_profile_spool_opts *o, uint64_t start_ns,
			      struct sonde_view_filter *who, struct sonde_view_filter *when);

/* The exporters, each writing one format to fd. */
struct sonde_spool_record;
struct sonde_sym_module;

/* The symbolizer's view of a spool module definition. The path is copied (*path, to be
 * freed by the caller) and so is the build id (into build_id, 32 bytes), so the result
 * outlives the record. 0 or -ENOMEM. */
int sonde__prof_sym_module_from_spool(const struct sonde_spool_record *r, char **path,
				      uint8_t build_id[32], struct sonde_sym_module *out);

int sonde__prof_write_pprof(const struct sonde_profile *p, int fd, enum sonde_profile_metric m);
int sonde__prof_write_folded(const struct sonde_profile *p, int fd, enum sonde_profile_metric m);
int sonde__prof_write_speedscope(const struct sonde_profile *p, int fd, const char *title,
				 enum sonde_profile_metric m);
int sonde__prof_write_svg(const struct sonde_profile *p, int fd, const char *title,
			  const struct sonde_profile_write_opts *o);

#endif
