/* The service's security model (docs/service.md "Security"), in-process (svc_inproc.h):
 * lockdown, session and connection caps, buffer limits, output_path creation (also for
 * another uid), forged service fields and the pending limit. Another uid's clients
 * connect from a child running as that uid (sec_connect_as) to the in-process service's
 * sockets, which it accepts as sonded would. Socket permissions stay on a spawned
 * sonded's sockets. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

static const char *const one_ds[] = {"test.ds"};

/* A config that ends by itself after 50 ms: an accepted session answers EnableTracing
 * without error soon, a refused one with its error at once. */
static void short_config(struct buf *b, uint32_t size_kb)
{
	tcfg_basic(b, size_kb, one_ds, 1);
	sonde__pb_put_varint(b, PF_TRACE_CONFIG_DURATION_MS, 50);
}

/* The in-process service of the running test. */
static struct inproc *cur;

/* EnableTracing of cfg; its error once the session ended (NULL: it ran). A refused
 * session's reply is there at once, and an accepted one ends at its duration (the clock
 * moved to it) once the file writer's thread, if any, closed its file. */
static char *enable(struct tc *c, const struct buf *cfg)
{
	uint64_t req = tcons_enable(c, cfg, -1);

	ASSERT(cur != NULL);
	inproc_advance(cur, 50);
	struct tc_msg *m = inproc_wait_writer_reply(cur, c, req, 20);
	if (!m)
		FAIL("EnableTracing was not answered");
	return tcons_disabled_reply(m);
}

/* The service of a test, in-process with o, its sockets' names in d. */
static void up(struct inproc *h, struct sonded *d, const struct sonde_service_opts *o)
{
	struct sonde_service_opts def = {.sz = sizeof(def)};

	inproc_up_opts(h, o ? o : &def);
	inproc_sockets(h, d);
	cur = h;
}

static void down(struct inproc *h)
{
	inproc_down(h);
	cur = NULL;
}

/* Whether the in-process service closed t (EOF), reading all it sent before: the service
 * runs until it is idle, when it has closed t or will not; nothing is waited for. */
static bool closed_by_peer(struct tc *t)
{
	ASSERT(svc_util_pump != NULL);
	for (;;) {
		svc_util_pump();
		struct pollfd p = {t->ch.fd, POLLIN, 0};
		if (poll(&p, 1, 0) <= 0)
			return false;
		int rc = sonde__ipc_chan_read(&t->ch);
		if (rc == -ECONNRESET || rc == -EPIPE)
			return true;
		struct ipc_frame f;
		while (sonde__ipc_chan_next(&t->ch, &f, NULL) > 0)
			;
	}
}

/* InitializeConnection from a raw producer; returns the reply or error frame. */
static struct tc_msg *init_producer(struct tc *t, const char *name)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, name);
	uint64_t id = tc_call(t, "InitializeConnection", &a, -1, false);
	sonde__buf_free(&a);
	struct tc_msg *m = tc_wait(t, id, 10000);
	ASSERT(m != NULL);
	return m;
}

static void expect_lockdown_refusal(struct tc *t)
{
	struct tc_msg *m = init_producer(t, "foreign");

	ASSERT_UINT(m->f.msg, ==, IPC_MSG_REQUEST_ERROR);
	char *msg = strndup(m->f.name, m->f.name_len);
	ASSERT_CONTAINS(msg, "lockdown mode: producers must run as uid 0");
	ASSERT_CONTAINS(msg, "uid 65534");
	free(msg);
	tc_msg_free(m);
	ASSERT(closed_by_peer(t));
}

