/* The TraceConfig as the service acts on it (perfetto-wire.md §3.3), parsed from the
 * consumer's bytes. Pure: no service state, no allocation beyond the result, nothing
 * outlives the bytes except what the result owns. trigger_config is trigger.c's. */
#ifndef SONDE_SERVICE_TCFG_H
#define SONDE_SERVICE_TCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <regex.h>
#include <stdint.h>

/* One TraceConfig.data_sources entry. raw points into the parsed bytes (valid as long as
 * they are); name and the filters are owned. */
struct ds_cfg {
	const uint8_t *raw; /* DataSourceConfig bytes */
	size_t raw_len;
	char *name;
	uint32_t target_buffer;
	char **name_filter, **regex_filter, **machine_filter;
	size_t n_name_filter, n_regex_filter, n_machine_filter;
	/* regex_filter compiled (sonde__tcfg_regex), each NULL where it was refused: it
	 * matches no producer */
	regex_t **regex_rx;
};

struct trace_cfg {
	struct ds_cfg *ds;
	size_t nds;
	uint64_t *bufs; /* buffers: (size_kb, discard) pairs */
	size_t nbufs;
	uint32_t duration_ms, flush_period_ms, flush_timeout_ms, stop_timeout_ms;
	uint32_t file_write_period_ms, snapshot_interval_ms, clear_period_ms;
	uint64_t max_file_size;
	bool deferred_start, write_into_file, extra_guardrails;
	bool no_clock_snapshots, no_trace_config, no_system_info, no_service_events;
	char *unique_name, *output_path;
	size_t n_regex; /* producer_name_regex_filter entries, all data sources together */
};

/* A consumer's producer name pattern (producer_name_regex_filter, a trigger's
 * producer_name_regex), compiled to match a whole name as Perfetto's std::regex_match
 * does, or NULL with *why, a refusal of enum tcfg_regex_refusal. glibc's
 * regcomp writes an interval expression out as copies of what it repeats, so nested
 * intervals multiply: a 29-byte pattern, ((a{1,255}){1,255}){1,255}, held the service's
 * loop for 17 s and 10 GB. So a pattern has at most SVC_REGEX_MAX_LEN bytes, and the
 * bounds of its intervals multiplied together are at most SVC_REGEX_MAX_REPEAT (whether
 * nested or not: a bound, not a parse). Free with sonde__tcfg_regex_free. */
enum { SVC_REGEX_MAX_LEN = 128, SVC_REGEX_MAX_REPEAT = 256 };
/* The patterns of one config (its data sources' producer_name_regex_filter entries): the
 * worst pattern these bounds let through compiles in about 6 ms and matches a name in 2. */
enum { SVC_REGEX_MAX_PER_CONFIG = 16 };
enum tcfg_regex_refusal {
	TCFG_REGEX_OK,
	TCFG_REGEX_TOO_LONG,	/* over SVC_REGEX_MAX_LEN bytes */
	TCFG_REGEX_TOO_COMPLEX, /* interval bounds multiplying past SVC_REGEX_MAX_REPEAT */
	TCFG_REGEX_INVALID,	/* regcomp refused it */
	TCFG_REGEX_NO_MEMORY,
};
regex_t *sonde__tcfg_regex(const char *re, enum tcfg_regex_refusal *why);
/* Why re would be refused before it is compiled (TOO_LONG, TOO_COMPLEX), or OK. */
enum tcfg_regex_refusal sonde__tcfg_regex_refused(const char *re);
void sonde__tcfg_regex_free(regex_t *rx);

/* Parses a TraceConfig into *c (zeroed first). NULL, or a message for the consumer
 * ("malformed TraceConfig", "out of memory"); *c must be freed with sonde__tcfg_free either way.
 * Repeated scalar fields: the last wins, as in protobuf. */
const char *sonde__tcfg_parse(const uint8_t *cfg, size_t len, struct trace_cfg *c);
/* The guardrails that need only the config itself (duration_ms, buffer count,
 * deferred_start with extra guardrails). NULL or a message. */
const char *sonde__tcfg_validate(const struct trace_cfg *c, size_t max_buffers);
/* Only the data_sources table, into c->ds (replacing it): ChangeTraceConfig's rebuild.
 * 0, -ENOMEM, or -SONDE_E_FORMAT for malformed bytes. */
int sonde__tcfg_parse_data_sources(const uint8_t *cfg, size_t len, struct trace_cfg *c);
void sonde__tcfg_free_data_sources(struct trace_cfg *c);
/* Frees what *c owns and zeroes it. */
void sonde__tcfg_free(struct trace_cfg *c);

#endif
