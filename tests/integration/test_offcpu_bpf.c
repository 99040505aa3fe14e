/* The BPF off-CPU backend (docs/record.md, "Off-CPU backends"), forced with
 * --off-cpu-backend bpf: the wall split of tests/progs/offcpu_split against the program's
 * own measurement, short waits summed in the kernel, long waits stacked to main on a
 * binary without frame pointers, a thread that exits while blocked, waits on the way out
 * after the memory is gone ([exiting]), -a over several
 * processes, the fallback to perf_event where BPF is refused, nothing left attached
 * once the recorder is freed, and a reused tid's short waits kept apart per life.
 * Skipped, with the reason, where the backend cannot run. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>
#include <sonde/view_source.h>

#include "../test.h"
#include "../util.h"
#include "acct_util.h"
#include "export/acct.h"
#include "offcpu_util.h"
#include "base/alloc.h"
#include "proc/proc.h"
#include "record/offcpu_bpf.h"
#include "record/recorder.h"

/* A summary number: the one just before `after` on the off-CPU line. */
static unsigned long long summary_num(const char *err, const char *after)
{
	const char *l = strstr(err, "off-CPU: ");
	const char *a = l ? strstr(l, after) : NULL;

	if (!a)
		FAIL("no '%s' on the off-CPU summary line:\n%s", after, err);
	while (a > l && a[-1] == ' ')
		a--;
	while (a > l && a[-1] >= '0' && a[-1] <= '9')
		a--;
	return strtoull(a, NULL, 10);
}

/* The split of the main thread's wall time over the phases, by the BPF backend, against
 * what offcpu_split measured itself, added up over recordings until each share is within
 * 3 points (a loaded machine's one recording may be skewed, as test_offcpu.c says); every
 * nap and pipe wait is stacked through main. env: a prefix to the command line (the
 * environment it runs in), or "". */
static void bpf_wall_split(const char *env)
{
	struct offcpu_wall w = {0};
	const char *spool = test_path("wall.spool"), *tpath = test_path("wall.truth");
	struct test_output o;

	offcpu_require_bpf();
	for (int i = 0; i < 4 && (i == 0 || !offcpu_wall_within(&w, 3)); i++) {
		test_runf(&o, 120,
			  "%s%s record --off-cpu --off-cpu-backend bpf --off-cpu-min 0 -o %s -- %s "
			  "%d %s",
			  env, test_bin("sonde"), spool, test_prog("offcpu_split"), 3 + i, tpath);
		if (o.status != 0)
			FAIL("record exited %d:\n%s", o.status, o.err);
		ASSERT_CONTAINS(o.err, "off-CPU backend: bpf");
		test_output_free(&o);
		offcpu_wall_add(&w, spool, tpath, "wall", true);
		printf("after %d: burn %.1f%% (truth %.1f%%), nap %.1f%% (%.1f%%), pipe %.1f%% "
		       "(%.1f%%)\n",
		       i + 1, offcpu_share(w.got, OFFCPU_BURN), offcpu_share(w.truth, OFFCPU_BURN),
		       offcpu_share(w.got, OFFCPU_NAP), offcpu_share(w.truth, OFFCPU_NAP),
		       offcpu_share(w.got, OFFCPU_PIPE), offcpu_share(w.truth, OFFCPU_PIPE));
	}
	for (int k = 0; k < OFFCPU_PHASES; k++)
		ASSERT_DOUBLE_NEAR(offcpu_share(w.got, k), offcpu_share(w.truth, k), 3.0);
	/* got in microseconds, the truth in nanoseconds */
	double all_got = (w.got[OFFCPU_BURN] + w.got[OFFCPU_NAP] + w.got[OFFCPU_PIPE]) * 1e3;
	double all_truth = w.truth[OFFCPU_BURN] + w.truth[OFFCPU_NAP] + w.truth[OFFCPU_PIPE];
	ASSERT_DOUBLE_NEAR(all_got / all_truth, 1.0, 0.1);
}

TEST_TIMEOUT(offcpu_bpf_wall_split_matches_the_truth, 300)
{
	bpf_wall_split("");
}

/* The same for a thread without a restartable sequence (glibc told not to register one,
 * as a static or musl program has none): its waits in system calls are captured at the
 * call's exit, once sys_exit is attached for it, and by the user state read at their
 * switch-out before; its nap and pipe waits alternate, so a wait given the next one's stack
 * would shift the shares. */
TEST_TIMEOUT(offcpu_bpf_wall_split_without_rseq_matches_the_truth, 300)
{
	bpf_wall_split("/usr/bin/env GLIBC_TUNABLES=glibc.pthread.rseq=0 ");
}

/* A recorder attached to the running pid, off-CPU with the BPF backend, into the test's
 * file name. */
static struct sonde_recorder *attach_offcpu_bpf(pid_t pid, const char *name)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 99,
					 .off_cpu = true,
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};
	struct sonde_recorder *r =
		sonde_recorder__attach(pid, test_path(name), SONDE_ATTACH_RUNNING, &opts);

	if (!r)
		FAIL("attach: %s", strerror(errno));
	return r;
}

/* glibc registers a restartable sequence for each thread when the kernel and glibc support
 * it (__rseq_size, glibc 2.35 on). */
extern const unsigned int __rseq_size __attribute__((weak));

/* Polls r until tid has left the CPU `waits` more times than at the start (its
 * voluntary_ctxt_switches), then once more: its switch-outs have been seen by the programs,
 * and the drain of that poll has acted on them. */
static void poll_past_waits(struct sonde_recorder *r, pid_t tid, long waits)
{
	char path[64];
	long start = -1, now = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	double deadline = test_now() + 30;
	for (;;) {
		char *status = test_read_file(path, NULL);
		const char *v = status ? strstr(status, "voluntary_ctxt_switches:") : NULL;
		now = v ? strtol(v + strlen("voluntary_ctxt_switches:"), NULL, 10) : -1;
		free(status);
		if (start < 0)
			start = now;
		if (now >= start + waits || test_now() > deadline)
			break;
		ASSERT_INT(sonde_recorder__poll(r, 20, NULL), >=, 0);
	}
	if (now < start + waits)
		FAIL("pid %d left the CPU %ld times in 30 s, not %ld", (int)tid, now - start,
		     waits);
	ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
}

/* The program on sys_exit, which slows every system call of the machine, is attached only
 * once a recorded thread without a restartable sequence blocks in one: never for a glibc
 * thread that has one, at the first drain after such a thread's wait otherwise. */
TEST_TIMEOUT(offcpu_bpf_sys_exit_hooked_only_for_threads_without_rseq, 120)
{
	const char *argv[] = {test_prog("sleep_loop"), "100000", NULL};

	offcpu_require_bpf();
	if (!&__rseq_size || !__rseq_size || getenv("GLIBC_TUNABLES"))
		SKIP("glibc registers no restartable sequence here (glibc < 2.35, or the kernel "
		     "lacks rseq, or GLIBC_TUNABLES is set)");
	for (int rseq = 1; rseq >= 0; rseq--) {
		if (!rseq)
			setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);
		pid_t pid = test_spawn(argv);
		unsetenv("GLIBC_TUNABLES");
		struct sonde_recorder *r = attach_offcpu_bpf(pid, "sysexit.spool");
		poll_past_waits(r, pid, 5);
		ASSERT_INT(sonde__rec_offcpu_bpf_sys_exit_attached(r), ==, !rseq);
		struct sonde_record_summary sum = {.sz = sizeof(sum)};
		ASSERT_INT(sonde_recorder__finish(r, &sum), ==, 0);
		ASSERT_STR_EQ(sum.offcpu_backend, "bpf");
		sonde_recorder__free(r);
		kill(pid, SIGKILL);
		test_wait(pid, 10);
	}
}

/* pingpong's waits are microseconds: under the default 1 ms they are summed in the kernel.
 * Every switch-out ends as one short, stacked or dropped wait, and the spool's per-thread
 * sums are the summary's. */
TEST_TIMEOUT(offcpu_bpf_short_waits_counted_in_aggregate, 120)
{
	const char *spool = test_path("short.spool");
	struct test_output o;

	offcpu_require_bpf();
	test_runf(&o, 60, "%s record --off-cpu --off-cpu-backend bpf -o %s -- %s 2",
		  test_bin("sonde"), spool, test_prog("pingpong"));
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	unsigned long long outs = summary_num(o.err, "switch-outs");
	unsigned long long stacked = summary_num(o.err, "intervals stacked");
	unsigned long long shorts = summary_num(o.err, "shorter than");
	unsigned long long dropped = summary_num(o.err, "dropped");
	printf("%llu switch-outs: %llu stacked, %llu short, %llu dropped\n", outs, stacked, shorts,
	       dropped);
	test_output_free(&o);
	ASSERT_UINT(shorts, >=, 1000);
	ASSERT_UINT(shorts, >, stacked);
	ASSERT_UINT(shorts + stacked, <=, outs);
	/* every switch-out ends in one of them: all but a few in ten thousand here (a handful
	 * a run, not explained yet) */
	ASSERT_UINT((shorts + stacked + dropped) * 10000, >=, outs * 9995);

	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	struct sonde_spool_offcpu_short sh;
	uint64_t count = 0, ns = 0;
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	for (uint64_t i = 0; sonde_spool__get_offcpu_short(s, i, &sh) == 0; i++) {
		ASSERT_UINT(sh.min_ns, ==, 1000000);
		count += sh.count;
		ns += sh.total_ns;
	}
	sonde_spool__close(s);
	ASSERT_UINT(count, ==, shorts);
	/* each under 1 ms */
	ASSERT_UINT(ns, <, count * 1000000);
	ASSERT_UINT(ns, >, 0);
}

