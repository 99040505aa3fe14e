/* sonde record --off-cpu and sonde report --metric on tests/progs/offcpu_split, whose main
 * thread splits its wall-clock time 25/50/25 between burn (on the CPU), nap (nanosleep)
 * and wait_pipe (a blocking read), and writes what it really spent where: the wall split
 * of the report must match it, accumulated over recordings (split_util.h says why one
 * recording on a loaded machine is not judged alone). Also: --off-cpu-min, Ctrl-C, -d,
 * -p, -a, and loss with tiny rings, each ending in a complete spool whose intervals
 * reach main. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

#include "../test.h"
#include "../util.h"
#include "acct_util.h"
#include "base/u64map.h"
#include "offcpu_util.h"

/* Skips without tracefs's sched tracepoints or the right to open them. */
static void require_offcpu(void)
{
	test_require_perf();
	if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) &&
	    access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) &&
	    system("mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null") != 0)
		SKIP("no tracefs with sched:sched_switch (mounting it failed)");
	if (geteuid() != 0)
		SKIP("off-CPU recording opens tracepoints: needs root here");
}

static void record_split(const char *flags, const char *spool, const char *truth, int seconds)
{
	struct test_output o;

	test_runf(&o, 120, "%s record --off-cpu %s -q -o %s -- %s %d %s", test_bin("sonde"), flags,
		  spool, test_prog("offcpu_split"), seconds, truth);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
}

TEST_TIMEOUT(offcpu_wall_split_matches_the_truth, 300)
{
	struct offcpu_wall w = {0};
	const char *spool = test_path("wall.spool"), *truth = test_path("wall.truth");

	require_offcpu();
	/* record again, adding up, while a share is off; at most 4 recordings */
	for (int i = 0; i < 4 && (i == 0 || !offcpu_wall_within(&w, 3)); i++) {
		record_split("--off-cpu-min 0", spool, truth, 3 + i);
		offcpu_wall_add(&w, spool, truth, "wall", true);
		printf("after %d: burn %.1f%% (truth %.1f%%), nap %.1f%% (%.1f%%), wait_pipe "
		       "%.1f%% "
		       "(%.1f%%)\n",
		       i + 1, offcpu_share(w.got, OFFCPU_BURN), offcpu_share(w.truth, OFFCPU_BURN),
		       offcpu_share(w.got, OFFCPU_NAP), offcpu_share(w.truth, OFFCPU_NAP),
		       offcpu_share(w.got, OFFCPU_PIPE), offcpu_share(w.truth, OFFCPU_PIPE));
	}
	for (int k = 0; k < OFFCPU_PHASES; k++)
		ASSERT_DOUBLE_NEAR(offcpu_share(w.got, k), offcpu_share(w.truth, k), 3.0);
	/* and the time itself: the profile's wall time is the program's, within 10 % */
	double got = (w.got[OFFCPU_BURN] + w.got[OFFCPU_NAP] + w.got[OFFCPU_PIPE]) * 1e3;
	double want = w.truth[OFFCPU_BURN] + w.truth[OFFCPU_NAP] + w.truth[OFFCPU_PIPE];
	ASSERT_DOUBLE_NEAR(got / want, 1.0, 0.1);
}

/* Generation switches of the per-thread stack copies: "after N switch" of the summary. */
static unsigned stack_switches(const char *err)
{
	const char *l = strstr(err, "stack copies: ");
	unsigned lo, hi, n;

	if (!l || sscanf(l, "stack copies: %u-%u bytes per thread after %u", &lo, &hi, &n) != 3)
		FAIL("no stack copies line in the summary:\n%s", err);
	return n;
}

/* The main thread's off-CPU intervals of a recording of offcpu_split, by the phase of a
 * round they belong to. Told apart by what ended them, not by their length, which a
 * loaded machine stretches and cuts: a nap is a sleep of at least its 40 ms (the kernel
 * never ends a nanosleep early) stacked through nap, or, its stack lost, that the writer
 * thread did not end (the nap's timer fires in an interrupt, whose "waker" is whichever
 * task it interrupted: the writer, now and then, and a nap was taken for a pipe wait); a
 * pipe wait is any other sleep the writer ended, however short (a preemption of main
 * between its request and its read leaves the read less of the writer's 20 ms to wait:
 * judged by length, as "15 ms or more", such a wait would go uncounted). A read that found
 * the byte already there did not block: main was then preempted, between its nap and its
 * next nap, at least as long as the writer's nap, in an R interval of 15 ms or more with
 * no pipe wait after it (unblocked). Intervals a loss cut (kept as unknown) may be either. */
struct phases {
	uint64_t naps, pipe_waits, unblocked, unknown;
	bool overlap; /* two intervals of main overlap: one counted twice */
};

static void main_thread_phases(const char *spool, int pid, struct phases *ph)
{
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	struct sonde_spool_info info;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	uint32_t writer = 0;
	uint64_t last_in = 0;
	bool after_nap = false, preempted = false;

	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	memset(ph, 0, sizeof(*ph));
	sonde_spool__get_info(s, &info);
	for (uint32_t t = 1; t <= info.threads; t++) /* spool thread ids start at 1 */
		if (sonde_spool__get_thread(s, t, &th) == 0 && (int)th.pid == pid &&
		    (int)th.tid != pid)
			writer = th.tid; /* the process's only other thread */
	if (!writer)
		FAIL("no writer thread of pid %d in %s", pid, spool);
	/* written by their end: a thread's intervals in order */
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if ((int)th.tid != pid)
			continue;
		ph->overlap |= iv.switch_out_ns < last_in;
		last_in = iv.switch_in_ns;
		uint64_t len = iv.switch_in_ns - iv.switch_out_ns;
		bool nap = iv.state == SONDE_OFFCPU_SLEEPING && len >= 40000000 &&
			   (iv.waker_tid != writer ||
			    (iv.stack && offcpu_stacked_through(s, sym, &iv, "nap")));
		if (iv.state == SONDE_OFFCPU_SLEEPING && iv.waker_tid == writer && !nap) {
			ph->pipe_waits++;
			after_nap = preempted = false;
		} else if (nap) {
			ph->naps++;
			ph->unblocked += after_nap && preempted;
			after_nap = true;
			preempted = false;
		} else if (iv.state == SONDE_OFFCPU_RUNNABLE && len >= 15000000) {
			preempted |= after_nap;
		}
	}
	ph->unblocked += after_nap && preempted;
	sonde_symbolizer__free(sym);
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if ((int)th.tid == pid) {
			printf("an interval cut by a loss, kept as unknown\n");
			ph->unknown++;
		}
	}
	sonde_spool__close(s);
}

/* The main thread's rounds run shallow, then 300 frames deep (offcpu_split's DEPTH): its
 * copy shrinks, then grows again, each a generation switch of its events, the off-CPU
 * ones with them. Across the switches no interval is lost (every nap and pipe wait is
 * there) or doubled (a switch-out and its switch-in recorded by both generations), and
 * the wall split still matches the truth. The switches are the perf_event backend's (the
 * BPF backend's waits use no per-thread events), so it is asked for. */
TEST_TIMEOUT(offcpu_intervals_survive_stack_copy_switches, 300)
{
	struct offcpu_wall w = {0};
	struct test_output o;
	const char *spool = test_path("sw.spool"), *truth = test_path("sw.truth");

	require_offcpu();
	for (int i = 0; i < 4 && (i == 0 || !offcpu_wall_within(&w, 3)); i++) {
		double rounds = w.rounds;
		struct phases ph;
		test_runf(&o, 120,
			  "%s record --off-cpu --off-cpu-backend perf --off-cpu-min 0 -o %s -- %s "
			  "%d %s 300",
			  test_bin("sonde"), spool, test_prog("offcpu_split"), 4 + i, truth);
		if (o.status != 0)
			FAIL("record exited %d:\n%s", o.status, o.err);
		unsigned switches = stack_switches(o.err);
		int pid = offcpu_wall_add(&w, spool, truth, "wall", true);
		main_thread_phases(spool, pid, &ph);
		uint64_t n = (uint64_t)(w.rounds - rounds);
		printf("recording %d: %u switches, %llu rounds: %llu naps, %llu pipe waits, %llu "
		       "reads preempted past the writer, %llu unknown; burn %.1f%% (truth %.1f%%), "
		       "nap "
		       "%.1f%% (%.1f%%), wait_pipe %.1f%% (%.1f%%)\n",
		       i + 1, switches, (unsigned long long)n, (unsigned long long)ph.naps,
		       (unsigned long long)ph.pipe_waits, (unsigned long long)ph.unblocked,
		       (unsigned long long)ph.unknown, offcpu_share(w.got, OFFCPU_BURN),
		       offcpu_share(w.truth, OFFCPU_BURN), offcpu_share(w.got, OFFCPU_NAP),
		       offcpu_share(w.truth, OFFCPU_NAP), offcpu_share(w.got, OFFCPU_PIPE),
		       offcpu_share(w.truth, OFFCPU_PIPE));
		if (ph.overlap)
			FAIL("two off-CPU intervals of the main thread overlap:\n%s", o.err);
		/* the shrink and the deep phase's growth */
		ASSERT_UINT(switches, >=, 2);
		/* every round's nap, and its pipe wait unless preempted past it, across them */
		ASSERT_UINT(ph.naps + ph.unknown, >=, n);
		ASSERT_UINT(ph.pipe_waits + ph.unblocked + ph.unknown, >=, n);
		test_output_free(&o);
	}
	for (int k = 0; k < OFFCPU_PHASES; k++)
		ASSERT_DOUBLE_NEAR(offcpu_share(w.got, k), offcpu_share(w.truth, k), 3.0);
	double got = (w.got[OFFCPU_BURN] + w.got[OFFCPU_NAP] + w.got[OFFCPU_PIPE]) * 1e3;
	double want = w.truth[OFFCPU_BURN] + w.truth[OFFCPU_NAP] + w.truth[OFFCPU_PIPE];
	ASSERT_DOUBLE_NEAR(got / want, 1.0, 0.1);
}

