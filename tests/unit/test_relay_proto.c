/* The RelayPort codec (relay_port.proto) and SetPeerIdentity's machine fields: both
 * directions, the bytes Perfetto's relay sends, and what a hostile peer's are refused
 * for. */
#include <sys/utsname.h>

#include "../test.h"
#include "ipc/frame.h"
#include "ipc/protos.h"
#include "ipc/relay_proto.h"

TEST(relay_peer_identity_roundtrip_and_absent_uid)
{
	struct ipc_frame f = {.msg = IPC_MSG_SET_PEER_IDENTITY}, g;
	struct buf b = BUF_INIT;

	f.has_peer_pid = f.has_peer_uid = true;
	f.peer_pid = 4321;
	f.peer_uid = -1; /* int32 on the wire: a relay may forward "no uid" as -1 */
	f.machine_id_hint = "boot-id-1";
	f.machine_id_hint_len = 9;
	f.machine_name = "guest";
	f.machine_name_len = 5;
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_OK(sonde__ipc_frame_decode(b.data + 4, b.len - 4, &g));
	ASSERT_UINT(g.msg, ==, IPC_MSG_SET_PEER_IDENTITY);
	ASSERT(g.has_peer_pid && g.has_peer_uid);
	ASSERT_INT(g.peer_pid, ==, 4321);
	ASSERT_INT(g.peer_uid, ==, -1);
	ASSERT_UINT(g.machine_id_hint_len, ==, 9);
	ASSERT_MEM_EQ(g.machine_id_hint, "boot-id-1", 9);
	ASSERT_UINT(g.machine_name_len, ==, 5);
	ASSERT_MEM_EQ(g.machine_name, "guest", 5);

	/* {8: {1: 7}}: a pid and nothing else; the uid is absent, not 0 (root) */
	static const uint8_t only_pid[] = {0x10, 0x00, 0x42, 0x02, 0x08, 0x07};
	ASSERT_OK(sonde__ipc_frame_decode(only_pid, sizeof(only_pid), &g));
	ASSERT(g.has_peer_pid && !g.has_peer_uid);
	ASSERT(g.machine_id_hint == NULL && g.machine_name == NULL);
	sonde__buf_free(&b);
}

TEST(relay_peer_identity_refuses_oversize_and_wrong_types)
{
	uint8_t big[IPC_MAX_PEER_STRING + 16];
	struct ipc_frame g;
	size_t n = 0;

	/* {2: 0, 8: {4: "AAAA..." (IPC_MAX_PEER_STRING + 1)}} */
	big[n++] = 0x10;
	big[n++] = 0x00;
	big[n++] = 0x42;
	big[n++] = (uint8_t)(0x80 | ((IPC_MAX_PEER_STRING + 4) & 0x7f));
	big[n++] = (uint8_t)((IPC_MAX_PEER_STRING + 4) >> 7);
	big[n++] = 0x22;
	big[n++] = (uint8_t)(0x80 | ((IPC_MAX_PEER_STRING + 1) & 0x7f));
	big[n++] = (uint8_t)((IPC_MAX_PEER_STRING + 1) >> 7);
	memset(big + n, 'A', IPC_MAX_PEER_STRING + 1);
	n += IPC_MAX_PEER_STRING + 1;
	ASSERT_ERR(sonde__ipc_frame_decode(big, n, &g), -SONDE_E_FORMAT);
	/* a machine name sent as a varint */
	static const uint8_t varint_name[] = {0x10, 0x00, 0x42, 0x02, 0x20, 0x05};
	ASSERT_ERR(sonde__ipc_frame_decode(varint_name, sizeof(varint_name), &g), -SONDE_E_FORMAT);
}

TEST(relay_init_roundtrip_keeps_raw_system_info)
{
	struct relay_system_info si;
	struct relay_init_req r;
	struct utsname uts;
	struct buf b = BUF_INIT;

	sonde__relay_system_info_local(&si, &uts, "sonded test");
	ASSERT(si.sysname.s != NULL && si.num_cpus > 0 && si.page_size > 0);
	ASSERT_OK(sonde__relay_init_req_encode(&b, &si));
	ASSERT_OK(sonde__relay_init_req_decode(b.data, b.len, &r));
	ASSERT(r.has_system_info);
	ASSERT_UINT(r.si.sysname.len, ==, strlen(uts.sysname));
	ASSERT_MEM_EQ(r.si.sysname.s, uts.sysname, r.si.sysname.len);
	ASSERT_MEM_EQ(r.si.release.s, uts.release, r.si.release.len);
	ASSERT_UINT(r.si.num_cpus, ==, si.num_cpus);
	ASSERT_UINT(r.si.page_size, ==, si.page_size);
	ASSERT_INT(r.si.hz, ==, si.hz);
	ASSERT_MEM_EQ(r.si.tracing_service_version.s, "sonded test", 11);
	ASSERT(r.si.has_timezone && r.si.timezone_off_mins == si.timezone_off_mins);
	/* raw is the SystemInfo body: the request's bytes past its tag and 4-byte length */
	ASSERT_UINT(r.si.raw_len, ==, b.len - 5);
	ASSERT(r.si.raw == b.data + 5);
	sonde__buf_free(&b);

	/* no system_info at all is a valid (if useless) request */
	ASSERT_OK(sonde__relay_init_req_decode("", 0, &r));
	ASSERT(!r.has_system_info);
}

