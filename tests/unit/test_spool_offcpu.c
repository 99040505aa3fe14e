/* Off-CPU records of the spool (v2.1): exact bytes, the decoder's checks, the whole-file
 * reader, a 2.0 file whose 0x40 record stays an optional one, and the profile model's
 * metrics built from such a spool. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <sonde/alloc.h>
#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/spool.h>
#include <sonde/spool_reader.h>
#include <sonde/tail.h>

#include "base/buf.h"
#include "base/pb.h"
#include "spool/format.h"
#include "../test.h"
#include "../util.h"

static int sink_write(void *ctx, const void *p, size_t n)
{
	struct buf *b = ctx;

	sonde__buf_append(b, p, n);
	return buf_error(b);
}

static const struct sonde_spool_header hdr = {1, 2, 1000000};

/* A thread, a module, one sample and two off-CPU intervals (one open at the end, one
 * with its waker), a short-interval count, the end. */
static void write_offcpu_spool(struct buf *b)
{
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, b, &hdr));
	struct sonde_spool_module_def m = {.pid = 10,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x1000,
					   .end = 0x2000,
					   .path = "/x"};
	const struct sonde_spool_frame frames[] = {{1, 0x10}, {1, 0x20}};
	uint32_t thread, mod;

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &thread));
	ASSERT_OK(sonde_spool_writer__add_module(w, 6, &m, &mod));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, 100, thread, 0, frames, 2, 0));
	struct sonde_spool_offcpu iv = {.switch_out_ns = 200,
					.switch_in_ns = 5200,
					.wakeup_ns = 5000,
					.thread = thread,
					.cpu = 1,
					.state = SONDE_OFFCPU_SLEEPING,
					.waker_tid = 12};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 2));
	iv = (struct sonde_spool_offcpu){.switch_out_ns = 150,
					 .switch_in_ns = 3150,
					 .thread = thread,
					 .cpu = SONDE_SPOOL_CPU_NONE,
					 .state = SONDE_OFFCPU_RUNNABLE,
					 .flags = SONDE_OFFCPU_OPEN};
	/* intervals end in any order relative to samples: an older one after a newer one */
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 1));
	struct sonde_spool_offcpu_short sh = {thread, 1000000, 7, 3500};
	ASSERT_OK(sonde_spool_writer__add_offcpu_short(w, &sh));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
}

