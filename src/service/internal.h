/* sonded's core state, shared by the service's modules: the service (struct svc), its
 * connections with their producer and consumer ports, requests, and the modules' entry
 * points that take nothing else. Internal to the service.
 *
 *   host.c      sockets, connections, IPC dispatch, the public API
 *   producer.c  ProducerPort: SMB setup, CommitData, scraping, async commands
 *   consumer.c  ConsumerPort: the methods, ReadBuffers streaming, stats, queries
 *   session.h   sessions and their data-source instances (session.c), with
 *               tcfg.h (the TraceConfig), flush.h, outfile.h (write_into_file),
 *               trigger.h
 *   svcpkt.c    packets the service itself writes (sequence 1)
 *
 * Objects refer to each other by id (connection, session, instance) rather than by
 * pointer wherever one can die before the other; lookups are linear over small arrays.
 */
#ifndef SONDE_SERVICE_INTERNAL_H
#define SONDE_SERVICE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/u64map.h"
#include "ipc/frame.h"
#include "ipc/relay_proto.h"
#include "ipc/sock.h"
#include "service/loop.h"
#include "service/tbuf.h"

enum {
	SVC_MAX_BUFFER_ID = 65535, /* global BufferIDs are 1..65535 (bufid.c) */
	SVC_MAX_SESSIONS = 15,
	SVC_MAX_SESSIONS_PER_UID = 5,
	SVC_MAX_BUFFERS_PER_SESSION = 128,
	/* InitializeConnection's producer_name and sdk_version (real ones are a few dozen
	 * bytes; each goes into every QueryServiceState reply and log line) */
	SVC_MAX_PRODUCER_NAME = 1024,
	SVC_DEFAULT_TIMEOUT_MS = 5000,
	/* Flushes (flush.c): a session's flushes in progress, the shortest flush_period_ms
	 * and the longest flush timeout. Perfetto's service refuses a flush past 1000 in
	 * progress and takes any period and timeout; here a flush in progress is a timer the
	 * loop scans at every turn (loop.c), and 1 ms periods with 49-day timeouts kept a
	 * thousand a second */
	SVC_MAX_PENDING_FLUSHES = 128,
	SVC_MIN_FLUSH_PERIOD_MS = 100,
	SVC_MAX_FLUSH_TIMEOUT_MS = 60000,
	/* data sources one producer may have registered, and their descriptors' bytes in all
	 * (producer.c): the SDK registers at most 32 per process; one descriptor is at most
	 * a frame (128 KiB) */
	SVC_MAX_DS_PER_PRODUCER = 64,
	SVC_MAX_DS_BYTES_PER_PRODUCER = 256 << 10,
	SVC_READ_PAUSE_BYTES = 4 << 20, /* ReadBuffers waits while this much is unsent */
	SVC_ACCEPT_BATCH = 32,		/* connections accepted per wake-up of a listener */
	/* Requests one connection may have handled per turn, before every other connection
	 * with requests waiting had its turn (host.c) */
	SVC_FRAMES_PER_TURN = 16,
	/* A connection's requests wait (and its socket is not read) while this much of its
	 * replies is unsent, or while it has replies unsent and its uid has over
	 * SVC_UID_REPLY_BYTES unsent on all its connections; a connection with more than
	 * SVC_MAX_WAITING_REQS requests waiting so is closed */
	SVC_CONN_REPLY_BYTES = 256 << 10,
	SVC_UID_REPLY_BYTES = 16 << 20,
	SVC_MAX_WAITING_REQS = 64,
	SVC_REMOTE_HANDSHAKE_MS = 10000, /* default of --remote-handshake-ms */
	SVC_FILE_QUEUE_BYTES = 4 << 20,	 /* write_into_file: bytes queued to the writer thread */
	SVC_FILE_STALL_MS = 10000,	 /* ... and how long they may wait without progress, as a
					  * peer not reading: default of --stall-timeout-ms */
	SVC_MAX_DRAINING = 16,		 /* writers finishing the files of freed sessions */
	SVC_MAX_PRODUCER_SOCKETS = 8,	 /* names in a comma-separated producer socket list */
	SVC_MAX_RELAY_SOCKETS = 4,	 /* names in the relay socket list */
	SVC_MAX_LISTENERS = SVC_MAX_PRODUCER_SOCKETS + 1 + SVC_MAX_RELAY_SOCKETS,
	SVC_COOKIE_LISTENER = 1, /* listener i has cookie SVC_COOKIE_LISTENER + i */
	SVC_FIRST_CONN_ID = SVC_COOKIE_LISTENER + SVC_MAX_LISTENERS,
	/* machines other than the host known through relays (machine.c); a session marks
	 * what it wrote of each in a 64-bit mask */
	SVC_MAX_MACHINES = 64,
	SVC_SYNCED_CLOCKS = 5,	  /* the last SyncClock exchanges kept per machine, as Perfetto */
	SVC_RELAY_SERVICE_ID = 2, /* RelayPort's service id on a relay connection */
};