/* `sonde report --folded --metric wall` of spool, into o; fails on its error. */
static void wall_folded(const char *spool, struct test_output *o)
{
	test_runf(o, 60, "%s report --folded --metric wall %s", test_bin("sonde"), spool);
	if (o->status != 0)
		FAIL("report exited %d:\n%s", o->status, o->err);
}

/* Of the folded off-CPU lines of `text` in state S: the time of all, and of those whose
 * stack goes through `through`. */
static void sleeping_time(char *text, const char *through, double *all, double *with)
{
	*all = *with = 0;
	for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		if (!sp || !strstr(l, ";[off-cpu: S]"))
			continue;
		double us = atof(sp + 1);
		*sp = 0;
		*all += us;
		if (strstr(l, through))
			*with += us;
	}
}

/* sleep_loop built -O2 without frame pointers: every stacked sleep of its main thread is
 * unwound (by CFI, from the registers and stack read in its own context) through
 * sleep_caller to main. */
TEST_TIMEOUT(offcpu_bpf_long_waits_stacked_to_main, 120)
{
	const char *spool = test_path("nofp.spool");
	struct test_output o;
	double all, with;

	offcpu_require_bpf();
	test_runf(&o, 60,
		  "%s record --off-cpu --off-cpu-backend bpf --off-cpu-min 500us -o %s -- %s 300",
		  test_bin("sonde"), spool, test_prog("sleep_loop-nofp"));
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	ASSERT_UINT(summary_num(o.err, "intervals stacked"), >=, 250);
	test_output_free(&o);
	wall_folded(spool, &o);
	sleeping_time(o.out, ";main;sleep_caller;", &all, &with);
	test_output_free(&o);
	printf("sleeping %.0f us, %.0f us of it through main;sleep_caller\n", all, with);
	ASSERT(all >= 250 * 1000.0);
	ASSERT_DOUBLE_NEAR(with, all, 0.0);
}

/* The name of frame `frame` of spool s (a kernel frame, or one the recording names). */
static const char *frame_name(const struct sonde_spool *s, struct sonde_symbolizer *sym,
			      uint32_t frame)
{
	struct sonde_sym_frame f[8];

	ASSERT_INT(sonde_spool__symbolize_frame(s, sym, frame, 0, f, 8), >=, 1);
	return f[0].name;
}

/* Of the sleeps in spool: those whose stack goes through kernel function fn, and those
 * whose switch-in the kernel did not trace (the switches from the idle task on some guest
 * kernels, the summary's "switch-ins not traced"), caught on the thread's way back to user
 * space with its user stack and no kernel frames: the wait left the kernel stack it was
 * in. Such a wait ends at its wakeup (an idle CPU runs the thread it wakes at once), which
 * tells it from one that lost its kernel frames. */
static void sleeps_through(const char *spool, const char *fn, uint64_t *through,
			   uint64_t *untraced)
{
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_spool_offcpu iv;
	uint32_t frames[256];

	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	*through = *untraced = 0;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		if (iv.state != SONDE_OFFCPU_SLEEPING)
			continue;
		int n = sonde_spool__get_stack(s, iv.stack, frames, 256);
		bool found = false;
		ASSERT(n >= 0 && n <= 256);
		for (int k = 0; k < n && !found; k++)
			found = !strcmp(frame_name(s, sym, frames[k]), fn);
		if (found) {
			(*through)++;
			continue;
		}
		if (iv.switch_in_ns != iv.wakeup_ns)
			FAIL("a sleep of %llu ns, its switch-in traced, has no %s",
			     (unsigned long long)(iv.switch_in_ns - iv.switch_out_ns), fn);
		(*untraced)++;
	}
	sonde_symbolizer__free(sym);
	sonde_spool__close(s);
}

/* With kernel frames: the kernel stack of a long wait is read at its switch-in, from the
 * thread off the CPU, and that of a wait still open at the end by a task iterator once the
 * programs are detached. Every stacked sleep of sleep_loop goes through main, and through
 * hrtimer_nanosleep but for those the summary says the kernel did not trace the switch-in
 * of; sleep's one nap, still on when the recording ends, too. */
TEST_TIMEOUT(offcpu_bpf_kernel_stacks_of_ended_and_open_waits, 120)
{
	const char *spool = test_path("kernel.spool");
	struct test_output o;
	double all, with;

	offcpu_require_bpf();
	test_runf(&o, 60,
		  "%s record --kernel --off-cpu --off-cpu-backend bpf --off-cpu-min 500us -o %s "
		  "-- %s 300",
		  test_bin("sonde"), spool, test_prog("sleep_loop-nofp"));
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	unsigned long long not_traced = summary_num(o.err, "switch-ins not traced");
	test_output_free(&o);
	wall_folded(spool, &o);
	sleeping_time(o.out, ";main;sleep_caller;", &all, &with);
	test_output_free(&o);
	uint64_t through, untraced;
	sleeps_through(spool, "hrtimer_nanosleep", &through, &untraced);
	printf("sleeping %.0f us: %.0f us through main;sleep_caller; %llu sleeps through "
	       "hrtimer_nanosleep, %llu with their switch-in not traced (%llu said)\n",
	       all, with, (unsigned long long)through, (unsigned long long)untraced, not_traced);
	ASSERT(all >= 250 * 1000.0);
	ASSERT_DOUBLE_NEAR(with, all, 0.0);
	ASSERT_UINT(through, >=, 250);
	ASSERT_UINT(untraced, <=, not_traced);

	/* a process attached (it is not stopped at the end): its 30 s sleep starts once the
	 * recording has (the spool is published after the attach; a sleep begun before it
	 * is a wait the programs never saw start, under three CI runs at once sonde's start
	 * took longer than a fixed second) and is still on when the recording ends, 3 s
	 * in; its wait is written open, with the kernel stack the iterator read */
	const char *gate = test_path("kernel.gate"), *errf = test_path("kernel.err");
	char script[1024], cmd[2048];
	unlink(gate);
	unlink(spool);
	snprintf(script, sizeof(script),
		 "while [ ! -e %s ]; do sleep 0.01; done; exec sleep 30", gate);
	pid_t pid = test_spawn((const char *const[]){"/bin/sh", "-c", script, NULL});
	snprintf(cmd, sizeof(cmd),
		 "exec %s record --kernel --off-cpu --off-cpu-backend bpf -d 3 -o %s -p %d 2>%s",
		 test_bin("sonde"), spool, (int)pid, errf);
	pid_t rec = test_spawn((const char *const[]){"/bin/sh", "-c", cmd, NULL});
	for (double end = test_now() + 60; access(spool, F_OK) != 0; usleep(10 * 1000))
		if (test_now() > end)
			FAIL("sonde record did not start recording into %s in 60 s", spool);
	test_write_file(gate, "", 0);
	int status = test_wait(rec, 60);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	if (status != 0) {
		size_t len;
		FAIL("record exited %d:\n%s", status, test_read_file(errf, &len));
	}
	wall_folded(spool, &o);
	sleeping_time(o.out, ";hrtimer_nanosleep;", &all, &with);
	test_output_free(&o);
	/* (sh's own wait for its first child is a sleep too) */
	printf("open: sleeping %.0f us, %.0f us through hrtimer_nanosleep\n", all, with);
	ASSERT(with >= 1000 * 1000.0);
}

/* offcpu_exit's reader blocks in read() until the process exits under it: its wait ends
 * there, once, closed (not left open to the end of the recording), stacked through
 * wait_forever: the process ends with its last thread, the reader, and its modules with
 * it (its main thread's exit, which may come first, used to retire them). */
TEST_TIMEOUT(offcpu_bpf_thread_exiting_while_blocked, 120)
{
	const char *spool = test_path("exit.spool"), *tpath = test_path("exit.truth");
	struct test_output o;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	int found = 0;

	offcpu_require_bpf();
	test_runf(&o, 60, "%s record --off-cpu --off-cpu-backend bpf -o %s -- %s 300 %s",
		  test_bin("sonde"), spool, test_prog("offcpu_exit"), tpath);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	char *t = ASSERT_NOT_NULL(test_read_file(tpath, NULL));
	int reader = (int)offcpu_truth_value(t, "reader");
	free(t);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if ((int)th.tid != reader || iv.switch_in_ns - iv.switch_out_ns < 250000000)
			continue;
		ASSERT_UINT(iv.flags & SONDE_OFFCPU_OPEN, ==, 0);
		ASSERT_UINT(iv.state, ==, SONDE_OFFCPU_SLEEPING);
		found++;
	}
	sonde_spool__close(s);
	ASSERT_INT(found, ==, 1);
	test_runf(&o, 60, "%s report --folded --metric off-cpu --tid %d %s", test_bin("sonde"),
		  reader, spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, ";reader;wait_forever;");
	test_output_free(&o);
}

