/* sonded --relay on loopback: local producers (the client library's, and raw-frame ones
 * with an SMB) reach a host sonded over TCP through a relay, which turns their shared
 * memory into emulated chunks; the host going away closes them, and after its restart new
 * producers get their data into a new session. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "client_util.h"
#include "ipc/protos.h"
#include "ipc/relay_proto.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "sec_util.h"
#include "svc_util.h"

struct relay_rig {
	struct sonded host;
	pid_t relay;
	/* the host's producer socket (TCP) and the address the relay connects to: a relay
	 * socket of the host's, or the producer socket itself */
	char paddr[64], haddr[64], rsock[256];
};

/* The relay on g->rsock for g->haddr, with further options extra (NULL-terminated, may
 * be NULL), once it listens. */
static void relay_start_with(struct relay_rig *g, const char *const *extra)
{
	const char *argv[16] = {test_bin("sonded"), "--relay",	  g->haddr, "-p",
				g->rsock,	    "--no-probes"};
	int n = 6;

	for (; extra && *extra && n < 15; extra++)
		argv[n++] = *extra;
	g->relay = test_spawn(argv);
	for (int i = 0; i < 500; i++) {
		int fd = sonde__ipc_connect(g->rsock);
		if (fd >= 0) {
			close(fd);
			return;
		}
		usleep(10000);
	}
	FAIL("the relay did not listen on %s", g->rsock);
}

static void relay_start(struct relay_rig *g)
{
	relay_start_with(g, NULL);
}

/* The host: its producer socket on g->paddr, its relay socket on g->haddr. */
static void host_start(struct relay_rig *g)
{
	const char *const extra[] = {"--no-probes", "--relay-socket", g->haddr, NULL};

	sonded_start_at(&g->host, g->paddr, NULL, extra);
}

static void rig_addrs(struct relay_rig *g)
{
	snprintf(g->paddr, sizeof(g->paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(g->haddr, sizeof(g->haddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(g->rsock, sizeof(g->rsock), "%s", test_path("relay.sock"));
}

static void rig_up(struct relay_rig *g)
{
	rig_addrs(g);
	host_start(g);
	relay_start(g);
}

static void rig_down(struct relay_rig *g)
{
	kill(g->relay, SIGTERM);
	ASSERT_INT(test_wait(g->relay, 20), ==, 0);
	sonded_stop(&g->host);
}

static void append_record(void *ctx, const void *pkt, size_t len)
{
	sonde__pb_put_bytes(ctx, 1, pkt, len);
}

/* One session of duration_ms over "client.test" on the host; the trace into *trace. */
static void host_session(const char *csock, uint32_t duration_ms, uint32_t buf_kb,
			 struct buf *trace)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_consumer_cbs cbs = {
		.sz = sizeof(cbs), .on_packet = append_record, .ctx = trace};
	struct sonde_trace_config_opts o = {.sz = sizeof(o), .duration_ms = duration_ms};
	struct sonde_trace_config *cfg = ASSERT_NOT_NULL(sonde_trace_config__new(&o));
	char err[256];
	uint8_t *enc;
	size_t len;

	ASSERT_OK(sonde_trace_config__add_buffer(cfg, buf_kb, SONDE_FILL_RING_BUFFER));
	ASSERT_OK(sonde_trace_config__add_data_source(cfg, "client.test", 0, NULL, 0));
	ASSERT_OK(sonde_trace_config__encode(cfg, &enc, &len));
	sonde_trace_config__free(cfg);
	sonde_consumer__set_callbacks(c, &cbs);
	ASSERT_OK(sonde_consumer__enable_tracing(c, enc, len, -1));
	ASSERT_OK(sonde_consumer__wait_disabled(c, 30000, err, sizeof(err)));
	ASSERT_STR_EQ(err, "");
	ASSERT_OK(sonde_consumer__read_buffers_sync(c, 30000));
	sonde_consumer__free(c);
	free(enc);
}

/* How many packets of the trace hold test packet i's string, exactly (its TestEvent). */
static int packet_copies(const struct buf *trace, int i)
{
	char s[64];
	uint8_t needle[80];

	client_packet_str(s, sizeof(s), i);
	needle[0] = (uint8_t)(CT_TEST_STR << 3 | 2);
	needle[1] = (uint8_t)strlen(s);
	memcpy(needle + 2, s, strlen(s));
	return trace_count(trace, needle, 2 + strlen(s), NULL);
}

/* Producers that registered "client.test" on the host, waited for (QueryServiceState). */
static void wait_producers(const char *csock, int n)
{
	for (int tries = 0; tries < 1000; tries++) {
		struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = csock};
		struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
		struct sonde_service_state *st = NULL;
		int found = 0;
		if (sonde_consumer__query_service_state_sync(c, &st, 5000) == 0) {
			for (size_t i = 0; i < st->n_data_sources; i++)
				found += !strcmp(st->data_sources[i].name, "client.test");
			sonde_service_state__free(st);
		}
		sonde_consumer__free(c);
		if (found >= n)
			return;
		usleep(20000);
	}
	FAIL("%d producers of client.test did not reach the host", n);
}

enum {
	TP_CLOCK_SNAPSHOT = 6,
	TP_SYSTEM_INFO = 45,
	TP_MACHINE_ID = 98,
	TP_REMOTE_CLOCK_SYNC = 107,
};

/* Every test packet carries one machine id, not 0, and the trace holds that machine's
 * SystemInfo and a clock snapshot or clock sync under it. */
/* A packet's machine id (0: none) and whether it holds a top-level field. */
static uint64_t packet_machine(const struct tpkt *pk, uint32_t field, bool *has)
{
	struct pb_reader r = pb_reader_init(pk->p, pk->len);
	struct pb_field f;
	uint64_t m = 0;

	*has = false;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == TP_MACHINE_ID && f.wire == PB_VARINT)
			m = f.u;
		*has |= f.num == field;
	}
	return m;
}

