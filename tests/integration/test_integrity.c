/* sonded's integrity against ordinary clients (issue 11): data of an ended session never
 * reaches the next one, descriptors passed to sonded never leak, and a second sonded
 * never takes over the sockets of a running one. Everything is driven over sonded's
 * sockets. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/log.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "client_util.h"
#include "hostile_util.h"
#include "ipc/cxmsg.h"
#include "ipc/fdpass.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "sec_util.h"
#include "svc_inproc.h"
#include "svc_util.h"

enum {
	TAG = 900,	   /* TracePacket field of the test strings */
	LATE_PACKETS = 20, /* packets each writer of the SDK-like producer writes */
};

/* ------------------------------------------------------------------ sessions */

static uint64_t begin_session(struct tc *t, const char *ds)
{
	const char *const dss[] = {ds};
	struct buf cfg = BUF_INIT;
	uint64_t req;

	tcfg_basic(&cfg, 256, dss, 1);
	req = tcons_enable(t, &cfg, -1);
	sonde__buf_free(&cfg);
	return req;
}

/* Disables t's session, waits for its end and reads it into trace. The buffers stay until
 * free_session. */
static void end_session(struct tc *t, uint64_t enable_req, struct buf *trace)
{
	tc_msg_free(tc_ok(t, tc_call(t, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(t, enable_req, 10000));
	tcons_read(t, trace);
}

static void free_session(struct tc *t)
{
	tc_msg_free(tc_ok(t, tc_call(t, "FreeBuffers", NULL, -1, false)));
}

static int count_str(const struct buf *trace, const char *s)
{
	return trace_count(trace, s, strlen(s), NULL);
}

/* ------------------------------------------------------------------ raw producer */

static void register_writer(struct tprod *p, uint32_t writer, uint32_t target)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_WRITER_ID, writer);
	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_TARGET_BUFFER, target);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "RegisterTraceWriter", &a, -1, false)));
	sonde__buf_free(&a);
}

/* A complete chunk of writer in (page, 0) holding n packets with the string s. */
static void put_chunk(struct tprod *p, unsigned page, uint16_t writer, uint32_t chunk_id,
		      const char *s, int n)
{
	struct buf pk[8];
	struct iovec v[8] = {{0}};

	ASSERT_INT(n, <=, 8);
	for (int i = 0; i < n; i++) {
		pk[i] = (struct buf)BUF_INIT;
		sonde__pb_put_varint(&pk[i], PF_PACKET_TIMESTAMP, (uint64_t)i + 1);
		sonde__pb_put_string(&pk[i], TAG, s);
		v[i] = (struct iovec){pk[i].data, pk[i].len};
	}
	tprod_chunk(p, page, SMB_LAYOUT_DIV1, 0, writer, chunk_id, 0, v, (size_t)n, true);
	for (int i = 0; i < n; i++)
		sonde__buf_free(&pk[i]);
}

static void put_patch(struct buf *a, uint32_t target, uint32_t writer, uint32_t chunk_id)
{
	size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_TARGET_BUFFER, target);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_WRITER_ID, writer);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_CHUNK_ID, chunk_id);
	size_t k = sonde__pb_begin(a, PF_CHUNK_TO_PATCH_PATCHES);
	/* over "late" in the first packet: after its size (4), timestamp (2), tag and length (3) */
	sonde__pb_put_varint(a, PF_PATCH_OFFSET, 9);
	sonde__pb_put_bytes(a, PF_PATCH_DATA, "LATE", 4);
	sonde__pb_end(a, k);
	sonde__pb_end(a, m);
}

/* A writer's last chunk (and a patch of it) committed to its session's buffer after that
 * session was freed and the next one started, as the SDK does when it replaces the
 * writer: none of it reaches the new session; both are counted as discarded. */
