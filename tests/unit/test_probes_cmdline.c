/* linux.perf's target_cmdline patterns (sonde__perfds_cmdline_match), as perf_event_config.proto
 * (Scope) defines them: one '*' at most; '/...' against argv0, else against its binary
 * name. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "base/buf.h"
#include "base/pb.h"
#include "probes/perfds.h"

/* a /proc/PID/cmdline: NUL-separated, NUL-terminated */
static bool match(const char *pattern, const char *argv0, const char *arg1)
{
	char cmd[1024];
	size_t n = strlen(argv0) + 1;

	memcpy(cmd, argv0, n);
	if (arg1) {
		memcpy(cmd + n, arg1, strlen(arg1) + 1);
		n += strlen(arg1) + 1;
	}
	return sonde__perfds_cmdline_match(pattern, cmd, n);
}

TEST(probes_cmdline_pattern_without_slash_matches_the_binary_name)
{
	ASSERT(match("split", "/usr/bin/split", "30"));
	ASSERT(match("split", "split", NULL));
	ASSERT(!match("split", "/usr/bin/splitter", NULL));
	ASSERT(!match("bin/split", "/usr/bin/split", NULL)); /* not the argv0 */
	/* the older normalization cut at '@'; today's matching does not */
	ASSERT(!match("app", "app@2", NULL));
	ASSERT(match("app@2", "/data/app@2", NULL));
	/* only argv0 counts */
	ASSERT(!match("30", "/usr/bin/split", "30"));
}

TEST(probes_cmdline_pattern_with_slash_matches_argv0)
{
	ASSERT(match("/usr/bin/split", "/usr/bin/split", "30"));
	ASSERT(!match("/usr/bin/split", "split", NULL));
	ASSERT(!match("/bin/split", "/usr/bin/split", NULL));
	ASSERT(match("/bin/e*", "/bin/echo", NULL)); /* the proto's own example */
	ASSERT(!match("/bin/e*", "/usr/bin/echo", NULL));
}

TEST(probes_cmdline_pattern_holds_one_wildcard)
{
	ASSERT(match("split*", "/x/split", NULL));
	ASSERT(match("split*", "/x/split-nofp", NULL));
	ASSERT(match("*nofp", "/x/split-nofp", NULL));
	ASSERT(match("sp*fp", "/x/split-nofp", NULL));
	ASSERT(match("*", "/x/anything", NULL));
	ASSERT(!match("split*", "/x/ladder", NULL));
	ASSERT(!match("spl*lit", "/x/split", NULL)); /* prefix and suffix may not overlap */
	/* '*' matches '/' too: from a '/' pattern, the directories */
	ASSERT(match("/opt/*/split", "/opt/a/b/split", NULL));
	ASSERT(match("*", "", NULL));
}

static void cfg_with_cmdline(struct buf *b, const char *pattern)
{
	size_t pe = sonde__pb_begin(b, 111);
	size_t cs = sonde__pb_begin(b, 16);
	size_t sc = sonde__pb_begin(b, 1);
	sonde__pb_put_string(b, 2, pattern);
	sonde__pb_end(b, sc);
	sonde__pb_end(b, cs);
	sonde__pb_end(b, pe);
}

TEST(probes_cmdline_pattern_with_two_wildcards_is_refused)
{
	struct buf b = BUF_INIT;
	struct perfds_cfg c;
	char err[256];

	cfg_with_cmdline(&b, "a*b*");
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, -EINVAL);
	ASSERT_CONTAINS(err, "more than one '*' wildcard");
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);
	cfg_with_cmdline(&b, "ladder*");
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
	ASSERT_UINT(c.n_cmdlines, ==, 1);
	ASSERT_STR_EQ(c.cmdlines[0], "ladder*");
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);
}

/* perf_event_config{timebase{period?, tracepoint{name, filter?}}}, plus an exclude_pid
 * scope when exclude is not 0. */
static void cfg_with_tracepoint(struct buf *b, const char *name, const char *filter,
				uint64_t period, uint64_t frequency, int32_t exclude)
{
	size_t pe = sonde__pb_begin(b, 111);
	size_t tb = sonde__pb_begin(b, 15);
	if (period)
		sonde__pb_put_varint(b, 1, period);
	if (frequency)
		sonde__pb_put_varint(b, 2, frequency);
	size_t tp = sonde__pb_begin(b, 3);
	sonde__pb_put_string(b, 1, name);
	sonde__pb_put_string(b, 2, filter);
	sonde__pb_end(b, tp);
	sonde__pb_end(b, tb);
	if (exclude) {
		size_t cs = sonde__pb_begin(b, 16);
		size_t sc = sonde__pb_begin(b, 1);
		sonde__pb_put_varint(b, 3, (uint64_t)exclude);
		sonde__pb_end(b, sc);
		sonde__pb_end(b, cs);
	}
	sonde__pb_end(b, pe);
}

