/* Tracing sessions (perfetto-wire.md §3.3; session.c): their lifecycle, buffers and
 * data-source instances. The TraceConfig is parsed by tcfg.c, flushes are flush.c's,
 * the output file outfile.c's, triggers trigger.c's. */
#ifndef SONDE_SERVICE_SESSION_H
#define SONDE_SERVICE_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "proc/perfauth.h"
#include "service/tbuf.h"
#include "service/tcfg.h"
#include "service/trigger.h"

struct conn;
struct ds_reg;
struct req;
struct svc;

enum ds_state { DS_CONFIGURED, DS_STARTING, DS_STARTED, DS_STOPPING, DS_STOPPED };
enum sess_state { SESS_CONFIGURED, SESS_STARTED, SESS_STOPPING, SESS_DISABLED };

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

struct session {
	uint64_t id;
	uint64_t conn_id; /* consumer */
	int32_t consumer_uid;
	struct perfauth_consumer consumer; /* its credentials, for the probes (session.c) */
	enum sess_state state;
	uint8_t *config;
	size_t config_len;
	struct trace_cfg cfg;	 /* config parsed (tcfg.h); its ds point into config */
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
	size_t nflushes; /* flushes in progress (flush.c), at most SVC_MAX_PENDING_FLUSHES */
	/* write_into_file: the file is written by a thread of its own (fwriter.h), fed from
	 * fbuf by sonde__session_drain_file; once DISABLED the EnableTracing reply waits until the
	 * writer has finished (file_done) */
	struct fwriter *fw;
	bool out_created; /* output_path: the service created the file */
	bool file_closing, file_done;
	/* the last drain has sealed the buffers (file_sealed) and lent their rings to the
	 * writer, which then writes large slices from them, not from copies (file_refs) */
	bool file_sealed, file_refs;
	uint64_t t_pump; /* a drain soon: the writer's queue was full, or the file closes */
	uint64_t file_bytes;
	struct buf fbuf;
	/* service packets */
	struct buf svc_clocks, svc_pkts; /* queued packets: u32 length + bytes each */
	bool obs_all_started_sent;
	bool config_emitted, sysinfo_emitted, sync_due, stats_due, all_started_emitted;
	/* relayed machines (machine.c): bit id - 1 set once the machine's SystemInfo is in
	 * the trace; the SyncClock count of the machine's last RemoteClockSync written */
	uint64_t machine_sysinfo_done;
	uint64_t machine_sync_gen[SVC_MAX_MACHINES];
	bool read_completed_emitted, file_full;
	uint64_t invalid_packets;
	uint64_t start_ns;
	struct trig_cfg trig;
	bool read_only; /* a clone (clone.c): never started, stopped or written into */
};

/* session.c */
struct session *sonde__svc_session(struct svc *s, uint64_t id);
bool sonde__session_owns_buffer(const struct session *ss, uint16_t buf_id);
int sonde__session_enable(struct svc *s, struct req *r, const uint8_t *cfg, size_t len, int fd);
void sonde__session_start(struct svc *s, struct session *ss);
void sonde__session_disable(struct svc *s, struct session *ss, bool immediately);
void sonde__session_free(struct svc *s, struct session *ss);
void sonde__session_setup_for_producer(struct svc *s, struct conn *c, struct ds_reg *d);
void sonde__session_producer_gone(struct svc *s, struct conn *c);
/* sonded's own probes (producer c, conn.probes_channel) ended: a warning into the trace of
 * each started session with a running instance on c. Called before its instances go. */
void sonde__session_probes_gone(struct svc *s, const struct conn *c);
void sonde__session_ds_started(struct svc *s, struct conn *c, uint64_t inst_id);
void sonde__session_ds_stopped(struct svc *s, struct conn *c, uint64_t inst_id);
void sonde__session_remove_ds(struct svc *s, struct conn *c, const char *name);
/* Scrapes the SMBs of the producers with instances in ss (§2.6). */
void sonde__session_scrape(struct svc *s, struct session *ss);
/* Sends the held EnableTracing reply now if the session already ended. */
void sonde__session_resolve_if_disabled(struct svc *s, struct session *ss);
/* Reads every buffer of the session into fn; 1 if fn asked to stop, else 0. */
int sonde__session_read_buffers(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx);
void sonde__session_notify_observer(struct svc *s, struct session *ss, struct instance *in,
			     bool all_started);
/* The one owner of a session's buffers: creates n of them, each set up by init (a new
 * ring, or a clone's copy), registers each under a global BufferID (bufid.c) and records
 * it in ss. 0 or -ENOMEM; what was added is released by sonde__session_free. */
int sonde__session_add_buffers(struct svc *s, struct session *ss, size_t n,
			int (*init)(struct tbuf *tb, size_t i, void *ctx), void *ctx);

/* session.c, for reconfig.c */
/* Parses the data_sources of ss->config into ss->ds. 0, -ENOMEM or a format error. */
int sonde__session_parse_data_sources(struct session *ss);
void sonde__session_free_data_sources(struct session *ss);
bool sonde__session_ds_matches(struct svc *s, const struct ds_cfg *d, const struct conn *c,
			       const struct ds_reg *reg);
/* Sets up (and starts, if the session runs) an instance of d on producer c. */
void sonde__session_add_instance(struct svc *s, struct session *ss, const struct ds_cfg *d, struct conn *c,
			  const struct ds_reg *reg);

#endif
