/* Where the wall-clock time went (docs/record.md, "Accounting"): the tables of `sonde report
 * --summary`, built from a spool. Internal to libsonde; the programs only print them.
 *
 * Per process and state: on-CPU, runnable, sleeping (S), blocked (D), other states,
 * unknown (time a loss covered) and short intervals (counted, not stacked). Per CPU, by
 * the switches the recording kept (-a --off-cpu of every process): busy, idle, unknown.
 * Each row's columns add up to its total, the rows to the "all" row, and each CPU's three
 * figures to the window.
 */
#ifndef SONDE_EXPORT_ACCT_H
#define SONDE_EXPORT_ACCT_H

#include <stdbool.h>
#include <stdint.h>

#include <sonde/profile.h>
#include <sonde/spool_reader.h>

enum sonde_acct_col {
	SONDE_ACCT_ON,
	SONDE_ACCT_R, /* the same order as enum sonde_offcpu_state */
	SONDE_ACCT_S,
	SONDE_ACCT_D,
	SONDE_ACCT_OTHER,
	SONDE_ACCT_UNKNOWN,
	SONDE_ACCT_SHORT,
	SONDE_ACCT_COLS
};

/* The CPU number samples without one are counted under, in cpu_ns. */
enum { SONDE_ACCT_MAX_CPU = 1 << 16 };

struct sonde_acct_row {
	uint32_t pid;
	char comm[32]; /* the process's name: its main thread's, else another's; a bare id last */
	uint64_t ns[SONDE_ACCT_COLS], total;
};

/* One recorded task (a kernel thread: pid and tid, over however many spool thread ids a
 * rename gave it, up to its exit: the ids defined again after that are another task's)
 * and its life: from its creation (its first definition, when the recorder saw its fork)
 * or first sight (the first record of it: a switch that took it off or brought it in, a
 * sample, an interval, its definition) to its exit
 * (EXIT record; on to its last switch-out, which follows, or to the end of a wait written
 * after it when the switches that followed went unseen) or the end of the window. Its
 * parts add up to its life exactly: ns[] (on-CPU by the switches when the recording kept
 * them, else samples x period; the off-CPU states; unknown; short) + unseen_ns - over_ns. */
struct sonde_acct_task {
	uint32_t pid, tid;
	const char *comm; /* its last name (after an exec, that one) but a bare id, the spool's */
	uint64_t start_ns, end_ns;
	bool exited;
	bool exact_on; /* on-CPU time from the switches */
	uint64_t ns[SONDE_ACCT_COLS];
	uint64_t sampled_ns; /* its samples x period that pass every filter */
	uint64_t unseen_ns; /* life no record covers (records lost, intervals dropped) */
	uint64_t over_ns;   /* parts beyond the life: counted twice (0 when consistent) */
};

/* One CPU's time by its switches over the window. */
struct sonde_acct_cpu {
	uint32_t cpu;
	uint64_t busy_ns, idle_ns, unknown_ns;
};

struct sonde_acct {
	struct sonde_acct_row *rows; /* by total, largest first; ties by pid */
	size_t n_rows;
	uint64_t all[SONDE_ACCT_COLS], all_total;
	uint64_t period_ns; /* the recording's sample period: what a sample weighs */
	/* on-CPU sample time by CPU ([SONDE_ACCT_MAX_CPU]: samples without a CPU), below
	 * cpu_max, the highest CPU sampled + 1 */
	uint64_t *cpu_ns;
	uint32_t cpu_max;
	/* by the CPUs' switches (n_cpus 0: the recording kept none), over the window
	 * (sonde__acct_window) */
	struct sonde_acct_cpu *cpus;
	uint32_t n_cpus;
	uint64_t window_start_ns, window_end_ns;
	/* every task of the recording that passes the pid, tid and comm filters, by pid,
	 * tid, then start; with no time or CPU filter the rows are their sums, unseen time in the
	 * unknown column, so that a row's total is its tasks' lives (in a recording with
	 * off-CPU data; without, a task measured by its samples is its samples) */
	struct sonde_acct_task *tasks;
	size_t n_tasks;
	/* by spool thread id: 1 + the index in tasks of the task it is a part of (0: none,
	 * filtered out); a pid and tid the kernel gave to another task after the first one's
	 * exit are two tasks */
	uint32_t *thread_task;
	bool exact_on; /* on-CPU time by the switches (the recording kept them) */
	/* the recording has off-CPU data (sonde__acct_offcpu_recorded); without it a row is
	 * its samples alone, its waits in no column */
	bool offcpu;
};

