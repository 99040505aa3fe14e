/* Fuzz target: the protobuf reader walks arbitrary bytes, recursing into every
 * length-delimited field as if it were a message, without reading out of bounds. */
#include <stdint.h>
#include <stddef.h>

#include "base/pb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(struct pb_reader r, int depth)
{
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire == PB_LEN && depth < 8) {
			walk(pb_sub(&f), depth + 1);
			struct pb_reader packed = pb_sub(&f);
			uint64_t v;
			while (sonde__pb_packed_next(&packed, &v) > 0)
				;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	walk(pb_reader_init(data, size), 0);
	return 0;
}
