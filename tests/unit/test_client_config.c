/* Text-format TraceConfig parsing and trace file iteration. */
#include <math.h>

#include <sonde/client.h>

#include "base/buf.h"
#include "base/pb.h"

#include "../test.h"

static void parse_ok(const char *txt, uint8_t **out, size_t *len)
{
	struct sonde_txt_error err;
	int r = sonde_trace_config__from_text(txt, strlen(txt), out, len, &err);
	if (r < 0)
		FAIL("parse failed at %d:%d: %s", err.line, err.column, err.msg);
}

static void parse_err(const char *txt, int line, int col, const char *needle)
{
	struct sonde_txt_error err;
	uint8_t *out = (uint8_t *)"x";
	size_t len = 7;

	ASSERT_ERR(sonde_trace_config__from_text(txt, strlen(txt), &out, &len, &err),
		   -SONDE_E_FORMAT);
	ASSERT(out == NULL);
	ASSERT_UINT(len, ==, 0);
	ASSERT_CONTAINS(err.msg, needle);
	if (err.line != line || err.column != col)
		FAIL("error \"%s\" reported at %d:%d, expected %d:%d", err.msg, err.line,
		     err.column, line, col);
}

static void expect_bytes(const uint8_t *got, size_t got_len, const struct buf *want)
{
	ASSERT_UINT(got_len, ==, want->len);
	ASSERT_MEM_EQ(got, want->data, want->len);
}

TEST(client_txtcfg_typical_config_encodes_like_the_writer)
{
	const char *txt = "# a typical perfetto config\n"
			  "buffers: {\n"
			  "  size_kb: 65536\n"
			  "  fill_policy: DISCARD\n"
			  "}\n"
			  "buffers { size_kb: 1024 }\n"
			  "data_sources: {\n"
			  "  config {\n"
			  "    name: \"track_event\"\n"
			  "    target_buffer: 1\n"
			  "    track_event_config { enabled_categories: [\"cat\", \"x*\"] }\n"
			  "  }\n"
			  "  producer_name_filter: \"app\"\n"
			  "}\n"
			  "duration_ms: 10000; flush_period_ms: 0x3e8,\n"
			  "write_into_file: true\n"
			  "max_file_size_bytes: 18446744073709551615\n"
			  "unique_session_name: 'se' \"ss\\x69on\"\n"
			  "builtin_data_sources < primary_trace_clock: BUILTIN_CLOCK_MONOTONIC >\n"
			  "trace_uuid_msb: -2\n";
	uint8_t *out;
	size_t len;
	struct buf w = BUF_INIT;

	parse_ok(txt, &out, &len);
	size_t m = sonde__pb_begin(&w, 1);
	sonde__pb_put_varint(&w, 1, 65536);
	sonde__pb_put_varint(&w, 4, 2);
	sonde__pb_end(&w, m);
	m = sonde__pb_begin(&w, 1);
	sonde__pb_put_varint(&w, 1, 1024);
	sonde__pb_end(&w, m);
	size_t ds = sonde__pb_begin(&w, 2);
	size_t c = sonde__pb_begin(&w, 1);
	sonde__pb_put_string(&w, 1, "track_event");
	sonde__pb_put_varint(&w, 2, 1);
	size_t te = sonde__pb_begin(&w, 113);
	sonde__pb_put_string(&w, 2, "cat");
	sonde__pb_put_string(&w, 2, "x*");
	sonde__pb_end(&w, te);
	sonde__pb_end(&w, c);
	sonde__pb_put_string(&w, 2, "app");
	sonde__pb_end(&w, ds);
	sonde__pb_put_varint(&w, 3, 10000);
	sonde__pb_put_varint(&w, 13, 1000);
	sonde__pb_put_bool(&w, 8, true);
	sonde__pb_put_varint(&w, 10, UINT64_MAX);
	sonde__pb_put_string(&w, 22, "session");
	m = sonde__pb_begin(&w, 20);
	sonde__pb_put_varint(&w, 5, 3);
	sonde__pb_end(&w, m);
	sonde__pb_put_varint(&w, 27, (uint64_t)-2);
	expect_bytes(out, len, &w);
	free(out);
	sonde__buf_free(&w);
}

