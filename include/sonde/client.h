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
