/* Kernel frames, end to end: `sonde record --kernel` on a syscall-heavy program (most of
 * its time is spent in read() of /dev/zero) gives stacks whose innermost frames are kernel
 * functions named from /proc/kallsyms, called from the program's own frames; as an
 * unprivileged user with kernel.perf_event_paranoid = 2 the kernel part is refused, and the
 * recording falls back to user frames with one warning. */
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/record.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"

static long read_paranoid(void)
{
	return test_sysctl_get("kernel/perf_event_paranoid");
}

/* Kernel sampling needs root (or CAP_PERFMON, or paranoid <= 1). */
static void require_kernel_sampling(void)
{
	test_require_perf();
	if (geteuid() != 0 && read_paranoid() > 1)
		SKIP("kernel sampling needs root or kernel.perf_event_paranoid <= 1");
}

/* Position of the first kernel entry frame in a folded stack, or NULL. */
static const char *kernel_entry(const char *stack)
{
	const char *k = strstr(stack, ";entry_SYSCALL");

	if (!k)
		k = strstr(stack, ";do_syscall_64");
	return k;
}

struct ktally {
	long reader;	  /* samples under zero_reader */
	long reader_kern; /* ... whose innermost frames are the kernel's */
	long read_named;  /* ... with a kernel read function (ksys_read, vfs_read, ...) */
	long misordered;  /* kernel frames above (outer to) a user frame */
	char example[512];
};

static void ktally_line(struct ktally *t, const char *stack, long count)
{
	const char *user = strstr(stack, ";main;run;zero_reader;");
	const char *k = kernel_entry(stack);

	/* Kernel frames are innermost: no frame of the program or of libc after them. */
	if (k && (strstr(k, ";main;") || strstr(k, ";run;") || strstr(k, "_reader") ||
		  strstr(k, "_writer") || strstr(k, "libc"))) {
		t->misordered += count;
		snprintf(t->example, sizeof(t->example), "%s", stack);
	}
	if (!user)
		return;
	t->reader += count;
	if (!k)
		return;
	t->reader_kern += count;
	if (strstr(k, "sys_read") || strstr(k, ";vfs_read") || strstr(k, ";read_zero"))
		t->read_named += count;
}

/* "outer;...;inner COUNT" lines of sonde report --folded or the folded export. */
static void ktally_folded(struct ktally *t, char *text)
{
	char *save;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		ktally_line(t, line, atol(sp + 1));
	}
}

static void assert_kernel_below_user(char *folded)
{
	struct ktally t = {0};

	ktally_folded(&t, folded);
	if (t.misordered)
		FAIL("%ld samples have kernel frames outside the innermost position, e.g. %s",
		     t.misordered, t.example);
	ASSERT_INT(t.reader, >=, 50);
	/* read() of 64 KiB from /dev/zero spends its time clearing memory in the kernel. */
	ASSERT_INT(t.reader_kern * 2, >=, t.reader);
	ASSERT_INT(t.read_named * 2, >=, t.reader);
}

TEST_TIMEOUT(kernel_record_shows_kernel_frames_below_user_frames, 120)
{
	struct test_output o;
	const char *spool = test_path("k.spool"), *folded = test_path("k.folded");

	require_kernel_sampling();
	test_runf(&o, 90, "%s record --kernel -o %s -- %s 2", test_bin("sonde"), spool,
		  test_prog("kernel_syscalls"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "  kernel: ");
	ASSERT_NOT_CONTAINS(o.err, "warning");
	test_output_free(&o);

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	assert_kernel_below_user(o.out);
	test_output_free(&o);

	/* The exports symbolize kernel frames the same way. */
	test_runf(&o, 60, "%s convert %s -o %s --format folded", test_bin("sonde"), spool, folded);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	assert_kernel_below_user(text);
	free(text);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, " [kernel.kallsyms]\n");
	ASSERT_NOT_CONTAINS(o.out, "[[");
	test_output_free(&o);
}

static int mem_write(void *ctx, const void *buf, size_t len)
{
	struct {
		char *p;
		size_t len, cap;
	} *m = ctx;

	if (m->len + len > m->cap) {
		size_t cap = (m->len + len) * 2;
		char *np = realloc(m->p, cap);
		if (!np)
			return -ENOMEM;
		m->p = np;
		m->cap = cap;
	}
	memcpy(m->p + m->len, buf, len);
	m->len += len;
	return 0;
}

/* The C API: the option, the summary, and the spool's representation of kernel frames
 * (flag on the sample, frames of one pid-0 kernel module holding kernel addresses). */
