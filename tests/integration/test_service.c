/* The service driven with raw IPC frames. Black-box, over a spawned sonded's sockets:
 * binding and method ids, a producer session end to end, write_into_file to an
 * output_path, socket names from the environment. In-process (svc_inproc.h, the clock
 * moved by the test): fragmentation, patching, scraping, write_into_file through the
 * consumer's fd, session isolation, producer SMB adoption, large reads, RING_BUFFER and
 * DISCARD, max_file_size_bytes. Flush and stop acks with their timeouts, deferred start,
 * duration_ms, file write periods and Detach/Attach are timed in test_service_inproc.c. */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_inproc.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

/* Producer registered, consumer enabled, setup and start received: on a spawned sonded's
 * sockets, or in-process (svc_inproc.h), where every wait runs the service instead. */
struct rig {
	bool inproc;
	struct sonded d;
	struct inproc h;
	struct tprod p;
	struct tc c;
	uint64_t enable_req, inst;
	uint32_t target;
};

static void rig_enable(struct rig *r, const struct buf *cfg, bool scraping, bool nstart, bool nstop)
{
	struct tcmd cmd;

	if (r->inproc) {
		inproc_producer(&r->h, &r->p, "test-producer", scraping);
		tprod_register(&r->p, "test.ds", nstart, nstop);
		inproc_consumer(&r->h, &r->c);
	} else {
		tprod_open(&r->p, r->d.psock, "test-producer", scraping);
		tprod_register(&r->p, "test.ds", nstart, nstop);
		tc_open(&r->c, r->d.csock, "ConsumerPort");
	}
	r->enable_req = tcons_enable(&r->c, cfg, -1);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->inst = cmd.inst_id;
	r->target = cmd.target_buffer;
	ASSERT_UINT(r->target, >=, 1);
	ASSERT(r->p.smb != NULL); /* setup_tracing came first, with the fd */
}

/* The in-process rig. */
static void rig_up(struct rig *r, const struct buf *cfg, bool scraping, bool nstart, bool nstop)
{
	r->inproc = true;
	inproc_up(&r->h);
	rig_enable(r, cfg, scraping, nstart, nstop);
}

/* The rig on a spawned sonded's sockets. */
static void rig_up_sonded(struct rig *r, const struct buf *cfg)
{
	r->inproc = false;
	sonded_start(&r->d, NULL);
	rig_enable(r, cfg, false, false, false);
}

