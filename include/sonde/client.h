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
 * protobuf. Knows every TraceConfig field of Perfetto v53 and the typed DataSourceConfigs
 * of the data sources sonde serves (ftrace, process_stats, sys_stats, track_event,
 * perf_event; also chrome, for_testing), enums by name; any other field name is an error
 * (docs/trace.md). On success *out is a malloc'd buffer
 * the caller frees with free() (the replaced free if sonde/alloc.h's allocator is replaced).
 * On failure returns -SONDE_E_FORMAT (or -ENOMEM) and fills *err when err is not NULL. */
SONDE_API int sonde_trace_config__from_text(const char *text, size_t len, uint8_t **out,
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
/* Limits the data sources added after this call to the machines of the names given so far
 * (TraceConfig.DataSource.machine_name_filter; "host" is the service's own machine).
 * Returns 0 or -errno. */
SONDE_API int sonde_trace_config__add_machine_name(struct sonde_trace_config *cfg,
						   const char *machine);
/* Sets the SMB geometry the service should give producer `name` (0: service default). */
SONDE_API int sonde_trace_config__add_producer(struct sonde_trace_config *cfg, const char *name,
					       uint32_t shm_size_kb, uint32_t page_size_kb);
/* Serializes the config: *out is malloc'd (free() it, or the replaced free of sonde/alloc.h).
 * Returns 0 or -ENOMEM. */
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
SONDE_API int sonde_trace_config__summarize(const void *cfg, size_t len,
					   struct sonde_trace_config_summary *out);

/* ------------------------------------------------------------------------------------
 * Trace files: `Trace { repeated TracePacket packet = 1; }`
 * ------------------------------------------------------------------------------------ */

/* Iterates the packets of a trace held in memory. *pos starts at 0. Returns 1 with
 * *pkt and *pkt_len pointing inside buf, 0 at the clean end, or -SONDE_E_TRUNCATED when the
 * buffer ends inside a record, -SONDE_E_FORMAT for bytes that are not a Trace. Fields of
 * Trace other than 1 are skipped. */
SONDE_API int sonde_trace__next_packet(const void *buf, size_t len, size_t *pos, const void **pkt,
				      size_t *pkt_len);

/* ------------------------------------------------------------------------------------
 * Producer
 *
 * Call order:
 *   p = sonde_producer__new(&opts)             connect, bind ProducerPort, initialize
 *   sonde_producer__register_data_source(p, "name", &cbs)
 *   loop: poll(sonde_producer__fd(p)) then sonde_producer__process(p)
 *         (or sonde_producer__poll(p, timeout)); callbacks run inside process
 *   in the start callback: w = sonde_producer__new_writer(p, instance_id)
 *         write packets with w on ONE thread at a time
 *   in the stop callback (or later): sonde_trace_writer__free(w)
 *   sonde_producer__free(p)                    after every writer is freed
 * ------------------------------------------------------------------------------------ */

struct sonde_producer;
struct sonde_trace_writer;

enum sonde_smb_scraping {
	SONDE_SMB_SCRAPING_DEFAULT = 0, /* the service decides */
	SONDE_SMB_SCRAPING_ENABLED = 1,
	SONDE_SMB_SCRAPING_DISABLED = 2,
};

struct sonde_producer_opts {
	size_t sz;		     /* sizeof(struct sonde_producer_opts) */
	const char *name;	     /* producer_name (required) */
	/* NULL: the inherited socket named by $SONDE_PRODUCER_FD (set by `sonde run --trace`),
	 * else $PERFETTO_PRODUCER_SOCK_NAME, else the default path. "fd:N" names an inherited
	 * connected socket explicitly; it is taken once (EBUSY after). */
	const char *socket;
	uint32_t smb_size_hint;	     /* bytes; 0: the service's default */
	uint32_t smb_page_size_hint; /* bytes, multiple of 4096; 0: the service's default */
	/* Create the SMB here (a sealed memfd of the hinted geometry, 256 KiB / 4 KiB by
	 * default) and offer it at InitializeConnection; used if the service adopts it. */
	bool producer_provided_smb;
	enum sonde_smb_scraping smb_scraping;
	/* How long a writer waits for a free chunk before dropping packets: 0 drops at once,
	 * UINT32_MAX waits as long as the connection lives. Default (0 here): 10 ms. */
	uint32_t stall_ms;
	bool stall_ms_set; /* use stall_ms even when it is 0 */
	int timeout_ms;	   /* for the connection handshake; 0: 5000 */	/* The service's uid must be root or the caller's effective uid (anyone can bind a
	 * socket path while no service runs there): also trust this uid when trust_uid_set,
	 * or $SONDE_TRUST_UID when not. An untrusted service is left before anything is sent:
	 * NULL with errno EPERM. Inherited "fd:N" sockets are not checked. */
	bool trust_uid_set;
	uint32_t trust_uid;
	/* Not NULL: receives the untrusted service's uid on EPERM, and the caller reports the
	 * refusal; NULL: the library logs it as a warning. */
	uint32_t *untrusted_uid;
	/* When the connection is lost (the service restarts), stop every instance (their
	 * stop callbacks run), then connect again as the Perfetto SDK does: once the last
	 * writer is freed, after 100 ms, doubling up to 5 s between attempts, registering
	 * every data source again. sonde_producer__process then returns 0 instead of
	 * -ECONNRESET; sonde_producer__fd is -1 while disconnected (fetch it before each
	 * poll), and sonde_producer__timeout_ms says when to call process next. Not for an
	 * inherited "fd:N" socket. */
	bool reconnect;
};

/* Data source callbacks, all optional, run on the thread calling sonde_producer__process
 * (the loop thread). config/config_len is the DataSourceConfig as the service sent it
 * (valid during the call). After `flush` returns, the producer commits the instance's
 * writers that were created on the loop thread and are between packets, then acks the
 * flush. Writers created on other threads are never touched by the producer: their thread
 * flushes them (sonde_trace_writer__flush), and the service scrapes what they hold when
 * SMB scraping is enabled. After `stop` returns, the same loop-thread writers are flushed
 * and, if will_notify_on_stop, the stop is acknowledged. */
struct sonde_data_source_cbs {
	size_t sz; /* sizeof(struct sonde_data_source_cbs) */
	void (*setup)(void *ctx, uint64_t instance_id, const void *config, size_t config_len);
	void (*start)(void *ctx, uint64_t instance_id, const void *config, size_t config_len);
	void (*stop)(void *ctx, uint64_t instance_id);
	void (*flush)(void *ctx, uint64_t instance_id);
	void (*clear_incremental_state)(void *ctx, uint64_t instance_id);
	void *ctx;
	bool will_notify_on_start;
	bool will_notify_on_stop;
	bool handles_incremental_state_clear;
};

/* Connects to the service, binds ProducerPort and sends InitializeConnection. Blocks only
 * for the BindService round trip (opts->timeout_ms). Returns NULL with errno set:
 * ECONNREFUSED or ENOENT when no service listens at the socket (see
 * sonde_producer__socket_path for the name tried), EPERM when the service's uid is not
 * trusted (opts->trust_uid), EINVAL for a bad $SONDE_TRUST_UID. */
SONDE_API struct sonde_producer *sonde_producer__new(const struct sonde_producer_opts *opts);
/* Disconnects and unmaps the SMB. Every writer must have been freed. NULL is fine. */
SONDE_API void sonde_producer__free(struct sonde_producer *p);
/* The socket path a producer with these opts connects to (static storage of the call;
 * copy it). */
SONDE_API const char *sonde_producer__socket_path(const struct sonde_producer_opts *opts);
/* The connection's fd: poll it for POLLIN (and POLLOUT while sonde_producer__want_write).
 * -1 while reconnecting (opts.reconnect). */
SONDE_API int sonde_producer__fd(const struct sonde_producer *p);
/* Milliseconds until the next reconnection attempt is due (0: now), or -1 when connected.
 * sonde_producer__poll waits for it by itself. */
SONDE_API int sonde_producer__timeout_ms(const struct sonde_producer *p);
SONDE_API bool sonde_producer__want_write(struct sonde_producer *p);
/* Reads and dispatches everything available without blocking, commits batched chunks and
 * writes queued bytes. Returns 0, or -ECONNRESET once the service has gone away (writers
 * then drop their packets), or another -errno. */
SONDE_API int sonde_producer__process(struct sonde_producer *p);
/* Waits up to timeout_ms (-1: forever) for input, then processes. Same returns. */
SONDE_API int sonde_producer__poll(struct sonde_producer *p, int timeout_ms);
/* Registers a data source (copied). Returns 0 or -errno. */
SONDE_API int sonde_producer__register_data_source(struct sonde_producer *p, const char *name,
						   const struct sonde_data_source_cbs *cbs);
/* True once the service has acknowledged InitializeConnection. */
SONDE_API bool sonde_producer__connected(const struct sonde_producer *p);
/* True once the SMB is mapped (setup_tracing received, or our own SMB adopted). */
SONDE_API bool sonde_producer__has_smb(const struct sonde_producer *p);
/* Whether the service adopted the SMB this producer provided (opts.producer_provided_smb),
 * known once sonde_producer__connected. */
SONDE_API bool sonde_producer__smb_adopted(const struct sonde_producer *p);
/* Sends ActivateTriggers for the n names. Returns 0 or -errno. */
SONDE_API int sonde_producer__activate_triggers(struct sonde_producer *p, const char *const *names,
						size_t n);
/* Commits every returned chunk now. Returns 0 or -errno. */
SONDE_API int sonde_producer__commit(struct sonde_producer *p);

/* A trace writer for a started data source instance, writing into the instance's target
 * buffer (one sequence in the trace). It belongs to the calling thread (any thread may
 * call this); use it on that thread only. Free it with sonde_trace_writer__free before
 * the producer. NULL with errno (ENOENT: unknown instance, EMFILE: 1023 writers). */
SONDE_API struct sonde_trace_writer *sonde_producer__new_writer(struct sonde_producer *p,
								uint64_t instance_id);
/* Returns the writer's chunk, commits, unregisters the writer. NULL is fine. */
SONDE_API void sonde_trace_writer__free(struct sonde_trace_writer *w);

/* Packet writing. A packet is begin_packet, any number of appends and nested messages,
 * end_packet; packets may be larger than a chunk (they are fragmented). Nothing is
 * allocated per packet. begin_packet returns 0, or -SONDE_E_LIMIT when the packet will be
 * dropped (no free chunk in time, or no SMB yet); writing it anyway is harmless. */
SONDE_API int sonde_trace_writer__begin_packet(struct sonde_trace_writer *w);
SONDE_API void sonde_trace_writer__append(struct sonde_trace_writer *w, const void *data,
					  size_t len);
/* Appends a varint field / a length-delimited field of the packet (or nested message). */
SONDE_API void sonde_trace_writer__append_varint(struct sonde_trace_writer *w, uint32_t field,
						 uint64_t v);
SONDE_API void sonde_trace_writer__append_bytes(struct sonde_trace_writer *w, uint32_t field,
						const void *data, size_t len);
/* Opens a nested message field (up to 32 deep); its length is filled in by end_nested,
 * by patching if the message outgrew its chunk. Returns 0 or -SONDE_E_STATE/-LIMIT. */
SONDE_API int sonde_trace_writer__begin_nested(struct sonde_trace_writer *w, uint32_t field);
SONDE_API int sonde_trace_writer__end_nested(struct sonde_trace_writer *w);
/* Closes the packet (and any nested message left open). */
SONDE_API void sonde_trace_writer__end_packet(struct sonde_trace_writer *w);
/* begin + append + end for an already serialized packet. */
SONDE_API int sonde_trace_writer__write_packet(struct sonde_trace_writer *w, const void *pkt,
					       size_t len);
/* Returns the current chunk and commits: what was written becomes readable. Call between
 * packets, on the writer's thread. */
SONDE_API void sonde_trace_writer__flush(struct sonde_trace_writer *w);
/* Packets dropped so far because no chunk was available. */
SONDE_API uint64_t sonde_trace_writer__packets_lost(const struct sonde_trace_writer *w);

/* ------------------------------------------------------------------------------------
 * Consumer
 *
 * Event-driven use: set callbacks, start calls (they return once the request is sent),
 * poll sonde_consumer__fd and call sonde_consumer__process; completions arrive as
 * callbacks from inside process. The *_sync helpers wrap the same calls in a private
 * poll loop for programs without one.
 *
 * A session: enable_tracing (with an output fd for write_into_file configs without
 * output_path) -> [start_tracing if deferred_start] -> ... -> disable_tracing or the
 * duration expires -> on_disabled -> read_buffers (unless write_into_file) -> free or
 * disconnect.
 * ------------------------------------------------------------------------------------ */

struct sonde_consumer;

struct sonde_consumer_opts {
	size_t sz;	    /* sizeof(struct sonde_consumer_opts) */
	/* NULL: $SONDE_CONSUMER_FD ("fd:N", an inherited socket), else
	 * $PERFETTO_CONSUMER_SOCK_NAME, else the default path */
	const char *socket;
	int timeout_ms;	    /* for the connection handshake; 0: 5000 */	/* The service's uid must be root or the caller's effective uid (anyone can bind a
	 * socket path while no service runs there): also trust this uid when trust_uid_set,
	 * or $SONDE_TRUST_UID when not. An untrusted service is left before anything is sent:
	 * NULL with errno EPERM. Inherited "fd:N" sockets are not checked. */
	bool trust_uid_set;
	uint32_t trust_uid;
	/* Not NULL: receives the untrusted service's uid on EPERM, and the caller reports the
	 * refusal; NULL: the library logs it as a warning. */
	uint32_t *untrusted_uid;
};

struct sonde_consumer_cbs {
	size_t sz; /* sizeof(struct sonde_consumer_cbs) */
	/* The session ended (EnableTracing's deferred reply). error is NULL for a normal end,
	 * else the service's reason; valid during the call. */
	void (*on_disabled)(void *ctx, const char *error);
	/* One reassembled TracePacket from ReadBuffers; valid during the call. */
	void (*on_packet)(void *ctx, const void *pkt, size_t len);
	void *ctx;
};

/* Completion of a request: status 0, -ETIMEDOUT for a flush that timed out, -ECONNRESET
 * when the connection dropped, -SONDE_E_PROTOCOL for a service-side failure. */
typedef void (*sonde_consumer_done_fn)(void *ctx, int status);

enum { SONDE_MAX_STATS_BUFFERS = 32 };

struct sonde_buffer_stats {
	uint64_t buffer_size, bytes_written, bytes_overwritten, bytes_read;
	uint64_t padding_bytes_written, padding_bytes_cleared;
	uint64_t chunks_written, chunks_rewritten, chunks_overwritten, chunks_discarded;
	uint64_t chunks_read, chunks_committed_out_of_order, write_wrap_count;
	uint64_t patches_succeeded, patches_failed, readaheads_succeeded, readaheads_failed;
	uint64_t abi_violations, trace_writer_packet_loss;
};

struct sonde_trace_stats {
	uint32_t n_buffers; /* all buffers; the first SONDE_MAX_STATS_BUFFERS are detailed */
	struct sonde_buffer_stats buffers[SONDE_MAX_STATS_BUFFERS];
	uint64_t producers_connected, producers_seen, data_sources_registered, data_sources_seen;
	uint64_t tracing_sessions, total_buffers, chunks_discarded, patches_discarded;
	uint64_t invalid_packets;
};

struct sonde_service_producer {
	/* uid and pid -1 when the service does not know them: a producer connected over
	 * TCP or vsock, which no relay vouched for */
	int32_t id, uid, pid;
	char name[128];
	char sdk_version[64];
	/* the machine it is on, through a relay (0 and "": the service's own) */
	uint32_t machine_id;
	char machine_name[64];
};

struct sonde_service_data_source {
	int32_t producer_id;
	char name[128];
	bool will_notify_on_start, will_notify_on_stop, handles_incremental_state_clear;
};

struct sonde_service_session {
	uint64_t id;
	int32_t consumer_uid;
	char state[32];
	char unique_session_name[128];
	uint64_t buffer_size_kb; /* summed over buffers */
	uint32_t duration_ms, num_data_sources;
	bool is_started;
};

/* QueryServiceState's answer. Free with sonde_service_state__free. */
struct sonde_service_state {
	size_t n_producers, n_data_sources, n_sessions;
	struct sonde_service_producer *producers;
	struct sonde_service_data_source *data_sources;
	struct sonde_service_session *sessions;
	int32_t num_sessions, num_sessions_started;
	char version[128];
};

/* CloneSession's answer. */
struct sonde_clone_result {
	bool success;		  /* false: error says why */
	bool was_write_into_file; /* the source writes into a file */
	int64_t uuid_msb, uuid_lsb; /* the clone's trace uuid */
	char error[256];
};

typedef void (*sonde_consumer_clone_fn)(void *ctx, int status,
					const struct sonde_clone_result *res);
typedef void (*sonde_consumer_stats_fn)(void *ctx, int status,
					const struct sonde_trace_stats *stats);
typedef void (*sonde_consumer_state_fn)(void *ctx, int status,
					const struct sonde_service_state *state);

/* Connects and binds ConsumerPort (blocking for that round trip). NULL with errno set:
 * ECONNREFUSED or ENOENT when no service listens (see sonde_consumer__socket_path), EPERM
 * when the service's uid is not trusted (opts->trust_uid), EINVAL for a bad
 * $SONDE_TRUST_UID. */
SONDE_API struct sonde_consumer *sonde_consumer__new(const struct sonde_consumer_opts *opts);
/* Disconnects: the service frees the session unless it was detached. NULL is fine. */
SONDE_API void sonde_consumer__free(struct sonde_consumer *c);
/* The socket path a consumer with these opts connects to (thread-local storage; copy it). */
SONDE_API const char *sonde_consumer__socket_path(const struct sonde_consumer_opts *opts);
SONDE_API int sonde_consumer__fd(const struct sonde_consumer *c);
SONDE_API bool sonde_consumer__want_write(struct sonde_consumer *c);
/* Callbacks (copied); may be changed at any time. Returns 0, or -EINVAL for a cbs struct
 * this library cannot take (see "Options structs" in docs/abi.md). */
SONDE_API int sonde_consumer__set_callbacks(struct sonde_consumer *c,
					    const struct sonde_consumer_cbs *cbs);
/* Reads and dispatches what is available, without blocking. Returns 0, -ECONNRESET once the
 * service closed the connection (pending requests complete with -ECONNRESET), or -errno. */
SONDE_API int sonde_consumer__process(struct sonde_consumer *c);

/* Creates the session. output_fd >= 0 is sent along (not taken) for write_into_file
 * configs without output_path. Completion: on_disabled when the session ends. */
SONDE_API int sonde_consumer__enable_tracing(struct sonde_consumer *c, const void *cfg,
					     size_t cfg_len, int output_fd);
/* Starts a deferred_start session. */
SONDE_API int sonde_consumer__start_tracing(struct sonde_consumer *c);
/* Asks the service to stop the session (it flushes, stops data sources, then on_disabled). */
SONDE_API int sonde_consumer__disable_tracing(struct sonde_consumer *c);
/* Drains the session's buffers: packets go to on_packet, then done(ctx, status). */
SONDE_API int sonde_consumer__read_buffers(struct sonde_consumer *c, sonde_consumer_done_fn done,
					   void *ctx);
/* Flushes every data source of the session (timeout_ms 0: the service's default). */
SONDE_API int sonde_consumer__flush(struct sonde_consumer *c, uint32_t timeout_ms,
				    sonde_consumer_done_fn done, void *ctx);
/* Destroys the session and its buffers. */
SONDE_API int sonde_consumer__free_buffers(struct sonde_consumer *c);
SONDE_API int sonde_consumer__get_trace_stats(struct sonde_consumer *c, sonde_consumer_stats_fn fn,
					      void *ctx);
SONDE_API int sonde_consumer__query_service_state(struct sonde_consumer *c,
						  sonde_consumer_state_fn fn, void *ctx);
SONDE_API void sonde_service_state__free(struct sonde_service_state *s);
/* CloneSession (HEAD services): the service flushes session `session_id` (or, when it is 0,
 * the session named unique_session_name), copies its buffers into a new read-only session
 * bound to this consumer, and answers; then read the copy with read_buffers. Allowed for
 * root and for the source's consumer uid; this consumer must have no session. fn gets
 * status 0 and res (valid during the call) when the service answered, res->success telling
 * whether it cloned; -SONDE_E_UNSUPPORTED is returned at once by a service without
 * CloneSession. */
SONDE_API int sonde_consumer__clone_session(struct sonde_consumer *c, uint64_t session_id,
					    const char *unique_session_name,
					    sonde_consumer_clone_fn fn, void *ctx);

/* Blocking helpers: each runs the consumer's own poll loop until its reply arrives or
 * timeout_ms passes (-ETIMEDOUT). Other completions are dispatched meanwhile. */
/* Waits for the session to end. error (may be NULL) receives the service's reason ("" for
 * a normal end). Returns 0 or -errno. */
SONDE_API int sonde_consumer__wait_disabled(struct sonde_consumer *c, int timeout_ms, char *error,
					    size_t error_len);
/* True once on_disabled has happened for the current session. */
SONDE_API bool sonde_consumer__disabled(const struct sonde_consumer *c);
SONDE_API int sonde_consumer__read_buffers_sync(struct sonde_consumer *c, int timeout_ms);
SONDE_API int sonde_consumer__flush_sync(struct sonde_consumer *c, uint32_t flush_timeout_ms,
					 int timeout_ms);
SONDE_API int sonde_consumer__get_trace_stats_sync(struct sonde_consumer *c,
						   struct sonde_trace_stats *out, int timeout_ms);
/* Returns 0 with *out filled in (out->success says whether it cloned), or -errno. */
SONDE_API int sonde_consumer__clone_session_sync(struct sonde_consumer *c, uint64_t session_id,
						 const char *unique_session_name,
						 struct sonde_clone_result *out, int timeout_ms);
/* *out is allocated; free it with sonde_service_state__free. */
SONDE_API int sonde_consumer__query_service_state_sync(struct sonde_consumer *c,
						       struct sonde_service_state **out,
						       int timeout_ms);
/* Decoders of the replies, for untrusted bytes (also used by the calls above). */
SONDE_API int sonde_trace_stats__decode(const void *buf, size_t len, struct sonde_trace_stats *out);
SONDE_API int sonde_service_state__decode(const void *buf, size_t len,
					 struct sonde_service_state **out);

#ifdef __cplusplus
}
#endif

#endif
