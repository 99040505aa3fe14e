/* `sonde trace` end to end against sonded, with protoc as an independent decoder. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <sonde/client.h>

#include "base/buf.h"
#include "base/pb.h"

#include "../test.h"
#include "../util.h"
#include "client_util.h"

struct rig {
	struct client_svc svc;
	pid_t prod;
};

static void rig_start(struct rig *r, int packets)
{
	struct client_prod_opts o = {.packets = packets, .commit_on_start = true};
	client_svc_start(&r->svc);
	o.socket = r->svc.psock;
	r->prod = client_prod_spawn(&o);
	client_wait_data_source(r->svc.csock, "client.test");
}

static void rig_stop(struct rig *r)
{
	ASSERT_INT(test_wait(r->prod, 20), ==, 0);
	client_svc_stop(&r->svc);
}

static void check_trace_file(const char *path, int packets)
{
	size_t n;
	char *data = ASSERT_NOT_NULL(test_read_file(path, &n));
	ASSERT_INT(client_count_test_packets(data, n, packets, 0), ==, packets);
	free(data);
}

TEST_TIMEOUT(trace_cli_quick_flags_end_to_end_with_protoc, 90)
{
	struct rig r;
	struct test_output o;
	const char *out = test_path("quick.pftrace");

	rig_start(&r, 100);
	test_runf(&o, 60, "%s trace --socket %s -o %s -t 1s -b 4mb client.test", test_bin("sonde"),
		  r.svc.csock, out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "wrote ");
	test_output_free(&o);
	check_trace_file(out, 100);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "protoc --decode_raw < %s", out);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 30, argv);
	if (o.status == 127)
		SKIP("protoc is not installed (scripts/packages lists protobuf-compiler)");
	ASSERT_INT(o.status, ==, 0);
	/* every record is a packet (field 1) carrying our payload as field 900 */
	ASSERT_CONTAINS(o.out, "1 {\n");
	ASSERT_CONTAINS(o.out, "900 {\n    1: \"client packet 0\"");
	ASSERT_CONTAINS(o.out, "1: \"client packet 99\"");
	test_output_free(&o);
	rig_stop(&r);
}

TEST_TIMEOUT(trace_cli_text_config_write_into_file, 90)
{
	struct rig r;
	struct test_output o;
	const char *out = test_path("txt.pftrace"), *cfg = test_path("cfg.txt");
	static const char txt[] = "# sonde trace test\n"
				  "buffers { size_kb: 4096 fill_policy: DISCARD }\n"
				  "data_sources { config { name: \"client.test\" } }\n"
				  "duration_ms: 1200\n"
				  "write_into_file: true\n"
				  "file_write_period_ms: 200\n";

	rig_start(&r, 150);
	test_write_file(cfg, txt, sizeof(txt) - 1);
	test_runf(&o, 60, "%s trace --socket %s -c %s --txt -o %s", test_bin("sonde"), r.svc.csock,
		  cfg, out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "the service wrote");
	test_output_free(&o);
	check_trace_file(out, 150);
	rig_stop(&r);
}

TEST_TIMEOUT(trace_cli_binary_config, 90)
{
	struct rig r;
	struct test_output o;
	const char *out = test_path("bin.pftrace"), *cfg = test_path("cfg.pb");
	/* deferred_start: sonde trace must send StartTracing itself */
	static const char txt[] = "buffers { size_kb: 2048 }\n"
				  "data_sources { config { name: \"client.test\" } }\n"
				  "duration_ms: 1000 deferred_start: true\n";
	uint8_t *bin;
	size_t len;

	ASSERT_OK(sonde_trace_config__from_text(txt, sizeof(txt) - 1, &bin, &len, NULL));
	test_write_file(cfg, bin, len);
	free(bin);
	rig_start(&r, 30);
	test_runf(&o, 60, "%s trace --socket %s -c %s -o %s", test_bin("sonde"), r.svc.csock, cfg,
		  out);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	check_trace_file(out, 30);
	rig_stop(&r);
}

