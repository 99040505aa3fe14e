/* The recorder's process lifecycle, loss recovery and the calls around them, end to end:
 * real perf events on the programs of tests/progs, read back with every frame symbolized.
 *
 *  - children of a shell script, followed by default, under their own names and
 *    their own binaries' symbols; with --no-inherit, none of them;
 *  - exec retires the shell's modules;
 *  - two libraries dlopen'ed and dlclose'd in turn at the same address: no sample in the
 *    wrong one;
 *  - 1000 threads created and joined: sampled, and no file descriptor kept;
 *  - a tiny ring at a high rate: losses counted, recovery sweeps run, stacks still right;
 *  - the target SIGKILLed mid-recording: a complete recording, its status reported;
 *  - attaching to processes that exit during the attach, or are zombies: a clear outcome,
 *    never a hang;
 *  - --duration, refresh_threads, liveness calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/record.h>

#include "../test.h"
#include "../util.h"
#include "life_util.h"

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

/* The file /bin/sh really is (dash, bash...). */
static const char *shell_file(void)
{
	static char path[PATH_MAX];

	if (!realpath("/bin/sh", path))
		FAIL("realpath /bin/sh: %s", strerror(errno));
	return path;
}

static bool seen_before(uint32_t *set, size_t *n, size_t cap, uint32_t v)
{
	for (size_t i = 0; i < *n; i++)
		if (set[i] == v)
			return true;
	if (*n < cap)
		set[(*n)++] = v;
	return false;
}

/* Samples of life_spin processes: counted per process, and checked frame by frame. Those
 * under its main (in_main) are its own code's; the others are its start-up (the dynamic
 * loader, libc's initialisation; heavier in a sanitized build) and exit. */
struct spin_stats {
	uint64_t samples, in_main, in_work, in_shell;
	uint64_t first_in_shell; /* 1 + the index of the first sample with a frame there */
	uint32_t pids[512];
	size_t n_pids;
	uint64_t shell_comm_samples;
};

static void count_spin_samples(struct life_spool *ls, struct spin_stats *st)
{
	const char *sh = shell_file();

	memset(st, 0, sizeof(*st));
	for (uint64_t i = 0; i < ls->info.samples; i++) {
		struct life_sample s;
		life_sample(ls, i, &s);
		if (strcmp(s.comm, "life_spin") != 0) {
			st->shell_comm_samples++;
			continue;
		}
		st->samples++;
		seen_before(st->pids, &st->n_pids, 512, s.pid);
		int m = life_find(&s, "main"), k = life_find(&s, "life_spin_work");
		if (m >= 0 && life_is_file(s.mod[m], "life_spin")) {
			st->in_main++;
			st->in_work += k >= 0 && life_is_file(s.mod[k], "life_spin");
		}
		/* After exec, nothing of the shell may be used to resolve its frames. */
		for (int f = 0; f < s.depth; f++) {
			bool shell = strcmp(s.mod[f], sh) == 0;
			st->in_shell += shell;
			if (shell && !st->first_in_shell)
				st->first_in_shell = i + 1;
		}
	}
}

/* Sample i, its thread (with when the spool defined it, and the other definitions of its
 * tid: a fork's, an exec's) and frames, for a failure message. */
static void describe_sample(struct life_spool *ls, uint64_t i, char *out, size_t size)
{
	struct life_sample s;
	struct sonde_spool_sample smp;
	struct sonde_spool_thread th;
	size_t n;

	life_sample(ls, i, &s);
	ASSERT_OK(sonde_spool__get_sample(ls->s, i, &smp));
	n = (size_t)snprintf(out, size,
			     "sample %llu at %llu ns of %s pid %u tid %u (spool thread %u;",
			     (unsigned long long)i, (unsigned long long)smp.time_ns, s.comm, s.pid,
			     s.tid, smp.thread);
	for (uint32_t t = 1; t <= ls->info.threads && n < size; t++)
		if (sonde_spool__get_thread(ls->s, t, &th) == 0 && th.tid == s.tid)
			n += (size_t)snprintf(out + n, size - n, " %u: %s defined at %llu ns;", t,
					      th.comm, (unsigned long long)th.time_ns);
	if (n < size)
		n += (size_t)snprintf(out + n, size - n, ")");
	for (int f = 0; f < s.depth && n < size; f++)
		n += (size_t)snprintf(out + n, size - n, " %s@%s", s.fn[f] ? s.fn[f] : "?",
				      s.mod[f][0] ? s.mod[f] : "-");
}