/* A listening socket: one per producer socket name, one for the consumer. */
struct svc_listener {
	int fd;
	bool consumer;
	bool relay; /* --relay-socket: its peers may vouch for producers (SetPeerIdentity) */
	char *name;
	struct ipc_bound bound; /* its socket file, unlinked at exit if still ours */
};

struct req {
	struct conn *c;
	uint64_t id;
	bool drop_reply;
	const uint8_t *args;
	size_t args_len;
	int fd; /* received with the frame; a handler that keeps it sets it to -1 */
};

/* A registered data source. */
struct ds_reg {
	uint64_t conn_id;
	char *name;
	uint8_t *desc; /* raw DataSourceDescriptor */
	size_t desc_len;
	uint64_t desc_id;
	bool notify_start, notify_stop, no_flush, handles_incr;
};

struct pending_cmd {
	uint8_t *data;
	size_t len;
	bool with_smb_fd;
};

/* A buffer a producer may write into, and the generation of that permission: a writer
 * registered for the buffer is bound to the permission it was registered under, not to
 * the bare id, which a later session may get again (producer.c). */
struct prod_allowed {
	uint16_t buf_id;
	uint32_t gen;
};

struct producer {
	uint32_t id;
	bool initialized;
	char *name, *sdk_version;
	uint32_t page_hint, size_hint;
	bool scraping;
	int smb_fd;
	uint8_t *smb;
	size_t smb_size, page_size, num_pages;
	bool smb_adopted, setup_sent;
	/* shared-memory emulation (a remote producer): no SMB, chunks come inline in
	 * CommitData; page_size and num_pages are the geometry told in SetupTracing */
	bool emulated;
	bool cmd_stream;
	uint64_t cmd_req_id;
	struct pending_cmd *pending;
	size_t npending;
	uint16_t writer_buf[SMB_MAX_WRITER_ID + 1]; /* writer -> registered BufferID */
	uint32_t writer_gen[SMB_MAX_WRITER_ID + 1]; /* ... under this permission (0: none) */
	struct prod_allowed *allowed;		    /* BufferIDs it may write into */
	size_t nallowed, allowed_cap;
	uint32_t allow_gen; /* the last permission's generation */
	uint32_t trig_tokens; /* ActivateTriggers throttle (trigger.c) */
	uint64_t trig_refill_ns;
};

struct consumer {
	uint64_t session_id;
	uint64_t observe_req;
	uint32_t observe_mask;
	/* ReadBuffers in progress (paused while the socket drains) */
	uint64_t read_req;
	bool reading, read_started;
	struct buf reply;
	size_t reply_est;
	/* CloneSession waiting for the source's flush (clone.c); clone_fd: the caller's
	 * output file for a write_into_file source, -1 if none */
	uint64_t clone_flush, clone_src, clone_req;
	bool clone_pending;
	int clone_fd;
};

/* One SyncClock request: the relay's clocks as it sent them and the host's at receipt. */
struct svc_synced {
	enum relay_sync_phase phase;
	size_t n_client, n_host;
	struct relay_clock client[RELAY_MAX_CLOCKS], host[RELAY_MAX_CLOCKS];
};

/* A machine other than the host (machine id 1..SVC_MAX_MACHINES), one per distinct
 * machine_id_hint that a relay connection vouched for. Kept for the service's lifetime,
 * so that a machine keeps its id across relay reconnections. */
struct svc_machine {
	uint32_t id;
	char *hint, *name;
	uint8_t *sysinfo; /* the SystemInfo of the latest InitRelay, verbatim; NULL before */
	size_t sysinfo_len;
	struct svc_synced synced[SVC_SYNCED_CLOCKS]; /* oldest first */
	size_t nsynced;
	uint64_t sync_gen; /* counts SyncClock requests, so sessions see new ones */
};