/* Packets holding field under machine m. */
static int machine_count(const struct buf *trace, uint64_t m, uint32_t field)
{
	struct tpkt pk;
	size_t off = 0;
	int n = 0;
	bool has;

	while (trace_next(trace, &off, &pk))
		n += packet_machine(&pk, field, &has) == m && has;
	return n;
}

/* Every test packet carries one machine id, not 0, and the trace holds that machine's
 * SystemInfo and a clock snapshot or clock sync under it. */
static void __attribute__((unused)) assert_one_machine(const struct buf *trace)
{
	struct tpkt pk;
	size_t off = 0;
	uint64_t machine = 0;
	bool test;

	while (trace_next(trace, &off, &pk)) {
		uint64_t m = packet_machine(&pk, CT_FOR_TESTING, &test);
		if (!test)
			continue;
		ASSERT_UINT(m, !=, 0);
		if (!machine)
			machine = m;
		ASSERT_UINT(m, ==, machine);
	}
	ASSERT_UINT(machine, !=, 0);
	ASSERT_INT(machine_count(trace, machine, TP_SYSTEM_INFO), >=, 1);
	ASSERT_INT(machine_count(trace, machine, TP_CLOCK_SNAPSHOT) +
			   machine_count(trace, machine, TP_REMOTE_CLOCK_SYNC),
		   >=, 1);
}

