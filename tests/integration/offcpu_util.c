#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>
#include <sonde/view_source.h>

#include "../test.h"
#include "../util.h"
#include "offcpu_util.h"
#include "record/offcpu_bpf.h"

void offcpu_require_bpf(void)
{
	struct test_output o;

	if (!sonde__rec_offcpu_bpf_built())
		SKIP("libsonde was built without the BPF backend (mk/bpf.mk said why)");
	if (geteuid() != 0)
		SKIP("the BPF backend needs root (or CAP_BPF and CAP_PERFMON) here");
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		SKIP("the kernel has no BTF (/sys/kernel/btf/vmlinux)");
	test_runf(&o, 60, "%s record --off-cpu --off-cpu-backend bpf -o %s -- /bin/true",
		  test_bin("sonde"), test_path("probe.spool"));
	if (o.status != 0)
		SKIP("the kernel refused the BPF backend: %s", o.err);
	test_output_free(&o);
}

const char *const offcpu_phase_frame[OFFCPU_PHASES] = {";burn", ";nap;", ";wait_pipe;"};

double offcpu_truth_value(const char *text, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "%s ", key);
	const char *l = strstr(text, pat);
	if (!l)
		FAIL("no %s in the truth file:\n%s", key, text);
	return atof(l + strlen(pat));
}

int offcpu_wall_add_seen(struct offcpu_wall *w, const char *spool, const char *truth_path,
			 const char *metric, bool check_stacks, bool *stacks_seen)
{
	struct test_output o;
	char *truth = ASSERT_NOT_NULL(test_read_file(truth_path, NULL));
	int pid = (int)offcpu_truth_value(truth, "pid");
	bool nap_stack = false, pipe_stack = false;

	w->truth[OFFCPU_BURN] += offcpu_truth_value(truth, "burn");
	w->truth[OFFCPU_NAP] += offcpu_truth_value(truth, "nap");
	w->truth[OFFCPU_PIPE] += offcpu_truth_value(truth, "wait_pipe");
	w->rounds += offcpu_truth_value(truth, "rounds");
	free(truth);
	test_runf(&o, 120, "%s report --folded --metric %s --tid %d %s", test_bin("sonde"), metric,
		  pid, spool);
	if (o.status != 0)
		FAIL("report exited %d:\n%s", o.status, o.err);
	for (char *save = NULL, *l = strtok_r(o.out, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		ASSERT(sp != NULL);
		double us = atof(sp + 1);
		*sp = 0;
		for (int k = 0; k < OFFCPU_PHASES; k++)
			if (strstr(l, offcpu_phase_frame[k]))
				w->got[k] += us;
		bool sleeping = strstr(l, ";[off-cpu: S]") != NULL;
		nap_stack |= sleeping && strstr(l, ";main;nap;") != NULL;
		pipe_stack |= sleeping && strstr(l, ";main;wait_pipe;") && strstr(l, "read");
	}
	if (stacks_seen)
		*stacks_seen = nap_stack && pipe_stack;
	else if (check_stacks && (!nap_stack || !pipe_stack))
		FAIL("no sleeping stack from main through %s:\n%s", nap_stack ? "wait_pipe" : "nap",
		     o.out);
	test_output_free(&o);
	return pid;
}

int offcpu_wall_add(struct offcpu_wall *w, const char *spool, const char *truth_path,
		    const char *metric, bool check_stacks)
{
	return offcpu_wall_add_seen(w, spool, truth_path, metric, check_stacks, NULL);
}

double offcpu_share(const double *v, int k)
{
	double all = v[OFFCPU_BURN] + v[OFFCPU_NAP] + v[OFFCPU_PIPE];
	return all > 0 ? 100.0 * v[k] / all : 0;
}

bool offcpu_wall_within(const struct offcpu_wall *w, double tol)
{
	for (int k = 0; k < OFFCPU_PHASES; k++)
		if (offcpu_share(w->got, k) - offcpu_share(w->truth, k) > tol ||
		    offcpu_share(w->truth, k) - offcpu_share(w->got, k) > tol)
			return false;
	return true;
}

/* `sonde record --off-cpu --off-cpu-backend backend -q -p pid -o spool`, its standard
 * error into leader.err: the recorder's pid. */
static pid_t spawn_attached_recorder(const char *backend, const char *pid, const char *spool)
{
	const char *rec[] = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$ERR\"", test_bin("sonde"),
			     "record", "--off-cpu", "--off-cpu-backend", backend, "-q", "-p", pid,
			     "-o", spool, NULL};

	setenv("ERR", test_path("leader.err"), 1);
	return test_spawn(rec);
}

