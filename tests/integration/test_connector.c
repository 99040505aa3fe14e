/* sonded's connector over its real sockets: producers and consumers handed over as
 * connected sockets, with a buffer provided or created by the service, refusals with
 * errno statuses, identity, and `sonde run --trace` (docs/service.md "The connector"). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/connector.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/cxmsg.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "sec_util.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

static struct sonde_connector *cx_open(const struct sonded *d)
{
	struct sonde_connector_opts o = {.sz = sizeof(o), .socket = d->xsock};
	struct sonde_connector *c = sonde_connector__new(&o);

	if (!c)
		FAIL("cannot reach the connector at %s: %s", d->xsock, strerror(errno));
	return c;
}

/* A memfd of size bytes, sealed as the service demands when `seal`. */
static int make_memfd(size_t size, bool seal)
{
	int fd = memfd_create("test-smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ASSERT(fd >= 0);
	ASSERT_OK(ftruncate(fd, (off_t)size));
	if (seal)
		ASSERT_OK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
	return fd;
}

/* Hands one end of a new socketpair to the service as a producer; returns the other. */
static int hand_producer(struct sonde_connector *c, const struct sonde_connect_opts *o,
			 int *buffer_out)
{
	int sv[2];

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	int rc = sonde_connector__connect_producer(c, sv[0], o, buffer_out);
	if (rc < 0)
		FAIL("connect_producer: %s (%s)", sonde_strerror(rc),
		     sonde_connector__last_error(c));
	close(sv[0]);
	return sv[1];
}

static void make_packet(struct buf *b, const char *tag)
{
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, 1000);
	sonde__pb_put_string(b, 900, tag);
}