TEST_TIMEOUT(life_script_children_under_their_own_names, 400)
{
	struct test_output o;
	struct life_spool ls;
	struct spin_stats st;
	char script[1024];
	const char *out = test_path("script.spool");

	test_require_perf();
	snprintf(script, sizeof(script), "i=0; while [ $i -lt 200 ]; do %s 15; i=$((i+1)); done",
		 test_prog("life_spin"));
	const char *argv[] = {test_bin("sonde"), "record", "-o",   out, "--",
			      "/bin/sh",	 "-c",	   script, NULL};
	test_run(&o, 380, argv);
	if (o.status != 0)
		FAIL("sonde record exited %d: %s", o.status, o.err);
	ASSERT_CONTAINS(o.err, "loss: ");
	ASSERT_CONTAINS(o.err, "command: exited with status 0");
	life_open(&ls, out);
	count_spin_samples(&ls, &st);
	if (st.in_shell) {
		/* which sample, and what the recording went through (losses, sweeps) */
		char what[2048];
		describe_sample(&ls, st.first_in_shell - 1, what, sizeof(what));
		FAIL("%llu frames of life_spin samples resolved in %s; the first: %s; "
		     "sonde record said: %s",
		     (unsigned long long)st.in_shell, shell_file(), what, o.err);
	}
	life_close(&ls);
	test_output_free(&o);
	/* 15 ms of CPU each at 999 Hz: about 15 samples per child, so nearly every one of the
	 * 200 has some, under its own name and pid. */
	ASSERT_UINT(st.n_pids, >=, 150);
	ASSERT_UINT(st.samples, >=, 1000);
	ASSERT_UINT(st.in_main, >=, st.samples / 2);
	ASSERT_UINT(st.in_work * 100, >=, st.in_main * 95);
}

/* With --no-inherit, the children have no events: only the shell itself is recorded. */
TEST_TIMEOUT(life_without_children_only_the_target, 200)
{
	struct test_output o;
	struct life_spool ls;
	struct spin_stats st;
	char script[1024];
	const char *out = test_path("nochildren.spool");

	test_require_perf();
	snprintf(script, sizeof(script),
		 "i=0; while [ $i -lt 20 ]; do %s 15; i=$((i+1)); done; "
		 "while [ $i -lt 100000 ]; do i=$((i+1)); done",
		 test_prog("life_spin"));
	const char *argv[] = {test_bin("sonde"), "record", "--no-inherit", "-o", out, "--",
			      "/bin/sh",	 "-c",	   script,	   NULL};
	test_run(&o, 180, argv);
	if (o.status != 0)
		FAIL("sonde record exited %d: %s", o.status, o.err);
	ASSERT_CONTAINS(o.err, " 1 process, ");
	test_output_free(&o);
	life_open(&ls, out);
	count_spin_samples(&ls, &st);
	life_close(&ls);
	ASSERT_UINT(st.samples, ==, 0);
	ASSERT_UINT(st.shell_comm_samples, >, 0); /* the shell's own loop */
}

/* A shell that execs the program: the same process, another executable. The shell's
 * modules are retired at exec, and the program's samples resolve in its own binary. */
TEST_TIMEOUT(life_exec_retires_the_old_modules, 120)
{
	struct test_output o;
	struct life_spool ls;
	struct spin_stats st;
	char script[1024];
	const char *out = test_path("exec.spool");

	test_require_perf();
	snprintf(script, sizeof(script),
		 "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; exec %s 300",
		 test_prog("life_spin"));
	const char *argv[] = {test_bin("sonde"), "record", "-o",   out, "--",
			      "/bin/sh",	 "-c",	   script, NULL};
	test_run(&o, 100, argv);
	if (o.status != 0)
		FAIL("sonde record exited %d: %s", o.status, o.err);
	test_output_free(&o);
	life_open(&ls, out);
	count_spin_samples(&ls, &st);
	ASSERT_UINT(st.samples, >=, 50);
	ASSERT_UINT(st.n_pids, ==, 1);
	ASSERT_UINT(st.in_main, >=, st.samples / 2);
	ASSERT_UINT(st.in_work * 100, >=, st.in_main * 95);
	ASSERT_UINT(st.in_shell, ==, 0);
	ASSERT_UINT(st.shell_comm_samples, >, 0);
	/* The shell's modules were defined, then retired by the exec. */
	bool shell_retired = false;
	for (uint32_t id = 1; id <= ls.info.modules; id++) {
		struct sonde_spool_module m;
		if (sonde_spool__get_module(ls.s, id, &m) == 0 && m.retired &&
		    strcmp(m.def.path, shell_file()) == 0)
			shell_retired = true;
	}
	ASSERT(shell_retired);
	life_close(&ls);
}

