/* JIT-compiled JavaScript, end to end: `node --perf-basic-prof` writes /tmp/perf-PID.map;
 * `sonde record` unwinds through its JIT code (which has no CFI: frame pointers, which V8
 * keeps, take over there), and `sonde report` / `sonde convert` name the JS function. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

static const char js[] =
	"function sondeHotLoop(n) {\n"
	"  let x = 0;\n"
	"  for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;\n"
	"  return x;\n"
	"}\n"
	"function sondeDriver(ms) {\n"
	"  const cpu = process.cpuUsage();\n"
	"  let s = 0;\n"
	"  /* CPU time, not wall time: the machine may be busy */\n"
	"  while ((process.cpuUsage(cpu).user / 1000) < ms) s += sondeHotLoop(100000);\n"
	"  return s;\n"
	"}\n"
	"console.log(sondeDriver(1500));\n";

struct jtally {
	long hot;      /* samples whose leaf is sondeHotLoop */
	long complete; /* ... whose stack reaches node's main through the JIT frames */
	long total;
};

static void jtally_folded(struct jtally *t, char *text)
{
	char *save;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		long n = atol(sp + 1);
		t->total += n;
		char *leaf = strrchr(line, ';');
		if (!leaf || !strstr(leaf, "sondeHotLoop"))
			continue;
		t->hot += n;
		if (strncmp(line, "_start;", 7) == 0 && strstr(line, ";node::Start("))
			t->complete += n;
	}
}

static void assert_js_profile(char *folded)
{
	struct jtally t = {0};

	jtally_folded(&t, folded);
	ASSERT_INT(t.total, >=, 100);
	/* The hot loop is most of the CPU time once node has started. */
	ASSERT_INT(t.hot * 5, >=, t.total);
	ASSERT_INT(t.complete * 10, >=, t.hot * 9);
}

TEST_TIMEOUT(kernel_node_perf_basic_prof_names_js_functions, 180)
{
	const char *script = test_path("hot.js"), *spool = test_path("node.spool");
	const char *folded = test_path("node.folded");
	struct test_output o;
	char map[64] = "";

	test_require_perf();
	test_write_file(script, js, strlen(js));
	/* --perf-basic-prof also turns on V8's log: keep it in the test's directory. Without
	 * --no-turbo-inlining, TurboFan sometimes inlines the hot loop into its caller, and the
	 * samples then (correctly) name the caller instead; compiling on the main thread keeps a
	 * loaded machine from leaving the loop in the interpreter, whose samples name V8's
	 * bytecode handlers. */
	test_runf(&o, 150,
		  "%s record -o %s -- node --perf-basic-prof --no-turbo-inlining "
		  "--no-concurrent-recompilation --no-logfile-per-isolate --logfile=%s %s",
		  test_bin("sonde"), spool, test_path("v8.log"), script);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	const char *m = strstr(o.out, "[perf-");
	if (m)
		snprintf(map, sizeof(map), "/tmp/%.*s", (int)strcspn(m + 1, "]"), m + 1);
	int named = strstr(o.out, "sondeHotLoop") != NULL;
	test_output_free(&o);
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	char *report_folded = strdup(o.out);
	test_output_free(&o);
	test_runf(&o, 60, "%s convert %s -o %s --format folded", test_bin("sonde"), spool, folded);
	int convert_status = o.status;
	test_output_free(&o);
	/* node leaves its map behind; remove it before anything can end the test */
	if (map[0])
		unlink(map);

	ASSERT(named);
	ASSERT_CONTAINS(map, "/tmp/perf-");
	assert_js_profile(report_folded);
	free(report_folded);
	ASSERT_INT(convert_status, ==, 0);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	assert_js_profile(text);
	free(text);
}