TEST(relay_init_refuses_hostile_system_info)
{
	struct relay_init_req r;
	uint8_t m[RELAY_MAX_SYSTEM_INFO + 2];

	/* system_info as a varint */
	ASSERT_ERR(sonde__relay_init_req_decode("\x08\x01", 2, &r), -SONDE_E_FORMAT);
	/* num_cpus as bytes: {1: {8: ""}} */
	ASSERT_ERR(sonde__relay_init_req_decode("\x0a\x02\x42\x00", 4, &r), -SONDE_E_FORMAT);
	/* utsname truncated inside: {1: {1: {1: <5 bytes announced, 1 there>}}} */
	ASSERT_ERR(sonde__relay_init_req_decode("\x0a\x05\x0a\x03\x0a\x05x", 7, &r),
		   -SONDE_E_FORMAT);
	/* SystemInfo bodies of RELAY_MAX_SYSTEM_INFO bytes and 2 more, of {9: 0} pairs, an
	 * unknown field fine by shape: the first is accepted, the second refused whole */
	for (size_t i = 0; i < sizeof(m); i += 2) {
		m[i] = 0x48;
		m[i + 1] = 0x00;
	}
	for (size_t len = RELAY_MAX_SYSTEM_INFO; len <= RELAY_MAX_SYSTEM_INFO + 2; len += 2) {
		struct buf b = BUF_INIT;
		sonde__pb_put_bytes(&b, PF_INIT_RELAY_REQ_SYSTEM_INFO, m, len);
		int rc = sonde__relay_init_req_decode(b.data, b.len, &r);
		sonde__buf_free(&b);
		if (len == RELAY_MAX_SYSTEM_INFO) {
			ASSERT_OK(rc);
			ASSERT(r.has_system_info);
			ASSERT_UINT(r.si.raw_len, ==, RELAY_MAX_SYSTEM_INFO);
		} else {
			ASSERT_INT(rc, ==, -SONDE_E_FORMAT);
		}
	}
}

TEST(relay_sync_clock_roundtrip_and_refusals)
{
	struct relay_sync_req q = {.phase = RELAY_SYNC_UPDATE}, r;
	struct buf b = BUF_INIT;

	q.n_clocks = sonde__relay_clocks_read(q.clocks, RELAY_MAX_CLOCKS);
	ASSERT_UINT(q.n_clocks, ==, 6);
	ASSERT_UINT(q.clocks[0].clock_id, ==, PF_CLOCK_BOOTTIME);
	ASSERT_OK(sonde__relay_sync_req_encode(&b, &q));
	ASSERT_OK(sonde__relay_sync_req_decode(b.data, b.len, &r));
	ASSERT_UINT(r.phase, ==, RELAY_SYNC_UPDATE);
	ASSERT_UINT(r.n_clocks, ==, 6);
	for (size_t i = 0; i < 6; i++) {
		ASSERT_UINT(r.clocks[i].clock_id, ==, q.clocks[i].clock_id);
		ASSERT_UINT(r.clocks[i].timestamp, ==, q.clocks[i].timestamp);
	}
	sonde__buf_free(&b);

	/* what traced_relay sends: {1: PING, 2: {1: 6, 2: 1000}} */
	ASSERT_OK(sonde__relay_sync_req_decode("\x08\x01\x12\x05\x08\x06\x10\xe8\x07", 9, &r));
	ASSERT_UINT(r.phase, ==, RELAY_SYNC_PING);
	ASSERT_UINT(r.clocks[0].timestamp, ==, 1000);
	/* phase 3; no phase; a clock without timestamp; clock id 0; the same clock twice */
	ASSERT_ERR(sonde__relay_sync_req_decode("\x08\x03", 2, &r), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__relay_sync_req_decode("\x12\x04\x08\x06\x10\x01", 6, &r),
		   -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__relay_sync_req_decode("\x08\x01\x12\x02\x08\x06", 6, &r),
		   -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__relay_sync_req_decode("\x08\x01\x12\x04\x08\x00\x10\x01", 8, &r),
		   -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__relay_sync_req_decode(
			   "\x08\x01\x12\x04\x08\x06\x10\x01\x12\x04\x08\x06\x10\x02", 14, &r),
		   -SONDE_E_FORMAT);
	/* more clocks than RELAY_MAX_CLOCKS */
	q.phase = RELAY_SYNC_PING;
	q.n_clocks = RELAY_MAX_CLOCKS;
	for (size_t i = 0; i < RELAY_MAX_CLOCKS; i++)
		q.clocks[i] = (struct relay_clock){(uint32_t)i + 1, 5};
	ASSERT_OK(sonde__relay_sync_req_encode(&b, &q));
	sonde__pb_put_bytes(&b, PF_SYNC_CLOCK_REQ_CLOCKS, "\x08\x7f\x10\x01", 4);
	ASSERT_ERR(sonde__relay_sync_req_decode(b.data, b.len, &r), -SONDE_E_FORMAT);
	q.n_clocks = RELAY_MAX_CLOCKS + 1;
	ASSERT_ERR(sonde__relay_sync_req_encode(&b, &q), -SONDE_E_RANGE);
	sonde__buf_free(&b);

	ASSERT_OK(sonde__relay_resp_decode("", 0));
	ASSERT_ERR(sonde__relay_resp_decode("\x0a\x05", 2), -SONDE_E_FORMAT);
}
