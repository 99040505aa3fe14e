/* Merges records from several perf rings into timestamp order. Internal.
 *
 * Each ring is (nearly) in time order on its own, but rings are drained one after the
 * other, so records are queued here and released in order once no ring can still produce
 * an older one: perf's "finished round" rule. The caller pushes every record of a drain
 * pass, then pops everything up to the pass's limit (see sonde__perf_sorter_limit).
 *
 * Records are copied on push. Entries are recycled, so once the queue has reached its
 * working size a push allocates nothing (unless a record is larger than any seen before).
 */
#ifndef SONDE_PERF_SORTER_H
#define SONDE_PERF_SORTER_H

#include <stddef.h>
#include <stdint.h>

struct perf_sorter;

/* NULL and errno on failure. */
struct perf_sorter *sonde__perf_sorter_new(void);
void sonde__perf_sorter_free(struct perf_sorter *s);

/* Queues a copy of rec. Records with equal times keep their push order. 0 or -ENOMEM. */
int sonde__perf_sorter_push(struct perf_sorter *s, uint64_t time, const void *rec, size_t len);
/* Pops the oldest record if its time is <= limit (UINT64_MAX pops everything): returns 1 and
 * sets *rec, *len, *time (valid until the next push or pop), or 0. */
int sonde__perf_sorter_pop(struct perf_sorter *s, uint64_t limit, const void **rec, size_t *len,
		    uint64_t *time);
size_t sonde__perf_sorter_count(const struct perf_sorter *s);
/* Bytes held by queued records (their payloads). */
size_t sonde__perf_sorter_bytes(const struct perf_sorter *s);

/* The release limit for a drain pass over n rings: latest[i] is the newest timestamp read
 * from ring i so far (0 if none), floor a time before which no ring can still publish a
 * record (the clock read before the pass, minus a small slack). A ring that has been idle
 * is represented by the floor, so an idle CPU does not hold everything back. */
uint64_t sonde__perf_sorter_limit(const uint64_t *latest, size_t n, uint64_t floor);

#endif
