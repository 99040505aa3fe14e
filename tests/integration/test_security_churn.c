/* The service against a local user who churns buffer ids or floods requests, and against
 * idle network peers (docs/service.md "Security" and "Limits"). Run as root: the hostile
 * clients are uid nobody, the victims root, as in test_security.c. The buffer-id churn and
 * the idle peers and `sonde trace --query` run in-process (svc_inproc.h, the clock moved
 * by the test); the request flood, which measures sonded's RSS, runs against sonded. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "sec_util.h"
#include "svc_inproc.h"
#include "svc_util.h"
#include <sonde/service.h>

static const char *const sdk_ds[] = {"test.ds"};

static void register_writer(struct tprod *p, uint16_t writer, uint32_t target)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_WRITER_ID, writer);
	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_TARGET_BUFFER, target);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "RegisterTraceWriter", &a, -1, false)));
	sonde__buf_free(&a);
}

/* One chunk of writer holding a packet tagged tag, on page `page`, moved into target. */
static void commit_tagged(struct tprod *p, unsigned page, uint16_t writer, uint32_t chunk_id,
			  const char *tag, uint32_t target)
{
	struct buf pk = BUF_INIT;
	unsigned moves[1][2] = {{page, 0}};

	svc_make_packet(&pk, tag, 0);
	struct iovec v[1] = {{pk.data, pk.len}};
	tprod_chunk(p, page, SMB_LAYOUT_DIV4, 0, writer, chunk_id, 0, v, 1, true);
	tprod_commit(p, moves, 1, target, 0, NULL);
	sonde__buf_free(&pk);
}

/* A config of n buffers of 4 KiB and one data source nobody serves. */
static void burner_config(struct buf *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t m = sonde__pb_begin(b, PF_TRACE_CONFIG_BUFFERS);
		sonde__pb_put_varint(b, PF_BUFFER_CONFIG_SIZE_KB, 4);
		sonde__pb_end(b, m);
	}
	size_t d = sonde__pb_begin(b, PF_TRACE_CONFIG_DATA_SOURCES);
	size_t c = sonde__pb_begin(b, PF_TC_DATA_SOURCE_CONFIG);
	sonde__pb_put_string(b, PF_DS_CONFIG_NAME, "nothing.ds");
	sonde__pb_end(b, c);
	sonde__pb_end(b, d);
}

/* One EnableTracing of n buffers then FreeBuffers on c: the ids it took. Returns the
 * session's error (malloc'd) when it was refused, else NULL. */
static char *burn_ids(struct tc *c, size_t n)
{
	struct buf cfg = BUF_INIT;

	burner_config(&cfg, n);
	uint64_t en = tcons_enable(c, &cfg, -1);
	uint64_t fr = tc_call(c, "FreeBuffers", NULL, -1, false);
	char *err = tcons_wait_disabled(c, en, 20000);
	tc_msg_free(tc_ok(c, fr));
	sonde__buf_free(&cfg);
	return err;
}

/* Burns the ids after `last` up to and including want - 1 with burner sessions of c, as
 * fast as the service lets it. Returns how many it got; stops at the first refusal, whose
 * error goes to *refusal (NULL if none). */
static size_t burn_until(struct tc *c, uint32_t last, uint32_t want, char **refusal)
{
	size_t todo = (want + 65535u - last - 1) % 65535u, done = 0;

	*refusal = NULL;
	while (done < todo) {
		size_t n = todo - done > 128 ? 128 : todo - done;
		char *err = burn_ids(c, n);
		if (err) {
			*refusal = err;
			break;
		}
		done += n;
	}
	return done;
}

/* The root session of the scenario: an SDK-like root producer whose writer 1 is bound to
 * the session's buffer; the session ends and its buffers go, the writer stays bound.
 * Returns the buffer id. */
