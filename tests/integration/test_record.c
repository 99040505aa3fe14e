/* sonde record and the recorder API, end to end: real perf events on the split program,
 * read back with the spool reader. */
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/log.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"

struct split_stats {
	uint64_t samples;
	uint64_t deep;	   /* stacks with >= 4 frames inside the split binary */
	uint64_t in_split; /* samples whose leaf is in the split binary */
	uint64_t first_ns, start_ns;
	bool split_has_build_id;
};

static bool module_is_split(const struct sonde_spool *s, uint32_t id, bool *has_build_id)
{
	struct sonde_spool_module m;

	if (id == 0 || sonde_spool__get_module(s, id, &m) < 0)
		return false;
	const char *p = m.def.path;
	size_t n = strlen(p);
	bool yes = n >= 6 && strcmp(p + n - 6, "/split") == 0;
	if (yes && has_build_id)
		*has_build_id = m.def.build_id_len > 0;
	return yes;
}

static void analyze(const struct sonde_spool *s, struct split_stats *st)
{
	struct sonde_spool_info info;
	uint32_t frames[64];

	memset(st, 0, sizeof(*st));
	sonde_spool__get_info(s, &info);
	st->samples = info.samples;
	st->first_ns = info.first_time_ns;
	st->start_ns = info.header.start_monotonic_ns;
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		int depth = ASSERT_OK(sonde_spool__get_stack(s, smp.stack, frames, 64));
		int n_split = 0;
		for (int k = 0; k < depth && k < 64; k++) {
			struct sonde_spool_frame f;
			ASSERT_OK(sonde_spool__get_frame(s, frames[k], &f));
			if (module_is_split(s, f.module, &st->split_has_build_id)) {
				n_split++;
				st->in_split += k == 0;
			}
		}
		/* compute_*, path_*, run and main: compute_* sets up no frame, so this needs the
		 * CFI unwinder (frame pointers alone would skip path_*). */
		st->deep += n_split >= 4;
	}
}

/* The rings were merged in time order: every timed record of the file, in file order. */
static void check_file_order(const char *path)
{
	size_t len, off = 0;
	uint8_t *buf = (uint8_t *)test_read_file(path, &len);
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	uint64_t last = 0, n = 0;
	int got;

	ASSERT_NOT_NULL(buf);
	while (off < len &&
	       (got = sonde_spool_decoder__decode(d, buf + off, len - off, &rec)) > 0) {
		uint64_t t = 0;
		if (rec.type == SONDE_SPOOL_REC_SAMPLE) {
			t = rec.sample.time_ns;
			n++;
		} else if (rec.type == SONDE_SPOOL_REC_MODULE) {
			t = rec.module.time_ns;
		}
		/* not a THREAD's: a task forked in the recording is defined at its fork,
		 * earlier than the record that needed the definition (docs/spool.md) */
		if (t) {
			ASSERT_UINT(t, >=, last);
			last = t;
		}
		off += (size_t)got;
	}
	ASSERT_UINT(off, ==, len);
	ASSERT_UINT(n, >, 0);
	sonde_spool_decoder__free(d);
	free(buf);
}

static void analyze_file(const char *path, struct split_stats *st)
{
	check_file_order(path);
	uint64_t off = 0;
	struct sonde_spool *s = sonde_spool__open(path, &off);

	if (!s)
		FAIL("cannot read %s: %s at offset %llu", path, sonde_strerror(errno),
		     (unsigned long long)off);
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	ASSERT(info.complete);
	analyze(s, st);
	sonde_spool__close(s);
}

TEST_TIMEOUT(record_launched_split_unwinds_to_main, 120)
{
	struct test_output o;
	struct split_stats st;
	const char *out = test_path("split.spool");

	test_require_perf();
	/* 1 s of split's CPU time: as many samples on a loaded machine as on a quiet one */
	test_runf(&o, 100, "%s record -F 999 -o %s -- %s 1cpu", test_bin("sonde"), out,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples");
	ASSERT_CONTAINS(o.err, "event ");
	analyze_file(out, &st);
	printf("samples %llu, leaf in split %llu, main reached %llu\n",
	       (unsigned long long)st.samples, (unsigned long long)st.in_split,
	       (unsigned long long)st.deep);
	ASSERT_UINT(st.samples, >=, 20);
	ASSERT(st.split_has_build_id);
	/* Nearly every sample is in compute_* with path_*, run and main above it. */
	ASSERT_UINT(st.in_split * 10, >=, st.samples * 9);
	ASSERT_UINT(st.deep * 10, >=, st.samples * 9);
	test_output_free(&o);
}

/* A process that waits at a gate, then exec's split for 0.5 s of its CPU time: the test lets
 * it through once sonde record has attached it, so that the recording holds its whole run
 * however slowly a loaded machine starts either (a split of 2 s of wall time, attached
 * 200 ms after its start, could be over before a loaded recorder had attached it). */
static pid_t spawn_held_split(struct test_gate *g, const char *name)
{
	test_gate_open(g, name);
	const char *argv[] = {"/bin/sh",
			      "-c",
			      "read go <\"$2\"; exec \"$0\" \"$1\"",
			      test_prog("split"),
			      "0.5cpu",
			      g->path,
			      NULL};
	return test_spawn(argv);
}

/* Waits for sonde record to publish its spool under its name, which it does once it has
 * attached every process it was given. */
static void await_published(const char *spool)
{
	for (double end = test_now() + 60; access(spool, F_OK) != 0; usleep(10000))
		if (test_now() > end)
			FAIL("sonde record did not start recording into %s in 60 s", spool);
}

TEST_TIMEOUT(record_attach_by_pid_until_exit, 120)
{
	struct split_stats st;
	struct test_gate g;
	char out[PATH_MAX], pid_arg[16];

	test_require_perf();
	snprintf(out, sizeof(out), "%s", test_path("pid.spool"));
	pid_t pid = spawn_held_split(&g, "gate");
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)pid);
	const char *rec[] = {test_bin("sonde"), "record", "-q", "-F", "999", "-o", out, "-p",
			     pid_arg,		NULL};
	pid_t sonde = test_spawn(rec);
	await_published(out);
	test_gate_pass(&g);
	/* It was stopped for attaching, and resumed: it ran to its normal end, and so did the
	 * recording. */
	ASSERT_INT(test_wait(pid, 60), ==, 0);
	ASSERT_INT(test_wait(sonde, 60), ==, 0);
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >=, 20);
	ASSERT_UINT(st.deep * 10, >=, st.samples * 9);
	test_gate_close(&g);
}

