/* sonded's core state, shared by the service's modules. Internal to the service.
 *
 *   host.c      sockets, connections, IPC dispatch, the public API
 *   producer.c  ProducerPort: SMB setup, CommitData, scraping, async commands
 *   session.c   TraceConfig, sessions, data-source instances, flush and stop, file output
 *   consumer.c  ConsumerPort: the methods, ReadBuffers streaming, stats, queries
 *   svcpkt.c    packets the service itself writes (sequence 1)
 *
 * Objects refer to each other by id (connection, session, instance) rather than by
 * pointer wherever one can die before the other; lookups are linear over small arrays.
 */
#ifndef SONDE_SERVICE_INTERNAL_H
#define SONDE_SERVICE_INTERNAL_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/u64map.h"
#include "ipc/frame.h"
#include "ipc/sock.h"
#include "service/loop.h"
#include "service/tbuf.h"

enum {
	SVC_MAX_BUFFER_ID = 65535, /* global BufferIDs are 1..65535 (bufid.c) */
	SVC_MAX_SESSIONS = 15,
	SVC_MAX_SESSIONS_PER_UID = 5,
	SVC_MAX_BUFFERS_PER_SESSION = 128,
	SVC_DEFAULT_TIMEOUT_MS = 5000,
	SVC_READ_PAUSE_BYTES = 4 << 20, /* ReadBuffers waits while this much is unsent */
	SVC_ACCEPT_BATCH = 32,		/* connections accepted per wake-up of a listener */
	SVC_FILE_QUEUE_BYTES = 4 << 20, /* write_into_file: bytes queued to the writer thread */
	SVC_FILE_STALL_MS = 10000,	/* ... and how long they may wait without progress */
	SVC_MAX_DRAINING = 16,		/* writers finishing the files of freed sessions */
	SVC_COOKIE_PRODUCER_LISTENER = 1,
	SVC_COOKIE_CONSUMER_LISTENER = 2,
};

enum ds_state { DS_CONFIGURED, DS_STARTING, DS_STARTED, DS_STOPPING, DS_STOPPED };
enum sess_state { SESS_CONFIGURED, SESS_STARTED, SESS_STOPPING, SESS_DISABLED };

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
	bool cmd_stream;
	uint64_t cmd_req_id;
	struct pending_cmd *pending;
	size_t npending;
	uint16_t writer_buf[SMB_MAX_WRITER_ID + 1]; /* writer -> registered BufferID */
	uint16_t *allowed;			    /* BufferIDs it may write into */
	size_t nallowed, allowed_cap;
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

struct conn {
	uint64_t id;
	uint32_t peer_gid; /* with ch.peer_uid/peer_pid: SO_PEERCRED (security.c) */
	/* the peer's effective capabilities, read at accept (sonde__sec_peer_identity); unknown
	 * counts as none */
	bool caps_known;
	uint64_t cap_eff;
	bool is_producer;
	bool bound;
	bool dead;
	struct ipc_chan ch;
	uint32_t events;
	struct producer p;
	struct consumer k;
};

struct instance {
	uint64_t id;
	uint64_t conn_id;
	char *ds_name;
	uint8_t *cfg; /* DataSourceConfig as sent to the producer */
	size_t cfg_len;
	enum ds_state state;
	bool notify_start, notify_stop, no_flush, handles_incr;
	uint16_t buf_id;
};

struct ds_cfg {
	const uint8_t *raw; /* DataSourceConfig bytes inside session->config */
	size_t raw_len;
	char *name;
	uint32_t target_buffer;
	char **name_filter, **regex_filter;
	size_t n_name_filter, n_regex_filter;
};

struct pb_field;
struct trig_global;

/* One TraceConfig.trigger_config.triggers entry. */
struct trig_def {
	char *name;
	regex_t *rx; /* producer_name_regex, anchored; NULL matches every producer */
	uint32_t stop_delay_ms, max_per_24h;
	double skip_probability;
};

struct trig_cfg {
	bool present; /* the config had a trigger_config */
	uint32_t mode, timeout_ms;
	struct trig_def *defs;
	size_t ndefs;
	uint32_t nreceived; /* triggers recorded so far */
	uint64_t timer;	    /* the trigger timeout, then the stop delay */
	struct buf pkts;    /* Trigger packets not emitted yet: u32 length + bytes each */
};

