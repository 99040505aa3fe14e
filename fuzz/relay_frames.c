/* Fuzz target: arbitrary bytes as what a relay peer sends the host on its connection: an
 * IPC byte stream whose frames are decoded; SetPeerIdentity frames and RelayPort calls
 * (InitRelay, SyncClock, by method id; any other id is tried as both) have their
 * arguments decoded. The whole input is also decoded as each RelayPort message, as a
 * peer's args_proto would be. Checked: every decoded string and the raw SystemInfo lie
 * inside the input within their limits; what decodes re-encodes and decodes again to the
 * same values. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/frame.h"
#include "ipc/relay_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t *g_lo, *g_hi;

static void inside(const void *p, size_t n, size_t max)
{
	if (!p)
		return;
	if (n > max || (const uint8_t *)p < g_lo || (const uint8_t *)p + n > g_hi)
		abort();
}

static bool str_eq(struct relay_str a, struct relay_str b)
{
	return (!a.s) == (!b.s) && a.len == b.len && (!a.len || !memcmp(a.s, b.s, a.len));
}

static void check_si(const struct relay_system_info *si)
{
	inside(si->raw, si->raw_len, RELAY_MAX_SYSTEM_INFO);
	inside(si->sysname.s, si->sysname.len, RELAY_MAX_STRING);
	inside(si->version.s, si->version.len, RELAY_MAX_STRING);
	inside(si->release.s, si->release.len, RELAY_MAX_STRING);
	inside(si->machine.s, si->machine.len, RELAY_MAX_STRING);
	inside(si->tracing_service_version.s, si->tracing_service_version.len, RELAY_MAX_STRING);
}

static void init_relay(const uint8_t *p, size_t n)
{
	struct relay_init_req r, again;
	struct buf b = BUF_INIT;

	if (sonde__relay_init_req_decode(p, n, &r) < 0)
		return;
	if (!r.has_system_info)
		return;
	check_si(&r.si);
	if (sonde__relay_init_req_encode(&b, &r.si) < 0)
		abort();
	/* strings of the original must still be addressable while comparing */
	if (sonde__relay_init_req_decode(b.data, b.len, &again) < 0 || !again.has_system_info)
		abort();
	const struct relay_system_info *x = &r.si, *y = &again.si;
	if (!str_eq(x->sysname, y->sysname) || !str_eq(x->version, y->version) ||
	    !str_eq(x->release, y->release) || !str_eq(x->machine, y->machine) ||
	    !str_eq(x->tracing_service_version, y->tracing_service_version) || x->hz != y->hz ||
	    x->page_size != y->page_size || x->num_cpus != y->num_cpus ||
	    x->has_timezone != y->has_timezone ||
	    (x->has_timezone && x->timezone_off_mins != y->timezone_off_mins))
		abort();
	sonde__buf_free(&b);
}

static void sync_clock(const uint8_t *p, size_t n)
{
	struct relay_sync_req r, again;
	struct buf b = BUF_INIT;

	if (sonde__relay_sync_req_decode(p, n, &r) < 0)
		return;
	if (r.n_clocks > RELAY_MAX_CLOCKS ||
	    (r.phase != RELAY_SYNC_PING && r.phase != RELAY_SYNC_UPDATE))
		abort();
	if (sonde__relay_sync_req_encode(&b, &r) < 0 ||
	    sonde__relay_sync_req_decode(b.data, b.len, &again) < 0)
		abort();
	if (again.phase != r.phase || again.n_clocks != r.n_clocks)
		abort();
	for (size_t i = 0; i < r.n_clocks; i++)
		if (again.clocks[i].clock_id != r.clocks[i].clock_id ||
		    again.clocks[i].timestamp != r.clocks[i].timestamp)
			abort();
	sonde__buf_free(&b);
}

static void peer_identity(const struct ipc_frame *f)
{
	struct buf b = BUF_INIT;
	struct ipc_frame g;

	inside(f->machine_id_hint, f->machine_id_hint_len, IPC_MAX_PEER_STRING);
	inside(f->machine_name, f->machine_name_len, IPC_MAX_PEER_STRING);
	if (sonde__ipc_frame_encode(&b, f) < 0 ||
	    sonde__ipc_frame_decode(b.data + IPC_HEADER_SIZE, b.len - IPC_HEADER_SIZE, &g) < 0)
		abort();
	if (g.msg != IPC_MSG_SET_PEER_IDENTITY || g.has_peer_pid != f->has_peer_pid ||
	    g.has_peer_uid != f->has_peer_uid || (f->has_peer_pid && g.peer_pid != f->peer_pid) ||
	    (f->has_peer_uid && g.peer_uid != f->peer_uid) ||
	    (!g.machine_id_hint) != (!f->machine_id_hint) ||
	    g.machine_id_hint_len != f->machine_id_hint_len ||
	    (!g.machine_name) != (!f->machine_name) || g.machine_name_len != f->machine_name_len ||
	    (f->machine_name_len && memcmp(g.machine_name, f->machine_name, f->machine_name_len)))
		abort();
	sonde__buf_free(&b);
}

static void stream(const uint8_t *data, size_t size)
{
	struct ipc_chan c;
	struct ipc_frame f;
	int fd;

	memset(&c, 0, sizeof(c));
	c.fd = -1;
	sonde__buf_append(&c.rx, data, size);
	g_lo = c.rx.data;
	g_hi = c.rx.data ? c.rx.data + c.rx.len : NULL; /* empty input: no buffer */
	while (sonde__ipc_chan_next(&c, &f, &fd) > 0) {
		if (f.msg == IPC_MSG_SET_PEER_IDENTITY) {
			peer_identity(&f);
		} else if (f.msg == IPC_MSG_INVOKE_METHOD && f.data) {
			if (f.method_id != PF_RELAY_SYNC_CLOCK)
				init_relay(f.data, f.data_len);
			if (f.method_id != PF_RELAY_INIT_RELAY)
				sync_clock(f.data, f.data_len);
		} else if (f.msg == IPC_MSG_INVOKE_METHOD_REPLY && f.data &&
			   sonde__relay_resp_decode(f.data, f.data_len) < 0) {
			/* the relay's side: a malformed reply is refused, nothing more */
		}
	}
	sonde__ipc_chan_close(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	g_lo = data;
	g_hi = data + size;
	init_relay(data, size);
	sync_clock(data, size);
	(void)sonde__relay_resp_decode(data, size);
	stream(data, size);
	return 0;
}
