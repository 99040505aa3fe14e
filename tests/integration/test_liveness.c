/* sonded stays available to everyone whatever one client does, and clients survive a
 * service that goes away or is not the one they expect: the per-uid buffer budget. */
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "sec_util.h"
#include "svc_util.h"

/* The error of an EnableTracing reply (malloc'd; "" if it had none). */
static char *reply_error(const struct tc_msg *m)
{
	struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f;

	while (pb_next(&r, &f) > 0)
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
	buf_free(&cfg);
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

	pb_put_string(&a, PF_DETACH_REQ_KEY, key);
	tc_msg_free(tc_ok(t, tc_call(t, "Detach", &a, -1, false)));
	buf_free(&a);
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
