/* protoc, an independent decoder, reads the binary configs sonde produces from text. */
#include <stdio.h>

#include <sonde/client.h>

#include "../test.h"
#include "../util.h"

TEST(client_txtcfg_output_decodes_with_protoc)
{
	const char *txt = "buffers { size_kb: 4096 fill_policy: DISCARD }\n"
			  "data_sources { config { name: \"linux.perf\" perf_event_config {\n"
			  "  timebase { frequency: 99 counter: SW_CPU_CLOCK } } } }\n"
			  "duration_ms: 3000\n";
	struct test_output o;
	uint8_t *out;
	size_t len;

	ASSERT_OK(sonde_trace_config__from_text(txt, strlen(txt), &out, &len, NULL));
	const char *path = test_path("cfg.pb");
	test_write_file(path, out, len);
	free(out);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "protoc --decode_raw < %s", path);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 30, argv);
	if (o.status == 127)
		SKIP("protoc is not installed (scripts/packages lists protobuf-compiler)");
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "1 {\n  1: 4096\n  4: 2\n}");
	ASSERT_CONTAINS(o.out, "1: \"linux.perf\"");
	ASSERT_CONTAINS(o.out, "111 {\n      15 {\n        2: 99\n        4: 1\n      }");
	ASSERT_CONTAINS(o.out, "3: 3000");
	test_output_free(&o);
}
