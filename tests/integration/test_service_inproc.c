/* The service in-process on a clock the test advances (svc_inproc.h): the timing of
 * flushes, stop acks, deferred start, duration_ms, file write periods and Detach/Attach
 * asserted to the millisecond, without spawning sonded and without sleeping. A session end
 * to end over real sockets stays in test_service.c's black-box tests. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include <sonde/service.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_inproc.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

/* Producer registered, consumer enabled, setup received. */
struct irig {
	struct inproc h;
	struct tprod p;
	struct tc c;
	uint64_t enable_req, inst;
	uint32_t target;
};

static void irig_up(struct irig *r, const struct buf *cfg, bool nstart, bool nstop)
{
	struct tcmd cmd;

	inproc_up(&r->h);
	inproc_producer(&r->h, &r->p, "test-producer", false);
	tprod_register(&r->p, "test.ds", nstart, nstop);
	inproc_consumer(&r->h, &r->c);
	r->enable_req = tcons_enable(&r->c, cfg, -1);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->inst = cmd.inst_id;
	r->target = cmd.target_buffer;
	ASSERT_UINT(r->target, >=, 1);
	ASSERT(r->p.smb != NULL);
}

static void irig_start(struct irig *r)
{
	struct tcmd cmd;

	tprod_expect(&r->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT_UINT(cmd.inst_id, ==, r->inst);
}

static void irig_down(struct irig *r)
{
	tc_close(&r->c);
	tc_close(&r->p.t);
	inproc_down(&r->h);
}

TEST_TIMEOUT(inproc_flush_is_acked_by_commit_or_fails_at_its_timeout, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT, pk = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	unsigned mv[1][2] = {{0, 0}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	irig_up(&r, &cfg, false, false);
	irig_start(&r);
	uint64_t req = tc_flush(&r.c, 5000);
	tprod_expect(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	ASSERT_UINT(cmd.flush_id, >, 0);
	inproc_advance(&r.h, 4999);
	ASSERT(tc_wait(&r.c, req, 0) == NULL); /* not before the producer acks */
	svc_make_packet(&pk, "flushed-packet", 0);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, cmd.flush_id, NULL);
	tc_msg_free(tc_ok(&r.c, req));

	/* a producer that never acks: the flush fails at its own timeout, not the default */
	req = tc_flush(&r.c, 300);
	tprod_expect(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	inproc_advance(&r.h, 299);
	ASSERT(tc_wait(&r.c, req, 0) == NULL);
	inproc_advance(&r.h, 1);
	struct tc_msg *m = tc_wait(&r.c, req, 0);
	ASSERT(m != NULL);
	ASSERT(!m->f.success);
	tc_msg_free(m);

	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "flushed-packet", 14, NULL), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pk);
	sonde__buf_free(&trace);
	irig_down(&r);
}

TEST_TIMEOUT(inproc_waits_for_stop_acks_and_times_them_out, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;

	tcfg_basic(&cfg, 256, one_ds, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_DATA_SOURCE_STOP_TIMEOUT_MS, 400);
	irig_up(&r, &cfg, true, true);
	irig_start(&r);
	tprod_notify(&r.p, "NotifyDataSourceStarted", r.inst);
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	inproc_advance(&r.h, 399);
	ASSERT(tc_wait(&r.c, r.enable_req, 0) == NULL); /* held until the ack */
	tprod_notify(&r.p, "NotifyDataSourceStopped", r.inst);
	char *err = tcons_wait_disabled(&r.c, r.enable_req, 0);
	ASSERT(err == NULL);
	tc_close(&r.c);

	/* second session: the producer never acks the stop; it ends at stop_timeout_ms */
	inproc_consumer(&r.h, &r.c);
	r.enable_req = tcons_enable(&r.c, &cfg, -1);
	tprod_expect(&r.p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	tprod_expect(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tprod_notify(&r.p, "NotifyDataSourceStarted", cmd.inst_id);
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	inproc_advance(&r.h, 399);
	ASSERT(tc_wait(&r.c, r.enable_req, 0) == NULL);
	inproc_advance(&r.h, 1);
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	sonde__buf_free(&cfg);
	irig_down(&r);
}

TEST_TIMEOUT(inproc_deferred_start_and_all_started_event, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT, a = BUF_INIT;
	struct tcmd cmd;

	tcfg_basic(&cfg, 256, one_ds, 1);
	sonde__pb_put_bool(&cfg, PF_TRACE_CONFIG_DEFERRED_START, true);
	irig_up(&r, &cfg, true, false);
	sonde__pb_put_varint(&a, PF_OBSERVE_EVENTS_REQ_EVENTS_TO_OBSERVE,
			     PF_OBSERVABLE_ALL_DATA_SOURCES_STARTED);
	uint64_t obs = tc_call(&r.c, "ObserveEvents", &a, -1, false);
	inproc_advance(&r.h, 60000);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* no start before StartTracing, however long */
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "StartTracing", NULL, -1, false)));
	irig_start(&r);
	ASSERT(tc_wait(&r.c, obs, 0) == NULL); /* STARTING until the producer says so */
	tprod_notify(&r.p, "NotifyDataSourceStarted", r.inst);
	struct tc_msg *m = tc_wait(&r.c, obs, 0);
	ASSERT(m != NULL);
	ASSERT(m->f.success && m->f.has_more);
	struct pb_reader rd = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f, g;
	bool all = false;
	while (sonde__pb_next(&rd, &f) > 0) {
		struct pb_reader er = pb_sub(&f);
		while (sonde__pb_next(&er, &g) > 0)
			all = all ||
			      (g.num == PF_OBSERVABLE_EVENTS_ALL_DATA_SOURCES_STARTED && g.u);
	}
	ASSERT(all);
	tc_msg_free(m);
	sonde__buf_free(&cfg);
	sonde__buf_free(&a);
	irig_down(&r);
}

