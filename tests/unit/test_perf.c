/* The perf layer: ring reading over a synthetic ring, record decoding, the stream over
 * synthetic rings, CPU lists, and a real cpu-clock event on this process. */
#include <errno.h>
#include <linux/perf_event.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/record.h>

#include "../test.h"
#include "../util.h"
#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"
#include "perf/stream.h"
#include "../failalloc.h"
#include "perf_fixture.h"

/* Writes a record of type/size filled with a byte pattern at ring position pos. */
static void put_record(uint8_t *data, uint64_t size, uint64_t pos, uint32_t type, uint16_t len,
		       uint8_t fill)
{
	uint8_t rec[512];
	struct perf_event_header h = {.type = type, .misc = 0, .size = len};

	memcpy(rec, &h, sizeof(h));
	for (unsigned i = sizeof(h); i < len; i++)
		rec[i] = (uint8_t)(fill + i);
	for (unsigned i = 0; i < len; i++)
		data[(pos + i) & (size - 1)] = rec[i];
}

TEST(perf_ring_reads_records_that_wrap)
{
	static struct perf_event_mmap_page meta;
	uint8_t data[256];
	struct perf_ring r;
	const void *rec;
	size_t len;

	memset(&meta, 0, sizeof(meta));
	/* Start close to the end so the second record straddles the wrap point, and use
	 * positions beyond the ring size, as the kernel's free-running counters are. */
	uint64_t pos = 256 * 5 + 200;
	meta.data_tail = pos;
	put_record(data, 256, pos, 9, 40, 0x10);
	put_record(data, 256, pos + 40, 10, 48, 0x20); /* bytes 240..288: wraps */
	put_record(data, 256, pos + 88, 11, 16, 0x30);
	meta.data_head = pos + 104;

	sonde__perf_ring_init_mem(&r, &meta, data, sizeof(data));
	sonde__perf_ring_begin(&r);
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 1);
	ASSERT_UINT(len, ==, 40);
	ASSERT_UINT(((const struct perf_event_header *)rec)->type, ==, 9);
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 1);
	ASSERT_UINT(len, ==, 48);
	const struct perf_event_header *h = rec;
	ASSERT_UINT(h->type, ==, 10);
	/* The wrapped record is contiguous in the copy, every byte in place. */
	for (unsigned i = sizeof(*h); i < 48; i++)
		ASSERT_UINT(((const uint8_t *)rec)[i], ==, (uint8_t)(0x20 + i));
	ASSERT(rec < (const void *)data || rec >= (const void *)(data + sizeof(data)));
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 1);
	ASSERT_UINT(((const struct perf_event_header *)rec)->type, ==, 11);
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 0);
	ASSERT_UINT(meta.data_tail, ==, pos); /* nothing published before end */
	sonde__perf_ring_end(&r);
	ASSERT_UINT(meta.data_tail, ==, pos + 104);
	ASSERT_UINT(sonde__perf_ring_pending(&r), ==, 0);
	sonde__perf_ring_unmap(&r);
}

TEST(perf_ring_never_reads_past_a_bad_header)
{
	static struct perf_event_mmap_page meta;
	uint8_t data[128] = {0};
	struct perf_ring r;
	const void *rec;
	size_t len;

	memset(&meta, 0, sizeof(meta));
	put_record(data, 128, 0, 9, 16, 0);
	/* A record claiming more bytes than the kernel published. */
	put_record(data, 128, 16, 9, 64, 0);
	meta.data_head = 16 + 32;
	sonde__perf_ring_init_mem(&r, &meta, data, sizeof(data));
	sonde__perf_ring_begin(&r);
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 1);
	ASSERT_ERR(sonde__perf_ring_next(&r, &rec, &len), -SONDE_E_FORMAT);
	ASSERT_INT(sonde__perf_ring_next(&r, &rec, &len), ==, 0);
	sonde__perf_ring_end(&r);
	ASSERT_UINT(meta.data_tail, ==, 48); /* resynchronized at the head */

	/* A header smaller than a header. */
	put_record(data, 128, 48, 9, 4, 0);
	meta.data_head = 48 + 8;
	sonde__perf_ring_begin(&r);
	ASSERT_ERR(sonde__perf_ring_next(&r, &rec, &len), -SONDE_E_FORMAT);
	sonde__perf_ring_end(&r);
	sonde__perf_ring_unmap(&r);
}

/* The sample_id trailer for our layout: pid/tid, time, id, cpu. */
static void rb_trailer(struct rb *r, uint32_t pid, uint32_t tid, uint64_t t, uint32_t cpu)
{
	rb_u32x2(r, pid, tid);
	rb_u64(r, t);
	rb_u64(r, 77); /* the event's id */
	rb_u32x2(r, cpu, 0);
}

