/* Opening perf events for sampling. Internal.
 *
 * All events of a recording share one attribute layout (sonde__perf_event_layout), so one decoder
 * reads every ring. Sampling is user space only: no kernel privilege beyond the target's
 * is needed, and kernel frames are not recorded.
 */
#ifndef SONDE_PERF_EVENT_H
#define SONDE_PERF_EVENT_H

#include <linux/perf_event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "perf/decode.h"

enum perf_kind {
	PERF_KIND_CYCLES,     /* hardware cycles: needs a PMU */
	PERF_KIND_CPU_CLOCK,  /* software hrtimer: works everywhere, including VMs without PMU */
	PERF_KIND_TRACEPOINT, /* a tracepoint (perf_event_cfg.tracepoint), counted in hits */
};

struct perf_event_cfg {
	enum perf_kind kind;
	uint64_t freq;	       /* samples per second */
	uint64_t period;       /* a fixed period instead, when not 0 (tracepoints: 0 is 1) */
	uint64_t tracepoint;   /* PERF_KIND_TRACEPOINT: its id (sonde__perf_tracepoint_id) */
	uint32_t stack_bytes;  /* user stack copied per sample, a multiple of 8 */
	bool disabled;	       /* created disabled */
	bool enable_on_exec;   /* enabled by the kernel when the task execs */
	uint32_t wakeup_bytes; /* poll() reports the ring readable once this much is queued */
	bool read_lost;	  /* read() reports the event's lost samples (PERF_FORMAT_LOST, 6.0+) */
	bool kernel;	  /* sample in the kernel too, with the kernel callchain */
	/* Sample in the kernel too, without its callchain: time spent in system calls and
	 * interrupts counts, under the user stack the thread entered the kernel with. */
	bool kernel_time;
	bool no_children; /* only threads inherit the events, not forked processes (5.13+) */
	bool cpu_wide;	  /* one event per CPU for every task: nothing to inherit */
	bool raw;	  /* PERF_SAMPLE_RAW in every event (off-CPU recordings' common layout) */
	/* An event beside the recording's own (off-CPU's sched_switch and sched_waking): this
	 * tracepoint's id (PERF_TYPE_TRACEPOINT config), sampled at every hit, in the kernel,
	 * without the side band (the recording's own event has it). */
	uint64_t side_tracepoint;
	bool context_switch;	  /* PERF_RECORD_SWITCH records of the task (attr.context_switch) */
	bool no_kernel_callchain; /* a tracepoint whose kernel stack is not wanted */
	bool no_inherit;	  /* the task's own events only: nothing it creates inherits them */
	/* The recording's own event carries the side band only (off-CPU-only recordings,
	 * perf's way): PERF_COUNT_SW_DUMMY, which never samples, whatever kind says. */
	bool dummy;
};

/* Default, and largest allowed, user stack copy per sample. The kernel caps a record at
 * 64 KiB, so 65528 is the largest multiple of 8 it accepts. */
enum { PERF_STACK_DEFAULT = 32768, PERF_STACK_MAX = 65528 };

const char *sonde__perf_kind_name(enum perf_kind k);
void sonde__perf_attr_fill(struct perf_event_attr *a, const struct perf_event_cfg *c);
/* The decode layout matching sonde__perf_attr_fill of a user-only configuration. */
void sonde__perf_event_layout(struct perf_layout *l);
/* The decode layout matching sonde__perf_attr_fill(c). */
void sonde__perf_event_layout_cfg(struct perf_layout *l, const struct perf_event_cfg *c);

/* perf_event_open(attr, pid, cpu, -1, CLOEXEC). On EMFILE, raises the soft RLIMIT_NOFILE
 * towards the hard limit and retries. Returns the fd or -errno. */
int sonde__perf_open(struct perf_event_attr *a, pid_t pid, int cpu);
/* Routes fd's records into target's ring (same CPU). 0 or -errno. */
int sonde__perf_set_output(int fd, int target);
/* A tracepoint event's filter (PERF_EVENT_IOC_SET_FILTER, ftrace's filter syntax). 0 or
 * -errno (-EINVAL: the kernel refused the expression). */
int sonde__perf_set_filter(int fd, const char *filter);
int sonde__perf_enable(int fd);
int sonde__perf_disable(int fd);
/* The samples this event could not write (read_lost events only). 0 or -errno. */
int sonde__perf_read_lost(int fd, uint64_t *lost);
/* Errors of perf_event_open meaning "this event does not exist here" (so another event may
 * be tried), as opposed to permission or resource errors. */
bool sonde__perf_err_is_unsupported(int err);

/* The kernel's maximum sampling rate (kernel.perf_event_max_sample_rate). 0 or -errno. */
int sonde__perf_max_sample_rate(uint64_t *out);
/* Online CPUs from /sys/devices/system/cpu/online; *cpus is malloc'd. 0 or -errno. */
int sonde__perf_online_cpus(int **cpus, size_t *n);
/* Parses a CPU list such as "0-3,8,10-11" (buf, len); at most max entries. Count or -errno. */
int sonde__perf_parse_cpu_list(const char *buf, size_t len, int *cpus, size_t max);

/* The id of tracepoint GROUP:NAME (PERF_TYPE_TRACEPOINT's config), read from
 * TRACEFS/events/GROUP/NAME/id. tracefs NULL finds the mount: /sys/kernel/tracing, then
 * /sys/kernel/debug/tracing. Returns the id, or -EINVAL for a name that is empty or holds
 * '/' or "..", -ENODEV when no tracefs is mounted (or tracefs has no events/), -EACCES
 * when it is but this user may not search it (root's 0700 by default), -ENOENT
 * for no such event, -SONDE_E_FORMAT for an id file that is not a number, or open's
 * -errno (-EACCES: tracefs is not readable by this user). */
int sonde__perf_tracepoint_id(const char *tracefs, const char *group, const char *name);

#endif
