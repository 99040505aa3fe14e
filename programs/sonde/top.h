/* sonde top's model: the samples of a sliding time window, aggregated by function.
 *
 * Samples enter in time order (as the tail hands them out) and leave when they are older
 * than the window. Counts are kept per stack node, so a refresh costs the number of
 * distinct stacks in the window, not the number of samples. Functions are the outermost
 * (non-inlined) symbol of each frame, named once per frame and cached until the tail
 * reports the frame's process invalidated.
 */
#ifndef SONDE_TOP_H
#define SONDE_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/tail.h>

struct top_agg;

struct top_row {
	const char *name;   /* owned by the aggregate, valid until the next top_agg_rows */
	const char *module; /* basename of the module, or "" */
	uint64_t self;	    /* samples whose innermost frame is in this function */
	uint64_t total;	    /* samples with this function anywhere on the stack */
};

/* pid/tid filters: 0 for none. NULL and errno. The tail is borrowed. */
struct top_agg *top_agg_new(struct sonde_tail *t, uint64_t window_ns, uint32_t pid, uint32_t tid);
void top_agg_free(struct top_agg *a);
/* Adds the batch's samples that pass the filters; drops names cached for invalidated
 * processes. 0 or -errno. */
int top_agg_add(struct top_agg *a, const struct sonde_tail_batch *b);
/* Removes samples older than now_ns - window. */
void top_agg_expire(struct top_agg *a, uint64_t now_ns);
/* Samples in the window. */
uint64_t top_agg_samples(const struct top_agg *a);
/* Time of the newest sample added (0: none). */
uint64_t top_agg_last_time(const struct top_agg *a);
/* The functions of the window, sorted by self (by_total: by total) then name; *rows
 * is owned by the aggregate. Returns the number of rows or -errno. */
int top_agg_rows(struct top_agg *a, bool by_total, const struct top_row **rows);

/* The FUNCTION column's width. */
enum { NAME_COLUMN = 40 };

/* name as the FUNCTION column shows it: template arguments and parameter lists elided
 * ("std::map<...>::find(...)"; operator< and "(anonymous namespace)" kept), then cut to
 * cap - 1 characters ending in "..." when still longer. Returns out. */
const char *top_short_name(const char *name, char *out, size_t cap);

#endif