static void build_sample(struct rb *r, uint64_t stack_size, uint64_t dyn)
{
	rb_begin(r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
	rb_u64(r, 0x401234);   /* ip */
	rb_u32x2(r, 100, 101); /* pid, tid */
	rb_u64(r, 123456789);  /* time */
	rb_u64(r, 76);	       /* id */
	rb_u32x2(r, 1, 0);     /* cpu */
	rb_u64(r, 1000);       /* period */
	rb_u64(r, PERF_SAMPLE_REGS_ABI_64);
	for (int i = 0; i < 24; i++)
		if (PERF_DECODE_REGS_MASK & (1ull << i))
			rb_u64(r, 0x1000 + (uint64_t)i); /* value = perf index */
	rb_u64(r, stack_size);
	for (uint64_t i = 0; i < stack_size; i++)
		r->b[r->n++] = (uint8_t)i;
	rb_u64(r, dyn);
	rb_end(r);
}

TEST(perf_decode_sample_maps_registers_to_dwarf_order)
{
	struct perf_layout l;
	struct perf_rec rec;
	struct rb r;

	sonde__perf_event_layout(&l);
	ASSERT_OK(sonde__perf_layout_check(&l));
	build_sample(&r, 64, 40);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_UINT(rec.type, ==, PERF_RECORD_SAMPLE);
	ASSERT_UINT(rec.sample.ip, ==, 0x401234);
	ASSERT_UINT(rec.pid, ==, 100);
	ASSERT_UINT(rec.tid, ==, 101);
	ASSERT_UINT(rec.time, ==, 123456789);
	ASSERT_UINT(rec.id, ==, 76);
	ASSERT_UINT(rec.cpu, ==, 1);
	ASSERT_UINT(rec.sample.period, ==, 1000);
	ASSERT_UINT(rec.sample.regs.r[UREG_RAX], ==, 0x1000);
	ASSERT_UINT(rec.sample.regs.r[UREG_RBX], ==, 0x1001);
	ASSERT_UINT(rec.sample.regs.r[UREG_RCX], ==, 0x1002);
	ASSERT_UINT(rec.sample.regs.r[UREG_RDX], ==, 0x1003);
	ASSERT_UINT(rec.sample.regs.r[UREG_RBP], ==, 0x1006);
	ASSERT_UINT(rec.sample.regs.r[UREG_RSP], ==, 0x1007);
	ASSERT_UINT(rec.sample.regs.r[UREG_RIP], ==, 0x1008);
	ASSERT_UINT(rec.sample.regs.r[UREG_R8], ==, 0x1010);
	ASSERT_UINT(rec.sample.regs.r[UREG_R15], ==, 0x1017);
	ASSERT_UINT(rec.sample.regs.valid, ==, (1u << UREG_COUNT) - 1);
	ASSERT_UINT(rec.sample.stack_len, ==, 40);
	ASSERT_UINT(rec.sample.stack[39], ==, 39);
}

/* An off-CPU recording's layout: a raw tracepoint record between the period and the
 * registers, padded to 8 bytes, which compacting keeps. */
TEST(perf_decode_sample_with_raw_data)
{
	struct perf_event_cfg cfg = {.raw = true};
	struct perf_layout l;
	struct perf_rec rec;
	struct rb r;
	uint8_t raw[12] = {0x74, 0x01, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};

	sonde__perf_event_layout_cfg(&l, &cfg);
	ASSERT_OK(sonde__perf_layout_check(&l));
	rb_begin(&r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL);
	rb_u64(&r, 0xffffffff81000000ull);
	rb_u32x2(&r, 100, 101);
	rb_u64(&r, 5000);
	rb_u64(&r, 76); /* id */
	rb_u32x2(&r, 1, 0);
	rb_u64(&r, 1);
	uint32_t size = sizeof(raw);
	rb_bytes(&r, &size, 4);
	rb_bytes(&r, raw, sizeof(raw)); /* 4 + 12 = 16: no padding */
	rb_u64(&r, PERF_SAMPLE_REGS_ABI_64);
	for (int i = 0; i < 24; i++)
		if (PERF_DECODE_REGS_MASK & (1ull << i))
			rb_u64(&r, 0x2000 + (uint64_t)i);
	rb_u64(&r, 64);
	for (int i = 0; i < 64; i++)
		r.b[r.n++] = (uint8_t)i;
	rb_u64(&r, 16);
	rb_end(&r);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_UINT(rec.sample.raw_size, ==, 12);
	ASSERT_MEM_EQ(rec.sample.raw, raw, 12);
	ASSERT_UINT(rec.sample.regs.r[UREG_RSP], ==, 0x2007);
	ASSERT_UINT(rec.sample.stack_len, ==, 16);
	/* a raw size running past the record is malformed */
	size = 4096;
	memcpy(r.b + 8 + 6 * 8, &size, 4);
	ASSERT_ERR(sonde__perf_decode(r.b, r.n, &l, &rec), -SONDE_E_FORMAT);
}

TEST(perf_decode_rejects_samples_that_do_not_fit)
{
	struct perf_layout l;
	struct perf_rec rec;
	struct rb r;

	sonde__perf_event_layout(&l);
	build_sample(&r, 64, 65); /* dyn_size beyond the copy */
	ASSERT_ERR(sonde__perf_decode(r.b, r.n, &l, &rec), -SONDE_E_FORMAT);
	build_sample(&r, 64, 8);
	/* Every truncation of a valid sample is refused, never read past. */
	for (size_t cut = 8; cut < r.n; cut += 8) {
		uint8_t *copy = malloc(cut);
		memcpy(copy, r.b, cut);
		uint16_t sz = (uint16_t)cut;
		memcpy(copy + 6, &sz, 2);
		ASSERT(sonde__perf_decode(copy, cut, &l, &rec) < 0);
		free(copy);
	}
	/* A header that claims more than the buffer holds. */
	ASSERT_ERR(sonde__perf_decode(r.b, r.n - 8, &l, &rec), -SONDE_E_FORMAT);
}

TEST(perf_decode_side_band_records)
{
	struct perf_layout l;
	struct perf_rec rec;
	struct rb r;
	char name[24] = "/usr/bin/true";

	sonde__perf_event_layout(&l);
	rb_begin(&r, PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER);
	rb_u32x2(&r, 7, 8);
	rb_u64(&r, 0x400000);
	rb_u64(&r, 0x2000);
	rb_u64(&r, 0x1000);
	rb_u32x2(&r, 8, 1);
	rb_u64(&r, 424242);
	rb_u64(&r, 0);
	rb_u32x2(&r, 4 /* PROT_EXEC */, 2);
	rb_bytes(&r, name, sizeof(name));
	rb_trailer(&r, 7, 8, 555, 1);
	rb_end(&r);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_UINT(rec.type, ==, PERF_RECORD_MMAP2);
	ASSERT(rec.has_id);
	ASSERT_UINT(rec.time, ==, 555);
	ASSERT_UINT(rec.id, ==, 77);
	ASSERT_UINT(rec.mmap2.addr, ==, 0x400000);
	ASSERT_UINT(rec.mmap2.len, ==, 0x2000);
	ASSERT_UINT(rec.mmap2.pgoff, ==, 0x1000);
	ASSERT_UINT(rec.mmap2.maj, ==, 8);
	ASSERT_UINT(rec.mmap2.min, ==, 1);
	ASSERT_UINT(rec.mmap2.ino, ==, 424242);
	ASSERT_UINT(rec.mmap2.prot, ==, 4 /* PROT_EXEC */);
	ASSERT_STR_EQ(rec.mmap2.filename, "/usr/bin/true");
	/* Without a NUL in the name the record is refused. */
	memset(r.b + r.n - 32 - sizeof(name), 'x', sizeof(name));
	ASSERT_ERR(sonde__perf_decode(r.b, r.n, &l, &rec), -SONDE_E_TRUNCATED);

	rb_begin(&r, PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC);
	rb_u32x2(&r, 7, 7);
	rb_bytes(&r, "split\0\0\0", 8);
	rb_trailer(&r, 7, 7, 600, 0);
	rb_end(&r);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_STR_EQ(rec.comm.comm, "split");
	ASSERT(rec.comm.exec);
	ASSERT_UINT(rec.time, ==, 600);

	rb_begin(&r, PERF_RECORD_FORK, 0);
	rb_u32x2(&r, 9, 7);
	rb_u32x2(&r, 9, 7);
	rb_u64(&r, 700);
	rb_trailer(&r, 7, 7, 700, 0);
	rb_end(&r);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_UINT(rec.task.pid, ==, 9);
	ASSERT_UINT(rec.task.ppid, ==, 7);

	rb_begin(&r, PERF_RECORD_LOST, 0);
	rb_u64(&r, 1);
	rb_u64(&r, 17);
	rb_trailer(&r, 0, 0, 800, 0);
	rb_end(&r);
	ASSERT_OK(sonde__perf_decode(r.b, r.n, &l, &rec));
	ASSERT_UINT(rec.lost.lost, ==, 17);
	ASSERT_UINT(rec.time, ==, 800);
}

TEST(perf_cpu_list_parses)
{
	int cpus[16];

	ASSERT_INT(sonde__perf_parse_cpu_list("0-3,8,10-11\n", 12, cpus, 16), ==, 7);
	ASSERT_INT(cpus[4], ==, 8);
	ASSERT_INT(cpus[6], ==, 11);
	ASSERT_INT(sonde__perf_parse_cpu_list("0\n", 2, cpus, 16), ==, 1);
	ASSERT_ERR(sonde__perf_parse_cpu_list("3-1", 3, cpus, 16), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__perf_parse_cpu_list("a", 1, cpus, 16), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__perf_parse_cpu_list("0-100", 5, cpus, 16), -SONDE_E_LIMIT);
}

static volatile uint64_t perf_sink;

/* Opens cpu-clock on this thread (every CPU, one shared ring), burns CPU, and decodes what
 * the kernel wrote: the real layout must match the decoder's. */
TEST(perf_event_samples_this_thread)
{
	struct perf_event_cfg cfg = {
		.kind = PERF_KIND_CPU_CLOCK, .freq = 1000, .stack_bytes = 4096};
	struct perf_event_attr a;
	struct perf_layout l;
	struct perf_ring ring;
	int fd;

	sonde__perf_attr_fill(&a, &cfg);
	sonde__perf_event_layout(&l);
	/* One event for the thread on any CPU: the kernel refuses to map an inherited one. */
	a.inherit = 0;
	fd = sonde__perf_open(&a, 0, -1);
	if (fd == -EACCES || fd == -EPERM)
		SKIP("perf_event_open not permitted: %s", strerror(-fd));
	ASSERT_OK(fd);
	ASSERT_OK(sonde__perf_ring_map(&ring, fd, -1, 64, 4));
	ASSERT_OK(sonde__perf_enable(fd));
	/* Spin for 200 ms of this thread's CPU time, not wall time: cpu-clock samples only
	 * while the thread runs, and on a loaded machine it may run a fraction of the time. */
	struct timespec t0, t1, c0, c1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	do {
		for (int i = 0; i < 100000; i++)
			perf_sink = perf_sink * 31 + (uint64_t)i;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	} while ((c1.tv_sec - c0.tv_sec) * 1000000000ll + (c1.tv_nsec - c0.tv_nsec) < 200000000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ASSERT_OK(sonde__perf_disable(fd));

	const void *rec;
	size_t len;
	int samples = 0;
	uint64_t t0ns = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec;
	uint64_t t1ns = (uint64_t)t1.tv_sec * 1000000000ull + (uint64_t)t1.tv_nsec;
	sonde__perf_ring_begin(&ring);
	while (sonde__perf_ring_next(&ring, &rec, &len) == 1) {
		struct perf_rec r;
		ASSERT_OK(sonde__perf_decode(rec, len, &l, &r));
		if (r.type != PERF_RECORD_SAMPLE)
			continue;
		samples++;
		ASSERT_UINT(r.pid, ==, (uint64_t)getpid());
		/* CLOCK_MONOTONIC, as requested with use_clockid. */
		ASSERT_UINT(r.time, >=, t0ns);
		ASSERT_UINT(r.time, <=, t1ns + 10000000);
		ASSERT_UINT(r.sample.regs_abi, ==, PERF_SAMPLE_REGS_ABI_64);
		ASSERT_UINT(r.sample.regs.r[UREG_RIP], ==, r.sample.ip);
		ASSERT_UINT(r.sample.stack_len, >, 0);
	}
	sonde__perf_ring_end(&ring);
	ASSERT_INT(samples, >=, 20);
	sonde__perf_ring_unmap(&ring);
	close(fd);
}

TEST(perf_cycles_open_fails_cleanly_without_pmu)
{
	struct perf_event_cfg cfg = {.kind = PERF_KIND_CYCLES, .freq = 100, .stack_bytes = 8};
	struct perf_event_attr a;

	sonde__perf_attr_fill(&a, &cfg);
	int fd = sonde__perf_open(&a, 0, -1);
	if (fd >= 0) {
		close(fd); /* this machine has a PMU: cycles is the right choice */
		return;
	}
	if (fd == -EACCES || fd == -EPERM)
		SKIP("perf_event_open not permitted");
	/* No PMU: the error must be one the recorder treats as "try cpu-clock". */
	ASSERT(sonde__perf_err_is_unsupported(fd));
}

TEST(perf_max_sample_rate_reads_the_kernel_limit)
{
	uint64_t max;

	ASSERT_OK(sonde__perf_max_sample_rate(&max));
	ASSERT_UINT(max, >, 0);
}

TEST(perf_open_raises_the_fd_limit_on_emfile)
{
	struct perf_event_cfg cfg = {
		.kind = PERF_KIND_CPU_CLOCK, .freq = 100, .stack_bytes = 8, .disabled = true};
	struct perf_event_attr a;
	struct rlimit rl, tight, now;
	int dups[1024], n_dups = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_max < 2048)
		SKIP("hard open file limit too low for this test");
	int used = 0;
	for (int fd = 0; fd < 1024; fd++)
		used = fcntl(fd, F_GETFD) >= 0 ? fd + 1 : used;
	tight = (struct rlimit){.rlim_cur = (rlim_t)used + 4, .rlim_max = rl.rlim_max};
	ASSERT(setrlimit(RLIMIT_NOFILE, &tight) == 0);
	/* Use up every descriptor the soft limit allows. */
	while (n_dups < 1024) {
		int fd = dup(0);
		if (fd < 0)
			break;
		dups[n_dups++] = fd;
	}
	ASSERT_INT(errno, ==, EMFILE);
	sonde__perf_attr_fill(&a, &cfg);
	a.inherit = 0;
	int fd = sonde__perf_open(&a, 0, -1);
	ASSERT(getrlimit(RLIMIT_NOFILE, &now) == 0);
	for (int i = 0; i < n_dups; i++)
		close(dups[i]);
	setrlimit(RLIMIT_NOFILE, &rl);
	if (fd == -EACCES || fd == -EPERM)
		SKIP("perf_event_open not permitted");
	ASSERT_OK(fd);
	close(fd);
	ASSERT_UINT(now.rlim_cur, >, tight.rlim_cur);
}

/* perf's CPU list syntax, as -C and report --cpu take it: ranges, duplicates named once,
 * the order kept; anything else refused. */
TEST(cpu_list_parse_takes_perf_syntax)
{
	static const struct {
		const char *in;
		int n, cpus[4];
	} ok[] = {
		{"0", 1, {0}},	      {"0,2-3", 3, {0, 2, 3}}, {"3,1", 2, {3, 1}},
		{"0-1,1", 2, {0, 1}}, {"7\n", 1, {7}},	       {"1-1", 1, {1}},
	};
	static const char *const bad[] = {"", "x", "1-", "-1", "3-1", "1,,2", "1 2", "0x1"};
	int *cpus;
	size_t n;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ASSERT_OK(sonde_cpu_list__parse(ok[i].in, &cpus, &n));
		ASSERT_UINT(n, ==, (size_t)ok[i].n);
		for (size_t j = 0; j < n; j++)
			ASSERT_INT(cpus[j], ==, ok[i].cpus[j]);
		free(cpus);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ASSERT_INT(sonde_cpu_list__parse(bad[i], &cpus, &n), ==, -EINVAL);
	ASSERT_INT(sonde_cpu_list__parse(NULL, &cpus, &n), ==, -EINVAL);
}

static void fake_event(const char *root, const char *group, const char *name, const char *id)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/events/%s", root, group);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/events/%s/%s", root, group, name);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/events/%s/%s/id", root, group, name);
	test_write_file(p, id, strlen(id));
}