TEST_TIMEOUT(trace_cli_ctrl_c_flushes_and_stops, 90)
{
	struct rig r;
	const char *out = test_path("sigint.pftrace");

	/* the producer never commits by itself: only the Ctrl-C flush brings the data */
	const char *started = test_path("started.cfg");
	struct client_prod_opts po = {.packets = 60, .config_out = started};
	client_svc_start(&r.svc);
	po.socket = r.svc.psock;
	r.prod = client_prod_spawn(&po);
	client_wait_data_source(r.svc.csock, "client.test");
	const char *argv[] = {
		test_bin("sonde"), "trace", "--socket", r.svc.csock, "-o", out, "-t", "1h",
		"client.test",	   NULL};
	pid_t pid = test_spawn(argv);
	/* interrupted once the session runs: the producer's instance started (it writes its
	 * config, then its packets), not after a fixed 800 ms a loaded machine may not have
	 * started the session in */
	for (double end = test_now() + 30; access(started, F_OK) != 0; usleep(10 * 1000))
		ASSERT(test_now() < end);
	double t0 = test_now();
	kill(pid, SIGINT);
	ASSERT_INT(test_wait(pid, 30), ==, 0);
	ASSERT(test_now() - t0 < 15);
	check_trace_file(out, 60);
	rig_stop(&r);
}

TEST_TIMEOUT(trace_cli_query_lists_producers, 60)
{
	struct rig r;
	struct test_output o;

	rig_start(&r, 1);
	test_runf(&o, 30, "%s trace --socket %s --query", test_bin("sonde"), r.svc.csock);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "client-test");
	ASSERT_CONTAINS(o.out, "client.test");
	ASSERT_CONTAINS(o.out, "sessions: 0");
	test_output_free(&o);
	kill(r.prod, SIGKILL);
	test_wait(r.prod, 10);
	client_svc_stop(&r.svc);
}

