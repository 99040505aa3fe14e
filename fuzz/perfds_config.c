/* Fuzz target: any bytes as the DataSourceConfig the linux.perf data source receives (the
 * consumer's bytes, forwarded by the service), through its parser and, when accepted,
 * target matching against this process. */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "service/perfds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perfds_cfg c;
	char err[256], norm[64];

	if (sonde__perfds_cfg_parse(data, size, &c, err, sizeof(err)) == 0)
		(void)sonde__perfds_is_target(&c, getpid());
	sonde__perfds_cfg_free(&c);
	sonde__perfds_cmdline_normalize((const char *)data, size, norm, sizeof(norm));
	return 0;
}