/* A tracepoint's id comes from events/GROUP/NAME/id of the tracefs given; a name that
 * could leave events/ is refused before any path is built; each failure says which. */
TEST(perf_tracepoint_id_reads_tracefs_events)
{
	const char *root = test_path("tracefs");
	char p[512];

	ASSERT_INT(mkdir(root, 0755), ==, 0);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "sched", "sched_switch"), -ENODEV);
	snprintf(p, sizeof(p), "%s/events", root);
	ASSERT_INT(mkdir(p, 0755), ==, 0);
	fake_event(root, "sched", "sched_switch", "372\n");
	fake_event(root, "g", "noline", "17");
	fake_event(root, "g", "junk", "12x\n");
	fake_event(root, "g", "empty", "");
	fake_event(root, "g", "neg", "-3\n");
	fake_event(root, "g", "huge", "99999999999\n");
	ASSERT_INT(sonde__perf_tracepoint_id(root, "sched", "sched_switch"), ==, 372);
	ASSERT_INT(sonde__perf_tracepoint_id(root, "g", "noline"), ==, 17);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "sched", "nope"), -ENOENT);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "nope", "sched_switch"), -ENOENT);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "g", "junk"), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "g", "empty"), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "g", "neg"), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "g", "huge"), -SONDE_E_FORMAT);
	static const char *const bad[] = {"", "..", "a/b", "../sched", "x..y", "/"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ASSERT_ERR(sonde__perf_tracepoint_id(root, bad[i], "sched_switch"), -EINVAL);
		ASSERT_ERR(sonde__perf_tracepoint_id(root, "sched", bad[i]), -EINVAL);
	}
	ASSERT_ERR(sonde__perf_tracepoint_id(root, NULL, "x"), -EINVAL);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "sched", NULL), -EINVAL);
	/* A directory where the id file should be is not an event either. */
	snprintf(p, sizeof(p), "%s/events/g/dir", root);
	ASSERT_INT(mkdir(p, 0755), ==, 0);
	snprintf(p, sizeof(p), "%s/events/g/dir/id", root);
	ASSERT_INT(mkdir(p, 0755), ==, 0);
	ASSERT_ERR(sonde__perf_tracepoint_id(root, "g", "dir"), -EISDIR);
}

