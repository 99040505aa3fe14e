/* The RelayPort service of Perfetto's multi-machine tracing (relay_port.proto): the
 * messages a relay (traced_relay, `sonded --relay`) and the host service exchange on the
 * relay's own connection to the host's producer socket. Internal to libsonde; used by
 * both sides:
 *
 *   relay: sonde__relay_init_req_encode, sonde__relay_sync_req_encode; decodes the
 *          (empty) responses with sonde__relay_resp_decode
 *   host:  sonde__relay_init_req_decode, sonde__relay_sync_req_decode; answers with an
 *          empty reply (sonde__relay_resp_encode)
 *
 * Method ids are 1-based in .proto order: InitRelay = 1, SyncClock = 2.
 *
 * Decoding is of untrusted bytes: it never allocates, decoded strings point into the
 * caller's buffer (not NUL-terminated), and a message whose fields are of the wrong wire
 * type, too many or too long is refused whole rather than half-used.
 */
#ifndef SONDE_IPC_RELAY_PROTO_H
#define SONDE_IPC_RELAY_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define RELAY_SERVICE_NAME "RelayPort"

enum pf_relay_method {
	PF_RELAY_INIT_RELAY = 1,
	PF_RELAY_SYNC_CLOCK = 2,
};
enum pf_init_relay_req {
	PF_INIT_RELAY_REQ_SYSTEM_INFO = 1,
};
enum pf_sync_clock_req {
	PF_SYNC_CLOCK_REQ_PHASE = 1,
	PF_SYNC_CLOCK_REQ_CLOCKS = 2,
};
/* SyncClockRequest.Clock */
enum pf_sync_clock {
	PF_SYNC_CLOCK_CLOCK_ID = 1,
	PF_SYNC_CLOCK_TIMESTAMP = 2,
};
enum relay_sync_phase {
	RELAY_SYNC_PING = 1,
	RELAY_SYNC_UPDATE = 2,
};

enum {
	/* Perfetto sends the six builtin clocks; room for a few more, no more than that */
	RELAY_MAX_CLOCKS = 16,
	/* a SystemInfo is a few hundred bytes; one larger is refused */
	RELAY_MAX_SYSTEM_INFO = 8192,
	/* a string of SystemInfo (utsname version, build fingerprint...) */
	RELAY_MAX_STRING = 1024,
};

struct relay_clock {
	uint32_t clock_id; /* BuiltinClock: 1 REALTIME ... 6 BOOTTIME */
	uint64_t timestamp;
};

struct relay_sync_req {
	enum relay_sync_phase phase;
	size_t n_clocks;
	struct relay_clock clocks[RELAY_MAX_CLOCKS];
};

struct relay_str {
	const char *s; /* NULL when absent; not NUL-terminated when decoded */
	size_t len;
};

/* The fields of SystemInfo sonde reads or writes. When decoding, `raw` is the whole
 * SystemInfo message as received (the host writes it into traces verbatim, as Perfetto's
 * service does, so fields sonde does not know survive); when encoding, raw is ignored. */
struct relay_system_info {
	struct relay_str sysname, version, release, machine; /* Utsname */
	struct relay_str tracing_service_version;
	int64_t hz;	    /* 0: absent */
	uint32_t page_size; /* 0: absent */
	uint32_t num_cpus;  /* 0: absent */
	bool has_timezone;
	int32_t timezone_off_mins;
	const uint8_t *raw;
	size_t raw_len;
};

struct relay_init_req {
	bool has_system_info;
	struct relay_system_info si;
};

/* This machine's SystemInfo (uname, CLK_TCK, page size, CPUs, timezone offset), strings
 * pointing into *uts, which the caller keeps while si is used. service_version may be
 * NULL. */
struct utsname;
void sonde__relay_system_info_local(struct relay_system_info *si, struct utsname *uts,
				    const char *service_version);
/* Appends the SystemInfo fields of si (no tag: the body of a SystemInfo message). */
void sonde__relay_system_info_put(struct buf *b, const struct relay_system_info *si);

/* Appends InitRelayRequest{system_info} (the args_proto of an InitRelay call). Returns 0
 * or -ENOMEM. */
int sonde__relay_init_req_encode(struct buf *b, const struct relay_system_info *si);
/* Decodes InitRelayRequest. Returns 0, or -SONDE_E_FORMAT for malformed bytes, a field of
 * the wrong wire type, a SystemInfo over RELAY_MAX_SYSTEM_INFO or a string over
 * RELAY_MAX_STRING. */
int sonde__relay_init_req_decode(const void *p, size_t n, struct relay_init_req *r);

/* Appends SyncClockRequest. Returns 0, -SONDE_E_RANGE (bad phase or n_clocks over
 * RELAY_MAX_CLOCKS) or -ENOMEM. */
int sonde__relay_sync_req_encode(struct buf *b, const struct relay_sync_req *r);
/* Decodes SyncClockRequest. Returns 0, or -SONDE_E_FORMAT for malformed bytes, wrong
 * wire types, a phase other than PING/UPDATE, more than RELAY_MAX_CLOCKS clocks, a clock
 * without id or timestamp, or the same clock id twice. */
int sonde__relay_sync_req_decode(const void *p, size_t n, struct relay_sync_req *r);

/* InitRelayResponse and SyncClockResponse are empty messages: encoding appends nothing,
 * decoding checks the bytes are a well-formed message (unknown fields skipped). */
int sonde__relay_resp_encode(struct buf *b);
int sonde__relay_resp_decode(const void *p, size_t n);

/* Reads this machine's builtin clocks in Perfetto's order (BOOTTIME, REALTIME_COARSE,
 * MONOTONIC_COARSE, REALTIME, MONOTONIC, MONOTONIC_RAW), all read before any is stored,
 * as close together as they can be: what a relay
 * sends in SyncClock and what the host records at its receipt. Returns the count. */
size_t sonde__relay_clocks_read(struct relay_clock *out, size_t max);

#endif