TEST(spool_offcpu_exact_bytes)
{
	struct buf b = BUF_INIT;

	write_offcpu_spool(&b);
	static const uint8_t expect[] = {
		0x89, 'S', 'O', 'N', 'D', 'E', '\r', '\n', 2, 1, /* version 2.1 */
		5, 1, 2, 0xc0, 0x84, 0x3d,			 /* header, period 1 ms */
		0x04, 6, 5, 10, 11, 2, 'a', 'b',		 /* thread 1 */
		0x01, 14, 6, 10, 1, 0x80, 0x20, 0x80, 0x20, 0, 0, 0, 0, 2, '/', 'x', 0x02, 2, 1,
		0x20, 0x03, 2, 0, 1,		 /* frame 1, node 1 */
		0x02, 2, 1, 0x10, 0x03, 2, 1, 2, /* frame 2, node 2 */
		0x88, 100, 1, 1, 2,		 /* sample on CPU 0 */
		/* OFFCPU: out 200, 5000 long, thread 1, CPU 1 (+1), S, no flags, waker 12,
		 * woken 4800 after the switch-out (+1), node 2 */
		0x40, 12, 0xc8, 0x01, 0x88, 0x27, 1, 2, 1, 0, 12, 0xc1, 0x25, 2,
		/* out 150, 3000 long, CPU unknown, R, open; frame 2 alone is a new path */
		0x03, 2, 0, 2, 0x40, 11, 0x96, 0x01, 0xb8, 0x17, 1, 0, 0, 4, 0, 0, 3, 0x41, 7, 1,
		0xc0, 0x84, 0x3d, 7, 0xac, 0x1b, /* OFFCPU_SHORT */
		0x06, 1, 1,			 /* end: 1 sample */
	};
	ASSERT_UINT(b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(b.data, expect, sizeof(expect));
	sonde__buf_free(&b);
}

TEST(spool_offcpu_reader_keeps_intervals)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_offcpu o;
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_info info;
	uint32_t frames[4];

	write_offcpu_spool(&b);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	sonde_spool__get_info(s, &info);
	ASSERT_UINT(info.version_minor, ==, 1);
	ASSERT_UINT(info.samples, ==, 1);
	ASSERT(info.complete);
	ASSERT_UINT(sonde_spool__offcpu_count(s), ==, 2);
	ASSERT_OK(sonde_spool__get_offcpu(s, 0, &o));
	ASSERT_UINT(o.switch_out_ns, ==, 200);
	ASSERT_UINT(o.switch_in_ns, ==, 5200);
	ASSERT_UINT(o.wakeup_ns, ==, 5000);
	ASSERT_UINT(o.cpu, ==, 1);
	ASSERT_UINT(o.state, ==, SONDE_OFFCPU_SLEEPING);
	ASSERT_UINT(o.waker_tid, ==, 12);
	ASSERT_INT(sonde_spool__get_stack(s, o.stack, frames, 4), ==, 2);
	ASSERT_OK(sonde_spool__get_offcpu(s, 1, &o));
	ASSERT_UINT(o.cpu, ==, SONDE_SPOOL_CPU_NONE);
	ASSERT_UINT(o.wakeup_ns, ==, 0);
	ASSERT_UINT(o.flags, ==, SONDE_OFFCPU_OPEN);
	ASSERT_INT(sonde_spool__get_stack(s, o.stack, frames, 4), ==, 1);
	ASSERT_ERR(sonde_spool__get_offcpu(s, 2, &o), -ERANGE);
	ASSERT_UINT(sonde_spool__offcpu_short_count(s), ==, 1);
	ASSERT_OK(sonde_spool__get_offcpu_short(s, 0, &sh));
	ASSERT_UINT(sh.count, ==, 7);
	ASSERT_UINT(sh.total_ns, ==, 3500);
	ASSERT_UINT(sh.min_ns, ==, 1000000);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* Decodes buf whole; the first error, or 0. */
static int decode_all(const uint8_t *buf, size_t len, int *optional)
{
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	size_t off = 0;
	int r = 0;

	*optional = 0;
	while (off < len && (r = sonde_spool_decoder__decode(d, buf + off, len - off, &rec)) > 0) {
		off += (size_t)r;
		*optional += rec.type == SONDE_SPOOL_REC_OPTIONAL;
	}
	sonde_spool_decoder__free(d);
	return r < 0 ? r : 0;
}

TEST(spool_offcpu_decoder_checks_records)
{
	static const uint8_t head[] = {0x89, 'S', 'O', 'N', 'D',  'E', '\r', '\n', 2,  1,
				       3,    1,	  2,   3,   0x04, 4,   5,    10,   11, 0};
	struct {
		uint8_t rec[16];
		size_t len;
		int err;
	} cases[] = {
		/* fine: thread 1, CPU unknown, empty stack */
		{{0x40, 9, 1, 2, 1, 0, 0, 0, 0, 0, 0}, 11, 0},
		/* undefined thread, undefined node */
		{{0x40, 9, 1, 2, 2, 0, 0, 0, 0, 0, 0}, 11, -SONDE_E_REFERENCE},
		{{0x40, 9, 1, 2, 1, 0, 0, 0, 0, 0, 1}, 11, -SONDE_E_REFERENCE},
		/* a state out of range, unknown flags, a wakeup after the switch-in */
		{{0x40, 9, 1, 2, 1, 0, 4, 0, 0, 0, 0}, 11, -SONDE_E_RANGE},
		{{0x40, 9, 1, 2, 1, 0, 0, 8, 0, 0, 0}, 11, -SONDE_E_FORMAT},
		{{0x40, 9, 1, 2, 1, 0, 0, 0, 0, 4, 0}, 11, -SONDE_E_RANGE},
		/* a payload missing its node */
		{{0x40, 8, 1, 2, 1, 0, 0, 0, 0, 0}, 10, -SONDE_E_FORMAT},
		/* a short count of an undefined thread */
		{{0x41, 4, 2, 1, 1, 1}, 6, -SONDE_E_REFERENCE},
		{{0x41, 4, 1, 1, 1, 1}, 6, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t buf[64];
		int optional;
		memcpy(buf, head, sizeof(head));
		memcpy(buf + sizeof(head), cases[i].rec, cases[i].len);
		ASSERT_INT(decode_all(buf, sizeof(head) + cases[i].len, &optional), ==,
			   cases[i].err);
		/* in a 2.0 file the same bytes are an optional record a reader skips */
		buf[9] = 0;
		ASSERT_INT(decode_all(buf, sizeof(head) + cases[i].len, &optional), ==, 0);
		ASSERT_INT(optional, ==, 1);
	}
}

TEST(spool_offcpu_declare_only_before_output)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	struct sonde_spool_offcpu iv = {.thread = 1};
	uint32_t thread;

	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "t", &thread));
	/* not declared: refused, and nothing is written */
	ASSERT_ERR(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0), -SONDE_E_STATE);
	ASSERT_OK(sonde_spool_writer__flush(w));
	ASSERT_ERR(sonde_spool_writer__declare_offcpu(w), -SONDE_E_STATE);
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);

	b = (struct buf)BUF_INIT;
	w = ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 0, 1, 1, "t", &thread));
	/* switch-in before switch-out, wakeup outside the interval, bad state, bad thread */
	iv = (struct sonde_spool_offcpu){.switch_out_ns = 10, .switch_in_ns = 5, .thread = 1};
	ASSERT_ERR(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0), -EINVAL);
	iv.switch_in_ns = 20;
	iv.wakeup_ns = 21;
	ASSERT_ERR(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0), -EINVAL);
	iv.wakeup_ns = 0;
	iv.state = SONDE_OFFCPU_STATES;
	ASSERT_ERR(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0), -EINVAL);
	iv.state = 0;
	iv.thread = 2;
	ASSERT_ERR(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0), -EINVAL);
	iv.thread = 1;
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, NULL, 0));
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);
}