/* Fails unless spawn_attached_recorder's recorder r exits 0 (its error said). */
static void recorder_ends_well(pid_t r)
{
	int status = test_wait(r, 60);

	if (status != 0) {
		char *err = test_read_file(test_path("leader.err"), NULL);
		FAIL("record exited %d:\n%s", status, err ? err : "");
	}
}

/* `record -p` of offcpu_leader_exit once its main thread has ended ("late"): the napper
 * naps its N times once the recording has started, and the recording ends with it. */
static void record_after_leader_exit(const char *backend, const char *spool,
				     const char *truth_path, const char *naps, const char *nap_ms)
{
	char gate[4200], stat[64], pid[16];
	const char *prog[] = {test_prog("offcpu_leader_exit"), naps, nap_ms, truth_path, "late",
			      NULL};

	snprintf(gate, sizeof(gate), "%s.go", truth_path);
	unlink(gate);
	pid_t p = test_spawn(prog);
	snprintf(pid, sizeof(pid), "%d", (int)p);
	/* its main thread gone: /proc names the process a zombie, its napper running on */
	snprintf(stat, sizeof(stat), "/proc/%d/stat", (int)p);
	for (double end = test_now() + 60;; usleep(10000)) {
		char *st = test_read_file(stat, NULL), *paren = st ? strrchr(st, ')') : NULL;
		bool zombie = paren && paren[1] == ' ' && paren[2] == 'Z';
		free(st);
		if (zombie)
			break;
		if (test_now() > end)
			FAIL("offcpu_leader_exit's main thread did not end in 60 s");
	}
	pid_t r = spawn_attached_recorder(backend, pid, spool);
	/* attached once the spool is published: then the napper's naps may start */
	for (double end = test_now() + 60; access(spool, F_OK) != 0; usleep(10000))
		if (test_now() > end || waitpid(r, NULL, WNOHANG) == r) {
			char *err = test_read_file(test_path("leader.err"), NULL);
			FAIL("sonde record -p of a process whose main thread ended did not start:\n%s",
			     err ? err : "");
		}
	test_write_file(gate, "", 0);
	recorder_ends_well(r);
	ASSERT_INT(test_wait(p, 30), ==, 0);
}

void offcpu_record_leader_exit(const char *backend, const char *how, const char *spool,
			       const char *truth_path)
{
	char naps[16], nap_ms[16], pid[16];
	struct test_output o;

	snprintf(naps, sizeof(naps), "%d", LEADER_EXIT_NAPS);
	snprintf(nap_ms, sizeof(nap_ms), "%d", LEADER_EXIT_NAP_MS);
	unlink(truth_path);
	unlink(spool); /* the waits awaited below are this recording's */
	if (!strcmp(how, "-p-late")) {
		record_after_leader_exit(backend, spool, truth_path, naps, nap_ms);
		return;
	}
	if (strcmp(how, "-p")) {
		test_runf(&o, 60, "%s record %s --off-cpu --off-cpu-backend %s -q -o %s -- %s %s %s %s",
			  test_bin("sonde"), how, backend, spool, test_prog("offcpu_leader_exit"),
			  naps, nap_ms, truth_path);
		if (o.status != 0)
			FAIL("record exited %d:\n%s", o.status, o.err);
		test_output_free(&o);
		return;
	}
	int in;
	const char *prog[] = {test_prog("offcpu_leader_exit"), naps, nap_ms, truth_path, "held",
			      NULL};
	pid_t p = test_spawn_fed(&in, prog);
	snprintf(pid, sizeof(pid), "%d", (int)p);
	pid_t r = spawn_attached_recorder(backend, pid, spool);
	/* attached once the napper's waits are in the spool: then its main thread may go */
	for (double end = test_now() + 60;; usleep(20000)) {
		struct sonde_spool *s = sonde_spool__open(spool, NULL);
		uint64_t got = s ? sonde_spool__offcpu_count(s) : 0;
		sonde_spool__close(s);
		if (got >= 2)
			break;
		if (test_now() > end)
			FAIL("%s held %llu off-CPU intervals after 60 s", spool,
			     (unsigned long long)got);
	}
	ASSERT_INT(write(in, "go\n", 3), ==, 3);
	close(in);
	/* the recording ends with the process: with its last thread, not its main one */
	recorder_ends_well(r);
	ASSERT_INT(test_wait(p, 30), ==, 0);
}