TEST(trace_cli_errors)
{
	struct test_output o;
	const char *cfg = test_path("bad.txt");
	static const char bad[] = "buffers { size_kb: 1024 }\ndata_sources { confg {} }\n";

	test_runf(&o, 10, "%s trace --socket %s -o %s x", test_bin("sonde"), test_path("none.sock"),
		  test_path("o"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, "no tracing service at ");
	ASSERT_CONTAINS(o.err, test_path("none.sock"));
	test_output_free(&o);

	test_write_file(cfg, bad, sizeof(bad) - 1);
	test_runf(&o, 10, "%s trace -c %s --txt -o %s", test_bin("sonde"), cfg, test_path("o"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, ":2:16: unknown field 'confg' in DataSource");
	test_output_free(&o);

	test_runf(&o, 10, "%s trace client.test", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "-o FILE is required");
	test_output_free(&o);

	test_runf(&o, 10, "%s trace -o x -c y -t 1s", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);

	test_runf(&o, 10, "%s trace -o x -t 10parsecs a", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "bad duration");
	test_output_free(&o);

	test_runf(&o, 10, "%s trace --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "--query");
	test_output_free(&o);
}

TEST_TIMEOUT(trace_cli_warns_of_data_sources_no_producer_offers, 90)
{
	struct rig r;
	struct test_output o;
	const char *out = test_path("unmatched.pftrace");

	rig_start(&r, 20);
	/* --output and --duration, the names every sonde command uses */
	test_runf(&o, 60,
		  "%s trace --socket %s --output %s --duration 1s client.test no.such.source",
		  test_bin("sonde"), r.svc.csock, out);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "sonde trace: warning: no producer offers data source "
			       "'no.such.source': nothing will be recorded from it");
	ASSERT_NOT_CONTAINS(o.err, "'client.test'");
	test_output_free(&o);
	check_trace_file(out, 20);
	rig_stop(&r);
}

TEST(trace_cli_mistyped_option_is_one_line)
{
	struct test_output o;

	test_runf(&o, 10, "%s trace --outptu x a", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde trace: unknown option '--outptu' (see 'sonde trace --help')\n");
	test_output_free(&o);
	test_runf(&o, 10, "%s trace -o", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde trace: option '-o' needs a value (see 'sonde trace --help')\n");
	test_output_free(&o);
}

/* A session of one data source, "vendor.opaque", that sonde knows nothing of, served by a
 * test producer that keeps the DataSourceConfig its instance got. The service appends its
 * own fields (target buffer, session id, ...) after the consumer's, so the consumer's bytes
 * must arrive as the config's first want_len bytes, unchanged. */
static void check_config_reaches_producer(const char *cfg, bool txt, const uint8_t *want,
					  size_t want_len)
{
	struct rig r;
	struct test_output o;
	char got_path[4096];
	const char *out = test_path("opaque.pftrace");
	struct client_prod_opts po = {
		.packets = 5, .commit_on_start = true, .ds_name = "vendor.opaque"};
	size_t got_len;

	snprintf(got_path, sizeof(got_path), "%s", test_path("got.cfg"));
	po.config_out = got_path;
	client_svc_start(&r.svc);
	po.socket = r.svc.psock;
	r.prod = client_prod_spawn(&po);
	client_wait_data_source(r.svc.csock, "vendor.opaque");
	test_runf(&o, 60, "%s trace --socket %s -c %s%s -o %s", test_bin("sonde"), r.svc.csock, cfg,
		  txt ? " --txt" : "", out);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	check_trace_file(out, 5);
	rig_stop(&r);
	uint8_t *got = ASSERT_NOT_NULL((uint8_t *)test_read_file(got_path, &got_len));
	ASSERT_UINT(got_len, >, want_len);
	ASSERT_MEM_EQ(got, want, want_len);
	free(got);
}

/* The DataSourceConfig (data_sources[0].config) of a binary TraceConfig. */
static void first_ds_config(const uint8_t *tc, size_t len, const uint8_t **ds, size_t *ds_len)
{
	struct pb_reader r = pb_reader_init(tc, len), dr;
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 2 || f.wire != PB_LEN)
			continue;
		dr = pb_sub(&f);
		while (sonde__pb_next(&dr, &f) > 0)
			if (f.num == 1 && f.wire == PB_LEN) {
				*ds = f.ptr;
				*ds_len = f.len;
				return;
			}
	}
	FAIL("the config has no data_sources { config }");
}

TEST_TIMEOUT(trace_cli_cfg_unknown_data_source_binary_config_reaches_its_producer, 90)
{
	/* fields of other data sources' configs (android_log_config, 107), numbers no schema
	 * has, every wire type, a negative varint: all opaque to sonde */
	struct buf ds = BUF_INIT, tc = BUF_INIT;
	sonde__pb_put_string(&ds, 1, "vendor.opaque");
	size_t m = sonde__pb_begin(&ds, 107);
	sonde__pb_put_varint(&ds, 1, 3);
	sonde__pb_put_varint(&ds, 2, 4);
	sonde__pb_put_string(&ds, 3, "tag");
	sonde__pb_end(&ds, m);
	sonde__pb_put_bytes(&ds, 4242, "\x00\xff\x80opaque", 9);
	sonde__pb_put_fixed32(&ds, 4243, 0xdeadbeef);
	sonde__pb_put_fixed64(&ds, 4244, 0x0123456789abcdefull);
	sonde__pb_put_varint(&ds, 4245, (uint64_t)-7);
	sonde__pb_put_bytes(&ds, 1001, "\x08\x03", 2); /* for_testing { message_count: 3 } */

	m = sonde__pb_begin(&tc, 1);
	sonde__pb_put_varint(&tc, 1, 1024);
	sonde__pb_end(&tc, m);
	m = sonde__pb_begin(&tc, 2);
	sonde__pb_put_bytes(&tc, 1, ds.data, ds.len);
	sonde__pb_end(&tc, m);
	sonde__pb_put_varint(&tc, 3, 500); /* duration_ms */
	ASSERT_OK(buf_error(&tc));
	const char *cfg = test_path("opaque.pb");
	test_write_file(cfg, tc.data, tc.len);
	check_config_reaches_producer(cfg, false, ds.data, ds.len);
	sonde__buf_free(&ds);
	sonde__buf_free(&tc);
}

TEST_TIMEOUT(trace_cli_cfg_unknown_data_source_text_config_reaches_its_producer, 90)
{
	/* in text form a data source's name is free: any config message the schema has encodes,
	 * whoever serves it */
	static const char txt[] =
		"buffers { size_kb: 1024 }\n"
		"data_sources { config {\n"
		"  name: \"vendor.opaque\"\n"
		"  track_event_config { enabled_categories: [\"a\", \"b*\"] }\n"
		"  chrome_config { trace_config: \"{}\" client_priority: USER_INITIATED }\n"
		"  for_testing { message_count: 3 dummy_fields { field_sint32: -9 field_bytes: "
		"\"\\000\\377\" } }\n"
		"  legacy_config: \"k=v\"\n"
		"} }\n"
		"duration_ms: 500\n";
	uint8_t *bin;
	size_t len, ds_len = 0;
	const uint8_t *ds = NULL;

	ASSERT_OK(sonde_trace_config__from_text(txt, sizeof(txt) - 1, &bin, &len, NULL));
	first_ds_config(bin, len, &ds, &ds_len);
	const char *cfg = test_path("opaque.txt");
	test_write_file(cfg, txt, sizeof(txt) - 1);
	check_config_reaches_producer(cfg, true, ds, ds_len);
	free(bin);
}