/* With no tracefs named, the mounted one is found, and its id opens the tracepoint as a
 * perf event of this process (the id is the kernel's, not any number). */
TEST(perf_tracepoint_id_finds_the_mount_and_opens_the_event)
{
	int id = sonde__perf_tracepoint_id(NULL, "sched", "sched_switch");

	if (id == -ENODEV)
		SKIP("no tracefs at /sys/kernel/tracing or /sys/kernel/debug/tracing");
	if (id == -EACCES)
		SKIP("tracefs is not readable by this user");
	ASSERT_OK(id);
	ASSERT_ERR(sonde__perf_tracepoint_id(NULL, "sched", "no_such_event_here"), -ENOENT);
	struct perf_event_attr a = {
		.size = sizeof(a),
		.type = PERF_TYPE_TRACEPOINT,
		.config = (uint64_t)id,
		.sample_period = 1,
		.disabled = 1,
		.exclude_kernel = 1,
	};
	int fd = sonde__perf_open(&a, 0, -1);
	if (fd == -EACCES || fd == -EPERM)
		SKIP("perf_event_open of a tracepoint refused (kernel.perf_event_paranoid)");
	ASSERT_OK(fd);
	close(fd);
}

static struct perf_stream *stream_new(perf_stream_filter f, void *ctx)
{
	const struct perf_event_cfg kcfg = {.kernel = true};
	struct perf_layout l;