struct session {
	uint64_t id;
	uint64_t conn_id; /* consumer */
	int32_t consumer_uid;
	enum sess_state state;
	uint8_t *config;
	size_t config_len;
	/* parsed TraceConfig */
	struct ds_cfg *ds;
	size_t nds;
	uint32_t duration_ms, flush_period_ms, flush_timeout_ms, stop_timeout_ms;
	uint32_t file_write_period_ms, snapshot_interval_ms, clear_period_ms;
	uint64_t max_file_size;
	bool deferred_start, write_into_file, extra_guardrails;
	bool no_clock_snapshots, no_trace_config, no_system_info, no_service_events;
	char *unique_name;
	char *detach_key;	 /* set while detached: the session outlives its consumer */
	uint64_t last_clocks[6]; /* the values of the last queued clock snapshot */
	/* buffers */
	uint16_t *buf_ids;
	struct tbuf **bufs;
	size_t nbufs;
	/* instances */
	struct instance *inst;
	size_t ninst, inst_cap;
	uint32_t next_seq_id;
	/* the EnableTracing reply, held until DISABLED */
	uint64_t enable_req;
	bool enable_pending;
	char *error;
	/* timers */
	uint64_t t_duration, t_flush_period, t_file, t_stop, t_snapshot, t_clear;
	/* write_into_file: the file is written by a thread of its own (fwriter.h), fed from
	 * fbuf by sonde__session_drain_file; once DISABLED the EnableTracing reply waits until the
	 * writer has finished (file_done) */
	struct fwriter *fw;
	bool out_created; /* output_path: the service created the file */
	bool file_closing, file_done;
	uint64_t t_pump; /* a drain soon: the writer's queue was full, or the file closes */
	uint64_t file_bytes;
	struct buf fbuf;
	/* service packets */
	struct buf svc_clocks, svc_pkts; /* queued packets: u32 length + bytes each */
	bool obs_all_started_sent;
	bool config_emitted, sysinfo_emitted, sync_due, stats_due, all_started_emitted;
	bool read_completed_emitted, file_full;
	uint64_t invalid_packets;
	uint64_t start_ns;
	struct trig_cfg trig;
	bool read_only; /* a clone (clone.c): never started, stopped or written into */
};

struct flush {
	uint64_t id;
	uint64_t session_id;
	uint64_t *conns; /* producers still to ack */
	size_t nconns;
	uint64_t timer;
	uint64_t consumer_conn, consumer_req; /* 0: not a consumer request */
	bool then_disable;
};

/* Configured limits (security.c; defaults in docs/service.md). */
struct svc_limits {
	uint32_t sessions, sessions_per_uid, conns, conns_per_uid, buffers_per_session;
	uint64_t session_buffer_bytes, uid_buffer_bytes, smb_bytes, pending_bytes;
};

struct svc_connector;

struct svc_retired {
	struct fwriter *fw;
	bool cancelled;
};