struct conn {
	uint64_t id;
	uint32_t peer_gid; /* with ch.peer_uid/peer_pid: SO_PEERCRED (security.c) */
	/* the peer's effective capabilities, read at accept (sonde__sec_peer_identity); unknown
	 * counts as none */
	bool caps_known;
	uint64_t cap_eff;
	uint64_t pid_start; /* the peer process's start time (sonde__perfauth_start_time); 0 unknown */
	/* the channel sonded made for its own supervised probes (sonde_service__add_probes),
	 * until their child is reaped (sonde_service__trust_probes): it is sent the
	 * consumer's credentials */
	bool trusted_probes;
	/* the same channel, for good: its loss is a restart of the probes (session.c) */
	bool probes_channel;
	/* a TCP or vsock peer: no SO_PEERCRED, so its uid and pid are unknown (ch.peer_uid is
	 * (uid_t)-1, nobody's, only so that no comparison can match); its producer gets
	 * shared-memory emulation and its packets no trusted_uid */
	bool remote;
	/* accepted on a relay socket: a relay's connection, for itself (RelayPort) or for a
	 * producer it forwards; vouched once its SetPeerIdentity was accepted (ch.peer_uid
	 * and peer_pid are then the relay's word, machine_id the machine's) */
	bool relay_conn, vouched, identity_seen, relay_bound;
	uint32_t machine_id; /* 0: the host */
	uint64_t accepted_ns; /* CLOCK_MONOTONIC at accept */
	bool is_producer;
	bool bound;
	bool dead;
	/* held: its replies go unread, its requests wait (host.c); eof: the peer closed its
	 * end, the requests it sent before are still handled; backlog: requests left after
	 * its last turn */
	bool held, eof, backlog;
	uint64_t turn; /* the loop iteration of its last turn */
	struct ipc_chan ch;
	uint32_t events;
	struct producer p;
	struct consumer k;
};

/* Configured limits (security.c; defaults in docs/service.md). */
struct svc_limits {
	uint32_t sessions, sessions_per_uid, conns, conns_per_uid, buffers_per_session;
	uint64_t session_buffer_bytes, uid_buffer_bytes, smb_bytes, pending_bytes;
	uint64_t handshake_ns; /* a remote peer's time to bind and initialize */
	uint64_t stall_ns;     /* a peer not reading, an output file taking nothing */
};

struct svc_connector;

/* One consumer uid's budget of new buffer ids (security.c): a token bucket. */
struct svc_idbudget {
	uid_t uid;
	uint32_t tokens;
	uint64_t refill_ns;
};

enum {
	/* Buffer ids a consumer uid other than sonded's may take at once, and per second
	 * after that: far more than sessions use, and far too few to cycle through the
	 * 65535 ids (it would take over half an hour) */
	SVC_IDS_BURST = 2048,
	SVC_IDS_PER_S = 32,
	SVC_MAX_IDBUDGETS = 32, /* uids tracked; a full bucket is forgotten first */
};

struct svc_retired {
	struct fwriter *fw;
	bool cancelled;
};

struct svc {
	struct loop loop;
	struct svc_limits lim;
	bool lockdown;
	struct svc_connector *cx; /* connector.c; NULL when disabled */
	struct svc_listener lis[SVC_MAX_LISTENERS];
	size_t nlis;
	char *sock_name[2]; /* producer, consumer, as given (the producer's may be a list) */
	struct conn **conns;
	size_t nconns;
	uint64_t next_conn_id, next_instance_id, next_session_id, next_flush_id;
	uint32_t next_producer_id;
	uint64_t t_housekeeping;
	uint64_t turn;		 /* loop iterations (sonde_service__process) */
	size_t freed_bytes;	 /* buffer memory of connections gone since the last trim */
	uint64_t trim_ns;	 /* ... whose last malloc_trim */
	uint64_t accept_warn_ns, accept_unreported; /* sonde__svc_accept_failed's rate limit */
	struct ds_reg **ds;
	size_t nds;
	struct session **sessions;
	size_t nsessions;
	struct u64map buf_by_id; /* BufferID -> struct tbuf * (bufid.c) */
	uint16_t last_buf_id;	 /* the last id handed out */
	struct svc_idbudget idb[SVC_MAX_IDBUDGETS];
	size_t nidb;
	struct flush *flushes;
	size_t nflushes;
	uid_t uid;
	uint64_t producers_seen, data_sources_seen, chunks_discarded, patches_discarded;
	struct buf scratch;
	struct trig_global *trig; /* trigger.c, allocated on first use */
	pid_t probes_pid; /* sonded's supervised `sonde probes` (sonde_service__trust_probes) */
	char *machine_name; /* the host's, for machine_name_filter */
	struct svc_machine *machines;
	size_t nmachines;
	/* writers no session owns any more (session.c): still writing out the file of a
	 * freed session (at most SVC_MAX_DRAINING), or cancelled and not ended yet */
	struct svc_retired *retired;
	size_t nretired, retired_cap;
	int file_wake_fd; /* writers' "room again" eventfd (outfile.c), or -1 */
	uint64_t file_wake_cookie;
};

