/* What the whole-file reader (sonde_spool, spool_reader.h) offers the accounting beyond
 * the public API. Internal. */
#ifndef SONDE_SPOOL_RUNS_H
#define SONDE_SPOOL_RUNS_H

#include <stdint.h>

#include <sonde/spool_reader.h>

/* The index, among tid's stays (sonde_spool__get_tid_run), of the first that may end after
 * t: every stay before it ended by t. Stays are in the order of their starts, and mostly
 * of their ends too, but for a stay ended by an inferred switch, which can outlast the
 * ones after it: the search is by the latest end so far. */
uint64_t sonde__spool_tid_runs_ended_by(const struct sonde_spool *s, uint32_t tid, uint64_t t);

#endif