TEST(client_txtcfg_scalar_types)
{
	const char *txt = "data_sources { config { name: \"t\" for_testing { dummy_fields {\n"
			  " field_uint32: 4294967295 field_int32: -2147483648\n"
			  " field_sint32: -3 field_sint64: 5 field_fixed32: 7 field_sfixed64: -1\n"
			  " field_double: -1.5e3 field_float: 0.25f field_bytes: \"\\001\\377\"\n"
			  " field_string: \"\\u00e9\" } } } }\n";
	uint8_t *out;
	size_t len;
	struct buf w = BUF_INIT;

	parse_ok(txt, &out, &len);
	size_t ds = sonde__pb_begin(&w, 2), c = sonde__pb_begin(&w, 1);
	sonde__pb_put_string(&w, 1, "t");
	size_t t = sonde__pb_begin(&w, 1001), d = sonde__pb_begin(&w, 6);
	sonde__pb_put_varint(&w, 1, UINT32_MAX);
	sonde__pb_put_varint(&w, 2, (uint64_t)(int64_t)INT32_MIN);
	sonde__pb_put_sint(&w, 12, -3);
	sonde__pb_put_sint(&w, 11, 5);
	sonde__pb_put_fixed32(&w, 7, 7);
	sonde__pb_put_fixed64(&w, 6, UINT64_MAX);
	sonde__pb_put_double(&w, 9, -1500.0);
	float f = 0.25f;
	uint32_t bits;
	memcpy(&bits, &f, 4);
	sonde__pb_put_fixed32(&w, 10, bits);
	sonde__pb_put_bytes(&w, 14, "\x01\xff", 2);
	sonde__pb_put_string(&w, 13, "\xc3\xa9");
	sonde__pb_end(&w, d);
	sonde__pb_end(&w, t);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	expect_bytes(out, len, &w);
	free(out);
	sonde__buf_free(&w);
}

TEST(client_txtcfg_empty_and_comment_only_configs_are_empty)
{
	uint8_t *out;
	size_t len;

	parse_ok("", &out, &len);
	ASSERT_UINT(len, ==, 0);
	ASSERT(out != NULL);
	free(out);
	parse_ok("  # nothing\n\n", &out, &len);
	ASSERT_UINT(len, ==, 0);
	free(out);
}

TEST(client_txtcfg_errors_point_at_line_and_column)
{
	parse_err("duration_ms: 10\nbufers { size_kb: 4 }\n", 2, 1,
		  "unknown field 'bufers' in TraceConfig");
	parse_err("buffers {\n  size_kb: -4\n}\n", 2, 12, "out of range");
	parse_err("buffers {\n  size_kb: 4294967296\n}\n", 2, 12, "out of range");
	parse_err("buffers { fill_policy: RING }", 1, 24,
		  "unknown value 'RING' for enum field 'fill_policy'");
	parse_err("buffers { size_kb: 4\n", 2, 1, "missing '}' to close the '{' at 1:9");
	parse_err("duration_ms 10", 1, 13, "expected ':' after field name 'duration_ms'");
	parse_err("duration_ms: 1\nduration_ms: 2", 2, 1, "specified more than once");
	parse_err("duration_ms: [1, 2]", 1, 1, "not repeated");
	parse_err("unique_session_name: \"abc\n\"", 1, 22, "not terminated");
	parse_err("write_into_file: yes", 1, 18, "expected true or false");
	parse_err("data_sources { config { name: 1 } }", 1, 31, "expected a string");
	parse_err("data_sources { config { ftrace_config { ftrace_events: \"a\" buffer_size_kb: "
		  "1.5 } } }",
		  1, 76, "is not an integer");
	parse_err("[ext.field]: 1", 1, 1, "extensions");
	parse_err("duration_ms: 1 }", 1, 16, "expected a field name");
	parse_err("data_sources: { config: { no_such_config: {} } }", 1, 27,
		  "unknown field 'no_such_config' in DataSourceConfig");
	parse_err("unique_session_name: \"\\q\"", 1, 22, "invalid escape");
	parse_err("duration_ms: 1 $", 1, 16, "unexpected character");
	parse_err("buffers: [{size_kb: 1} {size_kb: 2}]", 1, 24, "expected ',' or ']'");
	parse_err("data_sources { config { perf_event_config { timebase {\n"
		  "  frequency: 99\n  period: 1000 } } } }",
		  3, 3,
		  "field 'frequency' and field 'period' are members of the same oneof: only one "
		  "may be set");
	parse_err("data_sources { config { sys_stats_config { stat_counters: MEMINFO_MEM_TOTAL "
		  "} } }",
		  1, 59,
		  "unknown value 'MEMINFO_MEM_TOTAL' for enum field 'stat_counters' of type "
		  "StatCounters");
}

