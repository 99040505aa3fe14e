/* The service's advanced session features, driven with raw IPC frames in-process
 * (svc_inproc.h, the clock moved by the test): START/STOP triggers (timeouts, producer
 * regex, skip probability, max_per_24_h, a flooding producer), CloneSession (refusals,
 * write_into_file sources), ChangeTraceConfig, unique_session_name, incremental-state
 * clearing, Detach/Attach across uids and the session list of QueryServiceState; another
 * uid connects from a child running as it to the in-process service's sockets. `sonde
 * trace --trigger` and `--clone` run against a spawned sonded. */
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "sec_util.h"
#include "svc_inproc.h"
#include "svc_util.h"

static const char *const one_ds[] = {"test.ds"};

struct trig_spec {
	const char *name, *regex;
	uint32_t stop_delay_ms, max_per_24h;
	double skip;
};

/* tcfg_basic plus a trigger_config. */
static void cfg_triggers(struct buf *b, uint32_t mode, uint32_t timeout_ms,
			 const struct trig_spec *t, size_t n)
{
	tcfg_basic(b, 1024, one_ds, 1);
	size_t m = sonde__pb_begin(b, PF_TRACE_CONFIG_TRIGGER_CONFIG);
	sonde__pb_put_varint(b, PF_TRIGGER_CONFIG_TRIGGER_MODE, mode);
	for (size_t i = 0; i < n; i++) {
		size_t k = sonde__pb_begin(b, PF_TRIGGER_CONFIG_TRIGGERS);
		sonde__pb_put_string(b, PF_TRIGGER_NAME, t[i].name);
		if (t[i].regex)
			sonde__pb_put_string(b, PF_TRIGGER_PRODUCER_NAME_REGEX, t[i].regex);
		sonde__pb_put_varint(b, PF_TRIGGER_STOP_DELAY_MS, t[i].stop_delay_ms);
		if (t[i].max_per_24h)
			sonde__pb_put_varint(b, PF_TRIGGER_MAX_PER_24_H, t[i].max_per_24h);
		if (t[i].skip > 0)
			sonde__pb_put_double(b, PF_TRIGGER_SKIP_PROBABILITY, t[i].skip);
		sonde__pb_end(b, k);
	}
	sonde__pb_put_varint(b, PF_TRIGGER_CONFIG_TRIGGER_TIMEOUT_MS, timeout_ms);
	sonde__pb_end(b, m);
}

static void make_packet(struct buf *b, const char *tag)
{
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, 1000);
	sonde__pb_put_string(b, 900, tag);
}

/* Writes one complete chunk holding a packet tagged `tag` and commits it. */
static void commit_tagged(struct tprod *p, uint32_t target, unsigned chunk, const char *tag)
{
	struct buf pk = BUF_INIT;
	unsigned mv[1][2] = {{0, chunk}};

	make_packet(&pk, tag);
	struct iovec v = {pk.data, pk.len};
	tprod_chunk(p, 0, SMB_LAYOUT_DIV4, chunk, 1, chunk, 0, &v, 1, true);
	tprod_commit(p, mv, 1, target, 0, NULL);
	sonde__buf_free(&pk);
}

/* Sends ActivateTriggers (drop_reply, as clients do), then Sync so that it was handled. */
static void send_triggers(struct tprod *p, const char *const *names, size_t n)
{
	struct buf a = BUF_INIT;

	for (size_t i = 0; i < n; i++)
		sonde__pb_put_string(&a, PF_ACTIVATE_TRIGGERS_REQ_NAMES, names[i]);
	tc_call(&p->t, "ActivateTriggers", &a, -1, true);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "Sync", NULL, -1, false)));
	sonde__buf_free(&a);
}

static void send_trigger(struct tprod *p, const char *name)
{
	send_triggers(p, &name, 1);
}

/* sonded (or the service in-process, on a clock the test advances), a producer of
 * test.ds, a consumer that enabled cfg; setup received. */
struct rig {
	struct sonded d;
	struct inproc h;
	bool in; /* in-process: h, not d (rig_up_inproc; a zeroed rig is not) */
	struct tprod p;
	struct tc c;
	uint64_t enable_req, inst;
	uint32_t target;
};

static void rig_producer(struct rig *r, struct tprod *p, const char *name)
{
	if (r->in)
		inproc_producer(&r->h, p, name, false);
	else
		tprod_open(p, r->d.psock, name, false);
}

static void rig_consumer(struct rig *r, struct tc *c)
{
	if (r->in)
		inproc_consumer(&r->h, c);
	else
		tc_open(c, r->d.csock, "ConsumerPort");
}

static void rig_enable(struct rig *r, const struct buf *cfg)
{
	struct tcmd cmd;

	rig_consumer(r, &r->c);
	r->enable_req = tcons_enable(&r->c, cfg, -1);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->inst = cmd.inst_id;
	r->target = cmd.target_buffer;
	tc_msg_free(cmd.m);
}

static void rig_up(struct rig *r, const struct buf *cfg)
{
	r->in = false;
	sonded_start(&r->d, NULL);
	rig_producer(r, &r->p, "test-producer");
	tprod_register(&r->p, "test.ds", false, false);
	rig_enable(r, cfg);
}

static void rig_up_inproc(struct rig *r, const struct buf *cfg)
{
	r->in = true;
	inproc_up(&r->h);
	inproc_sockets(&r->h, &r->d); /* for clients connecting through them */
	rig_producer(r, &r->p, "test-producer");
	tprod_register(&r->p, "test.ds", false, false);
	rig_enable(r, cfg);
}

static void expect_cmd(struct tprod *p, uint32_t kind, struct tcmd *cmd)
{
	tprod_expect(p, kind, cmd);
	tc_msg_free(cmd->m);
	cmd->m = NULL;
}

static void rig_down(struct rig *r)
{
	tc_close(&r->c);
	tc_close(&r->p.t);
	if (r->in)
		inproc_down(&r->h);
	else
		sonded_stop(&r->d);
}

/* The Trigger packet of `name`: its producer name and uid must be as given. */
static void assert_trigger_packet(const struct buf *trace, const char *name, const char *producer,
				  uint32_t stop_delay_ms)
{
	struct tpkt pk;
	bool found = false;

	for (size_t off = 0; trace_next(trace, &off, &pk);) {
		struct pb_reader r = pb_reader_init(pk.p, pk.len), tr;
		struct pb_field f, g;
		char tname[64] = "", pname[64] = "";
		int64_t uid = -1;
		uint64_t delay = UINT64_MAX, ts = 0;
		bool is_trigger = false;
		while (sonde__pb_next(&r, &f) > 0) {
			if (f.num == PF_PACKET_TIMESTAMP)
				ts = f.u;
			if (f.num != PF_PACKET_TRIGGER || f.wire != PB_LEN)
				continue;
			is_trigger = true;
			tr = pb_sub(&f);
			while (sonde__pb_next(&tr, &g) > 0) {
				if (g.num == PF_TRIGGER_PACKET_TRIGGER_NAME)
					snprintf(tname, sizeof(tname), "%.*s", (int)g.len, g.ptr);
				else if (g.num == PF_TRIGGER_PACKET_PRODUCER_NAME)
					snprintf(pname, sizeof(pname), "%.*s", (int)g.len, g.ptr);
				else if (g.num == PF_TRIGGER_PACKET_TRUSTED_PRODUCER_UID)
					uid = (int64_t)g.u;
				else if (g.num == PF_TRIGGER_PACKET_STOP_DELAY_MS)
					delay = g.u;
			}
		}
		if (!is_trigger || strcmp(tname, name))
			continue;
		ASSERT_STR_EQ(pname, producer);
		ASSERT_INT(uid, ==, getuid());
		ASSERT_UINT(delay, ==, stop_delay_ms);
		ASSERT_UINT(ts, >, 0);
		ASSERT(pk.has_seq && pk.seq == 1); /* a service packet */
		found = true;
	}
	ASSERT(found);
}

