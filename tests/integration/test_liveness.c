/* sonded stays available to everyone whatever one client does, and clients survive a
 * service that goes away or is not the one they expect: the per-uid buffer budget, a
 * socket handed to the connector that leads back to sonded itself, a service run by a
 * user who is neither root nor the client, an output file that never drains, a service
 * that goes away while `sonde trace` reads. */
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/connector.h>
#include <sonde/service.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "client_util.h"
#include "hostile_util.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "sec_util.h"
#include "svc_inproc.h"
#include "svc_util.h"

/* The error of an EnableTracing reply (malloc'd; "" if it had none). */
static char *reply_error(const struct tc_msg *m)
{
	struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_ENABLE_TRACING_RESP_ERROR && f.wire == PB_LEN)
			return strndup((const char *)f.ptr, f.len);
	return strdup("");
}

/* EnableTracing with one buffer of kb on t; returns the reply's error (malloc'd) if the
 * session was refused, NULL if it runs. A running session answers only when it ends, and
 * replies come in order: if the GetTraceStats sent next is answered first, it runs. */
static char *enable_kb(struct tc *t, uint32_t kb)
{
	struct buf cfg = BUF_INIT;
	uint64_t req, stats;
	struct tc_msg *m;
	char *err = NULL;

	tcfg_basic(&cfg, kb, NULL, 0);
	req = tcons_enable(t, &cfg, -1);
	sonde__buf_free(&cfg);
	stats = tc_call(t, "GetTraceStats", NULL, -1, false);
	m = tc_wait(t, stats, 10000);
	ASSERT(m != NULL);
	tc_msg_free(m);
	m = tc_wait(t, req, 0);
	if (m) {
		err = reply_error(m);
		tc_msg_free(m);
	}
	return err;
}

static void detach(struct tc *t, const char *key)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_string(&a, PF_DETACH_REQ_KEY, key);
	tc_msg_free(tc_ok(t, tc_call(t, "Detach", &a, -1, false)));
	sonde__buf_free(&a);
}

