/* FtraceConfig (protos/perfetto/config/ftrace/ftrace_config.proto), the fields linux.ftrace
 * supports. Internal to libsonde. */
#ifndef SONDE_PROBES_FTRACE_CONFIG_H
#define SONDE_PROBES_FTRACE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { FTRACE_EVENT_NAME_MAX = 128 };

struct ftrace_config {
	/* ftrace_events (1): "group/name", "group/" + "*" or a bare "name". Owned. */
	char (*events)[FTRACE_EVENT_NAME_MAX];
	size_t nevents;
	uint32_t buffer_size_kb;       /* 10; 0 = the module's default */
	uint32_t drain_period_ms;      /* 11; 0 = the module's default */
	uint32_t drain_buffer_percent; /* 29: the instance's buffer_percent, 1..100; 0 = kept */
	bool compact_sched;	       /* 12: CompactSchedConfig.enabled; true unless set false */
	bool disable_generic_events;   /* 16: events without a typed proto are dropped */
	bool use_monotonic_raw_clock;  /* 24: trace_clock mono_raw instead of boot */
	/* Fields set but not acted on (bit N: field N; cfg_unsupported.h), so that the data
	 * source can say so: atrace_*, symbolize_ksyms, instance_name, kprobes, ... */
	uint64_t unsupported;
};

/* Decodes FtraceConfig bytes (the DataSourceConfig's ftrace_config field, 100). v53's
 * fields linux.ftrace does not act on are marked in c->unsupported; unknown ones are
 * skipped. An event name longer than FTRACE_EVENT_NAME_MAX - 1 bytes, with a
 * character other than [A-Za-z0-9_-], '/' or '*', or with "..", is -SONDE_E_RANGE.
 * Returns 0, -SONDE_E_FORMAT, -SONDE_E_RANGE or -ENOMEM; on failure *c is left empty. */
int sonde__ftrace_config_parse(const void *buf, size_t len, struct ftrace_config *c);
void sonde__ftrace_config_free(struct ftrace_config *c);

#endif
