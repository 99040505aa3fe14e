/* linux.ftrace: one tracing session's kernel events, from a private tracefs instance to
 * FtraceEventBundle packets. Internal to libsonde; the probes program drives it.
 *
 * Call order:
 *   s = sonde__ftrace_session_new(&cfg, &opts, emit, ctx)   configures instances/NAME, enables
 *                                                   the events, starts tracing and emits
 *                                                   FtraceStats{START_OF_TRACE}
 *   loop: poll sonde__ftrace_session_fds() for POLLIN (the kernel wakes readers once a CPU's
 *         buffer is buffer_percent full) and, every sonde__ftrace_session_drain_period_ms(),
 *         call sonde__ftrace_session_drain(s) (or sonde__ftrace_session_drain_cpu for the fd that woke)
 *   sonde__ftrace_session_stop(s)                           stops, drains what is left, emits
 *                                                   FtraceStats{END_OF_TRACE}, removes
 *                                                   the instance
 *   sonde__ftrace_session_free(s)                           (stops first if needed)
 * Every packet goes out through emit as the bytes of one TracePacket (no trusted fields:
 * the caller's trace writer adds those). The module owns no thread and no event loop.
 *
 * Timestamps: the instance's trace_clock is set to "boot", so every event time is
 * CLOCK_BOOTTIME, Perfetto's default trace clock, and lines up with the other data
 * sources with no conversion. With use_monotonic_raw_clock it is "mono_raw"; on a kernel
 * without the clock asked for, the instance keeps its own ("local" by default). In both
 * cases each bundle names the clock in ftrace_clock and carries a (ftrace_timestamp,
 * boot_timestamp) pair read when its pages were, from which trace processor converts.
 */
#ifndef SONDE_PROBES_FTRACE_H
#define SONDE_PROBES_FTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "probes/ftrace_config.h"

/* Receives one TracePacket's bytes; valid during the call only. A negative return is
 * passed back to the drain call's caller. */
typedef int (*ftrace_emit_fn)(void *ctx, const void *packet, size_t len);
/* Told of a thread an event named (sched_switch's next_pid, sched_waking's pid, a fork's
 * child...), for linux.process_stats' record_thread_names. Called on every such event:
 * the receiver keeps the seen-set. */
typedef void (*ftrace_pid_fn)(void *ctx, int pid);

struct ftrace_opts {
	size_t sz;		  /* sizeof(struct ftrace_opts) */
	const char *tracefs_root; /* NULL: found (and mounted if allow_mount) */
	const char *instance;	  /* NULL: "sonde" */
	const char *lock_dir;	  /* NULL: "/run/sonde" */
	bool allow_mount;
	ftrace_pid_fn on_pid;
	void *pid_ctx;
	char *errbuf; /* if set, a failing sonde__ftrace_session_new explains itself here */
	size_t errlen;
};

struct ftrace_session;

/* Starts a session. Returns NULL with errno set on failure: EBUSY when another session
 * (of this process or another) is recording ftrace, ENOENT when tracefs is not available,
 * EACCES/EPERM without the privilege, EINVAL for a config with no event known to this
 * kernel. cfg is copied from. */
struct ftrace_session *sonde__ftrace_session_new(const struct ftrace_config *cfg,
					  const struct ftrace_opts *opts, ftrace_emit_fn emit,
					  void *ctx);

/* The per-CPU trace_pipe_raw fds (non-blocking, owned by the session) and their CPU
 * numbers: up to max of each. Returns how many there are. */
size_t sonde__ftrace_session_fds(const struct ftrace_session *s, int *fds, int *cpus, size_t max);
/* The period at which sonde__ftrace_session_drain should run: the config's drain_period_ms or
 * the default (100 ms). */
unsigned sonde__ftrace_session_drain_period_ms(const struct ftrace_session *s);

/* Reads whatever each CPU has and emits it. Returns 0 when every CPU was emptied, 1 when
 * a CPU still had pages after the per-call bound (call again), or a negative error. */
int sonde__ftrace_session_drain(struct ftrace_session *s);
/* The same for one CPU (by index into sonde__ftrace_session_fds). */
int sonde__ftrace_session_drain_cpu(struct ftrace_session *s, size_t idx);

/* Stops tracing, drains, emits the end stats and removes the instance. Idempotent.
 * -EBUSY: a forked child still holds the instance's files; the next session removes it.
 * The session's fds are O_CLOEXEC; fork without exec while a session lives shares them. */
int sonde__ftrace_session_stop(struct ftrace_session *s);
/* Stops if needed and frees. NULL is a no-op. */
void sonde__ftrace_session_free(struct ftrace_session *s);

struct ftrace_session_counters {
	uint64_t events;      /* events read from the rings */
	uint64_t pages;	      /* pages read */
	uint64_t lost_pages;  /* pages whose header said events were lost before them */
	uint64_t lost_events; /* the counts those pages stored */
	uint64_t bad_pages;   /* pages that did not parse to their end */
	uint64_t skipped;     /* records of unknown id, or too short for their format */
	uint64_t packets;     /* packets emitted */
};
void sonde__ftrace_session_counters(const struct ftrace_session *s, struct ftrace_session_counters *c);

#endif