TEST_TIMEOUT(trig_start_trigger_starts_session_from_matching_producer_only, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	struct tprod bad, good;
	const struct trig_spec t[] = {{"go", "trig-.*", 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_START_TRACING, 60000, t, 1);
	rig_up_inproc(&r, &cfg);
	inproc_advance(&r.h, 30000);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* configured, waiting for the trigger */
	rig_producer(&r, &bad, "xtrig-sender"); /* the regex must match in full */
	rig_producer(&r, &good, "trig-sender");
	send_trigger(&good, "other-name");
	send_trigger(&bad, "go");
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	/* nothing is readable before the trigger */
	tcons_read(&r.c, &trace);
	ASSERT_UINT(trace.len, ==, 0);

	send_trigger(&good, "go");
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT_UINT(cmd.inst_id, ==, r.inst);
	commit_tagged(&r.p, r.target, 0, "after-start-trigger");
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 10000));
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "after-start-trigger", 19, NULL), ==, 1);
	assert_trigger_packet(&trace, "go", "trig-sender", 0);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRIGGER), ==, 1);
	tc_close(&bad.t);
	tc_close(&good.t);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_start_stop_delay_becomes_the_duration, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const struct trig_spec t[] = {{"go", NULL, 300, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_START_TRACING, 60000, t, 1);
	rig_up_inproc(&r, &cfg);
	send_trigger(&r.p, "go");
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	/* at stop_delay_ms: a flush, then the stop, without any consumer request */
	inproc_advance(&r.h, 299);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	inproc_advance(&r.h, 1);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 10000));
	tcons_read(&r.c, &trace);
	assert_trigger_packet(&trace, "go", "test-producer", 300);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_start_timeout_ends_session_with_empty_trace, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const struct trig_spec t[] = {{"never-sent", NULL, 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_START_TRACING, 400, t, 1);
	rig_up_inproc(&r, &cfg);
	inproc_advance(&r.h, 399);
	ASSERT(tc_wait(&r.c, r.enable_req, 0) == NULL);
	inproc_advance(&r.h, 1);
	char *err = tcons_wait_disabled(&r.c, r.enable_req, 0);
	ASSERT(err == NULL); /* a timeout is a normal end */
	/* the instance was only set up, then stopped without ever starting */
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	tcons_read(&r.c, &trace);
	ASSERT_UINT(trace.len, ==, 0);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* duration_ms of the TraceConfig packet (the last value of the field). */
static uint64_t config_duration(const struct buf *trace)
{
	struct tpkt pk;
	uint64_t d = UINT64_MAX;

	for (size_t off = 0; trace_next(trace, &off, &pk);) {
		struct pb_reader r = pb_reader_init(pk.p, pk.len), cr;
		struct pb_field f, g;
		while (sonde__pb_next(&r, &f) > 0) {
			if (f.num != PF_PACKET_TRACE_CONFIG || f.wire != PB_LEN)
				continue;
			cr = pb_sub(&f);
			d = 0;
			while (sonde__pb_next(&cr, &g) > 0)
				if (g.num == PF_TRACE_CONFIG_DURATION_MS && g.wire == PB_VARINT)
					d = g.u;
		}
	}
	return d;
}

TEST_TIMEOUT(trig_stop_trigger_flushes_and_stops_after_delay, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const struct trig_spec t[] = {{"stop-now", NULL, 300, 0, 0}, {"other", NULL, 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_STOP_TRACING, 60000, t, 2);
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd); /* STOP: runs at once */
	commit_tagged(&r.p, r.target, 0, "before-stop-trigger");
	tcons_read(&r.c, &trace); /* waiting for the trigger: nothing readable yet */
	ASSERT_UINT(trace.len, ==, 0);
	send_trigger(&r.p, "stop-now");
	inproc_advance(&r.h, 299);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* not before stop_delay_ms */
	inproc_advance(&r.h, 1);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	send_trigger(&r.p, "other"); /* recorded, changes nothing */
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 10000));
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "before-stop-trigger", 19, NULL), ==, 1);
	ASSERT_UINT(config_duration(&trace), ==, 60000); /* the trigger timeout, §6.3 */
	assert_trigger_packet(&trace, "stop-now", "test-producer", 300);
	assert_trigger_packet(&trace, "other", "test-producer", 0);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_stop_timeout_without_trigger_gives_empty_trace, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const struct trig_spec t[] = {{"never-sent", NULL, 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_STOP_TRACING, 500, t, 1);
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	commit_tagged(&r.p, r.target, 0, "untriggered-data");
	inproc_advance(&r.h, 499);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	inproc_advance(&r.h, 1);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd); /* the timeout flushes, then stops */
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&r.c, r.enable_req, 10000));
	tcons_read(&r.c, &trace);
	ASSERT_UINT(trace.len, ==, 0); /* never triggered: the trace is empty */
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_skip_probability_and_max_per_24h, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	const struct trig_spec t[] = {{"always-skipped", NULL, 0, 0, 1.0},
				      {"once-a-day", NULL, 0, 1, 0}};
	const uint64_t day_ms = 24ull * 3600 * 1000;

	cfg_triggers(&cfg, PF_TRIGGER_MODE_START_TRACING, 60000, t, 2);
	rig_up_inproc(&r, &cfg);
	for (int i = 0; i < 20; i++)
		send_trigger(&r.p, "always-skipped");
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	send_trigger(&r.p, "once-a-day");
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "FreeBuffers", NULL, -1, false)));
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	tc_close(&r.c);

	/* a new session with the same trigger: the daily allowance is used up */
	rig_enable(&r, &cfg);
	send_trigger(&r.p, "once-a-day");
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	tcons_read(&r.c, &trace);
	ASSERT_UINT(trace.len, ==, 0);
	inproc_advance(&r.h, 60000); /* its trigger timeout ends it */
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	tc_close(&r.c);

	/* 24 h of the service's clock after the first: allowed again, not a millisecond before */
	inproc_advance(&r.h, day_ms - 60000 - 1);
	rig_enable(&r, &cfg);
	send_trigger(&r.p, "once-a-day");
	ASSERT(!tprod_cmd(&r.p, &cmd, 0));
	inproc_advance(&r.h, 1);
	send_trigger(&r.p, "once-a-day");
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_config_errors_are_reported, 60)
{
	struct inproc h;
	struct tc c;
	struct buf cfg = BUF_INIT;
	const struct trig_spec t[] = {{"a", NULL, 0, 0, 0}, {"a", NULL, 0, 0, 0}};
	const struct trig_spec bad_re[] = {{"a", "(unclosed", 0, 0, 0}};
	/* regcomp writes each interval out: ((a{1,255}){1,255}){1,255} took 17 s and 10 GB */
	const struct trig_spec heavy_re[] = {{"a", "(a{1,40}){1,40}", 0, 0, 0}};
	struct {
		uint32_t mode, timeout;
		const struct trig_spec *t;
		size_t n;
		const char *want;
	} cases[] = {
		{PF_TRIGGER_MODE_START_TRACING, 0, t, 1, "trigger_timeout_ms"},
		{0, 1000, t, 1, "trigger_mode"},
		{PF_TRIGGER_MODE_STOP_TRACING, 1000, t, 2, "unique"},
		{PF_TRIGGER_MODE_STOP_TRACING, 1000, bad_re, 1, "regex"},
		{PF_TRIGGER_MODE_STOP_TRACING, 1000, heavy_re, 1, "too complex"},
		{PF_TRIGGER_MODE_STOP_TRACING, 1000, t, 0, "no triggers"},
	};

	inproc_up(&h);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sonde__buf_reset(&cfg);
		cfg_triggers(&cfg, cases[i].mode, cases[i].timeout, cases[i].t, cases[i].n);
		inproc_consumer(&h, &c);
		char *err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
		ASSERT(err != NULL);
		ASSERT(strstr(err, cases[i].want) != NULL);
		free(err);
		tc_close(&c);
	}
	/* duration_ms together with triggers */
	sonde__buf_reset(&cfg);
	cfg_triggers(&cfg, PF_TRIGGER_MODE_STOP_TRACING, 1000, t, 1);
	sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_DURATION_MS, 1000);
	inproc_consumer(&h, &c);
	char *err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL && strstr(err, "duration_ms"));
	free(err);
	tc_close(&c);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

