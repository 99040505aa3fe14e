/* sonded against a local user who churns buffer ids or floods requests, and against idle
 * network peers (docs/service.md "Security" and "Limits"). Run as root: the hostile
 * clients are uid nobody, the victims root, as in test_security.c. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "sec_util.h"
#include "svc_util.h"

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
static uint32_t nobody_session_meets_late_chunk(struct tc *nob, struct tprod *p, uint32_t old)
{
	struct tcmd cmd;
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	uint64_t en = 0;
	char *err = NULL;

	tcfg_basic(&cfg, 256, sdk_ds, 1);
	/* a uid over its id budget waits for it to refill: its next session is accepted */
	double end = test_now() + 30;
	for (;;) {
		en = tcons_enable(nob, &cfg, -1);
		struct tcmd c0;
		if (tprod_cmd(p, &c0, 2000)) {
			ASSERT_UINT(c0.kind, ==, PF_ASYNC_CMD_SETUP_DATA_SOURCE);
			cmd = c0;
			break;
		}
		err = tcons_wait_disabled(nob, en, 20000);
		ASSERT(err != NULL);
		ASSERT(test_now() < end);
		free(err);
		usleep(500000);
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
	struct sonded d;
	struct tprod p;
	struct tc nob;
	char *refusal;

	sec_require_root();
	sonded_start(&d, NULL);
	uint32_t old = root_session_with_bound_writer(&d, &p);
	tc_open_fd(&nob, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	/* every id but the freed one, so that the next allocation would be that one */
	size_t got = burn_until(&nob, old, old, &refusal);
	/* one uid cannot churn through the id space */
	ASSERT(refusal != NULL);
	ASSERT_CONTAINS(refusal, "buffer ids");
	ASSERT_UINT(got, <, 65534);
	free(refusal);
	nobody_session_meets_late_chunk(&nob, &p, old);
	tc_close(&nob);
	tc_close(&p.t);
	sonded_stop(&d);
}

TEST_TIMEOUT(sec3_a_writer_bound_to_a_freed_buffer_never_writes_into_its_successor, 120)
{
	struct sonded d;
	struct tprod p;
	struct tc burner, nob;
	char *refusal;

	sec_require_root();
	sonded_start(&d, NULL);
	uint32_t old = root_session_with_bound_writer(&d, &p);
	/* the service's own uid has no id budget: root wraps the ids around to the freed one */
	tc_open(&burner, d.csock, "ConsumerPort");
	ASSERT_UINT(burn_until(&burner, old, old, &refusal), ==, 65534);
	ASSERT(refusal == NULL);
	tc_close(&burner);
	tc_open_fd(&nob, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	/* the id is handed out again, yet the old writer's chunk stays out */
	ASSERT_UINT(nobody_session_meets_late_chunk(&nob, &p, old), ==, old);
	tc_close(&nob);
	tc_close(&p.t);
	sonded_stop(&d);
}