TEST_TIMEOUT(kernel_record_api_marks_kernel_frames_in_the_spool, 120)
{
	struct {
		char *p;
		size_t len, cap;
	} mem = {0};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 499, .kernel = true};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	const char *argv[] = {test_prog("kernel_syscalls"), "1", NULL};

	require_kernel_sampling();
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new((char *const *)argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		sonde_launch__pid(l), mem_write, &mem, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	int status;
	while (sonde_launch__wait(l, WNOHANG, &status) == 0)
		ASSERT_INT(sonde_recorder__poll(r, 100, NULL), >=, 0);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	ASSERT_UINT(sum.kernel_enabled, ==, 1);
	ASSERT_INT(sum.kernel_error, ==, 0);
	ASSERT_UINT(sum.kernel_frames, >, 0);

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(mem.p, mem.len, NULL));
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	uint64_t flagged = 0;
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		uint32_t frames[64];
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		int n = sonde_spool__get_stack(s, smp.stack, frames, 64);
		ASSERT_INT(n, >, 0);
		struct sonde_spool_frame f;
		struct sonde_spool_module m;
		ASSERT_OK(sonde_spool__get_frame(s, frames[0], &f));
		int leaf_kernel = 0;
		if (f.module) {
			ASSERT_OK(sonde_spool__get_module(s, f.module, &m));
			leaf_kernel = (m.def.flags & SONDE_MODULE_KERNEL) != 0;
		}
		/* The flag says exactly whether the innermost frames are the kernel's. */
		ASSERT_INT(leaf_kernel, ==, (smp.flags & SONDE_SAMPLE_KERNEL) != 0);
		if (!leaf_kernel)
			continue;
		flagged++;
		ASSERT_UINT(m.def.pid, ==, 0);
		ASSERT_UINT(f.addr, >=, 0xffff800000000000ull);
	}
	ASSERT_UINT(flagged * 2, >=, info.samples);
	sonde_spool__close(s);
	free(mem.p);
}

/* Runs `sonde record MODE` (--kernel, or "-q" for the default) as uid nobody; returns its
 * wait status, stderr in *err. */
static int record_as_nobody(const char *dir, const char *out, char **err, const char *mode)
{
	char errfile[4200];
	const char *sonde = test_copy_for_anyone(test_bin("sonde"));
	const char *prog = test_copy_for_anyone(test_prog("kernel_syscalls"));

	snprintf(errfile, sizeof(errfile), "%s/err.txt", dir);
	pid_t child = fork();
	if (child == 0) {
		int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		execl(sonde, "sonde", "record", mode, "-o", out, "--", prog, "1", (char *)NULL);
		_exit(98);
	}
	int status = test_wait(child, 60);
	*err = test_read_file(errfile, NULL);
	return status;
}

/* paranoid 2: a user may sample its own processes in user space, not the kernel. */
TEST_EXCLUSIVE(kernel_denied_falls_back_to_user_frames_with_one_warning, 120)
{
	char dir[4096], out[4200];
	struct test_output o;
	char *err = NULL;

	if (geteuid() != 0)
		SKIP("needs root to switch to an unprivileged user and set perf_event_paranoid");
	snprintf(dir, sizeof(dir), "%s/nobody", test_tmpdir());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	chmod(test_tmpdir(), 0755);
	snprintf(out, sizeof(out), "%s/out.spool", dir);

	if (read_paranoid() != 2)
		test_sysctl_set("kernel/perf_event_paranoid", 2);
	/* recordings, each judged whole, until one has a sample in zero_reader: a loaded
	 * machine gives the 1 s program a few user-space samples only, mostly elsewhere */
	bool reader = false;
	for (int i = 1; i <= 4 && !reader; i++) {
		int status = record_as_nobody(dir, out, &err, "--kernel");

		ASSERT_NOT_NULL(err);
		ASSERT_INT(status, ==, 0);
		const char *w = strstr(err, "warning: kernel frames not recorded");
		ASSERT_NOT_NULL(w);
		ASSERT(strstr(w + 1, "warning: kernel frames not recorded") == NULL);
		ASSERT_CONTAINS(err, "perf_event_paranoid is 2");
		ASSERT_CONTAINS(err, "kernel: not recorded");

		test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), out);
		ASSERT_INT(o.status, ==, 0);
		printf("recording %d:\n%s", i, o.out);
		reader = strstr(o.out, ";main;run;zero_reader") != NULL;
		ASSERT(kernel_entry(o.out) == NULL);
		ASSERT_NOT_CONTAINS(o.out, "kallsyms");
		test_output_free(&o);
		free(err);
		err = NULL;
		unlink(out);
	}
	ASSERT(reader);
	free(err);
}

/* paranoid 2, default options: kernel time cannot be sampled, which is no error (no
 * warning either: nothing was asked for), but the summary and the report's header say
 * that kernel time is not visible, and why. */