/* Writes one chunk holding a packet with tag into the producer's SMB and commits it. */
static void write_tag(struct tprod *p, uint32_t target, const char *tag)
{
	struct buf pk = BUF_INIT;
	unsigned moves[1][2] = {{0, 0}};

	make_packet(&pk, tag);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(p, 0, SMB_LAYOUT_DIV4, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(p, moves, 1, target, 0, NULL);
	sonde__buf_free(&pk);
}

/* A session over the registered producers ps[0..n): each writes its tag; the trace read
 * back is returned in *trace. */
static void session(struct sonded *d, struct tprod *ps, size_t n, const char *const *tags,
		    struct buf *trace)
{
	struct buf cfg = BUF_INIT;
	struct tc c;
	struct tcmd cmd;
	uint32_t target[64];

	ASSERT(n <= 64);
	tc_open(&c, d->csock, "ConsumerPort");
	tcfg_basic(&cfg, 1024, one_ds, 1);
	uint64_t en = tcons_enable(&c, &cfg, -1);
	for (size_t i = 0; i < n; i++) {
		tprod_expect(&ps[i], PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
		target[i] = cmd.target_buffer;
		tc_msg_free(cmd.m);
		ASSERT(ps[i].smb != NULL);
	}
	for (size_t i = 0; i < n; i++) {
		tprod_expect(&ps[i], PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
		tc_msg_free(cmd.m);
		write_tag(&ps[i], target[i], tags[i]);
	}
	tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&c, en, 20000));
	tcons_read(&c, trace);
	tc_close(&c);
	sonde__buf_free(&cfg);
}

static void assert_traced(const struct buf *trace, const char *tag, int64_t uid)
{
	struct tpkt last;

	ASSERT_INT(trace_count(trace, tag, strlen(tag), &last), ==, 1);
	ASSERT(last.has_uid);
	ASSERT_INT(last.uid, ==, uid);
}

TEST_TIMEOUT(conn_producer_with_its_own_memfd, 60)
{
	struct sonded d;
	struct tprod p;
	struct buf trace = BUF_INIT;
	const char *tag = "own-memfd-packet";

	sonded_start(&d, NULL);
	struct sonde_connector *c = cx_open(&d);
	int mfd = make_memfd(64 * 1024, true);
	struct sonde_connect_opts o = {.sz = sizeof(o),
				       .buffer = SONDE_CONNECTOR_BUFFER_PROVIDED,
				       .buffer_fd = mfd,
				       .page_size = 4096};
	int sock = hand_producer(c, &o, NULL);
	ASSERT_CONTAINS(sonde_connector__last_error(c), ""); /* empty after a success */
	ASSERT_INT(sonde_connector__last_error(c)[0], ==, 0);
	sonde_connector__free(c); /* the handed-over socket outlives the connector */
	tprod_open_fd(&p, sock, "own-memfd", false);
	tprod_register(&p, "test.ds", false, false);
	/* the producer did not offer a buffer: the service sends it the supervisor's one */
	struct tcmd cmd;
	/* setup_tracing is handled (the SMB mapped) inside tprod_cmd; nothing else is due */
	ASSERT(!tprod_cmd(&p, &cmd, 300));
	ASSERT(p.smb != NULL);
	ASSERT_UINT(p.smb_size, ==, 64 * 1024);
	ASSERT_UINT(p.page, ==, 4096);
	uint8_t *mine = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT(mine != MAP_FAILED);
	memcpy(mine + 60000, "same-file", 9); /* the very same memory */
	ASSERT_MEM_EQ(p.smb + 60000, "same-file", 9);
	memset(mine + 60000, 0, 9);
	session(&d, &p, 1, &tag, &trace);
	assert_traced(&trace, tag, getuid());
	munmap(mine, 64 * 1024);
	close(mfd);
	sonde__buf_free(&trace);
	tc_close(&p.t);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_producer_offering_the_handed_memfd_gets_it_adopted, 60)
{
	struct sonded d;
	struct tc t;
	struct buf a = BUF_INIT;

	sonded_start(&d, NULL);
	struct sonde_connector *c = cx_open(&d);
	int mfd = make_memfd(32 * 1024, true), other = make_memfd(32 * 1024, true);
	struct sonde_connect_opts o = {
		.sz = sizeof(o), .buffer = SONDE_CONNECTOR_BUFFER_PROVIDED, .buffer_fd = mfd};
	for (int round = 0; round < 2; round++) {
		tc_open_fd(&t, hand_producer(c, &o, NULL), "ProducerPort");
		sonde__buf_reset(&a);
		sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "offering");
		sonde__pb_put_varint(&a, PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES, 4096);
		sonde__pb_put_bool(&a, PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM, true);
		/* round 0 offers the handed-over file, round 1 another one */
		struct tc_msg *m = tc_ok(
			&t, tc_call(&t, "InitializeConnection", &a, round ? other : mfd, false));
		struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
		struct pb_field f;
		bool adopted = false;
		while (sonde__pb_next(&r, &f) > 0)
			if (f.num == PF_INIT_CONN_RESP_USING_SHMEM_PROVIDED_BY_PRODUCER)
				adopted = f.u != 0;
		ASSERT_INT(adopted, ==, round == 0);
		tc_msg_free(m);
		/* either way setup_tracing follows, with the fd only when not adopted */
		uint64_t cmd = tc_call(&t, "GetAsyncCommand", NULL, -1, false);
		m = tc_wait(&t, cmd, 10000);
		ASSERT(m != NULL);
		ASSERT_INT(m->fd >= 0, ==, round == 1);
		if (m->fd >= 0) {
			struct stat x, y;
			ASSERT_OK(fstat(m->fd, &x));
			ASSERT_OK(fstat(mfd, &y));
			ASSERT_UINT(x.st_ino, ==,
				    y.st_ino); /* the supervisor's file, not `other` */
		}
		tc_msg_free(m);
		tc_close(&t);
	}
	sonde_connector__free(c);
	close(mfd);
	close(other);
	sonde__buf_free(&a);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_producer_asking_the_service_for_a_buffer, 60)
{
	struct sonded d;
	struct tprod p;
	struct buf trace = BUF_INIT;
	struct stat st;
	const char *tag = "service-buffer-packet";
	int got = -1;

	sonded_start(&d, NULL);
	struct sonde_connector *c = cx_open(&d);
	struct sonde_connect_opts o = {.sz = sizeof(o),
				       .buffer = SONDE_CONNECTOR_BUFFER_FROM_SERVICE,
				       .buffer_size = 128 * 1024,
				       .page_size = 8192};
	int sock = hand_producer(c, &o, &got);
	ASSERT(got >= 0); /* BufferReceiver: the service's memfd */
	ASSERT_OK(fstat(got, &st));
	ASSERT_UINT(st.st_size, ==, 128 * 1024);
	int seals = fcntl(got, F_GET_SEALS);
	ASSERT_UINT(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), ==,
		    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	tprod_open_fd(&p, sock, "service-buffer", false);
	tprod_register(&p, "test.ds", false, false);
	struct tcmd cmd;
	/* setup_tracing is handled (the SMB mapped) inside tprod_cmd; nothing else is due */
	ASSERT(!tprod_cmd(&p, &cmd, 300));
	ASSERT(p.smb != NULL);
	ASSERT_UINT(p.smb_size, ==, 128 * 1024);
	ASSERT_UINT(p.page, ==, 8192);
	uint8_t *mine = mmap(NULL, 128 * 1024, PROT_READ | PROT_WRITE, MAP_SHARED, got, 0);
	ASSERT(mine != MAP_FAILED);
	memcpy(mine + 100000, "shared", 6);
	ASSERT_MEM_EQ(p.smb + 100000, "shared", 6);
	memset(mine + 100000, 0, 6);
	session(&d, &p, 1, &tag, &trace);
	assert_traced(&trace, tag, getuid());
	munmap(mine, 128 * 1024);
	close(got);
	sonde_connector__free(c);
	sonde__buf_free(&trace);
	tc_close(&p.t);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_consumer_handed_over, 60)
{
	struct sonded d;
	struct tprod p;
	struct tc cons;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	int sv[2];

	sonded_start(&d, NULL);
	tprod_open(&p, d.psock, "plain", false);
	tprod_register(&p, "test.ds", false, false);
	struct sonde_connector *c = cx_open(&d);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_OK(sonde_connector__connect_consumer(c, sv[0], NULL));
	close(sv[0]);
	sonde_connector__free(c);
	tc_open_fd(&cons, sv[1], "ConsumerPort");
	tcfg_basic(&cfg, 1024, one_ds, 1);
	uint64_t en = tcons_enable(&cons, &cfg, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	write_tag(&p, target, "to-a-handed-consumer");
	tc_msg_free(tc_ok(&cons, tc_call(&cons, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&cons, en, 20000));
	tcons_read(&cons, &trace);
	assert_traced(&trace, "to-a-handed-consumer", getuid());
	/* a socket handed over as a consumer speaks ConsumerPort only */
	struct tc wrong;
	c = cx_open(&d);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_OK(sonde_connector__connect_consumer(c, sv[0], NULL));
	close(sv[0]);
	memset(&wrong, 0, sizeof(wrong));
	ASSERT_OK(sonde__ipc_chan_init(&wrong.ch, sv[1]));
	struct ipc_frame f = {.request_id = 1,
			      .msg = IPC_MSG_BIND_SERVICE,
			      .name = "ProducerPort",
			      .name_len = 12};
	ASSERT_OK(sonde__ipc_chan_send(&wrong.ch, &f, -1));
	struct tc_msg *m = tc_wait(&wrong, 1, 10000);
	ASSERT(m && m->f.msg == IPC_MSG_BIND_SERVICE_REPLY && !m->f.success);
	tc_msg_free(m);
	tc_close(&wrong);
	sonde_connector__free(c);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	tc_close(&cons);
	tc_close(&p.t);
	sonded_stop(&d);
}

/* Hands a socketpair end with opts; expects refusal err. The other end must then see EOF
 * once the caller's copy is closed: the service kept nothing. */
static void expect_refused(struct sonde_connector *c, const struct sonde_connect_opts *o, int err,
			   const char *why)
{
	int sv[2];
	char b;

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_ERR(sonde_connector__connect_producer(c, sv[0], o, NULL), -err);
	ASSERT_CONTAINS(sonde_connector__last_error(c), why);
	close(sv[0]);
	ASSERT_INT(read(sv[1], &b, 1), ==, 0);
	close(sv[1]);
}

TEST_TIMEOUT(conn_bad_buffers_are_refused_with_errno_statuses, 60)
{
	struct sonded d;
	int pipefd[2];

	const char *extra[] = {"--max-smb-kb", "256", NULL};
	sonded_start(&d, extra);
	struct sonde_connector *c = cx_open(&d);
	struct sonde_connect_opts o = {
		.sz = sizeof(o), .buffer = SONDE_CONNECTOR_BUFFER_PROVIDED, .page_size = 4096};

	/* not a memfd: a regular file, then a pipe */
	const char *path = test_path("not-a-memfd");
	o.buffer_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ASSERT_OK(ftruncate(o.buffer_fd, 65536));
	expect_refused(c, &o, EBADF, "not a memfd");
	close(o.buffer_fd);
	ASSERT_OK(pipe2(pipefd, O_CLOEXEC));
	o.buffer_fd = pipefd[0];
	expect_refused(c, &o, EBADF, "not a memfd");
	close(pipefd[0]);
	close(pipefd[1]);
	/* unsealed, and sealed only partly */
	o.buffer_fd = make_memfd(65536, false);
	expect_refused(c, &o, EPERM, "sealed");
	ASSERT_OK(fcntl(o.buffer_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW));
	expect_refused(c, &o, EPERM, "sealed");
	close(o.buffer_fd);
	/* sealed against writes */
	o.buffer_fd = make_memfd(65536, false);
	ASSERT_OK(fcntl(o.buffer_fd, F_ADD_SEALS,
			F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL));
	expect_refused(c, &o, EPERM, "sealed");
	close(o.buffer_fd);
	/* read-only */
	int rw = make_memfd(65536, true);
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", rw);
	o.buffer_fd = open(proc, O_RDONLY | O_CLOEXEC);
	ASSERT_OK(o.buffer_fd);
	expect_refused(c, &o, EACCES, "not open for writing");
	close(o.buffer_fd);
	close(rw);
	/* geometry: not a multiple of the page size, empty, bad page sizes, too big */
	o.buffer_fd = make_memfd(10000, true);
	expect_refused(c, &o, EINVAL, "geometry");
	close(o.buffer_fd);
	o.buffer_fd = make_memfd(0, true);
	expect_refused(c, &o, EINVAL, "geometry");
	close(o.buffer_fd);
	o.buffer_fd = make_memfd(65536, true);
	o.page_size = 65536; /* an ABI page size, over the service's 32 KiB */
	expect_refused(c, &o, EINVAL, "geometry");
	o.page_size = 12288; /* not 4 KiB times a power of two */
	expect_refused(c, &o, EINVAL, "geometry");
	o.page_size = 4096;
	close(o.buffer_fd);
	o.buffer_fd = make_memfd(512 * 1024, true);
	expect_refused(c, &o, EFBIG, "limit");
	close(o.buffer_fd);
	/* asking the service for impossible buffers */
	struct sonde_connect_opts s = {.sz = sizeof(s),
				       .buffer = SONDE_CONNECTOR_BUFFER_FROM_SERVICE,
				       .buffer_size = 1024 * 1024};
	expect_refused(c, &s, EFBIG, "limit");
	s.buffer_size = 10000;
	expect_refused(c, &s, EINVAL, "geometry");
	/* a valid buffer is still accepted on the same connector connection */
	o.buffer_fd = make_memfd(65536, true);
	close(hand_producer(c, &o, NULL));
	close(o.buffer_fd);
	sonde_connector__free(c);
	sonded_stop(&d);
}

/* Sends raw bytes with fds on a fresh connector connection; returns the reply status. */
static uint32_t raw_request(const struct sonded *d, const void *msg, size_t len, const int *fds,
			    size_t nfds, char *why, size_t whylen)
{
	int fd = sonde__ipc_connect_type(d->xsock, SOCK_SEQPACKET);
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {(void *)msg, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	uint8_t rep[CX_MAX_MSG];
	struct cx_reply r;

	ASSERT_OK(fd);
	ASSERT_OK(fcntl(fd, F_SETFL, 0)); /* blocking: wait for the reply */
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	ASSERT_INT(sendmsg(fd, &mh, 0), ==, (ssize_t)len);
	ssize_t n = recv(fd, rep, sizeof(rep), 0);
	ASSERT_INT(n, >, 0);
	ASSERT_OK(sonde__cx_reply_decode(rep, (size_t)n, &r));
	snprintf(why, whylen, "%s", r.message);
	close(fd);
	return r.status;
}

TEST_TIMEOUT(conn_bad_requests_and_sockets_are_refused, 60)
{
	struct sonded d;
	struct cx_request q = {.id = 7, .kind = CX_KIND_PRODUCER};
	struct buf b = BUF_INIT;
	char why[CX_MAX_TEXT];
	int sv[2], lfd, dg[2];

	sonded_start(&d, NULL);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	sonde__cx_request_encode(&q, &b);
	/* no fd, two fds where one is expected */
	ASSERT_UINT(raw_request(&d, b.data, b.len, NULL, 0, why, sizeof(why)), ==, EBADF);
	ASSERT_CONTAINS(why, "expected 1 file descriptors, got 0");
	int two[2] = {sv[0], sv[0]};
	ASSERT_UINT(raw_request(&d, b.data, b.len, two, 2, why, sizeof(why)), ==, EBADF);
	int three[3] = {sv[0], sv[0], sv[0]};
	ASSERT_UINT(raw_request(&d, b.data, b.len, three, 3, why, sizeof(why)), ==, EBADF);
	/* malformed, oversized, unknown kind */
	static const uint8_t garbage[] = {0x08, 0xff, 0xff};
	ASSERT_UINT(raw_request(&d, garbage, sizeof(garbage), sv, 1, why, sizeof(why)), ==, EPROTO);
	uint8_t big[CX_MAX_MSG + 64];
	memset(big, 0, sizeof(big));
	ASSERT_UINT(raw_request(&d, big, sizeof(big), sv, 1, why, sizeof(why)), ==, EMSGSIZE);
	sonde__buf_reset(&b);
	q.kind = 9;
	sonde__cx_request_encode(&q, &b);
	ASSERT_UINT(raw_request(&d, b.data, b.len, sv, 1, why, sizeof(why)), ==, EINVAL);
	/* a consumer with a buffer */
	sonde__buf_reset(&b);
	q.kind = CX_KIND_CONSUMER;
	q.buffer = CX_BUFFER_FROM_SERVICE;
	sonde__cx_request_encode(&q, &b);
	ASSERT_UINT(raw_request(&d, b.data, b.len, sv, 1, why, sizeof(why)), ==, EINVAL);
	/* not a stream socket, a listening socket, a datagram socket */
	struct sonde_connector *c = cx_open(&d);
	int pipefd[2];
	ASSERT_OK(pipe2(pipefd, O_CLOEXEC));
	ASSERT_ERR(sonde_connector__connect_producer(c, pipefd[0], NULL, NULL), -ENOTSOCK);
	lfd = sonde__ipc_listen(test_path("listening.sock"));
	ASSERT_OK(lfd);
	ASSERT_ERR(sonde_connector__connect_consumer(c, lfd, NULL), -ENOTCONN);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg));
	ASSERT_ERR(sonde_connector__connect_producer(c, dg[0], NULL, NULL), -ENOTSOCK);
	int unconnected = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_ERR(sonde_connector__connect_producer(c, unconnected, NULL, NULL), -ENOTCONN);
	/* and a good one still works */
	close(hand_producer(c, NULL, NULL));
	sonde_connector__free(c);
	close(unconnected);
	close(dg[0]);
	close(dg[1]);
	close(lfd);
	close(pipefd[0]);
	close(pipefd[1]);
	close(sv[0]);
	close(sv[1]);
	sonde__buf_free(&b);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_many_producers_at_once, 120)
{
	enum { N = 24 };
	struct sonded d;
	struct tprod p[N];
	struct buf trace = BUF_INIT;
	char names[N][32];
	const char *tags[N];

	sonded_start(&d, NULL);
	/* two connector connections, used alternately, both kept open */
	struct sonde_connector *c[2] = {cx_open(&d), cx_open(&d)};
	for (int i = 0; i < N; i++) {
		struct sonde_connect_opts o = {
			.sz = sizeof(o),
			.buffer = i % 3 == 1 ? SONDE_CONNECTOR_BUFFER_FROM_SERVICE
					     : SONDE_CONNECTOR_BUFFER_NONE,
			.buffer_size = 64 * 1024};
		int got = -1;
		int sock = hand_producer(c[i % 2], &o, &got);
		if (got >= 0)
			close(got);
		snprintf(names[i], sizeof(names[i]), "many-%d", i);
		tags[i] = names[i];
		tprod_open_fd(&p[i], sock, names[i], false);
		tprod_register(&p[i], "test.ds", false, false);
	}
	session(&d, p, N, tags, &trace);
	for (int i = 0; i < N; i++) {
		/* "many-1" is a prefix of "many-10": count exact payloads */
		int hits = 0;
		size_t off = 0;
		struct tpkt pk;
		while (trace_next(&trace, &off, &pk)) {
			struct pb_reader r = pb_reader_init(pk.p, pk.len);
			struct pb_field f;
			while (sonde__pb_next(&r, &f) > 0)
				hits += f.num == 900 && f.len == strlen(tags[i]) &&
					!memcmp(f.ptr, tags[i], f.len);
		}
		ASSERT_INT(hits, ==, 1);
	}
	for (int i = 0; i < N; i++)
		tc_close(&p[i].t);
	sonde_connector__free(c[0]);
	sonde_connector__free(c[1]);
	sonde__buf_free(&trace);
	sonded_stop(&d);
}

/* As uid, asks the connector to hand over a producer socket granting grant_uid (or its
 * own identity when grant_uid < 0). Returns the status (0 or errno) from a child. */
static int supervise_as(uid_t uid, const char *xsock, long grant_uid)
{
	pid_t pid = fork();
	int st;

	ASSERT(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(uid) < 0)
			_exit(200);
		struct sonde_connector_opts co = {.sz = sizeof(co), .socket = xsock};
		struct sonde_connector *c = sonde_connector__new(&co);
		if (!c)
			_exit(201);
		struct sonde_connect_opts o = {
			.sz = sizeof(o), .set_uid = grant_uid >= 0, .uid = (uint32_t)grant_uid};
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
			_exit(202);
		int rc = sonde_connector__connect_producer(c, sv[0], &o, NULL);
		_exit(rc < 0 ? -rc : 0);
	}
	ASSERT_INT(waitpid(pid, &st, 0), ==, pid);
	ASSERT(WIFEXITED(st));
	return WEXITSTATUS(st);
}