	sonde__perf_event_layout_cfg(&l, &kcfg);
	return sonde__perf_stream_new(&l, f, ctx);
}

TEST(perf_stream_merges_rings_in_time_order)
{
	enum { RINGS = 3, PER = 40 };
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring rings[RINGS];
	int src[RINGS];
	struct rb r;

	for (int k = 0; k < RINGS; k++) {
		sring_init(&rings[k], 1 << 16, 0);
		src[k] = sonde__perf_stream_add_source(s);
		ASSERT_INT(src[k], ==, k);
		/* ring k holds times k+1, k+4, ...: interleaved; ring 0 and 2 share time 50 */
		for (int i = 0; i < PER; i++) {
			uint64_t t = (uint64_t)(i * RINGS + k + 1);
			if (k == 2 && i == 16)
				t = 50;
			stream_sample(&r, 100, (uint32_t)(200 + k), t, 16 + (uint64_t)i % 6 * 8,
				      (uint8_t)(k * 64 + i));
			sring_put(&rings[k], &r);
		}
	}
	for (int k = 0; k < RINGS; k++) {
		struct perf_stream_drained d;
		ASSERT_OK(sonde__perf_stream_drain(s, src[k], &rings[k].ring, &d));
		ASSERT_UINT(d.records, ==, PER);
		ASSERT_UINT(d.bad, ==, 0);
		ASSERT_UINT(rings[k].meta.data_tail, ==, rings[k].meta.data_head);
		/* the ring's space is the kernel's again: what was queued must not live there */
		memset(rings[k].data, 0xee, rings[k].size);
	}
	ASSERT_UINT(sonde__perf_stream_count(s), ==, RINGS * PER);
	/* ring 0 read up to 118, ring 1 to 119, ring 2 to 120: nothing after 118 yet */
	uint64_t limit = sonde__perf_stream_limit(s, 10);
	ASSERT_UINT(limit, ==, 118);
	uint64_t last = 0, n = 0;
	int last_ring = -1;
	const struct perf_rec *e;
	while ((e = sonde__perf_stream_pop(s, limit))) {
		ASSERT(e->time >= last);
		int k = (int)e->tid - 200;
		/* equal times come in the order they were read: ring 0's 50 before ring 2's */
		if (e->time == last && e->time == 50)
			ASSERT(k > last_ring);
		uint64_t i = k == 2 && e->time == 50 ? 16 : (e->time - (uint64_t)k - 1) / RINGS;
		ASSERT_UINT(e->sample.stack_len, ==, 16 + i % 6 * 8);
		for (uint64_t b = 0; b < e->sample.stack_len; b++)
			ASSERT_UINT(e->sample.stack[b], ==, (uint8_t)(k * 64 + (int)i + (int)b));
		ASSERT_UINT(e->sample.callchain_nr, ==, 3);
		uint64_t ip;
		memcpy(&ip, e->sample.callchain + 8, 8);
		ASSERT_UINT(ip, ==, 0xffffffff81000000ull + e->time);
		ASSERT_UINT(e->sample.regs.r[UREG_RSP], ==, 0x1007);
		last = e->time;
		last_ring = k;
		n++;
	}
	ASSERT_UINT(n, ==, RINGS * PER - 2);
	ASSERT_UINT(sonde__perf_stream_count(s), ==, 2);
	ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_NOT_NULL(e = sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->time, ==, 120);
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(sonde__perf_stream_bytes(s), ==, 0);
	for (int k = 0; k < RINGS; k++)
		sring_free(&rings[k]);
	sonde__perf_stream_free(s);
}

/* Drained a batch at a time, a ring read in part holds the release back to a millisecond
 * before its newest record read, however old, while one read whole is represented by the
 * floor: ring 0 holds times 1 ms apart (1..40 ms), ring 1 one record at 100 ms. Batches of
 * 10 records' bytes, each popped up to the limit before the next, give every event once,
 * in time order, with its stack bytes; no event newer than a ring's unread records goes
 * before them. */
TEST(perf_stream_drains_a_batch_at_a_time_in_order)
{
	enum { PER = 40, MS = 1000000 };
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring rings[2];
	struct rb r;
	size_t one = 0;

	for (int k = 0; k < 2; k++) {
		sring_init(&rings[k], 1 << 16, 0);
		ASSERT_INT(sonde__perf_stream_add_source(s), ==, k);
	}
	for (int i = 0; i < PER; i++) {
		stream_sample(&r, 100, 200, (uint64_t)(i + 1) * MS, 16, (uint8_t)i);
		one = r.n;
		sring_put(&rings[0], &r);
	}
	stream_sample(&r, 100, 201, 100 * (uint64_t)MS, 16, 0xaa);
	sring_put(&rings[1], &r);

	uint64_t floor = 1000 * (uint64_t)MS, last = 0, n = 0;
	bool more = true;
	for (int round = 0; more; round++) {
		bool more1 = false;
		ASSERT_OK(sonde__perf_stream_drain_some(s, 0, &rings[0].ring, 10 * one, &more, NULL));
		ASSERT_OK(sonde__perf_stream_drain_some(s, 1, &rings[1].ring, 10 * one, &more1,
							  NULL));
		ASSERT(!more1);
		ASSERT(more == (round < 3));
		uint64_t limit = sonde__perf_stream_limit(s, floor);
		/* read up to (round + 1) * 10 ms of ring 0: the limit a ms before, while it
		 * holds more; the floor once it is read whole */
		ASSERT_UINT(limit, ==, more ? (uint64_t)(round + 1) * 10 * MS - MS : floor);
		const struct perf_rec *e;
		while ((e = sonde__perf_stream_pop(s, limit))) {
			ASSERT(e->time >= last);
			if (e->tid == 200)
				ASSERT_UINT(e->sample.stack[0], ==, (uint8_t)(e->time / MS - 1));
			else
				ASSERT_UINT(e->sample.stack[0], ==, 0xaa);
			last = e->time;
			n++;
		}
	}
	ASSERT_UINT(n, ==, PER + 1);
	ASSERT_UINT(last, ==, 100 * (uint64_t)MS);
	for (int k = 0; k < 2; k++)
		sring_free(&rings[k]);
	sonde__perf_stream_free(s);
}

