/* Fuzz target: the /proc text parsers (maps, stat, status, cpu and pid lists, mountinfo's
 * /proc options) over arbitrary bytes. */
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "perf/event.h"
#include "proc/maps.h"
#include "proc/perfauth.h"
#include "proc/proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int touch(void *ctx, const struct proc_map *m)
{
	size_t *total = ctx;

	/* Read every byte of the path the parser hands out. */
	for (size_t i = 0; i < m->path_len; i++)
		*total += (unsigned char)m->path[i];
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	size_t total = 0;
	struct proc_stat st;
	uid_t r, e;
	int cpus[64];
	pid_t pids[64], tgid;

	sonde__proc_maps_parse(text, size, touch, &total);
	sonde__proc_stat_parse(text, size, &st);
	sonde__proc_status_parse_uids(text, size, &r, &e);
	sonde__proc_status_parse_tgid(text, size, &tgid);
	sonde__perf_parse_cpu_list(text, size, cpus, 64);
	sonde__proc_parse_pid_list(text, size, pids, 64);
	struct perfauth_proc_hide h;
	sonde__perfauth_parse_proc_hide(text, size, &h);
	return 0;
}
