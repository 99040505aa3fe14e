/* Hostile clients against a real sonded, over its sockets (issue #6, part 4).
 *
 * Every test runs a legitimate "witness" session (a producer writing numbered packets and
 * its consumer reading them) in this process while an attacker runs in a forked child at
 * the same time. Each test then asserts that
 *   - the attacker was disconnected or throttled, or, where the service cannot tell an
 *     attack from bad data (a scribbled SMB, bad patches), that the damage stayed in the
 *     attacker's own session and was counted;
 *   - the witness lost nothing: every packet 0..n-1 arrives exactly once, byte for byte,
 *     and only the first one carries previous_packet_dropped;
 *   - sonded's fd count returns to its baseline and its RSS to near it.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/service.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "hostile_util.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_inproc.h"
#include "svc_util.h"

/* ------------------------------------------------------------------ garbage frames */

/* Garbage payloads in well-sized frames are dropped and the connection stays (spec §1.2);
 * a header announcing more than 128 KiB closes it. */
static int garbage_on(const char *sock, const char *service, unsigned seed)
{
	int fd = sonde__ipc_connect(sock);
	uint8_t junk[1024];

	if (fd < 0)
		return 10;
	for (int i = 0; i < 200; i++) {
		uint32_t len = (uint32_t)(rand_r(&seed) % sizeof(junk));
		for (uint32_t k = 0; k < len; k++)
			junk[k] = (uint8_t)rand_r(&seed);
		if (raw_send(fd, &len, 4) < 0 || raw_send(fd, junk, len) < 0)
			return 11;
	}
	/* a payload of exactly the maximum size is still a frame */
	uint32_t max = IPC_BUFFER_SIZE - IPC_HEADER_SIZE;
	uint8_t *big = calloc(1, max);
	if (!big || raw_send(fd, &max, 4) < 0 || raw_send(fd, big, max) < 0)
		return 12;
	free(big);
	if (!raw_bind_answered(fd, service))
		return 13; /* the connection must still be served */
	uint32_t over = max + 1;
	if (raw_send(fd, &over, 4) < 0 || !raw_wait_eof(fd, 10000))
		return 14;
	close(fd);
	return 0;
}

static int attack_garbage(void *arg)
{
	const struct sonded *d = arg;
	int rc;

	if ((rc = garbage_on(d->psock, "ProducerPort", 1)) ||
	    (rc = garbage_on(d->csock, "ConsumerPort", 2)))
		return rc;
	/* many connections spraying random bytes: the length word is over the limit */
	for (unsigned i = 0; i < 64; i++) {
		int fd = sonde__ipc_connect(i % 2 ? d->csock : d->psock);
		uint8_t junk[4096];
		unsigned seed = i + 100;
		for (size_t k = 0; k < sizeof(junk); k++)
			junk[k] = (uint8_t)rand_r(&seed);
		junk[3] = (uint8_t)(junk[3] | 0x10);
		if (fd < 0)
			return 20;
		raw_send(fd, junk, sizeof(junk)); /* may fail half way: it was cut off */
		if (!raw_wait_eof(fd, 10000))
			return 21;
		close(fd);
	}
	return 0;
}