TEST(perf_stream_has_no_cap_on_rings_and_reorders_within_one)
{
	enum { RINGS = 300 };
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring *rings = calloc(RINGS, sizeof(*rings));
	struct rb r;

	for (int k = 0; k < RINGS; k++) {
		sring_init(&rings[k], 4096, 0);
		ASSERT_INT(sonde__perf_stream_add_source(s), ==, k);
		/* times 1000 + (k * 7) % RINGS, and one record published after a newer one */
		uint64_t t = 1000 + (uint64_t)(k * 7 % RINGS) * 2;
		stream_sample(&r, 1, (uint32_t)k + 1, t + 1, 8, 0);
		sring_put(&rings[k], &r);
		stream_sample(&r, 1, (uint32_t)k + 1, t, 8, 0);
		sring_put(&rings[k], &r);
		ASSERT_OK(sonde__perf_stream_drain(s, k, &rings[k].ring, NULL));
	}
	uint64_t last = 0, n = 0;
	const struct perf_rec *e;
	while ((e = sonde__perf_stream_pop(s, UINT64_MAX))) {
		ASSERT(e->time >= last);
		last = e->time;
		n++;
	}
	ASSERT_UINT(n, ==, 2 * RINGS);
	ASSERT_UINT(last, ==, 1000 + (RINGS - 1) * 2 + 1);
	for (int k = 0; k < RINGS; k++)
		sring_free(&rings[k]);
	free(rings);
	sonde__perf_stream_free(s);
}

/* Events no ring delivered (the BPF off-CPU backend's waits) join the merge at their time,
 * in a source of their own, their bytes copied 8-aligned into the arena. */
TEST(perf_stream_merges_pushed_events_with_ring_records)
{
	enum { TYPE = 0x5e01 };
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring ring;
	struct rb r;

	sring_init(&ring, 1 << 14, 0);
	int rs = sonde__perf_stream_add_source(s), ps = sonde__perf_stream_add_source(s);
	for (uint64_t t = 10; t <= 50; t += 10) {
		stream_sample(&r, 1, 2, t, 8, 0);
		sring_put(&ring, &r);
	}
	ASSERT_OK(sonde__perf_stream_drain(s, rs, &ring.ring, NULL));
	/* pushed slightly out of order, as waits of several CPUs leave one BPF ring buffer */
	const uint64_t times[] = {25, 15, 45};
	for (int i = 0; i < 3; i++) {
		uint8_t payload[13];
		memset(payload, 0x40 + i, sizeof(payload));
		ASSERT_OK(sonde__perf_stream_push(s, ps, TYPE, times[i], payload, sizeof(payload)));
	}
	ASSERT_INT(sonde__perf_stream_push(s, ps, TYPE, 1, NULL, (256u << 10) + 1), ==, -EINVAL);
	const uint64_t want[] = {10, 15, 20, 25, 30, 40, 45, 50};
	const struct perf_rec *e;
	int n = 0;
	while ((e = sonde__perf_stream_pop(s, UINT64_MAX))) {
		ASSERT(n < 8);
		ASSERT_UINT(e->time, ==, want[n]);
		if (e->time % 10) {
			ASSERT_UINT(e->type, ==, TYPE);
			ASSERT_UINT(e->sample.raw_size, ==, 13);
			ASSERT_UINT((uintptr_t)e->sample.raw % 8, ==, 0);
			uint8_t fill = e->time == 15 ? 0x41 : e->time == 25 ? 0x40 : 0x42;
			for (int b = 0; b < 13; b++)
				ASSERT_UINT(e->sample.raw[b], ==, fill);
		} else {
			ASSERT_UINT(e->type, ==, PERF_RECORD_SAMPLE);
		}
		n++;
	}
	ASSERT_INT(n, ==, 8);
	ASSERT_UINT(sonde__perf_stream_bytes(s), ==, 0);
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

/* Whether p lies in ring's data area. */
static bool in_ring(const struct sring *ring, const void *p)
{
	const uint8_t *b = p;

	return b >= ring->data && b < ring->data + ring->size;
}

/* A popped sample whose stack copy (1 KiB, all used) holds bytes seed + i. */
static void expect_stack(const struct perf_rec *e, uint64_t t, uint8_t seed)
{
	ASSERT_UINT(e->time, ==, t);
	ASSERT_UINT(e->sample.stack_len, ==, 1024);
	for (int b = 0; b < 1024; b++)
		ASSERT_UINT(e->sample.stack[b], ==, (uint8_t)(seed + b));
}

/* A sample's stack copy is read where it lies in the ring, which the stream hands back to the
 * kernel only up to the oldest record still used: a popped event's space goes back when a
 * pop finds nothing more to release (the kernel may then write there), the rest stays. */
TEST(perf_stream_reads_stacks_in_the_ring_until_released)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring ring;
	uint64_t start[5];
	struct rb r;

	sring_init(&ring, 1 << 16, 0);
	int src = sonde__perf_stream_add_source(s);
	for (int i = 1; i <= 4; i++) {
		start[i] = ring.meta.data_head;
		stream_sample_copy(&r, 5, 6, (uint64_t)i, 1024, 1024, (uint8_t)(i * 16));
		sring_put(&ring, &r);
	}
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
	/* read whole, held from the first record on */
	ASSERT_UINT(ring.ring.tail, ==, ring.meta.data_head);
	ASSERT_UINT(ring.meta.data_tail, ==, start[1]);
	ASSERT_UINT(sonde__perf_stream_bytes(s), <, 4 * 1024);

	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, 2));
	ASSERT(in_ring(&ring, e->sample.stack));
	expect_stack(e, 1, 16);
	expect_stack(ASSERT_NOT_NULL(sonde__perf_stream_pop(s, 2)), 2, 32);
	ASSERT(!sonde__perf_stream_pop(s, 2));
	ASSERT_UINT(ring.meta.data_tail, ==, start[3]);
	/* the kernel writes where it was handed back */
	memset(ring.data, 0xee, start[3]);
	expect_stack(ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX)), 3, 48);
	expect_stack(ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX)), 4, 64);
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

