/* Extensible opts structs (base/opts.h): NULL means the defaults, sz 0 is an error, a
 * smaller struct leaves its missing fields at their defaults, a larger one is accepted only
 * when its unknown tail is zero. First the macros, then the public functions that take
 * opts. */
#include <fcntl.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/connector.h>
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/service.h>
#include <sonde/symbolize.h>
#include <sonde/tail.h>

#include "../test.h"
#include "base/opts.h"

struct t_opts {
	size_t sz;
	int a;
	long b;
};

/* A caller built against a newer header: t_opts plus a field this library does not know.
 * Zeroed with memset so that padding is zero too. */
struct t_opts_newer {
	struct t_opts o;
	uint64_t newer;
};

static int t_use(const struct t_opts *opts, long *b)
{
	struct t_opts o = {.b = 7};

	if (!OPTS_VALID(opts, t_opts))
		return -EINVAL;
	OPTS_COPY(&o, opts);
	*b = o.b ? o.b : 7;
	return OPTS_GET(opts, a, -1);
}

TEST(opts_null_means_defaults)
{
	long b = 0;

	ASSERT(OPTS_VALID((const struct t_opts *)NULL, t_opts));
	ASSERT_INT(t_use(NULL, &b), ==, -1);
	ASSERT_INT(b, ==, 7);
}

TEST(opts_sz_zero_or_too_small_is_an_error)
{
	struct t_opts o = {.a = 3};
	long b = 0;

	ASSERT(!OPTS_VALID(&o, t_opts));
	ASSERT_INT(t_use(&o, &b), ==, -EINVAL);
	o.sz = sizeof(size_t) - 1;
	ASSERT_INT(t_use(&o, &b), ==, -EINVAL);
	o.sz = sizeof(size_t);
	ASSERT_INT(t_use(&o, &b), ==, -1); /* only sz: every field at its default */
}

TEST(opts_smaller_struct_leaves_missing_fields_at_defaults)
{
	struct t_opts o = {.sz = offsetof(struct t_opts, b), .a = 3, .b = 99};
	long b = 0;

	ASSERT(OPTS_HAS(&o, a));
	ASSERT(!OPTS_HAS(&o, b));
	ASSERT_INT(OPTS_GET(&o, b, 5), ==, 5);
	ASSERT_INT(t_use(&o, &b), ==, 3);
	ASSERT_INT(b, ==, 7); /* .b = 99 lies past the caller's sz: not read */
}

TEST(opts_larger_struct_needs_a_zero_tail)
{
	struct t_opts_newer n;
	long b = 0;

	memset(&n, 0, sizeof(n));
	n.o.sz = sizeof(n);
	n.o.a = 4;
	n.o.b = 8;
	ASSERT_INT(t_use(&n.o, &b), ==, 4);
	ASSERT_INT(b, ==, 8);
	n.newer = 1;
	ASSERT_INT(t_use(&n.o, &b), ==, -EINVAL);
	n.newer = 1ull << 63; /* the last byte alone */
	ASSERT_INT(t_use(&n.o, &b), ==, -EINVAL);
}

TEST(opts_copy_sets_the_library_size)
{
	struct t_opts dst = {0}, src = {.sz = offsetof(struct t_opts, b), .a = 2};

	OPTS_COPY(&dst, &src);
	ASSERT_UINT(dst.sz, ==, sizeof(dst));
	ASSERT_INT(dst.a, ==, 2);
	memset(&dst, 0, sizeof(dst));
	OPTS_COPY(&dst, (const struct t_opts *)NULL);
	ASSERT_UINT(dst.sz, ==, sizeof(dst));
}

/* ------------------------------------------------------- the public functions */

#define NEWER(type)                                                                                \
	struct {                                                                                   \
		struct type o;                                                                     \
		uint64_t newer;                                                                    \
	}

/* Constructors: NULL and EINVAL for invalid opts. */
#define ASSERT_REFUSED(call)                                                                       \
	do {                                                                                       \
		errno = 0;                                                                         \
		void *p_ = (call);                                                                 \
		ASSERT(p_ == NULL);                                                                \
		ASSERT_INT(errno, ==, EINVAL);                                                     \
	} while (0)

TEST(opts_symbolizer_new_follows_the_rules)
{
	NEWER(sonde_symbolizer_opts) n;
	struct sonde_symbolizer_opts zero = {0};

	sonde_symbolizer__free(ASSERT_NOT_NULL(sonde_symbolizer__new(NULL)));
	ASSERT_REFUSED(sonde_symbolizer__new(&zero));
	memset(&n, 0, sizeof(n));
	n.o.sz = sizeof(n);
	n.o.no_demangle = 1;
	sonde_symbolizer__free(ASSERT_NOT_NULL(sonde_symbolizer__new(&n.o)));
	n.newer = 1;
	ASSERT_REFUSED(sonde_symbolizer__new(&n.o));
}

