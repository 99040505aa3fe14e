/* Fuzz target: the producer's handling of GetAsyncCommand replies (setup, start, stop,
 * flush, clear incremental state, setup_tracing) from arbitrary service bytes, including
 * instance bookkeeping and writers created on start. */
#include <stddef.h>
#include <stdint.h>

#include <sonde/log.h>

#include "client/producer_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sonde_log__set_level(SONDE_LOG_OFF);
	sonde__producer_fuzz_commands(data, size);
	return 0;
}
