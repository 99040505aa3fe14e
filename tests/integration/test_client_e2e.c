/* The client library against the real sonded over real sockets: producer in a child
 * process, consumer in the test. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/client.h>

#include "base/buf.h"
#include "base/pb.h"

#include "../test.h"
#include "../util.h"
#include "client_util.h"

static void append_record(void *ctx, const void *pkt, size_t len)
{
	struct buf *b = ctx;
	sonde__pb_put_bytes(b, 1, pkt, len);
}

static uint8_t *make_config(size_t *len, uint32_t duration_ms, uint32_t buf_kb,
			    const struct sonde_trace_config_opts *extra)
{
	struct sonde_trace_config_opts o = {.sz = sizeof(o)};
	if (extra)
		o = *extra;
	o.duration_ms = duration_ms;
	struct sonde_trace_config *cfg = ASSERT_NOT_NULL(sonde_trace_config__new(&o));
	uint8_t *out;
	ASSERT_OK(sonde_trace_config__add_buffer(cfg, buf_kb, SONDE_FILL_RING_BUFFER));
	ASSERT_OK(sonde_trace_config__add_data_source(cfg, "client.test", 0, NULL, 0));
	ASSERT_OK(sonde_trace_config__encode(cfg, &out, len));
	sonde_trace_config__free(cfg);
	return out;
}

/* Enables a session, waits for it to end, reads it into *trace. */
static void run_session(const struct client_svc *svc, uint32_t duration_ms, uint32_t buf_kb,
			struct buf *trace)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = svc->csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_consumer_cbs cbs = {
		.sz = sizeof(cbs), .on_packet = append_record, .ctx = trace};
	char err[256];
	size_t len;
	uint8_t *cfg = make_config(&len, duration_ms, buf_kb, NULL);

	sonde_consumer__set_callbacks(c, &cbs);
	ASSERT_OK(sonde_consumer__enable_tracing(c, cfg, len, -1));
	ASSERT_OK(sonde_consumer__wait_disabled(c, 30000, err, sizeof(err)));
	ASSERT_STR_EQ(err, "");
	ASSERT_OK(sonde_consumer__read_buffers_sync(c, 30000));
	sonde_consumer__free(c);
	free(cfg);
}

static void run_producer_session_at(const struct client_prod_opts *po, uint32_t buf_kb, int expect,
				    bool tcp)
{
	struct client_svc svc;
	struct buf trace = BUF_INIT;
	char plist[512], cons[64], remote[64];

	if (tcp) {
		/* the producer socket a list (listened on each): a Unix one, then TCP */
		snprintf(remote, sizeof(remote), "127.0.0.1:%u", test_free_tcp_port());
		snprintf(plist, sizeof(plist), "%s,%s", test_path("prod.sock"), remote);
		snprintf(cons, sizeof(cons), "127.0.0.1:%u", test_free_tcp_port());
		client_svc_start_at(&svc, plist, cons);
	} else {
		client_svc_start(&svc);
	}
	struct client_prod_opts o = *po;
	o.socket = tcp ? remote : svc.psock;
	pid_t prod = client_prod_spawn(&o);
	client_wait_data_source(svc.csock, "client.test");
	run_session(&svc, 1500, buf_kb, &trace);
	ASSERT_INT(test_wait(prod, 20), ==, 0);
	ASSERT_INT(client_count_test_packets(trace.data, trace.len, po->packets, po->big), ==,
		   expect);
	client_svc_stop(&svc);
	sonde__buf_free(&trace);
}

static void run_producer_session(const struct client_prod_opts *po, uint32_t buf_kb, int expect)
{
	run_producer_session_at(po, buf_kb, expect, false);
}

TEST_TIMEOUT(client_e2e_session_small_packets, 90)
{
	struct client_prod_opts o = {.packets = 500, .commit_on_start = true};
	run_producer_session(&o, 4096, 500);
}

TEST_TIMEOUT(client_e2e_large_packets_with_patches, 120)
{
	/* 200 KiB packets with nested lengths span ~50 chunks of 4 KiB each */
	struct client_prod_opts o = {.packets = 8, .big = 200 * 1024, .commit_on_start = true};
	run_producer_session(&o, 8192, 8);
}

TEST_TIMEOUT(client_e2e_uncommitted_data_arrives_by_flush, 90)
{
	/* the producer never commits by itself: only the session-end flush brings the data */
	struct client_prod_opts o = {.packets = 50};
	run_producer_session(&o, 4096, 50);
}

TEST_TIMEOUT(client_e2e_producer_provided_smb, 90)
{
	struct client_prod_opts o = {.packets = 300,
				     .commit_on_start = true,
				     .provided_smb = true,
				     .smb_size = 128 * 1024,
				     .page_size = 8192};
	run_producer_session(&o, 4096, 300);
}

/* Over TCP the service asks for shared-memory emulation: the producer's chunks, patches and
 * fragments travel inline, and the consumer reads over TCP too. */
TEST_TIMEOUT(client_e2e_tcp_emulated_small_packets, 90)
{
	struct client_prod_opts o = {.packets = 500, .commit_on_start = true};
	run_producer_session_at(&o, 4096, 500, true);
}

TEST_TIMEOUT(client_e2e_tcp_emulated_large_packets_with_patches, 120)
{
	struct client_prod_opts o = {.packets = 8, .big = 200 * 1024, .commit_on_start = true};
	run_producer_session_at(&o, 8192, 8, true);
}

TEST_TIMEOUT(client_e2e_tcp_emulated_data_arrives_by_flush, 90)
{
	struct client_prod_opts o = {.packets = 50};
	run_producer_session_at(&o, 4096, 50, true);
}