/* A process lives until its last thread ends, with the BPF backend too: offcpu_leader_exit's
 * napper naps 8 times after its main thread's exit (pthread_exit), launched, attached
 * (-p, the recording ending with the napper; also once the main thread has ended) and
 * with -a; each wait is there, stacked
 * through nap, and the napper's exit after them (offcpu_check_leader_exit). The main
 * thread's exit used to retire the process's modules under the napper's waits. */
TEST_TIMEOUT(offcpu_bpf_process_lives_until_its_last_thread, 120)
{
	const char *spool = test_path("leader.spool"), *truth = test_path("leader.truth");
	const char *how[] = {"", "-p", "-p-late", "-a"};

	offcpu_require_bpf();
	for (size_t i = 0; i < sizeof(how) / sizeof(how[0]); i++) {
		offcpu_record_leader_exit("bpf", how[i], spool, truth);
		offcpu_check_leader_exit(spool, truth, LEADER_EXIT_NAP_MS);
		if (!strcmp(how[i], "-a"))
			acct_check_spool(spool, true); /* whose accounting adds up */
	}
}

/* Whether the stack of interval iv reads [exiting] outermost, with do_exit (the kernel's
 * exit path) among its kernel frames. */
static bool stacked_exiting(const struct sonde_spool *s, struct sonde_symbolizer *sym,
			    const struct sonde_spool_offcpu *iv)
{
	uint32_t frames[256];
	bool do_exit = false;
	int n = sonde_spool__get_stack(s, iv->stack, frames, 256);

	ASSERT(n >= 0 && n <= 256);
	if (!n || strcmp(frame_name(s, sym, frames[n - 1]), "[exiting]"))
		return false;
	for (int i = 0; i < n - 1; i++)
		do_exit |= !strcmp(frame_name(s, sym, frames[i]), "do_exit");
	return do_exit;
}

/* Processes that wait on their way out, after their memory is released (offcpu_exiting:
 * each child's teardown of its address space waits in exit_aio), have no user stack to
 * record: recorded with `flags`, each child's last wait is stacked under an [exiting] frame
 * where its user frames would be, its kernel frames (the exit path) inside it; the
 * parent's waits for each child's exit are stacked with its memory, and no thread's
 * [exiting] wait comes before one with its memory. Whether the recording lost nothing. */
static bool exiting_waits_named_exiting(const char *flags)
{
	const char *spool = test_path("exiting.spool"), *tpath = test_path("exiting.truth");
	struct sonde_spool_offcpu iv, last = {0};
	struct sonde_spool_thread th;
	struct test_output o;
	int pids[8], n = 0;

	test_runf(&o, 60, "%s record --off-cpu %s --off-cpu-min 0 --kernel -o %s -- %s 8 %s",
		  test_bin("sonde"), flags, spool, test_prog("offcpu_exiting"), tpath);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	/* a loss may take a wait's switch-out (the perf backend's -a samples every switch of
	 * the machine): a child's last wait is then missing, as the summary says */
	unsigned long long lost_records = 0, lost_samples = 0;
	const char *loss = strstr(o.err, "loss: ");
	if (!loss || sscanf(loss, "loss: %llu records and %llu samples lost", &lost_records,
			    &lost_samples) != 2)
		FAIL("no loss line:\n%s", o.err);
	bool complete = lost_records + lost_samples == 0;
	/* where nothing was lost, nothing is dropped: a wait on the way out is the
	 * recording's, however its process's entry ended */
	if (complete)
		ASSERT_UINT(summary_num(o.err, "dropped (lost or not writable)"), ==, 0);
	test_output_free(&o);
	char *t = ASSERT_NOT_NULL(test_read_file(tpath, NULL));
	for (const char *l = t; (l = strstr(l, "child ")) && n < 8; l++)
		pids[n++] = atoi(l + 6);
	ASSERT_CONTAINS(t, "done\n");
	int main_pid = atoi(ASSERT_NOT_NULL(strstr(t, "main ")) + 5);
	free(t);
	ASSERT_INT(n, ==, 8);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	int checked = 0;
	for (int c = 0; c < n; c++) {
		bool seen = false;
		/* its waits, and those a loss cut (unknown: stacked all the same) */
		for (int unknown = 0; unknown < 2; unknown++)
			for (uint64_t i = 0; (unknown ? sonde_spool__get_unknown(s, i, &iv)
						      : sonde_spool__get_offcpu(s, i, &iv)) == 0;
			     i++) {
				ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
				if ((int)th.tid != pids[c] ||
				    (seen && iv.switch_out_ns < last.switch_out_ns))
					continue;
				last = iv;
				seen = true;
			}
		bool named = seen && stacked_exiting(s, sym, &last);
		if (!named && !complete) {
			printf("child %d: its last wait lost (%llu records and %llu samples lost)\n",
			       pids[c], lost_records, lost_samples);
			continue;
		}
		if (!seen)
			FAIL("child %d: no off-CPU interval", pids[c]);
		if (!named)
			FAIL("child %d: its last wait (%llu ns) lacks [exiting] or do_exit",
			     pids[c], (unsigned long long)(last.switch_in_ns - last.switch_out_ns));
		checked++;
	}
	ASSERT_INT(checked, >, 0);
	/* main exits too and may be preempted on its way out (a loaded machine): a wait under
	 * [exiting] is a thread's last, never followed by one with its memory, and main's
	 * waits for its children are not among them */
	struct {
		uint32_t tid;
		uint64_t last_with_mm, first_exiting;
		int with_mm;
	} seen[64] = {0};
	int nseen = 0;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		bool ours = (int)th.pid == main_pid;
		for (int c = 0; c < n; c++)
			ours |= (int)th.pid == pids[c];
		if (!ours)
			continue; /* -a: the other processes' */
		int k = 0;
		while (k < nseen && seen[k].tid != th.tid)
			k++;
		if (k == nseen) {
			ASSERT(nseen < 64);
			seen[nseen++].tid = th.tid;
			seen[k].first_exiting = UINT64_MAX;
		}
		if (!stacked_exiting(s, sym, &iv)) {
			seen[k].with_mm++;
			if (iv.switch_out_ns > seen[k].last_with_mm)
				seen[k].last_with_mm = iv.switch_out_ns;
		} else if (iv.switch_out_ns < seen[k].first_exiting) {
			seen[k].first_exiting = iv.switch_out_ns;
		}
	}
	bool main_seen = false;
	for (int k = 0; k < nseen; k++) {
		if (seen[k].first_exiting != UINT64_MAX &&
		    seen[k].first_exiting < seen[k].last_with_mm)
			FAIL("thread %u has a wait under [exiting] before one with its memory",
			     seen[k].tid);
		main_seen |= (int)seen[k].tid == main_pid && seen[k].with_mm > 0;
	}
	if (!main_seen)
		FAIL("main (%d): no wait with its memory", main_pid);
	sonde_symbolizer__free(sym);
	sonde_spool__close(s);
	return complete;
}

TEST_TIMEOUT(offcpu_bpf_exiting_waits_are_named_exiting, 120)
{
	offcpu_require_bpf();
	exiting_waits_named_exiting("--off-cpu-backend bpf");
}

/* Off CPU only, the BPF backend takes the side band from one event per CPU kept to the
 * launched tree, as -a -p: each child's wait on its way out is written after its process
 * ended (its last thread's exit record), the process's entry gone, and is the recording's
 * all the same. With every wait kept and none lost, the threads' on-CPU time is their
 * lives less their waits (a dropped wait left the wall metric with no on-CPU time). */
TEST_TIMEOUT(offcpu_bpf_off_cpu_only_exiting_waits_are_named_exiting, 120)
{
	struct test_output o;

	offcpu_require_bpf();
	bool complete = exiting_waits_named_exiting("--off-cpu-backend bpf -e sched:sched_switch");
	test_runf(&o, 60, "%s report --metric wall %s", test_bin("sonde"),
		  test_path("exiting.spool"));
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	if (complete)
		ASSERT_CONTAINS(o.out, "on CPU (the threads' lives less their waits");
	test_output_free(&o);
}

/* The perf backend tells them too, system-wide: a switch-out with no user registers after
 * the thread's exit record (the kernel writes it before the exit releases the memory). A
 * launched recording sees none of those waits: the kernel ends a thread's own events with
 * its exit record (docs/record.md, "Off-CPU backends"). */
TEST_TIMEOUT(offcpu_perf_system_wide_exiting_waits_are_named_exiting, 120)
{
	if (geteuid() != 0)
		SKIP("-a needs root here");
	exiting_waits_named_exiting("--off-cpu-backend perf -a");
}

/* n naps of 20 us: each a short wait, woken by its timer. */
static void naps(int n)
{
	for (int i = 0; i < n; i++)
		nanosleep(&(struct timespec){0, 20000}, NULL);
}