TEST(liveness_uid_buffer_budget_counts_detached_sessions)
{
	static const char *const args[] = {"--max-buffer-kb-per-uid", "4096",
					   "--max-sessions-per-uid", "8", NULL};
	struct sonded d;
	struct tc nb[4], root;
	char key[32], *err;

	sec_require_root();
	sonded_start(&d, args);
	/* nobody: two detached sessions and one attached, 3 MiB of its 4 MiB */
	for (int i = 0; i < 3; i++) {
		tc_open_fd(&nb[i], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
		err = enable_kb(&nb[i], 1024);
		if (err)
			FAIL("session %d of nobody refused: %s", i, err);
		if (i < 2) {
			snprintf(key, sizeof(key), "k%d", i);
			detach(&nb[i], key);
			tc_close(&nb[i]);
		}
	}
	/* 2 MiB more would pass the budget: refused, naming the per-uid limit */
	tc_open_fd(&nb[3], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	err = enable_kb(&nb[3], 2048);
	ASSERT_CONTAINS(err, "per-uid memory limit");
	free(err);
	tc_close(&nb[3]);
	/* the last 1 MiB still fits */
	tc_open_fd(&nb[3], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	err = enable_kb(&nb[3], 1024);
	ASSERT(err == NULL);
	/* root has a budget of its own */
	tc_open(&root, d.csock, "ConsumerPort");
	err = enable_kb(&root, 4096);
	ASSERT(err == NULL);
	tc_close(&root);
	tc_close(&nb[2]);
	tc_close(&nb[3]);
	sonded_stop(&d);
}

/* A new consumer connects, binds and gets an answer to a call: the seconds it took. */
static double consumer_answer_s(const struct sonded *d)
{
	double t0 = test_now();
	struct tc t;

	tc_open(&t, d->csock, "ConsumerPort");
	tc_msg_free(tc_ok(&t, tc_call(&t, "QueryCapabilities", NULL, -1, false)));
	tc_close(&t);
	return test_now() - t0;
}

/* Waits (up to 15 s) for a 1 s window in which sonded used under 0.1 s of CPU. */
static bool cpu_settles(pid_t pid)
{
	for (double end = test_now() + 15; test_now() < end;) {
		double c0 = proc_cpu_s(pid);
		usleep(1000000);
		if (proc_cpu_s(pid) - c0 < 0.1)
			return true;
	}
	return false;
}

/* Hands the connector a socket connected to sonded's own socket `sock`, with a
 * BindService already written into it, as a producer or a consumer. */
static void hand_back(const struct sonded *d, const char *sock, bool producer)
{
	struct sonde_connector_opts xo = {.sz = sizeof(xo), .socket = d->xsock};
	struct sonde_connector *x = sonde_connector__new(&xo);
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE};
	struct buf b = BUF_INIT;
	int fd = sonde__ipc_connect(sock), rc;

	ASSERT(x != NULL);
	ASSERT_OK(fd);
	f.name = producer ? "ProducerPort" : "ConsumerPort";
	f.name_len = strlen(f.name);
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_INT(raw_send(fd, b.data, b.len), >=, 0);
	rc = producer ? sonde_connector__connect_producer(x, fd, NULL, NULL)
		      : sonde_connector__connect_consumer(x, fd, NULL);
	ASSERT_ERR(rc, -ELOOP);
	ASSERT_CONTAINS(sonde_connector__last_error(x), "connected to this service");
	close(fd);
	sonde__buf_free(&b);
	sonde_connector__free(x);
}

TEST_TIMEOUT(liveness_connector_refuses_a_socket_connected_to_sonded_itself, 90)
{
	static const char *const args[] = {"--no-perf", NULL};
	struct sonded d;

	sonded_start(&d, args);
	hand_back(&d, d.psock, true);
	hand_back(&d, d.csock, false);
	hand_back(&d, d.psock, false); /* a producer socket's end handed as a consumer */
	double t = consumer_answer_s(&d);
	if (t > 1.0)
		FAIL("a new consumer waited %.2f s for an answer", t);
	if (!cpu_settles(d.pid))
		FAIL("sonded keeps using CPU after the refusals");
	double t0 = test_now();
	kill(d.pid, SIGTERM);
	ASSERT_INT(test_wait(d.pid, 10), ==, 0);
	if (test_now() - t0 > 2.0)
		FAIL("SIGTERM took %.2f s to end sonded", test_now() - t0);
}

/* Both ends of one socketpair handed over, as a producer and as a consumer: SO_PEERCRED
 * names the supervisor, so only the protocol tells. A BindService written into one end
 * reaches the consumer, whose reply reaches the producer: that is not a request, and the
 * connection ends instead of answering it with an error (which the consumer would
 * answer, and so on). */
TEST_TIMEOUT(liveness_socketpair_handed_as_both_ends_does_not_spin, 60)
{
	static const char *const args[] = {"--no-perf", NULL};
	struct sonde_connector_opts xo = {.sz = sizeof(xo)};
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE};
	struct buf b = BUF_INIT;
	struct sonded d;
	int sv[2];

	sonded_start(&d, args);
	xo.socket = d.xsock;
	struct sonde_connector *x = sonde_connector__new(&xo);
	ASSERT(x != NULL);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_OK(sonde_connector__connect_producer(x, sv[0], NULL, NULL));
	ASSERT_OK(sonde_connector__connect_consumer(x, sv[1], NULL));
	f.name = "ConsumerPort";
	f.name_len = strlen(f.name);
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_INT(raw_send(sv[0], b.data, b.len), >=, 0);
	close(sv[0]);
	close(sv[1]);
	if (!cpu_settles(d.pid))
		FAIL("sonded keeps using CPU");
	double t = consumer_answer_s(&d);
	if (t > 1.0)
		FAIL("a new consumer waited %.2f s for an answer", t);
	sonde__buf_free(&b);
	sonde_connector__free(x);
	sonded_stop(&d);
}

/* sonded run as uid nobody on sockets in dir (a user may bind the default /tmp paths while
 * no service runs); its producer and consumer socket paths go to psock and csock. */
static pid_t sonded_as_nobody(const char *dir, char *psock, char *csock, char *xsock, size_t n)
{
	const char *bin = test_copy_for_anyone(test_bin("sonded"));

	snprintf(psock, n, "%s/p.sock", dir);
	snprintf(csock, n, "%s/c.sock", dir);
	snprintf(xsock, n, "%s/x.sock", dir);
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(SEC_NOBODY) < 0)
			_exit(126);
		execl(bin, bin, "-p", psock, "-c", csock, "-x", xsock, "--no-perf", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		int fd = sonde__ipc_connect_type(xsock, SOCK_SEQPACKET); /* it listens last */
		if (fd >= 0) {
			close(fd);
			return pid;
		}
		usleep(10000);
	}
	FAIL("sonded as nobody did not listen on %s", csock);
}

