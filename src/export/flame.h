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
	uint32_t func; /* prof_func id */
	uint32_t first_child, next_sibling;
	uint32_t depth; /* root 0 */
	uint64_t self;	/* weight (samples, or ns) whose innermost frame is this node */
	uint64_t total; /* self plus all descendants */
	uint64_t x;	/* samples left of this node at its depth (flame graph position) */
};

struct flame {
	ARR(struct flame_node) nodes;
	struct idmap index;
	uint32_t *of_node; /* prof node id -> flame node id */
	uint32_t max_depth;
};

/* Builds the tree of p into f (zeroed by the call), weighing on-CPU samples by their count.
 * 0 or -ENOMEM. */
int sonde__flame_build(struct flame *f, const struct sonde_profile *p);
/* The same under metric m (sonde__prof_sample_weight, sonde__prof_offcpu_weight). */
int sonde__flame_build_metric(struct flame *f, const struct sonde_profile *p,
			      enum sonde_profile_metric m);
void sonde__flame_free(struct flame *f);

/* Iterates the tree depth-first in child order, starting after the root: *it must start
 * at 0; returns the next node id, or 0 at the end. */
uint32_t sonde__flame_next(const struct flame *f, uint32_t it);

#endif
