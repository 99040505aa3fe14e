/* Files at paths anyone can create, read by the symbolizer (often as root): a FIFO, a
 * symbolic link, a sparse giant and another user's file in place of a perf map or a
 * module, each refused promptly, counted, and without the memory a read would take.
 * Every test has a short timeout: on a FIFO, an open(2) without O_NONBLOCK never returns. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/symbolize.h>

#include "../test.h"
#include "../util.h"
#include "client_util.h"
#include "pftrace_util.h"
#include "sec_util.h"
#include "svc_util.h"

static struct sonde_symbolizer *symbolizer(void)
{
	struct sonde_symbolizer_opts o = {
		.sz = sizeof(o), .perf_map_dir = test_tmpdir(), .buildid_cache_dir = ""};

	return ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
}

static const char *map_of(pid_t pid)
{
	char name[64];

	snprintf(name, sizeof(name), "perf-%d.map", (int)pid);
	return test_path(name);
}

static const char *raw(struct sonde_symbolizer *s, pid_t pid, uint64_t addr)
{
	static struct sonde_sym_frame f[2];

	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize_raw(s, (uint32_t)pid, addr, f, 2)), ==, 1);
	return f[0].name;
}

static struct sonde_symbolizer_stats stats(const struct sonde_symbolizer *s)
{
	struct sonde_symbolizer_stats st = {.sz = sizeof(st)};

	ASSERT_OK(sonde_symbolizer__get_stats(s, &st));
	return st;
}

/* Peak RSS since the last reset_peak, in KiB. */
static long peak_kib(void)
{
	char *text = ASSERT_NOT_NULL(test_read_file("/proc/self/status", NULL));
	const char *at = strstr(text, "VmHWM:");
	long kib = at ? atol(at + 6) : -1;

	free(text);
	ASSERT_INT(kib, >, 0);
	return kib;
}

static void reset_peak(void)
{
	test_write_file("/proc/self/clear_refs", "5", 1);
}

static void sparse(const char *path, off_t size, const char *head)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ASSERT_INT(fd, >=, 0);
	ASSERT_INT(write(fd, head, strlen(head)), ==, (long long)strlen(head));
	ASSERT_OK(ftruncate(fd, size));
	close(fd);
}

TEST_TIMEOUT(sym_hostile_perf_map_fifo_is_not_opened, 20)
{
	struct sonde_symbolizer *s = symbolizer();

	ASSERT_OK(mkfifo(map_of(4242), 0666));
	ASSERT_STR_EQ(raw(s, 4242, 0x1000), "0x1000");
	ASSERT_STR_EQ(raw(s, 4242, 0x1000), "0x1000");
	/* one refusal for the file, not one per lookup */
	ASSERT_UINT(stats(s).refused_not_regular, ==, 1);
	sonde_symbolizer__free(s);
}

/* A symbolic link is no perf map, wherever it points: to /dev/zero, or to a real map
 * (which would let anyone name another process's code). */
TEST_TIMEOUT(sym_hostile_perf_map_symlink_is_not_followed, 20)
{
	struct sonde_symbolizer *s = symbolizer();
	const char *real = test_path("real.map");

	ASSERT_OK(symlink("/dev/zero", map_of(4242)));
	test_write_file(real, "1000 100 spoofed_name\n", 22);
	ASSERT_OK(symlink(real, map_of(4243)));
	ASSERT_STR_EQ(raw(s, 4242, 0x1000), "0x1000");
	ASSERT_STR_EQ(raw(s, 4243, 0x1000), "0x1000");
	ASSERT_UINT(stats(s).refused_symlink, ==, 2);
	sonde_symbolizer__free(s);
}

/* A 768 MiB sparse map is refused by the cap without being read; a 60 MiB one under the
 * cap, one endless line, is read a piece at a time: neither costs its size in memory. */
TEST_TIMEOUT(sym_hostile_perf_map_sparse_giant_costs_no_memory, 60)
{
	struct sonde_symbolizer *s = symbolizer();
	long before;

	sparse(map_of(4242), 768 << 20, "1000 100 first_fn\n");
	sparse(map_of(4243), 60 << 20, "1000 100 kept_fn\n2000 10 ");
	reset_peak();
	before = peak_kib();
	ASSERT_STR_EQ(raw(s, 4242, 0x1000), "0x1000");
	ASSERT_UINT(stats(s).refused_too_big, ==, 1);
	ASSERT_STR_EQ(raw(s, 4243, 0x1000), "kept_fn");
	ASSERT_STR_EQ(raw(s, 4243, 0x2000), "0x2000"); /* its name never ends: skipped */
	printf("peak RSS grew by %ld KiB\n", peak_kib() - before);
	ASSERT_INT(peak_kib() - before, <, 16 << 10);
	sonde_symbolizer__free(s);
}