/* A producer sending thousands of trigger names: the service keeps serving everyone,
 * and only its bucket's worth is applied: a burst of 128, then 64 a second of the
 * service's clock. */
TEST_TIMEOUT(trig_flooding_producer_is_throttled, 120)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT, a = BUF_INIT;
	struct tcmd cmd;
	struct tprod flood;
	const struct trig_spec t[] = {{"flood", NULL, 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_START_TRACING, 60000, t, 1);
	rig_up_inproc(&r, &cfg);
	rig_producer(&r, &flood, "flooder");
	for (int i = 0; i < 64; i++)
		sonde__pb_put_string(&a, PF_ACTIVATE_TRIGGERS_REQ_NAMES, "flood");
	for (int i = 0; i < 150; i++)
		tc_call(&flood.t, "ActivateTriggers", &a, -1, true);
	tc_msg_free(tc_ok(&flood.t, tc_call(&flood.t, "Sync", NULL, -1, false)));
	/* the first one started the session; the other producer is still served */
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	tc_msg_free(tc_ok(&r.p.t, tc_call(&r.p.t, "Sync", NULL, -1, false)));
	/* a second later: 64 more tokens, however many names come */
	inproc_advance(&r.h, 1000);
	for (int i = 0; i < 150; i++)
		tc_call(&flood.t, "ActivateTriggers", &a, -1, true);
	tc_msg_free(tc_ok(&flood.t, tc_call(&flood.t, "Sync", NULL, -1, false)));
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	tcons_read(&r.c, &trace);
	/* 19200 names were sent */
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRIGGER), ==, 128 + 64);
	tc_close(&flood.t);
	sonde__buf_free(&a);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(trig_sonde_trace_cli_sends_and_honours_triggers, 90)
{
	struct sonded d;
	struct tprod p;
	struct tcmd cmd;
	struct test_output o;
	const char *cfg_path = test_path("trig.txt"), *out = test_path("trig.pftrace");
	const char *txt = "buffers { size_kb: 1024 }\n"
			  "data_sources { config { name: \"test.ds\" } }\n"
			  "trigger_config {\n"
			  "  trigger_mode: START_TRACING\n"
			  "  trigger_timeout_ms: 60000\n"
			  "  triggers { name: \"cli-go\" producer_name_regex: \"perfetto_cmd_.*\"\n"
			  "             stop_delay_ms: 300 }\n"
			  "}\n";

	test_write_file(cfg_path, txt, strlen(txt));
	sonded_start(&d, NULL);
	tprod_open(&p, d.psock, "test-producer", false);
	tprod_register(&p, "test.ds", false, false);
	const char *argv[] = {test_bin("sonde"), "trace", "--socket", d.csock, "--txt", "-c",
			      cfg_path,		 "-o",	  out,	      NULL};
	pid_t tracer = test_spawn(argv);
	expect_cmd(&p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	ASSERT(!tprod_cmd(&p, &cmd, 300));
	test_runf(&o, 30, "%s trace --trigger cli-go --producer-socket %s", test_bin("sonde"),
		  d.psock);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	expect_cmd(&p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	uint32_t target = cmd.target_buffer;
	commit_tagged(&p, target, 0, "cli-triggered-packet");
	expect_cmd(&p, PF_ASYNC_CMD_FLUSH, &cmd); /* stop_delay_ms later */
	tprod_commit(&p, NULL, 0, target, cmd.flush_id, NULL);
	expect_cmd(&p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	ASSERT_INT(test_wait(tracer, 30), ==, 0);
	struct buf trace = BUF_INIT;
	size_t len;
	char *data = test_read_file(out, &len);
	ASSERT(data != NULL);
	sonde__buf_append(&trace, data, len);
	free(data);
	ASSERT_INT(trace_count(&trace, "cli-triggered-packet", 20, NULL), ==, 1);
	assert_trigger_packet(&trace, "cli-go", "perfetto_cmd_producer", 300);
	sonde__buf_free(&trace);
	tc_close(&p.t);
	sonded_stop(&d);
}

/* ------------------------------------------------------------------ CloneSession */

struct clone_resp {
	bool success, was_write_into_file;
	uint64_t uuid_msb, uuid_lsb;
	char error[256];
};

/* CloneSession, with fd as the caller's output file (-1: none); returns the request id. */
static uint64_t clone_send(struct tc *c, uint64_t id, const char *name, int fd)
{
	struct buf a = BUF_INIT;
	uint64_t req;

	if (id)
		sonde__pb_put_varint(&a, PF_CLONE_SESSION_REQ_SESSION_ID, id);
	if (name)
		sonde__pb_put_string(&a, PF_CLONE_SESSION_REQ_UNIQUE_SESSION_NAME, name);
	req = tc_call(c, "CloneSession", &a, fd, false);
	sonde__buf_free(&a);
	return req;
}

static void clone_parse(struct tc_msg *m, struct clone_resp *out)
{
	struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f;
	memset(out, 0, sizeof(*out));
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_CLONE_SESSION_RESP_SUCCESS)
			out->success = f.u != 0;
		else if (f.num == PF_CLONE_SESSION_RESP_ERROR)
			snprintf(out->error, sizeof(out->error), "%.*s", (int)f.len, f.ptr);
		else if (f.num == PF_CLONE_SESSION_RESP_UUID_MSB)
			out->uuid_msb = f.u;
		else if (f.num == PF_CLONE_SESSION_RESP_UUID_LSB)
			out->uuid_lsb = f.u;
		else if (f.num == PF_CLONE_SESSION_RESP_WAS_WRITE_INTO_FILE)
			out->was_write_into_file = f.u != 0;
	}
	tc_msg_free(m);
}

static void clone_reply(struct tc *c, uint64_t req, struct clone_resp *out)
{
	clone_parse(tc_ok(c, req), out);
}

/* A clone on the in-process rig whose producer leaves the clone's flush unacked: the
 * clock moves to the source's flush_timeout_ms (cfg_named's 500), and the reply comes
 * once any copy into the caller's file is done. */
static void clone_inproc(struct rig *r, struct tc *c, const char *name, int fd,
			 struct clone_resp *out)
{
	uint64_t req = clone_send(c, 0, name, fd);

	inproc_advance(&r->h, 500);
	struct tc_msg *m = inproc_wait_writer_reply(&r->h, c, req, 20);
	if (!m)
		FAIL("CloneSession of %s was not answered", name);
	ASSERT_UINT(m->f.msg, ==, IPC_MSG_INVOKE_METHOD_REPLY);
	ASSERT(m->f.success);
	clone_parse(m, out);
}

static void clone_call_fd(struct tc *c, uint64_t id, const char *name, int fd,
			  struct clone_resp *out)
{
	clone_reply(c, clone_send(c, id, name, fd), out);
}

static void clone_call(struct tc *c, uint64_t id, const char *name, struct clone_resp *out)
{
	clone_call_fd(c, id, name, -1, out);
}

/* tracing_sessions {id, unique_session_name, state} of QueryServiceState, as
 * "id:name:state;" entries. */
static void query_sessions(struct tc *c, char *out, size_t n)
{
	uint64_t req = tc_call(c, "QueryServiceState", NULL, -1, false);
	size_t len = 0;

	out[0] = 0;
	for (;;) {
		struct tc_msg *m = tc_wait(c, req, 10000);
		ASSERT(m != NULL && m->f.success);
		struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len), sr, tr;
		struct pb_field f, g, h;
		while (sonde__pb_next(&r, &f) > 0) {
			sr = pb_sub(&f);
			while (sonde__pb_next(&sr, &g) > 0) {
				if (g.num != PF_TSS_TRACING_SESSIONS)
					continue;
				uint64_t id = 0;
				char name[64] = "", state[64] = "";
				tr = pb_sub(&g);
				while (sonde__pb_next(&tr, &h) > 0) {
					if (h.num == PF_TSS_SESSION_ID)
						id = h.u;
					else if (h.num == PF_TSS_SESSION_UNIQUE_SESSION_NAME)
						snprintf(name, sizeof(name), "%.*s", (int)h.len,
							 h.ptr);
					else if (h.num == PF_TSS_SESSION_STATE)
						snprintf(state, sizeof(state), "%.*s", (int)h.len,
							 h.ptr);
				}
				len += snprintf(out + len, n - len, "%llu:%s:%s;",
						(unsigned long long)id, name, state);
			}
		}
		bool more = m->f.has_more;
		tc_msg_free(m);
		if (!more)
			break;
	}
}