TEST(integrity_late_chunk_of_freed_buffer_is_dropped)
{
	static const unsigned first[1][2] = {{0, 0}}, late[1][2] = {{1, 0}}, fresh[1][2] = {{2, 0}};
	struct sonded d;
	struct tprod p;
	struct tc c1, c2;
	struct tcmd cmd;
	struct buf t1 = BUF_INIT, t2 = BUF_INIT, patch = BUF_INIT;

	sonded_start(&d, NULL);
	tprod_open(&p, d.psock, "late-producer", false);
	tprod_register(&p, "late.ds", false, false);

	tc_open(&c1, d.csock, "ConsumerPort");
	uint64_t e1 = begin_session(&c1, "late.ds");
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t b1 = cmd.target_buffer;
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	register_writer(&p, 1, b1);
	put_chunk(&p, 0, 1, 0, "first session", 4);
	tprod_commit(&p, first, 1, b1, 0, NULL);
	/* the writer's last chunk: complete in the SMB, not committed yet */
	put_chunk(&p, 1, 1, 1, "late of the first session", 4);
	end_session(&c1, e1, &t1);
	tprod_expect(&p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	ASSERT_INT(count_str(&t1, "first session"), ==, 4);
	free_session(&c1);

	tc_open(&c2, d.csock, "ConsumerPort");
	uint64_t e2 = begin_session(&c2, "late.ds");
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t b2 = cmd.target_buffer;
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	/* now the old writer is replaced: its last chunk and a patch go to its old buffer */
	put_patch(&patch, b1, 1, 1);
	tprod_commit(&p, late, 1, b1, 0, &patch);
	register_writer(&p, 2, b2);
	put_chunk(&p, 2, 2, 0, "second session", 3);
	tprod_commit(&p, fresh, 1, b2, 0, NULL);
	end_session(&c2, e2, &t2);
	tprod_expect(&p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	ASSERT_INT(count_str(&t2, "second session"), ==, 3);
	ASSERT_INT(count_str(&t2, "first session"), ==, 0);
	ASSERT_UINT(hostile_stat(&c2, PF_TRACE_STATS_CHUNKS_DISCARDED), ==, 1);
	ASSERT_UINT(hostile_stat(&c2, PF_TRACE_STATS_PATCHES_DISCARDED), ==, 1);
	ASSERT_UINT(b2, !=, b1); /* the freed id is not handed out again */
	free_session(&c2);

	sonde__buf_free(&patch);
	sonde__buf_free(&t1);
	sonde__buf_free(&t2);
	tc_close(&c1);
	tc_close(&c2);
	tc_close(&p.t);
	sonded_stop(&d);
}

/* ------------------------------------------------------------------ SDK-like producer */

/* A producer written like an SDK app: each data source instance gets a writer at its
 * start, kept (as the SDK keeps a thread's writer) past the instance's stop, and replaced
 * only at the next instance's start, after writing into it once more; the replaced writer
 * commits its last chunk, addressed to the buffer of the session that ended. */
struct sdk_like {
	struct sonde_producer *p;
	struct sonde_trace_writer *w;
	int session; /* of w */
};

static void write_tagged(struct sonde_trace_writer *w, int session)
{
	char s[64];

	snprintf(s, sizeof(s), "packet of session %d;", session);
	for (int i = 0; i < LATE_PACKETS; i++) {
		sonde_trace_writer__begin_packet(w);
		sonde_trace_writer__append_varint(w, PF_PACKET_TIMESTAMP, (uint64_t)i + 1);
		sonde_trace_writer__append_bytes(w, TAG, s, strlen(s));
		sonde_trace_writer__end_packet(w);
	}
}

static void sdk_like_start(void *ctx, uint64_t inst, const void *cfg, size_t len)
{
	struct sdk_like *x = ctx;

	if (x->w) {
		write_tagged(x->w, x->session);
		sonde_trace_writer__free(x->w);
	}
	x->session++;
	x->w = sonde_producer__new_writer(x->p, inst);
	if (!x->w)
		_exit(3);
	write_tagged(x->w, x->session);
	sonde_trace_writer__flush(x->w);
}

static int sdk_like_main(const char *sock)
{
	struct sdk_like x = {0};
	struct sonde_producer_opts po = {.sz = sizeof(po), .name = "sdk-like", .socket = sock};
	struct sonde_data_source_cbs cbs = {
		.sz = sizeof(cbs), .start = sdk_like_start, .ctx = &x, .will_notify_on_stop = true};

	if (!(x.p = sonde_producer__new(&po)) ||
	    sonde_producer__register_data_source(x.p, "sdk.ds", &cbs) < 0)
		return 2;
	for (double end = test_now() + 60; test_now() < end;)
		if (sonde_producer__poll(x.p, 100) < 0)
			break; /* the service went away */
	sonde_trace_writer__free(x.w);
	sonde_producer__free(x.p);
	return 0;
}

static void open_consumer_as(struct tc *t, const struct sonded *d, uid_t uid)
{
	if (uid == 0)
		tc_open(t, d->csock, "ConsumerPort");
	else
		tc_open_fd(t, sec_connect_as(uid, d->csock), "ConsumerPort");
}

/* Two sessions back to back on the SDK-like producer, of consumers of uids first and
 * second: the second trace holds its own packets and none of the first session's. */
static void back_to_back(uid_t first, uid_t second)
{
	struct sonded d;
	struct tc c1, c2;
	struct buf t1 = BUF_INIT, t2 = BUF_INIT;

	if (first != 0 || second != 0)
		sec_require_root();
	sonded_start(&d, NULL);
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0)
		_exit(sdk_like_main(d.psock));
	client_wait_data_source(d.csock, "sdk.ds");

	open_consumer_as(&c1, &d, first);
	end_session(&c1, begin_session(&c1, "sdk.ds"), &t1);
	ASSERT_INT(count_str(&t1, "packet of session 1;"), ==, LATE_PACKETS);
	free_session(&c1);

	open_consumer_as(&c2, &d, second);
	end_session(&c2, begin_session(&c2, "sdk.ds"), &t2);
	ASSERT_INT(count_str(&t2, "packet of session 2;"), ==, LATE_PACKETS);
	ASSERT_INT(count_str(&t2, "packet of session 1;"), ==, 0);
	/* the old writer's last chunk did arrive, and was dropped */
	ASSERT_UINT(hostile_stat(&c2, PF_TRACE_STATS_CHUNKS_DISCARDED), >=, 1);
	free_session(&c2);

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	sonde__buf_free(&t1);
	sonde__buf_free(&t2);
	tc_close(&c1);
	tc_close(&c2);
	sonded_stop(&d);
}

TEST(integrity_replaced_writer_data_stays_in_its_session)
{
	back_to_back(0, 0);
}

TEST(integrity_root_session_data_never_reaches_nobody)
{
	back_to_back(0, SEC_NOBODY);
}

TEST(integrity_nobody_session_data_never_reaches_root)
{
	back_to_back(SEC_NOBODY, 0);
}

/* ------------------------------------------------------------------ passed fds */

static const int fd_counts[] = {0, 1, 2, 8, IPC_FDPASS_MAX};

/* sonded with a consumer connection kept open, and its descriptors once every earlier
 * connection is gone: the BindService round trip of the new connection comes after
 * sonded read the EOFs of sonded_start's probes. */
static char *fd_baseline(struct sonded *d, struct tc *keep)
{
	static const char *const args[] = {"--no-probes", NULL};

	sonded_start(d, args);
	tc_open(keep, d->csock, "ConsumerPort");
	tc_msg_free(tc_ok(keep, tc_call(keep, "QueryCapabilities", NULL, -1, false)));
	return proc_fd_snapshot(d->pid);
}

/* Every descriptor sonded holds was there at the baseline, waited for up to 10 s (sonded
 * closes a connection's once it has read its EOF). The test compares descriptors, not
 * their count: a count also falls below the baseline when a descriptor open then closes
 * (a loaded CI run ended at 13 against a baseline of 14 and failed), which leaks nothing,
 * while a leak is a descriptor that was not there before. */
static void no_fd_leaked(pid_t pid, const char *base)
{
	char *extra = proc_fd_new_since(pid, base, 10000);

	if (extra)
		FAIL("sonded holds descriptors it did not hold at the baseline:%s\nbaseline:%s",
		     extra, base);
}

/* Fills fds[0..k) with copies of one pipe end (each arrives as a descriptor of its own). */
static void fill_fds(int *fds, int k, int fd)
{
	for (int i = 0; i < k; i++)
		fds[i] = fd;
}

/* InvokeMethod(method) with no arguments as request 2, carrying k fds on its one sendmsg. */
static void invoke_with_fds(int sock, uint32_t method, const int *fds, int k)
{
	struct ipc_frame f = {.request_id = 2,
			      .msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = 1,
			      .method_id = method};
	struct buf b = BUF_INIT;

	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_INT(sonde__ipc_fdpass_send(sock, b.data, b.len, fds, (size_t)k, MSG_NOSIGNAL), ==, b.len);
	sonde__buf_free(&b);
}

/* On a producer or consumer socket, a frame with k fds for a method that may take one
 * (takes_fd) and for one that takes none: a frame with no fd, or one fd for takes_fd, must
 * be answered; any other must end the connection. Returns how many connections sonded
 * wrongly kept (checked by the caller after the fd count, which is what matters most). */
static int stream_fd_cases(const char *sock, const char *service, uint32_t takes_fd,
			   uint32_t takes_none, int pipe_fd)
{
	static int fds[IPC_FDPASS_MAX];
	struct raw_reply r;
	int kept = 0;

	for (size_t i = 0; i < sizeof(fd_counts) / sizeof(fd_counts[0]); i++) {
		for (int m = 0; m < 2; m++) {
			int k = fd_counts[i], s = sonde__ipc_connect(sock);
			uint32_t method = m ? takes_none : takes_fd;
			ASSERT_OK(s);
			ASSERT(raw_bind_answered(s, service));
			fill_fds(fds, k, pipe_fd);
			invoke_with_fds(s, method, fds, k);
			if (k == 0 || (k == 1 && method == takes_fd)) {
				ASSERT_INT(raw_reply(s, 2, &r), ==, IPC_MSG_INVOKE_METHOD_REPLY);
			} else if (!raw_wait_eof(s, 5000)) {
				fprintf(stderr, "%s: %d fds on method %u kept the connection\n",
					service, k, method);
				kept++;
			}
			close(s);
		}
	}
	return kept;
}

/* A connector request for a producer with k fds: only one fd, and a connected socket, is
 * accepted; the reply's status says which. */
static uint32_t connector_request(const char *xsock, const int *fds, int k)
{
	struct cx_request q = {.id = 7, .kind = CX_KIND_PRODUCER};
	struct cx_reply rep;
	struct buf b = BUF_INIT;
	uint8_t in[CX_MAX_MSG];
	int s = sonde__ipc_connect_type(xsock, SOCK_SEQPACKET);

	ASSERT_OK(s);
	sonde__cx_request_encode(&q, &b);
	ASSERT_INT(sonde__ipc_fdpass_send(s, b.data, b.len, fds, (size_t)k, MSG_NOSIGNAL), ==, b.len);
	struct pollfd p = {s, POLLIN, 0};
	ASSERT_INT(poll(&p, 1, 10000), ==, 1);
	ssize_t n = recv(s, in, sizeof(in), 0);
	ASSERT_INT(n, >, 0);
	ASSERT_OK(sonde__cx_reply_decode(in, (size_t)n, &rep));
	ASSERT_UINT(rep.id, ==, 7);
	close(s);
	sonde__buf_free(&b);
	return rep.status;
}

static void connector_fd_cases(const char *xsock, int pipe_fd)
{
	static int fds[IPC_FDPASS_MAX];
	int sv[2];

	for (size_t i = 0; i < sizeof(fd_counts) / sizeof(fd_counts[0]); i++) {
		int k = fd_counts[i];
		fill_fds(fds, k, pipe_fd);
		uint32_t st = connector_request(xsock, fds, k);
		ASSERT_UINT(st, ==, k == 1 ? ENOTSOCK : EBADF); /* a pipe, or a wrong count */
	}
	/* and one that is taken: the connection it becomes ends when its peer goes */
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_UINT(connector_request(xsock, &sv[1], 1), ==, 0);
	close(sv[1]);
	close(sv[0]);
}

/* Connections opened and dropped in every state sonded can see them in. */
static void churn(const struct sonded *d)
{
	for (int i = 0; i < 300; i++) {
		int s = sonde__ipc_connect(i % 2 ? d->csock : d->psock);
		ASSERT_OK(s);
		if (i % 3 == 1)
			raw_bind_answered(s, i % 2 ? "ConsumerPort" : "ProducerPort");
		else if (i % 3 == 2)
			raw_send(s, "\x10\x00\x00\x00\x10\x01", 6); /* half a frame */
		close(s);
	}
}

/* An ordinary session after all that: a raw producer's packets reach its consumer. */
static void session_works(const struct sonded *d)
{
	static const unsigned moves[1][2] = {{0, 0}};
	struct tprod p;
	struct tc c;
	struct tcmd cmd;
	struct buf t = BUF_INIT;

	tprod_open(&p, d->psock, "after-producer", false);
	tprod_register(&p, "after.ds", false, false);
	tc_open(&c, d->csock, "ConsumerPort");
	uint64_t e = begin_session(&c, "after.ds");
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	put_chunk(&p, 0, 1, 0, "still works", 5);
	tprod_commit(&p, moves, 1, target, 0, NULL);
	end_session(&c, e, &t);
	ASSERT_INT(count_str(&t, "still works"), ==, 5);
	sonde__buf_free(&t);
	tc_close(&c);
	tc_close(&p.t);
}

/* Every descriptor passed to sonded is taken or closed: 0, 1, 2, 8 and 253 fds on
 * frames of the producer and consumer sockets and on connector requests, then connection
 * churn, and sonded's fd count is back at its baseline exactly. */
TEST(integrity_passed_fds_never_leak)
{
	struct sonded d;
	struct tc keep;
	int pp[2];

	char *fds0 = fd_baseline(&d, &keep);
	ASSERT_OK(pipe2(pp, O_CLOEXEC));
	int kept = stream_fd_cases(d.psock, "ProducerPort", PF_PRODUCER_INITIALIZE_CONNECTION,
				   PF_PRODUCER_SYNC, pp[0]);
	kept += stream_fd_cases(d.csock, "ConsumerPort", PF_CONSUMER_CLONE_SESSION,
				PF_CONSUMER_QUERY_CAPABILITIES, pp[0]);
	connector_fd_cases(d.xsock, pp[0]);
	churn(&d);
	no_fd_leaked(d.pid, fds0);
	ASSERT_INT(kept, ==, 0);
	session_works(&d);
	no_fd_leaked(d.pid, fds0);
	free(fds0);
	close(pp[0]);
	close(pp[1]);
	tc_close(&keep);
	sonded_stop(&d);
}

/* The flood: connections sending frames that carry two fds each, as fast as
 * sonded takes them. Nothing piles up, and the first such frame ends a connection. */
TEST(integrity_two_fd_flood_ends_the_connection)
{
	struct ipc_frame f = {
		.msg = IPC_MSG_INVOKE_METHOD, .service_id = 1, .method_id = PF_PRODUCER_SYNC};
	struct sonded d;
	struct tc keep;
	struct buf b = BUF_INIT;
	int pp[2], fds[2];

	char *fds0 = fd_baseline(&d, &keep);
	ASSERT_OK(pipe2(pp, O_CLOEXEC));
	fill_fds(fds, 2, pp[0]);
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	for (int c = 0; c < 20; c++) {
		int s = sonde__ipc_connect(d.psock);
		ASSERT_OK(s);
		ASSERT(raw_bind_answered(s, "ProducerPort"));
		for (int i = 0; i < 200; i++)
			if (sonde__ipc_fdpass_send(s, b.data, b.len, fds, 2, MSG_NOSIGNAL | MSG_DONTWAIT) <
			    0)
				break; /* sonded hung up (or is not reading for now) */
		close(s);
	}
	no_fd_leaked(d.pid, fds0);
	free(fds0);
	int s = sonde__ipc_connect(d.psock);
	ASSERT_OK(s);
	ASSERT(raw_bind_answered(s, "ProducerPort"));
	ASSERT_INT(sonde__ipc_fdpass_send(s, b.data, b.len, fds, 2, MSG_NOSIGNAL), ==, b.len);
	ASSERT(raw_wait_eof(s, 10000));
	close(s);
	session_works(&d);
	sonde__buf_free(&b);
	close(pp[0]);
	close(pp[1]);
	tc_close(&keep);
	sonded_stop(&d);
}

/* ------------------------------------------------------------------ one service per socket */

/* Starts sonded on the given names (x may be "none") and waits until p and c answer. */
static void start_on(struct sonded *d, const char *p, const char *c, const char *x)
{
	const char *argv[] = {test_bin("sonded"), "-p", p, "-c", c, "-x", x, "--no-probes", NULL};

	snprintf(d->psock, sizeof(d->psock), "%s", p);
	snprintf(d->csock, sizeof(d->csock), "%s", c);
	snprintf(d->xsock, sizeof(d->xsock), "%s", x);
	d->pid = test_spawn(argv);
	for (double end = test_now() + 10;; usleep(10000)) {
		int a = sonde__ipc_connect(p), b = a >= 0 ? sonde__ipc_connect(c) : -1;
		if (a >= 0)
			close(a);
		if (b >= 0) {
			close(b);
			return;
		}
		if (test_now() > end)
			FAIL("sonded did not start listening on %s and %s", p, c);
	}
}

/* Runs a second sonded on the given names; asserts it exits non-zero with one line that
 * names `named` and says why. */
static void second_refused(const char *p, const char *c, const char *x, const char *named,
			   const char *why)
{
	const char *argv[] = {test_bin("sonded"), "-p", p, "-c", c, "-x", x, "--no-probes", NULL};
	struct test_output o;

	test_run(&o, 20, argv);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, named);
	ASSERT_CONTAINS(o.err, why);
	const char *nl = strchr(o.err, '\n');
	if (!nl || nl[1] != '\0')
		FAIL("expected one line, got:\n%s", o.err);
	test_output_free(&o);
}