/* bufid.c: global BufferIDs */
/* Registers tb under the next free id after the last one handed out, cyclically over
 * 1..SVC_MAX_BUFFER_ID. 0, -ENOMEM, or -ENOSPC when every id is in use. */
int sonde__bufid_alloc(struct svc *s, struct tbuf *tb, uint16_t *id);
/* The buffer of a BufferID, or NULL: never allocated, freed, or out of range. */
struct tbuf *sonde__bufid_get(const struct svc *s, uint64_t id);
void sonde__bufid_release(struct svc *s, uint16_t id);
/* Buffers that exist, in all sessions. */
size_t sonde__bufid_count(const struct svc *s);
/* Iteration over the buffers that exist: start with *pos = 0; NULL at the end. No buffer
 * may be allocated or released meanwhile. */
struct tbuf *sonde__bufid_next(const struct svc *s, size_t *pos);
void sonde__bufid_free(struct svc *s);

/* host.c */
struct conn *sonde__svc_conn(struct svc *s, uint64_t id);
/* Adds a connected socket as a producer or consumer connection (takes fd, even on
 * failure; NULL then). Its identity is its SO_PEERCRED until the caller overrides it. */
struct conn *sonde__svc_add_conn(struct svc *s, int fd, bool producer);
int sonde__svc_reply(struct req *r, const struct buf *reply, bool has_more);
int sonde__svc_send_reply(struct conn *c, uint64_t req_id, bool success, bool has_more,
		   const uint8_t *data, size_t len, int fd);
void sonde__svc_conn_update_events(struct svc *s, struct conn *c);
void sonde__svc_conn_fail(struct svc *s, struct conn *c);
/* Logs why a listening socket could not be created (one line). */
void sonde__svc_listen_failed(const char *name, int err);
/* After accept4 on listener lfd failed with err: pauses the listener when out of fds. */
void sonde__svc_accept_failed(struct svc *s, int lfd, uint64_t cookie, int err);
char *sonde__svc_strndup(const uint8_t *p, size_t n);

/* producer.c */
int sonde__producer_dispatch(struct svc *s, struct req *r, uint32_t method);
/* The next producer id from the counter *next: never 0, and never one in_use says is
 * taken, so that after 2^32 producers the counter wraps without reusing a live id. 0
 * only when every id is taken. */
uint32_t sonde__producer_id_next(uint32_t *next, bool (*in_use)(void *ctx, uint32_t id), void *ctx);
void sonde__producer_gone(struct svc *s, struct conn *c);
int sonde__producer_send_cmd(struct svc *s, struct conn *c, const struct buf *cmd, bool with_smb_fd);
int sonde__producer_ensure_smb(struct svc *s, struct conn *c, const struct session *ss);
/* The connector's SMB for a producer not yet initialized: maps fd (validated, the
 * producer then owns it) or, with create, creates a sealed memfd of that geometry. */
int sonde__producer_preassign_smb(struct conn *c, int fd, size_t size, size_t page, bool create);
void sonde__producer_allow_buffer(struct conn *c, uint16_t buf_id);
void sonde__producer_disallow_buffer(struct conn *c, uint16_t buf_id);
/* RegisterTraceWriter: binds writer to buf_id under the producer's current permission for
 * it (none if it may not write there: the writer's chunks are then refused, even after a
 * later session gets that id); buf_id 0 unbinds it. */