bool offcpu_stacked_through(const struct sonde_spool *s, struct sonde_symbolizer *sym,
			    const struct sonde_spool_offcpu *iv, const char *fn)
{
	uint32_t frames[256];
	int n = sonde_spool__get_stack(s, iv->stack, frames, 256);

	ASSERT(n >= 0 && n <= 256);
	for (int k = 0; k < n; k++) {
		struct sonde_sym_frame f[8];
		int m = sonde_spool__symbolize_frame(s, sym, frames[k], 0, f, 8);
		for (int j = 0; j < m; j++)
			if (f[j].name && !strcmp(f[j].name, fn))
				return true;
	}
	return false;
}

/* How long the wait of interval iv went on unknown after it: a wait whose switch-in the
 * kernel did not trace is written up to the CPU's last traced switch before the thread was
 * seen again, and the rest of it as unknown (docs/record.md), which a loaded machine's
 * untraced switches from the idle task make common. */
static uint64_t unknown_after(const struct sonde_spool *s, const struct sonde_spool_offcpu *iv)
{
	struct sonde_spool_offcpu u;

	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &u) == 0; i++)
		if (u.thread == iv->thread && u.switch_out_ns == iv->switch_in_ns)
			return u.switch_in_ns - u.switch_out_ns;
	return 0;
}

/* Whether unknown interval u is the rest of an interval of its thread (unknown_after). */
static bool continues_a_wait(const struct sonde_spool *s, const struct sonde_spool_offcpu *u)
{
	struct sonde_spool_offcpu iv;

	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &iv) == 0; i++)
		if (iv.thread == u->thread && iv.switch_in_ns == u->switch_out_ns)
			return true;
	return false;
}