static void rig_start(struct rig *r)
{
	struct tcmd cmd;

	tprod_expect(&r->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT_UINT(cmd.inst_id, ==, r->inst);
	ASSERT_UINT(cmd.target_buffer, ==, r->target);
}

static void rig_stop_and_read(struct rig *r, struct buf *trace)
{
	struct tcmd cmd;

	tc_msg_free(tc_ok(&r->c, tc_call(&r->c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&r->p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r->c, r->enable_req, 10000));
	tcons_read(&r->c, trace);
}

static void rig_down(struct rig *r)
{
	tc_close(&r->c);
	tc_close(&r->p.t);
	if (r->inproc)
		inproc_down(&r->h);
	else
		sonded_stop(&r->d);
}

TEST_TIMEOUT(sonded_binds_and_lists_methods_in_proto_order, 60)
{
	struct sonded d;
	struct tc p, c, x;

	sonded_start(&d, NULL);
	tc_open(&p, d.psock, "ProducerPort");
	ASSERT_UINT(tc_method_id(&p, "InitializeConnection"), ==, 1);
	ASSERT_UINT(tc_method_id(&p, "CommitData"), ==, 4);
	ASSERT_UINT(tc_method_id(&p, "GetAsyncCommand"), ==, 5);
	ASSERT_UINT(tc_method_id(&p, "Sync"), ==, 11);
	ASSERT_UINT(tc_method_id(&p, "UpdateDataSource"), ==, 12);
	tc_open(&c, d.csock, "ConsumerPort");
	ASSERT_UINT(tc_method_id(&c, "EnableTracing"), ==, 1);
	ASSERT_UINT(tc_method_id(&c, "ReadBuffers"), ==, 3);
	ASSERT_UINT(tc_method_id(&c, "StartTracing"), ==, 6);
	ASSERT_UINT(tc_method_id(&c, "GetTraceStats"), ==, 10);
	ASSERT_UINT(tc_method_id(&c, "QueryCapabilities"), ==, 13);
	ASSERT_UINT(tc_method_id(&c, "Detach"), ==, 8);
	ASSERT_UINT(tc_method_id(&c, "Attach"), ==, 9);
	ASSERT_UINT(tc_method_id(&c, "ChangeTraceConfig"), ==, 7);
	ASSERT_UINT(tc_method_id(&c, "CloneSession"), ==, 15);

	/* unknown service: a reply without success */
	struct ipc_frame f = {
		.request_id = 7, .msg = IPC_MSG_BIND_SERVICE, .name = "Nope", .name_len = 4};
	ASSERT_OK(sonde__ipc_chan_send(&c.ch, &f, -1));
	struct tc_msg *m = tc_wait(&c, 7, 5000);
	ASSERT(m && m->f.msg == IPC_MSG_BIND_SERVICE_REPLY && !m->f.success);
	tc_msg_free(m);
	/* out-of-range method: success=false even with drop_reply */
	f = (struct ipc_frame){.request_id = 8,
			       .msg = IPC_MSG_INVOKE_METHOD,
			       .service_id = 1,
			       .method_id = 99,
			       .drop_reply = true};
	ASSERT_OK(sonde__ipc_chan_send(&c.ch, &f, -1));
	m = tc_wait(&c, 8, 5000);
	ASSERT(m && m->f.msg == IPC_MSG_INVOKE_METHOD_REPLY && !m->f.success);
	tc_msg_free(m);
	/* a frame without a msg: request_error */
	f = (struct ipc_frame){.request_id = 9};
	ASSERT_OK(sonde__ipc_chan_send(&c.ch, &f, -1));
	m = tc_wait(&c, 9, 5000);
	ASSERT(m && m->f.msg == IPC_MSG_REQUEST_ERROR);
	tc_msg_free(m);
	/* producer methods before InitializeConnection are rejected */
	m = tc_wait(&p, tc_call(&p, "Sync", NULL, -1, false), 5000);
	ASSERT(m && !m->f.success);
	tc_msg_free(m);
	/* a consumer without a session gets a single, empty, final ReadBuffers reply */
	m = tc_ok(&c, tc_call(&c, "ReadBuffers", NULL, -1, false));
	ASSERT(!m->f.has_more);
	tc_msg_free(m);
	m = tc_ok(&c, tc_call(&c, "QueryCapabilities", NULL, -1, false));
	tc_msg_free(m);
	tc_open(&x, d.psock, "ProducerPort"); /* several connections at once */
	tc_close(&x);
	tc_close(&p);
	tc_close(&c);
	sonded_stop(&d);
}

TEST_TIMEOUT(sonded_producer_session_end_to_end, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT, pk = BUF_INIT, trace = BUF_INIT;
	struct tpkt last;
	unsigned moves[2][2] = {{0, 0}, {0, 1}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	rig_up_sonded(&r, &cfg);
	rig_start(&r);
	/* two chunks of a Div4 page, three packets each */
	struct iovec v[3];
	struct buf p3[3] = {BUF_INIT, BUF_INIT, BUF_INIT};
	for (int c = 0; c < 2; c++) {
		for (int i = 0; i < 3; i++) {
			char tag[32];
			snprintf(tag, sizeof(tag), "e2e-packet-%d", c * 3 + i);
			svc_make_packet(&p3[i], tag, 0);
			v[i] = (struct iovec){p3[i].data, p3[i].len};
		}
		tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV4, (unsigned)c, 1, (uint32_t)c, 0, v, 3, true);
	}
	tprod_commit(&r.p, moves, 2, r.target, 0, NULL);
	/* the chunks were freed: the page is free again */
	ASSERT_UINT(smb_bitmap_load(smb_page_bitmap(r.p.smb, r.p.page, 0)), ==, 0);
	rig_stop_and_read(&r, &trace);
	for (int i = 0; i < 6; i++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "e2e-packet-%d", i);
		ASSERT_INT(trace_count(&trace, tag, strlen(tag), &last), ==, 1);
		ASSERT(last.has_uid && last.has_seq);
		ASSERT_INT(last.uid, ==, getuid());
		ASSERT_UINT(last.seq, >=, 2);
		ASSERT_INT(last.dropped, ==, i == 0); /* only the first packet of the sequence */
	}
	/* service packets on sequence 1 */
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRACE_CONFIG), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_CLOCK_SNAPSHOT), >=, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_SYNCHRONIZATION_MARKER), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_SYSTEM_INFO), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRACE_STATS), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_SERVICE_EVENT), >=, 2);
	/* a second read returns nothing of the producer's again */
	sonde__buf_reset(&trace);
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "e2e-packet", 10, NULL), ==, 0);
	for (int i = 0; i < 3; i++)
		sonde__buf_free(&p3[i]);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pk);
	sonde__buf_free(&trace);
	rig_down(&r);
}

