/* sonded as the host of Perfetto's multi-machine tracing, driven by a relay written here
 * with the IPC helpers over TCP on loopback: SetPeerIdentity believed only on a relay
 * socket, machine ids shared by a machine's producers and distinct between machines,
 * each machine's SystemInfo and clock packets in the trace, machine_name_filter, and a
 * hostile relay peer that gets nowhere. */
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/relay_proto.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

struct host {
	struct sonded d;
	char paddr[64], raddr[64];
};

/* sonded with a Unix producer socket (local producers), an ordinary TCP one, and a relay
 * socket; extra arguments after those. */
static void host_up(struct host *h, const char *const *more)
{
	char prod[400];
	const char *extra[16] = {"--relay-socket", h->raddr, "--machine-name", "hostbox"};
	size_t n = 4;

	snprintf(h->paddr, sizeof(h->paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(h->raddr, sizeof(h->raddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(prod, sizeof(prod), "%s/prod.sock,%s", test_tmpdir(), h->paddr);
	for (; more && *more && n < 15; more++)
		extra[n++] = *more;
	extra[n] = NULL;
	sonded_start_at(&h->d, prod, NULL, extra);
}

/* A connection to addr that first says who it speaks for, as traced_relay does for
 * each producer it forwards (and for its own RelayPort connection). */
static int vouch(const char *addr, const char *hint, const char *name, int32_t uid, int32_t pid)
{
	struct ipc_frame f = {.msg = IPC_MSG_SET_PEER_IDENTITY,
			      .peer_uid = uid,
			      .peer_pid = pid,
			      .has_peer_uid = true,
			      .has_peer_pid = true};
	struct ipc_chan ch;
	int fd = sonde__ipc_connect(addr);

	ASSERT(fd >= 0);
	f.machine_id_hint = hint;
	f.machine_id_hint_len = hint ? strlen(hint) : 0;
	f.machine_name = name;
	f.machine_name_len = name ? strlen(name) : 0;
	ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
	ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
	ASSERT_OK(sonde__ipc_chan_flush(&ch));
	ch.fd = -1; /* the caller keeps the socket */
	sonde__ipc_chan_close(&ch);
	return fd;
}

static uint64_t boottime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The relay's own connection: InitRelay with a SystemInfo naming release `rel`, then one
 * round of SyncClock (PING, UPDATE), each answered. Returns the time from the PING's clock
 * reading to the UPDATE's answer: on one machine (the true offset 0) the estimated offset
 * cannot be further from 0 than half of it. */
static uint64_t relay_port_up(struct tc *t, const char *addr, const char *hint, const char *name,
			      const char *rel)
{
	struct relay_system_info si = {.sysname = {"Linux", 5}, .num_cpus = 3, .page_size = 4096};
	struct relay_sync_req q = {.phase = RELAY_SYNC_PING};
	struct buf a = BUF_INIT;

	si.release = (struct relay_str){rel, strlen(rel)};
	tc_open_fd(t, vouch(addr, hint, name, 0, 4242), RELAY_SERVICE_NAME);
	ASSERT_OK(sonde__relay_init_req_encode(&a, &si));
	tc_msg_free(tc_ok(t, tc_call(t, "InitRelay", &a, -1, false)));
	uint64_t t0 = boottime_ns();
	for (int i = 0; i < 2; i++) {
		sonde__buf_reset(&a);
		q.n_clocks = sonde__relay_clocks_read(q.clocks, RELAY_MAX_CLOCKS);
		ASSERT_OK(sonde__relay_sync_req_encode(&a, &q));
		tc_msg_free(tc_ok(t, tc_call(t, "SyncClock", &a, -1, false)));
		q.phase = RELAY_SYNC_UPDATE;
	}
	sonde__buf_free(&a);
	return boottime_ns() - t0;
}

struct sess {
	struct tc c;
	uint64_t enable_req;
};

/* A session of test.ds, its data source limited to machines[0..n) when n. */
static void sess_enable(struct sess *s, const char *csock, const char *const *machines, size_t n)
{
	struct buf cfg = BUF_INIT;

	tcfg_basic(&cfg, 1024, one_ds, 1);
	if (n) {
		/* tcfg_basic's data source is the last field: a second DataSource message of the
		 * same data source would be another; rebuild it instead */
		sonde__buf_reset(&cfg);
		size_t b = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_BUFFERS);
		sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_SIZE_KB, 1024);
		sonde__pb_end(&cfg, b);
		size_t d = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_DATA_SOURCES);
		size_t c = sonde__pb_begin(&cfg, PF_TC_DATA_SOURCE_CONFIG);
		sonde__pb_put_string(&cfg, PF_DS_CONFIG_NAME, "test.ds");
		sonde__pb_end(&cfg, c);
		for (size_t i = 0; i < n; i++)
			sonde__pb_put_string(&cfg, PF_TC_DATA_SOURCE_MACHINE_NAME_FILTER,
					     machines[i]);
		sonde__pb_end(&cfg, d);
	}
	tc_open(&s->c, csock, "ConsumerPort");
	s->enable_req = tcons_enable(&s->c, &cfg, -1);
	sonde__buf_free(&cfg);
}

static void sess_stop_and_read(struct sess *s, struct buf *trace)
{
	tc_msg_free(tc_ok(&s->c, tc_call(&s->c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&s->c, s->enable_req, 10000));
	tcons_read(&s->c, trace);
	tc_close(&s->c);
}

/* A producer of test.ds over fd (-1: the local Unix socket); started returns its buffer. */
static void prod_up(struct tprod *p, int fd, const char *sock, const char *name)
{
	if (fd >= 0)
		tprod_open_fd(p, fd, name, false);
	else
		tprod_open(p, sock, name, false);
	tprod_register(p, "test.ds", false, false);
}

static uint32_t prod_started(struct tprod *p)
{
	struct tcmd cmd;

	tprod_expect(p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tprod_expect(p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	return target;
}

/* One packet {timestamp, 900: tag} in one chunk, committed. */
static void prod_write(struct tprod *p, uint32_t target, const char *tag)
{
	struct buf b = BUF_INIT;
	unsigned m[1][2] = {{0, 0}};

	sonde__pb_put_varint(&b, PF_PACKET_TIMESTAMP, 1000);
	sonde__pb_put_string(&b, 900, tag);
	struct iovec v = {b.data, b.len};
	tprod_chunk(p, 0, SMB_LAYOUT_DIV1, 0, 1, 1, 0, &v, 1, true);
	tprod_commit(p, m, 1, target, 0, NULL);
	sonde__buf_free(&b);
}

/* The last value of a top-level varint field of a packet; false when absent. */
static bool pkt_varint(const struct tpkt *pk, uint32_t field, uint64_t *v)
{
	struct pb_reader r = pb_reader_init(pk->p, pk->len);
	struct pb_field f;
	bool found = false;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == field && f.wire == PB_VARINT) {
			*v = f.u;
			found = true;
		}
	return found;
}

/* The machine id of the one packet tagged tag (0: none written). */
static uint64_t machine_of(const struct buf *trace, const char *tag, struct tpkt *pk)
{
	uint64_t id = 0;

	ASSERT_INT(trace_count(trace, tag, strlen(tag), pk), ==, 1);
	pkt_varint(pk, PF_PACKET_MACHINE_ID, &id);
	return id;
}

/* Packets with top-level field `field` and machine id `machine`. */
static int count_machine_field(const struct buf *trace, uint32_t field, uint64_t machine)
{
	struct pb_reader r;
	struct pb_field f;
	struct tpkt pk;
	size_t off = 0;
	int n = 0;

	while (trace_next(trace, &off, &pk)) {
		uint64_t id = 0;
		bool has = false;
		pkt_varint(&pk, PF_PACKET_MACHINE_ID, &id);
		r = pb_reader_init(pk.p, pk.len);
		while (sonde__pb_next(&r, &f) > 0)
			has |= f.num == field;
		n += has && id == machine;
	}
	return n;
}

/* BOOTTIME of a ClockSnapshot packet; false when it is none or has no BOOTTIME. */
static bool snapshot_boottime(const struct tpkt *pk, uint64_t *ts)
{
	struct pb_reader r = pb_reader_init(pk->p, pk->len), s, c;
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_PACKET_CLOCK_SNAPSHOT || f.wire != PB_LEN)
			continue;
		for (s = pb_sub(&f); sonde__pb_next(&s, &g) > 0;) {
			uint64_t id = 0, v = 0;
			if (g.num != PF_CLOCK_SNAPSHOT_CLOCKS || g.wire != PB_LEN)
				continue;
			for (c = pb_sub(&g); sonde__pb_next(&c, &h) > 0;)
				*(h.num == PF_CLOCK_CLOCK_ID ? &id : &v) = h.u;
			if (id == PF_CLOCK_BOOTTIME) {
				*ts = v;
				return true;
			}
		}
	}
	return false;
}

/* The offset the host estimated for machine `machine`: its snapshot's BOOTTIME less that
 * of the host's snapshot written just before it (both from one reading of the host's
 * clocks). */
static int64_t estimated_offset(const struct buf *trace, uint64_t machine)
{
	struct tpkt pk;
	size_t off = 0;
	uint64_t host = 0, ts, id;
	bool have_host = false;

	while (trace_next(trace, &off, &pk)) {
		if (!snapshot_boottime(&pk, &ts))
			continue;
		id = 0;
		pkt_varint(&pk, PF_PACKET_MACHINE_ID, &id);
		if (!id) {
			host = ts;
			have_host = true;
		} else if (id == machine && have_host) {
			return (int64_t)(ts - host);
		}
	}
	FAIL("no clock snapshot of machine %llu after one of the host",
	     (unsigned long long)machine);
}

TEST_TIMEOUT(relay_host_machines_tag_their_producers_packets, 90)
{
	struct host h;
	struct tc relay_a, relay_b;
	struct tprod a1, a2, b1, local;
	struct sess s;
	struct buf trace = BUF_INIT;
	struct tpkt pk;
	uint64_t uid = 0;

	host_up(&h, NULL);
	uint64_t span = relay_port_up(&relay_a, h.raddr, "boot-a", "guestA", "9.9.9-guest-a");
	relay_port_up(&relay_b, h.raddr, "boot-b", "guestB", "9.9.9-guest-b");
	prod_up(&a1, vouch(h.raddr, "boot-a", "guestA", 1234, 77), NULL, "a1");
	prod_up(&a2, vouch(h.raddr, "boot-a", "guestA", 1235, 78), NULL, "a2");
	prod_up(&b1, vouch(h.raddr, "boot-b", "guestB", 1236, 79), NULL, "b1");
	prod_up(&local, -1, h.d.psock, "local");
	sess_enable(&s, h.d.csock, NULL, 0);
	struct tprod *all[] = {&a1, &a2, &b1, &local};
	const char *tags[] = {"pkt-from-a1", "pkt-from-a2", "pkt-from-b1", "pkt-from-local"};
	for (int i = 0; i < 4; i++)
		prod_write(all[i], prod_started(all[i]), tags[i]);
	sess_stop_and_read(&s, &trace);

	uint64_t ma = machine_of(&trace, "pkt-from-a1", &pk);
	ASSERT(pkt_varint(&pk, PF_PACKET_TRUSTED_UID, &uid) && uid == 1234); /* the relay's word */
	ASSERT(pkt_varint(&pk, PF_PACKET_TRUSTED_PID, &uid) && uid == 77);
	ASSERT_UINT(machine_of(&trace, "pkt-from-a2", &pk), ==, ma);
	uint64_t mb = machine_of(&trace, "pkt-from-b1", &pk);
	ASSERT_UINT(ma, !=, 0);
	ASSERT_UINT(mb, !=, 0);
	ASSERT_UINT(mb, !=, ma);
	ASSERT_UINT(machine_of(&trace, "pkt-from-local", &pk), ==, 0);
	/* each machine's SystemInfo (as its relay sent it), its clock exchanges and a clock
	 * snapshot of its clocks, all tagged with its id; the host's SystemInfo untagged */
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_SYSTEM_INFO, ma), ==, 1);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_SYSTEM_INFO, mb), ==, 1);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_SYSTEM_INFO, 0), ==, 1);
	ASSERT_INT(trace_count(&trace, "9.9.9-guest-a", 13, &pk), ==, 1);
	ASSERT(pkt_varint(&pk, PF_PACKET_MACHINE_ID, &uid) && uid == ma);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_REMOTE_CLOCK_SYNC, ma), >=, 1);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_REMOTE_CLOCK_SYNC, mb), >=, 1);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_CLOCK_SNAPSHOT, ma), >=, 1);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_CLOCK_SNAPSHOT, 0), >=, 1);
	/* the "relay" shares the host's clocks: the estimate is 0 within half the exchange */
	int64_t est = estimated_offset(&trace, ma);
	printf("machine %llu: estimated BOOTTIME offset %lld ns, exchange %llu ns\n",
	       (unsigned long long)ma, (long long)est, (unsigned long long)span);
	ASSERT_INT(est < 0 ? -est : est, <=, (int64_t)(span / 2) + 1);

	/* a reconnected relay of machine A keeps its id */
	tc_close(&relay_a);
	relay_port_up(&relay_a, h.raddr, "boot-a", "guestA", "9.9.9-guest-a");
	struct tprod a3;
	prod_up(&a3, vouch(h.raddr, "boot-a", "guestA", 1, 2), NULL, "a3");
	sonde__buf_reset(&trace);
	sess_enable(&s, h.d.csock, NULL, 0);
	for (int i = 0; i < 4; i++) {
		struct tcmd cmd;
		tprod_expect(all[i], PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd); /* the first session's */
		prod_started(all[i]);
	}
	prod_write(&a3, prod_started(&a3), "pkt-from-a3");
	sess_stop_and_read(&s, &trace);
	ASSERT_UINT(machine_of(&trace, "pkt-from-a3", &pk), ==, ma);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_SYSTEM_INFO, ma), ==, 1);

	for (int i = 0; i < 4; i++)
		tc_close(&all[i]->t);
	tc_close(&a3.t);
	tc_close(&relay_a);
	tc_close(&relay_b);
	sonde__buf_free(&trace);
	sonded_stop(&h.d);
}