/* A child that sleeps as uid until killed. */
static pid_t idle_as(uid_t uid)
{
	pid_t pid = fork();

	ASSERT(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(uid) < 0)
			_exit(99);
		pause();
		_exit(0);
	}
	/* until it has switched: the owner is looked up once */
	for (int i = 0; i < 500; i++) {
		char path[64];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d", (int)pid);
		if (stat(path, &st) == 0 && st.st_uid == uid)
			return pid;
		usleep(10000);
	}
	FAIL("child %d did not become uid %d", (int)pid, (int)uid);
}

static void own_map(pid_t pid, uid_t owner)
{
	test_write_file(map_of(pid), "1000 100 jit_fn\n", 16);
	ASSERT_OK(chown(map_of(pid), owner, owner));
}

/* A map counts when root or the process's own user owns it: nobody's map does not name a
 * root process, another user's does not name nobody's process. */
TEST_TIMEOUT(sym_hostile_perf_map_of_another_user_is_ignored, 30)
{
	sec_require_root();
	struct sonde_symbolizer *s = symbolizer();
	pid_t mine = idle_as(SEC_NOBODY), other = idle_as(SEC_NOBODY);

	own_map(getpid(), SEC_NOBODY);
	own_map(mine, SEC_NOBODY);
	own_map(other, 1234);
	ASSERT_STR_EQ(raw(s, getpid(), 0x1000), "0x1000");
	ASSERT_STR_EQ(raw(s, mine, 0x1000), "jit_fn");
	ASSERT_STR_EQ(raw(s, other, 0x1000), "0x1000");
	ASSERT_UINT(stats(s).refused_owner, ==, 2);
	kill(mine, SIGKILL);
	kill(other, SIGKILL);
	test_wait(mine, 10);
	test_wait(other, 10);
	sonde_symbolizer__free(s);
}

/* A module whose recorded path is now a FIFO, or a link to /dev/zero: the frame falls back
 * to module+offset at once. */
TEST_TIMEOUT(sym_hostile_module_path_fifo_falls_back, 20)
{
	struct sonde_symbolizer *s = symbolizer();
	const char *fifo = test_path("libfifo.so"), *link = test_path("libzero.so");
	struct sonde_sym_frame f[4];

	ASSERT_OK(mkfifo(fifo, 0666));
	ASSERT_OK(symlink("/dev/zero", link));
	struct sonde_sym_module m = {.pid = (uint32_t)getpid(),
				     .start = 0x10000,
				     .end = 0x20000,
				     .inode = 1,
				     .path = fifo};
	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x1234, f, 4)), ==, 1);
	ASSERT_STR_EQ(f[0].name, "libfifo.so+0x1234");
	m.path = link;
	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x1234, f, 4)), ==, 1);
	ASSERT_STR_EQ(f[0].name, "libzero.so+0x1234");
	struct sonde_symbolizer_stats st = stats(s);
	ASSERT_UINT(st.refused_not_regular, >=, 1);
	ASSERT_UINT(st.refused_symlink, >=, 1);
	sonde_symbolizer__free(s);
}

/* ---- a JIT target running as nobody puts a FIFO where its perf map belongs ---- */

static char fifo_map[64]; /* the map jit_spin made */

static void remove_fifo_map(void)
{
	if (fifo_map[0])
		unlink(fifo_map);
}

/* tests/progs/jit_spin as nobody, spinning in anonymous code after making /tmp/perf-PID.map
 * a FIFO or a sparse giant (mode "fifo", "sparse"; removed when the test process ends,
 * however it ends). */
static pid_t spawn_jit_with_map(const char *seconds, const char *mode)
{
	const char *prog = test_copy_for_anyone(test_prog("jit_spin"));
	struct stat st;
	pid_t pid = fork();

	ASSERT(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, STDOUT_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(SEC_NOBODY) < 0)
			_exit(99);
		execl(prog, "jit_spin", seconds, mode, (char *)NULL);
		_exit(98);
	}
	snprintf(fifo_map, sizeof(fifo_map), "/tmp/perf-%d.map", (int)pid);
	atexit(remove_fifo_map);
	for (int i = 0; i < 500 && lstat(fifo_map, &st) < 0; i++)
		usleep(10000);
	ASSERT_OK(lstat(fifo_map, &st));
	ASSERT(strcmp(mode, "fifo") ? st.st_size == 768 << 20 : S_ISFIFO(st.st_mode));
	return pid;
}

