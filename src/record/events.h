/* The recorder's events part: per-thread and per-CPU perf events, one ring per CPU, the ids
 * the records carry, generations of events and the switches between them (attach.c,
 * resize.c). Internal. */
#ifndef SONDE_RECORD_EVENTS_H
#define SONDE_RECORD_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "perf/ring.h"

struct rec_ring {
	struct perf_ring ring;
	int src, next_src; /* the stream's sources of ring and next */
	bool mapped;
	bool hup;	/* removed from epoll after POLLHUP (still drained) */
	bool lost_seen; /* a LOST record came out of it since the last look */
	/* Its replacement while a generation switch grows it (resize.c): the new events
	 * write there, the old ones here until they are disabled. */
	struct perf_ring next;
	bool next_mapped;
	unsigned grow_pages; /* the size it grows to in the switch under way, 0: none */
};

struct rec_event {
	int fd;
	int ring; /* index into rings (= CPU index) */
	pid_t tid;
	bool armed_on_exec;   /* enable_on_exec still pending: enabling by hand would sample the
			       * launcher before its exec */
	bool retired;	      /* its thread is gone, but it owns its ring: kept open, disabled */
	uint32_t gen;	      /* the generation it belongs to (resize.c) */
	uint32_t stack_bytes; /* its sample_stack_user */
};

/* Every event the recording opened, by the id its records carry (PERF_SAMPLE_ID: an
 * inherited event's records carry its parent's), kept after the event is closed while its
 * records may still be queued. Sorted by id. */
struct rec_event_id {
	uint64_t id;
	pid_t tid;	      /* the thread it was opened on (-1: a CPU) */
	uint32_t gen;	      /* its generation */
	uint32_t stack_bytes; /* its stack copy */
	bool dead;	      /* of a switch that was abandoned: its records are dropped */
};

struct rec_events {
	int *cpus;
	size_t n_cpus;
	struct rec_ring *rings; /* one per CPU */
	struct rec_event *events;
	size_t n_events, cap_events;
	int epfd;
	uint32_t ring_pages;
	/* Paced drains, for events whose rate a clock bounds (a frequency, the cpu-clock's
	 * period; not tracepoints, not the perf off-CPU backend's switch-outs): the bytes a
	 * second a ring was sized for, 0 when unpaced. The kernel wakes a ring's reader at
	 * every watermark's worth written, whatever was read meanwhile, so one wakeup a
	 * ring made the wakeups grow with the CPUs. Paced, the rings wake nobody (watched
	 * for hang-ups only): a timer (pace_fd, every pace_ns) drains them all at a quarter
	 * of the time the smallest one holds at that rate, which leaves it the three
	 * quarters the watermark did. */
	uint64_t fill_bps, pace_ns;
	int pace_fd;
	bool event_error_said; /* sonde__rec_choose_event logged why it failed */
	uint64_t closed_lost;  /* lost counts of event fds already closed */

	/* Per-thread stack copies and ring growth by generation switch (resize.c). */
	bool adaptive;	     /* size each thread's copy (no --stack-size given) */
	uint32_t gen;	     /* the current generation of events */
	uint64_t gen_cut;    /* monotonic ns from which the current generation alone samples */
	uint64_t last_regen; /* sonde__rec_now() of the last switch (or its attempt) */
	bool switching;	     /* a switch is opening the next generation's events */
	bool regen_grow;     /* a thread's stack was cut: switch at the next poll */
	bool any_dead;	     /* a switch was abandoned: some ids are dead */
	struct rec_event_id *ids;
	size_t n_ids, cap_ids;
};

#endif
