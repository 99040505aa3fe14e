/* A failing allocator for libsonde (sonde_allocator__replace): counts the allocations of
 * the threads that armed it and fails the Nth one, so a test can walk every allocation of
 * an operation, N = 1, 2, ..., until a run makes no more allocations than N - 1. */
#ifndef SONDE_TEST_FAILALLOC_H
#define SONDE_TEST_FAILALLOC_H

#include <stdbool.h>

/* Installs the counting allocator (libc's underneath), disarmed. */
void failalloc_install(void);
/* Arms the calling thread: its nth allocation from now fails (malloc, calloc, realloc of
 * a non-zero size); later ones succeed. Allocations of other threads are not counted. */
void failalloc_arm(unsigned long nth);
/* Disarms the calling thread; returns whether the armed allocation was reached (and
 * failed). */
bool failalloc_disarm(void);
/* Allocations the calling thread made since it was armed. */
unsigned long failalloc_count(void);

/* The loop every allocation-failure test runs: calls op(ctx) with the Nth allocation
 * failing for N = 1, 2, ... up to all of them if there are at most `all` (then stops at
 * the first run the failure did not reach, which must return 0), else every N up to
 * `all` and then every stride-th. op returns 0 or a negative errno; a failed run must
 * return -ENOMEM (or 0 where the failure is tolerated by design). Returns how many runs
 * failed with -ENOMEM. */
unsigned long failalloc_walk(int (*op)(void *ctx), void *ctx, unsigned long all,
			     unsigned long stride);

#endif
