/* sonded's relay mode (sonde/relay.h, docs/service.md "Relay mode"): the local listener,
 * one pair of channels per local producer (lo: the producer, up: the host), and the
 * frames that concern shared memory rewritten on their way (relay/xlate.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/relay.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/opts.h"
#include "base/pb.h"
#include "ipc/frame.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "relay/relay.h"
#include "service/loop.h"

enum {
	RELAY_DEFAULT_MAX_CONNS = 1000,
	RELAY_MAX_SMB_KB = 32768,
	/* a side whose peer has this much unsent stops being read until it drains */
	RELAY_BACKPRESSURE = 4 * 1024 * 1024,
	/* a producer that is gone still gets its last frames to the host, for this long */
	RELAY_DRAIN_MS = 5000,
	RELAY_ACCEPT_BATCH = 16,
	RELAY_SYNC_INTERVAL_MS = 30000, /* Perfetto's relay's */
	/* a host that does not answer a connect: the producer is closed after that long
	 * (the connect never blocks the loop; a lost SYN is sent again after 1 s and 3 s) */
	RELAY_CONNECT_MS = 5000,
};

/* Request ids of the CommitData requests the relay adds when it splits one: above any a
 * producer uses in practice; their replies (asked not to be sent) are dropped if any
 * come. */
#define RELAY_OWN_ID_BASE (1ull << 56)

struct pair {
	uint64_t id;
	struct ipc_chan lo, up;
	bool lo_open, up_open;
	uint64_t drain_until_ns; /* lo closed: up closes when flushed or then */
	/* the connect to the host in progress (up.fd is its socket, lo is not read): given
	 * up at connect_until_ns; host_pos is the next name of the host list to try */
	bool connecting;
	uint64_t connect_until_ns;
	size_t host_pos;
	/* ProducerPort as the host bound it */
	uint64_t bind_req;
	bool bind_pending;
	uint32_t svc_id, m_init, m_commit, m_cmd;
	uint64_t init_req, cmd_req;
	bool init_pending, cmd_known;
	struct relay_init ri;
	int offered_fd; /* the producer's SMB fd from InitializeConnection, until adopted */
	struct relay_smb smb;
	int smb_fd;
	bool adopted;
	uint64_t next_own_id;
	/* translation of one CommitData in progress */
	const struct ipc_frame *commit;
};

struct sonde_relay {
	struct sonde_relay_opts o;
	struct loop loop;
	int lfd;
	char *sock, *host;
	struct ipc_bound bound;
	struct pair **pairs;
	size_t npairs, cap;
	uint64_t next_id;
	size_t max_smb;
	uid_t uid;
	char machine_id_hint[80];
	char machine_name[256];
	struct buf scratch, out, frame;
	struct relay_port port;
	bool port_started;
};

#define COOKIE_LISTENER 0
#define COOKIE_PORT	1 /* pairs' cookies are id * 2 and id * 2 + 1, ids from 1 */

/* ---------------------------------------------------------------- identity */

/* The boot id, as Perfetto's relay takes it; else a hash of /dev's birth time and uname,
 * as it falls back to (FNV-1a 64). Stable for one boot of one machine. */
