/* sonde test framework.
 *
 * A test is a function declared with TEST(name) (or TEST_TIMEOUT(name, seconds)) in any
 * file under tests/unit or tests/integration; it registers itself at start-up. The runner
 * forks every test into its own process group with a timeout, runs several at once (-j),
 * captures their output (shown only when one fails), and ends with "N passed, N failed,
 * N skipped".
 *
 * TEST_EXCLUSIVE(name, seconds) declares a test that needs the machine to itself: the
 * runner runs it with nothing else of the suite beside it. That is for a test that measures
 * loss or throughput, counts samples of a CPU-burning program or asserts a proportion of
 * CPU time, changes machine-wide state (test_sysctl_set, mounts), or uses a fixed path or
 * port. Everything else must hold with other tests running beside it.
 *
 * Assertions print both compared values and stop the test. SKIP(reason) is only for a
 * privilege or facility that is really missing; the reason is printed.
 */
#ifndef SONDE_TEST_H
#define SONDE_TEST_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

typedef void (*test_fn)(void);

void test_register(const char *name, const char *file, test_fn fn, int timeout_s);
void test_register_exclusive(const char *name, const char *file, test_fn fn, int timeout_s);
void test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));
void test_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#define TEST_TIMEOUT(name, seconds)                                                                \
	static void test_##name(void);                                                             \
	__attribute__((constructor)) static void test_register_##name(void)                       \
	{                                                                                          \
		test_register(#name, __FILE__, test_##name, seconds);                              \
	}                                                                                          \
	static void test_##name(void)

#define TEST(name) TEST_TIMEOUT(name, 60)

#define TEST_EXCLUSIVE(name, seconds)                                                              \
	static void test_##name(void);                                                             \
	__attribute__((constructor)) static void test_register_##name(void)                       \
	{                                                                                          \
		test_register_exclusive(#name, __FILE__, test_##name, seconds);                    \
	}                                                                                          \
	static void test_##name(void)

#define FAIL(...) test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP(...) test_skip(__VA_ARGS__)

#define ASSERT(cond)                                                                               \
	do {                                                                                       \
		if (!(cond))                                                                       \
			FAIL("assertion failed: %s", #cond);                                       \
	} while (0)

/* ASSERT_INT(a, op, b): signed comparison, e.g. ASSERT_INT(n, >=, 3). */
#define ASSERT_INT(a, op, b)                                                                       \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		if (!(a_ op b_))                                                                   \
			FAIL("%s %s %s: %lld vs %lld", #a, #op, #b, a_, b_);                       \
	} while (0)

#define ASSERT_UINT(a, op, b)                                                                      \
	do {                                                                                       \
		unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);     \
		if (!(a_ op b_))                                                                   \
			FAIL("%s %s %s: %llu (0x%llx) vs %llu (0x%llx)", #a, #op, #b, a_, a_, b_,  \
			     b_);                                                                  \
	} while (0)

#define ASSERT_DOUBLE_NEAR(a, b, tol)                                                              \
	do {                                                                                       \
		double a_ = (a), b_ = (b), t_ = (tol);                                             \
		if (!(a_ >= b_ - t_ && a_ <= b_ + t_))                                             \
			FAIL("%s = %g, expected %s = %g within %g", #a, a_, #b, b_, t_);           \
	} while (0)

#define ASSERT_STR_EQ(a, b)                                                                        \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                             \
			FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)",             \
			     b_ ? b_ : "(null)");                                                  \
	} while (0)

/* The haystack is printed (truncated) when the needle is missing. */
#define ASSERT_CONTAINS(hay, needle)                                                               \
	do {                                                                                       \
		const char *h_ = (hay), *n_ = (needle);                                            \
		if (!h_ || !strstr(h_, n_))                                                        \
			FAIL("%s does not contain \"%s\"; it is:\n%.4000s", #hay, n_,              \
			     h_ ? h_ : "(null)");                                                  \
	} while (0)

#define ASSERT_NOT_CONTAINS(hay, needle)                                                           \
	do {                                                                                       \
		const char *h_ = (hay), *n_ = (needle);                                            \
		if (h_ && strstr(h_, n_))                                                          \
			FAIL("%s contains \"%s\"; it is:\n%.4000s", #hay, n_, h_);                 \
	} while (0)

#define ASSERT_MEM_EQ(a, b, n)                                                                     \
	do {                                                                                       \
		if (memcmp((a), (b), (n)) != 0)                                                    \
			FAIL("%s and %s differ in their first %zu bytes", #a, #b, (size_t)(n));    \
	} while (0)

/* For calls returning 0/positive or -errno / -SONDE_E_*. Evaluates to the result. */
#define ASSERT_OK(expr)                                                                            \
	({                                                                                         \
		long long r_ = (long long)(expr);                                                  \
		if (r_ < 0)                                                                        \
			FAIL("%s failed: %s (%lld)", #expr, sonde_strerror((int)r_), r_);          \
		r_;                                                                                \
	})

#define ASSERT_ERR(expr, err)                                                                      \
	do {                                                                                       \
		long long r_ = (long long)(expr);                                                  \
		if (r_ != (long long)(err))                                                        \
			FAIL("%s returned %lld (%s), expected %lld (%s)", #expr, r_,               \
			     r_ < 0 ? sonde_strerror((int)r_) : "success", (long long)(err),       \
			     sonde_strerror((int)(err)));                                          \
	} while (0)

#define ASSERT_NOT_NULL(p)                                                                         \
	({                                                                                         \
		__typeof__(p) p_ = (p);                                                            \
		if (!p_)                                                                           \
			FAIL("%s is NULL (errno %d: %s)", #p, errno, strerror(errno));             \
		p_;                                                                                \
	})

#endif
