/* The corpus of real-world text configs (tests/data/configs) through `sonde trace --txt`,
 * checked against protoc, an encoder that shares nothing with sonde's parser but the
 * .proto files.
 *
 * sonde writes nested messages with 4-byte length prefixes (the patching format) where
 * protoc writes the shortest, and in the text's field order where protoc sorts by number;
 * both are the same message. So sonde's bytes are decoded by protoc and encoded again,
 * which must give protoc's own encoding of the text byte for byte: a field sonde dropped,
 * added, misnumbered or mistyped, or a value it encoded differently, shows as a
 * difference (a field number protoc does not know would not even encode again). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../util.h"

/* protoc's encoding of a text config (text == NULL: of the binary at bin, decoded first). */
static char *protoc_encode(const char *text, const char *bin, const char *out, size_t *len)
{
	struct test_output o;
	char cmd[8192];
	const char *protos = test_src_path("protos");

	if (text)
		snprintf(cmd, sizeof(cmd),
			 "protoc --proto_path=%s --encode=perfetto.protos.TraceConfig "
			 "config/trace_config.proto < %s > %s",
			 protos, text, out);
	else
		snprintf(cmd, sizeof(cmd),
			 "set -o pipefail; protoc --proto_path=%s "
			 "--decode=perfetto.protos.TraceConfig config/trace_config.proto < %s | "
			 "protoc --proto_path=%s --encode=perfetto.protos.TraceConfig "
			 "config/trace_config.proto > %s",
			 protos, bin, protos, out);
	const char *argv[] = {"/bin/bash", "-c", cmd, NULL};
	test_run(&o, 60, argv);
	if (o.status != 0)
		FAIL("protoc failed (status %d) on %s: %s", o.status, text ? text : bin, o.err);
	test_output_free(&o);
	return ASSERT_NOT_NULL(test_read_file(out, len));
}

static void check_config(const char *path)
{
	struct test_output o;
	const char *ours = test_path("ours.pb");
	size_t want_len, got_len;

	test_runf(&o, 30, "%s trace --txt -c %s --config-only -o %s", test_bin("sonde"), path,
		  ours);
	if (o.status != 0)
		FAIL("sonde trace --txt refused %s: %s", path, o.err);
	test_output_free(&o);
	char *want = protoc_encode(path, NULL, test_path("want.pb"), &want_len);
	char *got = protoc_encode(NULL, ours, test_path("got.pb"), &got_len);
	if (got_len != want_len || memcmp(got, want, want_len) != 0)
		FAIL("%s: sonde's encoding decodes to another message than protoc's (%zu bytes "
		     "against %zu once re-encoded; protoc --decode both to see which field)",
		     path, got_len, want_len);
	ASSERT_UINT(want_len, >, 0);
	free(want);
	free(got);
}

TEST_TIMEOUT(client_txtcfg_corpus_encodes_as_protoc_does, 180)
{
	char dir[4096];
	int n = 0;

	snprintf(dir, sizeof(dir), "%s", test_src_path("tests/data/configs"));
	DIR *d = opendir(dir);
	ASSERT(d != NULL);
	for (struct dirent *e; (e = readdir(d));) {
		size_t l = strlen(e->d_name);
		if (l < 7 || strcmp(e->d_name + l - 6, ".txtpb") != 0)
			continue;
		char path[8192];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		check_config(path);
		n++;
	}
	closedir(d);
	/* the corpus is there: ftrace, process and sys stats, perf, track_event, session */
	ASSERT_INT(n, >=, 10);
}

TEST(client_txtcfg_config_only_errors)
{
	struct test_output o;
	const char *bad = test_path("bad.txtpb");
	static const char txt[] = "data_sources { config { name: \"linux.sys_stats\"\n"
				  "  sys_stats_config { meminfo_counters: MEMINFO_MEM_TOTL } } }\n";

	test_write_file(bad, txt, sizeof(txt) - 1);
	test_runf(&o, 10, "%s trace --txt -c %s --config-only -o %s", test_bin("sonde"), bad,
		  test_path("o.pb"));
	ASSERT_INT(o.status, ==, 1);
	ASSERT_CONTAINS(o.err, ":2:40: unknown value 'MEMINFO_MEM_TOTL' for enum field "
			       "'meminfo_counters' of type MeminfoCounters");
	test_output_free(&o);
	test_runf(&o, 10, "%s trace --config-only -o %s", test_bin("sonde"), test_path("o.pb"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "--config-only needs -c FILE");
	test_output_free(&o);
}