TEST_TIMEOUT(life_dlopen_dlclose_never_misattributes, 240)
{
	struct test_output o;
	struct life_spool ls;
	const char *out = test_path("dl.spool");
	char liba[PATH_MAX], libb[PATH_MAX];
	long rounds = 0, same = 0;
	uint64_t in_a = 0, in_b = 0;

	test_require_perf();
	snprintf(liba, sizeof(liba), "%s", test_prog("liblife_a.so"));
	snprintf(libb, sizeof(libb), "%s", test_prog("liblife_b.so"));
	const char *argv[] = {test_bin("sonde"),	"record", "-F", "999", "-o", out, "--",
			      test_prog("life_dlswap"), liba,	  libb, "1.5", NULL};
	test_run(&o, 220, argv);
	if (o.status != 0)
		FAIL("sonde record exited %d: %s%s", o.status, o.out, o.err);
	ASSERT(sscanf(o.out, "rounds %ld same_address %ld", &rounds, &same) == 2);
	/* The hazard was real: most rounds mapped a library where the other had just been. */
	ASSERT_INT(same * 2, >=, rounds);
	test_output_free(&o);
	life_open(&ls, out);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
		/* The round this sample was taken in, from the main binary's frames. */
		bool round_a = life_find(&s, "life_round_a") >= 0;
		bool round_b = life_find(&s, "life_round_b") >= 0;
		for (int k = 0; k < s.depth; k++) {
			bool mod_a = life_is_file(s.mod[k], "liblife_a.so");
			bool mod_b = life_is_file(s.mod[k], "liblife_b.so");
			bool fn_a = strncmp(s.fn[k], "life_a_", 7) == 0;
			bool fn_b = strncmp(s.fn[k], "life_b_", 7) == 0;
			/* A frame in a library is in the library of its round, and its name
			 * agrees with its file. */
			if ((mod_a && (round_b || fn_b)) || (mod_b && (round_a || fn_a)) ||
			    (fn_a && !mod_a) || (fn_b && !mod_b))
				FAIL("sample %llu frame %d: %s in %s (round of %s)",
				     (unsigned long long)i, k, s.fn[k], s.mod[k],
				     round_a   ? "a"
				     : round_b ? "b"
					       : "none");
			in_a += k == 0 && mod_a && fn_a;
			in_b += k == 0 && mod_b && fn_b;
		}
	}
	life_close(&ls);
	ASSERT_UINT(in_a, >=, 100);
	ASSERT_UINT(in_b, >=, 100);
}

TEST_TIMEOUT(life_thousand_threads_sampled_without_fd_leak, 300)
{
	char *argv[] = {(char *)test_prog("life_threads"), "1000", "2", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts), .frequency = 999};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct membuf mem = {0};
	struct life_spool ls;
	uint32_t tids[1024];
	size_t n_tids = 0;
	uint64_t thr_samples = 0, in_work = 0;
	int status;

	test_require_perf();
	int fds_before = test_count_fds();
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		sonde_launch__pid(l), mem_write, &mem, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	int fds_running = -1;
	while (sonde_launch__wait(l, WNOHANG, &status) == 0) {
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
		ASSERT_OK(sonde_recorder__summary(r, &sum));
		/* Once the program runs (its images seen: the recorder holds a descriptor per
		 * mapped file, for the build-id cache), threads come and go and the recorder's
		 * descriptors do not grow with them. */
		if (fds_running < 0 && sum.threads > 40)
			fds_running = test_count_fds();
		if (fds_running >= 0)
			ASSERT_INT(test_count_fds(), <=, fds_running);
	}
	ASSERT_INT(fds_running, >, 0);
	ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	ASSERT_INT(test_count_fds(), ==, fds_before);
	ASSERT_UINT(sum.threads, >=, 1001);

	life_open_mem(&ls, mem.data, mem.len);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
		if (strcmp(s.comm, "lifethr") != 0)
			continue;
		thr_samples++;
		seen_before(tids, &n_tids, 1024, s.tid);
		int k = life_find(&s, "life_thread_work");
		in_work += k >= 0 && life_is_file(s.mod[k], "life_threads");
	}
	life_close(&ls);
	free(mem.data);
	/* 2 ms of CPU each at 999 Hz: about two samples per thread. */
	ASSERT_UINT(n_tids, >=, 300);
	ASSERT_UINT(in_work * 100, >=, thr_samples * 95);
}

/* split's functions and the caller each compute_X must have. */
static void check_split_stack(const struct life_sample *s, uint64_t *checked)
{
	static const char *const names[] = {
		"compute_hot", "compute_warm", "compute_cool", "path_hot", "path_warm",
		"path_cool",   "run",	       "main",	       "_start",   "now"};

	for (int k = 0; k < s->depth; k++) {
		if (!life_is_file(s->mod[k], "split"))
			continue;
		bool known = false;
		for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++)
			known |= strcmp(s->fn[k], names[n]) == 0;
		if (!known)
			FAIL("frame %d of a split sample is %s", k, s->fn[k]);
		if (strncmp(s->fn[k], "compute_", 8) == 0 && k + 1 < s->depth) {
			char want[32];
			snprintf(want, sizeof(want), "path_%s", s->fn[k] + 8);
			ASSERT_STR_EQ(s->fn[k + 1], want);
			(*checked)++;
		}
	}
}

/* A ring of the minimum size (two samples) at 4 kHz, drained only every 30 ms: the kernel
 * drops most samples. Losses are counted, each opens a gap that a recovery sweep closes,
 * and what was recorded is still attributed right. */
