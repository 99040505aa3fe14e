/* The relay's RelayPort connection (relay/relay.h): InitRelay and SyncClock, as Perfetto's
 * traced_relay runs them. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "ipc/frame.h"
#include "ipc/relay_proto.h"
#include "ipc/sock.h"
#include "relay/relay.h"
#include "service/loop.h"

enum {
	PORT_RETRY_MIN_MS = 1000,
	PORT_RETRY_MAX_MS = 30000,
	PORT_CONNECT_MS = 5000, /* as the producers' connections (relay.c) */
};

static void port_close(struct relay_port *p)
{
	if (p->open) {
		sonde__loop_del(p->env.loop, p->ch.fd);
		sonde__ipc_chan_close(&p->ch);
	}
	p->open = p->bound = p->connecting = false;
	p->phase = 0;
}

static void arm(struct relay_port *p, uint32_t ms)
{
	if (p->timer)
		sonde__loop_timer_del(p->env.loop, p->timer);
	p->timer = sonde__loop_timer_add(p->env.loop, ms, sonde__relay_port_timer,
					 (uint64_t)(uintptr_t)p);
}

/* The host went away, refused, or broke the protocol: again later. */
static void retry_later(struct relay_port *p)
{
	port_close(p);
	arm(p, p->retry_ms);
	p->retry_ms = p->retry_ms * 2 > PORT_RETRY_MAX_MS ? PORT_RETRY_MAX_MS : p->retry_ms * 2;
}

static void update_events(struct relay_port *p)
{
	if (p->open)
		sonde__loop_mod(p->env.loop, p->ch.fd,
				p->connecting
					? EPOLLOUT
					: EPOLLIN | (ipc_chan_tx_pending(&p->ch) ? EPOLLOUT : 0),
				p->env.cookie);
}

static int call(struct relay_port *p, uint32_t method, const struct buf *args, uint64_t *req)
{
	struct ipc_frame f = {.request_id = ++p->next_req,
			      .msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = p->svc_id,
			      .method_id = method,
			      .data = args->data ? args->data : (const uint8_t *)"",
			      .data_len = args->len};

	if (buf_error(args) < 0)
		return -ENOMEM;
	if (req)
		*req = f.request_id;
	return sonde__ipc_chan_send(&p->ch, &f, -1);
}

static int send_sync(struct relay_port *p, int phase)
{
	struct relay_sync_req r = {.phase = (enum relay_sync_phase)phase};
	struct buf b = BUF_INIT;
	int rc;

	/* the clocks are read last, right before the request is encoded and written */
	r.n_clocks = sonde__relay_clocks_read(r.clocks, RELAY_MAX_CLOCKS);
	rc = sonde__relay_sync_req_encode(&b, &r);
	if (rc == 0)
		rc = call(p, p->m_sync, &b, &p->sync_req);
	sonde__buf_free(&b);
	p->phase = rc == 0 ? phase : 0;
	return rc;
}

static int send_init(struct relay_port *p)
{
	struct relay_system_info si;
	struct utsname uts;
	struct buf b = BUF_INIT;
	int rc;

	sonde__relay_system_info_local(&si, &uts, "sonde-" SONDE_VERSION);
	rc = sonde__relay_init_req_encode(&b, &si);
	if (rc == 0)
		rc = call(p, p->m_init, &b, NULL);
	sonde__buf_free(&b);
	return rc;
}

/* Connected: whom the connection speaks for, then the port. */
static void connected(struct relay_port *p)
{
	struct ipc_frame id = {.msg = IPC_MSG_SET_PEER_IDENTITY,
			       .has_peer_pid = true,
			       .peer_pid = (int32_t)getpid(),
			       .has_peer_uid = true,
			       .peer_uid = (int32_t)geteuid(),
			       .machine_id_hint = p->env.machine_id_hint,
			       .machine_id_hint_len = strlen(p->env.machine_id_hint),
			       .machine_name = p->env.machine_name,
			       .machine_name_len = strlen(p->env.machine_name)};
	struct ipc_frame bind = {.msg = IPC_MSG_BIND_SERVICE,
				 .name = RELAY_SERVICE_NAME,
				 .name_len = strlen(RELAY_SERVICE_NAME)};

	p->connecting = false;
	if (p->timer) /* the connect's deadline */
		sonde__loop_timer_del(p->env.loop, p->timer);
	p->timer = 0;
	bind.request_id = p->bind_req = ++p->next_req;
	if (sonde__ipc_chan_send(&p->ch, &id, -1) < 0 ||
	    sonde__ipc_chan_send(&p->ch, &bind, -1) < 0) {
		retry_later(p);
		return;
	}
	update_events(p);
}

/* Starts the connect; the loop never waits for it: a host that does not answer is given
 * up after PORT_CONNECT_MS (the timer), then tried again later. */