/* The shortest of the stacked off-CPU intervals of thread tid in spool, and how many
 * there are. */
static uint64_t shortest_interval(const char *spool, int tid, uint64_t *n)
{
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	uint64_t shortest = UINT64_MAX;

	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	*n = 0;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_INT(sonde_spool__get_thread(s, iv.thread, &th), ==, 0);
		if ((int)th.tid != tid)
			continue;
		(*n)++;
		if (iv.switch_in_ns - iv.switch_out_ns < shortest)
			shortest = iv.switch_in_ns - iv.switch_out_ns;
	}
	sonde_spool__close(s);
	return shortest;
}

/* With a 30 ms threshold, the 40 ms naps are stacked and the 20 ms pipe waits are
 * counted: the header says how many, and how long they were in all. Judged interval by
 * interval, as the recorder split them: every stacked interval lasted 30 ms or more, and
 * the counted ones less on average (how many pipe waits a loaded machine's late wakeups
 * stretch past 30 ms is the machine's, not the threshold's). */
TEST_TIMEOUT(offcpu_min_counts_short_intervals, 200)
{
	struct offcpu_wall w = {0};
	struct test_output o;
	const char *spool = test_path("min.spool"), *truth = test_path("min.truth");
	unsigned long long shorter = 0;
	double shorter_s = 0;
	uint64_t stacked;

	require_offcpu();
	record_split("--off-cpu-min 30ms", spool, truth, 3);
	int pid = offcpu_wall_add(&w, spool, truth, "off-cpu", false);
	test_runf(&o, 60, "%s report --metric off-cpu --tid %d %s", test_bin("sonde"), pid, spool);
	ASSERT_INT(o.status, ==, 0);
	const char *l = strstr(o.out, "metric off-cpu: ");
	ASSERT(l != NULL);
	l = strstr(l, "; ");
	ASSERT(l != NULL);
	ASSERT_INT(sscanf(l, "; %llu shorter intervals not stacked, %lf s", &shorter, &shorter_s),
		   ==, 2);
	printf("%s", o.out);
	uint64_t shortest = shortest_interval(spool, pid, &stacked);
	printf("%llu stacked, the shortest %.3f ms; %llu counted, %.3f ms on average\n",
	       (unsigned long long)stacked, shortest / 1e6, shorter,
	       shorter ? shorter_s * 1e3 / shorter : 0);
	ASSERT_UINT(stacked, >, 0);
	ASSERT_UINT(shortest, >=, 30000000);
	/* the naps (40 ms each) stacked at their length */
	ASSERT_DOUBLE_NEAR(w.got[OFFCPU_NAP] * 1e3 / w.truth[OFFCPU_NAP], 1.0, 0.2);
	ASSERT_UINT(shorter, >=, 1);
	ASSERT(shorter_s / shorter < 0.030);
	test_output_free(&o);
}

/* The spool at path is complete and has off-CPU intervals, some through nap. */
static void check_spool(const char *path, uint64_t min_intervals)
{
	struct sonde_spool_info in;
	struct sonde_spool *s = sonde_spool__open(path, NULL);

	if (!s)
		FAIL("%s: %s", path, sonde_strerror(errno));
	sonde_spool__get_info(s, &in);
	uint64_t n = sonde_spool__offcpu_count(s);
	sonde_spool__close(s);
	ASSERT_INT(in.complete, ==, 1);
	ASSERT_UINT(in.version_minor, ==, 1);
	ASSERT_UINT(n, >=, min_intervals);
}

/* Ends sonde record (pid r) with SIGINT once the spool it is writing holds n off-CPU
 * intervals: not after a fixed time, in which a loaded machine may not even have started
 * the recording. */
static void interrupt_at(pid_t r, const char *spool, uint64_t n)
{
	for (double end = test_now() + 60;; usleep(20000)) {
		struct sonde_spool *s = sonde_spool__open(spool, NULL);
		uint64_t got = s ? sonde_spool__offcpu_count(s) : 0;
		sonde_spool__close(s);
		if (got >= n)
			break;
		if (test_now() > end)
			FAIL("%s held %llu off-CPU intervals after 60 s", spool,
			     (unsigned long long)got);
	}
	kill(r, SIGINT);
}

/* Whether the off-CPU stacks of pid (a --tid or --pid filter) reach nap through main. */
static bool nap_reached(const char *spool, int pid, const char *flags)
{
	struct test_output o;

	test_runf(&o, 60, "%s report --folded --metric off-cpu %s %d %s", test_bin("sonde"), flags,
		  pid, spool);
	ASSERT_INT(o.status, ==, 0);
	bool found = strstr(o.out, ";main;nap;") != NULL;
	if (!found)
		printf("no ;main;nap; in:\n%s", o.out);
	test_output_free(&o);
	return found;
}

static void check_nap_reached(const char *spool, int pid, const char *flags)
{
	if (!nap_reached(spool, pid, flags))
		FAIL("%s: the off-CPU stacks of %d do not reach nap through main", spool, pid);
}

/* -p and SIGINT: the recording of a running process ends cleanly on Ctrl-C. */
TEST_TIMEOUT(offcpu_attach_and_ctrl_c, 120)
{
	const char *spool = test_path("int.spool"), *truth = test_path("int.truth");
	const char *prog[] = {test_prog("offcpu_split"), "6", truth, NULL};
	char pid[16];

	require_offcpu();
	pid_t p = test_spawn(prog);
	snprintf(pid, sizeof(pid), "%d", (int)p);
	const char *rec[] = {
		test_bin("sonde"), "record", "--off-cpu", "-q", "-p", pid, "-o", spool, NULL};
	pid_t r = test_spawn(rec);
	interrupt_at(r, spool, 20);
	ASSERT_INT(test_wait(r, 30), ==, 0);
	check_spool(spool, 20);
	check_nap_reached(spool, (int)p, "--tid");
	ASSERT_INT(test_wait(p, 30), ==, 0);
}

/* -d ends a launched command's recording: status 0, the command stopped before its own
 * end (it writes its truth file last), a complete spool with its intervals. How many
 * there are in the 2 s is the machine's load (a loaded one runs fewer rounds), not -d's:
 * printed, not judged. */
TEST_TIMEOUT(offcpu_duration_ends_the_recording, 120)
{
	struct test_output o;
	const char *spool = test_path("d.spool"), *truth = test_path("d.truth");

	require_offcpu();
	test_runf(&o, 60, "%s record --off-cpu -d 2 -o %s -- %s 60 %s", test_bin("sonde"), spool,
		  test_prog("offcpu_split"), truth);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	printf("%s", o.err);
	ASSERT_CONTAINS(o.err, "off-CPU: ");
	ASSERT_CONTAINS(o.err, "command: killed by signal 15 (Terminated) at the end of --duration");
	test_output_free(&o);
	ASSERT(access(truth, F_OK) != 0);
	check_spool(spool, 1);
}

/* -a --off-cpu with a -p filter, ended by SIGINT: per-CPU switch events, switch-ins from
 * next_pid, the filtered process's intervals only. */