TEST_TIMEOUT(life_tiny_ring_loss_is_recovered, 120)
{
	const char *argv[] = {test_prog("split"), "300", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 4000,
					 .ring_pages = 1,
					 .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	struct sonde_record_summary mid = {.sz = sizeof(mid)}, sum = {.sz = sizeof(sum)};
	struct membuf mem = {0};
	struct life_spool ls;
	uint64_t checked = 0;

	test_require_perf();
	pid_t pid = test_spawn(argv);
	usleep(100000);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach_writer(pid, mem_write, &mem, SONDE_ATTACH_STOP, &opts));
	/* drained every 30 ms while split runs 2.5 s of its CPU time (as long as it takes a
	 * loaded machine to give it that) */
	double c0 = test_cpu_s(pid);
	for (double end = test_now() + 90; test_cpu_s(pid) - c0 < 2.5; usleep(30000)) {
		ASSERT(test_now() < end);
		ASSERT_OK(sonde_recorder__poll(r, 0, NULL));
	}
	ASSERT_OK(sonde_recorder__summary(r, &mid));
	/* undrained for 0.1 s of its CPU time, 400 samples: a gap open for flush to close */
	test_await_cpu(pid, 0.1);
	/* flush settles the books now: counters read, a sweep for any open gap. */
	ASSERT_OK(sonde_recorder__flush(r));
	ASSERT_OK(sonde_recorder__summary(r, &sum));
	ASSERT_UINT(sum.lifecycle_gaps, >, 0);
	ASSERT_UINT(sum.gaps_recovered, ==, sum.lifecycle_gaps);
	ASSERT_UINT(sum.recovery_sweeps, >, mid.recovery_sweeps);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_UINT(sum.lost_events + sum.lost_samples, >, 0);
	ASSERT_UINT(sum.recovery_sweeps, >, 1);
	ASSERT_UINT(sum.gaps_recovered, >, 0);
	/* split's mappings never changed: a sweep has nothing to repair. */
	ASSERT_UINT(sum.recovered_modules + sum.stale_modules + sum.recovered_execs, ==, 0);
	ASSERT_UINT(sum.samples_written, >=, 20);

	life_open_mem(&ls, mem.data, mem.len);
	ASSERT_UINT(ls.info.samples, ==, sum.samples_written);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
		check_split_stack(&s, &checked);
	}
	life_close(&ls);
	free(mem.data);
	ASSERT_UINT(checked, >=, 20);
}

/* The pid of the only child of pid, waiting for it to appear (0 when none did). */
static pid_t child_of(pid_t pid)
{
	char path[64];
	double t0 = test_now();

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	while (test_now() - t0 < 30) {
		char *s = test_read_file(path, NULL);
		int child = s ? atoi(s) : 0;
		free(s);
		if (child > 0)
			return child;
		usleep(20000);
	}
	return 0;
}

/* CPU time of pid in clock ticks, -1 once it is gone. */
static long cpu_ticks(pid_t pid)
{
	char path[64];
	unsigned long ut, st;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *s = test_read_file(path, NULL);
	char *p = s ? strrchr(s, ')') : NULL;
	int ok = p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			     &st) == 2;
	free(s);
	return ok ? (long)(ut + st) : -1;
}

TEST_TIMEOUT(life_target_sigkilled_mid_recording, 180)
{
	char cmd[2048];
	const char *out = test_path("killed.spool"), *err = test_path("killed.err");
	struct life_spool ls;
	struct test_output o;
	uint64_t in_compute = 0;

	test_require_perf();
	snprintf(cmd, sizeof(cmd), "exec %s record -o %s -- %s 60 2>%s", test_bin("sonde"), out,
		 test_prog("split"), err);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t sonde = test_spawn(argv);
	pid_t target = child_of(sonde);
	ASSERT_INT(target, >, 0);
	/* Half a second of the target's CPU time: samples are there to keep. */
	double t0 = test_now();
	while (cpu_ticks(target) >= 0 && cpu_ticks(target) < 50 && test_now() - t0 < 60)
		usleep(20000);
	ASSERT_INT(kill(target, SIGKILL), ==, 0);
	ASSERT_INT(test_wait(sonde, 60), ==, 128 + SIGKILL);
	char *text = test_read_file(err, NULL);
	ASSERT_NOT_NULL(text);
	ASSERT_CONTAINS(text, "command: killed by signal 9");
	free(text);

	life_open(&ls, out); /* complete: the end record was written */
	ASSERT_UINT(ls.info.samples, >=, 20);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
		in_compute += s.depth > 0 && strncmp(s.fn[0], "compute_", 8) == 0;
	}
	ASSERT_UINT(in_compute * 10, >=, ls.info.samples * 9);
	life_close(&ls);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);
}

/* ---- attaching to processes that exit meanwhile ---- */

struct reaper {
	pid_t pid;
};

static void *reap(void *arg)
{
	struct reaper *rp = arg;

	waitpid(rp->pid, NULL, 0);
	return NULL;
}

