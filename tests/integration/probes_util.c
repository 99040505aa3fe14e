/* Helpers for the probes' tests. See probes_util.h. */
#include "probes_util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "perf/tracefs.h"

int probes_collect(void *ctx, const void *packet, size_t len)
{
	struct buf *b = ctx;

	sonde__pb_put_bytes(b, 1, packet, len);
	return buf_error(b);
}

const char *probes_require_tracefs(void)
{
	static char root[TRACEFS_PATH_MAX];

	if (geteuid() != 0)
		SKIP("tracefs needs root");
	if (sonde__tracefs_find(root, sizeof(root), true) < 0)
		SKIP("tracefs is not available on this kernel");
	return root;
}

char *probes_protoc_decode(const struct buf *trace)
{
	const char *path = test_path("probes.pftrace");
	struct test_output o;

	test_write_file(path, trace->data, trace->len);
	const char *probe[] = {"/bin/sh", "-c", "command -v protoc", NULL};
	test_run(&o, 60, probe);
	if (o.status != 0)
		SKIP("protoc is not installed (scripts/packages lists protobuf-compiler)");
	test_output_free(&o);
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "protoc -I%s --decode=perfetto.protos.Trace probes.proto < %s",
		 test_src_path("tests/protos"), path);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 120, argv);
	if (o.status != 0)
		FAIL("protoc failed (%d): %s", o.status, o.err);
	char *out = o.out;
	o.out = NULL;
	test_output_free(&o);
	return out;
}

void probes_each_packet(const struct buf *trace, void (*fn)(void *ctx, const uint8_t *p, size_t n),
			void *ctx)
{
	struct pb_reader r = pb_reader_init(trace->data, trace->len);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == 1 && f.wire == PB_LEN)
			fn(ctx, f.ptr, f.len);
}

size_t probes_count(const char *hay, const char *needle)
{
	size_t n = 0, nl = strlen(needle);

	for (const char *p = hay; (p = strstr(p, needle)); p += nl)
		n++;
	return n;
}

const char *probes_test_instance(void)
{
	static char name[64];

	/* Each test runs in a process of its own: no two runs (release and SAN builds side by
	 * side) meet in tracefs. */
	if (!name[0])
		snprintf(name, sizeof(name), "sonde-test-%d", (int)getpid());
	return name;
}

const char *probes_sleeper_name(void)
{
	static char name[16];

	/* A comm of this test process's own: system-wide recorders see every test run's
	 * sleepers, and only this one's are counted. */
	if (!name[0])
		snprintf(name, sizeof(name), "slp-%d", (int)getpid());
	return name;
}
