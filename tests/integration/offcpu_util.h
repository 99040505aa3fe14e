/* What the off-CPU tests of both backends share (test_offcpu.c, test_offcpu_bpf.c and the
 * exports of off-CPU recordings): the BPF backend's availability, and tests/progs/
 * offcpu_split's truth file and wall split. */
#ifndef SONDE_TEST_OFFCPU_UTIL_H
#define SONDE_TEST_OFFCPU_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/spool.h>

/* Skips the test where the BPF off-CPU backend cannot run: not built, not root, no BTF,
 * or refused by the kernel. */
void offcpu_require_bpf(void);

/* offcpu_split's phases and the frame each one's stacks go through. */
enum { OFFCPU_BURN, OFFCPU_NAP, OFFCPU_PIPE, OFFCPU_PHASES };
extern const char *const offcpu_phase_frame[OFFCPU_PHASES];

/* The main thread's wall time over the phases, added up over recordings. */
struct offcpu_wall {
	double truth[OFFCPU_PHASES]; /* ns, as the program measured them */
	double got[OFFCPU_PHASES];   /* us, from the folded profile */
	double rounds;
};

/* The value of `key` in offcpu_split's truth file (text); fails without it. */
double offcpu_truth_value(const char *text, const char *key);
/* The folded `--metric metric` profile of spool's main thread (the truth file's pid),
 * added to w with the truth; returns that pid. Checks that the blocked phases' sleeping
 * stacks reach main and end in the function that blocked: fails without them when
 * check_stacks, or tells in *stacks_seen when that is given. */
int offcpu_wall_add_seen(struct offcpu_wall *w, const char *spool, const char *truth_path,
			 const char *metric, bool check_stacks, bool *stacks_seen);
int offcpu_wall_add(struct offcpu_wall *w, const char *spool, const char *truth_path,
		    const char *metric, bool check_stacks);
/* Phase k's share of v, in percent. */
double offcpu_share(const double *v, int k);
/* Whether every phase's share in w is within tol points of the truth's. */
bool offcpu_wall_within(const struct offcpu_wall *w, double tol);

/* Writes a spool to path whose thread "napper" (pid 77, tid `tid`) slept 100 ms from the
 * recording's start (its one off-CPU interval, at frame 0x1234), then had the n intervals
 * `lost` cut by losses (UNKNOWN records: their times from the start, their thread set
 * here). Returns the start, in monotonic ns. */
uint64_t offcpu_write_napper_spool(const char *path, uint32_t tid,
				   const struct sonde_spool_offcpu *lost, size_t n);

#endif