TEST_EXCLUSIVE(offcpu_system_wide_ctrl_c, 120)
{
	const char *spool = test_path("a.spool"), *truth = test_path("a.truth");
	const char *prog[] = {test_prog("offcpu_split"), "6", truth, NULL};
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread t;
	char pid[16];

	require_offcpu();
	pid_t p = test_spawn(prog);
	snprintf(pid, sizeof(pid), "%d", (int)p);
	const char *rec[] = {
		test_bin("sonde"), "record", "-a", "--off-cpu", "-q", "-p", pid, "-o", spool, NULL};
	pid_t r = test_spawn(rec);
	interrupt_at(r, spool, 20);
	ASSERT_INT(test_wait(r, 30), ==, 0);
	check_spool(spool, 20);
	/* a -p filter: the other processes' switches are not kept */
	ASSERT(!acct_check_spool(spool, false));
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &t));
		ASSERT_INT((int)t.pid, ==, (int)p);
		ASSERT_UINT(iv.cpu, !=, SONDE_SPOOL_CPU_NONE);
	}
	sonde_spool__close(s);
	check_nap_reached(spool, (int)p, "--pid");
	ASSERT_INT(test_wait(p, 30), ==, 0);
}

/* Tiny rings and a recorder stopped for a second at a time: losses, every gap recovered,
 * the intervals a loss may have cut dropped, the spool complete and still right. Returns
 * whether the program's own intervals that survived reach nap through main. */
