/* Iterating the TracePacket records of a trace file (perfetto-wire.md §6.1). */
#include <sonde/client.h>
#include <sonde/error.h>

#include "base/pb.h"

/* A varint that fails to decode is truncated if the buffer ends within 10 bytes of its
 * start (it might have continued), malformed otherwise. */
static int bad_varint(const uint8_t *p, const uint8_t *end)
{
	return end - p < PB_VARINT_MAX ? -SONDE_E_TRUNCATED : -SONDE_E_FORMAT;
}

int sonde_trace__next_packet(const void *buf, size_t len, size_t *pos, const void **pkt,
			    size_t *pkt_len)
{
	const uint8_t *base = buf, *end = base + len;

	while (*pos < len) {
		const uint8_t *p = base + *pos;
		uint64_t tag, v;
		size_t k = sonde__pb_varint_decode(p, end, &tag);
		if (!k)
			return bad_varint(p, end);
		p += k;
		if ((tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
			return -SONDE_E_FORMAT;
		switch (tag & 7) {
		case PB_VARINT:
			if (!(k = sonde__pb_varint_decode(p, end, &v)))
				return bad_varint(p, end);
			p += k;
			break;
		case PB_FIXED64:
		case PB_FIXED32: {
			size_t w = (tag & 7) == PB_FIXED64 ? 8 : 4;
			if ((size_t)(end - p) < w)
				return -SONDE_E_TRUNCATED;
			p += w;
			break;
		}
		case PB_LEN:
			if (!(k = sonde__pb_varint_decode(p, end, &v)))
				return bad_varint(p, end);
			p += k;
			if (v > (uint64_t)(end - p))
				return -SONDE_E_TRUNCATED;
			if ((tag >> 3) == 1) {
				*pkt = p;
				*pkt_len = (size_t)v;
				*pos = (size_t)(p + v - base);
				return 1;
			}
			p += v;
			break;
		default:
			return -SONDE_E_FORMAT;
		}
		*pos = (size_t)(p - base);
	}
	return 0;
}
