/* linux.sys_stats: /proc/meminfo, /proc/vmstat, /proc/stat, CPU and devfreq frequencies
 * sampled at the config's periods into SysStats packets. Internal to libsonde.
 *
 * Call order: sonde__sysstats_config_parse, sonde__sysstats_new, then sonde__sysstats_tick(s, now) from the
 * caller's timer, each time after the delay the previous call returned; sonde__sysstats_free.
 * The module owns no fd and no thread: each tick reads the files that are due and emits
 * one TracePacket{timestamp, sys_stats} holding them.
 */
#ifndef SONDE_PROBES_SYSSTATS_H
#define SONDE_PROBES_SYSSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SYSSTATS_MAX_KEYS = 256 };

enum sysstats_stat {
	SYSSTATS_STAT_CPU_TIMES = 1 << 1, /* SysStatsConfig.StatCounters values as bits */
	SYSSTATS_STAT_IRQ_COUNTS = 1 << 2,
	SYSSTATS_STAT_SOFTIRQ_COUNTS = 1 << 3,
	SYSSTATS_STAT_FORK_COUNT = 1 << 4,
};

/* SysStatsConfig (protos/perfetto/config/sys_stats/sys_stats_config.proto). A period of 0
 * disables that source; non-zero periods below 10 ms are raised to 10 ms. Empty counter
 * lists select every counter this module knows. */
struct sysstats_config {
	uint32_t meminfo_period_ms, vmstat_period_ms, stat_period_ms;
	uint32_t devfreq_period_ms, cpufreq_period_ms;
	uint16_t meminfo_counters[SYSSTATS_MAX_KEYS]; /* MeminfoCounters values */
	size_t nmeminfo;
	uint16_t vmstat_counters[SYSSTATS_MAX_KEYS]; /* VmstatCounters values */
	size_t nvmstat;
	uint32_t stat_mask; /* enum sysstats_stat bits; 0 = all */
	uint64_t unsupported; /* fields set but not acted on (cfg_unsupported.h) */
};

/* Decodes SysStatsConfig bytes. Returns 0 or -SONDE_E_FORMAT; more than SYSSTATS_MAX_KEYS
 * counters of a kind is -SONDE_E_RANGE. */
int sonde__sysstats_config_parse(const void *buf, size_t len, struct sysstats_config *c);

/* --- the (buf, len) parsers, exposed for tests and fuzzing --- */

/* One "Key:   value [kB]" (meminfo) or "key value" (vmstat) line at a time. */
typedef void (*sysstats_kv_fn)(void *ctx, const char *key, size_t keylen, uint64_t value);
/* Calls fn for every line with a key and a decimal value. Returns the number of lines. */
int sonde__sysstats_parse_kv(const char *buf, size_t len, sysstats_kv_fn fn, void *ctx);

struct sysstats_cpu_times {
	int cpu; /* -1 for the "cpu" total line */
	uint64_t user, nice, system, idle, iowait, irq, softirq, steal; /* clock ticks */
};
struct sysstats_stat_cb {
	void (*cpu)(void *ctx, const struct sysstats_cpu_times *t);
	/* kind 0: interrupts (intr), 1: softirqs; index -1 is the total */
	void (*count)(void *ctx, int kind, int index, uint64_t value);
	void (*forks)(void *ctx, uint64_t processes);
	void *ctx;
};
/* Parses /proc/stat. Returns 0, or -SONDE_E_FORMAT when no line was recognised. */
int sonde__sysstats_parse_stat(const char *buf, size_t len, const struct sysstats_stat_cb *cb);

/* The MeminfoCounters / VmstatCounters value of a /proc key, or 0 when unknown. */
int sonde__sysstats_meminfo_id(const char *key, size_t len);
int sonde__sysstats_vmstat_id(const char *key, size_t len);

/* --- the data source --- */

typedef int (*sysstats_emit_fn)(void *ctx, const void *packet, size_t len);

struct sysstats;

/* Returns NULL with errno set (ENOMEM, or EINVAL when every period is 0). proc_root and
 * sys_root ("/proc", "/sys" when NULL) let tests point it at fixtures. */
struct sysstats *sonde__sysstats_new(const struct sysstats_config *c, const char *proc_root,
			      const char *sys_root, sysstats_emit_fn emit, void *ctx);
/* Samples whatever is due at now_ms (any monotonic millisecond clock; the first call
 * samples everything enabled) and emits it. Returns the delay in ms until the next call,
 * or a negative error from emit. */
int64_t sonde__sysstats_tick(struct sysstats *s, uint64_t now_ms);
void sonde__sysstats_free(struct sysstats *s);

#endif
