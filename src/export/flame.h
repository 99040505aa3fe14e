/* The flame tree: the profile's stacks merged by function (rather than by address), with
 * inlined frames expanded, as folded stacks, speedscope and flame graphs show them.
 * Internal to libsonde.
 *
 * Node 0 is the root (all samples). Children are linked in name order, so every view
 * built from the tree is deterministic. A node's parent has a smaller id.
 */
#ifndef SONDE_EXPORT_FLAME_H
#define SONDE_EXPORT_FLAME_H

#include "export/profile.h"

struct flame_node {
	uint32_t parent;
	uint32_t func; /* tab_func id */
	uint32_t first_child, next_sibling;
	uint32_t depth; /* root 0 */
	uint64_t self;	/* weight (samples, or ns) whose innermost frame is this node */
	uint64_t total; /* self plus all descendants */
	uint64_t x;	/* samples left of this node at its depth (flame graph position) */
};

/* The func of the node that holds the idle task's and the kernel threads' stacks. */
#define FLAME_IDLE_FUNC UINT32_MAX

struct flame {
	ARR(struct flame_node) nodes;
	struct idmap index;
	uint32_t *of_node; /* prof node id -> flame node id */
	uint32_t max_depth;
	uint32_t weighed_depth; /* of the nodes that weigh something */
	uint32_t idle;	    /* the idle group's node (FLAME_IDLE_GROUP), 0: none */
	uint64_t hidden;    /* weight left out (FLAME_IDLE_HIDE) */
	uint32_t processes; /* how many processes weigh something (thread 0 is none) */
};

/* What becomes of the idle task's and the kernel threads' stacks. A kernel thread is a
 * thread of a process that has no module of its own and none of whose stacks has a user
 * frame; the idle task is pid 0. */
enum flame_idle {
	FLAME_IDLE_KEEP = 0, /* where they are, as any thread's */
	FLAME_IDLE_GROUP,    /* under one [idle and kernel threads] node below the root */
	FLAME_IDLE_HIDE,     /* left out; their weight is in flame.hidden */
};

struct flame_opts {
	enum sonde_profile_metric metric;
	enum flame_idle idle;
	/* the root's children (and the idle group's) by weight, heaviest first, the idle group
	 * last; else by name as every other node's */
	bool heaviest_first;
	/* leave out the profile's root frames (sonde_profile_spool_opts.roots), hanging their
	 * stacks under the root as without roots */
	bool unroot;
};

/* Builds the tree of p into f (zeroed by the call), weighing on-CPU samples by their count.
 * 0 or -ENOMEM. */
int sonde__flame_build(struct flame *f, const struct sonde_profile *p);
/* The same under metric m (sonde__prof_sample_weight, sonde__prof_offcpu_weight). */
int sonde__flame_build_metric(struct flame *f, const struct sonde_profile *p,
			      enum sonde_profile_metric m);
/* The same with every option. */
int sonde__flame_build_opts(struct flame *f, const struct sonde_profile *p,
			    const struct flame_opts *o);
void sonde__flame_free(struct flame *f);
/* How many processes have weight under metric m (samples of thread 0 count for none). */
uint32_t sonde__flame_count_processes(const struct sonde_profile *p, enum sonde_profile_metric m);
/* The name a node shows: "all" for the root, the idle group's, else its function's. */
const char *sonde__flame_name(const struct flame *f, const struct sonde_profile *p, uint32_t id);

/* Iterates the tree depth-first in child order, starting after the root: *it must start
 * at 0; returns the next node id, or 0 at the end. */
uint32_t sonde__flame_next(const struct flame *f, uint32_t it);

/* ---- The flame graph's SVG geometry (svg.c), shared by every flame graph the project
 * draws (the differential one of programs/sonde/flamediff.c too), since the embedded
 * script expects it: frames 16 px tall across 1200 px, the root at the bottom (flame) or
 * at the top under the title (icicle, inverted). */
enum {
	FLAME_SVG_WIDTH = 1200,
	FLAME_SVG_XPAD = 10,
	FLAME_SVG_FRAME_H = 16,
	FLAME_SVG_TOP = 48, /* title and buttons */
	FLAME_SVG_BOTTOM = 34,
	FLAME_SVG_FONT = 12,
};

struct out;
struct flame_svg {
	struct out *o;
	double total;	 /* the weight the width spans */
	unsigned height; /* sonde__flame_svg_height */
	bool inverted;	 /* root at the top */
};

/* The image's height for frames up to max_depth (root 0). */
unsigned sonde__flame_svg_height(uint32_t max_depth);
/* The document up to the frames: style, script, title, subtitle (plain text, escaped
 * here), buttons, then opens the frames' group. */
void sonde__flame_svg_begin(const struct flame_svg *s, const char *title, const char *subtitle);
/* One frame at depth (0: the root, id "root"), x and w in weight: its tooltip is name
 * followed by tip. Frames narrower than 0.1 px are left out (as flamegraph.pl does);
 * returns whether it was drawn. */
bool sonde__flame_svg_frame(const struct flame_svg *s, const char *name, const char *tip, double x, double w, uint32_t depth, const char *fill);
/* Closes the frames' group and the document. */
void sonde__flame_svg_end(const struct flame_svg *s);

#endif