TEST_TIMEOUT(relay_host_identity_believed_only_on_relay_sockets, 60)
{
	struct host h;
	struct tprod forged, relayed;
	struct sess s;
	struct buf trace = BUF_INIT;
	struct tpkt pk;
	uint64_t v = 0;

	host_up(&h, NULL);
	/* a plain remote producer on the ordinary TCP socket claims root on machine "x" */
	prod_up(&forged, vouch(h.paddr, "x", "guestX", 0, 1), NULL, "forged");
	prod_up(&relayed, vouch(h.raddr, "y", "guestY", 0, 5), NULL, "relayed");
	sess_enable(&s, h.d.csock, NULL, 0);
	prod_write(&forged, prod_started(&forged), "pkt-forged");
	prod_write(&relayed, prod_started(&relayed), "pkt-relayed");
	sess_stop_and_read(&s, &trace);
	ASSERT_UINT(machine_of(&trace, "pkt-forged", &pk), ==, 0);
	ASSERT(!pkt_varint(&pk, PF_PACKET_TRUSTED_UID, &v)); /* still unknown */
	ASSERT(!pkt_varint(&pk, PF_PACKET_TRUSTED_PID, &v));
	ASSERT_UINT(machine_of(&trace, "pkt-relayed", &pk), !=, 0);
	ASSERT(pkt_varint(&pk, PF_PACKET_TRUSTED_UID, &v) && v == 0);

	/* RelayPort is not served on the ordinary socket */
	int fd = vouch(h.paddr, "x", "guestX", 0, 1);
	struct ipc_chan ch;
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE}, g;
	ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
	f.name = RELAY_SERVICE_NAME;
	f.name_len = strlen(RELAY_SERVICE_NAME);
	ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
	double end = test_now() + 10;
	int got = 0, rfd;
	while (!got && test_now() < end) {
		usleep(10000);
		sonde__ipc_chan_read(&ch);
		got = sonde__ipc_chan_next(&ch, &g, &rfd);
	}
	ASSERT_INT(got, ==, 1);
	ASSERT_UINT(g.msg, ==, IPC_MSG_BIND_SERVICE_REPLY);
	ASSERT(!g.success);
	sonde__ipc_chan_close(&ch);
	tc_close(&forged.t);
	tc_close(&relayed.t);
	sonde__buf_free(&trace);
	sonded_stop(&h.d);
}