/* The recorded process of offcpu_bpf_reused_tid_keeps_each_life_s_short_waits, a child of
 * the test: once told to go, forks A, which naps na times and exits, then B at A's pid
 * (the kernel asked for the pid after A's - 1, kernel.ns_last_pid; another process may
 * take it first, so this retries), which naps nb times and exits. Writes A's pid to tell,
 * or 0 when no B got it. */
_Noreturn static void reuse_family(int go, int tell, int na, int nb)
{
	char c;
	pid_t a = 0, b = 0;

	if (read(go, &c, 1) != 1 || (a = fork()) < 0)
		_exit(1);
	if (a == 0) {
		naps(na);
		_exit(0);
	}
	waitpid(a, NULL, 0);
	for (int tries = 0; tries < 50 && b != a; tries++) {
		int gate[2];
		if (test_sysctl_poke("kernel/ns_last_pid", a - 1) < 0 || pipe(gate) < 0 ||
		    (b = fork()) < 0)
			break;
		if (b == 0) {
			/* only the one at A's pid is let through */
			close(gate[1]);
			if (read(gate[0], &c, 1) != 1)
				_exit(1);
			naps(nb);
			_exit(0);
		}
		close(gate[0]);
		if (b == a && write(gate[1], "g", 1) != 1)
			_exit(1);
		close(gate[1]);
		waitpid(b, NULL, 0);
	}
	pid_t told = b == a ? a : 0;
	_exit(write(tell, &told, sizeof(told)) == sizeof(told) ? 0 : 1);
}

/* A process exits and the kernel gives its pid (its main thread's tid) to the next one:
 * each has its own short waits, A's under A's life and B's under B's, where the short
 * totals kept by tid alone until the end were all written under the last life (A had
 * none of its 30 naps). */
TEST_TIMEOUT(offcpu_bpf_reused_tid_keeps_each_life_s_short_waits, 120)
{
	enum { NA = 30, NB = 300 };
	const char *spool = test_path("reuse.spool");
	int go[2], tell[2];
	pid_t a = 0;

	offcpu_require_bpf();
	ASSERT_OK(pipe(go));
	ASSERT_OK(pipe(tell));
	pid_t c = fork();
	ASSERT_INT(c, >=, 0);
	if (c == 0)
		reuse_family(go[0], tell[1], NA, NB);
	close(tell[1]);
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 99,
					 .off_cpu = true,
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};
	struct sonde_recorder *r = sonde_recorder__attach(c, spool, SONDE_ATTACH_RUNNING, &opts);
	if (!r)
		FAIL("attach: %s", strerror(errno));
	ASSERT_INT(write(go[1], "g", 1), ==, 1);
	while (sonde_recorder__process_is_active(r, c) == 1)
		ASSERT_INT(sonde_recorder__poll(r, 50, NULL), >=, 0);
	ASSERT_INT(read(tell[0], &a, sizeof(a)), ==, (int)sizeof(a));
	test_wait(c, 10);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	close(go[0]);
	close(go[1]);
	close(tell[0]);
	if (!a)
		SKIP("cannot choose the next pid (kernel.ns_last_pid)");

	/* the two lives of tid a, in the order they were defined: their waits */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread th;
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_offcpu iv;
	uint32_t life[2];
	uint64_t waits[2] = {0}, shorts[2] = {0};
	int n = 0;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &th));
		if (th.tid != (uint32_t)a)
			continue;
		ASSERT_INT(n, <, 2);
		life[n++] = i;
	}
	ASSERT_INT(n, ==, 2);
	for (int k = 0; k < 2; k++) {
		for (uint64_t i = 0; sonde_spool__get_offcpu_short(s, i, &sh) == 0; i++)
			if (sh.thread == life[k])
				shorts[k] += sh.count;
		waits[k] = shorts[k];
		for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++)
			waits[k] += iv.thread == life[k];
		for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &iv) == 0; i++)
			waits[k] += iv.thread == life[k];
	}
	sonde_spool__close(s);
	printf("pid %d: A %" PRIu64 " waits (%" PRIu64 " short), B %" PRIu64 " (%" PRIu64
	       " short)\n",
	       (int)a, waits[0], shorts[0], waits[1], shorts[1]);
	/* each nap is a wait, and a few more come with a process's start and end */
	ASSERT_UINT(waits[0], >=, NA);
	ASSERT_UINT(waits[0], <, NB);
	ASSERT_UINT(waits[1], >=, NB);
}

/* The sleeps (S) in the spool being written at path so far of process pid (tid 0) or
 * thread tid: how many, and *ns their time. */
static uint64_t sleeps_in(const char *path, pid_t pid, pid_t tid, uint64_t *ns)
{
	struct sonde_spool *s = sonde_spool__open(path, NULL);
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	uint64_t n = 0;

	*ns = 0;
	for (uint64_t i = 0; s && sonde_spool__get_offcpu(s, i, &iv) == 0; i++)
		if (sonde_spool__get_thread(s, iv.thread, &th) == 0 &&
		    (tid ? th.tid == (uint32_t)tid : th.pid == (uint32_t)pid) &&
		    iv.state == SONDE_OFFCPU_SLEEPING) {
			n++;
			*ns += iv.switch_in_ns - iv.switch_out_ns;
		}
	sonde_spool__close(s);
	return n;
}

/* The time process pid slept (S) in the spool being written at path so far, in seconds. */
static double slept_s(const char *path, pid_t pid)
{
	uint64_t ns;

	sleeps_in(path, pid, 0, &ns);
	return ns / 1e9;
}

