/* Fuzz target: the text-format TraceConfig parser takes arbitrary bytes; on success its
 * output must be well-formed protobuf that the config summary accepts. The input is also
 * summarized as a binary config. */
#include <stdint.h>
#include <stdlib.h>

#include <sonde/client.h>

#include "base/pb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(struct pb_reader r, int depth)
{
	struct pb_field f;
	int n;

	while ((n = sonde__pb_next(&r, &f)) > 0)
		if (f.wire == PB_LEN && depth < 8)
			walk(pb_sub(&f), depth + 1);
	(void)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sonde_txt_error err;
	struct sonde_trace_config_summary sum;
	uint8_t *out;
	size_t len;

	/* the same bytes as a binary config */
	(void)sonde_trace_config__summarize(data, size, &sum);

	if (sonde_trace_config__from_text((const char *)data, size, &out, &len, &err) == 0) {
		struct pb_reader r = pb_reader_init(out, len);
		struct pb_field f;
		int n;
		/* the top level is always a valid message */
		while ((n = sonde__pb_next(&r, &f)) > 0)
			;
		if (n < 0)
			abort();
		walk(pb_reader_init(out, len), 0);
		if (sonde_trace_config__summarize(out, len, &sum) < 0)
			abort();
		free(out);
	} else if (err.line < 0 || err.column < 0 || !err.msg[0]) {
		abort();
	}
	return 0;
}
