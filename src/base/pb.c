#include <string.h>

#include <sonde/error.h>

#include "base/pb.h"

size_t sonde__pb_varint_encode(uint8_t *out, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

size_t sonde__pb_varint_decode(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (size_t i = 0; i < PB_VARINT_MAX && p + i < end; i++) {
		uint64_t byte = p[i];
		/* the 10th byte may only carry the top bit of a u64 */
		if (i == 9 && byte > 1)
			return 0;
		r |= (byte & 0x7f) << (7 * i);
		if (!(byte & 0x80)) {
			*v = r;
			return i + 1;
		}
	}
	return 0;
}

void sonde__pb_put_varint_raw(struct buf *b, uint64_t v)
{
	if (sonde__buf_reserve(b, PB_VARINT_MAX) < 0)
		return;
	b->len += sonde__pb_varint_encode(b->data + b->len, v);
}

void sonde__pb_put_tag(struct buf *b, uint32_t field, enum pb_wire wire)
{
	sonde__pb_put_varint_raw(b, ((uint64_t)field << 3) | wire);
}

void sonde__pb_put_varint(struct buf *b, uint32_t field, uint64_t v)
{
	sonde__pb_put_tag(b, field, PB_VARINT);
	sonde__pb_put_varint_raw(b, v);
}

void sonde__pb_put_sint(struct buf *b, uint32_t field, int64_t v)
{
	sonde__pb_put_varint(b, field, pb_zigzag(v));
}

void sonde__pb_put_bool(struct buf *b, uint32_t field, bool v)
{
	sonde__pb_put_varint(b, field, v);
}

void sonde__pb_put_fixed32(struct buf *b, uint32_t field, uint32_t v)
{
	sonde__pb_put_tag(b, field, PB_FIXED32);
	sonde__buf_append(b, &v, 4); /* little-endian host, as the wire spec assumes */
}

void sonde__pb_put_fixed64(struct buf *b, uint32_t field, uint64_t v)
{
	sonde__pb_put_tag(b, field, PB_FIXED64);
	sonde__buf_append(b, &v, 8);
}

void sonde__pb_put_double(struct buf *b, uint32_t field, double v)
{
	uint64_t u;

	memcpy(&u, &v, 8);
	sonde__pb_put_fixed64(b, field, u);
}

void sonde__pb_put_bytes(struct buf *b, uint32_t field, const void *p, size_t n)
{
	sonde__pb_put_tag(b, field, PB_LEN);
	sonde__pb_put_varint_raw(b, n);
	sonde__buf_append(b, p, n);
}

void sonde__pb_put_string(struct buf *b, uint32_t field, const char *s)
{
	if (s)
		sonde__pb_put_bytes(b, field, s, strlen(s));
}

void sonde__pb_write_redundant_len(uint8_t out[4], uint32_t n)
{
	out[0] = (uint8_t)((n & 0x7f) | 0x80);
	out[1] = (uint8_t)(((n >> 7) & 0x7f) | 0x80);
	out[2] = (uint8_t)(((n >> 14) & 0x7f) | 0x80);
	out[3] = (uint8_t)((n >> 21) & 0x7f);
}

size_t sonde__pb_begin(struct buf *b, uint32_t field)
{
	sonde__pb_put_tag(b, field, PB_LEN);
	size_t mark = b->len;
	uint8_t zero[PB_NESTED_LEN_SIZE] = {0};
	sonde__buf_append(b, zero, sizeof(zero));
	return mark;
}

void sonde__pb_end(struct buf *b, size_t mark)
{
	if (b->failed)
		return;
	size_t n = b->len - mark - PB_NESTED_LEN_SIZE;
	if (n >= (1u << 28)) {
		b->failed = true;
		return;
	}
	sonde__pb_write_redundant_len(b->data + mark, (uint32_t)n);
}

int sonde__pb_next(struct pb_reader *r, struct pb_field *f)
{
	uint64_t tag, len;
	size_t n;

	if (r->p >= r->end)
		return 0;
	n = sonde__pb_varint_decode(r->p, r->end, &tag);
	if (!n || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
		return -SONDE_E_FORMAT;
	r->p += n;
	f->num = (uint32_t)(tag >> 3);
	f->wire = (enum pb_wire)(tag & 7);
	f->ptr = NULL;
	f->len = 0;
	switch (f->wire) {
	case PB_VARINT:
		n = sonde__pb_varint_decode(r->p, r->end, &f->u);
		if (!n)
			return -SONDE_E_FORMAT;
		r->p += n;
		return 1;
	case PB_FIXED64:
	case PB_FIXED32: {
		size_t w = f->wire == PB_FIXED64 ? 8 : 4;
		if ((size_t)(r->end - r->p) < w)
			return -SONDE_E_FORMAT;
		f->u = 0;
		memcpy(&f->u, r->p, w);
		r->p += w;
		return 1;
	}
	case PB_LEN:
		n = sonde__pb_varint_decode(r->p, r->end, &len);
		if (!n || len > (uint64_t)(r->end - r->p - n))
			return -SONDE_E_FORMAT;
		f->ptr = r->p + n;
		f->len = (size_t)len;
		r->p += n + len;
		return 1;
	default:
		return -SONDE_E_FORMAT;
	}
}

int sonde__pb_packed_next(struct pb_reader *r, uint64_t *v)
{
	if (r->p >= r->end)
		return 0;
	size_t n = sonde__pb_varint_decode(r->p, r->end, v);
	if (!n)
		return -SONDE_E_FORMAT;
	r->p += n;
	return 1;
}
