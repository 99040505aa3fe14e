/* A small decoder of the profile packets of a Perfetto trace, for tests: rebuilds each
 * PerfSample's call stack (function names, root first) from the sequence's interned data,
 * the way Trace Processor does, and keeps the other perf_sample records and logs. */
#ifndef SONDE_TEST_PFTRACE_UTIL_H
#define SONDE_TEST_PFTRACE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "split_util.h"

struct pft_sample {
	uint32_t seq, pid, tid;
	uint32_t cpu; /* PerfSample.cpu, UINT32_MAX when absent */
	uint64_t ts;
	char *stack;	    /* "outer;...;leaf" (names; "?" for a frame without one), or NULL */
	char *leaf_mapping; /* the leaf frame's mapping path, or NULL */
	uint64_t leaf_rel_pc;
	int unwind_error;
};

/* A sched_switch or sched_waking event of an FtraceEventBundle, in file order. */
struct pft_sched {
	uint32_t cpu; /* the bundle's */
	uint64_t ts;
	uint32_t pid; /* FtraceEvent.pid: the task that emitted it */
	bool waking;  /* sched_waking, else sched_switch */
	uint32_t prev_pid, next_pid;
	int64_t prev_state;
	char prev_comm[32], next_comm[32];
	uint32_t woken_pid, target_cpu, success, prio; /* sched_waking */
};

/* A TrackDescriptor (with its ThreadDescriptor's pid and tid, 0 without one), and a
 * TrackEvent of a slice, in file order. */
struct pft_track {
	uint64_t uuid;
	uint32_t pid, tid;
	char name[64];
};

struct pft_event {
	uint64_t ts, track_uuid;
	int type; /* TrackEvent.Type: 1 slice begin, 2 slice end, 3 instant */
	char name[64];
};

struct pft_trace {
	struct pft_sample *samples;
	size_t n_samples, samples_cap;
	struct pft_sched *sched;
	size_t n_sched, sched_cap;
	int bundles;	      /* FtraceEventBundle packets */
	uint64_t lost;	      /* sum of kernel_records_lost */
	int guardrail_stops;  /* producer_event{source_stop_reason=GUARDRAIL} */
	int defaults_packets; /* packets with trace_packet_defaults.perf_sample_defaults */
	uint64_t timebase_freq, timebase_period, timebase_counter;
	char timebase_tracepoint[128]; /* Timebase.tracepoint.name, "" when absent */
	int clock_id_default;	       /* trace_packet_defaults.timestamp_clock_id */
	char *process_names;	       /* "pid=cmdline0\n" per ProcessTree process */
	char *thread_names;	       /* "tid=name\n" per ProcessTree thread */
	char *errors;		       /* android_log messages of priority ERROR, one a line */
	uint32_t seq_ids[8];	       /* distinct trusted_packet_sequence_id of profile packets */
	int n_seq_ids;
	int missing_interned; /* references to iids the sequence never defined */
	struct pft_track *tracks;
	size_t n_tracks, tracks_cap;
	struct pft_event *events;
	size_t n_events, events_cap;
};

/* Decodes a whole trace (fails the test on malformed bytes). */
void pft_decode(const uint8_t *buf, size_t len, struct pft_trace *t);
void pft_free(struct pft_trace *t);
/* How many of t's samples are of process pid. */
size_t pft_samples_of(const struct pft_trace *t, uint32_t pid);
/* Adds the samples of pid (0: all) to c: those in compute_KIND (the leaf, or the function
 * the leaf was inlined into) whose stack goes through "main;run;path_KIND;compute_KIND",
 * for KIND hot, warm, cool; fails the test when a sample reaches a compute_* function
 * through another path. */
void pft_split(const struct pft_trace *t, uint32_t pid, struct split_counts *c);

#endif
