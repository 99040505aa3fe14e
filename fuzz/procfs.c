/* Fuzz target: linux.process_stats' and linux.sys_stats' parsers over arbitrary bytes:
 * /proc/PID/status and stat, meminfo/vmstat lines, /proc/stat, and both configs. */
#include <stdint.h>
#include <stddef.h>

#include "probes/procstats.h"
#include "probes/sysstats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void kv(void *ctx, const char *key, size_t len, uint64_t value)
{
	size_t *sink = ctx;
	*sink += (size_t)sonde__sysstats_meminfo_id(key, len) + (size_t)sonde__sysstats_vmstat_id(key, len) +
		 (size_t)value;
}

static void cpu(void *ctx, const struct sysstats_cpu_times *t)
{
	*(size_t *)ctx += (size_t)(t->user + t->steal);
}

static void count(void *ctx, int kind, int index, uint64_t value)
{
	*(size_t *)ctx += (size_t)(kind + index) + (size_t)value;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	size_t sink = 0;
	struct procstats_status st;
	struct procstats_stat ps;
	struct procstats_config pc;
	static struct sysstats_config sc;
	const struct sysstats_stat_cb cb = {cpu, count, NULL, &sink};

	sonde__procstats_parse_status(text, size, &st);
	sonde__procstats_parse_stat(text, size, &ps);
	sonde__sysstats_parse_kv(text, size, kv, &sink);
	sonde__sysstats_parse_stat(text, size, &cb);
	sonde__procstats_config_parse(data, size, &pc);
	sonde__sysstats_config_parse(data, size, &sc);
	*(volatile size_t *)&sink = sink;
	return 0;
}