TEST_TIMEOUT(record_on_exec_samples_from_the_start, 120)
{
	struct test_output o;
	struct split_stats st;
	const char *out = test_path("exec.spool");

	test_require_perf();
	/* A short run, 0.15 s of its CPU time sampled every 0.5 ms of it (cpu-clock counts the
	 * thread's own time, however loaded the machine): sampled from exec on, every 0.5 ms
	 * of the run is, about 300 samples and a few more for its start; a later attach would
	 * have missed the start of the run, 30 samples for every 15 ms of its CPU time. The
	 * program's mappings are learnt from the exec itself (no /proc/PID/maps was read:
	 * the process did not exist yet). */
	test_runf(&o, 100, "%s record -e cpu-clock -c 500000 -o %s -- %s 0.15cpu",
		  test_bin("sonde"), out, test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	analyze_file(out, &st);
	printf("%llu samples, %llu deep, the first %.1f ms after the start\n",
	       (unsigned long long)st.samples, (unsigned long long)st.deep,
	       (st.first_ns - st.start_ns) / 1e6);
	ASSERT_UINT(st.samples, >=, 270);
	ASSERT_UINT(st.deep * 10, >=, st.samples * 9);
	ASSERT(st.split_has_build_id);
	test_output_free(&o);
}

/* Like perf, the processes a launched command forks are recorded (a shell script's
 * commands); --no-inherit records the command's own threads only. */
TEST_TIMEOUT(record_follows_children_by_default, 120)
{
	struct test_output o;
	struct split_stats st;
	char script[512];
	const char *out = test_path("kids.spool");

	test_require_perf();
	/* "; true": the shell forks split instead of exec'ing it. */
	snprintf(script, sizeof(script), "%s 0.5; true", test_prog("split"));
	const char *argv[] = {
		test_bin("sonde"), "record", "-o", out, "--", "sh", "-c", script, NULL};
	test_run(&o, 100, argv);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "2 processes (1 followed)");
	test_output_free(&o);
	analyze_file(out, &st);
	ASSERT_UINT(st.in_split, >=, 10);

	const char *argv2[] = {test_bin("sonde"),
			       "record",
			       "--no-inherit",
			       "-o",
			       out,
			       "--",
			       "sh",
			       "-c",
			       script,
			       NULL};
	test_run(&o, 100, argv2);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, " 1 process, ");
	test_output_free(&o);
	/* The shell itself may not have run long enough for a sample. */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(out, NULL));
	analyze(s, &st);
	sonde_spool__close(s);
	ASSERT_UINT(st.in_split, ==, 0);
}

/* The pid a program wrote to path, as a line (waits for the whole line: a shell's
 * `echo $$ > FILE` creates the file before it writes). */
static pid_t read_pid_file(const char *path)
{
	for (int i = 0; i < 5000; i++) {
		char *text = test_read_file(path, NULL);
		pid_t pid = text && strchr(text, '\n') ? (pid_t)atoi(text) : 0;
		free(text);
		if (pid > 0)
			return pid;
		usleep(1000);
	}
	FAIL("%s was never written", path);
}

/* watch_child's child, spinning until told, recorded with `sonde record -F 999 -o out
 * FLAG CHILD` until the spool holds 10 samples (not for a -d, which a loaded recorder may
 * spend starting), then interrupted; the child is let end once the recorder has. Returns
 * what the recorder wrote on stderr, and the watcher's report in *seen (both malloc'd). */
static char *record_watched_child(const char *flag, const char *out, char **seen)
{
	const char *pidfile = test_path("child.pid"), *report = test_path("watch.txt"),
		   *errf = test_path("watch.err");
	const char *argv[] = {test_prog("watch_child"), pidfile, report, "-", NULL};
	char cmd[8400];
	int in;

	pid_t watcher = test_spawn_fed(&in, argv);
	pid_t child = read_pid_file(pidfile);
	snprintf(cmd, sizeof(cmd), "exec %s record -F 999 -o %s %s %d 2>%s", test_bin("sonde"),
		 out, flag, (int)child, errf);
	const char *rec[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t r = test_spawn(rec);
	for (double end = test_now() + 60; test_spool_samples(out) < 10; usleep(20 * 1000))
		ASSERT(test_now() < end);
	kill(r, SIGINT);
	int status = test_wait(r, 30);
	char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	if (status != 0)
		FAIL("sonde record %s exited %d:\n%s", flag, status, err);
	close(in); /* the child's word to end */
	ASSERT_INT(test_wait(watcher, 30), ==, 0);
	*seen = ASSERT_NOT_NULL(test_read_file(report, NULL));
	return err;
}

/* Attaching stops the target (nothing runs unobserved meanwhile) with ptrace-stops, which
 * its parent's waitpid does not see: a shell would otherwise print "Stopped" and take
 * the terminal back. */
TEST_TIMEOUT(record_pid_stop_is_invisible_to_the_parent, 120)
{
	struct split_stats st;
	const char *out = test_path("watched.spool");
	char *seen;

	test_require_perf();
	char *err = record_watched_child("-p", out, &seen);
	ASSERT(!strstr(err, "cannot stop")); /* the stop was not skipped */
	free(err);
	ASSERT_STR_EQ(seen, "stopped 0 continued 0 exit 0\n");
	free(seen);
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >=, 10);
}

/* The same for a thread attached alone (-t): it alone is seized and interrupted. */
TEST_TIMEOUT(record_tid_stop_is_invisible_to_the_parent, 120)
{
	struct split_stats st;
	const char *out = test_path("watched_tid.spool");
	char *seen;

	test_require_perf();
	char *err = record_watched_child("-t", out, &seen);
	ASSERT(!strstr(err, "cannot stop")); /* the stop was not skipped */
	free(err);
	ASSERT_STR_EQ(seen, "stopped 0 continued 0 exit 0\n");
	free(seen);
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >=, 10);
}

/* A process sonde may not ptrace (here: one traced already) is attached running, after a
 * one-line note, instead of failing. */
TEST_TIMEOUT(record_pid_without_ptrace_attaches_running, 120)
{
	struct split_stats st;
	const char *out = test_path("traced.spool"), *errf = test_path("traced.err");
	char cmd[8400];

	test_require_perf();
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		/* Traced by this test: another tracer's PTRACE_SEIZE gets EPERM. */
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
			_exit(1);
		execl(test_prog("split"), "split", "300", (char *)NULL);
		_exit(127);
	}
	int status;
	/* The exec stops it once (SIGTRAP to its tracer); let it run on. */
	ASSERT_INT(waitpid(child, &status, 0), ==, child);
	ASSERT(WIFSTOPPED(status));
	ASSERT_OK(ptrace(PTRACE_CONT, child, NULL, NULL));
	/* interrupted once it has recorded, not after -d 1, which a loaded recorder may spend
	 * starting and a loaded target off the CPU */
	snprintf(cmd, sizeof(cmd), "exec %s record -F 999 -o %s -p %d 2>%s", test_bin("sonde"),
		 out, (int)child, errf);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t rec = test_spawn(argv);
	for (double end = test_now() + 60; test_spool_samples(out) < 10; usleep(20 * 1000))
		ASSERT(test_now() < end);
	kill(rec, SIGINT);
	ASSERT_INT(test_wait(rec, 30), ==, 0);
	char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	ASSERT_CONTAINS(err, "sonde record: warning: cannot stop pid ");
	ASSERT_CONTAINS(err, "attaching it running");
	free(err);
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >=, 10);
}