int offcpu_check_leader_exit(const char *spool, const char *truth_path, int nap_ms)
{
	char *t = ASSERT_NOT_NULL(test_read_file(truth_path, NULL));
	uint32_t leader = (uint32_t)offcpu_truth_value(t, "leader");
	uint32_t napper = (uint32_t)offcpu_truth_value(t, "napper");
	int naps = (int)offcpu_truth_value(t, "naps");
	free(t);
	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	if (!s)
		FAIL("%s: %s", spool, sonde_strerror(errno));
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_spool_info in;
	struct sonde_spool_thread th;
	struct sonde_spool_offcpu iv;
	uint64_t main_exit = 0, napper_exit = 0, last_in = 0, x;
	int after = 0, stacked = 0, lost = 0;

	sonde_spool__get_info(s, &in);
	const uint64_t s0 = in.header.start_monotonic_ns;
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &th));
		if (th.pid != leader || sonde_spool__get_thread_exit(s, i, &x))
			continue;
		if (th.tid == leader)
			main_exit = x;
		else if (th.tid == napper)
			napper_exit = x;
	}
	char waits[4096] = "";
	size_t wl = 0;
	const uint64_t n_off = sonde_spool__offcpu_count(s);
	/* the napper's waits: its intervals, then the waits a loss or an untraced switch-in
	 * left unknown from their start (not the unknown rest of an interval) */
	for (uint64_t i = 0; i < n_off + sonde_spool__unknown_count(s); i++) {
		bool unknown = i >= n_off;
		if (unknown ? sonde_spool__get_unknown(s, i - n_off, &iv) < 0
			    : sonde_spool__get_offcpu(s, i, &iv) < 0)
			break;
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (th.tid != napper || th.pid != leader || (unknown && continues_a_wait(s, &iv)))
			continue;
		uint64_t rest = unknown ? 0 : unknown_after(s, &iv);
		bool through = iv.stack && offcpu_stacked_through(s, sym, &iv, "nap");
		const char *stack = !iv.stack ? "none" : through ? "nap" : "other";
		/* every wait of the napper, said when a nap is missing or not stacked */
		if (wl < sizeof(waits) - 100)
			wl += (size_t)snprintf(waits + wl, sizeof(waits) - wl,
					       " %.4f-%.4f s state %s flags %#x stack %s, then "
					       "%.4f s unknown;",
					       (iv.switch_out_ns - s0) / 1e9,
					       (iv.switch_in_ns - s0) / 1e9,
					       unknown ? "unknown" : iv.state == SONDE_OFFCPU_SLEEPING ? "S" : "other",
					       iv.flags, stack, rest / 1e9);
		if (iv.switch_out_ns < main_exit ||
		    (!unknown && iv.state != SONDE_OFFCPU_SLEEPING) ||
		    iv.switch_in_ns + rest - iv.switch_out_ns < (uint64_t)nap_ms * 1000000 * 9 / 10)
			continue;
		ASSERT_UINT(iv.flags & SONDE_OFFCPU_OPEN, ==, 0);
		/* (a wait on its way out, after its exit record, may end after its EXIT) */
		if (iv.switch_in_ns > last_in)
			last_in = iv.switch_in_ns;
		if (unknown && !iv.stack) {
			/* waits a full ring took (BPF: one span of the thread's lost waits, each
			 * at least a nap long), their time unknown and unstacked */
			uint64_t nap_ns = (uint64_t)nap_ms * 1000000;
			int k = (int)((iv.switch_in_ns - iv.switch_out_ns) / nap_ns);
			lost += k;
			after += k;
			continue;
		}
		after++;
		stacked += through;
	}
	struct sonde_spool_account acct = {0};
	sonde_spool__get_account(s, &acct);
	sonde_symbolizer__free(sym);
	sonde_spool__close(s);
	printf("napper %u of %u: %d naps of %d after the main thread's exit at %.3f s, %d of "
	       "them through nap, %d in spans lost records left unknown (%llu lost); its last "
	       "nap to %.3f s, its exit at %.3f s\n",
	       napper, leader, after, naps, main_exit ? (main_exit - s0) / 1e9 : 0.0, stacked,
	       lost, (unsigned long long)acct.lost_records,
	       last_in ? (last_in - s0) / 1e9 : 0.0, napper_exit ? (napper_exit - s0) / 1e9 : 0.0);
	if (after < naps)
		FAIL("%d naps of %d after the main thread's exit; the napper's waits:%s", after,
		     naps, waits);
	/* every nap stacked through nap, but those a loss the recording says took */
	if (stacked + lost != after)
		FAIL("%d naps of %d stacked through nap, %d lost; the napper's waits:%s", stacked,
		     after, lost, waits);
	if (lost)
		ASSERT_UINT(acct.lost_records, >, 0);
	ASSERT_UINT(napper_exit, !=, 0);
	ASSERT_UINT(napper_exit, >=, last_in);
	return (int)napper;
}

uint64_t offcpu_write_napper_spool(const char *path, uint32_t tid,
				   const struct sonde_spool_offcpu *lost, size_t n)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1000000};
	const uint64_t s0 = h.start_monotonic_ns, ms = 1000000;
	const struct sonde_spool_frame f = {0, 0x1234};
	uint32_t th;
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

	ASSERT_INT(fd, >=, 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, s0, 77, tid, "napper", &th));
	const struct sonde_spool_offcpu nap = {
		s0, s0 + 100 * ms, 0, th, 0, SONDE_OFFCPU_SLEEPING, 0, 0, 0};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &nap, &f, 1));
	for (size_t i = 0; i < n; i++) {
		struct sonde_spool_offcpu u = lost[i];
		u.switch_out_ns += s0;
		u.switch_in_ns += s0;
		u.thread = th;
		ASSERT_OK(sonde_spool_writer__add_unknown(w, &u, &f, 1));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);
	return s0;
}
