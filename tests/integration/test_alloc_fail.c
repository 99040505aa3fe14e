/* Allocation failure: the Nth allocation fails (tests/failalloc.c), for N = 1, 2, ...,
 * through each of the library's main operations. Each run must return -ENOMEM (or NULL
 * with errno ENOMEM) and free what it had allocated: the sanitizer build's LeakSanitizer
 * checks the latter when each forked test exits. Only the thread under test is counted. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <sonde/alloc.h>
#include <sonde/client.h>
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/service.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

#include "base/buf.h"
#include "../failalloc.h"
#include "../test.h"
#include "../unit/export_fixture.h"
#include "../unit/spool_fixture.h"
#include "../util.h"
#include "sym_util.h"

/* A NULL result's errno as the -errno the walk expects. */
static int null_err(const void *p)
{
	return p ? 0 : -errno;
}

/* A NULL function is refused and leaves the allocator as it was. */
TEST(alloc_replace_refuses_null)
{
	ASSERT_INT(sonde_allocator__replace(NULL, realloc, calloc, free), ==, -EINVAL);
	ASSERT_INT(sonde_allocator__replace(malloc, NULL, calloc, free), ==, -EINVAL);
	ASSERT_INT(sonde_allocator__replace(malloc, realloc, NULL, free), ==, -EINVAL);
	ASSERT_INT(sonde_allocator__replace(malloc, realloc, calloc, NULL), ==, -EINVAL);
	failalloc_install();
	ASSERT_INT(sonde_allocator__replace(malloc, realloc, NULL, free), ==, -EINVAL);
	failalloc_arm(1);
	struct sonde_trace_config *cfg = sonde_trace_config__new(NULL);
	ASSERT(failalloc_disarm());
	ASSERT(cfg == NULL);
	ASSERT_INT(errno, ==, ENOMEM);
	ASSERT_OK(sonde_allocator__replace(malloc, realloc, calloc, free));
}

/* ---- spool read ---- */

static int spool_read(void *ctx)
{
	const struct buf *b = ctx;
	struct sonde_spool_info info;
	struct sonde_spool_sample smp;
	uint32_t frames[16];
	uint64_t off;
	struct sonde_spool *s = sonde_spool__open_mem(b->data, b->len, &off);

	if (!s)
		return -errno;
	sonde_spool__get_info(s, &info);
	for (uint64_t i = 0; i < info.samples; i++) {
		if (sonde_spool__get_sample(s, i, &smp) < 0 ||
		    sonde_spool__get_stack(s, smp.stack, frames, 16) < 0) {
			sonde_spool__close(s);
			return -EIO;
		}
	}
	sonde_spool__close(s);
	return 0;
}

/* Every allocation of opening and walking a small spool (a few hundred). */
TEST(alloc_fail_spool_read)
{
	struct buf b = BUF_INIT;

	spool_fixture_small(&b, 200, 1);
	failalloc_install();
	ASSERT_INT(failalloc_walk(spool_read, &b, ULONG_MAX, 1), >, 0);
	sonde__buf_free(&b);
}

/* ---- export ---- */

struct export_ctx {
	struct sonde_profile *p;
	const char *spool;
	int fd;
};

static int export_formats(void *ctx)
{
	struct export_ctx *e = ctx;
	static const enum sonde_profile_format fmts[] = {
		SONDE_PROFILE_PPROF, SONDE_PROFILE_FOLDED, SONDE_PROFILE_SPEEDSCOPE,
		SONDE_PROFILE_SVG};
	int err;

	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++)
		if ((err = sonde_profile__write(e->p, fmts[i], e->fd, NULL)) < 0)
			return err;
	return 0;
}

static int export_perfetto(void *ctx)
{
	struct export_ctx *e = ctx;
	struct sonde_profile_spool_opts o = {.sz = sizeof(o), .no_symbolize = 1};

	return sonde_profile__spool_to_perfetto(e->spool, e->fd, &o);
}