/* The stream holds no more than an eighth of a ring: past it, for every record of a ring
 * more than a quarter full when its drain begins (its reader is behind), and for a record
 * that wraps around the ring's end, the stack is copied, and what holds the ring is only
 * what is borrowed. */
TEST(perf_stream_copies_stacks_past_an_eighth_of_the_ring_behind_or_wrapped)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring ring;
	struct rb r;

	/* 16 KiB: an eighth holds one sample of a 1 KiB copy, not two; a quarter three */
	sring_init(&ring, 16384, 0);
	int src = sonde__perf_stream_add_source(s);
	uint64_t first = ring.meta.data_head;
	for (int i = 1; i <= 2; i++) {
		stream_sample_copy(&r, 5, 6, (uint64_t)i, 1024, 1024, (uint8_t)i);
		sring_put(&ring, &r);
	}
	ASSERT_UINT(r.n, >, 16384 / 16);
	ASSERT_UINT(r.n, <=, 16384 / 12);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
	ASSERT_UINT(ring.meta.data_tail, ==, first);
	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT(in_ring(&ring, e->sample.stack));
	expect_stack(e, 1, 1);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT(!in_ring(&ring, e->sample.stack));
	expect_stack(e, 2, 2);
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);

	/* four samples: more than a quarter, all copied, the ring handed back whole */
	for (int i = 3; i <= 6; i++) {
		stream_sample_copy(&r, 5, 6, (uint64_t)i, 1024, 1024, (uint8_t)i);
		sring_put(&ring, &r);
	}
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);
	memset(ring.data, 0xee, ring.size);
	for (int i = 3; i <= 6; i++) {
		e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
		ASSERT(!in_ring(&ring, e->sample.stack));
		expect_stack(e, (uint64_t)i, (uint8_t)i);
	}
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));

	/* a record across the end of the data area is copied out of the ring's scratch */
	uint64_t edge = ring.meta.data_head + (16384 - ring.meta.data_head % 16384) - 512;
	ring.meta.data_head = ring.meta.data_tail = ring.ring.tail = edge;
	stream_sample_copy(&r, 5, 6, 4, 1024, 1024, 4);
	sring_put(&ring, &r);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);
	memset(ring.data, 0xee, ring.size);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	expect_stack(e, 4, 4);
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

/* Before a ring is unmapped (or replaced by a larger one), its source lets it go: what is
 * queued keeps its stacks, copied, and the whole ring is handed back; a source reading
 * another ring without letting go of its own is refused. */
TEST(perf_stream_unborrow_copies_queued_stacks_out_of_the_ring)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring ring, other;
	struct rb r;

	sring_init(&ring, 1 << 16, 0);
	sring_init(&other, 1 << 16, 0);
	int src = sonde__perf_stream_add_source(s);
	for (int i = 1; i <= 3; i++) {
		stream_sample_copy(&r, 5, 6, (uint64_t)i, 1024, 1024, (uint8_t)(i * 7));
		sring_put(&ring, &r);
	}
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, 1));
	ASSERT(in_ring(&ring, e->sample.stack));
	ASSERT_INT(sonde__perf_stream_drain(s, src, &other.ring, NULL), ==, -EINVAL);
	size_t bytes = sonde__perf_stream_bytes(s);
	ASSERT_OK(sonde__perf_stream_unborrow(s, src));
	ASSERT_UINT(sonde__perf_stream_bytes(s), >=, bytes + 2 * 1024);
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);
	memset(ring.data, 0xee, ring.size);
	stream_sample_copy(&r, 5, 6, 4, 1024, 1024, 4 * 7);
	sring_put(&other, &r);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &other.ring, NULL));
	for (int i = 2; i <= 4; i++) {
		e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
		expect_stack(e, (uint64_t)i, (uint8_t)(i * 7));
		ASSERT(!in_ring(&ring, e->sample.stack));
	}
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(other.meta.data_tail, ==, other.meta.data_head);
	ASSERT_UINT(sonde__perf_stream_bytes(s), ==, 0);
	sring_free(&ring);
	sring_free(&other);
	sonde__perf_stream_free(s);
}

TEST(perf_stream_reads_records_that_wrap)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring ring;
	struct rb r;

	/* each sample is several hundred bytes: in a 1 KiB ring, most straddle its end */
	sring_init(&ring, 1024, 1024 * 7 + 900);
	int src = sonde__perf_stream_add_source(s);
	uint64_t t = 1;
	for (int round = 0; round < 50; round++) {
		stream_sample(&r, 5, 6, t, 48, (uint8_t)t);
		sring_put(&ring, &r);
		ASSERT_UINT(r.n, <=, 1024);
		ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, NULL));
		const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
		ASSERT_UINT(e->time, ==, t);
		ASSERT_UINT(e->sample.stack_len, ==, 48);
		for (int b = 0; b < 48; b++)
			ASSERT_UINT(e->sample.stack[b], ==, (uint8_t)(t + (uint64_t)b));
		t++;
	}
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