static void register_writer(struct tprod *p, uint32_t writer, uint32_t target)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_WRITER_ID, writer);
	sonde__pb_put_varint(&a, PF_REGISTER_TW_REQ_TARGET_BUFFER, target);
	tc_call(&p->t, "RegisterTraceWriter", &a, -1, true);
	sonde__buf_free(&a);
}

/* The packet containing tag must equal want byte for byte, followed by the suffix. */
static void assert_packet(const struct buf *trace, const char *tag, const struct buf *want)
{
	struct tpkt pk;

	ASSERT_INT(trace_count(trace, tag, strlen(tag), &pk), ==, 1);
	ASSERT_UINT(pk.len, >, want->len);
	ASSERT_MEM_EQ(pk.p, want->data, want->len);
	ASSERT(pk.has_uid && pk.has_seq && pk.seq >= 2);
}

TEST_TIMEOUT(sonded_reassembles_packets_fragmented_across_chunks, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT, a = BUF_INIT, big = BUF_INIT, c = BUF_INIT, trace = BUF_INIT;
	unsigned m01[2][2] = {{0, 0}, {1, 0}}, m2[1][2] = {{2, 0}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	rig_up(&r, &cfg, false, false, false);
	rig_start(&r);
	svc_make_packet(&a, "frag-small-a", 0);
	svc_make_packet(&big, "frag-big-b", 10000); /* > two 4080-byte payloads */
	svc_make_packet(&c, "frag-small-c", 0);
	size_t p0 = 4080 - (4 + a.len) - 4, p1 = 4080 - 4;
	ASSERT_UINT(big.len, >, p0 + p1);
	struct iovec c0[2] = {{a.data, a.len}, {big.data, p0}};
	struct iovec c1[1] = {{big.data + p0, p1}};
	struct iovec c2[2] = {{big.data + p0 + p1, big.len - p0 - p1}, {c.data, c.len}};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 10, SMB_FLAG_LAST_PACKET_CONTINUES, c0, 2,
		    true);
	tprod_chunk(&r.p, 1, SMB_LAYOUT_DIV1, 0, 1, 11,
		    SMB_FLAG_FIRST_PACKET_CONTINUES | SMB_FLAG_LAST_PACKET_CONTINUES, c1, 1, true);
	tprod_commit(&r.p, m01, 2, r.target, 0, NULL);
	/* the tail has not arrived: the big packet waits, the one before it does not */
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "frag-small-a", 12, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "frag-big-b", 10, NULL), ==, 0);
	tprod_chunk(&r.p, 2, SMB_LAYOUT_DIV1, 0, 1, 12, SMB_FLAG_FIRST_PACKET_CONTINUES, c2, 2,
		    true);
	tprod_commit(&r.p, m2, 1, r.target, 0, NULL);
	sonde__buf_reset(&trace);
	rig_stop_and_read(&r, &trace);
	assert_packet(&trace, "frag-big-b", &big);
	assert_packet(&trace, "frag-small-c", &c);
	ASSERT_INT(trace_count(&trace, "frag-small-a", 12, NULL), ==, 0); /* read once */
	sonde__buf_free(&cfg);
	sonde__buf_free(&a);
	sonde__buf_free(&big);
	sonde__buf_free(&c);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_applies_patches_before_releasing_a_chunk, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT, pkt = BUF_INIT, want = BUF_INIT, patch = BUF_INIT;
	struct buf trace = BUF_INIT;
	unsigned mv[1][2] = {{0, 0}};

	tcfg_basic(&cfg, 1024, one_ds, 1);
	rig_up(&r, &cfg, false, false, false);
	rig_start(&r);
	/* a packet with a nested message whose 4-byte length is filled in later */
	sonde__pb_put_string(&want, 900, "patched-packet");
	size_t mark = sonde__pb_begin(&want, 902);
	sonde__pb_put_string(&want, 1, "inner-data");
	sonde__pb_end(&want, mark);
	sonde__buf_append(&pkt, want.data, want.len);
	memset(pkt.data + mark, 0, 4);
	struct iovec v = {pkt.data, pkt.len};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, SMB_FLAG_NEEDS_PATCHING, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, 0, NULL);
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "patched-packet", 14, NULL), ==, 0); /* held back */
	/* ChunksToPatch: offsets are relative to the chunk payload (after the 8-byte header) */
	size_t e = sonde__pb_begin(&patch, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_TARGET_BUFFER, r.target);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_WRITER_ID, 1);
	sonde__pb_put_varint(&patch, PF_CHUNK_TO_PATCH_CHUNK_ID, 0);
	size_t pm = sonde__pb_begin(&patch, PF_CHUNK_TO_PATCH_PATCHES);
	sonde__pb_put_varint(&patch, PF_PATCH_OFFSET, 4 + mark);
	sonde__pb_put_bytes(&patch, PF_PATCH_DATA, want.data + mark, 4);
	sonde__pb_end(&patch, pm);
	sonde__pb_end(&patch, e);
	tprod_commit(&r.p, NULL, 0, r.target, 0, &patch);
	sonde__buf_reset(&trace);
	rig_stop_and_read(&r, &trace);
	assert_packet(&trace, "patched-packet", &want);
	sonde__buf_free(&cfg);
	sonde__buf_free(&pkt);
	sonde__buf_free(&want);
	sonde__buf_free(&patch);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_scrapes_chunks_a_producer_never_committed, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT, p[5] = {BUF_INIT, BUF_INIT, BUF_INIT, BUF_INIT, BUF_INIT};
	struct buf trace = BUF_INIT;
	struct iovec v[5];

	tcfg_basic(&cfg, 1024, one_ds, 1);
	rig_up(&r, &cfg, true, false, false);
	rig_start(&r);
	register_writer(&r.p, 1, r.target);
	register_writer(&r.p, 2, r.target);
	/* Sync: the registrations are processed before the consumer's stop arrives */
	tc_msg_free(tc_ok(&r.p.t, tc_call(&r.p.t, "Sync", NULL, -1, false)));
	for (int i = 0; i < 5; i++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "scraped-%d", i);
		svc_make_packet(&p[i], tag, 0);
		v[i] = (struct iovec){p[i].data, p[i].len};
	}
	/* writer 1: a chunk still being written (its last fragment may be incomplete);
	 * writer 2: a completed chunk that was never listed in CommitData */
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV4, 0, 1, 0, 0, v, 3, false);
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV4, 1, 2, 0, 0, v + 3, 2, true);
	rig_stop_and_read(&r, &trace);
	ASSERT_INT(trace_count(&trace, "scraped-0", 9, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "scraped-1", 9, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "scraped-2", 9, NULL), ==, 0);
	ASSERT_INT(trace_count(&trace, "scraped-3", 9, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "scraped-4", 9, NULL), ==, 1);
	/* scraping leaves the chunks' states alone */
	uint32_t bm = smb_bitmap_load(smb_page_bitmap(r.p.smb, r.p.page, 0));
	ASSERT_UINT(smb_bitmap_state(bm, 0), ==, SMB_CHUNK_BEING_WRITTEN);
	ASSERT_UINT(smb_bitmap_state(bm, 1), ==, SMB_CHUNK_COMPLETE);
	for (int i = 0; i < 5; i++)
		sonde__buf_free(&p[i]);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* write_into_file with a duration (500 ms): the service flushes, stops and writes the
 * file. In-process, the clock is moved to the duration; on a spawned sonded it passes. */
