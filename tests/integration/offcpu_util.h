/* What the off-CPU tests of both backends share (test_offcpu.c, test_offcpu_bpf.c and the
 * exports of off-CPU recordings): the BPF backend's availability, and tests/progs/
 * offcpu_split's truth file and wall split. */
#ifndef SONDE_TEST_OFFCPU_UTIL_H
#define SONDE_TEST_OFFCPU_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/spool.h>

struct sonde_spool;
struct sonde_symbolizer;

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

/* offcpu_leader_exit's naps: LEADER_EXIT_NAPS of LEADER_EXIT_NAP_MS after its main
 * thread's exit. */
enum { LEADER_EXIT_NAPS = 8, LEADER_EXIT_NAP_MS = 30 };

/* Whether the stack of interval iv of spool s has a frame (inlined ones included) of
 * function fn. */
bool offcpu_stacked_through(const struct sonde_spool *s, struct sonde_symbolizer *sym,
			    const struct sonde_spool_offcpu *iv, const char *fn);

/* Records tests/progs/offcpu_leader_exit (its truth file truth_path) with `--off-cpu
 * --off-cpu-backend backend` into spool: launched (how ""), with -a (how "-a", the
 * command launched), or attached (how "-p": the recorder attached to it while its main
 * thread is held, which the test lets go once the spool holds the napper's first waits;
 * the recording ends by itself, with the process), or attached once its main thread has
 * ended (how "-p-late"). Fails unless the recorder exits 0. */
void offcpu_record_leader_exit(const char *backend, const char *how, const char *spool,
			       const char *truth_path);

/* Checks a recording of tests/progs/offcpu_leader_exit (truth file truth_path, NAP_MS
 * nap_ms), whose main thread ends before its napper: the process lives until its last
 * thread ends. Each of the napper's naps after the main thread's exit (its EXIT in the
 * spool, or from the start when it was never defined) is there, a closed sleep of nap_ms
 * at least, stacked through nap (the process's modules are kept after its main thread's
 * exit), but for those in an unstacked unknown span (the BPF backend's waits a full ring
 * took: each nap_ms of it counts as a nap) when the spool accounts lost records; and the
 * napper's EXIT comes after its last one. Returns the napper's tid. */
int offcpu_check_leader_exit(const char *spool, const char *truth_path, int nap_ms);

/* Writes a spool to path whose thread "napper" (pid 77, tid `tid`) slept 100 ms from the
 * recording's start (its one off-CPU interval, at frame 0x1234), then had the n intervals
 * `lost` cut by losses (UNKNOWN records: their times from the start, their thread set
 * here). Returns the start, in monotonic ns. */
uint64_t offcpu_write_napper_spool(const char *path, uint32_t tid,
				   const struct sonde_spool_offcpu *lost, size_t n);

#endif
