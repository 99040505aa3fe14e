/* Judging the profile of the reference program split (tests/progs/split.c), which spends
 * about 60/30/10 % of its CPU in compute_hot/warm/cool by work done.
 *
 * One recording on a loaded machine may stray from that split by more than its sample
 * count suggests, perf's as much as sonde's: split's rounds of one fixed length were
 * sampled at the same few points of the round whenever its speed brought that length
 * near a multiple of the sampling period (52-65 % hot, 4-21 % cool from 3 s recordings
 * at 999 Hz; split.c now varies the length of its rounds), and the few hundred samples
 * a recording gets on a busy machine still leave 2-3 points of noise. So a test judges
 * the shares on exact sample counts accumulated over recordings: it records again,
 * adding to the counts, while they are outside the tolerance, up to a few recordings or
 * a deadline, and then asserts on the accumulated counts. Noise averages out; a real
 * misattribution stays outside and fails. What must hold of every recording (an export
 * equal to its spool, complete stacks) is checked on every recording. */
#ifndef SONDE_TEST_SPLIT_UTIL_H
#define SONDE_TEST_SPLIT_UTIL_H

#include <stdbool.h>
#include <stdint.h>

struct split_counts {
	uint64_t n[3]; /* samples in compute_hot, compute_warm, compute_cool */
	uint64_t all;  /* every sample */
};

extern const char *const split_kinds[3]; /* "hot", "warm", "cool" */
extern const double split_want[3];	 /* 60, 30, 10 */

/* Adds the samples of folded stacks ("outer;...;leaf COUNT" lines) to c: a sample is in
 * compute_X when compute_X is its leaf or the function its leaf was inlined into. Fails
 * when such a sample does not reach compute_X through "main;run;path_X". */
void split_add_folded(struct split_counts *c, const char *folded);
/* Adds the samples of `sonde report --folded FLAGS spool` (flags may be ""). */
void split_add_spool(struct split_counts *c, const char *spool, const char *flags);
void split_add(struct split_counts *to, const struct split_counts *c);
/* Share (0..100) of compute_KINDS[k] among all samples, or among the compute_* samples. */
double split_pct(const struct split_counts *c, int k, bool of_compute);
/* "N samples: hot H%, warm W%, cool C%" (a static buffer). */
const char *split_str(const struct split_counts *c, bool of_compute);

/* split-nofp unwinds by CFI alone but where its binary has none: the C runtime's start-up
 * and exit code linked into it (crti's _init and _fini, crtstuff's frame_dummy,
 * __do_global_dtors_aux and the tm_clones helpers) has no FDE, and a sample taken under it
 * (libc's exit handlers called from __do_global_dtors_aux, in the kernel) is walked past it
 * by frame pointers. Asserts, from `sonde record`'s summary (record_err) and the folded
 * stacks of its recording, that every frame-pointer step is one of those: no more of them
 * than frames of those functions in the stacks, each one a CFI fallback for a missing
 * row. */
void split_assert_cfi_only(const char *record_err, const char *folded);

struct split_judge {
	double tolerance;     /* points each share may be off 60/30/10 */
	bool of_compute;      /* shares among the compute_* samples, not among all samples */
	uint64_t min_samples; /* record again while fewer have accumulated (0: no minimum) */
	int seconds;	      /* of the first recording (0: 3) */
	int max_recordings;   /* 0: 4 */
	int deadline_s;	      /* no recording started after this many seconds (0: 90) */
};

/* Calls record(ctx, seconds, add) until the counts it adds (into add[0 .. n_counts), e.g.
 * a trace and the report of another recording, each judged) are all within the
 * tolerance, with min_samples in each, or the recordings or the deadline run out; then
 * asserts that every accumulated share is within the tolerance, and returns the sums in
 * acc. record records split for about that many seconds, asserts what must hold of every
 * recording, and adds its counts. The seconds grow (up to 30) when a loaded machine gave
 * split too little CPU for min_samples in one recording: the longer a recording, the
 * more of the drift it averages. */
void split_settle(const struct split_judge *j,
		  void (*record)(void *ctx, int seconds, struct split_counts *add), void *ctx,
		  struct split_counts *acc, int n_counts);

#endif