/* Asserts that process pid slept at least `least` seconds in spool, through main. */
static void slept_through_main(const char *spool, pid_t pid, double least)
{
	struct test_output o;
	double all, with;

	test_runf(&o, 60, "%s report --folded --metric wall --pid %d %s", test_bin("sonde"),
		  (int)pid, spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	sleeping_time(o.out, ";main;sleep_caller;", &all, &with);
	test_output_free(&o);
	printf("pid %d: sleeping %.0f us, %.0f us through main\n", (int)pid, all, with);
	ASSERT(with >= least * 1e6);
}

/* -a filtered by name: the programs record every task's waits and the recorder keeps the
 * named processes' (offcpu_exiting and its children). A sleep_loop beside is another
 * process: its waits are not in the spool, and none of them counts as dropped (each one
 * did, and a recording that lost nothing said it had dropped hundreds of waits). */
TEST_TIMEOUT(offcpu_bpf_system_wide_name_filter_drops_no_wait, 120)
{
	const char *spool = test_path("comm.spool"), *tpath = test_path("comm.truth");
	const char *argv[] = {test_prog("sleep_loop"), "100000", NULL};
	struct test_output o;
	uint64_t ns;

	offcpu_require_bpf();
	pid_t other = test_spawn(argv);
	test_runf(&o, 60,
		  "%s record -a --comm offcpu_exiting --off-cpu --off-cpu-backend bpf "
		  "--off-cpu-min 0 -o %s -- %s 8 %s",
		  test_bin("sonde"), spool, test_prog("offcpu_exiting"), tpath);
	kill(other, SIGKILL);
	test_wait(other, 10);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	printf("%s", o.err);
	/* a loss may take a switch-out of the named ones: their wait is dropped then */
	if (strstr(o.err, "loss: 0 records and 0 samples lost"))
		ASSERT_UINT(summary_num(o.err, "dropped (lost or not writable)"), ==, 0);
	ASSERT_UINT(summary_num(o.err, "intervals stacked"), >, 0);
	test_output_free(&o);
	sleeps_in(spool, other, 0, &ns);
	ASSERT_UINT(ns, ==, 0);
}

/* -a: three sleep_loop processes started before the recording, each with its sleeps
 * stacked through main; the summary gives the rings' sizes and the most each held. */
TEST_TIMEOUT(offcpu_bpf_system_wide_sees_every_process, 120)
{
	const char *spool = test_path("sys.spool");
	const char *argv[] = {test_prog("sleep_loop"), "100000", NULL};
	pid_t pids[3];

	offcpu_require_bpf();
	for (int i = 0; i < 3; i++)
		pids[i] = test_spawn(argv);
	/* interrupted once the spool holds 0.6 s of sleeps of each, not after -d 2: a loaded
	 * machine leaves each 1 ms sleeper runnable longer between its sleeps, and a loaded
	 * recorder may spend some of the 2 s loading its programs */
	char cmd[8400];
	const char *errf = test_path("sys.err");
	snprintf(cmd, sizeof(cmd), "exec %s record -a --off-cpu --off-cpu-backend bpf -o %s 2>%s",
		 test_bin("sonde"), spool, errf);
	const char *rec_argv[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t rec = test_spawn(rec_argv);
	for (double end = test_now() + 90;; usleep(50000)) {
		double least = slept_s(spool, pids[0]);
		for (int i = 1; i < 3; i++)
			if (slept_s(spool, pids[i]) < least)
				least = slept_s(spool, pids[i]);
		if (least >= 0.6)
			break;
		if (test_now() > end)
			FAIL("%s held %.3f s of sleeps of a sleep_loop after 90 s", spool, least);
	}
	kill(rec, SIGINT);
	int status = test_wait(rec, 60);
	for (int i = 0; i < 3; i++) {
		kill(pids[i], SIGKILL);
		test_wait(pids[i], 10);
	}
	char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	if (status != 0)
		FAIL("record exited %d:\n%s", status, err);
	ASSERT_CONTAINS(err, "off-CPU backend: bpf");
	printf("%s", err);
	/* the rings' sizes, and what of them the recording used: some, within them */
	unsigned long long waits, wheld, sw, swheld;
	const char *rings = strstr(err, "off-CPU rings: ");
	if (!rings || sscanf(rings,
			     "off-CPU rings: waits %llu KiB (at most %llu KiB held), switches %llu "
			     "KiB (at most %llu KiB held)",
			     &waits, &wheld, &sw, &swheld) != 4)
		FAIL("no off-CPU rings line:\n%s", err);
	ASSERT_UINT(waits, >=, 4096);
	ASSERT_UINT(sw, >=, 2048);
	ASSERT_UINT(wheld, >, 0);
	ASSERT_UINT(wheld, <=, waits);
	ASSERT_UINT(swheld, >, 0);
	ASSERT_UINT(swheld, <=, sw);
	free(err);
	/* 0.6 s of 1 ms sleeps at least, nearly all of them through main */
	for (int i = 0; i < 3; i++)
		slept_through_main(spool, pids[i], 0.5);
	acct_check_spool(spool, true); /* whose accounting adds up */
}

/* The first child of pid, awaited (30 s at most): a shell's background command. */
static pid_t first_child(pid_t pid)
{
	for (double end = test_now() + 30; test_now() < end; usleep(10000)) {
		pid_t *kids, kid = 0;
		size_t n;
		if (sonde__proc_list_children(pid, &kids, &n) == 0) {
			kid = n ? kids[0] : 0;
			sonde__free(kids);
		}
		if (kid > 0)
			return kid;
	}
	FAIL("pid %d started no child in 30 s", (int)pid);
}

/* /bin/sh running `sleep_loop naps` in the background and waiting for it: argv for
 * test_spawn or sonde_launch__new, in cmd (of size n). */
static void shell_with_sleeper(char *cmd, size_t n, int naps, const char *argv[4])
{
	snprintf(cmd, n, "%s %d & wait", test_prog("sleep_loop"), naps);
	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = cmd;
	argv[3] = NULL;
}

/* -a -p PID: a child PID had already when the recording started is recorded too, its
 * sleeps stacked through main. The programs add the children forked from then on
 * themselves; one found in /proc was left to user space alone, which had its side band
 * and none of its waits ("0 switch-outs"). */
TEST_TIMEOUT(offcpu_bpf_system_wide_pid_filter_takes_the_children_it_finds, 120)
{
	const char *spool = test_path("kids.spool"), *errf = test_path("kids.err");
	const char *argv[4];
	char sh_cmd[PATH_MAX + 32], cmd[3 * PATH_MAX];

	offcpu_require_bpf();
	shell_with_sleeper(sh_cmd, sizeof(sh_cmd), 100000, argv);
	pid_t sh = test_spawn(argv), kid = first_child(sh);
	snprintf(cmd, sizeof(cmd),
		 "exec %s record -a -p %d --off-cpu --off-cpu-backend bpf -o %s 2>%s",
		 test_bin("sonde"), (int)sh, spool, errf);
	const char *rec_argv[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t rec = test_spawn(rec_argv);
	/* until the spool holds 0.3 s of the child's sleeps (none ever, before) */
	double end = test_now() + 30;
	while (slept_s(spool, kid) < 0.3 && test_now() < end)
		usleep(50000);
	kill(rec, SIGINT);
	int status = test_wait(rec, 60);
	kill(kid, SIGKILL);
	kill(sh, SIGKILL);
	test_wait(sh, 10);
	char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	printf("%s", err);
	if (status != 0)
		FAIL("record exited %d:\n%s", status, err);
	free(err);
	slept_through_main(spool, kid, 0.25);
}

/* argv launched and recorded into spool off CPU only by the BPF backend (the launch in
 * *l), running: the recorder. */
static struct sonde_recorder *launch_off_cpu_only(const char *const argv[], const char *spool,
						 struct sonde_launch **l)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .off_cpu = true,
					 .tracepoint = "sched:sched_switch",
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};

	*l = ASSERT_NOT_NULL(sonde_launch__new((char *const *)argv, NULL));
	struct sonde_recorder *r =
		sonde_recorder__attach(sonde_launch__pid(*l), spool, SONDE_ATTACH_ON_EXEC, &opts);
	if (!r)
		FAIL("attach: %s", strerror(errno));
	ASSERT_OK(sonde_launch__resume(*l));
	return r;
}

/* A launched command recorded off CPU only by the BPF backend takes its side band (exec,
 * mappings, forks, exits) from one event per CPU kept to its tree, as -a -p, not from
 * events of its own on each thread, which a thread pays for at each of its switches
 * (docs/record.md, "Off-CPU backends"): every event the recorder holds is a CPU's while
 * the shell and its child run; the child's sleeps are stacked through main (its exec and
 * mappings came through those events), each process is named by its program, no other
 * process is in the spool, and every switch-out of the tree is covered, as with events of
 * its own. */
TEST_TIMEOUT(offcpu_bpf_launched_off_cpu_only_takes_one_event_per_cpu, 120)
{
	const char *spool = test_path("tree.spool");
	const char *argv[4];
	char sh_cmd[PATH_MAX + 32];
	struct sonde_launch *l;
	int status;

	offcpu_require_bpf();
	shell_with_sleeper(sh_cmd, sizeof(sh_cmd), 300, argv);
	struct sonde_recorder *r = launch_off_cpu_only(argv, spool, &l);
	pid_t sh = sonde_launch__pid(l);
	pid_t kid = first_child(sh);
	while (sonde_launch__wait(l, WNOHANG, &status) == 0) {
		ASSERT_INT(sonde_recorder__poll(r, 50, NULL), >=, 0);
		ASSERT_UINT(sonde__rec_n_events(r), ==, sonde__rec_n_cpus(r));
		for (size_t i = 0; i < r->ev.n_events; i++)
			ASSERT_INT(r->ev.events[i].tid, ==, -1);
	}
	ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	ASSERT_STR_EQ(sum.offcpu_backend, "bpf");
	ASSERT_UINT(sum.system_wide, ==, 0);
	ASSERT_UINT(sum.lost_events, ==, 0);

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread th;
	bool named_sh = false, named_kid = false;
	sonde_spool__get_info(s, &in);
	ASSERT(sonde_spool__offcpu_coverage(s) & SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &th));
		if (th.pid != (uint32_t)sh && th.pid != (uint32_t)kid)
			FAIL("thread %u/%u (%s) of neither the shell nor its child", th.pid, th.tid,
			     th.comm);
		named_sh |= th.pid == (uint32_t)sh && !strcmp(th.comm, "sh");
		named_kid |= th.pid == (uint32_t)kid && !strcmp(th.comm, "sleep_loop");
	}
	sonde_spool__close(s);
	ASSERT(named_sh && named_kid);
	slept_through_main(spool, kid, 0.25);
}

/* The programs track a recorded process by its pid until its last thread exits: a
 * launched shell that ran 50 commands one after the other, then exec'd sleep_loop, is
 * their one process left, where each command's pid used to stay (an unrelated process
 * given one of those pids later was recorded as the shell's child, and a build's
 * processes filled the map, those after unrecorded). */
TEST_TIMEOUT(offcpu_bpf_exited_processes_leave_the_programs_targets, 120)
{
	const char *spool = test_path("gone.spool");
	char cmd[PATH_MAX + 128], comm[64];
	struct sonde_launch *l;

	offcpu_require_bpf();
	snprintf(cmd, sizeof(cmd),
		 "i=0; while [ $i -lt 50 ]; do /bin/true; i=$((i + 1)); done; exec %s 100000",
		 test_prog("sleep_loop"));
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	struct sonde_recorder *r = launch_off_cpu_only(argv, spool, &l);
	pid_t sh = sonde_launch__pid(l);
	/* the shell's exec of sleep_loop comes after the last command was reaped */
	snprintf(comm, sizeof(comm), "/proc/%d/comm", (int)sh);
	for (double end = test_now() + 60;; usleep(10000)) {
		char *c = test_read_file(comm, NULL);
		bool done = c && !strcmp(c, "sleep_loop\n");
		free(c);
		if (done)
			break;
		if (test_now() > end)
			FAIL("the shell did not get to sleep_loop in 60 s");
		ASSERT_INT(sonde_recorder__poll(r, 0, NULL), >=, 0);
	}
	size_t targets = sonde__rec_offcpu_bpf_targets(r);
	kill(sh, SIGKILL);
	int status;
	sonde_launch__wait(l, 0, &status);
	ASSERT_OK(sonde_recorder__finish(r, NULL));
	sonde_recorder__free(r);
	sonde_launch__free(l);
	ASSERT_UINT(targets, ==, 1);
}