static ino_t inode_of(const char *path)
{
	struct stat st;

	ASSERT_OK(lstat(path, &st));
	ASSERT(S_ISSOCK(st.st_mode));
	return st.st_ino;
}

#define LIVE "a tracing service is already running there"

/* A second sonded on any one of a running sonded's socket paths exits non-zero with one
 * line naming that path, touches none of them (nor the fresh ones it was given), and the
 * first one still serves sessions. */
TEST(integrity_second_sonded_refuses_live_sockets)
{
	static const char *const args[] = {"--no-probes", NULL};
	struct sonded d;

	sonded_start(&d, args);
	ino_t ip = inode_of(d.psock), ic = inode_of(d.csock), ix = inode_of(d.xsock);
	const char *p2 = test_path("p2.sock"), *c2 = test_path("c2.sock"),
		   *x2 = test_path("x2.sock");

	second_refused(d.psock, c2, x2, d.psock, LIVE);
	second_refused(p2, d.csock, x2, d.csock, LIVE);
	second_refused(p2, c2, d.xsock, d.xsock, LIVE);
	/* the fresh sockets the refused instances bound before failing are gone with them */
	ASSERT_INT(access(p2, F_OK), ==, -1);
	ASSERT_INT(access(c2, F_OK), ==, -1);
	ASSERT_UINT(inode_of(d.psock), ==, ip);
	ASSERT_UINT(inode_of(d.csock), ==, ic);
	ASSERT_UINT(inode_of(d.xsock), ==, ix);
	session_works(&d);
	sonded_stop(&d);
}

