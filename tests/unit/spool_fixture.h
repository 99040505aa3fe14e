/* Test helper: small spools written by the real writer, in memory or on disk. */
#ifndef SONDE_TEST_SPOOL_FIXTURE_H
#define SONDE_TEST_SPOOL_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/spool.h>

#include "base/buf.h"

/* A write function collecting into a struct buf (ctx). */
int spool_fixture_write(void *ctx, const void *p, size_t n);

/* A small but complete recording into out: two processes (one exec'd, retiring its first
 * modules), three threads, a raw-address frame, truncated and kernel samples, empty
 * stacks, n_samples samples in all. finish = 0 leaves out the END record. */
void spool_fixture_small(struct buf *out, int n_samples, int finish);

#endif