TEST_TIMEOUT(inproc_duration_ms_flushes_then_stops_at_the_duration, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT, pk = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	unsigned mv[1][2] = {{0, 0}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_DURATION_MS, 2000);
	irig_up(&r, &cfg, false, false);
	irig_start(&r);
	svc_make_packet(&pk, "timed-packet", 0);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, 0, NULL);
	inproc_advance(&r.h, 1999);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* nothing before the duration */
	ASSERT(tc_wait(&r.c, r.enable_req, 0) == NULL);
	inproc_advance(&r.h, 1);
	tprod_expect(&r.p, PF_ASYNC_CMD_FLUSH, &cmd); /* expiry flushes first */
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	char *err = tcons_wait_disabled(&r.c, r.enable_req, 0);
	ASSERT(err == NULL);
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "timed-packet", 12, NULL), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pk);
	sonde__buf_free(&trace);
	irig_down(&r);
}

TEST_TIMEOUT(inproc_detached_session_survives_and_reattaches, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT, pk = BUF_INIT, trace = BUF_INIT, a = BUF_INIT;
	struct tcmd cmd;
	struct tc_msg *m;
	unsigned mv[1][2] = {{0, 0}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	irig_up(&r, &cfg, false, false);
	irig_start(&r);
	m = tc_call_key(&r.c, "Detach", "bg-key");
	ASSERT(m->f.success);
	tc_msg_free(m);
	tc_close(&r.c); /* the session must outlive this consumer */
	svc_make_packet(&pk, "detached-packet", 0);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, 0, NULL);
	inproc_advance(&r.h, 600000);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* no stop: still tracing, ten minutes on */

	inproc_consumer(&r.h, &r.c);
	m = tc_call_key(&r.c, "Attach", "wrong-key");
	ASSERT(!m->f.success);
	tc_msg_free(m);
	m = tc_call_key(&r.c, "Attach", "bg-key");
	ASSERT(m->f.success);
	ASSERT(m->f.data_len > 0); /* AttachResponse carries the session's TraceConfig */
	tc_msg_free(m);
	sonde__pb_put_bool(&a, PF_ENABLE_TRACING_REQ_ATTACH_NOTIFICATION_ONLY, true);
	r.enable_req = tc_call(&r.c, "EnableTracing", &a, -1, false);
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "detached-packet", 15, NULL), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pk);
	sonde__buf_free(&a);
	sonde__buf_free(&trace);
	irig_down(&r);
}