static uint64_t session_id_of(struct tc *c, const char *name)
{
	char list[1024], *p, want[80];

	query_sessions(c, list, sizeof(list));
	snprintf(want, sizeof(want), ":%s:", name);
	p = strstr(list, want);
	ASSERT(p != NULL);
	while (p > list && p[-1] != ';')
		p--;
	return strtoull(p, NULL, 10);
}

static void cfg_named(struct buf *b, const char *name)
{
	tcfg_basic(b, 1024, one_ds, 1);
	sonde__pb_put_string(b, PF_TRACE_CONFIG_UNIQUE_SESSION_NAME, name);
	sonde__pb_put_varint(b, PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS, 500); /* unacked clone flushes */
}

TEST_TIMEOUT(clone_flushes_and_copies_into_a_read_only_session, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	struct tc k2, k3;
	struct clone_resp cr;
	char list[1024];

	cfg_named(&cfg, "clone-src");
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	commit_tagged(&r.p, r.target, 0, "before-clone-A");
	rig_consumer(&r, &k2);
	uint64_t src = session_id_of(&k2, "clone-src");
	ASSERT_UINT(src, >, 0);

	/* the clone waits for the source's flush; data committed with the ack is in it */
	struct buf a = BUF_INIT;
	sonde__pb_put_varint(&a, PF_CLONE_SESSION_REQ_SESSION_ID, src);
	uint64_t creq = tc_call(&k2, "CloneSession", &a, -1, false);
	sonde__buf_free(&a);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	inproc_advance(&r.h, 499); /* within the source's flush_timeout_ms */
	ASSERT(tc_wait(&k2, creq, 0) == NULL); /* not before the flush completed */
	struct buf pk = BUF_INIT;
	make_packet(&pk, "flushed-B");
	struct iovec v = {pk.data, pk.len};
	unsigned mv[1][2] = {{0, 1}};
	tprod_chunk(&r.p, 0, SMB_LAYOUT_DIV4, 1, 1, 1, 0, &v, 1, true);
	tprod_commit(&r.p, mv, 1, r.target, cmd.flush_id, NULL);
	sonde__buf_free(&pk);
	struct tc_msg *m = tc_ok(&k2, creq);
	struct pb_reader rd = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f;
	bool ok = false, has_uuid = false;
	while (sonde__pb_next(&rd, &f) > 0) {
		ok |= f.num == PF_CLONE_SESSION_RESP_SUCCESS && f.u;
		has_uuid |= f.num == PF_CLONE_SESSION_RESP_UUID_MSB && f.u;
	}
	tc_msg_free(m);
	ASSERT(ok && has_uuid);

	/* the source keeps tracing; the clone does not see what comes later */
	commit_tagged(&r.p, r.target, 2, "after-clone-C");
	tcons_read(&k2, &trace);
	ASSERT_INT(trace_count(&trace, "before-clone-A", 14, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "flushed-B", 9, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "after-clone-C", 13, NULL), ==, 0);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRACE_CONFIG), ==, 1);
	query_sessions(&k2, list, sizeof(list));
	ASSERT_CONTAINS(list, ":CLONED_READ_ONLY;");
	ASSERT_CONTAINS(list, ":clone-src:STARTED;");

	/* by unique_session_name, from a third consumer */
	rig_consumer(&r, &k3);
	uint64_t c3 = clone_send(&k3, 0, "clone-src", -1);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd); /* not acked: the clone waits it out */
	inproc_advance(&r.h, 499);
	ASSERT(tc_wait(&k3, c3, 0) == NULL);
	inproc_advance(&r.h, 1);
	clone_reply(&k3, c3, &cr);
	ASSERT(cr.success);
	ASSERT(!cr.was_write_into_file);
	ASSERT(cr.uuid_msb != 0 || cr.uuid_lsb != 0);

	/* no producer may write into a clone: the source's reader still gets everything */
	sonde__buf_reset(&trace);
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	free(tcons_wait_disabled(&r.c, r.enable_req, 0));
	tcons_read(&r.c, &trace);
	ASSERT_INT(trace_count(&trace, "before-clone-A", 14, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "flushed-B", 9, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "after-clone-C", 13, NULL), ==, 1);
	tc_msg_free(tc_ok(&k2, tc_call(&k2, "FreeBuffers", NULL, -1, false)));
	tc_close(&k2);
	tc_close(&k3);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(clone_refusals_are_clear_errors, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;
	struct tc other, k2;
	struct clone_resp cr;
	char list[1024];

	sec_require_root();
	cfg_named(&cfg, "root-session");
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	uint64_t src = session_id_of(&r.c, "root-session");

	chmod(r.d.csock, 0666);
	tc_open_fd(&other, sec_connect_as(SEC_NOBODY, r.d.csock), "ConsumerPort");
	clone_call(&other, src, NULL, &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "permission denied");
	clone_call(&other, 0, "root-session", &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "permission denied");
	/* and another uid does not even see the session listed */
	query_sessions(&other, list, sizeof(list));
	ASSERT_NOT_CONTAINS(list, "root-session");
	tc_close(&other);

	tc_open(&k2, r.d.csock, "ConsumerPort");
	clone_call(&k2, 999999, NULL, &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "no tracing session");
	clone_call(&k2, 0, "no-such-name", &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "no tracing session");
	clone_call(&k2, 0, NULL, &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "session_id or a unique_session_name");
	tc_close(&k2);
	/* a consumer that owns a session cannot clone into it */
	clone_call(&r.c, src, NULL, &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "already has a tracing session");
	sonde__buf_free(&cfg);
	rig_down(&r);
}

