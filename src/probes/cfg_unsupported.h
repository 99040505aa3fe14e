/* The config fields of linux.ftrace, linux.process_stats and linux.sys_stats that sonde
 * probes reads but does not act on. Internal to libsonde.
 *
 * A field in these tables that a config sets is not silently dropped: the config parser
 * marks it (bit N of the config's `unsupported` for field N) and the data source writes
 * one notice per field into the trace, with the reason (sysds.c; docs/probes-sources.md
 * has the table of every field). Fields after v53 that no table lists are skipped, as any
 * protobuf reader skips fields it does not know.
 */
#ifndef SONDE_PROBES_CFG_UNSUPPORTED_H
#define SONDE_PROBES_CFG_UNSUPPORTED_H

#include <stdbool.h>
#include <stdint.h>

#include "base/pb.h"

struct probes_unsupported {
	uint32_t num; /* field number, below 64; 0 ends a table */
	const char *name;
	const char *why;
};

extern const struct probes_unsupported sonde__ftrace_unsupported[];
extern const struct probes_unsupported sonde__procstats_unsupported[];
extern const struct probes_unsupported sonde__sysstats_unsupported[];

/* The entry of field num in table, or NULL. */
const struct probes_unsupported *sonde__probes_unsupported_find(const struct probes_unsupported *t,
								uint32_t num);

/* Marks f in *mask when table lists it and it asks for something: a non-zero number, or
 * a string or message (present at all). A false bool or a zero period asks for nothing. */
void sonde__probes_unsupported_mark(const struct probes_unsupported *t, const struct pb_field *f,
				    uint64_t *mask);

#endif