/* The spool above as a profile: the metrics' totals and folded lines in each unit. */
TEST(profile_offcpu_metrics)
{
	struct buf b = BUF_INIT;
	const char *path = test_path("offcpu.spool"), *out = test_path("offcpu.folded");
	enum sonde_profile_metric m;
	uint64_t short_count, short_ns;

	write_offcpu_spool(&b);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT(fd >= 0);
	ASSERT_INT(write(fd, b.data, b.len), ==, (int)b.len);
	close(fd);
	sonde__buf_free(&b);

	struct sonde_profile_spool_opts so = {.sz = sizeof(so), .no_symbolize = 1};
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__from_spool(path, &so));
	ASSERT_UINT(sonde_profile__total(p, SONDE_PROFILE_METRIC_CPU), ==, 1);
	ASSERT_UINT(sonde_profile__total(p, SONDE_PROFILE_METRIC_OFF_CPU), ==, 8000);
	/* one sample of the 1 ms period plus the two intervals */
	ASSERT_UINT(sonde_profile__total(p, SONDE_PROFILE_METRIC_WALL), ==, 1008000);
	ASSERT_UINT(sonde_profile__offcpu_count(p, &short_count, &short_ns), ==, 2);
	ASSERT_UINT(short_count, ==, 7);
	ASSERT_UINT(short_ns, ==, 3500);

	struct sonde_profile_write_opts wo = {.sz = sizeof(wo),
					      .metric = SONDE_PROFILE_METRIC_WALL};
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, &wo));
	close(fd);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	/* microseconds; the state pseudo-frame innermost; the 3 us runnable interval's stack
	 * is frame 2 alone */
	ASSERT_STR_EQ(text, "x+0x10;[off-cpu: R] 3\n"
			    "x+0x20;x+0x10 1000\n"
			    "x+0x20;x+0x10;[off-cpu: S] 5\n");
	free(text);
	/* every format takes a metric; an unknown one is refused */
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_PPROF, fd, &wo));
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_SPEEDSCOPE, fd, &wo));
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_SVG, fd, &wo));
	wo.metric = 7;
	ASSERT_ERR(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, &wo), -EINVAL);
	close(fd);

	ASSERT_OK(sonde_profile__parse_metric("off-cpu", &m));
	ASSERT_INT(m, ==, SONDE_PROFILE_METRIC_OFF_CPU);
	ASSERT_ERR(sonde_profile__parse_metric("walls", &m), -EINVAL);
	ASSERT_STR_EQ(sonde_profile__metric_name(SONDE_PROFILE_METRIC_WALL), "wall");
	ASSERT(!sonde_profile__metric_name(3));
	/* a hand-built interval: the stack is checked, the state too */
	uint32_t loc = 0;
	ASSERT_ERR(sonde_profile__add_offcpu(p, 0, 1, 0, &loc, 1, 5, 0), -SONDE_E_REFERENCE);
	ASSERT_ERR(sonde_profile__add_offcpu(p, 0, 1, 0, NULL, 0, 5, 4), -EINVAL);
	ASSERT_OK(sonde_profile__add_offcpu(p, 0, 1, 0, NULL, 0, 5, SONDE_OFFCPU_BLOCKED));
	ASSERT_UINT(sonde_profile__total(p, SONDE_PROFILE_METRIC_OFF_CPU), ==, 8005);
	sonde_profile__free(p);
}