TEST_TIMEOUT(sec_lockdown_flag_refuses_producers_of_other_uids, 60)
{
	struct sonde_service_opts o = {.sz = sizeof(o), .lockdown = true};
	struct inproc h;
	struct sonded d;
	struct tc foreign, c;
	struct tprod root;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT;

	sec_require_root();
	up(&h, &d, &o);
	tc_open_fd(&foreign, sec_connect_as(SEC_NOBODY, d.psock), "ProducerPort");
	expect_lockdown_refusal(&foreign);
	tc_close(&foreign);
	/* a producer of the service's uid is accepted and gets its instance */
	tprod_open(&root, d.psock, "root-producer", false);
	tprod_register(&root, "test.ds", false, false);
	tc_open(&c, d.csock, "ConsumerPort");
	tcfg_basic(&cfg, 256, one_ds, 1);
	tcons_enable(&c, &cfg, -1);
	tprod_expect(&root, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	sonde__buf_free(&cfg);
	tc_close(&c);
	tc_close(&root.t);
	down(&h);
}

TEST_TIMEOUT(sec_lockdown_mode_from_trace_config, 60)
{
	struct inproc h;
	struct sonded d;
	struct tc c, nc, p2;
	struct tprod foreign;
	struct buf set = BUF_INIT, clear = BUF_INIT;
	char *err;

	sec_require_root();
	up(&h, &d, NULL);
	/* without lockdown, a producer of another uid is welcome */
	tprod_open_fd(&foreign, sec_connect_as(SEC_NOBODY, d.psock), "foreign", false);
	tprod_register(&foreign, "test.ds", false, false);

	/* a consumer of another uid may not change the mode */
	short_config(&set, 256);
	sonde__pb_put_varint(&set, PF_TRACE_CONFIG_LOCKDOWN_MODE, 2 /* LOCKDOWN_SET */);
	tc_open_fd(&nc, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	err = enable(&nc, &set);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "lockdown_mode can only be changed");
	free(err);
	tc_close(&nc);

	/* root sets it: the foreign producer is dropped and never gets an instance */
	tc_open(&c, d.csock, "ConsumerPort");
	err = enable(&c, &set);
	ASSERT(err == NULL);
	ASSERT(closed_by_peer(&foreign.t));
	tc_close(&foreign.t);
	tc_open_fd(&p2, sec_connect_as(SEC_NOBODY, d.psock), "ProducerPort");
	expect_lockdown_refusal(&p2);
	tc_close(&p2);
	tc_close(&c); /* frees the session */

	/* cleared again: accepted */
	short_config(&clear, 256);
	sonde__pb_put_varint(&clear, PF_TRACE_CONFIG_LOCKDOWN_MODE, 1 /* LOCKDOWN_CLEAR */);
	tc_open(&c, d.csock, "ConsumerPort");
	free(enable(&c, &clear));
	tc_open_fd(&p2, sec_connect_as(SEC_NOBODY, d.psock), "ProducerPort");
	struct tc_msg *m = init_producer(&p2, "foreign-again");
	ASSERT_UINT(m->f.msg, ==, IPC_MSG_INVOKE_METHOD_REPLY);
	ASSERT(m->f.success);
	tc_msg_free(m);
	tc_close(&p2);
	tc_close(&c);
	sonde__buf_free(&set);
	sonde__buf_free(&clear);
	down(&h);
}

TEST_TIMEOUT(sec_session_caps_per_uid_and_in_total, 90)
{
	struct sonde_service_opts o = {.sz = sizeof(o), .max_sessions = 6};
	struct inproc h;
	struct sonded d;
	struct tc c[8];
	struct buf cfg = BUF_INIT;
	char *err;

	sec_require_root();
	up(&h, &d, &o);
	short_config(&cfg, 64);
	for (int i = 0; i < 5; i++) { /* the default per-uid cap is 5 */
		tc_open(&c[i], d.csock, "ConsumerPort");
		err = enable(&c[i], &cfg);
		ASSERT(err == NULL);
	}
	tc_open(&c[5], d.csock, "ConsumerPort");
	err = enable(&c[5], &cfg);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "too many tracing sessions for this uid");
	free(err);
	tc_close(&c[5]);
	/* another uid still has room, up to the service-wide cap of 6 */
	tc_open_fd(&c[5], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	ASSERT(enable(&c[5], &cfg) == NULL);
	tc_open_fd(&c[6], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	err = enable(&c[6], &cfg);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "service-wide limit");
	free(err);
	/* a session whose consumer is gone frees its slot, once the service saw it go */
	tc_close(&c[0]);
	inproc_run(&h);
	tc_close(&c[6]);
	tc_open_fd(&c[6], sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	ASSERT(enable(&c[6], &cfg) == NULL);
	for (int i = 1; i < 7; i++)
		tc_close(&c[i]);
	sonde__buf_free(&cfg);
	down(&h);
}

/* In-process (svc_inproc.h): the limits are the service's, not its sockets'. Each refusal
 * comes at once; the session exactly at the limit runs its 50 ms and ends. */
TEST_TIMEOUT(sec_buffer_count_and_memory_limits, 60)
{
	struct sonde_service_opts o = {.sz = sizeof(o),
				       .max_buffers_per_session = 2,
				       .max_session_buffer_kb = 2048};
	struct inproc h;
	struct tc c;
	struct buf cfg = BUF_INIT;
	char *err;

	inproc_up_opts(&h, &o);
	inproc_consumer(&h, &c);
	short_config(&cfg, 512);
	for (int i = 0; i < 2; i++) { /* three buffers */
		size_t m = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_BUFFERS);
		sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_SIZE_KB, 64);
		sonde__pb_end(&cfg, m);
	}
	err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "too many buffers");
	free(err);
	sonde__buf_reset(&cfg);
	short_config(&cfg, 2049); /* one buffer over the session memory limit */
	err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "per-session memory limit");
	free(err);
	sonde__buf_reset(&cfg);
	short_config(&cfg, 1024);
	size_t m = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_BUFFERS);
	sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_SIZE_KB, 1024); /* exactly at the limit */
	sonde__pb_end(&cfg, m);
	uint64_t req = tcons_enable(&c, &cfg, -1);
	inproc_run(&h);
	ASSERT(tc_wait(&c, req, 0) == NULL); /* accepted: running, no reply yet */
	inproc_advance(&h, 50);
	ASSERT(tcons_wait_disabled(&c, req, 0) == NULL);
	sonde__buf_free(&cfg);
	tc_close(&c);
	inproc_down(&h);
}