/* A child that exits after a little work (0 to ~1 ms), reaped by a thread when reap_now. */
static pid_t short_child(int i, pthread_t *th, struct reaper *rp)
{
	pid_t pid = fork();

	ASSERT_INT(pid, >=, 0);
	if (pid == 0) {
		volatile unsigned x = 0;
		for (int k = 0; k < (i % 8) * 20000; k++)
			x += (unsigned)k;
		_exit(0);
	}
	rp->pid = pid;
	ASSERT_INT(pthread_create(th, NULL, reap, rp), ==, 0);
	return pid;
}

static bool outcome_ok(int out)
{
	return out == SONDE_ATTACH_ATTACHED || out == SONDE_ATTACH_EXITED || out == -ESRCH;
}

/* A zombie child of this process (exited, not reaped). */
static pid_t zombie(void)
{
	pid_t pid = fork();
	char path[64];

	ASSERT_INT(pid, >=, 0);
	if (pid == 0)
		_exit(0);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (double t0 = test_now(); test_now() - t0 < 30; usleep(5000)) {
		char *s = test_read_file(path, NULL);
		bool z = s && strstr(s, ") Z ");
		free(s);
		if (z)
			return pid;
	}
	FAIL("pid %d never became a zombie", (int)pid);
}

TEST_TIMEOUT(life_attach_races_with_exit, 400)
{
	const char *argv[] = {test_prog("split"), "120", NULL};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	int attached = 0, exited = 0;

	test_require_perf();
	sonde_log__set_level(SONDE_LOG_OFF);
	pid_t anchor = test_spawn(argv);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(anchor, test_path("race.spool"), SONDE_ATTACH_STOP, NULL));
	for (int i = 0; i < 150; i++) {
		pthread_t th;
		struct reaper rp;
		pid_t pid = short_child(i, &th, &rp);
		enum sonde_attach_mode mode = i % 3 == 0 ? SONDE_ATTACH_RUNNING : SONDE_ATTACH_STOP;
		double t0 = test_now();
		int out = sonde_recorder__attach_process(r, pid, mode);
		ASSERT(test_now() - t0 < 10); /* bounded: the stop wait has a timeout */
		if (!outcome_ok(out))
			FAIL("attach_process of an exiting pid: %d (%s)", out, sonde_strerror(out));
		attached += out == SONDE_ATTACH_ATTACHED;
		exited += out != SONDE_ATTACH_ATTACHED;
		pthread_join(th, NULL);
		int active = sonde_recorder__process_is_active(r, pid);
		ASSERT(active == 0 || active == -EINVAL);
		ASSERT_OK(sonde_recorder__poll(r, 0, NULL));
	}
	ASSERT_INT(attached + exited, ==, 150);
	/* A new recorder on an exiting pid: ESRCH, or a recording of what it saw. */
	for (int i = 0; i < 40; i++) {
		pthread_t th;
		struct reaper rp;
		pid_t pid = short_child(i, &th, &rp);
		errno = 0;
		struct sonde_recorder *r2 = sonde_recorder__attach(pid, test_path("race2.spool"),
								   SONDE_ATTACH_STOP, NULL);
		int e = errno;
		pthread_join(th, NULL);
		if (r2) {
			ASSERT_OK(sonde_recorder__finish(r2, NULL));
			sonde_recorder__free(r2);
		} else {
			ASSERT_INT(e, ==, ESRCH);
		}
	}
	/* A zombie is not a process to attach to. */
	pid_t z = zombie();
	ASSERT_INT(sonde_recorder__attach_process(r, z, SONDE_ATTACH_STOP), ==,
		   SONDE_ATTACH_EXITED);
	errno = 0;
	ASSERT(!sonde_recorder__attach(z, test_path("z.spool"), SONDE_ATTACH_STOP, NULL));
	ASSERT_INT(errno, ==, ESRCH);
	struct test_output o;
	test_runf(&o, 60, "%s record -o %s -p %d", test_bin("sonde"), test_path("z2.spool"),
		  (int)z);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "no such process");
	test_output_free(&o);
	waitpid(z, NULL, 0);

	/* The recording of the anchor went on throughout. */
	ASSERT_INT(sonde_recorder__process_is_active(r, anchor), ==, 1);
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	kill(anchor, SIGKILL);
	test_wait(anchor, 10);
	ASSERT_UINT(sum.samples_written, >, 0);
}

/* ---- the calls around the lifecycle ---- */

