/* sonde's linux.perf data source (perfetto-wire.md §7), one source of `sonde probes`
 * (probes.h; docs/service.md has its fields and rules).
 *
 *   perfds.c      the source (sonde__perfds_source): instances, recorders, the encoder
 *   perfds_cfg.c  PerfEventConfig parsing and target selection (untrusted bytes)
 */
#ifndef SONDE_PROBES_PERFDS_H
#define SONDE_PROBES_PERFDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- configuration (perfds_cfg.c) ---- */

/* PerfEvents.Counter and PerfEventConfig.UnwindMode values. */
enum {
	PERFDS_COUNTER_SW_CPU_CLOCK = 1,
	PERFDS_COUNTER_HW_CPU_CYCLES = 10,
	PERFDS_UNWIND_UNKNOWN = 0,
	PERFDS_UNWIND_SKIP = 1,
	PERFDS_UNWIND_DWARF = 2,
	PERFDS_UNWIND_FRAME_POINTER = 3,
	PERFDS_UNWIND_KERNEL_FRAME_POINTER = 4,
};

struct perfds_cfg {
	uint64_t session_id; /* DataSourceConfig.tracing_session_id: set by the service */
	uint64_t frequency;  /* samples per second; 0 when period is set */
	uint64_t period;     /* counter events per sample */
	uint32_t counter;    /* PERFDS_COUNTER_* (default SW_CPU_CLOCK) */
	bool kernel_frames;
	uint32_t user_frames; /* PERFDS_UNWIND_* */
	uint32_t ring_pages;  /* 0: the recorder's default */
	uint32_t read_period_ms;
	uint64_t max_daemon_memory_kb; /* 0: no guardrail */
	int32_t *pids, *exclude_pids;
	size_t n_pids, n_exclude_pids;
	char **cmdlines, **exclude_cmdlines; /* patterns (see sonde__perfds_cmdline_match) */
	size_t n_cmdlines, n_exclude_cmdlines;
	/* No target_pid or target_cmdline: every process (the exclusions still apply) */
	bool system_wide;
	/* timebase.tracepoint: "GROUP:NAME" (a '/' given is turned into ':'), and its
	 * filter; NULL for a counter. With a tracepoint, period is at least 1 (every hit). */
	char *tracepoint, *tracepoint_filter;
	/* An off-CPU profile (docs/service.md): timebase sched:sched_switch, every hit (no
	 * filter, period 1), with callstack_sampling. */
	bool off_cpu;
};

/* Parses a DataSourceConfig (bytes from the consumer, via the service) into *c. The
 * service-owned fields win as the service appends them last. Returns 0, or -EINVAL with a
 * one-line reason in err for a config this data source refuses (ring_buffer_pages not a
 * power of two, a raw or polled timebase, a frequency on a tracepoint...), or -SONDE_E_FORMAT for
 * malformed bytes. *c must be freed with sonde__perfds_cfg_free in every case. */
int sonde__perfds_cfg_parse(const uint8_t *ds_config, size_t len, struct perfds_cfg *c, char *err,
			    size_t err_len);
void sonde__perfds_cfg_free(struct perfds_cfg *c);

/* Whether a /proc/PID/cmdline (len bytes, NUL-separated) matches a target_cmdline or
 * exclude_cmdline pattern, as perf_event_config.proto (Scope) says today: the pattern may
 * hold one '*' (any run of bytes, '/' included); a pattern starting with '/' is matched
 * against the whole argv0, any other against argv0's binary name (after its last '/').
 * At most 511 bytes of argv0 count. */
bool sonde__perfds_cmdline_match(const char *pattern, const char *cmdline, size_t len);
/* Whether process pid is a target of c: listed by pid, or its cmdline matches a target
 * pattern (or c is system-wide), and neither excluded by pid nor by an exclude pattern. */
bool sonde__perfds_is_target(const struct perfds_cfg *c, pid_t pid);

#endif