/* Bound and closed, never unlinked: what a service that was killed leaves behind. */
static void make_stale_socket(const char *path)
{
	int fd = sonde__ipc_listen(path);

	ASSERT_OK(fd);
	close(fd);
	ASSERT_INT(sonde__ipc_connect(path), ==, -ECONNREFUSED);
}

/* A socket file nothing answers on is replaced; a path that is not a socket is an error,
 * and the file is left as it was. */
TEST(integrity_stale_socket_replaced_other_files_kept)
{
	struct sonded d;
	const char *p = test_path("stale-p.sock"), *c = test_path("stale-c.sock"),
		   *x = test_path("stale-x.sock"), *f = test_path("file");

	make_stale_socket(p);
	make_stale_socket(c);
	make_stale_socket(x);
	start_on(&d, p, c, x);
	session_works(&d);
	sonded_stop(&d);
	/* at exit sonded removed the sockets it had bound */
	ASSERT_INT(access(p, F_OK), ==, -1);
	ASSERT_INT(access(x, F_OK), ==, -1);

	test_write_file(f, "keep me", 7);
	second_refused(f, c, "none", f, "exists and is not a socket");
	second_refused(p, f, "none", f, "exists and is not a socket");
	ASSERT_INT(access(p, F_OK), ==, -1); /* bound by the refused one, removed by it */
	size_t n;
	char *txt = test_read_file(f, &n);
	ASSERT(txt != NULL);
	ASSERT_INT(n, ==, 7);
	ASSERT_MEM_EQ(txt, "keep me", 7);
	free(txt);
}