static uint32_t root_session_with_bound_writer(struct sonded *d, struct tprod *p)
{
	struct tc root;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;

	tprod_open(p, d->psock, "sdk-like", false);
	tprod_register(p, "test.ds", false, false);
	tc_open(&root, d->csock, "ConsumerPort");
	tcfg_basic(&cfg, 256, sdk_ds, 1);
	uint64_t en = tcons_enable(&root, &cfg, -1);
	tprod_expect(p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	register_writer(p, 1, target);
	commit_tagged(p, 0, 1, 1, "root-early", target);
	tc_msg_free(tc_ok(&root, tc_call(&root, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&root, en, 20000));
	tprod_expect(p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	tcons_read(&root, &trace);
	ASSERT_INT(trace_count(&trace, "root-early", 10, NULL), ==, 1);
	tc_msg_free(tc_ok(&root, tc_call(&root, "FreeBuffers", NULL, -1, false)));
	tc_close(&root);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	return target;
}

/* nobody's session on the root producer's data source, after the burn: the root writer
 * still bound to the old id commits its last chunk, a fresh writer registered for the new
 * session one of its own. Asserts nobody's trace has the fresh one and nothing of the old
 * session. Returns the new session's buffer id. */
static uint32_t nobody_session_meets_late_chunk(struct inproc *h, struct tc *nob, struct tprod *p,
						uint32_t old)
{
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	uint64_t en = 0;
	char *err = NULL;

	tcfg_basic(&cfg, 256, sdk_ds, 1);
	/* a uid over its id budget waits for it to refill (on the service's clock): its next
	 * session is accepted, within 30 s */
	for (int i = 0;; i++) {
		en = tcons_enable(nob, &cfg, -1);
		struct tcmd c0;
		if (tprod_cmd(p, &c0, 0)) {
			ASSERT_UINT(c0.kind, ==, PF_ASYNC_CMD_SETUP_DATA_SOURCE);
			cmd = c0;
			break;
		}
		err = tcons_wait_disabled(nob, en, 0);
		ASSERT(err != NULL);
		ASSERT_INT(i, <, 60);
		free(err);
		inproc_advance(h, 500);
	}
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	/* the SDK's late commit of the writer bound to the old session's buffer */
	commit_tagged(p, 1, 1, 2, "root-late", old);
	register_writer(p, 2, target);
	commit_tagged(p, 2, 2, 1, "fresh-writer", target);
	tc_msg_free(tc_ok(nob, tc_call(nob, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(nob, en, 20000));
	tcons_read(nob, &trace);
	ASSERT_INT(trace_count(&trace, "fresh-writer", 12, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "root-late", 9, NULL), ==, 0);
	ASSERT_INT(trace_count(&trace, "root-early", 10, NULL), ==, 0);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	return target;
}

TEST_TIMEOUT(sec3_nobody_burning_buffer_ids_gets_no_root_data, 120)
{
	struct inproc h;
	struct sonded d;
	struct tprod p;
	struct tc nob;
	char *refusal;

	sec_require_root();
	inproc_up(&h);
	inproc_sockets(&h, &d);
	uint32_t old = root_session_with_bound_writer(&d, &p);
	tc_open_fd(&nob, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	/* every id but the freed one, so that the next allocation would be that one */
	size_t got = burn_until(&nob, old, old, &refusal);
	/* one uid cannot churn through the id space */
	ASSERT(refusal != NULL);
	ASSERT_CONTAINS(refusal, "buffer ids");
	ASSERT_UINT(got, <, 65534);
	free(refusal);
	nobody_session_meets_late_chunk(&h, &nob, &p, old);
	tc_close(&nob);
	tc_close(&p.t);
	inproc_down(&h);
}

TEST_TIMEOUT(sec3_a_writer_bound_to_a_freed_buffer_never_writes_into_its_successor, 120)
{
	struct inproc h;
	struct sonded d;
	struct tprod p;
	struct tc burner, nob;
	char *refusal;

	sec_require_root();
	inproc_up(&h);
	inproc_sockets(&h, &d);
	uint32_t old = root_session_with_bound_writer(&d, &p);
	/* the service's own uid has no id budget: root wraps the ids around to the freed one */
	tc_open(&burner, d.csock, "ConsumerPort");
	ASSERT_UINT(burn_until(&burner, old, old, &refusal), ==, 65534);
	ASSERT(refusal == NULL);
	tc_close(&burner);
	tc_open_fd(&nob, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	/* the id is handed out again, yet the old writer's chunk stays out */
	ASSERT_UINT(nobody_session_meets_late_chunk(&h, &nob, &p, old), ==, old);
	tc_close(&nob);
	tc_close(&p.t);
	inproc_down(&h);
}

/* ---------------------------------------------------------------- request floods */

enum { FLOOD_CONNS = 64 };

/* A kB figure from /proc/PID/status ("VmRSS", "VmHWM"). */
static long status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	long v = -1;
	size_t n = strlen(key);

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	ASSERT(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	ASSERT_INT(v, >=, 0);
	return v;
}

/* A connection of the flooder: its socket and how much of the request stream it sent. */
struct flood_conn {
	int fd;
	size_t sent;
};

static int flood_connect(const char *csock)
{
	int fd = sonde__ipc_connect(csock);

	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFL);
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	}
	return fd;
}

/* The flooder, as uid nobody: FLOOD_CONNS consumer connections, each binding ConsumerPort
 * and then pipelining QueryServiceState for ever without reading a reply. Each time the
 * service closes one, a byte goes to `closed` and it connects again. */
static void __attribute__((noreturn)) flood_child(const char *csock, uint32_t method, int closed)
{
	struct buf bind = BUF_INIT, reqs = BUF_INIT;
	struct ipc_frame b = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE,
			      .name = "ConsumerPort", .name_len = 12};
	struct ipc_frame q = {.request_id = 2, .msg = IPC_MSG_INVOKE_METHOD, .service_id = 1,
			      .method_id = method};
	struct flood_conn c[FLOOD_CONNS];

	pid_t parent = getppid();
	if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(SEC_NOBODY) < 0)
		_exit(2);
	/* after setuid, which clears it: a failed test leaves no flooder behind */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(2);
	signal(SIGPIPE, SIG_IGN);
	if (sonde__ipc_frame_encode(&bind, &b) < 0)
		_exit(3);
	for (int i = 0; i < 512; i++)
		if (sonde__ipc_frame_encode(&reqs, &q) < 0)
			_exit(3);
	size_t qlen = reqs.len / 512;
	for (int i = 0; i < FLOOD_CONNS; i++)
		c[i] = (struct flood_conn){flood_connect(csock), 0};
	for (;;) {
		bool progress = false;
		for (int i = 0; i < FLOOD_CONNS; i++) {
			if (c[i].fd < 0) {
				c[i] = (struct flood_conn){flood_connect(csock), 0};
				continue;
			}
			const uint8_t *p;
			size_t n;
			if (c[i].sent < bind.len) {
				p = bind.data + c[i].sent;
				n = bind.len - c[i].sent;
			} else {
				size_t off = (c[i].sent - bind.len) % qlen;
				p = reqs.data + off;
				n = reqs.len - off;
			}
			ssize_t w = send(c[i].fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w > 0) {
				c[i].sent += (size_t)w;
				progress = true;
			} else if (w < 0 && errno != EAGAIN && errno != EINTR) {
				close(c[i].fd);
				c[i].fd = -1;
				(void)!write(closed, "x", 1);
			}
		}
		if (!progress)
			usleep(1000);
	}
}

TEST_TIMEOUT(sec3_unread_reply_floods_are_throttled_and_a_root_session_completes, 180)
{
	struct sonded d;
	struct tprod p;
	struct tc root;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	int pfd[2];

	sec_require_root();
	/* sanitizer builds: no quarantine in the daemon, so that freed memory is freed and
	 * RSS means the same as in a release build */
	const char *asan = getenv("ASAN_OPTIONS");
	char aopts[512];
	snprintf(aopts, sizeof(aopts), "%s%squarantine_size_mb=0", asan ? asan : "",
		 asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", aopts, 1);
	sonded_start(&d, NULL);
	tprod_open(&p, d.psock, "root-producer", false);
	tprod_register(&p, "test.ds", false, false);
	tc_open(&root, d.csock, "ConsumerPort");
	uint32_t method = tc_method_id(&root, "QueryServiceState");
	tc_msg_free(tc_ok(&root, tc_call(&root, "QueryServiceState", NULL, -1, false)));
	long base = status_kb(d.pid, "VmRSS");

	ASSERT_OK(pipe2(pfd, O_CLOEXEC | O_NONBLOCK));
	pid_t flooder = fork();
	ASSERT(flooder >= 0);
	if (flooder == 0) {
		close(pfd[0]);
		flood_child(d.csock, method, pfd[1]);
	}
	close(pfd[1]);
	/* every flooding connection is closed at least once: they are throttled, not served */
	size_t closes = 0;
	double end = test_now() + 90;
	while (closes < 2 * FLOOD_CONNS) {
		char b[256];
		struct pollfd pf = {pfd[0], POLLIN, 0};
		ASSERT(test_now() < end);
		if (poll(&pf, 1, 200) > 0) {
			ssize_t n = read(pfd[0], b, sizeof(b));
			if (n > 0)
				closes += (size_t)n;
		}
	}
	/* meanwhile (the flooders reconnect at once) a root session runs start to end */
	tcfg_basic(&cfg, 256, sdk_ds, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_DURATION_MS, 500);
	uint64_t en = tcons_enable(&root, &cfg, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	commit_tagged(&p, 0, 1, 1, "under-flood", target);
	char *err = tcons_wait_disabled(&root, en, 60000);
	ASSERT(err == NULL);
	tcons_read(&root, &trace);
	ASSERT_INT(trace_count(&trace, "under-flood", 11, NULL), ==, 1);
	/* the service's memory stayed bounded: 64 connections' unread replies and queued
	 * requests (1.1 GB before the bounds) */
	long peak = status_kb(d.pid, "VmHWM");
	fprintf(stderr, "sonded RSS: %ld kB before the flood, peak %ld kB\n", base, peak);
	ASSERT_INT(peak - base, <, 128 * 1024);
	kill(flooder, SIGKILL);
	waitpid(flooder, NULL, 0);
	close(pfd[0]);
	/* and goes back near where it was once they are gone */
	end = test_now() + 30;
	long now_kb;
	while ((now_kb = status_kb(d.pid, "VmRSS")) > base + 16 * 1024) {
		ASSERT(test_now() < end);
		usleep(100000);
	}
	fprintf(stderr, "sonded RSS after the flood: %ld kB\n", now_kb);
	/* and the root consumer is still served */
	tc_msg_free(tc_ok(&root, tc_call(&root, "QueryServiceState", NULL, -1, false)));
	free(err);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	tc_close(&root);
	tc_close(&p.t);
	sonded_stop(&d);
}

/* ---------------------------------------------------------------- idle network peers */

/* Whether the in-process service closed fd's peer end, once it has nothing left to do. */
static bool eof_now(int fd)
{
	char b[4096];

	ASSERT(svc_util_pump != NULL);
	svc_util_pump();
	for (;;) {
		ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return true;
		if (n < 0)
			return false;
	}
}
/* A connection to a relay socket that says who it speaks for, as a relay does first. */
static int relay_connect(const char *addr)
{
	struct ipc_frame f = {.msg = IPC_MSG_SET_PEER_IDENTITY, .peer_uid = 0, .peer_pid = 4242,
			      .has_peer_uid = true, .has_peer_pid = true,
			      .machine_id_hint = "boot-r", .machine_id_hint_len = 6,
			      .machine_name = "relaybox", .machine_name_len = 8};
	struct ipc_chan ch;
	int fd = sonde__ipc_connect(addr);

	ASSERT(fd >= 0);
	ASSERT_OK(sonde__ipc_chan_init(&ch, fd));
	ASSERT_OK(sonde__ipc_chan_send(&ch, &f, -1));
	ASSERT_OK(sonde__ipc_chan_flush(&ch));
	ch.fd = -1; /* the caller keeps the socket */
	sonde__ipc_chan_close(&ch);
	return fd;
}

TEST_TIMEOUT(sec3_idle_network_peers_are_closed_and_relays_have_their_own_slots, 90)
{
	struct inproc h;
	struct sonded d;
	struct tprod good, relayed, again;
	char paddr[64], raddr[64], prod[400];
	int idle[8];

	snprintf(paddr, sizeof(paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(raddr, sizeof(raddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(prod, sizeof(prod), "%s/prod.sock,%s", test_tmpdir(), paddr);
	/* a small quota, as good as 256 */
	struct sonde_service_opts o = {.sz = sizeof(o),
				       .producer_socket = prod,
				       .relay_socket = raddr,
				       .max_connections_per_uid = 8,
				       .remote_handshake_ms = 2000};
	inproc_up_opts(&h, &o);
	inproc_sockets(&h, &d);
	/* a network producer that binds and initializes at once */
	tprod_open(&good, paddr, "remote-good", false);
	/* seven that say nothing take the rest of the network peers' slots: an eighth is
	 * closed at accept, which also tells that the seven were accepted */
	for (int i = 0; i < 8; i++) {
		idle[i] = sonde__ipc_connect(paddr);
		ASSERT(idle[i] >= 0);
	}
	ASSERT(eof_now(idle[7]));
	close(idle[7]);
	/* a relay's slots are its own: it is served while the network peers' are full */
	tprod_open_fd(&relayed, relay_connect(raddr), "relayed", false);
	tprod_register(&relayed, "test.ds", false, false);
	/* the silent ones are closed after the handshake timeout (looked for at the
	 * service's once-a-second housekeeping), and not before */
	for (int i = 0; i < 7; i++)
		ASSERT(!eof_now(idle[i]));
	inproc_advance(&h, 3000);
	for (int i = 0; i < 7; i++) {
		ASSERT(eof_now(idle[i]));
		close(idle[i]);
	}
	/* not the producer that did its handshake, though it is older than the timeout */
	tprod_register(&good, "test.ds", false, false);
	/* and the slots are free again */
	tprod_open(&again, paddr, "remote-again", false);
	tprod_register(&again, "test.ds", false, false);
	tc_close(&again.t);
	tc_close(&relayed.t);
	tc_close(&good.t);
	inproc_down(&h);
}

/* sonde trace --query shows a producer connected over TCP as remote: the service does not
 * know its uid or pid, and says nothing of them. */
TEST_TIMEOUT(sec3_query_shows_a_network_producer_as_remote, 60)
{
	struct inproc h;
	struct sonded d;
	struct tprod net, local;
	struct test_output o;
	char paddr[64], prod[400], sock[300];

	snprintf(paddr, sizeof(paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(prod, sizeof(prod), "%s/prod.sock,%s", test_tmpdir(), paddr);
	struct sonde_service_opts opts = {.sz = sizeof(opts), .producer_socket = prod};
	inproc_up_opts(&h, &opts);
	inproc_sockets(&h, &d);
	tprod_open(&net, paddr, "over-tcp", false);
	tprod_open(&local, test_path("prod.sock"), "over-unix", false);
	snprintf(sock, sizeof(sock), "--socket=%s", d.csock);
	inproc_run_program(&h, &o, 30,
			   (const char *const[]){test_bin("sonde"), "trace", sock, "--query", NULL});
	ASSERT_INT(o.status, ==, 0);
	char *line = strstr(o.out, "over-tcp");
	ASSERT(line != NULL);
	char *eol = strchr(line, '\n');
	ASSERT(eol != NULL);
	*eol = '\0';
	ASSERT_CONTAINS(line, "remote");
	ASSERT(strstr(line, "uid") == NULL && strstr(line, "pid") == NULL);
	*eol = '\n';
	char want[64];
	snprintf(want, sizeof(want), "uid %u pid %d", (unsigned)getuid(), (int)getpid());
	line = strstr(o.out, "over-unix");
	ASSERT(line != NULL);
	ASSERT(strncmp(strstr(line, "uid"), want, strlen(want)) == 0);
	test_output_free(&o);
	tc_close(&local.t);
	tc_close(&net.t);
	inproc_down(&h);
}