static void machine_id_hint(char *out, size_t n)
{
	char buf[80] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (f) {
		if (fgets(buf, sizeof(buf), f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
	if (buf[0]) {
		snprintf(out, n, "%s", buf);
		return;
	}
	struct statx stx;
	struct utsname u;
	uint64_t h = 0xcbf29ce484222325ull;
	memset(&stx, 0, sizeof(stx));
	memset(&u, 0, sizeof(u));
	if (syscall(__NR_statx, -1, "/dev", 0, STATX_BTIME, &stx) < 0 || uname(&u) < 0) {
		out[0] = 0;
		return;
	}
	const uint8_t *p = (const uint8_t *)&stx.stx_btime;
	for (size_t i = 0; i < sizeof(stx.stx_btime); i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	p = (const uint8_t *)&u;
	for (size_t i = 0; i < sizeof(u); i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	snprintf(out, n, "%llx", (unsigned long long)h);
}

/* The name given, else $PERFETTO_MACHINE_NAME, else the kernel's name, as Perfetto's relay
 * (and sonded's own machine name, so that one rule names every machine). */
static void machine_name(char *out, size_t n, const char *given)
{
	const char *env = getenv("PERFETTO_MACHINE_NAME");
	struct utsname u;

	if (given && *given)
		snprintf(out, n, "%s", given);
	else if (env && *env)
		snprintf(out, n, "%s", env);
	else if (uname(&u) == 0)
		snprintf(out, n, "%s", u.sysname);
	else
		snprintf(out, n, "unknown");
}

/* ---------------------------------------------------------------- pairs */

static struct pair *find_pair(struct sonde_relay *r, uint64_t id, size_t *idx)
{
	for (size_t i = 0; i < r->npairs; i++)
		if (r->pairs[i]->id == id) {
			if (idx)
				*idx = i;
			return r->pairs[i];
		}
	return NULL;
}

static void update_events(struct sonde_relay *r, struct pair *p)
{
	if (p->connecting) {
		sonde__loop_mod(&r->loop, p->lo.fd, 0, p->id * 2);
		sonde__loop_mod(&r->loop, p->up.fd, EPOLLOUT, p->id * 2 + 1);
		return;
	}
	if (p->lo_open) {
		uint32_t ev = 0;
		if (!p->up_open || ipc_chan_tx_pending(&p->up) < RELAY_BACKPRESSURE)
			ev |= EPOLLIN;
		if (ipc_chan_tx_pending(&p->lo))
			ev |= EPOLLOUT;
		sonde__loop_mod(&r->loop, p->lo.fd, ev, p->id * 2);
	}
	if (p->up_open) {
		uint32_t ev = 0;
		if (p->lo_open && ipc_chan_tx_pending(&p->lo) < RELAY_BACKPRESSURE)
			ev |= EPOLLIN;
		if (ipc_chan_tx_pending(&p->up))
			ev |= EPOLLOUT;
		sonde__loop_mod(&r->loop, p->up.fd, ev, p->id * 2 + 1);
	}
}

static void free_pair(struct sonde_relay *r, struct pair *p)
{
	size_t i;

	if (p->lo.fd >= 0)
		sonde__loop_del(&r->loop, p->lo.fd);
	if (p->up.fd >= 0)
		sonde__loop_del(&r->loop, p->up.fd);
	sonde__ipc_chan_close(&p->lo);
	sonde__ipc_chan_close(&p->up);
	if (p->offered_fd >= 0)
		close(p->offered_fd);
	if (p->smb.base)
		munmap(p->smb.base, p->smb.size);
	if (p->smb_fd >= 0)
		close(p->smb_fd);
	if (find_pair(r, p->id, &i))
		r->pairs[i] = r->pairs[--r->npairs];
	sonde__free(p);
}

/* Closes a side, also one already marked broken (its *_open cleared by a failed send):
 * the socket goes when fd is -1. */
static void close_lo(struct sonde_relay *r, struct pair *p)
{
	if (p->lo.fd < 0)
		return;
	sonde__loop_del(&r->loop, p->lo.fd);
	sonde__ipc_chan_close(&p->lo);
	p->lo_open = false;
	p->drain_until_ns = sonde__loop_now_ns() + RELAY_DRAIN_MS * 1000000ull;
}

static void close_up(struct sonde_relay *r, struct pair *p)
{
	if (p->up.fd < 0)
		return;
	sonde__loop_del(&r->loop, p->up.fd);
	sonde__ipc_chan_close(&p->up);
	p->up_open = false;
}

/* Sends an encoded frame; a broken side is closed by the caller's next look. */
static void send_frame(struct ipc_chan *c, const struct ipc_frame *f, int fd, bool *open)
{
	if (*open && sonde__ipc_chan_send(c, f, fd) < 0)
		*open = false;
}

/* The frame as it came: header and payload. */
static void send_raw(struct sonde_relay *r, struct ipc_chan *c, const struct ipc_frame *f,
		     bool *open)
{
	uint32_t hdr = (uint32_t)f->raw_len;

	if (!*open)
		return;
	sonde__buf_reset(&r->frame);
	sonde__buf_append(&r->frame, &hdr, sizeof(hdr));
	sonde__buf_append(&r->frame, f->raw, f->raw_len);
	if (buf_error(&r->frame) < 0 ||
	    sonde__ipc_chan_send_raw(c, r->frame.data, r->frame.len, -1) < 0)
		*open = false;
}

/* ---------------------------------------------------------------- producer -> host */

struct emit_ctx {
	struct sonde_relay *r;
	struct pair *p;
	const struct ipc_frame *f;
};

static int emit_commit(void *ctx, const uint8_t *args, size_t len, bool last)
{
	struct emit_ctx *e = ctx;
	struct ipc_frame f = *e->f;

	f.data = args;
	f.data_len = len;
	if (!last) {
		f.request_id = RELAY_OWN_ID_BASE + e->p->next_own_id++;
		f.drop_reply = true;
	}
	send_frame(&e->p->up, &f, -1, &e->p->up_open);
	return e->p->up_open ? 0 : -EPIPE;
}

static void from_producer_invoke(struct sonde_relay *r, struct pair *p, const struct ipc_frame *f,
				 int *fd)
{
	if (!p->svc_id || f->service_id != p->svc_id) {
		send_raw(r, &p->up, f, &p->up_open);
		return;
	}
	if (f->method_id == p->m_commit && p->m_commit) {
		struct emit_ctx e = {r, p, f};
		if (sonde__relay_commit(&p->smb, f->data, f->data_len, &r->scratch, emit_commit,
					&e) == -SONDE_E_FORMAT)
			send_raw(r, &p->up, f, &p->up_open); /* the host answers it as malformed */
		return;
	}
	if (f->method_id == p->m_init && p->m_init && !p->init_pending) {
		struct ipc_frame g = *f;
		sonde__buf_reset(&r->out);
		if (sonde__relay_init_req(f->data, f->data_len, &p->ri, &r->out) < 0) {
			send_raw(r, &p->up, f, &p->up_open);
			return;
		}
		if (p->ri.provided && *fd >= 0 && p->offered_fd < 0) {
			p->offered_fd = *fd;
			*fd = -1;
		}
		p->init_req = f->request_id;
		p->init_pending = true;
		g.data = r->out.data;
		g.data_len = r->out.len;
		send_frame(&p->up, &g, -1, &p->up_open);
		return;
	}
	if (f->method_id == p->m_cmd && p->m_cmd) {
		p->cmd_req = f->request_id;
		p->cmd_known = true;
	}
	send_raw(r, &p->up, f, &p->up_open);
}

static void from_producer(struct sonde_relay *r, struct pair *p, const struct ipc_frame *f, int fd)
{
	switch (f->msg) {
	case IPC_MSG_BIND_SERVICE:
		if (f->name_len == 12 && !memcmp(f->name, "ProducerPort", 12)) {
			p->bind_req = f->request_id;
			p->bind_pending = true;
		}
		send_raw(r, &p->up, f, &p->up_open);
		break;
	case IPC_MSG_INVOKE_METHOD:
		from_producer_invoke(r, p, f, &fd);
		break;
	case IPC_MSG_SET_PEER_IDENTITY:
		/* the host trusts this connection's identity as the relay states it: a local
		 * producer's own claim would be a forgery */
		sonde_debug("relay: producer pid %d claimed an identity: dropped",
			    (int)p->lo.peer_pid);
		break;
	default:
		send_raw(r, &p->up, f, &p->up_open);
		break;
	}
	if (fd >= 0)
		close(fd);
}

/* ---------------------------------------------------------------- host -> producer */

static void adopt_offered(struct sonde_relay *r, struct pair *p)
{
	size_t size;
	int rc;

	if (p->offered_fd < 0)
		return;
	rc = sonde__relay_check_smb(p->offered_fd, p->ri.page_hint, r->max_smb, &size);
	void *m = rc < 0 ? MAP_FAILED
			 : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, p->offered_fd, 0);
	if (m == MAP_FAILED) {
		sonde_info("relay: producer pid %d: its shared memory is refused (%s); the relay "
			   "creates one",
			   (int)p->lo.peer_pid, sonde_strerror(rc < 0 ? rc : -errno));
		close(p->offered_fd);
		p->offered_fd = -1;
		return;
	}
	p->smb = (struct relay_smb){m, size, p->ri.page_hint, size / p->ri.page_hint};
	p->smb_fd = p->offered_fd;
	p->offered_fd = -1;
	p->adopted = true;
	sonde_debug("relay: producer pid %d: its own SMB of %zu KiB, %zu KiB pages",
		    (int)p->lo.peer_pid, size / 1024, p->smb.page_size / 1024);
}

static void init_reply(struct sonde_relay *r, struct pair *p, const struct ipc_frame *f)
{
	struct ipc_frame g = *f;

	p->init_pending = false;
	if (!f->success) {
		send_raw(r, &p->lo, f, &p->lo_open);
		return;
	}
	adopt_offered(r, p);
	sonde__buf_reset(&r->out);
	sonde__relay_init_resp(&r->out, p->adopted);
	g.data = r->out.data ? r->out.data : (const uint8_t *)"";
	g.data_len = r->out.len;
	send_frame(&p->lo, &g, -1, &p->lo_open);
}

static int create_smb(struct sonde_relay *r, struct pair *p, uint32_t host_page_kb)
{
	size_t size, page;
	int fd, rc;

	sonde__relay_smb_geometry(host_page_kb, &p->ri, r->max_smb, &size, &page);
	if ((fd = sonde__smb_create(size)) < 0)
		return fd;
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		close(fd);
		return rc;
	}
	p->smb = (struct relay_smb){m, size, page, size / page};
	p->smb_fd = fd;
	sonde_debug("relay: producer pid %d: an SMB of %zu KiB, %zu KiB pages (host's page %u KiB)",
		    (int)p->lo.peer_pid, size / 1024, page / 1024, host_page_kb);
	return 0;
}

/* A command for the producer: setup_tracing names the relay's SMB, not the host's
 * emulation. */
static void cmd_reply(struct sonde_relay *r, struct pair *p, const struct ipc_frame *f)
{
	struct ipc_frame g = *f;
	uint32_t host_kb, page_kb;
	int rc, fd = -1;

	if (!f->data) {
		send_raw(r, &p->lo, f, &p->lo_open);
		return;
	}
	/* the host's page size is known only from the command itself: a first pass */
	sonde__buf_reset(&r->out);
	rc = sonde__relay_cmd(f->data, f->data_len, 0, &host_kb, &r->out);
	if (rc <= 0) {
		send_raw(r, &p->lo, f, &p->lo_open);
		return;
	}
	if (!p->smb.base && (rc = create_smb(r, p, host_kb)) < 0) {
		sonde_warn("relay: producer pid %d: cannot create its shared memory: %s",
			   (int)p->lo.peer_pid, sonde_strerror(rc));
		p->lo_open = false; /* it cannot trace without: it reconnects */
		return;
	}
	page_kb = p->adopted ? 0 : (uint32_t)(p->smb.page_size / 1024);
	if (!p->adopted)
		fd = p->smb_fd;
	sonde__buf_reset(&r->out);
	sonde__relay_cmd(f->data, f->data_len, page_kb, &host_kb, &r->out);
	g.data = r->out.data;
	g.data_len = r->out.len;
	send_frame(&p->lo, &g, fd, &p->lo_open);
}

static void from_host(struct sonde_relay *r, struct pair *p, const struct ipc_frame *f, int fd)
{
	if (fd >= 0)
		close(fd); /* nothing the host sends over the network carries one */
	if (f->request_id >= RELAY_OWN_ID_BASE && f->msg == IPC_MSG_INVOKE_METHOD_REPLY)
		return;
	if (f->msg == IPC_MSG_BIND_SERVICE_REPLY && p->bind_pending &&
	    f->request_id == p->bind_req) {
		p->bind_pending = false;
		if (f->success) {
			p->svc_id = f->service_id;
			p->m_init = sonde__ipc_method_id(f, "InitializeConnection");
			p->m_commit = sonde__ipc_method_id(f, "CommitData");
			p->m_cmd = sonde__ipc_method_id(f, "GetAsyncCommand");
		}
	} else if (f->msg == IPC_MSG_INVOKE_METHOD_REPLY && p->init_pending &&
		   f->request_id == p->init_req) {
		init_reply(r, p, f);
		return;
	} else if (f->msg == IPC_MSG_INVOKE_METHOD_REPLY && p->cmd_known &&
		   f->request_id == p->cmd_req) {
		cmd_reply(r, p, f);
		return;
	}
	send_raw(r, &p->lo, f, &p->lo_open);
}

/* ---------------------------------------------------------------- io */

static void pump(struct sonde_relay *r, struct pair *p, bool from_lo)
{
	struct ipc_chan *c = from_lo ? &p->lo : &p->up;
	struct ipc_frame f;
	int rc = sonde__ipc_chan_read(c), n, fd;

	while ((n = sonde__ipc_chan_next(c, &f, &fd)) > 0) {
		if (from_lo)
			from_producer(r, p, &f, fd);
		else
			from_host(r, p, &f, fd);
		if (!(from_lo ? p->up_open : p->lo_open))
			break;
	}
	if (rc < 0 || n < 0) {
		if (from_lo) {
			close_lo(r, p);
		} else {
			sonde_debug("relay: host connection of producer pid %d closed: %s",
				    (int)p->lo.peer_pid, sonde_strerror(rc < 0 ? rc : n));
			close_up(r, p);
		}
	}
}

static void settle(struct sonde_relay *r, struct pair *p)
{
	/* a side that failed a send was marked closed: close its socket too */
	if (!p->up_open && p->up.fd >= 0)
		close_up(r, p);
	if (!p->lo_open && p->lo.fd >= 0)
		close_lo(r, p);
	/* the host is gone: the producer gets what was already queued for it, then the
	 * close that makes it reconnect, as after a service restart */
	if (!p->up_open && p->lo_open) {
		sonde__ipc_chan_flush(&p->lo);
		close_lo(r, p);
	}
	if (!p->lo_open && p->up_open &&
	    (sonde__ipc_chan_flush(&p->up) <= 0 || sonde__loop_now_ns() > p->drain_until_ns))
		close_up(r, p);
	if (!p->lo_open && !p->up_open) {
		free_pair(r, p);
		return;
	}
	update_events(r, p);
}

/* The host connection is up: first on it, whom it speaks for; then both sides are read. */
static void up_connected(struct sonde_relay *r, struct pair *p)
{
	struct ipc_frame id = {.msg = IPC_MSG_SET_PEER_IDENTITY};

	p->connecting = false;
	id.has_peer_pid = id.has_peer_uid = true;
	id.peer_pid = (int32_t)p->lo.peer_pid;
	id.peer_uid = (int32_t)p->lo.peer_uid;
	id.machine_id_hint = r->machine_id_hint;
	id.machine_id_hint_len = strlen(r->machine_id_hint);
	id.machine_name = r->machine_name;
	id.machine_name_len = strlen(r->machine_name);
	if (sonde__ipc_chan_send(&p->up, &id, -1) < 0) {
		p->up_open = p->lo_open = false;
		return;
	}
	sonde_debug("relay: producer pid %d uid %d forwarded to %s", (int)p->lo.peer_pid,
		    (int)p->lo.peer_uid, r->host);
}

/* Starts the connect to the host from the list's name at p->host_pos, never waiting for
 * it: a host that answers at once (a Unix socket, loopback) is connected here, one that
 * does not is waited for by the loop (EPOLLOUT) until connect_until_ns. Returns 0 or,
 * when no name of the list is left to try, -errno. */
static int up_connect(struct sonde_relay *r, struct pair *p)
{
	bool pending;
	int fd, rc;

	if (p->up.fd >= 0) {
		sonde__loop_del(&r->loop, p->up.fd);
		sonde__ipc_chan_close(&p->up);
	}
	fd = sonde__ipc_connect_start(r->host, &p->host_pos, SOCK_STREAM, &pending);
	if (fd < 0)
		return fd;
	if ((rc = sonde__ipc_chan_init(&p->up, fd)) < 0 ||
	    (rc = sonde__loop_add(&r->loop, fd, pending ? EPOLLOUT : EPOLLIN, p->id * 2 + 1)) < 0) {
		sonde__ipc_chan_close(&p->up);
		return rc;
	}
	p->up_open = true;
	p->connecting = pending;
	if (!pending)
		up_connected(r, p);
	return 0;
}

/* The pending connect ended (writable) or its time is up (timed_out): connected, or the
 * list's next name, or the producer is closed to retry later, as after a service
 * restart. */
static void up_connect_done(struct sonde_relay *r, struct pair *p, bool timed_out)
{
	int rc = timed_out ? -ETIMEDOUT : sonde__ipc_connect_finish(p->up.fd);

	if (rc == 0) {
		up_connected(r, p);
		return;
	}
	if (!timed_out && up_connect(r, p) == 0)
		return;
	sonde_debug("relay: cannot reach the host %s: %s", r->host, sonde_strerror(rc));
	p->connecting = false;
	p->up_open = p->lo_open = false;
	close_up(r, p);
}

static void accept_one(struct sonde_relay *r, int fd)
{
	struct pair *p;
	int rc;

	if (r->npairs >= r->o.max_connections) {
		sonde_warn("relay: %u local connections: refusing another", r->o.max_connections);
		close(fd);
		return;
	}
	p = sonde__calloc(1, sizeof(*p));
	if (!p) {
		close(fd);
		return;
	}
	p->offered_fd = p->smb_fd = -1;
	p->up.fd = -1;
	if (sonde__ipc_chan_init(&p->lo, fd) < 0 ||
	    (r->o.lockdown && p->lo.peer_uid != r->uid && p->lo.peer_uid != 0)) {
		sonde_info("relay: refused a producer (uid %d)", (int)p->lo.peer_uid);
		sonde__ipc_chan_close(&p->lo);
		sonde__free(p);
		return;
	}
	p->id = r->next_id++;
	/* lo is not read until the host connection is up (its frames wait in the socket);
	 * a hangup is still reported */
	if (sonde__array_grow(&r->pairs, &r->cap, r->npairs + 1, sizeof(*r->pairs), 16) < 0 ||
	    sonde__loop_add(&r->loop, p->lo.fd, 0, p->id * 2) < 0) {
		sonde__ipc_chan_close(&p->lo);
		sonde__free(p);
		return;
	}
	p->lo_open = true;
	r->pairs[r->npairs++] = p;
	p->connect_until_ns = sonde__loop_now_ns() + RELAY_CONNECT_MS * 1000000ull;
	if ((rc = up_connect(r, p)) < 0) {
		sonde_debug("relay: cannot reach the host %s: %s", r->host, sonde_strerror(rc));
		p->lo_open = false;
	}
	settle(r, p);
}

static void on_listener(struct sonde_relay *r)
{
	for (int k = 0; k < RELAY_ACCEPT_BATCH; k++) {
		int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				sonde_warn("relay: accept: %s", strerror(errno));
			return;
		}
		accept_one(r, fd);
	}
}

static void on_io(void *ctx, uint64_t cookie, uint32_t events)
{
	struct sonde_relay *r = ctx;
	struct pair *p;

	if (cookie == COOKIE_LISTENER) {
		on_listener(r);
		return;
	}
	if (cookie == COOKIE_PORT) {
		sonde__relay_port_io(&r->port, events);
		return;
	}
	p = find_pair(r, cookie / 2, NULL);
	if (!p)
		return;
	bool lo = !(cookie & 1);
	struct ipc_chan *c = lo ? &p->lo : &p->up;
	if (!(lo ? p->lo_open : p->up_open))
		return;
	if (p->connecting) {
		if (lo) /* only a hangup is asked for: the producer left before the host answered */
			close_lo(r, p);
		else
			up_connect_done(r, p, false);
		settle(r, p);
		return;
	}
	if (events & EPOLLOUT && sonde__ipc_chan_flush(c) < 0) {
		if (lo)
			p->lo_open = false;
		else
			p->up_open = false;
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		pump(r, p, lo);
	settle(r, p);
}

/* ---------------------------------------------------------------- API */

struct sonde_relay *sonde_relay__new(const struct sonde_relay_opts *opts)
{
	struct sonde_relay *r;
	int rc;

	if (!opts || !OPTS_VALID(opts, sonde_relay_opts) || !OPTS_HAS(opts, host) || !opts->host ||
	    !*opts->host) {
		errno = EINVAL;
		return NULL;
	}
	r = sonde__calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	OPTS_COPY(&r->o, opts);
	r->lfd = -1;
	r->next_id = 1;
	r->uid = geteuid();
	if (!r->o.max_connections)
		r->o.max_connections = RELAY_DEFAULT_MAX_CONNS;
	if (!r->o.sync_interval_ms)
		r->o.sync_interval_ms = RELAY_SYNC_INTERVAL_MS;
	if (!r->o.max_smb_kb || r->o.max_smb_kb > RELAY_MAX_SMB_KB)
		r->o.max_smb_kb = RELAY_MAX_SMB_KB;
	r->max_smb = (size_t)r->o.max_smb_kb * 1024;
	machine_id_hint(r->machine_id_hint, sizeof(r->machine_id_hint));
	machine_name(r->machine_name, sizeof(r->machine_name),
		     OPTS_HAS(&r->o, machine_name) ? r->o.machine_name : NULL);
	const char *name = r->o.producer_socket ? r->o.producer_socket
						: sonde__ipc_default_sock_name(IPC_PORT_PRODUCER);
	r->sock = sonde__strdup(name);
	r->host = sonde__strdup(r->o.host);
	r->o.host = r->o.producer_socket = NULL; /* the caller's strings are not kept */
	if (!r->sock || !r->host) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = sonde__loop_init(&r->loop, on_io, r)) < 0)
		goto fail;
	rc = sonde__ipc_listen_perm(r->sock, SOCK_STREAM,
				    r->o.socket_mode ? r->o.socket_mode : 0666,
				    r->o.socket_gid_set ? (long)r->o.socket_gid : -1, &r->bound);
	if (rc < 0) {
		sonde_error("relay: cannot listen on %s: %s", r->sock, sonde_strerror(rc));
		goto fail;
	}
	r->lfd = rc;
	if ((rc = sonde__loop_add(&r->loop, r->lfd, EPOLLIN, COOKIE_LISTENER)) < 0)
		goto fail;
	sonde_info("relay: machine \"%s\" (id hint %s) to host %s", r->machine_name,
		   r->machine_id_hint[0] ? r->machine_id_hint : "none", r->host);
	struct relay_port_env env = {.loop = &r->loop,
				     .cookie = COOKIE_PORT,
				     .host = r->host,
				     .machine_id_hint = r->machine_id_hint,
				     .machine_name = r->machine_name,
				     .sync_interval_ms = r->o.sync_interval_ms};
	sonde__relay_port_start(&r->port, &env);
	r->port_started = true;
	return r;
fail:
	sonde_relay__free(r);
	errno = rc < -SONDE_E_BASE ? EIO : -rc;
	return NULL;
}

int sonde_relay__fd(const struct sonde_relay *r)
{
	return r->loop.epfd;
}

int sonde_relay__timeout_ms(const struct sonde_relay *r)
{
	int t = sonde__loop_timeout_ms(&r->loop);

	/* a draining pair, or one whose connect is pending, is looked at again when its
	 * time is up */
	for (size_t i = 0; i < r->npairs; i++)
		if (!r->pairs[i]->lo_open || r->pairs[i]->connecting) {
			uint64_t now = sonde__loop_now_ns();
			uint64_t until = r->pairs[i]->connecting ? r->pairs[i]->connect_until_ns
								 : r->pairs[i]->drain_until_ns;
			int ms = until > now ? (int)((until - now) / 1000000) + 1 : 0;
			t = t < 0 || ms < t ? ms : t;
		}
	return t;
}

int sonde_relay__watch_fd(struct sonde_relay *r, int fd)
{
	return sonde__loop_watch(&r->loop, fd);
}

int sonde_relay__poll(struct sonde_relay *r, int timeout_ms)
{
	int t = sonde_relay__timeout_ms(r);

	if (t >= 0 && (timeout_ms < 0 || t < timeout_ms))
		timeout_ms = t;
	int rc = sonde__loop_process(&r->loop, timeout_ms);

	for (size_t i = r->npairs; i-- > 0;) {
		struct pair *p = r->pairs[i];
		if (p->connecting && sonde__loop_now_ns() >= p->connect_until_ns) {
			up_connect_done(r, p, true);
			settle(r, p);
		} else if (!p->lo_open) {
			settle(r, p);
		}
	}
	return rc < 0 ? rc : r->loop.watch_ready;
}

int sonde_relay__process(struct sonde_relay *r)
{
	int rc = sonde_relay__poll(r, 0);

	return rc < 0 ? rc : 0;
}

const char *sonde_relay__socket(const struct sonde_relay *r)
{
	return r->sock;
}

unsigned sonde_relay__connections(const struct sonde_relay *r)
{
	unsigned n = 0;

	for (size_t i = 0; i < r->npairs; i++)
		n += r->pairs[i]->lo_open;
	return n;
}

void sonde_relay__free(struct sonde_relay *r)
{
	if (!r)
		return;
	if (r->port_started)
		sonde__relay_port_stop(&r->port);
	while (r->npairs)
		free_pair(r, r->pairs[r->npairs - 1]);
	sonde__free(r->pairs);
	if (r->lfd >= 0) {
		close(r->lfd);
		sonde__ipc_unlink_bound(r->sock, &r->bound);
	}
	sonde__loop_free(&r->loop);
	sonde__buf_free(&r->scratch);
	sonde__buf_free(&r->out);
	sonde__buf_free(&r->frame);
	sonde__free(r->sock);
	sonde__free(r->host);
	sonde__free(r);
}