TEST(opts_trace_config_new_follows_the_rules)
{
	NEWER(sonde_trace_config_opts) n;
	struct sonde_trace_config_opts zero = {.duration_ms = 1000};

	sonde_trace_config__free(ASSERT_NOT_NULL(sonde_trace_config__new(NULL)));
	ASSERT_REFUSED(sonde_trace_config__new(&zero));
	memset(&n, 0, sizeof(n));
	n.o.sz = sizeof(n);
	n.o.duration_ms = 1000;
	sonde_trace_config__free(ASSERT_NOT_NULL(sonde_trace_config__new(&n.o)));
	n.newer = 1;
	ASSERT_REFUSED(sonde_trace_config__new(&n.o));
}

TEST(opts_profile_new_and_write_follow_the_rules)
{
	NEWER(sonde_profile_info) n;
	struct sonde_profile_info zero = {0};
	struct sonde_profile_write_opts wzero = {0};

	/* sz 0 used to mean "the whole struct" here */
	ASSERT_REFUSED(sonde_profile__new(&zero));
	memset(&n, 0, sizeof(n));
	n.o.sz = sizeof(n);
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(&n.o));
	n.newer = 1;
	ASSERT_REFUSED(sonde_profile__new(&n.o));

	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ASSERT_INT(fd, >=, 0);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, NULL));
	ASSERT_ERR(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, &wzero), -EINVAL);
	close(fd);
	sonde_profile__free(p);
}

TEST(opts_profile_from_spool_refuses_bad_opts)
{
	struct sonde_profile_spool_opts zero = {0};

	ASSERT_REFUSED(sonde_profile__from_spool("/dev/null", &zero));
	ASSERT_ERR(sonde_profile__spool_to_perfetto("/dev/null", 1, &zero), -EINVAL);
}

static int discard(void *ctx, const void *buf, size_t len)
{
	return 0;
}

TEST(opts_recorder_and_tail_refuse_bad_opts)
{
	NEWER(sonde_record_opts) n;
	NEWER(sonde_tail_opts) t;
	struct sonde_record_opts zero = {.frequency = 99};
	struct sonde_tail_opts tzero = {0};

	/* sz 0 is refused before any perf_event is opened, so no privilege is needed */
	ASSERT_REFUSED(
		sonde_recorder__attach_writer(getpid(), discard, NULL, SONDE_ATTACH_RUNNING, &zero));
	memset(&n, 0, sizeof(n));
	n.o.sz = sizeof(n);
	n.newer = 1;
	ASSERT_REFUSED(
		sonde_recorder__attach_writer(getpid(), discard, NULL, SONDE_ATTACH_RUNNING, &n.o));

	ASSERT_REFUSED(sonde_tail__open("/dev/null", &tzero));
	memset(&t, 0, sizeof(t));
	t.o.sz = sizeof(t);
	sonde_tail__free(ASSERT_NOT_NULL(sonde_tail__open("/dev/null", &t.o)));
	t.newer = 1;
	ASSERT_REFUSED(sonde_tail__open("/dev/null", &t.o));
	sonde_tail__free(ASSERT_NOT_NULL(sonde_tail__open("/dev/null", NULL)));
}

/* Output structs: sz 0 is an error too; a larger one gets the part the library knows. */
TEST(opts_output_struct_needs_sz)
{
	struct sonde_tail *t = ASSERT_NOT_NULL(sonde_tail__open("/dev/null", NULL));
	struct sonde_tail_batch zero = {0};
	NEWER(sonde_tail_batch) n;

	ASSERT(OPTS_OUT_VALID((struct sonde_tail_batch *)NULL));
	ASSERT_ERR(sonde_tail__poll(t, 0, 0, &zero), -EINVAL);
	ASSERT_OK(sonde_tail__poll(t, 0, 0, NULL));
	memset(&n, 0xa5, sizeof(n));
	n.o.sz = sizeof(n);
	ASSERT_OK(sonde_tail__poll(t, 0, 0, &n.o));
	ASSERT_UINT(n.o.sz, ==, sizeof(n));
	ASSERT_UINT(n.o.n_samples, ==, 0);
	ASSERT_UINT(n.newer, ==, 0xa5a5a5a5a5a5a5a5ull); /* not the library's to write */
	sonde_tail__free(t);
}

TEST(opts_service_and_clients_refuse_bad_opts)
{
	struct sonde_service_opts so = {0};
	struct sonde_consumer_opts co = {0};
	struct sonde_producer_opts po = {.name = "opts-test"};
	struct sonde_connector_opts xo = {0};

	/* all refused before any socket is made or reached */
	ASSERT_REFUSED(sonde_service__new(&so));
	ASSERT_REFUSED(sonde_consumer__new(&co));
	ASSERT_REFUSED(sonde_producer__new(&po));
	ASSERT_REFUSED(sonde_connector__new(&xo));

	NEWER(sonde_service_opts) ns;
	memset(&ns, 0, sizeof(ns));
	ns.o.sz = sizeof(ns);
	ns.newer = 1;
	ASSERT_REFUSED(sonde_service__new(&ns.o));
}
