/* linux.process_stats: the process tree (at start, and for threads other data sources
 * name) and periodic per-process memory and CPU counters. Internal to libsonde.
 *
 * Call order:
 *   s = sonde__procstats_new(&cfg, NULL, emit, ctx)
 *   sonde__procstats_start(s)          the whole tree when scan_all_processes_on_start
 *   during the session:
 *     sonde__procstats_note_pid(s, tid) for every thread an event names (linux.ftrace's on_pid
 *                                hook: pass sonde__procstats_on_pid and s); unseen ones are queued
 *     sonde__procstats_flush(s)         emits the queued threads (and their processes) as a
 *                                ProcessTree; call it after each ftrace drain
 *     sonde__procstats_tick(s, now_ms)  when proc_stats_poll_ms is set, from a timer, after the
 *                                delay it returned
 *   sonde__procstats_free(s)
 * Packets are the bytes of one TracePacket each, passed to emit.
 */
#ifndef SONDE_PROBES_PROCSTATS_H
#define SONDE_PROBES_PROCSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ProcessStatsConfig (protos/perfetto/config/process_stats/process_stats_config.proto).
 * quirks: DISABLE_ON_DEMAND turns sonde__procstats_note_pid off; other values are ignored. */
struct procstats_config {
	bool scan_all_processes_on_start; /* 2 */
	bool record_thread_names;	  /* 3: threads named on demand carry their names */
	bool on_demand;			  /* not quirks DISABLE_ON_DEMAND (1: 2) */
	uint32_t proc_stats_poll_ms;	  /* 4; 0 = no polling, else at least 100 ms */
	uint64_t unsupported;		  /* fields set but not acted on (cfg_unsupported.h) */
};

/* Decodes ProcessStatsConfig bytes. Returns 0 or -SONDE_E_FORMAT. */
int sonde__procstats_config_parse(const void *buf, size_t len, struct procstats_config *c);

/* --- the (buf, len) parsers, exposed for tests and fuzzing --- */

/* From /proc/PID/status. Absent lines leave -1 (kernel threads have no Vm* lines). */
struct procstats_status {
	char name[64];
	pid_t tgid, ppid;
	int64_t uid; /* real uid */
	int64_t vm_size_kb, vm_rss_kb, rss_anon_kb, rss_file_kb, rss_shmem_kb, vm_swap_kb,
		vm_locked_kb, vm_hwm_kb;
};
int sonde__procstats_parse_status(const char *buf, size_t len, struct procstats_status *st);

/* From /proc/PID/stat: the fields after the comm (which may hold spaces and parens). */
struct procstats_stat {
	char state;
	pid_t ppid;
	uint64_t utime, stime; /* clock ticks */
	uint64_t start_time;   /* clock ticks after boot */
};
int sonde__procstats_parse_stat(const char *buf, size_t len, struct procstats_stat *st);

/* --- the data source --- */

typedef int (*procstats_emit_fn)(void *ctx, const void *packet, size_t len);

struct procstats;

/* proc_root: "/proc" when NULL. Returns NULL with errno set. */
struct procstats *sonde__procstats_new(const struct procstats_config *c, const char *proc_root,
				procstats_emit_fn emit, void *ctx);
/* Emits the whole process tree if the config asks for it. Returns 0 or a negative error. */
int sonde__procstats_start(struct procstats *s);
/* Queues tid for the next sonde__procstats_flush if it was never seen. Cheap: one hash lookup. */
void sonde__procstats_note_pid(struct procstats *s, int tid);
/* The same with the signature of linux.ftrace's on_pid hook (ctx: the procstats). */
void sonde__procstats_on_pid(void *ctx, int tid);
/* Emits what sonde__procstats_note_pid queued. Returns 0 or a negative error. */
int sonde__procstats_flush(struct procstats *s);
/* Polls every process's counters if due (the first call always is); returns the delay
 * in ms to the next call, -EINVAL when polling is off, or a negative error from emit. */
int64_t sonde__procstats_tick(struct procstats *s, uint64_t now_ms);
void sonde__procstats_free(struct procstats *s);

#endif
