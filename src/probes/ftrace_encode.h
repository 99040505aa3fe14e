/* Ftrace event records into FtraceEventBundle packets. Internal to libsonde.
 *
 * Events perfetto knows get their typed proto (FtraceEvent's oneof, field numbers from
 * protos/perfetto/trace/ftrace/ftrace_event.proto); the proto's fields are named after
 * the kernel's, so a typed event is a table of (kernel field, proto field) pairs bound to
 * the running kernel's format file at setup. Every other event is written as a
 * GenericFtraceEvent, its fields named. With compact_sched, sched_switch and sched_waking
 * go into the bundle's CompactSched columns instead.
 */
#ifndef SONDE_PROBES_FTRACE_ENCODE_H
#define SONDE_PROBES_FTRACE_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "perf/ftrace_format.h"

enum { FTRACE_KNOWN_MAX_FIELDS = 8 };

struct ftrace_known; /* a row of the typed-event table */

enum ftrace_compact { FTRACE_COMPACT_NONE, FTRACE_COMPACT_SWITCH, FTRACE_COMPACT_WAKING };

/* One enabled event, bound to its format. */
struct ftrace_event_desc {
	struct ftrace_format fmt;				  /* owned */
	const struct ftrace_known *known;			  /* NULL: generic encoding */
	const struct ftrace_field *slot[FTRACE_KNOWN_MAX_FIELDS]; /* per known field, or NULL */
	const struct ftrace_field *common_pid;
	const struct ftrace_field *common_flags;
	const struct ftrace_field *pid_field; /* the field naming a thread worth a name */
	enum ftrace_compact compact;
};

/* Binds a parsed format (taking ownership of it; group must be set) to its encoding.
 * compact: whether the session asked for compact_sched. */
void sonde__ftrace_desc_init(struct ftrace_event_desc *d, struct ftrace_format *fmt, bool compact);
void sonde__ftrace_desc_free(struct ftrace_event_desc *d);
/* Whether group/name has a typed proto. */
bool sonde__ftrace_event_is_known(const char *group, const char *name);

/* The pid the event's pid_field names, or -1. */
int sonde__ftrace_desc_pid(const struct ftrace_event_desc *d, const uint8_t *rec, size_t len);

/* A TracePacket { ftrace_events: FtraceEventBundle } under construction. Reused across
 * bundles: the buffers keep their memory, so a warm bundle allocates nothing. */
struct ftrace_bundle {
	struct buf out; /* the packet's bytes once finished */
	size_t packet_mark, bundle_mark;
	size_t nevents, nerrors;
	bool open, lost;
	/* compact_sched columns, each a packed varint run */
	struct buf col[11];
	struct buf interned; /* intern_table strings, each NUL-terminated */
	uint32_t ninterned;
	uint16_t intern_slot[256]; /* hash of a comm -> index + 1, 0 empty */
	uint32_t intern_off[256];  /* that slot's string's offset in interned */
	uint64_t last_switch_ts, last_waking_ts;
	size_t nswitch, nwaking;
};

/* Starts a bundle for cpu. lost: events were lost before its first event.
 * ftrace_clock: FtraceClock value to state (0 when the clock is BOOTTIME). */
void sonde__ftrace_bundle_begin(struct ftrace_bundle *b, uint32_t cpu, bool lost, int ftrace_clock);
/* Adds one event record. Returns 0, or 1 when the event was skipped (generic events
 * disabled, or a record too short for its format). */
int sonde__ftrace_bundle_add(struct ftrace_bundle *b, const struct ftrace_event_desc *d, uint64_t ts,
		      const uint8_t *rec, size_t len, bool generic);
/* Records a page the parser rejected: FtraceEventBundle.error {timestamp, status}, status
 * an FtraceParseStatus value. */
void sonde__ftrace_bundle_error(struct ftrace_bundle *b, uint64_t ts, int status);
/* Whether the bundle holds anything worth emitting: an event, an error, or lost_events. */
bool sonde__ftrace_bundle_worth(const struct ftrace_bundle *b);
/* Closes the bundle: b->out holds the TracePacket. Returns 0 or -ENOMEM. */
int sonde__ftrace_bundle_finish(struct ftrace_bundle *b);
void sonde__ftrace_bundle_free(struct ftrace_bundle *b);

#endif