TEST_TIMEOUT(relay_two_local_producers_reach_the_host, 120)
{
	struct relay_rig g;
	struct buf trace = BUF_INIT;

	rig_up(&g);
	/* one with the SMB the relay creates, one with its own (producer-provided) */
	struct client_prod_opts a = {.socket = g.rsock, .packets = 300, .commit_on_start = true};
	struct client_prod_opts b = {.socket = g.rsock,
				     .packets = 300,
				     .commit_on_start = true,
				     .provided_smb = true,
				     .smb_size = 128 * 1024,
				     .page_size = 8192};
	pid_t pa = client_prod_spawn(&a), pb = client_prod_spawn(&b);
	wait_producers(g.host.csock, 2);
	host_session(g.host.csock, 1500, 8192, &trace);
	ASSERT_INT(test_wait(pa, 20), ==, 0);
	ASSERT_INT(test_wait(pb, 20), ==, 0); /* 5 would say the relay refused its SMB */
	for (int i = 0; i < 300; i++)
		ASSERT_INT(packet_copies(&trace, i), ==, 2);
	assert_one_machine(&trace);
	sonde__buf_free(&trace);
	rig_down(&g);
}

/* The same producer, many packets, through the relay and straight into the host: every
 * packet arrives both ways. */
TEST_TIMEOUT(relay_smb_producer_delivers_as_many_as_direct, 180)
{
	struct relay_rig g;
	struct buf via = BUF_INIT, direct = BUF_INIT;
	enum { N = 3000 };

	rig_up(&g);
	struct client_prod_opts o = {
		.socket = g.rsock, .packets = N, .big = 300, .commit_on_start = true};
	pid_t p = client_prod_spawn(&o);
	wait_producers(g.host.csock, 1);
	host_session(g.host.csock, 1500, 16384, &via);
	ASSERT_INT(test_wait(p, 20), ==, 0);
	o.socket = g.host.psock; /* TCP, emulated by the producer itself */
	p = client_prod_spawn(&o);
	wait_producers(g.host.csock, 1);
	host_session(g.host.csock, 1500, 16384, &direct);
	ASSERT_INT(test_wait(p, 20), ==, 0);
	ASSERT_INT(client_count_test_packets(direct.data, direct.len, N, 300), ==, N);
	ASSERT_INT(client_count_test_packets(via.data, via.len, N, 300), ==, N);
	sonde__buf_free(&via);
	sonde__buf_free(&direct);
	rig_down(&g);
}

/* A raw producer on the relay gets a real SMB (setup_tracing with an fd), and what it
 * writes there (fragments across chunks, a patch) reaches the host intact. */