TEST_TIMEOUT(client_e2e_flush_while_tracing, 90)
{
	struct client_svc svc;
	struct buf trace = BUF_INIT;
	struct client_prod_opts o = {.packets = 40};

	client_svc_start(&svc);
	o.socket = svc.psock;
	pid_t prod = client_prod_spawn(&o);
	client_wait_data_source(svc.csock, "client.test");
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = svc.csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_consumer_cbs cbs = {
		.sz = sizeof(cbs), .on_packet = append_record, .ctx = &trace};
	sonde_consumer__set_callbacks(c, &cbs);
	size_t len;
	uint8_t *cfg = make_config(&len, 0, 4096, NULL);
	ASSERT_OK(sonde_consumer__enable_tracing(c, cfg, len, -1));
	/* the packets are written at start but left in the producer's chunk: a flush must
	 * bring them in while the session keeps running */
	int found = 0;
	for (double end = test_now() + 10; found < 40 && test_now() < end;) {
		ASSERT_OK(sonde_consumer__flush_sync(c, 5000, 10000));
		ASSERT_OK(sonde_consumer__read_buffers_sync(c, 10000));
		found = client_count_test_packets(trace.data, trace.len, 40, 0);
	}
	ASSERT_INT(found, ==, 40);
	ASSERT(!sonde_consumer__disabled(c));
	struct sonde_trace_stats st;
	ASSERT_OK(sonde_consumer__get_trace_stats_sync(c, &st, 5000));
	ASSERT_UINT(st.n_buffers, ==, 1);
	ASSERT_UINT(st.buffers[0].chunks_written, >=, 1);
	ASSERT_UINT(st.buffers[0].abi_violations, ==, 0);
	ASSERT_OK(sonde_consumer__disable_tracing(c));
	ASSERT_OK(sonde_consumer__wait_disabled(c, 20000, NULL, 0));
	sonde_consumer__free(c);
	ASSERT_INT(test_wait(prod, 20), ==, 0);
	client_svc_stop(&svc);
	free(cfg);
	sonde__buf_free(&trace);
}

TEST_TIMEOUT(client_e2e_write_into_file, 90)
{
	struct client_svc svc;
	struct client_prod_opts o = {.packets = 200, .commit_on_start = true};

	client_svc_start(&svc);
	o.socket = svc.psock;
	pid_t prod = client_prod_spawn(&o);
	client_wait_data_source(svc.csock, "client.test");
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = svc.csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_trace_config_opts extra = {
		.sz = sizeof(extra), .write_into_file = true, .file_write_period_ms = 100};
	size_t len;
	uint8_t *cfg = make_config(&len, 1500, 4096, &extra);
	const char *path = test_path("wif.pftrace");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	ASSERT(fd >= 0);
	ASSERT_OK(sonde_consumer__enable_tracing(c, cfg, len, fd));
	close(fd); /* the service has its own copy */
	char err[256];
	ASSERT_OK(sonde_consumer__wait_disabled(c, 30000, err, sizeof(err)));
	ASSERT_STR_EQ(err, "");
	sonde_consumer__free(c);
	size_t n;
	char *data = ASSERT_NOT_NULL(test_read_file(path, &n));
	ASSERT_INT(client_count_test_packets(data, n, 200, 0), ==, 200);
	free(data);
	ASSERT_INT(test_wait(prod, 20), ==, 0);
	client_svc_stop(&svc);
	free(cfg);
}

TEST_TIMEOUT(client_e2e_query_lists_producer_and_data_source, 60)
{
	struct client_svc svc;
	struct client_prod_opts o = {.packets = 1};

	client_svc_start(&svc);
	o.socket = svc.psock;
	pid_t prod = client_prod_spawn(&o);
	client_wait_data_source(svc.csock, "client.test");
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = svc.csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_service_state *s;
	ASSERT_OK(sonde_consumer__query_service_state_sync(c, &s, 5000));
	int idx = -1;
	for (size_t i = 0; i < s->n_producers; i++)
		if (!strcmp(s->producers[i].name, "client-test"))
			idx = (int)i;
	ASSERT_INT(idx, >=, 0);
	ASSERT_INT(s->producers[idx].uid, ==, (int)getuid());
	bool ds = false;
	for (size_t i = 0; i < s->n_data_sources; i++)
		ds |= !strcmp(s->data_sources[i].name, "client.test") &&
		      s->data_sources[i].producer_id == s->producers[idx].id &&
		      s->data_sources[i].will_notify_on_stop;
	ASSERT(ds);
	sonde_service_state__free(s);
	sonde_consumer__free(c);
	kill(prod, SIGKILL);
	test_wait(prod, 10);
	client_svc_stop(&svc);
}

TEST(client_e2e_no_service_names_the_socket)
{
	struct sonde_producer_opts po = {
		.sz = sizeof(po), .name = "x", .socket = test_path("nothing.sock")};
	errno = 0;
	ASSERT(sonde_producer__new(&po) == NULL);
	ASSERT_INT(errno, ==, ENOENT);
	ASSERT_STR_EQ(sonde_producer__socket_path(&po), test_path("nothing.sock"));
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = test_path("nothing.sock")};
	ASSERT(sonde_consumer__new(&co) == NULL);
	ASSERT_INT(errno, ==, ENOENT);
	/* the default path follows the environment */
	setenv("PERFETTO_CONSUMER_SOCK_NAME", "/x/y.sock", 1);
	ASSERT_STR_EQ(sonde_consumer__socket_path(NULL), "/x/y.sock");
	setenv("PERFETTO_PRODUCER_SOCK_NAME", "@abstract", 1);
	ASSERT_STR_EQ(sonde_producer__socket_path(NULL), "@abstract");
}