/* The account record (tag 0x42, any 2.x file): its bytes, the reader's copy, a file
 * without one, and the checks of the writer and the decoder. */
TEST(spool_account_round_trips_and_is_checked)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_account got;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	const struct sonde_spool_account a = {.kernel_time = 0,
					      .kernel_error = EACCES,
					      .lost_records = 1560,
					      .lost_samples = 3,
					      .offcpu_dropped = 200};
	const struct sonde_spool_account bad = {.kernel_time = 2};

	ASSERT_ERR(sonde_spool_writer__add_account(w, &bad), -EINVAL);
	ASSERT_OK(sonde_spool_writer__add_account(w, &a));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	static const uint8_t expect[] = {
		0x89, 'S', 'O', 'N', 'D', 'E', '\r', '\n', 2, 0, /* 2.0: no off-CPU records */
		5, 1, 2, 0xc0, 0x84, 0x3d,
		/* kernel time not seen (EACCES), 1560 records and 3 samples lost, 200 dropped */
		0x42, 7, 0, EACCES, 0x98, 0x0c, 3, 0xc8, 0x01, 0x06, 1, 0, /* end */
	};
	ASSERT_UINT(b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(b.data, expect, sizeof(expect));

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	ASSERT_OK(sonde_spool__get_account(s, &got));
	ASSERT_MEM_EQ(&got, &a, sizeof(a));
	sonde_spool__close(s);

	/* the decoder refuses a kernel_time other than 0 and 1 */
	uint64_t at = 0;
	((uint8_t *)b.data)[18] = 2;
	ASSERT(sonde_spool__open_mem(b.data, b.len, &at) == NULL);
	ASSERT_INT(errno, ==, SONDE_E_RANGE);
	ASSERT_UINT(at, ==, 16);
	sonde__buf_free(&b);

	/* a file written without one */
	w = ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	ASSERT_ERR(sonde_spool__get_account(s, &got), -ENOENT);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* An interval a loss cut (tag 0x43, 2.1 files): written and read apart from the others,
 * with their fields and checks; refused in a file without off-CPU records. */
TEST(spool_unknown_intervals_are_kept_apart)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_offcpu got;
	const struct sonde_spool_frame frames[] = {{1, 0x10}};
	struct sonde_spool_module_def m = {.pid = 10,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x1000,
					   .end = 0x2000,
					   .path = "/x"};
	uint32_t thread, mod;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));

	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &thread));
	struct sonde_spool_offcpu iv = {.switch_out_ns = 200,
					.switch_in_ns = 900,
					.thread = thread,
					.cpu = 1,
					.state = SONDE_OFFCPU_SLEEPING};
	/* off-CPU records need the 2.1 header */
	ASSERT_ERR(sonde_spool_writer__add_unknown(w, &iv, NULL, 0), -SONDE_E_STATE);
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);

	w = ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 11, "ab", &thread));
	ASSERT_OK(sonde_spool_writer__add_module(w, 6, &m, &mod));
	iv.thread = thread;
	struct sonde_spool_offcpu bad = iv;
	bad.switch_in_ns = 100; /* before its switch-out */
	ASSERT_ERR(sonde_spool_writer__add_unknown(w, &bad, frames, 1), -EINVAL);
	ASSERT_OK(sonde_spool_writer__add_unknown(w, &iv, frames, 1));
	iv.switch_out_ns = 300;
	iv.switch_in_ns = 400;
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 1));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	ASSERT_UINT(sonde_spool__offcpu_count(s), ==, 1);
	ASSERT_UINT(sonde_spool__unknown_count(s), ==, 1);
	ASSERT_OK(sonde_spool__get_unknown(s, 0, &got));
	ASSERT_UINT(got.switch_out_ns, ==, 200);
	ASSERT_UINT(got.switch_in_ns, ==, 900);
	ASSERT_UINT(got.thread, ==, thread);
	ASSERT_UINT(got.cpu, ==, 1);
	ASSERT_UINT(got.state, ==, SONDE_OFFCPU_SLEEPING);
	ASSERT_UINT(got.stack, >, 0);
	ASSERT_ERR(sonde_spool__get_unknown(s, 1, &got), -ERANGE);
	ASSERT_OK(sonde_spool__get_offcpu(s, 0, &got));
	ASSERT_UINT(got.switch_out_ns, ==, 300);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A run of one CPU's switches (tag 0x44, 2.1 files): a few bytes each, times as deltas;
 * decoded back exactly; a bad state, a time going back, too many, or a writer without
 * off-CPU records are refused; a 2.0 file skips the tag as an optional record. */