TEST_TIMEOUT(clone_sonde_trace_cli_writes_a_snapshot, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	struct test_output o;
	const char *out = test_path("clone.pftrace");

	cfg_named(&cfg, "cli-clone-src");
	rig_up(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	commit_tagged(&r.p, r.target, 0, "snapshot-me");
	test_runf(&o, 30, "%s trace --socket %s --query", test_bin("sonde"), r.d.csock);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "cli-clone-src");
	test_output_free(&o);
	/* the producer does not answer the clone's flush: it times out, the clone goes on */
	test_runf(&o, 30, "%s trace --socket %s --clone cli-clone-src -o %s", test_bin("sonde"),
		  r.d.csock, out);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	size_t len;
	char *data = test_read_file(out, &len);
	ASSERT(data != NULL);
	sonde__buf_append(&trace, data, len);
	free(data);
	ASSERT_INT(trace_count(&trace, "snapshot-me", 11, NULL), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRACE_CONFIG), ==, 1);
	test_runf(&o, 30, "%s trace --socket %s --clone no-such-session -o %s", test_bin("sonde"),
		  r.d.csock, test_path("none.pftrace"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "no tracing session");
	test_output_free(&o);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

static void read_trace_file(const char *path, struct buf *trace)
{
	size_t len;
	char *data = test_read_file(path, &len);

	sonde__buf_reset(trace);
	ASSERT(data != NULL);
	sonde__buf_append(trace, data, len);
	free(data);
}

/* The rig up with a write_into_file session named name into src_fd (closed here), with
 * file_write_period_ms period_ms (0: the default), its data source started. */
static void wif_source(struct rig *r, const char *name, int src_fd, uint32_t period_ms)
{
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;

	cfg_named(&cfg, name);
	sonde__pb_put_bool(&cfg, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	if (period_ms)
		sonde__pb_put_varint(&cfg, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, period_ms);
	r->in = true;
	inproc_up(&r->h);
	inproc_producer(&r->h, &r->p, "test-producer", false);
	tprod_register(&r->p, "test.ds", false, false);
	inproc_consumer(&r->h, &r->c);
	r->enable_req = tcons_enable(&r->c, &cfg, src_fd);
	close(src_fd);
	tprod_expect(&r->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	r->target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	expect_cmd(&r->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	sonde__buf_free(&cfg);
}

/* A write_into_file session cloned by a caller that passes its output file, as `perfetto
 * --clone` always does: the caller's file gets what the source wrote into its own file so
 * far, then what it had not written yet, each packet once, and the reply says
 * was_write_into_file (the caller then reads nothing back). Without an fd, as `sonde trace
 * --clone`, the clone holds what the source had not written yet, read with ReadBuffers. */
TEST_TIMEOUT(clone_write_into_file_session_goes_into_the_callers_file, 60)
{
	struct rig r = {0};
	struct buf trace = BUF_INIT;
	struct tc k2, k3;
	struct clone_resp cr;
	const char *src_path = test_path("wif-src.pftrace"),
		   *out_path = test_path("wif-clone.pftrace");
	int src_fd = open(src_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int out_fd = open(out_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	ASSERT(src_fd >= 0 && out_fd >= 0);
	wif_source(&r, "wif-src", src_fd, 100);
	commit_tagged(&r.p, r.target, 0, "in-the-file-A");
	inproc_advance(&r.h, 100); /* file_write_period_ms */
	ASSERT_INT(inproc_file_count_when(src_path, "in-the-file-A", 1), ==, 1);
	commit_tagged(&r.p, r.target, 1, "in-the-buffer-B");

	/* with the caller's fd (the producer leaves the clone's flush to time out) */
	inproc_consumer(&r.h, &k2);
	clone_inproc(&r, &k2, "wif-src", out_fd, &cr);
	close(out_fd);
	ASSERT(cr.success);
	ASSERT(cr.was_write_into_file);
	read_trace_file(out_path, &trace);
	ASSERT_INT(trace_count(&trace, "in-the-file-A", 13, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "in-the-buffer-B", 15, NULL), ==, 1);
	ASSERT_INT(trace_count_field(&trace, PF_PACKET_TRACE_CONFIG), >=, 1);
	sonde__buf_reset(&trace);
	tcons_read(&k2, &trace); /* a write_into_file session gives nothing to ReadBuffers */
	ASSERT_INT(trace_count(&trace, "in-the-buffer-B", 15, NULL), ==, 0);

	/* without an fd: what the source had not written into its file */
	inproc_consumer(&r.h, &k3);
	clone_inproc(&r, &k3, "wif-src", -1, &cr);
	ASSERT(cr.success);
	ASSERT(!cr.was_write_into_file);
	sonde__buf_reset(&trace);
	tcons_read(&k3, &trace);
	ASSERT_INT(trace_count(&trace, "in-the-file-A", 13, NULL), ==, 0);

	/* the source goes on into its own file only */
	commit_tagged(&r.p, r.target, 2, "after-the-clone-C");
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	struct tc_msg *m = inproc_wait_writer_reply(&r.h, &r.c, r.enable_req, 20);
	ASSERT(m != NULL);
	free(tcons_disabled_reply(m));
	read_trace_file(src_path, &trace);
	ASSERT_INT(trace_count(&trace, "in-the-file-A", 13, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "in-the-buffer-B", 15, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "after-the-clone-C", 17, NULL), ==, 1);
	read_trace_file(out_path, &trace);
	ASSERT_INT(trace_count(&trace, "in-the-buffer-B", 15, NULL), ==, 1);
	ASSERT_INT(trace_count(&trace, "after-the-clone-C", 17, NULL), ==, 0);
	tc_close(&k2);
	tc_close(&k3);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* A write_into_file source whose file cannot be read back (opened write-only by its
 * consumer) cannot be copied into the caller's file: a clear error, and the source and the
 * caller go on. */
TEST_TIMEOUT(clone_write_into_file_session_unreadable_file_is_refused, 60)
{
	struct rig r = {0};
	struct tc k2;
	struct clone_resp cr;
	const char *src_path = test_path("wronly-src.pftrace");
	int src_fd = open(src_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int out_fd = open(test_path("wronly-clone.pftrace"), O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	ASSERT(src_fd >= 0 && out_fd >= 0);
	wif_source(&r, "wronly-src", src_fd, 0);
	inproc_consumer(&r.h, &k2);
	clone_inproc(&r, &k2, "wronly-src", out_fd, &cr);
	close(out_fd);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "cannot copy the write_into_file session's file");
	/* the caller has no session: it may clone again; the source still ends normally */
	clone_inproc(&r, &k2, "wronly-src", -1, &cr);
	ASSERT(cr.success);
	commit_tagged(&r.p, r.target, 0, "still-written");
	tc_msg_free(tc_ok(&r.c, tc_call(&r.c, "DisableTracing", NULL, -1, false)));
	struct tc_msg *m = inproc_wait_writer_reply(&r.h, &r.c, r.enable_req, 20);
	ASSERT(m != NULL);
	free(tcons_disabled_reply(m));
	struct buf trace = BUF_INIT;
	read_trace_file(src_path, &trace);
	ASSERT_INT(trace_count(&trace, "still-written", 13, NULL), ==, 1);
	tc_close(&k2);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* ------------------------------------------------------------------ ChangeTraceConfig */

TEST_TIMEOUT(sess_change_trace_config_updates_producer_filters, 60)
{
	struct inproc h;
	struct tprod a, b, x, late;
	struct tc c;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT;
	static const char *const only_a[] = {"prod-a"}, *const a_and_b[] = {"prod-a", "prod-b"};
	struct tcfg_filter f = {.producers = only_a, .n_producers = 1};

	inproc_up(&h);
	inproc_producer(&h, &a, "prod-a", false);
	inproc_producer(&h, &b, "prod-b", false);
	inproc_producer(&h, &x, "other", false);
	tprod_register(&a, "test.ds", false, false);
	tprod_register(&b, "test.ds", false, false);
	tprod_register(&x, "test.ds", false, false);
	inproc_consumer(&h, &c);
	tcfg_filtered(&cfg, &f);
	tcons_enable(&c, &cfg, -1);
	expect_cmd(&a, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	expect_cmd(&a, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT(!tprod_cmd(&b, &cmd, 0));

	/* prod-b joins the running session; prod-a keeps its one instance */
	f.producers = a_and_b;
	f.n_producers = 2;
	tcfg_filtered(&cfg, &f);
	struct tc_msg *m = tcons_change_config(&c, &cfg);
	ASSERT(m->f.success);
	tc_msg_free(m);
	expect_cmd(&b, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	expect_cmd(&b, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT(!tprod_cmd(&a, &cmd, 0));
	ASSERT(!tprod_cmd(&x, &cmd, 0));

	/* a regex filter: producers connecting later that match get an instance */
	f.regex = "late-.*";
	tcfg_filtered(&cfg, &f);
	m = tcons_change_config(&c, &cfg);
	ASSERT(m->f.success);
	tc_msg_free(m);
	inproc_producer(&h, &late, "late-producer", false);
	tprod_register(&late, "test.ds", false, false);
	expect_cmd(&late, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	expect_cmd(&late, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);

	/* anything else than the filters may not change */
	f.regex = ".*";
	f.duration_ms = 5000;
	tcfg_filtered(&cfg, &f);
	m = tcons_change_config(&c, &cfg);
	ASSERT(!m->f.success);
	tc_msg_free(m);
	ASSERT(!tprod_cmd(&x, &cmd, 0)); /* the ".*" regex did not apply */
	tc_close(&late.t);
	tc_close(&x.t);
	tc_close(&b.t);
	tc_close(&a.t);
	tc_close(&c);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

/* A consumer's producer_name_regex_filter is compiled once, and only within bounds: a
 * pattern whose interval bounds multiply past 256 (regcomp writes each out: 29 bytes,
 * ((a{1,255}){1,255}){1,255}, held the loop for 17 s and 10 GB, compiled again at every
 * match), one over 128 bytes, or more than 16 in a config are refused, at EnableTracing
 * and at ChangeTraceConfig, and an accepted one still matches. */
TEST_TIMEOUT(sess_producer_regex_filters_are_bounded, 60)
{
	struct inproc h;
	struct tprod a;
	struct tc c;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT;
	struct tcfg_filter f = {.regex = "(a{1,40}){1,40}"};
	char long_re[200];

	inproc_up(&h);
	inproc_producer(&h, &a, "prod-a", false);
	tprod_register(&a, "test.ds", false, false);

	tcfg_filtered(&cfg, &f);
	inproc_consumer(&h, &c);
	char *err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "producer_name_regex_filter is too complex");
	free(err);
	tc_close(&c);

	memset(long_re, 'a', sizeof(long_re) - 1);
	long_re[sizeof(long_re) - 1] = 0;
	f.regex = long_re;
	tcfg_filtered(&cfg, &f);
	inproc_consumer(&h, &c);
	err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "too long");
	free(err);
	tc_close(&c);

	sonde__buf_reset(&cfg); /* a data source with 17 patterns */
	size_t bm = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_BUFFERS);
	sonde__pb_put_varint(&cfg, PF_BUFFER_CONFIG_SIZE_KB, 1024);
	sonde__pb_end(&cfg, bm);
	size_t dm = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_DATA_SOURCES);
	size_t cm = sonde__pb_begin(&cfg, PF_TC_DATA_SOURCE_CONFIG);
	sonde__pb_put_string(&cfg, PF_DS_CONFIG_NAME, "test.ds");
	sonde__pb_end(&cfg, cm);
	for (int i = 0; i < 17; i++)
		sonde__pb_put_string(&cfg, PF_TC_DATA_SOURCE_PRODUCER_NAME_REGEX_FILTER, "prod-.*");
	sonde__pb_end(&cfg, dm);
	inproc_consumer(&h, &c);
	err = tcons_wait_disabled(&c, tcons_enable(&c, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "too many producer_name_regex_filter");
	free(err);
	tc_close(&c);

	/* within bounds: matched, and ChangeTraceConfig is held to the same */
	sonde__buf_reset(&cfg);
	f.regex = "prod-(a|b){1,2}";
	tcfg_filtered(&cfg, &f);
	inproc_consumer(&h, &c);
	tcons_enable(&c, &cfg, -1);
	expect_cmd(&a, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	expect_cmd(&a, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	sonde__buf_reset(&cfg);
	f.regex = "(a{1,40}){1,40}";
	tcfg_filtered(&cfg, &f);
	struct tc_msg *m = tcons_change_config(&c, &cfg);
	ASSERT(!m->f.success);
	tc_msg_free(m);
	tc_close(&a.t);
	tc_close(&c);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

/* ------------------------------------------------------------------ the rest */

TEST_TIMEOUT(sess_unique_session_name_is_refused_while_live, 60)
{
	struct inproc h;
	struct tc c1, c2, c3;
	struct buf cfg = BUF_INIT, other = BUF_INIT;

	inproc_up(&h);
	cfg_named(&cfg, "only-one");
	cfg_named(&other, "another-one");
	inproc_consumer(&h, &c1);
	uint64_t e1 = tcons_enable(&c1, &cfg, -1);
	inproc_advance(&h, 60000);
	ASSERT(tc_wait(&c1, e1, 0) == NULL); /* running */
	inproc_consumer(&h, &c2);
	char *err = tcons_wait_disabled(&c2, tcons_enable(&c2, &cfg, -1), 0);
	ASSERT(err != NULL);
	ASSERT_CONTAINS(err, "unique_session_name");
	free(err);
	tc_close(&c2);
	/* another name is fine */
	inproc_consumer(&h, &c3);
	uint64_t e3 = tcons_enable(&c3, &other, -1);
	ASSERT(tc_wait(&c3, e3, 0) == NULL);
	tc_close(&c3);
	/* once the first session is gone, the name is free again */
	tc_msg_free(tc_ok(&c1, tc_call(&c1, "FreeBuffers", NULL, -1, false)));
	inproc_consumer(&h, &c2);
	uint64_t e2 = tcons_enable(&c2, &cfg, -1);
	ASSERT(tc_wait(&c2, e2, 0) == NULL);
	tc_close(&c2);
	tc_close(&c1);
	sonde__buf_free(&cfg);
	sonde__buf_free(&other);
	inproc_down(&h);
}

static void register_incr(struct tprod *p, const char *ds)
{
	struct buf a = BUF_INIT;
	size_t m = sonde__pb_begin(&a, PF_REGISTER_DS_REQ_DESCRIPTOR);

	sonde__pb_put_string(&a, PF_DS_DESCRIPTOR_NAME, ds);
	sonde__pb_put_bool(&a, PF_DS_DESCRIPTOR_HANDLES_INCREMENTAL_STATE_CLEAR, true);
	sonde__pb_end(&a, m);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "RegisterDataSource", &a, -1, false)));
	sonde__buf_free(&a);
}

TEST_TIMEOUT(sess_clears_incremental_state_periodically, 60)
{
	struct inproc h;
	struct tprod yes, no;
	struct tc c;
	struct tcmd cmd;
	struct buf cfg = BUF_INIT;

	inproc_up(&h);
	inproc_producer(&h, &yes, "handles-clear", false);
	inproc_producer(&h, &no, "ignores-clear", false);
	register_incr(&yes, "test.ds");
	tprod_register(&no, "test.ds", false, false);
	tcfg_basic(&cfg, 1024, one_ds, 1);
	size_t m = sonde__pb_begin(&cfg, PF_TRACE_CONFIG_INCREMENTAL_STATE_CONFIG);
	sonde__pb_put_varint(&cfg, PF_INCREMENTAL_STATE_CONFIG_CLEAR_PERIOD_MS, 200);
	sonde__pb_end(&cfg, m);
	inproc_consumer(&h, &c);
	tcons_enable(&c, &cfg, -1);
	expect_cmd(&yes, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	uint64_t inst = cmd.inst_id;
	expect_cmd(&yes, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	expect_cmd(&no, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	expect_cmd(&no, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	/* one each period of 200 ms, none in between */
	for (int i = 0; i < 3; i++) {
		inproc_advance(&h, 199);
		ASSERT(!tprod_cmd(&yes, &cmd, 0));
		inproc_advance(&h, 1);
		expect_cmd(&yes, PF_ASYNC_CMD_CLEAR_INCREMENTAL_STATE, &cmd);
		ASSERT_UINT(cmd.inst_id, ==, inst);
	}
	/* the data source that did not declare handles_incremental_state_clear gets none */
	ASSERT(!tprod_cmd(&no, &cmd, 0));
	tc_close(&c);
	tc_close(&no.t);
	tc_close(&yes.t);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

TEST_TIMEOUT(sess_detached_session_attaches_only_for_the_same_uid, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, trace = BUF_INIT, a = BUF_INIT;
	struct tcmd cmd;
	struct tc other, again;
	struct tc_msg *m;
	char list[1024];

	sec_require_root();
	cfg_named(&cfg, "detach-me");
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	m = tc_call_key(&r.c, "Detach", "shared-key");
	ASSERT(m->f.success);
	tc_msg_free(m);
	m = tc_call_key(&r.c, "Detach", "second-key"); /* already detached */
	ASSERT(!m->f.success);
	tc_msg_free(m);
	tc_close(&r.c);
	commit_tagged(&r.p, r.target, 0, "while-detached");

	/* another uid with the same key finds nothing, and does not see the session */
	chmod(r.d.csock, 0666);
	tc_open_fd(&other, sec_connect_as(SEC_NOBODY, r.d.csock), "ConsumerPort");
	m = tc_call_key(&other, "Attach", "shared-key");
	ASSERT(!m->f.success);
	tc_msg_free(m);
	query_sessions(&other, list, sizeof(list));
	ASSERT_NOT_CONTAINS(list, "detach-me");
	tc_close(&other);

	/* the same uid, on a new connection */
	tc_open(&again, r.d.csock, "ConsumerPort");
	m = tc_call_key(&again, "Attach", "shared-key");
	ASSERT(m->f.success);
	tc_msg_free(m);
	sonde__pb_put_bool(&a, PF_ENABLE_TRACING_REQ_ATTACH_NOTIFICATION_ONLY, true);
	uint64_t en = tc_call(&again, "EnableTracing", &a, -1, false);
	tc_msg_free(tc_ok(&again, tc_call(&again, "DisableTracing", NULL, -1, false)));
	expect_cmd(&r.p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&again, en, 10000));
	tcons_read(&again, &trace);
	ASSERT_INT(trace_count(&trace, "while-detached", 14, NULL), ==, 1);
	/* attached again: the key is free, a second Attach finds nothing */
	tc_close(&again);
	tc_open(&again, r.d.csock, "ConsumerPort");
	m = tc_call_key(&again, "Attach", "shared-key");
	ASSERT(!m->f.success);
	tc_msg_free(m);
	r.c = again;
	sonde__buf_free(&a);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

TEST_TIMEOUT(sess_query_lists_own_sessions_and_all_for_root, 60)
{
	struct inproc h;
	struct sonded d;
	struct tc nob, root;
	struct buf cfg = BUF_INIT;
	char list[1024];

	sec_require_root();
	inproc_up(&h);
	inproc_sockets(&h, &d);
	chmod(d.csock, 0666);
	tc_open_fd(&nob, sec_connect_as(SEC_NOBODY, d.csock), "ConsumerPort");
	cfg_named(&cfg, "nobodys-session");
	tcons_enable(&nob, &cfg, -1);
	tc_open(&root, d.csock, "ConsumerPort");
	sonde__buf_reset(&cfg);
	cfg_named(&cfg, "roots-session");
	tcons_enable(&root, &cfg, -1);
	query_sessions(&nob, list, sizeof(list));
	ASSERT_CONTAINS(list, "nobodys-session:STARTED");
	ASSERT_NOT_CONTAINS(list, "roots-session");
	query_sessions(&root, list, sizeof(list));
	ASSERT_CONTAINS(list, "nobodys-session:STARTED");
	ASSERT_CONTAINS(list, "roots-session:STARTED");
	tc_close(&root);
	tc_close(&nob);
	sonde__buf_free(&cfg);
	inproc_down(&h);
}

/* CLONE_SNAPSHOT: a trigger notifies the session's consumer, which has another connection
 * clone the session; the session itself keeps running until its timeout. */
TEST_TIMEOUT(trig_clone_snapshot_notifies_the_consumer, 60)
{
	struct rig r = {0};
	struct buf cfg = BUF_INIT, a = BUF_INIT, trace = BUF_INIT;
	struct tcmd cmd;
	struct tc k2;
	struct clone_resp cr;
	const struct trig_spec t[] = {{"snap", NULL, 0, 0, 0}};

	cfg_triggers(&cfg, PF_TRIGGER_MODE_CLONE_SNAPSHOT, 60000, t, 1);
	rig_up_inproc(&r, &cfg);
	expect_cmd(&r.p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	sonde__pb_put_varint(&a, PF_OBSERVE_EVENTS_REQ_EVENTS_TO_OBSERVE, PF_OBSERVABLE_CLONE_TRIGGER_HIT);
	uint64_t obs = tc_call(&r.c, "ObserveEvents", &a, -1, false);
	commit_tagged(&r.p, r.target, 0, "snapshot-data");
	tc_msg_free(tc_ok(&r.p.t, tc_call(&r.p.t, "Sync", NULL, -1, false)));
	send_trigger(&r.p, "snap");

	struct tc_msg *m = tc_wait(&r.c, obs, 0);
	ASSERT(m != NULL && m->f.success && m->f.has_more);
	struct pb_reader rd = pb_reader_init(m->f.data, m->f.data_len), er, hr;
	struct pb_field f, g, h;
	uint64_t sid = 0;
	char tname[32] = "", pname[32] = "";
	while (sonde__pb_next(&rd, &f) > 0) {
		er = pb_sub(&f);
		while (sonde__pb_next(&er, &g) > 0) {
			if (g.num != PF_OBSERVABLE_EVENTS_CLONE_TRIGGER_HIT)
				continue;
			hr = pb_sub(&g);
			while (sonde__pb_next(&hr, &h) > 0) {
				if (h.num == PF_CLONE_TRIGGER_HIT_TRACING_SESSION_ID)
					sid = h.u;
				else if (h.num == PF_CLONE_TRIGGER_HIT_TRIGGER_NAME)
					snprintf(tname, sizeof(tname), "%.*s", (int)h.len, h.ptr);
				else if (h.num == PF_CLONE_TRIGGER_HIT_PRODUCER_NAME)
					snprintf(pname, sizeof(pname), "%.*s", (int)h.len, h.ptr);
			}
		}
	}
	tc_msg_free(m);
	ASSERT_UINT(sid, >, 0);
	ASSERT_STR_EQ(tname, "snap");
	ASSERT_STR_EQ(pname, "test-producer");

	/* as perfetto --clone does: a second connection clones the session it was told of */
	rig_consumer(&r, &k2);
	struct buf ca = BUF_INIT;
	sonde__pb_put_varint(&ca, PF_CLONE_SESSION_REQ_SESSION_ID, sid);
	uint64_t creq = tc_call(&k2, "CloneSession", &ca, -1, false);
	expect_cmd(&r.p, PF_ASYNC_CMD_FLUSH, &cmd);
	tprod_commit(&r.p, NULL, 0, r.target, cmd.flush_id, NULL);
	m = tc_ok(&k2, creq);
	rd = pb_reader_init(m->f.data, m->f.data_len);
	memset(&cr, 0, sizeof(cr));
	while (sonde__pb_next(&rd, &f) > 0)
		if (f.num == PF_CLONE_SESSION_RESP_SUCCESS)
			cr.success = f.u != 0;
	tc_msg_free(m);
	ASSERT(cr.success);
	tcons_read(&k2, &trace);
	ASSERT_INT(trace_count(&trace, "snapshot-data", 13, NULL), ==, 1);
	assert_trigger_packet(&trace, "snap", "test-producer", 0);
	inproc_advance(&r.h, 30000);
	ASSERT(!tprod_cmd(&r.p, &cmd, 0)); /* the source still runs: no stop */
	tc_close(&k2);
	sonde__buf_free(&ca);
	sonde__buf_free(&a);
	sonde__buf_free(&cfg);
	sonde__buf_free(&trace);
	rig_down(&r);
}

/* A caller whose fd for the clone is a pipe it never reads (or a socket, a tty) would hold
 * the service's loop in the copy's write, every client waiting: the clone is refused at
 * once, with which file is not a regular file, and the service goes on. */
TEST_TIMEOUT(clone_write_into_file_session_into_a_pipe_is_refused, 60)
{
	struct rig r = {0};
	struct tc k2, k3;
	struct clone_resp cr;
	const char *src_path = test_path("pipe-src.pftrace");
	int src_fd = open(src_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int p[2];
	static char fill[65536];

	ASSERT(src_fd >= 0);
	ASSERT_OK(pipe2(p, O_CLOEXEC | O_NONBLOCK));
	/* full: any write into it blocks, as a caller that never reads makes it */
	while (write(p[1], fill, sizeof(fill)) > 0)
		;
	ASSERT_OK(fcntl(p[1], F_SETFL, 0));
	wif_source(&r, "pipe-src", src_fd, 100);
	commit_tagged(&r.p, r.target, 0, "in-the-file-A");
	inproc_advance(&r.h, 100); /* file_write_period_ms */
	ASSERT_INT(inproc_file_count_when(src_path, "in-the-file-A", 1), ==, 1);

	inproc_consumer(&r.h, &k2);
	clone_inproc(&r, &k2, "pipe-src", p[1], &cr);
	ASSERT(!cr.success);
	ASSERT_CONTAINS(cr.error, "the descriptor sent is not a regular file");
	/* the loop is free: another client is served */
	inproc_consumer(&r.h, &k3);
	clone_inproc(&r, &k3, "pipe-src", -1, &cr);
	ASSERT(cr.success);
	close(p[0]);
	close(p[1]);
	tc_close(&k2);
	tc_close(&k3);
	rig_down(&r);
}
