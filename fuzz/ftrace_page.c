/* Fuzz target: a tracefs ring page through the page parser, and every event it yields
 * through the bundle encoder as a sched_switch (typed and compact) and as a generic event,
 * so that hostile records meet the field accessors too.
 *
 * Input: byte 0 picks the layout (bit 0: a 4-byte commit, as 32-bit kernels write), the
 * rest is the page.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "probes/ftrace_encode.h"
#include "perf/ftrace_format.h"
#include "probes/ftrace_page.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char sched_switch_format[] =
	"name: sched_switch\nID: 372\nformat:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
	"\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
	"\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	"\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
	"\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
	"\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n"
	"\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
	"\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n"
	"print fmt: \"\"\n";

static const char generic_format[] =
	"name: odd\nID: 9\nformat:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:__data_loc char[] name;\toffset:4;\tsize:4;\tsigned:0;\n"
	"\tfield:__rel_loc char[] rel;\toffset:8;\tsize:4;\tsigned:0;\n"
	"\tfield:u8 bytes[3];\toffset:12;\tsize:3;\tsigned:0;\n"
	"\tfield:s8 small;\toffset:15;\tsize:1;\tsigned:1;\n"
	"\tfield:u64 big;\toffset:16;\tsize:8;\tsigned:0;\n";

static struct ftrace_event_desc descs[3];
static struct ftrace_bundle bundle;

static void setup(void)
{
	static int done;
	struct ftrace_format f;

	if (done)
		return;
	done = 1;
	for (int i = 0; i < 3; i++) {
		const char *t = i == 2 ? generic_format : sched_switch_format;
		if (sonde__ftrace_format_parse(t, strlen(t), &f) < 0)
			__builtin_trap();
		strcpy(f.group, i == 2 ? "test" : "sched");
		sonde__ftrace_desc_init(&descs[i], &f, i == 1);
	}
}

static int on_event(void *ctx, uint64_t ts, const uint8_t *rec, size_t len)
{
	for (int i = 0; i < 3; i++) {
		sonde__ftrace_bundle_add(&bundle, &descs[i], ts, rec, len, true);
		sonde__ftrace_desc_pid(&descs[i], rec, len);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ftrace_page_layout l;
	struct ftrace_page_info info;

	if (size < 1)
		return 0;
	setup();
	sonde__ftrace_page_layout_default(&l);
	if (data[0] & 1) {
		l.commit_size = 4;
		l.data_offset = 12;
	}
	sonde__ftrace_bundle_begin(&bundle, 0, false, 0);
	sonde__ftrace_page_parse(&l, data + 1, size - 1, &info, on_event, NULL);
	sonde__ftrace_bundle_finish(&bundle);
	return 0;
}