TEST_EXCLUSIVE(kernel_time_denied_is_said_by_summary_and_report, 120)
{
	char dir[4096], out[4200];
	struct test_output o;
	char *err = NULL;

	if (geteuid() != 0)
		SKIP("needs root to switch to an unprivileged user and set perf_event_paranoid");
	snprintf(dir, sizeof(dir), "%s/nobody2", test_tmpdir());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	chmod(test_tmpdir(), 0755);
	snprintf(out, sizeof(out), "%s/out.spool", dir);

	if (read_paranoid() != 2)
		test_sysctl_set("kernel/perf_event_paranoid", 2);
	int status = record_as_nobody(dir, out, &err, "-F999");

	ASSERT_NOT_NULL(err);
	ASSERT_INT(status, ==, 0);
	ASSERT_NOT_CONTAINS(err, "warning");
	ASSERT_CONTAINS(err, "kernel: kernel time not visible (kernel sampling denied: ");
	free(err);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "kernel time not visible: the kernel refused kernel sampling (");
	ASSERT_CONTAINS(o.out, "kernel.perf_event_paranoid <= 1 or CAP_PERFMON");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "kernel time");
	ASSERT_CONTAINS(o.err, "note: kernel time not visible");
	test_output_free(&o);
}

/* What rusage_run wrote for `key` ("utime_ns", "stime_ns", "pid"). */
static double rusage_value(const char *text, const char *key)
{
	const char *l = strstr(text, key);

	if (!l)
		FAIL("no %s in rusage_run's file:\n%s", key, text);
	return atof(l + strlen(key));
}

/* Samples of a folded report: all of them, and those whose innermost frame is [kernel]. */
static void count_kernel_leaves(char *folded, double *all, double *kernel)
{
	char *save;

	*all = *kernel = 0;
	for (char *line = strtok_r(folded, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		double n = atof(sp + 1);
		*all += n;
		size_t len = strlen(line);
		if (len >= 9 && !strcmp(line + len - 9, ";[kernel]"))
			*kernel += n;
	}
}

/* Kernel time is CPU time: without --kernel a recording still samples the kernel (only its
 * frames are left out), so dd copying /dev/zero to /dev/null, which spends nearly all of
 * its time in read() and write(), has samples for its system time, each under the user
 * stack of the call with a [kernel] leaf. The samples' total must be dd's CPU time as the
 * kernel charged it (wait4's rusage), within 15 % and 20 ms. */
TEST_TIMEOUT(kernel_time_is_counted_without_kernel_frames, 180)
{
	struct test_output o;
	const char *spool = test_path("dd.spool"), *usage = test_path("dd.rusage");
	double all, kernel;

	require_kernel_sampling();
	test_runf(&o, 120,
		  "%s record -F 999 -o %s -- %s %s dd if=/dev/zero of=/dev/null bs=1M count=15000",
		  test_bin("sonde"), spool, test_prog("rusage_run"), usage);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.err, "kernel time not visible");
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(usage, NULL));
	double utime = rusage_value(text, "utime_ns ") / 1e9;
	double stime = rusage_value(text, "stime_ns ") / 1e9;
	int pid = (int)rusage_value(text, "pid ");
	free(text);

	test_runf(&o, 60, "%s report --folded --pid %d %s", test_bin("sonde"), pid, spool);
	ASSERT_INT(o.status, ==, 0);
	count_kernel_leaves(o.out, &all, &kernel);
	test_output_free(&o);
	all /= 999;
	kernel /= 999;
	printf("dd: utime %.3f s, stime %.3f s; samples %.3f s, of which [kernel] %.3f s\n", utime,
	       stime, all, kernel);
	ASSERT_DOUBLE_NEAR(all, utime + stime, 0.15 * (utime + stime) + 0.02);
	ASSERT_DOUBLE_NEAR(kernel, stime, 0.15 * stime + 0.02);
}

/* Above 10 kHz kernel time is not sampled by default (a sample's own interrupt would be
 * sampled as kernel time, and at the kernel's maximum rate the samples sampled each other
 * while the target starved): the summary and the report say so and why. 10 kHz itself
 * samples it, and --kernel asks for it at any rate. */
TEST_TIMEOUT(kernel_time_not_sampled_by_default_above_10_khz, 120)
{
	const char *spool = test_path("fast.spool");
	struct test_output o;

	require_kernel_sampling();
	test_runf(&o, 60, "%s record -F 20000 -o %s -- %s 0.2cpu", test_bin("sonde"), spool,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "kernel: kernel time not visible (not sampled above 10000 Hz");
	ASSERT_NOT_CONTAINS(o.err, "warning");
	test_output_free(&o);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "kernel time not visible: recorded above 10000 Hz");
	test_output_free(&o);

	test_runf(&o, 60, "%s record -F 10000 -o %s -- %s 0.2cpu", test_bin("sonde"), spool,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples in the kernel (under [kernel] frames)");
	test_output_free(&o);
	test_runf(&o, 60, "%s record --kernel -F 20000 -o %s -- %s 0.2cpu", test_bin("sonde"),
		  spool, test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.err, "kernel time not visible");
	ASSERT_CONTAINS(o.err, "samples in the kernel");
	test_output_free(&o);
}
