/* Symbolization of real recordings, end to end:
 * - debuginfod: a stripped binary (no symbols, no DWARF) is recorded with `sonde record`;
 *   `sonde report` and `sonde convert`, pointed at a local debuginfod server (Debian's, on
 *   loopback) that serves its debug file, name its functions and lines, with an empty
 *   client cache; without the server they cannot.
 * - inline frames: an -O2 program whose hot loop is two always_inline levels deep shows
 *   each inlined call as its own frame, with the loop body's source line.
 * - PLT stubs: samples taken in the stubs themselves are NAME@plt, for .plt (lazy and -z
 *   now), .plt.sec (IBT) and .plt.got. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

/* Every "compute_hot (split.c:N)" label of a --lines report has N inside compute_hot. */
static void assert_lines(const char *out, uint32_t first, uint32_t last)
{
	static const char label[] = "compute_hot (split.c:";
	int seen = 0;

	for (const char *p = strstr(out, label); p; p = strstr(p + 1, label)) {
		unsigned line = (unsigned)atoi(p + sizeof(label) - 1);
		ASSERT_UINT(line, >=, first);
		ASSERT_UINT(line, <=, last);
		seen++;
	}
	ASSERT_INT(seen, >, 0);
}

TEST_TIMEOUT(kernel_debuginfod_names_a_recorded_stripped_binary, 180)
{
	const char *split = test_prog("split"), *stripped = test_path("split.stripped");
	const char *spool = test_path("s.spool"), *folded = test_path("s.folded");
	char hex[130], url[64], probe[256], db[4096], srv[4096], cache[4096];
	struct test_output o;
	int port;

	test_require_perf();
	sym_test_build_id_hex(split, hex, sizeof(hex));
	snprintf(srv, sizeof(srv), "%s/srv", test_tmpdir());
	snprintf(db, sizeof(db), "%s/debuginfod.sqlite", test_tmpdir());
	snprintf(cache, sizeof(cache), "%s/cache", test_tmpdir());
	sym_test_sh("mkdir -p %s %s && objcopy --only-keep-debug %s %s/split.debug", srv, cache,
		    split, srv);
	sym_test_sh("strip --strip-all -o %s %s", stripped, split);

	test_runf(&o, 60, "%s record -o %s -- %s 1", test_bin("sonde"), spool, stripped);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);

	/* No server configured: the stripped binary has nothing to name compute_* with. */
	unsetenv("DEBUGINFOD_URLS");
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "compute_hot");
	ASSERT_CONTAINS(o.out, "split.stripped+0x");
	test_output_free(&o);

	snprintf(probe, sizeof(probe), "/buildid/%s/debuginfo", hex);
	pid_t server = sym_test_debuginfod_start(srv, db, probe, &port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("DEBUGINFOD_URLS", url, 1);
	test_runf(&o, 90, "%s report --lines %s", test_bin("sonde"), spool);
	char *lines = strdup(o.out);
	int lines_status = o.status;
	test_output_free(&o);
	test_runf(&o, 90, "%s convert %s -o %s --format folded", test_bin("sonde"), spool, folded);
	int convert_status = o.status;
	test_output_free(&o);
	kill(server, SIGTERM);
	test_wait(server, 10);

	ASSERT_INT(lines_status, ==, 0);
	uint32_t first =
		sym_test_marker_line(test_src_path("tests/progs/split.c"), "uint64_t compute_hot(");
	assert_lines(lines, first, first + 4);
	ASSERT_CONTAINS(lines, "compute_warm (split.c:");
	ASSERT_CONTAINS(lines, "path_cool");
	free(lines);
	ASSERT_INT(convert_status, ==, 0);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	ASSERT_CONTAINS(text, ";main;run;path_hot;compute_hot ");
	free(text);
	/* The debug file was fetched into the (empty) client cache named by the test. */
	char cached[8192];
	snprintf(cached, sizeof(cached), "%s/%s/debuginfo", cache, hex);
	ASSERT_INT(access(cached, F_OK), ==, 0);
}

TEST_TIMEOUT(kernel_recorded_inline_frames_with_lines, 120)
{
	const char *exe = test_prog("sym_inline"), *spool = test_path("i.spool");
	const char *src = test_src_path("tests/progs/sym_inline.c");
	uint32_t body = sym_test_marker_line(src, "sym:inner-body");
	struct test_output o;
	char want[128];

	test_require_perf();
	test_runf(&o, 60, "%s record -o %s -- %s 1500000000", test_bin("sonde"), spool, exe);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	long total = 0, inlined = 0;
	char *save;
	for (char *l = strtok_r(o.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		long n = sp ? atol(sp + 1) : 0;
		total += n;
		if (sp && strstr(l, ";main;outer_work;middle_step;inner_mix "))
			inlined += n;
	}
	test_output_free(&o);
	ASSERT_INT(total, >=, 100);
	ASSERT_INT(inlined * 10, >=, total * 8);

	snprintf(want, sizeof(want), "  inner_mix (sym_inline.c:%u) [sym_inline]", body);
	test_runf(&o, 60, "%s report --lines %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, want);
	test_output_free(&o);
}

/* Samples of `sonde report --folded` ending in ";plt_loop;LEAF", added to *n; fails at a
 * stub left unnamed (a raw module+0x frame under plt_loop). */
static void count_plt_leaves(const char *spool, const char *prog, unsigned long n[2])
{
	static const char *const leaf[2] = {";plt_loop;labs@plt ", ";plt_loop;llabs@plt "};
	struct test_output o;
	char raw[300];

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	snprintf(raw, sizeof(raw), ";plt_loop;%s+0x", strrchr(prog, '/') + 1);
	ASSERT_NOT_CONTAINS(o.out, raw);
	for (int k = 0; k < 2; k++)
		for (const char *p = strstr(o.out, leaf[k]); p; p = strstr(p + 1, leaf[k]))
			n[k] += strtoul(p + strlen(leaf[k]), NULL, 10);
	test_output_free(&o);
}

/* plt_calls spends much of its time in the stubs of labs (.plt, or .plt.sec with IBT) and
 * llabs (.plt.got): those samples are named as perf names them, in each build. Counts
 * accumulate over recordings of each build, up to a minute of them (a loaded machine gives
 * few samples). */
TEST_TIMEOUT(record_samples_in_plt_stubs_are_named, 240)
{
	static const char *const progs[] = {"plt_calls", "plt_calls_now", "plt_calls_ibt"};
	const char *spool = test_path("plt.spool");
	struct test_output o;

	test_require_perf();
	for (size_t i = 0; i < 3; i++) {
		char prog[4096];
		unsigned long n[2] = {0, 0};
		snprintf(prog, sizeof(prog), "%s", test_prog(progs[i]));
		/* recordings until both counts are there: a loaded machine gives the program
		 * less CPU in one, so fewer samples; up to a deadline, not a count */
		for (double end = test_now() + 60; (n[0] < 5 || n[1] < 5) && test_now() < end;) {
			test_runf(&o, 60, "%s record -q -F 999 -o %s -- %s 1.5", test_bin("sonde"),
				  spool, prog);
			ASSERT_INT(o.status, ==, 0);
			test_output_free(&o);
			count_plt_leaves(spool, prog, n);
		}
		if (n[0] < 5 || n[1] < 5)
			FAIL("%s: %lu samples in labs@plt, %lu in llabs@plt (want 5 each)",
			     progs[i], n[0], n[1]);
	}
}