TEST_TIMEOUT(hostile_garbage_and_oversized_frames, 120)
{
	struct hostile h;

	hostile_up(&h, NULL);
	ASSERT_INT(hostile_run(&h, attack_garbage, &h.d, 60), ==, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ SMB scribbling */

struct scribble {
	uint8_t *smb;
	size_t size, page;
	volatile bool stop;
	unsigned seed;
};

/* The other thread of a hostile producer: rewrites bitmap words, chunk headers and
 * payload bytes of its SMB as fast as it can, with values that look like real states
 * often enough that the service acquires chunks while they change. */
static void *scribbler(void *arg)
{
	struct scribble *s = arg;

	while (!s->stop) {
		size_t page = (size_t)rand_r(&s->seed) % (s->size / s->page);
		uint32_t *bm = smb_page_bitmap(s->smb, s->page, page);
		uint32_t r = (uint32_t)rand_r(&s->seed);
		switch (r % 4) {
		case 0: /* a partitioned page with every chunk Complete */
			__atomic_store_n(bm, ((r >> 8) % 6) << SMB_LAYOUT_SHIFT | SMB_STATES_MASK,
					 __ATOMIC_RELEASE);
			break;
		case 1: /* any bitmap */
			__atomic_store_n(bm, (uint32_t)rand_r(&s->seed) << 1 ^ r, __ATOMIC_RELEASE);
			break;
		default: { /* headers and payload words */
			size_t off = (size_t)rand_r(&s->seed) % (s->size / 4) * 4;
			__atomic_store_n((uint32_t *)(void *)(s->smb + off), r, __ATOMIC_RELAXED);
		}
		}
	}
	return NULL;
}

static int attack_scribble(void *arg)
{
	struct hostile *h = arg;
	struct tprod p;
	struct scribble s = {.seed = 7};
	uint32_t own;
	pthread_t t;

	if (!hostile_producer_started(&p, h, "hostile-scribbler", &own))
		return 30;
	s.smb = p.smb;
	s.size = p.smb_size;
	s.page = p.page;
	if (pthread_create(&t, NULL, scribbler, &s))
		return 31;
	unsigned seed = 3;
	for (double end = test_now() + 3; test_now() < end;) {
		/* moves into its own buffer, the witness's buffer and nonsense, with patches */
		uint32_t targets[3] = {own, h->w.target, (uint32_t)rand_r(&seed)};
		struct buf a = BUF_INIT;
		for (int i = 0; i < 16; i++) {
			size_t m = sonde__pb_begin(&a, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
			sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_PAGE, (unsigned)rand_r(&seed) % 20);
			sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_CHUNK, (unsigned)rand_r(&seed) % 16);
			sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, targets[i % 3]);
			sonde__pb_end(&a, m);
		}
		hostile_put_patches(&a, targets[(unsigned)rand_r(&seed) % 3], &seed);
		tc_call(&p.t, "CommitData", &a, -1, true);
		sonde__buf_free(&a);
	}
	s.stop = true;
	pthread_join(t, NULL);
	tc_close(&p.t);
	return 0;
}