TEST_TIMEOUT(liveness_trace_refuses_a_service_run_by_another_user, 90)
{
	const char *dir = test_path("nobody-run"), *out = test_path("t.pftrace");
	struct client_prod_opts po = {.packets = 20, .commit_on_start = true};
	struct test_output o;
	char psock[256], csock[256], xsock[256];

	sec_require_root();
	ASSERT_OK(mkdir(dir, 0777));
	ASSERT_OK(chmod(dir, 0777));
	pid_t d = sonded_as_nobody(dir, psock, csock, xsock, sizeof(psock));
	unsetenv("SONDE_TRUST_UID");
	/* a supervisor would hand it sockets: refused too, and trusted on request */
	struct sonde_connector_opts xo = {.sz = sizeof(xo), .socket = xsock};
	errno = 0;
	ASSERT(sonde_connector__new(&xo) == NULL);
	ASSERT_INT(errno, ==, EPERM);
	setenv("SONDE_TRUST_UID", "65534", 1);
	struct sonde_connector *x = sonde_connector__new(&xo);
	ASSERT(x != NULL);
	sonde_connector__free(x);
	unsetenv("SONDE_TRUST_UID");
	/* refused before a byte is sent, naming the socket, the uid and the override */
	test_runf(&o, 30, "%s trace --socket %s -o %s -t 1s client.test", test_bin("sonde"), csock,
		  out);
	ASSERT_INT(o.status, !=, 0);
	ASSERT_CONTAINS(o.err, csock);
	ASSERT_CONTAINS(o.err, "runs as uid 65534");
	ASSERT_CONTAINS(o.err, "--trust-uid 65534");
	test_output_free(&o);
	/* a producer trusting it through the environment, then sonde trace with the flag */
	setenv("SONDE_TRUST_UID", "65534", 1);
	po.socket = psock;
	pid_t prod = client_prod_spawn(&po);
	client_wait_data_source(csock, "client.test");
	unsetenv("SONDE_TRUST_UID");
	test_runf(&o, 60, "%s trace --trust-uid 65534 --socket %s -o %s -t 1s client.test",
		  test_bin("sonde"), csock, out);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	size_t n;
	char *data = ASSERT_NOT_NULL(test_read_file(out, &n));
	ASSERT_INT(client_count_test_packets(data, n, 20, 0), ==, 20);
	free(data);
	ASSERT_INT(test_wait(prod, 20), ==, 0);
	kill(d, SIGTERM);
	ASSERT_INT(test_wait(d, 20), ==, 0);
}

/* Whether another thread of this process is blocked in writev (the file writer on a pipe
 * that is full): /proc/self/task/TID/syscall names the call a blocked task is in. */
static bool a_thread_blocked_in_writev(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;

	ASSERT(d != NULL);
	while (!found && (e = readdir(d))) {
		char path[300], line[64] = "";
		if (e->d_name[0] == '.' || atoi(e->d_name) == (int)gettid())
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f) && line[0] >= '0' && line[0] <= '9')
			found = atol(line) == SYS_writev;
		fclose(f);
	}
	closedir(d);
	return found;
}

/* A session of data source liveness.pipe writing into file `fd` through the service
 * every period_ms. */
