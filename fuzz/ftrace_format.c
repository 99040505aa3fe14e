/* Fuzz target: tracefs text and linux.ftrace's config: an event format file (and its
 * fields read out of the same bytes taken as a record), events/header_page,
 * events/header_event, per_cpu/cpuN/stats, and FtraceConfig bytes. */
#include <stdint.h>
#include <stddef.h>

#include "probes/ftrace_config.h"
#include "perf/ftrace_format.h"
#include "probes/ftrace_page.h"
#include "perf/tracefs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct ftrace_format f;
	struct ftrace_page_layout l;
	struct tracefs_cpu_stats st;
	struct ftrace_config c;
	volatile size_t sink = 0;

	if (sonde__ftrace_format_parse(text, size, &f) == 0) {
		for (size_t i = 0; i < f.nfields; i++) {
			int64_t v;
			const char *s;
			size_t n;
			if (sonde__ftrace_field_int(&f.fields[i], data, size, &v))
				sink += (size_t)v;
			if (sonde__ftrace_field_str(&f.fields[i], data, size, &s, &n))
				for (size_t k = 0; k < n; k++)
					sink += (unsigned char)s[k];
		}
		sonde__ftrace_format_free(&f);
	}
	sonde__ftrace_page_layout_parse(text, size, &l);
	sonde__ftrace_header_event_check(text, size);
	sonde__tracefs_cpu_stats_parse(text, size, &st);
	if (sonde__ftrace_config_parse(data, size, &c) == 0) {
		for (size_t i = 0; i < c.nevents; i++)
			sink += c.events[i][0];
		sonde__ftrace_config_free(&c);
	}
	(void)sink;
	return 0;
}