static void connect_host(struct relay_port *p)
{
	size_t pos = 0;
	bool pending;
	int fd = sonde__ipc_connect_start(p->env.host, &pos, SOCK_STREAM, &pending);

	if (fd < 0 || sonde__ipc_chan_init(&p->ch, fd) < 0) {
		if (fd >= 0)
			sonde__ipc_chan_close(&p->ch);
		arm(p, p->retry_ms);
		p->retry_ms =
			p->retry_ms * 2 > PORT_RETRY_MAX_MS ? PORT_RETRY_MAX_MS : p->retry_ms * 2;
		return;
	}
	if (sonde__loop_add(p->env.loop, p->ch.fd, pending ? EPOLLOUT : EPOLLIN, p->env.cookie) <
	    0) {
		sonde__ipc_chan_close(&p->ch);
		arm(p, p->retry_ms);
		return;
	}
	p->open = true;
	p->connecting = pending;
	if (pending)
		arm(p, PORT_CONNECT_MS);
	else
		connected(p);
}

static void on_bound(struct relay_port *p, const struct ipc_frame *f)
{
	p->m_init = sonde__ipc_method_id(f, "InitRelay");
	p->m_sync = sonde__ipc_method_id(f, "SyncClock");
	if (!f->success || !p->m_sync) {
		/* a host without the relay port (Perfetto's traced without
		 * --enable-relay-endpoint): producers are still forwarded, with no clock sync */
		if (!p->refused_said)
			sonde_warn("relay: the host %s offers no RelayPort: no SystemInfo and no "
				   "clock sync for this machine; asking again later",
				   p->env.host);
		p->refused_said = true;
		p->retry_ms = PORT_RETRY_MAX_MS;
		retry_later(p);
		return;
	}
	p->bound = true;
	p->svc_id = f->service_id;
	p->retry_ms = PORT_RETRY_MIN_MS;
	p->refused_said = false;
	sonde_info("relay: RelayPort of %s bound", p->env.host);
	if ((p->m_init && send_init(p) < 0) || send_sync(p, RELAY_SYNC_PING) < 0)
		retry_later(p);
}

static void on_reply(struct relay_port *p, const struct ipc_frame *f)
{
	if (f->request_id != p->sync_req || !p->phase)
		return; /* InitRelay's: nothing in it */
	if (!f->success || sonde__relay_resp_decode(f->data, f->data_len) < 0) {
		retry_later(p);
		return;
	}
	if (p->phase == RELAY_SYNC_PING) {
		if (send_sync(p, RELAY_SYNC_UPDATE) < 0)
			retry_later(p);
		return;
	}
	p->phase = 0;
	p->rounds++;
	arm(p, p->env.sync_interval_ms);
}

void sonde__relay_port_io(struct relay_port *p, uint32_t events)
{
	struct ipc_frame f;
	int rc = 0, n;

	if (!p->open)
		return;
	if (p->connecting) {
		int err = sonde__ipc_connect_finish(p->ch.fd);
		if (err < 0) {
			sonde_debug("relay: RelayPort: cannot reach %s: %s", p->env.host,
				    sonde_strerror(err));
			retry_later(p);
		} else {
			connected(p);
		}
		return;
	}
	if (events & EPOLLOUT && sonde__ipc_chan_flush(&p->ch) < 0) {
		retry_later(p);
		return;
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		rc = sonde__ipc_chan_read(&p->ch);
	while (p->open && (n = sonde__ipc_chan_next(&p->ch, &f, NULL)) > 0) {
		if (f.msg == IPC_MSG_BIND_SERVICE_REPLY && f.request_id == p->bind_req)
			on_bound(p, &f);
		else if (f.msg == IPC_MSG_INVOKE_METHOD_REPLY && p->bound)
			on_reply(p, &f);
		else if (f.msg == IPC_MSG_REQUEST_ERROR)
			on_bound(p, &(struct ipc_frame){.success = false});
	}
	if (p->open && rc < 0) {
		sonde_info("relay: RelayPort connection to %s closed; again in %u ms", p->env.host,
			   p->retry_ms);
		retry_later(p);
	}
	update_events(p);
}

void sonde__relay_port_timer(void *ctx, uint64_t arg)
{
	struct relay_port *p = (struct relay_port *)(uintptr_t)arg;

	p->timer = 0;
	if (!p->open) {
		connect_host(p);
	} else if (p->connecting) {
		sonde_debug("relay: RelayPort: %s does not answer", p->env.host);
		retry_later(p);
		return;
	} else if (p->bound && !p->phase && send_sync(p, RELAY_SYNC_PING) < 0) {
		retry_later(p);
		return;
	}
	update_events(p);
}

void sonde__relay_port_start(struct relay_port *p, const struct relay_port_env *env)
{
	memset(p, 0, sizeof(*p));
	p->env = *env;
	p->ch.fd = -1;
	p->retry_ms = PORT_RETRY_MIN_MS;
	connect_host(p);
}

void sonde__relay_port_stop(struct relay_port *p)
{
	if (p->timer)
		sonde__loop_timer_del(p->env.loop, p->timer);
	p->timer = 0;
	port_close(p);
}