TEST_TIMEOUT(hostile_producer_scribbles_smb_while_committing, 120)
{
	struct hostile h;

	hostile_up(&h, "hostile.ds");
	ASSERT_INT(hostile_run(&h, attack_scribble, &h, 60), ==, 0);
	/* whatever got through is in the attacker's own session, readable and well formed */
	hostile_read_attacker_session(&h);
	/* its moves into the witness's buffer were refused and counted */
	ASSERT_UINT(hostile_stat(&h.w.c, PF_TRACE_STATS_CHUNKS_DISCARDED), >, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ patches */

static int attack_patches(void *arg)
{
	struct hostile *h = arg;
	struct tprod p;
	unsigned seed = 11;
	uint32_t own;

	if (!hostile_producer_started(&p, h, "hostile-patcher", &own))
		return 40;
	/* real chunks waiting for patches, so that lookups succeed and offsets matter */
	for (unsigned i = 0; i < 8; i++) {
		uint8_t pkt[64] = {0x40, 0x01, 0xa2, 0x38, 0x80, 0x80, 0x80, 0x00};
		struct iovec v = {pkt, sizeof(pkt)};
		unsigned moves[1][2] = {{i, 0}};
		tprod_chunk(&p, i, SMB_LAYOUT_DIV1, 0, 1, i, SMB_FLAG_NEEDS_PATCHING, &v, 1, true);
		tprod_commit(&p, moves, 1, own, 0, NULL);
	}
	for (int round = 0; round < 200; round++) {
		struct buf a = BUF_INIT;
		/* the witness's writer and chunk ids in the witness's buffer: a producer can
		 * only reach its own chunks, whatever target it names */
		hostile_put_patches(&a, round % 2 ? h->w.target : own, &seed);
		tc_msg_free(tc_ok(&p.t, tc_call(&p.t, "CommitData", &a, -1, false)));
		sonde__buf_free(&a);
	}
	tc_close(&p.t);
	return 0;
}

TEST_TIMEOUT(hostile_patches_out_of_range, 120)
{
	struct hostile h;

	hostile_up(&h, "hostile.ds");
	ASSERT_INT(hostile_run(&h, attack_patches, &h, 60), ==, 0);
	hostile_read_attacker_session(&h);
	ASSERT_UINT(hostile_stat(&h.w.c, PF_TRACE_STATS_PATCHES_DISCARDED), >, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ remote peers */

/* A producer over TCP (shared-memory emulation): garbage, a forged SetPeerIdentity,
 * inline chunks too small, too large and as large as a frame allows, chunks and patches
 * naming the witness's buffer, SMB moves it has no SMB for. */
static char remote_addr[64]; /* sonded's TCP producer socket */

static int attack_remote(void *arg)
{
	struct hostile *h = arg;
	const char *addr = remote_addr;
	struct tprod p;
	struct tcmd cmd;
	unsigned seed = 17;
	int rc;

	if ((rc = garbage_on(addr, "ProducerPort", 3)))
		return rc;
	int fd = sonde__ipc_connect(addr);
	if (fd < 0)
		return 60;
	struct ipc_chan ch;
	struct ipc_frame id = {.msg = IPC_MSG_SET_PEER_IDENTITY, .peer_pid = 1, .peer_uid = 0};
	if (sonde__ipc_chan_init(&ch, fd) < 0 || sonde__ipc_chan_send(&ch, &id, -1) < 0 ||
	    sonde__ipc_chan_flush(&ch) < 0)
		return 61;
	ch.fd = -1;
	sonde__ipc_chan_close(&ch);
	tprod_open_fd(&p, fd, "hostile-remote", true);
	tprod_register(&p, "hostile.ds", false, false);
	if (!tprod_cmd(&p, &cmd, 10000) || cmd.kind != PF_ASYNC_CMD_SETUP_DATA_SOURCE)
		return 62;
	uint32_t own = cmd.target_buffer;
	tc_msg_free(cmd.m);
	if (!tprod_cmd(&p, &cmd, 10000) || cmd.kind != PF_ASYNC_CMD_START_DATA_SOURCE ||
	    !p.emulated)
		return 63;
	tc_msg_free(cmd.m);
	static const size_t sizes[] = {0, 1, 7, 8, 9, 4095, 4096, 4097, 65536, 120000};
	uint8_t *chunk = calloc(1, 120000);
	if (!chunk)
		return 64;
	for (int round = 0; round < 300; round++) {
		struct buf a = BUF_INIT;
		size_t n = sizes[(unsigned)rand_r(&seed) % 10];
		for (size_t k = 0; k < n && k < 64; k++)
			chunk[k] = (uint8_t)rand_r(&seed);
		/* writer 1 of the witness, chunk ids around its own */
		if (n >= 8) {
			struct smb_chunk_hdr hd = {.chunk_id = (uint32_t)rand_r(&seed) % 8,
						   .writer_id = 1,
						   .packets = smb_packets_word(1, 0)};
			memcpy(chunk, &hd, sizeof(hd));
		}
		size_t m = sonde__pb_begin(&a, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_PAGE, (unsigned)rand_r(&seed) % 4);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_CHUNK, 0);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_TARGET_BUFFER,
				     round % 3 ? h->w.target : own);
		if (round % 5)
			sonde__pb_put_bytes(&a, PF_CHUNKS_TO_MOVE_DATA, chunk, n);
		sonde__pb_end(&a, m);
		hostile_put_patches(&a, round % 2 ? h->w.target : own, &seed);
		/* a request too large for a frame is not sent: the channel refuses it */
		if (a.len < IPC_MAX_PAYLOAD - 64)
			tc_msg_free(tc_ok(&p.t, tc_call(&p.t, "CommitData", &a, -1, false)));
		sonde__buf_free(&a);
	}
	free(chunk);
	tc_close(&p.t);
	return 0;
}

TEST_TIMEOUT(hostile_remote_producer_over_tcp, 120)
{
	struct hostile h;
	char plist[512];

	/* the witness on the Unix socket, the attacker on TCP: one producer socket list */
	snprintf(remote_addr, sizeof(remote_addr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(plist, sizeof(plist), "%s/prod.sock,%s", test_tmpdir(), remote_addr);
	const char *const extra[] = {"-p", plist, NULL};
	hostile_up_args(&h, "hostile.ds", extra);
	ASSERT_INT(hostile_run(&h, attack_remote, &h, 90), ==, 0);
	hostile_read_attacker_session(&h);
	ASSERT_UINT(hostile_stat(&h.w.c, PF_TRACE_STATS_CHUNKS_DISCARDED), >, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ slow consumers */

/* A consumer that asks and asks and never reads a reply: the service stops serving it
 * (it stops reading it, or drops it), and disconnects it once its replies have not moved
 * for the 10 s send timeout. */
static int attack_never_reads(void *arg)
{
	struct hostile *h = arg;
	int fd = sonde__ipc_connect(h->d.csock);
	struct buf cfg = BUF_INIT;
	static const char *const ds[] = {"hostile.ds"};

	if (fd < 0 || !raw_bind_answered(fd, "ConsumerPort"))
		return 50;
	tcfg_basic(&cfg, 1024, ds, 1);
	if (raw_invoke(fd, 2, PF_CONSUMER_ENABLE_TRACING, PF_ENABLE_TRACING_REQ_TRACE_CONFIG,
		       &cfg) < 0)
		return 51;
	sonde__buf_free(&cfg);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	uint64_t id = 3;
	bool blocked = false;
	for (double end = test_now() + 3; test_now() < end && !blocked; id++) {
		static const uint32_t methods[] = {PF_CONSUMER_QUERY_SERVICE_STATE,
						   PF_CONSUMER_READ_BUFFERS,
						   PF_CONSUMER_GET_TRACE_STATS};
		int rc = raw_invoke(fd, id, methods[id % 3], 0, NULL);
		blocked = rc == -EAGAIN;
		if (rc < 0 && !blocked)
			return 0; /* already disconnected */
	}
	/* do not read; the service must give up on us within its 10 s send timeout */
	return raw_wait_hangup(fd, 30000) ? 0 : 52;
}

TEST_TIMEOUT(hostile_consumer_that_never_reads_is_disconnected, 120)
{
	struct hostile h;

	hostile_up(&h, NULL);
	ASSERT_INT(hostile_run(&h, attack_never_reads, &h, 90), ==, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ connections */

static int attack_churn(void *arg)
{
	const struct sonded *d = arg;
	static int held[400];

	for (int i = 0; i < 3000; i++) {
		int fd = sonde__ipc_connect(i % 2 ? d->csock : d->psock);
		if (fd < 0)
			return 60;
		if (i % 3 == 1)
			raw_bind_answered(fd, i % 2 ? "ConsumerPort" : "ProducerPort");
		else if (i % 3 == 2)
			raw_send(fd, "\x10\x00\x00\x00\x10\x01", 6); /* half a frame */
		close(fd);
	}
	for (int i = 0; i < 400; i++)
		if ((held[i] = sonde__ipc_connect(i % 2 ? d->csock : d->psock)) < 0)
			return 61;
	usleep(500000);
	for (int i = 0; i < 400; i++)
		close(held[i]);
	return 0;
}

TEST_TIMEOUT(hostile_thousands_of_connections_opened_and_dropped, 180)
{
	struct hostile h;

	hostile_up(&h, NULL);
	ASSERT_INT(hostile_run(&h, attack_churn, &h.d, 120), ==, 0);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ triggers */

/* Sends ActivateTriggers(name) until it went out (the fd is non-blocking). */
static int send_trigger(int fd, uint64_t id, const char *name)
{
	struct buf a = BUF_INIT;
	int rc;

	sonde__pb_put_string(&a, PF_ACTIVATE_TRIGGERS_REQ_NAMES, name);
	while ((rc = raw_invoke(fd, id, PF_PRODUCER_ACTIVATE_TRIGGERS, 0, &a)) == -EAGAIN)
		usleep(1000); /* the service stopped reading us for now */
	sonde__buf_free(&a);
	return rc;
}

/* Floods ActivateTriggers for 3 s, then names the trigger that would stop the session of
 * the test after more names than its token bucket can hold: that one must be ignored. */
static int attack_trigger_flood(void *arg)
{
	struct hostile *h = arg;
	int fd = sonde__ipc_connect(h->d.psock);
	struct buf a = BUF_INIT;
	char name[64];
	uint64_t id = 3;

	if (fd < 0 || !raw_bind_answered(fd, "ProducerPort"))
		return 70;
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "hostile-triggers");
	if (raw_invoke(fd, 2, PF_PRODUCER_INITIALIZE_CONNECTION, 0, &a) < 0)
		return 71;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (double end = test_now() + 3; test_now() < end; id++) {
		snprintf(name, sizeof(name), "trigger-%llu", (unsigned long long)id);
		if (send_trigger(fd, id, name) < 0)
			return 0; /* disconnected: that is an answer too */
		if (id % 64 == 0)
			raw_drain(fd); /* read replies, so that only the flood itself counts */
	}
	/* then, in one write, 5 requests of 64 names (the most one request may name) ending
	 * with the stop trigger: 320 names against a bucket of at most 128 tokens, however the
	 * attacker and the service were scheduled meanwhile */
	struct buf frames = BUF_INIT;
	for (int k = 0; k < 5; k++, id++) {
		struct ipc_frame f = {.request_id = id,
				      .msg = IPC_MSG_INVOKE_METHOD,
				      .service_id = 1,
				      .method_id = PF_PRODUCER_ACTIVATE_TRIGGERS,
				      .drop_reply = true};
		sonde__buf_reset(&a);
		for (int n = 0; n < 64; n++) {
			snprintf(name, sizeof(name), "burst-%d-%d", k, n);
			sonde__pb_put_string(&a, PF_ACTIVATE_TRIGGERS_REQ_NAMES,
				      k == 4 && n == 63 ? "hostile-stop" : name);
		}
		f.data = a.data;
		f.data_len = a.len;
		if (sonde__ipc_frame_encode(&frames, &f) < 0)
			return 73;
	}
	while (raw_send(fd, frames.data, frames.len) == -EAGAIN)
		usleep(1000);
	sonde__buf_free(&frames);
	sonde__buf_free(&a);
	usleep(300000); /* let it be handled before the connection goes */
	close(fd);
	return id > 1000 ? 0 : 72; /* the flood did happen */
}

TEST_TIMEOUT(hostile_trigger_flood_is_throttled, 120)
{
	static const char *const ds[] = {"hostile.ds"};
	struct hostile h;
	struct buf cfg = BUF_INIT, a = BUF_INIT;
	struct tprod p;
	struct tc t;

	hostile_up(&h, NULL);
	/* a session that the STOP trigger "hostile-stop" ends */
	tc_open(&t, h.d.csock, "ConsumerPort");
	tcfg_basic(&cfg, 64, ds, 1);
	size_t m = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_TRIGGER_CONFIG);
	sonde__pb_put_varint(&cfg, PF_TRIGGER_CONFIG_TRIGGER_MODE, PF_TRIGGER_MODE_STOP_TRACING);
	sonde__pb_put_varint(&cfg, PF_TRIGGER_CONFIG_TRIGGER_TIMEOUT_MS, 600000);
	size_t tm = sonde__pb_begin(&cfg, PF_TRIGGER_CONFIG_TRIGGERS);
	sonde__pb_put_string(&cfg, PF_TRIGGER_NAME, "hostile-stop");
	sonde__pb_end(&cfg, tm);
	sonde__pb_end(&cfg, m);
	uint64_t req = tcons_enable(&t, &cfg, -1);
	ASSERT_INT(hostile_run(&h, attack_trigger_flood, &h, 60), ==, 0);
	/* the flooder's own "hostile-stop" came with an empty bucket: ignored */
	ASSERT(tc_wait(&t, req, 1000) == NULL);
	/* the trigger itself works: another producer's ends the session */
	tprod_open(&p, h.d.psock, "polite-producer", false);
	sonde__pb_put_string(&a, PF_ACTIVATE_TRIGGERS_REQ_NAMES, "hostile-stop");
	tc_msg_free(tc_ok(&p.t, tc_call(&p.t, "ActivateTriggers", &a, -1, false)));
	free(tcons_wait_disabled(&t, req, 10000));
	tc_close(&p.t);
	tc_close(&t);
	sonde__buf_free(&a);
	sonde__buf_free(&cfg);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ fd exhaustion */

enum { FD_LIMIT = 64, FD_HELD = 200 };

/* More connections than sonded has fds: they wait in the listen backlog. sonded must not
 * spin on a listener it cannot accept from; once fds are free it serves new peers. */
static int attack_fd_exhaustion(void *arg)
{
	struct hostile *h = arg;
	static int held[FD_HELD];
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int i = 0; i < FD_HELD; i++)
		if ((held[i] = sonde__ipc_connect(i % 2 ? h->d.csock : h->d.psock)) < 0)
			return 80;
	/* with the witness quiet, an idle sonded sleeps; one spinning on its listener is
	 * runnable all the time, however little CPU a loaded machine gives it */
	*h->quiet = 1;
	usleep(200000);
	double t0 = test_now(), r0 = proc_runnable_s(h->d.pid);
	sleep(2);
	double busy = proc_runnable_s(h->d.pid) - r0, wall = test_now() - t0;
	*h->quiet = 0;
	for (int i = 0; i < FD_HELD; i++)
		close(held[i]);
	if (r0 < 0)
		return 0; /* no schedstat: the rest of the test still holds */
	return busy < 0.5 * wall ? 0 : 81;
}

TEST_TIMEOUT(hostile_fd_exhaustion_does_not_spin, 120)
{
	struct hostile h;
	struct rlimit rl, tight;
	struct tc c;

	ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
	tight = (struct rlimit){FD_LIMIT, rl.rlim_max}; /* sonded inherits it */
	ASSERT_OK(setrlimit(RLIMIT_NOFILE, &tight));
	hostile_up(&h, NULL);
	ASSERT_OK(setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_INT(hostile_run(&h, attack_fd_exhaustion, &h, 60), ==, 0);
	tc_open(&c, h.d.csock, "ConsumerPort"); /* accepting again */
	tc_msg_free(tc_ok(&c, tc_call(&c, "QueryCapabilities", NULL, -1, false)));
	tc_close(&c);
	hostile_down(&h);
}

/* ------------------------------------------------------------------ slow but steady */

enum { BULK_PACKETS = 1500, BULK_PAD = 990, BULK_RATE = 400 * 1024 /* bytes/s */ };

static void bulk_fill(struct tprod *p, uint32_t target)
{
	static uint8_t pad[BULK_PAD];
	unsigned pages = (unsigned)(p->smb_size / p->page), chunk = 0;

	for (uint32_t n = 0; n < BULK_PACKETS; chunk++) {
		struct buf pk[4] = {BUF_INIT, BUF_INIT, BUF_INIT, BUF_INIT};
		struct iovec v[4];
		unsigned moves[1][2] = {{chunk % pages, 0}};
		int k = 0;
		for (; k < 4 && n < BULK_PACKETS; k++, n++) {
			sonde__pb_put_varint(&pk[k], 901, n);
			sonde__pb_put_bytes(&pk[k], 902, pad, sizeof(pad));
			v[k] = (struct iovec){pk[k].data, pk[k].len};
		}
		tprod_chunk(p, chunk % pages, SMB_LAYOUT_DIV1, 0, 1, chunk, 0, v, (size_t)k, true);
		tprod_commit(p, moves, 1, target, 0, NULL);
		for (int i = 0; i < 4; i++)
			sonde__buf_free(&pk[i]);
	}
}

/* The bytes the socket fd holds now, up to budget, appended to in, without waiting;
 * false once the service closed it. */
static bool bulk_take(int fd, struct buf *in, size_t budget)
{
	while (budget) {
		ASSERT_OK(sonde__buf_reserve(in, budget));
		ssize_t r = recv(fd, in->data + in->len, budget, MSG_DONTWAIT);
		if (r == 0)
			return false;
		if (r < 0) {
			ASSERT(errno == EAGAIN || errno == EINTR);
			if (errno == EAGAIN)
				return true;
			continue;
		}
		in->len += (size_t)r;
		budget -= (size_t)r;
	}
	return true;
}

/* The complete frames of in from *off on that answer request id: each packet with field
 * 901 counted once in seen[] (*found); *more false after the last reply. pkt holds a
 * packet whose slices began in an earlier call. */
static void bulk_parse(const struct buf *in, size_t *off, uint64_t id, uint8_t *seen, int *found,
		       bool *more, struct buf *pkt)
{
	uint32_t len;

	while (in->len - *off >= 4) {
		memcpy(&len, in->data + *off, 4);
		if (in->len - *off - 4 < len)
			break;
		struct ipc_frame f;
		ASSERT_OK(sonde__ipc_frame_decode(in->data + *off + 4, len, &f));
		*off += 4 + (size_t)len;
		if (f.request_id != id)
			continue;
		ASSERT(f.success);
		*more = f.has_more;
		struct pb_reader r = pb_reader_init(f.data, f.data_len), sr;
		struct pb_field g, h;
		while (sonde__pb_next(&r, &g) > 0) {
			bool last = false;
			sr = pb_sub(&g);
			while (sonde__pb_next(&sr, &h) > 0) {
				if (h.num == PF_SLICE_DATA)
					sonde__buf_append(pkt, h.ptr, h.len);
				else if (h.num == PF_SLICE_LAST_SLICE_FOR_PACKET)
					last = h.u != 0;
			}
			if (!last)
				continue;
			struct pb_reader pr = pb_reader_init(pkt->data, pkt->len);
			while (sonde__pb_next(&pr, &h) > 0)
				if (h.num == 901 && h.u < BULK_PACKETS && !seen[h.u]++)
					(*found)++;
			sonde__buf_reset(pkt);
		}
	}
}

/* The peer closed fd (POLLHUP), seen without reading from it. */
static bool hung_up(int fd)
{
	struct pollfd p = {fd, 0, 0};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
}

/* An in-process service with a 2 s stall timeout, a consumer c that asked for a 1.5 MB
 * trace (the ReadBuffers request id in *id) and has read none of it yet. */
static void bulk_up(struct inproc *h, struct tprod *p, struct tc *c, uint64_t *id)
{
	static const char *const ds[] = {"bulk.ds"};
	struct sonde_service_opts o = {.sz = sizeof(o), .stall_timeout_ms = 2000};
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;

	inproc_up_opts(h, &o);
	inproc_producer(h, p, "bulk-producer", false);
	tprod_register(p, "bulk.ds", false, false);
	inproc_consumer(h, c);
	tcfg_basic(&cfg, 4096, ds, 1);
	tcons_enable(c, &cfg, -1);
	tprod_expect(p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	bulk_fill(p, target);
	inproc_run(h); /* every commit taken before the read */
	*id = tc_call(c, "ReadBuffers", NULL, -1, false);
	ASSERT_INT(sonde__ipc_chan_flush(&c->ch), ==, 0);
	ASSERT(c->ch.rx.len == c->ch.rx_off); /* what comes next is read here, raw */
	inproc_run(h);
	sonde__buf_free(&cfg);
}

/* A consumer reading a 1.5 MB trace at 400 KB/s of the service's clock (120 KB every
 * 300 ms) takes almost 4 s, longer than the service's stall timeout (set to 2 s), but it
 * keeps taking bytes: it is slow, not stalled, and gets everything. In-process: the
 * clock moves only when the test says. */
TEST_TIMEOUT(hostile_slow_but_steady_reader_is_served, 60)
{
	static uint8_t seen[BULK_PACKETS];
	struct inproc h;
	struct tprod p;
	struct tc c;
	struct buf in = BUF_INIT, pkt = BUF_INIT;
	size_t off = 0;
	int found = 0;
	uint64_t id;

	bulk_up(&h, &p, &c, &id);
	uint64_t t0 = h.now_ns;
	for (bool more = true; more;) {
		ASSERT(bulk_take(c.ch.fd, &in, BULK_RATE * 3 / 10));
		bulk_parse(&in, &off, id, seen, &found, &more, &pkt);
		inproc_advance(&h, 300);
	}
	ASSERT_INT(found, ==, BULK_PACKETS);
	/* it did outlast the stall timeout by a second at least */
	printf("read in %llu ms of the service's clock\n",
	       (unsigned long long)((h.now_ns - t0) / 1000000));
	ASSERT(h.now_ns - t0 > 3000 * 1000000ull);
	ASSERT(!hung_up(c.ch.fd));
	sonde__buf_free(&in);
	sonde__buf_free(&pkt);
	tc_close(&c);
	tc_close(&p.t);
	inproc_down(&h);
}

/* The same consumer taking nothing more after its first 120 KB is closed once the
 * service's clock passed the stall timeout (2 s) since its last bytes were taken, at the
 * service's next housekeeping (each second), and not before. */
TEST_TIMEOUT(hostile_stalled_reader_is_closed_at_the_stall_timeout, 60)
{
	static uint8_t seen[BULK_PACKETS];
	struct inproc h;
	struct tprod p;
	struct tc c;
	struct buf in = BUF_INIT, pkt = BUF_INIT;
	size_t off = 0;
	int found = 0;
	bool more = true;
	uint64_t id;

	bulk_up(&h, &p, &c, &id);
	ASSERT(bulk_take(c.ch.fd, &in, BULK_RATE * 3 / 10));
	bulk_parse(&in, &off, id, seen, &found, &more, &pkt);
	ASSERT(more && in.len > 0);
	inproc_run(&h); /* the service sends more: its last progress, now */
	inproc_advance(&h, 2000);
	ASSERT(!hung_up(c.ch.fd));
	inproc_advance(&h, 1000);
	ASSERT(hung_up(c.ch.fd));
	sonde__buf_free(&in);
	sonde__buf_free(&pkt);
	tc_close(&c);
	tc_close(&p.t);
	inproc_down(&h);
}