TEST_TIMEOUT(life_api_refresh_and_liveness, 120)
{
	const char *argv[] = {test_prog("record_family"), "30", NULL};
	const char *argv2[] = {test_prog("split"), "30", NULL};
	struct sonde_record_opts opts = {
		.sz = sizeof(opts), .frequency = 499, .no_follow_children = true};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};

	test_require_perf();
	sonde_log__set_level(SONDE_LOG_OFF);
	pid_t fam = test_spawn(argv);
	/* its two workers and its child are started: refresh then has nothing to add */
	test_await_threads(fam, 3);
	ASSERT_INT(child_of(fam), >, 0);
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(fam, test_path("api.spool"), SONDE_ATTACH_RUNNING, &opts));
	ASSERT_OK(sonde_recorder__poll(r, 100, NULL));
	/* Every thread got events when attaching: nothing to add. */
	ASSERT_INT(sonde_recorder__refresh_threads(r, fam), ==, SONDE_REFRESH_REFRESHED);
	ASSERT_ERR(sonde_recorder__refresh_threads(r, getpid()), -EINVAL);
	ASSERT_INT(sonde_recorder__active_process_count(r), ==, 1); /* its child is not followed */
	ASSERT_INT(sonde_recorder__has_active_processes_except(r, fam), ==, 0);
	ASSERT_INT(sonde_recorder__has_active_processes_except(r, 0), ==, 1);

	pid_t other = test_spawn(argv2);
	ASSERT_INT(sonde_recorder__attach_process(r, other, SONDE_ATTACH_STOP), ==,
		   SONDE_ATTACH_ATTACHED);
	ASSERT_INT(sonde_recorder__attach_process(r, other, SONDE_ATTACH_STOP), ==,
		   SONDE_ATTACH_ALREADY);
	ASSERT_INT(sonde_recorder__has_active_processes_except(r, fam), ==, 1);
	ASSERT_INT(sonde_recorder__active_process_count(r), ==, 2);
	kill(fam, SIGKILL);
	test_wait(fam, 10);
	ASSERT_INT(sonde_recorder__process_is_active(r, fam), ==, 0);
	ASSERT_INT(sonde_recorder__refresh_threads(r, fam), ==, SONDE_REFRESH_EXITED);
	ASSERT_INT(sonde_recorder__has_active_processes_except(r, other), ==, 0);
	ASSERT_INT(sonde_recorder__active_process_count(r), ==, 1);
	ASSERT_OK(sonde_recorder__flush(r));
	ASSERT_OK(sonde_recorder__enable(r));
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	ASSERT_ERR(sonde_recorder__enable(r), -SONDE_E_STATE);
	ASSERT_ERR(sonde_recorder__refresh_threads(r, other), -SONDE_E_STATE);
	sonde_recorder__free(r);
	kill(other, SIGKILL);
	test_wait(other, 10);
	ASSERT_UINT(sum.processes, ==, 2);
	ASSERT_UINT(sum.context_errors, ==, 0);
	ASSERT_UINT(sum.idle_samples + sum.samples_missing_ids + sum.unfollowed_samples, ==, 0);
}

/* --duration: a -p target keeps running; a launched command is stopped, and that is a
 * successful recording. */
TEST_TIMEOUT(life_duration_stops_the_recording, 120)
{
	const char *argv[] = {test_prog("split"), "60", NULL};
	struct test_output o;
	struct life_spool ls;

	test_require_perf();
	pid_t pid = test_spawn(argv);
	double t0 = test_now();
	test_runf(&o, 60, "%s record -d 1 -o %s -p %d", test_bin("sonde"), test_path("d1.spool"),
		  (int)pid);
	double took = test_now() - t0;
	ASSERT_INT(o.status, ==, 0);
	ASSERT(took >= 1.0 && took < 30);
	test_output_free(&o);
	ASSERT_INT(kill(pid, 0), ==, 0); /* still running */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *stat = test_read_file(path, NULL);
	ASSERT_NOT_CONTAINS(strrchr(stat, ')'), ") T ");
	free(stat);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	life_open(&ls, test_path("d1.spool"));
	ASSERT_UINT(ls.info.samples, >, 0);
	life_close(&ls);

	test_runf(&o, 60, "%s record --duration 0.5 -o %s -- %s 60", test_bin("sonde"),
		  test_path("d2.spool"), test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "command: killed by signal 15");
	ASSERT_CONTAINS(o.err, "at the end of --duration");
	test_output_free(&o);
	life_open(&ls, test_path("d2.spool"));
	ASSERT_UINT(ls.info.samples, >, 0);
	life_close(&ls);

	test_runf(&o, 30, "%s record --duration soon -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--duration wants");
	test_output_free(&o);
}

/* Loss while mappings change: a tiny ring that the recorder leaves alone for 400 ms at a
 * time drops most records, mmap records of the libraries loaded and unloaded in turn
 * included (the rings double after each loss, from two samples: each pause still
 * overflows them). The recovery sweep that follows each pause finds the module table out
 * of step with /proc/PID/maps and repairs it. */
/* One recording of the library swapper with the recorder left alone for 0.4 s of its CPU
 * time at a time; its summary in *sum, its spool in *mem. */
