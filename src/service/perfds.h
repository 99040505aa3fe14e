/* sonde's linux.perf data source (perfetto-wire.md §7), served inside sonded on its own
 * thread as an in-process producer (docs/service.md has the design). Internal to the
 * service.
 *
 *   perfds.c      the thread: producer connection, instances, recorders, the encoder
 *   perfds_cfg.c  PerfEventConfig parsing and target selection (untrusted bytes)
 */
#ifndef SONDE_SERVICE_PERFDS_H
#define SONDE_SERVICE_PERFDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct svc;
struct perfauth_consumer;

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
	char **cmdlines, **exclude_cmdlines; /* normalized (see sonde__perfds_cmdline_normalize) */
	size_t n_cmdlines, n_exclude_cmdlines;
};

/* Parses a DataSourceConfig (bytes from the consumer, via the service) into *c. The
 * service-owned fields win as the service appends them last. Returns 0, or -EINVAL with a
 * one-line reason in err for a config this data source refuses (ring_buffer_pages not a
 * power of two, a tracepoint or raw timebase, no target...), or -SONDE_E_FORMAT for
 * malformed bytes. *c must be freed with sonde__perfds_cfg_free in every case. */
int sonde__perfds_cfg_parse(const uint8_t *ds_config, size_t len, struct perfds_cfg *c, char *err,
		     size_t err_len);
void sonde__perfds_cfg_free(struct perfds_cfg *c);

/* traced_perf's cmdline normalization: argv[0] (the bytes before the first NUL), cut at
 * its first '@', without the directories. Writes a NUL-terminated copy into out. */
void sonde__perfds_cmdline_normalize(const char *cmdline, size_t len, char *out, size_t cap);
/* Whether process pid is a target of c: listed by pid, or its normalized cmdline equals a
 * target cmdline, and neither excluded by pid nor by cmdline. */
bool sonde__perfds_is_target(const struct perfds_cfg *c, pid_t pid);

/* ---- the service side (perfds.c) ---- */

/* Starts the data source thread, a producer connected to producer_socket. 0 or -errno. */
int sonde__perfds_start(struct svc *s, const char *producer_socket);
/* Stops and joins the thread (its instances end; nothing if it never started). */
void sonde__perfds_stop(struct svc *s);
/* The service's record of which consumer owns each session (its credentials,
 * perfauth.h): the only trusted source of the consumer's identity, since the wire
 * protocol does not tell producers. */
void sonde__perfds_note_session(struct svc *s, uint64_t session_id,
			 const struct perfauth_consumer *who);
void sonde__perfds_forget_session(struct svc *s, uint64_t session_id);

#endif
