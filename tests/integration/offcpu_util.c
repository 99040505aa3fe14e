#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