TEST(spool_switches_round_trip_compactly)
{
	struct buf b = BUF_INIT;
	const struct sonde_spool_switch sw[] = {
		{1000, 0, 42, SONDE_OFFCPU_RUNNABLE},
		{1300, 42, 43, SONDE_OFFCPU_SLEEPING},
		{1300, 43, 0, SONDE_SWITCH_EXITED},
		{2000, 0, 44, SONDE_OFFCPU_RUNNABLE | SONDE_SWITCH_INFERRED},
	};
	const struct sonde_spool_switch back[] = {{10, 1, 2, 0}, {9, 2, 1, 0}};
	const struct sonde_spool_switch bad_state[] = {{10, 1, 2, SONDE_SWITCH_EXITED + 1}};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));

	ASSERT_ERR(sonde_spool_writer__add_switches(w, 0, 0, sw, 1), -SONDE_E_STATE);
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_ERR(sonde_spool_writer__add_switches(w, 0, 0, back, 2), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_switches(w, 0, 0, bad_state, 1), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_switches(w, 0, 2, sw, 1), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_switches(w, 0, 0, sw, SONDE_SPOOL_SWITCHES_MAX + 1),
		   -EINVAL);
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, SONDE_SWITCHES_GAP, sw, 4));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	static const uint8_t expect[] = {
		0x89, 'S', 'O', 'N', 'D', 'E', '\r', '\n', 2, 1, /* 2.1 */
		5, 1, 2, 0xc0, 0x84, 0x3d,
		0x44, 3, 1, 0, 0, /* CPU 1, announced */
		/* CPU 1 after a gap, 4 switches: 1000 0->42 R, +300 42->43 S, +0 43->0 exited,
		 * +700 0->44 inferred */
		0x44, 22, 1, 1, 4, 0xe8, 0x07, 0, 42, 0, 0xac, 0x02, 42, 43, 1, 0, 43, 0, 4,
		0xbc, 0x05, 0, 44, 8,
		0x06, 1, 0, /* end */
	};
	ASSERT_UINT(b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(b.data, expect, sizeof(expect));

	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	size_t off = 0;
	int n, runs = 0;
	while ((n = sonde_spool_decoder__decode(d, (uint8_t *)b.data + off, b.len - off, &rec)) >
	       0) {
		off += (size_t)n;
		if (rec.type != SONDE_SPOOL_REC_SWITCHES)
			continue;
		ASSERT_UINT(rec.switches.cpu, ==, 1);
		if (runs++ == 0) {
			ASSERT_UINT(rec.switches.n, ==, 0);
			ASSERT_UINT(rec.switches.flags, ==, 0);
			continue;
		}
		ASSERT_UINT(rec.switches.flags, ==, SONDE_SWITCHES_GAP);
		ASSERT_UINT(rec.switches.n, ==, 4);
		for (size_t i = 0; i < 4; i++) {
			ASSERT_UINT(rec.switches.v[i].time_ns, ==, sw[i].time_ns);
			ASSERT_UINT(rec.switches.v[i].prev_tid, ==, sw[i].prev_tid);
			ASSERT_UINT(rec.switches.v[i].next_tid, ==, sw[i].next_tid);
			ASSERT_UINT(rec.switches.v[i].prev_state, ==, sw[i].prev_state);
		}
	}
	ASSERT_INT(n, ==, 0);
	ASSERT_INT(runs, ==, 2);
	sonde_spool_decoder__free(d);

	/* a state past the exit is refused by the decoder */
	uint64_t at = 0;
	((uint8_t *)b.data)[sizeof(expect) - 4] = 16;
	ASSERT(sonde_spool__open_mem(b.data, b.len, &at) == NULL);
	ASSERT_INT(errno, ==, SONDE_E_RANGE);
	ASSERT_UINT(at, ==, 21);
	sonde__buf_free(&b);

	/* in a 2.0 file the tag is an optional record: skipped */
	static const uint8_t v20[] = {0x89, 'S', 'O',  'N',  'D', 'E', '\r', '\n', 2, 0,
				      5,    1,	 2,    0xc0, 0x84, 0x3d, 0x44, 2,    7, 7,
				      0x06, 1,	 0};
	int optional = 0;
	ASSERT_INT(decode_all(v20, sizeof(v20), &optional), ==, 0);
	ASSERT_INT(optional, ==, 1);
}

