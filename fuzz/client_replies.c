/* Fuzz target: the decoders of ConsumerPort replies (TraceStats, TracingServiceState)
 * take arbitrary bytes from the service. */
#include <stdint.h>
#include <stdlib.h>

#include <sonde/client.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sonde_trace_stats st;
	struct sonde_service_state *s = NULL;

	(void)sonde_trace_stats__decode(data, size, &st);
	if (sonde_service_state__decode(data, size, &s) == 0) {
		if (!s)
			abort();
		for (size_t i = 0; i < s->n_producers; i++)
			if (s->producers[i].name[sizeof(s->producers[i].name) - 1])
				abort(); /* names are always terminated */
		sonde_service_state__free(s);
	} else if (s) {
		abort();
	}
	return 0;
}