TEST_TIMEOUT(relay_translates_smb_chunks_and_patches, 60)
{
	struct relay_rig g;
	struct tprod p;
	struct tc c;
	struct tcmd cmd;
	struct tpkt pk;
	struct buf cfg = BUF_INIT, a = BUF_INIT, big = BUF_INIT, trace = BUF_INIT, patch = BUF_INIT;
	static const char *const ds[] = {"test.ds"};
	unsigned m01[2][2] = {{0, 0}, {1, 0}}, m2[1][2] = {{2, 0}};

	rig_up(&g);
	tprod_open(&p, g.rsock, "relayed-producer", false);
	tprod_register(&p, "test.ds", false, false);
	tc_open(&c, g.host.csock, "ConsumerPort");
	tcfg_basic(&cfg, 1024, ds, 1);
	uint64_t enable = tcons_enable(&c, &cfg, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	ASSERT(!p.emulated); /* setup_tracing came with the relay's SMB */
	ASSERT(p.smb != NULL);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	svc_make_packet(&a, "relay-small-a", 0);
	svc_make_packet(&big, "relay-big-b", 9000);
	size_t p0 = p.page - SMB_PAGE_HDR_SIZE - SMB_CHUNK_HDR_SIZE - (4 + a.len) - 4;
	size_t p1 = p.page - SMB_PAGE_HDR_SIZE - SMB_CHUNK_HDR_SIZE - 4;
	ASSERT_UINT(big.len, >, p0 + p1);
	struct iovec c0[2] = {{a.data, a.len}, {big.data, p0}};
	struct iovec c1[1] = {{big.data + p0, p1}};
	struct iovec c2[1] = {{big.data + p0 + p1, big.len - p0 - p1}};
	tprod_chunk(&p, 0, SMB_LAYOUT_DIV1, 0, 1, 10, SMB_FLAG_LAST_PACKET_CONTINUES, c0, 2, true);
	tprod_chunk(&p, 1, SMB_LAYOUT_DIV1, 0, 1, 11,
		    SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_LAST_PACKET_CONTINUES, c1, 1, true);
	tprod_commit(&p, m01, 2, target, 0, NULL);
	uint8_t *ch =
		tprod_chunk(&p, 2, SMB_LAYOUT_DIV1, 0, 1, 12,
			    SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_NEEDS_PATCHING, c2, 1, true);
	uint8_t size_le[4];
	memcpy(size_le, ch + SMB_CHUNK_HDR_SIZE, 4);
	memset(ch + SMB_CHUNK_HDR_SIZE, 0, 4);
	tprod_commit(&p, m2, 1, target, 0, NULL);
	/* the relay released the chunks it sent: the pages are free again */
	ASSERT_UINT(smb_bitmap_load(smb_page_bitmap(p.smb, p.page, 0)), ==, 0);
	ASSERT_UINT(smb_bitmap_load(smb_page_bitmap(p.smb, p.page, 2)), ==, 0);
	size_t m = sonde__pb_begin(&patch, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_TARGET_BUFFER, target);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_WRITER_ID, 1);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_CHUNK_ID, 12);
	size_t pm = sonde__pb_begin(&patch, PF_CHUNK_TO_PATCH_PATCHES);
	sonde__pb_put_varint(&patch, PF_PATCH_OFFSET, 0);
	sonde__pb_put_bytes(&patch, PF_PATCH_DATA, size_le, 4);
	sonde__pb_end(&patch, pm);
	sonde__pb_end(&patch, m);
	tprod_commit(&p, NULL, 0, target, 0, &patch);
	tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&c, enable, 10000));
	tcons_read(&c, &trace);
	ASSERT_INT(trace_count(&trace, "relay-small-a", 13, &pk), ==, 1);
	ASSERT_MEM_EQ(pk.p, a.data, a.len);
	/* the host trusts the relay (a relay socket): it believes the uid it vouches for */
	ASSERT(pk.has_uid && pk.uid == (int64_t)getuid());
	ASSERT_INT(trace_count(&trace, "relay-big-b", 11, &pk), ==, 1);
	ASSERT_UINT(pk.len, >, big.len);
	ASSERT_MEM_EQ(pk.p, big.data, big.len);
	tc_close(&c);
	tc_close(&p.t);
	sonde__buf_free(&cfg);
	sonde__buf_free(&a);
	sonde__buf_free(&big);
	sonde__buf_free(&trace);
	sonde__buf_free(&patch);
	rig_down(&g);
}

/* The host goes away: the relayed producer's connection closes (the client library's
 * producer then ends, poll failing); after the host is back on the same address, a new
 * producer through the same relay gets its packets into a new session. */
TEST_TIMEOUT(relay_host_restart_producers_reconnect, 120)
{
	struct relay_rig g;
	struct buf trace = BUF_INIT;

	rig_up(&g);
	struct client_prod_opts o = {.socket = g.rsock, .packets = 100, .commit_on_start = true};
	pid_t p = client_prod_spawn(&o);
	wait_producers(g.host.csock, 1);
	sonded_stop(&g.host);
	ASSERT_INT(test_wait(p, 15), ==, 4); /* disconnected before any session */
	/* with no host, a producer is closed at once rather than left hanging */
	int fd = sonde__ipc_connect(g.rsock);
	ASSERT(fd >= 0);
	char byte;
	struct pollfd pfd = {fd, POLLIN, 0};
	ASSERT_INT(poll(&pfd, 1, 10000), ==, 1);
	ssize_t got = recv(fd, &byte, 1, 0);
	if (got != 0)
		FAIL("recv: %zd (%s)", got, strerror(errno));
	close(fd);
	host_start(&g);
	p = client_prod_spawn(&o);
	wait_producers(g.host.csock, 1);
	host_session(g.host.csock, 1000, 4096, &trace);
	ASSERT_INT(test_wait(p, 20), ==, 0);
	ASSERT_INT(client_count_test_packets(trace.data, trace.len, 100, 0), ==, 100);
	sonde__buf_free(&trace);
	rig_down(&g);
}