/* Without CAP_SYS_ADMIN and CAP_BPF (dropped from the bounding set, so that root's exec
 * does not get them back) the default is perf_event, and the summary says why; forcing
 * bpf fails with the reason in one line. As nobody, the same. */
TEST_TIMEOUT(offcpu_bpf_refused_falls_back_to_perf, 120)
{
	const char *spool = test_path("fallback.spool");
	struct test_output o;

	offcpu_require_bpf();
	if (access("/usr/bin/setpriv", X_OK) != 0)
		SKIP("no setpriv (util-linux) to drop capabilities with");
	test_runf(&o, 60,
		  "/usr/bin/setpriv --bounding-set -sys_admin,-bpf -- %s record --off-cpu -o %s "
		  "-- %s 50",
		  test_bin("sonde"), spool, test_prog("sleep_loop"));
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	ASSERT_CONTAINS(o.err,
			"off-CPU backend: perf (bpf: it needs root, or CAP_BPF and CAP_PERFMON)");
	ASSERT_UINT(summary_num(o.err, "intervals stacked"), >=, 40);
	test_output_free(&o);

	test_runf(&o, 60,
		  "/usr/bin/setpriv --bounding-set -sys_admin,-bpf -- %s record --off-cpu "
		  "--off-cpu-backend bpf -o %s -- %s 5",
		  test_bin("sonde"), spool, test_prog("sleep_loop"));
	ASSERT_INT(o.status, !=, 0);
	ASSERT_INT(o.status, <, 128);
	ASSERT_CONTAINS(o.err, "off-CPU backend bpf: it needs root, or CAP_BPF and CAP_PERFMON");
	test_output_free(&o);

	test_runf(&o, 60,
		  "/usr/bin/setpriv --reuid=nobody --regid=nogroup --clear-groups -- %s record "
		  "--off-cpu --off-cpu-backend bpf -o /dev/null -- %s 5",
		  test_bin("sonde"), test_prog("sleep_loop"));
	ASSERT_INT(o.status, !=, 0);
	ASSERT_INT(o.status, <, 128);
	ASSERT_CONTAINS(o.err, "off-CPU backend bpf: it needs root, or CAP_BPF and CAP_PERFMON");
	test_output_free(&o);
}

/* The BPF programs this process holds: their ids (from /proc/self/fdinfo), at most max.
 * Also counts every BPF object (program, map, link) fd into *objects. */
static size_t own_programs(unsigned *ids, size_t max, size_t *objects)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	size_t n = 0;

	*objects = 0;
	ASSERT(d != NULL);
	while ((e = readdir(d))) {
		char path[300], target[128], line[128];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (!strstr(target, "anon_inode:bpf"))
			continue;
		(*objects)++;
		if (!strstr(target, "bpf-prog"))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		unsigned id;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "prog_id: %u", &id) == 1 && n < max)
				ids[n++] = id;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* Whether a BPF program with this id still exists, or a link still holds it. */
static bool program_left(unsigned id)
{
	struct test_output o;
	char want[32];

	test_runf(&o, 30, "/usr/sbin/bpftool prog show id %u", id);
	bool left = o.status == 0;
	test_output_free(&o);
	test_runf(&o, 30, "/usr/sbin/bpftool link show");
	snprintf(want, sizeof(want), "prog %u\n", id);
	left |= o.status == 0 && strstr(o.out, want);
	test_output_free(&o);
	return left;
}

/* A recorder attached with the BPF backend holds its programs and links; freed (after
 * finishing, or without: an abandoned recording), it leaves none behind. */
TEST_TIMEOUT(offcpu_bpf_programs_detached_when_freed, 120)
{
	const char *argv[] = {test_prog("sleep_loop"), "100000", NULL};
	unsigned ids[16];
	size_t objects;

	offcpu_require_bpf();
	if (access("/usr/sbin/bpftool", X_OK) != 0)
		SKIP("no bpftool to list programs and links with");
	pid_t pid = test_spawn(argv);
	for (int finish = 1; finish >= 0; finish--) {
		struct sonde_recorder *r = attach_offcpu_bpf(pid, "detach.spool");
		size_t n = own_programs(ids, 16, &objects);
		/* sched_switch, sched_waking, sched_wakeup_new, exit, fork, exec, sys_exit, fpu,
		 * rseq, and the task iterator run at the end (the open waits' kernel stacks) */
		ASSERT_UINT(n, ==, 10);
		for (int i = 0; i < 5; i++)
			ASSERT_INT(sonde_recorder__poll(r, 50, NULL), >=, 0);
		struct sonde_record_summary sum = {.sz = sizeof(sum)};
		if (finish) {
			ASSERT_INT(sonde_recorder__finish(r, &sum), ==, 0);
			ASSERT_STR_EQ(sum.offcpu_backend, "bpf");
			ASSERT_UINT(sum.offcpu_intervals, >, 0);
		}
		sonde_recorder__free(r);
		size_t left = own_programs(ids + n, 0, &objects);
		ASSERT_UINT(left, ==, 0);
		ASSERT_UINT(objects, ==, 0);
		/* the kernel frees a program once its last reference goes, after an RCU
		 * grace period: waited for, with a generous deadline */
		for (size_t i = 0; i < n; i++) {
			double deadline = test_now() + 20;
			while (program_left(ids[i]) && test_now() < deadline)
				usleep(100000);
			if (program_left(ids[i]))
				FAIL("BPF program %u is still loaded or linked 20 s after the free",
				     ids[i]);
		}
	}
	kill(pid, SIGKILL);
	test_wait(pid, 10);
}

/* The off-CPU intervals of a `-t TID --off-cpu` recording, per backend: how many are of
 * tid, how many of other threads, and whether one is stacked through main and nap. */
static void single_thread(const char *backend, pid_t tid, size_t *own, size_t *others, bool *nap)
{
	const char *spool = test_path("tid.spool"), *errf = test_path("tid.err");
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	struct test_output o;
	char cmd[8400];

	unlink(spool);
	snprintf(cmd, sizeof(cmd), "exec %s record -t %d --off-cpu %s -o %s 2>%s", test_bin("sonde"),
		 (int)tid, backend, spool, errf);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t rec = test_spawn(argv);
	/* interrupted once it holds 8 sleeps of the thread, of which at least 4 are naps (a
	 * round's pipe wait may find its byte there already, its nap always sleeps): not 16
	 * waits of any kind, which a loaded machine's preemptions of one burn phase may make
	 * (a CI run had 13 of the thread and none through nap), nor -d 1, which a loaded
	 * recorder may spend loading its programs */
	for (double end = test_now() + 60;; usleep(20000)) {
		uint64_t ns, got = sleeps_in(spool, 0, tid, &ns);
		if (got >= 8)
			break;
		if (test_now() > end)
			FAIL("%s held %llu sleeps of %d after 60 s", spool, (unsigned long long)got,
			     (int)tid);
	}
	kill(rec, SIGINT);
	int status = test_wait(rec, 30);
	char *err = ASSERT_NOT_NULL(test_read_file(errf, NULL));
	if (status != 0)
		FAIL("record -t exited %d:\n%s", status, err);
	/* the default is the BPF backend where it is allowed, as for a process */
	ASSERT_CONTAINS(err, *backend ? "off-CPU backend: perf" : "off-CPU backend: bpf");
	free(err);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	*own = *others = 0;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if (th.tid == (uint32_t)tid)
			(*own)++;
		else
			(*others)++;
	}
	sonde_spool__close(s);
	wall_folded(spool, &o);
	*nap = strstr(o.out, ";main;nap;") != NULL;
	if (!*nap) /* what the waits were stacked under instead (a loaded CI run had 13, none
		    * through nap) */
		printf("%s: no wait through main;nap:\n%s", *backend ? backend : "bpf", o.out);
	test_output_free(&o);
}

/* -t TID --off-cpu records that thread's waits (with the BPF backend by default, the perf
 * backend when asked), and no other thread's: offcpu_split's main thread naps and waits
 * on a pipe its writer thread feeds. */
TEST_TIMEOUT(offcpu_bpf_single_thread_records_its_waits_alone, 120)
{
	const char *argv[] = {test_prog("offcpu_split"), "300", test_path("tid.truth"), NULL};
	size_t own, others;
	bool nap;

	offcpu_require_bpf();
	pid_t pid = test_spawn(argv);
	single_thread("", pid, &own, &others, &nap);
	printf("bpf: %zu intervals of the thread, %zu of others\n", own, others);
	ASSERT_UINT(own, >, 3);
	ASSERT_UINT(others, ==, 0);
	ASSERT(nap);
	single_thread("--off-cpu-backend perf", pid, &own, &others, &nap);
	printf("perf: %zu intervals of the thread, %zu of others\n", own, others);
	ASSERT_UINT(own, >, 3);
	ASSERT_UINT(others, ==, 0);
	ASSERT(nap);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
}

/* The main thread's time asleep (S) in spool, over what offcpu_split measured itself for
 * its naps and pipe waits (both include the time from the wakeup to the switch-in; the
 * preemptions of its burn phase, runnable, are left out, as short waits are: a loaded
 * machine decides those). */