/* write_into_file: what was committed reaches the file at each file_write_period_ms of the
 * service's clock, not before; duration_ms then ends the session. */
TEST_TIMEOUT(inproc_write_into_file_at_each_write_period, 30)
{
	struct irig r;
	struct buf cfg = BUF_INIT, pk = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const char *path = test_path("period.pftrace");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	unsigned mv[1][2] = {{0, 0}};

	ASSERT(fd >= 0);
	tcfg_basic(&cfg, 1024, one_ds, 1);
	sonde__pb_put_bool(&cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, 5000);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_DURATION_MS, 60000);
	inproc_up(&r.h);
	inproc_producer(&r.h, &r.p, "test-producer", false);
	tprod_register(&r.p, "test.ds", false, false);
	inproc_consumer(&r.h, &r.c);
	r.enable_req = tcons_enable(&r.c, &cfg, fd);
	close(fd);
	tprod_expect(&r.p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r.target = cmd.target_buffer;
	r.inst = cmd.inst_id;
	tc_msg_free(cmd.m);
	irig_start(&r);
	svc_make_packet(&pk, "period-packet", 0);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, 0, NULL);
	inproc_advance(&r.h, 4999);
	/* the period has not come: the packet stays in the buffer (a writer that had it
	 * would have had it at once; nothing to wait for) */
	ASSERT_INT(inproc_file_count_when(path, "period-packet", 0), ==, 0);
	inproc_advance(&r.h, 1);
	ASSERT_INT(inproc_file_count_when(path, "period-packet", 1), ==, 1);
	/* duration_ms: a flush, the stop, and the session's end, with nothing streamed */
	inproc_advance(&r.h, 60000 - 5000);
	tprod_expect(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	/* the session ends once the writer thread has written the file's tail, which the
	 * service looks for every 20 ms of its clock */
	struct tc_msg *m = inproc_wait_writer_reply(&r.h, &r.c, r.enable_req, 20);
	ASSERT(m != NULL);
	ASSERT(m->f.success);
	tc_msg_free(m);
	tcons_read(&r.c, &trace);
	ASSERT_UINT(trace.len, ==, 0); /* a write_into_file session streams nothing */
	ASSERT_INT(inproc_file_count_when(path, "period-packet", 1), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pk);
	sonde__buf_free(&trace);
	irig_down(&r);
}

/* Whether the service closed fd (EOF) by now; false while it is open and quiet. */
static bool closed_by_peer(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);

	if (n < 0)
		ASSERT_INT(errno, ==, EAGAIN);
	return n == 0;
}

/* A network peer that says nothing is closed once remote_handshake_ms of the service's
 * clock have passed (looked for at its once-a-second housekeeping); one that bound and
 * initialized stays, however old. */
TEST_TIMEOUT(inproc_silent_network_peer_is_closed_after_the_handshake_timeout, 30)
{
	struct sonde_service_opts o = {.sz = sizeof(o)};
	struct inproc h;
	struct tprod good;
	char paddr[64], prod[400];

	snprintf(paddr, sizeof(paddr), "127.0.0.1:%u", test_free_tcp_port());
	snprintf(prod, sizeof(prod), "%s,%s", test_path("inproc-producer.sock"), paddr);
	o.producer_socket = prod;
	o.remote_handshake_ms = 2000;
	inproc_up_opts(&h, &o);
	tprod_open(&good, paddr, "remote-good", false);
	int idle = sonde__ipc_connect(paddr);
	ASSERT(idle >= 0);
	inproc_run(&h); /* accepted */
	inproc_advance(&h, 2000);
	ASSERT(!closed_by_peer(idle)); /* not before the timeout */
	inproc_advance(&h, 1000);
	ASSERT(closed_by_peer(idle));
	close(idle);
	tprod_register(&good, "test.ds", false, false); /* still served */
	tc_close(&good.t);
	inproc_down(&h);
}