/* ---- the relay's RelayPort connection, against a fake host ---- */

struct fake_host {
	int lfd;
	struct ipc_chan ch;
	bool open;
};

/* The next frame from the relay's connection, or fails after timeout_ms. The frame's
 * bytes stay valid until the next call. */
static void fake_next(struct fake_host *h, struct ipc_frame *f, int timeout_ms)
{
	double end = test_now() + timeout_ms / 1000.0;

	for (;;) {
		int n = sonde__ipc_chan_next(&h->ch, f, NULL);
		ASSERT_INT(n, >=, 0);
		if (n == 1)
			return;
		struct pollfd p = {h->ch.fd, POLLIN, 0};
		if (test_now() > end)
			FAIL("no frame from the relay in %d ms", timeout_ms);
		poll(&p, 1, 100);
		int rc = sonde__ipc_chan_read(&h->ch);
		if (rc < 0 && rc != -ECONNRESET)
			FAIL("reading the relay: %d", rc);
	}
}

/* Accepts connections until one binds RelayPort (producers' connections are left open,
 * unanswered); checks its SetPeerIdentity first. */
static void fake_accept_port(struct fake_host *h, const char *want_name)
{
	double end = test_now() + 10;

	for (;;) {
		struct pollfd p = {h->lfd, POLLIN, 0};
		ASSERT(test_now() < end);
		if (poll(&p, 1, 200) != 1)
			continue;
		int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);
		ASSERT(fd >= 0);
		ASSERT_OK(sonde__ipc_chan_init(&h->ch, fd));
		struct ipc_frame f;
		fake_next(h, &f, 5000);
		ASSERT_INT(f.msg, ==, IPC_MSG_SET_PEER_IDENTITY);
		ASSERT(f.has_peer_pid && f.has_peer_uid);
		ASSERT(f.machine_id_hint && f.machine_id_hint_len > 0);
		ASSERT_UINT(f.machine_name_len, ==, strlen(want_name));
		ASSERT_MEM_EQ(f.machine_name, want_name, f.machine_name_len);
		fake_next(h, &f, 5000);
		if (f.msg == IPC_MSG_BIND_SERVICE && f.name_len == 9 &&
		    !memcmp(f.name, "RelayPort", 9)) {
			static const char *const methods[] = {"InitRelay", "SyncClock"};
			struct ipc_frame r = {.request_id = f.request_id,
					      .msg = IPC_MSG_BIND_SERVICE_REPLY,
					      .success = true,
					      .service_id = 7,
					      .method_names = methods,
					      .n_methods = 2};
			ASSERT_OK(sonde__ipc_chan_send(&h->ch, &r, -1));
			h->open = true;
			return;
		}
		sonde__ipc_chan_close(&h->ch);
	}
}

static void fake_reply(struct fake_host *h, uint64_t req)
{
	struct ipc_frame r = {.request_id = req,
			      .msg = IPC_MSG_INVOKE_METHOD_REPLY,
			      .success = true,
			      .data = (const uint8_t *)"",
			      .data_len = 0};
	ASSERT_OK(sonde__ipc_chan_send(&h->ch, &r, -1));
}

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One SyncClock request of phase, answered; its BOOTTIME lies between since (the host's
 * reading before it answered what the relay waited for) and now (one machine: the same
 * clock). Returns the reading taken before this answer. */