static bool loss_run(const char *mode, const char *name)
{
	char spool[1024], errpath[1100], truth[1100], cmd[8192];
	unsigned long long records = 0, samples = 0, gaps = 0, recovered = 0;

	if ((size_t)snprintf(spool, sizeof(spool), "%s", test_path(name)) >= sizeof(spool))
		FAIL("test directory path too long");
	snprintf(errpath, sizeof(errpath), "%s.err", spool);
	snprintf(truth, sizeof(truth), "%s.truth", spool);
	snprintf(cmd, sizeof(cmd),
		 "exec %s record %s --off-cpu --off-cpu-min 0 --ring-pages 16 --stack-size 2048 -o "
		 "%s -- "
		 "%s 7 %s 2>%s",
		 test_bin("sonde"), mode, spool, test_prog("offcpu_split"), truth, errpath);
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t rec = test_spawn(sh);
	for (int i = 0; i < 3; i++) {
		usleep(1000000);
		kill(rec, SIGSTOP);
		usleep(1000000);
		kill(rec, SIGCONT);
	}
	int status = test_wait(rec, 90);
	char *err = ASSERT_NOT_NULL(test_read_file(errpath, NULL));
	if (status != 0)
		FAIL("sonde record exited %d:\n%s", status, err);
	printf("%s", err);
	const char *l = strstr(err, "loss: ");
	ASSERT(l &&
	       sscanf(l, "loss: %llu records and %llu samples lost; %llu gap%*s %llu recovered",
		      &records, &samples, &gaps, &recovered) == 4);
	ASSERT_UINT(records + samples, >, 0);
	ASSERT_UINT(gaps, >, 0);
	ASSERT_UINT(recovered, ==, gaps);
	ASSERT_CONTAINS(err, "off-CPU: ");
	char *err_unknown = err;
	check_spool(spool, 20);
	/* system-wide, the CPUs' time adds up through the losses (unknown across a gap) */
	if (*mode)
		acct_check_spool(spool, true);
	/* never silent: the report says what was lost, in the figures record printed */
	struct test_output o;
	char said[128];
	test_runf(&o, 60, "%s report --metric wall %s", test_bin("sonde"), spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	snprintf(said, sizeof(said), "\ntime unknown: %llu records and %llu samples lost", records,
		 samples);
	ASSERT_CONTAINS(o.out, said);
	/* the intervals a loss cut are unknown time, under their own frame, and stated */
	const char *u = strstr(err_unknown, " unknown (open when records were lost or a "
					    "switch-in went untraced, ");
	ASSERT_NOT_NULL(u);
	while (u > err_unknown && u[-1] != ' ')
		u--;
	if (atoll(u) > 0) {
		ASSERT_CONTAINS(o.out, "[unknown: lost records]");
		snprintf(said, sizeof(said), " %% of thread time unknown: %llu records lost",
			 records);
		ASSERT_CONTAINS(o.out, said);
		/* the exports carry it too */
		char folded[1100];
		snprintf(folded, sizeof(folded), "%s.folded", spool);
		test_output_free(&o);
		test_runf(&o, 60, "%s convert --metric wall %s -o %s", test_bin("sonde"), spool,
			  folded);
		if (o.status != 0)
			FAIL("convert exited %d:\n%s", o.status, o.err);
		char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
		ASSERT_CONTAINS(text, ";[unknown: lost records] ");
		free(text);
	}
	free(err_unknown);
	test_output_free(&o);
	char *t = ASSERT_NOT_NULL(test_read_file(truth, NULL));
	int pid = (int)offcpu_truth_value(t, "pid");
	free(t);
	return nap_reached(spool, pid, "--tid");
}

TEST_TIMEOUT(offcpu_loss_is_recovered, 200)
{
	require_offcpu();
	ASSERT(loss_run("", "loss.spool"));
}

TEST_EXCLUSIVE(offcpu_system_wide_loss_is_recovered, 200)
{
	bool reached = false;

	require_offcpu();
	/* the machine's every switch shares the tiny rings: when other jobs switch a lot,
	 * the losses may drop every interval of the program in one recording, not in three */
	for (int i = 0; i < 3 && !reached; i++)
		reached = loss_run("-a --off-cpu-backend perf", "aloss.spool");
	ASSERT(reached);
}

/* The sum of a folded report's counts. */
static double counts_sum(char *folded)
{
	double sum = 0;

	for (char *save = NULL, *l = strtok_r(folded, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save))
		sum += atof(strrchr(l, ' ') + 1);
	return sum;
}

/* The sum of `sonde report --folded --metric off-cpu FLAGS`. */
static double folded_sum(const char *spool, const char *flags)
{
	struct test_output o;
	double sum = 0;

	test_runf(&o, 60, "%s report --folded --metric off-cpu %s %s", test_bin("sonde"), flags,
		  spool);
	if (o.status != 0)
		FAIL("report %s exited %d:\n%s", flags, o.status, o.err);
	sum = counts_sum(o.out);
	test_output_free(&o);
	return sum;
}

/* The same for one comm of one process (a comm may hold spaces: no shell between). */
static double folded_sum_comm(const char *spool, const char *pid, const char *comm)
{
	const char *argv[] = {
		test_bin("sonde"), "report", "--folded", "--metric", "off-cpu", "--pid", pid,
		"--comm",	   comm,     spool,	 NULL};
	struct test_output o;
	double sum = 0;

	test_run(&o, 60, argv);
	if (o.status != 0)
		FAIL("report --comm %s exited %d:\n%s", comm, o.status, o.err);
	sum = counts_sum(o.out);
	test_output_free(&o);
	return sum;
}

/* report's filters apply to intervals: the comms' parts, or the CPUs', add up to
 * the whole (within the microsecond rounding of each line), and a time window holds less. */
TEST_EXCLUSIVE(offcpu_report_filters_apply_to_intervals, 120)
{
	const char *spool = test_path("f.spool"), *truth = test_path("f.truth");
	char pid[32];

	require_offcpu();
	record_split("-a --off-cpu-backend perf", spool, truth, 3);
	acct_check_spool(spool, true);
	char *t = ASSERT_NOT_NULL(test_read_file(truth, NULL));
	snprintf(pid, sizeof(pid), "--pid %d", (int)offcpu_truth_value(t, "pid"));
	free(t);
	double all = folded_sum(spool, pid);
	ASSERT(all > 1e6); /* seconds of waiting, in microseconds */
	/* the comms of the program's intervals: its two threads', and any it had before
	 * (the launched child's, waiting for its exec while -a already records) */
	struct sonde_spool *sp = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_thread th;
	char comms[8][64];
	int n_comms = 0;
	uint64_t t0 = UINT64_MAX;
	sonde_spool__get_info(sp, &in);
	for (uint64_t i = 0; sonde_spool__get_offcpu(sp, i, &iv) == 0; i++) {
		if (sonde_spool__get_thread(sp, iv.thread, &th) != 0 ||
		    (int)th.pid != atoi(pid + 6))
			continue;
		if (iv.switch_out_ns < t0)
			t0 = iv.switch_out_ns;
		int k = 0;
		while (k < n_comms && strcmp(comms[k], th.comm) != 0)
			k++;
		if (k == n_comms && n_comms < 8)
			snprintf(comms[n_comms++], sizeof(comms[0]), "%s", th.comm);
	}
	sonde_spool__close(sp);
	ASSERT(t0 != UINT64_MAX);
	double by_comm = 0, main_t = 0, writer = 0;
	for (int k = 0; k < n_comms; k++) {
		double v = folded_sum_comm(spool, pid + 6, comms[k]);
		by_comm += v;
		if (strcmp(comms[k], "offcpu_split") == 0)
			main_t = v;
		else if (strcmp(comms[k], "offcpu-writer") == 0)
			writer = v;
		else
			printf("the program's intervals as '%s': %.0f us\n", comms[k], v);
	}
	ASSERT(main_t > 0 && writer > 0);
	char f0[64], f1[64];
	snprintf(f0, sizeof(f0), "%s --cpu 0", pid);
	snprintf(f1, sizeof(f1), "%s --cpu 1", pid);
	double cpu0 = folded_sum(spool, f0), cpu1 = folded_sum(spool, f1);
	/* the sums differ by the rounding only: half a microsecond per line at most */
	ASSERT_DOUBLE_NEAR(by_comm, all, 200);
	if (sysconf(_SC_NPROCESSORS_ONLN) == 2)
		ASSERT_DOUBLE_NEAR(cpu0 + cpu1, all, 200);
	/* the first second of the program's waits (its start in the recording depends on how
	 * long -a took to start) */
	double from = (double)(t0 - in.header.start_monotonic_ns) / 1e9;
	snprintf(f0, sizeof(f0), "%s --time %.3f,%.3f", pid, from, from + 1);
	double first = folded_sum(spool, f0);
	ASSERT(first > 0 && first < 0.6 * all);
}

/* A launched shell's child inherits the off-CPU events: its waits are recorded. */
TEST_TIMEOUT(offcpu_follows_children, 120)
{
	const char *spool = test_path("c.spool"), *truth = test_path("c.truth");
	char cmd[4096];

	require_offcpu();
	snprintf(cmd, sizeof(cmd), "%s 2 %s; true", test_prog("offcpu_split"), truth);
	const char *argv[] = {test_bin("sonde"), "record", "--off-cpu", "-q", "-o", spool, "--",
			      "/bin/sh",	 "-c",	   cmd,		NULL};
	struct test_output o;
	test_run(&o, 60, argv);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	char *t = ASSERT_NOT_NULL(test_read_file(truth, NULL));
	int pid = (int)offcpu_truth_value(t, "pid");
	free(t);
	check_spool(spool, 20);
	check_nap_reached(spool, pid, "--pid");
}

/* --off-cpu with -e sched:sched_switch is off-CPU only: no on-CPU sample, launched and
 * with -a, the sleeping stacks reaching main; launched, the off-CPU time of nap and
 * wait_pipe is what the program measured (within 10 %, accumulated). With -a every switch
 * of a busy shared machine goes through the rings, whose losses drop intervals: its time
 * is not judged. */
TEST_EXCLUSIVE(offcpu_only_has_no_on_cpu_samples, 300)
{
	const char *spool = test_path("only.spool"), *truth = test_path("only.truth");
	struct test_output o;
	struct sonde_spool_info in;

	require_offcpu();
	for (int sys = 0; sys < 2; sys++) {
		struct offcpu_wall w = {0};
		bool seen = false;
		char *last_err = NULL;
		/* launched, until the time adds up; with -a, until the stacks came through */
		for (int i = 0;
		     sys ? i < 3 && !seen
			 : i < 4 && (i == 0 ||
				     w.got[OFFCPU_NAP] * 1e3 < 0.9 * w.truth[OFFCPU_NAP] ||
				     w.got[OFFCPU_PIPE] * 1e3 < 0.9 * w.truth[OFFCPU_PIPE]);
		     i++) {
			test_runf(&o, 120,
				  "%s record --off-cpu -e sched:sched_switch --off-cpu-min 0 %s -o "
				  "%s -- %s 2 %s",
				  test_bin("sonde"), sys ? "-a --off-cpu-backend perf" : "", spool,
				  test_prog("offcpu_split"), truth);
			if (o.status != 0)
				FAIL("record exited %d:\n%s", o.status, o.err);
			ASSERT_CONTAINS(o.err, ", event dummy\n");
			ASSERT_CONTAINS(o.err, "off-CPU only (every switch)");
			free(last_err);
			last_err = ASSERT_NOT_NULL(strdup(o.err));
			test_output_free(&o);
			if (sys)
				acct_check_spool(spool, true);
			struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
			sonde_spool__get_info(s, &in);
			uint64_t n = sonde_spool__offcpu_count(s);
			sonde_spool__close(s);
			ASSERT_INT(in.complete, ==, 1);
			ASSERT_UINT(in.samples, ==, 0);
			ASSERT_UINT(n, >=, 20);
			if (sys)
				offcpu_wall_add_seen(&w, spool, truth, "off-cpu", true, &seen);
			else
				offcpu_wall_add(&w, spool, truth, "off-cpu", true);
			printf("%s: nap %.3f s of %.3f, wait_pipe %.3f s of %.3f, burn %.3f s\n",
			       sys ? "-a" : "launched", w.got[OFFCPU_NAP] / 1e6,
			       w.truth[OFFCPU_NAP] / 1e9, w.got[OFFCPU_PIPE] / 1e6,
			       w.truth[OFFCPU_PIPE] / 1e9, w.got[OFFCPU_BURN] / 1e6);
		}
		if (sys) {
			if (!seen)
				FAIL("-a: three recordings, none with sleeping stacks from main "
				     "through both nap and wait_pipe; the last said:\n%s",
				     last_err);
			free(last_err);
			continue;
		}
		free(last_err);
		ASSERT_DOUBLE_NEAR(w.got[OFFCPU_NAP] * 1e3 / w.truth[OFFCPU_NAP], 1.0, 0.1);
		ASSERT_DOUBLE_NEAR(w.got[OFFCPU_PIPE] * 1e3 / w.truth[OFFCPU_PIPE], 1.0, 0.1);
	}
}

/* The "(P%)" of report's unresolved-frames footer, and whether it is given in time. */
static double unresolved_share(const char *out, bool *in_time)
{
	const char *f = strstr(out, "\nunresolved frames: ");

	if (!f)
		FAIL("no unresolved-frames footer:\n%s", out);
	const char *p = strchr(f, '(');
	ASSERT_NOT_NULL(p);
	*in_time = strstr(f, " s (") != NULL && strstr(f, "of the time has one") != NULL;
	return atof(p + 1);
}

/* Records `sonde record -o spool ARGS` (taking *took seconds; its summary into *summary,
 * when not NULL, to be freed), then reports it with --metric wall into o; the seconds its
 * header says it is over. */
static double recorded_span(struct test_output *o, const char *spool, const char *args,
			    double *took, char **summary)
{
	double t0 = test_now();

	test_runf(o, 60, "%s record -o %s %s", test_bin("sonde"), spool, args);
	*took = test_now() - t0;
	if (o->status != 0)
		FAIL("record exited %d:\n%s", o->status, o->err);
	if (summary)
		*summary = ASSERT_NOT_NULL(strdup(o->err));
	test_output_free(o);
	test_runf(o, 60, "%s report --metric wall %s", test_bin("sonde"), spool);
	if (o->status != 0)
		FAIL("report exited %d:\n%s", o->status, o->err);
	const char *over = ASSERT_NOT_NULL(strstr(o->out, " over "));
	return atof(over + 6);
}

/* A program that only sleeps: `sleep 2` has no on-CPU time worth a sample, and its one
 * wait is the recording. The report's header spans that wait ("over 2.0x s", not 0.00),
 * the wall metric has it whole, and the unresolved-frames footer of --metric wall speaks
 * of time, its share of it at most 100 % (it summed nanoseconds and divided by events). */
TEST_TIMEOUT(offcpu_report_of_a_sleep_spans_its_wait, 120)
{
	struct test_output o;
	const char *spool = test_path("sleep.spool");
	bool in_time;

	require_offcpu();
	double took, span = recorded_span(&o, spool, "--off-cpu -q -- sleep 2", &took, NULL);
	printf("span %.2f s, record took %.2f s\n", span, took);
	/* sleep's 2 s (printed to 0.01 s), and no more than the whole run took */
	ASSERT(span >= 1.99);
	ASSERT(span <= took + 0.01);
	const char *all = strstr(o.out, "metric wall: ");
	ASSERT_NOT_NULL(all);
	ASSERT(atof(all + 13) >= 1.99);
	double share = unresolved_share(o.out, &in_time);
	ASSERT(in_time);
	ASSERT(share >= 0 && share <= 100);
	test_output_free(&o);

	/* a ping-pong, off CPU only: its waits are short (counted, not stacked) but for a
	 * few, and the header spans its run, not those few (1.0 s of 2.0 s) */
	char args[PATH_MAX + 64];
	char *summary;
	snprintf(args, sizeof(args), "--off-cpu -e sched:sched_switch -- %s 1",
		 test_prog("pingpong"));
	span = recorded_span(&o, spool, args, &took, &summary);
	printf("ping-pong: span %.2f s, record took %.2f s\n", span, took);
	ASSERT(span >= 0.99);
	ASSERT(span <= took + 0.01);
	/* its on-CPU time is measured without the CPUs' switches, and the header says how
	 * (not where the recording lost or dropped a wait: its summary says which) */
	if (!strstr(o.out, "on CPU (the threads' lives less their waits, spread over"))
		FAIL("the wall metric is not the lives less the waits:\n%s\nrecorded:\n%s", o.out,
		     summary);
	free(summary);
	test_output_free(&o);
	/* the main thread's life starts at its exec, where the recording first sees it,
	 * before it starts the ponger (it was defined at its first long wait or sample) */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread th;
	uint64_t main_at = UINT64_MAX, ponger_at = UINT64_MAX;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &th));
		uint64_t *at = th.tid == th.pid ? &main_at : &ponger_at;
		if (th.time_ns < *at)
			*at = th.time_ns;
	}
	sonde_spool__close(s);
	ASSERT(ponger_at != UINT64_MAX);
	ASSERT_UINT(main_at, <=, ponger_at);
}

