/* The format file parser on odd but valid text, and on text it must refuse. */
#include "../test.h"
#include "probes/ftrace_config.h"
#include "perf/ftrace_format.h"

TEST(ftrace_format_kinds)
{
	static const char t[] =
		"name: odd\nID: 77\nformat:\n"
		"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
		"\tfield:__data_loc char[] name;\toffset:4;\tsize:4;\tsigned:0;\n"
		"\tfield:__rel_loc char[] rel;\toffset:8;\tsize:4;\tsigned:0;\n"
		"\tfield:u32 cpus[4];\toffset:12;\tsize:16;\tsigned:0;\n"
		"\tfield:__data_loc u8[] blob;\toffset:28;\tsize:4;\tsigned:0;\n"
		"\tfield:s8 small;\toffset:32;\tsize:1;\tsigned:1;\n"
		"\tfield:char c[8];\toffset:33;\tsize:8;\tsigned:0;\n"
		"\nprint fmt: \"field:bogus;\"\n";
	struct ftrace_format f;

	ASSERT_OK(sonde__ftrace_format_parse(t, sizeof(t) - 1, &f));
	ASSERT_STR_EQ(f.name, "odd");
	ASSERT_INT(f.id, ==, 77);
	ASSERT_INT(f.nfields, ==, 7);
	ASSERT_INT(f.record_size, ==, 41);
	ASSERT_INT(sonde__ftrace_format_field(&f, "name")->kind, ==, FTRACE_FIELD_DATA_LOC_STR);
	ASSERT_INT(sonde__ftrace_format_field(&f, "rel")->kind, ==, FTRACE_FIELD_REL_LOC_STR);
	ASSERT_INT(sonde__ftrace_format_field(&f, "cpus")->kind, ==, FTRACE_FIELD_ARRAY);
	ASSERT_STR_EQ(sonde__ftrace_format_field(&f, "cpus")->type, "u32");
	ASSERT_INT(sonde__ftrace_format_field(&f, "blob")->kind, ==, FTRACE_FIELD_DATA_LOC);
	ASSERT_INT(sonde__ftrace_format_field(&f, "c")->kind, ==, FTRACE_FIELD_CHARS);

	/* A record: name at 48 (len 4 "abc\0"), rel 4 bytes after rel's end (12 + 4 = 16). */
	uint8_t rec[64] = {0};
	uint32_t loc = 48 | 4u << 16, rloc = 4 | 3u << 16;
	memcpy(rec + 4, &loc, 4);
	memcpy(rec + 8, &rloc, 4);
	memcpy(rec + 48, "abc", 4);
	memcpy(rec + 16, "xyz", 3);
	rec[32] = 0xff;
	const char *s;
	size_t n;
	int64_t v;
	ASSERT(sonde__ftrace_field_str(sonde__ftrace_format_field(&f, "name"), rec, sizeof(rec), &s,
				       &n));
	ASSERT_INT(n, ==, 3);
	ASSERT_MEM_EQ(s, "abc", 3);
	ASSERT(sonde__ftrace_field_str(sonde__ftrace_format_field(&f, "rel"), rec, sizeof(rec), &s,
				       &n));
	ASSERT_INT(n, ==, 3);
	ASSERT_MEM_EQ(s, "xyz", 3);
	ASSERT(sonde__ftrace_field_int(sonde__ftrace_format_field(&f, "small"), rec, sizeof(rec),
				       &v));
	ASSERT_INT(v, ==, -1);
	/* A location past the record is refused. */
	loc = 62 | 8u << 16;
	memcpy(rec + 4, &loc, 4);
	ASSERT(!sonde__ftrace_field_str(sonde__ftrace_format_field(&f, "name"), rec, sizeof(rec),
					&s, &n));
	ASSERT(!sonde__ftrace_field_int(sonde__ftrace_format_field(&f, "small"), rec, 20, &v));
	sonde__ftrace_format_free(&f);
}

TEST(ftrace_format_refuses_bad_text)
{
	struct ftrace_format f;
	static const char *bad[] = {
		"name: x\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n", /* no ID */
		"ID: 3\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n",   /* no name */
		"name: x\nID: 3\nformat:\n",					     /* no field */
		"name: x\nID: 3\n\tfield:int a;\toffset:70000;\tsize:4;\tsigned:1;\n",
		"name: x\nID: 3\n\tfield:int a;\tsize:4;\tsigned:1;\n",
		"name: x\nID: 3\n\tfield:;\toffset:0;\tsize:4;\tsigned:1;\n",
		"name: x\nID: 99999999999\n\tfield:int a;\toffset:0;\tsize:4;\n",
		"name: x\nID: 3\n\tfield:int a];\toffset:0;\tsize:4;\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sonde__ftrace_format_parse(bad[i], strlen(bad[i]), &f) != -SONDE_E_FORMAT)
			FAIL("accepted: %s", bad[i]);
}

TEST(ftrace_config_fields)
{
	/* ftrace_events "sched/sched_switch", "irq/" "*"; buffer_size_kb 1024; drain_period_ms 100;
	 * compact_sched { enabled: true }; drain_buffer_percent 150 (capped at 100);
	 * atrace_categories "gfx" (marked as not acted on). */
	static const uint8_t b[] = {0x0a, 0x12, 's',  'c',  'h',  'e',	'd',  '/',  's',
				    'c',  'h',	'e',  'd',  '_',  's',	'w',  'i',  't',
				    'c',  'h',	0x0a, 0x05, 'i',  'r',	'q',  '/',  '*',
				    0x50, 0x80, 0x08, 0x58, 0x64, 0x62, 0x02, 0x08, 0x01,
				    0xe8, 0x01, 0x96, 0x01, 0x12, 0x03, 'g',  'f',  'x'};
	struct ftrace_config c;

	ASSERT_OK(sonde__ftrace_config_parse(b, sizeof(b), &c));
	ASSERT_INT(c.nevents, ==, 2);
	ASSERT_STR_EQ(c.events[0], "sched/sched_switch");
	ASSERT_STR_EQ(c.events[1], "irq/*");
	ASSERT_INT(c.buffer_size_kb, ==, 1024);
	ASSERT_INT(c.drain_period_ms, ==, 100);
	ASSERT(c.compact_sched);
	ASSERT_INT(c.drain_buffer_percent, ==, 100);
	ASSERT_UINT(c.unsupported, ==, 1ull << 2); /* atrace_categories */
	sonde__ftrace_config_free(&c);
	/* A name that would leave events/: refused. */
	static const uint8_t bad[] = {0x0a, 0x08, '.', '.', '/', '.', '.', '/', 'x', 'y'};
	ASSERT_ERR(sonde__ftrace_config_parse(bad, sizeof(bad), &c), -SONDE_E_RANGE);
	ASSERT_ERR(sonde__ftrace_config_parse(b, 5, &c), -SONDE_E_FORMAT);
	/* compact_sched is on unless the config says enabled: false (traced_probes since
	 * v42): absent, an empty CompactSchedConfig, enabled: false. */
	static const uint8_t none[] = {0x58, 0x64};
	static const uint8_t empty[] = {0x62, 0x00};
	static const uint8_t off[] = {0x62, 0x02, 0x08, 0x00};
	ASSERT_OK(sonde__ftrace_config_parse(none, sizeof(none), &c));
	ASSERT(c.compact_sched);
	ASSERT_OK(sonde__ftrace_config_parse(empty, sizeof(empty), &c));
	ASSERT(c.compact_sched);
	ASSERT_OK(sonde__ftrace_config_parse(off, sizeof(off), &c));
	ASSERT(!c.compact_sched);
}