static uint64_t fake_sync(struct fake_host *h, enum relay_sync_phase phase, uint64_t since)
{
	struct ipc_frame f;
	struct relay_sync_req s;

	fake_next(h, &f, 5000);
	ASSERT_INT(f.msg, ==, IPC_MSG_INVOKE_METHOD);
	ASSERT_UINT(f.service_id, ==, 7);
	ASSERT_UINT(f.method_id, ==, PF_RELAY_SYNC_CLOCK);
	ASSERT_OK(sonde__relay_sync_req_decode(f.data, f.data_len, &s));
	ASSERT_INT(s.phase, ==, phase);
	ASSERT_UINT(s.n_clocks, ==, 6);
	ASSERT_UINT(s.clocks[0].clock_id, ==, 6); /* BOOTTIME first, as Perfetto's relay */
	ASSERT_UINT(s.clocks[0].timestamp, >=, since);
	ASSERT_UINT(s.clocks[0].timestamp, <=, boottime_ns());
	uint64_t replied = boottime_ns(); /* before the relay can hear the reply */
	fake_reply(h, f.request_id);
	return replied;
}

TEST_TIMEOUT(relay_port_inits_syncs_clocks_and_reconnects, 60)
{
	struct fake_host h = {.lfd = -1};
	char addr[64];
	const char *rsock = test_path("relay.sock");
	struct ipc_frame f;
	struct relay_init_req ir;

	setenv("PERFETTO_MACHINE_NAME", "relay-test-machine", 1);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", test_free_tcp_port());
	h.lfd = sonde__ipc_listen(addr);
	ASSERT(h.lfd >= 0);
	/* --machine-name before $PERFETTO_MACHINE_NAME, as for the host's own name */
	const char *argv[] = {
		test_bin("sonded"), "--relay",		 addr, "-p", rsock, "--no-probes",
		"--machine-name",   "relay-cli-machine", NULL};
	uint64_t t0 = boottime_ns();
	pid_t relay = test_spawn(argv);
	for (int round = 0; round < 2; round++) {
		fake_accept_port(&h, "relay-cli-machine");
		fake_next(&h, &f, 5000);
		ASSERT_INT(f.msg, ==, IPC_MSG_INVOKE_METHOD);
		ASSERT_UINT(f.method_id, ==, PF_RELAY_INIT_RELAY);
		ASSERT_OK(sonde__relay_init_req_decode(f.data, f.data_len, &ir));
		ASSERT(ir.has_system_info);
		ASSERT_UINT(ir.si.sysname.len, ==, 5);
		ASSERT_MEM_EQ(ir.si.sysname.s, "Linux", 5);
		ASSERT_UINT(ir.si.num_cpus, >, 0);
		fake_reply(&h, f.request_id);
		uint64_t t1 = fake_sync(&h, RELAY_SYNC_PING, t0);
		fake_sync(&h, RELAY_SYNC_UPDATE, t1);
		/* the host goes away: the relay comes back on its own */
		sonde__ipc_chan_close(&h.ch);
		t0 = boottime_ns();
	}
	kill(relay, SIGTERM);
	ASSERT_INT(test_wait(relay, 20), ==, 0);
	close(h.lfd);
	unsetenv("PERFETTO_MACHINE_NAME");
}