/* Whether a --folded-roots thread report names thread `id` somewhere ("NAME-PID/ID;"
 * with a NAME other than the bare id). */
static bool named_elsewhere(const char *folded, const char *id, size_t len)
{
	for (const char *l = folded; *l; l = strchrnul(l, '\n'), l += *l == '\n') {
		const char *slash = strchr(l, '/'), *dash = strchr(l, '-');
		if (!slash || !dash || slash < dash || strchrnul(l, '\n') < slash)
			continue;
		if (!strncmp(slash + 1, id, len) && slash[1 + len] == ';' &&
		    !((size_t)(dash - l) == len && !strncmp(l, id, len)))
			return true;
	}
	return false;
}

/* A --folded-roots thread line on a task's way out (through do_exit) whose root is a bare
 * id ("1234-1234/1234": the name was lost) though other lines name that thread, or NULL.
 * (A process that started and ended between the recording's /proc scan and its events
 * was never named: it has no name to keep.) */
static const char *bare_exit_root(const char *folded)
{
	for (const char *l = folded; *l; l = strchrnul(l, '\n'), l += *l == '\n') {
		const char *dash = strchr(l, '-'), *slash = strchr(l, '/'),
			   *end = strchrnul(l, '\n');
		const char *exit = strstr(l, ";do_exit;");
		if (!dash || !slash || slash < dash || end < slash || !exit || exit > end)
			continue;
		size_t len = (size_t)(dash - l);
		if (!strncmp(l, slash + 1, len) && strspn(l, "0123456789") == len &&
		    named_elsewhere(folded, l, len))
			return l;
	}
	return NULL;
}

/* Records the whole machine on and off CPU for 2 s (the perf_event backend, which keeps
 * each CPU's switches) while argv runs, then checks the recording's accounting. */
static void record_system_wide_beside(const char *const argv[], const char *spool)
{
	struct test_output o;

	require_offcpu();
	pid_t sh = test_spawn(argv);
	test_runf(&o, 60, "%s record -a --off-cpu --off-cpu-backend perf -q -d 2 -o %s",
		  test_bin("sonde"), spool);
	kill(sh, SIGKILL);
	test_wait(sh, 30);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	acct_check_spool(spool, true);
}

/* Exit ends a thread: a task's last switch-out (from do_task_dead, the kernel's state
 * EXIT_ZOMBIE or EXIT_DEAD) is no wait, since it never runs again. System-wide, while
 * a shell starts and ends a process every 50 ms or so, no interval of the recording may be
 * such a switch-out (they used to wait until the recording ended, under do_task_dead).
 * And a task keeps its name to the end: per-CPU events still sample it after its exit
 * record (on its way out of the kernel), when /proc no longer has it; those samples were
 * labelled with a bare id. */