/* A kernel thread has no user stacks: refused at once, not after a stop that never comes. */
TEST(record_kernel_thread_is_refused_at_once)
{
	struct test_output o;
	char *comm = test_read_file("/proc/2/comm", NULL);
	bool kthreadd = comm && strcmp(comm, "kthreadd\n") == 0;

	free(comm);
	if (!kthreadd)
		SKIP("pid 2 is not kthreadd here (a pid namespace)");
	test_require_perf();
	double t0 = test_now();
	test_runf(&o, 30, "%s record -o %s -p 2 -d 10", test_bin("sonde"), test_path("k"));
	ASSERT(test_now() - t0 < 1);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde record: pid 2 is a kernel thread (kthreadd): it has no user "
			     "stacks to sample\n");
	ASSERT(access(test_path("k"), F_OK) != 0);
	test_output_free(&o);
	/* The same as a second -p. */
	const char *argv[] = {"/bin/sleep", "20", NULL};
	pid_t sleeper = test_spawn(argv);
	test_runf(&o, 30, "%s record -o %s -p %d -p 2 -d 10", test_bin("sonde"), test_path("k"),
		  (int)sleeper);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "pid 2 is a kernel thread");
	test_output_free(&o);
	kill(sleeper, SIGKILL);
	test_wait(sleeper, 10);
}

static char full_mount[4096];

static void unmount_full(void)
{
	if (full_mount[0])
		umount2(full_mount, MNT_DETACH);
}

/* A filesystem of 256 KiB, all but 24 KiB of it taken: a recording runs out of space. */
static const char *mount_nearly_full(void)
{
	snprintf(full_mount, sizeof(full_mount), "%s", test_path("small"));
	ASSERT_OK(mkdir(full_mount, 0755));
	if (mount("tmpfs", full_mount, "tmpfs", 0, "size=256k") < 0) {
		int err = errno;
		full_mount[0] = 0;
		SKIP("cannot mount a small tmpfs: %s", strerror(err));
	}
	atexit(unmount_full); /* before the test directory is removed */
	char filler[4200];
	snprintf(filler, sizeof(filler), "%s/filler", full_mount);
	size_t len = (256 - 24) * 1024;
	char *zeros = calloc(1, len);
	test_write_file(filler, zeros, len);
	free(zeros);
	return full_mount;
}

/* A recording that fails (here: the disk is full) ends the command it launched as
 * --duration would, keeps what it wrote, and says how much that is. */
TEST_TIMEOUT(record_full_disk_ends_the_command, 120)
{
	struct test_output o;
	char out[4200], script[512], want[4400];
	const char *pidfile = test_path("cmd.pid");

	test_require_perf();
	if (geteuid() != 0)
		SKIP("needs root to mount a small filesystem");
	snprintf(out, sizeof(out), "%s/x.spool", mount_nearly_full());
	snprintf(script, sizeof(script), "echo $$ > %s; exec %s 60", pidfile, test_prog("split"));
	const char *argv[] = {test_bin("sonde"),
			      "record",
			      "-F",
			      "4000",
			      "-o",
			      out,
			      "--",
			      "sh",
			      "-c",
			      script,
			      NULL};
	double t0 = test_now();
	test_run(&o, 60, argv);
	ASSERT(test_now() - t0 < 30);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "No space left on device");
	ASSERT_CONTAINS(o.err, "command: killed by signal 15 (Terminated) after the recording "
			       "failed");
	pid_t pid = read_pid_file(pidfile);
	ASSERT(kill(pid, 0) < 0 && errno == ESRCH); /* gone, and reaped */
	/* What the spool holds is what the summary says was kept. */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(out, NULL));
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	sonde_spool__close(s);
	ASSERT_UINT(info.samples, >, 0);
	snprintf(want, sizeof(want), "recording failed: %llu samples kept in %s",
		 (unsigned long long)info.samples, out);
	ASSERT_CONTAINS(o.err, want);
	test_output_free(&o);

	/* /dev/full, written in place, refuses the first write: the same end, and an output
	 * that cannot be read back says so. */
	unlink(pidfile);
	const char *argv2[] = {
		test_bin("sonde"), "record", "-o", "/dev/full", "--", "sh", "-c", script, NULL};
	test_run(&o, 60, argv2);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "No space left on device");
	ASSERT_CONTAINS(o.err, "/dev/full cannot be read back");
	ASSERT_CONTAINS(o.err, "after the recording failed");
	/* Ended so early that the shell may not have written its pid: then nothing to check. */
	char *text = test_read_file(pidfile, NULL);
	if (text && strchr(text, '\n'))
		ASSERT(kill((pid_t)atoi(text), 0) < 0 && errno == ESRCH);
	free(text);
	test_output_free(&o);
}

/* -o - writes the spool to standard output; the command's own output goes to stderr. */
TEST_TIMEOUT(record_output_dash_is_stdout, 120)
{
	struct test_output o;
	struct split_stats st;
	char script[512];

	test_require_perf();
	snprintf(script, sizeof(script), "echo from-the-command; exec %s 0.5", test_prog("split"));
	const char *argv[] = {
		test_bin("sonde"), "record", "-o", "-", "--", "sh", "-c", script, NULL};
	test_run(&o, 100, argv);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "from-the-command\n");
	ASSERT_CONTAINS(o.err, "output standard output;");
	ASSERT(access("-", F_OK) != 0);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(o.out, o.out_len, NULL));
	analyze(s, &st);
	sonde_spool__close(s);
	ASSERT_UINT(st.in_split, >=, 10);
	test_output_free(&o);
}

/* An existing spool is kept as FILE.old, and the new one has its mode. */
TEST_TIMEOUT(record_output_keeps_the_old_spool, 120)
{
	struct test_output o;
	struct stat st;
	const char *out = test_path("again.spool");
	char old[4200];

	test_require_perf();
	snprintf(old, sizeof(old), "%s.old", out);
	test_write_file(out, "previous", 8);
	ASSERT_OK(chmod(out, 0600));
	test_runf(&o, 60, "%s record -q -o %s -- %s 0.2", test_bin("sonde"), out,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(old, NULL));
	ASSERT_STR_EQ(text, "previous");
	free(text);
	ASSERT_OK(stat(out, &st));
	ASSERT_INT(st.st_mode & 07777, ==, 0600);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(out, NULL));
	sonde_spool__close(s);
}

/* A device output is written in place, and a failed attach does not remove it (a
 * private null device: a regression must not take the machine's /dev/null with it). */