TEST_TIMEOUT(conn_identity_is_the_supervisors_or_what_it_may_grant, 60)
{
	struct sonded d;
	struct tc t;

	sec_require_root();
	const char *extra[] = {"--socket-mode", "connector:0666", "--lockdown", NULL};
	sonded_start(&d, extra);
	/* an unprivileged supervisor may not grant root, but may hand over as itself */
	ASSERT_INT(supervise_as(SEC_NOBODY, d.xsock, 0), ==, EPERM);
	ASSERT_INT(supervise_as(SEC_NOBODY, d.xsock, SEC_NOBODY), ==, 0);
	ASSERT_INT(supervise_as(SEC_NOBODY, d.xsock, -1), ==, 0);
	/* root may grant another uid: lockdown then refuses that producer */
	struct sonde_connector *c = cx_open(&d);
	struct sonde_connect_opts o = {.sz = sizeof(o), .set_uid = true, .uid = SEC_NOBODY};
	tc_open_fd(&t, hand_producer(c, &o, NULL), "ProducerPort");
	struct buf a = BUF_INIT;
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "granted");
	struct tc_msg *m = tc_wait(&t, tc_call(&t, "InitializeConnection", &a, -1, false), 10000);
	ASSERT(m && m->f.msg == IPC_MSG_REQUEST_ERROR);
	char *msg = strndup(m->f.name, m->f.name_len);
	ASSERT_CONTAINS(msg, "this one is uid 65534");
	free(msg);
	tc_msg_free(m);
	tc_close(&t);
	/* and as itself (root) it is accepted */
	tc_open_fd(&t, hand_producer(c, NULL, NULL), "ProducerPort");
	m = tc_ok(&t, tc_call(&t, "InitializeConnection", &a, -1, false));
	tc_msg_free(m);
	tc_close(&t);
	sonde__buf_free(&a);
	sonde_connector__free(c);
	sonded_stop(&d);
}