/* A tracepoint timebase in either of perf_events.proto's forms, kept as GROUP:NAME with
 * its filter; every hit without a period; no target is a system-wide config whose
 * exclusions still apply. */
TEST(probes_perf_config_tracepoint_and_system_wide)
{
	struct buf b = BUF_INIT;
	struct perfds_cfg c;
	char err[256];

	cfg_with_tracepoint(&b, "sched/sched_switch", "prev_state == 1", 0, 0, 4242);
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
	ASSERT_STR_EQ(c.tracepoint, "sched:sched_switch");
	ASSERT_STR_EQ(c.tracepoint_filter, "prev_state == 1");
	ASSERT_UINT(c.period, ==, 1);
	ASSERT_UINT(c.frequency, ==, 0);
	ASSERT_UINT(c.counter, ==, 0);
	ASSERT(c.system_wide);
	ASSERT(!sonde__perfds_is_target(&c, 4242));
	ASSERT(sonde__perfds_is_target(&c, getpid()));
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);

	cfg_with_tracepoint(&b, "sched:sched_waking", "", 7, 0, 0);
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
	ASSERT_STR_EQ(c.tracepoint, "sched:sched_waking");
	ASSERT(c.tracepoint_filter == NULL);
	ASSERT_UINT(c.period, ==, 7);
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);

	static const char *const bad[] = {"sched", "sched/", "/x", "a/b/c", "a:b:c", "../x", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cfg_with_tracepoint(&b, bad[i], NULL, 0, 0, 0);
		ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==,
			   -EINVAL);
		ASSERT_CONTAINS(err, "is not group/name or group:name");
		sonde__perfds_cfg_free(&c);
		sonde__buf_free(&b);
	}
	cfg_with_tracepoint(&b, "sched/sched_switch", NULL, 0, 99, 0);
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, -EINVAL);
	ASSERT_CONTAINS(err, "a frequency on a tracepoint timebase is not supported");
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);

	/* no timebase, no target: cpu-clock at the default frequency, system-wide */
	size_t pe = sonde__pb_begin(&b, 111);
	sonde__pb_put_varint(&b, 12, 1); /* kernel_frames */
	sonde__pb_end(&b, pe);
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
	ASSERT(c.system_wide);
	ASSERT(c.tracepoint == NULL);
	ASSERT_UINT(c.counter, ==, PERFDS_COUNTER_SW_CPU_CLOCK);
	ASSERT_UINT(c.frequency, ==, 10);
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);

	/* a target makes it per process */
	cfg_with_cmdline(&b, "ladder*");
	ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
	ASSERT(!c.system_wide);
	sonde__perfds_cfg_free(&c);
	sonde__buf_free(&b);
}

/* An off-CPU profile is sched_switch at every hit with callstack_sampling: a filter, a
 * period above 1, another tracepoint or no callstack_sampling samples the tracepoint as
 * before. */
TEST(probes_perf_config_offcpu_profile)
{
	static const struct {
		const char *name, *filter;
		uint64_t period;
		int32_t exclude; /* non-zero: with callstack_sampling */
		bool off_cpu;
	} cases[] = {
		{"sched/sched_switch", NULL, 0, 4242, true},
		{"sched:sched_switch", NULL, 1, 4242, true},
		{"sched/sched_switch", "prev_state == 1", 0, 4242, false},
		{"sched/sched_switch", NULL, 2, 4242, false},
		{"sched/sched_waking", NULL, 0, 4242, false},
		{"sched/sched_switch", NULL, 0, 0, false},
	};
	struct buf b = BUF_INIT;
	struct perfds_cfg c;
	char err[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cfg_with_tracepoint(&b, cases[i].name, cases[i].filter, cases[i].period, 0,
				    cases[i].exclude);
		ASSERT_INT(sonde__perfds_cfg_parse(b.data, b.len, &c, err, sizeof(err)), ==, 0);
		if (c.off_cpu != cases[i].off_cpu)
			FAIL("case %zu: off_cpu %d, expected %d", i, c.off_cpu, cases[i].off_cpu);
		sonde__perfds_cfg_free(&c);
		sonde__buf_free(&b);
	}
}