void sonde__producer_bind_writer(struct conn *c, uint16_t writer, uint16_t buf_id);
void sonde__producer_scrape(struct svc *s, struct conn *c, const struct session *only);

/* security.c: identity, lockdown, limits, file creation, socket permissions */
struct sonde_service_opts;
void sonde__sec_init(struct svc *s, const struct sonde_service_opts *o);
/* SO_PEERPIDFD (Linux 6.5), for headers older than it. */
#define SVC_SO_PEERPIDFD 77
/* Reads SO_PEERCRED into c (uid, pid, gid) and, for a consumer, its capabilities (below).
 * Returns 0 or -errno. */
int sonde__sec_peer_identity(struct conn *c, int fd);
/* The effective capabilities of the process at the other end of socket fd, whose
 * SO_PEERCRED is (pid, uid, gid); *known false when they cannot be read for that process
 * (sonde__perfauth_consumer_caps). */
void sonde__sec_peer_caps(int fd, pid_t pid, uid_t uid, gid_t gid, bool *known, uint64_t *caps,
		   uint64_t *pid_start);
/* Whether one more connection of uid fits the connection limits (logs when not); one on
 * a relay socket counts against the relay sockets' own quota, not uid's. */
bool sonde__sec_admit_conn(const struct svc *s, uid_t uid, bool relay);
/* Whether remote connection c has bound its service and, as a producer, initialized its
 * connection, and on a relay socket vouched for itself: until then it is closed after
 * the handshake timeout. */
bool sonde__sec_handshake_done(const struct conn *c);
/* Creates a listening socket with the configured mode and group of socket `which`
 * (sonde__ipc_listen_perm: -EADDRINUSE if a service already listens there). */
int sonde__sec_listen(const struct sonde_service_opts *o, int which, const char *name,
	       struct ipc_bound *bound);
/* At InitializeConnection: 0 to go on, or -EACCES after refusing the producer (lockdown). */
int sonde__sec_check_producer(struct svc *s, struct req *r);
/* At EnableTracing, before validation: applies TraceConfig.lockdown_mode. An error for
 * the consumer, or NULL. */
const char *sonde__sec_apply_lockdown(struct svc *s, struct conn *c, const uint8_t *cfg, size_t len);
/* Session count and buffer limits; bufs holds (size_kb, discard) pairs. */
const char *sonde__sec_check_session(struct svc *s, const struct session *ss, const uint64_t *bufs,
			      size_t nbufs);
/* Creates output_path for consumer c: O_EXCL|O_NOFOLLOW, mode 0600, with the consumer's
 * file-system identity. Returns the fd or -errno. */
int sonde__sec_create_output(const struct conn *c, const char *path);
/* Validates a shared memory buffer handed to the service: a memfd sealed against shrink,
 * grow and sealing (not against writes), open read-write, whose size is a multiple of
 * page and within the limits. Sets *size. 0 or -EBADF (not a memfd), -EPERM (seals),
 * -EACCES (read-only), -EINVAL (geometry), -EFBIG (over the SMB limit), -ENODEV (it
 * cannot be mapped shared and writable). */
int sonde__sec_check_smb(const struct svc *s, int fd, size_t page, size_t *size);
/* False (and the connection marked dead) when c has more unsent bytes than allowed. */
bool sonde__sec_pending_ok(struct svc *s, struct conn *c, size_t more);

/* connector.c */
int sonde__connector_init(struct svc *s, const struct sonde_service_opts *o);
void sonde__connector_io(struct svc *s, uint64_t cookie, uint32_t events);
bool sonde__connector_owns(const struct svc *s, uint64_t cookie);
const char *sonde__connector_path(const struct svc *s);
void sonde__connector_free(struct svc *s);

/* machine.c: relays, machines, RelayPort */
/* A relay connection's SetPeerIdentity (ignored, with a debug line, from anyone else). */
void sonde__machine_peer_identity(struct svc *s, struct conn *c, const struct ipc_frame *f);
/* RelayPort methods on a relay connection (service id SVC_RELAY_SERVICE_ID). */
int sonde__machine_relay_dispatch(struct svc *s, struct req *r, uint32_t method);
struct svc_machine *sonde__machine_get(struct svc *s, uint32_t id);
/* The machine name of a connection's peer: the host's or the vouching relay's. */
const char *sonde__machine_name_of(struct svc *s, const struct conn *c);
/* The offset (relay clock - host clock, ns) of clock_id estimated from the kept SyncClock
 * exchanges as Perfetto's trace processor does; false when none can be. */