/* A thread's exit (tag 0x45, any 2.x file): its bytes, the reader's per-thread time, a
 * thread without one, and the checks of the writer and the decoder (a defined thread). */
TEST(spool_exit_round_trips_and_is_checked)
{
	struct buf b = BUF_INIT;
	uint32_t t1, t2;
	uint64_t at;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));

	ASSERT_ERR(sonde_spool_writer__add_exit(w, 7, 1), -EINVAL); /* no thread yet */
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 10, "a", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 6, 10, 11, "b", &t2));
	ASSERT_OK(sonde_spool_writer__add_exit(w, 300, t2));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	static const uint8_t expect[] = {
		0x89, 'S', 'O', 'N', 'D', 'E', '\r', '\n', 2, 0, 5, 1, 2, 0xc0, 0x84, 0x3d,
		0x04, 5, 5, 10, 10, 1, 'a', 0x04, 5, 6, 10, 11, 1, 'b',
		0x45, 3, 0xac, 0x02, 2, /* thread 2 exited at 300 */
		0x06, 1, 0,		/* end */
	};
	ASSERT_UINT(b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(b.data, expect, sizeof(expect));

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	ASSERT_ERR(sonde_spool__get_thread_exit(s, t1, &at), -ENOENT);
	ASSERT_OK(sonde_spool__get_thread_exit(s, t2, &at));
	ASSERT_UINT(at, ==, 300);
	ASSERT_ERR(sonde_spool__get_thread_exit(s, 3, &at), -ERANGE);
	sonde_spool__close(s);

	/* the decoder refuses the exit of a thread not defined */
	uint64_t off = 0;
	((uint8_t *)b.data)[34] = 3;
	ASSERT(sonde_spool__open_mem(b.data, b.len, &off) == NULL);
	ASSERT_INT(errno, ==, SONDE_E_REFERENCE);
	ASSERT_UINT(off, ==, 30);
	sonde__buf_free(&b);
}

/* A record of tag whose payload is the n varints v, appended to b. */
static void put_record(struct buf *b, uint8_t tag, const uint64_t *v, size_t n)
{
	struct buf p = BUF_INIT;

	for (size_t i = 0; i < n; i++)
		sonde__pb_put_varint_raw(&p, v[i]);
	sonde__buf_append(b, &tag, 1);
	sonde__pb_put_varint_raw(b, p.len);
	sonde__buf_append(b, p.data, p.len);
	sonde__buf_free(&p);
}

