/* sonde client: talk to any Perfetto-compatible tracing service (sonded or traced).
 *
 * Four parts:
 *   - trace configs: build a binary TraceConfig, or parse Perfetto's text format;
 *   - trace files: iterate the TracePacket records of a trace;
 *   - producer: register data sources and write packets into the shared memory buffer;
 *   - consumer: start, stop and read tracing sessions.
 *
 * The library never owns an event loop: producer and consumer expose a file descriptor
 * and a "process what is ready" call; blocking helpers are layered on top for simple
 * programs and tests.
 */
#ifndef SONDE_CLIENT_H
#define SONDE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------
 * Trace configs
 * ------------------------------------------------------------------------------------ */

/* Where a text-format parse failed: 1-based line and column of the offending token. */
struct sonde_txt_error {
	int line;
	int column;
	char msg[240];
};

/* Parses a TraceConfig in protobuf text format (as `perfetto --txt` reads) into binary
 * protobuf. Knows every TraceConfig field and the typed DataSourceConfigs of Linux data
 * sources (ftrace, process_stats, sys_stats, track_event, perf_event, chrome, for_testing);
 * any other field name is an error (docs/trace.md). On success *out is a malloc'd buffer
 * the caller frees with free(). On failure returns -SONDE_E_FORMAT (or -ENOMEM) and fills
 * *err when err is not NULL. */
SONDE_API int sonde_trace_config_from_text(const char *text, size_t len, uint8_t **out,
					   size_t *out_len, struct sonde_txt_error *err);

enum sonde_fill_policy {
	SONDE_FILL_RING_BUFFER = 1,
	SONDE_FILL_DISCARD = 2,
};

/* Options of a TraceConfig built with sonde_trace_config__new(). Zero means "not set". */
struct sonde_trace_config_opts {
	size_t sz; /* sizeof(struct sonde_trace_config_opts) */
	uint32_t duration_ms;
	uint32_t flush_period_ms;
	uint32_t flush_timeout_ms;
	uint32_t data_source_stop_timeout_ms;
	uint32_t file_write_period_ms;
	uint64_t max_file_size_bytes;
	bool write_into_file;
	bool deferred_start;
	const char *unique_session_name; /* copied */
	const char *output_path;	 /* copied */
};

struct sonde_trace_config;

/* A TraceConfig under construction. opts may be NULL. Free with sonde_trace_config__free. */
SONDE_API struct sonde_trace_config *
sonde_trace_config__new(const struct sonde_trace_config_opts *opts);
SONDE_API void sonde_trace_config__free(struct sonde_trace_config *cfg);
/* Adds a buffer; returns its index (the data sources' target_buffer) or -errno. */
SONDE_API int sonde_trace_config__add_buffer(struct sonde_trace_config *cfg, uint32_t size_kb,
					     enum sonde_fill_policy policy);
/* Adds a data source by name writing into buffer target_buffer. extra (may be NULL) holds
 * further serialized DataSourceConfig fields, appended verbatim (e.g. a track_event_config).
 * Returns 0 or -errno. */
SONDE_API int sonde_trace_config__add_data_source(struct sonde_trace_config *cfg, const char *name,
						  uint32_t target_buffer, const void *extra,
						  size_t extra_len);
/* Sets the SMB geometry the service should give producer `name` (0: service default). */
SONDE_API int sonde_trace_config__add_producer(struct sonde_trace_config *cfg, const char *name,
					       uint32_t shm_size_kb, uint32_t page_size_kb);
/* Serializes the config: *out is malloc'd (free() it). Returns 0 or -ENOMEM. */
SONDE_API int sonde_trace_config__encode(const struct sonde_trace_config *cfg, uint8_t **out,
					 size_t *out_len);

/* The TraceConfig fields that decide how a consumer drives a session. */
struct sonde_trace_config_summary {
	uint32_t duration_ms;
	uint32_t num_buffers;
	uint32_t num_data_sources;
	uint64_t total_buffer_kb;
	bool write_into_file;
	bool deferred_start;
	bool has_output_path;
	bool has_triggers;
	uint32_t flush_timeout_ms;
	uint32_t data_source_stop_timeout_ms;
};

/* Decodes the summary of a binary TraceConfig (untrusted bytes). Returns 0 or
 * -SONDE_E_FORMAT. */
SONDE_API int sonde_trace_config_summarize(const void *cfg, size_t len,
					   struct sonde_trace_config_summary *out);

/* ------------------------------------------------------------------------------------
 * Trace files: `Trace { repeated TracePacket packet = 1; }`
 * ------------------------------------------------------------------------------------ */

/* Iterates the packets of a trace held in memory. *pos starts at 0. Returns 1 with
 * *pkt and *pkt_len pointing inside buf, 0 at the clean end, or -SONDE_E_TRUNCATED when the
 * buffer ends inside a record, -SONDE_E_FORMAT for bytes that are not a Trace. Fields of
 * Trace other than 1 are skipped. */
SONDE_API int sonde_trace_next_packet(const void *buf, size_t len, size_t *pos, const void **pkt,
				      size_t *pkt_len);

#ifdef __cplusplus
}
#endif

#endif