static double offcpu_over_truth(const char *backend)
{
	const char *spool = test_path("same.spool"), *tpath = test_path("same.truth");
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	struct test_output o;
	uint64_t off = 0;

	test_runf(&o, 120, "%s record --off-cpu --off-cpu-backend %s -q -o %s -- %s 3 %s",
		  test_bin("sonde"), backend, spool, test_prog("offcpu_split"), tpath);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	char *t = ASSERT_NOT_NULL(test_read_file(tpath, NULL));
	uint32_t pid = (uint32_t)offcpu_truth_value(t, "pid");
	double truth = offcpu_truth_value(t, "nap") + offcpu_truth_value(t, "wait_pipe");
	free(t);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++)
		if (!sonde_spool__get_thread(s, iv.thread, &th) && th.tid == pid &&
		    iv.state == SONDE_OFFCPU_SLEEPING)
			off += iv.switch_in_ns - iv.switch_out_ns;
	/* a sleep whose end a loss or an untraced switch-in hid is unknown, still a sleep */
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &iv) == 0; i++)
		if (!sonde_spool__get_thread(s, iv.thread, &th) && th.tid == pid &&
		    iv.state == SONDE_OFFCPU_SLEEPING)
			off += iv.switch_in_ns - iv.switch_out_ns;
	sonde_spool__close(s);
	printf("%s: main thread asleep %.3f s, its naps and pipe waits %.3f s\n", backend,
	       off / 1e9, truth / 1e9);
	return off / truth;
}

/* Both backends report the same on the same workload: the main thread of offcpu_split is
 * asleep as long by either, within 2 % of the program's own figure. */
TEST_TIMEOUT(offcpu_bpf_and_perf_backends_report_the_same, 200)
{
	offcpu_require_bpf();
	double bpf = offcpu_over_truth("bpf"), perf = offcpu_over_truth("perf");
	ASSERT_DOUBLE_NEAR(bpf, perf, 0.02);
	/* and both near the truth: the sleeps are the naps and pipe waits */
	ASSERT_DOUBLE_NEAR(bpf, 1.0, 0.05);
}

/* A thread preempted in user mode and resumed after kernel threads alone (kworker_spin:
 * main pinned to CPU 1, a kworker run there by each write of /proc/sys/vm/stat_refresh,
 * no restartable sequence registered): on its way back to user space the kernel passes
 * neither x86_fpu_regs_activated nor rseq_update, so its user registers and stack are the
 * ones read at its switch-out. Every R wait of main while it spun has user frames, and the
 * time of them all is under main;kworker_spin_work. Before they were read there, 209 of
 * 258 such waits had none. */
TEST_TIMEOUT(offcpu_bpf_preempted_by_kernel_threads_stacked_to_main, 120)
{
	const char *spool = test_path("kworker.spool");
	struct test_output o;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	unsigned long long start = 0, end = 0;
	uint64_t waits = 0, empty = 0, waited = 0, edges = 0;
	uint32_t main_tid = 0;
	double spun = 0;

	offcpu_require_bpf();
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP("kworker_spin needs two CPUs");
	/* glibc registers no restartable sequence: no rseq_update on the way back */
	setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);
	/* 1000 writes, and on until main was switched out 40 times while it spun: a loaded
	 * machine's other tasks keep main off its CPU while several writes' kworkers run (a
	 * CI run had 16 R waits of main in 1000 writes) */
	test_runf(&o, 60,
		  "%s record --off-cpu --off-cpu-backend bpf --off-cpu-min 0 -o %s -- %s 1000 40",
		  test_bin("sonde"), spool, test_prog("kworker_spin"));
	unsetenv("GLIBC_TUNABLES");
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	const char *line = strstr(o.out, "spin ");
	if (!line || sscanf(line, "spin %llu %llu", &start, &end) != 2)
		FAIL("no spin times in:\n%s", o.out);
	test_output_free(&o);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if (th.tid != th.pid || iv.state != SONDE_OFFCPU_RUNNABLE)
			continue;
		main_tid = th.tid;
		/* the waits while it spun (not those of its start or exit) */
		if (iv.switch_out_ns < start || iv.switch_in_ns > end)
			continue;
		waits++;
		empty += iv.stack == 0;
		/* the window's edges are main's own, around the loop: a wait preempted in the
		 * clock_gettime that took START or END is under main and the vDSO */
		if (iv.stack && offcpu_stacked_through(s, sym, &iv, "kworker_spin_work"))
			waited += iv.switch_in_ns - iv.switch_out_ns;
		else
			edges++;
	}
	sonde_symbolizer__free(sym);
	sonde_spool__close(s);
	ASSERT_UINT(main_tid, >, 0);
	test_runf(&o, 60, "%s report --folded --metric wall --tid %u %s", test_bin("sonde"),
		  main_tid, spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	char others[2048] = ""; /* main's other lines, said if the R time falls short */
	size_t ol = 0;
	for (char *save = NULL, *l = strtok_r(o.out, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		if (sp && strstr(l, ";main;kworker_spin_work;[off-cpu: R] "))
			spun += atof(sp + 1);
		else if (ol < sizeof(others) - 200)
			ol += (size_t)snprintf(others + ol, sizeof(others) - ol, "\n  %.180s", l);
	}
	test_output_free(&o);
	printf("main spun %.3f s: %" PRIu64 " R waits (%.0f us through kworker_spin_work, %" PRIu64
	       " at the window's edges), %" PRIu64
	       " without user frames; %.0f us R under main;kworker_spin_work\n",
	       (end - start) / 1e9, waits, waited / 1e3, edges, empty, spun);
	/* a kworker run on CPU 1 per write (several writes' work may run in one) */
	ASSERT_UINT(waits, >=, 20);
	ASSERT_UINT(empty, ==, 0);
	ASSERT_UINT(edges, <=, 2); /* the clock_gettime of START and of END */
	/* the folded profile's microseconds, each line rounded */
	if (spun * 1e3 + 2000 < (double)waited)
		FAIL("%.0f us of main's R waits while it spun are not under "
		     "main;kworker_spin_work; its other lines:%s",
		     waited / 1e3 - spun, others);
}

struct span {
	uint64_t from, to;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->from < y->from ? -1 : x->from > y->from;
}

/* A waits ring that fills: the recorder is not polled while sleep_loop naps 6000 times,
 * each nap's record a KiB or more in a 4 MiB ring. The waits it had no room for are lost
 * records, counted, and their time stays the thread's, as unknown: the thread's waits and
 * unknown spans cover its time in the recording but its few microseconds a nap on the CPU,
 * and never overlap. Before, a lost wait's time was gone (a nap missing from
 * offcpu_bpf_process_lives_until_its_last_thread with -a under three CI runs at once). */
/* Records argv, spawned and attached stopped, with the BPF backend (threshold min_ns) and
 * never polled, so that its waits ring fills: the summary into *sum, and the test fails
 * unless records were lost (nothing to check otherwise). Returns its pid. */
static pid_t record_unpolled(const char *const *argv, const char *spool, uint64_t min_ns,
			     struct sonde_record_summary *sum)
{
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 99,
					 .off_cpu = true,
					 .off_cpu_min_ns = min_ns,
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};

	offcpu_require_bpf();
	*sum = (struct sonde_record_summary){.sz = sizeof(*sum)};
	pid_t pid = test_spawn(argv);
	struct sonde_recorder *r = sonde_recorder__attach(pid, spool, SONDE_ATTACH_STOP, &opts);
	if (!r)
		FAIL("attach: %s", strerror(errno));
	ASSERT_INT(test_wait(pid, 100), ==, 0);
	ASSERT_INT(sonde_recorder__finish(r, sum), ==, 0);
	sonde_recorder__free(r);
	printf("%llu records lost, %llu intervals, %llu short, %llu unknown (%.3f s), %llu "
	       "dropped\n",
	       (unsigned long long)sum->lost_events, (unsigned long long)sum->offcpu_intervals,
	       (unsigned long long)sum->offcpu_short, (unsigned long long)sum->offcpu_unknown,
	       sum->offcpu_unknown_ns / 1e9, (unsigned long long)sum->offcpu_dropped);
	if (!sum->lost_events)
		FAIL("the waits ring never filled: nothing was lost to check");
	return pid;
}