TEST_TIMEOUT(relay_host_lockdown_trusts_a_relay_like_a_local_producer, 60)
{
	static const char *const lockdown[] = {"--lockdown", NULL};
	struct host h;
	struct tprod relayed;
	struct tc t;

	host_up(&h, lockdown);
	/* vouched as sonded's uid: admitted, as a local producer of that uid would be */
	prod_up(&relayed, vouch(h.raddr, "y", "guestY", (int32_t)getuid(), 5), NULL, "relayed");
	/* a plain remote one, even claiming that uid, is refused at InitializeConnection */
	tc_open_fd(&t, vouch(h.paddr, "x", "guestX", (int32_t)getuid(), 1), "ProducerPort");
	struct buf a = BUF_INIT;
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "forged");
	uint64_t req = tc_call(&t, "InitializeConnection", &a, -1, false);
	struct tc_msg *m = tc_wait(&t, req, 10000);
	ASSERT(m != NULL);
	ASSERT(m->f.msg == IPC_MSG_REQUEST_ERROR ||
	       (m->f.msg == IPC_MSG_INVOKE_METHOD_REPLY && !m->f.success));
	tc_msg_free(m);
	sonde__buf_free(&a);
	tc_close(&t);
	tc_close(&relayed.t);
	sonded_stop(&h.d);
}