TEST(perf_stream_skips_truncated_and_malformed_records)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct perf_stream_drained d;
	struct sring ring;
	struct rb r;

	sring_init(&ring, 8192, 0);
	int src = sonde__perf_stream_add_source(s);
	stream_sample(&r, 5, 6, 10, 16, 0);
	sring_put(&ring, &r);
	/* a sample cut short: its header says 40 bytes, its layout needs hundreds */
	stream_sample(&r, 5, 6, 11, 16, 0);
	uint16_t cut = 40;
	memcpy(r.b + 6, &cut, 2);
	r.n = cut;
	sring_put(&ring, &r);
	stream_sample(&r, 5, 6, 12, 16, 0);
	sring_put(&ring, &r);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, &d));
	ASSERT_UINT(d.records, ==, 2);
	ASSERT_UINT(d.bad, ==, 1);
	/* a header larger than what was published: the rest of the pass is skipped */
	rb_begin(&r, PERF_RECORD_SAMPLE, 0);
	uint16_t big = 4000;
	memcpy(r.b + 6, &big, 2);
	rb_u64(&r, 0);
	sring_put(&ring, &r);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, &d));
	ASSERT_UINT(d.records, ==, 0);
	ASSERT_UINT(d.bad, ==, 1);
	ASSERT_UINT(ring.meta.data_tail, ==, ring.meta.data_head);
	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->time, ==, 10);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->time, ==, 12);
	ASSERT(!sonde__perf_stream_pop(s, UINT64_MAX));
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

TEST(perf_stream_passes_loss_records_in_order)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct perf_stream_drained d;
	struct sring ring;
	struct rb r;

	sring_init(&ring, 8192, 0);
	int src = sonde__perf_stream_add_source(s);
	stream_sample(&r, 5, 6, 10, 16, 0);
	sring_put(&ring, &r);
	rb_begin(&r, PERF_RECORD_LOST, 0);
	rb_u64(&r, 77);	  /* id */
	rb_u64(&r, 1234); /* lost */
	rb_trailer(&r, 0, 0, 20, 1);
	rb_end(&r);
	sring_put(&ring, &r);
	rb_begin(&r, PERF_RECORD_LOST_SAMPLES, 0);
	rb_u64(&r, 5);
	rb_trailer(&r, 5, 6, 25, 1);
	rb_end(&r);
	sring_put(&ring, &r);
	stream_sample(&r, 5, 6, 30, 16, 0);
	sring_put(&ring, &r);
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, &d));
	ASSERT_UINT(d.records, ==, 4);
	ASSERT_UINT(d.lost, ==, 2);
	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->type, ==, PERF_RECORD_SAMPLE);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->type, ==, PERF_RECORD_LOST);
	ASSERT_UINT(e->lost.lost, ==, 1234);
	ASSERT_UINT(e->time, ==, 20);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->type, ==, PERF_RECORD_LOST_SAMPLES);
	ASSERT_UINT(e->lost.lost, ==, 5);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->time, ==, 30);
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

/* pid 0 dropped, pid 1 kept without its stack and callchain */
static enum perf_stream_keep idle_filter(void *ctx, const struct perf_rec *rec)
{
	(*(int *)ctx)++;
	if (rec->pid == 0)
		return PERF_STREAM_DROP;
	return rec->pid == 1 ? PERF_STREAM_HEADER : PERF_STREAM_KEEP;
}

TEST(perf_stream_filter_drops_before_copying)
{
	int calls = 0;
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(idle_filter, &calls));
	struct perf_stream_drained d;
	struct sring ring;
	struct rb r;

	sring_init(&ring, 8192, 0);
	int src = sonde__perf_stream_add_source(s);
	for (uint32_t pid = 0; pid < 3; pid++) {
		stream_sample(&r, pid, pid, 10 + pid, 32, 0);
		sring_put(&ring, &r);
	}
	ASSERT_OK(sonde__perf_stream_drain(s, src, &ring.ring, &d));
	ASSERT_INT(calls, ==, 3);
	ASSERT_UINT(d.dropped, ==, 1);
	ASSERT_UINT(d.records, ==, 2);
	const struct perf_rec *e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->pid, ==, 1);
	ASSERT(!e->sample.stack && e->sample.stack_len == 0 && e->sample.callchain_nr == 0);
	ASSERT_UINT(e->sample.regs.r[UREG_RSP], ==, 0x1007);
	e = ASSERT_NOT_NULL(sonde__perf_stream_pop(s, UINT64_MAX));
	ASSERT_UINT(e->pid, ==, 2);
	ASSERT_UINT(e->sample.stack_len, ==, 32);
	ASSERT_UINT(e->sample.callchain_nr, ==, 3);
	sring_free(&ring);
	sonde__perf_stream_free(s);
}

TEST(perf_stream_allocates_nothing_once_warm)
{
	struct perf_stream *s = ASSERT_NOT_NULL(stream_new(NULL, NULL));
	struct sring rings[4];
	struct rb r;
	uint64_t t = 1;

	failalloc_install();
	for (int k = 0; k < 4; k++) {
		sring_init(&rings[k], 1 << 16, 0);
		ASSERT_INT(sonde__perf_stream_add_source(s), ==, k);
	}
	/* By round 80 every source's queue has held the most a round leaves queued and its
	 * arena has moved on to a second chunk (a chunk holds some 3000 of these samples). */
	for (int round = 0; round < 150; round++) {
		uint64_t before = t;
		if (round == 80)
			failalloc_arm(1);
		/* 20 to 99 records per ring, those of the round before released after each */
		for (int k = 0; k < 4; k++) {
			for (int i = 0; i < 20 + (round * 37 + k * 11) % 80; i++) {
				stream_sample(&r, 5, 6, t++, 8 + (uint64_t)(i % 7) * 8, 0);
				sring_put(&rings[k], &r);
			}
			ASSERT_OK(sonde__perf_stream_drain(s, k, &rings[k].ring, NULL));
		}
		while (sonde__perf_stream_pop(s, before - 1))
			;
	}
	ASSERT_UINT(failalloc_count(), ==, 0);
	ASSERT(!failalloc_disarm());
	while (sonde__perf_stream_pop(s, UINT64_MAX))
		;
	ASSERT_UINT(sonde__perf_stream_bytes(s), ==, 0);
	for (int k = 0; k < 4; k++)
		sring_free(&rings[k]);
	sonde__perf_stream_free(s);
}
