/* Helpers for the sonded tests: start the daemon on temporary sockets, and minimal
 * synchronous raw-frame producer and consumer clients built directly on src/ipc. */
#ifndef SONDE_TEST_SVC_UTIL_H
#define SONDE_TEST_SVC_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/buf.h"
#include "ipc/frame.h"

struct tc_msg {
	uint8_t *payload;
	size_t len;
	int fd;
	struct ipc_frame f; /* points into payload */
};

struct tc {
	struct ipc_chan ch;
	uint64_t next_id;
	struct tc_msg *q;
	size_t nq;
	char *names[32];
	uint32_t ids[32];
	size_t nmethods;
	uint32_t service_id; /* from BindServiceReply */
};

struct sonded {
	pid_t pid;
	char psock[256], csock[256], xsock[256]; /* producer, consumer, connector */
};

/* Spawns build/VARIANT/sonded on sockets in the test's tmpdir and waits until both
 * accept connections. extra: further arguments, NULL-terminated (may be NULL). */
void sonded_start(struct sonded *d, const char *const *extra);
/* The same on the socket names prod and cons (NULL: the tmpdir's), e.g. TCP addresses. */
void sonded_start_at(struct sonded *d, const char *prod, const char *cons,
		     const char *const *extra);
/* SIGTERM, then asserts a clean exit. */
void sonded_stop(struct sonded *d);
/* The pid of sonded's `sonde probes` child other than `not` (0: any), waited for up to
 * timeout_s; fails the test without one. */
pid_t sonded_probes_pid(const struct sonded *d, pid_t not, int timeout_s);

void tc_open(struct tc *t, const char *sock, const char *service);
/* The same over an already connected socket (taken). */
void tc_open_fd(struct tc *t, int fd, const char *service);
void tc_close(struct tc *t);
uint32_t tc_method_id(const struct tc *t, const char *name);
uint64_t tc_call(struct tc *t, const char *method, const struct buf *args, int fd, bool drop);
/* Calls Flush with timeout_ms (0: the session's): the request's id. */
uint64_t tc_flush(struct tc *t, uint32_t timeout_ms);
/* Set by in-process tests (svc_inproc.h): runs the service until it is idle and returns
 * whether it did anything. While set, tc_wait returns NULL as soon as the service is idle
 * and the reply has not come, whatever timeout_ms: no wait is measured in real time. */
extern bool (*svc_util_pump)(void);
/* The next message for request id req, or NULL after timeout_ms. */
struct tc_msg *tc_wait(struct tc *t, uint64_t req, int timeout_ms);
/* Asserts a successful unary reply arrives for req; returns it (free with tc_msg_free). */
struct tc_msg *tc_ok(struct tc *t, uint64_t req);
void tc_msg_free(struct tc_msg *m);
/* Calls Detach or Attach (`method`) with key; returns its reply, whatever its outcome. */
struct tc_msg *tc_call_key(struct tc *t, const char *method, const char *key);

/* ---- producer ---- */
struct tprod {
	struct tc t;
	uint64_t cmd_req;
	uint8_t *smb;
	size_t smb_size, page;
	int setups; /* setup_tracing commands seen */
	/* shared-memory emulation (setup_tracing came without an fd): smb is local memory and
	 * tprod_commit sends the chunks inline */
	bool emulated;
};

struct tcmd {
	uint32_t kind; /* GetAsyncCommandResponse field number */
	uint64_t inst_id, flush_id;
	uint32_t target_buffer;
	struct tc_msg *m;
};

void tprod_open(struct tprod *p, const char *sock, const char *name, bool scraping);
void tprod_open_fd(struct tprod *p, int fd, const char *name, bool scraping);
void tprod_register(struct tprod *p, const char *ds, bool notify_start, bool notify_stop);
/* The next async command (setup_tracing is handled here: the SMB gets mapped). Returns
 * false on timeout. */
bool tprod_cmd(struct tprod *p, struct tcmd *c, int timeout_ms);
/* Waits for a command of a kind, failing the test on another kind or timeout. */
void tprod_expect(struct tprod *p, uint32_t kind, struct tcmd *c);
/* Writes a chunk: fragments frags[0..n) with 4-byte size prefixes. Returns the chunk. */
uint8_t *tprod_chunk(struct tprod *p, unsigned page, unsigned layout, unsigned idx, uint16_t writer,
		     uint32_t chunk_id, unsigned flags, const struct iovec *frags, size_t n,
		     bool complete);
/* CommitData moving (page, chunk) pairs into target; optional flush ack and raw extra
 * request bytes (e.g. chunks_to_patch). Waits for the reply. */
void tprod_commit(struct tprod *p, const unsigned (*moves)[2], size_t n, uint32_t target,
		  uint64_t flush_id, const struct buf *extra);
void tprod_notify(struct tprod *p, const char *method, uint64_t inst_id);

/* ---- consumer ---- */
/* A TraceConfig with one buffer of size_kb and data sources ds[0..n). */
void tcfg_basic(struct buf *b, uint32_t size_kb, const char *const *ds, size_t n);
/* The filters of tcfg_filtered: producer names (exact), a producer name regex, machine
 * names, and a duration; each may be left out (NULL, 0). */
struct tcfg_filter {
	const char *const *producers;
	size_t n_producers;
	const char *regex;
	const char *const *machines;
	size_t n_machines;
	uint32_t duration_ms;
};
/* Replaces b with a TraceConfig of one 1024 KiB buffer and data source test.ds restricted
 * by f's filters, with f's duration_ms. */
void tcfg_filtered(struct buf *b, const struct tcfg_filter *f);
uint64_t tcons_enable(struct tc *t, const struct buf *cfg, int fd);
/* ChangeTraceConfig to cfg; its reply, whatever its outcome (free with tc_msg_free). */
struct tc_msg *tcons_change_config(struct tc *t, const struct buf *cfg);
/* Asserts the EnableTracing reply (disabled=true) arrives within timeout_ms; returns its
 * error string (malloc'd, or NULL). */
char *tcons_wait_disabled(struct tc *t, uint64_t req, int timeout_ms);
/* The same for a reply already taken (m: not NULL; freed). */
char *tcons_disabled_reply(struct tc_msg *m);
/* ReadBuffers until has_more=false; appends packets in Trace file format to trace. */
void tcons_read(struct tc *t, struct buf *trace);
/* A varint field of the session's TraceStats (GetTraceStats): a top-level one with buffer
 * -1, else one of the BufferStats of buffer number `buffer`. 0 when the stats leave it
 * out, UINT64_MAX when there are no stats or no such buffer. */
uint64_t tcons_stat(struct tc *t, int buffer, uint32_t field);

/* A TracePacket (timestamp 1000) carrying tag in field 900 and, with pad, pad bytes of
 * a-z in field 901: recognizable in a trace. */
void svc_make_packet(struct buf *b, const char *tag, size_t pad);

/* ---- trace inspection ---- */
struct tpkt {
	const uint8_t *p;
	size_t len;
	int64_t uid;
	uint64_t seq;
	bool has_uid, has_seq, dropped;
};
/* Iterates the packets of a Trace: *off starts at 0. Returns false at the end. */
bool trace_next(const struct buf *trace, size_t *off, struct tpkt *pk);
/* Number of packets containing needle (bytes) as a substring; *last gets the last one. */
int trace_count(const struct buf *trace, const void *needle, size_t n, struct tpkt *last);
/* Number of packets with top-level field `field`. */
int trace_count_field(const struct buf *trace, uint32_t field);

#endif
