#include <errno.h>
#include <stdlib.h>

#include <sonde/alloc.h>

#include "failalloc.h"
#include "test.h"

/* Per thread, so that a test's client thread, the runner's own work and a library thread
 * allocate freely while the thread under test is counted. */
static __thread unsigned long fail_at, count;
static __thread bool reached;

static bool fail_now(void)
{
	if (!fail_at)
		return false;
	if (++count != fail_at)
		return false;
	reached = true;
	return true;
}

static void *fa_malloc(size_t n)
{
	return fail_now() ? NULL : malloc(n);
}

static void *fa_calloc(size_t c, size_t n)
{
	return fail_now() ? NULL : calloc(c, n);
}

static void *fa_realloc(void *p, size_t n)
{
	return n && fail_now() ? NULL : realloc(p, n);
}

void failalloc_install(void)
{
	ASSERT_OK(sonde_allocator__replace(fa_malloc, fa_realloc, fa_calloc, free));
}

void failalloc_arm(unsigned long nth)
{
	fail_at = nth;
	count = 0;
	reached = false;
}

bool failalloc_disarm(void)
{
	fail_at = 0;
	return reached;
}

unsigned long failalloc_count(void)
{
	return count;
}

unsigned long failalloc_walk(int (*op)(void *ctx), void *ctx, unsigned long all,
			     unsigned long stride)
{
	unsigned long enomem = 0;

	for (unsigned long n = 1;; n = n < all ? n + 1 : n + stride) {
		failalloc_arm(n);
		int rc = op(ctx);
		unsigned long made = failalloc_count();
		bool failed = failalloc_disarm();

		if (!failed) {
			fprintf(stderr, "%lu allocations in a whole run\n", made);
			if (rc != 0)
				FAIL("run with no failed allocation (%lu made): %s", made,
				     sonde_strerror(rc));
			break;
		}
		if (rc != 0 && rc != -ENOMEM)
			FAIL("allocation %lu failed: %s, not ENOMEM", n, sonde_strerror(rc));
		if (rc == -ENOMEM)
			enomem++;
	}
	fprintf(stderr, "%lu runs failed with ENOMEM\n", enomem);
	return enomem;
}