static int export_from_spool(void *ctx)
{
	struct export_ctx *e = ctx;
	struct sonde_profile_spool_opts o = {.sz = sizeof(o), .no_symbolize = 1};
	struct sonde_profile *p = sonde_profile__from_spool(e->spool, &o);
	int err = null_err(p);

	sonde_profile__free(p);
	return err;
}

/* Every allocation of writing the export fixture in each format, of building a profile
 * from a spool, and of converting a spool to a Perfetto trace. */
TEST(alloc_fail_export)
{
	struct buf b = BUF_INIT;
	struct export_ctx e = {.p = export_fixture(), .spool = test_path("small.spool")};

	ASSERT(e.p);
	spool_fixture_small(&b, 200, 1);
	test_write_file(e.spool, b.data, b.len);
	e.fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ASSERT_INT(e.fd, >=, 0);
	failalloc_install();
	ASSERT_INT(failalloc_walk(export_formats, &e, ULONG_MAX, 1), >, 0);
	ASSERT_INT(failalloc_walk(export_from_spool, &e, ULONG_MAX, 1), >, 0);
	ASSERT_INT(failalloc_walk(export_perfetto, &e, ULONG_MAX, 1), >, 0);
	close(e.fd);
	sonde_profile__free(e.p);
	sonde__buf_free(&b);
}

/* ---- symbolization ---- */

struct sym_ctx {
	struct sonde_sym_module m;
	uint64_t off;
};

static int symbolize(void *ctx)
{
	struct sym_ctx *c = ctx;
	struct sonde_symbolizer_opts o = {
		.sz = sizeof(o), .debuginfod_urls = "", .buildid_cache_dir = "",
		.debug_dirs = test_tmpdir()};
	struct sonde_sym_frame out[8];
	struct sonde_symbolizer *s = sonde_symbolizer__new(&o);
	int n;

	if (!s)
		return -errno;
	/* An address the symbolizer cannot resolve for lack of memory still yields its
	 * "module+0xoffset" frame: that is a result, not an error. */
	n = sonde_symbolizer__symbolize(s, &c->m, c->off, out, 8);
	if (n > 0)
		n = sonde_symbolizer__symbolize_raw(s, 1, 0x1234, out, 8);
	sonde_symbolizer__free(s);
	return n < 0 ? n : 0;
}

/* Every allocation of a symbolizer resolving a function with inlined frames and line
 * numbers from DWARF (the ELF image, its symbol table, the line tables, the inline
 * tree). */
TEST(alloc_fail_symbolize)
{
	const char *path = test_prog("sym_inline");
	struct sym_ctx c = {.m = sym_test_module(path)};

	c.off = sym_test_vaddr_to_off(path, sym_test_nm(path, "main", 0));
	failalloc_install();
	ASSERT_INT(failalloc_walk(symbolize, &c, ULONG_MAX, 1), >, 0);
}

/* ---- recorder ---- */

/* The samples the last record_cycle wrote. */
static uint64_t cycle_samples;

static int record_cycle(void *ctx)
{
	pid_t pid = *(pid_t *)ctx;
	struct sonde_record_opts o = {.sz = sizeof(o), .frequency = 999, .no_buildid_cache = 1};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct buf out = BUF_INIT;
	int err = 0;
	struct sonde_recorder *r = sonde_recorder__attach_writer(pid, spool_fixture_write, &out,
								 SONDE_ATTACH_RUNNING, &o);

	if (!r)
		return -errno;
	/* polled until a sample was read (an event; 3 s at most), or the cycle ends: a
	 * cycle without samples reads none of the target's images and makes a fraction of
	 * the allocations, which ended the walk early on a loaded machine */
	for (int i = 0; err >= 0 && i < 300; i++) {
		err = sonde_recorder__poll(r, 10, NULL);
		if (err >= 0 && sonde_recorder__summary(r, &sum) == 0 && sum.samples && i >= 2)
			break;
	}
	int ferr = sonde_recorder__finish(r, &sum);
	cycle_samples = ferr < 0 ? 0 : sum.samples;
	sonde_recorder__free(r);
	sonde__buf_free(&out);
	return err < 0 ? err : ferr < 0 ? ferr : 0;
}