static size_t session_samples(const char *csock, pid_t pid, const char *name)
{
	const char *cfgfile = test_path("cfg.txt"), *out = test_path(name);
	struct test_output o;
	struct pft_trace t;
	char cfg[1024];
	size_t len, n = 0;

	snprintf(cfg, sizeof(cfg),
		 "buffers { size_kb: 8192 }\nduration_ms: 1500\n"
		 "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
		 "  timebase { frequency: 199 } callstack_sampling { scope { target_pid: %d } }\n"
		 "  ring_buffer_read_period_ms: 50 } } }\n",
		 (int)pid);
	test_write_file(cfgfile, cfg, strlen(cfg));
	/* a hang in linux.perf becomes this deadline, not the test's timeout */
	test_runf(&o, 30, "%s trace --socket %s --txt -c %s -o %s", test_bin("sonde"), csock,
		  cfgfile, out);
	if (o.status != 0)
		FAIL("sonde trace exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(out, &len));
	pft_decode(data, len, &t);
	free(data);
	for (size_t i = 0; i < t.n_samples; i++)
		n += t.samples[i].pid == (uint32_t)pid;
	pft_free(&t);
	return n;
}

/* Root's sonded profiles nobody's JIT process, whose perf map is a FIFO: the session ends
 * with samples, the next one too, and sonded still stops on SIGTERM. */
TEST_EXCLUSIVE(perfds_fifo_perf_map_of_target_does_not_stall_linux_perf, 180)
{
	struct sonded d;
	size_t first, second;

	sec_require_root();
	test_require_perf();
	pid_t target = spawn_jit_with_map("60", "fifo");
	chmod(test_tmpdir(), 0755);
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	first = session_samples(d.csock, target, "first.pftrace");
	second = session_samples(d.csock, target, "second.pftrace");
	printf("samples: %zu, then %zu\n", first, second);
	sonded_stop(&d);
	kill(target, SIGKILL);
	test_wait(target, 10);
	ASSERT_UINT(first, >=, 20);
	ASSERT_UINT(second, >=, 20);
}

static long status_kib(pid_t pid, const char *field)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	char *text = ASSERT_NOT_NULL(test_read_file(path, NULL));
	const char *at = strstr(text, field);
	long kib = at ? atol(at + strlen(field)) : -1;
	free(text);
	ASSERT_INT(kib, >, 0);
	return kib;
}

/* The same process with a 768 MiB sparse perf map: the probes refuse it by its size, so
 * neither their peak nor their resident memory after the session grows by anything like
 * it (they read the whole file into memory, and kept a copy of the one endless name). */
TEST_EXCLUSIVE(perfds_sparse_perf_map_of_target_costs_sonded_no_memory, 180)
{
	struct sonded d;

	sec_require_root();
	test_require_perf();
	pid_t target = spawn_jit_with_map("60", "sparse");
	chmod(test_tmpdir(), 0755);
	sonded_start(&d, NULL);
	client_wait_data_source(d.csock, "linux.perf");
	pid_t probes = sonded_probes_pid(&d, 0, 10);
	long before = status_kib(probes, "VmRSS:");
	size_t n = session_samples(d.csock, target, "sparse.pftrace");
	long peak = status_kib(probes, "VmHWM:"), after = status_kib(probes, "VmRSS:");
	printf("%zu samples; probes RSS %ld KiB before, %ld after, peak %ld\n", n, before,
	       after, peak);
	sonded_stop(&d);
	kill(target, SIGKILL);
	test_wait(target, 10);
	ASSERT_UINT(n, >=, 20);
	ASSERT_INT(peak - before, <, 128 << 10);
	ASSERT_INT(after - before, <, 64 << 10);
}

/* Root's `sonde report` and `sonde convert` of a recording of that process finish, and
 * say that a file was ignored. */
TEST_TIMEOUT(sym_hostile_report_convert_with_fifo_perf_map, 180)
{
	const char *spool = test_path("jit.spool"), *folded = test_path("jit.folded");
	struct test_output o;
	char pid_arg[16];

	sec_require_root();
	test_require_perf();
	pid_t target = spawn_jit_with_map("60", "fifo");
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)target);
	test_runf(&o, 60, "%s record -q -F 199 -d 1.5 -p %s -o %s", test_bin("sonde"), pid_arg,
		  spool);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	test_runf(&o, 30, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "1 file ignored");
	ASSERT_CONTAINS(o.err, fifo_map);
	test_output_free(&o);
	test_runf(&o, 30, "%s convert %s -o %s --format folded", test_bin("sonde"), spool, folded);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "ignored: not a regular file");
	test_output_free(&o);
	kill(target, SIGKILL);
	test_wait(target, 10);
}