/* Builds the tables of spool s, counting what passes f's filters (NULL: everything; the
 * roots field is ignored). 0 or -ENOMEM. Free with sonde__acct_free. */
int sonde__acct_build(const struct sonde_spool *s, const struct sonde_profile_spool_opts *f,
		      struct sonde_acct *out);
void sonde__acct_free(struct sonde_acct *a);

/* The window both tables are given over: in a recording with the CPUs' switches, from
 * its first switch or sample to its last (the machine as the recording saw it); without
 * them, from the recording's start (or its first sample, if earlier) to its last sample or
 * interval end. Lives and intervals are clipped to it. */
void sonde__acct_window(const struct sonde_spool *s, uint64_t *start, uint64_t *end);

/* What each on-CPU sample weighs under the wall metric. Where the recording kept the CPUs'
 * switches, a task's on-CPU time is known exactly (sonde_acct_task.ns[SONDE_ACCT_ON] over
 * its whole life): it is spread over the task's samples, so that they add up to it to the
 * nanosecond (the first on % n get one more), and a task that ran without being sampled
 * has its time apart, in unsampled[], to be shown under a frame of its own. Tasks not
 * measured by the switches (none in a recording without them) weigh the sample period. */
struct sonde_acct_unsampled {
	uint32_t thread; /* a spool thread id of the task (its first) */
	uint32_t pid, tid;
	uint64_t time_ns; /* the start of its life */
	uint64_t on_ns;
};

struct sonde_acct_weights {
	uint64_t *sample_ns; /* by sample index */
	uint64_t n_samples;
	struct sonde_acct_unsampled *unsampled;
	size_t n_unsampled;
	bool exact; /* some weights are by the switches */
};

/* Whether spool s was recorded with off-CPU data (--off-cpu: its header's version 2.1), even
 * if none of its threads waited. */
bool sonde__acct_offcpu_recorded(const struct sonde_spool *s);
/* The time kernel task tid spent on the CPUs within [from, to), by the spool's switches
 * (0 without them): the part of an interval a loss cut (an unknown one) that is on-CPU
 * time, the BPF backend's span of a thread's lost waits holding its stays between them. */
uint64_t sonde__acct_stays_within(const struct sonde_spool *s, uint32_t tid, uint64_t from,
				  uint64_t to);
/* Whether spool s says its tasks' on-CPU time exactly, for sonde__acct_weights: it kept the
 * CPUs' switches, or every switch-out of its threads with none dropped. */
/* How a task's stays count (sonde__acct_build; the live view's window the same way): a
 * stay ended by an inferred switch (the kernel did not trace the task's switch-out, and the
 * recorder ended the stay at the CPU's next traced switch, while the task may have gone on
 * elsewhere) ends by the task's next wait at the latest, and a task is on one CPU at a
 * time, so its stays count once where they overlap. Counted as read, such a stay is time
 * counted twice (a task on a saturated machine once showed 17.5 ms more parts than life,
 * beside untraced switch-ins). */
struct sonde_acct_wait {
	uint32_t task; /* the caller's key for the task (an index, a tid) */
	uint64_t out_ns;
};
/* Sorts waits by task, then switch-out: what sonde__acct_stay_once searches. */
void sonde__acct_waits_sort(struct sonde_acct_wait *w, size_t n);
/* Stay [*from, *to) of task, inferred if an inferred switch ended it, already clipped to
 * what the caller counts, the task's stays given in the order of their starts with
 * *covered 0 before the first: narrows it to what counts and returns whether any is left,
 * moving *covered (the end of what was counted) past it. */
bool sonde__acct_stay_once(const struct sonde_acct_wait *w, size_t n, uint32_t task, bool inferred,
			   uint64_t *from, uint64_t *to, uint64_t *covered);
bool sonde__acct_weights_known(const struct sonde_spool *s);
/* Fills *out for every sample of spool s. 0 or -ENOMEM. Free with sonde__acct_weights_free. */
int sonde__acct_weights(const struct sonde_spool *s, struct sonde_acct_weights *out);
void sonde__acct_weights_free(struct sonde_acct_weights *w);

#endif