static uint64_t enable_into_fd(struct tc *t, int fd, uint32_t period_ms)
{
	static const char *const ds[] = {"liveness.pipe"};
	struct buf cfg = BUF_INIT;
	uint64_t req;

	tcfg_basic(&cfg, 4096, ds, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, period_ms);
	req = tcons_enable(t, &cfg, fd);
	sonde__buf_free(&cfg);
	return req;
}

/* An in-process service whose file writer may block, a producer serving liveness.pipe
 * and a consumer whose session writes into a pipe, started. */
struct pipe_sess {
	struct inproc h;
	struct tprod p;
	struct tc nb;
	uint64_t req;	 /* the EnableTracing request */
	int rd;		 /* the pipe's read end */
	uint32_t target; /* the session's buffer */
};

/* The service with options o (NULL: the defaults), the session writing every period_ms. */
static void pipe_session(struct pipe_sess *ps, const struct sonde_service_opts *o,
			 uint32_t period_ms)
{
	struct tcmd cmd;
	int pfd[2];

	signal(SIGPIPE, SIG_IGN); /* as sonded: the writer gets EPIPE once the pipe is closed */
	if (o)
		inproc_up_opts(&ps->h, o);
	else
		inproc_up(&ps->h);
	ps->h.writer_blocks = true;
	inproc_producer(&ps->h, &ps->p, "pipe-producer", false);
	tprod_register(&ps->p, "liveness.pipe", false, false);
	inproc_consumer(&ps->h, &ps->nb);
	ASSERT_OK(pipe2(pfd, O_CLOEXEC));
	ps->req = enable_into_fd(&ps->nb, pfd[1], period_ms);
	close(pfd[1]);
	ps->rd = pfd[0];
	tprod_expect(&ps->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	ps->target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(&ps->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
}

/* Commits n chunks holding one 3000-byte packet each into target. */
static void write_chunks(struct tprod *p, uint32_t target, unsigned n)
{
	static uint8_t filler[3000];
	struct buf pk = BUF_INIT;

	sonde__pb_put_bytes(&pk, 900, filler, sizeof(filler));
	for (unsigned i = 0; i < n; i++) {
		struct iovec v = {pk.data, pk.len};
		unsigned page = i % (unsigned)(p->smb_size / p->page);
		unsigned moves[1][2] = {{page, 0}};
		tprod_chunk(p, page, SMB_LAYOUT_DIV1, 0, 1, i, 0, &v, 1, true);
		tprod_commit(p, moves, 1, target, 0, NULL);
	}
	sonde__buf_free(&pk);
}

/* A consumer passes a pipe that nobody reads as its write_into_file fd and fills it: the
 * writer thread blocks, the loop does not. Other clients are answered at once, and once
 * the service's clock passed the stall timeout (set to 2 s; 10 s by default) without
 * progress, and not before, the session ends with the reason. In-process: the clock is
 * the test's, and the only real-time wait is for the writer to block (an event). */
TEST_TIMEOUT(liveness_output_pipe_nobody_reads_freezes_nothing, 60)
{
	struct sonde_service_opts o = {.sz = sizeof(o), .stall_timeout_ms = 2000};
	struct pipe_sess ps;
	struct tc other;

	pipe_session(&ps, &o, 100);
	uint64_t t0 = ps.h.now_ns;	     /* no byte waits before */
	write_chunks(&ps.p, ps.target, 100); /* 300 KB: the pipe holds 64 KiB */
	inproc_advance(&ps.h, 100);	     /* the write period: the writer gets them */
	double end = test_now() + 20;
	while (!a_thread_blocked_in_writev()) {
		ASSERT(test_now() < end);
		usleep(1000);
	}
	/* the loop runs on: a new client is answered at once */
	inproc_consumer(&ps.h, &other);
	tc_msg_free(tc_ok(&other, tc_call(&other, "QueryServiceState", NULL, -1, false)));
	tc_close(&other);
	/* the writer took the bytes at t0 + 100 ms and blocked before the service's next
	 * look at it (each write period, 100 ms): the file took nothing from then on, for
	 * 2 s at t0 + 2100 ms, when the session still runs; the stall counts from the first
	 * look that found it stuck, so the session ends within two looks after that */
	inproc_advance(&ps.h, 2100 - (ps.h.now_ns - t0) / 1000000);
	ASSERT(tc_wait(&ps.nb, ps.req, 0) == NULL);
	inproc_advance(&ps.h, 2 * 100);
	struct tc_msg *m = tc_wait(&ps.nb, ps.req, 0);
	ASSERT(m != NULL);
	char *err = tcons_disabled_reply(m);
	ASSERT_CONTAINS(err, "the output file accepted nothing for 2 s");
	free(err);
	tc_close(&ps.nb);
	tc_close(&ps.p.t);
	close(ps.rd);
	inproc_down(&ps.h);
}

/* Packet i of the test below: tag "pkt%03u" then 3000 bytes of one letter, in field 900. */
static void tagged_packet(struct buf *pk, unsigned i)
{
	uint8_t body[3008];

	snprintf((char *)body, 8, "pkt%03u", i);
	memset(body + 7, 'a' + (int)(i % 26), sizeof(body) - 7);
	sonde__buf_reset(pk);
	sonde__pb_put_bytes(pk, 900, body, sizeof(body));
}

/* Commits packet i (tagged_packet) alone in chunk i of writer 1, into the session's buffer. */
static void commit_tagged(struct pipe_sess *ps, unsigned i)
{
	struct buf pk = BUF_INIT;
	unsigned page = i % (unsigned)(ps->p.smb_size / ps->p.page);
	unsigned moves[1][2] = {{page, 0}};

	tagged_packet(&pk, i);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&ps->p, page, SMB_LAYOUT_DIV1, 0, 1, i, 0, &v, 1, true);
	tprod_commit(&ps->p, moves, 1, ps->target, 0, NULL);
	sonde__buf_free(&pk);
}

/* The last drain of a write_into_file session hands large packets to the writer thread
 * where they lie in the trace buffer, not copied. The consumer's output is a pipe it reads
 * only after it left: the writer blocks in the middle of the packets, the session (and
 * its buffer) is freed meanwhile, and the pipe still gets every packet whole, since the
 * buffer's memory stays the writer's until its thread is gone. In-process; the real-time
 * waits are for the writer to block and for the bytes it writes (events). */
TEST_TIMEOUT(liveness_last_drain_from_the_buffers_outlives_its_session, 60)
{
	enum { N = 100 };
	struct pipe_sess ps;
	struct buf pk = BUF_INIT, out = BUF_INIT;

	/* no write period within the test: the last drain writes every packet */
	pipe_session(&ps, NULL, 3600000);
	for (unsigned i = 0; i < N; i++)
		commit_tagged(&ps, i);
	tc_msg_free(tc_ok(&ps.nb, tc_call(&ps.nb, "DisableTracing", NULL, -1, false)));
	/* 300 KB of packets, the pipe holds 64 KiB */
	double end = test_now() + 20;
	while (!a_thread_blocked_in_writev()) {
		ASSERT(test_now() < end);
		usleep(1000);
	}
	tc_close(&ps.nb); /* the session and its buffer go */
	inproc_run(&ps.h);
	tc_close(&ps.p.t);
	inproc_run(&ps.h);
	int found = 0;
	while (found < N) {
		struct pollfd pf = {.fd = ps.rd, .events = POLLIN};
		if (poll(&pf, 1, 20000) != 1)
			FAIL("the pipe got %d of %d packets, then nothing for 20 s", found, N);
		ASSERT_OK(sonde__buf_reserve(&out, 65536));
		ssize_t k = read(ps.rd, out.data + out.len, 65536);
		if (k <= 0)
			FAIL("the pipe ended after %d of %d packets", found, N);
		out.len += (size_t)k;
		found = trace_count(&out, "pkt", 3, NULL);
	}
	for (unsigned i = 0; i < N; i++) {
		struct tpkt last;
		char tag[8];
		snprintf(tag, sizeof(tag), "pkt%03u", i);
		tagged_packet(&pk, i);
		ASSERT_INT(trace_count(&out, tag, 7, &last), ==, 1);
		if (!memmem(last.p, last.len, pk.data, pk.len))
			FAIL("packet %u is not whole", i);
	}
	sonde__buf_free(&pk);
	sonde__buf_free(&out);
	close(ps.rd);
	inproc_down(&ps.h);
}

/* A chunk committed once a write_into_file session's last drain has begun (an SDK writer
 * committing after its session ended) is not written into the completed file, as with
 * Perfetto's service, which reads the buffers out at DisableTracing: it is counted in the
 * buffer's chunks_discarded, not left unsaid in the buffer. */
TEST_TIMEOUT(liveness_chunk_committed_after_the_last_drain_is_counted, 60)
{
	struct pipe_sess ps;
	struct buf out = BUF_INIT;

	pipe_session(&ps, NULL, 3600000);
	commit_tagged(&ps, 0);
	/* the session ends, its buffer read out into the file; then a late commit */
	tc_msg_free(tc_ok(&ps.nb, tc_call(&ps.nb, "DisableTracing", NULL, -1, false)));
	commit_tagged(&ps, 1);
	struct tc_msg *m = inproc_wait_writer_reply(&ps.h, &ps.nb, ps.req, 20);
	ASSERT(m != NULL);
	free(tcons_disabled_reply(m));
	ASSERT_UINT(tcons_stat(&ps.nb, 0, PF_BUFFER_STATS_CHUNKS_DISCARDED), ==, 1);
	ASSERT_OK(fcntl(ps.rd, F_SETFL, O_NONBLOCK));
	for (ssize_t k = 1; k > 0; out.len += k > 0 ? (size_t)k : 0) {
		ASSERT_OK(sonde__buf_reserve(&out, 65536));
		k = read(ps.rd, out.data + out.len, 65536);
	}
	ASSERT_INT(trace_count(&out, "pkt000", 6, NULL), ==, 1);
	ASSERT_INT(trace_count(&out, "pkt001", 6, NULL), ==, 0);
	sonde__buf_free(&out);
	close(ps.rd);
	tc_close(&ps.nb);
	tc_close(&ps.p.t);
	inproc_down(&ps.h);
}

/* argv in the background with its stderr into the file errpath. */
static pid_t spawn_stderr_to(const char *const argv[], const char *errpath)
{
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		int err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (null < 0 || err < 0)
			_exit(126);
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(err, STDERR_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_size : 0;
}

/* One try of the test below: false if sonde trace read the whole trace before sonded
 * could be frozen (nothing was left to lose). */
static bool kill_service_mid_read(const char *out, const char *errf, int packets, size_t big)
{
	static const char *const args[] = {"--no-perf", NULL};
	struct client_prod_opts po = {.packets = packets, .big = big, .commit_on_start = true};
	struct sonded d;
	char sock[300];
	int st;

	sonded_start(&d, args);
	po.socket = d.psock;
	po.smb_size = 4 << 20;
	pid_t prod = client_prod_spawn(&po);
	client_wait_data_source(d.csock, "client.test");
	snprintf(sock, sizeof(sock), "--socket=%s", d.csock);
	const char *argv[] = {test_bin("sonde"), "trace",	  sock,		 "-o", out,
			      "--time=2s",	 "--buffer=64mb", "client.test", NULL};
	pid_t tr = spawn_stderr_to(argv, errf);
	for (double end = test_now() + 60; file_size(out) == 0 && test_now() < end;)
		usleep(500);
	ASSERT_INT(file_size(out), >, 0);
	/* frozen, sonded sends nothing more; if sonde trace still runs a while later, it is
	 * waiting for the rest of the trace, and the kill lands inside the read */
	kill(d.pid, SIGSTOP);
	usleep(500000);
	bool inside = waitpid(tr, &st, WNOHANG) == 0;
	kill(d.pid, SIGKILL);
	waitpid(d.pid, NULL, 0);
	if (inside)
		ASSERT_INT(test_wait(tr, 30), !=, 0);
	test_wait(prod, 20); /* it saw the service go */
	return inside;
}

/* sonded dies while `sonde trace` reads a large trace: the file keeps every packet that
 * arrived, whole, stderr says the trace is incomplete, and the exit status is not 0. */
TEST_TIMEOUT(liveness_trace_keeps_what_it_read_when_the_service_dies, 180)
{
	enum { PACKETS = 3000, BIG = 8192 };
	const char *out = test_path("partial.pftrace"), *errf = test_path("trace.err");
	int tries = 0;

	while (!kill_service_mid_read(out, errf, PACKETS, BIG))
		if (++tries == 3)
			FAIL("sonde trace read the whole trace before sonded could be stopped, 3 "
			     "times");
	size_t n;
	char *err = ASSERT_NOT_NULL(test_read_file(errf, &n));
	ASSERT_CONTAINS(err, "the connection to the service was lost while reading");
	ASSERT_CONTAINS(err, "the trace is incomplete");
	free(err);
	char *data = ASSERT_NOT_NULL(test_read_file(out, &n));
	int got = client_count_test_packets(data, n, PACKETS, BIG); /* every record whole */
	ASSERT_INT(got, >, 0);
	free(data);
}

/* sonded dies while the session runs, before anything was read: stderr says so in the
 * line docs/trace.md gives, and the exit status is 1. */
TEST_TIMEOUT(liveness_trace_says_nothing_was_written_when_the_service_dies_before_reading, 90)
{
	struct sonded d;
	char sock[300];
	const char *out = test_path("never.pftrace"), *errf = test_path("never.err");
	const char *args[] = {"--no-probes", NULL};
	size_t n = 0;
	char *err = NULL;

	sonded_start(&d, args);
	snprintf(sock, sizeof(sock), "--socket=%s", d.csock);
	const char *argv[] = {test_bin("sonde"), "trace", sock, "-o", out, "--time=60s",
			      "nothing.ds", NULL};
	pid_t tr = spawn_stderr_to(argv, errf);
	/* the session is enabled once it says it traces */
	for (double end = test_now() + 30;; usleep(10000)) {
		free(err);
		err = test_read_file(errf, &n);
		if (err && strstr(err, "tracing 1 data source"))
			break;
		ASSERT(test_now() < end);
	}
	free(err);
	kill(d.pid, SIGKILL);
	waitpid(d.pid, NULL, 0);
	ASSERT_INT(test_wait(tr, 30), ==, 1);
	err = ASSERT_NOT_NULL(test_read_file(errf, &n));
	char want[600];
	snprintf(want, sizeof(want),
		 "the connection to the service was lost before the trace was read: nothing was "
		 "written to %s; the trace is incomplete",
		 out);
	ASSERT_CONTAINS(err, want);
	free(err);
}

/* examples/trace_hello registers its data source, sonded restarts, and it connects again
 * by itself (backoff), registers again, and the new sonded's session gets its packets. */
TEST_TIMEOUT(liveness_producer_reconnects_to_a_restarted_service, 90)
{
	static const char *const args[] = {"--no-perf", NULL};
	const char *out = test_path("after.pftrace");
	struct test_output o;
	struct sonded d;

	sonded_start(&d, args);
	setenv("PERFETTO_PRODUCER_SOCK_NAME", d.psock, 1);
	const char *hello[] = {test_example("trace_hello"), "liveness.hello", "5", "again", NULL};
	pid_t prod = test_spawn(hello);
	unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
	client_wait_data_source(d.csock, "liveness.hello");
	sonded_stop(&d);
	usleep(300000); /* a few failed attempts */
	sonded_start(&d, args);
	client_wait_data_source(d.csock, "liveness.hello"); /* registered again */
	test_runf(&o, 60, "%s trace --socket %s -o %s -t 1s liveness.hello", test_bin("sonde"),
		  d.csock, out);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	size_t n;
	char *data = ASSERT_NOT_NULL(test_read_file(out, &n));
	for (int i = 0; i < 5; i++) {
		char s[32];
		snprintf(s, sizeof(s), "again %d", i);
		ASSERT(memmem(data, n, s, strlen(s)) != NULL);
	}
	free(data);
	ASSERT_INT(test_wait(prod, 20), ==, 0); /* and it ended with that session */
	sonded_stop(&d);
}
