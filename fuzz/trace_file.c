/* Fuzz target: iterating the packets of an arbitrary "trace file" stays inside the buffer
 * and always makes progress. */
#include <stdint.h>
#include <stdlib.h>

#include <sonde/client.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0, last = 0, n;
	const void *pkt;
	int r;

	while ((r = sonde_trace__next_packet(data, size, &pos, &pkt, &n)) > 0) {
		const uint8_t *p = pkt;
		if (p < data || p + n > data + size || pos <= last || pos > size)
			abort();
		last = pos;
	}
	return 0;
}