TEST_TIMEOUT(record_output_device_survives, 60)
{
	struct test_output o;
	struct stat st;
	const char *dev = test_path("null");

	test_require_perf();
	if (geteuid() != 0 || mknod(dev, S_IFCHR | 0666, makedev(1, 3)) < 0)
		SKIP("needs root to make a device node");
	test_runf(&o, 60, "%s record -q -o %s -- %s 0.2", test_bin("sonde"), dev,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	test_runf(&o, 30, "%s record -o %s -p 2147483000", test_bin("sonde"), dev);
	ASSERT_INT(o.status, ==, 1);
	test_output_free(&o);
	ASSERT_OK(lstat(dev, &st));
	ASSERT(S_ISCHR(st.st_mode));
}

/* A killed `record -o x.pftrace` leaves its recording in x.pftrace.spool, which record
 * named at the start; report and convert of x.pftrace say how to recover it. */
TEST_TIMEOUT(record_killed_trace_recording_is_recoverable, 120)
{
	struct test_output o;
	char trace[4200], spool[4300], script[512], hint[17400];
	const char *pidfile = test_path("cmd.pid");
	struct stat st;

	test_require_perf();
	snprintf(trace, sizeof(trace), "%s", test_path("x.pftrace"));
	snprintf(spool, sizeof(spool), "%s.spool", trace);
	snprintf(script, sizeof(script), "echo $$ > %s; exec %s 30", pidfile, test_prog("split"));
	const char *argv[] = {
		test_bin("sonde"), "record", "-o", trace, "--", "sh", "-c", script, NULL};
	pid_t sonde = test_spawn(argv);
	pid_t cmd = read_pid_file(pidfile);
	/* killed once the spool holds samples of split (it names compute_hot below), not
	 * 300 ms after its first 4 KiB, which a loaded machine may give split no CPU in */
	for (double end = test_now() + 60; test_spool_samples(spool) < 20; usleep(20 * 1000))
		ASSERT(test_now() < end);
	kill(sonde, SIGKILL);
	test_wait(sonde, 10);
	kill(cmd, SIGKILL); /* sonde's child, orphaned by the kill: reaped by init */
	ASSERT(access(trace, F_OK) != 0);

	snprintf(hint, sizeof(hint),
		 "%s was not finished; its recording is in %s: run 'sonde convert %s -o %s'\n",
		 trace, spool, spool, trace);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), trace);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, hint);
	test_output_free(&o);
	test_runf(&o, 60, "%s convert %s -o %s", test_bin("sonde"), trace, test_path("x.svg"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, hint);
	test_output_free(&o);

	/* The advice works: the spool, truncated, still converts. */
	test_runf(&o, 60, "%s convert %s -o %s", test_bin("sonde"), spool, trace);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	ASSERT_OK(stat(trace, &st));
	ASSERT(st.st_size > 0);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);

	/* A finished one says where it recorded and leaves no spool behind. */
	test_runf(&o, 60, "%s record -o %s -- %s 0.2", test_bin("sonde"), trace,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "sonde record: recording into ");
	test_output_free(&o);
	ASSERT(access(spool, F_OK) != 0);
	ASSERT_OK(stat(trace, &st));
}