/* Perfetto v53's fields and enum names, which the v14 table refused */
TEST(client_txtcfg_v53_fields_and_enum_names)
{
	const char *txt =
		"data_sources { config { name: \"linux.sys_stats\"\n"
		"  sys_stats_config { meminfo_counters: MEMINFO_MEM_TOTAL\n"
		"    vmstat_counters: [VMSTAT_PGFAULT, 3] cpuidle_period_ms: 100 } } }\n"
		"data_sources { config { process_stats_config { resolve_process_fds: true "
		"} ftrace_config { drain_buffer_percent: 40 ksyms_mem_policy: KSYMS_RETAIN "
		"} } }\n";
	uint8_t *out;
	size_t len;
	struct buf w = BUF_INIT;

	parse_ok(txt, &out, &len);
	size_t ds = sonde__pb_begin(&w, 2), c = sonde__pb_begin(&w, 1);
	sonde__pb_put_string(&w, 1, "linux.sys_stats");
	size_t ss = sonde__pb_begin(&w, 104);
	sonde__pb_put_varint(&w, 2, 1);	 /* MEMINFO_MEM_TOTAL */
	sonde__pb_put_varint(&w, 4, 49); /* VMSTAT_PGFAULT */
	sonde__pb_put_varint(&w, 4, 3);
	sonde__pb_put_varint(&w, 13, 100);
	sonde__pb_end(&w, ss);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	ds = sonde__pb_begin(&w, 2);
	c = sonde__pb_begin(&w, 1);
	ss = sonde__pb_begin(&w, 103);
	sonde__pb_put_bool(&w, 9, true);
	sonde__pb_end(&w, ss);
	ss = sonde__pb_begin(&w, 100);
	sonde__pb_put_varint(&w, 29, 40);
	sonde__pb_put_varint(&w, 17, 2);
	sonde__pb_end(&w, ss);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	expect_bytes(out, len, &w);
	free(out);
	sonde__buf_free(&w);
}

/* The configs of data sources other producers serve (statsd, V8, ETW) encode by name, as
 * the v53 CLI encodes them: atoms by AtomId name, ETW's kernel flags by KernelFlag name. */
TEST(client_txtcfg_statsd_v8_and_etw_configs)
{
	const char *txt =
		"data_sources { config { name: \"android.statsd\" statsd_tracing_config {\n"
		"  push_atom_id: ATOM_FLASHLIGHT_STATE_CHANGED\n"
		"  push_atom_id: ATOM_WIFI_CONFIGURED_NETWORK_INFO\n"
		"  raw_push_atom_id: 10037\n"
		"  pull_config { pull_atom_id: ATOM_SYSTEM_UPTIME pull_frequency_ms: 500\n"
		"    packages: \"SYSTEM_AID\" } } } }\n"
		"data_sources { config { name: \"dev.v8.code\"\n"
		"  v8_config { log_instructions: true } } }\n"
		"data_sources { config { etw_config { kernel_flags: DISPATCHER\n"
		"  memory_provider_events: \"MEMINFO\" } } }\n";
	uint8_t *out;
	size_t len;
	struct buf w = BUF_INIT;

	parse_ok(txt, &out, &len);
	size_t ds = sonde__pb_begin(&w, 2), c = sonde__pb_begin(&w, 1);
	sonde__pb_put_string(&w, 1, "android.statsd");
	size_t sc = sonde__pb_begin(&w, 117);
	sonde__pb_put_varint(&w, 1, 26);    /* ATOM_FLASHLIGHT_STATE_CHANGED */
	sonde__pb_put_varint(&w, 1, 10198); /* ATOM_WIFI_CONFIGURED_NETWORK_INFO, the last */
	sonde__pb_put_varint(&w, 2, 10037);
	size_t pc = sonde__pb_begin(&w, 3);
	sonde__pb_put_varint(&w, 1, 10015); /* ATOM_SYSTEM_UPTIME */
	sonde__pb_put_varint(&w, 3, 500);
	sonde__pb_put_string(&w, 4, "SYSTEM_AID");
	sonde__pb_end(&w, pc);
	sonde__pb_end(&w, sc);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	ds = sonde__pb_begin(&w, 2);
	c = sonde__pb_begin(&w, 1);
	sonde__pb_put_string(&w, 1, "dev.v8.code");
	sc = sonde__pb_begin(&w, 127);
	sonde__pb_put_bool(&w, 2, true);
	sonde__pb_end(&w, sc);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	ds = sonde__pb_begin(&w, 2);
	c = sonde__pb_begin(&w, 1);
	sc = sonde__pb_begin(&w, 125);
	sonde__pb_put_varint(&w, 1, 1); /* DISPATCHER */
	sonde__pb_put_string(&w, 3, "MEMINFO");
	sonde__pb_end(&w, sc);
	sonde__pb_end(&w, c);
	sonde__pb_end(&w, ds);
	expect_bytes(out, len, &w);
	free(out);
	sonde__buf_free(&w);
	parse_err("data_sources { config { statsd_tracing_config { push_atom_id: ATOM_NOPE } } }",
		  1, 63, "unknown value 'ATOM_NOPE' for enum field 'push_atom_id' of type AtomId");
}