static void path_config(struct buf *cfg, const char *path)
{
	short_config(cfg, 256);
	sonde__pb_put_bool(cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	sonde__pb_put_string(cfg, PF_TRACE_CONFIG_OUTPUT_PATH, path);
}

static char *enable_path(struct tc *c, const char *path)
{
	struct buf cfg = BUF_INIT;

	path_config(&cfg, path);
	char *err = enable(c, &cfg);
	sonde__buf_free(&cfg);
	return err;
}

TEST_TIMEOUT(sec_output_path_is_created_exclusively_never_through_symlinks, 60)
{
	struct inproc h;
	struct sonded d;
	struct tc c;
	struct stat st;
	char *err;
	const char *victim = test_path("victim"), *link = test_path("link.pftrace");

	up(&h, &d, NULL);
	test_write_file(victim, "precious", 8);
	ASSERT_OK(symlink(victim, link));
	tc_open(&c, d.csock, "ConsumerPort");
	err = enable_path(&c, link);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "already exists");
	free(err);
	/* a dangling symlink is not followed to create its target either */
	const char *dangling = test_path("dangling.pftrace"), *target = test_path("created-via");
	ASSERT_OK(symlink(target, dangling));
	err = enable_path(&c, dangling);
	ASSERT(err != NULL);
	free(err);
	ASSERT_INT(access(target, F_OK), ==, -1);
	/* an existing file is never overwritten */
	err = enable_path(&c, victim);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "already exists");
	free(err);
	size_t n;
	char *data = test_read_file(victim, &n);
	ASSERT(data && n == 8 && !memcmp(data, "precious", 8));
	free(data);
	/* relative paths would resolve against sonded's working directory */
	err = enable_path(&c, "relative.pftrace");
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "absolute");
	free(err);
	/* a new file: 0644 once the trace is complete */
	const char *fresh = test_path("fresh.pftrace");
	ASSERT(enable_path(&c, fresh) == NULL);
	ASSERT_OK(lstat(fresh, &st));
	ASSERT(S_ISREG(st.st_mode));
	ASSERT_UINT(st.st_mode & 0777, ==, 0644);
	tc_close(&c);
	down(&h);
}