/* Waits up to timeout_s for the peer to close fd; true when it did (no byte came first). */
static bool closed_within(int fd, int timeout_s)
{
	struct pollfd p = {fd, POLLIN, 0};
	char byte;

	return poll(&p, 1, timeout_s * 1000) == 1 && recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

/* The relay's socket is permissioned as sonded's producer socket, and --lockdown refuses
 * a producer of another uid (nobody) while root's is forwarded. */
TEST_TIMEOUT(relay_socket_mode_and_lockdown, 60)
{
	static const char *const opts[] = {"--lockdown", "--socket-mode", "producer:0660", NULL};
	struct relay_rig g;
	struct stat st;
	struct tprod p;

	sec_require_root();
	rig_addrs(&g);
	host_start(&g);
	relay_start_with(&g, opts);
	ASSERT_OK(stat(g.rsock, &st));
	ASSERT_UINT(st.st_mode & 0777, ==, 0660);
	ASSERT_OK(chmod(g.rsock, 0666)); /* so that nobody reaches the relay itself */
	int fd = sec_connect_as(SEC_NOBODY, g.rsock);
	ASSERT(closed_within(fd, 10));
	close(fd);
	tprod_open(&p, g.rsock, "root-producer", false);
	tprod_register(&p, "test.ds", false, false);
	tc_close(&p.t);
	rig_down(&g);
}

/* A host that does not answer connects (its accept queue full: SYNs are dropped): a local
 * producer is closed within the relay's connect timeout, not left hanging, and the relay
 * stays responsive (it ends at once on SIGTERM). */
TEST_TIMEOUT(relay_unanswering_host_closes_producers_in_time, 60)
{
	struct relay_rig g;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fill[3];

	ASSERT(lfd >= 0);
	ASSERT_OK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(lfd, 0));
	ASSERT_OK(getsockname(lfd, (struct sockaddr *)&sa, &len));
	for (int i = 0; i < 3; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		ASSERT(fill[i] >= 0);
		connect(fill[i], (struct sockaddr *)&sa, sizeof(sa)); /* EINPROGRESS or done */
	}
	usleep(200000);
	snprintf(g.haddr, sizeof(g.haddr), "127.0.0.1:%u", ntohs(sa.sin_port));
	snprintf(g.rsock, sizeof(g.rsock), "%s", test_path("relay.sock"));
	relay_start(&g);
	int fd = sonde__ipc_connect(g.rsock);
	ASSERT(fd >= 0);
	double t0 = test_now();
	/* a connect the kernel gives up on takes about 2 minutes of SYN retries; the
	 * relay's are given up after 5 s, each on its own (none waits for another) */
	ASSERT(closed_within(fd, 20));
	ASSERT(test_now() - t0 < 15);
	close(fd);
	kill(g.relay, SIGTERM);
	ASSERT_INT(test_wait(g.relay, 5), ==, 0);
	for (int i = 0; i < 3; i++)
		close(fill[i]);
	close(lfd);
}

/* Accepts one connection of the relay on lfd within timeout_s; its first frame is the
 * relay's SetPeerIdentity. */
static void fake_accept_one(int lfd, struct fake_host *h, int timeout_s)
{
	struct pollfd p = {lfd, POLLIN, 0};
	struct ipc_frame f;

	ASSERT_INT(poll(&p, 1, timeout_s * 1000), ==, 1);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT_OK(sonde__ipc_chan_init(&h->ch, fd));
	h->open = true;
	fake_next(h, &f, 5000);
	ASSERT_INT(f.msg, ==, IPC_MSG_SET_PEER_IDENTITY);
}

/* Whether a frame comes on h within timeout_ms (a RelayPort connection binds at once, a
 * producer's says nothing until its producer does). */
static bool fake_has_frame(struct fake_host *h, int timeout_ms)
{
	struct pollfd p = {h->ch.fd, POLLIN, 0};
	struct ipc_frame f;

	if (sonde__ipc_chan_next(&h->ch, &f, NULL) == 1)
		return true;
	return poll(&p, 1, timeout_ms) == 1 && sonde__ipc_chan_read(&h->ch) == 0 &&
	       sonde__ipc_chan_next(&h->ch, &f, NULL) == 1;
}

static void send_bind(int fd, uint64_t req)
{
	struct ipc_chan ch;
	struct ipc_frame f = {.request_id = req,
			      .msg = IPC_MSG_BIND_SERVICE,
			      .name = "ProducerPort",
			      .name_len = 12};

	ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
	ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
	ch.fd = -1; /* the fd stays the caller's */
	sonde__ipc_chan_close(&ch);
}

/* The relay's connect to the host never stalls its loop: while one local producer's
 * connect hangs (the host's accept queue is full, its SYNs are dropped), another
 * producer's frames are forwarded and the waiting producer is left open; once the queue
 * has room, the waiting connect completes and its producer is forwarded too. */