/* A recorder attaching to a running process, polling its rings until it read a sample and
 * finishing the spool. One cycle makes about 70 allocations (3,800 while the CFI builder
 * allocated an interpreter per FDE) and takes tens of milliseconds: every N up to
 * RECORD_ALL is covered, then every RECORD_STRIDE-th up to the end. The runs are shared out among
 * RECORD_SHARDS forked processes (run i by process i % RECORD_SHARDS, each walking to the end on
 * its own), which overlap their waits for samples; each exits through exit(), so the sanitizer
 * build's leak check runs in each. */
enum { RECORD_ALL = 400, RECORD_STRIDE = 7, RECORD_SHARDS = 4 };

/* Process k's share of the walk; exits 0 when every run of it failed with ENOMEM (or
 * tolerated the failure) and the first run its failure did not reach succeeded. */
static void record_walk_shard(pid_t target, unsigned k)
{
	unsigned long i = 0, enomem = 0;

	failalloc_install();
	for (unsigned long n = 1;; n = n < RECORD_ALL ? n + 1 : n + RECORD_STRIDE, i++) {
		if (i % RECORD_SHARDS != k)
			continue;
		failalloc_arm(n);
		int rc = record_cycle(&target);
		unsigned long made = failalloc_count();
		bool failed = failalloc_disarm();
		if (!failed) {
			if (rc != 0)
				FAIL("run with no failed allocation (%lu made): %s", made,
				     sonde_strerror(rc));
			fprintf(stderr,
				"shard %u: %lu runs failed with ENOMEM, the last run made %lu\n", k,
				enomem, made);
			exit(enomem > 0 ? 0 : 1);
		}
		if (rc != 0 && rc != -ENOMEM)
			FAIL("allocation %lu failed: %s, not ENOMEM", n, sonde_strerror(rc));
		if (rc == -ENOMEM)
			enomem++;
	}
}

TEST_TIMEOUT(alloc_fail_record, 240)
{
	test_require_perf();
	const char *argv[] = {test_prog("split"), "600", NULL};
	pid_t pid = test_spawn(argv), shard[RECORD_SHARDS];
	usleep(100 * 1000);
	failalloc_install();
	failalloc_arm(ULONG_MAX);
	int rc = record_cycle(&pid);
	unsigned long whole = failalloc_count();
	fprintf(stderr, "one cycle: %lu allocations\n", whole);
	failalloc_disarm();
	ASSERT_OK(rc);
	/* a sample was written: its stack was unwound, the target's images read and their
	 * CFI looked up, so the walk fails those allocations too */
	ASSERT_UINT(cycle_samples, >, 0);
	ASSERT(whole > 0);
	fflush(NULL);
	for (unsigned k = 0; k < RECORD_SHARDS; k++) {
		shard[k] = fork();
		ASSERT(shard[k] >= 0);
		if (shard[k] == 0)
			record_walk_shard(pid, k);
	}
	for (unsigned k = 0; k < RECORD_SHARDS; k++)
		ASSERT_INT(test_wait(shard[k], 230), ==, 0);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
}

/* ---- service ---- */

static struct sonde_service_opts svc_opts(void)
{
	struct sonde_service_opts o = {.sz = sizeof(o)};

	o.producer_socket = test_path("p.sock");
	o.consumer_socket = test_path("c.sock");
	o.connector_socket = "none";
	return o;
}

static int service_new(void *ctx)
{
	struct sonde_service_opts o = svc_opts();
	struct sonde_service *s = sonde_service__new(&o);
	int err = null_err(s);

	sonde_service__free(s);
	return err;
}

/* Every allocation of creating a service (binding its sockets) and freeing it. */
TEST(alloc_fail_service_new)
{
	failalloc_install();
	ASSERT_INT(failalloc_walk(service_new, NULL, ULONG_MAX, 1), >, 0);
}

/* The service runs on a thread of its own, armed from the test's thread, so that only its
 * allocations are counted and the consumer it serves allocates freely. */