struct svc {
	struct loop loop;
	struct svc_limits lim;
	bool lockdown;
	struct svc_connector *cx; /* connector.c; NULL when disabled */
	int lfd[2];		  /* producer, consumer */
	char *path[2];
	struct ipc_bound bound[2]; /* their socket files, unlinked at exit if still ours */
	struct conn **conns;
	size_t nconns;
	uint64_t next_conn_id, next_instance_id, next_session_id, next_flush_id;
	uint32_t next_producer_id;
	uint64_t t_housekeeping;
	uint64_t accept_warn_ns, accept_unreported; /* sonde__svc_accept_failed's rate limit */
	struct ds_reg **ds;
	size_t nds;
	struct session **sessions;
	size_t nsessions;
	struct u64map buf_by_id; /* BufferID -> struct tbuf * (bufid.c) */
	uint16_t last_buf_id;	 /* the last id handed out */
	struct flush *flushes;
	size_t nflushes;
	uid_t uid;
	uint64_t producers_seen, data_sources_seen, chunks_discarded, patches_discarded;
	struct buf scratch;
	struct trig_global *trig; /* trigger.c, allocated on first use */
	struct perfds *perfds;	  /* perfds.c: the linux.perf data source, when started */
	/* writers no session owns any more (session.c): still writing out the file of a
	 * freed session (at most SVC_MAX_DRAINING), or cancelled and not ended yet */
	struct svc_retired *retired;
	size_t nretired, retired_cap;
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
void sonde__producer_scrape(struct svc *s, struct conn *c, const struct session *only);

/* session.c */
struct session *sonde__svc_session(struct svc *s, uint64_t id);
bool sonde__session_owns_buffer(const struct session *ss, uint16_t buf_id);
int sonde__session_enable(struct svc *s, struct req *r, const uint8_t *cfg, size_t len, int fd);
void sonde__session_start(struct svc *s, struct session *ss);
void sonde__session_disable(struct svc *s, struct session *ss, bool immediately);
void sonde__session_free(struct svc *s, struct session *ss);
void sonde__session_setup_for_producer(struct svc *s, struct conn *c, struct ds_reg *d);
void sonde__session_producer_gone(struct svc *s, struct conn *c);
void sonde__session_ds_started(struct svc *s, struct conn *c, uint64_t inst_id);
void sonde__session_ds_stopped(struct svc *s, struct conn *c, uint64_t inst_id);
void sonde__session_remove_ds(struct svc *s, struct conn *c, const char *name);
uint64_t sonde__session_flush(struct svc *s, struct session *ss, uint32_t timeout_ms,
		       uint64_t consumer_conn, uint64_t consumer_req, bool then_disable);
void sonde__session_flush_ack(struct svc *s, struct conn *c, uint64_t flush_id);
void sonde__session_drain_file(struct svc *s, struct session *ss);
/* Stops the retired writers that are done or stalled and frees those whose thread ended;
 * with wait_ms, gives all of them that long in all to finish, then lets them go (shutdown
 * only: it blocks). */
void sonde__session_reap_writers(struct svc *s, int wait_ms);
/* Sends the held EnableTracing reply now if the session already ended. */
void sonde__session_resolve_if_disabled(struct svc *s, struct session *ss);
/* Reads every buffer of the session into fn; 1 if fn asked to stop, else 0. */
int sonde__session_read_buffers(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);
void sonde__session_notify_observer(struct svc *s, struct session *ss, struct instance *in,
			     bool all_started);

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
void sonde__sec_peer_caps(int fd, pid_t pid, uid_t uid, gid_t gid, bool *known, uint64_t *caps);
/* Whether one more connection of uid fits the connection limits (logs when not). */
bool sonde__sec_admit_conn(const struct svc *s, uid_t uid);
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

/* consumer.c */
int sonde__consumer_dispatch(struct svc *s, struct req *r, uint32_t method);
void sonde__consumer_gone(struct svc *s, struct conn *c);
void sonde__consumer_continue_read(struct svc *s, struct conn *c);
void sonde__consumer_put_trace_stats(struct svc *s, struct session *ss, struct buf *b);

/* session.c, for reconfig.c */
/* Parses the data_sources of ss->config into ss->ds. 0, -ENOMEM or a format error. */
int sonde__session_parse_data_sources(struct session *ss);
void sonde__session_free_data_sources(struct session *ss);
bool sonde__session_ds_matches(const struct ds_cfg *d, const struct conn *c, const struct ds_reg *reg);
/* Sets up (and starts, if the session runs) an instance of d on producer c. */
void sonde__session_add_instance(struct svc *s, struct session *ss, const struct ds_cfg *d,
			  struct conn *c, const struct ds_reg *reg);

/* reconfig.c */
/* ConsumerPort.ChangeTraceConfig. */
int sonde__reconfig_change(struct svc *s, struct req *r);

/* trigger.c */
/* Parses TraceConfig.trigger_config into ss->trig; returns an error message or NULL. */
const char *sonde__trigger_parse(struct session *ss, const struct pb_field *trigger_config);
/* The trigger guardrails of §3.3 (after the whole config is parsed); message or NULL. */
const char *sonde__trigger_validate(const struct session *ss);
/* START_TRACING: the session waits for a trigger instead of starting. */
bool sonde__trigger_defers_start(const struct session *ss);
/* The session has triggers and none arrived yet: reads return nothing (§2.7). */
bool sonde__trigger_waiting(const struct session *ss);
/* Arms the trigger timeout of a new session. */
void sonde__trigger_session_enabled(struct svc *s, struct session *ss);
void sonde__trigger_session_free(struct svc *s, struct session *ss);
void sonde__trigger_svc_free(struct svc *s);
/* ProducerPort.ActivateTriggers. */
int sonde__trigger_activate(struct svc *s, struct req *r);
/* Appends to the TraceConfig packet being written what differs from the consumer's bytes:
 * with STOP_TRACING, duration_ms = trigger_timeout_ms (§6.3; last value wins). */
void sonde__trigger_config_fixup(const struct session *ss, struct buf *config);
/* Emits the Trigger packets not emitted yet (§6.3 step 4). */
void sonde__trigger_emit(struct session *ss, tbuf_packet_fn fn, void *ctx);

/* clone.c */
/* ConsumerPort.CloneSession. */
int sonde__clone_session(struct svc *s, struct req *r);
/* A flush completed: a clone waiting for it proceeds. */
void sonde__clone_flush_done(struct svc *s, uint64_t flush_id);
/* TracingServiceState.tracing_sessions: the sessions caller may clone (HEAD, §8). */
void sonde__clone_put_sessions(struct svc *s, const struct conn *caller, struct buf *b);
/* CLONE_SNAPSHOT: tells the session's consumer (ObserveEvents CLONE_TRIGGER_HIT). */
void sonde__clone_trigger_hit(struct svc *s, struct session *ss, const char *name,
		       const struct conn *producer, uint64_t now_ns, uint32_t delay_ms);

/* svcpkt.c */
uint64_t sonde__svc_boottime_ns(void);
/* Queues a service event (enum pf_service_event) with the current time. */
void sonde__svcpkt_event(struct svc *s, struct session *ss, uint32_t event_field);
void sonde__svcpkt_clock_snapshot(struct svc *s, struct session *ss);
/* Queues a snapshot only if some clock drifted >= 10 ms against BOOTTIME since the last. */
void sonde__svcpkt_clock_snapshot_if_drifted(struct svc *s, struct session *ss);
/* Emits the packets due at the start of a read pass (§6.3 steps 1-7) into fn. */
void sonde__svcpkt_emit_head(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);
/* The trace stats packet, if due; `final` marks the end of a pass. */
void sonde__svcpkt_emit_tail(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);

#endif
