/* The relay's translation of a local producer's shared memory into emulated chunks, and of
 * the host's answers into those of a service with shared memory (docs/service.md "Relay
 * mode"). Internal to libsonde. Every function here parses bytes from an untrusted side:
 * args and replies come from a local producer or from the host, and the SMB is shared
 * with the producer, which may rewrite it at any moment. */
#ifndef SONDE_RELAY_RELAY_H
#define SONDE_RELAY_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "ipc/frame.h"

/* CommitData requests the relay builds stay under this many bytes of arguments, so that
 * one more chunk of the largest page (32 KiB) still fits IPC_MAX_PAYLOAD. */
enum { RELAY_COMMIT_SOFT_MAX = 64 * 1024 };

/* A producer's SMB as the relay maps it (base NULL: none yet). */
struct relay_smb {
	uint8_t *base;
	size_t size, page_size, num_pages;
};

/* What the relay keeps of a producer's InitializeConnectionRequest. */
struct relay_init {
	uint32_t page_hint, size_hint;
	bool provided; /* producer_provided_shmem */
};

/* Called with each CommitDataRequest built; last is set for the one that ends the
 * producer's request (it carries the flush_request_id). Returns 0 or -errno, which stops
 * the translation. */
typedef int (*relay_emit_fn)(void *ctx, const uint8_t *args, size_t len, bool last);

/* Translates a producer's CommitDataRequest: every chunk moved out of the SMB is taken
 * from it (Complete -> BeingRead -> Free) and sent inline (ChunksToMove.data, header
 * included); chunks already inline and chunks_to_patch go unchanged, in order. What does
 * not fit one request goes in several (scratch holds the one being built). A chunk that
 * is not Complete, or outside the SMB, is left out, as the service would. Returns 0,
 * -SONDE_E_FORMAT on malformed arguments (nothing was emitted then), or emit's error. */
int sonde__relay_commit(const struct relay_smb *smb, const uint8_t *args, size_t len,
			struct buf *scratch, relay_emit_fn emit, void *ctx);

/* Reads the hints of an InitializeConnectionRequest into *ri and writes into out the same
 * request without producer_provided_shmem (the host gets no fd). 0 or -SONDE_E_FORMAT. */
int sonde__relay_init_req(const uint8_t *args, size_t len, struct relay_init *ri, struct buf *out);

/* The InitializeConnectionResponse the local producer gets: shared memory (its own when
 * adopted), no emulation. */
void sonde__relay_init_resp(struct buf *out, bool adopted);

/* A GetAsyncCommandResponse from the host: when it holds setup_tracing, writes into out
 * the same response with setup_tracing rewritten for the relay's SMB (page_kb when the
 * relay created it, nothing when it adopted the producer's), *host_page_kb receiving the
 * host's page size (0: none), and returns 1. Returns 0 for any other command (out is then
 * untouched), -SONDE_E_FORMAT on malformed bytes. */
int sonde__relay_cmd(const uint8_t *data, size_t len, uint32_t page_kb, uint32_t *host_page_kb,
		     struct buf *out);

/* The SMB geometry the relay creates for a producer: the host's page size when it is a
 * valid service page, else the producer's hint, else 4 KiB; the producer's size hint (or
 * 256 KiB) capped at max_bytes, rounded to pages. */
void sonde__relay_smb_geometry(uint32_t host_page_kb, const struct relay_init *ri, size_t max_bytes,
			       size_t *size, size_t *page);

/* Whether fd, offered by a producer as its SMB for page size page, is one the relay may
 * map: a memfd sealed against shrink, grow and sealing, writable, of a valid geometry no
 * larger than max_bytes. Returns 0 with *size set, or -errno. */
int sonde__relay_check_smb(int fd, size_t page, size_t max_bytes, size_t *size);

#endif

/* ---- the relay's own connection to the host: RelayPort (relay/port.c) ---- */

struct loop;

/* What the connection needs of the relay; the strings outlive it. */
struct relay_port_env {
	struct loop *loop;
	uint64_t cookie; /* of the channel's registration in loop */
	const char *host, *machine_id_hint, *machine_name;
	uint32_t sync_interval_ms; /* between two SyncClock rounds */
};

/* One RelayPort connection, kept up: SetPeerIdentity, BindService("RelayPort"),
 * InitRelay with this machine's SystemInfo, then SyncClock rounds (PING, UPDATE) every
 * sync_interval_ms, each carrying this machine's clocks as Perfetto's relay reads them.
 * When the host goes away (or refuses), it is connected again after a delay that doubles
 * from 1 s to 30 s and starts over once a connection was up. */
struct relay_port {
	struct relay_port_env env;
	struct ipc_chan ch;
	bool open, bound;
	bool connecting; /* the connect is in progress (open, the fd waits for EPOLLOUT) */
	uint32_t svc_id, m_init, m_sync;
	uint64_t next_req, bind_req, sync_req;
	int phase; /* enum relay_sync_phase of the request in flight, 0: none */
	uint64_t timer;
	uint32_t retry_ms;
	uint64_t rounds; /* SyncClock rounds completed (PING and UPDATE answered) */
	bool refused_said;
};

void sonde__relay_port_start(struct relay_port *p, const struct relay_port_env *env);
/* The channel's events, from the loop. */
void sonde__relay_port_io(struct relay_port *p, uint32_t events);
/* A timer set by the port is due (its arg: the port). */
void sonde__relay_port_timer(void *ctx, uint64_t arg);
void sonde__relay_port_stop(struct relay_port *p);
