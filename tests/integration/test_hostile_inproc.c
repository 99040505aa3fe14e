/* Hostile peers against the service in-process, on the clock the test advances
 * (svc_inproc.h): limits that bite only after many requests or much time, asserted exactly
 * and without sleeping, and a peer's long name in the service's log. The peers are
 * svc_util's raw-frame clients, pipelining requests as a hostile peer would and reading
 * only what the test looks at. */
#include <unistd.h>

#include <sonde/log.h>
#include <sonde/service.h>

#include "../test.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/internal.h"
#include "svc_inproc.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

/* A producer of test.ds that reads its commands and never acks a flush, started in the
 * session of consumer c (its EnableTracing request in *enable) with config cfg. */
static void never_acking_up(struct inproc *h, struct tprod *p, struct tc *c, const struct buf *cfg,
			    uint64_t *enable)
{
	struct tcmd cmd;

	inproc_up(h);
	inproc_producer(h, p, "never-acks", false);
	tprod_register(p, "test.ds", false, false);
	inproc_consumer(h, c);
	*enable = tcons_enable(c, cfg, -1);
	tprod_expect(p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
	tprod_expect(p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(cmd.m);
}

/* The session never_acking_up started disabled, and everything it made closed. */
static void never_acking_down(struct inproc *h, struct tprod *p, struct tc *c, uint64_t enable)
{
	tc_msg_free(tc_ok(c, tc_call(c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(c, enable, 0));
	tc_close(c);
	tc_close(&p->t);
	inproc_down(h);
}

/* The flush commands p got since the last call; the id of the last in *last. */
static int flush_cmds(struct tprod *p, uint64_t *last)
{
	struct tcmd cmd;
	int n = 0;

	while (tprod_cmd(p, &cmd, 0)) {
		ASSERT_UINT(cmd.kind, ==, PF_ASYNC_CMD_FLUSH);
		if (last)
			*last = cmd.flush_id;
		tc_msg_free(cmd.m);
		n++;
	}
	return n;
}

/* The reply to req, which must have come: its success. */
static bool replied(struct tc *c, uint64_t req)
{
	struct tc_msg *m = tc_wait(c, req, 0);
	bool ok;

	ASSERT(m != NULL);
	ok = m->f.success;
	tc_msg_free(m);
	return ok;
}

/* A consumer pipelining Flush requests while its producer never acks: the session takes
 * SVC_MAX_PENDING_FLUSHES, each sent to the producer and answered at its timeout; every
 * one past them is answered at once as failed and costs the producer nothing. Before the
 * limit each one was kept, with a timer, until its timeout: the replies never came, so the
 * limits on unread replies never held the consumer back. */
TEST_TIMEOUT(hostile_pipelined_flushes_past_the_session_limit_fail_at_once, 60)
{
	enum { N = SVC_MAX_PENDING_FLUSHES + 200 };
	static uint64_t req[N];
	struct buf cfg = BUF_INIT;
	struct inproc h;
	struct tprod p;
	struct tc c;
	uint64_t enable, last = 0;

	tcfg_basic(&cfg, 256, one_ds, 1);
	never_acking_up(&h, &p, &c, &cfg, &enable);
	for (int i = 0; i < N; i++)
		req[i] = tc_flush(&c, 0);
	inproc_run(&h);
	ASSERT_INT(flush_cmds(&p, NULL), ==, SVC_MAX_PENDING_FLUSHES);
	for (int i = SVC_MAX_PENDING_FLUSHES; i < N; i++)
		ASSERT(!replied(&c, req[i]));
	for (int i = 0; i < SVC_MAX_PENDING_FLUSHES; i++)
		ASSERT(tc_wait(&c, req[i], 0) == NULL);

	/* they end at the session's flush timeout (5 s), failed; then flushes are taken again */
	inproc_advance(&h, SVC_DEFAULT_TIMEOUT_MS);
	for (int i = 0; i < SVC_MAX_PENDING_FLUSHES; i++)
		ASSERT(!replied(&c, req[i]));
	uint64_t again = tc_flush(&c, 0);
	ASSERT_INT(flush_cmds(&p, &last), ==, 1);
	tprod_commit(&p, NULL, 0, 0, last, NULL);
	ASSERT(replied(&c, again));

	never_acking_down(&h, &p, &c, enable);
	sonde__buf_free(&cfg);
}

/* flush_period_ms 1 and flush_timeout_ms near 2^32 (49 days) from a consumer whose
 * producer never acks: the period is taken as SVC_MIN_FLUSH_PERIOD_MS (10 flushes a
 * second, not 1000) and a flush, the session's or a request's with its own timeout, ends
 * after SVC_MAX_FLUSH_TIMEOUT_MS. */
TEST_TIMEOUT(hostile_flush_period_and_timeout_are_clamped, 60)
{
	struct buf cfg = BUF_INIT;
	struct inproc h;
	struct tprod p;
	struct tc c;
	uint64_t enable;

	tcfg_basic(&cfg, 256, one_ds, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FLUSH_PERIOD_MS, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS, 4000000000u);
	never_acking_up(&h, &p, &c, &cfg, &enable);
	inproc_advance(&h, 1000);
	ASSERT_INT(flush_cmds(&p, NULL), ==, 1000 / SVC_MIN_FLUSH_PERIOD_MS);

	uint64_t req = tc_flush(&c, 4000000000u);
	inproc_run(&h);
	ASSERT_INT(flush_cmds(&p, NULL), ==, 1);
	inproc_advance(&h, SVC_MAX_FLUSH_TIMEOUT_MS - 1);
	ASSERT(tc_wait(&c, req, 0) == NULL);
	inproc_advance(&h, 1);
	ASSERT(!replied(&c, req));
	/* the periodic flushes stopped at the session's limit meanwhile */
	ASSERT_INT(flush_cmds(&p, NULL), <=, SVC_MAX_PENDING_FLUSHES);

	never_acking_down(&h, &p, &c, enable);
	sonde__buf_free(&cfg);
}

/* RegisterDataSource of a descriptor named name with id (0: none) and pad bytes in a field
 * the service does not read; with update, UpdateDataSource instead. The reply's error,
 * malloc'd ("" without one). */
static char *register_ds(struct tprod *p, const char *name, uint64_t id, size_t pad, bool update)
{
	static uint8_t fill[IPC_BUFFER_SIZE];
	struct buf a = BUF_INIT;
	struct pb_field f;
	char *err = strdup("");
	size_t m = sonde__pb_begin(&a, PF_REGISTER_DS_REQ_DESCRIPTOR);

	ASSERT(pad <= sizeof(fill));
	sonde__pb_put_string(&a, PF_DS_DESCRIPTOR_NAME, name);
	if (id)
		sonde__pb_put_varint(&a, PF_DS_DESCRIPTOR_ID, id);
	if (pad)
		sonde__pb_put_bytes(&a, 1000, fill, pad);
	sonde__pb_end(&a, m);
	struct tc_msg *r = tc_ok(&p->t, tc_call(&p->t, update ? "UpdateDataSource" :
								 "RegisterDataSource",
						&a, -1, false));
	struct pb_reader rd = pb_reader_init(r->f.data, r->f.data_len);
	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_REGISTER_DS_RESP_ERROR && f.wire == PB_LEN) {
			free(err);
			err = strndup((const char *)f.ptr, f.len);
		}
	}
	tc_msg_free(r);
	sonde__buf_free(&a);
	return err;
}

/* Registered, or refused with a reply whose error contains why. */
#define ASSERT_REGISTERED(p, name, id, pad, update, why)                                           \
	do {                                                                                       \
		char *e_ = register_ds(p, name, id, pad, update);                                  \
		if (!strstr(e_, why) || (!*(why) && *e_))                                          \
			FAIL("%s: error \"%s\", wanted \"%s\"", name, e_, why);                    \
		free(e_);                                                                          \
	} while (0)

/* A producer may have SVC_MAX_DS_PER_PRODUCER data sources registered and
 * SVC_MAX_DS_BYTES_PER_PRODUCER of descriptors; past either, and for a name it already
 * registered under the same id, RegisterDataSource's reply carries an error and nothing is
 * kept. Before, every descriptor was kept (a thousand of 120 KB took 121 MB) and each
 * repeated name got an instance of its own in every session enabling it. */
TEST_TIMEOUT(hostile_data_source_registrations_are_limited_per_producer, 60)
{
	static const char *const dup_ds[] = {"dup.ds"};
	const size_t big = 120 << 10;
	struct buf cfg = BUF_INIT;
	struct inproc h;
	struct tprod p, q, d;
	struct tcmd cmd;
	struct tc c;
	char name[32];

	inproc_up(&h);
	inproc_producer(&h, &p, "many", false);
	for (int i = 0; i < SVC_MAX_DS_PER_PRODUCER; i++) {
		snprintf(name, sizeof(name), "ds%d", i);
		ASSERT_REGISTERED(&p, name, 0, 0, false, "");
	}
	ASSERT_REGISTERED(&p, "one.more", 0, 0, false, "per-producer limit");
	struct buf a = BUF_INIT;
	sonde__pb_put_string(&a, PF_UNREGISTER_DS_REQ_NAME, "ds0");
	tc_msg_free(tc_ok(&p.t, tc_call(&p.t, "UnregisterDataSource", &a, -1, false)));
	ASSERT_REGISTERED(&p, "one.more", 0, 0, false, "");

	/* descriptor bytes: two of 120 KiB and a small one fit in 256 KiB, a third big one
	 * does not, nor an update making the small one big */
	inproc_producer(&h, &q, "big", false);
	ASSERT_REGISTERED(&q, "big0", 1, big, false, "");
	ASSERT_REGISTERED(&q, "big1", 2, big, false, "");
	ASSERT_REGISTERED(&q, "big2", 3, big, false, "size limit");
	ASSERT_REGISTERED(&q, "small", 4, 1024, false, "");
	ASSERT_REGISTERED(&q, "small", 4, big, true, "");
	ASSERT_REGISTERED(&q, "small2", 5, 10 << 10, false, ""); /* the update was not taken */

	/* the same name under another id is another data source (SDK namespaces); under the
	 * same nonzero id it is refused; id 0 repeats, as a v14 SDK's namespaces register */
	inproc_producer(&h, &d, "dup", false);
	ASSERT_REGISTERED(&d, "dup.ds", 0, 0, false, "");
	ASSERT_REGISTERED(&d, "dup.ds", 0, 0, false, "");
	ASSERT_REGISTERED(&d, "dup.ds", 7, 0, false, "");
	ASSERT_REGISTERED(&d, "dup.ds", 7, 0, false, "already registered");
	inproc_consumer(&h, &c);
	tcfg_basic(&cfg, 256, dup_ds, 1);
	uint64_t enable = tcons_enable(&c, &cfg, -1);
	int setups = 0;
	while (tprod_cmd(&d, &cmd, 0)) {
		setups += cmd.kind == PF_ASYNC_CMD_SETUP_DATA_SOURCE;
		tc_msg_free(cmd.m);
	}
	ASSERT_INT(setups, ==, 3);

	tc_msg_free(tc_ok(&c, tc_call(&c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&c, enable, 0));
	sonde__buf_free(&a);
	sonde__buf_free(&cfg);
	tc_close(&c);
	tc_close(&d.t);
	tc_close(&q.t);
	tc_close(&p.t);
	inproc_down(&h);
}

struct log_seen {
	char line[1024]; /* the service's line announcing the producer */
	size_t len;
};

static void keep_producer_line(enum sonde_log_level level, const char *msg, void *ctx)
{
	struct log_seen *l = ctx;

	if (level == SONDE_LOG_INFO && !strncmp(msg, "producer ", 9) && strstr(msg, "nnnn")) {
		snprintf(l->line, sizeof(l->line), "%s", msg);
		l->len = strlen(msg);
	}
}

/* A producer named with the longest name InitializeConnection takes (SVC_MAX_PRODUCER_NAME
 * bytes): the info line announcing it shows the name's start and still ends with the
 * peer's pid and uid. Before, a name filled the service's 1 KiB log line and pushed them
 * out of it. */
TEST_TIMEOUT(hostile_long_producer_name_is_clamped_in_the_log, 30)
{
	const size_t n = SVC_MAX_PRODUCER_NAME;
	char *name = malloc(n + 1);
	struct log_seen l = {.len = 0};
	struct inproc h;
	struct tprod p;
	char want[64];

	ASSERT(name != NULL);
	memset(name, 'n', n);
	name[n] = '\0';
	inproc_up(&h);
	sonde_log__set_callback(keep_producer_line, &l);
	sonde_log__set_level(SONDE_LOG_INFO);
	inproc_producer(&h, &p, name, false);
	sonde_log__set_level(SONDE_LOG_WARN);
	sonde_log__set_callback(NULL, NULL);
	printf("%s\n", l.line);
	ASSERT_UINT(l.len, >, 0);
	ASSERT_UINT(l.len, <, 200);
	snprintf(want, sizeof(want), " pid %d uid %d", (int)getpid(), (int)getuid());
	ASSERT(strstr(l.line, want) != NULL);
	tc_close(&p.t);
	inproc_down(&h);
	free(name);
}
