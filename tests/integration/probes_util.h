/* Helpers for the linux.ftrace, linux.process_stats and linux.sys_stats tests: packets
 * collected into a Trace, decoded by protoc with tests/protos/probes.proto. */
#ifndef SONDE_TESTS_PROBES_UTIL_H
#define SONDE_TESTS_PROBES_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* An emit callback (ctx: a struct buf) appending each packet as Trace.packet (field 1). */
int probes_collect(void *ctx, const void *packet, size_t len);

/* Skips unless tracefs is usable (root, mounted or mountable); returns its root. */
const char *probes_require_tracefs(void);

/* Writes trace to a file and returns protoc's text decoding of it as perfetto.protos.Trace
 * (malloc'd), skipping the test if protoc is missing. */
char *probes_protoc_decode(const struct buf *trace);

/* Calls fn for each TracePacket of a Trace. */
void probes_each_packet(const struct buf *trace, void (*fn)(void *ctx, const uint8_t *p, size_t n),
			void *ctx);

/* A tracefs instance name of this test process's own. */
const char *probes_test_instance(void);

/* The thread name ftrace_sleeper is given in this test process (at most 15 bytes). */
const char *probes_sleeper_name(void);

/* Counts occurrences of needle in hay. */
size_t probes_count(const char *hay, const char *needle);

#endif