TEST_TIMEOUT(offcpu_system_wide_exited_tasks_end_and_keep_their_names, 120)
{
	const char *argv[] = {"/bin/sh", "-c", "while :; do sleep 0.05; done", NULL};
	struct test_output o;
	const char *spool = test_path("exits.spool");

	record_system_wide_beside(argv, spool);

	test_runf(&o, 60, "%s report --folded --metric off-cpu %s", test_bin("sonde"), spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	/* the recording has kernel frames (-a): the sleeps' own waits are there */
	ASSERT_CONTAINS(o.out, "nanosleep");
	const char *dead = strstr(o.out, "do_task_dead");
	if (dead) {
		const char *l = dead;
		while (l > o.out && l[-1] != '\n')
			l--;
		FAIL("an exited task waits: %.*s", (int)(strchrnul(dead, '\n') - l), l);
	}
	test_output_free(&o);

	test_runf(&o, 60, "%s report --folded --folded-roots thread --metric wall %s",
		  test_bin("sonde"), spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	ASSERT_CONTAINS(o.out, "\nsleep-");
	const char *bare = bare_exit_root(o.out);
	if (bare)
		FAIL("a thread without its name: %.*s", (int)(strchrnul(bare, '\n') - bare), bare);
	test_output_free(&o);
}

/* Never a bare id when a name was seen, on a machine that forks and execs without pause:
 * a shell runs /bin/true at least 600 times and for at least 2 s (the window its
 * siblings record) under a system-wide recording that lasts until the shell exits, so that
 * hundreds of tasks exit (more than the 256 the recorder once kept the names of: a task
 * whose last wait was written after that was defined again by its id) however slowly a
 * loaded machine forks, and no task or process of the accounting tables is labelled by its
 * id when the spool names it anywhere (acct_check_spool). At least 300 must be in the
 * spool under their name (a task that left no sample and no switch is not in it).
 *
 * The shell's own trues: a copy of /bin/true named after this test process, since the
 * recording sees the whole machine, where other tests (another run of this one among
 * them) run programs named true that may outlive the recording (one such beside it gave
 * "538 named, 537 with an exit" with no record lost). And a tid defined twice is one task
 * defined twice only when the first had not ended by the second's definition: pid_max is
 * 32768 here, and a machine forking thousands of tasks a second gives a pid again within
 * seconds, to another true ("true 30765 defined twice"; two trues given one pid through
 * ns_last_pid are defined so, each with its exit before the other's definition). */
TEST_TIMEOUT(offcpu_system_wide_fork_storm_keeps_every_name, 120)
{
	const char *spool = test_path("storm.spool");
	char name[16], script[512];
	size_t len;

	require_offcpu();
	snprintf(name, sizeof(name), "true-%d", (int)getpid());
	const char *prog = test_path(name);
	char *bin = ASSERT_NOT_NULL(test_read_file("/bin/true", &len));
	test_write_file(prog, bin, len);
	free(bin);
	ASSERT_OK(chmod(prog, 0755));
	snprintf(script, sizeof(script),
		 "i=0; end=$(($(date +%%s) + 3)); "
		 "while [ $i -lt 600 ] || [ $(date +%%s) -lt $end ]; do "
		 "'%s'; i=$((i+1)); done",
		 prog);
	const char *argv[] = {test_bin("sonde"), "record", "-a", "--off-cpu",
			      "--off-cpu-backend", "perf", "-q", "-o", spool, "--", "/bin/sh", "-c",
			      script, NULL};
	struct test_output o;

	test_run(&o, 100, argv);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	acct_check_spool(spool, true);

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread t, prev;
	uint32_t named = 0, exited = 0, again = 0;
	uint64_t exit_ns, prev_exit;
	struct u64map seen = U64MAP_INIT;

	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		if (sonde_spool__get_thread(s, i, &t) < 0 || strcmp(t.comm, name))
			continue;
		/* one definition each: a record after its exit record is the same thread's; a
		 * later one is another task's once the first has ended */
		uint64_t *was = sonde__u64map_get(&seen, t.tid);
		if (was) {
			ASSERT_OK(sonde_spool__get_thread(s, (uint32_t)*was, &prev));
			if (sonde_spool__get_thread_exit(s, (uint32_t)*was, &prev_exit) ||
			    prev_exit > t.time_ns)
				FAIL("%s %u defined twice, at %llu and %llu ns, with no exit between",
				     name, t.tid, (unsigned long long)prev.time_ns,
				     (unsigned long long)t.time_ns);
			again++;
		}
		ASSERT_OK(sonde__u64map_put(&seen, t.tid, i));
		named++;
		exited += sonde_spool__get_thread_exit(s, i, &exit_ns) == 0;
	}
	sonde__u64map_free(&seen);
	sonde_spool__close(s);
	printf("%u tasks of %s in the spool under their name (%u given a pid again), %u with "
	       "an exit\n",
	       named, name, again, exited);
	ASSERT_UINT(named, >=, 300);
	/* each ends: it exited before the recording did (it had 320 exits of 591) */
	ASSERT_UINT(exited, ==, named);
}

/* A process lives until its last thread ends, not its main one: offcpu_leader_exit's main
 * thread ends with pthread_exit() and its napper naps 8 times after it, then exits. Every
 * one of those waits is in the spool, stacked through nap, and the napper's exit after
 * them (offcpu_check_leader_exit), launched, with -a (whose accounting adds up) and with
 * -p, where the recording ends with the napper, also when it attaches after the main thread
 * ended. The main thread's exit used to end the
 * process: its modules retired (the napper's stacks unresolved), with -a its entry
 * dropped, and `record -p` ended there (/proc names the process a zombie while its other
 * threads run on), without the napper's waits and exit. */
TEST_TIMEOUT(offcpu_process_lives_until_its_last_thread, 120)
{
	const char *spool = test_path("leader.spool"), *truth = test_path("leader.truth");

	require_offcpu();
	offcpu_record_leader_exit("perf", "", spool, truth);
	offcpu_check_leader_exit(spool, truth, LEADER_EXIT_NAP_MS);
	offcpu_record_leader_exit("perf", "-p", spool, truth);
	offcpu_check_leader_exit(spool, truth, LEADER_EXIT_NAP_MS);
	/* attached once the main thread has ended: the probe event, the maps and the exe go
	 * through the napper (the zombie main thread has none; -p was refused) */
	offcpu_record_leader_exit("perf", "-p-late", spool, truth);
	offcpu_check_leader_exit(spool, truth, LEADER_EXIT_NAP_MS);
}

TEST_TIMEOUT(offcpu_system_wide_process_lives_until_its_last_thread, 120)
{
	const char *spool = test_path("leader.spool"), *truth = test_path("leader.truth");

	require_offcpu();
	offcpu_record_leader_exit("perf", "-a", spool, truth);
	offcpu_check_leader_exit(spool, truth, LEADER_EXIT_NAP_MS);
	acct_check_spool(spool, true);
}

/* Runs `sonde report --summary ARGS SPOOL` into *o, printed; fails unless it succeeds. */
static void run_summary(struct test_output *o, const char *args, const char *spool)
{
	test_runf(o, 60, "%s report --summary %s %s", test_bin("sonde"), args, spool);
	if (o->status != 0)
		FAIL("report --summary exited %d:\n%s", o->status, o->err);
	printf("%s", o->out);
}

/* The numbers of --summary's row that starts with `name`: 8 columns, total last. */
static void summary_row(const char *out, const char *name, double v[8])
{
	const char *l = strstr(out, name);

	if (!l)
		FAIL("no row %s in the summary:\n%s", name, out);
	l += strlen(name);
	for (int i = 0; i < 8; i++) {
		char *end;
		v[i] = strtod(l, &end);
		if (end == l)
			FAIL("row %s has no column %d:\n%s", name, i, out);
		l = end;
	}
}

/* report --summary: the main thread of offcpu_split, by state. Its columns add up to its
 * total, which is --metric wall's total for the thread and the program's own measure of
 * its loop (burn + nap + wait_pipe) within 10 %; its sleeping time is at most the naps'
 * and pipe waits' and at least the naps' 40 ms each, which the kernel never cuts short
 * (what the program measured also holds the time a loaded machine left it runnable after
 * the wakeups, which is the runnable column's: a run beside other work once had 2.7 s of
 * it in 3.4 s, and 0.51 s asleep for 0.8 s of measured naps and pipe waits). */
TEST_TIMEOUT(offcpu_report_summary_splits_the_wall_time, 120)
{
	struct test_output o;
	const char *spool = test_path("sum.spool"), *truth_path = test_path("sum.truth");
	double row[8], all[8];

	require_offcpu();
	record_split("--off-cpu-min 0", spool, truth_path, 3);
	char *truth = ASSERT_NOT_NULL(test_read_file(truth_path, NULL));
	int pid = (int)offcpu_truth_value(truth, "pid");
	double burn = offcpu_truth_value(truth, "burn") / 1e9,
	       nap = offcpu_truth_value(truth, "nap") / 1e9;
	double pipe = offcpu_truth_value(truth, "wait_pipe") / 1e9;
	double rounds = offcpu_truth_value(truth, "rounds");
	free(truth);

	test_runf(&o, 60, "%s report --metric wall --tid %d %s", test_bin("sonde"), pid, spool);
	ASSERT_INT(o.status, ==, 0);
	const char *m = strstr(o.out, "metric wall: ");
	ASSERT_NOT_NULL(m);
	double wall = atof(m + 13);
	test_output_free(&o);

	char name[64];
	snprintf(name, sizeof(name), "--tid %d", pid);
	run_summary(&o, name, spool);
	snprintf(name, sizeof(name), "offcpu_split-%d ", pid);
	summary_row(o.out, name, row);
	summary_row(o.out, "\nall ", all);
	test_output_free(&o);
	double sum = 0;
	for (int i = 0; i < 7; i++)
		sum += row[i];
	ASSERT_DOUBLE_NEAR(sum, row[7], 0.006); /* each printed to the millisecond */
	ASSERT_DOUBLE_NEAR(all[7], row[7], 0.001);
	ASSERT_DOUBLE_NEAR(row[7], wall, 0.002);
	ASSERT_DOUBLE_NEAR(row[7] / (burn + nap + pipe), 1.0, 0.1);
	ASSERT(row[2] <= 1.1 * (nap + pipe));
	/* sleeping, or unknown where a loss cut a wait; each printed to the millisecond */
	if (row[2] + row[5] < rounds * 0.040 - 0.002)
		FAIL("%.3f s asleep (and unknown) for %.0f naps of 40 ms", row[2] + row[5], rounds);
}

/* The on-CPU seconds of `report --metric wall`'s output `out` of spool (the tasks' stays
 * on the CPUs by their switches, spread over their samples), checked against the top
 * table's on-CPU column (summary_on) and against the sums of the wall metric's folded
 * stacks, from report and from convert, all within rounding. */
static double wall_on;
static void wall_on_cpu(const char *out, const char *spool, double summary_on)
{
	struct test_output o;
	double all;
	const char *m = strstr(out, "metric wall: ");

	ASSERT_NOT_NULL(m);
	ASSERT_INT(sscanf(m, "metric wall: %lf s in all = %lf s on CPU (by the CPUs' switches",
			  &all, &wall_on),
		   ==, 2);
	printf("wall: %.3f s in all, %.3f s on CPU; the summary's on-CPU %.3f s\n", all, wall_on,
	       summary_on);
	ASSERT_DOUBLE_NEAR(wall_on, summary_on, 0.0015);
	for (int convert = 0; convert < 2; convert++) {
		if (convert)
			test_runf(&o, 60,
				  "%s convert --metric wall --no-symbolize -f folded -o - %s",
				  test_bin("sonde"), spool);
		else
			test_runf(&o, 60, "%s report --folded --metric wall %s", test_bin("sonde"),
				  spool);
		if (o.status != 0)
			FAIL("exited %d:\n%s", o.status, o.err);
		double sum = counts_sum(o.out) / 1e6; /* microseconds */
		printf("%s --metric wall: folded stacks sum to %.6f s\n",
		       convert ? "convert" : "report", sum);
		ASSERT_DOUBLE_NEAR(sum, all, 0.0015);
		test_output_free(&o);
	}
}

/* report --summary, and the top of --metric wall, of an -a --off-cpu recording give each
 * CPU's busy, idle and unknown time, adding up to CPUs x the window: a busy loop keeps
 * one CPU busy most of the recording; the wall metric's on-CPU time is the summary's. */
TEST_TIMEOUT(offcpu_system_wide_summary_gives_each_cpu_time, 120)
{
	const char *argv[] = {"/bin/sh", "-c", "while :; do :; done", NULL};
	struct test_output o;
	const char *spool = test_path("cpus.spool");
	double busy, idle, unknown, total, window, summary_on = -1;
	unsigned cpus;

	record_system_wide_beside(argv, spool);
	for (int wall = 0; wall < 2; wall++) {
		test_runf(&o, 60, "%s report %s %s", test_bin("sonde"),
			  wall ? "--metric wall" : "--summary", spool);
		if (o.status != 0)
			FAIL("report exited %d:\n%s", o.status, o.err);
		/* both print the process table, then the CPUs' */
		ASSERT_CONTAINS(o.out, "\nprocess  ");
		const char *cpu_table = strstr(o.out, "by the CPUs' switches)\n");
		ASSERT_NOT_NULL(cpu_table);
		ASSERT(strstr(o.out, "\nprocess  ") < cpu_table);
		const char *all = strstr(cpu_table, "\nall ");
		ASSERT_NOT_NULL(all);
		ASSERT_INT(sscanf(all, "\nall %lf %lf %lf %lf  (%u CPUs x %lf s)", &busy, &idle,
				  &unknown, &total, &cpus, &window),
			   ==, 6);
		printf("%s: busy %.3f idle %.3f unknown %.3f = %.3f of %u x %.3f s\n",
		       wall ? "wall" : "summary", busy, idle, unknown, total, cpus, window);
		double row[8];
		summary_row(o.out, "\nall ", row);
		if (!wall)
			summary_on = row[0];
		else
			wall_on_cpu(o.out, spool, row[0]);
		ASSERT_UINT(cpus, ==, (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
		ASSERT(total > cpus * window - 0.0025 && total < cpus * window + 0.0025);
		ASSERT(busy + idle + unknown > total - 0.002 &&
		       busy + idle + unknown < total + 0.002);
		/* the loop ran through the recording on some CPU */
		ASSERT(busy >= 0.8 * window);
		test_output_free(&o);
	}
	/* --summary's on-CPU time, the tasks' by the switches, is the wall metric's */
	ASSERT_DOUBLE_NEAR(summary_on, wall_on, 0.0015);
}

/* --summary splits a wait at its wakeup: in the state the thread left the CPU in up to the
 * wakeup, runnable from there to its switch-in (waiting for a CPU), as the scheduler
 * counts it; a preemption is runnable throughout; an interval without a wakeup is in its
 * state throughout. A written spool, so the figures are exact. */
TEST(offcpu_report_summary_runnable_from_the_wakeup)
{
	const char *spool = test_path("wake.spool");
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1000000};
	uint32_t th;
	int fd = open(spool, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	ASSERT_INT(fd, >=, 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, h.start_monotonic_ns, 77, 77, "waiter", &th));
	const uint64_t s0 = h.start_monotonic_ns;
	/* S 100 ms woken after 70; D 50 ms woken after 20; R 30 ms; S 40 ms, wakeup unseen */
	const struct sonde_spool_offcpu iv[] = {
		{s0, s0 + 100000000, s0 + 70000000, th, 0, SONDE_OFFCPU_SLEEPING, 5, 0, 0},
		{s0 + 200000000, s0 + 250000000, s0 + 220000000, th, 0, SONDE_OFFCPU_BLOCKED, 5, 0,
		 0},
		{s0 + 300000000, s0 + 330000000, 0, th, 0, SONDE_OFFCPU_RUNNABLE, 0, 0, 0},
		{s0 + 400000000, s0 + 440000000, 0, th, 0, SONDE_OFFCPU_SLEEPING, 0, 0, 0},
	};
	for (size_t i = 0; i < 4; i++)
		ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv[i], NULL, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);

	struct test_output o;
	double v[8];
	run_summary(&o, "", spool);
	summary_row(o.out, "\nwaiter-77 ", v);
	/* runnable 30 + 30 + 30 ms; sleeping 70 + 40; blocked 20; the 220 ms between the
	 * waits, which no sample covers (and no record says every switch-out is here),
	 * unknown; in all its life, 440 */
	ASSERT(v[1] > 0.0895 && v[1] < 0.0905);
	ASSERT(v[2] > 0.1095 && v[2] < 0.1105);
	ASSERT(v[3] > 0.0195 && v[3] < 0.0205);
	ASSERT(v[5] > 0.2195 && v[5] < 0.2205);
	ASSERT(v[7] > 0.4395 && v[7] < 0.4405);
	test_output_free(&o);
}

/* A thread's life is partitioned exactly where the recording kept the CPUs' switches: its
 * on-CPU time is its stays on the CPUs (not samples x period: a thread running in bursts
 * shorter than the period has few samples or none), its life ends at its exit (an EXIT
 * record, then its last switch-out), and its row's total in --summary is its life. A
 * written spool, so the figures are exact: worker (tid 81) runs 3 ms, sleeps 100 ms, runs
 * 2 ms, exits and leaves the CPU at 106 ms, with no sample; the idle task then holds CPU 0
 * and a spinner (tid 90, one sample) CPU 1 to 300 ms. */
/* Writes that spool (the worker and the spinner above) to spool; the test follows. */
static void write_life_spool(const char *spool)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1000000};
	uint32_t worker, spinner;
	const uint64_t s0 = h.start_monotonic_ns, ms = 1000000;
	int fd = open(spool, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	ASSERT_INT(fd, >=, 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, s0 + ms, 80, 81, "worker", &worker));
	ASSERT_OK(sonde_spool_writer__add_thread(w, s0 + 2 * ms, 90, 90, "spinner", &spinner));
	const struct sonde_spool_frame f = {0, 0x1234};
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, s0 + 150 * ms, spinner, 1, &f, 1, 0));
	const struct sonde_spool_offcpu nap = {
		s0 + 4 * ms, s0 + 104 * ms, s0 + 104 * ms, worker, 0, SONDE_OFFCPU_SLEEPING, 0,
		0, 0};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &nap, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_exit(w, s0 + 105 * ms, worker));
	const struct sonde_spool_switch cpu0[] = {
		{s0 + 1 * ms, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{s0 + 4 * ms, 81, 0, SONDE_OFFCPU_SLEEPING},
		{s0 + 104 * ms, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{s0 + 106 * ms, 81, 0, SONDE_SWITCH_EXITED},
	};
	const struct sonde_spool_switch cpu1[] = {
		{s0 + 2 * ms, 0, 90, SONDE_OFFCPU_RUNNABLE},
		{s0 + 300 * ms, 90, 0, SONDE_OFFCPU_RUNNABLE},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 4));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 2));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);
}