static void record_dlswap_with_pauses(struct sonde_record_summary *sum, struct membuf *mem)
{
	char cmd[4096];
	/* 16 KiB stack copies: the rings double after each pause's loss, and need eight
	 * doublings before a pause fits (of small copies, four would do) */
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 4000,
					 .stack_bytes = 16384,
					 .ring_pages = 1,
					 .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	int status;

	snprintf(cmd, sizeof(cmd), "exec %s %s %s 2.5 >/dev/null", test_prog("life_dlswap"),
		 test_prog("liblife_a.so"), test_prog("liblife_b.so"));
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(sonde_recorder__attach_writer(
		sonde_launch__pid(l), mem_write, mem, SONDE_ATTACH_ON_EXEC, &opts));
	ASSERT_OK(sonde_launch__resume(l));
	for (int n = 0; sonde_launch__wait(l, WNOHANG, &status) == 0; n++) {
		ASSERT_OK(sonde_recorder__poll(r, 0, NULL));
		if (n % 4 != 3) {
			usleep(30000);
			continue;
		}
		/* the table is as it was when the ring filled; the sweep compares it with
		 * /proc now, a few hundred library swaps later: 0.4 s of the swapper's CPU
		 * time (a round spins 1 ms), not of wall time, which a loaded machine may give
		 * it little of (or until it ends: a zombie has no CPU time to read) */
		pid_t pid = sonde_launch__pid(l);
		double c0 = test_cpu_s(pid), c = c0;
		for (double end = test_now() + 60; c >= 0 && c - c0 < 0.4; usleep(10000)) {
			ASSERT(test_now() < end);
			c = test_cpu_s(pid);
		}
		ASSERT_OK(sonde_recorder__flush(r));
	}
	ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ASSERT_OK(sonde_recorder__finish(r, sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
}

/* Loss while mappings change: a tiny ring that the recorder leaves alone for 400 ms at a
 * time drops most records, mmap records of the libraries loaded and unloaded in turn
 * included (the rings double after each loss, from two samples: each pause still
 * overflows them). The recovery sweep that follows each pause finds the module table out
 * of step with /proc/PID/maps and repairs it. Whether a sweep lands while the table is out
 * of step depends on which records the kernel dropped: up to three recordings, one of
 * which must repair something. */
TEST_TIMEOUT(life_loss_sweeps_repair_the_module_table, 400)
{
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct membuf mem = {0};
	struct life_spool ls;

	test_require_perf();
	for (int attempt = 0; attempt < 3; attempt++) {
		free(mem.data);
		mem = (struct membuf){0};
		sum = (struct sonde_record_summary){.sz = sizeof(sum)};
		record_dlswap_with_pauses(&sum, &mem);
		ASSERT_UINT(sum.lost_events + sum.lost_samples, >, 0);
		ASSERT_UINT(sum.recovery_sweeps, >, 0);
		printf("attempt %d: %llu records and %llu samples lost, %llu gaps, %llu sweeps, "
		       "%llu modules recovered, %llu stale, %u ring grows, %llu bytes of rings\n",
		       attempt + 1, (unsigned long long)sum.lost_events,
		       (unsigned long long)sum.lost_samples, (unsigned long long)sum.lifecycle_gaps,
		       (unsigned long long)sum.recovery_sweeps,
		       (unsigned long long)sum.recovered_modules,
		       (unsigned long long)sum.stale_modules, sum.ring_grows,
		       (unsigned long long)sum.ring_bytes_total);
		if (sum.recovered_modules + sum.stale_modules > 0)
			break;
	}
	if (sum.recovered_modules + sum.stale_modules == 0)
		FAIL("nothing repaired in three recordings");
	ASSERT_UINT(sum.samples_written, >, 0);
	/* Still a valid recording: every frame refers to a module defined, and not retired,
	 * when the sample was written (the reader checks), and resolves. */
	life_open_mem(&ls, mem.data, mem.len);
	ASSERT_UINT(ls.info.samples, ==, sum.samples_written);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
	}
	life_close(&ls);
	free(mem.data);
}

/* A child running argv whose pid is `want`, made by asking the kernel for the pid after
 * want - 1 (kernel.ns_last_pid); another process can take it first, so this
 * retries. 0 when it cannot be had (the test then skips). */
static pid_t spawn_at_pid(pid_t want, const char *const argv[])
{
	for (int tries = 0; tries < 50; tries++) {
		if (test_sysctl_poke("kernel/ns_last_pid", want - 1) < 0)
			return 0;
		pid_t pid = fork();
		ASSERT_INT(pid, >=, 0);
		if (pid == 0) {
			execv(argv[0], (char *const *)argv);
			_exit(127);
		}
		if (pid == want)
			return pid;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return 0;
}

/* A recorded process exits and another program gets its pid: the recorder tells them
 * apart by start time, never reads the new one as the old one alive, attaches it as a new
 * process, and no sample of either is resolved in the other's modules, nor named after the
 * other. */
TEST_TIMEOUT(life_pid_reuse_never_mixes_processes, 180)
{
	const char *argv_a[] = {test_prog("split"), "300", NULL};
	const char *argv_b[] = {test_prog("life_spin"), "400", NULL};
	const char *out = test_path("reuse.spool");
	struct life_spool ls;
	uint64_t in_a = 0, in_b = 0, checked = 0;

	test_require_perf();
	pid_t a = test_spawn(argv_a);
	struct sonde_recorder *r =
		ASSERT_NOT_NULL(sonde_recorder__attach(a, out, SONDE_ATTACH_STOP, NULL));
	/* A recorded for 0.5 s of its CPU time (as B spins for its own), not of wall time,
	 * which a loaded machine may give it little of */
	double c0 = test_cpu_s(a);
	for (double end = test_now() + 60; test_cpu_s(a) - c0 < 0.5;) {
		ASSERT(test_now() < end);
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	}
	kill(a, SIGKILL);
	test_wait(a, 10);
	pid_t b = spawn_at_pid(a, argv_b);
	if (!b) {
		sonde_recorder__free(r);
		SKIP("cannot choose the next pid (kernel.ns_last_pid)");
	}
	/* A's exit record is still in the ring: it must not end B. */
	ASSERT_INT(sonde_recorder__process_is_active(r, a), ==, 0);
	ASSERT_INT(sonde_recorder__attach_process(r, b, SONDE_ATTACH_STOP), ==,
		   SONDE_ATTACH_ATTACHED);
	ASSERT_OK(sonde_recorder__poll(r, 10, NULL));
	ASSERT_INT(sonde_recorder__process_is_active(r, b), ==, 1);
	while (sonde_recorder__process_is_active(r, b) == 1)
		ASSERT_OK(sonde_recorder__poll(r, 50, NULL));
	test_wait(b, 30);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);

	life_open(&ls, out);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		life_sample(&ls, i, &s);
		ASSERT_UINT(s.pid, ==, (uint32_t)a);
		/* B before its exec (the fork of this runner, in execve): time in the kernel,
		 * sampled by default, under the name it had then */
		if (!strcmp(s.comm, "sonde-test") && s.depth > 0 && !strcmp(s.fn[0], "[kernel]"))
			continue;
		bool is_b = strcmp(s.comm, "life_spin") == 0;
		if (!is_b)
			ASSERT_STR_EQ(s.comm, "split");
		for (int k = 0; k < s.depth; k++) {
			if (is_b && life_is_file(s.mod[k], "split"))
				FAIL("a sample of the new process in the old one's split: %s",
				     s.fn[k]);
			if (!is_b && life_is_file(s.mod[k], "life_spin"))
				FAIL("a sample of the old process in the new one's binary: %s",
				     s.fn[k]);
		}
		if (is_b) {
			int k = life_find(&s, "life_spin_work");
			in_b += k >= 0 && life_is_file(s.mod[k], "life_spin");
		} else {
			check_split_stack(&s, &checked);
			in_a++;
		}
	}
	life_close(&ls);
	ASSERT_UINT(in_a, >=, 10);
	ASSERT_UINT(in_b, >=, 10);
}

