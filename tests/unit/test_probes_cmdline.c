/* linux.perf's target_cmdline patterns (sonde__perfds_cmdline_match), as perf_event_config.proto
 * (Scope) defines them: one '*' at most; '/...' against argv0, else against its binary
 * name. */
#include <errno.h>
#include <string.h>

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