bool sonde__machine_clock_offset(const struct svc_machine *m, uint32_t clock_id, int64_t *off);
void sonde__machine_free_all(struct svc *s);

/* consumer.c */
int sonde__consumer_dispatch(struct svc *s, struct req *r, uint32_t method);
void sonde__consumer_gone(struct svc *s, struct conn *c);
void sonde__consumer_continue_read(struct svc *s, struct conn *c);
void sonde__consumer_put_trace_stats(struct svc *s, struct session *ss, struct buf *b);

/* reconfig.c */
/* ConsumerPort.ChangeTraceConfig. */
int sonde__reconfig_change(struct svc *s, struct req *r);

/* clone.c */
/* ConsumerPort.CloneSession. */
int sonde__clone_session(struct svc *s, struct req *r);
/* A flush completed: a clone waiting for it proceeds. */
void sonde__clone_flush_done(struct svc *s, uint64_t flush_id);
/* A TracingServiceState.tracing_sessions entry for ss, when caller may clone it (HEAD, §8):
 * nothing otherwise. */
void sonde__clone_put_session(const struct conn *caller, const struct session *ss,
			      struct buf *b);
/* CLONE_SNAPSHOT: tells the session's consumer (ObserveEvents CLONE_TRIGGER_HIT). */
void sonde__clone_trigger_hit(struct svc *s, struct session *ss, const char *name,
		       const struct conn *producer, uint64_t now_ns, uint32_t delay_ms);

/* Now, by the service loop's clock: CLOCK_MONOTONIC, unless a test gave the loop another
 * (sonde__service_set_clock). Every timeout, window and rate limit the service decides on
 * is measured on it; timestamps written into traces stay on BOOTTIME. */
static inline uint64_t sonde__svc_now(const struct svc *s)
{
	return sonde__loop_now(&s->loop);
}

/* host.c, for in-process tests: the clock the service's loop runs on (the pending timers
 * keep the time they had left), and a connected socket adopted as a producer or consumer
 * client, as if accepted on its listener. Returns 0 or -errno (fd is taken). */
struct sonde_service;
void sonde__service_set_clock(struct sonde_service *ss, loop_clock_fn now_ns, void *clock_ctx);
int sonde__service_adopt(struct sonde_service *ss, int fd, bool producer);
/* Whether a session's file writer has bytes queued or being written (its thread works in
 * real time: a test waits for it before moving the clock past the stall timeout). */
bool sonde__service_writers_busy(struct sonde_service *ss);

/* svcpkt.c */
uint64_t sonde__svc_boottime_ns(void);
/* A queue of whole packets the service wrote, for the next read pass: each a 4-byte length,
 * then its bytes. Appends b's packet to q (nothing when building b ran out of memory). */
void sonde__svcpkt_queue(struct buf *q, const struct buf *b);
/* Emits q's packets into fn, in order, and empties it. */
void sonde__svcpkt_emit_queue(struct buf *q, tbuf_packet_fn fn, void *ctx);
/* Queues a service event (enum pf_service_event) with the current time. */
void sonde__svcpkt_event(struct svc *s, struct session *ss, uint32_t event_field);
/* A message for the session's consumer, as the probes write theirs: an android_log event
 * (tag, priority 5 warn or 6 error) on the service's sequence, which `sonde trace` prints
 * for tags starting "linux.". */
void sonde__svcpkt_log(struct svc *s, struct session *ss, const char *tag, int prio,
		       const char *msg);
void sonde__svcpkt_clock_snapshot(struct svc *s, struct session *ss);
/* Queues a snapshot only if some clock drifted >= 10 ms against BOOTTIME since the last. */
void sonde__svcpkt_clock_snapshot_if_drifted(struct svc *s, struct session *ss);
/* Emits the packets due at the start of a read pass (§6.3 steps 1-7) into fn. */
void sonde__svcpkt_emit_head(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);
/* The trace stats packet, if due; `final` marks the end of a pass. */
void sonde__svcpkt_emit_tail(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);

#endif