/* The most processes a recording of record_family with opts had active at once, polled
 * until every one of them exited. */
static int family_processes(struct sonde_record_opts *opts, const char *spool)
{
	char *argv[] = {(char *)test_prog("record_family"), "1", NULL};
	struct sonde_launch *l = ASSERT_NOT_NULL(sonde_launch__new(argv, NULL));
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach(sonde_launch__pid(l), spool, SONDE_ATTACH_ON_EXEC, opts));
	double deadline = test_now() + 60;
	int most = 0, status;

	ASSERT_OK(sonde_launch__resume(l));
	while (test_now() < deadline) {
		ASSERT_OK(sonde_recorder__poll(r, 100, NULL));
		int n = sonde_recorder__active_process_count(r);
		most = n > most ? n : most;
		if (n == 0)
			break;
	}
	ASSERT_INT(sonde_recorder__active_process_count(r), ==, 0);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	sonde_launch__wait(l, 0, &status);
	sonde_launch__free(l);
	return most;
}

/* Children are followed by default (opts zero-initialized, as the CLI does); a caller built
 * against a header older than no_follow_children (its sz ends before it) keeps what its
 * follow_children said; asking both ways is an error. */
TEST_TIMEOUT(life_api_follows_children_by_default, 120)
{
	struct sonde_record_opts both = {
		.sz = sizeof(both), .follow_children = true, .no_follow_children = true};
	struct sonde_record_opts old = {
		.sz = offsetof(struct sonde_record_opts, no_follow_children), .frequency = 499};
	struct sonde_record_opts now = {.sz = sizeof(now), .frequency = 499};

	test_require_perf();
	sonde_log__set_level(SONDE_LOG_OFF);
	ASSERT(sonde_recorder__attach(getpid(), test_path("both.spool"), SONDE_ATTACH_RUNNING,
				      &both) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	ASSERT_INT(family_processes(&now, test_path("now.spool")), ==, 2);
	ASSERT_INT(family_processes(&old, test_path("old.spool")), ==, 1);
	old.follow_children = true;
	ASSERT_INT(family_processes(&old, test_path("old2.spool")), ==, 2);
}