/* Every reader refuses the same records, at the record's own offset: an exit at the last
 * time a u64 holds, a CPU number no machine has, a CPU's run older than its previous one
 * (GAP or not). The whole-file reader (report) refused them in its own keeping, after the
 * decoder (convert, the tail) had let them pass and moved past them. */
TEST(spool_readers_refuse_bad_switches_and_exits_alike)
{
	static const uint64_t thread[] = {5, 10, 10, 0};
	static const uint64_t run[] = {7, 0, 1, 3000, 0, 10, 0};
	const struct {
		uint8_t tag;
		uint64_t v[8];
		size_t n;
		int err; /* 0: the file is fine */
	} cases[] = {
		{SPOOL_TAG_EXIT, {UINT64_MAX - 1, 1}, 2, 0},
		{SPOOL_TAG_EXIT, {UINT64_MAX, 1}, 2, -SONDE_E_RANGE},
		{SPOOL_TAG_SWITCHES, {(1 << 20) - 1, 0, 1, 3000, 0, 10, 0}, 7, 0},
		{SPOOL_TAG_SWITCHES, {1 << 20, 0, 1, 3000, 0, 10, 0}, 7, -SONDE_E_RANGE},
		{SPOOL_TAG_SWITCHES, {7, 0, 1, 3000, 10, 0, 1}, 7, 0},
		{SPOOL_TAG_SWITCHES, {7, 0, 1, 2999, 10, 0, 1}, 7, -SONDE_E_RANGE},
		{SPOOL_TAG_SWITCHES, {7, SONDE_SWITCHES_GAP, 1, 2999, 10, 0, 1}, 7, -SONDE_E_RANGE},
		{SPOOL_TAG_SWITCHES, {8, 0, 1, 2999, 10, 0, 1}, 7, 0}, /* another CPU */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct buf b = BUF_INIT;
		static const uint8_t head[] = {0x89, 'S', 'O', 'N', 'D', 'E', '\r',
					       '\n', 2,	  1,   3,   1,	 2,   3};
		sonde__buf_append(&b, head, sizeof(head));
		put_record(&b, SPOOL_TAG_THREAD, thread, 4);
		put_record(&b, SPOOL_TAG_SWITCHES, run, 7);
		size_t at = b.len;
		put_record(&b, cases[i].tag, cases[i].v, cases[i].n);
		static const uint8_t end[] = {SPOOL_TAG_END, 1, 0};
		sonde__buf_append(&b, end, sizeof(end));

		struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
		struct sonde_spool_record rec;
		size_t off = 0;
		int r;
		while ((r = sonde_spool_decoder__decode(d, (uint8_t *)b.data + off, b.len - off,
							&rec)) > 0)
			off += (size_t)r;
		ASSERT_INT(r, ==, cases[i].err);
		ASSERT_UINT(off, ==, cases[i].err ? at : b.len);
		ASSERT_UINT(sonde_spool_decoder__offset(d), ==, off);
		sonde_spool_decoder__free(d);

		uint64_t err_at = 0;
		struct sonde_spool *s = sonde_spool__open_mem(b.data, b.len, &err_at);
		if (cases[i].err) {
			ASSERT(s == NULL);
			ASSERT_INT(-errno, ==, cases[i].err);
			ASSERT_UINT(err_at, ==, at);
		}
		ASSERT_INT(s != NULL, ==, !cases[i].err);
		sonde_spool__close(s);
		sonde__buf_free(&b);
	}

	/* the writer writes neither */
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, &b, &hdr));
	const struct sonde_spool_switch sw = {3000, 0, 10, 0};
	uint32_t t;
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 5, 10, 10, "a", &t));
	ASSERT_ERR(sonde_spool_writer__add_exit(w, UINT64_MAX, t), -EINVAL);
	ASSERT_ERR(sonde_spool_writer__add_switches(w, 1 << 20, 0, &sw, 1), -EINVAL);
	ASSERT_OK(sonde_spool_writer__add_switches(w, (1 << 20) - 1, 0, &sw, 1));
	sonde_spool_writer__free(w);
	sonde__buf_free(&b);
}

static size_t biggest; /* the largest allocation since it was reset */

static void *big_malloc(size_t n)
{
	biggest = n > biggest ? n : biggest;
	return malloc(n);
}