TEST(offcpu_report_summary_partitions_each_life_by_the_switches)
{
	const char *spool = test_path("life.spool");

	write_life_spool(spool);

	struct test_output o;
	double v[8];
	run_summary(&o, "", spool);
	summary_row(o.out, "\nworker-80 ", v);
	/* on-CPU 3 + 2 ms by the switches (it has no sample), sleeping 100 ms; its life from
	 * its first switch-in at 1 ms to its last switch-out at 106 ms, nothing unknown */
	ASSERT_DOUBLE_NEAR(v[0], 0.005, 0.0005);
	ASSERT_DOUBLE_NEAR(v[2], 0.100, 0.0005);
	ASSERT_DOUBLE_NEAR(v[5], 0.000, 0.0005);
	ASSERT_DOUBLE_NEAR(v[7], 0.105, 0.0005);
	/* the spinner: on CPU from 2 to 300 ms by the switches, not its one sample's 1 ms */
	summary_row(o.out, "\nspinner-90 ", v);
	ASSERT_DOUBLE_NEAR(v[0], 0.298, 0.0005);
	ASSERT_DOUBLE_NEAR(v[7], 0.298, 0.0005);
	test_output_free(&o);
}

/* Where the recording kept the CPUs' switches, the wall metric weighs a task's samples by
 * its stays on the CPUs, not samples x period, and a task that ran unsampled weighs under
 * [on-cpu: not sampled]: in report --metric wall, its folded stacks and convert's, the
 * spool of the test above gives the spinner's one sample 298 ms and the worker 5 ms
 * unsampled beside its 100 ms asleep, 403 ms in all, --summary's total. */