TEST(client_txtcfg_lists_of_messages_and_empty_lists)
{
	uint8_t *out;
	size_t len;
	struct buf w = BUF_INIT;

	parse_ok("buffers: [{size_kb: 1}, <size_kb: 2>] activate_triggers: []", &out, &len);
	for (int i = 1; i <= 2; i++) {
		size_t m = sonde__pb_begin(&w, 1);
		sonde__pb_put_varint(&w, 1, (uint64_t)i);
		sonde__pb_end(&w, m);
	}
	expect_bytes(out, len, &w);
	free(out);
	sonde__buf_free(&w);
}

TEST(client_txtcfg_deep_nesting_is_bounded)
{
	/* the schema has no recursion, so depth is bounded by the schema itself: an unknown
	 * nested name stops the parse before any recursion */
	struct buf t = BUF_INIT;
	for (int i = 0; i < 1000; i++)
		sonde__buf_append(&t, "buffers {", 9);
	struct sonde_txt_error err;
	uint8_t *out;
	size_t len;
	ASSERT_ERR(sonde_trace_config__from_text((const char *)t.data, t.len, &out, &len, &err),
		   -SONDE_E_FORMAT);
	ASSERT_CONTAINS(err.msg, "unknown field 'buffers' in BufferConfig");
	sonde__buf_free(&t);
}

TEST(trace_file_iterates_packets_and_skips_other_fields)
{
	struct buf b = BUF_INIT;
	const void *pkt;
	size_t pos = 0, n;

	sonde__pb_put_bytes(&b, 1, "abc", 3);
	sonde__pb_put_varint(&b, 2, 7); /* not a packet: skipped */
	sonde__pb_put_fixed32(&b, 3, 1);
	sonde__pb_put_bytes(&b, 1, "", 0);
	size_t m = sonde__pb_begin(&b, 1); /* 4-byte redundant length is valid too */
	sonde__buf_append(&b, "xy", 2);
	sonde__pb_end(&b, m);

	ASSERT_INT(sonde_trace__next_packet(b.data, b.len, &pos, &pkt, &n), ==, 1);
	ASSERT_UINT(n, ==, 3);
	ASSERT_MEM_EQ(pkt, "abc", 3);
	ASSERT_INT(sonde_trace__next_packet(b.data, b.len, &pos, &pkt, &n), ==, 1);
	ASSERT_UINT(n, ==, 0);
	ASSERT_INT(sonde_trace__next_packet(b.data, b.len, &pos, &pkt, &n), ==, 1);
	ASSERT_UINT(n, ==, 2);
	ASSERT_MEM_EQ(pkt, "xy", 2);
	ASSERT_INT(sonde_trace__next_packet(b.data, b.len, &pos, &pkt, &n), ==, 0);
	ASSERT_UINT(pos, ==, b.len);
	sonde__buf_free(&b);
}