/* sonded unlinks at exit only the socket files it bound: one that replaced its own (after
 * someone removed it) belongs to someone else and stays, still listening. */
TEST(integrity_exit_leaves_a_replaced_socket_alone)
{
	static const char *const args[] = {"--no-probes", NULL};
	struct sonded d;

	sonded_start(&d, args);
	ASSERT_OK(unlink(d.psock));
	int other = sonde__ipc_listen(d.psock);
	ASSERT_OK(other);
	ino_t mine = inode_of(d.psock);
	sonded_stop(&d);
	ASSERT_UINT(inode_of(d.psock), ==, mine);
	int s = sonde__ipc_connect(d.psock);
	ASSERT_OK(s); /* still the replacement's listener */
	close(s);
	close(other);
	/* its own consumer and connector sockets it did remove */
	ASSERT_INT(access(d.csock, F_OK), ==, -1);
	ASSERT_INT(access(d.xsock, F_OK), ==, -1);
}

/* Abstract names: a second sonded on a taken one fails the same way. */
TEST(integrity_second_sonded_refuses_abstract_names)
{
	char p[64], c[64], p2[64], c2[64];
	struct sonded d;

	snprintf(p, sizeof(p), "@sonde-integrity-%d-p", (int)getpid());
	snprintf(c, sizeof(c), "@sonde-integrity-%d-c", (int)getpid());
	snprintf(p2, sizeof(p2), "@sonde-integrity-%d-p2", (int)getpid());
	snprintf(c2, sizeof(c2), "@sonde-integrity-%d-c2", (int)getpid());
	start_on(&d, p, c, "none");
	second_refused(p, c2, "none", p, LIVE);
	second_refused(p2, c, "none", c, LIVE);
	session_works(&d);
	sonded_stop(&d);
}