static void file_session(struct rig *r, bool inproc, const struct buf *cfg, int fd, const char *tag,
			 char **err)
{
	struct buf pk = BUF_INIT;
	struct tcmd cmd;
	unsigned mv[1][2] = {{0, 0}};

	r->inproc = inproc;
	if (inproc) {
		inproc_up(&r->h);
		inproc_producer(&r->h, &r->p, "test-producer", false);
		tprod_register(&r->p, "test.ds", false, false);
		inproc_consumer(&r->h, &r->c);
	} else {
		sonded_start(&r->d, NULL);
		tprod_open(&r->p, r->d.psock, "test-producer", false);
		tprod_register(&r->p, "test.ds", false, false);
		tc_open(&r->c, r->d.csock, "ConsumerPort");
	}
	r->enable_req = tcons_enable(&r->c, cfg, fd);
	if (!tprod_cmd(&r->p, &cmd, 2000)) { /* a refused config never reaches the producer */
		*err = tcons_wait_disabled(&r->c, r->enable_req, 5000);
		return;
	}
	ASSERT_UINT(cmd.kind, ==, PF_ASYNC_CMD_SETUP_DATA_SOURCE);
	r->target = cmd.target_buffer;
	r->inst = cmd.inst_id;
	tc_msg_free(cmd.m);
	rig_start(r);
	svc_make_packet(&pk, tag, 0);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(&r->p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &v, 1, true);
	tprod_commit(&r->p, mv, 1, r->target, 0, NULL);
	if (inproc)
		inproc_advance(&r->h, 500);
	tprod_expect(&r->p, PF_ASYNC_CMD_FLUSH, &cmd); /* duration expiry flushes first */
	tprod_commit(&r->p, NULL, 0, r->target, cmd.flush_id, NULL);
	tprod_expect(&r->p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	if (inproc) {
		struct tc_msg *m = inproc_wait_writer_reply(&r->h, &r->c, r->enable_req, 20);
		ASSERT(m != NULL);
		*err = tcons_disabled_reply(m);
	} else {
		*err = tcons_wait_disabled(&r->c, r->enable_req, 10000);
	}
	sonde__buf_free(&pk);
}

static void file_config(struct buf *cfg, const char *path)
{
	tcfg_basic(cfg, 1024, one_ds, 1);
	sonde__pb_put_bool(cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	sonde__pb_put_varint(cfg, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, 100);
	sonde__pb_put_varint(cfg, PF_TRACE_CONFIG_DURATION_MS, 500);
	if (path)
		sonde__pb_put_string(cfg, PF_TRACE_CONFIG_OUTPUT_PATH, path);
}

TEST_TIMEOUT(sonded_write_into_file_through_consumer_fd, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	const char *path = test_path("out.pftrace");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	char *err = NULL;

	ASSERT(fd >= 0);
	file_config(&cfg, NULL);
	/* the session ends by duration_ms alone (timed exactly in
	 * inproc_duration_ms_flushes_then_stops_at_the_duration) */
	file_session(&r, true, &cfg, fd, "into-fd-packet", &err);
	ASSERT(err == NULL);
	close(fd);
	tcons_read(&r.c, &trace); /* a write_into_file session streams nothing */
	ASSERT_UINT(trace.len, ==, 0);
	size_t n;
	char *data = test_read_file(path, &n);
	ASSERT(data != NULL);
	struct buf file = {.data = (uint8_t *)data, .len = n, .cap = n};
	ASSERT_INT(trace_count(&file, "into-fd-packet", 14, NULL), ==, 1);
	ASSERT_INT(trace_count_field(&file, PF_PACKET_TRACE_CONFIG), ==, 1);
	ASSERT_INT(trace_count_field(&file, PF_PACKET_SERVICE_EVENT), >=, 2);
	free(data);
	sonde__buf_free(&cfg);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_write_into_file_output_path, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT;
	const char *path = test_path("by-path.pftrace");
	char *err = NULL;
	struct stat st;

	file_config(&cfg, path);
	file_session(&r, false, &cfg, -1, "into-path-packet", &err);
	ASSERT(err == NULL);
	ASSERT_OK(stat(path, &st));
	ASSERT_UINT(st.st_mode & 0777, ==, 0644);
	size_t n;
	char *data = test_read_file(path, &n);
	struct buf file = {.data = (uint8_t *)data, .len = n, .cap = n};
	ASSERT_INT(trace_count(&file, "into-path-packet", 16, NULL), ==, 1);
	free(data);
	rig_down(&r);
	/* an existing output_path is never overwritten */
	file_session(&r, false, &cfg, -1, "never", &err);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "output_path");
	free(err);
	sonde__buf_free(&cfg);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_sessions_see_only_their_own_data, 60)
{
	struct inproc h;
	struct tprod p;
	struct tc ca, cb;
	struct buf cfga = BUF_INIT, cfgb = BUF_INIT, pa = BUF_INIT, pb = BUF_INIT;
	struct buf ta = BUF_INIT, tb = BUF_INIT;
	struct tcmd cmd;
	const char *a[] = {"ds.a"}, *b[] = {"ds.b"};
	uint32_t target_a, target_b;
	unsigned ma[1][2] = {{0, 0}}, mb[1][2] = {{1, 0}};

	inproc_up(&h);
	inproc_producer(&h, &p, "two-sessions", false);
	tprod_register(&p, "ds.a", false, false);
	tprod_register(&p, "ds.b", false, false);
	inproc_consumer(&h, &ca);
	inproc_consumer(&h, &cb);
	tcfg_basic(&cfga, 256, a, 1);
	tcfg_basic(&cfgb, 256, b, 1);
	uint64_t ea = tcons_enable(&ca, &cfga, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	target_a = cmd.target_buffer;
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	uint64_t eb = tcons_enable(&cb, &cfgb, -1);
	tprod_expect(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	target_b = cmd.target_buffer;
	tprod_expect(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT_UINT(target_a, !=, target_b);
	svc_make_packet(&pa, "only-for-a", 0);
	svc_make_packet(&pb, "only-for-b", 0);
	struct iovec va = {pa.data, pa.len}, vb = {pb.data, pb.len};
	tprod_chunk(&p, 0, SMB_LAYOUT_DIV1, 0, 1, 0, 0, &va, 1, true);
	tprod_chunk(&p, 1, SMB_LAYOUT_DIV1, 0, 2, 0, 0, &vb, 1, true);
	tprod_commit(&p, ma, 1, target_a, 0, NULL);
	tprod_commit(&p, mb, 1, target_b, 0, NULL);
	tc_msg_free(tc_ok(&ca, tc_call(&ca, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&ca, ea, 5000));
	tc_msg_free(tc_ok(&cb, tc_call(&cb, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&cb, eb, 5000));
	tcons_read(&ca, &ta);
	tcons_read(&cb, &tb);
	ASSERT_INT(trace_count(&ta, "only-for-a", 10, NULL), ==, 1);
	ASSERT_INT(trace_count(&ta, "only-for-b", 10, NULL), ==, 0);
	ASSERT_INT(trace_count(&tb, "only-for-b", 10, NULL), ==, 1);
	ASSERT_INT(trace_count(&tb, "only-for-a", 10, NULL), ==, 0);
	sonde__buf_free(&cfga);
	sonde__buf_free(&cfgb);
	sonde__buf_free(&pa);
	sonde__buf_free(&pb);
	sonde__buf_free(&ta);
	sonde__buf_free(&tb);
	tc_close(&ca);
	tc_close(&cb);
	tc_close(&p.t);
	inproc_down(&h);
}

TEST_TIMEOUT(sonded_adopts_only_sealed_producer_shared_memory, 60)
{
	struct inproc h;

	inproc_up(&h);
	for (int sealed = 0; sealed < 2; sealed++) {
		struct tc t;
		struct buf a = BUF_INIT;
		int fd = memfd_create("smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		ASSERT(fd >= 0);
		ASSERT_OK(ftruncate(fd, 65536));
		if (sealed)
			ASSERT_OK(
				fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
		tc_open_fd(&t, inproc_adopt(&h, true), "ProducerPort");
		sonde__pb_put_varint(&a, PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES, 4096);
		sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "startup");
		sonde__pb_put_bool(&a, PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM, true);
		struct tc_msg *m = tc_ok(&t, tc_call(&t, "InitializeConnection", &a, fd, false));
		close(fd);
		struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
		struct pb_field f;
		bool adopted = false, patching = false;
		while (sonde__pb_next(&r, &f) > 0) {
			if (f.num == PF_INIT_CONN_RESP_USING_SHMEM_PROVIDED_BY_PRODUCER)
				adopted = f.u;
			if (f.num == PF_INIT_CONN_RESP_DIRECT_SMB_PATCHING_SUPPORTED)
				patching = f.u;
		}
		tc_msg_free(m);
		ASSERT_INT(adopted, ==, sealed);
		ASSERT(patching);
		if (sealed) { /* setup_tracing comes at once, without an fd */
			uint64_t g = tc_call(&t, "GetAsyncCommand", NULL, -1, false);
			m = tc_wait(&t, g, 5000);
			ASSERT(m && m->f.has_more && m->fd == -1);
			r = pb_reader_init(m->f.data, m->f.data_len);
			ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
			ASSERT_UINT(f.num, ==, PF_ASYNC_CMD_SETUP_TRACING);
			tc_msg_free(m);
		}
		sonde__buf_free(&a);
		tc_close(&t);
	}
	inproc_down(&h);
}

/* Commits n one-packet Div1 chunks on writer 1 (chunk ids 0..n-1), 16 pages at a time. */
static void commit_many(struct rig *r, int n, size_t pad)
{
	struct buf pk = BUF_INIT;
	unsigned mv[16][2];

	for (int i = 0; i < n;) {
		int batch = 0;
		for (; batch < 16 && i < n; batch++, i++) {
			char tag[32];
			snprintf(tag, sizeof(tag), "many-%05d", i);
			svc_make_packet(&pk, tag, pad);
			struct iovec v = {pk.data, pk.len};
			tprod_chunk(&r->p, (unsigned)batch, SMB_LAYOUT_DIV1, 0, 1, (uint32_t)i, 0,
				    &v, 1, true);
			mv[batch][0] = (unsigned)batch;
			mv[batch][1] = 0;
		}
		tprod_commit(&r->p, (const unsigned(*)[2])mv, (size_t)batch, r->target, 0, NULL);
	}
	sonde__buf_free(&pk);
}

TEST_TIMEOUT(sonded_streams_large_reads_in_frames_under_the_limit, 120)
{
	struct rig r;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;

	tcfg_basic(&cfg, 8192, one_ds, 1);
	rig_up(&r, &cfg, false, false, false);
	rig_start(&r);
	commit_many(&r, 600, 3900);    /* ~2.3 MB: many ReadBuffers replies */
	rig_stop_and_read(&r, &trace); /* tcons_read checks every frame's size */
	ASSERT_INT(trace_count(&trace, "many-", 5, NULL), ==, 600);
	ASSERT_INT(trace_count(&trace, "many-00000", 10, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "many-00599", 10, NULL), ==, 1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_ring_overwrites_oldest_discard_keeps_first, 120)
{
	for (int discard = 0; discard < 2; discard++) {
		struct rig r;
		struct buf cfg = BUF_INIT, trace = BUF_INIT;
		struct tpkt pk;
		size_t m = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_BUFFERS);
		sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_SIZE_KB, 64);
		sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_FILL_POLICY,
				     discard ? PF_FILL_POLICY_DISCARD : PF_FILL_POLICY_RING_BUFFER);
		sonde__pb_end(&cfg, m);
		size_t d = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_DATA_SOURCES);
		size_t c = sonde__pb_begin(&cfg, PF_TC_DATA_SOURCE_CONFIG);
		sonde__pb_put_string(&cfg, PF_DS_CONFIG_NAME, "test.ds");
		sonde__pb_end(&cfg, c);
		sonde__pb_end(&cfg, d);
		rig_up(&r, &cfg, false, false, false);
		rig_start(&r);
		commit_many(&r, 100, 3900); /* ~400 KB into 64 KB */
		rig_stop_and_read(&r, &trace);
		int n = trace_count(&trace, "many-", 5, NULL);
		ASSERT_INT(n, >=, 10);
		ASSERT_INT(n, <=, 16);
		if (discard) {
			ASSERT_INT(trace_count(&trace, "many-00000", 10, NULL), ==, 1);
			ASSERT_INT(trace_count(&trace, "many-00099", 10, NULL), ==, 0);
		} else {
			ASSERT_INT(trace_count(&trace, "many-00000", 10, NULL), ==, 0);
			ASSERT_INT(trace_count(&trace, "many-00099", 10, NULL), ==, 1);
			char tag[32];
			snprintf(tag, sizeof(tag), "many-%05d", 100 - n);
			ASSERT_INT(trace_count(&trace, tag, 10, &pk), ==, 1);
			ASSERT(pk.dropped); /* the first packet after the overwritten ones */
		}
		sonde__buf_free(&cfg);
		sonde__buf_free(&trace);
		rig_down(&r);
	}
}

TEST_TIMEOUT(sonded_stops_writing_at_max_file_size, 60)
{
	struct rig r;
	struct buf cfg = BUF_INIT;
	const char *path = test_path("capped.pftrace");
	struct stat st;
	struct tcmd cmd;

	tcfg_basic(&cfg, 4096, one_ds, 1);
	sonde__pb_put_bool(&cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, 100);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_MAX_FILE_SIZE_BYTES, 20000);
	sonde__pb_put_string(&cfg, PF_TRACE_CONFIG_OUTPUT_PATH, path);
	rig_up(&r, &cfg, false, false, false);
	rig_start(&r);
	commit_many(&r, 40, 3900); /* 160 KB, far above the cap */
	/* the first periodic drain hits the cap and ends the session by itself */
	inproc_advance(&r.h, 99);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	inproc_advance(&r.h, 1);
	tprod_expect(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	struct tc_msg *m = inproc_wait_writer_reply(&r.h, &r.c, r.enable_req, 20);
	ASSERT(m != NULL);
	ASSERT(tcons_disabled_reply(m) == NULL);
	ASSERT_OK(stat(path, &st));
	ASSERT_INT(st.st_size, <=, 20000);
	ASSERT_INT(st.st_size, >, 4000);
	sonde__buf_free(&cfg);
	rig_down(&r);
}

TEST_TIMEOUT(sonded_socket_names_from_environment_and_abstract, 60)
{
	char p[64], c[64], x[64];
	struct test_output o;
	struct tc t;

	snprintf(p, sizeof(p), "@sonde-test-%d-producer", (int)getpid());
	snprintf(c, sizeof(c), "@sonde-test-%d-consumer", (int)getpid());
	snprintf(x, sizeof(x), "@sonde-test-%d-connector", (int)getpid());
	setenv("PERFETTO_PRODUCER_SOCK_NAME", p, 1);
	setenv("PERFETTO_CONSUMER_SOCK_NAME", c, 1);
	/* not the default /tmp/sonde-connector, which another sonded may be serving */
	setenv("SONDE_CONNECTOR_SOCK_NAME", x, 1);
	const char *argv[] = {test_bin("sonded"), "-l", "error", NULL};
	pid_t pid = test_spawn(argv);
	int fd = -1;
	for (int i = 0; i < 500 && fd < 0; i++) {
		fd = sonde__ipc_connect(c);
		if (fd < 0)
			usleep(10000);
	}
	ASSERT(fd >= 0);
	close(fd);
	tc_open(&t, p, "ProducerPort"); /* both abstract names, taken from the environment */
	tc_close(&t);
	tc_open(&t, c, "ConsumerPort");
	tc_close(&t);
	fd = sonde__ipc_connect_type(x, SOCK_SEQPACKET);
	ASSERT_OK(fd);
	close(fd);
	kill(pid, SIGINT);
	ASSERT_INT(test_wait(pid, 20), ==, 0);

	const char *help[] = {test_bin("sonded"), "--help", NULL};
	test_run(&o, 10, help);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "PERFETTO_PRODUCER_SOCK_NAME");
	test_output_free(&o);
	const char *bad[] = {test_bin("sonded"), "--log-level", "loud", NULL};
	test_run(&o, 10, bad);
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}