TEST(trace_file_reports_truncation_and_garbage)
{
	static const uint8_t cut[] = {0x0a, 0x05, 'a', 'b'};
	static const uint8_t cut_len[] = {0x0a, 0x85};
	static const uint8_t group[] = {0x0b, 0x00};
	static const uint8_t field0[] = {0x02, 0x00};
	const void *pkt;
	size_t pos, n;

	pos = 0;
	ASSERT_ERR(sonde_trace__next_packet(cut, sizeof(cut), &pos, &pkt, &n), -SONDE_E_TRUNCATED);
	pos = 0;
	ASSERT_ERR(sonde_trace__next_packet(cut_len, sizeof(cut_len), &pos, &pkt, &n),
		   -SONDE_E_TRUNCATED);
	pos = 0;
	ASSERT_ERR(sonde_trace__next_packet(group, sizeof(group), &pos, &pkt, &n), -SONDE_E_FORMAT);
	pos = 0;
	ASSERT_ERR(sonde_trace__next_packet(field0, sizeof(field0), &pos, &pkt, &n),
		   -SONDE_E_FORMAT);
	/* an empty file is a valid, empty trace */
	pos = 0;
	ASSERT_INT(sonde_trace__next_packet(cut, 0, &pos, &pkt, &n), ==, 0);
}

TEST(client_config_builder_roundtrips_through_summary)
{
	struct sonde_trace_config_opts o = {.sz = sizeof(o),
					    .duration_ms = 2500,
					    .write_into_file = true,
					    .flush_timeout_ms = 700,
					    .unique_session_name = "u"};
	struct sonde_trace_config *cfg = ASSERT_NOT_NULL(sonde_trace_config__new(&o));
	struct sonde_trace_config_summary s;
	uint8_t *out;
	size_t len;

	ASSERT_INT(sonde_trace_config__add_buffer(cfg, 1024, SONDE_FILL_DISCARD), ==, 0);
	ASSERT_INT(sonde_trace_config__add_buffer(cfg, 2048, SONDE_FILL_RING_BUFFER), ==, 1);
	ASSERT_OK(sonde_trace_config__add_data_source(cfg, "a", 1, NULL, 0));
	ASSERT_OK(sonde_trace_config__add_data_source(cfg, "b", 0, "\x18\x05", 2));
	ASSERT_ERR(sonde_trace_config__add_data_source(cfg, "", 0, NULL, 0), -EINVAL);
	ASSERT_OK(sonde_trace_config__add_producer(cfg, "p", 512, 8));
	ASSERT_OK(sonde_trace_config__encode(cfg, &out, &len));
	ASSERT_OK(sonde_trace_config__summarize(out, len, &s));
	ASSERT_UINT(s.num_buffers, ==, 2);
	ASSERT_UINT(s.total_buffer_kb, ==, 3072);
	ASSERT_UINT(s.num_data_sources, ==, 2);
	ASSERT_UINT(s.duration_ms, ==, 2500);
	ASSERT_UINT(s.flush_timeout_ms, ==, 700);
	ASSERT(s.write_into_file && !s.has_output_path && !s.deferred_start);

	/* the same config written as text encodes to the same bytes */
	const char *txt =
		"buffers { size_kb: 1024 fill_policy: DISCARD }\n"
		"buffers { size_kb: 2048 fill_policy: RING_BUFFER }\n"
		"data_sources { config { name: \"a\" target_buffer: 1 } }\n"
		"data_sources { config { name: \"b\" target_buffer: 0 trace_duration_ms: 5 } }\n"
		"producers { producer_name: \"p\" shm_size_kb: 512 page_size_kb: 8 }\n"
		"duration_ms: 2500 flush_timeout_ms: 700 write_into_file: true\n"
		"unique_session_name: \"u\"\n";
	uint8_t *t;
	size_t tlen;
	parse_ok(txt, &t, &tlen);
	ASSERT_UINT(tlen, ==, len);
	ASSERT_MEM_EQ(t, out, len);
	free(t);
	free(out);
	sonde_trace_config__free(cfg);
	sonde_trace_config__free(NULL);
}

TEST(client_config_summary_rejects_malformed_configs)
{
	static const uint8_t bad_nested[] = {0x0a, 0x02, 0x08, 0x80}; /* buffers: truncated */
	static const uint8_t bad_ds[] = {0x12, 0x03, 0x0a, 0x01, 0xff};
	struct sonde_trace_config_summary s;

	ASSERT_ERR(sonde_trace_config__summarize(bad_nested, sizeof(bad_nested), &s),
		   -SONDE_E_FORMAT);
	ASSERT_ERR(sonde_trace_config__summarize(bad_ds, sizeof(bad_ds), &s), -SONDE_E_FORMAT);
	ASSERT_OK(sonde_trace_config__summarize(bad_ds, 0, &s));
	ASSERT_UINT(s.num_buffers, ==, 0);
}