/* ------------------------------------------------------------------ accept failures */

/* The accept warnings the service logged, counted by a log callback. */
struct accept_warnings {
	int n, with_count; /* with "N more failures since the last report" */
};

static void count_accept_warning(enum sonde_log_level level, const char *msg, void *ctx)
{
	struct accept_warnings *w = ctx;

	if (level != SONDE_LOG_WARN || !strstr(msg, "cannot accept connections: "))
		return;
	w->n++;
	w->with_count += strstr(msg, "more failures since the last report") != NULL;
}

/* Out of fds, the service says so at warn level (the default), once a second of its clock
 * rather than at each of its listeners' retries every 100 ms, and counts the failures it
 * did not report. In-process: the test fills its own descriptor table, which is the
 * service's, and a child whose table is its own connects to both listeners. */
TEST(integrity_accept_failures_warn_rate_limited)
{
	struct inproc h;
	struct sonded d;
	struct tc c;
	struct accept_warnings w = {0};
	struct rlimit rl;
	int ready[2], filled[512], n_filled = 0;
	char b;

	inproc_up(&h);
	inproc_sockets(&h, &d);
	ASSERT_OK(pipe2(ready, O_CLOEXEC));
	ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
	rl.rlim_cur = 256;
	ASSERT_OK(setrlimit(RLIMIT_NOFILE, &rl));
	for (int fd; (fd = fcntl(0, F_DUPFD_CLOEXEC, 0)) >= 0;) {
		ASSERT_INT(n_filled, <, 512);
		filled[n_filled++] = fd;
	}
	ASSERT_INT(errno, ==, EMFILE);
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		for (int i = 0; i < n_filled; i++)
			close(filled[i]);
		if (sonde__ipc_connect(d.psock) < 0 || sonde__ipc_connect(d.csock) < 0 ||
		    write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	ASSERT_INT(read(ready[0], &b, 1), ==, 1);
	sonde_log__set_callback(count_accept_warning, &w);
	/* the two listeners fail at 0 and at each of their retries, every 100 ms */
	inproc_advance(&h, 3500);
	sonde_log__set_callback(NULL, NULL);
	printf("%d accept warnings in 3.5 s, %d of them with a count\n", w.n, w.with_count);
	ASSERT_INT(w.n, ==, 4); /* at 0, 1, 2 and 3 s */
	ASSERT_INT(w.with_count, ==, 3);
	for (int i = 0; i < n_filled; i++)
		close(filled[i]);
	/* accepting again */
	inproc_consumer(&h, &c);
	tc_msg_free(tc_ok(&c, tc_call(&c, "QueryCapabilities", NULL, -1, false)));
	tc_close(&c);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	inproc_down(&h);
}