/* Waits up to ms for a command; true if one came. */
static bool got_cmd(struct tprod *p, int ms)
{
	struct tcmd cmd;

	if (!tprod_cmd(p, &cmd, ms))
		return false;
	tc_msg_free(cmd.m);
	return true;
}

TEST_TIMEOUT(relay_host_machine_name_filter_selects_machines, 90)
{
	struct host h;
	struct tprod a, b, local;
	struct sess s;

	host_up(&h, NULL);
	prod_up(&a, vouch(h.raddr, "boot-a", "guestA", 0, 1), NULL, "pa");
	prod_up(&b, vouch(h.raddr, "boot-b", "guestB", 0, 2), NULL, "pb");
	prod_up(&local, -1, h.d.psock, "plocal");
	struct {
		const char *names[2];
		size_t n;
		bool want_a, want_b, want_local;
	} cases[] = {
		{{"guestB"}, 1, false, true, false},
		{{"host"}, 1, false, false, true},
		{{"hostbox", "guestA"}, 2, true, false, true}, /* sonded --machine-name */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tprod *all[] = {&a, &b, &local};
		bool want[] = {cases[i].want_a, cases[i].want_b, cases[i].want_local};
		sess_enable(&s, h.d.csock, cases[i].names, cases[i].n);
		/* the selected ones get their instance; once they have, so would the others */
		for (int k = 0; k < 3; k++)
			if (want[k])
				prod_started(all[k]);
		for (int k = 0; k < 3; k++)
			if (!want[k] && got_cmd(all[k], 500))
				FAIL("case %zu: producer %d got a command", i, k);
		tc_msg_free(tc_ok(&s.c, tc_call(&s.c, "DisableTracing", NULL, -1, false)));
		for (int k = 0; k < 3; k++) {
			struct tcmd cmd;
			if (want[k])
				tprod_expect(all[k], PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
		}
		free(tcons_wait_disabled(&s.c, s.enable_req, 10000));
		tc_close(&s.c);
	}
	tc_close(&a.t);
	tc_close(&b.t);
	tc_close(&local.t);
	sonded_stop(&h.d);
}

/* Sends raw bytes as one frame's payload. */
static void send_raw(int fd, const struct buf *payload)
{
	uint32_t n = (uint32_t)payload->len;

	ASSERT(write(fd, &n, 4) == 4);
	ASSERT(write(fd, payload->data, payload->len) == (ssize_t)payload->len);
}

static bool call_fails(struct tc *t, const char *method, const struct buf *args)
{
	struct tc_msg *m = tc_wait(t, tc_call(t, method, args, -1, false), 10000);
	bool failed;

	ASSERT(m != NULL);
	failed = m->f.msg != IPC_MSG_INVOKE_METHOD_REPLY || !m->f.success;
	tc_msg_free(m);
	return failed;
}

TEST_TIMEOUT(relay_host_hostile_relay_gets_nowhere, 90)
{
	struct host h;
	struct tc t, anon;
	struct tprod good, twice;
	struct sess s;
	struct buf a = BUF_INIT, trace = BUF_INIT;
	struct tpkt pk;

	host_up(&h, NULL);
	relay_port_up(&t, h.raddr, "boot-h", "hostile", "1.0");
	/* garbage, a SystemInfo over the limit, a bad phase, too many clocks */
	sonde__buf_append(&a, "\x0a\x05\xff\xff", 4);
	ASSERT(call_fails(&t, "InitRelay", &a));
	sonde__buf_reset(&a);
	uint8_t *big = calloc(1, RELAY_MAX_SYSTEM_INFO + 2);
	for (size_t i = 0; i < RELAY_MAX_SYSTEM_INFO + 2; i += 2)
		big[i] = 0x48;
	sonde__pb_put_bytes(&a, PF_INIT_RELAY_REQ_SYSTEM_INFO, big, RELAY_MAX_SYSTEM_INFO + 2);
	free(big);
	ASSERT(call_fails(&t, "InitRelay", &a));
	sonde__buf_reset(&a);
	sonde__pb_put_varint(&a, PF_SYNC_CLOCK_REQ_PHASE, 7);
	ASSERT(call_fails(&t, "SyncClock", &a));
	sonde__buf_reset(&a);
	sonde__pb_put_varint(&a, PF_SYNC_CLOCK_REQ_PHASE, RELAY_SYNC_PING);
	for (uint32_t i = 1; i <= RELAY_MAX_CLOCKS + 1; i++) {
		size_t m = sonde__pb_begin(&a, PF_SYNC_CLOCK_REQ_CLOCKS);
		sonde__pb_put_varint(&a, PF_SYNC_CLOCK_CLOCK_ID, i);
		sonde__pb_put_varint(&a, PF_SYNC_CLOCK_TIMESTAMP, 5);
		sonde__pb_end(&a, m);
	}
	ASSERT(call_fails(&t, "SyncClock", &a));
	/* a relay connection that never said which machine it is describes none */
	int fd = sonde__ipc_connect(h.raddr);
	ASSERT(fd >= 0);
	tc_open_fd(&anon, fd, RELAY_SERVICE_NAME);
	sonde__buf_reset(&a);
	ASSERT(call_fails(&anon, "InitRelay", &a));
	/* an identity with a machine name over the limit is an unparsable frame, skipped: the
	 * producer behind it stays a plain remote one */
	fd = sonde__ipc_connect(h.raddr);
	ASSERT(fd >= 0);
	sonde__buf_reset(&a);
	size_t m = sonde__pb_begin(&a, PF_IPC_FRAME_SET_PEER_IDENTITY);
	sonde__pb_put_varint(&a, PF_SET_PEER_IDENTITY_UID, 0);
	char name[IPC_MAX_PEER_STRING + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	sonde__pb_put_string(&a, PF_SET_PEER_IDENTITY_MACHINE_NAME, name);
	sonde__pb_end(&a, m);
	send_raw(fd, &a);
	prod_up(&good, fd, NULL, "oversize-name");
	/* SetPeerIdentity twice: the second (another machine, root) changes nothing */
	fd = vouch(h.raddr, "boot-h", "hostile", 1000, 3);
	{
		struct ipc_frame f = {.msg = IPC_MSG_SET_PEER_IDENTITY,
				      .peer_uid = 0,
				      .has_peer_uid = true,
				      .machine_id_hint = "other",
				      .machine_id_hint_len = 5};
		struct ipc_chan ch;
		ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
		ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
		ASSERT_OK(sonde__ipc_chan_flush(&ch));
		ch.fd = -1;
		sonde__ipc_chan_close(&ch);
	}
	prod_up(&twice, fd, NULL, "twice");
	sess_enable(&s, h.d.csock, NULL, 0);
	prod_write(&good, prod_started(&good), "pkt-oversize");
	prod_write(&twice, prod_started(&twice), "pkt-twice");
	sess_stop_and_read(&s, &trace);
	uint64_t v = 0;
	ASSERT_UINT(machine_of(&trace, "pkt-oversize", &pk), ==, 0);
	ASSERT(!pkt_varint(&pk, PF_PACKET_TRUSTED_UID, &v));
	ASSERT_UINT(machine_of(&trace, "pkt-twice", &pk), ==, 1); /* boot-h: the first */
	ASSERT(pkt_varint(&pk, PF_PACKET_TRUSTED_UID, &v) && v == 1000);
	/* and the host serves on: its SystemInfo for machine 1 is the good one */
	ASSERT_INT(trace_count(&trace, "hostile", 7, &pk), ==, 0);
	ASSERT_INT(count_machine_field(&trace, PF_PACKET_SYSTEM_INFO, 1), ==, 1);
	tc_close(&anon);
	tc_close(&t);
	tc_close(&good.t);
	tc_close(&twice.t);
	sonde__buf_free(&a);
	sonde__buf_free(&trace);
	sonded_stop(&h.d);
}

TEST_TIMEOUT(relay_host_trace_cli_lists_and_filters_machines, 90)
{
	struct host h;
	struct tprod a1, a2, b;
	struct test_output o;

	host_up(&h, NULL);
	prod_up(&a1, vouch(h.raddr, "boot-a", "guestA", 0, 1), NULL, "pa1");
	prod_up(&a2, vouch(h.raddr, "boot-a", "guestA", 0, 2), NULL, "pa2");
	prod_up(&b, vouch(h.raddr, "boot-b", "guestB", 0, 3), NULL, "pb");
	test_runf(&o, 30, "%s trace --query --socket %s", test_bin("sonde"), h.d.csock);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "machines (3):");
	ASSERT_CONTAINS(o.out, "  0    host     "); /* sonde probes, if it started */
	ASSERT_CONTAINS(o.out, "  1    guestA                           2 producers");
	ASSERT_CONTAINS(o.out, "  2    guestB                           1 producer\n");
	ASSERT_CONTAINS(o.out, "pb                               uid 0 pid 3 machine 2");
	test_output_free(&o);

	/* --machine guestB: only b's producer gets the data source */
	const char *argv[] = {
		test_bin("sonde"), "trace", "--socket", h.d.csock, "--machine",
		"guestB",	   "-d",    "1s",	"-o",	   test_path("m.pftrace"),
		"test.ds",	   NULL};
	pid_t pid = test_spawn(argv);
	prod_started(&b);
	ASSERT(!got_cmd(&a1, 300));
	ASSERT(!got_cmd(&a2, 300));
	/* the CLI flushes before it stops: acknowledged, until the stop comes */
	for (struct tcmd cmd;;) {
		ASSERT(tprod_cmd(&b, &cmd, 10000));
		uint32_t kind = cmd.kind;
		if (kind == PF_ASYNC_CMD_FLUSH)
			tprod_commit(&b, NULL, 0, 0, cmd.flush_id, NULL);
		tc_msg_free(cmd.m);
		if (kind == PF_ASYNC_CMD_STOP_DATA_SOURCE)
			break;
	}
	ASSERT_INT(test_wait(pid, 30), ==, 0);
	tc_close(&a1.t);
	tc_close(&a2.t);
	tc_close(&b.t);
	sonded_stop(&h.d);
}