/* `sonde run --trace` of a producer running as nobody, with the service's sockets in a
 * directory only root may enter: its packets land in a consumer's trace, carrying the
 * identity sonde run granted. */
TEST_TIMEOUT(conn_sonde_run_traces_a_process_without_socket_access, 120)
{
	struct sonded d;
	struct tc c;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct test_output o;
	char dir[128], env[300];

	sec_require_root();
	snprintf(dir, sizeof(dir), "%s/private", test_tmpdir());
	ASSERT_OK(mkdir(dir, 0700));
	snprintf(d.psock, sizeof(d.psock), "%s/p.sock", dir);
	snprintf(d.csock, sizeof(d.csock), "%s/c.sock", dir);
	snprintf(d.xsock, sizeof(d.xsock), "%s/x.sock", dir);
	const char *psock = d.psock, *csock = d.csock, *xsock = d.xsock;
	const char *argv[] = {test_bin("sonded"), "-p", psock, "-c", csock, "-x", xsock, NULL};
	d.pid = test_spawn(argv);
	for (int i = 0, fd = -1; fd < 0; i++) { /* the connector listens last */
		ASSERT(i < 1000);
		if ((fd = sonde__ipc_connect_type(xsock, SOCK_SEQPACKET)) < 0)
			usleep(10000);
		else
			close(fd);
	}
	const char *hello = test_copy_for_anyone(test_example("trace_hello"));
	/* the traced program cannot reach the producer socket by itself */
	snprintf(env, sizeof(env), "PERFETTO_PRODUCER_SOCK_NAME=%s", psock);
	test_runf(&o, 30, "%s run --trace --connector /nonexistent/x -- %s", test_bin("sonde"),
		  hello);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "cannot reach the connector");
	test_output_free(&o);
	test_runf(&o, 30,
		  "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/env %s %s",
		  env, hello);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "cannot connect");
	test_output_free(&o);

	tc_open(&c, csock, "ConsumerPort");
	static const char *const hello_ds[] = {"sonde.hello"};
	tcfg_basic(&cfg, 1024, hello_ds, 1);
	uint64_t en = tcons_enable(&c, &cfg, -1);
	char ctor[300];
	snprintf(ctor, sizeof(ctor), "--connector=%s", xsock);
	const char *run[] = {test_bin("sonde"), "run",	 "--trace",	ctor,
			     "--user",		"65534", "--",		hello,
			     "sonde.hello",	"5",	 "from-nobody", NULL};
	pid_t pr = test_spawn(run);
	/* read while it runs until the five packets are in */
	double end = test_now() + 30;
	while (trace_count(&trace, "from-nobody", 11, NULL) < 5) {
		ASSERT(test_now() < end);
		usleep(100000);
		tcons_read(&c, &trace);
	}
	tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&c, en, 20000));
	ASSERT_INT(test_wait(pr, 30), ==, 0); /* the stop reached it; it exited cleanly */
	for (int i = 0; i < 5; i++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "from-nobody %d", i);
		struct tpkt last;
		ASSERT_INT(trace_count(&trace, tag, strlen(tag), &last), ==, 1);
		ASSERT(last.has_uid);
		ASSERT_INT(last.uid, ==, SEC_NOBODY);
	}
	tc_close(&c);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_sonde_run_with_service_and_own_buffers, 120)
{
	struct sonded d;
	struct test_output o;

	sonded_start(&d, NULL);
	const char *modes[] = {"service", "own"};
	for (int k = 0; k < 2; k++) {
		struct tc c;
		struct buf cfg = BUF_INIT, trace = BUF_INIT;
		char tag[32];
		snprintf(tag, sizeof(tag), "buffer-%s", modes[k]);
		tc_open(&c, d.csock, "ConsumerPort");
		static const char *const hello_ds[] = {"sonde.hello"};
		tcfg_basic(&cfg, 1024, hello_ds, 1);
		uint64_t en = tcons_enable(&c, &cfg, -1);
		char ctor[300], mode[40];
		snprintf(ctor, sizeof(ctor), "--connector=%s", d.xsock);
		snprintf(mode, sizeof(mode), "--buffer=%s", modes[k]);
		const char *run[] = {test_bin("sonde"),
				     "run",
				     "--trace",
				     ctor,
				     mode,
				     "--buffer-size",
				     "128kb",
				     "--",
				     test_example("trace_hello"),
				     "sonde.hello",
				     "3",
				     tag,
				     NULL};
		pid_t pr = test_spawn(run);
		double end = test_now() + 30;
		while (trace_count(&trace, tag, strlen(tag), NULL) < 3) {
			ASSERT(test_now() < end);
			usleep(100000);
			tcons_read(&c, &trace);
		}
		tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
		free(tcons_wait_disabled(&c, en, 20000));
		ASSERT_INT(test_wait(pr, 30), ==, 0);
		tc_close(&c);
		sonde__buf_free(&cfg);
		sonde__buf_free(&trace);
	}
	/* a refused hand-over is reported with the service's reason */
	test_runf(&o, 30,
		  "%s run --trace --connector=%s --buffer=service --buffer-size=10000 -- true",
		  test_bin("sonde"), d.xsock);
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "invalid buffer geometry");
	test_output_free(&o);
	test_runf(&o, 30, "%s run -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
	sonded_stop(&d);
}

TEST_TIMEOUT(conn_handed_over_sockets_count_against_connection_limits, 60)
{
	struct sonded d;
	int sv[2], keep[2];

	const char *extra[] = {"--max-connections-per-uid", "2", NULL};
	sonded_start(&d, extra);
	struct sonde_connector *c = cx_open(&d);
	keep[0] = hand_producer(c, NULL, NULL);
	keep[1] = hand_producer(c, NULL, NULL);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_ERR(sonde_connector__connect_consumer(c, sv[0], NULL), -EUSERS);
	ASSERT_CONTAINS(sonde_connector__last_error(c), "too many connections for uid");
	close(sv[0]);
	close(sv[1]);
	/* one closes: the next hand-over fits again */
	close(keep[0]);
	double end = test_now() + 10;
	for (;;) {
		ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
		int rc = sonde_connector__connect_consumer(c, sv[0], NULL);
		close(sv[0]);
		close(sv[1]);
		if (rc == 0)
			break;
		ASSERT_INT(rc, ==, -EUSERS);
		ASSERT(test_now() < end); /* the close is noticed asynchronously */
		usleep(20000);
	}
	close(keep[1]);
	sonde_connector__free(c);
	sonded_stop(&d);
}