TEST_TIMEOUT(offcpu_bpf_lost_waits_are_unknown_time, 120)
{
	const char *spool = test_path("lostwaits.spool");
	const char *argv[] = {test_prog("sleep_loop"), "6000", NULL};
	struct sonde_record_summary sum;

	/* not polled: the ring fills while it naps */
	pid_t pid = record_unpolled(argv, spool, 1, &sum);
	ASSERT_UINT(sum.offcpu_unknown, >, 0);
	ASSERT_UINT(sum.offcpu_dropped, ==, 0);

	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	uint64_t n_off = sonde_spool__offcpu_count(s), n = 0;
	struct span *v = ASSERT_NOT_NULL(calloc(n_off + sonde_spool__unknown_count(s), sizeof(*v)));
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	for (uint64_t i = 0; i < n_off + sonde_spool__unknown_count(s); i++) {
		ASSERT_OK(i < n_off ? sonde_spool__get_offcpu(s, i, &iv)
				    : sonde_spool__get_unknown(s, i - n_off, &iv));
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (th.tid == (uint32_t)pid)
			v[n++] = (struct span){iv.switch_out_ns, iv.switch_in_ns};
	}
	sonde_spool__close(s);
	ASSERT_UINT(n, >, 100);
	qsort(v, n, sizeof(*v), span_cmp);
	uint64_t off = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (i && v[i].from < v[i - 1].to)
			FAIL("waits of main overlap: %llu-%llu and %llu-%llu ns",
			     (unsigned long long)v[i - 1].from, (unsigned long long)v[i - 1].to,
			     (unsigned long long)v[i].from, (unsigned long long)v[i].to);
		off += v[i].to - v[i].from;
	}
	uint64_t life = v[n - 1].to - v[0].from;
	printf("main: %llu waits and spans, %.3f s of %.3f s off the CPU\n",
	       (unsigned long long)n, off / 1e9, life / 1e9);
	free(v);
	ASSERT_UINT(off * 100, >=, life * 95);
}

/* An exiting thread's short totals when the waits ring is full: the recorder is not polled
 * while short_threads' main naps 6000 times (the ring fills with their records, as in
 * offcpu_bpf_lost_waits_are_unknown_time), then runs 100 threads one after another that
 * sleep 1 us 50 times each and exit. Their totals, which go into the ring at each thread's
 * exit, are kept aside in the kernel and written at the next drain: none is dropped, and
 * every worker has its short waits in the spool (before, those the ring had no room for
 * were counted dropped and the threads' waits were gone). */
TEST_TIMEOUT(offcpu_bpf_exit_shorts_survive_a_full_ring, 120)
{
	const char *spool = test_path("exitshorts.spool"), *truth = test_path("exitshorts.txt");
	const char *argv[] = {test_prog("short_threads"), "6000", "100", "50", truth, NULL};
	struct sonde_record_summary sum;

	/* not polled: the ring fills while main naps, and stays full */
	record_unpolled(argv, spool, 500000, &sum);
	ASSERT_UINT(sum.offcpu_dropped, ==, 0);

	uint32_t workers[100];
	size_t n_workers = 0;
	char *text = ASSERT_NOT_NULL(test_read_file(truth, NULL));
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		int tid;
		if (sscanf(line, "worker %d", &tid) == 1 && n_workers < 100)
			workers[n_workers++] = (uint32_t)tid;
	}
	free(text);
	ASSERT_UINT(n_workers, ==, 100);

	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	uint64_t shorts[100] = {0};
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_thread th;
	for (uint64_t i = 0; i < sonde_spool__offcpu_short_count(s); i++) {
		ASSERT_OK(sonde_spool__get_offcpu_short(s, i, &sh));
		ASSERT_OK(sonde_spool__get_thread(s, sh.thread, &th));
		for (size_t k = 0; k < n_workers; k++)
			if (th.tid == workers[k])
				shorts[k] += sh.count;
	}
	sonde_spool__close(s);
	for (size_t k = 0; k < n_workers; k++)
		if (!shorts[k])
			FAIL("worker %zu (tid %u) has no short waits in the spool", k, workers[k]);
}

/* Records every process with opts (the BPF backend), never polled, while argv runs to its
 * end: the summary into *sum. Returns argv's pid. */
static pid_t record_system_unpolled(const char *const *argv, const char *spool,
				    const struct sonde_record_opts *opts,
				    struct sonde_record_summary *sum)
{
	offcpu_require_bpf();
	*sum = (struct sonde_record_summary){.sz = sizeof(*sum)};
	struct sonde_recorder *r = sonde_recorder__attach_system(spool, opts);
	if (!r)
		FAIL("attach_system: %s", strerror(errno));
	pid_t pid = test_spawn(argv);
	ASSERT_INT(test_wait(pid, 100), ==, 0);
	ASSERT_INT(sonde_recorder__finish(r, sum), ==, 0);
	sonde_recorder__free(r);
	return pid;
}

/* A perf ring's loss takes none of the switches the BPF backend keeps with -a: they come
 * through its own ring, numbered. The recorder is left unpolled, on perf rings of one page,
 * while a shell runs /bin/true 100 times (the mappings, comms, forks and exits of every
 * exec go through those rings, which lose), then finished: records were lost, and no run
 * of a CPU's switches is marked as following a gap (before, each perf loss marked every
 * CPU's run so, and its time around the loss became unknown: 0.05 s of each of a loaded
 * workload's threads, with every switch in the spool). */
TEST_TIMEOUT(offcpu_bpf_system_wide_perf_loss_leaves_the_switches_whole, 120)
{
	const char *spool = test_path("swloss.spool");
	const char *argv[] = {"/bin/sh", "-c", "for i in $(seq 100); do /bin/true; done", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 99,
					 .ring_pages = 1,
					 .off_cpu = true,
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};
	struct sonde_record_summary sum;

	record_system_unpolled(argv, spool, &opts, &sum);
	printf("%llu records lost, %llu switches\n", (unsigned long long)sum.lost_events,
	       (unsigned long long)sum.offcpu_switches);
	if (!sum.lost_events)
		FAIL("the perf rings never filled: nothing was lost to check");

	size_t len;
	char *bytes = ASSERT_NOT_NULL(test_read_file(spool, &len));
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	uint64_t runs = 0, switches = 0;
	size_t pos = 0;
	int k;
	while (pos < len &&
	       (k = sonde_spool_decoder__decode(d, bytes + pos, len - pos, &rec)) > 0) {
		if (rec.type == SONDE_SPOOL_REC_SWITCHES) {
			runs++;
			switches += rec.switches.n;
			if (rec.switches.flags & SONDE_SWITCHES_GAP)
				FAIL("CPU %u's run of %zu switches at byte %zu follows a gap",
				     rec.switches.cpu, rec.switches.n, pos);
		}
		pos += (size_t)k;
	}
	sonde_spool_decoder__free(d);
	free(bytes);
	ASSERT_UINT(runs, >, 0);
	ASSERT_UINT(switches, >, 100);
}

/* The waits ring fills, the switches' does not: the recorder is left unpolled system-wide
 * while sleep_loop naps 6000 times, every wait long (a threshold of 1 ns), each a record of
 * a KiB or more in the 4 MiB waits ring, the switches 16 bytes each in a ring of their own.
 * A thread's waits the ring had no room for are one unknown span, from the first one's
 * switch-out to the last one's switch-in, and its stays on the CPUs in between, which the
 * switches kept, are on-CPU time: each task's parts sum to its life, nothing counted twice
 * (acct_check_spool), and sleep_loop's unknown time is its span less its stays. Before,
 * the stays were unknown as well: counted twice, they made a CPU burner's parts 6.35 s of
 * its 5.0 s life in a recording stopped twice for a second. */
TEST_TIMEOUT(offcpu_bpf_system_wide_lost_waits_count_no_stay_twice, 120)
{
	const char *spool = test_path("lostspan.spool");
	const char *argv[] = {test_prog("sleep_loop"), "6000", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 99,
					 .off_cpu = true,
					 .off_cpu_min_ns = 1,
					 .off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF};
	struct sonde_record_summary sum;

	pid_t pid = record_system_unpolled(argv, spool, &opts, &sum);
	printf("%llu records lost, %llu unknown (%.3f s), %llu switches\n",
	       (unsigned long long)sum.lost_events, (unsigned long long)sum.offcpu_unknown,
	       sum.offcpu_unknown_ns / 1e9, (unsigned long long)sum.offcpu_switches);
	if (!sum.offcpu_unknown)
		FAIL("the waits ring never filled: nothing was lost to check");
	acct_check_spool(spool, true);

	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *t = NULL;
	for (size_t i = 0; i < a.n_tasks; i++)
		if (a.tasks[i].tid == (uint32_t)pid)
			t = &a.tasks[i];
	if (!t)
		FAIL("no task %d in the accounting", (int)pid);
	uint64_t span = 0, stays = 0;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &iv) == 0; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (th.tid != (uint32_t)pid)
			continue;
		span += iv.switch_in_ns - iv.switch_out_ns;
		stays += sonde__acct_stays_within(s, th.tid, iv.switch_out_ns, iv.switch_in_ns);
	}
	printf("sleep_loop: unknown spans %.3f s, its stays within them %.3f s; unknown %.3f "
	       "s, on-CPU %.3f s, counted twice %.6f s\n",
	       span / 1e9, stays / 1e9, t->ns[SONDE_ACCT_UNKNOWN] / 1e9, t->ns[SONDE_ACCT_ON] / 1e9,
	       t->over_ns / 1e9);
	ASSERT_UINT(span, >, 0);
	ASSERT_UINT(stays, >, 0);
	ASSERT_UINT(t->ns[SONDE_ACCT_UNKNOWN], ==, span - stays);
	ASSERT_UINT(t->over_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);
}