TEST(offcpu_wall_metric_weighs_samples_by_the_switches)
{
	const char *spool = test_path("wall.spool");
	struct test_output o;
	double all, on;

	write_life_spool(spool);
	test_runf(&o, 60, "%s report --metric wall %s", test_bin("sonde"), spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	printf("%s", o.out);
	const char *m = strstr(o.out, "metric wall: ");
	ASSERT_NOT_NULL(m);
	ASSERT_INT(sscanf(m, "metric wall: %lf s in all = %lf s on CPU (by the CPUs' switches",
			  &all, &on),
		   ==, 2);
	ASSERT_DOUBLE_NEAR(all, 0.403, 0.0005);
	ASSERT_DOUBLE_NEAR(on, 0.303, 0.0005);
	ASSERT_CONTAINS(m, "0.005 s of it not sampled");
	test_output_free(&o);
	for (int convert = 0; convert < 2; convert++) {
		if (convert)
			test_runf(
				&o, 60,
				"%s convert --metric wall --no-symbolize --folded-roots thread -f "
				"folded -o - %s",
				test_bin("sonde"), spool);
		else
			test_runf(&o, 60,
				  "%s report --folded --folded-roots thread --metric wall %s",
				  test_bin("sonde"), spool);
		if (o.status != 0)
			FAIL("exited %d:\n%s", o.status, o.err);
		printf("%s", o.out);
		ASSERT_CONTAINS(o.out, "worker-80/81;[on-cpu: not sampled] 5000\n");
		ASSERT_CONTAINS(o.out, "worker-80/81;[off-cpu: S] 100000\n");
		const char *spin = strstr(o.out, "spinner-90/90;");
		ASSERT_NOT_NULL(spin);
		ASSERT_CONTAINS(spin, " 298000\n");
		ASSERT_DOUBLE_NEAR(counts_sum(o.out), 403000, 0.5);
		test_output_free(&o);
	}
	run_summary(&o, "", spool);
	double v[8];
	summary_row(o.out, "\nall ", v);
	ASSERT_DOUBLE_NEAR(v[0], 0.303, 0.0005);
	ASSERT_DOUBLE_NEAR(v[7], 0.403, 0.0005);
	test_output_free(&o);
}

/* The recorder writes each recorded thread's exit (EXIT records), so that its life ends
 * there: two sleeps of a launched shell, 0.2 s and 0.4 s, exit after their naps and
 * before the recording ends. Each is defined once, with its EXIT after its nap: a record
 * of it processed after its exit record (an interval of a sleep preempted on its way out
 * ends after it) is the same spool thread's, where it used to define the sleep a second
 * time, with no exit. */
TEST_TIMEOUT(offcpu_record_writes_each_thread_exit, 120)
{
	const char *spool = test_path("exits.spool");
	struct test_output o;
	struct sonde_spool_thread t;
	struct sonde_spool_offcpu iv;
	struct sonde_spool_info in;
	uint32_t tids[2];
	int sleeps = 0;

	const char *script = test_path("exits.sh"), *text = "sleep 0.2 & sleep 0.4; wait\n";
	require_offcpu();
	test_write_file(script, text, strlen(text));
	test_runf(&o, 60, "%s record --off-cpu -q -o %s -- /bin/sh %s", test_bin("sonde"), spool,
		  script);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		uint64_t exit_ns, nap_in = 0, nap = 0, last_in = 0;
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (strcmp(t.comm, "sleep"))
			continue;
		for (int k = 0; k < sleeps; k++)
			if (tids[k] == t.tid)
				FAIL("sleep %u defined twice", t.tid);
		for (uint64_t k = 0; sonde_spool__get_offcpu(s, k, &iv) == 0; k++) {
			if (iv.thread != i)
				continue;
			if (iv.switch_in_ns - iv.switch_out_ns > nap) {
				nap = iv.switch_in_ns - iv.switch_out_ns;
				nap_in = iv.switch_in_ns;
			}
			if (iv.switch_in_ns > last_in)
				last_in = iv.switch_in_ns;
		}
		int err = sonde_spool__get_thread_exit(s, i, &exit_ns);
		printf("sleep %u: defined %.3f s, nap %.3f s to %.3f s, last interval to %.3f s, "
		       "exit %.3f s (%d)\n",
		       t.tid, (t.time_ns - in.header.start_monotonic_ns) / 1e9, nap / 1e9,
		       (nap_in - in.header.start_monotonic_ns) / 1e9,
		       (last_in - in.header.start_monotonic_ns) / 1e9,
		       err ? 0 : (exit_ns - in.header.start_monotonic_ns) / 1e9, err);
		ASSERT_OK(err);
		ASSERT_UINT(nap, >=, 150000000); /* its nap, written before its exit */
		ASSERT_UINT(exit_ns, >=, nap_in);
		ASSERT_UINT(exit_ns, >=, t.time_ns);
		ASSERT_INT(sleeps, <, 2);
		tids[sleeps++] = t.tid;
	}
	ASSERT_INT(sleeps, ==, 2);
	sonde_spool__close(s);
}

/* A process is named as it was when it ran: a shell that exec's a sleep waits its child's
 * 0.2 s as sh-PID and its own 0.3 s as sleep-PID in report's and convert's process roots
 * (they were all sh-PID, the name before the exec), and --summary names its row after
 * the program it became. */
TEST_TIMEOUT(offcpu_process_names_follow_exec, 120)
{
	const char *spool = test_path("exec.spool"), *script = test_path("exec.sh");
	const char *text = "sleep 0.2\nexec sleep 0.3\n";
	struct test_output o;
	char root[64];

	require_offcpu();
	test_write_file(script, text, strlen(text));
	pid_t sh = -1;
	test_runf(&o, 60, "%s record --off-cpu -q -o %s -- /bin/sh %s", test_bin("sonde"), spool,
		  script);
	if (o.status != 0)
		FAIL("record exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	/* the shell's pid: the row of its child sleep is another pid */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads && sh < 0; i++)
		if (sonde_spool__get_thread(s, i, &t) == 0 && !strcmp(t.comm, "sh"))
			sh = (pid_t)t.pid;
	sonde_spool__close(s);
	ASSERT_INT(sh, >, 0);
	snprintf(root, sizeof(root), "\nsleep-%d;", (int)sh);

	for (int conv = 0; conv < 2; conv++) {
		if (conv)
			test_runf(&o, 60, "%s convert --folded-roots process --metric wall -f folded -o - %s",
				  test_bin("sonde"), spool);
		else
			test_runf(&o, 60, "%s report --folded --folded-roots process --metric wall %s",
				  test_bin("sonde"), spool);
		if (o.status != 0)
			FAIL("exited %d:\n%s", o.status, o.err);
		/* the exec'd sleep's wait (microseconds) under its own name */
		double after = 0;
		for (const char *l = strstr(o.out, root); l; l = strstr(l + 1, root)) {
			const char *end = strchrnul(l + 1, '\n'), *sp = end;
			while (sp > l && sp[-1] != ' ')
				sp--;
			after += atof(sp);
		}
		printf("%s: %.3f s under %s\n", conv ? "convert" : "report", after / 1e6, root + 1);
		/* at least half of the 0.3 s: under a sanitized recorder once 0.214 s */
		ASSERT(after >= 0.15e6);
		snprintf(root, sizeof(root), "\nsh-%d;", (int)sh);
		ASSERT_CONTAINS(o.out, root + 1);
		snprintf(root, sizeof(root), "\nsleep-%d;", (int)sh);
		test_output_free(&o);
	}
	run_summary(&o, "", spool);
	snprintf(root, sizeof(root), "\nsleep-%d ", (int)sh);
	ASSERT_CONTAINS(o.out, root);
	test_output_free(&o);
}

/* Time a loss covered keeps its own frame in every profile export, so that no format
 * drops it: a written spool whose thread slept 100 ms and was then unseen for 50 ms
 * (an UNKNOWN record), converted with --metric wall to speedscope and pprof. */
TEST(offcpu_unknown_frame_in_pprof_and_speedscope)
{
	const char *spool = test_path("unk.spool"), *json = test_path("unk.json");
	const char *pb = test_path("unk.pb.gz");
	const uint64_t ms = 1000000;
	const struct sonde_spool_offcpu lost = {101 * ms, 151 * ms, 0, 0, 0, SONDE_OFFCPU_SLEEPING,
						0, 0, 0};
	offcpu_write_napper_spool(spool, 77, &lost, 1);

	struct test_output o;
	test_runf(&o, 60, "%s convert --metric wall --no-symbolize %s -o %s", test_bin("sonde"),
		  spool, json);
	if (o.status != 0)
		FAIL("convert exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(json, NULL));
	ASSERT_CONTAINS(text, "\"[unknown: lost records]\"");
	free(text);
	test_runf(&o, 60, "%s convert --metric wall --no-symbolize %s -o %s", test_bin("sonde"),
		  spool, pb);
	if (o.status != 0)
		FAIL("convert exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	test_runf(&o, 60, "/bin/gzip -dc %s", pb);
	ASSERT_INT(o.status, ==, 0);
	const char *name = "[unknown: lost records]";
	ASSERT(memmem(o.out, o.out_len, name, strlen(name)) != NULL);
	test_output_free(&o);
}
