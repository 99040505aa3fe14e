/* sonde top's model: the samples of a sliding time window, aggregated by function.
 *
 * Samples enter in time order (as the tail hands them out) and leave when they are older
 * than the window. Counts are kept per stack node and thread, so a refresh costs the
 * number of distinct (stack, thread) pairs in the window, not the number of samples; the
 * library's view (include/sonde/view.h) aggregates, sorts and cuts them. Functions are
 * the outermost (non-inlined) symbol of each frame, named once per frame and cached until
 * the tail reports the frame's process invalidated.
 */
#ifndef SONDE_TOP_H
#define SONDE_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/tail.h>
#include <sonde/view.h>

struct top_agg;

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
/* The functions of the window (by_process: a row per function and process, labelled
 * "comm-pid"), sorted by `sort`, at most max (0: all): *rows (owned by the aggregate, valid
 * until the next call) and *n of them, *n_all before the cut. 0 or -errno. */
int top_agg_rows(struct top_agg *a, enum sonde_view_sort sort, bool by_process, size_t max,
		 const struct sonde_view_row **rows, size_t *n, size_t *n_all);

/* The FUNCTION column's width. */
enum { NAME_COLUMN = 40 };

/* name as the FUNCTION column shows it: template arguments and parameter lists elided
 * ("std::map<...>::find(...)"; operator< and "(anonymous namespace)" kept), then cut to
 * cap - 1 characters ending in "..." when still longer. Returns out. */
const char *top_short_name(const char *name, char *out, size_t cap);

#endif
