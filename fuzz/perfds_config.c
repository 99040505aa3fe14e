/* Fuzz target: any bytes as the DataSourceConfig the linux.perf data source receives (the
 * consumer's bytes, forwarded by the service), through its parser and, when accepted,
 * target matching against this process and its cmdline patterns against the input as a
 * /proc/PID/cmdline. */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "probes/perfds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perfds_cfg c;
	char err[256];

	if (sonde__perfds_cfg_parse(data, size, &c, err, sizeof(err)) == 0) {
		(void)sonde__perfds_is_target(&c, getpid());
		for (size_t i = 0; i < c.n_cmdlines; i++)
			(void)sonde__perfds_cmdline_match(c.cmdlines[i], (const char *)data, size);
	}
	sonde__perfds_cfg_free(&c);
	return 0;
}