/* ------------------------------------------------------------------ ChangeTraceConfig */

/* ChangeTraceConfig's outcome. */
static bool change_config_ok(struct tc *c, const struct buf *cfg)
{
	struct tc_msg *m = tcons_change_config(c, cfg);
	bool ok = m->f.success;

	tc_msg_free(m);
	return ok;
}

/* ChangeTraceConfig takes a new machine_name_filter and applies it as StartTracing does:
 * a producer of a machine the new filter names gets an instance, one of a machine it does
 * not name gets none, also when its producer name filter now matches. */
TEST_TIMEOUT(inproc_change_trace_config_honours_machine_name_filter, 30)
{
	struct sonde_service_opts o = {.sz = sizeof(o), .machine_name = "box-a"};
	static const char *const elsewhere[] = {"box-b"}, *const here[] = {"box-a"},
				 *const host[] = {"host"}, *const prod_p[] = {"prod-p"};
	struct tcfg_filter f = {
		.producers = prod_p, .n_producers = 1, .machines = elsewhere, .n_machines = 1};
	struct inproc h;
	struct tprod p, q;
	struct tc c;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT;

	inproc_up_opts(&h, &o);
	inproc_producer(&h, &p, "prod-p", false);
	inproc_producer(&h, &q, "prod-q", false);
	tprod_register(&p, "test.ds", false, false);
	tprod_register(&q, "test.ds", false, false);
	inproc_consumer(&h, &c);
	tcfg_filtered(&cfg, &f);
	tcons_enable(&c, &cfg, -1);
	ASSERT(!tprod_cmd(&p, &cmd, 0));
	ASSERT(!tprod_cmd(&q, &cmd, 0));

	/* this machine by its name: prod-p (the producer filter's) starts, prod-q does not */
	f.machines = here;
	tcfg_filtered(&cfg, &f);
	ASSERT(change_config_ok(&c, &cfg));
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT(!tprod_cmd(&q, &cmd, 0));

	/* prod-q named too, but on another machine only: still nothing for it */
	f.n_producers = 0;
	f.machines = elsewhere;
	tcfg_filtered(&cfg, &f);
	ASSERT(change_config_ok(&c, &cfg));
	ASSERT(!tprod_cmd(&q, &cmd, 0));
	ASSERT(!tprod_cmd(&p, &cmd, 0)); /* a running instance is left alone */

	/* "host" stands for this machine's producers: prod-q joins */
	f.machines = host;
	tcfg_filtered(&cfg, &f);
	ASSERT(change_config_ok(&c, &cfg));
	tprod_expect(&q, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	tprod_expect(&q, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT(!tprod_cmd(&p, &cmd, 0));

	/* anything else than the filters still may not change */
	f.duration_ms = 5000;
	tcfg_filtered(&cfg, &f);
	ASSERT(!change_config_ok(&c, &cfg));
	tc_close(&q.t);
	tc_close(&p.t);
	tc_close(&c);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

/* sonded's wait: sonde_service__poll with its signalfd watched, one epoll_wait per wakeup.
 * A request and the watched fd, ready together, are handled by one call: it returns 1 for
 * the fd with the reply already on the consumer's socket. With the fd read and nothing
 * else ready, a call that does not wait returns 0. */
TEST_TIMEOUT(inproc_poll_serves_requests_and_reports_the_watched_fd_in_one_wait, 30)
{
	struct inproc h;
	struct tc c;
	int own[2];
	char ch;

	inproc_up(&h);
	inproc_consumer(&h, &c);
	ASSERT_OK(pipe(own));
	ASSERT_OK(sonde_service__watch_fd(h.svc, own[0]));
	uint64_t req = tc_call(&c, "QueryCapabilities", NULL, -1, false);
	ASSERT_INT(write(own[1], "s", 1), ==, 1);
	ASSERT_INT(sonde_service__poll(h.svc, -1), ==, 1);
	struct pollfd p = {c.ch.fd, POLLIN, 0};
	ASSERT_INT(poll(&p, 1, 0), ==, 1);
	ASSERT_INT(read(own[0], &ch, 1), ==, 1);
	ASSERT_INT(sonde_service__poll(h.svc, 0), ==, 0);
	tc_msg_free(tc_ok(&c, req));
	tc_close(&c);
	close(own[0]);
	close(own[1]);
	inproc_down(&h);
}

/* The producer names of every part of a QueryServiceState reply on c: how many of the
 * names[0..n) it lists, and how many parts it came in. */
static size_t qss_names(struct tc *c, char names[][1100], size_t n, int *parts)
{
	uint64_t id = tc_call(c, "QueryServiceState", NULL, -1, false);
	struct buf all = BUF_INIT;
	size_t found = 0;

	*parts = 0;
	for (bool more = true; more;) {
		struct tc_msg *m = tc_wait(c, id, 10000);
		if (!m)
			FAIL("QueryServiceState was not answered (part %d)", *parts + 1);
		ASSERT(m->f.success);
		sonde__buf_append(&all, m->f.data, m->f.data_len);
		more = m->f.has_more;
		(*parts)++;
		tc_msg_free(m);
	}
	for (size_t i = 0; i < n; i++)
		found += memmem(all.data, all.len, names[i], strlen(names[i])) != NULL;
	sonde__buf_free(&all);
	return found;
}

/* QueryServiceState comes in parts that each fit a frame, producers and sessions
 * measured like data sources: 160 producers with 1000-byte names were put in one part
 * past 128 KiB, which dropped the asking consumer (`sonde trace` asks first: nobody
 * could trace). A name past 1024 bytes is refused at InitializeConnection, and the
 * connection may try again. */
TEST_TIMEOUT(inproc_query_service_state_parts_fit_frames_and_names_are_bounded, 60)
{
	enum { N = 160 };
	static char names[N][1100];
	static struct tprod p[N];
	struct inproc h;
	struct tc c, big;
	struct buf a = BUF_INIT;
	static char huge[70000];
	int parts;

	inproc_up(&h);
	for (size_t i = 0; i < N; i++) {
		memset(names[i], 'a' + i % 26, 1000);
		snprintf(names[i] + 1000, 100, "-%zu", i);
		inproc_producer(&h, &p[i], names[i], false);
	}
	inproc_consumer(&h, &c);
	ASSERT_UINT(qss_names(&c, names, N, &parts), ==, N);
	ASSERT_INT(parts, >=, 2);

	tc_open_fd(&big, inproc_adopt(&h, true), "ProducerPort");
	memset(huge, 'y', sizeof(huge) - 1);
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, huge);
	struct tc_msg *m = tc_wait(&big, tc_call(&big, "InitializeConnection", &a, -1, false), 10000);
	ASSERT(m != NULL);
	ASSERT(!m->f.success);
	tc_msg_free(m);
	sonde__buf_reset(&a);
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "small-again");
	tc_msg_free(tc_ok(&big, tc_call(&big, "InitializeConnection", &a, -1, false)));
	ASSERT_UINT(qss_names(&c, names, N, &parts), ==, N);

	sonde__buf_free(&a);
	tc_close(&big);
	for (size_t i = 0; i < N; i++)
		tc_close(&p[i].t);
	tc_close(&c);
	inproc_down(&h);
}