TEST(record_missing_pid_is_a_clean_error)
{
	struct test_output o;

	test_require_perf();
	test_runf(&o, 30, "%s record -o %s -p 2147483000", test_bin("sonde"), test_path("x"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_STR_EQ(o.err, "sonde record: no such process: 2147483000\n");
	ASSERT(access(test_path("x"), F_OK) != 0); /* no empty spool left behind */
	test_output_free(&o);
}

/* A recorder made with a path that then fails removes only a file it created itself:
 * never a symlink (a device, a FIFO, a file) the caller pointed it at. The system-wide
 * constructor removed whatever was there (a symlink given as its path was gone after). */
TEST(record_constructor_failure_removes_only_its_own_file)
{
	const char *fresh = test_path("fresh.spool"), *target = test_path("target"),
		   *link = test_path("link.spool");
	int cpu = 1 << 20; /* no such CPU: refused before any event is opened */
	struct sonde_record_opts opts = {.sz = sizeof(opts), .cpus = &cpu, .n_cpus = 1};
	struct stat st;

	test_write_file(target, "kept\n", 5);
	ASSERT_OK(symlink(target, link));
	ASSERT(sonde_recorder__attach_system(fresh, &opts) == NULL);
	ASSERT(access(fresh, F_OK) != 0);
	ASSERT(sonde_recorder__attach_system(link, &opts) == NULL);
	ASSERT_OK(lstat(link, &st));
	ASSERT(S_ISLNK(st.st_mode));
	/* and the per-process one, for a process that does not exist */
	ASSERT(sonde_recorder__attach(2147483000, fresh, SONDE_ATTACH_STOP, NULL) == NULL);
	ASSERT(access(fresh, F_OK) != 0);
	ASSERT(sonde_recorder__attach(2147483000, link, SONDE_ATTACH_STOP, NULL) == NULL);
	ASSERT_OK(lstat(link, &st));
	ASSERT(S_ISLNK(st.st_mode));
}

TEST(record_missing_command_exits_127)
{
	struct test_output o;

	test_runf(&o, 30, "%s record -o %s -- nosuchcmd", test_bin("sonde"), test_path("x"));
	ASSERT_INT(o.status, ==, 127);
	ASSERT_STR_EQ(o.err, "sonde record: cannot run 'nosuchcmd': No such file or directory\n");
	test_output_free(&o);
}

TEST(record_frequency_above_kernel_max_names_it)
{
	struct test_output o;
	uint64_t max;
	char want[128];

	ASSERT_OK(sonde_recorder__max_frequency(&max));
	snprintf(want, sizeof(want), "kernel maximum is %llu Hz", (unsigned long long)max);
	test_runf(&o, 30, "%s record -F %llu -o %s -- %s 5", test_bin("sonde"),
		  (unsigned long long)max + 1, test_path("x"), test_prog("split"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, want);
	ASSERT_CONTAINS(o.err, "sonde record: ");
	test_output_free(&o);
}

TEST(record_unwritable_output_is_a_clean_error)
{
	struct test_output o;
	double t0 = test_now();

	test_runf(&o, 30, "%s record -o /nonexistent-dir/x.spool -- %s 10", test_bin("sonde"),
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err,
			"sonde record: cannot create /nonexistent-dir/x.spool: No such file");
	/* The suspended command was not left to run its 10 s. */
	ASSERT(test_now() - t0 < 5);
	test_output_free(&o);
}

TEST(record_usage_errors)
{
	struct test_output o;

	test_runf(&o, 30, "%s record", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "nothing to record");
	test_output_free(&o);
	test_runf(&o, 30, "%s record -F fast -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "-F wants");
	test_output_free(&o);
	test_runf(&o, 30, "%s record --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde record");
	test_output_free(&o);
	test_runf(&o, 30, "%s record --frq 99 -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde record: unknown option '--frq' (see 'sonde record --help')\n");
	test_output_free(&o);
}

TEST_TIMEOUT(record_passes_on_the_exit_status, 60)
{
	struct test_output o;

	test_require_perf();
	const char *argv[] = {test_bin("sonde"), "record", "-q", "-o",
			      test_path("x"),	 "--",	   "sh", "-c",
			      "exit 3",		 NULL};
	test_run(&o, 30, argv);
	ASSERT_INT(o.status, ==, 3);
	test_output_free(&o);
	const char *argv2[] = {test_bin("sonde"), "record", "-q", "-o",
			       test_path("x"),	  "--",	    "sh", "-c",
			       "kill -TERM $$",	  NULL};
	test_run(&o, 30, argv2);
	ASSERT_INT(o.status, ==, 128 + SIGTERM);
	test_output_free(&o);
}

TEST_TIMEOUT(record_cycles_request_falls_back_visibly, 60)
{
	struct test_output o;

	test_require_perf();
	test_runf(&o, 30, "%s record -e cycles -o %s -- %s 0.2", test_bin("sonde"), test_path("x"),
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	if (access("/sys/bus/event_source/devices/cpu", F_OK) == 0) {
		ASSERT_CONTAINS(o.err, "event cycles");
	} else {
		ASSERT_CONTAINS(o.err, "event cpu-clock (cycles unavailable: this machine exposes "
				       "no hardware PMU)");
		/* said when it happens, before the recording, not only in the summary */
		const char *warn = strstr(o.err, "sonde record: warning: cycles unavailable (this "
						 "machine exposes no hardware PMU): sampling "
						 "cpu-clock\n");
		ASSERT(warn != NULL);
		ASSERT(warn < strstr(o.err, " samples ("));
		ASSERT_NOT_CONTAINS(o.err, "No such file or directory");
	}
	test_output_free(&o);
	/* -q keeps the summary quiet, not the warning */
	test_runf(&o, 30, "%s record -q -e cycles -o %s -- %s 0.2", test_bin("sonde"),
		  test_path("x"), test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	if (access("/sys/bus/event_source/devices/cpu", F_OK) != 0)
		ASSERT_CONTAINS(o.err, "warning: cycles unavailable");
	test_output_free(&o);
	/* auto on a machine without a PMU goes straight to cpu-clock, without a failed try. */
	test_runf(&o, 30, "%s record -o %s -- %s 0.2", test_bin("sonde"), test_path("x"),
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	if (access("/sys/bus/event_source/devices/cpu", F_OK) != 0)
		ASSERT_NOT_CONTAINS(o.err, "cycles unavailable");
	test_output_free(&o);
}

/* The headline counts lost samples and lost records apart, as the loss line does: a ring
 * of one page at the highest rate loses, whatever the machine's load (how much the default
 * rings lose is bench/loss-at-defaults.sh's figure). */
TEST_TIMEOUT(record_summary_says_what_was_lost, 60)
{
	struct test_output o;
	unsigned long long written, samples, records, records2, samples2;

	test_require_perf();
	test_runf(&o, 50, "%s record -F max --ring-pages 1 -o %s -- %s 0.3cpu", test_bin("sonde"),
		  test_path("x"), test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	const char *head = strstr(o.err, " samples (");
	const char *loss = strstr(o.err, "  loss: ");
	if (!head || !loss ||
	    sscanf(head, " samples (%llu written; %llu samples and %llu records lost), ", &written,
		   &samples, &records) != 3 ||
	    sscanf(loss, "  loss: %llu records and %llu samples lost;", &records2, &samples2) != 2)
		FAIL("no headline or loss line:\n%s", o.err);
	printf("%s", o.err);
	ASSERT_UINT(records + samples, >, 0);
	ASSERT_UINT(records, ==, records2);
	ASSERT_UINT(samples, ==, samples2);
	test_output_free(&o);
}

/* -c N: a fixed period (cpu-clock counts nanoseconds: 1 ms is 1000 Hz); --call-graph fp
 * walks by frame pointers only; -g is accepted (stacks are always recorded). */
TEST_TIMEOUT(record_count_and_call_graph_options, 90)
{
	struct test_output o;
	const char *spool = test_path("period.spool");

	test_require_perf();
	/* 0.3 s of split's own CPU time, sampled every 1 ms of it: about 300 samples however
	 * little of the CPU a loaded machine leaves it */
	test_runf(&o, 60, "%s record -g -e cpu-clock -c 1000000 --call-graph fp -o %s -- %s 0.3cpu",
		  test_bin("sonde"), spool, test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "; a sample every 1000000 events, ");
	ASSERT_CONTAINS(o.err, "unwind: 0 frames by DWARF CFI");
	test_output_free(&o);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	sonde_spool__get_info(s, &in);
	ASSERT_UINT(in.header.sample_period_ns, ==, 1000000);
	ASSERT_UINT(in.samples, >, 50);
	sonde_spool__close(s);
	test_runf(&o, 30, "%s record --count 0 -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "-c wants a positive sample period");
	test_output_free(&o);
	test_runf(&o, 30, "%s record --call-graph lbr -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--call-graph wants dwarf or fp, not 'lbr'");
	test_output_free(&o);
	test_runf(&o, 30, "%s record --call-graph dwarf -q -o %s -- true", test_bin("sonde"),
		  test_path("x"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
}

TEST_TIMEOUT(record_sigint_finishes_cleanly, 60)
{
	struct split_stats st;
	const char *out = test_path("int.spool");
	const char *argv[] = {test_bin("sonde"),  "record", "-o", out, "--",
			      test_prog("split"), "30",	    NULL};

	test_require_perf();
	pid_t pid = test_spawn(argv);
	/* interrupted once it has recorded (a loaded or sanitized recorder takes a while to
	 * start the command and sample it), not after a fixed time */
	for (double end = test_now() + 30; test_spool_samples(out) < 10; usleep(50 * 1000))
		ASSERT(test_now() < end);
	kill(pid, SIGINT);
	/* The command got the signal too and its status is passed on: 128 + SIGINT. */
	ASSERT_INT(test_wait(pid, 20), ==, 128 + SIGINT);
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >=, 10);
}

/* As uid nobody, attaching to a root process must fail and say why. */
TEST_TIMEOUT(record_permission_denied_names_the_cause, 60)
{
	const char *argv[] = {"/bin/sleep", "20", NULL};
	const char *errfile = test_path("err.txt");
	char pidbuf[16];

	if (geteuid() != 0)
		SKIP("needs root to create a process another user cannot profile");
	pid_t target = test_spawn(argv);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)target);
	int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	ASSERT(fd >= 0);
	fchmod(fd, 0666);
	const char *sonde = test_copy_for_anyone(test_bin("sonde"));
	pid_t child = fork();
	if (child == 0) {
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		execl(sonde, "sonde", "record", "-o", "/dev/null", "-p", pidbuf, (char *)NULL);
		_exit(98);
	}
	close(fd);
	int status = test_wait(child, 30);
	char *err = test_read_file(errfile, NULL);
	char state[512] = "";
	snprintf(state, sizeof(state), "/proc/%d/stat", (int)target);
	char *stat = test_read_file(state, NULL);
	kill(target, SIGKILL);
	test_wait(target, 10);
	ASSERT_INT(status, ==, 1);
	ASSERT_CONTAINS(err, "sonde record: permission denied");
	ASSERT_CONTAINS(err, "perf_event_paranoid");
	ASSERT_CONTAINS(err, "CAP_PERFMON");
	/* One line, and the target was never stopped. */
	ASSERT(strchr(err, '\n') == err + strlen(err) - 1);
	ASSERT_NOT_CONTAINS(stat, ") T ");
	free(err);
	free(stat);
}

/* ---- the library API ---- */

struct membuf {
	uint8_t *data;
	size_t len, cap;
};

static int mem_write(void *ctx, const void *buf, size_t len)
{
	struct membuf *m = ctx;

	if (m->len + len > m->cap) {
		size_t cap = (m->cap + len) * 2;
		uint8_t *d = realloc(m->data, cap);
		if (!d)
			return -ENOMEM;
		m->data = d;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	return 0;
}

TEST_TIMEOUT(record_api_writer_and_launch, 120)
{
	char *argv[] = {(char *)test_prog("split"), "0.5cpu", NULL}; /* however loaded */
	struct membuf mem = {0};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 999, .stack_bytes = 4000};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct split_stats st;
	int status;

	test_require_perf();
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		sonde_launch__pid(l), mem_write, &mem, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_INT(sonde_recorder__epoll_fd(r), >=, 0);
	ASSERT_INT(sonde_recorder__process_is_active(r, sonde_launch__pid(l)), ==, 1);
	ASSERT_ERR(sonde_recorder__process_is_active(r, 1), -EINVAL);
	ASSERT_OK(sonde_launch__resume(l));
	uint64_t polled = 0;
	while (sonde_launch__wait(l, WNOHANG, &status) == 0) {
		struct sonde_record_poll pr = {.sz = sizeof(pr)};
		int n = ASSERT_OK(sonde_recorder__poll(r, 50, &pr));
		ASSERT_UINT(pr.samples, ==, (uint64_t)n);
		polled += pr.samples;
	}
	ASSERT_INT(WEXITSTATUS(status), ==, 0);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	ASSERT_ERR(sonde_recorder__finish(r, NULL), -SONDE_E_STATE);
	sonde_recorder__free(r);
	sonde_launch__free(l);

	ASSERT_STR_EQ(sum.event, "cpu-clock");
	ASSERT_UINT(sum.stack_bytes, ==, 4000);
	ASSERT_UINT(sum.frequency, ==, 999);
	ASSERT_UINT(sum.samples, >=, polled);
	ASSERT_UINT(sum.samples, >=, 10);
	ASSERT_UINT(sum.samples_written + sum.empty_stacks, ==, sum.samples);
	ASSERT_UINT(sum.duration_ns, >=, 400000000);
	ASSERT_UINT(sum.rings, >=, 1);
	struct sonde_spool *s = sonde_spool__open_mem(mem.data, mem.len, NULL);
	ASSERT_NOT_NULL(s);
	analyze(s, &st);
	ASSERT_UINT(st.samples, ==, sum.samples_written);
	ASSERT_UINT(st.deep * 10, >=, st.samples * 9);
	sonde_spool__close(s);
	free(mem.data);
}

TEST(record_api_rejects_bad_options)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 0};
	uint64_t max;

	sonde_log__set_level(SONDE_LOG_OFF);
	ASSERT_OK(sonde_recorder__max_frequency(&max));
	errno = 0;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("a"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_INT(errno, ==, ERANGE);
	opts.frequency = max + 1;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("a"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_INT(errno, ==, ERANGE);
	opts.frequency = 99;
	opts.stack_bytes = 65536;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("a"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_INT(errno, ==, ERANGE);
	opts.stack_bytes = 0;
	opts.ring_pages = 3;
	ASSERT(!sonde_recorder__attach(getpid(), test_path("a"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_INT(errno, ==, ERANGE);
	ASSERT(!sonde_recorder__attach(2147483000, test_path("a"), SONDE_ATTACH_RUNNING, NULL));
	ASSERT_INT(errno, ==, ESRCH);
}

/* At the kernel's maximum rate kernel time is not sampled by default: there the samples'
 * own interrupts were sampled as the target's kernel time, which on a loaded machine kept
 * `split 1` from finishing for up to 100 s (docs/record.md, "Kernel time"). */
TEST_TIMEOUT(record_api_running_mode_and_max_frequency, 60)
{
	/* 0.5 s of its CPU time: a split of 1 s of wall time could end, unsampled, before a
	 * loaded machine ran it after the attach */
	const char *argv[] = {test_prog("split"), "0.5cpu", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = SONDE_RECORD_FREQ_MAX,
					 .ring_pages = 8,
					 .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	uint64_t max;

	test_require_perf();
	ASSERT_OK(sonde_recorder__max_frequency(&max));
	pid_t pid = test_spawn(argv);
	usleep(100000);
	int fds = test_count_fds();
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(pid, test_path("run.spool"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_INT(sonde_recorder__attach_process(r, pid, SONDE_ATTACH_RUNNING), ==,
		   SONDE_ATTACH_ALREADY);
	ASSERT_INT(sonde_recorder__attach_process(r, 2147483000, SONDE_ATTACH_RUNNING), ==,
		   SONDE_ATTACH_EXITED);
	/* Samples come as the target gets the CPU, and stay in the rings: nothing drains in
	 * the background. A flush writes what is older than the reorder slack (2 ms), so a
	 * sample just taken waits for the next: flushed until one has gone, the file already
	 * holds a readable recording (without its end record). */
	struct sonde_spool_info info = {0};
	for (double end = test_now() + 30; !info.samples; usleep(10000)) {
		ASSERT(test_now() < end);
		if (!sonde_recorder__has_pending_events(r))
			continue;
		ASSERT_OK(sonde_recorder__flush(r));
		struct sonde_spool *s =
			ASSERT_NOT_NULL(sonde_spool__open(test_path("run.spool"), NULL));
		sonde_spool__get_info(s, &info);
		ASSERT(!info.complete);
		sonde_spool__close(s);
	}
	while (sonde_recorder__active_process_count(r) > 0)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	ASSERT_INT(test_count_fds(), ==, fds); /* every event, ring and file closed */
	ASSERT_INT(test_wait(pid, 10), ==, 0);
	ASSERT_UINT(sum.frequency, ==, max);
	ASSERT_UINT(sum.samples, >, 0);
	if (max > 10000) {
		ASSERT_INT(sum.kernel_time, ==, 0);
		ASSERT_INT(sum.kernel_time_error, ==, -ERANGE);
	}
	/* 8 pages cannot hold two 32 KiB samples: the ring was sized up to what one needs. */
	ASSERT_UINT(sum.ring_bytes, >=, 2 * 32768);
}

/* Threads started and processes forked after attaching are sampled (inherited events),
 * named by their comm changes, and the child resolves frames through the modules it
 * inherited from its parent. */
TEST_TIMEOUT(record_follows_threads_and_children, 120)
{
	struct test_output o;
	const char *out = test_path("family.spool");
	uint32_t frames[64];

	test_require_perf();
	test_runf(&o, 100, "%s record -F 999 -o %s -- %s 1", test_bin("sonde"), out,
		  test_prog("record_family"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(out, NULL));
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	uint32_t pids[8] = {0}, n_pids = 0;
	bool saw_worker = false, saw_child = false;
	uint64_t child_resolved = 0;
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		struct sonde_spool_thread th;
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_OK(sonde_spool__get_thread(s, smp.thread, &th));
		bool known = false;
		for (uint32_t k = 0; k < n_pids; k++)
			known |= pids[k] == th.pid;
		if (!known && n_pids < 8)
			pids[n_pids++] = th.pid;
		saw_worker |= strcmp(th.comm, "worker") == 0;
		if (strcmp(th.comm, "child") == 0) {
			saw_child = true;
			int d = ASSERT_OK(sonde_spool__get_stack(s, smp.stack, frames, 64));
			struct sonde_spool_frame f;
			ASSERT_OK(sonde_spool__get_frame(s, frames[d < 64 ? d - 1 : 63], &f));
			child_resolved += f.module != 0;
		}
	}
	ASSERT(saw_worker);
	ASSERT(saw_child);
	ASSERT_UINT(n_pids, ==, 2);
	ASSERT_UINT(child_resolved, >, 0);
	sonde_spool__close(s);
}

/* A ring nobody drains overflows: the kernel's loss reports are counted, not hidden. */
TEST_TIMEOUT(record_counts_lost_events, 60)
{
	const char *argv[] = {test_prog("split"), "30", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 4000, .ring_pages = 1};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};

	test_require_perf();
	pid_t pid = test_spawn(argv);
	usleep(100000);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(pid, test_path("lost.spool"), SONDE_ATTACH_STOP, &opts));
	/* 0.2 s of its CPU time undrained: 800 samples for a ring of two */
	test_await_cpu(pid, 0.2);
	/* The kernel reports a loss with the first record it can write after the ring has
	 * room again: drain while the target still runs. */
	for (int i = 0; i < 10; i++)
		ASSERT_OK(sonde_recorder__poll(r, 20, NULL));
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_UINT(sum.lost_events + sum.lost_samples, >, 0);
	ASSERT_UINT(sum.samples_written, >, 0);
}

/* Losses the kernel never reported (nothing was written after the overflow) are still
 * counted at finish, from the events' own lost counters. */
TEST_TIMEOUT(record_counts_unreported_losses, 60)
{
	const char *argv[] = {test_prog("split"), "30", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 4000, .ring_pages = 1};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};

	test_require_perf();
	pid_t pid = test_spawn(argv);
	usleep(100000);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(pid, test_path("lost.spool"), SONDE_ATTACH_STOP, &opts));
	test_await_cpu(pid, 0.2);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_UINT(sum.lost_events, >, 0);
}

/* Without privileges, the locked-memory limit refuses a big ring: it is halved until it
 * fits, and recording works (kernel.perf_event_paranoid <= 2 allows a user's own
 * processes). */
TEST_TIMEOUT(record_unprivileged_halves_the_ring, 60)
{
	char dir[4096], out[4200], errfile[4200];

	if (geteuid() != 0)
		SKIP("needs root to switch to an unprivileged user");
	long paranoid = test_sysctl_get("kernel/perf_event_paranoid");
	if (paranoid > 2)
		SKIP("kernel.perf_event_paranoid %ld forbids unprivileged sampling", paranoid);
	/* at -1 the kernel lifts the locked-memory limit for everyone: nothing to halve */
	if (paranoid < 0)
		SKIP("kernel.perf_event_paranoid is %ld: no locked-memory limit on perf rings",
		     paranoid);
	snprintf(dir, sizeof(dir), "%s/nobody", test_tmpdir());
	ASSERT(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
	chmod(test_tmpdir(), 0755);
	snprintf(out, sizeof(out), "%s/out.spool", dir);
	snprintf(errfile, sizeof(errfile), "%s/err.txt", dir);
	const char *sonde = test_copy_for_anyone(test_bin("sonde"));
	const char *split = test_copy_for_anyone(test_prog("split"));
	pid_t child = fork();
	if (child == 0) {
		int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		dup2(fd, STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		execl(sonde, "sonde", "record", "--ring-pages", "65536", "-o", out, "--", split,
		      "0.3", (char *)NULL);
		_exit(98);
	}
	int status = test_wait(child, 40);
	char *err = test_read_file(errfile, NULL);
	ASSERT_INT(status, ==, 0);
	/* 65536 pages are 256 MiB per CPU: far beyond an unprivileged user's lock limit. */
	ASSERT_CONTAINS(err, " KiB;");
	unsigned long long kib = 0;
	const char *p = strstr(err, " of ");
	ASSERT(p && sscanf(p, " of %llu KiB", &kib) == 1);
	ASSERT_UINT(kib, <, 65536ull * 4);
	ASSERT_UINT(kib, >=, 64);
	struct split_stats st;
	analyze_file(out, &st);
	ASSERT_UINT(st.samples, >, 0);
	free(err);
}

static __attribute__((unused)) int discard_write(void *ctx, const void *buf, size_t len)
{
	*(size_t *)ctx += len;
	return 0;
}

/* Once warm (rings mapped, sorter entries and tables grown, split's few stacks interned),
 * draining, ordering, unwinding and writing more samples retains no memory per sample: a
 * retained stack copy alone would be kilobytes per sample. What may still grow a little is
 * the sorter's peak depth, which follows how long the poller was descheduled, not the
 * number of samples. */
TEST_TIMEOUT(record_steady_state_retains_nothing_per_sample, 60)
{
#if defined(__SANITIZE_ADDRESS__)
	SKIP("ASan's allocator does not report mallinfo2");
#else
	const char *argv[] = {test_prog("split"), "300", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 999};
	struct sonde_record_summary s0 = {.sz = sizeof(s0)}, s1 = {.sz = sizeof(s1)};
	size_t written = 0;

	test_require_perf();
	pid_t pid = test_spawn(argv);
	usleep(100000);
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		pid, discard_write, &written, SONDE_ATTACH_RUNNING, &opts));
	/* warm after 500 samples (as many as 0.5 s of split's CPU time gives), not after a
	 * time in which a loaded machine may give it little */
	double end = test_now() + 40;
	do {
		ASSERT(test_now() < end);
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
		ASSERT_OK(sonde_recorder__summary(r, &s0));
	} while (s0.samples_written < 500);
	size_t prev = mallinfo2().uordblks;
	int polls = 0, grew = 0;
	/* then measured over 30 polls and 30 samples at least (summary allocates nothing) */
	s1 = s0;
	while (polls < 30 || s1.samples_written - s0.samples_written < 30) {
		ASSERT(test_now() < end);
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
		size_t now = mallinfo2().uordblks;
		grew += now > prev;
		prev = now;
		polls++;
		ASSERT_OK(sonde_recorder__summary(r, &s1));
	}
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	printf("%d polls, %llu samples, memory grew at %d\n", polls,
	       (unsigned long long)(s1.samples_written - s0.samples_written), grew);
	/* Retaining anything per sample would grow memory at nearly every poll; the queue's
	 * peak depth may still step up a few times when the poller is descheduled. */
	ASSERT_INT(grew, <=, polls / 4);
#endif
}

/* Several -p: every process is recorded, and the recording ends when the last one exits:
 * the second runs only once the first has ended, and its samples are in the recording. */
TEST_TIMEOUT(record_several_pids, 120)
{
	char out[PATH_MAX], err[PATH_MAX], a1[16], a2[16];
	struct test_gate g1, g2;
	int status;

	test_require_perf();
	snprintf(out, sizeof(out), "%s", test_path("two.spool"));
	snprintf(err, sizeof(err), "%s", test_path("record.err"));
	pid_t p1 = spawn_held_split(&g1, "gate1"), p2 = spawn_held_split(&g2, "gate2");
	snprintf(a1, sizeof(a1), "%d", (int)p1);
	snprintf(a2, sizeof(a2), "%d", (int)p2);
	const char *rec[] = {test_bin("sonde"), "record", "-o", out, "-p", a1, "-p", a2, NULL};
	pid_t sonde = test_spawn_as(geteuid(), getegid(), err, rec);
	await_published(out);
	test_gate_pass(&g1);
	ASSERT_INT(test_wait(p1, 60), ==, 0);
	ASSERT_INT(waitpid(sonde, &status, WNOHANG), ==, 0);
	test_gate_pass(&g2);
	ASSERT_INT(test_wait(p2, 60), ==, 0);
	ASSERT_INT(test_wait(sonde, 60), ==, 0);
	char *text = ASSERT_NOT_NULL(test_read_file(err, NULL));
	ASSERT_CONTAINS(text, "2 processes");
	free(text);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(out, NULL));
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	bool seen1 = false, seen2 = false;
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		struct sonde_spool_thread th;
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_OK(sonde_spool__get_thread(s, smp.thread, &th));
		seen1 |= th.pid == (uint32_t)p1;
		seen2 |= th.pid == (uint32_t)p2;
	}
	ASSERT(seen1 && seen2);
	sonde_spool__close(s);
	test_gate_close(&g1);
	test_gate_close(&g2);
}

/* frame_pointers_only (linux.perf's FRAME_POINTER mode): no frame is walked by CFI, and split,
 * built with frame pointers, is still walked from compute_* up through run and main (a frame
 * pointer walk skips path_*, whose leaf callee sets up no frame). */
TEST_TIMEOUT(record_api_frame_pointers_only, 120)
{
	char *argv[] = {(char *)test_prog("split"), "0.5cpu", NULL}; /* however loaded */
	struct membuf mem = {0};
	struct sonde_record_opts opts = {
		.sz = sizeof(opts), .frequency = 999, .frame_pointers_only = true};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct split_stats st;
	int status;

	test_require_perf();
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		sonde_launch__pid(l), mem_write, &mem, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	while (sonde_launch__wait(l, WNOHANG, &status) == 0)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);

	ASSERT_UINT(sum.samples_written, >=, 10);
	ASSERT_UINT(sum.unwind_cfi_frames, ==, 0);
	ASSERT_UINT(sum.unwind_fp_frames, >=, 2 * sum.samples_written);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open_mem(mem.data, mem.len, NULL));
	analyze(s, &st);
	ASSERT_UINT(st.deep, ==, 0);
	ASSERT_UINT(st.in_split * 10, >=, st.samples * 9);
	sonde_spool__close(s);
	free(mem.data);
}

/* The start of pid's anonymous executable mapping (its JIT code), once it has one. */
static uint64_t await_anon_code(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	for (double end = test_now() + 60;; usleep(10000)) {
		FILE *f = fopen(path, "re");
		char line[512];
		if (!f)
			FAIL("pid %d ended before it mapped its code", (int)pid);
		while (fgets(line, sizeof(line), f)) {
			unsigned long long lo, hi, ino;
			char perms[8];
			int n = 0;
			if (sscanf(line, "%llx-%llx %7s %*x %*x:%*x %llu%n", &lo, &hi, perms, &ino,
				   &n) == 4 &&
			    perms[2] == 'x' && ino == 0 && line[n + strspn(line + n, " ")] == '\n') {
				fclose(f);
				return lo;
			}
		}
		fclose(f);
		if (test_now() > end)
			FAIL("pid %d has no anonymous code after 60 s", (int)pid);
	}
}

/* Anonymous executable memory (a JIT's code) that a process had before it was attached
 * is a module of its own, read from /proc like its files: the /proc reader took every
 * mapping without a path for [vsyscall] (a prefix compare of an empty path), so `-p`
 * left JIT frames as bare addresses where a launched recording named them [anon]. */
TEST(record_p_keeps_anonymous_code_read_from_proc)
{
	test_require_perf();
	const char *spin[] = {test_prog("jit_spin"), "60", NULL};
	pid_t pid = test_spawn(spin);
	uint64_t code = await_anon_code(pid);
	char pidarg[16];
	const char *out = test_path("jit.spool");
	struct test_output o;

	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	const char *rec[] = {test_bin("sonde"), "record", "-p", pidarg, "-d", "0.1", "-o", out,
			     NULL};
	test_run(&o, 60, rec);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);

	struct sonde_spool *s = sonde_spool__open(out, NULL);
	struct sonde_spool_info info;
	struct sonde_spool_module m;
	bool found = false;
	ASSERT(s != NULL);
	sonde_spool__get_info(s, &info);
	for (uint32_t id = 1; id <= info.modules && !found; id++)
		found = sonde_spool__get_module(s, id, &m) == 0 && m.def.pid == (uint32_t)pid &&
			(m.def.flags & SONDE_MODULE_JIT) && m.def.start <= code && code < m.def.end;
	ASSERT(found);
	sonde_spool__close(s);
}

/* A thread other than the main one execs: its own id ends at the exec (the kernel writes
 * no exit for it), and the task under the process's id from there is a new definition,
 * named as the new program names itself. Before, its samples went under the main thread
 * that had exited (its spool thread, already ended, under its old name), that thread's
 * exit was written twice, and the exec'ing thread's old id never ended. */
TEST_TIMEOUT(record_exec_from_a_thread_ends_its_id_and_defines_the_new_task, 60)
{
	test_require_perf();
	const char *out = test_path("exec.spool");
	struct test_output o;
	const char *argv[] = {test_bin("sonde"), "record", "-o", out, "--", test_prog("exec_thread"),
			      NULL};

	test_run(&o, 60, argv);
	ASSERT_INT(o.status, ==, 0);
	long execer = atol(o.out);
	ASSERT_INT(execer, >, 0);
	test_output_free(&o);

	size_t len;
	char *bytes = test_read_file(out, &len);
	struct sonde_spool_decoder *d = sonde_spool_decoder__new();
	struct sonde_spool_record rec;
	enum { MAX_THREADS = 64 };
	struct {
		uint32_t tid, exits;
		uint64_t born, exit_ns;
		char comm[17];
	} th[MAX_THREADS + 1] = {{0}};
	uint32_t n_threads = 0, pid = 0, after_samples = 0;
	size_t pos = 0;
	int k;

	ASSERT(bytes != NULL && d != NULL);
	while (pos < len && (k = sonde_spool_decoder__decode(d, bytes + pos, len - pos, &rec)) > 0) {
		pos += (size_t)k;
		if (rec.type == SONDE_SPOOL_REC_THREAD) {
			ASSERT_UINT(rec.thread.id, <=, MAX_THREADS);
			n_threads = rec.thread.id > n_threads ? rec.thread.id : n_threads;
			th[rec.thread.id].tid = rec.thread.tid;
			th[rec.thread.id].born = rec.thread.time_ns;
			snprintf(th[rec.thread.id].comm, sizeof(th[0].comm), "%.*s",
				 (int)rec.thread.comm_len, rec.thread.comm);
			if (!pid)
				pid = rec.thread.pid;
		} else if (rec.type == SONDE_SPOOL_REC_EXIT) {
			th[rec.exit.thread].exits++;
			th[rec.exit.thread].exit_ns = rec.exit.time_ns;
		} else if (rec.type == SONDE_SPOOL_REC_SAMPLE &&
			   !strcmp(th[rec.sample.thread].comm, "after-exec")) {
			ASSERT_UINT(th[rec.sample.thread].tid, ==, pid);
			after_samples++;
		}
	}
	ASSERT(sonde_spool_decoder__ended(d));
	sonde_spool_decoder__free(d);
	free(bytes);

	uint64_t exec_ns = 0;
	for (uint32_t i = 1; i <= n_threads; i++) {
		/* every thread definition ends once, none twice */
		ASSERT_UINT(th[i].exits, <=, 1);
		if (th[i].tid == (uint32_t)execer) {
			ASSERT_UINT(th[i].exits, ==, 1); /* its old id ended, at the exec */
			exec_ns = th[i].exit_ns;
		}
	}
	ASSERT_UINT(exec_ns, >, 0);
	ASSERT_UINT(after_samples, >, 0);
	for (uint32_t i = 1; i <= n_threads; i++)
		if (!strcmp(th[i].comm, "after-exec"))
			ASSERT_UINT(th[i].born, >=, exec_ns); /* a definition of its own */
}