struct svc_thread {
	struct sonde_service *s;
	atomic_ulong arm;     /* set by the test: arm the service thread for this N */
	atomic_int disarm;    /* set by the test: disarm, then publish reached */
	atomic_int reached;   /* the armed allocation failed */
	atomic_int stop;
	atomic_int bad_rc;    /* a process() error other than ENOMEM */
};

static void *svc_run(void *arg)
{
	struct svc_thread *t = arg;

	while (!atomic_load(&t->stop)) {
		unsigned long n = atomic_exchange(&t->arm, 0);

		if (n)
			failalloc_arm(n);
		if (atomic_load(&t->disarm)) {
			atomic_store(&t->reached, failalloc_disarm());
			atomic_store(&t->disarm, 0);
		}
		struct pollfd pfd = {.fd = sonde_service__fd(t->s), .events = POLLIN};
		poll(&pfd, 1, 2);
		int rc = sonde_service__process(t->s);
		if (rc < 0 && rc != -ENOMEM)
			atomic_store(&t->bad_rc, rc);
	}
	return NULL;
}

/* One consumer's session: connect, query the state, enable a session with one buffer,
 * disable it, read it. Returns 0 when every step succeeded. */
static int consumer_session(const char *sock, int timeout_ms)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = sock,
					 .timeout_ms = timeout_ms};
	struct sonde_trace_config *cfg = sonde_trace_config__new(NULL);
	struct sonde_service_state *st = NULL;
	struct sonde_consumer *c = NULL;
	uint8_t *enc = NULL;
	size_t len;
	int err = -ENOMEM;

	if (!cfg || sonde_trace_config__add_buffer(cfg, 64, SONDE_FILL_RING_BUFFER) < 0 ||
	    sonde_trace_config__encode(cfg, &enc, &len) < 0)
		goto out;
	c = sonde_consumer__new(&co);
	if (!c) {
		err = -errno;
		goto out;
	}
	if ((err = sonde_consumer__query_service_state_sync(c, &st, timeout_ms)) < 0 ||
	    (err = sonde_consumer__enable_tracing(c, enc, len, -1)) < 0 ||
	    (err = sonde_consumer__disable_tracing(c)) < 0 ||
	    (err = sonde_consumer__wait_disabled(c, timeout_ms, NULL, 0)) < 0)
		goto out;
	err = sonde_consumer__read_buffers_sync(c, timeout_ms);
out:
	sonde_service_state__free(st);
	sonde_consumer__free(c);
	free(enc);
	sonde_trace_config__free(cfg);
	return err;
}

static void svc_wait_zero(atomic_int *v)
{
	while (atomic_load(v))
		usleep(200);
}

/* Every allocation the service makes serving one consumer's session, N = 1, 2, ... until
 * a session makes no more: each failure ends at most that consumer's connection or
 * request (process() returns 0 or -ENOMEM), and after each the next consumer, served
 * with no failure, gets a whole session. A consumer whose request the failure dropped
 * waits for its short timeout, which bounds the run time. */
TEST_TIMEOUT(alloc_fail_service_session, 240)
{
	struct sonde_service_opts o = svc_opts();
	struct svc_thread t = {0};
	pthread_t th;
	unsigned long n;

	failalloc_install();
	t.s = sonde_service__new(&o);
	ASSERT(t.s);
	ASSERT_INT(pthread_create(&th, NULL, svc_run, &t), ==, 0);
	for (n = 1;; n++) {
		atomic_store(&t.arm, n);
		while (atomic_load(&t.arm))
			usleep(200);
		int err = consumer_session(o.consumer_socket, 300);
		atomic_store(&t.disarm, 1);
		svc_wait_zero(&t.disarm);
		if (!atomic_load(&t.reached)) {
			ASSERT_OK(err);
			break;
		}
		ASSERT_OK(consumer_session(o.consumer_socket, 5000));
	}
	ASSERT_INT(n, >, 1);
	atomic_store(&t.stop, 1);
	pthread_join(th, NULL);
	ASSERT_INT(atomic_load(&t.bad_rc), ==, 0);
	sonde_service__free(t.s);
}