TEST_TIMEOUT(relay_connect_to_an_unanswering_host_does_not_stall_the_others, 60)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	struct fake_host c1 = {0}, c2 = {0}, hb = {0}, *ha;
	struct ipc_frame f;
	char haddr[64];
	const char *rsock = test_path("relay.sock");
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), a = -1, b, fill[2];

	ASSERT(lfd >= 0);
	ASSERT_OK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(lfd, 0)); /* one connection waits for accept, no more */
	ASSERT_OK(getsockname(lfd, (struct sockaddr *)&sa, &len));
	snprintf(haddr, sizeof(haddr), "127.0.0.1:%u", ntohs(sa.sin_port));
	const char *argv[] = {test_bin("sonded"), "--relay", haddr, "-p", rsock,
			      "--no-probes",	  NULL};
	pid_t relay = test_spawn(argv);
	/* producer A: the relay's first local connection (no probe connection before it) */
	for (int i = 0; i < 1000 && a < 0; i++)
		if ((a = sonde__ipc_connect(rsock)) < 0)
			usleep(10000);
	ASSERT(a >= 0);
	/* the host gets the RelayPort connection (left unanswered) and A's */
	fake_accept_one(lfd, &c1, 10);
	fake_accept_one(lfd, &c2, 10);
	ha = fake_has_frame(&c1, 2000) ? &c2 : &c1;
	ASSERT(!fake_has_frame(ha, 0));

	/* the accept queue full: a connect now hangs */
	for (int i = 0; i < 2; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		ASSERT(fill[i] >= 0);
		connect(fill[i], (struct sockaddr *)&sa, sizeof(sa)); /* EINPROGRESS or done */
	}
	struct pollfd pf = {fill[0], POLLOUT, 0};
	ASSERT_INT(poll(&pf, 1, 5000), ==, 1); /* queued: the queue is full now */
	b = sonde__ipc_connect(rsock);
	ASSERT(b >= 0);

	/* A is served meanwhile, and B is not given up */
	send_bind(a, 1);
	fake_next(ha, &f, 10000);
	ASSERT_INT(f.msg, ==, IPC_MSG_BIND_SERVICE);
	ASSERT_UINT(f.request_id, ==, 1);
	struct pollfd pb = {b, POLLIN, 0};
	ASSERT_INT(poll(&pb, 1, 0), ==, 0);

	/* room in the queue: the relay's next SYN gets through and B is forwarded */
	int q = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ASSERT(q >= 0);
	close(q);
	close(fill[0]);
	close(fill[1]);
	fake_accept_one(lfd, &hb, 10);
	send_bind(b, 2);
	fake_next(&hb, &f, 10000);
	ASSERT_INT(f.msg, ==, IPC_MSG_BIND_SERVICE);
	ASSERT_UINT(f.request_id, ==, 2);

	kill(relay, SIGTERM);
	ASSERT_INT(test_wait(relay, 20), ==, 0);
	close(a);
	close(b);
	sonde__ipc_chan_close(&c1.ch);
	sonde__ipc_chan_close(&c2.ch);
	sonde__ipc_chan_close(&hb.ch);
	close(lfd);
}

/* In relay mode sonded still starts `sonde probes`, on the relay's socket: the system
 * data sources of this machine reach the host through the relay, also after the host
 * restarted. */
TEST_TIMEOUT(relay_starts_probes_that_reach_the_host, 90)
{
	struct relay_rig g;

	rig_addrs(&g);
	host_start(&g);
	const char *argv[] = {test_bin("sonded"), "--relay", g.haddr, "-p", g.rsock, NULL};
	g.relay = test_spawn(argv);
	client_wait_data_source(g.host.csock, "linux.perf");
	client_wait_data_source(g.host.csock, "linux.sys_stats");
	/* the probes reconnect by themselves (the client library's reconnect): after a host
	 * restart they are back through the same relay */
	sonded_stop(&g.host);
	host_start(&g);
	client_wait_data_source(g.host.csock, "linux.perf");
	rig_down(&g);
}
