/* sonded, driven only over its sockets with raw IPC frames: binding, a producer session
 * end to end, fragmentation, patching, scraping, flush and stop acks with their timeouts,
 * deferred start, write_into_file, and session isolation. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

/* A TracePacket carrying a recognizable payload in for_testing-like bytes (field 900). */
static void make_packet(struct buf *b, const char *tag, size_t pad)
{
	buf_reset(b);
	pb_put_varint(b, PF_PACKET_TIMESTAMP, 1000);
	pb_put_string(b, 900, tag);
	if (pad) {
		uint8_t *p = malloc(pad);
		for (size_t i = 0; i < pad; i++)
			p[i] = (uint8_t)('a' + i % 26);
		pb_put_bytes(b, 901, p, pad);
		free(p);
	}
}

/* Producer registered, consumer enabled, setup and start received. */
struct rig {
	struct sonded d;
	struct tprod p;
	struct tc c;
	uint64_t enable_req, inst;
	uint32_t target;
};

static void rig_up(struct rig *r, const struct buf *cfg, bool scraping, bool nstart, bool nstop)
{
	struct tcmd cmd;

	sonded_start(&r->d, NULL);
	tprod_open(&r->p, r->d.psock, "test-producer", scraping);
	tprod_register(&r->p, "test.ds", nstart, nstop);
	tc_open(&r->c, r->d.csock, "ConsumerPort");
	r->enable_req = tcons_enable(&r->c, cfg, -1);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->inst = cmd.inst_id;
	r->target = cmd.target_buffer;
	ASSERT_UINT(r->target, >=, 1);
	ASSERT(r->p.smb != NULL); /* setup_tracing came first, with the fd */
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
	ASSERT_UINT(tc_method_id(&c, "Detach"), ==, 0); /* not implemented: not listed */

	/* unknown service: a reply without success */
	struct ipc_frame f = {
		.request_id = 7, .msg = IPC_MSG_BIND_SERVICE, .name = "Nope", .name_len = 4};
	ASSERT_OK(ipc_chan_send(&c.ch, &f, -1));
	struct tc_msg *m = tc_wait(&c, 7, 5000);
	ASSERT(m && m->f.msg == IPC_MSG_BIND_SERVICE_REPLY && !m->f.success);
	tc_msg_free(m);
	/* out-of-range method: success=false even with drop_reply */
	f = (struct ipc_frame){.request_id = 8,
			       .msg = IPC_MSG_INVOKE_METHOD,
			       .service_id = 1,
			       .method_id = 99,
			       .drop_reply = true};
	ASSERT_OK(ipc_chan_send(&c.ch, &f, -1));
	m = tc_wait(&c, 8, 5000);
	ASSERT(m && m->f.msg == IPC_MSG_INVOKE_METHOD_REPLY && !m->f.success);
	tc_msg_free(m);
	/* a frame without a msg: request_error */
	f = (struct ipc_frame){.request_id = 9};
	ASSERT_OK(ipc_chan_send(&c.ch, &f, -1));
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
	rig_up(&r, &cfg, false, false, false);
	rig_start(&r);
	/* two chunks of a Div4 page, three packets each */
	struct iovec v[3];
	struct buf p3[3] = {BUF_INIT, BUF_INIT, BUF_INIT};
	for (int c = 0; c < 2; c++) {
		for (int i = 0; i < 3; i++) {
			char tag[32];
			snprintf(tag, sizeof(tag), "e2e-packet-%d", c * 3 + i);
			make_packet(&p3[i], tag, 0);
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
	buf_reset(&trace);
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "e2e-packet", 10, NULL), ==, 0);
	for (int i = 0; i < 3; i++)
		buf_free(&p3[i]);
	buf_free(&cfg);
	buf_free(&pk);
	buf_free(&trace);
	rig_down(&r);
}
