/* sonded over TCP on loopback, driven with raw IPC frames: a remote producer gets
 * shared-memory emulation and its chunks arrive inline (fragments, patches), its uid is
 * unknown (no trusted_uid), SetPeerIdentity changes nothing, a consumer works over TCP,
 * and a listener binds only the address it was given. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

static void make_packet(struct buf *b, const char *tag, size_t pad)
{
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, 1000);
	sonde__pb_put_string(b, 900, tag);
	if (pad) {
		uint8_t *p = malloc(pad);
		for (size_t i = 0; i < pad; i++)
			p[i] = (uint8_t)('a' + i % 26);
		sonde__pb_put_bytes(b, 901, p, pad);
		free(p);
	}
}

struct rig {
	struct sonded d;
	struct tprod p;
	struct tc c;
	uint64_t enable_req;
	uint32_t target;
	char paddr[64], caddr[64];
};

/* sonded with both ports on r->paddr and r->caddr; a producer that first claims to be
 * root over SetPeerIdentity when forge is set. */
static void rig_up_at(struct rig *r, bool forge)
{
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;

	sonded_start_at(&r->d, r->paddr, r->caddr, NULL);
	int fd = sonde__ipc_connect(r->paddr);
	ASSERT(fd >= 0);
	if (forge) {
		struct ipc_chan ch;
		struct ipc_frame f = {.msg = IPC_MSG_SET_PEER_IDENTITY,
				      .peer_pid = 1,
				      .peer_uid = 0,
				      .has_peer_pid = true,
				      .has_peer_uid = true,
				      .machine_id_hint = "forged",
				      .machine_id_hint_len = 6};
		ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
		ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
		ASSERT_OK(sonde__ipc_chan_flush(&ch));
		ch.fd = -1; /* the producer keeps the socket */
		sonde__ipc_chan_close(&ch);
	}
	tprod_open_fd(&r->p, fd, "remote-producer", false);
	tprod_register(&r->p, "test.ds", false, false);
	tc_open(&r->c, r->caddr, "ConsumerPort");
	tcfg_basic(&cfg, 1024, one_ds, 1);
	r->enable_req = tcons_enable(&r->c, &cfg, -1);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->target = cmd.target_buffer;
	ASSERT(r->p.emulated); /* setup_tracing came without an fd */
	tprod_expect(&r->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	sonde__buf_free(&cfg);
}

static void rig_up(struct rig *r, bool forge)
{
	snprintf(r->paddr, sizeof(r->paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(r->caddr, sizeof(r->caddr), "127.0.0.1:%u", test_free_tcp_port());
	rig_up_at(r, forge);
}

static void rig_stop_and_read(struct rig *r, struct buf *trace)
{
	struct tcmd cmd;

	tc_msg_free(tc_ok(&r->c, tc_call(&r->c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r->p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r->c, r->enable_req, 10000));
	tcons_read(&r->c, trace);
}

static void rig_down(struct rig *r)
{
	tc_close(&r->c);
	tc_close(&r->p.t);
	sonded_stop(&r->d);
}

static void assert_remote_packet(const struct buf *trace, const char *tag, const struct buf *want)
{
	struct tpkt pk;

	ASSERT_INT(trace_count(trace, tag, strlen(tag), &pk), ==, 1);
	ASSERT_UINT(pk.len, >, want->len);
	ASSERT_MEM_EQ(pk.p, want->data, want->len);
	ASSERT(pk.has_seq && pk.seq >= 2);
	ASSERT(!pk.has_uid); /* a remote producer's uid is unknown */
}

static void emulated_session(bool forge)
{
	struct rig r;
	struct buf a = BUF_INIT, big = BUF_INIT, c = BUF_INIT, trace = BUF_INIT, patch = BUF_INIT;
	unsigned m01[2][2] = {{0, 0}, {1, 0}}, m2[1][2] = {{2, 0}};

	rig_up(&r, forge);
	make_packet(&a, "tcp-small-a", 0);
	make_packet(&big, "tcp-big-b", 10000); /* spans three chunks */
	make_packet(&c, "tcp-small-c", 0);
	size_t p0 = 4080 - (4 + a.len) - 4, p1 = 4080 - 4;
	struct iovec c0[2] = {{a.data, a.len}, {big.data, p0}};
	struct iovec c1[1] = {{big.data + p0, p1}};
	struct iovec c2[2] = {{big.data + p0 + p1, big.len - p0 - p1}, {c.data, c.len}};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 10, SMB_FLAG_LAST_PACKET_CONTINUES, c0, 2,
		    true);
	tprod_chunk(&r.p, 1, SMB_LAYOUT_DIV1, 0, 1, 11,
		    SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_LAST_PACKET_CONTINUES, c1, 1, true);
	tprod_commit(&r.p, m01, 2, r.target, 0, NULL);
	/* the last chunk goes with its first fragment's size still to be patched */
	uint8_t *ch =
		tprod_chunk(&r.p, 2, SMB_LAYOUT_DIV1, 0, 1, 12,
			    SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_NEEDS_PATCHING, c2, 2, true);
	uint8_t size_le[4];
	memcpy(size_le, ch + SMB_CHUNK_HDR_SIZE, 4);
	memset(ch + SMB_CHUNK_HDR_SIZE, 0, 4);
	tprod_commit(&r.p, m2, 1, r.target, 0, NULL);
	size_t m = sonde__pb_begin(&patch, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_TARGET_BUFFER, r.target);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_WRITER_ID, 1);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_CHUNK_ID, 12);
	size_t pm = sonde__pb_begin(&patch, PF_CHUNK_TO_PATCH_PATCHES);
	sonde__pb_put_varint(&patch, PF_PATCH_OFFSET, 0);
	sonde__pb_put_bytes(&patch, PF_PATCH_DATA, size_le, 4);
	sonde__pb_end(&patch, pm);
	sonde__pb_end(&patch, m);
	tprod_commit(&r.p, NULL, 0, r.target, 0, &patch);
	rig_stop_and_read(&r, &trace);
	assert_remote_packet(&trace, "tcp-small-a", &a);
	assert_remote_packet(&trace, "tcp-big-b", &big);
	assert_remote_packet(&trace, "tcp-small-c", &c);
	sonde__buf_free(&a);
	sonde__buf_free(&big);
	sonde__buf_free(&c);
	sonde__buf_free(&patch);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(remote_producer_over_tcp_commits_inline_chunks, 60)
{
	emulated_session(false);
}

TEST_TIMEOUT(remote_producer_set_peer_identity_is_ignored, 60)
{
	/* claimed pid 1, uid 0: the packets still carry no trusted uid, no trusted pid */
	emulated_session(true);
}

/* A remote consumer cannot be told from another: it may not Detach (another could Attach
 * with the key), and it lists no session to clone. */
TEST_TIMEOUT(remote_consumer_may_not_detach, 60)
{
	struct rig r;
	struct buf a = BUF_INIT;

	rig_up(&r, false);
	sonde__pb_put_string(&a, PF_DETACH_REQ_KEY, "remote-key");
	struct tc_msg *m = tc_wait(&r.c, tc_call(&r.c, "Detach", &a, -1, false), 10000);
	ASSERT_NOT_NULL(m);
	ASSERT(!m->f.success);
	tc_msg_free(m);
	sonde__buf_free(&a);
	rig_down(&r);
}

TEST_TIMEOUT(remote_listener_binds_only_the_given_address, 60)
{
	struct sonded d;
	char paddr[64], caddr[64], other[160];
	unsigned port = test_free_tcp_port();

	snprintf(paddr, sizeof(paddr), "127.0.0.1:%u", port);
	snprintf(caddr, sizeof(caddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(other, sizeof(other), "127.0.0.2:%u", port);
	sonded_start_at(&d, paddr, caddr, NULL);
	int fd = sonde__ipc_connect(other);
	ASSERT_INT(fd, ==, -ECONNREFUSED);
	snprintf(other, sizeof(other), "[::1]:%u", port);
	fd = sonde__ipc_connect(other);
	ASSERT(fd < 0);
	/* a list: the first that answers */
	snprintf(other, sizeof(other), "127.0.0.2:%u,%s", port, paddr);
	fd = sonde__ipc_connect(other);
	ASSERT(fd >= 0);
	close(fd);
	sonded_stop(&d);
}

/* vsock where the kernel has a loopback transport (vsock_loopback: CID 1 reaches this
 * machine); a remote consumer and producer on it, as over TCP. */
TEST_TIMEOUT(remote_vsock_loopback_session, 60)
{
	char paddr[64], caddr[64];
	unsigned port = test_free_tcp_port(); /* any number: vsock ports are their own space */

	snprintf(paddr, sizeof(paddr), "vsock://1:%u", port);
	snprintf(caddr, sizeof(caddr), "vsock://1:%u", port + 1);
	int probe = sonde__ipc_listen(paddr);
	if (probe < 0)
		SKIP("no loopback vsock transport (modprobe vsock_loopback): listening on %s: %s",
		     paddr, strerror(-probe));
	close(probe);
	struct rig r;
	struct buf a = BUF_INIT, trace = BUF_INIT;
	unsigned m0[1][2] = {{0, 0}};

	snprintf(r.paddr, sizeof(r.paddr), "%s", paddr);
	snprintf(r.caddr, sizeof(r.caddr), "%s", caddr);
	rig_up_at(&r, false);
	make_packet(&a, "vsock-packet", 0);
	struct iovec v[1] = {{a.data, a.len}};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, v, 1, true);
	tprod_commit(&r.p, m0, 1, r.target, 0, NULL);
	rig_stop_and_read(&r, &trace);
	assert_remote_packet(&trace, "vsock-packet", &a);
	sonde__buf_free(&a);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* The connector passes descriptors: a network name for it is refused at start. */
TEST_TIMEOUT(remote_connector_socket_must_be_unix, 30)
{
	struct test_output o;
	char x[64];

	snprintf(x, sizeof(x), "127.0.0.1:%u", test_free_tcp_port());
	const char *argv[] = {test_bin("sonded"), "-p", test_path("p.sock"), "-c",
			      test_path("c.sock"), "-x", x, "--no-probes", NULL};
	test_run(&o, 20, argv);
	ASSERT_INT(o.status, !=, 0);
	ASSERT_NOT_NULL(strstr(o.err, x));
	test_output_free(&o);
}