TEST_TIMEOUT(sec_output_path_of_another_uid_is_created_with_its_rights, 60)
{
	struct inproc h;
	struct sonded d;
	struct tc c;
	struct stat st;
	char *err, priv[512], open_dir[512], file[600];

	sec_require_root();
	up(&h, &d, NULL);
	snprintf(priv, sizeof(priv), "%s/root-only", test_tmpdir());
	snprintf(open_dir, sizeof(open_dir), "%s/nobody-dir", test_tmpdir());
	ASSERT_OK(mkdir(priv, 0700));
	ASSERT_OK(mkdir(open_dir, 0700));
	ASSERT_OK(chown(open_dir, SEC_NOBODY, SEC_NOBODY));
	tc_open_fd(&c, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	/* root's sonded would be able to write there; the consumer could not */
	snprintf(file, sizeof(file), "%s/trace", priv);
	err = enable_path(&c, file);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "cannot create output_path");
	free(err);
	ASSERT_INT(access(file, F_OK), ==, -1);
	tc_close(&c);
	tc_open_fd(&c, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	snprintf(file, sizeof(file), "%s/trace", open_dir);
	ASSERT(enable_path(&c, file) == NULL);
	ASSERT_OK(stat(file, &st));
	ASSERT_UINT(st.st_uid, ==, SEC_NOBODY); /* the consumer's file, not root's */
	ASSERT_UINT(st.st_mode & 0777, ==, 0644);
	tc_close(&c);
	down(&h);
}

static unsigned mode_of(const char *path)
{
	struct stat st;

	ASSERT_OK(lstat(path, &st));
	ASSERT(S_ISSOCK(st.st_mode));
	return st.st_mode & 07777;
}

TEST_TIMEOUT(sec_socket_modes_and_groups_are_applied, 60)
{
	struct sonded d;
	struct stat st;

	sonded_start(&d, NULL); /* the defaults */
	ASSERT_UINT(mode_of(d.psock), ==, 0666);
	ASSERT_UINT(mode_of(d.csock), ==, 0666);
	ASSERT_UINT(mode_of(d.xsock), ==, 0600);
	sonded_stop(&d);

	const char *extra[] = {"--socket-mode",
			       "producer:0660",
			       "--socket-group",
			       "producer:65534",
			       "--socket-mode",
			       "consumer:0640",
			       "--socket-mode",
			       "connector:0660",
			       "--socket-group",
			       "connector:65534",
			       NULL};
	sonded_start(&d, extra);
	ASSERT_UINT(mode_of(d.psock), ==, 0660);
	ASSERT_UINT(mode_of(d.csock), ==, 0640);
	ASSERT_UINT(mode_of(d.xsock), ==, 0660);
	ASSERT_OK(stat(d.psock, &st));
	ASSERT_UINT(st.st_gid, ==, 65534);
	ASSERT_OK(stat(d.xsock, &st));
	ASSERT_UINT(st.st_gid, ==, 65534);
	ASSERT_OK(stat(d.csock, &st));
	ASSERT_UINT(st.st_gid, ==, getgid());
	sonded_stop(&d);

	/* traced's spelling */
	const char *compat[] = {"--set-socket-permissions", "65534:0620:0:0604", NULL};
	sonded_start(&d, compat);
	ASSERT_UINT(mode_of(d.psock), ==, 0620);
	ASSERT_UINT(mode_of(d.csock), ==, 0604);
	ASSERT_OK(stat(d.psock, &st));
	ASSERT_UINT(st.st_gid, ==, 65534);
	sonded_stop(&d);

	struct test_output o;
	test_runf(&o, 20, "%s --socket-mode bogus:0600 -p @x -c @y", test_bin("sonded"));
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

TEST_TIMEOUT(sec_connections_per_uid_are_capped, 60)
{
	struct sonde_service_opts o = {.sz = sizeof(o), .max_connections_per_uid = 3};
	struct inproc h;
	struct sonded d;
	struct tc t[4], other;

	sec_require_root();
	up(&h, &d, &o);
	for (int i = 0; i < 3; i++)
		tc_open(&t[i], d.csock, "ConsumerPort");
	/* the fourth of this uid is closed at once */
	int fd = sonde__ipc_connect(d.csock);
	ASSERT_OK(fd);
	struct tc extra_conn = {.ch = {.fd = -1}};
	ASSERT_OK(sonde__ipc_chan_init(&extra_conn.ch, fd));
	ASSERT(closed_by_peer(&extra_conn));
	sonde__ipc_chan_close(&extra_conn.ch);
	/* other uids are not affected */
	tc_open_fd(&other, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	tc_close(&other);
	/* a closed connection frees its slot, once the service saw it close */
	tc_close(&t[0]);
	inproc_run(&h);
	tc_open(&t[0], d.csock, "ConsumerPort");
	tc_close(&t[0]);
	tc_close(&t[1]);
	tc_close(&t[2]);
	down(&h);
}

TEST_TIMEOUT(sec_packets_forging_service_fields_are_dropped_and_counted, 60)
{
	struct inproc h;
	struct tprod p;
	struct tc c;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT, pk[3] = {BUF_INIT, BUF_INIT, BUF_INIT};
	unsigned moves[1][2] = {{0, 0}};

	inproc_up(&h);
	inproc_producer(&h, &p, "forger", false);
	tprod_register(&p, "test.ds", false, false);
	inproc_consumer(&h, &c);
	tcfg_basic(&cfg, 1024, one_ds, 1);
	uint64_t en = tcons_enable(&c, &cfg, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	/* an honest packet, one claiming uid 0, one carrying a trace_config */
	sonde__pb_put_string(&pk[0], 900, "honest-packet");
	sonde__pb_put_varint(&pk[1], PF_PACKET_TRUSTED_UID, 0);
	sonde__pb_put_string(&pk[1], 900, "forged-uid-packet");
	sonde__pb_put_string(&pk[2], 900, "forged-config-packet");
	sonde__pb_put_bytes(&pk[2], PF_PACKET_TRACE_CONFIG, "", 0);
	struct iovec v[3] = {
		{pk[0].data, pk[0].len}, {pk[1].data, pk[1].len}, {pk[2].data, pk[2].len}};
	tprod_chunk(&p, 0, SMB_LAYOUT_DIV4, 0, 1, 0, 0, v, 3, true);
	tprod_commit(&p, moves, 1, target, 0, NULL);
	tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&c, en, 20000));
	tcons_read(&c, &trace);
	ASSERT_INT(trace_count(&trace, "honest-packet", 13, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "forged-uid-packet", 17, NULL), ==, 0);
	ASSERT_INT(trace_count(&trace, "forged-config-packet", 20, NULL), ==, 0);
	ASSERT_UINT(tcons_stat(&c, -1, PF_TRACE_STATS_INVALID_PACKETS), ==, 2);
	for (int i = 0; i < 3; i++)
		sonde__buf_free(&pk[i]);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	tc_close(&c);
	tc_close(&p.t);
	inproc_down(&h);
}

/* Sends n QueryServiceState requests on c at once, none of their replies read, and runs
 * the service. */
static void unread_requests(struct inproc *h, struct tc *c, int n)
{
	for (int i = 0; i < n; i++)
		tc_call(c, "QueryServiceState", NULL, -1, false);
	ASSERT_INT(sonde__ipc_chan_flush(&c->ch), ==, 0);
	inproc_run(h);
}

/* docs/service.md, Limits: a connection with 256 KiB of replies unsent has its requests
 * wait, and is closed once over 64 of them wait. Each QueryServiceState reply is ~100 KB
 * here and the service's end of the socket takes only a few KB, so the service answers
 * three requests (~300 KB unsent) and holds the rest: 3 + 64 requests keep the
 * connection, 3 + 65 close it, with the service's clock still (far from the stall
 * timeout). The kept one gets all its replies once it reads them. */
TEST_TIMEOUT(sec_a_client_not_reading_its_replies_is_closed_past_64_waiting_requests, 60)
{
	enum { ANSWERED = 3, MAX_WAITING = 64 };
	struct inproc h;
	struct tprod p;
	struct tc kept, closed, other;
	struct buf a = BUF_INIT;

	inproc_up(&h);
	/* a data source whose descriptor makes every QueryServiceState reply ~100 KB */
	inproc_producer(&h, &p, "bulky", false);
	size_t m = sonde__pb_begin(&a, PF_REGISTER_DS_REQ_DESCRIPTOR);
	sonde__pb_put_string(&a, PF_DS_DESCRIPTOR_NAME, "bulky.ds");
	char *blob = calloc(1, 100000);
	ASSERT(blob != NULL);
	sonde__pb_put_bytes(&a, 1000, blob, 100000);
	free(blob);
	sonde__pb_end(&a, m);
	tc_msg_free(tc_ok(&p.t, tc_call(&p.t, "RegisterDataSource", &a, -1, false)));
	inproc_consumer_small_sndbuf(&h, &kept);
	uint64_t first = kept.next_id;
	unread_requests(&h, &kept, ANSWERED + MAX_WAITING);
	inproc_consumer_small_sndbuf(&h, &closed);
	unread_requests(&h, &closed, ANSWERED + MAX_WAITING + 1);
	ASSERT(closed_by_peer(&closed));
	struct pollfd pf = {kept.ch.fd, 0, 0}; /* not closed (POLLHUP), nothing read */
	ASSERT_INT(poll(&pf, 1, 0), ==, 0);
	for (int i = 0; i < ANSWERED + MAX_WAITING; i++)
		tc_msg_free(tc_ok(&kept, first + (uint64_t)i));
	/* everybody else is served */
	inproc_consumer(&h, &other);
	tc_msg_free(tc_ok(&other, tc_call(&other, "QueryCapabilities", NULL, -1, false)));
	tc_close(&other);
	tc_close(&kept);
	tc_close(&closed);
	tc_close(&p.t);
	sonde__buf_free(&a);
	inproc_down(&h);
}

TEST_TIMEOUT(sec_another_uid_cannot_read_flush_stop_or_attach_a_session, 60)
{
	struct inproc h;
	struct sonded d;
	struct tprod p;
	struct tc rc, nc;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT, pk = BUF_INIT;
	unsigned moves[1][2] = {{0, 0}};

	sec_require_root();
	up(&h, &d, NULL);
	tprod_open(&p, d.psock, "root-producer", false);
	tprod_register(&p, "test.ds", false, false);
	tc_open(&rc, d.csock, "ConsumerPort");
	tcfg_basic(&cfg, 1024, one_ds, 1);
	tcons_enable(&rc, &cfg, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	sonde__pb_put_string(&pk, 900, "root-secret");
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&p, 0, SMB_LAYOUT_DIV4, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&p, moves, 1, target, 0, NULL);
	struct tc_msg *m = tc_call_key(&rc, "Detach", "the-key");
	ASSERT(m->f.success);
	tc_msg_free(m);
	tc_close(&rc); /* detached: the session lives on */

	tc_open_fd(&nc, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	m = tc_call_key(&nc, "Attach", "the-key"); /* detached sessions are found by (uid, key) */
	ASSERT(!m->f.success);
	tc_msg_free(m);
	tcons_read(&nc, &trace);
	ASSERT_INT(trace_count(&trace, "root-secret", 11, NULL), ==, 0);
	m = tc_wait(&nc, tc_call(&nc, "Flush", NULL, -1, false), 10000);
	ASSERT(m && !m->f.success);
	tc_msg_free(m);
	tc_msg_free(tc_ok(&nc, tc_call(&nc, "DisableTracing", NULL, -1, false)));
	tc_msg_free(tc_ok(&nc, tc_call(&nc, "FreeBuffers", NULL, -1, false)));
	tc_close(&nc);

	/* root's session is untouched: still started, its data unread */
	tc_open(&rc, d.csock, "ConsumerPort");
	m = tc_call_key(&rc, "Attach", "the-key");
	ASSERT(m->f.success);
	tc_msg_free(m);
	if (tprod_cmd(&p, &cmd, 200)) {
		ASSERT_UINT(cmd.kind, !=, PF_ASYNC_CMD_STOP_DATA_SOURCE);
		tc_msg_free(cmd.m);
	}
	sonde__buf_reset(&trace);
	tcons_read(&rc, &trace);
	ASSERT_INT(trace_count(&trace, "root-secret", 11, NULL), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	sonde__buf_free(&pk);
	tc_close(&rc);
	tc_close(&p.t);
	down(&h);
}