static void *big_realloc(void *p, size_t n)
{
	biggest = n > biggest ? n : biggest;
	return realloc(p, n);
}

static void *big_calloc(size_t count, size_t n)
{
	biggest = count * n > biggest ? count * n : biggest;
	return calloc(count, n);
}

/* A file of 2^20 - 1 CPUs costs the readers what the CPUs present do: its switches of the
 * highest CPU a file may name and samples of the highest any may. The whole-file reader
 * and the tail kept each CPU's switches (and the reader each one's first sample) in an
 * array by CPU number: 47 bytes took 85 MB. The tail's batch still gives each CPU's last
 * switch by CPU number (sonde_tail_batch.switched), 8 bytes a CPU. */
TEST(spool_readers_keep_the_cpus_present_not_the_largest_number)
{
	static const uint64_t thread[] = {5, 10, 10, 0};
	static const uint64_t run[] = {(1 << 20) - 1, 0, 1, 3000, 10, 0, 1};
	static const uint8_t head[] = {0x89, 'S', 'O', 'N', 'D', 'E', '\r', '\n', 2, 1, 3, 1, 2, 3};
	struct buf b = BUF_INIT;
	uint8_t smp[32];
	size_t n = 0;

	sonde__buf_append(&b, head, sizeof(head));
	put_record(&b, SPOOL_TAG_THREAD, thread, 4);
	/* a sample on CPU 2^32 - 2, then one on the CPU with switches */
	smp[n++] = SPOOL_TAG_SAMPLE | SPOOL_SAMPLE_CPU;
	n += sonde__pb_varint_encode(smp + n, 2000);
	n += sonde__pb_varint_encode(smp + n, 1);
	n += sonde__pb_varint_encode(smp + n, UINT32_MAX);
	n += sonde__pb_varint_encode(smp + n, 0);
	smp[n++] = SPOOL_TAG_SAMPLE | SPOOL_SAMPLE_CPU | SPOOL_SAMPLE_SAME_THREAD;
	n += sonde__pb_varint_encode(smp + n, 500);
	n += sonde__pb_varint_encode(smp + n, 1 << 20);
	n += sonde__pb_varint_encode(smp + n, 0);
	sonde__buf_append(&b, smp, n);
	put_record(&b, SPOOL_TAG_SWITCHES, run, 7);
	static const uint8_t end[] = {SPOOL_TAG_END, 1, 2};
	sonde__buf_append(&b, end, sizeof(end));
	const char *path = test_path("cpus.spool");
	test_write_file(path, b.data, b.len);

	ASSERT_OK(sonde_allocator__replace(big_malloc, big_realloc, big_calloc, free));
	biggest = 0;
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(b.data, b.len, NULL));
	ASSERT_UINT(biggest, <, 64 * 1024);
	ASSERT_UINT(sonde_spool__switch_cpus(s), ==, 1 << 20);
	struct sonde_spool_cpu_time t;
	ASSERT_ERR(sonde_spool__get_cpu_time(s, 0, 0, 3000, &t), -ENOENT);
	ASSERT_OK(sonde_spool__get_cpu_time(s, (1 << 20) - 1, 0, 3000, &t));
	/* its first sample (at 2500) ran a task: busy from there to the switch */
	ASSERT_UINT(t.busy_ns, ==, 500);
	ASSERT_UINT(t.unknown_ns, ==, 2500);
	sonde_spool__close(s);

	struct sonde_tail_batch tb = {.sz = sizeof(tb)};
	biggest = 0;
	struct sonde_tail *tl = ASSERT_NOT_NULL(sonde_tail__open(path, NULL));
	ASSERT_INT(sonde_tail__poll(tl, 0, 0, &tb), >, 0);
	ASSERT(tb.ended);
	ASSERT_UINT(tb.n_switched, ==, 1 << 20);
	ASSERT_UINT(tb.switched[(1 << 20) - 1], ==, 3000);
	ASSERT_UINT(biggest, <=, (1 << 20) * sizeof(uint64_t));
	sonde_tail__free(tl);
	ASSERT_OK(sonde_allocator__replace(malloc, realloc, calloc, free));
	sonde__buf_free(&b);
}
